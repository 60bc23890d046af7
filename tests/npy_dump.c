/* Prints what mpcl_npy_read makes of an NPY file, for tests/test_npy_numpy.py
 * to compare with what numpy wrote:
 *   npy_dump FILE           dtype, shape, rows, cols, count, then the data
 *                           as hex, one line each
 *   npy_dump --finite FILE  mpcl_npy_check_finite's verdict
 * A failure prints the status name and the message on stderr and exits 1. */
#include <stdio.h>
#include <string.h>

#include "mpcl/npy.h"

/* The message names the status. */
static int fail(void) {
    fprintf(stderr, "%s\n", mpcl_errmsg());
    return 1;
}

static void dump(const mpcl_npy *a) {
    printf("dtype %s\nshape", mpcl_npy_dtype_name(mpcl_npy_dtype_of(a)));
    for (size_t i = 0; i < mpcl_npy_ndim(a); i++) printf(" %zu", mpcl_npy_shape(a)[i]);
    printf("\nrows %zu\ncols %zu\ncount %zu\ndata ", mpcl_npy_rows(a), mpcl_npy_cols(a),
           mpcl_npy_count(a));
    const unsigned char *d = mpcl_npy_data(a);
    for (size_t k = 0; k < mpcl_npy_bytes(a); k++) printf("%02x", d[k]);
    printf("\n");
}

int main(int argc, char **argv) {
    int finite = argc == 3 && strcmp(argv[1], "--finite") == 0;
    if (argc != 2 && !finite) {
        fprintf(stderr, "usage: npy_dump [--finite] FILE\n");
        return 2;
    }
    mpcl_npy *a;
    mpcl_status st = mpcl_npy_read(argv[argc - 1], &a);
    if (st != MPCL_OK) return fail();
    if (finite)
        st = mpcl_npy_check_finite(a);
    else
        dump(a);
    mpcl_npy_destroy(a);
    if (st != MPCL_OK) return fail();
    if (finite) printf("finite\n");
    return 0;
}
