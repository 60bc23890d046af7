/* mpcl-train: trains an MLP classifier on an IDX data set (Fashion-MNIST by
 * default) with a precision policy, reports progress, and saves and resumes
 * checkpoints. Thin: flags in train_args.c, everything else in the library. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jsonw.h"
#include "mpcl/mpcl.h"
#include "mpcl/train.h"
#include "train_args.h"
#include "train_data.h"
#include "train_dist.h"
#include "train_gpt.h"

enum { EXIT_OK = 0, EXIT_ERROR = 1, EXIT_NO_DEVICE = 2, EXIT_DIVERGED = 3 };

static const char usage[] =
    "usage: mpcl-train [options]\n"
    "\n"
    "Trains a model -- a multilayer perceptron from --hidden and --activation, or a\n"
    "Sequential model of the layers listed under --model -- on an IDX data set\n"
    "(Fashion-MNIST by default) or on NPY arrays, on one OpenCL device, in the\n"
    "precision the policy resolves to there, and reports progress, test accuracy and\n"
    "throughput.\n"
    "\n"
    "Data and model:\n"
    "  --data DIR              folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]\n"
    "                          (default " MPCL_DATA_DEFAULT_DIR
    ")\n"
    "  --train-x F --train-y F NPY files instead of --data: x (samples, features...) of\n"
    "                          u1 (scaled by 1/255), f2, f4, f8 or integers; y integer\n"
    "                          class labels, or float targets for a dense --loss\n"
    "  --val-x F --val-y F     NPY validation data, evaluated at each epoch's end (with\n"
    "                          --train-x and neither these nor a split: no evaluation)\n"
    "  --validation-split F    validate on the last fraction F of the training rows,\n"
    "                          taken before shuffling (Keras' validation_split)\n"
    "  --loss L                sparse_categorical_crossentropy (default; integer labels),\n"
    "                          binary_crossentropy or mse (float targets, NPY data only)\n"
    "  --train-limit N         use only the first N training samples (default 0: all)\n"
    "  --test-limit N          use only the first N test samples (default 0: all)\n"
    "  --classes N             class count; labels >= N are refused (default: the largest\n"
    "                          training label + 1, refused if a class has no example)\n"
    "  --hidden W[,W...]       hidden layer widths, at most 7 layers (default 128)\n"
    "  --activation A          the hidden layers' activation: relu (default), gelu, ...\n"
    "                          (an unknown name lists them all)\n"
    "  --model FILE.json       the model as Keras' model.to_json() writes it (Sequential:\n"
    "                          Dense, Conv2D, MaxPooling2D, Flatten, Dropout,\n"
    "                          BatchNormalization, LayerNormalization), instead of\n"
    "                          --hidden/--activation;\n"
    "                          a softmax last layer (sigmoid with binary_crossentropy)\n"
    "                          is the loss's: trained on logits, kept in --save\n";
/* In parts: C11 compilers need take no string literal over 4095 bytes. */
static const char usage_gpt[] =
    "A GPT on text (--model gpt; GPT-2's pre-norm blocks, its LM head tied to the\n"
    "token embedding, next-token cross-entropy; the data flags above do not apply):\n"
    "  --model gpt             the built-in GPT instead of an MLP or a Keras file\n"
    "  --layers N --heads N    blocks (default 4) and attention heads (default 4,\n"
    "                          dividing --embd)\n"
    "  --embd N --context N    channels (default 128) and window in tokens (default 64)\n"
    "  --vocab N               vocabulary (default 256 for --text, 50257 for --tokens)\n"
    "  --text FILE|DIR         byte tokens from a text file or a folder's files\n"
    "                          (default " MPCL_TOKENS_DEFAULT_DIR
    ")\n"
    "  --tokens FILE.bin       llm.c's token file (uint16 tokens) instead of --text\n"
    "  --steps N               training steps (default 3000)\n"
    "  --eval-every N          steps between evaluations on the held-out tenth (default\n"
    "                          250; the run's end is evaluated too)\n"
    "  --eval-batches N        held-out batches per evaluation (default 20)\n"
    "  --grad-accum N          micro-batches of --batch windows per step (default 1)\n"
    "  --init-from DIR         start from a GPT-2 folder (config.json, model.safetensors;\n"
    "                          its vocab.json and merges.txt, when there, tokenize --text)\n"
    "  --save-hf DIR           at the end, write the model as a GPT-2 folder\n"
    "  Defaults where no flag says otherwise: --batch 32, --optimizer adamw with\n"
    "  beta_2=0.95 weight_decay=0.1 decay_vectors=false, --lr-schedule cosine\n"
    "  --lr-min-ratio 0.1 after 100 warm-up steps (a tenth of runs under 1000).\n"
    "\n";
