/* The losses of mpcl/losses.h against the double-precision reference in
 * ref_ops.c: binary cross-entropy on logits and MSE in every storage dtype
 * and odd shapes, their gradients (every element written, nothing beyond),
 * large logits, loss scaling, bad targets, the shared statistics, the
 * softmax cross-entropy through the loss table, and the argument checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h" /* mpcl__tensor_rows, mpcl__loss_forward_backward_rows */
#include "ref_ops.h"
#include "testutil.h"

typedef struct shape {
    size_t rows, cols;
} shape;

/* One row, one column, a B that is not a multiple of anything, rows of
 * whole eight-column vectors with a tail (3x17), Bs past one pass of the
 * loss kernels' work-group (MPCL_ABI_LOSS_WG = 64 rows at a time), and
 * past one group of them (MPCL_ABI_LOSS_GROUP_ROWS = 512: two groups, the
 * last short; three). Slow implementations stop before the last two. */
static const shape shapes[] = {{1, 1},  {1, 7},   {5, 1},    {37, 3},  {3, 17},
                               {70, 2}, {600, 2}, {130, 10}, {1100, 3}};
static const size_t slow_shapes = 7;

static const mpcl_dtype storages[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};
#define NSTORAGES (sizeof storages / sizeof storages[0])
static const mpcl_loss dense_losses[] = {MPCL_LOSS_BINARY_CROSSENTROPY, MPCL_LOSS_MSE};

static size_t shape_count(mpcl_context *ctx) {
    return tu_slow_device(ctx) ? slow_shapes : sizeof shapes / sizeof shapes[0];
}

/* ---- the table ---- */

static void test_names(void **state) {
    (void)state;
    static const char *const names[] = {"sparse_categorical_crossentropy", "binary_crossentropy",
                                        "mse"};
    static const char *const metrics[] = {"accuracy", "binary_accuracy", "mae"};
    for (int l = 0; l < MPCL_LOSS_COUNT; l++) {
        assert_string_equal(mpcl_loss_name((mpcl_loss)l), names[l]);
        assert_string_equal(mpcl_loss_metric_name((mpcl_loss)l), metrics[l]);
        mpcl_loss back = MPCL_LOSS_COUNT;
        assert_true(mpcl_loss_parse(names[l], &back));
        assert_int_equal(back, l);
    }
    assert_true(mpcl_loss_sparse_targets(MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY));
    assert_false(mpcl_loss_sparse_targets(MPCL_LOSS_BINARY_CROSSENTROPY));
    assert_false(mpcl_loss_sparse_targets(MPCL_LOSS_MSE));
    assert_false(mpcl_loss_sparse_targets((mpcl_loss)99));
    assert_string_equal(mpcl_loss_name((mpcl_loss)-1), "unknown");
    mpcl_loss x = MPCL_LOSS_MSE;
    assert_false(mpcl_loss_parse("categorical_crossentropy", &x));
    assert_false(mpcl_loss_parse(NULL, &x));
    assert_int_equal(x, MPCL_LOSS_MSE);
}

/* ---- dense losses against the reference ---- */

typedef enum inputs {
    INPUTS_RANDOM,  /* z in [-6, 6]; BCE targets hard (0, 1) and soft; MSE targets in [-3, 3] */
    INPUTS_EXTREME, /* BCE logits +-80 and +-1e4: exp(-|z|) underflows, the loss is ~|z| */
} inputs;

typedef struct dense_case {
    mpcl_loss loss;
    mpcl_dtype dtype;
    shape s;
    inputs in;
    float scale;      /* on the device; 0: NULL (1) */
    size_t grad_rows; /* 0: the rows (the public call); else the internal _rows call */
} dense_case;

static float random_target(tu_rng *r, mpcl_loss loss) {
    if (loss == MPCL_LOSS_MSE) return (float)tu_uniform(r, -3, 3);
    double u = tu_uniform(r, 0, 3);
    return u < 1 ? 0.0f : u < 2 ? 1.0f : (float)tu_uniform(r, 0, 1);
}

static float random_pred(tu_rng *r, inputs in) {
    static const float extremes[] = {80, -80, 1e4f, -1e4f};
    if (in == INPUTS_EXTREME) return extremes[(int)tu_uniform(r, 0, 4 - 1e-9)];
    return (float)tu_uniform(r, -6, 6);
}

