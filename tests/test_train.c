/* The training loop on real Fashion-MNIST subsets: a run stopped, saved and
 * resumed in a fresh trainer continues bit for bit like the uninterrupted
 * run; the stop flag, the report cadence, the last partial batch, the
 * per-epoch shuffle and the evaluation figures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpcl/plot.h"
#include "train/train_internal.h"
#include "testutil.h"

enum { MAX_REPORTS = 256 };

typedef struct recorder {
    mpcl_train_report r[MAX_REPORTS];
    size_t count;
    uint64_t stop_at; /* set *stop in the report of this step (0: never) */
    volatile sig_atomic_t stop;
} recorder;

static void on_report(void *user, const mpcl_train_report *r) {
    recorder *rec = user;
    if (rec->count < MAX_REPORTS) rec->r[rec->count] = *r;
    rec->count++;
    if (rec->stop_at && r->step == rec->stop_at) rec->stop = 1;
}

static mpcl_train_params small_params(recorder *rec, mpcl_policy policy) {
    mpcl_train_params p = mpcl_train_default_params();
    p.train_limit = 640;
    p.test_limit = 256;
    p.batch = 64;
    p.epochs = 2;
    p.report_every = 1;
    p.model.hidden[0] = 16;
    p.model.policy = policy;
    p.seed = 5;
    p.on_report = on_report;
    p.user = rec;
    p.stop = &rec->stop;
    return p;
}

static mpcl_trainer *make(mpcl_context *ctx, const mpcl_train_params *p) {
    mpcl_trainer *tr = NULL;
    TU_ASSERT_OK(mpcl_trainer_create(ctx, p, &tr));
    return tr;
}

static float *all_state(mpcl_trainer *tr, size_t *n_out) {
    return tu_model_state(mpcl_trainer_model(tr), n_out);
}

/* Stop mid-epoch 1, save, destroy, load into a fresh trainer, finish: every
 * later step's loss, the test figures and the final state are bitwise the
 * uninterrupted run's (same device, same policy: the kernels are
 * deterministic, and the checkpoint holds every bit of state a step reads). */
