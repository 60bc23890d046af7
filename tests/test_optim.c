/* Optimizers over flat arenas: 20 steps of SGD (plain and Nesterov), Adam
 * (with and without L2) and AdamW against a double-precision host reference,
 * in f32 and f16 storage, over parameters of odd sizes laid out back to back
 * in one arena (contiguous, and with gaps of zeros as alignment padding would
 * leave them: the gaps stay exactly 0), with dynamic loss scaling and one
 * step whose gradient holds an inf: that step changes nothing (weights,
 * moments, working copy, step counter), and the run afterwards is bit for bit
 * the run in which the step never happened. The working copy always equals
 * the master rounded to the storage dtype. Clipping by global norm: the norm
 * the device reports against the reference norm of the unscaled gradients,
 * and the updates against the reference that scales g by min(1, clip / norm),
 * with and without loss scaling; a clip above the norm changes no bit. Also:
 * a large arena, no loss scaler, state read/write by range, the name table,
 * parameter checks and the errors (exact status, nothing enqueued). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Steps per run and the step that gets an inf: 20 and 10, or 6 and 3 on slow
 * implementations (Oclgrind, Rusticl), where the whole test took 10 minutes
 * at 20 steps; 6 still has steps before and after the skip and Adam's bias
 * correction moving. Set in main from the suite's device. */
static int g_steps = 20, g_skip_at = 10;
#define MAXP 8
#define U32 0x1p-24 /* unit roundoff of f32 */

/* ---- arenas ---- */

/* Parameter j is elements [off[j], off[j] + size[j]) of every arena; the
 * other elements are padding, zero in the masters and the gradients. */
typedef struct layout {
    const char *name;
    size_t np, n;
    size_t size[MAXP], off[MAXP];
} layout;

/* Each parameter starts at a multiple of `align` elements, and n is one. */
static layout make_layout(const char *name, const size_t *sizes, size_t np, size_t align) {
    layout l = {.name = name, .np = np};
    assert_true(np <= MAXP);
    size_t at = 0;
    for (size_t j = 0; j < np; j++) {
        l.size[j] = sizes[j];
        l.off[j] = at;
        at = (at + sizes[j] + align - 1) / align * align;
    }
    l.n = at;
    return l;
}

/* The optimizer's decay flags over n elements: one per chunk. */
static size_t decay_chunks(size_t n) {
    return (n + MPCL_OPTIM_DECAY_CHUNK - 1) / MPCL_OPTIM_DECAY_CHUNK;
}

static bool is_padding(const layout *l, size_t i) {
    for (size_t j = 0; j < l->np; j++)
        if (i >= l->off[j] && i < l->off[j] + l->size[j]) return false;
    return true;
}

static const size_t odd_sizes[] = {1, 7, 231, 130};
/* Contiguous: n = 369. Padded to 16 elements: offsets 0, 16, 32, 272, gaps
 * [1, 16), [23, 32), [263, 272), [402, 416), n = 416. */
static layout contiguous(void) {
    return make_layout("contiguous", odd_sizes, 4, 1);
}
static layout padded(void) {
    return make_layout("padded", odd_sizes, 4, 16);
}

static float round_storage(mpcl_dtype dtype, float x) {
    if (dtype == MPCL_DTYPE_F16) return mpcl_f16_to_f32(mpcl_f32_to_f16(x));
    if (dtype == MPCL_DTYPE_BF16) return mpcl_bf16_to_f32(mpcl_f32_to_bf16(x));
    return x;
}

/* The bits of x rounded to a 16-bit storage dtype. */
static uint16_t storage_bits(mpcl_dtype dtype, float x) {
    return dtype == MPCL_DTYPE_F16 ? mpcl_f32_to_f16(x) : mpcl_f32_to_bf16(x);
}

/* ---- the host reference, in double ---- */

typedef struct ref_state {
    double *x, *m, *v; /* master, first moment (SGD: momentum buffer), second moment */
} ref_state;

/* RMSprop has no enum constant: the table names it. */
static mpcl_optim_kind rmsprop_kind(void) {
    mpcl_optim_kind k = MPCL_OPTIM_SGD;
    assert_true(mpcl_optim_kind_parse("rmsprop", &k));
    return k;
}

/* One step over n elements; g is the unscaled (and clipped) gradient.
 * decay: the optimizer's flags, one per MPCL_OPTIM_DECAY_CHUNK elements
 * (weight_decay applies where 1); NULL: everywhere. */
static void ref_step(const mpcl_optim_params *p, const uint8_t *decay, ref_state *s, size_t n,
                     const double *g, unsigned t) {
    /* Hyperparameters as the device receives them: the floats, widened. */
    const double lr = p->lr, b1 = p->beta1, b2 = p->beta2, eps = p->eps, mu = p->momentum;
    for (size_t i = 0; i < n; i++) {
        double x = s->x[i], gr = g[i];
        const double wd =
            !decay || decay[i / MPCL_OPTIM_DECAY_CHUNK] ? (double)p->weight_decay : 0.0;
        if (p->kind == rmsprop_kind()) {
            double v = b2 * s->v[i] + (1 - b2) * gr * gr; /* beta2 is rho */
            double b = mu * s->m[i] + gr / (sqrt(v) + eps);
            x -= lr * b;
            s->m[i] = b;
            s->v[i] = v;
        } else if (p->kind == MPCL_OPTIM_SGD) {
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

/* Global-norm clipping: returns the L2 norm of g and, when clip_norm > 0 and
 * the norm exceeds it, scales g by clip_norm / norm (min(1, clip / norm)). */
static double ref_clip(const mpcl_optim_params *p, double *g, size_t n) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += g[i] * g[i];
    double norm = sqrt(ss), clip = p->clip_norm;
    if (clip > 0 && norm > clip)
        for (size_t i = 0; i < n; i++) g[i] *= clip / norm;
    return norm;
}

/* ---- tolerances of the clipped runs ---- */

/* Relative error of the device's gradient norm, sqrt(f32 sum of squares of
 * the stored gradients) / scale (a power of two: exact).
 *  - Uniform gradients: n nonnegative terms, each square rounded once (or
 *    not, with fma), summed in any order are within gamma_n ~ n u of the
 *    exact sum (Higham, Accuracy and Stability, 4.2: with nonnegative terms
 *    the bound is relative); sqrt halves that and adds its own error (OpenCL
 *    allows 3 ulp = 6u): (n/2 + 6) u, 1.3e-5 at n = 416. Worst case; it holds
 *    whatever order the device sums in.
 *  - Grid gradients (k/8 * scale, |k| <= 8, n < 2^17): every square is a
 *    multiple of (scale/8)^2 and every partial sum is below n * scale^2 <
 *    2^23 (scale/8)^2, so each is an f32 exactly, in any order: only the sqrt
 *    rounds, 6u. */
static double grad_norm_rtol(size_t n, bool grid) {
    return grid ? 6 * U32 : (n / 2.0 + 6) * U32;
}

/* ---- one device run ---- */

typedef struct run_cfg {
    const mpcl_optim_params *p;
    mpcl_dtype dtype;
    const layout *lay;
    bool loss_scale; /* dynamic loss scaling; false: ls NULL, scale 1 */
    bool grid;       /* gradients k/8 (see grad_norm_rtol), else uniform in [-1, 1] */
    int inf_at;      /* this step's gradient holds an inf (needs loss_scale) */
    int omit_at;     /* this step is left out (its gradients drawn, not used) */
    bool ref;        /* check against the reference */
    uint64_t seed;
    const uint8_t *decay; /* decay flags to write (decay_chunks of lay); NULL: the default */
} run_cfg;

typedef struct run_out {
    float *slot[MPCL_OPTIM_SLOT_COUNT]; /* whole arenas; NULL for a slot the kind lacks */
    uint32_t step;
    int clipped; /* steps whose reference norm exceeded clip_norm (with ref) */
} run_out;

static void read_all(mpcl_context *ctx, mpcl_optimizer *opt, mpcl_optim_kind kind, size_t n,
                     run_out *o) {
    for (int s = 0; s < MPCL_OPTIM_SLOT_COUNT; s++) {
        o->slot[s] = NULL;
        if (!mpcl_optim_has_slot(kind, (mpcl_optim_slot)s)) continue;
        o->slot[s] = malloc(n * sizeof(float));
        for (size_t j = 0; j < n; j++) o->slot[s][j] = tu_poison_f32();
        TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, (mpcl_optim_slot)s, 0, o->slot[s], n));
    }
    TU_ASSERT_OK(mpcl_optimizer_read_step(ctx, opt, &o->step));
}