/* The size of an element's f32 evaluation: what its rounding errors scale
 * with (BCE: max(z, 0) - z t cancels, so |z| (1 + t) rather than the term;
 * MSE: the term, and |d| for the metric). */
static double element_size(mpcl_loss loss, double z, double t) {
    if (loss == MPCL_LOSS_BINARY_CROSSENTROPY) return fabs(z) * (1 + fabs(t)) + 1;
    return (z - t) * (z - t) + fabs(z - t);
}

/* True when the bytes of t past its first `first` elements still hold the
 * poison (tu_poison). */
static bool tail_poisoned(mpcl_context *ctx, const mpcl_tensor *t, size_t first) {
    size_t bytes = mpcl_tensor_bytes(t), esize = mpcl_dtype_size(mpcl_tensor_dtype(t));
    size_t tail = bytes - first * esize;
    mpcl_tensor *p = tu_tensor_poisoned(ctx, mpcl_tensor_dtype(t), 1, tail / esize);
    unsigned char *raw = malloc(bytes), *want = malloc(tail);
    TU_ASSERT_OK(mpcl_tensor_download_raw(t, raw, bytes));
    TU_ASSERT_OK(mpcl_tensor_download_raw(p, want, tail));
    bool same = memcmp(raw + first * esize, want, tail) == 0;
    free(raw);
    free(want);
    mpcl_tensor_destroy(p);
    return same;
}

static void check_dense_case(mpcl_context *ctx, tu_rng *r, dense_case dc) {
    const size_t B = dc.s.rows, C = dc.s.cols, n = B * C;
    const size_t grad_rows = dc.grad_rows ? dc.grad_rows : B;
    float *pred = malloc(n * sizeof *pred), *targets = malloc(n * sizeof *targets);
    for (size_t i = 0; i < n; i++) {
        pred[i] = tu_stored(dc.dtype, random_pred(r, dc.in));
        targets[i] = random_target(r, dc.loss);
    }
    mpcl_tensor *t_pred = tu_tensor_from(ctx, dc.dtype, B, C, pred);
    mpcl_tensor *t_targets = tu_tensor_from(ctx, MPCL_DTYPE_F32, B, C, targets);
    mpcl_tensor *t_scale = dc.scale ? tu_tensor_from(ctx, MPCL_DTYPE_F32, 1, 1, &dc.scale) : NULL;
    /* One row more than the gradient: the kernel must leave it alone. */
    mpcl_tensor *t_d_big = tu_tensor_poisoned(ctx, dc.dtype, B + 1, C);
    mpcl_tensor t_d = mpcl__tensor_rows(t_d_big, B);
    mpcl_tensor *stats = NULL;
    TU_ASSERT_OK(mpcl_loss_stats_create(ctx, &stats));

    double *dp = tu_to_double(pred, n), *dt = tu_to_double(targets, n);
    double *dref = malloc(n * sizeof *dref), loss_ref, metric_ref;
    const double scale = dc.scale ? dc.scale : 1;
    assert_int_equal(
        ref_dense_loss(dc.loss, dp, dt, B, C, scale, grad_rows, &loss_ref, &metric_ref, dref), 0);

    /* Two calls, forward_backward then forward alone: the stats add up. */
    if (dc.grad_rows)
        TU_ASSERT_OK(mpcl__loss_forward_backward_rows(ctx, dc.loss, stats, &t_d, t_pred, t_targets,
                                                      t_scale, dc.grad_rows));
    else
        TU_ASSERT_OK(
            mpcl_loss_forward_backward(ctx, dc.loss, stats, &t_d, t_pred, t_targets, t_scale));
    TU_ASSERT_OK(mpcl_loss_forward(ctx, dc.loss, stats, t_pred, t_targets));
    mpcl_loss_stats got;
    TU_ASSERT_OK(mpcl_loss_stats_read(ctx, stats, &got, true));

    char what[160];
    snprintf(what, sizeof what, "%s %s %zux%zu scale %g grad_rows %zu%s", mpcl_loss_name(dc.loss),
             mpcl_dtype_name(dc.dtype), B, C, scale, grad_rows,
             dc.in == INPUTS_EXTREME ? " extreme" : "");
    /* f32 sums: each item adds its rows' terms in eight lanes, in order,
     * then the lanes, then a tree of log2(64) = 6 levels: at most
     * ceil(B / 64) * C + 14 additions on any path; a few roundings per term
     * besides. Bound: (that count + 16) units of 2^-24 of the sum of the
     * element sizes, for each of the two calls. */
    double size_sum = 0;
    for (size_t i = 0; i < n; i++) size_sum += element_size(dc.loss, dp[i], dt[i]);
    double depth = (double)((B + 63) / 64 * C + 14 + 16);
    double sum_tol = 2 * depth * 0x1p-24 * size_sum;
    if (!(fabs(got.loss_sum - 2 * loss_ref) <= sum_tol))
        fail_msg("%s: loss sum %.9g, want %.9g (tol %.3g)", what, got.loss_sum, 2 * loss_ref,
                 sum_tol);
    if (dc.loss == MPCL_LOSS_BINARY_CROSSENTROPY) {
        if (got.metric_sum != 2 * metric_ref)
            fail_msg("%s: binary accuracy hits %.0f, want %.0f", what, got.metric_sum,
                     2 * metric_ref);
    } else if (!(fabs(got.metric_sum - 2 * metric_ref) <= sum_tol)) {
        fail_msg("%s: |error| sum %.9g, want %.9g (tol %.3g)", what, got.metric_sum, 2 * metric_ref,
                 sum_tol);
    }
    assert_int_equal(got.loss, dc.loss);
    assert_int_equal(got.terms, 2 * n);
    assert_int_equal(got.samples, 2 * B);
    assert_int_equal(got.calls, 2);
    assert_int_equal(got.bad, 0);
    assert_int_equal(got.bad_row, -1);

    /* The gradient: the unit factor (sigmoid(z) - t, or 2 (y - t)) within a
     * few f32 roundings, times g = scale / (grad_rows C) rounded once; then
     * one rounding into the storage dtype (computed from the rounded inputs,
     * so nothing else differs). */
    float *d = tu_download(t_d_big);
    const tu_rounding st = tu_storage_rounding(dc.dtype);
    double g = scale / ((double)grad_rows * (double)C);
    double ga = 8 * 0x1p-24 * g + st.abs, gr = 1e-5 + st.rel;
    assert_true(tu_check_close(what, d, dref, n, ga, gr, tu_norm_tol(ga, gr, dref, n)));
    if (!tail_poisoned(ctx, t_d_big, n)) fail_msg("%s: wrote past the gradient", what);

    /* The reset by the read left the accumulator at zero. */
    TU_ASSERT_OK(mpcl_loss_stats_read(ctx, stats, &got, false));
    assert_int_equal(got.calls, 0);
    assert_int_equal(got.terms, 0);
    assert_int_equal(got.loss, MPCL_LOSS_COUNT);
    assert_true(got.loss_sum == 0 && got.metric_sum == 0);

    free(d);
    free(dp);
    free(dt);
    free(dref);
    free(pred);
    free(targets);
    mpcl_tensor *all[] = {t_pred, t_targets, t_scale, t_d_big, stats};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
}

