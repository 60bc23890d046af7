/* The ops area against the double-precision reference in ref_ops.c: bias +
 * activation forward and backward, bias gradient, softmax cross-entropy with
 * its device statistics and label errors, casts, the elementwise sum; plus finite-difference
 * checks of the reference itself and the error paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compute/compute.h" /* mpcl__bias_grad_force_parts */
#include "ref_ops.h"
#include "testutil.h"

typedef struct shape {
    size_t rows, cols;
} shape;

/* 128x784 and 128x128 are the MLP's layers; 7, 33 and 130 are not multiples
 * of any work-group size. The kernels take eight elements per work-item and
 * have a variant for rows (or tensors) of whole vectors: 9x16, 128x128 and
 * 128x784 run it, the others the element-by-element tails. Slow
 * implementations stop before the big ones. */
static const shape shapes[] = {{1, 1},  {7, 33},    {33, 7},   {130, 10},
                               {9, 16}, {128, 128}, {128, 784}};
static const size_t slow_shapes = 5;

static const mpcl_dtype storages[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};
#define NSTORAGES (sizeof storages / sizeof storages[0])

static size_t shape_count(mpcl_context *ctx) {
    return tu_slow_device(ctx) ? slow_shapes : sizeof shapes / sizeof shapes[0];
}

