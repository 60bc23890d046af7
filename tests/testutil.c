#define _GNU_SOURCE
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define TU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_ASAN 1
#endif
#endif

mpcl_context *tu_context(void) {
    mpcl_context *ctx = NULL;
    mpcl_status st = mpcl_context_create(NULL, &ctx);
    if (st != MPCL_OK) fail_msg("mpcl_context_create: %s", mpcl_errmsg());
    return ctx;
}

bool tu_slow_device(const mpcl_context *ctx) {
    const mpcl_device_info *d = mpcl_context_device(ctx);
    return strstr(d->name, "Oclgrind") != NULL || strstr(d->platform, "rusticl") != NULL;
}

bool tu_on_pocl(const mpcl_context *ctx) {
    return strstr(mpcl_context_device(ctx)->platform, "Portable Computing Language") != NULL;
}

tu_rng tu_rng_make(uint64_t seed) {
    tu_rng r = {seed ? seed : 0x9e3779b97f4a7c15ull};
    return r;
}

static uint64_t next(tu_rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1dull;
}

double tu_uniform(tu_rng *r, double lo, double hi) {
    return lo + (hi - lo) * (double)(next(r) >> 11) * 0x1p-53;
}

void tu_fill_uniform(tu_rng *r, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = (float)tu_uniform(r, lo, hi);
}

float tu_poison_f32(void) {
    const uint32_t bits = 0x7fc0dead;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

bool tu_check_close(const char *what, const float *got, const double *want, size_t n, double atol,
                    double rtol, double norm_tol) {
    return tu_check_close_slack(what, got, want, NULL, n, atol, rtol, norm_tol);
}

bool tu_check_close_slack(const char *what, const float *got, const double *want,
                          const double *slack, size_t n, double atol, double rtol,
                          double norm_tol) {
    size_t bad = 0;
    double diff2 = 0, want2 = 0;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i], s = slack ? slack[i] : 0.0;
        bool ok;
        if (isnan(w))
            ok = isnan(g);
        else if (isinf(w))
            ok = g == w;
        else if (isnan(g) || isinf(g))
            ok = false;
        else {
            double over = fmax(fabs(g - w) - s, 0.0);
            ok = over <= atol + rtol * fabs(w);
            diff2 += over * over;
            want2 += w * w;
        }
        if (!ok && bad++ < 5)
            fprintf(stderr, "%s: element %zu: got %.9g, want %.9g (|diff| %.3g, slack %.3g)\n",
                    what, i, g, w, fabs(g - w), s);
    }
    if (bad) {
        fprintf(stderr, "%s: %zu of %zu elements out of tolerance (atol %.3g, rtol %.3g)\n", what,
                bad, n, atol, rtol);
        return false;
    }
    double norm = sqrt(diff2) / fmax(sqrt(want2), 1e-30);
    if (norm > norm_tol) {
        fprintf(stderr, "%s: normalized error %.3g > %.3g\n", what, norm, norm_tol);
        return false;
    }
    return true;
}

mpcl_tensor *tu_tensor(mpcl_context *ctx, mpcl_dtype dtype, size_t rows, size_t cols) {
    mpcl_tensor *t = NULL;
    TU_ASSERT_OK(mpcl_tensor_create(ctx, dtype, rows, cols, &t));
    return t;
}

void tu_poison(mpcl_tensor *t) {
    size_t n = mpcl_tensor_count(t);
    mpcl_dtype dtype = mpcl_tensor_dtype(t);
    if (dtype == MPCL_DTYPE_F16 || dtype == MPCL_DTYPE_BF16) {
        uint16_t *h = malloc(n * sizeof *h);
        for (size_t i = 0; i < n; i++) h[i] = TU_POISON_16(dtype);
        TU_ASSERT_OK(mpcl_tensor_upload_raw(t, h, n * sizeof *h));
        free(h);
    } else {
        float *f = malloc(n * sizeof *f);
        for (size_t i = 0; i < n; i++) f[i] = tu_poison_f32();
        TU_ASSERT_OK(mpcl_tensor_upload_raw(t, f, n * sizeof *f));
        free(f);
    }
}

