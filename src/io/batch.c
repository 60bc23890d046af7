/* The data set on the device and the batch gather. */
#include <stdlib.h>

#include "io/io.h"
#include "mpcl/batch.h"

enum { GATHER_ROW_ITEMS = 4, GATHER_GROUP_ROWS = 8 };

struct mpcl_device_dataset {
    mpcl_tensor *pixels; /* [count, features] u8 */
    mpcl_tensor *labels; /* [count, 1] i32 */
};

mpcl_status mpcl_device_dataset_create(mpcl_context *ctx, const mpcl_dataset *ds,
                                       mpcl_device_dataset **out) {
    *out = NULL;
    size_t n = mpcl_dataset_count(ds), f = mpcl_dataset_features(ds);
    mpcl_device_dataset *dd = calloc(1, sizeof *dd);
    int32_t *labels = malloc(n * sizeof *labels);
    mpcl_status st = MPCL_OK;
    if (!dd || !labels) {
        st = MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "staging a data set of %zu samples", n);
        goto done;
    }
    for (size_t i = 0; i < n; i++) labels[i] = mpcl_dataset_labels(ds)[i];
    if ((st = mpcl_tensor_create(ctx, MPCL_DTYPE_U8, n, f, &dd->pixels)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, MPCL_DTYPE_I32, n, 1, &dd->labels)) != MPCL_OK ||
        (st = mpcl_tensor_upload_raw(dd->pixels, mpcl_dataset_pixels(ds), n * f)) != MPCL_OK ||
        (st = mpcl_tensor_upload_i32(dd->labels, labels, n)) != MPCL_OK)
        goto done;
    *out = dd;
    dd = NULL;
done:
    free(labels);
    mpcl_device_dataset_destroy(dd);
    return st;
}

void mpcl_device_dataset_destroy(mpcl_device_dataset *dd) {
    if (!dd) return;
    mpcl_tensor_destroy(dd->pixels);
    mpcl_tensor_destroy(dd->labels);
    free(dd);
}

size_t mpcl_device_dataset_count(const mpcl_device_dataset *dd) {
    return dd->pixels->rows;
}
size_t mpcl_device_dataset_features(const mpcl_device_dataset *dd) {
    return dd->pixels->cols;
}

mpcl_status mpcl_device_dataset_gather(mpcl_context *ctx, const mpcl_device_dataset *dd,
                                       const mpcl_tensor *order, size_t first, mpcl_tensor *x,
                                       mpcl_tensor *labels) {
    size_t count = dd->pixels->rows, features = dd->pixels->cols, B = x->rows;
    if (x->cols != features || labels->rows != B || labels->cols != 1 || order->rows != count ||
        order->cols != 1 || first > count || B > count - first)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "gather of x %zux%zu, labels %zux%zu from order %zux%zu at %zu; the "
                          "data set has %zu samples of %zu features",
                          x->rows, x->cols, labels->rows, labels->cols, order->rows, order->cols,
                          first, count, features);
    if (!mpcl_dtype_is_float(x->dtype) || labels->dtype != MPCL_DTYPE_I32 ||
        order->dtype != MPCL_DTYPE_I32)
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE, "gather into x %s, labels %s, order %s",
                          mpcl_dtype_name(x->dtype), mpcl_dtype_name(labels->dtype),
                          mpcl_dtype_name(order->dtype));
    cl_kernel k;
    mpcl_status st = mpcl__kernel(ctx, x->dtype, "mpcl_gather_batch", &k);
    if (st != MPCL_OK) return st;
    cl_uint first32 = (cl_uint)first, f32 = (cl_uint)features, b32 = (cl_uint)B;
    st = mpcl__set_args(ctx, k, "mpcl_gather_batch", MPCL_ARG(x->mem), MPCL_ARG(labels->mem),
                        MPCL_ARG(dd->pixels->mem), MPCL_ARG(dd->labels->mem), MPCL_ARG(order->mem),
                        MPCL_ARG(first32), MPCL_ARG(f32), MPCL_ARG(b32), MPCL_ARGS_END);
    if (st != MPCL_OK) return st;
    /* GATHER_ROW_ITEMS items per row, loops over its blocks of eight
     * (cl/gather.cl), in groups of GATHER_GROUP_ROWS rows. */
    size_t local[2] = {GATHER_ROW_ITEMS, GATHER_GROUP_ROWS};
    return mpcl__launch_2d(ctx, k, "mpcl_gather_batch", GATHER_ROW_ITEMS, B, local);
}
