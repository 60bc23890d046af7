/* Checkpoints: the trainer's whole state in one safetensors file. Load
 * validates the file against this trainer completely before it writes
 * anything to the model. Layout and metadata keys are listed in train.h. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_internal.h"
#include "mpcl/safetensors.h"

#define FORMAT_NAME "mpcl-checkpoint"
#define FORMAT_VERSION "1"

/* Every parameter, in each optimizer slot. */
#define MAX_TENSORS (MPCL__MAX_PARAMS * MPCL_OPTIM_SLOT_COUNT)
#define MAX_META 40
#define META_VALUE 64

static const char *const SLOT_SUFFIX[] = {"", ".m", ".v"};

static const char *optim_name(mpcl_optim_kind k) {
    const char *name = mpcl_optim_kind_name(k);
    return name ? name : "unknown";
}

static const char *scale_mode_name(const mpcl_loss_scale *ls) {
    if (!ls) return "none";
    return mpcl_loss_scale_get_params(ls).mode == MPCL_LOSS_SCALE_FIXED ? "fixed" : "dynamic";
}

/* One tensor the model expects: parameter `param`, optimizer slot `slot`. */
typedef struct expected {
    char name[64];
    size_t param;
    mpcl_optim_slot slot;
    size_t ndim, shape[MPCL_MAX_RANK], count;
} expected;

/* Walks the parameter table: every row in every slot the optimizer keeps,
 * named and shaped as the table says (kernels [in, out], biases [out], as
 * Keras stores them). */
static size_t expected_tensors(mpcl_model *m, expected *e) {
    size_t n = 0, np = mpcl_model_param_count(m);
    for (int slot = MPCL_OPTIM_SLOT_MASTER; slot < MPCL_OPTIM_SLOT_COUNT; slot++) {
        if (!mpcl_model_has_slot(m, (mpcl_optim_slot)slot)) continue;
        for (size_t i = 0; i < np; i++, n++) {
            const mpcl_param_info *r = mpcl_model_param(m, i);
            snprintf(e[n].name, sizeof e[n].name, "%s%s", r->name, SLOT_SUFFIX[slot]);
            e[n].param = i;
            e[n].slot = (mpcl_optim_slot)slot;
            e[n].ndim = r->rank;
            memcpy(e[n].shape, r->shape, sizeof e[n].shape);
            e[n].count = r->count;
        }
    }
    return n;
}

/* "784,128,10" */
static void model_shape(const mpcl_model *m, char *buf, size_t size) {
    const mpcl_model_params *p = mpcl_model_params_of(m);
    int k = snprintf(buf, size, "%zu", p->inputs);
    for (size_t i = 0; i < mpcl_model_layer_count(m) && k > 0 && (size_t)k < size; i++)
        k += snprintf(buf + k, size - (size_t)k, ",%zu", mpcl_model_layer(m, i)->units);
}

/* Values no run produces: a non-finite weight or moment, a negative second
 * moment. data may be unaligned (a file from another writer). `status` and
 * `what` say whose values they are: the checkpoint being loaded, or this
 * trainer's state being saved. */
static mpcl_status check_values(mpcl_context *ctx, mpcl_status status, const char *what,
                                const expected *e, const void *data, size_t count) {
    const unsigned char *p = data;
    for (size_t i = 0; i < count; i++) {
        float v;
        memcpy(&v, p + i * sizeof v, sizeof v);
        if (!isfinite(v))
            return MPCL_ERROR(ctx, status, "%s: tensor %s holds %g at index %zu (a diverged run?)",
                              what, e->name, (double)v, i);
        if (e->slot == MPCL_OPTIM_SLOT_V && v < 0.0f)
            return MPCL_ERROR(ctx, status,
                              "%s: tensor %s holds %g at index %zu; a second moment is never "
                              "negative",
                              what, e->name, (double)v, i);
    }
    return MPCL_OK;
}

