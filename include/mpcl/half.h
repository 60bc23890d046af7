/* IEEE binary16 on the host: the same rounding the device's vstore_half_rte
 * does (round to nearest even, overflow to inf, subnormals kept), so that host
 * references and uploads agree bit for bit with the device. */
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

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
