/* The nn area's internal declarations: the parameter table and the layer
 * interface, for the areas above it. Nothing here is installed. */
#ifndef MPCL_NN_H
#define MPCL_NN_H

#include "compute/compute.h"
#include "mpcl/layer_spec.h"
#include "mpcl/model.h"

/* ---- the parameter table ---- */

/* Rows of a table: GPT-2 XL's 48 blocks of 12 rows and its 4 others are
 * 580, with room for larger stacks. A table is about 110 KB: models and
 * callers keep tables on the heap. */
#define MPCL__MAX_PARAMS 1024

/* How a row starts: Glorot-uniform kernels (fans from its shape), zeros,
 * ones (a batch norm's gamma and moving variance), or normal with mean 0
 * and standard deviation 0.02 (GPT-2's embeddings). */
typedef enum mpcl__param_init {
    MPCL__INIT_GLOROT,
    MPCL__INIT_ZEROS,
    MPCL__INIT_ONES,
    MPCL__INIT_NORMAL_002,
} mpcl__param_init;

typedef struct mpcl__param_table {
    mpcl_param_info rows[MPCL__MAX_PARAMS];
    mpcl__param_init init[MPCL__MAX_PARAMS];
    /* The layers that write each row's gradient: 1 (the row's own layer)
     * plus each layer above it that shares the row (mpcl__params_share). */
    unsigned grad_writers[MPCL__MAX_PARAMS];
    size_t count;
    size_t align; /* every row's offset is a multiple of it (elements) */
    size_t total; /* elements of each arena: the last row's end, rounded up to align
                     and to whole optimizer work-groups (MPCL__OPTIM_GRANULE) */
} mpcl__param_table;

/* An empty table whose offsets are aligned for sub-buffers of every arena:
 * align_bytes (CL_DEVICE_MEM_BASE_ADDR_ALIGN) over the smallest element size
 * of any arena (2 bytes, f16 and bf16), and to the optimizer's decay chunks
 * (MPCL_OPTIM_DECAY_CHUNK elements). */
void mpcl__params_init(mpcl__param_table *t, size_t align_bytes);
/* Appends a row; its offset is the previous end rounded up to the alignment.
 * MPCL_ERR_INVALID_ARG for a bad rank or a zero dimension, a full table or
 * an over-long name. *index receives the row's index. */
mpcl_status mpcl__params_add(mpcl_context *ctx, mpcl__param_table *t, const char *name, size_t rank,
                             const size_t *shape, mpcl__param_init init, size_t *index);
/* A layer above the row's own writes its gradient too (a tied LM head, the
 * token embedding's). *writer receives its place among the row's writers
 * (the row's own layer is 0). */
void mpcl__params_share(mpcl__param_table *t, size_t row, size_t *writer);
/* Whether that writer of the row's gradient adds to it rather than
 * overwrites it: a layer declared after it writes the row too. Backward
 * runs from the top, so the last writer declared runs first and
 * overwrites, and every writer after it in backward adds: nothing needs
 * zeroing, and the optimizer sees one row. */
bool mpcl__params_grad_adds(const mpcl__param_table *t, size_t row, size_t writer);

/* A model's two tables: the trainable parameters, which the optimizer
 * updates, and the buffers, state a layer keeps that no gradient reaches
 * (a batch norm's moving averages). Checkpoints save both. */
typedef struct mpcl__tables {
    mpcl__param_table params;
    mpcl__param_table buffers;
} mpcl__tables;

/* The arenas a model's layers take views of: every row's offset indexes
 * each of them. */
typedef struct mpcl__arenas {
    mpcl_tensor *master;  /* f32 [1, total] */
    mpcl_tensor *working; /* storage [1, total] */
    mpcl_tensor *grads;   /* storage [1, total] */
    mpcl_tensor *buffers; /* f32 [1, buffers total]; NULL without buffers */
} mpcl__arenas;