static double max_abs(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static const char *dname(mpcl_dtype d) {
    return mpcl_dtype_name(d);
}

/* ---- activation names ---- */

static void test_activation_names(void **state) {
    (void)state;
    for (int a = 0; a < MPCL_ACT_COUNT; a++) {
        mpcl_activation back = MPCL_ACT_COUNT;
        assert_true(mpcl_activation_parse(mpcl_activation_name((mpcl_activation)a), &back));
        assert_int_equal(back, a);
    }
    mpcl_activation x = MPCL_ACT_RELU;
    assert_false(mpcl_activation_parse("swish", &x));
    assert_false(mpcl_activation_parse(NULL, &x));
    assert_int_equal(x, MPCL_ACT_RELU);
    assert_string_equal(mpcl_activation_name(MPCL_ACT_COUNT), "unknown");
    assert_int_equal(mpcl_activation_saved(MPCL_ACT_GELU), MPCL_ACT_SAVED_PREACT);
    assert_int_equal(mpcl_activation_saved(MPCL_ACT_RELU), MPCL_ACT_SAVED_OUTPUT);
    assert_int_equal(mpcl_activation_saved(MPCL_ACT_IDENTITY), MPCL_ACT_SAVED_NONE);
}

/* ---- finite differences of the reference ---- */

/* Central differences with h = 1e-5 in double: truncation h^2 |f'''| / 6 <
 * 1e-10 for these smooth functions (|f'''| < 5 on [-4, 4]) and rounding
 * 1e-16 / h = 1e-11, so 1e-7 leaves a wide margin while a wrong formula
 * (a missing factor, a sign) is off by far more. */
static void test_reference_fd(void **state) {
    (void)state;
    tu_rng r = tu_rng_make(tu_seed("reference_fd"));
    const double h = 1e-5, tol = 1e-7;
    enum { ROWS = 5, COLS = 6 };
    for (int a = 0; a < MPCL_ACT_COUNT; a++) {
        mpcl_activation act = (mpcl_activation)a;
        double in[ROWS * COLS], bias[COLS], d_out[ROWS * COLS], z[ROWS * COLS], y[ROWS * COLS];
        double d_pre[ROWS * COLS], d_bias[COLS];
        for (size_t j = 0; j < COLS; j++) bias[j] = tu_uniform(&r, -1, 1);
        for (size_t i = 0; i < ROWS * COLS; i++) {
            in[i] = tu_uniform(&r, -4, 4);
            /* Keep off relu's kink, where the derivative is a convention. */
            if (fabs(in[i] + bias[i % COLS]) < 0.01) in[i] += 0.1;
            d_out[i] = tu_uniform(&r, -2, 2);
        }
        ref_bias_act_forward(y, z, in, bias, ROWS, COLS, act);
        ref_bias_act_backward(d_pre, d_out, z, ROWS, COLS, act);
        ref_bias_grad(d_bias, d_pre, ROWS, COLS);
        /* L = sum d_out * act(in + bias): dL/din = d_pre, dL/dbias = d_bias. */
        for (size_t i = 0; i < ROWS * COLS; i++) {
            double zp = in[i] + h + bias[i % COLS], zm = in[i] - h + bias[i % COLS];
            double fd = d_out[i] * (ref_act(act, zp) - ref_act(act, zm)) / (2 * h);
            if (fabs(fd - d_pre[i]) > tol)
                fail_msg("%s: d_pre[%zu] %.12g, finite difference %.12g", mpcl_activation_name(act),
                         i, d_pre[i], fd);
        }
        for (size_t j = 0; j < COLS; j++) {
            double lp = 0, lm = 0;
            for (size_t b = 0; b < ROWS; b++) {
                size_t i = b * COLS + j;
                lp += d_out[i] * ref_act(act, in[i] + bias[j] + h);
                lm += d_out[i] * ref_act(act, in[i] + bias[j] - h);
            }
            double fd = (lp - lm) / (2 * h);
            if (fabs(fd - d_bias[j]) > tol * ROWS)
                fail_msg("%s: d_bias[%zu] %.12g, finite difference %.12g",
                         mpcl_activation_name(act), j, d_bias[j], fd);
        }
    }

    /* The loss: d_logits is the gradient of scale * loss_sum / rows. */
    enum { B = 4, C = 7 };
    double logits[B * C], d[B * C];
    int32_t labels[B];
    for (size_t i = 0; i < B * C; i++) logits[i] = tu_uniform(&r, -3, 3);
    for (size_t b = 0; b < B; b++) labels[b] = (int32_t)(tu_uniform(&r, 0, C - 1e-9));
    const double scale = 8;
    double loss;
    size_t correct;
    assert_int_equal(ref_softmax_xent(logits, labels, B, C, scale, &loss, &correct, d), 0);
    for (size_t i = 0; i < B * C; i++) {
        double keep = logits[i], lp, lm;
        logits[i] = keep + h;
        ref_softmax_xent(logits, labels, B, C, scale, &lp, &correct, NULL);
        logits[i] = keep - h;
        ref_softmax_xent(logits, labels, B, C, scale, &lm, &correct, NULL);
        logits[i] = keep;
        double fd = scale * (lp - lm) / (2 * h) / B;
        if (fabs(fd - d[i]) > tol * scale)
            fail_msg("xent: d_logits[%zu] %.12g, finite difference %.12g", i, d[i], fd);
    }
    /* And the loss value itself, on a row worked by hand: logits (0, log 3),
     * label 0: p0 = 1/4, loss = log 4. */
    double two[2] = {0, log(3.0)};
    int32_t l0 = 0;
    ref_softmax_xent(two, &l0, 1, 2, 1, &loss, &correct, NULL);
    assert_true(fabs(loss - log(4.0)) < 1e-15);
    assert_int_equal(correct, 0);
}

/* ---- bias + activation ---- */

/* Tolerances, f32 storage: exp and tanh are within 4 ulp in OpenCL and the
 * kernel adds a few roundings, so rtol 4e-6 (~32 ulp); in 1 - t^2 and 1 - y^2
 * near saturation an ulp of 1 (6e-8) is multiplied by |z| <= 5 and |d_out| <=
 * 2, so atol 4e-6. GELU's forward, z / (1 + exp(-2u)), has no such
 * cancellation, so its f32 atol is 0 (the tanh form, whose 1 + tanh(u) lost
 * every digit as GELU nears 0, fails that) and its error is relative: exp2's
 * argument x = -2u log2(e) (|x| <= 25 for |z| <= 5) carries at most four
 * roundings, 4 * 2^-24 |x|, into exp's relative error times ln 2 (4.1e-6),
 * then exp2's 3 ulp and the sum's and the division's roundings: rtol 8e-6.
 * f16 storage adds one rounding of the output (2^-11 relative, 2^-25
 * absolute below the normal range). Backward from a saved f16 value: y off
 * by 2^-12 moves y(1-y) or 1-y^2 by <= 2^-11, and z off by 5 * 2^-11 moves
 * GELU' (|GELU''| < 0.8) by 2e-3, both times |d_out| <= 2.
 * bf16 storage: the same with 8 significant bits instead of 11: one output
 * rounding is 2^-8 relative (2^-134 absolute, f32's range); a saved y in
 * [-1, 1] is off by at most half an ulp of 2^-8, i.e. 2^-9, which moves
 * y(1-y) or 1-y^2 by <= 2^-8; z off by 5 * 2^-8 moves GELU' by <= 0.8 * 5 *
 * 2^-8 < 1.6e-2; both times |d_out| <= 2. */
/* Whether two tensors of one dtype and shape hold the same bits. */
static bool same_bits(const mpcl_tensor *a, const mpcl_tensor *b) {
    size_t n = mpcl_tensor_bytes(a);
    unsigned char *x = malloc(n), *y = malloc(n);
    TU_ASSERT_OK(mpcl_tensor_download_raw(a, x, n));
    TU_ASSERT_OK(mpcl_tensor_download_raw(b, y, n));
    bool same = n == mpcl_tensor_bytes(b) && memcmp(x, y, n) == 0;
    free(x);
    free(y);
    return same;
}

static void check_act_case(mpcl_context *ctx, tu_rng *r, mpcl_dtype dt, shape s,
                           mpcl_activation act) {
    const size_t n = s.rows * s.cols;
    char what[128];
    float *in = malloc(n * sizeof *in), *d_out = malloc(n * sizeof *d_out);
    float *bias = malloc(s.cols * sizeof *bias);
    tu_fill_uniform(r, bias, s.cols, -1, 1);
    tu_fill_uniform(r, in, n, -4, 4);
    tu_fill_uniform(r, d_out, n, -2, 2);
    for (size_t i = 0; i < n; i++) {
        /* Keep z off relu's kink by more than f16 can blur: a z that rounds
         * to 0 in storage would change relu' from 1 to 0. (bf16 has f32's
         * range, so a nonzero z never rounds to 0 there.) */
        if (fabs((double)tu_stored(dt, in[i]) + (double)bias[i % s.cols]) < 1e-3) in[i] += 0.01f;
        in[i] = tu_stored(dt, in[i]);
        d_out[i] = tu_stored(dt, d_out[i]);
    }
    mpcl_tensor *t_in = tu_tensor_from(ctx, dt, s.rows, s.cols, in);
    mpcl_tensor *t_bias = tu_tensor_from(ctx, MPCL_DTYPE_F32, 1, s.cols, bias);
    mpcl_tensor *t_dout = tu_tensor_from(ctx, dt, s.rows, s.cols, d_out);
    mpcl_tensor *t_out = tu_tensor_poisoned(ctx, dt, s.rows, s.cols);
    mpcl_tensor *t_z = tu_tensor_poisoned(ctx, dt, s.rows, s.cols);
    mpcl_tensor *t_dpre = tu_tensor_poisoned(ctx, dt, s.rows, s.cols);
    mpcl_tensor *t_dbias = tu_tensor_poisoned(ctx, dt, 1, s.cols);
    mpcl_tensor *t_dbias32 = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, 1, s.cols);

    double *din = tu_to_double(in, n), *dbias = tu_to_double(bias, s.cols),
           *ddout = tu_to_double(d_out, n);
    double *want = malloc(n * sizeof *want), *zref = malloc(n * sizeof *zref);
    double *dpre_ref = malloc(n * sizeof *dpre_ref);
    ref_bias_act_forward(want, zref, din, dbias, s.rows, s.cols, act);
    ref_bias_act_backward(dpre_ref, ddout, zref, s.rows, s.cols, act);

    const tu_rounding st = tu_storage_rounding(dt);
    const double st_rel = st.rel, st_abs = st.abs;

    TU_ASSERT_OK(mpcl_bias_act_forward_z(ctx, t_out, t_z, t_in, t_bias, act));
    float *out = tu_download(t_out), *z = tu_download(t_z);
    snprintf(what, sizeof what, "forward %s %s %zux%zu", mpcl_activation_name(act), dname(dt),
             s.rows, s.cols);
    const bool gelu_f32 = act == MPCL_ACT_GELU && dt == MPCL_DTYPE_F32;
    double fa = (gelu_f32 ? 0 : 4e-6) + st_abs, fr = (gelu_f32 ? 8e-6 : 4e-6) + st_rel;
    assert_true(tu_check_close(what, out, want, n, fa, fr, tu_norm_tol(fa, fr, want, n)));
    /* z = in + bias: one f32 rounding, then the storage rounding. */
    snprintf(what, sizeof what, "z %s %s %zux%zu", mpcl_activation_name(act), dname(dt), s.rows,
             s.cols);
    assert_true(tu_check_close(what, z, zref, n, st_abs, 0x1p-24 + st_rel,
                               tu_norm_tol(st_abs, 0x1p-24 + st_rel, zref, n)));

    mpcl_act_saved which = mpcl_activation_saved(act);
    const mpcl_tensor *saved = which == MPCL_ACT_SAVED_OUTPUT   ? t_out
                               : which == MPCL_ACT_SAVED_PREACT ? t_z
                                                                : NULL;
    TU_ASSERT_OK(mpcl_bias_act_backward(ctx, t_dpre, t_dout, saved, act));
    float *dpre = tu_download(t_dpre);
    double saved_err = dt == MPCL_DTYPE_F16    ? (act == MPCL_ACT_GELU ? 2e-3 : 0x1p-11)
                       : dt == MPCL_DTYPE_BF16 ? (act == MPCL_ACT_GELU ? 1.6e-2 : 0x1p-8)
                                               : 8e-6;
    double back_abs = 2 * saved_err + st_abs;
    snprintf(what, sizeof what, "backward %s %s %zux%zu", mpcl_activation_name(act), dname(dt),
             s.rows, s.cols);
    assert_true(tu_check_close(what, dpre, dpre_ref, n, back_abs, 8e-6 + st_rel,
                               tu_norm_tol(back_abs, 8e-6 + st_rel, dpre_ref, n)));

    /* The bias gradient of what the device wrote: f32 sums of `rows` terms
     * (in any order), error <= rows * 2^-24 * sum |x| per column. In the
     * storage dtype: that sum rounded once more, 2^-11 relative in f16 (of
     * the f32 sum, so of |want| + eb) and 2^-25 absolute below f16's normal
     * range; |sum| <= 2 * 130 here, far from f16's overflow. */
    double *dd = tu_to_double(dpre, n), *dbias_ref = malloc(s.cols * sizeof *dbias_ref);
    ref_bias_grad(dbias_ref, dd, s.rows, s.cols);
    double col_abs = 0;
    for (size_t j = 0; j < s.cols; j++) {
        double a = 0;
        for (size_t b = 0; b < s.rows; b++) a += fabs(dd[b * s.cols + j]);
        col_abs = fmax(col_abs, a);
    }
    TU_ASSERT_OK(mpcl_bias_grad(ctx, t_dbias, t_dpre));
    TU_ASSERT_OK(mpcl_bias_grad(ctx, t_dbias32, t_dpre));
    float *db = tu_download(t_dbias), *db32 = tu_download(t_dbias32);
    double eb = (double)s.rows * 0x1p-24 * col_abs;
    double gb_abs = eb * (1 + st_rel) + st_abs;
    snprintf(what, sizeof what, "bias grad %s %s %zux%zu", mpcl_activation_name(act), dname(dt),
             s.rows, s.cols);
    assert_true(tu_check_close(what, db, dbias_ref, s.cols, gb_abs, st_rel,
                               tu_norm_tol(gb_abs, st_rel, dbias_ref, s.cols)));
    /* Into an f32 d_bias: the f32 sum itself. */
    snprintf(what, sizeof what, "bias grad %s %s -> f32 %zux%zu", mpcl_activation_name(act),
             dname(dt), s.rows, s.cols);
    assert_true(tu_check_close(what, db32, dbias_ref, s.cols, eb, 0,
                               tu_norm_tol(eb, 0, dbias_ref, s.cols)));

    /* Fused (mpcl_bias_act_backward_grad): the same d_pre and d_bias bits as
     * the two kernels above, which the reference checked; also in place
     * (d_pre = d_out), as the model runs it. */
    mpcl_tensor *t_dpre2 = tu_tensor_poisoned(ctx, dt, s.rows, s.cols);
    mpcl_tensor *t_dbias2 = tu_tensor_poisoned(ctx, dt, 1, s.cols);
    mpcl_tensor *t_inplace = tu_tensor_from(ctx, dt, s.rows, s.cols, d_out);
    TU_ASSERT_OK(mpcl_bias_act_backward_grad(ctx, t_dpre2, t_dbias2, t_dout, saved, act));
    assert_true(same_bits(t_dpre2, t_dpre));
    assert_true(same_bits(t_dbias2, t_dbias));
    tu_poison(t_dbias2);
    TU_ASSERT_OK(mpcl_bias_act_backward_grad(ctx, t_inplace, t_dbias2, t_inplace, saved, act));
    assert_true(same_bits(t_inplace, t_dpre));
    assert_true(same_bits(t_dbias2, t_dbias));
    mpcl_tensor_destroy(t_dpre2);
    mpcl_tensor_destroy(t_dbias2);
    mpcl_tensor_destroy(t_inplace);

    /* The plain forward, in place (out = pre_in), gives the same output. */
    TU_ASSERT_OK(mpcl_bias_act_forward(ctx, t_in, t_in, t_bias, act));
    float *inplace = tu_download(t_in);
    assert_memory_equal(inplace, out, n * sizeof *out);

    free(inplace);
    free(db);
    free(db32);
    free(dbias_ref);
    free(dd);
    free(dpre);
    free(out);
    free(z);
    free(want);
    free(zref);
    free(dpre_ref);
    free(din);
    free(dbias);
    free(ddout);
    free(in);
    free(d_out);
    free(bias);
    mpcl_tensor *all[] = {t_in, t_bias, t_dout, t_out, t_z, t_dpre, t_dbias, t_dbias32};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
}

