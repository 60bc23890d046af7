/* Optimizers over flat arenas with f32 master weights and f32 state. Each
 * kind (sgd, adam, adamw, rmsprop, ...) is one row of the table in
 * src/compute/optim.c, which declares everything about it once: its name and
 * Keras class name, its hyperparameters (Keras' names, the mpcl_optim_params
 * field each maps to, default, range), its state slots and its update
 * kernel (cl/optim.cl). Every reader goes through that declaration: the
 * mpcl-train flags, the checkpoint's metadata, the data-parallel same-job
 * check and the Python optimizer classes. The row states the kind's update
 * formula and how it relates to Keras' and PyTorch's.
 *
 * Layout. The caller owns two arenas of n elements: the f32 master weights and
 * the working copy in the storage dtype (f32, f16 or bf16) that the GEMMs
 * read; every parameter is a range of both, at the same element offsets. The
 * optimizer owns its state arenas (first and second moment, or the momentum
 * buffer) with the same layout, and the step counter. One update is one
 * launch over the whole range: straight-line code per element, which a CPU
 * runtime vectorizes.
 *
 * Per element, in that one kernel: g = grad * (1/scale) * clip (the loss scale
 * and the clip factor read on the device), the update of the master weight
 * and state in f32, and the working copy rewritten as the master rounded to
 * the storage dtype (round to nearest even). When the loss scaler's found_inf
 * is set the kernel writes nothing: weights, state and the step counter stay
 * as they were (PyTorch's GradScaler skips the same way; TF-Keras'
 * LossScaleOptimizer also skips the update but its optimizer's iteration
 * counter still advances, which shifts Adam's bias correction; mpcl's does
 * not). The step counter lives on the device; the host reads it only when
 * asked.
 *
 * Weight decay applies where the optimizer's decay flags say, one flag per
 * MPCL_OPTIM_DECAY_CHUNK elements, read once per eight-element work-item: all
 * 1 after create (every element decays, the same bits as without flags); a
 * model with decay_vectors = 0 clears the chunks of its rank-1 parameters
 * (mpcl_optimizer_write_decay).
 *
 * Clipping by global norm (clip_norm > 0): before the update, two launches
 * compute the L2 norm of the whole unscaled gradient arena on the device (a
 * fixed-order reduction, so the same inputs give the same bits) and the factor
 * min(1, clip_norm / norm); the update multiplies every gradient by it. This
 * is Keras' global_clipnorm. A norm of inf (an inf gradient, or a squared
 * sum that overflows f32) gives factor 0, a NaN gradient a NaN norm and
 * factor 1; with a loss scaler such a step is skipped anyway, without one the
 * non-finite values reach the weights as they would unclipped.
 */
#ifndef MPCL_OPTIM_H
#define MPCL_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mpcl/context.h"
#include "mpcl/loss_scale.h"
#include "mpcl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* A kind is an index into the table: 0 <= kind < mpcl_optim_kind_count().
 * The constants name the first rows for compatibility; other kinds are
 * reached by name (mpcl_optim_kind_parse). */
typedef enum mpcl_optim_kind {
    MPCL_OPTIM_SGD,
    MPCL_OPTIM_ADAM,
    MPCL_OPTIM_ADAMW,
} mpcl_optim_kind;

size_t mpcl_optim_kind_count(void);
/* "sgd", "adam", "adamw", "rmsprop"; NULL for an unknown kind. */
const char *mpcl_optim_kind_name(mpcl_optim_kind kind);
/* Keras' class name: "SGD", "Adam", "AdamW", "RMSprop"; NULL for an unknown kind. */
const char *mpcl_optim_kind_keras_name(mpcl_optim_kind kind);
/* Name to kind (case-sensitive); false for an unknown name. */
bool mpcl_optim_kind_parse(const char *name, mpcl_optim_kind *out);
/* "adam, adamw, rmsprop or sgd": the accepted names, for messages and --help. */
const char *mpcl_optim_kind_names(void);

/* The generic fields a kind's hyperparameters map onto; a kind reads only
 * the ones it declares (RMSprop's rho is beta2, for example) and the others
 * are 0. */
