/* Learning-rate schedules: plain data and one pure function of the step.
 *
 * A schedule scales the optimizer's lr (base_lr, mpcl_optim_params.lr: the
 * peak) step by step. With w = warmup_steps, d = decay_steps, a = alpha and
 * s the step (0 for the first), computed in double and rounded to float once:
 *
 *   s < w:  lr = warmup_from + (base_lr - warmup_from) * (s / w)
 *   else:   t = min(s - w, d);  f = d > 0 ? t / d : 1
 *           lr = base_lr * decay(f), where decay is the kind's:
 *             constant: decay(f) = 1
 *             cosine:   decay(f) = (1 - a) * 0.5 * (1 + cos(pi * f)) + a
 *
 * This is Keras 3's keras.optimizers.schedules.CosineDecay(
 * initial_learning_rate=warmup_from, decay_steps=d, alpha=a,
 * warmup_target=base_lr, warmup_steps=w) (without warm-up, w = 0, it is
 * CosineDecay(initial_learning_rate=base_lr, d, a)): a linear warm-up from
 * warmup_from to base_lr over w steps, then a cosine from base_lr down to
 * a * base_lr over d steps, and a * base_lr from then on. Keras computes in
 * float32; this in double, so a value may differ from Keras' by an ulp.
 *
 * The step. The trainer (train.h) sets the optimizer's lr from the schedule
 * before every step, from its host step count: the batches attempted since
 * the start of training, which also counts a step that a mixed_float16 loss
 * scaler skips for non-finite gradients (PyTorch's usual loop, where the
 * scheduler steps whether or not GradScaler skipped the optimizer). It is
 * the global step of the reports and of checkpoints, so a resumed run goes
 * on with the same lr, and every data-parallel replica (local or under MPI)
 * takes the same lr at every step. */
#ifndef MPCL_LR_SCHEDULE_H
#define MPCL_LR_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "mpcl/context.h"
#include "mpcl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

typedef enum mpcl_lr_schedule_kind {
    MPCL_LR_CONSTANT, /* base_lr after any warm-up */
    MPCL_LR_COSINE,   /* cosine decay to alpha * base_lr */
    MPCL_LR_SCHEDULE_COUNT,
} mpcl_lr_schedule_kind;

typedef struct mpcl_lr_schedule {
    mpcl_lr_schedule_kind kind; /* constant */
    uint64_t warmup_steps;      /* 0: no warm-up */
    /* Steps of the decay after the warm-up (cosine only). 0: to the end of
     * the run -- the trainer sets epochs * steps per epoch - warmup_steps
     * (at least 1); lr_at itself takes 0 as a decay already over. */
    uint64_t decay_steps;
    double alpha;       /* 0: the final lr as a fraction of base_lr, in [0, 1] */
    double warmup_from; /* 0: the lr at step 0 of the warm-up, finite >= 0 */
} mpcl_lr_schedule;

/* constant, no warm-up: every step takes base_lr. */
mpcl_lr_schedule mpcl_lr_schedule_default(void);

/* "constant", "cosine"; NULL for an unknown kind. */
const char *mpcl_lr_schedule_kind_name(mpcl_lr_schedule_kind kind);
/* Name to kind (case-sensitive); false for an unknown name. */
bool mpcl_lr_schedule_kind_parse(const char *name, mpcl_lr_schedule_kind *out);
/* "constant or cosine": the accepted names, for messages and --help. */
const char *mpcl_lr_schedule_kind_names(void);
/* Whether the kind reads decay_steps and alpha (cosine; not constant). */
bool mpcl_lr_schedule_kind_decays(mpcl_lr_schedule_kind kind);

/* MPCL_ERR_INVALID_ARG naming the field: an unknown kind, alpha outside
 * [0, 1] (or NaN), warmup_from not finite >= 0, a step count over 2^53
 * (beyond a double's whole numbers). ctx may be NULL. */
mpcl_status mpcl_lr_schedule_check(mpcl_context *ctx, const mpcl_lr_schedule *s);

/* The lr of step `step` (0-based) for a checked schedule and base_lr, by
 * the formula above. */
float mpcl_lr_at(const mpcl_lr_schedule *s, float base_lr, uint64_t step);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
