// Causal multi-head self-attention (src/nn/causal_self_attention.c is the
// one caller). qkv is [B * T, 3C] in the storage dtype: each position's q,
// k and v, C channels each, head h at channels h * hs .. (h + 1) * hs - 1 of
// each third (hs = C / H), GPT-2's layout. att and dscore are f32 [B * H *
// T, T]: row (b, h, t) holds, for keys t' <= t, position t's attention
// probabilities (att) and the gradient of the scaled scores (dscore); the
// entries t' > t are never written nor read. Every sum is f32 in index
// order, each by one work-item, and every output element has one writer:
// deterministic, no atomics. Rows of att and dscore are ld floats apart
// (ld >= T: the block layout's, attention_block.cl, pads them).

// The first element of head h's q (part 0), k (1) or v (2) at position
// (b, t) in qkv.
static inline size_t attn_qkv_at(uint b, uint t, uint h, uint part, uint T, uint C, uint hs) {
    return ((size_t)b * T + t) * 3 * C + (size_t)part * C + (size_t)h * hs;
}

// The first element of head h at position (b, t) in a [B * T, C] tensor.
static inline size_t attn_row_at(uint b, uint t, uint h, uint T, uint C, uint hs) {
    return ((size_t)b * T + t) * C + (size_t)h * hs;
}

// Head channels go eight at a time: elements i .. i + n - 1 of p (n <= 8)
// in lanes 0 .. n - 1, zeros in the rest. One (b, h) row's probability or
// score gradient then serves eight channels per load: in the backward by
// key rows, which walks a column of att and dscore (stride T), loading them
// once per channel made the kernel 72% of a GPT-2 layer's step on PoCL.
static inline float8 attn_load8(__global const storage_t *p, size_t i, uint n) {
    float8 v = n == 8u ? LOAD8(p, i) : LOAD8_PART(p, i, n);
    return select((float8)(0.0f), v, (int8)(0, 1, 2, 3, 4, 5, 6, 7) < (int8)((int)n));
}

// Lanes 0 .. n - 1 of v into p[i ..].
static inline void attn_store8(__global storage_t *p, size_t i, uint n, float8 v) {
    if (n == 8u)
        STORE8(p, i, v);
    else
        STORE8_PART(p, i, n, v);
}

// The dot product of n elements of a from i and of b from j, eight lanes
// at a time, the lanes summed in a fixed order at the end.
static inline float attn_dot(__global const storage_t *a, size_t i, __global const storage_t *b, size_t j,
                      uint n) {
    float8 acc = (float8)(0.0f);
    for (uint d = 0; d < n; d += 8u) {
        uint m = min(8u, n - d);
        acc = fma(attn_load8(a, i + d, m), attn_load8(b, j + d, m), acc);
    }
    float4 h = acc.lo + acc.hi;
    return (h.x + h.y) + (h.z + h.w);
}

// Query row (b, h, t): the scores q . k / sqrt(hs) against keys t' <= t
// into p (its row of att), their softmax (less the maximum: exp never
// overflows), and the head's output att . v into y from element out.
static inline void attn_forward_row(__global float *p, __global storage_t *y, size_t out,
                             __global const storage_t *qkv, uint b, uint t, uint h, uint T, uint C,
                             uint hs, float scale) {
    size_t q = attn_qkv_at(b, t, h, 0, T, C, hs);
    float m = -INFINITY;
    for (uint u = 0; u <= t; u++) {
        p[u] = attn_dot(qkv, q, qkv, attn_qkv_at(b, u, h, 1, T, C, hs), hs) * scale;
        m = fmax(m, p[u]);
    }
    float sum = 0.0f;
    for (uint u = 0; u <= t; u++) {
        p[u] = exp(p[u] - m);
        sum += p[u];
    }
    float inv = 1.0f / sum;
    for (uint u = 0; u <= t; u++) p[u] *= inv;
    for (uint d = 0; d < hs; d += 8u) {
        uint n = min(8u, hs - d);
        float8 acc = (float8)(0.0f);
        for (uint u = 0; u <= t; u++)
            acc = fma(p[u], attn_load8(qkv, attn_qkv_at(b, u, h, 2, T, C, hs) + d, n), acc);
        attn_store8(y, out + d, n, acc);
    }
}

