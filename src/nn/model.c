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
    mpcl__tables tables;
    mpcl__arenas arenas;
    mpcl_optimizer *opt;
    mpcl_loss_scale *ls;
    mpcl_tensor *train_stats, *eval_stats;
    phase phase;
    mpcl_tensor x;      /* the last forward's input: borrowed until backward */
    int top;            /* the layer whose output is the model's: the last that computes */
    mpcl_dtype x_dtype; /* int32 token ids when the first layer takes them, else storage */
    size_t positions;   /* labels per sample: T for a (T, classes) output, else 1 */
    size_t last_batch;
    /* The last forward computed the top layer's output: not so where the top
     * layer fused the loss (its output, if any, is an older prediction's). */
    bool logits_kept;
    /* Gradient accumulation (mpcl_model_stash_grads): the f32 sum of the
     * micro-batches stashed since the last apply, made on first use. */
    mpcl_tensor *grad_stash;
    bool stashed;
    /* The gradient arena in the compressed all-reduce's dtype where that is
     * not the storage dtype (mpcl__model_grad_wire), made on first use. */
    mpcl_tensor *grad_wire;
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
    p.lr_schedule = mpcl_lr_schedule_default();
    p.loss_scaling = MPCL_LOSS_SCALING_PLAN;
    p.loss_scale = mpcl_loss_scale_default_params();
    return p;
}

static mpcl_status dense_spec(mpcl_context *ctx, size_t units, mpcl_activation act,
                              mpcl_layer_spec *out) {
    mpcl_status st = mpcl_layer_spec_init(ctx, "dense", out);
    out->units = units;
    out->activation = act;
    return st;
}

mpcl_status mpcl_model_params_layers(mpcl_context *ctx, const mpcl_model_params *p,
                                     mpcl_layer_spec out[MPCL_MAX_LAYERS], size_t *count) {
    *count = 0;
    if (p->layer_count > MPCL_MAX_LAYERS)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%zu layers; at most %d", p->layer_count,
                          MPCL_MAX_LAYERS);
    if (p->layer_count > 0) {
        for (size_t i = 0; i < p->layer_count; i++) {
            if (mpcl_layer_spec_check(ctx, &p->layers[i]) != MPCL_OK) {
                char why[256];
                snprintf(why, sizeof why, "%s", mpcl_errmsg());
                return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "layer %zu: %s", i, why);
            }
            out[i] = p->layers[i];
            const mpcl__layer_kind *k = mpcl__spec_kind(&out[i]);
            if (k->resolve) k->resolve(&out[i]);
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
    if ((unsigned)p->activation >= MPCL_ACT_COUNT)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown activation %d", (int)p->activation);
    mpcl_status st = MPCL_OK;
    for (size_t i = 0; i < p->hidden_count && st == MPCL_OK; i++) {
        if (p->hidden[i] == 0)
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "hidden layer %zu has width 0", i);
        st = dense_spec(ctx, p->hidden[i], p->activation, &out[i]);
    }
    if (st == MPCL_OK) st = dense_spec(ctx, p->classes, MPCL_ACT_IDENTITY, &out[p->hidden_count]);
    if (st == MPCL_OK) *count = p->hidden_count + 1;
    return st;
}

mpcl_activation mpcl_model_output_activation(const mpcl_model_params *p) {
    mpcl_activation fused = mpcl_loss_output_activation(p->loss);
    /* An MLP of widths ends linear. */
    return p->layer_count > 0 && p->layer_count <= MPCL_MAX_LAYERS &&
                   p->layers[p->layer_count - 1].activation == fused
               ? fused
               : MPCL_ACT_IDENTITY;
}

mpcl_status mpcl__model_device_layers(mpcl_context *ctx, const mpcl_model_params *p,
                                      mpcl_layer_spec out[MPCL_MAX_LAYERS], size_t *count) {
    mpcl_status st = mpcl_model_params_layers(ctx, p, out, count);
    if (st != MPCL_OK) return st;
    for (size_t i = 0; i < *count; i++) {
        if (out[i].activation != MPCL_ACT_SOFTMAX) continue;
        if (i + 1 < *count)
            st = MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                            "layer %zu (%s): softmax is an output activation: only the last "
                            "layer may take it",
                            i, out[i].kind);
        else if (mpcl_loss_output_activation(p->loss) != MPCL_ACT_SOFTMAX)
            st = MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                            "loss %s does not read a softmax output; leave the last layer linear "
                            "(softmax goes with sparse_categorical_crossentropy)",
                            mpcl_loss_name(p->loss));
        if (st != MPCL_OK) {
            *count = 0;
            return st;
        }
    }
    if (mpcl_model_output_activation(p) != MPCL_ACT_IDENTITY)
        out[*count - 1].activation = MPCL_ACT_IDENTITY;
    return MPCL_OK;
}

void mpcl_model_params_input_shape(const mpcl_model_params *p, size_t shape[MPCL_MAX_INPUT_RANK],
                                   size_t *rank) {
    memset(shape, 0, MPCL_MAX_INPUT_RANK * sizeof shape[0]);
    if (p->input_rank == 0 || p->input_rank > MPCL_MAX_INPUT_RANK) {
        shape[0] = p->inputs;
        *rank = 1;
        return;
    }
    for (size_t d = 0; d < p->input_rank; d++) shape[d] = p->input_shape[d];
    *rank = p->input_rank;
}

