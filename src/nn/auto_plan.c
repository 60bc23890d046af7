/* `auto` chosen by measurement. Mixed precision is chosen for speed, and
 * whether it is faster depends on the device, its driver and the model: on
 * Intel's CPU runtime, verified fp16 math makes the capability rule pick
 * HGEMM, about 4x slower than float32 there. So on first use of a (device,
 * driver, model shape) a few steps of each plan `auto` may take are timed,
 * the fastest is chosen, and the verdict is kept in the cache folder beside
 * the kernel binaries. MPCL_AUTO=capability keeps the capability rule.
 *
 * The plans `auto` may take: float32, and mixed_float16 with each GEMM path
 * that takes f16 here: the one accumulating in f32 that the plan's rule
 * picks (mpcl-mma on a verified matrix engine, else mpcl-mixed on CPUs and
 * clblast-staged elsewhere), and clblast-hgemm where the rule takes it.
 * Not mixed_bfloat16: its 8-bit mantissa changes the numerics more than a
 * speed choice should; it stays a policy one asks for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpcl/number.h"
#include "nn/nn.h"
#include "runtime/runtime.h"

#define MAX_CANDIDATES 3
/* The candidates take turns, ROUNDS times, each turn STEPS timed steps after
 * one untimed; a candidate's figure is its best turn, so that a burst of
 * other load on the machine during one turn does not decide. */
#define ROUNDS 3
#define STEPS 4

typedef struct candidate {
    mpcl_plan plan;
    double us; /* per step: the best turn */
    mpcl_model *m;
    mpcl_tensor *x, *y;
} candidate;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static size_t list_candidates(mpcl_context *ctx, candidate *c) {
    size_t n = 0;
    memset(c, 0, MAX_CANDIDATES * sizeof *c);
    c[n++].plan = mpcl_context_plan(ctx, MPCL_POLICY_FLOAT32);
    mpcl_plan f16 = mpcl_context_plan(ctx, MPCL_POLICY_MIXED_FLOAT16);
    if (!f16.usable) return n;
    const mpcl_plan_overrides *o = mpcl_context_overrides(ctx);
    if (o->gemm_set) { /* MPCL_GEMM names the path: only the plan it gives */
        c[n++].plan = f16;
        return n;
    }
    /* The path the rule takes for f16 without half arithmetic (f32
     * accumulation), and HGEMM where the rule takes that. */
    mpcl_plan_overrides no_half = *o;
    no_half.fp16 = MPCL_FP16_OFF;
    c[n++].plan = mpcl_plan_resolve(mpcl_context_device(ctx), MPCL_POLICY_MIXED_FLOAT16, &no_half);
    if (f16.gemm == MPCL_GEMM_CLBLAST_HGEMM) c[n++].plan = f16;
    return n;
}

/* A model of these params in the candidate's plan and a batch of max_batch
 * random inputs for it (token ids 0 for a model of tokens), with a label
 * per sample or per position. */
static mpcl_status candidate_setup(mpcl_context *ctx, const mpcl_model_params *params,
                                   candidate *c) {
    size_t B = params->max_batch, in = params->inputs, n = 0;
    mpcl_status st = mpcl__model_create_plan(ctx, params, &c->plan, &c->m);
    if (st != MPCL_OK) return st;
    size_t P = mpcl_model_positions(c->m);
    bool tokens = mpcl_model_input_dtype(c->m) == MPCL_DTYPE_I32;
    float *xf = malloc(B * in * sizeof *xf);
    int32_t *labels = malloc(B * P * sizeof *labels), *ids = calloc(tokens ? B * in : 1, 4);
    if (!xf || !labels || !ids) st = MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "a timing batch");
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, mpcl_model_input_dtype(c->m), B, in, &c->x);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, MPCL_DTYPE_I32, B, P, &c->y);
    if (st == MPCL_OK) {
        uint64_t rng = params->seed;
        size_t classes = mpcl_model_layer(c->m, mpcl_model_layer_count(c->m) - 1)->units;
        for (size_t i = 0; !tokens && i < B * in; i++)
            xf[i] = (float)(mpcl_rng_next(&rng) >> 40) * 0x1p-24f;
        for (n = 0; n < B * P; n++) labels[n] = (int32_t)(n % classes);
        st = tokens ? mpcl_tensor_upload_i32(c->x, ids, B * in)
                    : mpcl_tensor_upload_f32(c->x, xf, B * in);
    }
    if (st == MPCL_OK) st = mpcl_tensor_upload_i32(c->y, labels, n);
    free(xf);
    free(labels);
    free(ids);
    return st;
}

