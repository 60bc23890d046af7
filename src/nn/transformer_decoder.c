/* TransformerDecoder (Keras-NLP's, normalize_first): GPT-2's pre-norm
 * residual block over a (T, C) sequence,
 *     h = x + attn(ln_1(x)),   out = h + c_proj(gelu(c_fc(ln_2(h)))),
 * c_fc C -> intermediate_dim and c_proj intermediate_dim -> C per position.
 * A model is a plain sequence of layers, which cannot express the two skip
 * connections, so the block is one kind made of five sub-layers of the
 * existing kinds (layer_normalization, causal_self_attention, dense), which
 * it declares, creates and runs through their own interfaces under the
 * names "<block>.ln_1", "<block>.attn", "<block>.ln_2", "<block>.mlp.c_fc"
 * and "<block>.mlp.c_proj": their rows are GPT-2's names in GPT-2's order.
 * The residual sums cost no pass of their own: forward, the attention and
 * c_proj add the skip in their GEMM's epilogue (`out_addend`), so h is the
 * attention's output and the block's output is c_proj's (a view of it);
 * backward, the layer norms' input gradients add the skip's gradient
 * (`d_in_addend`). Kernels start normal(0, 0.02), as GPT-2's. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn/nn.h"

static const mpcl__attr BLOCK_ATTRS[] = {
    {"num_heads", MPCL_ATTR_COUNT, offsetof(mpcl_layer_spec, num_heads), NULL, 1, 1 << 16, false},
    {"intermediate_dim", MPCL_ATTR_COUNT, offsetof(mpcl_layer_spec, intermediate_dim), "0", 0,
     1 << 24, false},
    {"layer_norm_epsilon", MPCL_ATTR_REAL, offsetof(mpcl_layer_spec, epsilon), "1e-05", 1e-30, 1,
     false},
    {"use_bias", MPCL_ATTR_BOOL, offsetof(mpcl_layer_spec, use_bias), "true", 0, 0, false},
};

/* The sub-layers in the order they run and declare their rows. */
enum { LN_1, ATTN, LN_2, C_FC, C_PROJ, SUBS };

static const char *const SUB_NAMES[SUBS] = {"ln_1", "attn", "ln_2", "mlp.c_fc", "mlp.c_proj"};

typedef struct block {
    size_t T, C, intermediate;
    mpcl__layer sub[SUBS];
    char names[SUBS][MPCL__LAYER_NAME_MAX];
} block;

/* The spec of sub-layer i, from the block's. */
static mpcl_layer_spec sub_spec(const mpcl__layer *L, const block *b, int i) {
    static const char *const kinds[SUBS] = {"layer_normalization", "causal_self_attention",
                                            "layer_normalization", "dense", "dense"};
    mpcl_layer_spec s;
    /* The kinds are registered: init cannot fail. */
    (void)mpcl_layer_spec_init(NULL, kinds[i], &s);
    s.epsilon = L->spec.epsilon;
    s.num_heads = L->spec.num_heads;
    s.use_bias = L->spec.use_bias;
    s.units = i == C_FC ? b->intermediate : b->C;
    s.activation = i == C_FC ? MPCL_ACT_GELU : MPCL_ACT_IDENTITY;
    return s;
}

/* Declares sub-layer i on a (T, width) input, under its name. */
static mpcl_status declare_sub(mpcl__layer *L, block *b, int i, size_t width, mpcl__tables *t) {
    char layer[MPCL__LAYER_NAME_MAX];
    mpcl__layer_name(layer, sizeof layer, L);
    if ((size_t)snprintf(b->names[i], sizeof b->names[i], "%s.%s", layer, SUB_NAMES[i]) >=
        sizeof b->names[i])
        return MPCL_ERROR(L->env->ctx, MPCL_ERR_INVALID_ARG, "%s: the name of its %s is too long",
                          layer, SUB_NAMES[i]);
    mpcl__layer *S = &b->sub[i];
    *S = (mpcl__layer){.env = L->env,
                       .spec = sub_spec(L, b, i),
                       .name = b->names[i],
                       .kernel_init = MPCL__INIT_NORMAL_002};
    S->kind = mpcl__spec_kind(&S->spec);
    S->in_rank = 2;
    S->in_shape[0] = b->T;
    S->in_shape[1] = width;
    S->inputs = b->T * width;
    return S->kind->declare(S, t);
}

