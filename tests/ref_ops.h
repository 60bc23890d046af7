/* The double-precision host reference of the ops area: the specification the
 * device kernels are tested against, written to be read. Every buffer is a
 * row-major double array; shapes are given on each function. */
#ifndef MPCL_REF_OPS_H
#define MPCL_REF_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mpcl/conv.h"
#include "mpcl/ops.h"

/* c [M, N] = op(a) op(b) (+ bias [N] when not NULL); op(a) is [M, K]: a
 * [K, M] when ta, b [N, K] when tb. */
void ref_gemm(bool ta, bool tb, size_t M, size_t N, size_t K, const double *a, const double *b,
              const double *bias, double *c);

/* act(z) and its derivative d act / d z, in double. */
double ref_act(mpcl_activation act, double z);
double ref_act_grad(mpcl_activation act, double z);

/* out[b,j] = act(in[b,j] + bias[j]); z (may be NULL) gets in + bias.
 * out, z, in: [rows, cols]. bias: [cols]. */
void ref_bias_act_forward(double *out, double *z, const double *in, const double *bias, size_t rows,
                          size_t cols, mpcl_activation act);

/* d_pre[b,j] = d_out[b,j] * act'(z[b,j]), with z the pre-activation.
 * d_pre, d_out, z: [rows, cols]. */
void ref_bias_act_backward(double *d_pre, const double *d_out, const double *z, size_t rows,
                           size_t cols, mpcl_activation act);

/* d_bias[j] = sum over b of d_pre[b,j]. d_bias: [cols]. d_pre: [rows, cols]. */
void ref_bias_grad(double *d_bias, const double *d_pre, size_t rows, size_t cols);

/* Softmax cross-entropy over rows with valid labels in [0, cols):
 * loss_b = log(sum_c exp(logits[b,c])) - logits[b,label_b], computed stably;
 * *loss_sum = sum of loss_b; *correct = rows whose first argmax is the label;
 * d_logits (may be NULL) = (softmax(logits[b]) - onehot(label_b)) * scale / rows,
 * the gradient of scale * mean loss. A row with a label out of range counts
 * nowhere and gets a zero gradient row; the return value is the number of
 * such rows. logits, d_logits: [rows, cols]. labels: [rows]. */
size_t ref_softmax_xent(const double *logits, const int32_t *labels, size_t rows, size_t cols,
                        double scale, double *loss_sum, size_t *correct, double *d_logits);

/* The dense losses (mpcl/losses.h) of pred [rows, cols] against targets
 * [rows, cols]: binary cross-entropy on logits z, softplus(z) - z t, with
 * the metric binary accuracy (sigmoid(z) > 0.5 against t > 0.5, counted),
 * or MSE (y - t)^2 with the metric |y - t|. A row with any bad target
 * (binary: outside [0, 1] or NaN; MSE: not finite) counts nowhere and gets
 * a zero gradient row; the return value is the number of such rows.
 * *loss_sum, *metric_sum: over the elements of the other rows. d_pred (may
 * be NULL): the gradient of scale * mean over the valid and bad rows'
 * elements, i.e. d term / d z * scale / (grad_rows * cols). */
size_t ref_dense_loss(mpcl_loss loss, const double *pred, const double *targets, size_t rows,
                      size_t cols, double scale, size_t grad_rows, double *loss_sum,
                      double *metric_sum, double *d_pred);

/* bfloat16 (sign, 8 exponent bits with bias 127, 7 mantissa bits; exponent 0
 * is subnormal with quantum 2^-133): the value of a bit pattern from its
 * fields (NaN for NaN patterns), and a double rounded straight to the
 * nearest bf16, ties to even, computed in double without the bit trick the
 * library uses: |x| at or past 2^128 after rounding is inf; NaN gives the
 * quiet NaN 0x7fc0 with the sign. For a float input this is the correctly
 * rounded f32 -> bf16 conversion. */
double ref_bf16_value(uint16_t bits);
uint16_t ref_f64_to_bf16(double x);
/* binary16 (5 exponent bits with bias 15, 10 mantissa bits; exponent 0 is
 * subnormal with quantum 2^-24): the value of a bit pattern from its fields. */
double ref_f16_value(uint16_t bits);

/* ---- convolution and pooling (NHWC; images [B, H, W, C] row-major) ---- */

/* One axis of a window, TensorFlow's definition: VALID out = ceil((in - k +
 * 1) / s) with no padding (in >= k); SAME out = ceil(in / s), padded by
 * max((out - 1) s + k - in, 0) of which the smaller half comes before. */
void ref_window(size_t in, size_t k, size_t s, mpcl_padding padding, size_t *out,
                size_t *pad_before);

/* The direct convolution: out[b, oh, ow, f] = sum over kh, kw, c of
 * in[b, oh*sh - pad_top + kh, ow*sw - pad_left + kw, c] * w[(kh*KW + kw)*C + c, f],
 * positions outside the image adding nothing. */
void ref_conv2d_forward(double *out, const double *in, const double *w, const mpcl_conv2d_shape *s);

/* The gradients of sum(d_out * out) with respect to in and w (either output
 * may be NULL), by the same loop. */
void ref_conv2d_backward(double *d_in, double *d_w, const double *d_out, const double *in,
                         const double *w, const mpcl_conv2d_shape *s);

/* Max pooling: out = the largest value of the window's positions inside the
 * image, the first in row order among equals, NaN over any number; argmax
 * (may be NULL) = its h * W + w. */
void ref_maxpool2d_forward(double *out, int32_t *argmax, const double *in,
                           const mpcl_pool2d_shape *s);

/* d_in = each window's d_out added at the position of its maximum (found
 * from `in` as above), 0 elsewhere. */
void ref_maxpool2d_backward(double *d_in, const double *d_out, const double *in,
                            const mpcl_pool2d_shape *s);

/* ---- dropout ---- */

/* The keep rule of include/mpcl/dropout.h, written from its text:
 * splitmix64's output function mix64, key = mix64(seed ^ mix64(counter)),
 * h = mix64(key + 0x9e3779b97f4a7c15 (index + 1)); kept when the top 24
 * bits of h over 2^24 reach rate. ref_dropout_hash returns h. */
uint64_t ref_dropout_hash(uint64_t seed, uint64_t counter, uint64_t index);
int ref_dropout_keep(uint64_t seed, uint64_t counter, uint64_t index, float rate);

/* out[i] = in[i] / (1 - rate) where element i is kept, else 0. out, in: [n]. */
void ref_dropout(double *out, const double *in, size_t n, float rate, uint64_t seed,
                 uint64_t counter);

/* ---- batch normalization over the columns of [rows, cols] ---- */

/* The biased batch statistics of each column: mean[c], var[c]. */
void ref_batchnorm_stats(double *mean, double *var, const double *x, size_t rows, size_t cols);

/* y = gamma (x - mean) / sqrt(var + epsilon) + beta, per column c with
 * mean[c], var[c] (the batch's or the moving ones). */
void ref_batchnorm_apply(double *y, const double *x, const double *gamma, const double *beta,
                         const double *mean, const double *var, double epsilon, size_t rows,
                         size_t cols);

/* The gradients of sum(dy * y) for y the training forward (the batch's own
 * statistics, recomputed from x): d_beta[c] = sum dy, d_gamma[c] = sum dy
 * xhat, and dx, the derivative through the mean and the variance too. */
void ref_batchnorm_backward(double *dx, double *d_gamma, double *d_beta, const double *dy,
                            const double *x, const double *gamma, double epsilon, size_t rows,
                            size_t cols);

#endif
