// mpcl's register-tiled GEMM: C = alpha * op(A) * op(B) + beta * C, row-major.
//
// op(A) is M x K: A is stored M x K (ta == 0) or K x M (ta == 1).
// op(B) is K x N: B is stored K x N (tb == 0) or N x K (tb == 1).
// C is M x N. One source serves every storage: A and B are storage_t (f32,
// or f16 or bf16 through LOAD), C is storage_t or, in the f16 and bf16
// programs, float (the *_cf32 kernels: 16-bit inputs, f32 output). All
// arithmetic is float. An epilogue (bias, addend: see GEMM_EPILOGUE_FULL)
// may follow, as the host's epi word says.
//
// A tile is GEMM_TM rows by GEMM_W columns of C, held in GEMM_TM named
// vector accumulators (PoCL keeps accumulators in registers only when they
// are separate named variables; an array spilled and ran 3x slower). Each
// work-item computes a strip of `strip` tiles stacked down the rows (a
// kernel argument, at most GEMM_STRIP_MAX). k runs in blocks of GEMM_KB and,
// within a block, the strip's tiles in turn: each tile resumes its partial
// sums from a private array, so the block's rows of op(B) are read from
// memory once and from L1 for the other tiles of the strip. For each tile
// and block, op(A)'s part is read in place (f32, see GEMM_BLOCK_DIRECT) or
// first staged, as float, into a private array with vector loads (so f16 is
// converted once per element per tile with vector conversions; one scalar
// vload_half per multiply made mpcl-mixed 6x slower on PoCL), then for each
// k one row of op(B) is loaded as a vector and each row's A element is
// broadcast into an fma. Work-groups are one item
// (the host launches local size 1x1).
//
// Edges. A tile that would run past the last row (column) is shifted back to
// end at M (N) when M >= GEMM_TM (N >= GEMM_W), so every load stays a full
// in-bounds vector; it then stores only the rows (columns) that the unshifted
// tile owns, so no element is written twice and C is read only where it is
// written. When M < GEMM_TM (N < GEMM_W) the indices are clamped to the last
// row (column) instead and the duplicates are not stored. op(B) rows are
// loaded as vectors when tb == 0: with N < GEMM_W a vector runs on into the
// next rows (lanes that are never stored) except at B's end; otherwise
// element by element (the "gather" loop, slower: transposed-B cases).

// Vectors move through common.cl's GLOAD_U and friends (one unaligned move
// each): through vload16/vstore16, PoCL's 4- and 8-wide pieces made the
// 128x128x784 GEMM 185 us against 159 (Zen 4, two threads). 16-bit vectors
// are loaded as raw bits and converted by common.cl's storage_value4/8/16:
// PoCL 3.1 compiled vload_half8/16 of a global row that starts at an odd
// multiple of 8 halves into an aligned vector move (vmovaps), which faulted
// (M even, K % 8 != 0). GEMM_PVLOADN converts the private arrays of raw
// bits below.
#if defined(MPCL_STORAGE_F16) || defined(MPCL_STORAGE_BF16)
#define GEMM_NARROW_STORAGE 1
#define GEMM_A_DIRECT 0 /* see GEMM_BLOCK_DIRECT */
#define GEMM_VLOADN(n, p, o) \
    GEMM_CAT(storage_value, n)(GLOAD_U(GEMM_CAT(ushort, n), (__global const ushort *)(p) + (o)))
#define GEMM_PVLOADN(n, p, o) \
    GEMM_CAT(storage_value, n)(PLOAD_U(GEMM_CAT(ushort, n), (const ushort *)(p) + (o)))
