/* Convolution and max pooling (include/mpcl/conv.h) against the direct
 * double-precision loops of ref_ops.c: the window arithmetic, im2col exact
 * and col2im as its adjoint, the convolution's forward, d_in and d_weights
 * on every GEMM path in every storage dtype, max pooling with ties and NaN,
 * poisoned outputs (every element written, nothing past the end), finite
 * differences in f32, and the shape errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h" /* mpcl__tensor_rows */
#include "ref_ops.h"
#include "testutil.h"

static uint64_t seed_counter = 0xc0de0001;

/* The value a tensor of `dtype` holds after uploading x. */
static float stored(mpcl_dtype dtype, float x) {
    if (dtype == MPCL_DTYPE_F16) return mpcl_f16_to_f32(mpcl_f32_to_f16(x));
    if (dtype == MPCL_DTYPE_BF16) return mpcl_bf16_to_f32(mpcl_f32_to_bf16(x));
    return x;
}

/* n values uniform in [lo, hi], as stored in dtype, and their doubles. */
static float *random_stored(tu_rng *r, mpcl_dtype dt, size_t n, float lo, float hi, double **d) {
    float *x = malloc(n * sizeof *x);
    *d = malloc(n * sizeof **d);
    tu_fill_uniform(r, x, n, lo, hi);
    for (size_t i = 0; i < n; i++) (*d)[i] = x[i] = stored(dt, x[i]);
    return x;
}

static double *abs_copy(const double *x, size_t n) {
    double *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = fabs(x[i]);
    return a;
}

static float *download(const mpcl_tensor *t) {
    size_t n = mpcl_tensor_count(t);
    float *x = malloc(n * sizeof *x);
    TU_ASSERT_OK(mpcl_tensor_download_f32(t, x, n));
    return x;
}

static mpcl_tensor *upload(mpcl_context *ctx, mpcl_dtype dt, size_t rows, size_t cols,
                           const float *x) {
    mpcl_tensor *t = tu_tensor(ctx, dt, rows, cols);
    TU_ASSERT_OK(mpcl_tensor_upload_f32(t, x, rows * cols));
    return t;
}

/* ---- outputs with a poisoned tail ---- */

/* An output: `rows` x cols poisoned, with TAIL_ROWS more poisoned rows after
 * them, which no op may write; `view` is the first rows. */
enum { TAIL_ROWS = 2 };
typedef struct guarded {
    mpcl_tensor *whole;
    mpcl_tensor view;
} guarded;

static guarded guarded_make(mpcl_context *ctx, mpcl_dtype dt, size_t rows, size_t cols) {
    guarded g;
    g.whole = tu_tensor(ctx, dt, rows + TAIL_ROWS, cols);
    tu_poison(g.whole);
    g.view = mpcl__tensor_rows(g.whole, rows);
    return g;
}

/* Fails unless every element past the view still holds the poison. */
static void guarded_check_tail(const guarded *g, const char *what) {
    size_t bytes = mpcl_tensor_bytes(g->whole), used = mpcl_tensor_bytes(&g->view);
    unsigned char *raw = malloc(bytes);
    TU_ASSERT_OK(mpcl_tensor_download_raw(g->whole, raw, bytes));
    mpcl_dtype dt = mpcl_tensor_dtype(g->whole);
    size_t size = mpcl_dtype_size(dt);
    for (size_t at = used; at < bytes; at += size) {
        bool poisoned;
        if (size == 2) {
            uint16_t h;
            memcpy(&h, raw + at, 2);
            poisoned = h == TU_POISON_16(dt);
        } else {
            float p = tu_poison_f32();
            poisoned = memcmp(raw + at, &p, 4) == 0;
        }
        if (!poisoned) fail_msg("%s: element %zu past the end was written", what, at / size);
    }
    free(raw);
}

/* ---- windows ---- */

typedef struct axis_case {
    size_t in, k, s;
    mpcl_padding padding;
    size_t out, before, after; /* worked out by hand from Keras' rules */
} axis_case;

static const axis_case axis_cases[] = {
    {7, 3, 2, MPCL_PADDING_VALID, 3, 0, 0}, /* (7 - 3) / 2 + 1 */
    {7, 3, 2, MPCL_PADDING_SAME, 4, 1, 1},  /* 3*2 + 3 - 7 = 2 */
    {6, 4, 1, MPCL_PADDING_SAME, 6, 1, 2},  /* even kernel: the extra after */
    {5, 2, 2, MPCL_PADDING_SAME, 3, 0, 1},  /* 2*2 + 2 - 5 = 1 */
    {3, 5, 1, MPCL_PADDING_SAME, 3, 2, 2},  /* kernel beyond the image */
    {4, 4, 1, MPCL_PADDING_VALID, 1, 0, 0}, /* kernel as large as the image */
    {7, 1, 3, MPCL_PADDING_VALID, 3, 0, 0}, /* stride beyond the kernel */
    {1, 1, 5, MPCL_PADDING_SAME, 1, 0, 0},
    {6, 2, 2, MPCL_PADDING_SAME, 3, 0, 0}, /* windows tile the image: no padding */
};

static void test_windows(void **state) {
    (void)state;
    for (int p = 0; p < MPCL_PADDING_COUNT; p++) {
        mpcl_padding back = MPCL_PADDING_COUNT;
        assert_true(mpcl_padding_parse(mpcl_padding_name((mpcl_padding)p), &back));
        assert_int_equal(back, p);
    }
    mpcl_padding x = MPCL_PADDING_SAME;
    assert_false(mpcl_padding_parse("full", &x));
    assert_false(mpcl_padding_parse(NULL, &x));
    assert_int_equal(x, MPCL_PADDING_SAME);
    assert_string_equal(mpcl_padding_name(MPCL_PADDING_COUNT), "unknown");

    for (size_t i = 0; i < sizeof axis_cases / sizeof axis_cases[0]; i++) {
        const axis_case *a = &axis_cases[i];
        /* Height and width each take the case, the other axis a fixed one. */
        mpcl_conv2d_shape cs = {2, a->in, 9, 3, a->k, 2, 4, a->s, 1, a->padding};
        mpcl_pool2d_shape ps = {2, 9, a->in, 3, 2, a->k, 1, a->s, a->padding};
        mpcl_window2d cw, pw;
        TU_ASSERT_OK(mpcl_conv2d_window(NULL, &cs, &cw));
        TU_ASSERT_OK(mpcl_pool2d_window(NULL, &ps, &pw));
        if (cw.out_h != a->out || cw.pad_top != a->before || cw.pad_bottom != a->after ||
            pw.out_w != a->out || pw.pad_left != a->before || pw.pad_right != a->after)
            fail_msg(
                "in %zu k %zu s %zu %s: conv %zu (%zu, %zu), pool %zu (%zu, %zu), want %zu "
                "(%zu, %zu)",
                a->in, a->k, a->s, mpcl_padding_name(a->padding), cw.out_h, cw.pad_top,
                cw.pad_bottom, pw.out_w, pw.pad_left, pw.pad_right, a->out, a->before, a->after);
        /* And the reference's own arithmetic agrees. */
        size_t out, before;
        ref_window(a->in, a->k, a->s, a->padding, &out, &before);
        assert_int_equal(out, a->out);
        assert_int_equal(before, a->before);
    }
}

/* ---- error paths ---- */

