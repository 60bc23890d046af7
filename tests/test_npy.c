/* The NPY reader on files written byte by byte here: every spelling of a
 * header numpy's reader takes that mpcl accepts, read back bit for bit from
 * a file and from memory; every kind of malformed file with its status and
 * the file and field its message names; every prefix of a good file;
 * files that are not regular files; NaN and inf named by row and column.
 * tests/test_npy_numpy.py checks the same reader against numpy's own files. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "io/io.h"

static char dir[64];

static int setup(void **state) {
    (void)state;
    return tu_tmpdir_make(dir, "npy");
}

static int teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(dir);
}

static void path_of(char *p, size_t cap, const char *name) {
    snprintf(p, cap, "%s/%s", dir, name);
}

static void spit(const char *p, const void *data, size_t n) {
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* ---- a tiny NPY writer ---- */

typedef struct image {
    unsigned char b[1 << 17];
    size_t n;
} image;

static void put(image *im, const void *data, size_t n) {
    assert_true(im->n + n <= sizeof im->b);
    memcpy(im->b + im->n, data, n);
    im->n += n;
}

/* Version major.0, the header `dict` padded with spaces and ended with
 * '\n' so that the data start at a multiple of `align` (1: no padding),
 * then n bytes of data. */
static void npy_image(image *im, int major, const char *dict, size_t align, const void *data,
                      size_t n) {
    im->n = 0;
    unsigned char pre[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)major, 0};
    put(im, pre, 8);
    size_t lenbytes = major == 1 ? 2 : 4, start = 8 + lenbytes;
    size_t hlen = strlen(dict) + 1;
    while ((start + hlen) % align) hlen++;
    unsigned char len[4] = {(unsigned char)hlen, (unsigned char)(hlen >> 8),
                            (unsigned char)(hlen >> 16), (unsigned char)(hlen >> 24)};
    put(im, len, lenbytes);
    put(im, dict, strlen(dict));
    for (size_t i = strlen(dict); i + 1 < hlen; i++) put(im, " ", 1);
    put(im, "\n", 1);
    put(im, data, n);
}