static void free_out(run_out *o) {
    for (int s = 0; s < MPCL_OPTIM_SLOT_COUNT; s++) free(o->slot[s]);
}

/* Equal bit for bit (NaN never expected here). */
static void assert_same(const run_out *a, const run_out *b, size_t n, const char *what) {
    for (int s = 0; s < MPCL_OPTIM_SLOT_COUNT; s++) {
        assert_true((a->slot[s] == NULL) == (b->slot[s] == NULL));
        if (!a->slot[s]) continue;
        for (size_t i = 0; i < n; i++)
            if (memcmp(&a->slot[s][i], &b->slot[s][i], sizeof(float)))
                fail_msg("%s: slot %d element %zu: %.9g vs %.9g", what, s, i, (double)a->slot[s][i],
                         (double)b->slot[s][i]);
    }
    assert_int_equal(a->step, b->step);
}

/* The working copy equals the master rounded to the storage dtype, exactly. */
static void assert_working_is_rounded_master(const mpcl_tensor *w, const float *master, size_t n) {
    assert_int_equal(mpcl_tensor_count(w), n);
    const mpcl_dtype dt = mpcl_tensor_dtype(w);
    if (dt == MPCL_DTYPE_F16 || dt == MPCL_DTYPE_BF16) {
        uint16_t *bits = malloc(n * sizeof *bits);
        TU_ASSERT_OK(mpcl_tensor_download_raw(w, bits, n * sizeof *bits));
        for (size_t j = 0; j < n; j++)
            if (bits[j] != storage_bits(dt, master[j]))
                fail_msg("working[%zu] = 0x%04x, master %.9g rounds to 0x%04x", j, bits[j],
                         (double)master[j], storage_bits(dt, master[j]));
        free(bits);
    } else {
        float *x = malloc(n * sizeof *x);
        TU_ASSERT_OK(mpcl_tensor_download_f32(w, x, n));
        for (size_t j = 0; j < n; j++)
            if (memcmp(&x[j], &master[j], sizeof(float)))
                fail_msg("working[%zu] = %.9g, master %.9g", j, (double)x[j], (double)master[j]);
        free(x);
    }
}

/* Padding stays exactly 0 in every slot. */
static void assert_padding_zero(const layout *l, const run_out *o) {
    for (int s = 0; s < MPCL_OPTIM_SLOT_COUNT; s++)
        for (size_t i = 0; o->slot[s] && i < l->n; i++)
            if (is_padding(l, i) && o->slot[s][i] != 0.0f)
                fail_msg("%s layout: padding element %zu of slot %d is %.9g", l->name, i, s,
                         (double)o->slot[s][i]);
}

/* This step's stored gradients (padding 0): the draw times the loss scale,
 * rounded to the storage dtype. Scaling by a power of two is exact, so the
 * unscaled value the device uses is stored / scale. */
static void draw_grads(tu_rng *r, const run_cfg *c, float scale, float *g) {
    const layout *l = c->lay;
    memset(g, 0, l->n * sizeof *g);
    for (size_t j = 0; j < l->np; j++) {
        float *q = g + l->off[j];
        size_t n = l->size[j];
        if (c->grid) {
            for (size_t i = 0; i < n; i++) q[i] = (float)floor(tu_uniform(r, -8, 9)) / 8;
            /* The largest squares at both ends of each parameter: a dropped or
             * doubled end element moves the norm far beyond its tolerance. */
            q[0] = 1.0f;
            q[n - 1] = -1.0f;
        } else {
            tu_fill_uniform(r, q, n, -1.0f, 1.0f);
        }
        for (size_t i = 0; i < n; i++) q[i] = round_storage(c->dtype, q[i] * scale);
    }
}

/* Runs g_steps steps; returns the final state in *out (free_out). Checks the
 * step counter, the loss scaler, the working copy and the padding always; with
 * c->ref also the skipped step, each step's gradient norm (when clipping) and
 * the end state against the reference. */
