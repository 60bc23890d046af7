/* mpcl-mma: GEMMs of f16 or bf16 tensors on the device's matrix engine (the
 * verified row of src/runtime/matrix_engine.c; its kernels, e.g.
 * cl/gemm_mma_nvidia.cl, are built only into such a device's 16-bit
 * programs), f32 accumulation, C rounded once into its 16-bit dtype or kept
 * in f32. mpcl__gemm_check has refused it on any other device. */
#include "compute/compute.h"

mpcl_status mpcl__gemm_run_mma(mpcl_context *ctx, bool ta, bool tb, size_t m, size_t n, size_t k,
                               float alpha, const mpcl_tensor *a, const mpcl_tensor *b, float beta,
                               mpcl_tensor *c) {
    const char *name = c->dtype == MPCL_DTYPE_F32 ? "mpcl_gemm_mma_cf32" : "mpcl_gemm_mma";
    cl_kernel kern;
    mpcl_status st = mpcl__kernel(ctx, a->dtype, name, &kern);
    if (st != MPCL_OK) return st;
    cl_uint m32 = (cl_uint)m, n32 = (cl_uint)n, k32 = (cl_uint)k, ta32 = ta, tb32 = tb;
    st = mpcl__set_args(ctx, kern, name, MPCL_ARG(a->mem), MPCL_ARG(b->mem), MPCL_ARG(c->mem),
                        MPCL_ARG(m32), MPCL_ARG(n32), MPCL_ARG(k32), MPCL_ARG(ta32), MPCL_ARG(tb32),
                        MPCL_ARG(alpha), MPCL_ARG(beta), MPCL_ARGS_END);
    if (st != MPCL_OK) return st;
    /* A group of MPCL_ABI_MMA_ITEMS items per MMA_TILE x MMA_TILE tile of C. */
    const size_t tile = MPCL_ABI_MMA_TILE, local[2] = {MPCL_ABI_MMA_ITEMS, 1};
    return mpcl__launch_2d(ctx, kern, name, (n + tile - 1) / tile * MPCL_ABI_MMA_ITEMS,
                           (m + tile - 1) / tile, local);
}
