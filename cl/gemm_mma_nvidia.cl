// mpcl-mma on NVIDIA's tensor cores (sm_80 and newer): C = alpha op(A) op(B)
// + beta C with f16 or bf16 A and B (the program's storage dtype), f32
// accumulation through inline PTX mma.sync m16n8k16, and C in the storage
// dtype (rounded once) or f32 (the _cf32 kernels). A program of its own
// (after abi.h, activations.h and common.cl), built only on a device whose
// nvidia-mma-sm80 engine verified (src/runtime/matrix_engine.c passes
// -DMPCL_MMA_NVIDIA=1; no other compiler sees the PTX). The fragment layout is the probe's (cl/mma_nvidia_probe.cl).
//
// Two kinds of kernel:
//  - mpcl_gemm_mma: any shape and transpose. A work-group of
//    MPCL_ABI_MMA_ITEMS items (four warps) computes a 64x64 tile of C; warp w
//    its 32x32 quarter, 2 x 4 mma tiles of 16x8. K goes in blocks of 32 that
//    the items stage element by element in local memory (either transpose,
//    zeros past the edges); then each warp multiplies its fragments.
//  - the pipelined ones, a row of MPCL_ABI_MMA_PIPE_TILES each, for the
//    transposes of a training step (NN, NT, TN), any shape: where a stored
//    row of A or B is a whole number of 16-byte pieces, cp.async copies the
//    next K block into local memory while the warps multiply this one;
//    other rows (GPT-2's 50257-long logit rows) go element by element.
//    ldmatrix loads the fragments (.trans where the stored rows run along M
//    or N). src/compute/gemm_mma.c takes them for all but TT.
#ifdef MPCL_MMA_NVIDIA

#if MPCL_ABI_MMA_TILE != 64 || MPCL_ABI_MMA_ITEMS != 128
#error "gemm_mma_nvidia.cl computes 64x64 tiles with four warps"
#endif

#if defined(MPCL_STORAGE_F16)
#define MMA_TYPE "f16"
#elif defined(MPCL_STORAGE_BF16)
#define MMA_TYPE "bf16"
#else
#error "mpcl-mma takes f16 or bf16 storage"
#endif

// NVIDIA's compiler takes `asm volatile` in OpenCL C; clang, in OpenCL C's
// strict mode, only the GNU spelling (tests/test_nvidia_sources.py).
#ifdef __clang__
#define MMA_GEMM_ASM __asm__
#else
#define MMA_GEMM_ASM asm
#endif

#define MMA_BK 32
#define MMA_PAD 8 // halves a local row is padded by, against bank conflicts
#define MMA_A_STRIDE (MMA_BK + MMA_PAD)
#define MMA_B_STRIDE (MPCL_ABI_MMA_TILE + MMA_PAD)

