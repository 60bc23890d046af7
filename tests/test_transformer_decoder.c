/* The transformer_decoder kind (src/nn/transformer_decoder.c): GPT-2's
 * pre-norm residual block through its layer interface, against a double
 * host reference of the whole block (its forward written out; the
 * gradients of sum(out * d_out) as central differences of that double
 * forward) on random inputs and parameters, T = 1 and odd T, outputs,
 * input gradient and gradient arena poisoned first, the rows past the batch
 * left alone; its rows' names and order (GPT-2's, the contract of the HF
 * mapping) and a name too long refused; a head count that does not divide
 * the channels refused by name; the text form; and in a model
 * (token_pos_embedding -> transformer_decoder -> dense per position): f32
 * central differences of every parameter, and a training whose loss drops
 * in float32 and mixed_bfloat16. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "ref_ops.h"
#include "testutil.h"

enum { C = 12, H = 3, I = 20 };

/* The rows in GPT-2's order: their names under the block's, and their
 * element counts. */
enum {
    LN1_G,
    LN1_B,
    ATTN_W,
    ATTN_B,
    APROJ_W,
    APROJ_B,
    LN2_G,
    LN2_B,
    FC_W,
    FC_B,
    PROJ_W,
    PROJ_B,
    PARAMS
};
static const char *const row_names[PARAMS] = {
    "ln_1.gamma",         "ln_1.beta",        "attn.c_attn.kernel", "attn.c_attn.bias",
    "attn.c_proj.kernel", "attn.c_proj.bias", "ln_2.gamma",         "ln_2.beta",
    "mlp.c_fc.kernel",    "mlp.c_fc.bias",    "mlp.c_proj.kernel",  "mlp.c_proj.bias"};
static const size_t row_shapes[PARAMS][2] = {
    {C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C}, {C, 0},
    {C, 0}, {C, 0}, {C, I},     {I, 0},     {I, C}, {C, 0},
};

static size_t row_count(int p) {
    return row_shapes[p][0] * (row_shapes[p][1] ? row_shapes[p][1] : 1);
}

/* ---- the block alone ---- */

typedef struct harness {
    mpcl__layer_env env;
    mpcl__layer L;
    mpcl__tables t;
    mpcl__arenas a;
    size_t B, T;
    float *master; /* the master arena's values */
} harness;

/* Declares a block of num_heads heads on (T, C) under the name `name`
 * (NULL: transformer_decoder_<index>). */
static mpcl_status harness_declare(harness *h, mpcl_context *ctx, size_t T, size_t heads,
                                   size_t index, const char *name) {
    mpcl__layer *L = &h->L;
    char text[96];
    snprintf(text, sizeof text, "transformer_decoder num_heads=%zu intermediate_dim=%d", heads, I);
    TU_ASSERT_OK(mpcl_layer_spec_parse(ctx, text, &L->spec));
    L->kind = mpcl__layer_kind_find("transformer_decoder");
    assert_non_null(L->kind);
    L->env = &h->env;
    L->index = index;
    L->name = name;
    L->in_rank = 2;
    L->in_shape[0] = T;
    L->in_shape[1] = C;
    L->inputs = T * C;
    h->T = T;
    mpcl__params_init(&h->t.params, mpcl__sub_buffer_align(ctx));
    mpcl__params_init(&h->t.buffers, mpcl__sub_buffer_align(ctx));
    return L->kind->declare(L, &h->t);
}

