/* Tensors: round trips through the device in each dtype, f16 and bf16
 * rounding on upload and in the device's stores, shape and dtype errors, the
 * allocation limit and accounting. */
#include <float.h>
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

static float f32_of(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* bf16 values whose rounding is worked out by hand: x, its bf16 bits, and the
 * float those bits hold. Used for the upload, the download and the fill. */
static const struct {
    float x;
    uint16_t bits;
    float back;
} bf16_cases[] = {
    {1.0f, 0x3f80, 1.0f},
    {1.00390625f, 0x3f80, 1.0f},           /* 1 + 2^-8: tie, to even (down) */
    {1.01171875f, 0x3f82, 1.015625f},      /* 1 + 3 * 2^-8: tie, to even (up) */
    {-1.01171875f, 0xbf82, -1.015625f},    /* the same with the sign */
    {0.1f, 0x3dcd, 0.10009765625f},        /* 0x3dcccccd: above half, up */
    {-2.5f, 0xc020, -2.5f},                /* exact */
    {65504.0f, 0x4780, 65536.0f},          /* 0x477fe000 rounds up a binade */
    {0x1.ffp127f, 0x7f80, INFINITY},       /* the tie above the largest bf16: inf */
    {FLT_MAX, 0x7f80, INFINITY},           /* overflow */
    {-INFINITY, 0xff80, -INFINITY},        /* inf stays inf */
    {0x1p-133f, 0x0001, 0x1p-133f},        /* the smallest bf16 subnormal */
    {0x1p-134f, 0x0000, 0.0f},             /* tie between 0 and it: to even, 0 */
    {-0x1.8p-134f, 0x8001, -0x1p-133f},    /* above the tie, negative */
    {-0.0f, 0x8000, -0.0f},                /* the sign of zero is kept */
    {0x1.fffffcp-127f, 0x0080, 0x1p-126f}, /* an f32 subnormal rounds up to 2^-126 */
    {0x1.fep127f, 0x7f7f, 0x1.fep127f},    /* the largest bf16 */
};

static void bf16_upload_download_and_fill(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const size_t n = sizeof bf16_cases / sizeof bf16_cases[0];
    float x[sizeof bf16_cases / sizeof bf16_cases[0]], back[sizeof x / sizeof x[0]];
    uint16_t bits[sizeof x / sizeof x[0]];
    for (size_t i = 0; i < n; i++) x[i] = bf16_cases[i].x;
    mpcl_tensor *t = tu_tensor(ctx, MPCL_DTYPE_BF16, 2, n / 2);
    assert_int_equal(mpcl_tensor_bytes(t), 2 * n);
    TU_ASSERT_OK(mpcl_tensor_upload_f32(t, x, n));
    TU_ASSERT_OK(mpcl_tensor_download_raw(t, bits, sizeof bits));
    TU_ASSERT_OK(mpcl_tensor_download_f32(t, back, n));
    for (size_t i = 0; i < n; i++) {
        if (bits[i] != bf16_cases[i].bits)
            fail_msg("upload %a: 0x%04x, want 0x%04x", (double)x[i], bits[i], bf16_cases[i].bits);
        if (memcmp(&back[i], &bf16_cases[i].back, sizeof back[i]) != 0)
            fail_msg("download of 0x%04x: %a, want %a", bits[i], (double)back[i],
                     (double)bf16_cases[i].back);
    }
    /* NaN uploads as the quiet NaN with its sign, and downloads as NaN. */
    float nans[2] = {NAN, -NAN};
    mpcl_tensor *tn = tu_tensor(ctx, MPCL_DTYPE_BF16, 1, 2);
    TU_ASSERT_OK(mpcl_tensor_upload_f32(tn, nans, 2));
    uint16_t nb[2];
    TU_ASSERT_OK(mpcl_tensor_download_raw(tn, nb, sizeof nb));
    assert_int_equal(nb[0], 0x7fc0);
    assert_int_equal(nb[1], 0xffc0);
    TU_ASSERT_OK(mpcl_tensor_download_f32(tn, nans, 2));
    assert_true(isnan(nans[0]) && isnan(nans[1]));
    mpcl_tensor_destroy(tn);

    /* The fill rounds on the device, to the same bits. */
    mpcl_tensor *f = tu_tensor(ctx, MPCL_DTYPE_BF16, 3, 5);
    uint16_t got[15];
    for (size_t i = 0; i < n; i++) {
        tu_poison(f);
        TU_ASSERT_OK(mpcl_tensor_fill(f, bf16_cases[i].x));
        TU_ASSERT_OK(mpcl_tensor_download_raw(f, got, sizeof got));
        for (int j = 0; j < 15; j++)
            if (got[j] != bf16_cases[i].bits)
                fail_msg("fill %a: element %d 0x%04x, want 0x%04x", (double)bf16_cases[i].x, j,
                         got[j], bf16_cases[i].bits);
    }
    TU_ASSERT_OK(mpcl_tensor_fill(f, -NAN));
    TU_ASSERT_OK(mpcl_tensor_download_raw(f, got, sizeof got));
    for (int j = 0; j < 15; j++) assert_int_equal(got[j], 0xffc0);
    mpcl_tensor_destroy(f);
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
    mpcl_tensor *c = tu_tensor(ctx, MPCL_DTYPE_BF16, 5, 10);
    assert_int_equal(mpcl_context_bytes_now(ctx), base + 400 + 200 + 100);
    mpcl_tensor_destroy(a);
    mpcl_tensor_destroy(c);
    assert_int_equal(mpcl_context_bytes_now(ctx), base + 200);
    assert_true(mpcl_context_bytes_peak(ctx) >= base + 700);
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

/* The device's bf16 store and load (common.cl's STORE_BF16 and LOAD_BF16,
 * used by every kernel on bf16 tensors) through the casts, bit for bit: for
 * every finite bf16 value, itself, the float just toward zero from it, and
 * the float just below, at and just above its upper midpoint (inf above the
 * largest), with the expected bits from the neighbours (ties to the even
 * one); NaN, inf and random bit patterns against the host conversion, which
 * test_half checks against an independent reference. Then every bf16 pattern
 * loaded back as f32: exactly bits << 16. */
static void bf16_store_and_load_match_bit_for_bit(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const size_t extra = tu_slow_device(ctx) ? 4096 : 1 << 20, cap = 65536 * 5 + extra + 8;
    float *src = malloc(cap * sizeof *src);
    uint16_t *want = malloc(cap * sizeof *want), *got = malloc(cap * sizeof *got);
    size_t k = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7fff) >= 0x7f80) continue; /* inf and NaN: below */
        uint16_t lo = (uint16_t)h, hi = (uint16_t)(h + 1);
        float v = mpcl_bf16_to_f32(lo);
        double next =
            (h & 0x7fff) == 0x7f7f ? copysign(0x1p128, (double)v) : (double)mpcl_bf16_to_f32(hi);
        float mid = (float)(((double)v + next) / 2); /* exact: 9 significant bits */
        uint16_t even = (lo & 1) ? hi : lo;
        /* One f32 ulp toward zero from v is far inside v's rounding interval
         * (f32 has 16 more bits), so it rounds to v; zeros stay themselves. */
        float xs[5] = {v, v == 0.0f ? v : nextafterf(v, 0.0f), nextafterf(mid, 0.0f), mid,
                       nextafterf(mid, copysignf(INFINITY, v))};
        uint16_t ws[5] = {lo, lo, lo, even, hi};
        for (int i = 0; i < 5; i++) {
            src[k] = xs[i];
            want[k++] = ws[i];
        }
    }
    const uint32_t special[] = {0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
                                0x7f800001, 0xff80ffff, 0x7fffffff, 0x7f7fffff};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++, k++) {
        src[k] = f32_of(special[i]);
        want[k] = mpcl_f32_to_bf16(src[k]);
    }
    tu_rng r = tu_rng_make(0xbf16);
    for (size_t i = 0; i < extra; i++, k++) {
        src[k] = f32_of((uint32_t)tu_uniform(&r, 0, 4294967296.0));
        want[k] = mpcl_f32_to_bf16(src[k]);
    }
    mpcl_tensor *a = tu_tensor(ctx, MPCL_DTYPE_F32, k, 1);
    mpcl_tensor *b = tu_tensor(ctx, MPCL_DTYPE_BF16, k, 1);
    tu_poison(b);
    TU_ASSERT_OK(mpcl_tensor_upload_raw(a, src, k * sizeof *src));
    TU_ASSERT_OK(mpcl_cast(ctx, b, a));
    TU_ASSERT_OK(mpcl_tensor_download_raw(b, got, k * sizeof *got));
    size_t bad = 0;
    for (size_t i = 0; i < k; i++) {
        if (got[i] != want[i] && bad++ < 5)
            fprintf(stderr, "%a: device 0x%04x, want 0x%04x\n", (double)src[i], got[i], want[i]);
    }
    if (bad) fail_msg("%zu of %zu bf16 stores differ", bad, k);
    mpcl_tensor_destroy(a);
    mpcl_tensor_destroy(b);

    uint16_t *all = malloc(65536 * sizeof *all);
    uint32_t *loaded = malloc(65536 * sizeof *loaded);
    for (uint32_t h = 0; h < 65536; h++) all[h] = (uint16_t)h;
    b = tu_tensor(ctx, MPCL_DTYPE_BF16, 256, 256);
    a = tu_tensor(ctx, MPCL_DTYPE_F32, 256, 256);
    tu_poison(a);
    TU_ASSERT_OK(mpcl_tensor_upload_raw(b, all, 65536 * sizeof *all));
    TU_ASSERT_OK(mpcl_cast(ctx, a, b));
    TU_ASSERT_OK(mpcl_tensor_download_raw(a, loaded, 65536 * sizeof *loaded));
    for (uint32_t h = 0; h < 65536; h++)
        if (loaded[h] != h << 16)
            fail_msg("load of 0x%04x: 0x%08x, want 0x%08x", h, loaded[h], h << 16);
    mpcl_tensor_destroy(a);
    mpcl_tensor_destroy(b);
    free(all);
    free(loaded);
    free(src);
    free(want);
    free(got);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(f32_round_trip_is_exact),
        cmocka_unit_test(f16_upload_rounds_like_ieee),
        cmocka_unit_test(f16_store_rounds_every_midpoint_like_the_host),
        cmocka_unit_test(bf16_upload_download_and_fill),
        cmocka_unit_test(bf16_store_and_load_match_bit_for_bit),
        cmocka_unit_test(i32_round_trip_and_fill),
        cmocka_unit_test(new_tensors_are_zero),
        cmocka_unit_test(shape_and_dtype_errors_touch_nothing),
        cmocka_unit_test(over_the_allocation_limit_fails_before_opencl),
        cmocka_unit_test(accounting_tracks_now_and_peak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
