/* Tensors, allocation accounting, and the small helpers every launcher uses. */
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"

#define DTYPE_SIZE_(suffix, name, bytes, is_float) [MPCL_DTYPE_##suffix] = bytes,
static const size_t dtype_sizes[MPCL_DTYPE_COUNT] = {MPCL_DTYPE_TABLE(DTYPE_SIZE_)};
#undef DTYPE_SIZE_

size_t mpcl_dtype_size(mpcl_dtype dtype) {
    return (unsigned)dtype < MPCL_DTYPE_COUNT ? dtype_sizes[dtype] : 0;
}

mpcl_status mpcl_tensor_create(mpcl_context *ctx, mpcl_dtype dtype, size_t rows, size_t cols,
                               mpcl_tensor **out) {
    *out = NULL;
    size_t elem = mpcl_dtype_size(dtype);
    if (elem == 0) return MPCL_ERROR(ctx, MPCL_ERR_DTYPE, "unknown dtype %d", (int)dtype);
    if (rows == 0 || cols == 0)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "tensor shape %zux%zu has no elements", rows, cols);
    if (rows > SIZE_MAX / cols || rows * cols > SIZE_MAX / elem ||
        rows * cols * elem > ctx->info.max_alloc_bytes)
        return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY,
                          "a %s tensor of %zux%zu exceeds the device's maximum allocation of "
                          "%llu bytes",
                          mpcl_dtype_name(dtype), rows, cols,
                          (unsigned long long)ctx->info.max_alloc_bytes);
    mpcl_tensor *t = calloc(1, sizeof *t);
    if (!t) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating a tensor handle");
    t->ctx = ctx;
    t->dtype = dtype;
    t->rows = rows;
    t->cols = cols;
    t->bytes = rows * cols * elem;
    mpcl_status st = MPCL_OK;
    cl_int err;
    t->mem = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, t->bytes, NULL, &err);
    CHECK_CL(ctx, err);
    /* Zero-fill: a driver that allocates lazily fails here rather than in
     * some later kernel, and nothing ever reads uninitialized memory. */
    const uint32_t zero = 0; /* the pattern is one element: sizes are multiples of it */
    if ((st = mpcl__fill_buffer(ctx, t->mem, &zero, elem, t->bytes, NULL)) != MPCL_OK) goto cleanup;
    mpcl__count_bytes(ctx, t->bytes);
    *out = t;
    return MPCL_OK;
cleanup:
    if (t->mem) clReleaseMemObject(t->mem);
    free(t);
    return st;
}

mpcl_status mpcl__fill_buffer(mpcl_context *ctx, cl_mem mem, const void *pattern,
                              size_t pattern_size, size_t bytes, cl_event *event) {
    mpcl_status st = MPCL_OK;
    CHECK_CL(ctx,
             clEnqueueFillBuffer(ctx->queue, mem, pattern, pattern_size, 0, bytes, 0, NULL, event));
    st = mpcl__host_wrote(ctx, mem);
cleanup:
    return st;
}

void mpcl_tensor_destroy(mpcl_tensor *t) {
    if (!t) return;
    if (!t->view) t->ctx->bytes_now -= t->bytes;
    clReleaseMemObject(t->mem);
    free(t);
}

mpcl_dtype mpcl_tensor_dtype(const mpcl_tensor *t) {
    return t->dtype;
}
size_t mpcl_tensor_rows(const mpcl_tensor *t) {
    return t->rows;
}
size_t mpcl_tensor_cols(const mpcl_tensor *t) {
    return t->cols;
}
size_t mpcl_tensor_count(const mpcl_tensor *t) {
    return t->rows * t->cols;
}
size_t mpcl_tensor_bytes(const mpcl_tensor *t) {
    return t->bytes;
}
size_t mpcl_context_bytes_now(const mpcl_context *ctx) {
    return ctx->bytes_now;
}
size_t mpcl_context_bytes_peak(const mpcl_context *ctx) {
    return ctx->bytes_peak;
}

static mpcl_status check_count(const mpcl_tensor *t, size_t count, const char *what) {
    if (count != t->rows * t->cols)
        return MPCL_ERROR(t->ctx, MPCL_ERR_SHAPE, "%s of %zu elements into a %zux%zu tensor", what,
                          count, t->rows, t->cols);
    return MPCL_OK;
}

