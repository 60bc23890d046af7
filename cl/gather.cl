// Batches gathered on the device from the training set held as u8, so that a
// training step copies nothing from the host.

#if defined(MPCL_STORAGE_F32)
typedef uint gather_bits_t;
typedef uint8 gather_bits8_t;
#define GATHER_STORE8(p, i, v) vstore8((v), 0, (p) + (i))
#else
typedef ushort gather_bits_t;
typedef ushort8 gather_bits8_t;
#define GATHER_STORE8 STORE_USHORT8 /* common.cl: vstore8 of ushort is 8 stores */
#endif

// x[b, j] = table[pixels[order[first + b], j]] and labels_out[b] =
// labels[order[first + b]], for b < batch, j < features. table holds byte /
// 255 for the 256 byte values already in the storage dtype (computed on the
// host, one correctly rounded division per value, then rounded as STORE
// would), so the gather copies bits and converts nothing, and device and host
// batches agree bit for bit. Work-item (j / 8, b) writes x[b, j .. j+7]: eight
// byte loads and table reads, one vector store (the last block of a row whose
// length is not a multiple of 8 goes element by element).
// x: [batch, features] storage; labels_out: [batch] int; pixels: [count,
// features] uchar; labels: [count] int; order: [count] int; table: [256]
// storage.
__kernel void mpcl_gather_batch(__global storage_t *x, __global int *labels_out,
                                __global const uchar *pixels, __global const int *labels,
                                __global const int *order, __global const storage_t *table,
                                uint first, uint features, uint batch) {
    uint j = 8u * (uint)get_global_id(0);
    uint b = get_global_id(1);
    if (j >= features || b >= batch) return;
    int s = order[first + b];
    __global const uchar *src = pixels + (size_t)s * features;
    __global gather_bits_t *dst = (__global gather_bits_t *)x + (size_t)b * features;
    __global const gather_bits_t *t = (__global const gather_bits_t *)table;
    if (features - j >= 8u) {
        uchar8 p = vload8(0, src + j);
        gather_bits8_t v = (gather_bits8_t)(t[p.s0], t[p.s1], t[p.s2], t[p.s3], t[p.s4], t[p.s5],
                                            t[p.s6], t[p.s7]);
        GATHER_STORE8(dst, j, v);
    } else {
        for (uint k = j; k < features; k++) dst[k] = t[src[k]];
    }
    if (j == 0) labels_out[b] = labels[s];
}
