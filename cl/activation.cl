// Fused bias + activation, forward and backward, and the bias gradient.
// Math in f32; tensors in the storage dtype through LOAD8/STORE8 (eight
// elements per work-item, common.cl says why) and LOAD/STORE for the tails;
// the bias is always f32 (the master copy is read directly); the bias
// gradient is in the storage dtype, like every gradient.

// The activation codes: the rows of MPCL_ACTIVATION_LIST
// (include/mpcl/activations.h, joined to the program before this file), in
// order, as enum mpcl_activation numbers them.
#define ACTIVATION_CODE_ROW(NAME, name, ...) ACTIVATION_##NAME,
enum activation_code { MPCL_ACTIVATION_LIST(ACTIVATION_CODE_ROW) };

// GELU's tanh form 0.5 z (1 + tanh(u)), u = K (z + A z^3), as a logistic:
// 1 + tanh(u) = 2 / (1 + e) with e = exp(-2u), so GELU(z) = z / (1 + e) and,
// with s = 1 / (1 + e) (so 1 - s = e s), GELU'(z) = s (1 + 2K z e s (1 + 3A
// z^2)). One exp (as exp2: PoCL's is the cheaper) and one division, and
// the error is relative. Through tanh(u) = 1 - 2 / (1 + exp(2u)) (the
// builtin tanh is a slow scalar call on PoCL, 20x), 1 + tanh(u) lost its
// digits as GELU nears 0, and the GPT step's GELU on [2048, 512] f32 took
// 489-529 us forward and 617-665 us backward with the bias gradient,
// against 343-374 and 509-551 us this way (Zen 4, two threads).
#define ACTIVATION_GELU_K 0.7978845608028654f
#define ACTIVATION_GELU_A 0.044715f
// exp(-2u) = exp2(z (C1 + C3 z^2)): C1 = -2K log2(e), C3 = C1 A.
#define ACTIVATION_GELU_C1 -2.302208198144325f
#define ACTIVATION_GELU_C3 -0.1029432395800235f
static float8 activation_gelu_e(float8 z) {
    return exp2(z * (ACTIVATION_GELU_C1 + ACTIVATION_GELU_C3 * (z * z)));
}

// The activation on eight lanes; every choice between lanes is a select, so
// a lane's discarded formula may hold inf or NaN harmlessly.
static float8 activation_apply(int act, float8 z) {
    switch (act) {
    case ACTIVATION_RELU: return fmax(z, 0.0f);
    case ACTIVATION_GELU: {
        // Beyond |z| = 10, GELU is z or 0 to f32 precision (|error| < 1e-36);
        // cutting there gives -inf 0, not -inf / inf = NaN.
        float8 cut = select((float8)0.0f, z, z > 0.0f);
        return select(z / (1.0f + activation_gelu_e(z)), cut, fabs(z) > 10.0f);
    }
    case ACTIVATION_SIGMOID: return 1.0f / (1.0f + exp(-z));
    case ACTIVATION_TANH: return tanh(z);
    default: return z;
    }
}

// Lane masks of s > 0 and |s| > c (c >= 0) computed on the bits, false for
// NaN as the float compares are: s comes straight from a load here, and LLVM
// turns a float compare of a loaded f16 value into a scalar one (common.cl).
static int8 activation_positive(float8 s) {
    int8 b = as_int8(s);
    return (b > 0) & (b <= 0x7f800000);
}
static int8 activation_abs_greater(float8 s, float c) {
    uint8 u = as_uint8(s) & 0x7fffffffu;
    return (u > as_uint(c)) & (u <= 0x7f800000u);
}

