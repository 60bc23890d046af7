/* Losses: the table of losses, the launcher of their kernels (cl/loss.cl,
 * cl/loss_dense.cl) and the statistics accumulator they share (its layout:
 * MPCL_ABI_LOSS_STAT_* in cl/abi.h). Every launch is checked completely
 * before it is enqueued, so a rejected call leaves its outputs untouched.
 *
 * A new loss is one row below and its kernel (cl/loss_dense.cl for a float
 * target per element), plus its code in mpcl_loss and cl/abi.h. */
#include <math.h>
#include <string.h>

#include "compute/compute.h"

_Static_assert(MPCL_ABI_LOSS_STAT_WORDS <= MPCL_LOSS_STATS_COLS, "stats layout exceeds the tensor");
_Static_assert(MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY == MPCL_ABI_LOSS_SPARSE_XENT &&
                   MPCL_LOSS_BINARY_CROSSENTROPY == MPCL_ABI_LOSS_BINARY_XENT &&
                   MPCL_LOSS_MSE == MPCL_ABI_LOSS_MSE && MPCL_LOSS_COUNT == MPCL_ABI_LOSS_COUNT,
               "enum mpcl_loss differs from the MPCL_ABI_LOSS_* codes of cl/abi.h");

typedef struct loss_row {
    const char *name;       /* Keras' name */
    const char *metric;     /* the metric's Keras name */
    const char *kernel;     /* every loss kernel takes the same arguments (loss_launch) */
    const char *wide;       /* the kernel for rows of XENT_WIDE_COLS or more, if another */
    const char *shared;     /* the same with a row per work-group (shared_rows), if any */
    bool sparse;            /* targets: labels [B, 1] i32, else [B, C] f32 */
    const char *target;     /* what a good target is, for the bad-target error */
    mpcl_activation output; /* the activation the kernel applies to its input */
} loss_row;

static const loss_row loss_table[MPCL_LOSS_COUNT] = {
    [MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY] = {"sparse_categorical_crossentropy", "accuracy",
                                                   "mpcl_softmax_xent", "mpcl_softmax_xent_wide",
                                                   "mpcl_softmax_xent_shared", true,
                                                   "a label in [0, classes)", MPCL_ACT_SOFTMAX},
    [MPCL_LOSS_BINARY_CROSSENTROPY] = {"binary_crossentropy", "binary_accuracy", "mpcl_binary_xent",
                                       NULL, NULL, false, "a number in [0, 1]", MPCL_ACT_SIGMOID},
    [MPCL_LOSS_MSE] = {"mse", "mae", "mpcl_mse", NULL, NULL, false, "a finite number",
                       MPCL_ACT_IDENTITY},
};

/* From this many classes on, the softmax takes a row per work-item, its
 * classes as vectors (cl/loss.cl's mpcl_softmax_xent_wide); below, eight
 * rows as the lanes of one vector. */
#define XENT_WIDE_COLS 32

/* Whether wide rows take the shared-rows kernel, a work-group's items
 * sharing each row (MPCL_XENT=group; unset, off CPUs): a row an item gives
 * a GPU a few groups for a language model's batch, a CPU's cores already
 * one row each. */
static bool shared_rows(mpcl_context *ctx) {
    const char *v = mpcl__env_value(MPCL_ENV_XENT);
    if (v) return strcmp(v, "group") == 0;
    return mpcl_context_device(ctx)->type != MPCL_DEVICE_TYPE_CPU;
}

static bool loss_known(mpcl_loss loss) {
    return (int)loss >= 0 && loss < MPCL_LOSS_COUNT;
}

const char *mpcl_loss_name(mpcl_loss loss) {
    return loss_known(loss) ? loss_table[loss].name : "unknown";
}

bool mpcl_loss_parse(const char *name, mpcl_loss *out) {
    if (!name) return false;
    for (int i = 0; i < MPCL_LOSS_COUNT; i++) {
        if (strcmp(name, loss_table[i].name) == 0) {
            *out = (mpcl_loss)i;
            return true;
        }
    }
    return false;
}

