/* Streamed data sets (MPCL_DATA=stream: each batch gathered on the host and
 * uploaded) train bit for bit as data sets held on the device
 * (MPCL_DATA=device): the same weights after 2 epochs and the same reported
 * losses, for u8 images with labels and for f32 and f16 features with f32
 * targets (MSE), in every storage dtype the device runs; a misspelt
 * MPCL_DATA stops context creation, naming it and its values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpcl/half.h"
#include "mpcl/train.h"
#include "testutil.h"

enum { N_TRAIN = 300, N_TEST = 70, ROWS = 5, COLS = 9, F = ROWS * COLS, T = 3, CLASSES = 4 };
enum { MAX_REPORTS = 64 };

typedef struct losses {
    size_t count;
    double loss[MAX_REPORTS], test_loss[MAX_REPORTS];
} losses;

static void on_report(void *user, const mpcl_train_report *r) {
    losses *l = user;
    if (l->count < MAX_REPORTS) {
        l->loss[l->count] = r->loss;
        l->test_loss[l->count] = r->test_loss;
    }
    l->count++;
}

/* Two epochs of a small model on train/test under MPCL_DATA=placement: its
 * final state (weights and optimizer moments) and its reports. */
static float *train_under(mpcl_context *ctx, const char *placement, mpcl_policy policy,
                          mpcl_loss loss, const mpcl_dataset *train, const mpcl_dataset *test,
                          losses *rec, size_t *n) {
    setenv("MPCL_DATA", placement, 1);
    mpcl_train_params p = mpcl_train_default_params();
    p.train_data = train;
    p.test_data = test;
    p.batch = 64; /* 300 rows: four batches and a partial one, 70 test rows likewise */
    p.epochs = 2;
    p.report_every = 2;
    p.seed = 9;
    p.model.hidden[0] = 8;
    p.model.policy = policy;
    p.model.loss = loss;
    p.on_report = on_report;
    p.user = rec;
    memset(rec, 0, sizeof *rec);
    mpcl_trainer *tr = NULL;
    mpcl_status st = mpcl_trainer_create(ctx, &p, &tr);
    unsetenv("MPCL_DATA");
    if (st == MPCL_ERR_UNSUPPORTED) return NULL; /* the device cannot run the policy */
    TU_ASSERT_OK(st);
    mpcl_train_data_info info;
    mpcl_trainer_data_info(tr, &info);
    bool streamed = strcmp(placement, "stream") == 0;
    assert_int_equal(info.train_streamed, streamed);
    assert_int_equal(info.test_streamed, streamed);
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    float *state = tu_model_state(mpcl_trainer_model(tr), n);
    mpcl_trainer_destroy(tr);
    return state;
}

/* The same run held on the device and streamed: the same bits, under every
 * policy (storage f32, f16 and bf16: the host's conversions must round as
 * the gather kernel's stores do). */
static void expect_same_runs(const mpcl_dataset *train, const mpcl_dataset *test, mpcl_loss loss) {
    mpcl_context *ctx = tu_context();
    static losses dev, str;
    const mpcl_policy policies[] = {MPCL_POLICY_FLOAT32, MPCL_POLICY_MIXED_FLOAT16,
                                    MPCL_POLICY_MIXED_BFLOAT16};
    for (size_t k = 0; k < sizeof policies / sizeof policies[0]; k++) {
        size_t nd = 0, ns = 0;
        float *d = train_under(ctx, "device", policies[k], loss, train, test, &dev, &nd);
        if (!d) continue;
        float *s = train_under(ctx, "stream", policies[k], loss, train, test, &str, &ns);
        assert_non_null(s);
        assert_int_equal(nd, ns);
        for (size_t i = 0; i < nd; i++)
            if (memcmp(&d[i], &s[i], sizeof d[i]) != 0)
                fail_msg("%s: state[%zu] device %a, streamed %a", mpcl_policy_name(policies[k]), i,
                         (double)d[i], (double)s[i]);
        assert_int_equal(dev.count, str.count);
        assert_true(dev.count > 2 && dev.count <= MAX_REPORTS);
        assert_memory_equal(dev.loss, str.loss, dev.count * sizeof dev.loss[0]);
        assert_memory_equal(dev.test_loss, str.test_loss, dev.count * sizeof dev.test_loss[0]);
        assert_true(isfinite(dev.test_loss[dev.count - 1]));
        free(d);
        free(s);
    }
    mpcl_context_destroy(ctx);
}

