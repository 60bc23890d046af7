/* Model: a list of layers (layer_spec.h) over a parameter table, with its
 * training state -- optimizer, loss scaler, loss statistics -- on one device.
 *
 * Parameters live in flat arenas described by one table, as llm.c carves one
 * block for all parameters: every trainable tensor is a row {name, shape,
 * offset}, and the same offset indexes each arena -- the f32 master weights,
 * the working copy in the storage dtype that the GEMMs read, the gradients
 * (storage dtype), and the optimizer's state (f32). Offsets are aligned to the
 * device's sub-buffer alignment, so a layer sees its parameters and gradients
 * as views (sub-buffers) while the loss-scale check, the clip norm and the
 * optimizer each run once over a whole arena.
 *
 * One training step, in three phases, all enqueued without any host read
 * (shown for Dense layers; a convolution is the same GEMMs over im2col):
 *   forward   h_l = act_l(x_l W_l + b_l)           GEMM NN, then fused bias+act
 *             loss: stats += loss(logits, targets); d_L = dloss * scale / B
 *   backward  per layer from the top: d_pre = d_out * act'   (fused)
 *             dW = x^T d_pre                         GEMM TN, into the gradient arena
 *             db = column sums of d_pre              into the gradient arena
 *             d_in = d_pre W^T                       GEMM NT (not for the first layer)
 *   apply     found_inf |= any non-finite in the gradient arena (with a loss scaler);
 *             optional global-norm clip; the optimizer (unscale, update the f32
 *             masters and state, rewrite the working copy; skipped on the
 *             device when found_inf is set); the loss-scale update.
 * Between backward and apply a caller may work on the gradient arena (a
 * data-parallel all-reduce goes there).
 *
 * Biases are read by the bias kernel from the f32 master arena directly (no
 * double rounding); their gradients are in the storage dtype like every
 * other. Weights are named and shaped as Keras names them: dense_N.kernel
 * [inputs, units], dense_N.bias [units], conv2d_N.kernel [kh, kw, in,
 * filters]; a batch norm's moving averages are buffers, outside the arenas
 * the optimizer sees. */
#ifndef MPCL_MODEL_H
#define MPCL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mpcl/context.h"
#include "mpcl/layer_spec.h"
#include "mpcl/loss_scale.h"
#include "mpcl/losses.h"
#include "mpcl/lr_schedule.h"
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
#define MPCL_MAX_RANK 4

/* Loss scaling: as the plan says (on for mixed_float16, off for float32 and
 * mixed_bfloat16), or forced on or off. */
typedef enum mpcl_loss_scaling {
    MPCL_LOSS_SCALING_PLAN,
    MPCL_LOSS_SCALING_ON,
    MPCL_LOSS_SCALING_OFF,
} mpcl_loss_scaling;

typedef struct mpcl_model_params {
    size_t inputs; /* 784: features per sample */
    /* The shape of a sample, as Keras' input_shape: (features) or (height,
     * width, channels), NHWC. input_rank 0 (the default) means (inputs);
     * otherwise inputs is the product of the shape (0 is taken as that). */
    size_t input_shape[MPCL_MAX_INPUT_RANK];
    size_t input_rank;
    /* The layers (layer_spec.h). With layer_count 0 (the default) they are
     * an MLP made from the three fields below: Dense(hidden[i], activation)
     * for each hidden width, then Dense(classes) with identity activation.
     * An explicit list ends in a layer of `classes` outputs (the label
     * count, or the target columns of a dense loss). */
    mpcl_layer_spec layers[MPCL_MAX_LAYERS];
    size_t layer_count;                /* 0 */
    size_t hidden[MPCL_MAX_HIDDEN];    /* widths of the hidden layers: {128} */
    size_t hidden_count;               /* 1 */
    size_t classes;                    /* 10: the output layer, identity activation */
    mpcl_activation activation;        /* relu, for every hidden layer */
    mpcl_loss loss;                    /* sparse categorical cross-entropy */
    mpcl_policy policy;                /* auto */
    size_t max_batch;                  /* 128: batches may be smaller, never larger */
    uint64_t seed;                     /* 42: the Glorot-uniform initial weights */
    mpcl_optim_params optim;           /* Adam, lr 1e-3, betas 0.9/0.999, eps 1e-7 */
    mpcl_lr_schedule lr_schedule;      /* constant; the trainer applies it (train.h) */
    mpcl_loss_scaling loss_scaling;    /* as the plan says */
    mpcl_loss_scale_params loss_scale; /* dynamic, 2^15; used when scaling is on */
} mpcl_model_params;

