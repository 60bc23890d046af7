/* The kernels area: embedded sources, per-dtype programs, build failures
 * with their log, and the on-disk binary cache (hit, miss, corrupt,
 * truncated, foreign, off). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "testutil.h"

static char cache_dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(cache_dir, sizeof cache_dir, "/tmp/mpcl-cache-test-XXXXXX");
    if (!tu_cache_dir_make(cache_dir)) return -1;
    unsetenv("MPCL_CACHE");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_cache_dir_remove(cache_dir);
    return 0;
}

/* The single entry in the cache folder (asserting there is exactly one and no
 * temp file was left behind). */
static void only_entry(char *path, size_t size) {
    DIR *d = opendir(cache_dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || e->d_type == DT_DIR) continue; /* verdicts/ */
        assert_null(strstr(e->d_name, ".tmp-"));
        snprintf(path, size, "%s/%s", cache_dir, e->d_name);
        n++;
    }
    closedir(d);
    assert_int_equal(n, 1);
}

static const char *source_a = "__kernel void a(__global float *x) { x[get_global_id(0)] = 1.0f; }";

static mpcl__cache_outcome build(mpcl_context *ctx, const char *src) {
    cl_program p = NULL;
    TU_ASSERT_OK(mpcl__program_build(ctx, src, "-cl-std=CL1.2", &p));
    assert_non_null(p);
    clReleaseProgram(p);
    return mpcl__cache_last_outcome(ctx);
}

/* A fill through the f32 program gives the right numbers. */
static void fill_runs(mpcl_context *ctx) {
    mpcl_tensor *t = NULL;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, 3, 5, &t));
    TU_ASSERT_OK(mpcl_tensor_fill(t, 2.5f));
    float got[15];
    TU_ASSERT_OK(mpcl_tensor_download_f32(t, got, 15));
    for (int i = 0; i < 15; i++) assert_true(got[i] == 2.5f);
    mpcl_tensor_destroy(t);
}

static void embedded_sources_are_there(void **state) {
    (void)state;
    size_t n = 0;
    char *common = mpcl__cl_source_load("common.cl", &n);
    assert_non_null(common);
    assert_true(n > 100 && strlen(common) == n);
    assert_non_null(strstr(common, "vstore_half_rte"));
    free(common);
    assert_null(mpcl__cl_source_load("no-such-file.cl", NULL));
}

static void programs_build_for_every_float_storage(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    TU_ASSERT_OK(mpcl_context_warm_up(ctx));
    cl_program p;
    /* One program per float dtype of the table, none for the others. */
    for (int d = 0; d < MPCL_DTYPE_COUNT; d++) {
        mpcl_status st = mpcl__program(ctx, (mpcl_dtype)d, &p);
        if (mpcl_dtype_is_float((mpcl_dtype)d))
            TU_ASSERT_OK(st);
        else
            assert_int_equal(st, MPCL_ERR_DTYPE);
    }
    assert_true(mpcl_dtype_is_float(MPCL_DTYPE_F32) && mpcl_dtype_is_float(MPCL_DTYPE_F16) &&
                mpcl_dtype_is_float(MPCL_DTYPE_BF16));
    assert_false(mpcl_dtype_is_float(MPCL_DTYPE_I32) || mpcl_dtype_is_float(MPCL_DTYPE_U8) ||
                 mpcl_dtype_is_float(MPCL_DTYPE_COUNT));
    assert_int_equal(mpcl__program(ctx, MPCL_DTYPE_COUNT, &p), MPCL_ERR_DTYPE);
    assert_int_equal(mpcl__program(ctx, MPCL_DTYPE_I32, &p), MPCL_ERR_DTYPE);
    cl_kernel k;
    assert_int_equal(mpcl__kernel(ctx, MPCL_DTYPE_F32, "no_such_kernel", &k), MPCL_ERR_OPENCL);
    assert_non_null(strstr(mpcl_context_errmsg(ctx), "CL_INVALID_KERNEL_NAME"));
    mpcl_context_destroy(ctx);
}

