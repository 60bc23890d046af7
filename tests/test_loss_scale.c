/* Loss scaling: the dynamic state machine against a table of steps, the
 * floor, the growth guards, fixed mode, resuming from a written state, and
 * the non-finite scan (a single NaN or inf at the first and last element of
 * the first, middle and last of ten gradients (and one in each of the
 * others), f32, f16 and bf16, while large finite values such as +-65504 or
 * the largest bf16 are not flagged). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* One gradient tensor that a step uploads finite or with one inf. */
typedef struct step_grad {
    mpcl_tensor *t;
    float host[7];
} step_grad;

static void run_step(mpcl_context *ctx, mpcl_loss_scale *ls, step_grad *g, int nonfinite) {
    for (size_t i = 0; i < 7; i++) g->host[i] = 0.25f * (float)i - 1.0f;
    if (nonfinite) g->host[3] = INFINITY;
    TU_ASSERT_OK(mpcl_tensor_upload_f32(g->t, g->host, 7));
    TU_ASSERT_OK(mpcl_loss_scale_check(ctx, ls, &g->t, 1));
    mpcl_loss_scale_state s;
    TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &s));
    assert_int_equal(s.found_inf, nonfinite);
    TU_ASSERT_OK(mpcl_loss_scale_update(ctx, ls));
}

typedef struct table_row {
    int nonfinite;
    float scale;
    uint32_t good, skipped;
} table_row;

static void check_table(mpcl_context *ctx, const mpcl_loss_scale_params *p, const table_row *rows,
                        size_t n, mpcl_dtype dtype) {
    mpcl_loss_scale *ls = NULL;
    TU_ASSERT_OK(mpcl_loss_scale_create(ctx, p, &ls));
    step_grad g;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, dtype, 1, 7, &g.t));
    mpcl_loss_scale_state s;
    TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &s));
    assert_true(s.scale == p->initial_scale);
    assert_int_equal(s.good_steps, 0);
    assert_int_equal(s.skipped_steps, 0);
    assert_int_equal(s.found_inf, 0);
    assert_int_equal(s.last_found_inf, 0);
    for (size_t i = 0; i < n; i++) {
        run_step(ctx, ls, &g, rows[i].nonfinite);
        TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &s));
        if (s.scale != rows[i].scale || s.good_steps != rows[i].good ||
            s.skipped_steps != rows[i].skipped)
            fail_msg("step %zu (%s): scale %g good %u skipped %u, want %g %u %u", i,
                     rows[i].nonfinite ? "inf" : "finite", (double)s.scale, s.good_steps,
                     s.skipped_steps, (double)rows[i].scale, rows[i].good, rows[i].skipped);
        assert_int_equal(s.found_inf, 0); /* cleared by the update */
        assert_int_equal(s.last_found_inf, rows[i].nonfinite);
    }
    mpcl_tensor_destroy(g.t);
    mpcl_loss_scale_destroy(ls);
}

