/* The model end to end: 20 training steps on the device follow a host
 * double-precision implementation of the same steps (same initial weights,
 * same batches), and a step whose gradients overflow is skipped exactly. Also
 * the parameter table's arena layout, the three public phases of a step, and
 * models built from an explicit layer spec. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpcl/cl_interop.h"
#include "mpcl/data.h"
#include "mpcl/model.h"
#include "nn/nn.h"
#include "ref_ops.h"
#include "testutil.h"

enum { IN = 784, HID = 16, OUT = 10, BATCH = 64, SAMPLES = 512, STEPS = 20 };

/* The reference: 784-16-10, relu, softmax cross-entropy, Adam as optim.h
 * writes it (Algorithm 1 of the Adam paper, eps outside the sqrt). */
typedef struct ref_model {
    double w0[IN * HID], b0[HID], w1[HID * OUT], b1[OUT];
    double m[IN * HID + HID + HID * OUT + OUT], v[IN * HID + HID + HID * OUT + OUT];
    int t;
} ref_model;

static void adam(double *w, double *m, double *v, const double *g, size_t n, int t) {
    const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-7;
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
        w[i] -= lr * mh / (sqrt(vh) + eps);
    }
}

/* One step on x [B, IN]; returns the mean loss before the update. */
static double ref_step(ref_model *r, const double *x, const int32_t *y, size_t B) {
    static double pre0[BATCH * HID], h0[BATCH * HID], logits[BATCH * OUT], dl[BATCH * OUT];
    static double dh0[BATCH * HID], g[IN * HID + HID + HID * OUT + OUT];
    ref_gemm(false, false, B, HID, IN, x, r->w0, NULL, pre0);
    ref_bias_act_forward(h0, pre0, pre0, r->b0, B, HID, MPCL_ACT_RELU);
    ref_gemm(false, false, B, OUT, HID, h0, r->w1, NULL, logits);
    ref_bias_act_forward(logits, NULL, logits, r->b1, B, OUT, MPCL_ACT_IDENTITY);
    double loss = 0;
    size_t correct = 0;
    ref_softmax_xent(logits, y, B, OUT, 1.0, &loss, &correct, dl);
    double *gw0 = g, *gb0 = gw0 + IN * HID, *gw1 = gb0 + HID, *gb1 = gw1 + HID * OUT;
    ref_gemm(true, false, HID, OUT, B, h0, dl, NULL, gw1);
    ref_bias_grad(gb1, dl, B, OUT);
    ref_gemm(false, true, B, HID, OUT, dl, r->w1, NULL, dh0);
    ref_bias_act_backward(dh0, dh0, pre0, B, HID, MPCL_ACT_RELU);
    ref_gemm(true, false, IN, HID, B, x, dh0, NULL, gw0);
    ref_bias_grad(gb0, dh0, B, HID);
    r->t++;
    adam(r->w0, r->m, r->v, gw0, IN * HID, r->t);
    adam(r->b0, r->m + IN * HID, r->v + IN * HID, gb0, HID, r->t);
    adam(r->w1, r->m + IN * HID + HID, r->v + IN * HID + HID, gw1, HID * OUT, r->t);
    adam(r->b1, r->m + IN * HID + HID + HID * OUT, r->v + IN * HID + HID + HID * OUT, gb1, OUT,
         r->t);
    return loss / (double)B;
}

static mpcl_model_params small_params(mpcl_policy policy) {
    mpcl_model_params p = mpcl_model_default_params();
    p.inputs = IN;
    p.hidden[0] = HID;
    p.classes = OUT;
    p.max_batch = BATCH;
    p.policy = policy;
    p.seed = 7;
    return p;
}

static mpcl_model *small_model(mpcl_context *ctx, mpcl_policy policy) {
    mpcl_model_params p = small_params(policy);
    mpcl_model *m = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
    return m;
}

static void read_master(mpcl_model *m, size_t index, double *dst, size_t n) {
    float *tmp = malloc(n * sizeof *tmp);
    TU_ASSERT_OK(mpcl_model_read_param(m, index, MPCL_OPTIM_SLOT_MASTER, tmp, n));
    for (size_t i = 0; i < n; i++) dst[i] = tmp[i];
    free(tmp);
}