static void set_u16(unsigned char *p, unsigned v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

/* ---- checks ---- */

/* Reads the image from memory (as mem.npy) and from a file (file.npy);
 * both must succeed with the same result. The memory one is returned, the
 * file one compared to it and destroyed. */
static mpcl_npy *read_both(const image *im) {
    mpcl_npy *m = NULL, *f = NULL;
    TU_ASSERT_OK(mpcl__npy_parse("mem.npy", im->b, im->n, &m));
    char p[128];
    path_of(p, sizeof p, "file.npy");
    spit(p, im->b, im->n);
    TU_ASSERT_OK(mpcl_npy_read(p, &f));
    assert_string_equal(mpcl_npy_path(f), p);
    assert_int_equal(mpcl_npy_dtype_of(f), mpcl_npy_dtype_of(m));
    assert_int_equal(mpcl_npy_ndim(f), mpcl_npy_ndim(m));
    assert_memory_equal(mpcl_npy_shape(f), mpcl_npy_shape(m), mpcl_npy_ndim(m) * sizeof(size_t));
    assert_int_equal(mpcl_npy_bytes(f), mpcl_npy_bytes(m));
    if (mpcl_npy_bytes(m))
        assert_memory_equal(mpcl_npy_data(f), mpcl_npy_data(m), mpcl_npy_bytes(m));
    assert_int_equal((uintptr_t)mpcl_npy_data(f) % 64, 0);
    assert_int_equal((uintptr_t)mpcl_npy_data(m) % 64, 0);
    mpcl_npy_destroy(f);
    return m;
}

/* The image must be refused with `want` from memory and from a file, the
 * message naming the file and holding `text`. */
static void expect_fail(const image *im, mpcl_status want, const char *text) {
    mpcl_npy *a = (mpcl_npy *)1;
    assert_int_equal(mpcl__npy_parse("mem.npy", im->b, im->n, &a), want);
    assert_null(a);
    const char *msg = mpcl_errmsg();
    if (!strstr(msg, "'mem.npy'") || !strstr(msg, text))
        fail_msg("from memory: wanted '%s' in: %s", text, msg);
    char p[128];
    path_of(p, sizeof p, "bad.npy");
    spit(p, im->b, im->n);
    a = (mpcl_npy *)1;
    assert_int_equal(mpcl_npy_read(p, &a), want);
    assert_null(a);
    msg = mpcl_errmsg();
    char quoted[160];
    snprintf(quoted, sizeof quoted, "'%s'", p);
    if (!strstr(msg, quoted) || !strstr(msg, text))
        fail_msg("from %s: wanted '%s' in: %s", p, text, msg);
}

/* A header dict refused with `text` (data of n bytes after it). */
static void expect_header_fail(const char *dict, size_t n, const char *text) {
    static image im;
    unsigned char data[64] = {0};
    assert_true(n <= sizeof data);
    npy_image(&im, 1, dict, 64, data, n);
    expect_fail(&im, MPCL_ERR_FORMAT, text);
}

/* ---- good files ---- */

/* f4 values that a float conversion would change: a NaN with a payload,
 * -0, the smallest subnormal, inf, the largest float. */
static const uint32_t F4_BITS[6] = {0x7fc00001u, 0x80000000u, 0x00000001u,
                                    0x7f800000u, 0x7f7fffffu, 0x3f800000u};

#define DICT_F4_2x3 "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"

static void test_header_spellings(void **state) {
    (void)state;
    static const struct {
        int major;
        const char *dict;
        size_t align;
    } cases[] = {
        {1, DICT_F4_2x3, 64},
        {1, DICT_F4_2x3, 16}, /* numpy before 1.14 */
        {1, DICT_F4_2x3, 1},  /* no padding at all */
        {2, DICT_F4_2x3, 64},
        {3, DICT_F4_2x3, 64},
        {1, "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}", 64},
        {1, "{'shape':(2,3),'fortran_order':False,'descr':'<f4'}", 64},
        {1, "  {  'fortran_order' :False , 'shape' : ( 2 , 3 , ) , 'descr' : '<f4' ,  }  ", 64},
    };
    static image im;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        npy_image(&im, cases[c].major, cases[c].dict, cases[c].align, F4_BITS, sizeof F4_BITS);
        mpcl_npy *a = read_both(&im);
        assert_int_equal(mpcl_npy_dtype_of(a), MPCL_NPY_F4);
        assert_int_equal(mpcl_npy_ndim(a), 2);
        assert_int_equal(mpcl_npy_shape(a)[0], 2);
        assert_int_equal(mpcl_npy_shape(a)[1], 3);
        assert_int_equal(mpcl_npy_rows(a), 2);
        assert_int_equal(mpcl_npy_cols(a), 3);
        assert_int_equal(mpcl_npy_count(a), 6);
        assert_int_equal(mpcl_npy_bytes(a), sizeof F4_BITS);
        assert_memory_equal(mpcl_npy_data(a), F4_BITS, sizeof F4_BITS);
        mpcl_npy_destroy(a);
    }
}