static void test_bias_act(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(tu_seed("bias_act"));
    /* The bias gradient in both its shapes, the CPU's and the GPU's. */
    for (int parts = -1; parts <= 1; parts += 2) {
        mpcl__bias_grad_force_parts(ctx, parts);
        for (size_t d = 0; d < NSTORAGES; d++)
            for (size_t si = 0; si < shape_count(ctx); si++)
                for (int a = 0; a < MPCL_ACT_COUNT; a++)
                    check_act_case(ctx, &r, storages[d], shapes[si], (mpcl_activation)a);
    }
    mpcl_context_destroy(ctx);
}

/* Saturation: large |z| gives exact 0/1 derivatives and finite values, never
 * the NaN of 0 * inf (GELU's z^3 overflows f32 beyond 7e12). */
static void test_act_extremes(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const float zs[] = {-1e30f, -65504, -100, -20, 20, 100, 65504, 1e30f};
    const size_t n = sizeof zs / sizeof zs[0];
    float ones[8], bias0 = 0;
    for (size_t i = 0; i < n; i++) ones[i] = 1;
    for (int a = 0; a < MPCL_ACT_COUNT; a++) {
        mpcl_activation act = (mpcl_activation)a;
        mpcl_tensor *in = tu_tensor_from(ctx, MPCL_DTYPE_F32, n, 1, zs);
        mpcl_tensor *bias = tu_tensor_from(ctx, MPCL_DTYPE_F32, 1, 1, &bias0);
        mpcl_tensor *d_out = tu_tensor_from(ctx, MPCL_DTYPE_F32, n, 1, ones);
        mpcl_tensor *out = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, n, 1);
        mpcl_tensor *z = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, n, 1);
        mpcl_tensor *d_pre = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, n, 1);
        TU_ASSERT_OK(mpcl_bias_act_forward_z(ctx, out, z, in, bias, act));
        mpcl_act_saved w = mpcl_activation_saved(act);
        TU_ASSERT_OK(mpcl_bias_act_backward(ctx, d_pre, d_out,
                                            w == MPCL_ACT_SAVED_PREACT   ? z
                                            : w == MPCL_ACT_SAVED_OUTPUT ? out
                                                                         : NULL,
                                            act));
        float *y = tu_download(out), *g = tu_download(d_pre);
        for (size_t i = 0; i < n; i++) {
            double want_y = ref_act(act, zs[i]), want_g = ref_act_grad(act, zs[i]);
            if (isnan(y[i]) || fabs((double)y[i] - want_y) > 1e-6 * fabs(want_y) + 1e-6)
                fail_msg("%s(%g) = %g, want %g", mpcl_activation_name(act), (double)zs[i],
                         (double)y[i], want_y);
            if (isnan(g[i]) || fabs((double)g[i] - want_g) > 1e-6)
                fail_msg("%s'(%g) = %g, want %g", mpcl_activation_name(act), (double)zs[i],
                         (double)g[i], want_g);
        }
        free(y);
        free(g);
        mpcl_tensor *all[] = {in, bias, d_out, out, z, d_pre};
        for (size_t i = 0; i < 6; i++) mpcl_tensor_destroy(all[i]);
    }
    mpcl_context_destroy(ctx);
}

/* ---- the bias gradient at its edges ---- */

/* Columns with special sums, then random ones: d_bias in the storage dtype
 * must be the f32 sum rounded once (inf where an f16 sum overflows, NaN where
 * a NaN or inf - inf enters), and in f32 the sum itself. 40 rows split into
 * parts of 3 (the last ones empty); 1 row: every part but the first empty.
 * 45 columns: one block of 32, then 8 + 5 (a whole vector and a part); 40:
 * 32 + 8, the kernel for whole vectors with a short last block. */
enum { EDGE_COLS_MAX = 45 };
static void check_bias_grad_edges(mpcl_context *ctx, tu_rng *r, mpcl_dtype dt, size_t rows,
                                  size_t cols) {
    const size_t n = rows * cols;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = tu_stored(dt, (float)tu_uniform(r, -2, 2));
    for (size_t b = 0; b < rows; b++) {
        float *row = x + b * cols;
        row[0] = 1;
        row[1] = b == rows - 1 ? INFINITY : 1;
        row[2] = b == rows / 2 ? NAN : 1;
        row[3] = b == 0 ? INFINITY : b == rows - 1 ? -INFINITY : 0;
        row[4] = 60000; /* 40 * 60000 overflows f16 */
        row[5] = -60000;
        row[6] = b == 0 ? 65504 : b == rows - 1 ? 16 : 0; /* 65520: f16 rounds to inf */
        row[7] = 0x1p-24f;                                /* an f16 subnormal sum */
        row[8] = b == 0 ? 1000 : b == rows - 1 ? -1000 : 0.5f;
    }
    mpcl_tensor *t_x = tu_tensor_from(ctx, dt, rows, cols, x);
    mpcl_tensor *t_db = tu_tensor_poisoned(ctx, dt, 1, cols);
    mpcl_tensor *t_db32 = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, 1, cols);
    TU_ASSERT_OK(mpcl_bias_grad(ctx, t_db, t_x));
    TU_ASSERT_OK(mpcl_bias_grad(ctx, t_db32, t_x));
    float *db = tu_download(t_db), *db32 = tu_download(t_db32);

    double *xd = tu_to_double(x, n), want[EDGE_COLS_MAX], want_st[EDGE_COLS_MAX];
    ref_bias_grad(want, xd, rows, cols);
    double col_abs = 0;
    for (size_t j = 0; j < cols; j++) {
        double a = 0;
        for (size_t b = 0; b < rows; b++)
            a += isfinite(xd[b * cols + j]) ? fabs(xd[b * cols + j]) : 0;
        col_abs = fmax(col_abs, a);
        /* The storage rounding's overflow is exact: an f16 sum beyond
         * 65520 (or at it, a tie to the even inf) is inf. */
        want_st[j] = want[j];
        if (dt == MPCL_DTYPE_F16 && isfinite(want[j])) {
            double rounded = (double)mpcl_f16_to_f32(mpcl_f64_to_f16(want[j]));
            if (isinf(rounded)) want_st[j] = rounded;
        }
    }
    /* As in check_act_case: f32 summation error, then one storage rounding. */
    const bool f16 = dt == MPCL_DTYPE_F16;
    double eb = (double)rows * 0x1p-24 * col_abs, rel = f16 ? 0x1p-11 : 0;
    double abs_tol = eb * (1 + rel) + (f16 ? 0x1p-25 : 0);
    char what[96];
    snprintf(what, sizeof what, "bias grad edges %s %zux%zu", dname(dt), rows, cols);
    /* Columns 4-6 hold |sums| up to 2.4e6 beside small ones; the normalized
     * check adds nothing to the elementwise one here. */
    assert_true(tu_check_close(what, db, want_st, cols, abs_tol, rel, INFINITY));
    snprintf(what, sizeof what, "bias grad edges %s -> f32 %zux%zu", dname(dt), rows, cols);
    assert_true(tu_check_close(what, db32, want, cols, eb, 0, INFINITY));
    if (f16 && rows > 1) {
        assert_true(isinf(db[4]) && db[4] > 0);
        assert_true(isinf(db[5]) && db[5] < 0);
        assert_true(isinf(db[6]) && db[6] > 0);
        assert_true((double)db[7] == 0x1p-24 * (double)rows);
    }

    free(db);
    free(db32);
    free(xd);
    free(x);
    mpcl_tensor_destroy(t_x);
    mpcl_tensor_destroy(t_db);
    mpcl_tensor_destroy(t_db32);
}

