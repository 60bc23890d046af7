/* The GEMM with its epilogue (mpcl__gemm_fused): C = op(A) op(B) + bias +
 * addend, in mpcl's kernels (every tile shape, full and edge tiles, every
 * transpose), in mpcl-mma's (each tile row and the staging kernel, C in
 * 16 bits and in f32; emulated on PoCL) and through the separate launches
 * of the other paths, against
 * a double host reference; a poisoned C, the addend untouched, and the
 * epilogue's bad arguments refused with C untouched. */
#include "testutil.h"

#include "compute/compute.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* {m, n, k}: one element; edge tiles in both directions; whole 16 x 16
 * tiles; K past one 64-deep block; a strip of 16 x 16 tiles with a shifted
 * last one. */
static const size_t shapes[][3] = {
    {1, 1, 1}, {7, 33, 5}, {33, 7, 130}, {17, 31, 9}, {32, 48, 70}, {40, 70, 75}, {130, 20, 33},
};

/* What the epilogue adds, in turn over the cases: {bias, addend}. */
static const bool combos[][2] = {{true, false}, {false, true}, {true, true}, {false, false}};

typedef struct variant {
    mpcl_gemm_path path;
    mpcl_dtype dtype; /* A's, B's, and C's and the addend's unless c_f32 */
    bool slow_too;    /* run on Oclgrind too */
    bool c_f32;
} variant;

static const variant variants[] = {
    {MPCL_GEMM_MPCL_F32, MPCL_DTYPE_F32, true, false},
    {MPCL_GEMM_MPCL_MIXED, MPCL_DTYPE_F16, true, false},
    {MPCL_GEMM_MPCL_MIXED, MPCL_DTYPE_BF16, false, false},
    /* separate launches */
    {MPCL_GEMM_CLBLAST_SGEMM, MPCL_DTYPE_F32, false, false},
    {MPCL_GEMM_CLBLAST_STAGED, MPCL_DTYPE_BF16, false, false},
};

static const variant mma_variants[] = {
    {MPCL_GEMM_MPCL_MMA, MPCL_DTYPE_F16, false, false},
    {MPCL_GEMM_MPCL_MMA, MPCL_DTYPE_BF16, false, false},
    {MPCL_GEMM_MPCL_MMA, MPCL_DTYPE_BF16, false, true},
};

static uint64_t seed;

static float *random_stored(tu_rng *r, mpcl_dtype dtype, size_t n, float lo, float hi) {
    float *x = malloc(n * sizeof *x);
    tu_fill_uniform(r, x, n, lo, hi);
    for (size_t i = 0; i < n; i++) x[i] = tu_stored(dtype, x[i]);
    return x;
}

/* Elements of got outside want +- tol, with a message for the first few. */
static size_t count_bad(const char *what, const char *which, const float *got, const double *want,
                        const double *tol, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= tol[i]) && bad++ < 5)
            fprintf(stderr, "%s: %s[%zu]: got %.9g want %.9g |diff| %.3g tol %.3g\n", what, which,
                    i, (double)got[i], want[i], d, tol[i]);
    }
    return bad;
}

