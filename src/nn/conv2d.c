/* Conv2D: y = act(conv(x, W) + b) on NHWC images, kernel W [kh, kw, in
 * channels, filters], bias b [filters]. The convolution is im2col + GEMM
 * (include/mpcl/conv.h) on the env's GEMM path; the bias and activation are
 * Dense's epilogue on the [B*out_h*out_w, filters] view of the output, or
 * the max pooling's above it when the model moves them there (nn.h). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn/nn.h"

static const mpcl__attr CONV2D_ATTRS[] = {
    {"filters", MPCL_ATTR_COUNT, offsetof(mpcl_layer_spec, filters), NULL, 1, 1 << 24, false},
    {"kernel_size", MPCL_ATTR_PAIR, offsetof(mpcl_layer_spec, kernel_size), NULL, 1, 1 << 16,
     false},
    {"strides", MPCL_ATTR_PAIR, offsetof(mpcl_layer_spec, strides), "1,1", 1, 1 << 16, false},
    {"padding", MPCL_ATTR_PADDING, offsetof(mpcl_layer_spec, padding), "valid", 0, 0, false},
    {"use_bias", MPCL_ATTR_BOOL, offsetof(mpcl_layer_spec, use_bias), "true", 0, 0, false},
    {"activation", MPCL_ATTR_ACTIVATION, offsetof(mpcl_layer_spec, activation), "linear", 0, 0,
     false},
};

typedef struct conv2d {
    mpcl_conv2d_shape shape; /* batch: max_batch; each call sets its own */
    size_t pixels;           /* out_h * out_w: the GEMM rows per image */
    size_t kernel_row;
    mpcl__bias_act epilogue;
    mpcl_tensor *w;       /* view: [kh*kw*channels, filters] of the working arena */
    mpcl_tensor *dw;      /* view: the same of the gradient arena */
    mpcl_tensor *columns; /* [max_batch * pixels, kh*kw*channels] workspace */
    /* The columns hold the last training forward's input, untouched since:
     * the backward takes them as they are. */
    bool columns_hold_input;
} conv2d;

/* The convolution of a layer's spec over its input, for batches of
 * max_batch (at least 1: a summary may not name one). */
static mpcl_conv2d_shape conv_shape(const mpcl__layer *L) {
    const mpcl_layer_spec *s = &L->spec;
    return (mpcl_conv2d_shape){.batch = L->env->max_batch ? L->env->max_batch : 1,
                               .height = L->in_shape[0],
                               .width = L->in_shape[1],
                               .channels = L->in_shape[2],
                               .kernel_h = s->kernel_size[0],
                               .kernel_w = s->kernel_size[1],
                               .filters = s->filters,
                               .stride_h = s->strides[0],
                               .stride_w = s->strides[1],
                               .padding = s->padding};
}

static mpcl_status conv2d_declare(mpcl__layer *L, mpcl__tables *t) {
    mpcl_context *ctx = L->env->ctx;
    conv2d *c = calloc(1, sizeof *c);
    if (!c) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating a conv2d layer");
    L->state = c;
    char layer[MPCL__LAYER_NAME_MAX], name[MPCL__ROW_NAME_BUF];
    mpcl__layer_name(layer, sizeof layer, L);
    c->shape = conv_shape(L);
    mpcl_window2d win;
    if (mpcl_conv2d_window(NULL, &c->shape, &win) != MPCL_OK) {
        char why[256], input[64];
        snprintf(why, sizeof why, "%s", mpcl_errmsg());
        mpcl__shape_str(input, sizeof input, L->in_rank, L->in_shape);
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "%s (kernel_size %zu,%zu strides %zu,%zu padding %s) on the input %s: %s",
                          layer, c->shape.kernel_h, c->shape.kernel_w, c->shape.stride_h,
                          c->shape.stride_w, mpcl_padding_name(c->shape.padding), input, why);
    }
    c->pixels = win.out_h * win.out_w;
    size_t out[3] = {win.out_h, win.out_w, c->shape.filters};
    mpcl__layer_set_output(L, 3, out);
    size_t kshape[4] = {c->shape.kernel_h, c->shape.kernel_w, c->shape.channels, c->shape.filters};
    snprintf(name, sizeof name, "%s.kernel", layer);
    mpcl_status st =
        mpcl__params_add(ctx, &t->params, name, 4, kshape, MPCL__INIT_GLOROT, &c->kernel_row);
    if (st != MPCL_OK) return st;
    return mpcl__bias_act_add_rows(ctx, t, layer, c->shape.filters, L->spec.use_bias, &c->epilogue);
}

/* Elements of the columns workspace: max_batch * pixels rows of a patch. */
static double columns_elements(const conv2d *c, size_t max_batch) {
    return (double)max_batch * (double)c->pixels *
           (double)(c->shape.kernel_h * c->shape.kernel_w * c->shape.channels);
}