static const char usage_rest[] =
    "Training:\n"
    "  --epochs N              epochs to train, in total when resuming (default 10)\n"
    "  --batch N               batch size (default 128; at most the training samples)\n"
    "  --optimizer O           one of the optimizers listed below (default adam)\n"
    "  --lr X                  learning rate (default: the optimizer's learning_rate)\n"
    "  --opt NAME=VALUE        one of the optimizer's hyperparameters below (repeatable)\n"
    "  --lr-schedule S         constant or cosine (Keras' CosineDecay; default constant);\n"
    "                          --lr is its peak\n"
    "  --warmup-steps N        linear warm-up from 0 to --lr over the first N steps\n"
    "                          (default 0)\n"
    "  --decay-steps N         cosine: steps of the decay after the warm-up (default: the\n"
    "                          rest of the run, epochs * steps per epoch - warm-up)\n"
    "  --lr-min-ratio X        cosine: the final lr as a fraction of --lr, in [0, 1]\n"
    "                          (Keras' alpha; default 0)\n"
    "  --momentum X            --opt momentum=X (sgd: default 0.9, over Keras' 0)\n"
    "  --nesterov              --opt nesterov=true\n"
    "  --clip-norm X           clip the global gradient L2 norm to X (default: no clipping)\n"
    "  --seed N                initial weights and shuffling (default 42)\n"
    "  --keep-going-on-nan     go on when the loss of a run without loss scaling turns\n"
    "                          non-finite (default: stop, exit 3)\n"
    "Precision:\n"
    "  --precision P           auto, float32, mixed_float16 or mixed_bfloat16 (default auto)\n"
    "  --loss-scale S          dynamic, off, or a number for a fixed scale (default: dynamic\n"
    "                          where the plan scales, i.e. mixed_float16; off otherwise)\n"
    "  --initial-loss-scale X  first dynamic scale (default 32768)\n"
    "  --device SEL            P:D id, cpu, gpu, accelerator or part of a name\n"
    "                          (default $MPCL_DEVICE, else the first GPU, accelerator, CPU)\n"
    "Data parallel (the batch is the global batch, split across replicas):\n"
    "  --devices LIST|all      one replica per device in this process: P:D,P:D,... or all\n"
    "                          devices of --device's platform; under mpirun one replica\n"
    "                          per rank instead, on the local rank's device\n"
    "  --grad-compression C    none, fp16 or bf16: gradients summed as 16-bit values\n"
    "                          (needs two replicas or more)\n"
    "  --dist-timeout S        under mpirun: a rank that waits S seconds in one collective\n"
    "                          for the others ends the job (default 300; 0: no limit)\n"
    "Files and output:\n"
    "  --save PATH             write a safetensors checkpoint at the end or on Ctrl-C\n"
    "  --save-every N|Ne       also save every N steps (or N epochs) during the run\n"
    "  --resume PATH           continue from a checkpoint (same model flags)\n"
    "  --metrics PATH          CSV: step,epoch,loss,accuracy,loss_scale,skipped,samples_per_s,\n"
    "                          grad_norm (empty without --clip-norm),lr (the last step's)\n"
    "  --report-every N        steps between progress reports (default 50)\n"
    "  --plot PATH             SVG of the run: loss, accuracy, loss scale, samples/s\n"
    "  --json                  JSON summary on stdout; the human text goes to stderr\n"
    "  --quiet                 no human text, only errors (and --json)\n"
    "  --help, --version\n"
    "\n"
    "Values go as '--flag value' or '--flag=value'. Ctrl-C (or SIGTERM) stops within\n"
    "two steps, saves to --save, and exits 130 (143 for SIGTERM).\n"
    "Exit status: 0 done, 1 error (bad flag, data, checkpoint, file), 2 no OpenCL\n"
    "platform or device, 3 diverged (non-finite loss; nothing saved), 130/143 stopped\n"
    "by SIGINT/SIGTERM (checkpoint written).\n";

static volatile sig_atomic_t stop_flag = 0;
static volatile sig_atomic_t stop_signal = 0;
static volatile sig_atomic_t repeat_kills = 1;

static void on_signal(int sig) {
    static const char msg[] = "\nmpcl-train: stopping (again to abort)\n";
    static const char mpi_msg[] = "\nmpcl-train: stopping\n";
    if (stop_signal) return; /* under MPI: the launcher repeating the same stop */
    stop_signal = sig;
    stop_flag = 1;
    if (!repeat_kills) {
        /* A signalled mpirun stops reading what the ranks print: a rank whose
         * pipe fills would wait in write() past the launcher's SIGKILL and
         * never save. From here on output is best effort: a write that
         * would block fails instead (fcntl is async-signal-safe). */
        int out = fcntl(STDOUT_FILENO, F_GETFL), err = fcntl(STDERR_FILENO, F_GETFL);
        if (out != -1) (void)fcntl(STDOUT_FILENO, F_SETFL, out | O_NONBLOCK);
        if (err != -1) (void)fcntl(STDERR_FILENO, F_SETFL, err | O_NONBLOCK);
    }
    ssize_t r = repeat_kills ? write(STDERR_FILENO, msg, sizeof msg - 1)
                             : write(STDERR_FILENO, mpi_msg, sizeof mpi_msg - 1);
    (void)r;
}

/* Alone, SA_RESETHAND: a second Ctrl-C kills at once. The checkpoint write is
 * atomic, so even that cannot leave a half-written file behind. Under an MPI
 * launcher every signal after the first is taken as the same stop: a
 * launcher may pass a signal on and follow it with its own SIGTERM (Open MPI
 * 4's mpirun, signalled, sends the ranks SIGCONT, then SIGTERM, then SIGKILL,
 * odls_base_sigkill_timeout seconds apart), and a rank killed by a repeat
 * would lose the checkpoint of the whole job. */
static void install_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    repeat_kills = !mpcl_dist_mpi_launched();
    sa.sa_flags = repeat_kills ? SA_RESETHAND : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

typedef struct ui {
    FILE *human;    /* NULL with --quiet */
    bool live;      /* a terminal: one line rewritten with \r */
    bool line_open; /* a live line is on screen without its newline */
    FILE *metrics;  /* NULL without --metrics */
    bool metrics_failed;
    char metrics_error[256];
    uint32_t epochs;
    size_t batch;
    mpcl_run_record *plot; /* NULL without --plot */
    bool plot_failed;
    mpcl_loss loss; /* its metric is what "acc" reports */
    /* --model gpt: lines by step, rates in tokens (context per sample). */
    bool gpt;
    uint64_t steps;
    size_t context;
} ui;

