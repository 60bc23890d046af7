/* Checkpoints: a training run's whole state in one safetensors file. One
 * writer serves mpcl_trainer_save and mpcl_checkpoint_save_model; a file
 * read and checked on its own (checkpoint_file.c) goes into a model
 * (mpcl_checkpoint_apply) or, after the checks against this trainer, into a
 * trainer (mpcl_trainer_load). Layout and metadata keys are listed in
 * train.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpcl/safetensors.h"
#include "train/checkpoint_file.h"

#define MAX_META 40
#define META_VALUE 64

static const char *scale_mode_name(const mpcl_loss_scale *ls) {
    if (!ls) return "none";
    return mpcl_loss_scale_get_params(ls).mode == MPCL_LOSS_SCALE_FIXED ? "fixed" : "dynamic";
}

/* The model's text form (model.h): what the layers key stores (the layers
 * as declared, output activation included). */
static mpcl_status model_text(mpcl_context *ctx, const mpcl_model_params *p, char *buf) {
    return mpcl_model_spec_format(ctx, p, buf, MPCL_MODEL_SPEC_MAX);
}

/* The text of the model that trains: the output activation its loss
 * applies (mpcl_model_output_activation) written linear, so that a file
 * that recorded the device's linear layer fits a run that declares it. */
static mpcl_status trained_text(mpcl_context *ctx, const mpcl_model_params *p, char *buf) {
    mpcl_model_params t = *p;
    if (mpcl_model_output_activation(p) != MPCL_ACT_IDENTITY)
        t.layers[t.layer_count - 1].activation = MPCL_ACT_IDENTITY;
    return model_text(ctx, &t, buf);
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

/* The lr schedule, resolved (a decay over the run's rest has its steps), so
 * that a resumed run goes on with the same lr at every step. */
static void meta_add_schedule(meta_list *l, const mpcl_lr_schedule *s) {
    meta_add(l, "lr_schedule", "%s", mpcl_lr_schedule_kind_name(s->kind));
    meta_add(l, "warmup_steps", "%llu", (unsigned long long)s->warmup_steps);
    meta_add(l, "decay_steps", "%llu", (unsigned long long)s->decay_steps);
    /* %.17g gives back the same double when parsed. */
    meta_add(l, "lr_alpha", "%.17g", s->alpha);
    meta_add(l, "warmup_from", "%.17g", s->warmup_from);
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

    mpcl__ckpt_expected *e = NULL;
    size_t n = 0;
    mpcl_st_tensor *t = NULL;
    float **data = NULL;
    char *layers = malloc(MPCL_MODEL_SPEC_MAX);
    mpcl_status st = layers ? model_text(ctx, mp, layers)
                            : MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "checkpoint metadata");
    if (st == MPCL_OK) st = mpcl__ckpt_expected_tensors(ctx, mp, &e, &n);
    if (st == MPCL_OK && (!(t = calloc(n + 1, sizeof *t)) || !(data = calloc(n + 1, sizeof *data))))
        st = MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "checkpoint tensors");
    for (size_t i = 0; i < n && st == MPCL_OK; i++) {
        size_t count = e[i].count;
        data[i] = malloc(count * sizeof(float));
        if (!data[i]) {
            st = MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "checkpoint copy of %s", e[i].name);
            break;
        }
        st = e[i].buffer ? mpcl_model_read_buffer(m, e[i].param, data[i], count)
                         : mpcl_model_read_param(m, e[i].param, e[i].slot, data[i], count);
        /* What load would refuse is never written over a good checkpoint. */
        if (st == MPCL_OK)
            st = mpcl__ckpt_check_values(ctx, MPCL_ERR_INVALID_ARG, "not saved", &e[i], data[i],
                                         count);
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
    const mpcl_optim_params *o = &mp->optim;
    meta_add(l, "format", "%s", MPCL__CKPT_FORMAT);
    meta_add(l, "format_version", "%s", MPCL__CKPT_FORMAT_VERSION);
    meta_add(l, "mpcl_version", "%s", mpcl_version());
    meta_add(l, "policy", "%s", mpcl_policy_name(plan->policy));
    meta_add(l, "policy_resolved", "%s", mpcl_policy_name(plan->resolved));
    meta_add(l, "storage", "%s", mpcl_dtype_name(plan->storage));
    meta_add(l, "gemm", "%s", mpcl_gemm_path_name(plan->gemm));
    /* The one value longer than META_VALUE. */
    l->items[l->count].key = "layers";
    l->items[l->count++].value = layers;
    meta_add(l, "loss", "%s", mpcl_loss_name(mp->loss));
    meta_add(l, "rng_counter", "%llu", (unsigned long long)mpcl_model_rng_counter(m));
    meta_add(l, "optimizer", "%s", mpcl__ckpt_optim_name(o->kind));
    /* Each declared hyperparameter under its field's name; %.9g gives back
     * the same float when parsed. */
    for (size_t i = 0; i < mpcl_optim_param_count(o->kind); i++) {
        double v = mpcl_optim_params_value(o, i);
        const char *key = mpcl_optim_param_field(o->kind, i);
        if (mpcl_optim_param_is_bool(o->kind, i))
            meta_add(l, key, "%d", v != 0 ? 1 : 0);
        else
            meta_add(l, key, "%.9g", v);
    }
    meta_add_schedule(l, &mp->lr_schedule);
    meta_add(l, "step", "%llu", (unsigned long long)pos->step);
    meta_add(l, "optimizer_step", "%lu", (unsigned long)opt_step);
    meta_add(l, "epoch", "%lu", (unsigned long)pos->epoch);
    meta_add(l, "epoch_step", "%llu", (unsigned long long)pos->epoch_step);
    meta_add(l, "seed", "%llu", (unsigned long long)pos->seed);
    meta_add(l, "batch", "%zu", pos->batch);
    meta_add(l, "train_samples", "%zu", pos->train_samples);
    meta_add(l, "steps_per_epoch", "%llu", (unsigned long long)pos->steps_per_epoch);
    meta_add(l, "loss_scale", "%.9g", (double)ls_state.scale);
    meta_add(l, "loss_scale_good_steps", "%lu", (unsigned long)ls_state.good_steps);
    meta_add(l, "loss_scale_skipped", "%lu", (unsigned long)ls_state.skipped_steps);
    meta_add(l, "loss_scale_mode", "%s", scale_mode_name(ls));
    st = mpcl_safetensors_write(path, t, n, l->items, l->count);
    free(l);
    if (st != MPCL_OK) mpcl__train_adopt_error(ctx, st);

