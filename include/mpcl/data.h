/* Data: the IDX files of the MNIST family (raw or gzip), a portable seeded
 * shuffle, and batches for the training loop. Host memory only. */
#ifndef MPCL_DATA_H
#define MPCL_DATA_H

#include <stddef.h>
#include <stdint.h>

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
size_t mpcl_dataset_rows(const mpcl_dataset *ds);
size_t mpcl_dataset_cols(const mpcl_dataset *ds);
/* rows * cols: the width of one sample. */
size_t mpcl_dataset_features(const mpcl_dataset *ds);
int mpcl_dataset_num_classes(const mpcl_dataset *ds);
/* count x (rows * cols) bytes, row-major, one image per row, as in the file. */
const uint8_t *mpcl_dataset_pixels(const mpcl_dataset *ds);
/* count bytes, each < num_classes. */
const uint8_t *mpcl_dataset_labels(const mpcl_dataset *ds);

/* Gathers the samples idx[0..n) into a batch: pixels n x (rows * cols) floats
 * scaled to [0, 1] (byte / 255), labels n int32. Either output may be NULL.
 * An index outside [0, count) gives MPCL_ERR_INVALID_ARG naming it, and then
 * nothing is written. */
mpcl_status mpcl_dataset_batch(const mpcl_dataset *ds, const int32_t *idx, size_t n, float *pixels,
                               int32_t *labels);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