static mpcl_status block_declare(mpcl__layer *L, mpcl__tables *t) {
    mpcl_context *ctx = L->env->ctx;
    char layer[MPCL__LAYER_NAME_MAX], have[64];
    mpcl__layer_name(layer, sizeof layer, L);
    if (L->in_rank != 2) {
        mpcl__shape_str(have, sizeof have, L->in_rank, L->in_shape);
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "%s takes a sequence (time, channels) input; it is given %s", layer,
                          have);
    }
    block *b = calloc(1, sizeof *b);
    if (!b) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating %s", layer);
    L->state = b;
    size_t C = L->in_shape[1];
    *b = (block){.T = L->in_shape[0], .C = C};
    b->intermediate = L->spec.intermediate_dim ? L->spec.intermediate_dim : 4 * C;
    mpcl__layer_set_output(L, L->in_rank, L->in_shape);
    /* Each takes C channels per position but c_proj, after c_fc's widening. */
    for (int i = 0; i < SUBS; i++) TRY(declare_sub(L, b, i, i == C_PROJ ? b->intermediate : C, t));
    return MPCL_OK;
}

/* The sub-layers whose d_output is a view of the block's (see block_create). */
static const int SHARES_D_OUTPUT[] = {ATTN, C_PROJ};
#define SHARING (sizeof SHARES_D_OUTPUT / sizeof SHARES_D_OUTPUT[0])

static double block_activation_bytes(const mpcl__layer *L, const mpcl__layer_env *env) {
    const block *b = L->state;
    /* Its d_output (its output is c_proj's, h the attention's), and the
     * sub-layers' own but the d_outputs that are views of the block's: each
     * of those is half a sub-layer's io, of the block's width. */
    double bytes = (0.5 - 0.5 * (double)SHARING) * mpcl__layer_io_bytes(L);
    for (int i = 0; i < SUBS; i++) bytes += b->sub[i].kind->activation_bytes(&b->sub[i], env);
    return bytes;
}

/* The output is a view of c_proj's. The attention's and c_proj's d_output
 * are views of the block's: the gradient of each residual sum reaches its
 * branch without a copy. That holds because both backward passes only read
 * their d_output (their last step is linear: a bias gradient and GEMMs), and
 * the layer norm that overwrites the block's d_output runs after the branch
 * has read it. */
static mpcl_status block_create(mpcl__layer *L, const mpcl__tables *t, const mpcl__arenas *a) {
    block *b = L->state;
    const mpcl__layer_env *env = L->env;
    TRY(mpcl_tensor_create(env->ctx, env->storage, env->max_batch, L->outputs, &L->d_output));
    /* Given before their create, which keeps them (mpcl__layer_create_io). */
    for (size_t s = 0; s < SHARING; s++)
        TRY(mpcl__tensor_view(L->d_output, 0, env->max_batch, L->outputs,
                              &b->sub[SHARES_D_OUTPUT[s]].d_output));
    for (int i = 0; i < SUBS; i++) TRY(b->sub[i].kind->create(&b->sub[i], t, a));
    return mpcl__tensor_view(b->sub[C_PROJ].output, 0, env->max_batch, L->outputs, &L->output);
}

/* The first B rows of a [max_batch, ...] tensor. */
static mpcl_tensor rows(const mpcl_tensor *t, size_t B) {
    return mpcl__tensor_rows(t, B);
}

/* How the block runs: a forward of a batch (training or not), or
 * generation's step at one position of sample 0 (forward_step). */
typedef struct how {
    bool step, training;
    size_t position;
} how;

/* Runs sub-layer i on in; *out: the rows of its output it wrote. */
static mpcl_status run_sub(block *b, int i, const mpcl_tensor *in, how w, mpcl_tensor *out) {
    mpcl__layer *S = &b->sub[i];
    if (w.step) {
        TRY(S->kind->forward_step(S, in, w.position));
        *out = mpcl__layer_step_row(S);
    } else {
        TRY(S->kind->forward(S, in, w.training));
        *out = rows(S->output, in->rows);
    }
    return MPCL_OK;
}

/* Sub-layer i's run, its output = its result + addend. */
static mpcl_status run_adding(block *b, int i, const mpcl_tensor *in, const mpcl_tensor *addend,
                              how w, mpcl_tensor *out) {
    b->sub[i].out_addend = addend;
    mpcl_status st = run_sub(b, i, in, w, out);
    b->sub[i].out_addend = NULL;
    return st;
}