const char *mpcl_loss_metric_name(mpcl_loss loss) {
    return loss_known(loss) ? loss_table[loss].metric : "unknown";
}

bool mpcl_loss_sparse_targets(mpcl_loss loss) {
    return loss_known(loss) && loss_table[loss].sparse;
}

mpcl_activation mpcl_loss_output_activation(mpcl_loss loss) {
    return loss_known(loss) ? loss_table[loss].output : MPCL_ACT_IDENTITY;
}

/* ---- statistics ---- */

mpcl_status mpcl_loss_stats_create(mpcl_context *ctx, mpcl_tensor **out) {
    /* mpcl_tensor_create zero-fills, which is the reset state. */
    return mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 1, MPCL_LOSS_STATS_COLS, out);
}

static mpcl_status check_stats(mpcl_context *ctx, const mpcl_tensor *stats, const char *op) {
    TRY(mpcl__check_present(ctx, stats, op, "stats"));
    TRY(mpcl__check_dtype(ctx, stats, MPCL_DTYPE_F32, op, "stats"));
    return mpcl__check_shape(ctx, stats, 1, MPCL_LOSS_STATS_COLS, op, "stats");
}

mpcl_status mpcl_loss_stats_reset(mpcl_context *ctx, mpcl_tensor *stats) {
    TRY(check_stats(ctx, stats, "mpcl_loss_stats_reset"));
    const cl_uint zero = 0;
    return mpcl__fill_buffer(ctx, stats->mem, &zero, sizeof zero, stats->bytes, NULL);
}

/* A Kahan pair: sum - comp is the better estimate. */
static double kahan_value(const uint32_t *w, int sum_word, int comp_word) {
    float sum, comp;
    memcpy(&sum, &w[sum_word], sizeof sum);
    memcpy(&comp, &w[comp_word], sizeof comp);
    return (double)sum - (double)comp;
}

/* The stats words as the public record. */
static void decode_stats(const uint32_t *w, mpcl_loss_stats *out) {
    memset(out, 0, sizeof *out);
    uint32_t kind = w[MPCL_ABI_LOSS_STAT_KIND];
    out->loss = kind >= 1 && kind <= MPCL_LOSS_COUNT ? (mpcl_loss)(kind - 1) : MPCL_LOSS_COUNT;
    out->loss_sum = kahan_value(w, MPCL_ABI_LOSS_STAT_LOSS, MPCL_ABI_LOSS_STAT_LOSS_COMP);
    /* A loss adds to one of the two metric sums; the other stays 0. */
    out->metric_sum = (double)w[MPCL_ABI_LOSS_STAT_CORRECT] +
                      kahan_value(w, MPCL_ABI_LOSS_STAT_METRIC, MPCL_ABI_LOSS_STAT_METRIC_COMP);
    out->terms = w[MPCL_ABI_LOSS_STAT_TERMS];
    out->samples = w[MPCL_ABI_LOSS_STAT_SAMPLES];
    out->calls = w[MPCL_ABI_LOSS_STAT_CALLS];
    out->bad = w[MPCL_ABI_LOSS_STAT_BAD];
    out->bad_call = out->bad ? (int64_t)w[MPCL_ABI_LOSS_STAT_BAD_CALL] : -1;
    out->bad_row = out->bad ? (int64_t)w[MPCL_ABI_LOSS_STAT_BAD_ROW] : -1;
    out->bad_col = out->bad ? (int64_t)w[MPCL_ABI_LOSS_STAT_BAD_COL] : -1;
    out->bad_target = -1;
    if (out->bad && mpcl_loss_sparse_targets(out->loss)) {
        out->bad_target = (int32_t)w[MPCL_ABI_LOSS_STAT_BAD_TARGET];
    } else if (out->bad) {
        float t;
        memcpy(&t, &w[MPCL_ABI_LOSS_STAT_BAD_TARGET], sizeof t);
        out->bad_target = t;
    }
}