uint64_t tu_seed(const char *test) {
    const char *replay = getenv("MPCL_TEST_SEED");
    if (replay && *replay) {
        char *end;
        errno = 0;
        unsigned long long seed = strtoull(replay, &end, 10);
        if (errno || *end || *replay == '-')
            fail_msg("MPCL_TEST_SEED=%s: not a seed (a decimal number, as the tests print)",
                     replay);
        fprintf(stderr, "%s: seed %llu (MPCL_TEST_SEED)\n", test, seed);
        return seed;
    }
    uint64_t seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)clock();
    fprintf(stderr, "%s: seed %llu\n", test, (unsigned long long)seed);
    return seed;
}

float tu_stored(mpcl_dtype dtype, float x) {
    if (dtype == MPCL_DTYPE_F16) return mpcl_f16_to_f32(mpcl_f32_to_f16(x));
    if (dtype == MPCL_DTYPE_BF16) return mpcl_bf16_to_f32(mpcl_f32_to_bf16(x));
    return x;
}

tu_rounding tu_storage_rounding(mpcl_dtype dtype) {
    if (dtype == MPCL_DTYPE_F16) return (tu_rounding){0x1p-11, 0x1p-25};
    if (dtype == MPCL_DTYPE_BF16) return (tu_rounding){0x1p-8, 0x1p-134};
    return (tu_rounding){0, 0};
}

mpcl_tensor *tu_tensor_from(mpcl_context *ctx, mpcl_dtype dtype, size_t rows, size_t cols,
                            const float *x) {
    mpcl_tensor *t = tu_tensor(ctx, dtype, rows, cols);
    TU_ASSERT_OK(mpcl_tensor_upload_f32(t, x, rows * cols));
    return t;
}

mpcl_tensor *tu_tensor_poisoned(mpcl_context *ctx, mpcl_dtype dtype, size_t rows, size_t cols) {
    mpcl_tensor *t = tu_tensor(ctx, dtype, rows, cols);
    tu_poison(t);
    return t;
}

float *tu_download(const mpcl_tensor *t) {
    size_t n = mpcl_tensor_count(t);
    float *x = malloc(n * sizeof *x);
    TU_ASSERT_OK(mpcl_tensor_download_f32(t, x, n));
    return x;
}

