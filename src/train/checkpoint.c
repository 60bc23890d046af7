/* Checkpoints: a training run's whole state in one safetensors file.
 * mpcl_checkpoint_read checks a file on its own, completely, before anything
 * reads it; mpcl_trainer_load adds the checks against this trainer, then
 * writes the state. One writer serves mpcl_trainer_save and
 * mpcl_checkpoint_save_model. Layout and metadata keys are listed in
 * train.h. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_internal.h"
#include "mpcl/checkpoint.h"
#include "mpcl/number.h"
#include "mpcl/safetensors.h"

#define FORMAT_NAME "mpcl-checkpoint"
#define FORMAT_VERSION "1"

/* Every parameter, in each optimizer slot. */
#define MAX_TENSORS (MPCL__MAX_PARAMS * MPCL_OPTIM_SLOT_COUNT)
#define MAX_META 40
#define META_VALUE 64
#define MAX_WIDTHS (MPCL_MAX_HIDDEN + 2)

static const char *const SLOT_SUFFIX[] = {"", ".m", ".v"};

struct mpcl_checkpoint {
    char *path;
    mpcl_safetensors *file;
    bool owns_file; /* false for a file the caller holds (the fuzz harness) */
    size_t widths[MAX_WIDTHS], width_count; /* inputs, each layer's units */
    mpcl_model_params params;
    mpcl_checkpoint_position pos;
};

static const char *optim_name(mpcl_optim_kind k) {
    const char *name = mpcl_optim_kind_name(k);
    return name ? name : "unknown";
}

static const char *scale_mode_name(const mpcl_loss_scale *ls) {
    if (!ls) return "none";
    return mpcl_loss_scale_get_params(ls).mode == MPCL_LOSS_SCALE_FIXED ? "fixed" : "dynamic";
}

/* One tensor a model keeps: parameter `param`, optimizer slot `slot`. */
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

/* The same list for the dense layers of widths w[0..nw) and optimizer
 * `kind`, without a model: the table mpcl_model_create lays out. */
static size_t expected_of_widths(const size_t *w, size_t nw, mpcl_optim_kind kind, expected *e) {
    size_t n = 0;
    for (int slot = MPCL_OPTIM_SLOT_MASTER; slot < MPCL_OPTIM_SLOT_COUNT; slot++) {
        if (!mpcl_optim_has_slot(kind, (mpcl_optim_slot)slot)) continue;
        for (size_t l = 0; l + 1 < nw; l++) {
            for (size_t bias = 0; bias < 2; bias++, n++) {
                snprintf(e[n].name, sizeof e[n].name, "dense_%zu.%s%s", l, bias ? "bias" : "kernel",
                         SLOT_SUFFIX[slot]);
                e[n].param = 2 * l + bias;
                e[n].slot = (mpcl_optim_slot)slot;
                e[n].ndim = bias ? 1 : 2;
                memset(e[n].shape, 0, sizeof e[n].shape);
                e[n].shape[0] = bias ? w[l + 1] : w[l];
                e[n].shape[1] = bias ? 0 : w[l + 1];
                e[n].count = bias ? w[l + 1] : w[l] * w[l + 1];
            }
        }
    }
    return n;
}

/* The first tensor of st that is not in e[0..n), or NULL. */
static const char *unexpected_tensor(const mpcl_safetensors *st, const expected *e, size_t n) {
    for (size_t j = 0; j < mpcl_safetensors_count(st); j++) {
        const char *name = mpcl_safetensors_tensor(st, j)->name;
        bool known = false;
        for (size_t i = 0; i < n && !known; i++) known = strcmp(name, e[i].name) == 0;
        if (!known) return name;
    }
    return NULL;
}

static void widths_str(char *buf, size_t size, const size_t *w, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%zu", i ? "," : "", w[i]);
}