mpcl_status mpcl_tensor_upload_raw(mpcl_tensor *t, const void *src, size_t bytes) {
    mpcl_context *ctx = t->ctx;
    mpcl_status st = MPCL_OK;
    if (bytes != t->bytes)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "upload of %zu bytes into a tensor of %zu bytes",
                          bytes, t->bytes);
    ctx->syncs++;
    CHECK_CL(ctx, clEnqueueWriteBuffer(ctx->queue, t->mem, CL_TRUE, 0, bytes, src, 0, NULL, NULL));
    st = mpcl__host_wrote(ctx, t->mem);
cleanup:
    return st;
}

/* Blocking read of `bytes` bytes from byte `offset` of t (in range). */
static mpcl_status read_bytes(const mpcl_tensor *t, size_t offset, void *dst, size_t bytes) {
    mpcl_context *ctx = t->ctx;
    mpcl_status st = MPCL_OK;
    ctx->syncs++;
    CHECK_CL(ctx,
             clEnqueueReadBuffer(ctx->queue, t->mem, CL_TRUE, offset, bytes, dst, 0, NULL, NULL));
cleanup:
    return st;
}

mpcl_status mpcl_tensor_download_raw(const mpcl_tensor *t, void *dst, size_t bytes) {
    if (bytes != t->bytes)
        return MPCL_ERROR(t->ctx, MPCL_ERR_SHAPE,
                          "download of %zu bytes from a tensor of %zu bytes", bytes, t->bytes);
    return read_bytes(t, 0, dst, bytes);
}

mpcl_status mpcl_tensor_upload_f32(mpcl_tensor *t, const float *src, size_t count) {
    mpcl_status st = check_count(t, count, "upload");
    if (st != MPCL_OK) return st;
    if (t->dtype == MPCL_DTYPE_F32) return mpcl_tensor_upload_raw(t, src, t->bytes);
    if (!mpcl_dtype_is_float(t->dtype))
        return MPCL_ERROR(t->ctx, MPCL_ERR_DTYPE, "float upload into a %s tensor",
                          mpcl_dtype_name(t->dtype));
    uint16_t *bits = malloc(t->bytes);
    if (!bits)
        return MPCL_ERROR(t->ctx, MPCL_ERR_OUT_OF_MEMORY, "staging an %s upload",
                          mpcl_dtype_name(t->dtype));
    mpcl__f32_to_16bit_n(t->dtype, src, bits, count);
    st = mpcl_tensor_upload_raw(t, bits, t->bytes);
    free(bits);
    return st;
}

mpcl_status mpcl_tensor_download_f32(const mpcl_tensor *t, float *dst, size_t count) {
    mpcl_status st = check_count(t, count, "download");
    return st == MPCL_OK ? mpcl__tensor_download_f32_at(t, 0, dst, count) : st;
}

mpcl_status mpcl__tensor_download_f32_at(const mpcl_tensor *t, size_t first, float *dst,
                                         size_t count) {
    if (first > t->rows * t->cols || count > t->rows * t->cols - first)
        return MPCL_ERROR(t->ctx, MPCL_ERR_SHAPE,
                          "download of elements %zu..%zu from a %zux%zu tensor", first,
                          first + count, t->rows, t->cols);
    if (!mpcl_dtype_is_float(t->dtype))
        return MPCL_ERROR(t->ctx, MPCL_ERR_DTYPE, "float download from a %s tensor",
                          mpcl_dtype_name(t->dtype));
    size_t size = mpcl_dtype_size(t->dtype);
    if (t->dtype == MPCL_DTYPE_F32) return read_bytes(t, first * size, dst, count * size);
    uint16_t *bits = malloc(count * size + 1);
    if (!bits)
        return MPCL_ERROR(t->ctx, MPCL_ERR_OUT_OF_MEMORY, "staging an %s download",
                          mpcl_dtype_name(t->dtype));
    mpcl_status st = read_bytes(t, first * size, bits, count * size);
    if (st == MPCL_OK) mpcl__16bit_to_f32_n(t->dtype, bits, dst, count);
    free(bits);
    return st;
}