/* ---- layers ---- */

typedef struct mpcl__layer mpcl__layer;
typedef struct mpcl__bias_act mpcl__bias_act;

/* What a layer sees of the model it belongs to. */
typedef struct mpcl__layer_env {
    mpcl_context *ctx;
    mpcl_dtype storage;
    mpcl_gemm_path gemm;
    size_t max_batch;
    uint64_t seed;        /* the model's: dropout masks derive from it */
    uint64_t rng_counter; /* training forwards so far: one dropout mask each */
} mpcl__layer_env;

/* One attribute a kind declares: its Keras name, its type, where it lives
 * in mpcl_layer_spec, its default as text (NULL: required) and, for
 * numbers, its range [lo, hi], or [lo, hi) with hi_open. */
typedef struct mpcl__attr {
    const char *name;
    mpcl_attr_type type;
    size_t offset;
    const char *default_value;
    double lo, hi;
    bool hi_open;
} mpcl__attr;

/* The loss that a top layer computes itself (forward_loss below): the
 * model's loss over the targets as the loss sees them ([B positions, 1]
 * labels, or [B positions, classes] targets), into `stats`. For training,
 * `scale` is the loss scale (NULL: 1) and `divisor` the rows the gradient
 * is the mean over; evaluation gives neither. */
typedef struct mpcl__loss_job {
    mpcl_loss loss;
    mpcl_tensor *stats;
    const mpcl_tensor *targets;
    const mpcl_tensor *scale;
    size_t divisor;
} mpcl__loss_job;

/* One layer kind. Adding a kind is one file that defines one of these plus
 * its lines in layers.c. */
typedef struct mpcl__layer_kind {
    const char *name;       /* the spec's kind: "dense" */
    const char *keras_name; /* Keras' class name: "Dense" */
    const mpcl__attr *attrs;
    size_t attr_count;
    /* The input rank it takes: 1 (features), 3 (height, width, channels),
     * or 0 for any. */
    size_t input_rank;
    /* With input_rank 1, it also takes a sequence (positions, features) and
     * maps each position on its own (Keras' Dense on a rank-3 batch). */
    bool per_position;
    /* Its input is token ids, int32 (positions,), not features: only a
     * model's first layer may be such a kind, and the model's x is then
     * int32 [B, positions]. It passes no gradient to its input. */
    bool takes_tokens;
    /* The output is the input, unchanged in memory (Flatten): the kind has
     * no forward, backward, create or activations, and the model passes
     * tensors through it. */
    bool passthrough;
    /* Evaluation is the identity (Dropout): the model passes the input on
     * instead of calling forward, except for the top layer, whose output
     * is the model's. */
    bool eval_identity;
    /* It applies the bias and activation of the layer below to its own
     * output when the model moves them here (MaxPooling2D: see `epilogue`
     * in mpcl__layer). */
    bool takes_epilogue;
    /* Optional: fills attributes whose default depends on others (pooling
     * strides 0 mean the pool size), so that a model's text shows what
     * runs and two ways of writing one model read the same. */
    void (*resolve)(mpcl_layer_spec *spec);
    /* Checks the spec against the input shape, sets the output shape and
     * adds the layer's rows to the tables (no device work). */
    mpcl_status (*declare)(mpcl__layer *L, mpcl__tables *t);
    /* Device bytes of the activations it keeps for a batch of max_batch (a
     * double: the model checks the total against the device before it
     * allocates, so it must not wrap for absurd sizes). */
    double (*activation_bytes)(const mpcl__layer *L, const mpcl__layer_env *env);
    /* Allocates its activations and takes views of its rows in the arenas. */
    mpcl_status (*create)(mpcl__layer *L, const mpcl__tables *t, const mpcl__arenas *a);
    /* L->output = f(in) for the first B = in->rows rows; `training` keeps
     * what backward needs. */
    mpcl_status (*forward)(mpcl__layer *L, const mpcl_tensor *in, bool training);
    /* From L->d_output (the gradient of the loss with respect to its output,
     * which it may overwrite): its parameter gradients into the arena views,
     * and, when d_in is not NULL, the gradient with respect to its input. */
    mpcl_status (*backward)(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in);
    /* Optional, for generation (generate.c): inference of one position of
     * sample 0 alone. in is that position's input, one row (its token id,
     * int32 [1, 1], or its features [1, C]); the output goes to the first
     * row of L->output ([1, per-position outputs]). Positions below
     * `position` are those of the last forward of sample 0 and of the steps
     * since: a kind that looks back (attention) keeps what it needs of them
     * (its keys and values) and adds this position's. */
    mpcl_status (*forward_step)(mpcl__layer *L, const mpcl_tensor *in, size_t position);
    /* Optional, for a top layer whose outputs are too many to keep for a
     * whole batch (a language-model head over a large vocabulary): the loss
     * straight from its input, chunk by chunk, without L->output. With d_in
     * (a training forward) each chunk's gradient flows on at once: its
     * parameters' gradients and d_in are written here, and the model skips
     * its backward. The model calls it when create set L->fuses_loss. */
    mpcl_status (*forward_loss)(mpcl__layer *L, const mpcl_tensor *in, const mpcl__loss_job *job,
                                mpcl_tensor *d_in);
    void (*destroy)(mpcl__layer *L);
} mpcl__layer_kind;

