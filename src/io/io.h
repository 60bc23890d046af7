/* The io area's internal declarations, for the areas above it. Nothing here
 * is installed. */
#ifndef MPCL_IO_H
#define MPCL_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "mpcl/batch.h"
#include "mpcl/data.h"
#include "mpcl/gpt2_folder.h"
#include "mpcl/npy.h"
#include "mpcl/safetensors.h"
#include "mpcl/tokens.h"
#include "compute/compute.h"

#define MPCL__DATA_PATH_BYTES 4096

/* A data set (data.h): count samples of rows * cols features of x_dtype
 * (U1, F4 or F2) with a per-sample shape of rank 1..3, and either u8
 * labels below num_classes or f32 targets of target_cols columns. */
struct mpcl_dataset {
    size_t count, rows, cols;
    size_t shape[3], rank;
    mpcl_npy_dtype x_dtype;
    uint8_t *x;         /* count x rows*cols elements of x_dtype */
    int num_classes;    /* 0 with targets */
    uint8_t *labels;    /* count, or NULL */
    float *targets;     /* count x target_cols, or NULL */
    size_t target_cols; /* 0 with labels */
    /* The files read, for messages about their data ("" from memory). */
    char images_path[MPCL__DATA_PATH_BYTES];
    char labels_path[MPCL__DATA_PATH_BYTES];
};

/* Sets count, x_dtype, the shape (rank 1..3 sizes) and rows x cols from it. */
void mpcl__dataset_set_shape(mpcl_dataset *ds, size_t count, mpcl_npy_dtype x_dtype, size_t rank,
                             const size_t *shape);
/* Whether buffers of x_bytes and y_bytes fit dev beside the held bytes:
 * each one allocation, both the global memory less held (batch.c; the rule
 * of MPCL_DATA_AUTO). */
bool mpcl__data_fits(const mpcl_device_info *dev, size_t held, double x_bytes, double y_bytes);
/* Bytes of one x element of ds. */
size_t mpcl__dataset_x_elem(const mpcl_dataset *ds);
/* The n rows of src from `first` on, copied, with src's class count and
 * paths (first + n <= count, n > 0: the caller checks). */
mpcl_status mpcl__dataset_slice(const mpcl_dataset *src, size_t first, size_t n,
                                mpcl_dataset **out);

/* What a model of <dir>/<prefix>'s data needs, read without its pixels: the
 * sample count and features (rows x cols, from the images' header, checked
 * as the load checks it) and the class count
 * (num_classes when above 0, else the largest label + 1, from the labels
 * file). mpcl_idx_load_ex of the same files gives the same figures when it
 * succeeds; a failure here says nothing the load would not (it is not a
 * check: a caller reports the load's errors, not these). */
mpcl_status mpcl__idx_peek(const char *dir, const char *prefix, int num_classes, size_t *count,
                           size_t *features, int *classes);
/* The file ds's images (labels false) or labels were read from, for
 * messages about its data; "" for data from memory. */
const char *mpcl__dataset_path(const mpcl_dataset *ds, bool labels);
/* mpcl_idx_load_ex on two file images in memory (for the fuzz harness):
 * the names stand for the paths in messages, and one ending in ".gz" must
 * hold gzip, as on disk. num_classes as in mpcl_idx_params. */
mpcl_status mpcl__idx_load_mem(const char *images_name, const void *images, size_t images_size,
                               const char *labels_name, const void *labels, size_t labels_size,
                               int num_classes, mpcl_dataset **out);

/* MPCL_ERR_FORMAT for something wrong inside the file `path`, recorded as
 * "'<path>': <message>" (the safetensors and NPY readers' form). */
mpcl_status mpcl__format_error(const char *path, const char *file, int line, const char *fmt, ...)
    MPCL_PRINTF(4, 5);

/* mpcl_safetensors_read on a file image already in memory (size bytes);
 * `name` stands for the path in messages. For the fuzz harnesses and tests:
 * the same checks, the same statuses. */
mpcl_status mpcl__safetensors_parse(const char *name, const void *bytes, size_t size,
                                    mpcl_safetensors **out);

/* mpcl_npy_read on a file image already in memory (size bytes); `name`
 * stands for the path in messages. For the fuzz harness and tests: the same
 * checks, the same statuses. */
mpcl_status mpcl__npy_parse(const char *name, const void *bytes, size_t size, mpcl_npy **out);
/* An array in memory as an mpcl_npy (the data copied), with the reader's
 * shape checks; `name` stands for the path in messages. */
mpcl_status mpcl__npy_from_memory(const char *name, const void *data, mpcl_npy_dtype dtype,
                                  size_t ndim, const size_t *shape, mpcl_npy **out);

/* mpcl_tokens_read_bin on a file image already in memory (size bytes);
 * `name` stands for the path in messages. For the fuzz harness and tests:
 * the same checks, the same statuses. */
mpcl_status mpcl__tokens_bin_parse(const char *name, const void *bytes, size_t size, size_t vocab,
                                   mpcl_tokens **out);

/* The config of a config.json text in memory (size bytes), as
 * mpcl_gpt2_config_read reads it; `name` stands for the file in messages.
 * For the fuzz harness and tests: the same checks, the same statuses. */
mpcl_status mpcl__gpt2_config_parse(const char *name, const char *text, size_t size,
                                    mpcl_gpt2_config *out);

#endif
