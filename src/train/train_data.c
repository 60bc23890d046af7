/* The trainer's data: the IDX files loaded and checked, on the caller's
 * thread or on a thread of their own (mpcl_train_data_load_*), and what
 * mpcl_trainer_data_info tells of them. See train.h. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "runtime/runtime.h"
#include "train/train_internal.h"

/* The first `limit` rows of *ds (0, or more than it has: all of them); *ds
 * is NULL after a failure. */
static mpcl_status apply_limit(mpcl_dataset **ds, size_t limit) {
    if (limit == 0 || limit >= mpcl_dataset_count(*ds)) return MPCL_OK;
    mpcl_dataset *sub = NULL;
    mpcl_status st = mpcl_dataset_subset(*ds, limit, &sub);
    mpcl_dataset_destroy(*ds);
    *ds = sub;
    return st;
}

static mpcl_status load_split(mpcl_context *ctx, const char *dir, const char *prefix,
                              int num_classes, size_t limit, mpcl_dataset **out,
                              size_t *available) {
    mpcl_idx_params ip = mpcl_idx_default_params();
    ip.num_classes = num_classes;
    mpcl_status st = mpcl_idx_load_ex(dir, prefix, &ip, out);
    if (st != MPCL_OK) return mpcl__train_adopt_error(ctx, st);
    if (available) *available = mpcl_dataset_count(*out);
    return apply_limit(out, limit);
}

/* With an inferred class count (the largest label + 1), every class must have
 * a training example: one corrupt label must not silently widen the model.
 * The message lists the empty classes as ranges and names the largest label
 * and where it is. */
static mpcl_status check_inferred_classes(mpcl_context *ctx, const mpcl_dataset *train) {
    int classes = mpcl_dataset_num_classes(train);
    size_t n = mpcl_dataset_count(train);
    const uint8_t *labels = mpcl_dataset_labels(train);
    size_t count[256] = {0}, first_max = 0;
    for (size_t i = 0; i < n; i++) {
        count[labels[i]]++;
        if (labels[i] > labels[first_max]) first_max = i;
    }
    char empty[256];
    size_t k = 0, missing = 0;
    empty[0] = '\0';
    for (int c = 0; c < classes; c++) {
        if (count[c]) continue;
        int e = c;
        while (e + 1 < classes && !count[e + 1]) e++;
        missing += (size_t)(e - c + 1);
        if (k < sizeof empty)
            k += (size_t)snprintf(empty + k, sizeof empty - k, "%s%d%s%.0d", k ? ", " : "", c,
                                  e > c ? "-" : "", e > c ? e : 0);
        c = e;
    }
    if (!missing) return MPCL_OK;
    return MPCL_ERROR(ctx, MPCL_ERR_LABEL,
                      "'%s': the training labels go up to %u (first at index %zu), which makes "
                      "%d classes, but %zu of them have no training example (labels %s); a "
                      "corrupt label? Set the class count explicitly (mpcl-train --classes N) "
                      "if that is meant",
                      mpcl__dataset_path(train, true), (unsigned)labels[first_max], first_max,
                      classes, missing, empty);
}

/* The training examples of each class, kept for mpcl_trainer_data_info. */
void mpcl__train_count_classes(mpcl_trainer *tr, const mpcl_dataset *train, bool inferred) {
    const uint8_t *labels = mpcl_dataset_labels(train);
    memset(tr->class_examples, 0, sizeof tr->class_examples);
    for (size_t i = 0; labels && i < mpcl_dataset_count(train); i++)
        tr->class_examples[labels[i]]++;
    tr->classes_inferred = inferred && labels;
    tr->float_targets = !labels;
    tr->input_rank = mpcl_dataset_shape(train, tr->input_shape);
}

/* A class with almost no training example: fewer than 1% of the mean per
 * class, i.e. examples * 100 * classes < samples. */
static bool rare_class(size_t examples, size_t classes, size_t samples) {
    return (uint64_t)examples * 100 * classes < samples;
}

