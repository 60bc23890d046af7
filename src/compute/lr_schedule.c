/* Learning-rate schedules (include/mpcl/lr_schedule.h): one table row per
 * kind, its name and its decay over the completed fraction f in [0, 1]. */
#include "mpcl/lr_schedule.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compute/compute.h"

static double constant_decay(const mpcl_lr_schedule *s, double f) {
    (void)s;
    (void)f;
    return 1.0;
}

/* Keras' CosineDecay: from 1 down to alpha. */
static double cosine_decay(const mpcl_lr_schedule *s, double f) {
    const double pi = 3.14159265358979323846;
    return (1.0 - s->alpha) * (0.5 * (1.0 + cos(pi * f))) + s->alpha;
}

static const struct lr_kind_row {
    const char *name;
    double (*decay)(const mpcl_lr_schedule *s, double f);
    bool decays; /* reads decay_steps and alpha */
} LR_KINDS[MPCL_LR_SCHEDULE_COUNT] = {
    [MPCL_LR_CONSTANT] = {"constant", constant_decay, false},
    [MPCL_LR_COSINE] = {"cosine", cosine_decay, true},
};

mpcl_lr_schedule mpcl_lr_schedule_default(void) {
    mpcl_lr_schedule s;
    memset(&s, 0, sizeof s);
    s.kind = MPCL_LR_CONSTANT;
    return s;
}

const char *mpcl_lr_schedule_kind_name(mpcl_lr_schedule_kind kind) {
    return (unsigned)kind < MPCL_LR_SCHEDULE_COUNT ? LR_KINDS[kind].name : NULL;
}

bool mpcl_lr_schedule_kind_parse(const char *name, mpcl_lr_schedule_kind *out) {
    for (int k = 0; name && k < MPCL_LR_SCHEDULE_COUNT; k++)
        if (strcmp(name, LR_KINDS[k].name) == 0) {
            *out = (mpcl_lr_schedule_kind)k;
            return true;
        }
    return false;
}

const char *mpcl_lr_schedule_kind_names(void) {
    /* From the table, so that a new kind is one row. */
    static _Thread_local char buf[256];
    size_t k = 0;
    for (int i = 0; i < MPCL_LR_SCHEDULE_COUNT && k < sizeof buf; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s",
                              i == 0                            ? ""
                              : i == MPCL_LR_SCHEDULE_COUNT - 1 ? " or "
                                                                : ", ",
                              LR_KINDS[i].name);
    return buf;
}

bool mpcl_lr_schedule_kind_decays(mpcl_lr_schedule_kind kind) {
    return (unsigned)kind < MPCL_LR_SCHEDULE_COUNT && LR_KINDS[kind].decays;
}

/* 2^53: every whole number up to it is a double. */
#define LR_MAX_STEPS ((uint64_t)1 << 53)

mpcl_status mpcl_lr_schedule_check(mpcl_context *ctx, const mpcl_lr_schedule *s) {
    if ((unsigned)s->kind >= MPCL_LR_SCHEDULE_COUNT)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown lr schedule kind %d (%s)",
                          (int)s->kind, mpcl_lr_schedule_kind_names());
    if (!(s->alpha >= 0.0 && s->alpha <= 1.0))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "lr schedule alpha %g is not in [0, 1] (the final lr as a fraction of "
                          "the peak)",
                          s->alpha);
    if (!isfinite(s->warmup_from) || s->warmup_from < 0.0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "lr schedule warmup_from %g is not finite and >= 0", s->warmup_from);
    if (s->warmup_steps > LR_MAX_STEPS || s->decay_steps > LR_MAX_STEPS)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "lr schedule warmup_steps %llu or decay_steps %llu is over 2^53",
                          (unsigned long long)s->warmup_steps, (unsigned long long)s->decay_steps);
    return MPCL_OK;
}

float mpcl_lr_at(const mpcl_lr_schedule *s, float base_lr, uint64_t step) {
    double base = base_lr;
    if (step < s->warmup_steps)
        return (float)(s->warmup_from +
                       (base - s->warmup_from) * ((double)step / (double)s->warmup_steps));
    uint64_t t = step - s->warmup_steps;
    if (t > s->decay_steps) t = s->decay_steps;
    double f = s->decay_steps ? (double)t / (double)s->decay_steps : 1.0;
    return (float)(base * LR_KINDS[s->kind].decay(s, f));
}
