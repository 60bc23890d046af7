// The dense losses: a float target per output element (binary cross-entropy
// on logits, mean squared error). Statistics as the softmax cross-entropy's
// (cl/loss.cl's loss_group_reduce and loss_stats_add, the layout of
// cl/abi.h), the gradient fused in the same pass; f32 math, predictions and
// their gradient in the storage dtype, targets f32.
//
// A loss is two functions on eight elements at a time (float8, so that
// exp and log run as vector calls) and one DENSE_LOSS_KERNEL line:
//   NAME_target_ok(t): lanes (-1) whose target the loss accepts;
//   NAME_element(z, t, &loss, &metric, &hit, &unit): the loss terms, their
//   metric (a real-valued one in metric, a counted one as 0/1 in hit: the
//   other stays 0) and d loss / d z.
// src/compute/losses.c has the matching table row.
//
// One work-group of MPCL_ABI_LOSS_WG items (the host launches exactly one)
// does the whole batch, one row per item at a time, rows strided over the
// items, eight columns at a time (the tail of a row repeats its last
// element in the unused lanes, which are never counted or stored); partial
// sums per item and lane in a fixed order, the lanes added in order, then
// the group's tree: the result does not depend on scheduling. A row with a
// bad target anywhere adds nothing, its gradient row is zero and it counts
// as bad; the first is recorded with its column and the target's bits. With
// write_grad, d_pred[r,c] = unit * scale / (grad_rows * cols): the gradient
// of scale times the mean over the elements (Keras' mean over the last axis
// then over the batch: the same for a fixed number of columns), rounded
// once into the storage dtype. Element by element (a scalar exp and log1p
// each), binary cross-entropy of a 128x784 f32 batch took 11 ms a call on
// PoCL (two shared cores); eight at a time, 0.24 ms.

// Binary cross-entropy on logits: max(z, 0) - z t + log1p(exp(-|z|)), which
// neither overflows nor loses the small terms at large |z|; its derivative
// sigmoid(z) - t, sigmoid from exp(-|z|) <= 1 as well. Binary accuracy
// (threshold 0.5: sigmoid(z) > 0.5 is z > 0) against t > 0.5.
static inline int8 binary_xent_target_ok(float8 t) {
    return (t >= 0.0f) & (t <= 1.0f); // 0 for NaN
}
static inline void binary_xent_element(float8 z, float8 t, float8 *loss, float8 *metric, float8 *hit,
                                float8 *unit) {
    const float8 e = exp(-fabs(z));
    *loss = fmax(z, 0.0f) - z * t + log1p(e);
    *metric = 0.0f;
    *hit = select((float8)0.0f, (float8)1.0f, (z > 0.0f) == (t > 0.5f));
    *unit = select(e / (1.0f + e), 1.0f / (1.0f + e), z >= 0.0f) - t;
}

// Mean squared error: (y - t)^2, derivative 2 (y - t); MAE sums |y - t|.
static inline int8 mse_target_ok(float8 t) {
    return isfinite(t);
}
static inline void mse_element(float8 y, float8 t, float8 *loss, float8 *metric, float8 *hit,
                        float8 *unit) {
    const float8 d = y - t;
    *loss = d * d;
    *metric = fabs(d);
    *hit = 0.0f;
    *unit = 2.0f * d;
}

// p[i .. i+n-1] (1 <= n <= 8) as float8, the lanes from n on repeating
// p[i+n-1]; targets are f32 whatever the storage.
#define DENSE_LOAD8(p, i, n) ((n) == 8u ? LOAD8((p), (i)) : LOAD8_PART((p), (i), (n)))
#define DENSE_LOAD8_F32(p, i, n) \
    ((n) == 8u ? LOAD_FLOAT8((p), (i)) : LOAD8_PART_WITH(LOAD_FLOAT, (p), (i), (n)))

// Stores lanes 0 .. n-1 of v at p[i ..]: a whole vector with STORE8, a
// tail one by one from a private array (STORE8_PART and cl/loss.cl's
// LOSS_STORE8_PART of a tail here crashed Oclgrind 21.10's --uninitialized
// check).
static inline void dense_store8(__global storage_t *p, uint i, uint n, float8 v) {
    if (n == 8u) {
        STORE8(p, i, v);
        return;
    }
    float a[8];
    vstore8(v, 0, a);
    for (uint k = 0; k < n; k++) STORE(p, i + k, a[k]);
}


