/* The training loop: one upload of each epoch's order, batches gathered on the
 * device, and host reads only when a report is due. See train.h. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/io.h"
#include "nn/nn.h"
#include "runtime/runtime.h"
#include "train/train_internal.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

mpcl_train_params mpcl_train_default_params(void) {
    mpcl_train_params p;
    memset(&p, 0, sizeof p);
    p.epochs = 10;
    p.batch = 128;
    p.seed = 42;
    p.report_every = 50;
    p.model = mpcl_model_default_params();
    p.shuffle = true;
    p.eval_fraction = 0.1;
    p.eval_batches = 20;
    p.grad_accum = 1;
    return p;
}

/* Epoch e's order is the identity permuted by mpcl_shuffle_indices from the
 * state
 *     s_e = splitmix64(splitmix64(seed) XOR (e + 1) * 0xd1b54a32d192ed03)
 * where splitmix64(x) is the first output of mpcl_rng_next from state x.
 * It depends on nothing but (seed, e), so a resumed run needs no RNG stream
 * state, and the double hashing keeps the shuffle streams apart from the
 * weight-initialisation stream, which starts from the raw seed. The odd
 * constant (a Weyl multiplier from Steele and Vigna's tables) spreads
 * consecutive epochs over all 64 bits before the second hash. */
void mpcl__train_epoch_order(uint64_t seed, uint32_t epoch, int32_t *idx, size_t n) {
    uint64_t s = seed;
    uint64_t h = mpcl_rng_next(&s);
    s = h ^ (((uint64_t)epoch + 1) * 0xd1b54a32d192ed03ull);
    uint64_t state = mpcl_rng_next(&s);
    mpcl_iota_indices(idx, n);
    mpcl_shuffle_indices(&state, idx, n);
}

mpcl_status mpcl__train_adopt_error(mpcl_context *ctx, mpcl_status st) {
    /* Both buffers are 64 KiB (status.c, context.c) and the thread's message
     * is NUL-terminated inside its buffer. */
    const char *msg = mpcl_errmsg();
    if (ctx && ctx->errmsg && ctx->errmsg != msg) memcpy(ctx->errmsg, msg, strlen(msg) + 1);
    return st;
}

/* The replicas' contexts, and the batch split they need: every replica takes
 * at least one row of every batch, the last partial one included. */
mpcl_status mpcl__train_setup_replicas(mpcl_trainer *tr, const mpcl_train_params *params) {
    mpcl_context *ctx = tr->ctx;
    tr->dist = params->dist;
    tr->replicas = tr->dist ? mpcl_dist_local_replicas(tr->dist) : 1;
    tr->rep[0].ctx = ctx;
    if (!tr->dist) return MPCL_OK;
    if (tr->replicas > 1 && (!params->replica_ctx || params->replica_ctx[0] != ctx))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "%zu local replicas need replica_ctx[0 .. %zu), the first being ctx",
                          tr->replicas, tr->replicas);
    for (size_t r = 1; r < tr->replicas; r++) tr->rep[r].ctx = params->replica_ctx[r];
    size_t batch = tr->params.batch, world = mpcl_dist_world_size(tr->dist);
    /* A token run's batches are all whole. */
    size_t last = tr->stream ? 0 : tr->train_count % batch;
    if (batch < world || (last && last < world))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "batch %zu (last batch of the epoch: %zu samples) over %zu replicas: "
                          "every replica needs at least one sample of every batch; choose "
                          "--batch or --train-limit to fit",
                          batch, last ? last : batch, world);
    return MPCL_OK;
}

static void destroy_models(mpcl_trainer *tr) {
    for (size_t r = 0; r < tr->replicas; r++) {
        mpcl_model_destroy(tr->rep[r].model);
        tr->rep[r].model = tr->models[r] = NULL;
    }
    tr->model = NULL;
}

/* One precision plan for every replica: replica 0 resolves the policy, the
 * others take what it resolved to; when a device cannot run that (or, under
 * MPI, the processes resolved `auto` differently), every replica falls back
 * to float32, the plan every device runs, and plan_note says so. An explicit
 * policy that some replica cannot run is refused. */
