// The AVX512-BF16 dot product's verification, built on its own after
// common.cl with -DMPCL_STORAGE_BF16=1 -DMPCL_BF16_DOT_X86=1 (never part of
// the library program) and run only where the host CPU has the instruction
// (src/runtime/fp16_verify.c): out[j] = acc[j] plus the dot product of the
// bf16 pairs a[j] and b[j], through the same macro the GEMM uses. The host
// poisons out and compares every lane with its own model of the instruction.
__kernel void probe_bf16_dot(__global const uint *a, __global const uint *b,
                             __global const float *acc, __global float *out) {
    const size_t i = get_global_id(0);
    float16 x = vload16(i, acc);
    const uint16 av = vload16(i, a), bv = vload16(i, b);
    MPCL_BF16_DOT16(x, av, bv);
    vstore16(x, i, out);
}
