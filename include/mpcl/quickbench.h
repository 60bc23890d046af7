/* A few seconds of measurement per device, for `mpcl-probe --bench`. */
#ifndef MPCL_QUICKBENCH_H
#define MPCL_QUICKBENCH_H

#include "mpcl/context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

typedef struct mpcl_quick_bench {
    double sgemm_gflops;  /* CLBlast SGEMM, 1024^3, row-major NN */
    double hgemm_gflops;  /* CLBlast HGEMM, same shape; NAN when fp16 math is not usable */
    double copy_gb_per_s; /* device-to-device copy kernel, bytes read + written */
    double launch_us;     /* mean time of an empty-ish kernel enqueued and finished */
} mpcl_quick_bench;

mpcl_status mpcl_quick_bench_run(mpcl_context *ctx, mpcl_quick_bench *out);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
