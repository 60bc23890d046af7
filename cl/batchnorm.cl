// Batch normalization over the channels of an [N, C] tensor (an NHWC batch
// reshaped to [B*H*W, C]): one work-group of MPCL_ABI_BATCHNORM_WG items per
// channel; item l takes the rows l, l + WG, ... of its channel. Sums are f32,
// each item's in row order, then a tree in local memory: a fixed order, so
// the results are deterministic, with no atomics. Every item reads and
// writes only its own rows, so an output may share the buffer of the input
// it is computed from (dx and dy).

#define BN_WG MPCL_ABI_BATCHNORM_WG

// The sum (bn_group_sum) or the maximum (bn_group_max) of every item's v,
// in a fixed order; every item gets it.
#define BN_GROUP_REDUCE(NAME, OP)                                                \
    static inline float NAME(__local float *acc, float v) {                      \
        uint lid = get_local_id(0);                                              \
        acc[lid] = v;                                                            \
        barrier(CLK_LOCAL_MEM_FENCE);                                            \
        for (uint half_size = BN_WG / 2; half_size > 0; half_size /= 2) {        \
            if (lid < half_size) acc[lid] = OP(acc[lid], acc[lid + half_size]);  \
            barrier(CLK_LOCAL_MEM_FENCE);                                        \
        }                                                                        \
        float s = acc[0];                                                        \
        barrier(CLK_LOCAL_MEM_FENCE); /* all have read acc[0] before reuse */    \
        return s;                                                                \
    }
#define BN_ADD(a, b) ((a) + (b))
BN_GROUP_REDUCE(bn_group_sum, BN_ADD)
BN_GROUP_REDUCE(bn_group_max, fmax)

// The mean and biased variance of the count values x[first + i stride] in
// two passes (the second sums squares of x - mean, which stays accurate
// when the mean is large against the spread); every item gets them. Batch
// norm's statistics per channel, layer norm's (layernorm.cl) per row.
static inline float2 bn_group_mean_var(__local float *acc, __global const storage_t *x, size_t first,
                                size_t stride, uint count) {
    float s = 0.0f;
    for (uint i = get_local_id(0); i < count; i += BN_WG) s += LOAD(x, first + i * stride);
    float mean = bn_group_sum(acc, s) / (float)count;
    float q = 0.0f;
    for (uint i = get_local_id(0); i < count; i += BN_WG) {
        float d = LOAD(x, first + i * stride) - mean;
        q = fma(d, d, q);
    }
    return (float2)(mean, bn_group_sum(acc, q) / (float)count);
}

// y = gamma (x - mean) inv_std + beta over the item's rows of channel c.
static inline void bn_normalize(__global storage_t *y, __global const storage_t *x, float mean,
                         float inv_std, float gamma, float beta, uint rows, uint cols, uint c) {
    float a = gamma * inv_std;
    for (uint r = get_local_id(0); r < rows; r += BN_WG) {
        size_t i = (size_t)r * cols + c;
        STORE(y, i, fma(LOAD(x, i) - mean, a, beta));
    }
}

// The training forward: mean and biased variance of the channel over the
// rows (bn_group_mean_var); inv_std = 1 / sqrt(var + epsilon); save_mean
// and save_inv_std get them, and the moving averages move towards them by
// 1 - momentum. A kernel of its own, not a
// flag of one forward kernel: with the reductions' barriers under a uniform
// `if (train)`, PoCL 3.1 (LLVM 15) left most rows of y unwritten and the
// moving averages wrong.
__kernel __attribute__((reqd_work_group_size(BN_WG, 1, 1))) void mpcl_batchnorm_forward_train(
    __global storage_t *y, __global const storage_t *x, __global const float *gamma,
    __global const float *beta, __global float *moving_mean, __global float *moving_var,
    __global float *save_mean, __global float *save_inv_std, float momentum, float epsilon,
    uint rows, uint cols) {
    __local float acc[BN_WG];
    uint c = get_group_id(0), lid = get_local_id(0);
    float2 stats = bn_group_mean_var(acc, x, c, cols, rows);
    float mean = stats.x, var = stats.y;
    float inv_std = 1.0f / sqrt(var + epsilon);
    if (lid == 0) {
        save_mean[c] = mean;
        save_inv_std[c] = inv_std;
        moving_mean[c] = momentum * moving_mean[c] + (1.0f - momentum) * mean;
        moving_var[c] = momentum * moving_var[c] + (1.0f - momentum) * var;
    }
    bn_normalize(y, x, mean, inv_std, gamma[c], beta[c], rows, cols, c);
}

// The inference forward: the moving mean and variance.
__kernel __attribute__((reqd_work_group_size(BN_WG, 1, 1))) void mpcl_batchnorm_forward_eval(
    __global storage_t *y, __global const storage_t *x, __global const float *gamma,
    __global const float *beta, __global const float *moving_mean,
    __global const float *moving_var, float epsilon, uint rows, uint cols) {
    uint c = get_group_id(0);
    float inv_std = 1.0f / sqrt(moving_var[c] + epsilon);
    bn_normalize(y, x, moving_mean[c], inv_std, gamma[c], beta[c], rows, cols, c);
}

// d_beta = sum dy, d_gamma = sum dy xhat with xhat = (x - mean) inv_std
// (the forward's saved statistics), rounded into the storage dtype; dx =
// gamma inv_std (dy - d_beta / N - xhat d_gamma / N) from the f32 sums, the
// brief's gamma inv_std / N (N dy - d_beta - xhat d_gamma) without the
// large N dy. dx may be dy.
__kernel __attribute__((reqd_work_group_size(BN_WG, 1, 1))) void mpcl_batchnorm_backward(
    __global storage_t *dx, __global storage_t *d_gamma, __global storage_t *d_beta,
    __global const storage_t *dy, __global const storage_t *x, __global const float *gamma,
    __global const float *save_mean, __global const float *save_inv_std, uint rows, uint cols) {
    __local float acc[BN_WG];
    uint c = get_group_id(0), lid = get_local_id(0);
    float mean = save_mean[c], inv_std = save_inv_std[c];
    float s = 0.0f, t = 0.0f;
    for (uint r = lid; r < rows; r += BN_WG) {
        size_t i = (size_t)r * cols + c;
        float g = LOAD(dy, i);
        s += g;
        t = fma(g, (LOAD(x, i) - mean) * inv_std, t);
    }
    float sum_dy = bn_group_sum(acc, s), sum_dy_xhat = bn_group_sum(acc, t);
    if (lid == 0) {
        STORE(d_beta, c, sum_dy);
        STORE(d_gamma, c, sum_dy_xhat);
    }
    float k = gamma[c] * inv_std, mean_dy = sum_dy / (float)rows;
    float mean_dy_xhat = sum_dy_xhat / (float)rows;
    for (uint r = lid; r < rows; r += BN_WG) {
        size_t i = (size_t)r * cols + c;
        float xhat = (LOAD(x, i) - mean) * inv_std;
        STORE(dx, i, k * (LOAD(dy, i) - mean_dy - xhat * mean_dy_xhat));
    }
}
