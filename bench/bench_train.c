/* mpcl-bench train: training throughput of the 784-128-10 MLP (batch 128) per
 * policy, the time of one step split by phase, and launches per step.
 *
 * The split times each phase alone, on the same shapes, dtypes and GEMM path
 * as the step, back to back for a few hundred repetitions with one finish at
 * the end: GEMM (the five GEMMs), elementwise (batch gather, bias+activation
 * forward and backward, loss, bias gradients) and optimizer (non-finite check
 * over the gradient arena, update, loss-scale update). optimizer_copy_us is the
 * device copying as many bytes as the optimizer reads and writes, timed in the
 * same run: the optimizer's memory-speed floor. What the whole step costs
 * beyond their sum is
 * launch overhead and the host's enqueueing. A step has no host wait: it
 * never reads the device (the "host waits" column counts blocking calls made
 * inside the timed steps: 0 by construction, checked by the launch counter's
 * twin, mpcl_context_sync_count). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "mpcl/cl_interop.h"

enum { IN = 784, HID = 128, OUT = 10, B = 128 };

typedef struct phase_times {
    double step_us, gemm_us, elementwise_us, optimizer_us, optimizer_copy_us, host_enqueue_us;
    double samples_per_s;
    double launches_per_step, syncs_per_step;
} phase_times;

static mpcl_tensor *make(mpcl_context *ctx, mpcl_dtype dtype, size_t rows, size_t cols) {
    mpcl_tensor *t = NULL;
    if (mpcl_tensor_create(ctx, dtype, rows, cols, &t) != MPCL_OK) return NULL;
    return t;
}

/* The training set's first 12800 images, so that every policy sees the same
 * batches whatever the data folder holds. */
static mpcl_status load_data(mpcl_dataset **out) {
    mpcl_dataset *all = NULL;
    mpcl_status st = mpcl_idx_load(NULL, "train", &all);
    if (st != MPCL_OK) return st;
    size_t n = mpcl_dataset_count(all) < 12800 ? mpcl_dataset_count(all) : 12800;
    st = mpcl_dataset_subset(all, n, out);
    mpcl_dataset_destroy(all);
    return st;
}

/* Seconds per repetition of fn over `reps` repetitions (one finish at the end). */
typedef mpcl_status (*phase_fn)(void *state);
static double time_phase(mpcl_context *ctx, phase_fn fn, void *state, int reps) {
    if (fn(state) != MPCL_OK || mpcl_context_finish(ctx) != MPCL_OK) return NAN;
    double t0 = bench_now_s();
    for (int i = 0; i < reps; i++)
        if (fn(state) != MPCL_OK) return NAN;
    if (mpcl_context_finish(ctx) != MPCL_OK) return NAN;
    return (bench_now_s() - t0) / reps;
}

typedef struct step_state {
    mpcl_context *ctx;
    mpcl_model *model;
    mpcl_device_dataset *data;
    mpcl_tensor *order, *x, *y;
    size_t count, next;
    /* phase operands */
    mpcl_gemm_path path;
    mpcl_tensor *w1, *w2, *h, *logits, *dlogits, *dh, *dw1, *dw2, *b1, *b2, *db1, *db2, *stats;
    /* The optimizer's arenas, as large as the model's. */
    mpcl_tensor *master, *working, *grads;
    mpcl_optimizer *opt;
    mpcl_loss_scale *ls;
    /* The copy: half the optimizer's traffic each way. */
    mpcl_tensor *copy_src, *copy_dst;
} step_state;

static mpcl_status full_step(void *p) {
    step_state *s = p;
    mpcl_status st = mpcl_device_dataset_gather(s->ctx, s->data, s->order, s->next, s->x, s->y);
    if (st == MPCL_OK) st = mpcl_model_train_step(s->model, s->x, s->y);
    s->next = (s->next + B) % (s->count - B + 1);
    return st;
}