/* "784,128,10" */
static void model_shape(const mpcl_model *m, char *buf, size_t size) {
    size_t w[MAX_WIDTHS], n = 0;
    w[n++] = mpcl_model_params_of(m)->inputs;
    for (size_t i = 0; i < mpcl_model_layer_count(m) && n < MAX_WIDTHS; i++)
        w[n++] = mpcl_model_layer(m, i)->units;
    widths_str(buf, size, w, n);
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

/* The one writer: m's tensors, optimizer step and loss-scale state with
 * the position `pos`, atomically to path. With check_counters, a state
 * whose counters a load would refuse is not written either. */
static mpcl_status write_checkpoint(mpcl_context *ctx, mpcl_model *m,
                                    const mpcl_checkpoint_position *pos, bool check_counters,
                                    const char *path) {
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
    if (st == MPCL_OK && check_counters &&
        (ls_state.good_steps > opt_step || (uint64_t)opt_step + ls_state.skipped_steps > pos->step))
        st = MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                        "not saved: the model's optimizer_step %lu and loss_scale_skipped %lu "
                        "exceed the checkpoint's step %llu (trained outside fit?)",
                        (unsigned long)opt_step, (unsigned long)ls_state.skipped_steps,
                        (unsigned long long)pos->step);
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
    meta_add(l, "step", "%llu", (unsigned long long)pos->step);
    meta_add(l, "optimizer_step", "%lu", (unsigned long)opt_step);
    meta_add(l, "epoch", "%lu", (unsigned long)pos->epoch);
    meta_add(l, "epoch_step", "%llu", (unsigned long long)pos->epoch_step);
    meta_add(l, "seed", "%llu", (unsigned long long)pos->seed);
    meta_add(l, "batch", "%zu", pos->batch);
    meta_add(l, "train_samples", "%zu", pos->train_samples);
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

mpcl_status mpcl_trainer_save(mpcl_trainer *tr, const char *path) {
    if (!path) return MPCL_ERROR(tr->ctx, MPCL_ERR_INVALID_ARG, "checkpoint path is NULL");
    /* Every replica holds the same state: rank 0 alone writes it. */
    if (tr->dist && mpcl_dist_rank(tr->dist) != 0) return MPCL_OK;
    mpcl_checkpoint_position pos = {.step = tr->step,
                                    .epoch = tr->epoch,
                                    .epoch_step = tr->epoch_step,
                                    .seed = tr->params.seed,
                                    .batch = tr->params.batch,
                                    .train_samples = tr->train_count};
    return write_checkpoint(tr->ctx, tr->model, &pos, false, path);
}

/* ---- reading a file ---- */

typedef struct loader {
    mpcl_context *ctx; /* NULL outside a trainer: the thread's message only */
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

/* A whole number in [min, max], through the one strict parser. */
static mpcl_status meta_uint(const loader *L, const char *key, uint64_t min, uint64_t max,
                             uint64_t *out) {
    const char *v;
    mpcl_status st = meta_str(L, key, &v);
    if (st != MPCL_OK) return st;
    if (mpcl_parse_uint(v, max, out) != MPCL_NUMBER_OK || *out < min)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: metadata %s = \"%s\" is not an integer in [%llu, %llu]",
                          L->path, key, v, (unsigned long long)min, (unsigned long long)max);
    return MPCL_OK;
}

/* A finite float, through the one strict parser. */
static mpcl_status meta_float(const loader *L, const char *key, float *out) {
    const char *v;
    mpcl_status st = meta_str(L, key, &v);
    if (st != MPCL_OK) return st;
    double d = 0;
    mpcl_number_error err = mpcl_parse_real(v, &d);
    if (err == MPCL_NUMBER_OK && !(fabs(d) <= (double)FLT_MAX)) err = MPCL_NUMBER_RANGE;
    if (err != MPCL_NUMBER_OK)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT, "checkpoint %s: metadata %s = \"%s\" %s",
                          L->path, key, v, mpcl_number_error_text(err));
    *out = (float)d;
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

/* "784,16,10": 2 to MAX_WIDTHS widths, each in [1, INT32_MAX]. */
static mpcl_status parse_model(const loader *L, mpcl_checkpoint *c) {
    const char *v;
    mpcl_status st = meta_str(L, "model", &v);
    if (st != MPCL_OK) return st;
    char part[32];
    size_t n = 0;
    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");
        uint64_t w = 0;
        bool ok = n < MAX_WIDTHS && len < sizeof part;
        if (ok) {
            memcpy(part, p, len);
            part[len] = '\0';
            ok = mpcl_parse_uint(part, INT32_MAX, &w) == MPCL_NUMBER_OK && w >= 1;
        }
        if (!ok)
            return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                              "checkpoint %s: metadata model = \"%s\" is not 2 to %d widths in "
                              "[1, %d] separated by commas",
                              L->path, v, MAX_WIDTHS, INT32_MAX);
        c->widths[n++] = (size_t)w;
        p += len;
        if (!*p) break;
    }
    if (n < 2)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: metadata model = \"%s\" has no output layer", L->path, v);
    c->width_count = n;
    return MPCL_OK;
}

