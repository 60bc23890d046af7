/* Tensors: device buffers with a dtype and a 2-D row-major shape, and the
 * context's allocation accounting. */
#ifndef MPCL_TENSOR_H
#define MPCL_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "mpcl/context.h"
#include "mpcl/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

typedef struct mpcl_tensor mpcl_tensor;

/* A rows x cols tensor, zero-filled. A request over the device's maximum
 * allocation fails with MPCL_ERR_OUT_OF_MEMORY before any OpenCL call; so
 * does an allocation the driver refuses, at creation or at the first fill. */
mpcl_status mpcl_tensor_create(mpcl_context *ctx, mpcl_dtype dtype, size_t rows, size_t cols,
                               mpcl_tensor **out);
void mpcl_tensor_destroy(mpcl_tensor *t);

mpcl_dtype mpcl_tensor_dtype(const mpcl_tensor *t);
size_t mpcl_tensor_rows(const mpcl_tensor *t);
size_t mpcl_tensor_cols(const mpcl_tensor *t);
size_t mpcl_tensor_count(const mpcl_tensor *t); /* rows * cols */
size_t mpcl_tensor_bytes(const mpcl_tensor *t);
size_t mpcl_dtype_size(mpcl_dtype dtype);

/* Host float <-> f32, f16 or bf16 tensor (f16 and bf16 rounded to nearest
 * even with overflow to inf, see half.h; the way back is exact). `count` must
 * equal rows * cols (MPCL_ERR_SHAPE).
 * Blocking: the host buffer may be reused when the call returns. */
mpcl_status mpcl_tensor_upload_f32(mpcl_tensor *t, const float *src, size_t count);
mpcl_status mpcl_tensor_download_f32(const mpcl_tensor *t, float *dst, size_t count);
/* Host int32 <-> i32 tensor. */
mpcl_status mpcl_tensor_upload_i32(mpcl_tensor *t, const int32_t *src, size_t count);
mpcl_status mpcl_tensor_download_i32(const mpcl_tensor *t, int32_t *dst, size_t count);
/* Raw bytes, no conversion (f16 or bf16 bit patterns, for tests). `bytes` must equal
 * mpcl_tensor_bytes(t). */
mpcl_status mpcl_tensor_upload_raw(mpcl_tensor *t, const void *src, size_t bytes);
mpcl_status mpcl_tensor_download_raw(const mpcl_tensor *t, void *dst, size_t bytes);

/* Every element = value, rounded by the device's store (f32, f16 or bf16
 * tensors), enqueued. */
mpcl_status mpcl_tensor_fill(mpcl_tensor *t, float value);

/* Device bytes held by this context's tensors now, and the most ever held. */
size_t mpcl_context_bytes_now(const mpcl_context *ctx);
size_t mpcl_context_bytes_peak(const mpcl_context *ctx);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
