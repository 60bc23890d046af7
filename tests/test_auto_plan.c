/* `auto` by measurement (src/nn/auto_plan.c): the verdict is one of the
 * plans auto may take, says it was measured, is kept in the cache folder and
 * read back, is what a model created with policy auto runs, and
 * MPCL_AUTO=capability gives the capability rule unchanged. The suite's
 * environment sets MPCL_AUTO=capability so that no other test depends on a
 * timing; this one unsets it. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "testutil.h"

static char cache_dir[] = "/tmp/mpcl-auto-XXXXXX";

static int setup(void **state) {
    (void)state;
    unsetenv("MPCL_AUTO");
    return tu_cache_dir_make(cache_dir) && tu_cache_dir_add_programs(cache_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    tu_cache_dir_remove(cache_dir);
    return 0;
}

static mpcl_model_params small_params(void) {
    mpcl_model_params p = mpcl_model_default_params();
    p.inputs = 64;
    p.hidden[0] = 32;
    p.classes = 10;
    p.max_batch = 32;
    p.policy = MPCL_POLICY_AUTO;
    return p;
}

/* One of the plans auto may take here: float32 on mpcl-f32's default path, or
 * mixed_float16 with f16 storage on a GEMM that takes f16. */
static void assert_candidate(mpcl_context *ctx, const mpcl_plan *p) {
    assert_true(p->usable);
    assert_int_equal(p->policy, MPCL_POLICY_AUTO);
    if (p->resolved == MPCL_POLICY_FLOAT32) {
        mpcl_plan f32 = mpcl_context_plan(ctx, MPCL_POLICY_FLOAT32);
        assert_int_equal(p->storage, MPCL_DTYPE_F32);
        assert_int_equal(p->gemm, f32.gemm);
    } else {
        assert_int_equal(p->resolved, MPCL_POLICY_MIXED_FLOAT16);
        assert_int_equal(p->storage, MPCL_DTYPE_F16);
        /* f32 accumulation by the path the rule takes here, or HGEMM. */
        bool cpu = mpcl_context_device(ctx)->type == MPCL_DEVICE_TYPE_CPU;
        mpcl_gemm_path mixed = cpu ? MPCL_GEMM_MPCL_MIXED : MPCL_GEMM_CLBLAST_STAGED;
        assert_true(p->gemm == mixed || p->gemm == MPCL_GEMM_CLBLAST_HGEMM);
        assert_true(p->loss_scaling);
    }
}

static bool more_than_one_candidate(mpcl_context *ctx) {
    return mpcl_context_plan(ctx, MPCL_POLICY_MIXED_FLOAT16).usable;
}

/* A context where auto has more than one plan to choose from (the test is
 * skipped elsewhere), with the verdict for a model of this hidden width
 * measured and cached. */
static mpcl_context *measured(size_t hidden, mpcl_model_params *p, mpcl_plan *plan) {
    mpcl_context *ctx = tu_context();
    if (!more_than_one_candidate(ctx)) {
        mpcl_context_destroy(ctx);
        skip(); /* only float32 can run: nothing to measure */
    }
    *p = small_params();
    p->hidden[0] = hidden;
    TU_ASSERT_OK(mpcl_model_auto_plan(ctx, p, plan));
    return ctx;
}

/* Calls change on every verdict file in the cache folder; at least one. */
static void each_verdict(void (*change)(const char *path, const char *text), const char *text) {
    char verdicts[128];
    snprintf(verdicts, sizeof verdicts, "%s/verdicts", cache_dir);
    DIR *d = opendir(verdicts);
    assert_non_null(d);
    int changed = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char path[512];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", verdicts, e->d_name);
        if (e->d_name[0] == '.' || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        change(path, text);
        changed++;
    }
    closedir(d);
    assert_true(changed >= 1);
}

/* Overwrites bytes near the end: the entry's tag no longer matches. */
static void damage(const char *path, const char *text) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, -3, SEEK_END);
    fputs(text, f);
    fclose(f);
}

/* Replaces the verdict's body by text, kept valid as a cache entry (key and
 * tag), so that only its parsing can refuse it. */
static void rewrite(const char *path, const char *text) {
    unsigned char header[40];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(header, 1, sizeof header, f), sizeof header);
    fclose(f);
    mpcl__cache_key key;
    memcpy(key.bytes, header + 8, sizeof key.bytes); /* after the 8-byte magic */
    char folder[512];
    snprintf(folder, sizeof folder, "%.*s", (int)(strrchr(path, '/') - path), path);
    mpcl__cache_write(folder, key, (const unsigned char *)text, strlen(text));
}

static void verdict_is_measured_cached_and_used(void **state) {
    (void)state;
    mpcl_model_params p;
    mpcl_plan first, again;
    mpcl_context *ctx = measured(32, &p, &first);
    assert_candidate(ctx, &first);
    assert_non_null(strstr(first.reason, "auto measured: "));
    assert_non_null(strstr(first.reason, "float32/"));
    assert_non_null(strstr(first.reason, "mixed_float16/"));

    TU_ASSERT_OK(mpcl_model_auto_plan(ctx, &p, &again));
    assert_non_null(strstr(again.reason, "auto measured (cached): "));
    assert_int_equal(again.resolved, first.resolved);
    assert_int_equal(again.gemm, first.gemm);

    mpcl_model *m = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
    const mpcl_plan *used = mpcl_model_plan(m);
    assert_int_equal(used->resolved, first.resolved);
    assert_int_equal(used->gemm, first.gemm);
    assert_string_equal(used->reason, again.reason);
    mpcl_model_destroy(m);

    /* Another model shape is another verdict: measured, not read back. */
    p.hidden[0] = 48;
    TU_ASSERT_OK(mpcl_model_auto_plan(ctx, &p, &again));
    assert_non_null(strstr(again.reason, "auto measured: "));
    mpcl_context_destroy(ctx);
}

