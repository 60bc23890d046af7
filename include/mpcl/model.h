/* Model: a sequential MLP of Dense layers (bias, activation) with its training
 * state -- optimizer, loss scaler, loss statistics -- on one device. Forward,
 * backward and update are enqueued without any host read; the host reads the
 * device only when it asks for statistics.
 *
 * Layout of one training step (B = rows of the batch, L layers):
 *   forward   h_l = act_l(x_l W_l + b_l)          GEMM NN, then fused bias+act
 *   loss      stats += xent(h_{L-1}, labels);  d_L = (softmax - onehot) * scale / B
 *   backward  dW_l = x_l^T d_l                     GEMM TN
 *             db_l = column sums of d_l            f32
 *             d_{l-1} = (d_l W_l^T) * act'         GEMM NT, then fused act backward
 *   scaling   found_inf |= any non-finite in dW, db   (mixed_float16 only)
 *   update    optimizer: unscale, update f32 masters, rewrite working copies,
 *             all skipped on the device when found_inf is set
 *   scale     dynamic loss-scale state machine
 * Weights are kept as Keras keeps them: kernel [inputs, units], bias [units]. */
#ifndef MPCL_MODEL_H
#define MPCL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mpcl/context.h"
#include "mpcl/loss_scale.h"
#include "mpcl/ops.h"
#include "mpcl/optim.h"
#include "mpcl/plan.h"
#include "mpcl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

#define MPCL_MAX_HIDDEN 7

typedef struct mpcl_model_params {
    size_t inputs;                     /* 784 */
    size_t hidden[MPCL_MAX_HIDDEN];    /* widths of the hidden layers: {128} */
    size_t hidden_count;               /* 1 */
    size_t classes;                    /* 10: the output layer, identity activation */
    mpcl_activation activation;        /* relu, for every hidden layer */
    mpcl_policy policy;                /* auto */
    size_t max_batch;                  /* 128: batches may be smaller, never larger */
    uint64_t seed;                     /* 42: the Glorot-uniform initial weights */
    mpcl_optim_params optim;           /* Adam, lr 1e-3, betas 0.9/0.999, eps 1e-7 */
    mpcl_loss_scale_params loss_scale; /* dynamic, 2^15; used when the plan scales */
} mpcl_model_params;

mpcl_model_params mpcl_model_default_params(void);

typedef struct mpcl_model mpcl_model;

/* Resolves params->policy through the context's plan (MPCL_ERR_UNSUPPORTED
 * with the plan's reason when it is not usable), allocates every tensor for
 * batches up to max_batch, and initializes the weights: Glorot-uniform kernels
 * drawn on the host from params->seed (the same numbers on every device and
 * policy), zero biases. MPCL_ERR_INVALID_ARG names a bad parameter. */
mpcl_status mpcl_model_create(mpcl_context *ctx, const mpcl_model_params *params, mpcl_model **out);
void mpcl_model_destroy(mpcl_model *m);

const mpcl_model_params *mpcl_model_params_of(const mpcl_model *m);
const mpcl_plan *mpcl_model_plan(const mpcl_model *m);
size_t mpcl_model_layer_count(const mpcl_model *m);
/* NULL when the plan does not scale the loss (float32). */
mpcl_loss_scale *mpcl_model_loss_scale(const mpcl_model *m);

/* One training step, enqueued: forward, loss, backward, loss-scale check,
 * update, scale update.
 * x: [B, inputs] in the plan's storage dtype; labels: [B, 1] i32; 1 <= B <=
 * max_batch. Loss and accuracy go to the training statistics. */
mpcl_status mpcl_model_train_step(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels);

/* Forward and loss only, into the evaluation statistics. Same shapes. */
mpcl_status mpcl_model_eval_step(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels);

/* Blocking reads of the statistics (see mpcl_xent_stats_read: MPCL_ERR_LABEL
 * when a label was out of range since the last reset). */
mpcl_status mpcl_model_read_train_stats(mpcl_model *m, mpcl_xent_stats *out, bool reset);
mpcl_status mpcl_model_read_eval_stats(mpcl_model *m, mpcl_xent_stats *out, bool reset);

/* The logits of the last step, [B, classes] in the storage dtype, B as given
 * to that step; for tests and inspection. */
mpcl_status mpcl_model_read_logits(mpcl_model *m, float *dst, size_t count);

/* ---- parameters, for checkpoints ---- */

/* 2 per layer, in order: dense_0.kernel, dense_0.bias, dense_1.kernel, ... */
size_t mpcl_model_param_count(const mpcl_model *m);
/* The Keras name ("dense_1.kernel") and shape ([inputs, units] for a kernel,
 * [1, units] for a bias). */
const char *mpcl_model_param_name(const mpcl_model *m, size_t index);
void mpcl_model_param_shape(const mpcl_model *m, size_t index, size_t *rows, size_t *cols);
bool mpcl_model_has_slot(const mpcl_model *m, mpcl_optim_slot slot);
/* Blocking copies of a parameter's f32 master weights or optimizer moments;
 * count = rows * cols (MPCL_ERR_SHAPE). Writing the master also rewrites the
 * working copy the GEMMs read. */
mpcl_status mpcl_model_read_param(mpcl_model *m, size_t index, mpcl_optim_slot slot, float *dst,
                                  size_t count);
mpcl_status mpcl_model_write_param(mpcl_model *m, size_t index, mpcl_optim_slot slot,
                                   const float *src, size_t count);
/* The optimizer's step counter (completed updates). */
mpcl_status mpcl_model_read_step(mpcl_model *m, uint32_t *step);
mpcl_status mpcl_model_write_step(mpcl_model *m, uint32_t step);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
