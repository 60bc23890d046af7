/* The optimizer table and the updates over flat arenas (include/mpcl/optim.h). */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"
#include "mpcl/number.h"

enum {
    STEP_LEN = MPCL_ABI_OPTIM_STEP_WORDS,
    CLIP_LEN = MPCL_ABI_OPTIM_CLIP_WORDS,
    NORM_WG = MPCL_ABI_OPTIM_NORM_WG,
    NORM_GROUPS = MPCL_ABI_OPTIM_NORM_GROUPS,
};

/* ---- the declaration: one row per kind ---- */

/* One hyperparameter: Keras' name, the mpcl_optim_params field it maps to
 * (a float, or an int 0/1 for a boolean), its default as text and its range
 * [lo, hi] (open ends where said; reals are also finite). */
typedef struct optim_hyper {
    const char *name;
    const char *field;
    size_t offset;
    bool is_bool;
    const char *default_value;
    double lo, hi;
    bool lo_open, hi_open;
} optim_hyper;

#define OPTIM_REAL(NAME, FIELD, DEFAULT, LO, LO_OPEN, HI, HI_OPEN) \
    { NAME, #FIELD, offsetof(mpcl_optim_params, FIELD), false, DEFAULT, LO, HI, LO_OPEN, HI_OPEN }
#define OPTIM_BOOL(NAME, FIELD, DEFAULT) \
    { NAME, #FIELD, offsetof(mpcl_optim_params, FIELD), true, DEFAULT, 0, 1, false, false }
/* Shared declarations: a decay rate in [0, 1), epsilon > 0, a weight decay
 * >= 0. */
#define OPTIM_RATE(NAME, FIELD, DEFAULT) OPTIM_REAL(NAME, FIELD, DEFAULT, 0, false, 1, true)
#define OPTIM_EPSILON OPTIM_REAL("epsilon", eps, "1e-7", 0, true, INFINITY, false)
#define OPTIM_WEIGHT_DECAY(DEFAULT) \
    OPTIM_REAL("weight_decay", weight_decay, DEFAULT, 0, false, INFINITY, false)

/* decay_vectors, for the kinds with a weight_decay: false decays a model's
 * matrices only. Last of a kind's own, so that Keras' positional order
 * stays. */
#define OPTIM_DECAY_VECTORS OPTIM_BOOL("decay_vectors", decay_vectors, "true")

enum { MAX_HYPERS = 6 };

/* A kind: its names, its update kernel (the same argument list for every
 * kind, see set_update_args), whether it keeps the second state slot, the
 * default learning rate and its own hyperparameters in Keras' order. */
typedef struct optim_kind_row {
    const char *name, *keras_name;
    const char *kernel;    /* one element per work-item */
    const char *kernel_v8; /* MPCL__OPTIM_VEC elements per work-item */
    bool slot_v;
    const char *lr;
    optim_hyper hypers[MAX_HYPERS]; /* up to the first without a name */
} optim_kind_row;

static const optim_kind_row OPTIM_KINDS[] = {
    /* g += weight_decay * w (L2);  b = momentum * b + g;
     * w -= lr * (nesterov ? g + momentum * b : b)
     * (PyTorch's form, dampening 0; with constant lr the same as Keras'
     * velocity form). State: M = b. */
    {"sgd",
     "SGD",
     "mpcl_optim_sgd",
     "mpcl_optim_sgd_v8",
     false,
     "0.01",
     {OPTIM_REAL("momentum", momentum, "0", 0, false, 1, false),
      OPTIM_BOOL("nesterov", nesterov, "false"), OPTIM_WEIGHT_DECAY("0"), OPTIM_DECAY_VECTORS}},
    /* t the step counter after this step (1 on the first):
     * g += weight_decay * w (L2);  m = beta1 m + (1 - beta1) g;
     * v = beta2 v + (1 - beta2) g^2;
     * w -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
     * (Algorithm 1 of the Adam paper, as PyTorch; Keras adds eps before the
     * sqrt(1 - beta2^t) correction, a difference of order eps). State: M =
     * m, V = v. */
    {"adam",
     "Adam",
     "mpcl_optim_adam",
     "mpcl_optim_adam_v8",
     true,
     "0.001",
     {OPTIM_RATE("beta_1", beta1, "0.9"), OPTIM_RATE("beta_2", beta2, "0.999"), OPTIM_EPSILON,
      OPTIM_WEIGHT_DECAY("0"), OPTIM_DECAY_VECTORS}},
    /* w -= lr * weight_decay * w first (decoupled), then Adam without L2. */
    {"adamw",
     "AdamW",
     "mpcl_optim_adamw",
     "mpcl_optim_adamw_v8",
     true,
     "0.001",
     {OPTIM_WEIGHT_DECAY("0.004"), OPTIM_RATE("beta_1", beta1, "0.9"),
      OPTIM_RATE("beta_2", beta2, "0.999"), OPTIM_EPSILON, OPTIM_DECAY_VECTORS}},
    /* RMSprop (not centered): v = rho v + (1 - rho) g^2;
     * b = momentum * b + g / (sqrt(v) + eps);  w -= lr * b.
     * PyTorch's RMSprop with alpha = rho (eps added after the square root;
     * with momentum 0 its w -= lr * g / (sqrt(v) + eps) is the same). Keras
     * adds eps under the root, g / sqrt(v + eps), and keeps lr in its
     * velocity, which is the same with constant lr. State: M = b, V = v. */
    {"rmsprop",
     "RMSprop",
     "mpcl_optim_rmsprop",
     "mpcl_optim_rmsprop_v8",
     true,
     "0.001",
     {OPTIM_RATE("rho", beta2, "0.9"), OPTIM_REAL("momentum", momentum, "0", 0, false, 1, false),
      OPTIM_EPSILON}},
};

enum { KIND_COUNT = sizeof OPTIM_KINDS / sizeof OPTIM_KINDS[0] };

/* The rows common to every kind: first and last. */
static const optim_hyper LEARNING_RATE =
    OPTIM_REAL("learning_rate", lr, NULL, 0, false, INFINITY, false);
static const optim_hyper GLOBAL_CLIPNORM =
    OPTIM_REAL("global_clipnorm", clip_norm, "0", 0, false, INFINITY, false);

static const optim_kind_row *kind_row(mpcl_optim_kind kind) {
    return (unsigned)kind < KIND_COUNT ? &OPTIM_KINDS[kind] : NULL;
}

static size_t own_count(const optim_kind_row *k) {
    size_t n = 0;
    while (n < MAX_HYPERS && k->hypers[n].name) n++;
    return n;
}

size_t mpcl_optim_param_count(mpcl_optim_kind kind) {
    const optim_kind_row *k = kind_row(kind);
    return k ? own_count(k) + 2 : 0;
}

static const optim_hyper *hyper_at(mpcl_optim_kind kind, size_t index) {
    const optim_kind_row *k = kind_row(kind);
    if (!k) return NULL;
    size_t own = own_count(k);
    if (index == 0) return &LEARNING_RATE;
    if (index <= own) return &k->hypers[index - 1];
    return index == own + 1 ? &GLOBAL_CLIPNORM : NULL;
}

const char *mpcl_optim_param_name(mpcl_optim_kind kind, size_t index) {
    const optim_hyper *h = hyper_at(kind, index);
    return h ? h->name : NULL;
}
const char *mpcl_optim_param_field(mpcl_optim_kind kind, size_t index) {
    const optim_hyper *h = hyper_at(kind, index);
    return h ? h->field : NULL;
}
bool mpcl_optim_param_is_bool(mpcl_optim_kind kind, size_t index) {
    const optim_hyper *h = hyper_at(kind, index);
    return h && h->is_bool;
}
const char *mpcl_optim_param_default(mpcl_optim_kind kind, size_t index) {
    const optim_hyper *h = hyper_at(kind, index);
    if (!h) return NULL;
    return h == &LEARNING_RATE ? OPTIM_KINDS[kind].lr : h->default_value;
}

size_t mpcl_optim_kind_count(void) {
    return KIND_COUNT;
}

const char *mpcl_optim_kind_name(mpcl_optim_kind kind) {
    const optim_kind_row *k = kind_row(kind);
    return k ? k->name : NULL;
}

const char *mpcl_optim_kind_keras_name(mpcl_optim_kind kind) {
    const optim_kind_row *k = kind_row(kind);
    return k ? k->keras_name : NULL;
}

bool mpcl_optim_kind_parse(const char *name, mpcl_optim_kind *out) {
    for (size_t k = 0; name && k < KIND_COUNT; k++)
        if (strcmp(name, OPTIM_KINDS[k].name) == 0) {
            *out = (mpcl_optim_kind)k;
            return true;
        }
    return false;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "a, b or c": the table's names in alphabetical order, built once. */
static char kind_names[256];

static void list_kind_names(void) {
    const char *names[KIND_COUNT];
    for (size_t k = 0; k < KIND_COUNT; k++) names[k] = OPTIM_KINDS[k].name;
    qsort(names, KIND_COUNT, sizeof names[0], by_name);
    size_t used = 0;
    for (size_t k = 0; k < KIND_COUNT && used < sizeof kind_names; k++)
        used += (size_t)snprintf(kind_names + used, sizeof kind_names - used, "%s%s",
                                 k == 0                ? ""
                                 : k + 1 == KIND_COUNT ? " or "
                                                       : ", ",
                                 names[k]);
}

const char *mpcl_optim_kind_names(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, list_kind_names);
    return kind_names;
}

bool mpcl_optim_has_slot(mpcl_optim_kind kind, mpcl_optim_slot slot) {
    const optim_kind_row *k = kind_row(kind);
    if (!k) return false;
    switch (slot) {
    case MPCL_OPTIM_SLOT_MASTER:
    case MPCL_OPTIM_SLOT_M: return true;
    case MPCL_OPTIM_SLOT_V: return k->slot_v;
    default: return false;
    }
}

/* ---- one hyperparameter's value ---- */

static double read_field(const mpcl_optim_params *p, const optim_hyper *h) {
    const char *f = (const char *)p + h->offset;
    if (h->is_bool) return *(const int *)(const void *)f;
    return *(const float *)(const void *)f;
}

static bool in_range(const optim_hyper *h, double v) {
    if (h->is_bool) return v == 0 || v == 1;
    if (!isfinite((float)v)) return false;
    return (h->lo_open ? v > h->lo : v >= h->lo) && (h->hi_open ? v < h->hi : v <= h->hi);
}

/* "in [0, 1)", "> 0", "true or false": the allowed values, for messages. */
static void range_text(const optim_hyper *h, char *buf, size_t size) {
    if (h->is_bool)
        snprintf(buf, size, "true or false");
    else if (isinf(h->hi))
        snprintf(buf, size, "finite and %s %.9g", h->lo_open ? ">" : ">=", h->lo);
    else
        snprintf(buf, size, "in %c%.9g, %.9g%c", h->lo_open ? '(' : '[', h->lo, h->hi,
                 h->hi_open ? ')' : ']');
}

static mpcl_status out_of_range(mpcl_context *ctx, mpcl_optim_kind kind, const optim_hyper *h,
                                double v) {
    char range[64];
    range_text(h, range, sizeof range);
    return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "optimizer %s: %s %.9g is not %s",
                      OPTIM_KINDS[kind].name, h->name, v, range);
}

static mpcl_status check_kind(mpcl_context *ctx, mpcl_optim_kind kind) {
    if (!kind_row(kind))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown optimizer kind %d (%s)", (int)kind,
                          mpcl_optim_kind_names());
    return MPCL_OK;
}

