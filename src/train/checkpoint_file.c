/* Reading a checkpoint file and checking it on its own, completely, before
 * anything reads it: mpcl_checkpoint_read, and the checks mpcl_trainer_load
 * starts with (checkpoint.c). Layout and metadata keys are listed in
 * train.h. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpcl/number.h"
#include "mpcl/safetensors.h"
#include "train/checkpoint_file.h"

static const char *const SLOT_SUFFIX[] = {"", ".m", ".v"};

const char *mpcl__ckpt_optim_name(mpcl_optim_kind k) {
    const char *name = mpcl_optim_kind_name(k);
    return name ? name : "unknown";
}

static void expect_rows(const mpcl__param_table *t, bool buffers, mpcl_optim_slot slot,
                        mpcl__ckpt_expected *e, size_t *n) {
    for (size_t i = 0; i < t->count; i++, (*n)++) {
        const mpcl_param_info *r = &t->rows[i];
        mpcl__ckpt_expected *x = &e[*n];
        snprintf(x->name, sizeof x->name, "%s%s", r->name, buffers ? "" : SLOT_SUFFIX[slot]);
        x->param = i;
        x->buffer = buffers;
        x->slot = slot;
        x->ndim = r->rank;
        memcpy(x->shape, r->shape, sizeof x->shape);
        x->count = r->count;
    }
}

mpcl_status mpcl__ckpt_expected_tensors(mpcl_context *ctx, const mpcl_model_params *p,
                                        mpcl__ckpt_expected **e, size_t *n) {
    *n = 0;
    *e = NULL;
    mpcl__tables *t = malloc(sizeof *t);
    if (!t) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "a checkpoint's tensor list");
    mpcl_status st = mpcl__model_tables(ctx, p, t);
    if (st == MPCL_OK &&
        !(*e = malloc((t->params.count * MPCL_OPTIM_SLOT_COUNT + t->buffers.count + 1) *
                      sizeof **e)))
        st = MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "a checkpoint's tensor list");
    for (int slot = MPCL_OPTIM_SLOT_MASTER; st == MPCL_OK && slot < MPCL_OPTIM_SLOT_COUNT; slot++)
        if (mpcl_optim_has_slot(p->optim.kind, (mpcl_optim_slot)slot))
            expect_rows(&t->params, false, (mpcl_optim_slot)slot, *e, n);
    if (st == MPCL_OK) expect_rows(&t->buffers, true, MPCL_OPTIM_SLOT_MASTER, *e, n);
    free(t);
    return st;
}

/* The first tensor of st that is not in e[0..n), or NULL. */
const char *mpcl__ckpt_unexpected_tensor(const mpcl_safetensors *st, const mpcl__ckpt_expected *e,
                                         size_t n) {
    for (size_t j = 0; j < mpcl_safetensors_count(st); j++) {
        const char *name = mpcl_safetensors_tensor(st, j)->name;
        bool known = false;
        for (size_t i = 0; i < n && !known; i++) known = strcmp(name, e[i].name) == 0;
        if (!known) return name;
    }
    return NULL;
}

/* Values no run produces: a non-finite weight or moment, a negative second
 * moment. data may be unaligned (a file from another writer). `status` and
 * `what` say whose values they are: the checkpoint being loaded, or this
 * trainer's state being saved. */
mpcl_status mpcl__ckpt_check_values(mpcl_context *ctx, mpcl_status status, const char *what,
                                    const mpcl__ckpt_expected *e, const void *data, size_t count) {
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

mpcl_status mpcl__ckpt_meta_str(const mpcl__ckpt_loader *L, const char *key, const char **out) {
    *out = mpcl_safetensors_meta_get(L->st, key);
    if (!*out)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT, "checkpoint %s: metadata has no \"%s\"", L->path,
                          key);
    return MPCL_OK;
}