typedef struct mpcl_optim_params {
    mpcl_optim_kind kind; /* as given to the defaults function */
    float lr;             /* learning_rate: 1e-3, 1e-2 for SGD (Keras) */
    float beta1;          /* Adam beta_1 */
    float beta2;          /* Adam beta_2; RMSprop rho */
    float eps;            /* epsilon: 1e-7 (Keras; PyTorch uses 1e-8) */
    float weight_decay;   /* SGD and Adam: L2; AdamW: decoupled */
    float momentum;       /* SGD and RMSprop */
    int nesterov;         /* SGD: 0 or 1 */
    float clip_norm;      /* global_clipnorm: 0: no clipping; else clip the global L2 norm to it */
    int decay_vectors;    /* SGD, Adam, AdamW: 1 (default): weight_decay applies to every
                             parameter (Keras); 0: to a model's parameters of rank >= 2 only,
                             not its biases and normalization vectors (nanoGPT, llm.c). The
                             model applies it (mpcl_optimizer_write_decay) */
} mpcl_optim_params;

/* The kind's declared defaults; an unknown kind gives zeros with that kind
 * (which mpcl_optim_params_check refuses). */
mpcl_optim_params mpcl_optim_default_params(mpcl_optim_kind kind);

/* ---- hyperparameters by name ----
 * A kind's hyperparameters in order: learning_rate, then the kind's own in
 * Keras' argument order, then global_clipnorm (the last two common to every
 * kind). Index < mpcl_optim_param_count(kind); NULL / 0 past the end or for
 * an unknown kind. A real is finite as a float and in its range; a boolean
 * is 0 or 1 in the struct and "true" / "false" as text. */
size_t mpcl_optim_param_count(mpcl_optim_kind kind);
/* Keras' name: "learning_rate", "beta_1", "rho", "nesterov", ... */
const char *mpcl_optim_param_name(mpcl_optim_kind kind, size_t index);
/* The mpcl_optim_params field it maps to ("lr", "beta2", ...); also its key
 * in a checkpoint's metadata. */
const char *mpcl_optim_param_field(mpcl_optim_kind kind, size_t index);
bool mpcl_optim_param_is_bool(mpcl_optim_kind kind, size_t index);
/* The default as text ("0.9", "false"). */
const char *mpcl_optim_param_default(mpcl_optim_kind kind, size_t index);
/* The value in p (of p->kind) as a double (a boolean as 0 or 1); NaN past
 * the end. */
double mpcl_optim_params_value(const mpcl_optim_params *p, size_t index);
/* Sets hyperparameter `index` of p->kind to value, checked against its
 * declaration: MPCL_ERR_INVALID_ARG naming the optimizer, the hyperparameter
 * and its range, p unchanged. ctx may be NULL. */
mpcl_status mpcl_optim_params_set_value(mpcl_context *ctx, mpcl_optim_params *p, size_t index,
                                        double value);
/* The same by Keras' name and text (a plain decimal number, or true / false):
 * an unknown name is an error that lists the kind's hyperparameters. */
mpcl_status mpcl_optim_params_set(mpcl_context *ctx, mpcl_optim_params *p, const char *name,
                                  const char *text);
/* The value as text ("%.9g", or true / false) into buf. */
mpcl_status mpcl_optim_params_get(mpcl_context *ctx, const mpcl_optim_params *p, const char *name,
                                  char *buf, size_t size);

/* Validates p against its kind's declaration: MPCL_ERR_INVALID_ARG naming
 * the optimizer, the hyperparameter and its range. ctx may be NULL (the
 * message then goes to the thread only). */
mpcl_status mpcl_optim_params_check(mpcl_context *ctx, const mpcl_optim_params *p);

typedef struct mpcl_optimizer mpcl_optimizer;

/* Optimizer state per element, for checkpoints. */
typedef enum mpcl_optim_slot {
    MPCL_OPTIM_SLOT_MASTER, /* f32 master weights (the caller's arena) */
    MPCL_OPTIM_SLOT_M,      /* Adam first moment; SGD and RMSprop momentum buffer */
    MPCL_OPTIM_SLOT_V,      /* Adam second moment; RMSprop mean square (not SGD) */
    MPCL_OPTIM_SLOT_COUNT,
} mpcl_optim_slot;

/* The optimizer of kind `kind` has this slot (SGD has no V). */
bool mpcl_optim_has_slot(mpcl_optim_kind kind, mpcl_optim_slot slot);

