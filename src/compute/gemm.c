/* GEMM: CLBlast SGEMM/HGEMM, SGEMM on 16-bit tensors through f32 workspaces,
 * and mpcl's own register-tiled kernel (cl/gemm.cl) behind one call. The rule
 * that picks a path lives in plan.c. */
#include <stdint.h>
#include <stdio.h>

#include "runtime/clblast_status.h"
#include "compute/compute.h"
#include "mpcl/gemm.h"

#include <clblast_c.h>

mpcl_gemm_path mpcl_gemm_default_path(const mpcl_context *ctx, mpcl_dtype storage) {
    mpcl_policy policy = storage == MPCL_DTYPE_F16    ? MPCL_POLICY_MIXED_FLOAT16
                         : storage == MPCL_DTYPE_BF16 ? MPCL_POLICY_MIXED_BFLOAT16
                                                      : MPCL_POLICY_FLOAT32;
    mpcl_plan plan = mpcl_context_plan(ctx, policy);
    /* An impossible MPCL_GEMM leaves the plan unusable with its default path;
     * hand the requested path on so that mpcl_gemm names the problem. */
    if (!plan.usable && ctx->overrides.gemm_set) return ctx->overrides.gemm;
    return plan.gemm;
}

/* " (chosen by MPCL_GEMM)" when the path came from the environment, so that a
 * user who set it sees where an impossible request came from. */
static const char *override_note(const mpcl_context *ctx, mpcl_gemm_path path) {
    return ctx->overrides.gemm_set && ctx->overrides.gemm == path ? " (set by MPCL_GEMM)" : "";
}

/* The dtypes a path takes, for A of dtype a_dtype: A and B in *in, C in *in
 * or *out_alt, in words for errors. False for an unknown path. */
static bool path_dtypes(mpcl_gemm_path path, mpcl_dtype a_dtype, mpcl_dtype *in,
                        mpcl_dtype *out_alt, const char **want) {
    switch (path) {
    case MPCL_GEMM_CLBLAST_SGEMM:
    case MPCL_GEMM_MPCL_F32:
        *in = *out_alt = MPCL_DTYPE_F32;
        *want = "f32 A, B and C";
        return true;
    case MPCL_GEMM_CLBLAST_HGEMM:
        *in = *out_alt = MPCL_DTYPE_F16;
        *want = "f16 A, B and C";
        return true;
    case MPCL_GEMM_MPCL_MIXED:
    case MPCL_GEMM_CLBLAST_STAGED:
    case MPCL_GEMM_MPCL_MMA:
        /* f16 or bf16 inputs, C in the same dtype or f32. */
        *in = a_dtype == MPCL_DTYPE_BF16 ? MPCL_DTYPE_BF16 : MPCL_DTYPE_F16;
        *out_alt = MPCL_DTYPE_F32;
        *want = *in == MPCL_DTYPE_BF16 ? "bf16 A and B, and bf16 or f32 C"
                                       : "f16 (or bf16) A and B, and the same or f32 C";
        return true;
    default: return false;
    }
}

bool mpcl__gemm_f32_c_of_16_bit(mpcl_gemm_path path, mpcl_dtype storage) {
    mpcl_dtype in, out_alt;
    const char *want;
    return storage != MPCL_DTYPE_F32 && path_dtypes(path, storage, &in, &out_alt, &want) &&
           in == storage && out_alt == MPCL_DTYPE_F32;
}

static mpcl_status check_dtypes(mpcl_context *ctx, mpcl_gemm_path path, const mpcl_tensor *a,
                                const mpcl_tensor *b, const mpcl_tensor *c) {
    mpcl_dtype in, out_alt;
    const char *want;
    if (!path_dtypes(path, a->dtype, &in, &out_alt, &want))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown GEMM path %d", (int)path);
    if (a->dtype != in || b->dtype != in || (c->dtype != in && c->dtype != out_alt))
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE, "gemm path %s%s needs %s; got A %s, B %s, C %s",
                          mpcl_gemm_path_name(path), override_note(ctx, path), want,
                          mpcl_dtype_name(a->dtype), mpcl_dtype_name(b->dtype),
                          mpcl_dtype_name(c->dtype));
    return MPCL_OK;
}