/* inputs and input_shape agree: input_shape's product, when it has one. */
static mpcl_status check_input_shape(mpcl_context *ctx, const mpcl_model_params *p) {
    if (p->input_rank > MPCL_MAX_INPUT_RANK)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "input rank %zu; at most %d", p->input_rank,
                          MPCL_MAX_INPUT_RANK);
    if (p->input_rank == 0) return MPCL_OK;
    size_t product = 1;
    for (size_t d = 0; d < p->input_rank; d++) {
        if (p->input_shape[d] == 0 || product > SIZE_MAX / p->input_shape[d])
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "input shape dimension %zu is %zu", d,
                              p->input_shape[d]);
        product *= p->input_shape[d];
    }
    if (p->inputs != 0 && p->inputs != product) {
        char shape[64];
        mpcl__shape_str(shape, sizeof shape, p->input_rank, p->input_shape);
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "input shape %s has %zu features; the data have %zu", shape, product,
                          p->inputs);
    }
    return MPCL_OK;
}

static mpcl_status check_params(mpcl_context *ctx, const mpcl_model_params *p) {
    if (p->inputs == 0 && p->input_rank == 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "model needs inputs >= 1 (got 0)");
    mpcl_status st = check_input_shape(ctx, p);
    if (st != MPCL_OK) return st;
    if (p->max_batch == 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "max_batch must be at least 1");
    if ((unsigned)p->policy >= MPCL_POLICY_COUNT)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown policy %d", (int)p->policy);
    if ((unsigned)p->loss >= MPCL_LOSS_COUNT)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown loss %d", (int)p->loss);
    if ((unsigned)p->loss_scaling > MPCL_LOSS_SCALING_OFF)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown loss scaling choice %d",
                          (int)p->loss_scaling);
    st = mpcl_optim_params_check(ctx, &p->optim);
    return st == MPCL_OK ? mpcl_lr_schedule_check(ctx, &p->lr_schedule) : st;
}

/* Glorot (Xavier) uniform: U(-limit, limit), limit = sqrt(6 / (fan_in +
 * fan_out)), from splitmix64 with 24-bit uniforms, in a fixed order, so
 * that every device and policy starts from the same f32 weights. Keras'
 * fans: a kernel [in, out] has in and out; a convolution's [kh, kw, in,
 * out] has kh kw in and kh kw out. */
static void glorot_uniform(uint64_t *rng, float *w, const mpcl_param_info *r) {
    size_t field = 1;
    for (size_t d = 0; d + 2 < r->rank; d++) field *= r->shape[d];
    double fan_in = (double)(field * r->shape[r->rank - 2]);
    double fan_out = (double)(field * r->shape[r->rank - 1]);
    double limit = sqrt(6.0 / (fan_in + fan_out));
    for (size_t i = 0; i < r->count; i++) {
        double u = (double)(mpcl_rng_next(rng) >> 40) * 0x1p-24;
        w[i] = (float)((2.0 * u - 1.0) * limit);
    }
}

/* Normal, mean 0 and std 0.02 (GPT-2's embeddings): Box-Muller's cosine
 * from two 53-bit uniforms of the generator, u1 in (0, 1]. */
static void normal_002(uint64_t *rng, float *w, size_t n) {
    const double two_pi = 6.283185307179586;
    for (size_t i = 0; i < n; i++) {
        double u1 = (double)((mpcl_rng_next(rng) >> 11) + 1) * 0x1p-53;
        double u2 = (double)(mpcl_rng_next(rng) >> 11) * 0x1p-53;
        w[i] = (float)(0.02 * sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
    }
}

/* A row's initial values by its init (not zeros); Glorot rows of rank 1
 * start at ones. */
static void init_values(uint64_t *rng, float *w, const mpcl_param_info *r, mpcl__param_init init) {
    if (init == MPCL__INIT_GLOROT && r->rank >= 2)
        glorot_uniform(rng, w, r);
    else if (init == MPCL__INIT_NORMAL_002)
        normal_002(rng, w, r->count);
    else
        for (size_t j = 0; j < r->count; j++) w[j] = 1.0f;
}

/* The initial values of a table's rows, each in turn, written by `write`:
 * random rows in row order (one generator for all), then zeros or ones. A
 * new arena is zero-filled, so zeros cost nothing. */
static mpcl_status init_rows(mpcl_model *m, const mpcl__param_table *t, uint64_t *rng,
                             bool buffers) {
    mpcl_status st = MPCL_OK;
    for (size_t i = 0; i < t->count && st == MPCL_OK; i++) {
        const mpcl_param_info *r = &t->rows[i];
        if (t->init[i] == MPCL__INIT_ZEROS) continue;
        float *w = malloc(r->count * sizeof *w);
        if (!w) return MPCL_ERROR(m->ctx, MPCL_ERR_OUT_OF_MEMORY, "initial values of %s", r->name);
        init_values(rng, w, r, t->init[i]);
        st = buffers ? mpcl_model_write_buffer(m, i, w, r->count)
                     : mpcl_optimizer_write(m->ctx, m->opt, MPCL_OPTIM_SLOT_MASTER, r->offset, w,
                                            r->count);
        free(w);
    }
    return st;
}

static mpcl_status init_weights(mpcl_model *m) {
    uint64_t rng = m->params.seed;
    mpcl_status st = init_rows(m, &m->tables.params, &rng, false);
    if (st == MPCL_OK) st = init_rows(m, &m->tables.buffers, &rng, true);
    return st;
}

/* Whether a kind takes an input of that rank. */
static bool takes_rank(const mpcl__layer_kind *k, size_t rank) {
    return !k->input_rank || k->input_rank == rank || (k->per_position && rank == 2);
}

/* A kind that takes token ids is the model's first layer: the model's x is
 * its ids. */
static mpcl_status check_token_layer(mpcl_context *ctx, const mpcl__layer *layers, size_t l) {
    if (!layers[l].kind->takes_tokens || l == 0) return MPCL_OK;
    char name[MPCL__LAYER_NAME_MAX], before[MPCL__LAYER_NAME_MAX];
    mpcl__layer_name(name, sizeof name, &layers[l]);
    mpcl__layer_name(before, sizeof before, &layers[l - 1]);
    return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                      "%s takes token ids: only a model's first layer may; it is layer %zu, "
                      "after %s",
                      name, l, before);
}

