/* Tensors: round trips through the device in each dtype, f16 rounding on
 * upload, shape and dtype errors, the allocation limit and accounting. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpcl/ops.h"
#include "testutil.h"

static const size_t shapes[][2] = {{1, 1}, {7, 33}, {33, 7}, {130, 10}, {128, 784}};

static void f32_round_trip_is_exact(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng r = tu_rng_make(1);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t n = shapes[s][0] * shapes[s][1];
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        tu_fill_uniform(&r, x, n, -1e5f, 1e5f);
        for (size_t i = 0; i < n; i++) y[i] = tu_poison_f32();
        mpcl_tensor *t = NULL;
        TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, shapes[s][0], shapes[s][1], &t));
        assert_int_equal(mpcl_tensor_count(t), n);
        assert_int_equal(mpcl_tensor_bytes(t), 4 * n);
        TU_ASSERT_OK(mpcl_tensor_upload_f32(t, x, n));
        TU_ASSERT_OK(mpcl_tensor_download_f32(t, y, n));
        assert_memory_equal(x, y, n * sizeof *x);
        mpcl_tensor_destroy(t);
        free(x);
        free(y);
    }
    mpcl_context_destroy(ctx);
}

static void f16_upload_rounds_like_ieee(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const float edge[] = {65504.0f,  -65504.0f,    65520.0f,       1e6f,  0x1p-24f,
                          0x1p-25f,  0x1.ffcp-15f, 1.00048828125f, -0.0f, INFINITY,
                          -INFINITY, NAN,          0.1f,           3.0f};
    const size_t n = sizeof edge / sizeof edge[0];
    mpcl_tensor *t = NULL;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F16, 2, n / 2, &t));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(t, edge, n));
    uint16_t bits[sizeof edge / sizeof edge[0]];
    TU_ASSERT_OK(mpcl_tensor_download_raw(t, bits, sizeof bits));
    float back[sizeof edge / sizeof edge[0]];
    TU_ASSERT_OK(mpcl_tensor_download_f32(t, back, n));
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(bits[i], mpcl_f32_to_f16(edge[i]));
        if (isnan(edge[i]))
            assert_true(isnan(back[i]));
        else
            assert_true(back[i] == mpcl_f16_to_f32(mpcl_f32_to_f16(edge[i])));
    }
    assert_int_equal(bits[2], 0x7c00); /* 65520 overflows to inf */
    mpcl_tensor_destroy(t);
    mpcl_context_destroy(ctx);
}

static void i32_round_trip_and_fill(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    int32_t x[21], y[21];
    for (int i = 0; i < 21; i++) x[i] = (i - 10) * 123457;
    mpcl_tensor *t = NULL;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_I32, 21, 1, &t));
    TU_ASSERT_OK(mpcl_tensor_upload_i32(t, x, 21));
    TU_ASSERT_OK(mpcl_tensor_download_i32(t, y, 21));
    assert_memory_equal(x, y, sizeof x);
    assert_int_equal(mpcl_tensor_fill(t, 1.0f), MPCL_ERR_DTYPE);
    mpcl_tensor_destroy(t);

    mpcl_tensor *h = NULL;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F16, 3, 3, &h));
    TU_ASSERT_OK(mpcl_tensor_fill(h, 70000.0f)); /* overflows to inf on the device's store */
    uint16_t bits[9];
    TU_ASSERT_OK(mpcl_tensor_download_raw(h, bits, sizeof bits));
    for (int i = 0; i < 9; i++) assert_int_equal(bits[i], 0x7c00);
    TU_ASSERT_OK(mpcl_tensor_fill(h, -65504.0f));
    TU_ASSERT_OK(mpcl_tensor_download_raw(h, bits, sizeof bits));
    for (int i = 0; i < 9; i++) assert_int_equal(bits[i], 0xfbff);
    mpcl_tensor_destroy(h);
    mpcl_context_destroy(ctx);
}

static void new_tensors_are_zero(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_tensor *t = NULL;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 5, 7, &t));
    float y[35];
    TU_ASSERT_OK(mpcl_tensor_download_f32(t, y, 35));
    for (int i = 0; i < 35; i++) assert_true(y[i] == 0.0f && !signbit(y[i]));
    mpcl_tensor_destroy(t);
    mpcl_context_destroy(ctx);
}

static void shape_and_dtype_errors_touch_nothing(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_tensor *t = NULL, *bad = (mpcl_tensor *)0x1;
    assert_int_equal(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 0, 4, &bad), MPCL_ERR_SHAPE);
    assert_null(bad);
    assert_int_equal(mpcl_tensor_create(ctx, MPCL_DTYPE_COUNT, 1, 4, &bad), MPCL_ERR_DTYPE);
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 2, 3, &t));
    float six[6] = {1, 2, 3, 4, 5, 6}, seven[7] = {0}, got[6];
    TU_ASSERT_OK(mpcl_tensor_upload_f32(t, six, 6));
    assert_int_equal(mpcl_tensor_upload_f32(t, seven, 7), MPCL_ERR_SHAPE);
    assert_non_null(strstr(mpcl_context_errmsg(ctx), "7 elements into a 2x3 tensor"));
    int32_t ints[6] = {0};
    assert_int_equal(mpcl_tensor_upload_i32(t, ints, 6), MPCL_ERR_DTYPE);
    assert_int_equal(mpcl_tensor_upload_raw(t, six, 5 * sizeof(float)), MPCL_ERR_SHAPE);
    TU_ASSERT_OK(mpcl_tensor_download_f32(t, got, 6));
    assert_memory_equal(got, six, sizeof six); /* the failed uploads wrote nothing */
    mpcl_tensor_destroy(t);
    mpcl_context_destroy(ctx);
}

