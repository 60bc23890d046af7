/* Host binary16 conversions, checked against the compiler's _Float16 (an
 * independent implementation) and against hand-picked edge values; host
 * bfloat16 conversions, checked against a reference that rounds in double and
 * against the neighbours of every bf16 value. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ref_ops.h"
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

/* ---- bfloat16 ---- */

static float f32_of(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint32_t bits_of(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* ref_bf16_value and ref_f64_to_bf16 (ref_ops.c) are the reference: they
 * work on the fields in double, without the library's bit trick. */
static uint16_t ref_f32_to_bf16(float f) {
    return ref_f64_to_bf16((double)f);
}

/* Every bf16 pattern converts exactly to f32 (the value of its fields), and
 * every non-NaN one converts back to itself. */
static void every_bf16_round_trips(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = mpcl_bf16_to_f32((uint16_t)h);
        double want = ref_bf16_value((uint16_t)h);
        if (isnan(want)) {
            /* Exact bits: bf16 -> f32 only appends zeros, payload included. */
            assert_int_equal(bits_of(f), h << 16);
            continue;
        }
        if ((double)f != want || !signbit(f) != !signbit(want))
            fail_msg("0x%04x -> %a, want %a", h, (double)f, want);
        if (mpcl_f32_to_bf16(f) != h)
            fail_msg("0x%04x -> %a -> 0x%04x", h, (double)f, mpcl_f32_to_bf16(f));
    }
}

/* For every finite bf16 value v and the next one up in magnitude (inf after
 * the largest, as RNE overflow treats it), the midpoint (exact in f32: 9
 * significant bits) and the floats just below and above it: below rounds to
 * v, above to the next, the midpoint to whichever has an even last bit. The
 * expectations come from the neighbours, not from a conversion. */
static void bf16_rounds_every_midpoint(void **state) {
    (void)state;
    size_t checked = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7fff) >= 0x7f80) continue; /* inf and NaN have no upper neighbour */
        uint16_t lo = (uint16_t)h, hi = (uint16_t)(h + 1);
        double v = ref_bf16_value(lo);
        double next = (h & 0x7fff) == 0x7f7f ? copysign(0x1p128, v) : ref_bf16_value(hi);
        float mid = (float)((v + next) / 2);
        if ((double)mid != (v + next) / 2) fail_msg("midpoint of 0x%04x not exact", h);
        float toward_zero = nextafterf(mid, 0.0f), away = nextafterf(mid, copysignf(INFINITY, mid));
        uint16_t even = (lo & 1) ? hi : lo;
        const struct {
            float x;
            uint16_t want;
        } c[4] = {{(float)v, lo}, {toward_zero, lo}, {mid, even}, {away, hi}};
        for (int i = 0; i < 4; i++) {
            uint16_t got = mpcl_f32_to_bf16(c[i].x);
            if (got != c[i].want)
                fail_msg("%a (0x%08x): 0x%04x, want 0x%04x", (double)c[i].x, bits_of(c[i].x), got,
                         c[i].want);
            assert_int_equal(ref_f32_to_bf16(c[i].x), c[i].want); /* the reference agrees */
            checked++;
        }
    }
    assert_true(checked > 4 * 65000);
}