typedef struct meta_list {
    mpcl_st_meta items[MAX_META];
    char values[MAX_META][META_VALUE];
    size_t count;
} meta_list;

static void meta_add(meta_list *l, const char *key, const char *fmt, ...) MPCL_PRINTF(3, 4);
static void meta_add(meta_list *l, const char *key, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->values[l->count], META_VALUE, fmt, ap);
    va_end(ap);
    l->items[l->count].key = key;
    l->items[l->count].value = l->values[l->count];
    l->count++;
}

mpcl_status mpcl_trainer_save(mpcl_trainer *tr, const char *path) {
    mpcl_context *ctx = tr->ctx;
    mpcl_model *m = tr->model;
    const mpcl_model_params *mp = mpcl_model_params_of(m);
    const mpcl_plan *plan = mpcl_model_plan(m);
    mpcl_loss_scale *ls = mpcl_model_loss_scale(m);
    if (!path) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "checkpoint path is NULL");
    /* Every replica holds the same state: rank 0 alone writes it. */
    if (tr->dist && mpcl_dist_rank(tr->dist) != 0) return MPCL_OK;

    expected e[MAX_TENSORS];
    size_t n = expected_tensors(m, e);
    mpcl_st_tensor t[MAX_TENSORS];
    float *data[MAX_TENSORS] = {0};
    mpcl_status st = MPCL_OK;
    for (size_t i = 0; i < n && st == MPCL_OK; i++) {
        size_t count = e[i].count;
        data[i] = malloc(count * sizeof(float));
        if (!data[i]) {
            st = MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "checkpoint copy of %s", e[i].name);
            break;
        }
        st = mpcl_model_read_param(m, e[i].param, e[i].slot, data[i], count);
        /* What load would refuse is never written over a good checkpoint. */
        if (st == MPCL_OK)
            st = check_values(ctx, MPCL_ERR_INVALID_ARG, "not saved", &e[i], data[i], count);
        memset(&t[i], 0, sizeof t[i]);
        t[i].name = e[i].name;
        t[i].dtype = MPCL_ST_F32;
        t[i].ndim = e[i].ndim;
        for (size_t d = 0; d < e[i].ndim; d++) t[i].shape[d] = e[i].shape[d];
        t[i].data = data[i];
    }
    uint32_t opt_step = 0;
    mpcl_loss_scale_state ls_state = {1.0f, 0, 0, 0, 0};
    if (st == MPCL_OK) st = mpcl_model_read_step(m, &opt_step);
    if (st == MPCL_OK && ls) st = mpcl_loss_scale_read(ctx, ls, &ls_state);
    if (st != MPCL_OK) goto cleanup;

    meta_list *l = malloc(sizeof *l);
    if (!l) {
        st = MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "checkpoint metadata");
        goto cleanup;
    }
    l->count = 0;
    char shape[META_VALUE];
    model_shape(m, shape, sizeof shape);
    const mpcl_optim_params *o = &mp->optim;
    meta_add(l, "format", "%s", FORMAT_NAME);
    meta_add(l, "format_version", "%s", FORMAT_VERSION);
    meta_add(l, "mpcl_version", "%s", mpcl_version());
    meta_add(l, "policy", "%s", mpcl_policy_name(plan->policy));
    meta_add(l, "policy_resolved", "%s", mpcl_policy_name(plan->resolved));
    meta_add(l, "storage", "%s", mpcl_dtype_name(plan->storage));
    meta_add(l, "gemm", "%s", mpcl_gemm_path_name(plan->gemm));
    meta_add(l, "model", "%s", shape);
    meta_add(l, "activation", "%s", mpcl_activation_name(mp->activation));
    meta_add(l, "optimizer", "%s", optim_name(o->kind));
    /* %.9g gives back the same float when parsed. */
    meta_add(l, "lr", "%.9g", (double)o->lr);
    if (o->kind == MPCL_OPTIM_SGD) {
        meta_add(l, "momentum", "%.9g", (double)o->momentum);
        meta_add(l, "nesterov", "%d", o->nesterov ? 1 : 0);
    } else {
        meta_add(l, "beta1", "%.9g", (double)o->beta1);
        meta_add(l, "beta2", "%.9g", (double)o->beta2);
        meta_add(l, "eps", "%.9g", (double)o->eps);
    }
    meta_add(l, "weight_decay", "%.9g", (double)o->weight_decay);
    meta_add(l, "clip_norm", "%.9g", (double)o->clip_norm);
    meta_add(l, "step", "%llu", (unsigned long long)tr->step);
    meta_add(l, "optimizer_step", "%lu", (unsigned long)opt_step);
    meta_add(l, "epoch", "%lu", (unsigned long)tr->epoch);
    meta_add(l, "epoch_step", "%llu", (unsigned long long)tr->epoch_step);
    meta_add(l, "seed", "%llu", (unsigned long long)tr->params.seed);
    meta_add(l, "batch", "%zu", tr->params.batch);
    meta_add(l, "train_samples", "%zu", tr->train_count);
    meta_add(l, "loss_scale", "%.9g", (double)ls_state.scale);
    meta_add(l, "loss_scale_good_steps", "%lu", (unsigned long)ls_state.good_steps);
    meta_add(l, "loss_scale_skipped", "%lu", (unsigned long)ls_state.skipped_steps);
    meta_add(l, "loss_scale_mode", "%s", scale_mode_name(ls));
    st = mpcl_safetensors_write(path, t, n, l->items, l->count);
    free(l);
    if (st != MPCL_OK) mpcl__train_adopt_error(ctx, st);