#else
#define GEMM_A_DIRECT 1
#define GEMM_VLOADN(n, p, o) GLOAD_U(GEMM_CAT(float, n), (p) + (o))
#endif
#define GEMM_VLOAD4(p, o) GEMM_VLOADN(4, p, o)
#define GEMM_VLOAD8(p, o) GEMM_VLOADN(8, p, o)
#define GEMM_VLOAD16(p, o) GEMM_VLOADN(16, p, o)
#if defined(MPCL_STORAGE_F16)
#define GEMM_VSTORE8(v, p, o) vstore_half8_rte((v), 0, (p) + (o))
#define GEMM_VSTORE16(v, p, o) vstore_half16_rte((v), 0, (p) + (o))
// Rows of op(B) that start on a whole vector (2 * GEMM_W bytes: N a multiple
// of GEMM_W and b so aligned) are converted straight from global memory:
// storage_value16's private round trip stalls each k of the multiply on a
// store-to-load forward (the 128x128x784 f16 GEMM took 615 us that way
// against 357 us direct, one Zen 3 core). Where that does not hold, the
// round trip.
#define GEMM_B_ALIGNED(b, N) ((N) % GEMM_W == 0 && (size_t)(b) % (2 * GEMM_W) == 0)
#define GEMM_BVLOAD_ALIGNED(p, o) GEMM_CAT(vload_half, GEMM_W)(0, (p) + (o))
#elif defined(MPCL_STORAGE_BF16)
#define GEMM_VSTORE8(v, p, o) GSTORE_U(ushort8, (p) + (o), mpcl_bf16_bits8(v))
#define GEMM_VSTORE16(v, p, o) GSTORE_U(ushort16, (p) + (o), mpcl_bf16_bits16(v))
#else
#define GEMM_VSTORE8(v, p, o) GSTORE_U(float8, (p) + (o), (v))
#define GEMM_VSTORE16(v, p, o) GSTORE_U(float16, (p) + (o), (v))
#endif
// Elements of op(B) gathered one by one (transposed or narrow B) are copied
// as raw bits into a private array and converted together by one vector load
// from it: a scalar conversion per element cost the f16 gather path 1.7x the
// f32 one on PoCL (128x128x10 NT).
typedef storage_bits_t gemm_raw_t; // common.cl
#define GEMM_RAW_LOAD(p, i) (((__global const gemm_raw_t *)(p))[(i)])
// C held as float (the f32-output kernels of the f16 and bf16 programs).
#define GEMM_FLOAD(p, i) ((p)[(i)])
#define GEMM_FSTORE(p, i, v) ((p)[(i)] = (v))

// Row and lane lists (X-macros). P is passed through to X.
#define GEMM_ROWS4(X, P) X(0, P) X(1, P) X(2, P) X(3, P)
#define GEMM_ROWS8(X, P) GEMM_ROWS4(X, P) X(4, P) X(5, P) X(6, P) X(7, P)
#define GEMM_ROWS16(X, P) \
    GEMM_ROWS8(X, P) X(8, P) X(9, P) X(10, P) X(11, P) X(12, P) X(13, P) X(14, P) X(15, P)

// The pieces of the kernel body. They use each instantiation's tile
// (GEMM_W, GEMM_TM, GEMM_STRIP_MAX, defined around it below) and what
// follows from it (GEMM_VT, GEMM_ROWS, GEMM_BVLOAD, ...: see
// "instantiations"); C's accessors are chosen by the kernel's CF.
// Tile t of the strip: its first row i0 and column j0, and the row ri0 and
// column cj0 its loads start from (shifted or clamped, see top). Strips run
// down the rows, or along the columns where GEMM_STRIP_COLS; a tile past M
// (N) ends the strip.
#define GEMM_TILE                                                \
    const uint i0 = s0 + (GEMM_STRIP_COLS ? 0 : t * GEMM_TM);    \
    const uint j0 = sj0 + (GEMM_STRIP_COLS ? t * GEMM_W : 0);    \
    if (i0 >= M || j0 >= N) break;                               \
    const uint ri0 = M >= GEMM_TM ? min(i0, M - GEMM_TM) : 0;    \
    const uint cj0 = N >= GEMM_W ? min(j0, N - GEMM_W) : 0;
