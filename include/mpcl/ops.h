/* Ops: launchers for the fused bias + activation kernels, the elementwise
 * sum, softmax cross-entropy with device-side statistics, and casts between
 * f32, f16 and bf16.
 *
 * Every op is enqueued on the context's in-order queue and returns without
 * waiting. Math is f32 everywhere; f16 and bf16 are only storage formats.
 * Shapes and dtypes are checked before anything is enqueued: a failing call
 * returns MPCL_ERR_SHAPE or MPCL_ERR_DTYPE (MPCL_ERR_INVALID_ARG for NULL or
 * foreign tensors) and leaves every output untouched. */
#ifndef MPCL_OPS_H
#define MPCL_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "mpcl/activations.h"
#include "mpcl/context.h"
#include "mpcl/losses.h"
#include "mpcl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* MPCL_ACT_IDENTITY, MPCL_ACT_RELU, MPCL_ACT_GELU, MPCL_ACT_SIGMOID,
 * MPCL_ACT_TANH: the rows of mpcl/activations.h, in order; MPCL_ACT_COUNT
 * of them, the elementwise ones the kernels run. MPCL_ACT_SOFTMAX is not
 * elementwise and no op takes it: only a model's output layer declares it,
 * for the loss that applies it itself (mpcl_loss_output_activation). */
#define MPCL_ACTIVATION_ENUM_(NAME, name, ...) MPCL_ACT_##NAME,
typedef enum mpcl_activation {
    MPCL_ACTIVATION_LIST(MPCL_ACTIVATION_ENUM_) MPCL_ACT_COUNT,
    MPCL_ACT_SOFTMAX,
} mpcl_activation;
#undef MPCL_ACTIVATION_ENUM_

/* "identity", "relu", "gelu", "sigmoid", "tanh", "softmax"; "unknown"
 * outside the enum. */
const char *mpcl_activation_name(mpcl_activation act);
/* Name to value of an elementwise activation; false for any other name
 * (softmax included). */
bool mpcl_activation_parse(const char *name, mpcl_activation *out);
/* Every name, for messages: "identity, relu, gelu, sigmoid, tanh". */
const char *mpcl_activation_names(void);

/* The activation the loss applies to its input itself: softmax for sparse
 * categorical cross-entropy, sigmoid for binary cross-entropy (their input
 * is logits), identity for MSE and outside the enum. A model whose output
 * layer declares it leaves it to the loss (mpcl_model_output_activation). */
mpcl_activation mpcl_loss_output_activation(mpcl_loss loss);

/* Which forward tensor the backward of an activation reads as `saved`.
 * Recomputing the derivative from the output costs no extra buffer, so relu
 * (y > 0), sigmoid (y (1 - y)) and tanh (1 - y^2) use the forward output;
 * GELU is not invertible and needs the pre-activation z = in + bias;
 * identity needs nothing (saved may be NULL). */
typedef enum mpcl_act_saved {
    MPCL_ACT_SAVED_NONE,
    MPCL_ACT_SAVED_OUTPUT,
    MPCL_ACT_SAVED_PREACT,
} mpcl_act_saved;
mpcl_act_saved mpcl_activation_saved(mpcl_activation act);

/* out[b,j] = act(pre_in[b,j] + bias[j]).
 * out, pre_in: [B, N], the same storage dtype (f32, f16 or bf16).
 * bias: [1, N] f32 always: the f32 master copy is read directly, so no f16
 * working copy of the bias is needed and the addition is not rounded twice.
 * out may be the same tensor as pre_in (in place). */
mpcl_status mpcl_bias_act_forward(mpcl_context *ctx, mpcl_tensor *out, const mpcl_tensor *pre_in,
                                  const mpcl_tensor *bias, mpcl_activation act);

/* As mpcl_bias_act_forward, and also z = pre_in + bias into `z` ([B, N],
 * storage dtype) in the same pass; z may be NULL. Use it for GELU in
 * training, whose backward needs z (mpcl_activation_saved). */
mpcl_status mpcl_bias_act_forward_z(mpcl_context *ctx, mpcl_tensor *out, mpcl_tensor *z,
                                    const mpcl_tensor *pre_in, const mpcl_tensor *bias,
                                    mpcl_activation act);

/* d_pre[b,j] = d_out[b,j] * act'(z[b,j]), with act' computed from `saved`:
 * the forward output or z as mpcl_activation_saved(act) says.
 * d_pre, d_out, saved: [B, N], one storage dtype. d_pre may be d_out. */
mpcl_status mpcl_bias_act_backward(mpcl_context *ctx, mpcl_tensor *d_pre, const mpcl_tensor *d_out,
                                   const mpcl_tensor *saved, mpcl_activation act);

/* d_bias[0,j] = sum over b of d_pre[b,j], accumulated in f32 and rounded
 * once into d_bias's dtype at the store; overwrites d_bias. The order of the
 * additions is fixed by the shape (blocks of rows summed in row order, then
 * the blocks in order; no atomics), so the result is deterministic.
 * d_pre: [B, N] in the storage dtype (f32, f16 or bf16). d_bias: [1, N] in d_pre's
 * dtype, as every gradient (an f16 sum that overflows is +-inf, which loss
 * scaling detects), or f32 (the sum unrounded). */
