/* The double-precision reference of the ops area (see ref_ops.h). Plain
 * loops, no shortcuts: this file is the specification. */
#include "ref_ops.h"

#include <math.h>

/* sqrt(2 / pi) and the cubic coefficient of the tanh form of GELU. */
static const double gelu_k = 0.79788456080286535588;
static const double gelu_a = 0.044715;

double ref_act(mpcl_activation act, double z) {
    switch (act) {
    case MPCL_ACT_RELU: return z > 0 ? z : 0;
    case MPCL_ACT_GELU: return 0.5 * z * (1 + tanh(gelu_k * (z + gelu_a * z * z * z)));
    case MPCL_ACT_SIGMOID: return 1 / (1 + exp(-z));
    case MPCL_ACT_TANH: return tanh(z);
    default: return z;
    }
}

double ref_act_grad(mpcl_activation act, double z) {
    switch (act) {
    case MPCL_ACT_RELU: return z > 0 ? 1 : 0; /* 0 at the kink, by convention */
    case MPCL_ACT_GELU: {
        /* d/dz 0.5 z (1 + tanh(u)), u = k (z + a z^3):
         * 0.5 (1 + tanh u) + 0.5 z (1 - tanh^2 u) k (1 + 3 a z^2). */
        double t = tanh(gelu_k * (z + gelu_a * z * z * z));
        return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * gelu_k * (1 + 3 * gelu_a * z * z);
    }
    case MPCL_ACT_SIGMOID: {
        double s = 1 / (1 + exp(-z));
        return s * (1 - s);
    }
    case MPCL_ACT_TANH: {
        double t = tanh(z);
        return 1 - t * t;
    }
    default: return 1;
    }
}

void ref_bias_act_forward(double *out, double *z, const double *in, const double *bias, size_t rows,
                          size_t cols, mpcl_activation act) {
    for (size_t b = 0; b < rows; b++) {
        for (size_t j = 0; j < cols; j++) {
            double v = in[b * cols + j] + bias[j];
            if (z) z[b * cols + j] = v;
            out[b * cols + j] = ref_act(act, v);
        }
    }
}

void ref_bias_act_backward(double *d_pre, const double *d_out, const double *z, size_t rows,
                           size_t cols, mpcl_activation act) {
    for (size_t i = 0; i < rows * cols; i++) d_pre[i] = d_out[i] * ref_act_grad(act, z[i]);
}

void ref_bias_grad(double *d_bias, const double *d_pre, size_t rows, size_t cols) {
    for (size_t j = 0; j < cols; j++) {
        double s = 0;
        for (size_t b = 0; b < rows; b++) s += d_pre[b * cols + j];
        d_bias[j] = s;
    }
}

size_t ref_softmax_xent(const double *logits, const int32_t *labels, size_t rows, size_t cols,
                        double scale, double *loss_sum, size_t *correct, double *d_logits) {
    size_t bad = 0;
    *loss_sum = 0;
    *correct = 0;
    for (size_t b = 0; b < rows; b++) {
        const double *z = logits + b * cols;
        int32_t label = labels[b];
        int ok = label >= 0 && (size_t)label < cols;
        /* The first maximum is the prediction; subtracting it keeps exp <= 1. */
        size_t arg = 0;
        for (size_t c = 1; c < cols; c++)
            if (z[c] > z[arg]) arg = c;
        double m = z[arg], s = 0;
        for (size_t c = 0; c < cols; c++) s += exp(z[c] - m);
        if (ok) {
            *loss_sum += m + log(s) - z[label];
            *correct += arg == (size_t)label;
        } else {
            bad++;
        }
        if (d_logits) {
            for (size_t c = 0; c < cols; c++) {
                double p = exp(z[c] - m) / s;
                double onehot = (int32_t)c == label ? 1 : 0;
                d_logits[b * cols + c] = ok ? (p - onehot) * scale / (double)rows : 0;
            }
        }
    }
    return bad;
}

double ref_bf16_value(uint16_t h) {
    int sign = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
    double v;
    if (e == 0xff)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, -133);
    else
        v = ldexp((double)(m | 0x80), e - 134);
    return sign ? -v : v;
}

double ref_f16_value(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, -24);
    else
        v = ldexp((double)(m | 0x400), e - 25);
    return sign ? -v : v;
}

