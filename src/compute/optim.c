/* SGD, Adam and AdamW over a flat f32 master buffer (include/mpcl/optim.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"

struct mpcl_optimizer {
    mpcl_context *ctx;
    mpcl_optim_params p;
    mpcl_dtype storage;
    size_t count;
    mpcl_tensor **working; /* borrowed, [count] */
    size_t *offset;        /* [count + 1]: element offsets into the flat buffers */
    mpcl_tensor *master;   /* f32 [1, total] */
    mpcl_tensor *m;        /* f32 [1, total]: Adam first moment or SGD momentum */
    mpcl_tensor *v;        /* f32 [1, total]: Adam second moment; NULL for SGD */
    mpcl_tensor *step;     /* i32 [1, 8]: two slots of the step state (cl/optim.cl) */
    cl_uint parity;        /* which step slot holds the current count */
    /* Stand-ins for a missing loss scaler: scale 1 and a found_inf that is
     * never raised, so that one kernel serves both cases. */
    mpcl_tensor *unit_scale; /* f32 [1,1] = 1 */
    mpcl_tensor *no_state;   /* i32 [1,4] = 0 */
};

mpcl_optim_params mpcl_optim_default_params(mpcl_optim_kind kind) {
    mpcl_optim_params p = {
        .kind = kind,
        .lr = kind == MPCL_OPTIM_SGD ? 1e-2f : 1e-3f,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-7f,
        .weight_decay = kind == MPCL_OPTIM_ADAMW ? 0.004f : 0.0f,
        .momentum = 0.9f,
        .nesterov = 0,
    };
    return p;
}

static mpcl_status check_params(mpcl_context *ctx, const mpcl_optim_params *p) {
    if (p->kind != MPCL_OPTIM_SGD && p->kind != MPCL_OPTIM_ADAM && p->kind != MPCL_OPTIM_ADAMW)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown optimizer kind %d", (int)p->kind);
    if (!isfinite(p->lr) || p->lr < 0.0f)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "optimizer lr %g is not finite and >= 0",
                          (double)p->lr);
    if (!isfinite(p->weight_decay) || p->weight_decay < 0.0f)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "optimizer weight_decay %g is not finite and >= 0",
                          (double)p->weight_decay);
    if (p->kind == MPCL_OPTIM_SGD) {
        if (!(p->momentum >= 0.0f && p->momentum <= 1.0f))
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "SGD momentum %g is not in [0, 1]",
                              (double)p->momentum);
    } else {
        if (!(p->beta1 >= 0.0f && p->beta1 < 1.0f) || !(p->beta2 >= 0.0f && p->beta2 < 1.0f))
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                              "Adam beta1 %g and beta2 %g must be in [0, 1)", (double)p->beta1,
                              (double)p->beta2);
        if (!isfinite(p->eps) || !(p->eps > 0.0f))
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "Adam eps %g is not finite and > 0",
                              (double)p->eps);
    }
    return MPCL_OK;
}

void mpcl_optimizer_destroy(mpcl_optimizer *opt) {
    if (!opt) return;
    mpcl_tensor_destroy(opt->master);
    mpcl_tensor_destroy(opt->m);
    mpcl_tensor_destroy(opt->v);
    mpcl_tensor_destroy(opt->step);
    mpcl_tensor_destroy(opt->unit_scale);
    mpcl_tensor_destroy(opt->no_state);
    free(opt->working);
    free(opt->offset);
    free(opt);
}

/* Copies working[i] (converted to f32) into its range of the master buffer. */
static mpcl_status init_master(mpcl_optimizer *opt, size_t i) {
    mpcl_context *ctx = opt->ctx;
    size_t n = opt->offset[i + 1] - opt->offset[i];
    float *host = malloc(n * sizeof *host);
    if (!host) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "staging %zu master weights", n);
    mpcl_status st = mpcl_tensor_download_f32(opt->working[i], host, n);
    if (st == MPCL_OK) {
        ctx->syncs++;
        cl_int err = clEnqueueWriteBuffer(ctx->queue, opt->master->mem, CL_TRUE,
                                          opt->offset[i] * sizeof(float), n * sizeof(float), host,
                                          0, NULL, NULL);
        if (err != CL_SUCCESS)
            st = mpcl__cl_error(ctx, err, "clEnqueueWriteBuffer", __FILE__, __LINE__);
    }
    free(host);
    return st;
}

