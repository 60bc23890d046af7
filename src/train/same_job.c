/* Under MPI, every rank must run the same job: the all-reduce sums arenas
 * element by element and every rank steps, reports, evaluates and saves at
 * the same points, so a rank started with another model, batch, data size or
 * schedule would corrupt the sums, abort, or wait for ever. Before the first
 * step the ranks gather a fixed list of what must match and compare it on
 * every rank, so that every rank refuses with the same message naming the
 * first differing rank and field. The fields go whole, not as one digest, so
 * that the message can say what differs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_internal.h"

typedef enum job_kind { JOB_COUNT, JOB_REAL, JOB_NAME } job_kind;

typedef struct job_field {
    char name[32];
    job_kind kind;
    uint64_t value; /* JOB_REAL: the bits of a double; JOB_NAME: an index into names */
    const char *(*names)(int);
} job_field;

/* 48 fields, at most 8 of them an optimizer's hyperparameters, and two per layer. */
#define JOB_MAX_FIELDS (48 + 2 * MPCL_MAX_LAYERS)

typedef struct job {
    job_field f[JOB_MAX_FIELDS];
    size_t n;
} job;

static void add(job *j, const char *name, job_kind kind, uint64_t value,
                const char *(*names)(int)) {
    job_field *f = &j->f[j->n++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->kind = kind;
    f->value = value;
    f->names = names;
}
static void add_count(job *j, const char *name, uint64_t v) {
    add(j, name, JOB_COUNT, v, NULL);
}
static void add_real(job *j, const char *name, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    add(j, name, JOB_REAL, bits, NULL);
}

static const char *policy_name(int v) {
    return mpcl_policy_name((mpcl_policy)v);
}
static const char *dtype_name(int v) {
    return mpcl_dtype_name((mpcl_dtype)v);
}
static const char *activation_name(int v) {
    return mpcl_activation_name((mpcl_activation)v);
}
static const char *optimizer_name(int v) {
    return mpcl_optim_kind_name((mpcl_optim_kind)v);
}
static const char *schedule_name(int v) {
    return mpcl_lr_schedule_kind_name((mpcl_lr_schedule_kind)v);
}
static const char *compression_name(int v) {
    return mpcl_grad_compression_name((mpcl_grad_compression)v);
}

/* Everything that decides the size of a collective or when one happens. */
static void describe(const mpcl_trainer *tr, job *j) {
    const mpcl_model_params *m = mpcl_model_params_of(tr->model);
    const mpcl_plan *plan = mpcl_model_plan(tr->model);
    const mpcl_train_params *p = &tr->params;
    mpcl_layer_spec layers[MPCL_MAX_LAYERS];
    size_t count = 0;
    j->n = 0;
    add_count(j, "world size", mpcl_dist_world_size(tr->dist));
    add(j, "gradient compression", JOB_NAME, mpcl_dist_compression(tr->dist), compression_name);
    add_count(j, "inputs", m->inputs);
    add_count(j, "classes", m->classes);
    if (mpcl_model_params_layers(NULL, m, layers, &count) != MPCL_OK) count = 0;
    add_count(j, "layers", count);
    /* Every slot, zeros past the last layer: the list and its names are then
     * the same on every rank, and so is the message. */
    memset(layers + count, 0, (MPCL_MAX_LAYERS - count) * sizeof layers[0]);
    for (size_t i = 0; i < MPCL_MAX_LAYERS; i++) {
        char name[32];
        snprintf(name, sizeof name, "layer %zu units", i + 1);
        add_count(j, name, layers[i].units);
        snprintf(name, sizeof name, "layer %zu activation", i + 1);
        add(j, name, JOB_NAME, layers[i].activation, activation_name);
    }
    /* The rest of each layer's spec and the input shape: one hash of the
     * model's text, FNV-1a. */
    char spec[MPCL_MODEL_SPEC_MAX];
    uint64_t h = 0xcbf29ce484222325ull;
    if (mpcl_model_spec_format(NULL, m, spec, sizeof spec) == MPCL_OK)
        for (const char *c = spec; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    add_count(j, "model spec hash", h);
    add_count(j, "loss", (uint64_t)m->loss);
    add(j, "precision", JOB_NAME, plan->resolved, policy_name);
    add(j, "storage", JOB_NAME, plan->storage, dtype_name);
    add_count(j, "gradient elements", mpcl_model_arena_elements(tr->model));
    add(j, "optimizer", JOB_NAME, m->optim.kind, optimizer_name);
    /* The kind's declared hyperparameters: the kind is compared first, so
     * ranks whose lists differ in length stop at it. */
    for (size_t i = 0; i < mpcl_optim_param_count(m->optim.kind); i++)
        add_real(j, mpcl_optim_param_name(m->optim.kind, i), mpcl_optim_params_value(&m->optim, i));
    add(j, "lr schedule", JOB_NAME, m->lr_schedule.kind, schedule_name);
    add_count(j, "warmup steps", m->lr_schedule.warmup_steps);
    add_count(j, "decay steps", m->lr_schedule.decay_steps);
    add_real(j, "lr alpha", m->lr_schedule.alpha);
    add_real(j, "warmup from", m->lr_schedule.warmup_from);
    add_count(j, "loss scaling", mpcl_model_loss_scale(tr->model) != NULL);
    add_real(j, "loss scale", tr->loss_scale);
    add_count(j, "training samples", tr->train_count);
    add_count(j, "test samples", tr->test_count);
    add_count(j, "batch", p->batch);
    add_count(j, "steps per epoch", tr->steps_per_epoch);
    add_count(j, "epochs", p->epochs);
    add_count(j, "seed", p->seed);
    add_count(j, "shuffle", p->shuffle);
    add_count(j, "step", tr->step);
    add_count(j, "report every", p->report_every);
    add_count(j, "save every steps", p->save_path ? p->save_every_steps : 0);
    add_count(j, "save every epochs", p->save_path ? p->save_every_epochs : 0);
    add_count(j, "keep going on nan", p->keep_going_on_nan);
}

static void format_value(const job_field *f, char *buf, size_t size) {
    double real;
    switch (f->kind) {
    case JOB_REAL:
        memcpy(&real, &f->value, sizeof real);
        snprintf(buf, size, "%g", real);
        break;
    case JOB_NAME: snprintf(buf, size, "%s", f->names((int)f->value)); break;
    default: snprintf(buf, size, "%llu", (unsigned long long)f->value);
    }
}

mpcl_status mpcl__train_check_same_job(mpcl_trainer *tr) {
    if (!tr->dist || !mpcl_dist_is_mpi(tr->dist)) return MPCL_OK;
    job mine;
    describe(tr, &mine);
    uint64_t values[JOB_MAX_FIELDS] = {0};
    for (size_t i = 0; i < mine.n; i++) values[i] = mine.f[i].value;
    size_t world = mpcl_dist_world_size(tr->dist);
    uint64_t *all = malloc(world * sizeof values);
    if (!all) return MPCL_ERROR(tr->ctx, MPCL_ERR_OUT_OF_MEMORY, "job fields of %zu ranks", world);
    mpcl_status st = mpcl_dist_allgather(tr->dist, tr->ctx, values, sizeof values, all);
    for (size_t r = 1; r < world && st == MPCL_OK; r++)
        for (size_t i = 0; i < mine.n; i++) {
            uint64_t theirs = all[r * JOB_MAX_FIELDS + i];
            if (theirs == all[i]) continue;
            job_field a = mine.f[i], b = mine.f[i];
            a.value = all[i];
            b.value = theirs;
            char va[64], vb[64];
            format_value(&a, va, sizeof va);
            format_value(&b, vb, sizeof vb);
            st = MPCL_ERROR(tr->ctx, MPCL_ERR_DIST,
                            "rank %zu differs from rank 0: %s %s vs %s; every rank must run the "
                            "same job (the same flags, data and checkpoint)",
                            r, a.name, va, vb);
            break;
        }
    free(all);
    return st;
}
