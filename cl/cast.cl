// Casts between f32, f16 and bf16 tensors. These do not depend on the storage
// dtype, and every program holds them. Eight elements per work-item over
// ceil(n / 8) items (common.cl says why); the _v8 kernels for n a multiple
// of 8, the others for any n, the last item taking the n % 8 left
// (activation.cl says why both).
//
// dst[i] = src[i] converted: to f16 or bf16 rounded to nearest even,
// overflow to +-inf (bf16: from halfway above its largest value); NaN stays
// NaN; f16 and bf16 to f32 are exact; f16 <-> bf16 goes through the exact
// float value, so it rounds once.
#define CAST8(NAME, PART, DST_T, SRC_T, STORE_DST8, LOAD_SRC8, STORE_DST, LOAD_SRC)            \
    __kernel void NAME(__global DST_T *dst, __global const SRC_T *src, uint n) {              \
        size_t i = get_global_id(0) * 8;                                                      \
        if (i >= n) return;                                                                   \
        uint r = (uint)min(n - i, (size_t)8);                                                 \
        if (!(PART) || r == 8) STORE_DST8(dst, i, LOAD_SRC8(src, i));                         \
        else STORE8_PART_WITH(STORE_DST, dst, i, r, LOAD8_PART_WITH(LOAD_SRC, src, i, r));     \
    }
// Both kernels of a cast: NAME (any n) and NAME_v8 (n a multiple of 8),
// from the eight-element and the scalar store and load macros (common.cl).
#define CAST(NAME, DST_T, SRC_T, STORE_DST8, LOAD_SRC8, STORE_DST, LOAD_SRC)        \
    CAST8(NAME, 1, DST_T, SRC_T, STORE_DST8, LOAD_SRC8, STORE_DST, LOAD_SRC)      \
    CAST8(NAME##_v8, 0, DST_T, SRC_T, STORE_DST8, LOAD_SRC8, STORE_DST, LOAD_SRC)

CAST(mpcl_cast_f32_to_f16, half, float, STORE_HALF8, LOAD_FLOAT8, STORE_HALF, LOAD_FLOAT)
CAST(mpcl_cast_f16_to_f32, float, half, STORE_FLOAT8, LOAD_HALF8, STORE_FLOAT, LOAD_HALF)
CAST(mpcl_cast_f32_to_bf16, ushort, float, STORE_BF16_8, LOAD_FLOAT8, STORE_BF16, LOAD_FLOAT)
CAST(mpcl_cast_bf16_to_f32, float, ushort, STORE_FLOAT8, LOAD_BF16_8, STORE_FLOAT, LOAD_BF16)
CAST(mpcl_cast_f16_to_bf16, ushort, half, STORE_BF16_8, LOAD_HALF8, STORE_BF16, LOAD_HALF)
CAST(mpcl_cast_bf16_to_f16, half, ushort, STORE_HALF8, LOAD_BF16_8, STORE_HALF, LOAD_BF16)
#undef CAST
#undef CAST8
