/* The Conv2D and MaxPooling2D layer kinds through the public model API:
 * gradients against central differences of the loss, forward passes and
 * parameter gradients at odd shapes against a double host reference, a tiny
 * CNN trained in every policy, bad specs refused by name, and the model's
 * text form round trip. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpcl/model.h"
#include "mpcl/train.h"
#include "ref_ops.h"
#include "testutil.h"

/* Params of a model from its text form, trained with sparse categorical
 * cross-entropy on `classes` labels. */
static mpcl_model_params cnn_params(const char *text, size_t classes, size_t max_batch,
                                    mpcl_policy policy) {
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(mpcl_model_spec_parse(NULL, text, &p));
    p.classes = classes;
    p.max_batch = max_batch;
    p.policy = policy;
    return p;
}

static mpcl_model *cnn_model(mpcl_context *ctx, const mpcl_model_params *p) {
    mpcl_model *m = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, p, &m));
    return m;
}

/* B random images of `features` pixels in [-1, 1] (in the model's storage
 * dtype) and labels b % classes; x_host (may be NULL) gets the pixels as
 * stored. */
static void random_batch(mpcl_model *m, uint64_t seed, size_t B, double *x_host, mpcl_tensor **x,
                         mpcl_tensor **y) {
    const mpcl_model_params *p = mpcl_model_params_of(m);
    mpcl_dtype storage = mpcl_model_plan(m)->storage;
    size_t n = B * p->inputs;
    float *xf = malloc(n * sizeof *xf);
    int32_t *labels = malloc(B * sizeof *labels);
    assert_non_null(xf);
    assert_non_null(labels);
    tu_rng rng = tu_rng_make(seed);
    tu_fill_uniform(&rng, xf, n, -1, 1);
    for (size_t i = 0; x_host && i < n; i++) x_host[i] = tu_stored(storage, xf[i]);
    for (size_t b = 0; b < B; b++) labels[b] = (int32_t)(b % p->classes);
    *x = tu_tensor_from(mpcl_model_context(m), storage, B, p->inputs, xf);
    TU_ASSERT_OK(mpcl_tensor_create(mpcl_model_context(m), MPCL_DTYPE_I32, B, 1, y));
    TU_ASSERT_OK(mpcl_tensor_upload_i32(*y, labels, B));
    free(xf);
    free(labels);
}

/* The dropout masks of the training forwards below: each starts the
 * counter here, so every forward draws the same masks. */
#define FD_COUNTER 41

/* The mean loss of a forward: an evaluation, or a training forward (batch
 * statistics, dropout masks of FD_COUNTER + 1) that is not applied. */
static double forward_loss(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *y,
                           bool training) {
    mpcl_loss_stats s;
    if (training) {
        mpcl_model_set_rng_counter(m, FD_COUNTER);
        TU_ASSERT_OK(mpcl_model_forward(m, x, y));
        TU_ASSERT_OK(mpcl_model_read_train_stats(m, &s, true));
    } else {
        TU_ASSERT_OK(mpcl_model_eval_step(m, x, y));
        TU_ASSERT_OK(mpcl_model_read_eval_stats(m, &s, true));
    }
    assert_true(s.terms > 0);
    return s.loss_sum / (double)s.terms;
}

/* forward_loss as a tu_loss_fn. */
typedef struct fd_batch {
    const mpcl_tensor *x, *y;
    bool training;
} fd_batch;

static double fd_loss(mpcl_model *m, void *arg) {
    const fd_batch *b = arg;
    return forward_loss(m, b->x, b->y, b->training);
}

/* ---- gradients against central differences ---- */

/* Every parameter element of a conv2d -> max_pooling2d -> conv2d -> flatten
 * -> dense model (so that both kinds also pass a gradient to their input)
 * against (L(w + h) - L(w - h)) / 2h of the mean loss in float32. The f32
 * loss (~1.4, ulp 1.2e-7, a few roundings per sum) over 2h = 1e-2 gives
 * ~1e-4 of noise; the truncation error is O(h^2) away from the ReLU's and
 * the pooling's kinks (the seed is fixed, so no element sits on one by
 * chance in one run and not the next). */
static size_t check_gradients(mpcl_context *ctx, const char *text, size_t classes, bool training) {
    enum { B = 3 };
    const double h = 5e-3;
    mpcl_model_params p = cnn_params(text, classes, B, MPCL_POLICY_FLOAT32);
    mpcl_model *m = cnn_model(ctx, &p);
    mpcl_tensor *x, *y;
    random_batch(m, 7, B, NULL, &x, &y);
    /* Biases start at zero: give them values, so that the ReLU is not at
     * its kink wherever an input is 0. */
    tu_rng rng = tu_rng_make(11);
    for (size_t i = 0; i < mpcl_model_param_count(m); i++) {
        const mpcl_param_info *r = mpcl_model_param(m, i);
        if (r->rank != 1) continue;
        float *b = malloc(r->count * sizeof *b);
        tu_fill_uniform(&rng, b, r->count, -0.2f, 0.2f);
        TU_ASSERT_OK(mpcl_model_write_param(m, i, MPCL_OPTIM_SLOT_MASTER, b, r->count));
        free(b);
    }
    mpcl_model_set_rng_counter(m, FD_COUNTER);
    TU_ASSERT_OK(mpcl_model_forward(m, x, y));
    TU_ASSERT_OK(mpcl_model_backward(m));
    /* The differences' training forwards read statistics of their own. */
    mpcl_loss_stats s;
    TU_ASSERT_OK(mpcl_model_read_train_stats(m, &s, true));
    fd_batch batch = {x, y, training};
    size_t checked = tu_check_param_gradients(m, h, fd_loss, &batch, 3e-4, 2e-2, 2e-2);
    size_t params = mpcl_model_param_count(m);
    assert_true(checked > 0);
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
    mpcl_model_destroy(m);
    return params;
}

