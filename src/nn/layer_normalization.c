/* LayerNormalization over the last axis (Keras' axis=-1): each sample's
 * values at each position -- a (T, C) or (H, W, C) input's C channels, a
 * flat input's features -- normalized by their own mean and variance, y =
 * gamma (x - mean) / sqrt(var + epsilon) + beta, the same in training and
 * evaluation. The statistics are f32 in every policy, computed on the
 * device in two passes; x and y are in the storage dtype. gamma and beta
 * ([C], f32 masters) train; there are no buffers. The launchers of
 * cl/layernorm.cl live here: the layer is their one caller. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "runtime/runtime.h"

static const mpcl__attr LN_ATTRS[] = {
    {"epsilon", MPCL_ATTR_REAL, offsetof(mpcl_layer_spec, epsilon), "0.001", 1e-30, 1, false},
};

enum { GAMMA, BETA, ROWS };

/* The kernels of one layout (cl/layernorm.cl): a work-group per row (per
 * channel for gamma's and beta's gradients), or work-items over the rows,
 * which a CPU runs faster (MPCL_NORM: group or row; unset, row on CPU
 * devices and group elsewhere). The row layout's backward is one pass over
 * blocks of rows, dx and the parameters' partial sums (backward_rows),
 * then those sums added (params_sum). */
typedef struct ln_layout {
    const char *forward;
    const char *backward_params, *backward_x; /* the group layout's */
    const char *backward_rows, *params_sum;   /* the row layout's */
    bool per_item;
} ln_layout;

static const ln_layout LAYOUTS[] = {
    {.forward = "mpcl_layernorm_forward",
     .backward_params = "mpcl_layernorm_backward_params",
     .backward_x = "mpcl_layernorm_backward_x"},
    {.forward = "mpcl_layernorm_forward_row",
     .backward_rows = "mpcl_layernorm_backward_rows",
     .params_sum = "mpcl_layernorm_params_sum",
     .per_item = true},
};

static const ln_layout *layout_for(mpcl_context *ctx) {
    const char *v = mpcl__env_value(MPCL_ENV_NORM);
    bool per_item =
        v ? strcmp(v, "row") == 0 : mpcl_context_device(ctx)->type == MPCL_DEVICE_TYPE_CPU;
    return &LAYOUTS[per_item];
}

typedef struct ln {
    const ln_layout *layout;
    size_t channels;
    size_t row[ROWS];
    mpcl_tensor *param[ROWS];              /* [1, C] f32 views of the master arena */
    mpcl_tensor *grad[ROWS];               /* [1, C] views of the gradient arena */
    mpcl_tensor *save_mean, *save_inv_std; /* f32, one per normalized row, for backward */
} ln;

static mpcl_status ln_declare(mpcl__layer *L, mpcl__tables *t) {
    mpcl_context *ctx = L->env->ctx;
    ln *n = calloc(1, sizeof *n);
    if (!n) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating a layer norm layer");
    L->state = n;
    mpcl__layer_set_output(L, L->in_rank, L->in_shape);
    n->channels = L->in_shape[L->in_rank - 1];
    char layer[MPCL__LAYER_NAME_MAX], name[MPCL__ROW_NAME_BUF];
    mpcl__layer_name(layer, sizeof layer, L);
    static const char *const params[ROWS] = {"gamma", "beta"};
    static const mpcl__param_init init[ROWS] = {MPCL__INIT_ONES, MPCL__INIT_ZEROS};
    mpcl_status st = MPCL_OK;
    for (int i = 0; i < ROWS && st == MPCL_OK; i++) {
        snprintf(name, sizeof name, "%s.%s", layer, params[i]);
        st = mpcl__params_add(ctx, &t->params, name, 1, &n->channels, init[i], &n->row[i]);
    }
    return st;
}

/* Rows normalized for a batch of max_batch: one per sample and position. */
static size_t max_rows(const mpcl__layer *L, const mpcl__layer_env *env) {
    const ln *n = L->state;
    return env->max_batch * (L->inputs / n->channels);
}

static double ln_activation_bytes(const mpcl__layer *L, const mpcl__layer_env *env) {
    return mpcl__layer_io_bytes(L) + 2.0 * (double)max_rows(L, env) * sizeof(float);
}

