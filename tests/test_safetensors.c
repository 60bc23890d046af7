/* safetensors: write -> read round trips over every dtype, a byte-exact file,
 * an independent Python reader (tests/safetensors_check.py), every kind of
 * malformed file with its exact status and message, prefix/bit-flip sweeps
 * that must fail cleanly, and the atomicity of the writer. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

/* ---- files and folders ---- */

typedef struct tmpdir {
    char path[64];
} tmpdir;

static void tmp_make(tmpdir *d) {
    snprintf(d->path, sizeof d->path, "/tmp/mpcl-test-st-XXXXXX");
    assert_non_null(mkdtemp(d->path));
}

static int count_entries(const char *dir) {
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(dp);
    return n;
}

/* Removes the folder; one level of subfolders (the tests make at most that). */
static void rm_tree(const char *dir) {
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    struct dirent *e;
    char p[512];
    while ((e = readdir(dp)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        assert_int_equal(lstat(p, &sb), 0);
        if (S_ISDIR(sb.st_mode))
            rm_tree(p);
        else
            assert_int_equal(unlink(p), 0);
    }
    closedir(dp);
    assert_int_equal(rmdir(dir), 0);
}

static unsigned char *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n ? *n : 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spit(const char *p, const void *data, size_t n) {
    /* A fresh file rather than a truncated one: ext4 flushes a file that is
     * truncated and rewritten on close, which made the sweeps take seconds. */
    (void)unlink(p);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* A file made by hand: u64 length of `header`, the header, then `data`. */
static void write_st(const char *p, const char *header, const void *data, size_t n) {
    size_t h = strlen(header);
    unsigned char *b = malloc(8 + h + n);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    if (n) memcpy(b + 8 + h, data, n);
    spit(p, b, 8 + h + n);
    free(b);
}

/* Reading p must fail with `status`, leave *out NULL, and the message must
 * hold every one of the NULL-terminated fragments. */
static void expect_read_fail(const char *p, mpcl_status status, ...) {
    mpcl_safetensors *st = (mpcl_safetensors *)&st;
    mpcl_status s = mpcl_safetensors_read(p, &st);
    if (s != status)
        fail_msg("expected %s, got %s: %s", mpcl_status_name(status), mpcl_status_name(s),
                 s == MPCL_OK ? "" : mpcl_errmsg());
    assert_null(st);
    va_list ap;
    va_start(ap, status);
    const char *frag;
    while ((frag = va_arg(ap, const char *)) != NULL)
        if (!strstr(mpcl_errmsg(), frag)) fail_msg("'%s' not in: %s", frag, mpcl_errmsg());
    va_end(ap);
}

/* A file with this header and `n` zero data bytes must fail as a format error
 * whose message holds `frag`. */
static void expect_header_fail(const tmpdir *d, const char *header, size_t n, const char *frag) {
    char p[128];
    snprintf(p, sizeof p, "%s/bad.safetensors", d->path);
    void *zeros = calloc(1, n ? n : 1);
    assert_non_null(zeros);
    write_st(p, header, zeros, n);
    free(zeros);
    expect_read_fail(p, MPCL_ERR_FORMAT, frag, "bad.safetensors'", NULL);
}

/* ---- the sample checkpoint ---- */

enum { NT = 10 };

typedef struct sample {
    float kernel[12], bias[4], empty[1];
    uint16_t half[6], bf16[3];
    int64_t step;
    int32_t ints[5];
    uint8_t bytes[7];
    double f64[2];
    int8_t i8[3];
    mpcl_st_tensor t[NT];
    mpcl_st_meta meta[3];
} sample;

/* IEEE binary16 bit patterns and the values they are exactly. */
static const uint16_t HALF_BITS[6] = {0x3e00, 0xc000, 0x7bff, 0x0400, 0x3555, 0x0001};
static const double HALF_VALUES[6] = {
    1.5, -2.0, 65504.0, 6.103515625e-05, 0.333251953125, 5.960464477539063e-08};
static const uint16_t BF16_BITS[3] = {0x3f80, 0xc040, 0x4049};
static const double BF16_VALUES[3] = {1.0, -3.0, 3.140625};

static const char *NOTE =
    "quote\" backslash\\ slash/ newline\n tab\t ctrl\x01\x1f "
    "accents \xc3\xa9\xc3\xa8 emoji \xf0\x9f\x99\x82 end";

static void mk(mpcl_st_tensor *t, const char *name, mpcl_st_dtype dtype, size_t ndim,
               const size_t *shape, const void *data) {
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = dtype;
    t->ndim = ndim;
    for (size_t i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->data = data;
}

static void make_sample(sample *s, uint64_t seed) {
    tu_rng r = tu_rng_make(seed);
    tu_fill_uniform(&r, s->kernel, 12, -2.0f, 2.0f);
    tu_fill_uniform(&r, s->bias, 4, -1.0f, 1.0f);
    memcpy(s->half, HALF_BITS, sizeof s->half);
    memcpy(s->bf16, BF16_BITS, sizeof s->bf16);
    s->step = 1234567890123ll;
    const int32_t ints[5] = {-1, 0, 7, INT32_MAX, INT32_MIN};
    memcpy(s->ints, ints, sizeof ints);
    for (int i = 0; i < 7; i++) s->bytes[i] = (uint8_t)(i * 40 + 15);
    s->f64[0] = 0.1;
    s->f64[1] = -1e300;
    s->i8[0] = -128;
    s->i8[1] = 0;
    s->i8[2] = 127;
    /* The odd-sized U8 and I8 come first on purpose: the writer must still
     * align every wider tensor. */
    size_t k34[2] = {3, 4}, b4[1] = {4}, h23[2] = {2, 3}, b3[1] = {3}, i5[1] = {5}, u7[1] = {7},
           f2[1] = {2}, e03[2] = {0, 3};
    mk(&s->t[0], "mask", MPCL_ST_U8, 1, u7, s->bytes);
    mk(&s->t[1], "dense_0.kernel", MPCL_ST_F32, 2, k34, s->kernel);
    mk(&s->t[2], "dense_0.bias", MPCL_ST_F32, 1, b4, s->bias);
    mk(&s->t[3], "half", MPCL_ST_F16, 2, h23, s->half);
    mk(&s->t[4], "step", MPCL_ST_I64, 0, NULL, &s->step);
    mk(&s->t[5], "labels", MPCL_ST_I32, 1, i5, s->ints);
    mk(&s->t[6], "small", MPCL_ST_I8, 1, b3, s->i8);
    mk(&s->t[7], "f64", MPCL_ST_F64, 1, f2, s->f64);
    mk(&s->t[8], "bf16", MPCL_ST_BF16, 1, b3, s->bf16);
    mk(&s->t[9], "empty \"quoted\" name", MPCL_ST_F32, 2, e03, s->empty);
    s->meta[0].key = "format";
    s->meta[0].value = "mpcl";
    s->meta[1].key = "note";
    s->meta[1].value = NOTE;
    s->meta[2].key = "k\xc3\xa9y \"with\" escapes\n";
    s->meta[2].value = "";
}

static void check_sample(const mpcl_safetensors *st, const sample *s) {
    assert_int_equal(mpcl_safetensors_count(st), NT);
    for (size_t i = 0; i < NT; i++) {
        const mpcl_st_tensor *want = &s->t[i];
        /* Header order is the caller's order. */
        const mpcl_st_tensor *got = mpcl_safetensors_tensor(st, i);
        assert_non_null(got);
        assert_string_equal(got->name, want->name);
        assert_ptr_equal(mpcl_safetensors_find(st, want->name), got);
        assert_int_equal(got->dtype, want->dtype);
        assert_int_equal(got->ndim, want->ndim);
        size_t count = 1;
        for (size_t k = 0; k < want->ndim; k++) {
            assert_int_equal(got->shape[k], want->shape[k]);
            count *= want->shape[k];
        }
        size_t size = mpcl_st_dtype_size(want->dtype);
        assert_int_equal(got->bytes, count * size);
        assert_int_equal((uintptr_t)got->data % size, 0);
        if (count) assert_memory_equal(got->data, want->data, count * size);
    }
    assert_null(mpcl_safetensors_tensor(st, NT));
    assert_null(mpcl_safetensors_find(st, "nope"));
    assert_int_equal(mpcl_safetensors_meta_count(st), 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(mpcl_safetensors_meta(st, i)->key, s->meta[i].key);
        assert_string_equal(mpcl_safetensors_meta_get(st, s->meta[i].key), s->meta[i].value);
    }
    assert_null(mpcl_safetensors_meta(st, 3));
    assert_null(mpcl_safetensors_meta_get(st, "missing"));
}

static void test_dtype_table(void **state) {
    (void)state;
    assert_string_equal(mpcl_st_dtype_name(MPCL_ST_F32), "F32");
    assert_string_equal(mpcl_st_dtype_name(MPCL_ST_BF16), "BF16");
    assert_int_equal(mpcl_st_dtype_size(MPCL_ST_F16), 2);
    assert_int_equal(mpcl_st_dtype_size(MPCL_ST_I64), 8);
    assert_int_equal(mpcl_st_dtype_size(MPCL_ST_U8), 1);
    assert_null(mpcl_st_dtype_name(MPCL_ST_DTYPE_COUNT));
    assert_int_equal(mpcl_st_dtype_size((mpcl_st_dtype)-1), 0);
}

static void test_round_trip(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    char p[128];
    snprintf(p, sizeof p, "%s/ckpt.safetensors", d.path);
    sample s;
    make_sample(&s, 1);
    TU_ASSERT_OK(mpcl_safetensors_write(p, s.t, NT, s.meta, 3));
    assert_int_equal(count_entries(d.path), 1); /* no temp file left */
    size_t n;
    unsigned char *b = slurp(p, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | b[i];
    assert_int_equal((8 + hlen) % 8, 0);
    free(b);
    mpcl_safetensors *st = NULL;
    TU_ASSERT_OK(mpcl_safetensors_read(p, &st));
    check_sample(st, &s);
    mpcl_safetensors_destroy(st);
    mpcl_safetensors_destroy(NULL);

    /* No tensors, no metadata: "{}" padded, and it reads back empty. */
    TU_ASSERT_OK(mpcl_safetensors_write(p, NULL, 0, NULL, 0));
    TU_ASSERT_OK(mpcl_safetensors_read(p, &st));
    assert_int_equal(mpcl_safetensors_count(st), 0);
    assert_int_equal(mpcl_safetensors_meta_count(st), 0);
    mpcl_safetensors_destroy(st);
    rm_tree(d.path);
}

/* The exact bytes of a small file, written out by hand from the format. */
static void test_exact_bytes(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    char p[128];
    snprintf(p, sizeof p, "%s/tiny.safetensors", d.path);
    const uint8_t u8[2] = {1, 2};
    const float f = 1.0f;
    mpcl_st_tensor t[2];
    size_t two[1] = {2}, one[1] = {1};
    mk(&t[0], "a", MPCL_ST_U8, 1, two, u8);
    mk(&t[1], "b", MPCL_ST_F32, 1, one, &f);
    mpcl_st_meta m = {"k", "v"};
    TU_ASSERT_OK(mpcl_safetensors_write(p, t, 2, &m, 1));
    /* F32 "b" goes first in the data (wider dtype), U8 "a" after it. */
    const char *h =
        "{\"__metadata__\":{\"k\":\"v\"},"
        "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
    unsigned char want[512];
    memset(want, 0, sizeof want);
    want[0] = (unsigned char)padded;
    memcpy(want + 8, h, hl);
    memset(want + 8 + hl, ' ', padded - hl);
    const unsigned char data[6] = {0x00, 0x00, 0x80, 0x3f, 1, 2}; /* 1.0f little-endian */
    memcpy(want + 8 + padded, data, 6);
    size_t n;
    unsigned char *got = slurp(p, &n);
    assert_int_equal(n, 8 + padded + 6);
    assert_memory_equal(got, want, n);
    free(got);
    rm_tree(d.path);
}

/* ---- the independent reader ---- */

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void write_expected(const char *p, const sample *s) {
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "{\"metadata\": {");
    for (int i = 0; i < 3; i++) {
        fprintf(f, i ? ", " : "");
        json_string(f, s->meta[i].key);
        fprintf(f, ": ");
        json_string(f, s->meta[i].value);
    }
    fprintf(f, "}, \"order\": [");
    for (int i = 0; i < NT; i++) {
        fprintf(f, i ? ", " : "");
        json_string(f, s->t[i].name);
    }
    fprintf(f, "], \"tensors\": {");
    for (int i = 0; i < NT; i++) {
        const mpcl_st_tensor *t = &s->t[i];
        fprintf(f, i ? ", " : "");
        json_string(f, t->name);
        fprintf(f, ": {\"dtype\": \"%s\", \"shape\": [", mpcl_st_dtype_name(t->dtype));
        size_t count = 1;
        for (size_t k = 0; k < t->ndim; k++) {
            fprintf(f, "%s%zu", k ? ", " : "", t->shape[k]);
            count *= t->shape[k];
        }
        fprintf(f, "], \"values\": [");
        for (size_t k = 0; k < count; k++) {
            fprintf(f, k ? ", " : "");
            switch (t->dtype) {
            case MPCL_ST_F32: fprintf(f, "%.17g", (double)((const float *)t->data)[k]); break;
            case MPCL_ST_F64: fprintf(f, "%.17g", ((const double *)t->data)[k]); break;
            case MPCL_ST_F16: fprintf(f, "%.17g", HALF_VALUES[k]); break;
            case MPCL_ST_BF16: fprintf(f, "%.17g", BF16_VALUES[k]); break;
            case MPCL_ST_I64: fprintf(f, "%lld", (long long)((const int64_t *)t->data)[k]); break;
            case MPCL_ST_I32: fprintf(f, "%d", (int)((const int32_t *)t->data)[k]); break;
            case MPCL_ST_I8: fprintf(f, "%d", (int)((const int8_t *)t->data)[k]); break;
            case MPCL_ST_U8: fprintf(f, "%u", (unsigned)((const uint8_t *)t->data)[k]); break;
            default: fail_msg("dtype %d not in the sample", (int)t->dtype);
            }
        }
        fprintf(f, "]}");
    }
    fprintf(f, "}}\n");
    assert_int_equal(fclose(f), 0);
}

/* The checker lives next to this file; MPCL_SOURCE_ROOT (set by meson) says
 * where the source tree is. */
static void test_python_reader(void **state) {
    (void)state;
    const char *root = getenv("MPCL_SOURCE_ROOT");
    if (!root) fail_msg("MPCL_SOURCE_ROOT is not set (meson test sets it)");
    char script[1024];
    snprintf(script, sizeof script, "%s/tests/safetensors_check.py", root);
    assert_int_equal(access(script, R_OK), 0);
    tmpdir d;
    tmp_make(&d);
    char p[128], e[128], cmd[2048];
    snprintf(p, sizeof p, "%s/sample.safetensors", d.path);
    snprintf(e, sizeof e, "%s/expected.json", d.path);
    sample s;
    make_sample(&s, 2);
    TU_ASSERT_OK(mpcl_safetensors_write(p, s.t, NT, s.meta, 3));
    write_expected(e, &s);
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s' '%s'", script, p, e);
    assert_int_equal(system(cmd), 0);
    /* The checker can fail: a changed value must be caught. */
    s.kernel[5] += 1.0f;
    write_expected(e, &s);
    assert_int_not_equal(system(cmd), 0);
    rm_tree(d.path);
}

/* ---- malformed files ---- */

static void test_bad_files(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    char p[128];
    snprintf(p, sizeof p, "%s/bad.safetensors", d.path);

    expect_read_fail("/nonexistent/x.safetensors", MPCL_ERR_IO, "/nonexistent/x.safetensors",
                     "No such file", NULL);
    expect_read_fail(d.path, MPCL_ERR_IO, "is a folder, not a regular file", NULL);
    /* A FIFO without a writer: refused at once, never waited on. */
    char fifo[160];
    snprintf(fifo, sizeof fifo, "%s/fifo", d.path);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    expect_read_fail(fifo, MPCL_ERR_IO, "is a FIFO, not a regular file", NULL);
    assert_int_equal(unlink(fifo), 0);

    spit(p, "", 0);
    expect_read_fail(p, MPCL_ERR_FORMAT, "file is 0 bytes, shorter than the 8-byte", NULL);
    spit(p, "\x10\0\0\0\0", 5);
    expect_read_fail(p, MPCL_ERR_FORMAT, "file is 5 bytes", NULL);

    /* Not safetensors at all: text read as a length is astronomically long. */
    const char *text = "hello, this is a plain text file and nothing more\n";
    spit(p, text, strlen(text));
    expect_read_fail(p, MPCL_ERR_FORMAT, "header length 8367736964726416744 beyond the 42 bytes",
                     NULL);

    /* A length that points past the end, by one byte. */
    unsigned char b[64] = {0};
    b[0] = 57; /* 8 + 57 = 65 > 64 */
    spit(p, b, sizeof b);
    expect_read_fail(p, MPCL_ERR_FORMAT, "header length 57 beyond the 56 bytes", NULL);

    /* Over the 100 MB limit, in a sparse file that really is that long. */
    uint64_t big = MPCL_ST_MAX_HEADER + 1ull;
    memset(b, 0, 8);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(big >> (8 * i));
    spit(p, b, 8);
    assert_int_equal(truncate(p, (off_t)(8 + big + 16)), 0);
    expect_read_fail(p, MPCL_ERR_FORMAT, "header length 100000001 over the limit", NULL);

    /* Offsets and layout. */
    expect_header_fail(
        &d, "{\"dense_0.kernel\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,9999]}}",
        400, "tensor 'dense_0.kernel': data_offsets [0, 9999] beyond data section of 400 bytes");
    expect_header_fail(&d,
                       "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
                       24, "tensors 'a' [0, 16] and 'b' [8, 24] overlap");
    expect_header_fail(&d,
                       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                       20, "gap of 4 bytes between tensors 'a' (ends at 8) and 'b'");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
                       "gap of 4 bytes before the first tensor 'a'");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 9,
                       "data section has 9 bytes but the tensors cover only 8");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
                       "data_offsets [8, 4] end before they begin");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
                       "data_offsets[0] is not a non-negative integer");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4,
                       "data_offsets is not an array of two integers");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]}}",
                       4, "data_offsets[0] is not a non-negative integer");

    /* Entries. */
    expect_header_fail(&d, "{\"w\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                       "tensor 'w': unknown dtype \"F17\"");
    expect_header_fail(&d, "{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                       "unknown dtype \"f32\"");
    expect_header_fail(
        &d, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20,
        "tensor 'w': shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 20] hold 20");
    expect_header_fail(&d,
                       "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
                       "\"data_offsets\":[0,0]}}",
                       0, "shape [4294967296, 4294967296, 16] of F32 overflows");
    expect_header_fail(&d, "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
                       "shape[0] is not a non-negative integer");
    expect_header_fail(&d,
                       "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                       "\"data_offsets\":[0,1]}}",
                       1, "9 dimensions, at most 8");
    expect_header_fail(&d, "{\"w\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,4]}}", 4,
                       "shape is not an array");
    expect_header_fail(&d, "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
                       "tensor 'w': missing \"shape\"");
    expect_header_fail(&d,
                       "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
                       "\"extra\":1}}",
                       4, "unknown field \"extra\"");
    expect_header_fail(&d, "{\"w\":[1]}", 0, "tensor 'w': entry is not an object");
    expect_header_fail(&d, "{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                       "dtype is not a string");
    expect_header_fail(&d, "{\"__metadata__\":{\"a\":1}}", 0,
                       "__metadata__ value of \"a\" is not a string");
    expect_header_fail(&d, "{\"__metadata__\":[\"a\"]}", 0, "__metadata__ is not an object");

    /* JSON itself. */
    expect_header_fail(&d, "{\"w\":{\"dtype\":\"F32\"", 0, "unexpected end of header");
    expect_header_fail(&d, "{\"w\":{\"dtype\":\"F32", 0, "unterminated string");
    expect_header_fail(&d, "{} x", 0, "trailing garbage after the header object");
    expect_header_fail(&d, "{}}", 0, "trailing garbage");
    expect_header_fail(&d,
                       "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                       "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                       2, "duplicate key \"a\"");
    expect_header_fail(&d, "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0,
                       "duplicate key \"k\"");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.0,4]}}", 4,
                       "non-integer number");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4e0]}}", 4,
                       "non-integer number");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[00,4]}}", 4,
                       "leading zero");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,-]}}", 4,
                       "'-' without digits");
    /* Sizes and offsets are plain non-negative integers, one spelling each:
     * "-0" (valid JSON, never written) is refused like any '-', and so are
     * '+', a leading zero, an exponent and a fraction. */
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-0,4]}}", 4,
                       "tensor 'a': data_offsets[0] is not a non-negative integer");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,-0]}}", 0,
                       "tensor 'a': data_offsets[1] is not a non-negative integer");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"U8\",\"shape\":[-0],\"data_offsets\":[0,0]}}", 0,
                       "tensor 'a': shape[0] is not a non-negative integer");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,+4]}}", 4,
                       "unexpected character '+'");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4,
                       "leading zero");
    expect_header_fail(&d, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]}}", 4,
                       "non-integer number");
    /* A tensor name the writer refuses is refused on reading too. */
    expect_header_fail(&d, "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                       "tensor name \"\" is empty");
    expect_header_fail(
        &d, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", 1,
        "integer does not fit in 64 bits");
    expect_header_fail(&d, "{\"a\":true}", 0, "unexpected character 't'");
    expect_header_fail(&d, "{\"a\" 1}", 0, "expected ':'");
    expect_header_fail(&d, "{\"a\":\"x\" \"b\":\"y\"}", 0, "expected ',' or '}'");
    expect_header_fail(&d, "{\"__metadata__\":{\"a\":\"x\",}}", 0, "expected a string key");
    expect_header_fail(&d, "{\"a\":[1 2]}", 0, "expected ',' or ']'");
    expect_header_fail(&d, "{\"__metadata__\":{\"a\":\"bad \\q escape\"}}", 0,
                       "unknown escape '\\q'");
    expect_header_fail(&d, "{\"__metadata__\":{\"a\":\"raw\ttab\"}}", 0,
                       "raw control character 0x09");
    expect_header_fail(&d, "{\"__metadata__\":{\"a\":\"\xff\xfe\"}}", 0, "invalid UTF-8");
    expect_header_fail(&d, "{\"__metadata__\":{\"a\":\"\xc0\xaf\"}}", 0, "invalid UTF-8");
    expect_header_fail(&d, "{\"__metadata__\":{\"a\":\"\\ud800x\"}}", 0,
                       "high surrogate \\ud800 without its low half");
    expect_header_fail(&d, "{\"__metadata__\":{\"a\":\"\\udc00\"}}", 0, "lone low surrogate");
    expect_header_fail(&d, "{\"__metadata__\":{\"a\":\"\\u12\"}}", 0,
                       "\\u not followed by four hex digits");
    expect_header_fail(&d, "{\"__metadata__\":{\"a\":\"nul\\u0000\"}}", 0, "\\u0000");
    expect_header_fail(&d, "{\"a\":[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]}", 0,
                       "nesting deeper than 16 levels");
    expect_header_fail(&d, "[]      ", 0, "header does not start with '{'");
    expect_header_fail(&d, " {}     ", 0, "header does not start with '{'");
    /* The message gives the byte offset in the header and in the file. */
    expect_header_fail(&d, "{\"a\":tru}", 0, "at header byte 5 (file byte 13)");

    /* Valid oddities: escapes and surrogate pairs decode, space padding,
     * zero-size tensors sharing an offset, a scalar. */
    write_st(p,
             "{\"__metadata__\":{\"e\":\"\\u00e9\\ud83d\\ude42\\/\\\"\\n\"},"
             "\"z1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
             "\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
             "\"z2\":{\"dtype\":\"U8\",\"shape\":[3,0],\"data_offsets\":[8,8]}}        ",
             "\x2a\0\0\0\0\0\0\0", 8);
    mpcl_safetensors *st = NULL;
    TU_ASSERT_OK(mpcl_safetensors_read(p, &st));
    assert_string_equal(mpcl_safetensors_meta_get(st, "e"), "\xc3\xa9\xf0\x9f\x99\x82/\"\n");
    const mpcl_st_tensor *s = mpcl_safetensors_find(st, "s");
    assert_non_null(s);
    assert_int_equal(s->ndim, 0);
    assert_int_equal(*(const int64_t *)s->data, 42);
    assert_int_equal(mpcl_safetensors_find(st, "z2")->bytes, 0);
    mpcl_safetensors_destroy(st);
    rm_tree(d.path);
}