static void a_build_failure_carries_the_build_log(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    cl_program p = (cl_program)0x1;
    mpcl_status st = mpcl__program_build(
        ctx, "__kernel void broken(__global float *x) { x[0] = undeclared_name; }", "-cl-std=CL1.2",
        &p);
    assert_int_equal(st, MPCL_ERR_BUILD);
    assert_null(p);
    const char *msg = mpcl_context_errmsg(ctx);
    assert_non_null(strstr(msg, "CL_BUILD_PROGRAM_FAILURE"));
    assert_non_null(strstr(msg, "build log"));
    assert_non_null(strstr(msg, "undeclared_name"));
    assert_string_equal(msg, mpcl_errmsg());
    /* A failed build is never cached. */
    DIR *d = opendir(cache_dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) assert_true(e->d_name[0] == '.' || e->d_type == DT_DIR);
    closedir(d);
    mpcl_context_destroy(ctx);
}

/* What a cold build of `source` prints on stderr, with MPCL_VERBOSE=1 or
 * without. */
static char *stderr_of_build(mpcl_context *ctx, const char *source, bool verbose) {
    if (verbose)
        setenv("MPCL_VERBOSE", "1", 1);
    else
        unsetenv("MPCL_VERBOSE");
    FILE *captured = tmpfile();
    assert_non_null(captured);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0 && dup2(fileno(captured), 2) == 2);
    build(ctx, source);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    unsetenv("MPCL_VERBOSE");
    long end = ftell(captured);
    size_t n = end > 0 ? (size_t)end : 0;
    char *text = calloc(n + 1, 1);
    assert_non_null(text);
    rewind(captured);
    assert_int_equal(fread(text, 1, n, captured), n);
    fclose(captured);
    return text;
}

/* A build's warnings reach stderr only with MPCL_VERBOSE=1 (-w drops them
 * otherwise), so that the tools' --quiet runs stay silent on cold builds
 * (test_quiet). PoCL's clang is the driver that prints them there; Intel's
 * and Rusticl's keep them in the build log. */
static void build_warnings_reach_stderr_only_when_verbose(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    /* Oclgrind's compiler prints "1 warning generated." despite -w, and its
     * own reports, which oclgrind_check.py reads, share that stderr. */
    if (strstr(mpcl_context_device(ctx)->name, "Oclgrind")) {
        printf("build warnings on stderr: not checked under Oclgrind\n");
        mpcl_context_destroy(ctx);
        return;
    }
    bool prints = tu_on_pocl(ctx);
    for (int verbose = 0; verbose < 2; verbose++) {
        /* A source no driver's own cache has seen, so that it really builds. */
        char source[256];
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        snprintf(source, sizeof source,
                 "#warning mpcl test_kernels %ld %ld %d\n"
                 "__kernel void w(__global float *x) { x[0] = 1.0f; }\n",
                 (long)getpid(), (long)now.tv_nsec, verbose);
        char *text = stderr_of_build(ctx, source, verbose);
        bool warned = strstr(text, "warning") != NULL;
        if (!verbose && warned) fail_msg("a quiet build printed: %s", text);
        if (verbose && prints && !warned) fail_msg("MPCL_VERBOSE=1 printed no warning: '%s'", text);
        if (verbose && !prints) printf("MPCL_VERBOSE=1 on this driver printed: '%s'\n", text);
        free(text);
    }
    mpcl_context_destroy(ctx);
}

static void cache_miss_then_hit_across_contexts(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    assert_int_equal(build(ctx, source_a), MPCL__CACHE_MISS);
    char path[512];
    only_entry(path, sizeof path);
    assert_int_equal(build(ctx, source_a), MPCL__CACHE_HIT);
    mpcl_context_destroy(ctx);

    /* A fresh context loads the library program from the cache and it runs.
     * The folder gets the suite's entries, which programs_build_for_every_
     * float_storage made, so that a driver with a slow compiler (Intel's:
     * ~20 s a program) need not build it here again. */
    assert_true(tu_cache_dir_add_programs(cache_dir));
    ctx = tu_context();
    TU_ASSERT_OK(mpcl_context_warm_up(ctx));
    mpcl_context_destroy(ctx);
    ctx = tu_context();
    TU_ASSERT_OK(mpcl_context_warm_up(ctx));
    assert_int_equal(mpcl__cache_last_outcome(ctx), MPCL__CACHE_HIT);
    fill_runs(ctx);
    mpcl_context_destroy(ctx);
}

static void rewrite_entry(const char *path, long offset, const char *bytes, size_t n,
                          long truncate_to) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    if (n) {
        fseek(f, offset, SEEK_SET);
        fwrite(bytes, 1, n, f);
    }
    fclose(f);
    if (truncate_to >= 0) assert_int_equal(truncate(path, truncate_to), 0);
}

