/* mpcl_gemm on every path the device can run, all four transpose pairs, edge
 * and MLP shapes, against a double host reference; shape, dtype and path
 * errors with their exact status and C untouched. */
#include "testutil.h"

#include "compute/compute.h" /* mpcl__gemm_force_tiles */

#include "mpcl/cl_interop.h" /* CL_TARGET_OPENCL_VERSION before clblast_c.h */
#include <clblast_c.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gemm_case {
    size_t m, n, k;
    bool big;   /* skipped on slow devices (Oclgrind runs ~1e6 ops/s) */
    bool quick; /* the only cases run on Rusticl (see run_variant) */
} gemm_case;

/* {m, n, k, big, quick} */
static const gemm_case cases[] = {
    {1, 1, 1, false, false},
    {7, 33, 5, false, false},
    {33, 7, 130, false, false},
    {130, 7, 33, false, false},
    {17, 31, 9, false, false},
    {16, 16, 16, false, false},
    {8, 10, 3, false, false},
    {40, 20, 12, false, true},
    {128, 10, 128, true, false},
    {128, 128, 10, true, false},
    {128, 128, 784, true, false},
    {784, 128, 128, true, false},
    /* Whole 16-deep blocks of rows that start at odd multiples of 8 elements
     * (K % 16 == 4, M even): the vector loads of A rows are unaligned; PoCL
     * once compiled f16's into an aligned move that faulted. */
    {8, 16, 20, false, false},
    {18, 36, 27, false, false},
    /* 4x16 strips: a last strip that ends inside a tile (M = 70: rows 64-69
     * in two tiles, the second shifted back), k in blocks of 64 with a tail
     * of 22 (not whole vectors of 16), and M below one tile. */
    {70, 17, 86, false, false},
    {37, 17, 65, false, false},
    {3, 20, 70, false, false},
    /* 16x16 strips along the columns: N = 70 is five tiles (the last
     * shifted back), two strips of 3 with the second partial; rows staged
     * once per strip, from a shifted last row tile (M = 40). */
    {40, 70, 75, false, false},
    /* AVX512-BF16's 4x64 tiles (cl/gemm_bf16_dot.cl): a last row tile and a
     * last column tile shifted back, an odd K's half pair; a transposed A
     * packed (M >= 64) in a whole block of 16 pairs and a part of one, its
     * columns in four whole blocks of 16 and a part. Its 8x32 tiles:
     * {18, 36, 27} above. */
    {67, 130, 33, false, false},
    /* f32 A staged rather than read in place where its rows (transposed:
     * its k's) are 4 KiB apart, which aliased in the L1 cache. */
    {20, 17, 1024, true, false},
    {1024, 17, 9, true, false},
};

/* One (path, C dtype) combination to test. */
typedef struct gemm_variant {
    mpcl_gemm_path path;
    mpcl_dtype in, out;
    /* Run on slow devices too. There (Oclgrind interprets ~1e6 ops/s, and
     * checks memory rather than numbers, which every other run checks) each
     * input dtype goes to one output dtype: the index math is the same for
     * both, and the output's rounding and store are kept by the other
     * input's variant. */
    bool slow_too;
} gemm_variant;

static uint64_t seed_counter = 0x5eed0001;

/* Runs one case and checks it. a_h (m x k or k x m), b_h, c_h are the exact
 * values the tensors hold. */