static void test_window_errors(void **state) {
    (void)state;
    mpcl_window2d w;
    const mpcl_conv2d_shape good = {2, 7, 5, 3, 3, 3, 4, 2, 2, MPCL_PADDING_SAME};
    TU_ASSERT_OK(mpcl_conv2d_window(NULL, &good, &w));
    /* Each size 0 in turn, named. */
    static const char *const fields[] = {"batch",    "height",  "width",    "channels", "kernel_h",
                                         "kernel_w", "filters", "stride_h", "stride_w"};
    for (size_t f = 0; f < 9; f++) {
        mpcl_conv2d_shape s = good;
        size_t *sizes[] = {&s.batch,    &s.height,  &s.width,    &s.channels, &s.kernel_h,
                           &s.kernel_w, &s.filters, &s.stride_h, &s.stride_w};
        *sizes[f] = 0;
        char needle[32];
        snprintf(needle, sizeof needle, "%s is 0", fields[f]);
        tu_expect_error(mpcl_conv2d_window(NULL, &s, &w), MPCL_ERR_SHAPE, needle);
    }
    mpcl_conv2d_shape s = good;
    s.padding = MPCL_PADDING_VALID;
    s.kernel_w = 6;
    tu_expect_error(mpcl_conv2d_window(NULL, &s, &w), MPCL_ERR_SHAPE,
                    "kernel_w 6 is larger than the width 5");
    s = good;
    s.padding = MPCL_PADDING_COUNT;
    tu_expect_error(mpcl_conv2d_window(NULL, &s, &w), MPCL_ERR_INVALID_ARG, "unknown padding");
    /* Past the kernels' uint indices: the input, then the columns. */
    s = (mpcl_conv2d_shape){1u << 20, 64, 64, 3, 3, 3, 8, 1, 1, MPCL_PADDING_SAME};
    tu_expect_error(mpcl_conv2d_window(NULL, &s, &w), MPCL_ERR_SHAPE, "the input");
    s = (mpcl_conv2d_shape){1, 1024, 1024, 512, 3, 3, 1, 1, 1, MPCL_PADDING_SAME};
    tu_expect_error(mpcl_conv2d_window(NULL, &s, &w), MPCL_ERR_SHAPE, "the columns");
    s = (mpcl_conv2d_shape){1, 4, 4, 65536, 256, 256, 1, 1, 1, MPCL_PADDING_SAME};
    tu_expect_error(mpcl_conv2d_window(NULL, &s, &w), MPCL_ERR_SHAPE, "the weights");
    s = (mpcl_conv2d_shape){SIZE_MAX / 2, 2, 2, 2, 1, 1, 1, 1, 1, MPCL_PADDING_VALID};
    tu_expect_error(mpcl_conv2d_window(NULL, &s, &w), MPCL_ERR_SHAPE, "the input");
    tu_expect_error(mpcl_conv2d_window(NULL, NULL, &w), MPCL_ERR_INVALID_ARG, "shape is NULL");

    mpcl_pool2d_shape p = {1, 7, 5, 1, 8, 2, 2, 2, MPCL_PADDING_VALID};
    tu_expect_error(mpcl_pool2d_window(NULL, &p, &w), MPCL_ERR_SHAPE,
                    "pool_h 8 is larger than the height 7");
    p = (mpcl_pool2d_shape){1, 7, 5, 1, 2, 2, 0, 2, MPCL_PADDING_VALID};
    tu_expect_error(mpcl_pool2d_window(NULL, &p, &w), MPCL_ERR_SHAPE, "stride_h is 0");
    /* The kernels' uint window, stride and padded positions. */
    p = (mpcl_pool2d_shape){1, 7, 5, 1, 2, 2, (size_t)1 << 33, 2, MPCL_PADDING_SAME};
    tu_expect_error(mpcl_pool2d_window(NULL, &p, &w), MPCL_ERR_SHAPE, "stride_h 8589934592");
    p = (mpcl_pool2d_shape){1, 7, 5, 1, 2, SIZE_MAX, 1, 1, MPCL_PADDING_SAME};
    tu_expect_error(mpcl_pool2d_window(NULL, &p, &w), MPCL_ERR_SHAPE,
                    "pool_w 18446744073709551615");
    p = (mpcl_pool2d_shape){1, 7, 5, 1, 2, 0xffffffff, 1, 1, MPCL_PADDING_SAME};
    tu_expect_error(mpcl_pool2d_window(NULL, &p, &w), MPCL_ERR_SHAPE,
                    "the width padded for pool_w");
    /* argmax is an i32 position in the image. */
    p = (mpcl_pool2d_shape){1, 65536, 32769, 1, 2, 2, 2, 2, MPCL_PADDING_VALID};
    tu_expect_error(mpcl_pool2d_window(NULL, &p, &w), MPCL_ERR_SHAPE, "argmax");
}

/* Wrong tensors: each refused with its name, and the outputs keep their
 * poison (nothing enqueued). */
static void test_tensor_errors(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const mpcl_conv2d_shape s = {2, 5, 4, 3, 3, 2, 4, 1, 1, MPCL_PADDING_SAME};
    const mpcl_dtype dt = MPCL_DTYPE_F32;
    const mpcl_gemm_path path = mpcl_gemm_default_path(ctx, dt);
    mpcl_tensor *in = tu_tensor(ctx, dt, 2, 5 * 4 * 3), *w = tu_tensor(ctx, dt, 3 * 2 * 3, 4);
    mpcl_tensor *out = tu_tensor(ctx, dt, 2, 5 * 4 * 4), *cols = tu_tensor(ctx, dt, 40, 18);
    mpcl_tensor *d_in = tu_tensor(ctx, dt, 2, 60), *d_w = tu_tensor(ctx, dt, 18, 4);
    mpcl_tensor *bad_rows = tu_tensor(ctx, dt, 3, 60),
                *half_in = tu_tensor(ctx, MPCL_DTYPE_F16, 2, 60);
    mpcl_tensor *wrong_cols = tu_tensor(ctx, dt, 40, 17),
                *ints = tu_tensor(ctx, MPCL_DTYPE_I32, 2, 80);
    mpcl_tensor *outputs[] = {out, cols, d_in, d_w};
    for (size_t i = 0; i < 4; i++) tu_poison(outputs[i]);

    tu_expect_error(mpcl_conv2d_forward(ctx, path, &s, out, bad_rows, w, cols), MPCL_ERR_SHAPE,
                    "in is 3x60, want 2x60");
    tu_expect_error(mpcl_conv2d_forward(ctx, path, &s, out, in, w, wrong_cols), MPCL_ERR_SHAPE,
                    "columns is 40x17, want 40x18");
    tu_expect_error(mpcl_conv2d_forward(ctx, path, &s, out, half_in, w, cols), MPCL_ERR_DTYPE,
                    "weights is f32, want f16");
    tu_expect_error(mpcl_conv2d_forward(ctx, path, &s, ints, in, w, cols), MPCL_ERR_DTYPE,
                    "out is i32");
    tu_expect_error(mpcl_conv2d_forward(ctx, path, &s, out, in, NULL, cols), MPCL_ERR_INVALID_ARG,
                    "weights is NULL");
    /* A GEMM path that cannot take f32: refused before im2col writes. */
    tu_expect_error(mpcl_conv2d_forward(ctx, MPCL_GEMM_MPCL_MIXED, &s, out, in, w, cols),
                    MPCL_ERR_DTYPE, "mpcl-mixed");
    tu_expect_error(mpcl_conv2d_backward(ctx, path, &s, d_in, d_w, ints, in, w, cols, false),
                    MPCL_ERR_DTYPE, "d_out is i32");
    tu_expect_error(mpcl_conv2d_backward(ctx, path, &s, bad_rows, d_w, out, in, w, cols, false),
                    MPCL_ERR_SHAPE, "d_in is 3x60");
    tu_expect_error(
        mpcl_conv2d_backward(ctx, MPCL_GEMM_MPCL_MIXED, &s, d_in, d_w, out, in, w, cols, false),
        MPCL_ERR_DTYPE, "mpcl-mixed");
    tu_expect_error(mpcl_im2col(ctx, &s, wrong_cols, in), MPCL_ERR_SHAPE, "columns is 40x17");
    tu_expect_error(mpcl_col2im(ctx, &s, half_in, cols), MPCL_ERR_DTYPE,
                    "d_columns is f32, want f16");
    mpcl_conv2d_shape zero = s;
    zero.filters = 0;
    tu_expect_error(mpcl_conv2d_forward(ctx, path, &zero, out, in, w, cols), MPCL_ERR_SHAPE,
                    "mpcl_conv2d_forward: filters is 0");

    const mpcl_pool2d_shape ps = {2, 5, 4, 3, 2, 2, 2, 2, MPCL_PADDING_VALID};
    mpcl_tensor *p_out = tu_tensor(ctx, dt, 2, 2 * 2 * 3),
                *arg = tu_tensor(ctx, MPCL_DTYPE_I32, 2, 12);
    mpcl_tensor *arg_f = tu_tensor(ctx, dt, 2, 12);
    tu_poison(p_out);
    tu_expect_error(mpcl_maxpool2d_forward(ctx, &ps, p_out, arg_f, in), MPCL_ERR_DTYPE,
                    "argmax is f32, want i32");
    tu_expect_error(mpcl_maxpool2d_forward(ctx, &ps, p_out, arg, bad_rows), MPCL_ERR_SHAPE,
                    "in is 3x60");
    tu_expect_error(mpcl_maxpool2d_forward(ctx, &ps, out, arg, in), MPCL_ERR_SHAPE,
                    "out is 2x80, want 2x12");
    tu_expect_error(mpcl_maxpool2d_backward(ctx, &ps, d_in, p_out, NULL), MPCL_ERR_INVALID_ARG,
                    "argmax is NULL");
    tu_expect_error(mpcl_maxpool2d_backward(ctx, &ps, half_in, p_out, arg), MPCL_ERR_DTYPE,
                    "d_in is f16, want f32");

    mpcl_tensor *poisoned[] = {out, cols, d_in, d_w, p_out};
    for (size_t i = 0; i < 5; i++) {
        float *x = download(poisoned[i]);
        for (size_t j = 0; j < mpcl_tensor_count(poisoned[i]); j++)
            if (!isnan(x[j])) fail_msg("output %zu element %zu written by a refused call", i, j);
        free(x);
    }
    mpcl_tensor *all[] = {in,      w,          out,  cols,  d_in, d_w,  bad_rows,
                          half_in, wrong_cols, ints, p_out, arg,  arg_f};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    mpcl_context_destroy(ctx);
}

