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
inline ushort mpcl_f16_bits(float f) {
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
inline float mpcl_f16_value(ushort h) {
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
    inline ushort##N mpcl_bf16_bits##N(float##N f) {                                   \
        uint##N x = as_uint##N(f);                                                     \
        uint##N r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;                            \
        r = (x & 0x7fffffffu) > 0x7f800000u ? ((x >> 16) & 0x8000u) | 0x7fc0u : r;     \
        return convert_ushort##N(r);                                                   \
    }                                                                                  \
    inline float##N mpcl_bf16_value##N(ushort##N h) {                                  \
        return as_float##N(convert_uint##N(h) << 16);                                  \
    }
MPCL_BF16_CONVERSIONS()
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