/* Every proper prefix of a valid file must fail as a format error, and every
 * single-byte change in its header must give a clean OK or format error, never
 * a crash or an out-of-bounds read (the ASan build checks the latter). */
static void test_prefix_and_flip_sweep(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    char good[128], p[128];
    snprintf(good, sizeof good, "%s/good.safetensors", d.path);
    snprintf(p, sizeof p, "%s/mut.safetensors", d.path);
    sample s;
    make_sample(&s, 3);
    TU_ASSERT_OK(mpcl_safetensors_write(good, s.t, NT, s.meta, 3));
    size_t n;
    unsigned char *b = slurp(good, &n);
    mpcl_safetensors *st;
    for (size_t len = 0; len < n; len++) {
        spit(p, b, len);
        st = NULL;
        mpcl_status r = mpcl_safetensors_read(p, &st);
        if (r != MPCL_ERR_FORMAT)
            fail_msg("prefix of %zu of %zu bytes: %s", len, n, mpcl_status_name(r));
        assert_null(st);
    }
    size_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | b[i];
    tu_rng r = tu_rng_make(99);
    const unsigned char specials[] = {'"', '\\', '{', '}', '[',  ']',  ',',  ':',
                                      '0', '9',  '-', ' ', 0x00, 0x80, 0xff, 'e'};
    int ok = 0, bad = 0;
    for (size_t i = 0; i < 8 + hlen; i++) {
        for (int k = 0; k < 3; k++) {
            unsigned char old = b[i];
            b[i] = k == 0   ? (unsigned char)(old ^ 1)
                   : k == 1 ? specials[(size_t)tu_uniform(&r, 0, sizeof specials)]
                            : (unsigned char)tu_uniform(&r, 0, 256);
            spit(p, b, n);
            st = NULL;
            mpcl_status res = mpcl_safetensors_read(p, &st);
            if (res == MPCL_OK) {
                ok++;
                /* Whatever was accepted must be self-consistent. */
                for (size_t t = 0; t < mpcl_safetensors_count(st); t++) {
                    const mpcl_st_tensor *x = mpcl_safetensors_tensor(st, t);
                    const unsigned char *data = x->data;
                    volatile unsigned char sink = 0;
                    for (size_t q = 0; q < x->bytes; q++) sink ^= data[q];
                    (void)sink;
                }
                mpcl_safetensors_destroy(st);
            } else if (res == MPCL_ERR_FORMAT) {
                bad++;
                assert_null(st);
            } else {
                fail_msg("byte %zu changed: %s", i, mpcl_errmsg());
            }
            b[i] = old;
        }
    }
    assert_true(bad > ok); /* most changes to a header break it */
    free(b);
    rm_tree(d.path);
}

