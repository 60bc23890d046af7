/* The tools' JSON writer: structure, commas, escaping and non-finite numbers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "testutil.h"

static void escapes_and_structure(void **state) {
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    jsonw w;
    jsonw_init(&w, f);
    jsonw_object_begin(&w);
    jsonw_kv_string(&w, "s",
                    "a\"b\\c\nd\te\x01"
                    "f");
    jsonw_kv_number(&w, "nan", NAN);
    jsonw_kv_number(&w, "x", 0.5);
    jsonw_kv_uint(&w, "big", 18446744073709551615ull);
    jsonw_key(&w, "empty");
    jsonw_array_begin(&w);
    jsonw_array_end(&w);
    jsonw_key(&w, "list");
    jsonw_array_begin(&w);
    jsonw_bool(&w, true);
    jsonw_null(&w);
    jsonw_array_end(&w);
    jsonw_object_end(&w);
    fclose(f);
    const char *want =
        "{\n"
        "  \"s\": \"a\\\"b\\\\c\\nd\\te\\u0001f\",\n"
        "  \"nan\": null,\n"
        "  \"x\": 0.5,\n"
        "  \"big\": 18446744073709551615,\n"
        "  \"empty\": [],\n"
        "  \"list\": [\n"
        "    true,\n"
        "    null\n"
        "  ]\n"
        "}\n";
    assert_string_equal(buf, want);
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(escapes_and_structure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