static void dynamic_state_machine_follows_the_table(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_loss_scale_params p = mpcl_loss_scale_default_params();
    p.initial_scale = 8;
    p.growth_interval = 3;
    p.min_scale = 2;
    p.max_scale = 32;
    /* F = finite step, N = a step with an inf gradient. */
    static const table_row rows[] = {
        {0, 8, 1, 0},  {0, 8, 2, 0},  {0, 16, 0, 0}, /* grows after 3 finite steps */
        {1, 8, 0, 1},                                /* backs off, counter reset */
        {0, 8, 1, 1},  {0, 8, 2, 1},  {1, 4, 0, 2},  /* an inf mid-interval resets it */
        {1, 2, 0, 3},  {1, 2, 0, 4},                 /* floor at min_scale = 2 */
        {0, 2, 1, 4},  {0, 2, 2, 4},  {0, 4, 0, 4},  {0, 4, 1, 4},  {0, 4, 2, 4},  {0, 8, 0, 4},
        {0, 8, 1, 4},  {0, 8, 2, 4},  {0, 16, 0, 4}, {0, 16, 1, 4}, {0, 16, 2, 4}, {0, 32, 0, 4},
        {0, 32, 1, 4}, {0, 32, 2, 4}, {0, 32, 0, 4}, /* at max_scale: no growth, but the counter
                                                        resets (Keras) */
        {1, 16, 0, 5},
    };
    check_table(ctx, &p, rows, sizeof rows / sizeof rows[0], MPCL_DTYPE_F32);
    check_table(ctx, &p, rows, sizeof rows / sizeof rows[0], MPCL_DTYPE_F16);

    /* Backoff straight from above the floor lands on it, not below. */
    p.initial_scale = 3;
    p.min_scale = 2;
    static const table_row floor_rows[] = {{1, 2, 0, 1}, {1, 2, 0, 2}};
    check_table(ctx, &p, floor_rows, 2, MPCL_DTYPE_F32);
    mpcl_context_destroy(ctx);
}

static void growth_never_reaches_inf(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_loss_scale_params p = mpcl_loss_scale_default_params();
    p.initial_scale = 0x1p126f;
    p.max_scale = FLT_MAX; /* Keras: only the finite guard */
    p.growth_interval = 1;
    static const table_row rows[] = {
        {0, 0x1p127f, 0, 0}, {0, 0x1p127f, 0, 0}, {0, 0x1p127f, 0, 0}, {1, 0x1p126f, 0, 1}};
    check_table(ctx, &p, rows, sizeof rows / sizeof rows[0], MPCL_DTYPE_F32);
    mpcl_context_destroy(ctx);
}

static void defaults_are_keras(void **state) {
    (void)state;
    mpcl_loss_scale_params p = mpcl_loss_scale_default_params();
    assert_int_equal(p.mode, MPCL_LOSS_SCALE_DYNAMIC);
    assert_true(p.initial_scale == 32768.0f);
    assert_int_equal(p.growth_interval, 2000);
    assert_true(p.growth_factor == 2.0f && p.backoff_factor == 0.5f && p.min_scale == 1.0f);
    assert_true(p.max_scale == 16777216.0f);

    /* The 2000-step interval, reached by resuming at 1998 good steps. */
    mpcl_context *ctx = tu_context();
    mpcl_loss_scale *ls = NULL;
    TU_ASSERT_OK(mpcl_loss_scale_create(ctx, &p, &ls));
    const mpcl_tensor *scale = mpcl_loss_scale_tensor(ls);
    assert_int_equal(mpcl_tensor_dtype(scale), MPCL_DTYPE_F32);
    assert_int_equal(mpcl_tensor_rows(scale), 1);
    assert_int_equal(mpcl_tensor_cols(scale), 1);
    float v = 0;
    TU_ASSERT_OK(mpcl_tensor_download_f32(scale, &v, 1));
    assert_true(v == 32768.0f);
    mpcl_loss_scale_state s = {.scale = 32768.0f, .good_steps = 1998, .skipped_steps = 7};
    TU_ASSERT_OK(mpcl_loss_scale_write_state(ctx, ls, &s));
    step_grad g;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F16, 1, 7, &g.t));
    run_step(ctx, ls, &g, 0);
    TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &s));
    assert_true(s.scale == 32768.0f);
    assert_int_equal(s.good_steps, 1999);
    run_step(ctx, ls, &g, 0);
    TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &s));
    assert_true(s.scale == 65536.0f);
    assert_int_equal(s.good_steps, 0);
    assert_int_equal(s.skipped_steps, 7);
    TU_ASSERT_OK(mpcl_tensor_download_f32(scale, &v, 1));
    assert_true(v == 65536.0f);
    mpcl_tensor_destroy(g.t);
    mpcl_loss_scale_destroy(ls);
    mpcl_context_destroy(ctx);
}

