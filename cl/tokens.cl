// Windows of a token stream (include/mpcl/tokens.h), drawn on the device
// from the stream it holds, so that a step copies nothing from the host.
// The starts are mpcl_counter_draw's (cl/dropout.cl, joined before this
// file): the bits of the host's mpcl_token_window_start.

// Token i of a stream held as little-endian uint16 byte pairs (the same
// tokens whatever the device's byte order).
static inline int mpcl_token_at(__global const uchar *stream, ulong i) {
    return (int)stream[2 * i] | (int)stream[2 * i + 1] << 8;
}

// Row b holds window w = w0 + b of the step (a replica's slice of the
// global batch starts at its w0), which begins at s = first + mul_hi(draw w
// of key, starts), one of the part's `starts` beginnings: inputs[b, t] =
// token s + t, targets[b, t] = token s + t + 1. Range (T, B).
// inputs, targets: [B, T] int; stream: the tokens, 2 bytes each.
__kernel void mpcl_token_windows(__global int *inputs, __global int *targets,
                                 __global const uchar *stream, ulong first, ulong starts,
                                 ulong key, uint T, uint B, ulong w0) {
    uint t = get_global_id(0), b = get_global_id(1);
    if (t >= T || b >= B) return;
    ulong s = first + mul_hi(mpcl_counter_draw(key, w0 + b), starts) + t;
    size_t o = (size_t)b * T + t;
    inputs[o] = mpcl_token_at(stream, s);
    targets[o] = mpcl_token_at(stream, s + 1);
}
