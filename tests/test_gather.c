/* The device gather of f32 and f16 features, sparse labels and f32 targets
 * against the host's mpcl_dataset_batch / mpcl_dataset_batch_targets, bit
 * for bit, into every float storage dtype (the host value rounded as the
 * host conversion rounds), from a shuffled order at an offset, with rows of
 * 11 features (a block of eight and a tail), into poisoned batches. The u8
 * gather is tested in test_train; here, against the streamed batch of the
 * same u8 data, and the rule that decides which a data set gets. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "mpcl/batch.h"
#include "mpcl/half.h"
#include "testutil.h"

enum { N = 40, F = 11, T = 3, B = 17, FIRST = 9 };

/* want rounded to storage dtype d, as the device stores it. */
static float stored(mpcl_dtype d, float want) {
    if (d == MPCL_DTYPE_F16) return mpcl_f16_to_f32(mpcl_f32_to_f16(want));
    if (d == MPCL_DTYPE_BF16) return mpcl_bf16_to_f32(mpcl_f32_to_bf16(want));
    return want;
}

/* Gathers B rows of ds at FIRST of a shuffled order into each storage dtype
 * and compares x and y (labels or targets) with the host's batch. */
static void check_gather(mpcl_context *ctx, const mpcl_dataset *ds) {
    int32_t order[N];
    uint64_t rng = 11;
    mpcl_iota_indices(order, N);
    mpcl_shuffle_indices(&rng, order, N);
    size_t tc = mpcl_dataset_target_cols(ds), ycols = tc ? tc : 1;
    float want[B * F], got[B * F], want_t[B * T], got_t[B * T];
    int32_t want_l[B], got_l[B];
    TU_ASSERT_OK(mpcl_dataset_batch(ds, order + FIRST, B, want, tc ? NULL : want_l));
    if (tc) TU_ASSERT_OK(mpcl_dataset_batch_targets(ds, order + FIRST, B, want_t));
    mpcl_device_dataset *dd = NULL;
    TU_ASSERT_OK(mpcl_device_dataset_create(ctx, ds, &dd));
    assert_int_equal(mpcl_device_dataset_target_cols(dd), tc);
    mpcl_tensor *ord = tu_tensor(ctx, MPCL_DTYPE_I32, N, 1);
    TU_ASSERT_OK(mpcl_tensor_upload_i32(ord, order, N));
    mpcl_tensor *y = tu_tensor(ctx, tc ? MPCL_DTYPE_F32 : MPCL_DTYPE_I32, B, ycols);
    const mpcl_dtype dtypes[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};
    for (int d = 0; d < 3; d++) {
        mpcl_tensor *x = tu_tensor(ctx, dtypes[d], B, F);
        tu_poison(x);
        tu_poison(y);
        TU_ASSERT_OK(mpcl_device_dataset_gather(ctx, dd, ord, FIRST, x, y));
        TU_ASSERT_OK(mpcl_tensor_download_f32(x, got, B * F));
        for (size_t i = 0; i < B * F; i++) {
            float w = stored(dtypes[d], want[i]);
            if (memcmp(&w, &got[i], sizeof w) != 0)
                fail_msg("%s x from %s: x[%zu] = %a, host %a", mpcl_dtype_name(dtypes[d]),
                         mpcl_npy_dtype_name(mpcl_dataset_x_dtype(ds)), i, (double)got[i],
                         (double)w);
        }
        if (tc) {
            TU_ASSERT_OK(mpcl_tensor_download_f32(y, got_t, B * tc));
            assert_memory_equal(got_t, want_t, B * tc * sizeof *got_t);
        } else {
            TU_ASSERT_OK(mpcl_tensor_download_i32(y, got_l, B));
            assert_memory_equal(got_l, want_l, sizeof got_l);
        }
        mpcl_tensor_destroy(x);
    }
    /* y of the other kind is refused. */
    mpcl_tensor *x = tu_tensor(ctx, MPCL_DTYPE_F32, B, F);
    mpcl_tensor *wrong = tu_tensor(ctx, tc ? MPCL_DTYPE_I32 : MPCL_DTYPE_F32, B, ycols);
    TU_EXPECT_STATUS(MPCL_ERR_DTYPE, mpcl_device_dataset_gather(ctx, dd, ord, FIRST, x, wrong));
    mpcl_tensor_destroy(wrong);
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
    mpcl_tensor_destroy(ord);
    mpcl_device_dataset_destroy(dd);
}

