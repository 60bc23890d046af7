/* Optimizers: 20 steps of SGD (plain and Nesterov), Adam (with and without
 * L2) and AdamW against a double-precision host reference, in f32 and f16
 * storage, over parameters of odd sizes, with dynamic loss scaling and one
 * step whose gradient holds an inf: that step changes nothing (weights,
 * moments, working copy, step counter), and the run afterwards is bit for bit
 * the run in which the step never happened. The working copy always equals
 * the master rounded to the storage dtype. Also: more than eight parameters
 * (several launches per step), no loss scaler, state read/write and errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define NSTEPS 20
#define SKIP_AT 10
#define MAXP 12

typedef struct shape {
    size_t rows, cols;
} shape;

/* ---- the host reference, in double ---- */

typedef struct ref_state {
    double *x, *m, *v; /* master, first moment (SGD: momentum buffer), second moment */
    unsigned t;
} ref_state;

/* One step over n elements; g is the unscaled gradient as the device sees it. */
static void ref_step(const mpcl_optim_params *p, ref_state *s, size_t n, const double *g,
                     unsigned t) {
    /* Hyperparameters as the device receives them: the floats, widened. */
    const double lr = p->lr, b1 = p->beta1, b2 = p->beta2, eps = p->eps, wd = p->weight_decay,
                 mu = p->momentum;
    for (size_t i = 0; i < n; i++) {
        double x = s->x[i], gr = g[i];
        if (p->kind == MPCL_OPTIM_SGD) {
            gr += wd * x;
            double b = mu * s->m[i] + gr;
            x -= lr * (p->nesterov ? gr + mu * b : b);
            s->m[i] = b;
        } else {
            if (p->kind == MPCL_OPTIM_ADAMW)
                x -= lr * wd * x;
            else
                gr += wd * x;
            double m = b1 * s->m[i] + (1 - b1) * gr;
            double v = b2 * s->v[i] + (1 - b2) * gr * gr;
            double mhat = m / (1 - pow(b1, t)), vhat = v / (1 - pow(b2, t));
            x -= lr * mhat / (sqrt(vhat) + eps);
            s->m[i] = m;
            s->v[i] = v;
        }
        s->x[i] = x;
    }
}

/* ---- one device run ---- */

typedef struct run_out {
    float *slot[3][MAXP]; /* master, m, v per parameter (v NULL for SGD) */
    uint32_t step;
} run_out;

static float round_storage(mpcl_dtype dtype, float x) {
    return dtype == MPCL_DTYPE_F16 ? mpcl_f16_to_f32(mpcl_f32_to_f16(x)) : x;
}

static void read_all(mpcl_context *ctx, mpcl_optimizer *opt, const shape *sh, size_t np,
                     run_out *o) {
    for (int s = 0; s < 3; s++)
        for (size_t i = 0; i < np; i++) {
            o->slot[s][i] = NULL;
            if (!mpcl_optimizer_has_slot(opt, (mpcl_optim_slot)s)) continue;
            size_t n = sh[i].rows * sh[i].cols;
            o->slot[s][i] = malloc(n * sizeof(float));
            for (size_t j = 0; j < n; j++) o->slot[s][i][j] = tu_poison_f32();
            TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, (mpcl_optim_slot)s, i, o->slot[s][i], n));
        }
    TU_ASSERT_OK(mpcl_optimizer_read_step(ctx, opt, &o->step));
}

static void free_out(run_out *o, size_t np) {
    for (int s = 0; s < 3; s++)
        for (size_t i = 0; i < np; i++) free(o->slot[s][i]);
}

/* Equal bit for bit (NaN never expected here). */
static void assert_same(const run_out *a, const run_out *b, const shape *sh, size_t np,
                        const char *what) {
    for (int s = 0; s < 3; s++)
        for (size_t i = 0; i < np; i++) {
            if (!a->slot[s][i]) continue;
            if (memcmp(a->slot[s][i], b->slot[s][i], sh[i].rows * sh[i].cols * sizeof(float)))
                fail_msg("%s: slot %d of parameter %zu differs", what, s, i);
        }
    assert_int_equal(a->step, b->step);
}

