// mpcl-mma on NVIDIA's tensor cores (sm_80 and newer): C = alpha op(A) op(B)
// + beta C with f16 or bf16 A and B (the program's storage dtype), f32
// accumulation through inline PTX mma.sync m16n8k16, and C in the storage
// dtype (rounded once) or f32 (the _cf32 kernel). Built only into the 16-bit
// programs of a device whose nvidia-mma-sm80 engine verified
// (src/runtime/kernels.c passes -DMPCL_MMA_NVIDIA=1; no other compiler sees
// the PTX). The fragment layout is the probe's (cl/mma_nvidia_probe.cl).
//
// A work-group of MPCL_ABI_MMA_ITEMS items (four warps) computes a 64x64
// tile of C; warp w its 32x32 quarter (rows 32 (w / 2), columns 32 (w % 2)),
// 2 x 4 mma tiles of 16x8 with their f32 accumulators in registers. K goes
// in blocks of 32: the group stages op(A)'s 64x32 and op(B)'s 32x64 block in
// local memory (either transpose, zeros past the edges), then each warp
// multiplies its fragments from there. First version, correct before fast:
// no cp.async double buffering and no ldmatrix yet (the tile shapes and
// those are for tuning on the GPU).
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
inline float mma_value(uint reg, uint high) {
    ushort h = (ushort)(high ? reg >> 16 : reg);
    return vload_half(0, (const half *)&h);
}
#else
inline float mma_value(uint reg, uint high) {
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
#define MMA_FRAG_WORDS (MPCL_ABI_MMA_ITEMS * 6)
#else
#define MMA_FRAG_WORDS 1
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

// One group's 64x64 tile of C into acc (per item: 2 x 4 tiles x 4 floats).
// Inlined (static: OpenCL C's plain inline emits no definition of its own),
// so that the accumulators stay in registers.
static inline __attribute__((always_inline)) void mma_tile(
    __global const ushort *a, __global const ushort *b, uint m, uint n, uint k, uint ta, uint tb,
    uint row0, uint col0, __local ushort *as, __local ushort *bs, __local uint *frags,
    float acc[2][4][4]) {
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
#pragma unroll
        for (uint kk = 0; kk < MMA_BK; kk += 16u) {
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
#pragma unroll
            for (uint mi = 0; mi < 2u; mi++)
#pragma unroll
                for (uint ni = 0; ni < 4u; ni++)
                    MMA_16816(acc[mi][ni], afrag[mi][0], afrag[mi][1], afrag[mi][2], afrag[mi][3],
                              bfrag[ni][0], bfrag[ni][1]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

// The tile's C: rows g and g + 8, columns 2t and 2t + 1 of each 16x8 tile;
// C is read only where beta != 0.
#define MMA_GEMM_KERNEL(NAME, C_T, LOAD_C, STORE_C)                                           \
    __kernel __attribute__((reqd_work_group_size(MPCL_ABI_MMA_ITEMS, 1, 1))) void NAME(       \
        __global const ushort *a, __global const ushort *b, __global C_T *c, uint m, uint n,  \
        uint k, uint ta, uint tb, float alpha, float beta) {                                  \
        __local ushort as[MPCL_ABI_MMA_TILE * MMA_A_STRIDE];                                  \
        __local ushort bs[MMA_BK * MMA_B_STRIDE];                                             \
        __local uint frags[MMA_FRAG_WORDS]; /* the emulation's (unused on the engine) */      \
        float acc[2][4][4] = {{{0.0f}}};                                                      \
        const uint row0 = get_group_id(1) * MPCL_ABI_MMA_TILE;                                \
        const uint col0 = get_group_id(0) * MPCL_ABI_MMA_TILE;                                \
        mma_tile(a, b, m, n, k, ta, tb, row0, col0, as, bs, frags, acc);                      \
        const uint lane = get_local_id(0) & 31u, warp = get_local_id(0) >> 5;                 \
        const uint g = lane >> 2, t = lane & 3u;                                              \
        _Pragma("unroll") for (uint mi = 0; mi < 2u; mi++)                                    \
            _Pragma("unroll") for (uint ni = 0; ni < 4u; ni++)                                \
                _Pragma("unroll") for (uint q = 0; q < 4u; q++) {                             \
                    uint i = row0 + (warp >> 1) * 32u + mi * 16u + g + (q >> 1) * 8u;         \
                    uint j = col0 + (warp & 1u) * 32u + ni * 8u + 2u * t + (q & 1u);          \
                    if (i >= m || j >= n) continue;                                           \
                    size_t at = (size_t)i * n + j;                                            \
                    float v = alpha * acc[mi][ni][q];                                         \
                    if (beta != 0.0f) v += beta * LOAD_C(c, at);                              \
                    STORE_C(c, at, v);                                                        \
                }                                                                             \
    }

#define MMA_LOAD_F32(p, i) ((p)[(i)])
#define MMA_STORE_F32(p, i, v) ((p)[(i)] = (v))
MMA_GEMM_KERNEL(mpcl_gemm_mma, storage_t, LOAD, STORE)
MMA_GEMM_KERNEL(mpcl_gemm_mma_cf32, float, MMA_LOAD_F32, MMA_STORE_F32)
#undef MMA_LOAD_F32
#undef MMA_STORE_F32

#endif // MPCL_MMA_NVIDIA
