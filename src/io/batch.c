/* The data set on the device or streamed from the host, and the batch
 * gather. */
#include <stdio.h>
#include <stdlib.h>

#include "io/io.h"
#include "mpcl/batch.h"

enum { GATHER_ROW_ITEMS = 4, GATHER_GROUP_ROWS = 8 };

/* A streamed data set's staging of one batch: the rows gathered on the host
 * (x as floats, then as x's 16-bit dtype when it has one; labels or
 * targets), and the event of their uploads, which read them until it
 * completes (NULL: free). */
typedef struct stream_slot {
    float *x, *targets;
    uint16_t *x_bits;
    int32_t *labels;
    size_t rows; /* the largest batch the buffers take */
    cl_event uploaded;
} stream_slot;

/* Slots in turn, so that a batch is gathered while the uploads of the
 * batches before it are still queued behind their steps: a trainer keeps
 * at most MPCL_TRAIN_QUEUE_AHEAD (2) steps in flight, and a slot is only
 * refilled once its event has completed, so any count is safe and this one
 * rarely waits. */
enum { STREAM_SLOTS = 3 };

struct mpcl_device_dataset {
    size_t count, features, target_cols; /* target_cols 0 with labels */
    /* Held on the device (all NULL when streamed): */
    mpcl_tensor *x;       /* [count, features] u8, f32 or f16 */
    mpcl_tensor *labels;  /* [count, 1] i32, or NULL with targets */
    mpcl_tensor *targets; /* [count, target_cols] f32, or NULL with labels */
    /* Streamed (NULL when held): the host copy, and the staging slots,
     * used in turn (next). */
    mpcl_dataset *host;
    stream_slot slot[STREAM_SLOTS];
    size_t next;
};

/* The device dtype that holds ds's features as they are stored. */
static mpcl_dtype x_device_dtype(const mpcl_dataset *ds) {
    switch (mpcl_dataset_x_dtype(ds)) {
    case MPCL_NPY_F4: return MPCL_DTYPE_F32;
    case MPCL_NPY_F2: return MPCL_DTYPE_F16;
    default: return MPCL_DTYPE_U8;
    }
}

/* The sizes of ds's buffers on the device: features as stored, labels as
 * i32 or f32 targets. */
static void device_bytes(const mpcl_dataset *ds, double *x_bytes, double *y_bytes) {
    size_t n = mpcl_dataset_count(ds);
    size_t T = mpcl_dataset_target_cols(ds) ? mpcl_dataset_target_cols(ds) : 1;
    *x_bytes = (double)n * (double)mpcl_dataset_features(ds) *
               (double)mpcl_npy_dtype_size(mpcl_dataset_x_dtype(ds));
    *y_bytes = (double)n * (double)T * 4.0;
}

bool mpcl__data_fits(const mpcl_device_info *dev, size_t held, double x_bytes, double y_bytes) {
    double largest = x_bytes > y_bytes ? x_bytes : y_bytes;
    return largest <= (double)dev->max_alloc_bytes &&
           x_bytes + y_bytes <= (double)dev->global_mem_bytes - (double)held;
}

/* ds fits beside what ctx holds already. */
static bool fits(mpcl_context *ctx, const mpcl_dataset *ds) {
    double x_bytes, y_bytes;
    device_bytes(ds, &x_bytes, &y_bytes);
    return mpcl__data_fits(mpcl_context_device(ctx), mpcl_context_bytes_now(ctx), x_bytes, y_bytes);
}

/* The data must fit the device. Refused with the figures, before anything
 * is allocated. */
static mpcl_status check_fits(mpcl_context *ctx, const mpcl_dataset *ds) {
    if (fits(ctx, ds)) return MPCL_OK;
    const mpcl_device_info *dev = mpcl_context_device(ctx);
    double x_bytes, y_bytes;
    device_bytes(ds, &x_bytes, &y_bytes);
    return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY,
                      "the data set of %zu samples (%.0f bytes of %s features, %.0f of "
                      "targets) does not fit device '%s': its largest allocation is %llu bytes "
                      "and its global memory %llu, %zu of them in use; stream it "
                      "(MPCL_DATA=stream or auto), take fewer samples (--train-limit) or "
                      "smaller features (f16, u8)",
                      mpcl_dataset_count(ds), x_bytes,
                      mpcl_npy_dtype_name(mpcl_dataset_x_dtype(ds)), y_bytes, dev->name,
                      (unsigned long long)dev->max_alloc_bytes,
                      (unsigned long long)dev->global_mem_bytes, mpcl_context_bytes_now(ctx));
}

