/* Dropout (include/mpcl/dropout.h) against the double reference of
 * ref_ops.c, whose keep rule is written from the header's text and anchored
 * to splitmix64's published outputs: the host's mpcl_dropout_keep, the
 * forward and the backward in every storage dtype on odd shapes, one mask
 * for both passes, the same mask for the same seed and counter and another
 * for another counter, the kept fraction, rate 0 as an exact copy, aliasing,
 * poisoned outputs fully written, and the argument errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "testutil.h"

static const mpcl_dtype dtypes[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};
static const size_t shapes[][2] = {{1, 1}, {3, 7}, {1000, 33}, {1, 33}};

/* x[i] = random values in [lo, hi] as stored in dtype (never 0, so that a
 * dropped element is told from a kept one by its value). */
static float *random_nonzero(tu_rng *r, mpcl_dtype dt, size_t n) {
    float *x = malloc(n * sizeof *x);
    tu_fill_uniform(r, x, n, 0.25f, 4.0f);
    for (size_t i = 0; i < n; i++) x[i] = tu_stored(dt, (i % 2 ? -1 : 1) * x[i]);
    return x;
}

/* Fails unless got (as floats) matches ref_dropout of `in` within one f32
 * rounding of the scale and of the product, plus the storage's rounding; a
 * dropped element must be exactly 0 and a kept one nonzero. */
static void check_dropout(const char *what, mpcl_dtype dt, const float *got, const float *in,
                          size_t n, float rate, uint64_t seed, uint64_t counter) {
    double *d_in = tu_to_double(in, n), *want = malloc(n * sizeof *want);
    ref_dropout(want, d_in, n, rate, seed, counter);
    for (size_t i = 0; i < n; i++)
        if ((want[i] == 0) != (got[i] == 0))
            fail_msg("%s: element %zu is %g, want %g (the mask differs)", what, i, (double)got[i],
                     want[i]);
    tu_rounding r = tu_storage_rounding(dt);
    double rtol = 3e-7 + r.rel;
    assert_true(tu_check_close(what, got, want, n, r.abs, rtol, tu_norm_tol(r.abs, rtol, want, n)));
    free(d_in);
    free(want);
}

static void test_keep_rule(void **state) {
    (void)state;
    /* seed 0, counter 0: key = mix64(0) = 0, so the hashes of indices 0, 1, 2
     * are splitmix64's first outputs from state 0 (its published vectors). */
    assert_true(ref_dropout_hash(0, 0, 0) == 0xe220a8397b1dcdafu);
    assert_true(ref_dropout_hash(0, 0, 1) == 0x6e789e6aa1b965f4u);
    assert_true(ref_dropout_hash(0, 0, 2) == 0x06c45d188009454fu);
    /* 0xe220a8 / 2^24 = 0.88331...: kept below that rate, dropped above. */
    assert_true(mpcl_dropout_keep(0, 0, 0, 0.8833f));
    assert_false(mpcl_dropout_keep(0, 0, 0, 0.8834f));
    tu_rng rng = tu_rng_make(tu_seed("test_keep_rule"));
    for (int i = 0; i < 20000; i++) {
        uint64_t seed = rng.s * 3, counter = (uint64_t)tu_uniform(&rng, 0, 1e9);
        uint64_t index = (uint64_t)tu_uniform(&rng, 0, 4e9);
        float rate = (float)tu_uniform(&rng, 0, 1);
        if (mpcl_dropout_keep(seed, counter, index, rate) !=
            (bool)ref_dropout_keep(seed, counter, index, rate))
            fail_msg("keep(%llu, %llu, %llu, %g) differs from the reference",
                     (unsigned long long)seed, (unsigned long long)counter,
                     (unsigned long long)index, (double)rate);
    }
    /* rate 0 keeps everything. */
    for (uint64_t i = 0; i < 1000; i++) assert_true(mpcl_dropout_keep(7, 8, i, 0.0f));
}

/* Forward and backward on one shape: the reference's values, the same mask
 * in both, every element written. */