mpcl_status mpcl_optimizer_create(mpcl_context *ctx, const mpcl_optim_params *p,
                                  mpcl_tensor *const *working, size_t count, mpcl_optimizer **out) {
    *out = NULL;
    mpcl_status st = check_params(ctx, p);
    if (st != MPCL_OK) return st;
    if (count == 0) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "optimizer over 0 parameters");
    mpcl_dtype storage = working[0]->dtype;
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        const mpcl_tensor *t = working[i];
        if (t->dtype != MPCL_DTYPE_F32 && t->dtype != MPCL_DTYPE_F16)
            return MPCL_ERROR(ctx, MPCL_ERR_DTYPE, "optimizer parameter %zu is %s, not f16 or f32",
                              i, mpcl_dtype_name(t->dtype));
        if (t->dtype != storage)
            return MPCL_ERROR(ctx, MPCL_ERR_DTYPE,
                              "optimizer parameter %zu is %s but parameter 0 is %s; one storage "
                              "dtype per optimizer",
                              i, mpcl_dtype_name(t->dtype), mpcl_dtype_name(storage));
        total += t->rows * t->cols;
    }
    /* Kernels index the flat buffers with uint. */
    if (total > 0xffffffffu)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "optimizer over %zu elements (over 2^32)", total);

    mpcl_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating an optimizer");
    opt->ctx = ctx;
    opt->p = *p;
    opt->storage = storage;
    opt->count = count;
    opt->working = malloc(count * sizeof *opt->working);
    opt->offset = malloc((count + 1) * sizeof *opt->offset);
    if (!opt->working || !opt->offset) {
        mpcl_optimizer_destroy(opt);
        return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating an optimizer's parameter list");
    }
    opt->offset[0] = 0;
    for (size_t i = 0; i < count; i++) {
        opt->working[i] = working[i];
        opt->offset[i + 1] = opt->offset[i] + working[i]->rows * working[i]->cols;
    }
    const float one = 1.0f;
    /* Tensors start zero-filled: moments, step counter and the stand-in state. */
    st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, total, &opt->master);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, total, &opt->m);
    if (st == MPCL_OK && p->kind != MPCL_OPTIM_SGD)
        st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, total, &opt->v);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, MPCL_DTYPE_I32, 1, 8, &opt->step);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, 1, &opt->unit_scale);
    if (st == MPCL_OK)
        st = mpcl_tensor_create(ctx, MPCL_DTYPE_I32, 1, MPCL__LS_STATE_LEN, &opt->no_state);
    if (st == MPCL_OK) st = mpcl_tensor_upload_f32(opt->unit_scale, &one, 1);
    if (st == MPCL_OK) st = mpcl_optimizer_write_step(ctx, opt, 0);
    for (size_t i = 0; st == MPCL_OK && i < count; i++) st = init_master(opt, i);
    if (st != MPCL_OK) {
        mpcl_optimizer_destroy(opt);
        return st;
    }
    *out = opt;
    return MPCL_OK;
}

mpcl_optim_params mpcl_optimizer_get_params(const mpcl_optimizer *opt) {
    return opt->p;
}

size_t mpcl_optimizer_param_count(const mpcl_optimizer *opt) {
    return opt->count;
}

mpcl_status mpcl_optimizer_set_lr(mpcl_optimizer *opt, float lr) {
    if (!isfinite(lr) || lr < 0.0f)
        return MPCL_ERROR(opt->ctx, MPCL_ERR_INVALID_ARG, "optimizer lr %g is not finite and >= 0",
                          (double)lr);
    opt->p.lr = lr;
    return MPCL_OK;
}

#define SET_ARG(i, x)                                                         \
    do {                                                                      \
        st = mpcl__set_arg(ctx, k, name, (i), sizeof(x), (const void *)&(x)); \
        if (st != MPCL_OK) return st;                                         \
    } while (0)