/* The working copy equals the master rounded to the storage dtype, exactly. */
static void assert_working_is_rounded_master(mpcl_tensor *const *w, const run_out *o,
                                             const shape *sh, size_t np) {
    for (size_t i = 0; i < np; i++) {
        size_t n = sh[i].rows * sh[i].cols;
        mpcl_dtype dt = mpcl_tensor_dtype(w[i]);
        if (dt == MPCL_DTYPE_F16) {
            uint16_t *bits = malloc(n * sizeof *bits);
            TU_ASSERT_OK(mpcl_tensor_download_raw(w[i], bits, n * sizeof *bits));
            for (size_t j = 0; j < n; j++)
                if (bits[j] != mpcl_f32_to_f16(o->slot[0][i][j]))
                    fail_msg("working %zu[%zu] = 0x%04x, master %.9g rounds to 0x%04x", i, j,
                             bits[j], (double)o->slot[0][i][j], mpcl_f32_to_f16(o->slot[0][i][j]));
            free(bits);
        } else {
            float *x = malloc(n * sizeof *x);
            TU_ASSERT_OK(mpcl_tensor_download_f32(w[i], x, n));
            assert_memory_equal(x, o->slot[0][i], n * sizeof *x);
            free(x);
        }
    }
}

/* Runs NSTEPS steps with dynamic loss scaling (default params). Step
 * `inf_at` gets an inf in one gradient element (the last of the middle
 * parameter); step `omit_at` is left out entirely (the gradients drawn for
 * it are not used). Returns the final state in *out; with `ref` also checks
 * the skipped step and the end state against the reference. */
