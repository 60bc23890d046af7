// Batches gathered on the device from the training set held as u8, so that a
// training step copies nothing from the host.

// x[b, j] = scale[pixels[order[first + b], j]] and labels_out[b] =
// labels[order[first + b]], for b < batch, j < features. scale is the 256-entry
// table byte / 255 computed on the host (one correctly rounded division per
// byte value), so device and host batches agree bit for bit.
// x: [batch, features] storage; labels_out: [batch] int; pixels: [count,
// features] uchar; labels: [count] int; order: [count] int; scale: [256] float.
__kernel void mpcl_gather_batch(__global storage_t *x, __global int *labels_out,
                                __global const uchar *pixels, __global const int *labels,
                                __global const int *order, __global const float *scale,
                                uint first, uint features, uint batch) {
    uint j = get_global_id(0);
    uint b = get_global_id(1);
    if (j >= features || b >= batch) return;
    int s = order[first + b];
    STORE(x, b * features + j, scale[pixels[(size_t)s * features + j]]);
    if (j == 0) labels_out[b] = labels[s];
}