static void test_bias_grad_edges(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(tu_seed("bias_grad_edges"));
    /* Both shapes; in the GPU's, 40 rows are 3 parts of 14, 14 and 12 rows,
     * and 1100 rows (parts capped at 64: 18 rows each) 62 parts, the last of 2. */
    for (int parts = -1; parts <= 1; parts += 2) {
        mpcl__bias_grad_force_parts(ctx, parts);
        for (size_t d = 0; d < 2; d++) {
            check_bias_grad_edges(ctx, &r, storages[d], 40, 45);
            check_bias_grad_edges(ctx, &r, storages[d], 1, 45);
            check_bias_grad_edges(ctx, &r, storages[d], 40, 40);
            check_bias_grad_edges(ctx, &r, storages[d], 1100, 45);
        }
    }
    mpcl_context_destroy(ctx);
}

/* ---- f16 through the vector and the element-by-element paths ---- */

/* Every f16 bit pattern through the identity kernels with a zero bias, at a
 * width that puts every element on the element-by-element tail path (7), one
 * that puts them all on the float8 path (8), and one that mixes them (13):
 * each load and store must be exact. Forward adds +0, which turns -0 into +0;
 * backward multiplies by 1, which keeps every bit; NaN stays NaN. */
static void test_f16_paths(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const size_t widths[] = {7, 8, 13};
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        size_t cols = widths[w], rows = (65536 + cols - 1) / cols, n = rows * cols;
        uint16_t *h = malloc(n * sizeof *h), *got = malloc(n * sizeof *got);
        for (size_t i = 0; i < n; i++) h[i] = (uint16_t)i;
        float *zero = calloc(cols, sizeof *zero);
        mpcl_tensor *in = tu_tensor(ctx, MPCL_DTYPE_F16, rows, cols);
        TU_ASSERT_OK(mpcl_tensor_upload_raw(in, h, n * sizeof *h));
        mpcl_tensor *bias = tu_tensor_from(ctx, MPCL_DTYPE_F32, 1, cols, zero);
        mpcl_tensor *out = tu_tensor_poisoned(ctx, MPCL_DTYPE_F16, rows, cols);
        mpcl_tensor *back = tu_tensor_poisoned(ctx, MPCL_DTYPE_F16, rows, cols);
        TU_ASSERT_OK(mpcl_bias_act_forward(ctx, out, in, bias, MPCL_ACT_IDENTITY));
        TU_ASSERT_OK(mpcl_bias_act_backward(ctx, back, in, NULL, MPCL_ACT_IDENTITY));
        for (int pass = 0; pass < 2; pass++) {
            TU_ASSERT_OK(mpcl_tensor_download_raw(pass ? back : out, got, n * sizeof *got));
            for (size_t i = 0; i < n; i++) {
                bool nan = (h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff) != 0;
                uint16_t want = !pass && h[i] == 0x8000 ? 0 : h[i];
                bool ok =
                    nan ? (got[i] & 0x7c00) == 0x7c00 && (got[i] & 0x3ff) != 0 : got[i] == want;
                if (!ok)
                    fail_msg("%s width %zu: f16 0x%04x -> 0x%04x, want 0x%04x",
                             pass ? "backward" : "forward", cols, h[i], got[i], want);
            }
        }
        free(h);
        free(got);
        free(zero);
        mpcl_tensor_destroy(in);
        mpcl_tensor_destroy(bias);
        mpcl_tensor_destroy(out);
        mpcl_tensor_destroy(back);
    }
    mpcl_context_destroy(ctx);
}

/* ---- softmax cross-entropy ---- */

typedef struct xent_case {
    shape s;
    float lo, hi; /* logits uniform in [lo, hi], or +-1e4 at random when extreme */
    bool extreme;
    float scale;
} xent_case;

/* Tolerances: per row f32 computes m - z[label] exactly-ish and log(sum exp)
 * with a few ulp of error relative to max |z| + log C, so the loss sum of B
 * rows is within B * 16 * 2^-24 * (max |z| + log C) (plus f32 summation over
 * the rows). The gradient (p - onehot) * scale / B: p within 8 ulp, so atol
 * 8 * 2^-24 * scale / B and rtol 1e-5 in f32; f16 or bf16 storage adds one
 * rounding (storage_rounding: 2^-11 or 2^-8 relative).
 * The correct count is exact: both sides compare the same stored values. */
static void check_xent_case(mpcl_context *ctx, tu_rng *r, mpcl_dtype dt, xent_case xc) {
    const size_t B = xc.s.rows, C = xc.s.cols, n = B * C;
    float *logits = malloc(n * sizeof *logits);
    int32_t *labels = malloc(B * sizeof *labels);
    for (size_t i = 0; i < n; i++) {
        float v = xc.extreme ? (tu_uniform(r, 0, 1) < 0.5 ? -1e4f : 1e4f)
                             : (float)tu_uniform(r, xc.lo, xc.hi);
        logits[i] = tu_stored(dt, v);
    }
    for (size_t b = 0; b < B; b++) labels[b] = (int32_t)tu_uniform(r, 0, (double)C - 1e-9);
    mpcl_tensor *t_logits = tu_tensor_from(ctx, dt, B, C, logits);
    mpcl_tensor *t_labels = tu_tensor(ctx, MPCL_DTYPE_I32, B, 1);
    TU_ASSERT_OK(mpcl_tensor_upload_i32(t_labels, labels, B));
    mpcl_tensor *t_scale = tu_tensor_from(ctx, MPCL_DTYPE_F32, 1, 1, &xc.scale);
    mpcl_tensor *t_d = tu_tensor_poisoned(ctx, dt, B, C);
    mpcl_tensor *stats = NULL;
    TU_ASSERT_OK(mpcl_xent_stats_create(ctx, &stats));

    double *dl = tu_to_double(logits, n), *dref = malloc(n * sizeof *dref), loss_ref;
    size_t correct_ref;
    assert_int_equal(ref_softmax_xent(dl, labels, B, C, xc.scale, &loss_ref, &correct_ref, dref),
                     0);

    /* Two steps: forward_backward, then forward alone; the stats add up. */
    TU_ASSERT_OK(mpcl_softmax_xent_forward_backward(ctx, stats, t_d, t_logits, t_labels, t_scale));
    TU_ASSERT_OK(mpcl_softmax_xent_forward(ctx, stats, t_logits, t_labels));
    mpcl_xent_stats got;
    TU_ASSERT_OK(mpcl_xent_stats_read(ctx, stats, &got, true));
    double zmax = max_abs(dl, n);
    double loss_tol = 2 * (double)B * 16 * 0x1p-24 * (zmax + log((double)C) + 1);
    if (!(fabs(got.loss_sum - 2 * loss_ref) <= loss_tol))
        fail_msg("xent %s %zux%zu: loss sum %.9g, want %.9g (tol %.3g)", dname(dt), B, C,
                 got.loss_sum, 2 * loss_ref, loss_tol);
    assert_int_equal(got.correct, 2 * correct_ref);
    assert_int_equal(got.samples, 2 * B);
    assert_int_equal(got.calls, 2);
    assert_int_equal(got.bad, 0);
    assert_int_equal(got.bad_row, -1);

    float *d = tu_download(t_d);
    const tu_rounding st = tu_storage_rounding(dt);
    double g = (double)xc.scale / (double)B;
    char what[128];
    snprintf(what, sizeof what, "xent grad %s %zux%zu scale %g%s", dname(dt), B, C,
             (double)xc.scale, xc.extreme ? " extreme" : "");
    double ga = 8 * 0x1p-24 * g + st.abs, gr = 1e-5 + st.rel;
    assert_true(tu_check_close(what, d, dref, n, ga, gr, tu_norm_tol(ga, gr, dref, n)));

    /* The reset by the read left the accumulator at zero. */
    TU_ASSERT_OK(mpcl_xent_stats_read(ctx, stats, &got, false));
    assert_int_equal(got.calls, 0);
    assert_true(got.loss_sum == 0);

    free(d);
    free(dl);
    free(dref);
    free(logits);
    free(labels);
    mpcl_tensor *all[] = {t_logits, t_labels, t_scale, t_d, stats};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
}