static void run_case(mpcl_context *ctx, const variant *v, const size_t *shape, bool ta, bool tb,
                     const bool *cb) {
    const size_t m = shape[0], n = shape[1], k = shape[2];
    const mpcl_dtype dt = v->dtype, cdt = v->c_f32 ? MPCL_DTYPE_F32 : dt;
    tu_rng r = tu_rng_make(seed++);
    float *a_h = random_stored(&r, dt, m * k, -1.0f, 1.0f);
    float *b_h = random_stored(&r, dt, k * n, -1.0f, 1.0f);
    float *bias_h = random_stored(&r, MPCL_DTYPE_F32, n, -2.0f, 2.0f);
    float *add_h = random_stored(&r, cdt, m * n, -1.0f, 1.0f);
    mpcl_tensor *a = tu_tensor_from(ctx, dt, ta ? k : m, ta ? m : k, a_h);
    mpcl_tensor *b = tu_tensor_from(ctx, dt, tb ? n : k, tb ? k : n, b_h);
    mpcl_tensor *bias = tu_tensor_from(ctx, MPCL_DTYPE_F32, 1, n, bias_h);
    mpcl_tensor *addend = tu_tensor_from(ctx, cdt, m, n, add_h);
    mpcl_tensor *c = tu_tensor_poisoned(ctx, cdt, m, n);
    mpcl__gemm_epilogue e = {cb[0] ? bias : NULL, cb[1] ? addend : NULL};
    TU_ASSERT_OK(mpcl__gemm_fused(ctx, v->path, ta, tb, a, b, c, &e));
    float *got = tu_download(c), *add_after = tu_download(addend);

    /* Reference and bound: the f32 dot product's (K + 2) u S (S the sum of
     * |products|) and the two additions; one rounding into storage (fused)
     * or three, of the product, with the bias, with the addend (separate
     * launches: a sum near zero keeps the earlier roundings' errors). */
    tu_rounding st = tu_storage_rounding(cdt);
    double u = 0x1p-24;
    double *want = malloc(m * n * sizeof *want), *tol = malloc(m * n * sizeof *tol);
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            double sum = 0, mag = 0;
            for (size_t p = 0; p < k; p++) {
                double x = a_h[ta ? p * m + i : i * k + p], y = b_h[tb ? j * k + p : p * n + j];
                sum += x * y;
                mag += fabs(x * y);
            }
            double zv = sum + (cb[0] ? (double)bias_h[j] : 0.0);
            double yv = zv + (cb[1] ? (double)add_h[i * n + j] : 0.0);
            double t = (double)(k + 2) * u * (mag + fabs(zv) + fabs(yv));
            want[i * n + j] = yv;
            tol[i * n + j] = t + st.rel * (fabs(sum) + fabs(zv) + fabs(yv) + 3 * t) + 3 * st.abs;
        }
    char what[160];
    snprintf(what, sizeof what, "%s %s->%s %zux%zux%zu %c%c: bias %d addend %d",
             mpcl_gemm_path_name(v->path), mpcl_dtype_name(dt), mpcl_dtype_name(cdt), m, n, k,
             ta ? 'T' : 'N', tb ? 'T' : 'N', cb[0], cb[1]);
    size_t bad = count_bad(what, "C", got, want, tol, m * n);
    if (memcmp(add_after, add_h, m * n * sizeof *add_h) != 0)
        fail_msg("%s: the addend changed", what);
    if (bad) fail_msg("%s: %zu elements out of tolerance", what, bad);

    mpcl_tensor *all[] = {a, b, bias, addend, c};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    void *host[] = {a_h, b_h, bias_h, add_h, got, add_after, want, tol};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

/* Every variant, shape and transpose pair, the bias and addend in turn, in
 * each of mpcl's tile shapes (each kernel has its own stores). */
static void test_epilogue(void **state) {
    (void)state;
    seed = tu_seed("gemm_epilogue");
    mpcl_context *ctx = tu_context();
    bool slow = tu_slow_device(ctx);
    size_t next = 0, ncb = sizeof combos / sizeof combos[0];
    static const mpcl__gemm_tiles tiles[] = {MPCL__GEMM_TILES_16X16, MPCL__GEMM_TILES_4X16,
                                             MPCL__GEMM_TILES_8X8, MPCL__GEMM_TILES_AUTO};
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        const variant *v = &variants[vi];
        if (slow && !v->slow_too) continue;
        bool own = v->path == MPCL_GEMM_MPCL_F32 || v->path == MPCL_GEMM_MPCL_MIXED;
        size_t nt = own ? sizeof tiles / sizeof tiles[0] : 1;
        for (size_t ti = 0; ti < nt; ti++) {
            mpcl__gemm_force_tiles(ctx, own ? tiles[ti] : MPCL__GEMM_TILES_AUTO, slow ? 3 : 0);
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
                for (int t = 0; t < 4; t++) {
                    /* Oclgrind: one transpose pair per shape, in turn. */
                    if (slow && (size_t)t != si % 4) continue;
                    run_case(ctx, v, shapes[si], t & 2, t & 1, combos[next++ % ncb]);
                }
        }
        mpcl__gemm_force_tiles(ctx, MPCL__GEMM_TILES_AUTO, 0);
    }
    mpcl_context_destroy(ctx);
}