/* The optimizer kind and its hyperparameters, under mpcl_optim_params_check's
 * rules. clip_norm is absent from 0.1.0 checkpoints: 0, no clipping. */
static mpcl_status parse_optimizer(const loader *L, mpcl_optim_params *o) {
    const char *v;
    mpcl_status st = meta_str(L, "optimizer", &v);
    if (st != MPCL_OK) return st;
    mpcl_optim_kind kind;
    if (!mpcl_optim_kind_parse(v, &kind))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: metadata optimizer = \"%s\" is none of %s", L->path, v,
                          mpcl_optim_kind_names());
    *o = mpcl_optim_default_params(kind);
    o->clip_norm = 0.0f;
    uint64_t nesterov = 0;
    if ((st = meta_float(L, "lr", &o->lr)) != MPCL_OK ||
        (st = meta_float(L, "weight_decay", &o->weight_decay)) != MPCL_OK)
        return st;
    if (mpcl_safetensors_meta_get(L->st, "clip_norm") &&
        (st = meta_float(L, "clip_norm", &o->clip_norm)) != MPCL_OK)
        return st;
    if (kind == MPCL_OPTIM_SGD) {
        if ((st = meta_float(L, "momentum", &o->momentum)) != MPCL_OK ||
            (st = meta_uint(L, "nesterov", 0, 1, &nesterov)) != MPCL_OK)
            return st;
        o->nesterov = (int)nesterov;
    } else if ((st = meta_float(L, "beta1", &o->beta1)) != MPCL_OK ||
               (st = meta_float(L, "beta2", &o->beta2)) != MPCL_OK ||
               (st = meta_float(L, "eps", &o->eps)) != MPCL_OK) {
        return st;
    }
    if (mpcl_optim_params_check(NULL, o) != MPCL_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", mpcl_errmsg());
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT, "checkpoint %s: metadata: %s", L->path, why);
    }
    return MPCL_OK;
}

/* The choices that name the model: shape, activation, optimizer, policy. */
static mpcl_status parse_choices(const loader *L, mpcl_checkpoint *c) {
    mpcl_model_params *p = &c->params;
    const char *v;
    mpcl_status st;
    if ((st = parse_model(L, c)) != MPCL_OK) return st;
    if ((st = meta_str(L, "activation", &v)) != MPCL_OK) return st;
    if (!mpcl_activation_parse(v, &p->activation))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: metadata activation = \"%s\" is not an activation",
                          L->path, v);
    if ((st = parse_optimizer(L, &p->optim)) != MPCL_OK) return st;
    if ((st = meta_str(L, "policy", &v)) != MPCL_OK) return st;
    if (!mpcl_policy_parse(v, &p->policy))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: metadata policy = \"%s\" is not a precision policy",
                          L->path, v);
    p->inputs = c->widths[0];
    p->hidden_count = c->width_count - 2;
    for (size_t i = 0; i < p->hidden_count; i++) p->hidden[i] = c->widths[i + 1];
    p->classes = c->widths[c->width_count - 1];
    return MPCL_OK;
}

/* The counters and the position, consistent with each other and with the
 * steps per epoch of the saved batch and training samples. */