static mpcl_status bad_target_error(mpcl_context *ctx, const mpcl_loss_stats *s) {
    if (mpcl_loss_sparse_targets(s->loss))
        return MPCL_ERROR(ctx, MPCL_ERR_LABEL,
                          "%llu row(s) with a label out of range; the first: label %.0f in row "
                          "%lld of loss call %lld since the last reset",
                          (unsigned long long)s->bad, s->bad_target, (long long)s->bad_row,
                          (long long)s->bad_call);
    return MPCL_ERROR(ctx, MPCL_ERR_LABEL,
                      "%llu row(s) with a bad %s target (want %s); the first: %.9g in row %lld, "
                      "column %lld of loss call %lld since the last reset",
                      (unsigned long long)s->bad, mpcl_loss_name(s->loss),
                      loss_known(s->loss) ? loss_table[s->loss].target : "?", s->bad_target,
                      (long long)s->bad_row, (long long)s->bad_col, (long long)s->bad_call);
}

mpcl_status mpcl_loss_stats_read(mpcl_context *ctx, mpcl_tensor *stats, mpcl_loss_stats *out,
                                 bool reset) {
    TRY(check_stats(ctx, stats, "mpcl_loss_stats_read"));
    uint32_t w[MPCL_LOSS_STATS_COLS];
    mpcl_status st = MPCL_OK;
    ctx->syncs++;
    CHECK_CL(ctx,
             clEnqueueReadBuffer(ctx->queue, stats->mem, CL_TRUE, 0, sizeof w, w, 0, NULL, NULL));
    decode_stats(w, out);
    if (reset) TRY(mpcl_loss_stats_reset(ctx, stats));
    if (out->bad) return bad_target_error(ctx, out);
cleanup:
    return st;
}

/* ---- launches ---- */

static mpcl_status check_loss_args(mpcl_context *ctx, const char *op, mpcl_loss loss,
                                   const mpcl_tensor *stats, const mpcl_tensor *d_pred,
                                   const mpcl_tensor *pred, const mpcl_tensor *targets,
                                   const mpcl_tensor *scale, size_t grad_rows) {
    if (!loss_known(loss))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: unknown loss %d", op, (int)loss);
    const loss_row *row = &loss_table[loss];
    TRY(check_stats(ctx, stats, op));
    TRY(mpcl__check_present(ctx, pred, op, "logits"));
    TRY(mpcl__check_present(ctx, targets, op, row->sparse ? "labels" : "targets"));
    if (d_pred) TRY(mpcl__check_present(ctx, d_pred, op, "d_logits"));
    if (scale) TRY(mpcl__check_present(ctx, scale, op, "scale"));
    TRY(mpcl__check_storage(ctx, pred, op, "logits"));
    if (row->sparse) {
        TRY(mpcl__check_dtype(ctx, targets, MPCL_DTYPE_I32, op, "labels"));
        TRY(mpcl__check_shape(ctx, targets, pred->rows, 1, op, "labels"));
    } else {
        TRY(mpcl__check_dtype(ctx, targets, MPCL_DTYPE_F32, op, "targets"));
        TRY(mpcl__check_shape(ctx, targets, pred->rows, pred->cols, op, "targets"));
    }
    if (d_pred) TRY(mpcl__check_dtype(ctx, d_pred, pred->dtype, op, "d_logits"));
    if (scale) TRY(mpcl__check_dtype(ctx, scale, MPCL_DTYPE_F32, op, "scale"));
    if (d_pred) TRY(mpcl__check_shape(ctx, d_pred, pred->rows, pred->cols, op, "d_logits"));
    if (scale) TRY(mpcl__check_shape(ctx, scale, 1, 1, op, "scale"));
    TRY(mpcl__check_count(ctx, pred, op));
    if (grad_rows < pred->rows || grad_rows > UINT32_MAX)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: gradient divisor %zu for %zu rows", op,
                          grad_rows, pred->rows);
    return MPCL_OK;
}

/* Where a launch sits in its call: a whole call (0, true), or a chunk of
 * rows starting at row0 (mpcl__loss_chunk). */
typedef struct loss_part {
    size_t row0;
    bool ends_call;
} loss_part;
static const loss_part WHOLE_CALL = {0, true};

/* Without d_pred the forward alone (the kernel writes no gradient).
 * grad_rows: the B the gradient is divided by (the rows of pred, or a
 * data-parallel replica's global batch). */