/* ---- the writer: arguments and atomicity ---- */

static void expect_same_file(const char *p, const unsigned char *want, size_t n) {
    size_t m;
    unsigned char *got = slurp(p, &m);
    assert_int_equal(m, n);
    assert_memory_equal(got, want, n);
    free(got);
}

static void test_write_errors_keep_old_file(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    char p[128];
    snprintf(p, sizeof p, "%s/ckpt.safetensors", d.path);
    sample s;
    make_sample(&s, 4);
    TU_ASSERT_OK(mpcl_safetensors_write(p, s.t, NT, s.meta, 3));
    size_t n;
    unsigned char *before = slurp(p, &n);

    /* Bad arguments are refused before anything is touched. */
    mpcl_st_tensor t[2];
    memcpy(t, s.t + 1, sizeof t);
    t[1].name = t[0].name;
    assert_int_equal(mpcl_safetensors_write(p, t, 2, NULL, 0), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "tensor name 'dense_0.kernel' twice"));
    memcpy(t, s.t + 1, sizeof t);
    t[0].name = "__metadata__";
    assert_int_equal(mpcl_safetensors_write(p, t, 2, NULL, 0), MPCL_ERR_INVALID_ARG);
    t[0].name = "";
    assert_int_equal(mpcl_safetensors_write(p, t, 2, NULL, 0), MPCL_ERR_INVALID_ARG);
    t[0].name = "bad \xff utf8";
    assert_int_equal(mpcl_safetensors_write(p, t, 2, NULL, 0), MPCL_ERR_INVALID_ARG);
    memcpy(t, s.t + 1, sizeof t);
    t[1].data = NULL;
    assert_int_equal(mpcl_safetensors_write(p, t, 2, NULL, 0), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "tensor 'dense_0.bias' has NULL data"));
    memcpy(t, s.t + 1, sizeof t);
    t[1].dtype = MPCL_ST_DTYPE_COUNT;
    assert_int_equal(mpcl_safetensors_write(p, t, 2, NULL, 0), MPCL_ERR_INVALID_ARG);
    memcpy(t, s.t + 1, sizeof t);
    t[1].ndim = MPCL_ST_MAX_DIMS + 1;
    assert_int_equal(mpcl_safetensors_write(p, t, 2, NULL, 0), MPCL_ERR_INVALID_ARG);
    mpcl_st_meta m[2] = {{"k", "1"}, {"k", "2"}};
    assert_int_equal(mpcl_safetensors_write(p, s.t, NT, m, 2), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "metadata key 'k' twice"));
    m[1].value = NULL;
    assert_int_equal(mpcl_safetensors_write(p, s.t, NT, m, 2), MPCL_ERR_INVALID_ARG);
    assert_int_equal(mpcl_safetensors_write(p, NULL, 1, NULL, 0), MPCL_ERR_INVALID_ARG);
    assert_int_equal(mpcl_safetensors_write(NULL, s.t, NT, NULL, 0), MPCL_ERR_INVALID_ARG);
    expect_same_file(p, before, n);

    /* A folder that does not exist: named in the message. */
    char q[256];
    snprintf(q, sizeof q, "%s/no/such/folder/x.safetensors", d.path);
    assert_int_equal(mpcl_safetensors_write(q, s.t, NT, s.meta, 3), MPCL_ERR_IO);
    char want[256];
    snprintf(want, sizeof want, "folder '%s/no/such/folder' does not exist", d.path);
    if (!strstr(mpcl_errmsg(), want)) fail_msg("'%s' not in: %s", want, mpcl_errmsg());
    /* A file where the folder should be is called what it is. */
    snprintf(q, sizeof q, "%s/x.safetensors", p);
    assert_int_equal(mpcl_safetensors_write(q, s.t, NT, s.meta, 3), MPCL_ERR_IO);
    snprintf(want, sizeof want, "'%s' is a regular file, not a folder", p);
    if (!strstr(mpcl_errmsg(), want)) fail_msg("'%s' not in: %s", want, mpcl_errmsg());

    /* The target is a folder: refused (only a regular file is ever replaced), no temp file. */
    snprintf(q, sizeof q, "%s/is_a_dir", d.path);
    assert_int_equal(mkdir(q, 0755), 0);
    assert_int_equal(mpcl_safetensors_write(q, s.t, NT, s.meta, 3), MPCL_ERR_IO);
    assert_non_null(strstr(mpcl_errmsg(), "is a folder; only a regular file is ever replaced"));
    assert_int_equal(count_entries(d.path), 2); /* ckpt.safetensors and is_a_dir */
    assert_int_equal(count_entries(q), 0);

    /* The disk fills up mid-write (a file size limit, which binds root too):
     * the write fails, no temp file stays, the old file is byte-identical. */
    enum { BIG = 1 << 16 };
    float *big = calloc(BIG, sizeof *big);
    assert_non_null(big);
    mpcl_st_tensor bt;
    size_t bshape[1] = {BIG};
    mk(&bt, "big", MPCL_ST_F32, 1, bshape, big);
    struct rlimit old_lim, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old_lim), 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old_lim;
    lim.rlim_cur = 4096;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    mpcl_status r = mpcl_safetensors_write(p, &bt, 1, NULL, 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old_lim), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(r, MPCL_ERR_IO);
    assert_non_null(strstr(mpcl_errmsg(), "writing '"));
    assert_int_equal(count_entries(d.path), 2);
    expect_same_file(p, before, n);

    /* And the same write with room succeeds and replaces it. */
    TU_ASSERT_OK(mpcl_safetensors_write(p, &bt, 1, NULL, 0));
    mpcl_safetensors *st = NULL;
    TU_ASSERT_OK(mpcl_safetensors_read(p, &st));
    assert_int_equal(mpcl_safetensors_count(st), 1);
    assert_int_equal(mpcl_safetensors_find(st, "big")->bytes, BIG * sizeof(float));
    mpcl_safetensors_destroy(st);
    assert_int_equal(count_entries(d.path), 2);

    /* A relative path writes in the current folder. */
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(d.path), 0);
    TU_ASSERT_OK(mpcl_safetensors_write("rel.safetensors", s.t, NT, s.meta, 3));
    assert_int_equal(chdir(cwd), 0);
    snprintf(q, sizeof q, "%s/rel.safetensors", d.path);
    TU_ASSERT_OK(mpcl_safetensors_read(q, &st));
    check_sample(st, &s);
    mpcl_safetensors_destroy(st);
    free(big);
    free(before);
    rm_tree(d.path);
}

