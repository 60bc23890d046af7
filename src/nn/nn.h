/* The nn area's internal declarations: the parameter table and the layer
 * interface, for the areas above it. Nothing here is installed. */
#ifndef MPCL_NN_H
#define MPCL_NN_H

#include "compute/compute.h"
#include "mpcl/model.h"

/* ---- the parameter table ---- */

#define MPCL__MAX_PARAMS 64

typedef struct mpcl__param_table {
    mpcl_param_info rows[MPCL__MAX_PARAMS];
    size_t count;
    size_t align; /* every row's offset is a multiple of it (elements) */
    size_t total; /* elements of each arena: the last row's end, rounded up to align
                     and to whole optimizer work-groups (MPCL__OPTIM_GRANULE) */
} mpcl__param_table;

/* An empty table whose offsets are aligned for sub-buffers of every arena:
 * align_bytes (CL_DEVICE_MEM_BASE_ADDR_ALIGN) over the smallest element size
 * of any arena (2 bytes, f16 and bf16). */
void mpcl__params_init(mpcl__param_table *t, size_t align_bytes);
/* Appends a row; its offset is the previous end rounded up to the alignment.
 * MPCL_ERR_INVALID_ARG for a bad rank or a zero dimension, a full table or
 * an over-long name. *index receives the row's index. */
mpcl_status mpcl__params_add(mpcl_context *ctx, mpcl__param_table *t, const char *name, size_t rank,
                             const size_t *shape, size_t *index);

/* The arenas a model's layers take views of: every row's offset indexes
 * each of them. */
typedef struct mpcl__arenas {
    mpcl_tensor *master;  /* f32 [1, total] */
    mpcl_tensor *working; /* storage [1, total] */
    mpcl_tensor *grads;   /* storage [1, total] */
} mpcl__arenas;

/* ---- layers ---- */

typedef struct mpcl__layer mpcl__layer;

/* What a layer sees of the model it belongs to. */
typedef struct mpcl__layer_env {
    mpcl_context *ctx;
    mpcl_dtype storage;
    mpcl_gemm_path gemm;
    size_t max_batch;
} mpcl__layer_env;

/* One layer kind. Adding a kind is one file that defines one of these plus
 * its line in layers.c. */
typedef struct mpcl__layer_kind {
    const char *name; /* the spec's kind: "dense" */
    /* Checks the spec against the input features, sets L->outputs and adds
     * the layer's parameter rows to the table (no device work). */
    mpcl_status (*declare)(mpcl__layer *L, mpcl__param_table *t);
    /* Device bytes of the activations it keeps for a batch of max_batch (a
     * double: the model checks the total against the device before it
     * allocates, so it must not wrap for absurd sizes). */
    double (*activation_bytes)(const mpcl__layer *L, const mpcl__layer_env *env);
    /* Allocates its activations and takes views of its rows in the arenas. */
    mpcl_status (*create)(mpcl__layer *L, const mpcl__param_table *t, const mpcl__arenas *a);
    /* L->output = f(in) for the first B = in->rows rows; `training` keeps
     * what backward needs. */
    mpcl_status (*forward)(mpcl__layer *L, const mpcl_tensor *in, bool training);
    /* From L->d_output (the gradient of the loss with respect to its output,
     * which it may overwrite): its parameter gradients into the arena views,
     * and, when d_in is not NULL, the gradient with respect to its input. */
    mpcl_status (*backward)(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in);
    void (*destroy)(mpcl__layer *L);
} mpcl__layer_kind;

struct mpcl__layer {
    const mpcl__layer_kind *kind;
    const mpcl__layer_env *env;
    mpcl_layer_spec spec;
    size_t index;           /* its position among the layers of its kind: dense_<index> */
    size_t inputs, outputs; /* features per sample */
    mpcl_tensor *output;    /* [max_batch, outputs] storage */
    mpcl_tensor *d_output;  /* [max_batch, outputs] storage */
    void *state;            /* the kind's own */
};

/* The registered kind of that name; NULL when there is none. */
const mpcl__layer_kind *mpcl__layer_kind_find(const char *name);

extern const mpcl__layer_kind mpcl__dense_layer;

/* ---- the model ---- */

/* mpcl_model_create with the plan given rather than resolved (auto_plan.c
 * times candidate plans through it). */
mpcl_status mpcl__model_create_plan(mpcl_context *ctx, const mpcl_model_params *params,
                                    const mpcl_plan *plan, mpcl_model **out);
/* MPCL_AUTO=capability: `auto` by the capability rule, not measured. */
bool mpcl__auto_by_capability(void);
/* Whether mpcl_model_auto_plan would resolve these params without measuring
 * (the capability rule, a single candidate, or a verdict in the cache); it
 * measures nothing and writes nothing. */
bool mpcl__auto_plan_known(mpcl_context *ctx, const mpcl_model_params *params);

#endif