/* The metric's short label and value as printed: accuracies in percent. */
static const char *metric_label(mpcl_loss loss) {
    switch (loss) {
    case MPCL_LOSS_BINARY_CROSSENTROPY: return "bin acc";
    case MPCL_LOSS_MSE: return "mae";
    default: return "acc";
    }
}

/* "acc 84.58%" in the epoch lines, "accuracy 84.58%" (Keras' name) at the
 * end. */
static void format_metric(char *buf, size_t size, mpcl_loss loss, double v, bool keras_name) {
    const char *name = keras_name ? mpcl_loss_metric_name(loss) : metric_label(loss);
    if (loss == MPCL_LOSS_MSE)
        snprintf(buf, size, "%s %.4f", name, v);
    else
        snprintf(buf, size, "%s %.2f%%", name, 100 * v);
}

static void format_eta(char *buf, size_t size, double seconds) {
    if (!isfinite(seconds) || seconds < 0) {
        snprintf(buf, size, "?");
        return;
    }
    unsigned long s = (unsigned long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, size, "%lu:%02lu:%02lu", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, size, "%lu:%02lu", s / 60, s % 60);
}

/* Whether this run scales the loss: the flag when given, else the plan. */
static bool scaling_on(const train_args *a, const mpcl_plan *plan) {
    return a->loss_scaling == MPCL_LOSS_SCALING_ON ||
           (a->loss_scaling == MPCL_LOSS_SCALING_PLAN && plan->loss_scaling);
}

/* --model gpt's lines: by step, with the evaluation at each interval's end. */
static void print_gpt_report(ui *u, const mpcl_train_report *r) {
    double tokens_per_s = r->samples_per_s * (double)u->context;
    if (r->epoch_end) {
        if (u->line_open) fputs("\r", u->human);
        fprintf(u->human,
                "step %llu/%llu  loss %.4f  eval loss %.4f  lr %.3g  scale %g  skipped %u  "
                "%.0f tokens/s  %.1f s%s\n",
                (unsigned long long)r->step, (unsigned long long)u->steps, r->loss, r->test_loss,
                r->lr, (double)r->loss_scale, r->skipped, tokens_per_s, r->elapsed_s,
                u->live ? "          " : "");
        u->line_open = false;
    } else if (u->live) {
        char eta[32];
        format_eta(
            eta, sizeof eta,
            (double)(u->steps - r->step) * (double)u->batch * (double)u->context / tokens_per_s);
        fprintf(u->human, "\rstep %llu/%llu  loss %.4f  lr %.3g  %.0f tokens/s  ETA %s   ",
                (unsigned long long)r->step, (unsigned long long)u->steps, r->loss, r->lr,
                tokens_per_s, eta);
        u->line_open = true;
    }
    fflush(u->human);
}

static void on_report(void *user, const mpcl_train_report *r) {
    ui *u = user;
    if (u->plot && mpcl_run_record_add(u->plot, r) != MPCL_OK) u->plot_failed = true;
    if (u->metrics && !u->metrics_failed) {
        fprintf(u->metrics, "%llu,%u,%.6g,%.6g,%.9g,%u,%.6g,", (unsigned long long)r->step,
                r->epoch, r->loss, r->accuracy, (double)r->loss_scale, r->skipped,
                r->samples_per_s);
        /* Empty without --clip-norm: the norm is computed only to clip. */
        if (isfinite(r->grad_norm)) fprintf(u->metrics, "%.6g", r->grad_norm);
        fprintf(u->metrics, ",%.9g\n", r->lr);
        if (fflush(u->metrics) != 0 || ferror(u->metrics)) {
            /* A full disk must not go unnoticed: stop like Ctrl-C would. */
            snprintf(u->metrics_error, sizeof u->metrics_error, "--metrics: write failed: %s",
                     strerror(errno));
            u->metrics_failed = true;
            stop_flag = 1;
        }
    }
    if (!u->human) return;
    if (u->gpt) {
        print_gpt_report(u, r);
        return;
    }
    if (r->epoch_end) {
        if (u->line_open) fputs("\r", u->human);
        char train[32], test[32];
        format_metric(train, sizeof train, u->loss, r->accuracy, false);
        format_metric(test, sizeof test, u->loss, r->test_accuracy, false);
        fprintf(u->human,
                "epoch %u/%u  loss %.4f  %s  test loss %.4f  test %s  "
                "scale %g  skipped %u  %.0f samples/s  %.1f s%s\n",
                r->epoch + 1, u->epochs, r->loss, train, r->test_loss, test, (double)r->loss_scale,
                r->skipped, r->samples_per_s, r->elapsed_s, u->live ? "          " : "");
        u->line_open = false;
        fflush(u->human);
    } else if (u->live) {
        uint64_t left = (uint64_t)(u->epochs - r->epoch - 1) * r->epoch_steps +
                        (r->epoch_steps - r->epoch_step);
        char eta[32];
        format_eta(eta, sizeof eta, (double)left * (double)u->batch / r->samples_per_s);
        char train[32];
        format_metric(train, sizeof train, u->loss, r->accuracy, false);
        fprintf(u->human,
                "\repoch %u/%u  step %llu/%llu  loss %.4f  %s  scale %g  "
                "%.0f samples/s  ETA %s   ",
                r->epoch + 1, u->epochs, (unsigned long long)r->epoch_step,
                (unsigned long long)r->epoch_steps, r->loss, train, (double)r->loss_scale,
                r->samples_per_s, eta);
        u->line_open = true;
        fflush(u->human);
    }
}