static mpcl_status ln_create(mpcl__layer *L, const mpcl__tables *t, const mpcl__arenas *a) {
    ln *n = L->state;
    const mpcl__layer_env *env = L->env;
    size_t C = n->channels, rows = max_rows(L, env);
    mpcl_status st = MPCL_OK;
    for (int i = 0; i < ROWS && st == MPCL_OK; i++) {
        size_t off = t->params.rows[n->row[i]].offset;
        if ((st = mpcl__tensor_view(a->master, off, 1, C, &n->param[i])) == MPCL_OK)
            st = mpcl__tensor_view(a->grads, off, 1, C, &n->grad[i]);
    }
    if (st == MPCL_OK) st = mpcl_tensor_create(env->ctx, MPCL_DTYPE_F32, 1, rows, &n->save_mean);
    if (st == MPCL_OK) st = mpcl_tensor_create(env->ctx, MPCL_DTYPE_F32, 1, rows, &n->save_inv_std);
    if (st == MPCL_OK) st = mpcl__layer_create_io(L);
    n->layout = layout_for(env->ctx);
    return st;
}

/* Launches `name` over n rows (or channels): n work-groups of
 * MPCL_ABI_BATCHNORM_WG items, the group size of batchnorm.cl's reduction,
 * which cl/layernorm.cl reuses; or n work-items. */
static mpcl_status launch(const ln *n, mpcl_context *ctx, cl_kernel k, const char *name,
                          size_t count) {
    /* Few items go one per group, so that every core gets some. */
    if (n->layout->per_item)
        return mpcl__launch_1d(ctx, k, name, count, count < 256 ? 1 : mpcl__local_size(ctx, k, 64));
    return mpcl__launch_1d(ctx, k, name, count * MPCL_ABI_BATCHNORM_WG, MPCL_ABI_BATCHNORM_WG);
}

static mpcl_status ln_forward(mpcl__layer *L, const mpcl_tensor *in, bool training) {
    (void)training; /* the same normalization either way; the saves are cheap */
    ln *n = L->state;
    mpcl_context *ctx = L->env->ctx;
    mpcl_tensor rows = mpcl__tensor_rows(L->output, in->rows);
    mpcl_tensor y = mpcl__tensor_by_last(&rows, n->channels),
                x = mpcl__tensor_by_last(in, n->channels);
    const char *name = n->layout->forward;
    TRY(mpcl__check_count(ctx, &x, name));
    cl_kernel k;
    TRY(mpcl__kernel(ctx, x.dtype, name, &k));
    float eps = (float)L->spec.epsilon;
    cl_uint cols = (cl_uint)x.cols, count = (cl_uint)x.rows;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(y.mem), MPCL_ARG(x.mem),
                       MPCL_ARG(n->param[GAMMA]->mem), MPCL_ARG(n->param[BETA]->mem),
                       MPCL_ARG(n->save_mean->mem), MPCL_ARG(n->save_inv_std->mem), MPCL_ARG(eps),
                       MPCL_ARG(cols), MPCL_ARG(count), MPCL_ARGS_END));
    return launch(n, ctx, k, name, x.rows);
}

/* One position: in is its [1, C] row, normalized as any other into the
 * first row of the output. */
static mpcl_status ln_forward_step(mpcl__layer *L, const mpcl_tensor *in, size_t position) {
    (void)position;
    return ln_forward(L, in, false);
}

/* d_gamma and d_beta (the group layout): column sums over the rows of dy
 * and dy xhat, a work-group per channel. */
static mpcl_status backward_params(ln *n, mpcl_context *ctx, const mpcl_tensor *dy,
                                   const mpcl_tensor *x) {
    const char *name = n->layout->backward_params;
    cl_kernel k;
    TRY(mpcl__kernel(ctx, x->dtype, name, &k));
    cl_uint rows = (cl_uint)x->rows, cols = (cl_uint)x->cols;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(n->grad[GAMMA]->mem), MPCL_ARG(n->grad[BETA]->mem),
                       MPCL_ARG(dy->mem), MPCL_ARG(x->mem), MPCL_ARG(n->save_mean->mem),
                       MPCL_ARG(n->save_inv_std->mem), MPCL_ARG(rows), MPCL_ARG(cols),
                       MPCL_ARGS_END));
    return launch(n, ctx, k, name, x->cols);
}

/* dx, a work-group per row (the group layout), plus addend's rows where it
 * is not NULL (`d_in_addend`: a skip connection's gradient summed in the
 * same pass). */
static mpcl_status backward_x(ln *n, mpcl_context *ctx, mpcl_tensor *dx, const mpcl_tensor *dy,
                              const mpcl_tensor *x, const mpcl_tensor *addend) {
    const char *name = n->layout->backward_x;
    cl_kernel k;
    TRY(mpcl__kernel(ctx, x->dtype, name, &k));
    cl_uint cols = (cl_uint)x->cols, rows = (cl_uint)x->rows, add = addend != NULL;
    cl_mem addend_mem = addend ? addend->mem : dx->mem; /* unread without add */
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(dx->mem), MPCL_ARG(dy->mem), MPCL_ARG(x->mem),
                       MPCL_ARG(n->param[GAMMA]->mem), MPCL_ARG(n->save_mean->mem),
                       MPCL_ARG(n->save_inv_std->mem), MPCL_ARG(cols), MPCL_ARG(rows),
                       MPCL_ARG(addend_mem), MPCL_ARG(add), MPCL_ARGS_END));
    return launch(n, ctx, k, name, x->rows);
}

