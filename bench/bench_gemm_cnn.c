/* mpcl-bench gemm-cnn: the GEMMs of one training step of the CNN (batch
 * 128, bench/models/cnn.json) as its layers call them, in f32 (mpcl-f32) and
 * in bf16 (mpcl-mixed) with and without AVX512-BF16's dot product
 * (MPCL_BF16_DOT=off), interleaved. The figure is the best of ROUNDS
 * rounds, each the mean of REPS calls; "dot" is the bf16 f32-fma kernel's
 * time over the dot kernel's (above 1: the dot kernel wins), and is the
 * same kernel twice where the dot kernel does not apply (src/compute/gemm.c)
 * or the device did not verify it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

enum { ROUNDS = 7, REPS = 5, MODES = 3 };

typedef struct gemm_case {
    const char *name;
    size_t m, n, k;
    bool ta, tb;
} gemm_case;

/* C = op(A) op(B): im2col columns x weights, and their gradients. */
static const gemm_case cases[] = {
    {"conv1 forward", 128 * 26 * 26, 32, 9, false, false},
    {"conv1 weight gradient", 9, 32, 128 * 26 * 26, true, false},
    {"conv2 forward", 128 * 11 * 11, 64, 288, false, false},
    {"conv2 weight gradient", 288, 64, 128 * 11 * 11, true, false},
    {"conv2 input gradient", 128 * 11 * 11, 288, 64, false, true},
    {"dense1 forward", 128, 128, 1600, false, false},
    {"dense1 weight gradient", 1600, 128, 128, true, false},
    {"dense1 input gradient", 128, 1600, 128, false, true},
};

static const struct {
    const char *name;
    mpcl_dtype dtype;
    mpcl_gemm_path path;
    bool dot_off;
} modes[MODES] = {
    {"f32", MPCL_DTYPE_F32, MPCL_GEMM_MPCL_F32, false},
    {"bf16 fma", MPCL_DTYPE_BF16, MPCL_GEMM_MPCL_MIXED, true},
    {"bf16 dot", MPCL_DTYPE_BF16, MPCL_GEMM_MPCL_MIXED, false},
};

static mpcl_status make(mpcl_context *ctx, mpcl_dtype dt, size_t rows, size_t cols,
                        mpcl_tensor **t) {
    mpcl_status st = mpcl_tensor_create(ctx, dt, rows, cols, t);
    return st == MPCL_OK ? mpcl_tensor_fill(*t, 0.25f) : st;
}

/* *seconds per call of the case in mode `mode`. */
static mpcl_status time_case(mpcl_context *ctx, const gemm_case *c, int mode, double *seconds) {
    mpcl_dtype dt = modes[mode].dtype;
    mpcl_tensor *a = NULL, *b = NULL, *out = NULL;
    mpcl_status st = make(ctx, dt, c->ta ? c->k : c->m, c->ta ? c->m : c->k, &a);
    if (st == MPCL_OK) st = make(ctx, dt, c->tb ? c->n : c->k, c->tb ? c->k : c->n, &b);
    if (st == MPCL_OK) st = make(ctx, dt, c->m, c->n, &out);
    if (modes[mode].dot_off)
        setenv("MPCL_BF16_DOT", "off", 1);
    else
        unsetenv("MPCL_BF16_DOT");
    double t0 = 0;
    for (int i = 0; i <= REPS && st == MPCL_OK; i++) {
        if (i == 1) { /* the first call is a warm-up */
            if ((st = mpcl_context_finish(ctx)) != MPCL_OK) break;
            t0 = bench_now_s();
        }
        st = mpcl_gemm(ctx, modes[mode].path, c->ta, c->tb, 1.0f, a, b, 0.0f, out);
    }
    if (st == MPCL_OK) st = mpcl_context_finish(ctx);
    *seconds = (bench_now_s() - t0) / REPS;
    mpcl_tensor_destroy(a);
    mpcl_tensor_destroy(b);
    mpcl_tensor_destroy(out);
    return st;
}

int bench_cmd_gemm_cnn(mpcl_context *ctx, const bench_opts *opts) {
    const mpcl_device_info *d = mpcl_context_device(ctx);
    FILE *note = opts->json ? stderr : stdout;
    fprintf(note, "device: %s; bf16 dot %s; best of %d rounds of %d calls, modes interleaved\n",
            d->name, mpcl_bf16_dot_name(d->bf16_dot), ROUNDS, REPS);
    jsonw w, *j = opts->json ? &w : NULL;
    if (j) {
        jsonw_init(j, stdout);
        jsonw_array_begin(j);
    } else {
        printf("%-24s %-18s %10s %10s %10s %6s\n", "GEMM", "m x n x k", "f32 us", "bf16 fma",
               "bf16 dot", "dot");
    }
    const char *saved = getenv("MPCL_BF16_DOT");
    int rc = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0] && rc == 0; ci++) {
        const gemm_case *c = &cases[ci];
        double best[MODES] = {INFINITY, INFINITY, INFINITY};
        for (int r = 0; r < ROUNDS && rc == 0; r++) {
            for (int mode = 0; mode < MODES; mode++) {
                double s = 0;
                mpcl_status st = time_case(ctx, c, mode, &s);
                if (st != MPCL_OK) {
                    rc = bench_fail(c->name, st);
                    break;
                }
                if (s < best[mode]) best[mode] = s;
            }
        }
        if (rc) break;
        char dims[48];
        snprintf(dims, sizeof dims, "%zux%zux%zu %c%c", c->m, c->n, c->k, c->ta ? 'T' : 'N',
                 c->tb ? 'T' : 'N');
        if (j) {
            jsonw_object_begin(j);
            jsonw_kv_string(j, "gemm", c->name);
            jsonw_kv_string(j, "shape", dims);
            jsonw_kv_number(j, "f32_us", best[0] * 1e6);
            jsonw_kv_number(j, "bf16_fma_us", best[1] * 1e6);
            jsonw_kv_number(j, "bf16_dot_us", best[2] * 1e6);
            jsonw_object_end(j);
        } else {
            printf("%-24s %-18s %10.1f %10.1f %10.1f %6.2f\n", c->name, dims, best[0] * 1e6,
                   best[1] * 1e6, best[2] * 1e6, best[1] / best[2]);
        }
    }
    if (saved)
        setenv("MPCL_BF16_DOT", saved, 1);
    else
        unsetenv("MPCL_BF16_DOT");
    if (j) {
        jsonw_array_end(j);
        fputc('\n', stdout);
    }
    return rc;
}