static void fixed_mode_keeps_the_scale_but_skips(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_loss_scale_params p = mpcl_loss_scale_default_params();
    p.mode = MPCL_LOSS_SCALE_FIXED;
    p.initial_scale = 128;
    p.growth_interval = 2;
    static const table_row rows[] = {{0, 128, 0, 0}, {0, 128, 0, 0}, {0, 128, 0, 0},
                                     {1, 128, 0, 1}, {1, 128, 0, 2}, {0, 128, 0, 2}};
    check_table(ctx, &p, rows, sizeof rows / sizeof rows[0], MPCL_DTYPE_F16);
    mpcl_context_destroy(ctx);
}

static void write_state_resumes_and_rejects_bad_scales(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_loss_scale_params p = mpcl_loss_scale_default_params();
    mpcl_loss_scale *ls = NULL;
    TU_ASSERT_OK(mpcl_loss_scale_create(ctx, &p, &ls));
    mpcl_loss_scale_state w = {
        .scale = 512, .good_steps = 11, .skipped_steps = 3, .found_inf = 1, .last_found_inf = 1};
    TU_ASSERT_OK(mpcl_loss_scale_write_state(ctx, ls, &w));
    mpcl_loss_scale_state r;
    TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &r));
    assert_true(r.scale == 512);
    assert_int_equal(r.good_steps, 11);
    assert_int_equal(r.skipped_steps, 3);
    assert_int_equal(r.found_inf, 0); /* a resumed step starts clean */
    assert_int_equal(r.last_found_inf, 1);
    const float bad[] = {0.0f, -1.0f, INFINITY, NAN};
    for (size_t i = 0; i < 4; i++) {
        mpcl_loss_scale_state b = w;
        b.scale = bad[i];
        assert_int_equal(mpcl_loss_scale_write_state(ctx, ls, &b), MPCL_ERR_INVALID_ARG);
        TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &r));
        assert_true(r.scale == 512);
        assert_int_equal(r.good_steps, 11);
    }
    mpcl_loss_scale_destroy(ls);
    mpcl_context_destroy(ctx);
}

static void bad_params_are_rejected(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    for (int c = 0; c < 9; c++) {
        mpcl_loss_scale_params p = mpcl_loss_scale_default_params();
        switch (c) {
        case 0: p.initial_scale = 0; break;
        case 1: p.initial_scale = INFINITY; break;
        case 2: p.min_scale = 0; break;
        case 3: p.initial_scale = 0.5f; break; /* below min_scale 1 */
        case 4: p.max_scale = 1024; break;     /* below initial 32768 */
        case 5: p.growth_factor = 0.5f; break;
        case 6: p.backoff_factor = 0; break;
        case 7: p.growth_interval = 0; break;
        case 8: p.mode = (mpcl_loss_scale_mode)7; break;
        }
        mpcl_loss_scale *ls = (mpcl_loss_scale *)&p; /* must be reset to NULL */
        assert_int_equal(mpcl_loss_scale_create(ctx, &p, &ls), MPCL_ERR_INVALID_ARG);
        assert_null(ls);
    }
    mpcl_loss_scale_destroy(NULL);
    mpcl_context_destroy(ctx);
}

/* Ten gradients (more than one launch's eight) of odd sizes. */
static const size_t scan_shapes[][2] = {{1, 1}, {1, 7}, {33, 7}, {1, 130}, {1, 1},
                                        {5, 1}, {3, 3}, {1, 17}, {2, 64},  {1, 130}};
#define NSCAN (sizeof scan_shapes / sizeof scan_shapes[0])

static int scan_flag(mpcl_context *ctx, mpcl_loss_scale *ls, mpcl_tensor *const *g, size_t n) {
    TU_ASSERT_OK(mpcl_loss_scale_check(ctx, ls, g, n));
    mpcl_loss_scale_state s;
    TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &s));
    TU_ASSERT_OK(mpcl_loss_scale_update(ctx, ls)); /* clears the flag */
    return s.found_inf;
}

