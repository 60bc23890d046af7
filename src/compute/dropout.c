/* Dropout (include/mpcl/dropout.h): the host's copy of the keep rule and the
 * launcher of cl/dropout.cl, one kernel for both passes (the backward is the
 * forward's mask and scale applied to d_out). */
#include "mpcl/dropout.h"

#include "compute/compute.h"

/* The work-group of the one-item-per-element launch (the kernel checks its
 * range), as ops.c's elementwise ones. */
#define DROPOUT_WG 64

bool mpcl_dropout_keep(uint64_t seed, uint64_t counter, uint64_t index, float rate) {
    uint64_t h = mpcl__counter_draw(mpcl__counter_key(seed, counter), index);
    float u = (float)(uint32_t)(h >> 40) * 0x1p-24f; /* exact: 24 bits */
    return u >= rate;
}

static mpcl_status dropout(mpcl_context *ctx, const char *op, const char *out_name,
                           const char *in_name, float rate, uint64_t seed, uint64_t counter,
                           mpcl_tensor *out, const mpcl_tensor *in) {
    if (!(rate >= 0.0f && rate < 1.0f))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: rate %g is outside [0, 1)", op,
                          (double)rate);
    TRY(mpcl__check_present(ctx, in, op, in_name));
    TRY(mpcl__check_present(ctx, out, op, out_name));
    TRY(mpcl__check_storage(ctx, in, op, in_name));
    TRY(mpcl__check_dtype(ctx, out, in->dtype, op, out_name));
    TRY(mpcl__check_shape(ctx, out, in->rows, in->cols, op, out_name));
    TRY(mpcl__check_count(ctx, in, op));

    static const char name[] = "mpcl_dropout";
    cl_kernel k;
    TRY(mpcl__kernel(ctx, in->dtype, name, &k));
    /* The per-call part of the draws. */
    cl_ulong key = mpcl__counter_key(seed, counter);
    float scale = 1.0f / (1.0f - rate); /* 1 exactly at rate 0 */
    cl_uint n = (cl_uint)(in->rows * in->cols);
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(out->mem), MPCL_ARG(in->mem), MPCL_ARG(key),
                       MPCL_ARG(rate), MPCL_ARG(scale), MPCL_ARG(n), MPCL_ARGS_END));
    return mpcl__launch_1d(ctx, k, name, n, mpcl__local_size(ctx, k, DROPOUT_WG));
}

mpcl_status mpcl_dropout_forward(mpcl_context *ctx, float rate, uint64_t seed, uint64_t counter,
                                 mpcl_tensor *out, const mpcl_tensor *in) {
    return dropout(ctx, "mpcl_dropout_forward", "out", "in", rate, seed, counter, out, in);
}

mpcl_status mpcl_dropout_backward(mpcl_context *ctx, float rate, uint64_t seed, uint64_t counter,
                                  mpcl_tensor *d_in, const mpcl_tensor *d_out) {
    return dropout(ctx, "mpcl_dropout_backward", "d_in", "d_out", rate, seed, counter, d_in, d_out);
}