double mpcl_optim_params_value(const mpcl_optim_params *p, size_t index) {
    const optim_hyper *h = hyper_at(p->kind, index);
    return h ? read_field(p, h) : (double)NAN;
}

mpcl_status mpcl_optim_params_set_value(mpcl_context *ctx, mpcl_optim_params *p, size_t index,
                                        double value) {
    mpcl_status st = check_kind(ctx, p->kind);
    if (st != MPCL_OK) return st;
    const optim_hyper *h = hyper_at(p->kind, index);
    if (!h)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "optimizer %s has %zu hyperparameters, not %zu",
                          OPTIM_KINDS[p->kind].name, mpcl_optim_param_count(p->kind), index + 1);
    if (!in_range(h, value)) return out_of_range(ctx, p->kind, h, value);
    char *f = (char *)p + h->offset;
    if (h->is_bool)
        *(int *)(void *)f = value != 0;
    else
        *(float *)(void *)f = (float)value;
    return MPCL_OK;
}

/* The index of hyperparameter `name` of kind; an error listing the kind's
 * hyperparameters when it has none of that name. */
static mpcl_status find_hyper(mpcl_context *ctx, mpcl_optim_kind kind, const char *name,
                              size_t *index) {
    mpcl_status st = check_kind(ctx, kind);
    if (st != MPCL_OK) return st;
    size_t n = mpcl_optim_param_count(kind);
    for (size_t i = 0; name && i < n; i++)
        if (strcmp(mpcl_optim_param_name(kind, i), name) == 0) {
            *index = i;
            return MPCL_OK;
        }
    char names[256] = "";
    for (size_t i = 0, used = 0; i < n && used < sizeof names; i++)
        used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                                 mpcl_optim_param_name(kind, i));
    return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                      "optimizer %s has no hyperparameter '%s' (it has %s)", OPTIM_KINDS[kind].name,
                      name ? name : "(null)", names);
}