static void gradients_match_finite_differences(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    /* kernel and bias of conv2d_0, conv2d_1 and dense_0 */
    assert_int_equal(check_gradients(ctx,
                                     "input_shape=6,5,2; conv2d filters=3 kernel_size=3 "
                                     "padding=same activation=relu; max_pooling2d; conv2d "
                                     "filters=2 kernel_size=2 activation=tanh; flatten; dense "
                                     "units=4",
                                     4, false),
                     6);
    /* Batch norm (batch statistics) and dropout (a fixed mask) in training,
     * after a convolution and after a dense layer: gamma and beta too. */
    assert_int_equal(check_gradients(ctx,
                                     "input_shape=4,3,2; conv2d filters=3 kernel_size=2 "
                                     "activation=tanh; batch_normalization; dropout rate=0.3; "
                                     "flatten; dense units=5 activation=sigmoid; "
                                     "batch_normalization momentum=0.5; dropout rate=0.5; dense "
                                     "units=3",
                                     3, true),
                     10);
    /* Layer norm over the channels of each pixel and over a dense layer's
     * features, passing its input gradient on to both: gamma and beta too. */
    assert_int_equal(check_gradients(ctx,
                                     "input_shape=4,3,2; conv2d filters=3 kernel_size=2 "
                                     "activation=tanh; layer_normalization; flatten; dense "
                                     "units=5 activation=sigmoid; layer_normalization "
                                     "epsilon=0.01; dense units=3",
                                     3, true),
                     10);
    mpcl_context_destroy(ctx);
}

/* ---- odd shapes against the host reference ---- */

/* The reference's activations of one layer: its output and, for a
 * convolution, its pre-activation. */
typedef struct ref_layer {
    mpcl_layer_spec spec;
    size_t in_shape[3], out_shape[3];
    double *in, *out, *z; /* in: borrowed (the previous layer's out or x) */
    double *w, *b;        /* conv2d: the model's master weights */
    size_t w_param, b_param;
} ref_layer;

static size_t shape_count(const size_t *s) {
    return s[0] * s[1] * s[2];
}

static mpcl_conv2d_shape ref_conv_shape(const ref_layer *l, size_t B) {
    const mpcl_layer_spec *s = &l->spec;
    return (mpcl_conv2d_shape){B,
                               l->in_shape[0],
                               l->in_shape[1],
                               l->in_shape[2],
                               s->kernel_size[0],
                               s->kernel_size[1],
                               s->filters,
                               s->strides[0],
                               s->strides[1],
                               s->padding};
}

static mpcl_pool2d_shape ref_pool_shape(const ref_layer *l, size_t B) {
    const mpcl_layer_spec *s = &l->spec;
    /* strides 0: the pool size (the model's spec has them resolved). */
    size_t sh = s->strides[0] ? s->strides[0] : s->pool_size[0];
    size_t sw = s->strides[1] ? s->strides[1] : s->pool_size[1];
    return (mpcl_pool2d_shape){
        B,  l->in_shape[0], l->in_shape[1], l->in_shape[2], s->pool_size[0], s->pool_size[1], sh,
        sw, s->padding};
}

static bool is_conv(const ref_layer *l) {
    return strcmp(l->spec.kind, "conv2d") == 0;
}

static double *read_param_double(mpcl_model *m, size_t index) {
    const mpcl_param_info *r = mpcl_model_param(m, index);
    float *f = malloc(r->count * sizeof *f);
    assert_non_null(f);
    TU_ASSERT_OK(mpcl_model_read_param(m, index, MPCL_OPTIM_SLOT_MASTER, f, r->count));
    double *d = tu_to_double(f, r->count);
    free(f);
    return d;
}

/* The image layers of params (a flatten ends them) with their shapes, and
 * their weights read from m (conv2d layers with a bias only). */