static void candidate_teardown(candidate *c) {
    mpcl_tensor_destroy(c->x);
    mpcl_tensor_destroy(c->y);
    mpcl_model_destroy(c->m);
    c->x = c->y = NULL;
    c->m = NULL;
}

/* One turn: an untimed step, then STEPS timed ones; keeps the best. */
static mpcl_status candidate_turn(mpcl_context *ctx, candidate *c) {
    mpcl_status st = mpcl_model_train_step(c->m, c->x, c->y);
    if (st == MPCL_OK) st = mpcl_context_finish(ctx);
    double t0 = now_s();
    for (int i = 0; st == MPCL_OK && i < STEPS; i++) st = mpcl_model_train_step(c->m, c->x, c->y);
    if (st == MPCL_OK) st = mpcl_context_finish(ctx);
    double us = (now_s() - t0) / STEPS * 1e6;
    if (st == MPCL_OK && (c->us == 0 || us < c->us)) c->us = us;
    return st;
}

static mpcl_status measure(mpcl_context *ctx, const mpcl_model_params *params, candidate *c,
                           size_t n) {
    mpcl_status st = MPCL_OK;
    for (size_t i = 0; st == MPCL_OK && i < n; i++) st = candidate_setup(ctx, params, &c[i]);
    for (int r = 0; st == MPCL_OK && r < ROUNDS; r++)
        for (size_t i = 0; st == MPCL_OK && i < n; i++) st = candidate_turn(ctx, &c[i]);
    for (size_t i = 0; i < n; i++) candidate_teardown(&c[i]);
    return st;
}

/* The cache key: what the verdict depends on. */
static mpcl__cache_key verdict_key(mpcl_context *ctx, const mpcl_model_params *params,
                                   const candidate *c, size_t n) {
    const mpcl_device_info *d = mpcl_context_device(ctx);
    char shape[MPCL_MODEL_SPEC_MAX + 128], plans[256] = "";
    int len = snprintf(shape, sizeof shape, "batch %zu optim %d loss %d ", params->max_batch,
                       (int)params->optim.kind, (int)params->loss);
    /* The whole model as text: kinds, attributes and input shape. */
    if (mpcl_model_spec_format(ctx, params, shape + len, sizeof shape - (size_t)len) != MPCL_OK)
        snprintf(shape + len, sizeof shape - (size_t)len, "?");
    for (size_t i = 0; i < n; i++) {
        size_t used = strlen(plans);
        snprintf(plans + used, sizeof plans - used, "%s/%s ", mpcl_policy_name(c[i].plan.resolved),
                 mpcl_gemm_path_name(c[i].plan.gemm));
    }
    const char *parts[] = {"mpcl auto verdict 1", mpcl_version(), d->platform,
                           d->platform_version,   d->name,        d->vendor,
                           d->driver_version,     shape,          plans};
    return mpcl__cache_key_make(parts, sizeof parts / sizeof parts[0]);
}

/* A cached verdict: "<index> <us> <us> ...\n" with one figure per candidate,
 * exactly as write_verdict writes it, every number plain decimal
 * (mpcl/number.h); false when absent, of another candidate list, or not of
 * that form. */