// One work-item per query row (b, h, t), rows = B * H * T of them.
__kernel void mpcl_attention_forward(__global float *att, __global storage_t *y,
                                     __global const storage_t *qkv, uint T, uint C, uint H,
                                     uint ld, float scale, uint rows) {
    uint row = get_global_id(0);
    if (row >= rows) return;
    uint t = row % T, h = row / T % H, b = row / T / H, hs = C / H;
    attn_forward_row(att + (size_t)row * ld, y, attn_row_at(b, t, h, T, C, hs), qkv, b, t, h, T,
                     C, hs, scale);
}

// Generation's step (the key/value cache): position t of sample 0 alone,
// one work-item per head, its output into y's first row [1, C]. qkv holds
// positions 0 .. t of sample 0: the cache.
__kernel void mpcl_attention_forward_position(__global float *att, __global storage_t *y,
                                              __global const storage_t *qkv, uint T, uint C,
                                              uint H, uint ld, float scale, uint t) {
    uint h = get_global_id(0);
    if (h >= H) return;
    uint hs = C / H;
    attn_forward_row(att + ((size_t)h * T + t) * ld, y, (size_t)h * hs, qkv, 0, t, h, T, C, hs,
                     scale);
}

// The backward by query row (b, h, t): dA[t'] = dy . v[t'], the softmax's
// backward dscore[t'] = att[t'] (dA[t'] - sum_u att[u] dA[u]), and dq =
// scale sum_t' dscore[t'] k[t'] into dqkv's q part.
__kernel void mpcl_attention_backward_query(__global float *dscore, __global storage_t *dqkv,
                                            __global const float *att,
                                            __global const storage_t *qkv,
                                            __global const storage_t *dy, uint T, uint C, uint H,
                                            uint ld, float scale, uint rows) {
    uint row = get_global_id(0);
    if (row >= rows) return;
    uint t = row % T, h = row / T % H, b = row / T / H, hs = C / H;
    __global const float *p = att + (size_t)row * ld;
    __global float *ds = dscore + (size_t)row * ld;
    size_t g = attn_row_at(b, t, h, T, C, hs);
    float dot = 0.0f;
    for (uint u = 0; u <= t; u++) {
        float da = attn_dot(dy, g, qkv, attn_qkv_at(b, u, h, 2, T, C, hs), hs);
        ds[u] = da;
        dot = fma(p[u], da, dot);
    }
    for (uint u = 0; u <= t; u++) ds[u] = p[u] * (ds[u] - dot);
    size_t dq = attn_qkv_at(b, t, h, 0, T, C, hs);
    for (uint d = 0; d < hs; d += 8u) {
        uint n = min(8u, hs - d);
        float8 acc = (float8)(0.0f);
        for (uint u = 0; u <= t; u++)
            acc = fma(ds[u], attn_load8(qkv, attn_qkv_at(b, u, h, 1, T, C, hs) + d, n), acc);
        attn_store8(dqkv, dq + d, n, acc * scale);
    }
}

// The backward by key row (b, h, t'), after the query rows' kernel: dk =
// scale sum_{t >= t'} dscore[t][t'] q[t] and dv = sum_{t >= t'} att[t][t']
// dy[t] into dqkv's k and v parts.
__kernel void mpcl_attention_backward_key(__global storage_t *dqkv, __global const float *dscore,
                                          __global const float *att, __global const storage_t *qkv,
                                          __global const storage_t *dy, uint T, uint C, uint H,
                                          uint ld, float scale, uint rows) {
    uint row = get_global_id(0);
    if (row >= rows) return;
    uint u = row % T, h = row / T % H, b = row / T / H, hs = C / H;
    size_t first = (size_t)(row - u) * ld;  // row (b, h, 0) of att and dscore
    size_t dk = attn_qkv_at(b, u, h, 1, T, C, hs), dv = attn_qkv_at(b, u, h, 2, T, C, hs);
    for (uint d = 0; d < hs; d += 8u) {
        uint n = min(8u, hs - d);
        float8 k_acc = (float8)(0.0f), v_acc = (float8)(0.0f);
        for (uint t = u; t < T; t++) {
            size_t i = first + (size_t)t * ld + u;
            k_acc =
                fma(dscore[i], attn_load8(qkv, attn_qkv_at(b, t, h, 0, T, C, hs) + d, n), k_acc);
            v_acc = fma(att[i], attn_load8(dy, attn_row_at(b, t, h, T, C, hs) + d, n), v_acc);
        }
        attn_store8(dqkv, dk + d, n, k_acc * scale);
        attn_store8(dqkv, dv + d, n, v_acc);
    }
}
