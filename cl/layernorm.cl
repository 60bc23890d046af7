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

// The same on CPU devices (MPCL_NORM=row; layer_normalization.c picks): the
// forward one work-item per row, the backward an item per block of rows,
// each summing eight lanes at a time in index order and the lanes in order
// at the end (common.cl's lanes_sum8). A row of a few hundred
// channels is a few cache lines, less work than a work-group's barriers on
// a CPU. Deterministic as the group kernels, though their sums run in
// another order. The lanes are explicit: a scalar loop per row left PoCL
// to vectorize across rows, a gather per load (the GPT's [2048, 128] rows:
// 205 us forward, 291 us for the parameters' gradients).

// mean and biased variance of a row, two passes; the first sums the
// values less the row's first (shifted data), so that a large common offset
// (a mean of 1e4 over 768 channels) costs no precision in one long sum.
static inline float2 ln_row_mean_var(__global const storage_t *x, size_t row, uint cols) {
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

// dx (with `want_dx`) and gamma's and beta's gradients in parts, on CPUs:
// one pass over dy and x. An item per MPCL_ABI_LN_BLOCK_ROWS rows, each row
// in turn: its two sums for dx (of g = dy gamma and of g xhat), then dx,
// eight channels at a time, while adding dy and dy xhat into the item's
// column sums, partials[item] ([2, cols]: dy's, then dy xhat's; a 2 cols
// floats run that stays in L1, as the row does between its two passes).
// mpcl_layernorm_params_sum adds the items' partials in item order: a fixed
// order for a given shape, no atomics, and the same sums with or without
// dx. dx may be dy: each element is read before it is written. With `add`,
// plus addend's element (a skip connection's gradient summed in this pass:
// `d_in_addend` in layer_normalization.c; addend may be dx itself).
//
// dx by an item per row and the sums by a group per 32 channels (the rows in
// parts) read dy and x twice: 136-153 us together in the GPT's step ([2048,
// 128] f32, PoCL, Zen 4, two threads), against 106-140 us this way with
// the sum. Each item going down its block eight channels at a time (the
// sums in registers, every row's dx sums kept first) took 181-210 us.
#define LN_BLOCK MPCL_ABI_LN_BLOCK_ROWS
__kernel void mpcl_layernorm_backward_rows(__global storage_t *dx, __global float *partials,
                                           __global const storage_t *dy,
                                           __global const storage_t *x,
                                           __global const float *gamma,
                                           __global const float *save_mean,
                                           __global const float *save_inv_std, uint cols,
                                           uint rows, __global const storage_t *addend, uint add,
                                           uint want_dx) {
    uint item = get_global_id(0), r0 = item * LN_BLOCK;
    if (r0 >= rows) return;
    uint r1 = min(r0 + LN_BLOCK, rows), body = cols & ~7u;
    __global float *part_dy = partials + (size_t)item * 2 * cols, *part_dy_xhat = part_dy + cols;
    for (uint c = 0; c < cols; c++) part_dy[c] = part_dy_xhat[c] = 0.0f;
    for (uint r = r0; r < r1; r++) {
        size_t row = (size_t)r * cols;
        float mean = save_mean[r], inv_std = save_inv_std[r], mean_g = 0.0f, mean_gx = 0.0f;
        if (want_dx) {
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
            mean_g = s / (float)cols;
            mean_gx = t / (float)cols;
        }
        for (uint c = 0; c < body; c += 8u) {
            float8 g = LOAD8(dy, row + c), xhat = (LOAD8(x, row + c) - mean) * inv_std;
            GSTORE_U(float8, part_dy + c, GLOAD_U(float8, part_dy + c) + g);
            GSTORE_U(float8, part_dy_xhat + c, fma(g, xhat, GLOAD_U(float8, part_dy_xhat + c)));
            if (want_dx) {
                float8 v = inv_std * (g * LOAD_FLOAT8(gamma, c) - mean_g - xhat * mean_gx);
                STORE8(dx, row + c, add ? v + LOAD8(addend, row + c) : v);
            }
        }
        for (uint c = body; c < cols; c++) {
            float g = LOAD(dy, row + c), xhat = (LOAD(x, row + c) - mean) * inv_std;
            part_dy[c] += g;
            part_dy_xhat[c] = fma(g, xhat, part_dy_xhat[c]);
            if (want_dx) {
                float v = inv_std * (g * gamma[c] - mean_g - xhat * mean_gx);
                STORE(dx, row + c, add ? v + LOAD(addend, row + c) : v);
            }
        }
    }
}

// d_beta and d_gamma from mpcl_layernorm_backward_rows' partials ([items,
// 2, cols] f32): eight channels an item, the parts added in item order,
// rounded once into the storage dtype.
__kernel void mpcl_layernorm_params_sum(__global storage_t *d_gamma, __global storage_t *d_beta,
                                        __global const float *partials, uint items, uint cols) {
    uint c = get_global_id(0) * 8u;
    if (c >= cols) return;
    uint n = min(8u, cols - c);
    size_t stride = 2 * (size_t)cols;
    if (n == 8u) {
        float8 s = (float8)(0.0f), t = (float8)(0.0f);
        for (uint p = 0; p < items; p++) {
            s += GLOAD_U(float8, partials + p * stride + c);
            t += GLOAD_U(float8, partials + p * stride + cols + c);
        }
        STORE8(d_beta, c, s);
        STORE8(d_gamma, c, t);
    } else {
        for (uint k = c; k < c + n; k++) {
            float s = 0.0f, t = 0.0f;
            for (uint p = 0; p < items; p++) {
                s += partials[p * stride + k];
                t += partials[p * stride + cols + k];
            }
            STORE(d_beta, k, s);
            STORE(d_gamma, k, t);
        }
    }
}
