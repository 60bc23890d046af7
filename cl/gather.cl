// Batches gathered on the device from the training set held as u8, so that a
// training step copies nothing from the host.

// byte / 255, correctly rounded to f32, on eight lanes: q0 = byte * RN(1/255)
// is off by an ulp for about half the byte values; one correction step with
// the exact residual r = byte - q0 * 255 (an fma) gives the correctly rounded
// quotient for all 256 (Markstein's theorem; test_train checks every byte
// value, on the host and through this kernel). It replaced a table lookup
// per element: PoCL made two vpgatherdd of each eight, and the 128x784 batch
// took 40-56 us of a ~600 us step (Zen 4).
#define GATHER_INV_255 (1.0f / 255.0f)
#define GATHER_LOAD_BYTE(p, i) ((float)(p)[(i)])
static float8 gather_scale(float8 b) {
    float8 q = b * GATHER_INV_255;
    // fabs: the quotient is >= 0, but Rusticl (llvmpipe) gave -0 for byte 0.
    return fabs(fma(fma(-q, 255.0f, b), GATHER_INV_255, q));
}

// The source rows as float8 (and a row's tail, n < 8 elements): u8 scaled by
// 1/255 (gather_scale), f32 and f16 as they are.
#define GATHER_U8_ROW8(src, j) gather_scale(convert_float8(vload8(0, (src) + (j))))
#define GATHER_U8_TAIL(src, j, n) gather_scale(LOAD8_PART_WITH(GATHER_LOAD_BYTE, (src), (j), (n)))
#define GATHER_F32_ROW8(src, j) LOAD_FLOAT8((src), (j))
#define GATHER_F32_TAIL(src, j, n) LOAD8_PART_WITH(LOAD_FLOAT, (src), (j), (n))
#define GATHER_F16_ROW8(src, j) LOAD_HALF8((src), (j))
#define GATHER_F16_TAIL(src, j, n) LOAD8_PART_WITH(LOAD_HALF, (src), (j), (n))

// x[b, j] = xs[order[first + b], j] in the storage dtype (u8 as byte / 255:
// the f32 quotient rounded as STORE rounds, as the host's mpcl_dataset_batch
// value would be; f32 and f16 sources converted as STORE rounds) and, when
// labels_out is not NULL, labels_out[b] = labels[order[first + b]], for
// b < batch, j < features. Range (C, batch): the C items of row b take its
// blocks of eight in turn (item c blocks c, c + C, ...), each with one vector
// store, the last block of a row whose length is not a multiple of 8 element
// by element. A few items per row rather than one per block: 12544 items of
// one block cost PoCL twice the time of 512 that loop.
// x: [batch, features] storage; labels_out: [batch] int; xs: [count,
// features] of SRC_T; labels: [count] int; order: [count] int.
#define GATHER_BATCH_KERNEL(NAME, SRC_T, ROW8, TAIL)                                         \
    __kernel void NAME(__global storage_t *x, __global int *labels_out,                     \
                       __global const SRC_T *xs, __global const int *labels,                \
                       __global const int *order, uint first, uint features, uint batch) {  \
        uint b = get_global_id(1);                                                           \
        if (b >= batch) return;                                                              \
        int s = order[first + b];                                                            \
        __global const SRC_T *src = xs + (size_t)s * features;                               \
        __global storage_t *dst = x + (size_t)b * features;                                  \
        uint j0 = 8u * (uint)get_global_id(0), step = 8u * (uint)get_global_size(0);         \
        for (uint j = j0; j < features; j += step) {                                         \
            if (features - j >= 8u)                                                          \
                STORE8(dst, j, ROW8(src, j));                                                \
            else                                                                             \
                STORE8_PART(dst, j, features - j, TAIL(src, j, features - j));               \
        }                                                                                    \
        if (j0 == 0 && labels_out) labels_out[b] = labels[s];                                \
    }
GATHER_BATCH_KERNEL(mpcl_gather_batch, uchar, GATHER_U8_ROW8, GATHER_U8_TAIL)
GATHER_BATCH_KERNEL(mpcl_gather_batch_f32, float, GATHER_F32_ROW8, GATHER_F32_TAIL)
GATHER_BATCH_KERNEL(mpcl_gather_batch_f16, half, GATHER_F16_ROW8, GATHER_F16_TAIL)

// out[b, t] = targets[order[first + b], t]: the f32 target columns of a
// batch. Range (cols, batch).
// out: [batch, cols] float; targets: [count, cols] float; order: [count] int.
__kernel void mpcl_gather_targets(__global float *out, __global const float *targets,
                                  __global const int *order, uint first, uint cols, uint batch) {
    uint t = get_global_id(0), b = get_global_id(1);
    if (t >= cols || b >= batch) return;
    out[(size_t)b * cols + t] = targets[(size_t)order[first + b] * cols + t];
}