/* master: f32 [1, n]; working: [1, n] in a float storage dtype; both
 * borrowed, they must outlive the optimizer. Master and working are taken as
 * they are (write the master through mpcl_optimizer_write to set both). State
 * and the step counter start at 0. Errors: MPCL_ERR_INVALID_ARG (a bad
 * hyperparameter), MPCL_ERR_SHAPE (sizes differ, or over 2^32 elements),
 * MPCL_ERR_DTYPE. */
mpcl_status mpcl_optimizer_create(mpcl_context *ctx, const mpcl_optim_params *p,
                                  mpcl_tensor *master, mpcl_tensor *working, mpcl_optimizer **out);
void mpcl_optimizer_destroy(mpcl_optimizer *opt);

mpcl_optim_params mpcl_optimizer_get_params(const mpcl_optimizer *opt);
/* Learning-rate schedules: takes effect at the next step. lr must be finite
 * and >= 0 (MPCL_ERR_INVALID_ARG). */
mpcl_status mpcl_optimizer_set_lr(mpcl_optimizer *opt, float lr);

/* Enqueues one update of every element: the clip-norm launches when
 * clip_norm > 0, then the update. grads has the shape and dtype of the
 * working arena (MPCL_ERR_SHAPE / MPCL_ERR_DTYPE, nothing enqueued) and is
 * another buffer (MPCL_ERR_INVALID_ARG for the working arena itself). ls may
 * be NULL (no loss scaling: scale 1, never skipped); otherwise its found_inf
 * must already hold this step's check (see loss_scale.h for the order). */
mpcl_status mpcl_optimizer_step(mpcl_context *ctx, mpcl_optimizer *opt, const mpcl_tensor *grads,
                                const mpcl_loss_scale *ls);

/* mpcl_optimizer_step, then mpcl_loss_scale_update(ls), with the update run
 * in the step's last launch: the same result in one launch fewer (a model's
 * step uses it). ls may be NULL: then it is mpcl_optimizer_step. */
mpcl_status mpcl_optimizer_step_scaled(mpcl_context *ctx, mpcl_optimizer *opt,
                                       const mpcl_tensor *grads, mpcl_loss_scale *ls);

/* The global L2 norm of the unscaled gradients of the last step with
 * clipping (blocking read); NaN before the first such step or without
 * clipping. */
mpcl_status mpcl_optimizer_read_grad_norm(mpcl_context *ctx, const mpcl_optimizer *opt,
                                          float *norm);

/* Blocking host copies of elements [offset, offset + count) of a slot
 * (MPCL_ERR_SHAPE past the end, MPCL_ERR_INVALID_ARG for a slot this kind
 * lacks). Writing the master also rewrites that range of the working copy as
 * the master rounded to the storage dtype, on the device, as an update does. */
mpcl_status mpcl_optimizer_read(mpcl_context *ctx, const mpcl_optimizer *opt, mpcl_optim_slot slot,
                                size_t offset, float *dst, size_t count);
mpcl_status mpcl_optimizer_write(mpcl_context *ctx, mpcl_optimizer *opt, mpcl_optim_slot slot,
                                 size_t offset, const float *src, size_t count);

/* Where weight_decay applies: one flag per MPCL_OPTIM_DECAY_CHUNK elements,
 * flags[c] for elements [c * MPCL_OPTIM_DECAY_CHUNK, (c + 1) *
 * MPCL_OPTIM_DECAY_CHUNK): 1, it applies (every chunk's flag after create),
 * or 0, it does not. count is the arena's chunk count, n rounded up
 * (MPCL_ERR_SHAPE otherwise); a flag other than 0 or 1 is
 * MPCL_ERR_INVALID_ARG. Blocking. A model writes them from its parameters'
 * ranks when decay_vectors is 0 (its rows start on a chunk); over a bare
 * arena decay_vectors means nothing and these flags alone decide. */
#define MPCL_OPTIM_DECAY_CHUNK 8
mpcl_status mpcl_optimizer_write_decay(mpcl_context *ctx, mpcl_optimizer *opt, const uint8_t *flags,
                                       size_t count);

/* The step counter (completed, not skipped, updates). Blocking. */
mpcl_status mpcl_optimizer_read_step(mpcl_context *ctx, const mpcl_optimizer *opt, uint32_t *step);
mpcl_status mpcl_optimizer_write_step(mpcl_context *ctx, mpcl_optimizer *opt, uint32_t step);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