#define DENSE_LOSS_KERNEL(NAME, KIND)                                                             \
    __kernel __attribute__((reqd_work_group_size(MPCL_ABI_LOSS_WG, 1, 1))) void mpcl_##NAME(      \
        __global uint *stats, __global storage_t *d_pred, __global const storage_t *pred,         \
        __global const float *targets, uint rows, uint grad_rows, uint cols,                      \
        __global const float *scale_buf, float scale_value, int use_scale_buf, int write_grad,   \
        __global uint *partials, uint row0, uint ends_call) {                                     \
        __local float l_loss[MPCL_ABI_LOSS_WG], l_metric[MPCL_ABI_LOSS_WG];                       \
        __local uint l_correct[MPCL_ABI_LOSS_WG], l_valid[MPCL_ABI_LOSS_WG];                      \
        __local uint l_bad[MPCL_ABI_LOSS_WG], l_first[MPCL_ABI_LOSS_WG];                          \
        const uint lid = get_local_id(0);                                                         \
        const uint8 lane = (uint8)(0, 1, 2, 3, 4, 5, 6, 7);                                       \
        float g = 0.0f;                                                                           \
        if (write_grad)                                                                           \
            g = (use_scale_buf ? scale_buf[0] : scale_value) / ((float)grad_rows * (float)cols);  \
        float8 loss = 0.0f, metric = 0.0f, hits = 0.0f;                                           \
        uint valid = 0, bad = 0, first_bad = UINT_MAX;                                            \
        const uint first = get_group_id(0) * MPCL_ABI_LOSS_GROUP_ROWS;                            \
        const uint end = min(rows, first + MPCL_ABI_LOSS_GROUP_ROWS);                             \
        for (uint r = first + lid; r < end; r += MPCL_ABI_LOSS_WG) {                              \
            const uint base = r * cols;                                                           \
            int8 ok = -1;                                                                         \
            for (uint c = 0; c < cols; c += 8u)                                                   \
                ok &= NAME##_target_ok(DENSE_LOAD8_F32(targets, base + c, min(8u, cols - c)));    \
            if (!all(ok)) {                                                                       \
                bad++;                                                                            \
                first_bad = min(first_bad, r);                                                    \
                if (write_grad)                                                                   \
                    for (uint c = 0; c < cols; c += 8u)                                           \
                        dense_store8(d_pred, base + c, min(8u, cols - c), (float8)0.0f);          \
                continue;                                                                         \
            }                                                                                     \
            for (uint c = 0; c < cols; c += 8u) {                                                 \
                const uint n = min(8u, cols - c);                                                 \
                const int8 live = lane < n;                                                       \
                float8 l, m, h, u;                                                                \
                NAME##_element(DENSE_LOAD8(pred, base + c, n),                                    \
                               DENSE_LOAD8_F32(targets, base + c, n), &l, &m, &h, &u);            \
                loss += select((float8)0.0f, l, live);                                            \
                metric += select((float8)0.0f, m, live);                                          \
                hits += select((float8)0.0f, h, live);                                            \
                if (write_grad) dense_store8(d_pred, base + c, n, u * g);                         \
            }                                                                                     \
            valid++;                                                                              \
        }                                                                                         \
        l_loss[lid] = lanes_sum8(loss);                                                           \
        l_metric[lid] = lanes_sum8(metric);                                                       \
        l_correct[lid] = (uint)lanes_sum8(hits);                                                  \
        l_valid[lid] = valid;                                                                     \
        l_bad[lid] = bad;                                                                         \
        l_first[lid] = first_bad;                                                                 \
        loss_group_reduce(lid, l_loss, l_metric, l_correct, l_valid, l_bad, l_first);             \
        if (lid != 0) return;                                                                     \
        uint bad_col = 0, bad_bits = 0;                                                           \
        if (l_bad[0] != 0) {                                                                      \
            const uint base = l_first[0] * cols;                                                  \
            while (bad_col + 1 < cols && NAME##_target_ok((float8)targets[base + bad_col]).s0)    \
                bad_col++;                                                                        \
            bad_bits = as_uint(targets[base + bad_col]);                                          \
        }                                                                                         \
        loss_group_out(stats, partials, row0, ends_call, KIND, l_loss[0], l_metric[0],            \
                       l_correct[0], l_valid[0], l_valid[0] * cols, l_bad[0], l_first[0], bad_col, \
                       bad_bits);                                                                 \
    }

DENSE_LOSS_KERNEL(binary_xent, MPCL_ABI_LOSS_BINARY_XENT)
DENSE_LOSS_KERNEL(mse, MPCL_ABI_LOSS_MSE)
