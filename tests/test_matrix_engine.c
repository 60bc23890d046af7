/* The matrix engine's verification (src/runtime/matrix_engine.c) on any
 * device: rows of the test's own whose probe and mpcl-mma kernels are plain
 * OpenCL C with the real ones' signatures and launch shapes (through
 * MPCL_CL_DIR), so that the host side (the tiles and the GEMM shape with
 * edges and both transposes, beta, the poisoned outputs, the detail) runs
 * here; the NVIDIA row's own kernels run only on an NVIDIA GPU
 * (bench/device/, where test_device requires them verified). A stand-in
 * that is wrong anywhere leaves the row broken, never verified. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "testutil.h"

static char dir[64];

static int setup(void **state) {
    (void)state;
    return tu_tmpdir_make(dir, "engine");
}

static int teardown(void **state) {
    (void)state;
    unsetenv("MPCL_CL_DIR");
    return tu_tmpdir_remove(dir);
}

static void write_source(const char *name, const char *text) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* d = a b + c on the probe's 16x8x16 tile, 32 items of 4 elements each;
 * `wrong` adds something to one element. */
static void write_probe(bool wrong) {
    char text[2048];
    snprintf(text, sizeof text,
             "float f16v(__global const ushort *p, uint i) { return vload_half(i, (__global const "
             "half *)p); }\n"
             "float bf16v(__global const ushort *p, uint i) { return as_float((uint)p[i] << 16); "
             "}\n"
             "#define PROBE(NAME, V) __kernel __attribute__((reqd_work_group_size(32, 1, 1))) "
             "void NAME(__global const ushort *a, __global const ushort *b, __global const float "
             "*c, __global float *d) { \\\n"
             "    for (uint e = get_local_id(0); e < 128; e += 32) { \\\n"
             "        uint i = e / 8, j = e %% 8; float s = c[e]; \\\n"
             "        for (uint k = 0; k < 16; k++) s += V(a, i * 16 + k) * V(b, k * 8 + j); \\\n"
             "        d[e] = s + (%s && e == 77 ? 1.0f : 0.0f); } }\n"
             "PROBE(probe_mma_f16, f16v)\nPROBE(probe_mma_bf16, bf16v)\n",
             wrong ? "1" : "0");
    write_source("test_mma_probe.cl", text);
}

/* mpcl_gemm_mma and _cf32, and every tile row's pipelined kernels (with
 * the epilogue's arguments and their local memory argument, unused), in
 * plain loops, launched as the real ones (a group of `items` per tile of
 * C); with `no_beta`, beta is ignored (C never read). */
static void write_gemm(bool no_beta) {
    char text[4096];
    snprintf(text, sizeof text,
             "#define GEMM(NAME, C_T, LC, SC, ROWS, COLS, ITEMS, ...) __kernel void NAME(__global "
             "const storage_t *a, __global const storage_t *b, __global C_T *c, uint m, uint n, "
             "uint k, uint ta, uint tb, float alpha, float beta, __global const float *bias, "
             "__global const C_T *addend, uint epi __VA_ARGS__) { \\\n"
             "    uint r0 = get_group_id(1) * (ROWS), c0 = get_group_id(0) * (COLS); \\\n"
             "    for (uint e = get_local_id(0); e < (ROWS) * (COLS); e += (ITEMS)) { \\\n"
             "        uint i = r0 + e / (COLS), j = c0 + e %% (COLS); \\\n"
             "        if (i >= m || j >= n) continue; \\\n"
             "        float s = 0.0f; \\\n"
             "        for (uint p = 0; p < k; p++) s += LOAD(a, ta ? p * m + i : i * k + p) * "
             "LOAD(b, tb ? j * k + p : p * n + j); \\\n"
             "        float v = alpha * s; \\\n"
             "        if (%s beta != 0.0f) v += beta * LC(c, i * n + j); \\\n"
             "        SC(c, i * n + j, v); } }\n"
             "#define LF(p, i) ((p)[(i)])\n#define SF(p, i, v) ((p)[(i)] = (v))\n"
             "#define T MPCL_ABI_MMA_TILE\n"
             "GEMM(mpcl_gemm_mma, storage_t, LOAD, STORE, T, T, MPCL_ABI_MMA_ITEMS)\n"
             "GEMM(mpcl_gemm_mma_cf32, float, LF, SF, T, T, MPCL_ABI_MMA_ITEMS)\n"
             "#define L , __local ushort *local_mem\n"
             "#define PAIR(NAME, R, C, I) GEMM(NAME, storage_t, LOAD, STORE, R, C, I, L) "
             "GEMM(NAME##_cf32, float, LF, SF, R, C, I, L)\n"
             "#define PIPE(NAME, R, C, WM, WN) PAIR(mpcl_gemm_mma_##NAME##_nn, R, C, 32 * WM * WN) "
             "PAIR(mpcl_gemm_mma_##NAME##_nt, R, C, 32 * WM * WN) "
             "PAIR(mpcl_gemm_mma_##NAME##_tn, R, C, 32 * WM * WN)\n"
             "MPCL_ABI_MMA_PIPE_TILES(PIPE)\n",
             no_beta ? "0 &&" : "");
    write_source("test_gemm_mma.cl", text);
}