static void bf16_edge_values(void **state) {
    (void)state;
    /* Overflow: the largest bf16, either side of the tie above it, FLT_MAX. */
    assert_int_equal(mpcl_f32_to_bf16(f32_of(0x7f7f0000)), 0x7f7f);
    assert_int_equal(mpcl_f32_to_bf16(f32_of(0x7f7f7fff)), 0x7f7f);
    assert_int_equal(mpcl_f32_to_bf16(f32_of(0x7f7f8000)), 0x7f80); /* tie: to even, inf */
    assert_int_equal(mpcl_f32_to_bf16(FLT_MAX), 0x7f80);
    assert_int_equal(mpcl_f32_to_bf16(-FLT_MAX), 0xff80);
    assert_int_equal(mpcl_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(mpcl_f32_to_bf16(-INFINITY), 0xff80);
    assert_true(mpcl_bf16_to_f32(0x7f80) == INFINITY);
    assert_true(mpcl_bf16_to_f32(0xff80) == -INFINITY);
    /* Ties to even around 1: 1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6. */
    assert_int_equal(mpcl_f32_to_bf16(1.00390625f), 0x3f80);
    assert_int_equal(mpcl_f32_to_bf16(1.01171875f), 0x3f82);
    assert_int_equal(mpcl_f32_to_bf16(-1.01171875f), 0xbf82);
    assert_int_equal(mpcl_f32_to_bf16(0.1f), 0x3dcd); /* 0x3dcccccd rounds up */
    assert_int_equal(mpcl_f32_to_bf16(-0.0f), 0x8000);
    /* f32 subnormals: 2^-149 and the tie 2^-134 round to 0, 3 * 2^-135 to the
     * smallest bf16 (2^-133), the largest f32 subnormal to the smallest
     * normal 2^-126. */
    assert_int_equal(mpcl_f32_to_bf16(0x1p-149f), 0x0000);
    assert_int_equal(mpcl_f32_to_bf16(-0x1p-149f), 0x8000);
    assert_int_equal(mpcl_f32_to_bf16(0x1p-134f), 0x0000);
    assert_int_equal(mpcl_f32_to_bf16(0x3p-135f), 0x0001);
    assert_int_equal(mpcl_f32_to_bf16(0x1p-133f), 0x0001);
    assert_int_equal(mpcl_f32_to_bf16(f32_of(0x007fffff)), 0x0080);
    assert_true(mpcl_bf16_to_f32(0x0001) == 0x1p-133f);
    assert_true(mpcl_bf16_to_f32(0x0080) == 0x1p-126f);
    assert_true(mpcl_bf16_to_f32(0x7f7f) == 0x1.fep127f);
}

/* NaN stays NaN whatever its payload (one only in the low half would become
 * inf if truncated, or carry into the sign if rounded): the quiet NaN 0x7fc0
 * with the sign kept. */
static void bf16_nan_payloads_stay_nan(void **state) {
    (void)state;
    const uint32_t payloads[] = {0x000001, 0x000100, 0x00ffff, 0x008000, 0x400000,
                                 0x400001, 0x7fffff, 0x3fffff, 0x010000, 0x7f0000};
    for (size_t i = 0; i < sizeof payloads / sizeof payloads[0]; i++) {
        for (uint32_t sign = 0; sign < 2; sign++) {
            uint32_t bits = (sign << 31) | 0x7f800000u | payloads[i];
            uint16_t got = mpcl_f32_to_bf16(f32_of(bits));
            if (got != (sign ? 0xffc0 : 0x7fc0)) fail_msg("NaN 0x%08x -> 0x%04x", bits, got);
            assert_true(isnan(mpcl_bf16_to_f32(got)));
        }
    }
}

/* Every positive f32 subnormal, and random bit patterns, against the double
 * reference; the negatives mirror the positives with the sign bit. */
static void bf16_matches_the_reference(void **state) {
    (void)state;
    for (uint32_t b = 1; b < 0x00800000u; b++) {
        float f = f32_of(b);
        uint16_t got = mpcl_f32_to_bf16(f), want = ref_f32_to_bf16(f);
        if (got != want) fail_msg("subnormal 0x%08x: 0x%04x, want 0x%04x", b, got, want);
        if (mpcl_f32_to_bf16(-f) != (uint16_t)(want | 0x8000u))
            fail_msg("subnormal -0x%08x: sign lost", b);
    }
    tu_rng r = tu_rng_make(20261203);
    for (int i = 0; i < 4000000; i++) {
        float f = f32_of((uint32_t)tu_uniform(&r, 0, 4294967296.0));
        uint16_t got = mpcl_f32_to_bf16(f), want = ref_f32_to_bf16(f);
        if (got != want)
            fail_msg("%a (0x%08x): 0x%04x, want 0x%04x", (double)f, bits_of(f), got, want);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_half_round_trips),
        cmocka_unit_test(edge_values),
        cmocka_unit_test(random_floats_match_the_compiler),
        cmocka_unit_test(every_bf16_round_trips),
        cmocka_unit_test(bf16_rounds_every_midpoint),
        cmocka_unit_test(bf16_edge_values),
        cmocka_unit_test(bf16_nan_payloads_stay_nan),
        cmocka_unit_test(bf16_matches_the_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