mpcl_model_params mpcl_model_default_params(void);

/* The layer list params describe (explicit, or the MLP), into out[0..*count);
 * MPCL_ERR_INVALID_ARG for a bad spec. ctx may be NULL. */
mpcl_status mpcl_model_params_layers(mpcl_context *ctx, const mpcl_model_params *params,
                                     mpcl_layer_spec out[MPCL_MAX_LAYERS], size_t *count);
/* The output activation of params that its loss applies itself: the last
 * layer's activation when it is mpcl_loss_output_activation of the loss
 * (softmax with sparse categorical cross-entropy, sigmoid with binary
 * cross-entropy), else MPCL_ACT_IDENTITY. The model keeps the layers as
 * declared (a checkpoint records them so), runs that layer linear and the
 * loss reads its logits; the model's output (mpcl_model_read_logits) is
 * then the logits, and a prediction applies this activation to them. A
 * softmax on another layer, or with another loss, is refused when the
 * model is built (MPCL_ERR_INVALID_ARG). */
mpcl_activation mpcl_model_output_activation(const mpcl_model_params *params);
/* The input shape params describe: (inputs) when input_rank is 0. */
void mpcl_model_params_input_shape(const mpcl_model_params *params,
                                   size_t shape[MPCL_MAX_INPUT_RANK], size_t *rank);

/* The text form of a model (layer_spec.h): its input shape and its layers
 * (the MLP's, when params gives widths); MPCL_ERR_SHAPE for a short buffer.
 * MPCL_MODEL_SPEC_MAX is always enough. */
#define MPCL_MODEL_SPEC_MAX 8192
mpcl_status mpcl_model_spec_format(mpcl_context *ctx, const mpcl_model_params *params, char *buf,
                                   size_t size);
/* The text form into params' input shape and explicit layers (the other
 * fields are kept): "input_shape=28,28,1; conv2d filters=32 ...; dense
 * units=10". MPCL_ERR_INVALID_ARG naming the layer and what is wrong. */
mpcl_status mpcl_model_spec_parse(mpcl_context *ctx, const char *text, mpcl_model_params *params);

/* The shape of each layer's output for params (the shapes chain: a
 * mismatch is MPCL_ERR_INVALID_ARG naming both layers and their shapes),
 * and each layer's parameter count, without a device: for summaries.
 * shapes: [MPCL_MAX_LAYERS][MPCL_MAX_INPUT_RANK]. */
typedef struct mpcl_layer_summary {
    char name[32]; /* "conv2d_0" */
    size_t out_rank, out_shape[MPCL_MAX_INPUT_RANK];
    size_t params;  /* trainable elements */
    size_t buffers; /* non-trainable elements (a batch norm's moving averages) */
} mpcl_layer_summary;
mpcl_status mpcl_model_summary(mpcl_context *ctx, const mpcl_model_params *params,
                               mpcl_layer_summary out[MPCL_MAX_LAYERS], size_t *count);

typedef struct mpcl_model mpcl_model;

/* Resolves params->policy through the context's plan (MPCL_ERR_UNSUPPORTED
 * with the plan's reason when it is not usable), builds the layers, lays out
 * the arenas, allocates every tensor for batches up to max_batch, and
 * initializes the weights: Glorot-uniform kernels drawn on the host from
 * params->seed (the same numbers on every device and policy), zero biases.
 * MPCL_ERR_INVALID_ARG names a bad parameter. */
mpcl_status mpcl_model_create(mpcl_context *ctx, const mpcl_model_params *params, mpcl_model **out);

/* The plan `auto` gives a model of these params (mpcl_model_create uses it
 * when params->policy is auto): on first use of a (device, driver, model
 * shape), a few training steps of float32 and of mixed_float16 on each GEMM
 * path that takes f16 are timed, and the fastest is taken; the verdict is
 * kept in the cache folder (MPCL_CACHE_DIR) and reused. The reason names the
 * figures. With MPCL_AUTO=capability, or one candidate only, it is the
 * capability rule (mpcl_plan_resolve). */
mpcl_status mpcl_model_auto_plan(mpcl_context *ctx, const mpcl_model_params *params,
                                 mpcl_plan *out);