static void test_softmax_xent(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(tu_seed("softmax_xent"));
    for (size_t d = 0; d < NSTORAGES; d++) {
        for (size_t si = 0; si < shape_count(ctx); si++) {
            shape s = shapes[si];
            check_xent_case(ctx, &r, storages[d], (xent_case){s, -5, 5, false, 1});
            check_xent_case(ctx, &r, storages[d], (xent_case){s, -5, 5, false, 32768});
            /* +-1e4: exp(z - max) underflows to 0 for all but the maxima, the
             * loss is up to 2e4 per row and everything stays finite. */
            check_xent_case(ctx, &r, storages[d], (xent_case){s, 0, 0, true, 1});
        }
        /* Batches of several work-groups (MPCL_ABI_LOSS_GROUP_ROWS = 512
         * rows each): two, the last short; three of a GPT's 256 classes. */
        check_xent_case(ctx, &r, storages[d], (xent_case){{600, 3}, -5, 5, false, 1});
        if (!tu_slow_device(ctx))
            check_xent_case(ctx, &r, storages[d], (xent_case){{1100, 256}, -5, 5, false, 1});
    }
    mpcl_context_destroy(ctx);
}

/* An f16 gradient past 65504 is +-inf, never NaN: that is what dynamic loss
 * scaling detects. logits (0, 0), label 0: p = (1/2, 1/2), so with scale
 * 2^20 the gradient is (-2^19, +2^19). f32 and bf16 (f32's exponent range)
 * hold it exactly. */
static void test_xent_overflow(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    for (size_t d = 0; d < NSTORAGES; d++) {
        mpcl_dtype dt = storages[d];
        const float zero2[2] = {0, 0}, scale = 0x1p20f;
        const int32_t label = 0;
        mpcl_tensor *logits = tu_tensor_from(ctx, dt, 1, 2, zero2);
        mpcl_tensor *labels = tu_tensor(ctx, MPCL_DTYPE_I32, 1, 1);
        TU_ASSERT_OK(mpcl_tensor_upload_i32(labels, &label, 1));
        mpcl_tensor *t_scale = tu_tensor_from(ctx, MPCL_DTYPE_F32, 1, 1, &scale);
        mpcl_tensor *grad = tu_tensor_poisoned(ctx, dt, 1, 2);
        mpcl_tensor *stats = NULL;
        TU_ASSERT_OK(mpcl_xent_stats_create(ctx, &stats));
        TU_ASSERT_OK(mpcl_softmax_xent_forward_backward(ctx, stats, grad, logits, labels, t_scale));
        float *g = tu_download(grad);
        if (dt == MPCL_DTYPE_F16) {
            assert_true(isinf(g[0]) && g[0] < 0);
            assert_true(isinf(g[1]) && g[1] > 0);
        } else {
            assert_true(g[0] == -0x1p19f && g[1] == 0x1p19f);
        }
        mpcl_xent_stats s;
        TU_ASSERT_OK(mpcl_xent_stats_read(ctx, stats, &s, true));
        assert_true(fabs(s.loss_sum - log(2.0)) < 1e-6);
        free(g);
        mpcl_tensor *all[] = {logits, labels, t_scale, grad, stats};
        for (size_t i = 0; i < 5; i++) mpcl_tensor_destroy(all[i]);
    }
    mpcl_context_destroy(ctx);
}

/* The softmax has two kernels (src/compute/losses.c): eight rows an item
 * below 32 classes, from there on a row an item or (MPCL_XENT=group) a row
 * per work-group. The label tests run them all. */
static const size_t xent_widths[] = {3, 37};

/* The first bad row is found wherever it lies: the kernels take 512 rows
 * per work-group (the narrow one eight rows per lane group; the shared-rows
 * one 16 rows), so a batch of 1201 rows with bad labels at 530 (the second
 * group, an inner lane), 600 (a lane group of one live lane) and 1100 (the
 * third group) must name 530, whichever group finishes first. */
static void test_xent_bad_label_late_row(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    enum { B = 1201 };
    for (size_t w = 0; w < sizeof xent_widths / sizeof xent_widths[0]; w++) {
        const size_t C = xent_widths[w];
        float *logits = malloc(B * C * sizeof *logits);
        int32_t labels[B];
        for (size_t i = 0; i < B * C; i++) logits[i] = (float)(i % 7) - 3;
        for (size_t b = 0; b < B; b++) labels[b] = (int32_t)(b % C);
        labels[530] = (int32_t)C + 4;
        labels[600] = -2;
        labels[1100] = (int32_t)C + 6;
        mpcl_tensor *t_logits = tu_tensor_from(ctx, MPCL_DTYPE_F32, B, C, logits);
        mpcl_tensor *t_labels = tu_tensor(ctx, MPCL_DTYPE_I32, B, 1);
        TU_ASSERT_OK(mpcl_tensor_upload_i32(t_labels, labels, B));
        mpcl_tensor *stats = NULL;
        TU_ASSERT_OK(mpcl_xent_stats_create(ctx, &stats));
        TU_ASSERT_OK(mpcl_softmax_xent_forward(ctx, stats, t_logits, t_labels));
        mpcl_xent_stats s;
        assert_int_equal(mpcl_xent_stats_read(ctx, stats, &s, true), MPCL_ERR_LABEL);
        assert_int_equal(s.bad, 3);
        assert_int_equal(s.bad_row, 530);
        assert_int_equal(s.bad_label, (int64_t)C + 4);
        assert_int_equal(s.samples, B - 3);
        mpcl_tensor *all[] = {t_logits, t_labels, stats};
        for (size_t i = 0; i < 3; i++) mpcl_tensor_destroy(all[i]);
        free(logits);
    }
    mpcl_context_destroy(ctx);
}

/* A label out of range: MPCL_ERR_LABEL from the read that follows, naming the
 * first bad call, row and label; zero gradient rows, no NaN; the flag stays
 * until a reset and a clean interval reads MPCL_OK again. */
static void check_xent_bad_label(mpcl_context *ctx, tu_rng *r, size_t C) {
    enum { B = 7 };
    float *logits = malloc(B * C * sizeof *logits);
    double *dl = malloc(B * C * sizeof *dl), *dref = malloc(B * C * sizeof *dref);
    tu_fill_uniform(r, logits, B * C, -3, 3);
    const int32_t c = (int32_t)C;
    int32_t good[B] = {0, 1, 2 % c, 3 % c, c - 1, 0, 1}, bad[B] = {0, 1, 2 % c, c, c - 1, -1, 1};
    mpcl_tensor *t_logits = tu_tensor_from(ctx, MPCL_DTYPE_F32, B, C, logits);
    mpcl_tensor *t_good = tu_tensor(ctx, MPCL_DTYPE_I32, B, 1),
                *t_bad = tu_tensor(ctx, MPCL_DTYPE_I32, B, 1);
    TU_ASSERT_OK(mpcl_tensor_upload_i32(t_good, good, B));
    TU_ASSERT_OK(mpcl_tensor_upload_i32(t_bad, bad, B));
    mpcl_tensor *grad = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, B, C);
    mpcl_tensor *stats = NULL;
    TU_ASSERT_OK(mpcl_xent_stats_create(ctx, &stats));

    TU_ASSERT_OK(mpcl_softmax_xent_forward(ctx, stats, t_logits, t_good));
    TU_ASSERT_OK(mpcl_softmax_xent_forward_backward(ctx, stats, grad, t_logits, t_bad, NULL));
    TU_ASSERT_OK(mpcl_softmax_xent_forward(ctx, stats, t_logits, t_bad));
    mpcl_xent_stats s;
    char want[64];
    snprintf(want, sizeof want, "label %d in row 3 of loss call 1", c);
    for (int twice = 0; twice < 2; twice++) { /* a read without reset keeps the flag */
        assert_int_equal(mpcl_xent_stats_read(ctx, stats, &s, twice == 1), MPCL_ERR_LABEL);
        assert_non_null(strstr(mpcl_context_errmsg(ctx), want));
        assert_int_equal(s.bad, 4);
        assert_int_equal(s.bad_call, 1);
        assert_int_equal(s.bad_row, 3);
        assert_int_equal(s.bad_label, c);
        assert_int_equal(s.calls, 3);
        assert_int_equal(s.samples, 3 * B - 4);
        assert_true(isfinite(s.loss_sum));
    }
    /* The rows with bad labels have zero gradients; the others match. */
    double loss;
    size_t correct;
    for (size_t i = 0; i < B * C; i++) dl[i] = logits[i];
    assert_int_equal(ref_softmax_xent(dl, bad, B, C, 1, &loss, &correct, dref), 2);
    float *g = tu_download(grad);
    assert_true(tu_check_close("bad-label grad", g, dref, B * C, 1e-7, 1e-5, 1e-5));
    for (size_t k = 0; k < C; k++) assert_true(g[3 * C + k] == 0 && g[5 * C + k] == 0);
    free(g);

    /* After the reset, a clean interval reads OK. */
    TU_ASSERT_OK(mpcl_softmax_xent_forward(ctx, stats, t_logits, t_good));
    TU_ASSERT_OK(mpcl_xent_stats_read(ctx, stats, &s, true));
    assert_int_equal(s.bad, 0);
    assert_int_equal(s.bad_row, -1);
    assert_int_equal(s.samples, B);
    /* And a reset on its own clears a flag too. */
    TU_ASSERT_OK(mpcl_softmax_xent_forward(ctx, stats, t_logits, t_bad));
    TU_ASSERT_OK(mpcl_xent_stats_reset(ctx, stats));
    TU_ASSERT_OK(mpcl_xent_stats_read(ctx, stats, &s, false));
    assert_int_equal(s.calls, 0);

    mpcl_tensor *all[] = {t_logits, t_good, t_bad, grad, stats};
    for (size_t i = 0; i < 5; i++) mpcl_tensor_destroy(all[i]);
    free(logits);
    free(dl);
    free(dref);
}

