/* Batch normalization (include/mpcl/batchnorm.h): the argument checks and
 * the launchers of cl/batchnorm.cl, one work-group per channel. */
#include "mpcl/batchnorm.h"

#include <math.h>

#include "compute/compute.h"

/* A float tensor of ctx, rows x cols, of `dtype`. */
static mpcl_status check_tensor(mpcl_context *ctx, const char *op, const mpcl_tensor *t,
                                const char *what, mpcl_dtype dtype, size_t rows, size_t cols) {
    TRY(mpcl__check_present(ctx, t, op, what));
    TRY(mpcl__check_dtype(ctx, t, dtype, op, what));
    return mpcl__check_shape(ctx, t, rows, cols, op, what);
}

/* x: present, a float storage dtype, within the kernels' uint indices. */
static mpcl_status check_x(mpcl_context *ctx, const char *op, const mpcl_tensor *x) {
    TRY(mpcl__check_present(ctx, x, op, "x"));
    TRY(mpcl__check_storage(ctx, x, op, "x"));
    return mpcl__check_count(ctx, x, op);
}

/* Per-channel f32 vectors, [1, C] each, named by `names`. */
static mpcl_status check_channels(mpcl_context *ctx, const char *op, size_t channels, size_t n,
                                  const mpcl_tensor *const *t, const char *const *names) {
    for (size_t i = 0; i < n; i++)
        TRY(check_tensor(ctx, op, t[i], names[i], MPCL_DTYPE_F32, 1, channels));
    return MPCL_OK;
}

static mpcl_status check_epsilon(mpcl_context *ctx, const char *op, float epsilon) {
    if (!(epsilon > 0.0f) || isinf(epsilon))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: epsilon %g is not a finite number > 0",
                          op, (double)epsilon);
    return MPCL_OK;
}

/* One work-group of MPCL_ABI_BATCHNORM_WG items per channel. */
static mpcl_status launch_per_channel(mpcl_context *ctx, cl_kernel k, const char *name,
                                      size_t channels) {
    return mpcl__launch_1d(ctx, k, name, channels * MPCL_ABI_BATCHNORM_WG, MPCL_ABI_BATCHNORM_WG);
}

mpcl_status mpcl_batchnorm_forward_train(mpcl_context *ctx, float momentum, float epsilon,
                                         mpcl_tensor *y, const mpcl_tensor *x,
                                         const mpcl_tensor *gamma, const mpcl_tensor *beta,
                                         mpcl_tensor *moving_mean, mpcl_tensor *moving_var,
                                         mpcl_tensor *save_mean, mpcl_tensor *save_inv_std) {
    static const char op[] = "mpcl_batchnorm_forward_train";
    if (!(momentum >= 0.0f && momentum <= 1.0f))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: momentum %g is outside [0, 1]", op,
                          (double)momentum);
    TRY(check_epsilon(ctx, op, epsilon));
    TRY(check_x(ctx, op, x));
    TRY(check_tensor(ctx, op, y, "y", x->dtype, x->rows, x->cols));
    const mpcl_tensor *const params[] = {gamma,      beta,      moving_mean,
                                         moving_var, save_mean, save_inv_std};
    static const char *const names[] = {"gamma",      "beta",      "moving_mean",
                                        "moving_var", "save_mean", "save_inv_std"};
    TRY(check_channels(ctx, op, x->cols, 6, params, names));

    static const char name[] = "mpcl_batchnorm_forward_train";
    cl_kernel k;
    TRY(mpcl__kernel(ctx, x->dtype, name, &k));
    cl_uint rows = (cl_uint)x->rows, cols = (cl_uint)x->cols;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(y->mem), MPCL_ARG(x->mem), MPCL_ARG(gamma->mem),
                       MPCL_ARG(beta->mem), MPCL_ARG(moving_mean->mem), MPCL_ARG(moving_var->mem),
                       MPCL_ARG(save_mean->mem), MPCL_ARG(save_inv_std->mem), MPCL_ARG(momentum),
                       MPCL_ARG(epsilon), MPCL_ARG(rows), MPCL_ARG(cols), MPCL_ARGS_END));
    return launch_per_channel(ctx, k, name, cols);
}

mpcl_status mpcl_batchnorm_forward_eval(mpcl_context *ctx, float epsilon, mpcl_tensor *y,
                                        const mpcl_tensor *x, const mpcl_tensor *gamma,
                                        const mpcl_tensor *beta, const mpcl_tensor *moving_mean,
                                        const mpcl_tensor *moving_var) {
    static const char op[] = "mpcl_batchnorm_forward_eval";
    TRY(check_epsilon(ctx, op, epsilon));
    TRY(check_x(ctx, op, x));
    TRY(check_tensor(ctx, op, y, "y", x->dtype, x->rows, x->cols));
    const mpcl_tensor *const params[] = {gamma, beta, moving_mean, moving_var};
    static const char *const names[] = {"gamma", "beta", "moving_mean", "moving_var"};
    TRY(check_channels(ctx, op, x->cols, 4, params, names));

    static const char name[] = "mpcl_batchnorm_forward_eval";
    cl_kernel k;
    TRY(mpcl__kernel(ctx, x->dtype, name, &k));
    cl_uint rows = (cl_uint)x->rows, cols = (cl_uint)x->cols;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(y->mem), MPCL_ARG(x->mem), MPCL_ARG(gamma->mem),
                       MPCL_ARG(beta->mem), MPCL_ARG(moving_mean->mem), MPCL_ARG(moving_var->mem),
                       MPCL_ARG(epsilon), MPCL_ARG(rows), MPCL_ARG(cols), MPCL_ARGS_END));
    return launch_per_channel(ctx, k, name, cols);
}

mpcl_status mpcl_batchnorm_backward(mpcl_context *ctx, mpcl_tensor *dx, mpcl_tensor *d_gamma,
                                    mpcl_tensor *d_beta, const mpcl_tensor *dy,
                                    const mpcl_tensor *x, const mpcl_tensor *gamma,
                                    const mpcl_tensor *save_mean, const mpcl_tensor *save_inv_std) {
    static const char op[] = "mpcl_batchnorm_backward";
    TRY(check_x(ctx, op, x));
    TRY(check_tensor(ctx, op, dy, "dy", x->dtype, x->rows, x->cols));
    TRY(check_tensor(ctx, op, dx, "dx", x->dtype, x->rows, x->cols));
    TRY(check_tensor(ctx, op, d_gamma, "d_gamma", x->dtype, 1, x->cols));
    TRY(check_tensor(ctx, op, d_beta, "d_beta", x->dtype, 1, x->cols));
    const mpcl_tensor *const params[] = {gamma, save_mean, save_inv_std};
    static const char *const names[] = {"gamma", "save_mean", "save_inv_std"};
    TRY(check_channels(ctx, op, x->cols, 3, params, names));

    static const char name[] = "mpcl_batchnorm_backward";
    cl_kernel k;
    TRY(mpcl__kernel(ctx, x->dtype, name, &k));
    cl_uint rows = (cl_uint)x->rows, cols = (cl_uint)x->cols;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(dx->mem), MPCL_ARG(d_gamma->mem),
                       MPCL_ARG(d_beta->mem), MPCL_ARG(dy->mem), MPCL_ARG(x->mem),
                       MPCL_ARG(gamma->mem), MPCL_ARG(save_mean->mem), MPCL_ARG(save_inv_std->mem),
                       MPCL_ARG(rows), MPCL_ARG(cols), MPCL_ARGS_END));
    return launch_per_channel(ctx, k, name, cols);
}