// The derivative from what the forward saved (see mpcl_activation_saved):
// the output y for relu, sigmoid and tanh, the pre-activation z for GELU.
static float8 activation_grad(int act, float8 s) {
    switch (act) {
    case ACTIVATION_RELU: return select((float8)0.0f, (float8)1.0f, activation_positive(s));
    case ACTIVATION_GELU: {
        // Beyond |z| = 10 the derivative is 0 or 1 to f32 precision, and the
        // formula would compute inf * 0 = NaN once exp(-2u) overflows.
        float8 e = activation_gelu_e(s), p = 1.0f / (1.0f + e);
        float8 g = p * (1.0f + 2.0f * ACTIVATION_GELU_K * s * e * p *
                                   (1.0f + 3.0f * ACTIVATION_GELU_A * (s * s)));
        float8 cut = select((float8)0.0f, (float8)1.0f, activation_positive(s));
        return select(g, cut, activation_abs_greater(s, 10.0f));
    }
    case ACTIVATION_SIGMOID: return s * (1.0f - s);
    case ACTIVATION_TANH: return 1.0f - s * s;
    default: return (float8)1.0f;
    }
}

// One kernel per activation (and per "also write z"), made by the macros
// below: with the activation a compile-time constant the switch folds away.
// With the activation as a runtime argument it ran scalar (relu
// forward/backward on 16 MB: 0.6x/0.8x memcpy in f32 and 0.06x in f16,
// against 1.4x and 0.4x specialized, one element per item).
//
// And two of each on the width: PART 0 for a row length (forward, bias
// gradient) or element count (backward) that is a multiple of 8, vectors
// only; PART 1 (the names without _v8) for any, the last item of a row or of
// the tensor taking the n % 8 left element by element. The tail code alone,
// never run, slowed the f16 vector path of the same kernel 1.5-2x on PoCL
// (f16 bias+relu forward 1281 -> 768 us, bias gradient 1039 -> 605 us), so
// the host picks _v8 whenever it can.

// out[b,j] = act(in[b,j] + bias[j]) over a (ceil(cols / 8), rows) range:
// each item takes eight columns of one row, so the bias index needs no
// division. The _z kernels also write z[b,j] = in[b,j] + bias[j]. out may
// alias in (each item reads its elements before it writes them).
#define ACTIVATION_FORWARD(NAME, ACT, WRITE_Z, PART)                                           \
    __kernel void NAME(__global storage_t *out, __global storage_t *z,                        \
                       __global const storage_t *in, __global const float *bias, uint cols,   \
                       uint rows) {                                                           \
        size_t j = get_global_id(0) * 8, b = get_global_id(1);                                \
        if (j >= cols || b >= rows) return;                                                   \
        size_t i = b * cols + j;                                                              \
        if (!(PART) || cols - j >= 8) {                                                       \
            float8 v = LOAD8(in, i) + LOAD_FLOAT8(bias, j);                                   \
            if (WRITE_Z) STORE8(z, i, v);                                                     \
            STORE8(out, i, activation_apply((ACT), v));                                       \
        } else {                                                                              \
            uint n = (uint)(cols - j);                                                        \
            float8 v = LOAD8_PART(in, i, n) + LOAD8_PART_WITH(LOAD_FLOAT, bias, j, n);        \
            if (WRITE_Z) STORE8_PART(z, i, n, v);                                             \
            STORE8_PART(out, i, n, activation_apply((ACT), v));                               \
        }                                                                                     \
    }

// d_pre[i] = d_out[i] * act'(saved[i]) for i < n, eight per item over
// ceil(n / 8) items. Identity does not read saved. d_pre may alias d_out.
#define ACTIVATION_BACKWARD(NAME, ACT, PART)                                                    \
    __kernel void NAME(__global storage_t *d_pre, __global const storage_t *d_out,             \
                       __global const storage_t *saved, uint n) {                              \
        size_t i = get_global_id(0) * 8;                                                       \
        if (i >= n) return;                                                                    \
        if (!(PART) || n - i >= 8) {                                                           \
            float8 g = (ACT) == ACTIVATION_IDENTITY ? (float8)1.0f                             \
                                                    : activation_grad((ACT), LOAD8(saved, i)); \
            STORE8(d_pre, i, LOAD8(d_out, i) * g);                                             \
        } else {                                                                               \
            uint r = (uint)(n - i);                                                            \
            float8 g = (ACT) == ACTIVATION_IDENTITY                                            \
                           ? (float8)1.0f                                                      \
                           : activation_grad((ACT), LOAD8_PART(saved, i, r));                  \
            STORE8_PART(d_pre, i, r, LOAD8_PART(d_out, i, r) * g);                             \
        }                                                                                      \
    }

