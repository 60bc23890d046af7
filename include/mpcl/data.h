/* Data: the IDX files of the MNIST family (raw or gzip), NPY arrays, a
 * portable seeded shuffle, and batches for the training loop. Host memory
 * only.
 *
 * A data set holds count samples of features each, stored as u8 (IDX images
 * and u1 NPY arrays: scaled by 1/255 when batched), f32 or f16 (used as
 * they are), with a per-sample shape of rank 1 to 3 (rows x cols for IDX,
 * shape[1:] of an NPY array); and either sparse labels (one class index per
 * sample, below num_classes, at most 256 classes) or f32 target columns
 * (count x target_cols, for the dense losses: binary cross-entropy, MSE). */
#ifndef MPCL_DATA_H
#define MPCL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include <stdbool.h>

#include "mpcl/npy.h"
#include "mpcl/rng.h"
#include "mpcl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* Where Debian's `dataset-fashion-mnist` package puts Fashion-MNIST. */
#define MPCL_DATA_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

/* Largest image section mpcl_idx_load accepts (count * rows * cols bytes).
 * A header that asks for more is taken as corrupt, not allocated. */
#define MPCL_IDX_MAX_BYTES ((uint64_t)1 << 31)

typedef struct mpcl_dataset mpcl_dataset;

typedef struct mpcl_idx_params {
    /* Every label must be below this (MPCL_ERR_FORMAT otherwise). 0 means
     * "no check": the class count is then the largest label + 1. */
    int num_classes;
} mpcl_idx_params;

/* num_classes = 10. */
mpcl_idx_params mpcl_idx_default_params(void);

/* Loads `<dir>/<prefix>-images-idx3-ubyte` and `<dir>/<prefix>-labels-idx1-ubyte`
 * (prefix "train" or "t10k"; dir NULL means MPCL_DATA_DEFAULT_DIR). For each,
 * the raw name is used when it exists, otherwise the same name with ".gz".
 * gzip is recognised by its magic bytes (a ".gz" file must be gzip); a gzip
 * stream must be whole, CRC included, and may hold several members. Images
 * must be u8 with 3 dimensions (magic 0x00000803: count, rows, cols), labels
 * u8 with 1 dimension (magic 0x00000801); both big-endian headers, no bytes
 * after the data.
 * Errors: MPCL_ERR_IO for a missing folder or file or a read failure,
 * MPCL_ERR_FORMAT for anything wrong inside a file (magic, truncation, corrupt
 * gzip stream, absurd dimensions, count mismatch, zero images, label out of
 * range); the message names the file and what was found where;
 * MPCL_ERR_INVALID_ARG for a NULL prefix or negative num_classes. `params`
 * may be NULL for the defaults. *out is NULL after any failure. */
mpcl_status mpcl_idx_load_ex(const char *dir, const char *prefix, const mpcl_idx_params *params,
                             mpcl_dataset **out);
/* mpcl_idx_load_ex with the default params. */
mpcl_status mpcl_idx_load(const char *dir, const char *prefix, mpcl_dataset **out);

/* The first n samples of src, copied (n <= count, n > 0: MPCL_ERR_INVALID_ARG
 * otherwise). The class count is kept from src. */
mpcl_status mpcl_dataset_subset(const mpcl_dataset *src, size_t n, mpcl_dataset **out);

/* A data set from memory, copied: count samples of rows x cols u8 pixels
 * (row-major, one sample after another, as in an IDX file) and count u8
 * labels, each below num_classes (1 to 256). MPCL_ERR_INVALID_ARG for a NULL
 * buffer, a zero size or more than MPCL_IDX_MAX_BYTES of pixels;
 * MPCL_ERR_LABEL naming the first label out of range. *out is NULL after any
 * failure. */
mpcl_status mpcl_dataset_from_memory(const uint8_t *pixels, const uint8_t *labels, size_t count,
                                     size_t rows, size_t cols, int num_classes, mpcl_dataset **out);

void mpcl_dataset_destroy(mpcl_dataset *ds);

size_t mpcl_dataset_count(const mpcl_dataset *ds);
/* The per-sample shape as rows x cols: an IDX image's; for an NPY sample of
 * shape (a): 1 x a, (a, b): a x b, (a, b, c): a x (b * c). */
size_t mpcl_dataset_rows(const mpcl_dataset *ds);
size_t mpcl_dataset_cols(const mpcl_dataset *ds);
/* rows * cols: the width of one sample. */
size_t mpcl_dataset_features(const mpcl_dataset *ds);
/* The per-sample shape: its rank (1 to 3) and that many sizes into shape. */
size_t mpcl_dataset_shape(const mpcl_dataset *ds, size_t shape[3]);
/* How the features are stored: MPCL_NPY_U1 (scaled by 1/255 when batched),
 * MPCL_NPY_F4 or MPCL_NPY_F2. */