void mpcl__gemm_force_tiles(mpcl_context *ctx, mpcl__gemm_tiles tiles, unsigned strip) {
    ctx->gemm_tiles = tiles;
    ctx->gemm_strip = strip;
}

/* The tile shape for C's n columns and op(B)'s storage (tb: transposed).
 *  - 16x16 for N >= 16 where the device's float vectors are 16 wide
 *    (AVX-512: the 16 accumulators are 16 of its 32 registers);
 *  - elsewhere 4x16 for N >= 16 (AVX2: 8 accumulator registers of 16; each
 *    k loads one 64-byte row piece of op(B) and 4 A values for 8 fmas, where
 *    8x8 tiles loaded 9 values for 8 fmas), except for a transposed B, whose
 *    elements the kernel gathers one by one (16 per k cost more than the 8
 *    of 8x8: 128x128x10 NT, 44-60 against 32-35 us);
 *  - below 16 columns, 8x8, except for 9-15 columns of a row-major B on
 *    16-wide vectors: 16x16 there, whose rows of op(B) run on into the next
 *    row (cl/gemm.cl), half the fmas of two 8-wide tiles (AVX-512, the
 *    10-class layer: 128x10x128 NN 12.4 -> 9.9 us, TN 12.5 -> 9.7).
 * A 16x16 tile on AVX2 spills (32 accumulator registers): the five MLP GEMMs
 * took 900-943 us there against 757-878 us in 8x8 tiles (bench/README.md). */
static mpcl__gemm_tiles pick_tiles(const mpcl_context *ctx, size_t n, bool tb) {
    /* Forced BF16_DOT tiles where that kernel does not apply: the usual choice. */
    if (ctx->gemm_tiles != MPCL__GEMM_TILES_AUTO && ctx->gemm_tiles != MPCL__GEMM_TILES_BF16_DOT)
        return ctx->gemm_tiles;
    bool wide_vectors = ctx->info.native_vector_width_float >= MPCL_ABI_GEMM_TILE_WIDE;
    if (n < MPCL_ABI_GEMM_TILE_WIDE)
        return wide_vectors && !tb && n > MPCL_ABI_GEMM_TILE_NARROW ? MPCL__GEMM_TILES_16X16
                                                                    : MPCL__GEMM_TILES_8X8;
    if (wide_vectors) return MPCL__GEMM_TILES_16X16;
    return tb ? MPCL__GEMM_TILES_8X8 : MPCL__GEMM_TILES_4X16;
}

/* Tiles per item. The item runs its strip of tiles one after the other
 * through each 64-deep block of k:
 *  - 4x16 tiles in strips down the rows, so that block of op(B) (4 KiB)
 *    comes from memory once and from L1 for the other tiles: the
 *    128x128x784 GEMM went from ~67 to ~83 GFLOP/s on one Zen 3 core;
 *  - 16x16 tiles in strips along the columns, so that block of op(A) is
 *    staged (16-bit: converted) once for the strip, or read in place
 *    (f32) from memory once and from L1 for the other tiles: on Zen 4 (two
 *    threads), f16 784x128x128 TN 172-181 -> 138-151 us and 128x128x10 NT
 *    12.2-12.6 -> 9.9-10.4 us; f32 784x128x128 TN 176 -> 141-153 us,
 *    128x128x784 NN 158-162 -> 147-152, 128x128x10 NT 13.3 -> 10.7.
 * As many as fit, while there are 4 items per compute unit to share. */
