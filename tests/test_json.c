/* The strict JSON reader (io/json.h): every kind of value read back through
 * the accessors, Keras 2 and Keras 3 model.to_json() documents written here
 * by hand, escapes and surrogates, each refusal with the line and column its
 * message names, hostile nesting, every prefix of a good document, the size
 * limit, and files. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "io/json.h"
#include "mpcl/number.h"

#define LIMIT ((size_t)16 << 20)

static char dir[64];

static int setup(void **state) {
    (void)state;
    return tu_tmpdir_make(dir, "json");
}

static int teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(dir);
}

static mpcl__json *parse_ok(const char *text, size_t n) {
    mpcl__json *doc = NULL;
    mpcl_status st = mpcl__json_parse(NULL, text, n, LIMIT, &doc);
    if (st != MPCL_OK) fail_msg("%.60s: %s", text, mpcl_errmsg());
    return doc;
}

/* A refusal of the n bytes at text whose message holds `want`. */
static void expect_refused_n(const char *text, size_t n, const char *want) {
    mpcl__json *doc = (mpcl__json *)1;
    mpcl_status st = mpcl__json_parse(NULL, text, n, LIMIT, &doc);
    if (st != MPCL_ERR_FORMAT)
        fail_msg("%.60s: %s, want a format error", text, mpcl_status_name(st));
    assert_null(doc);
    if (!strstr(mpcl_errmsg(), want))
        fail_msg("%.60s: wanted '%s' in: %s", text, want, mpcl_errmsg());
}

static void expect_refused(const char *text, const char *want) {
    expect_refused_n(text, strlen(text), want);
}

/* The value at a path of keys (objects) and "#k" indexes (arrays). */
static const mpcl__json_value *at_path(const mpcl__json_value *v, const char *const *path) {
    for (; *path; path++) {
        v = **path == '#' ? mpcl__json_at(v, (size_t)atoi(*path + 1)) : mpcl__json_member(v, *path);
        if (!v) fail_msg("no '%s'", *path);
    }
    return v;
}

#define AT(v, ...) at_path((v), (const char *const[]){__VA_ARGS__, NULL})

static uint64_t uint_at(const mpcl__json_value *v) {
    uint64_t u;
    const char *text = mpcl__json_number_text(v);
    assert_non_null(text);
    assert_int_equal(mpcl_parse_uint(text, UINT32_MAX, &u), MPCL_NUMBER_OK);
    return u;
}

static const char *str_at(const mpcl__json_value *v) {
    const char *s = mpcl__json_string(v, NULL);
    assert_non_null(s);
    return s;
}

/* ---- values ---- */