mpcl_status mpcl_optim_params_set(mpcl_context *ctx, mpcl_optim_params *p, const char *name,
                                  const char *text) {
    size_t i;
    mpcl_status st = find_hyper(ctx, p->kind, name, &i);
    if (st != MPCL_OK) return st;
    const optim_hyper *h = hyper_at(p->kind, i);
    char range[64];
    range_text(h, range, sizeof range);
    double v = 0;
    if (h->is_bool) {
        if (!text || (strcmp(text, "true") != 0 && strcmp(text, "false") != 0))
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "optimizer %s: %s '%s' is not %s",
                              OPTIM_KINDS[p->kind].name, name, text ? text : "(null)", range);
        v = text[0] == 't';
    } else {
        mpcl_number_error ns = mpcl_parse_real(text, &v);
        if (ns != MPCL_NUMBER_OK)
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "optimizer %s: %s '%s' %s (it must be %s)",
                              OPTIM_KINDS[p->kind].name, name, text ? text : "(null)",
                              mpcl_number_error_text(ns), range);
    }
    return mpcl_optim_params_set_value(ctx, p, i, v);
}

/* The shortest of %.6g ... %.9g that reads back as x ("0.9", not
 * "0.899999976"). */
static int shortest_float(char *buf, size_t size, float x) {
    char text[32];
    for (int digits = 6;; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, (double)x);
        if (digits == 9 || (float)strtod(text, NULL) == x) break;
    }
    return snprintf(buf, size, "%s", text);
}