static void run(mpcl_context *ctx, const run_cfg *c, run_out *out) {
    const layout *l = c->lay;
    const mpcl_optim_params *p = c->p;
    const size_t n = l->n;
    assert_true(c->loss_scale || c->inf_at < 0);
    tu_rng r = tu_rng_make(c->seed);
    mpcl_tensor *master = tu_tensor(ctx, MPCL_DTYPE_F32, 1, n);
    mpcl_tensor *working = tu_tensor(ctx, c->dtype, 1, n);
    mpcl_tensor *grads = tu_tensor(ctx, c->dtype, 1, n);
    tu_poison(working); /* writing the masters must set all of it */
    ref_state ref = {calloc(n, sizeof(double)), calloc(n, sizeof(double)),
                     calloc(n, sizeof(double))};
    float *buf = calloc(n, sizeof(float));
    double *gd = malloc(n * sizeof(double));
    mpcl_optimizer *opt = NULL;
    TU_ASSERT_OK(mpcl_optimizer_create(ctx, p, master, working, &opt));
    if (c->decay) TU_ASSERT_OK(mpcl_optimizer_write_decay(ctx, opt, c->decay, decay_chunks(n)));
    /* Start from f32 masters (not values rounded to the storage dtype). */
    for (size_t j = 0; j < l->np; j++) tu_fill_uniform(&r, buf + l->off[j], l->size[j], -1, 1);
    for (size_t i = 0; i < n; i++) ref.x[i] = buf[i];
    TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, buf, n));
    mpcl_loss_scale_params lp = mpcl_loss_scale_default_params();
    mpcl_loss_scale *ls = NULL;
    float scale = 1.0f; /* the host's model of the device scale */
    if (c->loss_scale) {
        TU_ASSERT_OK(mpcl_loss_scale_create(ctx, &lp, &ls));
        scale = lp.initial_scale;
    }
    const double norm_rtol = grad_norm_rtol(n, c->grid);
    unsigned t = 0;
    out->clipped = 0;
    for (int s = 0; s < g_steps; s++) {
        /* Draw every step's gradients, used or not, so that runs agree. */
        draw_grads(&r, c, scale, buf);
        const bool skip = s == c->inf_at;
        if (skip) buf[l->off[l->np / 2] + l->size[l->np / 2] - 1] = INFINITY;
        if (s == c->omit_at) continue;
        TU_ASSERT_OK(mpcl_tensor_upload_f32(grads, buf, n));
        double norm = 0;
        if (c->ref && !skip) {
            for (size_t i = 0; i < n; i++) gd[i] = (double)buf[i] / (double)scale;
            norm = ref_clip(p, gd, n);
            if (p->clip_norm > 0 && norm > (double)p->clip_norm) out->clipped++;
            ref_step(p, c->decay, &ref, n, gd, t + 1);
        }
        run_out before = {0};
        if (skip && c->ref) read_all(ctx, opt, p->kind, n, &before);
        if (ls) TU_ASSERT_OK(mpcl_loss_scale_check(ctx, ls, &grads, 1));
        TU_ASSERT_OK(mpcl_optimizer_step(ctx, opt, grads, ls));
        if (ls) TU_ASSERT_OK(mpcl_loss_scale_update(ctx, ls));
        if (c->ref && p->clip_norm > 0) {
            float dn = 0;
            TU_ASSERT_OK(mpcl_optimizer_read_grad_norm(ctx, opt, &dn));
            if (skip ? isfinite(dn) : !(fabs((double)dn - norm) <= norm_rtol * norm))
                fail_msg("step %d: gradient norm %.9g, reference %.9g (rtol %.3g)", s, (double)dn,
                         norm, norm_rtol);
        }
        if (skip) {
            scale *= lp.backoff_factor;
            if (c->ref) {
                run_out after;
                read_all(ctx, opt, p->kind, n, &after);
                assert_same(&before, &after, n, "the skipped step");
                assert_working_is_rounded_master(working, after.slot[MPCL_OPTIM_SLOT_MASTER], n);
                free_out(&before);
                free_out(&after);
            }
        } else {
            t++;
        }
    }
    read_all(ctx, opt, p->kind, n, out);
    assert_int_equal(out->step, t);
    if (ls) {
        mpcl_loss_scale_state lst;
        TU_ASSERT_OK(mpcl_loss_scale_read(ctx, ls, &lst));
        assert_true(lst.scale == scale);
        assert_int_equal(lst.skipped_steps, c->inf_at >= 0 ? 1 : 0);
    }
    assert_working_is_rounded_master(working, out->slot[MPCL_OPTIM_SLOT_MASTER], n);
    assert_padding_zero(l, out);
    if (c->ref) {
        /* Tolerances. The device runs the same formulas in f32 on the same
         * inputs (the stored gradients, the f32 hyperparameters), so the
         * differences are f32 rounding only: each step rounds the master (up
         * to |x| <= ~3 here: 2^-24 * 3 = 1.8e-7) and computes an update of at
         * most lr * ~10 with a relative error of a few ulp (sqrt, the
         * divisions: < 1e-6 relative), over 19 steps: < 1e-5 absolute. The
         * moments are sums of a few rounded products: relative 1e-5 (Adam's
         * v is tiny, (1 - beta2) g^2, so its atol is tiny too).
         * Clipping adds the error d of the device's factor clip / norm:
         * grad_norm_rtol plus the division (OpenCL: 2.5 ulp = 5u). It scales
         * each clipped gradient (|g| <= 1) by (1 + d): SGD's buffer sums
         * mu^k g, off by at most d / (1 - mu) = 10 d, and so is the step
         * (plain b, or Nesterov g + mu b: d + 9 d). For Adam, with t <= 20
         * and beta2 = 0.999 every weight of vhat is >= 0.98 / t, so by
         * Cauchy-Schwarz |mhat| and the perturbation sum(w |g| d) are at most
         * sqrt(t / 0.98) sqrt(vhat) (* d) = 4.5 sqrt(vhat) (* d), and
         * lr mhat / sqrt(vhat) moves by at most 9 lr d. So the master gains
         * g_steps * lr * 10 d (2.6e-5 for SGD at n = 416), the buffer or m
         * 10 d, and v, a sum of (1 + d)^2-scaled squares, 2 d relative. */
        double d = out->clipped ? norm_rtol + 5 * U32 : 0;
        double x_atol = 1e-5 + g_steps * (double)p->lr * 10 * d, m_atol = 1e-6 + 10 * d,
               rtol = 1e-5 + 2 * d;
        char what[96];
        const char *kind = mpcl_optim_kind_name(p->kind), *dt = mpcl_dtype_name(c->dtype);
        snprintf(what, sizeof what, "%s %s %s master", kind, dt, l->name);
        assert_true(tu_check_close(what, out->slot[MPCL_OPTIM_SLOT_MASTER], ref.x, n, x_atol, rtol,
                                   x_atol + rtol));
        snprintf(what, sizeof what, "%s %s %s m", kind, dt, l->name);
        assert_true(tu_check_close(what, out->slot[MPCL_OPTIM_SLOT_M], ref.m, n, m_atol, rtol,
                                   rtol + 10 * d));
        if (out->slot[MPCL_OPTIM_SLOT_V]) {
            snprintf(what, sizeof what, "%s %s %s v", kind, dt, l->name);
            assert_true(
                tu_check_close(what, out->slot[MPCL_OPTIM_SLOT_V], ref.v, n, 1e-12, rtol, rtol));
        }
    }
    mpcl_tensor_destroy(master);
    mpcl_tensor_destroy(working);
    mpcl_tensor_destroy(grads);
    free(ref.x);
    free(ref.m);
    free(ref.v);
    free(buf);
    free(gd);
    mpcl_loss_scale_destroy(ls);
    mpcl_optimizer_destroy(opt);
}

static const mpcl_dtype storage_dtypes[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};
enum { STORAGE_DTYPES = sizeof storage_dtypes / sizeof storage_dtypes[0] };

/* With dynamic loss scaling, in both storage dtypes: the run with an inf step
 * against the reference, and bit for bit the run without that step. Returns
 * the clipped steps of the reference runs. */
static int check_skip_and_reference(mpcl_context *ctx, const mpcl_optim_params *p, const layout *l,
                                    bool grid, uint64_t seed, const uint8_t *decay) {
    int clipped = 0;
    for (int d = 0; d < STORAGE_DTYPES; d++) {
        run_out a, b;
        run_cfg c = {p, storage_dtypes[d], l, true, grid, g_skip_at, -1, true, seed, decay};
        run(ctx, &c, &a);
        c.inf_at = -1;
        c.omit_at = g_skip_at;
        c.ref = false;
        run(ctx, &c, &b);
        assert_int_equal(a.step, g_steps - 1);
        assert_same(&a, &b, l->n, "continuation after the skipped step");
        clipped += a.clipped;
        free_out(&a);
        free_out(&b);
    }
    return clipped;
}

/* Both layouts; on slow implementations (under Oclgrind this test took 13
 * minutes) the padded one only, which has every parameter and the gaps. */
static void check_kind(const mpcl_optim_params *p, uint64_t seed) {
    mpcl_context *ctx = tu_context();
    const layout layouts[] = {padded(), contiguous()};
    const int nl = tu_slow_device(ctx) ? 1 : 2;
    for (int k = 0; k < nl; k++)
        check_skip_and_reference(ctx, p, &layouts[k], false, seed + k, NULL);
    mpcl_context_destroy(ctx);
}

static void sgd_momentum_matches_reference(void **state) {
    (void)state;
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    p.momentum = 0.9f;
    p.weight_decay = 1e-3f;
    check_kind(&p, 11);
    p.nesterov = 1;
    check_kind(&p, 13);
}

static void adam_matches_reference(void **state) {
    (void)state;
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    check_kind(&p, 21);
    p.weight_decay = 0.01f; /* L2 */
    p.lr = 1e-2f;
    check_kind(&p, 23);
}