static void scan_finds_one_nonfinite_anywhere(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(0x5eed1);
    mpcl_loss_scale *ls = NULL;
    mpcl_loss_scale_params p = mpcl_loss_scale_default_params();
    TU_ASSERT_OK(mpcl_loss_scale_create(ctx, &p, &ls));
    const mpcl_dtype dtypes[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};
    const float bad[] = {NAN, INFINITY, -INFINITY};

    for (size_t d = 0; d < 3; d++) {
        mpcl_tensor *g[NSCAN];
        float *clean[NSCAN];
        for (size_t t = 0; t < NSCAN; t++) {
            size_t n = scan_shapes[t][0] * scan_shapes[t][1];
            TU_ASSERT_OK(
                mpcl_tensor_create(ctx, dtypes[d], scan_shapes[t][0], scan_shapes[t][1], &g[t]));
            clean[t] = malloc(n * sizeof(float));
            /* Large finite values, the f16 extremes included, are not flagged. */
            tu_fill_uniform(&r, clean[t], n, -65504.0f, 65504.0f);
            clean[t][0] = (t % 2) ? 65504.0f : -65504.0f;
            clean[t][n - 1] = (t % 2) ? -65504.0f : 65504.0f;
            TU_ASSERT_OK(mpcl_tensor_upload_f32(g[t], clean[t], n));
        }
        assert_int_equal(scan_flag(ctx, ls, g, NSCAN), 0);
        /* Every tensor (each argument slot of the kernel, both launches), at
         * its first and last element: the first, middle and last tensors
         * with each of NaN, inf and -inf, the others with one of them. */
        for (size_t t = 0; t < NSCAN; t++) {
            size_t n = scan_shapes[t][0] * scan_shapes[t][1];
            int all = t == 0 || t == NSCAN / 2 || t == NSCAN - 1;
            for (size_t pos = 0; pos < 2; pos++) {
                size_t at = pos ? n - 1 : 0;
                for (size_t b = all ? 0 : (t + pos) % 3; b < (all ? 3 : (t + pos) % 3 + 1); b++) {
                    float saved = clean[t][at];
                    clean[t][at] = bad[b];
                    TU_ASSERT_OK(mpcl_tensor_upload_f32(g[t], clean[t], n));
                    clean[t][at] = saved;
                    if (!scan_flag(ctx, ls, g, NSCAN))
                        fail_msg("%s: %g at element %zu of gradient %zu not found",
                                 mpcl_dtype_name(dtypes[d]), (double)bad[b], at, t);
                    TU_ASSERT_OK(mpcl_tensor_upload_f32(g[t], clean[t], n));
                }
            }
        }
        assert_int_equal(scan_flag(ctx, ls, g, NSCAN), 0);
        if (dtypes[d] == MPCL_DTYPE_F16) {
            /* 65520 rounds to inf in f16 storage: an overflowing gradient. */
            size_t n = scan_shapes[4][0] * scan_shapes[4][1];
            float big = 65520.0f;
            assert_int_equal(n, 1);
            TU_ASSERT_OK(mpcl_tensor_upload_f32(g[4], &big, 1));
            assert_int_equal(scan_flag(ctx, ls, g, NSCAN), 1);
            TU_ASSERT_OK(mpcl_tensor_upload_f32(g[4], clean[4], 1));
        }
        if (dtypes[d] == MPCL_DTYPE_BF16) {
            /* bf16 has f32's range: its largest value (0x7f7f) is finite and
             * not flagged, FLT_MAX rounds past it to inf and is. */
            size_t n = scan_shapes[4][0] * scan_shapes[4][1];
            const float largest[2] = {0x1.fep127f, -0x1.fep127f};
            for (int sgn = 0; sgn < 2; sgn++) {
                TU_ASSERT_OK(mpcl_tensor_upload_f32(g[4], &largest[sgn], 1));
                assert_int_equal(scan_flag(ctx, ls, g, NSCAN), 0);
                float big = sgn ? -FLT_MAX : FLT_MAX;
                TU_ASSERT_OK(mpcl_tensor_upload_f32(g[4], &big, 1));
                assert_int_equal(scan_flag(ctx, ls, g, NSCAN), 1);
            }
            assert_int_equal(n, 1);
            TU_ASSERT_OK(mpcl_tensor_upload_f32(g[4], clean[4], 1));
        }
        for (size_t t = 0; t < NSCAN; t++) {
            mpcl_tensor_destroy(g[t]);
            free(clean[t]);
        }
    }
    mpcl_loss_scale_destroy(ls);
    mpcl_context_destroy(ctx);
}

