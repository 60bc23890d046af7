/* Data parallel on real Fashion-MNIST subsets: two replicas train like one
 * replica on the same global batch (within a tolerance derived below: only
 * the order of the gradient sum differs), runs repeat bit for bit, an
 * overflow on one replica skips the step on all of them, checkpoints move
 * between world sizes, and the compressed all-reduce stays inside its bound.
 *
 * Run plainly, the replicas are local (two contexts: the two devices of
 * POCL_DEVICES="pthread pthread", which the suite sets, or one device twice).
 * Run under `mpirun -np 2` (test_dist_mpi), it also checks that the MPI
 * back-end gives bit for bit what the local one gives with the same world
 * size, and the overflow skip across ranks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/train_internal.h"
#include "testutil.h"

enum { MAX_STEPS = 64 };

typedef struct recorder {
    double loss[MAX_STEPS];
    size_t count;
    uint64_t stop_at;
    volatile sig_atomic_t stop;
} recorder;

static void on_report(void *user, const mpcl_train_report *r) {
    recorder *rec = user;
    if (rec->count < MAX_STEPS) rec->loss[rec->count] = r->loss;
    rec->count++;
    if (rec->stop_at && r->step == rec->stop_at) rec->stop = 1;
}

/* Shared by every test: the contexts of two replicas, and the MPI
 * communicator when launched by mpirun (MPI is initialised once). */
static mpcl_context *g_ctx[2];
static mpcl_dist *g_mpi;

static int setup(void **state) {
    (void)state;
    /* mixed_float16 on mpcl-mixed (f32 accumulation) everywhere: the
     * tolerances below assume it. Where fp16 math is verified (Intel's CPU
     * runtime) the plan would take HGEMM, whose f16 accumulation makes the
     * gradients depend on the summation order by far more; that path's
     * numerics are test_gemm's. */
    setenv("MPCL_FP16", "off", 1);
    g_ctx[0] = tu_context();
    /* The second replica: the next device of the same platform when there
     * is one, else the same device again (a context of its own). */
    const char *id0 = mpcl_context_device(g_ctx[0])->id;
    char id1[24];
    snprintf(id1, sizeof id1, "%s", id0);
    mpcl_device_list *list = NULL;
    TU_ASSERT_OK(mpcl_device_list_create(MPCL_ENUM_DEFAULT, &list));
    size_t plen = (size_t)(strchr(id0, ':') - id0) + 1;
    for (size_t i = 0; i < mpcl_device_list_count(list); i++) {
        const char *id = mpcl_device_list_get(list, i)->id;
        if (strncmp(id, id0, plen) == 0 && strcmp(id, id0) != 0) {
            snprintf(id1, sizeof id1, "%s", id);
            break;
        }
    }
    mpcl_device_list_destroy(list);
    mpcl_context_params cp = mpcl_context_default_params();
    cp.device = id1;
    TU_ASSERT_OK(mpcl_context_create(&cp, &g_ctx[1]));
    fprintf(stderr, "# replicas on %s and %s\n", id0, id1);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    mpcl_context_destroy(g_ctx[0]);
    mpcl_context_destroy(g_ctx[1]);
    return 0;
}

typedef struct run_cfg {
    mpcl_policy policy;
    size_t replicas; /* 1 or 2 local, or 0: MPI (one per rank) */
    mpcl_grad_compression compression;
    uint32_t epochs;
    bool cosine; /* a cosine lr schedule with warm-up instead of a constant lr */
} run_cfg;

/* 512 samples in global batches of 64: 8 steps an epoch, each replica 32
 * rows. SGD with momentum: the weights are linear in the gradients, which
 * the tolerances below lean on. */
static mpcl_train_params params_for(recorder *rec, const run_cfg *c) {
    mpcl_train_params p = mpcl_train_default_params();
    p.train_limit = 512;
    p.test_limit = 256;
    p.batch = 64;
    p.epochs = c->epochs ? c->epochs : 1;
    p.report_every = 1;
    p.model.hidden[0] = 16;
    p.model.policy = c->policy;
    p.model.optim = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    p.model.optim.lr = 0.05f;
    p.model.optim.momentum = 0.9f; /* as before SGD's default became Keras' 0 */
    if (c->cosine) {
        p.model.lr_schedule.kind = MPCL_LR_COSINE;
        p.model.lr_schedule.warmup_steps = 3;
        p.model.lr_schedule.alpha = 0.2;
    }
    p.seed = 7;
    p.on_report = on_report;
    p.user = rec;
    p.stop = &rec->stop;
    return p;
}

