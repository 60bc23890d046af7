/* Losses: sparse categorical cross-entropy (softmax on logits, integer
 * labels), binary cross-entropy on logits and mean squared error (float
 * targets), with their metrics and one statistics accumulator on the device.
 *
 * As every op (mpcl/ops.h): enqueued on the context's in-order queue without
 * waiting, f32 math whatever the storage dtype, every argument checked
 * before anything is enqueued (a failing call leaves its outputs untouched).
 * The statistics are added on the device, so a training loop reads them
 * only when it reports. */
#ifndef MPCL_LOSSES_H
#define MPCL_LOSSES_H

#include <stdbool.h>
#include <stdint.h>

#include "mpcl/context.h"
#include "mpcl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* Every loss is averaged over its terms: a row each for sparse categorical
 * cross-entropy, an element each for the dense losses (Keras' mean over the
 * last axis then over the batch, the same for a fixed number of columns). */
typedef enum mpcl_loss {
    /* softmax cross-entropy of logits [B, C] against labels [B, 1] i32;
     * metric: accuracy (the first argmax is the label) */
    MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
    /* max(z, 0) - z t + log1p(exp(-|z|)) of logits z [B, C] against targets
     * t [B, C] f32 in [0, 1] (soft labels allowed); metric: binary accuracy
     * (z > 0, i.e. sigmoid(z) > 0.5, against t > 0.5) */
    MPCL_LOSS_BINARY_CROSSENTROPY,
    /* (y - t)^2 of predictions y [B, C] against finite targets t [B, C] f32;
     * metric: mean absolute error */
    MPCL_LOSS_MSE,
    MPCL_LOSS_COUNT,
} mpcl_loss;

/* Keras' names: "sparse_categorical_crossentropy", "binary_crossentropy",
 * "mse"; "unknown" outside the enum. */
const char *mpcl_loss_name(mpcl_loss loss);
/* Name to value; false for an unknown name. */
bool mpcl_loss_parse(const char *name, mpcl_loss *out);
/* The metric's Keras name: "accuracy", "binary_accuracy", "mae". */
const char *mpcl_loss_metric_name(mpcl_loss loss);
/* True when the loss takes integer labels [B, 1] i32, false when float
 * targets [B, C] f32 (and for a loss outside the enum). */
bool mpcl_loss_sparse_targets(mpcl_loss loss);

/* The statistics accumulator: a [1, MPCL_LOSS_STATS_COLS] f32 tensor whose
 * layout is private to the library (integer counters and the bad-target
 * record besides f32 sums). mpcl_loss_stats_create makes it zeroed. Meant
 * for one loss; the read reports the loss of the last call. */
#define MPCL_LOSS_STATS_COLS 16

typedef struct mpcl_loss_stats {
    mpcl_loss loss;    /* of the last call since the reset; MPCL_LOSS_COUNT before any */
    double loss_sum;   /* sum of the loss terms (natural log) of the valid rows */
    double metric_sum; /* accuracies: terms counted right; mae: sum of |y - t| */
    uint64_t terms;    /* loss terms summed: means are loss_sum / terms, metric_sum / terms */
    uint64_t samples;  /* valid rows seen */
    uint64_t calls;    /* loss calls since the last reset */
    uint64_t bad;      /* rows with a bad target (they add nothing) */
    /* The first bad target: its 0-based call since the reset, row, column (0
     * for a label) and value (the label, or the target: NaN possible); all
     * -1 when bad == 0. */
    int64_t bad_call;
    int64_t bad_row;
    int64_t bad_col;
    double bad_target;
} mpcl_loss_stats;

mpcl_status mpcl_loss_stats_create(mpcl_context *ctx, mpcl_tensor **out);
/* Zeroes the accumulator and clears the bad-target record (enqueued). */
mpcl_status mpcl_loss_stats_reset(mpcl_context *ctx, mpcl_tensor *stats);
/* Waits for the queue, reads the accumulator into *out and, when `reset`,
 * zeroes it. Returns MPCL_ERR_LABEL, naming the first bad call, row, column
 * and target, when any loss call since the last reset met a bad target (a
 * label outside [0, C); a binary target outside [0, 1] or NaN; a
 * non-finite MSE target); *out is filled either way and `reset` applies
 * either way, so the flag is per reporting interval. */
mpcl_status mpcl_loss_stats_read(mpcl_context *ctx, mpcl_tensor *stats, mpcl_loss_stats *out,
                                 bool reset);

/* Adds the loss of a batch to stats (no host read). pred: [B, C] f32, f16 or
 * bf16, the logits (the cross-entropies) or predictions (MSE). targets: as
 * mpcl_loss_sparse_targets says. A row with a bad target adds nothing and
 * is recorded in stats. */
mpcl_status mpcl_loss_forward(mpcl_context *ctx, mpcl_loss loss, mpcl_tensor *stats,
                              const mpcl_tensor *pred, const mpcl_tensor *targets);

/* The training call, forward and backward fused in one pass: does what
 * mpcl_loss_forward does and writes d_pred, the gradient of scale times the
 * mean loss (softmax(z) - onehot(label) over B; sigmoid(z) - t and 2 (y - t)
 * over B * C), rounded once into d_pred's dtype (an f16 gradient that
 * overflows is +-inf, which loss scaling detects). d_pred: [B, C], pred's
 * dtype. scale: [1, 1] f32 on the device (the loss-scale helper's buffer),
 * or NULL for 1. A row with a bad target gets a zero gradient row. */
mpcl_status mpcl_loss_forward_backward(mpcl_context *ctx, mpcl_loss loss, mpcl_tensor *stats,
                                       mpcl_tensor *d_pred, const mpcl_tensor *pred,
                                       const mpcl_tensor *targets, const mpcl_tensor *scale);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
