// Softmax cross-entropy with integer labels: loss statistics accumulated on
// the device and, fused in the same pass, the gradient of the scaled mean loss.
// Always f32 math; logits and their gradient in the storage dtype.

// Each work-group of MPCL_ABI_LOSS_WG items (cl/abi.h) takes
// MPCL_ABI_LOSS_GROUP_ROWS rows of the batch (eight rows an item, see below)
// and reduces its sums in local memory; one work-item then adds them into
// the statistics (a batch of one group) or writes them as the group's
// partials, which mpcl_loss_finish adds in group order (loss_group_out): no
// float atomics, and the result does not depend on scheduling. One group
// for the whole of a GPT's 2048 x 256 logits ran on one core of two, 1.2 ms
// a step on PoCL.
//
// logits, d_logits: [rows, classes]. labels: [rows] int. stats: 32-bit words
// at the MPCL_ABI_LOSS_STAT_* offsets of cl/abi.h, which losses.c reads (the
// layout every loss shares; loss_group_reduce and loss_stats_add below
// update it, cl/loss_dense.cl uses them too). With
// write_grad, d_logits[r,c] = (p[r,c] - (c == label)) * scale / grad_rows
// (grad_rows = rows, or a data-parallel replica's global batch), where
// scale is scale_buf[0] when use_scale_buf and scale_value otherwise; without
// it d_logits is not touched (and may be any buffer).
// A label outside [0, classes) counts as bad: the row adds no loss, its
// gradient row is zero, and the first bad (call, row, label) is recorded.
//
// Each item takes eight rows at a time, one per lane, the classes running
// down a loop: the exponentials of eight rows are one vector call. One row
// per item, PoCL made a scalar exp call per element (two per logit): 21 us in
// f32 and 39-55 us in f16 for a 128x10 batch, ~10% of a step (Zen 4).

// Elements o.s0 .. o.s7 of p, as float8: the raw bits gathered, then
// converted as one vector (common.cl's storage_value8).
#define LOSS_ELEMS8(p, o)                                                             \
    ((p)[(o).s0], (p)[(o).s1], (p)[(o).s2], (p)[(o).s3], (p)[(o).s4], (p)[(o).s5], \
     (p)[(o).s6], (p)[(o).s7])
#define LOSS_LOAD8(p, o) \
    storage_value8((storage_bits8_t)LOSS_ELEMS8((__global const storage_bits_t *)(p), (o)))
// Stores lanes 0 .. n-1 of v (1 <= n <= 8) at o.s0 .. o.s(n-1).
#define LOSS_STORE8_PART(p, o, n, v)                                  \
    do {                                                              \
        storage_bits8_t b_ = storage_bits8(v);                        \
        __global storage_bits_t *q_ = (__global storage_bits_t *)(p); \
        q_[(o).s0] = b_.s0;                                           \
        if ((n) > 1u) q_[(o).s1] = b_.s1;                             \
        if ((n) > 2u) q_[(o).s2] = b_.s2;                             \
        if ((n) > 3u) q_[(o).s3] = b_.s3;                             \
        if ((n) > 4u) q_[(o).s4] = b_.s4;                             \
        if ((n) > 5u) q_[(o).s5] = b_.s5;                             \
        if ((n) > 6u) q_[(o).s6] = b_.s6;                             \
        if ((n) > 7u) q_[(o).s7] = b_.s7;                             \
    } while (0)