mpcl_status mpcl__train_create_models(mpcl_trainer *tr, mpcl_model_params *mp) {
    mpcl_status st = mpcl_model_create(tr->ctx, mp, &tr->model);
    if (st != MPCL_OK) return st;
    tr->rep[0].model = tr->models[0] = tr->model;
    if (!tr->dist) return MPCL_OK;
    mpcl_model_params each = *mp;
    each.policy = mpcl_model_plan(tr->model)->resolved;
    size_t misfit = 0;
    for (size_t r = 1; r < tr->replicas && !misfit; r++) {
        st = mpcl_model_create(tr->rep[r].ctx, &each, &tr->rep[r].model);
        if (st == MPCL_ERR_UNSUPPORTED)
            misfit = r;
        else if (st != MPCL_OK)
            return st;
        tr->models[r] = tr->rep[r].model;
    }
    double votes[MPCL_POLICY_COUNT + 1] = {0};
    votes[misfit ? MPCL_POLICY_COUNT : each.policy] = 1;
    if ((st = mpcl_dist_sum_f64(tr->dist, tr->ctx, votes, MPCL_POLICY_COUNT + 1)) != MPCL_OK)
        return st;
    double processes = mpcl_dist_is_mpi(tr->dist) ? (double)mpcl_dist_world_size(tr->dist) : 1;
    if (votes[each.policy] == processes) return MPCL_OK;
    if (mp->policy != MPCL_POLICY_AUTO)
        return MPCL_ERROR(tr->ctx, MPCL_ERR_UNSUPPORTED,
                          "policy %s cannot run on every replica (%s); choose another "
                          "--precision or other devices",
                          mpcl_policy_name(mp->policy),
                          misfit ? "a local device refused it" : "another rank refused it");
    snprintf(tr->plan_note, sizeof tr->plan_note,
             "float32, the common plan: replica 0 resolved auto to %s, which not every "
             "replica's device runs alike",
             mpcl_policy_name(each.policy));
    destroy_models(tr);
    each.policy = MPCL_POLICY_FLOAT32;
    for (size_t r = 0; r < tr->replicas; r++) {
        if ((st = mpcl_model_create(tr->rep[r].ctx, &each, &tr->rep[r].model)) != MPCL_OK)
            return st;
        tr->models[r] = tr->rep[r].model;
    }
    tr->model = tr->models[0];
    mp->policy = MPCL_POLICY_FLOAT32;
    return MPCL_OK;
}

/* A schedule whose decay_steps is 0 decays to the end of the run: over the
 * steps left after the warm-up (at least 1). */
static void resolve_schedule(mpcl_lr_schedule *s, uint32_t epochs, uint64_t steps_per_epoch) {
    if (!mpcl_lr_schedule_kind_decays(s->kind) || s->decay_steps) return;
    uint64_t total = (uint64_t)epochs * steps_per_epoch;
    s->decay_steps = total > s->warmup_steps ? total - s->warmup_steps : 1;
}

/* The batch a run takes: the one asked for, or all the training samples when
 * there are fewer (Keras' fit then takes one batch of all of them), so that
 * no buffer is sized for rows that can never come. */
static size_t run_batch(size_t batch, size_t train_count) {
    return train_count && train_count < batch ? train_count : batch;
}

/* Where the data sets go: MPCL_DATA (checked when the context was made),
 * auto when unset. */
static mpcl_data_placement data_placement(void) {
    const char *v = mpcl__env_value(MPCL_ENV_DATA);
    if (v && strcmp(v, "device") == 0) return MPCL_DATA_DEVICE;
    if (v && strcmp(v, "stream") == 0) return MPCL_DATA_STREAM;
    return MPCL_DATA_AUTO;
}

/* The data params names, loaded here (without a data_load). */
static mpcl_status load_files(mpcl_context *ctx, const mpcl_train_params *params,
                              mpcl_dataset **train, mpcl_dataset **test, size_t *available) {
    mpcl__train_source src;
    mpcl_status st = mpcl__train_source_init(&src, params);
    if (st != MPCL_OK) return mpcl__train_adopt_error(ctx, st);
    st = mpcl__train_load_files(ctx, &src, train, test, available);
    mpcl__train_source_free(&src);
    return st;
}

/* While a data_load decodes the pixels, the model is made from the shape it
 * read ahead of them (mpcl__idx_peek), so that the model's programs load
 * beside the inflate. Not under dist, and not where `auto` would measure (a
 * measurement beside a decoding thread would not be a fair one). Returns
 * whether the model was tried; its status goes to *st and its message to
 * *msg (a copy: a failure is reported, as before, only once the data are
 * known to be good). */
/* Images are (rows, cols, 1) to a model whose first layer takes images and
 * that names no input shape of its own; flat features to any other. */