static mpcl_status loss_launch(mpcl_context *ctx, const char *op, mpcl_loss loss,
                               mpcl_tensor *stats, mpcl_tensor *d_pred, const mpcl_tensor *pred,
                               const mpcl_tensor *targets, const mpcl_tensor *scale,
                               size_t grad_rows, loss_part part) {
    TRY(check_loss_args(ctx, op, loss, stats, d_pred, pred, targets, scale, grad_rows));
    if (part.row0 > UINT32_MAX - pred->rows)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: a chunk at row %zu: past 2^32 rows", op,
                          part.row0);
    const loss_row *row = &loss_table[loss];
    const char *name = row->kernel;
    size_t group_rows = MPCL_ABI_LOSS_GROUP_ROWS;
    if (row->wide && pred->cols >= XENT_WIDE_COLS) {
        name = row->wide;
        if (row->shared && shared_rows(ctx))
            name = row->shared, group_rows = MPCL_ABI_LOSS_SHARED_ROWS;
    }
    cl_kernel k;
    TRY(mpcl__kernel(ctx, pred->dtype, name, &k));
    cl_uint rows = (cl_uint)pred->rows, cols = (cl_uint)pred->cols;
    cl_uint divisor = (cl_uint)grad_rows;
    cl_float scale_value = 1.0f;
    cl_int use_scale_buf = scale != NULL, write_grad = d_pred != NULL;
    cl_uint row0 = (cl_uint)part.row0, ends_call = part.ends_call;
    /* A group per group_rows rows (cl/loss.cl); with more than one, their
     * partials, then mpcl_loss_finish. */
    size_t groups = (pred->rows + group_rows - 1) / group_rows;
    cl_mem partials = stats->mem; /* a stand-in for one group, which writes none */
    if (groups > 1)
        TRY(mpcl__workspace(ctx, MPCL__WORKSPACE_LOSS_PARTIALS,
                            groups * MPCL_ABI_LOSS_PART_WORDS * sizeof(cl_uint), &partials));
    /* Arguments the kernel does not touch get a stand-in buffer. */
    cl_mem d_mem = d_pred ? d_pred->mem : pred->mem;
    cl_mem scale_mem = scale ? scale->mem : stats->mem;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(stats->mem), MPCL_ARG(d_mem), MPCL_ARG(pred->mem),
                       MPCL_ARG(targets->mem), MPCL_ARG(rows), MPCL_ARG(divisor), MPCL_ARG(cols),
                       MPCL_ARG(scale_mem), MPCL_ARG(scale_value), MPCL_ARG(use_scale_buf),
                       MPCL_ARG(write_grad), MPCL_ARG(partials), MPCL_ARG(row0),
                       MPCL_ARG(ends_call), MPCL_ARGS_END));
    TRY(mpcl__launch_1d(ctx, k, name, groups * MPCL_ABI_LOSS_WG, MPCL_ABI_LOSS_WG));
    if (groups == 1) return MPCL_OK;
    static const char finish[] = "mpcl_loss_finish";
    TRY(mpcl__kernel(ctx, pred->dtype, finish, &k));
    cl_uint n = (cl_uint)groups, kind = (cl_uint)loss;
    TRY(mpcl__set_args(ctx, k, finish, MPCL_ARG(stats->mem), MPCL_ARG(partials), MPCL_ARG(n),
                       MPCL_ARG(kind), MPCL_ARG(ends_call), MPCL_ARGS_END));
    return mpcl__launch_1d(ctx, k, finish, 1, 1);
}

mpcl_status mpcl_loss_forward(mpcl_context *ctx, mpcl_loss loss, mpcl_tensor *stats,
                              const mpcl_tensor *pred, const mpcl_tensor *targets) {
    return loss_launch(ctx, "mpcl_loss_forward", loss, stats, NULL, pred, targets, NULL,
                       pred ? pred->rows : 0, WHOLE_CALL);
}

/* The training calls require d_pred: without it the kernel would skip the
 * gradient silently. */