/* A whole number in [min, max], through the one strict parser. */
static mpcl_status meta_uint(const mpcl__ckpt_loader *L, const char *key, uint64_t min,
                             uint64_t max, uint64_t *out) {
    const char *v;
    mpcl_status st = mpcl__ckpt_meta_str(L, key, &v);
    if (st != MPCL_OK) return st;
    if (mpcl_parse_uint(v, max, out) != MPCL_NUMBER_OK || *out < min)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: metadata %s = \"%s\" is not an integer in [%llu, %llu]",
                          L->path, key, v, (unsigned long long)min, (unsigned long long)max);
    return MPCL_OK;
}

/* A finite float, through the one strict parser. */
static mpcl_status meta_float(const mpcl__ckpt_loader *L, const char *key, float *out) {
    const char *v;
    mpcl_status st = mpcl__ckpt_meta_str(L, key, &v);
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

/* A finite double, through the one strict parser. */
static mpcl_status meta_double(const mpcl__ckpt_loader *L, const char *key, double *out) {
    const char *v;
    mpcl_status st = mpcl__ckpt_meta_str(L, key, &v);
    if (st != MPCL_OK) return st;
    mpcl_number_error err = mpcl_parse_real(v, out);
    if (err != MPCL_NUMBER_OK)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT, "checkpoint %s: metadata %s = \"%s\" %s",
                          L->path, key, v, mpcl_number_error_text(err));
    return MPCL_OK;
}

void mpcl__ckpt_shape_str(char *buf, size_t size, size_t ndim, const size_t *shape) {
    size_t k = (size_t)snprintf(buf, size, "[");
    for (size_t i = 0; i < ndim && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%zu", i ? ", " : "", shape[i]);
    if (k < size) snprintf(buf + k, size - k, "]");
}

/* First of all: is it an mpcl checkpoint of a version this code reads. */
mpcl_status mpcl__ckpt_check_format(const mpcl__ckpt_loader *L) {
    const char *v;
    mpcl_status st;
    if ((st = mpcl__ckpt_meta_str(L, "format", &v)) != MPCL_OK) return st;
    if (strcmp(v, MPCL__CKPT_FORMAT) != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "%s: format \"%s\", not \"" MPCL__CKPT_FORMAT "\"", L->path, v);
    if ((st = mpcl__ckpt_meta_str(L, "format_version", &v)) != MPCL_OK) return st;
    if (strcmp(v, MPCL__CKPT_FORMAT_VERSION) != 0)
        return MPCL_ERROR(
            L->ctx, MPCL_ERR_FORMAT,
            "%s: checkpoint format version \"%s\"; this mpcl reads " MPCL__CKPT_FORMAT_VERSION,
            L->path, v);
    return MPCL_OK;
}

/* "784,16,10": 2 to MPCL__CKPT_MAX_WIDTHS widths, each in [1, INT32_MAX]
 * (the model key of checkpoints without layers: an MLP). */
static mpcl_status parse_widths(const mpcl__ckpt_loader *L, size_t *widths, size_t *count) {
    const char *v;
    mpcl_status st = mpcl__ckpt_meta_str(L, "model", &v);
    if (st != MPCL_OK) return st;
    char part[32];
    size_t n = 0;
    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");
        uint64_t w = 0;
        bool ok = n < MPCL__CKPT_MAX_WIDTHS && len < sizeof part;
        if (ok) {
            memcpy(part, p, len);
            part[len] = '\0';
            ok = mpcl_parse_uint(part, INT32_MAX, &w) == MPCL_NUMBER_OK && w >= 1;
        }
        if (!ok)
            return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                              "checkpoint %s: metadata model = \"%s\" is not 2 to %d widths in "
                              "[1, %d] separated by commas",
                              L->path, v, MPCL__CKPT_MAX_WIDTHS, INT32_MAX);
        widths[n++] = (size_t)w;
        p += len;
        if (!*p) break;
    }
    if (n < 2)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: metadata model = \"%s\" has no output layer", L->path, v);
    *count = n;
    return MPCL_OK;
}