static void test_every_type(void **state) {
    (void)state;
    const char *text =
        "{\"n\": null, \"t\": true, \"f\": false, \"i\": 42, \"x\": -0.5e3,\n"
        " \"s\": \"hi\", \"a\": [1, [2], {}], \"o\": {\"k\": \"v\"}, \"e\": []}";
    mpcl__json *doc = parse_ok(text, strlen(text));
    const mpcl__json_value *r = mpcl__json_root(doc);
    assert_int_equal(mpcl__json_type_of(r), MPCL__JSON_OBJECT);
    assert_int_equal(mpcl__json_count(r), 9);
    const char *keys[] = {"n", "t", "f", "i", "x", "s", "a", "o", "e"}; /* file order */
    for (size_t k = 0; k < 9; k++) assert_string_equal(mpcl__json_key_at(r, k), keys[k]);
    assert_int_equal(mpcl__json_type_of(AT(r, "n")), MPCL__JSON_NULL);
    assert_true(mpcl__json_bool(AT(r, "t")));
    assert_int_equal(mpcl__json_type_of(AT(r, "f")), MPCL__JSON_BOOL);
    assert_false(mpcl__json_bool(AT(r, "f")));
    assert_string_equal(mpcl__json_number_text(AT(r, "i")), "42");
    assert_true(mpcl__json_number(AT(r, "i")) == 42.0);
    assert_string_equal(mpcl__json_number_text(AT(r, "x")), "-0.5e3");
    assert_true(mpcl__json_number(AT(r, "x")) == -500.0);
    size_t len = 0;
    assert_string_equal(mpcl__json_string(AT(r, "s"), &len), "hi");
    assert_int_equal(len, 2);
    assert_int_equal(mpcl__json_count(AT(r, "a")), 3);
    assert_string_equal(mpcl__json_number_text(AT(r, "a", "#1", "#0")), "2");
    assert_int_equal(mpcl__json_type_of(AT(r, "a", "#2")), MPCL__JSON_OBJECT);
    assert_int_equal(mpcl__json_count(AT(r, "a", "#2")), 0);
    assert_string_equal(str_at(AT(r, "o", "k")), "v");
    assert_int_equal(mpcl__json_count(AT(r, "e")), 0);
    /* A member is placed at its key; an element where it starts. */
    assert_int_equal(mpcl__json_line(AT(r, "s")), 2);
    assert_int_equal(mpcl__json_column(AT(r, "s")), 2);
    assert_int_equal(mpcl__json_column(AT(r, "a", "#1")), 22);
    /* Accessors on the wrong type say "none". */
    assert_null(mpcl__json_member(AT(r, "a"), "k"));
    assert_null(mpcl__json_member(r, "missing"));
    assert_null(mpcl__json_at(AT(r, "a"), 3));
    assert_null(mpcl__json_at(AT(r, "i"), 0));
    assert_null(mpcl__json_key_at(AT(r, "a"), 0));
    assert_null(mpcl__json_number_text(AT(r, "s")));
    assert_null(mpcl__json_string(AT(r, "i"), NULL));
    assert_false(mpcl__json_bool(AT(r, "n")));
    assert_int_equal(mpcl__json_count(AT(r, "s")), 0);
    assert_string_equal(mpcl__json_type_name(MPCL__JSON_ARRAY), "an array");
    mpcl__json_free(doc);
    mpcl__json_free(NULL);

    /* Scalars alone, with blanks around them. */
    doc = parse_ok(" \t\r\n-0 \n", 8);
    assert_string_equal(mpcl__json_number_text(mpcl__json_root(doc)), "-0");
    mpcl__json_free(doc);
    doc = parse_ok("1.5E-3", 6);
    assert_true(mpcl__json_number(mpcl__json_root(doc)) == 1.5e-3);
    mpcl__json_free(doc);
    /* Exactly MPCL__JSON_MAX_DEPTH levels. */
    char deep[2 * MPCL__JSON_MAX_DEPTH];
    memset(deep, '[', MPCL__JSON_MAX_DEPTH);
    memset(deep + MPCL__JSON_MAX_DEPTH, ']', MPCL__JSON_MAX_DEPTH);
    mpcl__json_free(parse_ok(deep, sizeof deep));
}

/* The number text serves strict integer parsing: "28" is a count, "-1" and
 * "28.0" are not. */
static void test_number_text(void **state) {
    (void)state;
    mpcl__json *doc = parse_ok("[28, -1, 28.0, 18446744073709551616]", 36);
    const mpcl__json_value *r = mpcl__json_root(doc);
    uint64_t u;
    assert_int_equal(mpcl_parse_uint(mpcl__json_number_text(AT(r, "#0")), 100, &u), MPCL_NUMBER_OK);
    assert_int_equal(u, 28);
    assert_int_equal(mpcl_parse_uint(mpcl__json_number_text(AT(r, "#1")), 100, &u),
                     MPCL_NUMBER_NEGATIVE);
    assert_int_equal(mpcl_parse_uint(mpcl__json_number_text(AT(r, "#2")), 100, &u),
                     MPCL_NUMBER_SYNTAX);
    assert_int_equal(mpcl_parse_uint(mpcl__json_number_text(AT(r, "#3")), UINT64_MAX, &u),
                     MPCL_NUMBER_RANGE);
    mpcl__json_free(doc);
}

/* ---- Keras ---- */