mpcl_status mpcl_optim_params_get(mpcl_context *ctx, const mpcl_optim_params *p, const char *name,
                                  char *buf, size_t size) {
    size_t i;
    mpcl_status st = find_hyper(ctx, p->kind, name, &i);
    if (st != MPCL_OK) return st;
    double v = mpcl_optim_params_value(p, i);
    int len = mpcl_optim_param_is_bool(p->kind, i) ? snprintf(buf, size, "%s", v ? "true" : "false")
                                                   : shortest_float(buf, size, (float)v);
    if (len < 0 || (size_t)len >= size)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "optimizer %s: %s's value needs %d bytes",
                          OPTIM_KINDS[p->kind].name, name, len + 1);
    return MPCL_OK;
}

struct mpcl_optimizer {
    mpcl_context *ctx;
    mpcl_optim_params p;
    size_t n;
    mpcl_tensor *master;  /* borrowed: f32 [1, n] */
    mpcl_tensor *working; /* borrowed: storage [1, n] */
    mpcl_tensor *m;       /* f32 [1, n]: Adam first moment or SGD momentum */
    mpcl_tensor *v;       /* f32 [1, n]: Adam second moment; NULL for SGD */
    mpcl_tensor *step;    /* i32 [1, STEP_LEN]: the step state (count, bias corrections) */
    mpcl_tensor *decay;   /* u8 [1, chunks]: 1 where weight_decay applies (all, at first) */
    size_t local;         /* the vector update's work-group: 0 until the first step asks */
    mpcl_tensor *clip;    /* f32 [1, 2]: {norm, factor}; {NaN, 1} without clipping */
    mpcl_tensor *partial; /* f32 [1, NORM_GROUPS]: the norm's first pass; with clipping */
    /* Stand-ins for a missing loss scaler: scale 1 and a found_inf that is
     * never raised, so that one kernel serves both cases. */
    mpcl_tensor *unit_scale; /* f32 [1,1] = 1 */
    mpcl_tensor *no_state;   /* i32 [1, LS_STATE_LEN] = 0 */
};

mpcl_optim_params mpcl_optim_default_params(mpcl_optim_kind kind) {
    mpcl_optim_params p = {.kind = kind};
    for (size_t i = 0; i < mpcl_optim_param_count(kind); i++) {
        double v;
        const char *text = mpcl_optim_param_default(kind, i);
        if (mpcl_optim_param_is_bool(kind, i))
            v = strcmp(text, "true") == 0;
        else if (mpcl_parse_real(text, &v) != MPCL_NUMBER_OK)
            abort(); /* a typo in the table: caught by every test */
        mpcl_status st = mpcl_optim_params_set_value(NULL, &p, i, v);
        if (st != MPCL_OK) abort(); /* a default out of its own range */
    }
    return p;
}

mpcl_status mpcl_optim_params_check(mpcl_context *ctx, const mpcl_optim_params *p) {
    mpcl_status st = check_kind(ctx, p->kind);
    for (size_t i = 0; st == MPCL_OK && i < mpcl_optim_param_count(p->kind); i++) {
        const optim_hyper *h = hyper_at(p->kind, i);
        double v = read_field(p, h);
        if (!in_range(h, v)) st = out_of_range(ctx, p->kind, h, v);
    }
    return st;
}

/* The kernels read element i's decay flag at i / MPCL__OPTIM_VEC. */
_Static_assert(MPCL_OPTIM_DECAY_CHUNK == MPCL__OPTIM_VEC, "one decay flag per v8 work-item");