/* Opens path for appending without ever blocking on a FIFO or a device
 * (checked regular again here: the check before training was by name). */
static FILE *open_regular(const char *path, int flags, const char *mode, char *err, size_t size) {
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0666);
    struct stat sb;
    if (fd >= 0 && (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))) {
        close(fd);
        snprintf(err, size, "--metrics: '%s' is not a regular file", path);
        return NULL;
    }
    if (fd >= 0) (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fd >= 0 ? fdopen(fd, mode) : NULL;
    if (!f) {
        snprintf(err, size, "--metrics: cannot open '%s': %s", path, strerror(errno));
        if (fd >= 0) close(fd);
    }
    return f;
}

/* The leading step number of a CSV row; false for the header or a row cut
 * short by a crash (no newline). */
static bool row_step(const char *line, unsigned long long *step) {
    size_t n = strlen(line);
    const char *comma = strchr(line, ',');
    char field[32];
    size_t len = comma ? (size_t)(comma - line) : sizeof field;
    if (n == 0 || line[n - 1] != '\n' || len >= sizeof field) return false;
    memcpy(field, line, len);
    field[len] = '\0';
    uint64_t v;
    if (mpcl_parse_uint(field, UINT64_MAX, &v) != MPCL_NUMBER_OK) return false;
    *step = v;
    return true;
}

/* A resumed run's CSV: the rows past the checkpoint's step, written by a run
 * that went on and then crashed, are cut off, so no step appears twice. They
 * can only be the file's tail (every run trims before it appends), so one
 * ftruncate does it: a single step that a crash cannot leave half done, with
 * no temporary file. A row cut short by a crash (no newline) goes too. */
static bool trim_metrics(FILE *f, const char *path, unsigned long long keep, char *err,
                         size_t size) {
    char line[4096];
    bool header = true;
    long cut = -1;
    unsigned long long step;
    while (cut < 0) {
        long at = ftell(f);
        if (!fgets(line, sizeof line, f)) break;
        if (!header && !(row_step(line, &step) && step <= keep)) cut = at;
        header = false;
    }
    if (ferror(f) || (cut >= 0 && (fflush(f) != 0 || ftruncate(fileno(f), (off_t)cut) != 0 ||
                                   fsync(fileno(f)) != 0))) {
        snprintf(err, size, "--metrics: rewriting '%s': %s", path, strerror(errno));
        return false;
    }
    return true;
}

/* A new CSV with its header; or, resuming, the existing one continued. */
static FILE *open_metrics(const char *path, mpcl_loss loss, bool resume, unsigned long long step,
                          char *err, size_t size) {
    struct stat sb;
    bool append = resume && stat(path, &sb) == 0 && sb.st_size > 0;
    FILE *f = open_regular(path, append ? O_RDWR | O_APPEND : O_WRONLY | O_CREAT | O_TRUNC,
                           append ? "a+" : "w", err, size);
    if (!f) return NULL;
    if (append && (!trim_metrics(f, path, step, err, size) || fseek(f, 0, SEEK_END) != 0)) {
        fclose(f);
        return NULL;
    }
    /* The second column is the loss's metric, by its Keras name. */
    if (!append)
        fprintf(f, "step,epoch,loss,%s,loss_scale,skipped,samples_per_s,grad_norm,lr\n",
                mpcl_loss_metric_name(loss));
    fflush(f);
    return f;
}

/* Seconds on the monotonic clock, for the start-up figure. */
static double monotonic_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The NPY files given, each a readable regular file. */
static bool check_data_paths(const train_args *a, char *err, size_t size) {
    const char *flags[4] = {"--train-x", "--train-y", "--val-x", "--val-y"};
    const char *paths[4] = {a->train_x, a->train_y, a->val_x, a->val_y};
    for (int i = 0; i < 4; i++)
        if (paths[i] && !train_args_check_input_path(flags[i], paths[i], err, size)) return false;
    return true;
}

/* Where the validation data come from, in words. */
static const char *validation_source(const train_args *a) {
    return a->validation_split > 0 ? "split" : a->val_x ? "files" : a->train_x ? "none" : "t10k";
}

/* "data": the files the run read, and where the batches came from. */
static void write_data_json(jsonw *w, const train_args *a, const mpcl_train_data_info *di) {
    jsonw_key(w, "data");
    jsonw_object_begin(w);
    if (a->train_x) {
        jsonw_kv_string(w, "train_x", a->train_x);
        jsonw_kv_string(w, "train_y", a->train_y);
    } else {
        jsonw_kv_string(w, "dir", a->data_dir ? a->data_dir : MPCL_DATA_DEFAULT_DIR);
    }
    if (a->val_x) {
        jsonw_kv_string(w, "val_x", a->val_x);
        jsonw_kv_string(w, "val_y", a->val_y);
    }
    jsonw_kv_string(w, "validation", validation_source(a));
    if (a->validation_split > 0) jsonw_kv_number(w, "validation_split", a->validation_split);
    jsonw_kv_string(w, "loss", mpcl_loss_name(a->loss));
    train_data_placement_json(w, di);
    jsonw_object_end(w);
}