static void run(mpcl_context *ctx, const mpcl_optim_params *p, mpcl_dtype dtype, const shape *sh,
                size_t np, int inf_at, int omit_at, int use_ref, uint64_t seed, run_out *out) {
    tu_rng r = tu_rng_make(seed);
    mpcl_tensor *w[MAXP], *g[MAXP];
    ref_state ref[MAXP];
    size_t total = 0;
    for (size_t i = 0; i < np; i++) {
        size_t n = sh[i].rows * sh[i].cols;
        total += n;
        TU_ASSERT_OK(mpcl_tensor_create(ctx, dtype, sh[i].rows, sh[i].cols, &w[i]));
        TU_ASSERT_OK(mpcl_tensor_create(ctx, dtype, sh[i].rows, sh[i].cols, &g[i]));
        ref[i].x = calloc(n, sizeof(double));
        ref[i].m = calloc(n, sizeof(double));
        ref[i].v = calloc(n, sizeof(double));
    }
    mpcl_optimizer *opt = NULL;
    TU_ASSERT_OK(mpcl_optimizer_create(ctx, p, w, np, &opt));
    /* Start from f32 masters (not the f16-rounded working values). */
    float *buf = malloc(total * sizeof(float));
    for (size_t i = 0; i < np; i++) {
        size_t n = sh[i].rows * sh[i].cols;
        tu_fill_uniform(&r, buf, n, -1.0f, 1.0f);
        for (size_t j = 0; j < n; j++) ref[i].x[j] = buf[j];
        TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_MASTER, i, buf, n));
    }
    mpcl_loss_scale_params lp = mpcl_loss_scale_default_params();
    mpcl_loss_scale *ls = NULL;
    TU_ASSERT_OK(mpcl_loss_scale_create(ctx, &lp, &ls));
    float scale = lp.initial_scale; /* the host's model of the device scale */
    unsigned t = 0;
    double *gd = malloc(total * sizeof(double));
    for (int s = 0; s < NSTEPS; s++) {
        /* Draw every step's gradients, used or not, so that runs agree. */
        for (size_t i = 0; i < np; i++) {
            size_t n = sh[i].rows * sh[i].cols;
            tu_fill_uniform(&r, buf, n, -1.0f, 1.0f);
            for (size_t j = 0; j < n; j++) {
                /* Stored scaled gradient; scaling by a power of two is exact,
                 * so the unscaled value the device uses is stored / scale. */
                buf[j] = round_storage(dtype, buf[j] * scale);
            }
            if (s == inf_at && i == np / 2) buf[n - 1] = INFINITY;
            if (s != omit_at) TU_ASSERT_OK(mpcl_tensor_upload_f32(g[i], buf, n));
            for (size_t j = 0; j < n; j++) gd[j] = (double)buf[j] / (double)scale;
            if (use_ref && s != omit_at && s != inf_at) ref_step(p, &ref[i], n, gd, t + 1);
        }
        if (s == omit_at) continue;
        run_out before;
        if (s == inf_at && use_ref) read_all(ctx, opt, sh, np, &before);
        TU_ASSERT_OK(mpcl_loss_scale_check(ctx, ls, g, np));
        TU_ASSERT_OK(mpcl_optimizer_step(ctx, opt, g, np, ls));
        TU_ASSERT_OK(mpcl_loss_scale_update(ctx, ls));
        if (s == inf_at) {
            scale *= 0.5f;
            if (use_ref) {
                run_out after;
                read_all(ctx, opt, sh, np, &after);
                assert_same(&before, &after, sh, np, "the skipped step");
                assert_working_is_rounded_master(w, &after, sh, np);
                free_out(&before, np);
                free_out(&after, np);
            }
        } else {
            t++;
        }
    }
    read_all(ctx, opt, sh, np, out);
    assert_int_equal(out->step, t);
    mpcl_loss_scale_state lst;
    TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &lst));
    assert_true(lst.scale == scale);
    assert_int_equal(lst.skipped_steps, inf_at >= 0 ? 1 : 0);
    assert_working_is_rounded_master(w, out, sh, np);
    if (use_ref) {
        /* Tolerances. The device runs the same formulas in f32 on the same
         * inputs (the stored gradients, the f32 hyperparameters), so the
         * differences are f32 rounding only: each step rounds the master (up
         * to |x| <= ~3 here: 2^-24 * 3 = 1.8e-7) and computes an update of at
         * most lr * ~10 with a relative error of a few ulp (pown, sqrt, the
         * divisions: < 1e-6 relative), over 19 steps: < 1e-5 absolute. The
         * moments are sums of a few rounded products: relative 1e-5 (Adam's
         * v is tiny, (1 - beta2) g^2, so its atol is tiny too). */
        char what[64];
        for (size_t i = 0; i < np; i++) {
            size_t n = sh[i].rows * sh[i].cols;
            snprintf(what, sizeof what, "%s master %zu", mpcl_dtype_name(dtype), i);
            assert_true(tu_check_close(what, out->slot[0][i], ref[i].x, n, 1e-5, 1e-5, 1e-5));
            snprintf(what, sizeof what, "%s m %zu", mpcl_dtype_name(dtype), i);
            assert_true(tu_check_close(what, out->slot[1][i], ref[i].m, n, 1e-6, 1e-5, 1e-5));
            if (out->slot[2][i]) {
                snprintf(what, sizeof what, "%s v %zu", mpcl_dtype_name(dtype), i);
                assert_true(tu_check_close(what, out->slot[2][i], ref[i].v, n, 1e-12, 1e-5, 1e-5));
            }
        }
    }
    for (size_t i = 0; i < np; i++) {
        mpcl_tensor_destroy(w[i]);
        mpcl_tensor_destroy(g[i]);
        free(ref[i].x);
        free(ref[i].m);
        free(ref[i].v);
    }
    free(buf);
    free(gd);
    mpcl_loss_scale_destroy(ls);
    mpcl_optimizer_destroy(opt);
}