// The partial sums of a loss kernel's work-group, in local arrays of
// MPCL_ABI_LOSS_WG entries (OpenCL 1.2 declares them in the kernel): summed
// (the firsts: the least) into entry 0 by a tree in a fixed order.
static inline void loss_group_reduce(uint lid, __local float *l_loss, __local float *l_metric,
                              __local uint *l_correct, __local uint *l_valid, __local uint *l_bad,
                              __local uint *l_first) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint half_n = MPCL_ABI_LOSS_WG / 2; half_n > 0; half_n /= 2) {
        if (lid < half_n) {
            l_loss[lid] += l_loss[lid + half_n];
            l_metric[lid] += l_metric[lid + half_n];
            l_correct[lid] += l_correct[lid + half_n];
            l_valid[lid] += l_valid[lid + half_n];
            l_bad[lid] += l_bad[lid + half_n];
            l_first[lid] = min(l_first[lid], l_first[lid + half_n]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

// Kahan summation of x into the f32 sum at word `at` with its compensation
// at `comp`: an epoch's sum stays accurate in f32.
static inline void loss_kahan_add(__global uint *stats, uint at, uint comp, float x) {
    float sum = as_float(stats[at]);
    float y = x - as_float(stats[comp]);
    float t = sum + y;
    stats[comp] = as_uint((t - sum) - y);
    stats[at] = as_uint(t);
}

// Adds one launch's reduced sums (entry 0 of the arrays above, or the sum of
// the groups' partials) to the stats, by a single work-item. terms: the
// loss terms summed; the first bad row (if any) is recorded with its column
// and target bits when it is the first since the reset. kind: the
// MPCL_ABI_LOSS_* code. A call is usually one launch; a loss computed in
// chunks of rows (a language-model head's) is several, and only the last
// counts the call (ends_call).
static inline void loss_stats_add(__global uint *stats, uint kind, float loss, float metric, uint correct,
                           uint valid, uint terms, uint bad, uint first_bad, uint bad_col,
                           uint bad_target, uint ends_call) {
    loss_kahan_add(stats, MPCL_ABI_LOSS_STAT_LOSS, MPCL_ABI_LOSS_STAT_LOSS_COMP, loss);
    loss_kahan_add(stats, MPCL_ABI_LOSS_STAT_METRIC, MPCL_ABI_LOSS_STAT_METRIC_COMP, metric);
    stats[MPCL_ABI_LOSS_STAT_CORRECT] += correct;
    stats[MPCL_ABI_LOSS_STAT_SAMPLES] += valid;
    stats[MPCL_ABI_LOSS_STAT_TERMS] += terms;
    if (bad != 0 && stats[MPCL_ABI_LOSS_STAT_BAD] == 0) {
        stats[MPCL_ABI_LOSS_STAT_BAD_CALL] = stats[MPCL_ABI_LOSS_STAT_CALLS];
        stats[MPCL_ABI_LOSS_STAT_BAD_ROW] = first_bad;
        stats[MPCL_ABI_LOSS_STAT_BAD_COL] = bad_col;
        stats[MPCL_ABI_LOSS_STAT_BAD_TARGET] = bad_target;
    }
    stats[MPCL_ABI_LOSS_STAT_BAD] += bad;
    stats[MPCL_ABI_LOSS_STAT_CALLS] += ends_call != 0;
    stats[MPCL_ABI_LOSS_STAT_KIND] = kind + 1;
}

// A group's reduced sums, by its item 0: into the stats when the batch is one
// group, else into the group's partials for mpcl_loss_finish. row0: the
// launch's first row within its call (a chunk's), added to the bad row.
static inline void loss_group_out(__global uint *stats, __global uint *partials, uint row0,
                           uint ends_call, uint kind, float loss, float metric, uint correct,
                           uint valid, uint terms, uint bad, uint first_bad, uint bad_col,
                           uint bad_target) {
    if (bad != 0) first_bad += row0;
    if (get_num_groups(0) == 1) {
        loss_stats_add(stats, kind, loss, metric, correct, valid, terms, bad, first_bad, bad_col,
                       bad_target, ends_call);
        return;
    }
    __global uint *p = partials + (size_t)get_group_id(0) * MPCL_ABI_LOSS_PART_WORDS;
    p[MPCL_ABI_LOSS_PART_LOSS] = as_uint(loss);
    p[MPCL_ABI_LOSS_PART_METRIC] = as_uint(metric);
    p[MPCL_ABI_LOSS_PART_CORRECT] = correct;
    p[MPCL_ABI_LOSS_PART_VALID] = valid;
    p[MPCL_ABI_LOSS_PART_TERMS] = terms;
    p[MPCL_ABI_LOSS_PART_BAD] = bad;
    p[MPCL_ABI_LOSS_PART_FIRST_BAD] = first_bad;
    p[MPCL_ABI_LOSS_PART_BAD_COL] = bad_col;
    p[MPCL_ABI_LOSS_PART_BAD_TARGET] = bad_target;
}

// The groups' partials of one call added in group order into the stats, by
// one work-item (a batch of several groups; kind: its MPCL_ABI_LOSS_* code).
__kernel void mpcl_loss_finish(__global uint *stats, __global const uint *partials, uint groups,
                               uint kind, uint ends_call) {
    if (get_global_id(0) != 0) return;
    float loss = 0.0f, metric = 0.0f;
    uint correct = 0, valid = 0, terms = 0, bad = 0, first_bad = 0, bad_col = 0, bad_target = 0;
    for (uint g = 0; g < groups; g++) {
        __global const uint *p = partials + (size_t)g * MPCL_ABI_LOSS_PART_WORDS;
        loss += as_float(p[MPCL_ABI_LOSS_PART_LOSS]);
        metric += as_float(p[MPCL_ABI_LOSS_PART_METRIC]);
        correct += p[MPCL_ABI_LOSS_PART_CORRECT];
        valid += p[MPCL_ABI_LOSS_PART_VALID];
        terms += p[MPCL_ABI_LOSS_PART_TERMS];
        if (bad == 0 && p[MPCL_ABI_LOSS_PART_BAD] != 0) {
            first_bad = p[MPCL_ABI_LOSS_PART_FIRST_BAD];
            bad_col = p[MPCL_ABI_LOSS_PART_BAD_COL];
            bad_target = p[MPCL_ABI_LOSS_PART_BAD_TARGET];
        }
        bad += p[MPCL_ABI_LOSS_PART_BAD];
    }
    loss_stats_add(stats, kind, loss, metric, correct, valid, terms, bad, first_bad, bad_col,
                   bad_target, ends_call);
}

// The two softmax kernels' arguments, their group's sums and rows, and
// how those sums leave the group.
#define XENT_ARGS                                                                               \
    __global uint *stats, __global storage_t *d_logits, __global const storage_t *logits,       \
        __global const int *labels, uint rows, uint grad_rows, uint classes,                    \
        __global const float *scale_buf, float scale_value, int use_scale_buf, int write_grad, \
        __global uint *partials, uint row0, uint ends_call
#define XENT_GROUP_BEGIN XENT_GROUP_BEGIN_ROWS(MPCL_ABI_LOSS_GROUP_ROWS)
#define XENT_GROUP_BEGIN_ROWS(GROUP_ROWS)                                                       \
    __local float l_loss[MPCL_ABI_LOSS_WG], l_metric[MPCL_ABI_LOSS_WG];                         \
    __local uint l_correct[MPCL_ABI_LOSS_WG], l_valid[MPCL_ABI_LOSS_WG];                        \
    __local uint l_bad[MPCL_ABI_LOSS_WG], l_first[MPCL_ABI_LOSS_WG];                            \
    const uint lid = get_local_id(0);                                                           \
    float g = 0.0f;                                                                             \
    if (write_grad) g = (use_scale_buf ? scale_buf[0] : scale_value) / (float)grad_rows;       \
    float loss = 0.0f;                                                                          \
    uint correct = 0, valid = 0, bad = 0, first_bad = UINT_MAX;                                 \
    /* The group's rows: first .. end - 1. */                                                   \
    const uint first = get_group_id(0) * (GROUP_ROWS);                                          \
    const uint end = min(rows, first + (GROUP_ROWS));
#define XENT_GROUP_OUT                                                                          \
    l_loss[lid] = loss;                                                                         \
    l_metric[lid] = 0.0f;                                                                       \
    l_correct[lid] = correct;                                                                   \
    l_valid[lid] = valid;                                                                       \
    l_bad[lid] = bad;                                                                           \
    l_first[lid] = first_bad;                                                                   \
    loss_group_reduce(lid, l_loss, l_metric, l_correct, l_valid, l_bad, l_first);               \
    if (lid != 0) return;                                                                       \
    const uint bad_label = l_bad[0] != 0 ? (uint)labels[l_first[0]] : 0u;                      \
    loss_group_out(stats, partials, row0, ends_call, MPCL_ABI_LOSS_SPARSE_XENT, l_loss[0], 0.0f, \
                   l_correct[0], l_valid[0], l_valid[0], l_bad[0], l_first[0], 0u, bad_label);

// Narrow rows (losses.c takes mpcl_softmax_xent_wide from XENT_WIDE_COLS
// classes on).
__kernel __attribute__((reqd_work_group_size(MPCL_ABI_LOSS_WG, 1, 1))) void mpcl_softmax_xent(
    XENT_ARGS) {
    XENT_GROUP_BEGIN
    const uint8 lane = (uint8)(0, 1, 2, 3, 4, 5, 6, 7);
    for (uint r0 = first + 8u * lid; r0 < end; r0 += 8u * MPCL_ABI_LOSS_WG) {
        // Lanes past the group's last row repeat it: loaded, never counted
        // or stored. (A scalar bound here was ignored by Oclgrind.)
        const uint n = min(8u, end - r0);
        const uint8 r = min(r0 + lane, (uint8)(end - 1u));
        const uint8 base = r * classes;
        const int8 label = (int8)(labels[r.s0], labels[r.s1], labels[r.s2], labels[r.s3],
                                  labels[r.s4], labels[r.s5], labels[r.s6], labels[r.s7]);
        const int8 ok = (label >= 0) & (label < (int)classes);
        // The first maximum is the prediction; subtracting it keeps exp() <= 1.
        float8 m = -INFINITY, z_label = 0.0f;
        int8 arg = 0;
        for (uint c = 0; c < classes; c++) {
            float8 v = LOSS_LOAD8(logits, base + c);
            int8 above = v > m;
            m = select(m, v, above);
            arg = select(arg, (int8)c, above);
            z_label = select(z_label, v, label == (int)c);
        }
        float8 s = 0.0f;
        for (uint c = 0; c < classes; c++) s += exp(LOSS_LOAD8(logits, base + c) - m);
        // -log p[label] = (m - z[label]) + log(s), both terms >= 0. The live
        // lanes' results are added in row order (a fixed order for a given
        // batch), through private arrays: Oclgrind's --uninitialized check
        // crashed on the swizzles of a horizontal sum.
        float row_loss[8];
        int row_ok[8], row_hit[8];
        vstore8(select((float8)0.0f, (m - z_label) + log(s), ok), 0, row_loss);
        vstore8(ok, 0, row_ok);
        vstore8(ok & (arg == label), 0, row_hit);
        for (uint k = 0; k < n; k++) {
            loss += row_loss[k];
            valid += row_ok[k] != 0;
            correct += row_hit[k] != 0;
            if (row_ok[k] == 0) {
                bad++;
                first_bad = min(first_bad, r0 + k);
            }
        }
        if (write_grad) {
            const float8 inv = 1.0f / s;
            for (uint c = 0; c < classes; c++) {
                float8 p = exp(LOSS_LOAD8(logits, base + c) - m) * inv;
                float8 d = (p - select((float8)0.0f, (float8)1.0f, label == (int)c)) * g;
                LOSS_STORE8_PART(d_logits, base + c, n, select((float8)0.0f, d, ok));
            }
        }
    }

    XENT_GROUP_OUT
}

// Wide rows (a language model's vocabulary): a row at a time per item, its
// classes eight at a time, whole vector loads and stores but the row's last
// part. The 8-row gather above took 1.1 ms for a GPT's 2048 x 256 logits on
// PoCL (Zen 4). Lanes keep their own maximum and its first column; the
// row's prediction is the first column holding the greatest of them. In
// f32, the sum's pass keeps each exp(z - m) in d_logits for the gradient's
// (exp is most of the kernel's time); 16-bit storage would round it first.
#if defined(MPCL_STORAGE_F32)
#define XENT_KEEPS_EXP 1
#else
#define XENT_KEEPS_EXP 0
#endif
// BODY for each chunk of eight classes of the row at base (from column c0,
// every `step` columns): its first column c, its n live lanes, their columns
// col, and v, the chunk of src with -INFINITY past the row's end.
#define XENT_WIDE_PASS(src, BODY) XENT_PASS_FROM(src, 0u, 8u, BODY)
#define XENT_PASS_FROM(src, c0, step, BODY)                                           \
    for (uint c = (c0); c < classes; c += (step)) {                                   \
        const uint n = min(8u, classes - c);                                          \
        const int8 col = (int8)((int)c) + (int8)(0, 1, 2, 3, 4, 5, 6, 7);             \
        const float8 v = select((float8)(-INFINITY),                                   \
                                n == 8u ? LOAD8(src, base + c)                         \
                                        : LOAD8_PART(src, base + c, n),                \
                                col < (int8)((int)classes));                           \
        BODY                                                                          \
    }
#define XENT_WIDE_STORE(p, out)                            \
    if (n == 8u)                                           \
        STORE8(p, base + c, out);                          \
    else                                                   \
        STORE8_PART(p, base + c, n, out);
// A wide row's sums, from its maximum m (first at column arg) and the sum s
// of its exp(z - m): its loss (m - z[label]) + log(s), counted with its hit,
// or its label counted as bad.
#define XENT_ROW_COUNT                                                   \
    if (ok) {                                                            \
        loss += (m - LOAD(logits, base + (uint)label)) + log(s);         \
        valid++;                                                         \
        correct += arg == label;                                         \
    } else {                                                             \
        bad++;                                                           \
        first_bad = min(first_bad, r);                                   \
    }
// A chunk's gradient from its probabilities p: (p - (col == label)) g,
// zeros for a row whose label is bad.
#define XENT_ROW_GRAD(p) \
    (ok ? ((p) - select((float8)0.0f, (float8)1.0f, col == (int8)label)) * g : (float8)(0.0f))

// The greatest of the lanes' maxima m8 and, into *arg, the least of the
// columns arg8 where a lane holds it: the prediction, the first maximum.
static inline float xent_lanes_argmax(float8 m8, int8 arg8, int *arg) {
    float lane_max[8];
    int lane_arg[8];
    vstore8(m8, 0, lane_max);
    vstore8(arg8, 0, lane_arg);
    float m = lane_max[0];
    *arg = lane_arg[0];
    for (uint k = 1; k < 8u; k++) {
        if (lane_max[k] > m || (lane_max[k] == m && lane_arg[k] < *arg)) *arg = lane_arg[k];
        m = fmax(m, lane_max[k]);
    }
    return m;
}

__kernel __attribute__((reqd_work_group_size(MPCL_ABI_LOSS_WG, 1, 1))) void mpcl_softmax_xent_wide(
    XENT_ARGS) {
    XENT_GROUP_BEGIN
    const bool keep = XENT_KEEPS_EXP && write_grad;
    for (uint r = first + lid; r < end; r += MPCL_ABI_LOSS_WG) {
        const size_t base = (size_t)r * classes;
        const int label = labels[r];
        const bool ok = label >= 0 && label < (int)classes;
        float8 m8 = (float8)(-INFINITY);
        int8 arg8 = (int8)(0);
        XENT_WIDE_PASS(logits, const int8 above = v > m8; m8 = select(m8, v, above);
                       arg8 = select(arg8, col, above);)
        int arg;
        const float m = xent_lanes_argmax(m8, arg8, &arg);
        float8 s8 = (float8)(0.0f);
        XENT_WIDE_PASS(logits, const float8 e = exp(v - m); s8 += e;
                       if (keep) { XENT_WIDE_STORE(d_logits, e) })
        const float s = lanes_sum8(s8);
        XENT_ROW_COUNT
        if (!write_grad) continue;
        const float inv = 1.0f / s;
        if (keep) {
            XENT_WIDE_PASS(d_logits, XENT_WIDE_STORE(d_logits, XENT_ROW_GRAD(v * inv)))
        } else {
            XENT_WIDE_PASS(logits, XENT_WIDE_STORE(d_logits, XENT_ROW_GRAD(exp(v - m) * inv)))
        }
    }
    XENT_GROUP_OUT
}

// Wide rows on GPUs (losses.c's choice off CPUs; MPCL_XENT): the group's
// items share each row, eight classes an item, consecutive items
// consecutive classes, and the group takes MPCL_ABI_LOSS_SHARED_ROWS rows
// in turn. A row an item (above) gives a GPU few groups for a language
// model's batch (8192 rows of GPT-2's 50,257 classes: 16 groups of 64
// items, each item reading eight rows, three passes each). The row's
// maximum and its first column, then the sum of its exponentials, are
// reduced in local memory in a fixed order: deterministic.
#if MPCL_ABI_LOSS_WG != BN_WG
#error "loss.cl: the shared rows' kernel sums with bn_group_sum, whose group is BN_WG"
#endif

// The group's greatest of its items' maxima m and, into *arg, the least of
// their columns holding it; every item gets both.
static inline float xent_group_argmax(__local float *l_m, __local int *l_arg, float m, int *arg) {
    const uint lid = get_local_id(0);
    l_m[lid] = m;
    l_arg[lid] = *arg;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint half_n = MPCL_ABI_LOSS_WG / 2; half_n > 0; half_n /= 2) {
        if (lid < half_n) {
            const float o = l_m[lid + half_n];
            const int oa = l_arg[lid + half_n];
            if (o > l_m[lid] || (o == l_m[lid] && oa < l_arg[lid])) l_arg[lid] = oa;
            l_m[lid] = fmax(l_m[lid], o);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m = l_m[0];
    *arg = l_arg[0];
    barrier(CLK_LOCAL_MEM_FENCE); // all have read entry 0 before the next row's
    return m;
}

__kernel __attribute__((reqd_work_group_size(MPCL_ABI_LOSS_WG, 1, 1))) void
mpcl_softmax_xent_shared(XENT_ARGS) {
    XENT_GROUP_BEGIN_ROWS(MPCL_ABI_LOSS_SHARED_ROWS)
    __local float l_m[MPCL_ABI_LOSS_WG], l_sum[MPCL_ABI_LOSS_WG];
    __local int l_arg[MPCL_ABI_LOSS_WG];
    const uint c0 = 8u * lid, step = 8u * MPCL_ABI_LOSS_WG;
    for (uint r = first; r < end; r++) {
        const size_t base = (size_t)r * classes;
        const int label = labels[r];
        const bool ok = label >= 0 && label < (int)classes;
        float8 m8 = (float8)(-INFINITY);
        int8 arg8 = (int8)(0);
        XENT_PASS_FROM(logits, c0, step, const int8 above = v > m8; m8 = select(m8, v, above);
                       arg8 = select(arg8, col, above);)
        int arg;
        float m = xent_lanes_argmax(m8, arg8, &arg);
        m = xent_group_argmax(l_m, l_arg, m, &arg);
        float8 s8 = (float8)(0.0f);
        XENT_PASS_FROM(logits, c0, step, s8 += exp(v - m);)
        const float s = bn_group_sum(l_sum, lanes_sum8(s8));
        if (lid == 0u) {
            XENT_ROW_COUNT
        }
        if (!write_grad) continue;
        const float inv = 1.0f / s;
        XENT_PASS_FROM(logits, c0, step,
                       XENT_WIDE_STORE(d_logits, XENT_ROW_GRAD(exp(v - m) * inv)))
    }
    XENT_GROUP_OUT
}