static void run_case(mpcl_context *ctx, const gemm_variant *v, const gemm_case *gc, bool ta,
                     bool tb, bool zero_beta) {
    const size_t m = gc->m, n = gc->n, k = gc->k;
    tu_rng rng = tu_rng_make(seed_counter++);
    float *a_h = malloc(m * k * sizeof *a_h), *b_h = malloc(k * n * sizeof *b_h);
    float *c_h = malloc(m * n * sizeof *c_h), *got = malloc(m * n * sizeof *got);
    double *want = malloc(m * n * sizeof *want), *tol = malloc(m * n * sizeof *tol);
    tu_fill_uniform(&rng, a_h, m * k, -1.0f, 1.0f);
    tu_fill_uniform(&rng, b_h, k * n, -1.0f, 1.0f);
    tu_fill_uniform(&rng, c_h, m * n, -1.0f, 1.0f);
    for (size_t i = 0; i < m * k; i++) a_h[i] = tu_stored(v->in, a_h[i]);
    for (size_t i = 0; i < k * n; i++) b_h[i] = tu_stored(v->in, b_h[i]);
    for (size_t i = 0; i < m * n; i++) c_h[i] = tu_stored(v->out, c_h[i]);
    float alpha = (float)tu_uniform(&rng, 0.25, 2.0), beta = (float)tu_uniform(&rng, -1.5, 1.5);
    if (zero_beta) beta = 0.0f;

    mpcl_tensor *a = tu_tensor(ctx, v->in, ta ? k : m, ta ? m : k);
    mpcl_tensor *b = tu_tensor(ctx, v->in, tb ? n : k, tb ? k : n);
    mpcl_tensor *c = tu_tensor(ctx, v->out, m, n);
    TU_ASSERT_OK(mpcl_tensor_upload_f32(a, a_h, m * k));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(b, b_h, k * n));
    if (zero_beta)
        tu_poison(c);
    else
        TU_ASSERT_OK(mpcl_tensor_upload_f32(c, c_h, m * n));

    TU_ASSERT_OK(mpcl_gemm(ctx, v->path, ta, tb, alpha, a, b, beta, c));
    TU_ASSERT_OK(mpcl_tensor_download_f32(c, got, m * n));

    /* HGEMM takes alpha and beta as half: the reference uses those values. */
    bool hgemm = v->path == MPCL_GEMM_CLBLAST_HGEMM;
    double al = (double)(hgemm ? tu_stored(MPCL_DTYPE_F16, alpha) : alpha);
    double be = (double)(hgemm ? tu_stored(MPCL_DTYPE_F16, beta) : beta);
    /* Tolerance, per element, from the standard bound on a computed dot
     * product: |fl(sum) - sum| <= K u sum|a||b| (any summation order, u the
     * unit roundoff of the accumulation). Scaling by alpha and adding beta*c
     * adds two more roundings: (K + 2) u (|alpha| S + |beta c|) with
     * S = sum_k |a_ik b_kj|. f32 accumulation (mpcl-f32, mpcl-mixed,
     * clblast-sgemm, clblast-staged): u = 2^-24. HGEMM accumulates in half: every product and
     * every partial sum is rounded to f16, so u = 2^-11 (for K = 784 that
     * allows 38% of S: the worst case is that loose; typical errors are
     * sqrt(K) smaller). An f16 output adds one rounding: 2^-11 |C| relative,
     * plus 2^-25 absolute for the subnormal range.
     * bf16 (mpcl-mixed): the inputs were rounded to bf16 before the
     * reference (a_h, b_h, c_h hold the stored values), and a product of two
     * 8-bit significands is exact in f32, so the f32 accumulation bound
     * above holds as is. A bf16 output adds one rounding to 8 significant
     * bits: 2^-8 |C| relative (the unit roundoff), plus 2^-134 absolute (half
     * the smallest bf16 subnormal). */
    double u = hgemm ? 0x1p-11 : 0x1p-24;
    bool f16_out = v->out == MPCL_DTYPE_F16, bf16_out = v->out == MPCL_DTYPE_BF16;
    double max_tol = 0, tol2 = 0, want2 = 0;
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++) {
            double sum = 0, mag = 0;
            for (size_t p = 0; p < k; p++) {
                double x = a_h[ta ? p * m + i : i * k + p];
                double y = b_h[tb ? j * k + p : p * n + j];
                sum += x * y;
                mag += fabs(x * y);
            }
            double cv = zero_beta ? 0.0 : (double)c_h[i * n + j];
            double w = al * sum + be * cv;
            double t = (double)(k + 2) * u * (fabs(al) * mag + fabs(be * cv));
            if (f16_out) t += 0x1p-11 * (fabs(w) + t) + 0x1p-25;
            if (bf16_out) t += 0x1p-8 * (fabs(w) + t) + 0x1p-134;
            want[i * n + j] = w;
            tol[i * n + j] = t;
            if (t > max_tol) max_tol = t;
            tol2 += t * t;
            want2 += w * w;
        }
    }
    char what[160];
    snprintf(what, sizeof what, "%s %s->%s %zux%zux%zu %c%c alpha %g beta %g",
             mpcl_gemm_path_name(v->path), mpcl_dtype_name(v->in), mpcl_dtype_name(v->out), m, n, k,
             ta ? 'T' : 'N', tb ? 'T' : 'N', (double)alpha, (double)beta);
    size_t bad = 0;
    for (size_t i = 0; i < m * n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= tol[i]) && bad++ < 5)
            fprintf(stderr, "%s: element %zu (%zu,%zu): got %.9g want %.9g |diff| %.3g tol %.3g\n",
                    what, i, i / n, i % n, (double)got[i], want[i], d, tol[i]);
    }
    if (bad) fail_msg("%s: %zu of %zu elements out of tolerance", what, bad, m * n);
    /* NaN/inf policy and normalized error. The per-element bound above is the
     * sharper check; the normalized bound is what it implies, ||tol|| /
     * ||want|| (|d_i| <= t_i for all i gives ||d|| <= ||t||). A bound in
     * units of ||want|| alone fails under cancellation: HGEMM's 1x1x1 with
     * alpha a b close to -beta c passed every element and still exceeded
     * (K + 2) u relative to the tiny result. */
    double norm_tol = sqrt(tol2) / fmax(sqrt(want2), 1e-30) * (1 + 1e-9) + 1e-12;
    if (!tu_check_close(what, got, want, m * n, max_tol, 0.0, norm_tol))
        fail_msg("%s failed", what);

    mpcl_tensor_destroy(a);
    mpcl_tensor_destroy(b);
    mpcl_tensor_destroy(c);
    free(a_h);
    free(b_h);
    free(c_h);
    free(got);
    free(want);
    free(tol);
}

static size_t variants_for(mpcl_context *ctx, gemm_variant *out) {
    size_t n = 0;
    out[n++] = (gemm_variant){MPCL_GEMM_MPCL_F32, MPCL_DTYPE_F32, MPCL_DTYPE_F32, true};
    out[n++] = (gemm_variant){MPCL_GEMM_MPCL_MIXED, MPCL_DTYPE_F16, MPCL_DTYPE_F16, true};
    out[n++] = (gemm_variant){MPCL_GEMM_MPCL_MIXED, MPCL_DTYPE_F16, MPCL_DTYPE_F32, false};
    out[n++] = (gemm_variant){MPCL_GEMM_MPCL_MIXED, MPCL_DTYPE_BF16, MPCL_DTYPE_BF16, false};
    out[n++] = (gemm_variant){MPCL_GEMM_MPCL_MIXED, MPCL_DTYPE_BF16, MPCL_DTYPE_F32, true};
    out[n++] = (gemm_variant){MPCL_GEMM_CLBLAST_SGEMM, MPCL_DTYPE_F32, MPCL_DTYPE_F32, true};
    out[n++] = (gemm_variant){MPCL_GEMM_CLBLAST_STAGED, MPCL_DTYPE_F16, MPCL_DTYPE_F16, false};
    out[n++] = (gemm_variant){MPCL_GEMM_CLBLAST_STAGED, MPCL_DTYPE_F16, MPCL_DTYPE_F32, true};
    out[n++] = (gemm_variant){MPCL_GEMM_CLBLAST_STAGED, MPCL_DTYPE_BF16, MPCL_DTYPE_BF16, true};
    out[n++] = (gemm_variant){MPCL_GEMM_CLBLAST_STAGED, MPCL_DTYPE_BF16, MPCL_DTYPE_F32, false};
    if (mpcl_plan_hgemm_usable(mpcl_context_device(ctx), mpcl_context_overrides(ctx)->fp16))
        out[n++] = (gemm_variant){MPCL_GEMM_CLBLAST_HGEMM, MPCL_DTYPE_F16, MPCL_DTYPE_F16, true};
    /* The matrix engine's, where it verified (an NVIDIA GPU of sm_80 or newer
     * here; no CPU device has one). */
    if (mpcl_plan_mma_usable(mpcl_context_device(ctx))) {
        out[n++] = (gemm_variant){MPCL_GEMM_MPCL_MMA, MPCL_DTYPE_F16, MPCL_DTYPE_F16, true};
        out[n++] = (gemm_variant){MPCL_GEMM_MPCL_MMA, MPCL_DTYPE_F16, MPCL_DTYPE_F32, false};
        out[n++] = (gemm_variant){MPCL_GEMM_MPCL_MMA, MPCL_DTYPE_BF16, MPCL_DTYPE_BF16, false};
        out[n++] = (gemm_variant){MPCL_GEMM_MPCL_MMA, MPCL_DTYPE_BF16, MPCL_DTYPE_F32, true};
    }
    return n;
}