/* Keras' defaults (rho 0.9, momentum 0, epsilon 1e-7), then with momentum
 * and a larger learning rate. */
static void rmsprop_matches_reference(void **state) {
    (void)state;
    mpcl_optim_params p = mpcl_optim_default_params(rmsprop_kind());
    assert_true(p.lr == 1e-3f && p.beta2 == 0.9f && p.momentum == 0.0f && p.eps == 1e-7f);
    check_kind(&p, 51);
    TU_ASSERT_OK(mpcl_optim_params_set(NULL, &p, "momentum", "0.9"));
    TU_ASSERT_OK(mpcl_optim_params_set(NULL, &p, "rho", "0.8"));
    TU_ASSERT_OK(mpcl_optim_params_set(NULL, &p, "learning_rate", "0.01"));
    assert_true(p.momentum == 0.9f && p.beta2 == 0.8f);
    check_kind(&p, 53);
}

static void adamw_matches_reference(void **state) {
    (void)state;
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_ADAMW);
    p.weight_decay = 0.1f; /* large enough to matter over 20 steps */
    check_kind(&p, 31);
}

/* Decay flags (mpcl_optimizer_write_decay) as a model writes them under
 * decay_vectors = false: parameters 1 and 2 decay (its matrices), 0 and 3
 * do not (its vectors). Odd sizes, each starting on a chunk as a model's
 * rows do, so that 1 and 3 end mid-chunk; n = 2496: with work-groups of 256
 * the eight-element kernel takes the first 2048 elements, the scalar one
 * the rest, and parameter 2 spans both. SGD's and Adam's L2 and AdamW's
 * decoupled decay against the reference with the same flags, with a
 * weight decay large enough that a flag ignored shows. */
static void decay_flags_select_the_parameters(void **state) {
    (void)state;
    static const size_t sizes[] = {1, 7, 2311, 130};
    const bool decays[] = {false, true, true, false};
    const layout l = make_layout("chunked", sizes, 4, 2 * MPCL_OPTIM_DECAY_CHUNK);
    assert_int_equal(l.n, 2496);
    uint8_t flags[2496 / MPCL_OPTIM_DECAY_CHUNK] = {0};
    for (size_t j = 0; j < l.np; j++) {
        assert_int_equal(l.off[j] % MPCL_OPTIM_DECAY_CHUNK, 0);
        for (size_t c = l.off[j] / MPCL_OPTIM_DECAY_CHUNK; c < decay_chunks(l.off[j] + l.size[j]);
             c++)
            flags[c] = decays[j];
    }
    assert_true((l.off[1] + l.size[1]) % MPCL_OPTIM_DECAY_CHUNK != 0); /* ends mid-chunk */
    mpcl_context *ctx = tu_context();
    const mpcl_optim_kind kinds[] = {MPCL_OPTIM_SGD, MPCL_OPTIM_ADAM, MPCL_OPTIM_ADAMW};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        mpcl_optim_params p = mpcl_optim_default_params(kinds[k]);
        p.weight_decay = 0.1f;
        if (kinds[k] != MPCL_OPTIM_ADAMW) p.lr = 1e-2f;
        check_skip_and_reference(ctx, &p, &l, false, 61 + k, flags);
    }
    /* The flags' count and values are checked. */
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_ADAMW);
    mpcl_tensor *master = tu_tensor(ctx, MPCL_DTYPE_F32, 1, 9);
    mpcl_tensor *working = tu_tensor(ctx, MPCL_DTYPE_F32, 1, 9);
    mpcl_optimizer *opt = NULL;
    TU_ASSERT_OK(mpcl_optimizer_create(ctx, &p, master, working, &opt));
    const uint8_t two[2] = {1, 0}, bad[2] = {1, 2};
    TU_ASSERT_OK(mpcl_optimizer_write_decay(ctx, opt, two, 2)); /* 9 elements: 2 chunks */
    assert_int_equal(mpcl_optimizer_write_decay(ctx, opt, two, 1), MPCL_ERR_SHAPE);
    assert_non_null(strstr(mpcl_errmsg(), "1 for an arena of 9 elements, which has 2 chunks"));
    assert_int_equal(mpcl_optimizer_write_decay(ctx, opt, bad, 2), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "decay flag 1 is 2"));
    mpcl_optimizer_destroy(opt);
    mpcl_tensor_destroy(master);
    mpcl_tensor_destroy(working);
    mpcl_context_destroy(ctx);
}

/* A 100003-element arena (5003 on slow implementations, still over the 4096
 * work-items of the norm's first pass): AdamW without clipping, and SGD
 * clipped on grid gradients, whose norm is exact to a sqrt's rounding. */
static void large_arena(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const bool slow = tu_slow_device(ctx);
    const size_t big[] = {3, 65537, 34463}, small[] = {3, 4099, 901};
    const layout l = make_layout("large", slow ? small : big, 3, 1);
    assert_true(l.n < (size_t)1 << 17); /* grad_norm_rtol's grid bound */
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_ADAMW);
    check_skip_and_reference(ctx, &p, &l, false, 41, NULL);
    p = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    p.clip_norm = 10.0f; /* the norm is ~sqrt(0.375 n) >= 43 */
    assert_int_equal(check_skip_and_reference(ctx, &p, &l, true, 43, NULL),
                     STORAGE_DTYPES * (g_steps - 1));
    mpcl_context_destroy(ctx);
}

/* Clipping against the reference, in both storage dtypes: with dynamic loss
 * scaling and an inf step (skipped exactly) on the padded layout, and with
 * and without a loss scaler on the contiguous one (whose last element is a
 * gradient, not padding). clip is below every step's norm (~11 here) or
 * above all of them; above, the run is also bit for bit the run without
 * clipping (the factor is exactly 1). Slow implementations skip the
 * contiguous runs with a loss scaler. */
static void check_clip(mpcl_context *ctx, const mpcl_optim_params *base, float clip,
                       uint64_t seed) {
    const layout pad = padded(), l = contiguous();
    mpcl_optim_params p = *base, unclipped = *base;
    p.clip_norm = clip;
    unclipped.clip_norm = 0.0f;
    const bool below = clip < 5.0f, slow = tu_slow_device(ctx);
    int clipped = check_skip_and_reference(ctx, &p, &pad, false, seed, NULL);
    assert_int_equal(clipped, below ? STORAGE_DTYPES * (g_steps - 1) : 0);
    for (int d = 0; d < 2; d++)
        for (int scaled = 0; scaled < (slow ? 1 : 2); scaled++) {
            run_out a, b;
            run_cfg c = {&p, storage_dtypes[d], &l, scaled, false, -1, -1, true, seed + 1, NULL};
            run(ctx, &c, &a);
            assert_int_equal(a.step, g_steps);
            assert_int_equal(a.clipped, below ? g_steps : 0);
            if (!below) {
                c.p = &unclipped;
                c.ref = false;
                run(ctx, &c, &b);
                assert_same(&a, &b, l.n, "clip above the norm against no clipping");
                free_out(&b);
            }
            free_out(&a);
        }
}

static void clip_norm_matches_reference(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    p.weight_decay = 1e-3f;
    check_clip(ctx, &p, 2.0f, 51);
    check_clip(ctx, &p, 100.0f, 53);
    p.nesterov = 1;
    if (!tu_slow_device(ctx)) check_clip(ctx, &p, 2.0f, 55);
    p = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    check_clip(ctx, &p, 2.0f, 57);
    check_clip(ctx, &p, 100.0f, 59);
    mpcl_context_destroy(ctx);
}

