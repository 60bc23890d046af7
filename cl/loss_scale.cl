// Loss scaling: the non-finite scan of gradients and the scale state machine.
// The state is a uint[MPCL_ABI_LS_STATE_WORDS] buffer on the device at the
// MPCL_ABI_LS_* offsets of cl/abi.h, which src/compute/loss_scale.c reads and
// writes too; the optimizer kernels read found_inf from it.

// A bit test rather than isfinite(): it cannot be folded away by a compiler
// that assumes finite math, and vload_half keeps inf and NaN as they are.
#define loss_scale_nonfinite(x) ((as_uint(x) & 0x7f800000u) == 0x7f800000u)

// The scan tests the storage bits themselves, with no conversion to float: an
// element is inf or NaN exactly when its exponent field is all ones, in every
// storage format. bits16 is 16 elements (one vload16), mask16 the lanes of a
// comparison of them.
#if defined(MPCL_STORAGE_F32)
typedef uint loss_scale_bits;
typedef uint16 loss_scale_bits16;
typedef int16 loss_scale_mask16;
#define LOSS_SCALE_EXP 0x7f800000u
#elif defined(MPCL_STORAGE_F16)
typedef ushort loss_scale_bits;
typedef ushort16 loss_scale_bits16;
typedef short16 loss_scale_mask16;
#define LOSS_SCALE_EXP ((ushort)0x7c00u)
#elif defined(MPCL_STORAGE_BF16)
typedef ushort loss_scale_bits;
typedef ushort16 loss_scale_bits16;
typedef short16 loss_scale_mask16;
#define LOSS_SCALE_EXP ((ushort)0x7f80u)
#endif

// Work-item gid of gsz scans vectors gid, gid + gsz, ... of 16 elements (a
// GPU's neighbouring items read neighbouring vectors), then the n % 16
// elements past the last whole vector one each. The loop body is vector code
// of its own: a CPU runtime does not vectorize a kernel's loops across
// work-items, so the per-element scalar loop it replaced ran at a tenth of
// memory speed.
#define LOSS_SCALE_SCAN(g, n)                                                      \
    {                                                                              \
        __global const loss_scale_bits *b = (__global const loss_scale_bits *)(g); \
        uint whole = (n) / 16u;                                                    \
        for (uint j = gid; j < whole; j += gsz)                                    \
            acc |= (vload16(j, b) & LOSS_SCALE_EXP) == LOSS_SCALE_EXP;             \
        for (uint j = whole * 16u + gid; j < (n); j += gsz)                        \
            bad |= (b[j] & LOSS_SCALE_EXP) == LOSS_SCALE_EXP;                      \
    }

// Up to eight gradient tensors g0..g7 of n0..n7 elements (unused ones have
// n = 0). Each work-item strides over every tensor; one that met inf or NaN
// ORs 1 into state[FOUND_INF] (atomically: many may report at once), once at
// its end, so that the store is not in the loop. The host launches about one
// item per 256 elements of the largest tensor, any number works. The host
// sets MPCL_ABI_LS_CHECK_TENSORS pairs and then the state, so the arity below
// must be that.
#if MPCL_ABI_LS_CHECK_TENSORS != 8
#error "mpcl_loss_scale_check spells out eight (g, n) pairs: MPCL_ABI_LS_CHECK_TENSORS must be 8"
#endif
__kernel void mpcl_loss_scale_check(__global const storage_t *g0, uint n0,
                                    __global const storage_t *g1, uint n1,
                                    __global const storage_t *g2, uint n2,
                                    __global const storage_t *g3, uint n3,
                                    __global const storage_t *g4, uint n4,
                                    __global const storage_t *g5, uint n5,
                                    __global const storage_t *g6, uint n6,
                                    __global const storage_t *g7, uint n7,
                                    __global uint *state) {
    uint gid = get_global_id(0), gsz = get_global_size(0);
    loss_scale_mask16 acc = 0;
    int bad = 0;
    LOSS_SCALE_SCAN(g0, n0)
    LOSS_SCALE_SCAN(g1, n1)
    LOSS_SCALE_SCAN(g2, n2)
    LOSS_SCALE_SCAN(g3, n3)
    LOSS_SCALE_SCAN(g4, n4)
    LOSS_SCALE_SCAN(g5, n5)
    LOSS_SCALE_SCAN(g6, n6)
    LOSS_SCALE_SCAN(g7, n7)
    if (bad || any(acc)) atomic_or(&state[MPCL_ABI_LS_FOUND_INF], 1u);
}

// The step's scale update (see include/mpcl/loss_scale.h), run by one
// work-item: by mpcl_loss_scale_update, and by the optimizer's end-of-step
// kernel (optim.cl), which saves a model step that launch. scale: f32 [1];
// state: uint [MPCL_ABI_LS_STATE_WORDS]. dynamic = 0 keeps the scale fixed.
// The two kernels take these arguments first and in this order
// (mpcl__loss_scale_set_update_args).
#define LOSS_SCALE_UPDATE_PARAMS                                                       \
    __global float *scale, __global uint *state, uint dynamic, uint growth_interval, \
        float growth_factor, float backoff_factor, float min_scale, float max_scale
#define LOSS_SCALE_UPDATE_ARGS \
    scale, state, dynamic, growth_interval, growth_factor, backoff_factor, min_scale, max_scale
static void loss_scale_update(LOSS_SCALE_UPDATE_PARAMS) {
    uint found = state[MPCL_ABI_LS_FOUND_INF] != 0u;
    float s = scale[0];
    if (found) {
        state[MPCL_ABI_LS_SKIPPED] += 1u;
        if (dynamic) {
            s = fmax(s * backoff_factor, min_scale);
            state[MPCL_ABI_LS_GOOD] = 0u;
        }
    } else if (dynamic) {
        uint good = state[MPCL_ABI_LS_GOOD] + 1u;
        if (good >= growth_interval) {
            float grown = s * growth_factor;
            if (!loss_scale_nonfinite(grown) && grown <= max_scale) s = grown;
            good = 0u;
        }
        state[MPCL_ABI_LS_GOOD] = good;
    }
    scale[0] = s;
    state[MPCL_ABI_LS_LAST_FOUND_INF] = found;
    state[MPCL_ABI_LS_FOUND_INF] = 0u;
}

__kernel void mpcl_loss_scale_update(LOSS_SCALE_UPDATE_PARAMS) {
    if (get_global_id(0) == 0) loss_scale_update(LOSS_SCALE_UPDATE_ARGS);
}
