/* Convolution and max pooling (include/mpcl/conv.h): the window arithmetic,
 * the launchers of cl/conv.cl, and the convolution as im2col + mpcl_gemm or
 * as the direct kernels.
 *
 * im2col + GEMM runs on every GEMM path of the precision plan (mpcl's kernel
 * on CPUs, CLBlast on GPUs, f16/bf16 staged or mixed) with no kernel of its
 * own, at the cost of the columns workspace (kernel_h * kernel_w times the
 * input) and one copy each way. MPCL_CONV=direct runs the forward pass and
 * the input's gradient as direct kernels instead (see direct_path). */
#include <stdint.h>
#include <string.h>

#include "compute/compute.h"
#include "mpcl/conv.h"

/* The work-group of the one-item-per-element launches (the kernels check
 * their range), as ops.c's elementwise ones. */
#define CONV_WG 64

static const char *const padding_names[MPCL_PADDING_COUNT] = {
    [MPCL_PADDING_VALID] = "valid",
    [MPCL_PADDING_SAME] = "same",
};

const char *mpcl_padding_name(mpcl_padding padding) {
    if ((int)padding < 0 || padding >= MPCL_PADDING_COUNT) return "unknown";
    return padding_names[padding];
}

bool mpcl_padding_parse(const char *name, mpcl_padding *out) {
    if (!name) return false;
    for (int i = 0; i < MPCL_PADDING_COUNT; i++) {
        if (strcmp(name, padding_names[i]) == 0) {
            *out = (mpcl_padding)i;
            return true;
        }
    }
    return false;
}

/* ---- windows ---- */

/* The shape of one op, whatever its kind: an image of B x H x W x C, a
 * window of kh x kw moved by (sh, sw); `out_channels` of the output (the
 * filters of a convolution, C for pooling), and whether the weights and
 * columns of a convolution exist. Field names for the messages. */
typedef struct window_spec {
    const char *op;
    size_t batch, height, width, channels;
    size_t kh, kw, sh, sw, out_channels;
    mpcl_padding padding;
    bool conv;
    const char *kh_name, *kw_name;
} window_spec;

/* One axis of a window: the image length, the window and the stride, with
 * their names for the messages. */
typedef struct axis_spec {
    const char *in_name, *k_name, *s_name;
    size_t in, k, s;
} axis_spec;

/* One axis: the output size and the padding before and after, Keras' rules
 * (include/mpcl/conv.h). The sizes are nonzero and `in` below 2^32; the
 * kernels take the window, the stride and the padded positions as uint. */
static mpcl_status axis_window(mpcl_context *ctx, const char *op, mpcl_padding padding,
                               const axis_spec *a, size_t *out, size_t *before, size_t *after) {
    if (a->k > UINT32_MAX || a->s > UINT32_MAX)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "%s: %s %zu or %s %zu exceeds 2^32-1", op, a->k_name,
                          a->k, a->s_name, a->s);
    if (padding == MPCL_PADDING_VALID) {
        if (a->k > a->in)
            return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                              "%s: %s %zu is larger than the %s %zu with padding 'valid'", op,
                              a->k_name, a->k, a->in_name, a->in);
        *out = (a->in - a->k) / a->s + 1;
        *before = *after = 0;
        return MPCL_OK;
    }
    *out = a->in / a->s + (a->in % a->s != 0);
    size_t span = (*out - 1) * a->s + a->k; /* the padded length the windows cover */
    if (span > UINT32_MAX)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "%s: the %s padded for %s %zu (%zu) exceeds 2^32-1",
                          op, a->in_name, a->k_name, a->k, span);
    size_t total = span > a->in ? span - a->in : 0;
    *before = total / 2;
    *after = total - *before;
    return MPCL_OK;
}

/* a * b * c * d, or false when it exceeds 2^32 - 1 (the kernels' uint
 * indices); zero factors were refused before. */
static bool count_fits(size_t a, size_t b, size_t c, size_t d, size_t *out) {
    const size_t factors[] = {b, c, d};
    size_t p = a;
    for (size_t i = 0; i < 3; i++) {
        if (p > UINT32_MAX / factors[i]) return false;
        p *= factors[i];
    }
    *out = p;
    return p <= UINT32_MAX;
}

static mpcl_status check_count_fits(mpcl_context *ctx, const char *op, const char *what,
                                    const char *formula, size_t a, size_t b, size_t c, size_t d) {
    size_t n;
    if (!count_fits(a, b, c, d, &n))
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "%s: the %s (%s = %zu x %zu x %zu x %zu) has more than 2^32-1 elements",
                          op, what, formula, a, b, c, d);
    return MPCL_OK;
}

