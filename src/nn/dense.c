/* Dense: y = act(x W + b), kernel W [inputs, units], bias b [units]. */
#include <stdio.h>
#include <stdlib.h>

#include "nn/nn.h"

typedef struct dense {
    size_t kernel_row, bias_row;
    mpcl_tensor *w;  /* view: [inputs, units] of the working arena (storage) */
    mpcl_tensor *b;  /* view: [1, units] of the master arena (f32, read by the bias kernel) */
    mpcl_tensor *dw; /* view: [inputs, units] of the gradient arena */
    mpcl_tensor *db; /* view: [1, units] of the gradient arena */
    mpcl_tensor *z;  /* [max_batch, units]: x W + b, only when act' needs it */
} dense;

static bool keeps_preactivation(mpcl_activation act) {
    return mpcl_activation_saved(act) == MPCL_ACT_SAVED_PREACT;
}

static mpcl_status dense_declare(mpcl__layer *L, mpcl__param_table *t) {
    mpcl_context *ctx = L->env->ctx;
    if (L->spec.units == 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "dense layer %zu has 0 units", L->index);
    if ((unsigned)L->spec.activation >= MPCL_ACT_COUNT)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "dense layer %zu: unknown activation %d",
                          L->index, (int)L->spec.activation);
    dense *d = calloc(1, sizeof *d);
    if (!d) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating a dense layer");
    L->state = d;
    L->outputs = L->spec.units;
    char name[48];
    size_t kshape[2] = {L->inputs, L->spec.units}, bshape[1] = {L->spec.units};
    snprintf(name, sizeof name, "dense_%zu.kernel", L->index);
    mpcl_status st = mpcl__params_add(ctx, t, name, 2, kshape, &d->kernel_row);
    if (st != MPCL_OK) return st;
    snprintf(name, sizeof name, "dense_%zu.bias", L->index);
    st = mpcl__params_add(ctx, t, name, 1, bshape, &d->bias_row);
    return st;
}

static double dense_activation_bytes(const mpcl__layer *L, const mpcl__layer_env *env) {
    double buffers = keeps_preactivation(L->spec.activation) ? 3 : 2; /* output, d_output, z */
    return buffers * (double)env->max_batch * (double)L->outputs *
           (double)mpcl_dtype_size(env->storage);
}

static mpcl_status dense_create(mpcl__layer *L, const mpcl__param_table *t, const mpcl__arenas *a) {
    dense *d = L->state;
    const mpcl__layer_env *env = L->env;
    const mpcl_param_info *k = &t->rows[d->kernel_row], *b = &t->rows[d->bias_row];
    size_t in = L->inputs, out = L->outputs, B = env->max_batch;
    mpcl_status st;
    if ((st = mpcl__tensor_view(a->working, k->offset, in, out, &d->w)) != MPCL_OK ||
        (st = mpcl__tensor_view(a->master, b->offset, 1, out, &d->b)) != MPCL_OK ||
        (st = mpcl__tensor_view(a->grads, k->offset, in, out, &d->dw)) != MPCL_OK ||
        (st = mpcl__tensor_view(a->grads, b->offset, 1, out, &d->db)) != MPCL_OK ||
        (st = mpcl_tensor_create(env->ctx, env->storage, B, out, &L->output)) != MPCL_OK ||
        (st = mpcl_tensor_create(env->ctx, env->storage, B, out, &L->d_output)) != MPCL_OK)
        return st;
    if (keeps_preactivation(L->spec.activation))
        st = mpcl_tensor_create(env->ctx, env->storage, B, out, &d->z);
    return st;
}

static mpcl_status dense_forward(mpcl__layer *L, const mpcl_tensor *in, bool training) {
    dense *d = L->state;
    const mpcl__layer_env *env = L->env;
    mpcl_tensor h = mpcl__tensor_rows(L->output, in->rows);
    mpcl_status st = mpcl_gemm(env->ctx, env->gemm, false, false, 1.0f, in, d->w, 0.0f, &h);
    if (st != MPCL_OK) return st;
    if (training && d->z) {
        mpcl_tensor z = mpcl__tensor_rows(d->z, in->rows);
        return mpcl_bias_act_forward_z(env->ctx, &h, &z, &h, d->b, L->spec.activation);
    }
    return mpcl_bias_act_forward(env->ctx, &h, &h, d->b, L->spec.activation);
}

static mpcl_status dense_backward(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in) {
    dense *d = L->state;
    const mpcl__layer_env *env = L->env;
    size_t B = in->rows;
    mpcl_tensor dpre = mpcl__tensor_rows(L->d_output, B);
    mpcl_status st;
    if (L->spec.activation != MPCL_ACT_IDENTITY) {
        /* In place: d_output becomes the gradient of the pre-activation, and
         * the bias gradient its column sums, in one launch. */
        mpcl_tensor saved = mpcl__tensor_rows(d->z ? d->z : L->output, B);
        st = mpcl_bias_act_backward_grad(env->ctx, &dpre, d->db, &dpre, &saved, L->spec.activation);
    } else {
        st = mpcl_bias_grad(env->ctx, d->db, &dpre);
    }
    if (st == MPCL_OK)
        st = mpcl_gemm(env->ctx, env->gemm, true, false, 1.0f, in, &dpre, 0.0f, d->dw);
    if (st == MPCL_OK && d_in)
        st = mpcl_gemm(env->ctx, env->gemm, false, true, 1.0f, &dpre, d->w, 0.0f, d_in);
    return st;
}

static void dense_destroy(mpcl__layer *L) {
    dense *d = L->state;
    if (!d) return;
    mpcl_tensor *all[] = {d->w, d->b, d->dw, d->db, d->z};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    free(d);
    L->state = NULL;
}

const mpcl__layer_kind mpcl__dense_layer = {
    .name = "dense",
    .declare = dense_declare,
    .activation_bytes = dense_activation_bytes,
    .create = dense_create,
    .forward = dense_forward,
    .backward = dense_backward,
    .destroy = dense_destroy,
};
