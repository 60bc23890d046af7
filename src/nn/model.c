/* The model: a list of layers over a parameter table and its arenas, and the
 * training step in three phases. See model.h for the shape of a step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"

typedef enum phase {
    PHASE_IDLE,     /* no forward since the last apply */
    PHASE_FORWARD,  /* forward done: backward may run */
    PHASE_BACKWARD, /* gradients in the arena: apply may run */
} phase;

struct mpcl_model {
    mpcl_context *ctx;
    mpcl_model_params params;
    mpcl_plan plan;
    mpcl__layer_env env;
    mpcl__layer layers[MPCL_MAX_LAYERS];
    size_t count;
    mpcl__param_table table;
    mpcl__arenas arenas;
    mpcl_optimizer *opt;
    mpcl_loss_scale *ls;
    mpcl_tensor *train_stats, *eval_stats;
    phase phase;
    mpcl_tensor x; /* the last forward's input: borrowed until backward */
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
    p.loss = MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    p.policy = MPCL_POLICY_AUTO;
    p.max_batch = 128;
    p.seed = 42;
    p.optim = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    p.loss_scaling = MPCL_LOSS_SCALING_PLAN;
    p.loss_scale = mpcl_loss_scale_default_params();
    return p;
}

static mpcl_layer_spec dense_spec(size_t units, mpcl_activation act) {
    mpcl_layer_spec s;
    memset(&s, 0, sizeof s);
    snprintf(s.kind, sizeof s.kind, "dense");
    s.units = units;
    s.activation = act;
    return s;
}

mpcl_status mpcl_model_params_layers(mpcl_context *ctx, const mpcl_model_params *p,
                                     mpcl_layer_spec out[MPCL_MAX_LAYERS], size_t *count) {
    *count = 0;
    if (p->layer_count > MPCL_MAX_LAYERS)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%zu layers; at most %d", p->layer_count,
                          MPCL_MAX_LAYERS);
    if (p->layer_count > 0) {
        for (size_t i = 0; i < p->layer_count; i++) {
            if (!memchr(p->layers[i].kind, 0, sizeof p->layers[i].kind) ||
                !mpcl__layer_kind_find(p->layers[i].kind))
                return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "layer %zu: unknown kind", i);
            out[i] = p->layers[i];
        }
        *count = p->layer_count;
        return MPCL_OK;
    }
    if (p->classes < 2)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "model needs classes >= 2 (got %zu)",
                          p->classes);
    if (p->hidden_count > MPCL_MAX_HIDDEN)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%zu hidden layers; at most %d",
                          p->hidden_count, MPCL_MAX_HIDDEN);
    for (size_t i = 0; i < p->hidden_count; i++) {
        if (p->hidden[i] == 0)
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "hidden layer %zu has width 0", i);
        out[i] = dense_spec(p->hidden[i], p->activation);
    }
    out[p->hidden_count] = dense_spec(p->classes, MPCL_ACT_IDENTITY);
    *count = p->hidden_count + 1;
    return MPCL_OK;
}

static mpcl_status check_params(mpcl_context *ctx, const mpcl_model_params *p) {
    if (p->inputs == 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "model needs inputs >= 1 (got 0)");
    if (p->max_batch == 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "max_batch must be at least 1");
    if ((unsigned)p->activation >= MPCL_ACT_COUNT || (unsigned)p->policy >= MPCL_POLICY_COUNT)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown activation or policy");
    if ((unsigned)p->loss_scaling > MPCL_LOSS_SCALING_OFF)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown loss scaling choice %d",
                          (int)p->loss_scaling);
    return mpcl_optim_params_check(ctx, &p->optim);
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

/* Kernels (rank 2) get Glorot-uniform weights in parameter order; everything
 * else keeps the arena's zeros. */
static mpcl_status init_weights(mpcl_model *m) {
    uint64_t rng = m->params.seed;
    mpcl_status st = MPCL_OK;
    for (size_t i = 0; i < m->table.count && st == MPCL_OK; i++) {
        const mpcl_param_info *r = &m->table.rows[i];
        if (r->rank != 2) continue;
        float *w = malloc(r->count * sizeof *w);
        if (!w) return MPCL_ERROR(m->ctx, MPCL_ERR_OUT_OF_MEMORY, "initial weights of %s", r->name);
        glorot_uniform(&rng, w, r->shape[0], r->shape[1]);
        st = mpcl_optimizer_write(m->ctx, m->opt, MPCL_OPTIM_SLOT_MASTER, r->offset, w, r->count);
        free(w);
    }
    return st;
}

