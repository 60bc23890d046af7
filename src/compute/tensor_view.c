/* Views: tensors over a range of another tensor's buffer (OpenCL
 * sub-buffers), so that a layer sees its parameters and gradients inside the
 * flat arenas while one optimizer launch covers the whole arena. */
#include <stdlib.h>

#include "compute/compute.h"

size_t mpcl__sub_buffer_align(mpcl_context *ctx) {
    cl_uint bits = 0;
    if (clGetDeviceInfo(ctx->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL) !=
            CL_SUCCESS ||
        bits < 8)
        bits = 4096; /* the largest value seen (NVIDIA): safe everywhere */
    return bits / 8;
}

mpcl_status mpcl__tensor_view(const mpcl_tensor *base, size_t offset, size_t rows, size_t cols,
                              mpcl_tensor **out) {
    *out = NULL;
    mpcl_context *ctx = base->ctx;
    size_t elem = mpcl_dtype_size(base->dtype);
    size_t count = rows * cols;
    if (rows == 0 || cols == 0 || offset > base->rows * base->cols ||
        count > base->rows * base->cols - offset)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "view of %zux%zu at element %zu of a %zux%zu tensor: out of range", rows,
                          cols, offset, base->rows, base->cols);
    size_t align = mpcl__sub_buffer_align(ctx);
    if ((offset * elem) % align != 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "view at byte %zu: not a multiple of the device's base address "
                          "alignment of %zu bytes",
                          offset * elem, align);
    mpcl_tensor *t = calloc(1, sizeof *t);
    if (!t) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating a tensor view");
    mpcl_status st = MPCL_OK;
    cl_buffer_region region = {offset * elem, count * elem};
    cl_int err;
    t->mem = clCreateSubBuffer(base->mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region,
                               &err);
    CHECK_CL(ctx, err);
    t->ctx = ctx;
    t->dtype = base->dtype;
    t->rows = rows;
    t->cols = cols;
    t->bytes = count * elem;
    t->view = true;
    *out = t;
    return MPCL_OK;
cleanup:
    free(t);
    return st;
}