/* A hand-checked case: g = (0.375, 0.5, 0) has norm 0.625; clip 0.125
 * scales it by 0.2 to (0.075, 0.1, 0). With a loss scale of 2^15 the stored
 * gradients are 2^15 times larger (still finite in f16) and the reported norm
 * is still 0.625. The norm reads NaN before the
 * first step with clipping and on an optimizer without it. */
static void clip_norm_by_hand(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    for (int scaled = 0; scaled < 2; scaled++) {
        mpcl_tensor *master = tu_tensor(ctx, MPCL_DTYPE_F32, 1, 3);
        mpcl_tensor *working = tu_tensor(ctx, MPCL_DTYPE_F16, 1, 3);
        mpcl_tensor *g = tu_tensor(ctx, MPCL_DTYPE_F16, 1, 3);
        mpcl_loss_scale_params lp = mpcl_loss_scale_default_params();
        mpcl_loss_scale *ls = NULL;
        const float s = scaled ? lp.initial_scale : 1.0f;
        if (scaled) TU_ASSERT_OK(mpcl_loss_scale_create(ctx, &lp, &ls));
        const float g0[3] = {0.375f * s, 0.5f * s, 0};
        TU_ASSERT_OK(mpcl_tensor_upload_f32(g, g0, 3));
        mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_SGD);
        p.lr = 1.0f;
        p.momentum = 0.0f;
        p.clip_norm = 0.125f;
        mpcl_optimizer *opt = NULL;
        TU_ASSERT_OK(mpcl_optimizer_create(ctx, &p, master, working, &opt));
        float norm = 0;
        TU_ASSERT_OK(mpcl_optimizer_read_grad_norm(ctx, opt, &norm));
        assert_true(isnan(norm));
        if (ls) TU_ASSERT_OK(mpcl_loss_scale_check(ctx, ls, &g, 1));
        TU_ASSERT_OK(mpcl_optimizer_step(ctx, opt, g, ls));
        if (ls) TU_ASSERT_OK(mpcl_loss_scale_update(ctx, ls));
        TU_ASSERT_OK(mpcl_optimizer_read_grad_norm(ctx, opt, &norm));
        /* sqrt(0.390625 s^2) / s: every step exact but the sqrt (3 ulp). */
        if (!(fabs((double)norm - 0.625) <= 0.625 * 6 * U32))
            fail_msg("norm %.9g, want 0.625", (double)norm);
        float x[3];
        TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x, 3));
        /* x = 0 - 1 * g * (factor / s): a few roundings of values < 1. */
        const double want[3] = {-0.075, -0.1, 0.0};
        assert_true(tu_check_close("clipped SGD step", x, want, 3, 1e-6, 1e-6, 1e-6));
        assert_working_is_rounded_master(working, x, 3);
        mpcl_optimizer_destroy(opt);
        /* Without clipping the norm is never computed. */
        p.clip_norm = 0.0f;
        TU_ASSERT_OK(mpcl_optimizer_create(ctx, &p, master, working, &opt));
        TU_ASSERT_OK(mpcl_optimizer_step(ctx, opt, g, ls));
        TU_ASSERT_OK(mpcl_optimizer_read_grad_norm(ctx, opt, &norm));
        assert_true(isnan(norm));
        mpcl_optimizer_destroy(opt);
        mpcl_loss_scale_destroy(ls);
        mpcl_tensor_destroy(master);
        mpcl_tensor_destroy(working);
        mpcl_tensor_destroy(g);
    }
    mpcl_context_destroy(ctx);
}

static void defaults_are_documented_values(void **state) {
    (void)state;
    mpcl_optim_params a = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    assert_true(a.lr == 1e-3f && a.beta1 == 0.9f && a.beta2 == 0.999f && a.eps == 1e-7f);
    assert_true(a.weight_decay == 0.0f && a.clip_norm == 0.0f);
    mpcl_optim_params w = mpcl_optim_default_params(MPCL_OPTIM_ADAMW);
    assert_int_equal(w.kind, MPCL_OPTIM_ADAMW);
    assert_true(w.weight_decay == 0.004f && w.clip_norm == 0.0f);
    mpcl_optim_params s = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    assert_true(s.lr == 1e-2f && s.momentum == 0.0f && s.nesterov == 0 && s.clip_norm == 0.0f);
}

/* Every kind's name parses back to it and appears in the list of names;
 * unknown names (case-sensitive) are rejected and leave *out alone. */
static void kind_names_round_trip(void **state) {
    (void)state;
    static const char *const first[] = {
        [MPCL_OPTIM_SGD] = "sgd", [MPCL_OPTIM_ADAM] = "adam", [MPCL_OPTIM_ADAMW] = "adamw"};
    const int count = (int)mpcl_optim_kind_count();
    assert_true(count >= 3);
    const char *list = mpcl_optim_kind_names();
    assert_non_null(list);
    for (int k = 0; k < count; k++) {
        const char *name = mpcl_optim_kind_name((mpcl_optim_kind)k);
        assert_non_null(name);
        if (k < 3) assert_string_equal(name, first[k]);
        assert_non_null(strstr(list, name));
        assert_non_null(mpcl_optim_kind_keras_name((mpcl_optim_kind)k));
        mpcl_optim_kind out = (mpcl_optim_kind)count;
        assert_true(mpcl_optim_kind_parse(name, &out));
        assert_int_equal(out, k);
    }
    assert_string_equal(mpcl_optim_kind_keras_name(MPCL_OPTIM_ADAMW), "AdamW");
    assert_null(mpcl_optim_kind_name((mpcl_optim_kind)count));
    assert_null(mpcl_optim_kind_keras_name((mpcl_optim_kind)count));
    assert_null(mpcl_optim_kind_name((mpcl_optim_kind)-1));
    const char *bad[] = {"", "Adam", "ADAMW", "adam ", "adamx", "sg", "lamb"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mpcl_optim_kind out = MPCL_OPTIM_ADAMW;
        if (mpcl_optim_kind_parse(bad[i], &out)) fail_msg("\"%s\" parsed", bad[i]);
        assert_int_equal(out, MPCL_OPTIM_ADAMW);
    }
    mpcl_optim_kind out = MPCL_OPTIM_ADAMW;
    assert_false(mpcl_optim_kind_parse(NULL, &out));
    assert_int_equal(out, MPCL_OPTIM_ADAMW);
}

/* Hyperparameters by Keras' name: learning_rate first and global_clipnorm
 * last for every kind, text in and out, and errors that name the optimizer,
 * the hyperparameter and what it takes, leaving p as it was. */