void mpcl_model_destroy(mpcl_model *m);

const mpcl_model_params *mpcl_model_params_of(const mpcl_model *m);
const mpcl_plan *mpcl_model_plan(const mpcl_model *m);
size_t mpcl_model_layer_count(const mpcl_model *m);
const mpcl_layer_spec *mpcl_model_layer(const mpcl_model *m, size_t index);
/* The context the model was created on. */
mpcl_context *mpcl_model_context(const mpcl_model *m);

/* NULL when loss scaling is off. */
mpcl_loss_scale *mpcl_model_loss_scale(const mpcl_model *m);

/* ---- the step in three phases ---- */

/* Forward with the loss: the logits of x, the training loss and accuracy
 * into the training statistics, and the loss gradient (times the loss scale)
 * for backward. x: [B, inputs] in the plan's storage dtype (NHWC for an
 * image shape); labels: the targets of the model's loss (losses.h): [B, 1]
 * i32 labels, or [B, classes] f32 targets; 1 <= B <= max_batch. x and
 * labels must stay alive until backward. */
mpcl_status mpcl_model_forward(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels);
/* Forward of one replica's slice x of a data-parallel global batch of
 * batch_rows rows (>= x's rows; MPCL_ERR_INVALID_ARG otherwise): as
 * mpcl_model_forward, except that the loss gradient is divided by batch_rows
 * instead of x's rows. Each row's loss gradient is then bit for bit what the
 * whole batch in one model gives it, and the sum of the slices' gradient
 * arenas is the global batch's gradient (only the order of the sum differs). */
mpcl_status mpcl_model_forward_slice(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels,
                                     size_t batch_rows);

/* Gradients of the last forward into the gradient arena (overwritten, not
 * accumulated). MPCL_ERR_INVALID_ARG without a forward before it. */
mpcl_status mpcl_model_backward(mpcl_model *m);
/* Gradient accumulation over micro-batches: after the backward of every
 * micro-batch but the last, this adds the gradient arena into an f32 sum
 * the model keeps (the first stash after an apply starts it; the sum is
 * made on first use, 4 bytes a parameter); the last micro-batch's backward
 * is followed by apply, which adds the sum in, rounded once to the storage
 * dtype, before its checks and update. With each micro-batch's forward
 * given the whole step's rows (mpcl_model_forward_slice's batch_rows), the
 * applied gradient is the whole step's mean. MPCL_ERR_INVALID_ARG without
 * a backward before it. */
mpcl_status mpcl_model_stash_grads(mpcl_model *m);
/* Adds the stash into the gradient arena now, for a caller that reads or
 * sums the arena before apply (a data-parallel all-reduce); apply then adds
 * nothing. Nothing stashed: nothing to do. MPCL_ERR_INVALID_ARG without a
 * backward before it. */
mpcl_status mpcl_model_unstash_grads(mpcl_model *m);
/* The finite check, the optional clip, the optimizer and the loss-scale
 * update. MPCL_ERR_INVALID_ARG without a backward before it. */
mpcl_status mpcl_model_apply(mpcl_model *m);

/* forward, backward and apply. */
mpcl_status mpcl_model_train_step(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels);

/* Forward and loss only, into the evaluation statistics. Same shapes. */
mpcl_status mpcl_model_eval_step(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *labels);

/* The gradient arena, [1, arena elements] in the storage dtype: between
 * backward and apply a caller may read or rewrite it (owned by the model). */
mpcl_tensor *mpcl_model_grad_arena(mpcl_model *m);

/* The dtype of a batch's x: int32 token ids when the first layer takes
 * them (token_pos_embedding), else the plan's storage dtype. */
mpcl_dtype mpcl_model_input_dtype(const mpcl_model *m);
/* The labels per sample: T when the model's output is (T, classes) (a
 * sparse label per position: labels int32 [B, T], the loss and accuracy
 * the mean over the B T positions), else 1. */
size_t mpcl_model_positions(const mpcl_model *m);

/* The logits per position: the last axis of the model's output (a GPT's
 * vocabulary). */
size_t mpcl_model_classes(const mpcl_model *m);

/* Inference: the forward of x alone (evaluation mode: dropout is the
 * identity), no labels, no loss, no statistics. x as for
 * mpcl_model_forward. The logits are then read with mpcl_model_read_logits
 * or mpcl_model_read_position_logits; a backward may not follow. */
