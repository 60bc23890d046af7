/* Token data (include/mpcl/tokens.h): the byte tokenizer on fixed bytes
 * (invalid UTF-8 included), folders with what must be skipped in them (a
 * FIFO, a subfolder, a link, .dat files: alarm() turns a blocking open into
 * a failure instead of a hang), llm.c token files written here and every bad
 * one with its message, and windows drawn on the device: contiguous slices
 * of the right part, at the starts of the header's formula (computed here
 * from the dropout reference's hash), reproducible, every start reachable
 * and roughly uniform. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io.h"
#include "ref_ops.h"
#include "testutil.h"

static char dir[64];

static int setup(void **state) {
    (void)state;
    return tu_tmpdir_make(dir, "tokens");
}

static int teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(dir);
}

/* dir/name, in a static buffer of its own per call site's slot. */
static const char *path_in(char buf[256], const char *name) {
    snprintf(buf, 256, "%s/%s", dir, name);
    return buf;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Fails unless `got` is `want`, the message names `path` and `needle`, and
 * nothing was handed out. */
static void expect_refused(mpcl_status got, mpcl_tokens *t, mpcl_status want, const char *path,
                           const char *needle) {
    tu_expect_error(got, want, needle);
    if (path && !strstr(mpcl_errmsg(), path))
        fail_msg("message \"%s\" does not name the file %s", mpcl_errmsg(), path);
    assert_null(t);
}

/* ---- text ---- */

/* Every byte is its own token, 0..255, whatever UTF-8 makes of it: a lone
 * continuation byte, 0xfe and 0xff (never in UTF-8), a sequence cut short,
 * NUL. */
static void test_text_bytes(void **state) {
    (void)state;
    static const unsigned char text[] = {'A', 0xff, 0xfe, 0x80, 0x00, ' ', 0xc3, 0x28, 'z', '\n'};
    static const uint16_t want[] = {65, 255, 254, 128, 0, 32, 195, 40, 122, 10};
    char p[256];
    write_file(path_in(p, "bytes.txt"), text, sizeof text);
    mpcl_tokens *t = NULL;
    TU_ASSERT_OK(mpcl_tokens_read_text(p, &t));
    assert_int_equal(mpcl_tokens_count(t), 10);
    assert_int_equal(mpcl_tokens_vocab(t), 256);
    assert_memory_equal(mpcl_tokens_ids(t), want, sizeof want);
    assert_string_equal(mpcl_tokens_name(t), p);
    assert_int_equal(mpcl_tokens_file_count(t), 1);
    assert_string_equal(mpcl_tokens_file(t, 0), p);
    assert_null(mpcl_tokens_file(t, 1));
    mpcl_tokens_destroy(t);
}

static void test_text_refused(void **state) {
    (void)state;
    char p[256];
    mpcl_tokens *t = NULL;
    write_file(path_in(p, "empty.txt"), "", 0);
    expect_refused(mpcl_tokens_read_text(p, &t), t, MPCL_ERR_FORMAT, p, "the file is empty");
    expect_refused(mpcl_tokens_read_text(path_in(p, "missing.txt"), &t), t, MPCL_ERR_IO, p,
                   "No such file");
    assert_int_equal(mkfifo(path_in(p, "given.fifo"), 0600), 0);
    alarm(10);
    expect_refused(mpcl_tokens_read_text(p, &t), t, MPCL_ERR_IO, p, "is a FIFO");
    alarm(0);
    tu_expect_error(mpcl_tokens_read_text(NULL, &t), MPCL_ERR_INVALID_ARG, "path is NULL");
}

/* A folder: its regular files in the byte order of their names ("Z" before
 * "a"), without the .dat files, the FIFO (never opened: no hang), the
 * subfolder (not recursed into) and the link (its target is read under its
 * own name). */
static void test_text_folder(void **state) {
    (void)state;
    char sub[256], p[256], q[256];
    path_in(sub, "corpus");
    assert_int_equal(mkdir(sub, 0700), 0);
    path_in(p, "corpus/b");
    write_file(p, "BB", 2);
    path_in(p, "corpus/a.txt");
    write_file(p, "a\x80", 2);
    path_in(p, "corpus/Z");
    write_file(p, "z", 1);
    path_in(p, "corpus/a.dat");
    write_file(p, "XX", 2);
    path_in(p, "corpus/a.txt.u8");
    assert_int_equal(symlink("a.txt", p), 0);
    path_in(p, "corpus/fifo");
    assert_int_equal(mkfifo(p, 0600), 0);
    path_in(p, "corpus/inner");
    assert_int_equal(mkdir(p, 0700), 0);
    path_in(q, "corpus/inner/c");
    write_file(q, "S", 1);

    mpcl_tokens *t = NULL;
    alarm(10);
    TU_ASSERT_OK(mpcl_tokens_read_text(sub, &t));
    alarm(0);
    static const uint16_t want[] = {'z', 'a', 0x80, 'B', 'B'};
    assert_int_equal(mpcl_tokens_count(t), 5);
    assert_memory_equal(mpcl_tokens_ids(t), want, sizeof want);
    static const char *const files[] = {"Z", "a.txt", "b"};
    assert_int_equal(mpcl_tokens_file_count(t), 3);
    for (size_t i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "corpus/%s", files[i]);
        assert_string_equal(mpcl_tokens_file(t, i), path_in(p, name));
    }
    mpcl_tokens_destroy(t);
}