/* The lr schedule as the run resolved it, and the last step's lr. */
static void write_schedule_json(jsonw *w, const mpcl_lr_schedule *sched,
                                const mpcl_train_summary *s) {
    jsonw_key(w, "lr_schedule");
    jsonw_object_begin(w);
    jsonw_kv_string(w, "kind", mpcl_lr_schedule_kind_name(sched->kind));
    jsonw_kv_uint(w, "warmup_steps", sched->warmup_steps);
    if (mpcl_lr_schedule_kind_decays(sched->kind)) {
        jsonw_kv_uint(w, "decay_steps", sched->decay_steps);
        jsonw_kv_number(w, "alpha", sched->alpha);
    }
    jsonw_object_end(w);
    jsonw_kv_number(w, "final_lr", s->final_lr);
}

static void write_json(const train_args *a, const mpcl_device_info *dev, const mpcl_plan *plan,
                       const mpcl_lr_schedule *sched, const mpcl_train_data_info *di,
                       const mpcl_train_summary *s, const train_dist *td, const double *rates,
                       double startup_s, const train_gpt *gpt) {
    jsonw w;
    jsonw_init(&w, stdout);
    jsonw_object_begin(&w);
    jsonw_kv_string(&w, "mpcl_version", mpcl_version());
    jsonw_kv_string(&w, "device", dev->name);
    jsonw_kv_string(&w, "device_id", dev->id);
    jsonw_kv_string(&w, "platform", dev->platform);
    jsonw_kv_string(&w, "policy", mpcl_policy_name(plan->policy));
    jsonw_key(&w, "plan");
    jsonw_object_begin(&w);
    jsonw_kv_string(&w, "resolved", mpcl_policy_name(plan->resolved));
    jsonw_kv_string(&w, "storage", mpcl_dtype_name(plan->storage));
    jsonw_kv_string(&w, "gemm", mpcl_gemm_path_name(plan->gemm));
    jsonw_kv_bool(&w, "loss_scaling", scaling_on(a, plan));
    jsonw_kv_string(&w, "reason", plan->reason);
    jsonw_object_end(&w);
    if (gpt)
        train_gpt_json(&w, a, gpt, s);
    else
        write_data_json(&w, a, di);
    train_data_json(&w, di, !gpt);
    jsonw_kv_uint(&w, "epochs", s->epochs_done);
    jsonw_kv_uint(&w, "steps", s->steps);
    jsonw_kv_bool(&w, "stopped", s->stopped);
    jsonw_kv_bool(&w, "diverged", s->diverged);
    /* null means "not evaluated"; an evaluation that gave a non-finite
     * number says so as a string. */
    char metric[48];
    snprintf(metric, sizeof metric, "test_%s", mpcl_loss_metric_name(a->loss));
    const char *names[2] = {metric, "test_loss"};
    double values[2] = {s->test_accuracy, s->test_loss};
    for (int i = 0; i < 2; i++) {
        if (s->evaluated && !isfinite(values[i]))
            jsonw_kv_string(&w, names[i],
                            isnan(values[i]) ? "nan"
                            : values[i] > 0  ? "inf"
                                             : "-inf");
        else
            jsonw_kv_number(&w, names[i], values[i]);
    }
    jsonw_kv_number(&w, "train_samples_per_s", s->train_samples_per_s);
    jsonw_kv_uint(&w, "skipped_steps", s->skipped_steps);
    jsonw_kv_number(&w, "final_loss_scale", (double)s->final_loss_scale);
    write_schedule_json(&w, sched, s);
    jsonw_kv_uint(&w, "peak_device_bytes", s->peak_device_bytes);
    jsonw_kv_number(&w, "seconds", s->seconds);
    jsonw_kv_number(&w, "startup_seconds", startup_s);
    jsonw_key(&w, "checkpoint");
    if (a->save)
        jsonw_string(&w, a->save);
    else
        jsonw_null(&w);
    jsonw_key(&w, "resumed_from");
    if (a->resume)
        jsonw_string(&w, a->resume);
    else
        jsonw_null(&w);
    train_dist_json(&w, td, s, rates);
    jsonw_object_end(&w);
    fputc('\n', stdout);
}

static void print_start(FILE *h, const train_args *a, const mpcl_device_info *dev) {
    fprintf(h, "mpcl-train %s\n", mpcl_version());
    fprintf(h, "device    %s: %s (%s)\n", dev->id, dev->name, dev->platform);
    if (a->gpt) {
        /* The corpus, once the trainer has split it (train_gpt_print_data). */
    } else if (a->train_x)
        fprintf(h, "data      train %s, %s; loss %s\n", a->train_x, a->train_y,
                mpcl_loss_name(a->loss));
    else
        fprintf(h, "data      %s\n", a->data_dir ? a->data_dir : MPCL_DATA_DEFAULT_DIR);
    if (a->val_x) fprintf(h, "          validation %s, %s\n", a->val_x, a->val_y);
    if (a->validation_split > 0)
        fprintf(h, "          validation: the last %g of the training rows\n", a->validation_split);
    fflush(h);
}

/* The model's plan: `auto` may be measured as the model is built. */
static void print_plan(FILE *h, const train_args *a, const mpcl_plan *plan) {
    fprintf(h, "precision %s -> %s: storage %s, GEMM %s, loss scaling %s\n",
            mpcl_policy_name(plan->policy), mpcl_policy_name(plan->resolved),
            mpcl_dtype_name(plan->storage), mpcl_gemm_path_name(plan->gemm),
            !scaling_on(a, plan)                     ? "off"
            : a->loss_scale == MPCL_LOSS_SCALE_FIXED ? "fixed"
                                                     : "dynamic");
    fprintf(h, "          %s\n", plan->reason);
}

