/* Enumeration and selection on the real ICDs, exact extension matching, and
 * fp16 and bf16 verification on the device the suite runs on. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static void extension_tokens_match_exactly(void **state) {
    (void)state;
    const char *ext = "cl_khr_fp16_something cl_khr_fp64  cl_intel_bfloat16_conversions\tcl_x";
    assert_false(mpcl_has_extension(ext, "cl_khr_fp16"));
    assert_true(mpcl_has_extension(ext, "cl_khr_fp64"));
    assert_true(mpcl_has_extension(ext, "cl_intel_bfloat16_conversions"));
    assert_false(mpcl_has_extension(ext, "cl_intel_bfloat16"));
    assert_true(mpcl_has_extension(ext, "cl_x"));
    assert_false(mpcl_has_extension(ext, "khr_fp64"));
    assert_false(mpcl_has_extension("", "cl_khr_fp16"));
    assert_true(mpcl_has_extension("cl_khr_fp16", "cl_khr_fp16"));
}

static void enumeration_lists_devices_with_stable_ids(void **state) {
    (void)state;
    mpcl_device_list *list = NULL;
    TU_ASSERT_OK(mpcl_device_list_create(MPCL_ENUM_DEFAULT, &list));
    size_t n = mpcl_device_list_count(list);
    assert_true(n >= 1);
    for (size_t i = 0; i < n; i++) {
        const mpcl_device_info *d = mpcl_device_list_get(list, i);
        char want[16];
        snprintf(want, sizeof want, "%u:%u", d->platform_index, d->device_index);
        assert_string_equal(d->id, want);
        assert_true(strlen(d->name) > 0);
        assert_true(d->global_mem_bytes > 0 && d->max_alloc_bytes > 0);
        assert_true(d->compute_units > 0);
        assert_true(d->single_fp.present);
        assert_int_equal(d->has_fp16_extension, mpcl_has_extension(d->extensions, "cl_khr_fp16"));
        /* Without MPCL_ENUM_VERIFY_FP16 nothing is claimed about fp16 or bf16. */
        assert_int_equal(d->fp16_math, MPCL_FP16_MATH_UNTESTED);
        assert_int_equal(d->bf16_storage, MPCL_BF16_STORAGE_UNTESTED);
        assert_int_equal(d->bf16_dot, MPCL_BF16_DOT_UNTESTED);
        assert_int_equal(d->matrix_engine, MPCL_MATRIX_ENGINE_UNTESTED);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(d->id, mpcl_device_list_get(list, j)->id);
    }
    for (size_t i = 0; i < mpcl_device_list_skipped_count(list); i++)
        assert_true(strlen(mpcl_device_list_skipped(list, i)->reason) > 0);
    assert_null(mpcl_device_list_get(list, n));
    mpcl_device_list_destroy(list);
}

static void selection_by_id_type_and_name(void **state) {
    (void)state;
    mpcl_device_list *list = NULL;
    TU_ASSERT_OK(mpcl_device_list_create(MPCL_ENUM_DEFAULT, &list));
    size_t index = 99;
    for (size_t i = 0; i < mpcl_device_list_count(list); i++) {
        const mpcl_device_info *d = mpcl_device_list_get(list, i);
        TU_ASSERT_OK(mpcl_device_list_select(list, d->id, &index));
        assert_int_equal(index, i);
        /* A case-flipped middle part of the name selects a device with that part. */
        char part[MPCL_INFO_STR];
        size_t len = strlen(d->name);
        snprintf(part, sizeof part, "%s", d->name + len / 3);
        if (len / 3 + 1 < sizeof part) part[len / 3 + 1] = '\0';
        for (char *p = part; *p; p++)
            *p = (char)(isupper((unsigned char)*p) ? tolower(*p) : toupper(*p));
        TU_ASSERT_OK(mpcl_device_list_select(list, part, &index));
        assert_non_null(mpcl_device_list_get(list, index));
        /* The type words pick a device of that type. */
        const char *word = mpcl_device_type_name(d->type);
        if (strcmp(word, "other") != 0) {
            TU_ASSERT_OK(mpcl_device_list_select(list, word, &index));
            assert_int_equal(mpcl_device_list_get(list, index)->type, d->type);
        }
    }
    for (size_t i = 0; i < mpcl_device_list_count(list); i++) {
        const mpcl_device_info *d = mpcl_device_list_get(list, i);
        if (strstr(d->platform_vendor, "pocl")) { /* the name users know PoCL by */
            TU_ASSERT_OK(mpcl_device_list_select(list, "POCL", &index));
            assert_non_null(strstr(mpcl_device_list_get(list, index)->platform_vendor, "pocl"));
        }
    }
    TU_ASSERT_OK(mpcl_device_list_select(list, NULL, &index));
    TU_ASSERT_OK(mpcl_device_list_select(list, "", &index));
    mpcl_device_list_destroy(list);
}

