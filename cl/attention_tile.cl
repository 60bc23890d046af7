// Causal self-attention for GPUs (the `tile` layout; attention.cl's kernels,
// a work-item per row, are the `row` layout; the layer picks,
// src/nn/causal_self_attention.c). Same inputs and outputs as attention.cl,
// in f32 arithmetic; the products run per head (b, h) as a GPU GEMM runs
// them:
//
//   forward   att = scale q k^T (t' <= t), softmax of att's rows, y = att v
//   backward  dscore = dy v^T, dscore = att (dscore - rowsum(att dscore)),
//             dq = scale dscore k, dk = scale dscore^T q, dv = att^T dy
//
// A work-group of ITEMS x ITEMS work-items computes a TILE x TILE tile of a
// product, each item PER x PER elements (rows ly + ITEMS i, columns lx +
// ITEMS j of the tile), over SLICE-wide slices of the sum staged in local
// memory: each operand element is read from global memory once per tile,
// where a work-item per row reads every key once per query. Tiles wholly
// above the diagonal are skipped. The softmax and its backward take a
// work-group per row (batchnorm.cl's reductions).
//
// Operands in the storage dtype (qkv's q, k and v parts, y, dy, dqkv's
// parts) hold head h of position (b, t) at row b T + t, columns off + h hs
// .. off + (h + 1) hs - 1, rows `ld` apart. The f32 ones (att, dscore) hold
// row (b, h, t) at row (b H + h) T + t, `ld` apart; only the entries t' <=
// t are written or read. Every sum is f32 in index order, one work-item per
// output element: deterministic, no atomics.

#define AT_TILE MPCL_ABI_ATTN_TILE
#define AT_ITEMS MPCL_ABI_ATTN_TILE_ITEMS
#define AT_PER (AT_TILE / AT_ITEMS)
#define AT_SLICE 16
#define AT_LD (AT_TILE + 1) // a slice's row in local memory, padded against bank conflicts
#if AT_PER * AT_ITEMS != AT_TILE
#error "attention_tile.cl: the tile must be a whole number of items wide (cl/abi.h)"
#endif

typedef __local float at_slice[AT_SLICE][AT_LD];

// The group's tile: its head bh, its first row m0 (a position) and first
// column n0, from a grid of ceil(columns / TILE) x ceil(T / TILE) x heads
// groups (the heads folded into the second dimension).
typedef struct at_tile {
    uint bh, m0, n0;
} at_tile;

static inline at_tile at_tile_of_group(uint T) {
    uint tiles = (T + AT_TILE - 1u) / AT_TILE;
    at_tile g = {get_group_id(1) / tiles, get_group_id(1) % tiles * AT_TILE,
                 get_group_id(0) * AT_TILE};
    return g;
}

// The first element of head h of a storage operand at position (b, 0).
static inline size_t at_head_at(uint bh, uint H, uint T, uint ld, uint off, uint hs) {
    return (size_t)(bh / H) * T * ld + off + (size_t)(bh % H) * hs;
}

static inline uint at_local_id(void) {
    return get_local_id(1) * AT_ITEMS + get_local_id(0);
}

// s[k][i] = x[r0 + i][k0 + k] of the storage matrix at `base` (rows ld
// apart), zero past `rows` rows or `depth` columns. Consecutive items read
// consecutive k.
static inline void at_load_rows(at_slice s, __global const storage_t *x, size_t base, uint ld,
                                uint r0, uint rows, uint k0, uint depth) {
    for (uint e = at_local_id(); e < AT_TILE * AT_SLICE; e += AT_ITEMS * AT_ITEMS) {
        uint i = e / AT_SLICE, k = e % AT_SLICE, r = r0 + i, c = k0 + k;
        s[k][i] = r < rows && c < depth ? LOAD(x, base + (size_t)r * ld + c) : 0.0f;
    }
}