static unsigned pick_strip(const mpcl_context *ctx, mpcl__gemm_tiles tiles, size_t m, size_t n) {
    bool along_cols = tiles == MPCL__GEMM_TILES_16X16;
    unsigned most = tiles == MPCL__GEMM_TILES_4X16 ? MPCL_ABI_GEMM_STRIP_MAX
                    : along_cols                   ? MPCL_ABI_GEMM_COL_STRIP_MAX
                                                   : 1;
    /* The kernels' partial sums hold at most `most` tiles. */
    if (ctx->gemm_strip) return ctx->gemm_strip < most ? ctx->gemm_strip : most;
    size_t rows = along_cols ? MPCL_ABI_GEMM_TILE_WIDE : MPCL_ABI_GEMM_TILE_FLAT_ROWS;
    size_t col_tiles = (n + MPCL_ABI_GEMM_TILE_WIDE - 1) / MPCL_ABI_GEMM_TILE_WIDE;
    size_t row_tiles = (m + rows - 1) / rows;
    size_t want = 4 * (size_t)(ctx->info.compute_units ? ctx->info.compute_units : 1);
    unsigned strip = most;
    while (strip > 1 && (along_cols ? row_tiles * ((col_tiles + strip - 1) / strip)
                                    : col_tiles * ((row_tiles + strip - 1) / strip)) < want)
        strip /= 2;
    return strip;
}

/* mpcl's kernels gather a transposed B element by element: conv2 of the CNN
 * on PoCL took 9.2-9.4 ms NT against 4.1-4.7 ms NN on a staged copy of B^T,
 * and its 1600x128 Dense's input gradient 759 us against 363 us. So a B of
 * STAGE_BT_MIN elements or more is transposed into a workspace first (one
 * launch, bits copied) and multiplied NN: the same fmas in the same k order
 * per element, so the same bits. Below it (the MLP's 128x10 output layer)
 * the launch costs about what it saves. */
#define STAGE_BT_MIN 16384

mpcl__gemm_epilogue_args mpcl__gemm_epilogue_args_of(const mpcl__gemm_epilogue *e,
                                                     const mpcl_tensor *c) {
    mpcl__gemm_epilogue_args x = {0, c->mem, c->mem};
    if (e && e->bias) x.word |= MPCL_ABI_GEMM_EPI_BIAS, x.bias = e->bias->mem;
    if (e && e->addend) x.word |= MPCL_ABI_GEMM_EPI_ADDEND, x.addend = e->addend->mem;
    return x;
}