static void resume_exact(mpcl_policy policy, bool cosine) {
    mpcl_context *ctx = tu_context();
    char path[] = "/tmp/mpcl-test-train-XXXXXX";
    assert_non_null(mkdtemp(path));
    char file[128];
    snprintf(file, sizeof file, "%s/ckpt.safetensors", path);

    static recorder a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    mpcl_train_params pa = small_params(&a, policy);
    if (cosine) {
        /* Warm-up over 4 steps, then a cosine to the run's end (decay steps
         * 0: 20 - 4 = 16 of them). */
        pa.model.optim.lr = 1e-2f;
        pa.model.lr_schedule.kind = MPCL_LR_COSINE;
        pa.model.lr_schedule.warmup_steps = 4;
        pa.model.lr_schedule.alpha = 0.1;
    }
    mpcl_trainer *ta = make(ctx, &pa);
    const mpcl_lr_schedule *sched = &mpcl_model_params_of(mpcl_trainer_model(ta))->lr_schedule;
    assert_int_equal(sched->decay_steps, cosine ? 16 : 0);
    mpcl_lr_schedule resolved = *sched;
    TU_ASSERT_OK(mpcl_trainer_fit(ta));
    assert_int_equal(a.count, 20); /* 640 / 64 = 10 steps per epoch, 2 epochs */
    /* Each report's lr is the schedule's at its (last) step. */
    for (size_t i = 0; i < 20; i++)
        if (a.r[i].lr != (double)mpcl_lr_at(&resolved, pa.model.optim.lr, a.r[i].step - 1))
            fail_msg("step %llu: lr %.9g, the schedule's %.9g", (unsigned long long)a.r[i].step,
                     a.r[i].lr, (double)mpcl_lr_at(&resolved, pa.model.optim.lr, a.r[i].step - 1));
    /* Warm-up from 0 to the peak at step 4, then down. */
    if (cosine)
        assert_true(a.r[0].lr == 0.0 && a.r[4].lr == (double)1e-2f && a.r[9].lr < a.r[4].lr &&
                    a.r[19].lr < a.r[9].lr);
    size_t na;
    float *final_a = all_state(ta, &na);
    mpcl_train_summary sa;
    mpcl_trainer_summary(ta, &sa);
    assert_int_equal(sa.steps, 20);
    assert_false(sa.stopped);
    mpcl_trainer_destroy(ta);

    enum { STOP = 13 };
    b.stop_at = STOP;
    mpcl_train_params pb = small_params(&b, policy);
    pb.model.optim = pa.model.optim;
    pb.model.lr_schedule = pa.model.lr_schedule;
    mpcl_trainer *tb = make(ctx, &pb);
    TU_ASSERT_OK(mpcl_trainer_fit(tb));
    mpcl_train_summary sb;
    mpcl_trainer_summary(tb, &sb);
    assert_true(sb.stopped);
    assert_int_equal(sb.steps, STOP);
    assert_int_equal(sb.epochs_done, 1);
    assert_int_equal(b.count, STOP);
    TU_ASSERT_OK(mpcl_trainer_save(tb, file));
    mpcl_trainer_destroy(tb);
    if (cosine) {
        /* A run without the schedule would not continue it: refused, with
         * the flags that would. */
        static recorder c;
        memset(&c, 0, sizeof c);
        mpcl_train_params pc = small_params(&c, policy);
        mpcl_trainer *tc = make(ctx, &pc);
        assert_int_equal(mpcl_trainer_load(tc, file), MPCL_ERR_FORMAT);
        if (!strstr(mpcl_errmsg(),
                    "--lr-schedule cosine --warmup-steps 4 --decay-steps 16 --lr-min-ratio 0.1 "))
            fail_msg("constant run loading a cosine checkpoint: '%s'", mpcl_errmsg());
        mpcl_trainer_destroy(tc);
    }

    b.stop = 0;
    b.stop_at = 0;
    tb = make(ctx, &pb);
    TU_ASSERT_OK(mpcl_trainer_load(tb, file));
    TU_ASSERT_OK(mpcl_trainer_fit(tb));
    assert_int_equal(b.count, 20);
    for (size_t i = 0; i < 20; i++) {
        assert_int_equal(b.r[i].step, a.r[i].step);
        if (memcmp(&a.r[i].loss, &b.r[i].loss, sizeof(double)) != 0 ||
            memcmp(&a.r[i].accuracy, &b.r[i].accuracy, sizeof(double)) != 0)
            fail_msg("%s step %llu: loss %.17g / %.17g after resume, uninterrupted %.17g / %.17g",
                     mpcl_policy_name(policy), (unsigned long long)a.r[i].step, b.r[i].loss,
                     b.r[i].accuracy, a.r[i].loss, a.r[i].accuracy);
        assert_memory_equal(&a.r[i].loss_scale, &b.r[i].loss_scale, sizeof(float));
        assert_memory_equal(&a.r[i].lr, &b.r[i].lr, sizeof(double));
    }
    assert_true(b.r[19].epoch_end);
    assert_memory_equal(&a.r[19].test_loss, &b.r[19].test_loss, sizeof(double));
    assert_memory_equal(&a.r[19].test_accuracy, &b.r[19].test_accuracy, sizeof(double));
    size_t nb;
    float *final_b = all_state(tb, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(final_a, final_b, na * sizeof(float));
    uint32_t t = 0;
    TU_ASSERT_OK(mpcl_model_read_step(mpcl_trainer_model(tb), &t));
    assert_int_equal(t, 20);
    mpcl_trainer_summary(tb, &sb);
    assert_int_equal(sb.steps, 20);
    assert_int_equal(sb.epochs_done, 2);
    assert_false(sb.stopped);
    fprintf(stderr, "%s%s: 7 resumed steps equal bit for bit; last loss %.9g, test acc %.4f\n",
            mpcl_policy_name(policy), cosine ? " cosine" : "", b.r[19].loss, b.r[19].test_accuracy);
    free(final_a);
    free(final_b);
    mpcl_trainer_destroy(tb);
    unlink(file);
    rmdir(path);
    mpcl_context_destroy(ctx);
}

static void test_resume_float32(void **state) {
    (void)state;
    resume_exact(MPCL_POLICY_FLOAT32, false);
}

/* The lr schedule goes on from the checkpoint's step: a cosine with warm-up
 * resumes bit for bit too (float32 and mixed_float16, whose skipped steps
 * still advance the schedule). */
static void test_resume_cosine(void **state) {
    (void)state;
    resume_exact(MPCL_POLICY_FLOAT32, true);
    resume_exact(MPCL_POLICY_MIXED_FLOAT16, true);
}

static void test_resume_mixed(void **state) {
    (void)state;
    resume_exact(MPCL_POLICY_MIXED_FLOAT16, false);
}

static void test_resume_bfloat16(void **state) {
    (void)state;
    resume_exact(MPCL_POLICY_MIXED_BFLOAT16, false);
}

/* A stop set before fit does nothing; one set in a report stops after that
 * step; fit again continues from there to the end. */
static void test_stop(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    static recorder r;
    memset(&r, 0, sizeof r);
    mpcl_train_params p = small_params(&r, MPCL_POLICY_FLOAT32);
    p.epochs = 1;
    mpcl_trainer *tr = make(ctx, &p);
    r.stop = 1;
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    mpcl_train_summary s;
    mpcl_trainer_summary(tr, &s);
    assert_int_equal(s.steps, 0);
    assert_true(s.stopped);
    assert_int_equal(r.count, 0);
    uint32_t t = 99;
    TU_ASSERT_OK(mpcl_model_read_step(mpcl_trainer_model(tr), &t));
    assert_int_equal(t, 0);

    r.stop = 0;
    r.stop_at = 3;
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    mpcl_trainer_summary(tr, &s);
    assert_int_equal(s.steps, 3);
    assert_true(s.stopped);
    assert_int_equal(r.count, 3);
    TU_ASSERT_OK(mpcl_model_read_step(mpcl_trainer_model(tr), &t));
    assert_int_equal(t, 3);

    r.stop = 0;
    r.stop_at = 0;
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    mpcl_trainer_summary(tr, &s);
    assert_int_equal(s.steps, 10);
    assert_false(s.stopped);
    assert_int_equal(s.epochs_done, 1);
    assert_int_equal(r.count, 10);
    assert_true(isfinite(s.test_loss));
    assert_true(s.peak_device_bytes > 0);
    assert_true(s.final_loss_scale == 1.0f); /* float32: no scaler */
    assert_int_equal(s.skipped_steps, 0);
    /* All epochs done: another fit does nothing. */
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    assert_int_equal(r.count, 10);
    mpcl_trainer_destroy(tr);
    mpcl_context_destroy(ctx);
}

/* report_every 3 over 2 epochs of 10 steps: steps 3, 6, 9, the epoch end
 * 10, then 13, 16, 19, 20 (the count restarts after each report). 0: only
 * the epoch ends. The last partial batch counts as a step: 650 samples in
 * batches of 64 are 11 steps (10 full, one of 10). */
static void test_cadence_and_partial_batch(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    static recorder r;
    memset(&r, 0, sizeof r);
    mpcl_train_params p = small_params(&r, MPCL_POLICY_FLOAT32);
    p.report_every = 3;
    mpcl_trainer *tr = make(ctx, &p);
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    const uint64_t want[] = {3, 6, 9, 10, 13, 16, 19, 20};
    assert_int_equal(r.count, 8);
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(r.r[i].step, want[i]);
        assert_int_equal(r.r[i].epoch_steps, 10);
        assert_int_equal(r.r[i].epoch_end, want[i] % 10 == 0);
        assert_int_equal(r.r[i].epoch, (want[i] - 1) / 10);
        assert_int_equal(r.r[i].epoch_step, (want[i] - 1) % 10 + 1);
        assert_true(isfinite(r.r[i].loss) && r.r[i].loss > 0);
        assert_int_equal(isfinite(r.r[i].test_loss), r.r[i].epoch_end);
    }
    mpcl_trainer_destroy(tr);

    memset(&r, 0, sizeof r);
    p = small_params(&r, MPCL_POLICY_FLOAT32);
    p.report_every = 0;
    p.train_limit = 650;
    tr = make(ctx, &p);
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    assert_int_equal(r.count, 2);
    assert_int_equal(r.r[0].step, 11);
    assert_int_equal(r.r[0].epoch_steps, 11);
    assert_int_equal(r.r[1].step, 22);
    assert_true(r.r[0].epoch_end && r.r[1].epoch_end);
    uint32_t t = 0;
    TU_ASSERT_OK(mpcl_model_read_step(mpcl_trainer_model(tr), &t));
    assert_int_equal(t, 22);
    mpcl_train_summary s;
    mpcl_trainer_summary(tr, &s);
    assert_true(s.train_samples_per_s > 0);
    mpcl_trainer_destroy(tr);
    mpcl_context_destroy(ctx);
}