typedef struct run_out {
    recorder rec;
    float *state; /* masters, then the optimizer slots (tu_model_state) */
    size_t n, masters;
    mpcl_train_summary summary;
    double test_accuracy;
} run_out;

static mpcl_trainer *make_trainer(const run_cfg *c, recorder *rec, mpcl_dist **dist) {
    mpcl_train_params p = params_for(rec, c);
    *dist = NULL;
    if (c->replicas == 0) {
        /* MPI is initialised once; another communicator for another
         * compression shares it. */
        if (c->compression == mpcl_dist_compression(g_mpi))
            p.dist = g_mpi;
        else
            TU_ASSERT_OK(mpcl_dist_create_mpi(c->compression, dist));
        if (*dist) p.dist = *dist;
    } else if (c->replicas > 1 || c->compression != MPCL_GRAD_COMPRESSION_NONE) {
        TU_ASSERT_OK(mpcl_dist_create_local(c->replicas, c->compression, dist));
        p.dist = *dist;
        p.replica_ctx = g_ctx;
    }
    mpcl_trainer *tr = NULL;
    TU_ASSERT_OK(mpcl_trainer_create(g_ctx[0], &p, &tr));
    return tr;
}

static size_t master_count(mpcl_model *m) {
    size_t n = 0;
    for (size_t i = 0; i < mpcl_model_param_count(m); i++) n += mpcl_model_param(m, i)->count;
    return n;
}

static void finish(mpcl_trainer *tr, mpcl_dist *dist, run_out *o) {
    mpcl_trainer_summary(tr, &o->summary);
    o->state = tu_model_state(mpcl_trainer_model(tr), &o->n);
    o->masters = master_count(mpcl_trainer_model(tr));
    /* Every local replica holds the same state at the end. */
    for (size_t r = 1; mpcl_trainer_replica_model(tr, r); r++) {
        size_t n;
        float *other = tu_model_state(mpcl_trainer_replica_model(tr, r), &n);
        assert_int_equal(n, o->n);
        assert_memory_equal(other, o->state, n * sizeof *other);
        free(other);
    }
    o->test_accuracy = o->summary.test_accuracy;
    mpcl_trainer_destroy(tr);
    mpcl_dist_destroy(dist);
}

static void run(const run_cfg *c, run_out *o) {
    memset(o, 0, sizeof *o);
    mpcl_dist *dist;
    mpcl_trainer *tr = make_trainer(c, &o->rec, &dist);
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    finish(tr, dist, o);
}

static void free_out(run_out *o) {
    free(o->state);
}

/* Tolerances of "two replicas vs one" (and of resumes across world sizes).
 *
 * Each row's loss gradient is bit for bit the same in both runs (the loss
 * kernel divides by the global batch in both: mpcl_model_forward_slice), so
 * the gradient arenas differ only in how the per-row products are summed:
 *   float32: a GEMM over 64 rows against two over 32 plus one f32 addition;
 *     any two summation orders of B terms differ by at most
 *     2 gamma_B sum|terms|, gamma_B ~ B u, u = 2^-24: 2 * 64 * 2^-24 ~ 7.6e-6
 *     relative to the sum of |terms|.
 *   mixed_float16: each replica's partial is rounded to f16 (2^-11), their
 *     f32 sum is rounded to f16 again (2^-11), where one replica rounds
 *     once: at most 3 * 2^-11 ~ 1.5e-3 relative to the sum of |partials|.
 * SGD with momentum is linear in the gradients, so after T steps the master
 * weights differ by at most that relative amount of the sum of |updates|,
 * plus what the (slightly) different weights change in later gradients
 * (second order over 8 steps). We allow a factor 4 for that feedback and for
 * the sum of |updates| exceeding the net change max|w_T - w_0| that we can
 * measure: tol_w = 4 * rel * max|w_T - w_0|.
 * The per-step loss is a smooth function of the logits whose derivative is
 * bounded by 2 per row (|softmax - onehot| sums to at most 2); the logits
 * move with the weights (relative rel as above) and, in mixed_float16, are
 * themselves rounded to f16 (2^-11 relative, so a weight difference can flip
 * a rounding): tol_loss = 4 * rel * |loss| for float32, and 2 * 2^-11 *
 * |logit| <= 2^-10 * 10 for mixed_float16 (logits here stay below 10).
 * A gradient weighted by the slice instead of the global batch doubles
 * every update (the error is then ~max|w_T - w_0| itself), and a missing
 * sum halves it: both fail these by orders of magnitude. */