mpcl_status mpcl_model_predict(mpcl_model *m, const mpcl_tensor *x);

/* Blocking reads of the statistics of the model's loss (see
 * mpcl_loss_stats_read: MPCL_ERR_LABEL when a target was bad since the last
 * reset). */
mpcl_status mpcl_model_read_train_stats(mpcl_model *m, mpcl_loss_stats *out, bool reset);
mpcl_status mpcl_model_read_eval_stats(mpcl_model *m, mpcl_loss_stats *out, bool reset);

/* The global gradient norm of the last applied step (clip_norm > 0 only;
 * NaN otherwise). Blocking. */
mpcl_status mpcl_model_read_grad_norm(mpcl_model *m, float *norm);

/* The logits of the last step, [B, classes] in the storage dtype, B as given
 * to that step; for tests and inspection. */
mpcl_status mpcl_model_read_logits(mpcl_model *m, float *dst, size_t count);
/* The logits of one sample at one position of the last step (position 0
 * for a (classes,) output): count = mpcl_model_classes floats, converted
 * from the storage dtype; only those are read from the device.
 * MPCL_ERR_SHAPE for a sample or position outside the last step's, or
 * another count. */
mpcl_status mpcl_model_read_position_logits(mpcl_model *m, size_t sample, size_t position,
                                            float *dst, size_t count);

/* ---- the parameter table, for checkpoints ---- */

typedef struct mpcl_param_info {
    char name[48];               /* "dense_1.kernel" */
    size_t rank;                 /* 1 to MPCL_MAX_RANK */
    size_t shape[MPCL_MAX_RANK]; /* Keras' shape: kernel [inputs, units], bias [units] */
    size_t offset;               /* elements from the start of every arena */
    size_t count;                /* elements: the product of the shape */
} mpcl_param_info;

/* Trainable parameters in layer order: dense_0.kernel, dense_0.bias,
 * dense_1.kernel, ... */
size_t mpcl_model_param_count(const mpcl_model *m);
/* NULL past the end. */
const mpcl_param_info *mpcl_model_param(const mpcl_model *m, size_t index);
const char *mpcl_model_param_name(const mpcl_model *m, size_t index);
/* Elements in each arena (the rows plus alignment padding) and the alignment
 * of every row's offset, in elements. */
size_t mpcl_model_arena_elements(const mpcl_model *m);
size_t mpcl_model_arena_align(const mpcl_model *m);

bool mpcl_model_has_slot(const mpcl_model *m, mpcl_optim_slot slot);
/* Blocking copies of a parameter's f32 master weights or optimizer state;
 * count = the parameter's element count (MPCL_ERR_SHAPE). Writing the master
 * also rewrites the working copy the GEMMs read. */
mpcl_status mpcl_model_read_param(mpcl_model *m, size_t index, mpcl_optim_slot slot, float *dst,
                                  size_t count);
mpcl_status mpcl_model_write_param(mpcl_model *m, size_t index, mpcl_optim_slot slot,
                                   const float *src, size_t count);
/* The buffers: state a layer keeps that no gradient reaches (a batch norm's
 * moving_mean and moving_variance), f32, in layer order; offsets index the
 * buffer arena. */
size_t mpcl_model_buffer_count(const mpcl_model *m);
const mpcl_param_info *mpcl_model_buffer(const mpcl_model *m, size_t index);
mpcl_status mpcl_model_read_buffer(mpcl_model *m, size_t index, float *dst, size_t count);
mpcl_status mpcl_model_write_buffer(mpcl_model *m, size_t index, const float *src, size_t count);

/* Training forwards so far: each draws its own dropout masks from the
 * seed and this counter, which a checkpoint keeps so that a resumed run
 * draws what the uninterrupted run would have. */
uint64_t mpcl_model_rng_counter(const mpcl_model *m);
void mpcl_model_set_rng_counter(mpcl_model *m, uint64_t counter);

/* The lr of the next steps (the trainer's schedule sets it before each);
 * params_of keeps the base lr. MPCL_ERR_INVALID_ARG unless finite >= 0. */
mpcl_status mpcl_model_set_lr(mpcl_model *m, float lr);

/* The optimizer's step counter (completed updates). */
mpcl_status mpcl_model_read_step(mpcl_model *m, uint32_t *step);
mpcl_status mpcl_model_write_step(mpcl_model *m, uint32_t step);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