/* Whether mpcl's bf16 GEMM on AVX512-BF16 (cl/gemm_bf16_dot.cl) runs this
 * variant here; says once per variant when it does not, and why. */
static bool dot_here(mpcl_context *ctx, const gemm_variant *v) {
    if (v->in != MPCL_DTYPE_BF16) return false;
    const mpcl_device_info *d = mpcl_context_device(ctx);
    if (d->bf16_dot == MPCL_BF16_DOT_VERIFIED) return true;
    printf("bf16 dot kernel skipped for %s: %s (%s)\n", mpcl_gemm_path_name(v->path),
           mpcl_bf16_dot_name(d->bf16_dot), d->bf16_dot_detail);
    return false;
}

/* An odd K ends the bf16 dot kernel's k loop with a half pair: row i's
 * element k+1 there is the next row's first one, which must not be read
 * (inf times B's zero is NaN). Row 1 starts with inf, so only row 1's C
 * may be non-finite. */
static void test_bf16_dot_half_pair(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    gemm_variant v = {MPCL_GEMM_MPCL_MIXED, MPCL_DTYPE_BF16, MPCL_DTYPE_F32, true};
    if (!dot_here(ctx, &v)) {
        mpcl_context_destroy(ctx);
        return;
    }
    enum { M = 16, N = 64, K = 3 };
    float a_h[M * K], b_h[K * N], got[M * N];
    for (size_t i = 0; i < M * K; i++) a_h[i] = 1.0f;
    for (size_t i = 0; i < K * N; i++) b_h[i] = 0.5f;
    a_h[1 * K + 0] = INFINITY;
    mpcl_tensor *a = tu_tensor(ctx, MPCL_DTYPE_BF16, M, K),
                *b = tu_tensor(ctx, MPCL_DTYPE_BF16, K, N);
    mpcl_tensor *c = tu_tensor(ctx, MPCL_DTYPE_F32, M, N);
    TU_ASSERT_OK(mpcl_tensor_upload_f32(a, a_h, M * K));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(b, b_h, K * N));
    tu_poison(c);
    mpcl__gemm_force_tiles(ctx, MPCL__GEMM_TILES_BF16_DOT, 0);
    TU_ASSERT_OK(mpcl_gemm(ctx, MPCL_GEMM_MPCL_MIXED, false, false, 1.0f, a, b, 0.0f, c));
    TU_ASSERT_OK(mpcl_tensor_download_f32(c, got, M * N));
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            float want = i == 1 ? INFINITY : 1.5f;
            if (got[i * N + j] != want)
                fail_msg("C(%zu, %zu) = %g, want %g", i, j, (double)got[i * N + j], (double)want);
        }
    mpcl_tensor_destroy(a);
    mpcl_tensor_destroy(b);
    mpcl_tensor_destroy(c);
    mpcl_context_destroy(ctx);
}

/* Every variant of `path` on ctx's device, the big shapes too unless
 * `small_only`. */
