/* The one strict number parser: command-line flags, checkpoint metadata and
 * environment values all read numbers through it, so "what is a number"
 * has one answer. Plain decimal only: no blanks, no leading '+', no hex
 * ("0x10"), no "inf" or "nan", nothing after the number. */
#ifndef MPCL_NUMBER_H
#define MPCL_NUMBER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

typedef enum mpcl_number_error {
    MPCL_NUMBER_OK = 0,
    MPCL_NUMBER_EMPTY,    /* "" */
    MPCL_NUMBER_NEGATIVE, /* "-3" where a count is wanted */
    MPCL_NUMBER_SYNTAX,   /* not plain decimal: "+1", "0x10", " 1", "1e", "12abc", "inf" */
    MPCL_NUMBER_RANGE     /* above the maximum, or beyond a double */
} mpcl_number_error;

/* A whole number: digits only, value <= max. *out is set only on success. */
mpcl_number_error mpcl_parse_uint(const char *s, uint64_t max, uint64_t *out);

/* A finite real: -?digits[.digits][(e|E)[+-]digits] (".5" and "5." too).
 * Overflow is MPCL_NUMBER_RANGE; an underflow to zero or a subnormal is
 * returned as computed (the caller decides what is too small). */
mpcl_number_error mpcl_parse_real(const char *s, double *out);

/* "is empty", "is negative", "is not a plain decimal number", "is out of
 * range": to follow "'<value>'" in a message. */
const char *mpcl_number_error_text(mpcl_number_error e);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