static size_t ref_layers(mpcl_model *m, const mpcl_model_params *p, ref_layer *out) {
    size_t n = 0, param = 0, shape[3];
    memcpy(shape, p->input_shape, sizeof shape);
    for (size_t l = 0; l < p->layer_count && strcmp(p->layers[l].kind, "flatten") != 0; l++) {
        ref_layer *r = &out[n++];
        memset(r, 0, sizeof *r);
        r->spec = p->layers[l];
        memcpy(r->in_shape, shape, sizeof shape);
        size_t pad;
        if (is_conv(r)) {
            assert_true(r->spec.use_bias);
            r->w_param = param++;
            r->b_param = param++;
            r->w = read_param_double(m, r->w_param);
            r->b = read_param_double(m, r->b_param);
            mpcl_conv2d_shape s = ref_conv_shape(r, 1);
            ref_window(s.height, s.kernel_h, s.stride_h, s.padding, &r->out_shape[0], &pad);
            ref_window(s.width, s.kernel_w, s.stride_w, s.padding, &r->out_shape[1], &pad);
            r->out_shape[2] = s.filters;
        } else {
            mpcl_pool2d_shape s = ref_pool_shape(r, 1);
            ref_window(s.height, s.pool_h, s.stride_h, s.padding, &r->out_shape[0], &pad);
            ref_window(s.width, s.pool_w, s.stride_w, s.padding, &r->out_shape[1], &pad);
            r->out_shape[2] = s.channels;
        }
        memcpy(shape, r->out_shape, sizeof shape);
    }
    return n;
}

static void ref_forward(ref_layer *layers, size_t n, const double *x, size_t B) {
    const double *in = x;
    for (size_t l = 0; l < n; l++) {
        ref_layer *r = &layers[l];
        r->in = (double *)in;
        size_t outs = B * shape_count(r->out_shape);
        r->out = calloc(outs, sizeof *r->out);
        assert_non_null(r->out);
        if (is_conv(r)) {
            mpcl_conv2d_shape s = ref_conv_shape(r, B);
            r->z = calloc(outs, sizeof *r->z);
            assert_non_null(r->z);
            ref_conv2d_forward(r->out, in, r->w, &s);
            ref_bias_act_forward(r->out, r->z, r->out, r->b, outs / s.filters, s.filters,
                                 r->spec.activation);
        } else {
            mpcl_pool2d_shape s = ref_pool_shape(r, B);
            ref_maxpool2d_forward(r->out, NULL, in, &s);
        }
        in = r->out;
    }
}

/* The parameter gradients from d_out of the last layer (overwritten). */
static void ref_backward(ref_layer *layers, size_t n, double *d_out, size_t B, double **d_w,
                         double **d_b) {
    for (size_t l = n; l-- > 0;) {
        ref_layer *r = &layers[l];
        double *d_in = calloc(B * shape_count(r->in_shape), sizeof *d_in);
        assert_non_null(d_in);
        if (is_conv(r)) {
            mpcl_conv2d_shape s = ref_conv_shape(r, B);
            size_t rows = B * shape_count(r->out_shape) / s.filters;
            ref_bias_act_backward(d_out, d_out, r->z, rows, s.filters, r->spec.activation);
            d_b[l] = calloc(s.filters, sizeof *d_b[l]);
            d_w[l] = calloc(s.kernel_h * s.kernel_w * s.channels * s.filters, sizeof *d_w[l]);
            ref_bias_grad(d_b[l], d_out, rows, s.filters);
            ref_conv2d_backward(d_in, d_w[l], d_out, r->in, r->w, &s);
        } else {
            mpcl_pool2d_shape s = ref_pool_shape(r, B);
            ref_maxpool2d_backward(d_in, d_out, r->in, &s);
        }
        free(d_out);
        d_out = d_in;
    }
    free(d_out);
}

/* A model of image layers then a flatten, whose last image layer gives the
 * logits: its forward (an evaluation) and its parameter gradients (a
 * training step's backward) against the reference. */
