/* SGD, Adam and AdamW over flat arenas (include/mpcl/optim.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"

enum {
    STEP_LEN = MPCL_ABI_OPTIM_STEP_WORDS,
    CLIP_LEN = MPCL_ABI_OPTIM_CLIP_WORDS,
    NORM_WG = MPCL_ABI_OPTIM_NORM_WG,
    NORM_GROUPS = MPCL_ABI_OPTIM_NORM_GROUPS,
};

/* One row per optimizer: its name, its update kernel and the state slots it
 * keeps. Everything else that differs is in its kernel. */
static const struct optim_kind_row {
    const char *name;
    const char *kernel;    /* one element per work-item */
    const char *kernel_v8; /* MPCL__OPTIM_VEC elements per work-item */
    bool slot_v;
} OPTIM_KINDS[MPCL_OPTIM_COUNT] = {
    [MPCL_OPTIM_SGD] = {"sgd", "mpcl_optim_sgd", "mpcl_optim_sgd_v8", false},
    [MPCL_OPTIM_ADAM] = {"adam", "mpcl_optim_adam", "mpcl_optim_adam_v8", true},
    [MPCL_OPTIM_ADAMW] = {"adamw", "mpcl_optim_adam", "mpcl_optim_adam_v8", true},
};

const char *mpcl_optim_kind_name(mpcl_optim_kind kind) {
    return (unsigned)kind < MPCL_OPTIM_COUNT ? OPTIM_KINDS[kind].name : NULL;
}

bool mpcl_optim_kind_parse(const char *name, mpcl_optim_kind *out) {
    for (int k = 0; name && k < MPCL_OPTIM_COUNT; k++)
        if (strcmp(name, OPTIM_KINDS[k].name) == 0) {
            *out = (mpcl_optim_kind)k;
            return true;
        }
    return false;
}

const char *mpcl_optim_kind_names(void) {
    return "adam, adamw or sgd";
}

bool mpcl_optim_has_slot(mpcl_optim_kind kind, mpcl_optim_slot slot) {
    if ((unsigned)kind >= MPCL_OPTIM_COUNT) return false;
    switch (slot) {
    case MPCL_OPTIM_SLOT_MASTER:
    case MPCL_OPTIM_SLOT_M: return true;
    case MPCL_OPTIM_SLOT_V: return OPTIM_KINDS[kind].slot_v;
    default: return false;
    }
}

struct mpcl_optimizer {
    mpcl_context *ctx;
    mpcl_optim_params p;
    size_t n;
    mpcl_tensor *master;  /* borrowed: f32 [1, n] */
    mpcl_tensor *working; /* borrowed: storage [1, n] */
    mpcl_tensor *m;       /* f32 [1, n]: Adam first moment or SGD momentum */
    mpcl_tensor *v;       /* f32 [1, n]: Adam second moment; NULL for SGD */
    mpcl_tensor *step;    /* i32 [1, STEP_LEN]: the step state (count, bias corrections) */
    size_t local;         /* the vector update's work-group: 0 until the first step asks */
    mpcl_tensor *clip;    /* f32 [1, 2]: {norm, factor}; {NaN, 1} without clipping */
    mpcl_tensor *partial; /* f32 [1, NORM_GROUPS]: the norm's first pass; with clipping */
    /* Stand-ins for a missing loss scaler: scale 1 and a found_inf that is
     * never raised, so that one kernel serves both cases. */
    mpcl_tensor *unit_scale; /* f32 [1,1] = 1 */
    mpcl_tensor *no_state;   /* i32 [1, LS_STATE_LEN] = 0 */
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
        .clip_norm = 0.0f,
    };
    return p;
}

mpcl_status mpcl_optim_params_check(mpcl_context *ctx, const mpcl_optim_params *p) {
    if ((unsigned)p->kind >= MPCL_OPTIM_COUNT)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown optimizer kind %d", (int)p->kind);
    const struct {
        const char *name;
        float value;
    } nonneg[] = {{"lr", p->lr}, {"weight_decay", p->weight_decay}, {"clip_norm", p->clip_norm}};
    for (size_t i = 0; i < sizeof nonneg / sizeof nonneg[0]; i++)
        if (!isfinite(nonneg[i].value) || nonneg[i].value < 0.0f)
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "optimizer %s %g is not finite and >= 0",
                              nonneg[i].name, (double)nonneg[i].value);
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
    mpcl_tensor *own[] = {opt->m,       opt->v,          opt->step,    opt->clip,
                          opt->partial, opt->unit_scale, opt->no_state};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) mpcl_tensor_destroy(own[i]);
    free(opt);
}