uint16_t ref_f64_to_bf16(double x) {
    uint16_t sign = signbit(x) ? 0x8000u : 0u;
    if (isnan(x)) return (uint16_t)(sign | 0x7fc0u);
    double a = fabs(x);
    if (a == 0) return sign;
    if (isinf(a)) return (uint16_t)(sign | 0x7f80u);
    /* The nearest multiple of the bf16 quantum at this magnitude: 8
     * significant bits give 2^(e-8) for a in [2^(e-1), 2^e), never below the
     * subnormal quantum 2^-133; nearbyint rounds half to even in the default
     * rounding mode. */
    int e;
    frexp(a, &e);
    int q = e - 8 < -133 ? -133 : e - 8;
    double r = ldexp(nearbyint(ldexp(a, -q)), q);
    if (r >= 0x1p128) return (uint16_t)(sign | 0x7f80u);
    /* r = M 2^q with M < 2^8 (or 2^8 exactly after a carry): encode the
     * fields. */
    if (r < 0x1p-126) return (uint16_t)(sign | (uint16_t)ldexp(r, 133)); /* subnormal */
    int re;
    double m = frexp(r, &re); /* r = m 2^re, m in [0.5, 1) */
    uint16_t mant = (uint16_t)(ldexp(m, 8) - 128.0);
    return (uint16_t)(sign | (uint16_t)((re - 1 + 127) << 7) | mant);
}

static bool ref_target_ok(mpcl_loss loss, double t) {
    if (loss == MPCL_LOSS_BINARY_CROSSENTROPY) return t >= 0 && t <= 1;
    return isfinite(t);
}

/* softplus(z) = log(1 + e^z), without overflow for large z. */
static double ref_softplus(double z) {
    return z > 0 ? z + log1p(exp(-z)) : log1p(exp(z));
}

size_t ref_dense_loss(mpcl_loss loss, const double *pred, const double *targets, size_t rows,
                      size_t cols, double scale, size_t grad_rows, double *loss_sum,
                      double *metric_sum, double *d_pred) {
    size_t bad = 0;
    double g = scale / ((double)grad_rows * (double)cols);
    *loss_sum = 0;
    *metric_sum = 0;
    for (size_t r = 0; r < rows; r++) {
        const double *z = pred + r * cols, *t = targets + r * cols;
        bool ok = true;
        for (size_t c = 0; c < cols; c++) ok = ok && ref_target_ok(loss, t[c]);
        bad += !ok;
        for (size_t c = 0; c < cols; c++) {
            double term, metric, unit;
            if (loss == MPCL_LOSS_BINARY_CROSSENTROPY) {
                double p = 1 / (1 + exp(-z[c]));
                term = ref_softplus(z[c]) - z[c] * t[c];
                metric = (p > 0.5) == (t[c] > 0.5);
                unit = p - t[c];
            } else {
                term = (z[c] - t[c]) * (z[c] - t[c]);
                metric = fabs(z[c] - t[c]);
                unit = 2 * (z[c] - t[c]);
            }
            if (ok) {
                *loss_sum += term;
                *metric_sum += metric;
            }
            if (d_pred) d_pred[r * cols + c] = ok ? unit * g : 0;
        }
    }
    return bad;
}

/* ---- convolution and pooling ---- */

void ref_window(size_t in, size_t k, size_t s, mpcl_padding padding, size_t *out,
                size_t *pad_before) {
    if (padding == MPCL_PADDING_VALID) {
        *out = (in - k + 1 + s - 1) / s;
        *pad_before = 0;
        return;
    }
    *out = (in + s - 1) / s;
    long total = (long)((*out - 1) * s + k) - (long)in;
    *pad_before = total > 0 ? (size_t)total / 2 : 0;
}

/* Every (output, tap) pair of the convolution whose input position lies in
 * the image: accumulates out += in w, d_in += d_out w and d_w += in d_out
 * for the outputs that are not NULL. */