/* ---- im2col and col2im ---- */

/* im2col is a copy: exact, zeros in the padding, against the definition.
 * col2im is its adjoint: <im2col(x), y> = <x, col2im(y)> for any x, y, up to
 * col2im's f32 sums (each d_in element adds at most kernel_h * kernel_w
 * terms). Both dtypes of the copy: f32 and a 16-bit one. */
static void test_im2col_col2im(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(seed_counter++);
    const mpcl_conv2d_shape shapes[] = {
        {3, 7, 5, 3, 3, 3, 1, 2, 2, MPCL_PADDING_SAME},
        {2, 6, 5, 2, 4, 2, 1, 1, 1, MPCL_PADDING_SAME},
        {2, 7, 7, 1, 1, 1, 1, 3, 3, MPCL_PADDING_VALID},
        /* Channels in chunks of eight, with a tail and without: */
        {2, 6, 5, 11, 3, 2, 1, 1, 2, MPCL_PADDING_SAME},
        {2, 5, 6, 16, 2, 3, 1, 2, 1, MPCL_PADDING_VALID},
        /* col2im's passes of 32 channels: a partial fourth chunk; two passes */
        {1, 4, 5, 27, 3, 3, 1, 2, 2, MPCL_PADDING_VALID},
        {1, 5, 4, 45, 2, 2, 1, 1, 1, MPCL_PADDING_SAME},
    };
    const mpcl_dtype dts[] = {MPCL_DTYPE_F32, MPCL_DTYPE_BF16};
    for (size_t d = 0; d < 2; d++) {
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const mpcl_conv2d_shape *s = &shapes[si];
            mpcl_window2d w;
            TU_ASSERT_OK(mpcl_conv2d_window(ctx, s, &w));
            size_t rows, cols;
            mpcl_conv2d_columns_shape(s, &w, &rows, &cols);
            size_t img = s->height * s->width * s->channels, n_in = s->batch * img;
            double *xd, *yd;
            float *x = random_stored(&r, dts[d], n_in, -1, 1, &xd);
            float *y = random_stored(&r, dts[d], rows * cols, -1, 1, &yd);
            mpcl_tensor *t_x = upload(ctx, dts[d], s->batch, img, x);
            mpcl_tensor *t_y = upload(ctx, dts[d], rows, cols, y);
            guarded g_cols = guarded_make(ctx, dts[d], rows, cols);
            guarded g_dx = guarded_make(ctx, dts[d], s->batch, img);
            TU_ASSERT_OK(mpcl_im2col(ctx, s, &g_cols.view, t_x));
            TU_ASSERT_OK(mpcl_col2im(ctx, s, &g_dx.view, t_y));
            guarded_check_tail(&g_cols, "im2col");
            guarded_check_tail(&g_dx, "col2im");
            float *c = download(&g_cols.view), *dx = download(&g_dx.view);
            /* The definition: row (b, oh, ow), column (kh, kw, ch). */
            double lhs = 0, rhs = 0, mag = 0;
            for (size_t m = 0; m < rows; m++) {
                size_t ow = m % w.out_w, oh = m / w.out_w % w.out_h, b = m / w.out_w / w.out_h;
                for (size_t k = 0; k < cols; k++) {
                    size_t ch = k % s->channels, kw = k / s->channels % s->kernel_w;
                    size_t kh = k / s->channels / s->kernel_w;
                    long h = (long)(oh * s->stride_h + kh) - (long)w.pad_top;
                    long x_ = (long)(ow * s->stride_w + kw) - (long)w.pad_left;
                    bool inside = h >= 0 && h < (long)s->height && x_ >= 0 && x_ < (long)s->width;
                    float want = inside ? x[((b * s->height + (size_t)h) * s->width + (size_t)x_) *
                                                s->channels +
                                            ch]
                                        : 0.0f;
                    if (c[m * cols + k] != want)
                        fail_msg("im2col %s case %zu: (%zu, %zu) = %g, want %g",
                                 mpcl_dtype_name(dts[d]), si, m, k, (double)c[m * cols + k],
                                 (double)want);
                    lhs += (double)want * yd[m * cols + k];
                    mag += fabs((double)want * yd[m * cols + k]);
                }
            }
            for (size_t i = 0; i < n_in; i++) rhs += xd[i] * (double)dx[i];
            /* Each col2im sum: <= KH*KW f32 additions, then one storage
             * rounding (2^-8 for bf16) of each element. */
            double u = dts[d] == MPCL_DTYPE_BF16 ? 0x1p-8 : 0.0;
            double tol = mag * ((double)(s->kernel_h * s->kernel_w) * 0x1p-24 + u) * 1.01 + 1e-12;
            if (fabs(lhs - rhs) > tol)
                fail_msg("col2im %s case %zu: <im2col x, y> %.9g, <x, col2im y> %.9g, tol %.3g",
                         mpcl_dtype_name(dts[d]), si, lhs, rhs, tol);
            free(x);
            free(y);
            free(xd);
            free(yd);
            free(c);
            free(dx);
            mpcl_tensor_destroy(t_x);
            mpcl_tensor_destroy(t_y);
            mpcl_tensor_destroy(g_cols.whole);
            mpcl_tensor_destroy(g_dx.whole);
        }
    }
    mpcl_context_destroy(ctx);
}

/* ---- the convolution on every path ---- */

/* {batch, height, width, channels, kernel_h, kernel_w, filters, stride_h,
 * stride_w, padding} */