mpcl_status mpcl_optimizer_create(mpcl_context *ctx, const mpcl_optim_params *p,
                                  mpcl_tensor *master, mpcl_tensor *working, mpcl_optimizer **out) {
    *out = NULL;
    mpcl_status st = mpcl_optim_params_check(ctx, p);
    if (st != MPCL_OK) return st;
    size_t n = master->rows * master->cols;
    if (master->dtype != MPCL_DTYPE_F32 || !mpcl_dtype_is_float(working->dtype))
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE,
                          "optimizer over a %s master and a %s working arena; it needs f32 and a "
                          "float storage dtype",
                          mpcl_dtype_name(master->dtype), mpcl_dtype_name(working->dtype));
    if (working->rows * working->cols != n)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "optimizer master arena has %zu elements, working arena %zu", n,
                          working->rows * working->cols);
    /* Kernels index the arenas with uint. */
    if (n > 0xffffffffu)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "optimizer over %zu elements (over 2^32)", n);

    mpcl_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating an optimizer");
    opt->ctx = ctx;
    opt->p = *p;
    opt->n = n;
    opt->master = master;
    opt->working = working;
    const float one = 1.0f;
    float no_clip[CLIP_LEN] = {0};
    no_clip[MPCL_ABI_OPTIM_CLIP_NORM] = NAN;
    no_clip[MPCL_ABI_OPTIM_CLIP_FACTOR] = 1.0f;
    /* Tensors start zero-filled: state, step counter and the stand-in state. */
    st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, n, &opt->m);
    if (st == MPCL_OK && OPTIM_KINDS[p->kind].slot_v)
        st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, n, &opt->v);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, MPCL_DTYPE_I32, 1, STEP_LEN, &opt->step);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, CLIP_LEN, &opt->clip);
    if (st == MPCL_OK && p->clip_norm > 0.0f)
        st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, NORM_GROUPS, &opt->partial);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, 1, &opt->unit_scale);
    if (st == MPCL_OK)
        st = mpcl_tensor_create(ctx, MPCL_DTYPE_I32, 1, MPCL_ABI_LS_STATE_WORDS, &opt->no_state);
    if (st == MPCL_OK) st = mpcl_tensor_upload_f32(opt->unit_scale, &one, 1);
    if (st == MPCL_OK) st = mpcl_tensor_upload_f32(opt->clip, no_clip, CLIP_LEN);
    if (st == MPCL_OK) st = mpcl_optimizer_write_step(ctx, opt, 0);
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

mpcl_status mpcl_optimizer_set_lr(mpcl_optimizer *opt, float lr) {
    if (!isfinite(lr) || lr < 0.0f)
        return MPCL_ERROR(opt->ctx, MPCL_ERR_INVALID_ARG, "optimizer lr %g is not finite and >= 0",
                          (double)lr);
    opt->p.lr = lr;
    return MPCL_OK;
}

/* The global norm's two passes: sums of squares per work-group, then the norm
 * and the clip factor into opt->clip. */
static mpcl_status clip_launch(mpcl_context *ctx, mpcl_optimizer *opt, const mpcl_tensor *grads,
                               cl_mem scale) {
    static const char sumsq[] = "mpcl_optim_grad_sumsq", norm[] = "mpcl_optim_grad_norm";
    cl_kernel k;
    cl_uint n = (cl_uint)opt->n;
    mpcl_status st = mpcl__kernel(ctx, grads->dtype, sumsq, &k);
    if (st == MPCL_OK)
        st = mpcl__set_args(ctx, k, sumsq, MPCL_ARG(grads->mem), MPCL_ARG(n),
                            MPCL_ARG(opt->partial->mem), MPCL_ARGS_END);
    if (st == MPCL_OK) st = mpcl__launch_1d(ctx, k, sumsq, NORM_WG * NORM_GROUPS, NORM_WG);
    if (st == MPCL_OK) st = mpcl__kernel(ctx, grads->dtype, norm, &k);
    if (st == MPCL_OK)
        st = mpcl__set_args(ctx, k, norm, MPCL_ARG(opt->partial->mem), MPCL_ARG(scale),
                            MPCL_ARG(opt->p.clip_norm), MPCL_ARG(opt->clip->mem), MPCL_ARGS_END);
    if (st == MPCL_OK) st = mpcl__launch_1d(ctx, k, norm, 1, 1);
    return st;
}