/* tf.keras 2.x Sequential.to_json(): InputLayer's batch_input_shape. */
static const char KERAS2[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"sequential\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 28, 28, 1], "
    "\"dtype\": \"float32\", \"sparse\": false, \"ragged\": false, \"name\": \"conv2d_input\"}}, "
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv2d\", \"trainable\": true, "
    "\"batch_input_shape\": [null, 28, 28, 1], \"dtype\": \"float32\", \"filters\": 32, "
    "\"kernel_size\": [3, 3], \"strides\": [1, 1], \"padding\": \"valid\", \"data_format\": "
    "\"channels_last\", \"dilation_rate\": [1, 1], \"groups\": 1, \"activation\": \"relu\", "
    "\"use_bias\": true, \"kernel_initializer\": {\"class_name\": \"GlorotUniform\", \"config\": "
    "{\"seed\": null}}, \"bias_initializer\": {\"class_name\": \"Zeros\", \"config\": {}}, "
    "\"kernel_regularizer\": null, \"bias_regularizer\": null, \"activity_regularizer\": null, "
    "\"kernel_constraint\": null, \"bias_constraint\": null}}, "
    "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"max_pooling2d\", \"trainable\": "
    "true, \"dtype\": \"float32\", \"pool_size\": [2, 2], \"padding\": \"valid\", \"strides\": "
    "[2, 2], \"data_format\": \"channels_last\"}}, "
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flatten\", \"trainable\": true, "
    "\"dtype\": \"float32\", \"data_format\": \"channels_last\"}}, "
    "{\"class_name\": \"Dropout\", \"config\": {\"name\": \"dropout\", \"trainable\": true, "
    "\"dtype\": \"float32\", \"rate\": 0.25, \"noise_shape\": null, \"seed\": null}}, "
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"trainable\": true, \"dtype\": "
    "\"float32\", \"units\": 10, \"activation\": \"softmax\", \"use_bias\": true, "
    "\"kernel_initializer\": {\"class_name\": \"GlorotUniform\", \"config\": {\"seed\": null}}, "
    "\"bias_initializer\": {\"class_name\": \"Zeros\", \"config\": {}}, \"kernel_regularizer\": "
    "null, \"bias_regularizer\": null, \"activity_regularizer\": null, \"kernel_constraint\": "
    "null, \"bias_constraint\": null}}]}, \"keras_version\": \"2.13.1\", \"backend\": "
    "\"tensorflow\"}";

/* Keras 3 Sequential.to_json(): module, registered_name, build_config, and
 * InputLayer's batch_shape; indented as json.dumps(indent=2) writes it. */
static const char KERAS3[] =
    "{\n"
    "  \"module\": \"keras\",\n"
    "  \"class_name\": \"Sequential\",\n"
    "  \"config\": {\n"
    "    \"name\": \"sequential\",\n"
    "    \"trainable\": true,\n"
    "    \"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\", \"config\": "
    "{\"name\": \"float32\"}, \"registered_name\": null},\n"
    "    \"layers\": [\n"
    "      {\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\": "
    "{\"batch_shape\": [null, 28, 28, 1], \"dtype\": \"float32\", \"sparse\": false, "
    "\"name\": \"input_layer\"}, \"registered_name\": null},\n"
    "      {\"module\": \"keras.layers\", \"class_name\": \"Conv2D\", \"config\": {\"name\": "
    "\"conv2d\", \"trainable\": true, \"dtype\": {\"module\": \"keras\", \"class_name\": "
    "\"DTypePolicy\", \"config\": {\"name\": \"float32\"}, \"registered_name\": null}, "
    "\"filters\": 32, \"kernel_size\": [3, 3], \"strides\": [1, 1], \"padding\": \"valid\", "
    "\"data_format\": \"channels_last\", \"dilation_rate\": [1, 1], \"groups\": 1, "
    "\"activation\": \"relu\", \"use_bias\": true, \"kernel_initializer\": {\"module\": "
    "\"keras.initializers\", \"class_name\": \"GlorotUniform\", \"config\": {\"seed\": null}, "
    "\"registered_name\": null}, \"bias_initializer\": {\"module\": \"keras.initializers\", "
    "\"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null}, "
    "\"kernel_regularizer\": null, \"bias_regularizer\": null, \"activity_regularizer\": null, "
    "\"kernel_constraint\": null, \"bias_constraint\": null}, \"registered_name\": null, "
    "\"build_config\": {\"input_shape\": [null, 28, 28, 1]}},\n"
    "      {\"module\": \"keras.layers\", \"class_name\": \"Flatten\", \"config\": {\"name\": "
    "\"flatten\", \"trainable\": true, \"dtype\": \"float32\", \"data_format\": "
    "\"channels_last\"}, \"registered_name\": null, \"build_config\": {\"input_shape\": "
    "[null, 26, 26, 32]}},\n"
    "      {\"module\": \"keras.layers\", \"class_name\": \"Dense\", \"config\": {\"name\": "
    "\"dense\", \"trainable\": true, \"dtype\": \"float32\", \"units\": 10, \"activation\": "
    "\"softmax\", \"use_bias\": true, \"kernel_initializer\": {\"module\": "
    "\"keras.initializers\", \"class_name\": \"GlorotUniform\", \"config\": {\"seed\": 1e-0}, "
    "\"registered_name\": null}, \"quantization_config\": null}, \"registered_name\": null, "
    "\"build_config\": {\"input_shape\": [null, 21632]}}\n"
    "    ],\n"
    "    \"build_input_shape\": [null, 28, 28, 1]\n"
    "  },\n"
    "  \"registered_name\": null,\n"
    "  \"build_config\": {\"input_shape\": [null, 28, 28, 1]}\n"
    "}";

static void test_keras2(void **state) {
    (void)state;
    mpcl__json *doc = parse_ok(KERAS2, strlen(KERAS2));
    const mpcl__json_value *r = mpcl__json_root(doc);
    assert_string_equal(str_at(AT(r, "class_name")), "Sequential");
    assert_string_equal(str_at(AT(r, "keras_version")), "2.13.1");
    const mpcl__json_value *layers = AT(r, "config", "layers");
    assert_int_equal(mpcl__json_count(layers), 6);
    const mpcl__json_value *shape = AT(layers, "#0", "config", "batch_input_shape");
    assert_int_equal(mpcl__json_count(shape), 4);
    assert_int_equal(mpcl__json_type_of(AT(shape, "#0")), MPCL__JSON_NULL);
    assert_int_equal(uint_at(AT(shape, "#1")), 28);
    assert_int_equal(uint_at(AT(shape, "#3")), 1);
    assert_string_equal(str_at(AT(layers, "#1", "class_name")), "Conv2D");
    assert_int_equal(uint_at(AT(layers, "#1", "config", "filters")), 32);
    assert_string_equal(str_at(AT(layers, "#1", "config", "kernel_initializer", "class_name")),
                        "GlorotUniform");
    assert_true(mpcl__json_number(AT(layers, "#4", "config", "rate")) == 0.25);
    assert_int_equal(uint_at(AT(layers, "#5", "config", "units")), 10);
    mpcl__json_free(doc);
}

static void test_keras3(void **state) {
    (void)state;
    mpcl__json *doc = parse_ok(KERAS3, strlen(KERAS3));
    const mpcl__json_value *r = mpcl__json_root(doc);
    assert_string_equal(str_at(AT(r, "module")), "keras");
    const mpcl__json_value *layers = AT(r, "config", "layers");
    assert_int_equal(mpcl__json_count(layers), 4);
    assert_int_equal(mpcl__json_line(layers), 8);
    assert_int_equal(mpcl__json_column(layers), 5);
    assert_int_equal(mpcl__json_line(AT(layers, "#2")), 11);
    assert_int_equal(mpcl__json_column(AT(layers, "#2")), 7);
    assert_int_equal(uint_at(AT(layers, "#0", "config", "batch_shape", "#2")), 28);
    assert_int_equal(mpcl__json_type_of(AT(layers, "#0", "registered_name")), MPCL__JSON_NULL);
    assert_string_equal(str_at(AT(layers, "#1", "config", "dtype", "config", "name")), "float32");
    assert_int_equal(uint_at(AT(layers, "#3", "build_config", "input_shape", "#1")), 21632);
    assert_true(mpcl__json_number(
                    AT(layers, "#3", "config", "kernel_initializer", "config", "seed")) == 1.0);
    mpcl__json_free(doc);
}

/* ---- strings ---- */

static void test_escapes(void **state) {
    (void)state;
    const char *text =
        "[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\u00e9\\u20AC\\ud83d\\ude00\", "
        "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\", \"\\u007f\\u0001\", \"\"]";
    mpcl__json *doc = parse_ok(text, strlen(text));
    const mpcl__json_value *r = mpcl__json_root(doc);
    size_t len;
    assert_string_equal(mpcl__json_string(AT(r, "#0"), &len), "\"\\/\b\f\n\r\t");
    assert_int_equal(len, 8);
    const char *utf8 = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"; /* é € 😀 */
    assert_string_equal(mpcl__json_string(AT(r, "#1"), &len), utf8);
    assert_int_equal(len, 9);
    assert_string_equal(str_at(AT(r, "#2")), utf8);
    assert_string_equal(str_at(AT(r, "#3")), "\x7f\x01");
    assert_string_equal(mpcl__json_string(AT(r, "#4"), &len), "");
    assert_int_equal(len, 0);
    mpcl__json_free(doc);
    /* Keys are decoded too, and two spellings of one key are one key. */
    expect_refused("{\"\\u0061\": 1, \"a\": 2}", "line 1, column 15: duplicate key \"a\"");
}

/* ---- refusals ---- */

static void test_refusals(void **state) {
    (void)state;
    static const struct {
        const char *text, *want;
    } CASES[] = {
        {"{\"a\": 1 \"b\": 2}",
         "line 1, column 9: expected ',' or '}' after an object member, found '\"'"},
        {"[1 2]", "line 1, column 4: expected ',' or ']' after an array element, found '2'"},
        {"{\n  \"a\": 1,\n  \"b\" 2\n}", "line 3, column 7: expected ':' after a key, found '2'"},
        {"{\"a\": 1, \"b\": 2, \"a\": 3}",
         "line 1, column 18: duplicate key \"a\" (first at line 1, column 2)"},
        {"[1, 2,]", "line 1, column 7: trailing comma before ']'"},
        {"{\"a\": 1,\n}", "line 2, column 1: trailing comma before '}'"},
        {"[,]", "line 1, column 2: expected a value, found ','"},
        {"{,}", "line 1, column 2: expected a string key, found ','"},
        {"{1: 2}", "line 1, column 2: expected a string key, found '1'"},
        {"1 2", "line 1, column 3: '2' after the value (only blanks may follow it)"},
        {"{} x", "line 1, column 4: 'x' after the value"},
        {"01", "line 1, column 1: number with a leading zero"},
        {"[-01]", "line 1, column 2: number with a leading zero"},
        {"-", "line 1, column 2: expected a digit in a number, found the end of the text"},
        {"1.", "line 1, column 3: expected a digit after the decimal point"},
        {".5", "line 1, column 1: expected a value, found '.'"},
        {"+1", "line 1, column 1: expected a value, found '+'"},
        {"1e+", "line 1, column 4: expected a digit in the exponent, found the end of the text"},
        {"0x10", "line 1, column 2: 'x' after the value"},
        {"1e999", "line 1, column 1: number '1e999' is out of range"},
        {"NaN", "line 1, column 1: NaN and Infinity are not JSON numbers"},
        {"[Infinity]", "line 1, column 2: NaN and Infinity are not JSON numbers"},
        {"-Infinity", "line 1, column 1: Infinity is not a JSON number"},
        {"// c\n1", "line 1, column 1: comments are not JSON"},
        {"[1, /* c */ 2]", "line 1, column 5: comments are not JSON"},
        {"tru", "line 1, column 1: expected a value, found 't'"},
        {"'a'", "line 1, column 1: expected a value, found '''"},
        {"", "line 1, column 1: expected a value, found the end of the text"},
        {" \n ", "line 2, column 2: expected a value, found the end of the text"},
        {"[1", "line 1, column 3: expected ',' or ']' after an array element, found the end"},
        {"\"abc", "line 1, column 5: unterminated string"},
        {"\"a\\", "line 1, column 3: unknown escape '\\?' in a string"},
        {"\"\\x\"", "line 1, column 2: unknown escape '\\x' in a string"},
        {"\"\\u12\"", "line 1, column 2: \\u not followed by four hex digits"},
        {"\"\\u12g4\"", "line 1, column 2: \\u not followed by four hex digits"},
        {"\"a\\u0000b\"", "line 1, column 3: \\u0000 (a NUL character) in a string"},
        {"\"\\ud800\"", "line 1, column 2: unpaired high surrogate \\ud800"},
        {"\"\\ud800\\u0041\"", "line 1, column 2: unpaired high surrogate \\ud800"},
        {"\"\\udbff\\udbff\"", "line 1, column 2: unpaired high surrogate \\udbff"},
        {"\"x\\udc00\"", "line 1, column 3: unpaired low surrogate \\udc00"},
        {"\"a\x01\"", "line 1, column 3: raw control character 0x01 in a string"},
        {"\"a\nb\"", "line 1, column 3: raw control character 0x0a in a string"},
        {"\"\xff\"", "line 1, column 2: invalid UTF-8 in a string"},
        {"\"\xc0\x80\"", "line 1, column 2: invalid UTF-8 in a string"},         /* overlong NUL */
        {"\"\xed\xa0\x80\"", "line 1, column 2: invalid UTF-8 in a string"},     /* a surrogate */
        {"\"\xf4\x90\x80\x80\"", "line 1, column 2: invalid UTF-8 in a string"}, /* > U+10FFFF */
        {"\"\xe2\x82\"", "line 1, column 2: invalid UTF-8 in a string"},         /* cut short */
        {"\xef\xbb\xbf{}", "line 1, column 1: expected a value, found byte 0xef"}, /* a BOM */
    };
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++)
        expect_refused(CASES[k].text, CASES[k].want);
    /* Bytes after a NUL are still text: NUL is no terminator. */
    expect_refused_n("1\0x", 3, "line 1, column 2: byte 0x00 after the value");
    expect_refused_n("[1\0]", 4, "line 1, column 3: expected ',' or ']' after an array element");
}

