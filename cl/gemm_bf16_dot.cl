// mpcl's bf16 GEMM on AVX512-BF16's dot product (vdpbf16ps), for CPU devices
// whose verification ran common.cl's MPCL_BF16_DOT16 and got the host
// model's bits (src/runtime/fp16_verify.c): the host builds the bf16 program
// with MPCL_BF16_DOT_X86 only then (src/compute/gemm_bf16_dot.c drives it).
//
// C = alpha * op(A) * B2 + beta * C, row-major, where B2 is op(B) packed in
// pairs of k by mpcl_gemm_dot_pack below: B2[kp][j] holds op(B)(2kp, j) in
// its low 16 bits and op(B)(2kp+1, j) in its high ones (zero past K). op(A)
// is read in place when A is row-major (ta == 0); a transposed A is packed
// first into rows of pairs, so that the kernel reads either as rows of ars
// bf16 whose adjacent elements are pairs of k. One
// instruction then takes two k at once: lane j of an accumulator gains
// a[2kp] B2lo + a[2kp+1] B2hi, the products exact in f32 and each sum
// rounded (the odd element first; bf16 subnormals read and f32 subnormal
// sums written as zero: the instruction's DAZ and FTZ). Twice the
// multiplies per instruction of cl/gemm.cl's f32 fmas.
//
// A tile is DOT_TM rows by DOT_W columns (DOT_W / 16 vectors): 4 x 64 or
// 8 x 32, 16 accumulators either way, so a row of A is read once for 64 (32)
// columns of C where cl/gemm.cl's 16x16 tiles read it once per 16 (the
// convolutions' GEMMs are tall and narrow: 15488 x 64 x 288). Row r's pair
// is broadcast over the row's vectors. An odd K ends with a half pair whose
// k+1 half is zero (B2's by the packing; A's k+1 is not even read: in
// row-major A it is the next row's first element, which may be inf).
//
// Edges as in cl/gemm.cl: the last tile of rows (columns) is shifted back to
// end at M (N), so every load is in bounds (the host needs M >= DOT_TM,
// N >= DOT_W), and stores only what it owns.

#if defined(MPCL_STORAGE_BF16) && defined(MPCL_BF16_DOT_X86)

// Packs a K x N matrix X in pairs of k: pair (kp, j) holds X(2kp, j) low and
// X(2kp+1, j) high (zero past K), at out[kp * N + j] (B2), or at
// out[j * KP + kp] with out_t (a transposed A: rows of pairs), KP = (K+1)/2.
// X(k, j) is x[k * N + j], or x[j * K + k] with x_t. One item per block of
// 16 pairs by 16 columns, so that with out_t too it writes whole 64-byte
// rows: one pair per store, strided, ran the pack of conv2's columns
// (15488 x 288) at a third of the bandwidth.
typedef ushort16 __attribute__((aligned(2))) dot_ushort16_u;
typedef uint16 __attribute__((aligned(4))) dot_uint16_u;
typedef uint __attribute__((aligned(2))) dot_pair_u;
#define DOT_PAIRS(lo, hi) (convert_uint16(lo) | (convert_uint16(hi) << 16))

// The nj <= 16 pairs (kp, j0 ..) into row[0 ..].
static inline void dot_pair_row(__global const ushort *x, uint K, uint N, uint x_t, uint kp, uint j0,
                         uint nj, uint *row) {
    const uint k0 = 2 * kp, k1 = k0 + 1;
    if (!x_t && nj == 16) {
        const ushort16 lo = *(__global const dot_ushort16_u *)(x + k0 * N + j0);
        const ushort16 hi = k1 < K ? *(__global const dot_ushort16_u *)(x + k1 * N + j0)
                                   : (ushort16)(0);
        *(dot_uint16_u *)row = DOT_PAIRS(lo, hi);
    } else if (x_t && k1 < K) {
        for (uint l = 0; l < nj; l++) row[l] = *(__global const dot_pair_u *)(x + (j0 + l) * K + k0);
    } else {
        for (uint l = 0; l < nj; l++) {
            const uint lo = x[x_t ? (j0 + l) * K + k0 : k0 * N + j0 + l];
            const uint hi = k1 < K ? x[x_t ? (j0 + l) * K + k1 : k1 * N + j0 + l] : 0u;
            row[l] = lo | hi << 16;
        }
    }
}

