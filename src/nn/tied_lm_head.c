/* TiedLMHead: GPT-2's language-model head, whose weights are the token
 * embedding's. A sequence (T, C) gives logits (T, V) = h wte^T, wte the
 * [V, C] token_embeddings row of the model's token_pos_embedding: the head
 * adds no row. Its backward gives d_h = dlogits wte and writes its part of
 * d_wte, dlogits^T h; it runs before the embedding's backward, which adds
 * its own part (mpcl__params_share), so the optimizer, checkpoints and
 * parameter counts see wte once. Both products are GEMMs through the
 * model's GEMM path, on the views of the arenas in the storage dtype. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"

static const char TIED_SUFFIX[] = ".token_embeddings";

typedef struct head {
    size_t row, writer; /* the shared row, and the head's place among its writers */
    size_t V, C;
    bool add;           /* a layer declared above it wrote d_wte first */
    mpcl_tensor *wte;   /* [V, C] view of the working arena (storage) */
    mpcl_tensor *d_wte; /* [V, C] view of the gradient arena */
} head;

/* Whether a row's name ends in ".token_embeddings". */
static bool is_token_embeddings(const mpcl_param_info *r) {
    size_t n = strlen(r->name), k = sizeof TIED_SUFFIX - 1;
    return n > k && strcmp(r->name + n - k, TIED_SUFFIX) == 0;
}

/* The one row named "*.token_embeddings" in the params table. */
static mpcl_status find_token_embeddings(mpcl_context *ctx, const char *layer,
                                         const mpcl__param_table *t, size_t *row) {
    size_t found = 0;
    for (size_t i = 0; i < t->count; i++)
        if (is_token_embeddings(&t->rows[i])) {
            *row = i;
            found++;
        }
    if (found == 1) return MPCL_OK;
    return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                      "%s uses the token embedding's weights: it needs one token_pos_embedding "
                      "layer first (the model has %zu)",
                      layer, found);
}

static mpcl_status head_declare(mpcl__layer *L, mpcl__tables *t) {
    mpcl_context *ctx = L->env->ctx;
    char layer[MPCL__LAYER_NAME_MAX];
    mpcl__layer_name(layer, sizeof layer, L);
    TRY(mpcl__require_sequence(L));
    size_t row = 0;
    TRY(find_token_embeddings(ctx, layer, &t->params, &row));
    const mpcl_param_info *r = &t->params.rows[row];
    size_t T = L->in_shape[0], C = L->in_shape[1];
    if (r->shape[1] != C)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "%s: its input has %zu channels; %s is [%zu, %zu]", layer, C, r->name,
                          r->shape[0], r->shape[1]);
    head *h = calloc(1, sizeof *h);
    if (!h) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating %s", layer);
    L->state = h;
    *h = (head){.row = row, .V = r->shape[0], .C = C};
    mpcl__params_share(&t->params, row, &h->writer);
    size_t out[2] = {T, h->V};
    mpcl__layer_set_output(L, 2, out);
    return MPCL_OK;
}

static mpcl_status head_create(mpcl__layer *L, const mpcl__tables *t, const mpcl__arenas *a) {
    head *h = L->state;
    size_t off = t->params.rows[h->row].offset;
    h->add = mpcl__params_grad_adds(&t->params, h->row, h->writer);
    TRY(mpcl__tensor_view(a->working, off, h->V, h->C, &h->wte));
    TRY(mpcl__tensor_view(a->grads, off, h->V, h->C, &h->d_wte));
    return mpcl__layer_create_io(L);
}

/* The first B samples of a [max_batch, T cols] tensor as [B T, cols]. */
static mpcl_tensor by_position(const mpcl_tensor *t, size_t B, size_t cols) {
    mpcl_tensor rows = mpcl__tensor_rows(t, B);
    return mpcl__tensor_by_last(&rows, cols);
}

/* logits = x wte^T: rows of C features to rows of V logits. */
static mpcl_status logits_of(const mpcl__layer *L, const mpcl_tensor *x, mpcl_tensor *logits) {
    const head *h = L->state;
    return mpcl_gemm(L->env->ctx, L->env->gemm, false, true, 1.0f, x, h->wte, 0.0f, logits);
}

static mpcl_status head_forward(mpcl__layer *L, const mpcl_tensor *in, bool training) {
    (void)training;
    head *h = L->state;
    size_t B = in->rows;
    mpcl_tensor x = by_position(in, B, h->C), logits = by_position(L->output, B, h->V);
    return logits_of(L, &x, &logits);
}

/* One position's row in, its logits into the output's first row. */
static mpcl_status head_forward_step(mpcl__layer *L, const mpcl_tensor *in, size_t position) {
    (void)position;
    mpcl_tensor logits = mpcl__layer_step_row(L);
    return logits_of(L, in, &logits);
}

static mpcl_status head_backward(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in) {
    head *h = L->state;
    const mpcl__layer_env *env = L->env;
    size_t B = in->rows;
    mpcl_tensor x = by_position(in, B, h->C), dlogits = by_position(L->d_output, B, h->V);
    TRY(mpcl_gemm(env->ctx, env->gemm, true, false, 1.0f, &dlogits, &x, h->add ? 1.0f : 0.0f,
                  h->d_wte));
    if (!d_in) return MPCL_OK;
    mpcl_tensor dx = by_position(d_in, B, h->C);
    return mpcl_gemm(env->ctx, env->gemm, false, false, 1.0f, &dlogits, h->wte, 0.0f, &dx);
}

static void head_destroy(mpcl__layer *L) {
    head *h = L->state;
    if (!h) return;
    mpcl_tensor_destroy(h->wte);
    mpcl_tensor_destroy(h->d_wte);
    free(h);
    L->state = NULL;
}

static double head_activation_bytes(const mpcl__layer *L, const mpcl__layer_env *env) {
    (void)env;
    return mpcl__layer_io_bytes(L);
}

const mpcl__layer_kind mpcl__tied_lm_head_layer = {
    .name = "tied_lm_head",
    .keras_name = "TiedLMHead",
    .declare = head_declare,
    .activation_bytes = head_activation_bytes,
    .create = head_create,
    .forward = head_forward,
    .forward_step = head_forward_step,
    .backward = head_backward,
    .destroy = head_destroy,
};