static void test_text_folder_refused(void **state) {
    (void)state;
    char sub[256], p[256];
    mpcl_tokens *t = NULL;
    assert_int_equal(mkdir(path_in(sub, "nothing"), 0700), 0);
    path_in(p, "nothing/only.dat");
    write_file(p, "XX", 2);
    expect_refused(mpcl_tokens_read_text(sub, &t), t, MPCL_ERR_FORMAT, sub,
                   "the folder holds no text file");
    path_in(p, "nothing/e1");
    write_file(p, "", 0);
    path_in(p, "nothing/e2");
    write_file(p, "", 0);
    expect_refused(mpcl_tokens_read_text(sub, &t), t, MPCL_ERR_FORMAT, sub,
                   "its 2 text files are all empty");
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The fortunes package, where the set-up installed it: each text file once
 * (its NAME.u8 links and .dat indexes left out), the sizes adding up. */
static void test_default_corpus(void **state) {
    (void)state;
    struct stat sb;
    if (stat(MPCL_TOKENS_DEFAULT_DIR, &sb) != 0) skip();
    mpcl_tokens *t = NULL;
    TU_ASSERT_OK(mpcl_tokens_read_text(MPCL_TOKENS_DEFAULT_DIR, &t));
    size_t total = 0, n = mpcl_tokens_file_count(t);
    assert_true(n >= 10);
    for (size_t i = 0; i < n; i++) {
        const char *f = mpcl_tokens_file(t, i);
        assert_false(ends_with(f, ".u8") || ends_with(f, ".dat"));
        assert_int_equal(lstat(f, &sb), 0);
        assert_true(S_ISREG(sb.st_mode));
        total += (size_t)sb.st_size;
        if (i) assert_true(strcmp(mpcl_tokens_file(t, i - 1), f) < 0);
    }
    assert_int_equal(mpcl_tokens_count(t), total);
    assert_true(total > 1000000 && total < 4000000); /* ~2.5 MB, not twice that */
    mpcl_tokens_destroy(t);
}

/* ---- llm.c token files ---- */

static void put_le32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(u >> (8 * i));
}

/* A token file image: the header (magic, version, count; 7 in the unread
 * rest) and body_bytes of tokens ids[i] as little-endian uint16, cut or
 * padded with 0xaa. Freed by the caller. */
static unsigned char *bin_image(int32_t magic, int32_t version, int32_t count, const uint16_t *ids,
                                size_t n_ids, size_t body_bytes, size_t *size) {
    *size = 1024 + body_bytes;
    unsigned char *b = malloc(*size);
    assert_non_null(b);
    for (int i = 0; i < 256; i++) put_le32(b + 4 * i, 7);
    put_le32(b, magic);
    put_le32(b + 4, version);
    put_le32(b + 8, count);
    for (size_t k = 0; k < body_bytes; k++)
        b[1024 + k] = k / 2 < n_ids ? (unsigned char)(ids[k / 2] >> (k % 2 ? 8 : 0)) : 0xaa;
    return b;
}

/* ids[i] = (i * 40503 + 12345) mod 2^16: an odd multiplier, so n <= 2^16
 * ids are all different (a window's start is found from its first token),
 * and both bytes of a token take every value. */
