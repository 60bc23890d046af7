// Softmax cross-entropy with integer labels: loss statistics accumulated on
// the device and, fused in the same pass, the gradient of the scaled mean loss.
// Always f32 math; logits and their gradient in the storage dtype.

// One work-group of MPCL_ABI_LOSS_WG items (cl/abi.h; the host launches
// exactly one) does the whole batch (rows strided over the items) and then
// reduces its partial sums in local memory, so that the statistics are
// updated by a single work-item: no float atomics, and the result does not
// depend on scheduling. A batch is at most a few thousand rows of a few
// thousand classes, so one work-group is enough.
//
// logits, d_logits: [rows, classes]. labels: [rows] int. stats: 32-bit words
// at the MPCL_ABI_XENT_STAT_* offsets of cl/abi.h, which ops.c reads: the
// loss sum as a float with its Kahan compensation, the rest uints. With
// write_grad, d_logits[r,c] = (p[r,c] - (c == label)) * scale / grad_rows
// (grad_rows = rows, or a data-parallel replica's global batch), where
// scale is scale_buf[0] when use_scale_buf and scale_value otherwise; without
// it d_logits is not touched (and may be any buffer).
// A label outside [0, classes) counts as bad: the row adds no loss, its
// gradient row is zero, and the first bad (call, row, label) is recorded.
__kernel __attribute__((reqd_work_group_size(MPCL_ABI_LOSS_WG, 1, 1))) void mpcl_softmax_xent(
    __global uint *stats, __global storage_t *d_logits, __global const storage_t *logits,
    __global const int *labels, uint rows, uint grad_rows, uint classes, __global const float *scale_buf,
    float scale_value, int use_scale_buf, int write_grad) {
    __local float l_loss[MPCL_ABI_LOSS_WG];
    __local uint l_correct[MPCL_ABI_LOSS_WG], l_valid[MPCL_ABI_LOSS_WG];
    __local uint l_bad[MPCL_ABI_LOSS_WG], l_first[MPCL_ABI_LOSS_WG];
    const uint lid = get_local_id(0);

    float g = 0.0f;
    if (write_grad) g = (use_scale_buf ? scale_buf[0] : scale_value) / (float)grad_rows;

    float loss = 0.0f;
    uint correct = 0, valid = 0, bad = 0, first_bad = UINT_MAX;
    for (uint r = lid; r < rows; r += MPCL_ABI_LOSS_WG) {
        const size_t base = (size_t)r * classes;
        const int label = labels[r];
        const bool ok = label >= 0 && (uint)label < classes;
        // The first maximum is the prediction; subtracting it keeps exp() <= 1.
        float m = -INFINITY;
        uint arg = 0;
        for (uint c = 0; c < classes; c++) {
            float v = LOAD(logits, base + c);
            if (v > m) {
                m = v;
                arg = c;
            }
        }
        float s = 0.0f;
        for (uint c = 0; c < classes; c++) s += exp(LOAD(logits, base + c) - m);
        if (ok) {
            // -log p[label] = (m - z[label]) + log(s), both terms >= 0.
            loss += (m - LOAD(logits, base + (uint)label)) + log(s);
            correct += arg == (uint)label;
            valid++;
        } else {
            bad++;
            first_bad = min(first_bad, r);
        }
        if (write_grad) {
            const float inv = 1.0f / s;
            for (uint c = 0; c < classes; c++) {
                float p = exp(LOAD(logits, base + c) - m) * inv;
                float d = ok ? (p - (c == (uint)label ? 1.0f : 0.0f)) * g : 0.0f;
                STORE(d_logits, base + c, d);
            }
        }
    }

    l_loss[lid] = loss;
    l_correct[lid] = correct;
    l_valid[lid] = valid;
    l_bad[lid] = bad;
    l_first[lid] = first_bad;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint half_n = MPCL_ABI_LOSS_WG / 2; half_n > 0; half_n /= 2) {
        if (lid < half_n) {
            l_loss[lid] += l_loss[lid + half_n];
            l_correct[lid] += l_correct[lid + half_n];
            l_valid[lid] += l_valid[lid + half_n];
            l_bad[lid] += l_bad[lid + half_n];
            l_first[lid] = min(l_first[lid], l_first[lid + half_n]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid != 0) return;

    // Kahan summation: the loss sum of an epoch stays accurate in f32.
    float sum = as_float(stats[MPCL_ABI_XENT_STAT_LOSS]);
    float y = l_loss[0] - as_float(stats[MPCL_ABI_XENT_STAT_COMP]);
    float t = sum + y;
    stats[MPCL_ABI_XENT_STAT_COMP] = as_uint((t - sum) - y);
    stats[MPCL_ABI_XENT_STAT_LOSS] = as_uint(t);
    stats[MPCL_ABI_XENT_STAT_CORRECT] += l_correct[0];
    stats[MPCL_ABI_XENT_STAT_SAMPLES] += l_valid[0];
    if (l_bad[0] != 0 && stats[MPCL_ABI_XENT_STAT_BAD] == 0) {
        stats[MPCL_ABI_XENT_STAT_BAD_CALL] = stats[MPCL_ABI_XENT_STAT_CALLS];
        stats[MPCL_ABI_XENT_STAT_BAD_ROW] = l_first[0];
        stats[MPCL_ABI_XENT_STAT_BAD_LABEL] = (uint)labels[l_first[0]];
    }
    stats[MPCL_ABI_XENT_STAT_BAD] += l_bad[0];
    stats[MPCL_ABI_XENT_STAT_CALLS] += 1;
}