static const mpcl_conv2d_shape conv_cases[] = {
    {1, 5, 5, 1, 1, 1, 2, 1, 1, MPCL_PADDING_VALID}, /* 1x1 kernel */
    {3, 4, 3, 3, 4, 3, 5, 1, 1, MPCL_PADDING_VALID}, /* kernel = image: 1x1 output */
    {3, 7, 5, 3, 3, 3, 4, 2, 2, MPCL_PADDING_VALID}, /* stride 2, odd sizes */
    {3, 7, 5, 3, 3, 3, 4, 2, 2, MPCL_PADDING_SAME},  /* the same, padded 1/1 and 1/1 */
    {1, 6, 5, 1, 4, 2, 3, 1, 1, MPCL_PADDING_SAME},  /* even kernels: pads 1/2 and 0/1 */
    {3, 5, 6, 3, 3, 5, 2, 1, 1, MPCL_PADDING_SAME},  /* odd kernels */
    {1, 3, 2, 3, 5, 4, 2, 1, 1, MPCL_PADDING_SAME},  /* kernel beyond the image */
    {3, 7, 7, 1, 1, 1, 3, 3, 3, MPCL_PADDING_VALID}, /* stride > kernel: pixels skipped */
    {3, 7, 5, 3, 2, 2, 17, 2, 2, MPCL_PADDING_SAME}, /* pad after only; 17 filters */
    /* Multiples of 16 filters (and channels), which the direct kernels take
     * (run again below with MPCL_CONV=direct), with the edges above. */
    {3, 7, 5, 16, 3, 3, 16, 2, 2, MPCL_PADDING_SAME},  /* stride 2, odd sizes, padded */
    {2, 6, 5, 3, 3, 3, 32, 1, 1, MPCL_PADDING_VALID},  /* 3 channels: a partial chunk */
    {2, 5, 5, 1, 3, 3, 16, 1, 1, MPCL_PADDING_SAME},   /* 1 channel, as a first layer */
    {3, 4, 3, 16, 4, 3, 16, 1, 1, MPCL_PADDING_VALID}, /* kernel = image: 1x1 output */
    {1, 3, 2, 32, 5, 4, 16, 1, 1, MPCL_PADDING_SAME},  /* kernel beyond the image */
    {2, 7, 7, 16, 1, 1, 16, 3, 3, MPCL_PADDING_VALID}, /* stride > kernel: pixels skipped */
    {1, 6, 5, 16, 4, 2, 32, 2, 1, MPCL_PADDING_SAME},  /* even kernels, mixed strides */
    {2, 5, 5, 16, 2, 2, 16, 2, 2, MPCL_PADDING_SAME},  /* no padding before, some after */
};

/* One storage dtype and GEMM path: a precision policy as a layer runs it. */
typedef struct conv_variant {
    mpcl_dtype dt;
    mpcl_gemm_path path;
} conv_variant;

static size_t conv_variants(mpcl_context *ctx, conv_variant *out) {
    size_t n = 0;
    out[n++] = (conv_variant){MPCL_DTYPE_F32, MPCL_GEMM_MPCL_F32};
    out[n++] = (conv_variant){MPCL_DTYPE_F32, MPCL_GEMM_CLBLAST_SGEMM};
    out[n++] = (conv_variant){MPCL_DTYPE_F16, MPCL_GEMM_MPCL_MIXED};
    out[n++] = (conv_variant){MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_STAGED};
    out[n++] = (conv_variant){MPCL_DTYPE_BF16, MPCL_GEMM_MPCL_MIXED};
    out[n++] = (conv_variant){MPCL_DTYPE_BF16, MPCL_GEMM_CLBLAST_STAGED};
    if (mpcl_plan_hgemm_usable(mpcl_context_device(ctx), mpcl_context_overrides(ctx)->fp16))
        out[n++] = (conv_variant){MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_HGEMM};
    return n;
}

static bool conv_path_is_clblast(const conv_variant *v) {
    return v->path != MPCL_GEMM_MPCL_F32 && v->path != MPCL_GEMM_MPCL_MIXED;
}

/* The unit roundoff of the GEMM's accumulation and of one rounding into the
 * storage dtype (relative, and absolute below the normal range). */
typedef struct precision {
    double acc, rel, abs;
} precision;

static precision precision_of(const conv_variant *v) {
    precision p = {v->path == MPCL_GEMM_CLBLAST_HGEMM ? 0x1p-11 : 0x1p-24, 0, 0};
    if (v->dt == MPCL_DTYPE_F16) p.rel = 0x1p-11, p.abs = 0x1p-25;
    if (v->dt == MPCL_DTYPE_BF16) p.rel = 0x1p-8, p.abs = 0x1p-134;
    return p;
}

/* A GEMM result w = sum of `terms` products with sum |products| = mag: the
 * standard dot-product bound (terms + 2) u mag, then one storage rounding
 * (as tests/test_gemm.c). */
static double gemm_tol(precision p, size_t terms, double mag, double w) {
    double t = (double)(terms + 2) * p.acc * mag;
    return t + p.rel * (fabs(w) + t) + p.abs;
}

/* Checks got against want elementwise with tolerances tol[i], and the
 * normalized error against what they imply (as tests/test_gemm.c). */
static void check_with(const char *what, const float *got, const double *want, const double *tol,
                       size_t n) {
    double tol2 = 0, want2 = 0, max_tol = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= tol[i]) && bad++ < 5)
            fprintf(stderr, "%s: element %zu: got %.9g want %.9g |diff| %.3g tol %.3g\n", what, i,
                    (double)got[i], want[i], d, tol[i]);
        tol2 += tol[i] * tol[i];
        want2 += want[i] * want[i];
        max_tol = fmax(max_tol, tol[i]);
    }
    if (bad) fail_msg("%s: %zu of %zu elements out of tolerance", what, bad, n);
    double norm = sqrt(tol2) / fmax(sqrt(want2), 1e-30) * (1 + 1e-9) + 1e-12;
    if (!tu_check_close(what, got, want, n, max_tol, 0.0, norm)) fail_msg("%s failed", what);
}

/* A case's random x, weights and d_out as stored in dt (floats), exactly
 * (doubles) and on the device; rows x patch is the columns' shape. */
typedef struct conv_inputs {
    size_t rows, patch, img;
    float *x, *w, *dy;
    double *xd, *wd, *dyd;
    mpcl_tensor *t_x, *t_w, *t_dy;
} conv_inputs;

static conv_inputs conv_inputs_make(mpcl_context *ctx, tu_rng *r, mpcl_dtype dt,
                                    const mpcl_conv2d_shape *s) {
    conv_inputs in;
    mpcl_window2d win;
    TU_ASSERT_OK(mpcl_conv2d_window(ctx, s, &win));
    mpcl_conv2d_columns_shape(s, &win, &in.rows, &in.patch);
    in.img = s->height * s->width * s->channels;
    const size_t n_w = in.patch * s->filters, n_out = in.rows * s->filters;
    in.x = random_stored(r, dt, s->batch * in.img, -1, 1, &in.xd);
    in.w = random_stored(r, dt, n_w, -1, 1, &in.wd);
    in.dy = random_stored(r, dt, n_out, -1, 1, &in.dyd);
    in.t_x = upload(ctx, dt, s->batch, in.img, in.x);
    in.t_w = upload(ctx, dt, in.patch, s->filters, in.w);
    in.t_dy = upload(ctx, dt, s->batch, n_out / s->batch, in.dy);
    return in;
}

static void conv_inputs_free(conv_inputs *in) {
    free(in->x);
    free(in->w);
    free(in->dy);
    free(in->xd);
    free(in->wd);
    free(in->dyd);
    mpcl_tensor_destroy(in->t_x);
    mpcl_tensor_destroy(in->t_w);
    mpcl_tensor_destroy(in->t_dy);
}