typedef struct tolerance {
    double rel, loss;
} tolerance;

static tolerance tolerance_of(mpcl_policy policy) {
    if (policy == MPCL_POLICY_FLOAT32) return (tolerance){2.0 * 64 * 0x1p-24, 0};
    return (tolerance){3 * 0x1p-11, 0x1p-10 * 10};
}

static void assert_close_runs(const char *what, const run_out *a, const run_out *b, const float *w0,
                              mpcl_policy policy) {
    tolerance t = tolerance_of(policy);
    assert_int_equal(a->rec.count, b->rec.count);
    double worst_loss = 0;
    for (size_t i = 0; i < a->rec.count && i < MAX_STEPS; i++) {
        double tol = t.loss > 0 ? t.loss : 4 * t.rel * fabs(a->rec.loss[i]);
        double d = fabs(a->rec.loss[i] - b->rec.loss[i]);
        if (d > worst_loss) worst_loss = d;
        if (!(d <= tol))
            fail_msg("%s: step %zu loss %.9g vs %.9g (|diff| %.3g > tol %.3g)", what, i + 1,
                     a->rec.loss[i], b->rec.loss[i], d, tol);
    }
    double moved = 0, worst = 0;
    for (size_t i = 0; i < a->masters; i++) {
        moved = fmax(moved, fabs((double)a->state[i] - (double)w0[i]));
        worst = fmax(worst, fabs((double)a->state[i] - (double)b->state[i]));
    }
    double tol_w = 4 * t.rel * moved;
    fprintf(stderr, "# %s: max|dloss| %.3g, max|dw| %.3g (tol %.3g, max|w_T - w_0| %.3g)\n", what,
            worst_loss, worst, tol_w, moved);
    assert_true(moved > 0);
    if (!(worst <= tol_w)) fail_msg("%s: weights differ by %.3g > tol %.3g", what, worst, tol_w);
    assert_int_equal(a->summary.skipped_steps, b->summary.skipped_steps);
}

/* The initial master weights of the run (Glorot from the seed: the same for
 * any world size). */
static float *initial_masters(const run_cfg *c) {
    recorder rec;
    memset(&rec, 0, sizeof rec);
    mpcl_dist *dist;
    run_cfg one = *c;
    one.replicas = 1;
    mpcl_trainer *tr = make_trainer(&one, &rec, &dist);
    size_t n;
    float *s = tu_model_state(mpcl_trainer_model(tr), &n);
    mpcl_trainer_destroy(tr);
    mpcl_dist_destroy(dist);
    return s;
}

static void two_vs_one(mpcl_policy policy, bool cosine) {
    run_cfg c1 = {policy, 1, MPCL_GRAD_COMPRESSION_NONE, 1, cosine}, c2 = c1;
    c2.replicas = 2;
    float *w0 = initial_masters(&c1);
    run_out one, two, again;
    run(&c1, &one);
    run(&c2, &two);
    assert_int_equal(two.summary.world_size, 2);
    assert_true(two.summary.allreduce_bytes_per_step > 0);
    assert_close_runs(mpcl_policy_name(policy), &one, &two, w0, policy);
    /* The same seed and world size: bit for bit. */
    run(&c2, &again);
    assert_memory_equal(two.rec.loss, again.rec.loss, sizeof two.rec.loss);
    assert_int_equal(two.n, again.n);
    assert_memory_equal(two.state, again.state, two.n * sizeof *two.state);
    free(w0);
    free_out(&one);
    free_out(&two);
    free_out(&again);
}