/* The labels as i32 [count, 1]. */
static mpcl_status upload_labels(mpcl_context *ctx, const mpcl_dataset *ds, mpcl_tensor **out) {
    size_t n = mpcl_dataset_count(ds);
    int32_t *labels = malloc(n * sizeof *labels);
    if (!labels)
        return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "staging the labels of %zu samples", n);
    for (size_t i = 0; i < n; i++) labels[i] = mpcl_dataset_labels(ds)[i];
    mpcl_status st = mpcl_tensor_create(ctx, MPCL_DTYPE_I32, n, 1, out);
    if (st == MPCL_OK) st = mpcl_tensor_upload_i32(*out, labels, n);
    free(labels);
    return st;
}

/* The buffers of ds on the device. */
static mpcl_status upload_all(mpcl_context *ctx, const mpcl_dataset *ds, mpcl_device_dataset *dd) {
    size_t n = dd->count, f = dd->features, T = dd->target_cols;
    mpcl_dtype xd = x_device_dtype(ds);
    mpcl_status st = mpcl_tensor_create(ctx, xd, n, f, &dd->x);
    if (st == MPCL_OK)
        st = mpcl_tensor_upload_raw(dd->x, mpcl_dataset_x(ds), n * f * mpcl_dtype_size(xd));
    if (st != MPCL_OK) return st;
    if (!T) return upload_labels(ctx, ds, &dd->labels);
    st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, n, T, &dd->targets);
    return st == MPCL_OK ? mpcl_tensor_upload_f32(dd->targets, mpcl_dataset_targets(ds), n * T)
                         : st;
}

mpcl_status mpcl_device_dataset_place(mpcl_context *ctx, const mpcl_dataset *ds,
                                      mpcl_data_placement placement, mpcl_device_dataset **out) {
    *out = NULL;
    bool stream = placement == MPCL_DATA_STREAM || (placement == MPCL_DATA_AUTO && !fits(ctx, ds));
    mpcl_status st = stream ? MPCL_OK : check_fits(ctx, ds);
    if (st != MPCL_OK) return st;
    mpcl_device_dataset *dd = calloc(1, sizeof *dd);
    if (!dd) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "a device data set");
    dd->count = mpcl_dataset_count(ds);
    dd->features = mpcl_dataset_features(ds);
    dd->target_cols = mpcl_dataset_target_cols(ds);
    if (!stream)
        st = upload_all(ctx, ds, dd);
    else if (mpcl_dataset_subset(ds, dd->count, &dd->host) != MPCL_OK)
        st = MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "a host copy of %zu samples to stream",
                        dd->count);
    if (st == MPCL_OK) {
        *out = dd;
        dd = NULL;
    }
    mpcl_device_dataset_destroy(dd);
    return st;
}

mpcl_status mpcl_device_dataset_create(mpcl_context *ctx, const mpcl_dataset *ds,
                                       mpcl_device_dataset **out) {
    return mpcl_device_dataset_place(ctx, ds, MPCL_DATA_DEVICE, out);
}

void mpcl_device_dataset_destroy(mpcl_device_dataset *dd) {
    if (!dd) return;
    mpcl_tensor_destroy(dd->x);
    mpcl_tensor_destroy(dd->labels);
    mpcl_tensor_destroy(dd->targets);
    mpcl_dataset_destroy(dd->host);
    for (size_t i = 0; i < STREAM_SLOTS; i++) {
        stream_slot *s = &dd->slot[i];
        if (s->uploaded) { /* the uploads read the staging until then */
            clWaitForEvents(1, &s->uploaded);
            clReleaseEvent(s->uploaded);
        }
        free(s->x);
        free(s->x_bits);
        free(s->targets);
        free(s->labels);
    }
    free(dd);
}

bool mpcl_device_dataset_streamed(const mpcl_device_dataset *dd) {
    return dd->host != NULL;
}
size_t mpcl_device_dataset_count(const mpcl_device_dataset *dd) {
    return dd->count;
}
size_t mpcl_device_dataset_features(const mpcl_device_dataset *dd) {
    return dd->features;
}
size_t mpcl_device_dataset_target_cols(const mpcl_device_dataset *dd) {
    return dd->target_cols;
}

/* The gather kernel for the stored features. */
static const char *gather_kernel_name(const mpcl_device_dataset *dd) {
    return dd->x->dtype == MPCL_DTYPE_F32   ? "mpcl_gather_batch_f32"
           : dd->x->dtype == MPCL_DTYPE_F16 ? "mpcl_gather_batch_f16"
                                            : "mpcl_gather_batch";
}

