/* TokenAndPositionEmbedding (Keras-NLP's name; the spec's kind is
 * token_pos_embedding, which fits MPCL_LAYER_KIND_MAX): a sequence of T
 * token ids, T <= sequence_length, becomes (T, embedding_dim) with
 * y[t] = token_embeddings[id_t] + position_embeddings[t]. The rows are
 * GPT-2's wte [vocabulary_size, C] and wpe [sequence_length, C], both
 * starting normal with std 0.02 as GPT-2's do. The model's x is then int32
 * token ids (takes_tokens), and the layer must be its first.
 *
 * A token id outside [0, vocabulary_size) reads no row and trains none (its
 * token term is 0; cl/embedding.cl): nothing is read or written out of
 * bounds, and the labels' own check (the loss's bad-label count) or the
 * data reader reports bad ids.
 *
 * The backward is deterministic: every sum runs in position order, with no
 * atomics. The token gradient zeroes d_wte (V C writes), chains the
 * positions that hold each token (cl/embedding.cl: at most (B T)^2 id
 * reads, 6.7e7 for GPT-2's B T = 8 x 1024) and sums each chain once
 * (B T C reads of dy). For GPT-2's V = 50257, C = 768 the zeroing of the
 * 38.6M-element d_wte dominates; the chaining grows with (B T)^2, so
 * batches far above 8192 positions would want the ids sorted instead.
 *
 * When a layer above shares wte (a tied LM head: mpcl__params_grad_adds),
 * its backward has already written d_wte: the chains then add to it, and
 * nothing is zeroed. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn/nn.h"

static const mpcl__attr EMB_ATTRS[] = {
    {"vocabulary_size", MPCL_ATTR_COUNT, offsetof(mpcl_layer_spec, vocabulary_size), NULL, 1,
     1 << 24, false},
    {"sequence_length", MPCL_ATTR_COUNT, offsetof(mpcl_layer_spec, sequence_length), NULL, 1,
     1 << 24, false},
    {"embedding_dim", MPCL_ATTR_COUNT, offsetof(mpcl_layer_spec, embedding_dim), NULL, 1, 1 << 24,
     false},
};

enum { TOKENS, POSITIONS, ROWS };

typedef struct emb {
    size_t row[ROWS];
    size_t rows_of[ROWS];     /* vocabulary_size, sequence_length */
    mpcl_tensor *table[ROWS]; /* [rows, C] views of the working arena */
    mpcl_tensor *grad[ROWS];  /* [rows, C] views of the gradient arena */
    mpcl_tensor *links;       /* int32 [2, max_batch T]: the token chains of a batch */
    bool add_tokens;          /* d_wte holds a layer above's part: add to it */
} emb;

static mpcl_status emb_declare(mpcl__layer *L, mpcl__tables *t) {
    mpcl_context *ctx = L->env->ctx;
    const mpcl_layer_spec *s = &L->spec;
    char layer[MPCL__LAYER_NAME_MAX], name[MPCL__ROW_NAME_BUF];
    mpcl__layer_name(layer, sizeof layer, L);
    size_t T = L->in_shape[0];
    if (T > s->sequence_length)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "%s: sequences of %zu tokens; its sequence_length is %zu", layer, T,
                          s->sequence_length);
    /* The token chains index a batch's positions as int32. */
    if (L->env->max_batch > INT32_MAX / T)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "%s: batches of %zu sequences of %zu tokens: more than 2^31 - 1 "
                          "positions",
                          layer, L->env->max_batch, T);
    emb *e = calloc(1, sizeof *e);
    if (!e) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating an embedding layer");
    L->state = e;
    size_t out[2] = {T, s->embedding_dim};
    mpcl__layer_set_output(L, 2, out);
    e->rows_of[TOKENS] = s->vocabulary_size;
    e->rows_of[POSITIONS] = s->sequence_length;
    /* They map to GPT-2's wte and wpe. */
    static const char *const params[ROWS] = {"token_embeddings", "position_embeddings"};
    mpcl_status st = MPCL_OK;
    for (int i = 0; i < ROWS && st == MPCL_OK; i++) {
        size_t shape[2] = {e->rows_of[i], s->embedding_dim};
        snprintf(name, sizeof name, "%s.%s", layer, params[i]);
        st = mpcl__params_add(ctx, &t->params, name, 2, shape, MPCL__INIT_NORMAL_002, &e->row[i]);
    }
    return st;
}

