/* Data: the IDX reader on small files written here (raw and gzip), every kind
 * of bad input with its exact status and message, the real Fashion-MNIST
 * files, batches, and the portable shuffle against independent values. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/io.h"
#include "mpcl/half.h"
#include "testutil.h"

/* ---- writing IDX files ---- */

typedef struct tmpdir {
    char path[64];
} tmpdir;

static void tmp_make(tmpdir *d) {
    snprintf(d->path, sizeof d->path, "/tmp/mpcl-test-data-XXXXXX");
    assert_non_null(mkdtemp(d->path));
}

/* The folder holds only plain files written by these tests. */
static void tmp_remove(tmpdir *d) {
    DIR *dir = opendir(d->path);
    assert_non_null(dir);
    struct dirent *e;
    char p[512];
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", d->path, e->d_name);
        assert_int_equal(unlink(p), 0);
    }
    closedir(dir);
    assert_int_equal(rmdir(d->path), 0);
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void write_bytes(const tmpdir *d, const char *name, const void *data, size_t n, int gz) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s%s", d->path, name, gz ? ".gz" : "");
    if (gz) {
        gzFile f = gzopen(p, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, data, (unsigned)n), (int)n);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(p, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(data, 1, n, f), n);
        assert_int_equal(fclose(f), 0);
    }
}

/* An IDX file: magic, dims, then `body` bytes of body (which may disagree
 * with the dims on purpose). */
static void write_idx(const tmpdir *d, const char *name, uint32_t magic, const uint32_t *dims,
                      int ndims, const uint8_t *body, size_t body_bytes, int gz) {
    size_t n = 4 + 4 * (size_t)ndims + body_bytes;
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    put_be32(buf, magic);
    for (int i = 0; i < ndims; i++) put_be32(buf + 4 + 4 * i, dims[i]);
    if (body_bytes) memcpy(buf + 4 + 4 * ndims, body, body_bytes);
    write_bytes(d, name, buf, n, gz);
    free(buf);
}

#define N 7
#define ROWS 3
#define COLS 5
#define PIX (N * ROWS * COLS)

typedef struct sample {
    uint8_t pixels[PIX];
    uint8_t labels[N];
} sample;

static sample make_sample(uint64_t seed) {
    sample s;
    tu_rng r = tu_rng_make(seed);
    for (int i = 0; i < PIX; i++) s.pixels[i] = (uint8_t)tu_uniform(&r, 0, 256);
    for (int i = 0; i < N; i++) s.labels[i] = (uint8_t)tu_uniform(&r, 0, 10);
    return s;
}

static void write_images(const tmpdir *d, const char *prefix, const sample *s, int gz) {
    char name[64];
    uint32_t dims[3] = {N, ROWS, COLS};
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    write_idx(d, name, 0x803, dims, 3, s->pixels, PIX, gz);
}

static void write_labels(const tmpdir *d, const char *prefix, const sample *s, int gz) {
    char name[64];
    uint32_t dims[1] = {N};
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    write_idx(d, name, 0x801, dims, 1, s->labels, N, gz);
}

static void check_sample(const mpcl_dataset *ds, const sample *s) {
    assert_int_equal(mpcl_dataset_count(ds), N);
    assert_int_equal(mpcl_dataset_rows(ds), ROWS);
    assert_int_equal(mpcl_dataset_cols(ds), COLS);
    assert_int_equal(mpcl_dataset_features(ds), ROWS * COLS);
    assert_int_equal(mpcl_dataset_num_classes(ds), 10);
    assert_memory_equal(mpcl_dataset_pixels(ds), s->pixels, PIX);
    assert_memory_equal(mpcl_dataset_labels(ds), s->labels, N);
}

/* A load that gave st and ds must have failed with `status`, left ds NULL,
 * and said every one of the NULL-terminated fragments in ap. */
static void check_failure(mpcl_status st, const mpcl_dataset *ds, mpcl_status status, va_list ap) {
    if (st != status)
        fail_msg("expected %s, got %s: %s", mpcl_status_name(status), mpcl_status_name(st),
                 st == MPCL_OK ? "" : mpcl_errmsg());
    assert_null(ds);
    const char *frag;
    while ((frag = va_arg(ap, const char *)) != NULL)
        if (!strstr(mpcl_errmsg(), frag)) fail_msg("'%s' not in: %s", frag, mpcl_errmsg());
}

/* The load must fail with `status`, and the message must hold every one of
 * the NULL-terminated fragments. */
static void expect_fail(const char *dir, const char *prefix, const mpcl_idx_params *params,
                        mpcl_status status, ...) {
    mpcl_dataset *ds = (mpcl_dataset *)&ds; /* must be reset to NULL */
    mpcl_status st = mpcl_idx_load_ex(dir, prefix, params, &ds);
    va_list ap;
    va_start(ap, status);
    check_failure(st, ds, status, ap);
    va_end(ap);
}

/* Open descriptors of this process. */
static int open_fds(void) {
    DIR *dir = opendir("/proc/self/fd");
    assert_non_null(dir);
    int n = 0;
    while (readdir(dir) != NULL) n++;
    closedir(dir);
    return n;
}

/* Every failure closes the file it opened: raw bytes under the .gz name
 * (found after the open; this leaked a descriptor and its FILE, which the
 * fuzz harness found), a wrong magic, a truncated body. */
static void test_failures_close_files(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    sample s = make_sample(11);
    uint32_t dims[3] = {N, ROWS, COLS};
    int before = open_fds();
    for (int round = 0; round < 3; round++) {
        write_idx(&d, "train-images-idx3-ubyte.gz", 0x803, dims, 3, s.pixels, PIX, 0);
        expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "does not begin with the gzip magic",
                    NULL);
        char gz[512];
        snprintf(gz, sizeof gz, "%s/train-images-idx3-ubyte.gz", d.path);
        assert_int_equal(unlink(gz), 0);
        write_idx(&d, "train-images-idx3-ubyte", 0x802, dims, 3, s.pixels, PIX, round & 1);
        expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "magic number 0x00000802", NULL);
        write_idx(&d, "train-images-idx3-ubyte", 0x803, dims, 3, s.pixels, PIX - 1, round & 1);
        expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "expected 121 bytes", NULL);
        char p[512];
        snprintf(p, sizeof p, "%s/train-images-idx3-ubyte%s", d.path, round & 1 ? ".gz" : "");
        assert_int_equal(unlink(p), 0);
    }
    assert_int_equal(open_fds(), before);
    tmp_remove(&d);
}

/* ---- memory follows the input, not the header's claim ---- */

typedef struct load_job {
    const char *dir;
} load_job;

static int load_status(void *arg) {
    const load_job *j = arg;
    mpcl_dataset *ds = NULL;
    mpcl_status st = mpcl_idx_load(j->dir, "train", &ds);
    mpcl_dataset_destroy(ds);
    return (int)st;
}

/* A header that claims far more data than the file holds: refused with
 * MPCL_ERR_FORMAT, and within 16 MiB of address space more than the process
 * maps now, where the full-size allocation of the claim (45 MiB raw, 2 GiB
 * gzip) would have failed with MPCL_ERR_OUT_OF_MEMORY. */