static mpcl_status window_of(mpcl_context *ctx, const window_spec *w, mpcl_window2d *out) {
    if ((int)w->padding < 0 || w->padding >= MPCL_PADDING_COUNT)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: unknown padding %d", w->op,
                          (int)w->padding);
    /* The filters last: pooling has none of its own. */
    const struct {
        const char *name;
        size_t value;
    } sizes[] = {{"batch", w->batch},       {"height", w->height}, {"width", w->width},
                 {"channels", w->channels}, {w->kh_name, w->kh},   {w->kw_name, w->kw},
                 {"stride_h", w->sh},       {"stride_w", w->sw},   {"filters", w->out_channels}};
    size_t n_sizes = sizeof sizes / sizeof sizes[0] - (w->conv ? 0 : 1);
    for (size_t i = 0; i < n_sizes; i++)
        if (sizes[i].value == 0)
            return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "%s: %s is 0", w->op, sizes[i].name);
    TRY(check_count_fits(ctx, w->op, "input", "batch x height x width x channels", w->batch,
                         w->height, w->width, w->channels));
    mpcl_window2d r;
    const axis_spec rows = {"height", w->kh_name, "stride_h", w->height, w->kh, w->sh};
    const axis_spec cols = {"width", w->kw_name, "stride_w", w->width, w->kw, w->sw};
    TRY(axis_window(ctx, w->op, w->padding, &rows, &r.out_h, &r.pad_top, &r.pad_bottom));
    TRY(axis_window(ctx, w->op, w->padding, &cols, &r.out_w, &r.pad_left, &r.pad_right));
    TRY(check_count_fits(
        ctx, w->op, "output",
        w->conv ? "batch x out_h x out_w x filters" : "batch x out_h x out_w x channels", w->batch,
        r.out_h, r.out_w, w->out_channels));
    /* Pooling's argmax is an i32 position h * W + w. */
    if (!w->conv && w->height * w->width > INT32_MAX)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "%s: height x width = %zu x %zu exceeds 2^31-1, the reach of argmax",
                          w->op, w->height, w->width);
    if (w->conv) {
        TRY(check_count_fits(ctx, w->op, "weights", "kernel_h x kernel_w x channels x filters",
                             w->kh, w->kw, w->channels, w->out_channels));
        size_t pixels;
        if (!count_fits(w->batch, r.out_h, r.out_w, 1, &pixels))
            return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                              "%s: batch x out_h x out_w = %zu x %zu x %zu exceeds 2^32-1", w->op,
                              w->batch, r.out_h, r.out_w);
        TRY(check_count_fits(ctx, w->op, "columns",
                             "batch*out_h*out_w x kernel_h x kernel_w x channels", pixels, w->kh,
                             w->kw, w->channels));
    }
    *out = r;
    return MPCL_OK;
}

static window_spec conv_spec(const char *op, const mpcl_conv2d_shape *s) {
    return (window_spec){.op = op,
                         .batch = s->batch,
                         .height = s->height,
                         .width = s->width,
                         .channels = s->channels,
                         .kh = s->kernel_h,
                         .kw = s->kernel_w,
                         .sh = s->stride_h,
                         .sw = s->stride_w,
                         .out_channels = s->filters,
                         .padding = s->padding,
                         .conv = true,
                         .kh_name = "kernel_h",
                         .kw_name = "kernel_w"};
}

static window_spec pool_spec(const char *op, const mpcl_pool2d_shape *s) {
    return (window_spec){.op = op,
                         .batch = s->batch,
                         .height = s->height,
                         .width = s->width,
                         .channels = s->channels,
                         .kh = s->pool_h,
                         .kw = s->pool_w,
                         .sh = s->stride_h,
                         .sw = s->stride_w,
                         .out_channels = s->channels,
                         .padding = s->padding,
                         .conv = false,
                         .kh_name = "pool_h",
                         .kw_name = "pool_w"};
}

static mpcl_status conv_window(mpcl_context *ctx, const char *op, const mpcl_conv2d_shape *s,
                               mpcl_window2d *out) {
    if (!s || !out) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: shape is NULL", op);
    window_spec w = conv_spec(op, s);
    return window_of(ctx, &w, out);
}

static mpcl_status pool_window(mpcl_context *ctx, const char *op, const mpcl_pool2d_shape *s,
                               mpcl_window2d *out) {
    if (!s || !out) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: shape is NULL", op);
    window_spec w = pool_spec(op, s);
    return window_of(ctx, &w, out);
}

