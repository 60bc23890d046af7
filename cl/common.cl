// Precision macros shared by every library kernel. The host builds this
// program once per storage dtype with -DMPCL_STORAGE_F32, -DMPCL_STORAGE_F16
// or -DMPCL_STORAGE_BF16 (the dtype table in include/mpcl/plan.h). Math is
// always float; f16 and bf16 are reached only through LOAD/STORE (integer
// code, needing no cl_khr_fp16 and no bf16 extension), so one source serves
// every device. Scalar kernel arguments are always float.

// float -> binary16 bits, rounded to nearest even, overflow to inf, NaN kept:
// exactly vstore_half_rte, in integer operations. PoCL 3.1 runs
// vstore_half_rte as a scalar library call (a 16 MB f32 -> f16 cast: 4 GB/s,
// against 19 GB/s for the f16 -> f32 load); this form vectorizes. The tests
// compare it bit for bit with the host's conversion, and the fp16 probe keeps
// checking the builtin.
static inline ushort mpcl_f16_bits(float f) {
    uint x = as_uint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint a = x & 0x7fffffffu;
    // Normal results: rebias the exponent (127 -> 15) and round 23 mantissa
    // bits to 10, ties to even; a carry into the exponent is what it should be.
    uint normal = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    // Subnormal results (|f| < 2^-14): |f| in units of 2^-24, rounded to
    // nearest even by the float add itself (0.5 + |f| has an ulp of 2^-24),
    // then the bits of 0.5 taken off; a result of 0x400 is the smallest
    // normal, as it should be. A device that flushes f32 denormals to zero
    // still gets 0, their right f16 value. It replaced a variable shift that
    // cost the f16 optimizer update a fifth of its time on PoCL.
    uint sub = as_uint(as_float(a) + 0.5f) - 0x3f000000u;
    uint r = a < 0x38800000u ? sub : normal;
    r = a >= 0x477ff000u ? 0x7c00u : r; // |f| >= 65520 rounds to inf
    r = a > 0x7f800000u ? 0x7e00u : r;  // NaN stays NaN (quiet)
    return (ushort)(sign | r);
}
#define STORE_HALF(p, i, v) (((__global ushort *)(p))[(i)] = mpcl_f16_bits(v))

// binary16 bits -> float, exact: vload_half in integer operations, for the
// same reason (PoCL calls a scalar routine per element when the kernel picks
// its buffer per work-item, as the optimizer does).
static inline float mpcl_f16_value(ushort h) {
    uint sign = (uint)(h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu;
    uint m = h & 0x3ffu;
    uint bits = e == 31u ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13);
    float f = e == 0u ? (float)m * 5.9604644775390625e-8f : as_float(bits); // m * 2^-24
    return as_float(as_uint(f) | sign);
}
#define LOAD_HALF(p, i) mpcl_f16_value(((__global const ushort *)(p))[(i)])

// bfloat16: the top 16 bits of a float. float -> bf16 bits rounds to
// nearest even in integer operations, as the f16 store above and for the
// same reason (it vectorizes): adding 0x7fff carries into bit 16 exactly when
// the dropped half exceeds a half ulp, and the kept lowest bit breaks ties.
// A carry out of the mantissa is the right result, up to inf from the
// largest finite floats (RNE overflow); it never reaches the sign bit. NaN
// becomes the quiet NaN 0x7fc0 with its sign (the add could carry a NaN into
// inf). bf16 -> float is exact: bits << 16. The _8 and _16 forms are the same
// code on vectors, for the GEMM's vector loads and stores; the host checks
// all of them bit for bit against its own conversion (half.c).
#define MPCL_BF16_CONVERSIONS(N)                                                       \
    static inline ushort##N mpcl_bf16_bits##N(float##N f) {                            \
        uint##N x = as_uint##N(f);                                                     \
        uint##N r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;                            \
        r = (x & 0x7fffffffu) > 0x7f800000u ? ((x >> 16) & 0x8000u) | 0x7fc0u : r;     \
        return convert_ushort##N(r);                                                   \
    }                                                                                  \
    static inline float##N mpcl_bf16_value##N(ushort##N h) {                           \
        return as_float##N(convert_uint##N(h) << 16);                                  \
    }
MPCL_BF16_CONVERSIONS()
MPCL_BF16_CONVERSIONS(4)
MPCL_BF16_CONVERSIONS(8)
MPCL_BF16_CONVERSIONS(16)
#define STORE_BF16(p, i, v) (((__global ushort *)(p))[(i)] = mpcl_bf16_bits(v))
#define LOAD_BF16(p, i) mpcl_bf16_value(((__global const ushort *)(p))[(i)])