static void two_vs_one_float32(void **state) {
    (void)state;
    two_vs_one(MPCL_POLICY_FLOAT32, false);
}

/* A schedule sets the same lr on both replicas at every step (the weights
 * the replicas compare at the epoch's end would differ otherwise). */
static void two_vs_one_cosine(void **state) {
    (void)state;
    two_vs_one(MPCL_POLICY_FLOAT32, true);
}

static void two_vs_one_mixed_float16(void **state) {
    (void)state;
    two_vs_one(MPCL_POLICY_MIXED_FLOAT16, false);
}

/* ---- phases by hand: the overflow skip and the compression bound ---- */

typedef struct phase_set {
    mpcl_model *m[2];
    size_t n; /* replicas here */
    float x[8 * 32];
    int32_t y[8];
} phase_set;

/* Models of 32-16-4 on this process's replicas (two local, or one under
 * MPI), and a global batch of 8 random rows, the same on every replica and
 * rank (a fixed seed). */
static void phase_make(phase_set *s, mpcl_policy policy, size_t n) {
    memset(s, 0, sizeof *s);
    s->n = n;
    mpcl_model_params mp = mpcl_model_default_params();
    mp.inputs = 32;
    mp.hidden[0] = 16;
    mp.classes = 4;
    mp.max_batch = 8;
    mp.policy = policy;
    tu_rng rng = tu_rng_make(11);
    tu_fill_uniform(&rng, s->x, 8 * 32, -1.0f, 1.0f);
    for (int i = 0; i < 8; i++) s->y[i] = i % 4;
    for (size_t r = 0; r < n; r++) TU_ASSERT_OK(mpcl_model_create(g_ctx[r], &mp, &s->m[r]));
}

static void phase_free(phase_set *s) {
    for (size_t r = 0; r < s->n; r++) mpcl_model_destroy(s->m[r]);
}

/* Forward and backward of global replica g (of 2) on its rows [4g, 4g + 4)
 * of the global batch of 8, on local replica r. */
static void phase_grads(phase_set *s, size_t r, size_t g) {
    /* Buffers of max_batch rows, as the trainer's (the GEMM may read whole
     * tiles past the rows), seen as 4-row views. */
    mpcl_tensor *x = tu_tensor(g_ctx[r], mpcl_model_plan(s->m[r])->storage, 8, 32),
                *y = tu_tensor(g_ctx[r], MPCL_DTYPE_I32, 8, 1);
    mpcl_tensor xv = mpcl__tensor_rows(x, 4), yv = mpcl__tensor_rows(y, 4);
    TU_ASSERT_OK(mpcl_tensor_upload_f32(&xv, s->x + 4 * 32 * g, 4 * 32));
    TU_ASSERT_OK(mpcl_tensor_upload_i32(&yv, s->y + 4 * g, 4));
    TU_ASSERT_OK(mpcl_model_forward_slice(s->m[r], &xv, &yv, 8));
    TU_ASSERT_OK(mpcl_model_backward(s->m[r]));
    TU_ASSERT_OK(mpcl_context_finish(g_ctx[r]));
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
}

static void poke_inf(mpcl_model *m) {
    mpcl_tensor *g = mpcl_model_grad_arena(m);
    size_t n = mpcl_tensor_count(g);
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    TU_ASSERT_OK(mpcl_tensor_download_f32(g, v, n));
    v[3] = INFINITY;
    TU_ASSERT_OK(mpcl_tensor_upload_f32(g, v, n));
    free(v);
}

/* One step of this process's replicas (global replica `poke` gets an inf in
 * its gradient; none when poke >= 2), then per replica: the loss-scale
 * state after apply, and whether the weights changed. */