/* ---- memory follows the header's length ---- */

/* Headers of `bytes` bytes: "{"a":[0,0,...]}" (one value per two bytes) and
 * "{"__metadata__":{"k0000000":"",...}}" (one key per 14 bytes). */
static char *dense_array_header(size_t bytes) {
    char *h = malloc(bytes + 1);
    assert_non_null(h);
    size_t n = (size_t)snprintf(h, bytes + 1, "{\"a\":[0");
    while (n + 4 <= bytes) n += (size_t)snprintf(h + n, bytes + 1 - n, ",0");
    snprintf(h + n, bytes + 1 - n, "]}");
    return h;
}

static char *many_keys_header(size_t keys) {
    size_t bytes = 32 + 14 * keys;
    char *h = malloc(bytes);
    assert_non_null(h);
    size_t n = (size_t)snprintf(h, bytes, "{\"__metadata__\":{");
    for (size_t i = 0; i < keys; i++)
        n += (size_t)snprintf(h + n, bytes - n, "%s\"k%07zu\":\"\"", i ? "," : "", i);
    snprintf(h + n, bytes - n, "}}");
    return h;
}

typedef struct read_job {
    const char *path;
} read_job;

static int read_status(void *arg) {
    const read_job *j = arg;
    mpcl_safetensors *st = NULL;
    mpcl_status s = mpcl_safetensors_read(j->path, &st);
    mpcl_safetensors_destroy(st);
    return (int)s;
}