static void run_variant_in(mpcl_context *ctx, mpcl_gemm_path path, bool small_only) {
    gemm_variant vs[16];
    size_t nv = variants_for(ctx, vs);
    bool slow = tu_slow_device(ctx);
    /* Rusticl (llvmpipe) JIT-compiles the tiled kernel for ~25 s, again for
     * each new launch geometry, and its memory grows by GBs: one shape there,
     * with full and edge tiles of the wide kernel and all transposes (the
     * narrow kernel is covered on every other implementation). */
    bool rusticl = strstr(mpcl_context_device(ctx)->platform, "rusticl") != NULL;
    bool ran = false;
    for (size_t vi = 0; vi < nv; vi++) {
        if (vs[vi].path != path) continue;
        ran = true;
        if (slow && !vs[vi].slow_too) continue;
        /* mpcl's kernels in every tile shape at every N (the device picks
         * one, see gemm.c), 4x16 in strips of 1, 3 and 8 tiles down the rows
         * and 16x16 in strips of 3 along the columns (a partial last strip
         * where N is not a multiple of 48), and in what the shape gets: the
         * big shapes in the device's choice only. */
        bool own = path == MPCL_GEMM_MPCL_F32 || path == MPCL_GEMM_MPCL_MIXED;
        static const struct {
            mpcl__gemm_tiles tiles;
            unsigned strip;
        } forced[] = {{MPCL__GEMM_TILES_16X16, 0}, {MPCL__GEMM_TILES_16X16, 3},
                      {MPCL__GEMM_TILES_4X16, 1},  {MPCL__GEMM_TILES_4X16, 3},
                      {MPCL__GEMM_TILES_4X16, 8},  {MPCL__GEMM_TILES_4X16, 0},
                      {MPCL__GEMM_TILES_8X8, 0},   {MPCL__GEMM_TILES_BF16_DOT, 0},
                      {MPCL__GEMM_TILES_AUTO, 0}};
        size_t nf = sizeof forced / sizeof forced[0];
        for (size_t fi = own ? 0 : nf - 1; fi < nf; fi++) {
            /* Oclgrind interprets (~1e6 ops/s): there, strips of 3 stand for
             * every strip length (a partial last strip included). */
            bool other_strip = forced[fi].tiles == MPCL__GEMM_TILES_4X16 && forced[fi].strip != 3;
            if (slow && other_strip) continue;
            /* AVX512-BF16's kernel takes bf16 only, where the device verified
             * it; elsewhere the forced choice falls back to the others. */
            if (forced[fi].tiles == MPCL__GEMM_TILES_BF16_DOT && !dot_here(ctx, &vs[vi])) continue;
            mpcl__gemm_force_tiles(ctx, forced[fi].tiles, forced[fi].strip);
            bool auto_tiles = forced[fi].tiles == MPCL__GEMM_TILES_AUTO;
            for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
                if ((slow || small_only || !auto_tiles) && cases[ci].big) continue;
                if (rusticl && !cases[ci].quick) continue;
                for (int t = 0; t < 4; t++) {
                    /* CLBlast's own kernels on slow devices: one transpose
                     * pair per shape, in turn (what is ours there is the
                     * arguments we pass it, and the staging casts). */
                    if (slow && !own && (size_t)t != ci % 4) continue;
                    run_case(ctx, &vs[vi], &cases[ci], t & 2, t & 1, false);
                    run_case(ctx, &vs[vi], &cases[ci], t & 2, t & 1, true);
                }
            }
        }
        mpcl__gemm_force_tiles(ctx, MPCL__GEMM_TILES_AUTO, 0);
    }
    if (!ran) printf("%s: not usable on this device, skipped\n", mpcl_gemm_path_name(path));
}

static void run_mma_pipelined(mpcl_context *ctx);

static void run_variant(mpcl_gemm_path path) {
    mpcl_context *ctx = tu_context();
    run_variant_in(ctx, path, false);
    mpcl_context_destroy(ctx);
}

static void test_mpcl_f32(void **state) {
    (void)state;
    run_variant(MPCL_GEMM_MPCL_F32);
}
static void test_mpcl_mixed(void **state) {
    (void)state;
    run_variant(MPCL_GEMM_MPCL_MIXED);
}
static void test_clblast_sgemm(void **state) {
    (void)state;
    run_variant(MPCL_GEMM_CLBLAST_SGEMM);
}
static void test_clblast_hgemm(void **state) {
    (void)state;
    run_variant(MPCL_GEMM_CLBLAST_HGEMM);
}
static void test_clblast_staged(void **state) {
    (void)state;
    run_variant(MPCL_GEMM_CLBLAST_STAGED);
}
static void test_mpcl_mma(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    run_variant_in(ctx, MPCL_GEMM_MPCL_MMA, false);
    if (mpcl_plan_mma_usable(mpcl_context_device(ctx))) run_mma_pipelined(ctx);
    mpcl_context_destroy(ctx);
}
/* mpcl-mma's pipelined kernels (ldmatrix; cp.async for stored rows of
 * whole 16-byte pieces, element loads for others), each tile row in turn,
 * for the transposes of a training step. The shapes cross every row's tile
 * in M and N (136 = 128 + 8, 200 = 3 x 64 + 8) and the 32-deep K blocks (72
 * = 2 x 32 + 8; 16, one part block) with whole pieces, then with rows that
 * are not (67, 130 and 33: pieces cut by every edge; 9 x 1 x 17); the
 * kernel's name says which one ran. TT goes to mpcl_gemm_mma. */
static void run_mma_pipelined(mpcl_context *ctx) {
    static const gemm_case shapes[] = {{136, 200, 72, false, false},
                                       {24, 8, 16, false, false},
                                       {67, 130, 33, false, false},
                                       {9, 1, 17, false, false}};
    gemm_variant vs[16];
    size_t nv = variants_for(ctx, vs);
    const int rows = MPCL__MMA_PIPE_TILES;
    for (int t = 0; t < rows; t++) {
        /* A row the device's local memory cannot hold is never taken. */
        if (!mpcl__gemm_mma_tile_fits(ctx, t)) {
            printf("mpcl-mma %s: more local memory than the device has, skipped\n",
                   mpcl__mma_tile_names[t]);
            continue;
        }
        mpcl__gemm_mma_force_tile(ctx, t);
        const char *tile = mpcl__mma_tile_names[t];
        for (size_t vi = 0; vi < nv; vi++) {
            if (vs[vi].path != MPCL_GEMM_MPCL_MMA) continue;
            bool c_f32 = vs[vi].out == MPCL_DTYPE_F32;
            for (size_t ci = 0; ci < sizeof shapes / sizeof shapes[0]; ci++) {
                const gemm_case *gc = &shapes[ci];
                for (int p = 0; p < 4; p++) {
                    bool ta = p & 2, tb = p & 1;
                    const char *kernel = mpcl__gemm_mma_kernel(ctx, ta, tb, gc->m, gc->n, c_f32);
                    if (ta && tb)
                        assert_string_equal(kernel, c_f32 ? "mpcl_gemm_mma_cf32" : "mpcl_gemm_mma");
                    else
                        assert_non_null(strstr(kernel, tile));
                    run_case(ctx, &vs[vi], gc, ta, tb, (p + ci + vi) % 2 == 0);
                }
            }
        }
        /* GPT-2's logit rows (50257 long), as the tied head's GEMMs store
         * them: NT forward (C 64 x 50257, K 768), NN and TN backward (C 64 x
         * 768, K 50257; C 50257 x 768, K 64). */
        assert_non_null(strstr(mpcl__gemm_mma_kernel(ctx, false, true, 64, 50257, false), tile));
        assert_non_null(strstr(mpcl__gemm_mma_kernel(ctx, false, false, 64, 768, false), tile));
        assert_non_null(strstr(mpcl__gemm_mma_kernel(ctx, true, false, 50257, 768, true), tile));
    }
    /* MPCL_MMA_TILE names a row, or the staging kernel everywhere. */
    mpcl__gemm_mma_force_tile(ctx, -1);
    setenv("MPCL_MMA_TILE", mpcl__mma_tile_names[rows - 1], 1);
    assert_non_null(strstr(mpcl__gemm_mma_kernel(ctx, false, false, 4096, 4096, false),
                           mpcl__mma_tile_names[rows - 1]));
    setenv("MPCL_MMA_TILE", "simple", 1);
    assert_string_equal(mpcl__gemm_mma_kernel(ctx, false, false, 4096, 4096, false),
                        "mpcl_gemm_mma");
    unsetenv("MPCL_MMA_TILE");
}