static uint16_t *spread_ids(size_t n) {
    uint16_t *ids = malloc(n * sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < n; i++) ids[i] = (uint16_t)(i * 40503u + 12345u);
    return ids;
}

static void test_bin_round_trip(void **state) {
    (void)state;
    const size_t n = 3001;
    uint16_t *ids = spread_ids(n);
    size_t size;
    unsigned char *img = bin_image(20240520, 1, (int32_t)n, ids, n, 2 * n, &size);
    char p[256];
    write_file(path_in(p, "ok.bin"), img, size);
    mpcl_tokens *t = NULL, *m = NULL;
    TU_ASSERT_OK(mpcl_tokens_read_bin(p, 65536, &t));
    assert_int_equal(mpcl_tokens_count(t), n);
    assert_int_equal(mpcl_tokens_vocab(t), 65536);
    assert_memory_equal(mpcl_tokens_ids(t), ids, n * sizeof *ids);
    assert_string_equal(mpcl_tokens_file(t, 0), p);
    TU_ASSERT_OK(mpcl__tokens_bin_parse("mem.bin", img, size, 65536, &m));
    assert_int_equal(mpcl_tokens_count(m), n);
    assert_memory_equal(mpcl_tokens_ids(m), ids, n * sizeof *ids);
    /* One token, the largest id of a vocabulary of 50257 (GPT-2's). */
    uint16_t top = 50256;
    free(img);
    img = bin_image(20240520, 1, 1, &top, 1, 2, &size);
    write_file(p, img, size);
    mpcl_tokens_destroy(t);
    TU_ASSERT_OK(mpcl_tokens_read_bin(p, 50257, &t));
    assert_int_equal(mpcl_tokens_count(t), 1);
    assert_int_equal(mpcl_tokens_ids(t)[0], 50256);
    mpcl_tokens_destroy(t);
    mpcl_tokens_destroy(m);
    free(img);
    free(ids);
}

typedef struct bad_bin {
    int32_t magic, version, count;
    size_t body_bytes; /* of tokens 0..999 */
    size_t vocab;
    const char *needle;
} bad_bin;

/* Each bad file, from disk and from memory: MPCL_ERR_FORMAT naming the file
 * and what is wrong. */
static void test_bin_refused(void **state) {
    (void)state;
    const bad_bin cases[] = {
        {20240328, 1, 1000, 2000, 1000, "magic number 20240328, expected 20240520"},
        {20240520, 2, 1000, 2000, 1000, "version 2, expected 1"},
        {20240520, 1, 0, 0, 1000, "header says 0 tokens"},
        {20240520, 1, -5, 2000, 1000, "header says -5 tokens"},
        {20240520, 1, 1000, 1996, 1000, "header says 1000 tokens, the file holds 998 (2 bytes"},
        {20240520, 1, 1000, 2002, 1000, "header says 1000 tokens, the file holds 1001 (2 bytes"},
        {20240520, 1, 1000, 2001, 1000, "the file holds 1000 and an odd byte"},
        {20240520, 1, 1000, 1999, 1000, "the file holds 999 and an odd byte"},
        {20240520, 1, 1000, 2000, 256,
         "token 256 (of 1000) is 256, at or above the vocabulary size 256"},
        {20240520, 1, 1000, 2000, 999,
         "token 999 (of 1000) is 999, at or above the vocabulary size 999"},
    };
    uint16_t ids[1000];
    for (size_t i = 0; i < 1000; i++) ids[i] = (uint16_t)i;
    char p[256];
    path_in(p, "bad.bin");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const bad_bin *k = &cases[c];
        size_t size;
        unsigned char *img =
            bin_image(k->magic, k->version, k->count, ids, 1000, k->body_bytes, &size);
        write_file(p, img, size);
        mpcl_tokens *t = NULL;
        expect_refused(mpcl_tokens_read_bin(p, k->vocab, &t), t, MPCL_ERR_FORMAT, p, k->needle);
        expect_refused(mpcl__tokens_bin_parse("mem.bin", img, size, k->vocab, &t), t,
                       MPCL_ERR_FORMAT, "'mem.bin'", k->needle);
        free(img);
    }
    /* Shorter than the header: 100 bytes, and none. */
    unsigned char head[100] = {0};
    put_le32(head, 20240520);
    mpcl_tokens *t = NULL;
    write_file(p, head, sizeof head);
    expect_refused(mpcl_tokens_read_bin(p, 256, &t), t, MPCL_ERR_FORMAT, p,
                   "the file holds 100 bytes, fewer than the 1024-byte header");
    write_file(p, head, 0);
    expect_refused(mpcl_tokens_read_bin(p, 256, &t), t, MPCL_ERR_FORMAT, p, "holds 0 bytes");
    expect_refused(mpcl__tokens_bin_parse("mem.bin", head, 100, 256, &t), t, MPCL_ERR_FORMAT,
                   "'mem.bin'", "holds 100 bytes");
}

