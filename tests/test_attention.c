/* The causal_self_attention kind (src/nn/causal_self_attention.c,
 * cl/attention.cl) through its layer interface, against a double host
 * reference: the forward and the backward (the input gradient and the four
 * parameter gradients) on random inputs with T = 1, odd T, odd channels per
 * head, one head and several, with and without biases, in every storage
 * dtype on every GEMM path the device runs, outputs poisoned first and the
 * rows past the batch left alone; scores of ~1e3, where a softmax that did
 * not subtract the maximum overflows; the causal mask (outputs at t do not
 * move when inputs at t' > t do, input gradients at t' do not move when
 * output gradients at t < t' do); central differences in float32; a bad
 * head count and a flat input refused by name; and the kind in a model of
 * every policy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "ref_ops.h"
#include "testutil.h"

/* ---- the layer alone ---- */

/* A storage dtype and a GEMM path for it: what a policy runs. */
typedef struct variant {
    mpcl_dtype dt;
    mpcl_gemm_path gemm;
} variant;

static const variant variants[] = {
    {MPCL_DTYPE_F32, MPCL_GEMM_MPCL_F32},        {MPCL_DTYPE_F32, MPCL_GEMM_CLBLAST_SGEMM},
    {MPCL_DTYPE_F16, MPCL_GEMM_MPCL_MIXED},      {MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_STAGED},
    {MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_HGEMM},   {MPCL_DTYPE_BF16, MPCL_GEMM_MPCL_MIXED},
    {MPCL_DTYPE_BF16, MPCL_GEMM_CLBLAST_STAGED},
};
#define VARIANTS (sizeof variants / sizeof variants[0])

static bool variant_usable(mpcl_context *ctx, const variant *v) {
    return v->gemm != MPCL_GEMM_CLBLAST_HGEMM ||
           mpcl_plan_hgemm_usable(mpcl_context_device(ctx), mpcl_context_overrides(ctx)->fp16);
}

/* Whether this run is the tile layout on a slow device (Oclgrind, run for
 * its memory and race checks): its kernels, a work-group of 256 items per
 * 64 x 64 tile however small the head, interpret there ~20 times the row
 * kernels' work on these shapes (the whole test took 12 minutes), so the
 * tests below take fewer cases, saying so. */
static bool slow_tiles(const mpcl_context *ctx) {
    return tu_slow_device(ctx) && tu_env_is("MPCL_ATTENTION", "tile");
}

/* The parameters, in the order the layer declares them. */
enum { ATTN_KERNEL, ATTN_BIAS, PROJ_KERNEL, PROJ_BIAS, PARAMS };
static const char *const param_names[PARAMS] = {"c_attn.kernel", "c_attn.bias", "c_proj.kernel",
                                                "c_proj.bias"};

/* One layer over inputs (T, C) for batches of up to max_batch = B + 1, so
 * that a batch of B leaves the last row alone. */
typedef struct harness {
    mpcl__layer_env env;
    mpcl__layer L;
    mpcl__tables t;
    mpcl__arenas a;
    size_t B, T, C, H;
    bool bias;
    size_t row[PARAMS]; /* the table's row of each; SIZE_MAX for an absent bias */
    float *master;      /* the master arena's values */
} harness;

static size_t param_count(const harness *h, int p) {
    size_t C = h->C;
    static const size_t per_c[PARAMS][2] = {{1, 3}, {0, 3}, {1, 1}, {0, 1}};
    return (per_c[p][0] ? C : 1) * per_c[p][1] * C;
}

/* Declares the layer: spec, shapes and tables, no device work. */
static mpcl_status harness_declare(harness *h, mpcl_context *ctx, size_t T, size_t C, size_t H,
                                   bool bias) {
    mpcl__layer *L = &h->L;
    h->T = T, h->C = C, h->H = H, h->bias = bias;
    char heads[24];
    snprintf(heads, sizeof heads, "%zu", H);
    TU_ASSERT_OK(mpcl_layer_spec_init(ctx, "causal_self_attention", &L->spec));
    TU_ASSERT_OK(mpcl_layer_spec_set(ctx, &L->spec, "num_heads", heads));
    TU_ASSERT_OK(mpcl_layer_spec_set(ctx, &L->spec, "use_bias", bias ? "true" : "false"));
    L->kind = mpcl__layer_kind_find("causal_self_attention");
    assert_non_null(L->kind);
    L->env = &h->env;
    L->in_rank = 2;
    L->in_shape[0] = T;
    L->in_shape[1] = C;
    L->inputs = T * C;
    mpcl__params_init(&h->t.params, mpcl__sub_buffer_align(ctx));
    mpcl__params_init(&h->t.buffers, mpcl__sub_buffer_align(ctx));
    return L->kind->declare(L, &h->t);
}

/* Uploads h->master into the master arena and, rounded to the storage
 * dtype, the working one. */
