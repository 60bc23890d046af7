/* Learning-rate schedules: mpcl_lr_at against Keras 3's CosineDecay,
 * restated here in double precision the way Keras computes it (the step
 * clamped to warm-up plus decay first, then warm-up or decay), at step 0, in
 * and at the end of the warm-up, in and at the end of the decay and past
 * it; the names; and the values mpcl_lr_schedule_check refuses. */
#include <math.h>
#include <string.h>

#include "mpcl/lr_schedule.h"
#include "testutil.h"

/* keras.optimizers.schedules.CosineDecay(initial, decay_steps, alpha,
 * warmup_target, warmup_steps)(step); warmup_target NAN stands for None. */
static double keras_cosine(double initial, double decay_steps, double alpha, double warmup_target,
                           double warmup_steps, double step) {
    const double pi = acos(-1.0);
    if (isnan(warmup_target)) {
        double s = fmin(step, decay_steps);
        double cosine = 0.5 * (1.0 + cos(pi * (s / decay_steps)));
        return initial * ((1.0 - alpha) * cosine + alpha);
    }
    double s = fmin(step, decay_steps + warmup_steps);
    if (s < warmup_steps) return (warmup_target - initial) * (s / warmup_steps) + initial;
    double cosine = 0.5 * (1.0 + cos(pi * ((s - warmup_steps) / decay_steps)));
    return warmup_target * ((1.0 - alpha) * cosine + alpha);
}

static void near(float got, double want, uint64_t step) {
    if (!(fabs((double)got - want) <= 1e-7 * fabs(want) + 1e-12))
        fail_msg("step %llu: lr %.9g, Keras %.9g", (unsigned long long)step, (double)got, want);
}

static void cosine_with_warmup(void **state) {
    (void)state;
    mpcl_lr_schedule s = mpcl_lr_schedule_default();
    s.kind = MPCL_LR_COSINE;
    s.warmup_steps = 100;
    s.decay_steps = 900;
    s.alpha = 0.1;
    s.warmup_from = 1e-5;
    TU_ASSERT_OK(mpcl_lr_schedule_check(NULL, &s));
    const float base = 3e-3f;
    /* 0, mid warm-up, its last step, the end of it (the peak), mid decay,
     * the last decay step, the end, past it. */
    const uint64_t steps[] = {0, 50, 99, 100, 550, 999, 1000, 5000, UINT64_C(1) << 40};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
        near(mpcl_lr_at(&s, base, steps[i]),
             keras_cosine(1e-5, 900, 0.1, (double)base, 100, (double)steps[i]), steps[i]);
    /* The landmarks themselves: the warm-up's start, the peak, the midpoint
     * of the cosine ((1 + alpha) / 2 of the peak), the floor. */
    assert_true(mpcl_lr_at(&s, base, 0) == 1e-5f);
    assert_true(mpcl_lr_at(&s, base, 100) == base);
    near(mpcl_lr_at(&s, base, 550), 0.55 * (double)base, 550);
    assert_true(mpcl_lr_at(&s, base, 1000) == (float)(0.1 * (double)base));
    assert_true(mpcl_lr_at(&s, base, 7000) == mpcl_lr_at(&s, base, 1000));
}

/* Without warm-up it is CosineDecay without warmup_target; warm-up from 0
 * is the GPT recipe's (mpcl-train's --warmup-steps). */
static void cosine_without_warmup_and_from_zero(void **state) {
    (void)state;
    mpcl_lr_schedule s = mpcl_lr_schedule_default();
    s.kind = MPCL_LR_COSINE;
    s.decay_steps = 10;
    for (uint64_t step = 0; step <= 12; step++)
        near(mpcl_lr_at(&s, 0.5f, step), keras_cosine(0.5, 10, 0.0, NAN, 0, (double)step), step);
    assert_true(mpcl_lr_at(&s, 0.5f, 10) == 0.0f);
    s.warmup_steps = 4;
    for (uint64_t step = 0; step <= 16; step++)
        near(mpcl_lr_at(&s, 0.5f, step), keras_cosine(0.0, 10, 0.0, 0.5, 4, (double)step), step);
    assert_true(mpcl_lr_at(&s, 0.5f, 0) == 0.0f);
    assert_true(mpcl_lr_at(&s, 0.5f, 2) == 0.25f);
}

