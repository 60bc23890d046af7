/* libFuzzer harness: a whole NPY file image, through mpcl__npy_parse (the
 * checks of mpcl_npy_read after the open). On success every data byte is
 * read, the sizes are checked against each other, and the finite check
 * runs, so that ASan sees any pointer or size the reader hands out that is
 * out of bounds. */
#include <stdlib.h>

#include "fuzz_common.h"
#include "io/io.h"

static volatile unsigned sink;

static void use(const mpcl_npy *a) {
    const size_t *shape = mpcl_npy_shape(a);
    size_t ndim = mpcl_npy_ndim(a), count = 1;
    if (ndim < 1 || ndim > MPCL_NPY_MAX_DIMS) abort();
    for (size_t i = 0; i < ndim; i++) count *= shape[i];
    size_t size = mpcl_npy_dtype_size(mpcl_npy_dtype_of(a));
    if (size == 0 || count != mpcl_npy_count(a) || mpcl_npy_bytes(a) != count * size ||
        mpcl_npy_rows(a) != shape[0] || mpcl_npy_rows(a) * mpcl_npy_cols(a) != count)
        abort(); /* the sizes agree with one another */
    const unsigned char *d = mpcl_npy_data(a);
    unsigned h = 0;
    for (size_t k = 0; k < mpcl_npy_bytes(a); k++) h += d[k];
    mpcl_status s = mpcl_npy_check_finite(a);
    if (s != MPCL_OK && s != MPCL_ERR_FORMAT) abort();
    sink = h + (unsigned)s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mpcl_npy *a = NULL;
    mpcl_status s = mpcl__npy_parse("fuzz.npy", data, size, &a);
    if (s == MPCL_OK) {
        use(a);
    } else if (a || (s != MPCL_ERR_FORMAT && s != MPCL_ERR_OUT_OF_MEMORY)) {
        abort(); /* a failure is a format error (or no memory) and hands out nothing */
    }
    mpcl_npy_destroy(a);
    return 0;
}