static void over_the_allocation_limit_fails_before_opencl(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    uint64_t max = mpcl_context_device(ctx)->max_alloc_bytes;
    size_t before = mpcl_context_bytes_now(ctx);
    mpcl_tensor *t = (mpcl_tensor *)0x1;
    assert_int_equal(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, (size_t)(max / 4096) + 1, 1024, &t),
                     MPCL_ERR_OUT_OF_MEMORY);
    assert_null(t);
    assert_non_null(strstr(mpcl_context_errmsg(ctx), "maximum allocation"));
    assert_int_equal(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, SIZE_MAX / 2, 4, &t),
                     MPCL_ERR_OUT_OF_MEMORY); /* the byte count itself overflows */
    assert_int_equal(mpcl_context_bytes_now(ctx), before);
    mpcl_context_destroy(ctx);
}

static void accounting_tracks_now_and_peak(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    size_t base = mpcl_context_bytes_now(ctx);
    mpcl_tensor *a = NULL, *b = NULL;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 10, 10, &a));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F16, 10, 10, &b));
    assert_int_equal(mpcl_context_bytes_now(ctx), base + 400 + 200);
    mpcl_tensor_destroy(a);
    assert_int_equal(mpcl_context_bytes_now(ctx), base + 200);
    assert_true(mpcl_context_bytes_peak(ctx) >= base + 600);
    mpcl_tensor_destroy(b);
    mpcl_tensor_destroy(NULL);
    assert_int_equal(mpcl_context_bytes_now(ctx), base);
    mpcl_context_destroy(ctx);
}

/* The device's f16 store (common.cl's STORE_HALF, used by every kernel that
 * writes f16) against the host's conversion, bit for bit: every half value,
 * the float just below, at and just above each rounding midpoint between
 * neighbours (ties to even), and random bit patterns. */
static void f16_store_rounds_every_midpoint_like_the_host(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const size_t per = 5, n = 65536 * per, extra = tu_slow_device(ctx) ? 4096 : 1 << 20;
    float *src = malloc((n + extra) * sizeof *src);
    uint16_t *got = malloc((n + extra) * sizeof *got);
    size_t k = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float v = mpcl_f16_to_f32((uint16_t)h), next = mpcl_f16_to_f32((uint16_t)(h + 1));
        if ((h & 0x7fff) >= 0x7bff) next = copysignf(65520.0f, v); /* overflow midpoint */
        float mid = (float)(((double)v + (double)next) / 2);       /* exact: halves are narrow */
        src[k++] = v;
        src[k++] = mid;
        src[k++] = nextafterf(mid, 0.0f);
        src[k++] = nextafterf(mid, copysignf(INFINITY, v));
        src[k++] = nextafterf(v, 0.0f);
    }
    tu_rng r = tu_rng_make(99);
    for (size_t i = 0; i < extra; i++) {
        uint32_t bits = (uint32_t)tu_uniform(&r, 0, 4294967296.0);
        memcpy(&src[k++], &bits, sizeof bits);
    }
    mpcl_tensor *a = NULL, *h = NULL;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, k, 1, &a));
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F16, k, 1, &h));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(a, src, k));
    TU_ASSERT_OK(mpcl_cast(ctx, h, a));
    TU_ASSERT_OK(mpcl_tensor_download_raw(h, got, k * sizeof *got));
    size_t bad = 0;
    for (size_t i = 0; i < k; i++) {
        uint16_t want = mpcl_f32_to_f16(src[i]);
        bool nan = (want & 0x7c00) == 0x7c00 && (want & 0x3ff);
        bool ok = nan ? ((got[i] & 0x7c00) == 0x7c00 && (got[i] & 0x3ff)) : got[i] == want;
        if (!ok && bad++ < 5)
            fprintf(stderr, "%a: device 0x%04x, host 0x%04x\n", (double)src[i], got[i], want);
    }
    assert_int_equal(bad, 0);
    mpcl_tensor_destroy(a);
    mpcl_tensor_destroy(h);
    free(src);
    free(got);
    (void)n;
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(f32_round_trip_is_exact),
        cmocka_unit_test(f16_upload_rounds_like_ieee),
        cmocka_unit_test(f16_store_rounds_every_midpoint_like_the_host),
        cmocka_unit_test(i32_round_trip_and_fill),
        cmocka_unit_test(new_tensors_are_zero),
        cmocka_unit_test(shape_and_dtype_errors_touch_nothing),
        cmocka_unit_test(over_the_allocation_limit_fails_before_opencl),
        cmocka_unit_test(accounting_tracks_now_and_peak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
