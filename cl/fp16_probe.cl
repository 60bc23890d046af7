// fp16 verification kernels, built on their own by the device area (never part
// of the library's program). The host poisons every output first and compares
// the numbers with its own binary16 rounding: a device that compiles `half`
// but does not run it (Oclgrind) leaves the poison and fails.

// vload_half / vstore_half_rte: OpenCL 1.2 core, f32 math, f16 storage.
// loaded[i] = the float value of in[i]; stored[i] = src[i] rounded to half.
__kernel void probe_half_storage(__global const half *in, __global float *loaded,
                                 __global const float *src, __global half *stored) {
    size_t i = get_global_id(0);
    loaded[i] = vload_half(i, in);
    vstore_half_rte(src[i], i, stored);
}

#ifdef MPCL_PROBE_HALF_MATH
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
// Half arithmetic: each result is rounded to half by the operation itself, so
// a device that secretly computes in float gives different numbers for the
// cases the host picks (1 + 2^-11 is 1 in half).
__kernel void probe_half_math(__global const float *a, __global const float *b,
                              __global float *prod, __global float *sum) {
    size_t i = get_global_id(0);
    half x = (half)a[i];
    half y = (half)b[i];
    prod[i] = (float)(x * y);
    sum[i] = (float)(x + y);
}
#endif