static void check_shape(mpcl_context *ctx, tu_rng *rng, mpcl_dtype dt, size_t rows, size_t cols) {
    size_t n = rows * cols;
    const float rate = 0.3f;
    const uint64_t seed = 0x5eed + rows, counter = 41 + cols;
    float *x = random_nonzero(rng, dt, n), *g = random_nonzero(rng, dt, n);
    mpcl_tensor *in = tu_tensor_from(ctx, dt, rows, cols, x);
    mpcl_tensor *d_out = tu_tensor_from(ctx, dt, rows, cols, g);
    mpcl_tensor *out = tu_tensor_poisoned(ctx, dt, rows, cols);
    mpcl_tensor *d_in = tu_tensor_poisoned(ctx, dt, rows, cols);
    TU_ASSERT_OK(mpcl_dropout_forward(ctx, rate, seed, counter, out, in));
    TU_ASSERT_OK(mpcl_dropout_backward(ctx, rate, seed, counter, d_in, d_out));
    float *y = tu_download(out), *dx = tu_download(d_in);
    char what[96];
    snprintf(what, sizeof what, "%s %zux%zu forward", mpcl_dtype_name(dt), rows, cols);
    check_dropout(what, dt, y, x, n, rate, seed, counter);
    snprintf(what, sizeof what, "%s %zux%zu backward", mpcl_dtype_name(dt), rows, cols);
    check_dropout(what, dt, dx, g, n, rate, seed, counter);
    for (size_t i = 0; i < n; i++)
        if ((y[i] == 0) != (dx[i] == 0)) fail_msg("%s: masks differ at %zu", what, i);
    free(x);
    free(g);
    free(y);
    free(dx);
    mpcl_tensor *all[] = {in, d_out, out, d_in};
    for (size_t i = 0; i < 4; i++) mpcl_tensor_destroy(all[i]);
}

static void test_forward_backward(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("test_forward_backward"));
    for (size_t d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            check_shape(ctx, &rng, dtypes[d], shapes[s][0], shapes[s][1]);
    mpcl_context_destroy(ctx);
}

/* out may be in, d_in may be d_out: the same values as separate tensors. */
static void test_alias(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("test_alias"));
    for (size_t d = 0; d < 3; d++) {
        mpcl_dtype dt = dtypes[d];
        const size_t rows = 5, cols = 13, n = rows * cols;
        float *x = random_nonzero(&rng, dt, n);
        mpcl_tensor *t = tu_tensor_from(ctx, dt, rows, cols, x);
        TU_ASSERT_OK(mpcl_dropout_forward(ctx, 0.5f, 3, 4, t, t));
        float *y = tu_download(t);
        check_dropout("forward in place", dt, y, x, n, 0.5f, 3, 4);
        TU_ASSERT_OK(mpcl_tensor_upload_f32(t, x, n));
        TU_ASSERT_OK(mpcl_dropout_backward(ctx, 0.5f, 3, 4, t, t));
        free(y);
        y = tu_download(t);
        check_dropout("backward in place", dt, y, x, n, 0.5f, 3, 4);
        free(x);
        free(y);
        mpcl_tensor_destroy(t);
    }
    mpcl_context_destroy(ctx);
}

/* The positions where two masks differ. */
static size_t mask_differences(const float *a, const float *b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += (a[i] == 0) != (b[i] == 0);
    return d;
}

/* The same seed and counter give the same bits; another counter or seed
 * another mask (half the elements differ at rate 0.5); the kept fraction is
 * 1 - rate within 5 standard deviations. */
static void test_masks(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const size_t rows = tu_slow_device(ctx) ? 64 : 512, cols = 1000, n = rows * cols;
    float *ones = malloc(n * sizeof *ones);
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    mpcl_tensor *in = tu_tensor_from(ctx, MPCL_DTYPE_F32, rows, cols, ones);
    mpcl_tensor *out = tu_tensor(ctx, MPCL_DTYPE_F32, rows, cols);
    TU_ASSERT_OK(mpcl_dropout_forward(ctx, 0.5f, 11, 1, out, in));
    float *a = tu_download(out);
    TU_ASSERT_OK(mpcl_dropout_forward(ctx, 0.5f, 11, 1, out, in));
    float *same = tu_download(out);
    assert_memory_equal(a, same, n * sizeof *a);
    TU_ASSERT_OK(mpcl_dropout_forward(ctx, 0.5f, 11, 2, out, in));
    float *other_counter = tu_download(out);
    TU_ASSERT_OK(mpcl_dropout_forward(ctx, 0.5f, 12, 1, out, in));
    float *other_seed = tu_download(out);
    const double half = 0.5 * (double)n, spread = 5 * sqrt(0.25 * (double)n);
    assert_true(fabs((double)mask_differences(a, other_counter, n) - half) < spread);
    assert_true(fabs((double)mask_differences(a, other_seed, n) - half) < spread);
    const float rates[] = {0.1f, 0.5f, 0.9f};
    for (size_t r = 0; r < 3; r++) {
        TU_ASSERT_OK(mpcl_dropout_forward(ctx, rates[r], 99, 5, out, in));
        float *y = tu_download(out);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) kept += y[i] != 0;
        double p = 1 - (double)rates[r], sd = sqrt(p * (1 - p) / (double)n);
        double frac = (double)kept / (double)n;
        if (fabs(frac - p) > 5 * sd)
            fail_msg("rate %g: kept %.5f, want %.5f +- %.5f", (double)rates[r], frac, p, 5 * sd);
        free(y);
    }
    free(ones);
    free(a);
    free(same);
    free(other_counter);
    free(other_seed);
    mpcl_tensor_destroy(in);
    mpcl_tensor_destroy(out);
    mpcl_context_destroy(ctx);
}