/* The row layout's backward: dx where it is wanted (dx not NULL) and the
 * parameters' gradients in one pass over blocks of MPCL_ABI_LN_BLOCK_ROWS
 * rows, which leave their column sums in a workspace; params_sum adds them
 * in block order, so the gradients are the same bits with or without dx. */
static mpcl_status backward_rows(ln *n, mpcl_context *ctx, mpcl_tensor *dx, const mpcl_tensor *dy,
                                 const mpcl_tensor *x, const mpcl_tensor *addend) {
    const char *name = n->layout->backward_rows, *sum = n->layout->params_sum;
    cl_uint cols = (cl_uint)x->cols, rows = (cl_uint)x->rows;
    cl_uint items = (rows + MPCL_ABI_LN_BLOCK_ROWS - 1) / MPCL_ABI_LN_BLOCK_ROWS;
    cl_uint add = addend != NULL, want_dx = dx != NULL;
    cl_mem dx_mem = dx ? dx->mem : dy->mem;             /* unwritten without want_dx */
    cl_mem addend_mem = addend ? addend->mem : dy->mem; /* unread without add */
    cl_mem partials;
    TRY(mpcl__workspace(ctx, MPCL__WORKSPACE_NORM_PARTIALS,
                        (size_t)items * 2 * cols * sizeof(float), &partials));
    cl_kernel k;
    TRY(mpcl__kernel(ctx, x->dtype, name, &k));
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(dx_mem), MPCL_ARG(partials), MPCL_ARG(dy->mem),
                       MPCL_ARG(x->mem), MPCL_ARG(n->param[GAMMA]->mem),
                       MPCL_ARG(n->save_mean->mem), MPCL_ARG(n->save_inv_std->mem), MPCL_ARG(cols),
                       MPCL_ARG(rows), MPCL_ARG(addend_mem), MPCL_ARG(add), MPCL_ARG(want_dx),
                       MPCL_ARGS_END));
    TRY(launch(n, ctx, k, name, items));
    TRY(mpcl__kernel(ctx, x->dtype, sum, &k));
    TRY(mpcl__set_args(ctx, k, sum, MPCL_ARG(n->grad[GAMMA]->mem), MPCL_ARG(n->grad[BETA]->mem),
                       MPCL_ARG(partials), MPCL_ARG(items), MPCL_ARG(cols), MPCL_ARGS_END));
    return launch(n, ctx, k, sum, (cols + 7) / 8);
}

static mpcl_status ln_backward(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in) {
    ln *n = L->state;
    mpcl_context *ctx = L->env->ctx;
    mpcl_tensor d_rows = mpcl__tensor_rows(L->d_output, in->rows);
    mpcl_tensor dy = mpcl__tensor_by_last(&d_rows, n->channels),
                x = mpcl__tensor_by_last(in, n->channels), dx = {0}, addend = {0};
    if (d_in) dx = mpcl__tensor_by_last(d_in, n->channels);
    if (d_in && L->d_in_addend) addend = mpcl__tensor_by_last(L->d_in_addend, n->channels);
    const mpcl_tensor *add = d_in && L->d_in_addend ? &addend : NULL;
    if (n->layout->per_item) return backward_rows(n, ctx, d_in ? &dx : NULL, &dy, &x, add);
    TRY(backward_params(n, ctx, &dy, &x));
    return d_in ? backward_x(n, ctx, &dx, &dy, &x, add) : MPCL_OK;
}

static void ln_destroy(mpcl__layer *L) {
    ln *n = L->state;
    if (!n) return;
    for (int i = 0; i < ROWS; i++) {
        mpcl_tensor_destroy(n->param[i]);
        mpcl_tensor_destroy(n->grad[i]);
    }
    mpcl_tensor_destroy(n->save_mean);
    mpcl_tensor_destroy(n->save_inv_std);
    free(n);
    L->state = NULL;
}

const mpcl__layer_kind mpcl__layer_normalization_layer = {
    .name = "layer_normalization",
    .keras_name = "LayerNormalization",
    .attrs = LN_ATTRS,
    .attr_count = sizeof LN_ATTRS / sizeof LN_ATTRS[0],
    .declare = ln_declare,
    .activation_bytes = ln_activation_bytes,
    .create = ln_create,
    .forward = ln_forward,
    .backward = ln_backward,
    .forward_step = ln_forward_step,
    .destroy = ln_destroy,
};