static void test_dtypes(void **state) {
    (void)state;
    static const struct {
        const char *descr;
        mpcl_npy_dtype dtype;
        size_t size;
    } cases[] = {
        {"|u1", MPCL_NPY_U1, 1}, {"<u1", MPCL_NPY_U1, 1}, {"|i1", MPCL_NPY_I1, 1},
        {"<i1", MPCL_NPY_I1, 1}, {"<u2", MPCL_NPY_U2, 2}, {"<i2", MPCL_NPY_I2, 2},
        {"<u4", MPCL_NPY_U4, 4}, {"<i4", MPCL_NPY_I4, 4}, {"<u8", MPCL_NPY_U8, 8},
        {"<i8", MPCL_NPY_I8, 8}, {"<f2", MPCL_NPY_F2, 2}, {"<f4", MPCL_NPY_F4, 4},
        {"<f8", MPCL_NPY_F8, 8},
    };
    unsigned char data[40];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 37 + 11);
    static image im;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (5,), }",
                 cases[c].descr);
        npy_image(&im, 1, dict, 64, data, 5 * cases[c].size);
        mpcl_npy *a = read_both(&im);
        assert_int_equal(mpcl_npy_dtype_of(a), cases[c].dtype);
        assert_int_equal(mpcl_npy_dtype_size(cases[c].dtype), cases[c].size);
        assert_string_equal(mpcl_npy_dtype_name(cases[c].dtype), cases[c].descr + 1);
        assert_int_equal(mpcl_npy_rows(a), 5);
        assert_int_equal(mpcl_npy_cols(a), 1);
        assert_memory_equal(mpcl_npy_data(a), data, 5 * cases[c].size);
        mpcl_npy_destroy(a);
    }
    assert_null(mpcl_npy_dtype_name(MPCL_NPY_DTYPE_COUNT));
    assert_int_equal(mpcl_npy_dtype_size(MPCL_NPY_DTYPE_COUNT), 0);
}

static void test_shapes(void **state) {
    (void)state;
    static image im;
    unsigned char data[16] = {0};
    /* Empty arrays: no data, and every size still reported. */
    npy_image(&im, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", 64, data, 0);
    mpcl_npy *a = read_both(&im);
    assert_int_equal(mpcl_npy_rows(a), 0);
    assert_int_equal(mpcl_npy_cols(a), 3);
    assert_int_equal(mpcl_npy_count(a), 0);
    assert_int_equal(mpcl_npy_bytes(a), 0);
    assert_non_null(mpcl_npy_data(a));
    mpcl_npy_destroy(a);
    npy_image(&im, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 0), }", 64, data, 0);
    a = read_both(&im);
    assert_int_equal(mpcl_npy_rows(a), 3);
    assert_int_equal(mpcl_npy_cols(a), 0);
    assert_int_equal(mpcl_npy_count(a), 0);
    mpcl_npy_destroy(a);
    /* 8 dimensions, the most. */
    npy_image(&im, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2,1,1,2,1,1,1,3), }", 64,
              data, 12);
    a = read_both(&im);
    assert_int_equal(mpcl_npy_ndim(a), 8);
    assert_int_equal(mpcl_npy_rows(a), 2);
    assert_int_equal(mpcl_npy_cols(a), 6);
    assert_int_equal(mpcl_npy_count(a), 12);
    mpcl_npy_destroy(a);
}

/* The longest header read, MPCL_NPY_MAX_HEADER bytes, and one byte more. */
static void test_header_limit(void **state) {
    (void)state;
    static image im;
    unsigned char data[4] = {1, 2, 3, 4};
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
    npy_image(&im, 2, dict, 12 + MPCL_NPY_MAX_HEADER, data, 4);
    assert_int_equal(im.n, 12 + MPCL_NPY_MAX_HEADER + 4);
    mpcl_npy *a = read_both(&im);
    assert_memory_equal(mpcl_npy_data(a), data, 4);
    mpcl_npy_destroy(a);
    npy_image(&im, 2, dict, 12 + MPCL_NPY_MAX_HEADER + 1, data, 4);
    expect_fail(&im, MPCL_ERR_FORMAT, "header length 65537 over the limit of 65536 bytes");
}

/* ---- malformed files ---- */

