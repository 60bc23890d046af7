/* mpcl-bench elementwise: achieved bandwidth of the elementwise kernels on
 * 16 MB of f32 (4096 x 1024), against a host memcpy of 16 MB measured in the
 * same run. Bytes count what a kernel must move at least: every input read
 * once, every output written once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { ROWS = 4096, COLS = 1024, REPS = 20 };

typedef struct ew_row {
    const char *name;
    double bytes, seconds;
} ew_row;

typedef mpcl_status (*ew_fn)(mpcl_context *ctx, mpcl_tensor *const *t);

static mpcl_status relu_fwd(mpcl_context *ctx, mpcl_tensor *const *t) {
    return mpcl_bias_act_forward(ctx, t[1], t[0], t[4], MPCL_ACT_RELU);
}
static mpcl_status relu_bwd(mpcl_context *ctx, mpcl_tensor *const *t) {
    return mpcl_bias_act_backward(ctx, t[2], t[0], t[1], MPCL_ACT_RELU);
}
/* GELU's cost is its arithmetic, not its bytes: the GPT's MLP runs it. */
static mpcl_status gelu_fwd(mpcl_context *ctx, mpcl_tensor *const *t) {
    return mpcl_bias_act_forward_z(ctx, t[1], t[2], t[0], t[4], MPCL_ACT_GELU);
}
static mpcl_status gelu_bwd(mpcl_context *ctx, mpcl_tensor *const *t) {
    return mpcl_bias_act_backward(ctx, t[1], t[0], t[2], MPCL_ACT_GELU);
}
static mpcl_status bias_grad(mpcl_context *ctx, mpcl_tensor *const *t) {
    return mpcl_bias_grad(ctx, t[5], t[0]);
}
static mpcl_status cast_down(mpcl_context *ctx, mpcl_tensor *const *t) {
    return mpcl_cast(ctx, t[3], t[6]);
}
static mpcl_status cast_up(mpcl_context *ctx, mpcl_tensor *const *t) {
    return mpcl_cast(ctx, t[6], t[3]);
}

/* Seconds per call: one untimed call, then REPS back to back, one finish. */
static double time_fn(mpcl_context *ctx, ew_fn fn, mpcl_tensor *const *t) {
    if (fn(ctx, t) != MPCL_OK || mpcl_context_finish(ctx) != MPCL_OK) return NAN;
    double t0 = bench_now_s();
    for (int i = 0; i < REPS; i++)
        if (fn(ctx, t) != MPCL_OK) return NAN;
    if (mpcl_context_finish(ctx) != MPCL_OK) return NAN;
    return (bench_now_s() - t0) / REPS;
}

static double memcpy_seconds(void) {
    size_t n = (size_t)ROWS * COLS * 4;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) return NAN;
    memset(a, 1, n);
    memset(b, 0, n);
    double best = INFINITY;
    for (int r = 0; r < 5; r++) {
        double t0 = bench_now_s();
        for (int i = 0; i < REPS; i++) {
            memcpy(i & 1 ? a : b, i & 1 ? b : a, n);
        }
        best = fmin(best, (bench_now_s() - t0) / REPS);
    }
    volatile char sink = a[n / 2] + b[n / 3];
    (void)sink;
    free(a);
    free(b);
    return best;
}