static void test_bin_arguments(void **state) {
    (void)state;
    char p[256];
    mpcl_tokens *t = NULL;
    tu_expect_error(mpcl_tokens_read_bin(path_in(p, "bad.bin"), 0, &t), MPCL_ERR_INVALID_ARG,
                    "vocabulary 0 is outside 1..65536");
    tu_expect_error(mpcl_tokens_read_bin(p, 65537, &t), MPCL_ERR_INVALID_ARG, "vocabulary 65537");
    expect_refused(mpcl_tokens_read_bin(path_in(p, "missing.bin"), 256, &t), t, MPCL_ERR_IO, p,
                   "No such file");
    assert_int_equal(mkfifo(path_in(p, "tokens.fifo"), 0600), 0);
    alarm(10);
    expect_refused(mpcl_tokens_read_bin(p, 256, &t), t, MPCL_ERR_IO, p, "is a FIFO");
    alarm(0);
}

static void test_from_memory(void **state) {
    (void)state;
    const uint16_t ids[] = {3, 1, 4, 1, 5};
    mpcl_tokens *t = NULL;
    TU_ASSERT_OK(mpcl_tokens_from_memory(NULL, ids, 5, 6, &t));
    assert_memory_equal(mpcl_tokens_ids(t), ids, sizeof ids);
    assert_string_equal(mpcl_tokens_name(t), "tokens");
    assert_int_equal(mpcl_tokens_file_count(t), 0);
    mpcl_tokens_destroy(t);
    t = NULL;
    expect_refused(mpcl_tokens_from_memory("digits", ids, 5, 5, &t), t, MPCL_ERR_FORMAT, "'digits'",
                   "token 4 (of 5) is 5, at or above the vocabulary size 5");
    tu_expect_error(mpcl_tokens_from_memory("x", ids, 0, 5, &t), MPCL_ERR_INVALID_ARG, "count 0");
}

/* ---- windows on the device ---- */

static mpcl_context *ctx;

static mpcl_context *device(void) {
    if (!ctx) ctx = tu_context();
    return ctx;
}

static int teardown_all(void **state) {
    mpcl_context_destroy(ctx);
    return teardown(state);
}

/* The header's start, from the dropout reference's hash (written from the
 * dropout header's text) and a 128-bit product. */
static uint64_t ref_start(uint64_t seed, uint64_t step, uint64_t b, uint64_t starts) {
    __extension__ typedef unsigned __int128 u128;
    return (uint64_t)(((u128)ref_dropout_hash(seed, step, b) * starts) >> 64);
}

static mpcl_token_stream *make_stream(const uint16_t *ids, size_t n, size_t context,
                                      double eval_fraction) {
    mpcl_tokens *t = NULL;
    TU_ASSERT_OK(mpcl_tokens_from_memory("stream", ids, n, 65536, &t));
    mpcl_token_stream *s = NULL;
    TU_ASSERT_OK(mpcl_token_stream_create(device(), t, context, eval_fraction, &s));
    mpcl_tokens_destroy(t);
    return s;
}

/* Draws B windows into fresh tensors, downloaded into in and tg (B x T). */
static void draw(const mpcl_token_stream *s, mpcl_token_part part, uint64_t seed, uint64_t step,
                 size_t B, int32_t *in, int32_t *tg) {
    size_t T = mpcl_token_stream_context(s);
    mpcl_tensor *x = tu_tensor(device(), MPCL_DTYPE_I32, B, T);
    mpcl_tensor *y = tu_tensor(device(), MPCL_DTYPE_I32, B, T);
    TU_ASSERT_OK(mpcl_token_stream_windows(device(), s, part, seed, step, x, y));
    TU_ASSERT_OK(mpcl_tensor_download_i32(x, in, B * T));
    TU_ASSERT_OK(mpcl_tensor_download_i32(y, tg, B * T));
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
}

