// Casts between f32, f16 and bf16 tensors. These do not depend on the storage
// dtype; the host uses them from the f16 program. Eight elements per
// work-item over ceil(n / 8) items (common.cl says why); the _v8 kernels for
// n a multiple of 8, the others for any n, the last item taking the n % 8
// left (activation.cl says why both).

// dst[i] = src[i] rounded to nearest even binary16, overflow to +-inf; NaN
// stays NaN.
#define CAST_F32_TO_F16(NAME, PART)                                                          \
    __kernel void NAME(__global half *dst, __global const float *src, uint n) {              \
        size_t i = get_global_id(0) * 8;                                                     \
        if (i >= n) return;                                                                  \
        uint r = (uint)min(n - i, (size_t)8);                                                \
        if (!(PART) || r == 8) STORE_HALF8(dst, i, LOAD_FLOAT8(src, i));                     \
        else STORE8_PART_WITH(STORE_HALF, dst, i, r, LOAD8_PART_WITH(LOAD_FLOAT, src, i, r)); \
    }

// dst[i] = src[i], exact.
#define CAST_F16_TO_F32(NAME, PART)                                                           \
    __kernel void NAME(__global float *dst, __global const half *src, uint n) {               \
        size_t i = get_global_id(0) * 8;                                                      \
        if (i >= n) return;                                                                   \
        uint r = (uint)min(n - i, (size_t)8);                                                 \
        if (!(PART) || r == 8) STORE_FLOAT8(dst, i, LOAD_HALF8(src, i));                      \
        else STORE8_PART_WITH(STORE_FLOAT, dst, i, r, LOAD8_PART_WITH(LOAD_HALF, src, i, r)); \
    }

CAST_F32_TO_F16(mpcl_cast_f32_to_f16, 1)
CAST_F32_TO_F16(mpcl_cast_f32_to_f16_v8, 0)
CAST_F16_TO_F32(mpcl_cast_f16_to_f32, 1)
CAST_F16_TO_F32(mpcl_cast_f16_to_f32_v8, 0)

// The casts that involve bf16: one element per work-item. dst[i] = src[i]
// converted, i < n: to bf16 rounded to nearest even with overflow to +-inf
// from halfway above its largest value; NaN stays NaN; bf16 to f32 is exact.
// f16 <-> bf16 goes through the exact float value, so it rounds once.
#define LOAD_F32(p, i) ((p)[(i)])
#define STORE_F32(p, i, v) ((p)[(i)] = (v))
#define CAST_KERNEL(NAME, DST_T, SRC_T, STORE_DST, LOAD_SRC)                          \
    __kernel void NAME(__global DST_T *dst, __global const SRC_T *src, uint n) {      \
        uint i = get_global_id(0);                                                    \
        if (i < n) STORE_DST(dst, i, LOAD_SRC(src, i));                               \
    }
CAST_KERNEL(mpcl_cast_f32_to_bf16, ushort, float, STORE_BF16, LOAD_F32)
CAST_KERNEL(mpcl_cast_bf16_to_f32, float, ushort, STORE_F32, LOAD_BF16)
CAST_KERNEL(mpcl_cast_f16_to_bf16, ushort, half, STORE_BF16, LOAD_HALF)
CAST_KERNEL(mpcl_cast_bf16_to_f16, half, ushort, STORE_HALF, LOAD_BF16)
#undef CAST_KERNEL
#undef LOAD_F32
#undef STORE_F32
