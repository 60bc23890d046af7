/* Batch normalization (include/mpcl/batchnorm.h) against the double
 * reference of ref_ops.c: the training forward (output, saved statistics,
 * moving averages over several calls), the inference forward and its
 * agreement with the training one, the backward against the analytic
 * reference and against f32 finite differences of sum(y * r), in every
 * storage dtype on odd shapes, a batch of 128 26x26x32 maps, 16-bit edge
 * values, poisoned outputs fully written, aliasing, and the argument errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "testutil.h"

static const mpcl_dtype dtypes[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};
static const size_t shapes[][2] = {{1, 1}, {3, 7}, {1000, 33}, {1, 33}, {1000, 1}, {3, 1}};
static const float momentum = 0.9f, epsilon = 1e-3f;

/* n values uniform in [lo, hi], as stored in dtype. */
static float *random_stored(tu_rng *r, mpcl_dtype dt, size_t n, float lo, float hi) {
    float *x = malloc(n * sizeof *x);
    tu_fill_uniform(r, x, n, lo, hi);
    for (size_t i = 0; i < n; i++) x[i] = tu_stored(dt, x[i]);
    return x;
}

static double max_abs(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* got against want: rtol for the f32 math plus one rounding into dt, atol a
 * fraction of the largest of |want| and scale (errors in a channel's
 * statistics move every element of it). */
static void check(const char *what, mpcl_dtype dt, const float *got, const double *want, size_t n,
                  double rel, double scale) {
    tu_rounding r = tu_storage_rounding(dt);
    double rtol = rel + r.rel, atol = rel * fmax(max_abs(want, n), scale) + r.abs;
    if (!tu_check_close(what, got, want, n, atol, rtol, tu_norm_tol(atol, rtol, want, n)))
        fail_msg("%s differs from the reference", what);
}

/* The tensors of one layer: x and y [N, C] in the storage dtype, the
 * parameters and statistics f32 [1, C], the host values as doubles. */
typedef struct layer {
    size_t rows, cols;
    mpcl_dtype dt;
    mpcl_tensor *x, *y, *gamma, *beta, *moving_mean, *moving_var, *save_mean, *save_inv_std;
    double *dx, *dgamma, *dbeta, *dmm, *dmv; /* x, gamma, beta, moving stats */
} layer;

static mpcl_tensor *channels_tensor(mpcl_context *ctx, tu_rng *r, size_t cols, float lo, float hi,
                                    double **d) {
    float *v = random_stored(r, MPCL_DTYPE_F32, cols, lo, hi);
    *d = tu_to_double(v, cols);
    mpcl_tensor *t = tu_tensor_from(ctx, MPCL_DTYPE_F32, 1, cols, v);
    free(v);
    return t;
}

/* x uniform in [lo, hi]; y and the saves poisoned. */
static layer layer_make(mpcl_context *ctx, tu_rng *r, mpcl_dtype dt, size_t rows, size_t cols,
                        float lo, float hi) {
    layer l = {.rows = rows, .cols = cols, .dt = dt};
    float *x = random_stored(r, dt, rows * cols, lo, hi);
    l.dx = tu_to_double(x, rows * cols);
    l.x = tu_tensor_from(ctx, dt, rows, cols, x);
    free(x);
    l.y = tu_tensor_poisoned(ctx, dt, rows, cols);
    l.gamma = channels_tensor(ctx, r, cols, 0.5f, 1.5f, &l.dgamma);
    l.beta = channels_tensor(ctx, r, cols, -1, 1, &l.dbeta);
    l.moving_mean = channels_tensor(ctx, r, cols, -1, 1, &l.dmm);
    l.moving_var = channels_tensor(ctx, r, cols, 0.5f, 2, &l.dmv);
    l.save_mean = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, 1, cols);
    l.save_inv_std = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, 1, cols);
    return l;
}

static void layer_destroy(layer *l) {
    mpcl_tensor *t[] = {l->x,           l->y,          l->gamma,     l->beta,
                        l->moving_mean, l->moving_var, l->save_mean, l->save_inv_std};
    for (size_t i = 0; i < 8; i++) mpcl_tensor_destroy(t[i]);
    double *d[] = {l->dx, l->dgamma, l->dbeta, l->dmm, l->dmv};
    for (size_t i = 0; i < 5; i++) free(d[i]);
}