// s[k][j] = x[k0 + k][c0 + j], zero past `rows` rows or `cols` columns.
// Consecutive items read consecutive j.
static inline void at_load_cols(at_slice s, __global const storage_t *x, size_t base, uint ld,
                                uint k0, uint rows, uint c0, uint cols) {
    for (uint e = at_local_id(); e < AT_TILE * AT_SLICE; e += AT_ITEMS * AT_ITEMS) {
        uint k = e / AT_TILE, j = e % AT_TILE, r = k0 + k, c = c0 + j;
        s[k][j] = r < rows && c < cols ? LOAD(x, base + (size_t)r * ld + c) : 0.0f;
    }
}

// s[k][i] = p[r0 + i][k0 + k] (transposed: p[k0 + k][r0 + i]) of one
// head's f32 probabilities (or score gradients) from row `base`, `ld`
// apart: zero above the diagonal (whose entries were never written) and
// past T.
static inline void at_load_probs(at_slice s, __global const float *p, size_t base, uint ld,
                                 uint r0, uint k0, uint T, uint transposed) {
    for (uint e = at_local_id(); e < AT_TILE * AT_SLICE; e += AT_ITEMS * AT_ITEMS) {
        uint i = transposed ? e % AT_TILE : e / AT_SLICE;
        uint k = transposed ? e / AT_TILE : e % AT_SLICE;
        uint t = transposed ? k0 + k : r0 + i, u = transposed ? r0 + i : k0 + k;
        s[k][i] = u <= t && t < T ? p[base + (size_t)t * ld + u] : 0.0f;
    }
}

// acc[i][j] += a[k][ly + ITEMS i] b[k][lx + ITEMS j] for each k in order,
// by the items with an element in the tile's first `rows` rows and `cols`
// columns (the others' sums would be thrown away: a tile of a short
// sequence or a small head is mostly such items).
static inline void at_multiply(float acc[AT_PER][AT_PER], at_slice a, at_slice b, uint rows,
                               uint cols) {
    uint lx = get_local_id(0), ly = get_local_id(1);
    if (ly >= rows || lx >= cols) return;
    for (uint k = 0; k < AT_SLICE; k++) {
        float av[AT_PER], bv[AT_PER];
#pragma unroll
        for (uint i = 0; i < AT_PER; i++) av[i] = a[k][ly + AT_ITEMS * i];
#pragma unroll
        for (uint j = 0; j < AT_PER; j++) bv[j] = b[k][lx + AT_ITEMS * j];
#pragma unroll
        for (uint i = 0; i < AT_PER; i++)
#pragma unroll
            for (uint j = 0; j < AT_PER; j++) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
    }
}