static void test_claim_beyond_file(void **state) {
    (void)state;
    uint8_t body[1000];
    for (size_t i = 0; i < sizeof body; i++) body[i] = (uint8_t)(i * 7);
    const struct {
        int gz;
        uint32_t dims[3];
        const char *frag1, *frag2;
    } cases[] = {
        {0,
         {60000, 28, 28},
         "truncated file: expected 47040016 bytes (through the pixel data)",
         "got only 1016"},
        {1,
         {32768, 256, 256},
         "truncated file: expected 2147483664 bytes (through the pixel data)",
         "got only 1016"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tmpdir d;
        tmp_make(&d);
        write_idx(&d, "train-images-idx3-ubyte", 0x803, cases[c].dims, 3, body, sizeof body,
                  cases[c].gz);
        expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, cases[c].frag1, cases[c].frag2, NULL);
        load_job j = {d.path};
        bool limited;
        int r = tu_run_memory_limited((size_t)16 << 20, load_status, &j, &limited);
        if (r != MPCL_ERR_FORMAT)
            fail_msg("case %zu under a 16 MiB limit: exit %d, expected %s (%d)", c, r,
                     mpcl_status_name(MPCL_ERR_FORMAT), (int)MPCL_ERR_FORMAT);
        if (!limited) print_message("case %zu: address-space limit not applied (ASan)\n", c);
        tmp_remove(&d);
    }
}

/* ---- round trips ---- */

static void test_raw_round_trip(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    sample s = make_sample(1);
    write_images(&d, "train", &s, 0);
    write_labels(&d, "train", &s, 0);
    mpcl_dataset *ds = NULL;
    TU_ASSERT_OK(mpcl_idx_load(d.path, "train", &ds));
    check_sample(ds, &s);
    mpcl_dataset_destroy(ds);
    tmp_remove(&d);
}

static void test_gzip_round_trip(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    sample s = make_sample(2);
    write_images(&d, "t10k", &s, 1);
    write_labels(&d, "t10k", &s, 1);
    mpcl_dataset *ds = NULL;
    TU_ASSERT_OK(mpcl_idx_load(d.path, "t10k", &ds));
    check_sample(ds, &s);
    mpcl_dataset_destroy(ds);
    tmp_remove(&d);
}

/* Raw images with gzip labels, and the raw file wins when both exist. */
static void test_mixed_and_preference(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    sample s = make_sample(3), other = make_sample(4);
    write_images(&d, "train", &s, 0);
    write_images(&d, "train", &other, 1);
    write_labels(&d, "train", &s, 1);
    mpcl_dataset *ds = NULL;
    TU_ASSERT_OK(mpcl_idx_load(d.path, "train", &ds));
    check_sample(ds, &s);
    mpcl_dataset_destroy(ds);
    tmp_remove(&d);
}

/* gzip is known by its magic, not its name; members may be concatenated;
 * bytes after the last member are damage. */
static void test_gzip_details(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    sample s = make_sample(11);
    write_labels(&d, "train", &s, 0);
    /* gzip content under the raw name. */
    char raw[256], gz[256];
    write_images(&d, "train", &s, 1);
    snprintf(raw, sizeof raw, "%s/train-images-idx3-ubyte", d.path);
    snprintf(gz, sizeof gz, "%s/train-images-idx3-ubyte.gz", d.path);
    assert_int_equal(rename(gz, raw), 0);
    mpcl_dataset *ds = NULL;
    TU_ASSERT_OK(mpcl_idx_load(d.path, "train", &ds));
    check_sample(ds, &s);
    mpcl_dataset_destroy(ds);
    /* Raw content under the .gz name. */
    assert_int_equal(rename(raw, gz), 0);
    write_images(&d, "train", &s, 0);
    assert_int_equal(rename(raw, gz), 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "train-images-idx3-ubyte.gz'",
                "does not begin with the gzip magic 1f 8b", NULL);
    /* Two members: header + half the pixels, then the rest. */
    unsigned char all[16 + PIX];
    put_be32(all, 0x803);
    put_be32(all + 4, N);
    put_be32(all + 8, ROWS);
    put_be32(all + 12, COLS);
    memcpy(all + 16, s.pixels, PIX);
    write_bytes(&d, "part1", all, 16 + PIX / 2, 1);
    write_bytes(&d, "part2", all + 16 + PIX / 2, PIX - PIX / 2, 1);
    size_t n1, n2;
    char p1[256], p2[256];
    snprintf(p1, sizeof p1, "%s/part1.gz", d.path);
    snprintf(p2, sizeof p2, "%s/part2.gz", d.path);
    unsigned char *a = tu_slurp(p1, &n1), *b = tu_slurp(p2, &n2);
    unsigned char *cat = malloc(n1 + n2 + 4);
    assert_non_null(cat);
    memcpy(cat, a, n1);
    memcpy(cat + n1, b, n2);
    write_bytes(&d, "train-images-idx3-ubyte.gz", cat, n1 + n2, 0);
    TU_ASSERT_OK(mpcl_idx_load(d.path, "train", &ds));
    check_sample(ds, &s);
    mpcl_dataset_destroy(ds);
    /* The same with garbage after the last member. */
    memcpy(cat + n1 + n2, "junk", 4);
    write_bytes(&d, "train-images-idx3-ubyte.gz", cat, n1 + n2 + 4, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "corrupt gzip stream",
                "bytes after the end of the gzip stream", NULL);
    free(a);
    free(b);
    free(cat);
    tmp_remove(&d);
}

/* ---- bad input ---- */

static void test_missing_folder_and_file(void **state) {
    (void)state;
    expect_fail("/nonexistent/mpcl-data", "train", NULL, MPCL_ERR_IO, "'/nonexistent/mpcl-data'",
                "does not exist", "dataset-fashion-mnist", MPCL_DATA_DEFAULT_DIR, NULL);
    tmpdir d;
    tmp_make(&d);
    sample s = make_sample(5);
    write_images(&d, "t10k", &s, 0);
    char raw[256], gz[256];
    snprintf(raw, sizeof raw, "'%s/t10k-labels-idx1-ubyte'", d.path);
    snprintf(gz, sizeof gz, "'%s/t10k-labels-idx1-ubyte.gz'", d.path);
    expect_fail(d.path, "t10k", NULL, MPCL_ERR_IO, raw, gz, "dataset-fashion-mnist", NULL);
    expect_fail(d.path, "train", NULL, MPCL_ERR_IO, "train-images-idx3-ubyte.gz", NULL);
    /* A path that is a file, not a folder. */
    char file[256];
    snprintf(file, sizeof file, "%s/t10k-images-idx3-ubyte", d.path);
    expect_fail(file, "t10k", NULL, MPCL_ERR_IO, "is not a folder", NULL);
    tmp_remove(&d);
}

/* A FIFO (or a folder) under a data file's name is named for what it is,
 * never waited on and never skipped for the .gz variant. alarm() turns a
 * blocking open into a failure instead of a hang. */
static void test_special_files(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    sample s = make_sample(5);
    write_labels(&d, "t10k", &s, 0);
    char fifo[256];
    snprintf(fifo, sizeof fifo, "%s/t10k-images-idx3-ubyte", d.path);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(10);
    expect_fail(d.path, "t10k", NULL, MPCL_ERR_IO, "t10k-images-idx3-ubyte' is a FIFO",
                "not a regular file", NULL);
    alarm(0);
    tmp_remove(&d);
}

