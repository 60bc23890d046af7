/* Seeded random numbers and shuffles: plain 64-bit integer arithmetic, so
 * that every platform draws the same initial weights and batch orders. */
#ifndef MPCL_RNG_H
#define MPCL_RNG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* splitmix64 (Steele, Lea, Flood 2014; the seeding generator of xoshiro):
 * state += 0x9e3779b97f4a7c15, then two xor-shift-multiply rounds. Plain
 * 64-bit integer arithmetic, so every platform gives the same sequence; any
 * seed, including 0, is a valid state. */
uint64_t mpcl_rng_next(uint64_t *state);

/* A uniform integer in [0, bound) from mpcl_rng_next, without modulo bias
 * (draws below 2^64 mod bound are rejected and redrawn). bound > 0. */
uint64_t mpcl_rng_below(uint64_t *state, uint64_t bound);

/* Fills idx[i] = i for i in [0, n). */
void mpcl_iota_indices(int32_t *idx, size_t n);

/* Permutes idx[0..n) in place with Fisher-Yates (Durstenfeld): for i from
 * n - 1 down to 1, swap idx[i] with idx[mpcl_rng_below(state, i + 1)].
 * Same seed, same permutation, on every platform. */
void mpcl_shuffle_indices(uint64_t *rng_state, int32_t *idx, size_t n);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