static mpcl_status run_mpcl(mpcl_context *ctx, mpcl_gemm_path path, bool ta, bool tb, size_t m,
                            size_t n, size_t k, float alpha, const mpcl_tensor *a,
                            const mpcl_tensor *b, float beta, mpcl_tensor *c,
                            const mpcl__gemm_epilogue *e) {
    /* Each item computes a strip of tiles whose shape the kernels share
     * through cl/abi.h: down the rows in 4x16, along the columns in 16x16. */
    static const struct {
        const char *name, *name_cf32;
        size_t rows, cols;
    } kernels[] = {
        [MPCL__GEMM_TILES_16X16] = {"mpcl_gemm_w16", "mpcl_gemm_w16_cf32", MPCL_ABI_GEMM_TILE_WIDE,
                                    MPCL_ABI_GEMM_TILE_WIDE},
        [MPCL__GEMM_TILES_4X16] = {"mpcl_gemm_r4w16", "mpcl_gemm_r4w16_cf32",
                                   MPCL_ABI_GEMM_TILE_FLAT_ROWS, MPCL_ABI_GEMM_TILE_WIDE},
        [MPCL__GEMM_TILES_8X8] = {"mpcl_gemm_w8", "mpcl_gemm_w8_cf32", MPCL_ABI_GEMM_TILE_NARROW,
                                  MPCL_ABI_GEMM_TILE_NARROW},
    };
    mpcl__gemm_tiles tiles = pick_tiles(ctx, n, tb);
    cl_uint strip = pick_strip(ctx, tiles, m, n);
    bool f32_out = path == MPCL_GEMM_MPCL_MIXED && c->dtype == MPCL_DTYPE_F32;
    const char *name = f32_out ? kernels[tiles].name_cf32 : kernels[tiles].name;
    mpcl_dtype storage = path == MPCL_GEMM_MPCL_MIXED ? a->dtype : MPCL_DTYPE_F32;
    cl_kernel kern;
    mpcl_status st = mpcl__kernel(ctx, storage, name, &kern);
    if (st != MPCL_OK) return st;
    cl_uint m32 = (cl_uint)m, n32 = (cl_uint)n, k32 = (cl_uint)k, ta32 = ta, tb32 = tb;
    mpcl__gemm_epilogue_args epi = mpcl__gemm_epilogue_args_of(e, c);
    st = mpcl__set_args(ctx, kern, name, MPCL_ARG(a->mem), MPCL_ARG(b->mem), MPCL_ARG(c->mem),
                        MPCL_ARG(m32), MPCL_ARG(n32), MPCL_ARG(k32), MPCL_ARG(ta32), MPCL_ARG(tb32),
                        MPCL_ARG(alpha), MPCL_ARG(beta), MPCL_ARG(strip), MPCL_ARG(epi.bias),
                        MPCL_ARG(epi.addend), MPCL_ARG(epi.word), MPCL_ARGS_END);
    if (st != MPCL_OK) return st;
    /* One item per work-group: each item's tile is the unit of work, and on
     * CPU devices PoCL spreads work-groups over the cores. */
    const size_t local[2] = {1, 1};
    bool along_cols = tiles == MPCL__GEMM_TILES_16X16;
    size_t rows = kernels[tiles].rows * (along_cols ? 1 : strip);
    size_t cols = kernels[tiles].cols * (along_cols ? strip : 1);
    return mpcl__launch_2d(ctx, kern, name, (n + cols - 1) / cols, (m + rows - 1) / rows, local);
}

static mpcl_status run_clblast(mpcl_context *ctx, mpcl_gemm_path path, bool ta, bool tb, size_t m,
                               size_t n, size_t k, float alpha, const mpcl_tensor *a,
                               const mpcl_tensor *b, float beta, mpcl_tensor *c) {
    mpcl_status st = MPCL_OK;
    CLBlastTranspose opa = ta ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose opb = tb ? CLBlastTransposeYes : CLBlastTransposeNo;
    if (beta == 0.0f) {
        /* CLBlast computes beta * C even for beta == 0, so NaN or inf in C
         * would survive; zero C first to give beta == 0 its BLAS meaning. */
        const cl_uint zero = 0;
        TRY(mpcl__fill_buffer(ctx, c->mem, &zero, mpcl_dtype_size(c->dtype), c->bytes,
                              mpcl__profile_slot(ctx)));
        mpcl__profile_record(ctx, "clblast: zero C");
        ctx->launches++;
    }
    /* Row-major leading dimensions are the stored column counts. */
    if (path == MPCL_GEMM_CLBLAST_HGEMM) {
        CHECK_CLBLAST(
            ctx, CLBlastHgemm(CLBlastLayoutRowMajor, opa, opb, m, n, k, mpcl_f32_to_f16(alpha),
                              a->mem, 0, a->cols, b->mem, 0, b->cols, mpcl_f32_to_f16(beta), c->mem,
                              0, c->cols, &ctx->queue, mpcl__profile_slot(ctx)));
        mpcl__profile_record(ctx, "CLBlastHgemm");
    } else {
        CHECK_CLBLAST(ctx, CLBlastSgemm(CLBlastLayoutRowMajor, opa, opb, m, n, k, alpha, a->mem, 0,
                                        a->cols, b->mem, 0, b->cols, beta, c->mem, 0, c->cols,
                                        &ctx->queue, mpcl__profile_slot(ctx)));
        mpcl__profile_record(ctx, "CLBlastSgemm");
    }
    ctx->launches++; /* one CLBlast call; it may enqueue more than one kernel */
cleanup:
    return st;
}