static void follows_reference(mpcl_policy policy) {
    mpcl_context *ctx = tu_context();
    mpcl_dataset *all = NULL, *ds = NULL;
    TU_ASSERT_OK(mpcl_idx_load(NULL, "train", &all));
    TU_ASSERT_OK(mpcl_dataset_subset(all, SAMPLES, &ds));
    mpcl_dataset_destroy(all);
    mpcl_model *m = small_model(ctx, policy);
    const mpcl_plan *plan = mpcl_model_plan(m);
    fprintf(stderr, "policy %s -> storage %s, gemm %s\n", mpcl_policy_name(policy),
            mpcl_dtype_name(plan->storage), mpcl_gemm_path_name(plan->gemm));
    /* float32: both sides compute the same function; the device rounds each
     * sum to f32 (relative 2^-24 per operation, K = 784 terms: ~1e-5 worst
     * case on one GEMM output, far less on the mean loss), and Adam's
     * normalized update carries that into the weights at the same relative
     * size: 1e-5 bounds 20 steps (8e-8 seen on PoCL and Intel).
     * mixed_float16 with f32 accumulation: activations, gradients and working
     * weights are rounded to f16 (2^-11 = 4.9e-4 relative) at each layer
     * boundary while the reference keeps double: a few roundings on the loss,
     * 2e-3 (9e-5 seen on PoCL). clblast-hgemm also accumulates in f16: K = 784
     * roundings of 2^-11 growing like sqrt(K) give ~1e-2 on a GEMM output,
     * 2e-2 (1.7e-3 seen on the Intel runtime).
     * mixed_bfloat16 (mpcl-mixed, f32 accumulation, no loss scaling): the
     * same roundings as mixed_float16 but at 2^-8 = 3.9e-3 relative (8 bits
     * of significand), and they compound over the 20 steps: Adam's
     * normalized update turns a gradient's relative error into a weight
     * error of up to lr where a gradient element is small, so the loss drifts
     * by more than one rounding. Four roundings' worth, 4 * 2^-8 = 1.6e-2,
     * bounds it (7.0e-3 seen on PoCL, against 9.9e-5 for f16). */
    double rtol = plan->storage == MPCL_DTYPE_F32         ? 1e-5
                  : plan->storage == MPCL_DTYPE_BF16      ? 1.6e-2
                  : plan->gemm == MPCL_GEMM_CLBLAST_HGEMM ? 2e-2
                                                          : 2e-3;

    static ref_model r;
    memset(&r, 0, sizeof r);
    read_master(m, 0, r.w0, IN * HID);
    read_master(m, 1, r.b0, HID);
    read_master(m, 2, r.w1, HID * OUT);
    read_master(m, 3, r.b1, OUT);

    mpcl_tensor *x = NULL, *y = NULL;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, plan->storage, BATCH, IN, &x));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_I32, BATCH, 1, &y));
    static float xf[BATCH * IN];
    static double xd[BATCH * IN];
    int32_t idx[BATCH], labels[BATCH];
    double worst = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int b = 0; b < BATCH; b++) idx[b] = (step * BATCH + b) % SAMPLES;
        TU_ASSERT_OK(mpcl_dataset_batch(ds, idx, BATCH, xf, labels));
        TU_ASSERT_OK(mpcl_tensor_upload_f32(x, xf, BATCH * IN));
        TU_ASSERT_OK(mpcl_tensor_upload_i32(y, labels, BATCH));
        /* The reference sees what the device stores: f16 inputs are rounded. */
        for (int i = 0; i < BATCH * IN; i++)
            xd[i] = plan->storage == MPCL_DTYPE_F16    ? mpcl_f16_to_f32(mpcl_f32_to_f16(xf[i]))
                    : plan->storage == MPCL_DTYPE_BF16 ? mpcl_bf16_to_f32(mpcl_f32_to_bf16(xf[i]))
                                                       : xf[i];
        TU_ASSERT_OK(mpcl_model_train_step(m, x, y));
        mpcl_loss_stats s;
        TU_ASSERT_OK(mpcl_model_read_train_stats(m, &s, true));
        double got = s.loss_sum / (double)s.samples, want = ref_step(&r, xd, labels, BATCH);
        double rel = fabs(got - want) / want;
        worst = fmax(worst, rel);
        if (rel > rtol)
            fail_msg("step %d: loss %.9g, reference %.9g (rel %.3g > %.3g)", step, got, want, rel,
                     rtol);
    }
    fprintf(stderr, "%s: worst relative loss difference over %d steps: %.3g\n",
            mpcl_policy_name(policy), STEPS, worst);
    uint32_t t = 0;
    TU_ASSERT_OK(mpcl_model_read_step(m, &t));
    assert_int_equal(t, STEPS);
    if (mpcl_model_loss_scale(m)) {
        mpcl_loss_scale_state ls;
        TU_ASSERT_OK(mpcl_loss_scale_read(ctx, mpcl_model_loss_scale(m), &ls));
        assert_int_equal(ls.skipped_steps, 0);
    }
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
    mpcl_model_destroy(m);
    mpcl_dataset_destroy(ds);
    mpcl_context_destroy(ctx);
}

static void float32_follows_reference(void **state) {
    (void)state;
    follows_reference(MPCL_POLICY_FLOAT32);
}

static void mixed_follows_reference(void **state) {
    (void)state;
    follows_reference(MPCL_POLICY_MIXED_FLOAT16);
}

static void bfloat16_follows_reference(void **state) {
    (void)state;
    follows_reference(MPCL_POLICY_MIXED_BFLOAT16);
}

