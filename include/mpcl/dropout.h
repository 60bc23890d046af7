/* Dropout without a stored mask: whether an element is kept is a hash of a
 * seed, a counter (the step, or a layer's call number) and the element's
 * index, recomputed wherever it is needed: the forward pass, the backward
 * pass and the host (mpcl_dropout_keep). Math is f32; f16 and bf16 are
 * storage formats. Every op is enqueued and returns without waiting;
 * arguments are checked completely before anything is enqueued, so a
 * refused call leaves its output untouched. */
#ifndef MPCL_DROPOUT_H
#define MPCL_DROPOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "mpcl/context.h"
#include "mpcl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* Whether element `index` (row * cols + col of a [B, n] tensor) is kept:
 * with mix64 splitmix64's output function, key = mix64(seed ^
 * mix64(counter)) and h = mix64(key + 0x9e3779b97f4a7c15 * (index + 1)) (all
 * mod 2^64), u = (h >> 40) / 2^24, a uniform in [0, 1) on 24 bits; kept when
 * u >= rate, compared in float. The device kernels compute the same bits. */
bool mpcl_dropout_keep(uint64_t seed, uint64_t counter, uint64_t index, float rate);

/* out = in / (1 - rate) where kept, 0 where dropped (f32 math, one rounding
 * into the dtype; the scale 1 / (1 - rate) is a float). rate in [0, 1)
 * (MPCL_ERR_INVALID_ARG otherwise); rate 0 copies every element bit for bit. in
 * and out: [B, n] of one float dtype; out may be in. */
mpcl_status mpcl_dropout_forward(mpcl_context *ctx, float rate, uint64_t seed, uint64_t counter,
                                 mpcl_tensor *out, const mpcl_tensor *in);

/* d_in = d_out / (1 - rate) where the forward with the same rate, seed and
 * counter kept the element, 0 elsewhere. As the forward; d_in may be d_out. */
mpcl_status mpcl_dropout_backward(mpcl_context *ctx, float rate, uint64_t seed, uint64_t counter,
                                  mpcl_tensor *d_in, const mpcl_tensor *d_out);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