static void upload_params(harness *h) {
    TU_ASSERT_OK(mpcl_tensor_upload_f32(h->a.master, h->master, h->t.params.total));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(h->a.working, h->master, h->t.params.total));
}

/* kernel_gain multiplies c_attn's q and k columns: the scores grow with
 * its square. */
static harness *harness_make(mpcl_context *ctx, tu_rng *rng, const variant *v, size_t B, size_t T,
                             size_t C, size_t H, bool bias, float kernel_gain) {
    harness *h = calloc(1, sizeof *h);
    assert_non_null(h);
    h->B = B;
    h->env = (mpcl__layer_env){.ctx = ctx, .storage = v->dt, .gemm = v->gemm, .max_batch = B + 1};
    TU_ASSERT_OK(harness_declare(h, ctx, T, C, H, bias));
    /* GPT-2's names, under the layer's as Dense's are; the shapes of
     * [in, out] kernels; no buffers. */
    assert_int_equal(h->t.params.count, bias ? 4 : 2);
    assert_int_equal(h->t.buffers.count, 0);
    assert_int_equal(h->L.outputs, T * C);
    for (int p = 0, i = 0; p < PARAMS; p++) {
        h->row[p] = SIZE_MAX;
        if (!bias && (p == ATTN_BIAS || p == PROJ_BIAS)) continue;
        h->row[p] = (size_t)i;
        const mpcl_param_info *r = &h->t.params.rows[i++];
        char want[64];
        snprintf(want, sizeof want, "causal_self_attention_0.%s", param_names[p]);
        assert_string_equal(r->name, want);
        assert_int_equal(r->count, param_count(h, p));
    }
    size_t total = h->t.params.total;
    h->master = calloc(total, sizeof *h->master);
    assert_non_null(h->master);
    float limit = 1 / sqrtf((float)C);
    for (int p = 0; p < PARAMS; p++) {
        if (h->row[p] == SIZE_MAX) continue;
        float *w = h->master + h->t.params.rows[h->row[p]].offset;
        bool kernel = p == ATTN_KERNEL || p == PROJ_KERNEL;
        tu_fill_uniform(rng, w, param_count(h, p), kernel ? -limit : -0.5f, kernel ? limit : 0.5f);
        if (p == ATTN_KERNEL)
            for (size_t i = 0; i < C; i++)
                for (size_t j = 0; j < 2 * C; j++) w[i * 3 * C + j] *= kernel_gain;
    }
    h->a.master = tu_tensor(ctx, MPCL_DTYPE_F32, 1, total);
    h->a.working = tu_tensor(ctx, v->dt, 1, total);
    h->a.grads = tu_tensor(ctx, v->dt, 1, total);
    upload_params(h);
    TU_ASSERT_OK(h->L.kind->create(&h->L, &h->t, &h->a));
    return h;
}

static void harness_destroy(harness *h) {
    mpcl__destroy_layers(&h->L, 1);
    mpcl_tensor_destroy(h->a.master);
    mpcl_tensor_destroy(h->a.working);
    mpcl_tensor_destroy(h->a.grads);
    free(h->master);
    free(h);
}

/* One parameter's values as the layer reads them: kernels from the working
 * copy (rounded to the storage dtype), biases from the masters (f32);
 * zeros for an absent bias. */
static double *param_values(const harness *h, int p) {
    size_t n = param_count(h, p);
    double *v = calloc(n, sizeof *v);
    assert_non_null(v);
    if (h->row[p] == SIZE_MAX) return v;
    const float *w = h->master + h->t.params.rows[h->row[p]].offset;
    bool kernel = p == ATTN_KERNEL || p == PROJ_KERNEL;
    for (size_t i = 0; i < n; i++) v[i] = kernel ? tu_stored(h->env.storage, w[i]) : w[i];
    return v;
}

/* One parameter's gradient from the gradient arena; NULL for an absent bias. */
static float *param_grad(const harness *h, int p) {
    if (h->row[p] == SIZE_MAX) return NULL;
    float *arena = tu_download(h->a.grads), *g = malloc(param_count(h, p) * sizeof *g);
    assert_non_null(g);
    memcpy(g, arena + h->t.params.rows[h->row[p]].offset, param_count(h, p) * sizeof *g);
    free(arena);
    return g;
}

/* ---- the double reference ---- */

/* What a forward and a backward of the reference compute. */
typedef struct ref {
    size_t B, T, C, H;
    double *w[PARAMS];               /* the parameters as the layer reads them */
    double *x, *qkv, *att, *y, *out; /* att: [B H T, T], zeros past t */
    double max_score;                /* the largest |score| of the forward */
    double *d_out, *dy, *dqkv, *dx, *dw[PARAMS];
} ref;

static double *zeros(size_t n) {
    double *v = calloc(n, sizeof *v);
    assert_non_null(v);
    return v;
}