/* One launch over parameters [first, first + n), n <= MPCL_OPTIM_PARAMS_PER_LAUNCH. */
static mpcl_status step_launch(mpcl_context *ctx, mpcl_optimizer *opt, mpcl_tensor *const *grads,
                               size_t first, size_t n, cl_mem scale, cl_mem ls_state) {
    const int adam = opt->p.kind != MPCL_OPTIM_SGD;
    const char *name = adam ? "mpcl_optim_adam" : "mpcl_optim_sgd";
    cl_kernel k;
    mpcl_status st = mpcl__kernel(ctx, opt->storage, name, &k);
    if (st != MPCL_OK) return st;
    cl_uint a = 0;
    SET_ARG(a++, opt->master->mem);
    SET_ARG(a++, opt->m->mem);
    if (adam) SET_ARG(a++, opt->v->mem);
    cl_uint base = (cl_uint)opt->offset[first];
    cl_uint ends[MPCL_OPTIM_PARAMS_PER_LAUNCH];
    for (size_t s = 0; s < MPCL_OPTIM_PARAMS_PER_LAUNCH; s++) {
        /* Unused slots repeat the last parameter with an empty range. */
        size_t i = first + (s < n ? s : n - 1);
        SET_ARG(a++, opt->working[i]->mem);
        SET_ARG(a++, grads[i]->mem);
        ends[s] = (cl_uint)(opt->offset[i + 1] - opt->offset[first]);
    }
    for (size_t s = 0; s < MPCL_OPTIM_PARAMS_PER_LAUNCH; s++) SET_ARG(a++, ends[s]);
    SET_ARG(a++, base);
    SET_ARG(a++, scale);
    SET_ARG(a++, ls_state);
    SET_ARG(a++, opt->step->mem);
    SET_ARG(a++, opt->parity);
    /* Only the first launch of a step advances the counter; all of them read
     * the same slot. */
    cl_uint write_step = first == 0;
    SET_ARG(a++, write_step);
    SET_ARG(a++, opt->p.lr);
    if (adam) {
        cl_uint decoupled = opt->p.kind == MPCL_OPTIM_ADAMW;
        SET_ARG(a++, opt->p.beta1);
        SET_ARG(a++, opt->p.beta2);
        SET_ARG(a++, opt->p.eps);
        SET_ARG(a++, opt->p.weight_decay);
        SET_ARG(a++, decoupled);
    } else {
        cl_uint nesterov = opt->p.nesterov != 0;
        SET_ARG(a++, opt->p.momentum);
        SET_ARG(a++, opt->p.weight_decay);
        SET_ARG(a++, nesterov);
    }
    return mpcl__launch_1d(ctx, k, name, ends[MPCL_OPTIM_PARAMS_PER_LAUNCH - 1], 64);
}
#undef SET_ARG

mpcl_status mpcl_optimizer_step(mpcl_context *ctx, mpcl_optimizer *opt, mpcl_tensor *const *grads,
                                size_t count, const mpcl_loss_scale *ls) {
    if (count != opt->count)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "optimizer step with %zu gradients for %zu parameters", count,
                          opt->count);
    for (size_t i = 0; i < count; i++) {
        const mpcl_tensor *g = grads[i], *w = opt->working[i];
        if (g->dtype != w->dtype)
            return MPCL_ERROR(ctx, MPCL_ERR_DTYPE,
                              "optimizer gradient %zu is %s but its parameter is %s", i,
                              mpcl_dtype_name(g->dtype), mpcl_dtype_name(w->dtype));
        if (g->rows != w->rows || g->cols != w->cols)
            return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                              "optimizer gradient %zu is %zux%zu but its parameter is %zux%zu", i,
                              g->rows, g->cols, w->rows, w->cols);
    }
    cl_mem scale = ls ? mpcl__loss_scale_scale_mem(ls) : opt->unit_scale->mem;
    cl_mem state = ls ? mpcl__loss_scale_state_mem(ls) : opt->no_state->mem;
    for (size_t first = 0; first < count; first += MPCL_OPTIM_PARAMS_PER_LAUNCH) {
        size_t n = count - first;
        if (n > MPCL_OPTIM_PARAMS_PER_LAUNCH) n = MPCL_OPTIM_PARAMS_PER_LAUNCH;
        mpcl_status st = step_launch(ctx, opt, grads, first, n, scale, state);
        if (st != MPCL_OK) {
            /* The first launch wrote the other slot; keep reading the right one. */
            if (first > 0) opt->parity ^= 1u;
            return st;
        }
    }
    opt->parity ^= 1u;
    return MPCL_OK;
}