/* The step counter and bias corrections move on after the update (one
 * work-item; not for a skipped step). With ls, the same launch then runs the
 * loss-scale update (mpcl_optim_advance_scale). */
static mpcl_status advance_step(mpcl_context *ctx, mpcl_optimizer *opt, cl_mem ls_state,
                                const mpcl_loss_scale *ls) {
    const char *name = ls ? "mpcl_optim_advance_scale" : "mpcl_optim_advance";
    cl_kernel k;
    mpcl_status st = mpcl__kernel(ctx, opt->working->dtype, name, &k);
    if (st != MPCL_OK) return st;
    if (ls) {
        st = mpcl__loss_scale_set_update_args(ctx, ls, k, name);
        cl_uint a = MPCL_ABI_LS_UPDATE_ARGS;
        if (st == MPCL_OK) st = mpcl__set_arg(ctx, k, name, a++, sizeof(cl_mem), &opt->step->mem);
        if (st == MPCL_OK) st = mpcl__set_arg(ctx, k, name, a++, sizeof(float), &opt->p.beta1);
        if (st == MPCL_OK) st = mpcl__set_arg(ctx, k, name, a++, sizeof(float), &opt->p.beta2);
    } else {
        st = mpcl__set_args(ctx, k, name, MPCL_ARG(opt->step->mem), MPCL_ARG(ls_state),
                            MPCL_ARG(opt->p.beta1), MPCL_ARG(opt->p.beta2), MPCL_ARGS_END);
    }
    if (st == MPCL_OK) st = mpcl__launch_1d(ctx, k, name, 1, 1);
    return st;
}

#define SET_ARG(x)                                                            \
    do {                                                                      \
        st = mpcl__set_arg(ctx, k, name, a++, sizeof(x), (const void *)&(x)); \
        if (st != MPCL_OK) return st;                                         \
    } while (0)

/* The update kernels' arguments, the same for both forms. */
static mpcl_status set_update_args(mpcl_context *ctx, mpcl_optimizer *opt, cl_kernel k,
                                   const char *name, const mpcl_tensor *grads, cl_uint base,
                                   cl_mem scale, cl_mem state) {
    mpcl_status st;
    cl_uint a = 0;
    SET_ARG(opt->master->mem);
    SET_ARG(opt->m->mem);
    if (opt->v) SET_ARG(opt->v->mem);
    SET_ARG(opt->working->mem);
    SET_ARG(grads->mem);
    SET_ARG(base);
    SET_ARG(scale);
    SET_ARG(state);
    SET_ARG(opt->clip->mem);
    if (opt->v) SET_ARG(opt->step->mem); /* Adam's bias corrections */
    SET_ARG(opt->p.lr);
    if (opt->p.kind == MPCL_OPTIM_SGD) {
        cl_uint nesterov = opt->p.nesterov != 0;
        SET_ARG(opt->p.momentum);
        SET_ARG(opt->p.weight_decay);
        SET_ARG(nesterov);
    } else {
        cl_uint decoupled = opt->p.kind == MPCL_OPTIM_ADAMW;
        SET_ARG(opt->p.beta1);
        SET_ARG(opt->p.beta2);
        SET_ARG(opt->p.eps);
        SET_ARG(opt->p.weight_decay);
        SET_ARG(decoupled);
    }
    return MPCL_OK;
}

/* The update, and the end-of-step launch: the advance alone, or (fold_ls)
 * the advance and the loss-scale update. */