mpcl_status mpcl_conv2d_window(mpcl_context *ctx, const mpcl_conv2d_shape *s, mpcl_window2d *out) {
    return conv_window(ctx, "mpcl_conv2d_window", s, out);
}

mpcl_status mpcl_pool2d_window(mpcl_context *ctx, const mpcl_pool2d_shape *s, mpcl_window2d *out) {
    return pool_window(ctx, "mpcl_pool2d_window", s, out);
}

void mpcl_conv2d_columns_shape(const mpcl_conv2d_shape *s, const mpcl_window2d *w, size_t *rows,
                               size_t *cols) {
    *rows = s->batch * w->out_h * w->out_w;
    *cols = s->kernel_h * s->kernel_w * s->channels;
}

/* ---- launches ---- */

/* The kernels' WINDOW_PARAMS (cl/conv.cl), from argument `first` on. */
#define WINDOW_ARGS 11
static mpcl_status set_window_args(mpcl_context *ctx, cl_kernel k, const char *name, cl_uint first,
                                   const window_spec *w, const mpcl_window2d *win) {
    const cl_uint values[WINDOW_ARGS] = {
        (cl_uint)w->height, (cl_uint)w->width,     (cl_uint)w->channels,  (cl_uint)w->kh,
        (cl_uint)w->kw,     (cl_uint)win->out_h,   (cl_uint)win->out_w,   (cl_uint)w->sh,
        (cl_uint)w->sw,     (cl_uint)win->pad_top, (cl_uint)win->pad_left};
    for (cl_uint i = 0; i < WINDOW_ARGS; i++)
        TRY(mpcl__set_arg(ctx, k, name, first + i, sizeof values[i], &values[i]));
    return MPCL_OK;
}

/* Sets the two buffers, the window and the item count of a kernel of
 * cl/conv.cl shaped (dst, src, WINDOW_PARAMS, items) and launches one item
 * each. */
static mpcl_status launch_pair(mpcl_context *ctx, mpcl_dtype storage, const char *name,
                               const mpcl_tensor *dst, const mpcl_tensor *src, const window_spec *w,
                               const mpcl_window2d *win, size_t items) {
    cl_kernel k;
    TRY(mpcl__kernel(ctx, storage, name, &k));
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(dst->mem), MPCL_ARG(src->mem), MPCL_ARGS_END));
    TRY(set_window_args(ctx, k, name, 2, w, win));
    cl_uint n = (cl_uint)items;
    TRY(mpcl__set_arg(ctx, k, name, 2 + WINDOW_ARGS, sizeof n, &n));
    return mpcl__launch_1d(ctx, k, name, items, mpcl__local_size(ctx, k, CONV_WG));
}

/* ---- checks ---- */

/* A float tensor of ctx, rows x cols, of `dtype` (or any float dtype, which
 * then sets *dtype, when *dtype is MPCL_DTYPE_COUNT). */
static mpcl_status check_float(mpcl_context *ctx, const char *op, const mpcl_tensor *t,
                               const char *what, mpcl_dtype *dtype, size_t rows, size_t cols) {
    TRY(mpcl__check_present(ctx, t, op, what));
    TRY(mpcl__check_storage(ctx, t, op, what));
    if (*dtype == MPCL_DTYPE_COUNT) *dtype = t->dtype;
    TRY(mpcl__check_dtype(ctx, t, *dtype, op, what));
    return mpcl__check_shape(ctx, t, rows, cols, op, what);
}

/* The image (batch x H*W*C) and the output map (batch x out_h*out_w*C'). */
static size_t image_cols(const window_spec *w) {
    return w->height * w->width * w->channels;
}
static size_t map_cols(const window_spec *w, const mpcl_window2d *win) {
    return win->out_h * win->out_w * w->out_channels;
}

/* ---- im2col, col2im ---- */

/* The checks of mpcl_im2col and mpcl_col2im: the image `image` and the
 * columns `columns` (either may be the output), one float dtype. */
static mpcl_status check_columns_pair(mpcl_context *ctx, const window_spec *w,
                                      const mpcl_window2d *win, const mpcl_tensor *image,
                                      const char *image_name, const mpcl_tensor *columns,
                                      const char *columns_name) {
    mpcl_dtype dt = MPCL_DTYPE_COUNT;
    TRY(check_float(ctx, w->op, image, image_name, &dt, w->batch, image_cols(w)));
    return check_float(ctx, w->op, columns, columns_name, &dt, w->batch * win->out_h * win->out_w,
                       w->kh * w->kw * w->channels);
}

