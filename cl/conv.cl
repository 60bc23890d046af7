// Convolution (im2col and its adjoint col2im) and max pooling on NHWC
// images: a [B, H*W*C] tensor, each row one image in (row, column, channel)
// order. The GEMMs of the convolution are mpcl_gemm's (src/compute/conv.c).
// Sums are f32 in a fixed order, one work-item per output element (no
// atomics), so every result is deterministic.

// The window geometry, in the order src/compute/conv.c sets it: the image
// (H, W, C), the window (KH, KW), the output (OH, OW), the strides and the
// padding before the first row and column.
#define WINDOW_PARAMS \
    uint H, uint W, uint C, uint KH, uint KW, uint OH, uint OW, uint SH, uint SW, uint PT, uint PL

// The windows along one axis that cover padded position xp (the image
// position plus the padding before it): o with o*s <= xp < o*s + k and
// o < out, as [first, end).
static inline uint2 window_range(uint xp, uint k, uint s, uint out) {
    uint first = xp + 1 > k ? (xp + 1 - k + s - 1) / s : 0u;
    return (uint2)(first, min(xp / s + 1u, out));
}

// An element index ((b*rows + row)*cols + col)*C + c as (c, col, row, b).
// Quotients and remainders by multiplication, not %: LLVM turns a / and %
// of the same operands into a pair with a `freeze`, which Oclgrind's
// uninitialized-value check cannot run (it stops the kernel, writing
// nothing).
static inline uint4 split_nhwc(uint i, uint C, uint cols, uint rows) {
    uint pixel = i / C, line = pixel / cols, b = line / rows;
    return (uint4)(i - pixel * C, pixel - line * cols, line - b * rows, b);
}

// Channels eight at a time: a pixel's C channels are a run in NHWC, so the
// kernels below take one pixel per work-item and walk its channels in
// float8 chunks, doing the index arithmetic once per pixel (PoCL does not
// vectorize across the items of these kernels). The last chunk holds
// n = C - c < 8 channels: its lanes from n on repeat the last channel
// (LOAD8_PART) and are never stored. Lane-wise, each element sees the same
// operations in the same order as one item per element would.
static inline float8 load8_upto(__global const storage_t *p, size_t i, uint n) {
    return n == 8u ? LOAD8(p, i) : LOAD8_PART(p, i, n);
}
static inline void store8_upto(__global storage_t *p, size_t i, uint n, float8 v) {
    if (n == 8u)
        STORE8(p, i, v);
    else
        STORE8_PART(p, i, n, v);
}
static inline int8 load_int8_upto(__global const int *p, uint n) {
    if (n == 8u) return vload8(0, p);
    return (int8)(p[0], p[min(1u, n - 1u)], p[min(2u, n - 1u)], p[min(3u, n - 1u)],
                  p[min(4u, n - 1u)], p[min(5u, n - 1u)], p[min(6u, n - 1u)], p[n - 1u]);
}
static inline void store_int8_upto(__global int *p, uint n, int8 v) {
    if (n == 8u) {
        vstore8(v, 0, p);
        return;
    }
    p[0] = v.s0;
    if (n > 1u) p[1] = v.s1;
    if (n > 2u) p[2] = v.s2;
    if (n > 3u) p[3] = v.s3;
    if (n > 4u) p[4] = v.s4;
    if (n > 5u) p[5] = v.s5;
    if (n > 6u) p[6] = v.s6;
}

// copy_bits copies n storage elements as bits, eight per move where it can;
// zero_bits writes n zeros.
#if defined(MPCL_STORAGE_F32)
typedef mpcl_float8_u storage_bits8_u;
#else
typedef mpcl_ushort8_u storage_bits8_u;
#endif
static inline void copy_bits(__global storage_bits_t *dst, __global const storage_bits_t *src, uint n) {
    uint j = 0;
    for (; j + 8u <= n; j += 8u)
        *(__global storage_bits8_u *)(dst + j) = *(__global const storage_bits8_u *)(src + j);
    for (; j < n; j++) dst[j] = src[j];
}
static inline void zero_bits(__global storage_bits_t *dst, uint n) {
    for (uint j = 0; j < n; j++) dst[j] = (storage_bits_t)0;
}