cleanup:
    for (size_t i = 0; i < n; i++) free(data[i]);
    return st;
}

/* ---- load ---- */

/* Strict unsigned decimal: digits only (no sign, space or suffix), at least
 * one, value <= max. */
static bool parse_uint(const char *s, uint64_t max, uint64_t *out) {
    if (!s || !*s) return false;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (max - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

typedef struct loader {
    mpcl_context *ctx;
    const char *path;
    const mpcl_safetensors *st;
} loader;

static mpcl_status meta_str(const loader *L, const char *key, const char **out) {
    *out = mpcl_safetensors_meta_get(L->st, key);
    if (!*out)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT, "checkpoint %s: metadata has no \"%s\"", L->path,
                          key);
    return MPCL_OK;
}

static mpcl_status meta_uint(const loader *L, const char *key, uint64_t max, uint64_t *out) {
    const char *v;
    mpcl_status st = meta_str(L, key, &v);
    if (st != MPCL_OK) return st;
    if (!parse_uint(v, max, out))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: metadata %s = \"%s\" is not an integer in [0, %llu]",
                          L->path, key, v, (unsigned long long)max);
    return MPCL_OK;
}

/* The layer widths the checkpoint's kernels describe: w[0] inputs, then each
 * layer's units; returns the count of widths (0 when dense_0.kernel is not a
 * matrix). */
static size_t checkpoint_widths(const mpcl_safetensors *st, size_t *w) {
    size_t n = 0;
    for (size_t l = 0; l <= MPCL_MAX_HIDDEN; l++) {
        char name[48];
        snprintf(name, sizeof name, "dense_%zu.kernel", l);
        const mpcl_st_tensor *t = mpcl_safetensors_find(st, name);
        if (!t || t->ndim != 2) break;
        if (l == 0) w[n++] = t->shape[0];
        w[n++] = t->shape[1];
    }
    return n;
}

static void widths_str(char *buf, size_t size, const size_t *w, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%zu", i ? "," : "", w[i]);
}

