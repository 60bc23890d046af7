/* mpcl-bench conv: the convolution's two ways on the CNN's layers (batch
 * 128), interleaved: im2col + GEMM against the direct kernels
 * (MPCL_CONV=im2col|direct), forward and backward, per storage dtype on
 * mpcl's GEMM paths. The figure is the best of ROUNDS rounds, each the mean
 * of REPS calls; the ratio is im2col's time over direct's, so above 1 means
 * the direct kernels win. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { ROUNDS = 7, REPS = 5 };

typedef struct conv_case {
    const char *name;
    mpcl_conv2d_shape shape;
    bool d_in; /* a first layer has no input gradient */
} conv_case;

static const conv_case cases[] = {
    {"conv1 28x28x1 -> 32", {128, 28, 28, 1, 3, 3, 32, 1, 1, MPCL_PADDING_VALID}, false},
    {"conv2 13x13x32 -> 64", {128, 13, 13, 32, 3, 3, 64, 1, 1, MPCL_PADDING_VALID}, true},
};

static const struct {
    mpcl_dtype dtype;
    mpcl_gemm_path path;
} variants[] = {
    {MPCL_DTYPE_F32, MPCL_GEMM_MPCL_F32},
    {MPCL_DTYPE_BF16, MPCL_GEMM_MPCL_MIXED},
    {MPCL_DTYPE_F16, MPCL_GEMM_MPCL_MIXED},
};

static const char *const algos[2] = {"im2col", "direct"};

typedef struct conv_tensors {
    mpcl_tensor *in, *w, *out, *columns, *d_in, *d_w;
} conv_tensors;

static void tensors_free(conv_tensors *t) {
    mpcl_tensor *all[] = {t->in, t->w, t->out, t->columns, t->d_in, t->d_w};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mpcl_tensor_destroy(all[i]);
}

static mpcl_status tensors_make(mpcl_context *ctx, mpcl_dtype dt, const mpcl_conv2d_shape *s,
                                conv_tensors *t) {
    mpcl_window2d win;
    size_t rows, patch, img = s->height * s->width * s->channels;
    mpcl_status st = mpcl_conv2d_window(ctx, s, &win);
    if (st != MPCL_OK) return st;
    mpcl_conv2d_columns_shape(s, &win, &rows, &patch);
    memset(t, 0, sizeof *t);
    if ((st = mpcl_tensor_create(ctx, dt, s->batch, img, &t->in)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, dt, patch, s->filters, &t->w)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, dt, s->batch, rows / s->batch * s->filters, &t->out)) !=
            MPCL_OK ||
        (st = mpcl_tensor_create(ctx, dt, rows, patch, &t->columns)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, dt, s->batch, img, &t->d_in)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, dt, patch, s->filters, &t->d_w)) != MPCL_OK)
        return st;
    if ((st = mpcl_tensor_fill(t->in, 0.5f)) != MPCL_OK ||
        (st = mpcl_tensor_fill(t->w, 0.25f)) != MPCL_OK)
        return st;
    return mpcl_tensor_fill(t->out, 0.125f);
}

/* *seconds per call of the forward (pass 0) or backward (pass 1). */
static mpcl_status time_pass(mpcl_context *ctx, mpcl_gemm_path path, const conv_case *c,
                             conv_tensors *t, int pass, double *seconds) {
    mpcl_status st = MPCL_OK;
    double t0 = 0;
    for (int i = 0; i <= REPS && st == MPCL_OK; i++) {
        if (i == 1) { /* the first call is a warm-up */
            if ((st = mpcl_context_finish(ctx)) != MPCL_OK) break;
            t0 = bench_now_s();
        }
        st = pass == 0 ? mpcl_conv2d_forward(ctx, path, &c->shape, t->out, t->in, t->w, t->columns)
                       : mpcl_conv2d_backward(ctx, path, &c->shape, c->d_in ? t->d_in : NULL,
                                              t->d_w, t->out, t->in, t->w, t->columns, false);
    }
    if (st == MPCL_OK) st = mpcl_context_finish(ctx);
    *seconds = (bench_now_s() - t0) / REPS;
    return st;
}

int bench_cmd_conv(mpcl_context *ctx, const bench_opts *opts) {
    FILE *note = opts->json ? stderr : stdout;
    fprintf(note, "device: %s; best of %d rounds of %d calls, the two ways interleaved\n",
            mpcl_context_device(ctx)->name, ROUNDS, REPS);
    jsonw w, *j = opts->json ? &w : NULL;
    if (j) {
        jsonw_init(j, stdout);
        jsonw_array_begin(j);
    }
    if (!opts->json)
        printf("%-22s %-5s %-8s %12s %12s %7s\n", "layer", "dtype", "pass", "im2col us",
               "direct us", "ratio");
    int rc = 0;
    const char *saved = getenv("MPCL_CONV");
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0] && rc == 0; ci++) {
        for (size_t vi = 0; vi < sizeof variants / sizeof variants[0] && rc == 0; vi++) {
            conv_tensors t;
            mpcl_status st = tensors_make(ctx, variants[vi].dtype, &cases[ci].shape, &t);
            if (st != MPCL_OK) {
                tensors_free(&t);
                rc = bench_fail("allocating the convolution's tensors", st);
                break;
            }
            for (int pass = 0; pass < 2; pass++) {
                double best[2] = {INFINITY, INFINITY};
                for (int r = 0; r < ROUNDS; r++) {
                    for (int a = 0; a < 2; a++) {
                        setenv("MPCL_CONV", algos[a], 1);
                        double s = 0;
                        st = time_pass(ctx, variants[vi].path, &cases[ci], &t, pass, &s);
                        if (st != MPCL_OK) {
                            rc = bench_fail(algos[a], st);
                            break;
                        }
                        if (s < best[a]) best[a] = s;
                    }
                }
                const char *dn = mpcl_dtype_name(variants[vi].dtype);
                const char *pn = pass == 0 ? "forward" : "backward";
                if (j) {
                    jsonw_object_begin(j);
                    jsonw_kv_string(j, "layer", cases[ci].name);
                    jsonw_kv_string(j, "dtype", dn);
                    jsonw_kv_string(j, "pass", pn);
                    jsonw_kv_number(j, "im2col_us", best[0] * 1e6);
                    jsonw_kv_number(j, "direct_us", best[1] * 1e6);
                    jsonw_object_end(j);
                } else {
                    printf("%-22s %-5s %-8s %12.1f %12.1f %7.2f\n", cases[ci].name, dn, pn,
                           best[0] * 1e6, best[1] * 1e6, best[0] / best[1]);
                }
            }
            tensors_free(&t);
        }
    }
    if (saved)
        setenv("MPCL_CONV", saved, 1);
    else
        unsetenv("MPCL_CONV");
    if (j) {
        jsonw_array_end(j);
        fputc('\n', stdout);
    }
    return rc;
}