static ref ref_make(const harness *h, const double *x) {
    size_t B = h->B, T = h->T, C = h->C, H = h->H, BT = B * T;
    ref r = {.B = B, .T = T, .C = C, .H = H, .x = zeros(BT * C)};
    memcpy(r.x, x, BT * C * sizeof *x);
    for (int p = 0; p < PARAMS; p++) {
        r.w[p] = param_values(h, p);
        r.dw[p] = zeros(param_count(h, p));
    }
    r.qkv = zeros(BT * 3 * C), r.att = zeros(B * H * T * T), r.y = zeros(BT * C);
    r.out = zeros(BT * C), r.d_out = zeros(BT * C), r.dy = zeros(BT * C);
    r.dqkv = zeros(BT * 3 * C), r.dx = zeros(BT * C);
    return r;
}

static void ref_free(ref *r) {
    double *all[] = {r->x, r->qkv, r->att, r->y, r->out, r->d_out, r->dy, r->dqkv, r->dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    for (int p = 0; p < PARAMS; p++) {
        free(r->w[p]);
        free(r->dw[p]);
    }
}

/* Head h's d-th channel of q (part 0), k (1) or v (2) at (b, t). */
static size_t qkv_at(const ref *r, size_t b, size_t t, size_t h, size_t part, size_t d) {
    return (b * r->T + t) * 3 * r->C + part * r->C + h * (r->C / r->H) + d;
}
static size_t y_at(const ref *r, size_t b, size_t t, size_t h, size_t d) {
    return (b * r->T + t) * r->C + h * (r->C / r->H) + d;
}
static double *att_row(const ref *r, double *att, size_t b, size_t h, size_t t) {
    return att + ((b * r->H + h) * r->T + t) * r->T;
}

static void ref_forward(ref *r) {
    size_t T = r->T, C = r->C, hs = C / r->H, BT = r->B * T;
    double scale = 1 / sqrt((double)hs);
    ref_gemm(false, false, BT, 3 * C, C, r->x, r->w[ATTN_KERNEL], r->w[ATTN_BIAS], r->qkv);
    r->max_score = 0;
    for (size_t b = 0; b < r->B; b++)
        for (size_t h = 0; h < r->H; h++)
            for (size_t t = 0; t < T; t++) {
                double *p = att_row(r, r->att, b, h, t), m = -INFINITY, sum = 0;
                for (size_t u = 0; u <= t; u++) {
                    double s = 0;
                    for (size_t d = 0; d < hs; d++)
                        s += r->qkv[qkv_at(r, b, t, h, 0, d)] * r->qkv[qkv_at(r, b, u, h, 1, d)];
                    p[u] = s * scale;
                    m = fmax(m, p[u]);
                    r->max_score = fmax(r->max_score, fabs(p[u]));
                }
                for (size_t u = 0; u <= t; u++) sum += (p[u] = exp(p[u] - m));
                for (size_t u = 0; u <= t; u++) p[u] /= sum;
                for (size_t d = 0; d < hs; d++) {
                    double acc = 0;
                    for (size_t u = 0; u <= t; u++) acc += p[u] * r->qkv[qkv_at(r, b, u, h, 2, d)];
                    r->y[y_at(r, b, t, h, d)] = acc;
                }
            }
    ref_gemm(false, false, BT, C, C, r->y, r->w[PROJ_KERNEL], r->w[PROJ_BIAS], r->out);
}

/* The gradients of sum(out * d_out), d_out set. */
static void ref_backward(ref *r) {
    size_t T = r->T, C = r->C, hs = C / r->H, BT = r->B * T;
    double scale = 1 / sqrt((double)hs);
    for (size_t j = 0; j < C; j++) {
        r->dw[PROJ_BIAS][j] = 0;
        for (size_t i = 0; i < BT; i++) r->dw[PROJ_BIAS][j] += r->d_out[i * C + j];
    }
    ref_gemm(true, false, C, C, BT, r->y, r->d_out, NULL, r->dw[PROJ_KERNEL]);
    ref_gemm(false, true, BT, C, C, r->d_out, r->w[PROJ_KERNEL], NULL, r->dy);
    memset(r->dqkv, 0, BT * 3 * C * sizeof *r->dqkv);
    double *da = zeros(T);
    for (size_t b = 0; b < r->B; b++)
        for (size_t h = 0; h < r->H; h++)
            for (size_t t = 0; t < T; t++) {
                const double *p = att_row(r, r->att, b, h, t);
                double dot = 0;
                for (size_t u = 0; u <= t; u++) {
                    da[u] = 0;
                    for (size_t d = 0; d < hs; d++)
                        da[u] += r->dy[y_at(r, b, t, h, d)] * r->qkv[qkv_at(r, b, u, h, 2, d)];
                    dot += p[u] * da[u];
                }
                for (size_t u = 0; u <= t; u++) {
                    double ds = p[u] * (da[u] - dot) * scale;
                    for (size_t d = 0; d < hs; d++) {
                        r->dqkv[qkv_at(r, b, t, h, 0, d)] += ds * r->qkv[qkv_at(r, b, u, h, 1, d)];
                        r->dqkv[qkv_at(r, b, u, h, 1, d)] += ds * r->qkv[qkv_at(r, b, t, h, 0, d)];
                        r->dqkv[qkv_at(r, b, u, h, 2, d)] += p[u] * r->dy[y_at(r, b, t, h, d)];
                    }
                }
            }
    free(da);
    for (size_t j = 0; j < 3 * C; j++) {
        r->dw[ATTN_BIAS][j] = 0;
        for (size_t i = 0; i < BT; i++) r->dw[ATTN_BIAS][j] += r->dqkv[i * 3 * C + j];
    }
    ref_gemm(true, false, C, 3 * C, BT, r->x, r->dqkv, NULL, r->dw[ATTN_KERNEL]);
    ref_gemm(false, true, BT, C, 3 * C, r->dqkv, r->w[ATTN_KERNEL], NULL, r->dx);
}

/* ---- checks ---- */

static double max_abs(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* The tolerance, relative to each element and to the tensor's largest:
 * rel_f32 for the f32 sums, plus the roundings into a 16-bit storage dtype
 * on the way (qkv, y, dy, dqkv and the result each round once: 6 units of
 * its roundoff; 4 times that for HGEMM, which also accumulates in f16).
 * Measured on PoCL over 10 seeds: the worst error was 0.33 of this in f16
 * and bf16, 0.1 in f32 (rel_f32 = 2e-6). */
static double tolerance(const variant *v, double rel_f32) {
    double u = tu_storage_rounding(v->dt).rel;
    return rel_f32 + 6 * u * (v->gemm == MPCL_GEMM_CLBLAST_HGEMM ? 4 : 1);
}

static void check(const harness *h, const variant *v, const char *what, const float *got,
                  const double *want, size_t n, double tol) {
    double atol = tol * max_abs(want, n);
    char name[160];
    snprintf(name, sizeof name, "%s (%s on %s, B=%zu T=%zu C=%zu H=%zu%s)", what,
             mpcl_dtype_name(v->dt), mpcl_gemm_path_name(v->gemm), h->B, h->T, h->C, h->H,
             h->bias ? "" : ", no bias");
    if (!tu_check_close(name, got, want, n, atol, tol, tu_norm_tol(atol, tol, want, n)))
        fail_msg("%s differs from the reference", name);
}

/* n values in [lo, hi], as stored in dt: the host floats and the doubles. */
static float *random_stored(tu_rng *rng, mpcl_dtype dt, size_t n, float lo, float hi) {
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    tu_fill_uniform(rng, x, n, lo, hi);
    for (size_t i = 0; i < n; i++) x[i] = tu_stored(dt, x[i]);
    return x;
}

/* The elements of `t` from `from` on still hold the poison (NaN). */
static void assert_tail_poisoned(const mpcl_tensor *t, size_t from, const char *what) {
    float *v = tu_download(t);
    for (size_t i = from; i < mpcl_tensor_count(t); i++)
        if (!isnan(v[i])) fail_msg("%s: element %zu past the batch was written", what, i);
    free(v);
}

/* Forward and backward of random x in [-x_range, x_range] against the
 * reference within tol (see tolerance); returns the reference's largest
 * |score|. */
static double run_case(harness *h, tu_rng *rng, const variant *v, float x_range, double tol) {
    mpcl_context *ctx = h->env.ctx;
    mpcl__layer *L = &h->L;
    size_t B = h->B, C = h->C, n = B * h->T * C;
    float *xf = random_stored(rng, v->dt, n, -x_range, x_range);
    float *dof = random_stored(rng, v->dt, n + h->T * C, -1, 1);
    double *x = tu_to_double(xf, n), *d_out = tu_to_double(dof, n);
    ref r = ref_make(h, x);
    memcpy(r.d_out, d_out, n * sizeof *d_out);
    ref_forward(&r);
    ref_backward(&r);
    mpcl_tensor *tx = tu_tensor_from(ctx, v->dt, B, h->T * C, xf);

    tu_poison(L->output);
    TU_ASSERT_OK(L->kind->forward(L, tx, true));
    float *out = tu_download(L->output);
    check(h, v, "out", out, r.out, n, tol);
    assert_tail_poisoned(L->output, n, "out");

    TU_ASSERT_OK(mpcl_tensor_upload_f32(L->d_output, dof, n + h->T * C));
    mpcl_tensor *tdx = tu_tensor_poisoned(ctx, v->dt, B, h->T * C);
    tu_poison(h->a.grads);
    TU_ASSERT_OK(L->kind->backward(L, tx, tdx));
    float *dx = tu_download(tdx), *dw[PARAMS];
    check(h, v, "dx", dx, r.dx, n, tol);
    for (int p = 0; p < PARAMS; p++) {
        dw[p] = param_grad(h, p);
        if (dw[p]) check(h, v, param_names[p], dw[p], r.dw[p], param_count(h, p), tol);
    }

    /* Again, without an input gradient (a first layer): the same parameter
     * gradients bit for bit, the same output too (no atomics, no order
     * that changes from run to run). */
    TU_ASSERT_OK(L->kind->forward(L, tx, true));
    float *again = tu_download(L->output);
    assert_memory_equal(out, again, n * sizeof *out);
    free(again);
    tu_poison(h->a.grads);
    TU_ASSERT_OK(L->kind->backward(L, tx, NULL));
    for (int p = 0; p < PARAMS; p++) {
        if (!dw[p]) continue;
        float *g = param_grad(h, p);
        assert_memory_equal(dw[p], g, param_count(h, p) * sizeof *g);
        free(g);
        free(dw[p]);
    }
    double max_score = r.max_score;
    ref_free(&r);
    free(xf);
    free(dof);
    free(x);
    free(d_out);
    free(out);
    free(dx);
    mpcl_tensor_destroy(tx);
    mpcl_tensor_destroy(tdx);
    return max_score;
}

/* Every variant on small odd shapes: {B, T, C, H, bias}. T = 1 (a single
 * key), odd T, 3 and 5 channels per head, one head, more heads than
 * channels per head, no biases; 8 and 11 channels per head, a whole group
 * of the row kernels' eight lanes and one with a tail; T = 21 and 17
 * channels per head: the block kernels' 8-row blocks (the last one partial)
 * and 16-wide chunks of keys and channels, with a tail; 16 and 32 channels
 * per head, which f32 reads in place (the block layout's direct rows), T = 21
 * and 18 not whole chunks of positions; T = 67 and 70 channels per head:
 * the tile layout's 64 x 64 tiles, the last partial, its 16-wide slices of
 * the sums (the last partial too), and a tile above the diagonal that it
 * skips. mpcl's GEMM paths take
 * every shape; CLBlast's (whose GEMMs test_gemm covers) the two marked
 * `clblast`: on PoCL each new shape compiled CLBlast kernels, and the whole
 * test ran past its 10 minutes in the ASan build with a cold cache. On slow
 * devices the tile layout takes the shapes marked `slow` in f32 and f16
 * only (all of them took 5 minutes under Oclgrind), and the other layouts
 * leave out T = 67, which is the tiles'. */
static void matches_the_reference(void **state) {
    (void)state;
    static const struct {
        size_t B, T, C, H;
        bool bias, clblast, slow;
    } shapes[] = {{1, 1, 4, 2, true, false, true},    {2, 7, 6, 2, true, true, true},
                  {3, 5, 15, 5, true, false, false},  {2, 7, 5, 1, true, false, false},
                  {1, 9, 8, 4, false, false, false},  {2, 6, 16, 2, true, false, false},
                  {2, 5, 22, 2, true, true, false},   {2, 21, 34, 2, true, false, true},
                  {2, 21, 32, 2, true, false, false}, {1, 18, 64, 2, false, false, false},
                  {1, 67, 140, 2, true, false, true}};
    mpcl_context *ctx = tu_context();
    bool slow = tu_slow_device(ctx), tiles = slow_tiles(ctx);
    if (slow)
        printf("a slow device: %s\n",
               tiles ? "the tile layout in f32 and f16 on four shapes" : "T = 67 left out");
    tu_rng rng = tu_rng_make(tu_seed("matches_the_reference"));
    for (size_t vi = 0; vi < VARIANTS; vi++) {
        const variant *v = &variants[vi];
        if (!variant_usable(ctx, v)) {
            printf("%s: not usable on this device, skipped\n", mpcl_gemm_path_name(v->gemm));
            continue;
        }
        bool own = v->gemm == MPCL_GEMM_MPCL_F32 || v->gemm == MPCL_GEMM_MPCL_MIXED;
        if (tiles && (!own || v->dt == MPCL_DTYPE_BF16)) continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (!own && !shapes[s].clblast) continue;
            if (slow && (tiles ? !shapes[s].slow : shapes[s].T > 64)) continue;
            harness *h = harness_make(ctx, &rng, v, shapes[s].B, shapes[s].T, shapes[s].C,
                                      shapes[s].H, shapes[s].bias, 1);
            run_case(h, &rng, v, 1, tolerance(v, 2e-6));
            harness_destroy(h);
        }
    }
    mpcl_context_destroy(ctx);
}

/* Scores of ~1e3 (q and k 60 times larger than above): exp of the raw
 * scores overflows f32 (past 88.7), so the softmax must subtract the row's
 * maximum. f32 storage only: in a 16-bit dtype a score of 1e3 moves by more
 * than 1 with a rounding of q, which is the dtype's limit, not the
 * layer's. The f32 scores carry ~1e3 * 1e-7 of rounding, so the
 * probabilities ~1e-4 relative (measured: 3.4e-5 of the largest element
 * at worst over 10 seeds). */
static void large_scores_do_not_overflow(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("large_scores_do_not_overflow"));
    for (size_t vi = 0; vi < 2; vi++) {
        harness *h = harness_make(ctx, &rng, &variants[vi], 2, 7, 6, 2, true, 60);
        double max_score = run_case(h, &rng, &variants[vi], 1, 2e-4);
        if (max_score < 300) fail_msg("the largest score is %g: not large", max_score);
        harness_destroy(h);
    }
    mpcl_context_destroy(ctx);
}

