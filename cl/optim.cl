// Optimizer updates over flat arenas (see include/mpcl/optim.h). Work-item i
// owns element i of every arena: master, state, working copy and gradient.
//
// Common arguments:
//   scale:    f32 [1], the loss scale; gradients are multiplied by 1/scale.
//   ls_state: the loss scaler's state (cl/abi.h); [MPCL_ABI_LS_FOUND_INF] is
//             found_inf. When set, the update writes back the values it read
//             (weights, state and working copy keep their bits) and the step
//             state does not advance.
//   clip:     f32 {norm, factor} (cl/abi.h): gradients are multiplied by
//             factor (1 when not clipping).
//   step:     uint {count, the bits of the f32 bias corrections
//             1 - beta1^(count+1) and 1 - beta2^(count+1) for the coming step}
//             (cl/abi.h). The update reads it; mpcl_optim_advance, one work-item
//             enqueued after the update, moves it to the next step. The
//             corrections are computed there, once, because transcendentals
//             per element made the update 50x slower on PoCL (pown or
//             expm1/log1p are scalar calls there), and because any branch
//             with such a call in the update kernel keeps PoCL from
//             vectorizing it (the f16 update ran at 0.05x of a copy).
// 1 - beta^t as -expm1(t * log1p(beta - 1)): a few ulp even at t = 1, where
// 1 - beta^t cancels (beta - 1 is exact for beta in [0.5, 1)). beta = 0 gives
// log1p(-1) = -inf and so 1.
static float optim_bias_correction(float beta, uint t) {
    return -expm1((float)t * log1p(beta - 1.0f));
}

// Sets the step state to {t, bias corrections of step t + 1, 0} (resume and
// reset): one work-item. The host never computes them, so they are the same
// bits the update would have produced.
static void optim_step_state(__global uint *step, uint t, float beta1, float beta2) {
    step[MPCL_ABI_OPTIM_STEP_COUNT] = t;
    step[MPCL_ABI_OPTIM_STEP_BC1] = as_uint(optim_bias_correction(beta1, t + 1u));
    step[MPCL_ABI_OPTIM_STEP_BC2] = as_uint(optim_bias_correction(beta2, t + 1u));
    for (uint k = MPCL_ABI_OPTIM_STEP_BC2 + 1u; k < MPCL_ABI_OPTIM_STEP_WORDS; k++) step[k] = 0u;
}

__kernel void mpcl_optim_set_step(__global uint *step, uint t, float beta1, float beta2) {
    if (get_global_id(0) == 0) optim_step_state(step, t, beta1, beta2);
}

// After the update, one work-item: the next step's state, unless the step was
// skipped (found_inf), which leaves the counter and corrections as they were.
__kernel void mpcl_optim_advance(__global uint *step, __global const uint *ls_state, float beta1,
                                 float beta2) {
    if (get_global_id(0) == 0 && ls_state[MPCL_ABI_LS_FOUND_INF] == 0u)
        optim_step_state(step, step[MPCL_ABI_OPTIM_STEP_COUNT] + 1u, beta1, beta2);
}

// The same, then the loss-scale update (loss_scale.cl), in one launch: the
// end of a model's step under loss scaling. The advance reads found_inf
// before the update clears it, the order the two separate kernels keep.
__kernel void mpcl_optim_advance_scale(LOSS_SCALE_UPDATE_PARAMS, __global uint *step, float beta1,
                                       float beta2) {
    if (get_global_id(0) != 0) return;
    if (state[MPCL_ABI_LS_FOUND_INF] == 0u)
        optim_step_state(step, step[MPCL_ABI_OPTIM_STEP_COUNT] + 1u, beta1, beta2);
    loss_scale_update(LOSS_SCALE_UPDATE_ARGS);
}

// The update kernels are straight-line code, so that a CPU runtime
// vectorizes them: no range check (the host launches exactly the elements it
// wants; a guard `if (i >= n) return;` made PoCL run the Adam update scalar,
// 5x slower), and a skipped step (found_inf) computes the update and then
// stores the old values back (the same bits: the working copy is always the
// master rounded) rather than branching. Each comes in two forms from one
// body: eight elements per work-item (_v8: float8 arithmetic, and f16 through
// vload_half8 / vstore_half8_rte, one conversion instruction per eight on
// PoCL) for the whole groups, and one element per work-item for a tail.
#define OPTIM_LOAD1(p, i) ((p)[(i)])
#define OPTIM_STORE1(p, i, v) ((p)[(i)] = (v))