static void unknown_selector_lists_the_devices(void **state) {
    (void)state;
    mpcl_device_list *list = NULL;
    TU_ASSERT_OK(mpcl_device_list_create(MPCL_ENUM_DEFAULT, &list));
    size_t index = 99;
    assert_int_equal(mpcl_device_list_select(list, "no-such-device-zz", &index),
                     MPCL_ERR_NO_DEVICE);
    assert_int_equal(index, 99);
    const char *msg = mpcl_errmsg();
    assert_non_null(strstr(msg, "'no-such-device-zz'"));
    for (size_t i = 0; i < mpcl_device_list_count(list); i++) {
        assert_non_null(strstr(msg, mpcl_device_list_get(list, i)->id));
        assert_non_null(strstr(msg, mpcl_device_list_get(list, i)->name));
    }
    mpcl_device_list_destroy(list);

    mpcl_context_params p = mpcl_context_default_params();
    p.device = "no-such-device-zz";
    mpcl_context *ctx = (mpcl_context *)0x1;
    assert_int_equal(mpcl_context_create(&p, &ctx), MPCL_ERR_NO_DEVICE);
    assert_null(ctx);
}

static void bad_fp16_override_is_refused(void **state) {
    (void)state;
    setenv("MPCL_FP16", "maybe", 1);
    mpcl_context *ctx = (mpcl_context *)0x1;
    assert_int_equal(mpcl_context_create(NULL, &ctx), MPCL_ERR_INVALID_ARG);
    assert_null(ctx);
    unsetenv("MPCL_FP16");
}

/* What docs/ARCHITECTURE.md (Testing) records for the implementations the
 * suite runs on: f16 storage works everywhere; half arithmetic only where
 * cl_khr_fp16 is declared. */
static void fp16_verification_on_the_suite_device(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const mpcl_device_info *d = mpcl_context_device(ctx);
    fprintf(stderr, "device %s (%s): fp16 math %s, storage %s: %s\n", d->name, d->platform,
            mpcl_fp16_math_name(d->fp16_math), mpcl_fp16_storage_name(d->fp16_storage),
            d->fp16_detail);
    assert_int_equal(d->fp16_storage, MPCL_FP16_STORAGE_VERIFIED);
    /* bf16 storage is integer code in common.cl: every implementation runs it. */
    fprintf(stderr, "bf16 storage %s: %s\n", mpcl_bf16_storage_name(d->bf16_storage),
            d->bf16_detail);
    assert_int_equal(d->bf16_storage, MPCL_BF16_STORAGE_VERIFIED);
    /* Four probe kernels (scalar, 4-, 8- and 16-wide) x 32 loads and 32
     * stores each. */
    assert_non_null(strstr(d->bf16_detail, "256/256 exact"));
    /* AVX512-BF16's dot product: verified (all 64 lanes with the host
     * model's bits) exactly where it may run, a CPU device on a host whose
     * CPU has it; elsewhere never run, and the detail says why. */
    fprintf(stderr, "bf16 dot %s: %s\n", mpcl_bf16_dot_name(d->bf16_dot), d->bf16_dot_detail);
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    bool host_dot = __builtin_cpu_supports("avx512bf16");
#else
    bool host_dot = false;
#endif
    bool pocl_cpu =
        strstr(d->platform, "Portable Computing Language") && d->type == MPCL_DEVICE_TYPE_CPU;
    if (pocl_cpu && host_dot) {
        assert_int_equal(d->bf16_dot, MPCL_BF16_DOT_VERIFIED);
        assert_non_null(strstr(d->bf16_dot_detail, "vdpbf16ps: 64/64 exact"));
    }
    if (!host_dot || d->type != MPCL_DEVICE_TYPE_CPU) {
        assert_int_equal(d->bf16_dot, MPCL_BF16_DOT_NONE);
        assert_true(strstr(d->bf16_dot_detail, "not a CPU device") ||
                    strstr(d->bf16_dot_detail, "no AVX512-BF16") ||
                    strstr(d->bf16_dot_detail, "not an x86-64 host"));
    }
    /* The matrix engine: the NVIDIA row applies to NVIDIA devices only (its
     * inline PTX never reaches another compiler), so on every other device
     * there is none, and the detail names the row and why. On an NVIDIA
     * device of compute capability 8.0 or newer it must verify: the probe's
     * tiles and mpcl-mma's kernels (tests/test_matrix_engine.c runs the same
     * checks with stand-in kernels on any device). */
    fprintf(stderr, "matrix engine %s %s: %s\n", d->matrix_engine_kind,
            mpcl_matrix_engine_name(d->matrix_engine), d->matrix_engine_detail);
    if (!strstr(d->vendor, "NVIDIA")) {
        assert_int_equal(d->matrix_engine, MPCL_MATRIX_ENGINE_NONE);
        assert_string_equal(d->matrix_engine_kind, "");
        assert_string_equal(d->matrix_engine_detail, "nvidia-mma-sm80: not an NVIDIA device");
    } else if (d->matrix_engine != MPCL_MATRIX_ENGINE_NONE) {
        assert_string_equal(d->matrix_engine_kind, "nvidia-mma-sm80");
        assert_int_equal(d->matrix_engine, MPCL_MATRIX_ENGINE_VERIFIED);
        assert_string_equal(d->matrix_engine_detail,
                            "mma.sync m16n8k16 f32 accumulation, f16: 128/128 exact; "
                            "bf16: 128/128 exact; mpcl-mma f16: 5600/5600 exact; bf16: "
                            "5600/5600 exact");
    }
    bool known_without_fp16 = tu_on_pocl(ctx) || tu_slow_device(ctx);
    if (known_without_fp16) assert_int_equal(d->fp16_math, MPCL_FP16_MATH_NONE);
    if (d->has_fp16_extension) assert_int_equal(d->fp16_math, MPCL_FP16_MATH_VERIFIED);
    /* The selector in the environment chose this device. */
    const char *sel = getenv("MPCL_DEVICE");
    if (sel && *sel) {
        mpcl_device_list *list = NULL;
        size_t index;
        TU_ASSERT_OK(mpcl_device_list_create(MPCL_ENUM_DEFAULT, &list));
        TU_ASSERT_OK(mpcl_device_list_select(list, sel, &index));
        assert_string_equal(mpcl_device_list_get(list, index)->id, d->id);
        mpcl_device_list_destroy(list);
    }
    mpcl_context_destroy(ctx);
}