static mpcl_status im2col(mpcl_context *ctx, const window_spec *w, const mpcl_window2d *win,
                          mpcl_tensor *columns, const mpcl_tensor *in) {
    size_t items = w->batch * win->out_h * win->out_w; /* output pixels */
    return launch_pair(ctx, in->dtype, "mpcl_im2col", columns, in, w, win, items);
}

static mpcl_status col2im(mpcl_context *ctx, const window_spec *w, const mpcl_window2d *win,
                          mpcl_tensor *d_in, const mpcl_tensor *d_columns) {
    size_t items = w->batch * w->height * w->width; /* pixels */
    return launch_pair(ctx, d_in->dtype, "mpcl_col2im", d_in, d_columns, w, win, items);
}

mpcl_status mpcl_im2col(mpcl_context *ctx, const mpcl_conv2d_shape *s, mpcl_tensor *columns,
                        const mpcl_tensor *in) {
    static const char op[] = "mpcl_im2col";
    mpcl_window2d win;
    TRY(conv_window(ctx, op, s, &win));
    window_spec w = conv_spec(op, s);
    TRY(check_columns_pair(ctx, &w, &win, in, "in", columns, "columns"));
    return im2col(ctx, &w, &win, columns, in);
}

mpcl_status mpcl_col2im(mpcl_context *ctx, const mpcl_conv2d_shape *s, mpcl_tensor *d_in,
                        const mpcl_tensor *d_columns) {
    static const char op[] = "mpcl_col2im";
    mpcl_window2d win;
    TRY(conv_window(ctx, op, s, &win));
    window_spec w = conv_spec(op, s);
    TRY(check_columns_pair(ctx, &w, &win, d_in, "d_in", d_columns, "d_columns"));
    return col2im(ctx, &w, &win, d_in, d_columns);
}

/* ---- convolution ---- */

mpcl_status mpcl__transpose(mpcl_context *ctx, mpcl_tensor *out, const mpcl_tensor *in,
                            size_t count) {
    static const char name[] = "mpcl_transpose";
    cl_kernel k;
    TRY(mpcl__kernel(ctx, in->dtype, name, &k));
    cl_uint rows = (cl_uint)(in->rows / count), cols = (cl_uint)in->cols, n = (cl_uint)count;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(out->mem), MPCL_ARG(in->mem), MPCL_ARG(rows),
                       MPCL_ARG(cols), MPCL_ARG(n), MPCL_ARGS_END));
    return mpcl__launch_2d(ctx, k, name, (cols + 15) / 16, (rows + 15) / 16 * count, NULL);
}

/* ---- the direct convolution ---- */

/* The direct kernels (cl/conv.cl) compute 16 result channels per item
 * without the columns: the forward pass and the input's gradient skip
 * im2col's write and read and col2im's pass (the weight gradient stays
 * columns^T x d_out). They run only when MPCL_CONV=direct asks: measured on
 * the CNN (bench/README.md), conv2's forward alone ran 1.44x faster in f32,
 * but a whole training step was no faster (9,114 samples/s against 9,500 for
 * im2col + GEMM, medians of six interleaved runs) and f16/bf16 were slower
 * even alone (their per-row staging costs more than the GEMM's blocked
 * conversions). They need a multiple of 16 result channels. */
#define DIRECT_CHANNELS 16
#define DIRECT_ROWS 16 /* CONV_TP */

static bool direct_path(size_t result_channels) {
    const char *conv = mpcl__env_value(MPCL_ENV_CONV); /* NULL: im2col */
    return conv && strcmp(conv, "direct") == 0 && result_channels % DIRECT_CHANNELS == 0;
}

/* Launches a direct kernel: dst [rows, n] from src through weights, the
 * window's arguments, then n (or the filters, for d_in: `last`) and rows. */
