/* GEMM: the four paths of the precision plan behind one call. */
#ifndef MPCL_GEMM_H
#define MPCL_GEMM_H

#include <stdbool.h>

#include "mpcl/context.h"
#include "mpcl/plan.h"
#include "mpcl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* C = alpha * op(A) * op(B) + beta * C, all row-major, op(X) = X or X^T.
 *   a: M x K (trans_a false) or K x M (trans_a true)
 *   b: K x N (trans_b false) or N x K (trans_b true)
 *   c: M x N
 * Dtypes by path:
 *   MPCL_GEMM_CLBLAST_SGEMM, MPCL_GEMM_MPCL_F32: a, b, c f32.
 *   MPCL_GEMM_CLBLAST_HGEMM: a, b, c f16; accumulates in f16 and needs usable
 *     half arithmetic with cl_khr_fp16 declared (mpcl_plan_hgemm_usable),
 *     else MPCL_ERR_UNSUPPORTED.
 *     alpha and beta are rounded to f16.
 *   MPCL_GEMM_MPCL_MIXED, MPCL_GEMM_CLBLAST_STAGED: a, b f16 (c f16 or f32),
 *     or a, b bf16 (c bf16 or f32); accumulates in f32. clblast-staged keeps
 *     f32 copies of A, B (and a 16-bit C) in workspaces of the context, which
 *     count in its bytes and live until it is destroyed.
 * Shapes and dtypes are checked before anything is enqueued (MPCL_ERR_SHAPE,
 * MPCL_ERR_DTYPE; c untouched). With beta == 0, c is not read (it may hold
 * NaN). Enqueued: the call returns before the result is ready. */
mpcl_status mpcl_gemm(mpcl_context *ctx, mpcl_gemm_path path, bool trans_a, bool trans_b,
                      float alpha, const mpcl_tensor *a, const mpcl_tensor *b, float beta,
                      mpcl_tensor *c);

/* The path the precision plan picks for tensors stored in `storage` (f32 ->
 * the float32 plan, f16 -> mixed_float16, bf16 -> mixed_bfloat16) on this
 * context's device, MPCL_GEMM included. When MPCL_GEMM names a path this
 * device or storage cannot run, that path is returned anyway, so that
 * mpcl_gemm reports why. */
mpcl_gemm_path mpcl_gemm_default_path(const mpcl_context *ctx, mpcl_dtype storage);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