/* rate 0: every element comes back with its bits, signed zeros, subnormals,
 * the largest finite values, infinities and NaN included. */
static void test_rate_zero_exact(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("test_rate_zero_exact"));
    const size_t rows = 7, cols = 9, n = rows * cols;
    for (size_t d = 0; d < 3; d++) {
        mpcl_dtype dt = dtypes[d];
        float *x = malloc(n * sizeof *x);
        tu_fill_uniform(&rng, x, n, -100, 100);
        const float specials[] = {0.0f,    -0.0f,    1e-40f,    -3e-8f, 65504.0f,
                                  3.0e38f, INFINITY, -INFINITY, NAN};
        memcpy(x, specials, sizeof specials);
        mpcl_tensor *in = tu_tensor_from(ctx, dt, rows, cols, x);
        mpcl_tensor *out = tu_tensor_poisoned(ctx, dt, rows, cols);
        TU_ASSERT_OK(mpcl_dropout_forward(ctx, 0.0f, 1, 2, out, in));
        size_t bytes = mpcl_tensor_bytes(in);
        unsigned char *a = malloc(bytes), *b = malloc(bytes);
        TU_ASSERT_OK(mpcl_tensor_download_raw(in, a, bytes));
        TU_ASSERT_OK(mpcl_tensor_download_raw(out, b, bytes));
        assert_memory_equal(a, b, bytes);
        TU_ASSERT_OK(mpcl_dropout_backward(ctx, 0.0f, 1, 2, out, in));
        TU_ASSERT_OK(mpcl_tensor_download_raw(out, b, bytes));
        assert_memory_equal(a, b, bytes);
        free(a);
        free(b);
        free(x);
        mpcl_tensor_destroy(in);
        mpcl_tensor_destroy(out);
    }
    mpcl_context_destroy(ctx);
}

/* Refused calls name what is wrong and leave the output untouched. */
static void test_errors(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_tensor *in = tu_tensor(ctx, MPCL_DTYPE_F32, 2, 3);
    mpcl_tensor *out = tu_tensor_poisoned(ctx, MPCL_DTYPE_F32, 2, 3);
    mpcl_tensor *wide = tu_tensor(ctx, MPCL_DTYPE_F32, 2, 4);
    mpcl_tensor *half = tu_tensor(ctx, MPCL_DTYPE_F16, 2, 3);
    mpcl_tensor *ints = tu_tensor(ctx, MPCL_DTYPE_I32, 2, 3);
    const float bad_rates[] = {-0.1f, 1.0f, 1.5f, NAN};
    for (size_t i = 0; i < 4; i++)
        tu_expect_error(mpcl_dropout_forward(ctx, bad_rates[i], 1, 1, out, in),
                        MPCL_ERR_INVALID_ARG, "rate");
    tu_expect_error(mpcl_dropout_forward(ctx, 0.5f, 1, 1, out, NULL), MPCL_ERR_INVALID_ARG,
                    "in is NULL");
    tu_expect_error(mpcl_dropout_forward(ctx, 0.5f, 1, 1, wide, in), MPCL_ERR_SHAPE,
                    "out is 2x4, want 2x3");
    tu_expect_error(mpcl_dropout_forward(ctx, 0.5f, 1, 1, out, half), MPCL_ERR_DTYPE,
                    "out is f32, want f16");
    tu_expect_error(mpcl_dropout_backward(ctx, 0.5f, 1, 1, out, ints), MPCL_ERR_DTYPE,
                    "mpcl_dropout_backward: d_out is i32");
    tu_expect_error(mpcl_dropout_backward(ctx, 0.5f, 1, 1, NULL, in), MPCL_ERR_INVALID_ARG,
                    "d_in is NULL");
    assert_true(tu_still_poisoned(out));
    mpcl_tensor *all[] = {in, out, wide, half, ints};
    for (size_t i = 0; i < 5; i++) mpcl_tensor_destroy(all[i]);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_rule),       cmocka_unit_test(test_forward_backward),
        cmocka_unit_test(test_alias),           cmocka_unit_test(test_masks),
        cmocka_unit_test(test_rate_zero_exact), cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