static mpcl_status direct(mpcl_context *ctx, const char *name, mpcl_tensor *dst,
                          const mpcl_tensor *src, const mpcl_tensor *weights, const window_spec *w,
                          const mpcl_window2d *win, size_t last, size_t rows, size_t n) {
    cl_kernel k;
    TRY(mpcl__kernel(ctx, dst->dtype, name, &k));
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(dst->mem), MPCL_ARG(src->mem), MPCL_ARG(weights->mem),
                       MPCL_ARGS_END));
    TRY(set_window_args(ctx, k, name, 3, w, win));
    cl_uint last32 = (cl_uint)last, rows32 = (cl_uint)rows;
    TRY(mpcl__set_arg(ctx, k, name, 3 + WINDOW_ARGS, sizeof last32, &last32));
    TRY(mpcl__set_arg(ctx, k, name, 4 + WINDOW_ARGS, sizeof rows32, &rows32));
    /* One item per work-group, as mpcl's GEMM: each item's tile is the unit
     * of work, and PoCL spreads work-groups over the cores. */
    const size_t local[2] = {1, 1};
    return mpcl__launch_2d(ctx, k, name, n / DIRECT_CHANNELS,
                           (rows + DIRECT_ROWS - 1) / DIRECT_ROWS, local);
}

/* The convolution's tensors, all in in's dtype; d_in may be NULL. The GEMMs
 * are checked as mpcl_gemm will run them, on the [batch*out_h*out_w, filters]
 * view of out (and d_out), so that a path that cannot take the dtype is
 * refused before im2col writes the columns. */
typedef struct conv_tensors {
    const mpcl_tensor *in, *weights, *out_map; /* out_map: out or d_out */
    mpcl_tensor *columns, *d_in, *d_weights;
} conv_tensors;

static mpcl_status check_conv(mpcl_context *ctx, mpcl_gemm_path path, const window_spec *w,
                              const mpcl_window2d *win, const conv_tensors *t, bool backward) {
    const char *op = w->op;
    size_t rows = w->batch * win->out_h * win->out_w, patch = w->kh * w->kw * w->channels;
    mpcl_dtype dt = MPCL_DTYPE_COUNT;
    TRY(check_float(ctx, op, t->in, "in", &dt, w->batch, image_cols(w)));
    TRY(check_float(ctx, op, t->weights, "weights", &dt, patch, w->out_channels));
    TRY(check_float(ctx, op, t->columns, "columns", &dt, rows, patch));
    TRY(check_float(ctx, op, t->out_map, backward ? "d_out" : "out", &dt, w->batch,
                    map_cols(w, win)));
    mpcl_tensor map = mpcl__tensor_reshape(t->out_map, rows, w->out_channels);
    if (!backward) return mpcl__gemm_check(ctx, path, false, false, t->columns, t->weights, &map);
    TRY(check_float(ctx, op, t->d_weights, "d_weights", &dt, patch, w->out_channels));
    TRY(mpcl__gemm_check(ctx, path, true, false, t->columns, &map, t->d_weights));
    if (!t->d_in) return MPCL_OK;
    TRY(check_float(ctx, op, t->d_in, "d_in", &dt, w->batch, image_cols(w)));
    return mpcl__gemm_check(ctx, path, false, true, &map, t->weights, t->columns);
}

/* ---- the convolution in chunks ---- */

/* The columns pass through the caches twice in each direction: im2col
 * writes them and the forward's GEMM reads them; the input gradient's GEMM
 * writes d_columns and col2im reads them back. Over a whole batch they
 * have left the caches in between (conv2 of the CNN: 17.8 MB of f32 at
 * batch 128), and col2im, whose items gather nine runs from three rows of
 * windows, reads memory at a third of its speed: 1.9 ms from memory
 * against 0.68 ms from the cache (PoCL, Zen 4). So both go in chunks of
 * images whose columns fill an eighth of the device's global memory cache.
 * The forward's chunks fill their own rows of the columns (the weight
 * gradient takes them all); the input gradient's reuse the first rows.
 * Each element sees the same fmas in the same order: the same bits as one
 * chunk. */
#define CHUNK_CACHE_FRACTION 8

/* Images per chunk: whole when the batch fits in one or the device names
 * no cache, or when a chunk of the image tensor or the map (or of the
 * columns, when each chunk has its own rows) cannot start on the device's
 * sub-buffer alignment, or they are sub-buffers already, which cannot have
 * their own. */
static size_t chunk_images(mpcl_context *ctx, const window_spec *w, const mpcl_window2d *win,
                           const mpcl_tensor *image, const mpcl_tensor *map,
                           const mpcl_tensor *columns, bool own_columns) {
    size_t bytes = ctx->cache_bytes / CHUNK_CACHE_FRACTION;
    if (!ctx->cache_bytes || image->view || map->view || (own_columns && columns->view))
        return w->batch;
    size_t elem = mpcl_dtype_size(columns->dtype), align = mpcl__sub_buffer_align(ctx);
    size_t per_image = win->out_h * win->out_w * columns->cols * elem;
    size_t n = bytes / per_image ? bytes / per_image : 1;
    while (n < w->batch && ((n * image->cols * elem) % align || (n * map->cols * elem) % align ||
                            (own_columns && (n * per_image) % align)))
        n++;
    return n < w->batch ? n : w->batch;
}