/* A batch of uniform [0, 1) f16 inputs and labels b % OUT. */
static void f16_batch(mpcl_context *ctx, mpcl_tensor **x, mpcl_tensor **y) {
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F16, BATCH, IN, x));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_I32, BATCH, 1, y));
    static float xf[BATCH * IN];
    int32_t labels[BATCH];
    tu_rng rng = tu_rng_make(5);
    tu_fill_uniform(&rng, xf, BATCH * IN, 0, 1);
    for (int b = 0; b < BATCH; b++) labels[b] = b % OUT;
    TU_ASSERT_OK(mpcl_tensor_upload_f32(*x, xf, BATCH * IN));
    TU_ASSERT_OK(mpcl_tensor_upload_i32(*y, labels, BATCH));
}

static void overflowing_step_is_skipped_exactly(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_model *m = small_model(ctx, MPCL_POLICY_MIXED_FLOAT16);
    mpcl_loss_scale *ls = mpcl_model_loss_scale(m);
    assert_non_null(ls);
    mpcl_tensor *x = NULL, *y = NULL;
    f16_batch(ctx, &x, &y);
    TU_ASSERT_OK(mpcl_model_train_step(m, x, y)); /* one normal step: moments are non-zero */

    /* A scale of 2^100 makes every f16 gradient inf. */
    mpcl_loss_scale_state s = {.scale = 0x1p100f};
    TU_ASSERT_OK(mpcl_loss_scale_write_state(ctx, ls, &s));
    const size_t n = IN * HID;
    float *before[3], *after[3];
    mpcl_optim_slot slots[3] = {MPCL_OPTIM_SLOT_MASTER, MPCL_OPTIM_SLOT_M, MPCL_OPTIM_SLOT_V};
    for (int k = 0; k < 3; k++) {
        before[k] = malloc(n * sizeof(float));
        after[k] = malloc(n * sizeof(float));
        TU_ASSERT_OK(mpcl_model_read_param(m, 0, slots[k], before[k], n));
    }
    TU_ASSERT_OK(mpcl_model_train_step(m, x, y));
    mpcl_loss_scale_state got;
    TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &got));
    assert_true(got.scale == 0x1p99f);
    assert_int_equal(got.skipped_steps, 1);
    assert_int_equal(got.last_found_inf, 1);
    uint32_t t = 0;
    TU_ASSERT_OK(mpcl_model_read_step(m, &t));
    assert_int_equal(t, 1);
    for (int k = 0; k < 3; k++) {
        TU_ASSERT_OK(mpcl_model_read_param(m, 0, slots[k], after[k], n));
        assert_memory_equal(before[k], after[k], n * sizeof(float));
    }

    /* Back to a workable scale: the next step applies. */
    s.scale = 1024.0f;
    s.skipped_steps = got.skipped_steps;
    TU_ASSERT_OK(mpcl_loss_scale_write_state(ctx, ls, &s));
    TU_ASSERT_OK(mpcl_model_train_step(m, x, y));
    TU_ASSERT_OK(mpcl_model_read_step(m, &t));
    assert_int_equal(t, 2);
    TU_ASSERT_OK(mpcl_model_read_param(m, 0, MPCL_OPTIM_SLOT_MASTER, after[0], n));
    assert_memory_not_equal(before[0], after[0], n * sizeof(float));
    for (int k = 0; k < 3; k++) {
        free(before[k]);
        free(after[k]);
    }
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
    mpcl_model_destroy(m);
    mpcl_context_destroy(ctx);
}

/* The model's step runs the scale update in the optimizer's last launch: the
 * state machine of loss_scale.h, seen through the model. With a growth
 * interval of 2, two finite steps double the scale and restart the count; a
 * third counts one good step; the step counter follows every applied step. */
static void scale_grows_through_the_model_step(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_model_params p = small_params(MPCL_POLICY_MIXED_FLOAT16);
    p.loss_scale.growth_interval = 2;
    mpcl_model *m = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
    mpcl_loss_scale *ls = mpcl_model_loss_scale(m);
    assert_non_null(ls);
    mpcl_tensor *x = NULL, *y = NULL;
    f16_batch(ctx, &x, &y);
    mpcl_loss_scale_state s0, s;
    TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &s0));
    uint32_t t = 0;
    TU_ASSERT_OK(mpcl_model_train_step(m, x, y));
    TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &s));
    assert_true(s.scale == s0.scale);
    assert_int_equal(s.good_steps, 1);
    TU_ASSERT_OK(mpcl_model_train_step(m, x, y));
    TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &s));
    assert_true(s.scale == 2.0f * s0.scale);
    assert_int_equal(s.good_steps, 0);
    TU_ASSERT_OK(mpcl_model_train_step(m, x, y));
    TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &s));
    assert_true(s.scale == 2.0f * s0.scale);
    assert_int_equal(s.good_steps, 1);
    assert_int_equal(s.skipped_steps, 0);
    assert_int_equal(s.found_inf, 0);
    TU_ASSERT_OK(mpcl_model_read_step(m, &t));
    assert_int_equal(t, 3);
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
    mpcl_model_destroy(m);
    mpcl_context_destroy(ctx);
}