static void phase_step(phase_set *s, mpcl_dist *d, size_t first, size_t poke,
                       mpcl_loss_scale_state *ls, bool *changed) {
    uint64_t before[2], after;
    for (size_t r = 0; r < s->n; r++) {
        TU_ASSERT_OK(mpcl_dist_weights_checksum(s->m[r], &before[r]));
        phase_grads(s, r, first + r);
        if (first + r == poke) poke_inf(s->m[r]);
    }
    TU_ASSERT_OK(mpcl_dist_allreduce_grads(d, s->m));
    for (size_t r = 0; r < s->n; r++) {
        TU_ASSERT_OK(mpcl_model_apply(s->m[r]));
        TU_ASSERT_OK(mpcl_loss_scale_read(g_ctx[r], mpcl_model_loss_scale(s->m[r]), &ls[r]));
        TU_ASSERT_OK(mpcl_dist_weights_checksum(s->m[r], &after));
        changed[r] = after != before[r];
    }
}

/* One replica's gradient overflows: after the all-reduce every replica
 * skips the step (weights untouched) and halves its scale; the next clean
 * step applies everywhere, and the replicas still agree bit for bit. */
static void overflow_skips_everywhere(mpcl_dist *d, size_t n, size_t first) {
    phase_set s;
    phase_make(&s, MPCL_POLICY_MIXED_FLOAT16, n);
    mpcl_loss_scale_state ls0, ls[2];
    bool changed[2];
    TU_ASSERT_OK(mpcl_loss_scale_read(g_ctx[0], mpcl_model_loss_scale(s.m[0]), &ls0));
    phase_step(&s, d, first, 1, ls, changed);
    for (size_t r = 0; r < n; r++) {
        assert_int_equal(ls[r].skipped_steps, 1);
        assert_true(ls[r].scale == ls0.scale / 2);
        assert_false(changed[r]);
    }
    phase_step(&s, d, first, 2, ls, changed);
    for (size_t r = 0; r < n; r++) {
        assert_int_equal(ls[r].skipped_steps, 1);
        assert_true(changed[r]);
    }
    TU_ASSERT_OK(mpcl_dist_check_weights(d, s.m));
    phase_free(&s);
}

static void overflow_local(void **state) {
    (void)state;
    mpcl_dist *d;
    TU_ASSERT_OK(mpcl_dist_create_local(2, MPCL_GRAD_COMPRESSION_NONE, &d));
    overflow_skips_everywhere(d, 2, 0);
    mpcl_dist_destroy(d);
}

/* A replica whose weights drifted is named by the epoch check. */
static void drift_is_named(void **state) {
    (void)state;
    mpcl_dist *d;
    TU_ASSERT_OK(mpcl_dist_create_local(2, MPCL_GRAD_COMPRESSION_NONE, &d));
    phase_set s;
    phase_make(&s, MPCL_POLICY_FLOAT32, 2);
    TU_ASSERT_OK(mpcl_dist_check_weights(d, s.m));
    float w[16];
    TU_ASSERT_OK(mpcl_model_read_param(s.m[1], 1, MPCL_OPTIM_SLOT_MASTER, w, 16));
    w[5] = nextafterf(w[5], 1.0f);
    TU_ASSERT_OK(mpcl_model_write_param(s.m[1], 1, MPCL_OPTIM_SLOT_MASTER, w, 16));
    assert_int_equal(mpcl_dist_check_weights(d, s.m), MPCL_ERR_DIST);
    assert_non_null(strstr(mpcl_context_errmsg(g_ctx[0]), "replica 1"));
    phase_free(&s);
    mpcl_dist_destroy(d);
}

/* x rounded to the wire's 16 bits and back, by half.h's host conversions. */
static float wire_round(mpcl_grad_compression c, float x) {
    return c == MPCL_GRAD_COMPRESSION_FP16 ? mpcl_f16_to_f32(mpcl_f32_to_f16(x))
                                           : mpcl_bf16_to_f32(mpcl_f32_to_bf16(x));
}

/* The arena's storage dtype of `policy` holding x (f32: x itself). */
static float storage_round(mpcl_policy policy, float x) {
    return policy == MPCL_POLICY_MIXED_FLOAT16    ? mpcl_f16_to_f32(mpcl_f32_to_f16(x))
           : policy == MPCL_POLICY_MIXED_BFLOAT16 ? mpcl_bf16_to_f32(mpcl_f32_to_bf16(x))
                                                  : x;
}