static void conv_taps(double *out, double *d_in, double *d_w, const double *in, const double *w,
                      const double *d_out, const mpcl_conv2d_shape *s) {
    size_t oh_n, ow_n, pt, pl;
    ref_window(s->height, s->kernel_h, s->stride_h, s->padding, &oh_n, &pt);
    ref_window(s->width, s->kernel_w, s->stride_w, s->padding, &ow_n, &pl);
    const size_t H = s->height, W = s->width, C = s->channels, F = s->filters;
    for (size_t b = 0; b < s->batch; b++)
        for (size_t oh = 0; oh < oh_n; oh++)
            for (size_t ow = 0; ow < ow_n; ow++)
                for (size_t kh = 0; kh < s->kernel_h; kh++)
                    for (size_t kw = 0; kw < s->kernel_w; kw++) {
                        long h = (long)(oh * s->stride_h + kh) - (long)pt;
                        long x = (long)(ow * s->stride_w + kw) - (long)pl;
                        if (h < 0 || h >= (long)H || x < 0 || x >= (long)W) continue;
                        for (size_t c = 0; c < C; c++)
                            for (size_t f = 0; f < F; f++) {
                                size_t i = ((b * H + (size_t)h) * W + (size_t)x) * C + c;
                                size_t wi = ((kh * s->kernel_w + kw) * C + c) * F + f;
                                size_t o = ((b * oh_n + oh) * ow_n + ow) * F + f;
                                if (out) out[o] += in[i] * w[wi];
                                if (d_in) d_in[i] += d_out[o] * w[wi];
                                if (d_w) d_w[wi] += in[i] * d_out[o];
                            }
                    }
}

void ref_conv2d_forward(double *out, const double *in, const double *w,
                        const mpcl_conv2d_shape *s) {
    size_t oh, ow, pad;
    ref_window(s->height, s->kernel_h, s->stride_h, s->padding, &oh, &pad);
    ref_window(s->width, s->kernel_w, s->stride_w, s->padding, &ow, &pad);
    for (size_t i = 0; i < s->batch * oh * ow * s->filters; i++) out[i] = 0;
    conv_taps(out, NULL, NULL, in, w, NULL, s);
}

void ref_conv2d_backward(double *d_in, double *d_w, const double *d_out, const double *in,
                         const double *w, const mpcl_conv2d_shape *s) {
    if (d_in)
        for (size_t i = 0; i < s->batch * s->height * s->width * s->channels; i++) d_in[i] = 0;
    if (d_w)
        for (size_t i = 0; i < s->kernel_h * s->kernel_w * s->channels * s->filters; i++)
            d_w[i] = 0;
    conv_taps(NULL, d_in, d_w, in, w, d_out, s);
}

/* The window maximum of output element (b, oh, ow, c): its value and the
 * input index (b, h, w, c) where it is. */
static size_t pool_max(const double *in, const mpcl_pool2d_shape *s, size_t pt, size_t pl, size_t b,
                       size_t oh, size_t ow, size_t c, double *value) {
    size_t at = 0;
    int found = 0;
    for (size_t kh = 0; kh < s->pool_h; kh++)
        for (size_t kw = 0; kw < s->pool_w; kw++) {
            long h = (long)(oh * s->stride_h + kh) - (long)pt;
            long x = (long)(ow * s->stride_w + kw) - (long)pl;
            if (h < 0 || h >= (long)s->height || x < 0 || x >= (long)s->width) continue;
            size_t i = ((b * s->height + (size_t)h) * s->width + (size_t)x) * s->channels + c;
            if (!found || in[i] > *value || (isnan(in[i]) && !isnan(*value))) {
                *value = in[i];
                at = i;
                found = 1;
            }
        }
    return at;
}

void ref_maxpool2d_forward(double *out, int32_t *argmax, const double *in,
                           const mpcl_pool2d_shape *s) {
    size_t oh_n, ow_n, pt, pl;
    ref_window(s->height, s->pool_h, s->stride_h, s->padding, &oh_n, &pt);
    ref_window(s->width, s->pool_w, s->stride_w, s->padding, &ow_n, &pl);
    const size_t C = s->channels, plane = s->height * s->width;
    for (size_t b = 0; b < s->batch; b++)
        for (size_t oh = 0; oh < oh_n; oh++)
            for (size_t ow = 0; ow < ow_n; ow++)
                for (size_t c = 0; c < C; c++) {
                    size_t o = ((b * oh_n + oh) * ow_n + ow) * C + c;
                    size_t at = pool_max(in, s, pt, pl, b, oh, ow, c, &out[o]);
                    if (argmax) argmax[o] = (int32_t)((at / C) % plane);
                }
}

