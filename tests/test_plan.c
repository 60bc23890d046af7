/* The precision plan on synthetic capability records: every rule of the
 * resolution table (docs/ARCHITECTURE.md, The precision plan), the
 * overrides, and the reasons. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static mpcl_device_info device(mpcl_device_type type, bool ext, mpcl_fp16_math math,
                               mpcl_fp16_storage storage) {
    mpcl_device_info d;
    memset(&d, 0, sizeof d);
    d.type = type;
    d.has_fp16_extension = ext;
    d.fp16_math = math;
    d.fp16_storage = storage;
    return d;
}

static const mpcl_plan_overrides none = {MPCL_FP16_DEFAULT, false, MPCL_GEMM_CLBLAST_SGEMM};

static void expect(mpcl_plan p, mpcl_policy resolved, mpcl_dtype storage, mpcl_gemm_path gemm,
                   bool loss_scaling, const char *reason_part) {
    assert_true(p.usable);
    assert_int_equal(p.resolved, resolved);
    assert_int_equal(p.storage, storage);
    if (p.gemm != gemm)
        fail_msg("gemm %s, want %s", mpcl_gemm_path_name(p.gemm), mpcl_gemm_path_name(gemm));
    assert_int_equal(p.loss_scaling, loss_scaling);
    if (!strstr(p.reason, reason_part)) fail_msg("reason '%s' lacks '%s'", p.reason, reason_part);
}

static void nvidia_like_gpu(void **state) {
    (void)state; /* NVIDIA's driver is reported not to declare cl_khr_fp16. */
    mpcl_device_info d =
        device(MPCL_DEVICE_TYPE_GPU, false, MPCL_FP16_MATH_NONE, MPCL_FP16_STORAGE_VERIFIED);
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_AUTO, &none), MPCL_POLICY_FLOAT32, MPCL_DTYPE_F32,
           MPCL_GEMM_CLBLAST_SGEMM, false, "device lacks cl_khr_fp16: float32");
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_FLOAT16, &none), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_STAGED, true, "f32 math");
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_FLOAT32, &none), MPCL_POLICY_FLOAT32, MPCL_DTYPE_F32,
           MPCL_GEMM_CLBLAST_SGEMM, false, "float32");
}

static void amd_like_gpu_with_verified_fp16(void **state) {
    (void)state;
    mpcl_device_info d =
        device(MPCL_DEVICE_TYPE_GPU, true, MPCL_FP16_MATH_VERIFIED, MPCL_FP16_STORAGE_VERIFIED);
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_AUTO, &none), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_HGEMM, true, "verified fp16 math");
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_FLOAT16, &none), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_HGEMM, true, "HGEMM");
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_FLOAT32, &none), MPCL_POLICY_FLOAT32, MPCL_DTYPE_F32,
           MPCL_GEMM_CLBLAST_SGEMM, false, "float32");
    mpcl_plan_overrides off = none;
    off.fp16 = MPCL_FP16_OFF;
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_AUTO, &off), MPCL_POLICY_FLOAT32, MPCL_DTYPE_F32,
           MPCL_GEMM_CLBLAST_SGEMM, false, "MPCL_FP16=off");
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_FLOAT16, &off), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_STAGED, true, "MPCL_FP16=off");
}