static void test_wrong_magic(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    sample s = make_sample(6);
    uint32_t dims[3] = {N, ROWS, COLS};
    write_idx(&d, "train-images-idx3-ubyte", 0x00000801, dims, 3, s.pixels, PIX, 0);
    write_labels(&d, "train", &s, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "train-images-idx3-ubyte'",
                "magic number 0x00000801, expected 0x00000803", NULL);
    /* Labels swapped for an images file: found 0x803 where 0x801 belongs. */
    write_images(&d, "train", &s, 0);
    write_idx(&d, "train-labels-idx1-ubyte", 0x803, dims, 3, s.pixels, PIX, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "train-labels-idx1-ubyte'",
                "magic number 0x00000803, expected 0x00000801", NULL);
    tmp_remove(&d);
}

static void test_truncated(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    sample s = make_sample(7);
    uint32_t dims[3] = {N, ROWS, COLS};
    write_labels(&d, "train", &s, 0);
    /* Header 16 bytes + 105 pixels = 121 expected; 16 + 100 present. */
    write_idx(&d, "train-images-idx3-ubyte", 0x803, dims, 3, s.pixels, 100, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "train-images-idx3-ubyte'",
                "truncated file", "expected 121 bytes", "got only 116", NULL);
    /* The same body cut short inside gzip: the stream itself is complete. */
    char p[256];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", d.path);
    assert_int_equal(unlink(p), 0);
    write_idx(&d, "train-images-idx3-ubyte", 0x803, dims, 3, s.pixels, 100, 1);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "expected 121 bytes", "got only 116", NULL);
    /* A header cut inside the dimensions: 4 + 4 of 16 bytes. */
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", d.path);
    assert_int_equal(unlink(p), 0);
    write_idx(&d, "train-images-idx3-ubyte", 0x803, dims, 1, NULL, 0, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "expected 16 bytes (through the header;",
                "dimension 1 of 3 is cut short", "got only 8", NULL);
    /* Shorter than the magic. */
    write_bytes(&d, "train-images-idx3-ubyte", "\0\0", 2, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "expected 4 bytes", "got only 2", NULL);
    /* Labels cut short: 8 + 7 expected, 8 + 3 present. */
    write_images(&d, "train", &s, 0);
    uint32_t ldims[1] = {N};
    write_idx(&d, "train-labels-idx1-ubyte", 0x801, ldims, 1, s.labels, 3, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "train-labels-idx1-ubyte'",
                "expected 15 bytes", "got only 11", NULL);
    /* A byte too many is as wrong as a byte too few. */
    uint8_t more[N + 1] = {0};
    write_idx(&d, "train-labels-idx1-ubyte", 0x801, ldims, 1, more, N + 1, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "continues past the 15 bytes", NULL);
    tmp_remove(&d);
}

static void test_corrupt_gzip(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    /* Enough compressible pixels that the deflate stream has real codes to break. */
    enum { BIG = 64 };
    uint32_t dims[3] = {BIG, 28, 28};
    size_t bytes = (size_t)BIG * 28 * 28;
    uint8_t *pix = malloc(bytes);
    uint8_t labels[BIG];
    assert_non_null(pix);
    for (size_t i = 0; i < bytes; i++) pix[i] = (uint8_t)((i * 7) % 13 * (i % 5));
    for (int i = 0; i < BIG; i++) labels[i] = (uint8_t)(i % 10);
    uint32_t ldims[1] = {BIG};
    write_idx(&d, "train-labels-idx1-ubyte", 0x801, ldims, 1, labels, BIG, 0);
    write_idx(&d, "train-images-idx3-ubyte", 0x803, dims, 3, pix, bytes, 1);
    char p[256];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", d.path);
    size_t n;
    unsigned char *gz = tu_slurp(p, &n);
    assert_true(n > 64);

    /* Bytes flipped in the middle of the deflate data. */
    unsigned char *bad = malloc(n);
    assert_non_null(bad);
    memcpy(bad, gz, n);
    for (size_t i = n / 2; i < n / 2 + 8; i++) bad[i] ^= 0xa5;
    write_bytes(&d, "train-images-idx3-ubyte.gz", bad, n, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "train-images-idx3-ubyte.gz'", "corrupt",
                "gzip stream", NULL);

    /* The CRC in the trailer wrong, the data intact: caught at the end. */
    memcpy(bad, gz, n);
    bad[n - 8] ^= 0xff;
    write_bytes(&d, "train-images-idx3-ubyte.gz", bad, n, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "corrupt gzip stream",
                "incorrect data check", NULL);

    /* All the data, but not the trailer: the CRC was never checked. */
    write_bytes(&d, "train-images-idx3-ubyte.gz", gz, n - 8, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "ends before its end marker",
                "after 50192 decompressed bytes", NULL);

    /* Not gzip at all behind the gzip magic. */
    write_bytes(&d, "train-images-idx3-ubyte.gz", "\x1f\x8b\x08\x00garbage-garbage-garbage", 28, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "gzip stream", NULL);

    /* The stream cut in half. */
    write_bytes(&d, "train-images-idx3-ubyte.gz", gz, n / 2, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "truncated gzip stream", "expected 50192",
                NULL);

    /* The intact file loads, so the failures above were the damage. */
    write_bytes(&d, "train-images-idx3-ubyte.gz", gz, n, 0);
    mpcl_dataset *ds = NULL;
    TU_ASSERT_OK(mpcl_idx_load(d.path, "train", &ds));
    assert_memory_equal(mpcl_dataset_pixels(ds), pix, bytes);
    mpcl_dataset_destroy(ds);
    free(bad);
    free(gz);
    free(pix);
    tmp_remove(&d);
}

static void test_counts_and_dimensions(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    sample s = make_sample(8);
    write_images(&d, "train", &s, 0);
    uint32_t ldims[1] = {N - 1};
    write_idx(&d, "train-labels-idx1-ubyte", 0x801, ldims, 1, s.labels, N - 1, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "has 6 labels", "has 7 images", NULL);

    uint32_t zero[3] = {0, ROWS, COLS};
    write_idx(&d, "train-images-idx3-ubyte", 0x803, zero, 3, NULL, 0, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "zero images", NULL);

    /* 2^32-1 images of 65535 x 65535: the product overflows 64 bits unless
     * checked stepwise, and must not reach malloc. */
    uint32_t huge[3] = {0xffffffffu, 0xffff, 0xffff};
    write_idx(&d, "train-images-idx3-ubyte", 0x803, huge, 3, s.pixels, PIX, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "absurd dimensions 4294967295 x 65535",
                NULL);
    uint32_t thin[3] = {N, 0, COLS};
    write_idx(&d, "train-images-idx3-ubyte", 0x803, thin, 3, NULL, 0, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "absurd dimensions 7 x 0 x 5", NULL);
    /* Just over the byte limit with modest-looking numbers. */
    uint32_t over[3] = {(uint32_t)(MPCL_IDX_MAX_BYTES / 1024 + 1), 32, 32};
    write_idx(&d, "train-images-idx3-ubyte", 0x803, over, 3, NULL, 0, 0);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "absurd dimensions 2097153 x 32 x 32",
                NULL);
    tmp_remove(&d);
}