// Every update kernel takes the same arguments: the master, the state slots
// its table row keeps (M, then V), the working copy, the gradients, the
// decay flags, then every generic hyperparameter (mpcl_optim_params), of
// which it reads the ones its kind declares.
//
// decay: one byte per MPCL_ABI_ELEMENTWISE_VEC elements (a v8 item's
// elements, element i's at i / MPCL_ABI_ELEMENTWISE_VEC): 1 where
// weight_decay applies, 0 where it does not (a model's vectors under
// decay_vectors = false; its rows start on such a chunk). Read once per
// item; a flag of 1 gives weight_decay itself, so the update keeps its bits.
#define OPTIM_HYPERS                                                                   \
    float lr, float beta1, float beta2, float eps, float weight_decay, float momentum, \
        uint nesterov
#define OPTIM_COMMON                                                                  \
    __global storage_t *restrict w, __global const storage_t *restrict g, uint base,  \
        __global const float *restrict scale, __global const uint *restrict ls_state, \
        __global const float *restrict clip, __global const uint *restrict step,      \
        __global const uchar *restrict decay, OPTIM_HYPERS
// The element index, the per-work-group constants every update starts with
// and the weight decay of this item's elements.
#define OPTIM_BEGIN(N)                                                         \
    uint i = base + N * (uint)get_global_id(0);                                \
    int skip = ls_state[MPCL_ABI_LS_FOUND_INF] != 0u;                          \
    float gscale = clip[MPCL_ABI_OPTIM_CLIP_FACTOR] / scale[0];                \
    float wd = decay[i / MPCL_ABI_ELEMENTWISE_VEC] != 0 ? weight_decay : 0.0f; \
    (void)step;                                                                \
    (void)wd;

// Adam (DECOUPLED 0: L2 weight decay) and AdamW (DECOUPLED 1).
#define OPTIM_ADAM_KERNEL(NAME, DECOUPLED, T, N, LOADF, STOREF, LOADW, STOREW)      \
    __kernel void NAME(__global float *restrict master, __global float *restrict m, \
                       __global float *restrict v, OPTIM_COMMON) {                  \
        OPTIM_BEGIN(N)                                                              \
        /* Per work-group constants: one division and one square root per */        \
        /* element, not three divisions. */                                         \
        float step_size = lr / as_float(step[MPCL_ABI_OPTIM_STEP_BC1]);             \
        float inv_bc2 = 1.0f / as_float(step[MPCL_ABI_OPTIM_STEP_BC2]);             \
        /* Decoupled decay scales the weight; L2 adds to the gradient. */           \
        T x0 = LOADF(master, i), m0 = LOADF(m, i), v0 = LOADF(v, i);                \
        T x = DECOUPLED ? x0 - lr * wd * x0 : x0;                                   \
        T gr = LOADW(g, i) * gscale;                                                \
        gr = DECOUPLED ? gr : gr + wd * x0;                                         \
        T mi = beta1 * m0 + (1.0f - beta1) * gr;                                    \
        T vi = beta2 * v0 + (1.0f - beta2) * gr * gr;                               \
        x -= step_size * mi / (sqrt(vi * inv_bc2) + eps);                           \
        x = skip ? x0 : x;                                                          \
        STOREF(m, i, skip ? m0 : mi);                                               \
        STOREF(v, i, skip ? v0 : vi);                                               \
        STOREF(master, i, x);                                                       \
        STOREW(w, i, x);                                                            \
    }
OPTIM_ADAM_KERNEL(mpcl_optim_adam, 0, float, 1, OPTIM_LOAD1, OPTIM_STORE1, LOAD, STORE)
OPTIM_ADAM_KERNEL(mpcl_optim_adam_v8, 0, float8, MPCL_ABI_ELEMENTWISE_VEC, LOAD_FLOAT8, STORE_FLOAT8, LOAD8, STORE8)
OPTIM_ADAM_KERNEL(mpcl_optim_adamw, 1, float, 1, OPTIM_LOAD1, OPTIM_STORE1, LOAD, STORE)
OPTIM_ADAM_KERNEL(mpcl_optim_adamw_v8, 1, float8, MPCL_ABI_ELEMENTWISE_VEC, LOAD_FLOAT8, STORE_FLOAT8, LOAD8, STORE8)

// SGD with momentum (PyTorch form, dampening 0).
#define OPTIM_SGD_KERNEL(NAME, T, N, LOADF, STOREF, LOADW, STOREW)                    \
    __kernel void NAME(__global float *restrict master, __global float *restrict buf, \
                       OPTIM_COMMON) {                                                \
        OPTIM_BEGIN(N)                                                                \
        T x0 = LOADF(master, i), b0 = LOADF(buf, i);                                  \
        T gr = LOADW(g, i) * gscale + wd * x0;                                        \
        T b = momentum * b0 + gr;                                                     \
        T x = x0 - lr * (nesterov ? gr + momentum * b : b);                           \
        x = skip ? x0 : x;                                                            \
        STOREF(buf, i, skip ? b0 : b);                                                \
        STOREF(master, i, x);                                                         \
        STOREW(w, i, x);                                                              \
    }
