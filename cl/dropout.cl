// Dropout without a stored mask: whether element i is kept is a hash of the
// seed, the counter and i (include/mpcl/dropout.h), so the forward and the
// backward pass recompute the same mask, and src/compute/dropout.c computes
// it on the host with the same integer operations.

// splitmix64's output function: a bijection of 64-bit words in which every
// output bit depends on every input bit. The host's copy is mpcl__mix64 in
// src/runtime/rng.c.
static inline ulong mpcl_mix64(ulong z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9UL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebUL;
    return z ^ (z >> 31);
}

// Draw `index` of the stream whose key is mix64(seed ^ mix64(counter)),
// computed on the host: mpcl__counter_draw's bits. Also used by tokens.cl.
static inline ulong mpcl_counter_draw(ulong key, ulong index) {
    return mpcl_mix64(key + 0x9e3779b97f4a7c15UL * (index + 1UL));
}

// out[i] = in[i] * scale where the element is kept, 0 where it is dropped:
// element i is kept when the top 24 bits of mix64(key + golden * (i + 1)),
// as a uniform u in [0, 1), reach rate (u >= rate, exact in float on both
// sides). key = mix64(seed ^ mix64(counter)), from the host. The forward and
// the backward pass (scale = 1 / (1 - rate) both). rate 0 copies the bits:
// a device that flushes f32 subnormals would lose them in the multiply.
// out may be in.
__kernel void mpcl_dropout(__global storage_t *out, __global const storage_t *in, ulong key,
                           float rate, float scale, uint n) {
    uint i = get_global_id(0);
    if (i >= n) return;
    if (rate == 0.0f) {
        ((__global storage_bits_t *)out)[i] = ((__global const storage_bits_t *)in)[i];
        return;
    }
    ulong h = mpcl_counter_draw(key, i);
    float u = (float)(uint)(h >> 40) * 0x1p-24f;
    STORE(out, i, u >= rate ? LOAD(in, i) * scale : 0.0f);
}