/* y[b] = targets[order[first + b]], all columns. */
static mpcl_status gather_targets(mpcl_context *ctx, const mpcl_device_dataset *dd,
                                  const mpcl_tensor *order, cl_uint first, mpcl_tensor *y) {
    cl_kernel k;
    mpcl_status st = mpcl__kernel(ctx, MPCL_DTYPE_F32, "mpcl_gather_targets", &k);
    if (st != MPCL_OK) return st;
    cl_uint cols = (cl_uint)y->cols, b32 = (cl_uint)y->rows;
    st = mpcl__set_args(ctx, k, "mpcl_gather_targets", MPCL_ARG(y->mem), MPCL_ARG(dd->targets->mem),
                        MPCL_ARG(order->mem), MPCL_ARG(first), MPCL_ARG(cols), MPCL_ARG(b32),
                        MPCL_ARGS_END);
    return st == MPCL_OK ? mpcl__launch_2d(ctx, k, "mpcl_gather_targets", y->cols, y->rows, NULL)
                         : st;
}

/* x and y fit dd's rows [first, first + B), B = x's rows, and order (when
 * not NULL) is dd's count of i32 entries. */
static mpcl_status check_batch(mpcl_context *ctx, const mpcl_device_dataset *dd,
                               const mpcl_tensor *order, size_t first, const mpcl_tensor *x,
                               const mpcl_tensor *y) {
    size_t count = dd->count, features = dd->features, B = x->rows;
    size_t ycols = dd->target_cols ? dd->target_cols : 1;
    bool order_ok = !order || (order->rows == count && order->cols == 1);
    if (x->cols != features || y->rows != B || y->cols != ycols || !order_ok || first > count ||
        B > count - first)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "gather of x %zux%zu, y %zux%zu from order %zux%zu at %zu; the "
                          "data set has %zu samples of %zu features and %zu target column%s",
                          x->rows, x->cols, y->rows, y->cols, order ? order->rows : count,
                          order ? order->cols : 1, first, count, features, ycols,
                          ycols == 1 ? "" : "s");
    mpcl_dtype ytype = dd->target_cols ? MPCL_DTYPE_F32 : MPCL_DTYPE_I32;
    if (!mpcl_dtype_is_float(x->dtype) || y->dtype != ytype ||
        (order && order->dtype != MPCL_DTYPE_I32))
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE, "gather into x %s, y %s (needs %s), order %s",
                          mpcl_dtype_name(x->dtype), mpcl_dtype_name(y->dtype),
                          mpcl_dtype_name(ytype),
                          mpcl_dtype_name(order ? order->dtype : MPCL_DTYPE_I32));
    return MPCL_OK;
}

mpcl_status mpcl_device_dataset_gather(mpcl_context *ctx, const mpcl_device_dataset *dd,
                                       const mpcl_tensor *order, size_t first, mpcl_tensor *x,
                                       mpcl_tensor *y) {
    if (dd->host)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "the data set is streamed from the host: its batches need the "
                          "host's order (mpcl_device_dataset_batch)");
    mpcl_status st = check_batch(ctx, dd, order, first, x, y);
    if (st != MPCL_OK) return st;
    size_t B = x->rows;
    const char *name = gather_kernel_name(dd);
    cl_kernel k;
    st = mpcl__kernel(ctx, x->dtype, name, &k);
    if (st != MPCL_OK) return st;
    cl_uint first32 = (cl_uint)first, f32 = (cl_uint)dd->features, b32 = (cl_uint)B;
    /* A NULL buffer argument is a NULL pointer in the kernel: no labels. */
    cl_mem labels_out = dd->labels ? y->mem : NULL, labels = dd->labels ? dd->labels->mem : NULL;
    st = mpcl__set_args(ctx, k, name, MPCL_ARG(x->mem), MPCL_ARG(labels_out), MPCL_ARG(dd->x->mem),
                        MPCL_ARG(labels), MPCL_ARG(order->mem), MPCL_ARG(first32), MPCL_ARG(f32),
                        MPCL_ARG(b32), MPCL_ARGS_END);
    if (st != MPCL_OK) return st;
    /* GATHER_ROW_ITEMS items per row, loops over its blocks of eight
     * (cl/gather.cl), in groups of GATHER_GROUP_ROWS rows. */
    size_t local[2] = {GATHER_ROW_ITEMS, GATHER_GROUP_ROWS};
    st = mpcl__launch_2d(ctx, k, name, GATHER_ROW_ITEMS, B, local);
    if (st == MPCL_OK && dd->targets) st = gather_targets(ctx, dd, order, first32, y);
    return st;
}