static bool wants_image(const mpcl_model_params *mp) {
    for (size_t l = 0; l < mp->layer_count; l++) {
        size_t rank = mpcl_layer_kind_input_rank(mp->layers[l].kind);
        if (rank) return mp->input_rank == 0 && rank == 3;
    }
    return false;
}

static bool early_model(mpcl_trainer *tr, const mpcl_train_params *params, mpcl_model_params *mp,
                        mpcl_status *st, char **msg) {
    size_t count, features;
    int classes;
    if (params->dist || wants_image(&params->model) ||
        mpcl__train_data_load_check(tr->ctx, params) != MPCL_OK ||
        !mpcl__train_data_load_shape(params->data_load, &count, &features, &classes))
        return false;
    *mp = params->model;
    mp->inputs = features;
    mp->classes = (size_t)classes;
    mp->max_batch = run_batch(params->batch, count);
    mp->seed = params->seed;
    resolve_schedule(&mp->lr_schedule, params->epochs, (count + mp->max_batch - 1) / mp->max_batch);
    if (mp->policy == MPCL_POLICY_AUTO && !mpcl__auto_plan_known(tr->ctx, mp)) return false;
    if ((*st = mpcl__train_setup_replicas(tr, params)) == MPCL_OK)
        *st = mpcl__train_create_models(tr, mp);
    *msg = *st != MPCL_OK ? strdup(mpcl_errmsg()) : NULL;
    return true;
}