static mpcl_status optimizer_step(mpcl_context *ctx, mpcl_optimizer *opt, const mpcl_tensor *grads,
                                  const mpcl_loss_scale *ls, bool fold_ls) {
    if (grads->dtype != opt->working->dtype)
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE,
                          "optimizer gradients are %s but the working arena is %s",
                          mpcl_dtype_name(grads->dtype), mpcl_dtype_name(opt->working->dtype));
    if (grads->rows * grads->cols != opt->n)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "optimizer gradients have %zu elements for %zu parameters",
                          grads->rows * grads->cols, opt->n);
    /* The update kernels take their buffers as restrict (so that PoCL hoists
     * the per-step constants out of its work-item loop). */
    if (grads->mem == opt->working->mem)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "optimizer gradients are the working copy it updates");
    cl_mem scale = ls ? mpcl__loss_scale_scale_mem(ls) : opt->unit_scale->mem;
    cl_mem state = ls ? mpcl__loss_scale_state_mem(ls) : opt->no_state->mem;
    mpcl_status st = MPCL_OK;
    if (opt->p.clip_norm > 0.0f && (st = clip_launch(ctx, opt, grads, scale)) != MPCL_OK) return st;

    /* Eight elements per work-item over whole groups, then the tail, if any,
     * one per item in a launch of exactly its size: the kernels have no range
     * check (it would keep a CPU runtime from vectorizing them). A model's
     * arenas are whole granules (mpcl__params), so there it is one launch. */
    const char *name = OPTIM_KINDS[opt->p.kind].kernel, *name8 = OPTIM_KINDS[opt->p.kind].kernel_v8;
    cl_kernel k8, k1;
    if ((st = mpcl__kernel(ctx, opt->working->dtype, name8, &k8)) != MPCL_OK) return st;
    /* A driver query, once: not in every step. */
    if (!opt->local) opt->local = mpcl__local_size(ctx, k8, MPCL__OPTIM_GROUP);
    size_t local = opt->local;
    size_t items = opt->n / MPCL__OPTIM_VEC / local * local, done = items * MPCL__OPTIM_VEC;
    if (items > 0) {
        if ((st = set_update_args(ctx, opt, k8, name8, grads, 0, scale, state)) != MPCL_OK ||
            (st = mpcl__launch_1d(ctx, k8, name8, items, local)) != MPCL_OK)
            return st;
    }
    if (done < opt->n) {
        if ((st = mpcl__kernel(ctx, opt->working->dtype, name, &k1)) != MPCL_OK ||
            (st = set_update_args(ctx, opt, k1, name, grads, (cl_uint)done, scale, state)) !=
                MPCL_OK ||
            (st = mpcl__launch_1d(ctx, k1, name, opt->n - done, 0)) != MPCL_OK)
            return st;
    }
    return advance_step(ctx, opt, state, fold_ls ? ls : NULL);
}
#undef SET_ARG

mpcl_status mpcl_optimizer_step(mpcl_context *ctx, mpcl_optimizer *opt, const mpcl_tensor *grads,
                                const mpcl_loss_scale *ls) {
    return optimizer_step(ctx, opt, grads, ls, false);
}

mpcl_status mpcl_optimizer_step_scaled(mpcl_context *ctx, mpcl_optimizer *opt,
                                       const mpcl_tensor *grads, mpcl_loss_scale *ls) {
    return optimizer_step(ctx, opt, grads, ls, ls != NULL);
}

mpcl_status mpcl_optimizer_read_grad_norm(mpcl_context *ctx, const mpcl_optimizer *opt,
                                          float *norm) {
    float clip[CLIP_LEN];
    mpcl_status st = mpcl_tensor_download_f32(opt->clip, clip, CLIP_LEN);
    if (st != MPCL_OK) return st;
    (void)ctx;
    *norm = clip[MPCL_ABI_OPTIM_CLIP_NORM];
    return MPCL_OK;
}

static mpcl_status slot_range(mpcl_context *ctx, const mpcl_optimizer *opt, mpcl_optim_slot slot,
                              size_t offset, size_t count, const char *what, cl_mem *mem) {
    if (!mpcl_optim_has_slot(opt->p.kind, slot))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "optimizer %s of slot %d, which %s lacks",
                          what, (int)slot, OPTIM_KINDS[opt->p.kind].name);
    if (offset > opt->n || count > opt->n - offset)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "optimizer %s of elements [%zu, %zu) of an arena of %zu", what, offset,
                          offset + count, opt->n);
    *mem = slot == MPCL_OPTIM_SLOT_MASTER ? opt->master->mem
           : slot == MPCL_OPTIM_SLOT_M    ? opt->m->mem
                                          : opt->v->mem;
    return MPCL_OK;
}

/* A blocking copy of elements [offset, offset + count) of a slot into dst
 * (a read) or from src (a write; dst NULL), after the range and slot checks. */
