/* Host binary16 conversions, checked against the compiler's _Float16 (an
 * independent implementation) and against hand-picked edge values. */
#include <math.h>
#include <string.h>

#include "testutil.h"

static void every_half_round_trips(void **state) {
    (void)state;
    for (uint32_t bits = 0; bits < 0x10000; bits++) {
        float f = mpcl_f16_to_f32((uint16_t)bits);
        bool nan = (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff);
        if (nan) {
            assert_true(isnan(f));
            continue;
        }
        if (mpcl_f32_to_f16(f) != bits)
            fail_msg("0x%04x -> %g -> 0x%04x", bits, (double)f, mpcl_f32_to_f16(f));
    }
}

static void edge_values(void **state) {
    (void)state;
    assert_int_equal(mpcl_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(mpcl_f32_to_f16(-65504.0f), 0xfbff);
    assert_int_equal(mpcl_f32_to_f16(65519.99f), 0x7bff); /* below the tie: rounds down */
    assert_int_equal(mpcl_f32_to_f16(65520.0f), 0x7c00);  /* the tie rounds to even: inf */
    assert_int_equal(mpcl_f32_to_f16(1e6f), 0x7c00);
    assert_int_equal(mpcl_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(mpcl_f32_to_f16(0x1p-24f), 0x0001);       /* smallest subnormal */
    assert_int_equal(mpcl_f32_to_f16(0x1p-25f), 0x0000);       /* tie between 0 and 2^-24: even */
    assert_int_equal(mpcl_f32_to_f16(0x3p-26f), 0x0001);       /* 0.75 * 2^-24 rounds up */
    assert_int_equal(mpcl_f32_to_f16(0x1.ffcp-15f), 0x0400);   /* tie above max subnormal */
    assert_int_equal(mpcl_f32_to_f16(1.00048828125f), 0x3c00); /* 1 + 2^-11: tie to even */
    assert_int_equal(mpcl_f32_to_f16(-0.0f), 0x8000);
    assert_true(isnan(mpcl_f16_to_f32(mpcl_f32_to_f16(NAN))));
    assert_true(mpcl_f16_to_f32(0x7c00) == INFINITY);
    assert_true(mpcl_f16_to_f32(0x03ff) == 0x1.ff8p-15f);
}

#if defined(__FLT16_MAX__)
/* __extension__: _Float16 is a GCC/Clang extension to C11 (ISO TS 18661-3). */
__extension__ typedef _Float16 compiler_half;
#endif

static void random_floats_match_the_compiler(void **state) {
    (void)state;
#if defined(__FLT16_MAX__)
    tu_rng r = tu_rng_make(20261202);
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits = (uint32_t)(tu_uniform(&r, 0, 4294967296.0));
        float f;
        memcpy(&f, &bits, sizeof f);
        if (isnan(f)) continue;
        compiler_half h = (compiler_half)f;
        uint16_t want;
        memcpy(&want, &h, sizeof want);
        if (mpcl_f32_to_f16(f) != want)
            fail_msg("%a: mpcl 0x%04x, compiler 0x%04x", (double)f, mpcl_f32_to_f16(f), want);
    }
#else
    skip();
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_half_round_trips),
        cmocka_unit_test(edge_values),
        cmocka_unit_test(random_floats_match_the_compiler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