static void corrupt_truncated_and_foreign_entries_are_rebuilt(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    assert_int_equal(build(ctx, source_a), MPCL__CACHE_MISS);
    char path[512];
    only_entry(path, sizeof path);

    rewrite_entry(path, 88, "garbage!", 8, -1); /* payload changed: the tag fails */
    assert_int_equal(build(ctx, source_a), MPCL__CACHE_REJECTED);
    assert_int_equal(build(ctx, source_a), MPCL__CACHE_HIT); /* rewritten */

    rewrite_entry(path, 0, NULL, 0, 20); /* truncated inside the header */
    assert_int_equal(build(ctx, source_a), MPCL__CACHE_REJECTED);
    assert_int_equal(build(ctx, source_a), MPCL__CACHE_HIT);

    rewrite_entry(path, 0, "NOTMPCL!", 8, -1); /* not ours at all */
    assert_int_equal(build(ctx, source_a), MPCL__CACHE_REJECTED);
    assert_int_equal(build(ctx, source_a), MPCL__CACHE_HIT);

    /* Foreign: a valid entry for another key under this key's name. */
    char saved[600];
    snprintf(saved, sizeof saved, "%s.keep", cache_dir); /* outside the folder */
    assert_int_equal(rename(path, saved), 0);
    const char *source_b = "__kernel void b(__global float *x) { x[get_global_id(0)] = 2.0f; }";
    assert_int_equal(build(ctx, source_b), MPCL__CACHE_MISS);
    char path_b[512];
    only_entry(path_b, sizeof path_b);
    assert_int_equal(rename(saved, path_b), 0); /* a's entry now sits under b's name */
    assert_int_equal(build(ctx, source_b), MPCL__CACHE_REJECTED);
    assert_int_equal(build(ctx, source_b), MPCL__CACHE_HIT);
    mpcl_context_destroy(ctx);
}

/* The library's f32 and f16 programs (same kernels, other storage types)
 * with their bodies and tags swapped between the two entries, as a crafted
 * cache would hold them: each is rejected and rebuilt, and a fill through the
 * f32 program then gives the right numbers. The cache before tags accepted
 * such entries, and the wrong program then ran (crashes, or NaN in training). */
static void swapped_program_bodies_are_rebuilt(void **state) {
    (void)state;
    /* The suite's entries (programs_build_for_every_float_storage's), built
     * here where they are missing. */
    assert_true(tu_cache_dir_add_programs(cache_dir));
    mpcl_context *ctx = tu_context();
    cl_program p;
    char path32[512], path16[512];
    TU_ASSERT_OK(mpcl__program(ctx, MPCL_DTYPE_F32, &p));
    mpcl__cache_entry_path(path32, sizeof path32, cache_dir, mpcl__cache_last_key(ctx));
    TU_ASSERT_OK(mpcl__program(ctx, MPCL_DTYPE_F16, &p));
    mpcl__cache_entry_path(path16, sizeof path16, cache_dir, mpcl__cache_last_key(ctx));
    mpcl_context_destroy(ctx);

    /* Swap everything after the magic and the key (size, tag, body). */
    FILE *f32 = fopen(path32, "rb"), *f16 = fopen(path16, "rb");
    assert_non_null(f32);
    assert_non_null(f16);
    static unsigned char a[1 << 24], b[1 << 24];
    size_t na = fread(a, 1, sizeof a, f32), nb = fread(b, 1, sizeof b, f16);
    fclose(f32);
    fclose(f16);
    assert_true(na > 40 && na < sizeof a && nb > 40 && nb < sizeof b);
    unsigned char head[40];
    memcpy(head, a, 40);
    memcpy(a, b, 40);
    memcpy(b, head, 40); /* a: f16's key with f32's body and tag; b the other way */
    FILE *w = fopen(path32, "wb");
    assert_non_null(w);
    assert_int_equal(fwrite(b, 1, nb, w), nb);
    fclose(w);
    w = fopen(path16, "wb");
    assert_non_null(w);
    assert_int_equal(fwrite(a, 1, na, w), na);
    fclose(w);

    ctx = tu_context();
    TU_ASSERT_OK(mpcl__program(ctx, MPCL_DTYPE_F32, &p));
    assert_int_equal(mpcl__cache_last_outcome(ctx), MPCL__CACHE_REJECTED);
    TU_ASSERT_OK(mpcl__program(ctx, MPCL_DTYPE_F16, &p));
    assert_int_equal(mpcl__cache_last_outcome(ctx), MPCL__CACHE_REJECTED);
    fill_runs(ctx);
    mpcl_context_destroy(ctx);

    /* Rebuilt: both entries load again. */
    ctx = tu_context();
    TU_ASSERT_OK(mpcl__program(ctx, MPCL_DTYPE_F32, &p));
    assert_int_equal(mpcl__cache_last_outcome(ctx), MPCL__CACHE_HIT);
    TU_ASSERT_OK(mpcl__program(ctx, MPCL_DTYPE_F16, &p));
    assert_int_equal(mpcl__cache_last_outcome(ctx), MPCL__CACHE_HIT);
    mpcl_context_destroy(ctx);
}