static mpcl_status parse_position(const loader *L, mpcl_checkpoint_position *pos) {
    uint64_t epoch, opt_step, batch, samples, good, skipped;
    mpcl_status st;
    if ((st = meta_uint(L, "seed", 0, UINT64_MAX, &pos->seed)) != MPCL_OK ||
        (st = meta_uint(L, "batch", 1, INT32_MAX, &batch)) != MPCL_OK ||
        (st = meta_uint(L, "train_samples", 1, INT32_MAX, &samples)) != MPCL_OK ||
        (st = meta_uint(L, "step", 0, UINT64_MAX, &pos->step)) != MPCL_OK ||
        (st = meta_uint(L, "optimizer_step", 0, UINT32_MAX, &opt_step)) != MPCL_OK ||
        (st = meta_uint(L, "epoch", 0, UINT32_MAX, &epoch)) != MPCL_OK ||
        (st = meta_uint(L, "epoch_step", 0, UINT64_MAX, &pos->epoch_step)) != MPCL_OK ||
        (st = meta_uint(L, "loss_scale_good_steps", 0, UINT32_MAX, &good)) != MPCL_OK ||
        (st = meta_uint(L, "loss_scale_skipped", 0, UINT32_MAX, &skipped)) != MPCL_OK)
        return st;
    pos->batch = (size_t)batch;
    pos->train_samples = (size_t)samples;
    pos->epoch = (uint32_t)epoch;
    pos->optimizer_step = (uint32_t)opt_step;
    pos->loss_scale.good_steps = (uint32_t)good;
    pos->loss_scale.skipped_steps = (uint32_t)skipped;
    uint64_t per_epoch = (samples + batch - 1) / batch;
    if (pos->epoch_step >= per_epoch || pos->step != epoch * per_epoch + pos->epoch_step ||
        opt_step > pos->step)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: position step %llu, epoch %llu, epoch_step %llu, "
                          "optimizer_step %llu is inconsistent with %llu steps per epoch",
                          L->path, (unsigned long long)pos->step, (unsigned long long)epoch,
                          (unsigned long long)pos->epoch_step, (unsigned long long)opt_step,
                          (unsigned long long)per_epoch);
    return MPCL_OK;
}

/* The loss scaler's mode and state against the bounds `b` (a dynamic
 * scaler's, or the defaults); check_range false skips the scale's range (a
 * scale the user typed replaces the saved one: resume_keeps_scale). */
static mpcl_status parse_scale(const loader *L, mpcl_checkpoint *c, const mpcl_loss_scale_params *b,
                               bool check_range) {
    mpcl_checkpoint_position *cs = &c->pos;
    const char *mode;
    mpcl_status st;
    if ((st = meta_str(L, "loss_scale_mode", &mode)) != MPCL_OK) return st;
    if (strcmp(mode, "none") != 0 && strcmp(mode, "dynamic") != 0 && strcmp(mode, "fixed") != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: loss_scale_mode \"%s\" (none, dynamic or fixed)", L->path,
                          mode);
    cs->scaled = strcmp(mode, "none") != 0;
    bool dynamic = strcmp(mode, "dynamic") == 0;
    const char *v;
    float scale = 0;
    if ((st = meta_str(L, "loss_scale", &v)) != MPCL_OK) return st;
    if (meta_float(L, "loss_scale", &scale) != MPCL_OK || !(scale > 0))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: loss_scale \"%s\" is not a finite number > 0", L->path,
                          v);
    cs->loss_scale.scale = scale;
    if (dynamic && check_range && !(scale >= b->min_scale && scale <= b->max_scale))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: loss_scale %g is outside [%g, %g], the dynamic scale's "
                          "bounds",
                          L->path, (double)scale, (double)b->min_scale, (double)b->max_scale);
    uint64_t good = cs->loss_scale.good_steps, skipped = cs->loss_scale.skipped_steps;
    uint64_t opt_step = cs->optimizer_step;
    if (dynamic ? good >= b->growth_interval : good != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: loss_scale_good_steps %llu cannot belong to a %s scale "
                          "(%s)",
                          L->path, (unsigned long long)good, mode,
                          dynamic ? "it grows and restarts at the growth interval" : "always 0");
    if (good > opt_step || opt_step + skipped > cs->step)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: counters that cannot belong to one run: step %llu, "
                          "optimizer_step %llu, loss_scale_skipped %llu, loss_scale_good_steps "
                          "%llu (applied plus skipped steps are at most the steps; good steps "
                          "at most the applied ones)",
                          L->path, (unsigned long long)cs->step, (unsigned long long)opt_step,
                          (unsigned long long)skipped, (unsigned long long)good);
    mpcl_model_params *p = &c->params;
    p->loss_scaling = cs->scaled ? MPCL_LOSS_SCALING_ON : MPCL_LOSS_SCALING_OFF;
    p->loss_scale = mpcl_loss_scale_default_params();
    if (cs->scaled) {
        p->loss_scale.mode = dynamic ? MPCL_LOSS_SCALE_DYNAMIC : MPCL_LOSS_SCALE_FIXED;
        p->loss_scale.initial_scale = scale;
        p->loss_scale.min_scale = fminf(p->loss_scale.min_scale, scale);
        p->loss_scale.max_scale = fmaxf(p->loss_scale.max_scale, scale);
    }
    return MPCL_OK;
}

