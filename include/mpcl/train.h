/* Training: the fit/evaluate loop over an IDX data set held on the device,
 * with seeded shuffling, periodic reports, evaluation at each epoch's end,
 * cooperative stopping, and checkpoints that resume exactly. */
#ifndef MPCL_TRAIN_H
#define MPCL_TRAIN_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mpcl/context.h"
#include "mpcl/data.h"
#include "mpcl/dist.h"
#include "mpcl/model.h"
#include "mpcl/tokens.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

typedef struct mpcl_train_report {
    uint64_t step;        /* global step (batches done since the start of training) */
    uint32_t epoch;       /* 0-based */
    uint64_t epoch_step;  /* batches done in this epoch */
    uint64_t epoch_steps; /* batches per epoch (the last partial batch included) */
    double loss;          /* mean training loss over the batches since the last report */
    double accuracy;      /* training accuracy over the same batches */
    float loss_scale;     /* 1 when the plan does not scale */
    uint32_t skipped;     /* steps skipped for non-finite gradients, in total */
    double grad_norm;     /* global gradient norm of the last step (with clip_norm > 0; else NaN) */
    double samples_per_s; /* since the last report */
    double elapsed_s;     /* since fit started */
    bool epoch_end;       /* this report closes an epoch (test figures below are set) */
    double test_loss, test_accuracy;
    double lr; /* the learning rate of the report's last step (lr_schedule.h) */
} mpcl_train_report;

typedef void (*mpcl_train_report_fn)(void *user, const mpcl_train_report *report);

typedef struct mpcl_train_params {
    const char *data_dir;  /* NULL: Fashion-MNIST from MPCL_DATA_DEFAULT_DIR */
    size_t train_limit;    /* use only the first N training samples (0, or more than
                              there are: all) */
    size_t test_limit;     /* the first N test samples (likewise) */
    uint32_t epochs;       /* 10 */
    size_t batch;          /* 128 */
    uint64_t seed;         /* 42: initial weights and the shuffle of every epoch */
    uint32_t report_every; /* steps between reports (and the only host reads): 50;
                              0 reports at epoch ends only */
    /* The trainer sets model.inputs and model.classes from the data,
     * model.max_batch = batch and model.seed = seed; evaluation runs in
     * batches of `batch`. Before each step it sets the lr from
     * model.lr_schedule at the global step (lr_schedule.h), a decay_steps
     * of 0 taken as epochs * steps per epoch - warmup_steps. */
    mpcl_model_params model;
    mpcl_train_report_fn on_report;
    void *user;
    /* Checked between steps; when it becomes non-zero, fit stops after the
     * current step (a Ctrl-C handler sets it). At most MPCL_TRAIN_QUEUE_AHEAD
     * steps are ever enqueued ahead of the device, so a stop takes effect
     * within that many steps, not a report interval. */
    volatile sig_atomic_t *stop;
    /* 0: the class count is the largest training label + 1, and a class
     * below it without a training example is refused (MPCL_ERR_LABEL naming
     * the labels). N > 0: N classes; a label >= N is refused. */
    int num_classes;
    /* A run without loss scaling whose training loss becomes non-finite has
     * diverged: fit stops at that report (summary.diverged) unless this is
     * set. With loss scaling a non-finite step is skipped instead. */
    bool keep_going_on_nan;
    /* Periodic checkpoints to save_path (copied): every save_every_steps
     * global steps and/or every save_every_epochs epochs (0: never). A save
     * point is also a report, so a diverged state is never saved. */
    const char *save_path;
    uint64_t save_every_steps;
    uint32_t save_every_epochs;
    /* mpcl_trainer_load keeps the loss scale these params set
     * (model.loss_scale.initial_scale: a scale the user typed) instead of
     * the checkpoint's; the skipped-step count is restored either way. */
    bool resume_keeps_scale;
    /* Data from memory instead of the IDX files (mpcl_dataset_from_memory):
     * when train_data is set, data_dir and both limits are ignored, and
     * test_data may be NULL, for no evaluation (the test figures stay NaN and
     * mpcl_trainer_evaluate is refused). Both are copied to the device by
     * mpcl_trainer_create; the caller keeps them. */
    const mpcl_dataset *train_data;
    const mpcl_dataset *test_data;
    /* Data parallel (dist.h): NULL trains one model on ctx. With a
     * communicator (borrowed), this process trains one replica on each of
     * replica_ctx[0 .. mpcl_dist_local_replicas) (borrowed; replica_ctx[0]
     * is ctx; NULL means ctx alone, for MPI), `batch` is the global batch,
     * split in replica order (mpcl_dist_slice), and every replica ends each
     * step with the same weights. Replica 0 evaluates and its model is the
     * one checkpoints save; a checkpoint resumes under any world size. */
    mpcl_dist *dist;
    mpcl_context *const *replica_ctx;
    /* The file data already on their way (mpcl_train_data_load_start, made
     * from these same params; borrowed, used once): mpcl_trainer_create
     * waits for that load instead of loading the files itself. NULL: the
     * trainer loads them. Ignored with train_data. */
    struct mpcl_train_data_load *data_load;
    /* NPY files instead of the IDX folder (mpcl_dataset_from_npy; borrowed
     * for mpcl_trainer_create and mpcl_train_data_load_start only): both
     * train_x and train_y, or neither (data_dir then names the IDX folder,
     * and is ignored with them). y holds sparse labels for
     * model.loss sparse categorical cross-entropy, f32 target columns for
     * the dense losses. val_x and val_y (both or neither): the test data
     * instead of t10k; with train_x and neither of them nor a split, there
     * is no test data. validation_split in (0, 1) (0: none): the test data
     * are the last fraction of the training rows instead (Keras'
     * validation_split, mpcl_dataset_split), IDX or NPY, before the limits
     * (train_limit then applies to the rest, test_limit to that fraction);
     * refused with val_x. Ignored with train_data. */
    const char *train_x, *train_y;
    const char *val_x, *val_y;
    double validation_split;
    /* true (the default): every epoch takes its own seeded shuffle of the
     * training rows (mpcl_shuffle_indices, a pure function of seed and
     * epoch). false: every epoch takes the rows in order, 0 .. N-1 (Keras'
     * shuffle=False). */
    bool shuffle;
    /* Language-model training on a token stream (tokens.h) instead of the
     * data above (all of which is then ignored): tokens, borrowed for
     * mpcl_trainer_create, which uploads them. The model's first layer
     * takes token ids (token_pos_embedding), whose vocabulary must hold the
     * stream's, and its input shape (context,) is the window; the trainer
     * sets model.inputs, classes (the embedding's vocabulary), max_batch and
     * seed. The stream's last eval_fraction (0.1) is held out. Every step
     * takes grad_accum (1; 0 is 1) micro-batches of `batch` windows of
     * context + 1 tokens drawn on the device from the training part
     * (mpcl_token_stream_windows, keyed by the seed and step * grad_accum +
     * micro-batch, so that a resumed run draws what it would have), and
     * applies their mean gradient once. The run is `steps` steps; an
     * evaluation of eval_batches (20) batches of held-out windows, the same
     * ones every time, closes every eval_every steps (0: only the last) and
     * the run. The trainer's epochs are these intervals: a report's
     * epoch_end, save_every_epochs and the summary's epochs count them, and
     * epochs itself is ignored. A cosine schedule's decay_steps of 0 decays
     * over steps - warmup_steps. Data parallel: replica r draws its slice
     * of each micro-batch's windows (mpcl_token_stream_windows_at), so the
     * replicas together take the windows one device takes alone. */
    const mpcl_tokens *tokens;
    uint64_t steps;
    uint64_t eval_every;
    double eval_fraction;
    size_t eval_batches;
    uint32_t grad_accum;
} mpcl_train_params;

