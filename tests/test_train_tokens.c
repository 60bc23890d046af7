/* Training on a token stream (train.h: params.tokens) and gradient
 * accumulation over micro-batches (model.h: mpcl_model_stash_grads). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* ---- gradient accumulation ---- */

/* One SGD step on 2 half-batches, stashed, against one on the whole batch
 * from the same initial weights: the updates must agree (float32 up to the
 * order of the sums; bf16 storage up to one 16-bit rounding of the sum). */
static void accumulate_case(mpcl_context *ctx, mpcl_policy policy, double rel_tol) {
    enum { T = 6, V = 11, C = 8, B = 4, H = B / 2 };
    mpcl_model_params p = tu_token_model_params(T, V, T, C, B, policy);
    p.optim = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    p.optim.lr = 0.5f;
    int32_t x[B * T], y[B * T];
    tu_rng rng = tu_rng_make(tu_seed("accumulate"));
    for (size_t i = 0; i < B * T; i++) {
        x[i] = (int32_t)tu_uniform(&rng, 0, V - 1e-9);
        y[i] = (int32_t)tu_uniform(&rng, 0, V - 1e-9);
    }
    mpcl_model *whole = NULL, *parts = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &whole));
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &parts));
    size_t n = 0;
    float *w0 = tu_model_state(whole, &n);

    mpcl_tensor *bx = tu_ids_tensor(ctx, B, T, x), *by = tu_ids_tensor(ctx, B, T, y);
    TU_ASSERT_OK(mpcl_model_train_step(whole, bx, by));
    mpcl_tensor *hx[2], *hy[2];
    for (int h = 0; h < 2; h++) {
        hx[h] = tu_ids_tensor(ctx, H, T, x + h * H * T);
        hy[h] = tu_ids_tensor(ctx, H, T, y + h * H * T);
        TU_ASSERT_OK(mpcl_model_forward_slice(parts, hx[h], hy[h], B));
        TU_ASSERT_OK(mpcl_model_backward(parts));
        if (h == 0) TU_ASSERT_OK(mpcl_model_stash_grads(parts));
    }
    TU_ASSERT_OK(mpcl_model_apply(parts));

    size_t n2 = 0;
    float *w_whole = tu_model_state(whole, &n), *w_parts = tu_model_state(parts, &n2);
    assert_int_equal(n, n2);
    /* Compare the updates (SGD has no state: the state is the weights). */
    double max_update = 0, max_diff = 0;
    for (size_t i = 0; i < n; i++) {
        double u = fabs((double)w_whole[i] - (double)w0[i]);
        double d = fabs((double)w_whole[i] - (double)w_parts[i]);
        if (u > max_update) max_update = u;
        if (d > max_diff) max_diff = d;
    }
    assert_true(max_update > 1e-3); /* the step moved the weights */
    if (!(max_diff <= rel_tol * max_update))
        fail_msg("%s: updates differ by %g, %g of the largest update %g (allowed %g)",
                 mpcl_policy_name(policy), max_diff, max_diff / max_update, max_update, rel_tol);

    /* The stash is spent by apply: the next step is a plain one again. */
    TU_ASSERT_OK(mpcl_model_train_step(whole, bx, by));
    TU_ASSERT_OK(mpcl_model_train_step(parts, bx, by));
    free(w_whole);
    free(w_parts);
    w_whole = tu_model_state(whole, &n);
    w_parts = tu_model_state(parts, &n);
    for (size_t i = 0; i < n; i++)
        max_diff = fmax(max_diff, fabs((double)w_whole[i] - (double)w_parts[i]));
    if (!(max_diff <= 2 * rel_tol * max_update))
        fail_msg("%s: after a plain step the models differ by %g", mpcl_policy_name(policy),
                 max_diff);

    free(w0);
    free(w_whole);
    free(w_parts);
    for (int h = 0; h < 2; h++) {
        mpcl_tensor_destroy(hx[h]);
        mpcl_tensor_destroy(hy[h]);
    }
    mpcl_tensor_destroy(bx);
    mpcl_tensor_destroy(by);
    mpcl_model_destroy(whole);
    mpcl_model_destroy(parts);
}

static void stashed_micro_batches_equal_the_whole_batch(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    accumulate_case(ctx, MPCL_POLICY_FLOAT32, 1e-5);
    if (mpcl_context_plan(ctx, MPCL_POLICY_MIXED_BFLOAT16).usable)
        accumulate_case(ctx, MPCL_POLICY_MIXED_BFLOAT16, 2e-2);
    mpcl_context_destroy(ctx);
}

static void stash_needs_a_backward(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_model_params p = tu_token_model_params(4, 5, 4, 4, 2, MPCL_POLICY_FLOAT32);
    mpcl_model *m = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
    tu_expect_error(mpcl_model_stash_grads(m), MPCL_ERR_INVALID_ARG, "without a backward");
    mpcl_model_destroy(m);
    mpcl_context_destroy(ctx);
}

/* ---- the trainer on tokens ---- */

enum { PERIOD = 11, STREAM = 3000 };

