/* The layer_normalization kind (src/nn/layer_normalization.c,
 * cl/layernorm.cl) through its layer interface, against a double host
 * reference: the forward and the backward (dx, d_gamma, d_beta) on random
 * inputs, with C = 1, 3, 17, 24, 100 and rows from 1 to 150 (more than a
 * work-group's items both ways), in every storage dtype, with poisoned
 * outputs fully written and the rows past the batch left alone; the same
 * parameter gradients without an input gradient; and inputs with the mean
 * 1e4 and a spread of 1, where the variance as the mean of x^2 less the
 * squared mean would be lost to f32 rounding. The model-level checks
 * (finite differences, checkpoints) are in test_cnn_layers.c with the
 * other kinds'. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "testutil.h"

static const mpcl_dtype dtypes[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};

/* One layer over inputs (P, C) (P = 1: a flat (C,)) for batches of up to
 * max_batch = B + 1, so that a batch of B leaves the last row alone. */
typedef struct harness {
    mpcl__layer_env env;
    mpcl__layer L;
    mpcl__tables t;
    mpcl__arenas a;
    size_t B, P, C;
    double eps;
    double *gamma, *beta; /* the master values */
} harness;

static size_t row_offset(const harness *h, size_t i) {
    return h->t.params.rows[i].offset;
}

static harness *harness_make(mpcl_context *ctx, tu_rng *rng, mpcl_dtype dt, size_t B, size_t P,
                             size_t C, const char *epsilon) {
    harness *h = calloc(1, sizeof *h);
    assert_non_null(h);
    *h = (harness){.B = B, .P = P, .C = C};
    h->env = (mpcl__layer_env){.ctx = ctx, .storage = dt, .max_batch = B + 1};
    mpcl__layer *L = &h->L;
    TU_ASSERT_OK(mpcl_layer_spec_init(ctx, "layer_normalization", &L->spec));
    TU_ASSERT_OK(mpcl_layer_spec_set(ctx, &L->spec, "epsilon", epsilon));
    h->eps = L->spec.epsilon;
    L->kind = mpcl__layer_kind_find("layer_normalization");
    assert_non_null(L->kind);
    L->env = &h->env;
    L->in_rank = P > 1 ? 2 : 1;
    L->in_shape[0] = P > 1 ? P : C;
    L->in_shape[1] = C;
    L->inputs = P * C;
    mpcl__params_init(&h->t.params, mpcl__sub_buffer_align(ctx));
    mpcl__params_init(&h->t.buffers, mpcl__sub_buffer_align(ctx));
    TU_ASSERT_OK(L->kind->declare(L, &h->t));
    /* Keras' names and shapes; no buffers. */
    assert_int_equal(h->t.params.count, 2);
    assert_string_equal(h->t.params.rows[0].name, "layer_normalization_0.gamma");
    assert_string_equal(h->t.params.rows[1].name, "layer_normalization_0.beta");
    assert_int_equal(h->t.params.rows[0].count, C);
    assert_int_equal(h->t.buffers.count, 0);
    assert_int_equal(L->outputs, P * C);

    size_t total = h->t.params.total;
    float *master = calloc(total, sizeof *master);
    assert_non_null(master);
    tu_fill_uniform(rng, master + row_offset(h, 0), C, 0.5f, 1.5f);
    tu_fill_uniform(rng, master + row_offset(h, 1), C, -1, 1);
    h->gamma = tu_to_double(master + row_offset(h, 0), C);
    h->beta = tu_to_double(master + row_offset(h, 1), C);
    h->a.master = tu_tensor_from(ctx, MPCL_DTYPE_F32, 1, total, master);
    h->a.grads = tu_tensor(ctx, dt, 1, total);
    free(master);
    TU_ASSERT_OK(L->kind->create(L, &h->t, &h->a));
    return h;
}

static void harness_destroy(harness *h) {
    mpcl__destroy_layers(&h->L, 1);
    mpcl_tensor_destroy(h->a.master);
    mpcl_tensor_destroy(h->a.grads);
    free(h->gamma);
    free(h->beta);
    free(h);
}

/* ---- the double reference, per row of C values ---- */

static void ref_stats(const double *x, size_t C, double eps, double *mean, double *inv_std) {
    double s = 0, q = 0;
    for (size_t c = 0; c < C; c++) s += x[c];
    *mean = s / (double)C;
    for (size_t c = 0; c < C; c++) q += (x[c] - *mean) * (x[c] - *mean);
    *inv_std = 1 / sqrt(q / (double)C + eps);
}

static void ref_forward(const harness *h, const double *x, double *y) {
    for (size_t r = 0; r < h->B * h->P; r++) {
        const double *xr = x + r * h->C;
        double mean, inv_std;
        ref_stats(xr, h->C, h->eps, &mean, &inv_std);
        for (size_t c = 0; c < h->C; c++)
            y[r * h->C + c] = (xr[c] - mean) * inv_std * h->gamma[c] + h->beta[c];
    }
}