static size_t decay_chunks(size_t n) {
    return (n + MPCL_OPTIM_DECAY_CHUNK - 1) / MPCL_OPTIM_DECAY_CHUNK;
}

/* Every flag 1: weight_decay on every element, as before flags existed. */
static mpcl_status decay_everywhere(mpcl_context *ctx, mpcl_optimizer *opt) {
    const cl_uchar one = 1;
    return mpcl__fill_buffer(ctx, opt->decay->mem, &one, sizeof one, opt->decay->bytes, NULL);
}

void mpcl_optimizer_destroy(mpcl_optimizer *opt) {
    if (!opt) return;
    mpcl_tensor *own[] = {opt->m,    opt->v,       opt->step,       opt->decay,
                          opt->clip, opt->partial, opt->unit_scale, opt->no_state};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) mpcl_tensor_destroy(own[i]);
    free(opt);
}

mpcl_status mpcl_optimizer_create(mpcl_context *ctx, const mpcl_optim_params *p,
                                  mpcl_tensor *master, mpcl_tensor *working, mpcl_optimizer **out) {
    *out = NULL;
    mpcl_status st = mpcl_optim_params_check(ctx, p);
    if (st != MPCL_OK) return st;
    size_t n = master->rows * master->cols;
    if (master->dtype != MPCL_DTYPE_F32 || !mpcl_dtype_is_float(working->dtype))
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE,
                          "optimizer over a %s master and a %s working arena; it needs f32 and a "
                          "float storage dtype",
                          mpcl_dtype_name(master->dtype), mpcl_dtype_name(working->dtype));
    if (working->rows * working->cols != n)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "optimizer master arena has %zu elements, working arena %zu", n,
                          working->rows * working->cols);
    /* Kernels index the arenas with uint. */
    if (n > 0xffffffffu)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "optimizer over %zu elements (over 2^32)", n);

    mpcl_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating an optimizer");
    opt->ctx = ctx;
    opt->p = *p;
    opt->n = n;
    opt->master = master;
    opt->working = working;
    const float one = 1.0f;
    float no_clip[CLIP_LEN] = {0};
    no_clip[MPCL_ABI_OPTIM_CLIP_NORM] = NAN;
    no_clip[MPCL_ABI_OPTIM_CLIP_FACTOR] = 1.0f;
    /* Tensors start zero-filled: state, step counter and the stand-in state. */
    st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, n, &opt->m);
    if (st == MPCL_OK && kind_row(p->kind)->slot_v)
        st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, n, &opt->v);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, MPCL_DTYPE_I32, 1, STEP_LEN, &opt->step);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, MPCL_DTYPE_U8, 1, decay_chunks(n), &opt->decay);
    if (st == MPCL_OK) st = decay_everywhere(ctx, opt);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, CLIP_LEN, &opt->clip);
    if (st == MPCL_OK && p->clip_norm > 0.0f)
        st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, NORM_GROUPS, &opt->partial);
    if (st == MPCL_OK) st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, 1, &opt->unit_scale);
    if (st == MPCL_OK)
        st = mpcl_tensor_create(ctx, MPCL_DTYPE_I32, 1, MPCL_ABI_LS_STATE_WORDS, &opt->no_state);
    if (st == MPCL_OK) st = mpcl_tensor_upload_f32(opt->unit_scale, &one, 1);
    if (st == MPCL_OK) st = mpcl_tensor_upload_f32(opt->clip, no_clip, CLIP_LEN);
    if (st == MPCL_OK) st = mpcl_optimizer_write_step(ctx, opt, 0);
    if (st != MPCL_OK) {
        mpcl_optimizer_destroy(opt);
        return st;
    }
    *out = opt;
    return MPCL_OK;
}

mpcl_optim_params mpcl_optimizer_get_params(const mpcl_optimizer *opt) {
    return opt->p;
}

mpcl_status mpcl_optimizer_set_lr(mpcl_optimizer *opt, float lr) {
    return mpcl_optim_params_set_value(opt->ctx, &opt->p, 0, lr); /* learning_rate */
}

/* The global norm's two passes: sums of squares per work-group, then the norm
 * and the clip factor into opt->clip. */