/* A stream of period PERIOD over vocabulary PERIOD. */
static mpcl_tokens *pattern_tokens(size_t vocab) {
    static uint16_t ids[STREAM];
    for (size_t i = 0; i < STREAM; i++) ids[i] = (uint16_t)((i * 4) % PERIOD);
    mpcl_tokens *t = NULL;
    TU_ASSERT_OK(mpcl_tokens_from_memory("pattern", ids, STREAM, vocab, &t));
    return t;
}

typedef struct reports {
    size_t count, evaluations;
    double eval_loss[8];
    uint64_t eval_step[8];
    uint64_t stop_at; /* set *stop at this step's report (0: never) */
    volatile sig_atomic_t stop;
} reports;

static void on_report(void *user, const mpcl_train_report *r) {
    reports *rs = user;
    rs->count++;
    if (r->epoch_end && rs->evaluations < 8) {
        rs->eval_loss[rs->evaluations] = r->test_loss;
        rs->eval_step[rs->evaluations++] = r->step;
    }
    if (rs->stop_at && r->step == rs->stop_at) rs->stop = 1;
}

/* token_pos_embedding -> dense per position: the next token from the
 * current one, which the pattern makes certain. */
static mpcl_train_params token_train_params(const mpcl_tokens *t, reports *rs, uint64_t steps,
                                            uint64_t every) {
    mpcl_train_params p = mpcl_train_default_params();
    p.model = tu_token_model_params(8, PERIOD, 8, 16, 8, MPCL_POLICY_FLOAT32);
    p.model.optim.lr = 0.02f;
    p.tokens = t;
    p.batch = 8;
    p.steps = steps;
    p.eval_every = every;
    p.eval_batches = 2;
    p.report_every = 5;
    p.on_report = on_report;
    p.user = rs;
    p.stop = &rs->stop;
    return p;
}

static void learns_from_a_token_stream(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_tokens *t = pattern_tokens(PERIOD);
    reports rs = {0};
    mpcl_train_params p = token_train_params(t, &rs, 70, 30);
    p.grad_accum = 2;
    mpcl_trainer *tr = NULL;
    TU_ASSERT_OK(mpcl_trainer_create(ctx, &p, &tr));
    mpcl_train_data_info di;
    mpcl_trainer_data_info(tr, &di);
    /* The last tenth is held out. */
    assert_int_equal(di.train_samples, STREAM - STREAM / 10);
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    mpcl_train_summary s;
    mpcl_trainer_summary(tr, &s);
    assert_int_equal(s.steps, 70);
    /* Evaluations at steps 30, 60 and the run's end, 70. */
    assert_int_equal(rs.evaluations, 3);
    assert_int_equal(rs.eval_step[0], 30);
    assert_int_equal(rs.eval_step[1], 60);
    assert_int_equal(rs.eval_step[2], 70);
    /* Two whole intervals; the short last one leaves the position in the
     * third (a checkpoint's step is epoch * 30 + epoch_step). */
    assert_int_equal(s.epochs_done, 2);
    for (size_t i = 0; i < 3; i++) assert_true(isfinite(rs.eval_loss[i]));
    /* Uniform guessing is ln 11 = 2.40 nats; the pattern is certain. */
    if (!(rs.eval_loss[2] < 0.5))
        fail_msg("held-out loss %g after 70 steps (%g, %g before)", rs.eval_loss[2],
                 rs.eval_loss[0], rs.eval_loss[1]);
    assert_true(s.evaluated);
    assert_true(fabs(s.test_loss - rs.eval_loss[2]) < 1e-12);
    /* The evaluation is the same windows every time: twice, the same loss. */
    double a = NAN, b = NAN;
    TU_ASSERT_OK(mpcl_trainer_evaluate(tr, &a, NULL));
    TU_ASSERT_OK(mpcl_trainer_evaluate(tr, &b, NULL));
    assert_true(a == b);
    mpcl_trainer_destroy(tr);
    mpcl_tokens_destroy(t);
    mpcl_context_destroy(ctx);
}

/* A run stopped at step 20, saved and resumed, ends where the run that
 * was never stopped ends, bit for bit: the windows come from (seed, step). */