mpcl_status mpcl_tensor_upload_i32(mpcl_tensor *t, const int32_t *src, size_t count) {
    mpcl_status st = check_count(t, count, "upload");
    if (st != MPCL_OK) return st;
    if (t->dtype != MPCL_DTYPE_I32)
        return MPCL_ERROR(t->ctx, MPCL_ERR_DTYPE, "int32 upload into a %s tensor",
                          mpcl_dtype_name(t->dtype));
    return mpcl_tensor_upload_raw(t, src, t->bytes);
}

mpcl_status mpcl_tensor_download_i32(const mpcl_tensor *t, int32_t *dst, size_t count) {
    mpcl_status st = check_count(t, count, "download");
    if (st != MPCL_OK) return st;
    if (t->dtype != MPCL_DTYPE_I32)
        return MPCL_ERROR(t->ctx, MPCL_ERR_DTYPE, "int32 download from a %s tensor",
                          mpcl_dtype_name(t->dtype));
    return mpcl_tensor_download_raw(t, dst, t->bytes);
}

mpcl_status mpcl_tensor_fill(mpcl_tensor *t, float value) {
    mpcl_context *ctx = t->ctx;
    if (!mpcl_dtype_is_float(t->dtype))
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE, "fill of a %s tensor", mpcl_dtype_name(t->dtype));
    cl_kernel k;
    mpcl_status st = mpcl__kernel(ctx, t->dtype, "mpcl_fill", &k);
    if (st != MPCL_OK) return st;
    cl_uint n = (cl_uint)(t->rows * t->cols);
    st = mpcl__set_args(ctx, k, "mpcl_fill", MPCL_ARG(t->mem), MPCL_ARG(value), MPCL_ARG(n),
                        MPCL_ARGS_END);
    if (st != MPCL_OK) return st;
    return mpcl__launch_1d(ctx, k, "mpcl_fill", n, 64);
}

mpcl_status mpcl__tensor_copy_range(mpcl_tensor *dst, size_t dst_first, const mpcl_tensor *src,
                                    size_t src_first, size_t count) {
    mpcl_context *ctx = dst->ctx;
    size_t size = mpcl_dtype_size(dst->dtype);
    size_t dst_n = dst->rows * dst->cols, src_n = src->rows * src->cols;
    if (src->dtype != dst->dtype || dst_first > dst_n || count > dst_n - dst_first ||
        src_first > src_n || count > src_n - src_first)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "copy of %zu elements from element %zu of a %s %zux%zu tensor to "
                          "element %zu of a %s %zux%zu tensor",
                          count, src_first, mpcl_dtype_name(src->dtype), src->rows, src->cols,
                          dst_first, mpcl_dtype_name(dst->dtype), dst->rows, dst->cols);
    mpcl_status st = MPCL_OK;
    CHECK_CL(ctx, clEnqueueCopyBuffer(ctx->queue, src->mem, dst->mem, src_first * size,
                                      dst_first * size, count * size, 0, NULL, NULL));
    st = mpcl__host_wrote(ctx, dst->mem);
cleanup:
    return st;
}

mpcl_status mpcl__tensor_copy_at(mpcl_tensor *dst, size_t dst_first, const mpcl_tensor *src) {
    return mpcl__tensor_copy_range(dst, dst_first, src, 0, src->rows * src->cols);
}

mpcl_tensor mpcl__tensor_rows(const mpcl_tensor *t, size_t B) {
    mpcl_tensor v = *t;
    v.rows = B;
    v.bytes = B * t->cols * mpcl_dtype_size(t->dtype);
    return v;
}

mpcl_tensor mpcl__tensor_reshape(const mpcl_tensor *t, size_t rows, size_t cols) {
    mpcl_tensor v = *t;
    v.rows = rows;
    v.cols = cols;
    return v;
}

mpcl_tensor mpcl__tensor_by_last(const mpcl_tensor *t, size_t cols) {
    return mpcl__tensor_reshape(t, t->rows * t->cols / cols, cols);
}

mpcl_status mpcl__set_arg(mpcl_context *ctx, cl_kernel k, const char *name, cl_uint index,
                          size_t size, const void *value) {
    cl_int err = clSetKernelArg(k, index, size, value);
    if (err != CL_SUCCESS)
        return MPCL_ERROR(ctx, mpcl__cl_status(err), "clSetKernelArg(%s, %u) returned %s (%d)",
                          name, index, mpcl_cl_error_name(err), (int)err);
    return MPCL_OK;
}

