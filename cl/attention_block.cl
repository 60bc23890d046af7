// Causal self-attention for CPU devices (the `block` layout; attention.cl's
// kernels, one work-item per row, are the `row` layout; the layer picks,
// src/nn/causal_self_attention.c). Same inputs, outputs and f32 arithmetic
// as attention.cl; only the order of work differs. One work-item owns a
// block of ATTN_ROWS query (or key) rows of one head (b, h) and runs each
// product as a register-tiled outer product, like cl/gemm.cl: a vector of
// 16 keys (or channels) against ATTN_ROWS broadcast scalars per step. One
// work-item per row, with a horizontal sum per dot product, took a quarter
// of a GPT step on PoCL.
//
// The operands come packed, per head, as f32 (mpcl_attention_pack_qkv and
// mpcl_attention_pack_dy): rows
// [B H, Tp, hsp] (q, k, v, dy: head size hs padded with zeros to hsp, a
// multiple of 16; positions to Tp) and their transposes [B H, hsp, Tp] (k,
// v), so that every vector load is whole and in range. With `direct` (f32
// storage and hs a multiple of 16, which the layer decides), the rows are
// read in place from qkv and dy instead and only the transposes are packed:
// the rows' copies were most of the packing's traffic. att and dscore rows
// have Tp columns (`ld`); a block writes the columns up to its last 16-wide
// chunk, zeros past the row's position (so a key block reads zeros above the
// diagonal, never a stale value).

#if MPCL_ABI_ATTN_ROWS != 8 || MPCL_ABI_ATTN_CHUNK != 16
#error "attention_block.cl holds 8 rows of float16 accumulators: see cl/abi.h"
#endif
#define ATTN_ROWS MPCL_ABI_ATTN_ROWS
#define ATTN_LIST(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

// The row of an [n, w] f32 tensor at (bh, t).
static inline size_t attn_packed_at(uint bh, uint t, uint Tp, uint w) {
    return ((size_t)bh * Tp + t) * w;
}

// Channels d .. d + 7 of one head at a position (from element `from` of
// a storage tensor), zeros past the head's first hs channels, into
// rows[to + d ..] unless rows is NULL; returned too.
static inline float8 attn_pack8(__global float *rows, size_t to, __global const storage_t *src,
                         size_t from, uint d, uint hs) {
    float8 v = d + 8u <= hs ? LOAD8(src, from + d)
               : d < hs     ? LOAD8_PART(src, from + d, hs - d)
                            : (float8)(0.0f);
    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7) + (int8)((int)d);
    v = select(v, (float8)(0.0f), lane >= (int8)((int)hs));
    if (rows) GSTORE_U(float8, rows + to + d, v);
    return v;
}

// One item per 16 positions t0 .. t0 + 15 of one head (b, h) of qkv ([B T,
// 3C]): q, k and v into their rows (unless direct), k and v into their
// transposes, 16 positions by 8 channels at a time (one pass over qkv;
// packing rows and then transposing them cost twice the time on PoCL).
// Positions t >= T and channels past hs are zeros.
#define ATTN_PACK_LIST(X)                                                                 \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define ATTN_PACK_ROW(i)                                                                  \
    const float8 r##i = attn_pack8(rows, to + (size_t)(i) * hsp, qkv,                     \
                                   ((size_t)b * T + min(t0 + (i), T - 1u)) * 3 * C + part, d, \
                                   t0 + (i) < T ? hs : 0u);