static void params_by_name(void **state) {
    (void)state;
    for (int k = 0; k < (int)mpcl_optim_kind_count(); k++) {
        size_t n = mpcl_optim_param_count((mpcl_optim_kind)k);
        assert_true(n >= 2);
        assert_string_equal(mpcl_optim_param_name((mpcl_optim_kind)k, 0), "learning_rate");
        assert_string_equal(mpcl_optim_param_field((mpcl_optim_kind)k, 0), "lr");
        assert_string_equal(mpcl_optim_param_name((mpcl_optim_kind)k, n - 1), "global_clipnorm");
        assert_null(mpcl_optim_param_name((mpcl_optim_kind)k, n));
        /* Each default, as text, reads back as the default params' value. */
        mpcl_optim_params p = mpcl_optim_default_params((mpcl_optim_kind)k);
        for (size_t i = 0; i < n; i++) {
            char buf[32];
            const char *name = mpcl_optim_param_name((mpcl_optim_kind)k, i);
            TU_ASSERT_OK(mpcl_optim_params_get(NULL, &p, name, buf, sizeof buf));
            mpcl_optim_params q = p;
            TU_ASSERT_OK(mpcl_optim_params_set(NULL, &q, name,
                                               mpcl_optim_param_default((mpcl_optim_kind)k, i)));
            assert_memory_equal(&p, &q, sizeof p);
        }
    }
    assert_int_equal(mpcl_optim_param_count((mpcl_optim_kind)mpcl_optim_kind_count()), 0);

    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    TU_ASSERT_OK(mpcl_optim_params_set(NULL, &p, "momentum", "0.5"));
    TU_ASSERT_OK(mpcl_optim_params_set(NULL, &p, "nesterov", "true"));
    TU_ASSERT_OK(mpcl_optim_params_set(NULL, &p, "learning_rate", "0.25"));
    assert_true(p.momentum == 0.5f && p.nesterov == 1 && p.lr == 0.25f);
    char buf[32];
    TU_ASSERT_OK(mpcl_optim_params_get(NULL, &p, "nesterov", buf, sizeof buf));
    assert_string_equal(buf, "true");
    TU_ASSERT_OK(mpcl_optim_params_get(NULL, &p, "momentum", buf, sizeof buf));
    assert_string_equal(buf, "0.5");
    /* The shortest text that reads back as the float, not its 9 digits. */
    mpcl_optim_params adam = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    TU_ASSERT_OK(mpcl_optim_params_get(NULL, &adam, "beta_1", buf, sizeof buf));
    assert_string_equal(buf, "0.9");
    assert_int_equal(mpcl_optim_params_get(NULL, &p, "momentum", buf, 3), MPCL_ERR_INVALID_ARG);

    const struct {
        mpcl_optim_kind kind;
        const char *name, *text, *words[3];
    } bad[] = {
        {MPCL_OPTIM_SGD, "momentum", "1.5", {"sgd", "momentum", "[0, 1]"}},
        {MPCL_OPTIM_SGD, "nesterov", "1", {"sgd", "nesterov", "true or false"}},
        {MPCL_OPTIM_SGD, "beta_1", "0.5", {"sgd", "'beta_1'", "momentum, nesterov"}},
        {MPCL_OPTIM_ADAM, "beta_1", "1", {"adam", "beta_1", "[0, 1)"}},
        {MPCL_OPTIM_ADAM, "epsilon", "0", {"adam", "epsilon", "> 0"}},
        {MPCL_OPTIM_ADAM, "epsilon", "+1", {"adam", "epsilon", "plain decimal"}},
        {MPCL_OPTIM_ADAMW, "weight_decay", "-1", {"adamw", "weight_decay", ">= 0"}},
        {MPCL_OPTIM_ADAMW, "learning_rate", "1e39", {"adamw", "learning_rate", "finite"}},
        {MPCL_OPTIM_ADAMW, "global_clipnorm", "nan", {"adamw", "global_clipnorm", "'nan'"}},
        {MPCL_OPTIM_ADAMW, "momentum", "0.5", {"adamw", "'momentum'", "beta_2, epsilon"}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mpcl_optim_params q = mpcl_optim_default_params(bad[i].kind), q0 = q;
        assert_int_equal(mpcl_optim_params_set(NULL, &q, bad[i].name, bad[i].text),
                         MPCL_ERR_INVALID_ARG);
        assert_memory_equal(&q, &q0, sizeof q);
        for (int w = 0; w < 3; w++)
            if (!strstr(mpcl_errmsg(), bad[i].words[w]))
                fail_msg("%s=%s: '%s' lacks '%s'", bad[i].name, bad[i].text, mpcl_errmsg(),
                         bad[i].words[w]);
    }
}

static void params_check(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    for (int k = 0; k < (int)mpcl_optim_kind_count(); k++) {
        mpcl_optim_params p = mpcl_optim_default_params((mpcl_optim_kind)k);
        assert_int_equal(mpcl_optim_params_check(NULL, &p), MPCL_OK);
        const float ok[] = {0.0f, 1e-30f, 1.0f, 1e30f};
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
            p.clip_norm = ok[i];
            assert_int_equal(mpcl_optim_params_check(ctx, &p), MPCL_OK);
        }
        const float bad[] = {-1.0f, -1e-30f, NAN, INFINITY, -INFINITY};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            p.clip_norm = bad[i];
            assert_int_equal(mpcl_optim_params_check(ctx, &p), MPCL_ERR_INVALID_ARG);
            assert_int_equal(mpcl_optim_params_check(NULL, &p), MPCL_ERR_INVALID_ARG);
        }
        p = mpcl_optim_default_params((mpcl_optim_kind)k);
        p.lr = NAN;
        assert_int_equal(mpcl_optim_params_check(ctx, &p), MPCL_ERR_INVALID_ARG);
        /* A field the kind does not declare is not its business. */
        char buf[32];
        bool has_decay =
            mpcl_optim_params_get(NULL, &p, "weight_decay", buf, sizeof buf) == MPCL_OK;
        p = mpcl_optim_default_params((mpcl_optim_kind)k);
        p.weight_decay = -1e-3f;
        assert_int_equal(mpcl_optim_params_check(ctx, &p),
                         has_decay ? MPCL_ERR_INVALID_ARG : MPCL_OK);
    }
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    p.kind = (mpcl_optim_kind)mpcl_optim_kind_count();
    assert_int_equal(mpcl_optim_params_check(ctx, &p), MPCL_ERR_INVALID_ARG);
    /* The check names the optimizer, the hyperparameter and its range. */
    p = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    p.beta2 = 1.0f;
    assert_int_equal(mpcl_optim_params_check(ctx, &p), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "optimizer adam: beta_2 1 is not in [0, 1)"));
    mpcl_context_destroy(ctx);
}

