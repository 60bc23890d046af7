/* Loss scaling with its state on the device (include/mpcl/loss_scale.h). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"

/* The public arity is the check kernel's (cl/abi.h). */
_Static_assert(MPCL_LOSS_SCALE_CHECK_PER_LAUNCH == MPCL_ABI_LS_CHECK_TENSORS,
               "mpcl_loss_scale_check takes MPCL_ABI_LS_CHECK_TENSORS gradients");

struct mpcl_loss_scale {
    mpcl_context *ctx;
    mpcl_loss_scale_params p;
    mpcl_tensor *scale; /* f32 [1,1] */
    mpcl_tensor *state; /* i32 [1, MPCL_ABI_LS_STATE_WORDS] holding uints (cl/abi.h) */
    /* The update kernel is dtype-independent; it runs from the program of the
     * last checked gradients so that an f16- or bf16-only run builds one
     * program. */
    mpcl_dtype program;
};

mpcl_loss_scale_params mpcl_loss_scale_default_params(void) {
    mpcl_loss_scale_params p = {
        .mode = MPCL_LOSS_SCALE_DYNAMIC,
        .initial_scale = 32768.0f,
        .growth_interval = 2000,
        .growth_factor = 2.0f,
        .backoff_factor = 0.5f,
        .min_scale = 1.0f,
        .max_scale = 16777216.0f,
    };
    return p;
}

static mpcl_status check_params(mpcl_context *ctx, const mpcl_loss_scale_params *p) {
    const struct {
        const char *name;
        float value;
    } f[] = {{"initial_scale", p->initial_scale},
             {"growth_factor", p->growth_factor},
             {"backoff_factor", p->backoff_factor},
             {"min_scale", p->min_scale},
             {"max_scale", p->max_scale}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!isfinite(f[i].value))
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "loss scale %s is not finite", f[i].name);
    if (p->mode != MPCL_LOSS_SCALE_DYNAMIC && p->mode != MPCL_LOSS_SCALE_FIXED)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown loss scale mode %d", (int)p->mode);
    if (!(p->min_scale > 0.0f && p->min_scale <= p->initial_scale &&
          p->initial_scale <= p->max_scale))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "loss scale needs 0 < min_scale <= initial_scale <= max_scale, got "
                          "%g, %g, %g",
                          (double)p->min_scale, (double)p->initial_scale, (double)p->max_scale);
    if (!(p->growth_factor >= 1.0f))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "loss scale growth_factor %g is below 1",
                          (double)p->growth_factor);
    if (!(p->backoff_factor > 0.0f && p->backoff_factor <= 1.0f))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "loss scale backoff_factor %g is not in (0, 1]",
                          (double)p->backoff_factor);
    if (p->growth_interval == 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "loss scale growth_interval is 0");
    return MPCL_OK;
}

mpcl_status mpcl_loss_scale_create(mpcl_context *ctx, const mpcl_loss_scale_params *p,
                                   mpcl_loss_scale **out) {
    *out = NULL;
    mpcl_status st = check_params(ctx, p);
    if (st != MPCL_OK) return st;
    mpcl_loss_scale *ls = calloc(1, sizeof *ls);
    if (!ls) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating a loss scaler");
    ls->ctx = ctx;
    ls->p = *p;
    ls->program = MPCL_DTYPE_F32;
    /* Tensors start zero-filled: counters and flags at 0. */
    st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, 1, &ls->scale);
    if (st == MPCL_OK)
        st = mpcl_tensor_create(ctx, MPCL_DTYPE_I32, 1, MPCL_ABI_LS_STATE_WORDS, &ls->state);
    if (st == MPCL_OK) st = mpcl_tensor_upload_f32(ls->scale, &p->initial_scale, 1);
    if (st != MPCL_OK) {
        mpcl_loss_scale_destroy(ls);
        return st;
    }
    *out = ls;
    return MPCL_OK;
}

