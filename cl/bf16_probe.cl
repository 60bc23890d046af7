// bf16 storage verification, built by the device area on its own after
// common.cl with -DMPCL_STORAGE_BF16=1 (never part of the library program),
// so that it runs the very LOAD/STORE macros every kernel uses and the
// vector forms the GEMM uses. The host poisons every output first and
// compares the bits with its own conversion (half.c): a device that
// miscompiles the integer rounding, or does not run the kernel, fails.

// loaded[i] = the float value of in[i]; stored[i] = src[i] rounded to bf16.
__kernel void probe_bf16_storage(__global const storage_t *in, __global float *loaded,
                                 __global const float *src, __global storage_t *stored) {
    size_t i = get_global_id(0);
    loaded[i] = LOAD(in, i);
    STORE(stored, i, src[i]);
}

// The same with the 4-, 8- and 16-wide conversions, one vector per item.
__kernel void probe_bf16_storage4(__global const ushort *in, __global float *loaded,
                                  __global const float *src, __global ushort *stored) {
    size_t i = get_global_id(0);
    vstore4(mpcl_bf16_value4(vload4(i, in)), i, loaded);
    vstore4(mpcl_bf16_bits4(vload4(i, src)), i, stored);
}

__kernel void probe_bf16_storage8(__global const ushort *in, __global float *loaded,
                                  __global const float *src, __global ushort *stored) {
    size_t i = get_global_id(0);
    vstore8(mpcl_bf16_value8(vload8(i, in)), i, loaded);
    vstore8(mpcl_bf16_bits8(vload8(i, src)), i, stored);
}

__kernel void probe_bf16_storage16(__global const ushort *in, __global float *loaded,
                                   __global const float *src, __global ushort *stored) {
    size_t i = get_global_id(0);
    vstore16(mpcl_bf16_value16(vload16(i, in)), i, loaded);
    vstore16(mpcl_bf16_bits16(vload16(i, src)), i, stored);
}