static void shape_str(char *buf, size_t size, size_t ndim, const size_t *shape) {
    size_t k = (size_t)snprintf(buf, size, "[");
    for (size_t i = 0; i < ndim && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%zu", i ? ", " : "", shape[i]);
    if (k < size) snprintf(buf + k, size - k, "]");
}

/* What would make this run match a checkpoint of other widths: only the
 * parts that differ, and only flags the parser accepts. */
static void shape_fix(char *buf, size_t size, const mpcl_model *m, const size_t *cw, size_t cn) {
    const mpcl_model_params *p = mpcl_model_params_of(m);
    size_t layers = mpcl_model_layer_count(m), k = 0;
    buf[0] = '\0';
    if (cn < 2) {
        snprintf(buf, size, "its dense_0.kernel is not a matrix");
        return;
    }
    if (cw[0] != p->inputs)
        k += (size_t)snprintf(buf + k, size - k,
                              "it has %zu inputs, these data %zu: no flag matches, only its "
                              "data set; ",
                              cw[0], p->inputs);
    size_t classes = mpcl_model_layer(m, layers - 1)->units;
    if (k < size && cw[cn - 1] != classes)
        k += (size_t)snprintf(buf + k, size - k, "--classes %zu; ", cw[cn - 1]);
    bool hidden_same = cn - 2 == layers - 1;
    for (size_t i = 0; hidden_same && i + 1 < layers; i++)
        hidden_same = cw[i + 1] == mpcl_model_layer(m, i)->units;
    if (k < size && !hidden_same) {
        if (cn - 2 == 0) {
            k += (size_t)snprintf(buf + k, size - k,
                                  "it has no hidden layer, which --hidden cannot give; ");
        } else {
            char h[96];
            widths_str(h, sizeof h, cw + 1, cn - 2);
            k += (size_t)snprintf(buf + k, size - k, "--hidden %s; ", h);
        }
    }
    if (k >= 2 && k < size) buf[k - 2] = '\0';
}

/* The choices that define the run, before any tensor is looked at, so that
 * an optimizer mismatch is called one (not a missing or extra tensor). */
static mpcl_status check_identity(const loader *L, const mpcl_model *m) {
    const mpcl_model_params *mp = mpcl_model_params_of(m);
    const char *v;
    mpcl_status st;
    if ((st = meta_str(L, "optimizer", &v)) != MPCL_OK) return st;
    mpcl_optim_kind ok;
    if (strcmp(v, optim_name(mp->optim.kind)) != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s was trained with optimizer %s, this run uses %s (%s%s%s)",
                          L->path, v, optim_name(mp->optim.kind),
                          mpcl_optim_kind_parse(v, &ok) ? "--optimizer " : "no --optimizer reads ",
                          mpcl_optim_kind_parse(v, &ok) ? v : "that kind",
                          mpcl_optim_kind_parse(v, &ok) ? " would match" : "");
    if ((st = meta_str(L, "activation", &v)) != MPCL_OK) return st;
    mpcl_activation act;
    /* mpcl-train refuses identity hidden layers. */
    bool flag_ok = mpcl_activation_parse(v, &act) && act != MPCL_ACT_IDENTITY;
    if (strcmp(v, mpcl_activation_name(mp->activation)) != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s was trained with activation %s, this run uses %s (%s%s%s)",
                          L->path, v, mpcl_activation_name(mp->activation),
                          flag_ok ? "--activation " : "no --activation gives ",
                          flag_ok ? v : "that one", flag_ok ? " would match" : "");
    return MPCL_OK;
}

static mpcl_status check_tensors(const loader *L, mpcl_model *m, const expected *e, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const mpcl_st_tensor *t = mpcl_safetensors_find(L->st, e[i].name);
        if (!t)
            return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT, "checkpoint %s has no tensor %s", L->path,
                              e[i].name);
        if (t->dtype != MPCL_ST_F32)
            return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                              "checkpoint %s: tensor %s is %s; mpcl checkpoints hold F32", L->path,
                              e[i].name, mpcl_st_dtype_name(t->dtype));
        bool same = t->ndim == e[i].ndim;
        for (size_t d = 0; same && d < t->ndim; d++) same = t->shape[d] == e[i].shape[d];
        if (!same) {
            char got[96], want[96], cshape[96], mshape[96], fix[256];
            size_t cw[MPCL_MAX_HIDDEN + 3];
            size_t cn = checkpoint_widths(L->st, cw);
            shape_str(got, sizeof got, t->ndim, t->shape);
            shape_str(want, sizeof want, e[i].ndim, e[i].shape);
            widths_str(cshape, sizeof cshape, cw, cn);
            model_shape(m, mshape, sizeof mshape);
            shape_fix(fix, sizeof fix, m, cw, cn);
            return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                              "checkpoint %s: tensor %s has shape %s, this model's is %s "
                              "(the checkpoint holds model %s, this run %s; to match: %s)",
                              L->path, e[i].name, got, want, cshape, mshape, fix);
        }
    }
    size_t count = mpcl_safetensors_count(L->st);
    for (size_t j = 0; j < count; j++) {
        const char *name = mpcl_safetensors_tensor(L->st, j)->name;
        bool known = false;
        for (size_t i = 0; i < n && !known; i++) known = strcmp(name, e[i].name) == 0;
        if (!known)
            return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                              "checkpoint %s holds tensor %s, which this model does not have",
                              L->path, name);
    }
    for (size_t i = 0; i < n; i++) {
        const mpcl_st_tensor *t = mpcl_safetensors_find(L->st, e[i].name);
        char what[512];
        snprintf(what, sizeof what, "checkpoint %s", L->path);
        mpcl_status st = check_values(L->ctx, MPCL_ERR_FORMAT, what, &e[i], t->data, e[i].count);
        if (st != MPCL_OK) return st;
    }
    return MPCL_OK;
}