static mpcl_status train(mpcl_context *ctx, layer *l, float mom) {
    return mpcl_batchnorm_forward_train(ctx, mom, epsilon, l->y, l->x, l->gamma, l->beta,
                                        l->moving_mean, l->moving_var, l->save_mean,
                                        l->save_inv_std);
}

/* scale: the magnitude the errors follow where it is not the values' own
 * (0 where it is). */
static void check_tensor(const char *what, const layer *l, const mpcl_tensor *t, const double *want,
                         double rel, double scale) {
    float *got = tu_download(t);
    char name[128];
    snprintf(name, sizeof name, "%s (%s %zux%zu)", what, mpcl_dtype_name(mpcl_tensor_dtype(t)),
             l->rows, l->cols);
    check(name, mpcl_tensor_dtype(t), got, want, mpcl_tensor_count(t), rel, scale);
    free(got);
}

/* One training forward: y, the saves and the moving averages (the layer's
 * host copies advance with them). */
static void train_and_check(mpcl_context *ctx, layer *l, float mom) {
    size_t n = l->rows * l->cols, c = l->cols;
    double *mean = malloc(c * sizeof *mean), *var = malloc(c * sizeof *var);
    double *inv_std = malloc(c * sizeof *inv_std), *y = malloc(n * sizeof *y);
    ref_batchnorm_stats(mean, var, l->dx, l->rows, c);
    ref_batchnorm_apply(y, l->dx, l->dgamma, l->dbeta, mean, var, (double)epsilon, l->rows, c);
    for (size_t j = 0; j < c; j++) {
        inv_std[j] = 1 / sqrt(var[j] + (double)epsilon);
        l->dmm[j] = (double)mom * l->dmm[j] + (1 - (double)mom) * mean[j];
        l->dmv[j] = (double)mom * l->dmv[j] + (1 - (double)mom) * var[j];
    }
    TU_ASSERT_OK(train(ctx, l, mom));
    /* A mean's f32 sum rounds at the scale of the inputs, and the mean may
     * cancel to near zero: its errors follow max |x|, not its own size. */
    double x_scale = max_abs(l->dx, n);
    check_tensor("y", l, l->y, y, 1e-4, 0);
    check_tensor("save_mean", l, l->save_mean, mean, 1e-5, x_scale);
    check_tensor("save_inv_std", l, l->save_inv_std, inv_std, 1e-4, 0);
    check_tensor("moving_mean", l, l->moving_mean, l->dmm, 1e-5, x_scale);
    check_tensor("moving_var", l, l->moving_var, l->dmv, 1e-4, 0);
    free(mean);
    free(var);
    free(inv_std);
    free(y);
}

/* Several training calls on new batches move the averages as the reference
 * does; the inference forward then uses them; with momentum 0 the moving
 * statistics are the batch's, and inference gives the training output. */
static void test_moving_and_eval(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("test_moving_and_eval"));
    for (size_t d = 0; d < 3; d++) {
        mpcl_dtype dt = dtypes[d];
        layer l = layer_make(ctx, &rng, dt, 37, 5, -2, 4);
        size_t n = l.rows * l.cols;
        for (int call = 0; call < 4; call++) {
            float *x = random_stored(&rng, dt, n, -2, 4 + (float)call);
            TU_ASSERT_OK(mpcl_tensor_upload_f32(l.x, x, n));
            for (size_t i = 0; i < n; i++) l.dx[i] = x[i];
            free(x);
            train_and_check(ctx, &l, 0.8f);
        }
        double *want = malloc(n * sizeof *want);
        ref_batchnorm_apply(want, l.dx, l.dgamma, l.dbeta, l.dmm, l.dmv, (double)epsilon, l.rows,
                            l.cols);
        tu_poison(l.y);
        TU_ASSERT_OK(mpcl_batchnorm_forward_eval(ctx, epsilon, l.y, l.x, l.gamma, l.beta,
                                                 l.moving_mean, l.moving_var));
        check_tensor("eval y", &l, l.y, want, 1e-4, 0);

        TU_ASSERT_OK(train(ctx, &l, 0.0f));
        float *trained = tu_download(l.y);
        double *trained_d = tu_to_double(trained, n);
        tu_poison(l.y);
        TU_ASSERT_OK(mpcl_batchnorm_forward_eval(ctx, epsilon, l.y, l.x, l.gamma, l.beta,
                                                 l.moving_mean, l.moving_var));
        /* Both round nearly the same f32 values: a storage rounding apart. */
        float *evaluated = tu_download(l.y);
        tu_rounding r = tu_storage_rounding(dt);
        double rtol = 1e-5 + 2 * r.rel, atol = 1e-5 * max_abs(trained_d, n);
        if (!tu_check_close("eval against train with momentum 0", evaluated, trained_d, n, atol,
                            rtol, tu_norm_tol(atol, rtol, trained_d, n)))
            fail_msg("%s: inference differs from training", mpcl_dtype_name(dt));
        free(trained);
        free(trained_d);
        free(evaluated);
        free(want);
        layer_destroy(&l);
    }
    mpcl_context_destroy(ctx);
}