static bool read_verdict(const char *dir, mpcl__cache_key key, candidate *c, size_t n,
                         size_t *best) {
    size_t size = 0;
    int rejected = 0;
    unsigned char *body = mpcl__cache_read(dir, key, &size, &rejected);
    if (!body) return false;
    char text[256];
    bool ok = size < sizeof text && body[size - 1] == '\n';
    if (ok) memcpy(text, body, size - 1);
    free(body);
    if (!ok) return false;
    text[size - 1] = '\0';
    char *rest = text;
    uint64_t index = 0;
    if (mpcl_parse_uint(mpcl__next_field(&rest), n - 1, &index) != MPCL_NUMBER_OK) return false;
    for (size_t i = 0; i < n; i++) {
        double us = 0;
        if (mpcl_parse_real(mpcl__next_field(&rest), &us) != MPCL_NUMBER_OK || !(us > 0))
            return false;
        c[i].us = us;
    }
    if (rest) return false; /* more figures than candidates */
    *best = (size_t)index;
    return true;
}

static void write_verdict(const char *dir, mpcl__cache_key key, const candidate *c, size_t n,
                          size_t best) {
    char text[256];
    int len = snprintf(text, sizeof text, "%zu", best);
    for (size_t i = 0; i < n && len > 0 && (size_t)len < sizeof text; i++)
        len += snprintf(text + len, sizeof text - (size_t)len, " %.1f", c[i].us);
    if (len > 0 && (size_t)len < sizeof text - 1) {
        text[len++] = '\n';
        mpcl__cache_write(dir, key, (const unsigned char *)text, (size_t)len);
    }
}

static void explain(mpcl_plan *p, const candidate *c, size_t n, bool cached) {
    int len = snprintf(p->reason, sizeof p->reason, "auto measured%s:", cached ? " (cached)" : "");
    for (size_t i = 0; i < n && len > 0 && (size_t)len < sizeof p->reason; i++)
        len += snprintf(p->reason + len, sizeof p->reason - (size_t)len, "%s %s/%s %.0f us/step",
                        i ? "," : "", mpcl_policy_name(c[i].plan.resolved),
                        mpcl_gemm_path_name(c[i].plan.gemm), c[i].us);
    if (len > 0 && (size_t)len < sizeof p->reason)
        snprintf(p->reason + len, sizeof p->reason - (size_t)len, "; the fastest");
}

bool mpcl__auto_by_capability(void) {
    return mpcl__env_value(MPCL_ENV_AUTO) != NULL; /* "capability", its one value */
}

bool mpcl__auto_plan_known(mpcl_context *ctx, const mpcl_model_params *params) {
    if (mpcl__auto_by_capability()) return true;
    candidate c[MAX_CANDIDATES];
    size_t n = list_candidates(ctx, c), best = 0;
    char dir[4096];
    return n == 1 || (mpcl__verdict_dir(dir, sizeof dir) != 0 &&
                      read_verdict(dir, verdict_key(ctx, params, c, n), c, n, &best));
}

mpcl_status mpcl_model_auto_plan(mpcl_context *ctx, const mpcl_model_params *params,
                                 mpcl_plan *out) {
    *out = mpcl_context_plan(ctx, MPCL_POLICY_AUTO);
    if (mpcl__auto_by_capability()) return MPCL_OK;
    candidate c[MAX_CANDIDATES];
    size_t n = list_candidates(ctx, c), best = 0;
    if (n == 1) return MPCL_OK; /* nothing to choose: the capability rule's reason says why */
    char dir[4096];
    bool have_dir = mpcl__verdict_dir(dir, sizeof dir) != 0;
    mpcl__cache_key key = verdict_key(ctx, params, c, n);
    bool cached = have_dir && read_verdict(dir, key, c, n, &best);
    if (!cached) {
        mpcl_status st = measure(ctx, params, c, n);
        if (st != MPCL_OK) return st;
        for (size_t i = 1; i < n; i++)
            if (c[i].us < c[best].us) best = i;
        if (have_dir) write_verdict(dir, key, c, n, best);
    }
    *out = c[best].plan;
    out->policy = MPCL_POLICY_AUTO;
    explain(out, c, n, cached);
    return MPCL_OK;
}