static void check_against_reference(mpcl_context *ctx, const char *text) {
    enum { B = 2 };
    /* classes 0: any output size (the summary gives it) */
    mpcl_model_params probe = cnn_params(text, 0, B, MPCL_POLICY_FLOAT32);
    mpcl_layer_summary sum[MPCL_MAX_LAYERS];
    size_t count;
    TU_ASSERT_OK(mpcl_model_summary(ctx, &probe, sum, &count));
    size_t classes = sum[count - 1].out_shape[0];
    mpcl_model_params p = cnn_params(text, classes, B, MPCL_POLICY_FLOAT32);
    mpcl_model *m = cnn_model(ctx, &p);
    fprintf(stderr, "%s -> %zu outputs\n", text, classes);
    /* Nonzero biases, so that the reference's bias is tested. */
    tu_rng rng = tu_rng_make(3);
    for (size_t i = 0; i < mpcl_model_param_count(m); i++) {
        const mpcl_param_info *r = mpcl_model_param(m, i);
        if (r->rank != 1) continue;
        float b[64];
        assert_true(r->count <= 64);
        tu_fill_uniform(&rng, b, r->count, -0.5f, 0.5f);
        TU_ASSERT_OK(mpcl_model_write_param(m, i, MPCL_OPTIM_SLOT_MASTER, b, r->count));
    }
    ref_layer layers[MPCL_MAX_LAYERS];
    size_t n = ref_layers(m, &p, layers);
    double *x = malloc(B * p.inputs * sizeof *x);
    assert_non_null(x);
    mpcl_tensor *xt, *yt;
    random_batch(m, 5, B, x, &xt, &yt);
    ref_forward(layers, n, x, B);
    const double *want = layers[n - 1].out;

    /* f32 sums of at most a few dozen products of O(1) terms. */
    float *logits = malloc(B * classes * sizeof *logits);
    assert_non_null(logits);
    TU_ASSERT_OK(mpcl_model_eval_step(m, xt, yt));
    TU_ASSERT_OK(mpcl_model_read_logits(m, logits, B * classes));
    if (!tu_check_close("forward", logits, want, B * classes, 1e-5, 1e-5, 1e-5))
        fail_msg("%s: the forward is not the reference's", text);

    int32_t labels[B];
    for (int b = 0; b < B; b++) labels[b] = (int32_t)(b % classes);
    double loss_sum, *d_logits = calloc(B * classes, sizeof *d_logits);
    size_t correct;
    ref_softmax_xent(want, labels, B, classes, 1.0, &loss_sum, &correct, d_logits);
    double *d_w[MPCL_MAX_LAYERS] = {0}, *d_b[MPCL_MAX_LAYERS] = {0};
    ref_backward(layers, n, d_logits, B, d_w, d_b);
    TU_ASSERT_OK(mpcl_model_forward(m, xt, yt));
    TU_ASSERT_OK(mpcl_model_backward(m));
    for (size_t l = 0; l < n; l++) {
        if (!is_conv(&layers[l])) continue;
        const size_t rows[2] = {layers[l].w_param, layers[l].b_param};
        double *const wants[2] = {d_w[l], d_b[l]};
        for (int k = 0; k < 2; k++) {
            const mpcl_param_info *r = mpcl_model_param(m, rows[k]);
            float *g = tu_param_grads(m, rows[k]);
            if (!tu_check_close(r->name, g, wants[k], r->count, 1e-5, 1e-4, 1e-4))
                fail_msg("%s: %s is not the reference's gradient", text, r->name);
            free(g);
        }
        free(d_w[l]);
        free(d_b[l]);
        free(layers[l].w);
        free(layers[l].b);
        free(layers[l].z);
    }
    for (size_t l = 0; l < n; l++) free(layers[l].out);
    free(logits);
    free(x);
    mpcl_tensor_destroy(xt);
    mpcl_tensor_destroy(yt);
    mpcl_model_destroy(m);
}

static void odd_shapes_match_the_reference(void **state) {
    (void)state;
    static const char *const models[] = {
        /* a 1x1 kernel */
        "input_shape=4,3,3; conv2d filters=2 kernel_size=1 activation=relu; flatten",
        /* a kernel as large as the input: one output pixel */
        "input_shape=5,4,2; conv2d filters=3 kernel_size=5,4 activation=tanh; flatten",
        /* stride 2 over odd sizes, valid (the last row and column unread)
         * and same (padded after only) */
        "input_shape=7,5,2; conv2d filters=2 kernel_size=3,2 strides=2 padding=valid; flatten",
        "input_shape=7,5,2; conv2d filters=2 kernel_size=3 strides=2 padding=same "
        "activation=sigmoid; flatten",
        /* an even kernel with same padding: 1 before, 2 after, at every edge */
        "input_shape=5,5,1; conv2d filters=2 kernel_size=4 padding=same activation=tanh; flatten",
        /* pooling first (no input gradient), then a convolution's input
         * gradient through an odd pooling with padding */
        "input_shape=5,7,2; max_pooling2d pool_size=3 strides=2 padding=same; conv2d filters=2 "
        "kernel_size=1; flatten",
        "input_shape=5,5,2; conv2d filters=2 kernel_size=3 padding=same; max_pooling2d "
        "pool_size=2; conv2d filters=3 kernel_size=2 padding=same; max_pooling2d pool_size=3,1 "
        "strides=1,2 padding=same; flatten",
        /* relu's bias and activation applied after the pooling (model.c),
         * with windows that overlap, and with an odd edge left out */
        "input_shape=6,7,2; conv2d filters=3 kernel_size=3 padding=same activation=relu; "
        "max_pooling2d pool_size=3 strides=1 padding=same; conv2d filters=2 kernel_size=2 "
        "activation=relu; max_pooling2d pool_size=2; flatten",
    };
    mpcl_context *ctx = tu_context();
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        check_against_reference(ctx, models[i]);
    mpcl_context_destroy(ctx);
}

/* ---- every policy trains ---- */

static void every_policy_trains_a_tiny_cnn(void **state) {
    (void)state;
    enum { B = 8, STEPS = 15 };
    static const mpcl_policy policies[] = {MPCL_POLICY_FLOAT32, MPCL_POLICY_MIXED_FLOAT16,
                                           MPCL_POLICY_MIXED_BFLOAT16};
    mpcl_context *ctx = tu_context();
    for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++) {
        mpcl_model_params p = cnn_params(
            "input_shape=6,6,1; conv2d filters=4 kernel_size=3 padding=same "
            "activation=relu; max_pooling2d; flatten; dense units=3",
            3, B, policies[i]);
        p.optim.lr = 1e-2f;
        mpcl_model *m = cnn_model(ctx, &p);
        mpcl_tensor *x, *y;
        random_batch(m, 21, B, NULL, &x, &y);
        double first = 0, last = 0;
        for (int s = 0; s < STEPS; s++) {
            mpcl_loss_stats st;
            TU_ASSERT_OK(mpcl_model_train_step(m, x, y));
            TU_ASSERT_OK(mpcl_model_read_train_stats(m, &st, true));
            double loss = st.loss_sum / (double)st.terms;
            if (!isfinite(loss))
                fail_msg("%s: step %d loss %g", mpcl_policy_name(policies[i]), s, loss);
            if (s == 0) first = loss;
            last = loss;
        }
        fprintf(stderr, "%s: loss %.4f -> %.4f\n", mpcl_policy_name(policies[i]), first, last);
        /* The same 8 samples each step: a falling loss is memorization. */
        assert_true(last < 0.8 * first);
        mpcl_tensor_destroy(x);
        mpcl_tensor_destroy(y);
        mpcl_model_destroy(m);
    }
    mpcl_context_destroy(ctx);
}