static const shape odd_shapes[] = {{1, 1}, {1, 7}, {33, 7}, {1, 130}};

static void check_kind(const mpcl_optim_params *p, const shape *sh, size_t np, uint64_t seed) {
    mpcl_context *ctx = tu_context();
    const mpcl_dtype dtypes[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16};
    for (int d = 0; d < 2; d++) {
        run_out a, b;
        /* With the inf step, against the reference ... */
        run(ctx, p, dtypes[d], sh, np, SKIP_AT, -1, 1, seed, &a);
        /* ... and bit for bit the run without that step. */
        run(ctx, p, dtypes[d], sh, np, -1, SKIP_AT, 0, seed, &b);
        assert_int_equal(a.step, NSTEPS - 1);
        assert_same(&a, &b, sh, np, "continuation after the skipped step");
        free_out(&a, np);
        free_out(&b, np);
    }
    mpcl_context_destroy(ctx);
}

static void sgd_momentum_matches_reference(void **state) {
    (void)state;
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    p.weight_decay = 1e-3f;
    check_kind(&p, odd_shapes, 4, 11);
    p.nesterov = 1;
    check_kind(&p, odd_shapes, 4, 12);
}

static void adam_matches_reference(void **state) {
    (void)state;
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    check_kind(&p, odd_shapes, 4, 21);
    p.weight_decay = 0.01f; /* L2 */
    p.lr = 1e-2f;
    check_kind(&p, odd_shapes, 4, 22);
}

static void adamw_matches_reference(void **state) {
    (void)state;
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_ADAMW);
    p.weight_decay = 0.1f; /* large enough to matter over 20 steps */
    check_kind(&p, odd_shapes, 4, 31);
}

static void more_than_one_launch_of_parameters(void **state) {
    (void)state;
    /* Twelve parameters: two launches per step, one step counter. */
    static const shape many[MAXP] = {{1, 1}, {1, 7}, {3, 7}, {1, 13}, {2, 2},  {1, 1},
                                     {5, 3}, {1, 9}, {4, 4}, {1, 1},  {1, 31}, {2, 5}};
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_ADAMW);
    check_kind(&p, many, MAXP, 41);
}

static void defaults_are_documented_values(void **state) {
    (void)state;
    mpcl_optim_params a = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    assert_true(a.lr == 1e-3f && a.beta1 == 0.9f && a.beta2 == 0.999f && a.eps == 1e-7f);
    assert_true(a.weight_decay == 0.0f);
    mpcl_optim_params w = mpcl_optim_default_params(MPCL_OPTIM_ADAMW);
    assert_int_equal(w.kind, MPCL_OPTIM_ADAMW);
    assert_true(w.weight_decay == 0.004f);
    mpcl_optim_params s = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    assert_true(s.lr == 1e-2f && s.momentum == 0.9f && s.nesterov == 0);
}