static void test_bad_preamble(void **state) {
    (void)state;
    static image im;
    im.n = 0;
    expect_fail(&im, MPCL_ERR_FORMAT, "not an NPY file (it does not start with \\x93NUMPY)");
    put(&im, "\x93NUMPX\x01\x00\x10\x00", 10);
    expect_fail(&im, MPCL_ERR_FORMAT, "not an NPY file");
    im.n = 0;
    put(&im, "\x93NUMPY\x01", 7);
    expect_fail(&im, MPCL_ERR_FORMAT, "file is 7 bytes, too short for the NPY version");
    im.n = 0;
    put(&im, "\x93NUMPY\x02\x00\x10\x00", 10);
    expect_fail(&im, MPCL_ERR_FORMAT, "file is 10 bytes, too short for the header length");

    unsigned char data[24] = {0};
    npy_image(&im, 4, DICT_F4_2x3, 64, data, 24);
    expect_fail(&im, MPCL_ERR_FORMAT,
                "NPY format version 4.0; mpcl reads versions 1.0, 2.0 and 3.0");
    npy_image(&im, 1, DICT_F4_2x3, 64, data, 24);
    im.b[7] = 1;
    expect_fail(&im, MPCL_ERR_FORMAT, "NPY format version 1.1");
    npy_image(&im, 1, DICT_F4_2x3, 64, data, 24);
    im.b[6] = 0;
    expect_fail(&im, MPCL_ERR_FORMAT, "NPY format version 0.0");

    /* A length one byte past the end (118 bytes of header, 24 of data). */
    npy_image(&im, 1, DICT_F4_2x3, 64, data, 24);
    set_u16(im.b + 8, 118 + 24 + 1);
    expect_fail(&im, MPCL_ERR_FORMAT,
                "header length 143 runs past the end of the file (142 bytes follow the "
                "preamble; truncated)");
}

static void test_bad_header_syntax(void **state) {
    (void)state;
    static image im;
    unsigned char data[24] = {0};
    /* The length cuts the header before its '\n'. */
    npy_image(&im, 1, DICT_F4_2x3, 64, data, 24);
    set_u16(im.b + 8, 117);
    expect_fail(&im, MPCL_ERR_FORMAT, "header of 117 bytes does not end with '\\n'");
    npy_image(&im, 1, DICT_F4_2x3, 64, data, 24);
    set_u16(im.b + 8, 0);
    expect_fail(&im, MPCL_ERR_FORMAT, "header of 0 bytes does not end with '\\n'");
    npy_image(&im, 1, DICT_F4_2x3, 64, data, 24);
    im.b[10 + 20] = 0xe9; /* latin-1 in 'fortran_order' */
    expect_fail(&im, MPCL_ERR_FORMAT,
                "at header byte 20 (file byte 30): byte 0xe9 is not printable ASCII");
    npy_image(&im, 1, DICT_F4_2x3, 64, data, 24);
    im.b[10 + 5] = '\t';
    expect_fail(&im, MPCL_ERR_FORMAT, "byte 0x09 is not printable ASCII");

    const char *not_dict =
        "header is not a dict of 'descr', 'fortran_order' and 'shape' at header byte ";
    expect_header_fail("[1, 2]", 0, not_dict);
    expect_header_fail("[1, 2]", 0, "byte 0 (file byte 10): expected '{'");
    expect_header_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ", 24,
                       "expected a key in quotes");
    expect_header_fail("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", 24,
                       "header byte 16 (file byte 26): expected ',' or '}'");
    expect_header_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x", 24,
                       "text after the dict");
    expect_header_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}}", 24,
                       "text after the dict");
    expect_header_fail("{'descr' '<f4'}", 0, "expected ':' after the key");
    expect_header_fail("{descr: '<f4'}", 0, "expected a key in quotes");
    expect_header_fail("{'descr: '<f4'}", 0, "header byte 1 (file byte 11): unknown key 'descr: '");
    expect_header_fail("{'descr': '<f4", 0, "unterminated string");
    expect_header_fail("{'descr': '<f\\x34'}", 0, "escape in a string");
    expect_header_fail("{'descr': <f4}", 0, "expected 'descr' to be a string");
    expect_header_fail("{'descr': 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'}", 0,
                       "string of 40 bytes, longer than any mpcl reads here");
}

static void test_bad_keys(void **state) {
    (void)state;
    expect_header_fail("{'descr': '<f4', 'fortran_order': False}", 24, "header has no 'shape'");
    expect_header_fail("{'fortran_order': False, 'shape': (2, 3)}", 24, "header has no 'descr'");
    expect_header_fail("{'descr': '<f4', 'shape': (2, 3)}", 24, "header has no 'fortran_order'");
    expect_header_fail("{}", 24, "header has no 'descr'");
    expect_header_fail("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", 24,
                       "header byte 58 (file byte 68): unknown key 'x'");
    expect_header_fail("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}",
                       24, "header byte 17 (file byte 27): 'descr' twice");
}