/* 10^5 '[' (and '{"a":' chains): refused at the limit, without recursing
 * further. */
static void test_deep_nesting(void **state) {
    (void)state;
    size_t n = 100000;
    char *text = malloc(5 * n);
    assert_non_null(text);
    memset(text, '[', n);
    expect_refused_n(text, n, "line 1, column 65: nesting deeper than 64 levels");
    for (size_t k = 0; k < n; k++) memcpy(text + 5 * k, "{\"a\":", 5);
    expect_refused_n(text, 5 * n, "line 1, column 321: nesting deeper than 64 levels");
    free(text);
}

/* Every prefix of a good document is refused, with a place in its message. */
static void test_prefixes(void **state) {
    (void)state;
    const char *docs[] = {KERAS3, "{\"a\": [1.5e-3, true, null, \"\\ud83d\\ude00\"]}"};
    for (size_t d = 0; d < 2; d++) {
        size_t n = strlen(docs[d]);
        for (size_t len = 0; len < n; len++) {
            /* A copy of exactly len bytes, so that ASan sees any read past it. */
            char *cut = malloc(len ? len : 1);
            assert_non_null(cut);
            memcpy(cut, docs[d], len);
            expect_refused_n(cut, len, "line ");
            free(cut);
        }
    }
}

static void test_size_limit(void **state) {
    (void)state;
    mpcl__json *doc = (mpcl__json *)1;
    assert_int_equal(mpcl__json_parse("m.json", "[1, 2]", 6, 5, &doc), MPCL_ERR_FORMAT);
    assert_null(doc);
    assert_non_null(strstr(mpcl_errmsg(), "'m.json': text is 6 bytes, over the limit of 5"));
    TU_ASSERT_OK(mpcl__json_parse("m.json", "[1, 2]", 6, 6, &doc));
    mpcl__json_free(doc);
}

