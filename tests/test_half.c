/* Host binary16 conversions, checked against the compiler's _Float16 (an
 * independent implementation), against the library's double route, against
 * the neighbours of every half value and hand-picked edge values; host
 * bfloat16 conversions, checked against a reference that rounds in double and
 * against the neighbours of every bf16 value. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "runtime/runtime.h"
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

/* Every half pattern converts to the value of its fields, the sign of zero
 * and a NaN's payload (moved up 13 bits) included. */
static void every_half_has_its_value(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = mpcl_f16_to_f32((uint16_t)h);
        double want = ref_f16_value((uint16_t)h);
        if (isnan(want)) {
            uint32_t nan = ((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13);
            if (bits_of(f) != nan) fail_msg("NaN 0x%04x -> 0x%08x", h, bits_of(f));
        } else if ((double)f != want || !signbit(f) != !signbit(want)) {
            fail_msg("0x%04x -> %a, want %a", h, (double)f, want);
        }
    }
}

/* A 16-bit format for the midpoint check: the value of a pattern, the
 * conversion under test, the first pattern past the finite ones (inf) and
 * the magnitude past the largest finite value that RNE overflow treats as
 * its upper neighbour. */
typedef struct {
    double (*value)(uint16_t bits);
    uint16_t (*convert)(float x);
    uint32_t inf;
    double beyond_max;
} format16;

/* For every finite value v of the format and the next one up in magnitude
 * (inf after the largest), the midpoint (exact in f32: 12 significant bits
 * at most) and the floats just below and above it: below rounds to v, above
 * to the next, the midpoint to whichever has an even last bit. The
 * expectations come from the neighbours' values, not from a conversion. */
static size_t rounds_every_midpoint(format16 f) {
    size_t checked = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7fff) >= f.inf) continue; /* inf and NaN have no upper neighbour */
        uint16_t lo = (uint16_t)h, hi = (uint16_t)(h + 1);
        double v = f.value(lo);
        double next = (h & 0x7fff) == f.inf - 1 ? copysign(f.beyond_max, v) : f.value(hi);
        float mid = (float)((v + next) / 2);
        if ((double)mid != (v + next) / 2) fail_msg("midpoint of 0x%04x not exact", h);
        float toward_zero = nextafterf(mid, 0.0f), away = nextafterf(mid, copysignf(INFINITY, mid));
        uint16_t even = (lo & 1) ? hi : lo;
        const struct {
            float x;
            uint16_t want;
        } c[4] = {{(float)v, lo}, {toward_zero, lo}, {mid, even}, {away, hi}};
        for (int i = 0; i < 4; i++) {
            uint16_t got = f.convert(c[i].x);
            if (got != c[i].want)
                fail_msg("%a (0x%08x): 0x%04x, want 0x%04x", (double)c[i].x, bits_of(c[i].x), got,
                         c[i].want);
            checked++;
        }
    }
    return checked;
}

static void half_rounds_every_midpoint(void **state) {
    (void)state;
    assert_true(rounds_every_midpoint((format16){ref_f16_value, mpcl_f32_to_f16, 0x7c00, 65536.0}) >
                4 * 63000);
}

/* The f32 route against the double one (mpcl_f64_to_f16 rounds in double,
 * on frexp and nearbyint): every f32 whose half is subnormal or zero from
 * 2^-26 up (12 binades, where the shift differs per binade), then random
 * bit patterns. NaN is left to the edge values. */
