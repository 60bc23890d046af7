/* GPT-2's byte-level BPE tokenizer (include/mpcl/bpe.h) on the fixture of
 * tests/data/bpe (bench/make_bpe_fixture.py): the ids Hugging Face gives for
 * each text there (prose, contractions, digits, spaces, tabs, accents, CJK,
 * emoji, bytes that are not UTF-8), decode(encode(x)) == x for those and for
 * random bytes, the buffers' limits, and every bad vocab.json and merges.txt
 * with the message that names the file, the place and what is wrong. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/io.h"
#include "io/json.h"
#include "mpcl/bpe.h"
#include "mpcl/number.h"
#include "testutil.h"

static char dir[64];
static char fixture_vocab[512], fixture_merges[512], fixture_expected[512];

static int setup(void **state) {
    (void)state;
    const char *root = getenv("MPCL_SOURCE_ROOT");
    if (!root) return -1; /* meson test sets it */
    snprintf(fixture_vocab, sizeof fixture_vocab, "%s/tests/data/bpe/vocab.json", root);
    snprintf(fixture_merges, sizeof fixture_merges, "%s/tests/data/bpe/merges.txt", root);
    snprintf(fixture_expected, sizeof fixture_expected, "%s/tests/data/bpe/expected.json", root);
    return tu_tmpdir_make(dir, "bpe");
}

static int teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(dir);
}

/* dir/name, in the caller's buffer. */
static const char *path_in(char buf[256], const char *name) {
    snprintf(buf, 256, "%s/%s", dir, name);
    return buf;
}