#if defined(MPCL_STORAGE_F16)
typedef half storage_t;
#define LOAD(p, i) LOAD_HALF((p), (i))
#define STORE(p, i, v) STORE_HALF((p), (i), (v))
#elif defined(MPCL_STORAGE_BF16)
typedef ushort storage_t;
#define LOAD(p, i) LOAD_BF16((p), (i))
#define STORE(p, i, v) STORE_BF16((p), (i), (v))
#elif defined(MPCL_STORAGE_F32)
typedef float storage_t;
#define LOAD(p, i) ((p)[(i)])
#define STORE(p, i, v) ((p)[(i)] = (v))
#else
#error "build with -DMPCL_STORAGE_F32, -DMPCL_STORAGE_F16 or -DMPCL_STORAGE_BF16"
#endif

// ---- Eight elements at a time (the elementwise kernels and the bias gradient) ----
//
// PoCL 3.1 (pthread, haswell) did not vectorize these kernels across
// work-items: a plain f32 copy with one element per work-item ran at 0.27x
// host memcpy, with a float4 per item at 1.07x. So the elementwise kernels
// take eight elements per work-item. f16 goes through the vector builtins
// vload_half8 / vstore_half8_rte (OpenCL 1.2 core, no cl_khr_fp16): unlike
// the scalar vstore_half_rte, which PoCL runs as a library call, these
// compile to one conversion instruction per eight elements there (vcvtph2ps /
// vcvtps2ph). A float8 form of the integer conversions above (bit-exact
// against them on all 2^32 floats; not kept) ran 2-3x slower in one A/B run:
// f16 bias+relu forward 0.57x against 1.37x memcpy, f16 bias gradient 0.29x
// against 1.00x. The scalar LOAD/STORE above serve the tails.
//
// One LLVM habit to know: a float compare of a value that came straight from
// vload_half8 against a constant is rewritten into a compare of halves, which
// x86 has no vector instruction for, and comes out as eight scalar
// conversions and branches (relu backward in f16: 0.26x memcpy against 1.2x).
// Kernels compare such values on their bits (see activation_grad).

// Whole vectors at one element's alignment, each as one unaligned vector
// move. vloadn/vstoren promise the same, but PoCL splits them: vload8/vstore8
// of float came out as four 8-byte moves, vstore8/vstore16 of ushort as one
// 2-byte store per lane (the bf16 bias+relu forward at 0.38x memcpy against
// f16's 1.39x, one Zen 4 core), and a 16-wide float access as 4- and 8-wide
// pieces (staging op(A) that way took 22% of the 128x128x784 GEMM). A
// device that splits these types anyway is still correct. GLOAD_U/GSTORE_U
// take global pointers, PLOAD_U/PSTORE_U private ones (OpenCL 1.2 has no
// generic address space); T is the vector type, e.g. float16.
typedef float4 __attribute__((aligned(4))) mpcl_float4_u;
typedef float8 __attribute__((aligned(4))) mpcl_float8_u;
typedef float16 __attribute__((aligned(4))) mpcl_float16_u;
typedef ushort4 __attribute__((aligned(2))) mpcl_ushort4_u;
typedef ushort8 __attribute__((aligned(2))) mpcl_ushort8_u;
typedef ushort16 __attribute__((aligned(2))) mpcl_ushort16_u;
#define MPCL_U(T) MPCL_U_(T)
#define MPCL_U_(T) mpcl_##T##_u
#define GLOAD_U(T, p) (*(__global const MPCL_U(T) *)(p))
#define GSTORE_U(T, p, v) (*(__global MPCL_U(T) *)(p) = (v))
#define PLOAD_U(T, p) (*(const MPCL_U(T) *)(p))
#define PSTORE_U(T, p, v) (*(MPCL_U(T) *)(p) = (v))
#define STORE_USHORT8(p, i, v) GSTORE_U(ushort8, (__global ushort *)(p) + (i), (v))
#define STORE_USHORT16(p, i, v) GSTORE_U(ushort16, (__global ushort *)(p) + (i), (v))