/* Views of images [first, first + n) of the image tensor and the map; any
 * that cannot be made is destroyed and NULL. */
static mpcl_status chunk_views(const mpcl_tensor *image, const mpcl_tensor *map, size_t first,
                               size_t n, mpcl_tensor **image_n, mpcl_tensor **map_n) {
    *image_n = *map_n = NULL;
    mpcl_status st = mpcl__tensor_view(image, first * image->cols, n, image->cols, image_n);
    if (st == MPCL_OK) st = mpcl__tensor_view(map, first * map->cols, n, map->cols, map_n);
    if (st != MPCL_OK) {
        mpcl_tensor_destroy(*image_n);
        *image_n = NULL;
    }
    return st;
}

/* im2col then columns x weights for images [first, first + n), into their
 * own rows of the columns. */
static mpcl_status forward_chunk(mpcl_context *ctx, mpcl_gemm_path path, const window_spec *w,
                                 const mpcl_window2d *win, mpcl_tensor *out, const mpcl_tensor *in,
                                 const mpcl_tensor *weights, mpcl_tensor *columns, size_t first,
                                 size_t n) {
    size_t per_image = win->out_h * win->out_w;
    mpcl_tensor *in_n, *out_n, *columns_n = NULL;
    mpcl_status st = chunk_views(in, out, first, n, &in_n, &out_n);
    if (st == MPCL_OK)
        st = mpcl__tensor_view(columns, first * per_image * columns->cols, n * per_image,
                               columns->cols, &columns_n);
    if (st == MPCL_OK) {
        window_spec wn = *w;
        wn.batch = n;
        mpcl_tensor map = mpcl__tensor_reshape(out_n, n * per_image, w->out_channels);
        st = im2col(ctx, &wn, win, columns_n, in_n);
        if (st == MPCL_OK)
            st = mpcl_gemm(ctx, path, false, false, 1.0f, columns_n, weights, 0.0f, &map);
    }
    mpcl_tensor_destroy(in_n);
    mpcl_tensor_destroy(out_n);
    mpcl_tensor_destroy(columns_n);
    return st;
}

static mpcl_status forward(mpcl_context *ctx, mpcl_gemm_path path, const window_spec *w,
                           const mpcl_window2d *win, mpcl_tensor *out, const mpcl_tensor *in,
                           const mpcl_tensor *weights, mpcl_tensor *columns) {
    size_t n = chunk_images(ctx, w, win, in, out, columns, true);
    if (n >= w->batch) {
        mpcl_tensor map = mpcl__tensor_reshape(out, columns->rows, w->out_channels);
        TRY(im2col(ctx, w, win, columns, in));
        return mpcl_gemm(ctx, path, false, false, 1.0f, columns, weights, 0.0f, &map);
    }
    for (size_t first = 0; first < w->batch; first += n)
        TRY(forward_chunk(ctx, path, w, win, out, in, weights, columns, first,
                          w->batch - first < n ? w->batch - first : n));
    return MPCL_OK;
}

/* d_columns = d_out weights^T then col2im, for images [first, first + n),
 * in the first rows of the columns; wt: weights^T when staged (NN), else
 * weights (NT). */
static mpcl_status input_gradient_chunk(mpcl_context *ctx, mpcl_gemm_path path,
                                        const window_spec *w, const mpcl_window2d *win,
                                        mpcl_tensor *d_in, const mpcl_tensor *d_out,
                                        const mpcl_tensor *wt, bool staged, mpcl_tensor *columns,
                                        size_t first, size_t n) {
    size_t rows = n * win->out_h * win->out_w;
    mpcl_tensor *d_in_n, *d_out_n;
    mpcl_status st = chunk_views(d_in, d_out, first, n, &d_in_n, &d_out_n);
    if (st == MPCL_OK) {
        mpcl_tensor map = mpcl__tensor_reshape(d_out_n, rows, w->out_channels),
                    d_columns = mpcl__tensor_rows(columns, rows);
        window_spec wn = *w;
        wn.batch = n;
        st = mpcl_gemm(ctx, path, false, !staged, 1.0f, &map, wt, 0.0f, &d_columns);
        if (st == MPCL_OK) st = col2im(ctx, &wn, win, d_in_n, &d_columns);
    }
    mpcl_tensor_destroy(d_out_n);
    mpcl_tensor_destroy(d_in_n);
    return st;
}