/* mpcl-mma's kernels (cl/gemm_mma_nvidia.cl) with mma.sync computed by the
 * lanes from their fragments (mpcl__matrix_engine_emulate), on any device:
 * the staging, both transposes, the edges, alpha, beta and the rounding of
 * C, against the double reference as every path. */
static void test_mpcl_mma_emulated(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    /* The emulation is the same code on every device and no other driver's
     * compiler ever sees the real kernels: it runs on PoCL (the whole suite,
     * ASan's too) and Oclgrind (its memory checks), not on Intel's runtime,
     * where its two programs cost a minute of the CI's compiling. */
    const mpcl_device_info *d = mpcl_context_device(ctx);
    if (!tu_on_pocl(ctx) && !tu_slow_device(ctx)) {
        printf("mpcl-mma emulated: skipped on %s (run on PoCL and Oclgrind)\n", d->platform);
        mpcl_context_destroy(ctx);
        return;
    }
    TU_ASSERT_OK(mpcl__matrix_engine_emulate(ctx));
    assert_true(mpcl_plan_mma_usable(mpcl_context_device(ctx)));
    if (tu_slow_device(ctx)) {
        /* Oclgrind (~1e6 ops/s, and slower still through the emulation's
         * barriers; here for its race and bounds checks of the local-memory
         * staging): one shape across the edges of the tiles and of the
         * 32-deep K blocks (2), rows not whole pieces, in f16 alone (each
         * dtype is an mpcl-mma program Oclgrind compiles): TN takes a
         * pipelined kernel's element loads, TT mpcl_gemm_mma. */
        static const gemm_case few[] = {{67, 70, 33, false, false}};
        /* And the smallest pipelined tile (64x64, four warps) on a shape of
         * whole 16-byte rows across its edges (2 x 2 tiles, 2 K blocks): NT
         * (plain ldmatrix for A and B) and TN (.trans for both). */
        static const gemm_case pieces[] = {{72, 72, 40, false, false}};
        const int smallest = MPCL__MMA_PIPE_TILES - 1;
        gemm_variant vs[16];
        size_t nv = variants_for(ctx, vs);
        for (size_t vi = 0; vi < nv; vi++) {
            if (vs[vi].path != MPCL_GEMM_MPCL_MMA || vs[vi].in != MPCL_DTYPE_F16 ||
                !vs[vi].slow_too)
                continue;
            run_case(ctx, &vs[vi], &few[0], true, false, false);
            run_case(ctx, &vs[vi], &few[0], true, true, true);
            mpcl__gemm_mma_force_tile(ctx, smallest);
            bool c_f32 = vs[vi].out == MPCL_DTYPE_F32;
            assert_non_null(strstr(mpcl__gemm_mma_kernel(ctx, false, true, 72, 72, c_f32),
                                   mpcl__mma_tile_names[smallest]));
            run_case(ctx, &vs[vi], &pieces[0], false, true, false);
            run_case(ctx, &vs[vi], &pieces[0], true, false, true);
            mpcl__gemm_mma_force_tile(ctx, -1);
        }
    } else {
        /* Not the big shapes: the small ones already cross several tiles
         * and K blocks, and the emulation costs 2 barriers an mma. */
        run_variant_in(ctx, MPCL_GEMM_MPCL_MMA, true);
        run_mma_pipelined(ctx);
        /* A device with less local memory: the rows that do not fit are
         * never picked, and forcing one is refused with the reason. */
        uint64_t had = ctx->info.local_mem_bytes;
        size_t smallest =
            mpcl__mma_pipe_tile_bytes(&mpcl__mma_pipe_tiles[MPCL__MMA_PIPE_TILES - 1], true);
        ctx->info.local_mem_bytes = smallest;
        assert_non_null(strstr(mpcl__gemm_mma_kernel(ctx, false, false, 4096, 4096, false),
                               mpcl__mma_tile_names[MPCL__MMA_PIPE_TILES - 1]));
        ctx->info.local_mem_bytes = smallest - 1;
        assert_string_equal(mpcl__gemm_mma_kernel(ctx, false, false, 4096, 4096, false),
                            "mpcl_gemm_mma");
        mpcl__gemm_mma_force_tile(ctx, 0);
        mpcl_tensor *a = tu_tensor(ctx, MPCL_DTYPE_F16, 64, 64),
                    *b = tu_tensor(ctx, MPCL_DTYPE_F16, 64, 64),
                    *c = tu_tensor(ctx, MPCL_DTYPE_F16, 64, 64);
        tu_expect_error(mpcl_gemm(ctx, MPCL_GEMM_MPCL_MMA, false, false, 1.0f, a, b, 0.0f, c),
                        MPCL_ERR_INVALID_ARG, "bytes of local memory");
        mpcl_tensor_destroy(a);
        mpcl_tensor_destroy(b);
        mpcl_tensor_destroy(c);
        mpcl__gemm_mma_force_tile(ctx, -1);
        ctx->info.local_mem_bytes = had;
    }
    /* After mpcl-mma's programs exist, the emulation is refused. */
    assert_int_equal(mpcl__matrix_engine_emulate(ctx), MPCL_ERR_INVALID_ARG);
    mpcl_context_destroy(ctx);
}