/* The longest layer name, its terminating zero included: a composite's
 * sub-layer ("transformer_decoder_31.attn") and what a kind adds to it for
 * its rows must fit; a longer one is refused, never cut. */
#define MPCL__LAYER_NAME_MAX 48
/* A kind's buffer for a row's name ("<layer>.c_attn.kernel"): longer than
 * mpcl_param_info's, so that a name too long for the table reaches
 * mpcl__params_add whole and is refused there. */
#define MPCL__ROW_NAME_BUF 96

struct mpcl__layer {
    const mpcl__layer_kind *kind;
    const mpcl__layer_env *env;
    mpcl_layer_spec spec;
    size_t index; /* its position among the layers of its kind: dense_<index> */
    /* A sub-layer of a composite kind: the name the composite gives it
     * ("transformer_decoder_0.attn"), which its rows and messages carry
     * instead of <kind>_<index>; NULL for a model's own layers. */
    const char *name;
    /* How Dense and CausalSelfAttention start their kernels: Glorot (0, the
     * default), or what a composite chooses (GPT-2's normal(0, 0.02)). */
    mpcl__param_init kernel_init;
    size_t in_rank, in_shape[MPCL_MAX_INPUT_RANK];   /* per sample */
    size_t out_rank, out_shape[MPCL_MAX_INPUT_RANK]; /* set by declare */
    size_t inputs, outputs; /* features per sample: the products of the shapes */
    mpcl_tensor *output;    /* [max_batch, outputs] storage */
    mpcl_tensor *d_output;  /* [max_batch, outputs] storage */
    /* Set by create: the model computes the loss through forward_loss. The
     * layer then has no d_output, and makes its output only when asked for
     * it (a prediction). */
    bool fuses_loss;
    /* The bias and activation the layer applies after its GEMM, set by
     * create (Conv2D); NULL for other kinds. When the layer above takes it
     * (takes_epilogue) and the activation commutes with max
     * (mpcl__activation_pools_first), the model moves it there
     * (`epilogue_below`) and sets this one NULL: pooling the GEMM's map,
     * then adding the bias and applying the activation to the pooled map,
     * gives the same values as the other order with a quarter of the
     * elementwise passes (a 2x2 pool). This layer's output and d_output
     * are then its GEMM's, before the bias. */
    mpcl__bias_act *epilogue;
    /* The epilogue the layer below moved here; NULL when none was. */
    mpcl__bias_act *epilogue_below;
    /* Set by a composite around one backward call (the skip connections of
     * transformer_decoder, on its layer norms): the backward then writes
     * d_in = its input gradient + d_in_addend (rows like d_in's; it may be
     * d_in itself) in its one pass over d_in, instead of a separate sum.
     * NULL: the gradient alone. Only layer_normalization's backward reads
     * it; a composite sets it on no other kind. */
    const mpcl_tensor *d_in_addend;
    /* The forward's counterpart, set around one forward or forward_step
     * call (the same block, on its attention and its c_proj): the layer
     * writes output = its result + out_addend (the batch's rows of its
     * output's shape, or forward_step's one row) in its GEMM's epilogue.
     * Only dense and causal_self_attention read it. */
    const mpcl_tensor *out_addend;
    void *state; /* the kind's own */
};

