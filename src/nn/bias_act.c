/* The epilogue Dense and Conv2D share: the bias (optional) and the
 * activation after a GEMM, and their backward. */
#include <stdio.h>

#include "nn/nn.h"

static bool keeps_preactivation(mpcl_activation act) {
    return mpcl_activation_saved(act) == MPCL_ACT_SAVED_PREACT;
}

double mpcl__bias_act_bytes(mpcl_activation act, size_t rows, size_t cols, mpcl_dtype storage) {
    return keeps_preactivation(act) ? (double)rows * (double)cols * (double)mpcl_dtype_size(storage)
                                    : 0.0;
}

mpcl_status mpcl__bias_act_add_rows(mpcl_context *ctx, mpcl__tables *t, const char *layer,
                                    size_t units, bool use_bias, mpcl__bias_act *e) {
    e->units = units;
    e->use_bias = use_bias;
    if (!use_bias) return MPCL_OK;
    char name[MPCL__ROW_NAME_BUF];
    snprintf(name, sizeof name, "%s.bias", layer);
    return mpcl__params_add(ctx, &t->params, name, 1, &units, MPCL__INIT_ZEROS, &e->bias_row);
}

mpcl_status mpcl__bias_act_create(mpcl__bias_act *e, const mpcl__layer_env *env,
                                  const mpcl__tables *t, const mpcl__arenas *a, size_t rows,
                                  mpcl_activation act) {
    mpcl_status st;
    e->act = act;
    if (e->use_bias) {
        size_t off = t->params.rows[e->bias_row].offset;
        if ((st = mpcl__tensor_view(a->master, off, 1, e->units, &e->b)) != MPCL_OK ||
            (st = mpcl__tensor_view(a->grads, off, 1, e->units, &e->db)) != MPCL_OK)
            return st;
    } else {
        /* The bias kernel reads a bias: without one it reads zeros (a
         * new tensor is zero-filled). */
        if ((st = mpcl_tensor_create(env->ctx, MPCL_DTYPE_F32, 1, e->units, &e->b)) != MPCL_OK)
            return st;
    }
    if (keeps_preactivation(act))
        return mpcl_tensor_create(env->ctx, env->storage, rows, e->units, &e->z);
    return MPCL_OK;
}

mpcl_status mpcl__bias_act_gemm_forward(mpcl__bias_act *e, const mpcl__layer_env *env,
                                        const mpcl_tensor *x, const mpcl_tensor *w, mpcl_tensor *h,
                                        bool training, const mpcl_tensor *addend) {
    if (e->act == MPCL_ACT_IDENTITY) {
        mpcl__gemm_epilogue epi = {e->use_bias ? e->b : NULL, addend};
        return mpcl__gemm_fused(env->ctx, env->gemm, false, false, x, w, h, &epi);
    }
    /* An activation keeps its own pass: in the GEMM's stores, GELU on the
     * GPT's [2048, 512] (and relu) made the GEMM slower by what the pass
     * took, or more (its exp and division are the cost, not the memory). */
    TRY(mpcl_gemm(env->ctx, env->gemm, false, false, 1.0f, x, w, 0.0f, h));
    TRY(mpcl__bias_act_forward(e, env->ctx, h, training));
    return addend ? mpcl_add(env->ctx, h, h, addend) : MPCL_OK;
}

mpcl_status mpcl__bias_act_forward(mpcl__bias_act *e, mpcl_context *ctx, mpcl_tensor *h,
                                   bool training) {
    if (training && e->z) {
        mpcl_tensor z = mpcl__tensor_rows(e->z, h->rows);
        return mpcl_bias_act_forward_z(ctx, h, &z, h, e->b, e->act);
    }
    return mpcl_bias_act_forward(ctx, h, h, e->b, e->act);
}

mpcl_status mpcl__bias_act_backward(mpcl__bias_act *e, mpcl_context *ctx, mpcl_tensor *d_h,
                                    const mpcl_tensor *h) {
    mpcl_tensor saved = e->z ? mpcl__tensor_rows(e->z, d_h->rows) : *h;
    if (e->use_bias) {
        /* In place: d_h becomes the gradient of the pre-activation, and the
         * bias gradient its column sums, in one launch. */
        if (e->act != MPCL_ACT_IDENTITY)
            return mpcl_bias_act_backward_grad(ctx, d_h, e->db, d_h, &saved, e->act);
        return mpcl_bias_grad(ctx, e->db, d_h);
    }
    if (e->act == MPCL_ACT_IDENTITY) return MPCL_OK;
    return mpcl_bias_act_backward(ctx, d_h, d_h, &saved, e->act);
}

void mpcl__bias_act_destroy(mpcl__bias_act *e) {
    mpcl_tensor_destroy(e->b);
    mpcl_tensor_destroy(e->db);
    mpcl_tensor_destroy(e->z);
    e->b = e->db = e->z = NULL;
}
