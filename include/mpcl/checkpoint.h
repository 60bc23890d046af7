/* Checkpoint files on their own, without a trainer: the one reader that
 * mpcl_trainer_load and the Python package's load_model both go through,
 * and a writer for a model built from a checkpoint. Layout and metadata keys
 * are listed at mpcl_trainer_save (train.h). */
#ifndef MPCL_CHECKPOINT_H
#define MPCL_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mpcl/loss_scale.h"
#include "mpcl/model.h"
#include "mpcl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

typedef struct mpcl_checkpoint mpcl_checkpoint;

/* Where the saved run stood. */
typedef struct mpcl_checkpoint_position {
    uint64_t step;           /* batches done in all */
    uint32_t epoch;          /* 0-based */
    uint64_t epoch_step;     /* batches done in `epoch`; < steps per epoch */
    uint32_t optimizer_step; /* updates applied (skipped steps excluded) */
    uint64_t seed;
    size_t batch;
    size_t train_samples; /* steps per epoch = ceil(train_samples / batch) */
    bool scaled;          /* loss_scale_mode is dynamic or fixed, not none */
    /* scale, good_steps and skipped_steps as saved (the flags are 0). */
    mpcl_loss_scale_state loss_scale;
    uint64_t rng_counter; /* the model's training forwards (dropout masks drawn) */
    /* The steps of an epoch: ceil(train_samples / batch), or a token run's
     * evaluation interval (train.h); files from before the key take the
     * former. */
    uint64_t steps_per_epoch;
} mpcl_checkpoint_position;

/* Reads and checks a checkpoint completely: the format; every metadata key
 * parsed with the strict number parser (number.h) and validated -- the
 * model's layers (or, in checkpoints before layer specs, its widths and
 * activation), loss, optimizer kind and hyperparameters (the rules of
 * mpcl_optim_params_check), the lr schedule (mpcl_lr_schedule_check's
 * rules; a file without one, from before schedules, is constant), policy,
 * loss_scale_mode, a dynamic loss scale
 * within the default scaler's [min_scale, max_scale], good steps below its
 * growth interval, counters consistent with each other and with the steps
 * per epoch; every tensor present (parameters in each optimizer slot, and
 * buffers such as a batch norm's moving averages), F32, shaped by the
 * layers' own declarations,
 * finite, second moments >= 0, and no other tensor. MPCL_ERR_FORMAT names
 * the key or tensor; MPCL_ERR_IO the file (a regular file only). */
mpcl_status mpcl_checkpoint_read(const char *path, mpcl_checkpoint **out);
void mpcl_checkpoint_destroy(mpcl_checkpoint *c);

/* The model to build for it: input shape and layers (or the MLP's widths
 * and activation), loss, optimizer, lr schedule, policy, loss
 * scaling (off for mode none; else its mode with the saved scale as
 * initial_scale, the bounds widened to take it in), seed, and max_batch =
 * the saved batch. Owned by c. */
const mpcl_model_params *mpcl_checkpoint_model_params(const mpcl_checkpoint *c);
const mpcl_checkpoint_position *mpcl_checkpoint_position_of(const mpcl_checkpoint *c);

/* Writes the tensors, buffers, the optimizer step, the rng counter and
 * (when both scale) the loss-scale state into m, a model of c's layers and
 * optimizer kind
 * (MPCL_ERR_INVALID_ARG otherwise, before anything is written). */
mpcl_status mpcl_checkpoint_apply(const mpcl_checkpoint *c, mpcl_model *m);

/* Saves m's current state (tensors, optimizer step, loss-scale state) with
 * c's position, through the writer mpcl_trainer_save uses: atomic, only a
 * regular file is ever replaced, and a state that a load would refuse (a
 * non-finite value, more applied plus skipped steps than steps) is not
 * written (MPCL_ERR_INVALID_ARG). m must have c's shape and optimizer kind. */
mpcl_status mpcl_checkpoint_save_model(const mpcl_checkpoint *c, mpcl_model *m, const char *path);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
