// The dense losses: a float target per output element (binary cross-entropy
// on logits, mean squared error). Statistics as the softmax cross-entropy's
// (cl/loss.cl's loss_group_reduce and loss_stats_add, the layout of
// cl/abi.h), the gradient fused in the same pass; f32 math, predictions and
// their gradient in the storage dtype, targets f32.
//
// A loss is an element function and one DENSE_LOSS_KERNEL line:
//   NAME_target_ok(t): whether t is a target the loss accepts;
//   NAME_element(z, t, &loss, &metric, &hit, &unit): the loss term of one
//   element, its metric (a real-valued one in metric, a counted one in hit:
//   the other stays 0) and d loss / d z.
// src/compute/losses.c has the matching table row.
//
// One work-group of MPCL_ABI_LOSS_WG items (the host launches exactly one)
// does the whole batch, one row per item at a time, rows strided over the
// items; partial sums per item in row order, then the group's tree: the
// result does not depend on scheduling. A row with a bad target anywhere
// (loss_target_ok false) adds nothing, its gradient row is zero and it
// counts as bad; the first is recorded with its column and the target's
// bits. With write_grad, d_pred[r,c] = unit * scale / (grad_rows * cols):
// the gradient of scale times the mean over the elements (Keras' mean over
// the last axis then over the batch: the same for a fixed number of
// columns), rounded once into the storage dtype.

// Binary cross-entropy on logits: max(z, 0) - z t + log1p(exp(-|z|)), which
// neither overflows nor loses the small terms at large |z|; its derivative
// sigmoid(z) - t, sigmoid from exp(-|z|) <= 1 as well. Binary accuracy
// (threshold 0.5: sigmoid(z) > 0.5 is z > 0) against t > 0.5.
inline int binary_xent_target_ok(float t) {
    return t >= 0.0f && t <= 1.0f; // false for NaN
}
inline void binary_xent_element(float z, float t, float *loss, float *metric, uint *hit,
                                float *unit) {
    const float e = exp(-fabs(z));
    *loss = fmax(z, 0.0f) - z * t + log1p(e);
    *metric = 0.0f;
    *hit = (z > 0.0f) == (t > 0.5f);
    const float sig = z >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    *unit = sig - t;
}

// Mean squared error: (y - t)^2, derivative 2 (y - t); MAE sums |y - t|.
inline int mse_target_ok(float t) {
    return isfinite(t);
}
inline void mse_element(float y, float t, float *loss, float *metric, uint *hit, float *unit) {
    const float d = y - t;
    *loss = d * d;
    *metric = fabs(d);
    *hit = 0u;
    *unit = 2.0f * d;
}

#define DENSE_LOSS_KERNEL(NAME, KIND)                                                             \
    __kernel __attribute__((reqd_work_group_size(MPCL_ABI_LOSS_WG, 1, 1))) void mpcl_##NAME(      \
        __global uint *stats, __global storage_t *d_pred, __global const storage_t *pred,         \
        __global const float *targets, uint rows, uint grad_rows, uint cols,                      \
        __global const float *scale_buf, float scale_value, int use_scale_buf, int write_grad) {  \
        __local float l_loss[MPCL_ABI_LOSS_WG], l_metric[MPCL_ABI_LOSS_WG];                       \
        __local uint l_correct[MPCL_ABI_LOSS_WG], l_valid[MPCL_ABI_LOSS_WG];                      \
        __local uint l_bad[MPCL_ABI_LOSS_WG], l_first[MPCL_ABI_LOSS_WG];                          \
        const uint lid = get_local_id(0);                                                         \
        float g = 0.0f;                                                                           \
        if (write_grad)                                                                           \
            g = (use_scale_buf ? scale_buf[0] : scale_value) / ((float)grad_rows * (float)cols);  \
        float loss = 0.0f, metric = 0.0f;                                                         \
        uint correct = 0, valid = 0, bad = 0, first_bad = UINT_MAX;                               \
        for (uint r = lid; r < rows; r += MPCL_ABI_LOSS_WG) {                                     \
            const uint base = r * cols;                                                           \
            int ok = 1;                                                                           \
            for (uint c = 0; c < cols; c++) ok &= NAME##_target_ok(targets[base + c]);            \
            if (!ok) {                                                                            \
                bad++;                                                                            \
                first_bad = min(first_bad, r);                                                    \
                if (write_grad)                                                                   \
                    for (uint c = 0; c < cols; c++) STORE(d_pred, base + c, 0.0f);                \
                continue;                                                                         \
            }                                                                                     \
            float row_loss = 0.0f, row_metric = 0.0f;                                             \
            for (uint c = 0; c < cols; c++) {                                                     \
                float l, m, u;                                                                    \
                uint h;                                                                           \
                NAME##_element(LOAD(pred, base + c), targets[base + c], &l, &m, &h, &u);          \
                row_loss += l;                                                                    \
                row_metric += m;                                                                  \
                correct += h;                                                                     \
                if (write_grad) STORE(d_pred, base + c, u * g);                                   \
            }                                                                                     \
            loss += row_loss;                                                                     \
            metric += row_metric;                                                                 \
            valid++;                                                                              \
        }                                                                                         \
        l_loss[lid] = loss;                                                                       \
        l_metric[lid] = metric;                                                                   \
        l_correct[lid] = correct;                                                                 \
        l_valid[lid] = valid;                                                                     \
        l_bad[lid] = bad;                                                                         \
        l_first[lid] = first_bad;                                                                 \
        loss_group_reduce(lid, l_loss, l_metric, l_correct, l_valid, l_bad, l_first);             \
        if (lid != 0) return;                                                                     \
        uint bad_col = 0, bad_bits = 0;                                                           \
        if (l_bad[0] != 0) {                                                                      \
            const uint base = l_first[0] * cols;                                                  \
            while (bad_col + 1 < cols && NAME##_target_ok(targets[base + bad_col])) bad_col++;    \
            bad_bits = as_uint(targets[base + bad_col]);                                          \
        }                                                                                         \
        loss_stats_add(stats, KIND, l_loss[0], l_metric[0], l_correct[0], l_valid[0],             \
                       l_valid[0] * cols, l_bad[0], l_first[0], bad_col, bad_bits);               \
    }

DENSE_LOSS_KERNEL(binary_xent, MPCL_ABI_LOSS_BINARY_XENT)
DENSE_LOSS_KERNEL(mse, MPCL_ABI_LOSS_MSE)