/* realloc that keeps *p on failure. */
static bool grow(void **p, size_t bytes) {
    void *q = realloc(*p, bytes ? bytes : 1);
    if (q) *p = q;
    return q != NULL;
}

/* A slot's buffers for batches of B rows of dd. */
static mpcl_status grow_slot(mpcl_context *ctx, const mpcl_device_dataset *dd, stream_slot *s,
                             size_t B) {
    if (B <= s->rows) return MPCL_OK;
    size_t xn = B * dd->features, T = dd->target_cols;
    bool ok = grow((void **)&s->x, xn * sizeof *s->x) &&
              grow((void **)&s->x_bits, xn * sizeof *s->x_bits) &&
              (T ? grow((void **)&s->targets, B * T * sizeof *s->targets)
                 : grow((void **)&s->labels, B * sizeof *s->labels));
    if (!ok) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "staging a batch of %zu samples", B);
    s->rows = B;
    return MPCL_OK;
}

/* Enqueues the write of bytes at src into t (from its start), not waiting
 * for it; *done (unless done is NULL) completes when it has. */
static mpcl_status write_async(mpcl_context *ctx, const mpcl_tensor *t, const void *src,
                               size_t bytes, cl_event *done) {
    mpcl_status st = MPCL_OK;
    CHECK_CL(ctx, clEnqueueWriteBuffer(ctx->queue, t->mem, CL_FALSE, 0, bytes, src, 0, NULL, done));
    st = mpcl__host_wrote(ctx, t->mem);
cleanup:
    return st;
}

/* The rows of slot s as x's dtype stores them: f32 as gathered, f16 and bf16
 * rounded as the gather kernel's stores round. */
static const void *x_as_stored(const mpcl_tensor *x, stream_slot *s, size_t n) {
    if (x->dtype == MPCL_DTYPE_F32) return s->x;
    mpcl__f32_to_16bit_n(x->dtype, s->x, s->x_bits, n);
    return s->x_bits;
}

/* The batch gathered on the host into the next slot (mpcl_dataset_batch:
 * u8 / 255, f32 and f16 as they are, the values the kernel computes),
 * converted to x's dtype and uploaded without a wait: the in-order queue
 * runs the writes after the steps before them have read x and y. The slot
 * is refilled only after its uploads have completed. */
static mpcl_status stream_batch(mpcl_context *ctx, mpcl_device_dataset *dd,
                                const int32_t *host_order, size_t first, mpcl_tensor *x,
                                mpcl_tensor *y) {
    size_t B = x->rows, T = dd->target_cols, xn = B * dd->features;
    const int32_t *idx = host_order + first;
    stream_slot *s = &dd->slot[dd->next];
    dd->next = (dd->next + 1) % STREAM_SLOTS;
    cl_event e = s->uploaded;
    s->uploaded = NULL;
    mpcl_status st = e ? mpcl__wait_event(ctx, e) : MPCL_OK;
    if (st == MPCL_OK) st = grow_slot(ctx, dd, s, B);
    if (st != MPCL_OK) return st;
    st = mpcl_dataset_batch(dd->host, idx, B, s->x, T ? NULL : s->labels);
    if (st == MPCL_OK && T) st = mpcl_dataset_batch_targets(dd->host, idx, B, s->targets);
    if (st != MPCL_OK) {
        char why[512]; /* the host's message, recorded on the thread only */
        snprintf(why, sizeof why, "%s", mpcl_errmsg());
        return MPCL_ERROR(ctx, st, "streaming a batch: %s", why);
    }
    /* No event for x: the queue is in order, so y's write completes after it. */
    st = write_async(ctx, x, x_as_stored(x, s, xn), xn * mpcl_dtype_size(x->dtype), NULL);
    if (st != MPCL_OK) return st;
    return T ? write_async(ctx, y, s->targets, B * T * sizeof *s->targets, &s->uploaded)
             : write_async(ctx, y, s->labels, B * sizeof *s->labels, &s->uploaded);
}

mpcl_status mpcl_device_dataset_batch(mpcl_context *ctx, mpcl_device_dataset *dd,
                                      const mpcl_tensor *order, const int32_t *host_order,
                                      size_t first, mpcl_tensor *x, mpcl_tensor *y) {
    if (!dd->host) return mpcl_device_dataset_gather(ctx, dd, order, first, x, y);
    if (!host_order)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "the data set is streamed from the host: its batches need the "
                          "host's order, and it is NULL");
    mpcl_status st = check_batch(ctx, dd, NULL, first, x, y);
    return st == MPCL_OK ? stream_batch(ctx, dd, host_order, first, x, y) : st;
}