static void test_label_range(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    sample s = make_sample(9);
    s.labels[3] = 10;
    write_images(&d, "train", &s, 0);
    write_labels(&d, "train", &s, 1);
    expect_fail(d.path, "train", NULL, MPCL_ERR_FORMAT, "train-labels-idx1-ubyte.gz'",
                "label 10 at index 3", "class count 10", NULL);
    mpcl_idx_params p = mpcl_idx_default_params();
    assert_int_equal(p.num_classes, 10);
    p.num_classes = 5;
    s.labels[3] = 4; /* another label of the sample is >= 5 almost surely; make it so */
    s.labels[5] = 7;
    write_labels(&d, "train", &s, 1);
    int first_bad = -1;
    for (int i = 0; i < N && first_bad < 0; i++)
        if (s.labels[i] >= 5) first_bad = i;
    char want[64];
    snprintf(want, sizeof want, "label %u at index %d", s.labels[first_bad], first_bad);
    expect_fail(d.path, "train", &p, MPCL_ERR_FORMAT, want, "class count 5", NULL);

    /* num_classes 0: no check, the count is the largest label + 1. */
    s.labels[3] = 200;
    write_labels(&d, "train", &s, 1);
    p.num_classes = 0;
    mpcl_dataset *ds = NULL;
    TU_ASSERT_OK(mpcl_idx_load_ex(d.path, "train", &p, &ds));
    assert_int_equal(mpcl_dataset_num_classes(ds), 201);
    mpcl_dataset_destroy(ds);
    p.num_classes = 256;
    TU_ASSERT_OK(mpcl_idx_load_ex(d.path, "train", &p, &ds));
    assert_int_equal(mpcl_dataset_num_classes(ds), 256);
    mpcl_dataset_destroy(ds);
    p.num_classes = -1;
    expect_fail(d.path, "train", &p, MPCL_ERR_INVALID_ARG, "num_classes -1", NULL);
    tmp_remove(&d);
}

/* ---- hostile files: every field, every file ---- */

/* One corruption of one field of one file of a small valid set. */
typedef struct hostile {
    const char *field;
    int labels;       /* the labels file is the one corrupted */
    size_t at;        /* byte offset of a big-endian u32 to overwrite, or of a byte */
    uint32_t value;   /* the u32 written there (byte: only its low 8 bits) */
    int byte;         /* write one byte, not a u32 */
    long cut;         /* >= 0: keep only this many bytes of the file */
    const char *want; /* fragments the message must hold ('|' between them) */
} hostile;

/* Writes <prefix>'s files, images gz or not, labels the other way round,
 * with one field corrupted as h says. */
static void write_hostile(const tmpdir *d, const char *prefix, int images_gz, const hostile *h) {
    sample s = make_sample(21);
    unsigned char img[16 + PIX], lab[8 + N];
    put_be32(img, 0x803);
    put_be32(img + 4, N);
    put_be32(img + 8, ROWS);
    put_be32(img + 12, COLS);
    memcpy(img + 16, s.pixels, PIX);
    put_be32(lab, 0x801);
    put_be32(lab + 4, N);
    memcpy(lab + 8, s.labels, N);
    unsigned char *f = h->labels ? lab : img;
    size_t n = h->labels ? sizeof lab : sizeof img;
    if (h->byte)
        f[h->at] = (unsigned char)h->value;
    else if (h->cut < 0)
        put_be32(f + h->at, h->value);
    if (h->cut >= 0) n = (size_t)h->cut;
    char name[64];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    write_bytes(d, name, img, h->labels ? sizeof img : n, images_gz);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    write_bytes(d, name, lab, h->labels ? n : sizeof lab, !images_gz);
}

/* Each field of each file corrupted in turn, in train and t10k, raw and gzip:
 * the message names the file at fault (its .gz when that is what was read),
 * not its partner unless both are at issue (a count mismatch), and the
 * field. */
static void test_hostile_matrix(void **state) {
    (void)state;
    static const hostile cases[] = {
        {"images magic, not IDX", 0, 0, 0x12340803u, 0, -1,
         "magic number 0x12340803|first two bytes"},
        {"images data type", 0, 2, 0x0d, 1, -1, "magic number 0x00000d03|data type 0x0d"},
        {"images dimension count", 0, 3, 2, 1, -1,
         "magic number 0x00000802|dimension count 2, expected 3"},
        {"labels dimension count", 1, 3, 3, 1, -1,
         "magic number 0x00000803|dimension count 3, expected 1"},
        {"images header cut", 0, 0, 0, 0, 10,
         "(through the header; dimension 1 of 3 is cut short)|got only 10"},
        {"labels header cut", 1, 0, 0, 0, 6,
         "(through the header; dimension 0 of 1 is cut short)|got only 6"},
        {"images dimension 0 zero", 0, 4, 0, 0, -1, "zero images (dimension 0"},
        {"images dimension 1 zero", 0, 8, 0, 0, -1, "dimension 1 (rows, at byte offset 8) is zero"},
        {"images dimension 2 zero", 0, 12, 0, 0, -1,
         "dimension 2 (cols, at byte offset 12) is zero"},
        {"images dimension 0 huge", 0, 4, 0x80000000u, 0, -1,
         "dimension 0 (the image count, at byte offset 4) is more than"},
        {"images too large", 0, 8, 0x10000000u, 0, -1, "the product is more than the limit"},
        {"one image too large", 0, 8, 0x40000000u, 0, -1,
         "one image (dimensions 1 x 2) is more than the limit"},
        {"pixels cut", 0, 0, 0, 0, 16 + PIX - 5, "(through the pixel data)|got only 116"},
        {"labels cut", 1, 0, 0, 0, 8 + N - 2, "(through the label data)|got only 13"},
        {"label 10", 1, 8 + 3, 10, 1, -1, "label 10 at index 3|byte offset 11"},
    };
    tmpdir d;
    tmp_make(&d);
    const char *prefixes[2] = {"train", "t10k"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int p = 0; p < 2; p++)
            for (int gz = 0; gz < 2; gz++) {
                const hostile *h = &cases[c];
                write_hostile(&d, prefixes[p], gz, h);
                mpcl_dataset *ds = NULL;
                mpcl_status st = mpcl_idx_load(d.path, prefixes[p], &ds);
                const char *msg = mpcl_errmsg();
                char bad[128], other[128];
                int bad_gz = h->labels ? !gz : gz;
                snprintf(bad, sizeof bad, "%s/%s-%s%s'", d.path, prefixes[p],
                         h->labels ? "labels-idx1-ubyte" : "images-idx3-ubyte",
                         bad_gz ? ".gz" : "");
                snprintf(other, sizeof other, "%s-%s", prefixes[p],
                         h->labels ? "images-idx3-ubyte" : "labels-idx1-ubyte");
                if (st != MPCL_ERR_FORMAT || ds || !strstr(msg, bad) || strstr(msg, other))
                    fail_msg("%s (%s, %s): %s, not naming %s alone: %s", h->field, prefixes[p],
                             gz ? "images gz" : "labels gz", mpcl_status_name(st), bad, msg);
                char want[160];
                snprintf(want, sizeof want, "%s", h->want);
                for (char *frag = strtok(want, "|"); frag; frag = strtok(NULL, "|"))
                    if (!strstr(msg, frag))
                        fail_msg("%s (%s, gz %d): '%s' not in: %s", h->field, prefixes[p], gz, frag,
                                 msg);
                char path[256];
                for (int k = 0; k < 2; k++) {
                    snprintf(path, sizeof path, "%s/%s-%s-ubyte%s", d.path, prefixes[p],
                             k ? "labels-idx1" : "images-idx3", (k ? !gz : gz) ? ".gz" : "");
                    assert_int_equal(unlink(path), 0);
                }
            }
    tmp_remove(&d);
}