/* The largest over the channels of sum |dy| and of sum |dy xhat|: the
 * scale of the f32 rounding errors of d_beta and d_gamma. */
static void sums_of_magnitudes(const layer *l, const double *dy, double *l1_db, double *l1_dg) {
    double mean[64], var[64];
    ref_batchnorm_stats(mean, var, l->dx, l->rows, l->cols);
    *l1_db = *l1_dg = 0;
    for (size_t c = 0; c < l->cols; c++) {
        double sb = 0, sg = 0, inv_std = 1 / sqrt(var[c] + (double)epsilon);
        for (size_t r = 0; r < l->rows; r++) {
            size_t i = r * l->cols + c;
            sb += fabs(dy[i]);
            sg += fabs(dy[i] * (l->dx[i] - mean[c]) * inv_std);
        }
        *l1_db = fmax(*l1_db, sb);
        *l1_dg = fmax(*l1_dg, sg);
    }
}

/* The backward on a trained layer against the analytic double reference;
 * again with dx in dy's buffer, which must give the same bits. */
static void backward_and_check(mpcl_context *ctx, tu_rng *rng, layer *l) {
    size_t n = l->rows * l->cols, c = l->cols;
    mpcl_dtype dt = l->dt;
    TU_ASSERT_OK(train(ctx, l, momentum));
    float *dy = random_stored(rng, dt, n, -1, 1);
    double *ddy = tu_to_double(dy, n), *want_dx = malloc(n * sizeof *want_dx);
    double want_dg[64], want_db[64];
    assert_true(c <= 64);
    ref_batchnorm_backward(want_dx, want_dg, want_db, ddy, l->dx, l->dgamma, (double)epsilon,
                           l->rows, c);
    mpcl_tensor *t_dy = tu_tensor_from(ctx, dt, l->rows, c, dy);
    mpcl_tensor *t_dx = tu_tensor_poisoned(ctx, dt, l->rows, c);
    mpcl_tensor *t_dg = tu_tensor_poisoned(ctx, dt, 1, c),
                *t_db = tu_tensor_poisoned(ctx, dt, 1, c);
    TU_ASSERT_OK(mpcl_batchnorm_backward(ctx, t_dx, t_dg, t_db, t_dy, l->x, l->gamma, l->save_mean,
                                         l->save_inv_std));
    check_tensor("dx", l, t_dx, want_dx, 1e-4, 0);
    double l1_db, l1_dg;
    sums_of_magnitudes(l, ddy, &l1_db, &l1_dg);
    tu_rounding r = tu_storage_rounding(dt);
    float *dg = tu_download(t_dg), *db = tu_download(t_db);
    char what[96];
    snprintf(what, sizeof what, "d_gamma (%s %zux%zu)", mpcl_dtype_name(dt), l->rows, c);
    assert_true(tu_check_close(what, dg, want_dg, c, 1e-5 * l1_dg, r.rel + 1e-6, INFINITY));
    snprintf(what, sizeof what, "d_beta (%s %zux%zu)", mpcl_dtype_name(dt), l->rows, c);
    assert_true(tu_check_close(what, db, want_db, c, 1e-5 * l1_db, r.rel + 1e-6, INFINITY));

    float *dx = tu_download(t_dx);
    TU_ASSERT_OK(mpcl_batchnorm_backward(ctx, t_dy, t_dg, t_db, t_dy, l->x, l->gamma, l->save_mean,
                                         l->save_inv_std));
    float *in_place = tu_download(t_dy);
    assert_memory_equal(dx, in_place, n * sizeof *dx);
    free(dy);
    free(ddy);
    free(want_dx);
    free(dg);
    free(db);
    free(dx);
    free(in_place);
    mpcl_tensor *all[] = {t_dy, t_dx, t_dg, t_db};
    for (size_t i = 0; i < 4; i++) mpcl_tensor_destroy(all[i]);
}

