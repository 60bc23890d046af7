/* The trainer's insides, shared by train.c (the loop) and checkpoint.c (save
 * and load of its state). Nothing here is installed. */
#ifndef MPCL_TRAIN_INTERNAL_H
#define MPCL_TRAIN_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "io/io.h"
#include "parallel/parallel.h"
#include "mpcl/train.h"

/* A data-parallel replica beyond the first: its own device copy of the
 * training data, order and batch buffers, and model. */
typedef struct mpcl__replica {
    mpcl_context *ctx;
    mpcl_model *model;
    mpcl_device_dataset *train;
    mpcl_tensor *order, *x, *labels;
    mpcl_token_stream *stream; /* a token run's copy of the stream */
} mpcl__replica;

struct mpcl_trainer {
    mpcl_context *ctx;
    mpcl_train_params params; /* data_dir points to the copy below */
    char *data_dir;           /* owned; NULL for the default folder */
    char *save_path;          /* owned; params.save_path points here */
    mpcl_model *model;
    mpcl_device_dataset *train, *test;
    size_t train_count, test_count;
    size_t train_available;   /* training samples in the files, before train_limit */
    uint64_t steps_per_epoch; /* ceil(train_count / batch) */
    mpcl_tensor *order;       /* [train_count, 1] i32: the permutation of order_epoch */
    mpcl_tensor *test_order;  /* [test_count, 1] i32: the identity */
    mpcl_tensor *x;           /* [batch, inputs] storage dtype */
    mpcl_tensor *labels;      /* [batch, 1] i32, or [batch, classes] f32 targets */
    int32_t *host_order;      /* [train_count]: `order` on the host */
    int32_t *test_host_order; /* [test_count]: the identity, for a streamed test set */
    bool order_valid;         /* `order` holds the permutation of order_epoch */
    uint32_t order_epoch;

    /* Position: `step` batches done in all, `epoch_step` of them in `epoch`.
     * Always epoch_step < steps_per_epoch: a finished epoch moves to the next. */
    uint64_t step;
    uint32_t epoch;
    uint64_t epoch_step;

    /* For the summary. */
    bool stopped;
    bool diverged;
    bool evaluated;
    double test_loss, test_accuracy;
    double train_seconds; /* training only, evaluation excluded */
    uint64_t train_samples;
    double seconds;
    float loss_scale;       /* as last read from the device; 1 without a scaler */
    uint32_t skipped_steps; /* likewise; 0 without a scaler */
    float lr;               /* the lr of the last step (the base lr before any) */

    /* For mpcl_trainer_data_info; params.batch is the batch the run takes. */
    size_t batch_requested;
    bool classes_inferred;
    size_t class_examples[256];
    bool float_targets; /* y is f32 [count, classes] rather than i32 labels */
    size_t input_shape[3], input_rank;

    /* Data parallel: the communicator (borrowed; NULL alone), this
     * process's replicas (rep[0] mirrors the fields above and owns nothing),
     * models[r] = rep[r].model for the dist calls. */
    mpcl_dist *dist;
    size_t replicas;
    mpcl__replica rep[MPCL_DIST_MAX_LOCAL];
    mpcl_model *models[MPCL_DIST_MAX_LOCAL];
    char plan_note[160];
    uint64_t local_samples; /* training samples of this process's replicas */

    /* Training on tokens (params.tokens; train_tokens.c): the stream on the
     * device, the run's steps (the last epoch may be short) and the
     * micro-batches of a step. x and labels are then int32 [batch, context]. */
    mpcl_token_stream *stream;
    uint64_t total_steps;
    uint32_t accum;
};

/* The shuffle of one epoch into idx[0..n): a pure function of (seed, epoch),
 * see train.c. */
void mpcl__train_epoch_order(uint64_t seed, uint32_t epoch, int32_t *idx, size_t n);

/* Under MPI: MPCL_ERR_DIST, on every rank alike, when the ranks do not run
 * the same job (model, plan, wire format, data sizes, schedule, position),
 * naming the first differing rank and field. One allgather; nothing alone. */