/* The hyperparameters added after checkpoints were first written: an older
 * file has no key for them, and its run had their default (clip_norm 0, no
 * clipping, absent from 0.1.0 files; decay_vectors true). */
static bool added_later(const char *key) {
    static const char *const keys[] = {"clip_norm", "decay_vectors"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(key, keys[i]) == 0) return true;
    return false;
}

/* The optimizer kind and each hyperparameter its kind declares, under the
 * key of the mpcl_optim_params field it maps to (include/mpcl/optim.h), and
 * under the declaration's rules; one added later and absent keeps its
 * declared default. */
static mpcl_status parse_optimizer(const mpcl__ckpt_loader *L, mpcl_optim_params *o) {
    const char *v;
    mpcl_status st = mpcl__ckpt_meta_str(L, "optimizer", &v);
    if (st != MPCL_OK) return st;
    mpcl_optim_kind kind;
    if (!mpcl_optim_kind_parse(v, &kind))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: metadata optimizer = \"%s\" is none of %s", L->path, v,
                          mpcl_optim_kind_names());
    *o = mpcl_optim_default_params(kind);
    for (size_t i = 0; i < mpcl_optim_param_count(kind); i++) {
        const char *key = mpcl_optim_param_field(kind, i);
        if (added_later(key) && !mpcl_safetensors_meta_get(L->st, key)) continue;
        uint64_t flag = 0;
        float real = 0.0f;
        st = mpcl_optim_param_is_bool(kind, i) ? meta_uint(L, key, 0, 1, &flag)
                                               : meta_float(L, key, &real);
        if (st != MPCL_OK) return st;
        double value = mpcl_optim_param_is_bool(kind, i) ? (double)flag : (double)real;
        if (mpcl_optim_params_set_value(NULL, o, i, value) != MPCL_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", mpcl_errmsg());
            return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT, "checkpoint %s: metadata %s %s: %s", L->path,
                              key, mpcl_safetensors_meta_get(L->st, key), why);
        }
    }
    return MPCL_OK;
}

/* The lr schedule under mpcl_lr_schedule_check's rules. Checkpoints from
 * before schedules have no lr_schedule key: constant. */
static mpcl_status parse_schedule(const mpcl__ckpt_loader *L, mpcl_lr_schedule *s) {
    *s = mpcl_lr_schedule_default();
    const char *v = mpcl_safetensors_meta_get(L->st, "lr_schedule");
    if (!v) return MPCL_OK;
    if (!mpcl_lr_schedule_kind_parse(v, &s->kind))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: metadata lr_schedule = \"%s\" is none of %s", L->path, v,
                          mpcl_lr_schedule_kind_names());
    mpcl_status st;
    if ((st = meta_uint(L, "warmup_steps", 0, UINT64_MAX, &s->warmup_steps)) != MPCL_OK ||
        (st = meta_uint(L, "decay_steps", 0, UINT64_MAX, &s->decay_steps)) != MPCL_OK ||
        (st = meta_double(L, "lr_alpha", &s->alpha)) != MPCL_OK ||
        (st = meta_double(L, "warmup_from", &s->warmup_from)) != MPCL_OK)
        return st;
    if (mpcl_lr_schedule_check(NULL, s) != MPCL_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", mpcl_errmsg());
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT, "checkpoint %s: metadata: %s", L->path, why);
    }
    return MPCL_OK;
}

/* An MLP from the model and activation keys of a checkpoint without
 * layers (0.1.0 and the MLP-only versions after it). */