/* ---- bad specs ---- */

static void expect_refused(mpcl_context *ctx, const mpcl_model_params *p, const char *needle) {
    mpcl_model *m = (mpcl_model *)0x1;
    assert_int_equal(mpcl_model_create(ctx, p, &m), MPCL_ERR_INVALID_ARG);
    assert_null(m);
    if (!strstr(mpcl_errmsg(), needle))
        fail_msg("message \"%s\" lacks \"%s\"", mpcl_errmsg(), needle);
}

static void bad_specs_are_refused_by_name(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_model_params p = mpcl_model_default_params();
    /* Without filters: the text form and the struct. */
    assert_int_equal(
        mpcl_model_spec_parse(ctx, "input_shape=6,5,2; conv2d kernel_size=3; flatten", &p),
        MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "model spec layer 0: "));
    assert_non_null(strstr(mpcl_errmsg(), "conv2d needs filters"));
    p = cnn_params("input_shape=6,5,2; conv2d filters=2 kernel_size=3; flatten; dense units=4", 4,
                   2, MPCL_POLICY_FLOAT32);
    p.layers[0].filters = 0;
    expect_refused(ctx, &p, "conv2d needs filters");
    assert_non_null(strstr(mpcl_errmsg(), "layer 0: "));
    p.layers[0].filters = 2;
    p.layers[0].kernel_size[0] = p.layers[0].kernel_size[1] = 0;
    expect_refused(ctx, &p, "conv2d needs kernel_size");

    /* A kernel larger than the input with valid padding, and a pool. */
    p = cnn_params("input_shape=6,5,2; conv2d filters=2 kernel_size=3,6; flatten; dense units=4", 4,
                   2, MPCL_POLICY_FLOAT32);
    expect_refused(ctx, &p,
                   "conv2d_0 (kernel_size 3,6 strides 1,1 padding valid) on the input "
                   "(6, 5, 2): ");
    expect_refused(ctx, &p, "kernel_w 6 is larger than the width 5");
    p = cnn_params(
        "input_shape=6,5,2; conv2d filters=2 kernel_size=3 padding=same; "
        "max_pooling2d pool_size=7; flatten; dense units=4",
        4, 2, MPCL_POLICY_FLOAT32);
    expect_refused(ctx, &p,
                   "max_pooling2d_0 (pool_size 7,7 strides 7,7 padding valid) on the "
                   "input (6, 5, 2): ");

    /* Dense straight after a convolution, and a convolution after a flatten. */
    p = cnn_params("input_shape=6,5,2; conv2d filters=2 kernel_size=3; dense units=4", 4, 2,
                   MPCL_POLICY_FLOAT32);
    expect_refused(ctx, &p,
                   "dense_0 takes a flat (features,) input; conv2d_0 gives (4, 3, 2): put a "
                   "flatten layer between them");
    p = cnn_params(
        "input_shape=6,5,2; flatten; conv2d filters=2 kernel_size=3; flatten; dense "
        "units=4",
        4, 2, MPCL_POLICY_FLOAT32);
    expect_refused(ctx, &p,
                   "conv2d_0 takes an image (height, width, channels) input; flatten_0 "
                   "gives (60,)");
    /* A model ending in an image. */
    p = cnn_params("input_shape=6,5,2; conv2d filters=2 kernel_size=3", 4, 2, MPCL_POLICY_FLOAT32);
    expect_refused(ctx, &p, "the last layer, conv2d_0, gives (4, 3, 2)");
    mpcl_context_destroy(ctx);
}

/* ---- the text form ---- */