/* The compressed sum of two real gradients (in `policy`'s arena) against
 * their exact sum (in double), element by element, inside
 * mpcl_dist_compression_bound; and the bound is not vacuous: the compressed
 * sum differs from the exact one somewhere. Bit for bit, it is the sum the
 * host's conversions give: each contribution rounded to the wire, their f32
 * sum rounded again, then stored in the arena's dtype (the device rounds and
 * widens where the arena is not in the wire's dtype). */
static void compression_bound(mpcl_policy policy, mpcl_grad_compression c) {
    mpcl_dist *d;
    TU_ASSERT_OK(mpcl_dist_create_local(2, c, &d));
    phase_set s;
    phase_make(&s, policy, 2);
    size_t n = mpcl_model_arena_elements(s.m[0]);
    float *g[2], *got = malloc(n * sizeof *got);
    assert_non_null(got);
    for (size_t r = 0; r < 2; r++) {
        phase_grads(&s, r, r);
        g[r] = malloc(n * sizeof *g[r]);
        assert_non_null(g[r]);
        TU_ASSERT_OK(mpcl_tensor_download_f32(mpcl_model_grad_arena(s.m[r]), g[r], n));
    }
    TU_ASSERT_OK(mpcl_dist_allreduce_grads(d, s.m));
    TU_ASSERT_OK(mpcl_tensor_download_f32(mpcl_model_grad_arena(s.m[1]), got, n));
    size_t differ = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double exact = (double)g[0][i] + (double)g[1][i];
        double bound =
            mpcl_dist_compression_bound(c, 2, fabs((double)g[0][i]) + fabs((double)g[1][i]));
        double err = fabs((double)got[i] - exact);
        worst = fmax(worst, bound > 0 ? err / bound : 0);
        if (!(err <= bound))
            fail_msg("%s: element %zu: %.9g vs exact %.9g (error %.3g > bound %.3g)",
                     mpcl_grad_compression_name(c), i, (double)got[i], exact, err, bound);
        differ += got[i] != (float)exact;
        float want =
            storage_round(policy, wire_round(c, wire_round(c, g[0][i]) + wire_round(c, g[1][i])));
        if (memcmp(&got[i], &want, sizeof want) != 0)
            fail_msg("%s: element %zu: %.9g, the host's conversions give %.9g",
                     mpcl_grad_compression_name(c), i, (double)got[i], (double)want);
    }
    fprintf(stderr, "# %s: %zu of %zu elements rounded, worst error %.2f of the bound\n",
            mpcl_grad_compression_name(c), differ, n, worst);
    assert_true(differ > 0);
    free(g[0]);
    free(g[1]);
    free(got);
    phase_free(&s);
    mpcl_dist_destroy(d);
}

static void compression_fp16(void **state) {
    (void)state;
    compression_bound(MPCL_POLICY_FLOAT32, MPCL_GRAD_COMPRESSION_FP16);
}

static void compression_bf16(void **state) {
    (void)state;
    compression_bound(MPCL_POLICY_FLOAT32, MPCL_GRAD_COMPRESSION_BF16);
}

/* f16 arenas: the same wire (nothing to cast) and bf16's (cast both ways). */
static void compression_of_f16_arenas(void **state) {
    (void)state;
    compression_bound(MPCL_POLICY_MIXED_FLOAT16, MPCL_GRAD_COMPRESSION_FP16);
    compression_bound(MPCL_POLICY_MIXED_FLOAT16, MPCL_GRAD_COMPRESSION_BF16);
}

/* Accuracy holds with compression on a short run: 3 epochs of 2 replicas
 * in float32, test accuracy on 256 samples within 3 points (8 samples) of
 * the uncompressed run's. */