void ref_maxpool2d_backward(double *d_in, const double *d_out, const double *in,
                            const mpcl_pool2d_shape *s) {
    size_t oh_n, ow_n, pt, pl;
    ref_window(s->height, s->pool_h, s->stride_h, s->padding, &oh_n, &pt);
    ref_window(s->width, s->pool_w, s->stride_w, s->padding, &ow_n, &pl);
    const size_t C = s->channels;
    for (size_t i = 0; i < s->batch * s->height * s->width * C; i++) d_in[i] = 0;
    for (size_t b = 0; b < s->batch; b++)
        for (size_t oh = 0; oh < oh_n; oh++)
            for (size_t ow = 0; ow < ow_n; ow++)
                for (size_t c = 0; c < C; c++) {
                    double value;
                    size_t at = pool_max(in, s, pt, pl, b, oh, ow, c, &value);
                    d_in[at] += d_out[((b * oh_n + oh) * ow_n + ow) * C + c];
                }
}

/* ---- dropout ---- */

static uint64_t ref_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

uint64_t ref_dropout_hash(uint64_t seed, uint64_t counter, uint64_t index) {
    uint64_t key = ref_mix64(seed ^ ref_mix64(counter));
    return ref_mix64(key + 0x9e3779b97f4a7c15u * (index + 1));
}

int ref_dropout_keep(uint64_t seed, uint64_t counter, uint64_t index, float rate) {
    double u = (double)(ref_dropout_hash(seed, counter, index) >> 40) / 16777216.0;
    return u >= (double)rate;
}

void ref_dropout(double *out, const double *in, size_t n, float rate, uint64_t seed,
                 uint64_t counter) {
    for (size_t i = 0; i < n; i++)
        out[i] = ref_dropout_keep(seed, counter, i, rate) ? in[i] / (1 - (double)rate) : 0;
}

/* ---- batch normalization ---- */

void ref_batchnorm_stats(double *mean, double *var, const double *x, size_t rows, size_t cols) {
    for (size_t c = 0; c < cols; c++) {
        double s = 0, q = 0;
        for (size_t r = 0; r < rows; r++) s += x[r * cols + c];
        mean[c] = s / (double)rows;
        for (size_t r = 0; r < rows; r++) {
            double d = x[r * cols + c] - mean[c];
            q += d * d;
        }
        var[c] = q / (double)rows;
    }
}

void ref_batchnorm_apply(double *y, const double *x, const double *gamma, const double *beta,
                         const double *mean, const double *var, double epsilon, size_t rows,
                         size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < cols; c++) {
            size_t i = r * cols + c;
            y[i] = gamma[c] * (x[i] - mean[c]) / sqrt(var[c] + epsilon) + beta[c];
        }
    }
}

/* With xhat = (x - m) s, s = (v + eps)^-1/2 and y = gamma xhat + beta:
 * dL/dxhat = dy gamma; through m and v, dx = s (dxhat - mean(dxhat) - xhat
 * mean(dxhat xhat)), the textbook result, which the library's form (gamma
 * s / N (N dy - d_beta - xhat d_gamma)) equals. */
void ref_batchnorm_backward(double *dx, double *d_gamma, double *d_beta, const double *dy,
                            const double *x, const double *gamma, double epsilon, size_t rows,
                            size_t cols) {
    for (size_t c = 0; c < cols; c++) {
        double m = 0, v = 0;
        for (size_t r = 0; r < rows; r++) m += x[r * cols + c];
        m /= (double)rows;
        for (size_t r = 0; r < rows; r++) v += (x[r * cols + c] - m) * (x[r * cols + c] - m);
        v /= (double)rows;
        double s = 1 / sqrt(v + epsilon), mean_g = 0, mean_gx = 0;
        for (size_t r = 0; r < rows; r++) {
            size_t i = r * cols + c;
            double g = dy[i] * gamma[c], xhat = (x[i] - m) * s;
            mean_g += g / (double)rows;
            mean_gx += g * xhat / (double)rows;
        }
        d_beta[c] = d_gamma[c] = 0;
        for (size_t r = 0; r < rows; r++) {
            size_t i = r * cols + c;
            double g = dy[i] * gamma[c], xhat = (x[i] - m) * s;
            d_beta[c] += dy[i];
            d_gamma[c] += dy[i] * xhat;
            dx[i] = s * (g - mean_g - xhat * mean_gx);
        }
    }
}

void ref_gemm(bool ta, bool tb, size_t M, size_t N, size_t K, const double *a, const double *b,
              const double *bias, double *c) {
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double s = bias ? bias[j] : 0;
            for (size_t k = 0; k < K; k++)
                s += (ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
            c[i * N + j] = s;
        }
}