void mpcl_loss_scale_destroy(mpcl_loss_scale *ls) {
    if (!ls) return;
    mpcl_tensor_destroy(ls->scale);
    mpcl_tensor_destroy(ls->state);
    free(ls);
}

mpcl_loss_scale_params mpcl_loss_scale_get_params(const mpcl_loss_scale *ls) {
    return ls->p;
}

const mpcl_tensor *mpcl_loss_scale_tensor(const mpcl_loss_scale *ls) {
    return ls->scale;
}

cl_mem mpcl__loss_scale_state_mem(const mpcl_loss_scale *ls) {
    return ls->state->mem;
}

cl_mem mpcl__loss_scale_scale_mem(const mpcl_loss_scale *ls) {
    return ls->scale->mem;
}

/* Elements per work-item of the check: 16 of its 16-element vectors. Measured
 * on PoCL (2 cores, a 102K-element f16 arena): 14-25 us at 256 to 4096, the
 * cost of an empty launch; the scalar per-element scan cost 250-400 us. */
enum { CHECK_ITEM = 256 };

/* One launch over up to MPCL_LOSS_SCALE_CHECK_PER_LAUNCH tensors of `dtype`. */
static mpcl_status check_launch(mpcl_context *ctx, mpcl_loss_scale *ls, mpcl_dtype dtype,
                                mpcl_tensor *const *list, size_t n) {
    static const char name[] = "mpcl_loss_scale_check";
    cl_kernel k;
    mpcl_status st = mpcl__kernel(ctx, dtype, name, &k);
    if (st != MPCL_OK) return st;
    size_t most = 0;
    for (cl_uint a = 0; a < MPCL_LOSS_SCALE_CHECK_PER_LAUNCH; a++) {
        /* Unused slots repeat the first buffer with 0 elements. */
        const mpcl_tensor *t = a < n ? list[a] : list[0];
        cl_uint count = a < n ? (cl_uint)(t->rows * t->cols) : 0;
        if (count > most) most = count;
        st = mpcl__set_arg(ctx, k, name, 2 * a, sizeof t->mem, &t->mem);
        if (st == MPCL_OK) st = mpcl__set_arg(ctx, k, name, 2 * a + 1, sizeof count, &count);
        if (st != MPCL_OK) return st;
    }
    st = mpcl__set_arg(ctx, k, name, 2 * MPCL_LOSS_SCALE_CHECK_PER_LAUNCH, sizeof ls->state->mem,
                       &ls->state->mem);
    if (st != MPCL_OK) return st;
    /* Each item strides over every tensor: about one item per CHECK_ITEM
     * elements of the largest (its loop is 16-wide vector code, so a CPU
     * runtime's per-item cost is spread over enough work), at most 64K items,
     * which fill a GPU. */
    size_t items = (most + CHECK_ITEM - 1) / CHECK_ITEM;
    if (items > 65536) items = 65536;
    if (items == 0) items = 1;
    ls->program = dtype;
    return mpcl__launch_1d(ctx, k, name, items, mpcl__local_size(ctx, k, 64));
}

mpcl_status mpcl_loss_scale_check(mpcl_context *ctx, mpcl_loss_scale *ls, mpcl_tensor *const *grads,
                                  size_t count) {
    for (size_t i = 0; i < count; i++) {
        const mpcl_tensor *t = grads[i];
        if (!mpcl_dtype_is_float(t->dtype))
            return MPCL_ERROR(ctx, MPCL_ERR_DTYPE,
                              "loss scale check of gradient %zu: %s, not f32, f16 or bf16", i,
                              mpcl_dtype_name(t->dtype));
        if (t->rows * t->cols > 0xffffffffu)
            return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                              "loss scale check of gradient %zu: %zux%zu is over 2^32 elements", i,
                              t->rows, t->cols);
    }
    /* Group by dtype (one program each, every float dtype of the table), in
     * chunks of the kernel's arity. */
    for (int d = 0; d < MPCL_DTYPE_COUNT; d++) {
        mpcl_dtype dtype = (mpcl_dtype)d;
        if (!mpcl_dtype_is_float(dtype)) continue;
        mpcl_tensor *chunk[MPCL_LOSS_SCALE_CHECK_PER_LAUNCH];
        size_t n = 0;
        for (size_t i = 0; i < count; i++) {
            if (grads[i]->dtype != dtype) continue;
            chunk[n++] = grads[i];
            if (n == MPCL_LOSS_SCALE_CHECK_PER_LAUNCH) {
                mpcl_status st = check_launch(ctx, ls, dtype, chunk, n);
                if (st != MPCL_OK) return st;
                n = 0;
            }
        }
        if (n > 0) {
            mpcl_status st = check_launch(ctx, ls, dtype, chunk, n);
            if (st != MPCL_OK) return st;
        }
    }
    return MPCL_OK;
}