mpcl_status mpcl_bias_grad(mpcl_context *ctx, mpcl_tensor *d_bias, const mpcl_tensor *d_pre);

/* mpcl_bias_act_backward(d_pre, d_out, saved, act) then mpcl_bias_grad(d_bias,
 * d_pre) in one launch, with the same results bit for bit: each work-item
 * computes the d_pre elements it then sums. d_bias: [1, N] in the storage
 * dtype. d_pre may be d_out; saved may be NULL where act needs nothing. */
mpcl_status mpcl_bias_act_backward_grad(mpcl_context *ctx, mpcl_tensor *d_pre, mpcl_tensor *d_bias,
                                        const mpcl_tensor *d_out, const mpcl_tensor *saved,
                                        mpcl_activation act);

/* out = a + b elementwise, the sum in f32 rounded once into the storage
 * dtype. out, a, b: [rows, cols], one storage dtype; out may be a or b. */
mpcl_status mpcl_add(mpcl_context *ctx, mpcl_tensor *out, const mpcl_tensor *a,
                     const mpcl_tensor *b);

/* ---- softmax cross-entropy ---- */

/* The softmax cross-entropy's own names for what mpcl/losses.h offers every
 * loss (MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY there): the statistics
 * accumulator is the same [1, MPCL_LOSS_STATS_COLS] f32 tensor, which
 * mpcl_xent_stats_create and mpcl_xent_stats_reset make and zero as the
 * mpcl_loss_stats_ ones do. */
#define MPCL_XENT_STATS_COLS MPCL_LOSS_STATS_COLS

typedef struct mpcl_xent_stats {
    double loss_sum;  /* sum of per-row losses (natural log) over valid rows */
    uint64_t correct; /* rows whose first argmax equals the label */
    uint64_t samples; /* valid rows seen */
    uint64_t calls;   /* loss calls since the last reset */
    uint64_t bad;     /* rows with a label outside [0, classes) */
    int64_t bad_call; /* first bad row: 0-based call since reset, its row, its label */
    int64_t bad_row;  /* (-1 when bad == 0) */
    int64_t bad_label;
} mpcl_xent_stats;

mpcl_status mpcl_xent_stats_create(mpcl_context *ctx, mpcl_tensor **out);
/* Zeroes the accumulator and clears the label error flag (enqueued). */
mpcl_status mpcl_xent_stats_reset(mpcl_context *ctx, mpcl_tensor *stats);
/* mpcl_loss_stats_read in the softmax cross-entropy's terms: waits for the
 * queue, reads the accumulator into *out and, when `reset`, zeroes it.
 * Returns MPCL_ERR_LABEL, naming the first bad call, row and label,
 * when any loss call since the last reset met a label out of range; *out is
 * filled either way and `reset` applies either way, so the flag is per
 * reporting interval. */
mpcl_status mpcl_xent_stats_read(mpcl_context *ctx, mpcl_tensor *stats, mpcl_xent_stats *out,
                                 bool reset);

/* Adds the softmax cross-entropy loss of a batch to stats, in f32, stably
 * (max subtracted, log-sum-exp). No host read.
 * stats: [1, MPCL_XENT_STATS_COLS] f32. logits: [B, C] f32, f16 or bf16.
 * labels: [B, 1] i32; a label outside [0, C) sets the error flag in stats and
 * adds nothing for that row. */
mpcl_status mpcl_softmax_xent_forward(mpcl_context *ctx, mpcl_tensor *stats,
                                      const mpcl_tensor *logits, const mpcl_tensor *labels);

/* The training call, forward and backward fused in one kernel (one pass over
 * the logits): does what mpcl_softmax_xent_forward does and writes
 * d_logits[b,c] = (softmax(logits[b])[c] - (c == labels[b])) * scale / B,
 * the gradient of scale * mean loss, rounded once into d_logits' dtype (an
 * f16 gradient that overflows becomes +-inf, which loss scaling detects).
 * d_logits: [B, C], the same dtype as logits. scale: [1, 1] f32 on the device
 * (the loss-scale helper's buffer, so dynamic scaling needs no host read), or
 * NULL for 1. A row with a bad label gets a zero gradient (and the flag). */
mpcl_status mpcl_softmax_xent_forward_backward(mpcl_context *ctx, mpcl_tensor *stats,
                                               mpcl_tensor *d_logits, const mpcl_tensor *logits,
                                               const mpcl_tensor *labels, const mpcl_tensor *scale);

/* ---- casts ---- */

/* dst = src converted: to f16 or bf16 rounds to nearest even with overflow
 * to +-inf (as half.h's host conversions); f16 and bf16 -> f32 are exact;
 * f16 <-> bf16 rounds once; the same dtype is a copy. inf and NaN pass
 * through. dst, src: the same shape, f32, f16 or bf16. */
mpcl_status mpcl_cast(mpcl_context *ctx, mpcl_tensor *dst, const mpcl_tensor *src);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