static void gather_f32_f16_labels_and_targets(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    float x[N * F], t[N * T];
    uint16_t h[N * F];
    uint8_t labels[N];
    uint64_t rng = 3;
    for (size_t i = 0; i < N * F; i++) {
        /* Values that round differently in f16 and bf16. */
        x[i] = (float)(mpcl_rng_next(&rng) % 100000) / 997.0f - 40.0f;
        h[i] = mpcl_f32_to_f16(x[i]);
    }
    for (size_t i = 0; i < N * T; i++) t[i] = (float)i / 7.0f;
    for (size_t i = 0; i < N; i++) labels[i] = (uint8_t)(i % 5);
    size_t xs[2] = {N, F}, ls[1] = {N}, ts[2] = {N, T};
    mpcl_array_view xf = {x, MPCL_NPY_F4, 2, xs}, xh = {h, MPCL_NPY_F2, 2, xs};
    mpcl_array_view yl = {labels, MPCL_NPY_U1, 1, ls}, yt = {t, MPCL_NPY_F4, 2, ts};
    mpcl_npy_data_params dense = mpcl_npy_data_default_params();
    dense.float_targets = true;
    const mpcl_array_view *xv[2] = {&xf, &xh};
    for (int k = 0; k < 2; k++)
        for (int dense_y = 0; dense_y < 2; dense_y++) {
            mpcl_dataset *ds = NULL;
            TU_ASSERT_OK(
                mpcl_dataset_from_arrays(xv[k], dense_y ? &yt : &yl, dense_y ? &dense : NULL, &ds));
            check_gather(ctx, ds);
            mpcl_dataset_destroy(ds);
        }
    mpcl_context_destroy(ctx);
}

/* Data larger than the device's largest allocation are refused with the
 * figures before anything is read or allocated: the data set here only
 * claims its size (its buffers are one byte each). */
static void data_beyond_the_device_refused(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    uint64_t max_alloc = mpcl_context_device(ctx)->max_alloc_bytes;
    static mpcl_dataset ds; /* 8 KiB of paths: not on the stack */
    uint8_t byte = 0;
    size_t shape[1] = {1024};
    mpcl__dataset_set_shape(&ds, (size_t)(max_alloc / 4096 + 1), MPCL_NPY_F4, 1, shape);
    ds.x = &byte;
    ds.labels = &byte;
    ds.num_classes = 1;
    mpcl_device_dataset *dd = (mpcl_device_dataset *)&dd;
    size_t before = mpcl_context_bytes_peak(ctx);
    TU_EXPECT_STATUS(MPCL_ERR_OUT_OF_MEMORY, mpcl_device_dataset_create(ctx, &ds, &dd));
    assert_null(dd);
    assert_int_equal(mpcl_context_bytes_peak(ctx), before);
    char want[64];
    snprintf(want, sizeof want, "largest allocation is %llu bytes", (unsigned long long)max_alloc);
    if (!strstr(mpcl_errmsg(), want) || !strstr(mpcl_errmsg(), "f4 features"))
        fail_msg("the message gives the sizes: %s", mpcl_errmsg());
    mpcl_context_destroy(ctx);
}

/* MPCL_DATA_AUTO's rule: each buffer within the largest allocation, both
 * within the global memory less what the context holds, to the byte. */
static void fit_rule(void **state) {
    (void)state;
    mpcl_device_info dev;
    memset(&dev, 0, sizeof dev);
    dev.max_alloc_bytes = 1000;
    dev.global_mem_bytes = 3000;
    assert_true(mpcl__data_fits(&dev, 0, 1000, 1000));
    assert_false(mpcl__data_fits(&dev, 0, 1001, 10));
    assert_false(mpcl__data_fits(&dev, 0, 10, 1001));
    assert_true(mpcl__data_fits(&dev, 1000, 1000, 1000));
    assert_false(mpcl__data_fits(&dev, 1001, 1000, 1000));
    assert_false(mpcl__data_fits(&dev, 5000, 1, 1));
}