/* clblast-staged's f32 workspaces count in the context's bytes, grow to the
 * largest call and are reused: an f32 C needs none of its own. */
static void test_staged_workspace(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_tensor *a = tu_tensor(ctx, MPCL_DTYPE_BF16, 64, 32),
                *b = tu_tensor(ctx, MPCL_DTYPE_BF16, 32, 48);
    mpcl_tensor *c = tu_tensor(ctx, MPCL_DTYPE_BF16, 64, 48),
                *c32 = tu_tensor(ctx, MPCL_DTYPE_F32, 64, 48);
    mpcl_tensor *small_a = tu_tensor(ctx, MPCL_DTYPE_BF16, 8, 4),
                *small_b = tu_tensor(ctx, MPCL_DTYPE_BF16, 4, 6);
    mpcl_tensor *small_c = tu_tensor(ctx, MPCL_DTYPE_BF16, 8, 6);
    size_t before = mpcl_context_bytes_now(ctx);
    TU_ASSERT_OK(mpcl_gemm(ctx, MPCL_GEMM_CLBLAST_STAGED, false, false, 1.0f, a, b, 0.0f, c32));
    assert_int_equal(mpcl_context_bytes_now(ctx) - before, (64 * 32 + 32 * 48) * sizeof(float));
    TU_ASSERT_OK(mpcl_gemm(ctx, MPCL_GEMM_CLBLAST_STAGED, false, false, 1.0f, a, b, 0.5f, c));
    size_t all = (64 * 32 + 32 * 48 + 64 * 48) * sizeof(float);
    assert_int_equal(mpcl_context_bytes_now(ctx) - before, all);
    TU_ASSERT_OK(mpcl_gemm(ctx, MPCL_GEMM_CLBLAST_STAGED, false, false, 1.0f, small_a, small_b,
                           0.0f, small_c));
    TU_ASSERT_OK(mpcl_context_finish(ctx));
    assert_int_equal(mpcl_context_bytes_now(ctx) - before, all);
    assert_true(mpcl_context_bytes_peak(ctx) >= before + all);
    mpcl_tensor *tensors[] = {a, b, c, c32, small_a, small_b, small_c};
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) mpcl_tensor_destroy(tensors[i]);
    mpcl_context_destroy(ctx);
}

/* Calls mpcl_gemm expecting `want` and checks that C kept its poison. */
static void expect_error(mpcl_context *ctx, mpcl_status want, mpcl_gemm_path path, bool ta, bool tb,
                         const mpcl_tensor *a, const mpcl_tensor *b, float beta, mpcl_tensor *c,
                         const char *needle) {
    tu_poison(c);
    mpcl_status st = mpcl_gemm(ctx, path, ta, tb, 1.0f, a, b, beta, c);
    if (st != want)
        fail_msg("expected %s, got %s: %s", mpcl_status_name(want), mpcl_status_name(st),
                 mpcl_errmsg());
    const char *msg = mpcl_context_errmsg(ctx);
    if (needle && !strstr(msg, needle)) fail_msg("message '%s' lacks '%s'", msg, needle);
    TU_ASSERT_OK(mpcl_context_finish(ctx));
    size_t n = mpcl_tensor_bytes(c);
    unsigned char *raw = malloc(n);
    TU_ASSERT_OK(mpcl_tensor_download_raw(c, raw, n));
    mpcl_dtype dt = mpcl_tensor_dtype(c);
    if (dt == MPCL_DTYPE_F16 || dt == MPCL_DTYPE_BF16) {
        for (size_t i = 0; i < n / 2; i++) {
            uint16_t h;
            memcpy(&h, raw + 2 * i, 2);
            assert_int_equal(h, TU_POISON_16(dt));
        }
    } else {
        float p = tu_poison_f32();
        for (size_t i = 0; i < n / 4; i++) assert_memory_equal(raw + 4 * i, &p, 4);
    }
    free(raw);
}

static void test_shape_errors(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_tensor *a = tu_tensor(ctx, MPCL_DTYPE_F32, 4, 5),
                *b = tu_tensor(ctx, MPCL_DTYPE_F32, 6, 3);
    mpcl_tensor *c = tu_tensor(ctx, MPCL_DTYPE_F32, 4, 3),
                *b_ok = tu_tensor(ctx, MPCL_DTYPE_F32, 5, 3);
    mpcl_tensor *c_bad = tu_tensor(ctx, MPCL_DTYPE_F32, 3, 4);
    for (int p = 0; p < 2; p++) {
        mpcl_gemm_path path = p ? MPCL_GEMM_CLBLAST_SGEMM : MPCL_GEMM_MPCL_F32;
        /* Inner dimensions 5 vs 6. */
        expect_error(ctx, MPCL_ERR_SHAPE, path, false, false, a, b, 0.0f, c, "4x5");
        /* Transposing A makes op(A) 5x4: inner 4 vs 5. */
        expect_error(ctx, MPCL_ERR_SHAPE, path, true, false, a, b_ok, 0.0f, c, "5x4");
        /* Right inner dimension, wrong C (3x4 for a 4x3 result). */
        expect_error(ctx, MPCL_ERR_SHAPE, path, false, false, a, b_ok, 1.0f, c_bad, "3x4");
        /* trans_b turns B 5x3 into 3x5: inner 5 vs 3. */
        expect_error(ctx, MPCL_ERR_SHAPE, path, false, true, a, b_ok, 1.0f, c, "3x5");
    }
    mpcl_tensor_destroy(a);
    mpcl_tensor_destroy(b);
    mpcl_tensor_destroy(c);
    mpcl_tensor_destroy(b_ok);
    mpcl_tensor_destroy(c_bad);
    mpcl_context_destroy(ctx);
}

