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

/* The layer widths the checkpoint's kernels describe, "784,16,10", and the
 * hidden part "16", for messages. */
static void checkpoint_shape(const mpcl_safetensors *st, char *shape, size_t ssize, char *hidden,
                             size_t hsize) {
    shape[0] = hidden[0] = 0;
    size_t ks = 0, kh = 0;
    for (size_t l = 0; l <= MPCL_MAX_HIDDEN; l++) {
        char name[48];
        snprintf(name, sizeof name, "dense_%zu.kernel", l);
        const mpcl_st_tensor *t = mpcl_safetensors_find(st, name);
        if (!t || t->ndim != 2) break;
        if (l == 0 && ks < ssize)
            ks += (size_t)snprintf(shape + ks, ssize - ks, "%zu", t->shape[0]);
        if (ks < ssize) ks += (size_t)snprintf(shape + ks, ssize - ks, ",%zu", t->shape[1]);
        char name2[48];
        snprintf(name2, sizeof name2, "dense_%zu.kernel", l + 1);
        if (mpcl_safetensors_find(st, name2) && kh < hsize)
            kh += (size_t)snprintf(hidden + kh, hsize - kh, "%s%zu", kh ? "," : "", t->shape[1]);
    }
}

static void shape_str(char *buf, size_t size, size_t ndim, const size_t *shape) {
    size_t k = (size_t)snprintf(buf, size, "[");
    for (size_t i = 0; i < ndim && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%zu", i ? ", " : "", shape[i]);
    if (k < size) snprintf(buf + k, size - k, "]");
}

static mpcl_status check_tensors(const loader *L, mpcl_model *m, const expected *e, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const mpcl_st_tensor *t = mpcl_safetensors_find(L->st, e[i].name);
        if (!t) {
            const char *opt = mpcl_safetensors_meta_get(L->st, "optimizer");
            return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                              "checkpoint %s has no tensor %s (this run's optimizer: %s; the "
                              "checkpoint's: %s)",
                              L->path, e[i].name, optim_name(mpcl_model_params_of(m)->optim.kind),
                              opt ? opt : "not recorded");
        }
        if (t->dtype != MPCL_ST_F32)
            return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                              "checkpoint %s: tensor %s is %s; mpcl checkpoints hold F32", L->path,
                              e[i].name, mpcl_st_dtype_name(t->dtype));
        bool same = t->ndim == e[i].ndim;
        for (size_t d = 0; same && d < t->ndim; d++) same = t->shape[d] == e[i].shape[d];
        if (!same) {
            char got[96], want[96], cshape[96], chidden[96], mshape[96];
            shape_str(got, sizeof got, t->ndim, t->shape);
            shape_str(want, sizeof want, e[i].ndim, e[i].shape);
            checkpoint_shape(L->st, cshape, sizeof cshape, chidden, sizeof chidden);
            model_shape(m, mshape, sizeof mshape);
            return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                              "checkpoint %s: tensor %s has shape %s, this model's is %s "
                              "(the checkpoint holds model %s, this run %s; --hidden %s would "
                              "match it)",
                              L->path, e[i].name, got, want, cshape, mshape,
                              chidden[0] ? chidden : "(none)");
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