static mpcl_status gemm_phase(void *p) {
    step_state *s = p;
    mpcl_context *c = s->ctx;
    mpcl_status st = mpcl_gemm(c, s->path, false, false, 1, s->x, s->w1, 0, s->h);
    if (st == MPCL_OK) st = mpcl_gemm(c, s->path, false, false, 1, s->h, s->w2, 0, s->logits);
    if (st == MPCL_OK) st = mpcl_gemm(c, s->path, true, false, 1, s->h, s->dlogits, 0, s->dw2);
    if (st == MPCL_OK) st = mpcl_gemm(c, s->path, false, true, 1, s->dlogits, s->w2, 0, s->dh);
    if (st == MPCL_OK) st = mpcl_gemm(c, s->path, true, false, 1, s->x, s->dh, 0, s->dw1);
    return st;
}

static mpcl_status elementwise_phase(void *p) {
    step_state *s = p;
    mpcl_context *c = s->ctx;
    mpcl_status st = mpcl_device_dataset_gather(c, s->data, s->order, 0, s->x, s->y);
    if (st == MPCL_OK) st = mpcl_bias_act_forward(c, s->h, s->h, s->b1, MPCL_ACT_RELU);
    if (st == MPCL_OK)
        st = mpcl_bias_act_forward(c, s->logits, s->logits, s->b2, MPCL_ACT_IDENTITY);
    if (st == MPCL_OK)
        st = mpcl_softmax_xent_forward_backward(c, s->stats, s->dlogits, s->logits, s->y,
                                                s->ls ? mpcl_loss_scale_tensor(s->ls) : NULL);
    if (st == MPCL_OK) st = mpcl_bias_grad(c, s->db2, s->dlogits);
    if (st == MPCL_OK) st = mpcl_bias_act_backward(c, s->dh, s->dh, s->h, MPCL_ACT_RELU);
    if (st == MPCL_OK) st = mpcl_bias_grad(c, s->db1, s->dh);
    return st;
}

static mpcl_status optimizer_phase(void *p) {
    step_state *s = p;
    mpcl_context *c = s->ctx;
    mpcl_status st = MPCL_OK;
    if (s->ls) st = mpcl_loss_scale_check(c, s->ls, &s->grads, 1);
    /* As the model's step: the scale update in the optimizer's last launch. */
    if (st == MPCL_OK) st = mpcl_optimizer_step_scaled(c, s->opt, s->grads, s->ls);
    return st;
}

static mpcl_status copy_phase(void *p) {
    step_state *s = p;
    cl_int err = clEnqueueCopyBuffer(mpcl_context_cl_queue(s->ctx), mpcl_tensor_cl_mem(s->copy_src),
                                     mpcl_tensor_cl_mem(s->copy_dst), 0, 0,
                                     mpcl_tensor_bytes(s->copy_src), 0, NULL, NULL);
    return err == CL_SUCCESS ? MPCL_OK : MPCL_ERR_OPENCL;
}