static void a_damaged_verdict_is_measured_again(void **state) {
    (void)state;
    mpcl_model_params p;
    mpcl_plan plan;
    mpcl_context *ctx = measured(40, &p, &plan);
    each_verdict(damage, "9 ");
    TU_ASSERT_OK(mpcl_model_auto_plan(ctx, &p, &plan));
    assert_candidate(ctx, &plan);
    assert_non_null(strstr(plan.reason, "auto measured: "));
    mpcl_context_destroy(ctx);
}

/* A verdict is read back only in the form write_verdict writes: plain
 * decimal numbers, one per candidate, single spaces, a newline. A '+', hex,
 * "inf", a blank or a figure too many is measured again, not read as some
 * other number. */
static void a_verdict_not_plain_decimal_is_measured_again(void **state) {
    (void)state;
    mpcl_model_params p;
    mpcl_plan plan;
    mpcl_context *ctx = measured(24, &p, &plan);
    size_t n = 0; /* the figures in the reason: one per candidate */
    for (const char *c = plan.reason; (c = strstr(c, " us/step")); c++) n++;
    char good[128] = "0";
    for (size_t i = 0; i < n; i++) strcat(good, " 1.5");
    strcat(good, "\n");
    /* The control: the well-formed verdict is read back as it is. */
    each_verdict(rewrite, good);
    TU_ASSERT_OK(mpcl_model_auto_plan(ctx, &p, &plan));
    assert_non_null(strstr(plan.reason, "(cached): "));
    assert_non_null(strstr(plan.reason, " 2 us/step"));
    static const char *const bad[][2] = {
        {"0 1.5", "+0 1.5"},      {" 1.5\n", " +1.5\n"}, {" 1.5\n", " 0x1p0\n"},
        {" 1.5\n", " inf\n"},     {"0 1.5", " 0 1.5"},   {" 1.5\n", " 1.5  \n"},
        {" 1.5\n", " 1.5 1.5\n"}, {"0 1.5", "-0 1.5"},   {"0 1.5", "0  1.5"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[160];
        const char *at = strstr(good, bad[i][0]);
        assert_non_null(at);
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good), good, bad[i][1],
                 at + strlen(bad[i][0]));
        each_verdict(rewrite, text);
        TU_ASSERT_OK(mpcl_model_auto_plan(ctx, &p, &plan));
        if (!strstr(plan.reason, "auto measured: "))
            fail_msg("verdict '%s' was read back: %s", text, plan.reason);
    }
    mpcl_context_destroy(ctx);
}

static void capability_rule_on_request(void **state) {
    (void)state;
    setenv("MPCL_AUTO", "capability", 1);
    mpcl_context *ctx = tu_context();
    mpcl_model_params p = small_params();
    mpcl_plan got, want = mpcl_context_plan(ctx, MPCL_POLICY_AUTO);
    TU_ASSERT_OK(mpcl_model_auto_plan(ctx, &p, &got));
    assert_memory_equal(&got, &want, sizeof got);
    mpcl_context_destroy(ctx);
    unsetenv("MPCL_AUTO");
}

/* A misspelt MPCL_AUTO (or MPCL_CACHE) is an error at context creation,
 * naming it, not a silent measurement (or a silently used cache). */
static void a_value_outside_the_set_stops_context_creation(void **state) {
    (void)state;
    static const char *const bad[][2] = {{"MPCL_AUTO", "capabilty"}, {"MPCL_CACHE", "no"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char named[64];
        snprintf(named, sizeof named, "%s='%s'", bad[i][0], bad[i][1]);
        setenv(bad[i][0], bad[i][1], 1);
        mpcl_context *ctx = NULL;
        mpcl_status st = mpcl_context_create(NULL, &ctx);
        unsetenv(bad[i][0]);
        if (st != MPCL_ERR_INVALID_ARG || ctx || !strstr(mpcl_errmsg(), named))
            fail_msg("%s: status %d, '%s'", named, (int)st, mpcl_errmsg());
    }
}

static void explicit_policies_are_not_measured(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_model_params p = small_params();
    p.policy = MPCL_POLICY_FLOAT32;
    mpcl_model *m = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
    mpcl_plan want = mpcl_context_plan(ctx, MPCL_POLICY_FLOAT32);
    assert_memory_equal(mpcl_model_plan(m), &want, sizeof want);
    mpcl_model_destroy(m);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(verdict_is_measured_cached_and_used),
        cmocka_unit_test(a_damaged_verdict_is_measured_again),
        cmocka_unit_test(a_verdict_not_plain_decimal_is_measured_again),
        cmocka_unit_test(capability_rule_on_request),
        cmocka_unit_test(a_value_outside_the_set_stops_context_creation),
        cmocka_unit_test(explicit_policies_are_not_measured),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
