/* mpcl-mma: GEMMs of f16 or bf16 tensors on the device's matrix engine (the
 * verified row of src/runtime/matrix_engine.c; its kernels, e.g.
 * cl/gemm_mma_nvidia.cl, are a program of their own, built only on such a
 * device: mpcl__engine_program), f32 accumulation, C rounded once into its
 * 16-bit dtype or kept in f32. mpcl__gemm_check has refused it on any other
 * device.
 *
 * Two kinds of kernel: the pipelined ones (cp.async where the stored rows
 * are whole 16-byte pieces, element loads where not; ldmatrix), one per row
 * of MPCL_ABI_MMA_PIPE_TILES, for the transpose pairs of a training step
 * (NN, NT, TN); mpcl_gemm_mma, which stages element by element, for TT and
 * where MPCL_MMA_TILE=simple says. */
#include <string.h>

#include "compute/compute.h"

enum { NTILES = MPCL__MMA_PIPE_TILES };

void mpcl__gemm_mma_force_tile(mpcl_context *ctx, int tile) {
    ctx->mma_tile = tile;
}

/* The pipelined kernels exist for NN, NT and TN, any shape. */
static bool pipelined_applies(bool ta, bool tb) {
    return !(ta && tb);
}

bool mpcl__gemm_mma_tile_fits(const mpcl_context *ctx, int tile) {
    return mpcl__mma_pipe_tile_bytes(&mpcl__mma_pipe_tiles[tile],
                                     mpcl__matrix_engine_emulated(&ctx->info)) <=
           ctx->info.local_mem_bytes;
}

/* The tile row for an m x n C: MPCL_MMA_TILE's or a test's where set (run
 * checks that it fits), else of the rows whose local memory the device has,
 * the largest whose work-groups fill every compute unit once, else the
 * smallest (the table runs from large to small). NTILES: mpcl_gemm_mma. */
static int pick_tile(const mpcl_context *ctx, size_t m, size_t n) {
    if (ctx->mma_tile >= 0) return ctx->mma_tile;
    const char *env = mpcl__env_value(MPCL_ENV_MMA_TILE);
    for (int i = 0; env && i <= NTILES; i++)
        if (strcmp(env, mpcl__mma_tile_names[i]) == 0) return i;
    size_t units = ctx->info.compute_units ? ctx->info.compute_units : 1;
    int smallest = NTILES;
    for (int i = 0; i < NTILES; i++) {
        const mpcl__mma_pipe_tile *t = &mpcl__mma_pipe_tiles[i];
        if (!mpcl__gemm_mma_tile_fits(ctx, i)) continue;
        if ((m + t->rows - 1) / t->rows * ((n + t->cols - 1) / t->cols) >= units) return i;
        smallest = i;
    }
    return smallest;
}

/* The kernel for one call, and its launch: the items of a work-group, the
 * tile of C it computes and the local memory it takes as an argument (0:
 * none, mpcl_gemm_mma's is its own). */
static const char *choose(const mpcl_context *ctx, bool ta, bool tb, size_t m, size_t n, bool c_f32,
                          size_t *items, size_t *rows, size_t *cols, size_t *local_bytes) {
    int t = pipelined_applies(ta, tb) ? pick_tile(ctx, m, n) : NTILES;
    if (t >= NTILES) {
        *items = MPCL_ABI_MMA_ITEMS;
        *rows = *cols = MPCL_ABI_MMA_TILE;
        *local_bytes = 0;
        return c_f32 ? "mpcl_gemm_mma_cf32" : "mpcl_gemm_mma";
    }
    const mpcl__mma_pipe_tile *tile = &mpcl__mma_pipe_tiles[t];
    *items = tile->items;
    *rows = tile->rows;
    *cols = tile->cols;
    *local_bytes = MPCL_ABI_MMA_PIPE_LOCAL_BYTES(tile->rows, tile->cols, tile->items, ta, tb,
                                                 mpcl__matrix_engine_emulated(&ctx->info));
    return tile->kernels[ta ? 2 : tb ? 1 : 0][c_f32];
}

const char *mpcl__gemm_mma_kernel(const mpcl_context *ctx, bool ta, bool tb, size_t m, size_t n,
                                  bool c_f32) {
    size_t items, rows, cols, local_bytes;
    return choose(ctx, ta, tb, m, n, c_f32, &items, &rows, &cols, &local_bytes);
}

mpcl_status mpcl__gemm_run_mma(mpcl_context *ctx, bool ta, bool tb, size_t m, size_t n, size_t k,
                               float alpha, const mpcl_tensor *a, const mpcl_tensor *b, float beta,
                               mpcl_tensor *c, const mpcl__gemm_epilogue *e) {
    size_t items, rows, cols, local_bytes;
    const char *name =
        choose(ctx, ta, tb, m, n, c->dtype == MPCL_DTYPE_F32, &items, &rows, &cols, &local_bytes);
    if (local_bytes > ctx->info.local_mem_bytes)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "mpcl-mma's %s needs %zu bytes of local memory; %s has %llu (a smaller "
                          "MPCL_MMA_TILE, or leave it unset)",
                          name, local_bytes, ctx->info.name,
                          (unsigned long long)ctx->info.local_mem_bytes);
    cl_kernel kern;
    mpcl_status st = mpcl__engine_kernel(ctx, a->dtype, name, &kern);
    if (st != MPCL_OK) return st;
    cl_uint m32 = (cl_uint)m, n32 = (cl_uint)n, k32 = (cl_uint)k, ta32 = ta, tb32 = tb;
    mpcl__gemm_epilogue_args epi = mpcl__gemm_epilogue_args_of(e, c);
    st = mpcl__set_args(ctx, kern, name, MPCL_ARG(a->mem), MPCL_ARG(b->mem), MPCL_ARG(c->mem),
                        MPCL_ARG(m32), MPCL_ARG(n32), MPCL_ARG(k32), MPCL_ARG(ta32), MPCL_ARG(tb32),
                        MPCL_ARG(alpha), MPCL_ARG(beta), MPCL_ARG(epi.bias), MPCL_ARG(epi.addend),
                        MPCL_ARG(epi.word), MPCL_ARGS_END);
    if (st != MPCL_OK) return st;
    if (local_bytes)
        CHECK_CL(ctx, clSetKernelArg(kern, MPCL_ABI_MMA_PIPE_LOCAL_ARG, local_bytes, NULL));
    /* A group per rows x cols tile of C. */
    const size_t local[2] = {items, 1};
    return mpcl__launch_2d(ctx, kern, name, (n + cols - 1) / cols * items, (m + rows - 1) / rows,
                           local);
cleanup:
    return st;
}