void mpcl_trainer_data_info(const mpcl_trainer *tr, mpcl_train_data_info *out) {
    memset(out, 0, sizeof *out);
    out->train_samples = tr->train_count;
    out->test_samples = tr->test_count;
    out->batch = tr->params.batch;
    out->batch_requested = tr->batch_requested;
    out->classes = (int)tr->params.model.classes;
    out->classes_inferred = tr->classes_inferred;
    memcpy(out->class_examples, tr->class_examples, sizeof out->class_examples);
    memcpy(out->input_shape, tr->input_shape, sizeof out->input_shape);
    out->input_rank = tr->input_rank;
    out->float_targets = tr->float_targets;
    /* A token stream lives on the device and has no class counts. */
    if (tr->stream) return;
    out->train_streamed = mpcl_device_dataset_streamed(tr->train);
    out->test_streamed = tr->test && mpcl_device_dataset_streamed(tr->test);
    for (int c = 0; c < out->classes && !tr->float_targets; c++)
        if (rare_class(tr->class_examples[c], (size_t)out->classes, tr->train_count))
            out->rare[out->rare_count++] = c;
}

/* The training split (limited, its labels checked against num_classes or,
 * without it, every class needing an example). */
static mpcl_status load_train(mpcl_context *ctx, const char *dir, int num_classes, size_t limit,
                              mpcl_dataset **train, size_t *available) {
    *train = NULL;
    mpcl_status st = load_split(ctx, dir, "train", num_classes, limit, train, available);
    if (st == MPCL_OK && num_classes == 0) st = check_inferred_classes(ctx, *train);
    if (st != MPCL_OK) {
        mpcl_dataset_destroy(*train);
        *train = NULL;
    }
    return st;
}

/* The IDX folder's data: the training split, then the test split, checked
 * against the training split's class count. */
static mpcl_status load_idx_files(mpcl_context *ctx, const char *dir, int num_classes,
                                  size_t train_limit, size_t test_limit, mpcl_dataset **train,
                                  mpcl_dataset **test, size_t *available) {
    *test = NULL;
    mpcl_status st = load_train(ctx, dir, num_classes, train_limit, train, available);
    if (st == MPCL_OK && (st = load_split(ctx, dir, "t10k", mpcl_dataset_num_classes(*train),
                                          test_limit, test, NULL)) != MPCL_OK) {
        mpcl_dataset_destroy(*train);
        *train = NULL;
    }
    return st;
}

/* A copy of s, or NULL for NULL; false when out of memory. */
static bool copy_name(char **out, const char *s) {
    *out = s ? strdup(s) : NULL;
    return !s || *out;
}

static bool same_name(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

mpcl_status mpcl__train_source_init(mpcl__train_source *src, const mpcl_train_params *p) {
    memset(src, 0, sizeof *src);
    if (!p->train_x != !p->train_y || !p->val_x != !p->val_y)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "NPY data come in pairs: %s is set without %s",
                          !p->train_x != !p->train_y ? (p->train_x ? "train_x" : "train_y")
                                                     : (p->val_x ? "val_x" : "val_y"),
                          !p->train_x != !p->train_y ? (p->train_x ? "train_y" : "train_x")
                                                     : (p->val_x ? "val_y" : "val_x"));
    if (!(p->validation_split >= 0.0 && p->validation_split < 1.0))
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "validation_split %g is outside [0, 1) (0: no split)",
                          p->validation_split);
    if (p->model.loss != MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY && !p->train_x)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "loss %s takes f32 targets, and the IDX files hold class labels: give "
                          "the data as NPY files (train_x, train_y)",
                          mpcl_loss_name(p->model.loss));
    if (p->validation_split > 0.0 && p->val_x)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "validation_split and val_x/val_y both name the test data: choose one");
    src->num_classes = p->num_classes;
    src->train_limit = p->train_limit;
    src->test_limit = p->test_limit;
    src->validation_split = p->validation_split;
    src->float_targets = p->model.loss != MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    if (copy_name(&src->dir, p->train_x ? NULL : p->data_dir) &&
        copy_name(&src->train_x, p->train_x) && copy_name(&src->train_y, p->train_y) &&
        copy_name(&src->val_x, p->val_x) && copy_name(&src->val_y, p->val_y))
        return MPCL_OK;
    mpcl__train_source_free(src);
    return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "copying the data file names");
}

void mpcl__train_source_free(mpcl__train_source *src) {
    free(src->dir);
    free(src->train_x);
    free(src->train_y);
    free(src->val_x);
    free(src->val_y);
    memset(src, 0, sizeof *src);
}

bool mpcl__train_source_same(const mpcl__train_source *a, const mpcl__train_source *b) {
    return same_name(a->dir, b->dir) && same_name(a->train_x, b->train_x) &&
           same_name(a->train_y, b->train_y) && same_name(a->val_x, b->val_x) &&
           same_name(a->val_y, b->val_y) && a->num_classes == b->num_classes &&
           a->train_limit == b->train_limit && a->test_limit == b->test_limit &&
           a->validation_split == b->validation_split && a->float_targets == b->float_targets;
}