static void test_bad_values(void **state) {
    (void)state;
    /* descr */
    const char *known = "; mpcl reads little-endian u1, i1, u2, i2, u4, i4, u8, i8, f2, f4, f8";
    static const struct {
        const char *descr, *text;
    } descrs[] = {
        {">f4", "header 'descr' is '>f4' (big-endian)"},
        {">i8", "header 'descr' is '>i8' (big-endian)"},
        {">u1", "header 'descr' is '>u1' (big-endian)"},
        {"=f4", "header 'descr' is '=f4' (native byte order, which a file cannot carry)"},
        {"|f4", "header 'descr' is '|f4' (no byte order, for a type of more than one byte)"},
        {"f4", "header 'descr' is 'f4'"},
        {"<c8", "header 'descr' is '<c8' (complex)"},
        {"|O", "header 'descr' is '|O' (Python objects)"},
        {"|b1", "header 'descr' is '|b1' (bool)"},
        {"<U3", "header 'descr' is '<U3' (strings)"},
        {"<M8[ns]", "header 'descr' is '<M8[ns]' (dates or times)"},
        {"|V8", "header 'descr' is '|V8' (raw bytes or records)"},
        {"<f16", "header 'descr' is '<f16'"},
        {"", "header 'descr' is ''"},
    };
    for (size_t c = 0; c < sizeof descrs / sizeof descrs[0]; c++) {
        char dict[128], text[256];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (2,), }",
                 descrs[c].descr);
        snprintf(text, sizeof text, "%s%s", descrs[c].text, known);
        expect_header_fail(dict, 8, text);
    }
    expect_header_fail("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8,
                       "header 'descr' is a list (a structured dtype)");

    /* fortran_order */
    expect_header_fail("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24,
                       "header 'fortran_order' is True; mpcl reads C-order arrays only");
    expect_header_fail("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", 24,
                       "'fortran_order' is not True or False");
    expect_header_fail("{'descr': '<f4', 'fortran_order': false, 'shape': (2, 3), }", 24,
                       "'fortran_order' is not True or False");
    expect_header_fail("{'descr': '<f4', 'fortran_order': Falsehood, 'shape': (2, 3), }", 24,
                       "expected ',' or '}'");

    /* shape */
    static const struct {
        const char *shape, *text;
    } shapes[] = {
        {"()", "header 'shape' is () (a scalar); mpcl reads arrays of 1 to 8 dimensions"},
        {"(1,1,1,1,1,1,1,1,1)", "'shape' has more than 8 dimensions; mpcl reads 1 to 8"},
        {"(-2, 3)", "'shape'[0] '-2' is negative"},
        {"(2, -0)", "'shape'[1] '-0' is negative"},
        {"(18446744073709551616,)", "'shape'[0] '18446744073709551616' is out of range"},
        {"(2, 99999999999999999999999999999999999)",
         "'shape'[1] '9999999999999999999999999999999'"},
        {"(6)", "'shape' (n) needs a comma: (n,)"},
        {"(2 3)", "expected ',' or ')' in 'shape'"},
        {"(2,, 3)", "'shape'[1] '' is not a number"},
        {"(2.0, 3)", "expected ',' or ')' in 'shape'"},
        {"(+2, 3)", "'shape'[0] '' is not a number"},
        {"[2, 3]", "expected 'shape' to be a tuple, starting with '('"},
        {"(2, 3", "'shape'[2] '' is not a number"},
        {"(4294967296, 4294967296)",
         "header 'shape' (4294967296, 4294967296) of f4 holds more bytes than fit in 64 bits"},
        {"(0, 4294967296, 4294967296)", "holds more bytes than fit in 64 bits"},
        {"(4611686018427387904,)", "header 'shape' (4611686018427387904,) of f4 holds more"},
    };
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        char dict[160];
        snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }",
                 shapes[c].shape);
        expect_header_fail(dict, 24, shapes[c].text);
    }
}