static double conv2d_activation_bytes(const mpcl__layer *L, const mpcl__layer_env *env) {
    const conv2d *c = L->state;
    double storage = (double)mpcl_dtype_size(env->storage);
    return mpcl__layer_io_bytes(L) + columns_elements(c, env->max_batch) * storage +
           mpcl__bias_act_bytes(L->spec.activation, env->max_batch * c->pixels, c->shape.filters,
                                env->storage);
}

static mpcl_status conv2d_create(mpcl__layer *L, const mpcl__tables *t, const mpcl__arenas *a) {
    conv2d *c = L->state;
    const mpcl__layer_env *env = L->env;
    size_t off = t->params.rows[c->kernel_row].offset;
    size_t patch = c->shape.kernel_h * c->shape.kernel_w * c->shape.channels;
    size_t B = env->max_batch, f = c->shape.filters;
    mpcl_status st;
    if ((st = mpcl__tensor_view(a->working, off, patch, f, &c->w)) != MPCL_OK ||
        (st = mpcl__tensor_view(a->grads, off, patch, f, &c->dw)) != MPCL_OK ||
        (st = mpcl_tensor_create(env->ctx, env->storage, B * c->pixels, patch, &c->columns)) !=
            MPCL_OK ||
        (st = mpcl__layer_create_io(L)) != MPCL_OK)
        return st;
    L->epilogue = &c->epilogue;
    return mpcl__bias_act_create(&c->epilogue, env, t, a, B * c->pixels, L->spec.activation);
}

/* The shape and the workspace rows of a batch of B images. */
static mpcl_conv2d_shape batch_shape(const conv2d *c, size_t B, mpcl_tensor *columns) {
    *columns = mpcl__tensor_rows(c->columns, B * c->pixels);
    mpcl_conv2d_shape s = c->shape;
    s.batch = B;
    return s;
}

static mpcl_status conv2d_forward(mpcl__layer *L, const mpcl_tensor *in, bool training) {
    conv2d *c = L->state;
    const mpcl__layer_env *env = L->env;
    size_t B = in->rows;
    mpcl_tensor columns, out = mpcl__tensor_rows(L->output, B);
    mpcl_conv2d_shape s = batch_shape(c, B, &columns);
    mpcl_status st = mpcl_conv2d_forward(env->ctx, env->gemm, &s, &out, in, c->w, &columns);
    c->columns_hold_input = st == MPCL_OK && training;
    if (st != MPCL_OK || !L->epilogue) return st;
    mpcl_tensor h = mpcl__tensor_reshape(&out, B * c->pixels, s.filters);
    return mpcl__bias_act_forward(L->epilogue, env->ctx, &h, training);
}

static mpcl_status conv2d_backward(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in) {
    conv2d *c = L->state;
    const mpcl__layer_env *env = L->env;
    size_t B = in->rows;
    mpcl_tensor columns, d_out = mpcl__tensor_rows(L->d_output, B),
                         out = mpcl__tensor_rows(L->output, B);
    mpcl_conv2d_shape s = batch_shape(c, B, &columns);
    mpcl_tensor dpre = mpcl__tensor_reshape(&d_out, B * c->pixels, s.filters),
                h = mpcl__tensor_reshape(&out, B * c->pixels, s.filters);
    /* A moved epilogue's backward ran in the layer above: d_out is then the
     * gradient of the GEMM's output already. */
    if (L->epilogue) {
        mpcl_status st = mpcl__bias_act_backward(L->epilogue, env->ctx, &dpre, &h);
        if (st != MPCL_OK) return st;
    }
    /* Without d_in (the first layer) the op skips the input's gradient. The
     * model runs each backward after its step's training forward, on the
     * same input; the backward then overwrites the columns. */
    bool reuse = c->columns_hold_input;
    c->columns_hold_input = false;
    return mpcl_conv2d_backward(env->ctx, env->gemm, &s, d_in, c->dw, &d_out, in, c->w, &columns,
                                reuse);
}

static void conv2d_destroy(mpcl__layer *L) {
    conv2d *c = L->state;
    if (!c) return;
    mpcl__bias_act_destroy(&c->epilogue);
    mpcl_tensor_destroy(c->w);
    mpcl_tensor_destroy(c->dw);
    mpcl_tensor_destroy(c->columns);
    free(c);
    L->state = NULL;
}

const mpcl__layer_kind mpcl__conv2d_layer = {
    .name = "conv2d",
    .keras_name = "Conv2D",
    .attrs = CONV2D_ATTRS,
    .attr_count = sizeof CONV2D_ATTRS / sizeof CONV2D_ATTRS[0],
    .input_rank = 3,
    .declare = conv2d_declare,
    .activation_bytes = conv2d_activation_bytes,
    .create = conv2d_create,
    .forward = conv2d_forward,
    .backward = conv2d_backward,
    .destroy = conv2d_destroy,
};