static void half_matches_the_double_route(void **state) {
    (void)state;
    for (uint32_t b = 0x32800000u; b < 0x38800000u; b += 7) {
        float f = f32_of(b);
        uint16_t got = mpcl_f32_to_f16(f), want = mpcl_f64_to_f16((double)f);
        if (got != want) fail_msg("0x%08x: 0x%04x, want 0x%04x", b, got, want);
        if (mpcl_f32_to_f16(-f) != (uint16_t)(want | 0x8000u)) fail_msg("-0x%08x: sign lost", b);
    }
    tu_rng r = tu_rng_make(20261207);
    for (int i = 0; i < 4000000; i++) {
        float f = f32_of((uint32_t)tu_uniform(&r, 0, 4294967296.0));
        if (isnan(f)) continue;
        uint16_t got = mpcl_f32_to_f16(f), want = mpcl_f64_to_f16((double)f);
        if (got != want)
            fail_msg("%a (0x%08x): 0x%04x, want 0x%04x", (double)f, bits_of(f), got, want);
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
    /* A payload only in the 13 bits that go would read as inf if truncated. */
    assert_int_equal(mpcl_f32_to_f16(f32_of(0x7f800001u)), 0x7e00);
    assert_int_equal(mpcl_f32_to_f16(f32_of(0xff800fffu)), 0xfe00);
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

/* The midpoints as for half, and the double reference agrees with each
 * expectation there. */
static uint16_t checked_bf16(float x) {
    uint16_t got = mpcl_f32_to_bf16(x);
    assert_int_equal(ref_f32_to_bf16(x), got);
    return got;
}

static void bf16_rounds_every_midpoint(void **state) {
    (void)state;
    assert_true(rounds_every_midpoint((format16){ref_bf16_value, checked_bf16, 0x7f80, 0x1p128}) >
                4 * 65000);
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

/* The array forms (blocks of 16 and a tail) give the scalar conversions
 * bits, checked above, at every length up to two blocks and at every offset
 * into the block, so that no lane and no tail is left out. The inputs are
 * every half pattern read as f32, the halfway points between them and random
 * bit patterns. */
static void arrays_match_the_scalar_conversions(void **state) {
    (void)state;
    enum { N = 3 * 0x10000 };
    float *f = malloc(N * sizeof *f), *back = malloc(N * sizeof *back);
    uint16_t *h = malloc(N * sizeof *h), *all = malloc(0x10000 * sizeof *all);
    assert_non_null(f && back && h && all);
    tu_rng r = tu_rng_make(20261208);
    for (uint32_t i = 0; i < 0x10000; i++) {
        all[i] = (uint16_t)i;
        f[i] = mpcl_f16_to_f32((uint16_t)i);
        f[0x10000 + i] = f32_of(bits_of(f[i]) + 0x1000u); /* halfway to the next half up */
        f[0x20000 + i] = f32_of((uint32_t)tu_uniform(&r, 0, 4294967296.0));
    }
    for (int bf = 0; bf < 2; bf++) {
        mpcl_dtype dt = bf ? MPCL_DTYPE_BF16 : MPCL_DTYPE_F16;
        uint16_t (*to)(float) = bf ? mpcl_f32_to_bf16 : mpcl_f32_to_f16;
        float (*from)(uint16_t) = bf ? mpcl_bf16_to_f32 : mpcl_f16_to_f32;
        for (size_t first = 0; first < 16; first++)
            for (size_t n = 0; n <= 33; n++) {
                memset(h, 0xa5, 64 * sizeof *h);
                mpcl__f32_to_16bit_n(dt, f + 0x10000 + first, h, n);
                for (size_t i = 0; i < n; i++) assert_int_equal(h[i], to(f[0x10000 + first + i]));
                assert_int_equal(h[n], 0xa5a5); /* nothing past the end */
            }
        mpcl__f32_to_16bit_n(dt, f, h, N);
        for (size_t i = 0; i < N; i++)
            if (h[i] != to(f[i]))
                fail_msg("%s %a (0x%08x): array 0x%04x, scalar 0x%04x", mpcl_dtype_name(dt),
                         (double)f[i], bits_of(f[i]), h[i], to(f[i]));
        mpcl__16bit_to_f32_n(dt, all + 3, back, 0x10000 - 3);
        for (uint32_t i = 3; i < 0x10000; i++)
            if (bits_of(back[i - 3]) != bits_of(from((uint16_t)i)))
                fail_msg("%s 0x%04x: array 0x%08x, scalar 0x%08x", mpcl_dtype_name(dt), i,
                         bits_of(back[i - 3]), bits_of(from((uint16_t)i)));
    }
    free(f);
    free(back);
    free(h);
    free(all);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_half_round_trips),
        cmocka_unit_test(every_half_has_its_value),
        cmocka_unit_test(half_rounds_every_midpoint),
        cmocka_unit_test(half_matches_the_double_route),
        cmocka_unit_test(edge_values),
        cmocka_unit_test(random_floats_match_the_compiler),
        cmocka_unit_test(every_bf16_round_trips),
        cmocka_unit_test(bf16_rounds_every_midpoint),
        cmocka_unit_test(bf16_edge_values),
        cmocka_unit_test(bf16_nan_payloads_stay_nan),
        cmocka_unit_test(bf16_matches_the_reference),
        cmocka_unit_test(arrays_match_the_scalar_conversions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
