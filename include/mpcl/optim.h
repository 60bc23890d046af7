/* Optimizers: SGD with momentum, Adam and AdamW, with f32 master weights and
 * f32 moments on the device, one launch for all parameters.
 *
 * Layout. The model owns its working weights (storage dtype tensors, f16 in
 * mixed precision, f32 otherwise) and its gradients (same dtype). The
 * optimizer owns one flat f32 buffer of master weights and one per moment,
 * holding every parameter back to back in the order given at creation. One
 * update kernel covers that flat range and takes the working and gradient
 * tensors as a fixed list of MPCL_OPTIM_PARAMS_PER_LAUNCH buffer arguments
 * (OpenCL 1.2 has no arrays of pointers): up to 8 parameter tensors -- an MLP
 * of four Dense layers -- are one launch, more are ceil(count/8) launches of
 * the same step. Model tensors need no particular allocation.
 *
 * Per element, in that one kernel: g = grad * (1/scale) (the loss scale read
 * on the device), the update of the master weight and moments in f32, and the
 * working copy rewritten as the master rounded to the storage dtype (round to
 * nearest even for f16). When the loss scaler's found_inf is set the kernel
 * writes nothing -- weights, moments and the step counter stay as they were
 * (PyTorch's fused Adam with a GradScaler skips the same way). The step
 * counter lives on the device; the host never reads it during training.
 *
 * The updates, with t the step counter after this step (1 on the first):
 *   SGD:   g += weight_decay * w (L2);  b = momentum * b + g;
 *          w -= lr * (nesterov ? g + momentum * b : b)        (PyTorch form;
 *          with constant lr the same as Keras' velocity form)
 *   Adam:  g += weight_decay * w (L2, 0 by default);
 *          m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
 *          w -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
 *          (Algorithm 1 of the Adam paper, as PyTorch; Keras adds eps before
 *          the sqrt(1 - beta2^t) correction, a difference of order eps)
 *   AdamW: w -= lr * weight_decay * w first (decoupled), then Adam without L2.
 */
#ifndef MPCL_OPTIM_H
#define MPCL_OPTIM_H

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

#define MPCL_OPTIM_PARAMS_PER_LAUNCH 8

typedef enum mpcl_optim_kind {
    MPCL_OPTIM_SGD,
    MPCL_OPTIM_ADAM,
    MPCL_OPTIM_ADAMW,
} mpcl_optim_kind;

typedef struct mpcl_optim_params {
    mpcl_optim_kind kind; /* as given to the defaults function */
    float lr;             /* 1e-3 for Adam/AdamW, 1e-2 for SGD (Keras) */
    float beta1;          /* 0.9 */
    float beta2;          /* 0.999 */
    float eps;            /* 1e-7 (Keras; PyTorch uses 1e-8) */
    float weight_decay;   /* 0 for SGD and Adam (L2), 0.004 for AdamW (Keras) */
    float momentum;       /* SGD only: 0.9 */
    int nesterov;         /* SGD only: 0 */
} mpcl_optim_params;

mpcl_optim_params mpcl_optim_default_params(mpcl_optim_kind kind);

typedef struct mpcl_optimizer mpcl_optimizer;

/* working[0..count): the parameters' working weights, all of one storage
 * dtype (f32 or f16), any shapes, borrowed (they must outlive the optimizer).
 * The master weights start as the working values (converted to f32); use
 * mpcl_optimizer_write(MPCL_OPTIM_SLOT_MASTER) to start from f32 values
 * instead. Moments and the step counter start at 0. Errors:
 * MPCL_ERR_INVALID_ARG (a bad hyperparameter, count 0), MPCL_ERR_DTYPE. */
mpcl_status mpcl_optimizer_create(mpcl_context *ctx, const mpcl_optim_params *p,
                                  mpcl_tensor *const *working, size_t count, mpcl_optimizer **out);
void mpcl_optimizer_destroy(mpcl_optimizer *opt);

mpcl_optim_params mpcl_optimizer_get_params(const mpcl_optimizer *opt);
size_t mpcl_optimizer_param_count(const mpcl_optimizer *opt);
/* Learning-rate schedules: takes effect at the next step. lr must be finite
 * and >= 0 (MPCL_ERR_INVALID_ARG). */
mpcl_status mpcl_optimizer_set_lr(mpcl_optimizer *opt, float lr);

/* Enqueues one update of every parameter. grads[i] has the shape and dtype of
 * working[i] (MPCL_ERR_SHAPE / MPCL_ERR_DTYPE, nothing enqueued). ls may be
 * NULL (no loss scaling: scale 1, never skipped); otherwise its found_inf
 * must already hold this step's check (see loss_scale.h for the order). */
mpcl_status mpcl_optimizer_step(mpcl_context *ctx, mpcl_optimizer *opt, mpcl_tensor *const *grads,
                                size_t count, const mpcl_loss_scale *ls);

/* Optimizer state per parameter, for checkpoints. */
typedef enum mpcl_optim_slot {
    MPCL_OPTIM_SLOT_MASTER, /* f32 master weights */
    MPCL_OPTIM_SLOT_M,      /* Adam first moment; SGD momentum buffer */
    MPCL_OPTIM_SLOT_V,      /* Adam second moment (Adam/AdamW only) */
} mpcl_optim_slot;

/* Whether this optimizer has the slot (SGD has no V). */
int mpcl_optimizer_has_slot(const mpcl_optimizer *opt, mpcl_optim_slot slot);

/* Blocking host copies of parameter `index`'s slot: count must equal the
 * element count of working[index] (MPCL_ERR_SHAPE). Writing the master also
 * rewrites the working copy as the master rounded to the storage dtype. */
mpcl_status mpcl_optimizer_read(mpcl_context *ctx, const mpcl_optimizer *opt, mpcl_optim_slot slot,
                                size_t index, float *dst, size_t count);
mpcl_status mpcl_optimizer_write(mpcl_context *ctx, mpcl_optimizer *opt, mpcl_optim_slot slot,
                                 size_t index, const float *src, size_t count);

/* The step counter (completed, not skipped, updates). Blocking. */
mpcl_status mpcl_optimizer_read_step(mpcl_context *ctx, const mpcl_optimizer *opt, uint32_t *step);
mpcl_status mpcl_optimizer_write_step(mpcl_context *ctx, mpcl_optimizer *opt, uint32_t step);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