/* Every storage dtype on every shape: the training forward, then the
 * backward. */
static void test_train_and_backward(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("test_train_and_backward"));
    for (size_t d = 0; d < 3; d++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            /* A mean far from 0 against the spread, as after a ReLU. */
            layer l = layer_make(ctx, &rng, dtypes[d], shapes[s][0], shapes[s][1], 3, 7);
            train_and_check(ctx, &l, momentum);
            backward_and_check(ctx, &rng, &l);
            layer_destroy(&l);
        }
    }
    mpcl_context_destroy(ctx);
}

/* A batch of 128 26x26 maps of 32 channels (86528 rows), and 1000 rows of 7
 * channels, in f32 with the mean 100 and the spread 1: the variance as the
 * mean of x^2 less the squared mean would lose 2% of it to rounding.
 * Forward and backward. */
static void test_mean_far_from_zero(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("test_mean_far_from_zero"));
    const size_t shape[2][2] = {{tu_slow_device(ctx) ? 4 * 26 * 26 : 128 * 26 * 26, 32}, {1000, 7}};
    for (size_t s = 0; s < 2; s++) {
        layer l = layer_make(ctx, &rng, MPCL_DTYPE_F32, shape[s][0], shape[s][1], 99.5f, 100.5f);
        train_and_check(ctx, &l, momentum);
        backward_and_check(ctx, &rng, &l);
        layer_destroy(&l);
    }
    mpcl_context_destroy(ctx);
}

/* L = sum(y * r) in double from the f32 outputs of a training forward. */
static double loss_of(mpcl_context *ctx, layer *l, const float *r) {
    TU_ASSERT_OK(train(ctx, l, momentum));
    float *y = tu_download(l->y);
    double s = 0;
    for (size_t i = 0; i < l->rows * l->cols; i++) s += (double)y[i] * (double)r[i];
    free(y);
    return s;
}

/* The central difference of L along x[i] (f32 tensor `t` holding v). */
static double central_difference(mpcl_context *ctx, layer *l, mpcl_tensor *t, float *v, size_t n,
                                 size_t i, const float *r) {
    const float h = 1e-2f;
    double side[2];
    float keep = v[i];
    for (int s = 0; s < 2; s++) {
        v[i] = keep + (s ? -h : h);
        TU_ASSERT_OK(mpcl_tensor_upload_f32(t, v, n));
        side[s] = loss_of(ctx, l, r);
    }
    v[i] = keep;
    TU_ASSERT_OK(mpcl_tensor_upload_f32(t, v, n));
    return (side[0] - side[1]) / (2.0 * (double)h);
}

static void check_fd(const char *what, size_t i, float analytic, double fd) {
    if (!(fabs((double)analytic - fd) <= 2e-3 * fmax(1, fabs(fd))))
        fail_msg("%s[%zu]: backward %.7g, finite difference %.7g", what, i, (double)analytic, fd);
}

static void test_finite_differences(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("test_finite_differences"));
    layer l = layer_make(ctx, &rng, MPCL_DTYPE_F32, 6, 3, -2, 2);
    size_t n = l.rows * l.cols, c = l.cols;
    float *r = random_stored(&rng, MPCL_DTYPE_F32, n, -1, 1);
    float *x = random_stored(&rng, MPCL_DTYPE_F32, n, -2, 2);
    float gamma[3], beta[3];
    TU_ASSERT_OK(mpcl_tensor_upload_f32(l.x, x, n));
    TU_ASSERT_OK(mpcl_tensor_download_f32(l.gamma, gamma, c));
    TU_ASSERT_OK(mpcl_tensor_download_f32(l.beta, beta, c));
    TU_ASSERT_OK(train(ctx, &l, momentum));
    mpcl_tensor *dy = tu_tensor_from(ctx, MPCL_DTYPE_F32, l.rows, c, r);
    mpcl_tensor *dx = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, l.rows, c);
    mpcl_tensor *dg = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, 1, c);
    mpcl_tensor *db = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, 1, c);
    TU_ASSERT_OK(
        mpcl_batchnorm_backward(ctx, dx, dg, db, dy, l.x, l.gamma, l.save_mean, l.save_inv_std));
    float *gx = tu_download(dx), *gg = tu_download(dg), *gb = tu_download(db);
    for (size_t i = 0; i < n; i++)
        check_fd("dx", i, gx[i], central_difference(ctx, &l, l.x, x, n, i, r));
    for (size_t j = 0; j < c; j++) {
        check_fd("d_gamma", j, gg[j], central_difference(ctx, &l, l.gamma, gamma, c, j, r));
        check_fd("d_beta", j, gb[j], central_difference(ctx, &l, l.beta, beta, c, j, r));
    }
    free(r);
    free(x);
    free(gx);
    free(gg);
    free(gb);
    mpcl_tensor *all[] = {dy, dx, dg, db};
    for (size_t i = 0; i < 4; i++) mpcl_tensor_destroy(all[i]);
    layer_destroy(&l);
    mpcl_context_destroy(ctx);
}