static void compression_accuracy(void **state) {
    (void)state;
    run_cfg c = {MPCL_POLICY_FLOAT32, 2, MPCL_GRAD_COMPRESSION_NONE, 3, false};
    run_out plain;
    run(&c, &plain);
    for (int k = MPCL_GRAD_COMPRESSION_FP16; k <= MPCL_GRAD_COMPRESSION_BF16; k++) {
        c.compression = (mpcl_grad_compression)k;
        run_out o;
        run(&c, &o);
        fprintf(stderr, "# %s: test accuracy %.4f, uncompressed %.4f\n",
                mpcl_grad_compression_name(c.compression), o.test_accuracy, plain.test_accuracy);
        assert_true(plain.test_accuracy > 0.5);
        assert_true(fabs(o.test_accuracy - plain.test_accuracy) <= 0.03);
        free_out(&o);
    }
    free_out(&plain);
}

/* A checkpoint written with 2 replicas resumes with 1, and the reverse: the
 * run stops after step 4, saves, and a trainer of the other world size
 * loads it and finishes; the loaded state is the saved one bit for bit, and
 * the finished run is within the tolerance of the uninterrupted run. */
static void resume_across(size_t from, size_t to) {
    char dir[] = "/tmp/mpcl-test-dist-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char file[128];
    snprintf(file, sizeof file, "%s/ckpt.safetensors", dir);
    run_cfg cf = {MPCL_POLICY_FLOAT32, from, MPCL_GRAD_COMPRESSION_NONE, 1, false}, ct = cf;
    ct.replicas = to;
    float *w0 = initial_masters(&cf);
    run_out full;
    run(&cf, &full);

    run_out half;
    memset(&half, 0, sizeof half);
    half.rec.stop_at = 4;
    mpcl_dist *dist;
    mpcl_trainer *tr = make_trainer(&cf, &half.rec, &dist);
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    TU_ASSERT_OK(mpcl_trainer_save(tr, file));
    size_t nsaved;
    float *saved = tu_model_state(mpcl_trainer_model(tr), &nsaved);
    mpcl_trainer_destroy(tr);
    mpcl_dist_destroy(dist);

    run_out rest;
    memset(&rest, 0, sizeof rest);
    tr = make_trainer(&ct, &rest.rec, &dist);
    TU_ASSERT_OK(mpcl_trainer_load(tr, file));
    for (size_t r = 0; mpcl_trainer_replica_model(tr, r); r++) {
        size_t n;
        float *loaded = tu_model_state(mpcl_trainer_replica_model(tr, r), &n);
        assert_int_equal(n, nsaved);
        assert_memory_equal(loaded, saved, n * sizeof *loaded);
        free(loaded);
    }
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    finish(tr, dist, &rest);
    assert_int_equal(rest.summary.steps, 8);
    /* Steps 1-4 from the first run, 5-8 from the resumed one. */
    run_out joined = rest;
    memcpy(joined.rec.loss, half.rec.loss, 4 * sizeof(double));
    memcpy(joined.rec.loss + 4, rest.rec.loss, 4 * sizeof(double));
    joined.rec.count = 8;
    char what[64];
    snprintf(what, sizeof what, "resume %zu -> %zu replicas", from, to);
    assert_close_runs(what, &full, &joined, w0, MPCL_POLICY_FLOAT32);
    free(saved);
    free(w0);
    free_out(&full);
    free_out(&rest);
    unlink(file);
    rmdir(dir);
}

static void resume_two_to_one(void **state) {
    (void)state;
    resume_across(2, 1);
}

static void resume_one_to_two(void **state) {
    (void)state;
    resume_across(1, 2);
}

/* ---- under mpirun -np 2 ---- */

/* The MPI run of two ranks against the local run of two replicas (which
 * rank 0 also makes, in-process): bit for bit, with and without
 * compression; and against one replica, within the tolerance. */
static void mpi_matches_local(mpcl_policy policy, mpcl_grad_compression c) {
    run_cfg cm = {policy, 0, c, 1, false}, cl = cm, c1 = cm;
    cl.replicas = 2;
    c1.replicas = 1;
    c1.compression = MPCL_GRAD_COMPRESSION_NONE;
    run_out mpi;
    run(&cm, &mpi);
    assert_int_equal(mpi.summary.world_size, 2);
    if (mpcl_dist_rank(g_mpi) != 0) {
        free_out(&mpi);
        return;
    }
    run_out local;
    run(&cl, &local);
    assert_memory_equal(mpi.rec.loss, local.rec.loss, sizeof mpi.rec.loss);
    assert_memory_equal(mpi.state, local.state, mpi.n * sizeof *mpi.state);
    if (c == MPCL_GRAD_COMPRESSION_NONE) {
        float *w0 = initial_masters(&c1);
        run_out one;
        run(&c1, &one);
        assert_close_runs("mpirun -np 2 vs one replica", &one, &mpi, w0, policy);
        free_out(&one);
        free(w0);
    }
    free_out(&local);
    free_out(&mpi);
}