static void undeclared_but_works_needs_force(void **state) {
    (void)state;
    mpcl_device_info d = device(MPCL_DEVICE_TYPE_GPU, false, MPCL_FP16_MATH_UNDECLARED_BUT_WORKS,
                                MPCL_FP16_STORAGE_VERIFIED);
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_AUTO, &none), MPCL_POLICY_FLOAT32, MPCL_DTYPE_F32,
           MPCL_GEMM_CLBLAST_SGEMM, false, "MPCL_FP16=force opts in");
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_FLOAT16, &none), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_STAGED, true, "not declared");
    mpcl_plan_overrides force = none;
    force.fp16 = MPCL_FP16_FORCE;
    assert_true(mpcl_plan_fp16_math_usable(&d, MPCL_FP16_FORCE));
    assert_false(mpcl_plan_fp16_math_usable(&d, MPCL_FP16_DEFAULT));
    /* Forced half arithmetic, but no HGEMM: CLBlast reads the extension list
     * and refuses HGEMM where cl_khr_fp16 is not declared (NVIDIA's H200
     * returned CLBlastNoHalfPrecision), so the GEMM accumulates in f32. */
    assert_false(mpcl_plan_hgemm_usable(&d, MPCL_FP16_FORCE));
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_AUTO, &force), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_STAGED, true, "HGEMM needs cl_khr_fp16 declared");
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_FLOAT16, &force), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_STAGED, true, "HGEMM needs cl_khr_fp16 declared");
    force.gemm_set = true;
    force.gemm = MPCL_GEMM_CLBLAST_HGEMM;
    mpcl_plan p = mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_FLOAT16, &force);
    assert_false(p.usable);
    if (!strstr(p.reason, "clblast-hgemm needs cl_khr_fp16 declared"))
        fail_msg("reason '%s'", p.reason);
    /* Declared and forced, or declared and verified: HGEMM. */
    d.has_fp16_extension = true;
    assert_true(mpcl_plan_hgemm_usable(&d, MPCL_FP16_FORCE));
    assert_false(mpcl_plan_hgemm_usable(&d, MPCL_FP16_DEFAULT));
    force.gemm_set = false;
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_AUTO, &force), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_HGEMM, true, "verified fp16 math");
    d.fp16_math = MPCL_FP16_MATH_VERIFIED;
    assert_true(mpcl_plan_hgemm_usable(&d, MPCL_FP16_DEFAULT));
    assert_false(mpcl_plan_hgemm_usable(&d, MPCL_FP16_OFF));
}

static void declared_but_broken_falls_back(void **state) {
    (void)state;
    mpcl_device_info d = device(MPCL_DEVICE_TYPE_GPU, true, MPCL_FP16_MATH_DECLARED_BUT_BROKEN,
                                MPCL_FP16_STORAGE_VERIFIED);
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_AUTO, &none), MPCL_POLICY_FLOAT32, MPCL_DTYPE_F32,
           MPCL_GEMM_CLBLAST_SGEMM, false, "failed verification");
    mpcl_plan_overrides force = none;
    force.fp16 = MPCL_FP16_FORCE; /* force never overrides a failed verification */
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_FLOAT16, &force), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_STAGED, true, "failed verification");
}

static void pocl_as_found(void **state) {
    (void)state; /* PoCL 3.1: CPU, no cl_khr_fp16, vload_half/vstore_half_rte verified. */
    mpcl_device_info d =
        device(MPCL_DEVICE_TYPE_CPU, false, MPCL_FP16_MATH_NONE, MPCL_FP16_STORAGE_VERIFIED);
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_AUTO, &none), MPCL_POLICY_FLOAT32, MPCL_DTYPE_F32,
           MPCL_GEMM_MPCL_F32, false, "device lacks cl_khr_fp16: float32");
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_FLOAT16, &none), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_MPCL_MIXED, true, "f32 math");
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_FLOAT32, &none), MPCL_POLICY_FLOAT32, MPCL_DTYPE_F32,
           MPCL_GEMM_MPCL_F32, false, "float32");
}

static void broken_f16_storage_makes_mixed_unusable(void **state) {
    (void)state;
    mpcl_device_info d =
        device(MPCL_DEVICE_TYPE_GPU, true, MPCL_FP16_MATH_VERIFIED, MPCL_FP16_STORAGE_BROKEN);
    mpcl_plan p = mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_FLOAT16, &none);
    assert_false(p.usable);
    assert_non_null(strstr(p.reason, "vload_half"));
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_AUTO, &none), MPCL_POLICY_FLOAT32, MPCL_DTYPE_F32,
           MPCL_GEMM_CLBLAST_SGEMM, false, "f16 storage failed verification");
}