static void test_dense_losses(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(tu_seed("dense_losses"));
    for (size_t l = 0; l < 2; l++) {
        for (size_t d = 0; d < NSTORAGES; d++) {
            for (size_t si = 0; si < shape_count(ctx); si++) {
                dense_case dc = {dense_losses[l], storages[d], shapes[si], INPUTS_RANDOM, 0, 0};
                check_dense_case(ctx, &r, dc);
                dc.scale = 1024; /* the loss-scale buffer */
                check_dense_case(ctx, &r, dc);
                dc.grad_rows = 3 * dc.s.rows; /* a data-parallel slice */
                check_dense_case(ctx, &r, dc);
            }
        }
    }
    mpcl_context_destroy(ctx);
}

/* BCE at +-80 and +-1e4: finite losses of ~|z| per element, gradients
 * sigmoid(z) - t = 0, +-1 or 1 - t, no NaN. */
static void test_bce_extreme(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(tu_seed("bce_extreme"));
    for (size_t d = 0; d < NSTORAGES; d++) {
        for (size_t si = 0; si < shape_count(ctx); si++) {
            check_dense_case(ctx, &r,
                             (dense_case){MPCL_LOSS_BINARY_CROSSENTROPY, storages[d], shapes[si],
                                          INPUTS_EXTREME, 0, 0});
        }
    }
    mpcl_context_destroy(ctx);
}

/* ---- bad targets ---- */