/* The registered kind of that name; NULL when there is none. */
const mpcl__layer_kind *mpcl__layer_kind_find(const char *name);
/* The kind of a spec; NULL for an unknown or unterminated kind. */
const mpcl__layer_kind *mpcl__spec_kind(const mpcl_layer_spec *spec);
/* "(28, 28, 1)" */
void mpcl__shape_str(char *buf, size_t size, size_t rank, const size_t *shape);
/* A layer's name in messages and rows: "conv2d_1", or the name its
 * composite gave it. */
void mpcl__layer_name(char *buf, size_t size, const mpcl__layer *L);
/* Device bytes of a layer's output and d_output for batches of max_batch,
 * in the storage dtype: what every kind that computes keeps. */
double mpcl__layer_io_bytes(const mpcl__layer *L);
/* Allocates L->output and L->d_output, [max_batch, outputs] storage; a
 * d_output already set (a composite's view of its own, see
 * transformer_decoder.c) is kept. */
mpcl_status mpcl__layer_create_io(mpcl__layer *L);
/* MPCL_ERR_INVALID_ARG naming the layer and its input shape unless its
 * input is a sequence (time, channels). */
mpcl_status mpcl__require_sequence(const mpcl__layer *L);
/* The output shape of a layer whose output has `rank` dims: sets
 * out_rank, out_shape and outputs. */
void mpcl__layer_set_output(mpcl__layer *L, size_t rank, const size_t *shape);

/* ---- the bias and activation after a GEMM (Dense, Conv2D) ---- */

struct mpcl__bias_act {
    size_t units;
    bool use_bias;
    mpcl_activation act;
    size_t bias_row;
    mpcl_tensor *b;  /* [1, units] f32: a view of the master arena, or zeros without a bias */
    mpcl_tensor *db; /* [1, units] view of the gradient arena; NULL without a bias */
    mpcl_tensor *z;  /* [rows, units] pre-activation, only when act' needs it */
};

/* Device bytes it keeps for `rows` rows (z only). */
double mpcl__bias_act_bytes(mpcl_activation act, size_t rows, size_t cols, mpcl_dtype storage);
/* Adds "<layer>.bias" [units] when use_bias. */
mpcl_status mpcl__bias_act_add_rows(mpcl_context *ctx, mpcl__tables *t, const char *layer,
                                    size_t units, bool use_bias, mpcl__bias_act *e);
/* Views of its row, and z for up to `rows` rows. */
mpcl_status mpcl__bias_act_create(mpcl__bias_act *e, const mpcl__layer_env *env,
                                  const mpcl__tables *t, const mpcl__arenas *a, size_t rows,
                                  mpcl_activation act);
/* h = act(x w + b) + addend (NULL: none), z kept when training; without
 * an activation one kernel where the GEMM path has the epilogue
 * (mpcl__gemm_fused). */
mpcl_status mpcl__bias_act_gemm_forward(mpcl__bias_act *e, const mpcl__layer_env *env,
                                        const mpcl_tensor *x, const mpcl_tensor *w, mpcl_tensor *h,
                                        bool training, const mpcl_tensor *addend);