static void bad_batches_are_refused(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_model *m = small_model(ctx, MPCL_POLICY_FLOAT32);
    mpcl_tensor *x = NULL, *y = NULL, *big = NULL, *xi = NULL;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 8, IN, &x));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_I32, 7, 1, &y));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, BATCH + 1, IN, &big));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_I32, 8, IN, &xi));
    assert_int_equal(mpcl_model_train_step(m, x, y), MPCL_ERR_SHAPE);
    assert_int_equal(mpcl_model_train_step(m, big, y), MPCL_ERR_SHAPE);
    mpcl_tensor *y8 = NULL;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_I32, 8, 1, &y8));
    assert_int_equal(mpcl_model_train_step(m, xi, y8), MPCL_ERR_DTYPE);
    uint32_t t = 9;
    TU_ASSERT_OK(mpcl_model_read_step(m, &t));
    assert_int_equal(t, 0); /* nothing ran */
    mpcl_model_params p = mpcl_model_default_params();
    p.hidden[0] = 0;
    mpcl_model *bad = (mpcl_model *)0x1;
    assert_int_equal(mpcl_model_create(ctx, &p, &bad), MPCL_ERR_INVALID_ARG);
    assert_null(bad);
    /* A model that cannot fit on the device is refused before anything is
     * allocated, with the numbers: activations for batches of 2^30 rows. */
    size_t before = mpcl_context_bytes_now(ctx);
    p = mpcl_model_default_params();
    p.max_batch = (size_t)1 << 30;
    p.hidden[0] = 4096;
    assert_int_equal(mpcl_model_create(ctx, &p, &bad), MPCL_ERR_OUT_OF_MEMORY);
    assert_null(bad);
    assert_non_null(strstr(mpcl_context_errmsg(ctx), "MiB"));
    assert_int_equal(mpcl_context_bytes_now(ctx), before);
    mpcl_tensor *all[] = {x, y, big, xi, y8};
    for (size_t i = 0; i < 5; i++) mpcl_tensor_destroy(all[i]);
    mpcl_model_destroy(m);
    mpcl_context_destroy(ctx);
}

/* A batch of random pixels and cyclic labels in the model's storage dtype. */
static void random_batch(mpcl_context *ctx, mpcl_dtype storage, uint64_t seed, mpcl_tensor **x,
                         mpcl_tensor **y) {
    static float xf[BATCH * IN];
    int32_t labels[BATCH];
    tu_rng rng = tu_rng_make(seed);
    tu_fill_uniform(&rng, xf, BATCH * IN, 0, 1);
    for (int b = 0; b < BATCH; b++) labels[b] = (b * 7) % OUT;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, storage, BATCH, IN, x));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_I32, BATCH, 1, y));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(*x, xf, BATCH * IN));
    TU_ASSERT_OK(mpcl_tensor_upload_i32(*y, labels, BATCH));
}