mpcl_status mpcl__loss_scale_set_update_args(mpcl_context *ctx, const mpcl_loss_scale *ls,
                                             cl_kernel k, const char *name) {
    const mpcl_loss_scale_params *p = &ls->p;
    cl_uint dynamic = p->mode == MPCL_LOSS_SCALE_DYNAMIC;
    cl_uint interval = p->growth_interval;
    return mpcl__set_args(ctx, k, name, MPCL_ARG(ls->scale->mem), MPCL_ARG(ls->state->mem),
                          MPCL_ARG(dynamic), MPCL_ARG(interval), MPCL_ARG(p->growth_factor),
                          MPCL_ARG(p->backoff_factor), MPCL_ARG(p->min_scale),
                          MPCL_ARG(p->max_scale), MPCL_ARGS_END);
}

mpcl_status mpcl_loss_scale_update(mpcl_context *ctx, mpcl_loss_scale *ls) {
    static const char name[] = "mpcl_loss_scale_update";
    cl_kernel k;
    mpcl_status st = mpcl__kernel(ctx, ls->program, name, &k);
    if (st == MPCL_OK) st = mpcl__loss_scale_set_update_args(ctx, ls, k, name);
    if (st == MPCL_OK) st = mpcl__launch_1d(ctx, k, name, 1, 1);
    return st;
}

mpcl_status mpcl_loss_scale_read(mpcl_context *ctx, const mpcl_loss_scale *ls,
                                 mpcl_loss_scale_state *out) {
    (void)ctx;
    float scale;
    uint32_t state[MPCL_ABI_LS_STATE_WORDS];
    mpcl_status st = mpcl_tensor_download_f32(ls->scale, &scale, 1);
    if (st == MPCL_OK) st = mpcl_tensor_download_raw(ls->state, state, sizeof state);
    if (st != MPCL_OK) return st;
    out->scale = scale;
    out->good_steps = state[MPCL_ABI_LS_GOOD];
    out->skipped_steps = state[MPCL_ABI_LS_SKIPPED];
    out->found_inf = state[MPCL_ABI_LS_FOUND_INF] != 0;
    out->last_found_inf = state[MPCL_ABI_LS_LAST_FOUND_INF] != 0;
    return MPCL_OK;
}

mpcl_status mpcl_loss_scale_write_state(mpcl_context *ctx, mpcl_loss_scale *ls,
                                        const mpcl_loss_scale_state *in) {
    if (!isfinite(in->scale) || !(in->scale > 0.0f))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "loss scale state: scale %g is not finite and > 0", (double)in->scale);
    uint32_t state[MPCL_ABI_LS_STATE_WORDS] = {0};
    state[MPCL_ABI_LS_GOOD] = in->good_steps;
    state[MPCL_ABI_LS_SKIPPED] = in->skipped_steps;
    state[MPCL_ABI_LS_LAST_FOUND_INF] = in->last_found_inf != 0;
    mpcl_status st = mpcl_tensor_upload_f32(ls->scale, &in->scale, 1);
    if (st == MPCL_OK) st = mpcl_tensor_upload_raw(ls->state, state, sizeof state);
    return st;
}