// columns[m, (kh*KW + kw)*C + c] = in[b, oh*SH - PT + kh, ow*SW - PL + kw, c]
// for output pixel m = (b*OH + oh)*OW + ow, 0 in the padding. One item per
// output pixel m: for each kh, its row of KW*C columns is one run, whose
// taps inside the image are one run of the image too (zeros either side).
// items = B*OH*OW. A copy of the bits (storage_bits_t), so exact.
__kernel void mpcl_im2col(__global storage_bits_t *columns, __global const storage_bits_t *in,
                          WINDOW_PARAMS, uint items) {
    uint m = get_global_id(0);
    if (m >= items) return;
    uint4 at = split_nhwc(m, 1, OW, OH); // (0, ow, oh, b)
    uint ow = at.y, oh = at.z, b = at.w;
    // Padded coordinates of the window's first row and column; the image
    // starts at (PT, PL). The taps [kw0, kw1) fall inside the image's columns.
    uint hp = oh * SH, wp = ow * SW;
    uint kw0 = wp < PL ? min(PL - wp, KW) : 0u;
    uint kw1 = max(kw0, wp >= PL + W ? 0u : min(PL + W - wp, KW));
    uint run = KW * C;
    __global storage_bits_t *dst = columns + (size_t)m * KH * run;
    for (uint kh = 0; kh < KH; kh++, dst += run) {
        uint hh = hp + kh;
        if (hh < PT || hh - PT >= H || kw0 == kw1) {
            zero_bits(dst, run);
            continue;
        }
        zero_bits(dst, kw0 * C);
        copy_bits(dst + kw0 * C, in + (((size_t)b * H + (hh - PT)) * W + (wp + kw0 - PL)) * C,
                  (kw1 - kw0) * C);
        zero_bits(dst + kw1 * C, (KW - kw1) * C);
    }
}

// Each of `count` rows x cols matrices stored one after the other, transposed
// in place of the same count: out[t][j, i] = in[t][i, j]. The convolution's
// weights [taps, channels, filters] as [taps, filters, channels], for the
// direct input gradient (count = taps), the NN GEMM of op(B) = B^T and the
// tied head's wte^T (count 1). A copy of the bits, so exact.
//
// One item per 16 x 16 block, global ids (j / 16, t * row_blocks + i / 16),
// in 8 x 8 pieces: eight rows loaded as vectors, then each column's eight
// lanes stored in a run. A block cut by the matrix's edge copies element by
// element. One item per 16 elements of an output row, loading them down a
// column one by one, took 78-131 us for a 128 x 512 f32 matrix against
// 17-21 us this way (128 x 384: 35-42 against 13-18; PoCL, Zen 4, two
// threads, hot). The stores stay scalar: building the column as a vector
// made Oclgrind 21.10's uninitialized-value checker crash.
#define TRANSPOSE_LOAD(i) \
    const storage_bits8_t r##i = GLOAD_U(storage_bits8_t, src + (size_t)(pi + (i)) * cols + pj);
#define TRANSPOSE_STORE(c)                                                          \
    {                                                                               \
        __global storage_bits_t *d_ = dst + (size_t)(pj + (c)) * rows + pi;         \
        d_[0] = r0.s##c, d_[1] = r1.s##c, d_[2] = r2.s##c, d_[3] = r3.s##c;         \
        d_[4] = r4.s##c, d_[5] = r5.s##c, d_[6] = r6.s##c, d_[7] = r7.s##c;         \
    }