/* A small data set placed `auto` is held on the device; one placed
 * `stream` gives the device's batch bit for bit through
 * mpcl_device_dataset_batch, and mpcl_device_dataset_gather, which has no
 * host order, refuses it. */
static void streamed_batch_matches_device(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    uint8_t pixels[N * F], labels[N];
    uint64_t rng = 5;
    for (size_t i = 0; i < N * F; i++) pixels[i] = (uint8_t)(mpcl_rng_next(&rng) >> 56);
    for (size_t i = 0; i < N; i++) labels[i] = (uint8_t)(i % 3);
    mpcl_dataset *ds = NULL;
    TU_ASSERT_OK(mpcl_dataset_from_memory(pixels, labels, N, 1, F, 3, &ds));
    int32_t order[N];
    mpcl_iota_indices(order, N);
    mpcl_shuffle_indices(&rng, order, N);
    mpcl_device_dataset *held = NULL, *streamed = NULL;
    TU_ASSERT_OK(mpcl_device_dataset_place(ctx, ds, MPCL_DATA_AUTO, &held));
    TU_ASSERT_OK(mpcl_device_dataset_place(ctx, ds, MPCL_DATA_STREAM, &streamed));
    mpcl_dataset_destroy(ds); /* the streamed one keeps its own copy */
    assert_false(mpcl_device_dataset_streamed(held));
    assert_true(mpcl_device_dataset_streamed(streamed));
    assert_int_equal(mpcl_device_dataset_count(streamed), N);
    assert_int_equal(mpcl_device_dataset_features(streamed), F);
    mpcl_tensor *ord = tu_tensor(ctx, MPCL_DTYPE_I32, N, 1);
    TU_ASSERT_OK(mpcl_tensor_upload_i32(ord, order, N));
    mpcl_tensor *y = tu_tensor(ctx, MPCL_DTYPE_I32, B, 1);
    const mpcl_dtype dtypes[] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16};
    for (int d = 0; d < 3; d++) {
        mpcl_tensor *x = tu_tensor(ctx, dtypes[d], B, F);
        uint16_t want[B * F * 2], got[B * F * 2];
        int32_t want_l[B], got_l[B];
        size_t bytes = mpcl_tensor_bytes(x);
        TU_ASSERT_OK(mpcl_device_dataset_batch(ctx, held, ord, NULL, FIRST, x, y));
        TU_ASSERT_OK(mpcl_tensor_download_raw(x, want, bytes));
        TU_ASSERT_OK(mpcl_tensor_download_i32(y, want_l, B));
        tu_poison(x);
        tu_poison(y);
        TU_ASSERT_OK(mpcl_device_dataset_batch(ctx, streamed, ord, order, FIRST, x, y));
        TU_ASSERT_OK(mpcl_tensor_download_raw(x, got, bytes));
        TU_ASSERT_OK(mpcl_tensor_download_i32(y, got_l, B));
        assert_memory_equal(got, want, bytes);
        assert_memory_equal(got_l, want_l, sizeof got_l);
        TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG,
                         mpcl_device_dataset_gather(ctx, streamed, ord, FIRST, x, y));
        TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG,
                         mpcl_device_dataset_batch(ctx, streamed, ord, NULL, FIRST, x, y));
        TU_EXPECT_STATUS(MPCL_ERR_SHAPE,
                         mpcl_device_dataset_batch(ctx, streamed, ord, order, N - B + 1, x, y));
        mpcl_tensor_destroy(x);
    }
    mpcl_tensor_destroy(y);
    mpcl_tensor_destroy(ord);
    mpcl_device_dataset_destroy(held);
    mpcl_device_dataset_destroy(streamed);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gather_f32_f16_labels_and_targets),
        cmocka_unit_test(data_beyond_the_device_refused),
        cmocka_unit_test(fit_rule),
        cmocka_unit_test(streamed_batch_matches_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
