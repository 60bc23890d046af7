/* Dropout: in training, each element is kept with probability 1 - rate and
 * scaled by 1 / (1 - rate); in evaluation it is the identity. The masks are
 * drawn on the device from the model's seed, the training forward's count
 * and the element's index, so the same seed gives the same masks, a resumed
 * run draws what the uninterrupted one would have, and backward recomputes
 * the mask instead of storing it. */
#include <stddef.h>

#include "mpcl/dropout.h"
#include "nn/nn.h"

static const mpcl__attr DROPOUT_ATTRS[] = {
    {"rate", MPCL_ATTR_REAL, offsetof(mpcl_layer_spec, rate), NULL, 0, 1, true},
};

static mpcl_status dropout_declare(mpcl__layer *L, mpcl__tables *t) {
    (void)t;
    mpcl__layer_set_output(L, L->in_rank, L->in_shape);
    return MPCL_OK;
}

static double dropout_activation_bytes(const mpcl__layer *L, const mpcl__layer_env *env) {
    (void)env;
    return mpcl__layer_io_bytes(L);
}

static mpcl_status dropout_create(mpcl__layer *L, const mpcl__tables *t, const mpcl__arenas *a) {
    (void)t;
    (void)a;
    return mpcl__layer_create_io(L);
}

/* Each layer draws its own masks: the seed is mixed with its position. */
static uint64_t layer_seed(const mpcl__layer *L) {
    return L->env->seed ^ (0x9e3779b97f4a7c15ull * (L->index + 1));
}

static mpcl_status dropout_forward(mpcl__layer *L, const mpcl_tensor *in, bool training) {
    const mpcl__layer_env *env = L->env;
    mpcl_tensor out = mpcl__tensor_rows(L->output, in->rows);
    /* Evaluation reaches here only for a top layer (eval_identity): rate 0
     * is an exact copy. */
    float rate = training ? (float)L->spec.rate : 0.0f;
    return mpcl_dropout_forward(env->ctx, rate, layer_seed(L), env->rng_counter, &out, in);
}

static mpcl_status dropout_backward(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in) {
    const mpcl__layer_env *env = L->env;
    if (!d_in) return MPCL_OK;
    mpcl_tensor d_out = mpcl__tensor_rows(L->d_output, in->rows);
    return mpcl_dropout_backward(env->ctx, (float)L->spec.rate, layer_seed(L), env->rng_counter,
                                 d_in, &d_out);
}

const mpcl__layer_kind mpcl__dropout_layer = {
    .name = "dropout",
    .keras_name = "Dropout",
    .attrs = DROPOUT_ATTRS,
    .attr_count = sizeof DROPOUT_ATTRS / sizeof DROPOUT_ATTRS[0],
    .eval_identity = true,
    .declare = dropout_declare,
    .activation_bytes = dropout_activation_bytes,
    .create = dropout_create,
    .forward = dropout_forward,
    .backward = dropout_backward,
};