static void no_loss_scaler_and_initial_master(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    /* The master starts as the working values; without a scaler the
     * gradients are used as they are. One Adam step moves every weight by
     * -lr * sign(g) (to within eps). */
    mpcl_tensor *w, *g;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F16, 3, 3, &w));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F16, 3, 3, &g));
    const float w0[9] = {0.1f, -0.2f, 0.3f, 1.0f, -1.0f, 2.0f, 0.0f, 5.0f, -7.0f};
    const float g0[9] = {1, -1, 2, -2, 0.5f, -0.5f, 3, -3, 1};
    TU_ASSERT_OK(mpcl_tensor_upload_f32(w, w0, 9));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(g, g0, 9));
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    mpcl_optimizer *opt = NULL;
    TU_ASSERT_OK(mpcl_optimizer_create(ctx, &p, &w, 1, &opt));
    assert_int_equal(mpcl_optimizer_param_count(opt), 1);
    float x[9];
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x, 9));
    for (int i = 0; i < 9; i++) assert_true(x[i] == round_storage(MPCL_DTYPE_F16, w0[i]));
    TU_ASSERT_OK(mpcl_optimizer_step(ctx, opt, &g, 1, NULL));
    uint32_t t = 0;
    TU_ASSERT_OK(mpcl_optimizer_read_step(ctx, opt, &t));
    assert_int_equal(t, 1);
    double want[9];
    for (int i = 0; i < 9; i++) {
        double g1 = g0[i]; /* |g| = sqrt(vhat) on the first step */
        want[i] =
            (double)round_storage(MPCL_DTYPE_F16, w0[i]) - 1e-3 * g1 / (fabs(g1) + (double)p.eps);
    }
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x, 9));
    /* f32 rounding of x (|x| <= 7: 2^-24 * 7 = 4.2e-7) dominates. */
    assert_true(tu_check_close("first Adam step", x, want, 9, 1e-6, 1e-6, 1e-6));
    /* The learning rate is a kernel argument: a new one applies next step. */
    TU_ASSERT_OK(mpcl_optimizer_set_lr(opt, 0.0f));
    float before[9];
    memcpy(before, x, sizeof x);
    TU_ASSERT_OK(mpcl_optimizer_step(ctx, opt, &g, 1, NULL));
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x, 9));
    assert_memory_equal(x, before, sizeof x);
    TU_ASSERT_OK(mpcl_optimizer_read_step(ctx, opt, &t));
    assert_int_equal(t, 2);
    assert_int_equal(mpcl_optimizer_set_lr(opt, NAN), MPCL_ERR_INVALID_ARG);
    /* Resuming from a checkpoint: master, moments and step counter written,
     * then one step continues from them (t = 4, bias corrections from
     * the written counter). */
    float xm[9], mm[9], vm[9];
    double rx[9], rm[9], rv[9], gd[9];
    tu_rng r = tu_rng_make(77);
    tu_fill_uniform(&r, xm, 9, -1.0f, 1.0f);
    tu_fill_uniform(&r, mm, 9, -0.1f, 0.1f);
    tu_fill_uniform(&r, vm, 9, 1e-4f, 1e-2f);
    for (int i = 0; i < 9; i++) {
        rx[i] = xm[i];
        rm[i] = mm[i];
        rv[i] = vm[i];
        gd[i] = round_storage(MPCL_DTYPE_F16, g0[i]);
    }
    TU_ASSERT_OK(mpcl_optimizer_set_lr(opt, 1e-2f));
    p.lr = 1e-2f;
    TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, xm, 9));
    TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_M, 0, mm, 9));
    TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_V, 0, vm, 9));
    TU_ASSERT_OK(mpcl_optimizer_write_step(ctx, opt, 3));
    TU_ASSERT_OK(mpcl_optimizer_read_step(ctx, opt, &t));
    assert_int_equal(t, 3);
    TU_ASSERT_OK(mpcl_optimizer_step(ctx, opt, &g, 1, NULL));
    TU_ASSERT_OK(mpcl_optimizer_read_step(ctx, opt, &t));
    assert_int_equal(t, 4);
    ref_state rs = {rx, rm, rv, 3};
    ref_step(&p, &rs, 9, gd, 4);
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x, 9));
    /* One step: the f32 rounding of x (2^-24) and a few ulp of the update. */
    assert_true(tu_check_close("resumed master", x, rx, 9, 1e-6, 1e-6, 1e-6));
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_V, 0, x, 9));
    assert_true(tu_check_close("resumed v", x, rv, 9, 0, 1e-6, 1e-6));
    mpcl_optimizer_destroy(opt);
    mpcl_tensor_destroy(w);
    mpcl_tensor_destroy(g);
    mpcl_context_destroy(ctx);
}