/* Declares every layer: the table and the layers' shapes, no device work. */
static mpcl_status declare_layers(mpcl_model *m, const mpcl_layer_spec *specs) {
    size_t in = m->params.inputs;
    for (size_t l = 0; l < m->count; l++) {
        mpcl__layer *L = &m->layers[l];
        L->kind = mpcl__layer_kind_find(specs[l].kind);
        L->env = &m->env;
        L->spec = specs[l];
        L->inputs = in;
        /* Names count per kind, as Keras does: dense_0, dense_1, ... */
        size_t k = 0;
        for (size_t j = 0; j < l; j++) k += m->layers[j].kind == L->kind;
        L->index = k;
        mpcl_status st = L->kind->declare(L, &m->table);
        if (st != MPCL_OK) return st;
        in = L->outputs;
    }
    return MPCL_OK;
}

/* Everything the model will hold on the device, from the table and the
 * layers' own accounts, against the device's global memory: a model that
 * cannot fit is refused with the numbers before anything is allocated. */
static mpcl_status check_device_memory(mpcl_model *m) {
    const double mib = 1024.0 * 1024.0;
    size_t n = m->table.total, storage = mpcl_dtype_size(m->plan.storage);
    size_t state = mpcl_optim_has_slot(m->params.optim.kind, MPCL_OPTIM_SLOT_V) ? 2 : 1;
    /* master and state in f32, working copy and gradients in the storage dtype */
    double arenas = (double)n * (double)((1 + state) * sizeof(float) + 2 * storage);
    double activations = 0;
    for (size_t l = 0; l < m->count; l++)
        activations += m->layers[l].kind->activation_bytes(&m->layers[l], &m->env);
    uint64_t global = mpcl_context_device(m->ctx)->global_mem_bytes;
    if (global && arenas + activations > (double)global)
        return MPCL_ERROR(m->ctx, MPCL_ERR_OUT_OF_MEMORY,
                          "the model needs %.1f MiB on the device (parameters, gradients and "
                          "optimizer state %.1f MiB, activations for batches of %zu %.1f MiB); %s "
                          "has %.1f MiB",
                          (arenas + activations) / mib, arenas / mib, m->params.max_batch,
                          activations / mib, mpcl_context_device(m->ctx)->name,
                          (double)global / mib);
    return MPCL_OK;
}

static mpcl_status create_arenas(mpcl_model *m) {
    mpcl_context *ctx = m->ctx;
    size_t n = m->table.total;
    mpcl_status st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, n, &m->arenas.master);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, m->plan.storage, 1, n, &m->arenas.working);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, m->plan.storage, 1, n, &m->arenas.grads);
    return st;
}

static bool wants_loss_scaling(const mpcl_model_params *p, const mpcl_plan *plan) {
    switch (p->loss_scaling) {
    case MPCL_LOSS_SCALING_ON: return true;
    case MPCL_LOSS_SCALING_OFF: return false;
    default: return plan->loss_scaling;
    }
}

mpcl_status mpcl_model_create(mpcl_context *ctx, const mpcl_model_params *params,
                              mpcl_model **out) {
    *out = NULL;
    mpcl_status st = check_params(ctx, params);
    if (st != MPCL_OK) return st;
    mpcl_plan plan;
    if (params->policy == MPCL_POLICY_AUTO) {
        if ((st = mpcl_model_auto_plan(ctx, params, &plan)) != MPCL_OK) return st;
    } else {
        plan = mpcl_context_plan(ctx, params->policy);
    }
    return mpcl__model_create_plan(ctx, params, &plan, out);
}