mpcl_status mpcl_trainer_create(mpcl_context *ctx, const mpcl_train_params *params,
                                mpcl_trainer **out) {
    *out = NULL;
    if (params->batch == 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "batch must be at least 1");
    if (params->batch > INT32_MAX)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "batch %zu is too large", params->batch);
    mpcl_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating a trainer");
    tr->ctx = ctx;
    tr->params = *params;
    tr->batch_requested = params->batch;
    tr->loss_scale = 1.0f;
    tr->test_loss = NAN;
    tr->test_accuracy = NAN;
    mpcl_status st = MPCL_OK;
    mpcl_dataset *train = NULL, *test = NULL;
    mpcl_model_params early_mp;
    mpcl_status early_st = MPCL_OK;
    char *early_msg = NULL;
    bool early = false;
    if (params->data_dir) {
        size_t n = strlen(params->data_dir) + 1;
        tr->data_dir = malloc(n);
        if (!tr->data_dir) {
            st = MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "copying the data folder name");
            goto cleanup;
        }
        memcpy(tr->data_dir, params->data_dir, n);
    }
    tr->params.data_dir = tr->data_dir;
    if (params->save_path) {
        tr->save_path = strdup(params->save_path);
        if (!tr->save_path) {
            st = MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "copying the checkpoint path");
            goto cleanup;
        }
    }
    tr->params.save_path = tr->save_path;
    tr->params.data_load = NULL; /* borrowed for this call only, as are the NPY names */
    tr->params.train_x = tr->params.train_y = tr->params.val_x = tr->params.val_y = NULL;
    if (params->num_classes < 0 || params->num_classes > 256) {
        st = MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "num_classes %d outside [0, 256]",
                        params->num_classes);
        goto cleanup;
    }

    if (params->tokens) {
        st = mpcl__train_tokens_setup(tr, params);
        goto cleanup;
    }

    /* The class count is given or comes from the training labels; the test
     * labels must fall inside it. Data from memory come with their class
     * count (mpcl_dataset_from_memory), so the inferred-count check is the
     * files' only. */
    const mpcl_dataset *train_ds = params->train_data, *test_ds = params->test_data;
    if (!train_ds) {
        early = params->data_load && early_model(tr, params, &early_mp, &early_st, &early_msg);
        st = params->data_load
                 ? mpcl__train_take_loaded(ctx, params, &train, &test, &tr->train_available)
                 : load_files(ctx, params, &train, &test, &tr->train_available);
        if (st != MPCL_OK) goto cleanup;
        train_ds = train;
        test_ds = test;
    } else {
        tr->train_available = mpcl_dataset_count(train_ds);
    }
    if ((st = mpcl__train_check_test_data(ctx, train_ds, test_ds)) != MPCL_OK) goto cleanup;
    tr->train_count = mpcl_dataset_count(train_ds);
    tr->test_count = test_ds ? mpcl_dataset_count(test_ds) : 0;
    if (tr->train_count > INT32_MAX || tr->test_count > INT32_MAX) {
        st = MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "data sets of more than 2^31 samples");
        goto cleanup;
    }
    tr->params.batch = run_batch(params->batch, tr->train_count);
    size_t batch = tr->params.batch;
    tr->steps_per_epoch = (tr->train_count + batch - 1) / batch;
    mpcl__train_count_classes(tr, train_ds, !params->train_data && params->num_classes == 0);

    mpcl_model_params mp = params->model;
    mp.inputs = mpcl_dataset_features(train_ds);
    mp.classes = mpcl_dataset_labels(train_ds) ? (size_t)mpcl_dataset_num_classes(train_ds)
                                               : mpcl_dataset_target_cols(train_ds);
    if (wants_image(&mp)) {
        /* (rows, cols) images and (H, W) arrays take one channel. */
        size_t shape[3] = {1, 1, 1};
        size_t rank = mpcl_dataset_shape(train_ds, shape);
        if (rank == 2) shape[2] = 1;
        if (rank >= 2) {
            memcpy(mp.input_shape, shape, sizeof shape);
            mp.input_rank = 3;
        }
    }
    mp.max_batch = batch;
    mp.seed = params->seed;
    resolve_schedule(&mp.lr_schedule, params->epochs, tr->steps_per_epoch);
    tr->params.model = mp;
    tr->lr = mp.optim.lr;
    if (early && (early_mp.inputs != mp.inputs || early_mp.classes != mp.classes ||
                  early_mp.max_batch != mp.max_batch ||
                  early_mp.lr_schedule.decay_steps != mp.lr_schedule.decay_steps)) {
        destroy_models(tr); /* the files changed between the reads: the data decide */
        early = false;
    }
    if ((st = mpcl__train_setup_replicas(tr, params)) != MPCL_OK) goto cleanup;
    if (early && early_st != MPCL_OK) {
        st = early_msg
                 ? mpcl__error_restore(ctx, early_st, early_msg)
                 : MPCL_ERROR(ctx, early_st, "creating the model failed (no memory to keep why)");
        goto cleanup;
    }
    if (!early && (st = mpcl__train_create_models(tr, &mp)) != MPCL_OK) goto cleanup;
    mpcl_dtype storage = mpcl_model_plan(tr->model)->storage;
    /* y: i32 labels, or f32 target columns. */
    mpcl_dtype ytype = tr->float_targets ? MPCL_DTYPE_F32 : MPCL_DTYPE_I32;
    size_t ycols = tr->float_targets ? mp.classes : 1;

    tr->host_order = malloc(tr->train_count * sizeof *tr->host_order);
    int32_t *iota = malloc((tr->test_count ? tr->test_count : 1) * sizeof *iota);
    if (!tr->host_order || !iota) {
        free(iota);
        st = MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "order of %zu samples", tr->train_count);
        goto cleanup;
    }
    mpcl_iota_indices(iota, tr->test_count);
    tr->test_host_order = iota;
    /* The batch buffers and orders first, so that the data sets are placed
     * in what memory the rest of the run leaves. */
    mpcl_data_placement placement = data_placement();
    if ((st = mpcl_tensor_create(ctx, storage, batch, mp.inputs, &tr->x)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, ytype, batch, ycols, &tr->labels)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, MPCL_DTYPE_I32, tr->train_count, 1, &tr->order)) != MPCL_OK ||
        (test_ds &&
         ((st = mpcl_tensor_create(ctx, MPCL_DTYPE_I32, tr->test_count, 1, &tr->test_order)) !=
              MPCL_OK ||
          (st = mpcl_tensor_upload_i32(tr->test_order, iota, tr->test_count)) != MPCL_OK)) ||
        (st = mpcl_device_dataset_place(ctx, train_ds, placement, &tr->train)) != MPCL_OK ||
        (test_ds &&
         (st = mpcl_device_dataset_place(ctx, test_ds, placement, &tr->test)) != MPCL_OK))
        goto cleanup;
    mpcl__replica *r0 = &tr->rep[0];
    r0->train = tr->train;
    r0->order = tr->order;
    r0->x = tr->x;
    r0->labels = tr->labels;
    /* The other replicas: their own copy of the training data, and batch
     * buffers for a slice (at most the whole batch). */
    for (size_t r = 1; r < tr->replicas; r++) {
        mpcl__replica *R = &tr->rep[r];
        if ((st = mpcl_tensor_create(R->ctx, storage, batch, mp.inputs, &R->x)) != MPCL_OK ||
            (st = mpcl_tensor_create(R->ctx, ytype, batch, ycols, &R->labels)) != MPCL_OK ||
            (st = mpcl_tensor_create(R->ctx, MPCL_DTYPE_I32, tr->train_count, 1, &R->order)) !=
                MPCL_OK ||
            (st = mpcl_device_dataset_place(R->ctx, train_ds, placement, &R->train)) != MPCL_OK)
            goto cleanup;
    }