/* A count mismatch names both files as read (the images' .gz included),
 * in the load and in the read-ahead of the shape (mpcl__idx_peek). */
static void test_count_mismatch_names(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    sample s = make_sample(22);
    write_images(&d, "t10k", &s, 1);
    uint32_t ldims[1] = {N - 1};
    write_idx(&d, "t10k-labels-idx1-ubyte", 0x801, ldims, 1, s.labels, N - 1, 0);
    char images[128], labels[128];
    snprintf(images, sizeof images, "'%s/t10k-images-idx3-ubyte.gz' has 7 images", d.path);
    snprintf(labels, sizeof labels, "'%s/t10k-labels-idx1-ubyte' has 6 labels", d.path);
    expect_fail(d.path, "t10k", NULL, MPCL_ERR_FORMAT, images, labels, NULL);
    size_t count, features;
    int classes;
    assert_int_equal(mpcl__idx_peek(d.path, "t10k", 0, &count, &features, &classes),
                     MPCL_ERR_FORMAT);
    if (!strstr(mpcl_errmsg(), images) || !strstr(mpcl_errmsg(), labels))
        fail_msg("peek: '%s' and '%s' not in: %s", images, labels, mpcl_errmsg());
    /* Good files: the peek gives what the load gives. */
    write_labels(&d, "t10k", &s, 0);
    TU_ASSERT_OK(mpcl__idx_peek(d.path, "t10k", 0, &count, &features, &classes));
    assert_int_equal(count, N);
    assert_int_equal(features, ROWS * COLS);
    mpcl_dataset *ds = NULL;
    TU_ASSERT_OK(mpcl_idx_load_ex(d.path, "t10k", &(mpcl_idx_params){0}, &ds));
    assert_int_equal(classes, mpcl_dataset_num_classes(ds));
    mpcl_dataset_destroy(ds);
    tmp_remove(&d);
}

/* ---- subset and batches ---- */

static void test_subset_and_batch(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    sample s = make_sample(10);
    write_images(&d, "train", &s, 0);
    write_labels(&d, "train", &s, 0);
    mpcl_dataset *ds = NULL, *sub = NULL;
    TU_ASSERT_OK(mpcl_idx_load(d.path, "train", &ds));
    TU_ASSERT_OK(mpcl_dataset_subset(ds, 3, &sub));
    assert_int_equal(mpcl_dataset_count(sub), 3);
    assert_int_equal(mpcl_dataset_rows(sub), ROWS);
    assert_int_equal(mpcl_dataset_num_classes(sub), 10);
    assert_memory_equal(mpcl_dataset_pixels(sub), s.pixels, 3 * ROWS * COLS);
    assert_memory_equal(mpcl_dataset_labels(sub), s.labels, 3);
    mpcl_dataset_destroy(sub);
    sub = (mpcl_dataset *)&sub;
    assert_int_equal(mpcl_dataset_subset(ds, 0, &sub), MPCL_ERR_INVALID_ARG);
    assert_null(sub);
    assert_int_equal(mpcl_dataset_subset(ds, N + 1, &sub), MPCL_ERR_INVALID_ARG);

    int32_t idx[4] = {6, 0, 6, 2};
    float px[4 * ROWS * COLS];
    int32_t lab[4];
    TU_ASSERT_OK(mpcl_dataset_batch(ds, idx, 4, px, lab));
    for (int i = 0; i < 4; i++) {
        assert_int_equal(lab[i], s.labels[idx[i]]);
        for (int j = 0; j < ROWS * COLS; j++) {
            /* byte / 255 in float: one rounding, so equal to the double value
             * rounded to float. */
            float want = (float)(s.pixels[idx[i] * ROWS * COLS + j] / 255.0);
            assert_true(px[i * ROWS * COLS + j] == want);
        }
    }
    /* A bad index anywhere leaves both outputs untouched. */
    int32_t bad[3] = {1, N, 2};
    for (size_t i = 0; i < 4 * ROWS * COLS; i++) px[i] = tu_poison_f32();
    memset(lab, 0x5a, sizeof lab);
    assert_int_equal(mpcl_dataset_batch(ds, bad, 3, px, lab), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "idx[1] = 7 outside [0, 7)"));
    for (size_t i = 0; i < 4 * ROWS * COLS; i++) assert_true(px[i] != px[i]);
    for (size_t i = 0; i < sizeof lab; i++) assert_int_equal(((unsigned char *)lab)[i], 0x5a);
    int32_t neg[1] = {-1};
    assert_int_equal(mpcl_dataset_batch(ds, neg, 1, px, NULL), MPCL_ERR_INVALID_ARG);
    mpcl_dataset_destroy(ds);
    tmp_remove(&d);
}

/* ---- RNG and shuffle ---- */

/* Published splitmix64 outputs for state 0 (Vigna's splitmix64.c), and a
 * permutation computed by an independent Python implementation of the
 * documented algorithm (seed 42, n = 10). */
static void test_rng_and_shuffle_golden(void **state) {
    (void)state;
    uint64_t s = 0;
    assert_true(mpcl_rng_next(&s) == 0xe220a8397b1dcdafull);
    assert_true(mpcl_rng_next(&s) == 0x6e789e6aa1b965f4ull);
    assert_true(mpcl_rng_next(&s) == 0x06c45d188009454full);

    int32_t idx[10];
    const int32_t want[10] = {0, 9, 5, 8, 6, 4, 7, 2, 1, 3};
    mpcl_iota_indices(idx, 10);
    s = 42;
    mpcl_shuffle_indices(&s, idx, 10);
    assert_memory_equal(idx, want, sizeof want);

    /* Same seed, same permutation; a permutation every time. */
    enum { M = 1000 };
    int32_t a[M], b[M];
    int seen[M] = {0};
    uint64_t s1 = 7, s2 = 7;
    mpcl_iota_indices(a, M);
    mpcl_iota_indices(b, M);
    mpcl_shuffle_indices(&s1, a, M);
    mpcl_shuffle_indices(&s2, b, M);
    assert_memory_equal(a, b, sizeof a);
    assert_true(s1 == s2);
    for (int i = 0; i < M; i++) seen[a[i]]++;
    for (int i = 0; i < M; i++) assert_int_equal(seen[i], 1);
    int moved = 0;
    for (int i = 0; i < M; i++) moved += a[i] != i;
    assert_true(moved > M / 2); /* a shuffle of 1000 leaves ~1 element in place */
    mpcl_shuffle_indices(&s1, a, 0);
    mpcl_shuffle_indices(&s1, a, 1);
    for (int k = 0; k < 100; k++) assert_true(mpcl_rng_below(&s1, 3) < 3);
    assert_true(mpcl_rng_below(&s1, 1) == 0);
}

/* Each of the 6 orders of 3 elements must be equally likely: 60000 shuffles
 * give 10000 each with sd sqrt(60000 * 1/6 * 5/6) = 91; 6 sd = 550 fails a
 * biased shuffle (the classic "swap with any index" bias is ~1100 here) and
 * essentially never a fair one. */