#define DOT_LANES16(X) X(0), X(1), X(2), X(3), X(4), X(5), X(6), X(7), X(8), X(9), X(10), X(11), \
                       X(12), X(13), X(14), X(15)
#define DOT_TILE_COL(q) tile[q][l]
__kernel void mpcl_gemm_dot_pack(__global const ushort *x, __global uint *out, uint K, uint N,
                                 uint x_t, uint out_t) {
    // Items run along the output's rows: kp blocks with out_t, j blocks
    // without. (PoCL 3.1 built get_global_id(out_t ? 1 : 0) into a binary
    // that did not load.)
    const uint g0 = get_global_id(0), g1 = get_global_id(1);
    const uint kpairs = (K + 1) / 2;
    const uint kp0 = 16 * (out_t ? g0 : g1), j0 = 16 * (out_t ? g1 : g0);
    if (j0 >= N || kp0 >= kpairs) return;
    const uint nj = min(16u, N - j0), nq = min(16u, kpairs - kp0);
    uint tile[16][16];
    for (uint q = 0; q < nq; q++) dot_pair_row(x, K, N, x_t, kp0 + q, j0, nj, tile[q]);
    if (!out_t) {
        for (uint q = 0; q < nq; q++) {
            __global uint *o = out + (kp0 + q) * N + j0;
            if (nj == 16)
                *(__global dot_uint16_u *)o = *(dot_uint16_u *)tile[q];
            else
                for (uint l = 0; l < nj; l++) o[l] = tile[q][l];
        }
    } else {
        for (uint l = 0; l < nj; l++) {
            __global uint *o = out + (j0 + l) * kpairs + kp0;
            if (nq == 16)
                *(__global dot_uint16_u *)o = (uint16)(DOT_LANES16(DOT_TILE_COL));
            else
                for (uint q = 0; q < nq; q++) o[q] = tile[q][l];
        }
    }
}

#define DOT_CAT(a, b) DOT_CAT_(a, b)
#define DOT_CAT_(a, b) a##b
#define DOT_ROWS4(X, P) X(0, P) X(1, P) X(2, P) X(3, P)
#define DOT_ROWS8(X, P) DOT_ROWS4(X, P) X(4, P) X(5, P) X(6, P) X(7, P)
#define DOT_VECS2(X, R) X(R, 0) X(R, 1)
#define DOT_VECS4(X, R) DOT_VECS2(X, R) X(R, 2) X(R, 3)
#define DOT_ROWS DOT_CAT(DOT_ROWS, DOT_TM)
#define DOT_VECS DOT_CAT(DOT_VECS, DOT_NV)

#define DOT_DECL_V(r, v) float16 acc##r##_##v = (float16)(0.0f);
#define DOT_DECL(r, P) DOT_VECS(DOT_DECL_V, r)
// This k pair's B2 vectors, then each row's pair times them.
#define DOT_BLOAD(v) const uint16 b##v = *(__global const dot_uint16_u *)(bk + 16 * (v));
#define DOT_BLOAD2 DOT_BLOAD(0) DOT_BLOAD(1)
#define DOT_BLOAD4 DOT_BLOAD2 DOT_BLOAD(2) DOT_BLOAD(3)
#define DOT_MUL_V(r, v) MPCL_BF16_DOT16(acc##r##_##v, ap##r, b##v);
// Row r's pair, broadcast.
#define DOT_APAIR_ROW(r, P)                                                        \
    const uint16 ap##r = (uint16)(*(__global const dot_pair_u *)(arow + (r) * ars)); \
    DOT_VECS(DOT_MUL_V, r)
// An odd K's last half pair: only k, read as 16 bits (a pair load would read
// past A's end on its last row).
#define DOT_HALF_ROW(r, P)                                    \
    const uint16 ap##r = (uint16)((uint)arow[(r) * ars]);     \
    DOT_VECS(DOT_MUL_V, r)