static mpcl_status input_gradient(mpcl_context *ctx, mpcl_gemm_path path, const window_spec *w,
                                  const mpcl_window2d *win, mpcl_tensor *d_in,
                                  const mpcl_tensor *d_out, const mpcl_tensor *weights,
                                  mpcl_tensor *columns) {
    size_t n = chunk_images(ctx, w, win, d_in, d_out, columns, false);
    if (n >= w->batch) {
        mpcl_tensor map = mpcl__tensor_reshape(d_out, columns->rows, w->out_channels);
        TRY(mpcl_gemm(ctx, path, false, true, 1.0f, &map, weights, 0.0f, columns));
        return col2im(ctx, w, win, d_in, columns);
    }
    /* Where the GEMM would transpose the weights for each chunk, they are
     * transposed once here (the same bits). */
    size_t patch = columns->cols;
    bool staged = mpcl__gemm_stages_bt(ctx, path, d_out->dtype, n * win->out_h * win->out_w, patch,
                                       w->out_channels);
    mpcl_tensor wt = *weights;
    if (staged) {
        TRY(mpcl__workspace_tensor(ctx, MPCL__WORKSPACE_CONV_WEIGHTS_T, weights->dtype,
                                   w->out_channels, patch, &wt));
        TRY(mpcl__transpose(ctx, &wt, weights, 1));
    }
    for (size_t first = 0; first < w->batch; first += n)
        TRY(input_gradient_chunk(ctx, path, w, win, d_in, d_out, &wt, staged, columns, first,
                                 w->batch - first < n ? w->batch - first : n));
    return MPCL_OK;
}

mpcl_status mpcl_conv2d_forward(mpcl_context *ctx, mpcl_gemm_path path, const mpcl_conv2d_shape *s,
                                mpcl_tensor *out, const mpcl_tensor *in, const mpcl_tensor *weights,
                                mpcl_tensor *columns) {
    static const char op[] = "mpcl_conv2d_forward";
    mpcl_window2d win;
    TRY(conv_window(ctx, op, s, &win));
    window_spec w = conv_spec(op, s);
    conv_tensors t = {.in = in, .weights = weights, .out_map = out, .columns = columns};
    TRY(check_conv(ctx, path, &w, &win, &t, false));
    mpcl_tensor map = mpcl__tensor_reshape(out, columns->rows, s->filters);
    if (direct_path(s->filters))
        return direct(ctx, "mpcl_conv2d_direct", &map, in, weights, &w, &win, s->filters,
                      columns->rows, s->filters);
    return forward(ctx, path, &w, &win, out, in, weights, columns);
}

mpcl_status mpcl_conv2d_backward(mpcl_context *ctx, mpcl_gemm_path path, const mpcl_conv2d_shape *s,
                                 mpcl_tensor *d_in, mpcl_tensor *d_weights,
                                 const mpcl_tensor *d_out, const mpcl_tensor *in,
                                 const mpcl_tensor *weights, mpcl_tensor *columns,
                                 bool columns_hold_in) {
    static const char op[] = "mpcl_conv2d_backward";
    mpcl_window2d win;
    TRY(conv_window(ctx, op, s, &win));
    window_spec w = conv_spec(op, s);
    conv_tensors t = {.in = in,
                      .weights = weights,
                      .out_map = d_out,
                      .columns = columns,
                      .d_in = d_in,
                      .d_weights = d_weights};
    TRY(check_conv(ctx, path, &w, &win, &t, true));
    mpcl_tensor map = mpcl__tensor_reshape(d_out, columns->rows, s->filters);
    /* The direct input gradient leaves the columns alone, so it goes first,
     * staging the weights transposed per tap in d_weights' memory, which the
     * weight gradient then overwrites (the queue is in order). */
    size_t taps = s->kernel_h * s->kernel_w;
    if (d_in && direct_path(s->channels)) {
        /* weights [taps, C, F] as [taps, F, C]: each tap's rows of C. */
        mpcl_tensor weights_t = mpcl__tensor_reshape(d_weights, taps * s->filters, s->channels);
        mpcl_tensor d_image =
            mpcl__tensor_reshape(d_in, s->batch * s->height * s->width, s->channels);
        TRY(mpcl__transpose(ctx, &weights_t, weights, taps));
        TRY(direct(ctx, "mpcl_conv2d_direct_d_in", &d_image, d_out, &weights_t, &w, &win,
                   s->filters, d_image.rows, s->channels));
    }
    /* The weight gradient from the forward's columns when they are still
     * there (a training step's forward left them: one im2col a step, not
     * two), else from im2col again. */
    if (!columns_hold_in || direct_path(s->filters)) TRY(im2col(ctx, &w, &win, columns, in));
    TRY(mpcl_gemm(ctx, path, true, false, 1.0f, columns, &map, 0.0f, d_weights));
    if (!d_in || direct_path(s->channels)) return MPCL_OK;
    /* Then d_columns = d_out weights^T into the columns, gathered by col2im
     * into d_in. */
    return input_gradient(ctx, path, &w, &win, d_in, d_out, weights, columns);
}