static void assert_same_state(mpcl_model *a, mpcl_model *b) {
    size_t na, nb;
    float *sa = tu_model_state(a, &na), *sb = tu_model_state(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(sa, sb, na * sizeof(float));
    free(sa);
    free(sb);
}

/* Every row of the table: Keras names and shapes, offsets aligned for a
 * sub-buffer in an f32 and in a 16-bit arena, no two rows overlapping, all
 * inside the arena; in every policy and for a deeper model. */
static void arena_layout_is_aligned_and_disjoint(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    cl_uint bits = 0;
    assert_int_equal(clGetDeviceInfo(mpcl_context_cl_device(ctx), CL_DEVICE_MEM_BASE_ADDR_ALIGN,
                                     sizeof bits, &bits, NULL),
                     CL_SUCCESS);
    const size_t align_bytes = bits / 8;
    const size_t widths[3] = {33, 7, 130};
    for (int deep = 0; deep < 2; deep++) {
        mpcl_model_params p = mpcl_model_default_params();
        p.inputs = IN;
        p.hidden_count = deep ? 3 : 1;
        for (size_t i = 0; i < p.hidden_count; i++) p.hidden[i] = deep ? widths[i] : HID;
        p.classes = OUT;
        p.max_batch = BATCH;
        p.policy = MPCL_POLICY_FLOAT32;
        mpcl_model *m = NULL;
        TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
        size_t np = mpcl_model_param_count(m), total = mpcl_model_arena_elements(m);
        assert_int_equal(np, 2 * (p.hidden_count + 1));
        assert_null(mpcl_model_param(m, np));
        size_t in = IN, end = 0;
        for (size_t i = 0; i < np; i++) {
            const mpcl_param_info *r = mpcl_model_param(m, i);
            size_t layer = i / 2, units = layer < p.hidden_count ? p.hidden[layer] : OUT;
            char want[48];
            snprintf(want, sizeof want, "dense_%zu.%s", layer, i % 2 ? "bias" : "kernel");
            assert_string_equal(r->name, want);
            if (i % 2 == 0) {
                assert_int_equal(r->rank, 2);
                assert_int_equal(r->shape[0], in);
                assert_int_equal(r->shape[1], units);
            } else {
                assert_int_equal(r->rank, 1);
                assert_int_equal(r->shape[0], units);
                in = units;
            }
            size_t count = 1;
            for (size_t d = 0; d < r->rank; d++) count *= r->shape[d];
            assert_int_equal(r->count, count);
            if ((r->offset * 2) % align_bytes || (r->offset * 4) % align_bytes)
                fail_msg("%s at element %zu: not aligned to %zu bytes", r->name, r->offset,
                         align_bytes);
            /* On a chunk of the optimizer's decay flags (a chunk is one row's). */
            assert_int_equal(r->offset % MPCL_OPTIM_DECAY_CHUNK, 0);
            assert_true(r->offset >= end); /* after the previous row: no overlap */
            end = r->offset + r->count;
        }
        assert_true(end <= total);
        mpcl_model_destroy(m);
    }
    mpcl_context_destroy(ctx);
}

/* decay_vectors: a tiny 13-7-3 Dense model (odd sizes: every row ends
 * mid-chunk, and starts on one, asserted) takes one step from the same
 * random weights (biases too, so that their decay would show) and batch in
 * three runs: A with weight_decay and decay_vectors=false, B without weight
 * decay, C with it on every parameter (the default). In A a bias (rank 1)
 * must be B's bits, a kernel (rank 2) C's bits and, against the host
 * reference, B's value minus lr * weight_decay * w0: the first step's L2
 * (SGD) and decoupled (AdamW) decay alike. */
enum { TINY_IN = 13, TINY_HID = 7, TINY_OUT = 3, TINY_BATCH = 4 };

static mpcl_model *tiny_stepped(mpcl_context *ctx, const mpcl_optim_params *optim, uint64_t seed) {
    mpcl_model_params p = mpcl_model_default_params();
    p.inputs = TINY_IN;
    p.hidden[0] = TINY_HID;
    p.classes = TINY_OUT;
    p.max_batch = TINY_BATCH;
    p.policy = MPCL_POLICY_FLOAT32;
    p.optim = *optim;
    mpcl_model *m = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
    assert_int_equal(mpcl_model_arena_align(m) % MPCL_OPTIM_DECAY_CHUNK, 0);
    tu_rng rng = tu_rng_make(seed);
    float w[TINY_IN * TINY_HID], x[TINY_BATCH * TINY_IN];
    for (size_t i = 0; i < mpcl_model_param_count(m); i++) {
        const mpcl_param_info *r = mpcl_model_param(m, i);
        assert_int_equal(r->offset % MPCL_OPTIM_DECAY_CHUNK, 0);
        assert_int_not_equal(r->count % MPCL_OPTIM_DECAY_CHUNK, 0); /* ends mid-chunk */
        tu_fill_uniform(&rng, w, r->count, -1, 1);
        TU_ASSERT_OK(mpcl_model_write_param(m, i, MPCL_OPTIM_SLOT_MASTER, w, r->count));
    }
    tu_fill_uniform(&rng, x, TINY_BATCH * TINY_IN, 0, 1);
    const int32_t labels[TINY_BATCH] = {0, 2, 1, 2};
    mpcl_tensor *xt = NULL, *yt = NULL;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, TINY_BATCH, TINY_IN, &xt));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_I32, TINY_BATCH, 1, &yt));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(xt, x, TINY_BATCH * TINY_IN));
    TU_ASSERT_OK(mpcl_tensor_upload_i32(yt, labels, TINY_BATCH));
    TU_ASSERT_OK(mpcl_model_train_step(m, xt, yt));
    mpcl_tensor_destroy(xt);
    mpcl_tensor_destroy(yt);
    return m;
}