/* A bad target anywhere in a row drops the row (no loss, no metric, a zero
 * gradient row) and is reported by the next read, with the first one's call,
 * row, column and value; a clean interval after the reset reads OK. The
 * bad rows lie past the kernel's first pass over its work-group (rows 70
 * and 72 of 75). */
static void check_bad_targets(mpcl_context *ctx, mpcl_loss loss, float bad1, float bad2) {
    enum { B = 75, C = 3 };
    static float pred[B * C], good[B * C], bad[B * C];
    tu_rng r = tu_rng_make(tu_seed("bad_targets"));
    for (size_t i = 0; i < B * C; i++) {
        pred[i] = (float)tu_uniform(&r, -3, 3);
        good[i] = bad[i] = random_target(&r, loss);
    }
    bad[70 * C + 2] = bad1;
    bad[72 * C + 0] = bad2;
    bad[72 * C + 1] = bad1;
    mpcl_tensor *t_pred = tu_tensor_from(ctx, MPCL_DTYPE_F32, B, C, pred);
    mpcl_tensor *t_good = tu_tensor_from(ctx, MPCL_DTYPE_F32, B, C, good);
    mpcl_tensor *t_bad = tu_tensor_from(ctx, MPCL_DTYPE_F32, B, C, bad);
    mpcl_tensor *grad = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, B, C);
    mpcl_tensor *stats = NULL;
    TU_ASSERT_OK(mpcl_loss_stats_create(ctx, &stats));

    TU_ASSERT_OK(mpcl_loss_forward(ctx, loss, stats, t_pred, t_good));
    TU_ASSERT_OK(mpcl_loss_forward_backward(ctx, loss, stats, grad, t_pred, t_bad, NULL));
    TU_ASSERT_OK(mpcl_loss_forward(ctx, loss, stats, t_pred, t_bad));
    double dp[B * C], dt[B * C], dref[B * C], loss_ref, metric_ref, loss_good, metric_good;
    for (size_t i = 0; i < B * C; i++) {
        dp[i] = pred[i];
        dt[i] = good[i];
    }
    assert_int_equal(ref_dense_loss(loss, dp, dt, B, C, 1, B, &loss_good, &metric_good, NULL), 0);
    for (size_t i = 0; i < B * C; i++) dt[i] = bad[i];
    assert_int_equal(ref_dense_loss(loss, dp, dt, B, C, 1, B, &loss_ref, &metric_ref, dref), 2);

    mpcl_loss_stats s;
    char want_msg[160];
    snprintf(want_msg, sizeof want_msg, "%.9g in row 70, column 2 of loss call 1", (double)bad1);
    for (int twice = 0; twice < 2; twice++) { /* a read without reset keeps the flag */
        assert_int_equal(mpcl_loss_stats_read(ctx, stats, &s, twice == 1), MPCL_ERR_LABEL);
        if (!strstr(mpcl_context_errmsg(ctx), want_msg))
            fail_msg("message \"%s\" lacks \"%s\"", mpcl_context_errmsg(ctx), want_msg);
        assert_int_equal(s.bad, 4);
        assert_int_equal(s.bad_call, 1);
        assert_int_equal(s.bad_row, 70);
        assert_int_equal(s.bad_col, 2);
        assert_memory_equal(&s.bad_target, &(double){bad1}, sizeof(double));
        assert_int_equal(s.calls, 3);
        assert_int_equal(s.samples, 3 * B - 4);
        assert_int_equal(s.terms, (3 * B - 4) * C);
        double tol = 1e-4 * (loss_good + 2 * loss_ref);
        assert_true(fabs(s.loss_sum - (loss_good + 2 * loss_ref)) <= tol);
    }
    float *g = tu_download(grad);
    assert_true(tu_check_close("bad-target grad", g, dref, B * C, 1e-7, 1e-5, 1e-5));
    for (size_t c = 0; c < C; c++) assert_true(g[70 * C + c] == 0 && g[72 * C + c] == 0);
    free(g);

    TU_ASSERT_OK(mpcl_loss_forward(ctx, loss, stats, t_pred, t_good));
    TU_ASSERT_OK(mpcl_loss_stats_read(ctx, stats, &s, true));
    assert_int_equal(s.bad, 0);
    assert_int_equal(s.bad_row, -1);
    assert_int_equal(s.samples, B);
    /* A reset on its own clears the flag too. */
    TU_ASSERT_OK(mpcl_loss_forward(ctx, loss, stats, t_pred, t_bad));
    TU_ASSERT_OK(mpcl_loss_stats_reset(ctx, stats));
    TU_ASSERT_OK(mpcl_loss_stats_read(ctx, stats, &s, false));
    assert_int_equal(s.calls, 0);

    mpcl_tensor *all[] = {t_pred, t_good, t_bad, grad, stats};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
}

