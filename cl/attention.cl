// Causal multi-head self-attention (src/nn/causal_self_attention.c is the
// one caller). qkv is [B * T, 3C] in the storage dtype: each position's q,
// k and v, C channels each, head h at channels h * hs .. (h + 1) * hs - 1 of
// each third (hs = C / H), GPT-2's layout. att and dscore are f32 [B * H *
// T, T]: row (b, h, t) holds, for keys t' <= t, position t's attention
// probabilities (att) and the gradient of the scaled scores (dscore); the
// entries t' > t are never written nor read. Every sum is f32 in index
// order, each by one work-item, and every output element has one writer:
// deterministic, no atomics.

// The first element of head h's q (part 0), k (1) or v (2) at position
// (b, t) in qkv.
inline size_t attn_qkv_at(uint b, uint t, uint h, uint part, uint T, uint C, uint hs) {
    return ((size_t)b * T + t) * 3 * C + (size_t)part * C + (size_t)h * hs;
}

// The first element of head h at position (b, t) in a [B * T, C] tensor.
inline size_t attn_row_at(uint b, uint t, uint h, uint T, uint C, uint hs) {
    return ((size_t)b * T + t) * C + (size_t)h * hs;
}

// One work-item per query row (b, h, t), rows = B * H * T of them: the
// scores q . k / sqrt(hs) against keys t' <= t, their softmax (less the
// maximum: exp never overflows), and y = att . v.
__kernel void mpcl_attention_forward(__global float *att, __global storage_t *y,
                                     __global const storage_t *qkv, uint T, uint C, uint H,
                                     float scale, uint rows) {
    uint row = get_global_id(0);
    if (row >= rows) return;
    uint t = row % T, h = row / T % H, b = row / T / H, hs = C / H;
    __global float *p = att + (size_t)row * T;
    size_t q = attn_qkv_at(b, t, h, 0, T, C, hs);
    float m = -INFINITY;
    for (uint u = 0; u <= t; u++) {
        size_t k = attn_qkv_at(b, u, h, 1, T, C, hs);
        float s = 0.0f;
        for (uint d = 0; d < hs; d++) s = fma(LOAD(qkv, q + d), LOAD(qkv, k + d), s);
        p[u] = s * scale;
        m = fmax(m, p[u]);
    }
    float sum = 0.0f;
    for (uint u = 0; u <= t; u++) {
        p[u] = exp(p[u] - m);
        sum += p[u];
    }
    float inv = 1.0f / sum;
    for (uint u = 0; u <= t; u++) p[u] *= inv;
    size_t out = attn_row_at(b, t, h, T, C, hs);
    for (uint d = 0; d < hs; d++) {
        float acc = 0.0f;
        for (uint u = 0; u <= t; u++)
            acc = fma(p[u], LOAD(qkv, attn_qkv_at(b, u, h, 2, T, C, hs) + d), acc);
        STORE(y, out + d, acc);
    }
}

// The backward by query row (b, h, t): dA[t'] = dy . v[t'], the softmax's
// backward dscore[t'] = att[t'] (dA[t'] - sum_u att[u] dA[u]), and dq =
// scale sum_t' dscore[t'] k[t'] into dqkv's q part.
__kernel void mpcl_attention_backward_query(__global float *dscore, __global storage_t *dqkv,
                                            __global const float *att,
                                            __global const storage_t *qkv,
                                            __global const storage_t *dy, uint T, uint C, uint H,
                                            float scale, uint rows) {
    uint row = get_global_id(0);
    if (row >= rows) return;
    uint t = row % T, h = row / T % H, b = row / T / H, hs = C / H;
    __global const float *p = att + (size_t)row * T;
    __global float *ds = dscore + (size_t)row * T;
    size_t g = attn_row_at(b, t, h, T, C, hs);
    float dot = 0.0f;
    for (uint u = 0; u <= t; u++) {
        size_t v = attn_qkv_at(b, u, h, 2, T, C, hs);
        float da = 0.0f;
        for (uint d = 0; d < hs; d++) da = fma(LOAD(dy, g + d), LOAD(qkv, v + d), da);
        ds[u] = da;
        dot = fma(p[u], da, dot);
    }
    for (uint u = 0; u <= t; u++) ds[u] = p[u] * (ds[u] - dot);
    size_t dq = attn_qkv_at(b, t, h, 0, T, C, hs);
    for (uint d = 0; d < hs; d++) {
        float acc = 0.0f;
        for (uint u = 0; u <= t; u++)
            acc = fma(ds[u], LOAD(qkv, attn_qkv_at(b, u, h, 1, T, C, hs) + d), acc);
        STORE(dqkv, dq + d, acc * scale);
    }
}

// The backward by key row (b, h, t'), after the query rows' kernel: dk =
// scale sum_{t >= t'} dscore[t][t'] q[t] and dv = sum_{t >= t'} att[t][t']
// dy[t] into dqkv's k and v parts.
__kernel void mpcl_attention_backward_key(__global storage_t *dqkv, __global const float *dscore,
                                          __global const float *att, __global const storage_t *qkv,
                                          __global const storage_t *dy, uint T, uint C, uint H,
                                          float scale, uint rows) {
    uint row = get_global_id(0);
    if (row >= rows) return;
    uint u = row % T, h = row / T % H, b = row / T / H, hs = C / H;
    size_t first = (size_t)(row - u) * T;  // row (b, h, 0) of att and dscore
    size_t dk = attn_qkv_at(b, u, h, 1, T, C, hs), dv = attn_qkv_at(b, u, h, 2, T, C, hs);
    for (uint d = 0; d < hs; d++) {
        float k_acc = 0.0f, v_acc = 0.0f;
        for (uint t = u; t < T; t++) {
            size_t i = first + (size_t)t * T + u;
            k_acc = fma(dscore[i], LOAD(qkv, attn_qkv_at(b, t, h, 0, T, C, hs) + d), k_acc);
            v_acc = fma(att[i], LOAD(dy, attn_row_at(b, t, h, T, C, hs) + d), v_acc);
        }
        STORE(dqkv, dk + d, k_acc * scale);
        STORE(dqkv, dv + d, v_acc);
    }
}