cleanup:
    for (size_t i = 0; data && i < n; i++) free(data[i]);
    free(data);
    free(t);
    free(e);
    free(layers);
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
                                    .train_samples = tr->train_count,
                                    .steps_per_epoch = tr->steps_per_epoch};
    return write_checkpoint(tr->ctx, tr->model, &pos, false, path);
}

/* The MLP a layer list is, as mpcl-train's flags give it: Dense layers
 * with one shared activation, the last linear, on flat inputs. */
static bool as_mlp(const mpcl_model_params *p, mpcl_model_params *mlp) {
    *mlp = *p;
    if (p->layer_count == 0) return true;
    if (p->input_rank > 1 || p->layer_count - 1 > MPCL_MAX_HIDDEN) return false;
    const mpcl_layer_spec *last = &p->layers[p->layer_count - 1];
    for (size_t i = 0; i < p->layer_count; i++) {
        const mpcl_layer_spec *l = &p->layers[i];
        if (strcmp(l->kind, "dense") != 0 || !l->use_bias ||
            l->activation != (l == last ? MPCL_ACT_IDENTITY : p->layers[0].activation))
            return false;
        if (l != last) mlp->hidden[i] = l->units;
    }
    mlp->hidden_count = p->layer_count - 1;
    mlp->activation = p->layers[0].activation;
    mlp->classes = last->units;
    return true;
}

/* What would make this run build the checkpoint's model: the flags for an
 * MLP, otherwise a model file. */
static void model_fix(char *buf, size_t size, const mpcl_model_params *c) {
    mpcl_model_params m;
    if (!as_mlp(c, &m)) {
        snprintf(buf, size, "train with a --model file of those layers");
        return;
    }
    size_t k = (size_t)snprintf(buf, size, "--hidden ");
    for (size_t i = 0; i < m.hidden_count && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%zu", i ? "," : "", m.hidden[i]);
    if (m.hidden_count == 0 && k < size) k += (size_t)snprintf(buf + k, size - k, "(none)");
    if (k < size)
        snprintf(buf + k, size - k, " --activation %s, on data of %zu features and %zu classes",
                 mpcl_activation_name(m.activation), m.inputs, m.classes);
}

/* The choices that define the run, before any tensor is looked at, so that
 * an optimizer mismatch is called one (not a missing or extra tensor). */
static mpcl_status check_identity(const mpcl__ckpt_loader *L, const mpcl_model *m) {
    const mpcl_model_params *mp = mpcl_model_params_of(m);
    const char *v;
    mpcl_status st;
    if ((st = mpcl__ckpt_meta_str(L, "optimizer", &v)) != MPCL_OK) return st;
    mpcl_optim_kind ok;
    if (strcmp(v, mpcl__ckpt_optim_name(mp->optim.kind)) != 0)
        return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s was trained with optimizer %s, this run uses %s (%s%s%s)",
                          L->path, v, mpcl__ckpt_optim_name(mp->optim.kind),
                          mpcl_optim_kind_parse(v, &ok) ? "--optimizer " : "no --optimizer reads ",
                          mpcl_optim_kind_parse(v, &ok) ? v : "that kind",
                          mpcl_optim_kind_parse(v, &ok) ? " would match" : "");
    return MPCL_OK;
}