double *tu_to_double(const float *x, size_t n) {
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

double tu_norm_tol(double atol, double rtol, const double *want, size_t n) {
    double w2 = 0;
    for (size_t i = 0; i < n; i++) w2 += want[i] * want[i];
    return rtol + atol * sqrt((double)n) / fmax(sqrt(w2), 1e-30);
}

bool tu_still_poisoned(const mpcl_tensor *t) {
    size_t bytes = mpcl_tensor_bytes(t);
    unsigned char *raw = malloc(bytes);
    TU_ASSERT_OK(mpcl_tensor_download_raw(t, raw, bytes));
    bool same = true;
    mpcl_dtype dt = mpcl_tensor_dtype(t);
    if (dt == MPCL_DTYPE_F16 || dt == MPCL_DTYPE_BF16) {
        for (size_t i = 0; i < bytes / 2; i++) {
            uint16_t h;
            memcpy(&h, raw + 2 * i, 2);
            same = same && h == TU_POISON_16(dt);
        }
    } else {
        float p = tu_poison_f32();
        for (size_t i = 0; i < bytes / 4; i++) same = same && memcmp(raw + 4 * i, &p, 4) == 0;
    }
    free(raw);
    return same;
}

float *tu_model_state(mpcl_model *m, size_t *n_out) {
    size_t n = 0, np = mpcl_model_param_count(m), nb = mpcl_model_buffer_count(m);
    for (size_t i = 0; i < np; i++) n += MPCL_OPTIM_SLOT_COUNT * mpcl_model_param(m, i)->count;
    for (size_t i = 0; i < nb; i++) n += mpcl_model_buffer(m, i)->count;
    float *buf = calloc(n ? n : 1, sizeof *buf), *p = buf;
    assert_non_null(buf);
    for (int slot = 0; slot < MPCL_OPTIM_SLOT_COUNT; slot++)
        for (size_t i = 0; i < np; i++) {
            size_t count = mpcl_model_param(m, i)->count;
            if (mpcl_model_has_slot(m, (mpcl_optim_slot)slot))
                TU_ASSERT_OK(mpcl_model_read_param(m, i, (mpcl_optim_slot)slot, p, count));
            p += count;
        }
    for (size_t i = 0; i < nb; i++) {
        size_t count = mpcl_model_buffer(m, i)->count;
        TU_ASSERT_OK(mpcl_model_read_buffer(m, i, p, count));
        p += count;
    }
    *n_out = n;
    return buf;
}

float *tu_param_grads(mpcl_model *m, size_t index) {
    const mpcl_param_info *r = mpcl_model_param(m, index);
    float *arena = tu_download(mpcl_model_grad_arena(m));
    float *g = malloc(r->count * sizeof *g);
    assert_non_null(g);
    memcpy(g, arena + r->offset, r->count * sizeof *g);
    free(arena);
    return g;
}

/* The central difference of element j of parameter i (its master weights
 * w, count of them) at step h; w[j] is put back. */
static double central_difference(mpcl_model *m, size_t i, float *w, size_t count, size_t j,
                                 double h, tu_loss_fn loss, void *arg) {
    float w0 = w[j], up = (float)((double)w0 + h), down = (float)((double)w0 - h);
    w[j] = up;
    TU_ASSERT_OK(mpcl_model_write_param(m, i, MPCL_OPTIM_SLOT_MASTER, w, count));
    double l_up = loss(m, arg);
    w[j] = down;
    TU_ASSERT_OK(mpcl_model_write_param(m, i, MPCL_OPTIM_SLOT_MASTER, w, count));
    double l_down = loss(m, arg);
    w[j] = w0;
    return (l_up - l_down) / ((double)up - (double)down);
}

size_t tu_check_param_gradients(mpcl_model *m, double h, tu_loss_fn loss, void *arg, double atol,
                                double rtol, double norm_tol) {
    size_t checked = 0;
    for (size_t i = 0; i < mpcl_model_param_count(m); i++) {
        const mpcl_param_info *r = mpcl_model_param(m, i);
        float *g = tu_param_grads(m, i), *w = malloc(r->count * sizeof *w);
        double *fd = malloc(r->count * sizeof *fd), *slack = malloc(r->count * sizeof *slack);
        assert_non_null(w);
        assert_non_null(fd);
        assert_non_null(slack);
        TU_ASSERT_OK(mpcl_model_read_param(m, i, MPCL_OPTIM_SLOT_MASTER, w, r->count));
        for (size_t j = 0; j < r->count; j++) {
            double d1 = central_difference(m, i, w, r->count, j, h, loss, arg);
            double d2 = central_difference(m, i, w, r->count, j, h / 2, loss, arg);
            fd[j] = (4 * d2 - d1) / 3;
            slack[j] = fabs(d1 - d2);
        }
        TU_ASSERT_OK(mpcl_model_write_param(m, i, MPCL_OPTIM_SLOT_MASTER, w, r->count));
        if (!tu_check_close_slack(r->name, g, fd, slack, r->count, atol, rtol, norm_tol))
            fail_msg("%s: the analytic gradient is not the finite difference", r->name);
        checked += r->count;
        free(g);
        free(w);
        free(fd);
        free(slack);
    }
    return checked;
}

/* MPCL_CACHE_DIR as the test started (NULL: unset), kept by the first
 * tu_cache_dir_make. */
static bool suite_cache_kept;
static char *suite_cache;

bool tu_cache_dir_make(char *template_path) {
    if (!suite_cache_kept) {
        const char *dir = getenv("MPCL_CACHE_DIR");
        suite_cache = dir ? strdup(dir) : NULL;
        suite_cache_kept = true;
    }
    if (!mkdtemp(template_path)) return false;
    setenv("MPCL_CACHE_DIR", template_path, 1);
    return true;
}

static bool copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    bool ok = out != NULL;
    char buf[1 << 16];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    if (out && fclose(out) != 0) ok = false;
    if (in) fclose(in);
    return ok;
}

bool tu_cache_dir_add_programs(const char *dir) {
    DIR *d = suite_cache ? opendir(suite_cache) : NULL;
    if (!d) return true; /* nothing to copy: the programs are built */
    bool ok = true;
    struct dirent *e;
    while (ok && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (e->d_type != DT_REG || len < 4 || strcmp(e->d_name + len - 4, ".bin") != 0) continue;
        char from[4096], to[4096];
        snprintf(from, sizeof from, "%s/%s", suite_cache, e->d_name);
        snprintf(to, sizeof to, "%s/%s", dir, e->d_name);
        ok = copy_file(from, to);
    }
    closedir(d);
    return ok;
}