/* clblast-staged: A and B widened to f32 (exact), SGEMM, and C rounded once
 * when it is 16-bit (read first only when beta needs it). Three to five
 * launches instead of one: on a GPU each cast is a few microseconds, where
 * the tuned SGEMM saves milliseconds. */
static mpcl_status run_staged(mpcl_context *ctx, bool ta, bool tb, size_t m, size_t n, size_t k,
                              float alpha, const mpcl_tensor *a, const mpcl_tensor *b, float beta,
                              mpcl_tensor *c) {
    mpcl_tensor a32, b32, c32;
    mpcl_status st = mpcl__workspace_tensor(ctx, 0, MPCL_DTYPE_F32, a->rows, a->cols, &a32);
    if (st == MPCL_OK) st = mpcl__workspace_tensor(ctx, 1, MPCL_DTYPE_F32, b->rows, b->cols, &b32);
    if (st == MPCL_OK) st = mpcl_cast(ctx, &a32, a);
    if (st == MPCL_OK) st = mpcl_cast(ctx, &b32, b);
    if (st != MPCL_OK) return st;
    if (c->dtype == MPCL_DTYPE_F32)
        return run_clblast(ctx, MPCL_GEMM_CLBLAST_SGEMM, ta, tb, m, n, k, alpha, &a32, &b32, beta,
                           c);
    st = mpcl__workspace_tensor(ctx, 2, MPCL_DTYPE_F32, m, n, &c32);
    if (st == MPCL_OK && beta != 0.0f) st = mpcl_cast(ctx, &c32, c);
    if (st == MPCL_OK)
        st = run_clblast(ctx, MPCL_GEMM_CLBLAST_SGEMM, ta, tb, m, n, k, alpha, &a32, &b32, beta,
                         &c32);
    if (st == MPCL_OK) st = mpcl_cast(ctx, c, &c32);
    return st;
}

/* The tiles of cl/gemm_bf16_dot.cl, widest first: each kernel's name (C in
 * bf16, C in f32), its rows and columns. */
typedef struct dot_tiles {
    const char *name, *name_cf32;
    size_t rows, cols;
} dot_tiles;
static const dot_tiles DOT_TILES[] = {
    {"mpcl_gemm_dot_r4w64", "mpcl_gemm_dot_r4w64_cf32", 4, 64},
    {"mpcl_gemm_dot_r8w32", "mpcl_gemm_dot_r8w32_cf32", 8, 32},
};

/* bf16 on AVX512-BF16 (cl/gemm_bf16_dot.cl), where the device verified the
 * instruction and the shape fills a tile; NULL otherwise. AUTO and forced
 * BF16_DOT tiles take it; MPCL_BF16_DOT=off and the other forced tiles do
 * not. */
static const dot_tiles *dot_kernel(const mpcl_context *ctx, bool ta, const mpcl_tensor *a, size_t m,
                                   size_t n) {
    if (a->dtype != MPCL_DTYPE_BF16 || ctx->info.bf16_dot != MPCL_BF16_DOT_VERIFIED ||
        mpcl__env_value(MPCL_ENV_BF16_DOT) ||
        (ctx->gemm_tiles != MPCL__GEMM_TILES_AUTO && ctx->gemm_tiles != MPCL__GEMM_TILES_BF16_DOT))
        return NULL;
    /* A transposed A is packed first (run_dot), a pass over all of it, which
     * a few rows of C do not repay: conv1's weight gradient (9x32x86528 TN)
     * ran 0.65x the f32-fma kernel's time so; conv2's (288x64x15488)
     * 0.95-1.05x, the Dense's (1600x128x128) 1.10-1.19x (mpcl-bench
     * gemm-cnn, a quiet machine). */
    if (ta && m < 64) return NULL;
    for (size_t i = 0; i < sizeof DOT_TILES / sizeof DOT_TILES[0]; i++)
        if (n >= DOT_TILES[i].cols && m >= DOT_TILES[i].rows) return &DOT_TILES[i];
    return NULL;
}