static void test_shuffle_uniform(void **state) {
    (void)state;
    int counts[9] = {0};
    uint64_t s = 12345;
    for (int t = 0; t < 60000; t++) {
        int32_t v[3] = {0, 1, 2};
        mpcl_shuffle_indices(&s, v, 3);
        counts[v[0] * 3 + v[1]]++;
    }
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            if (a != b) {
                int c = counts[a * 3 + b];
                if (c < 10000 - 550 || c > 10000 + 550)
                    fail_msg("order %d%d: %d of 60000", a, b, c);
            }
}

/* ---- the real files ---- */

static void check_real(const char *prefix, size_t count, int per_class, uint8_t first_label,
                       unsigned first_image_sum) {
    mpcl_dataset *ds = NULL;
    TU_ASSERT_OK(mpcl_idx_load(MPCL_DATA_DEFAULT_DIR, prefix, &ds));
    assert_int_equal(mpcl_dataset_count(ds), count);
    assert_int_equal(mpcl_dataset_rows(ds), 28);
    assert_int_equal(mpcl_dataset_cols(ds), 28);
    assert_int_equal(mpcl_dataset_num_classes(ds), 10);
    int classes[10] = {0};
    const uint8_t *lab = mpcl_dataset_labels(ds);
    for (size_t i = 0; i < count; i++) {
        assert_true(lab[i] < 10);
        classes[lab[i]]++;
    }
    for (int c = 0; c < 10; c++) assert_int_equal(classes[c], per_class);
    /* Values from Python's gzip module on the same files. */
    assert_int_equal(lab[0], first_label);
    unsigned sum = 0;
    for (int i = 0; i < 784; i++) sum += mpcl_dataset_pixels(ds)[i];
    assert_int_equal(sum, first_image_sum);
    mpcl_dataset_destroy(ds);
}

static void test_real_fashion_mnist(void **state) {
    (void)state;
    check_real("train", 60000, 6000, 9, 76247);
    check_real("t10k", 10000, 1000, 9, 33456);
    /* NULL means the default folder. */
    mpcl_dataset *ds = NULL;
    TU_ASSERT_OK(mpcl_idx_load(NULL, "t10k", &ds));
    assert_int_equal(mpcl_dataset_count(ds), 10000);
    mpcl_dataset_destroy(ds);
}

/* A data set from memory is a copy, checked like a file's: every label
 * below the class count, no empty dimension. */
static void test_from_memory(void **state) {
    (void)state;
    uint8_t px[2 * 6], lab[2] = {2, 0};
    for (int i = 0; i < 12; i++) px[i] = (uint8_t)(i * 20);
    mpcl_dataset *ds = (mpcl_dataset *)1;
    TU_ASSERT_OK(mpcl_dataset_from_memory(px, lab, 2, 2, 3, 3, &ds));
    px[0] = 99; /* the data set holds its own copy */
    lab[0] = 1;
    assert_int_equal(mpcl_dataset_count(ds), 2);
    assert_int_equal(mpcl_dataset_features(ds), 6);
    assert_int_equal(mpcl_dataset_num_classes(ds), 3);
    assert_int_equal(mpcl_dataset_pixels(ds)[0], 0);
    assert_int_equal(mpcl_dataset_pixels(ds)[11], 220);
    assert_int_equal(mpcl_dataset_labels(ds)[0], 2);
    float x[6];
    int32_t y, idx = 1;
    TU_ASSERT_OK(mpcl_dataset_batch(ds, &idx, 1, x, &y));
    assert_int_equal(y, 0);
    assert_true(x[5] == 220.0f / 255.0f);
    mpcl_dataset_destroy(ds);

    lab[0] = 3; /* not below 3 classes */
    ds = (mpcl_dataset *)1;
    assert_int_equal(mpcl_dataset_from_memory(px, lab, 2, 2, 3, 3, &ds), MPCL_ERR_LABEL);
    assert_null(ds);
    assert_non_null(strstr(mpcl_errmsg(), "sample 0"));
    lab[0] = 0;
    assert_int_equal(mpcl_dataset_from_memory(px, lab, 0, 2, 3, 3, &ds), MPCL_ERR_INVALID_ARG);
    assert_int_equal(mpcl_dataset_from_memory(px, lab, 2, 0, 3, 3, &ds), MPCL_ERR_INVALID_ARG);
    assert_int_equal(mpcl_dataset_from_memory(px, lab, 2, 2, 3, 0, &ds), MPCL_ERR_INVALID_ARG);
    assert_int_equal(mpcl_dataset_from_memory(px, lab, 2, 2, 3, 257, &ds), MPCL_ERR_INVALID_ARG);
    assert_int_equal(mpcl_dataset_from_memory(NULL, lab, 2, 2, 3, 3, &ds), MPCL_ERR_INVALID_ARG);
    assert_int_equal(mpcl_dataset_from_memory(px, lab, SIZE_MAX / 2, 1 << 16, 1 << 16, 3, &ds),
                     MPCL_ERR_INVALID_ARG);
    assert_null(ds);
}

/* ---- NPY data sets ---- */

/* Writes <d>/<name> as an NPY 1.0 file of ndim sizes of dtype descr (e.g.
 * "<f4") holding `bytes` bytes of data. */
static void write_npy(const tmpdir *d, const char *name, const char *descr, size_t ndim,
                      const size_t *shape, const void *data, size_t bytes) {
    char dims[128] = "", hdr[256];
    size_t k = 0;
    for (size_t i = 0; i < ndim; i++)
        k += (size_t)snprintf(dims + k, sizeof dims - k, "%zu,%s", shape[i],
                              i + 1 < ndim ? " " : "");
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                     descr, dims);
    size_t len = (size_t)n + 1, total = (10 + len + 63) / 64 * 64; /* 64-byte aligned data */
    unsigned char *buf = calloc(1, total + bytes);
    assert_non_null(buf);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)((total - 10) & 0xff);
    buf[9] = (unsigned char)((total - 10) >> 8);
    memset(buf + 10, ' ', total - 10);
    memcpy(buf + 10, hdr, (size_t)n);
    buf[total - 1] = '\n';
    memcpy(buf + total, data, bytes);
    write_bytes(d, name, buf, total + bytes, 0);
    free(buf);
}

static void npy_path(char *out, size_t cap, const tmpdir *d, const char *name) {
    snprintf(out, cap, "%s/%s", d->path, name);
}

/* mpcl_dataset_from_npy of <d>/x.npy and <d>/y.npy fails with `status` and
 * a message holding every fragment (NULL-terminated). */
static void expect_npy_fail(const tmpdir *d, const mpcl_npy_data_params *p, mpcl_status status,
                            ...) {
    char xp[256], yp[256];
    npy_path(xp, sizeof xp, d, "x.npy");
    npy_path(yp, sizeof yp, d, "y.npy");
    mpcl_dataset *ds = (mpcl_dataset *)&ds;
    mpcl_status st = mpcl_dataset_from_npy(xp, yp, p, &ds);
    va_list ap;
    va_start(ap, status);
    check_failure(st, ds, status, ap);
    va_end(ap);
}

static mpcl_dataset *npy_load(const tmpdir *d, const mpcl_npy_data_params *p) {
    char xp[256], yp[256];
    npy_path(xp, sizeof xp, d, "x.npy");
    npy_path(yp, sizeof yp, d, "y.npy");
    mpcl_dataset *ds = NULL;
    TU_ASSERT_OK(mpcl_dataset_from_npy(xp, yp, p, &ds));
    return ds;
}