/* The data must be exactly what the shape needs: one element short, one
 * byte short, one byte over. */
static void test_data_length(void **state) {
    (void)state;
    static image im;
    unsigned char data[32] = {0};
    npy_image(&im, 1, DICT_F4_2x3, 64, data, 20);
    expect_fail(&im, MPCL_ERR_FORMAT,
                "data are 20 bytes, but header 'shape' (2, 3) of f4 needs 24 (truncated)");
    npy_image(&im, 1, DICT_F4_2x3, 64, data, 23);
    expect_fail(&im, MPCL_ERR_FORMAT,
                "data are 23 bytes, but header 'shape' (2, 3) of f4 needs 24");
    npy_image(&im, 1, DICT_F4_2x3, 64, data, 0);
    expect_fail(&im, MPCL_ERR_FORMAT, "data are 0 bytes, but header 'shape' (2, 3) of f4 needs 24");
    npy_image(&im, 1, DICT_F4_2x3, 64, data, 25);
    expect_fail(&im, MPCL_ERR_FORMAT,
                "data are 25 bytes, 1 more than header 'shape' (2, 3) of f4 needs (the header "
                "lies about the shape, or bytes were appended)");
    npy_image(&im, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", 64, data, 32);
    expect_fail(&im, MPCL_ERR_FORMAT, "data are 32 bytes, 8 more than header 'shape' (6,) of f4");
    /* A shape far larger than the file: refused before anything is allocated. */
    npy_image(&im, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }", 64,
              data, 8);
    expect_fail(&im, MPCL_ERR_FORMAT,
                "data are 8 bytes, but header 'shape' (1000000000000,) of f8 "
                "needs 8000000000000 (truncated)");
}

/* Every prefix of a good file is refused as malformed, never read past its
 * end (ASan watches the memory parse). */
static void test_prefixes(void **state) {
    (void)state;
    static image im;
    npy_image(&im, 3, DICT_F4_2x3, 64, F4_BITS, sizeof F4_BITS);
    for (size_t n = 0; n < im.n; n++) {
        unsigned char *copy = malloc(n ? n : 1);
        assert_non_null(copy);
        memcpy(copy, im.b, n);
        mpcl_npy *a = (mpcl_npy *)1;
        assert_int_equal(mpcl__npy_parse("cut.npy", copy, n, &a), MPCL_ERR_FORMAT);
        assert_null(a);
        free(copy);
    }
}

/* ---- files ---- */

static void expect_io_fail(const char *p, const char *text) {
    mpcl_npy *a = (mpcl_npy *)1;
    assert_int_equal(mpcl_npy_read(p, &a), MPCL_ERR_IO);
    assert_null(a);
    if (!strstr(mpcl_errmsg(), p) || !strstr(mpcl_errmsg(), text))
        fail_msg("wanted '%s' and '%s' in: %s", p, text, mpcl_errmsg());
}

static void test_files(void **state) {
    (void)state;
    char p[128];
    path_of(p, sizeof p, "missing.npy");
    expect_io_fail(p, "No such file");
    expect_io_fail(dir, "is a folder, not a regular file");
    /* A FIFO without a writer: refused at once; alarm() turns a blocking
     * open into a failure instead of a hang. */
    path_of(p, sizeof p, "fifo.npy");
    assert_int_equal(mkfifo(p, 0600), 0);
    alarm(10);
    expect_io_fail(p, "is a FIFO, not a regular file");
    alarm(0);
    assert_int_equal(unlink(p), 0);

    mpcl_npy *a = (mpcl_npy *)1;
    assert_int_equal(mpcl_npy_read(NULL, &a), MPCL_ERR_INVALID_ARG);
    assert_null(a);
    assert_int_equal(mpcl_npy_read(p, NULL), MPCL_ERR_INVALID_ARG);
    mpcl_npy_destroy(NULL);
}

/* ---- finite values ---- */