/* Every tensor the metadata's model and optimizer keep: present, F32, of
 * its shape, with values a run produces; and no other. */
static mpcl_status check_file_tensors(const loader *L, const mpcl_checkpoint *c) {
    expected e[MAX_TENSORS];
    size_t n = expected_of_widths(c->widths, c->width_count, c->params.optim.kind, e);
    char model[96];
    widths_str(model, sizeof model, c->widths, c->width_count);
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
            char got[96], want[96];
            shape_str(got, sizeof got, t->ndim, t->shape);
            shape_str(want, sizeof want, e[i].ndim, e[i].shape);
            return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                              "checkpoint %s: tensor %s has shape %s; its metadata's model %s "
                              "gives it %s",
                              L->path, e[i].name, got, model, want);
        }
    }
    const char *extra = unexpected_tensor(L->st, e, n);
    if (extra)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s holds tensor %s, which model %s with optimizer %s does "
                          "not have",
                          L->path, extra, model, optim_name(c->params.optim.kind));
    char what[512];
    snprintf(what, sizeof what, "checkpoint %s", L->path);
    for (size_t i = 0; i < n; i++) {
        const mpcl_st_tensor *t = mpcl_safetensors_find(L->st, e[i].name);
        mpcl_status st = check_values(L->ctx, MPCL_ERR_FORMAT, what, &e[i], t->data, e[i].count);
        if (st != MPCL_OK) return st;
    }
    return MPCL_OK;
}

/* Everything the file says, checked on its own, into c. `b` and
 * check_range as for parse_scale. */
static mpcl_status check_file(const loader *L, mpcl_checkpoint *c, const mpcl_loss_scale_params *b,
                              bool check_range) {
    mpcl_status st;
    c->params = mpcl_model_default_params();
    memset(&c->pos, 0, sizeof c->pos);
    if ((st = parse_choices(L, c)) != MPCL_OK || (st = parse_position(L, &c->pos)) != MPCL_OK ||
        (st = parse_scale(L, c, b, check_range)) != MPCL_OK)
        return st;
    c->params.seed = c->pos.seed;
    c->params.max_batch = c->pos.batch;
    return check_file_tensors(L, c);
}

static mpcl_status checkpoint_open(const char *path, mpcl_checkpoint **out) {
    mpcl_checkpoint *c = calloc(1, sizeof *c);
    if (c) c->path = malloc(strlen(path) + 1);
    if (!c || !c->path) {
        free(c);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "reading checkpoint %s", path);
    }
    strcpy(c->path, path);
    c->owns_file = true;
    mpcl_status st = mpcl_safetensors_read(path, &c->file);
    if (st != MPCL_OK) {
        mpcl_checkpoint_destroy(c);
        return st;
    }
    *out = c;
    return MPCL_OK;
}

void mpcl_checkpoint_destroy(mpcl_checkpoint *c) {
    if (!c) return;
    if (c->owns_file) mpcl_safetensors_destroy(c->file);
    free(c->path);
    free(c);
}