/* f4 x of shape (4, 2, 3) with i8 labels: kept as f32 with its shape, the
 * class count inferred, batches as they are; f2 kept as f16; u1 kept as
 * bytes and scaled as IDX pixels; f8 and i2 converted to f32. */
static void test_npy_dataset_dtypes(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    float x[24];
    for (int i = 0; i < 24; i++) x[i] = (float)i * 0.5f - 3.0f;
    int64_t y[4] = {2, 0, 1, 2};
    write_npy(&d, "x.npy", "<f4", 3, (size_t[]){4, 2, 3}, x, sizeof x);
    write_npy(&d, "y.npy", "<i8", 1, (size_t[]){4}, y, sizeof y);
    mpcl_dataset *ds = npy_load(&d, NULL);
    size_t shape[3];
    assert_int_equal(mpcl_dataset_shape(ds, shape), 2);
    assert_int_equal(shape[0], 2);
    assert_int_equal(shape[1], 3);
    assert_int_equal(mpcl_dataset_count(ds), 4);
    assert_int_equal(mpcl_dataset_features(ds), 6);
    assert_int_equal(mpcl_dataset_x_dtype(ds), MPCL_NPY_F4);
    assert_int_equal(mpcl_dataset_num_classes(ds), 3);
    assert_null(mpcl_dataset_pixels(ds));
    assert_null(mpcl_dataset_targets(ds));
    assert_int_equal(mpcl_dataset_target_cols(ds), 0);
    int32_t idx[2] = {3, 1}, lab[2];
    float got[12];
    TU_ASSERT_OK(mpcl_dataset_batch(ds, idx, 2, got, lab));
    assert_memory_equal(got, x + 18, 6 * sizeof(float));
    assert_memory_equal(got + 6, x + 6, 6 * sizeof(float));
    assert_int_equal(lab[0], 2);
    assert_int_equal(lab[1], 0);
    assert_string_equal(mpcl__dataset_path(ds, true) + strlen(d.path), "/y.npy");
    mpcl_dataset_destroy(ds);

    uint16_t h[24];
    for (int i = 0; i < 24; i++) h[i] = mpcl_f32_to_f16(x[i]);
    write_npy(&d, "x.npy", "<f2", 2, (size_t[]){4, 6}, h, sizeof h);
    ds = npy_load(&d, NULL);
    assert_int_equal(mpcl_dataset_x_dtype(ds), MPCL_NPY_F2);
    assert_int_equal(mpcl_dataset_shape(ds, shape), 1);
    assert_int_equal(shape[0], 6);
    TU_ASSERT_OK(mpcl_dataset_batch(ds, idx, 1, got, NULL));
    assert_memory_equal(got, x + 18, 6 * sizeof(float)); /* halves of 0.5 steps are exact */
    mpcl_dataset_destroy(ds);

    uint8_t b[24];
    for (int i = 0; i < 24; i++) b[i] = (uint8_t)(i * 10);
    write_npy(&d, "x.npy", "|u1", 2, (size_t[]){4, 6}, b, sizeof b);
    ds = npy_load(&d, NULL);
    assert_int_equal(mpcl_dataset_x_dtype(ds), MPCL_NPY_U1);
    assert_int_equal(mpcl_dataset_pixels(ds)[23], 230);
    TU_ASSERT_OK(mpcl_dataset_batch(ds, idx, 1, got, NULL));
    assert_true(got[5] == 230.0f / 255.0f);
    mpcl_dataset_destroy(ds);

    double f8[24];
    int16_t i2[24];
    for (int i = 0; i < 24; i++) {
        f8[i] = x[i];
        i2[i] = (int16_t)(i - 12);
    }
    write_npy(&d, "x.npy", "<f8", 2, (size_t[]){4, 6}, f8, sizeof f8);
    ds = npy_load(&d, NULL);
    assert_int_equal(mpcl_dataset_x_dtype(ds), MPCL_NPY_F4);
    assert_memory_equal(mpcl_dataset_x(ds), x, sizeof x);
    mpcl_dataset_destroy(ds);
    write_npy(&d, "x.npy", "<i2", 2, (size_t[]){4, 6}, i2, sizeof i2);
    ds = npy_load(&d, NULL);
    assert_int_equal(mpcl_dataset_x_dtype(ds), MPCL_NPY_F4);
    assert_true(((const float *)mpcl_dataset_x(ds))[0] == -12.0f);
    mpcl_dataset_destroy(ds);
    tmp_remove(&d);
}

/* Each bad input refused with its status and a message naming the file and
 * what is wrong where. */
static void test_npy_dataset_refusals(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    float x[6] = {0, 1, 2, 3, 4, 5};
    uint8_t y3[3] = {0, 1, 5};
    write_npy(&d, "y.npy", "|u1", 1, (size_t[]){3}, y3, sizeof y3);
    write_npy(&d, "x.npy", "<f4", 2, (size_t[]){3, 2}, x, sizeof x);
    mpcl_npy_data_params p = mpcl_npy_data_default_params();
    p.num_classes = 3;
    expect_npy_fail(&d, &p, MPCL_ERR_LABEL, "y.npy", "label 5 at row 2", "class count 3", NULL);

    x[3] = NAN;
    write_npy(&d, "x.npy", "<f4", 2, (size_t[]){3, 2}, x, sizeof x);
    expect_npy_fail(&d, NULL, MPCL_ERR_FORMAT, "x.npy", "row 1, column 1 is NaN", NULL);
    x[3] = 3;

    write_npy(&d, "x.npy", "<f4", 2, (size_t[]){2, 3}, x, sizeof x);
    expect_npy_fail(&d, NULL, MPCL_ERR_FORMAT, "x.npy' has 2 rows but '", "y.npy' has 3", NULL);

    write_npy(&d, "x.npy", "<f4", 1, (size_t[]){6}, x, sizeof x);
    expect_npy_fail(&d, NULL, MPCL_ERR_FORMAT, "x.npy", "x has 1 dimension", "(N, 1)", NULL);

    write_npy(&d, "x.npy", "<f4", 2, (size_t[]){0, 2}, x, 0);
    expect_npy_fail(&d, NULL, MPCL_ERR_FORMAT, "x.npy", "zero rows", NULL);

    int32_t big[6] = {0, 1, 2, 16777217, 4, 5};
    write_npy(&d, "x.npy", "<i4", 2, (size_t[]){3, 2}, big, sizeof big);
    expect_npy_fail(&d, NULL, MPCL_ERR_FORMAT, "x.npy", "row 1, column 1 is 16777217", "2^24",
                    NULL);
    double huge[6] = {0, 1, 2, 3, 1e300, 5};
    write_npy(&d, "x.npy", "<f8", 2, (size_t[]){3, 2}, huge, sizeof huge);
    expect_npy_fail(&d, NULL, MPCL_ERR_FORMAT, "x.npy", "row 2, column 0", "f32 range", NULL);

    write_npy(&d, "x.npy", "<f4", 2, (size_t[]){3, 2}, x, sizeof x);
    float fy[3] = {0, 1, 1};
    write_npy(&d, "y.npy", "<f4", 1, (size_t[]){3}, fy, sizeof fy);
    expect_npy_fail(&d, NULL, MPCL_ERR_FORMAT, "y.npy",
                    "float targets need --loss binary_crossentropy or mse", NULL);
    uint8_t onehot[6] = {1, 0, 0, 1, 1, 0};
    write_npy(&d, "y.npy", "|u1", 2, (size_t[]){3, 2}, onehot, sizeof onehot);
    expect_npy_fail(&d, NULL, MPCL_ERR_FORMAT, "y.npy", "y has 2 columns", NULL);
    int8_t neg[3] = {0, -1, 1};
    write_npy(&d, "y.npy", "|i1", 1, (size_t[]){3}, neg, sizeof neg);
    expect_npy_fail(&d, NULL, MPCL_ERR_FORMAT, "y.npy", "label -1 at row 1 is negative", NULL);
    int16_t wide[3] = {0, 256, 1};
    write_npy(&d, "y.npy", "<i2", 1, (size_t[]){3}, wide, sizeof wide);
    expect_npy_fail(&d, NULL, MPCL_ERR_LABEL, "label 256 at row 1", "class count 256", NULL);
    fy[1] = INFINITY;
    write_npy(&d, "y.npy", "<f4", 2, (size_t[]){3, 1}, fy, sizeof fy);
    p.float_targets = true;
    expect_npy_fail(&d, &p, MPCL_ERR_FORMAT, "y.npy", "row 1, column 0 is inf", NULL);
    tmp_remove(&d);
}