static void run_conv_case(mpcl_context *ctx, tu_rng *r, const conv_variant *v,
                          const mpcl_conv2d_shape *s) {
    conv_inputs in = conv_inputs_make(ctx, r, v->dt, s);
    const size_t rows = in.rows, patch = in.patch, F = s->filters, img = in.img;
    const size_t n_in = s->batch * img, n_w = patch * F, n_out = rows * F;
    const double *xd = in.xd, *wd = in.wd, *dyd = in.dyd;
    mpcl_tensor *t_x = in.t_x, *t_w = in.t_w, *t_dy = in.t_dy;
    guarded out = guarded_make(ctx, v->dt, s->batch, n_out / s->batch);
    guarded cols = guarded_make(ctx, v->dt, rows, patch);
    guarded d_in = guarded_make(ctx, v->dt, s->batch, img);
    guarded d_w = guarded_make(ctx, v->dt, patch, F);

    TU_ASSERT_OK(mpcl_conv2d_forward(ctx, v->path, s, &out.view, t_x, t_w, &cols.view));
    tu_poison(cols.whole);
    TU_ASSERT_OK(mpcl_conv2d_backward(ctx, v->path, s, &d_in.view, &d_w.view, t_dy, t_x, t_w,
                                      &cols.view, false));
    guarded *all[] = {&out, &cols, &d_in, &d_w};
    for (size_t i = 0; i < 4; i++) guarded_check_tail(all[i], "conv2d");

    /* The references, and the same loops on |x|, |w|, |dy|: the sums of the
     * absolute products that bound each result's rounding. */
    double *want_y = malloc(n_out * sizeof(double)), *mag_y = malloc(n_out * sizeof(double));
    double *want_dx = malloc(n_in * sizeof(double)), *mag_dx = malloc(n_in * sizeof(double));
    double *want_dw = malloc(n_w * sizeof(double)), *mag_dw = malloc(n_w * sizeof(double));
    double *ax = abs_copy(xd, n_in), *aw = abs_copy(wd, n_w), *ady = abs_copy(dyd, n_out);
    ref_conv2d_forward(want_y, xd, wd, s);
    ref_conv2d_forward(mag_y, ax, aw, s);
    ref_conv2d_backward(want_dx, want_dw, dyd, xd, wd, s);
    ref_conv2d_backward(mag_dx, mag_dw, ady, ax, aw, s);

    precision p = precision_of(v);
    size_t most = n_out > n_w ? n_out : n_w;
    most = most > n_in ? most : n_in;
    double *tol = malloc(most * sizeof *tol);
    char what[160];
    const char *tag = mpcl_gemm_path_name(v->path), *dn = mpcl_dtype_name(v->dt);
#define CASE_FMT "%s %s %s %zux%zux%zux%zu k%zux%zu f%zu s%zux%zu %s"
#define CASE_ARGS                                                                              \
    tag, dn, s->batch, s->height, s->width, s->channels, s->kernel_h, s->kernel_w, s->filters, \
        s->stride_h, s->stride_w, mpcl_padding_name(s->padding)

    float *y = download(&out.view);
    for (size_t i = 0; i < n_out; i++) tol[i] = gemm_tol(p, patch, mag_y[i], want_y[i]);
    snprintf(what, sizeof what, CASE_FMT, "forward", CASE_ARGS);
    check_with(what, y, want_y, tol, n_out);

    float *dw = download(&d_w.view);
    for (size_t i = 0; i < n_w; i++) tol[i] = gemm_tol(p, rows, mag_dw[i], want_dw[i]);
    snprintf(what, sizeof what, CASE_FMT, "d_weights", CASE_ARGS);
    check_with(what, dw, want_dw, tol, n_w);

    /* d_in: each d_columns element is a GEMM sum over the filters, rounded
     * into the storage dtype; col2im adds at most kernel_h * kernel_w of
     * them in f32 and rounds once more. mag_dx bounds the sum of their
     * magnitudes. */
    float *dx = download(&d_in.view);
    size_t taps = s->kernel_h * s->kernel_w;
    for (size_t i = 0; i < n_in; i++) {
        double e1 =
            mag_dx[i] * ((double)(F + 2) * p.acc * (1 + p.rel) + p.rel) + (double)taps * p.abs;
        double e2 = (double)taps * 0x1p-24 * (mag_dx[i] + e1);
        tol[i] = e1 + e2 + p.rel * (fabs(want_dx[i]) + e1 + e2) + p.abs;
    }
    snprintf(what, sizeof what, CASE_FMT, "d_in", CASE_ARGS);
    check_with(what, dx, want_dx, tol, n_in);

    /* A training step's order: the forward, then the backward taking the
     * columns the forward left (columns_hold_in), the same bits as the
     * backward that ran im2col again above. */
    TU_ASSERT_OK(mpcl_conv2d_forward(ctx, v->path, s, &out.view, t_x, t_w, &cols.view));
    tu_poison(d_in.whole);
    tu_poison(d_w.whole);
    TU_ASSERT_OK(mpcl_conv2d_backward(ctx, v->path, s, &d_in.view, &d_w.view, t_dy, t_x, t_w,
                                      &cols.view, true));
    float *dx2 = download(&d_in.view), *dw2 = download(&d_w.view);
    snprintf(what, sizeof what, CASE_FMT, "columns taken from the forward", CASE_ARGS);
    if (memcmp(dx2, dx, n_in * sizeof *dx) != 0 || memcmp(dw2, dw, n_w * sizeof *dw) != 0)
        fail_msg("%s: d_in or d_weights differ from the recomputing backward", what);
    free(dx2);
    free(dw2);
#undef CASE_FMT
#undef CASE_ARGS

    free(y);
    free(dw);
    free(dx);
    free(tol);
    double *doubles[] = {want_y, mag_y, want_dx, mag_dx, want_dw, mag_dw, ax, aw, ady};
    for (size_t i = 0; i < sizeof doubles / sizeof doubles[0]; i++) free(doubles[i]);
    conv_inputs_free(&in);
    for (size_t i = 0; i < 4; i++) mpcl_tensor_destroy(all[i]->whole);
}

static void test_conv(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(seed_counter++);
    conv_variant vs[8];
    size_t nv = conv_variants(ctx, vs);
    const size_t nc = sizeof conv_cases / sizeof conv_cases[0];
    /* On slow devices (Oclgrind: ~1e6 ops/s, run for its memory checks) the
     * CLBlast paths take every third case, in turn: their GEMMs are
     * test_gemm's, and im2col and col2im are ours on every path. */
    const bool slow = tu_slow_device(ctx);
    for (size_t vi = 0; vi < nv; vi++)
        for (size_t ci = 0; ci < nc; ci++)
            if (!slow || !conv_path_is_clblast(&vs[vi]) || ci % 3 == vi % 3)
                run_conv_case(ctx, &r, &vs[vi], &conv_cases[ci]);
    /* MPCL_CONV=direct: the direct kernels on every path and dtype, for the
     * cases they take (a multiple of 16 filters or channels). */
    setenv("MPCL_CONV", "direct", 1);
    for (size_t vi = 0; vi < nv; vi++)
        for (size_t ci = 0; ci < nc; ci++)
            if (conv_cases[ci].filters % 16 == 0 || conv_cases[ci].channels % 16 == 0)
                if (!slow || !conv_path_is_clblast(&vs[vi]) || ci % 3 == vi % 3)
                    run_conv_case(ctx, &r, &vs[vi], &conv_cases[ci]);
    unsetenv("MPCL_CONV");
    mpcl_context_destroy(ctx);
}

/* Without d_in (a first layer): d_weights alone, the same bits; and the
 * backward twice gives the same bits (no atomics anywhere). */
