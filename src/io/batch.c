/* The data set on the device and the batch gather. */
#include <stdlib.h>

#include "io/io.h"
#include "mpcl/batch.h"

enum { GATHER_ROW_ITEMS = 4, GATHER_GROUP_ROWS = 8 };

struct mpcl_device_dataset {
    mpcl_tensor *x;       /* [count, features] u8, f32 or f16 */
    mpcl_tensor *labels;  /* [count, 1] i32, or NULL with targets */
    mpcl_tensor *targets; /* [count, target_cols] f32, or NULL with labels */
};

/* The device dtype that holds ds's features as they are stored. */
static mpcl_dtype x_device_dtype(const mpcl_dataset *ds) {
    switch (mpcl_dataset_x_dtype(ds)) {
    case MPCL_NPY_F4: return MPCL_DTYPE_F32;
    case MPCL_NPY_F2: return MPCL_DTYPE_F16;
    default: return MPCL_DTYPE_U8;
    }
}

/* The data must fit the device: each buffer one allocation, all of them its
 * global memory. Refused with the figures, before anything is allocated. */
static mpcl_status check_fits(mpcl_context *ctx, const mpcl_dataset *ds) {
    const mpcl_device_info *dev = mpcl_context_device(ctx);
    size_t n = mpcl_dataset_count(ds);
    size_t T = mpcl_dataset_target_cols(ds) ? mpcl_dataset_target_cols(ds) : 1;
    double x_bytes = (double)n * (double)mpcl_dataset_features(ds) *
                     (double)mpcl_npy_dtype_size(mpcl_dataset_x_dtype(ds));
    double y_bytes = (double)n * (double)T * 4.0;
    double largest = x_bytes > y_bytes ? x_bytes : y_bytes;
    if (largest <= (double)dev->max_alloc_bytes &&
        x_bytes + y_bytes <= (double)dev->global_mem_bytes)
        return MPCL_OK;
    return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY,
                      "the data set of %zu samples (%.0f bytes of %s features, %.0f of "
                      "targets) does not fit device '%s': its largest allocation is %llu bytes "
                      "and its global memory %llu; take fewer samples (--train-limit) or "
                      "smaller features (f16, u8)",
                      n, x_bytes, mpcl_npy_dtype_name(mpcl_dataset_x_dtype(ds)), y_bytes, dev->name,
                      (unsigned long long)dev->max_alloc_bytes,
                      (unsigned long long)dev->global_mem_bytes);
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

mpcl_status mpcl_device_dataset_create(mpcl_context *ctx, const mpcl_dataset *ds,
                                       mpcl_device_dataset **out) {
    *out = NULL;
    size_t n = mpcl_dataset_count(ds), f = mpcl_dataset_features(ds);
    size_t T = mpcl_dataset_target_cols(ds);
    mpcl_status st = check_fits(ctx, ds);
    if (st != MPCL_OK) return st;
    mpcl_device_dataset *dd = calloc(1, sizeof *dd);
    if (!dd) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "a device data set");
    mpcl_dtype xd = x_device_dtype(ds);
    if ((st = mpcl_tensor_create(ctx, xd, n, f, &dd->x)) != MPCL_OK ||
        (st = mpcl_tensor_upload_raw(dd->x, mpcl_dataset_x(ds), n * f * mpcl_dtype_size(xd))) !=
            MPCL_OK)
        goto done;
    if (!T)
        st = upload_labels(ctx, ds, &dd->labels);
    else if ((st = mpcl_tensor_create(ctx, MPCL_DTYPE_F32, n, T, &dd->targets)) == MPCL_OK)
        st = mpcl_tensor_upload_f32(dd->targets, mpcl_dataset_targets(ds), n * T);
    if (st != MPCL_OK) goto done;
    *out = dd;
    dd = NULL;
done:
    mpcl_device_dataset_destroy(dd);
    return st;
}

void mpcl_device_dataset_destroy(mpcl_device_dataset *dd) {
    if (!dd) return;
    mpcl_tensor_destroy(dd->x);
    mpcl_tensor_destroy(dd->labels);
    mpcl_tensor_destroy(dd->targets);
    free(dd);
}

size_t mpcl_device_dataset_count(const mpcl_device_dataset *dd) {
    return dd->x->rows;
}
size_t mpcl_device_dataset_features(const mpcl_device_dataset *dd) {
    return dd->x->cols;
}
size_t mpcl_device_dataset_target_cols(const mpcl_device_dataset *dd) {
    return dd->targets ? dd->targets->cols : 0;
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

mpcl_status mpcl_device_dataset_gather(mpcl_context *ctx, const mpcl_device_dataset *dd,
                                       const mpcl_tensor *order, size_t first, mpcl_tensor *x,
                                       mpcl_tensor *y) {
    size_t count = dd->x->rows, features = dd->x->cols, B = x->rows;
    size_t ycols = dd->targets ? dd->targets->cols : 1;
    if (x->cols != features || y->rows != B || y->cols != ycols || order->rows != count ||
        order->cols != 1 || first > count || B > count - first)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "gather of x %zux%zu, y %zux%zu from order %zux%zu at %zu; the "
                          "data set has %zu samples of %zu features and %zu target column%s",
                          x->rows, x->cols, y->rows, y->cols, order->rows, order->cols, first,
                          count, features, ycols, ycols == 1 ? "" : "s");
    mpcl_dtype ytype = dd->targets ? MPCL_DTYPE_F32 : MPCL_DTYPE_I32;
    if (!mpcl_dtype_is_float(x->dtype) || y->dtype != ytype || order->dtype != MPCL_DTYPE_I32)
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE, "gather into x %s, y %s (needs %s), order %s",
                          mpcl_dtype_name(x->dtype), mpcl_dtype_name(y->dtype),
                          mpcl_dtype_name(ytype), mpcl_dtype_name(order->dtype));
    const char *name = gather_kernel_name(dd);
    cl_kernel k;
    mpcl_status st = mpcl__kernel(ctx, x->dtype, name, &k);
    if (st != MPCL_OK) return st;
    cl_uint first32 = (cl_uint)first, f32 = (cl_uint)features, b32 = (cl_uint)B;
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