/* The syncs of one float32 epoch of `steps` steps, without reports. */
static uint64_t epoch_syncs(mpcl_context *ctx, uint32_t steps) {
    static recorder r;
    memset(&r, 0, sizeof r);
    mpcl_train_params p = small_params(&r, MPCL_POLICY_FLOAT32);
    p.report_every = 0;
    p.epochs = 1;
    p.train_limit = 64 * steps;
    mpcl_trainer *tr = make(ctx, &p);
    uint64_t before = mpcl_context_sync_count(ctx);
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    uint64_t syncs = mpcl_context_sync_count(ctx) - before;
    mpcl_trainer_destroy(tr);
    return syncs;
}

/* Each step waits for the step MPCL_TRAIN_QUEUE_AHEAD back, a blocking call
 * that the sync count includes: ten more steps are at least ten more syncs. */
static void test_step_wait_is_counted(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    uint64_t ten = epoch_syncs(ctx, 10), twenty = epoch_syncs(ctx, 20);
    print_message("syncs: %llu for 10 steps, %llu for 20\n", (unsigned long long)ten,
                  (unsigned long long)twenty);
    assert_true(twenty >= ten + 10);
    mpcl_context_destroy(ctx);
}

/* Each epoch's order is a permutation, a function of (seed, epoch) only, and
 * differs between epochs and seeds. */
static void test_epoch_order(void **state) {
    (void)state;
    enum { N = 1000 };
    static int32_t a[N], b[N], c[N], d[N];
    static unsigned char seen[N];
    mpcl__train_epoch_order(42, 3, a, N);
    mpcl__train_epoch_order(42, 3, b, N);
    mpcl__train_epoch_order(42, 4, c, N);
    mpcl__train_epoch_order(43, 3, d, N);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    assert_memory_not_equal(a, d, sizeof a);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < N; i++) {
        assert_true(a[i] >= 0 && a[i] < N);
        assert_int_equal(seen[a[i]], 0);
        seen[a[i]] = 1;
    }
}

/* Evaluation against a second path: with the test set in one batch, the
 * logits of that batch are read back and accuracy counted and loss computed
 * on the host in double. */
/* An IDX pair of `count` images of rows x cols random bytes (every value
 * 0..255 appears) and labels 0..9, in dir, as "<prefix>-images-idx3-ubyte"
 * and "<prefix>-labels-idx1-ubyte". */
static void write_random_idx(const char *dir, const char *prefix, uint32_t count, uint32_t rows,
                             uint32_t cols) {
    char path[512];
    tu_rng r = tu_rng_make(count * 31u + cols);
    for (int labels = 0; labels < 2; labels++) {
        snprintf(path, sizeof path, "%s/%s-%s", dir, prefix,
                 labels ? "labels-idx1-ubyte" : "images-idx3-ubyte");
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        uint32_t dims[3] = {count, rows, cols};
        int nd = labels ? 1 : 3;
        unsigned char head[16] = {0, 0, 8, (unsigned char)nd};
        for (int d = 0; d < nd; d++)
            for (int k = 0; k < 4; k++)
                head[4 + 4 * d + k] = (unsigned char)(dims[d] >> (24 - 8 * k));
        assert_int_equal(fwrite(head, 1, 4 + 4 * (size_t)nd, f), 4 + 4 * (size_t)nd);
        size_t n = labels ? count : (size_t)count * rows * cols;
        for (size_t i = 0; i < n; i++) {
            int v = labels ? (int)(i % 10) : (i < 256 ? (int)i : (int)tu_uniform(&r, 0, 256));
            assert_int_equal(fputc(v, f), v);
        }
        assert_int_equal(fclose(f), 0);
    }
}