/* Whether a and b, [B, T C], hold the same bits at positions [from, to)
 * of every row. */
static bool same_positions(const float *a, const float *b, size_t B, size_t T, size_t C,
                           size_t from, size_t to) {
    for (size_t i = 0; i < B; i++)
        if (memcmp(a + (i * T + from) * C, b + (i * T + from) * C, (to - from) * C * sizeof *a))
            return false;
    return true;
}

/* For each t0: inputs changed at every t' > t0 leave the outputs at t <=
 * t0 bit for bit (and change the others), and output gradients changed at
 * every t < t0 leave the input gradients at t' >= t0 bit for bit. The tile
 * layout on a slow device: f32 only. */
static void the_mask_is_causal(void **state) {
    (void)state;
    enum { B = 2, T = 7, C = 6, H = 2, N = B * T * C };
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("the_mask_is_causal"));
    if (slow_tiles(ctx)) printf("the tile layout on a slow device: f32 only\n");
    for (size_t vi = 0; vi < (slow_tiles(ctx) ? 1 : VARIANTS); vi++) {
        const variant *v = &variants[vi];
        if (!variant_usable(ctx, v)) continue;
        harness *h = harness_make(ctx, &rng, v, B, T, C, H, true, 1);
        mpcl__layer *L = &h->L;
        float *x = random_stored(&rng, v->dt, N, -1, 1);
        float *d_out = random_stored(&rng, v->dt, N + T * C, -1, 1);
        mpcl_tensor *tx = tu_tensor_from(ctx, v->dt, B, T * C, x);
        mpcl_tensor *tdx = tu_tensor(ctx, v->dt, B, T * C);
        TU_ASSERT_OK(L->kind->forward(L, tx, true));
        float *out = tu_download(L->output);
        TU_ASSERT_OK(mpcl_tensor_upload_f32(L->d_output, d_out, N + T * C));
        TU_ASSERT_OK(L->kind->backward(L, tx, tdx));
        float *dx = tu_download(tdx);
        for (size_t t0 = 0; t0 + 1 < T; t0++) {
            float *x2 = malloc(N * sizeof *x2);
            assert_non_null(x2);
            memcpy(x2, x, N * sizeof *x2);
            for (size_t b = 0; b < B; b++)
                for (size_t i = (b * T + t0 + 1) * C; i < (b + 1) * T * C; i++) x2[i] += 0.25f;
            mpcl_tensor *tx2 = tu_tensor_from(ctx, v->dt, B, T * C, x2);
            TU_ASSERT_OK(L->kind->forward(L, tx2, true));
            float *out2 = tu_download(L->output);
            if (!same_positions(out, out2, B, T, C, 0, t0 + 1))
                fail_msg("%s: inputs after t = %zu moved outputs up to it", mpcl_dtype_name(v->dt),
                         t0);
            if (same_positions(out, out2, B, T, C, t0 + 1, T))
                fail_msg("%s: inputs after t = %zu moved no output", mpcl_dtype_name(v->dt), t0);
            /* The first forward's state back, then output gradients
             * changed before t0 + 1. */
            TU_ASSERT_OK(L->kind->forward(L, tx, true));
            float *d_out2 = malloc((N + T * C) * sizeof *d_out2);
            assert_non_null(d_out2);
            memcpy(d_out2, d_out, (N + T * C) * sizeof *d_out2);
            for (size_t b = 0; b < B; b++)
                for (size_t i = b * T * C; i < (b * T + t0) * C; i++) d_out2[i] += 0.25f;
            TU_ASSERT_OK(mpcl_tensor_upload_f32(L->d_output, d_out2, N + T * C));
            TU_ASSERT_OK(L->kind->backward(L, tx, tdx));
            float *dx2 = tu_download(tdx);
            if (!same_positions(dx, dx2, B, T, C, t0, T))
                fail_msg("%s: output gradients before t = %zu moved input gradients from it on",
                         mpcl_dtype_name(v->dt), t0);
            if (t0 > 0 && same_positions(dx, dx2, B, T, C, 0, t0))
                fail_msg("%s: output gradients before t = %zu moved no input gradient",
                         mpcl_dtype_name(v->dt), t0);
            free(x2);
            free(out2);
            free(d_out2);
            free(dx2);
            mpcl_tensor_destroy(tx2);
        }
        free(x);
        free(d_out);
        free(out);
        free(dx);
        mpcl_tensor_destroy(tx);
        mpcl_tensor_destroy(tdx);
        harness_destroy(h);
    }
    mpcl_context_destroy(ctx);
}