/* Packs the K x N matrix x (stored transposed with x_t) in pairs of k into
 * workspace `slot`: as [K/2][N] pairs, or as [N][K/2] with out_t. */
static mpcl_status dot_pack(mpcl_context *ctx, int slot, const mpcl_tensor *x, size_t k, size_t n,
                            bool x_t, bool out_t, mpcl_tensor *out) {
    static const char name[] = "mpcl_gemm_dot_pack";
    size_t pairs = (k + 1) / 2;
    cl_kernel kern;
    /* a pair of bf16 per f32-sized element */
    mpcl_status st = mpcl__workspace_tensor(ctx, slot, MPCL_DTYPE_F32, out_t ? n : pairs,
                                            out_t ? pairs : n, out);
    if (st == MPCL_OK) st = mpcl__kernel(ctx, MPCL_DTYPE_BF16, name, &kern);
    cl_uint k32 = (cl_uint)k, n32 = (cl_uint)n, xt32 = x_t, outt32 = out_t;
    if (st == MPCL_OK)
        st = mpcl__set_args(ctx, kern, name, MPCL_ARG(x->mem), MPCL_ARG(out->mem), MPCL_ARG(k32),
                            MPCL_ARG(n32), MPCL_ARG(xt32), MPCL_ARG(outt32), MPCL_ARGS_END);
    if (st != MPCL_OK) return st;
    /* Items of 16 x 16 pairs, in groups of 8 along the output's rows (PoCL
     * pays per group). */
    size_t jblocks = (n + 15) / 16, kblocks = (pairs + 15) / 16;
    const size_t local[2] = {8, 1};
    return mpcl__launch_2d(ctx, kern, name, out_t ? kblocks : jblocks, out_t ? jblocks : kblocks,
                           local);
}

/* op(B) packed in pairs of k into workspace 1 (it reads a transposed B as
 * readily); a transposed A into rows of pairs in workspace 0 (read in place
 * otherwise: the convolutions' columns, the largest operand); then the
 * tiles. */
static mpcl_status run_dot(mpcl_context *ctx, const dot_tiles *tiles, bool ta, bool tb, size_t m,
                           size_t n, size_t k, float alpha, const mpcl_tensor *a,
                           const mpcl_tensor *b, float beta, mpcl_tensor *c) {
    const char *name = c->dtype == MPCL_DTYPE_F32 ? tiles->name_cf32 : tiles->name;
    mpcl_tensor b2, a2;
    const mpcl_tensor *arows = a;
    cl_uint ars = (cl_uint)k;
    mpcl_status st = dot_pack(ctx, 1, b, k, n, tb, false, &b2);
    if (st == MPCL_OK && ta) {
        st = dot_pack(ctx, 0, a, k, m, false, true, &a2);
        arows = &a2;
        ars = (cl_uint)(2 * ((k + 1) / 2));
    }
    cl_kernel kern;
    if (st == MPCL_OK) st = mpcl__kernel(ctx, MPCL_DTYPE_BF16, name, &kern);
    cl_uint m32 = (cl_uint)m, n32 = (cl_uint)n, k32 = (cl_uint)k;
    if (st == MPCL_OK)
        st = mpcl__set_args(ctx, kern, name, MPCL_ARG(arows->mem), MPCL_ARG(ars), MPCL_ARG(b2.mem),
                            MPCL_ARG(c->mem), MPCL_ARG(m32), MPCL_ARG(n32), MPCL_ARG(k32),
                            MPCL_ARG(alpha), MPCL_ARG(beta), MPCL_ARGS_END);
    if (st != MPCL_OK) return st;
    const size_t local[2] = {1, 1};
    return mpcl__launch_2d(ctx, kern, name, (n + tiles->cols - 1) / tiles->cols,
                           (m + tiles->rows - 1) / tiles->rows, local);
}