static harness *harness_new(mpcl_context *ctx, size_t B) {
    harness *h = calloc(1, sizeof *h);
    assert_non_null(h);
    h->B = B;
    h->env = (mpcl__layer_env){
        .ctx = ctx, .storage = MPCL_DTYPE_F32, .gemm = MPCL_GEMM_MPCL_F32, .max_batch = B + 1};
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

/* The table's rows are GPT-2's, in order, under `block`'s name. */
static void assert_rows(const mpcl__param_table *t, const char *block) {
    assert_int_equal(t->count, PARAMS);
    for (int p = 0; p < PARAMS; p++) {
        const mpcl_param_info *r = &t->rows[p];
        char want[96];
        snprintf(want, sizeof want, "%s.%s", block, row_names[p]);
        assert_string_equal(r->name, want);
        assert_int_equal(r->rank, row_shapes[p][1] ? 2 : 1);
        assert_int_equal(r->shape[0], row_shapes[p][0]);
        if (row_shapes[p][1]) assert_int_equal(r->shape[1], row_shapes[p][1]);
    }
}

/* A created block with random parameters in h->master (kernels in +-1/sqrt(fan in),
 * gammas in [0.5, 1.5], betas and biases in +-0.5). */
static harness *harness_make(mpcl_context *ctx, tu_rng *rng, size_t B, size_t T) {
    harness *h = harness_new(ctx, B);
    TU_ASSERT_OK(harness_declare(h, ctx, T, H, 0, NULL));
    assert_rows(&h->t.params, "transformer_decoder_0");
    assert_int_equal(h->t.buffers.count, 0);
    assert_int_equal(h->L.outputs, T * C);
    size_t total = h->t.params.total;
    h->master = calloc(total, sizeof *h->master);
    assert_non_null(h->master);
    for (int p = 0; p < PARAMS; p++) {
        float *w = h->master + h->t.params.rows[p].offset;
        float limit = 1 / sqrtf((float)row_shapes[p][0]);
        bool kernel = row_shapes[p][1] != 0, gamma = p == LN1_G || p == LN2_G;
        tu_fill_uniform(rng, w, row_count(p),
                        kernel  ? -limit
                        : gamma ? 0.5f
                                : -0.5f,
                        kernel  ? limit
                        : gamma ? 1.5f
                                : 0.5f);
    }
    h->a.master = tu_tensor(ctx, MPCL_DTYPE_F32, 1, total);
    h->a.working = tu_tensor(ctx, MPCL_DTYPE_F32, 1, total);
    h->a.grads = tu_tensor(ctx, MPCL_DTYPE_F32, 1, total);
    TU_ASSERT_OK(mpcl_tensor_upload_f32(h->a.master, h->master, total));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(h->a.working, h->master, total));
    TU_ASSERT_OK(h->L.kind->create(&h->L, &h->t, &h->a));
    return h;
}

/* ---- the double reference ---- */

/* The block's parameters and one sample's input, in double. */
typedef struct ref {
    size_t T;
    double *w[PARAMS];
    double eps;
} ref;

/* y [T, C] = layer norm of x over its last axis. */
static void ref_layer_norm(const ref *r, const double *x, const double *g, const double *b,
                           double *y) {
    for (size_t t = 0; t < r->T; t++) {
        const double *xt = x + t * C;
        double mean = 0, var = 0;
        for (size_t c = 0; c < C; c++) mean += xt[c] / C;
        for (size_t c = 0; c < C; c++) var += (xt[c] - mean) * (xt[c] - mean) / C;
        for (size_t c = 0; c < C; c++)
            y[t * C + c] = g[c] * (xt[c] - mean) / sqrt(var + r->eps) + b[c];
    }
}

/* y [T, N] = act(x [T, K] w [K, N] + b). */
static void ref_dense(const ref *r, const double *x, const double *w, const double *b, size_t K,
                      size_t N, mpcl_activation act, double *y) {
    for (size_t t = 0; t < r->T; t++)
        for (size_t n = 0; n < N; n++) {
            double s = b[n];
            for (size_t k = 0; k < K; k++) s += x[t * K + k] * w[k * N + n];
            y[t * N + n] = ref_act(act, s);
        }
}

/* y [T, C]: the heads' causal softmax attention over qkv [T, 3C]. */
static void ref_attend(const ref *r, const double *qkv, double *y) {
    size_t hs = C / H;
    double p[16];
    assert_true(r->T <= sizeof p / sizeof p[0]);
    for (size_t hd = 0; hd < H; hd++)
        for (size_t t = 0; t < r->T; t++) {
            double m = -INFINITY, sum = 0;
            for (size_t u = 0; u <= t; u++) {
                double s = 0;
                for (size_t d = 0; d < hs; d++)
                    s += qkv[t * 3 * C + hd * hs + d] * qkv[u * 3 * C + C + hd * hs + d];
                p[u] = s / sqrt((double)hs);
                m = fmax(m, p[u]);
            }
            for (size_t u = 0; u <= t; u++) sum += (p[u] = exp(p[u] - m));
            for (size_t d = 0; d < hs; d++) {
                double acc = 0;
                for (size_t u = 0; u <= t; u++)
                    acc += p[u] / sum * qkv[u * 3 * C + 2 * C + hd * hs + d];
                y[t * C + hd * hs + d] = acc;
            }
        }
}