static mpcl_status check_run(const loader *L, mpcl_trainer *tr, ckpt_state *cs) {
    mpcl_model *m = tr->model;
    const mpcl_model_params *mp = mpcl_model_params_of(m);
    const char *v;
    mpcl_status st;
    char shape[96];
    model_shape(m, shape, sizeof shape);
    if ((st = meta_str(L, "model", &v)) != MPCL_OK) return st;
    if (strcmp(v, shape) != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: model \"%s\" does not match its tensors' shapes (%s)",
                          L->path, v, shape);
    if ((st = meta_str(L, "activation", &v)) != MPCL_OK) return st;
    if (strcmp(v, mpcl_activation_name(mp->activation)) != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s was trained with activation %s, this run uses %s "
                          "(--activation %s would match)",
                          L->path, v, mpcl_activation_name(mp->activation), v);
    if ((st = meta_str(L, "optimizer", &v)) != MPCL_OK) return st;
    if (strcmp(v, optim_name(mp->optim.kind)) != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s was trained with optimizer %s, this run uses %s "
                          "(--optimizer %s would match)",
                          L->path, v, optim_name(mp->optim.kind), v);

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
    /* The epoch position means something only for the same shuffle, batch
     * and data set; resuming under others would silently train on a
     * different sequence of batches. */
    if (seed != tr->params.seed || batch != tr->params.batch || samples != tr->train_count)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s was written by a run with seed %llu, batch %llu and %llu "
                          "training samples; this run has seed %llu, batch %zu and %zu samples "
                          "(--seed %llu --batch %llu --train-limit %llu would match)",
                          L->path, (unsigned long long)seed, (unsigned long long)batch,
                          (unsigned long long)samples, (unsigned long long)tr->params.seed,
                          tr->params.batch, tr->train_count, (unsigned long long)seed,
                          (unsigned long long)batch, (unsigned long long)samples);
    if (cs->epoch_step >= tr->steps_per_epoch ||
        cs->step != cs->epoch * tr->steps_per_epoch + cs->epoch_step || cs->opt_step > cs->step)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: position step %llu, epoch %llu, epoch_step %llu, "
                          "optimizer_step %llu is inconsistent with %llu steps per epoch",
                          L->path, (unsigned long long)cs->step, (unsigned long long)cs->epoch,
                          (unsigned long long)cs->epoch_step, (unsigned long long)cs->opt_step,
                          (unsigned long long)tr->steps_per_epoch);

    if ((st = meta_str(L, "loss_scale_mode", &v)) != MPCL_OK) return st;
    if (strcmp(v, "none") != 0 && strcmp(v, "dynamic") != 0 && strcmp(v, "fixed") != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: loss_scale_mode \"%s\" (none, dynamic or fixed)", L->path,
                          v);
    cs->has_scale = strcmp(v, "none") != 0;
    if ((st = meta_str(L, "loss_scale", &v)) != MPCL_OK) return st;
    char *end = NULL;
    errno = 0;
    float scale = isdigit((unsigned char)v[0]) ? strtof(v, &end) : NAN;
    if (!end || *end || errno || !isfinite(scale) || !(scale > 0))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: loss_scale \"%s\" is not a finite number > 0", L->path,
                          v);
    cs->scale = scale;
    return MPCL_OK;
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
     * its initial state; a scaler's state means nothing to a float32 run. */
    if (st == MPCL_OK && ls && cs->has_scale) {
        mpcl_loss_scale_state s = {cs->scale, (uint32_t)cs->good, (uint32_t)cs->skipped, 0, 0};
        st = mpcl_loss_scale_write_state(tr->ctx, ls, &s);
    }
    if (st != MPCL_OK) return st;
    tr->step = cs->step;
    tr->epoch = (uint32_t)cs->epoch;
    tr->epoch_step = cs->epoch_step;
    tr->order_valid = false;
    tr->stopped = false;
    if (ls && cs->has_scale) {
        tr->loss_scale = cs->scale;
        tr->skipped_steps = (uint32_t)cs->skipped;
    }
    return MPCL_OK;
}

mpcl_status mpcl_trainer_load(mpcl_trainer *tr, const char *path) {
    mpcl_context *ctx = tr->ctx;
    if (!path) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "checkpoint path is NULL");
    mpcl_safetensors *file = NULL;
    mpcl_status st = mpcl_safetensors_read(path, &file);
    if (st != MPCL_OK) return mpcl__train_adopt_error(ctx, st);
    loader L = {ctx, path, file};
    expected e[MAX_TENSORS];
    size_t n = expected_tensors(tr->model, e);
    ckpt_state cs;
    memset(&cs, 0, sizeof cs);
    if ((st = check_format(&L)) == MPCL_OK &&
        (st = check_tensors(&L, tr->model, e, n)) == MPCL_OK &&
        (st = check_run(&L, tr, &cs)) == MPCL_OK)
        st = apply(tr, file, e, n, &cs);
    mpcl_safetensors_destroy(file);
    return st;
}

mpcl_status mpcl__checkpoint_check(mpcl_trainer *tr, const mpcl_safetensors *file,
                                   const char *path) {
    loader L = {tr->ctx, path, file};
    expected e[MAX_TENSORS];
    size_t n = expected_tensors(tr->model, e);
    ckpt_state cs;
    memset(&cs, 0, sizeof cs);
    mpcl_status st;
    if ((st = check_format(&L)) == MPCL_OK && (st = check_tensors(&L, tr->model, e, n)) == MPCL_OK)
        st = check_run(&L, tr, &cs);
    return st;
}