/* h = act(h + b), in place on h [rows, units]; z kept when training. */
mpcl_status mpcl__bias_act_forward(mpcl__bias_act *e, mpcl_context *ctx, mpcl_tensor *h,
                                   bool training);
/* d_h (the gradient of the output h) becomes the gradient of the
 * pre-activation, in place, and the bias gradient its column sums. */
mpcl_status mpcl__bias_act_backward(mpcl__bias_act *e, mpcl_context *ctx, mpcl_tensor *d_h,
                                    const mpcl_tensor *h);
void mpcl__bias_act_destroy(mpcl__bias_act *e);

/* ---- the model ---- */

/* The layers the device runs for params: its layers (mpcl_model_params_layers)
 * with the output activation the loss applies itself
 * (mpcl_model_output_activation) left to the loss, so that the last layer
 * gives logits. A softmax anywhere else, or with a loss that does not
 * apply it, is MPCL_ERR_INVALID_ARG. */
mpcl_status mpcl__model_device_layers(mpcl_context *ctx, const mpcl_model_params *p,
                                      mpcl_layer_spec out[MPCL_MAX_LAYERS], size_t *count);

/* Declares layers[0..count) from specs for params (shapes, tables; no
 * device work: env's ctx may be NULL). */
mpcl_status mpcl__declare_layers(mpcl_context *ctx, const mpcl_model_params *p,
                                 const mpcl_layer_spec *specs, size_t count,
                                 const mpcl__layer_env *env, mpcl__layer *layers, mpcl__tables *t);
/* The tables a model of params lays out (declared layers, no device);
 * t is overwritten. */
mpcl_status mpcl__model_tables(mpcl_context *ctx, const mpcl_model_params *p, mpcl__tables *t);
/* Frees what the layers hold (declared or created). */
void mpcl__destroy_layers(mpcl__layer *layers, size_t count);

/* mpcl_model_create with the plan given rather than resolved (auto_plan.c
 * times candidate plans through it). */
mpcl_status mpcl__model_create_plan(mpcl_context *ctx, const mpcl_model_params *params,
                                    const mpcl_plan *plan, mpcl_model **out);
/* One position at a time (generate.c): whether every layer that computes
 * in evaluation has forward_step; the step of one token (int32 [1, 1]) at
 * `position` (< mpcl_model_positions) of sample 0, after an inference
 * (mpcl_model_predict) whose sample 0 held the tokens before it and the
 * steps of positions up to it; and the logits of the last step
 * (mpcl_model_classes of them). */
bool mpcl__model_can_step(const mpcl_model *m);
mpcl_status mpcl__model_forward_step(mpcl_model *m, const mpcl_tensor *token, size_t position);
mpcl_status mpcl__model_read_step_logits(mpcl_model *m, float *dst, size_t count);
/* The gradient arena's tensor in `wire` (f16 or bf16), for the compressed
 * all-reduce (src/parallel/dist.c): the arena itself where it is stored in
 * `wire`, else a tensor of its shape that the model keeps (made on first use,
 * remade for another dtype), which the caller fills and empties with
 * mpcl_cast. */
mpcl_status mpcl__model_grad_wire(mpcl_model *m, mpcl_dtype wire, mpcl_tensor **out);
/* The first row of a layer's output: the [1, C] that forward_step writes
 * (C: the last axis of its output). */
mpcl_tensor mpcl__layer_step_row(const mpcl__layer *L);

/* MPCL_AUTO=capability: `auto` by the capability rule, not measured. */
bool mpcl__auto_by_capability(void);
/* Whether mpcl_model_auto_plan would resolve these params without measuring
 * (the capability rule, a single candidate, or a verdict in the cache); it
 * measures nothing and writes nothing. */
bool mpcl__auto_plan_known(mpcl_context *ctx, const mpcl_model_params *params);

#endif