/* Everything read from the metadata, validated. */
typedef struct ckpt_state {
    uint64_t step, epoch, epoch_step, opt_step, good, skipped;
    float scale;
    bool has_scale;
} ckpt_state;

/* First of all: is it an mpcl checkpoint of a version this code reads. */
static mpcl_status check_format(const loader *L) {
    const char *v;
    mpcl_status st;
    if ((st = meta_str(L, "format", &v)) != MPCL_OK) return st;
    if (strcmp(v, FORMAT_NAME) != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT, "%s: format \"%s\", not \"" FORMAT_NAME "\"",
                          L->path, v);
    if ((st = meta_str(L, "format_version", &v)) != MPCL_OK) return st;
    if (strcmp(v, FORMAT_VERSION) != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "%s: checkpoint format version \"%s\"; this mpcl reads " FORMAT_VERSION,
                          L->path, v);
    return MPCL_OK;
}

/* The seed, batch and data that fix the epoch position: those that differ,
 * each with the flag that would match, or why none can. */
static mpcl_status check_sequence(const loader *L, const mpcl_trainer *tr, uint64_t seed,
                                  uint64_t batch, uint64_t samples) {
    if (seed == tr->params.seed && batch == tr->params.batch && samples == tr->train_count)
        return MPCL_OK;
    char fix[512];
    size_t k = 0;
    fix[0] = '\0';
    if (seed != tr->params.seed)
        k += (size_t)snprintf(fix + k, sizeof fix - k, "; seed %llu, this run %llu: --seed %llu",
                              (unsigned long long)seed, (unsigned long long)tr->params.seed,
                              (unsigned long long)seed);
    if (batch != tr->params.batch && k < sizeof fix)
        k += (size_t)snprintf(fix + k, sizeof fix - k, "; batch %llu, this run %zu: --batch %llu",
                              (unsigned long long)batch, tr->params.batch,
                              (unsigned long long)batch);
    if (samples != tr->train_count && k < sizeof fix) {
        if (samples <= tr->train_available)
            k += (size_t)snprintf(fix + k, sizeof fix - k,
                                  "; %llu training samples, this run %zu: --train-limit %llu",
                                  (unsigned long long)samples, tr->train_count,
                                  (unsigned long long)samples);
        else
            k += (size_t)snprintf(fix + k, sizeof fix - k,
                                  "; %llu training samples, but these data hold only %zu: no "
                                  "--train-limit matches (other --data?)",
                                  (unsigned long long)samples, tr->train_available);
    }
    return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                      "checkpoint %s belongs to another sequence of batches%s (the epoch "
                      "position means something only for the same seed, batch and data)",
                      L->path, fix);
}

