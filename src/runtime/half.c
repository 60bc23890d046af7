/* IEEE binary16 and bfloat16 conversions on the host. Written on the bit
 * patterns so that the result does not depend on the compiler's _Float16 or
 * __bf16 support. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "runtime/runtime.h"

uint16_t mpcl_f64_to_f16(double value) {
    uint16_t sign = signbit(value) ? 0x8000u : 0u;
    double a = fabs(value);
    if (isnan(value)) return (uint16_t)(sign | 0x7e00u);
    if (a >= 65520.0) return (uint16_t)(sign | 0x7c00u); /* 65520 rounds (to even) to inf */
    if (a < 0x1p-14) {
        /* Subnormal: a multiple of 2^-24; nearbyint rounds half to even in the
         * default rounding mode. 2^-14 itself may be reached by rounding up. */
        double q = nearbyint(a * 0x1p24);
        return (uint16_t)(sign | (uint16_t)q);
    }
    int e;
    double m = frexp(a, &e);          /* a = m * 2^e, m in [0.5, 1) */
    double q = nearbyint(m * 2048.0); /* 11 significant bits */
    if (q >= 2048.0) {                /* rounded up to the next power of two */
        q = 1024.0;
        e += 1;
    }
    int exp_field = e - 1 + 15;
    if (exp_field >= 31) return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | (uint16_t)(exp_field << 10) | ((uint16_t)q & 0x3ffu));
}

static float float_of(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint32_t bits_of(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* cond ? a : b as masks: a ternary may become a branch, and a loop with
 * control flow does not vectorize. */
static inline uint32_t pick(int cond, uint32_t a, uint32_t b) {
    uint32_t mask = 0u - (uint32_t)(cond != 0);
    return (a & mask) | (b & ~mask);
}

/* f32 -> f16 on the bits, with selects instead of branches so that the array
 * forms below vectorize: uploads, downloads and the all-reduce's staging
 * convert whole arenas, where the double route above cost ~9 ns an element.
 * Rounds to nearest even, as mpcl_f64_to_f16((double)value) does. */
static inline uint16_t f16_of(float value) {
    uint32_t x = bits_of(value), a = x & 0x7fffffffu;
    /* Normal in half (2^-14 and up): rebias the exponent by 127 - 15 and
     * round the 13 mantissa bits away. Adding 0xfff carries into bit 13
     * exactly when they exceed half; the kept lowest bit breaks the tie. A
     * carry out of the mantissa raises the exponent, which is right. */
    uint32_t r = a - 0x38000000u, normal = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    /* Below 2^-14 the half is a multiple of 2^-24. Adding 0.5, whose ulp is
     * 2^-24, makes the FPU round |value| to that multiple, to nearest even,
     * in the low bits of the sum; 0x400 there is 2^-14, encoded right. */
    uint32_t subnormal = bits_of(float_of(a) + 0.5f) - 0x3f000000u;
    uint32_t h = pick(a < 0x38800000u, subnormal, normal);
    h = pick(a >= 0x477ff000u, 0x7c00u, h); /* 65520 (the tie above 65504) and up: inf */
    h = pick(a > 0x7f800000u, 0x7e00u, h);  /* NaN */
    return (uint16_t)(((x >> 16) & 0x8000u) | h);
}

static inline float f32_of(uint16_t bits) {
    uint32_t e = bits & 0x7c00u, em = (uint32_t)(bits & 0x7fffu) << 13;
    uint32_t normal = em + 0x38000000u;  /* rebias the exponent by 127 - 15 */
    uint32_t special = em | 0x7f800000u; /* inf, or NaN with its payload */
    /* Zero and subnormals, m 2^-24: read as 1.m 2^-14, less 2^-14 (exact). */
    uint32_t subnormal = bits_of(float_of(em + 0x38800000u) - 0x1p-14f);
    uint32_t x = pick(e == 0x7c00u, special, pick(e == 0, subnormal, normal));
    return float_of(((uint32_t)(bits & 0x8000u) << 16) | x);
}

static inline uint16_t bf16_of(float value) {
    uint32_t x = bits_of(value);
    /* Round the low 16 bits away, ties to even: adding 0x7fff carries into
     * bit 16 exactly when they exceed half, and the kept lowest bit breaks
     * the tie. A carry out of the mantissa raises the exponent, which is the
     * right result, up to inf from the largest finite values; it never
     * reaches the sign bit (|x| <= 0x7f800000 where it is kept). */
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = ((x >> 16) & 0x8000u) | 0x7fc0u;
    return (uint16_t)pick((x & 0x7fffffffu) > 0x7f800000u, nan, rounded);
}

static inline float bf16_value(uint16_t bits) {
    return float_of((uint32_t)bits << 16);
}

uint16_t mpcl_f32_to_f16(float value) {
    return f16_of(value);
}

float mpcl_f16_to_f32(uint16_t bits) {
    return f32_of(bits);
}

uint16_t mpcl_f32_to_bf16(float value) {
    return bf16_of(value);
}

float mpcl_bf16_to_f32(uint16_t bits) {
    return bf16_value(bits);
}

uint16_t mpcl__f32_to_16bit(mpcl_dtype dtype, float x) {
    return dtype == MPCL_DTYPE_BF16 ? bf16_of(x) : f16_of(x);
}

float mpcl__16bit_to_f32(mpcl_dtype dtype, uint16_t bits) {
    return dtype == MPCL_DTYPE_BF16 ? bf16_value(bits) : f32_of(bits);
}

/* Whole arrays, for the callers that convert arenas and batches. The inner
 * loops of a fixed 16 elements inline the selects above and vectorize even
 * at -O2, whose cost model takes only loops of a known multiple of the
 * vector length (and restrict: no overlap to check); then the tail. */
#define HALF_BLOCK 16
#define CONVERT_N(dst, src, n, convert)                                                          \
    do {                                                                                         \
        size_t i_ = 0;                                                                           \
        for (; i_ + HALF_BLOCK <= (n); i_ += HALF_BLOCK)                                         \
            for (size_t j_ = 0; j_ < HALF_BLOCK; j_++) (dst)[i_ + j_] = convert((src)[i_ + j_]); \
        for (; i_ < (n); i_++) (dst)[i_] = convert((src)[i_]);                                   \
    } while (0)

void mpcl__f32_to_16bit_n(mpcl_dtype dtype, const float *restrict src, uint16_t *restrict dst,
                          size_t n) {
    if (dtype == MPCL_DTYPE_BF16)
        CONVERT_N(dst, src, n, bf16_of);
    else
        CONVERT_N(dst, src, n, f16_of);
}

void mpcl__16bit_to_f32_n(mpcl_dtype dtype, const uint16_t *restrict src, float *restrict dst,
                          size_t n) {
    if (dtype == MPCL_DTYPE_BF16)
        CONVERT_N(dst, src, n, bf16_value);
    else
        CONVERT_N(dst, src, n, f32_of);
}