static mpcl_status emb_create(mpcl__layer *L, const mpcl__tables *t, const mpcl__arenas *a) {
    emb *e = L->state;
    size_t C = L->spec.embedding_dim;
    e->add_tokens = mpcl__params_grad_adds(&t->params, e->row[TOKENS], 0);
    mpcl_status st = MPCL_OK;
    for (int i = 0; i < ROWS && st == MPCL_OK; i++) {
        size_t off = t->params.rows[e->row[i]].offset;
        if ((st = mpcl__tensor_view(a->working, off, e->rows_of[i], C, &e->table[i])) == MPCL_OK)
            st = mpcl__tensor_view(a->grads, off, e->rows_of[i], C, &e->grad[i]);
    }
    if (st == MPCL_OK)
        st = mpcl_tensor_create(L->env->ctx, MPCL_DTYPE_I32, 2, L->env->max_batch * L->inputs,
                                &e->links);
    return st == MPCL_OK ? mpcl__layer_create_io(L) : st;
}

/* n items in work-groups the kernel may take. */
static mpcl_status launch(mpcl_context *ctx, cl_kernel k, const char *name, size_t n) {
    return mpcl__launch_1d(ctx, k, name, n, mpcl__local_size(ctx, k, 256));
}

/* The kernels of a vector of channels an item (cl/abi.h's elementwise
 * width, cl/embedding.cl's LOAD8): a (ceil(channels / width), rows) range,
 * in groups the driver picks. */
static mpcl_status launch_rows(mpcl_context *ctx, cl_kernel k, const char *name, size_t channels,
                               size_t rows) {
    const size_t width = MPCL_ABI_ELEMENTWISE_VEC;
    return mpcl__launch_2d(ctx, k, name, (channels + width - 1) / width, rows, NULL);
}

/* y = the embeddings of the token ids in, int32 [B, seq], at positions
 * first .. first + seq - 1. */
static mpcl_status embed(mpcl__layer *L, const mpcl_tensor *in, size_t first, mpcl_tensor *y) {
    emb *e = L->state;
    mpcl_context *ctx = L->env->ctx;
    static const char name[] = "mpcl_embedding_forward";
    TRY(mpcl__check_count(ctx, y, name));
    cl_kernel k;
    TRY(mpcl__kernel(ctx, y->dtype, name, &k));
    cl_uint seq = (cl_uint)in->cols, from = (cl_uint)first, C = (cl_uint)L->spec.embedding_dim;
    cl_uint vocab = (cl_uint)e->rows_of[TOKENS], positions = (cl_uint)(y->rows * y->cols / C);
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(y->mem), MPCL_ARG(in->mem),
                       MPCL_ARG(e->table[TOKENS]->mem), MPCL_ARG(e->table[POSITIONS]->mem),
                       MPCL_ARG(seq), MPCL_ARG(from), MPCL_ARG(C), MPCL_ARG(vocab),
                       MPCL_ARG(positions), MPCL_ARGS_END));
    return launch_rows(ctx, k, name, C, positions);
}

/* in: the token ids, int32 [B, T]. */
static mpcl_status emb_forward(mpcl__layer *L, const mpcl_tensor *in, bool training) {
    (void)training;
    mpcl_tensor y = mpcl__tensor_rows(L->output, in->rows);
    return embed(L, in, 0, &y);
}

/* in: one token id, int32 [1, 1], at `position`. */
static mpcl_status emb_forward_step(mpcl__layer *L, const mpcl_tensor *in, size_t position) {
    mpcl_tensor y = mpcl__layer_step_row(L);
    return embed(L, in, position, &y);
}