cleanup:
    free(early_msg);
    mpcl_dataset_destroy(train);
    mpcl_dataset_destroy(test);
    if (st != MPCL_OK) {
        mpcl_trainer_destroy(tr);
        return st;
    }
    *out = tr;
    return MPCL_OK;
}

void mpcl_trainer_destroy(mpcl_trainer *tr) {
    if (!tr) return;
    for (size_t r = 1; r < tr->replicas; r++) {
        mpcl__replica *R = &tr->rep[r];
        mpcl_tensor_destroy(R->x);
        mpcl_tensor_destroy(R->labels);
        mpcl_tensor_destroy(R->order);
        mpcl_device_dataset_destroy(R->train);
        mpcl_token_stream_destroy(R->stream);
        mpcl_model_destroy(R->model);
    }
    mpcl_tensor_destroy(tr->x);
    mpcl_tensor_destroy(tr->labels);
    mpcl_tensor_destroy(tr->order);
    mpcl_tensor_destroy(tr->test_order);
    mpcl_device_dataset_destroy(tr->train);
    mpcl_device_dataset_destroy(tr->test);
    mpcl_token_stream_destroy(tr->stream);
    mpcl_model_destroy(tr->model);
    free(tr->host_order);
    free(tr->test_host_order);
    free(tr->data_dir);
    free(tr->save_path);
    free(tr);
}

mpcl_model *mpcl_trainer_model(const mpcl_trainer *tr) {
    return tr->model;
}

mpcl_model *mpcl_trainer_replica_model(const mpcl_trainer *tr, size_t r) {
    return r < tr->replicas ? tr->models[r] : NULL;
}

const char *mpcl_trainer_plan_note(const mpcl_trainer *tr) {
    return tr->plan_note;
}

mpcl_status mpcl_trainer_evaluate(mpcl_trainer *tr, double *loss, double *accuracy) {
    if (!tr->test && !(tr->stream && tr->test_count))
        return MPCL_ERROR(tr->ctx, MPCL_ERR_INVALID_ARG, "this trainer has no test data");
    size_t batch = tr->params.batch;
    mpcl_status st = tr->stream ? mpcl__train_tokens_evaluate(tr) : MPCL_OK;
    for (size_t first = 0; !tr->stream && first < tr->test_count && st == MPCL_OK; first += batch) {
        size_t B = tr->test_count - first < batch ? tr->test_count - first : batch;
        mpcl_tensor x = mpcl__tensor_rows(tr->x, B), y = mpcl__tensor_rows(tr->labels, B);
        st = mpcl_device_dataset_batch(tr->ctx, tr->test, tr->test_order, tr->test_host_order,
                                       first, &x, &y);
        if (st == MPCL_OK) st = mpcl_model_eval_step(tr->model, &x, &y);
    }
    /* Read (and so reset) even after a failure, so the next evaluation starts
     * from zero. */
    mpcl_loss_stats s;
    mpcl_status rst = mpcl_model_read_eval_stats(tr->model, &s, true);
    if (st != MPCL_OK) return st;
    if (rst != MPCL_OK) return rst;
    double n = s.terms ? (double)s.terms : (double)NAN;
    if (loss) *loss = s.loss_sum / n;
    if (accuracy) *accuracy = s.metric_sum / n;
    return MPCL_OK;
}

/* Reads the loss scaler's state into the trainer (blocking). */
static mpcl_status read_scale(mpcl_trainer *tr) {
    mpcl_loss_scale *ls = mpcl_model_loss_scale(tr->model);
    if (!ls) return MPCL_OK;
    mpcl_loss_scale_state s;
    mpcl_status st = mpcl_loss_scale_read(tr->ctx, ls, &s);
    if (st != MPCL_OK) return st;
    tr->loss_scale = s.scale;
    tr->skipped_steps = s.skipped_steps;
    return MPCL_OK;
}

typedef struct fit_clock {
    double start;     /* fit started */
    double mark;      /* training time counts from here */
    double last;      /* the last report */
    uint64_t samples; /* since the last report */
} fit_clock;