static const mpcl__matrix_engine_row row = {"test-row", NULL, "test_mma_probe.cl", "plain loops",
                                            32,         "",   "test_gemm_mma.cl"};

static mpcl_device_info verify_with(mpcl_context *ctx, const mpcl__matrix_engine_row *r) {
    mpcl_device_info info = *mpcl_context_device(ctx);
    setenv("MPCL_CL_DIR", dir, 1);
    mpcl__matrix_engine_verify_row(ctx->cl, ctx->device, ctx->queue, r, &info);
    unsetenv("MPCL_CL_DIR");
    fprintf(stderr, "%s %s: %s\n", info.matrix_engine_kind,
            mpcl_matrix_engine_name(info.matrix_engine), info.matrix_engine_detail);
    return info;
}

/* The elements the verification checks per dtype: mpcl_gemm_mma's 70 x 40,
 * twice (A^T B^T into a 16-bit C with beta, then A B into an f32 C), and
 * the pipelined kernels' 72 x 136 (rows of whole pieces) and 66 x 70 (none
 * whole), three transpose pairs for each tile row whose local memory the
 * device has (on PoCL, all four: 2 x 2800 + 12 x (9792 + 4620) = 178544). */
static int checks(mpcl_context *ctx, bool emulated) {
    int total = 2 * 70 * 40;
    for (int t = 0; t < MPCL__MMA_PIPE_TILES; t++)
        if (mpcl__mma_pipe_tile_bytes(&mpcl__mma_pipe_tiles[t], emulated) <=
            mpcl_context_device(ctx)->local_mem_bytes)
            total += 3 * (72 * 136 + 66 * 70);
    return total;
}

static mpcl_device_info verify(mpcl_context *ctx) {
    return verify_with(ctx, &row);
}

static void right_kernels_are_verified(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    write_probe(false);
    write_gemm(false);
    mpcl_device_info info = verify(ctx);
    assert_int_equal(info.matrix_engine, MPCL_MATRIX_ENGINE_VERIFIED);
    assert_string_equal(info.matrix_engine_kind, "test-row");
    char want[256];
    int n = checks(ctx, false);
    snprintf(want, sizeof want,
             "plain loops, f16: 128/128 exact; bf16: 128/128 exact; mpcl-mma f16: "
             "%d/%d exact; bf16: %d/%d exact",
             n, n, n, n);
    assert_string_equal(info.matrix_engine_detail, want);
    assert_true(mpcl_plan_mma_usable(&info));
    assert_string_equal(mpcl__matrix_engine_program_option(&info), "");
    mpcl_context_destroy(ctx);
}

static void a_wrong_tile_is_broken(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    write_probe(true);
    write_gemm(false);
    mpcl_device_info info = verify(ctx);
    assert_int_equal(info.matrix_engine, MPCL_MATRIX_ENGINE_BROKEN);
    /* One element of each tile; the kernels are then not run at all. */
    assert_string_equal(info.matrix_engine_detail,
                        "plain loops, f16: 1/128 wrong; bf16: 1/128 wrong");
    assert_false(mpcl_plan_mma_usable(&info));
    mpcl_context_destroy(ctx);
}

static void a_gemm_without_beta_is_broken(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    /* Oclgrind interprets the stand-ins' 180,000 elements a dtype for a
     * minute and more; right_kernels_are_verified runs them there (its
     * checks of the buffers the verification allocates), and what beta
     * changes is a number, which every other run checks. */
    if (tu_slow_device(ctx)) {
        printf("a GEMM without beta: skipped on a slow device (numbers only)\n");
        mpcl_context_destroy(ctx);
        return;
    }
    write_probe(false);
    write_gemm(true);
    mpcl_device_info info = verify(ctx);
    assert_int_equal(info.matrix_engine, MPCL_MATRIX_ENGINE_BROKEN);
    assert_non_null(strstr(info.matrix_engine_detail, "mpcl-mma f16: "));
    char want[64];
    snprintf(want, sizeof want, "/%d wrong", checks(ctx, false));
    assert_non_null(strstr(info.matrix_engine_detail, want));
    assert_false(mpcl_plan_mma_usable(&info));
    mpcl_context_destroy(ctx);
}