static void text_form_round_trips(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const char *text =
        "input_shape=8,7,3; conv2d filters=5 kernel_size=3,2 strides=2,1 "
        "padding=same use_bias=false activation=gelu; max_pooling2d pool_size=2,3 "
        "padding=same; conv2d filters=4 kernel_size=1; flatten; dense units=6";
    mpcl_model_params p = cnn_params(text, 6, 4, MPCL_POLICY_FLOAT32), back = p;
    char first[MPCL_MODEL_SPEC_MAX], second[MPCL_MODEL_SPEC_MAX];
    TU_ASSERT_OK(mpcl_model_spec_format(ctx, &p, first, sizeof first));
    fprintf(stderr, "%s\n", first);
    memset(back.layers, 0, sizeof back.layers);
    back.layer_count = 0;
    TU_ASSERT_OK(mpcl_model_spec_parse(ctx, first, &back));
    /* The text holds the resolved specs (the pool's strides 0,0 as its pool
     * size): what mpcl_model_params_layers gives. */
    mpcl_layer_spec resolved[MPCL_MAX_LAYERS];
    size_t resolved_count = 0;
    TU_ASSERT_OK(mpcl_model_params_layers(ctx, &p, resolved, &resolved_count));
    assert_int_equal(resolved_count, p.layer_count);
    assert_int_equal(back.layer_count, p.layer_count);
    assert_int_equal(back.input_rank, 3);
    assert_memory_equal(back.input_shape, p.input_shape, sizeof p.input_shape);
    for (size_t l = 0; l < p.layer_count; l++) {
        const char *kind = p.layers[l].kind;
        assert_string_equal(back.layers[l].kind, kind);
        assert_true(mpcl_layer_attr_count(kind) > 0 || strcmp(kind, "flatten") == 0);
        for (size_t a = 0; a < mpcl_layer_attr_count(kind); a++) {
            char want[64], got[64];
            const char *name = mpcl_layer_attr_name(kind, a);
            TU_ASSERT_OK(mpcl_layer_spec_get(ctx, &resolved[l], name, want, sizeof want));
            TU_ASSERT_OK(mpcl_layer_spec_get(ctx, &back.layers[l], name, got, sizeof got));
            assert_string_equal(got, want);
        }
    }
    TU_ASSERT_OK(mpcl_model_spec_format(ctx, &back, second, sizeof second));
    assert_string_equal(second, first);
    /* What was given, and the defaults written out. */
    assert_non_null(strstr(first,
                           "conv2d filters=5 kernel_size=3,2 strides=2,1 padding=same "
                           "use_bias=false activation=gelu"));
    assert_non_null(strstr(first, "max_pooling2d pool_size=2,3 strides=2,3 padding=same"));
    assert_non_null(strstr(first,
                           "conv2d filters=4 kernel_size=1,1 strides=1,1 padding=valid "
                           "use_bias=true activation=linear"));
    assert_string_equal(mpcl_layer_kind_keras_name("conv2d"), "Conv2D");
    assert_string_equal(mpcl_layer_kind_from_keras("MaxPooling2D"), "max_pooling2d");

    /* The model's own specs show the pool's strides resolved, and the shapes
     * and parameter counts follow Keras'. */
    mpcl_model *m = cnn_model(ctx, &p);
    const mpcl_layer_spec *pool = mpcl_model_layer(m, 1);
    assert_int_equal(pool->strides[0], 2);
    assert_int_equal(pool->strides[1], 3);
    mpcl_layer_summary sum[MPCL_MAX_LAYERS];
    size_t count;
    TU_ASSERT_OK(mpcl_model_summary(ctx, &p, sum, &count));
    assert_int_equal(count, 5);
    /* 8x7 stride 2,1 same: 4x7x5, 3*2*3*5 = 90 weights, no bias */
    assert_string_equal(sum[0].name, "conv2d_0");
    assert_memory_equal(sum[0].out_shape, ((size_t[]){4, 7, 5}), 3 * sizeof(size_t));
    assert_int_equal(sum[0].params, 90);
    /* 4x7 pooled 2x3 by 2x3, same: 2x3x5 */
    assert_memory_equal(sum[1].out_shape, ((size_t[]){2, 3, 5}), 3 * sizeof(size_t));
    assert_int_equal(sum[1].params, 0);
    assert_string_equal(sum[2].name, "conv2d_1");
    assert_int_equal(sum[2].params, 5 * 4 + 4);
    assert_int_equal(sum[3].out_shape[0], 2 * 3 * 4);
    assert_int_equal(sum[4].params, 24 * 6 + 6);
    /* The kernel's Glorot limit uses Keras' fans: kh kw in and kh kw out. */
    const mpcl_param_info *k0 = mpcl_model_param(m, 0);
    assert_string_equal(k0->name, "conv2d_0.kernel");
    assert_int_equal(k0->rank, 4);
    assert_memory_equal(k0->shape, ((size_t[]){3, 2, 3, 5}), 4 * sizeof(size_t));
    float w[90];
    TU_ASSERT_OK(mpcl_model_read_param(m, 0, MPCL_OPTIM_SLOT_MASTER, w, 90));
    double limit = sqrt(6.0 / (6.0 * 3 + 6.0 * 5)), largest = 0;
    for (int i = 0; i < 90; i++) largest = fmax(largest, fabs(w[i]));
    assert_true(largest <= limit && largest > 0.8 * limit);
    mpcl_model_destroy(m);
    mpcl_context_destroy(ctx);
}

/* ---- dropout and batch normalization ---- */

/* The logits of the last step, [B, classes] as floats. */
static float *logits_of(mpcl_model *m, size_t B) {
    size_t n = B * mpcl_model_params_of(m)->classes;
    float *out = malloc(n * sizeof *out);
    assert_non_null(out);
    TU_ASSERT_OK(mpcl_model_read_logits(m, out, n));
    return out;
}

