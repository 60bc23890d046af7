/* Data sets from NPY arrays (files or memory), slices, and Keras'
 * validation split. See data.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "mpcl/half.h"

/* Integers up to this magnitude are exact in f32. */
#define F32_EXACT_INT 16777216.0

void mpcl__dataset_set_shape(mpcl_dataset *ds, size_t count, mpcl_npy_dtype x_dtype, size_t rank,
                             const size_t *shape) {
    ds->count = count;
    ds->x_dtype = x_dtype;
    ds->rank = rank;
    for (size_t i = 0; i < rank; i++) ds->shape[i] = shape[i];
    ds->rows = rank == 1 ? 1 : shape[0];
    ds->cols = rank == 1 ? shape[0] : rank == 2 ? shape[1] : shape[1] * shape[2];
}

size_t mpcl__dataset_x_elem(const mpcl_dataset *ds) {
    return mpcl_npy_dtype_size(ds->x_dtype);
}

mpcl_status mpcl__dataset_slice(const mpcl_dataset *src, size_t first, size_t n,
                                mpcl_dataset **out) {
    *out = NULL;
    size_t xrow = src->rows * src->cols * mpcl__dataset_x_elem(src), T = src->target_cols;
    mpcl_dataset *ds = calloc(1, sizeof *ds);
    if (ds) {
        *ds = *src;
        ds->count = n;
        ds->x = malloc(n * xrow);
        ds->labels = src->labels ? malloc(n) : NULL;
        ds->targets = src->targets ? malloc(n * T * sizeof *ds->targets) : NULL;
    }
    if (!ds || !ds->x || (src->labels && !ds->labels) || (src->targets && !ds->targets)) {
        mpcl_dataset_destroy(ds);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "a data set of %zu samples", n);
    }
    memcpy(ds->x, src->x + first * xrow, n * xrow);
    if (src->labels) memcpy(ds->labels, src->labels + first, n);
    if (src->targets) memcpy(ds->targets, src->targets + first * T, n * T * sizeof *ds->targets);
    *out = ds;
    return MPCL_OK;
}

mpcl_status mpcl_dataset_split(const mpcl_dataset *src, double fraction, mpcl_dataset **train,
                               mpcl_dataset **val) {
    if (!train || !val || !src)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_dataset_split: NULL argument");
    *train = *val = NULL;
    if (!(fraction > 0.0 && fraction < 1.0))
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "validation split %g is outside (0, 1): it is the fraction of the "
                          "training rows kept for validation",
                          fraction);
    /* Keras: split_at = int(floor(n * (1 - validation_split))). */
    size_t n = src->count, keep = (size_t)floor((double)n * (1.0 - fraction));
    if (keep == 0 || keep >= n)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "validation split %g of %zu rows leaves %zu for training and %zu for "
                          "validation: each side needs at least one",
                          fraction, n, keep, n - keep);
    mpcl_status st = mpcl__dataset_slice(src, 0, keep, train);
    if (st == MPCL_OK) st = mpcl__dataset_slice(src, keep, n - keep, val);
    if (st != MPCL_OK) {
        mpcl_dataset_destroy(*train);
        *train = NULL;
    }
    return st;
}

mpcl_npy_data_params mpcl_npy_data_default_params(void) {
    mpcl_npy_data_params p = {false, 0};
    return p;
}

/* Element k of a as a double (integers exactly up to 2^53). */
static double element(const mpcl_npy *a, size_t k) {
    const void *d = mpcl_npy_data(a);
    switch (mpcl_npy_dtype_of(a)) {
    case MPCL_NPY_U1: return ((const uint8_t *)d)[k];
    case MPCL_NPY_I1: return ((const int8_t *)d)[k];
    case MPCL_NPY_U2: return ((const uint16_t *)d)[k];
    case MPCL_NPY_I2: return ((const int16_t *)d)[k];
    case MPCL_NPY_U4: return ((const uint32_t *)d)[k];
    case MPCL_NPY_I4: return ((const int32_t *)d)[k];
    case MPCL_NPY_U8: return (double)((const uint64_t *)d)[k];
    case MPCL_NPY_I8: return (double)((const int64_t *)d)[k];
    case MPCL_NPY_F2: return mpcl_f16_to_f32(((const uint16_t *)d)[k]);
    case MPCL_NPY_F4: return ((const float *)d)[k];
    default: return ((const double *)d)[k];
    }
}

