/* Seeded random numbers and shuffles, the same on every platform
 * (include/mpcl/rng.h). */
#include "mpcl/rng.h"

#include "runtime/runtime.h"

#define GOLDEN 0x9e3779b97f4a7c15ull /* splitmix64's increment */

uint64_t mpcl__mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t mpcl__counter_key(uint64_t seed, uint64_t counter) {
    return mpcl__mix64(seed ^ mpcl__mix64(counter));
}

uint64_t mpcl__counter_draw(uint64_t key, uint64_t index) {
    return mpcl__mix64(key + GOLDEN * (index + 1));
}

uint64_t mpcl_rng_next(uint64_t *state) {
    return mpcl__mix64(*state += GOLDEN);
}

uint64_t mpcl_rng_below(uint64_t *state, uint64_t bound) {
    if (bound <= 1) return 0;
    /* 2^64 mod bound, computed in 64 bits: the draws below it would make the
     * low residues one more likely than the others. */
    uint64_t threshold = (0 - bound) % bound;
    uint64_t r;
    do r = mpcl_rng_next(state);
    while (r < threshold);
    return r % bound;
}

void mpcl_iota_indices(int32_t *idx, size_t n) {
    for (size_t i = 0; i < n; i++) idx[i] = (int32_t)i;
}

void mpcl_shuffle_indices(uint64_t *rng_state, int32_t *idx, size_t n) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)mpcl_rng_below(rng_state, i);
        int32_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}