/* The loss scaler's saved state against the bounds the library enforces for
 * a new run: this run's dynamic scaler's, or the defaults. */
static mpcl_status check_scale_state(const loader *L, const mpcl_trainer *tr, const char *mode,
                                     const ckpt_state *cs) {
    mpcl_loss_scale *ls = mpcl_model_loss_scale(tr->model);
    mpcl_loss_scale_params b = ls && mpcl_loss_scale_get_params(ls).mode == MPCL_LOSS_SCALE_DYNAMIC
                                   ? mpcl_loss_scale_get_params(ls)
                                   : mpcl_loss_scale_default_params();
    bool dynamic = strcmp(mode, "dynamic") == 0;
    /* A scale the user typed replaces the saved one (resume_keeps_scale). */
    if (dynamic && !tr->params.resume_keeps_scale &&
        !(cs->scale >= b.min_scale && cs->scale <= b.max_scale))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: loss_scale %g is outside [%g, %g], the dynamic scale's "
                          "bounds",
                          L->path, (double)cs->scale, (double)b.min_scale, (double)b.max_scale);
    if (dynamic ? cs->good >= b.growth_interval : cs->good != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: loss_scale_good_steps %llu cannot belong to a %s scale "
                          "(%s)",
                          L->path, (unsigned long long)cs->good, mode,
                          dynamic ? "it grows and restarts at the growth interval" : "always 0");
    if (cs->good > cs->opt_step || cs->opt_step + cs->skipped > cs->step)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: counters that cannot belong to one run: step %llu, "
                          "optimizer_step %llu, loss_scale_skipped %llu, loss_scale_good_steps "
                          "%llu (applied plus skipped steps are at most the steps; good steps "
                          "at most the applied ones)",
                          L->path, (unsigned long long)cs->step, (unsigned long long)cs->opt_step,
                          (unsigned long long)cs->skipped, (unsigned long long)cs->good);
    return MPCL_OK;
}