#define MPCL_TRAIN_QUEUE_AHEAD 2

mpcl_train_params mpcl_train_default_params(void);

/* The training and test files of params (data_dir or the NPY files,
 * validation_split, train_limit, test_limit, num_classes, model.loss),
 * loaded and checked as mpcl_trainer_create would, on a thread of its own
 * from the moment this returns, so that decoding them (most of a warm
 * start-up: zlib's inflate of Fashion-MNIST is about 0.25 s of CPU)
 * overlaps other work such as creating the OpenCL context. Hand it to the
 * trainer in params.data_load; mpcl_trainer_create then returns the load's
 * status and message word for word, at the point where it would have
 * loaded, so the order of its checks is unchanged. Where no thread can be
 * started, the load runs there instead. MPCL_ERR_OUT_OF_MEMORY, or
 * MPCL_ERR_INVALID_ARG for a NULL argument or data params that contradict
 * each other (an NPY file without its pair, a validation_split outside
 * [0, 1) or beside val_x, a dense loss on the IDX files' labels); *out is
 * NULL after a failure. */
typedef struct mpcl_train_data_load mpcl_train_data_load;
mpcl_status mpcl_train_data_load_start(const mpcl_train_params *params, mpcl_train_data_load **out);
/* Waits for the load's thread and frees what it loaded (NULL is fine). */
void mpcl_train_data_load_destroy(mpcl_train_data_load *load);

typedef struct mpcl_trainer mpcl_trainer;

/* Loads the data (train and t10k), uploads it, builds the model. */
mpcl_status mpcl_trainer_create(mpcl_context *ctx, const mpcl_train_params *params,
                                mpcl_trainer **out);
void mpcl_trainer_destroy(mpcl_trainer *tr);
mpcl_model *mpcl_trainer_model(const mpcl_trainer *tr);
/* This process's replica r's model (r < local replicas; NULL past them). */
mpcl_model *mpcl_trainer_replica_model(const mpcl_trainer *tr, size_t r);
/* Why the replicas' common plan is not what each device would take alone
 * ("" when every replica resolved the policy alike). */
