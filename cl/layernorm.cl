// Layer normalization over the last axis of an [N, C] tensor (a (T, C) or
// (H, W, C) batch reshaped to [B * positions, C]). The forward and dx take
// one work-group of BN_WG items per row, gamma's and beta's gradients one
// per channel, over the rows. Every reduction is batchnorm.cl's
// bn_group_sum after each item's own sum in index order: f32, a fixed
// order, deterministic, no atomics.

// The forward: per row, mean and biased variance over the C channels
// (batchnorm.cl's two-pass bn_group_mean_var); y = (x - mean) inv_std gamma
// + beta with inv_std = 1 / sqrt(var + epsilon); save_mean and
// save_inv_std keep the row's statistics for the backward.
__kernel __attribute__((reqd_work_group_size(BN_WG, 1, 1))) void mpcl_layernorm_forward(
    __global storage_t *y, __global const storage_t *x, __global const float *gamma,
    __global const float *beta, __global float *save_mean, __global float *save_inv_std,
    float epsilon, uint cols, uint rows) {
    (void)rows; /* one group per row: the row kernels' bound */
    __local float acc[BN_WG];
    uint r = get_group_id(0), lid = get_local_id(0);
    size_t row = (size_t)r * cols;
    float2 stats = bn_group_mean_var(acc, x, row, 1, cols);
    float mean = stats.x, var = stats.y;
    float inv_std = 1.0f / sqrt(var + epsilon);
    if (lid == 0) {
        save_mean[r] = mean;
        save_inv_std[r] = inv_std;
    }
    for (uint c = lid; c < cols; c += BN_WG)
        STORE(y, row + c, fma((LOAD(x, row + c) - mean) * inv_std, gamma[c], beta[c]));
}

// d_beta = sum over the rows of dy, d_gamma = sum of dy xhat with xhat =
// (x - mean) inv_std (the forward's saves), rounded into the storage dtype.
__kernel __attribute__((reqd_work_group_size(BN_WG, 1, 1))) void mpcl_layernorm_backward_params(
    __global storage_t *d_gamma, __global storage_t *d_beta, __global const storage_t *dy,
    __global const storage_t *x, __global const float *save_mean,
    __global const float *save_inv_std, uint rows, uint cols) {
    __local float acc[BN_WG];
    uint c = get_group_id(0), lid = get_local_id(0);
    float s = 0.0f, t = 0.0f;
    for (uint r = lid; r < rows; r += BN_WG) {
        size_t i = (size_t)r * cols + c;
        float g = LOAD(dy, i);
        s += g;
        t = fma(g, (LOAD(x, i) - save_mean[r]) * save_inv_std[r], t);
    }
    float sum_dy = bn_group_sum(acc, s), sum_dy_xhat = bn_group_sum(acc, t);
    if (lid == 0) {
        STORE(d_beta, c, sum_dy);
        STORE(d_gamma, c, sum_dy_xhat);
    }
}

// dx = inv_std (g - mean(g) - xhat mean(g xhat)) per row, with g = dy gamma
// and the means over the row's C channels; with `add`, plus addend's
// element (a skip connection's gradient summed in this pass: `d_in_addend`
// in layer_normalization.c; addend may be dx itself).
__kernel __attribute__((reqd_work_group_size(BN_WG, 1, 1))) void mpcl_layernorm_backward_x(
    __global storage_t *dx, __global const storage_t *dy, __global const storage_t *x,
    __global const float *gamma, __global const float *save_mean,
    __global const float *save_inv_std, uint cols, uint rows, __global const storage_t *addend,
    uint add) {
    (void)rows;
    __local float acc[BN_WG];
    uint r = get_group_id(0), lid = get_local_id(0);
    size_t row = (size_t)r * cols;
    float mean = save_mean[r], inv_std = save_inv_std[r];
    float s = 0.0f, t = 0.0f;
    for (uint c = lid; c < cols; c += BN_WG) {
        float g = LOAD(dy, row + c) * gamma[c];
        s += g;
        t = fma(g, (LOAD(x, row + c) - mean) * inv_std, t);
    }
    float mean_g = bn_group_sum(acc, s) / (float)cols;
    float mean_g_xhat = bn_group_sum(acc, t) / (float)cols;
    for (uint c = lid; c < cols; c += BN_WG) {
        float xhat = (LOAD(x, row + c) - mean) * inv_std;
        float v = inv_std * (LOAD(dy, row + c) * gamma[c] - mean_g - xhat * mean_g_xhat);
        STORE(dx, row + c, add ? v + LOAD(addend, row + c) : v);
    }
}

