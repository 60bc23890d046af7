/* mpcl-probe --bench: CLBlast GEMM rate, copy bandwidth, launch latency.
 * Sized to finish in a few seconds on a 2-core CPU device. Built on the
 * library's own calls (tensors, fill, mpcl_gemm), so it measures what
 * training runs. */
#include <math.h>
#include <time.h>

#include "compute/compute.h"
#include "mpcl/gemm.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* GFLOP/s of an n^3 GEMM through a CLBlast path: one untimed call (CLBlast
 * compiles its kernels on the first), then timed calls for at least 0.5 s.
 * C = A B + C (beta 1: no zero-fill of C enters the timing). */
static mpcl_status gemm_rate(mpcl_context *ctx, mpcl_gemm_path path, size_t n, double *gflops) {
    mpcl_dtype dtype = path == MPCL_GEMM_CLBLAST_HGEMM ? MPCL_DTYPE_F16 : MPCL_DTYPE_F32;
    mpcl_tensor *t[3] = {0};
    mpcl_status st = MPCL_OK;
    for (int i = 0; i < 3 && st == MPCL_OK; i++) {
        st = mpcl_tensor_create(ctx, dtype, n, n, &t[i]);
        if (st == MPCL_OK) st = mpcl_tensor_fill(t[i], 0.01f);
    }
    int reps = 0;
    double t0 = 0;
    for (int it = 0; st == MPCL_OK; it++) {
        if (it == 1) {
            if ((st = mpcl_context_finish(ctx)) != MPCL_OK) break;
            t0 = now_s();
        }
        if ((st = mpcl_gemm(ctx, path, false, false, 1.0f, t[0], t[1], 1.0f, t[2])) != MPCL_OK)
            break;
        if (it >= 1) {
            reps++;
            if ((st = mpcl_context_finish(ctx)) != MPCL_OK) break;
            if (now_s() - t0 >= 0.5 && reps >= 2) break;
        }
    }
    if (st == MPCL_OK)
        *gflops = 2.0 * (double)n * (double)n * (double)n * reps / (now_s() - t0) * 1e-9;
    for (int i = 0; i < 3; i++) mpcl_tensor_destroy(t[i]);
    return st;
}

/* Device-to-device copy, bytes read + written per second, 64 MiB buffers. */
static mpcl_status copy_rate(mpcl_context *ctx, double *gb_per_s) {
    const size_t n = (size_t)16 << 20; /* floats */
    mpcl_tensor *src = NULL, *dst = NULL;
    mpcl_status st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, n / 1024, 1024, &src);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, n / 1024, 1024, &dst);
    if (st == MPCL_OK) st = mpcl_tensor_fill(src, 1.0f);
    cl_kernel k;
    if (st == MPCL_OK) st = mpcl__kernel(ctx, MPCL_DTYPE_F32, "mpcl_copy_f32x4", &k);
    /* The kernel copies MPCL_ABI_COPY_F32_LANES floats per item. */
    cl_uint n4 = (cl_uint)(n / MPCL_ABI_COPY_F32_LANES);
    if (st == MPCL_OK)
        st = mpcl__set_args(ctx, k, "mpcl_copy_f32x4", MPCL_ARG(dst->mem), MPCL_ARG(src->mem),
                            MPCL_ARG(n4), MPCL_ARGS_END);
    const int reps = 5;
    double t0 = 0;
    for (int i = -1; i < reps && st == MPCL_OK; i++) {
        if (i == 0 && (st = mpcl_context_finish(ctx)) == MPCL_OK) t0 = now_s();
        if (st == MPCL_OK) st = mpcl__launch_1d(ctx, k, "mpcl_copy_f32x4", n4, 0);
    }
    if (st == MPCL_OK) st = mpcl_context_finish(ctx);
    if (st == MPCL_OK) *gb_per_s = 2.0 * (double)(n * 4) * reps / (now_s() - t0) * 1e-9;
    mpcl_tensor_destroy(src);
    mpcl_tensor_destroy(dst);
    return st;
}

/* Mean of enqueue + finish for a one-element fill: what a host round trip costs. */
static mpcl_status launch_latency(mpcl_context *ctx, double *us) {
    const int reps = 200;
    mpcl_tensor *t = NULL;
    mpcl_status st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, 1, &t);
    if (st == MPCL_OK) st = mpcl_tensor_fill(t, 0.0f);
    if (st == MPCL_OK) st = mpcl_context_finish(ctx);
    double t0 = now_s();
    for (int i = 0; i < reps && st == MPCL_OK; i++) {
        st = mpcl_tensor_fill(t, (float)i);
        if (st == MPCL_OK) st = mpcl_context_finish(ctx);
    }
    if (st == MPCL_OK) *us = (now_s() - t0) / reps * 1e6;
    mpcl_tensor_destroy(t);
    return st;
}

mpcl_status mpcl_quick_bench_run(mpcl_context *ctx, mpcl_quick_bench *out) {
    out->sgemm_gflops = out->hgemm_gflops = out->copy_gb_per_s = out->launch_us = NAN;
    mpcl_status st = gemm_rate(ctx, MPCL_GEMM_CLBLAST_SGEMM, 1024, &out->sgemm_gflops);
    if (st == MPCL_OK && mpcl_plan_hgemm_usable(&ctx->info, ctx->overrides.fp16))
        st = gemm_rate(ctx, MPCL_GEMM_CLBLAST_HGEMM, 1024, &out->hgemm_gflops);
    if (st == MPCL_OK) st = copy_rate(ctx, &out->copy_gb_per_s);
    if (st == MPCL_OK) st = launch_latency(ctx, &out->launch_us);
    return st;
}