#define ATTN_PACK_COL(L)                                                                  \
    GSTORE_U(float16, cols + (size_t)(d + (L)) * Tp,                                      \
             (float16)(r0.s##L, r1.s##L, r2.s##L, r3.s##L, r4.s##L, r5.s##L, r6.s##L,     \
                       r7.s##L, r8.s##L, r9.s##L, r10.s##L, r11.s##L, r12.s##L, r13.s##L, \
                       r14.s##L, r15.s##L));
__kernel void mpcl_attention_pack_qkv(__global float *q, __global float *k, __global float *v,
                                      __global float *kt, __global float *vt,
                                      __global const storage_t *qkv, uint T, uint Tp, uint C,
                                      uint H, uint hsp, uint items, uint direct) {
    uint item = get_global_id(0);
    if (item >= items) return;
    uint chunks = Tp / 16u, bh = item / chunks, t0 = item % chunks * 16u;
    uint b = bh / H, hs = C / H;
    size_t to = attn_packed_at(bh, t0, Tp, hsp);
    for (uint p = direct ? 1u : 0u; p < 3u; p++) {
        __global float *rows = direct ? NULL : p == 0u ? q : p == 1u ? k : v;
        __global float *cols = (p == 1u ? kt : vt) + (size_t)bh * hsp * Tp + t0;
        size_t part = (size_t)p * C + (size_t)(bh % H) * hs;
        for (uint d = 0; d < hsp; d += 8u) {
            ATTN_PACK_LIST(ATTN_PACK_ROW)
            if (p != 0u) {
                ATTN_PACK_COL(0) ATTN_PACK_COL(1) ATTN_PACK_COL(2) ATTN_PACK_COL(3)
                ATTN_PACK_COL(4) ATTN_PACK_COL(5) ATTN_PACK_COL(6) ATTN_PACK_COL(7)
            }
        }
    }
}

// The same for dy ([B T, C]) into rows only.
__kernel void mpcl_attention_pack_dy(__global float *rows, __global const storage_t *dy, uint T,
                                     uint Tp, uint C, uint H, uint hsp, uint items) {
    uint item = get_global_id(0);
    if (item >= items) return;
    uint t = item % Tp, bh = item / Tp, h = bh % H, b = bh / H;
    uint hs = t < T ? C / H : 0u;
    size_t from = ((size_t)b * T + min(t, T - 1)) * C + (size_t)h * (C / H);
    size_t to = attn_packed_at(bh, t, Tp, hsp);
    for (uint d = 0; d < hsp; d += 8u) attn_pack8(rows, to, dy, from, d, hs);
}

// Lanes 0 .. n - 1 of v (n <= 16) into p[i ..], in the storage dtype.
static inline void attn_store16(__global storage_t *p, size_t i, uint n, float16 v) {
    if (n >= 8u) {
        STORE8(p, i, v.lo);
        if (n == 16u)
            STORE8(p, i + 8, v.hi);
        else if (n > 8u)
            STORE8_PART(p, i + 8, n - 8u, v.hi);
    } else {
        STORE8_PART(p, i, n, v.lo);
    }
}

// The block of work-item `item`: head bh, first row t0; row r of the block
// is t0 + r clamped to T - 1 (a last block past T repeats row T - 1 and
// stores nothing for it).
#define ATTN_BLOCK                                          \
    uint item = get_global_id(0);                           \
    if (item >= items) return;                              \
    uint blocks = (T + ATTN_ROWS - 1) / ATTN_ROWS;          \
    uint bh = item / blocks, t0 = item % blocks * ATTN_ROWS; \
    uint b = bh / H, h = bh % H, hs = C / H;
#define ATTN_ROW(r) const uint row##r = min(t0 + (r), T - 1u);
// A block of query rows: its rows, the keys it attends to (0 .. its last
// row), those keys' 16-wide chunks, and where head bh's packed rows and
// transposes start.
#define ATTN_QUERY_BLOCK                                                        \
    ATTN_BLOCK                                                                  \
    ATTN_LIST(ATTN_ROW)                                                         \
    const uint keys = min(t0 + ATTN_ROWS, T), width = (keys + 15u) & ~15u;      \
    const size_t head_rows = attn_packed_at(bh, 0, Tp, hsp), head_cols = (size_t)bh * hsp * Tp;
#define ATTN_OWNS(r) (t0 + (r) < T)
// A rows operand of head (b, h): where its row 0 starts, and its rows'
// stride. Packed: head_rows and hsp. Direct: in place in a [B T, width]
// tensor, the head's channels from column part * C + h hs (qkv: width 3C,
// part 0, 1 or 2 for q, k, v; dy: width C, part 0).
#define ATTN_ROWS_AT(width, part) \
    (direct ? (size_t)b * T * (width) + (size_t)(part) * C + (size_t)h * hs : head_rows)
#define ATTN_ROW_STRIDE(width) (direct ? (width) : hsp)

// s_r[16 lanes] = mul sum_d a[t_r][d] bt[d][c .. c + 15]: a chunk of 16
// columns of A B^T for the block's rows (ar: rows of A, ars apart; bt:
// packed transposes of B, of head bh), `masked` past each row's position, stored
// into the rows of out (ld columns) that the block owns.
#define ATTN_ACC_DECL(r) float16 s##r = (float16)(0.0f);
#define ATTN_ACC_FMA(r) s##r = fma((float16)(ar_[(size_t)row##r * ars_ + d]), k, s##r);
#define ATTN_ACC_STORE(r)                                                              \
    if (ATTN_OWNS(r))                                                                  \
        GSTORE_U(float16, out_ + ((size_t)bh * T + row##r) * ld + c,                     \
                 select(s##r * mul_, (float16)(masked_), lane > (int16)((int)row##r)));
#define ATTN_SCORES_CHUNK(out, ar, ars, bt, masked, mul)                                 \
    {                                                                                    \
        __global float *out_ = (out);                                                    \
        __global const float *ar_ = (ar), *bt_ = (bt);                                   \
        const size_t ars_ = (ars);                                                       \
        const float masked_ = (masked), mul_ = (mul);                                    \
        ATTN_LIST(ATTN_ACC_DECL)                                                         \
        for (uint d = 0; d < hs; d++) {                                                  \
            const float16 k = GLOAD_U(float16, bt_ + (size_t)d * Tp + c);                \
            ATTN_LIST(ATTN_ACC_FMA)                                                      \
        }                                                                                \
        const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15) + \
                           (int16)((int)c);                                              \
        ATTN_LIST(ATTN_ACC_STORE)                                                        \
    }

// The horizontal max and sum of a float16, in a fixed order.
static inline float attn_max16(float16 v) {
    float8 a = fmax(v.lo, v.hi);
    float4 b = fmax(a.lo, a.hi);
    return fmax(fmax(b.x, b.y), fmax(b.z, b.w));
}
static inline float attn_sum16(float16 v) {
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
    return (b.x + b.y) + (b.z + b.w);
}

// Row p (its first `width` columns, a multiple of 16: the row's chunks)
// from scores to probabilities: exp(s - max) / sum. Masked scores are
// -INFINITY and become zeros.
static inline void attn_softmax_row(__global float *p, uint width) {
    float16 m = (float16)(-INFINITY);
    for (uint c = 0; c < width; c += 16u) m = fmax(m, GLOAD_U(float16, p + c));
    float top = attn_max16(m);
    float16 sum = (float16)(0.0f);
    for (uint c = 0; c < width; c += 16u) {
        float16 e = exp(GLOAD_U(float16, p + c) - top);
        GSTORE_U(float16, p + c, e);
        sum += e;
    }
    float inv = 1.0f / attn_sum16(sum);
    for (uint c = 0; c < width; c += 16u) GSTORE_U(float16, p + c, GLOAD_U(float16, p + c) * inv);
}

// acc_r[16 channels from dc] = sum_{u < n} w[t_r][u] * v[u][dc ..]: the
// block's rows of W V (w: f32 rows of ld columns, zero past each row's
// position; v: rows of head bh, vrs apart), times `mul`, stored as storage_t
// into dst's rows (row_stride apart, from offset `first` of row (b, t)) for
// the rows the block owns.
#define ATTN_WV_DECL(r) float16 acc##r = (float16)(0.0f);
#define ATTN_WV_FMA(r) acc##r = fma((float16)(w_[((size_t)bh * T + row##r) * ld + u]), v, acc##r);
#define ATTN_WV_STORE(r)                                                                       \
    if (ATTN_OWNS(r))                                                                          \
        attn_store16(dst_, ((size_t)b * T + row##r) * stride_ + first_ + dc,                 \
                     min(16u, hs - dc), acc##r * mul_);
#define ATTN_WV(dst, row_stride, first, w, vr, vrs, n, mul)                         \
    {                                                                               \
        __global storage_t *dst_ = (dst);                                           \
        __global const float *w_ = (w), *vr_ = (vr);                                \
        const size_t stride_ = (row_stride), first_ = (first), vrs_ = (vrs);        \
        const uint n_ = (n);                                                        \
        const float mul_ = (mul);                                                   \
        for (uint dc = 0; dc < hs; dc += 16u) {                                     \
            ATTN_LIST(ATTN_WV_DECL)                                                 \
            for (uint u = 0; u < n_; u++) {                                         \
                const float16 v = GLOAD_U(float16, vr_ + (size_t)u * vrs_ + dc);    \
                ATTN_LIST(ATTN_WV_FMA)                                              \
            }                                                                       \
            ATTN_LIST(ATTN_WV_STORE)                                                \
        }                                                                           \
    }

// att and y for a block of query rows: scores against keys 0 .. the
// block's last row, softmax, then y = att v.
__kernel void mpcl_attention_forward_block(__global float *att, __global storage_t *y,
                                           __global const float *q, __global const float *kt,
                                           __global const float *v, uint T, uint Tp, uint C,
                                           uint H, uint hsp, uint ld, float scale, uint items,
                                           uint direct) {
    ATTN_QUERY_BLOCK
    for (uint c = 0; c < width; c += 16u)
        ATTN_SCORES_CHUNK(att, q + ATTN_ROWS_AT(3 * C, 0), ATTN_ROW_STRIDE(3 * C),
                          kt + head_cols, -INFINITY, scale)
    for (uint r = 0; r < ATTN_ROWS && t0 + r < T; r++)
        attn_softmax_row(att + ((size_t)bh * T + t0 + r) * ld, width);
    ATTN_WV(y, C, (size_t)h * hs, att, v + ATTN_ROWS_AT(3 * C, 2), ATTN_ROW_STRIDE(3 * C), keys,
            1.0f)
}

// The backward for a block of query rows: dA = dy v^T into dscore, the
// softmax's backward dscore = att (dA - sum_u att dA) in place, then dq =
// scale dscore k into dqkv's q part.
__kernel void mpcl_attention_backward_query_block(
    __global float *dscore, __global storage_t *dqkv, __global const float *att,
    __global const float *dy, __global const float *vt, __global const float *k, uint T, uint Tp,
    uint C, uint H, uint hsp, uint ld, float scale, uint items, uint direct) {
    ATTN_QUERY_BLOCK
    for (uint c = 0; c < width; c += 16u)
        ATTN_SCORES_CHUNK(dscore, dy + ATTN_ROWS_AT(C, 0), ATTN_ROW_STRIDE(C), vt + head_cols,
                          0.0f, 1.0f)
    for (uint r = 0; r < ATTN_ROWS && t0 + r < T; r++) {
        size_t row = ((size_t)bh * T + t0 + r) * ld;
        float16 dot = (float16)(0.0f);
        for (uint c = 0; c < width; c += 16u)
            dot = fma(GLOAD_U(float16, att + row + c), GLOAD_U(float16, dscore + row + c), dot);
        float total = attn_sum16(dot);
        for (uint c = 0; c < width; c += 16u)
            GSTORE_U(float16, dscore + row + c,
                     GLOAD_U(float16, att + row + c) *
                         (GLOAD_U(float16, dscore + row + c) - total));
    }
    ATTN_WV(dqkv, 3 * C, (size_t)h * hs, dscore, k + ATTN_ROWS_AT(3 * C, 1),
            ATTN_ROW_STRIDE(3 * C), keys, scale)
}

// The backward for a block of key rows u, after the query blocks': dk =
// scale sum_{t >= u} dscore[t][u] q[t] and dv = sum_{t >= u} att[t][u]
// dy[t] into dqkv's k and v parts. Entries above the diagonal in the
// block's first rows are zeros (written by the forward and query blocks).
#define ATTN_KV_DECL(r) float16 dk##r = (float16)(0.0f), dv##r = (float16)(0.0f);
#define ATTN_KV_FMA(r)                                                  \
    dk##r = fma((float16)(dscore[row + row##r]), qv, dk##r);              \
    dv##r = fma((float16)(att[row + row##r]), gv, dv##r);
#define ATTN_KV_STORE(r)                                                                  \
    if (ATTN_OWNS(r)) {                                                                   \
        size_t at = ((size_t)b * T + row##r) * 3 * C + (size_t)h * hs + dc;                 \
        attn_store16(dqkv, at + C, min(16u, hs - dc), dk##r * scale);                     \
        attn_store16(dqkv, at + 2 * (size_t)C, min(16u, hs - dc), dv##r);                 \
    }
__kernel void mpcl_attention_backward_key_block(__global storage_t *dqkv,
                                                __global const float *dscore,
                                                __global const float *att,
                                                __global const float *q,
                                                __global const float *dy, uint T, uint Tp, uint C,
                                                uint H, uint hsp, uint ld, float scale,
                                                uint items, uint direct) {
    ATTN_BLOCK
    ATTN_LIST(ATTN_ROW)
    const size_t head_rows = attn_packed_at(bh, 0, Tp, hsp);
    __global const float *qr = q + ATTN_ROWS_AT(3 * C, 0), *gr = dy + ATTN_ROWS_AT(C, 0);
    const size_t qrs = ATTN_ROW_STRIDE(3 * C), grs = ATTN_ROW_STRIDE(C);
    for (uint dc = 0; dc < hs; dc += 16u) {
        ATTN_LIST(ATTN_KV_DECL)
        for (uint t = t0; t < T; t++) {
            size_t row = ((size_t)bh * T + t) * ld;
            const float16 qv = GLOAD_U(float16, qr + (size_t)t * qrs + dc);
            const float16 gv = GLOAD_U(float16, gr + (size_t)t * grs + dc);
            ATTN_LIST(ATTN_KV_FMA)
        }
        ATTN_LIST(ATTN_KV_STORE)
    }
}