mpcl_status mpcl_checkpoint_read(const char *path, mpcl_checkpoint **out) {
    if (out) *out = NULL;
    if (!path || !out)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_checkpoint_read: NULL argument");
    mpcl_checkpoint *c = NULL;
    mpcl_status st = checkpoint_open(path, &c);
    if (st != MPCL_OK) return st;
    loader L = {NULL, c->path, c->file};
    mpcl_loss_scale_params b = mpcl_loss_scale_default_params();
    if ((st = check_format(&L)) == MPCL_OK) st = check_file(&L, c, &b, true);
    if (st != MPCL_OK) {
        mpcl_checkpoint_destroy(c);
        return st;
    }
    *out = c;
    return MPCL_OK;
}

const mpcl_model_params *mpcl_checkpoint_model_params(const mpcl_checkpoint *c) {
    return &c->params;
}

const mpcl_checkpoint_position *mpcl_checkpoint_position_of(const mpcl_checkpoint *c) {
    return &c->pos;
}

/* ---- into a model ---- */

/* m has c's widths and optimizer kind, so that its parameter table holds
 * every tensor of the file, of the same shape. */
static mpcl_status check_model_fits(mpcl_context *ctx, const mpcl_checkpoint *c,
                                    const mpcl_model *m) {
    char have[96], want[96];
    model_shape(m, have, sizeof have);
    widths_str(want, sizeof want, c->widths, c->width_count);
    mpcl_optim_kind kind = mpcl_model_params_of(m)->optim.kind;
    if (strcmp(have, want) != 0 || kind != c->params.optim.kind)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "model %s with optimizer %s does not fit checkpoint %s (model %s, "
                          "optimizer %s)",
                          have, optim_name(kind), c->path, want, optim_name(c->params.optim.kind));
    return MPCL_OK;
}

/* Tensors, optimizer step and loss-scale state into m (checked to fit). A
 * checkpoint without a scaler (float32) leaves a scaling model's scaler at
 * its initial state; a scaler's state means nothing to a model without one.
 * With keep_scale, the scale m's params set (a scale the user typed) wins
 * over the saved one; the count of skipped steps is history and stays.
 * *scale gets the state written (when *wrote). */
static mpcl_status apply_state(mpcl_context *ctx, const mpcl_checkpoint *c, mpcl_model *m,
                               bool keep_scale, mpcl_loss_scale_state *scale, bool *wrote) {
    expected e[MAX_TENSORS];
    size_t n = expected_tensors(m, e);
    mpcl_status st = MPCL_OK;
    *wrote = false;
    for (size_t i = 0; i < n && st == MPCL_OK; i++) {
        const mpcl_st_tensor *t = mpcl_safetensors_find(c->file, e[i].name);
        /* The data may be unaligned in a file from another writer. */
        float *buf = malloc(t->bytes ? t->bytes : 1);
        if (!buf) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "loading %s", e[i].name);
        memcpy(buf, t->data, t->bytes);
        st = mpcl_model_write_param(m, e[i].param, e[i].slot, buf, t->bytes / sizeof(float));
        free(buf);
    }
    if (st == MPCL_OK) st = mpcl_model_write_step(m, c->pos.optimizer_step);
    mpcl_loss_scale *ls = mpcl_model_loss_scale(m);
    *scale = c->pos.loss_scale;
    if (ls && keep_scale) {
        scale->scale = mpcl_loss_scale_get_params(ls).initial_scale;
        scale->good_steps = 0;
        if (!c->pos.scaled) scale->skipped_steps = 0;
    }
    if (st == MPCL_OK && ls && (c->pos.scaled || keep_scale)) {
        st = mpcl_loss_scale_write_state(ctx, ls, scale);
        *wrote = st == MPCL_OK;
    }
    return st;
}

mpcl_status mpcl_checkpoint_apply(const mpcl_checkpoint *c, mpcl_model *m) {
    if (!c || !m)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_checkpoint_apply: NULL argument");
    mpcl_context *ctx = mpcl_model_context(m);
    mpcl_status st = check_model_fits(ctx, c, m);
    mpcl_loss_scale_state s;
    bool wrote;
    return st != MPCL_OK ? st : apply_state(ctx, c, m, false, &s, &wrote);
}

