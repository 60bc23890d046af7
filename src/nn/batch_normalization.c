/* BatchNormalization over the last axis (the channels of an NHWC image, the
 * features of a flat input): in training, y = gamma (x - mean) / sqrt(var +
 * epsilon) + beta with the batch's own statistics in f32, which also move
 * the moving averages; in evaluation, the moving averages. gamma and beta
 * train; moving_mean and moving_variance are buffers, saved in checkpoints
 * but outside the optimizer's arenas. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "mpcl/batchnorm.h"
#include "nn/nn.h"

static const mpcl__attr BN_ATTRS[] = {
    {"momentum", MPCL_ATTR_REAL, offsetof(mpcl_layer_spec, momentum), "0.99", 0, 1, false},
    {"epsilon", MPCL_ATTR_REAL, offsetof(mpcl_layer_spec, epsilon), "0.001", 1e-30, 1, false},
};

enum { GAMMA, BETA, ROWS };
enum { MOVING_MEAN, MOVING_VAR, BUFFERS };

typedef struct bn {
    size_t channels;
    size_t row[ROWS], buffer[BUFFERS];
    mpcl_tensor *param[ROWS];              /* [1, C] f32 views of the master arena */
    mpcl_tensor *grad[ROWS];               /* [1, C] views of the gradient arena */
    mpcl_tensor *moving[BUFFERS];          /* [1, C] f32 views of the buffer arena */
    mpcl_tensor *save_mean, *save_inv_std; /* [1, C] f32: the batch's, for backward */
} bn;

static mpcl_status bn_declare(mpcl__layer *L, mpcl__tables *t) {
    mpcl_context *ctx = L->env->ctx;
    bn *b = calloc(1, sizeof *b);
    if (!b) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating a batch norm layer");
    L->state = b;
    mpcl__layer_set_output(L, L->in_rank, L->in_shape);
    b->channels = L->in_shape[L->in_rank - 1];
    char layer[MPCL__LAYER_NAME_MAX], name[MPCL__ROW_NAME_BUF];
    mpcl__layer_name(layer, sizeof layer, L);
    static const char *const params[ROWS] = {"gamma", "beta"};
    static const char *const buffers[BUFFERS] = {"moving_mean", "moving_variance"};
    static const mpcl__param_init params_init[ROWS] = {MPCL__INIT_ONES, MPCL__INIT_ZEROS};
    static const mpcl__param_init buffers_init[BUFFERS] = {MPCL__INIT_ZEROS, MPCL__INIT_ONES};
    mpcl_status st = MPCL_OK;
    for (int i = 0; i < ROWS && st == MPCL_OK; i++) {
        snprintf(name, sizeof name, "%s.%s", layer, params[i]);
        st = mpcl__params_add(ctx, &t->params, name, 1, &b->channels, params_init[i], &b->row[i]);
    }
    for (int i = 0; i < BUFFERS && st == MPCL_OK; i++) {
        snprintf(name, sizeof name, "%s.%s", layer, buffers[i]);
        st = mpcl__params_add(ctx, &t->buffers, name, 1, &b->channels, buffers_init[i],
                              &b->buffer[i]);
    }
    return st;
}

static double bn_activation_bytes(const mpcl__layer *L, const mpcl__layer_env *env) {
    (void)env;
    return mpcl__layer_io_bytes(L);
}

static mpcl_status bn_create(mpcl__layer *L, const mpcl__tables *t, const mpcl__arenas *a) {
    bn *b = L->state;
    const mpcl__layer_env *env = L->env;
    size_t C = b->channels;
    mpcl_status st = MPCL_OK;
    for (int i = 0; i < ROWS && st == MPCL_OK; i++) {
        size_t off = t->params.rows[b->row[i]].offset;
        if ((st = mpcl__tensor_view(a->master, off, 1, C, &b->param[i])) == MPCL_OK)
            st = mpcl__tensor_view(a->grads, off, 1, C, &b->grad[i]);
    }
    for (int i = 0; i < BUFFERS && st == MPCL_OK; i++)
        st = mpcl__tensor_view(a->buffers, t->buffers.rows[b->buffer[i]].offset, 1, C,
                               &b->moving[i]);
    if (st == MPCL_OK) st = mpcl_tensor_create(env->ctx, MPCL_DTYPE_F32, 1, C, &b->save_mean);
    if (st == MPCL_OK) st = mpcl_tensor_create(env->ctx, MPCL_DTYPE_F32, 1, C, &b->save_inv_std);
    if (st == MPCL_OK) st = mpcl__layer_create_io(L);
    return st;
}

static mpcl_status bn_forward(mpcl__layer *L, const mpcl_tensor *in, bool training) {
    bn *b = L->state;
    mpcl_context *ctx = L->env->ctx;
    mpcl_tensor rows = mpcl__tensor_rows(L->output, in->rows);
    mpcl_tensor y = mpcl__tensor_by_last(&rows, b->channels),
                x = mpcl__tensor_by_last(in, b->channels);
    float eps = (float)L->spec.epsilon;
    if (!training)
        return mpcl_batchnorm_forward_eval(ctx, eps, &y, &x, b->param[GAMMA], b->param[BETA],
                                           b->moving[MOVING_MEAN], b->moving[MOVING_VAR]);
    return mpcl_batchnorm_forward_train(ctx, (float)L->spec.momentum, eps, &y, &x, b->param[GAMMA],
                                        b->param[BETA], b->moving[MOVING_MEAN],
                                        b->moving[MOVING_VAR], b->save_mean, b->save_inv_std);
}

static mpcl_status bn_backward(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in) {
    bn *b = L->state;
    mpcl_tensor d_rows = mpcl__tensor_rows(L->d_output, in->rows);
    mpcl_tensor dy = mpcl__tensor_by_last(&d_rows, b->channels),
                x = mpcl__tensor_by_last(in, b->channels);
    /* Without an input gradient (the first layer), dx goes over dy, which
     * nothing reads after. */
    mpcl_tensor dx = d_in ? mpcl__tensor_by_last(d_in, b->channels) : dy;
    return mpcl_batchnorm_backward(L->env->ctx, &dx, b->grad[GAMMA], b->grad[BETA], &dy, &x,
                                   b->param[GAMMA], b->save_mean, b->save_inv_std);
}

static void bn_destroy(mpcl__layer *L) {
    bn *b = L->state;
    if (!b) return;
    for (int i = 0; i < ROWS; i++) {
        mpcl_tensor_destroy(b->param[i]);
        mpcl_tensor_destroy(b->grad[i]);
    }
    for (int i = 0; i < BUFFERS; i++) mpcl_tensor_destroy(b->moving[i]);
    mpcl_tensor_destroy(b->save_mean);
    mpcl_tensor_destroy(b->save_inv_std);
    free(b);
    L->state = NULL;
}

const mpcl__layer_kind mpcl__batch_normalization_layer = {
    .name = "batch_normalization",
    .keras_name = "BatchNormalization",
    .attrs = BN_ATTRS,
    .attr_count = sizeof BN_ATTRS / sizeof BN_ATTRS[0],
    .declare = bn_declare,
    .activation_bytes = bn_activation_bytes,
    .create = bn_create,
    .forward = bn_forward,
    .backward = bn_backward,
    .destroy = bn_destroy,
};
