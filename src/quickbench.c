/* mpcl-probe --bench: CLBlast GEMM rate, copy bandwidth, launch latency.
 * Sized to finish in a few seconds on a 2-core CPU device. */
#include "clblast_status.h"

#include <clblast_c.h>
#include <math.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static mpcl_status fill(mpcl_context *ctx, mpcl_dtype dtype, cl_mem buf, size_t n, float value) {
    mpcl_status st;
    cl_kernel k;
    if ((st = mpcl__kernel(ctx, dtype, "mpcl_fill", &k)) != MPCL_OK) return st;
    cl_uint n32 = (cl_uint)n;
    CHECK_CL(ctx, clSetKernelArg(k, 0, sizeof buf, &buf));
    CHECK_CL(ctx, clSetKernelArg(k, 1, sizeof value, &value));
    CHECK_CL(ctx, clSetKernelArg(k, 2, sizeof n32, &n32));
    size_t global = (n + 63) / 64 * 64;
    CHECK_CL(ctx, clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
cleanup:
    return st;
}

/* GFLOP/s of an n^3 GEMM in `dtype` through CLBlast: one untimed call (CLBlast
 * compiles its kernels on the first), then timed calls for at least 0.5 s. */
static mpcl_status gemm_rate(mpcl_context *ctx, mpcl_dtype dtype, size_t n, double *gflops) {
    mpcl_status st = MPCL_OK;
    cl_int err;
    size_t elem = dtype == MPCL_DTYPE_F16 ? 2 : 4;
    cl_mem buf[3] = {0};
    for (int i = 0; i < 3; i++) {
        buf[i] = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, n * n * elem, NULL, &err);
        CHECK_CL(ctx, err);
        if ((st = fill(ctx, dtype, buf[i], n * n, 0.01f)) != MPCL_OK) goto cleanup;
    }
    int reps = 0;
    double t0 = 0;
    for (int it = 0;; it++) {
        if (it == 1) {
            CHECK_CL(ctx, clFinish(ctx->queue));
            t0 = now_s();
        }
        if (dtype == MPCL_DTYPE_F16) {
            cl_half one = mpcl_f32_to_f16(1.0f), zero = 0;
            CHECK_CLBLAST(ctx, CLBlastHgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                                            CLBlastTransposeNo, n, n, n, one, buf[0], 0, n, buf[1],
                                            0, n, zero, buf[2], 0, n, &ctx->queue, NULL));
        } else {
            CHECK_CLBLAST(ctx, CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                                            CLBlastTransposeNo, n, n, n, 1.0f, buf[0], 0, n, buf[1],
                                            0, n, 0.0f, buf[2], 0, n, &ctx->queue, NULL));
        }
        if (it >= 1) {
            reps++;
            CHECK_CL(ctx, clFinish(ctx->queue));
            if (now_s() - t0 >= 0.5 && reps >= 2) break;
        }
    }
    *gflops = 2.0 * (double)n * (double)n * (double)n * reps / (now_s() - t0) * 1e-9;
cleanup:
    for (int i = 0; i < 3; i++)
        if (buf[i]) clReleaseMemObject(buf[i]);
    return st;
}

static mpcl_status copy_rate(mpcl_context *ctx, double *gb_per_s) {
    mpcl_status st = MPCL_OK;
    cl_int err;
    const size_t n = (size_t)16 << 20; /* floats: 64 MiB per buffer */
    cl_mem src = NULL, dst = NULL;
    src = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, n * 4, NULL, &err);
    CHECK_CL(ctx, err);
    dst = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, n * 4, NULL, &err);
    CHECK_CL(ctx, err);
    if ((st = fill(ctx, MPCL_DTYPE_F32, src, n, 1.0f)) != MPCL_OK) goto cleanup;
    if ((st = fill(ctx, MPCL_DTYPE_F32, dst, n, 0.0f)) != MPCL_OK) goto cleanup;
    cl_kernel k;
    if ((st = mpcl__kernel(ctx, MPCL_DTYPE_F32, "mpcl_copy_f32x4", &k)) != MPCL_OK) goto cleanup;
    cl_uint n4 = (cl_uint)(n / 4);
    CHECK_CL(ctx, clSetKernelArg(k, 0, sizeof dst, &dst));
    CHECK_CL(ctx, clSetKernelArg(k, 1, sizeof src, &src));
    CHECK_CL(ctx, clSetKernelArg(k, 2, sizeof n4, &n4));
    size_t global = n / 4;
    const int reps = 5;
    CHECK_CL(ctx, clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK_CL(ctx, clFinish(ctx->queue));
    double t0 = now_s();
    for (int i = 0; i < reps; i++)
        CHECK_CL(ctx, clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK_CL(ctx, clFinish(ctx->queue));
    *gb_per_s = 2.0 * (double)(n * 4) * reps / (now_s() - t0) * 1e-9;
cleanup:
    if (src) clReleaseMemObject(src);
    if (dst) clReleaseMemObject(dst);
    return st;
}

/* Mean of enqueue + finish for a one-item kernel: what a host round trip costs. */
static mpcl_status launch_latency(mpcl_context *ctx, double *us) {
    mpcl_status st = MPCL_OK;
    cl_int err;
    cl_mem buf = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, 256, NULL, &err);
    CHECK_CL(ctx, err);
    const int reps = 200;
    if ((st = fill(ctx, MPCL_DTYPE_F32, buf, 1, 0.0f)) != MPCL_OK) goto cleanup;
    CHECK_CL(ctx, clFinish(ctx->queue));
    double t0 = now_s();
    for (int i = 0; i < reps; i++) {
        if ((st = fill(ctx, MPCL_DTYPE_F32, buf, 1, (float)i)) != MPCL_OK) goto cleanup;
        CHECK_CL(ctx, clFinish(ctx->queue));
    }
    *us = (now_s() - t0) / reps * 1e6;
cleanup:
    if (buf) clReleaseMemObject(buf);
    return st;
}

mpcl_status mpcl_quick_bench_run(mpcl_context *ctx, mpcl_quick_bench *out) {
    out->sgemm_gflops = out->hgemm_gflops = out->copy_gb_per_s = out->launch_us = NAN;
    mpcl_status st = gemm_rate(ctx, MPCL_DTYPE_F32, 1024, &out->sgemm_gflops);
    if (st == MPCL_OK && mpcl_plan_fp16_math_usable(&ctx->info, ctx->overrides.fp16))
        st = gemm_rate(ctx, MPCL_DTYPE_F16, 1024, &out->hgemm_gflops);
    if (st == MPCL_OK) st = copy_rate(ctx, &out->copy_gb_per_s);
    if (st == MPCL_OK) st = launch_latency(ctx, &out->launch_us);
    return st;
}