/* out = h + mlp(ln_2(h)), h = in + attn(ln_1(in)): h lands in the
 * attention's output, out in c_proj's, the block's. */
static mpcl_status run_block(block *b, const mpcl_tensor *in, how w) {
    mpcl_tensor y, h;
    TRY(run_sub(b, LN_1, in, w, &y));
    TRY(run_adding(b, ATTN, &y, in, w, &h));
    TRY(run_sub(b, LN_2, &h, w, &y));
    TRY(run_sub(b, C_FC, &y, w, &y));
    return run_adding(b, C_PROJ, &y, &h, w, &y);
}

static mpcl_status block_forward(mpcl__layer *L, const mpcl_tensor *in, bool training) {
    return run_block(L->state, in, (how){.training = training});
}

/* One position's row in, through each sub-layer's step (the attention's
 * reads and extends its key/value cache), into the output's first row
 * (c_proj's). */
static mpcl_status block_forward_step(mpcl__layer *L, const mpcl_tensor *in, size_t position) {
    return run_block(L->state, in, (how){.step = true, .position = position});
}

/* Sub-layer i's backward from its d_output (the gradient of its output),
 * its input x and input gradient dx (NULL: none wanted). */
static mpcl_status back_sub(block *b, int i, const mpcl_tensor *x, mpcl_tensor *dx) {
    return b->sub[i].kind->backward(&b->sub[i], x, dx);
}

/* The same for a sub-layer whose input is the one before it's output. */
static mpcl_status back_chained(block *b, int i, size_t B) {
    mpcl_tensor x = rows(b->sub[i - 1].output, B), dx = rows(b->sub[i - 1].d_output, B);
    return back_sub(b, i, &x, &dx);
}

/* Layer norm i's backward (input x), writing d_in = its input gradient +
 * addend in one pass (`d_in_addend`). */
static mpcl_status back_adding(block *b, int i, const mpcl_tensor *x, mpcl_tensor *d_in,
                               const mpcl_tensor *addend) {
    mpcl__layer *S = &b->sub[i];
    S->d_in_addend = addend;
    mpcl_status st = S->kind->backward(S, x, d_in);
    S->d_in_addend = NULL;
    return st;
}

/* The gradient of each residual sum reaches both of its terms: its branch
 * reads it in place (the branch's last d_output is a view of the block's),
 * and the skip's gradient is added to the branch's input gradient by the
 * layer norm that starts the branch. Every row's gradient has one sub-layer
 * writing it: no parameter accumulates. */
static mpcl_status block_backward(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in) {
    block *b = L->state;
    size_t B = in->rows;
    mpcl_tensor h = rows(b->sub[ATTN].output, B), d_out = rows(L->d_output, B);
    /* out = h + mlp(h): d_h = d_out + mlp's input gradient, into d_out. */
    TRY(back_chained(b, C_PROJ, B));
    TRY(back_chained(b, C_FC, B));
    TRY(back_adding(b, LN_2, &h, &d_out, &d_out));
    /* h = x + attn(ln_1(x)): d_x = d_h + ln_1's input gradient. */
    TRY(back_chained(b, ATTN, B));
    if (!d_in) return back_sub(b, LN_1, in, NULL);
    return back_adding(b, LN_1, in, d_in, &d_out);
}

static void block_destroy(mpcl__layer *L) {
    block *b = L->state;
    if (!b) return;
    /* The output is a view of c_proj's: gone before it. */
    mpcl_tensor_destroy(L->output);
    L->output = NULL;
    mpcl__destroy_layers(b->sub, SUBS);
    free(b);
    L->state = NULL;
}

const mpcl__layer_kind mpcl__transformer_decoder_layer = {
    .name = "transformer_decoder",
    .keras_name = "TransformerDecoder",
    .attrs = BLOCK_ATTRS,
    .attr_count = sizeof BLOCK_ATTRS / sizeof BLOCK_ATTRS[0],
    .declare = block_declare,
    .activation_bytes = block_activation_bytes,
    .create = block_create,
    .forward = block_forward,
    .forward_step = block_forward_step,
    .backward = block_backward,
    .destroy = block_destroy,
};