static mpcl_status clip_launch(mpcl_context *ctx, mpcl_optimizer *opt, const mpcl_tensor *grads,
                               cl_mem scale) {
    static const char sumsq[] = "mpcl_optim_grad_sumsq", norm[] = "mpcl_optim_grad_norm";
    cl_kernel k;
    cl_uint n = (cl_uint)opt->n;
    mpcl_status st = mpcl__kernel(ctx, grads->dtype, sumsq, &k);
    if (st == MPCL_OK)
        st = mpcl__set_args(ctx, k, sumsq, MPCL_ARG(grads->mem), MPCL_ARG(n),
                            MPCL_ARG(opt->partial->mem), MPCL_ARGS_END);
    if (st == MPCL_OK) st = mpcl__launch_1d(ctx, k, sumsq, NORM_WG * NORM_GROUPS, NORM_WG);
    if (st == MPCL_OK) st = mpcl__kernel(ctx, grads->dtype, norm, &k);
    if (st == MPCL_OK)
        st = mpcl__set_args(ctx, k, norm, MPCL_ARG(opt->partial->mem), MPCL_ARG(scale),
                            MPCL_ARG(opt->p.clip_norm), MPCL_ARG(opt->clip->mem), MPCL_ARGS_END);
    if (st == MPCL_OK) st = mpcl__launch_1d(ctx, k, norm, 1, 1);
    return st;
}

/* The step counter and bias corrections move on after the update (one
 * work-item; not for a skipped step). With ls, the same launch then runs the
 * loss-scale update (mpcl_optim_advance_scale). */
static mpcl_status advance_step(mpcl_context *ctx, mpcl_optimizer *opt, cl_mem ls_state,
                                const mpcl_loss_scale *ls) {
    const char *name = ls ? "mpcl_optim_advance_scale" : "mpcl_optim_advance";
    cl_kernel k;
    mpcl_status st = mpcl__kernel(ctx, opt->working->dtype, name, &k);
    if (st != MPCL_OK) return st;
    if (ls) {
        st = mpcl__loss_scale_set_update_args(ctx, ls, k, name);
        cl_uint a = MPCL_ABI_LS_UPDATE_ARGS;
        if (st == MPCL_OK) st = mpcl__set_arg(ctx, k, name, a++, sizeof(cl_mem), &opt->step->mem);
        if (st == MPCL_OK) st = mpcl__set_arg(ctx, k, name, a++, sizeof(float), &opt->p.beta1);
        if (st == MPCL_OK) st = mpcl__set_arg(ctx, k, name, a++, sizeof(float), &opt->p.beta2);
    } else {
        st = mpcl__set_args(ctx, k, name, MPCL_ARG(opt->step->mem), MPCL_ARG(ls_state),
                            MPCL_ARG(opt->p.beta1), MPCL_ARG(opt->p.beta2), MPCL_ARGS_END);
    }
    if (st == MPCL_OK) st = mpcl__launch_1d(ctx, k, name, 1, 1);
    return st;
}

#define SET_ARG(x)                                                            \
    do {                                                                      \
        st = mpcl__set_arg(ctx, k, name, a++, sizeof(x), (const void *)&(x)); \
        if (st != MPCL_OK) return st;                                         \
    } while (0)

/* The update kernels' arguments, the same for both forms. */
static mpcl_status set_update_args(mpcl_context *ctx, mpcl_optimizer *opt, cl_kernel k,
                                   const char *name, const mpcl_tensor *grads, cl_uint base,
                                   cl_mem scale, cl_mem state) {
    mpcl_status st;
    cl_uint a = 0;
    SET_ARG(opt->master->mem);
    SET_ARG(opt->m->mem);
    if (opt->v) SET_ARG(opt->v->mem);
    SET_ARG(opt->working->mem);
    SET_ARG(grads->mem);
    SET_ARG(base);
    SET_ARG(scale);
    SET_ARG(state);
    SET_ARG(opt->clip->mem);
    SET_ARG(opt->step->mem); /* Adam's bias corrections */
    SET_ARG(opt->decay->mem);
    /* Every kind takes every generic field and reads those it declares. */
    cl_uint nesterov = opt->p.nesterov != 0;
    SET_ARG(opt->p.lr);
    SET_ARG(opt->p.beta1);
    SET_ARG(opt->p.beta2);
    SET_ARG(opt->p.eps);
    SET_ARG(opt->p.weight_decay);
    SET_ARG(opt->p.momentum);
    SET_ARG(nesterov);
    return MPCL_OK;
}

/* The update, and the end-of-step launch: the advance alone, or (fold_ls)
 * the advance and the loss-scale update. */