static void decay_vectors_false_decays_matrices_only(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const mpcl_optim_kind kinds[] = {MPCL_OPTIM_ADAMW, MPCL_OPTIM_SGD};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        mpcl_optim_params with = mpcl_optim_default_params(kinds[k]), none = with, all = with;
        assert_int_equal(with.decay_vectors, 1);
        TU_ASSERT_OK(mpcl_optim_params_set(NULL, &with, "weight_decay", "0.1"));
        TU_ASSERT_OK(mpcl_optim_params_set(NULL, &with, "decay_vectors", "false"));
        TU_ASSERT_OK(mpcl_optim_params_set(NULL, &none, "weight_decay", "0"));
        TU_ASSERT_OK(mpcl_optim_params_set(NULL, &all, "weight_decay", "0.1"));
        const uint64_t seed = 91;
        mpcl_model *a = tiny_stepped(ctx, &with, seed), *b = tiny_stepped(ctx, &none, seed),
                   *c = tiny_stepped(ctx, &all, seed);
        tu_rng rng = tu_rng_make(seed); /* the initial weights again */
        size_t ranks[2] = {0, 0};
        for (size_t i = 0; i < mpcl_model_param_count(a); i++) {
            const mpcl_param_info *r = mpcl_model_param(a, i);
            float w0[TINY_IN * TINY_HID], wa[TINY_IN * TINY_HID], wb[TINY_IN * TINY_HID],
                wc[TINY_IN * TINY_HID];
            tu_fill_uniform(&rng, w0, r->count, -1, 1);
            TU_ASSERT_OK(mpcl_model_read_param(a, i, MPCL_OPTIM_SLOT_MASTER, wa, r->count));
            TU_ASSERT_OK(mpcl_model_read_param(b, i, MPCL_OPTIM_SLOT_MASTER, wb, r->count));
            TU_ASSERT_OK(mpcl_model_read_param(c, i, MPCL_OPTIM_SLOT_MASTER, wc, r->count));
            const bool matrix = r->rank >= 2;
            ranks[matrix]++;
            assert_memory_equal(wa, matrix ? wc : wb, r->count * sizeof(float));
            assert_memory_not_equal(wa, matrix ? wb : wc, r->count * sizeof(float));
            /* Decay takes lr * wd * |w0| <= 1e-3; the rest rounds at 2^-24. */
            double want_decay = matrix ? (double)with.lr * (double)with.weight_decay : 0.0;
            for (size_t e = 0; e < r->count; e++) {
                double want = (double)wb[e] - want_decay * (double)w0[e];
                if (fabs((double)wa[e] - want) > 1e-6)
                    fail_msg("%s %s[%zu]: %.9g, want %.9g (B %.9g, w0 %.9g)",
                             mpcl_optim_kind_name(kinds[k]), r->name, e, (double)wa[e], want,
                             (double)wb[e], (double)w0[e]);
            }
        }
        assert_int_equal(ranks[0], 2); /* two biases */
        assert_int_equal(ranks[1], 2); /* two kernels */
        mpcl_model_destroy(a);
        mpcl_model_destroy(b);
        mpcl_model_destroy(c);
    }
    mpcl_context_destroy(ctx);
}

/* forward, backward and apply: out of order they are refused without
 * touching anything; in order they are the one-call step bit for bit; and
 * between backward and apply the gradient arena is the caller's (zeroed
 * there, a fresh Adam's step moves nothing but still counts). */
static void phases_compose_the_step(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_model *a = small_model(ctx, MPCL_POLICY_FLOAT32),
               *b = small_model(ctx, MPCL_POLICY_FLOAT32);
    mpcl_tensor *x = NULL, *y = NULL;
    random_batch(ctx, MPCL_DTYPE_F32, 11, &x, &y);
    assert_int_equal(mpcl_model_backward(a), MPCL_ERR_INVALID_ARG);
    assert_int_equal(mpcl_model_apply(a), MPCL_ERR_INVALID_ARG);
    TU_ASSERT_OK(mpcl_model_forward(a, x, y));
    assert_int_equal(mpcl_model_apply(a), MPCL_ERR_INVALID_ARG);
    /* An evaluation overwrites the activations a backward would read. */
    TU_ASSERT_OK(mpcl_model_eval_step(a, x, y));
    assert_int_equal(mpcl_model_backward(a), MPCL_ERR_INVALID_ARG);
    assert_same_state(a, b);

    for (int s = 0; s < 3; s++) {
        TU_ASSERT_OK(mpcl_model_forward(a, x, y));
        TU_ASSERT_OK(mpcl_model_backward(a));
        TU_ASSERT_OK(mpcl_model_apply(a));
        TU_ASSERT_OK(mpcl_model_train_step(b, x, y));
    }
    assert_same_state(a, b);
    assert_int_equal(mpcl_model_apply(a), MPCL_ERR_INVALID_ARG); /* one apply per backward */

    mpcl_model *c = small_model(ctx, MPCL_POLICY_FLOAT32);
    size_t n0, n1;
    float *before = tu_model_state(c, &n0);
    TU_ASSERT_OK(mpcl_model_forward(c, x, y));
    TU_ASSERT_OK(mpcl_model_backward(c));
    mpcl_tensor *g = mpcl_model_grad_arena(c);
    assert_int_equal(mpcl_tensor_count(g), mpcl_model_arena_elements(c));
    TU_ASSERT_OK(mpcl_tensor_fill(g, 0.0f));
    TU_ASSERT_OK(mpcl_model_apply(c));
    float *after = tu_model_state(c, &n1);
    assert_memory_equal(before, after, n0 * sizeof(float));
    uint32_t t = 0;
    TU_ASSERT_OK(mpcl_model_read_step(c, &t));
    assert_int_equal(t, 1);
    free(before);
    free(after);
    mpcl_model_destroy(c);
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
    mpcl_model_destroy(a);
    mpcl_model_destroy(b);
    mpcl_context_destroy(ctx);
}