/* dx, d_gamma, d_beta of sum(y * dy); scale[0..2] get the magnitudes their
 * f32 errors scale with: max |inv_std dy gamma|, and per channel the
 * largest sum of |dy xhat| and of |dy|. */
static void ref_backward(const harness *h, const double *x, const double *dy, double *dx,
                         double *dg, double *db, double scale[3]) {
    size_t C = h->C;
    double *l1g = calloc(C, sizeof *l1g), *l1b = calloc(C, sizeof *l1b);
    assert_non_null(l1g);
    assert_non_null(l1b);
    memset(dg, 0, C * sizeof *dg);
    memset(db, 0, C * sizeof *db);
    scale[0] = scale[1] = scale[2] = 0;
    for (size_t r = 0; r < h->B * h->P; r++) {
        const double *xr = x + r * C, *g = dy + r * C;
        double mean, inv_std, mean_g = 0, mean_gx = 0;
        ref_stats(xr, C, h->eps, &mean, &inv_std);
        for (size_t c = 0; c < C; c++) {
            double xhat = (xr[c] - mean) * inv_std;
            mean_g += g[c] * h->gamma[c] / (double)C;
            mean_gx += g[c] * h->gamma[c] * xhat / (double)C;
            dg[c] += g[c] * xhat;
            db[c] += g[c];
            l1g[c] += fabs(g[c] * xhat);
            l1b[c] += fabs(g[c]);
        }
        for (size_t c = 0; c < C; c++) {
            double xhat = (xr[c] - mean) * inv_std;
            dx[r * C + c] = inv_std * (g[c] * h->gamma[c] - mean_g - xhat * mean_gx);
            scale[0] = fmax(scale[0], fabs(inv_std * g[c] * h->gamma[c]));
        }
    }
    for (size_t c = 0; c < C; c++) {
        scale[1] = fmax(scale[1], l1g[c]);
        scale[2] = fmax(scale[2], l1b[c]);
    }
    free(l1g);
    free(l1b);
}

/* got against want, within rel of `scale` (the size of the terms the f32
 * math rounds) and rel relative, plus one rounding into dt. */
static void check(const harness *h, const char *what, const float *got, const double *want,
                  size_t n, double rel, double scale) {
    mpcl_dtype dt = h->env.storage;
    tu_rounding r = tu_storage_rounding(dt);
    double rtol = rel + r.rel, atol = rel * scale + r.abs;
    char name[128];
    snprintf(name, sizeof name, "%s (%s, B=%zu P=%zu C=%zu)", what, mpcl_dtype_name(dt), h->B, h->P,
             h->C);
    if (!tu_check_close(name, got, want, n, atol, rtol, tu_norm_tol(atol, rtol, want, n)))
        fail_msg("%s differs from the reference", name);
}