__kernel void mpcl_transpose(__global storage_bits_t *out, __global const storage_bits_t *in,
                             uint rows, uint cols, uint count) {
    uint row_blocks = (rows + 15u) / 16u, y = get_global_id(1);
    uint j0 = get_global_id(0) * 16u, t = y / row_blocks, i0 = (y - t * row_blocks) * 16u;
    if (j0 >= cols || t >= count) return;
    size_t matrix = (size_t)t * rows * cols;
    __global storage_bits_t *dst = out + matrix + (size_t)j0 * rows + i0;
    __global const storage_bits_t *src = in + matrix + (size_t)i0 * cols + j0;
    uint n_i = min(16u, rows - i0), n_j = min(16u, cols - j0);
    if (n_i == 16u && n_j == 16u) {
        for (uint pi = 0; pi < 16u; pi += 8u)
            for (uint pj = 0; pj < 16u; pj += 8u) {
                TRANSPOSE_LOAD(0) TRANSPOSE_LOAD(1) TRANSPOSE_LOAD(2) TRANSPOSE_LOAD(3)
                TRANSPOSE_LOAD(4) TRANSPOSE_LOAD(5) TRANSPOSE_LOAD(6) TRANSPOSE_LOAD(7)
                TRANSPOSE_STORE(0) TRANSPOSE_STORE(1) TRANSPOSE_STORE(2) TRANSPOSE_STORE(3)
                TRANSPOSE_STORE(4) TRANSPOSE_STORE(5) TRANSPOSE_STORE(6) TRANSPOSE_STORE(7)
            }
    } else {
        for (uint j = 0; j < n_j; j++)
            for (uint i = 0; i < n_i; i++) dst[(size_t)j * rows + i] = src[(size_t)i * cols + j];
    }
}

// ---- direct convolution: no columns ----
//
// The forward pass and the input's gradient as one register-tiled loop
// over an NHWC source, without the columns workspace: each item computes
// CONV_TP rows of the result (output pixels, or input pixels for the
// gradient) by 16 of its channels (filters, or input channels), held in
// CONV_TP named float16 accumulators (PoCL spills arrays). For each tap of
// the window it finds each row's source pixel (or none: the padding, or a
// stride that skips it), then walks the source channels: per channel one
// weight row of 16 as a vector, and each row's source value broadcast into
// an fma. f32 sources are read in place (the fma's broadcast operand);
// 16-bit ones are converted eight channels at a time into a private array
// first (a scalar f16 conversion is integer code). Sums are f32 in a fixed
// order (taps, then channels), rounded once. The result's channel count is
// a multiple of 16 (the host checks); the last tile's rows past the end
// repeat the last row and are not stored.
#define CONV_TP 16
#define CONV_ROWS(X) \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#if defined(MPCL_STORAGE_F32)
#define CONV_W16(p, o) GLOAD_U(float16, (p) + (o))
#define CONV_STORE16(p, o, v) GSTORE_U(float16, (p) + (o), (v))
#else
#define CONV_W16(p, o) storage_value16(GLOAD_U(ushort16, (__global const ushort *)(p) + (o)))
#if defined(MPCL_STORAGE_F16)
#define CONV_STORE16(p, o, v) vstore_half16_rte((v), 0, (__global half *)(p) + (o))
#else
#define CONV_STORE16(p, o, v) GSTORE_U(ushort16, (__global ushort *)(p) + (o), mpcl_bf16_bits16(v))
#endif
#endif

// Row r's result pixel at##r = (0, column, row, image) of the rows' map
// [.., RH, RW], and its source pixel for the current tap: src##r, the
// element offset of the source's channel 0, and ok##r, whether it exists.
#define CONV_DECL(r)                                                     \
    float16 acc##r = 0.0f;                                               \
    const uint4 at##r = split_nhwc(min(m0 + (r), rows - 1u), 1, RW, RH); \
    size_t src##r = 0;                                                   \
    bool ok##r = false;