/* ---- max pooling ---- */

static mpcl_status check_argmax(mpcl_context *ctx, const window_spec *w, const mpcl_window2d *win,
                                const mpcl_tensor *argmax) {
    TRY(mpcl__check_present(ctx, argmax, w->op, "argmax"));
    TRY(mpcl__check_dtype(ctx, argmax, MPCL_DTYPE_I32, w->op, "argmax"));
    return mpcl__check_shape(ctx, argmax, w->batch, map_cols(w, win), w->op, "argmax");
}

mpcl_status mpcl_maxpool2d_forward(mpcl_context *ctx, const mpcl_pool2d_shape *s, mpcl_tensor *out,
                                   mpcl_tensor *argmax, const mpcl_tensor *in) {
    static const char op[] = "mpcl_maxpool2d_forward";
    mpcl_window2d win;
    TRY(pool_window(ctx, op, s, &win));
    window_spec w = pool_spec(op, s);
    mpcl_dtype dt = MPCL_DTYPE_COUNT;
    TRY(check_float(ctx, op, in, "in", &dt, w.batch, image_cols(&w)));
    TRY(check_float(ctx, op, out, "out", &dt, w.batch, map_cols(&w, &win)));
    if (argmax) TRY(check_argmax(ctx, &w, &win, argmax));
    static const char name[] = "mpcl_maxpool2d_forward";
    cl_kernel k;
    TRY(mpcl__kernel(ctx, dt, name, &k));
    /* Without argmax the kernel never writes that argument; out stands in. */
    cl_mem argmax_mem = argmax ? argmax->mem : out->mem;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(out->mem), MPCL_ARG(argmax_mem), MPCL_ARG(in->mem),
                       MPCL_ARGS_END));
    TRY(set_window_args(ctx, k, name, 3, &w, &win));
    size_t items = w.batch * win.out_h * win.out_w; /* output pixels */
    cl_uint n = (cl_uint)items, write_argmax = argmax != NULL;
    TRY(mpcl__set_arg(ctx, k, name, 3 + WINDOW_ARGS, sizeof n, &n));
    TRY(mpcl__set_arg(ctx, k, name, 4 + WINDOW_ARGS, sizeof write_argmax, &write_argmax));
    return mpcl__launch_1d(ctx, k, name, items, mpcl__local_size(ctx, k, CONV_WG));
}

mpcl_status mpcl_maxpool2d_backward(mpcl_context *ctx, const mpcl_pool2d_shape *s,
                                    mpcl_tensor *d_in, const mpcl_tensor *d_out,
                                    const mpcl_tensor *argmax) {
    static const char op[] = "mpcl_maxpool2d_backward";
    mpcl_window2d win;
    TRY(pool_window(ctx, op, s, &win));
    window_spec w = pool_spec(op, s);
    mpcl_dtype dt = MPCL_DTYPE_COUNT;
    TRY(check_float(ctx, op, d_out, "d_out", &dt, w.batch, map_cols(&w, &win)));
    TRY(check_float(ctx, op, d_in, "d_in", &dt, w.batch, image_cols(&w)));
    TRY(check_argmax(ctx, &w, &win, argmax));
    static const char name[] = "mpcl_maxpool2d_backward";
    cl_kernel k;
    TRY(mpcl__kernel(ctx, dt, name, &k));
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(d_in->mem), MPCL_ARG(d_out->mem),
                       MPCL_ARG(argmax->mem), MPCL_ARGS_END));
    TRY(set_window_args(ctx, k, name, 3, &w, &win));
    size_t items = w.batch * w.height * w.width; /* input pixels */
    cl_uint n = (cl_uint)items;
    TRY(mpcl__set_arg(ctx, k, name, 3 + WINDOW_ARGS, sizeof n, &n));
    return mpcl__launch_1d(ctx, k, name, items, mpcl__local_size(ctx, k, CONV_WG));
}