/* The NVIDIA row's own mpcl-mma kernels, with the instruction computed by
 * the lanes (MPCL_MMA_EMULATE, as test_gemm runs them), pass the check. */
static void the_nvidia_kernels_in_emulation_are_verified(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    /* On PoCL alone (the whole suite, ASan's too), as test_gemm's emulated
     * run: Oclgrind interprets (~1e6 ops/s) 52 emulated launches here in
     * minutes (its memory checks of these kernels come from test_gemm's run
     * there), and Intel's compiler took half a minute of CI for the two
     * programs, the same code as on PoCL. */
    if (!tu_on_pocl(ctx)) {
        printf("the emulated kernels' verification: run on PoCL only\n");
        mpcl_context_destroy(ctx);
        return;
    }
    write_probe(false);
    /* The emulation's program option, as mpcl__matrix_engine_emulate gives it. */
    TU_ASSERT_OK(mpcl__matrix_engine_emulate(ctx));
    const char *option = mpcl__matrix_engine_program_option(mpcl_context_device(ctx));
    const mpcl__matrix_engine_row emulated = {
        "emulated", NULL, "test_mma_probe.cl", "plain loops", 32, option, "gemm_mma_nvidia.cl"};
    mpcl_device_info info = verify_with(ctx, &emulated);
    assert_int_equal(info.matrix_engine, MPCL_MATRIX_ENGINE_VERIFIED);
    char want[128];
    int n = checks(ctx, true);
    snprintf(want, sizeof want, "mpcl-mma f16: %d/%d exact; bf16: %d/%d exact", n, n, n, n);
    assert_non_null(strstr(info.matrix_engine_detail, want));
    mpcl_context_destroy(ctx);
}

static void missing_kernels_are_broken(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    write_probe(false);
    write_source("test_gemm_mma.cl",
                 "__kernel void not_the_gemm(__global float *x) { x[0] = 1; }\n");
    mpcl_device_info info = verify(ctx);
    assert_int_equal(info.matrix_engine, MPCL_MATRIX_ENGINE_BROKEN);
    assert_non_null(strstr(info.matrix_engine_detail, "mpcl-mma f16: did not build or run"));
    mpcl_context_destroy(ctx);
}

/* mpcl-mma's kernels are a program of their own (mpcl__engine_program): a
 * device without a verified engine is refused with the engine's detail
 * (with one, the kernel is there); the emulation may come after the
 * library's 16-bit programs, and the library's programs never hold the
 * engine's kernels, emulated or not. */
static void the_engine_kernels_are_a_program_apart(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const mpcl_device_info *d = mpcl_context_device(ctx);
    cl_program p;
    cl_kernel k;
    cl_int err;
    if (d->matrix_engine == MPCL_MATRIX_ENGINE_VERIFIED) {
        TU_ASSERT_OK(mpcl__engine_kernel(ctx, MPCL_DTYPE_BF16, "mpcl_gemm_mma", &k));
    } else {
        tu_expect_error(mpcl__engine_kernel(ctx, MPCL_DTYPE_BF16, "mpcl_gemm_mma", &k),
                        MPCL_ERR_UNSUPPORTED, "has no verified matrix engine");
        if (d->matrix_engine_detail[0])
            assert_non_null(strstr(mpcl_errmsg(), d->matrix_engine_detail));
    }
    tu_expect_error(mpcl__engine_program(ctx, MPCL_DTYPE_F32, &p), MPCL_ERR_DTYPE,
                    "f16 or bf16 storage, not f32");
    TU_ASSERT_OK(mpcl__program(ctx, MPCL_DTYPE_F16, &p));
    TU_ASSERT_OK(mpcl__matrix_engine_emulate(ctx));
    TU_ASSERT_OK(mpcl__program(ctx, MPCL_DTYPE_BF16, &p));
    assert_null(clCreateKernel(p, "mpcl_gemm_mma", &err));
    assert_int_equal(err, CL_INVALID_KERNEL_NAME);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(right_kernels_are_verified),
        cmocka_unit_test(a_wrong_tile_is_broken),
        cmocka_unit_test(a_gemm_without_beta_is_broken),
        cmocka_unit_test(missing_kernels_are_broken),
        cmocka_unit_test(the_engine_kernels_are_a_program_apart),
        cmocka_unit_test(the_nvidia_kernels_in_emulation_are_verified),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