/* out [T, C] of one sample x [T, C]. */
static void ref_forward(const ref *r, const double *x, double *out) {
    size_t T = r->T;
    double *n = calloc(T * C, sizeof *n), *qkv = calloc(T * 3 * C, sizeof *qkv);
    double *y = calloc(T * C, sizeof *y), *hh = calloc(T * C, sizeof *hh);
    double *a = calloc(T * I, sizeof *a), *m = calloc(T * C, sizeof *m);
    assert_true(n && qkv && y && hh && a && m);
    double *const *w = r->w;
    ref_layer_norm(r, x, w[LN1_G], w[LN1_B], n);
    ref_dense(r, n, w[ATTN_W], w[ATTN_B], C, 3 * C, MPCL_ACT_IDENTITY, qkv);
    ref_attend(r, qkv, y);
    ref_dense(r, y, w[APROJ_W], w[APROJ_B], C, C, MPCL_ACT_IDENTITY, hh);
    for (size_t i = 0; i < T * C; i++) hh[i] += x[i];
    ref_layer_norm(r, hh, w[LN2_G], w[LN2_B], n);
    ref_dense(r, n, w[FC_W], w[FC_B], C, I, MPCL_ACT_GELU, a);
    ref_dense(r, a, w[PROJ_W], w[PROJ_B], I, C, MPCL_ACT_IDENTITY, m);
    for (size_t i = 0; i < T * C; i++) out[i] = hh[i] + m[i];
    free(n), free(qkv), free(y), free(hh), free(a), free(m);
}

/* sum over the batch of sum(out * d_out). */
static double ref_objective(const ref *r, size_t B, const double *x, const double *d_out) {
    size_t n = r->T * C;
    double *out = calloc(n, sizeof *out), s = 0;
    assert_non_null(out);
    for (size_t b = 0; b < B; b++) {
        ref_forward(r, x + b * n, out);
        for (size_t i = 0; i < n; i++) s += out[i] * d_out[b * n + i];
    }
    free(out);
    return s;
}

/* The derivative of the objective by v[i], centrally, in double. */
static double ref_derivative(const ref *r, size_t B, double *x, const double *d_out, double *v,
                             size_t i) {
    const double step = 1e-5;
    double keep = v[i];
    v[i] = keep + step;
    double up = ref_objective(r, B, x, d_out);
    v[i] = keep - step;
    double down = ref_objective(r, B, x, d_out);
    v[i] = keep;
    return (up - down) / (2 * step);
}

/* ---- the checks ---- */

