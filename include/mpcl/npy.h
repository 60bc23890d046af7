/* NumPy's NPY files (numpy.save; the format of numpy.lib.format):
 *   "\x93NUMPY" | major, minor | header length (u16 LE in 1.0, u32 LE in 2.0
 *   and 3.0) | header | raw data
 * The header is a Python dict literal ending in '\n', padded with spaces:
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 784), }
 * Host memory only; the data are read whole. */
#ifndef MPCL_NPY_H
#define MPCL_NPY_H

#include <stddef.h>

#include "mpcl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* The element types mpcl reads: little-endian integers and IEEE floats, by
 * their NumPy names (kind and bytes, as in a header's 'descr' after its
 * byte-order character). */
#define MPCL_NPY_DTYPE_MAP(X) \
    X(U1, "u1", 1)            \
    X(I1, "i1", 1)            \
    X(U2, "u2", 2)            \
    X(I2, "i2", 2)            \
    X(U4, "u4", 4)            \
    X(I4, "i4", 4)            \
    X(U8, "u8", 8)            \
    X(I8, "i8", 8)            \
    X(F2, "f2", 2)            \
    X(F4, "f4", 4)            \
    X(F8, "f8", 8)

typedef enum mpcl_npy_dtype {
#define MPCL_NPY_DTYPE_ENUM_(name, text, size) MPCL_NPY_##name,
    MPCL_NPY_DTYPE_MAP(MPCL_NPY_DTYPE_ENUM_)
#undef MPCL_NPY_DTYPE_ENUM_
        MPCL_NPY_DTYPE_COUNT
} mpcl_npy_dtype;

/* "f4"; NULL outside the enum. */
const char *mpcl_npy_dtype_name(mpcl_npy_dtype dtype);
/* Bytes per element; 0 outside the enum. */
size_t mpcl_npy_dtype_size(mpcl_npy_dtype dtype);

#define MPCL_NPY_MAX_DIMS 8
/* Longest header read (bytes). A header that numpy.save writes for any array
 * mpcl reads takes at most 256; longer ones (structured dtypes) are refused. */
#define MPCL_NPY_MAX_HEADER 65536u

typedef struct mpcl_npy mpcl_npy;

/* Reads a whole NPY file of version 1.0, 2.0 or 3.0, through the library's
 * non-blocking open (regular files only). The header must be exactly a dict
 * of the three keys 'descr', 'fortran_order' and 'shape', each once (any
 * other key is refused, as numpy.load refuses it), written as numpy.save
 * writes it or with the other spellings of a Python literal that mpcl
 * takes: quotes ' or ", spaces around items, an optional trailing comma
 * (no escapes, tabs or line breaks, numbers in plain decimal only); only
 * printable ASCII, and '\n' as its last byte. Its parts:
 *   - 'descr': '<' and one of the names above ('|' or '<' for the 1-byte
 *     types); big-endian, native-order, complex, bool, string, object and
 *     structured dtypes are refused, naming the dtype.
 *   - 'fortran_order': False (True is refused: C order only).
 *   - 'shape': a tuple of 1 to MPCL_NPY_MAX_DIMS plain decimal integers
 *     (a scalar's () is refused); the product of its sizes other than 0,
 *     times the element size, must fit in size_t (so no count or row size
 *     overflows, even in an empty array).
 * The data after the header must be exactly count * element size bytes:
 * fewer is a truncated file, more is a header that lies about the shape;
 * either message gives both byte counts. The header's padding is not
 * checked (numpy aligns the data to 64 bytes, versions before 1.14 to 16).
 * Errors, each naming the file and the part that is wrong: MPCL_ERR_IO for a
 * missing or unreadable file or one that is not a regular file,
 * MPCL_ERR_FORMAT for anything malformed, MPCL_ERR_OUT_OF_MEMORY,
 * MPCL_ERR_UNSUPPORTED on a big-endian host, MPCL_ERR_INVALID_ARG for NULL
 * arguments. *out is NULL after any failure. */
mpcl_status mpcl_npy_read(const char *path, mpcl_npy **out);
void mpcl_npy_destroy(mpcl_npy *a);

/* The path it was read from, for messages. */
const char *mpcl_npy_path(const mpcl_npy *a);
mpcl_npy_dtype mpcl_npy_dtype_of(const mpcl_npy *a);
size_t mpcl_npy_ndim(const mpcl_npy *a);
/* ndim sizes. */
const size_t *mpcl_npy_shape(const mpcl_npy *a);
/* Elements: the product of the shape (0 when a size is 0). */
size_t mpcl_npy_count(const mpcl_npy *a);
/* Rows: shape[0] (one sample each). */
size_t mpcl_npy_rows(const mpcl_npy *a);
/* Elements per row: the product of shape[1..] (1 for a 1-D array). */
size_t mpcl_npy_cols(const mpcl_npy *a);
/* The data, row-major, little-endian, count * element size bytes (bytes),
 * aligned to 64 bytes; valid until mpcl_npy_destroy. */
const void *mpcl_npy_data(const mpcl_npy *a);
size_t mpcl_npy_bytes(const mpcl_npy *a);

/* MPCL_OK when every element is finite (always for the integer dtypes);
 * otherwise MPCL_ERR_FORMAT naming the file, what the first non-finite
 * element is (NaN, inf or -inf) and where, by row and column (and by its
 * full index when the array has more than 2 dimensions). */
mpcl_status mpcl_npy_check_finite(const mpcl_npy *a);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