static bool is_float(mpcl_npy_dtype t) {
    return t == MPCL_NPY_F2 || t == MPCL_NPY_F4 || t == MPCL_NPY_F8;
}

/* The elements of a, converted to f32 into out (count floats): finite ones
 * only, and none that f32 would change (an integer beyond 2^24, an f8
 * beyond the f32 range); the first such is named by row and column. */
static mpcl_status to_f32(const mpcl_npy *a, const char *what, float *out) {
    const char *path = mpcl_npy_path(a);
    mpcl_status st = mpcl_npy_check_finite(a);
    if (st != MPCL_OK) return st;
    bool integer = !is_float(mpcl_npy_dtype_of(a));
    size_t cols = mpcl_npy_cols(a);
    for (size_t k = 0; k < mpcl_npy_count(a); k++) {
        double v = element(a, k);
        out[k] = (float)v;
        if (integer ? fabs(v) > F32_EXACT_INT : isinf(out[k]))
            return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                              "'%s': %s at row %zu, column %zu is %.17g, which f32 does not "
                              "keep (%s)",
                              path, what, k / cols, k % cols, v,
                              integer ? "integers beyond 2^24" : "beyond the f32 range");
    }
    return MPCL_OK;
}

/* x into ds: u1 kept as u8, f4 and f2 as they are, the rest as f32. */
static mpcl_status load_x(mpcl_dataset *ds, const mpcl_npy *x) {
    const char *path = mpcl_npy_path(x);
    size_t nd = mpcl_npy_ndim(x), n = mpcl_npy_rows(x);
    const size_t *shape = mpcl_npy_shape(x);
    if (nd < 2 || nd > 4)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                          "'%s': x has %zu dimension%s; it needs (samples, features...) with 1 "
                          "to 3 feature dimensions (one feature per sample: shape (N, 1))",
                          path, nd, nd == 1 ? "" : "s");
    if (n == 0 || mpcl_npy_cols(x) == 0)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "'%s': x has zero %s", path,
                          n == 0 ? "rows" : "features (a dimension of size 0)");
    mpcl_npy_dtype t = mpcl_npy_dtype_of(x);
    mpcl_npy_dtype keep =
        t == MPCL_NPY_U1 || t == MPCL_NPY_F4 || t == MPCL_NPY_F2 ? t : MPCL_NPY_F4;
    mpcl__dataset_set_shape(ds, n, keep, nd - 1, shape + 1);
    snprintf(ds->images_path, sizeof ds->images_path, "%s", path);
    size_t count = mpcl_npy_count(x);
    ds->x = malloc(count * mpcl_npy_dtype_size(keep));
    if (!ds->x) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': %zu features", path, count);
    if (keep != t) return to_f32(x, "x", (float *)(void *)ds->x);
    memcpy(ds->x, mpcl_npy_data(x), mpcl_npy_bytes(x));
    return mpcl_npy_check_finite(x);
}

/* Sparse labels from y: integers in one column, each in [0, num_classes)
 * (num_classes 0: [0, 256), and the count is the largest + 1). */
static mpcl_status load_labels(mpcl_dataset *ds, const mpcl_npy *y, int num_classes) {
    const char *path = mpcl_npy_path(y);
    if (is_float(mpcl_npy_dtype_of(y)))
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                          "'%s': y is %s, float targets: float targets need --loss "
                          "binary_crossentropy or mse (sparse categorical cross-entropy takes "
                          "integer class labels)",
                          path, mpcl_npy_dtype_name(mpcl_npy_dtype_of(y)));
    if (mpcl_npy_cols(y) != 1)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                          "'%s': y has %zu columns; sparse labels are one class index per row, "
                          "shape (N) or (N, 1) (one-hot rows: take their argmax, or use --loss "
                          "binary_crossentropy)",
                          path, mpcl_npy_cols(y));
    int limit = num_classes > 0 ? num_classes : 256, max = 0;
    ds->labels = malloc(ds->count);
    if (!ds->labels) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': labels", path);
    for (size_t i = 0; i < ds->count; i++) {
        double v = element(y, i);
        if (v < 0)
            return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "'%s': label %.0f at row %zu is negative",
                              path, v, i);
        if (v >= limit)
            return MPCL_ERROR(NULL, MPCL_ERR_LABEL,
                              "'%s': label %.0f at row %zu is not below the class count %d%s", path,
                              v, i, limit, num_classes > 0 ? "" : " (the most mpcl takes)");
        ds->labels[i] = (uint8_t)v;
        if (ds->labels[i] > max) max = ds->labels[i];
    }
    ds->num_classes = num_classes > 0 ? num_classes : max + 1;
    return MPCL_OK;
}

