/* What the subcommands of mpcl-bench share. */
#ifndef MPCL_BENCH_H
#define MPCL_BENCH_H

#include <stdbool.h>

#include "jsonw.h"
#include "mpcl/mpcl.h"

typedef struct bench_opts {
    const char *device; /* NULL: $MPCL_DEVICE or the default rule */
    bool json;
} bench_opts;

double bench_now_s(void);
/* Prints "mpcl-bench: what: STATUS: detail" and returns 1. */
int bench_fail(const char *what, mpcl_status st);

int bench_cmd_gemm(mpcl_context *ctx, const bench_opts *opts);
int bench_cmd_train(mpcl_context *ctx, const bench_opts *opts);
int bench_cmd_elementwise(mpcl_context *ctx, const bench_opts *opts);

#endif