/* Every window is ids[s .. s + T] of the part, found from its first token
 * (the ids are all different), and s is the header's start. */
static void check_windows(const uint16_t *ids, size_t n, const mpcl_token_stream *s,
                          mpcl_token_part part, uint64_t seed, uint64_t step, size_t B) {
    size_t T = mpcl_token_stream_context(s), first = mpcl_token_stream_first(s, part);
    size_t end = first + mpcl_token_stream_count(s, part);
    int32_t *in = malloc(B * T * sizeof *in), *tg = malloc(B * T * sizeof *tg);
    draw(s, part, seed, step, B, in, tg);
    for (size_t b = 0; b < B; b++) {
        size_t at = n;
        for (size_t i = 0; i < n && at == n; i++)
            if (ids[i] == in[b * T]) at = i;
        if (at < first || at + T >= end)
            fail_msg("window %zu begins at %zu: outside the part [%zu, %zu) for %zu + 1 tokens", b,
                     at, first, end, T);
        for (size_t t = 0; t < T; t++)
            if (in[b * T + t] != ids[at + t] || tg[b * T + t] != ids[at + t + 1])
                fail_msg("window %zu from %zu: token %zu is %d -> %d, want %u -> %u", b, at, t,
                         in[b * T + t], tg[b * T + t], ids[at + t], ids[at + t + 1]);
        uint64_t want = ref_start(seed, step, b, end - first - T);
        assert_int_equal(at - first, want);
        assert_int_equal(mpcl_token_window_start(seed, step, b, end - first - T), want);
    }
    free(in);
    free(tg);
}

static void test_windows_slices(void **state) {
    (void)state;
    const size_t n = 5000, T = 17;
    uint16_t *ids = spread_ids(n);
    mpcl_token_stream *s = make_stream(ids, n, T, 0.1);
    assert_int_equal(mpcl_token_stream_count(s, MPCL_TOKENS_TRAIN), 4500);
    assert_int_equal(mpcl_token_stream_count(s, MPCL_TOKENS_EVAL), 500);
    assert_int_equal(mpcl_token_stream_first(s, MPCL_TOKENS_EVAL), 4500);
    uint64_t seed = tu_seed("test_windows_slices");
    for (uint64_t step = 0; step < 3; step++) {
        check_windows(ids, n, s, MPCL_TOKENS_TRAIN, seed, step, 37);
        check_windows(ids, n, s, MPCL_TOKENS_EVAL, seed, step, 37);
    }
    check_windows(ids, n, s, MPCL_TOKENS_TRAIN, 0, UINT64_MAX, 1);
    mpcl_token_stream_destroy(s);
    /* T = 1 and no held-out part. */
    s = make_stream(ids, n, 1, 0);
    assert_int_equal(mpcl_token_stream_count(s, MPCL_TOKENS_EVAL), 0);
    check_windows(ids, n, s, MPCL_TOKENS_TRAIN, seed, 5, 64);
    mpcl_token_stream_destroy(s);
    free(ids);
}

/* The same (seed, step) gives the same bits, from another stream of the
 * same tokens too; another step or seed gives other windows. */
static void test_windows_reproducible(void **state) {
    (void)state;
    const size_t n = 4000, T = 32, B = 16, k = B * T;
    uint16_t *ids = spread_ids(n);
    mpcl_token_stream *s1 = make_stream(ids, n, T, 0.2), *s2 = make_stream(ids, n, T, 0.2);
    int32_t *a = malloc(4 * k * sizeof *a), *b = a + k, *c = b + k, *d = c + k;
    uint64_t seed = tu_seed("test_windows_reproducible");
    draw(s1, MPCL_TOKENS_TRAIN, seed, 7, B, a, b);
    draw(s2, MPCL_TOKENS_TRAIN, seed, 7, B, c, d);
    assert_memory_equal(a, c, k * sizeof *a);
    assert_memory_equal(b, d, k * sizeof *b);
    draw(s1, MPCL_TOKENS_TRAIN, seed, 8, B, c, d);
    assert_memory_not_equal(a, c, k * sizeof *a);
    draw(s1, MPCL_TOKENS_TRAIN, seed + 1, 7, B, c, d);
    assert_memory_not_equal(a, c, k * sizeof *a);
    mpcl_token_stream_destroy(s1);
    mpcl_token_stream_destroy(s2);
    free(a);
    free(ids);
}