static mpcl_status optimizer_step(mpcl_context *ctx, mpcl_optimizer *opt, const mpcl_tensor *grads,
                                  const mpcl_loss_scale *ls, bool fold_ls) {
    if (grads->dtype != opt->working->dtype)
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE,
                          "optimizer gradients are %s but the working arena is %s",
                          mpcl_dtype_name(grads->dtype), mpcl_dtype_name(opt->working->dtype));
    if (grads->rows * grads->cols != opt->n)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "optimizer gradients have %zu elements for %zu parameters",
                          grads->rows * grads->cols, opt->n);
    /* The update kernels take their buffers as restrict (so that PoCL hoists
     * the per-step constants out of its work-item loop). */
    if (grads->mem == opt->working->mem)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "optimizer gradients are the working copy it updates");
    cl_mem scale = ls ? mpcl__loss_scale_scale_mem(ls) : opt->unit_scale->mem;
    cl_mem state = ls ? mpcl__loss_scale_state_mem(ls) : opt->no_state->mem;
    mpcl_status st = MPCL_OK;
    if (opt->p.clip_norm > 0.0f && (st = clip_launch(ctx, opt, grads, scale)) != MPCL_OK) return st;

    /* Eight elements per work-item over whole groups, then the tail, if any,
     * one per item in a launch of exactly its size: the kernels have no range
     * check (it would keep a CPU runtime from vectorizing them). A model's
     * arenas are whole granules (mpcl__params), so there it is one launch. */
    const optim_kind_row *row = kind_row(opt->p.kind);
    const char *name = row->kernel, *name8 = row->kernel_v8;
    cl_kernel k8, k1;
    if ((st = mpcl__kernel(ctx, opt->working->dtype, name8, &k8)) != MPCL_OK) return st;
    /* A driver query, once: not in every step. */
    if (!opt->local) opt->local = mpcl__local_size(ctx, k8, MPCL__OPTIM_GROUP);
    size_t local = opt->local;
    size_t items = opt->n / MPCL__OPTIM_VEC / local * local, done = items * MPCL__OPTIM_VEC;
    if (items > 0) {
        if ((st = set_update_args(ctx, opt, k8, name8, grads, 0, scale, state)) != MPCL_OK ||
            (st = mpcl__launch_1d(ctx, k8, name8, items, local)) != MPCL_OK)
            return st;
    }
    if (done < opt->n) {
        if ((st = mpcl__kernel(ctx, opt->working->dtype, name, &k1)) != MPCL_OK ||
            (st = set_update_args(ctx, opt, k1, name, grads, (cl_uint)done, scale, state)) !=
                MPCL_OK ||
            (st = mpcl__launch_1d(ctx, k1, name, opt->n - done, 0)) != MPCL_OK)
            return st;
    }
    return advance_step(ctx, opt, state, fold_ls ? ls : NULL);
}
#undef SET_ARG

mpcl_status mpcl_optimizer_step(mpcl_context *ctx, mpcl_optimizer *opt, const mpcl_tensor *grads,
                                const mpcl_loss_scale *ls) {
    return optimizer_step(ctx, opt, grads, ls, false);
}

mpcl_status mpcl_optimizer_step_scaled(mpcl_context *ctx, mpcl_optimizer *opt,
                                       const mpcl_tensor *grads, mpcl_loss_scale *ls) {
    return optimizer_step(ctx, opt, grads, ls, ls != NULL);
}

mpcl_status mpcl_optimizer_read_grad_norm(mpcl_context *ctx, const mpcl_optimizer *opt,
                                          float *norm) {
    float clip[CLIP_LEN];
    mpcl_status st = mpcl_tensor_download_f32(opt->clip, clip, CLIP_LEN);
    if (st != MPCL_OK) return st;
    (void)ctx;
    *norm = clip[MPCL_ABI_OPTIM_CLIP_NORM];
    return MPCL_OK;
}

static mpcl_status slot_range(mpcl_context *ctx, const mpcl_optimizer *opt, mpcl_optim_slot slot,
                              size_t offset, size_t count, const char *what, cl_mem *mem) {
    if (!mpcl_optim_has_slot(opt->p.kind, slot))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "optimizer %s of slot %d, which %s lacks",
                          what, (int)slot, OPTIM_KINDS[opt->p.kind].name);
    if (offset > opt->n || count > opt->n - offset)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "optimizer %s of elements [%zu, %zu) of an arena of %zu", what, offset,
                          offset + count, opt->n);
    *mem = slot == MPCL_OPTIM_SLOT_MASTER ? opt->master->mem
           : slot == MPCL_OPTIM_SLOT_M    ? opt->m->mem
                                          : opt->v->mem;
    return MPCL_OK;
}

/* A blocking copy of elements [offset, offset + count) of a slot into dst
 * (a read) or from src (a write; dst NULL), after the range and slot checks. */