/* A gradient larger than the arena test's, around the 2^16 mark (the old
 * per-element launch's cap) and at its very end. Skipped on slow
 * implementations. */
static void scan_strides_over_large_gradients(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    if (tu_slow_device(ctx)) {
        mpcl_context_destroy(ctx);
        skip();
    }
    mpcl_loss_scale *ls = NULL;
    mpcl_loss_scale_params p = mpcl_loss_scale_default_params();
    TU_ASSERT_OK(mpcl_loss_scale_create(ctx, &p, &ls));
    const size_t n = 300 * 300;
    float *x = calloc(n, sizeof *x);
    const mpcl_dtype dtypes[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};
    for (int d = 0; d < 3; d++) {
        mpcl_tensor *g;
        TU_ASSERT_OK(mpcl_tensor_create(ctx, dtypes[d], 300, 300, &g));
        assert_int_equal(scan_flag(ctx, ls, &g, 1), 0);
        const size_t at[] = {65535, 65536, n - 1};
        for (int a = 0; a < 3; a++) {
            x[at[a]] = NAN;
            TU_ASSERT_OK(mpcl_tensor_upload_f32(g, x, n));
            x[at[a]] = 0;
            if (!scan_flag(ctx, ls, &g, 1))
                fail_msg("%s: NaN at element %zu of 300x300 not found", mpcl_dtype_name(dtypes[d]),
                         at[a]);
        }
        mpcl_tensor_destroy(g);
    }
    free(x);
    mpcl_loss_scale_destroy(ls);
    mpcl_context_destroy(ctx);
}

/* A flat gradient arena as a model pads it (a multiple of 256 elements), and
 * one with a 13-element tail past its last whole 16-element vector: the
 * check launches about one work-item per 256 elements, each striding over
 * 16-element vectors, and scans a tail element by element. A NaN, inf or -inf
 * at the first element, the last, the middle, either side of a vector and
 * of an item's 256 is found in each dtype; a finite arena is not flagged. */