/* A non-finite training loss in a run without loss scaling: the weights are
 * gone (Keras' TerminateOnNaN). With scaling, such steps are skipped. */
static void check_divergence(mpcl_trainer *tr, double loss) {
    if (!isfinite(loss) && !mpcl_model_loss_scale(tr->model)) tr->diverged = true;
}

/* The training statistics since the last read, over every replica. */
static mpcl_status read_train_stats(mpcl_trainer *tr, mpcl_loss_stats *s) {
    if (tr->dist) return mpcl_dist_read_train_stats(tr->dist, tr->models, s);
    return mpcl_model_read_train_stats(tr->model, s, true);
}

/* The host reads of one report: training statistics since the last one, the
 * loss scaler, and at an epoch's end the evaluation. */
static mpcl_status report(mpcl_trainer *tr, fit_clock *c, bool epoch_end) {
    mpcl_loss_stats s;
    mpcl_status st = read_train_stats(tr, &s);
    if (st == MPCL_OK) st = read_scale(tr);
    /* The replicas were handed identical arenas at every step, so their
     * weights must agree bit for bit: checked once per epoch. */
    if (st == MPCL_OK && epoch_end && tr->dist) st = mpcl_dist_check_weights(tr->dist, tr->models);
    if (st != MPCL_OK) return st;
    double t = now_s();
    tr->train_seconds += t - c->mark;
    mpcl_train_report r;
    memset(&r, 0, sizeof r);
    r.step = tr->step;
    r.epoch = tr->epoch;
    r.epoch_step = tr->epoch_step;
    r.epoch_steps = tr->steps_per_epoch;
    double n = s.terms ? (double)s.terms : (double)NAN;
    r.loss = s.loss_sum / n;
    r.accuracy = s.metric_sum / n;
    r.loss_scale = tr->loss_scale;
    r.skipped = tr->skipped_steps;
    r.lr = tr->lr;
    r.grad_norm = NAN;
    if (mpcl_model_params_of(tr->model)->optim.clip_norm > 0.0f) {
        float norm;
        if ((st = mpcl_model_read_grad_norm(tr->model, &norm)) != MPCL_OK) return st;
        r.grad_norm = norm;
    }
    r.samples_per_s = t > c->last ? (double)c->samples / (t - c->last) : 0.0;
    r.epoch_end = epoch_end;
    r.test_loss = NAN;
    r.test_accuracy = NAN;
    if (epoch_end && tr->test_count) {
        if ((st = mpcl_trainer_evaluate(tr, &r.test_loss, &r.test_accuracy)) != MPCL_OK) return st;
        tr->evaluated = true;
        tr->test_loss = r.test_loss;
        tr->test_accuracy = r.test_accuracy;
    }
    check_divergence(tr, r.loss);
    r.elapsed_s = now_s() - c->start;
    if (tr->params.on_report) tr->params.on_report(tr->params.user, &r);
    c->samples = 0;
    c->last = c->mark = now_s();
    return MPCL_OK;
}

static bool stop_requested(const mpcl_trainer *tr) {
    return tr->params.stop && *tr->params.stop != 0;
}

/* Under MPI every rank must stop at the same step (a rank that stopped
 * alone would leave the others waiting in the next all-reduce): the flags
 * are OR-ed over the ranks, one small all-reduce per step. */
static bool stop_agreed(const mpcl_trainer *tr) {
    double v = stop_requested(tr) ? 1.0 : 0.0;
    if (tr->dist && mpcl_dist_is_mpi(tr->dist)) mpcl_dist_sum_f64(tr->dist, tr->ctx, &v, 1);
    return v > 0;
}

/* Markers after the last MPCL_TRAIN_QUEUE_AHEAD steps: before a step is
 * enqueued, the host waits for the one that many steps back, so a stop
 * request is honoured within that many steps however long a report interval
 * is. A wait on an event, not a read: the device never idles for it while a
 * step is still queued. */
typedef struct step_ring {
    cl_event ev[MPCL_TRAIN_QUEUE_AHEAD];
    size_t next;
} step_ring;

static mpcl_status ring_wait_slot(mpcl_context *ctx, step_ring *r) {
    cl_event e = r->ev[r->next];
    r->ev[r->next] = NULL;
    return e ? mpcl__wait_event(ctx, e) : MPCL_OK;
}

static mpcl_status ring_mark(mpcl_context *ctx, step_ring *r) {
    mpcl_status st = mpcl__marker(ctx, &r->ev[r->next]);
    if (st == MPCL_OK) r->next = (r->next + 1) % MPCL_TRAIN_QUEUE_AHEAD;
    return st;
}