/* Dropout is the identity in evaluation (a model with it gives, bit for
 * bit, the logits of the same model without it: no parameters, so the same
 * initial weights); in training its masks repeat for the same seed and
 * counter, in another model of the same seed too, and change with the
 * counter. */
static void dropout_masks_repeat_and_evaluation_is_identity(void **state) {
    (void)state;
    enum { B = 4, C = 3 };
    mpcl_context *ctx = tu_context();
    mpcl_model_params pd = cnn_params("input_shape=4,3,2; dropout rate=0.5; flatten; dense units=3",
                                      C, B, MPCL_POLICY_FLOAT32);
    mpcl_model_params pn =
        cnn_params("input_shape=4,3,2; flatten; dense units=3", C, B, MPCL_POLICY_FLOAT32);
    mpcl_model *md = cnn_model(ctx, &pd), *md2 = cnn_model(ctx, &pd), *mn = cnn_model(ctx, &pn);
    mpcl_tensor *x, *y;
    random_batch(md, 5, B, NULL, &x, &y);
    size_t n = B * C;
    TU_ASSERT_OK(mpcl_model_eval_step(md, x, y));
    TU_ASSERT_OK(mpcl_model_eval_step(mn, x, y));
    float *eval_d = logits_of(md, B), *eval_n = logits_of(mn, B);
    assert_memory_equal(eval_d, eval_n, n * sizeof *eval_d);

    float *train[4];
    mpcl_model *order[4] = {md, md, md2, md};
    uint64_t counter[4] = {7, 7, 7, 8};
    for (int i = 0; i < 4; i++) {
        mpcl_model_set_rng_counter(order[i], counter[i]);
        TU_ASSERT_OK(mpcl_model_forward(order[i], x, y));
        assert_int_equal(mpcl_model_rng_counter(order[i]), counter[i] + 1);
        train[i] = logits_of(order[i], B);
    }
    assert_memory_equal(train[0], train[1], n * sizeof *train[0]); /* same counter */
    assert_memory_equal(train[0], train[2], n * sizeof *train[0]); /* same seed */
    assert_memory_not_equal(train[0], train[3], n * sizeof *train[0]);
    assert_memory_not_equal(train[0], eval_d, n * sizeof *train[0]);
    for (int i = 0; i < 4; i++) free(train[i]);
    free(eval_d);
    free(eval_n);
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
    mpcl_model_destroy(md);
    mpcl_model_destroy(md2);
    mpcl_model_destroy(mn);
    mpcl_context_destroy(ctx);
}

/* A batch norm alone (its output is the logits): after each training
 * forward its output is the batch normalized by the batch's mean and biased
 * variance, and its moving averages follow Keras' update; evaluation
 * normalizes by the moving averages. Against a double reference, gamma 1
 * and beta 0 as initialized (nothing is applied). */
static void batchnorm_moving_averages_follow_the_reference(void **state) {
    (void)state;
    enum { B = 5, C = 4, STEPS = 3 };
    const double momentum = 0.8, eps = 0.01;
    mpcl_context *ctx = tu_context();
    mpcl_model_params p = cnn_params(
        "input_shape=4; batch_normalization momentum=0.8 "
        "epsilon=0.01",
        C, B, MPCL_POLICY_FLOAT32);
    mpcl_model *m = cnn_model(ctx, &p);
    assert_int_equal(mpcl_model_buffer_count(m), 2);
    assert_string_equal(mpcl_model_buffer(m, 0)->name, "batch_normalization_0.moving_mean");
    assert_string_equal(mpcl_model_buffer(m, 1)->name, "batch_normalization_0.moving_variance");
    double mm[C] = {0, 0, 0, 0}, mv[C] = {1, 1, 1, 1}, x_host[B * C];
    for (int step = 0; step < STEPS; step++) {
        mpcl_tensor *x, *y;
        random_batch(m, 100 + (uint64_t)step, B, x_host, &x, &y);
        TU_ASSERT_OK(mpcl_model_forward(m, x, y));
        float *out = logits_of(m, B);
        for (int c = 0; c < C; c++) {
            double mean = 0, var = 0;
            for (int b = 0; b < B; b++) mean += x_host[b * C + c] / B;
            for (int b = 0; b < B; b++) var += pow(x_host[b * C + c] - mean, 2) / B;
            for (int b = 0; b < B; b++) {
                double want = (x_host[b * C + c] - mean) / sqrt(var + eps);
                if (fabs((double)out[b * C + c] - want) > 1e-5)
                    fail_msg("step %d, row %d, channel %d: %g, want %g", step, b, c,
                             (double)out[b * C + c], want);
            }
            mm[c] = momentum * mm[c] + (1 - momentum) * mean;
            mv[c] = momentum * mv[c] + (1 - momentum) * var;
        }
        free(out);
        float got_mean[C], got_var[C];
        TU_ASSERT_OK(mpcl_model_read_buffer(m, 0, got_mean, C));
        TU_ASSERT_OK(mpcl_model_read_buffer(m, 1, got_var, C));
        for (int c = 0; c < C; c++)
            if (fabs((double)got_mean[c] - mm[c]) > 1e-6 || fabs((double)got_var[c] - mv[c]) > 1e-6)
                fail_msg("step %d channel %d: moving %g %g, want %g %g", step, c,
                         (double)got_mean[c], (double)got_var[c], mm[c], mv[c]);
        /* Evaluation: the moving averages, not the batch's statistics. */
        TU_ASSERT_OK(mpcl_model_eval_step(m, x, y));
        out = logits_of(m, B);
        for (int i = 0; i < B * C; i++) {
            double want = (x_host[i] - mm[i % C]) / sqrt(mv[i % C] + eps);
            if (fabs((double)out[i] - want) > 1e-5)
                fail_msg("eval step %d element %d: %g, want %g", step, i, (double)out[i], want);
        }
        free(out);
        mpcl_tensor_destroy(x);
        mpcl_tensor_destroy(y);
    }
    mpcl_model_destroy(m);
    mpcl_context_destroy(ctx);
}