/* The top layer's output is (classes,), or with a sparse loss (positions,
 * classes): a label per position. */
static bool output_fits(const mpcl_model_params *p, const mpcl__layer *last) {
    size_t classes = last->out_shape[last->out_rank - 1];
    if (last->out_rank == 2 && mpcl_loss_sparse_targets(p->loss))
        return !p->classes || classes == p->classes;
    return last->out_rank == 1 && (!p->classes || last->outputs == p->classes);
}

/* Declares every layer: the tables and the layers' shapes, no device
 * work. Each layer's input is the previous one's output; a kind that wants
 * another rank is refused naming both layers and their shapes. */
mpcl_status mpcl__declare_layers(mpcl_context *ctx, const mpcl_model_params *p,
                                 const mpcl_layer_spec *specs, size_t count,
                                 const mpcl__layer_env *env, mpcl__layer *layers, mpcl__tables *t) {
    size_t rank, shape[MPCL_MAX_INPUT_RANK];
    mpcl_model_params_input_shape(p, shape, &rank);
    for (size_t l = 0; l < count; l++) {
        mpcl__layer *L = &layers[l];
        /* Everything else zero: a model's layer has no composite's name and
         * starts its kernels the default way. */
        *L = (mpcl__layer){.kind = mpcl__spec_kind(&specs[l]), .env = env, .spec = specs[l]};
        L->in_rank = rank;
        L->inputs = 1;
        for (size_t d = 0; d < rank; d++) L->inputs *= (L->in_shape[d] = shape[d]);
        /* Names count per kind, as Keras does: dense_0, dense_1, ... */
        size_t k = 0;
        for (size_t j = 0; j < l; j++) k += layers[j].kind == L->kind;
        L->index = k;
        mpcl_status st = check_token_layer(ctx, layers, l);
        if (st != MPCL_OK) return st;
        if (!takes_rank(L->kind, rank)) {
            char name[MPCL__LAYER_NAME_MAX], have[64], before[64] = "the model's input";
            mpcl__layer_name(name, sizeof name, L);
            mpcl__shape_str(have, sizeof have, rank, shape);
            if (l > 0) mpcl__layer_name(before, sizeof before, &layers[l - 1]);
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s takes %s input; %s gives %s%s", name,
                              L->kind->input_rank == 1 ? "a flat (features,)"
                                                       : "an image (height, width, channels)",
                              before, have,
                              L->kind->input_rank == 1 ? ": put a flatten layer between them"
                                                       : ": give the input shape as (H, W, C)");
        }
        if ((st = L->kind->declare(L, t)) != MPCL_OK) return st;
        rank = L->out_rank;
        for (size_t d = 0; d < rank; d++) shape[d] = L->out_shape[d];
    }
    mpcl__layer *last = &layers[count - 1];
    if (p->layer_count > 0 && !output_fits(p, last)) {
        char name[MPCL__LAYER_NAME_MAX], have[64];
        mpcl__layer_name(name, sizeof name, last);
        mpcl__shape_str(have, sizeof have, last->out_rank, last->out_shape);
        bool sparse = mpcl_loss_sparse_targets(p->loss);
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "the last layer, %s, gives %s; the model's output is (%zu,)%s: one per "
                          "%s",
                          name, have, p->classes,
                          sparse ? ", or (positions, classes) per position" : "",
                          sparse ? "class" : "target column");
    }
    return MPCL_OK;
}

void mpcl__destroy_layers(mpcl__layer *layers, size_t count) {
    for (size_t l = 0; l < count; l++) {
        mpcl__layer *L = &layers[l];
        if (L->kind && L->kind->destroy) L->kind->destroy(L);
        if (L->kind && !L->kind->passthrough) {
            mpcl_tensor_destroy(L->output);
            mpcl_tensor_destroy(L->d_output);
        }
        L->output = L->d_output = NULL;
    }
}

/* Everything the model will hold on the device, from the table and the
 * layers' own accounts, against the device's global memory: a model that
 * cannot fit is refused with the numbers before anything is allocated. */