/* A part with three starts: each is drawn, the last one included, and no
 * other; a part of exactly one window has the one start. */
static void test_windows_edges(void **state) {
    (void)state;
    const size_t T = 9, B = 300;
    uint16_t *ids = spread_ids(2 * (T + 3));
    int32_t *in = malloc(B * T * sizeof *in), *tg = malloc(B * T * sizeof *tg);
    /* Training part T + 3 ids, held-out part T + 3 (fraction 0.5). */
    mpcl_token_stream *s = make_stream(ids, 2 * (T + 3), T, 0.5);
    for (int part = 0; part < 2; part++) {
        size_t first = part ? T + 3 : 0, seen[3] = {0};
        draw(s, (mpcl_token_part)part, 99, 1, B, in, tg);
        for (size_t b = 0; b < B; b++) {
            size_t k = 0;
            while (k < 3 && in[b * T] != ids[first + k]) k++;
            if (k == 3)
                fail_msg("window %zu begins with %d, not at one of the 3 starts", b, in[b * T]);
            seen[k]++;
            assert_int_equal(tg[b * T + T - 1], ids[first + k + T]);
        }
        assert_true(seen[0] > 0 && seen[1] > 0 && seen[2] > 0);
    }
    mpcl_token_stream_destroy(s);
    s = make_stream(ids, T + 1, T, 0);
    draw(s, MPCL_TOKENS_TRAIN, 5, 5, B, in, tg);
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++) {
            assert_int_equal(in[b * T + t], ids[t]);
            assert_int_equal(tg[b * T + t], ids[t + 1]);
        }
    mpcl_token_stream_destroy(s);
    free(in);
    free(tg);
    free(ids);
}

/* 64000 starts among 2000, in 20 bins of 100: chi-square with 19 degrees of
 * freedom (mean 19, deviation 6.2) below 80, which a uniform draw exceeds
 * with a probability below 1e-8; a start rule that leaves out or favours a
 * tenth of the range gives thousands. */
static void test_windows_uniform(void **state) {
    (void)state;
    const size_t T = 4, starts = 2000, n = starts + T, B = 4000, steps = 16, bins = 20;
    uint16_t *ids = spread_ids(n);
    mpcl_token_stream *s = make_stream(ids, n, T, 0);
    int32_t *in = malloc(B * T * sizeof *in), *tg = malloc(B * T * sizeof *tg);
    size_t *where = calloc(65536, sizeof *where), count[20] = {0};
    for (size_t i = 0; i < n; i++) where[ids[i]] = i;
    uint64_t seed = tu_seed("test_windows_uniform");
    for (uint64_t step = 0; step < steps; step++) {
        draw(s, MPCL_TOKENS_TRAIN, seed, step, B, in, tg);
        for (size_t b = 0; b < B; b++) count[where[(uint16_t)in[b * T]] * bins / starts]++;
    }
    double expected = (double)(B * steps) / (double)bins, chi2 = 0;
    for (size_t k = 0; k < bins; k++)
        chi2 += ((double)count[k] - expected) * ((double)count[k] - expected) / expected;
    if (chi2 >= 80)
        fail_msg("chi-square %.1f over %zu bins: the starts are not uniform", chi2, bins);
    mpcl_token_stream_destroy(s);
    free(where);
    free(in);
    free(tg);
    free(ids);
}

/* A corpus or a part smaller than one window, bad arguments, bad tensors:
 * each refused with what is wrong, nothing written. */