int mpcl_optimizer_has_slot(const mpcl_optimizer *opt, mpcl_optim_slot slot) {
    switch (slot) {
    case MPCL_OPTIM_SLOT_MASTER:
    case MPCL_OPTIM_SLOT_M: return 1;
    case MPCL_OPTIM_SLOT_V: return opt->v != NULL;
    default: return 0;
    }
}

static mpcl_status slot_range(mpcl_context *ctx, const mpcl_optimizer *opt, mpcl_optim_slot slot,
                              size_t index, size_t count, const char *what, cl_mem *mem) {
    if (!mpcl_optimizer_has_slot(opt, slot))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "optimizer %s of slot %d, which it lacks",
                          what, (int)slot);
    if (index >= opt->count)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "optimizer %s of parameter %zu of %zu", what,
                          index, opt->count);
    size_t n = opt->offset[index + 1] - opt->offset[index];
    if (count != n)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "optimizer %s of %zu elements for parameter %zu of %zu elements", what,
                          count, index, n);
    *mem = slot == MPCL_OPTIM_SLOT_MASTER ? opt->master->mem
           : slot == MPCL_OPTIM_SLOT_M    ? opt->m->mem
                                          : opt->v->mem;
    return MPCL_OK;
}

mpcl_status mpcl_optimizer_read(mpcl_context *ctx, const mpcl_optimizer *opt, mpcl_optim_slot slot,
                                size_t index, float *dst, size_t count) {
    cl_mem mem;
    mpcl_status st = slot_range(ctx, opt, slot, index, count, "read", &mem);
    if (st != MPCL_OK) return st;
    ctx->syncs++;
    CHECK_CL(ctx, clEnqueueReadBuffer(ctx->queue, mem, CL_TRUE, opt->offset[index] * sizeof(float),
                                      count * sizeof(float), dst, 0, NULL, NULL));
cleanup:
    return st;
}

mpcl_status mpcl_optimizer_write(mpcl_context *ctx, mpcl_optimizer *opt, mpcl_optim_slot slot,
                                 size_t index, const float *src, size_t count) {
    cl_mem mem;
    mpcl_status st = slot_range(ctx, opt, slot, index, count, "write", &mem);
    if (st != MPCL_OK) return st;
    ctx->syncs++;
    CHECK_CL(ctx, clEnqueueWriteBuffer(ctx->queue, mem, CL_TRUE, opt->offset[index] * sizeof(float),
                                       count * sizeof(float), src, 0, NULL, NULL));
    /* The host rounds as vstore_half_rte does (half.h), so this working copy
     * is what the update kernel would have stored. */
    if (slot == MPCL_OPTIM_SLOT_MASTER)
        st = mpcl_tensor_upload_f32(opt->working[index], src, count);
cleanup:
    return st;
}

mpcl_status mpcl_optimizer_read_step(mpcl_context *ctx, const mpcl_optimizer *opt, uint32_t *step) {
    mpcl_status st = MPCL_OK;
    ctx->syncs++;
    CHECK_CL(ctx, clEnqueueReadBuffer(ctx->queue, opt->step->mem, CL_TRUE,
                                      4 * opt->parity * sizeof(uint32_t), sizeof(uint32_t), step, 0,
                                      NULL, NULL));
cleanup:
    return st;
}

/* 1 - beta^t in double, rounded once to f32. */
/* The bias corrections of the coming step are computed by the device, with
 * the very function the update kernel uses: a host value, even correctly
 * rounded, differs from the device's f32 expm1/log1p by an ulp for some t, and
 * a resumed run would then drift from the uninterrupted one. */
mpcl_status mpcl_optimizer_write_step(mpcl_context *ctx, mpcl_optimizer *opt, uint32_t step) {
    cl_kernel k;
    mpcl_status st = mpcl__kernel(ctx, opt->storage, "mpcl_optim_set_step", &k);
    if (st != MPCL_OK) return st;
    cl_uint t = step;
    st = mpcl__set_args(ctx, k, "mpcl_optim_set_step", MPCL_ARG(opt->step->mem), MPCL_ARG(t),
                        MPCL_ARG(opt->p.beta1), MPCL_ARG(opt->p.beta2), MPCL_ARGS_END);
    if (st == MPCL_OK) st = mpcl__launch_1d(ctx, k, "mpcl_optim_set_step", 1, 1);
    if (st == MPCL_OK) st = mpcl_context_finish(ctx); /* blocking, as documented */
    return st;
}