static mpcl_status transfer(mpcl_context *ctx, const mpcl_optimizer *opt, mpcl_optim_slot slot,
                            size_t offset, size_t count, float *dst, const float *src) {
    cl_mem mem = NULL;
    mpcl_status st = slot_range(ctx, opt, slot, offset, count, dst ? "read" : "write", &mem);
    if (st != MPCL_OK || count == 0) return st;
    ctx->syncs++;
    size_t at = offset * sizeof(float), bytes = count * sizeof(float);
    cl_int err =
        dst ? clEnqueueReadBuffer(ctx->queue, mem, CL_TRUE, at, bytes, dst, 0, NULL, NULL)
            : clEnqueueWriteBuffer(ctx->queue, mem, CL_TRUE, at, bytes, src, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return mpcl__cl_error(ctx, err, dst ? "clEnqueueReadBuffer" : "clEnqueueWriteBuffer",
                              __FILE__, __LINE__);
    return dst ? MPCL_OK : mpcl__host_wrote(ctx, mem);
}

mpcl_status mpcl_optimizer_read(mpcl_context *ctx, const mpcl_optimizer *opt, mpcl_optim_slot slot,
                                size_t offset, float *dst, size_t count) {
    return transfer(ctx, opt, slot, offset, count, dst, NULL);
}

/* working[offset, offset + count) = master rounded to the storage dtype. */
static mpcl_status refresh_working(mpcl_context *ctx, mpcl_optimizer *opt, size_t offset,
                                   size_t count) {
    static const char name[] = "mpcl_optim_refresh";
    cl_kernel k;
    cl_uint off = (cl_uint)offset, n = (cl_uint)count;
    mpcl_status st = mpcl__kernel(ctx, opt->working->dtype, name, &k);
    if (st == MPCL_OK)
        st = mpcl__set_args(ctx, k, name, MPCL_ARG(opt->working->mem), MPCL_ARG(opt->master->mem),
                            MPCL_ARG(off), MPCL_ARG(n), MPCL_ARGS_END);
    if (st == MPCL_OK) st = mpcl__launch_1d(ctx, k, name, count, mpcl__local_size(ctx, k, 256));
    if (st == MPCL_OK) st = mpcl_context_finish(ctx); /* blocking, as documented */
    return st;
}

mpcl_status mpcl_optimizer_write(mpcl_context *ctx, mpcl_optimizer *opt, mpcl_optim_slot slot,
                                 size_t offset, const float *src, size_t count) {
    mpcl_status st = transfer(ctx, opt, slot, offset, count, NULL, src);
    if (st == MPCL_OK && count > 0 && slot == MPCL_OPTIM_SLOT_MASTER)
        st = refresh_working(ctx, opt, offset, count);
    return st;
}

mpcl_status mpcl_optimizer_write_decay(mpcl_context *ctx, mpcl_optimizer *opt, const uint8_t *flags,
                                       size_t count) {
    size_t chunks = decay_chunks(opt->n);
    if (count != chunks)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "optimizer decay flags: %zu for an arena of %zu elements, which has %zu "
                          "chunks of %d",
                          count, opt->n, chunks, MPCL_OPTIM_DECAY_CHUNK);
    for (size_t c = 0; c < count; c++)
        if (flags[c] > 1)
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                              "optimizer decay flag %zu is %u, not 0 or 1", c, flags[c]);
    mpcl_status st = mpcl_tensor_upload_raw(opt->decay, flags, count);
    if (st == MPCL_OK) st = mpcl_context_finish(ctx); /* blocking, as documented */
    return st;
}

mpcl_status mpcl_optimizer_read_step(mpcl_context *ctx, const mpcl_optimizer *opt, uint32_t *step) {
    mpcl_status st = MPCL_OK;
    ctx->syncs++;
    CHECK_CL(ctx, clEnqueueReadBuffer(ctx->queue, opt->step->mem, CL_TRUE,
                                      MPCL_ABI_OPTIM_STEP_COUNT * sizeof(uint32_t),
                                      sizeof(uint32_t), step, 0, NULL, NULL));
cleanup:
    return st;
}

/* The bias corrections of the coming step are computed by the device, with
 * the very function the update kernel uses: a host value, even correctly
 * rounded, differs from the device's f32 expm1/log1p by an ulp for some t, and
 * a resumed run would then drift from the uninterrupted one. */
mpcl_status mpcl_optimizer_write_step(mpcl_context *ctx, mpcl_optimizer *opt, uint32_t step) {
    static const char name[] = "mpcl_optim_set_step";
    cl_kernel k;
    mpcl_status st = mpcl__kernel(ctx, opt->working->dtype, name, &k);
    if (st != MPCL_OK) return st;
    cl_uint t = step;
    st = mpcl__set_args(ctx, k, name, MPCL_ARG(opt->step->mem), MPCL_ARG(t), MPCL_ARG(opt->p.beta1),
                        MPCL_ARG(opt->p.beta2), MPCL_ARGS_END);
    if (st == MPCL_OK) st = mpcl__launch_1d(ctx, k, name, 1, 1);
    if (st == MPCL_OK) st = mpcl_context_finish(ctx); /* blocking, as documented */
    return st;
}