/* u8 images (every byte value, so that each byte / 255 is checked) with
 * sparse labels, as IDX files give them. */
static void stream_u8_labels(void **state) {
    (void)state;
    static uint8_t pixels[(N_TRAIN + N_TEST) * F], labels[N_TRAIN + N_TEST];
    uint64_t rng = 21;
    for (size_t i = 0; i < sizeof pixels; i++) pixels[i] = (uint8_t)(mpcl_rng_next(&rng) >> 56);
    for (size_t i = 0; i < sizeof labels; i++) labels[i] = (uint8_t)(mpcl_rng_next(&rng) % CLASSES);
    mpcl_dataset *train = NULL, *test = NULL;
    TU_ASSERT_OK(mpcl_dataset_from_memory(pixels, labels, N_TRAIN, ROWS, COLS, CLASSES, &train));
    TU_ASSERT_OK(mpcl_dataset_from_memory(pixels + N_TRAIN * F, labels + N_TRAIN, N_TEST, ROWS,
                                          COLS, CLASSES, &test));
    expect_same_runs(train, test, MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY);
    mpcl_dataset_destroy(train);
    mpcl_dataset_destroy(test);
}

/* f32 (and f16) features, values that round differently in f16 and bf16,
 * with f32 target columns for MSE. */
static void stream_float_targets(void **state) {
    (void)state;
    static float x[(N_TRAIN + N_TEST) * F], y[(N_TRAIN + N_TEST) * T];
    static uint16_t h[(N_TRAIN + N_TEST) * F];
    uint64_t rng = 8;
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
        x[i] = (float)(mpcl_rng_next(&rng) % 100000) / 99997.0f - 0.5f;
        h[i] = mpcl_f32_to_f16(x[i]);
    }
    for (size_t i = 0; i < sizeof y / sizeof y[0]; i++)
        y[i] = (float)(mpcl_rng_next(&rng) % 1000) / 1000.0f;
    mpcl_npy_data_params dense = mpcl_npy_data_default_params();
    dense.float_targets = true;
    const size_t counts[2] = {N_TRAIN, N_TEST}, offsets[2] = {0, N_TRAIN};
    for (int half = 0; half < 2; half++) {
        mpcl_dataset *ds[2] = {NULL, NULL};
        for (int s = 0; s < 2; s++) {
            size_t xs[2] = {counts[s], F}, ys[2] = {counts[s], T};
            mpcl_array_view xv = {
                half ? (const void *)(h + offsets[s] * F) : (const void *)(x + offsets[s] * F),
                half ? MPCL_NPY_F2 : MPCL_NPY_F4, 2, xs};
            mpcl_array_view yv = {y + offsets[s] * T, MPCL_NPY_F4, 2, ys};
            TU_ASSERT_OK(mpcl_dataset_from_arrays(&xv, &yv, &dense, &ds[s]));
        }
        expect_same_runs(ds[0], ds[1], MPCL_LOSS_MSE);
        mpcl_dataset_destroy(ds[0]);
        mpcl_dataset_destroy(ds[1]);
    }
}

/* MPCL_DATA outside its set stops context creation, naming the variable,
 * the value and the values it takes. */
static void bad_value_refused(void **state) {
    (void)state;
    setenv("MPCL_DATA", "disk", 1);
    mpcl_context *ctx = NULL;
    mpcl_status st = mpcl_context_create(NULL, &ctx);
    unsetenv("MPCL_DATA");
    if (st != MPCL_ERR_INVALID_ARG || ctx || !strstr(mpcl_errmsg(), "MPCL_DATA='disk'") ||
        !strstr(mpcl_errmsg(), "auto, device, stream"))
        fail_msg("MPCL_DATA=disk: status %d, '%s'", (int)st, mpcl_errmsg());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stream_u8_labels),
        cmocka_unit_test(stream_float_targets),
        cmocka_unit_test(bad_value_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