/* mpcl-mma's stores take the epilogue too. Where the device's engine is
 * verified, its kernels; on PoCL, their code with the instructions
 * emulated (a context of its own: the emulation comes before mpcl-mma's
 * programs); elsewhere skipped, as test_gemm's emulated test is. Each tile
 * row in turn (the pipelined kernels take all but TT), on the shapes above
 * (mostly rows that are not whole 16-byte pieces: element loads) and on
 * whole ones across the rows' tiles and K blocks (cp.async), and the
 * staging kernel everywhere ("simple"). */
static void test_epilogue_mpcl_mma(void **state) {
    (void)state;
    static const size_t whole[][3] = {{136, 200, 72}, {24, 8, 16}};
    seed = tu_seed("gemm_epilogue_mma");
    mpcl_context *ctx = tu_context();
    const mpcl_device_info *d = mpcl_context_device(ctx);
    if (!mpcl_plan_mma_usable(d)) {
        if (!tu_on_pocl(ctx)) {
            printf("mpcl-mma epilogue: no verified matrix engine on %s; emulated on PoCL only\n",
                   d->platform);
            mpcl_context_destroy(ctx);
            skip();
        }
        TU_ASSERT_OK(mpcl__matrix_engine_emulate(ctx));
    }
    size_t next = 0, ncb = sizeof combos / sizeof combos[0];
    for (int t = 0; t <= MPCL__MMA_PIPE_TILES; t++) {
        if (t < MPCL__MMA_PIPE_TILES && !mpcl__gemm_mma_tile_fits(ctx, t))
            continue; /* never taken on this device (test_gemm checks that) */
        mpcl__gemm_mma_force_tile(ctx, t);
        for (size_t vi = 0; vi < sizeof mma_variants / sizeof mma_variants[0]; vi++) {
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
                run_case(ctx, &mma_variants[vi], shapes[si], si & 2, si & 1, combos[next++ % ncb]);
            for (size_t wi = 0; wi < sizeof whole / sizeof whole[0]; wi++)
                for (int p = 0; p < 4; p++)
                    run_case(ctx, &mma_variants[vi], whole[wi], p & 2, p & 1, combos[next++ % ncb]);
        }
    }
    mpcl__gemm_mma_force_tile(ctx, -1);
    mpcl_context_destroy(ctx);
}

/* The epilogue's own bad arguments: the status, a message naming what is
 * wrong, and C untouched. */
static void test_epilogue_errors(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_tensor *a = tu_tensor(ctx, MPCL_DTYPE_F32, 4, 3),
                *b = tu_tensor(ctx, MPCL_DTYPE_F32, 3, 5);
    mpcl_tensor *c = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, 4, 5);
    mpcl_tensor *bias4 = tu_tensor(ctx, MPCL_DTYPE_F32, 1, 4);
    mpcl_tensor *bias16 = tu_tensor(ctx, MPCL_DTYPE_F16, 1, 5);
    mpcl_tensor *add16 = tu_tensor(ctx, MPCL_DTYPE_F16, 4, 5);
    mpcl_tensor *add_t = tu_tensor(ctx, MPCL_DTYPE_F32, 5, 4);
    const struct {
        mpcl__gemm_epilogue e;
        mpcl_status want;
        const char *needle;
    } bad[] = {
        {{bias4, NULL}, MPCL_ERR_SHAPE, "bias"},
        {{bias16, NULL}, MPCL_ERR_DTYPE, "bias"},
        {{NULL, add16}, MPCL_ERR_DTYPE, "addend"},
        {{NULL, add_t}, MPCL_ERR_SHAPE, "addend"},
        {{NULL, c}, MPCL_ERR_INVALID_ARG, "must not be C"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tu_expect_error(mpcl__gemm_fused(ctx, MPCL_GEMM_MPCL_F32, false, false, a, b, c, &bad[i].e),
                        bad[i].want, bad[i].needle);
        if (!tu_still_poisoned(c)) fail_msg("case %zu wrote C", i);
    }
    tu_expect_error(mpcl__gemm_fused(ctx, MPCL_GEMM_MPCL_F32, false, false, a, b, c, NULL),
                    MPCL_ERR_INVALID_ARG, "NULL");
    mpcl_tensor *all[] = {a, b, c, bias4, bias16, add16, add_t};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epilogue),
        cmocka_unit_test(test_epilogue_mpcl_mma),
        cmocka_unit_test(test_epilogue_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