// The same three on CPU devices (MPCL_NORM=row; layer_normalization.c picks):
// one work-item per row (for gamma's and beta's gradients, a group per 32
// channels, below), each summing eight lanes at a time in index order and
// the lanes in order at the end (common.cl's lanes_sum8). A row of a few hundred
// channels is a few cache lines, less work than a work-group's barriers on
// a CPU. Deterministic as the group kernels, though their sums run in
// another order. The lanes are explicit: a scalar loop per row left PoCL
// to vectorize across rows, a gather per load (the GPT's [2048, 128] rows:
// 205 us forward, 291 us for the parameters' gradients).

// mean and biased variance of a row, two passes; the first sums the
// values less the row's first (shifted data), so that a large common offset
// (a mean of 1e4 over 768 channels) costs no precision in one long sum.
inline float2 ln_row_mean_var(__global const storage_t *x, size_t row, uint cols) {
    uint body = cols & ~7u;
    float shift = LOAD(x, row);
    float8 s8 = (float8)(0.0f);
    for (uint c = 0; c < body; c += 8u) s8 += LOAD8(x, row + c) - shift;
    float s = lanes_sum8(s8);
    for (uint c = body; c < cols; c++) s += LOAD(x, row + c) - shift;
    float mean = shift + s / (float)cols;
    float8 v8 = (float8)(0.0f);
    for (uint c = 0; c < body; c += 8u) {
        float8 d = LOAD8(x, row + c) - mean;
        v8 = fma(d, d, v8);
    }
    float v = lanes_sum8(v8);
    for (uint c = body; c < cols; c++) {
        float d = LOAD(x, row + c) - mean;
        v = fma(d, d, v);
    }
    return (float2)(mean, v / (float)cols);
}

__kernel void mpcl_layernorm_forward_row(__global storage_t *y, __global const storage_t *x,
                                         __global const float *gamma, __global const float *beta,
                                         __global float *save_mean, __global float *save_inv_std,
                                         float epsilon, uint cols, uint rows) {
    uint r = get_global_id(0);
    if (r >= rows) return;
    size_t row = (size_t)r * cols;
    uint body = cols & ~7u;
    float2 stats = ln_row_mean_var(x, row, cols);
    float mean = stats.x, inv_std = 1.0f / sqrt(stats.y + epsilon);
    save_mean[r] = mean;
    save_inv_std[r] = inv_std;
    for (uint c = 0; c < body; c += 8u)
        STORE8(y, row + c,
               fma((LOAD8(x, row + c) - mean) * inv_std, LOAD_FLOAT8(gamma, c),
                   LOAD_FLOAT8(beta, c)));
    for (uint c = body; c < cols; c++)
        STORE(y, row + c, fma((LOAD(x, row + c) - mean) * inv_std, gamma[c], beta[c]));
}

// d_gamma and d_beta on CPUs, in the bias gradient's shape (cl/abi.h's
// MPCL_ABI_BIAS_GRAD_*): a group of LN_PARTS items per LN_COLS (32)
// channels, a 128-byte run of each f32 row; item p sums rows [p per, (p + 1)
// per) in row order, then item 0 adds the parts in order p = 0, 1, ...: a
// fixed order for a given shape, no atomics. An item per eight channels down
// every row took 126 us on a GPT's [2048, 128] f32 on PoCL (Zen 4): one
// dependent chain an item, and each row's line fetched by four items.
#define LN_COLS MPCL_ABI_BIAS_GRAD_COLS
#define LN_PARTS MPCL_ABI_BIAS_GRAD_PARTS
#if LN_COLS != 32
#error "mpcl_layernorm_backward_params_col holds four float8 sums: see cl/abi.h"
#endif
#define LN_CHUNKS(X) X(0) X(1) X(2) X(3)
#define LN_SUMS_DECL(k) float8 s##k = (float8)(0.0f), t##k = (float8)(0.0f);
// Chunk k of row r: channels c0 + 8 k .. + 7 (n of them; whole: n == 8).
#define LN_SUMS_ADD(k, n)                                                                  \
    {                                                                                      \
        const size_t i_ = (size_t)r * cols + c0 + 8u * (k);                                 \
        const float8 g_ = (n) == 8u ? LOAD8(dy, i_) : LOAD8_PART(dy, i_, (n));             \
        const float8 x_ = (n) == 8u ? LOAD8(x, i_) : LOAD8_PART(x, i_, (n));               \
        s##k += g_;                                                                        \
        t##k = fma(g_, (x_ - mean) * inv_std, t##k);                                       \
    }
