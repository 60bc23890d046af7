// Casts between f32 and f16 tensors. These do not depend on the storage
// dtype; the host uses them from the f16 program.

// dst[i] = src[i] rounded to nearest even binary16, overflow to +-inf; NaN
// stays NaN.
__kernel void mpcl_cast_f32_to_f16(__global half *dst, __global const float *src, uint n) {
    uint i = get_global_id(0);
    if (i < n) STORE_HALF(dst, i, src[i]);
}

// dst[i] = src[i], exact.
__kernel void mpcl_cast_f16_to_f32(__global float *dst, __global const half *src, uint n) {
    uint i = get_global_id(0);
    if (i < n) dst[i] = LOAD_HALF(src, i);
}
