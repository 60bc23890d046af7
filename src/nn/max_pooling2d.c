/* MaxPooling2D: the largest value of each window, per channel, on NHWC
 * images. The forward keeps where each maximum was (argmax), which the
 * backward sends the gradient to (include/mpcl/conv.h). It applies the
 * bias and activation of a convolution below when the model moves them
 * here (nn.h): after the pooling in the forward, before it in the
 * backward. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn/nn.h"

static const mpcl__attr POOL_ATTRS[] = {
    {"pool_size", MPCL_ATTR_PAIR, offsetof(mpcl_layer_spec, pool_size), "2,2", 1, 1 << 16, false},
    /* 0,0: the pool size, as Keras' strides=None; declare resolves it. */
    {"strides", MPCL_ATTR_PAIR, offsetof(mpcl_layer_spec, strides), "0,0", 0, 1 << 16, false},
    {"padding", MPCL_ATTR_PADDING, offsetof(mpcl_layer_spec, padding), "valid", 0, 0, false},
};

typedef struct max_pooling2d {
    mpcl_pool2d_shape shape; /* batch: max_batch; each call sets its own */
    mpcl_tensor *argmax;     /* [max_batch, outputs] i32 */
} max_pooling2d;

static mpcl_status pool_declare(mpcl__layer *L, mpcl__tables *t) {
    (void)t;
    mpcl_context *ctx = L->env->ctx;
    max_pooling2d *p = calloc(1, sizeof *p);
    if (!p) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating a max_pooling2d layer");
    L->state = p;
    mpcl_layer_spec *s = &L->spec;
    p->shape = (mpcl_pool2d_shape){.batch = L->env->max_batch ? L->env->max_batch : 1,
                                   .height = L->in_shape[0],
                                   .width = L->in_shape[1],
                                   .channels = L->in_shape[2],
                                   .pool_h = s->pool_size[0],
                                   .pool_w = s->pool_size[1],
                                   .stride_h = s->strides[0],
                                   .stride_w = s->strides[1],
                                   .padding = s->padding};
    mpcl_window2d win;
    if (mpcl_pool2d_window(NULL, &p->shape, &win) != MPCL_OK) {
        char layer[MPCL__LAYER_NAME_MAX], why[256], input[64];
        snprintf(why, sizeof why, "%s", mpcl_errmsg());
        mpcl__layer_name(layer, sizeof layer, L);
        mpcl__shape_str(input, sizeof input, L->in_rank, L->in_shape);
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "%s (pool_size %zu,%zu strides %zu,%zu padding %s) on the input %s: %s",
                          layer, s->pool_size[0], s->pool_size[1], s->strides[0], s->strides[1],
                          mpcl_padding_name(s->padding), input, why);
    }
    size_t out[3] = {win.out_h, win.out_w, p->shape.channels};
    mpcl__layer_set_output(L, 3, out);
    return MPCL_OK;
}

static double pool_activation_bytes(const mpcl__layer *L, const mpcl__layer_env *env) {
    /* output and d_output, and the argmax in i32 */
    return mpcl__layer_io_bytes(L) + 4.0 * (double)env->max_batch * (double)L->outputs;
}

static mpcl_status pool_create(mpcl__layer *L, const mpcl__tables *t, const mpcl__arenas *a) {
    (void)t;
    (void)a;
    max_pooling2d *p = L->state;
    const mpcl__layer_env *env = L->env;
    size_t B = env->max_batch;
    mpcl_status st;
    if ((st = mpcl_tensor_create(env->ctx, MPCL_DTYPE_I32, B, L->outputs, &p->argmax)) != MPCL_OK)
        return st;
    return mpcl__layer_create_io(L);
}

static mpcl_pool2d_shape batch_shape(const max_pooling2d *p, size_t B) {
    mpcl_pool2d_shape s = p->shape;
    s.batch = B;
    return s;
}

/* A [B, OH*OW*C] tensor of the layer as [B*OH*OW, C]: rows of channels,
 * as the bias and activation take them. */
static mpcl_tensor pixel_rows(const mpcl__layer *L, const mpcl_tensor *t) {
    size_t C = L->out_shape[2];
    return mpcl__tensor_reshape(t, t->rows * (L->outputs / C), C);
}

static mpcl_status pool_forward(mpcl__layer *L, const mpcl_tensor *in, bool training) {
    max_pooling2d *p = L->state;
    size_t B = in->rows;
    mpcl_pool2d_shape s = batch_shape(p, B);
    mpcl_tensor out = mpcl__tensor_rows(L->output, B), argmax = mpcl__tensor_rows(p->argmax, B);
    /* Only a training forward has a backward to keep the argmax for. */
    mpcl_status st = mpcl_maxpool2d_forward(L->env->ctx, &s, &out, training ? &argmax : NULL, in);
    if (st != MPCL_OK || !L->epilogue_below) return st;
    mpcl_tensor h = pixel_rows(L, &out);
    return mpcl__bias_act_forward(L->epilogue_below, L->env->ctx, &h, training);
}

static mpcl_status pool_backward(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in) {
    /* No parameters: the first layer has nothing to compute. */
    if (!d_in) return MPCL_OK;
    max_pooling2d *p = L->state;
    size_t B = in->rows;
    mpcl_pool2d_shape s = batch_shape(p, B);
    mpcl_tensor d_out = mpcl__tensor_rows(L->d_output, B), argmax = mpcl__tensor_rows(p->argmax, B);
    if (L->epilogue_below) {
        /* d_out becomes the gradient of the pooled pre-activation, and the
         * bias gradient its column sums: each window's gradient goes to
         * one pixel below, so these are the sums over the whole map. */
        mpcl_tensor d_h = pixel_rows(L, &d_out), out = mpcl__tensor_rows(L->output, B),
                    h = pixel_rows(L, &out);
        mpcl_status st = mpcl__bias_act_backward(L->epilogue_below, L->env->ctx, &d_h, &h);
        if (st != MPCL_OK) return st;
    }
    /* It overwrites d_in, zeros where no maximum was. */
    return mpcl_maxpool2d_backward(L->env->ctx, &s, d_in, &d_out, &argmax);
}

static void pool_destroy(mpcl__layer *L) {
    max_pooling2d *p = L->state;
    if (!p) return;
    mpcl_tensor_destroy(p->argmax);
    free(p);
    L->state = NULL;
}

/* Each zero stride is the pool size along its axis, as Keras' None. */
static void pool_resolve(mpcl_layer_spec *s) {
    for (int d = 0; d < 2; d++)
        if (s->strides[d] == 0) s->strides[d] = s->pool_size[d];
}

const mpcl__layer_kind mpcl__max_pooling2d_layer = {
    .name = "max_pooling2d",
    .keras_name = "MaxPooling2D",
    .attrs = POOL_ATTRS,
    .attr_count = sizeof POOL_ATTRS / sizeof POOL_ATTRS[0],
    .input_rank = 3,
    .takes_epilogue = true,
    .resolve = pool_resolve,
    .declare = pool_declare,
    .activation_bytes = pool_activation_bytes,
    .create = pool_create,
    .forward = pool_forward,
    .backward = pool_backward,
    .destroy = pool_destroy,
};