static mpcl_status check_run(const loader *L, mpcl_trainer *tr, ckpt_state *cs) {
    mpcl_model *m = tr->model;
    const char *v;
    mpcl_status st;
    char shape[96];
    model_shape(m, shape, sizeof shape);
    if ((st = meta_str(L, "model", &v)) != MPCL_OK) return st;
    if (strcmp(v, shape) != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: model \"%s\" does not match its tensors' shapes (%s)",
                          L->path, v, shape);

    uint64_t seed, batch, samples;
    if ((st = meta_uint(L, "seed", UINT64_MAX, &seed)) != MPCL_OK ||
        (st = meta_uint(L, "batch", INT32_MAX, &batch)) != MPCL_OK ||
        (st = meta_uint(L, "train_samples", INT32_MAX, &samples)) != MPCL_OK ||
        (st = meta_uint(L, "step", UINT64_MAX, &cs->step)) != MPCL_OK ||
        (st = meta_uint(L, "optimizer_step", UINT32_MAX, &cs->opt_step)) != MPCL_OK ||
        (st = meta_uint(L, "epoch", UINT32_MAX, &cs->epoch)) != MPCL_OK ||
        (st = meta_uint(L, "epoch_step", UINT64_MAX, &cs->epoch_step)) != MPCL_OK ||
        (st = meta_uint(L, "loss_scale_good_steps", UINT32_MAX, &cs->good)) != MPCL_OK ||
        (st = meta_uint(L, "loss_scale_skipped", UINT32_MAX, &cs->skipped)) != MPCL_OK)
        return st;
    if ((st = check_sequence(L, tr, seed, batch, samples)) != MPCL_OK) return st;
    if (cs->epoch_step >= tr->steps_per_epoch ||
        cs->step != cs->epoch * tr->steps_per_epoch + cs->epoch_step || cs->opt_step > cs->step)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: position step %llu, epoch %llu, epoch_step %llu, "
                          "optimizer_step %llu is inconsistent with %llu steps per epoch",
                          L->path, (unsigned long long)cs->step, (unsigned long long)cs->epoch,
                          (unsigned long long)cs->epoch_step, (unsigned long long)cs->opt_step,
                          (unsigned long long)tr->steps_per_epoch);

    const char *mode;
    if ((st = meta_str(L, "loss_scale_mode", &mode)) != MPCL_OK) return st;
    if (strcmp(mode, "none") != 0 && strcmp(mode, "dynamic") != 0 && strcmp(mode, "fixed") != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: loss_scale_mode \"%s\" (none, dynamic or fixed)", L->path,
                          mode);
    cs->has_scale = strcmp(mode, "none") != 0;
    if ((st = meta_str(L, "loss_scale", &v)) != MPCL_OK) return st;
    char *end = NULL;
    errno = 0;
    float scale = isdigit((unsigned char)v[0]) ? strtof(v, &end) : NAN;
    if (!end || *end || errno || !isfinite(scale) || !(scale > 0))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: loss_scale \"%s\" is not a finite number > 0", L->path,
                          v);
    cs->scale = scale;
    return check_scale_state(L, tr, mode, cs);
}

static mpcl_status apply(mpcl_trainer *tr, const mpcl_safetensors *file, const expected *e,
                         size_t n, const ckpt_state *cs) {
    mpcl_model *m = tr->model;
    mpcl_status st = MPCL_OK;
    for (size_t i = 0; i < n && st == MPCL_OK; i++) {
        const mpcl_st_tensor *t = mpcl_safetensors_find(file, e[i].name);
        size_t count = t->bytes / sizeof(float);
        /* The data may be unaligned in a file from another writer. */
        float *buf = malloc(t->bytes ? t->bytes : 1);
        if (!buf) return MPCL_ERROR(tr->ctx, MPCL_ERR_OUT_OF_MEMORY, "loading %s", e[i].name);
        memcpy(buf, t->data, t->bytes);
        st = mpcl_model_write_param(m, e[i].param, e[i].slot, buf, count);
        free(buf);
    }
    if (st == MPCL_OK) st = mpcl_model_write_step(m, (uint32_t)cs->opt_step);
    mpcl_loss_scale *ls = mpcl_model_loss_scale(m);
    /* A checkpoint without a scaler (float32) leaves a mixed run's scaler at
     * its initial state; a scaler's state means nothing to a float32 run. A
     * scale the user typed for this run wins over the saved one; the count
     * of skipped steps is history and stays. */
    mpcl_loss_scale_state s = {cs->scale, (uint32_t)cs->good, (uint32_t)cs->skipped, 0, 0};
    if (ls && tr->params.resume_keeps_scale) {
        s.scale = mpcl_loss_scale_get_params(ls).initial_scale;
        s.good_steps = 0;
        if (!cs->has_scale) s.skipped_steps = 0;
    }
    bool write_scale = ls && (cs->has_scale || tr->params.resume_keeps_scale);
    if (st == MPCL_OK && write_scale) st = mpcl_loss_scale_write_state(tr->ctx, ls, &s);
    if (st != MPCL_OK) return st;
    tr->step = cs->step;
    tr->epoch = (uint32_t)cs->epoch;
    tr->epoch_step = cs->epoch_step;
    tr->order_valid = false;
    tr->stopped = false;
    if (write_scale) {
        tr->loss_scale = s.scale;
        tr->skipped_steps = s.skipped_steps;
    }
    return MPCL_OK;
}

