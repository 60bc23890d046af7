/* The MLP and its training step. See model.h for the shape of a step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "mpcl/rng.h"
#include "mpcl/gemm.h"

typedef struct layer {
    size_t in, out;
    mpcl_activation act;
    mpcl_tensor *w;  /* [in, out] storage dtype: the working copy the GEMMs read */
    mpcl_tensor *b;  /* [1, out] f32: read directly by the bias+act kernel */
    mpcl_tensor *h;  /* [max_batch, out] storage: x W, then act(x W + b) in place */
    mpcl_tensor *z;  /* [max_batch, out] storage: x W + b, only when act' needs it */
    mpcl_tensor *d;  /* [max_batch, out] storage: gradient of the pre-activation */
    mpcl_tensor *dw; /* [in, out] storage */
    mpcl_tensor *db; /* [1, out] f32 */
    char name[2][32];
} layer;

struct mpcl_model {
    mpcl_context *ctx;
    mpcl_model_params params;
    mpcl_plan plan;
    mpcl_gemm_path gemm;
    layer layers[MPCL_MAX_HIDDEN + 1];
    size_t count;
    /* f32 storage: one optimizer over w0, b0, w1, b1, ... With f16 storage the
     * biases stay f32 (the bias kernel reads the f32 master), so they get an
     * optimizer of their own: two launches per step instead of one. */
    mpcl_optimizer *opt_w, *opt_b;
    mpcl_loss_scale *ls;
    mpcl_tensor *train_stats, *eval_stats;
    size_t last_batch;
};

mpcl_model_params mpcl_model_default_params(void) {
    mpcl_model_params p;
    memset(&p, 0, sizeof p);
    p.inputs = 784;
    p.hidden[0] = 128;
    p.hidden_count = 1;
    p.classes = 10;
    p.activation = MPCL_ACT_RELU;
    p.policy = MPCL_POLICY_AUTO;
    p.max_batch = 128;
    p.seed = 42;
    p.optim = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    p.loss_scale = mpcl_loss_scale_default_params();
    return p;
}

static mpcl_status check_params(mpcl_context *ctx, const mpcl_model_params *p) {
    if (p->inputs == 0 || p->classes < 2)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "model needs inputs >= 1 and classes >= 2 (got %zu and %zu)", p->inputs,
                          p->classes);
    if (p->hidden_count > MPCL_MAX_HIDDEN)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%zu hidden layers; at most %d",
                          p->hidden_count, MPCL_MAX_HIDDEN);
    for (size_t i = 0; i < p->hidden_count; i++)
        if (p->hidden[i] == 0)
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "hidden layer %zu has width 0", i);
    if (p->max_batch == 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "max_batch must be at least 1");
    if ((unsigned)p->activation >= MPCL_ACT_COUNT || (unsigned)p->policy >= MPCL_POLICY_COUNT)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown activation or policy");
    return MPCL_OK;
}

/* Glorot (Xavier) uniform: U(-limit, limit), limit = sqrt(6 / (in + out)),
 * from splitmix64 with 24-bit uniforms, in a fixed order, so that every
 * device and policy starts from the same f32 weights. */
static void glorot_uniform(uint64_t *rng, float *w, size_t in, size_t out) {
    double limit = sqrt(6.0 / (double)(in + out));
    for (size_t i = 0; i < in * out; i++) {
        double u = (double)(mpcl_rng_next(rng) >> 40) * 0x1p-24;
        w[i] = (float)((2.0 * u - 1.0) * limit);
    }
}

static mpcl_status create_layer(mpcl_model *m, layer *L, size_t index) {
    mpcl_context *ctx = m->ctx;
    mpcl_dtype s = m->plan.storage;
    size_t B = m->params.max_batch;
    mpcl_status st;
    snprintf(L->name[0], sizeof L->name[0], "dense_%zu.kernel", index);
    snprintf(L->name[1], sizeof L->name[1], "dense_%zu.bias", index);
    if ((st = mpcl_tensor_create(ctx, s, L->in, L->out, &L->w)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, L->out, &L->b)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, s, B, L->out, &L->h)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, s, B, L->out, &L->d)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, s, L->in, L->out, &L->dw)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, L->out, &L->db)) != MPCL_OK)
        return st;
    if (mpcl_activation_saved(L->act) == MPCL_ACT_SAVED_PREACT)
        return mpcl_tensor_create(ctx, s, B, L->out, &L->z);
    return MPCL_OK;
}