#define LN_SUMS_WHOLE(k) LN_SUMS_ADD(k, 8u)
#define LN_SUMS_EDGE(k) \
    if (c0 + 8u * (k) < cols) LN_SUMS_ADD(k, min(8u, cols - c0 - 8u * (k)))
#define LN_SUMS_SHARE(k)        \
    part_s[k][p] = s##k;        \
    part_t[k][p] = t##k;
#define LN_SUMS_GATHER(k)       \
    s##k += part_s[k][q];       \
    t##k += part_t[k][q];
#define LN_SUMS_STORE(k)                                                  \
    if (c0 + 8u * (k) < cols) {                                           \
        const uint c_ = c0 + 8u * (k), n_ = min(8u, cols - c_);           \
        if (n_ == 8u) {                                                   \
            STORE8(d_beta, c_, s##k);                                     \
            STORE8(d_gamma, c_, t##k);                                    \
        } else {                                                          \
            STORE8_PART(d_beta, c_, n_, s##k);                            \
            STORE8_PART(d_gamma, c_, n_, t##k);                           \
        }                                                                 \
    }
__kernel __attribute__((reqd_work_group_size(1, LN_PARTS, 1))) void
mpcl_layernorm_backward_params_col(__global storage_t *d_gamma, __global storage_t *d_beta,
                                   __global const storage_t *dy, __global const storage_t *x,
                                   __global const float *save_mean,
                                   __global const float *save_inv_std, uint rows, uint cols) {
    __local float8 part_s[4][LN_PARTS], part_t[4][LN_PARTS];
    const uint c0 = get_global_id(0) * LN_COLS, p = get_local_id(1);
    const uint per = (rows + LN_PARTS - 1) / LN_PARTS;
    const uint r0 = min(p * per, rows), r1 = min(r0 + per, rows);
    LN_CHUNKS(LN_SUMS_DECL)
    if (c0 + LN_COLS <= cols) {
        for (uint r = r0; r < r1; r++) {
            const float mean = save_mean[r], inv_std = save_inv_std[r];
            LN_CHUNKS(LN_SUMS_WHOLE)
        }
    } else if (c0 < cols) {
        for (uint r = r0; r < r1; r++) {
            const float mean = save_mean[r], inv_std = save_inv_std[r];
            LN_CHUNKS(LN_SUMS_EDGE)
        }
    }
    LN_CHUNKS(LN_SUMS_SHARE)
    barrier(CLK_LOCAL_MEM_FENCE);
    if (p != 0 || c0 >= cols) return;
    for (uint q = 1; q < LN_PARTS; q++) {
        LN_CHUNKS(LN_SUMS_GATHER)
    }
    LN_CHUNKS(LN_SUMS_STORE)
}

__kernel void mpcl_layernorm_backward_x_row(__global storage_t *dx, __global const storage_t *dy,
                                            __global const storage_t *x,
                                            __global const float *gamma,
                                            __global const float *save_mean,
                                            __global const float *save_inv_std, uint cols,
                                            uint rows, __global const storage_t *addend,
                                            uint add) {
    uint r = get_global_id(0);
    if (r >= rows) return;
    size_t row = (size_t)r * cols;
    uint body = cols & ~7u;
    float mean = save_mean[r], inv_std = save_inv_std[r];
    float8 s8 = (float8)(0.0f), t8 = (float8)(0.0f);
    for (uint c = 0; c < body; c += 8u) {
        float8 g = LOAD8(dy, row + c) * LOAD_FLOAT8(gamma, c);
        s8 += g;
        t8 = fma(g, (LOAD8(x, row + c) - mean) * inv_std, t8);
    }
    float s = lanes_sum8(s8), t = lanes_sum8(t8);
    for (uint c = body; c < cols; c++) {
        float g = LOAD(dy, row + c) * gamma[c];
        s += g;
        t = fma(g, (LOAD(x, row + c) - mean) * inv_std, t);
    }
    float mean_g = s / (float)cols, mean_g_xhat = t / (float)cols;
    for (uint c = 0; c < body; c += 8u) {
        float8 xhat = (LOAD8(x, row + c) - mean) * inv_std;
        float8 v = inv_std * (LOAD8(dy, row + c) * LOAD_FLOAT8(gamma, c) - mean_g -
                              xhat * mean_g_xhat);
        STORE8(dx, row + c, add ? v + LOAD8(addend, row + c) : v);
    }
    for (uint c = body; c < cols; c++) {
        float xhat = (LOAD(x, row + c) - mean) * inv_std;
        float v = inv_std * (LOAD(dy, row + c) * gamma[c] - mean_g - xhat * mean_g_xhat);
        STORE(dx, row + c, add ? v + LOAD(addend, row + c) : v);
    }
}