/* sum(out * w) of a forward of x, in double. */
static double weighted_sum(harness *h, const mpcl_tensor *x, const double *w) {
    TU_ASSERT_OK(h->L.kind->forward(&h->L, x, true));
    float *out = tu_download(h->L.output);
    double s = 0;
    for (size_t i = 0; i < h->B * h->T * h->C; i++) s += (double)out[i] * w[i];
    free(out);
    return s;
}

/* The gradient of f = sum(out * w) against (f(+e) - f(-e)) / 2e, for every
 * input and parameter element, in float32. f is ~1 with a few f32
 * roundings (~1e-7 each) over 2e = 2e-2: ~1e-5 of noise; the truncation
 * error is O(e^2) ~ 1e-4 of the smooth function's third derivatives.
 * Skipped for the tile layout on a slow device (456 forwards: 36 s under
 * Oclgrind), whose gradients matches_the_reference checks there. */
static void gradients_match_finite_differences(void **state) {
    (void)state;
    enum { B = 2, T = 5, C = 6, H = 2, N = B * T * C };
    const float e = 1e-2f;
    mpcl_context *ctx = tu_context();
    if (slow_tiles(ctx)) {
        mpcl_context_destroy(ctx);
        skip();
    }
    tu_rng rng = tu_rng_make(tu_seed("gradients_match_finite_differences"));
    const variant *v = &variants[0];
    harness *h = harness_make(ctx, &rng, v, B, T, C, H, true, 3);
    mpcl__layer *L = &h->L;
    float *x = random_stored(&rng, v->dt, N, -1, 1), *wf = random_stored(&rng, v->dt, N, -1, 1);
    double *w = tu_to_double(wf, N);
    mpcl_tensor *tx = tu_tensor_from(ctx, v->dt, B, T * C, x);
    mpcl_tensor *tdx = tu_tensor_poisoned(ctx, v->dt, B, T * C);
    TU_ASSERT_OK(L->kind->forward(L, tx, true));
    float *d_out = calloc(N + T * C, sizeof *d_out); /* max_batch rows: zeros past the batch */
    assert_non_null(d_out);
    memcpy(d_out, wf, N * sizeof *d_out);
    TU_ASSERT_OK(mpcl_tensor_upload_f32(L->d_output, d_out, N + T * C));
    free(d_out);
    TU_ASSERT_OK(L->kind->backward(L, tx, tdx));
    float *dx = tu_download(tdx);
    double *fd = zeros(N);
    for (size_t i = 0; i < N; i++) {
        float x0 = x[i];
        x[i] = x0 + e;
        TU_ASSERT_OK(mpcl_tensor_upload_f32(tx, x, N));
        double up = weighted_sum(h, tx, w);
        x[i] = x0 - e;
        TU_ASSERT_OK(mpcl_tensor_upload_f32(tx, x, N));
        fd[i] = (up - weighted_sum(h, tx, w)) / (2 * (double)e);
        x[i] = x0;
    }
    TU_ASSERT_OK(mpcl_tensor_upload_f32(tx, x, N));
    if (!tu_check_close("dx", dx, fd, N, 1e-3, 1e-2, 1e-2))
        fail_msg("dx is not the finite difference");
    for (int p = 0; p < PARAMS; p++) {
        size_t n = param_count(h, p), off = h->t.params.rows[h->row[p]].offset;
        float *g = param_grad(h, p), *m = h->master + off;
        double *pfd = zeros(n);
        for (size_t i = 0; i < n; i++) {
            float m0 = m[i];
            m[i] = m0 + e;
            upload_params(h);
            double up = weighted_sum(h, tx, w);
            m[i] = m0 - e;
            upload_params(h);
            pfd[i] = (up - weighted_sum(h, tx, w)) / (2 * (double)e);
            m[i] = m0;
        }
        upload_params(h);
        if (!tu_check_close(param_names[p], g, pfd, n, 1e-3, 1e-2, 1e-2))
            fail_msg("%s is not the finite difference", param_names[p]);
        free(g);
        free(pfd);
    }
    free(x);
    free(wf);
    free(w);
    free(dx);
    free(fd);
    mpcl_tensor_destroy(tx);
    mpcl_tensor_destroy(tdx);
    harness_destroy(h);
    mpcl_context_destroy(ctx);
}

