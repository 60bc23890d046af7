/* IEEE binary16 and bfloat16 on the host: the same rounding the device's
 * stores do (round to nearest even, overflow to inf, subnormals kept), so
 * that host references and uploads agree bit for bit with the device. */
#ifndef MPCL_HALF_H
#define MPCL_HALF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

uint16_t mpcl_f32_to_f16(float value);
float mpcl_f16_to_f32(uint16_t bits);
/* Rounds a double straight to the nearest binary16 (no double rounding through
 * float): what a correctly rounded half operation on exact inputs returns. */
uint16_t mpcl_f64_to_f16(double value);

/* bfloat16: the top 16 bits of an f32 (sign, 8 exponent bits, 7 mantissa
 * bits). f32 -> bf16 rounds to nearest even; values from halfway between the
 * largest bf16 (0x7f7f, about 3.39e38) and 2^128 upward round to inf, as IEEE
 * rounding says; f32 subnormals round like any other value; NaN becomes the
 * quiet NaN 0x7fc0 with its sign kept. bf16 -> f32 is exact (bits << 16). */
uint16_t mpcl_f32_to_bf16(float value);
float mpcl_bf16_to_f32(uint16_t bits);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