static mpcl_status loss_forward_backward(mpcl_context *ctx, const char *op, mpcl_loss loss,
                                         mpcl_tensor *stats, mpcl_tensor *d_pred,
                                         const mpcl_tensor *pred, const mpcl_tensor *targets,
                                         const mpcl_tensor *scale, size_t grad_rows) {
    if (!d_pred) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: d_logits is NULL", op);
    return loss_launch(ctx, op, loss, stats, d_pred, pred, targets, scale, grad_rows, WHOLE_CALL);
}

mpcl_status mpcl_loss_forward_backward(mpcl_context *ctx, mpcl_loss loss, mpcl_tensor *stats,
                                       mpcl_tensor *d_pred, const mpcl_tensor *pred,
                                       const mpcl_tensor *targets, const mpcl_tensor *scale) {
    return loss_forward_backward(ctx, "mpcl_loss_forward_backward", loss, stats, d_pred, pred,
                                 targets, scale, pred ? pred->rows : 0);
}

mpcl_status mpcl__loss_forward_backward_rows(mpcl_context *ctx, mpcl_loss loss, mpcl_tensor *stats,
                                             mpcl_tensor *d_pred, const mpcl_tensor *pred,
                                             const mpcl_tensor *targets, const mpcl_tensor *scale,
                                             size_t grad_rows) {
    return loss_forward_backward(ctx, "mpcl_loss_forward_backward", loss, stats, d_pred, pred,
                                 targets, scale, grad_rows);
}

mpcl_status mpcl__loss_chunk(mpcl_context *ctx, mpcl_loss loss, mpcl_tensor *stats,
                             mpcl_tensor *d_pred, const mpcl_tensor *pred,
                             const mpcl_tensor *targets, const mpcl_tensor *scale, size_t grad_rows,
                             size_t row0, bool ends_call) {
    return loss_launch(ctx, "mpcl__loss_chunk", loss, stats, d_pred, pred, targets, scale,
                       d_pred ? grad_rows : (pred ? pred->rows : 0), (loss_part){row0, ends_call});
}

/* ---- softmax cross-entropy: the older names ---- */

mpcl_status mpcl_xent_stats_create(mpcl_context *ctx, mpcl_tensor **out) {
    return mpcl_loss_stats_create(ctx, out);
}

mpcl_status mpcl_xent_stats_reset(mpcl_context *ctx, mpcl_tensor *stats) {
    return mpcl_loss_stats_reset(ctx, stats);
}

mpcl_status mpcl_xent_stats_read(mpcl_context *ctx, mpcl_tensor *stats, mpcl_xent_stats *out,
                                 bool reset) {
    mpcl_loss_stats s;
    mpcl_status st = mpcl_loss_stats_read(ctx, stats, &s, reset);
    if (st != MPCL_OK && st != MPCL_ERR_LABEL) return st;
    *out = (mpcl_xent_stats){
        .loss_sum = s.loss_sum,
        .correct = (uint64_t)s.metric_sum,
        .samples = s.samples,
        .calls = s.calls,
        .bad = s.bad,
        .bad_call = s.bad_call,
        .bad_row = s.bad_row,
        .bad_label = s.bad ? (int64_t)s.bad_target : -1,
    };
    return st;
}

static const mpcl_loss sparse_xent = MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;

mpcl_status mpcl_softmax_xent_forward(mpcl_context *ctx, mpcl_tensor *stats,
                                      const mpcl_tensor *logits, const mpcl_tensor *labels) {
    return loss_launch(ctx, "mpcl_softmax_xent_forward", sparse_xent, stats, NULL, logits, labels,
                       NULL, logits ? logits->rows : 0, WHOLE_CALL);
}

mpcl_status mpcl_softmax_xent_forward_backward(mpcl_context *ctx, mpcl_tensor *stats,
                                               mpcl_tensor *d_logits, const mpcl_tensor *logits,
                                               const mpcl_tensor *labels,
                                               const mpcl_tensor *scale) {
    return loss_forward_backward(ctx, "mpcl_softmax_xent_forward_backward", sparse_xent, stats,
                                 d_logits, logits, labels, scale, logits ? logits->rows : 0);
}