static mpcl_status backward_positions(emb *e, mpcl_context *ctx, const mpcl_tensor *dy,
                                      const mpcl_tensor *in) {
    static const char name[] = "mpcl_embedding_backward_positions";
    const mpcl_tensor *g = e->grad[POSITIONS];
    TRY(mpcl__check_count(ctx, dy, name));
    cl_kernel k;
    TRY(mpcl__kernel(ctx, g->dtype, name, &k));
    cl_uint batch = (cl_uint)in->rows, seq = (cl_uint)in->cols, C = (cl_uint)g->cols;
    cl_uint rows = (cl_uint)g->rows;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(g->mem), MPCL_ARG(dy->mem), MPCL_ARG(batch),
                       MPCL_ARG(seq), MPCL_ARG(C), MPCL_ARG(rows), MPCL_ARGS_END));
    return launch_rows(ctx, k, name, C, rows);
}

/* links: the chains of the positions holding each token. */
static mpcl_status token_links(emb *e, mpcl_context *ctx, const mpcl_tensor *in) {
    static const char name[] = "mpcl_embedding_token_links";
    cl_kernel k;
    TRY(mpcl__kernel(ctx, MPCL_DTYPE_F32, name, &k));
    cl_uint positions = (cl_uint)(in->rows * in->cols), vocab = (cl_uint)e->rows_of[TOKENS];
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(e->links->mem), MPCL_ARG(in->mem),
                       MPCL_ARG(positions), MPCL_ARG(vocab), MPCL_ARGS_END));
    return launch(ctx, k, name, positions);
}

/* d_wte: each token's chain summed into its row, the other rows zeros; or,
 * when a layer above wrote d_wte, each chain added to its row. */
static mpcl_status backward_tokens(emb *e, mpcl_context *ctx, const mpcl_tensor *dy,
                                   const mpcl_tensor *in) {
    static const char name[] = "mpcl_embedding_backward_tokens";
    mpcl_tensor *g = e->grad[TOKENS];
    TRY(mpcl__check_count(ctx, g, name));
    if (!e->add_tokens) TRY(mpcl_tensor_fill(g, 0.0f));
    TRY(token_links(e, ctx, in));
    cl_kernel k;
    TRY(mpcl__kernel(ctx, g->dtype, name, &k));
    cl_uint positions = (cl_uint)(in->rows * in->cols), C = (cl_uint)g->cols;
    cl_uint add = e->add_tokens;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(g->mem), MPCL_ARG(dy->mem), MPCL_ARG(in->mem),
                       MPCL_ARG(e->links->mem), MPCL_ARG(positions), MPCL_ARG(C), MPCL_ARG(add),
                       MPCL_ARGS_END));
    return launch_rows(ctx, k, name, C, positions);
}

/* Token ids have no gradient: d_in is ignored (the model passes none to
 * its first layer). */
static mpcl_status emb_backward(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in) {
    (void)d_in;
    emb *e = L->state;
    mpcl_context *ctx = L->env->ctx;
    mpcl_tensor dy = mpcl__tensor_rows(L->d_output, in->rows);
    TRY(backward_positions(e, ctx, &dy, in));
    return backward_tokens(e, ctx, &dy, in);
}

static void emb_destroy(mpcl__layer *L) {
    emb *e = L->state;
    if (!e) return;
    for (int i = 0; i < ROWS; i++) {
        mpcl_tensor_destroy(e->table[i]);
        mpcl_tensor_destroy(e->grad[i]);
    }
    mpcl_tensor_destroy(e->links);
    free(e);
    L->state = NULL;
}

static double emb_activation_bytes(const mpcl__layer *L, const mpcl__layer_env *env) {
    return mpcl__layer_io_bytes(L) + 2.0 * (double)env->max_batch * (double)L->inputs * 4;
}

const mpcl__layer_kind mpcl__token_pos_embedding_layer = {
    .name = "token_pos_embedding",
    .keras_name = "TokenAndPositionEmbedding",
    .attrs = EMB_ATTRS,
    .attr_count = sizeof EMB_ATTRS / sizeof EMB_ATTRS[0],
    .input_rank = 1,
    .takes_tokens = true,
    .declare = emb_declare,
    .activation_bytes = emb_activation_bytes,
    .create = emb_create,
    .forward = emb_forward,
    .backward = emb_backward,
    .forward_step = emb_forward_step,
    .destroy = emb_destroy,
};
