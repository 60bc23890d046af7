// Fused bias + activation, forward and backward, and the bias gradient.
// Math in f32; tensors in the storage dtype through LOAD/STORE; the bias and
// its gradient are always f32 (the master copy is read directly).

// The activation codes: cl/abi.h, whose values enum mpcl_activation in
// include/mpcl/ops.h has (ops.c asserts it).
#define ACTIVATION_IDENTITY MPCL_ABI_ACT_IDENTITY
#define ACTIVATION_RELU MPCL_ABI_ACT_RELU
#define ACTIVATION_GELU MPCL_ABI_ACT_GELU
#define ACTIVATION_SIGMOID MPCL_ABI_ACT_SIGMOID
#define ACTIVATION_TANH MPCL_ABI_ACT_TANH

// tanh(u) = 1 - 2 / (1 + exp(2u)): exp vectorizes where the builtin tanh is
// a slow scalar call (PoCL: 20x), and the absolute error (an ulp of 1) is
// harmless in GELU, which adds 1 to it. exp(2u) = inf gives 1, 0 gives -1.
static float activation_tanh_abs(float u) {
    return 1.0f - 2.0f / (1.0f + exp(2.0f * u));
}

// sqrt(2 / pi) and the cubic coefficient of the tanh form of GELU.
#define ACTIVATION_GELU_K 0.7978845608028654f
#define ACTIVATION_GELU_A 0.044715f

static float activation_apply(int act, float z) {
    switch (act) {
    case ACTIVATION_RELU: return fmax(z, 0.0f);
    case ACTIVATION_GELU: {
        // Beyond |z| = 10, GELU is z or 0 to f32 precision (|error| < 1e-36);
        // cutting there keeps a tanh that is a few ulp off at huge arguments
        // (PoCL's returns -1 + 2^-24 at -inf) from giving 1e30 * 2^-24.
        if (fabs(z) > 10.0f) return z > 0.0f ? z : 0.0f;
        float t = activation_tanh_abs(ACTIVATION_GELU_K * (z + ACTIVATION_GELU_A * z * z * z));
        return 0.5f * z * (1.0f + t);
    }
    case ACTIVATION_SIGMOID: return 1.0f / (1.0f + exp(-z));
    case ACTIVATION_TANH: return tanh(z);
    default: return z;
    }
}

// The derivative from what the forward saved (see mpcl_activation_saved):
// the output y for relu, sigmoid and tanh, the pre-activation z for GELU.
static float activation_grad(int act, float s) {
    switch (act) {
    case ACTIVATION_RELU: return s > 0.0f ? 1.0f : 0.0f;
    case ACTIVATION_GELU: {
        // Beyond |z| = 10 the derivative is 0 or 1 to f32 precision, and the
        // formula would compute 0 * inf = NaN once z^2 overflows.
        if (fabs(s) > 10.0f) return s > 0.0f ? 1.0f : 0.0f;
        float z2 = s * s;
        float t = activation_tanh_abs(ACTIVATION_GELU_K * s * (1.0f + ACTIVATION_GELU_A * z2));
        return 0.5f * (1.0f + t) +
               0.5f * s * (1.0f - t * t) * ACTIVATION_GELU_K * (1.0f + 3.0f * ACTIVATION_GELU_A * z2);
    }
    case ACTIVATION_SIGMOID: return s * (1.0f - s);
    case ACTIVATION_TANH: return 1.0f - s * s;
    default: return 1.0f;
    }
}

// One kernel per activation (and per "also write z"), made by the macros
// below: with the activation a compile-time constant the switch folds away and
// PoCL vectorizes the loop over work-items; with the activation as a runtime
// argument it ran scalar (relu forward/backward on 16 MB: 0.6x/0.8x memcpy in
// f32 and 0.06x in f16, against 1.4x and 0.4x specialized).

// out[b,j] = act(in[b,j] + bias[j]) over a (cols, rows) range, so the bias
// index is the first id (no division); the _z kernels also write z[b,j] =
// in[b,j] + bias[j]. out may alias in.
#define ACTIVATION_FORWARD(NAME, ACT, WRITE_Z)                                          \
    __kernel void NAME(__global storage_t *out, __global storage_t *z,                 \
                       __global const storage_t *in, __global const float *bias,       \
                       uint cols, uint rows) {                                         \
        uint j = get_global_id(0), b = get_global_id(1);                               \
        if (j >= cols || b >= rows) return;                                            \
        size_t i = (size_t)b * cols + j;                                               \
        float v = LOAD(in, i) + bias[j];                                               \
        if (WRITE_Z) STORE(z, i, v);                                                   \
        STORE(out, i, activation_apply((ACT), v));                                     \
    }

// d_pre[i] = d_out[i] * act'(saved[i]) for i < n. Identity does not read
// saved. d_pre may alias d_out.
#define ACTIVATION_BACKWARD(NAME, ACT)                                                  \
    __kernel void NAME(__global storage_t *d_pre, __global const storage_t *d_out,     \
                       __global const storage_t *saved, uint n) {                      \
        uint i = get_global_id(0);                                                     \
        if (i >= n) return;                                                            \
        float g = (ACT) == ACTIVATION_IDENTITY ? 1.0f : activation_grad((ACT), LOAD(saved, i)); \
        STORE(d_pre, i, LOAD(d_out, i) * g);                                           \
    }

// Names: mpcl_bias_act_forward_<act>, mpcl_bias_act_forward_z_<act>,
// mpcl_bias_act_backward_<act>, <act> as mpcl_activation_name() spells it.
#define ACTIVATION_KERNELS(NAME, ACT)                             \
    ACTIVATION_FORWARD(mpcl_bias_act_forward_##NAME, ACT, 0)      \
    ACTIVATION_FORWARD(mpcl_bias_act_forward_z_##NAME, ACT, 1)    \
    ACTIVATION_BACKWARD(mpcl_bias_act_backward_##NAME, ACT)

ACTIVATION_KERNELS(identity, ACTIVATION_IDENTITY)
ACTIVATION_KERNELS(relu, ACTIVATION_RELU)
ACTIVATION_KERNELS(gelu, ACTIVATION_GELU)
ACTIVATION_KERNELS(sigmoid, ACTIVATION_SIGMOID)
ACTIVATION_KERNELS(tanh, ACTIVATION_TANH)

// d_bias[j] = sum over rows of d_pre[b * cols + j], one work-item per column
// summing in row order: deterministic, no atomics, and neighbouring items read
// neighbouring addresses. The barrier in the row loop does no synchronizing
// work; it makes PoCL run the work-items of a group inside each row step
// (a vectorized, contiguous read of the row) instead of walking one column
// at a time down a 4-KB stride (10x slower). Every item reaches it: the range
// check is inside.
__kernel void mpcl_bias_grad(__global storage_t *d_bias, __global const storage_t *d_pre, uint rows,
                             uint cols) {
    uint j = get_global_id(0);
    float s = 0.0f;
    for (uint b = 0; b < rows; b++) {
        if (j < cols) s += LOAD(d_pre, (size_t)b * cols + j);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (j < cols) STORE(d_bias, j, s);
}
