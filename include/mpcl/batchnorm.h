/* Batch normalization over channels, Keras' BatchNormalization on the last
 * axis. x is [N, C] in the storage dtype: an NHWC batch [B, H*W*C] is
 * reshaped to [B*H*W, C] by the caller (a Dense layer's [B, C] as it is).
 * The parameters gamma, beta and the moving statistics moving_mean,
 * moving_var are f32 [1, C]; so are save_mean and save_inv_std, the batch
 * statistics the training forward keeps for the backward. Statistics and
 * sums are f32 on the device, in a fixed order (deterministic). Every op is
 * enqueued and returns without waiting; arguments are checked completely
 * before anything is enqueued, so a refused call leaves its outputs
 * untouched (MPCL_ERR_SHAPE, MPCL_ERR_DTYPE, MPCL_ERR_INVALID_ARG naming the
 * tensor or the argument). */
#ifndef MPCL_BATCHNORM_H
#define MPCL_BATCHNORM_H

#include "mpcl/context.h"
#include "mpcl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* The training forward: per channel, mean and biased variance var over the
 * N rows (two passes), inv_std = 1 / sqrt(var + epsilon), y = gamma (x -
 * mean) inv_std + beta; save_mean = mean, save_inv_std = inv_std;
 * moving_mean = momentum moving_mean + (1 - momentum) mean, moving_var
 * likewise with var (Keras 3). momentum in [0, 1], epsilon > 0 and finite.
 * y: x's dtype and shape. */
mpcl_status mpcl_batchnorm_forward_train(mpcl_context *ctx, float momentum, float epsilon,
                                         mpcl_tensor *y, const mpcl_tensor *x,
                                         const mpcl_tensor *gamma, const mpcl_tensor *beta,
                                         mpcl_tensor *moving_mean, mpcl_tensor *moving_var,
                                         mpcl_tensor *save_mean, mpcl_tensor *save_inv_std);

/* The inference forward: y = gamma (x - moving_mean) / sqrt(moving_var +
 * epsilon) + beta. Writes y only. */
mpcl_status mpcl_batchnorm_forward_eval(mpcl_context *ctx, float epsilon, mpcl_tensor *y,
                                        const mpcl_tensor *x, const mpcl_tensor *gamma,
                                        const mpcl_tensor *beta, const mpcl_tensor *moving_mean,
                                        const mpcl_tensor *moving_var);

/* The gradients of the training forward given dy, with xhat = (x -
 * save_mean) save_inv_std (the forward's saves): d_beta = sum over the rows
 * of dy, d_gamma = sum of dy xhat, dx = gamma save_inv_std / N (N dy -
 * d_beta - xhat d_gamma), sums in f32. dx, dy, x: [N, C] of one storage
 * dtype; d_gamma, d_beta: [1, C] of that dtype (a gradient arena's);
 * gamma, save_mean, save_inv_std: f32 [1, C]. dx may be dy. */
mpcl_status mpcl_batchnorm_backward(mpcl_context *ctx, mpcl_tensor *dx, mpcl_tensor *d_gamma,
                                    mpcl_tensor *d_beta, const mpcl_tensor *dy,
                                    const mpcl_tensor *x, const mpcl_tensor *gamma,
                                    const mpcl_tensor *save_mean, const mpcl_tensor *save_inv_std);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