static void test_dtype_errors(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_tensor *a32 = tu_tensor(ctx, MPCL_DTYPE_F32, 4, 5),
                *b32 = tu_tensor(ctx, MPCL_DTYPE_F32, 5, 3);
    mpcl_tensor *c32 = tu_tensor(ctx, MPCL_DTYPE_F32, 4, 3);
    mpcl_tensor *a16 = tu_tensor(ctx, MPCL_DTYPE_F16, 4, 5),
                *b16 = tu_tensor(ctx, MPCL_DTYPE_F16, 5, 3);
    mpcl_tensor *c16 = tu_tensor(ctx, MPCL_DTYPE_F16, 4, 3);
    mpcl_tensor *ci = tu_tensor(ctx, MPCL_DTYPE_I32, 4, 3);
    mpcl_tensor *abf = tu_tensor(ctx, MPCL_DTYPE_BF16, 4, 5),
                *bbf = tu_tensor(ctx, MPCL_DTYPE_BF16, 5, 3);
    mpcl_tensor *cbf = tu_tensor(ctx, MPCL_DTYPE_BF16, 4, 3);
    /* bf16 goes only through mpcl-mixed and clblast-staged, with bf16 A and B
     * and a bf16 or f32 C: no mixing with f16, and no other CLBlast path (it
     * has no bf16 GEMM). */
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_MPCL_MIXED, false, false, abf, b16, 0.0f, cbf,
                 "B f16");
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_CLBLAST_STAGED, false, false, abf, b16, 0.0f, cbf,
                 "B f16");
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_CLBLAST_STAGED, false, false, abf, bbf, 0.0f, c16,
                 "C f16");
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_CLBLAST_STAGED, false, false, a32, b32, 0.0f, c32,
                 "clblast-staged");
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_MPCL_MIXED, false, false, a16, bbf, 0.0f, c16,
                 "B bf16");
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_MPCL_MIXED, false, false, abf, bbf, 0.0f, c16,
                 "C f16");
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_CLBLAST_HGEMM, false, false, abf, bbf, 0.0f, cbf,
                 "A bf16");
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_CLBLAST_SGEMM, false, false, abf, bbf, 0.0f, c32,
                 "A bf16");
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_MPCL_F32, false, false, abf, bbf, 0.0f, cbf,
                 "A bf16");
    /* Wrong dtype and wrong shape together: the dtype is reported. */
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_MPCL_F32, false, false, a16, b16, 0.0f, c32,
                 "mpcl-f32");
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_CLBLAST_SGEMM, false, false, a32, b32, 0.0f, c16,
                 "C f16");
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_MPCL_MIXED, false, false, a32, b32, 0.0f, c32,
                 "mpcl-mixed");
    /* mpcl-mma takes what mpcl-mixed takes, and only on a verified matrix
     * engine: elsewhere refused, saying what the device's engine is. */
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_MPCL_MMA, false, false, a32, b32, 0.0f, c32,
                 "mpcl-mma needs f16 (or bf16) A and B");
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_MPCL_MMA, false, false, abf, bbf, 0.0f, c16,
                 "C f16");
    if (!mpcl_plan_mma_usable(mpcl_context_device(ctx))) {
        expect_error(ctx, MPCL_ERR_UNSUPPORTED, MPCL_GEMM_MPCL_MMA, false, false, abf, bbf, 0.0f,
                     cbf, "runs on a verified matrix engine");
        expect_error(ctx, MPCL_ERR_UNSUPPORTED, MPCL_GEMM_MPCL_MMA, false, false, a16, b16, 1.0f,
                     c32, mpcl_context_device(ctx)->matrix_engine_detail);
    }
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_MPCL_MIXED, false, false, a16, b32, 0.0f, c16,
                 "B f32");
    expect_error(ctx, MPCL_ERR_DTYPE, MPCL_GEMM_CLBLAST_HGEMM, false, false, a16, b16, 0.0f, c32,
                 "clblast-hgemm");
    /* i32 C: not touched; tu_poison() cannot fill it, so check the status only. */
    assert_int_equal(mpcl_gemm(ctx, MPCL_GEMM_MPCL_MIXED, false, false, 1.0f, a16, b16, 0.0f, ci),
                     MPCL_ERR_DTYPE);
    assert_int_equal(mpcl_gemm(ctx, MPCL_GEMM_PATH_COUNT, false, false, 1.0f, a32, b32, 0.0f, c32),
                     MPCL_ERR_INVALID_ARG);
    /* HGEMM without usable half arithmetic. */
    if (!mpcl_plan_hgemm_usable(mpcl_context_device(ctx), mpcl_context_overrides(ctx)->fp16))
        expect_error(ctx, MPCL_ERR_UNSUPPORTED, MPCL_GEMM_CLBLAST_HGEMM, false, false, a16, b16,
                     0.0f, c16, "half arithmetic");
    mpcl_tensor_destroy(a32);
    mpcl_tensor_destroy(b32);
    mpcl_tensor_destroy(c32);
    mpcl_tensor_destroy(a16);
    mpcl_tensor_destroy(b16);
    mpcl_tensor_destroy(c16);
    mpcl_tensor_destroy(ci);
    mpcl_tensor_destroy(abf);
    mpcl_tensor_destroy(bbf);
    mpcl_tensor_destroy(cbf);
    mpcl_context_destroy(ctx);
}