static mpcl_status setup(step_state *s, mpcl_context *ctx, const mpcl_dataset *ds,
                         mpcl_policy policy) {
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    mpcl_model_params mp = mpcl_model_default_params();
    mp.policy = policy;
    mpcl_status st = mpcl_model_create(ctx, &mp, &s->model);
    if (st != MPCL_OK) return st;
    const mpcl_plan *plan = mpcl_model_plan(s->model);
    mpcl_dtype d = plan->storage, f = MPCL_DTYPE_F32;
    s->path = plan->gemm;
    s->count = mpcl_dataset_count(ds);
    int32_t *order = malloc(s->count * sizeof *order);
    if (!order) return MPCL_ERR_OUT_OF_MEMORY;
    mpcl_iota_indices(order, s->count);
    s->order = make(ctx, MPCL_DTYPE_I32, s->count, 1);
    st = s->order ? mpcl_tensor_upload_i32(s->order, order, s->count) : MPCL_ERR_OUT_OF_MEMORY;
    free(order);
    if (st == MPCL_OK) st = mpcl_device_dataset_create(ctx, ds, &s->data);
    if (st != MPCL_OK) return st;
    s->x = make(ctx, d, B, IN);
    s->y = make(ctx, MPCL_DTYPE_I32, B, 1);
    s->w1 = make(ctx, d, IN, HID);
    s->w2 = make(ctx, d, HID, OUT);
    s->h = make(ctx, d, B, HID);
    s->dh = make(ctx, d, B, HID);
    s->logits = make(ctx, d, B, OUT);
    s->dlogits = make(ctx, d, B, OUT);
    s->dw1 = make(ctx, d, IN, HID);
    s->dw2 = make(ctx, d, HID, OUT);
    s->b1 = make(ctx, f, 1, HID);
    s->b2 = make(ctx, f, 1, OUT);
    s->db1 = make(ctx, d, 1, HID);
    s->db2 = make(ctx, d, 1, OUT);
    if (!s->x || !s->y || !s->w1 || !s->w2 || !s->h || !s->dh || !s->logits || !s->dlogits ||
        !s->dw1 || !s->dw2 || !s->b1 || !s->b2 || !s->db1 || !s->db2)
        return MPCL_ERR_OUT_OF_MEMORY;
    if ((st = mpcl_xent_stats_create(ctx, &s->stats)) != MPCL_OK) return st;
    if (plan->loss_scaling) {
        mpcl_loss_scale_params lp = mpcl_loss_scale_default_params();
        if ((st = mpcl_loss_scale_create(ctx, &lp, &s->ls)) != MPCL_OK) return st;
    }
    size_t n = mpcl_model_arena_elements(s->model);
    s->master = make(ctx, f, 1, n);
    s->working = make(ctx, d, 1, n);
    s->grads = make(ctx, d, 1, n);
    /* Adam reads master, m, v (f32) and the gradient, and writes master, m, v
     * and the working copy: 24 + 2 * storage bytes per element. A copy of X
     * bytes reads X and writes X. */
    size_t traffic = n * (24 + 2 * mpcl_dtype_size(d));
    s->copy_src = make(ctx, MPCL_DTYPE_U8, 1, traffic / 2);
    s->copy_dst = make(ctx, MPCL_DTYPE_U8, 1, traffic / 2);
    if (!s->master || !s->working || !s->grads || !s->copy_src || !s->copy_dst)
        return MPCL_ERR_OUT_OF_MEMORY;
    mpcl_optim_params op = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    return mpcl_optimizer_create(ctx, &op, s->master, s->working, &s->opt);
}

static void teardown(step_state *s) {
    mpcl_optimizer_destroy(s->opt);
    mpcl_tensor *all[] = {s->order, s->x,        s->y,       s->w1,    s->w2,     s->h,
                          s->dh,    s->logits,   s->dlogits, s->dw1,   s->dw2,    s->b1,
                          s->b2,    s->db1,      s->db2,     s->stats, s->master, s->working,
                          s->grads, s->copy_src, s->copy_dst};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    mpcl_loss_scale_destroy(s->ls);
    mpcl_device_dataset_destroy(s->data);
    mpcl_model_destroy(s->model);
}

static mpcl_status measure(mpcl_context *ctx, const mpcl_dataset *ds, mpcl_policy policy,
                           phase_times *t) {
    step_state s;
    mpcl_status st = setup(&s, ctx, ds, policy);
    const int reps = 300;
    if (st == MPCL_OK) {
        /* Launches and blocking calls per step, counted over the timed steps. */
        for (int i = 0; i < 10 && st == MPCL_OK; i++) st = full_step(&s); /* warm-up */
        if (st == MPCL_OK) st = mpcl_context_finish(ctx);
        uint64_t l0 = mpcl_context_launch_count(ctx), s0 = mpcl_context_sync_count(ctx);
        double t0 = bench_now_s(), enqueue = 0;
        for (int i = 0; i < reps && st == MPCL_OK; i++) {
            double e0 = bench_now_s();
            st = full_step(&s);
            enqueue += bench_now_s() - e0;
        }
        t->launches_per_step = (double)(mpcl_context_launch_count(ctx) - l0) / reps;
        t->syncs_per_step = (double)(mpcl_context_sync_count(ctx) - s0) / reps;
        if (st == MPCL_OK) st = mpcl_context_finish(ctx);
        double dt = (bench_now_s() - t0) / reps;
        t->step_us = dt * 1e6;
        t->host_enqueue_us = enqueue / reps * 1e6;
        t->samples_per_s = B / dt;
    }
    if (st == MPCL_OK) {
        t->gemm_us = time_phase(ctx, gemm_phase, &s, reps) * 1e6;
        t->elementwise_us = time_phase(ctx, elementwise_phase, &s, reps) * 1e6;
        t->optimizer_us = time_phase(ctx, optimizer_phase, &s, reps) * 1e6;
        t->optimizer_copy_us = time_phase(ctx, copy_phase, &s, reps) * 1e6;
    }
    teardown(&s);
    return st;
}