static void test_xent_bad_label(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(tu_seed("xent_bad_label"));
    check_xent_bad_label(ctx, &r, 5);
    check_xent_bad_label(ctx, &r, 37);
    mpcl_context_destroy(ctx);
}

/* ---- casts ---- */

static uint16_t f16_bits_of(const mpcl_tensor *t, size_t i) {
    size_t n = mpcl_tensor_count(t);
    uint16_t *h = malloc(n * sizeof *h);
    TU_ASSERT_OK(mpcl_tensor_download_raw(t, h, n * sizeof *h));
    uint16_t v = h[i];
    free(h);
    return v;
}

/* The casts take eight elements per work-item and the last n % 8 one by
 * one. The f32 edges, after `shift` ones, through f32 -> dt -> f32 on the
 * device: over shift 0 .. 7 every edge value goes through several lanes of
 * the eight-element path and of the tail. x gets the shift + count inputs,
 * bits dt's patterns; returns the values cast back (the caller frees). */
static float *cast_round_trip_shifted(mpcl_context *ctx, mpcl_dtype dt, const float *edges,
                                      size_t count, size_t shift, float *x, uint16_t *bits) {
    const size_t n = shift + count;
    for (size_t i = 0; i < n; i++) x[i] = i < shift ? 1.0f : edges[i - shift];
    mpcl_tensor *src = tu_tensor_from(ctx, MPCL_DTYPE_F32, 1, n, x);
    mpcl_tensor *h = tu_tensor_poisoned(ctx, dt, 1, n);
    mpcl_tensor *back = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, 1, n);
    TU_ASSERT_OK(mpcl_cast(ctx, h, src));
    TU_ASSERT_OK(mpcl_cast(ctx, back, h));
    TU_ASSERT_OK(mpcl_tensor_download_raw(h, bits, n * sizeof *bits));
    float *f = tu_download(back);
    mpcl_tensor_destroy(src);
    mpcl_tensor_destroy(h);
    mpcl_tensor_destroy(back);
    return f;
}

/* f32 -> f16 must round exactly like binary16 RNE; mpcl_f64_to_f16 is the
 * host's independent correctly rounded conversion. */
static void test_cast_edges(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const float edges[] = {
        0.0f,           -0.0f,     1.0f,         65504.0f,     -65504.0f,
        65519.0f,                                              /* rounds down to 65504 */
        65520.0f,       -65520.0f, 1e5f,                       /* overflow to inf */
        0x1p-24f,       -0x1p-24f, 0x1p-25f,                   /* tie: to even (0) */
        0x1.8p-25f,     0x1p-14f,  0x1.ff8p-15f, 1 + 0x1p-11f, /* tie: to even (1) */
        1 + 0x1.8p-10f,                                        /* tie: to even (1 + 2^-9) */
        INFINITY,       -INFINITY, NAN,          3.14159265f,  -2.5e-6f};
    const size_t count = sizeof edges / sizeof edges[0];
    for (size_t shift = 0; shift < 8; shift++) {
        const size_t n = shift + count;
        float x[8 + sizeof edges / sizeof edges[0]];
        uint16_t bits[8 + sizeof edges / sizeof edges[0]];
        float *f = cast_round_trip_shifted(ctx, MPCL_DTYPE_F16, edges, count, shift, x, bits);
        for (size_t i = 0; i < n; i++) {
            if (isnan(x[i])) {
                assert_true((bits[i] & 0x7c00) == 0x7c00 && (bits[i] & 0x3ff) != 0);
                assert_true(isnan(f[i]));
                continue;
            }
            uint16_t want = mpcl_f64_to_f16(x[i]);
            if (bits[i] != want)
                fail_msg("cast %a (shift %zu) -> f16 0x%04x, want 0x%04x", (double)x[i], shift,
                         bits[i], want);
            float wf = mpcl_f16_to_f32(want);
            if (memcmp(&f[i], &wf, sizeof wf) != 0)
                fail_msg("cast back of 0x%04x = %a, want %a", want, (double)f[i], (double)wf);
        }
        free(f);
    }
    (void)f16_bits_of;
    mpcl_context_destroy(ctx);
}

/* Every one of the 65536 f16 bit patterns converts exactly to f32, and a
 * random f32 tensor at each shape rounds exactly as the host does. */
static void test_cast_all(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(tu_seed("cast_all"));
    uint16_t *all = malloc(65536 * sizeof *all);
    for (size_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    mpcl_tensor *h = tu_tensor(ctx, MPCL_DTYPE_F16, 256, 256);
    TU_ASSERT_OK(mpcl_tensor_upload_raw(h, all, 65536 * sizeof *all));
    mpcl_tensor *f = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, 256, 256);
    TU_ASSERT_OK(mpcl_cast(ctx, f, h));
    float *got = tu_download(f);
    for (size_t i = 0; i < 65536; i++) {
        float want = mpcl_f16_to_f32((uint16_t)i);
        if (isnan(want) ? !isnan(got[i]) : memcmp(&got[i], &want, sizeof want) != 0)
            fail_msg("f16 0x%04zx -> %a, want %a", i, (double)got[i], (double)want);
    }
    free(got);
    free(all);
    mpcl_tensor_destroy(h);
    mpcl_tensor_destroy(f);

    for (size_t si = 0; si < shape_count(ctx); si++) {
        shape s = shapes[si];
        size_t n = s.rows * s.cols;
        float *x = malloc(n * sizeof *x);
        /* Magnitudes from f16 subnormals to past its overflow. */
        for (size_t i = 0; i < n; i++)
            x[i] = (float)(exp2(tu_uniform(&r, -26, 17)) * (tu_uniform(&r, 0, 1) < 0.5 ? -1 : 1));
        mpcl_tensor *src = tu_tensor_from(ctx, MPCL_DTYPE_F32, s.rows, s.cols, x);
        mpcl_tensor *dst = tu_tensor_poisoned(ctx, MPCL_DTYPE_F16, s.rows, s.cols);
        mpcl_tensor *copy = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, s.rows, s.cols);
        TU_ASSERT_OK(mpcl_cast(ctx, dst, src));
        TU_ASSERT_OK(mpcl_cast(ctx, copy, src)); /* same dtype: a copy */
        uint16_t *bits = malloc(n * sizeof *bits);
        TU_ASSERT_OK(mpcl_tensor_download_raw(dst, bits, n * sizeof *bits));
        for (size_t i = 0; i < n; i++) {
            uint16_t want = mpcl_f64_to_f16(x[i]);
            if (bits[i] != want)
                fail_msg("cast %zux%zu [%zu] %a -> 0x%04x, want 0x%04x", s.rows, s.cols, i,
                         (double)x[i], bits[i], want);
        }
        float *c = tu_download(copy);
        assert_memory_equal(c, x, n * sizeof *x);
        free(c);
        free(bits);
        free(x);
        mpcl_tensor_destroy(src);
        mpcl_tensor_destroy(dst);
        mpcl_tensor_destroy(copy);
    }
    mpcl_context_destroy(ctx);
}

/* ---- the elementwise sum ---- */

/* out = a + b against the double sum, within the one rounding into the
 * storage dtype (f16 and bf16 round the f32 sum once more: an f32 unit
 * beside theirs), out poisoned first; in place (out is a) the same bits;
 * a wrong shape or dtype refused with out untouched. */