static mpcl_status transfer(mpcl_context *ctx, const mpcl_optimizer *opt, mpcl_optim_slot slot,
                            size_t offset, size_t count, float *dst, const float *src) {
    cl_mem mem = NULL;
    mpcl_status st = slot_range(ctx, opt, slot, offset, count, dst ? "read" : "write", &mem);
    if (st != MPCL_OK || count == 0) return st;
    ctx->syncs++;
    size_t at = offset * sizeof(float), bytes = count * sizeof(float);
    cl_int err =
        dst ? clEnqueueReadBuffer(ctx->queue, mem, CL_TRUE, at, bytes, dst, 0, NULL, NULL)
            : clEnqueueWriteBuffer(ctx->queue, mem, CL_TRUE, at, bytes, src, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return mpcl__cl_error(ctx, err, dst ? "clEnqueueReadBuffer" : "clEnqueueWriteBuffer",
                              __FILE__, __LINE__);
    return MPCL_OK;
}

mpcl_status mpcl_optimizer_read(mpcl_context *ctx, const mpcl_optimizer *opt, mpcl_optim_slot slot,
                                size_t offset, float *dst, size_t count) {
    return transfer(ctx, opt, slot, offset, count, dst, NULL);
}

/* working[offset, offset + count) = master rounded to the storage dtype. */
static mpcl_status refresh_working(mpcl_context *ctx, mpcl_optimizer *opt, size_t offset,
                                   size_t count) {
    static const char name[] = "mpcl_optim_refresh";
    cl_kernel k;
    cl_uint off = (cl_uint)offset, n = (cl_uint)count;
    mpcl_status st = mpcl__kernel(ctx, opt->working->dtype, name, &k);
    if (st == MPCL_OK)
        st = mpcl__set_args(ctx, k, name, MPCL_ARG(opt->working->mem), MPCL_ARG(opt->master->mem),
                            MPCL_ARG(off), MPCL_ARG(n), MPCL_ARGS_END);
    if (st == MPCL_OK) st = mpcl__launch_1d(ctx, k, name, count, mpcl__local_size(ctx, k, 256));
    if (st == MPCL_OK) st = mpcl_context_finish(ctx); /* blocking, as documented */
    return st;
}

mpcl_status mpcl_optimizer_write(mpcl_context *ctx, mpcl_optimizer *opt, mpcl_optim_slot slot,
                                 size_t offset, const float *src, size_t count) {
    mpcl_status st = transfer(ctx, opt, slot, offset, count, NULL, src);
    if (st == MPCL_OK && count > 0 && slot == MPCL_OPTIM_SLOT_MASTER)
        st = refresh_working(ctx, opt, offset, count);
    return st;
}

mpcl_status mpcl_optimizer_read_step(mpcl_context *ctx, const mpcl_optimizer *opt, uint32_t *step) {
    mpcl_status st = MPCL_OK;
    ctx->syncs++;
    CHECK_CL(ctx, clEnqueueReadBuffer(ctx->queue, opt->step->mem, CL_TRUE,
                                      MPCL_ABI_OPTIM_STEP_COUNT * sizeof(uint32_t),
                                      sizeof(uint32_t), step, 0, NULL, NULL));
cleanup:
    return st;
}

/* The bias corrections of the coming step are computed by the device, with
 * the very function the update kernel uses: a host value, even correctly
 * rounded, differs from the device's f32 expm1/log1p by an ulp for some t, and
 * a resumed run would then drift from the uninterrupted one. */
mpcl_status mpcl_optimizer_write_step(mpcl_context *ctx, mpcl_optimizer *opt, uint32_t step) {
    static const char name[] = "mpcl_optim_set_step";
    cl_kernel k;
    mpcl_status st = mpcl__kernel(ctx, opt->working->dtype, name, &k);
    if (st != MPCL_OK) return st;
    cl_uint t = step;
    st = mpcl__set_args(ctx, k, name, MPCL_ARG(opt->step->mem), MPCL_ARG(t), MPCL_ARG(opt->p.beta1),
                        MPCL_ARG(opt->p.beta2), MPCL_ARGS_END);
    if (st == MPCL_OK) st = mpcl__launch_1d(ctx, k, name, 1, 1);
    if (st == MPCL_OK) st = mpcl_context_finish(ctx); /* blocking, as documented */
    return st;
}