/* "(784,)", "(28, 28, 1)": Python's tuples, as Keras prints shapes. */
static void print_shape(FILE *h, size_t rank, const size_t *shape) {
    fprintf(h, "(");
    for (size_t d = 0; d < rank; d++) fprintf(h, "%s%zu", d ? ", " : "", shape[d]);
    fprintf(h, "%s)", rank == 1 ? "," : "");
}

/* A layer list: each layer's output shape, and the parameter count. */
static void print_layers(FILE *h, const mpcl_model_params *m) {
    mpcl_layer_summary s[MPCL_MAX_LAYERS];
    size_t n = 0, params = 0;
    if (mpcl_model_summary(NULL, m, s, &n) != MPCL_OK) n = 0;
    size_t shape[MPCL_MAX_INPUT_RANK], rank;
    mpcl_model_params_input_shape(m, shape, &rank);
    fprintf(h, "model     ");
    print_shape(h, rank, shape);
    for (size_t l = 0; l < n; l++) {
        fprintf(h, " -> %s ", s[l].name);
        print_shape(h, s[l].out_rank, s[l].out_shape);
        params += s[l].params;
    }
    fprintf(h, "; %zu parameters", params);
}

/* After the data are loaded: the real input and class counts. */
static void print_model(FILE *h, const train_args *a, const mpcl_model_params *m) {
    if (m->layer_count == 0) {
        fprintf(h, "model     %zu", m->inputs);
        for (size_t i = 0; i < m->hidden_count; i++) fprintf(h, "-%zu", m->hidden[i]);
        fprintf(h, "-%zu %s", m->classes, mpcl_activation_name(m->activation));
    } else {
        print_layers(h, m);
    }
    if (a->gpt)
        fprintf(h, "; %s lr %g; batch %zu, %llu steps, seed %llu\n",
                mpcl_optim_kind_name(m->optim.kind), (double)m->optim.lr, m->max_batch,
                (unsigned long long)a->steps, (unsigned long long)a->seed);
    else
        fprintf(h, "; %s, %s lr %g; batch %zu, %u epochs, seed %llu\n", mpcl_loss_name(m->loss),
                mpcl_optim_kind_name(m->optim.kind), (double)m->optim.lr, m->max_batch, a->epochs,
                (unsigned long long)a->seed);
    const mpcl_lr_schedule *s = &m->lr_schedule;
    if (s->warmup_steps || s->kind != MPCL_LR_CONSTANT) {
        fprintf(h, "lr        %s, warm-up %llu steps", mpcl_lr_schedule_kind_name(s->kind),
                (unsigned long long)s->warmup_steps);
        if (mpcl_lr_schedule_kind_decays(s->kind))
            fprintf(h, ", decay %llu steps to %g x lr", (unsigned long long)s->decay_steps,
                    s->alpha);
        fputc('\n', h);
    }
    if (a->resume) fprintf(h, "resume    %s\n", a->resume);
    fflush(h);
}

static void print_end(FILE *h, const train_args *a, const mpcl_plan *plan, size_t context,
                      const mpcl_train_summary *s) {
    if (s->stopped && a->gpt)
        fprintf(h, "stopped   after step %llu of %llu\n", (unsigned long long)s->steps,
                (unsigned long long)a->steps);
    else if (s->stopped)
        fprintf(h, "stopped   after step %llu (epoch %u of %u done)\n",
                (unsigned long long)s->steps, s->epochs_done, a->epochs);
    if (a->gpt) {
        if (isfinite(s->test_loss))
            fprintf(h, "eval      loss %.4f nats per token\n", s->test_loss);
        else
            fprintf(h, "eval      not evaluated\n");
        fprintf(h, "time      %.1f s, %.0f tokens/s, %llu steps\n", s->seconds,
                s->train_samples_per_s * (double)context, (unsigned long long)s->steps);
    } else {
        char metric[32];
        format_metric(metric, sizeof metric, a->loss, s->test_accuracy, true);
        if (isfinite(s->test_accuracy))
            fprintf(h, "test      %s, loss %.4f\n", metric, s->test_loss);
        else
            fprintf(h, "test      not evaluated\n");
        fprintf(h, "time      %.1f s, %.0f samples/s, %llu steps\n", s->seconds,
                s->train_samples_per_s, (unsigned long long)s->steps);
    }
    if (scaling_on(a, plan))
        fprintf(h, "scaling   %u skipped steps, final loss scale %g\n", s->skipped_steps,
                (double)s->final_loss_scale);
    else
        fprintf(h, "scaling   off (%u skipped steps)\n", s->skipped_steps);
    fprintf(h, "memory    peak %.1f MiB on the device\n",
            (double)s->peak_device_bytes / (1024.0 * 1024.0));
    fflush(h);
}

/* --help's list of optimizers and their hyperparameters with defaults, from
 * the library's declaration. */
static void print_optimizers(FILE *f) {
    fputs("Optimizers (--optimizer O; hyperparameters for --opt, with defaults):\n", f);
    for (size_t k = 0; k < mpcl_optim_kind_count(); k++) {
        mpcl_optim_kind kind = (mpcl_optim_kind)k;
        mpcl_optim_params p = train_args_optim_defaults(kind);
        fprintf(f, "  %-22s", mpcl_optim_kind_name(kind));
        for (size_t i = 0; i < mpcl_optim_param_count(kind); i++) {
            const char *name = mpcl_optim_param_name(kind, i);
            char value[32] = "?";
            mpcl_optim_params_get(NULL, &p, name, value, sizeof value);
            fprintf(f, " %s=%s", name, value);
        }
        fputc('\n', f);
    }
}