mpcl_status mpcl__gemm_check(mpcl_context *ctx, mpcl_gemm_path path, bool trans_a, bool trans_b,
                             const mpcl_tensor *a, const mpcl_tensor *b, const mpcl_tensor *c) {
    if (!a || !b || !c)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "gemm: A, B and C must not be NULL");
    if (a->ctx != ctx || b->ctx != ctx || c->ctx != ctx)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "gemm: A, B and C must belong to ctx");
    mpcl_status st = check_dtypes(ctx, path, a, b, c);
    if (st != MPCL_OK) return st;

    /* op(A) is m x k, op(B) is k x n, C is m x n. */
    size_t m = trans_a ? a->cols : a->rows, k = trans_a ? a->rows : a->cols;
    size_t kb = trans_b ? b->cols : b->rows, n = trans_b ? b->rows : b->cols;
    if (kb != k || c->rows != m || c->cols != n)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "gemm: op(A) %zux%zu (A %zux%zu%s) times op(B) %zux%zu (B %zux%zu%s) "
                          "does not fit C %zux%zu",
                          m, k, a->rows, a->cols, trans_a ? ", transposed" : "", kb, n, b->rows,
                          b->cols, trans_b ? ", transposed" : "", c->rows, c->cols);
    /* The kernel indexes with 32-bit unsigned offsets. */
    if (m * k > UINT32_MAX || k * n > UINT32_MAX || m * n > UINT32_MAX)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "gemm: %zux%zux%zu has a matrix over 2^32 elements",
                          m, n, k);

    if (path == MPCL_GEMM_CLBLAST_HGEMM && !mpcl_plan_hgemm_usable(&ctx->info, ctx->overrides.fp16))
        return MPCL_ERROR(ctx, MPCL_ERR_UNSUPPORTED,
                          "gemm path clblast-hgemm%s accumulates in half precision, but %s cannot "
                          "run it (%s); use mpcl-mixed or clblast-staged for f16 tensors",
                          override_note(ctx, path), ctx->info.name,
                          mpcl_plan_fp16_math_usable(&ctx->info, ctx->overrides.fp16)
                              ? "cl_khr_fp16 is not declared, and CLBlast checks it"
                              : "no half arithmetic: no verified cl_khr_fp16, or MPCL_FP16=off");
    if (path == MPCL_GEMM_MPCL_MMA && !mpcl_plan_mma_usable(&ctx->info))
        return MPCL_ERROR(ctx, MPCL_ERR_UNSUPPORTED,
                          "gemm path mpcl-mma%s runs on a verified matrix engine, and %s has none "
                          "(%s: %s); use mpcl-mixed or clblast-staged",
                          override_note(ctx, path), ctx->info.name,
                          mpcl_matrix_engine_name(ctx->info.matrix_engine),
                          ctx->info.matrix_engine_detail);
    return MPCL_OK;
}

/* The epilogue (NULL: none) as separate launches, after a path whose
 * kernels do not take it: the bias kernel, then mpcl_add. */
static mpcl_status epilogue_launches(mpcl_context *ctx, mpcl_tensor *c,
                                     const mpcl__gemm_epilogue *e) {
    if (!e) return MPCL_OK;
    if (e->bias) TRY(mpcl_bias_act_forward(ctx, c, c, e->bias, MPCL_ACT_IDENTITY));
    return e->addend ? mpcl_add(ctx, c, c, e->addend) : MPCL_OK;
}

/* A checked GEMM and its epilogue (NULL: none): in mpcl's kernels' stores
 * where they run it, as separate launches elsewhere. */