/* The policies both train commands time, float32 (the reference) first. */
static const mpcl_policy policies[] = {MPCL_POLICY_FLOAT32, MPCL_POLICY_MIXED_FLOAT16,
                                       MPCL_POLICY_MIXED_BFLOAT16};
enum { NP = sizeof policies / sizeof policies[0] };

int bench_cmd_train(mpcl_context *ctx, const bench_opts *opts) {
    mpcl_dataset *ds = NULL;
    mpcl_status st = load_data(&ds);
    if (st != MPCL_OK) return bench_fail("loading Fashion-MNIST", st);
    phase_times t[NP];
    mpcl_plan plans[NP];
    bool ran[NP] = {false};
    for (int i = 0; i < NP; i++) {
        plans[i] = mpcl_context_plan(ctx, policies[i]);
        if (!plans[i].usable) continue;
        memset(&t[i], 0, sizeof t[i]);
        if ((st = measure(ctx, ds, policies[i], &t[i])) != MPCL_OK) {
            mpcl_dataset_destroy(ds);
            return bench_fail("timing a training step", st);
        }
        ran[i] = true;
    }
    mpcl_dataset_destroy(ds);
    if (opts->json) {
        jsonw w;
        jsonw_init(&w, stdout);
        jsonw_array_begin(&w);
        for (int i = 0; i < NP; i++) {
            if (!ran[i]) continue;
            jsonw_object_begin(&w);
            jsonw_kv_string(&w, "policy", mpcl_policy_name(policies[i]));
            jsonw_kv_string(&w, "storage", mpcl_dtype_name(plans[i].storage));
            jsonw_kv_string(&w, "gemm", mpcl_gemm_path_name(plans[i].gemm));
            jsonw_kv_number(&w, "samples_per_s", t[i].samples_per_s);
            jsonw_kv_number(&w, "step_us", t[i].step_us);
            jsonw_kv_number(&w, "gemm_us", t[i].gemm_us);
            jsonw_kv_number(&w, "elementwise_us", t[i].elementwise_us);
            jsonw_kv_number(&w, "optimizer_us", t[i].optimizer_us);
            jsonw_kv_number(&w, "optimizer_copy_us", t[i].optimizer_copy_us);
            jsonw_kv_number(&w, "host_enqueue_us", t[i].host_enqueue_us);
            jsonw_kv_number(&w, "host_waits_per_step", t[i].syncs_per_step);
            jsonw_kv_number(&w, "launches_per_step", t[i].launches_per_step);
            jsonw_object_end(&w);
        }
        jsonw_array_end(&w);
        return 0;
    }
    printf("784-128-10 MLP, batch 128, Adam; one step = gather, forward, loss, backward, update\n");
    printf("%-14s %-8s %-11s %11s %9s %9s %12s %10s %10s %10s %10s %9s\n", "policy", "storage",
           "gemm", "samples/s", "step us", "GEMM us", "elementw us", "optim us", "copy us",
           "enqueue us", "host waits", "launches");
    for (int i = 0; i < NP; i++) {
        if (!ran[i]) {
            printf("%-14s not usable here: %s\n", mpcl_policy_name(policies[i]), plans[i].reason);
            continue;
        }
        printf("%-14s %-8s %-11s %11.0f %9.0f %9.0f %12.0f %10.0f %10.0f %10.0f %10.0f %9.0f\n",
               mpcl_policy_name(policies[i]), mpcl_dtype_name(plans[i].storage),
               mpcl_gemm_path_name(plans[i].gemm), t[i].samples_per_s, t[i].step_us, t[i].gemm_us,
               t[i].elementwise_us, t[i].optimizer_us, t[i].optimizer_copy_us, t[i].host_enqueue_us,
               t[i].syncs_per_step, t[i].launches_per_step);
    }
    printf(
        "phases are timed alone on the same shapes; step - (GEMM + elementwise + optim) is\n"
        "launch overhead. copy: the device copying the optimizer's bytes (its floor).\n"
        "host waits: blocking calls inside a step (0: no host round trip).\n");
    return 0;
}