/* A 16 MiB header of 8 million tiny values is refused before the parser
 * allocates anything (MPCL_ERR_FORMAT naming the ratio), and a 14 MB header
 * of a million metadata keys reads within 6 times its size. Both run in a
 * child whose address space is limited to 6 times the header plus 16 MiB
 * more than the process maps now; the parser before this limit took about
 * 35 times the header and failed there with MPCL_ERR_OUT_OF_MEMORY. */
static void test_header_memory_bounded(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    char p[128];
    snprintf(p, sizeof p, "%s/big.safetensors", d.path);
    const size_t dense_bytes = (size_t)16 << 20, keys = 1000000;
    for (int c = 0; c < 2; c++) {
        char *h = c == 0 ? dense_array_header(dense_bytes) : many_keys_header(keys);
        size_t hlen = strlen(h);
        write_st(p, h, NULL, 0);
        free(h);
        mpcl_status want = c == 0 ? MPCL_ERR_FORMAT : MPCL_OK;
        if (c == 0) {
            expect_read_fail(p, MPCL_ERR_FORMAT, "holds 8388606 JSON values",
                             "over the limit of 8 times its length", NULL);
        } else {
            mpcl_safetensors *st = NULL;
            TU_ASSERT_OK(mpcl_safetensors_read(p, &st));
            assert_int_equal(mpcl_safetensors_count(st), 0);
            assert_int_equal(mpcl_safetensors_meta_count(st), keys);
            assert_string_equal(mpcl_safetensors_meta(st, keys - 1)->key, "k0999999");
            assert_string_equal(mpcl_safetensors_meta_get(st, "k0500000"), "");
            mpcl_safetensors_destroy(st);
        }
        read_job j = {p};
        bool limited;
        int r = tu_run_memory_limited(6 * hlen + ((size_t)16 << 20), read_status, &j, &limited);
        if (r != (int)want)
            fail_msg("case %d (%zu-byte header) under the limit: exit %d, expected %s (%d)", c,
                     hlen, r, mpcl_status_name(want), (int)want);
        if (!limited) print_message("case %d: address-space limit not applied (ASan)\n", c);
    }
    assert_int_equal(unlink(p), 0);
    assert_int_equal(rmdir(d.path), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_table),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_exact_bytes),
        cmocka_unit_test(test_python_reader),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_header_memory_bounded),
        cmocka_unit_test(test_prefix_and_flip_sweep),
        cmocka_unit_test(test_write_errors_keep_old_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