OPTIM_SGD_KERNEL(mpcl_optim_sgd, float, 1, OPTIM_LOAD1, OPTIM_STORE1, LOAD, STORE)
OPTIM_SGD_KERNEL(mpcl_optim_sgd_v8, float8, MPCL_ABI_ELEMENTWISE_VEC, LOAD_FLOAT8, STORE_FLOAT8, LOAD8, STORE8)

// RMSprop, not centered (PyTorch form: eps after the square root; beta2 is
// rho).
#define OPTIM_RMSPROP_KERNEL(NAME, T, N, LOADF, STOREF, LOADW, STOREW)                \
    __kernel void NAME(__global float *restrict master, __global float *restrict buf, \
                       __global float *restrict v, OPTIM_COMMON) {                    \
        OPTIM_BEGIN(N)                                                                \
        T x0 = LOADF(master, i), b0 = LOADF(buf, i), v0 = LOADF(v, i);                \
        T gr = LOADW(g, i) * gscale;                                                  \
        T vi = beta2 * v0 + (1.0f - beta2) * gr * gr;                                 \
        T b = momentum * b0 + gr / (sqrt(vi) + eps);                                  \
        T x = x0 - lr * b;                                                            \
        x = skip ? x0 : x;                                                            \
        STOREF(buf, i, skip ? b0 : b);                                                \
        STOREF(v, i, skip ? v0 : vi);                                                 \
        STOREF(master, i, x);                                                         \
        STOREW(w, i, x);                                                              \
    }
OPTIM_RMSPROP_KERNEL(mpcl_optim_rmsprop, float, 1, OPTIM_LOAD1, OPTIM_STORE1, LOAD, STORE)
OPTIM_RMSPROP_KERNEL(mpcl_optim_rmsprop_v8, float8, MPCL_ABI_ELEMENTWISE_VEC, LOAD_FLOAT8, STORE_FLOAT8, LOAD8, STORE8)

// working[offset + i] = master[offset + i] rounded to the storage dtype: after
// the host wrote masters (initial weights, a checkpoint), the same rounding
// as an update.
__kernel void mpcl_optim_refresh(__global storage_t *w, __global const float *master,
                                 uint offset, uint n) {
    uint i = get_global_id(0);
    if (i < n) STORE(w, offset + i, master[offset + i]);
}

// The first pass of the global norm: MPCL_ABI_OPTIM_NORM_GROUPS work-groups of
// MPCL_ABI_OPTIM_NORM_WG items stride over the gradients, each group writes its sum of
// squares to partial[group]. Fixed order everywhere: the same gradients give
// the same bits.
__kernel __attribute__((reqd_work_group_size(MPCL_ABI_OPTIM_NORM_WG, 1, 1))) void mpcl_optim_grad_sumsq(
    __global const storage_t *g, uint n, __global float *partial) {
    __local float acc[MPCL_ABI_OPTIM_NORM_WG];
    uint lid = get_local_id(0), gid = get_global_id(0), gsz = get_global_size(0);
    float s = 0.0f;
    for (uint i = gid; i < n; i += gsz) {
        float x = LOAD(g, i);
        s = fma(x, x, s);
    }
    acc[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint half_size = MPCL_ABI_OPTIM_NORM_WG / 2; half_size > 0; half_size /= 2) {
        if (lid < half_size) acc[lid] += acc[lid + half_size];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) partial[get_group_id(0)] = acc[0];
}

// The second pass, one work-item: norm = sqrt(sum) / scale (the unscaled
// gradient's norm) and the clip factor min(1, clip_norm / norm).
__kernel void mpcl_optim_grad_norm(__global const float *partial, __global const float *scale,
                                   float clip_norm, __global float *clip) {
    if (get_global_id(0) != 0) return;
    float s = 0.0f;
    for (uint k = 0; k < MPCL_ABI_OPTIM_NORM_GROUPS; k++) s += partial[k];
    float norm = sqrt(s) / scale[0];
    clip[MPCL_ABI_OPTIM_CLIP_NORM] = norm;
    clip[MPCL_ABI_OPTIM_CLIP_FACTOR] = norm > clip_norm ? clip_norm / norm : 1.0f;
}