mpcl_status mpcl_checkpoint_save_model(const mpcl_checkpoint *c, mpcl_model *m, const char *path) {
    if (!c || !m)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_checkpoint_save_model: NULL argument");
    mpcl_context *ctx = mpcl_model_context(m);
    mpcl_status st = check_model_fits(ctx, c, m);
    return st != MPCL_OK ? st : write_checkpoint(ctx, m, &c->pos, true, path);
}

/* ---- into a trainer ---- */

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

/* The file's tensors against this trainer's model, with the flags that
 * would make this run match a checkpoint of other widths. */
static mpcl_status check_tensors(const loader *L, mpcl_model *m) {
    expected e[MAX_TENSORS];
    size_t n = expected_tensors(m, e);
    for (size_t i = 0; i < n; i++) {
        const mpcl_st_tensor *t = mpcl_safetensors_find(L->st, e[i].name);
        if (!t)
            return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT, "checkpoint %s has no tensor %s", L->path,
                              e[i].name);
        bool same = t->ndim == e[i].ndim;
        for (size_t d = 0; same && d < t->ndim; d++) same = t->shape[d] == e[i].shape[d];
        if (!same) {
            char got[96], want[96], cshape[96], mshape[96], fix[256];
            size_t cw[MAX_WIDTHS + 1];
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
    const char *extra = unexpected_tensor(L->st, e, n);
    if (extra)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s holds tensor %s, which this model does not have", L->path,
                          extra);
    return MPCL_OK;
}

/* The bounds a new run's scaler keeps: this run's dynamic scaler's, or the
 * defaults. */
static mpcl_loss_scale_params scale_bounds(const mpcl_trainer *tr) {
    mpcl_loss_scale *ls = mpcl_model_loss_scale(tr->model);
    return ls && mpcl_loss_scale_get_params(ls).mode == MPCL_LOSS_SCALE_DYNAMIC
               ? mpcl_loss_scale_get_params(ls)
               : mpcl_loss_scale_default_params();
}

/* Every check a load makes before it changes anything: the format, this
 * run's identity (so that an optimizer mismatch is called one, not a
 * missing or extra tensor), the file on its own, then the file against this
 * trainer. */
static mpcl_status check_all(mpcl_trainer *tr, mpcl_checkpoint *c) {
    loader L = {tr->ctx, c->path, c->file};
    mpcl_loss_scale_params b = scale_bounds(tr);
    const mpcl_checkpoint_position *p = &c->pos;
    mpcl_status st;
    if ((st = check_format(&L)) != MPCL_OK || (st = check_identity(&L, tr->model)) != MPCL_OK ||
        (st = check_file(&L, c, &b, !tr->params.resume_keeps_scale)) != MPCL_OK ||
        (st = check_tensors(&L, tr->model)) != MPCL_OK)
        return st;
    return check_sequence(&L, tr, p->seed, p->batch, p->train_samples);
}

mpcl_status mpcl_trainer_load(mpcl_trainer *tr, const char *path) {
    mpcl_context *ctx = tr->ctx;
    if (!path) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "checkpoint path is NULL");
    mpcl_checkpoint *c = NULL;
    mpcl_status st = checkpoint_open(path, &c);
    if (st != MPCL_OK) return mpcl__train_adopt_error(ctx, st);
    mpcl_loss_scale_state s;
    bool wrote = false;
    if ((st = check_all(tr, c)) == MPCL_OK)
        st = apply_state(ctx, c, tr->model, tr->params.resume_keeps_scale, &s, &wrote);
    if (st == MPCL_OK) {
        tr->step = c->pos.step;
        tr->epoch = c->pos.epoch;
        tr->epoch_step = c->pos.epoch_step;
        tr->order_valid = false;
        tr->stopped = false;
        if (wrote) {
            tr->loss_scale = s.scale;
            tr->skipped_steps = s.skipped_steps;
        }
        st = mpcl__train_sync_replicas(tr);
    }
    mpcl_checkpoint_destroy(c);
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
    mpcl_checkpoint c;
    memset(&c, 0, sizeof c);
    c.path = (char *)path;
    c.file = (mpcl_safetensors *)file;
    return check_all(tr, &c);
}