static void scan_of_a_padded_arena(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_loss_scale *ls = NULL;
    mpcl_loss_scale_params p = mpcl_loss_scale_default_params();
    TU_ASSERT_OK(mpcl_loss_scale_create(ctx, &p, &ls));
    const mpcl_dtype dtypes[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const size_t sizes[] = {17 * 256, 17 * 256 + 13};
    tu_rng r = tu_rng_make(0xa7e4a);
    for (size_t d = 0; d < 3; d++) {
        for (size_t z = 0; z < 2; z++) {
            const size_t n = sizes[z];
            float *x = malloc(n * sizeof *x);
            tu_fill_uniform(&r, x, n, -1000.0f, 1000.0f);
            mpcl_tensor *g;
            TU_ASSERT_OK(mpcl_tensor_create(ctx, dtypes[d], 1, n, &g));
            TU_ASSERT_OK(mpcl_tensor_upload_f32(g, x, n));
            assert_int_equal(scan_flag(ctx, ls, &g, 1), 0);
            /* The last whole vector's last element, and the first one past it
             * (the tail's first, or the last vector's first without a tail). */
            const size_t whole = n / 16 * 16;
            const size_t at[] = {
                0, 15, 16, 255, 256, n / 2, whole - 1, whole < n ? whole : whole - 16, n - 1};
            for (size_t a = 0; a < sizeof at / sizeof at[0]; a++) {
                float saved = x[at[a]];
                x[at[a]] = bad[a % 3];
                TU_ASSERT_OK(mpcl_tensor_upload_f32(g, x, n));
                x[at[a]] = saved;
                if (!scan_flag(ctx, ls, &g, 1))
                    fail_msg("%s: %g at element %zu of %zu not found", mpcl_dtype_name(dtypes[d]),
                             (double)bad[a % 3], at[a], n);
            }
            TU_ASSERT_OK(mpcl_tensor_upload_f32(g, x, n));
            assert_int_equal(scan_flag(ctx, ls, &g, 1), 0);
            mpcl_tensor_destroy(g);
            free(x);
        }
    }
    mpcl_loss_scale_destroy(ls);
    mpcl_context_destroy(ctx);
}

static void scan_of_mixed_dtypes_and_bad_dtype(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_loss_scale *ls = NULL;
    mpcl_loss_scale_params p = mpcl_loss_scale_default_params();
    TU_ASSERT_OK(mpcl_loss_scale_create(ctx, &p, &ls));
    mpcl_tensor *g[4];
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F16, 4, 4, &g[0]));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 3, 5, &g[1]));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_BF16, 2, 3, &g[2]));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_I32, 2, 2, &g[3]));
    float x[16] = {0};
    /* Uploaded although new tensors are zero: Oclgrind does not count the
     * zero fill as initialization. */
    TU_ASSERT_OK(mpcl_tensor_upload_f32(g[0], x, 16));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(g[1], x, 15));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(g[2], x, 6));
    assert_int_equal(scan_flag(ctx, ls, g, 3), 0);
    x[14] = NAN;
    TU_ASSERT_OK(mpcl_tensor_upload_f32(g[1], x, 15));
    assert_int_equal(scan_flag(ctx, ls, g, 3), 1);
    x[14] = 0;
    TU_ASSERT_OK(mpcl_tensor_upload_f32(g[1], x, 15));
    x[5] = -INFINITY; /* the bf16 tensor, after the f16 and f32 ones in the list */
    TU_ASSERT_OK(mpcl_tensor_upload_f32(g[2], x, 6));
    assert_int_equal(scan_flag(ctx, ls, g, 3), 1);
    x[5] = 0;
    TU_ASSERT_OK(mpcl_tensor_upload_f32(g[2], x, 6));
    x[14] = NAN;
    TU_ASSERT_OK(mpcl_tensor_upload_f32(g[1], x, 15));
    /* An i32 "gradient" fails before anything is enqueued: the NaN in g[1] is
     * not flagged by the part of the list before it. */
    assert_int_equal(mpcl_loss_scale_check(ctx, ls, g, 4), MPCL_ERR_DTYPE);
    mpcl_loss_scale_state s;
    TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &s));
    assert_int_equal(s.found_inf, 0);
    for (int i = 0; i < 4; i++) mpcl_tensor_destroy(g[i]);
    mpcl_loss_scale_destroy(ls);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dynamic_state_machine_follows_the_table),
        cmocka_unit_test(growth_never_reaches_inf),
        cmocka_unit_test(defaults_are_keras),
        cmocka_unit_test(fixed_mode_keeps_the_scale_but_skips),
        cmocka_unit_test(write_state_resumes_and_rejects_bad_scales),
        cmocka_unit_test(bad_params_are_rejected),
        cmocka_unit_test(scan_finds_one_nonfinite_anywhere),
        cmocka_unit_test(scan_strides_over_large_gradients),
        cmocka_unit_test(scan_of_a_padded_arena),
        cmocka_unit_test(scan_of_mixed_dtypes_and_bad_dtype),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