/* ---- refusals and the kind in a model ---- */

/* Channels that heads do not divide, by the layer's name and both numbers;
 * through the model too, as is a flat input; num_heads 0 or missing; and
 * batches of more attention rows than the kernels count. */
static void bad_heads_and_inputs_are_refused(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    /* On the heap: a layer's tables are some 230 KB. */
    harness *h = calloc(1, sizeof *h);
    assert_non_null(h);
    h->env = (mpcl__layer_env){.ctx = ctx, .storage = MPCL_DTYPE_F32, .max_batch = 1};
    tu_expect_error(harness_declare(h, ctx, 5, 6, 4, true), MPCL_ERR_INVALID_ARG,
                    "causal_self_attention_0: its 6 channels do not split into num_heads=4");
    mpcl__destroy_layers(&h->L, 1);
    /* More rows (b, h, t) than the kernels' uint counts: refused when
     * declared, before anything is allocated. */
    h->env.max_batch = (size_t)1 << 31;
    tu_expect_error(harness_declare(h, ctx, 5, 6, 2, true), MPCL_ERR_SHAPE,
                    "causal_self_attention_0: 2147483648 samples of 2 heads by 5 positions");
    mpcl__destroy_layers(&h->L, 1);
    static const struct {
        const char *text, *needle;
    } models[] = {
        {"input_shape=5,10; causal_self_attention num_heads=3; flatten; dense units=2",
         "causal_self_attention_0: its 10 channels do not split into num_heads=3"},
        {"input_shape=12; causal_self_attention num_heads=2; dense units=2",
         "causal_self_attention_0 takes a sequence (time, channels) input; it is given (12,)"},
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        mpcl_model_params p = mpcl_model_default_params();
        TU_ASSERT_OK(mpcl_model_spec_parse(ctx, models[i].text, &p));
        p.classes = 2;
        mpcl_model *m = NULL;
        tu_expect_error(mpcl_model_create(ctx, &p, &m), MPCL_ERR_INVALID_ARG, models[i].needle);
        assert_null(m);
    }
    mpcl_layer_spec spec;
    tu_expect_error(mpcl_layer_spec_parse(ctx, "causal_self_attention num_heads=0", &spec),
                    MPCL_ERR_INVALID_ARG, "num_heads");
    tu_expect_error(mpcl_layer_spec_parse(ctx, "causal_self_attention", &spec),
                    MPCL_ERR_INVALID_ARG, "num_heads");
    free(h);
    mpcl_context_destroy(ctx);
}