mpcl_status mpcl__set_args(mpcl_context *ctx, cl_kernel k, const char *name, ...) {
    va_list ap;
    va_start(ap, name);
    mpcl_status st = MPCL_OK;
    for (cl_uint i = 0; st == MPCL_OK; i++) {
        size_t size = va_arg(ap, size_t);
        if (size == 0) break;
        const void *value = va_arg(ap, const void *);
        st = mpcl__set_arg(ctx, k, name, i, size, value);
    }
    va_end(ap);
    return st;
}

static size_t round_up(size_t n, size_t m) {
    return m ? (n + m - 1) / m * m : n;
}

size_t mpcl__local_size(mpcl_context *ctx, cl_kernel k, size_t want) {
    size_t most = 0;
    if (clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof most, &most,
                                 NULL) != CL_SUCCESS ||
        most == 0)
        return 1;
    while (want > most) want /= 2;
    return want ? want : 1;
}

mpcl_status mpcl__workspace(mpcl_context *ctx, int slot, size_t bytes, cl_mem *out) {
    if (bytes > ctx->workspace_bytes[slot]) {
        cl_int err;
        cl_mem mem = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
        if (err != CL_SUCCESS)
            return MPCL_ERROR(ctx, mpcl__cl_status(err),
                              "clCreateBuffer(%zu bytes of workspace %d) returned %s (%d)", bytes,
                              slot, mpcl_cl_error_name(err), (int)err);
        mpcl_status st = mpcl__host_wrote(ctx, mem);
        if (st != MPCL_OK) {
            clReleaseMemObject(mem);
            return st;
        }
        /* Commands already enqueued on the old buffer keep it alive. */
        if (ctx->workspace[slot]) clReleaseMemObject(ctx->workspace[slot]);
        mpcl__count_bytes(ctx, bytes - ctx->workspace_bytes[slot]);
        ctx->workspace[slot] = mem;
        ctx->workspace_bytes[slot] = bytes;
    }
    *out = ctx->workspace[slot];
    return MPCL_OK;
}

mpcl_status mpcl__workspace_tensor(mpcl_context *ctx, int slot, mpcl_dtype dtype, size_t rows,
                                   size_t cols, mpcl_tensor *out) {
    size_t bytes = rows * cols * mpcl_dtype_size(dtype);
    cl_mem mem;
    TRY(mpcl__workspace(ctx, slot, bytes, &mem));
    *out = (mpcl_tensor){.ctx = ctx,
                         .mem = mem,
                         .dtype = dtype,
                         .rows = rows,
                         .cols = cols,
                         .bytes = bytes,
                         .view = true};
    return MPCL_OK;
}

mpcl_status mpcl__launch_1d(mpcl_context *ctx, cl_kernel k, const char *name, size_t n,
                            size_t local) {
    size_t global = round_up(n, local);
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, local ? &local : NULL, 0,
                                        NULL, mpcl__profile_slot(ctx));
    if (err != CL_SUCCESS)
        return MPCL_ERROR(ctx, mpcl__cl_status(err),
                          "clEnqueueNDRangeKernel(%s, %zu items) returned %s (%d)", name, global,
                          mpcl_cl_error_name(err), (int)err);
    mpcl__profile_record(ctx, name);
    ctx->launches++;
    return MPCL_OK;
}

mpcl_status mpcl__launch_2d(mpcl_context *ctx, cl_kernel k, const char *name, size_t gx, size_t gy,
                            const size_t *local) {
    size_t global[2] = {local ? round_up(gx, local[0]) : gx, local ? round_up(gy, local[1]) : gy};
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, k, 2, NULL, global, local, 0, NULL,
                                        mpcl__profile_slot(ctx));
    if (err != CL_SUCCESS)
        return MPCL_ERROR(ctx, mpcl__cl_status(err),
                          "clEnqueueNDRangeKernel(%s, %zux%zu items) returned %s (%d)", name,
                          global[0], global[1], mpcl_cl_error_name(err), (int)err);
    mpcl__profile_record(ctx, name);
    ctx->launches++;
    return MPCL_OK;
}

cl_mem mpcl_tensor_cl_mem(const mpcl_tensor *t) {
    return t->mem;
}