static void test_conv_no_d_in(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(seed_counter++);
    const mpcl_conv2d_shape s = {3, 7, 5, 3, 3, 3, 4, 2, 2, MPCL_PADDING_SAME};
    const mpcl_dtype dt = MPCL_DTYPE_F16;
    const mpcl_gemm_path path = mpcl_gemm_default_path(ctx, dt);
    conv_inputs in = conv_inputs_make(ctx, &r, dt, &s);
    const size_t rows = in.rows, patch = in.patch, img = in.img;
    mpcl_tensor *t_x = in.t_x, *t_w = in.t_w, *t_dy = in.t_dy;
    mpcl_tensor *cols = tu_tensor(ctx, dt, rows, patch);
    mpcl_tensor *dw1 = tu_tensor(ctx, dt, patch, s.filters),
                *dw2 = tu_tensor(ctx, dt, patch, s.filters);
    mpcl_tensor *dx1 = tu_tensor(ctx, dt, s.batch, img), *dx2 = tu_tensor(ctx, dt, s.batch, img);
    TU_ASSERT_OK(mpcl_conv2d_backward(ctx, path, &s, dx1, dw1, t_dy, t_x, t_w, cols, false));
    TU_ASSERT_OK(mpcl_conv2d_backward(ctx, path, &s, dx2, dw2, t_dy, t_x, t_w, cols, false));
    float *a = download(dx1), *b = download(dx2);
    assert_memory_equal(a, b, s.batch * img * sizeof *a);
    free(a);
    free(b);
    tu_poison(dw2);
    TU_ASSERT_OK(mpcl_conv2d_backward(ctx, path, &s, NULL, dw2, t_dy, t_x, t_w, cols, false));
    a = download(dw1);
    b = download(dw2);
    assert_memory_equal(a, b, patch * s.filters * sizeof *a);
    free(a);
    free(b);
    conv_inputs_free(&in);
    mpcl_tensor *all[] = {cols, dw1, dw2, dx1, dx2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    mpcl_context_destroy(ctx);
}

/* The forward pass and the input gradient in chunks of images (conv.c:
 * each chunk's columns are still cached when the GEMM or col2im reads them)
 * give the bits of the whole batch at once, on every path and dtype,
 * writing every element; the chunks are real (more launches). An image,
 * its map and its columns are multiples of 4096 bytes even in 16 bits, so
 * that one image's chunk starts on every device's sub-buffer alignment
 * (NVIDIA's is 4096 bytes, Rusticl's 512 refused the first sizes tried). */
static void test_conv_in_chunks(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(seed_counter++);
    static const mpcl_conv2d_shape cases[] = {
        {3, 16, 16, 8, 3, 3, 8, 1, 1, MPCL_PADDING_SAME}, /* padded at every edge */
        {3, 32, 16, 4, 3, 2, 8, 2, 1, MPCL_PADDING_SAME}, /* stride 2x1 */
    };
    conv_variant vs[8];
    size_t nv = conv_variants(ctx, vs);
    const size_t cache_bytes = ctx->cache_bytes;
    /* On slow devices (Oclgrind) mpcl's own paths only: the chunking is
     * ours, the CLBlast GEMMs are test_gemm's. */
    const bool slow = tu_slow_device(ctx);
    for (size_t vi = 0; vi < nv; vi++) {
        if (slow && conv_path_is_clblast(&vs[vi])) continue;
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            const mpcl_conv2d_shape *s = &cases[ci];
            const mpcl_dtype dt = vs[vi].dt;
            conv_inputs in = conv_inputs_make(ctx, &r, dt, s);
            const size_t rows = in.rows, patch = in.patch, img = in.img;
            mpcl_tensor *t_x = in.t_x, *t_w = in.t_w, *t_dy = in.t_dy;
            mpcl_tensor *cols = tu_tensor(ctx, dt, rows, patch);
            /* [0]: whole, [1]: in chunks */
            mpcl_tensor *y[2], *fcols[2], *dx[2], *dw[2];
            uint64_t forward[2], backward[2];
            for (int chunked = 0; chunked < 2; chunked++) {
                y[chunked] = tu_tensor_poisoned(ctx, dt, s->batch, rows / s->batch * s->filters);
                fcols[chunked] = tu_tensor_poisoned(ctx, dt, rows, patch);
                dx[chunked] = tu_tensor_poisoned(ctx, dt, s->batch, img);
                dw[chunked] = tu_tensor_poisoned(ctx, dt, patch, s->filters);
                ctx->cache_bytes = chunked; /* 1: chunks of one image or so; 0: whole */
                uint64_t before = mpcl_context_launch_count(ctx);
                TU_ASSERT_OK(
                    mpcl_conv2d_forward(ctx, vs[vi].path, s, y[chunked], t_x, t_w, fcols[chunked]));
                forward[chunked] = mpcl_context_launch_count(ctx) - before;
                before = mpcl_context_launch_count(ctx);
                TU_ASSERT_OK(mpcl_conv2d_backward(ctx, vs[vi].path, s, dx[chunked], dw[chunked],
                                                  t_dy, t_x, t_w, cols, false));
                backward[chunked] = mpcl_context_launch_count(ctx) - before;
            }
            ctx->cache_bytes = cache_bytes;
            fprintf(stderr, "%s %s case %zu: launches whole %llu + %llu, in chunks %llu + %llu\n",
                    mpcl_gemm_path_name(vs[vi].path), mpcl_dtype_name(dt), ci,
                    (unsigned long long)forward[0], (unsigned long long)backward[0],
                    (unsigned long long)forward[1], (unsigned long long)backward[1]);
            assert_true(forward[1] > forward[0]);
            assert_true(backward[1] > backward[0]);
            const struct {
                mpcl_tensor **t;
                size_t n;
            } outputs[] = {{y, rows * s->filters},
                           {fcols, rows * patch},
                           {dx, s->batch * img},
                           {dw, patch * s->filters}};
            for (size_t o = 0; o < sizeof outputs / sizeof outputs[0]; o++) {
                float *a = download(outputs[o].t[0]), *b = download(outputs[o].t[1]);
                assert_memory_equal(a, b, outputs[o].n * sizeof *a);
                free(a);
                free(b);
            }
            conv_inputs_free(&in);
            mpcl_tensor *all[] = {cols, y[0], y[1], fcols[0], fcols[1], dx[0], dx[1], dw[0], dw[1]};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
        }
    }
    mpcl_context_destroy(ctx);
}

/* ---- max pooling ---- */

/* {batch, height, width, channels, pool_h, pool_w, stride_h, stride_w, padding} */
static const mpcl_pool2d_shape pool_cases[] = {
    {3, 7, 5, 3, 2, 2, 2, 2, MPCL_PADDING_VALID},  /* odd sizes: the last row and column left */
    {3, 7, 5, 3, 3, 3, 2, 2, MPCL_PADDING_SAME},   /* overlapping windows, padded edges */
    {1, 6, 5, 1, 2, 2, 1, 1, MPCL_PADDING_SAME},   /* padding after only */
    {2, 4, 3, 2, 4, 3, 4, 3, MPCL_PADDING_VALID},  /* the window is the image */
    {1, 5, 5, 1, 1, 1, 2, 2, MPCL_PADDING_SAME},   /* 1x1 windows, stride 2 */
    {3, 7, 5, 1, 3, 2, 1, 2, MPCL_PADDING_VALID},  /* mixed strides */
    {2, 7, 8, 3, 3, 3, 3, 3, MPCL_PADDING_SAME},   /* no overlap, padded before and after */
    {2, 9, 7, 10, 2, 2, 3, 3, MPCL_PADDING_VALID}, /* gaps between windows, a row and column left */
    /* The kernels take eight channels at a time: */
    {2, 6, 7, 19, 2, 2, 2, 2, MPCL_PADDING_VALID}, /* two chunks of 8 and a tail of 3 */
    {2, 6, 5, 16, 3, 3, 2, 2, MPCL_PADDING_SAME},  /* chunks only, overlapping windows */
};

/* Ties: values from {-2, ..., 2} (exact in every dtype), so most windows
 * hold equal maxima and the first must win; otherwise uniform values. */