/* A model of (T, C) sequences through attention, flatten and dense in
 * every policy: a training step gives every attention parameter a finite,
 * non-zero gradient, and the text form round trips. */
static void trains_in_a_model(void **state) {
    (void)state;
    enum { B = 3, T = 4, C = 6 };
    static const char text[] =
        "input_shape=4,6; causal_self_attention num_heads=2 "
        "use_bias=true; flatten; dense units=3 activation=linear "
        "use_bias=true";
    static const mpcl_policy policies[] = {MPCL_POLICY_FLOAT32, MPCL_POLICY_MIXED_FLOAT16,
                                           MPCL_POLICY_MIXED_BFLOAT16};
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("trains_in_a_model"));
    for (size_t pi = 0; pi < sizeof policies / sizeof policies[0]; pi++) {
        mpcl_model_params p = mpcl_model_default_params();
        TU_ASSERT_OK(mpcl_model_spec_parse(ctx, text, &p));
        p.classes = 3;
        p.max_batch = B;
        p.policy = policies[pi];
        char round[MPCL_MODEL_SPEC_MAX];
        TU_ASSERT_OK(mpcl_model_spec_format(ctx, &p, round, sizeof round));
        assert_string_equal(round, text);
        mpcl_model *m = NULL;
        TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
        mpcl_dtype dt = mpcl_model_plan(m)->storage;
        float *xf = random_stored(&rng, dt, B * T * C, -1, 1);
        int32_t labels[B] = {0, 1, 2};
        mpcl_tensor *x = tu_tensor_from(ctx, dt, B, T * C, xf),
                    *y = tu_tensor(ctx, MPCL_DTYPE_I32, B, 1);
        TU_ASSERT_OK(mpcl_tensor_upload_i32(y, labels, B));
        TU_ASSERT_OK(mpcl_model_forward(m, x, y));
        TU_ASSERT_OK(mpcl_model_backward(m));
        float *arena = tu_download(mpcl_model_grad_arena(m));
        for (size_t i = 0; i < 4; i++) {
            const mpcl_param_info *r = mpcl_model_param(m, i);
            assert_non_null(strstr(r->name, "causal_self_attention_0.c_"));
            double norm = 0;
            for (size_t j = 0; j < r->count; j++) {
                if (!isfinite(arena[r->offset + j]))
                    fail_msg("%s[%zu] is %g", r->name, j, (double)arena[r->offset + j]);
                norm += fabs(arena[r->offset + j]);
            }
            if (norm == 0) fail_msg("%s: no gradient", r->name);
        }
        free(arena);
        free(xf);
        mpcl_tensor_destroy(x);
        mpcl_tensor_destroy(y);
        mpcl_model_destroy(m);
    }
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_the_reference),
        cmocka_unit_test(large_scores_do_not_overflow),
        cmocka_unit_test(the_mask_is_causal),
        cmocka_unit_test(gradients_match_finite_differences),
        cmocka_unit_test(bad_heads_and_inputs_are_refused),
        cmocka_unit_test(trains_in_a_model),
    };
    /* Every layout of the kernels (causal_self_attention.c). */
    return TU_RUN_WITH_EACH(tests, "MPCL_ATTENTION", "row", "block", "tile");
}