/* The dot product's verification refuses numbers that are off: on every
 * device where the real probe verifies it, a probe kernel that adds a little
 * to every lane (through MPCL_CL_DIR, which the verification's sources come
 * from) must leave it broken with lanes wrong; nowhere may it be verified. */
static void a_wrong_bf16_dot_probe_is_broken(void **state) {
    (void)state;
    mpcl_device_list *list = NULL;
    TU_ASSERT_OK(mpcl_device_list_create(MPCL_ENUM_VERIFY_FP16, &list));
    size_t n = mpcl_device_list_count(list);
    bool verified[64] = {false};
    for (size_t i = 0; i < n && i < 64; i++)
        verified[i] = mpcl_device_list_get(list, i)->bf16_dot == MPCL_BF16_DOT_VERIFIED;
    mpcl_device_list_destroy(list);

    char dir[] = "/tmp/mpcl-dotprobe-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/bf16_dot_probe.cl", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(
        "__kernel void probe_bf16_dot(__global const uint *a, __global const uint *b,\n"
        "                             __global const float *acc, __global float *out) {\n"
        "    const size_t i = get_global_id(0);\n"
        "    float16 x = vload16(i, acc);\n"
        "    const uint16 av = vload16(i, a), bv = vload16(i, b);\n"
        "    MPCL_BF16_DOT16(x, av, bv);\n"
        "    vstore16(x + 0x1p-20f, i, out);\n"
        "}\n",
        f);
    fclose(f);
    setenv("MPCL_CL_DIR", dir, 1);
    TU_ASSERT_OK(mpcl_device_list_create(MPCL_ENUM_VERIFY_FP16, &list));
    assert_int_equal(mpcl_device_list_count(list), n);
    for (size_t i = 0; i < n; i++) {
        const mpcl_device_info *d = mpcl_device_list_get(list, i);
        fprintf(stderr, "%s with a wrong probe: bf16 dot %s (%s)\n", d->name,
                mpcl_bf16_dot_name(d->bf16_dot), d->bf16_dot_detail);
        assert_int_not_equal(d->bf16_dot, MPCL_BF16_DOT_VERIFIED);
        if (i < 64 && verified[i]) {
            assert_int_equal(d->bf16_dot, MPCL_BF16_DOT_BROKEN);
            assert_non_null(strstr(d->bf16_dot_detail, "/64 wrong"));
        }
    }
    mpcl_device_list_destroy(list);
    unsetenv("MPCL_CL_DIR");
    remove(path);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(extension_tokens_match_exactly),
        cmocka_unit_test(enumeration_lists_devices_with_stable_ids),
        cmocka_unit_test(selection_by_id_type_and_name),
        cmocka_unit_test(unknown_selector_lists_the_devices),
        cmocka_unit_test(bad_fp16_override_is_refused),
        cmocka_unit_test(fp16_verification_on_the_suite_device),
        cmocka_unit_test(a_wrong_bf16_dot_probe_is_broken),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