static void ring_release(step_ring *r) {
    for (size_t i = 0; i < MPCL_TRAIN_QUEUE_AHEAD; i++)
        if (r->ev[i]) clReleaseEvent(r->ev[i]);
}

/* A save point of the periodic checkpoints, at a normalised position
 * (epoch_step < steps_per_epoch). */
static bool save_due(const mpcl_trainer *tr, bool epoch_end) {
    const mpcl_train_params *p = &tr->params;
    if (!p->save_path) return false;
    return (p->save_every_steps && tr->step % p->save_every_steps == 0) ||
           (p->save_every_epochs && epoch_end && tr->epoch % p->save_every_epochs == 0);
}

/* Every replica's lr for the step about to run: the schedule at the host
 * step count (a step the loss scaler will skip counts too), the same on
 * every replica and every rank. */
static mpcl_status set_step_lr(mpcl_trainer *tr) {
    const mpcl_model_params *mp = mpcl_model_params_of(tr->model);
    float lr = mpcl_lr_at(&mp->lr_schedule, mp->optim.lr, tr->step);
    mpcl_status st = MPCL_OK;
    for (size_t r = 0; r < tr->replicas && st == MPCL_OK; r++)
        st = mpcl_model_set_lr(tr->models[r], lr);
    if (st == MPCL_OK) tr->lr = lr;
    return st;
}

/* One step on the global batch of B rows at `first` of the epoch's order.
 * Data parallel: each replica gathers its slice from its own copy of the
 * data, and its loss gradient is divided by the global B (not its slice's
 * rows), so that the all-reduced sum of the replicas' arenas is the global
 * batch's gradient (mpcl_model_forward_slice); then every replica applies
 * the same sum. */
static mpcl_status train_step(mpcl_trainer *tr, size_t first, size_t B) {
    mpcl_status st = set_step_lr(tr);
    if (st == MPCL_OK && tr->stream) return mpcl__train_tokens_step(tr);
    if (st == MPCL_OK && !tr->dist) {
        mpcl_tensor x = mpcl__tensor_rows(tr->x, B), y = mpcl__tensor_rows(tr->labels, B);
        st =
            mpcl_device_dataset_batch(tr->ctx, tr->train, tr->order, tr->host_order, first, &x, &y);
        if (st == MPCL_OK) st = mpcl_model_train_step(tr->model, &x, &y);
        return st;
    }
    size_t base = mpcl_dist_first_replica(tr->dist);
    for (size_t r = 0; r < tr->replicas && st == MPCL_OK; r++) {
        mpcl__replica *R = &tr->rep[r];
        size_t off, rows;
        mpcl_dist_slice(tr->dist, base + r, B, &off, &rows);
        mpcl_tensor x = mpcl__tensor_rows(R->x, rows), y = mpcl__tensor_rows(R->labels, rows);
        st = mpcl_device_dataset_batch(R->ctx, R->train, R->order, tr->host_order, first + off, &x,
                                       &y);
        if (st == MPCL_OK) st = mpcl_model_forward_slice(R->model, &x, &y, B);
        if (st == MPCL_OK) st = mpcl_model_backward(R->model);
        if (st == MPCL_OK) tr->local_samples += rows;
    }
    if (st == MPCL_OK) st = mpcl_dist_allreduce_grads(tr->dist, tr->models);
    for (size_t r = 0; r < tr->replicas && st == MPCL_OK; r++) st = mpcl_model_apply(tr->models[r]);
    return st;
}

/* Whether the run has done all its steps: its epochs, or a token run's
 * steps (whose last interval may be short of an epoch). */
static bool run_done(const mpcl_trainer *tr) {
    return tr->epoch >= tr->params.epochs || (tr->stream && tr->step >= tr->total_steps);
}