static void test_add(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(tu_seed("add"));
    for (size_t di = 0; di < NSTORAGES; di++)
        for (size_t si = 0; si < shape_count(ctx); si++) {
            mpcl_dtype dt = storages[di];
            shape s = shapes[si];
            size_t n = s.rows * s.cols;
            float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
            double *want = malloc(n * sizeof *want);
            assert_true(a && b && want);
            tu_fill_uniform(&r, a, n, -4, 4);
            tu_fill_uniform(&r, b, n, -4, 4);
            for (size_t i = 0; i < n; i++) {
                a[i] = tu_stored(dt, a[i]), b[i] = tu_stored(dt, b[i]);
                want[i] = (double)a[i] + (double)b[i];
            }
            mpcl_tensor *ta = tu_tensor_from(ctx, dt, s.rows, s.cols, a);
            mpcl_tensor *tb = tu_tensor_from(ctx, dt, s.rows, s.cols, b);
            mpcl_tensor *out = tu_tensor_poisoned(ctx, dt, s.rows, s.cols);
            TU_ASSERT_OK(mpcl_add(ctx, out, ta, tb));
            float *got = tu_download(out);
            tu_rounding u = tu_storage_rounding(dt);
            double rtol = u.rel + 0x1p-24;
            char what[64];
            snprintf(what, sizeof what, "add %s %zux%zu", dname(dt), s.rows, s.cols);
            if (!tu_check_close(what, got, want, n, u.abs, rtol, tu_norm_tol(u.abs, rtol, want, n)))
                fail_msg("%s differs from the double sum", what);
            TU_ASSERT_OK(mpcl_add(ctx, ta, ta, tb));
            float *in_place = tu_download(ta);
            assert_memory_equal(in_place, got, n * sizeof *got);
            free(in_place), free(got), free(a), free(b), free(want);
            mpcl_tensor_destroy(ta);
            mpcl_tensor_destroy(tb);
            mpcl_tensor_destroy(out);
        }
    mpcl_tensor *a = tu_tensor(ctx, MPCL_DTYPE_F32, 4, 3),
                *t = tu_tensor(ctx, MPCL_DTYPE_F32, 3, 4);
    mpcl_tensor *h = tu_tensor(ctx, MPCL_DTYPE_F16, 4, 3);
    mpcl_tensor *out = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, 4, 3);
    tu_expect_error(mpcl_add(ctx, out, a, t), MPCL_ERR_SHAPE, "mpcl_add: b is 3x4, want 4x3");
    tu_expect_error(mpcl_add(ctx, out, h, a), MPCL_ERR_DTYPE, "mpcl_add: a is f16, want f32");
    tu_expect_error(mpcl_add(ctx, out, a, NULL), MPCL_ERR_INVALID_ARG, "mpcl_add: b is NULL");
    assert_true(tu_still_poisoned(out));
    mpcl_tensor_destroy(a);
    mpcl_tensor_destroy(t);
    mpcl_tensor_destroy(h);
    mpcl_tensor_destroy(out);
    mpcl_context_destroy(ctx);
}

/* f32 -> bf16 against ref_f64_to_bf16 (ref_ops.c: rounds in double, no bit
 * trick), bf16 -> f32 exactly, and f16 <-> bf16 (one rounding, through the
 * exact float value) against the double references, on edges, on every f16
 * and every bf16 pattern, and on random tensors at each shape. */
static void test_cast_bf16(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(tu_seed("cast_bf16"));
    const float edges[] = {0.0f,
                           -0.0f,
                           1.0f,
                           1.00390625f, /* 1 + 2^-8: tie, to even (1) */
                           1.01171875f, /* 1 + 3 * 2^-8: tie, to even, up */
                           0x1.fep127f,
                           0x1.ffp127f,
                           -0x1.ffp127f,    /* largest bf16; the tie above: inf */
                           0x1.fefffep127f, /* just below that tie */
                           1e38f,
                           3.4e38f,
                           0x1p-133f,
                           0x1p-134f, /* smallest subnormal; tie to 0 */
                           0x1.8p-134f,
                           0x1p-149f,
                           0x1.fffffcp-127f, /* largest f32 subnormal: up */
                           65504.0f,
                           65520.0f,
                           INFINITY,
                           -INFINITY,
                           NAN,
                           -3.14159265f,
                           0.1f};
    const size_t count = sizeof edges / sizeof edges[0];
    for (size_t shift = 0; shift < 8; shift++) {
        const size_t n = shift + count;
        float x[8 + sizeof edges / sizeof edges[0]];
        uint16_t bits[8 + sizeof edges / sizeof edges[0]];
        float *f = cast_round_trip_shifted(ctx, MPCL_DTYPE_BF16, edges, count, shift, x, bits);
        for (size_t i = 0; i < n; i++) {
            uint16_t want = ref_f64_to_bf16(x[i]);
            if (bits[i] != want)
                fail_msg("cast %a (shift %zu) -> bf16 0x%04x, want 0x%04x", (double)x[i], shift,
                         bits[i], want);
            double wf = ref_bf16_value(want);
            if (isnan(wf) ? !isnan(f[i]) : ((double)f[i] != wf || !signbit(f[i]) != !signbit(wf)))
                fail_msg("cast back of 0x%04x = %a, want %a", want, (double)f[i], wf);
        }
        free(f);
    }
    mpcl_tensor *b;

    /* Every f16 pattern to bf16, and every bf16 pattern to f16 and to f32:
     * all 65536 in order (the eight-element kernels), then 65533 of them
     * from 40000 on (the kernels for any n, whose last item takes the 5
     * left: ordinary numbers there, not the NaNs at the end of the order). */
    uint16_t *all = malloc(65536 * sizeof *all), *got = malloc(65536 * sizeof *got);
    for (size_t len = 65536; len >= 65533; len -= 3) {
        for (size_t i = 0; i < len; i++) all[i] = (uint16_t)(i + (len == 65536 ? 0 : 40000));
        mpcl_tensor *h = tu_tensor(ctx, MPCL_DTYPE_F16, 1, len);
        b = tu_tensor_poisoned(ctx, MPCL_DTYPE_BF16, 1, len);
        TU_ASSERT_OK(mpcl_tensor_upload_raw(h, all, len * sizeof *all));
        TU_ASSERT_OK(mpcl_cast(ctx, b, h));
        TU_ASSERT_OK(mpcl_tensor_download_raw(b, got, len * sizeof *got));
        for (size_t i = 0; i < len; i++) {
            uint16_t want = ref_f64_to_bf16((double)mpcl_f16_to_f32(all[i]));
            if (got[i] != want)
                fail_msg("f16 0x%04x -> bf16 0x%04x, want 0x%04x (of %zu)", all[i], got[i], want,
                         len);
        }
        mpcl_tensor *f32 = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, 1, len);
        tu_poison(h);
        TU_ASSERT_OK(mpcl_tensor_upload_raw(b, all, len * sizeof *all));
        TU_ASSERT_OK(mpcl_cast(ctx, h, b));
        TU_ASSERT_OK(mpcl_cast(ctx, f32, b));
        TU_ASSERT_OK(mpcl_tensor_download_raw(h, got, len * sizeof *got));
        float *fl = tu_download(f32);
        for (size_t i = 0; i < len; i++) {
            double v = ref_bf16_value(all[i]);
            if (isnan(v)) {
                assert_true((got[i] & 0x7c00) == 0x7c00 && (got[i] & 0x3ff) != 0);
                assert_true(isnan(fl[i]));
                continue;
            }
            uint16_t want = mpcl_f64_to_f16(v);
            if (got[i] != want)
                fail_msg("bf16 0x%04x -> f16 0x%04x, want 0x%04x (of %zu)", all[i], got[i], want,
                         len);
            if ((double)fl[i] != v || !signbit(fl[i]) != !signbit(v))
                fail_msg("bf16 0x%04x -> %a, want %a (of %zu)", all[i], (double)fl[i], v, len);
        }
        free(fl);
        mpcl_tensor_destroy(h);
        mpcl_tensor_destroy(b);
        mpcl_tensor_destroy(f32);
    }
    free(all);
    free(got);

    for (size_t si = 0; si < shape_count(ctx); si++) {
        shape s = shapes[si];
        size_t m = s.rows * s.cols;
        float *x = malloc(m * sizeof *x);
        /* Magnitudes from f32 subnormals to past bf16's overflow. */
        for (size_t i = 0; i < m; i++) {
            double mag = exp2(tu_uniform(&r, -149, 128.5));
            x[i] = (float)fmin(mag, 0x1.fffffep127) * (tu_uniform(&r, 0, 1) < 0.5 ? -1.0f : 1.0f);
        }
        mpcl_tensor *t = tu_tensor_from(ctx, MPCL_DTYPE_F32, s.rows, s.cols, x);
        mpcl_tensor *dst = tu_tensor_poisoned(ctx, MPCL_DTYPE_BF16, s.rows, s.cols);
        mpcl_tensor *copy = tu_tensor_poisoned(ctx, MPCL_DTYPE_BF16, s.rows, s.cols);
        TU_ASSERT_OK(mpcl_cast(ctx, dst, t));
        TU_ASSERT_OK(mpcl_cast(ctx, copy, dst)); /* same dtype: a copy */
        uint16_t *bb = malloc(m * sizeof *bb), *cb = malloc(m * sizeof *cb);
        TU_ASSERT_OK(mpcl_tensor_download_raw(dst, bb, m * sizeof *bb));
        TU_ASSERT_OK(mpcl_tensor_download_raw(copy, cb, m * sizeof *cb));
        for (size_t i = 0; i < m; i++) {
            uint16_t want = ref_f64_to_bf16(x[i]);
            if (bb[i] != want)
                fail_msg("cast %zux%zu [%zu] %a -> 0x%04x, want 0x%04x", s.rows, s.cols, i,
                         (double)x[i], bb[i], want);
        }
        assert_memory_equal(bb, cb, m * sizeof *bb);
        free(bb);
        free(cb);
        free(x);
        mpcl_tensor_destroy(t);
        mpcl_tensor_destroy(dst);
        mpcl_tensor_destroy(copy);
    }
    mpcl_context_destroy(ctx);
}