/* An explicit layer list is the same model as the MLP fields describe, bit
 * for bit after a few steps; per-layer activations and a bad spec. */
static void layer_spec_builds_the_model(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_model *mlp = small_model(ctx, MPCL_POLICY_FLOAT32), *spec = NULL;
    mpcl_model_params p = *mpcl_model_params_of(mlp);
    mpcl_layer_spec layers[MPCL_MAX_LAYERS];
    size_t count = 0;
    TU_ASSERT_OK(mpcl_model_params_layers(ctx, &p, layers, &count));
    assert_int_equal(count, 2);
    assert_string_equal(layers[0].kind, "dense");
    assert_int_equal(layers[0].units, HID);
    assert_int_equal(layers[0].activation, MPCL_ACT_RELU);
    assert_int_equal(layers[1].units, OUT);
    assert_int_equal(layers[1].activation, MPCL_ACT_IDENTITY);
    p.hidden_count = 0; /* ignored once layers are given */
    memcpy(p.layers, layers, sizeof layers);
    p.layer_count = count;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &spec));
    assert_int_equal(mpcl_model_layer_count(spec), 2);
    mpcl_tensor *x = NULL, *y = NULL;
    random_batch(ctx, MPCL_DTYPE_F32, 12, &x, &y);
    for (int s = 0; s < 3; s++) {
        TU_ASSERT_OK(mpcl_model_train_step(mlp, x, y));
        TU_ASSERT_OK(mpcl_model_train_step(spec, x, y));
    }
    assert_same_state(mlp, spec);

    /* Different activations per layer: a model the MLP fields cannot say. */
    mpcl_model *mixed_acts = NULL;
    p.layers[0].activation = MPCL_ACT_TANH;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &mixed_acts));
    assert_int_equal(mpcl_model_layer(mixed_acts, 0)->activation, MPCL_ACT_TANH);
    TU_ASSERT_OK(mpcl_model_train_step(mixed_acts, x, y));

    mpcl_model *bad = (mpcl_model *)0x1;
    snprintf(p.layers[1].kind, sizeof p.layers[1].kind, "conv9d");
    assert_int_equal(mpcl_model_create(ctx, &p, &bad), MPCL_ERR_INVALID_ARG);
    assert_null(bad);
    assert_false(mpcl_layer_kind_known("conv9d"));
    assert_true(mpcl_layer_kind_known("dense"));
    snprintf(p.layers[1].kind, sizeof p.layers[1].kind, "dense");
    p.layers[1].units = 0;
    assert_int_equal(mpcl_model_create(ctx, &p, &bad), MPCL_ERR_INVALID_ARG);
    p.layers[1].units = OUT;
    p.layer_count = MPCL_MAX_LAYERS + 1;
    assert_int_equal(mpcl_model_create(ctx, &p, &bad), MPCL_ERR_INVALID_ARG);
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
    mpcl_model_destroy(mixed_acts);
    mpcl_model_destroy(mlp);
    mpcl_model_destroy(spec);
    mpcl_context_destroy(ctx);
}

/* A Dense input gradient with weights of 16384 elements or more runs, on
 * mpcl's GEMM path, as an NN GEMM on W^T staged in a workspace (gemm.c); on
 * CLBlast's path it stays NT. The two paths' parameters after SGD steps agree
 * to f32 rounding: a wrong staging (shape, order, or a workspace overwritten
 * before it is read) would put dense_0's gradient far off. */
static void wide_dense_input_gradient_matches_clblast(void **state) {
    (void)state;
    mpcl_model_params p = small_params(MPCL_POLICY_FLOAT32);
    p.optim = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    p.optim.lr = 0.1f;
    static const size_t units[] = {256, 96, OUT}; /* dense_1: 256 x 96 = 24576 */
    static const mpcl_activation acts[] = {MPCL_ACT_RELU, MPCL_ACT_TANH, MPCL_ACT_IDENTITY};
    for (size_t l = 0; l < 3; l++) {
        TU_ASSERT_OK(mpcl_layer_spec_init(NULL, "dense", &p.layers[l]));
        p.layers[l].units = units[l];
        p.layers[l].activation = acts[l];
    }
    p.layer_count = 3;
    float *state_of[2];
    size_t n[2];
    for (int path = 0; path < 2; path++) {
        if (path) setenv("MPCL_GEMM", "clblast-sgemm", 1);
        mpcl_context *ctx = tu_context();
        unsetenv("MPCL_GEMM");
        mpcl_model *m = NULL;
        TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
        assert_int_equal(mpcl_model_plan(m)->gemm,
                         path ? MPCL_GEMM_CLBLAST_SGEMM : MPCL_GEMM_MPCL_F32);
        mpcl_tensor *x = NULL, *y = NULL;
        random_batch(ctx, MPCL_DTYPE_F32, 21, &x, &y);
        for (int step = 0; step < 3; step++) TU_ASSERT_OK(mpcl_model_train_step(m, x, y));
        state_of[path] = tu_model_state(m, &n[path]);
        mpcl_tensor_destroy(x);
        mpcl_tensor_destroy(y);
        mpcl_model_destroy(m);
        mpcl_context_destroy(ctx);
    }
    assert_int_equal(n[0], n[1]);
    size_t bad = 0;
    for (size_t i = 0; i < n[0]; i++) {
        double a = state_of[0][i], b = state_of[1][i];
        if (!(fabs(a - b) <= 1e-5 * (1 + fabs(b))) && bad++ < 5)
            fprintf(stderr, "state %zu: mpcl-f32 %.9g, clblast-sgemm %.9g\n", i, a, b);
    }
    free(state_of[0]);
    free(state_of[1]);
    if (bad) fail_msg("%zu of %zu state values differ beyond f32 rounding", bad, n[0]);
}