// Names: mpcl_bias_act_forward_<act>, mpcl_bias_act_forward_z_<act>,
// mpcl_bias_act_backward_<act>, <act> as mpcl_activation_name() spells it,
// and each of them with _v8 appended.
// SUFFIX is "_<act>", pasted from the row's name before any macro can
// expand it: OpenCL C may define `tanh` as a macro.
#define ACTIVATION_KERNELS(SUFFIX, ACT)                                     \
    ACTIVATION_FORWARD(mpcl_bias_act_forward##SUFFIX, ACT, 0, 1)            \
    ACTIVATION_FORWARD(mpcl_bias_act_forward_z##SUFFIX, ACT, 1, 1)          \
    ACTIVATION_BACKWARD(mpcl_bias_act_backward##SUFFIX, ACT, 1)             \
    ACTIVATION_FORWARD(mpcl_bias_act_forward##SUFFIX##_v8, ACT, 0, 0)       \
    ACTIVATION_FORWARD(mpcl_bias_act_forward_z##SUFFIX##_v8, ACT, 1, 0)     \
    ACTIVATION_BACKWARD(mpcl_bias_act_backward##SUFFIX##_v8, ACT, 0)

#define ACTIVATION_KERNELS_ROW(NAME, name, ...) ACTIVATION_KERNELS(_##name, ACTIVATION_##NAME)
MPCL_ACTIVATION_LIST(ACTIVATION_KERNELS_ROW)

// The bias gradient's shape; src/compute/ops.c launches with the same values.
// Each item sums 32 columns (four float8 accumulators, named: an array of
// them lived in memory on PoCL) over one of BIAS_GRAD_PARTS row blocks; a
// group of BIAS_GRAD_PARTS items (one column block) adds its partial sums in
// local memory.
#define BIAS_GRAD_COLS MPCL_ABI_BIAS_GRAD_COLS
#define BIAS_GRAD_PARTS MPCL_ABI_BIAS_GRAD_PARTS

// In the last column block (fewer than 32 columns left): adds row b's
// columns J .. J+7 of d_pre to S, those from cols on left out (with PART;
// without it, cols is a multiple of 8 and a vector is all in or all out).
#define BIAS_GRAD_ADD(S, J, PART, ACT)                                 \
    if ((J) < cols && (!(PART) || cols - (J) >= 8)) {                   \
        BIAS_GRAD_SUM8(S, ACT, b * cols + (J))                          \
    } else if ((PART) && (J) < cols) {                                  \
        BIAS_GRAD_SUM8_PART(S, ACT, b * cols + (J), (uint)(cols - (J))) \
    }

// S += the d_pre elements [I, I + 8) (or the N of a tail). ACT < 0: the
// bias gradient alone reads them. Otherwise the activation's backward is
// fused in: the item first stores d_out * act'(saved) for those elements in
// d_pre (which the weight GEMM reads), then adds what it stored, read back,
// so that d_pre and d_bias are bit for bit what the two kernels give apart.
#define BIAS_GRAD_ACT_TERM8(ACT, I)                                         \
    ((ACT) == ACTIVATION_IDENTITY ? LOAD8(d_out, I)                      \
                                  : LOAD8(d_out, I) * activation_grad((ACT), LOAD8(saved, I)))
#define BIAS_GRAD_ACT_TERM8_PART(ACT, I, N)                          \
    ((ACT) == ACTIVATION_IDENTITY                                  \
         ? LOAD8_PART(d_out, I, N)                                 \
         : LOAD8_PART(d_out, I, N) * activation_grad((ACT), LOAD8_PART(saved, I, N)))
#define BIAS_GRAD_SUM8(S, ACT, I)                                          \
    {                                                                      \
        if ((ACT) >= 0) STORE8(d_pre, I, BIAS_GRAD_ACT_TERM8(ACT, I));     \
        S += LOAD8(d_pre, I);                                              \
    }
#define BIAS_GRAD_SUM8_PART(S, ACT, I, N)                                              \
    {                                                                                  \
        if ((ACT) >= 0) STORE8_PART(d_pre, I, N, BIAS_GRAD_ACT_TERM8_PART(ACT, I, N)); \
        S += LOAD8_PART(d_pre, I, N);                                                  \
    }
// An item's rows are cols apart (2 KiB in a GPT's [2048, 512] MLP), each a
// 128-byte piece, which the stream prefetcher does not follow: the rows
// BIAS_GRAD_AHEAD on are prefetched (MPCL_PREFETCH; the GELU backward over
// that tensor, cold: 1.07-1.29 -> 0.75-0.83 ms, Zen 4, two threads).
#define BIAS_GRAD_AHEAD 8
#define BIAS_GRAD_PREFETCH(ACT, I)                                                        \
    {                                                                                     \
        PREFETCH_READ(d_out + (I));                                                       \
        PREFETCH_READ(d_out + (I) + 16);                                                  \
        if ((ACT) >= 0 && (ACT) != ACTIVATION_IDENTITY) {                                 \
            PREFETCH_READ(saved + (I));                                                   \
            PREFETCH_READ(saved + (I) + 16);                                              \
        }                                                                                 \
    }
#define BIAS_GRAD_STORE(OUT_STORE8, OUT_STORE, T, J, PART)                  \
    if ((J) < cols && (!(PART) || cols - (J) >= 8)) OUT_STORE8(d_bias, (J), T); \
    else if ((PART) && (J) < cols)                                          \
        STORE8_PART_WITH(OUT_STORE, d_bias, (J), (uint)(cols - (J)), T);

// d_bias[j] = sum over b of d_pre[b * cols + j], in f32, rounded once at the
// store: into the storage dtype (mpcl_bias_grad) or kept f32
// (mpcl_bias_grad_f32); _v8 for cols a multiple of 8. Range (ceil(cols / 32),
// BIAS_GRAD_PARTS), groups (1, BIAS_GRAD_PARTS): item p of a group sums rows
// [p * ceil(rows / P), (p + 1) * ceil(rows / P)) in row order for its 32
// columns (a 128-byte f32 or 64-byte f16 run of each row), then item 0 adds
// the P partial sums in order p = 0, 1, ...: a fixed order for a given shape,
// so the result is deterministic, with no atomics. Columns from cols on are
// neither read nor written.
//
// The same kernel with ACT >= 0 is the activation's backward fused in
// (mpcl_bias_act_backward_grad_<act>): d_pre is written from d_out and
// saved on the way (see BIAS_GRAD_SUM8). The plain ones never touch d_out
// and saved (the host passes d_pre for both).
#define BIAS_GRAD_KERNEL(NAME, OUT_T, OUT_STORE8, OUT_STORE, PART, ACT)                       \
    __kernel __attribute__((reqd_work_group_size(1, BIAS_GRAD_PARTS, 1))) void NAME(          \
        __global OUT_T *d_bias, __global storage_t *d_pre, __global const storage_t *d_out,    \
        __global const storage_t *saved, uint rows, uint cols) {                              \
        __local float8 partial[4][BIAS_GRAD_PARTS];                                           \
        size_t j0 = get_global_id(0) * BIAS_GRAD_COLS;                                        \
        uint p = (uint)get_local_id(1);                                                       \
        uint per = (rows + BIAS_GRAD_PARTS - 1) / BIAS_GRAD_PARTS;                            \
        size_t b0 = min((size_t)p * per, (size_t)rows), b1 = min(b0 + per, (size_t)rows);     \
        float8 s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;                                    \
        if (j0 < cols && cols - j0 >= BIAS_GRAD_COLS) {                                       \
            for (size_t b = b0; b < b1; b++) {                                                \
                size_t i = b * cols + j0;                                                     \
                BIAS_GRAD_PREFETCH(ACT, min(b + BIAS_GRAD_AHEAD, (size_t)rows - 1) * cols + j0) \
                BIAS_GRAD_SUM8(s0, ACT, i)                                                    \
                BIAS_GRAD_SUM8(s1, ACT, i + 8)                                                \
                BIAS_GRAD_SUM8(s2, ACT, i + 16)                                               \
                BIAS_GRAD_SUM8(s3, ACT, i + 24)                                               \
            }                                                                                 \
        } else if (j0 < cols) {                                                               \
            for (size_t b = b0; b < b1; b++) {                                                \
                BIAS_GRAD_ADD(s0, j0, PART, ACT)                                              \
                BIAS_GRAD_ADD(s1, j0 + 8, PART, ACT)                                          \
                BIAS_GRAD_ADD(s2, j0 + 16, PART, ACT)                                         \
                BIAS_GRAD_ADD(s3, j0 + 24, PART, ACT)                                         \
            }                                                                                 \
        }                                                                                     \
        partial[0][p] = s0;                                                                   \
        partial[1][p] = s1;                                                                   \
        partial[2][p] = s2;                                                                   \
        partial[3][p] = s3;                                                                   \
        barrier(CLK_LOCAL_MEM_FENCE);                                                         \
        if (p != 0 || j0 >= cols) return;                                                     \
        for (uint q = 1; q < BIAS_GRAD_PARTS; q++) {                                          \
            s0 += partial[0][q];                                                              \
            s1 += partial[1][q];                                                              \
            s2 += partial[2][q];                                                              \
            s3 += partial[3][q];                                                              \
        }                                                                                     \
        BIAS_GRAD_STORE(OUT_STORE8, OUT_STORE, s0, j0, PART)                                  \
        BIAS_GRAD_STORE(OUT_STORE8, OUT_STORE, s1, j0 + 8, PART)                              \
        BIAS_GRAD_STORE(OUT_STORE8, OUT_STORE, s2, j0 + 16, PART)                             \
        BIAS_GRAD_STORE(OUT_STORE8, OUT_STORE, s3, j0 + 24, PART)                             \
    }

BIAS_GRAD_KERNEL(mpcl_bias_grad, storage_t, STORE8, STORE, 1, -1)
BIAS_GRAD_KERNEL(mpcl_bias_grad_f32, float, STORE_FLOAT8, STORE_FLOAT, 1, -1)
BIAS_GRAD_KERNEL(mpcl_bias_grad_v8, storage_t, STORE8, STORE, 0, -1)
BIAS_GRAD_KERNEL(mpcl_bias_grad_f32_v8, float, STORE_FLOAT8, STORE_FLOAT, 0, -1)

// The bias gradient shaped for a GPU (src/compute/ops.c takes it on GPUs and
// accelerators): the shape above has one group of BIAS_GRAD_PARTS items per
// 32 columns, 64 items in all for a 128-wide layer, where a GPU wants
// thousands (an H200 summed at 1/4.8 of its memcpy speed). Two launches
// instead. mpcl_bias_grad_parts*, range (ceil(cols / 8), parts): item (i, p)
// sums the 8 columns from 8 i over rows [p per, (p + 1) per), in row order,
// into row p of `partial` (f32, parts x cols); with ACT >= 0 the
// activation's backward is fused in as above. Then
// mpcl_bias_grad_sum_parts*, range ceil(cols / 8): item i adds the rows of
// `partial` for its columns in order p = 0, 1, ... and stores the sum
// rounded once. A fixed order for a given shape: deterministic, no atomics.
#define BIAS_GRAD_PARTS_KERNEL(NAME, PART, ACT)                                            \
    __kernel void NAME(__global float *partial, __global storage_t *d_pre,                 \
                       __global const storage_t *d_out, __global const storage_t *saved,   \
                       uint rows, uint cols, uint per) {                                   \
        size_t j = get_global_id(0) * 8, p = get_global_id(1);                             \
        if (j >= cols) return;                                                             \
        size_t b0 = min(p * per, (size_t)rows), b1 = min(b0 + per, (size_t)rows);           \
        float8 s = 0.0f;                                                                   \
        for (size_t b = b0; b < b1; b++) {                                                 \
            BIAS_GRAD_ADD(s, j, PART, ACT)                                                 \
        }                                                                                  \
        __global float *d_bias = partial + p * cols; /* BIAS_GRAD_STORE's destination */   \
        BIAS_GRAD_STORE(STORE_FLOAT8, STORE_FLOAT, s, j, PART)                             \
    }
#define BIAS_GRAD_SUM_PARTS_KERNEL(NAME, OUT_T, OUT_STORE8, OUT_STORE, PART)                \
    __kernel void NAME(__global OUT_T *d_bias, __global const float *partial, uint parts,  \
                       uint cols) {                                                        \
        size_t j = get_global_id(0) * 8;                                                   \
        if (j >= cols) return;                                                             \
        float8 s = 0.0f;                                                                   \
        for (uint p = 0; p < parts; p++) {                                                 \
            size_t at = (size_t)p * cols + j;                                              \
            if (!(PART) || cols - j >= 8)                                                  \
                s += LOAD_FLOAT8(partial, at);                                             \
            else                                                                           \
                s += LOAD8_PART_WITH(LOAD_FLOAT, partial, at, (uint)(cols - j));           \
        }                                                                                  \
        BIAS_GRAD_STORE(OUT_STORE8, OUT_STORE, s, j, PART)                                 \
    }
BIAS_GRAD_PARTS_KERNEL(mpcl_bias_grad_parts, 1, -1)
BIAS_GRAD_PARTS_KERNEL(mpcl_bias_grad_parts_v8, 0, -1)
BIAS_GRAD_SUM_PARTS_KERNEL(mpcl_bias_grad_sum_parts, storage_t, STORE8, STORE, 1)
BIAS_GRAD_SUM_PARTS_KERNEL(mpcl_bias_grad_sum_parts_v8, storage_t, STORE8, STORE, 0)
BIAS_GRAD_SUM_PARTS_KERNEL(mpcl_bias_grad_sum_parts_f32, float, STORE_FLOAT8, STORE_FLOAT, 1)
BIAS_GRAD_SUM_PARTS_KERNEL(mpcl_bias_grad_sum_parts_f32_v8, float, STORE_FLOAT8, STORE_FLOAT, 0)

// mpcl_bias_act_backward_grad_<act>[_v8]: the bias gradient in the storage
// dtype with the activation's backward fused in; and its first launch in
// the GPU shape, mpcl_bias_act_backward_grad_parts_<act>[_v8].
#define BIAS_ACT_GRAD_KERNELS(SUFFIX, ACT)                                                       \
    BIAS_GRAD_KERNEL(mpcl_bias_act_backward_grad##SUFFIX, storage_t, STORE8, STORE, 1, ACT)     \
    BIAS_GRAD_KERNEL(mpcl_bias_act_backward_grad##SUFFIX##_v8, storage_t, STORE8, STORE, 0, ACT) \
    BIAS_GRAD_PARTS_KERNEL(mpcl_bias_act_backward_grad_parts##SUFFIX, 1, ACT)                  \
    BIAS_GRAD_PARTS_KERNEL(mpcl_bias_act_backward_grad_parts##SUFFIX##_v8, 0, ACT)
#define BIAS_ACT_GRAD_KERNELS_ROW(NAME, name, ...) \
    BIAS_ACT_GRAD_KERNELS(_##name, ACTIVATION_##NAME)
MPCL_ACTIVATION_LIST(BIAS_ACT_GRAD_KERNELS_ROW)
