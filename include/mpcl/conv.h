/* Convolution and max pooling on NHWC images: the shapes they imply, and
 * their device ops.
 *
 * Tensors stay 2-D: a batch of B images of H x W pixels with C channels is a
 * [B, H*W*C] tensor, each row one image in (row, column, channel) order, as
 * Keras' channels_last. The convolution runs as im2col + mpcl_gemm: the
 * image patches are copied into the rows of a columns workspace, so that the
 * forward pass and both backward passes are GEMMs on whichever path the
 * precision plan picked (an implicit-GEMM kernel would need its own kernel
 * per path). Math is f32 everywhere; f16 and bf16 are storage formats. Every
 * op is enqueued and returns without waiting; tensors are checked completely
 * before anything is enqueued, so a refused call leaves its outputs
 * untouched. */
#ifndef MPCL_CONV_H
#define MPCL_CONV_H

#include <stdbool.h>
#include <stddef.h>

#include "mpcl/context.h"
#include "mpcl/plan.h"
#include "mpcl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* Keras' padding. VALID: windows inside the image only, out = floor((in -
 * k) / s) + 1 (in >= k). SAME: out = ceil(in / s), the image padded by
 * pad = max((out - 1) s + k - in, 0) in all, pad / 2 before and the rest
 * after (TensorFlow's rule); zeros for a convolution, nothing for pooling
 * (a padded position never wins). */
typedef enum mpcl_padding {
    MPCL_PADDING_VALID,
    MPCL_PADDING_SAME,
    MPCL_PADDING_COUNT,
} mpcl_padding;

/* "valid", "same"; "unknown" outside the enum. */
const char *mpcl_padding_name(mpcl_padding padding);
/* Name to value; false for an unknown name. */
bool mpcl_padding_parse(const char *name, mpcl_padding *out);

/* A convolution: B images of H x W x C into B maps of out_h x out_w x
 * filters, a kernel_h x kernel_w window moved by (stride_h, stride_w). */
typedef struct mpcl_conv2d_shape {
    size_t batch, height, width, channels;
    size_t kernel_h, kernel_w, filters;
    size_t stride_h, stride_w;
    mpcl_padding padding;
} mpcl_conv2d_shape;

/* A max pooling: B images of H x W x C into B of out_h x out_w x C. Keras'
 * default strides are the pool size: pass them. */
typedef struct mpcl_pool2d_shape {
    size_t batch, height, width, channels;
    size_t pool_h, pool_w;
    size_t stride_h, stride_w;
    mpcl_padding padding;
} mpcl_pool2d_shape;

/* What a shape implies: the output size and the padding on each side. */
typedef struct mpcl_window2d {
    size_t out_h, out_w;
    size_t pad_top, pad_bottom, pad_left, pad_right;
} mpcl_window2d;

/* The window of a shape, after checking it (MPCL_ERR_SHAPE naming the
 * field: a zero size or stride, a VALID window larger than the image, a
 * tensor of more than 2^32 - 1 elements: input, output, weights or columns;
 * MPCL_ERR_INVALID_ARG for an unknown padding). ctx may be NULL; with one,
 * the message is also kept on it. */
mpcl_status mpcl_conv2d_window(mpcl_context *ctx, const mpcl_conv2d_shape *s, mpcl_window2d *out);
mpcl_status mpcl_pool2d_window(mpcl_context *ctx, const mpcl_pool2d_shape *s, mpcl_window2d *out);

/* The shapes the convolution's tensors must have (s already checked):
 *   input  [batch, H*W*channels]          output  [batch, out_h*out_w*filters]
 *   weights [kernel_h*kernel_w*channels, filters], rows in (kh, kw, c) order
 *   columns [batch*out_h*out_w, kernel_h*kernel_w*channels]
 * The output is also the [batch*out_h*out_w, filters] matrix of the GEMM,
 * whose rows a bias + activation (include/mpcl/ops.h) takes as they are. */
void mpcl_conv2d_columns_shape(const mpcl_conv2d_shape *s, const mpcl_window2d *w, size_t *rows,
                               size_t *cols);

/* columns[(b, oh, ow), (kh, kw, c)] = in[b, oh*stride_h - pad_top + kh,
 * ow*stride_w - pad_left + kw, c], or 0 in the padding: a copy, exact.
 * in, columns: one float storage dtype. */
mpcl_status mpcl_im2col(mpcl_context *ctx, const mpcl_conv2d_shape *s, mpcl_tensor *columns,
                        const mpcl_tensor *in);

/* The adjoint of mpcl_im2col: d_in[b, h, w, c] = the sum of the d_columns
 * elements that im2col copies from (b, h, w, c), in f32 in a fixed order
 * (each input pixel gathered by one work-item, no atomics: deterministic), rounded
 * once into d_in; 0 where no window reaches. Overwrites d_in. */
mpcl_status mpcl_col2im(mpcl_context *ctx, const mpcl_conv2d_shape *s, mpcl_tensor *d_in,
                        const mpcl_tensor *d_columns);

/* out = conv(in, weights), no bias: im2col into `columns`, then
 * mpcl_gemm(path, columns, weights) into out. in, weights, columns, out: one
 * storage dtype, which `path` must take (include/mpcl/gemm.h;
 * mpcl_gemm_default_path gives the plan's). columns is a workspace, its
 * contents overwritten. */
mpcl_status mpcl_conv2d_forward(mpcl_context *ctx, mpcl_gemm_path path, const mpcl_conv2d_shape *s,
                                mpcl_tensor *out, const mpcl_tensor *in, const mpcl_tensor *weights,
                                mpcl_tensor *columns);

/* The gradients of the forward's output given d_out (shaped as out):
 * d_weights = columns(in)^T d_out (a GEMM on the columns), then, unless d_in
 * is NULL, d_in = col2im(d_out weights^T) (a GEMM into `columns`, then
 * mpcl_col2im).
 * columns_hold_in: nothing has written `columns` since mpcl_conv2d_forward
 * of this same `in` on this path, so the columns im2col left there are
 * taken as they are (a training step: one im2col instead of two); false
 * runs im2col again. Overwrites d_weights, d_in and the columns; d_in must
 * not share memory with in or d_out. Tensors as in mpcl_conv2d_forward;
 * d_weights in the storage dtype. */
mpcl_status mpcl_conv2d_backward(mpcl_context *ctx, mpcl_gemm_path path, const mpcl_conv2d_shape *s,
                                 mpcl_tensor *d_in, mpcl_tensor *d_weights,
                                 const mpcl_tensor *d_out, const mpcl_tensor *in,
                                 const mpcl_tensor *weights, mpcl_tensor *columns,
                                 bool columns_hold_in);

/* out[b, oh, ow, c] = the largest in[b, h, w, c] of the window, h in
 * [oh*stride_h - pad_top, + pool_h), w likewise, inside the image; NaN wins
 * (it reaches the loss scaler); on ties the first in window order (row by
 * row), as TensorFlow. argmax (may be NULL) gets where it was: h * W + w.
 * in [batch, H*W*C] and out [batch, out_h*out_w*C]: one storage dtype;
 * argmax: i32, shaped as out. */
mpcl_status mpcl_maxpool2d_forward(mpcl_context *ctx, const mpcl_pool2d_shape *s, mpcl_tensor *out,
                                   mpcl_tensor *argmax, const mpcl_tensor *in);

/* d_in[b, h, w, c] = the sum of d_out[b, oh, ow, c] over the windows whose
 * argmax is (h, w), in f32 in a fixed order (deterministic, no atomics),
 * rounded once; 0 elsewhere. Overwrites d_in. argmax: the forward's. */
mpcl_status mpcl_maxpool2d_backward(mpcl_context *ctx, const mpcl_pool2d_shape *s,
                                    mpcl_tensor *d_in, const mpcl_tensor *d_out,
                                    const mpcl_tensor *argmax);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