mpcl_status mpcl_trainer_fit(mpcl_trainer *tr) {
    fit_clock c;
    c.start = c.mark = c.last = now_s();
    c.samples = 0;
    tr->stopped = false;
    size_t batch = tr->params.batch, n = tr->train_count;
    uint32_t every = tr->params.report_every;
    uint64_t since = 0;
    step_ring ring;
    memset(&ring, 0, sizeof ring);
    /* Start the statistics from zero whatever an earlier failed call left. */
    mpcl_loss_stats s;
    mpcl_status st = mpcl__train_check_same_job(tr);
    if (st == MPCL_OK) st = read_train_stats(tr, &s);
    while (st == MPCL_OK && !run_done(tr) && !tr->stopped) {
        if (!tr->stream && (!tr->order_valid || tr->order_epoch != tr->epoch)) {
            tr->order_valid = false;
            if (tr->params.shuffle)
                mpcl__train_epoch_order(tr->params.seed, tr->epoch, tr->host_order, n);
            else
                mpcl_iota_indices(tr->host_order, n);
            for (size_t r = 0; r < tr->replicas && st == MPCL_OK; r++)
                st = mpcl_tensor_upload_i32(tr->rep[r].order, tr->host_order, n);
            if (st != MPCL_OK) break;
            tr->order_valid = true;
            tr->order_epoch = tr->epoch;
        }
        if ((st = ring_wait_slot(tr->ctx, &ring)) != MPCL_OK) break;
        if (stop_agreed(tr)) {
            tr->stopped = true;
            break;
        }
        size_t first = (size_t)tr->epoch_step * batch;
        size_t B = tr->stream || n - first >= batch ? batch : n - first;
        st = train_step(tr, first, B);
        if (st == MPCL_OK) st = ring_mark(tr->ctx, &ring);
        if (st != MPCL_OK) break;
        tr->step++;
        tr->epoch_step++;
        /* A token step takes its micro-batches' windows. */
        size_t rows = tr->stream ? B * tr->accum : B;
        tr->train_samples += rows;
        c.samples += rows;
        since++;
        /* A token run's last interval ends with its steps, evaluated like
         * an epoch's end, but the position stays inside the epoch (a
         * checkpoint's step is epoch * steps per epoch + epoch_step). */
        bool epoch_done = tr->epoch_step == tr->steps_per_epoch;
        bool end = epoch_done || (tr->stream && tr->step == tr->total_steps);
        if (end || (every && since == every)) {
            since = 0;
            if ((st = report(tr, &c, end)) != MPCL_OK) break;
        }
        if (epoch_done) {
            tr->epoch++;
            tr->epoch_step = 0;
        }
        /* A save point is a report too: the loss it reads says whether the
         * state is worth saving. */
        bool save = save_due(tr, end);
        if (save && since > 0) {
            since = 0;
            if ((st = report(tr, &c, false)) != MPCL_OK) break;
        }
        if (tr->diverged && !tr->params.keep_going_on_nan) {
            tr->stopped = !run_done(tr);
            break;
        }
        if (save && !tr->diverged) {
            tr->train_seconds += now_s() - c.mark;
            if ((st = mpcl_trainer_save(tr, tr->params.save_path)) != MPCL_OK) break;
            c.mark = c.last = now_s();
        }
    }
    ring_release(&ring);
    /* Steps since the last report are reported before returning, so that no
     * training statistics are lost to a stop. */
    if (st == MPCL_OK && since > 0) st = report(tr, &c, false);
    if (st == MPCL_OK) st = read_scale(tr);
    tr->seconds += now_s() - c.start;
    return st;
}

void mpcl_trainer_summary(const mpcl_trainer *tr, mpcl_train_summary *out) {
    memset(out, 0, sizeof *out);
    out->steps = tr->step;
    out->epochs_done = tr->epoch;
    out->stopped = tr->stopped;
    out->diverged = tr->diverged;
    out->evaluated = tr->evaluated;
    out->test_loss = tr->test_loss;
    out->test_accuracy = tr->test_accuracy;
    out->train_samples_per_s =
        tr->train_seconds > 0 ? (double)tr->train_samples / tr->train_seconds : 0.0;
    out->seconds = tr->seconds;
    out->skipped_steps = tr->skipped_steps;
    out->final_loss_scale = tr->loss_scale;
    out->final_lr = tr->lr;
    out->peak_device_bytes = mpcl_context_bytes_peak(tr->ctx);
    out->world_size = tr->dist ? mpcl_dist_world_size(tr->dist) : 1;
    uint64_t mine = tr->dist ? tr->local_samples : tr->train_samples;
    out->replica_samples_per_s = tr->train_seconds > 0 ? (double)mine / tr->train_seconds : 0.0;
    out->allreduce_bytes_per_step =
        tr->dist && out->world_size > 1 ? mpcl_dist_allreduce_bytes(tr->dist, tr->model) : 0;
    out->allreduce_seconds = tr->dist ? mpcl_dist_allreduce_seconds(tr->dist) : 0.0;
}
