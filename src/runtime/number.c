/* Strict decimal numbers. See mpcl/number.h. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpcl/number.h"
#include "runtime/runtime.h"

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

mpcl_number_error mpcl_parse_uint(const char *s, uint64_t max, uint64_t *out) {
    if (!s || !*s) return MPCL_NUMBER_EMPTY;
    if (s[0] == '-' && is_digit(s[1])) return MPCL_NUMBER_NEGATIVE;
    uint64_t v = 0;
    for (const char *p = s; *p; p++)
        if (!is_digit(*p)) return MPCL_NUMBER_SYNTAX;
    for (const char *p = s; *p; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (max - d) / 10 || v * 10 + d > max) return MPCL_NUMBER_RANGE;
        v = v * 10 + d;
    }
    *out = v;
    return MPCL_NUMBER_OK;
}

/* Length of the decimal number at s (0 when there is none), by the grammar
 * in number.h; strtod alone would also take blanks, '+', hex and "inf". */
static size_t decimal_length(const char *s) {
    const char *p = s;
    if (*p == '-') p++;
    size_t before = 0, after = 0;
    while (is_digit(*p)) p++, before++;
    if (*p == '.') {
        p++;
        while (is_digit(*p)) p++, after++;
    }
    if (before + after == 0) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!is_digit(*p)) return 0;
        while (is_digit(*p)) p++;
    }
    return (size_t)(p - s);
}

mpcl_number_error mpcl_parse_real(const char *s, double *out) {
    if (!s || !*s) return MPCL_NUMBER_EMPTY;
    size_t n = decimal_length(s);
    if (n == 0 || s[n] != '\0') return MPCL_NUMBER_SYNTAX;
    errno = 0;
    double v = strtod(s, NULL);
    if (!isfinite(v)) return MPCL_NUMBER_RANGE;
    *out = v;
    return MPCL_NUMBER_OK;
}

const char *mpcl_number_error_text(mpcl_number_error e) {
    switch (e) {
    case MPCL_NUMBER_OK: return "is a number";
    case MPCL_NUMBER_EMPTY: return "is empty";
    case MPCL_NUMBER_NEGATIVE: return "is negative";
    case MPCL_NUMBER_SYNTAX: return "is not a plain decimal number";
    case MPCL_NUMBER_RANGE: return "is out of range";
    }
    return "is not a number";
}

char *mpcl__next_field(char **rest) {
    char *field = *rest, *space = field ? strchr(field, ' ') : NULL;
    if (space) *space = '\0';
    *rest = space ? space + 1 : NULL;
    return field;
}