mpcl_status mpcl__model_create_plan(mpcl_context *ctx, const mpcl_model_params *params,
                                    const mpcl_plan *planp, mpcl_model **out) {
    *out = NULL;
    mpcl_layer_spec specs[MPCL_MAX_LAYERS];
    size_t count;
    mpcl_status st = check_params(ctx, params);
    if (st == MPCL_OK) st = mpcl_model_params_layers(ctx, params, specs, &count);
    if (st != MPCL_OK) return st;
    const mpcl_plan plan = *planp;
    if (!plan.usable)
        return MPCL_ERROR(ctx, MPCL_ERR_UNSUPPORTED, "policy %s cannot run on %s: %s",
                          mpcl_policy_name(params->policy), mpcl_context_device(ctx)->name,
                          plan.reason);
    mpcl_model *m = calloc(1, sizeof *m);
    if (!m) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating a model");
    m->ctx = ctx;
    m->params = *params;
    m->plan = plan;
    m->env = (mpcl__layer_env){ctx, plan.storage, plan.gemm, params->max_batch};
    m->count = count;
    mpcl__params_init(&m->table, mpcl__sub_buffer_align(ctx));
    if ((st = declare_layers(m, specs)) != MPCL_OK || (st = check_device_memory(m)) != MPCL_OK ||
        (st = create_arenas(m)) != MPCL_OK)
        goto fail;
    for (size_t l = 0; l < m->count; l++)
        if ((st = m->layers[l].kind->create(&m->layers[l], &m->table, &m->arenas)) != MPCL_OK)
            goto fail;
    st = mpcl_optimizer_create(ctx, &params->optim, m->arenas.master, m->arenas.working, &m->opt);
    if (st != MPCL_OK) goto fail;
    if (wants_loss_scaling(params, &plan) &&
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
        mpcl__layer *L = &m->layers[l];
        if (L->kind) L->kind->destroy(L);
        mpcl_tensor_destroy(L->output);
        mpcl_tensor_destroy(L->d_output);
    }
    mpcl_optimizer_destroy(m->opt);
    mpcl_loss_scale_destroy(m->ls);
    mpcl_tensor_destroy(m->arenas.master);
    mpcl_tensor_destroy(m->arenas.working);
    mpcl_tensor_destroy(m->arenas.grads);
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
const mpcl_layer_spec *mpcl_model_layer(const mpcl_model *m, size_t index) {
    return index < m->count ? &m->layers[index].spec : NULL;
}
mpcl_loss_scale *mpcl_model_loss_scale(const mpcl_model *m) {
    return m->ls;
}
mpcl_context *mpcl_model_context(const mpcl_model *m) {
    return m->ctx;
}
mpcl_tensor *mpcl_model_grad_arena(mpcl_model *m) {
    return m->arenas.grads;
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

/* Every layer's forward; the logits are the last layer's output. */
static mpcl_status forward_layers(mpcl_model *m, const mpcl_tensor *x, bool training) {
    mpcl_tensor in = *x;
    for (size_t l = 0; l < m->count; l++) {
        mpcl__layer *L = &m->layers[l];
        mpcl_status st = L->kind->forward(L, &in, training);
        if (st != MPCL_OK) return st;
        in = mpcl__tensor_rows(L->output, x->rows);
    }
    m->last_batch = x->rows;
    return MPCL_OK;
}

mpcl_status mpcl_model_forward(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels) {
    return mpcl_model_forward_slice(m, x, labels, x ? x->rows : 0);
}

mpcl_status mpcl_model_forward_slice(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels,
                                     size_t batch_rows) {
    mpcl_status st = check_batch(m, x, labels);
    if (st != MPCL_OK) return st;
    m->phase = PHASE_IDLE;
    mpcl__layer *top = &m->layers[m->count - 1];
    mpcl_tensor logits = mpcl__tensor_rows(top->output, x->rows),
                dlogits = mpcl__tensor_rows(top->d_output, x->rows);
    if ((st = forward_layers(m, x, true)) != MPCL_OK) return st;
    st = mpcl__softmax_xent_forward_backward_rows(m->ctx, m->train_stats, &dlogits, &logits, labels,
                                                  m->ls ? mpcl_loss_scale_tensor(m->ls) : NULL,
                                                  batch_rows);
    if (st != MPCL_OK) return st;
    m->x = *x;
    m->phase = PHASE_FORWARD;
    return MPCL_OK;
}

mpcl_status mpcl_model_backward(mpcl_model *m) {
    if (m->phase != PHASE_FORWARD)
        return MPCL_ERROR(m->ctx, MPCL_ERR_INVALID_ARG,
                          "model backward without a training forward before it");
    size_t B = m->x.rows;
    for (size_t l = m->count; l-- > 0;) {
        mpcl__layer *L = &m->layers[l];
        mpcl_tensor in = l == 0 ? m->x : mpcl__tensor_rows(m->layers[l - 1].output, B);
        mpcl_tensor d_in = l == 0 ? in : mpcl__tensor_rows(m->layers[l - 1].d_output, B);
        mpcl_status st = L->kind->backward(L, &in, l == 0 ? NULL : &d_in);
        if (st != MPCL_OK) {
            m->phase = PHASE_IDLE;
            return st;
        }
    }
    m->phase = PHASE_BACKWARD;
    return MPCL_OK;
}

mpcl_status mpcl_model_apply(mpcl_model *m) {
    if (m->phase != PHASE_BACKWARD)
        return MPCL_ERROR(m->ctx, MPCL_ERR_INVALID_ARG, "model apply without a backward before it");
    m->phase = PHASE_IDLE;
    mpcl_status st = MPCL_OK;
    if (m->ls) st = mpcl_loss_scale_check(m->ctx, m->ls, &m->arenas.grads, 1);
    /* The loss-scale update runs in the optimizer's last launch, after the
     * update has read found_inf (loss_scale.h). */
    if (st == MPCL_OK) st = mpcl_optimizer_step_scaled(m->ctx, m->opt, m->arenas.grads, m->ls);
    return st;
}

mpcl_status mpcl_model_train_step(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels) {
    mpcl_status st = mpcl_model_forward(m, x, labels);
    if (st == MPCL_OK) st = mpcl_model_backward(m);
    if (st == MPCL_OK) st = mpcl_model_apply(m);
    return st;
}

mpcl_status mpcl_model_eval_step(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels) {
    mpcl_status st = check_batch(m, x, labels);
    if (st != MPCL_OK) return st;
    /* The activations are overwritten: a pending backward would read them. */
    m->phase = PHASE_IDLE;
    if ((st = forward_layers(m, x, false)) != MPCL_OK) return st;
    mpcl_tensor logits = mpcl__tensor_rows(m->layers[m->count - 1].output, x->rows);
    return mpcl_softmax_xent_forward(m->ctx, m->eval_stats, &logits, labels);
}

mpcl_status mpcl_model_read_train_stats(mpcl_model *m, mpcl_xent_stats *out, bool reset) {
    return mpcl_xent_stats_read(m->ctx, m->train_stats, out, reset);
}

mpcl_status mpcl_model_read_eval_stats(mpcl_model *m, mpcl_xent_stats *out, bool reset) {
    return mpcl_xent_stats_read(m->ctx, m->eval_stats, out, reset);
}

mpcl_status mpcl_model_read_grad_norm(mpcl_model *m, float *norm) {
    return mpcl_optimizer_read_grad_norm(m->ctx, m->opt, norm);
}

mpcl_status mpcl_model_read_logits(mpcl_model *m, float *dst, size_t count) {
    mpcl_tensor logits =
        mpcl__tensor_rows(m->layers[m->count - 1].output, m->last_batch ? m->last_batch : 1);
    return mpcl_tensor_download_f32(&logits, dst, count);
}

size_t mpcl_model_param_count(const mpcl_model *m) {
    return m->table.count;
}

const mpcl_param_info *mpcl_model_param(const mpcl_model *m, size_t index) {
    return index < m->table.count ? &m->table.rows[index] : NULL;
}

const char *mpcl_model_param_name(const mpcl_model *m, size_t index) {
    return index < m->table.count ? m->table.rows[index].name : NULL;
}

size_t mpcl_model_arena_elements(const mpcl_model *m) {
    return m->table.total;
}

size_t mpcl_model_arena_align(const mpcl_model *m) {
    return m->table.align;
}

bool mpcl_model_has_slot(const mpcl_model *m, mpcl_optim_slot slot) {
    return mpcl_optim_has_slot(m->params.optim.kind, slot);
}

static mpcl_status param_range(mpcl_model *m, size_t index, size_t count, size_t *offset) {
    if (index >= m->table.count)
        return MPCL_ERROR(m->ctx, MPCL_ERR_INVALID_ARG, "parameter %zu of %zu", index,
                          m->table.count);
    const mpcl_param_info *r = &m->table.rows[index];
    if (count != r->count)
        return MPCL_ERROR(m->ctx, MPCL_ERR_SHAPE, "%zu elements for parameter %s of %zu", count,
                          r->name, r->count);
    *offset = r->offset;
    return MPCL_OK;
}

mpcl_status mpcl_model_read_param(mpcl_model *m, size_t index, mpcl_optim_slot slot, float *dst,
                                  size_t count) {
    size_t offset = 0;
    mpcl_status st = param_range(m, index, count, &offset);
    if (st != MPCL_OK) return st;
    return mpcl_optimizer_read(m->ctx, m->opt, slot, offset, dst, count);
}

mpcl_status mpcl_model_write_param(mpcl_model *m, size_t index, mpcl_optim_slot slot,
                                   const float *src, size_t count) {
    size_t offset = 0;
    mpcl_status st = param_range(m, index, count, &offset);
    if (st != MPCL_OK) return st;
    return mpcl_optimizer_write(m->ctx, m->opt, slot, offset, src, count);
}

mpcl_status mpcl_model_read_step(mpcl_model *m, uint32_t *step) {
    return mpcl_optimizer_read_step(m->ctx, m->opt, step);
}

mpcl_status mpcl_model_write_step(mpcl_model *m, uint32_t step) {
    return mpcl_optimizer_write_step(m->ctx, m->opt, step);
}
