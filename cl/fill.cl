// Fill, copy and add, in the storage dtype.

// x[i] = value for i < n.
__kernel void mpcl_fill(__global storage_t *x, float value, uint n) {
    uint i = get_global_id(0);
    if (i < n) STORE(x, i, value);
}

// out[i] = a[i] + b[i] for i < n: the sum in f32, rounded once into the
// storage dtype (a residual connection's forward and its gradient's two
// paths). out may be a or b: each item reads its element before it stores.
__kernel void mpcl_add(__global storage_t *out, __global const storage_t *a,
                       __global const storage_t *b, uint n) {
    uint i = get_global_id(0);
    if (i < n) STORE(out, i, LOAD(a, i) + LOAD(b, i));
}

// dst[i] = src[i] for i < n4, four floats per item (f32 buffers only; used to
// measure device copy bandwidth). The host divides its float count by
// MPCL_ABI_COPY_F32_LANES (cl/abi.h), which the float4 fixes.
#if MPCL_ABI_COPY_F32_LANES != 4
#error "mpcl_copy_f32x4 copies float4s: MPCL_ABI_COPY_F32_LANES must be 4"
#endif
__kernel void mpcl_copy_f32x4(__global float4 *dst, __global const float4 *src, uint n4) {
    uint i = get_global_id(0);
    if (i < n4) dst[i] = src[i];
}

// Gradient accumulation over micro-batches (mpcl_model_stash_grads): the
// stash sums the micro-batches' gradients in f32, so that a 16-bit
// gradient is rounded once, when the sum goes back before the update.
// stash[i] = g[i], or stash[i] += g[i] with add.
__kernel void mpcl_grad_stash(__global float *stash, __global const storage_t *g, uint n, uint add) {
    uint i = get_global_id(0);
    if (i < n) stash[i] = (add ? stash[i] : 0.0f) + LOAD(g, i);
}

// g[i] += stash[i] (the last micro-batch's gradient and the sum before it).
__kernel void mpcl_grad_unstash(__global const float *stash, __global storage_t *g, uint n) {
    uint i = get_global_id(0);
    if (i < n) STORE(g, i, LOAD(g, i) + stash[i]);
}