/* The IDX folder's two splits as they were before NPY files and splits. */
static bool plain_idx(const mpcl__train_source *src) {
    return !src->train_x && !src->val_x && src->validation_split == 0.0;
}

/* A data set of NPY files, labels checked against num_classes (0: none). */
static mpcl_status load_npy(mpcl_context *ctx, const char *x, const char *y, int num_classes,
                            bool float_targets, mpcl_dataset **out) {
    mpcl_npy_data_params p = mpcl_npy_data_default_params();
    p.num_classes = num_classes;
    p.float_targets = float_targets;
    return mpcl__train_adopt_error(ctx, mpcl_dataset_from_npy(x, y, &p, out));
}

/* The training rows, whole: the NPY files, or the IDX folder's "train". */
static mpcl_status load_training_rows(mpcl_context *ctx, const mpcl__train_source *src,
                                      mpcl_dataset **out) {
    if (src->train_x)
        return load_npy(ctx, src->train_x, src->train_y, src->num_classes, src->float_targets, out);
    return load_split(ctx, src->dir, "train", src->num_classes, 0, out, NULL);
}

/* The test data without a split: the val files (their labels checked
 * against the training labels' class count), else the IDX folder's t10k,
 * or none beside NPY training files; limited. */
static mpcl_status load_test(mpcl_context *ctx, const mpcl__train_source *src,
                             const mpcl_dataset *train, mpcl_dataset **test) {
    int classes = mpcl_dataset_num_classes(train);
    if (!src->val_x)
        return src->train_x
                   ? MPCL_OK
                   : load_split(ctx, src->dir, "t10k", classes, src->test_limit, test, NULL);
    mpcl_status st = load_npy(ctx, src->val_x, src->val_y, classes, src->float_targets, test);
    return st == MPCL_OK ? apply_limit(test, src->test_limit) : st;
}

/* The training rows, split (validation_split) or with their test data from
 * the t10k split or the val files, each limited; the class checks of the
 * IDX files apply alike. */
static mpcl_status load_general(mpcl_context *ctx, const mpcl__train_source *src,
                                mpcl_dataset **train, mpcl_dataset **test, size_t *available) {
    mpcl_dataset *all = NULL;
    mpcl_status st = load_training_rows(ctx, src, &all);
    if (st == MPCL_OK && src->validation_split > 0.0) {
        st = mpcl__train_adopt_error(ctx,
                                     mpcl_dataset_split(all, src->validation_split, train, test));
        mpcl_dataset_destroy(all);
    } else {
        *train = all;
    }
    if (st == MPCL_OK) *available = mpcl_dataset_count(*train);
    if (st == MPCL_OK) st = apply_limit(train, src->train_limit);
    if (st == MPCL_OK && *test) st = apply_limit(test, src->test_limit);
    if (st == MPCL_OK && src->num_classes == 0 && mpcl_dataset_labels(*train))
        st = check_inferred_classes(ctx, *train);
    if (st == MPCL_OK && src->validation_split == 0.0) st = load_test(ctx, src, *train, test);
    return st;
}

mpcl_status mpcl__train_load_files(mpcl_context *ctx, const mpcl__train_source *src,
                                   mpcl_dataset **train, mpcl_dataset **test, size_t *available) {
    *train = *test = NULL;
    if (plain_idx(src))
        return load_idx_files(ctx, src->dir, src->num_classes, src->train_limit, src->test_limit,
                              train, test, available);
    mpcl_status st = load_general(ctx, src, train, test, available);
    if (st != MPCL_OK) {
        mpcl_dataset_destroy(*train);
        mpcl_dataset_destroy(*test);
        *train = *test = NULL;
    }
    return st;
}

/* load_files on a thread of its own (and the test split on a second one);
 * the result waits here for the trainer. */
struct mpcl_train_data_load {
    mpcl__train_source src;
    pthread_t thread;
    bool threaded; /* thread runs data_load_main; otherwise wait runs the load */
    bool done;     /* the result below is final */
    bool taken;    /* a trainer has its datasets */
    /* The shape read before the pixels (mpcl__idx_peek), for a model made
     * while they decode; shape_known turns true (under mu, signalled on cv)
     * when it has been tried, and shape_ok says whether it was read. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool shape_known, shape_ok;
    size_t count, features;
    int classes;
    /* The test split, decoded on a second thread beside the training split
     * against the class count read ahead; used when the training split
     * gives the same count, else loaded again after it. */
    pthread_t test_thread;
    mpcl_status test_st;
    char *test_msg;
    mpcl_dataset *test_early;
    mpcl_status st;
    char *msg; /* the load's message when st is not MPCL_OK (NULL: no memory for it) */
    mpcl_dataset *train, *test;
    size_t available;
};