#ifdef MPCL_MMA_EMULATE
// For tests on devices without the engine (tests/test_gemm.c, through
// mpcl__matrix_engine_emulate): mma.sync's arithmetic computed from the
// fragments as the PTX ISA lays them out, the lanes of each warp exchanging
// theirs through local memory (6 registers per item); f32 fmas in k order.
// It checks everything of this file but the instruction and the layout on
// hardware, which the probe checks there.
#if defined(MPCL_STORAGE_F16)
static inline float mma_value(uint reg, uint high) {
    ushort h = (ushort)(high ? reg >> 16 : reg);
    return vload_half(0, (const half *)&h);
}
#else
static inline float mma_value(uint reg, uint high) {
    return as_float((high ? reg >> 16 : reg & 0xffffu) << 16);
}
#endif
static inline void mma_emulated(float d[4], uint a0, uint a1, uint a2, uint a3, uint b0, uint b1,
                                __local uint *frags) {
    const uint lane = get_local_id(0) & 31u, g = lane >> 2, t = lane & 3u;
    __local uint *mine = frags + get_local_id(0) * 6u, *warp = frags + (get_local_id(0) & ~31u) * 6u;
    mine[0] = a0;
    mine[1] = a1;
    mine[2] = a2;
    mine[3] = a3;
    mine[4] = b0;
    mine[5] = b1;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint q = 0; q < 4u; q++) {
        uint r = g + (q >> 1) * 8u, c = 2u * t + (q & 1u);
        float s = d[q];
        for (uint k = 0; k < 16u; k++) {
            // A(r, k): lane 4 (r % 8) + (k % 8) / 2, register (r >= 8) + 2 (k >= 8);
            // B(k, c): lane 4 c + (k % 8) / 2, register 4 + (k >= 8); half k % 2.
            uint al = (r & 7u) * 4u + ((k & 7u) >> 1), ar = (r >> 3) + 2u * (k >> 3);
            uint bl = c * 4u + ((k & 7u) >> 1), br = 4u + (k >> 3);
            s = fma(mma_value(warp[al * 6u + ar], k & 1u), mma_value(warp[bl * 6u + br], k & 1u),
                    s);
        }
        d[q] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#define MMA_16816(d, a0, a1, a2, a3, b0, b1) mma_emulated((d), a0, a1, a2, a3, b0, b1, frags)
// Loops stay loops here: each emulated instruction holds barriers, which
// PoCL's compiler pays for per copy.
#define MMA_UNROLL _Pragma("unroll 1")
#define MMA_FRAG_WORDS (MPCL_ABI_MMA_ITEMS * 6)
#else
#define MMA_FRAG_WORDS 1
#define MMA_UNROLL _Pragma("unroll")
// d += a b for one 16x8x16 tile: a0-a3 A's fragment, b0-b1 B's.
#define MMA_16816(d, a0, a1, a2, a3, b0, b1)                                                \
    MMA_GEMM_ASM volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE     \
                          ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "              \
                          "{%0, %1, %2, %3};"                                                \
                          : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3])           \
                          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
#endif

// Two 16-bit elements in one register, the first in the low half.
#define MMA_LOCAL_PAIR(p, i, j) ((uint)(p)[i] | (uint)(p)[j] << 16)

// One group's 64x64 tile of C into acc (per item: 2 x 4 tiles x 4 floats,
// flattened).
// Inlined (static: OpenCL C's plain inline emits no definition of its own),
// so that the accumulators stay in registers.
static inline __attribute__((always_inline)) void mma_tile(
    __global const ushort *a, __global const ushort *b, uint m, uint n, uint k, uint ta, uint tb,
    uint row0, uint col0, __local ushort *as, __local ushort *bs, __local uint *frags,
    float *acc) {
    const uint item = get_local_id(0), lane = item & 31u, warp = item >> 5;
    const uint g = lane >> 2, t = lane & 3u;
    const uint wr = (warp >> 1) * 32u, wc = (warp & 1u) * 32u;
    for (uint k0 = 0; k0 < k; k0 += MMA_BK) {
        // Stage op(A)[row0.., k0..] (64 x 32) and op(B)[k0.., col0..] (32 x
        // 64): 16 elements of each per item, zeros outside the matrices.
        for (uint e = item; e < MPCL_ABI_MMA_TILE * MMA_BK; e += MPCL_ABI_MMA_ITEMS) {
            uint i = e / MMA_BK, kk = e % MMA_BK, gi = row0 + i, gk = k0 + kk;
            ushort v = 0;
            if (gi < m && gk < k) v = ta ? a[(size_t)gk * m + gi] : a[(size_t)gi * k + gk];
            as[i * MMA_A_STRIDE + kk] = v;
        }
        for (uint e = item; e < MMA_BK * MPCL_ABI_MMA_TILE; e += MPCL_ABI_MMA_ITEMS) {
            uint kk = e / MPCL_ABI_MMA_TILE, j = e % MPCL_ABI_MMA_TILE, gk = k0 + kk, gj = col0 + j;
            ushort v = 0;
            if (gk < k && gj < n) v = tb ? b[(size_t)gj * k + gk] : b[(size_t)gk * n + gj];
            bs[kk * MMA_B_STRIDE + j] = v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        MMA_UNROLL for (uint kk = 0; kk < MMA_BK; kk += 16u) {
            uint afrag[2][4], bfrag[4][2];
#pragma unroll
            for (uint mi = 0; mi < 2u; mi++) {
                // Rows g and g + 8 of the 16-row tile, columns 2t, 2t + 1 and
                // those plus 8.
                uint r0 = (wr + mi * 16u + g) * MMA_A_STRIDE + kk + 2u * t;
                uint r8 = r0 + 8u * MMA_A_STRIDE;
                afrag[mi][0] = MMA_LOCAL_PAIR(as, r0, r0 + 1u);
                afrag[mi][1] = MMA_LOCAL_PAIR(as, r8, r8 + 1u);
                afrag[mi][2] = MMA_LOCAL_PAIR(as, r0 + 8u, r0 + 9u);
                afrag[mi][3] = MMA_LOCAL_PAIR(as, r8 + 8u, r8 + 9u);
            }
#pragma unroll
            for (uint ni = 0; ni < 4u; ni++) {
                // Rows (k) 2t, 2t + 1 and those plus 8 of column g.
                uint c0 = (kk + 2u * t) * MMA_B_STRIDE + wc + ni * 8u + g;
                bfrag[ni][0] = MMA_LOCAL_PAIR(bs, c0, c0 + MMA_B_STRIDE);
                bfrag[ni][1] = MMA_LOCAL_PAIR(bs, c0 + 8u * MMA_B_STRIDE, c0 + 9u * MMA_B_STRIDE);
            }
            MMA_UNROLL for (uint mi = 0; mi < 2u; mi++)
                MMA_UNROLL for (uint ni = 0; ni < 4u; ni++)
                    MMA_16816(acc + (mi * 4u + ni) * 4u, afrag[mi][0], afrag[mi][1], afrag[mi][2],
                              afrag[mi][3], bfrag[ni][0], bfrag[ni][1]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

// A warp's part of C from its accumulators (mi_n x ni_n mma tiles, its
// corner at row r0, column c0): of each 16x8 tile, rows g and g + 8 and
// columns 2t and 2t + 1. C is read only where beta != 0. Then the epilogue
// the host asked for (epi, cl/abi.h, as cl/gemm.cl's): the column's bias
// and an addend of C's shape, so that a linear Dense and the residual sum
// after it are this one pass over C, rounded once.
#define MMA_STORE_TILE(c, LOAD_C, STORE_C, acc, mi_n, ni_n, r0, c0)                   \
    do {                                                                              \
        const uint lane_ = get_local_id(0) & 31u, g_ = lane_ >> 2, t_ = lane_ & 3u;   \
        MMA_UNROLL for (uint mi = 0; mi < (mi_n); mi++)                               \
            MMA_UNROLL for (uint ni = 0; ni < (ni_n); ni++)                           \
                MMA_UNROLL for (uint q = 0; q < 4u; q++) {                            \
                    uint i = (r0) + mi * 16u + g_ + (q >> 1) * 8u;                    \
                    uint j = (c0) + ni * 8u + 2u * t_ + (q & 1u);                     \
                    if (i >= m || j >= n) continue;                                   \
                    size_t at = (size_t)i * n + j;                                    \
                    float v = alpha * (acc)[(mi * (ni_n) + ni) * 4u + q];             \
                    if (beta != 0.0f) v += beta * LOAD_C(c, at);                      \
                    if (epi & MPCL_ABI_GEMM_EPI_BIAS) v += bias[j];                   \
                    if (epi & MPCL_ABI_GEMM_EPI_ADDEND) v += LOAD_C(addend, at);      \
                    STORE_C(c, at, v);                                                \
                }                                                                     \
    } while (0)

#define MMA_GEMM_KERNEL(NAME, C_T, LOAD_C, STORE_C)                                           \
    __kernel __attribute__((reqd_work_group_size(MPCL_ABI_MMA_ITEMS, 1, 1))) void NAME(       \
        __global const ushort *a, __global const ushort *b, __global C_T *c, uint m, uint n,  \
        uint k, uint ta, uint tb, float alpha, float beta, __global const float *bias,        \
        __global const C_T *addend, uint epi) {                                               \
        __local ushort as[MPCL_ABI_MMA_TILE * MMA_A_STRIDE];                                  \
        __local ushort bs[MMA_BK * MMA_B_STRIDE];                                             \
        __local uint frags[MMA_FRAG_WORDS]; /* the emulation's (unused on the engine) */      \
        float acc[2 * 4 * 4] = {0.0f};                                                        \
        const uint row0 = get_group_id(1) * MPCL_ABI_MMA_TILE;                                \
        const uint col0 = get_group_id(0) * MPCL_ABI_MMA_TILE;                                \
        mma_tile(a, b, m, n, k, ta, tb, row0, col0, as, bs, frags, acc);                      \
        const uint warp = get_local_id(0) >> 5;                                               \
        MMA_STORE_TILE(c, LOAD_C, STORE_C, acc, 2u, 4u, row0 + (warp >> 1) * 32u,             \
                       col0 + (warp & 1u) * 32u);                                             \
    }

#define MMA_LOAD_F32(p, i) ((p)[(i)])
#define MMA_STORE_F32(p, i, v) ((p)[(i)] = (v))
MMA_GEMM_KERNEL(mpcl_gemm_mma, storage_t, LOAD, STORE)
MMA_GEMM_KERNEL(mpcl_gemm_mma_cf32, float, MMA_LOAD_F32, MMA_STORE_F32)
#undef MMA_LOAD_F32
#undef MMA_STORE_F32

// ---- The pipelined kernels ----

#define MMA_PIPE_BK MPCL_ABI_MMA_PIPE_BK
#define MMA_PIPE_PAD MPCL_ABI_MMA_PIPE_PAD
#define MMA_PIPE_CHUNK 8 // elements in one cp.async (16 bytes)

#ifdef MPCL_MMA_EMULATE
// cp.async as a plain copy (its zero fill included), done when issued, so
// the groups need no waiting: the barriers order the copies as they order the
// engine's. ldmatrix from the row offsets the lanes give, exchanged through
// local memory as the instruction exchanges addresses, each lane taking the
// PTX ISA's fragment of each of the four 8x8 matrices.
#define MMA_CP_ASYNC(dst, src, valid)                                           \
    do {                                                                        \
        for (uint e_ = 0; e_ < MMA_PIPE_CHUNK; e_++) (dst)[e_] = (valid) ? (src)[e_] : 0; \
    } while (0)
#define MMA_CP_COMMIT()
#define MMA_CP_WAIT_PREVIOUS()
static inline void mma_ldmatrix_emulated(uint r[4], __local const ushort *base, uint offset,
                                         uint trans, __local uint *frags) {
    const uint lane = get_local_id(0) & 31u, warp = get_local_id(0) & ~31u;
    const uint g = lane >> 2, t = lane & 3u;
    frags[get_local_id(0)] = offset;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint i = 0; i < 4u; i++) {
        __local const uint *rows = frags + warp + 8u * i;
        if (trans)
            r[i] = (uint)base[rows[2u * t] + g] | (uint)base[rows[2u * t + 1u] + g] << 16;
        else
            r[i] = (uint)base[rows[g] + 2u * t] | (uint)base[rows[g] + 2u * t + 1u] << 16;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#define MMA_LDMATRIX_X4(r, base, offset, trans) \
    mma_ldmatrix_emulated((r), (base), (offset), (trans), frags)
#else
// 16 bytes from global src to local dst; src_size 0 (an edge) fills zeros.
// The "memory" clobbers keep the compiler from moving local-memory accesses
// across them.
#define MMA_CP_ASYNC(dst, src, valid)                                                 \
    MMA_GEMM_ASM volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(     \
                              (uint)(size_t)(dst)),                                  \
                          "l"((ulong)(size_t)(src)), "r"((valid) ? 16u : 0u)         \
                          : "memory")
#define MMA_CP_COMMIT() MMA_GEMM_ASM volatile("cp.async.commit_group;" ::: "memory")
// Waits for every group but the newest: the block the warps multiply next.
#define MMA_CP_WAIT_PREVIOUS() MMA_GEMM_ASM volatile("cp.async.wait_group 1;" ::: "memory")
#define MMA_LDMATRIX_X4(r, base, offset, trans)                                               \
    do {                                                                                      \
        if (trans)                                                                            \
            MMA_GEMM_ASM volatile(                                                            \
                "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"      \
                : "=r"((r)[0]), "=r"((r)[1]), "=r"((r)[2]), "=r"((r)[3])                      \
                : "r"((uint)(size_t)((base) + (offset)))                                      \
                : "memory");                                                                  \
        else                                                                                  \
            MMA_GEMM_ASM volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" \
                                  : "=r"((r)[0]), "=r"((r)[1]), "=r"((r)[2]), "=r"((r)[3])    \
                                  : "r"((uint)(size_t)((base) + (offset)))                    \
                                  : "memory");                                                \
    } while (0)
#endif

// One K block of a stored matrix into local memory: its rows r0 .. r0 +
// rows - 1 (of rows_all) and columns c0 .. c0 + cols - 1 (of cols_all, the
// stored row's length), a local row every cols + MMA_PIPE_PAD elements
// (16-byte aligned, and the eight rows an ldmatrix reads fall in different
// banks), in pieces of MMA_PIPE_CHUNK. Elements past an edge are zeros.
// Stored rows of whole pieces start 16-byte aligned, and each piece is in
// or out whole: cp.async. Other rows cannot be copied 16 bytes at a time:
// each element is loaded and stored (the same branch for the whole group),
// done before the barrier that precedes its use, as the copies are.
static inline __attribute__((always_inline)) void mma_pipe_stage(
    __local ushort *dst, __global const ushort *src, uint r0, uint rows_all, uint c0,
    uint cols_all, const uint rows, const uint cols, const uint items) {
    // Every row of MPCL_ABI_MMA_PIPE_TILES has a whole number of pieces per
    // item, so the loop's count is a constant.
    const uint per_row = cols / MMA_PIPE_CHUNK;
    const bool whole = cols_all % MMA_PIPE_CHUNK == 0;
    MMA_UNROLL for (uint i = 0; i < rows * per_row / items; i++) {
        const uint p = i * items + get_local_id(0);
        const uint r = p / per_row, c = p % per_row * MMA_PIPE_CHUNK;
        __local ushort *to = dst + r * (cols + MMA_PIPE_PAD) + c;
        const bool row_in = r0 + r < rows_all;
        if (whole) {
            const bool valid = row_in && c0 + c < cols_all;
            __global const ushort *from = src + (valid ? (size_t)(r0 + r) * cols_all + c0 + c : 0);
            MMA_CP_ASYNC(to, from, valid);
        } else {
            __global const ushort *from = src + (row_in ? (size_t)(r0 + r) * cols_all : 0);
            for (uint e = 0; e < MMA_PIPE_CHUNK; e++) {
                const uint col = c0 + c + e;
                to[e] = row_in && col < cols_all ? from[col] : 0;
            }
        }
    }
}

#define MMA_PIPE_A_ELEMS MPCL_ABI_MMA_PIPE_A_ELEMS
#define MMA_PIPE_B_ELEMS MPCL_ABI_MMA_PIPE_B_ELEMS

// acc (mi x ni x 4, flattened) += this warp's part of op(A) op(B) over all
// of K, for the group's tile at (row0, col0). ta and tb are compile-time
// constants in every caller, and so are the shape's: inlined, each kernel
// keeps its accumulators in registers.
static inline __attribute__((always_inline)) void mma_pipe_tile(
    __global const ushort *a, __global const ushort *b, uint m, uint n, uint k, const uint ta,
    const uint tb, const uint rows, const uint cols, const uint warps_m, const uint warps_n,
    uint row0, uint col0, __local ushort *as, __local ushort *bs, __local uint *frags,
    float *acc) {
    const uint items = 32u * warps_m * warps_n, mi_n = rows / warps_m / 16u,
               ni_n = cols / warps_n / 8u;
    const uint a_elems = MMA_PIPE_A_ELEMS(rows, ta), b_elems = MMA_PIPE_B_ELEMS(cols, tb);
    const uint lane = get_local_id(0) & 31u, warp = get_local_id(0) >> 5;
    const uint wr = warp / warps_n * (rows / warps_m), wc = warp % warps_n * (cols / warps_n);
    // The lane's row of the ldmatrix x4 it takes part in: row j of matrix q.
    const uint j = lane & 7u, q = lane >> 3;
    const uint blocks = (k + MMA_PIPE_BK - 1) / MMA_PIPE_BK;
    for (uint blk = 0; blk <= blocks; blk++) {
        // Issue block blk's copies (into the half the warps left at the last
        // barrier), then multiply block blk - 1 once its own are in.
        if (blk < blocks) {
            const uint k0 = blk * MMA_PIPE_BK, buf = blk & 1u;
            if (ta)
                mma_pipe_stage(as + buf * a_elems, a, k0, k, row0, m, MMA_PIPE_BK, rows, items);
            else
                mma_pipe_stage(as + buf * a_elems, a, row0, m, k0, k, rows, MMA_PIPE_BK, items);
            if (tb)
                mma_pipe_stage(bs + buf * b_elems, b, col0, n, k0, k, cols, MMA_PIPE_BK, items);
            else
                mma_pipe_stage(bs + buf * b_elems, b, k0, k, col0, n, MMA_PIPE_BK, cols, items);
        }
        MMA_CP_COMMIT(); // an empty group past the last block keeps the count
        if (blk == 0) continue;
        MMA_CP_WAIT_PREVIOUS();
        barrier(CLK_LOCAL_MEM_FENCE);
        const uint buf = (blk - 1u) & 1u;
        __local const ushort *at = as + buf * a_elems, *bt = bs + buf * b_elems;
        MMA_UNROLL for (uint kk = 0; kk < MMA_PIPE_BK; kk += 16u) {
            uint af[4][4], bf[8][2];
            MMA_UNROLL for (uint mi = 0; mi < mi_n; mi++) {
                // a0..a3: rows +0/+8 and k +0/+8 of the 16x16 piece; as
                // stored (k along a row) or transposed (M along a row).
                const uint r = wr + mi * 16u;
                const uint off = ta ? (kk + j + (q >> 1) * 8u) * (rows + MMA_PIPE_PAD) + r + (q & 1u) * 8u
                                    : (r + j + (q & 1u) * 8u) * (MMA_PIPE_BK + MMA_PIPE_PAD) + kk +
                                          (q >> 1) * 8u;
                MMA_LDMATRIX_X4(af[mi], at, off, ta);
            }
            MMA_UNROLL for (uint nj = 0; nj < ni_n / 2u; nj++) {
                // b0, b1 of the 8 columns at c, then of the 8 at c + 8.
                const uint c = wc + nj * 16u;
                const uint off = tb ? (c + j + (q >> 1) * 8u) * (MMA_PIPE_BK + MMA_PIPE_PAD) + kk +
                                          (q & 1u) * 8u
                                    : (kk + j + (q & 1u) * 8u) * (cols + MMA_PIPE_PAD) + c +
                                          (q >> 1) * 8u;
                uint r4[4];
                MMA_LDMATRIX_X4(r4, bt, off, !tb);
                bf[2u * nj][0] = r4[0];
                bf[2u * nj][1] = r4[1];
                bf[2u * nj + 1u][0] = r4[2];
                bf[2u * nj + 1u][1] = r4[3];
            }
            MMA_UNROLL for (uint mi = 0; mi < mi_n; mi++)
                MMA_UNROLL for (uint ni = 0; ni < ni_n; ni++)
                    MMA_16816(acc + (mi * ni_n + ni) * 4u, af[mi][0], af[mi][1], af[mi][2],
                              af[mi][3], bf[ni][0], bf[ni][1]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

// One kernel per tile row, transpose pair and C dtype:
// mpcl_gemm_mma_<row>_<nn|nt|tn>[_cf32], with mpcl_gemm_mma's arguments (ta
// and tb are in the name; the arguments are ignored) and then the local
// memory, MPCL_ABI_MMA_PIPE_LOCAL_BYTES of it (argument
// MPCL_ABI_MMA_PIPE_LOCAL_ARG).
#define MMA_PIPE_KERNEL(NAME, C_T, LOAD_C, STORE_C, ROWS, COLS, WM, WN, TA, TB)                \
    __kernel __attribute__((reqd_work_group_size(32 * (WM) * (WN), 1, 1))) void NAME(           \
        __global const ushort *a, __global const ushort *b, __global C_T *c, uint m, uint n,    \
        uint k, uint ta_arg, uint tb_arg, float alpha, float beta, __global const float *bias,  \
        __global const C_T *addend, uint epi, __local ushort *local_mem) {                      \
        __local ushort *as = local_mem;                                                         \
        __local ushort *bs = as + 2 * MMA_PIPE_A_ELEMS(ROWS, TA);                               \
        /* the emulation's exchanges (no memory on the engine) */                               \
        __local uint *frags = (__local uint *)(bs + 2 * MMA_PIPE_B_ELEMS(COLS, TB));            \
        float acc[(ROWS) / (WM) / 16 * ((COLS) / (WN) / 8) * 4];                                \
        MMA_UNROLL for (uint i = 0; i < sizeof acc / sizeof acc[0]; i++) acc[i] = 0.0f;         \
        const uint row0 = get_group_id(1) * (ROWS), col0 = get_group_id(0) * (COLS);            \
        mma_pipe_tile(a, b, m, n, k, (TA), (TB), (ROWS), (COLS), (WM), (WN), row0, col0, as,   \
                      bs, frags, acc);                                                          \
        const uint warp = get_local_id(0) >> 5;                                                 \
        MMA_STORE_TILE(c, LOAD_C, STORE_C, acc, (ROWS) / (WM) / 16, (COLS) / (WN) / 8,          \
                       row0 + warp / (WN) * ((ROWS) / (WM)),                                    \
                       col0 + warp % (WN) * ((COLS) / (WN)));                                   \
    }

#define MMA_PIPE_KERNELS_C(NAME, SUFFIX, C_T, LOAD_C, STORE_C, ROWS, COLS, WM, WN)           \
    MMA_PIPE_KERNEL(NAME##_nn##SUFFIX, C_T, LOAD_C, STORE_C, ROWS, COLS, WM, WN, 0, 0)        \
    MMA_PIPE_KERNEL(NAME##_nt##SUFFIX, C_T, LOAD_C, STORE_C, ROWS, COLS, WM, WN, 0, 1)        \
    MMA_PIPE_KERNEL(NAME##_tn##SUFFIX, C_T, LOAD_C, STORE_C, ROWS, COLS, WM, WN, 1, 0)
#define MMA_PIPE_ROW(NAME, ROWS, COLS, WM, WN)                                                 \
    MMA_PIPE_KERNELS_C(mpcl_gemm_mma_##NAME, , storage_t, LOAD, STORE, ROWS, COLS, WM, WN)     \
    MMA_PIPE_KERNELS_C(mpcl_gemm_mma_##NAME, _cf32, float, MMA_LOAD_F32, MMA_STORE_F32, ROWS, \
                       COLS, WM, WN)
#define MMA_LOAD_F32(p, i) ((p)[(i)])
#define MMA_STORE_F32(p, i, v) ((p)[(i)] = (v))
MPCL_ABI_MMA_PIPE_TILES(MMA_PIPE_ROW)
#undef MMA_LOAD_F32
#undef MMA_STORE_F32

#endif // MPCL_MMA_NVIDIA