/* The finite check of an array of dtype and shape (given as text) whose
 * element `at` (flat) has the bits `bad` (the others hold `fill`): MPCL_OK
 * when text is NULL, else a failure naming the file and holding text. */
static void expect_finite(const char *descr, const char *shape, size_t count, size_t size,
                          uint64_t fill, size_t at, uint64_t bad, const char *text) {
    static unsigned char data[4096];
    assert_true(count * size <= sizeof data);
    for (size_t k = 0; k < count; k++) {
        uint64_t v = k == at ? bad : fill;
        memcpy(data + k * size, &v, size); /* little-endian host: the low bytes */
    }
    char dict[160];
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
             shape);
    static image im;
    npy_image(&im, 1, dict, 64, data, count * size);
    mpcl_npy *a = read_both(&im);
    mpcl_status st = mpcl_npy_check_finite(a);
    mpcl_npy_destroy(a);
    if (!text) {
        if (st != MPCL_OK) fail_msg("%s %s: %s", descr, shape, mpcl_errmsg());
        return;
    }
    assert_int_equal(st, MPCL_ERR_FORMAT);
    if (!strstr(mpcl_errmsg(), "'mem.npy': ") || !strstr(mpcl_errmsg(), text))
        fail_msg("wanted '%s' in: %s", text, mpcl_errmsg());
}

static void test_finite(void **state) {
    (void)state;
    const uint64_t one4 = 0x3f800000u, one2 = 0x3c00u, one8 = 0x3ff0000000000000ull;
    /* f4, 2-D: NaN (quiet, signalling, negative), inf, -inf. */
    expect_finite("<f4", "(4, 5)", 20, 4, one4, 13, 0x7fc00000u,
                  "row 2, column 3 is NaN; mpcl needs finite values");
    expect_finite("<f4", "(4, 5)", 20, 4, one4, 0, 0x7f800001u, "row 0, column 0 is NaN");
    expect_finite("<f4", "(4, 5)", 20, 4, one4, 19, 0xffc00000u, "row 3, column 4 is NaN");
    expect_finite("<f4", "(4, 5)", 20, 4, one4, 7, 0x7f800000u, "row 1, column 2 is inf");
    expect_finite("<f4", "(4, 5)", 20, 4, one4, 7, 0xff800000u, "row 1, column 2 is -inf");
    /* The largest finite value, -0 and the smallest subnormal are finite. */
    expect_finite("<f4", "(4, 5)", 20, 4, one4, 7, 0x7f7fffffu, NULL);
    expect_finite("<f4", "(4, 5)", 20, 4, 0x80000000u, 7, 0x00000001u, NULL);
    /* f2, 3-D: the full index too. */
    expect_finite("<f2", "(2, 3, 4)", 24, 2, one2, 14, 0xfc00u,
                  "row 1, column 2 (element [1, 0, 2]) is -inf");
    expect_finite("<f2", "(2, 3, 4)", 24, 2, one2, 23, 0x7e00u,
                  "row 1, column 11 (element [1, 2, 3]) is NaN");
    expect_finite("<f2", "(2, 3, 4)", 24, 2, one2, 5, 0x7bffu, NULL);
    /* f8, 1-D: the row alone. */
    expect_finite("<f8", "(6,)", 6, 8, one8, 4, 0x7ff0000000000000ull, "row 4 is inf");
    expect_finite("<f8", "(6,)", 6, 8, one8, 4, 0x7ff8000000000001ull, "row 4 is NaN");
    expect_finite("<f8", "(6,)", 6, 8, one8, 4, 0x7fefffffffffffffull, NULL);
    /* Integers are finite whatever their bits. */
    expect_finite("<i4", "(2, 2)", 4, 4, 0, 1, 0x7f800000u, NULL);
    expect_finite("<u2", "(2, 2)", 4, 2, 0, 1, 0xfc00u, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_spellings),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_header_limit),
        cmocka_unit_test(test_bad_preamble),
        cmocka_unit_test(test_bad_header_syntax),
        cmocka_unit_test(test_bad_keys),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_data_length),
        cmocka_unit_test(test_prefixes),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_finite),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