static void *test_main(void *arg) {
    mpcl_train_data_load *L = arg;
    L->test_st =
        load_split(NULL, L->src.dir, "t10k", L->classes, L->src.test_limit, &L->test_early, NULL);
    if (L->test_st != MPCL_OK) L->test_msg = strdup(mpcl_errmsg());
    return NULL;
}

/* load_files, with the test split taken from test_thread when it ran
 * (test_started) against the class count the training split has: the
 * status and message are the ones load_files gives, in its order. */
static void data_load_run(mpcl_train_data_load *L, bool test_started) {
    if (!plain_idx(&L->src)) {
        L->st = mpcl__train_load_files(NULL, &L->src, &L->train, &L->test, &L->available);
        if (L->st != MPCL_OK) L->msg = strdup(mpcl_errmsg());
        return;
    }
    mpcl_status st = load_train(NULL, L->src.dir, L->src.num_classes, L->src.train_limit, &L->train,
                                &L->available);
    if (test_started) pthread_join(L->test_thread, NULL);
    if (st != MPCL_OK) {
        L->msg = strdup(mpcl_errmsg());
    } else if (test_started && L->classes == mpcl_dataset_num_classes(L->train)) {
        st = L->test_st;
        L->test = L->test_early;
        L->msg = L->test_msg;
        L->test_early = NULL;
        L->test_msg = NULL;
    } else if ((st = load_split(NULL, L->src.dir, "t10k", mpcl_dataset_num_classes(L->train),
                                L->src.test_limit, &L->test, NULL)) != MPCL_OK) {
        L->msg = strdup(mpcl_errmsg());
    }
    if (st != MPCL_OK) {
        mpcl_dataset_destroy(L->train);
        L->train = NULL;
    }
    L->st = st;
}

static void *data_load_main(void *arg) {
    mpcl_train_data_load *L = arg;
    size_t count = 0, features = 0;
    int classes = 0;
    /* The shape is read ahead from the IDX folder's two splits only. */
    bool ok = plain_idx(&L->src) && mpcl__idx_peek(L->src.dir, "train", L->src.num_classes, &count,
                                                   &features, &classes) == MPCL_OK;
    pthread_mutex_lock(&L->mu);
    L->shape_known = true;
    L->shape_ok = ok;
    L->count = L->src.train_limit && L->src.train_limit < count ? L->src.train_limit : count;
    L->features = features;
    L->classes = classes;
    pthread_cond_signal(&L->cv);
    pthread_mutex_unlock(&L->mu);
    data_load_run(L, ok && pthread_create(&L->test_thread, NULL, test_main, L) == 0);
    return NULL;
}

/* The shape the load read ahead of the pixels (the training samples after
 * the limit, features, classes); false when there is none. */
bool mpcl__train_data_load_shape(mpcl_train_data_load *L, size_t *count, size_t *features,
                                 int *classes) {
    if (!L->threaded) return false;
    pthread_mutex_lock(&L->mu);
    while (!L->shape_known) pthread_cond_wait(&L->cv, &L->mu);
    bool ok = L->shape_ok;
    *count = L->count;
    *features = L->features;
    *classes = L->classes;
    pthread_mutex_unlock(&L->mu);
    return ok;
}

static void data_load_wait(mpcl_train_data_load *L) {
    if (L->done) return;
    if (L->threaded)
        pthread_join(L->thread, NULL);
    else
        data_load_run(L, false);
    L->done = true;
}