static void cache_can_be_turned_off(void **state) {
    (void)state;
    setenv("MPCL_CACHE", "0", 1);
    mpcl_context *ctx = tu_context();
    assert_int_equal(build(ctx, source_a), MPCL__CACHE_OFF);
    mpcl_context_destroy(ctx);
    unsetenv("MPCL_CACHE");
    DIR *d = opendir(cache_dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) assert_true(e->d_name[0] == '.' || e->d_type == DT_DIR);
    closedir(d);
}

/* A context reads the fp16/bf16 verification of an earlier one on the same
 * device back from the cache (verify_cache.c), with the same outcome; a
 * damaged verdict is verified again; MPCL_CACHE=0 verifies every time; a
 * changed source of what the verification runs is verified again. */
static void verification_verdict_is_cached(void **state) {
    (void)state;
    mpcl_context *first = tu_context();
    assert_false(first->verdict_cached);
    mpcl_context *second = tu_context();
    assert_true(second->verdict_cached);
    const mpcl_device_info *a = mpcl_context_device(first), *b = mpcl_context_device(second);
    assert_int_equal(a->fp16_math, b->fp16_math);
    assert_int_equal(a->fp16_storage, b->fp16_storage);
    assert_int_equal(a->bf16_storage, b->bf16_storage);
    assert_int_equal(a->bf16_dot, b->bf16_dot);
    assert_int_equal(a->matrix_engine, b->matrix_engine);
    assert_string_equal(a->fp16_detail, b->fp16_detail);
    assert_string_equal(a->bf16_detail, b->bf16_detail);
    assert_string_equal(a->bf16_dot_detail, b->bf16_dot_detail);
    assert_string_equal(a->matrix_engine_detail, b->matrix_engine_detail);
    assert_string_equal(a->matrix_engine_kind, b->matrix_engine_kind);
    mpcl_context_destroy(second);

    char verdicts[128], path[512];
    snprintf(verdicts, sizeof verdicts, "%s/verdicts", cache_dir);
    DIR *d = opendir(verdicts);
    assert_non_null(d);
    struct dirent *e;
    int damaged = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", verdicts, e->d_name);
        FILE *f = fopen(path, "r+b");
        assert_non_null(f);
        fseek(f, -2, SEEK_END);
        fputc('x', f);
        fclose(f);
        damaged++;
    }
    closedir(d);
    assert_int_equal(damaged, 1);
    second = tu_context();
    assert_false(second->verdict_cached);
    assert_int_equal(mpcl_context_device(second)->fp16_storage, a->fp16_storage);
    mpcl_context_destroy(second);

    /* A FIFO in the verdict's place is ignored, never waited on: alarm()
     * turns a blocking open into a failure instead of a hang. */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(60);
    second = tu_context();
    alarm(0);
    assert_false(second->verdict_cached);
    assert_int_equal(mpcl_context_device(second)->fp16_storage, a->fp16_storage);
    mpcl_context_destroy(second);

    setenv("MPCL_CACHE", "0", 1);
    second = tu_context();
    assert_false(second->verdict_cached);
    mpcl_context_destroy(second);
    unsetenv("MPCL_CACHE");

    /* The matrix engine's verification runs its mpcl-mma kernels, so another
     * version of their source (MPCL_CL_DIR overlays that one file) is
     * another verdict, verified afresh; the control, with the FIFO gone and
     * the verdict written again, reads it back. */
    assert_int_equal(unlink(path), 0);
    mpcl_context_destroy(tu_context());
    second = tu_context();
    assert_true(second->verdict_cached);
    mpcl_context_destroy(second);
    char overlay[64], file[128];
    assert_int_equal(tu_tmpdir_make(overlay, "engine-source"), 0);
    char *text = mpcl__cl_source_load("gemm_mma_nvidia.cl", NULL);
    assert_non_null(text);
    snprintf(file, sizeof file, "%s/gemm_mma_nvidia.cl", overlay);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fprintf(f, "%s\n// another version\n", text);
    fclose(f);
    free(text);
    setenv("MPCL_CL_DIR", overlay, 1);
    second = tu_context();
    unsetenv("MPCL_CL_DIR");
    assert_false(second->verdict_cached);
    mpcl_context_destroy(second);
    assert_int_equal(tu_tmpdir_remove(overlay), 0);
    mpcl_context_destroy(first);
}