static void resumes_bit_for_bit(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_tokens *t = pattern_tokens(PERIOD);
    char dir[64], path[128];
    assert_int_equal(tu_tmpdir_make(dir, "train-tokens"), 0);
    snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);

    reports whole_rs = {0};
    mpcl_train_params p = token_train_params(t, &whole_rs, 40, 15);
    mpcl_trainer *whole = NULL;
    TU_ASSERT_OK(mpcl_trainer_create(ctx, &p, &whole));
    TU_ASSERT_OK(mpcl_trainer_fit(whole));

    reports first_rs = {.stop_at = 20};
    p = token_train_params(t, &first_rs, 40, 15);
    mpcl_trainer *first = NULL;
    TU_ASSERT_OK(mpcl_trainer_create(ctx, &p, &first));
    TU_ASSERT_OK(mpcl_trainer_fit(first));
    mpcl_train_summary s;
    mpcl_trainer_summary(first, &s);
    assert_true(s.stopped);
    TU_ASSERT_OK(mpcl_trainer_save(first, path));
    mpcl_trainer_destroy(first);

    reports second_rs = {0};
    p = token_train_params(t, &second_rs, 40, 15);
    mpcl_trainer *second = NULL;
    TU_ASSERT_OK(mpcl_trainer_create(ctx, &p, &second));
    TU_ASSERT_OK(mpcl_trainer_load(second, path));
    TU_ASSERT_OK(mpcl_trainer_fit(second));
    mpcl_trainer_summary(second, &s);
    assert_int_equal(s.steps, 40);

    size_t n = 0, n2 = 0;
    float *a = tu_model_state(mpcl_trainer_model(whole), &n);
    float *b = tu_model_state(mpcl_trainer_model(second), &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(a, b, n * sizeof *a);
    free(a);
    free(b);
    mpcl_trainer_destroy(whole);
    mpcl_trainer_destroy(second);
    tu_tmpdir_remove(dir);
    mpcl_tokens_destroy(t);
    mpcl_context_destroy(ctx);
}

/* Two local replicas, each drawing its half of every micro-batch, against
 * one device drawing them all: the same windows, so the same run up to the
 * order of the sums. */
static void data_parallel_draws_the_same_windows(void **state) {
    (void)state;
    mpcl_context *ctx[2] = {tu_context(), tu_context()};
    mpcl_tokens *t = pattern_tokens(PERIOD);
    float *w[2];
    size_t n[2];
    for (int replicas = 1; replicas <= 2; replicas++) {
        reports rs = {0};
        mpcl_train_params p = token_train_params(t, &rs, 12, 6);
        p.model.optim = mpcl_optim_default_params(MPCL_OPTIM_SGD);
        p.model.optim.lr = 0.1f;
        p.grad_accum = 2;
        mpcl_dist *d = NULL;
        if (replicas == 2) {
            TU_ASSERT_OK(mpcl_dist_create_local(2, MPCL_GRAD_COMPRESSION_NONE, &d));
            p.dist = d;
            p.replica_ctx = ctx;
        }
        mpcl_trainer *tr = NULL;
        TU_ASSERT_OK(mpcl_trainer_create(ctx[0], &p, &tr));
        TU_ASSERT_OK(mpcl_trainer_fit(tr));
        mpcl_train_summary s;
        mpcl_trainer_summary(tr, &s);
        assert_int_equal(s.world_size, (size_t)replicas);
        w[replicas - 1] = tu_model_state(mpcl_trainer_model(tr), &n[replicas - 1]);
        mpcl_trainer_destroy(tr);
        mpcl_dist_destroy(d);
    }
    assert_int_equal(n[0], n[1]);
    double worst = 0;
    for (size_t i = 0; i < n[0]; i++) worst = fmax(worst, fabs((double)w[0][i] - (double)w[1][i]));
    if (!(worst < 1e-5)) fail_msg("one device and two replicas end %g apart", worst);
    free(w[0]);
    free(w[1]);
    mpcl_tokens_destroy(t);
    mpcl_context_destroy(ctx[0]);
    mpcl_context_destroy(ctx[1]);
}

static void expect_create_refused(mpcl_context *ctx, const mpcl_train_params *p, mpcl_status want,
                                  const char *needle) {
    mpcl_trainer *tr = NULL;
    tu_expect_error(mpcl_trainer_create(ctx, p, &tr), want, needle);
    assert_null(tr);
}

static void bad_token_runs_refused(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_tokens *t = pattern_tokens(PERIOD);
    reports rs = {0};

    mpcl_train_params p = token_train_params(t, &rs, 10, 5);
    p.model = mpcl_model_default_params(); /* an MLP: no token ids */
    expect_create_refused(ctx, &p, MPCL_ERR_INVALID_ARG, "first layer takes token ids");

    mpcl_tokens *wide = pattern_tokens(300);
    p = token_train_params(wide, &rs, 10, 5);
    expect_create_refused(ctx, &p, MPCL_ERR_INVALID_ARG, "vocabulary of 300");
    mpcl_tokens_destroy(wide);

    p = token_train_params(t, &rs, 0, 5);
    expect_create_refused(ctx, &p, MPCL_ERR_INVALID_ARG, "steps >= 1");

    /* 3000 tokens, 0.001 held out: 3, less than one window of 9. */
    p = token_train_params(t, &rs, 10, 5);
    p.eval_fraction = 0.001;
    expect_create_refused(ctx, &p, MPCL_ERR_FORMAT, "pattern");

    p = token_train_params(t, &rs, 10, 5);
    p.eval_batches = 0;
    expect_create_refused(ctx, &p, MPCL_ERR_INVALID_ARG, "eval_batches is 0");

    mpcl_tokens_destroy(t);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stashed_micro_batches_equal_the_whole_batch),
        cmocka_unit_test(stash_needs_a_backward),
        cmocka_unit_test(learns_from_a_token_stream),
        cmocka_unit_test(resumes_bit_for_bit),
        cmocka_unit_test(data_parallel_draws_the_same_windows),
        cmocka_unit_test(bad_token_runs_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