/* f32 target columns from y (any dtype, finite). */
static mpcl_status load_targets(mpcl_dataset *ds, const mpcl_npy *y) {
    ds->target_cols = mpcl_npy_cols(y);
    if (ds->target_cols == 0)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "'%s': y has zero target columns",
                          mpcl_npy_path(y));
    ds->targets = malloc(mpcl_npy_count(y) * sizeof *ds->targets);
    if (!ds->targets)
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': targets", mpcl_npy_path(y));
    return to_f32(y, "target", ds->targets);
}

/* The data set of arrays x and y; paths: whether their names are file
 * paths (kept for messages about the data) or stand-ins for memory. */
static mpcl_status from_npys(const mpcl_npy *x, const mpcl_npy *y, const mpcl_npy_data_params *p,
                             bool paths, mpcl_dataset **out) {
    mpcl_npy_data_params dp = p ? *p : mpcl_npy_data_default_params();
    if (dp.num_classes < 0 || dp.num_classes > 256)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "num_classes %d outside [0, 256]",
                          dp.num_classes);
    mpcl_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "a data set");
    mpcl_status st = load_x(ds, x);
    if (st == MPCL_OK && mpcl_npy_rows(y) != ds->count)
        st = MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                        "'%s' has %zu rows but '%s' has %zu: x and y need one row per sample",
                        mpcl_npy_path(x), ds->count, mpcl_npy_path(y), mpcl_npy_rows(y));
    if (st == MPCL_OK)
        st = dp.float_targets ? load_targets(ds, y) : load_labels(ds, y, dp.num_classes);
    snprintf(ds->labels_path, sizeof ds->labels_path, "%s", mpcl_npy_path(y));
    if (!paths) ds->images_path[0] = ds->labels_path[0] = '\0';
    if (st != MPCL_OK) {
        mpcl_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return MPCL_OK;
}

mpcl_status mpcl_dataset_from_npy(const char *x_path, const char *y_path,
                                  const mpcl_npy_data_params *params, mpcl_dataset **out) {
    if (!out) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_dataset_from_npy: out is NULL");
    *out = NULL;
    if (!x_path || !y_path)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_dataset_from_npy: NULL path");
    mpcl_npy *x = NULL, *y = NULL;
    mpcl_status st = mpcl_npy_read(x_path, &x);
    if (st == MPCL_OK) st = mpcl_npy_read(y_path, &y);
    if (st == MPCL_OK) st = from_npys(x, y, params, true, out);
    mpcl_npy_destroy(x);
    mpcl_npy_destroy(y);
    return st;
}

mpcl_status mpcl_dataset_from_arrays(const mpcl_array_view *xv, const mpcl_array_view *yv,
                                     const mpcl_npy_data_params *params, mpcl_dataset **out) {
    if (!out)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_dataset_from_arrays: out is NULL");
    *out = NULL;
    if (!xv || !yv)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_dataset_from_arrays: NULL array");
    mpcl_npy *x = NULL, *y = NULL;
    mpcl_status st = mpcl__npy_from_memory("x", xv->data, xv->dtype, xv->ndim, xv->shape, &x);
    if (st == MPCL_OK)
        st = mpcl__npy_from_memory("y", yv->data, yv->dtype, yv->ndim, yv->shape, &y);
    if (st == MPCL_OK) st = from_npys(x, y, params, false, out);
    mpcl_npy_destroy(x);
    mpcl_npy_destroy(y);
    return st;
}