static void test_bad_targets(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    check_bad_targets(ctx, MPCL_LOSS_BINARY_CROSSENTROPY, 1.5f, NAN);
    check_bad_targets(ctx, MPCL_LOSS_BINARY_CROSSENTROPY, -0.25f, 2.0f);
    check_bad_targets(ctx, MPCL_LOSS_MSE, INFINITY, NAN);
    check_bad_targets(ctx, MPCL_LOSS_MSE, -INFINITY, INFINITY);
    mpcl_context_destroy(ctx);
}

/* ---- softmax cross-entropy through the table ---- */

/* mpcl_loss_forward_backward of the sparse loss is the softmax cross-entropy,
 * bit for bit, and mpcl_loss_stats_read reports it in the shared terms:
 * a term per row, the correct rows as the metric. */
static void test_sparse_through_table(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(tu_seed("sparse_through_table"));
    enum { B = 37, C = 5 };
    float logits[B * C];
    int32_t labels[B];
    tu_fill_uniform(&r, logits, B * C, -4, 4);
    for (size_t b = 0; b < B; b++) labels[b] = (int32_t)tu_uniform(&r, 0, C - 1e-9);
    labels[3] = C; /* a bad label: the shared record names it */
    const mpcl_loss sparse = MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    for (size_t d = 0; d < NSTORAGES; d++) {
        mpcl_tensor *t_logits = tu_tensor_from(ctx, storages[d], B, C, logits);
        mpcl_tensor *t_labels = tu_tensor(ctx, MPCL_DTYPE_I32, B, 1);
        TU_ASSERT_OK(mpcl_tensor_upload_i32(t_labels, labels, B));
        mpcl_tensor *g1 = tu_tensor_poisoned(ctx, storages[d], B, C);
        mpcl_tensor *g2 = tu_tensor_poisoned(ctx, storages[d], B, C);
        mpcl_tensor *s1 = NULL, *s2 = NULL;
        TU_ASSERT_OK(mpcl_loss_stats_create(ctx, &s1));
        TU_ASSERT_OK(mpcl_xent_stats_create(ctx, &s2));
        TU_ASSERT_OK(mpcl_loss_forward_backward(ctx, sparse, s1, g1, t_logits, t_labels, NULL));
        TU_ASSERT_OK(mpcl_softmax_xent_forward_backward(ctx, s2, g2, t_logits, t_labels, NULL));
        size_t bytes = mpcl_tensor_bytes(g1);
        unsigned char *a = malloc(bytes), *b = malloc(bytes);
        TU_ASSERT_OK(mpcl_tensor_download_raw(g1, a, bytes));
        TU_ASSERT_OK(mpcl_tensor_download_raw(g2, b, bytes));
        assert_memory_equal(a, b, bytes);
        free(a);
        free(b);

        mpcl_loss_stats ls;
        mpcl_xent_stats xs;
        assert_int_equal(mpcl_loss_stats_read(ctx, s1, &ls, false), MPCL_ERR_LABEL);
        assert_non_null(strstr(mpcl_context_errmsg(ctx), "label 5 in row 3 of loss call 0"));
        assert_int_equal(mpcl_xent_stats_read(ctx, s1, &xs, false), MPCL_ERR_LABEL);
        assert_int_equal(ls.loss, sparse);
        assert_int_equal(ls.terms, B - 1);
        assert_int_equal(ls.samples, B - 1);
        assert_true(ls.metric_sum == (double)xs.correct);
        assert_true(ls.loss_sum == xs.loss_sum);
        assert_int_equal(ls.bad_row, 3);
        assert_int_equal(ls.bad_col, 0);
        assert_true(ls.bad_target == C);
        assert_int_equal(xs.bad_label, C);
        /* The same accumulation through the older names. */
        mpcl_xent_stats xs2;
        assert_int_equal(mpcl_xent_stats_read(ctx, s2, &xs2, true), MPCL_ERR_LABEL);
        assert_memory_equal(&xs, &xs2, sizeof xs);
        mpcl_tensor *all[] = {t_logits, t_labels, g1, g2, s1, s2};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    }
    mpcl_context_destroy(ctx);
}