/* ---- checkpoints ---- */

/* A trainer of every layer kind on `ds` (8x8 images of 3 classes). */
static mpcl_trainer *kinds_trainer(mpcl_context *ctx, const mpcl_dataset *ds, uint32_t epochs,
                                   mpcl_policy policy) {
    mpcl_train_params p = mpcl_train_default_params();
    TU_ASSERT_OK(mpcl_model_spec_parse(
        NULL,
        "input_shape=8,8,1; conv2d filters=4 kernel_size=3 activation=relu; "
        "batch_normalization; max_pooling2d; dropout rate=0.25; flatten; dense units=8 "
        "activation=tanh; batch_normalization momentum=0.9; layer_normalization; dense units=3",
        &p.model));
    p.model.policy = policy;
    p.train_data = ds;
    p.epochs = epochs;
    p.batch = 16;
    p.report_every = 0;
    mpcl_trainer *tr = NULL;
    TU_ASSERT_OK(mpcl_trainer_create(ctx, &p, &tr));
    return tr;
}

/* Two epochs straight, against one epoch, a checkpoint, a new trainer that
 * loads it and the second epoch: the same weights, optimizer state, moving
 * averages and dropout counter, bit for bit, in float32 and mixed_float16. */
static void every_kind_resumes_bit_for_bit(void **state) {
    (void)state;
    enum { N = 40, SIDE = 8 };
    mpcl_context *ctx = tu_context();
    uint8_t pixels[N * SIDE * SIDE], labels[N];
    tu_rng rng = tu_rng_make(3);
    for (size_t i = 0; i < sizeof pixels; i++) pixels[i] = (uint8_t)tu_uniform(&rng, 0, 256);
    for (int i = 0; i < N; i++) labels[i] = (uint8_t)(i % 3);
    mpcl_dataset *ds = NULL;
    TU_ASSERT_OK(mpcl_dataset_from_memory(pixels, labels, N, SIDE, SIDE, 3, &ds));
    char path[] = "/tmp/mpcl-test-kinds-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    mpcl_policy policies[] = {MPCL_POLICY_FLOAT32, MPCL_POLICY_MIXED_FLOAT16};
    for (size_t k = 0; k < 2; k++) {
        mpcl_trainer *straight = kinds_trainer(ctx, ds, 2, policies[k]);
        TU_ASSERT_OK(mpcl_trainer_fit(straight));
        mpcl_trainer *first = kinds_trainer(ctx, ds, 1, policies[k]);
        TU_ASSERT_OK(mpcl_trainer_fit(first));
        TU_ASSERT_OK(mpcl_trainer_save(first, path));
        mpcl_trainer *resumed = kinds_trainer(ctx, ds, 2, policies[k]);
        TU_ASSERT_OK(mpcl_trainer_load(resumed, path));
        TU_ASSERT_OK(mpcl_trainer_fit(resumed));
        size_t na, nb;
        mpcl_model *ma = mpcl_trainer_model(straight), *mb = mpcl_trainer_model(resumed);
        float *a = tu_model_state(ma, &na), *b = tu_model_state(mb, &nb);
        assert_int_equal(na, nb);
        assert_int_equal(mpcl_model_buffer_count(ma), 4);
        if (memcmp(a, b, na * sizeof *a) != 0)
            fail_msg("%s: the resumed run differs from the straight one",
                     mpcl_policy_name(policies[k]));
        assert_int_equal(mpcl_model_rng_counter(ma), mpcl_model_rng_counter(mb));
        assert_true(mpcl_model_rng_counter(ma) > 0);
        free(a);
        free(b);
        mpcl_trainer_destroy(straight);
        mpcl_trainer_destroy(first);
        mpcl_trainer_destroy(resumed);
    }
    unlink(path);
    mpcl_dataset_destroy(ds);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gradients_match_finite_differences),
        cmocka_unit_test(odd_shapes_match_the_reference),
        cmocka_unit_test(every_policy_trains_a_tiny_cnn),
        cmocka_unit_test(bad_specs_are_refused_by_name),
        cmocka_unit_test(text_form_round_trips),
        cmocka_unit_test(dropout_masks_repeat_and_evaluation_is_identity),
        cmocka_unit_test(batchnorm_moving_averages_follow_the_reference),
        cmocka_unit_test(every_kind_resumes_bit_for_bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