static void mpi_float32(void **state) {
    (void)state;
    mpi_matches_local(MPCL_POLICY_FLOAT32, MPCL_GRAD_COMPRESSION_NONE);
}
static void mpi_mixed_float16(void **state) {
    (void)state;
    mpi_matches_local(MPCL_POLICY_MIXED_FLOAT16, MPCL_GRAD_COMPRESSION_NONE);
}
static void mpi_fp16_compressed(void **state) {
    (void)state;
    mpi_matches_local(MPCL_POLICY_FLOAT32, MPCL_GRAD_COMPRESSION_FP16);
}

static void mpi_overflow(void **state) {
    (void)state;
    overflow_skips_everywhere(g_mpi, 1, mpcl_dist_rank(g_mpi));
}

/* Rank 0 alone writes checkpoints. */
static void mpi_rank0_saves(void **state) {
    (void)state;
    char file[128];
    snprintf(file, sizeof file, "/tmp/mpcl-test-dist-mpi-%ld.safetensors", (long)getppid());
    run_cfg c = {MPCL_POLICY_FLOAT32, 0, MPCL_GRAD_COMPRESSION_NONE, 1, false};
    recorder rec;
    memset(&rec, 0, sizeof rec);
    mpcl_dist *dist;
    mpcl_trainer *tr = make_trainer(&c, &rec, &dist);
    /* Rank 1 "saves" first: it must not write. */
    if (mpcl_dist_rank(g_mpi) == 1) {
        TU_ASSERT_OK(mpcl_trainer_save(tr, file));
        assert_int_equal(access(file, F_OK), -1);
    }
    double sync = 0;
    TU_ASSERT_OK(mpcl_dist_sum_f64(g_mpi, g_ctx[0], &sync, 1));
    if (mpcl_dist_rank(g_mpi) == 0) {
        TU_ASSERT_OK(mpcl_trainer_save(tr, file));
        assert_int_equal(access(file, F_OK), 0);
        unlink(file);
    }
    TU_ASSERT_OK(mpcl_dist_sum_f64(g_mpi, g_ctx[0], &sync, 1));
    mpcl_trainer_destroy(tr);
}

int main(void) {
    if (mpcl_dist_mpi_launched()) {
        if (!mpcl_dist_mpi_built()) {
            fprintf(stderr, "# built without MPI: skipped\n");
            return 77;
        }
        if (mpcl_dist_create_mpi(MPCL_GRAD_COMPRESSION_NONE, &g_mpi) != MPCL_OK) {
            fprintf(stderr, "MPI: %s\n", mpcl_errmsg());
            return 1;
        }
        if (mpcl_dist_world_size(g_mpi) != 2) {
            fprintf(stderr, "run with mpirun -np 2\n");
            return 1;
        }
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(mpi_float32),         cmocka_unit_test(mpi_mixed_float16),
            cmocka_unit_test(mpi_fp16_compressed), cmocka_unit_test(mpi_overflow),
            cmocka_unit_test(mpi_rank0_saves),
        };
        int rc = cmocka_run_group_tests(tests, setup, teardown);
        mpcl_dist_destroy(g_mpi);
        return rc;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_vs_one_float32),   cmocka_unit_test(two_vs_one_mixed_float16),
        cmocka_unit_test(two_vs_one_cosine),    cmocka_unit_test(overflow_local),
        cmocka_unit_test(drift_is_named),       cmocka_unit_test(compression_fp16),
        cmocka_unit_test(compression_bf16),     cmocka_unit_test(compression_of_f16_arenas),
        cmocka_unit_test(compression_accuracy), cmocka_unit_test(resume_two_to_one),
        cmocka_unit_test(resume_one_to_two),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