/* Magnitudes near f16's largest finite value (65504) in x: a channel of
 * values in [59000, 65504], one of +-65504 (variance 65504^2), one of tiny
 * values. The f32 math keeps every result finite and as the reference. */
static void test_16bit_edges(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("test_16bit_edges"));
    for (size_t d = 0; d < 3; d++) {
        mpcl_dtype dt = dtypes[d];
        layer l = layer_make(ctx, &rng, dt, 64, 3, -1, 1);
        size_t n = l.rows * l.cols;
        float *x = malloc(n * sizeof *x);
        for (size_t b = 0; b < l.rows; b++) {
            x[b * 3] = tu_stored(dt, (float)tu_uniform(&rng, 59000, 65504));
            x[b * 3 + 1] = tu_stored(dt, b % 2 ? 65504.0f : -65504.0f);
            x[b * 3 + 2] = tu_stored(dt, (float)tu_uniform(&rng, -1e-3, 1e-3));
        }
        TU_ASSERT_OK(mpcl_tensor_upload_f32(l.x, x, n));
        for (size_t i = 0; i < n; i++) l.dx[i] = x[i];
        free(x);
        train_and_check(ctx, &l, momentum);
        backward_and_check(ctx, &rng, &l);
        layer_destroy(&l);
    }
    mpcl_context_destroy(ctx);
}