/* m trains the model c holds (its layers, input shape and loss; an output
 * activation the loss applies may be declared by one only), or the error
 * names both and what would match; `status` says whose fault it is. */
static mpcl_status check_same_model(mpcl_context *ctx, mpcl_status status, const mpcl_checkpoint *c,
                                    const mpcl_model *m) {
    const mpcl_model_params *mp = mpcl_model_params_of(m);
    char *have = malloc(MPCL_MODEL_SPEC_MAX), *want = malloc(MPCL_MODEL_SPEC_MAX);
    mpcl_status st =
        have && want ? MPCL_OK : MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "comparing models");
    if (st == MPCL_OK) st = trained_text(ctx, mp, have);
    if (st == MPCL_OK) st = trained_text(ctx, &c->params, want);
    bool same = st == MPCL_OK && strcmp(have, want) == 0 && mp->loss == c->params.loss;
    if (st == MPCL_OK) st = model_text(ctx, mp, have);
    if (st == MPCL_OK) st = model_text(ctx, &c->params, want);
    if (st == MPCL_OK && !same) {
        char fix[256];
        model_fix(fix, sizeof fix, &c->params);
        st = MPCL_ERROR(ctx, status,
                        "checkpoint %s holds another model: %s with loss %s; this run's is %s "
                        "with loss %s (to match: %s)",
                        c->path, want, mpcl_loss_name(c->params.loss), have,
                        mpcl_loss_name(mp->loss), fix);
    }
    free(have);
    free(want);
    return st;
}

/* ---- into a model ---- */

/* m has c's layers and optimizer kind, so that its tables hold every
 * tensor of the file, of the same shape. */
static mpcl_status check_model_fits(mpcl_context *ctx, const mpcl_checkpoint *c,
                                    const mpcl_model *m) {
    mpcl_optim_kind kind = mpcl_model_params_of(m)->optim.kind;
    if (kind != c->params.optim.kind)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "a model with optimizer %s does not fit checkpoint %s (optimizer %s)",
                          mpcl__ckpt_optim_name(kind), c->path,
                          mpcl__ckpt_optim_name(c->params.optim.kind));
    return check_same_model(ctx, MPCL_ERR_INVALID_ARG, c, m);
}

/* Tensors, optimizer step and loss-scale state into m (checked to fit). A
 * checkpoint without a scaler (float32) leaves a scaling model's scaler at
 * its initial state; a scaler's state means nothing to a model without one.
 * With keep_scale, the scale m's params set (a scale the user typed) wins
 * over the saved one; the count of skipped steps is history and stays.
 * *scale gets the state written (when *wrote). */
static mpcl_status apply_state(mpcl_context *ctx, const mpcl_checkpoint *c, mpcl_model *m,
                               bool keep_scale, mpcl_loss_scale_state *scale, bool *wrote) {
    mpcl__ckpt_expected *e;
    size_t n;
    *wrote = false;
    mpcl_status st = mpcl__ckpt_expected_tensors(ctx, mpcl_model_params_of(m), &e, &n);
    for (size_t i = 0; i < n && st == MPCL_OK; i++) {
        const mpcl_st_tensor *t = mpcl_safetensors_find(c->file, e[i].name);
        /* The data may be unaligned in a file from another writer. */
        float *buf = malloc(t->bytes ? t->bytes : 1);
        if (!buf) st = MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "loading %s", e[i].name);
        if (st != MPCL_OK) break;
        memcpy(buf, t->data, t->bytes);
        size_t count = t->bytes / sizeof(float);
        st = e[i].buffer ? mpcl_model_write_buffer(m, e[i].param, buf, count)
                         : mpcl_model_write_param(m, e[i].param, e[i].slot, buf, count);
        free(buf);
    }
    free(e);
    if (st == MPCL_OK) st = mpcl_model_write_step(m, c->pos.optimizer_step);
    if (st == MPCL_OK) mpcl_model_set_rng_counter(m, c->pos.rng_counter);
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
static mpcl_status check_sequence(const mpcl__ckpt_loader *L, const mpcl_trainer *tr, uint64_t seed,
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

/* The schedule's flags, "--lr-schedule cosine --warmup-steps 10 ...", the
 * ratio in the fewest digits that read back as the same double. */
static void schedule_flags(char *buf, size_t size, const mpcl_lr_schedule *s) {
    int k = snprintf(buf, size, "--lr-schedule %s --warmup-steps %llu",
                     mpcl_lr_schedule_kind_name(s->kind), (unsigned long long)s->warmup_steps);
    if (!mpcl_lr_schedule_kind_decays(s->kind) || k < 0 || (size_t)k >= size) return;
    char ratio[32];
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(ratio, sizeof ratio, "%.*g", digits, s->alpha);
        if (strtod(ratio, NULL) == s->alpha) break;
    }
    snprintf(buf + k, size - (size_t)k, " --decay-steps %llu --lr-min-ratio %s",
             (unsigned long long)s->decay_steps, ratio);
}

