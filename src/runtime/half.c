/* IEEE binary16 and bfloat16 conversions on the host. Written on the bit
 * patterns so that the result does not depend on the compiler's _Float16 or
 * __bf16 support. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mpcl/half.h"

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

uint16_t mpcl_f32_to_f16(float value) {
    /* Every float is exact in double, so one rounding happens: to half. */
    return mpcl_f64_to_f16((double)value);
}

float mpcl_f16_to_f32(uint16_t bits) {
    int sign = (bits >> 15) & 1;
    int exp_field = (bits >> 10) & 0x1f;
    int mant = bits & 0x3ff;
    float v;
    if (exp_field == 0) {
        v = ldexpf((float)mant, -24);
    } else if (exp_field == 31) {
        v = mant ? NAN : INFINITY;
    } else {
        v = ldexpf((float)(mant | 0x400), exp_field - 25);
    }
    return sign ? -v : v;
}

uint16_t mpcl_f32_to_bf16(float value) {
    uint32_t x;
    memcpy(&x, &value, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((x >> 16) & 0x8000u) | 0x7fc0u);
    /* Round the low 16 bits away, ties to even: adding 0x7fff carries into
     * bit 16 exactly when they exceed half, and the kept lowest bit breaks
     * the tie. A carry out of the mantissa raises the exponent, which is the
     * right result, up to inf from the largest finite values; it never
     * reaches the sign bit (|x| <= 0x7f800000 here). */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float mpcl_bf16_to_f32(uint16_t bits) {
    uint32_t x = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}
