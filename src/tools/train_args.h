/* mpcl-train's command line: strict parsing of every flag into one struct, and
 * its translation into the library's training parameters. Kept apart from the
 * tool's main so that tests can check each rule without running a device. */
#ifndef MPCL_TOOLS_TRAIN_ARGS_H
#define MPCL_TOOLS_TRAIN_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mpcl/mpcl.h"
#include "mpcl/train.h"

/* Largest batch and layer width the tool accepts: far above any sensible MLP,
 * and low enough that batch * width * 4 bytes cannot overflow a size_t. */
#define TRAIN_ARGS_MAX_BATCH ((size_t)1 << 20)
#define TRAIN_ARGS_MAX_WIDTH ((size_t)1 << 20)
/* Optimizer settings on one command line (--opt, --momentum, --nesterov). */
#define TRAIN_ARGS_MAX_OPT 16

typedef struct train_args {
    const char *data_dir; /* NULL: MPCL_DATA_DEFAULT_DIR */
    /* NPY data instead of the IDX folder (NULL: not given), and Keras'
     * validation split (0: none). */
    const char *train_x, *train_y, *val_x, *val_y;
    double validation_split;
    mpcl_loss loss;  /* sparse_categorical_crossentropy */
    uint32_t epochs; /* 10 */
    size_t batch;    /* 128 */
    float lr;        /* 0 until given: then the optimizer's default */
    bool lr_set;
    size_t hidden[MPCL_MAX_HIDDEN]; /* {128} */
    size_t hidden_count;
    mpcl_activation activation; /* relu */
    const char *mlp_flag;       /* --hidden or --activation, when given */
    const char *model_file;     /* --model FILE.json: Keras model JSON */
    mpcl_optim_kind optimizer;  /* adam */
    float clip_norm;            /* 0: no clipping */
    /* --opt NAME=VALUE, --momentum X and --nesterov in command-line order:
     * set by name on the kind's declaration once the kind is known. */
    struct {
        const char *flag;  /* as typed, for messages */
        char name[32];     /* Keras' name */
        const char *value; /* text */
    } opt[TRAIN_ARGS_MAX_OPT];
    size_t opt_count;
    mpcl_optim_params optim;         /* the kind's defaults with every setting applied */
    mpcl_policy policy;              /* auto */
    mpcl_loss_scaling loss_scaling;  /* as the plan says, until --loss-scale is given */
    mpcl_loss_scale_mode loss_scale; /* dynamic */
    float fixed_scale;               /* the N of --loss-scale N */
    float initial_scale;             /* 32768 */
    bool initial_scale_set;
    const char *device; /* NULL: $MPCL_DEVICE, then the default rule */
    uint64_t seed;      /* 42 */
    const char *save, *resume, *metrics;
    int classes;            /* 0: inferred from the training labels */
    bool keep_going_on_nan; /* a diverged float32 run goes on */
    uint64_t save_every;    /* steps between periodic checkpoints (0: none) */
    uint32_t save_every_epochs;
    uint32_t report_every;          /* 50 */
    size_t train_limit, test_limit; /* 0: all */
    bool json, quiet, help, version;
    const char *plot;                       /* --plot PATH: the run's SVG, written at the end */
    const char *devices;                    /* --devices P:D,P:D or all: local data parallel */
    mpcl_grad_compression grad_compression; /* none */
    uint32_t dist_timeout;                  /* seconds; 0: no limit (MPCL_DIST_DEFAULT_TIMEOUT) */
    bool dist_timeout_set;
    /* --lr-schedule, --warmup-steps, --decay-steps (0 until given: the
     * run's rest) and --lr-min-ratio (alpha); the last decay flag given,
     * with its value, for the message when the schedule does not decay. */
    mpcl_lr_schedule schedule;
    const char *decay_flag, *decay_value;
    /* --model gpt: the built-in GPT trained on tokens. Its shape (--layers
     * 4, --heads 4, --embd 128, --context 64, --vocab: 256 for --text,
     * 50257 for --tokens), its data (--text FILE|DIR, the fortunes folder
     * by default, or --tokens FILE.bin) and its run (--steps 3000,
     * --eval-every 250, --eval-batches 20, --grad-accum 1). Where the user
     * set nothing, the run takes GPT defaults: batch 32; AdamW with
     * beta_2 0.95, weight_decay 0.1 on matrices only; a cosine schedule to
     * 0.1 of --lr after 100 warm-up steps (a tenth of a run of fewer than
     * 1000 steps). */
    bool gpt;
    size_t gpt_layers, gpt_heads, gpt_embd, gpt_context, gpt_vocab;
    bool gpt_context_set;
    /* --init-from DIR: the GPT of a GPT-2 folder (its config.json's shape,
     * its weights; GPT-2's BPE for --text where it has vocab.json and
     * merges.txt); --save-hf DIR: the trained model written as one. */
    const char *init_from, *save_hf;
    const char *shape_flag; /* the first of --layers --heads --embd --vocab given */
    const char *text, *tokens_bin;
    uint64_t steps, eval_every;
    size_t eval_batches;
    uint32_t grad_accum;
    bool batch_set, optimizer_set, schedule_set;
    const char *gpt_flag;     /* the first flag of --model gpt's own given */
    const char *not_gpt_flag; /* the first flag that does not apply to --model gpt */
} train_args;

void train_args_defaults(train_args *a);

/* The tool's defaults of an optimizer kind: the library's, except SGD's
 * momentum, 0.9 (Keras' is 0). */
mpcl_optim_params train_args_optim_defaults(mpcl_optim_kind kind);

/* Parses argv[1..argc) ("--flag value" and "--flag=value"). Returns true on
 * success; otherwise false with a message in err that names the flag and the
 * bad value. --help and --version only set their fields: the caller acts on
 * them. Nothing is opened or created. */
bool train_args_parse(train_args *a, int argc, char **argv, char *err, size_t err_size);

/* Checks that a file can be written at path before any training: the folder
 * exists, is a folder and takes a new file (probed with an unnamed file that
 * vanishes on close, or access(2) where the file system has none); the path
 * itself, when it exists, is a regular file (not a folder, FIFO, device,
 * socket or symbolic link, which are never replaced) and, when `append`,
 * writable; its name leaves room for the writer's temporary name
 * (mpcl_output_name_max). False with a message naming the flag and what the
 * path is otherwise. Nothing is created. */
bool train_args_check_output_path(const char *flag, const char *path, bool append, char *err,
                                  size_t err_size);

/* Checks that path is an existing regular file that can be read, without
 * opening it (a FIFO would block): the message says which it is otherwise. */
bool train_args_check_input_path(const char *flag, const char *path, char *err, size_t err_size);

/* Refuses aliasing among --save, --resume and --metrics (the same file by
 * st_dev/st_ino when it exists, the same resolved path otherwise): --metrics
 * may be neither checkpoint; --save may be --resume (continuing in place). */
bool train_args_check_aliases(const train_args *a, char *err, size_t err_size);

/* The library's parameters for these arguments. */
mpcl_train_params train_args_to_params(const train_args *a);

#endif