static void no_loss_scaler_and_taken_arenas(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    /* Master and working copy are taken as they are; writing a range of the
     * master rewrites that range of the working copy and no other. Without a
     * scaler the gradients are used as they are: one Adam step moves every
     * weight by -lr * sign(g) (to within eps). */
    mpcl_tensor *master = tu_tensor(ctx, MPCL_DTYPE_F32, 1, 9);
    mpcl_tensor *working = tu_tensor(ctx, MPCL_DTYPE_F16, 1, 9);
    mpcl_tensor *g = tu_tensor(ctx, MPCL_DTYPE_F16, 1, 9);
    const float w0[9] = {0.1f, -0.2f, 0.3f, 1.0f, -1.0f, 2.0f, 0.0f, 5.0f, -7.0f};
    const float g0[9] = {1, -1, 2, -2, 0.5f, -0.5f, 3, -3, 1}; /* exact in f16 */
    TU_ASSERT_OK(mpcl_tensor_upload_f32(master, w0, 9));
    tu_poison(working);
    TU_ASSERT_OK(mpcl_tensor_upload_f32(g, g0, 9));
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    mpcl_optimizer *opt = NULL;
    TU_ASSERT_OK(mpcl_optimizer_create(ctx, &p, master, working, &opt));
    float x[9];
    uint16_t wb[9];
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x, 9));
    assert_memory_equal(x, w0, sizeof x);
    TU_ASSERT_OK(mpcl_tensor_download_raw(working, wb, sizeof wb));
    for (int i = 0; i < 9; i++) assert_int_equal(wb[i], TU_POISON_F16);
    TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 2, w0 + 2, 4));
    TU_ASSERT_OK(mpcl_tensor_download_raw(working, wb, sizeof wb));
    for (int i = 0; i < 9; i++)
        assert_int_equal(wb[i], i >= 2 && i < 6 ? mpcl_f32_to_f16(w0[i]) : TU_POISON_F16);
    TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, w0, 9));
    assert_working_is_rounded_master(working, w0, 9);

    TU_ASSERT_OK(mpcl_optimizer_step(ctx, opt, g, NULL));
    uint32_t t = 0;
    TU_ASSERT_OK(mpcl_optimizer_read_step(ctx, opt, &t));
    assert_int_equal(t, 1);
    double want[9];
    for (int i = 0; i < 9; i++) {
        double g1 = g0[i]; /* |g| = sqrt(vhat) on the first step */
        want[i] = (double)w0[i] - 1e-3 * g1 / (fabs(g1) + (double)p.eps);
    }
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x, 9));
    /* f32 rounding of x (|x| <= 7: 2^-24 * 7 = 4.2e-7) dominates. */
    assert_true(tu_check_close("first Adam step", x, want, 9, 1e-6, 1e-6, 1e-6));
    assert_working_is_rounded_master(working, x, 9);
    /* The learning rate is a kernel argument: a new one applies next step. */
    TU_ASSERT_OK(mpcl_optimizer_set_lr(opt, 0.0f));
    float before[9];
    memcpy(before, x, sizeof x);
    TU_ASSERT_OK(mpcl_optimizer_step(ctx, opt, g, NULL));
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x, 9));
    assert_memory_equal(x, before, sizeof x);
    TU_ASSERT_OK(mpcl_optimizer_read_step(ctx, opt, &t));
    assert_int_equal(t, 2);
    assert_int_equal(mpcl_optimizer_set_lr(opt, NAN), MPCL_ERR_INVALID_ARG);
    assert_int_equal(mpcl_optimizer_set_lr(opt, -1.0f), MPCL_ERR_INVALID_ARG);
    assert_true(mpcl_optimizer_get_params(opt).lr == 0.0f);
    /* Resuming from a checkpoint: master, moments and step counter written,
     * then one step continues from them (t = 4, bias corrections from the
     * written counter). */
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
        gd[i] = g0[i];
    }
    TU_ASSERT_OK(mpcl_optimizer_set_lr(opt, 1e-2f));
    p.lr = 1e-2f;
    TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, xm, 9));
    TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_M, 0, mm, 9));
    TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_V, 0, vm, 9));
    TU_ASSERT_OK(mpcl_optimizer_write_step(ctx, opt, 3));
    TU_ASSERT_OK(mpcl_optimizer_read_step(ctx, opt, &t));
    assert_int_equal(t, 3);
    TU_ASSERT_OK(mpcl_optimizer_step(ctx, opt, g, NULL));
    TU_ASSERT_OK(mpcl_optimizer_read_step(ctx, opt, &t));
    assert_int_equal(t, 4);
    ref_state rs = {rx, rm, rv};
    ref_step(&p, NULL, &rs, 9, gd, 4);
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x, 9));
    /* One step: the f32 rounding of x (2^-24) and a few ulp of the update. */
    assert_true(tu_check_close("resumed master", x, rx, 9, 1e-6, 1e-6, 1e-6));
    assert_working_is_rounded_master(working, x, 9);
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_V, 0, x, 9));
    assert_true(tu_check_close("resumed v", x, rv, 9, 0, 1e-6, 1e-6));
    mpcl_optimizer_destroy(opt);
    mpcl_tensor_destroy(master);
    mpcl_tensor_destroy(working);
    mpcl_tensor_destroy(g);
    mpcl_context_destroy(ctx);
}

/* Every slot written in pieces reads back whole and in other pieces; an
 * empty range at the end is fine. */
static void state_by_range(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const size_t n = 37;
    mpcl_tensor *master = tu_tensor(ctx, MPCL_DTYPE_F32, 1, n);
    mpcl_tensor *working = tu_tensor(ctx, MPCL_DTYPE_F16, 1, n);
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_ADAMW);
    mpcl_optimizer *opt = NULL;
    TU_ASSERT_OK(mpcl_optimizer_create(ctx, &p, master, working, &opt));
    tu_rng r = tu_rng_make(61);
    float src[MPCL_OPTIM_SLOT_COUNT][37], got[37];
    const size_t cuts[] = {0, 5, 20, 37};
    for (int s = 0; s < MPCL_OPTIM_SLOT_COUNT; s++) {
        tu_fill_uniform(&r, src[s], n, s == MPCL_OPTIM_SLOT_V ? 0.0f : -2.0f, 2.0f);
        for (int k = 0; k < 3; k++)
            TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, (mpcl_optim_slot)s, cuts[k],
                                              src[s] + cuts[k], cuts[k + 1] - cuts[k]));
    }
    for (int s = 0; s < MPCL_OPTIM_SLOT_COUNT; s++) {
        for (size_t i = 0; i < n; i++) got[i] = tu_poison_f32();
        TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, (mpcl_optim_slot)s, 0, got, n));
        assert_memory_equal(got, src[s], n * sizeof(float));
        for (size_t i = 0; i < n; i++) got[i] = tu_poison_f32();
        TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, (mpcl_optim_slot)s, 3, got, 30));
        assert_memory_equal(got, src[s] + 3, 30 * sizeof(float));
        assert_true(isnan(got[30]));
        TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, (mpcl_optim_slot)s, n, got, 0));
        TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, (mpcl_optim_slot)s, n, got, 0));
    }
    assert_working_is_rounded_master(working, src[MPCL_OPTIM_SLOT_MASTER], n);
    mpcl_optimizer_destroy(opt);
    mpcl_tensor_destroy(master);
    mpcl_tensor_destroy(working);
    mpcl_context_destroy(ctx);
}

static void assert_nothing_enqueued(const mpcl_context *ctx, uint64_t launches) {
    assert_int_equal(mpcl_context_launch_count(ctx), launches);
}