/* A softmax output layer is the cross-entropy's own: the model keeps it as
 * declared and trains bit for bit as the linear output; a softmax on
 * another layer, or with a loss that does not apply it, is refused. */
static void output_activation_is_the_losss(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_model *linear = small_model(ctx, MPCL_POLICY_FLOAT32), *softmax = NULL;
    mpcl_model_params p = *mpcl_model_params_of(linear);
    size_t count = 0;
    TU_ASSERT_OK(mpcl_model_params_layers(ctx, &p, p.layers, &count));
    p.layer_count = count;
    assert_int_equal(mpcl_model_output_activation(&p), MPCL_ACT_IDENTITY);
    p.layers[1].activation = MPCL_ACT_SOFTMAX;
    assert_int_equal(mpcl_model_output_activation(&p), MPCL_ACT_SOFTMAX);
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &softmax));
    assert_int_equal(mpcl_model_params_of(softmax)->layers[1].activation, MPCL_ACT_SOFTMAX);
    mpcl_tensor *x = NULL, *y = NULL;
    random_batch(ctx, MPCL_DTYPE_F32, 13, &x, &y);
    for (int s = 0; s < 3; s++) {
        TU_ASSERT_OK(mpcl_model_train_step(linear, x, y));
        TU_ASSERT_OK(mpcl_model_train_step(softmax, x, y));
    }
    assert_same_state(linear, softmax);

    mpcl_model *bad = (mpcl_model *)0x1;
    p.layers[0].activation = MPCL_ACT_SOFTMAX;
    assert_int_equal(mpcl_model_create(ctx, &p, &bad), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "layer 0 (dense): softmax is an output activation"));
    assert_null(bad);
    p.layers[0].activation = MPCL_ACT_RELU;
    p.loss = MPCL_LOSS_MSE;
    assert_int_equal(mpcl_model_output_activation(&p), MPCL_ACT_IDENTITY);
    assert_int_equal(mpcl_model_create(ctx, &p, &bad), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "loss mse does not read a softmax output"));
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
    mpcl_model_destroy(linear);
    mpcl_model_destroy(softmax);
    mpcl_context_destroy(ctx);
}

/* A parameter table takes MPCL__MAX_PARAMS = 1024 rows (GPT-2 XL has 580);
 * the 1025th is refused by name. */
static void param_table_takes_1024_rows(void **state) {
    (void)state;
    mpcl__param_table *t = malloc(sizeof *t);
    assert_non_null(t);
    mpcl__params_init(t, 128);
    size_t shape[1] = {3}, index = 0;
    char name[32];
    for (size_t i = 0; i < 1024; i++) {
        snprintf(name, sizeof name, "row_%zu", i);
        TU_ASSERT_OK(mpcl__params_add(NULL, t, name, 1, shape, MPCL__INIT_ZEROS, &index));
        assert_int_equal(index, i);
    }
    assert_string_equal(t->rows[1023].name, "row_1023");
    tu_expect_error(mpcl__params_add(NULL, t, "row_1024", 1, shape, MPCL__INIT_ZEROS, &index),
                    MPCL_ERR_INVALID_ARG,
                    "parameter row_1024: a model holds at most 1024 parameter tensors");
    assert_int_equal(t->count, 1024);
    free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(float32_follows_reference),
        cmocka_unit_test(mixed_follows_reference),
        cmocka_unit_test(bfloat16_follows_reference),
        cmocka_unit_test(overflowing_step_is_skipped_exactly),
        cmocka_unit_test(scale_grows_through_the_model_step),
        cmocka_unit_test(bad_batches_are_refused),
        cmocka_unit_test(arena_layout_is_aligned_and_disjoint),
        cmocka_unit_test(phases_compose_the_step),
        cmocka_unit_test(decay_vectors_false_decays_matrices_only),
        cmocka_unit_test(layer_spec_builds_the_model),
        cmocka_unit_test(wide_dense_input_gradient_matches_clblast),
        cmocka_unit_test(output_activation_is_the_losss),
        cmocka_unit_test(param_table_takes_1024_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