static double max_abs(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* f32 sums against double: 2e-5 of the tensor's largest element, and of
 * each element (the double differences are good to about 1e-9). */
static void check(const char *what, size_t B, size_t T, const float *got, const double *want,
                  size_t n) {
    const double tol = 2e-5;
    double atol = tol * max_abs(want, n);
    char name[96];
    snprintf(name, sizeof name, "%s (B=%zu T=%zu C=%d H=%d I=%d)", what, B, T, C, H, I);
    if (!tu_check_close(name, got, want, n, atol, tol, tu_norm_tol(atol, tol, want, n)))
        fail_msg("%s differs from the reference", name);
}

static void assert_tail_poisoned(const mpcl_tensor *t, size_t from, const char *what) {
    float *v = tu_download(t);
    for (size_t i = from; i < mpcl_tensor_count(t); i++)
        if (!isnan(v[i])) fail_msg("%s: element %zu past the batch was written", what, i);
    free(v);
}

static void run_case(mpcl_context *ctx, tu_rng *rng, size_t B, size_t T) {
    harness *h = harness_make(ctx, rng, B, T);
    mpcl__layer *L = &h->L;
    size_t n = B * T * C;
    float *xf = malloc(n * sizeof *xf), *dof = malloc((n + T * C) * sizeof *dof);
    assert_true(xf && dof);
    tu_fill_uniform(rng, xf, n, -1, 1);
    tu_fill_uniform(rng, dof, n + T * C, -1, 1);
    double *x = tu_to_double(xf, n), *d_out = tu_to_double(dof, n);
    ref r = {.T = T, .eps = L->spec.epsilon};
    for (int p = 0; p < PARAMS; p++)
        r.w[p] = tu_to_double(h->master + h->t.params.rows[p].offset, row_count(p));

    double *want = calloc(n, sizeof *want);
    assert_non_null(want);
    for (size_t b = 0; b < B; b++) ref_forward(&r, x + b * T * C, want + b * T * C);
    mpcl_tensor *tx = tu_tensor_from(ctx, MPCL_DTYPE_F32, B, T * C, xf);
    tu_poison(L->output);
    TU_ASSERT_OK(L->kind->forward(L, tx, true));
    float *out = tu_download(L->output);
    check("out", B, T, out, want, n);
    assert_tail_poisoned(L->output, n, "out");

    TU_ASSERT_OK(mpcl_tensor_upload_f32(L->d_output, dof, n + T * C));
    mpcl_tensor *tdx = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, B, T * C);
    tu_poison(h->a.grads);
    TU_ASSERT_OK(L->kind->backward(L, tx, tdx));
    float *dx = tu_download(tdx), *grads = tu_download(h->a.grads);
    for (size_t i = 0; i < n; i++) want[i] = ref_derivative(&r, B, x, d_out, x, i);
    check("dx", B, T, dx, want, n);
    for (int p = 0; p < PARAMS; p++) {
        size_t count = row_count(p);
        double *dw = calloc(count, sizeof *dw);
        assert_non_null(dw);
        for (size_t i = 0; i < count; i++) dw[i] = ref_derivative(&r, B, x, d_out, r.w[p], i);
        check(row_names[p], B, T, grads + h->t.params.rows[p].offset, dw, count);
        free(dw);
    }

    /* Again without an input gradient (a first layer): the same parameter
     * gradients, bit for bit. */
    TU_ASSERT_OK(L->kind->forward(L, tx, true));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(L->d_output, dof, n + T * C));
    tu_poison(h->a.grads);
    TU_ASSERT_OK(L->kind->backward(L, tx, NULL));
    float *again = tu_download(h->a.grads);
    for (int p = 0; p < PARAMS; p++) {
        size_t off = h->t.params.rows[p].offset;
        assert_memory_equal(grads + off, again + off, row_count(p) * sizeof *again);
    }
    free(again);
    for (int p = 0; p < PARAMS; p++) free(r.w[p]);
    free(xf), free(dof), free(x), free(d_out), free(want), free(out), free(dx), free(grads);
    mpcl_tensor_destroy(tx);
    mpcl_tensor_destroy(tdx);
    harness_destroy(h);
}