static double max_abs(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* The elements of `t` from `from` on still hold the poison (NaN). */
static void assert_tail_poisoned(const mpcl_tensor *t, size_t from, const char *what) {
    float *v = tu_download(t);
    for (size_t i = from; i < mpcl_tensor_count(t); i++)
        if (!isnan(v[i])) fail_msg("%s: element %zu past the batch was written", what, i);
    free(v);
}

/* One parameter's gradient row, from the gradient arena. */
static float *grad_row(const harness *h, size_t i) {
    float *arena = tu_download(h->a.grads), *g = malloc(h->C * sizeof *g);
    assert_non_null(g);
    memcpy(g, arena + row_offset(h, i), h->C * sizeof *g);
    free(arena);
    return g;
}

/* Forward then backward of x (n = B P C values in [lo, hi] plus offset,
 * as stored in dt) against the reference; rel: the f32 tolerance; xhat_err:
 * how far the f32 statistics may move xhat = (x - mean) inv_std, which
 * d_gamma sums with the weights |dy|. */
static void run_case(harness *h, tu_rng *rng, double offset, float lo, float hi, double rel,
                     double xhat_err) {
    mpcl_context *ctx = h->env.ctx;
    mpcl_dtype dt = h->env.storage;
    mpcl__layer *L = &h->L;
    size_t n = h->B * h->P * h->C, full = n + h->P * h->C;
    float *xf = malloc(n * sizeof *xf), *dyf = malloc(full * sizeof *dyf);
    assert_non_null(xf);
    assert_non_null(dyf);
    tu_fill_uniform(rng, xf, n, lo, hi);
    for (size_t i = 0; i < n; i++) xf[i] = tu_stored(dt, (float)(offset + (double)xf[i]));
    tu_fill_uniform(rng, dyf, full, -1, 1);
    for (size_t i = 0; i < full; i++) dyf[i] = tu_stored(dt, dyf[i]);
    double *x = tu_to_double(xf, n), *dy = tu_to_double(dyf, n);
    mpcl_tensor *tx = tu_tensor_from(ctx, dt, h->B, h->P * h->C, xf);

    tu_poison(L->output);
    TU_ASSERT_OK(L->kind->forward(L, tx, true));
    double *want = malloc(n * sizeof *want);
    assert_non_null(want);
    ref_forward(h, x, want);
    float *y = tu_download(L->output);
    check(h, "y", y, want, n, rel, max_abs(want, n));
    assert_tail_poisoned(L->output, n, "y");

    TU_ASSERT_OK(mpcl_tensor_upload_f32(L->d_output, dyf, full));
    mpcl_tensor *tdx = tu_tensor_poisoned(ctx, dt, h->B, h->P * h->C);
    tu_poison(h->a.grads);
    TU_ASSERT_OK(L->kind->backward(L, tx, tdx));
    double *dx = malloc(n * sizeof *dx), *dg = malloc(h->C * sizeof *dg);
    double *db = malloc(h->C * sizeof *db), scale[3];
    assert_non_null(dx);
    assert_non_null(dg);
    assert_non_null(db);
    ref_backward(h, x, dy, dx, dg, db, scale);
    float *got_dx = tu_download(tdx), *got_dg = grad_row(h, 0), *got_db = grad_row(h, 1);
    check(h, "dx", got_dx, dx, n, rel, scale[0]);
    /* The sums: f32 rounding of sum |dy xhat| (resp. |dy|), and for d_gamma
     * xhat's own error weighted by sum |dy|. */
    double sums_rel = rel / 10;
    check(h, "d_gamma", got_dg, dg, h->C, sums_rel, scale[1] + xhat_err / sums_rel * scale[2]);
    check(h, "d_beta", got_db, db, h->C, sums_rel, scale[2]);

    /* Without an input gradient (a first layer), the same parameter
     * gradients, bit for bit. */
    tu_poison(h->a.grads);
    TU_ASSERT_OK(L->kind->backward(L, tx, NULL));
    float *again_dg = grad_row(h, 0), *again_db = grad_row(h, 1);
    assert_memory_equal(got_dg, again_dg, h->C * sizeof *got_dg);
    assert_memory_equal(got_db, again_db, h->C * sizeof *got_db);

    float *f[] = {xf, dyf, y, got_dx, got_dg, got_db, again_dg, again_db};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
    double *d[] = {x, dy, want, dx, dg, db};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) free(d[i]);
    mpcl_tensor_destroy(tx);
    mpcl_tensor_destroy(tdx);
}

/* Every storage dtype on odd shapes: {B, P, C}. The mean far from 0
 * against the spread, as after a ReLU. C = 24: rows that start at odd
 * multiples of eight elements (the row kernels' lanes), and no tail. */
static void matches_the_reference(void **state) {
    (void)state;
    static const size_t shapes[][3] = {{1, 1, 1},    {3, 5, 3},  {7, 2, 17}, {2, 1, 100},
                                       {30, 5, 100}, {70, 1, 3}, {5, 3, 24}};
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("matches_the_reference"));
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            harness *h = harness_make(ctx, &rng, dtypes[d], shapes[s][0], shapes[s][1],
                                      shapes[s][2], "0.001");
            run_case(h, &rng, 0, 3, 7, 1e-4, 0);
            harness_destroy(h);
        }
    mpcl_context_destroy(ctx);
}

/* The mean 1e4 and a spread of 1 (variance 1/3) in f32: the two passes
 * keep the variance to the error of the mean, whose f32 rounding alone is
 * half an ulp of 1e4 (4.9e-4; times inv_std ~1.7, xhat's 2e-3); x^2's mean
 * less the squared mean would lose the variance entirely (the ulp of 1e8
 * is 8). epsilon 1e-5, GPT-2's, lets no error hide. */
static void a_large_mean_keeps_the_variance(void **state) {
    (void)state;
    static const size_t shapes[][3] = {{4, 3, 100}, {9, 2, 17}, {3, 1, 768}};
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("a_large_mean_keeps_the_variance"));
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        harness *h = harness_make(ctx, &rng, MPCL_DTYPE_F32, shapes[s][0], shapes[s][1],
                                  shapes[s][2], "0.00001");
        run_case(h, &rng, 1e4, -1, 1, 3e-3, 2e-3);
        harness_destroy(h);
    }
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_the_reference),
        cmocka_unit_test(a_large_mean_keeps_the_variance),
    };
    /* Both layouts of the kernels (layer_normalization.c). */
    return TU_RUN_WITH_EACH(tests, "MPCL_NORM", "group", "row");
}