static mpcl_status check_device_memory(mpcl_model *m) {
    const double mib = 1024.0 * 1024.0;
    size_t n = m->tables.params.total, storage = mpcl_dtype_size(m->plan.storage);
    size_t state = mpcl_optim_has_slot(m->params.optim.kind, MPCL_OPTIM_SLOT_V) ? 2 : 1;
    /* master and state in f32, working copy and gradients in the storage dtype */
    double arenas = (double)n * (double)((1 + state) * sizeof(float) + 2 * storage) +
                    (double)m->tables.buffers.total * sizeof(float);
    double activations = 0;
    for (size_t l = 0; l < m->count; l++)
        if (m->layers[l].kind->activation_bytes)
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
    size_t n = m->tables.params.total, nb = m->tables.buffers.total;
    mpcl_status st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, n, &m->arenas.master);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, m->plan.storage, 1, n, &m->arenas.working);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, m->plan.storage, 1, n, &m->arenas.grads);
    if (st == MPCL_OK && nb)
        st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, nb, &m->arenas.buffers);
    return st;
}

/* decay_vectors false: weight_decay on the parameters of rank >= 2 only.
 * Rows start on a decay chunk (mpcl__params_init), so each chunk holds one
 * row's elements (and padding after its end): the chunk takes that row's
 * flag. */