mpcl_npy_dtype mpcl_dataset_x_dtype(const mpcl_dataset *ds);
/* count x features elements of mpcl_dataset_x_dtype, row-major. */
const void *mpcl_dataset_x(const mpcl_dataset *ds);
/* The class count of sparse labels; 0 with f32 targets. */
int mpcl_dataset_num_classes(const mpcl_dataset *ds);
/* count x features bytes for u8 features (as in an IDX file); NULL for
 * f32 or f16 features. */
const uint8_t *mpcl_dataset_pixels(const mpcl_dataset *ds);
/* count bytes, each < num_classes; NULL with f32 targets. */
const uint8_t *mpcl_dataset_labels(const mpcl_dataset *ds);
/* The columns of f32 targets; 0 with sparse labels. */
size_t mpcl_dataset_target_cols(const mpcl_dataset *ds);
/* count x target_cols floats; NULL with sparse labels. */
const float *mpcl_dataset_targets(const mpcl_dataset *ds);

/* Gathers the samples idx[0..n) into a batch: pixels n x features floats
 * (u8 scaled to [0, 1] as byte / 255; f32 and f16 as they are), labels n
 * int32 (sparse labels only: MPCL_ERR_INVALID_ARG with f32 targets). Either
 * output may be NULL. An index outside [0, count) gives MPCL_ERR_INVALID_ARG
 * naming it, and then nothing is written. */
mpcl_status mpcl_dataset_batch(const mpcl_dataset *ds, const int32_t *idx, size_t n, float *pixels,
                               int32_t *labels);
/* The f32 targets of the samples idx[0..n) into n x target_cols floats
 * (MPCL_ERR_INVALID_ARG for a data set of sparse labels or a bad index). */
mpcl_status mpcl_dataset_batch_targets(const mpcl_dataset *ds, const int32_t *idx, size_t n,
                                       float *targets);

/* How NPY arrays (or arrays from memory) become a data set. */
typedef struct mpcl_npy_data_params {
    /* false: y holds sparse labels (any integer dtype, shape (N) or (N, 1);
     * a float y is refused: float targets need a dense loss). true: y holds
     * target columns for a dense loss (binary cross-entropy, MSE): shape (N)
     * is one column, (N, T, ...) T = the product of shape[1:]; any dtype
     * the NPY reader takes, converted to f32, and a non-finite one refused. */
    bool float_targets;
    /* Sparse labels: every label must be below this (MPCL_ERR_LABEL); 0 is
     * the largest label + 1. At most 256 either way. */
    int num_classes;
} mpcl_npy_data_params;

/* sparse labels, num_classes 0. */
mpcl_npy_data_params mpcl_npy_data_default_params(void);

/* A data set from two NPY files (mpcl_npy_read): x of shape (N, ...) with
 * 1 to 3 dimensions after N, and y (see mpcl_npy_data_params). The x
 * dtypes: u1 (kept as u8, scaled by 1/255 when batched, as IDX images), f4
 * and f2 (kept as they are), f8 and every other integer dtype (converted to
 * f32, values as they are: integers beyond 2^24 in magnitude and f8 values
 * beyond the f32 range are refused, since f32 would not keep them).
 * Refused, each with MPCL_ERR_FORMAT naming the file: a non-finite x (its
 * first bad element's row and column), zero rows, x of one dimension or of
 * more than 4, row counts of x and y that differ (both files and counts),
 * sparse labels of more than one column or from a float y, a negative
 * label; MPCL_ERR_LABEL for a label not below num_classes or 256.
 * MPCL_ERR_INVALID_ARG for NULL paths or out. *out is NULL after any
 * failure. params may be NULL for the defaults. */
mpcl_status mpcl_dataset_from_npy(const char *x_path, const char *y_path,
                                  const mpcl_npy_data_params *params, mpcl_dataset **out);

/* An array in memory, C order: ndim sizes in shape, elements of dtype. */
typedef struct mpcl_array_view {
    const void *data;
    mpcl_npy_dtype dtype;
    size_t ndim;
    const size_t *shape;
} mpcl_array_view;

/* mpcl_dataset_from_npy on arrays in memory (copied), with the same checks
 * and statuses; the messages name them "x" and "y". */
mpcl_status mpcl_dataset_from_arrays(const mpcl_array_view *x, const mpcl_array_view *y,
                                     const mpcl_npy_data_params *params, mpcl_dataset **out);

/* Keras' validation_split: *val takes the last fraction of src's rows
 * (rounded as Keras does: the first floor(count * (1 - fraction)) rows
 * stay in *train), before any shuffle; both are copies, with src's class
 * count. MPCL_ERR_INVALID_ARG for a fraction outside (0, 1) or a split that
 * leaves either side without a row (naming the counts). */
mpcl_status mpcl_dataset_split(const mpcl_dataset *src, double fraction, mpcl_dataset **train,
                               mpcl_dataset **val);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