static mpcl_status run_checked(mpcl_context *ctx, mpcl_gemm_path path, bool trans_a, bool trans_b,
                               float alpha, const mpcl_tensor *a, const mpcl_tensor *b, float beta,
                               mpcl_tensor *c, const mpcl__gemm_epilogue *e) {
    mpcl_status st;
    /* op(A) is m x k, op(B) is k x n (checked). */
    size_t m = trans_a ? a->cols : a->rows, k = trans_a ? a->rows : a->cols;
    size_t n = trans_b ? b->rows : b->cols;
    const dot_tiles *dot = path == MPCL_GEMM_MPCL_MIXED ? dot_kernel(ctx, trans_a, a, m, n) : NULL;
    if (path == MPCL_GEMM_CLBLAST_SGEMM || path == MPCL_GEMM_CLBLAST_HGEMM)
        st = run_clblast(ctx, path, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    else if (path == MPCL_GEMM_CLBLAST_STAGED)
        st = run_staged(ctx, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    else if (path == MPCL_GEMM_MPCL_MMA)
        return mpcl__gemm_run_mma(ctx, trans_a, trans_b, m, n, k, alpha, a, b, beta, c, e);
    else if (dot)
        st = run_dot(ctx, dot, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    else if (trans_b && n * k >= STAGE_BT_MIN) {
        /* B^T staged in workspace 1 (free on mpcl's paths), then NN. */
        mpcl_tensor bt;
        TRY(mpcl__workspace_tensor(ctx, 1, b->dtype, n, k, &bt));
        TRY(mpcl__transpose(ctx, &bt, b, 1));
        return run_mpcl(ctx, path, trans_a, false, m, n, k, alpha, a, &bt, beta, c, e);
    } else
        return run_mpcl(ctx, path, trans_a, trans_b, m, n, k, alpha, a, b, beta, c, e);
    return st == MPCL_OK ? epilogue_launches(ctx, c, e) : st;
}

mpcl_status mpcl_gemm(mpcl_context *ctx, mpcl_gemm_path path, bool trans_a, bool trans_b,
                      float alpha, const mpcl_tensor *a, const mpcl_tensor *b, float beta,
                      mpcl_tensor *c) {
    mpcl_status st = mpcl__gemm_check(ctx, path, trans_a, trans_b, a, b, c);
    if (st != MPCL_OK) return st;
    return run_checked(ctx, path, trans_a, trans_b, alpha, a, b, beta, c, NULL);
}

static mpcl_status check_epilogue(mpcl_context *ctx, const mpcl_tensor *c,
                                  const mpcl__gemm_epilogue *e) {
    static const char op[] = "the GEMM's epilogue";
    if (!e) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: NULL", op);
    if (e->bias) {
        TRY(mpcl__check_dtype(ctx, e->bias, MPCL_DTYPE_F32, op, "bias"));
        TRY(mpcl__check_shape(ctx, e->bias, 1, c->cols, op, "bias"));
    }
    if (e->addend) {
        if (e->addend == c)
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: the addend must not be C", op);
        TRY(mpcl__check_dtype(ctx, e->addend, c->dtype, op, "addend"));
        TRY(mpcl__check_shape(ctx, e->addend, c->rows, c->cols, op, "addend"));
    }
    return MPCL_OK;
}

mpcl_status mpcl__gemm_fused(mpcl_context *ctx, mpcl_gemm_path path, bool trans_a, bool trans_b,
                             const mpcl_tensor *a, const mpcl_tensor *b, mpcl_tensor *c,
                             const mpcl__gemm_epilogue *e) {
    TRY(mpcl__gemm_check(ctx, path, trans_a, trans_b, a, b, c));
    TRY(check_epilogue(ctx, c, e));
    return run_checked(ctx, path, trans_a, trans_b, 1.0f, a, b, 0.0f, c, e);
}

bool mpcl__gemm_stages_bt(const mpcl_context *ctx, mpcl_gemm_path path, mpcl_dtype a_dtype,
                          size_t m, size_t n, size_t k) {
    if (path != MPCL_GEMM_MPCL_F32 && path != MPCL_GEMM_MPCL_MIXED) return false;
    const mpcl_tensor a = {.dtype = a_dtype};
    if (path == MPCL_GEMM_MPCL_MIXED && dot_kernel(ctx, false, &a, m, n)) return false;
    return n * k >= STAGE_BT_MIN;
}
