// Optimizer updates over a flat f32 master buffer, up to eight parameter
// tensors per launch (see include/mpcl/optim.h). Each work-item i < e7 owns
// master element base + i, which belongs to parameter k where
// e(k-1) <= i < e(k) (e are cumulative element ends within this launch;
// unused slots repeat the last end and are never selected).
//
// Common arguments:
//   scale:    f32 [1], the loss scale; gradients are multiplied by 1/scale.
//   ls_state: uint [4], the loss scaler's state; [1] is found_inf (the index
//             loss_scale.cl calls LOSS_SCALE_FOUND_INF). When set, nothing is
//             written except the step counter's copy below.
//   step:     uint [8], two slots of four: {count, the bits of the f32
//             bias corrections 1 - beta1^(count+1) and 1 - beta2^(count+1)
//             for the coming step, unused}. Ping-ponged: this step reads slot
//             `parity` and, when write_step, work-item 0 writes the next state
//             to the other slot, so no item reads what another item of the
//             same launch writes. The corrections are computed there, by one
//             item, because transcendentals per element made the update 50x
//             slower on PoCL (pown or expm1/log1p are scalar calls there).
#define OPTIM_FOUND_INF 1

#define OPTIM_PARAM_ARGS                                                                 \
    __global storage_t *w0, __global const storage_t *g0, __global storage_t *w1,        \
        __global const storage_t *g1, __global storage_t *w2, __global const storage_t *g2, \
        __global storage_t *w3, __global const storage_t *g3, __global storage_t *w4,    \
        __global const storage_t *g4, __global storage_t *w5, __global const storage_t *g5, \
        __global storage_t *w6, __global const storage_t *g6, __global storage_t *w7,    \
        __global const storage_t *g7, uint e0, uint e1, uint e2, uint e3, uint e4, uint e5, \
        uint e6, uint e7, uint base

// Picks parameter k's working and gradient buffers and the index j inside it.
#define OPTIM_PICK                                                      \
    __global storage_t *w = w7;                                         \
    __global const storage_t *g = g7;                                   \
    uint j = i - e6;                                                    \
    if (i < e0) {                                                       \
        w = w0; g = g0; j = i;                                          \
    } else if (i < e1) {                                                \
        w = w1; g = g1; j = i - e0;                                     \
    } else if (i < e2) {                                                \
        w = w2; g = g2; j = i - e1;                                     \
    } else if (i < e3) {                                                \
        w = w3; g = g3; j = i - e2;                                     \
    } else if (i < e4) {                                                \
        w = w4; g = g4; j = i - e3;                                     \
    } else if (i < e5) {                                                \
        w = w5; g = g5; j = i - e4;                                     \
    } else if (i < e6) {                                                \
        w = w6; g = g6; j = i - e5;                                     \
    }

// 1 - beta^t as -expm1(t * log1p(beta - 1)): a few ulp even at t = 1, where
// 1 - beta^t cancels (beta - 1 is exact for beta in [0.5, 1)). beta = 0 gives
// log1p(-1) = -inf and so 1.
static float optim_bias_correction(float beta, uint t) {
    return -expm1((float)t * log1p(beta - 1.0f));
}

// Sets both step slots to {t, bias corrections of step t + 1, 0} (resume and
// reset): one work-item. The host never computes them, so they are the same
// bits the update kernel would have produced.
__kernel void mpcl_optim_set_step(__global uint *step, uint t, float beta1, float beta2) {
    for (uint s = 0; s < 2u; s++) {
        step[4u * s] = t;
        step[4u * s + 1u] = as_uint(optim_bias_correction(beta1, t + 1u));
        step[4u * s + 2u] = as_uint(optim_bias_correction(beta2, t + 1u));
        step[4u * s + 3u] = 0u;
    }
}

// Whether this step updates (found_inf clear); work-item 0 of the first
// launch of the step writes the next step state into the other slot (a plain
// copy when the step is skipped).
static int optim_begin(__global const uint *ls_state, __global uint *step, uint parity,
                       uint write_step, float beta1, float beta2, uint i) {
    int go = ls_state[OPTIM_FOUND_INF] == 0u;
    if (write_step && i == 0) {
        __global const uint *cur = step + 4u * parity;
        __global uint *next = step + 4u * (parity ^ 1u);
        uint t = cur[0] + (go ? 1u : 0u);
        next[0] = t;
        next[1] = go ? as_uint(optim_bias_correction(beta1, t + 1u)) : cur[1];
        next[2] = go ? as_uint(optim_bias_correction(beta2, t + 1u)) : cur[2];
        next[3] = 0u;
    }
    return go;
}

// Adam and AdamW (decoupled != 0). master, m, v: f32, indexed base + i.
__kernel void mpcl_optim_adam(__global float *master, __global float *m, __global float *v,
                              OPTIM_PARAM_ARGS, __global const float *scale,
                              __global const uint *ls_state, __global uint *step, uint parity,
                              uint write_step, float lr, float beta1, float beta2, float eps,
                              float weight_decay, uint decoupled) {
    uint i = get_global_id(0);
    int go = optim_begin(ls_state, step, parity, write_step, beta1, beta2, i);
    if (i >= e7 || !go) return;
    OPTIM_PICK
    uint k = base + i;
    float inv_scale = 1.0f / scale[0];
    float bc1 = as_float(step[4u * parity + 1u]), bc2 = as_float(step[4u * parity + 2u]);
    float gr = LOAD(g, j) * inv_scale;
    float x = master[k];
    if (decoupled)
        x -= lr * weight_decay * x;
    else
        gr += weight_decay * x;
    float mk = beta1 * m[k] + (1.0f - beta1) * gr;
    float vk = beta2 * v[k] + (1.0f - beta2) * gr * gr;
    x -= lr * (mk / bc1) / (sqrt(vk / bc2) + eps);
    m[k] = mk;
    v[k] = vk;
    master[k] = x;
    STORE(w, j, x);
}

// SGD with momentum (PyTorch form, dampening 0). master, buf: f32.
__kernel void mpcl_optim_sgd(__global float *master, __global float *buf, OPTIM_PARAM_ARGS,
                             __global const float *scale, __global const uint *ls_state,
                             __global uint *step, uint parity, uint write_step, float lr,
                             float momentum, float weight_decay, uint nesterov) {
    uint i = get_global_id(0);
    int go = optim_begin(ls_state, step, parity, write_step, 0.0f, 0.0f, i);
    if (i >= e7 || !go) return;
    OPTIM_PICK
    uint k = base + i;
    float inv_scale = 1.0f / scale[0];
    float x = master[k];
    float gr = LOAD(g, j) * inv_scale + weight_decay * x;
    float b = momentum * buf[k] + gr;
    x -= lr * (nesterov ? gr + momentum * b : b);
    buf[k] = b;
    master[k] = x;
    STORE(w, j, x);
}
