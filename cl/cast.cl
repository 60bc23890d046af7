// Casts between f32, f16 and bf16 tensors. These do not depend on the
// storage dtype: every program holds them, and the host takes them from the
// program of the 16-bit side so that a run builds no extra program.
//
// dst[i] = src[i] converted, i < n: to f16 or bf16 rounded to nearest even
// with overflow to +-inf (f16 past 65520, bf16 from halfway above its
// largest value); NaN stays NaN; f16 and bf16 to f32 are exact. f16 <-> bf16
// goes through the exact float value, so it rounds once.
#define LOAD_F32(p, i) ((p)[(i)])
#define STORE_F32(p, i, v) ((p)[(i)] = (v))
#define CAST_KERNEL(NAME, DST_T, SRC_T, STORE_DST, LOAD_SRC)                          \
    __kernel void NAME(__global DST_T *dst, __global const SRC_T *src, uint n) {      \
        uint i = get_global_id(0);                                                    \
        if (i < n) STORE_DST(dst, i, LOAD_SRC(src, i));                               \
    }
CAST_KERNEL(mpcl_cast_f32_to_f16, half, float, STORE_HALF, LOAD_F32)
CAST_KERNEL(mpcl_cast_f16_to_f32, float, half, STORE_F32, LOAD_HALF)
CAST_KERNEL(mpcl_cast_f32_to_bf16, ushort, float, STORE_BF16, LOAD_F32)
CAST_KERNEL(mpcl_cast_bf16_to_f32, float, ushort, STORE_F32, LOAD_BF16)
CAST_KERNEL(mpcl_cast_f16_to_bf16, ushort, half, STORE_BF16, LOAD_HALF)
CAST_KERNEL(mpcl_cast_bf16_to_f16, half, ushort, STORE_HALF, LOAD_BF16)
#undef CAST_KERNEL
#undef LOAD_F32
#undef STORE_F32