// C side, by CF: C in bf16 (0) or f32 (1).
#define DOT_CT_0 storage_t
#define DOT_CT_1 float
#define DOT_CVLOAD_0(p, o) mpcl_bf16_value16(GLOAD_U(ushort16, (p) + (o)))
#define DOT_CVLOAD_1(p, o) GLOAD_U(float16, (p) + (o))
#define DOT_CVSTORE_0(v, p, o) GSTORE_U(ushort16, (p) + (o), mpcl_bf16_bits16(v))
#define DOT_CVSTORE_1(v, p, o) GSTORE_U(float16, (p) + (o), (v))
#define DOT_CLOAD_0 LOAD
#define DOT_CLOAD_1(p, i) ((p)[(i)])
#define DOT_CSTORE_0 STORE
#define DOT_CSTORE_1(p, i, v) ((p)[(i)] = (v))
// Vector v of row r, C written by CF: whole when the tile owns all of it,
// else the columns it owns one by one.
#define DOT_STORE_V(r, v, CF)                                                    \
    {                                                                            \
        const uint cj_ = cj0 + 16 * (v), o_ = i_ * N + cj_;                      \
        if (cj_ >= j0) {                                                         \
            float16 v_ = alpha * acc##r##_##v;                                   \
            if (beta != 0.0f) v_ = fma((float16)(beta), DOT_CVLOAD_##CF(c, o_), v_); \
            DOT_CVSTORE_##CF(v_, c, o_);                                         \
        } else if (cj_ + 16 > j0) {                                              \
            PSTORE_U(float16, tmp, acc##r##_##v);                                \
            for (uint l = j0 - cj_; l < 16; l++) {                               \
                float v_ = alpha * tmp[l];                                       \
                if (beta != 0.0f) v_ = fma(beta, DOT_CLOAD_##CF(c, o_ + l), v_); \
                DOT_CSTORE_##CF(c, o_ + l, v_);                                  \
            }                                                                    \
        }                                                                        \
    }
#define DOT_STORE_V_0(r, v) DOT_STORE_V(r, v, 0)
#define DOT_STORE_V_1(r, v) DOT_STORE_V(r, v, 1)
#define DOT_STORE_ROW(r, CF)                               \
    {                                                      \
        const uint i_ = ri0 + (r);                         \
        if (i_ >= i0) { DOT_VECS(DOT_STORE_V_##CF, r) }    \
    }

// a: op(A) as rows of ars bf16 (see top); K is op(A)'s columns.
#define DOT_KERNEL(NAME, CF)                                                                  \
    __kernel void NAME(__global const ushort *a, uint ars, __global const uint *b2,          \
                       __global DOT_CT_##CF *c, uint M, uint N, uint K, float alpha,          \
                       float beta) {                                                          \
        const uint j0 = get_global_id(0) * DOT_W, i0 = get_global_id(1) * DOT_TM;            \
        if (i0 >= M || j0 >= N) return;                                                      \
        const uint ri0 = min(i0, M - DOT_TM), cj0 = min(j0, N - DOT_W);                      \
        const uint kfull = K / 2;                                                            \
        float tmp[16];                                                                       \
        DOT_ROWS(DOT_DECL, 0)                                                                \
        for (uint kp = 0; kp < kfull; kp++) {                                                \
            __global const uint *bk = b2 + kp * N + cj0;                                     \
            __global const ushort *arow = a + ri0 * ars + 2 * kp;                            \
            DOT_CAT(DOT_BLOAD, DOT_NV)                                                       \
            DOT_ROWS(DOT_APAIR_ROW, 0)                                                       \
        }                                                                                    \
        if (K % 2) {                                                                         \
            __global const uint *bk = b2 + kfull * N + cj0;                                  \
            __global const ushort *arow = a + ri0 * ars + 2 * kfull;                         \
            DOT_CAT(DOT_BLOAD, DOT_NV)                                                       \
            DOT_ROWS(DOT_HALF_ROW, 0)                                                        \
        }                                                                                    \
        DOT_ROWS(DOT_STORE_ROW, CF)                                                          \
    }

// DOT_TM rows x DOT_NV vectors of 16 columns: 4 x 64, then 8 x 32; each
// with C in bf16 and in f32.
#define DOT_W (16 * DOT_NV)
#define DOT_TM 4
#define DOT_NV 4
DOT_KERNEL(mpcl_gemm_dot_r4w64, 0)
DOT_KERNEL(mpcl_gemm_dot_r4w64_cf32, 1)
#undef DOT_TM
#undef DOT_NV
#define DOT_TM 8
#define DOT_NV 2
DOT_KERNEL(mpcl_gemm_dot_r8w32, 0)
DOT_KERNEL(mpcl_gemm_dot_r8w32_cf32, 1)
#undef DOT_TM
#undef DOT_NV
#undef DOT_W
#endif