int bench_cmd_elementwise(mpcl_context *ctx, const bench_opts *opts) {
    const double n = (double)ROWS * COLS;
    double host = memcpy_seconds(), host_gbs = 2 * n * 4 / host * 1e-9;
    ew_row rows[24];
    size_t nrow = 0;
    const mpcl_dtype storages[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};
    for (int s = 0; s < 3; s++) {
        mpcl_dtype d = storages[s];
        double e = (double)mpcl_dtype_size(d);
        mpcl_tensor *t[7] = {0};
        mpcl_status st = MPCL_OK;
        const size_t shape[7][2] = {{ROWS, COLS}, {ROWS, COLS}, {ROWS, COLS}, {ROWS, COLS},
                                    {1, COLS},    {1, COLS},    {ROWS, COLS}};
        /* t[3]: the 16-bit side of the casts (f16 in the f32 round); t[5], the
         * bias gradient, is in the storage dtype like every gradient. */
        const mpcl_dtype half = d == MPCL_DTYPE_F32 ? MPCL_DTYPE_F16 : d;
        const mpcl_dtype dt[7] = {d, d, d, half, MPCL_DTYPE_F32, d, MPCL_DTYPE_F32};
        for (int i = 0; i < 7 && st == MPCL_OK; i++)
            st = mpcl_tensor_create(ctx, dt[i], shape[i][0], shape[i][1], &t[i]);
        for (int i = 0; i < 7 && st == MPCL_OK; i++)
            if (dt[i] != MPCL_DTYPE_I32) st = mpcl_tensor_fill(t[i], 0.5f);
        if (st != MPCL_OK) {
            for (int i = 0; i < 7; i++) mpcl_tensor_destroy(t[i]);
            return bench_fail("allocating 16 MB tensors", st);
        }
        const char *tag = mpcl_dtype_name(d);
        static char names[21][48];
        char *nm = names[7 * s];
        snprintf(nm + 0 * 48, 48, "bias+relu forward %s", tag);
        snprintf(nm + 1 * 48, 48, "relu backward %s", tag);
        snprintf(nm + 2 * 48, 48, "bias+gelu forward_z %s", tag);
        snprintf(nm + 3 * 48, 48, "gelu backward %s", tag);
        snprintf(nm + 4 * 48, 48, "bias grad %s", tag);
        snprintf(nm + 5 * 48, 48, "cast f32->%s", tag);
        snprintf(nm + 6 * 48, 48, "cast %s->f32", tag);
        rows[nrow++] = (ew_row){nm + 0 * 48, 2 * n * e, time_fn(ctx, relu_fwd, t)};
        rows[nrow++] = (ew_row){nm + 1 * 48, 3 * n * e, time_fn(ctx, relu_bwd, t)};
        rows[nrow++] = (ew_row){nm + 2 * 48, 3 * n * e, time_fn(ctx, gelu_fwd, t)};
        rows[nrow++] = (ew_row){nm + 3 * 48, 3 * n * e, time_fn(ctx, gelu_bwd, t)};
        rows[nrow++] = (ew_row){nm + 4 * 48, n * e, time_fn(ctx, bias_grad, t)};
        if (d != MPCL_DTYPE_F32) {
            rows[nrow++] = (ew_row){nm + 5 * 48, n * 6, time_fn(ctx, cast_down, t)};
            rows[nrow++] = (ew_row){nm + 6 * 48, n * 6, time_fn(ctx, cast_up, t)};
        }
        for (int i = 0; i < 7; i++) mpcl_tensor_destroy(t[i]);
    }
    if (opts->json) {
        jsonw w;
        jsonw_init(&w, stdout);
        jsonw_array_begin(&w);
        for (size_t i = 0; i < nrow; i++) {
            jsonw_object_begin(&w);
            jsonw_kv_string(&w, "kernel", rows[i].name);
            jsonw_kv_number(&w, "us", rows[i].seconds * 1e6);
            jsonw_kv_number(&w, "gb_per_s", rows[i].bytes / rows[i].seconds * 1e-9);
            jsonw_kv_number(&w, "memcpy_gb_per_s", host_gbs);
            jsonw_kv_number(&w, "ratio", rows[i].bytes / rows[i].seconds * 1e-9 / host_gbs);
            jsonw_object_end(&w);
        }
        jsonw_array_end(&w);
        return 0;
    }
    printf(
        "elementwise kernels on 4096x1024 (16 MB in f32); host memcpy of 16 MB: %.1f GB/s "
        "(read + write)\n",
        host_gbs);
    printf("%-24s %10s %10s %8s\n", "kernel", "us", "GB/s", "ratio");
    for (size_t i = 0; i < nrow; i++) {
        double gbs = rows[i].bytes / rows[i].seconds * 1e-9;
        printf("%-24s %10.0f %10.1f %8.2f\n", rows[i].name, rows[i].seconds * 1e6, gbs,
               gbs / host_gbs);
    }
    return 0;
}