static const char *write_text(char buf[256], const char *name, const char *text) {
    FILE *f = fopen(path_in(buf, name), "wb");
    assert_non_null(f);
    size_t n = strlen(text);
    if (n) assert_int_equal(fwrite(text, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    return buf;
}

static mpcl_bpe *load_fixture(void) {
    mpcl_bpe *b = NULL;
    TU_ASSERT_OK(mpcl_bpe_load(fixture_vocab, fixture_merges, &b));
    return b;
}

/* Fails unless decode(encode(data)) is data, and returns the ids (malloc'ed,
 * *count of them). */
static uint16_t *round_trip(mpcl_bpe *b, const unsigned char *data, size_t n, size_t *count) {
    uint16_t *ids = malloc((n ? n : 1) * sizeof *ids);
    unsigned char *back = malloc(n ? n : 1);
    assert_non_null(ids);
    assert_non_null(back);
    size_t counted = 0, size = 0;
    TU_ASSERT_OK(mpcl_bpe_encode(b, data, n, NULL, 0, &counted));
    TU_ASSERT_OK(mpcl_bpe_encode(b, data, n, ids, n, count));
    assert_int_equal(counted, *count);
    TU_ASSERT_OK(mpcl_bpe_decode(b, ids, *count, back, n, &size));
    assert_int_equal(size, n);
    if (n) assert_memory_equal(back, data, n);
    free(back);
    return ids;
}

/* ---- against Hugging Face ---- */

static unsigned char *from_hex(const char *hex, size_t *n) {
    size_t len = strlen(hex);
    assert_int_equal(len % 2, 0);
    unsigned char *out = malloc(len / 2 + 1);
    assert_non_null(out);
    for (size_t i = 0; i < len / 2; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (unsigned char)v;
    }
    *n = len / 2;
    return out;
}

/* One case of expected.json: the ids are Hugging Face's, and the bytes come
 * back. */
static void check_case(mpcl_bpe *b, const mpcl__json_value *c) {
    const char *name = mpcl__json_string(mpcl__json_member(c, "name"), NULL);
    const mpcl__json_value *want = mpcl__json_member(c, "ids");
    size_t n, count;
    unsigned char *data = from_hex(mpcl__json_string(mpcl__json_member(c, "hex"), NULL), &n);
    uint16_t *ids = round_trip(b, data, n, &count);
    size_t want_count = mpcl__json_count(want);
    for (size_t i = 0; i < count && i < want_count; i++) {
        uint64_t w;
        assert_int_equal(mpcl_parse_uint(mpcl__json_number_text(mpcl__json_at(want, i)), 65535, &w),
                         MPCL_NUMBER_OK);
        if (ids[i] != w)
            fail_msg("case \"%s\": token %zu is %u, Hugging Face's is %u", name, i,
                     (unsigned)ids[i], (unsigned)w);
    }
    if (count != want_count)
        fail_msg("case \"%s\": %zu tokens, Hugging Face's %zu", name, count, want_count);
    free(ids);
    free(data);
}

static void test_matches_hugging_face(void **state) {
    (void)state;
    mpcl_bpe *b = load_fixture();
    assert_int_equal(mpcl_bpe_vocab(b), 659);
    assert_int_equal(mpcl_bpe_merge_count(b), 402);
    mpcl__json *doc = NULL;
    TU_ASSERT_OK(mpcl__json_read_file(fixture_expected, 1 << 20, &doc));
    const mpcl__json_value *cases = mpcl__json_member(mpcl__json_root(doc), "cases");
    assert_true(mpcl__json_count(cases) >= 20);
    for (int pass = 0; pass < 2; pass++) /* the second from the word cache */
        for (size_t i = 0; i < mpcl__json_count(cases); i++) check_case(b, mpcl__json_at(cases, i));
    mpcl__json_free(doc);
    mpcl_bpe_destroy(b);
}

/* Random bytes, mostly not UTF-8, and random UTF-8-ish text of spaces,
 * letters and bytes above 0x7f, come back as they were. */
static void test_round_trip_random(void **state) {
    (void)state;
    mpcl_bpe *b = load_fixture();
    static const unsigned char alphabet[] = " \n\ta'sthe0123.,\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80";
    tu_rng r = tu_rng_make(tu_seed("bpe_round_trip"));
    unsigned char data[600];
    for (int round = 0; round < 200; round++) {
        size_t n = (size_t)tu_uniform(&r, 0, sizeof data);
        for (size_t i = 0; i < n; i++)
            data[i] = round % 2 ? (unsigned char)tu_uniform(&r, 0, 256)
                                : alphabet[(size_t)tu_uniform(&r, 0, sizeof alphabet - 1)];
        size_t count;
        free(round_trip(b, data, n, &count));
        assert_true(count <= n);
    }
    for (unsigned v = 0; v < 256; v++) { /* every byte alone is its own token */
        unsigned char one = (unsigned char)v;
        size_t count, len;
        uint16_t *ids = round_trip(b, &one, 1, &count);
        assert_int_equal(count, 1);
        const unsigned char *bytes = mpcl_bpe_token_bytes(b, ids[0], &len);
        assert_int_equal(len, 1);
        assert_int_equal(bytes[0], v);
        free(ids);
    }
    mpcl_bpe_destroy(b);
}

static void test_tokens_and_buffers(void **state) {
    (void)state;
    mpcl_bpe *b = load_fixture();
    uint16_t eot = 0;
    TU_ASSERT_OK(mpcl_bpe_token_id(b, "<|endoftext|>", 13, &eot));
    size_t len;
    const unsigned char *bytes = mpcl_bpe_token_bytes(b, eot, &len);
    assert_int_equal(len, 13);
    assert_memory_equal(bytes, "<|endoftext|>", 13);
    uint16_t the = 0;
    TU_ASSERT_OK(mpcl_bpe_token_id(b, " the", 4, &the));
    tu_expect_error(mpcl_bpe_token_id(b, "zqzq", 4, &the), MPCL_ERR_INVALID_ARG, "zqzq");
    assert_null(mpcl_bpe_token_bytes(b, 659, &len));
    assert_int_equal(len, 0);

    /* Too small a buffer: refused, with the count it needs. */
    uint16_t ids[4];
    size_t count = 0;
    tu_expect_error(mpcl_bpe_encode(b, "a b c d e", 9, ids, 4, &count), MPCL_ERR_INVALID_ARG,
                    "take 5 tokens, the buffer holds 4");
    assert_int_equal(count, 5);
    TU_ASSERT_OK(mpcl_bpe_encode(b, " the the", 8, ids, 4, &count));
    assert_int_equal(count, 2);
    assert_int_equal(ids[0], the);
    assert_int_equal(ids[1], the);
    char out[8];
    size_t size = 0;
    tu_expect_error(mpcl_bpe_decode(b, ids, 2, out, 7, &size), MPCL_ERR_INVALID_ARG,
                    "take 8 bytes, the buffer holds 7");
    assert_int_equal(size, 8);

    /* An id at or above the vocabulary: named, with its place and the file. */
    const uint16_t bad[] = {the, 658, 659, 0};
    memset(out, 'x', sizeof out);
    tu_expect_error(mpcl_bpe_decode(b, bad, 4, out, sizeof out, &size), MPCL_ERR_INVALID_ARG,
                    "id 659 (position 2 of 4) is not below the vocabulary size 659");
    if (!strstr(mpcl_errmsg(), fixture_vocab)) fail_msg("no file in \"%s\"", mpcl_errmsg());
    assert_int_equal(out[0], 'x'); /* nothing written */

    /* Pointers that may not be NULL, each named. */
    tu_expect_error(mpcl_bpe_encode(NULL, "a", 1, ids, 4, &count), MPCL_ERR_INVALID_ARG,
                    "the tokenizer is NULL");
    tu_expect_error(mpcl_bpe_encode(b, NULL, 1, ids, 4, &count), MPCL_ERR_INVALID_ARG,
                    "text is NULL");
    tu_expect_error(mpcl_bpe_encode(b, "a", 1, ids, 4, NULL), MPCL_ERR_INVALID_ARG,
                    "count is NULL");
    tu_expect_error(mpcl_bpe_decode(b, NULL, 1, out, 8, &size), MPCL_ERR_INVALID_ARG,
                    "ids is NULL");
    tu_expect_error(mpcl_bpe_decode(b, ids, 1, out, 8, NULL), MPCL_ERR_INVALID_ARG, "size is NULL");
    TU_ASSERT_OK(mpcl_bpe_encode(b, NULL, 0, NULL, 0, &count)); /* nothing to encode */
    assert_int_equal(count, 0);
    mpcl_bpe *none = (mpcl_bpe *)&none;
    tu_expect_error(mpcl_bpe_load(NULL, fixture_merges, &none), MPCL_ERR_INVALID_ARG,
                    "the vocabulary path is NULL");
    assert_null(none);
    tu_expect_error(mpcl_bpe_load(fixture_vocab, NULL, NULL), MPCL_ERR_INVALID_ARG, "out is NULL");
    mpcl_bpe_destroy(b);
}

/* ---- bad files ---- */

/* Fails unless loading (vocab, merges) is refused with `want`, a message
 * naming `file` and holding `needle`, and nothing handed out. */
static void expect_load_refused(const char *vocab, const char *merges, mpcl_status want,
                                const char *file, const char *needle) {
    mpcl_bpe *b = (mpcl_bpe *)&b;
    tu_expect_error(mpcl_bpe_load(vocab, merges, &b), want, needle);
    if (!strstr(mpcl_errmsg(), file))
        fail_msg("message \"%s\" does not name the file %s", mpcl_errmsg(), file);
    assert_null(b);
}

static void expect_vocab_refused(const char *json, const char *needle) {
    char v[256];
    write_text(v, "vocab.json", json);
    expect_load_refused(v, fixture_merges, MPCL_ERR_FORMAT, v, needle);
}

static void test_bad_vocab(void **state) {
    (void)state;
    expect_vocab_refused("{\"a\": 0,}", "line 1, column 9");
    expect_vocab_refused("[\"a\"]", "the file is an array, not an object of token -> id");
    expect_vocab_refused("{}", "the object holds no token");
    expect_vocab_refused("{\"a\": 0,\n \"b\": \"1\"}",
                         "line 2, column 2: token \"b\": the id is a string, not a number");
    expect_vocab_refused("{\"a\": 0,\n \"b\": -1}",
                         "line 2, column 2: token \"b\": the id '-1' "
                         "is negative");
    expect_vocab_refused("{\"a\": 0, \"b\": 1.0}", "the id '1.0' is not a plain decimal number");
    expect_vocab_refused("{\"a\": 0, \"b\": 2}",
                         "line 1, column 10: token \"b\": id 2 is not below the token count 2 "
                         "(ids are 0..1, each once)");
    expect_vocab_refused("{\"a\": 0,\n\"b\": 0}",
                         "line 2, column 1: token \"b\": id 0 is already the id of \"a\" (line "
                         "1, column 2)");
    expect_vocab_refused("{\"a\": 0, \"a\": 1}", "duplicate key \"a\"");
    expect_vocab_refused("{\"\\u0041\": 0, \"A\": 1}", "duplicate key \"A\"");
    expect_vocab_refused("{\"a\": 0, \"\": 1}", "line 1, column 10: id 1: the token is empty");
    expect_vocab_refused("{\"a\": 0, \"x\xe4\xb8\xad\": 1}",
                         "token \"x\xe4\xb8\xad\": the character at byte 1, U+4E2D, is not one of "
                         "GPT-2's 256 byte characters");
    expect_vocab_refused("{\"a b\": 0}", "the character at byte 1, U+0020, is not one");
    expect_vocab_refused("{\"a\": 0}", "byte 0x00 has no token (\"\xc4\x80\", U+0100)");

    /* More tokens than uint16 ids: 65537 of them. */
    size_t cap = 65537 * 16 + 16, at = 0;
    char *big = malloc(cap);
    assert_non_null(big);
    at += (size_t)snprintf(big, cap, "{");
    for (unsigned i = 0; i < 65537; i++)
        at += (size_t)snprintf(big + at, cap - at, "%s\"t%u\": %u", i ? "," : "", i, i);
    snprintf(big + at, cap - at, "}");
    expect_vocab_refused(big, "65537 tokens, more than 65536 (ids are uint16)");
    free(big);

    char v[256];
    expect_load_refused(path_in(v, "absent.json"), fixture_merges, MPCL_ERR_IO, v, "cannot open");
    mkdir(path_in(v, "folder.json"), 0700);
    expect_load_refused(v, fixture_merges, MPCL_ERR_IO, v, "not a regular file");
}

static void expect_merges_refused(const char *text, const char *needle) {
    char m[256];
    write_text(m, "merges.txt", text);
    expect_load_refused(fixture_vocab, m, MPCL_ERR_FORMAT, m, needle);
}

static void test_bad_merges(void **state) {
    (void)state;
    expect_merges_refused("#version: 0.2\nĠ t\nht\n",
                          "line 3: \"ht\" is not two tokens with one space between them");
    expect_merges_refused("Ġ t\nh e r\n", "line 2: \"h e r\" is not two tokens");
    expect_merges_refused("Ġ t\n h\n", "line 2: \" h\" is not two tokens");
    expect_merges_refused("Ġ t\nh \n", "line 2: \"h \" is not two tokens");
    expect_merges_refused("Ġ  t\n", "line 1: \"Ġ  t\" is not two tokens");
    expect_merges_refused("Ġ t\n\nh e\n", "line 2: the line is empty");
    expect_merges_refused("#version: 0.2\nĠ t\nĠ zqzq\n",
                          "line 3: the token \"zqzq\" is not in the vocabulary");
    expect_merges_refused("Ġ t\nq z\n",
                          "line 2: the merge makes \"qz\", which is not in the "
                          "vocabulary");
    expect_merges_refused("#version: 0.2\nĠ t\nh e\nĠ t\n",
                          "line 4: \"Ġ t\" repeats the merge of line 2");
    expect_merges_refused("Ġ t\r\nh e\r\n",
                          "line 1: \"t\r\": the character at byte 1, U+000D, is not one of "
                          "GPT-2's 256 byte characters (a line ending \"\\r\\n\"?)");
    expect_merges_refused("Ġ t\nh \xff\n",
                          "line 2: \"\xff\": the character at byte 0, a byte "
                          "that is not UTF-8");
    expect_merges_refused("Ġ t\n#version: 0.2\n", "line 2: the token \"#version:\" is not in");
    char m[256];
    expect_load_refused(fixture_vocab, path_in(m, "absent.txt"), MPCL_ERR_IO, m, "cannot open");
}

/* What a merges file may be: no "#version" line, no last newline, no merge
 * at all (every byte its own token). */
static void test_merges_forms(void **state) {
    (void)state;
    char m[256];
    const char *forms[] = {"Ġ t\nh e", "#version: 0.2\nĠ t\nh e\n", "#version: 0.2"};
    const size_t merges[] = {2, 2, 0};
    for (size_t k = 0; k < 3; k++) {
        mpcl_bpe *b = NULL;
        TU_ASSERT_OK(mpcl_bpe_load(fixture_vocab, write_text(m, "merges.txt", forms[k]), &b));
        assert_int_equal(mpcl_bpe_merge_count(b), merges[k]);
        uint16_t ids[8], t_id, he_id;
        size_t count;
        TU_ASSERT_OK(mpcl_bpe_encode(b, " the", 4, ids, 8, &count));
        TU_ASSERT_OK(mpcl_bpe_token_id(b, " t", 2, &t_id));
        TU_ASSERT_OK(mpcl_bpe_token_id(b, "he", 2, &he_id));
        if (merges[k]) { /* " t" then "he", and no " the" without its merge */
            assert_int_equal(count, 2);
            assert_int_equal(ids[0], t_id);
            assert_int_equal(ids[1], he_id);
        } else {
            assert_int_equal(count, 4);
        }
        mpcl_bpe_destroy(b);
    }
}

/* GPT-2's merge step: the pair of lowest rank, every occurrence of it left
 * to right, before any pair that step makes. With "ab a" ranked before "a b"
 * (a list no training makes: "ab" comes from a later merge), "ababa" is
 * "a b" twice, then "ab a": "ab", "aba". Merging one pair at a time, lowest
 * rank first, would take "ab a" as soon as it appears: "aba", "b", "a".
 * Overlapping pairs ("Ġ Ġ" in three spaces) merge leftmost first. */
static void test_merge_step(void **state) {
    (void)state;
    size_t n;
    unsigned char *fixture = tu_slurp(fixture_vocab, &n); /* not NUL-terminated */
    while (n > 0 && fixture[n - 1] != '}') n--;
    assert_true(n > 0);
    char *text = malloc(n + 64);
    assert_non_null(text);
    snprintf(text, n + 64, "%.*s,\"aba\":659,\"bc\":660,\"abc\":661,\"za\":662}", (int)(n - 1),
             (const char *)fixture);
    char v[256], m[256];
    write_text(v, "vocab.json", text);
    free(text);
    free(fixture);
    mpcl_bpe *b = NULL;
    TU_ASSERT_OK(
        mpcl_bpe_load(v, write_text(m, "merges.txt", "ab a\nb c\na b\nĠ Ġ\nz a\na bc\n"), &b));
    uint16_t ab, aba, ids[8];
    TU_ASSERT_OK(mpcl_bpe_token_id(b, "ab", 2, &ab));
    TU_ASSERT_OK(mpcl_bpe_token_id(b, "aba", 3, &aba));
    size_t count;
    TU_ASSERT_OK(mpcl_bpe_encode(b, "ababa", 5, ids, 8, &count));
    assert_int_equal(count, 2);
    assert_int_equal(ids[0], ab);
    assert_int_equal(ids[1], aba);
    uint16_t sp, sp2; /* overlapping pairs: the leftmost first */
    TU_ASSERT_OK(mpcl_bpe_token_id(b, " ", 1, &sp));
    TU_ASSERT_OK(mpcl_bpe_token_id(b, "  ", 2, &sp2));
    TU_ASSERT_OK(mpcl_bpe_encode(b, "   ", 3, ids, 8, &count));
    assert_int_equal(count, 2);
    assert_int_equal(ids[0], sp2);
    assert_int_equal(ids[1], sp);

    /* A pair that is gone when its rank's turn comes is not merged, even
     * when the pair now there has a merge: "zabc" is "b c" (line 2), then
     * "a b" (line 3) is gone, "a bc" (line 6) waits, "z a" (line 5) takes
     * the "a": "za", "bc". */
    uint16_t za, bc;
    TU_ASSERT_OK(mpcl_bpe_token_id(b, "za", 2, &za));
    TU_ASSERT_OK(mpcl_bpe_token_id(b, "bc", 2, &bc));
    TU_ASSERT_OK(mpcl_bpe_encode(b, "zabc", 4, ids, 8, &count));
    assert_int_equal(count, 2);
    assert_int_equal(ids[0], za);
    assert_int_equal(ids[1], bc);
    mpcl_bpe_destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_hugging_face), cmocka_unit_test(test_round_trip_random),
        cmocka_unit_test(test_tokens_and_buffers),   cmocka_unit_test(test_bad_vocab),
        cmocka_unit_test(test_bad_merges),           cmocka_unit_test(test_merges_forms),
        cmocka_unit_test(test_merge_step),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