static void gemm_override(void **state) {
    (void)state;
    mpcl_device_info gpu =
        device(MPCL_DEVICE_TYPE_GPU, false, MPCL_FP16_MATH_NONE, MPCL_FP16_STORAGE_VERIFIED);
    mpcl_plan_overrides o = none;
    o.gemm_set = true;
    o.gemm = MPCL_GEMM_MPCL_F32;
    expect(mpcl_plan_resolve(&gpu, MPCL_POLICY_FLOAT32, &o), MPCL_POLICY_FLOAT32, MPCL_DTYPE_F32,
           MPCL_GEMM_MPCL_F32, false, "MPCL_GEMM");
    o.gemm = MPCL_GEMM_CLBLAST_HGEMM; /* needs half math, which this device lacks */
    mpcl_plan p = mpcl_plan_resolve(&gpu, MPCL_POLICY_MIXED_FLOAT16, &o);
    assert_false(p.usable);
    assert_non_null(strstr(p.reason, "clblast-hgemm needs half arithmetic"));
    o.gemm = MPCL_GEMM_MPCL_MIXED; /* f16 path under an f32 policy */
    p = mpcl_plan_resolve(&gpu, MPCL_POLICY_FLOAT32, &o);
    assert_false(p.usable);
    assert_non_null(strstr(p.reason, "needs f16 or bf16 storage"));
    o.gemm = MPCL_GEMM_CLBLAST_STAGED;
    p = mpcl_plan_resolve(&gpu, MPCL_POLICY_FLOAT32, &o);
    assert_false(p.usable);
    assert_non_null(strstr(p.reason, "MPCL_GEMM=clblast-staged needs f16 or bf16 storage"));
    /* mpcl's own kernel on a GPU, where the rule would take clblast-staged. */
    o.gemm = MPCL_GEMM_MPCL_MIXED;
    expect(mpcl_plan_resolve(&gpu, MPCL_POLICY_MIXED_FLOAT16, &o), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_MPCL_MIXED, true, "GEMM set by MPCL_GEMM");
}

/* mixed_bfloat16: bf16 storage, f32 accumulation (CLBlast has no bf16 GEMM,
 * so not HGEMM even where fp16 math is verified): mpcl-mixed on CPUs,
 * clblast-staged on GPUs; no loss scaling (bf16 has f32's exponent range, as
 * Keras' mixed_bfloat16); auto never picks it. */
static void mixed_bfloat16_where_bf16_storage_is_verified(void **state) {
    (void)state;
    mpcl_device_info cpu =
        device(MPCL_DEVICE_TYPE_CPU, false, MPCL_FP16_MATH_NONE, MPCL_FP16_STORAGE_VERIFIED);
    cpu.bf16_storage = MPCL_BF16_STORAGE_VERIFIED;
    mpcl_device_info gpu =
        device(MPCL_DEVICE_TYPE_GPU, true, MPCL_FP16_MATH_VERIFIED, MPCL_FP16_STORAGE_VERIFIED);
    gpu.bf16_storage = MPCL_BF16_STORAGE_VERIFIED;
    const mpcl_device_info *both[2] = {&cpu, &gpu};
    const mpcl_gemm_path want[2] = {MPCL_GEMM_MPCL_MIXED, MPCL_GEMM_CLBLAST_STAGED};
    for (int i = 0; i < 2; i++) {
        mpcl_plan p = mpcl_plan_resolve(both[i], MPCL_POLICY_MIXED_BFLOAT16, &none);
        expect(p, MPCL_POLICY_MIXED_BFLOAT16, MPCL_DTYPE_BF16, want[i], false, "no loss scaling");
        assert_int_equal(p.policy, MPCL_POLICY_MIXED_BFLOAT16);
        assert_non_null(strstr(p.reason, "CLBlast has no bf16 GEMM"));
    }
    expect(mpcl_plan_resolve(&cpu, MPCL_POLICY_AUTO, &none), MPCL_POLICY_FLOAT32, MPCL_DTYPE_F32,
           MPCL_GEMM_MPCL_F32, false, "device lacks cl_khr_fp16: float32");
    expect(mpcl_plan_resolve(&gpu, MPCL_POLICY_AUTO, &none), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_CLBLAST_HGEMM, true, "verified fp16 math");
    /* MPCL_FP16 is about half arithmetic, which bf16 never uses. */
    mpcl_plan_overrides off = none;
    off.fp16 = MPCL_FP16_OFF;
    expect(mpcl_plan_resolve(&gpu, MPCL_POLICY_MIXED_BFLOAT16, &off), MPCL_POLICY_MIXED_BFLOAT16,
           MPCL_DTYPE_BF16, MPCL_GEMM_CLBLAST_STAGED, false, "bf16 storage");
}

/* A device whose bf16 store/load check failed (or was not run) cannot run
 * mixed_bfloat16: unusable, with the reason; the other policies are as they
 * were, f16 storage included. */
