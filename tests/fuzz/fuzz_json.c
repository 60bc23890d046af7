/* libFuzzer harness: a whole JSON text, through mpcl__json_parse (the
 * parse of mpcl__json_read_file after the read). On success every value is
 * walked and checked against the others (strings hold no NUL, number texts
 * are plain decimal, every key finds its own member), so that ASan sees any
 * pointer or length the reader hands out that is out of bounds. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/json.h"
#include "mpcl/number.h"

static volatile unsigned sink;

static void walk(const mpcl__json_value *v, int depth) {
    if (depth > MPCL__JSON_MAX_DEPTH) abort(); /* deeper than the parser allows */
    size_t len = 0, count = mpcl__json_count(v);
    const char *s;
    double d;
    switch (mpcl__json_type_of(v)) {
    case MPCL__JSON_STRING:
        s = mpcl__json_string(v, &len);
        if (strlen(s) != len) abort();
        break;
    case MPCL__JSON_NUMBER:
        s = mpcl__json_number_text(v);
        if (mpcl_parse_real(s, &d) != MPCL_NUMBER_OK || d != mpcl__json_number(v)) abort();
        break;
    case MPCL__JSON_OBJECT:
        for (size_t i = 0; i < count; i++)
            if (mpcl__json_member(v, mpcl__json_key_at(v, i)) != mpcl__json_at(v, i)) abort();
        break;
    case MPCL__JSON_ARRAY:
    case MPCL__JSON_BOOL:
    case MPCL__JSON_NULL: break;
    default: abort();
    }
    if (mpcl__json_line(v) < 1 || mpcl__json_column(v) < 1) abort();
    for (size_t i = 0; i < count; i++) walk(mpcl__json_at(v, i), depth + 1);
    if (mpcl__json_at(v, count) != NULL) abort();
    sink += (unsigned)(len + count);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mpcl__json *doc = NULL;
    mpcl_status s = mpcl__json_parse("fuzz.json", (const char *)data, size, (size_t)1 << 20, &doc);
    if (s == MPCL_OK) {
        walk(mpcl__json_root(doc), 0);
    } else if (doc || (s != MPCL_ERR_FORMAT && s != MPCL_ERR_OUT_OF_MEMORY)) {
        abort(); /* a failure is a format error (or no memory) and hands out nothing */
    }
    mpcl__json_free(doc);
    return 0;
}