mpcl_status mpcl__train_check_same_job(mpcl_trainer *tr);

/* Host-only calls (data, safetensors) record their failure on the thread
 * only; this copies that detail to ctx too and returns st. */
mpcl_status mpcl__train_adopt_error(mpcl_context *ctx, mpcl_status st);

/* Copies replica 0's state (weights, optimizer state and step, loss-scale
 * state) to this process's other replicas, after a checkpoint load. */
mpcl_status mpcl__train_sync_replicas(mpcl_trainer *tr);
/* Every check mpcl_trainer_load makes on a read file (format, tensors,
 * metadata) before it changes anything; for the fuzz harness. */
mpcl_status mpcl__checkpoint_check(mpcl_trainer *tr, const mpcl_safetensors *file,
                                   const char *path);

/* The replicas' contexts from params (replica_ctx), and the batch split
 * they need: every replica takes a row of every batch. */
mpcl_status mpcl__train_setup_replicas(mpcl_trainer *tr, const mpcl_train_params *params);
/* Every replica's model of *mp in one precision plan (train.c). */
mpcl_status mpcl__train_create_models(mpcl_trainer *tr, mpcl_model_params *mp);

/* train_tokens.c: the trainer on a token stream. setup fills the data and
 * model fields of a trainer whose common fields are set; step runs one
 * training step (its micro-batches and the update); evaluate runs the
 * held-out batches into the model's evaluation statistics. */
mpcl_status mpcl__train_tokens_setup(mpcl_trainer *tr, const mpcl_train_params *params);
mpcl_status mpcl__train_tokens_step(mpcl_trainer *tr);
mpcl_status mpcl__train_tokens_evaluate(mpcl_trainer *tr);

/* train_data.c: the data files of the trainer, loaded and checked. */
/* Where the data come from: the data fields of mpcl_train_params, copied
 * (dir NULL with NPY files), and whether y holds f32 targets (the loss is
 * not sparse categorical cross-entropy). */
typedef struct mpcl__train_source {
    char *dir, *train_x, *train_y, *val_x, *val_y; /* owned; NULL: not given */
    int num_classes;
    size_t train_limit, test_limit;
    double validation_split;
    bool float_targets;
} mpcl__train_source;
/* Copies p's data fields into *src, refusing (MPCL_ERR_INVALID_ARG, on the
 * thread only) a file without its pair, a validation_split outside [0, 1)
 * or beside val files, and a dense loss on the IDX files' labels. */
mpcl_status mpcl__train_source_init(mpcl__train_source *src, const mpcl_train_params *p);
void mpcl__train_source_free(mpcl__train_source *src);
bool mpcl__train_source_same(const mpcl__train_source *a, const mpcl__train_source *b);
/* The training data (limited, sparse labels checked against num_classes
 * or, without it, every class needing an example), then the test data
 * (t10k, the val files or the validation split) against its class count;
 * *available: training samples before the limit. */
mpcl_status mpcl__train_load_files(mpcl_context *ctx, const mpcl__train_source *src,
                                   mpcl_dataset **train, mpcl_dataset **test, size_t *available);
/* Whether params->data_load loads what params name, and is still unused. */
mpcl_status mpcl__train_data_load_check(mpcl_context *ctx, const mpcl_train_params *params);
/* The shape a data load read ahead of the pixels; false when there is none. */
bool mpcl__train_data_load_shape(mpcl_train_data_load *L, size_t *count, size_t *features,
                                 int *classes);
/* The datasets of params->data_load, once it is done, with its status and
 * message as they were. */
mpcl_status mpcl__train_take_loaded(mpcl_context *ctx, const mpcl_train_params *params,
                                    mpcl_dataset **train, mpcl_dataset **test, size_t *available);
/* The test set, when there is one, must fit the training set's model. */
mpcl_status mpcl__train_check_test_data(mpcl_context *ctx, const mpcl_dataset *train,
                                        const mpcl_dataset *test);
/* The training examples of each class, kept for mpcl_trainer_data_info. */
void mpcl__train_count_classes(mpcl_trainer *tr, const mpcl_dataset *train, bool inferred);

#endif