/* The default path is the plan's; MPCL_GEMM overrides it, and an impossible
 * override is reported by mpcl_gemm with the variable named. */
static void test_default_path_and_override(void **state) {
    (void)state;
    unsetenv("MPCL_GEMM");
    mpcl_context *ctx = tu_context();
    assert_int_equal(mpcl_gemm_default_path(ctx, MPCL_DTYPE_F32),
                     mpcl_context_plan(ctx, MPCL_POLICY_FLOAT32).gemm);
    assert_int_equal(mpcl_gemm_default_path(ctx, MPCL_DTYPE_F16),
                     mpcl_context_plan(ctx, MPCL_POLICY_MIXED_FLOAT16).gemm);
    /* bf16: f32 accumulation, by mpcl's kernel on CPUs, CLBlast's elsewhere. */
    bool cpu = mpcl_context_device(ctx)->type == MPCL_DEVICE_TYPE_CPU;
    mpcl_gemm_path bf16_path = cpu ? MPCL_GEMM_MPCL_MIXED : MPCL_GEMM_CLBLAST_STAGED;
    assert_int_equal(mpcl_gemm_default_path(ctx, MPCL_DTYPE_BF16), bf16_path);
    assert_int_equal(mpcl_context_plan(ctx, MPCL_POLICY_MIXED_BFLOAT16).gemm, bf16_path);
    mpcl_context_destroy(ctx);

    /* CLBlast for bf16 tensors: the plan refuses it, mpcl_gemm names MPCL_GEMM. */
    setenv("MPCL_GEMM", "clblast-sgemm", 1);
    ctx = tu_context();
    assert_false(mpcl_context_plan(ctx, MPCL_POLICY_MIXED_BFLOAT16).usable);
    mpcl_tensor *abf = tu_tensor(ctx, MPCL_DTYPE_BF16, 3, 2),
                *bbf = tu_tensor(ctx, MPCL_DTYPE_BF16, 2, 4);
    mpcl_tensor *cbf = tu_tensor(ctx, MPCL_DTYPE_BF16, 3, 4);
    mpcl_gemm_path pb = mpcl_gemm_default_path(ctx, MPCL_DTYPE_BF16);
    assert_int_equal(pb, MPCL_GEMM_CLBLAST_SGEMM);
    expect_error(ctx, MPCL_ERR_DTYPE, pb, false, false, abf, bbf, 0.0f, cbf, "MPCL_GEMM");
    mpcl_tensor_destroy(abf);
    mpcl_tensor_destroy(bbf);
    mpcl_tensor_destroy(cbf);
    mpcl_context_destroy(ctx);

    /* A possible override is honoured. */
    setenv("MPCL_GEMM", "clblast-sgemm", 1);
    ctx = tu_context();
    assert_int_equal(mpcl_gemm_default_path(ctx, MPCL_DTYPE_F32), MPCL_GEMM_CLBLAST_SGEMM);
    mpcl_context_destroy(ctx);

    /* An f16 path for f32 tensors: DTYPE, naming MPCL_GEMM. */
    setenv("MPCL_GEMM", "mpcl-mixed", 1);
    ctx = tu_context();
    mpcl_tensor *a = tu_tensor(ctx, MPCL_DTYPE_F32, 3, 2),
                *b = tu_tensor(ctx, MPCL_DTYPE_F32, 2, 4);
    mpcl_tensor *c = tu_tensor(ctx, MPCL_DTYPE_F32, 3, 4);
    mpcl_gemm_path p = mpcl_gemm_default_path(ctx, MPCL_DTYPE_F32);
    assert_int_equal(p, MPCL_GEMM_MPCL_MIXED);
    expect_error(ctx, MPCL_ERR_DTYPE, p, false, false, a, b, 0.0f, c, "MPCL_GEMM");
    mpcl_tensor_destroy(a);
    mpcl_tensor_destroy(b);
    mpcl_tensor_destroy(c);
    mpcl_context_destroy(ctx);

    /* HGEMM where half arithmetic is not usable: UNSUPPORTED, naming MPCL_GEMM. */
    setenv("MPCL_GEMM", "clblast-hgemm", 1);
    ctx = tu_context();
    if (!mpcl_plan_hgemm_usable(mpcl_context_device(ctx), mpcl_context_overrides(ctx)->fp16)) {
        a = tu_tensor(ctx, MPCL_DTYPE_F16, 3, 2);
        b = tu_tensor(ctx, MPCL_DTYPE_F16, 2, 4);
        c = tu_tensor(ctx, MPCL_DTYPE_F16, 3, 4);
        p = mpcl_gemm_default_path(ctx, MPCL_DTYPE_F16);
        assert_int_equal(p, MPCL_GEMM_CLBLAST_HGEMM);
        expect_error(ctx, MPCL_ERR_UNSUPPORTED, p, false, false, a, b, 0.0f, c, "MPCL_GEMM");
        mpcl_tensor_destroy(a);
        mpcl_tensor_destroy(b);
        mpcl_tensor_destroy(c);
    }
    mpcl_context_destroy(ctx);
    unsetenv("MPCL_GEMM");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mpcl_f32),           cmocka_unit_test(test_mpcl_mixed),
        cmocka_unit_test(test_bf16_dot_half_pair), cmocka_unit_test(test_clblast_sgemm),
        cmocka_unit_test(test_clblast_hgemm),      cmocka_unit_test(test_clblast_staged),
        cmocka_unit_test(test_mpcl_mma),           cmocka_unit_test(test_mpcl_mma_emulated),
        cmocka_unit_test(test_staged_workspace),   cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_dtype_errors),       cmocka_unit_test(test_default_path_and_override),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
