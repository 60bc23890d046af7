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

/* The OpenBLAS reference (blas_core.c): when OpenBLAS picked kernels below
 * what this CPU runs (a generic SSE core on a CPU newer than it knows), sets
 * OPENBLAS_CORETYPE and executes the bench again; returns otherwise. */
void bench_openblas_pick_core(char **argv);
/* The core OpenBLAS runs ("Zen", "Haswell", "SkylakeX", ...) and what the
 * CPU offers ("AVX-512", "AVX2+FMA", ...). */
const char *bench_openblas_core(void);
const char *bench_cpu_features(void);

int bench_cmd_gemm(mpcl_context *ctx, const bench_opts *opts);
int bench_cmd_gemm_rounds(mpcl_context *ctx, const bench_opts *opts);
int bench_cmd_train(mpcl_context *ctx, const bench_opts *opts);
int bench_cmd_train_rounds(mpcl_context *ctx, const bench_opts *opts);
int bench_cmd_elementwise(mpcl_context *ctx, const bench_opts *opts);
int bench_cmd_conv(mpcl_context *ctx, const bench_opts *opts);
int bench_cmd_gemm_cnn(mpcl_context *ctx, const bench_opts *opts);
int bench_cmd_gemm_square(mpcl_context *ctx, const bench_opts *opts);

#endif