/* Parameter i in optimizer terms: which optimizer, and its index there. */
static void param_slot(const mpcl_model *m, size_t i, mpcl_optimizer **opt, size_t *k) {
    bool bias = i % 2 == 1;
    if (m->opt_b) {
        *opt = bias ? m->opt_b : m->opt_w;
        *k = i / 2;
    } else {
        *opt = m->opt_w;
        *k = i;
    }
}

static mpcl_status create_optimizers(mpcl_model *m) {
    mpcl_tensor *w[2 * (MPCL_MAX_HIDDEN + 1)], *b[MPCL_MAX_HIDDEN + 1];
    bool split = m->plan.storage != MPCL_DTYPE_F32;
    size_t nw = 0;
    for (size_t l = 0; l < m->count; l++) {
        w[nw++] = m->layers[l].w;
        if (split)
            b[l] = m->layers[l].b;
        else
            w[nw++] = m->layers[l].b;
    }
    mpcl_status st = mpcl_optimizer_create(m->ctx, &m->params.optim, w, nw, &m->opt_w);
    if (st == MPCL_OK && split)
        st = mpcl_optimizer_create(m->ctx, &m->params.optim, b, m->count, &m->opt_b);
    return st;
}

static mpcl_status init_weights(mpcl_model *m) {
    uint64_t rng = m->params.seed;
    mpcl_status st = MPCL_OK;
    for (size_t l = 0; l < m->count && st == MPCL_OK; l++) {
        layer *L = &m->layers[l];
        float *w = malloc(L->in * L->out * sizeof *w);
        if (!w) return MPCL_ERROR(m->ctx, MPCL_ERR_OUT_OF_MEMORY, "initial weights");
        glorot_uniform(&rng, w, L->in, L->out);
        st = mpcl_model_write_param(m, 2 * l, MPCL_OPTIM_SLOT_MASTER, w, L->in * L->out);
        free(w);
    }
    return st;
}

mpcl_status mpcl_model_create(mpcl_context *ctx, const mpcl_model_params *params,
                              mpcl_model **out) {
    *out = NULL;
    mpcl_status st = check_params(ctx, params);
    if (st != MPCL_OK) return st;
    mpcl_plan plan = mpcl_context_plan(ctx, params->policy);
    if (!plan.usable)
        return MPCL_ERROR(ctx, MPCL_ERR_UNSUPPORTED, "policy %s cannot run on %s: %s",
                          mpcl_policy_name(params->policy), mpcl_context_device(ctx)->name,
                          plan.reason);
    mpcl_model *m = calloc(1, sizeof *m);
    if (!m) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating a model");
    m->ctx = ctx;
    m->params = *params;
    m->plan = plan;
    m->gemm = plan.gemm;
    m->count = params->hidden_count + 1;
    size_t in = params->inputs;
    for (size_t l = 0; l < m->count; l++) {
        layer *L = &m->layers[l];
        bool last = l + 1 == m->count;
        L->in = in;
        L->out = last ? params->classes : params->hidden[l];
        L->act = last ? MPCL_ACT_IDENTITY : params->activation;
        if ((st = create_layer(m, L, l)) != MPCL_OK) goto fail;
        in = L->out;
    }
    if ((st = create_optimizers(m)) != MPCL_OK) goto fail;
    if (plan.loss_scaling &&
        (st = mpcl_loss_scale_create(ctx, &params->loss_scale, &m->ls)) != MPCL_OK)
        goto fail;
    if ((st = mpcl_xent_stats_create(ctx, &m->train_stats)) != MPCL_OK ||
        (st = mpcl_xent_stats_create(ctx, &m->eval_stats)) != MPCL_OK ||
        (st = init_weights(m)) != MPCL_OK)
        goto fail;
    *out = m;
    return MPCL_OK;
fail:
    mpcl_model_destroy(m);
    return st;
}

void mpcl_model_destroy(mpcl_model *m) {
    if (!m) return;
    for (size_t l = 0; l < m->count; l++) {
        layer *L = &m->layers[l];
        mpcl_tensor *all[] = {L->w, L->b, L->h, L->z, L->d, L->dw, L->db};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    }
    mpcl_optimizer_destroy(m->opt_w);
    mpcl_optimizer_destroy(m->opt_b);
    mpcl_loss_scale_destroy(m->ls);
    mpcl_tensor_destroy(m->train_stats);
    mpcl_tensor_destroy(m->eval_stats);
    free(m);
}