/* The three policies' whole steps interleaved: ROUNDS rounds, each timing
 * ROUND_STEPS steps of every policy in turn; per policy the best round and
 * the median round. The ratio of the 16-bit steps to float32 is then taken
 * at the same moments of a machine whose speed moves within a minute, where
 * `train` times one policy after the other. */
#define ROUNDS 25
#define ROUND_STEPS 40

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int bench_cmd_train_rounds(mpcl_context *ctx, const bench_opts *opts) {
    mpcl_dataset *ds = NULL;
    mpcl_status st = load_data(&ds);
    if (st != MPCL_OK) return bench_fail("loading Fashion-MNIST", st);
    step_state s[NP];
    bool ready[NP] = {false};
    double rate[NP][ROUNDS];
    for (int i = 0; i < NP && st == MPCL_OK; i++) {
        if (!mpcl_context_plan(ctx, policies[i]).usable) continue;
        if ((st = setup(&s[i], ctx, ds, policies[i])) != MPCL_OK) break;
        ready[i] = true;
        for (int k = 0; k < 10 && st == MPCL_OK; k++) st = full_step(&s[i]); /* warm-up */
    }
    for (int r = 0; r < ROUNDS && st == MPCL_OK; r++)
        for (int i = 0; i < NP && st == MPCL_OK; i++) {
            if (!ready[i]) continue;
            if ((st = mpcl_context_finish(ctx)) != MPCL_OK) break;
            double t0 = bench_now_s();
            for (int k = 0; k < ROUND_STEPS && st == MPCL_OK; k++) st = full_step(&s[i]);
            if (st == MPCL_OK) st = mpcl_context_finish(ctx);
            rate[i][r] = B * ROUND_STEPS / (bench_now_s() - t0);
        }
    for (int i = 0; i < NP; i++)
        if (ready[i]) teardown(&s[i]);
    mpcl_dataset_destroy(ds);
    if (st != MPCL_OK) return bench_fail("timing training steps", st);

    double best[NP], median[NP];
    for (int i = 0; i < NP; i++) {
        if (!ready[i]) continue;
        qsort(rate[i], ROUNDS, sizeof rate[i][0], cmp_double);
        best[i] = rate[i][ROUNDS - 1];
        median[i] = rate[i][ROUNDS / 2];
    }
    if (opts->json) {
        jsonw w;
        jsonw_init(&w, stdout);
        jsonw_array_begin(&w);
        for (int i = 0; i < NP; i++) {
            if (!ready[i]) continue;
            jsonw_object_begin(&w);
            jsonw_kv_string(&w, "policy", mpcl_policy_name(policies[i]));
            jsonw_kv_number(&w, "best_samples_per_s", best[i]);
            jsonw_kv_number(&w, "median_samples_per_s", median[i]);
            if (ready[0]) jsonw_kv_number(&w, "best_ratio_to_float32", best[i] / best[0]);
            if (ready[0]) jsonw_kv_number(&w, "median_ratio_to_float32", median[i] / median[0]);
            jsonw_object_end(&w);
        }
        jsonw_array_end(&w);
        fputc('\n', stdout);
        return 0;
    }
    printf("784-128-10 MLP, batch 128, Adam; %d interleaved rounds of %d steps per policy\n",
           ROUNDS, ROUND_STEPS);
    printf("%-14s %12s %14s %12s %14s\n", "policy", "best samp/s", "best / float32", "median",
           "median / f32");
    for (int i = 0; i < NP; i++) {
        if (!ready[i]) {
            printf("%-14s not usable here\n", mpcl_policy_name(policies[i]));
            continue;
        }
        printf("%-14s %12.0f %14.3f %12.0f %14.3f\n", mpcl_policy_name(policies[i]), best[i],
               ready[0] ? best[i] / best[0] : (double)NAN, median[i],
               ready[0] ? median[i] / median[0] : (double)NAN);
    }
    return 0;
}