/* Refused calls name what is wrong and write nothing. */
static void test_errors(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(1);
    layer l = layer_make(ctx, &rng, MPCL_DTYPE_F16, 5, 3, -1, 1);
    tu_poison(l.moving_mean);
    tu_poison(l.moving_var);
    mpcl_tensor *f32_x = tu_tensor(ctx, MPCL_DTYPE_F32, 5, 3),
                *ints = tu_tensor(ctx, MPCL_DTYPE_I32, 5, 3);
    mpcl_tensor *short_y = tu_tensor(ctx, MPCL_DTYPE_F16, 4, 3),
                *wide = tu_tensor(ctx, MPCL_DTYPE_F32, 1, 4);
    mpcl_tensor *half_c = tu_tensor(ctx, MPCL_DTYPE_F16, 1, 3),
                *col = tu_tensor(ctx, MPCL_DTYPE_F32, 3, 1);
    mpcl_tensor *f32_c = tu_tensor(ctx, MPCL_DTYPE_F32, 1, 3);
    mpcl_tensor *mm = l.moving_mean, *mv = l.moving_var, *sm = l.save_mean, *si = l.save_inv_std;
    mpcl_tensor *g = l.gamma, *b = l.beta, *x = l.x, *y = l.y;
    const float bad_momentum[] = {-0.1f, 1.5f, NAN};
    for (size_t i = 0; i < 3; i++)
        tu_expect_error(
            mpcl_batchnorm_forward_train(ctx, bad_momentum[i], epsilon, y, x, g, b, mm, mv, sm, si),
            MPCL_ERR_INVALID_ARG, "momentum");
    const float bad_epsilon[] = {0.0f, -1e-3f, INFINITY, NAN};
    for (size_t i = 0; i < 4; i++) {
        tu_expect_error(
            mpcl_batchnorm_forward_train(ctx, momentum, bad_epsilon[i], y, x, g, b, mm, mv, sm, si),
            MPCL_ERR_INVALID_ARG, "epsilon");
        tu_expect_error(mpcl_batchnorm_forward_eval(ctx, bad_epsilon[i], y, x, g, b, mm, mv),
                        MPCL_ERR_INVALID_ARG, "mpcl_batchnorm_forward_eval: epsilon");
    }
    tu_expect_error(
        mpcl_batchnorm_forward_train(ctx, momentum, epsilon, y, NULL, g, b, mm, mv, sm, si),
        MPCL_ERR_INVALID_ARG, "x is NULL");
    tu_expect_error(
        mpcl_batchnorm_forward_train(ctx, momentum, epsilon, y, ints, g, b, mm, mv, sm, si),
        MPCL_ERR_DTYPE, "x is i32");
    tu_expect_error(
        mpcl_batchnorm_forward_train(ctx, momentum, epsilon, short_y, x, g, b, mm, mv, sm, si),
        MPCL_ERR_SHAPE, "y is 4x3, want 5x3");
    tu_expect_error(
        mpcl_batchnorm_forward_train(ctx, momentum, epsilon, y, f32_x, g, b, mm, mv, sm, si),
        MPCL_ERR_DTYPE, "y is f16, want f32");
    tu_expect_error(
        mpcl_batchnorm_forward_train(ctx, momentum, epsilon, y, x, wide, b, mm, mv, sm, si),
        MPCL_ERR_SHAPE, "gamma is 1x4, want 1x3");
    tu_expect_error(
        mpcl_batchnorm_forward_train(ctx, momentum, epsilon, y, x, g, b, mm, half_c, sm, si),
        MPCL_ERR_DTYPE, "moving_var is f16, want f32");
    tu_expect_error(
        mpcl_batchnorm_forward_train(ctx, momentum, epsilon, y, x, g, b, mm, mv, sm, col),
        MPCL_ERR_SHAPE, "save_inv_std is 3x1, want 1x3");
    tu_expect_error(mpcl_batchnorm_forward_eval(ctx, epsilon, y, x, g, b, col, mv), MPCL_ERR_SHAPE,
                    "moving_mean is 3x1, want 1x3");
    tu_expect_error(mpcl_batchnorm_forward_eval(ctx, epsilon, y, x, g, NULL, mm, mv),
                    MPCL_ERR_INVALID_ARG, "beta is NULL");
    assert_true(tu_still_poisoned(y));
    assert_true(tu_still_poisoned(mm));
    assert_true(tu_still_poisoned(mv));
    assert_true(tu_still_poisoned(sm));
    assert_true(tu_still_poisoned(si));

    mpcl_tensor *dx = tu_tensor_poisoned(ctx, MPCL_DTYPE_F16, 5, 3);
    mpcl_tensor *dg = tu_tensor_poisoned(ctx, MPCL_DTYPE_F16, 1, 3);
    mpcl_tensor *db = tu_tensor_poisoned(ctx, MPCL_DTYPE_F16, 1, 3);
    tu_expect_error(mpcl_batchnorm_backward(ctx, dx, f32_c, db, y, x, g, sm, si), MPCL_ERR_DTYPE,
                    "d_gamma is f32, want f16");
    tu_expect_error(mpcl_batchnorm_backward(ctx, dx, dg, db, short_y, x, g, sm, si), MPCL_ERR_SHAPE,
                    "dy is 4x3, want 5x3");
    tu_expect_error(mpcl_batchnorm_backward(ctx, dx, dg, db, y, x, g, NULL, si),
                    MPCL_ERR_INVALID_ARG, "save_mean is NULL");
    tu_expect_error(mpcl_batchnorm_backward(ctx, dx, dg, f32_c, y, x, g, sm, si), MPCL_ERR_DTYPE,
                    "d_beta is f32, want f16");
    tu_expect_error(mpcl_batchnorm_backward(ctx, dx, dx, db, y, x, g, sm, si), MPCL_ERR_SHAPE,
                    "d_gamma is 5x3, want 1x3");
    assert_true(tu_still_poisoned(dx));
    assert_true(tu_still_poisoned(dg));
    mpcl_tensor *all[] = {f32_x, ints, short_y, wide, half_c, col, f32_c, dx, dg, db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    layer_destroy(&l);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_and_backward), cmocka_unit_test(test_moving_and_eval),
        cmocka_unit_test(test_mean_far_from_zero), cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_16bit_edges),        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