static void broken_or_untested_bf16_storage_refuses_mixed_bfloat16(void **state) {
    (void)state;
    mpcl_device_info d =
        device(MPCL_DEVICE_TYPE_CPU, false, MPCL_FP16_MATH_NONE, MPCL_FP16_STORAGE_VERIFIED);
    d.bf16_storage = MPCL_BF16_STORAGE_BROKEN;
    mpcl_plan p = mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_BFLOAT16, &none);
    assert_false(p.usable);
    assert_int_equal(p.policy, MPCL_POLICY_MIXED_BFLOAT16);
    assert_int_not_equal(p.storage, MPCL_DTYPE_BF16);
    if (!strstr(p.reason, "bf16") || !strstr(p.reason, "failed verification"))
        fail_msg("reason '%s'", p.reason);
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_FLOAT16, &none), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_MPCL_MIXED, true, "f32 math");
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_AUTO, &none), MPCL_POLICY_FLOAT32, MPCL_DTYPE_F32,
           MPCL_GEMM_MPCL_F32, false, "float32");
    d.bf16_storage = MPCL_BF16_STORAGE_UNTESTED;
    p = mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_BFLOAT16, &none);
    assert_false(p.usable);
    if (!strstr(p.reason, "was not run")) fail_msg("reason '%s'", p.reason);
}

/* MPCL_GEMM under mixed_bfloat16: only mpcl-mixed and clblast-staged read
 * bf16; the other CLBlast paths (and mpcl-f32) are refused with the reason,
 * even on a device with verified fp16 math. */