/* ---- argument checks ---- */

static void test_errors(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const mpcl_dtype F32 = MPCL_DTYPE_F32, F16 = MPCL_DTYPE_F16, I32 = MPCL_DTYPE_I32;
    const mpcl_loss BCE = MPCL_LOSS_BINARY_CROSSENTROPY, MSE = MPCL_LOSS_MSE;
    mpcl_tensor *z = tu_tensor(ctx, F32, 4, 3), *z16 = tu_tensor(ctx, F16, 4, 3);
    mpcl_tensor *t = tu_tensor(ctx, F32, 4, 3), *t_i32 = tu_tensor(ctx, I32, 4, 3);
    mpcl_tensor *t_col = tu_tensor(ctx, F32, 4, 1), *t_wide = tu_tensor(ctx, F32, 4, 4);
    mpcl_tensor *t16 = tu_tensor(ctx, F16, 4, 3), *labels = tu_tensor(ctx, I32, 4, 1);
    mpcl_tensor *d = tu_tensor_poisoned(ctx, F32, 4, 3), *d16 = tu_tensor_poisoned(ctx, F16, 4, 3);
    mpcl_tensor *d_t = tu_tensor_poisoned(ctx, F32, 3, 4);
    mpcl_tensor *scale2 = tu_tensor(ctx, F32, 1, 2), *stats_small = tu_tensor(ctx, F32, 1, 12);
    mpcl_tensor *stats = NULL;
    TU_ASSERT_OK(mpcl_loss_stats_create(ctx, &stats));

    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG, mpcl_loss_forward(ctx, (mpcl_loss)7, stats, z, t));
    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG, mpcl_loss_forward(ctx, (mpcl_loss)-1, stats, z, t));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_loss_forward(ctx, BCE, stats, z, t_i32));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_loss_forward(ctx, MSE, stats, z, t16));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_loss_forward(ctx, MSE, stats, z, t_col));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_loss_forward(ctx, BCE, stats, z, t_wide));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_loss_forward(ctx, BCE, stats, t_i32, t));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_loss_forward(ctx, BCE, stats, z, labels));
    TU_EXPECT_STATUS(
        MPCL_ERR_DTYPE,
        mpcl_loss_forward(ctx, MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, stats, z, t));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_loss_forward(ctx, MSE, stats_small, z, t));
    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG, mpcl_loss_forward(ctx, MSE, NULL, z, t));
    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG, mpcl_loss_forward(ctx, MSE, stats, NULL, t));
    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG, mpcl_loss_forward(ctx, MSE, stats, z, NULL));
    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG,
                     mpcl_loss_forward_backward(ctx, BCE, stats, NULL, z, t, NULL));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_loss_forward_backward(ctx, BCE, stats, d16, z, t, NULL));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_loss_forward_backward(ctx, MSE, stats, d, z16, t, NULL));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_loss_forward_backward(ctx, MSE, stats, d_t, z, t, NULL));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_loss_forward_backward(ctx, BCE, stats, d, z, t, scale2));
    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG,
                     mpcl__loss_forward_backward_rows(ctx, MSE, stats, d, z, t, NULL, 3));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE,
                     mpcl_loss_stats_read(ctx, stats_small, &(mpcl_loss_stats){0}, 1));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_loss_stats_reset(ctx, stats_small));

    /* Nothing was written: the outputs hold their poison, the stats no call. */
    TU_ASSERT_OK(mpcl_context_finish(ctx));
    assert_true(tu_still_poisoned(d));
    assert_true(tu_still_poisoned(d16));
    assert_true(tu_still_poisoned(d_t));
    mpcl_loss_stats s;
    TU_ASSERT_OK(mpcl_loss_stats_read(ctx, stats, &s, false));
    assert_int_equal(s.calls, 0);

    mpcl_tensor *all[] = {z,      z16, t,   t_i32, t_col,  t_wide,      t16,
                          labels, d,   d16, d_t,   scale2, stats_small, stats};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_dense_losses),
        cmocka_unit_test(test_bce_extreme),
        cmocka_unit_test(test_bad_targets),
        cmocka_unit_test(test_sparse_through_table),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