#define CONV_AND_OK(r) &&ok##r
#define CONV_NO_INIT(r)
// One source channel c + j of every row into the fmas (CHECK: skip rows
// without a source pixel). f32 is read in place, 16-bit from the staging.
#if defined(MPCL_STORAGE_F32)
#define CONV_X(r) (src[src##r + c + j])
#define CONV_STAGE(r)
#else
#define CONV_X(r) (xs[8 * (r) + j])
#define CONV_STAGE(r)                                                     \
    if (ok##r && n == 8u)                                                 \
        PSTORE_U(float8, xs + 8 * (r), LOAD8(src, src##r + c));           \
    else if (ok##r)                                                       \
        for (uint j = 0; j < n; j++) xs[8 * (r) + j] = LOAD(src, src##r + c + j);
#endif
#define CONV_FMA(r) acc##r = fma((float16)(CONV_X(r)), wj, acc##r);
#define CONV_FMA_CHECKED(r) \
    if (ok##r) acc##r = fma((float16)(CONV_X(r)), wj, acc##r);
#define CONV_STORE_ROW(r) \
    if (m0 + (r) < rows) CONV_STORE16(dst, (size_t)(m0 + (r)) * N + f0, acc##r);

// The body of both kernels. Result: rows x N, N a multiple of 16, rows the
// pixels of a [.., RH, RW] map; the source has SC channels; the weights are
// [KH*KW*SC, N]. ROW_INIT(r) sets what a row keeps across taps;
// TAP_SOURCE(r) sets src##r and ok##r for the tap (kh, kw).
#define CONV_DIRECT_BODY(ROW_INIT, TAP_SOURCE)                                \
    const uint f0 = get_global_id(0) * 16u, m0 = get_global_id(1) * CONV_TP; \
    if (f0 >= N || m0 >= rows) return;                                       \
    CONV_ROWS(CONV_DECL)                                                      \
    CONV_ROWS(ROW_INIT)                                                       \
    float xs[8 * CONV_TP];                                                    \
    for (uint kh = 0; kh < KH; kh++) {                                        \
        for (uint kw = 0; kw < KW; kw++) {                                    \
            CONV_ROWS(TAP_SOURCE)                                             \
            const bool all_ok = true CONV_ROWS(CONV_AND_OK);                  \
            __global const storage_t *wrow = wt + (size_t)(kh * KW + kw) * SC * N + f0; \
            for (uint c = 0; c < SC; c += 8u) {                               \
                const uint n = min(8u, SC - c);                               \
                CONV_ROWS(CONV_STAGE)                                         \
                if (all_ok) {                                                 \
                    for (uint j = 0; j < n; j++) {                            \
                        const float16 wj = CONV_W16(wrow, (c + j) * N);       \
                        CONV_ROWS(CONV_FMA)                                   \
                    }                                                         \
                } else {                                                      \
                    for (uint j = 0; j < n; j++) {                            \
                        const float16 wj = CONV_W16(wrow, (c + j) * N);       \
                        CONV_ROWS(CONV_FMA_CHECKED)                           \
                    }                                                         \
                }                                                             \
            }                                                                 \
        }                                                                     \
    }                                                                         \
    CONV_ROWS(CONV_STORE_ROW)

// out[m, f] = the sum over taps and channels of in[b, oh*SH - PT + kh,
// ow*SW - PL + kw, c] * weights[(kh*KW + kw)*C + c, f], for output pixel m
// = (b, oh, ow): the forward pass. N = filters, rows = B*OH*OW; items
// (N / 16, ceil(rows / CONV_TP)).
// When every window lies inside the image (no padding reached: always so
// with VALID), a row's source for a tap is its window's corner plus the
// tap's offset, the same for every row: no per-row bounds per tap (for one
// input channel they cost more than the fmas).
#define FWD_CORNER(r)                                                                       \
    const size_t corner##r =                                                                \
        (((size_t)at##r.w * H + at##r.z * SH) * W + at##r.y * SW) * C;
#define FWD_SOURCE(r)                                                                   \
    if (inside) {                                                                       \
        src##r = corner##r + tap_offset;                                                \
        ok##r = true;                                                                   \
    } else {                                                                            \
        const int ih = (int)(at##r.z * SH + kh) - (int)PT;                              \
        const int iw = (int)(at##r.y * SW + kw) - (int)PL;                              \
        ok##r = ih >= 0 && ih < (int)H && iw >= 0 && iw < (int)W;                       \
        src##r = ok##r ? (((size_t)at##r.w * H + (uint)ih) * W + (uint)iw) * C : 0;     \
    }
__kernel void mpcl_conv2d_direct(__global storage_t *dst, __global const storage_t *src,
                                 __global const storage_t *wt, WINDOW_PARAMS, uint N,
                                 uint rows) {
    const uint RH = OH, RW = OW, SC = C;
    const bool inside = PT == 0u && PL == 0u && (OH - 1u) * SH + KH <= H &&
                        (OW - 1u) * SW + KW <= W;
#define tap_offset (((size_t)kh * W + kw) * C)
    CONV_DIRECT_BODY(FWD_CORNER, FWD_SOURCE)
#undef tap_offset
}

// d_in[p, c] = the sum over taps (kh, kw) and filters f of d_out[b, oh, ow,
// f] * weights_t[(kh*KW + kw)*F + f, c], for input pixel p = (b, h, w) and
// the windows (oh, ow) whose tap (kh, kw) is (h, w): oh*SH + kh = h + PT,
// likewise for w. weights_t is the weights transposed per tap
// (mpcl_transpose, count KH*KW). N = C, rows = B*H*W, the source has F
// channels; items (C / 16, ceil(rows / CONV_TP)).
#define BWD_SOURCE(r)                                                                \
    {                                                                                \
        const int hp = (int)(at##r.z + PT) - (int)kh;                                \
        const int wp = (int)(at##r.y + PL) - (int)kw;                                \
        const uint oh = hp >= 0 ? (uint)hp / SH : 0u, ow = wp >= 0 ? (uint)wp / SW : 0u; \
        ok##r = hp >= 0 && wp >= 0 && oh * SH == (uint)hp && ow * SW == (uint)wp &&  \
                oh < OH && ow < OW;                                                  \
        src##r = ok##r ? (((size_t)at##r.w * OH + oh) * OW + ow) * SC : 0;           \
    }
__kernel void mpcl_conv2d_direct_d_in(__global storage_t *dst, __global const storage_t *src,
                                      __global const storage_t *wt, WINDOW_PARAMS, uint F,
                                      uint rows) {
    const uint RH = H, RW = W, SC = F, N = C;
    CONV_DIRECT_BODY(CONV_NO_INIT, BWD_SOURCE)
}

// d_in[b, h, w, c] = the sum of d_columns over the (window, tap) pairs that
// im2col copies from (b, h, w, c): windows in row order, in f32, rounded once.
// One item per input pixel, for its C channels in chunks of eight: the
// pixel's windows are found once (the index split costs more than the sums),
// and each window's channels are a run of d_columns. items = B*H*W.
__kernel void mpcl_col2im(__global storage_t *d_in, __global const storage_t *d_columns,
                          WINDOW_PARAMS, uint items) {
    uint i = get_global_id(0);
    if (i >= items) return;
    uint4 at = split_nhwc(i, 1, W, H);
    uint w = at.y, h = at.z, b = at.w;
    uint2 rows = window_range(h + PT, KH, SH, OH), cols = window_range(w + PL, KW, SW, OW);
    // 32 channels (four chunks) per pass, so that each window's read is a
    // run of up to 128 bytes.
    for (uint c = 0; c < C; c += 32u) {
        uint n = min(32u, C - c);
        uint n0 = min(8u, n), n1 = min(8u, max(n, 8u) - 8u), n2 = min(8u, max(n, 16u) - 16u),
             n3 = max(n, 24u) - 24u;
        float8 s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        for (uint oh = rows.x; oh < rows.y; oh++) {
            uint kh = h + PT - oh * SH;
            for (uint ow = cols.x; ow < cols.y; ow++) {
                uint kw = w + PL - ow * SW;
                size_t m = ((size_t)b * OH + oh) * OW + ow;
                size_t at = (m * KH * KW + kh * KW + kw) * C + c;
                s0 += load8_upto(d_columns, at, n0);
                if (n1) s1 += load8_upto(d_columns, at + 8, n1);
                if (n2) s2 += load8_upto(d_columns, at + 16, n2);
                if (n3) s3 += load8_upto(d_columns, at + 24, n3);
            }
        }
        size_t to = (size_t)i * C + c;
        store8_upto(d_in, to, n0, s0);
        if (n1) store8_upto(d_in, to + 8, n1, s1);
        if (n2) store8_upto(d_in, to + 16, n2, s2);
        if (n3) store8_upto(d_in, to + 24, n3, s3);
    }
}

// out[b, oh, ow, c] = the largest in[b, h, w, c] over the window's positions
// inside the image, row by row; the first of equal values wins, and NaN wins
// over numbers (so that the loss scaler sees it). argmax[...] = h*W + w of
// the winner when write_argmax. One item per output pixel, for its C
// channels; items = B*OH*OW. SAME windows always hold a position of the
// image (the padding before is less than the window).
__kernel void mpcl_maxpool2d_forward(__global storage_t *out, __global int *argmax,
                                     __global const storage_t *in, WINDOW_PARAMS, uint items,
                                     uint write_argmax) {
    uint i = get_global_id(0);
    if (i >= items) return;
    uint4 at = split_nhwc(i, 1, OW, OH); // (0, ow, oh, b)
    uint ow = at.y, oh = at.z, b = at.w;
    uint hp = oh * SH, wp = ow * SW; // the window's first padded row and column
    uint h0 = max(hp, PT) - PT, h1 = min(hp + KH, PT + H) - PT;
    uint w0 = max(wp, PL) - PL, w1 = min(wp + KW, PL + W) - PL;
    size_t image = (size_t)b * H * W * C, o = (size_t)i * C; // (b, 0, 0, 0), (b, oh, ow, 0)
    for (uint c = 0; c < C; c += 8u) {
        uint n = min(8u, C - c);
        float8 best = load8_upto(in, image + ((size_t)h0 * W + w0) * C + c, n);
        int8 best_at = (int8)((int)(h0 * W + w0));
        for (uint h = h0; h < h1; h++) {
            for (uint w = w0; w < w1; w++) {
                float8 v = load8_upto(in, image + ((size_t)h * W + w) * C + c, n);
                int8 take = isgreater(v, best) | (isnan(v) & ~isnan(best));
                best = select(best, v, take);
                best_at = select(best_at, (int8)((int)(h * W + w)), take);
            }
        }
        store8_upto(out, o + c, n, best);
        if (write_argmax) store_int8_upto(argmax + o + c, n, best_at);
    }
}

// d_in[b, h, w, c] = the sum of d_out[b, oh, ow, c] over the windows whose
// argmax is (h, w), in row order, in f32, rounded once. One item per input
// pixel, for its C channels; items = B*H*W. Without overlap (stride >= pool)
// a pixel is in one window at most: one term.
__kernel void mpcl_maxpool2d_backward(__global storage_t *d_in, __global const storage_t *d_out,
                                      __global const int *argmax, WINDOW_PARAMS, uint items) {
    uint i = get_global_id(0);
    if (i >= items) return;
    uint4 at = split_nhwc(i, 1, W, H); // (0, w, h, b)
    uint w = at.y, h = at.z, b = at.w;
    uint2 rows = window_range(h + PT, KH, SH, OH), cols = window_range(w + PL, KW, SW, OW);
    int8 here = (int8)((int)(h * W + w));
    for (uint c = 0; c < C; c += 8u) {
        uint n = min(8u, C - c);
        float8 sum = 0.0f;
        for (uint oh = rows.x; oh < rows.y; oh++) {
            for (uint ow = cols.x; ow < cols.y; ow++) {
                size_t o = (((size_t)b * OH + oh) * OW + ow) * C + c;
                int8 hit = load_int8_upto(argmax + o, n) == here;
                sum = select(sum, sum + load8_upto(d_out, o, n), hit);
            }
        }
        store8_upto(d_in, (size_t)i * C + c, n, sum);
    }
}