// Software prefetch of the cache line at p, for reading or for writing,
// where the program was built with MPCL_PREFETCH (src/runtime/kernels.c: the
// CPU compilers that lower clang's __builtin_prefetch to an instruction);
// nothing elsewhere. For strided walks that the CPU's stream prefetcher does
// not follow: rows a few KiB apart, a line or two from each.
#if defined(MPCL_PREFETCH)
#define PREFETCH_READ(p) __builtin_prefetch((p), 0, 3)
#define PREFETCH_WRITE(p) __builtin_prefetch((p), 1, 3)
#else
#define PREFETCH_READ(p) ((void)0)
#define PREFETCH_WRITE(p) ((void)0)
#endif

#define LOAD_HALF8(p, i) vload_half8(0, (__global const half *)(p) + (i))
#define STORE_HALF8(p, i, v) vstore_half8_rte((v), 0, (__global half *)(p) + (i))
#define LOAD_FLOAT8(p, i) GLOAD_U(float8, (__global const float *)(p) + (i))
#define STORE_FLOAT8(p, i, v) GSTORE_U(float8, (__global float *)(p) + (i), (v))
// The float8 forms of the bf16 conversions above: shifts and adds on eight
// lanes (element by element, the bf16 Adam update took 2.5x the vector one).
#define LOAD_BF16_8(p, i) mpcl_bf16_value8(vload8(0, (__global const ushort *)(p) + (i)))
#define STORE_BF16_8(p, i, v) STORE_USHORT8((p), (i), mpcl_bf16_bits8(v))

// LOAD8(p, i): p[i .. i+7] as float8; STORE8(p, i, v) stores them back. A
// storage dtype without a vector form here would go element by element
// through LOAD and STORE (correct, slower).
#if defined(MPCL_STORAGE_F16)
#define LOAD8(p, i) LOAD_HALF8((p), (i))
#define STORE8(p, i, v) STORE_HALF8((p), (i), (v))
#elif defined(MPCL_STORAGE_F32)
#define LOAD8(p, i) LOAD_FLOAT8((p), (i))
#define STORE8(p, i, v) STORE_FLOAT8((p), (i), (v))
#elif defined(MPCL_STORAGE_BF16)
#define LOAD8(p, i) LOAD_BF16_8((p), (i))
#define STORE8(p, i, v) STORE_BF16_8((p), (i), (v))
#else
#define LOAD8(p, i)                                                             \
    ((float8)(LOAD((p), (i)), LOAD((p), (i) + 1), LOAD((p), (i) + 2),           \
              LOAD((p), (i) + 3), LOAD((p), (i) + 4), LOAD((p), (i) + 5),       \
              LOAD((p), (i) + 6), LOAD((p), (i) + 7)))
#define STORE8(p, i, v)                    \
    do {                                   \
        float8 store8_v_ = (v);            \
        STORE((p), (i), store8_v_.s0);     \
        STORE((p), (i) + 1, store8_v_.s1); \
        STORE((p), (i) + 2, store8_v_.s2); \
        STORE((p), (i) + 3, store8_v_.s3); \
        STORE((p), (i) + 4, store8_v_.s4); \
        STORE((p), (i) + 5, store8_v_.s5); \
        STORE((p), (i) + 6, store8_v_.s6); \
        STORE((p), (i) + 7, store8_v_.s7); \
    } while (0)
#endif

// The tail of a row or a tensor: the n elements p[i .. i+n-1], 1 <= n < 8,
// one by one through a scalar load or store macro LD/ST (LOAD/STORE,
// LOAD_HALF/STORE_HALF, LOAD_FLOAT/STORE_FLOAT). LOAD8_PART fills the lanes
// from n on with p[i + n - 1] (in range; never stored), STORE8_PART stores
// lanes 0 .. n-1 only. No private array: PoCL gives each one a per-group copy
// in memory.
#define LOAD_FLOAT(p, i) (((__global const float *)(p))[(i)])
#define STORE_FLOAT(p, i, v) (((__global float *)(p))[(i)] = (v))
#define LOAD8_PART_WITH(LD, p, i, n)                                             \
    ((float8)(LD((p), (i)), LD((p), (i) + min(1u, (n) - 1u)),                     \
              LD((p), (i) + min(2u, (n) - 1u)), LD((p), (i) + min(3u, (n) - 1u)), \
              LD((p), (i) + min(4u, (n) - 1u)), LD((p), (i) + min(5u, (n) - 1u)), \
              LD((p), (i) + min(6u, (n) - 1u)), LD((p), (i) + (n) - 1u)))