/* constant: the base lr at every step, after any warm-up; decay_steps and
 * alpha are not read. */
static void constant(void **state) {
    (void)state;
    mpcl_lr_schedule s = mpcl_lr_schedule_default();
    s.alpha = 0.5;
    s.decay_steps = 3;
    for (uint64_t step = 0; step < 10; step++) assert_true(mpcl_lr_at(&s, 1e-3f, step) == 1e-3f);
    s.warmup_steps = 4;
    assert_true(mpcl_lr_at(&s, 1e-3f, 0) == 0.0f);
    near(mpcl_lr_at(&s, 1e-3f, 1), 0.25e-3, 1);
    assert_true(mpcl_lr_at(&s, 1e-3f, 4) == 1e-3f);
    assert_true(mpcl_lr_at(&s, 1e-3f, 400) == 1e-3f);
}

static void names(void **state) {
    (void)state;
    mpcl_lr_schedule_kind k;
    assert_true(mpcl_lr_schedule_kind_parse("cosine", &k) && k == MPCL_LR_COSINE);
    assert_true(mpcl_lr_schedule_kind_parse("constant", &k) && k == MPCL_LR_CONSTANT);
    assert_false(mpcl_lr_schedule_kind_parse("Cosine", &k));
    assert_false(mpcl_lr_schedule_kind_parse(NULL, &k));
    assert_string_equal(mpcl_lr_schedule_kind_names(), "constant or cosine");
    assert_null(mpcl_lr_schedule_kind_name(MPCL_LR_SCHEDULE_COUNT));
    assert_true(mpcl_lr_schedule_kind_decays(MPCL_LR_COSINE));
    assert_false(mpcl_lr_schedule_kind_decays(MPCL_LR_CONSTANT));
}

static void refuses(void **state) {
    (void)state;
    struct {
        const char *field;
        double alpha, from;
        uint64_t warmup, decay;
        int kind;
    } bad[] = {
        {"alpha", 1.5, 0, 0, 0, MPCL_LR_COSINE},
        {"alpha", -0.1, 0, 0, 0, MPCL_LR_COSINE},
        {"alpha", NAN, 0, 0, 0, MPCL_LR_COSINE},
        {"warmup_from", 0, -1e-3, 10, 0, MPCL_LR_COSINE},
        {"warmup_from", 0, INFINITY, 10, 0, MPCL_LR_CONSTANT},
        {"warmup_steps", 0, 0, (UINT64_C(1) << 53) + 1, 0, MPCL_LR_CONSTANT},
        {"decay_steps", 0, 0, 0, UINT64_MAX, MPCL_LR_COSINE},
        {"kind", 0, 0, 0, 0, 7},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mpcl_lr_schedule s = mpcl_lr_schedule_default();
        s.kind = (mpcl_lr_schedule_kind)bad[i].kind;
        s.alpha = bad[i].alpha;
        s.warmup_from = bad[i].from;
        s.warmup_steps = bad[i].warmup;
        s.decay_steps = bad[i].decay;
        mpcl_status st = mpcl_lr_schedule_check(NULL, &s);
        if (st != MPCL_ERR_INVALID_ARG || !strstr(mpcl_errmsg(), bad[i].field))
            fail_msg("bad %s: status %d, message '%s'", bad[i].field, (int)st, mpcl_errmsg());
    }
    mpcl_lr_schedule s = mpcl_lr_schedule_default();
    s.kind = MPCL_LR_COSINE;
    s.alpha = 1.0;
    s.decay_steps = UINT64_C(1) << 53;
    TU_ASSERT_OK(mpcl_lr_schedule_check(NULL, &s));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cosine_with_warmup),
        cmocka_unit_test(cosine_without_warmup_and_from_zero),
        cmocka_unit_test(constant),
        cmocka_unit_test(names),
        cmocka_unit_test(refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