static void gemm_override_under_mixed_bfloat16(void **state) {
    (void)state;
    mpcl_device_info gpu =
        device(MPCL_DEVICE_TYPE_GPU, true, MPCL_FP16_MATH_VERIFIED, MPCL_FP16_STORAGE_VERIFIED);
    gpu.bf16_storage = MPCL_BF16_STORAGE_VERIFIED;
    mpcl_plan_overrides o = none;
    o.gemm_set = true;
    const struct {
        mpcl_gemm_path path;
        const char *needs;
    } refused[] = {{MPCL_GEMM_CLBLAST_HGEMM, "MPCL_GEMM=clblast-hgemm needs f16 storage"},
                   {MPCL_GEMM_CLBLAST_SGEMM, "MPCL_GEMM=clblast-sgemm needs f32 storage"},
                   {MPCL_GEMM_MPCL_F32, "MPCL_GEMM=mpcl-f32 needs f32 storage"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        o.gemm = refused[i].path;
        mpcl_plan p = mpcl_plan_resolve(&gpu, MPCL_POLICY_MIXED_BFLOAT16, &o);
        assert_false(p.usable);
        if (!strstr(p.reason, refused[i].needs) || !strstr(p.reason, "stores bf16") ||
            !strstr(p.reason, "CLBlast has no bf16 GEMM"))
            fail_msg("reason '%s'", p.reason);
    }
    o.gemm = MPCL_GEMM_MPCL_MIXED;
    expect(mpcl_plan_resolve(&gpu, MPCL_POLICY_MIXED_BFLOAT16, &o), MPCL_POLICY_MIXED_BFLOAT16,
           MPCL_DTYPE_BF16, MPCL_GEMM_MPCL_MIXED, false, "GEMM set by MPCL_GEMM");
    o.gemm = MPCL_GEMM_CLBLAST_STAGED;
    expect(mpcl_plan_resolve(&gpu, MPCL_POLICY_MIXED_BFLOAT16, &o), MPCL_POLICY_MIXED_BFLOAT16,
           MPCL_DTYPE_BF16, MPCL_GEMM_CLBLAST_STAGED, false, "GEMM set by MPCL_GEMM");
}

/* The dtype table: values kept (f32, f16, i32, u8 as before, bf16 after),
 * names, sizes, and which dtypes are float. */
static void dtype_table(void **state) {
    (void)state;
    assert_int_equal(MPCL_DTYPE_F32, 0);
    assert_int_equal(MPCL_DTYPE_F16, 1);
    assert_int_equal(MPCL_DTYPE_I32, 2);
    assert_int_equal(MPCL_DTYPE_U8, 3);
    assert_int_equal(MPCL_DTYPE_BF16, 4);
    assert_int_equal(MPCL_DTYPE_COUNT, 5);
    const char *names[] = {"f32", "f16", "i32", "u8", "bf16"};
    const size_t sizes[] = {4, 2, 4, 1, 2};
    const bool is_float[] = {true, true, false, false, true};
    for (int i = 0; i < MPCL_DTYPE_COUNT; i++) {
        assert_string_equal(mpcl_dtype_name((mpcl_dtype)i), names[i]);
        assert_int_equal(mpcl_dtype_size((mpcl_dtype)i), sizes[i]);
        assert_int_equal(mpcl_dtype_is_float((mpcl_dtype)i), is_float[i]);
    }
    assert_string_equal(mpcl_dtype_name(MPCL_DTYPE_COUNT), "unknown");
    assert_int_equal(mpcl_dtype_size(MPCL_DTYPE_COUNT), 0);
    assert_false(mpcl_dtype_is_float(MPCL_DTYPE_COUNT));
    assert_false(mpcl_dtype_is_float((mpcl_dtype)-1));
    /* Policy values are kept too; mixed_bfloat16 comes after them. */
    assert_int_equal(MPCL_POLICY_AUTO, 0);
    assert_int_equal(MPCL_POLICY_MIXED_FLOAT16, 1);
    assert_int_equal(MPCL_POLICY_FLOAT32, 2);
    assert_int_equal(MPCL_POLICY_MIXED_BFLOAT16, 3);
    assert_string_equal(mpcl_policy_name(MPCL_POLICY_MIXED_BFLOAT16), "mixed_bfloat16");
    /* GEMM path values too (the Python package passes them as ints). */
    assert_int_equal(MPCL_GEMM_MPCL_MIXED, 3);
    assert_int_equal(MPCL_GEMM_CLBLAST_STAGED, 4);
    assert_string_equal(mpcl_gemm_path_name(MPCL_GEMM_CLBLAST_STAGED), "clblast-staged");
    assert_int_equal(MPCL_GEMM_MPCL_MMA, 5);
    assert_string_equal(mpcl_gemm_path_name(MPCL_GEMM_MPCL_MMA), "mpcl-mma");
}

/* A GPU whose matrix engine verified (an H200: no declared cl_khr_fp16, bf16
 * storage verified): both 16-bit policies take mpcl-mma and say so, float32
 * keeps CLBlast's SGEMM; MPCL_GEMM may pick another path, and asks for
 * mpcl-mma in vain where the engine did not verify, with its state and
 * detail in the reason. */
static void a_verified_matrix_engine_takes_the_16_bit_gemms(void **state) {
    (void)state;
    mpcl_device_info d =
        device(MPCL_DEVICE_TYPE_GPU, false, MPCL_FP16_MATH_NONE, MPCL_FP16_STORAGE_VERIFIED);
    d.bf16_storage = MPCL_BF16_STORAGE_VERIFIED;
    d.matrix_engine = MPCL_MATRIX_ENGINE_VERIFIED;
    snprintf(d.matrix_engine_kind, sizeof d.matrix_engine_kind, "nvidia-mma-sm80");
    assert_true(mpcl_plan_mma_usable(&d));
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_FLOAT16, &none), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_MPCL_MMA, true,
           "GEMM accumulates in f32; GEMMs on the matrix engine (nvidia-mma-sm80)");
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_BFLOAT16, &none), MPCL_POLICY_MIXED_BFLOAT16,
           MPCL_DTYPE_BF16, MPCL_GEMM_MPCL_MMA, false, "GEMMs on the matrix engine (nvidia-mma");
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_FLOAT32, &none), MPCL_POLICY_FLOAT32, MPCL_DTYPE_F32,
           MPCL_GEMM_CLBLAST_SGEMM, false, "float32 requested");
    /* With verified half arithmetic too (HGEMM usable), the engine still wins:
     * it accumulates in f32. */
    d.has_fp16_extension = true;
    d.fp16_math = MPCL_FP16_MATH_VERIFIED;
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_AUTO, &none), MPCL_POLICY_MIXED_FLOAT16,
           MPCL_DTYPE_F16, MPCL_GEMM_MPCL_MMA, true, "mixed_float16 accumulating in f32");
    mpcl_plan_overrides o = none;
    o.gemm_set = true;
    o.gemm = MPCL_GEMM_CLBLAST_STAGED;
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_BFLOAT16, &o), MPCL_POLICY_MIXED_BFLOAT16,
           MPCL_DTYPE_BF16, MPCL_GEMM_CLBLAST_STAGED, false, "GEMM set by MPCL_GEMM");
    o.gemm = MPCL_GEMM_MPCL_MMA;
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_BFLOAT16, &o), MPCL_POLICY_MIXED_BFLOAT16,
           MPCL_DTYPE_BF16, MPCL_GEMM_MPCL_MMA, false, "GEMM set by MPCL_GEMM");
    mpcl_plan p = mpcl_plan_resolve(&d, MPCL_POLICY_FLOAT32, &o);
    assert_false(p.usable);
    assert_non_null(strstr(p.reason, "MPCL_GEMM=mpcl-mma needs f16 or bf16 storage"));

    /* No engine (or a broken one): never chosen, refused when asked for. */
    d.matrix_engine = MPCL_MATRIX_ENGINE_BROKEN;
    snprintf(d.matrix_engine_detail, sizeof d.matrix_engine_detail, "f16: 3/128 wrong");
    assert_false(mpcl_plan_mma_usable(&d));
    expect(mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_BFLOAT16, &none), MPCL_POLICY_MIXED_BFLOAT16,
           MPCL_DTYPE_BF16, MPCL_GEMM_CLBLAST_STAGED, false, "bf16 storage");
    p = mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_BFLOAT16, &o);
    assert_false(p.usable);
    assert_string_equal(p.reason,
                        "MPCL_GEMM=mpcl-mma needs a verified matrix engine; this "
                        "device's is broken (f16: 3/128 wrong)");
    /* A detail as long as the field: the reason is cut, still terminated. */
    memset(d.matrix_engine_detail, 'x', sizeof d.matrix_engine_detail - 1);
    d.matrix_engine_detail[sizeof d.matrix_engine_detail - 1] = '\0';
    p = mpcl_plan_resolve(&d, MPCL_POLICY_MIXED_FLOAT16, &o);
    assert_false(p.usable);
    assert_int_equal(strlen(p.reason), sizeof p.reason - 1);
    assert_int_equal(p.reason[sizeof p.reason - 2], ')');
}