static void errors_touch_nothing(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_tensor *w[2], *g[2], *wrong_shape, *wrong_dtype, *i32;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 2, 3, &w[0]));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, 4, &w[1]));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 2, 3, &g[0]));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, 4, &g[1]));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 3, 2, &wrong_shape));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F16, 1, 4, &wrong_dtype));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_I32, 1, 4, &i32));
    TU_ASSERT_OK(mpcl_tensor_fill(g[0], 1.0f));
    TU_ASSERT_OK(mpcl_tensor_fill(g[1], 1.0f));

    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    mpcl_optimizer *opt = (mpcl_optimizer *)&p;
    p.lr = -1;
    assert_int_equal(mpcl_optimizer_create(ctx, &p, w, 2, &opt), MPCL_ERR_INVALID_ARG);
    assert_null(opt);
    p = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    p.beta2 = 1.0f;
    assert_int_equal(mpcl_optimizer_create(ctx, &p, w, 2, &opt), MPCL_ERR_INVALID_ARG);
    p = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    assert_int_equal(mpcl_optimizer_create(ctx, &p, w, 0, &opt), MPCL_ERR_INVALID_ARG);
    mpcl_tensor *mixed[2] = {w[0], wrong_dtype};
    assert_int_equal(mpcl_optimizer_create(ctx, &p, mixed, 2, &opt), MPCL_ERR_DTYPE);
    mpcl_tensor *ints[1] = {i32};
    assert_int_equal(mpcl_optimizer_create(ctx, &p, ints, 1, &opt), MPCL_ERR_DTYPE);
    assert_null(opt);

    TU_ASSERT_OK(mpcl_optimizer_create(ctx, &p, w, 2, &opt));
    float x0[6] = {1, 2, 3, 4, 5, 6};
    TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x0, 6));
    mpcl_tensor *bad_shape[2] = {wrong_shape, g[1]};
    mpcl_tensor *bad_dtype[2] = {g[0], wrong_dtype};
    assert_int_equal(mpcl_optimizer_step(ctx, opt, bad_shape, 2, NULL), MPCL_ERR_SHAPE);
    assert_int_equal(mpcl_optimizer_step(ctx, opt, bad_dtype, 2, NULL), MPCL_ERR_DTYPE);
    assert_int_equal(mpcl_optimizer_step(ctx, opt, g, 1, NULL), MPCL_ERR_SHAPE);
    float x[6];
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x, 6));
    assert_memory_equal(x, x0, sizeof x);
    uint32_t t = 99;
    TU_ASSERT_OK(mpcl_optimizer_read_step(ctx, opt, &t));
    assert_int_equal(t, 0);

    float y[7];
    for (int i = 0; i < 7; i++) y[i] = tu_poison_f32();
    assert_int_equal(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_M, 0, y, 7), MPCL_ERR_SHAPE);
    assert_int_equal(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_M, 2, y, 4),
                     MPCL_ERR_INVALID_ARG);
    for (int i = 0; i < 7; i++) assert_true(isnan(y[i]));
    assert_int_equal(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 1, x0, 6),
                     MPCL_ERR_SHAPE);
    mpcl_optimizer_destroy(opt);

    /* SGD has no second moment. */
    p = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    TU_ASSERT_OK(mpcl_optimizer_create(ctx, &p, w, 2, &opt));
    assert_false(mpcl_optimizer_has_slot(opt, MPCL_OPTIM_SLOT_V));
    assert_int_equal(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_V, 0, y, 6),
                     MPCL_ERR_INVALID_ARG);
    mpcl_optimizer_destroy(opt);
    mpcl_optimizer_destroy(NULL);
    mpcl_tensor *all[] = {w[0], w[1], g[0], g[1], wrong_shape, wrong_dtype, i32};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_are_documented_values),
        cmocka_unit_test(sgd_momentum_matches_reference),
        cmocka_unit_test(adam_matches_reference),
        cmocka_unit_test(adamw_matches_reference),
        cmocka_unit_test(more_than_one_launch_of_parameters),
        cmocka_unit_test(no_loss_scaler_and_initial_master),
        cmocka_unit_test(errors_touch_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