const mpcl_model_params *mpcl_model_params_of(const mpcl_model *m) {
    return &m->params;
}
const mpcl_plan *mpcl_model_plan(const mpcl_model *m) {
    return &m->plan;
}
size_t mpcl_model_layer_count(const mpcl_model *m) {
    return m->count;
}
mpcl_loss_scale *mpcl_model_loss_scale(const mpcl_model *m) {
    return m->ls;
}

static mpcl_status check_batch(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels) {
    size_t B = x->rows;
    if (B == 0 || B > m->params.max_batch || x->cols != m->params.inputs || labels->rows != B ||
        labels->cols != 1)
        return MPCL_ERROR(m->ctx, MPCL_ERR_SHAPE,
                          "batch x %zux%zu, labels %zux%zu; the model takes x [B, %zu] and "
                          "labels [B, 1] with 1 <= B <= %zu",
                          x->rows, x->cols, labels->rows, labels->cols, m->params.inputs,
                          m->params.max_batch);
    if (x->dtype != m->plan.storage || labels->dtype != MPCL_DTYPE_I32)
        return MPCL_ERROR(m->ctx, MPCL_ERR_DTYPE,
                          "batch x is %s and labels %s; this model's plan wants %s and i32",
                          mpcl_dtype_name(x->dtype), mpcl_dtype_name(labels->dtype),
                          mpcl_dtype_name(m->plan.storage));
    return MPCL_OK;
}

static mpcl_status forward(mpcl_model *m, const mpcl_tensor *x, bool training) {
    mpcl_status st = MPCL_OK;
    size_t B = x->rows;
    mpcl_tensor in = *x;
    for (size_t l = 0; l < m->count && st == MPCL_OK; l++) {
        layer *L = &m->layers[l];
        mpcl_tensor h = mpcl__tensor_rows(L->h, B);
        st = mpcl_gemm(m->ctx, m->gemm, false, false, 1.0f, &in, L->w, 0.0f, &h);
        if (st != MPCL_OK) break;
        if (training && L->z) {
            mpcl_tensor z = mpcl__tensor_rows(L->z, B);
            st = mpcl_bias_act_forward_z(m->ctx, &h, &z, &h, L->b, L->act);
        } else {
            st = mpcl_bias_act_forward(m->ctx, &h, &h, L->b, L->act);
        }
        in = h;
    }
    m->last_batch = B;
    return st;
}

static mpcl_status backward(mpcl_model *m, const mpcl_tensor *x) {
    mpcl_status st = MPCL_OK;
    size_t B = x->rows;
    for (size_t l = m->count; l-- > 0 && st == MPCL_OK;) {
        layer *L = &m->layers[l];
        mpcl_tensor d = mpcl__tensor_rows(L->d, B);
        mpcl_tensor in = l == 0 ? *x : mpcl__tensor_rows(m->layers[l - 1].h, B);
        st = mpcl_gemm(m->ctx, m->gemm, true, false, 1.0f, &in, &d, 0.0f, L->dw);
        if (st == MPCL_OK) st = mpcl_bias_grad(m->ctx, L->db, &d);
        if (st != MPCL_OK || l == 0) break;
        layer *P = &m->layers[l - 1];
        mpcl_tensor dp = mpcl__tensor_rows(P->d, B);
        st = mpcl_gemm(m->ctx, m->gemm, false, true, 1.0f, &d, L->w, 0.0f, &dp);
        if (st != MPCL_OK) break;
        mpcl_tensor saved = mpcl__tensor_rows(P->z ? P->z : P->h, B);
        st = mpcl_bias_act_backward(m->ctx, &dp, &dp, &saved, P->act);
    }
    return st;
}

static mpcl_status update(mpcl_model *m) {
    mpcl_tensor *gw[2 * (MPCL_MAX_HIDDEN + 1)], *gb[MPCL_MAX_HIDDEN + 1];
    mpcl_tensor *all[2 * (MPCL_MAX_HIDDEN + 1)];
    size_t nw = 0;
    for (size_t l = 0; l < m->count; l++) {
        gw[nw++] = m->layers[l].dw;
        if (m->opt_b)
            gb[l] = m->layers[l].db;
        else
            gw[nw++] = m->layers[l].db;
        all[2 * l] = m->layers[l].dw;
        all[2 * l + 1] = m->layers[l].db;
    }
    mpcl_status st = MPCL_OK;
    if (m->ls) st = mpcl_loss_scale_check(m->ctx, m->ls, all, 2 * m->count);
    if (st == MPCL_OK) st = mpcl_optimizer_step(m->ctx, m->opt_w, gw, nw, m->ls);
    if (st == MPCL_OK && m->opt_b) st = mpcl_optimizer_step(m->ctx, m->opt_b, gb, m->count, m->ls);
    /* After both optimizers: the update clears found_inf (loss_scale.h). */
    if (st == MPCL_OK && m->ls) st = mpcl_loss_scale_update(m->ctx, m->ls);
    return st;
}