void tu_cache_dir_remove(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char path[512];
            if (e->d_name[0] == '.') continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (e->d_type == DT_DIR)
                tu_cache_dir_remove(path); /* verdicts/ */
            else
                unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
    if (!suite_cache_kept) return; /* not a folder of tu_cache_dir_make */
    if (suite_cache)
        setenv("MPCL_CACHE_DIR", suite_cache, 1);
    else
        unsetenv("MPCL_CACHE_DIR");
}

/* The process's mapped bytes now: the first field of /proc/self/statm, in pages. */
static size_t mapped_bytes(void) {
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%lu", &pages) != 1) fail_msg("cannot read /proc/self/statm");
    fclose(f);
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

bool tu_env_is(const char *var, const char *value) {
    const char *v = getenv(var);
    return v && strcmp(v, value) == 0;
}

int tu_run_with_each(const char *name, const struct CMUnitTest *tests, size_t count,
                     CMFixtureFunction setup, CMFixtureFunction teardown, const char *var,
                     const char *const *values) {
    int failed = 0;
    for (size_t i = 0; values[i]; i++) {
        setenv(var, values[i], 1);
        fprintf(stderr, "# %s=%s\n", var, values[i]);
        failed += _cmocka_run_group_tests(name, tests, count, setup, teardown);
    }
    unsetenv(var); /* the tests after these see the default */
    return failed;
}

int tu_run_memory_limited(size_t extra, int (*fn)(void *), void *arg, bool *limited) {
#ifdef TU_ASAN
    *limited = false;
#else
    *limited = true;
#endif
    size_t limit = mapped_bytes() + extra;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) fail_msg("fork failed");
    if (pid == 0) {
        if (*limited) {
            struct rlimit rl = {(rlim_t)limit, (rlim_t)limit};
            if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(254);
        }
        int r = fn(arg);
        fflush(NULL);
        _exit(r & 0xff);
    }
    int ws;
    if (waitpid(pid, &ws, 0) != pid) fail_msg("waitpid failed");
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

unsigned char *tu_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n ? *n : 1);
    if (!b || fread(b, 1, *n, f) != *n) fail_msg("cannot read %s", path);
    fclose(f);
    return b;
}

void tu_expect_error(mpcl_status got, mpcl_status want, const char *needle) {
    if (got != want)
        fail_msg("expected %s, got %s: %s", mpcl_status_name(want), mpcl_status_name(got),
                 got == MPCL_OK ? "" : mpcl_errmsg());
    if (!strstr(mpcl_errmsg(), needle))
        fail_msg("message \"%s\" does not name \"%s\"", mpcl_errmsg(), needle);
}

int tu_tmpdir_make(char dir[64], const char *name) {
    snprintf(dir, 64, "/tmp/mpcl-test-%s-XXXXXX", name);
    return mkdtemp(dir) ? 0 : -1;
}

int tu_tmpdir_remove(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

mpcl_model_params tu_token_model_params(size_t T, size_t V, size_t P, size_t C, size_t max_batch,
                                        mpcl_policy policy) {
    char text[256];
    snprintf(text, sizeof text,
             "input_shape=%zu; token_pos_embedding vocabulary_size=%zu sequence_length=%zu "
             "embedding_dim=%zu; dense units=%zu",
             T, V, P, C, V);
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(mpcl_model_spec_parse(NULL, text, &p));
    p.classes = V;
    p.max_batch = max_batch;
    p.policy = policy;
    return p;
}

mpcl_tensor *tu_ids_tensor(mpcl_context *ctx, size_t B, size_t T, const int32_t *ids) {
    mpcl_tensor *t = tu_tensor(ctx, MPCL_DTYPE_I32, B, T);
    TU_ASSERT_OK(mpcl_tensor_upload_i32(t, ids, B * T));
    return t;
}

double tu_eval_loss(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *y, mpcl_loss_stats *s) {
    mpcl_loss_stats own;
    if (!s) s = &own;
    TU_ASSERT_OK(mpcl_model_eval_step(m, x, y));
    TU_ASSERT_OK(mpcl_model_read_eval_stats(m, s, true));
    assert_true(s->terms > 0);
    return s->loss_sum / (double)s->terms;
}

double tu_batch_loss(mpcl_model *m, void *xy) {
    mpcl_tensor **t = xy;
    return tu_eval_loss(m, t[0], t[1], NULL);
}