const char *mpcl_trainer_plan_note(const mpcl_trainer *tr);

/* Trains until params.epochs are done or *stop is set; resumes from where a
 * loaded checkpoint left off. Steps not yet reported when it returns get one
 * last report. Samples/s counts training time only (no evaluation, no
 * report callbacks). */
mpcl_status mpcl_trainer_fit(mpcl_trainer *tr);

/* Evaluates the whole test set: mean loss and accuracy (MPCL_ERR_INVALID_ARG
 * for a trainer made without test data). */
mpcl_status mpcl_trainer_evaluate(mpcl_trainer *tr, double *loss, double *accuracy);

typedef struct mpcl_train_summary {
    uint64_t steps;
    uint32_t epochs_done;
    bool stopped;                    /* by *stop, before the last epoch ended */
    double test_loss, test_accuracy; /* NaN until an evaluation has run (or a NaN loss) */
    double train_samples_per_s;
    double seconds;
    uint32_t skipped_steps;
    float final_loss_scale;
    size_t peak_device_bytes;
    bool diverged;  /* the training loss became non-finite (no loss scaling) */
    bool evaluated; /* test_loss and test_accuracy come from an evaluation */
    /* Data parallel: replicas in all (1 alone), this process's share of
     * the training samples per second of training time, bytes each replica
     * puts into one gradient all-reduce (0 alone), and the seconds spent in
     * all-reduces in all. */
    size_t world_size;
    double replica_samples_per_s;
    size_t allreduce_bytes_per_step;
    double allreduce_seconds;
    double final_lr; /* the learning rate of the last step (the base lr before any) */
} mpcl_train_summary;

void mpcl_trainer_summary(const mpcl_trainer *tr, mpcl_train_summary *out);

/* What the trainer made of its data and batch, for a banner or a summary. */
typedef struct mpcl_train_data_info {
    size_t train_samples; /* after train_limit; a token run's training tokens */
    size_t test_samples;  /* 0 without test data; a token run's windows per evaluation */
    /* The batch every step takes: params.batch, or train_samples when there
     * are fewer (each epoch is then one batch of all of them, as in Keras,
     * and no buffer is sized for more). Checkpoints save this one, so a
     * resume matches with either flag. */
    size_t batch;
    size_t batch_requested; /* params.batch */
    int classes;            /* the model's outputs: classes, or target columns */
    /* From the files with params.num_classes 0: classes is the largest
     * training label + 1. */
    bool classes_inferred;
    size_t class_examples[256]; /* training samples of each class */
    /* The classes with almost no training example, ascending: fewer than 1%
     * of the mean per class (examples * 100 * classes < train_samples). A
     * stray label makes one such class. */
    size_t rare_count;
    int rare[256];
    /* One sample's shape (rank 1 to 3; its product is the model's inputs):
     * rows x cols for IDX images, shape[1:] of an NPY x. */
    size_t input_shape[3];
    size_t input_rank;
    /* The training data hold f32 target columns (classes of them) rather
     * than sparse labels; class_examples and rare are then empty. */
    bool float_targets;
    /* Where each data set's batches come from (MPCL_DATA, batch.h's
     * mpcl_data_placement): false, held on the device; true, streamed from
     * the host (it does not fit the device, or MPCL_DATA=stream).
     * test_streamed is false without test data. */
    bool train_streamed, test_streamed;
} mpcl_train_data_info;

void mpcl_trainer_data_info(const mpcl_trainer *tr, mpcl_train_data_info *out);

/* Checkpoints (safetensors): f32 master weights as dense_N.kernel [in, out] and
 * dense_N.bias [out], optimizer moments as <name>.m / <name>.v, and in
 * __metadata__ the step, epoch position, loss-scale state, seed, policy,
 * model shape, lr schedule (decay steps resolved) and mpcl version. Save is
 * atomic (an earlier file survives any failure); load makes every check of
 * mpcl_checkpoint_read (checkpoint.h) and validates the file against this
 * trainer's model, and leaves the trainer untouched on failure
 * (MPCL_ERR_FORMAT naming what differs, MPCL_ERR_IO for the file, which must
 * be a regular file). A checkpoint made with another model shape,
 * activation, optimizer kind, lr schedule, seed, batch or training-sample
 * count is refused with the flags that would match; so is an inconsistent
 * position, and so are values no run can produce: a non-finite
 * weight or moment, a negative second moment, a dynamic loss scale outside
 * [min_scale, max_scale] of this run's scaler (the defaults without one),
 * good steps at or past the growth interval, or more applied plus skipped
 * steps than steps (each named with its tensor or key). Save refuses
 * non-finite values the same way (MPCL_ERR_INVALID_ARG) and writes nothing. */
mpcl_status mpcl_trainer_save(mpcl_trainer *tr, const char *path);
mpcl_status mpcl_trainer_load(mpcl_trainer *tr, const char *path);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