static void overrides_from_the_environment(void **state) {
    (void)state;
    mpcl_plan_overrides o;
    setenv("MPCL_FP16", "force", 1);
    setenv("MPCL_GEMM", "mpcl-mixed", 1);
    assert_int_equal(mpcl_plan_overrides_from_env(&o), MPCL_OK);
    assert_int_equal(o.fp16, MPCL_FP16_FORCE);
    assert_true(o.gemm_set);
    assert_int_equal(o.gemm, MPCL_GEMM_MPCL_MIXED);
    setenv("MPCL_FP16", "yes", 1);
    assert_int_equal(mpcl_plan_overrides_from_env(&o), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "MPCL_FP16='yes'"));
    setenv("MPCL_FP16", "off", 1);
    setenv("MPCL_GEMM", "cublas", 1);
    assert_int_equal(mpcl_plan_overrides_from_env(&o), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(),
                           "clblast-sgemm, clblast-hgemm, mpcl-f32, mpcl-mixed, clblast-staged"));
    setenv("MPCL_GEMM", "clblast-staged", 1);
    assert_int_equal(mpcl_plan_overrides_from_env(&o), MPCL_OK);
    assert_int_equal(o.gemm, MPCL_GEMM_CLBLAST_STAGED);
    unsetenv("MPCL_FP16");
    unsetenv("MPCL_GEMM");
    assert_int_equal(mpcl_plan_overrides_from_env(&o), MPCL_OK);
    assert_int_equal(o.fp16, MPCL_FP16_DEFAULT);
    assert_false(o.gemm_set);
}

/* Every variable with a documented set of values refuses any other, naming
 * the variable, the value and the set, where the library is entered: the
 * plan overrides and the device list (before any OpenCL call, so this needs
 * no device). Empty is the same as unset. */