static mpcl_status parse_mlp(const mpcl__ckpt_loader *L, mpcl_model_params *p) {
    size_t w[MPCL__CKPT_MAX_WIDTHS], n = 0;
    const char *v;
    mpcl_status st;
    if ((st = parse_widths(L, w, &n)) != MPCL_OK) return st;
    if ((st = mpcl__ckpt_meta_str(L, "activation", &v)) != MPCL_OK) return st;
    if (!mpcl_activation_parse(v, &p->activation))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: metadata activation = \"%s\" is not an activation",
                          L->path, v);
    p->inputs = w[0];
    p->hidden_count = n - 2;
    for (size_t i = 0; i < p->hidden_count; i++) p->hidden[i] = w[i + 1];
    p->classes = w[n - 1];
    return MPCL_OK;
}

/* The layers key: the model's text form (model.h), checked as a model
 * would check it; classes is the last dimension of its output. */
static mpcl_status parse_layers(const mpcl__ckpt_loader *L, const char *text,
                                mpcl_model_params *p) {
    mpcl_layer_summary *s = malloc(MPCL_MAX_LAYERS * sizeof *s);
    if (!s) return MPCL_ERROR(L->ctx, MPCL_ERR_OUT_OF_MEMORY, "checkpoint %s", L->path);
    size_t n = 0;
    p->classes = 0;
    mpcl_status st = mpcl_model_spec_parse(NULL, text, p);
    if (st == MPCL_OK) st = mpcl_model_summary(NULL, p, s, &n);
    if (st == MPCL_OK) p->classes = s[n - 1].out_shape[s[n - 1].out_rank - 1];
    free(s);
    if (st != MPCL_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", mpcl_errmsg());
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT, "checkpoint %s: metadata layers: %s", L->path,
                          why);
    }
    return MPCL_OK;
}

/* The choices that name the model: layers, loss, optimizer, policy. */
static mpcl_status parse_choices(const mpcl__ckpt_loader *L, mpcl_checkpoint *c) {
    mpcl_model_params *p = &c->params;
    /* Checkpoints before losses were chosen trained the sparse one. The
     * loss first: it decides which output activation the layers may end in. */
    const char *v = mpcl_safetensors_meta_get(L->st, "loss");
    if (v && !mpcl_loss_parse(v, &p->loss))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: metadata loss = \"%s\" is not a loss", L->path, v);
    v = mpcl_safetensors_meta_get(L->st, "layers");
    mpcl_status st = v ? parse_layers(L, v, p) : parse_mlp(L, p);
    if (st != MPCL_OK) return st;
    if ((st = parse_optimizer(L, &p->optim)) != MPCL_OK) return st;
    if ((st = parse_schedule(L, &p->lr_schedule)) != MPCL_OK) return st;
    if ((st = mpcl__ckpt_meta_str(L, "policy", &v)) != MPCL_OK) return st;
    if (!mpcl_policy_parse(v, &p->policy))
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: metadata policy = \"%s\" is not a precision policy",
                          L->path, v);
    return MPCL_OK;
}

/* The counters and the position, consistent with each other and with the
 * steps per epoch of the saved batch and training samples. */