// s = alpha a b^T for each head, t' <= t only: a and b are storage
// operands (q and k, or dy and v), s is att or dscore [B H T, ld].
__kernel __attribute__((reqd_work_group_size(AT_ITEMS, AT_ITEMS, 1))) void
mpcl_attention_scores_tile(__global float *s, __global const storage_t *a, uint a_ld, uint a_off,
                           __global const storage_t *b, uint b_ld, uint b_off, uint T, uint C,
                           uint H, uint ld, float alpha) {
    __local float as[AT_SLICE][AT_LD], bs[AT_SLICE][AT_LD];
    at_tile g = at_tile_of_group(T);
    if (g.n0 > g.m0 + AT_TILE - 1u) return; // above the diagonal: the whole group leaves
    uint hs = C / H;
    size_t a_base = at_head_at(g.bh, H, T, a_ld, a_off, hs);
    size_t b_base = at_head_at(g.bh, H, T, b_ld, b_off, hs);
    float acc[AT_PER][AT_PER] = {{0.0f}};
    for (uint k0 = 0; k0 < hs; k0 += AT_SLICE) {
        at_load_rows(as, a, a_base, a_ld, g.m0, T, k0, hs);
        at_load_rows(bs, b, b_base, b_ld, g.n0, T, k0, hs);
        barrier(CLK_LOCAL_MEM_FENCE);
        at_multiply(acc, as, bs, T - g.m0, T - g.n0);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    uint lx = get_local_id(0), ly = get_local_id(1);
#pragma unroll
    for (uint i = 0; i < AT_PER; i++) {
        uint t = g.m0 + ly + AT_ITEMS * i;
        if (t >= T) break;
        __global float *row = s + ((size_t)g.bh * T + t) * ld;
#pragma unroll
        for (uint j = 0; j < AT_PER; j++) {
            uint u = g.n0 + lx + AT_ITEMS * j;
            if (u <= t) row[u] = acc[i][j] * alpha;
        }
    }
}

// y = alpha p x for each head (transposed = 0: row t of y sums p[t][u] x[u]
// over u <= t) or alpha p^T x (1: row u sums p[t][u] x[t] over t >= u): p
// is att or dscore, x and y storage operands [T, hs] per head.
__kernel __attribute__((reqd_work_group_size(AT_ITEMS, AT_ITEMS, 1))) void
mpcl_attention_mix_tile(__global storage_t *y, uint y_ld, uint y_off, __global const float *p,
                        __global const storage_t *x, uint x_ld, uint x_off, uint T, uint C,
                        uint H, uint ld, float alpha, uint transposed) {
    __local float as[AT_SLICE][AT_LD], bs[AT_SLICE][AT_LD];
    at_tile g = at_tile_of_group(T);
    uint hs = C / H;
    size_t p_base = (size_t)g.bh * T * ld, x_base = at_head_at(g.bh, H, T, x_ld, x_off, hs);
    // The sum's range for the tile's rows m0 .. m0 + TILE - 1.
    uint first = transposed ? g.m0 : 0u, end = transposed ? T : min(T, g.m0 + AT_TILE);
    float acc[AT_PER][AT_PER] = {{0.0f}};
    for (uint k0 = first; k0 < end; k0 += AT_SLICE) {
        at_load_probs(as, p, p_base, ld, g.m0, k0, T, transposed);
        at_load_cols(bs, x, x_base, x_ld, k0, T, g.n0, hs);
        barrier(CLK_LOCAL_MEM_FENCE);
        at_multiply(acc, as, bs, T - g.m0, hs - g.n0);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    size_t y_base = at_head_at(g.bh, H, T, y_ld, y_off, hs);
    uint lx = get_local_id(0), ly = get_local_id(1);
#pragma unroll
    for (uint i = 0; i < AT_PER; i++) {
        uint r = g.m0 + ly + AT_ITEMS * i;
        if (r >= T) break;
#pragma unroll
        for (uint j = 0; j < AT_PER; j++) {
            uint c = g.n0 + lx + AT_ITEMS * j;
            if (c < hs) STORE(y, y_base + (size_t)r * y_ld + c, acc[i][j] * alpha);
        }
    }
}

// The softmax of row (b, h, t) of att in place, entries t' <= t: less the
// row's maximum (exp never overflows). A work-group per row.
__kernel __attribute__((reqd_work_group_size(BN_WG, 1, 1))) void
mpcl_attention_softmax_tile(__global float *att, uint T, uint ld) {
    __local float acc[BN_WG];
    uint row = get_group_id(0), t = row % T, lid = get_local_id(0);
    __global float *p = att + (size_t)row * ld;
    float m = -INFINITY;
    for (uint u = lid; u <= t; u += BN_WG) m = fmax(m, p[u]);
    m = bn_group_max(acc, m);
    float sum = 0.0f;
    for (uint u = lid; u <= t; u += BN_WG) {
        p[u] = exp(p[u] - m);
        sum += p[u];
    }
    float inv = 1.0f / bn_group_sum(acc, sum);
    for (uint u = lid; u <= t; u += BN_WG) p[u] *= inv;
}

// The softmax's backward of row (b, h, t): dscore (holding dA = dy v^T)
// becomes att (dA - sum_u att[u] dA[u]). A work-group per row.
__kernel __attribute__((reqd_work_group_size(BN_WG, 1, 1))) void
mpcl_attention_softmax_backward_tile(__global float *dscore, __global const float *att, uint T,
                                     uint ld) {
    __local float acc[BN_WG];
    uint row = get_group_id(0), t = row % T, lid = get_local_id(0);
    __global float *ds = dscore + (size_t)row * ld;
    __global const float *p = att + (size_t)row * ld;
    float dot = 0.0f;
    for (uint u = lid; u <= t; u += BN_WG) dot = fma(p[u], ds[u], dot);
    dot = bn_group_sum(acc, dot);
    for (uint u = lid; u <= t; u += BN_WG) ds[u] = p[u] * (ds[u] - dot);
}