static void environment_values_outside_their_set(void **state) {
    (void)state;
    static const char *const bad[][3] = {
        {"MPCL_AUTO", "capabilty", "capability"},
        {"MPCL_AUTO", "Capability", "capability"},
        {"MPCL_CACHE", "no", "0"},
        {"MPCL_CACHE", "1", "0"},
        {"MPCL_CACHE", "false", "0"},
        {"MPCL_CACHE", " 0", "0"},
        {"MPCL_FP16", "on", "force, off"},
        {"MPCL_GEMM", "mpcl-f32 ",
         "clblast-sgemm, clblast-hgemm, mpcl-f32, mpcl-mixed, "
         "clblast-staged, mpcl-mma"},
    };
    const char *suite_auto = getenv("MPCL_AUTO");
    char *saved_auto = suite_auto ? strdup(suite_auto) : NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char named[64], listed[128];
        snprintf(named, sizeof named, "%s='%s'", bad[i][0], bad[i][1]);
        snprintf(listed, sizeof listed, "is not one of: %s (or unset)", bad[i][2]);
        setenv(bad[i][0], bad[i][1], 1);
        mpcl_plan_overrides o;
        mpcl_device_list *list = NULL;
        if (mpcl_plan_overrides_from_env(&o) != MPCL_ERR_INVALID_ARG ||
            !strstr(mpcl_errmsg(), named) || !strstr(mpcl_errmsg(), listed))
            fail_msg("%s: overrides: '%s'", named, mpcl_errmsg());
        if (mpcl_device_list_create(MPCL_ENUM_DEFAULT, &list) != MPCL_ERR_INVALID_ARG ||
            !strstr(mpcl_errmsg(), named))
            fail_msg("%s: device list: '%s'", named, mpcl_errmsg());
        assert_null(list);
        unsetenv(bad[i][0]);
    }
    static const char *const all[] = {"MPCL_AUTO", "MPCL_CACHE", "MPCL_FP16", "MPCL_GEMM"};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) setenv(all[i], "", 1);
    mpcl_plan_overrides o;
    assert_int_equal(mpcl_plan_overrides_from_env(&o), MPCL_OK);
    assert_int_equal(o.fp16, MPCL_FP16_DEFAULT);
    assert_false(o.gemm_set);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) unsetenv(all[i]);
    if (saved_auto) setenv("MPCL_AUTO", saved_auto, 1);
    free(saved_auto);
}

static void names_parse_back(void **state) {
    (void)state;
    for (int i = 0; i < MPCL_POLICY_COUNT; i++) {
        mpcl_policy p;
        assert_true(mpcl_policy_parse(mpcl_policy_name((mpcl_policy)i), &p));
        assert_int_equal(p, i);
    }
    for (int i = 0; i < MPCL_GEMM_PATH_COUNT; i++) {
        mpcl_gemm_path g;
        assert_true(mpcl_gemm_path_parse(mpcl_gemm_path_name((mpcl_gemm_path)i), &g));
        assert_int_equal(g, i);
    }
    mpcl_policy p;
    assert_true(mpcl_policy_parse("mixed_bfloat16", &p));
    assert_int_equal(p, MPCL_POLICY_MIXED_BFLOAT16);
    assert_false(mpcl_policy_parse("float16", &p));
    assert_false(mpcl_policy_parse("bfloat16", &p));
    assert_false(mpcl_policy_parse(NULL, &p));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nvidia_like_gpu),
        cmocka_unit_test(a_verified_matrix_engine_takes_the_16_bit_gemms),
        cmocka_unit_test(amd_like_gpu_with_verified_fp16),
        cmocka_unit_test(undeclared_but_works_needs_force),
        cmocka_unit_test(declared_but_broken_falls_back),
        cmocka_unit_test(pocl_as_found),
        cmocka_unit_test(broken_f16_storage_makes_mixed_unusable),
        cmocka_unit_test(gemm_override),
        cmocka_unit_test(mixed_bfloat16_where_bf16_storage_is_verified),
        cmocka_unit_test(broken_or_untested_bf16_storage_refuses_mixed_bfloat16),
        cmocka_unit_test(gemm_override_under_mixed_bfloat16),
        cmocka_unit_test(dtype_table),
        cmocka_unit_test(overrides_from_the_environment),
        cmocka_unit_test(environment_values_outside_their_set),
        cmocka_unit_test(names_parse_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