static mpcl_status parse_position(const mpcl__ckpt_loader *L, mpcl_checkpoint_position *pos) {
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
    /* Absent before dropout: no mask was ever drawn. */
    pos->rng_counter = 0;
    if (mpcl_safetensors_meta_get(L->st, "rng_counter") &&
        (st = meta_uint(L, "rng_counter", 0, UINT64_MAX, &pos->rng_counter)) != MPCL_OK)
        return st;
    pos->batch = (size_t)batch;
    pos->train_samples = (size_t)samples;
    pos->epoch = (uint32_t)epoch;
    pos->optimizer_step = (uint32_t)opt_step;
    pos->loss_scale.good_steps = (uint32_t)good;
    pos->loss_scale.skipped_steps = (uint32_t)skipped;
    /* Absent before token runs: the epoch of the samples. */
    uint64_t per_epoch = (samples + batch - 1) / batch;
    if (mpcl_safetensors_meta_get(L->st, "steps_per_epoch") &&
        (st = meta_uint(L, "steps_per_epoch", 1, UINT64_MAX, &per_epoch)) != MPCL_OK)
        return st;
    pos->steps_per_epoch = per_epoch;
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
static mpcl_status parse_scale(const mpcl__ckpt_loader *L, mpcl_checkpoint *c,
                               const mpcl_loss_scale_params *b, bool check_range) {
    mpcl_checkpoint_position *cs = &c->pos;
    const char *mode;
    mpcl_status st;
    if ((st = mpcl__ckpt_meta_str(L, "loss_scale_mode", &mode)) != MPCL_OK) return st;
    if (strcmp(mode, "none") != 0 && strcmp(mode, "dynamic") != 0 && strcmp(mode, "fixed") != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s: loss_scale_mode \"%s\" (none, dynamic or fixed)", L->path,
                          mode);
    cs->scaled = strcmp(mode, "none") != 0;
    bool dynamic = strcmp(mode, "dynamic") == 0;
    const char *v;
    float scale = 0;
    if ((st = mpcl__ckpt_meta_str(L, "loss_scale", &v)) != MPCL_OK) return st;
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

/* The tensors e[0..n) of the metadata's model: each present, F32, of its
 * shape, with values a run produces; and no other. */
static mpcl_status check_expected_tensors(const mpcl__ckpt_loader *L, const mpcl_checkpoint *c,
                                          const mpcl__ckpt_expected *e, size_t n) {
    mpcl_status st = MPCL_OK;
    char model[MPCL_MODEL_SPEC_MAX];
    if (mpcl_model_spec_format(NULL, &c->params, model, sizeof model) != MPCL_OK)
        snprintf(model, sizeof model, "?");
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
            mpcl__ckpt_shape_str(got, sizeof got, t->ndim, t->shape);
            mpcl__ckpt_shape_str(want, sizeof want, e[i].ndim, e[i].shape);
            return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                              "checkpoint %s: tensor %s has shape %s; its metadata's model "
                              "(%s) gives it %s",
                              L->path, e[i].name, got, model, want);
        }
    }
    const char *extra = mpcl__ckpt_unexpected_tensor(L->st, e, n);
    if (extra)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s holds tensor %s, which model (%s) with optimizer %s "
                          "does not have",
                          L->path, extra, model, mpcl__ckpt_optim_name(c->params.optim.kind));
    char what[512];
    snprintf(what, sizeof what, "checkpoint %s", L->path);
    for (size_t i = 0; i < n && st == MPCL_OK; i++) {
        const mpcl_st_tensor *t = mpcl_safetensors_find(L->st, e[i].name);
        st = mpcl__ckpt_check_values(L->ctx, MPCL_ERR_FORMAT, what, &e[i], t->data, e[i].count);
    }
    return st;
}

/* Every tensor the metadata's model and optimizer keep, checked. */
static mpcl_status check_file_tensors(const mpcl__ckpt_loader *L, const mpcl_checkpoint *c) {
    mpcl__ckpt_expected *e;
    size_t n;
    mpcl_status st = mpcl__ckpt_expected_tensors(L->ctx, &c->params, &e, &n);
    if (st == MPCL_OK) st = check_expected_tensors(L, c, e, n);
    free(e);
    return st;
}

/* Everything the file says, checked on its own, into c. `b` and
 * check_range as for parse_scale. */
mpcl_status mpcl__ckpt_check_file(const mpcl__ckpt_loader *L, mpcl_checkpoint *c,
                                  const mpcl_loss_scale_params *b, bool check_range) {
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

mpcl_status mpcl__ckpt_open(const char *path, mpcl_checkpoint **out) {
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
    mpcl_status st = mpcl__ckpt_open(path, &c);
    if (st != MPCL_OK) return st;
    mpcl__ckpt_loader L = {NULL, c->path, c->file};
    mpcl_loss_scale_params b = mpcl_loss_scale_default_params();
    if ((st = mpcl__ckpt_check_format(&L)) == MPCL_OK) st = mpcl__ckpt_check_file(&L, c, &b, true);
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