/* Every check a load makes before it changes anything, filling e[0..*n)
 * and cs for apply. */
static mpcl_status check_all(mpcl_trainer *tr, const mpcl_safetensors *file, const char *path,
                             expected *e, size_t *n, ckpt_state *cs) {
    loader L = {tr->ctx, path, file};
    *n = expected_tensors(tr->model, e);
    memset(cs, 0, sizeof *cs);
    mpcl_status st;
    if ((st = check_format(&L)) == MPCL_OK && (st = check_identity(&L, tr->model)) == MPCL_OK &&
        (st = check_tensors(&L, tr->model, e, *n)) == MPCL_OK)
        st = check_run(&L, tr, cs);
    return st;
}

mpcl_status mpcl_trainer_load(mpcl_trainer *tr, const char *path) {
    mpcl_context *ctx = tr->ctx;
    if (!path) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "checkpoint path is NULL");
    mpcl_safetensors *file = NULL;
    mpcl_status st = mpcl_safetensors_read(path, &file);
    if (st != MPCL_OK) return mpcl__train_adopt_error(ctx, st);
    expected e[MAX_TENSORS];
    size_t n = 0;
    ckpt_state cs;
    if ((st = check_all(tr, file, path, e, &n, &cs)) == MPCL_OK) st = apply(tr, file, e, n, &cs);
    if (st == MPCL_OK) st = mpcl__train_sync_replicas(tr);
    mpcl_safetensors_destroy(file);
    return st;
}

mpcl_status mpcl__train_sync_replicas(mpcl_trainer *tr) {
    mpcl_model *m0 = tr->models[0];
    mpcl_status st = MPCL_OK;
    for (size_t r = 1; r < tr->replicas && st == MPCL_OK; r++) {
        mpcl_model *m = tr->models[r];
        for (size_t p = 0; p < mpcl_model_param_count(m0) && st == MPCL_OK; p++) {
            size_t count = mpcl_model_param(m0, p)->count;
            float *buf = malloc(count * sizeof *buf);
            if (!buf) return MPCL_ERROR(tr->ctx, MPCL_ERR_OUT_OF_MEMORY, "copying replicas");
            for (int slot = 0; slot < MPCL_OPTIM_SLOT_COUNT && st == MPCL_OK; slot++) {
                if (!mpcl_model_has_slot(m0, (mpcl_optim_slot)slot)) continue;
                st = mpcl_model_read_param(m0, p, (mpcl_optim_slot)slot, buf, count);
                if (st == MPCL_OK)
                    st = mpcl_model_write_param(m, p, (mpcl_optim_slot)slot, buf, count);
            }
            free(buf);
        }
        uint32_t step = 0;
        if (st == MPCL_OK) st = mpcl_model_read_step(m0, &step);
        if (st == MPCL_OK) st = mpcl_model_write_step(m, step);
        mpcl_loss_scale *ls0 = mpcl_model_loss_scale(m0), *ls = mpcl_model_loss_scale(m);
        mpcl_loss_scale_state s;
        if (st == MPCL_OK && ls0 && ls) {
            st = mpcl_loss_scale_read(tr->ctx, ls0, &s);
            if (st == MPCL_OK) st = mpcl_loss_scale_write_state(tr->rep[r].ctx, ls, &s);
        }
    }
    return st;
}

mpcl_status mpcl__checkpoint_check(mpcl_trainer *tr, const mpcl_safetensors *file,
                                   const char *path) {
    expected e[MAX_TENSORS];
    size_t n = 0;
    ckpt_state cs;
    return check_all(tr, file, path, e, &n, &cs);
}
