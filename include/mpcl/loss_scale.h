/* Loss scaling: dynamic (TF-Keras LossScaleOptimizer semantics) or fixed, with
 * all of its state on the device so that a training step never waits for the
 * host.
 *
 * One training step uses it in this order, all enqueued on the context's
 * in-order queue:
 *   1. the loss backward multiplies the loss gradient by the scale tensor
 *      (mpcl_loss_scale_tensor, read on the device);
 *   2. backward produces scaled gradients;
 *   3. mpcl_loss_scale_check scans every gradient and raises found_inf on the
 *      device if any element is inf or NaN (a pure scan: gradients are not
 *      rewritten; the optimizer multiplies them by 1/scale inside its update);
 *   4. mpcl_optimizer_step reads found_inf and, when it is set, skips the whole
 *      update, step counter included;
 *   5. mpcl_loss_scale_update runs the state machine below and clears
 *      found_inf for the next step. It must come after the optimizer step:
 *      an update enqueued before the optimizer would hide the flag from it.
 *
 * The dynamic state machine (as tf.keras.mixed_precision.LossScaleOptimizer):
 *   - a step with a non-finite gradient: scale = max(scale * backoff_factor,
 *     min_scale), good_steps = 0, skipped_steps += 1;
 *   - a finite step: good_steps += 1; when good_steps reaches growth_interval,
 *     scale *= growth_factor if the result is finite and <= max_scale
 *     (otherwise the scale stays), and good_steps = 0 either way.
 * Fixed mode: the scale never changes and good_steps stays 0, but a step with
 * a non-finite gradient is still skipped and counted in skipped_steps.
 *
 * max_scale defaults to 2^24 rather than Keras' unbounded growth: f16
 * gradients overflow long before, so the cap never binds in mixed precision,
 * and in an f32 run with scaling on it keeps a scale that has grown for
 * millions of steps from pushing ordinary gradients toward f32 overflow. Set
 * it to FLT_MAX for exact Keras behaviour (growth then stops only where the
 * grown scale would be inf). */
#ifndef MPCL_LOSS_SCALE_H
#define MPCL_LOSS_SCALE_H

#include <stddef.h>
#include <stdint.h>

#include "mpcl/context.h"
#include "mpcl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

typedef enum mpcl_loss_scale_mode {
    MPCL_LOSS_SCALE_DYNAMIC,
    MPCL_LOSS_SCALE_FIXED,
} mpcl_loss_scale_mode;

typedef struct mpcl_loss_scale_params {
    mpcl_loss_scale_mode mode; /* MPCL_LOSS_SCALE_DYNAMIC */
    float initial_scale;       /* 32768 (2^15, Keras) */
    uint32_t growth_interval;  /* 2000 consecutive finite steps before growing (Keras) */
    float growth_factor;       /* 2 */
    float backoff_factor;      /* 0.5 */
    float min_scale;           /* 1 (Keras' floor) */
    float max_scale;           /* 16777216 (2^24, see above) */
} mpcl_loss_scale_params;

mpcl_loss_scale_params mpcl_loss_scale_default_params(void);

typedef struct mpcl_loss_scale mpcl_loss_scale;

/* Validates p (MPCL_ERR_INVALID_ARG naming the field): every value finite,
 * 0 < min_scale <= initial_scale <= max_scale, growth_factor >= 1,
 * 0 < backoff_factor <= 1, growth_interval >= 1. */
mpcl_status mpcl_loss_scale_create(mpcl_context *ctx, const mpcl_loss_scale_params *p,
                                   mpcl_loss_scale **out);
void mpcl_loss_scale_destroy(mpcl_loss_scale *ls);

mpcl_loss_scale_params mpcl_loss_scale_get_params(const mpcl_loss_scale *ls);

/* The current scale: an f32 [1,1] tensor on the device, owned by ls (do not
 * destroy it). The loss backward kernel multiplies by it. */
const mpcl_tensor *mpcl_loss_scale_tensor(const mpcl_loss_scale *ls);

/* Enqueues the non-finite scan of grads[0..count) (each any shape, f16 or f32;
 * dtypes may be mixed) and ORs the result into found_inf on the device; it
 * reads nothing back. Up to MPCL_LOSS_SCALE_CHECK_PER_LAUNCH tensors of one
 * dtype go into one launch. Calling it several times before an update is
 * allowed (the flag accumulates). */
#define MPCL_LOSS_SCALE_CHECK_PER_LAUNCH 8
mpcl_status mpcl_loss_scale_check(mpcl_context *ctx, mpcl_loss_scale *ls, mpcl_tensor *const *grads,
                                  size_t count);

/* Enqueues the one-work-item state-machine kernel; clears found_inf. */
mpcl_status mpcl_loss_scale_update(mpcl_context *ctx, mpcl_loss_scale *ls);

typedef struct mpcl_loss_scale_state {
    float scale;
    uint32_t good_steps;    /* consecutive finite steps since the last change */
    uint32_t skipped_steps; /* steps skipped for non-finite gradients, in total */
    int found_inf;          /* raised by a check since the last update */
    int last_found_inf;     /* what the last update saw (0 before any update) */
} mpcl_loss_scale_state;

/* Blocking read of the device state (waits for the queue). */
mpcl_status mpcl_loss_scale_read(mpcl_context *ctx, const mpcl_loss_scale *ls,
                                 mpcl_loss_scale_state *out);

/* Blocking write, for resuming from a checkpoint: scale, good_steps,
 * skipped_steps and last_found_inf are taken from st; found_inf is cleared.
 * The scale must be finite and > 0 (MPCL_ERR_INVALID_ARG, state untouched). */
mpcl_status mpcl_loss_scale_write_state(mpcl_context *ctx, mpcl_loss_scale *ls,
                                        const mpcl_loss_scale_state *st);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
