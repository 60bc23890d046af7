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

static mpcl_status load_split(mpcl_context *ctx, const char *dir, const char *prefix,
                              int num_classes, size_t limit, mpcl_dataset **out,
                              size_t *available) {
    mpcl_idx_params ip = mpcl_idx_default_params();
    ip.num_classes = num_classes;
    mpcl_dataset *all = NULL;
    mpcl_status st = mpcl_idx_load_ex(dir, prefix, &ip, &all);
    if (st != MPCL_OK) return mpcl__train_adopt_error(ctx, st);
    if (available) *available = mpcl_dataset_count(all);
    if (limit == 0 || limit >= mpcl_dataset_count(all)) {
        *out = all;
        return MPCL_OK;
    }
    st = mpcl_dataset_subset(all, limit, out);
    mpcl_dataset_destroy(all);
    return st;
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
    for (size_t i = 0; i < mpcl_dataset_count(train); i++) tr->class_examples[labels[i]]++;
    tr->classes_inferred = inferred;
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
    for (int c = 0; c < out->classes; c++)
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

/* The files' data: the training split, then the test split, checked
 * against the training split's class count. */
mpcl_status mpcl__train_load_files(mpcl_context *ctx, const char *dir, int num_classes,
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

/* load_files on a thread of its own (and the test split on a second one);
 * the result waits here for the trainer. */
struct mpcl_train_data_load {
    char *dir; /* owned; NULL for the default folder */
    int num_classes;
    size_t train_limit, test_limit;
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
    L->test_st = load_split(NULL, L->dir, "t10k", L->classes, L->test_limit, &L->test_early, NULL);
    if (L->test_st != MPCL_OK) L->test_msg = strdup(mpcl_errmsg());
    return NULL;
}

/* load_files, with the test split taken from test_thread when it ran
 * (test_started) against the class count the training split has: the
 * status and message are the ones load_files gives, in its order. */
static void data_load_run(mpcl_train_data_load *L, bool test_started) {
    mpcl_status st =
        load_train(NULL, L->dir, L->num_classes, L->train_limit, &L->train, &L->available);
    if (test_started) pthread_join(L->test_thread, NULL);
    if (st != MPCL_OK) {
        L->msg = strdup(mpcl_errmsg());
    } else if (test_started && L->classes == mpcl_dataset_num_classes(L->train)) {
        st = L->test_st;
        L->test = L->test_early;
        L->msg = L->test_msg;
        L->test_early = NULL;
        L->test_msg = NULL;
    } else if ((st = load_split(NULL, L->dir, "t10k", mpcl_dataset_num_classes(L->train),
                                L->test_limit, &L->test, NULL)) != MPCL_OK) {
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
    bool ok =
        mpcl__idx_peek(L->dir, "train", L->num_classes, &count, &features, &classes) == MPCL_OK;
    pthread_mutex_lock(&L->mu);
    L->shape_known = true;
    L->shape_ok = ok;
    L->count = L->train_limit && L->train_limit < count ? L->train_limit : count;
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
    if (L && params->data_dir && !(L->dir = strdup(params->data_dir))) {
        free(L);
        L = NULL;
    }
    if (!L) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "mpcl_train_data_load_start");
    L->num_classes = params->num_classes;
    L->train_limit = params->train_limit;
    L->test_limit = params->test_limit;
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
    free(L->dir);
    pthread_cond_destroy(&L->cv);
    pthread_mutex_destroy(&L->mu);
    free(L);
}

/* Whether params->data_load loads what params name, and is still unused. */
mpcl_status mpcl__train_data_load_check(mpcl_context *ctx, const mpcl_train_params *params) {
    const mpcl_train_data_load *L = params->data_load;
    bool same_dir = (!L->dir && !params->data_dir) ||
                    (L->dir && params->data_dir && strcmp(L->dir, params->data_dir) == 0);
    if (!same_dir || L->num_classes != params->num_classes ||
        L->train_limit != params->train_limit || L->test_limit != params->test_limit)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "data_load was started with other data params (data_dir, limits or "
                          "num_classes) than the trainer's");
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
    if (test && mpcl_dataset_num_classes(test) > mpcl_dataset_num_classes(train))
        return MPCL_ERROR(ctx, MPCL_ERR_LABEL,
                          "the test data have %d classes, the training data %d",
                          mpcl_dataset_num_classes(test), mpcl_dataset_num_classes(train));
    return MPCL_OK;
}