// A row's offset and accumulator, which resumes the tile's partial sums
// after the first block of k.
#define GEMM_DECL(r, P)                                                        \
    const uint ao##r = min(ri0 + (r), M - 1) * ars; /* row offset */           \
    GEMM_VT acc##r = kb ? GEMM_FVLOAD_BLOCK(t * GEMM_TM + (r), part) : (GEMM_VT)(0.0f);
#define GEMM_SAVE(r, P) GEMM_FVSTORE_BLOCK(acc##r, t * GEMM_TM + (r), part);
#define GEMM_RELOAD(r, P) const GEMM_VT acc##r = GEMM_FVLOAD_BLOCK(t * GEMM_TM + (r), part);
// Staging of a W-deep block of op(A) into the private array abuf, converted
// to float once: f16 and bf16 elements are converted with vector loads here
// instead of one scalar vload_half per multiply (6x slower on PoCL). ta == 0
// stores rows (abuf[r * W + kk]), ta == 1 stores columns (abuf[kk * TM + r]).
#define GEMM_STAGE_ROW(r, P) \
    for (uint c_ = 0; c_ < kn; c_ += GEMM_W) \
        GEMM_FVSTORE_BLOCK(GEMM_BVLOAD(a, ao##r + kb + c_), ((r) * GEMM_KB + c_) / GEMM_W, abuf);
#define GEMM_STAGE_SCALAR(r, P) abuf[(r) * rstride + kk * kstride] = LOAD(a, ao##r + (kb + kk) * aks);
// 16-bit storage stages the block's raw bits element by element, then
// converts the whole private array GEMM_W elements at a time (araw is zeroed
// first, so the lanes past kn convert defined bits; only here: zeroing it
// for every item cost the small GEMMs ~1 us).
#define GEMM_STAGE_RAW(r, P) araw[(r) * rstride + kk * kstride] = GEMM_RAW_LOAD(a, ao##r + (kb + kk) * aks);
#define GEMM_CONVERT(q) \
    GEMM_FVSTORE_BLOCK(GEMM_RAW_BVLOAD(araw, (q) * GEMM_W), (q), abuf)
#define GEMM_CONVERT_ROW(r, P) \
    for (uint c_ = 0; c_ < kn; c_ += GEMM_W) GEMM_CONVERT(((r) * GEMM_KB + c_) / GEMM_W);
#if !defined(MPCL_STORAGE_F16)
#define GEMM_B_ALIGNED(b, N) false
#define GEMM_BVLOAD_ALIGNED GEMM_BVLOAD
#endif
#if defined(GEMM_NARROW_STORAGE)
#define GEMM_STAGE_EDGE                                                          \
    for (uint z = 0; z < GEMM_KB * GEMM_TM; z++) araw[z] = 0;                    \
    for (uint kk = 0; kk < kn; kk++) { GEMM_ROWS(GEMM_STAGE_RAW, 0) }            \
    if (ta) {                                                                    \
        for (uint q = 0; q < (kn * GEMM_TM + GEMM_W - 1) / GEMM_W; q++) GEMM_CONVERT(q); \
    } else {                                                                     \
        GEMM_ROWS(GEMM_CONVERT_ROW, 0)                                           \
    }
#else
#define GEMM_STAGE_EDGE \
    for (uint kk = 0; kk < kn; kk++) { GEMM_ROWS(GEMM_STAGE_SCALAR, 0) }
#endif
#define GEMM_FMA(r, P) acc##r = fma((GEMM_VT)(ap[(r) * P]), bv, acc##r);
// One k of the multiply with op(B)'s row gathered element by element into
// a vector value: through a private array, each k stalled on the
// store-to-load forward of the lanes (128x128x10 NT in f32 on AVX-512: 14.6
// us that way, 11.7 so).
#define GEMM_LANES8(X) X(0), X(1), X(2), X(3), X(4), X(5), X(6), X(7)
#define GEMM_LANES16(X) \
    GEMM_LANES8(X), X(8), X(9), X(10), X(11), X(12), X(13), X(14), X(15)
#define GEMM_BLANE(l) GEMM_RAW_LOAD(b, min(cj0 + (l), N - 1) * bcs + (kb + kk) * bks)
// The lanes' raw bits as one vector, converted by common.cl's storage_value.
#define GEMM_RAW_VT GEMM_CAT(GEMM_CAT(storage_bits, GEMM_W), _t)
#define GEMM_GATHER_K(RSTRIDE, AP)                                                     \
    {                                                                                  \
        const GEMM_VT bv = GEMM_CAT(storage_value, GEMM_W)(                            \
            (GEMM_RAW_VT)(GEMM_CAT(GEMM_LANES, GEMM_W)(GEMM_BLANE)));                  \
        AP(kk)                                                                         \
        GEMM_ROWS(GEMM_FMA, RSTRIDE)                                                   \
    }
// Where a k's elements of op(A) are read from: row r's is ap[r * RSTRIDE].
// 16-bit A is staged in abuf, converted once per tile and block: rows
// (ta == 0) or columns (ta == 1). f32 A is read in place when the tile's
// rows are all inside it (M >= GEMM_TM): each element is an fma's broadcast
// operand straight from memory, so staging only copied it (the copy took a
// fifth of the 128x128x784 and 784x128x128 GEMMs' time; in place they ran
// 1.2x and 1.3x faster, Zen 4, two threads). With ta == 1 a k's elements
// are contiguous; with ta == 0 they are K apart (LLVM keeps a pointer per
// row, some spilled: the extra loads cost less than the copy did).
#define GEMM_AP_ROWS(kk) const float *ap = abuf + (kk);
#define GEMM_AP_COLS(kk) const float *ap = abuf + (kk) * GEMM_TM;
#if GEMM_A_DIRECT
#define GEMM_AP_IN_ROWS(kk) __global const float *ap = a + ri0 * K + kb + (kk);
#define GEMM_AP_IN_COLS(kk) __global const float *ap = a + (kb + (kk)) * M + ri0;
#define GEMM_BLOCK_DIRECT                  \
    if (in_place && ta) {                  \
        GEMM_BLOCK(1, GEMM_AP_IN_COLS)     \
    } else if (in_place) {                 \
        GEMM_BLOCK(K, GEMM_AP_IN_ROWS)     \
    } else
#else
#define GEMM_BLOCK_DIRECT
#endif
// With ta (the weight gradients: K is the batch, thousands of rows), each
// k reads one 64-byte piece of a row of A and of B, rows 1-2 KiB apart:
// few to a 4 KiB page, which the CPU's stream prefetcher does not follow,
// and the operands come cold from memory in training (their forward ran long
// before). So the row GEMM_PREFETCH_AHEAD k's ahead is prefetched, where the
// program was built with MPCL_PREFETCH (common.cl's PREFETCH_READ). Cold, on Zen 4
// with two threads: 128x512x2048 TN 2.5 -> 1.6 ms, 512x128x2048 2.2 -> 1.9,
// 128x384x2048 1.6 -> 1.2; 16 rows ahead did a little worse, 64 the same.
// And a tile's rows of C are prefetched for writing as its last block of k
// starts: C is new memory to the cache, whose lines each store would first
// read (cold, 2048x384x128 NN 1.19 -> 1.09 ms, 2048x512x128 1.53 -> 1.48).
#define GEMM_PREFETCH_AHEAD 32u
#define GEMM_PREFETCH_ROW(p, ld, col, k) \
    PREFETCH_READ((p) + min((k) + GEMM_PREFETCH_AHEAD, K - 1u) * (ld) + (col))
#define GEMM_PREFETCH_C(r, P) PREFETCH_WRITE(c + min(i0 + (r), M - 1u) * N + j0);
// The multiply of one block; RSTRIDE is ap's row stride.
#define GEMM_BLOCK(RSTRIDE, AP)                                                        \
    if (bvec && baligned) {                                                            \
        for (uint kk = 0; kk < kn; kk++) {                                             \
            const GEMM_VT bv = GEMM_BVLOAD_ALIGNED(b, (kb + kk) * N + cj0);            \
            AP(kk)                                                                     \
            GEMM_ROWS(GEMM_FMA, RSTRIDE)                                               \
        }                                                                              \
    } else if (bvec) {                                                                 \
        const uint kv = bvec_rows > kb ? min(kn, bvec_rows - kb) : 0;                  \
        uint kk = 0;                                                                   \
        for (; kk < kv; kk++) {                                                        \
            if (ta) GEMM_PREFETCH_ROW(b, N, cj0, kb + kk);                              \
            if (ta && in_place) GEMM_PREFETCH_ROW(a, M, ri0, kb + kk);                  \
            const GEMM_VT bv = GEMM_BVLOAD(b, (kb + kk) * N + cj0);                    \
            AP(kk)                                                                     \
            GEMM_ROWS(GEMM_FMA, RSTRIDE)                                               \
        }                                                                              \
        for (; kk < kn; kk++) GEMM_GATHER_K(RSTRIDE, AP)                               \
    } else {                                                                           \
        for (uint kk = 0; kk < kn; kk++) GEMM_GATHER_K(RSTRIDE, AP)                    \
    }
// C's element type and accessors, by CF: 0 in the storage dtype, 1 in float
// (the *_cf32 kernels of the f16 and bf16 programs). The stores below get CF
// as P.
#define GEMM_CT_0 storage_t
#define GEMM_CT_1 float
#define GEMM_CLOAD_0 LOAD
#define GEMM_CLOAD_1 GEMM_FLOAD
#define GEMM_CSTORE_0 STORE
#define GEMM_CSTORE_1 GEMM_FSTORE
#define GEMM_CVLOAD_0 GEMM_BVLOAD
#define GEMM_CVLOAD_1(p, o) GLOAD_U(GEMM_VT, (p) + (o))
#define GEMM_CVSTORE_0 GEMM_BVSTORE
#define GEMM_CVSTORE_1(v, p, o) GSTORE_U(GEMM_VT, (p) + (o), (v))
// The epilogue, where the host asked for one (epi, cl/abi.h): after
// alpha * op(A) op(B) + beta * C, the bias of the column and an addend of
// C's shape, so that a linear Dense (and a residual sum after it) is one
// pass over C. The same f32 additions in the same order as the separate
// kernels; 16-bit C is rounded once where those round twice.
#define GEMM_EPILOGUE_FULL(P)                                                  \
    if (epi & MPCL_ABI_GEMM_EPI_BIAS) v_ += GLOAD_U(GEMM_VT, bias + j0);       \
    if (epi & MPCL_ABI_GEMM_EPI_ADDEND) v_ += GEMM_CVLOAD_##P(addend, o_);
#define GEMM_EPILOGUE_EDGE(P)                                                  \
    if (epi & MPCL_ABI_GEMM_EPI_BIAS) v_ += bias[j_];                          \
    if (epi & MPCL_ABI_GEMM_EPI_ADDEND) v_ += GEMM_CLOAD_##P(addend, i_ * N + j_);
// Whole tile in place: one vector store per row. beta == 0 never reads C.
#define GEMM_STORE_FULL(r, P)                                                  \
    {                                                                          \
        const uint o_ = (i0 + (r)) * N + j0;                                   \
        GEMM_VT v_ = alpha * acc##r;                                           \
        if (beta != 0.0f) v_ = fma((GEMM_VT)(beta), GEMM_CVLOAD_##P(c, o_), v_); \
        GEMM_EPILOGUE_FULL(P)                                                  \
        GEMM_CVSTORE_##P(v_, c, o_);                                             \
    }
// Edge tile: element by element, only what this tile owns (loops rather than
// unrolled lanes keep the program small; Rusticl compiles it slowly).
#define GEMM_STORE_EDGE(r, P)                                                      \
    {                                                                              \
        const uint i_ = ri0 + (r);                                                 \
        if (i_ >= i0 && i_ < M) {                                                  \
            GEMM_FVSTORE_BLOCK(acc##r, 0, tmp);                                    \
            for (uint l = 0; l < GEMM_W; l++) {                                    \
                const uint j_ = cj0 + l;                                           \
                if (j_ < j0 || j_ >= N) continue;                                  \
                float v_ = alpha * tmp[l];                                         \
                if (beta != 0.0f) v_ = fma(beta, GEMM_CLOAD_##P(c, i_ * N + j_), v_); \
                GEMM_EPILOGUE_EDGE(P)                                                  \
                GEMM_CSTORE_##P(c, i_ * N + j_, v_);                                \
            }                                                                      \
        }                                                                          \
    }

#define GEMM_KERNEL(NAME, CF)                                                                    \
    __kernel void NAME(__global const storage_t *a, __global const storage_t *b,               \
                       __global GEMM_CT_##CF *c, uint M, uint N, uint K, uint ta, uint tb,          \
                       float alpha, float beta, uint strip, __global const float *bias,        \
                       __global const GEMM_CT_##CF *addend, uint epi) {                         \
        /* This item's strip: strip tiles from row s0 and column sj0. */                      \
        const uint s0 = get_global_id(1) * GEMM_TM * (GEMM_STRIP_COLS ? 1 : strip);             \
        const uint sj0 = get_global_id(0) * GEMM_W * (GEMM_STRIP_COLS ? strip : 1);             \
        if (s0 >= M || sj0 >= N) return;                                                       \
        /* op(A)(i, k) = a[i * ars + k * aks]; op(B)(k, j) = b[j * bcs + k * bks]. */          \
        const uint ars = ta ? 1 : K, aks = ta ? M : 1;                                         \
        const uint bcs = tb ? K : 1, bks = tb ? 1 : N;                                         \
        /* op(B) rows as vectors when stored row-major. Rows narrower than a  */               \
        /* vector (N < GEMM_W, so cj0 == 0) run on into the next row, whose   */               \
        /* lanes are never stored; the last rows, where the vector would run  */               \
        /* past B, are gathered: rows k < bvec_rows load whole vectors.       */               \
        const uint bvec_rows =                                                                 \
            N >= GEMM_W ? K : (K * N >= GEMM_W ? (K * N - GEMM_W) / N + 1 : 0);                \
        const bool bvec = !tb && bvec_rows > 0, baligned = GEMM_B_ALIGNED(b, N);               \
        /* f32 A read in place where every row of a tile is inside it and     */               \
        /* its rows are not a multiple of 4 KiB apart, nor its k's (ta) of 2  */               \
        /* KiB: those fall into two sets of L1 and leave before the strip's   */               \
        /* next tile reads them again (512x128x2048 TN, A cold: 2.5 -> 2.2 ms */               \
        /* staged, Zen 4, two threads).                                       */               \
        const bool in_place =                                                                  \
            GEMM_A_DIRECT && M >= GEMM_TM && (ta ? M % 512u : K % 1024u) != 0u;                \
        const uint rstride = ta ? 1 : GEMM_KB, kstride = ta ? GEMM_TM : 1;                     \
        float abuf[GEMM_KB * GEMM_TM], tmp[GEMM_W], part[GEMM_STRIP_MAX * GEMM_TM * GEMM_W];       \
        gemm_raw_t araw[GEMM_KB * GEMM_TM];                                                    \
        for (uint kb = 0; kb < K; kb += GEMM_KB) {                                             \
            const uint kn = min((uint)GEMM_KB, K - kb);                                        \
            /* The tiles of the strip in turn, so this block of op(B) (a strip */              \
            /* of rows) is read from memory once and from the cache for the    */              \
            /* other tiles, or op(A)'s (a strip of columns) staged once.       */              \
            for (uint t = 0; t < strip; t++) {                                            \
                GEMM_TILE                                                                      \
                if (kb + GEMM_KB >= K) { GEMM_ROWS(GEMM_PREFETCH_C, 0) }                       \
                GEMM_ROWS(GEMM_DECL, 0)                                                        \
                /* Rows by vectors where the last vector of the last row stays   */            \
                /* inside A: lanes past kn are staged but never multiplied.      */            \
                const uint alast = min(ri0 + GEMM_TM - 1, M - 1) * K + kb;                    \
                if (GEMM_STRIP_COLS && t > 0) {                                                \
                    /* the strip's rows, staged for its first tile */                          \
                } else if (in_place) {                                                         \
                    /* read in place (GEMM_BLOCK_DIRECT) */                                    \
                } else if (!ta && (kn % GEMM_W == 0 ||                                         \
                            M * K - alast >= (kn + GEMM_W - 1) / GEMM_W * GEMM_W)) {           \
                    GEMM_ROWS(GEMM_STAGE_ROW, 0)                                               \
                } else if (ta && M >= GEMM_TM) { /* ta: columns are contiguous */              \
                    for (uint kk = 0; kk < kn; kk++) {                                         \
                        GEMM_PREFETCH_ROW(a, M, ri0, kb + kk);                                 \
                        GEMM_AFVSTORE(GEMM_AVLOAD(a, (kb + kk) * M + ri0), kk, abuf);          \
                    }                                                                          \
                } else {                                                                       \
                    GEMM_STAGE_EDGE                                                            \
                }                                                                              \
                GEMM_BLOCK_DIRECT                                                              \
                if (ta) {                                                                      \
                    GEMM_BLOCK(1, GEMM_AP_COLS)                                                \
                } else {                                                                       \
                    GEMM_BLOCK(GEMM_KB, GEMM_AP_ROWS)                                          \
                }                                                                              \
                GEMM_ROWS(GEMM_SAVE, 0)                                                        \
            }                                                                                  \
        }                                                                                      \
        for (uint t = 0; t < strip; t++) {                                                \
            GEMM_TILE                                                                          \
            GEMM_ROWS(GEMM_RELOAD, 0)                                                          \
            if (ri0 == i0 && cj0 == j0 && i0 + GEMM_TM <= M && j0 + GEMM_W <= N) {             \
                GEMM_ROWS(GEMM_STORE_FULL, CF)                                                  \
            } else {                                                                           \
                GEMM_ROWS(GEMM_STORE_EDGE, CF)                                                  \
            }                                                                                  \
        }                                                                                      \
    }

// ---- instantiations ----

// k runs in blocks of GEMM_KB: op(A)'s block is staged once per block, so
// the per-block work (staging, branches, the store-to-load stall of the first
// broadcasts) is spread over GEMM_KB multiplies.
#define GEMM_KB 64

// Each instantiation defines the tile (GEMM_TM rows by GEMM_W columns) and
// GEMM_STRIP_MAX; the vector types and accessors follow from the widths:
// rows of op(B) and C are GEMM_W wide, the staged columns of A GEMM_TM.
#define GEMM_CAT(a, b) GEMM_CAT_(a, b)
#define GEMM_CAT_(a, b) a##b
#define GEMM_VT GEMM_CAT(float, GEMM_W)
#define GEMM_ROWS GEMM_CAT(GEMM_ROWS, GEMM_TM)
#define GEMM_BVLOAD GEMM_CAT(GEMM_VLOAD, GEMM_W)
#define GEMM_BVSTORE GEMM_CAT(GEMM_VSTORE, GEMM_W)
#define GEMM_RAW_BVLOAD(p, o) GEMM_PVLOADN(GEMM_W, p, o)
#define GEMM_FVSTORE_BLOCK(v, i, p) PSTORE_U(GEMM_VT, (p) + (i) * GEMM_W, (v))
#define GEMM_FVLOAD_BLOCK(i, p) PLOAD_U(GEMM_VT, (p) + (i) * GEMM_W)
#define GEMM_AVLOAD GEMM_CAT(GEMM_VLOAD, GEMM_TM)
#define GEMM_AFVSTORE(v, i, p) PSTORE_U(GEMM_CAT(float, GEMM_TM), (p) + (i) * GEMM_TM, (v))

// Wide: 16 rows x 16 columns (N >= 16). The host sizes the range with the
// tile of cl/abi.h, which the vector type fixes. Strips run along the
// columns: their tiles share a block of A's rows, staged (16-bit) or in L1.
#if MPCL_ABI_GEMM_TILE_WIDE != 16
#error "mpcl_gemm_w16 computes float16 tiles: MPCL_ABI_GEMM_TILE_WIDE must be 16"
#endif
#define GEMM_W MPCL_ABI_GEMM_TILE_WIDE
#define GEMM_TM MPCL_ABI_GEMM_TILE_WIDE
#define GEMM_STRIP_MAX MPCL_ABI_GEMM_COL_STRIP_MAX
#define GEMM_STRIP_COLS 1
GEMM_KERNEL(mpcl_gemm_w16, 0)
#if defined(GEMM_NARROW_STORAGE)
GEMM_KERNEL(mpcl_gemm_w16_cf32, 1)
#endif
#undef GEMM_W
#undef GEMM_TM
#undef GEMM_STRIP_MAX
#undef GEMM_STRIP_COLS

// Flat: 4 rows x 16 columns (N >= 16) for 8-wide float vectors (AVX2: 16
// registers): the 8 accumulators are 8 registers, each op(B) row is two
// full vectors (a whole 64-byte line) used 4 times, and a k costs 6 loads
// for 8 fmas where 8x8 tiles paid 9 loads for 8.
#if MPCL_ABI_GEMM_TILE_FLAT_ROWS != 4
#error "mpcl_gemm_r4w16 stages float4 columns: MPCL_ABI_GEMM_TILE_FLAT_ROWS must be 4"
#endif
#define GEMM_W MPCL_ABI_GEMM_TILE_WIDE
#define GEMM_TM MPCL_ABI_GEMM_TILE_FLAT_ROWS
#define GEMM_STRIP_MAX MPCL_ABI_GEMM_STRIP_MAX
#define GEMM_STRIP_COLS 0
GEMM_KERNEL(mpcl_gemm_r4w16, 0)
#if defined(GEMM_NARROW_STORAGE)
GEMM_KERNEL(mpcl_gemm_r4w16_cf32, 1)
#endif
#undef GEMM_W
#undef GEMM_TM
#undef GEMM_STRIP_MAX
#undef GEMM_STRIP_COLS

// Narrow: 8 rows x 8 columns, for N < 16 on 8-wide vectors and for
// transposed B (the output layer: N = 10 wastes nothing, its second column
// tile is shifted to columns 2..9).
#if MPCL_ABI_GEMM_TILE_NARROW != 8
#error "mpcl_gemm_w8 computes float8 tiles: MPCL_ABI_GEMM_TILE_NARROW must be 8"
#endif
#define GEMM_W MPCL_ABI_GEMM_TILE_NARROW
#define GEMM_TM MPCL_ABI_GEMM_TILE_NARROW
#define GEMM_STRIP_MAX 1
#define GEMM_STRIP_COLS 0
GEMM_KERNEL(mpcl_gemm_w8, 0)
#if defined(GEMM_NARROW_STORAGE)
GEMM_KERNEL(mpcl_gemm_w8_cf32, 1)
#endif
#undef GEMM_W
#undef GEMM_TM
#undef GEMM_STRIP_MAX
#undef GEMM_STRIP_COLS
#undef GEMM_NARROW_STORAGE
