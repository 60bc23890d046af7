/* The strict number parser that flags, checkpoint metadata and environment
 * values share: what it takes, what it refuses and why. */
#include <float.h>
#include <math.h>

#include "mpcl/number.h"
#include "testutil.h"

static void whole_numbers(void **state) {
    (void)state;
    uint64_t v = 7;
    assert_int_equal(mpcl_parse_uint("0", 10, &v), MPCL_NUMBER_OK);
    assert_int_equal(v, 0);
    assert_int_equal(mpcl_parse_uint("0042", 100, &v), MPCL_NUMBER_OK);
    assert_int_equal(v, 42);
    assert_int_equal(mpcl_parse_uint("18446744073709551615", UINT64_MAX, &v), MPCL_NUMBER_OK);
    assert_true(v == UINT64_MAX);
    v = 7;
    assert_int_equal(mpcl_parse_uint("18446744073709551616", UINT64_MAX, &v), MPCL_NUMBER_RANGE);
    assert_int_equal(mpcl_parse_uint("99999999999999999999999", UINT64_MAX, &v), MPCL_NUMBER_RANGE);
    assert_int_equal(mpcl_parse_uint("11", 10, &v), MPCL_NUMBER_RANGE);
    assert_int_equal(mpcl_parse_uint("9", 5, &v), MPCL_NUMBER_RANGE);
    assert_int_equal(mpcl_parse_uint("10", 10, &v), MPCL_NUMBER_OK);
    assert_int_equal(v, 10);
    v = 7;
    assert_int_equal(mpcl_parse_uint("", 10, &v), MPCL_NUMBER_EMPTY);
    assert_int_equal(mpcl_parse_uint(NULL, 10, &v), MPCL_NUMBER_EMPTY);
    assert_int_equal(mpcl_parse_uint("-1", 10, &v), MPCL_NUMBER_NEGATIVE);
    const char *bad[] = {"+1", "0x10", " 1", "1 ", "1e3", "1.0", "12abc", "-", "--1", "inf"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (mpcl_parse_uint(bad[i], UINT64_MAX, &v) != MPCL_NUMBER_SYNTAX)
            fail_msg("'%s' was not refused as syntax", bad[i]);
    assert_int_equal(v, 7); /* untouched by every failure */
}

static void reals(void **state) {
    (void)state;
    struct {
        const char *s;
        double v;
    } good[] = {{"0", 0.0},       {"-0", -0.0},   {"1.5", 1.5},    {".5", 0.5},
                {"5.", 5.0},      {"1e-3", 1e-3}, {"2E+2", 200.0}, {"-3.25e1", -32.5},
                {"0.001", 0.001}, {"1e-400", 0.0}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        double v = NAN;
        if (mpcl_parse_real(good[i].s, &v) != MPCL_NUMBER_OK) fail_msg("'%s' refused", good[i].s);
        if (v != good[i].v) fail_msg("'%s' gave %g", good[i].s, v);
    }
    double v = 3.0;
    const char *bad[] = {"+1", "0x10", "0x1p3", " 1",  "1 ",  "1e",    "1e+", "e5", ".",
                         "-.", "inf",  "nan",   "NaN", "1,5", "1.2.3", "--1", "1f"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (mpcl_parse_real(bad[i], &v) != MPCL_NUMBER_SYNTAX)
            fail_msg("'%s' was not refused as syntax", bad[i]);
    assert_int_equal(mpcl_parse_real("", &v), MPCL_NUMBER_EMPTY);
    assert_int_equal(mpcl_parse_real("1e400", &v), MPCL_NUMBER_RANGE);
    assert_int_equal(mpcl_parse_real("-1e400", &v), MPCL_NUMBER_RANGE);
    assert_true(v == 3.0);
}

static void error_texts_are_distinct(void **state) {
    (void)state;
    for (int a = MPCL_NUMBER_OK; a <= MPCL_NUMBER_RANGE; a++)
        for (int b = 0; b < a; b++)
            assert_string_not_equal(mpcl_number_error_text((mpcl_number_error)a),
                                    mpcl_number_error_text((mpcl_number_error)b));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(whole_numbers),
        cmocka_unit_test(reals),
        cmocka_unit_test(error_texts_are_distinct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