static void test_stream_refused(void **state) {
    (void)state;
    uint16_t *ids = spread_ids(100);
    mpcl_tokens *t = NULL;
    TU_ASSERT_OK(mpcl_tokens_from_memory("small", ids, 16, 65536, &t));
    mpcl_token_stream *s = NULL;
    tu_expect_error(mpcl_token_stream_create(device(), t, 16, 0, &s), MPCL_ERR_FORMAT,
                    "'small': the training part holds 16 tokens (16 in all, 0 held out), fewer "
                    "than one window of 17 (context 16 + 1)");
    assert_null(s);
    mpcl_tokens_destroy(t);
    TU_ASSERT_OK(mpcl_tokens_from_memory("corpus", ids, 100, 65536, &t));
    tu_expect_error(mpcl_token_stream_create(device(), t, 16, 0.1, &s), MPCL_ERR_FORMAT,
                    "'corpus': the held-out part holds 10 tokens (fraction 0.1 of 100), fewer "
                    "than one window of 17");
    tu_expect_error(mpcl_token_stream_create(device(), t, 16, 0.9, &s), MPCL_ERR_FORMAT,
                    "the training part holds 10 tokens (100 in all, 90 held out)");
    tu_expect_error(mpcl_token_stream_create(device(), t, 0, 0, &s), MPCL_ERR_INVALID_ARG,
                    "context 0");
    const double fractions[] = {1, -0.1, NAN, INFINITY};
    for (size_t i = 0; i < 4; i++)
        tu_expect_error(mpcl_token_stream_create(device(), t, 16, fractions[i], &s),
                        MPCL_ERR_INVALID_ARG, "evaluation fraction");
    assert_null(s);

    TU_ASSERT_OK(mpcl_token_stream_create(device(), t, 16, 0, &s));
    mpcl_tensor *x = tu_tensor(device(), MPCL_DTYPE_I32, 3, 16);
    mpcl_tensor *y = tu_tensor(device(), MPCL_DTYPE_I32, 3, 16);
    mpcl_tensor *wide = tu_tensor(device(), MPCL_DTYPE_I32, 3, 17);
    mpcl_tensor *rows = tu_tensor(device(), MPCL_DTYPE_I32, 2, 16);
    mpcl_tensor *f = tu_tensor(device(), MPCL_DTYPE_F32, 3, 16);
    int32_t mark[48], back[48];
    for (size_t i = 0; i < 48; i++) mark[i] = -7;
    TU_ASSERT_OK(mpcl_tensor_upload_i32(x, mark, 48));
    TU_ASSERT_OK(mpcl_tensor_upload_i32(y, mark, 48));
    tu_expect_error(mpcl_token_stream_windows(device(), s, MPCL_TOKENS_EVAL, 1, 1, x, y),
                    MPCL_ERR_INVALID_ARG, "'corpus' has no held-out part");
    tu_expect_error(mpcl_token_stream_windows(device(), s, MPCL_TOKENS_TRAIN, 1, 1, f, y),
                    MPCL_ERR_DTYPE, "inputs is f32, want i32");
    tu_expect_error(mpcl_token_stream_windows(device(), s, MPCL_TOKENS_TRAIN, 1, 1, x, wide),
                    MPCL_ERR_SHAPE, "targets is 3x17, want 3x16");
    tu_expect_error(mpcl_token_stream_windows(device(), s, MPCL_TOKENS_TRAIN, 1, 1, wide, y),
                    MPCL_ERR_SHAPE, "inputs is 3x17, want 3x16");
    tu_expect_error(mpcl_token_stream_windows(device(), s, MPCL_TOKENS_TRAIN, 1, 1, x, rows),
                    MPCL_ERR_SHAPE, "targets is 2x16, want 3x16");
    tu_expect_error(mpcl_token_stream_windows(device(), s, MPCL_TOKENS_TRAIN, 1, 1, x, NULL),
                    MPCL_ERR_INVALID_ARG, "targets is NULL");
    TU_ASSERT_OK(mpcl_tensor_download_i32(x, back, 48));
    assert_memory_equal(back, mark, sizeof mark);
    TU_ASSERT_OK(mpcl_tensor_download_i32(y, back, 48));
    assert_memory_equal(back, mark, sizeof mark);
    mpcl_tensor *all[] = {x, y, wide, rows, f};
    for (size_t i = 0; i < 5; i++) mpcl_tensor_destroy(all[i]);
    mpcl_token_stream_destroy(s);
    mpcl_tokens_destroy(t);
    free(ids);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_bytes),           cmocka_unit_test(test_text_refused),
        cmocka_unit_test(test_text_folder),          cmocka_unit_test(test_text_folder_refused),
        cmocka_unit_test(test_default_corpus),       cmocka_unit_test(test_bin_round_trip),
        cmocka_unit_test(test_bin_refused),          cmocka_unit_test(test_bin_arguments),
        cmocka_unit_test(test_from_memory),          cmocka_unit_test(test_windows_slices),
        cmocka_unit_test(test_windows_reproducible), cmocka_unit_test(test_windows_edges),
        cmocka_unit_test(test_windows_uniform),      cmocka_unit_test(test_stream_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown_all);
}