static void run_pool_case(mpcl_context *ctx, tu_rng *r, mpcl_dtype dt, const mpcl_pool2d_shape *s,
                          bool ties) {
    mpcl_window2d win;
    TU_ASSERT_OK(mpcl_pool2d_window(ctx, s, &win));
    const size_t C = s->channels, img = s->height * s->width * C, n_in = s->batch * img;
    const size_t map = win.out_h * win.out_w * C, n_out = s->batch * map;
    double *xd, *dyd;
    float *x = random_stored(r, dt, n_in, -1, 1, &xd);
    if (ties)
        for (size_t i = 0; i < n_in; i++) xd[i] = x[i] = (float)floor(tu_uniform(r, -2, 3));
    float *dy = random_stored(r, dt, n_out, -1, 1, &dyd);
    mpcl_tensor *t_x = upload(ctx, dt, s->batch, img, x);
    mpcl_tensor *t_dy = upload(ctx, dt, s->batch, map, dy);
    guarded out = guarded_make(ctx, dt, s->batch, map);
    guarded d_in = guarded_make(ctx, dt, s->batch, img);
    mpcl_tensor *arg = tu_tensor(ctx, MPCL_DTYPE_I32, s->batch + TAIL_ROWS, map);
    int32_t *arg_h = malloc((n_out + TAIL_ROWS * map) * sizeof *arg_h);
    for (size_t i = 0; i < n_out + TAIL_ROWS * map; i++) arg_h[i] = -7;
    TU_ASSERT_OK(mpcl_tensor_upload_i32(arg, arg_h, n_out + TAIL_ROWS * map));
    mpcl_tensor arg_view = mpcl__tensor_rows(arg, s->batch);

    TU_ASSERT_OK(mpcl_maxpool2d_forward(ctx, s, &out.view, &arg_view, t_x));
    TU_ASSERT_OK(mpcl_maxpool2d_backward(ctx, s, &d_in.view, t_dy, &arg_view));
    guarded_check_tail(&out, "maxpool forward");
    guarded_check_tail(&d_in, "maxpool backward");

    double *want = malloc(n_out * sizeof *want), *want_dx = malloc(n_in * sizeof *want_dx);
    int32_t *want_arg = malloc(n_out * sizeof *want_arg);
    ref_maxpool2d_forward(want, want_arg, xd, s);
    ref_maxpool2d_backward(want_dx, dyd, xd, s);
    char what[160];
    snprintf(what, sizeof what, "maxpool %s %s %zux%zux%zux%zu p%zux%zu s%zux%zu %s",
             mpcl_dtype_name(dt), ties ? "ties" : "uniform", s->batch, s->height, s->width, C,
             s->pool_h, s->pool_w, s->stride_h, s->stride_w, mpcl_padding_name(s->padding));
    /* The forward picks a stored value: exact. */
    float *y = download(&out.view);
    TU_ASSERT_OK(mpcl_tensor_download_i32(arg, arg_h, n_out + TAIL_ROWS * map));
    for (size_t i = 0; i < n_out; i++)
        if ((double)y[i] != want[i] || arg_h[i] != want_arg[i])
            fail_msg("%s: output %zu = %g at %d, want %g at %d", what, i, (double)y[i], arg_h[i],
                     want[i], want_arg[i]);
    for (size_t i = n_out; i < n_out + TAIL_ROWS * map; i++)
        if (arg_h[i] != -7) fail_msg("%s: argmax %zu past the end was written", what, i);
    /* The backward: f32 sums of at most ceil(pool / stride) per axis terms,
     * then one storage rounding. */
    float *dx = download(&d_in.view);
    double *mag = malloc(n_in * sizeof *mag), *ady = abs_copy(dyd, n_out),
           *tol = malloc(n_in * sizeof *tol);
    ref_maxpool2d_backward(mag, ady, xd, s);
    precision p = precision_of(&(conv_variant){dt, MPCL_GEMM_MPCL_F32});
    size_t terms = ((s->pool_h + s->stride_h - 1) / s->stride_h) *
                   ((s->pool_w + s->stride_w - 1) / s->stride_w);
    for (size_t i = 0; i < n_in; i++) {
        double e = (double)terms * 0x1p-24 * mag[i];
        tol[i] = e + p.rel * (fabs(want_dx[i]) + e) + p.abs;
    }
    check_with(what, dx, want_dx, tol, n_in);

    free(y);
    free(dx);
    free(mag);
    free(ady);
    free(tol);
    free(want);
    free(want_dx);
    free(want_arg);
    free(arg_h);
    free(x);
    free(xd);
    free(dy);
    free(dyd);
    mpcl_tensor_destroy(t_x);
    mpcl_tensor_destroy(t_dy);
    mpcl_tensor_destroy(out.whole);
    mpcl_tensor_destroy(d_in.whole);
    mpcl_tensor_destroy(arg);
}

static void test_maxpool(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(seed_counter++);
    const mpcl_dtype dts[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};
    for (size_t d = 0; d < 3; d++)
        for (size_t ci = 0; ci < sizeof pool_cases / sizeof pool_cases[0]; ci++)
            for (int ties = 0; ties < 2; ties++)
                run_pool_case(ctx, &r, dts[d], &pool_cases[ci], ties);
    mpcl_context_destroy(ctx);
}

/* NaN wins a window wherever it is (the loss scaler must see it), and the
 * forward without argmax gives the same output. One image of 2x4, one
 * channel, 2x2 windows: [1 NaN | NaN 5] over [3 2 | 7 -inf]. */
static void test_maxpool_nan(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const mpcl_pool2d_shape s = {1, 2, 4, 1, 2, 2, 2, 2, MPCL_PADDING_VALID};
    const float x[8] = {1, NAN, NAN, 5, 3, 2, 7, -INFINITY};
    mpcl_tensor *t_x = upload(ctx, MPCL_DTYPE_F32, 1, 8, x);
    mpcl_tensor *out = tu_tensor(ctx, MPCL_DTYPE_F32, 1, 2),
                *out2 = tu_tensor(ctx, MPCL_DTYPE_F32, 1, 2);
    mpcl_tensor *arg = tu_tensor(ctx, MPCL_DTYPE_I32, 1, 2);
    TU_ASSERT_OK(mpcl_maxpool2d_forward(ctx, &s, out, arg, t_x));
    TU_ASSERT_OK(mpcl_maxpool2d_forward(ctx, &s, out2, NULL, t_x));
    float y[2], y2[2];
    int32_t a[2];
    TU_ASSERT_OK(mpcl_tensor_download_f32(out, y, 2));
    TU_ASSERT_OK(mpcl_tensor_download_f32(out2, y2, 2));
    TU_ASSERT_OK(mpcl_tensor_download_i32(arg, a, 2));
    assert_true(isnan(y[0]) && isnan(y[1]) && isnan(y2[0]) && isnan(y2[1]));
    assert_int_equal(a[0], 1);
    assert_int_equal(a[1], 2);
    double xd[8], want[2];
    int32_t want_arg[2];
    for (size_t i = 0; i < 8; i++) xd[i] = x[i];
    ref_maxpool2d_forward(want, want_arg, xd, &s);
    assert_true(isnan(want[0]) && isnan(want[1]) && want_arg[0] == 1 && want_arg[1] == 2);
    mpcl_tensor_destroy(t_x);
    mpcl_tensor_destroy(out);
    mpcl_tensor_destroy(out2);
    mpcl_tensor_destroy(arg);
    mpcl_context_destroy(ctx);
}

/* ---- finite differences in f32 ---- */

/* L(x, w) = sum of r * conv(x, w), r fixed: the backward with d_out = r must
 * be L's gradient. The convolution is linear in x and in w, so a central
 * difference has no truncation error; what remains is f32 rounding: each
 * output is off by <= (K + 2) 2^-24 sum |x w| ~ 2e-6 here, so L by 3e-4 at
 * most over ~60 outputs, and its difference over 2h = 1 as much. A wrong
 * gradient (a swapped tap, a missing window) is off by a whole product, ~0.1
 * or more. */
