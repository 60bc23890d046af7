/* Checkpoints as safetensors files (https://github.com/huggingface/safetensors):
 *   u64 little-endian N | N bytes of JSON header | raw little-endian data
 * The header maps each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (offsets relative to the data section) and may hold
 * "__metadata__": {string: string}. Host memory only. */
#ifndef MPCL_SAFETENSORS_H
#define MPCL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "mpcl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* The dtypes mpcl reads and writes, by their safetensors names. */
#define MPCL_ST_DTYPE_MAP(X) \
    X(F64, 8)                \
    X(F32, 4)                \
    X(F16, 2)                \
    X(BF16, 2)               \
    X(I64, 8)                \
    X(I32, 4)                \
    X(I16, 2)                \
    X(I8, 1)                 \
    X(U8, 1)                 \
    X(BOOL, 1)

typedef enum mpcl_st_dtype {
#define MPCL_ST_DTYPE_ENUM_(name, size) MPCL_ST_##name,
    MPCL_ST_DTYPE_MAP(MPCL_ST_DTYPE_ENUM_)
#undef MPCL_ST_DTYPE_ENUM_
        MPCL_ST_DTYPE_COUNT
} mpcl_st_dtype;

/* "F32"; NULL outside the enum. */
const char *mpcl_st_dtype_name(mpcl_st_dtype dtype);
/* Bytes per element; 0 outside the enum. */
size_t mpcl_st_dtype_size(mpcl_st_dtype dtype);

#define MPCL_ST_MAX_DIMS 8

/* One tensor. Data is little-endian, shape[0] x ... x shape[ndim-1] elements,
 * row-major; ndim 0 is a scalar (one element). */
typedef struct mpcl_st_tensor {
    const char *name;
    mpcl_st_dtype dtype;
    size_t ndim;
    size_t shape[MPCL_ST_MAX_DIMS];
    const void *data;
    size_t bytes; /* element count * dtype size; set by the reader, ignored by the writer */
} mpcl_st_tensor;

typedef struct mpcl_st_meta {
    const char *key;
    const char *value;
} mpcl_st_meta;

/* Writes `count` tensors and `meta_count` metadata strings to path,
 * atomically: a temp file in the same folder is written, flushed and fsynced,
 * renamed over path, and the folder fsynced. On any failure the temp file is
 * removed and an earlier file at path is left as it was.
 * Data go in order of decreasing dtype size, so with the header padded to 8
 * bytes every tensor is aligned to its element size in the file.
 * Errors: MPCL_ERR_INVALID_ARG for a bad tensor (empty, duplicate or reserved
 * name, unknown dtype, too many dimensions, NULL data), MPCL_ERR_IO naming the
 * folder or file for a missing folder or a failed write,
 * MPCL_ERR_UNSUPPORTED on a big-endian host. */
mpcl_status mpcl_safetensors_write(const char *path, const mpcl_st_tensor *tensors, size_t count,
                                   const mpcl_st_meta *meta, size_t meta_count);

typedef struct mpcl_safetensors mpcl_safetensors;

/* Reads and validates a whole file: size, header length (below
 * MPCL_ST_MAX_HEADER), strict JSON, known dtypes, shapes that match their
 * byte ranges, offsets inside the data section, contiguous, without gaps or
 * overlaps, string-only metadata. Never reads out of bounds. Memory stays
 * proportional to the file: a header whose JSON values would take more than
 * 8 times its length (or 512 MiB) to hold is refused before it is parsed,
 * and the whole read takes at most about 13 times the header plus the data
 * section.
 * Errors: MPCL_ERR_IO for open or read failures, MPCL_ERR_FORMAT with the
 * exact reason for anything malformed or too dense. */
mpcl_status mpcl_safetensors_read(const char *path, mpcl_safetensors **out);
void mpcl_safetensors_destroy(mpcl_safetensors *st);

#define MPCL_ST_MAX_HEADER (100u * 1000u * 1000u)

/* Tensors in header order. Their data point into the object and stay valid
 * until mpcl_safetensors_destroy. The data section starts 16-byte aligned in
 * memory, so a tensor's data are aligned to its element size whenever its
 * begin offset is (always for files from mpcl_safetensors_write or from
 * Python's safetensors); otherwise read them with memcpy. */
size_t mpcl_safetensors_count(const mpcl_safetensors *st);
const mpcl_st_tensor *mpcl_safetensors_tensor(const mpcl_safetensors *st, size_t index);
/* NULL when no tensor has that name. */
const mpcl_st_tensor *mpcl_safetensors_find(const mpcl_safetensors *st, const char *name);

/* Metadata in header order; mpcl_safetensors_meta_get gives NULL for a
 * missing key. */
size_t mpcl_safetensors_meta_count(const mpcl_safetensors *st);
const mpcl_st_meta *mpcl_safetensors_meta(const mpcl_safetensors *st, size_t index);
const char *mpcl_safetensors_meta_get(const mpcl_safetensors *st, const char *key);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
