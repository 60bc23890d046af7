// The nvidia-mma-sm80 matrix engine's verification (src/runtime/
// matrix_engine.c), built on its own (never part of the library program) and
// only for an NVIDIA device of compute capability 8.0 or newer: one
// m16n8k16 tile through inline PTX, d = a b + c with f16 or bf16 operands and
// f32 accumulation, on one warp (a work-group of 32). a is 16x16 and b 16x8
// (k, n), both row-major 16-bit bits; c and d are 16x8 row-major floats. The
// host poisons d and checks every element exactly.
//
// The fragments, as the PTX ISA lays them out for m16n8k16 with 16-bit
// operands (lane = 4 g + t): A's registers hold rows g and g + 8 at columns
// 2t, 2t + 1 and those plus 8; B's hold rows (k) 2t, 2t + 1 and those plus 8
// of column g; C's and D's rows g and g + 8 at columns 2t and 2t + 1. The
// lower half of a register holds the lower index.

// NVIDIA's compiler takes `asm volatile` in OpenCL C (measured on the
// H200's driver); clang, in OpenCL C's strict mode, only the GNU spelling.
#ifdef __clang__
#define MMA_ASM __asm__
#else
#define MMA_ASM asm
#endif

// Two 16-bit elements in one register, the first in the low half.
#define MMA_PAIR(p, i, j) ((uint)(p)[i] | (uint)(p)[j] << 16)

#define MMA_PROBE(NAME, TYPE)                                                                 \
    __kernel __attribute__((reqd_work_group_size(32, 1, 1))) void NAME(                       \
        __global const ushort *a, __global const ushort *b, __global const float *c,          \
        __global float *d) {                                                                  \
        const uint lane = get_local_id(0), g = lane >> 2, t = lane & 3u;                      \
        const uint r0 = g * 16u + 2u * t, r8 = (g + 8u) * 16u + 2u * t;                       \
        const uint a0 = MMA_PAIR(a, r0, r0 + 1u), a1 = MMA_PAIR(a, r8, r8 + 1u);              \
        const uint a2 = MMA_PAIR(a, r0 + 8u, r0 + 9u), a3 = MMA_PAIR(a, r8 + 8u, r8 + 9u);    \
        const uint k0 = 2u * t * 8u + g;                                                      \
        const uint b0 = MMA_PAIR(b, k0, k0 + 8u), b1 = MMA_PAIR(b, k0 + 64u, k0 + 72u);       \
        const uint c0 = g * 8u + 2u * t, c8 = (g + 8u) * 8u + 2u * t;                         \
        float d0, d1, d2, d3;                                                                 \
        MMA_ASM volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 "        \
                         "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};" \
                         : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)                             \
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c[c0]),   \
                           "f"(c[c0 + 1u]), "f"(c[c8]), "f"(c[c8 + 1u]));                     \
        d[c0] = d0;                                                                           \
        d[c0 + 1u] = d1;                                                                      \
        d[c8] = d2;                                                                           \
        d[c8 + 1u] = d3;                                                                      \
    }

MMA_PROBE(probe_mma_f16, "f16")
MMA_PROBE(probe_mma_bf16, "bf16")