mpcl_status mpcl_train_data_load_start(const mpcl_train_params *params,
                                       mpcl_train_data_load **out) {
    if (!out)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_train_data_load_start: out is NULL");
    *out = NULL;
    if (!params)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_train_data_load_start: params is NULL");
    mpcl_train_data_load *L = calloc(1, sizeof *L);
    if (!L) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "mpcl_train_data_load_start");
    mpcl_status st = mpcl__train_source_init(&L->src, params);
    if (st != MPCL_OK) {
        free(L);
        return st;
    }
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->cv, NULL);
    /* SIGINT and SIGTERM stay with the threads that were there: a tool's
     * handler sees them where it did before, and no read here is cut short. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    bool masked = pthread_sigmask(SIG_BLOCK, &block, &old) == 0;
    L->threaded = pthread_create(&L->thread, NULL, data_load_main, L) == 0;
    if (masked) pthread_sigmask(SIG_SETMASK, &old, NULL);
    *out = L;
    return MPCL_OK;
}

void mpcl_train_data_load_destroy(mpcl_train_data_load *L) {
    if (!L) return;
    data_load_wait(L);
    mpcl_dataset_destroy(L->train);
    mpcl_dataset_destroy(L->test);
    mpcl_dataset_destroy(L->test_early);
    free(L->msg);
    free(L->test_msg);
    mpcl__train_source_free(&L->src);
    pthread_cond_destroy(&L->cv);
    pthread_mutex_destroy(&L->mu);
    free(L);
}

/* Whether params->data_load loads what params name, and is still unused. */
mpcl_status mpcl__train_data_load_check(mpcl_context *ctx, const mpcl_train_params *params) {
    const mpcl_train_data_load *L = params->data_load;
    mpcl__train_source src;
    mpcl_status st = mpcl__train_source_init(&src, params);
    if (st != MPCL_OK) return mpcl__train_adopt_error(ctx, st);
    bool same = mpcl__train_source_same(&L->src, &src);
    mpcl__train_source_free(&src);
    if (!same)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "data_load was started with other data params (data_dir, NPY files, "
                          "validation_split, limits, num_classes or loss) than the trainer's");
    if (L->taken)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "data_load was already used by a trainer");
    return MPCL_OK;
}

/* The datasets of params->data_load, once it is done, with its status and
 * message as they were. */
mpcl_status mpcl__train_take_loaded(mpcl_context *ctx, const mpcl_train_params *params,
                                    mpcl_dataset **train, mpcl_dataset **test, size_t *available) {
    mpcl_train_data_load *L = params->data_load;
    mpcl_status st = mpcl__train_data_load_check(ctx, params);
    if (st != MPCL_OK) return st;
    data_load_wait(L);
    if (L->st != MPCL_OK)
        return L->msg ? mpcl__error_restore(ctx, L->st, L->msg)
                      : MPCL_ERROR(ctx, L->st, "loading the data failed (no memory to keep why)");
    *train = L->train;
    *test = L->test;
    *available = L->available;
    L->train = L->test = NULL;
    L->taken = true;
    return MPCL_OK;
}

/* " '<path>'" for a data set read from a file, nothing for one from memory,
 * as three %s arguments. */
#define QUOTED_PATH(p) (*(p) ? " '" : ""), (p), (*(p) ? "'" : "")

/* The test set, when there is one, must fit the training set's model. */
mpcl_status mpcl__train_check_test_data(mpcl_context *ctx, const mpcl_dataset *train,
                                        const mpcl_dataset *test) {
    if (test && mpcl_dataset_features(test) != mpcl_dataset_features(train))
        return MPCL_ERROR(ctx, MPCL_ERR_FORMAT,
                          "training images%s%s%s have %zu pixels (%zu x %zu), test images%s%s%s "
                          "%zu (%zu x %zu): not one data set",
                          QUOTED_PATH(mpcl__dataset_path(train, false)),
                          mpcl_dataset_features(train), mpcl_dataset_rows(train),
                          mpcl_dataset_cols(train), QUOTED_PATH(mpcl__dataset_path(test, false)),
                          mpcl_dataset_features(test), mpcl_dataset_rows(test),
                          mpcl_dataset_cols(test));
    if (test && mpcl_dataset_target_cols(test) != mpcl_dataset_target_cols(train))
        return MPCL_ERROR(
            ctx, MPCL_ERR_FORMAT,
            "the training data%s%s%s have %zu target columns, the test data%s%s%s "
            "%zu (0: class labels): not one data set",
            QUOTED_PATH(mpcl__dataset_path(train, true)), mpcl_dataset_target_cols(train),
            QUOTED_PATH(mpcl__dataset_path(test, true)), mpcl_dataset_target_cols(test));
    if (test && mpcl_dataset_num_classes(test) > mpcl_dataset_num_classes(train))
        return MPCL_ERROR(ctx, MPCL_ERR_LABEL,
                          "the test data have %d classes, the training data %d",
                          mpcl_dataset_num_classes(test), mpcl_dataset_num_classes(train));
    return MPCL_OK;
}
