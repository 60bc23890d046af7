/* Dense: y = act(x W + b), kernel W [features, units], bias b [units], on
 * a flat (features,) input, or on each position of a sequence (positions,
 * features) as Keras' Dense does on its last axis: the batch is then the
 * [B positions, features] matrix, and the gradients sum over positions. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn/nn.h"

static const mpcl__attr DENSE_ATTRS[] = {
    {"units", MPCL_ATTR_COUNT, offsetof(mpcl_layer_spec, units), NULL, 1, 1 << 24, false},
    {"activation", MPCL_ATTR_ACTIVATION, offsetof(mpcl_layer_spec, activation), "linear", 0, 0,
     false},
    {"use_bias", MPCL_ATTR_BOOL, offsetof(mpcl_layer_spec, use_bias), "true", 0, 0, false},
};

typedef struct dense {
    size_t kernel_row;
    mpcl__bias_act epilogue;
    mpcl_tensor *w;  /* view: [inputs, units] of the working arena (storage) */
    mpcl_tensor *dw; /* view: [inputs, units] of the gradient arena */
} dense;

static mpcl_status dense_declare(mpcl__layer *L, mpcl__tables *t) {
    mpcl_context *ctx = L->env->ctx;
    dense *d = calloc(1, sizeof *d);
    if (!d) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating a dense layer");
    L->state = d;
    size_t units = L->spec.units, features = L->in_shape[L->in_rank - 1];
    size_t out[2] = {L->in_shape[0], units};
    mpcl__layer_set_output(L, L->in_rank, L->in_rank == 2 ? out : &units);
    char layer[MPCL__LAYER_NAME_MAX], name[MPCL__ROW_NAME_BUF];
    mpcl__layer_name(layer, sizeof layer, L);
    size_t kshape[2] = {features, units};
    snprintf(name, sizeof name, "%s.kernel", layer);
    mpcl_status st =
        mpcl__params_add(ctx, &t->params, name, 2, kshape, L->kernel_init, &d->kernel_row);
    if (st != MPCL_OK) return st;
    return mpcl__bias_act_add_rows(ctx, t, layer, units, L->spec.use_bias, &d->epilogue);
}

/* Positions per sample: 1 for a flat input. */
static size_t positions(const mpcl__layer *L) {
    return L->in_rank == 2 ? L->in_shape[0] : 1;
}

static double dense_activation_bytes(const mpcl__layer *L, const mpcl__layer_env *env) {
    return mpcl__layer_io_bytes(L) + mpcl__bias_act_bytes(L->spec.activation,
                                                          env->max_batch * positions(L),
                                                          L->spec.units, env->storage);
}

/* The first B samples of a batch tensor as its [B positions, cols] matrix. */
static mpcl_tensor by_position(const mpcl__layer *L, const mpcl_tensor *t, size_t B) {
    mpcl_tensor rows = mpcl__tensor_rows(t, B);
    return mpcl__tensor_by_last(&rows, t->cols / positions(L));
}

static mpcl_status dense_create(mpcl__layer *L, const mpcl__tables *t, const mpcl__arenas *a) {
    dense *d = L->state;
    const mpcl__layer_env *env = L->env;
    size_t off = t->params.rows[d->kernel_row].offset;
    size_t in = L->in_shape[L->in_rank - 1], out = L->spec.units;
    size_t B = env->max_batch * positions(L);
    mpcl_status st;
    if ((st = mpcl__tensor_view(a->working, off, in, out, &d->w)) != MPCL_OK ||
        (st = mpcl__tensor_view(a->grads, off, in, out, &d->dw)) != MPCL_OK ||
        (st = mpcl__layer_create_io(L)) != MPCL_OK)
        return st;
    return mpcl__bias_act_create(&d->epilogue, env, t, a, B, L->spec.activation);
}

static mpcl_status dense_forward(mpcl__layer *L, const mpcl_tensor *in, bool training) {
    dense *d = L->state;
    const mpcl__layer_env *env = L->env;
    mpcl_tensor h = by_position(L, L->output, in->rows), x = by_position(L, in, in->rows);
    mpcl_tensor addend = L->out_addend ? by_position(L, L->out_addend, in->rows) : h;
    return mpcl__bias_act_gemm_forward(&d->epilogue, env, &x, d->w, &h, training,
                                       L->out_addend ? &addend : NULL);
}

/* One position of a sequence: its [1, features] row into the output's
 * first row. */
static mpcl_status dense_forward_step(mpcl__layer *L, const mpcl_tensor *in, size_t position) {
    (void)position;
    dense *d = L->state;
    const mpcl__layer_env *env = L->env;
    mpcl_tensor h = mpcl__layer_step_row(L);
    return mpcl__bias_act_gemm_forward(&d->epilogue, env, in, d->w, &h, false, L->out_addend);
}

static mpcl_status dense_backward(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in) {
    dense *d = L->state;
    const mpcl__layer_env *env = L->env;
    size_t B = in->rows;
    mpcl_tensor dpre = by_position(L, L->d_output, B), h = by_position(L, L->output, B);
    mpcl_tensor x = by_position(L, in, B);
    mpcl_status st = mpcl__bias_act_backward(&d->epilogue, env->ctx, &dpre, &h);
    if (st == MPCL_OK)
        st = mpcl_gemm(env->ctx, env->gemm, true, false, 1.0f, &x, &dpre, 0.0f, d->dw);
    if (st == MPCL_OK && d_in) {
        mpcl_tensor dx = by_position(L, d_in, B);
        st = mpcl_gemm(env->ctx, env->gemm, false, true, 1.0f, &dpre, d->w, 0.0f, &dx);
    }
    return st;
}

static void dense_destroy(mpcl__layer *L) {
    dense *d = L->state;
    if (!d) return;
    mpcl__bias_act_destroy(&d->epilogue);
    mpcl_tensor_destroy(d->w);
    mpcl_tensor_destroy(d->dw);
    free(d);
    L->state = NULL;
}

const mpcl__layer_kind mpcl__dense_layer = {
    .name = "dense",
    .keras_name = "Dense",
    .attrs = DENSE_ATTRS,
    .attr_count = sizeof DENSE_ATTRS / sizeof DENSE_ATTRS[0],
    .input_rank = 1,
    .per_position = true,
    .declare = dense_declare,
    .activation_bytes = dense_activation_bytes,
    .create = dense_create,
    .forward = dense_forward,
    .backward = dense_backward,
    .forward_step = dense_forward_step,
    .destroy = dense_destroy,
};
