/* The registered layer kinds. A new kind is one file plus its two lines
 * here: its declaration and its place in KINDS. */
#include <stdio.h>
#include <string.h>

#include "nn/nn.h"

extern const mpcl__layer_kind mpcl__dense_layer;
extern const mpcl__layer_kind mpcl__flatten_layer;
extern const mpcl__layer_kind mpcl__conv2d_layer;
extern const mpcl__layer_kind mpcl__max_pooling2d_layer;
extern const mpcl__layer_kind mpcl__dropout_layer;
extern const mpcl__layer_kind mpcl__batch_normalization_layer;
extern const mpcl__layer_kind mpcl__layer_normalization_layer;
extern const mpcl__layer_kind mpcl__causal_self_attention_layer;
extern const mpcl__layer_kind mpcl__token_pos_embedding_layer;
extern const mpcl__layer_kind mpcl__tied_lm_head_layer;
extern const mpcl__layer_kind mpcl__transformer_decoder_layer;

static const mpcl__layer_kind *const KINDS[] = {
    &mpcl__dense_layer,
    &mpcl__flatten_layer,
    &mpcl__conv2d_layer,
    &mpcl__max_pooling2d_layer,
    &mpcl__dropout_layer,
    &mpcl__batch_normalization_layer,
    &mpcl__layer_normalization_layer,
    &mpcl__causal_self_attention_layer,
    &mpcl__token_pos_embedding_layer,
    &mpcl__tied_lm_head_layer,
    &mpcl__transformer_decoder_layer,
};

#define KIND_COUNT (sizeof KINDS / sizeof KINDS[0])

const mpcl__layer_kind *mpcl__layer_kind_find(const char *name) {
    for (size_t i = 0; name && i < KIND_COUNT; i++)
        if (strcmp(KINDS[i]->name, name) == 0) return KINDS[i];
    return NULL;
}

bool mpcl_layer_kind_known(const char *kind) {
    return mpcl__layer_kind_find(kind) != NULL;
}

size_t mpcl_layer_kind_input_rank(const char *kind) {
    const mpcl__layer_kind *k = mpcl__layer_kind_find(kind);
    return k ? k->input_rank : 0;
}

size_t mpcl_layer_kind_count(void) {
    return KIND_COUNT;
}

const char *mpcl_layer_kind_name(size_t index) {
    return index < KIND_COUNT ? KINDS[index]->name : NULL;
}

void mpcl__shape_str(char *buf, size_t size, size_t rank, const size_t *shape) {
    size_t len = (size_t)snprintf(buf, size, "(");
    for (size_t d = 0; d < rank && len < size; d++)
        len += (size_t)snprintf(buf + len, size - len, "%s%zu", d ? ", " : "", shape[d]);
    if (len < size) snprintf(buf + len, size - len, "%s", rank == 1 ? ",)" : ")");
}

void mpcl__layer_name(char *buf, size_t size, const mpcl__layer *L) {
    if (L->name)
        snprintf(buf, size, "%s", L->name);
    else
        snprintf(buf, size, "%s_%zu", L->kind->name, L->index);
}

double mpcl__layer_io_bytes(const mpcl__layer *L) {
    return 2.0 * (double)L->env->max_batch * (double)L->outputs *
           (double)mpcl_dtype_size(L->env->storage);
}

mpcl_status mpcl__layer_create_io(mpcl__layer *L) {
    const mpcl__layer_env *env = L->env;
    mpcl_status st =
        mpcl_tensor_create(env->ctx, env->storage, env->max_batch, L->outputs, &L->output);
    if (st == MPCL_OK && !L->d_output)
        st = mpcl_tensor_create(env->ctx, env->storage, env->max_batch, L->outputs, &L->d_output);
    return st;
}

mpcl_status mpcl__require_sequence(const mpcl__layer *L) {
    if (L->in_rank == 2) return MPCL_OK;
    char layer[MPCL__LAYER_NAME_MAX], have[64];
    mpcl__layer_name(layer, sizeof layer, L);
    mpcl__shape_str(have, sizeof have, L->in_rank, L->in_shape);
    return MPCL_ERROR(L->env->ctx, MPCL_ERR_INVALID_ARG,
                      "%s takes a sequence (time, channels) input; it is given %s", layer, have);
}

void mpcl__layer_set_output(mpcl__layer *L, size_t rank, const size_t *shape) {
    L->out_rank = rank;
    L->outputs = 1;
    for (size_t d = 0; d < rank; d++) {
        L->out_shape[d] = shape[d];
        L->outputs *= shape[d];
    }
}