/* Float targets: f4 columns kept, integers converted; the batch of targets
 * is the rows asked for. From memory: the same data set, named x and y. */
static void test_npy_targets_and_arrays(void **state) {
    (void)state;
    tmpdir d;
    tmp_make(&d);
    float x[6] = {0, 1, 2, 3, 4, 5}, ty[6] = {0.25f, 1, 0, 0.5f, -2, 3};
    write_npy(&d, "x.npy", "<f4", 2, (size_t[]){3, 2}, x, sizeof x);
    write_npy(&d, "y.npy", "<f4", 2, (size_t[]){3, 2}, ty, sizeof ty);
    mpcl_npy_data_params p = mpcl_npy_data_default_params();
    p.float_targets = true;
    mpcl_dataset *ds = npy_load(&d, &p);
    assert_int_equal(mpcl_dataset_target_cols(ds), 2);
    assert_int_equal(mpcl_dataset_num_classes(ds), 0);
    assert_null(mpcl_dataset_labels(ds));
    int32_t idx[2] = {2, 0}, lab;
    float got[4];
    TU_ASSERT_OK(mpcl_dataset_batch_targets(ds, idx, 2, got));
    assert_true(got[0] == -2 && got[1] == 3 && got[2] == 0.25f && got[3] == 1);
    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG, mpcl_dataset_batch(ds, idx, 1, NULL, &lab));
    mpcl_dataset_destroy(ds);
    uint8_t by[3] = {1, 0, 1};
    write_npy(&d, "y.npy", "|u1", 1, (size_t[]){3}, by, sizeof by);
    ds = npy_load(&d, &p);
    assert_int_equal(mpcl_dataset_target_cols(ds), 1);
    assert_true(mpcl_dataset_targets(ds)[2] == 1.0f);
    mpcl_dataset_destroy(ds);
    tmp_remove(&d);

    size_t xs[2] = {3, 2}, ys[1] = {3};
    mpcl_array_view xv = {x, MPCL_NPY_F4, 2, xs}, yv = {by, MPCL_NPY_U1, 1, ys};
    TU_ASSERT_OK(mpcl_dataset_from_arrays(&xv, &yv, NULL, &ds));
    assert_int_equal(mpcl_dataset_num_classes(ds), 2);
    assert_memory_equal(mpcl_dataset_x(ds), x, sizeof x);
    assert_string_equal(mpcl__dataset_path(ds, false), "");
    mpcl_dataset_destroy(ds);
    x[1] = NAN;
    ds = (mpcl_dataset *)&ds;
    TU_EXPECT_STATUS(MPCL_ERR_FORMAT, mpcl_dataset_from_arrays(&xv, &yv, NULL, &ds));
    assert_null(ds);
    assert_non_null(strstr(mpcl_errmsg(), "'x': row 0, column 1 is NaN"));
}

/* Keras' validation_split: the last rows, floor(n * (1 - f)) kept for
 * training; fractions outside (0, 1) and empty sides refused. */
static void test_dataset_split(void **state) {
    (void)state;
    uint8_t px[10 * 2], lab[10];
    for (int i = 0; i < 20; i++) px[i] = (uint8_t)i;
    for (int i = 0; i < 10; i++) lab[i] = (uint8_t)(i % 3);
    mpcl_dataset *all = NULL, *tr = NULL, *va = NULL;
    TU_ASSERT_OK(mpcl_dataset_from_memory(px, lab, 10, 1, 2, 3, &all));
    TU_ASSERT_OK(mpcl_dataset_split(all, 0.25, &tr, &va)); /* floor(7.5) = 7 */
    assert_int_equal(mpcl_dataset_count(tr), 7);
    assert_int_equal(mpcl_dataset_count(va), 3);
    assert_int_equal(mpcl_dataset_pixels(va)[0], 14);
    assert_int_equal(mpcl_dataset_labels(va)[2], 0);
    assert_int_equal(mpcl_dataset_pixels(tr)[13], 13);
    assert_int_equal(mpcl_dataset_num_classes(va), 3);
    mpcl_dataset_destroy(tr);
    mpcl_dataset_destroy(va);
    const double bad[] = {0.0, 1.0, -0.5, 1.5, NAN};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tr = va = (mpcl_dataset *)&tr;
        TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG, mpcl_dataset_split(all, bad[i], &tr, &va));
        assert_null(tr);
        assert_null(va);
        assert_non_null(strstr(mpcl_errmsg(), "outside (0, 1)"));
    }
    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG, mpcl_dataset_split(all, 0.95, &tr, &va));
    assert_non_null(strstr(mpcl_errmsg(), "leaves 0 for training and 10 for validation"));
    TU_EXPECT_STATUS(MPCL_ERR_INVALID_ARG, mpcl_dataset_split(all, 1e-17, &tr, &va));
    assert_non_null(strstr(mpcl_errmsg(), "leaves 10 for training and 0 for validation"));
    mpcl_dataset_destroy(all);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raw_round_trip),
        cmocka_unit_test(test_gzip_round_trip),
        cmocka_unit_test(test_mixed_and_preference),
        cmocka_unit_test(test_gzip_details),
        cmocka_unit_test(test_missing_folder_and_file),
        cmocka_unit_test(test_special_files),
        cmocka_unit_test(test_wrong_magic),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_claim_beyond_file),
        cmocka_unit_test(test_failures_close_files),
        cmocka_unit_test(test_corrupt_gzip),
        cmocka_unit_test(test_counts_and_dimensions),
        cmocka_unit_test(test_label_range),
        cmocka_unit_test(test_hostile_matrix),
        cmocka_unit_test(test_count_mismatch_names),
        cmocka_unit_test(test_subset_and_batch),
        cmocka_unit_test(test_from_memory),
        cmocka_unit_test(test_npy_dataset_dtypes),
        cmocka_unit_test(test_npy_dataset_refusals),
        cmocka_unit_test(test_npy_targets_and_arrays),
        cmocka_unit_test(test_dataset_split),
        cmocka_unit_test(test_rng_and_shuffle_golden),
        cmocka_unit_test(test_shuffle_uniform),
        cmocka_unit_test(test_real_fashion_mnist),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