/* The one verdict file in the cache folder's verdicts/, its key read from
 * the entry's header (after the 8-byte magic). */
static void verdict_entry(char *folder, size_t fsize, mpcl__cache_key *key) {
    snprintf(folder, fsize, "%s/verdicts", cache_dir);
    DIR *d = opendir(folder);
    assert_non_null(d);
    struct dirent *e;
    char path[1024] = "";
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
    closedir(d);
    unsigned char header[40];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(header, 1, sizeof header, f), sizeof header);
    fclose(f);
    memcpy(key->bytes, header + 8, sizeof key->bytes);
}

/* A verdict is read back only in the exact form written: its outcomes
 * through the strict number parser, single spaces. Each variant is kept a
 * valid cache entry, so only the parsing can refuse it. */
static void a_verdict_not_in_its_written_form_is_verified_again(void **state) {
    (void)state;
    mpcl_context *first = tu_context();
    char folder[512];
    mpcl__cache_key key;
    verdict_entry(folder, sizeof folder, &key);
    size_t size = 0;
    int rejected = 0;
    unsigned char *body = mpcl__cache_read(folder, key, &size, &rejected);
    assert_non_null(body);
    char good[4096];
    assert_true(size < sizeof good);
    memcpy(good, body, size);
    good[size] = '\0';
    free(body);
    const char *rest = strchr(good, '\n');
    assert_non_null(rest);
    const mpcl_device_info *a = mpcl_context_device(first);
    int m = (int)a->fp16_math, s = (int)a->fp16_storage, b = (int)a->bf16_storage,
        d = (int)a->bf16_dot, e = (int)a->matrix_engine;
    const char *forms[] = {"%d %d %d %d %d",   "+%d %d %d %d %d", "%d  %d %d %d %d",
                           " %d %d %d %d %d",  "%d %d %d %d %d ", "%d %d %d %d",
                           "%d %d %d %d %d 0", "0x%d %d %d %d %d"};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        char text[4200];
        int n = snprintf(text, sizeof text, forms[i], m, s, b, d, e);
        snprintf(text + n, sizeof text - (size_t)n, "%s", rest);
        mpcl__cache_write(folder, key, (const unsigned char *)text, strlen(text));
        mpcl_context *ctx = tu_context();
        if (ctx->verdict_cached != (i == 0))
            fail_msg("verdict first line '%s': cached %d", forms[i], (int)ctx->verdict_cached);
        assert_int_equal(mpcl_context_device(ctx)->fp16_storage, a->fp16_storage);
        mpcl_context_destroy(ctx);
    }
    mpcl_context_destroy(first);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(embedded_sources_are_there),
        /* In the suite's cache folder: what the programs are, not how the
         * cache gets them, and what it builds the tests below copy. */
        cmocka_unit_test(programs_build_for_every_float_storage),
        cmocka_unit_test_setup_teardown(a_build_failure_carries_the_build_log, setup, teardown),
        cmocka_unit_test_setup_teardown(build_warnings_reach_stderr_only_when_verbose, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(cache_miss_then_hit_across_contexts, setup, teardown),
        cmocka_unit_test_setup_teardown(corrupt_truncated_and_foreign_entries_are_rebuilt, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(swapped_program_bodies_are_rebuilt, setup, teardown),
        cmocka_unit_test_setup_teardown(a_verdict_not_in_its_written_form_is_verified_again, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(cache_can_be_turned_off, setup, teardown),
        cmocka_unit_test_setup_teardown(verification_verdict_is_cached, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