static mpcl_status write_decay_flags(mpcl_model *m) {
    /* Every flag 1 is the optimizer's default; without decay they are moot. */
    if (m->params.optim.decay_vectors || m->params.optim.weight_decay == 0.0f) return MPCL_OK;
    const mpcl__param_table *t = &m->tables.params;
    size_t chunks = (t->total + MPCL_OPTIM_DECAY_CHUNK - 1) / MPCL_OPTIM_DECAY_CHUNK;
    uint8_t *flags = calloc(chunks, 1);
    if (!flags) return MPCL_ERROR(m->ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating decay flags");
    mpcl_status st = MPCL_OK;
    for (size_t i = 0; i < t->count && st == MPCL_OK; i++) {
        const mpcl_param_info *r = &t->rows[i];
        if (r->offset % MPCL_OPTIM_DECAY_CHUNK != 0)
            st = MPCL_ERROR(m->ctx, MPCL_ERR_INVALID_ARG,
                            "parameter %s starts at element %zu, inside a decay chunk of %d",
                            r->name, r->offset, MPCL_OPTIM_DECAY_CHUNK);
        else if (r->rank >= 2)
            memset(flags + r->offset / MPCL_OPTIM_DECAY_CHUNK, 1,
                   (r->count + MPCL_OPTIM_DECAY_CHUNK - 1) / MPCL_OPTIM_DECAY_CHUNK);
    }
    if (st == MPCL_OK) st = mpcl_optimizer_write_decay(m->ctx, m->opt, flags, chunks);
    free(flags);
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

/* Each layer that takes the epilogue of the layer right below it (a max
 * pooling after a convolution) gets it when its activation commutes with
 * max: Conv2D relu + MaxPooling2D 2x2 then adds the bias and applies relu
 * to a quarter of the elements, forward and backward (nn.h). The values
 * are the same; where two pixels of a window round to the same value
 * after the bias, the gradient may go to the other one. */
static void move_epilogues(mpcl_model *m) {
    for (size_t l = 1; l < m->count; l++) {
        mpcl__layer *below = &m->layers[l - 1], *L = &m->layers[l];
        if (!L->kind->takes_epilogue || !below->epilogue ||
            !mpcl__activation_pools_first(below->epilogue->act))
            continue;
        L->epilogue_below = below->epilogue;
        below->epilogue = NULL;
    }
}

mpcl_status mpcl__model_create_plan(mpcl_context *ctx, const mpcl_model_params *params,
                                    const mpcl_plan *planp, mpcl_model **out) {
    *out = NULL;
    mpcl_layer_spec specs[MPCL_MAX_LAYERS];
    size_t count;
    mpcl_status st = check_params(ctx, params);
    if (st == MPCL_OK) st = mpcl__model_device_layers(ctx, params, specs, &count);
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
    m->env = (mpcl__layer_env){ctx, plan.storage, plan.gemm, params->max_batch, params->seed, 0};
    m->count = count;
    mpcl__params_init(&m->tables.params, mpcl__sub_buffer_align(ctx));
    mpcl__params_init(&m->tables.buffers, mpcl__sub_buffer_align(ctx));
    if ((st = mpcl__declare_layers(ctx, params, specs, count, &m->env, m->layers, &m->tables)) !=
            MPCL_OK ||
        (st = check_device_memory(m)) != MPCL_OK || (st = create_arenas(m)) != MPCL_OK)
        goto fail;
    m->top = -1;
    for (size_t l = 0; l < m->count; l++) {
        mpcl__layer *L = &m->layers[l];
        if (L->kind->passthrough) continue;
        if ((st = L->kind->create(L, &m->tables, &m->arenas)) != MPCL_OK) goto fail;
        m->top = (int)l;
    }
    if (m->top < 0) {
        st = MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "the model has no layer that computes");
        goto fail;
    }
    move_epilogues(m);
    m->x_dtype = m->layers[0].kind->takes_tokens ? MPCL_DTYPE_I32 : plan.storage;
    const mpcl__layer *top = &m->layers[m->top];
    m->positions = top->out_rank == 2 ? top->out_shape[0] : 1;
    st = mpcl_optimizer_create(ctx, &params->optim, m->arenas.master, m->arenas.working, &m->opt);
    if (st == MPCL_OK) st = write_decay_flags(m);
    if (st != MPCL_OK) goto fail;
    if (wants_loss_scaling(params, &plan) &&
        (st = mpcl_loss_scale_create(ctx, &params->loss_scale, &m->ls)) != MPCL_OK)
        goto fail;
    if ((st = mpcl_loss_stats_create(ctx, &m->train_stats)) != MPCL_OK ||
        (st = mpcl_loss_stats_create(ctx, &m->eval_stats)) != MPCL_OK ||
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
    mpcl__destroy_layers(m->layers, m->count);
    mpcl_optimizer_destroy(m->opt);
    mpcl_loss_scale_destroy(m->ls);
    mpcl_tensor_destroy(m->arenas.master);
    mpcl_tensor_destroy(m->arenas.working);
    mpcl_tensor_destroy(m->arenas.grads);
    mpcl_tensor_destroy(m->arenas.buffers);
    mpcl_tensor_destroy(m->train_stats);
    mpcl_tensor_destroy(m->eval_stats);
    mpcl_tensor_destroy(m->grad_stash);
    mpcl_tensor_destroy(m->grad_wire);
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
mpcl_dtype mpcl_model_input_dtype(const mpcl_model *m) {
    return m->x_dtype;
}
size_t mpcl_model_positions(const mpcl_model *m) {
    return m->positions;
}

size_t mpcl_model_classes(const mpcl_model *m) {
    const mpcl__layer *top = &m->layers[m->top];
    return top->out_shape[top->out_rank - 1];
}

/* x is a batch this model takes: [B, inputs], 1 <= B <= max_batch, of the
 * input dtype. */
static mpcl_status check_x(mpcl_model *m, const mpcl_tensor *x) {
    if (x->rows == 0 || x->rows > m->params.max_batch || x->cols != m->params.inputs)
        return MPCL_ERROR(m->ctx, MPCL_ERR_SHAPE,
                          "batch x %zux%zu; the model takes x [B, %zu] with 1 <= B <= %zu", x->rows,
                          x->cols, m->params.inputs, m->params.max_batch);
    if (x->dtype != m->x_dtype)
        return MPCL_ERROR(m->ctx, MPCL_ERR_DTYPE, "batch x is %s; this model wants %s",
                          mpcl_dtype_name(x->dtype), mpcl_dtype_name(m->x_dtype));
    return MPCL_OK;
}

static mpcl_status check_batch(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *targets) {
    size_t B = x->rows;
    bool sparse = mpcl_loss_sparse_targets(m->params.loss);
    size_t tcols = sparse ? m->positions : m->layers[m->top].outputs;
    if (B == 0 || B > m->params.max_batch || x->cols != m->params.inputs || targets->rows != B ||
        targets->cols != tcols)
        return MPCL_ERROR(m->ctx, MPCL_ERR_SHAPE,
                          "batch x %zux%zu, %s %zux%zu; the model takes x [B, %zu] and %s "
                          "[B, %zu] with 1 <= B <= %zu",
                          x->rows, x->cols, sparse ? "labels" : "targets", targets->rows,
                          targets->cols, m->params.inputs, sparse ? "labels" : "targets", tcols,
                          m->params.max_batch);
    mpcl_dtype want = sparse ? MPCL_DTYPE_I32 : MPCL_DTYPE_F32;
    if (x->dtype != m->x_dtype || targets->dtype != want)
        return MPCL_ERROR(
            m->ctx, MPCL_ERR_DTYPE, "batch x is %s and %s %s; this model wants %s and %s",
            mpcl_dtype_name(x->dtype), sparse ? "labels" : "targets",
            mpcl_dtype_name(targets->dtype), mpcl_dtype_name(m->x_dtype), mpcl_dtype_name(want));
    return MPCL_OK;
}

/* Whether layer l runs in an inference (evaluation) forward. */
static bool runs_in_inference(const mpcl_model *m, size_t l) {
    const mpcl__layer_kind *k = m->layers[l].kind;
    return !k->passthrough && !(k->eval_identity && (int)l != m->top);
}

/* Every layer's forward; the logits are the last layer's output. */
/* Runs the layers below `end` on x; *top_in (when not NULL) receives what
 * layer `end` would take. */
static mpcl_status forward_below(mpcl_model *m, const mpcl_tensor *x, bool training, size_t end,
                                 mpcl_tensor *top_in) {
    mpcl_tensor in = *x;
    if (training) m->env.rng_counter++;
    for (size_t l = 0; l < end; l++) {
        mpcl__layer *L = &m->layers[l];
        if (L->kind->passthrough || (!training && !runs_in_inference(m, l))) continue;
        mpcl_status st = L->kind->forward(L, &in, training);
        if (st != MPCL_OK) return st;
        in = mpcl__tensor_rows(L->output, x->rows);
    }
    m->last_batch = x->rows;
    m->logits_kept = end > (size_t)m->top;
    if (top_in) *top_in = in;
    return MPCL_OK;
}

static mpcl_status forward_layers(mpcl_model *m, const mpcl_tensor *x, bool training) {
    return forward_below(m, x, training, m->count, NULL);
}

/* The input of layer l for a batch of B and, when l has a computing layer
 * below it, the gradient it writes there (*has_d_in); passthrough layers
 * hand tensors on unchanged. */
static mpcl_tensor layer_input(const mpcl_model *m, size_t l, size_t B, mpcl_tensor *d_in,
                               bool *has_d_in) {
    int below = (int)l - 1;
    while (below >= 0 && m->layers[below].kind->passthrough) below--;
    *has_d_in = below >= 0;
    if (below < 0) return m->x;
    *d_in = mpcl__tensor_rows(m->layers[below].d_output, B);
    return mpcl__tensor_rows(m->layers[below].output, B);
}

bool mpcl__model_can_step(const mpcl_model *m) {
    for (size_t l = 0; l < m->count; l++)
        if (runs_in_inference(m, l) && !m->layers[l].kind->forward_step) return false;
    return true;
}

mpcl_tensor mpcl__layer_step_row(const mpcl__layer *L) {
    mpcl_tensor first = mpcl__tensor_rows(L->output, 1);
    mpcl_tensor by_last = mpcl__tensor_by_last(&first, L->out_shape[L->out_rank - 1]);
    return mpcl__tensor_rows(&by_last, 1);
}

mpcl_status mpcl__model_forward_step(mpcl_model *m, const mpcl_tensor *token, size_t position) {
    if (!mpcl__model_can_step(m) || position >= m->positions)
        return MPCL_ERROR(m->ctx, MPCL_ERR_INVALID_ARG,
                          "a step at position %zu of a model of %zu positions%s", position,
                          m->positions, mpcl__model_can_step(m) ? "" : " whose layers cannot step");
    m->phase = PHASE_IDLE;
    mpcl_tensor in = *token;
    for (size_t l = 0; l < m->count; l++) {
        if (!runs_in_inference(m, l)) continue;
        mpcl__layer *L = &m->layers[l];
        TRY(L->kind->forward_step(L, &in, position));
        in = mpcl__layer_step_row(L);
    }
    return MPCL_OK;
}

mpcl_status mpcl__model_read_step_logits(mpcl_model *m, float *dst, size_t count) {
    mpcl_tensor row = mpcl__layer_step_row(&m->layers[m->top]);
    return mpcl_tensor_download_f32(&row, dst, count);
}

mpcl_status mpcl_model_forward(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels) {
    return mpcl_model_forward_slice(m, x, labels, x ? x->rows : 0);
}

/* The first B rows of a top-layer tensor (logits, their gradient) as the
 * loss sees them: one row per sample, or per position of a (T, classes)
 * output, B T rows of classes (contiguous, so a view). */
static mpcl_tensor loss_rows(const mpcl_model *m, const mpcl_tensor *t, size_t B) {
    mpcl_tensor rows = mpcl__tensor_rows(t, B);
    return mpcl__tensor_by_last(&rows, t->cols / m->positions);
}

/* The labels or targets [B, positions * cols] as the loss sees them: B
 * positions rows. */
static mpcl_tensor target_rows(const mpcl_model *m, const mpcl_tensor *t) {
    return mpcl__tensor_by_last(t, t->cols / m->positions);
}

mpcl_status mpcl_model_forward_slice(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels,
                                     size_t batch_rows) {
    mpcl_status st = check_batch(m, x, labels);
    if (st != MPCL_OK) return st;
    m->phase = PHASE_IDLE;
    mpcl__layer *top = &m->layers[m->top];
    size_t B = x->rows;
    /* The gradient is the mean over the global batch's positions. */
    mpcl_tensor y = target_rows(m, labels);
    /* The loss refuses a divisor below its rows (or past 32 bits). */
    size_t divisor = batch_rows <= SIZE_MAX / m->positions ? batch_rows * m->positions : 0;
    const mpcl_tensor *scale = m->ls ? mpcl_loss_scale_tensor(m->ls) : NULL;
    m->x = *x;
    if (top->fuses_loss) {
        /* The top layer's loss and its backward, chunk by chunk. */
        mpcl_tensor in, d_in = {0};
        bool has_d_in;
        if ((st = forward_below(m, x, true, (size_t)m->top, NULL)) != MPCL_OK) return st;
        in = layer_input(m, (size_t)m->top, B, &d_in, &has_d_in);
        mpcl__loss_job job = {m->params.loss, m->train_stats, &y, scale, divisor};
        st = top->kind->forward_loss(top, &in, &job, has_d_in ? &d_in : NULL);
    } else {
        mpcl_tensor logits = loss_rows(m, top->output, B), dlogits = loss_rows(m, top->d_output, B);
        if ((st = forward_layers(m, x, true)) != MPCL_OK) return st;
        st = mpcl__loss_forward_backward_rows(m->ctx, m->params.loss, m->train_stats, &dlogits,
                                              &logits, &y, scale, divisor);
    }
    if (st != MPCL_OK) return st;
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
        /* A top layer that fuses the loss ran its backward in the forward. */
        if (L->kind->passthrough || L->fuses_loss) continue;
        mpcl_tensor d_in = {0};
        bool has_d_in;
        mpcl_tensor in = layer_input(m, l, B, &d_in, &has_d_in);
        mpcl_status st = L->kind->backward(L, &in, has_d_in ? &d_in : NULL);
        if (st != MPCL_OK) {
            m->phase = PHASE_IDLE;
            return st;
        }
    }
    m->phase = PHASE_BACKWARD;
    return MPCL_OK;
}

/* `name` over the whole gradient arena: mpcl_grad_stash (stash = g, or
 * stash += g with `add`, in f32) or mpcl_grad_unstash (g += stash, rounded
 * once to the storage dtype; it takes no `add`). */
static mpcl_status grad_stash_launch(mpcl_model *m, const char *name, const cl_uint *add) {
    mpcl_tensor *g = m->arenas.grads;
    cl_uint n = (cl_uint)(g->rows * g->cols);
    cl_kernel k;
    mpcl_status st = mpcl__kernel(m->ctx, m->plan.storage, name, &k);
    if (st == MPCL_OK)
        st = mpcl__set_args(m->ctx, k, name, MPCL_ARG(m->grad_stash->mem), MPCL_ARG(g->mem),
                            MPCL_ARG(n), MPCL_ARGS_END);
    if (st == MPCL_OK && add) st = mpcl__set_arg(m->ctx, k, name, 3, sizeof *add, add);
    return st == MPCL_OK ? mpcl__launch_1d(m->ctx, k, name, n, 64) : st;
}

mpcl_status mpcl_model_stash_grads(mpcl_model *m) {
    if (m->phase != PHASE_BACKWARD)
        return MPCL_ERROR(m->ctx, MPCL_ERR_INVALID_ARG,
                          "model stash_grads without a backward before it");
    mpcl_tensor *g = m->arenas.grads;
    if (g->rows * g->cols > UINT32_MAX)
        return MPCL_ERROR(m->ctx, MPCL_ERR_SHAPE,
                          "gradient accumulation over %zu parameters: more than 2^32 - 1",
                          g->rows * g->cols);
    mpcl_status st = MPCL_OK;
    if (!m->grad_stash)
        st = mpcl_tensor_create(m->ctx, MPCL_DTYPE_F32, 1, g->rows * g->cols, &m->grad_stash);
    cl_uint add = m->stashed;
    if (st == MPCL_OK) st = grad_stash_launch(m, "mpcl_grad_stash", &add);
    if (st != MPCL_OK) return st;
    m->stashed = true;
    m->phase = PHASE_IDLE;
    return MPCL_OK;
}

mpcl_status mpcl__model_grad_wire(mpcl_model *m, mpcl_dtype wire, mpcl_tensor **out) {
    mpcl_tensor *g = m->arenas.grads;
    *out = g;
    if (g->dtype == wire) return MPCL_OK;
    if (m->grad_wire && m->grad_wire->dtype != wire) {
        mpcl_tensor_destroy(m->grad_wire);
        m->grad_wire = NULL;
    }
    if (!m->grad_wire) {
        mpcl_status st = mpcl_tensor_create(m->ctx, wire, g->rows, g->cols, &m->grad_wire);
        if (st != MPCL_OK) return st;
    }
    *out = m->grad_wire;
    return MPCL_OK;
}

mpcl_status mpcl_model_unstash_grads(mpcl_model *m) {
    if (m->phase != PHASE_BACKWARD)
        return MPCL_ERROR(m->ctx, MPCL_ERR_INVALID_ARG,
                          "model unstash_grads without a backward before it");
    if (!m->stashed) return MPCL_OK;
    m->stashed = false;
    return grad_stash_launch(m, "mpcl_grad_unstash", NULL);
}

mpcl_status mpcl_model_apply(mpcl_model *m) {
    if (m->phase != PHASE_BACKWARD)
        return MPCL_ERROR(m->ctx, MPCL_ERR_INVALID_ARG, "model apply without a backward before it");
    mpcl_status st = mpcl_model_unstash_grads(m);
    m->phase = PHASE_IDLE;
    if (st == MPCL_OK && m->ls) st = mpcl_loss_scale_check(m->ctx, m->ls, &m->arenas.grads, 1);
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
    mpcl__layer *top = &m->layers[m->top];
    mpcl_tensor y = target_rows(m, labels);
    if (top->fuses_loss) {
        mpcl_tensor in;
        if ((st = forward_below(m, x, false, (size_t)m->top, &in)) != MPCL_OK) return st;
        mpcl__loss_job job = {m->params.loss, m->eval_stats, &y, NULL, 0};
        return top->kind->forward_loss(top, &in, &job, NULL);
    }
    if ((st = forward_layers(m, x, false)) != MPCL_OK) return st;
    mpcl_tensor logits = loss_rows(m, top->output, x->rows);
    return mpcl_loss_forward(m->ctx, m->params.loss, m->eval_stats, &logits, &y);
}

mpcl_status mpcl_model_predict(mpcl_model *m, const mpcl_tensor *x) {
    mpcl_status st = check_x(m, x);
    if (st != MPCL_OK) return st;
    /* The activations are overwritten: a pending backward would read them. */
    m->phase = PHASE_IDLE;
    return forward_layers(m, x, false);
}

mpcl_status mpcl_model_read_train_stats(mpcl_model *m, mpcl_loss_stats *out, bool reset) {
    return mpcl_loss_stats_read(m->ctx, m->train_stats, out, reset);
}

mpcl_status mpcl_model_read_eval_stats(mpcl_model *m, mpcl_loss_stats *out, bool reset) {
    return mpcl_loss_stats_read(m->ctx, m->eval_stats, out, reset);
}

mpcl_status mpcl_model_read_grad_norm(mpcl_model *m, float *norm) {
    return mpcl_optimizer_read_grad_norm(m->ctx, m->opt, norm);
}

/* A top layer that fuses the loss makes its output only when a prediction
 * asks for it: until then there are no logits to read. */
static mpcl_status check_logits_kept(mpcl_model *m) {
    if (m->layers[m->top].output && (m->logits_kept || !m->last_batch)) return MPCL_OK;
    return MPCL_ERROR(m->ctx, MPCL_ERR_INVALID_ARG,
                      "no logits to read: the model computes its loss chunk by chunk without "
                      "keeping them (MPCL_LM_HEAD); run a prediction first");
}

mpcl_status mpcl_model_read_logits(mpcl_model *m, float *dst, size_t count) {
    TRY(check_logits_kept(m));
    mpcl_tensor logits =
        mpcl__tensor_rows(m->layers[m->top].output, m->last_batch ? m->last_batch : 1);
    return mpcl_tensor_download_f32(&logits, dst, count);
}

mpcl_status mpcl_model_read_position_logits(mpcl_model *m, size_t sample, size_t position,
                                            float *dst, size_t count) {
    TRY(check_logits_kept(m));
    size_t classes = mpcl_model_classes(m);
    if (sample >= (m->last_batch ? m->last_batch : 1) || position >= m->positions ||
        count != classes)
        return MPCL_ERROR(m->ctx, MPCL_ERR_SHAPE,
                          "logits of sample %zu, position %zu, %zu of them; the last step had "
                          "%zu samples of %zu positions of %zu logits",
                          sample, position, count, m->last_batch, m->positions, classes);
    const mpcl_tensor *out = m->layers[m->top].output;
    return mpcl__tensor_download_f32_at(out, sample * out->cols + position * classes, dst, count);
}

size_t mpcl_model_param_count(const mpcl_model *m) {
    return m->tables.params.count;
}

const mpcl_param_info *mpcl_model_param(const mpcl_model *m, size_t index) {
    return index < m->tables.params.count ? &m->tables.params.rows[index] : NULL;
}

const char *mpcl_model_param_name(const mpcl_model *m, size_t index) {
    return index < m->tables.params.count ? m->tables.params.rows[index].name : NULL;
}

size_t mpcl_model_arena_elements(const mpcl_model *m) {
    return m->tables.params.total;
}

size_t mpcl_model_arena_align(const mpcl_model *m) {
    return m->tables.params.align;
}

bool mpcl_model_has_slot(const mpcl_model *m, mpcl_optim_slot slot) {
    return mpcl_optim_has_slot(m->params.optim.kind, slot);
}

static mpcl_status row_range(mpcl_model *m, const mpcl__param_table *t, size_t index, size_t count,
                             size_t *offset) {
    if (index >= t->count)
        return MPCL_ERROR(m->ctx, MPCL_ERR_INVALID_ARG, "%s %zu of %zu",
                          t == &m->tables.params ? "parameter" : "buffer", index, t->count);
    const mpcl_param_info *r = &t->rows[index];
    if (count != r->count)
        return MPCL_ERROR(m->ctx, MPCL_ERR_SHAPE, "%zu elements for parameter %s of %zu", count,
                          r->name, r->count);
    *offset = r->offset;
    return MPCL_OK;
}

mpcl_status mpcl_model_read_param(mpcl_model *m, size_t index, mpcl_optim_slot slot, float *dst,
                                  size_t count) {
    size_t offset = 0;
    mpcl_status st = row_range(m, &m->tables.params, index, count, &offset);
    if (st != MPCL_OK) return st;
    return mpcl_optimizer_read(m->ctx, m->opt, slot, offset, dst, count);
}

mpcl_status mpcl_model_write_param(mpcl_model *m, size_t index, mpcl_optim_slot slot,
                                   const float *src, size_t count) {
    size_t offset = 0;
    mpcl_status st = row_range(m, &m->tables.params, index, count, &offset);
    if (st != MPCL_OK) return st;
    return mpcl_optimizer_write(m->ctx, m->opt, slot, offset, src, count);
}

mpcl_status mpcl_model_set_lr(mpcl_model *m, float lr) {
    return mpcl_optimizer_set_lr(m->opt, lr);
}

mpcl_status mpcl_model_read_step(mpcl_model *m, uint32_t *step) {
    return mpcl_optimizer_read_step(m->ctx, m->opt, step);
}

mpcl_status mpcl_model_write_step(mpcl_model *m, uint32_t step) {
    return mpcl_optimizer_write_step(m->ctx, m->opt, step);
}

size_t mpcl_model_buffer_count(const mpcl_model *m) {
    return m->tables.buffers.count;
}

const mpcl_param_info *mpcl_model_buffer(const mpcl_model *m, size_t index) {
    return index < m->tables.buffers.count ? &m->tables.buffers.rows[index] : NULL;
}

mpcl_status mpcl_model_read_buffer(mpcl_model *m, size_t index, float *dst, size_t count) {
    size_t offset = 0;
    mpcl_status st = row_range(m, &m->tables.buffers, index, count, &offset);
    if (st != MPCL_OK) return st;
    mpcl_tensor *v = NULL;
    if ((st = mpcl__tensor_view(m->arenas.buffers, offset, 1, count, &v)) == MPCL_OK)
        st = mpcl_tensor_download_f32(v, dst, count);
    mpcl_tensor_destroy(v);
    return st;
}

mpcl_status mpcl_model_write_buffer(mpcl_model *m, size_t index, const float *src, size_t count) {
    size_t offset = 0;
    mpcl_status st = row_range(m, &m->tables.buffers, index, count, &offset);
    if (st != MPCL_OK) return st;
    mpcl_tensor *v = NULL;
    if ((st = mpcl__tensor_view(m->arenas.buffers, offset, 1, count, &v)) == MPCL_OK)
        st = mpcl_tensor_upload_f32(v, src, count);
    mpcl_tensor_destroy(v);
    return st;
}

uint64_t mpcl_model_rng_counter(const mpcl_model *m) {
    return m->env.rng_counter;
}

void mpcl_model_set_rng_counter(mpcl_model *m, uint64_t counter) {
    m->env.rng_counter = counter;
}