/* ---- files ---- */

static void write_file(const char *p, const char *text) {
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static void expect_file_refused(const char *p, size_t max, mpcl_status status, const char *want) {
    mpcl__json *doc = (mpcl__json *)1;
    assert_int_equal(mpcl__json_read_file(p, max, &doc), status);
    assert_null(doc);
    char quoted[160];
    snprintf(quoted, sizeof quoted, "'%s'", p);
    if (!strstr(mpcl_errmsg(), quoted) || !strstr(mpcl_errmsg(), want))
        fail_msg("wanted '%s' and '%s' in: %s", quoted, want, mpcl_errmsg());
}

static void test_files(void **state) {
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/model.json", dir);
    write_file(p, KERAS3);
    mpcl__json *doc = NULL;
    TU_ASSERT_OK(mpcl__json_read_file(p, LIMIT, &doc));
    assert_string_equal(str_at(AT(mpcl__json_root(doc), "class_name")), "Sequential");
    mpcl__json_free(doc);
    expect_file_refused(p, 100, MPCL_ERR_FORMAT, "over the limit of 100");

    write_file(p, "{\n  \"a\": 1,\n  \"b\" 2\n}\n");
    expect_file_refused(p, LIMIT, MPCL_ERR_FORMAT,
                        "model.json': line 3, column 7: expected ':' after a key, found '2'");
    write_file(p, "");
    expect_file_refused(p, LIMIT, MPCL_ERR_FORMAT, "line 1, column 1: expected a value");

    snprintf(p, sizeof p, "%s/missing.json", dir);
    expect_file_refused(p, LIMIT, MPCL_ERR_IO, "No such file");
    expect_file_refused(dir, LIMIT, MPCL_ERR_IO, "is a folder, not a regular file");
    /* A FIFO without a writer: refused at once; alarm() turns a blocking
     * open into a failure instead of a hang. */
    snprintf(p, sizeof p, "%s/fifo.json", dir);
    assert_int_equal(mkfifo(p, 0600), 0);
    alarm(10);
    expect_file_refused(p, LIMIT, MPCL_ERR_IO, "is a FIFO, not a regular file");
    alarm(0);
    assert_int_equal(unlink(p), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_type),   cmocka_unit_test(test_number_text),
        cmocka_unit_test(test_keras2),       cmocka_unit_test(test_keras3),
        cmocka_unit_test(test_escapes),      cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_deep_nesting), cmocka_unit_test(test_prefixes),
        cmocka_unit_test(test_size_limit),   cmocka_unit_test(test_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