/* ---- error paths: exact status, outputs untouched ---- */

static void test_errors(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const mpcl_dtype F32 = MPCL_DTYPE_F32, F16 = MPCL_DTYPE_F16, I32 = MPCL_DTYPE_I32,
                     BF16 = MPCL_DTYPE_BF16;
    mpcl_tensor *inbf = tu_tensor(ctx, BF16, 4, 3), *outbf = tu_tensor_poisoned(ctx, BF16, 4, 3);
    mpcl_tensor *outbf_t = tu_tensor_poisoned(ctx, BF16, 3, 4);
    mpcl_tensor *in = tu_tensor(ctx, F32, 4, 3), *in16 = tu_tensor(ctx, F16, 4, 3);
    mpcl_tensor *bias = tu_tensor(ctx, F32, 1, 3), *bias16 = tu_tensor(ctx, F16, 1, 3);
    mpcl_tensor *bias4 = tu_tensor(ctx, F32, 1, 4), *i32 = tu_tensor(ctx, I32, 4, 3);
    mpcl_tensor *out = tu_tensor_poisoned(ctx, F32, 4, 3),
                *out16 = tu_tensor_poisoned(ctx, F16, 4, 3);
    mpcl_tensor *out_t = tu_tensor_poisoned(ctx, F32, 3, 4),
                *z = tu_tensor_poisoned(ctx, F32, 4, 3);
    mpcl_tensor *db = tu_tensor_poisoned(ctx, F32, 1, 3),
                *db16 = tu_tensor_poisoned(ctx, F16, 1, 3);
    mpcl_tensor *labels = tu_tensor(ctx, I32, 4, 1), *labels_f = tu_tensor(ctx, F32, 4, 1);
    mpcl_tensor *labels5 = tu_tensor(ctx, I32, 5, 1), *stats = NULL,
                *stats_small = tu_tensor(ctx, F32, 1, 4);
    mpcl_tensor *scale2 = tu_tensor(ctx, F32, 1, 2);
    TU_ASSERT_OK(mpcl_xent_stats_create(ctx, &stats));

    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_bias_act_forward(ctx, out_t, in, bias, MPCL_ACT_RELU));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_bias_act_forward(ctx, out16, in, bias, MPCL_ACT_RELU));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_bias_act_forward(ctx, out, in, bias16, MPCL_ACT_RELU));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_bias_act_forward(ctx, out, in, bias4, MPCL_ACT_RELU));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_bias_act_forward(ctx, out, i32, bias, MPCL_ACT_RELU));
    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG,
                     mpcl_bias_act_forward(ctx, out, in, bias, (mpcl_activation)99));
    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG,
                     mpcl_bias_act_forward(ctx, out, in, NULL, MPCL_ACT_RELU));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE,
                     mpcl_bias_act_forward_z(ctx, out, out_t, in, bias, MPCL_ACT_GELU));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE,
                     mpcl_bias_act_forward_z(ctx, out, out16, in, bias, MPCL_ACT_GELU));

    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG, mpcl_bias_act_backward(ctx, z, in, NULL, MPCL_ACT_RELU));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_bias_act_backward(ctx, z, in, out_t, MPCL_ACT_TANH));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_bias_act_backward(ctx, z, in, in16, MPCL_ACT_GELU));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_bias_act_backward(ctx, out16, in, in, MPCL_ACT_SIGMOID));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE,
                     mpcl_bias_act_backward(ctx, out_t, in, NULL, MPCL_ACT_IDENTITY));

    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_bias_grad(ctx, db16, in));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_bias_grad(ctx, db, out_t));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_bias_grad(ctx, db, i32));

    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_softmax_xent_forward(ctx, stats, in, labels_f));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_softmax_xent_forward(ctx, stats, in, labels5));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_softmax_xent_forward(ctx, stats_small, in, labels));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_softmax_xent_forward(ctx, stats, i32, labels));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE,
                     mpcl_softmax_xent_forward_backward(ctx, stats, out_t, in, labels, NULL));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE,
                     mpcl_softmax_xent_forward_backward(ctx, stats, out16, in, labels, NULL));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE,
                     mpcl_softmax_xent_forward_backward(ctx, stats, out, in, labels, scale2));
    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG,
                     mpcl_softmax_xent_forward_backward(ctx, stats, NULL, in, labels, NULL));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE,
                     mpcl_xent_stats_read(ctx, stats_small, &(mpcl_xent_stats){0}, true));

    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_cast(ctx, out_t, in16));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_cast(ctx, out, i32));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_cast(ctx, i32, in16));

    /* bf16 is a storage dtype of its own: never mixed with f16 or f32 in one op. */
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_bias_act_forward(ctx, out16, inbf, bias, MPCL_ACT_RELU));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_bias_act_forward(ctx, outbf, in, bias, MPCL_ACT_RELU));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE,
                     mpcl_bias_act_forward(ctx, outbf_t, inbf, bias, MPCL_ACT_RELU));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_bias_act_backward(ctx, outbf, inbf, in16, MPCL_ACT_TANH));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE,
                     mpcl_softmax_xent_forward_backward(ctx, stats, outbf, in, labels, NULL));
    TU_EXPECT_STATUS(MPCL_ERR_SHAPE, mpcl_cast(ctx, outbf_t, in16));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_cast(ctx, outbf, i32));
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_cast(ctx, i32, inbf));

    /* Nothing was written: every output still holds its poison, and the
     * statistics are still zero (no loss call ran). */
    TU_ASSERT_OK(mpcl_context_finish(ctx));
    assert_true(tu_still_poisoned(out));
    assert_true(tu_still_poisoned(out16));
    assert_true(tu_still_poisoned(out_t));
    assert_true(tu_still_poisoned(z));
    assert_true(tu_still_poisoned(db));
    assert_true(tu_still_poisoned(db16));
    assert_true(tu_still_poisoned(outbf));
    assert_true(tu_still_poisoned(outbf_t));
    mpcl_xent_stats s;
    TU_ASSERT_OK(mpcl_xent_stats_read(ctx, stats, &s, false));
    assert_int_equal(s.calls, 0);

    mpcl_tensor *all[] = {in, in16, bias, bias16, bias4,    i32,     out,   out16,       out_t,
                          z,  db,   db16, labels, labels_f, labels5, stats, stats_small, scale2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    mpcl_tensor_destroy(inbf);
    mpcl_tensor_destroy(outbf);
    mpcl_tensor_destroy(outbf_t);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activation_names),
        cmocka_unit_test(test_reference_fd),
        cmocka_unit_test(test_bias_act),
        cmocka_unit_test(test_act_extremes),
        cmocka_unit_test(test_cast_edges),
        cmocka_unit_test(test_cast_all),
        cmocka_unit_test(test_cast_bf16),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_add),
        cmocka_unit_test(test_bias_grad_edges),
        cmocka_unit_test(test_f16_paths),
    };
    /* The softmax's wide rows in both kernels (src/compute/losses.c): a
     * row an item, and a row per work-group. */
    const struct CMUnitTest xent_tests[] = {
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_xent_overflow),
        cmocka_unit_test(test_xent_bad_label),
        cmocka_unit_test(test_xent_bad_label_late_row),
    };
    return cmocka_run_group_tests_name("ops", tests, NULL, NULL) +
           TU_RUN_WITH_EACH(xent_tests, "MPCL_XENT", "row", "group");
}