/* The device gather against the host's mpcl_dataset_batch, bit for bit, in
 * every float storage dtype (the host value rounded as the host conversion
 * does, which is tested against the device's), on Fashion-MNIST (784
 * features, a multiple of the kernel's 8) from a shuffled order and an
 * offset, and on 3x5 images (15: a tail) from the start, whose first 37
 * images hold every byte value (the kernel computes byte / 255 rather than
 * looking it up), into a poisoned batch. */
static void test_gather_matches_host(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    char dir[] = "/tmp/mpcl-test-gather-XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_random_idx(dir, "odd", 300, 3, 5);
    mpcl_dataset *sets[2] = {NULL, NULL}, *all = NULL;
    TU_ASSERT_OK(mpcl_idx_load(NULL, "train", &all));
    TU_ASSERT_OK(mpcl_dataset_subset(all, 300, &sets[0]));
    mpcl_dataset_destroy(all);
    TU_ASSERT_OK(mpcl_idx_load(dir, "odd", &sets[1]));
    const mpcl_dtype dtypes[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};
    for (int k = 0; k < 2; k++) {
        const mpcl_dataset *ds = sets[k];
        size_t n = mpcl_dataset_count(ds), f = mpcl_dataset_features(ds), B = 37;
        size_t first = k == 0 ? 101 : 0;
        int32_t *order = malloc(n * sizeof *order), labels[37], want_labels[37];
        float *want = malloc(B * f * sizeof *want), *got = malloc(B * f * sizeof *got);
        uint64_t rng = 5;
        mpcl_iota_indices(order, n);
        if (k == 0) mpcl_shuffle_indices(&rng, order, n);
        TU_ASSERT_OK(mpcl_dataset_batch(ds, order + first, B, want, want_labels));
        if (k == 1) {
            bool seen[256] = {false};
            for (size_t i = 0; i < B * f; i++) seen[(int)lrintf(want[i] * 255.0f)] = true;
            for (int v = 0; v < 256; v++)
                if (!seen[v]) fail_msg("byte value %d is not in the 3x5 batch", v);
        }
        mpcl_device_dataset *dd = NULL;
        TU_ASSERT_OK(mpcl_device_dataset_create(ctx, ds, &dd));
        mpcl_tensor *ord = tu_tensor(ctx, MPCL_DTYPE_I32, n, 1),
                    *y = tu_tensor(ctx, MPCL_DTYPE_I32, B, 1);
        TU_ASSERT_OK(mpcl_tensor_upload_i32(ord, order, n));
        for (int d = 0; d < 3; d++) {
            mpcl_tensor *x = tu_tensor(ctx, dtypes[d], B, f);
            tu_poison(x);
            TU_ASSERT_OK(mpcl_device_dataset_gather(ctx, dd, ord, first, x, y));
            TU_ASSERT_OK(mpcl_tensor_download_f32(x, got, B * f));
            TU_ASSERT_OK(mpcl_tensor_download_i32(y, labels, B));
            for (size_t i = 0; i < B * f; i++) {
                float w = dtypes[d] == MPCL_DTYPE_F16 ? mpcl_f16_to_f32(mpcl_f32_to_f16(want[i]))
                          : dtypes[d] == MPCL_DTYPE_BF16
                              ? mpcl_bf16_to_f32(mpcl_f32_to_bf16(want[i]))
                              : want[i];
                if (memcmp(&w, &got[i], sizeof w) != 0)
                    fail_msg("%zu features, %s: x[%zu] = %a, host %a", f,
                             mpcl_dtype_name(dtypes[d]), i, (double)got[i], (double)w);
            }
            assert_memory_equal(labels, want_labels, sizeof labels);
            mpcl_tensor_destroy(x);
        }
        mpcl_tensor_destroy(ord);
        mpcl_tensor_destroy(y);
        mpcl_device_dataset_destroy(dd);
        free(order);
        free(want);
        free(got);
    }
    mpcl_dataset_destroy(sets[0]);
    mpcl_dataset_destroy(sets[1]);
    char path[600];
    snprintf(path, sizeof path, "%s/odd-images-idx3-ubyte", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/odd-labels-idx1-ubyte", dir);
    unlink(path);
    rmdir(dir);
    mpcl_context_destroy(ctx);
}

static void test_evaluate(void **state) {
    (void)state;
    enum { NT = 64, C = 10 };
    mpcl_context *ctx = tu_context();
    static recorder r;
    memset(&r, 0, sizeof r);
    mpcl_train_params p = small_params(&r, MPCL_POLICY_FLOAT32);
    p.epochs = 1;
    p.test_limit = NT;
    mpcl_trainer *tr = make(ctx, &p);
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    double loss = NAN, acc = NAN;
    TU_ASSERT_OK(mpcl_trainer_evaluate(tr, &loss, &acc));
    /* The same weights as at the epoch's end: the same figures. */
    assert_memory_equal(&loss, &r.r[r.count - 1].test_loss, sizeof loss);
    assert_memory_equal(&acc, &r.r[r.count - 1].test_accuracy, sizeof acc);

    static float logits[NT * C];
    TU_ASSERT_OK(mpcl_model_read_logits(mpcl_trainer_model(tr), logits, NT * C));
    mpcl_dataset *test = NULL;
    TU_ASSERT_OK(mpcl_idx_load(NULL, "t10k", &test));
    const uint8_t *labels = mpcl_dataset_labels(test);
    size_t correct = 0;
    double lsum = 0;
    for (int i = 0; i < NT; i++) {
        const float *z = logits + i * C;
        int best = 0;
        double mx = z[0];
        for (int j = 1; j < C; j++)
            if (z[j] > z[best]) best = j;
        for (int j = 1; j < C; j++) mx = fmax(mx, (double)z[j]);
        double se = 0;
        for (int j = 0; j < C; j++) se += exp((double)z[j] - mx);
        lsum += log(se) + mx - (double)z[labels[i]];
        correct += best == labels[i];
    }
    /* The device's first argmax over the same f32 logits: an exact count. */
    assert_true(acc == (double)correct / NT);
    /* Loss: f32 softmax on the device, accumulated in f32 over 64 rows:
     * a few ulp of f32 per row, 1e-5 relative is generous. */
    double want = lsum / NT;
    if (fabs(loss - want) > 1e-5 * fabs(want)) fail_msg("test loss %.9g, host %.9g", loss, want);
    fprintf(stderr, "evaluate: loss %.6f accuracy %.4f (%zu/%d)\n", loss, acc, correct, NT);
    mpcl_dataset_destroy(test);
    mpcl_trainer_destroy(tr);
    mpcl_context_destroy(ctx);
}

/* One fit of small_params in `policy` on a fresh context: emulating the
 * matrix engine when asked, on the GEMM path `gemm` names (NULL: the
 * plan's), which must be `want`; the last report and the commands the fit
 * launched. */
typedef struct fit_result {
    mpcl_train_report last;
    uint64_t launches;
} fit_result;

static fit_result fit_on(mpcl_policy policy, bool emulate, const char *gemm, mpcl_gemm_path want) {
    static recorder r;
    memset(&r, 0, sizeof r);
    if (gemm) setenv("MPCL_GEMM", gemm, 1);
    mpcl_context *ctx = tu_context();
    unsetenv("MPCL_GEMM");
    if (emulate) TU_ASSERT_OK(mpcl__matrix_engine_emulate(ctx));
    mpcl_train_params p = small_params(&r, policy);
    mpcl_trainer *tr = make(ctx, &p);
    const mpcl_plan *plan = mpcl_model_plan(mpcl_trainer_model(tr));
    if (plan->gemm != want)
        fail_msg("%s: the plan took %s (%s), not %s", mpcl_policy_name(policy),
                 mpcl_gemm_path_name(plan->gemm), plan->reason, mpcl_gemm_path_name(want));
    uint64_t before = mpcl_context_launch_count(ctx);
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    fit_result f = {r.r[r.count - 1], mpcl_context_launch_count(ctx) - before};
    mpcl_trainer_destroy(tr);
    mpcl_context_destroy(ctx);
    return f;
}

/* The 16-bit policies train on mpcl-mma as well as float32 trains: where the
 * device's matrix engine is verified (an NVIDIA GPU), on its kernels; on
 * PoCL, on the same kernels' code with mma.sync, ldmatrix and cp.async
 * emulated (elsewhere skipped, as test_gemm's emulated test is). The
 * pipelined kernels take every GEMM: the first layer's (64x784 by 784x16
 * and its transposes) by cp.async, the 16x10 head's, whose rows are not
 * whole 16-byte pieces, by element loads. Tolerance: test
 * accuracy within 8 of the 256 samples of float32's (as test_dist allows
 * 16-bit gradients), test loss within 5%. And the run launches no more
 * commands than the same run on mpcl-mixed, whose kernels add the linear
 * layer's bias in their stores: so do mpcl-mma's. */
static void test_mixed_on_the_matrix_engine(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const mpcl_device_info *d = mpcl_context_device(ctx);
    bool emulate = !mpcl_plan_mma_usable(d);
    bool pocl = tu_on_pocl(ctx);
    if (emulate && !pocl)
        printf("mixed on mpcl-mma: skipped on %s (no verified matrix engine; emulated on PoCL)\n",
               d->platform);
    mpcl_gemm_path f32_path = mpcl_context_plan(ctx, MPCL_POLICY_FLOAT32).gemm;
    mpcl_context_destroy(ctx);
    if (emulate && !pocl) return;
    fit_result f32 = fit_on(MPCL_POLICY_FLOAT32, false, NULL, f32_path);
    const mpcl_policy policies[] = {MPCL_POLICY_MIXED_FLOAT16, MPCL_POLICY_MIXED_BFLOAT16};
    for (size_t i = 0; i < 2; i++) {
        const char *name = mpcl_policy_name(policies[i]);
        fit_result mma = fit_on(policies[i], emulate, NULL, MPCL_GEMM_MPCL_MMA);
        fit_result mixed = fit_on(policies[i], false, "mpcl-mixed", MPCL_GEMM_MPCL_MIXED);
        printf(
            "%s on mpcl-mma%s: test loss %.6f accuracy %.4f, %llu launches; float32 %.6f "
            "%.4f; on mpcl-mixed %llu launches\n",
            name, emulate ? " (emulated)" : "", mma.last.test_loss, mma.last.test_accuracy,
            (unsigned long long)mma.launches, f32.last.test_loss, f32.last.test_accuracy,
            (unsigned long long)mixed.launches);
        assert_true(isfinite(mma.last.test_loss));
        if (fabs(mma.last.test_accuracy - f32.last.test_accuracy) > 8.0 / 256 + 1e-9 ||
            fabs(mma.last.test_loss - f32.last.test_loss) > 0.05 * f32.last.test_loss)
            fail_msg("%s on mpcl-mma: test loss %.4f accuracy %.4f, float32 %.4f %.4f", name,
                     mma.last.test_loss, mma.last.test_accuracy, f32.last.test_loss,
                     f32.last.test_accuracy);
        if (mma.launches > mixed.launches)
            fail_msg("%s: %llu launches on mpcl-mma, %llu on mpcl-mixed", name,
                     (unsigned long long)mma.launches, (unsigned long long)mixed.launches);
    }
}

/* Bad parameters are refused before anything is loaded. */
static void test_bad_params(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_train_params p = mpcl_train_default_params();
    p.batch = 0;
    mpcl_trainer *tr = (mpcl_trainer *)&p;
    assert_int_equal(mpcl_trainer_create(ctx, &p, &tr), MPCL_ERR_INVALID_ARG);
    assert_null(tr);
    p = mpcl_train_default_params();
    p.data_dir = "/nonexistent-mpcl-data";
    assert_int_equal(mpcl_trainer_create(ctx, &p, &tr), MPCL_ERR_IO);
    assert_null(tr);
    assert_non_null(strstr(mpcl_context_errmsg(ctx), "/nonexistent-mpcl-data"));
    mpcl_context_destroy(ctx);
}

/* trainer_create with params.data_load (the files decoded on a thread while
 * the caller does other work, and the model made meanwhile) and without it:
 * the same status and the same message, word for word, for a missing folder,
 * a corrupt file, a bad model with bad data, a bad test label and a bad
 * model alone; the same training; a load started with other data params,
 * or used twice, is refused; a load never handed to a trainer is simply
 * destroyed. */
static void expect_same_failure(mpcl_context *ctx, const mpcl_train_params *p,
                                mpcl_status expected) {
    mpcl_trainer *tr = NULL;
    assert_int_equal(mpcl_trainer_create(ctx, p, &tr), expected);
    char *own = strdup(mpcl_errmsg());
    assert_non_null(own);
    mpcl_train_params q = *p;
    TU_ASSERT_OK(mpcl_train_data_load_start(&q, &q.data_load));
    assert_int_equal(mpcl_trainer_create(ctx, &q, &tr), expected);
    assert_null(tr);
    assert_string_equal(mpcl_errmsg(), own);
    assert_string_equal(mpcl_context_errmsg(ctx), own);
    mpcl_train_data_load_destroy(q.data_load);
    free(own);
}

static void test_data_load(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_train_params p = mpcl_train_default_params();
    p.data_dir = "/nonexistent-mpcl-data";
    expect_same_failure(ctx, &p, MPCL_ERR_IO);

    /* A folder whose training images have a wrong magic number. */
    char dir[] = "/tmp/mpcl-test-data-load-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    const unsigned char bad[16] = {0, 0, 8, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
    assert_int_equal(fwrite(bad, 1, sizeof bad, f), sizeof bad);
    fclose(f);
    p.data_dir = dir;
    expect_same_failure(ctx, &p, MPCL_ERR_FORMAT);
    assert_non_null(strstr(mpcl_errmsg(), "magic number"));

    /* The model is made from the header and the labels while the pixels
     * decode, but its failure is still reported after the data's: truncated
     * pixels win over a bad model, and with good data the model's own
     * message comes back. */
    const unsigned char images[17] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 1, 9};
    const unsigned char labels[10] = {0, 0, 8, 1, 0, 0, 0, 2, 0, 1};
    char labels_path[64];
    snprintf(labels_path, sizeof labels_path, "%s/train-labels-idx1-ubyte", dir);
    assert_non_null(f = fopen(path, "wb"));
    assert_int_equal(fwrite(images, 1, sizeof images, f), sizeof images);
    fclose(f);
    assert_non_null(f = fopen(labels_path, "wb"));
    assert_int_equal(fwrite(labels, 1, sizeof labels, f), sizeof labels);
    fclose(f);
    p.model.activation = MPCL_ACT_COUNT;
    p.model.policy = MPCL_POLICY_FLOAT32;
    expect_same_failure(ctx, &p, MPCL_ERR_FORMAT);
    assert_non_null(strstr(mpcl_errmsg(), "truncated file"));
    /* Whole training files, and a test label beyond their two classes (the
     * test split decodes beside the training split): the test's message. */
    const unsigned char test_images[17] = {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 7};
    const unsigned char test_labels[9] = {0, 0, 8, 1, 0, 0, 0, 1, 5};
    char test_paths[2][64];
    snprintf(test_paths[0], sizeof test_paths[0], "%s/t10k-images-idx3-ubyte", dir);
    snprintf(test_paths[1], sizeof test_paths[1], "%s/t10k-labels-idx1-ubyte", dir);
    assert_non_null(f = fopen(path, "ab"));
    assert_int_equal(fwrite(images + 16, 1, 1, f), 1);
    fclose(f);
    assert_non_null(f = fopen(test_paths[0], "wb"));
    assert_int_equal(fwrite(test_images, 1, sizeof test_images, f), sizeof test_images);
    fclose(f);
    assert_non_null(f = fopen(test_paths[1], "wb"));
    assert_int_equal(fwrite(test_labels, 1, sizeof test_labels, f), sizeof test_labels);
    fclose(f);
    expect_same_failure(ctx, &p, MPCL_ERR_FORMAT);
    assert_non_null(strstr(mpcl_errmsg(), "is not below the class count 2"));
    unlink(test_paths[0]);
    unlink(test_paths[1]);
    p.data_dir = NULL;
    p.train_limit = 640;
    p.test_limit = 256;
    expect_same_failure(ctx, &p, MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "unknown activation"));
    unlink(path);
    unlink(labels_path);
    rmdir(dir);

    static recorder a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    mpcl_train_params pa = small_params(&a, MPCL_POLICY_FLOAT32),
                      pb = small_params(&b, MPCL_POLICY_FLOAT32);
    pa.epochs = pb.epochs = 1;
    TU_ASSERT_OK(mpcl_train_data_load_start(&pb, &pb.data_load));
    mpcl_trainer *ta = make(ctx, &pa), *tb = make(ctx, &pb);
    TU_ASSERT_OK(mpcl_trainer_fit(ta));
    TU_ASSERT_OK(mpcl_trainer_fit(tb));
    assert_int_equal(a.count, b.count);
    for (size_t i = 0; i < a.count; i++) {
        assert_memory_equal(&a.r[i].loss, &b.r[i].loss, sizeof(double));
        assert_memory_equal(&a.r[i].test_loss, &b.r[i].test_loss, sizeof(double));
    }
    mpcl_trainer *tr = NULL;
    assert_int_equal(mpcl_trainer_create(ctx, &pb, &tr), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "already used"));
    mpcl_train_data_load_destroy(pb.data_load);

    TU_ASSERT_OK(mpcl_train_data_load_start(&pb, &pb.data_load));
    pb.train_limit++;
    assert_int_equal(mpcl_trainer_create(ctx, &pb, &tr), MPCL_ERR_INVALID_ARG);
    assert_null(tr);
    mpcl_train_data_load_destroy(pb.data_load);
    TU_ASSERT_OK(mpcl_train_data_load_start(&pb, &pb.data_load));
    mpcl_train_data_load_destroy(pb.data_load);
    mpcl_train_data_load_destroy(NULL);
    assert_int_equal(mpcl_train_data_load_start(NULL, &pb.data_load), MPCL_ERR_INVALID_ARG);
    assert_null(pb.data_load);
    mpcl_trainer_destroy(ta);
    mpcl_trainer_destroy(tb);
    mpcl_context_destroy(ctx);
}