/* The block against the double reference, T = 1 and odd T. */
static void matches_the_reference(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("matches_the_reference"));
    static const size_t cases[][2] = {{2, 5}, {1, 7}, {3, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(ctx, &rng, cases[i][0], cases[i][1]);
    mpcl_context_destroy(ctx);
}

/* The longest name a model gives a block (MPCL_MAX_LAYERS of them) fits
 * every row; a name too long for the table is refused, not cut. */
static void row_names_fit_or_are_refused(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    harness *h = harness_new(ctx, 1);
    TU_ASSERT_OK(harness_declare(h, ctx, 3, H, 63, NULL));
    assert_rows(&h->t.params, "transformer_decoder_63");
    harness_destroy(h);
    h = harness_new(ctx, 1);
    tu_expect_error(harness_declare(h, ctx, 3, H, 0, "a_composite_of_31_characters_xx"),
                    MPCL_ERR_INVALID_ARG, "too long");
    harness_destroy(h);
    mpcl_context_destroy(ctx);
}

/* A head count that does not divide the channels, and a flat input,
 * refused naming the layer. */
static void bad_blocks_refused(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    harness *h = harness_new(ctx, 1);
    tu_expect_error(harness_declare(h, ctx, 3, 5, 2, NULL), MPCL_ERR_INVALID_ARG,
                    "transformer_decoder_2.attn: its 12 channels do not split into num_heads=5");
    harness_destroy(h);
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(
        mpcl_model_spec_parse(NULL, "input_shape=12; transformer_decoder num_heads=3", &p));
    p.classes = 12;
    p.policy = MPCL_POLICY_FLOAT32;
    mpcl_model *m = NULL;
    tu_expect_error(mpcl_model_create(ctx, &p, &m), MPCL_ERR_INVALID_ARG,
                    "transformer_decoder_0 takes a sequence (time, channels) input; it is given "
                    "(12,)");
    mpcl_context_destroy(ctx);
}

/* The text form reads back to the same spec; the defaults are GPT-2's. */
static void text_form_round_trip(void **state) {
    (void)state;
    mpcl_layer_spec s, back;
    TU_ASSERT_OK(mpcl_layer_spec_parse(NULL, "transformer_decoder num_heads=4", &s));
    assert_int_equal(s.num_heads, 4);
    assert_int_equal(s.intermediate_dim, 0);
    assert_true(s.epsilon == 1e-5);
    assert_true(s.use_bias);
    TU_ASSERT_OK(mpcl_layer_spec_parse(
        NULL,
        "transformer_decoder num_heads=2 intermediate_dim=7 layer_norm_epsilon=0.25 use_bias=false",
        &s));
    char text[256];
    TU_ASSERT_OK(mpcl_layer_spec_format(NULL, &s, text, sizeof text));
    TU_ASSERT_OK(mpcl_layer_spec_parse(NULL, text, &back));
    assert_int_equal(back.num_heads, 2);
    assert_int_equal(back.intermediate_dim, 7);
    assert_true(back.epsilon == 0.25);
    assert_false(back.use_bias);
    tu_expect_error(mpcl_layer_spec_parse(NULL, "transformer_decoder intermediate_dim=7", &s),
                    MPCL_ERR_INVALID_ARG, "num_heads");
}

/* ---- in a model ---- */

/* token_pos_embedding (vocabulary V, T positions, c channels) ->
 * transformer_decoder (heads, intermediate) -> dense per position to V
 * logits. */
static mpcl_model_params block_model(size_t T, size_t V, size_t c, size_t heads,
                                     size_t intermediate, size_t max_batch, mpcl_policy policy) {
    char text[256];
    snprintf(text, sizeof text,
             "input_shape=%zu; token_pos_embedding vocabulary_size=%zu sequence_length=%zu "
             "embedding_dim=%zu; transformer_decoder num_heads=%zu intermediate_dim=%zu; dense "
             "units=%zu",
             T, V, T, c, heads, intermediate, V);
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(mpcl_model_spec_parse(NULL, text, &p));
    p.classes = V;
    p.max_batch = max_batch;
    p.policy = policy;
    return p;
}

/* Random ids in [0, V) into a B x T tensor. */
static mpcl_tensor *random_ids(mpcl_context *ctx, tu_rng *rng, size_t B, size_t T, size_t V) {
    int32_t ids[64];
    assert_true(B * T <= 64);
    for (size_t i = 0; i < B * T; i++) ids[i] = (int32_t)tu_uniform(rng, 0, (double)V - 1e-9);
    return tu_ids_tensor(ctx, B, T, ids);
}

/* Every parameter of m random: kernels and embeddings in +-1/sqrt(rows),
 * the rest (layer norms' too) in [-0.5, 0.5] plus 1 for a gamma. GPT-2's
 * start (kernels of std 0.02) would leave the attention branch's gradients
 * below the noise of f32 differences. */
static void randomize(mpcl_model *m, tu_rng *rng) {
    for (size_t i = 0; i < mpcl_model_param_count(m); i++) {
        const mpcl_param_info *r = mpcl_model_param(m, i);
        float *w = malloc(r->count * sizeof *w), limit = 1 / sqrtf((float)r->shape[0]);
        assert_non_null(w);
        bool gamma = strstr(r->name, ".gamma") != NULL;
        if (r->rank == 2)
            tu_fill_uniform(rng, w, r->count, -limit, limit);
        else
            tu_fill_uniform(rng, w, r->count, gamma ? 0.5f : -0.5f, gamma ? 1.5f : 0.5f);
        TU_ASSERT_OK(mpcl_model_write_param(m, i, MPCL_OPTIM_SLOT_MASTER, w, r->count));
        free(w);
    }
}

/* The root mean square of parameter i's master values. */
static double param_rms(mpcl_model *m, size_t i) {
    const mpcl_param_info *r = mpcl_model_param(m, i);
    float *w = malloc(r->count * sizeof *w);
    assert_non_null(w);
    TU_ASSERT_OK(mpcl_model_read_param(m, i, MPCL_OPTIM_SLOT_MASTER, w, r->count));
    double s = 0;
    for (size_t j = 0; j < r->count; j++) s += (double)w[j] * (double)w[j];
    free(w);
    return sqrt(s / (double)r->count);
}

/* Every parameter of the model (the embedding's through the block's input
 * gradient) against f32 central differences of the mean loss; the model's
 * rows are the block's under transformer_decoder_0, between the
 * embedding's and the dense's. A smaller block than above: each element
 * costs two forwards. */
static void model_gradients(void **state) {
    (void)state;
    enum { B = 2, T = 5, V = 6, CM = 4, HM = 2, IM = 6 };
    mpcl_context *ctx = tu_context();
    mpcl_model_params p = block_model(T, V, CM, HM, IM, B, MPCL_POLICY_FLOAT32);
    mpcl_model *m = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
    assert_int_equal(mpcl_model_param_count(m), 2 + PARAMS + 2);
    for (int i = 0; i < PARAMS; i++) {
        char want[96];
        snprintf(want, sizeof want, "transformer_decoder_0.%s", row_names[i]);
        assert_string_equal(mpcl_model_param(m, 2 + (size_t)i)->name, want);
    }
    /* GPT-2's start: the block's four kernels normal(0, 0.02); the dense
     * after it Glorot's (rms sqrt(2 / (4 + 6)) = 0.45). */
    for (size_t i = 0; i < mpcl_model_param_count(m); i++) {
        const mpcl_param_info *r = mpcl_model_param(m, i);
        if (r->rank != 2 || strncmp(r->name, "transformer_decoder_0.", 22) != 0) continue;
        double rms = param_rms(m, i);
        if (!(rms > 0.012 && rms < 0.03)) fail_msg("%s starts with rms %g", r->name, rms);
    }
    assert_true(param_rms(m, 2 + PARAMS) > 0.2);
    tu_rng rng = tu_rng_make(tu_seed("model_gradients"));
    randomize(m, &rng);
    mpcl_tensor *xy[2] = {random_ids(ctx, &rng, B, T, V), random_ids(ctx, &rng, B, T, V)};
    TU_ASSERT_OK(mpcl_model_forward(m, xy[0], xy[1]));
    TU_ASSERT_OK(mpcl_model_backward(m));
    size_t checked = tu_check_param_gradients(m, 5e-3, tu_batch_loss, xy, 3e-4, 2e-2, 2e-2);
    size_t block = 4 * CM + 4 * CM * CM + 4 * CM + 2 * CM * IM + IM + CM;
    assert_int_equal(checked, (V + T) * CM + block + CM * V + V);
    mpcl_tensor_destroy(xy[0]);
    mpcl_tensor_destroy(xy[1]);
    mpcl_model_destroy(m);
    mpcl_context_destroy(ctx);
}

/* The pattern 0 1 2 3 0 1 ... with each label the next token: 40 Adam
 * steps take the mean loss (ln 8 = 2.08 at the start) below half its
 * start, in float32 and mixed_bfloat16. Skipped on slow implementations
 * (Oclgrind), whose kernels the tests above already ran there. */
static void trains(void **state) {
    (void)state;
    enum { B = 4, T = 8, V = 8, STEPS = 40 };
    mpcl_context *ctx = tu_context();
    if (tu_slow_device(ctx)) {
        mpcl_context_destroy(ctx);
        skip();
    }
    int32_t ids[B * T], next[B * T];
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++) {
            ids[b * T + t] = (int32_t)((b + t) % 4);
            next[b * T + t] = (int32_t)((b + t + 1) % 4);
        }
    mpcl_tensor *x = tu_ids_tensor(ctx, B, T, ids), *y = tu_ids_tensor(ctx, B, T, next);
    static const mpcl_policy policies[] = {MPCL_POLICY_FLOAT32, MPCL_POLICY_MIXED_BFLOAT16};
    for (size_t i = 0; i < 2; i++) {
        if (!mpcl_context_plan(ctx, policies[i]).usable) continue;
        mpcl_model_params p = block_model(T, V, C, H, I, B, policies[i]);
        p.optim.lr = 1e-2f;
        mpcl_model *m = NULL;
        TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
        double before = tu_eval_loss(m, x, y, NULL);
        for (int s = 0; s < STEPS; s++) TU_ASSERT_OK(mpcl_model_train_step(m, x, y));
        double after = tu_eval_loss(m, x, y, NULL);
        printf("%s: loss %.4f -> %.4f\n", mpcl_policy_name(policies[i]), before, after);
        if (!(after < 0.5 * before))
            fail_msg("%s: loss %.4f -> %.4f in %d steps", mpcl_policy_name(policies[i]), before,
                     after, STEPS);
        mpcl_model_destroy(m);
    }
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_the_reference), cmocka_unit_test(row_names_fit_or_are_refused),
        cmocka_unit_test(bad_blocks_refused),    cmocka_unit_test(text_form_round_trip),
        cmocka_unit_test(model_gradients),       cmocka_unit_test(trains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