/* The lr schedule goes on from the checkpoint's step only if it is the same
 * schedule: this run's (its decay steps resolved) must equal the saved one. */
static mpcl_status check_schedule(const mpcl__ckpt_loader *L, const mpcl_trainer *tr,
                                  const mpcl_lr_schedule *saved) {
    const mpcl_lr_schedule *mine = &mpcl_model_params_of(tr->model)->lr_schedule;
    bool decays = mpcl_lr_schedule_kind_decays(saved->kind);
    if (saved->kind == mine->kind && saved->warmup_steps == mine->warmup_steps &&
        (!saved->warmup_steps || saved->warmup_from == mine->warmup_from) &&
        (!decays || (saved->decay_steps == mine->decay_steps && saved->alpha == mine->alpha)))
        return MPCL_OK;
    char want[160], have[160];
    schedule_flags(want, sizeof want, saved);
    schedule_flags(have, sizeof have, mine);
    return MPCL_ERROR(L->ctx, MPCL_ERR_FORMAT,
                      "checkpoint %s was trained with another lr schedule: %s (warm-up from "
                      "%.9g); this run's is %s (warm-up from %.9g); give the checkpoint's flags "
                      "to continue its schedule",
                      L->path, want, saved->warmup_from, have, mine->warmup_from);
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
    mpcl__ckpt_loader L = {tr->ctx, c->path, c->file};
    mpcl_loss_scale_params b = scale_bounds(tr);
    const mpcl_checkpoint_position *p = &c->pos;
    mpcl_status st;
    if ((st = mpcl__ckpt_check_format(&L)) != MPCL_OK ||
        (st = check_identity(&L, tr->model)) != MPCL_OK ||
        (st = mpcl__ckpt_check_file(&L, c, &b, !tr->params.resume_keeps_scale)) != MPCL_OK ||
        (st = check_same_model(tr->ctx, MPCL_ERR_FORMAT, c, tr->model)) != MPCL_OK ||
        (st = check_schedule(&L, tr, &c->params.lr_schedule)) != MPCL_OK)
        return st;
    if ((st = check_sequence(&L, tr, p->seed, p->batch, p->train_samples)) != MPCL_OK) return st;
    if (p->steps_per_epoch != tr->steps_per_epoch)
        return MPCL_ERROR(tr->ctx, MPCL_ERR_FORMAT,
                          "checkpoint %s evaluates every %llu steps, this run every %llu: "
                          "--eval-every %llu",
                          c->path, (unsigned long long)p->steps_per_epoch,
                          (unsigned long long)tr->steps_per_epoch,
                          (unsigned long long)p->steps_per_epoch);
    return MPCL_OK;
}

mpcl_status mpcl_trainer_load(mpcl_trainer *tr, const char *path) {
    mpcl_context *ctx = tr->ctx;
    if (!path) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "checkpoint path is NULL");
    mpcl_checkpoint *c = NULL;
    mpcl_status st = mpcl__ckpt_open(path, &c);
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
        for (size_t b = 0; b < mpcl_model_buffer_count(m0) && st == MPCL_OK; b++) {
            size_t count = mpcl_model_buffer(m0, b)->count;
            float *buf = malloc(count * sizeof *buf);
            if (!buf) return MPCL_ERROR(tr->ctx, MPCL_ERR_OUT_OF_MEMORY, "copying replicas");
            st = mpcl_model_read_buffer(m0, b, buf, count);
            if (st == MPCL_OK) st = mpcl_model_write_buffer(m, b, buf, count);
            free(buf);
        }
        mpcl_model_set_rng_counter(m, mpcl_model_rng_counter(m0));
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