/* Data from memory train exactly as the same samples read from the files;
 * without test data there is no evaluation; a test set of another width is
 * refused. */
static void test_memory_data(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    static recorder a, b, c;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    mpcl_train_params pa = small_params(&a, MPCL_POLICY_FLOAT32);
    pa.epochs = 1;
    mpcl_trainer *ta = make(ctx, &pa);
    TU_ASSERT_OK(mpcl_trainer_fit(ta));

    mpcl_dataset *files[2] = {NULL, NULL}, *mem[2] = {NULL, NULL};
    const char *prefix[2] = {"train", "t10k"};
    size_t limit[2] = {pa.train_limit, pa.test_limit};
    for (int i = 0; i < 2; i++) {
        TU_ASSERT_OK(mpcl_idx_load(NULL, prefix[i], &files[i]));
        TU_ASSERT_OK(mpcl_dataset_from_memory(
            mpcl_dataset_pixels(files[i]), mpcl_dataset_labels(files[i]), limit[i],
            mpcl_dataset_rows(files[i]), mpcl_dataset_cols(files[i]), 10, &mem[i]));
    }
    mpcl_train_params pb = small_params(&b, MPCL_POLICY_FLOAT32);
    pb.epochs = 1;
    pb.data_dir = "/nonexistent-mpcl-data"; /* ignored with train_data */
    pb.train_data = mem[0];
    pb.test_data = mem[1];
    mpcl_trainer *tb = make(ctx, &pb);
    TU_ASSERT_OK(mpcl_trainer_fit(tb));
    assert_int_equal(a.count, b.count);
    for (size_t i = 0; i < a.count; i++) {
        assert_memory_equal(&a.r[i].loss, &b.r[i].loss, sizeof(double));
        assert_memory_equal(&a.r[i].test_loss, &b.r[i].test_loss, sizeof(double));
    }
    size_t na, nb;
    float *sa = all_state(ta, &na), *sb = all_state(tb, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(sa, sb, na * sizeof *sa);
    free(sa);
    free(sb);

    mpcl_train_params pc = small_params(&c, MPCL_POLICY_FLOAT32);
    pc.epochs = 1;
    pc.train_data = mem[0];
    mpcl_trainer *tc = make(ctx, &pc);
    TU_ASSERT_OK(mpcl_trainer_fit(tc));
    assert_true(c.count > 0 && c.r[c.count - 1].epoch_end && isnan(c.r[c.count - 1].test_loss));
    double loss, acc;
    assert_int_equal(mpcl_trainer_evaluate(tc, &loss, &acc), MPCL_ERR_INVALID_ARG);

    /* The run record takes the reports and writes them as SVG (its drawing is
     * checked by rendering it, in tests/python/test_plot.py); an empty record
     * gives empty panels, and a folder that does not exist is MPCL_ERR_IO. */
    mpcl_run_record *rec = NULL;
    TU_ASSERT_OK(mpcl_run_record_create(tc, &rec));
    char path[] = "/tmp/mpcl-test-plot-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    TU_ASSERT_OK(mpcl_run_record_write_svg(rec, path));
    for (size_t i = 0; i < c.count && i < MAX_REPORTS; i++)
        TU_ASSERT_OK(mpcl_run_record_add(rec, &c.r[i]));
    assert_int_equal(mpcl_run_record_count(rec), c.count);
    TU_ASSERT_OK(mpcl_run_record_write_svg(rec, path));
    FILE *f = fopen(path, "r");
    static char svg[1 << 16];
    size_t got = fread(svg, 1, sizeof svg - 1, f);
    fclose(f);
    svg[got] = 0;
    unlink(path);
    assert_true(strncmp(svg, "<?xml", 5) == 0 && strstr(svg, "</svg>\n"));
    assert_non_null(strstr(svg, mpcl_context_device(ctx)->name));
    assert_int_equal(mpcl_run_record_write_svg(rec, "/nonexistent-mpcl-dir/x.svg"), MPCL_ERR_IO);
    mpcl_run_record_destroy(rec);

    mpcl_dataset *narrow = NULL;
    TU_ASSERT_OK(mpcl_dataset_from_memory(mpcl_dataset_pixels(files[1]),
                                          mpcl_dataset_labels(files[1]), 8, 1, 700, 10, &narrow));
    pc.test_data = narrow;
    mpcl_trainer *td = (mpcl_trainer *)&pc;
    assert_int_equal(mpcl_trainer_create(ctx, &pc, &td), MPCL_ERR_FORMAT);
    assert_null(td);
    mpcl_dataset_destroy(narrow);
    for (int i = 0; i < 2; i++) {
        mpcl_dataset_destroy(files[i]);
        mpcl_dataset_destroy(mem[i]);
    }
    mpcl_trainer_destroy(ta);
    mpcl_trainer_destroy(tb);
    mpcl_trainer_destroy(tc);
    mpcl_context_destroy(ctx);
}

/* A --batch above the training samples: every step takes all of them (one
 * batch per epoch, as Keras' fit), the model and the batch buffers are sized
 * for them, not for the batch asked (with the model made early from the
 * read-ahead shape too), and the checkpoint saves that batch, so a run asking
 * for exactly the samples resumes it; another batch is still refused. */
static void test_batch_above_samples(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    static recorder r;
    memset(&r, 0, sizeof r);
    mpcl_train_params p = small_params(&r, MPCL_POLICY_FLOAT32);
    p.train_limit = 100;
    p.batch = 100000;
    p.epochs = 1;
    for (int early = 0; early < 2; early++) {
        if (early) TU_ASSERT_OK(mpcl_train_data_load_start(&p, &p.data_load));
        mpcl_trainer *tr = make(ctx, &p);
        assert_int_equal(mpcl_model_params_of(mpcl_trainer_model(tr))->max_batch, 100);
        mpcl_train_data_info info;
        mpcl_trainer_data_info(tr, &info);
        assert_int_equal(info.batch, 100);
        assert_int_equal(info.batch_requested, 100000);
        assert_int_equal(info.train_samples, 100);
        mpcl_trainer_destroy(tr);
        mpcl_train_data_load_destroy(p.data_load);
        p.data_load = NULL;
    }
    mpcl_trainer *tr = make(ctx, &p);
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    assert_true(r.count > 0 && r.r[r.count - 1].epoch_steps == 1 && r.r[r.count - 1].step == 1);
    char path[] = "/tmp/mpcl-test-batch-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    TU_ASSERT_OK(mpcl_trainer_save(tr, path));
    mpcl_trainer_destroy(tr);
    p.batch = 100;
    p.epochs = 2;
    tr = make(ctx, &p);
    TU_ASSERT_OK(mpcl_trainer_load(tr, path));
    mpcl_trainer_destroy(tr);
    p.batch = 64;
    tr = make(ctx, &p);
    assert_int_equal(mpcl_trainer_load(tr, path), MPCL_ERR_FORMAT);
    assert_non_null(strstr(mpcl_errmsg(), "--batch 100"));
    mpcl_trainer_destroy(tr);
    unlink(path);
    mpcl_context_destroy(ctx);
}

/* The class count's source and the classes with almost no example (under
 * 1% of the mean): data from memory declare their count; a class with one
 * example in 2000 over 11 classes (mean 181.8) is rare, one with one in
 * 110 is not (mean 10: 1% is 0.1). */
static void test_class_info(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    enum { MANY = 2000 };
    static uint8_t pixels[MANY * 4], labels[MANY];
    for (size_t i = 0; i < MANY; i++) labels[i] = (uint8_t)(i % 10);
    labels[1234] = 10;
    for (size_t i = 0; i < sizeof pixels; i++) pixels[i] = (uint8_t)(i * 7);
    static recorder r;
    mpcl_train_params p = small_params(&r, MPCL_POLICY_FLOAT32);
    const size_t counts[2] = {MANY, 110};
    for (int k = 0; k < 2; k++) {
        mpcl_dataset *ds = NULL;
        if (k) labels[105] = 10;
        TU_ASSERT_OK(mpcl_dataset_from_memory(pixels, labels, counts[k], 2, 2, 11, &ds));
        p.train_data = ds;
        mpcl_trainer *tr = make(ctx, &p);
        mpcl_train_data_info info;
        mpcl_trainer_data_info(tr, &info);
        assert_int_equal(info.classes, 11);
        assert_false(info.classes_inferred);
        assert_int_equal(info.class_examples[10], 1);
        assert_int_equal(info.class_examples[0], k ? 11 : 200);
        assert_int_equal(info.rare_count, k ? 0 : 1);
        if (!k) assert_int_equal(info.rare[0], 10);
        mpcl_trainer_destroy(tr);
        mpcl_dataset_destroy(ds);
    }
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epoch_order),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_resume_float32),
        cmocka_unit_test(test_resume_mixed),
        cmocka_unit_test(test_resume_cosine),
        cmocka_unit_test(test_stop),
        cmocka_unit_test(test_cadence_and_partial_batch),
        cmocka_unit_test(test_step_wait_is_counted),
        cmocka_unit_test(test_evaluate),
        cmocka_unit_test(test_memory_data),
        cmocka_unit_test(test_data_load),
        cmocka_unit_test(test_batch_above_samples),
        cmocka_unit_test(test_class_info),
        cmocka_unit_test(test_gather_matches_host),
        cmocka_unit_test(test_resume_bfloat16),
        cmocka_unit_test(test_mixed_on_the_matrix_engine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