mpcl_status mpcl_model_train_step(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels) {
    mpcl_status st = check_batch(m, x, labels);
    if (st != MPCL_OK) return st;
    layer *top = &m->layers[m->count - 1];
    mpcl_tensor logits = mpcl__tensor_rows(top->h, x->rows),
                dlogits = mpcl__tensor_rows(top->d, x->rows);
    if ((st = forward(m, x, true)) != MPCL_OK) return st;
    st = mpcl_softmax_xent_forward_backward(m->ctx, m->train_stats, &dlogits, &logits, labels,
                                            m->ls ? mpcl_loss_scale_tensor(m->ls) : NULL);
    if (st == MPCL_OK) st = backward(m, x);
    if (st == MPCL_OK) st = update(m);
    return st;
}

mpcl_status mpcl_model_eval_step(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels) {
    mpcl_status st = check_batch(m, x, labels);
    if (st != MPCL_OK) return st;
    if ((st = forward(m, x, false)) != MPCL_OK) return st;
    mpcl_tensor logits = mpcl__tensor_rows(m->layers[m->count - 1].h, x->rows);
    return mpcl_softmax_xent_forward(m->ctx, m->eval_stats, &logits, labels);
}

mpcl_status mpcl_model_read_train_stats(mpcl_model *m, mpcl_xent_stats *out, bool reset) {
    return mpcl_xent_stats_read(m->ctx, m->train_stats, out, reset);
}

mpcl_status mpcl_model_read_eval_stats(mpcl_model *m, mpcl_xent_stats *out, bool reset) {
    return mpcl_xent_stats_read(m->ctx, m->eval_stats, out, reset);
}

mpcl_status mpcl_model_read_logits(mpcl_model *m, float *dst, size_t count) {
    mpcl_tensor logits =
        mpcl__tensor_rows(m->layers[m->count - 1].h, m->last_batch ? m->last_batch : 1);
    return mpcl_tensor_download_f32(&logits, dst, count);
}

size_t mpcl_model_param_count(const mpcl_model *m) {
    return 2 * m->count;
}

const char *mpcl_model_param_name(const mpcl_model *m, size_t index) {
    return index < 2 * m->count ? m->layers[index / 2].name[index % 2] : NULL;
}

void mpcl_model_param_shape(const mpcl_model *m, size_t index, size_t *r, size_t *c) {
    const layer *L = &m->layers[index / 2];
    *r = index % 2 ? 1 : L->in;
    *c = L->out;
}

bool mpcl_model_has_slot(const mpcl_model *m, mpcl_optim_slot slot) {
    return mpcl_optimizer_has_slot(m->opt_w, slot);
}

static mpcl_status check_index(mpcl_model *m, size_t index) {
    if (index >= 2 * m->count)
        return MPCL_ERROR(m->ctx, MPCL_ERR_INVALID_ARG, "parameter %zu of %zu", index,
                          2 * m->count);
    return MPCL_OK;
}

mpcl_status mpcl_model_read_param(mpcl_model *m, size_t index, mpcl_optim_slot slot, float *dst,
                                  size_t count) {
    mpcl_status st = check_index(m, index);
    if (st != MPCL_OK) return st;
    mpcl_optimizer *opt;
    size_t k;
    param_slot(m, index, &opt, &k);
    return mpcl_optimizer_read(m->ctx, opt, slot, k, dst, count);
}

mpcl_status mpcl_model_write_param(mpcl_model *m, size_t index, mpcl_optim_slot slot,
                                   const float *src, size_t count) {
    mpcl_status st = check_index(m, index);
    if (st != MPCL_OK) return st;
    mpcl_optimizer *opt;
    size_t k;
    param_slot(m, index, &opt, &k);
    return mpcl_optimizer_write(m->ctx, opt, slot, k, src, count);
}

mpcl_status mpcl_model_read_step(mpcl_model *m, uint32_t *step) {
    return mpcl_optimizer_read_step(m->ctx, m->opt_w, step);
}

mpcl_status mpcl_model_write_step(mpcl_model *m, uint32_t step) {
    mpcl_status st = mpcl_optimizer_write_step(m->ctx, m->opt_w, step);
    if (st == MPCL_OK && m->opt_b) st = mpcl_optimizer_write_step(m->ctx, m->opt_b, step);
    return st;
}