static void errors_touch_nothing(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const size_t n = 6;
    mpcl_tensor *master = tu_tensor(ctx, MPCL_DTYPE_F32, 1, n);
    mpcl_tensor *working = tu_tensor(ctx, MPCL_DTYPE_F32, 1, n);
    mpcl_tensor *g = tu_tensor(ctx, MPCL_DTYPE_F32, 1, n);
    mpcl_tensor *longer = tu_tensor(ctx, MPCL_DTYPE_F32, 1, n + 1);
    mpcl_tensor *shorter = tu_tensor(ctx, MPCL_DTYPE_F32, 1, n - 1);
    mpcl_tensor *half = tu_tensor(ctx, MPCL_DTYPE_F16, 1, n);
    mpcl_tensor *i32 = tu_tensor(ctx, MPCL_DTYPE_I32, 1, n);
    TU_ASSERT_OK(mpcl_tensor_fill(g, 1.0f));
    TU_ASSERT_OK(mpcl_context_finish(ctx));
    uint64_t launches = mpcl_context_launch_count(ctx);

    /* Create: bad hyperparameters, dtypes and sizes; *out is NULL after. */
    mpcl_optim_params p = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    mpcl_optimizer *opt = (mpcl_optimizer *)&p;
    p.lr = -1;
    assert_int_equal(mpcl_optimizer_create(ctx, &p, master, working, &opt), MPCL_ERR_INVALID_ARG);
    assert_null(opt);
    p = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    p.beta2 = 1.0f;
    assert_int_equal(mpcl_optimizer_create(ctx, &p, master, working, &opt), MPCL_ERR_INVALID_ARG);
    p = mpcl_optim_default_params(MPCL_OPTIM_ADAM);
    p.clip_norm = -1.0f;
    assert_int_equal(mpcl_optimizer_create(ctx, &p, master, working, &opt), MPCL_ERR_INVALID_ARG);
    p.clip_norm = NAN;
    assert_int_equal(mpcl_optimizer_create(ctx, &p, master, working, &opt), MPCL_ERR_INVALID_ARG);
    p.clip_norm = 1.0f;
    assert_int_equal(mpcl_optimizer_create(ctx, &p, half, working, &opt), MPCL_ERR_DTYPE);
    assert_int_equal(mpcl_optimizer_create(ctx, &p, i32, working, &opt), MPCL_ERR_DTYPE);
    assert_int_equal(mpcl_optimizer_create(ctx, &p, master, i32, &opt), MPCL_ERR_DTYPE);
    assert_int_equal(mpcl_optimizer_create(ctx, &p, master, longer, &opt), MPCL_ERR_SHAPE);
    assert_int_equal(mpcl_optimizer_create(ctx, &p, master, shorter, &opt), MPCL_ERR_SHAPE);
    assert_null(opt);
    assert_nothing_enqueued(ctx, launches);

    /* Step: gradients of another dtype or size (clipping on, so that its
     * launches would come first), nothing enqueued, nothing changed. */
    TU_ASSERT_OK(mpcl_optimizer_create(ctx, &p, master, working, &opt));
    const float x0[6] = {1, 2, 3, 4, 5, 6};
    TU_ASSERT_OK(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x0, n));
    launches = mpcl_context_launch_count(ctx);
    assert_int_equal(mpcl_optimizer_step(ctx, opt, half, NULL), MPCL_ERR_DTYPE);
    assert_int_equal(mpcl_optimizer_step(ctx, opt, i32, NULL), MPCL_ERR_DTYPE);
    assert_int_equal(mpcl_optimizer_step(ctx, opt, longer, NULL), MPCL_ERR_SHAPE);
    assert_int_equal(mpcl_optimizer_step(ctx, opt, shorter, NULL), MPCL_ERR_SHAPE);
    assert_int_equal(mpcl_optimizer_step(ctx, opt, working, NULL), MPCL_ERR_INVALID_ARG);
    assert_nothing_enqueued(ctx, launches);
    float x[6];
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x, n));
    assert_memory_equal(x, x0, sizeof x);
    assert_working_is_rounded_master(working, x0, n);
    uint32_t t = 99;
    TU_ASSERT_OK(mpcl_optimizer_read_step(ctx, opt, &t));
    assert_int_equal(t, 0);
    float norm = 0;
    TU_ASSERT_OK(mpcl_optimizer_read_grad_norm(ctx, opt, &norm));
    assert_true(isnan(norm));

    /* Ranges past the end: MPCL_ERR_SHAPE, the buffer and the state
     * untouched. */
    float y[7];
    for (int i = 0; i < 7; i++) y[i] = tu_poison_f32();
    const struct {
        size_t offset, count;
    } past[] = {{0, 7}, {1, 6}, {6, 1}, {7, 0}, {1, SIZE_MAX}, {SIZE_MAX, 1}};
    launches = mpcl_context_launch_count(ctx);
    for (size_t k = 0; k < sizeof past / sizeof past[0]; k++)
        for (int s = 0; s < MPCL_OPTIM_SLOT_COUNT; s++) {
            assert_int_equal(
                mpcl_optimizer_read(ctx, opt, (mpcl_optim_slot)s, past[k].offset, y, past[k].count),
                MPCL_ERR_SHAPE);
            assert_int_equal(mpcl_optimizer_write(ctx, opt, (mpcl_optim_slot)s, past[k].offset, x0,
                                                  past[k].count),
                             MPCL_ERR_SHAPE);
        }
    assert_nothing_enqueued(ctx, launches);
    for (int i = 0; i < 7; i++) assert_true(isnan(y[i]));
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_MASTER, 0, x, n));
    assert_memory_equal(x, x0, sizeof x);
    assert_working_is_rounded_master(working, x0, n);
    TU_ASSERT_OK(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_M, 0, x, n));
    for (size_t i = 0; i < n; i++) assert_true(x[i] == 0.0f);
    assert_int_equal(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_COUNT, 0, y, 1),
                     MPCL_ERR_INVALID_ARG);
    mpcl_optimizer_destroy(opt);

    /* SGD has no second moment. */
    assert_false(mpcl_optim_has_slot(MPCL_OPTIM_SGD, MPCL_OPTIM_SLOT_V));
    const mpcl_optim_kind past_end = (mpcl_optim_kind)mpcl_optim_kind_count();
    for (int k = 0; k < (int)past_end; k++) {
        assert_true(mpcl_optim_has_slot((mpcl_optim_kind)k, MPCL_OPTIM_SLOT_MASTER));
        assert_true(mpcl_optim_has_slot((mpcl_optim_kind)k, MPCL_OPTIM_SLOT_M));
        assert_int_equal(mpcl_optim_has_slot((mpcl_optim_kind)k, MPCL_OPTIM_SLOT_V),
                         k != MPCL_OPTIM_SGD);
        assert_false(mpcl_optim_has_slot((mpcl_optim_kind)k, MPCL_OPTIM_SLOT_COUNT));
    }
    assert_false(mpcl_optim_has_slot(past_end, MPCL_OPTIM_SLOT_MASTER));
    p = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    TU_ASSERT_OK(mpcl_optimizer_create(ctx, &p, master, working, &opt));
    launches = mpcl_context_launch_count(ctx);
    assert_int_equal(mpcl_optimizer_read(ctx, opt, MPCL_OPTIM_SLOT_V, 0, y, n),
                     MPCL_ERR_INVALID_ARG);
    assert_int_equal(mpcl_optimizer_write(ctx, opt, MPCL_OPTIM_SLOT_V, 0, x0, n),
                     MPCL_ERR_INVALID_ARG);
    assert_nothing_enqueued(ctx, launches);
    for (int i = 0; i < 7; i++) assert_true(isnan(y[i]));
    mpcl_optimizer_destroy(opt);
    mpcl_optimizer_destroy(NULL);
    mpcl_tensor *all[] = {master, working, g, longer, shorter, half, i32};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    mpcl_context_destroy(ctx);
}

int main(void) {
    mpcl_context *ctx = tu_context();
    if (tu_slow_device(ctx)) {
        g_steps = 6;
        g_skip_at = 3;
    }
    mpcl_context_destroy(ctx);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_are_documented_values),
        cmocka_unit_test(kind_names_round_trip),
        cmocka_unit_test(params_by_name),
        cmocka_unit_test(params_check),
        cmocka_unit_test(sgd_momentum_matches_reference),
        cmocka_unit_test(adam_matches_reference),
        cmocka_unit_test(adamw_matches_reference),
        cmocka_unit_test(rmsprop_matches_reference),
        cmocka_unit_test(large_arena),
        cmocka_unit_test(decay_flags_select_the_parameters),
        cmocka_unit_test(clip_norm_matches_reference),
        cmocka_unit_test(clip_norm_by_hand),
        cmocka_unit_test(no_loss_scaler_and_taken_arenas),
        cmocka_unit_test(state_by_range),
        cmocka_unit_test(errors_touch_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