static double conv_loss(mpcl_context *ctx, const mpcl_conv2d_shape *s, mpcl_tensor *out,
                        mpcl_tensor *t_x, mpcl_tensor *t_w, mpcl_tensor *cols, const float *x,
                        const float *w, const float *r) {
    mpcl_gemm_path path = mpcl_gemm_default_path(ctx, MPCL_DTYPE_F32);
    TU_ASSERT_OK(mpcl_tensor_upload_f32(t_x, x, mpcl_tensor_count(t_x)));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(t_w, w, mpcl_tensor_count(t_w)));
    TU_ASSERT_OK(mpcl_conv2d_forward(ctx, path, s, out, t_x, t_w, cols));
    float *y = download(out);
    double l = 0;
    for (size_t i = 0; i < mpcl_tensor_count(out); i++) l += (double)r[i] * (double)y[i];
    free(y);
    return l;
}

static void check_fd(const char *what, size_t i, double analytic, double fd, double tol) {
    if (!(fabs(analytic - fd) <= tol))
        fail_msg("%s[%zu]: backward %.7g, finite difference %.7g", what, i, analytic, fd);
}

static void test_conv_finite_differences(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(seed_counter++);
    const mpcl_conv2d_shape s = {2, 5, 4, 2, 3, 2, 3, 2, 1, MPCL_PADDING_SAME};
    const mpcl_dtype dt = MPCL_DTYPE_F32;
    mpcl_window2d win;
    TU_ASSERT_OK(mpcl_conv2d_window(ctx, &s, &win));
    size_t rows, patch, img = s.height * s.width * s.channels;
    mpcl_conv2d_columns_shape(&s, &win, &rows, &patch);
    size_t n_in = s.batch * img, n_w = patch * s.filters, n_out = rows * s.filters;
    float *x = malloc(n_in * sizeof *x), *w = malloc(n_w * sizeof *w),
          *r = malloc(n_out * sizeof *r);
    tu_fill_uniform(&rng, x, n_in, -1, 1);
    tu_fill_uniform(&rng, w, n_w, -1, 1);
    tu_fill_uniform(&rng, r, n_out, -1, 1);
    mpcl_tensor *t_x = tu_tensor(ctx, dt, s.batch, img),
                *t_w = tu_tensor(ctx, dt, patch, s.filters);
    mpcl_tensor *out = tu_tensor(ctx, dt, s.batch, n_out / s.batch),
                *cols = tu_tensor(ctx, dt, rows, patch);
    mpcl_tensor *t_r = upload(ctx, dt, s.batch, n_out / s.batch, r);
    mpcl_tensor *d_x = tu_tensor(ctx, dt, s.batch, img),
                *d_w = tu_tensor(ctx, dt, patch, s.filters);
    conv_loss(ctx, &s, out, t_x, t_w, cols, x, w, r); /* uploads x and w */
    tu_poison(d_x); /* a gradient never written fails, however flat L is */
    tu_poison(d_w);
    /* conv_loss ran the forward at (x, w) last: its columns are taken. */
    TU_ASSERT_OK(mpcl_conv2d_backward(ctx, mpcl_gemm_default_path(ctx, dt), &s, d_x, d_w, t_r, t_x,
                                      t_w, cols, true));
    float *gx = download(d_x), *gw = download(d_w);
    const float h = 0.5f; /* x +- h rounds by 2^-24 at most: negligible */
    const double tol = 1e-3;
    for (size_t i = 0; i < n_in; i++) {
        float keep = x[i];
        x[i] = keep + h;
        double lp = conv_loss(ctx, &s, out, t_x, t_w, cols, x, w, r);
        x[i] = keep - h;
        double lm = conv_loss(ctx, &s, out, t_x, t_w, cols, x, w, r);
        x[i] = keep;
        check_fd("conv d_in", i, gx[i], (lp - lm) / (2.0 * (double)h), tol);
    }
    for (size_t i = 0; i < n_w; i++) {
        float keep = w[i];
        w[i] = keep + h;
        double lp = conv_loss(ctx, &s, out, t_x, t_w, cols, x, w, r);
        w[i] = keep - h;
        double lm = conv_loss(ctx, &s, out, t_x, t_w, cols, x, w, r);
        w[i] = keep;
        check_fd("conv d_weights", i, gw[i], (lp - lm) / (2.0 * (double)h), tol);
    }
    free(gx);
    free(gw);
    free(x);
    free(w);
    free(r);
    mpcl_tensor *all[] = {t_x, t_w, out, cols, t_r, d_x, d_w};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    mpcl_context_destroy(ctx);
}

/* Max pooling is piecewise linear: with the inputs a shuffled ramp 0.1
 * apart, a step of h = 0.02 moves no maximum, so the central difference is
 * the gradient up to the f32 rounding of the outputs (~1e-6 / 0.04). */
static void test_maxpool_finite_differences(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(seed_counter++);
    const mpcl_pool2d_shape s = {2, 5, 4, 2, 3, 2, 2, 1, MPCL_PADDING_SAME};
    const mpcl_dtype dt = MPCL_DTYPE_F32;
    mpcl_window2d win;
    TU_ASSERT_OK(mpcl_pool2d_window(ctx, &s, &win));
    size_t img = s.height * s.width * s.channels, n_in = s.batch * img;
    size_t map = win.out_h * win.out_w * s.channels, n_out = s.batch * map;
    float *x = malloc(n_in * sizeof *x), *r = malloc(n_out * sizeof *r);
    for (size_t i = 0; i < n_in; i++) x[i] = 0.1f * (float)i;
    for (size_t i = n_in - 1; i > 0; i--) { /* Fisher-Yates */
        size_t j = (size_t)tu_uniform(&rng, 0, (double)i + 1 - 1e-9);
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
    tu_fill_uniform(&rng, r, n_out, -1, 1);
    mpcl_tensor *t_x = tu_tensor(ctx, dt, s.batch, img), *out = tu_tensor(ctx, dt, s.batch, map);
    mpcl_tensor *arg = tu_tensor(ctx, MPCL_DTYPE_I32, s.batch, map);
    mpcl_tensor *t_r = upload(ctx, dt, s.batch, map, r), *d_x = tu_tensor(ctx, dt, s.batch, img);
    TU_ASSERT_OK(mpcl_tensor_upload_f32(t_x, x, n_in));
    tu_poison(d_x); /* a gradient never written fails, however flat L is */
    TU_ASSERT_OK(mpcl_maxpool2d_forward(ctx, &s, out, arg, t_x));
    TU_ASSERT_OK(mpcl_maxpool2d_backward(ctx, &s, d_x, t_r, arg));
    float *g = download(d_x);
    const float h = 0.02f;
    for (size_t i = 0; i < n_in; i++) {
        double l[2];
        for (int side = 0; side < 2; side++) {
            float keep = x[i];
            x[i] = keep + (side ? -h : h);
            TU_ASSERT_OK(mpcl_tensor_upload_f32(t_x, x, n_in));
            TU_ASSERT_OK(mpcl_maxpool2d_forward(ctx, &s, out, NULL, t_x));
            float *y = download(out);
            l[side] = 0;
            for (size_t o = 0; o < n_out; o++) l[side] += (double)r[o] * (double)y[o];
            free(y);
            x[i] = keep;
        }
        check_fd("maxpool d_in", i, g[i], (l[0] - l[1]) / (2.0 * (double)h), 1e-4);
    }
    free(g);
    free(x);
    free(r);
    mpcl_tensor *all[] = {t_x, out, arg, t_r, d_x};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_window_errors),
        cmocka_unit_test(test_tensor_errors),
        cmocka_unit_test(test_im2col_col2im),
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_conv_no_d_in),
        cmocka_unit_test(test_conv_in_chunks),
        cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_maxpool_nan),
        cmocka_unit_test(test_conv_finite_differences),
        cmocka_unit_test(test_maxpool_finite_differences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