#define STORE8_PART_WITH(ST, p, i, n, v)              \
    do {                                              \
        float8 store8_v_ = (v);                       \
        ST((p), (i), store8_v_.s0);                   \
        if ((n) > 1u) ST((p), (i) + 1, store8_v_.s1); \
        if ((n) > 2u) ST((p), (i) + 2, store8_v_.s2); \
        if ((n) > 3u) ST((p), (i) + 3, store8_v_.s3); \
        if ((n) > 4u) ST((p), (i) + 4, store8_v_.s4); \
        if ((n) > 5u) ST((p), (i) + 5, store8_v_.s5); \
        if ((n) > 6u) ST((p), (i) + 6, store8_v_.s6); \
    } while (0)
#define LOAD8_PART(p, i, n) LOAD8_PART_WITH(LOAD, (p), (i), (n))
#define STORE8_PART(p, i, n, v) STORE8_PART_WITH(STORE, (p), (i), (n), (v))

// The lanes of v added in order, through a private array: Oclgrind's
// --uninitialized check crashed on the swizzles of a horizontal sum.
static inline float lanes_sum8(float8 v) {
    float a[8];
    vstore8(v, 0, a);
    float s = 0.0f;
    for (uint k = 0; k < 8; k++) s += a[k];
    return s;
}

// A storage element's raw bits (float for f32, ushort for f16 and bf16),
// for kernels that gather elements one by one (the GEMM's transposed or
// narrow operands, the loss's rows) and convert eight at once: a scalar
// f16 conversion is integer code per element (mpcl_f16_value above), the
// vector one a single instruction. storage_value4/8/16 / storage_bits8
// convert four (eight, sixteen) raw values; f16 goes through a private
// vector, as vload_half8 and vstore_half8_rte take pointers.
#if defined(MPCL_STORAGE_F32)
typedef float storage_bits_t;
typedef float8 storage_bits8_t;
typedef float16 storage_bits16_t;
typedef float8 __attribute__((aligned(4))) mpcl_storage_bits8_t_u; /* GLOAD_U's */
static inline float4 storage_value4(float4 r) { return r; }
static inline float8 storage_value8(float8 r) { return r; }
static inline float16 storage_value16(float16 r) { return r; }
static inline float8 storage_bits8(float8 v) { return v; }
#elif defined(MPCL_STORAGE_BF16)
typedef ushort storage_bits_t;
typedef ushort8 storage_bits8_t;
typedef ushort16 storage_bits16_t;
typedef ushort8 __attribute__((aligned(2))) mpcl_storage_bits8_t_u; /* GLOAD_U's */
static inline float4 storage_value4(ushort4 r) { return mpcl_bf16_value4(r); }
static inline float8 storage_value8(ushort8 r) { return mpcl_bf16_value8(r); }
static inline float16 storage_value16(ushort16 r) { return mpcl_bf16_value16(r); }
static inline ushort8 storage_bits8(float8 v) { return mpcl_bf16_bits8(v); }
#else
typedef ushort storage_bits_t;
typedef ushort8 storage_bits8_t;
typedef ushort16 storage_bits16_t;
typedef ushort8 __attribute__((aligned(2))) mpcl_storage_bits8_t_u; /* GLOAD_U's */
static inline float4 storage_value4(ushort4 r) { return vload_half4(0, (const half *)&r); }
static inline float8 storage_value8(ushort8 r) { return vload_half8(0, (const half *)&r); }
static inline float16 storage_value16(ushort16 r) { return vload_half16(0, (const half *)&r); }
static inline ushort8 storage_bits8(float8 v) {
    ushort8 r;
    vstore_half8_rte(v, 0, (half *)&r);
    return r;
}
#endif

// AVX512-BF16's dot product of bf16 pairs, for CPU devices only: the host
// defines MPCL_BF16_DOT_X86 after its probe (cl/bf16_dot_probe.cl) ran this
// very macro and got the host model's bits. Lane j of acc (float16) gains
// a.bf16[2j+1] * b.bf16[2j+1], then a.bf16[2j] * b.bf16[2j] (uint16 a and b
// hold the pairs, the even element in the low half), each sum rounded to
// nearest even, bf16 subnormals in and f32 subnormals out read as zero. An
// inline instruction: LLVM has the intrinsic, but PoCL's build of kernels
// failed to select it for the devices it targets.
#if defined(MPCL_BF16_DOT_X86)
#define MPCL_BF16_DOT16(acc, a, b) __asm__("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b))
#endif
