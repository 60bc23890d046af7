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

// x[b, j] = pixels[order[first + b], j] / 255 in the storage dtype (the f32
// quotient rounded as STORE rounds, as the host's mpcl_dataset_batch value
// would be) and labels_out[b] = labels[order[first + b]], for b < batch,
// j < features. Range (C, batch): the C items of row b take its blocks of
// eight in turn (item c blocks c, c + C, ...), each with one vector store,
// the last block of a row whose length is not a multiple of 8 element by
// element. A few items per row rather than one per block: 12544 items of
// one block cost PoCL twice the time of 512 that loop.
// x: [batch, features] storage; labels_out: [batch] int; pixels: [count,
// features] uchar; labels: [count] int; order: [count] int.
__kernel void mpcl_gather_batch(__global storage_t *x, __global int *labels_out,
                                __global const uchar *pixels, __global const int *labels,
                                __global const int *order, uint first, uint features,
                                uint batch) {
    uint b = get_global_id(1);
    if (b >= batch) return;
    int s = order[first + b];
    __global const uchar *src = pixels + (size_t)s * features;
    __global storage_t *dst = x + (size_t)b * features;
    uint j0 = 8u * (uint)get_global_id(0), step = 8u * (uint)get_global_size(0);
    for (uint j = j0; j < features; j += step) {
        if (features - j >= 8u) {
            STORE8(dst, j, gather_scale(convert_float8(vload8(0, src + j))));
        } else {
            uint n = features - j;
            STORE8_PART(dst, j, n, gather_scale(LOAD8_PART_WITH(GATHER_LOAD_BYTE, src, j, n)));
        }
    }
    if (j0 == 0) labels_out[b] = labels[s];
}