int main(int argc, char **argv) {
    const double t_main = monotonic_s();
    train_args a;
    char err[1024];
    if (!train_args_parse(&a, argc, argv, err, sizeof err)) {
        fprintf(stderr, "mpcl-train: %s\n(see mpcl-train --help)\n", err);
        return EXIT_ERROR;
    }
    if (a.help) {
        fputs(usage, stdout);
        fputs(usage_gpt, stdout);
        fputs(usage_rest, stdout);
        print_optimizers(stdout);
        return EXIT_OK;
    }
    if (a.version) {
        printf("mpcl-train %s\n", mpcl_version());
        return EXIT_OK;
    }
    /* Everything the user can get wrong about files is checked before the
     * minutes of training, not after them. */
    if ((a.save && !train_args_check_output_path("--save", a.save, false, err, sizeof err)) ||
        (a.metrics && !train_args_check_output_path("--metrics", a.metrics, a.resume != NULL, err,
                                                    sizeof err)) ||
        (a.plot && !train_args_check_output_path("--plot", a.plot, false, err, sizeof err)) ||
        (a.resume && !train_args_check_input_path("--resume", a.resume, err, sizeof err)) ||
        !check_data_paths(&a, err, sizeof err) || !train_args_check_aliases(&a, err, sizeof err)) {
        fprintf(stderr, "mpcl-train: %s\n", err);
        return EXIT_ERROR;
    }
    /* From here a signal is honoured: during start-up it ends the run once
     * start-up is over, before any training or writing. */
    install_handlers();

    /* The files are decoded on a thread of their own while the devices are
     * opened; the trainer reports the load's outcome where it did before.
     * Should the start fail, the trainer loads them itself. */
    mpcl_train_params p = train_args_to_params(&a);
    if (a.model_file && mpcl_model_file_read(a.model_file, &p.model) != MPCL_OK) {
        fprintf(stderr, "mpcl-train: %s\n", mpcl_errmsg());
        return EXIT_ERROR;
    }
    train_gpt gpt = {0};
    const mpcl_tokens *tokens = NULL;
    if (a.gpt && !train_gpt_setup(&a, &gpt, &p, err, sizeof err)) {
        fprintf(stderr, "mpcl-train: %s\n", err);
        return EXIT_ERROR;
    }
    tokens = gpt.tokens;
    mpcl_train_data_load *load = NULL;
    if (a.gpt || mpcl_train_data_load_start(&p, &load) != MPCL_OK) load = NULL;

    /* The devices (several with --devices; this rank's under mpirun). */
    train_dist td;
    mpcl_status st = train_dist_open(&td, &a);
    if (st != MPCL_OK) {
        mpcl_train_data_load_destroy(load);
        train_gpt_free(&gpt);
        fprintf(stderr, "mpcl-train: %s\n", td.err);
        /* An unknown selector is the user's mistake (1, as mpcl-probe); no
         * OpenCL at all is the machine's (2). */
        const char *env = getenv("MPCL_DEVICE");
        bool selected = a.device || a.devices || (env && *env);
        return st == MPCL_ERR_NO_PLATFORM || (st == MPCL_ERR_NO_DEVICE && !selected)
                   ? EXIT_NO_DEVICE
                   : EXIT_ERROR;
    }
    mpcl_context *ctx = td.ctx[0];
    /* Under mpirun, rank 0 alone prints and writes files. */
    bool leader = train_dist_leader(&td);
    FILE *human = a.quiet || !leader ? NULL : a.json ? stderr : stdout;
    if (!leader) a.metrics = a.plot = NULL; /* only rank 0 writes files */
    p.data_load = load;
    p.dist = td.dist;
    p.replica_ctx = td.ctx;
    ui u = {.human = human,
            .live = human && isatty(fileno(human)),
            .epochs = a.epochs,
            .batch = a.batch,
            .loss = a.loss,
            .gpt = a.gpt,
            .steps = a.steps,
            .context = gpt.context};
    p.on_report = on_report;
    p.user = &u;
    p.stop = &stop_flag;

    const mpcl_device_info *dev = mpcl_context_device(ctx);
    if (human) print_start(human, &a, dev);

    int rc = EXIT_ERROR;
    mpcl_trainer *tr = NULL;
    st = mpcl_trainer_create(ctx, &p, &tr);
    if (st != MPCL_OK) {
        fprintf(stderr, "mpcl-train: %s\n", mpcl_errmsg());
        goto done;
    }
    mpcl_plan plan = *mpcl_model_plan(mpcl_trainer_model(tr));
    mpcl_lr_schedule sched = mpcl_model_params_of(mpcl_trainer_model(tr))->lr_schedule;
    if (human) print_plan(human, &a, &plan);
    if (human) print_model(human, &a, mpcl_model_params_of(mpcl_trainer_model(tr)));
    mpcl_train_data_info di;
    mpcl_trainer_data_info(tr, &di);
    u.batch = di.batch;
    if (human && tokens) train_gpt_print_data(human, &a, &gpt, &di);
    if (human && !tokens) train_data_print(human, &di);
    if (leader && !a.quiet && !tokens) train_data_warn(&di);
    if (human) train_dist_print(human, &td, tr);
    if (!train_gpt_init_weights(&a, tr, err, sizeof err)) {
        fprintf(stderr, "mpcl-train: %s\n", err);
        goto done;
    }
    if (a.resume && mpcl_trainer_load(tr, a.resume) != MPCL_OK) {
        fprintf(stderr, "mpcl-train: --resume %s: %s\n", a.resume, mpcl_errmsg());
        goto done;
    }
    /* Under MPI all ranks take a stop during start-up, or none does (one that
     * ended alone would leave the others waiting in the first collective). */
    int sig = 0;
    if (train_dist_agree_signal(&td, stop_signal, &sig) != MPCL_OK) {
        fprintf(stderr, "mpcl-train: %s\n", mpcl_errmsg());
        goto done;
    }
    if (sig) {
        fprintf(stderr, "mpcl-train: stopped during start-up; nothing trained or written\n");
        rc = 128 + sig;
        goto done;
    }
    mpcl_train_summary s;
    mpcl_trainer_summary(tr, &s);
    if (a.metrics) {
        u.metrics = open_metrics(a.metrics, a.loss, a.resume != NULL, (unsigned long long)s.steps,
                                 err, sizeof err);
        if (!u.metrics) {
            fprintf(stderr, "mpcl-train: %s\n", err);
            goto done;
        }
    }

    if (a.plot && mpcl_run_record_create(tr, &u.plot) != MPCL_OK) {
        fprintf(stderr, "mpcl-train: --plot: %s\n", mpcl_errmsg());
        goto done;
    }
    /* Start-up: from main to the first step (context, verification, data,
     * model, checkpoint), in the JSON summary. */
    const double startup_s = monotonic_s() - t_main;
    st = mpcl_trainer_fit(tr);
    if (u.line_open) fputc('\n', human);
    if (st != MPCL_OK) {
        fprintf(stderr, "mpcl-train: training failed: %s\n", mpcl_errmsg());
        goto done;
    }
    mpcl_trainer_summary(tr, &s);
    if (human) print_end(human, &a, &plan, gpt.context, &s);
    if (s.diverged)
        fprintf(stderr,
                "mpcl-train: the training loss became non-finite by step %llu: the run "
                "diverged (a lower --lr, --clip-norm, or --keep-going-on-nan to go on)%s\n",
                (unsigned long long)s.steps,
                a.save ? "; not saved, the checkpoint keeps what it held" : "");
    if (a.save && !s.diverged) {
        if (mpcl_trainer_save(tr, a.save) != MPCL_OK) {
            fprintf(stderr, "mpcl-train: --save %s: %s\n", a.save, mpcl_errmsg());
            goto done;
        }
        if (human) fprintf(human, "saved     %s\n", a.save);
    }
    if (a.save_hf && !s.diverged) {
        if (!train_gpt_save_hf(&a, tr, err, sizeof err)) {
            fprintf(stderr, "mpcl-train: %s\n", err);
            goto done;
        }
        if (human) fprintf(human, "saved     %s (GPT-2 folder)\n", a.save_hf);
    }
    if (a.plot) {
        if (u.plot_failed || mpcl_run_record_write_svg(u.plot, a.plot) != MPCL_OK) {
            fprintf(stderr, "mpcl-train: --plot %s: %s\n", a.plot, mpcl_errmsg());
            goto done;
        }
        if (human) fprintf(human, "plot      %s\n", a.plot);
    }
    if (u.metrics_failed) {
        fprintf(stderr, "mpcl-train: %s\n", u.metrics_error);
        goto done;
    }
    /* No rank exits (which makes mpirun end the job) before rank 0 has
     * written its files (a rank 0 that failed ended the job instead), and
     * every rank that stopped exits with the same status. */
    if (train_dist_agree_signal(&td, stop_signal, &sig) != MPCL_OK) {
        fprintf(stderr, "mpcl-train: %s\n", mpcl_errmsg());
        goto done;
    }
    /* The rates are a collective under MPI: every rank takes part, with or
     * without --json of its own (rank 0 alone writes). */
    if (a.json || (td.dist && mpcl_dist_is_mpi(td.dist))) {
        double *rates = calloc(s.world_size, sizeof *rates);
        if (rates) train_dist_rates(&td, &s, rates); /* collective under MPI */
        if (rates && leader && a.json)
            write_json(&a, dev, &plan, &sched, &di, &s, &td, rates, startup_s,
                       tokens ? &gpt : NULL);
        free(rates);
    }
    /* The status says what happened: a signal after the last step changed
     * nothing, and the run is done. */
    if (s.diverged && !a.keep_going_on_nan)
        rc = EXIT_DIVERGED;
    else if (s.stopped && sig)
        rc = 128 + sig;
    else
        rc = EXIT_OK;
    if (!s.stopped && sig && human)
        fprintf(human, "signal    arrived after the last step; the run is complete\n");

done:
    if (u.metrics && fclose(u.metrics) != 0 && rc == EXIT_OK) {
        fprintf(stderr, "mpcl-train: --metrics %s: %s\n", a.metrics, strerror(errno));
        rc = EXIT_ERROR;
    }
    mpcl_run_record_destroy(u.plot);
    /* A failing rank ends the MPI job, so that no other rank waits for it in
     * a collective; mpirun then exits non-zero on every rank's behalf. */
    if (rc == EXIT_ERROR && td.dist && mpcl_dist_is_mpi(td.dist)) {
        fprintf(stderr, "mpcl-train: rank %zu failed; ending the MPI job\n",
                mpcl_dist_rank(td.dist));
        mpcl_dist_abort(td.dist, EXIT_ERROR);
    }
    mpcl_trainer_destroy(tr);
    mpcl_train_data_load_destroy(load);
    train_gpt_free(&gpt);
    train_dist_close(&td);
    if (fflush(stdout) != 0 && rc == EXIT_OK) rc = EXIT_ERROR;
    return rc;
}
