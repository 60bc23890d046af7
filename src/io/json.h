/* A small strict JSON reader (RFC 8259, nothing more) for the files mpcl reads
 * as text, such as Keras's model.to_json(): one call parses a whole buffer
 * into a read-only tree, one call frees it. Nothing here is installed.
 *
 * Refused, each with "line L, column C: <what>" (columns count bytes):
 * trailing text after the value, nesting deeper than MPCL__JSON_MAX_DEPTH,
 * leading zeros, NaN and Infinity, numbers beyond a double, trailing commas,
 * comments, raw control characters and invalid UTF-8 in strings, unpaired
 * surrogates, \u0000, duplicate keys in an object.
 *
 * Memory: the text is copied once (strings are decoded in that copy) and each
 * value takes a node of 32 bytes; a hostile document of n bytes
 * ("[0,0,0,...]") takes up to about 50 n bytes while it is parsed, a Keras
 * model file far less. Texts over 4 GiB are refused whatever the limit. */
#ifndef MPCL_IO_JSON_H
#define MPCL_IO_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mpcl/status.h"

#define MPCL__JSON_MAX_DEPTH 64

typedef enum mpcl__json_type {
    MPCL__JSON_NULL,
    MPCL__JSON_BOOL,
    MPCL__JSON_NUMBER,
    MPCL__JSON_STRING,
    MPCL__JSON_ARRAY,
    MPCL__JSON_OBJECT
} mpcl__json_type;

typedef struct mpcl__json mpcl__json;             /* a parsed document */
typedef struct mpcl__json_value mpcl__json_value; /* one value in it */

/* Parses the size bytes at text (UTF-8, no NUL needed) into *out. `name`
 * (may be NULL) stands for the file in messages: "'<name>': line L, column
 * C: ..." (MPCL_ERR_FORMAT). A text over max_bytes is refused before it is
 * read. *out is NULL on failure. */
mpcl_status mpcl__json_parse(const char *name, const char *text, size_t size, size_t max_bytes,
                             mpcl__json **out);
/* The same on the file `path`, opened with mpcl__open_regular: MPCL_ERR_IO
 * when it cannot be read, MPCL_ERR_FORMAT when it is over max_bytes or is not
 * valid JSON, with messages naming the path. */
mpcl_status mpcl__json_read_file(const char *path, size_t max_bytes, mpcl__json **out);
/* Frees the document and every value in it. Accepts NULL. */
void mpcl__json_free(mpcl__json *doc);

const mpcl__json_value *mpcl__json_root(const mpcl__json *doc);
/* Every accessor below takes NULL (an absent member or element) as a null
 * value: no elements, no text, line 0. */
mpcl__json_type mpcl__json_type_of(const mpcl__json_value *v);
/* "null", "a boolean", "a number", "a string", "an array", "an object": for
 * messages such as "'layers' is a string, not an array". */
const char *mpcl__json_type_name(mpcl__json_type t);
/* Where v starts in the text, 1-based (columns count bytes); for an object
 * member, where its key starts. */
unsigned mpcl__json_line(const mpcl__json_value *v);
unsigned mpcl__json_column(const mpcl__json_value *v);

/* The member `key` of an object, NULL when v is not an object or has none. */
const mpcl__json_value *mpcl__json_member(const mpcl__json_value *v, const char *key);
/* Members and elements in file order: count (0 for a scalar), i-th value,
 * and i-th key (objects only; NULL otherwise). */
size_t mpcl__json_count(const mpcl__json_value *v);
const mpcl__json_value *mpcl__json_at(const mpcl__json_value *v, size_t i);
const char *mpcl__json_key_at(const mpcl__json_value *v, size_t i);

/* A number's source text ("-0.5e3"), NUL-terminated, for strict integer
 * parsing with mpcl_parse_uint; NULL when v is not a number. */
const char *mpcl__json_number_text(const mpcl__json_value *v);
/* A number's value (0 when v is not a number). */
double mpcl__json_number(const mpcl__json_value *v);
/* A string's decoded UTF-8, NUL-terminated (it holds no NUL), and its length
 * in bytes (*len may be NULL); NULL when v is not a string. */
const char *mpcl__json_string(const mpcl__json_value *v, size_t *len);
/* A boolean's value (false when v is not a boolean). */
bool mpcl__json_bool(const mpcl__json_value *v);

/* Shared with the safetensors reader's header parser: the length of the
 * valid UTF-8 sequence at s (at most n bytes), 0 if invalid (overlong forms,
 * surrogates, above U+10FFFF); the encoding of code point cp into o (1 to 4
 * bytes); the value of the four hex digits at s (avail bytes there), 0 when
 * they are not four hex digits. */
size_t mpcl__utf8_seq(const unsigned char *s, size_t n);
/* mpcl__utf8_seq that also gives the sequence's code point in *cp (set only
 * when the length is not 0). */
size_t mpcl__utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
size_t mpcl__utf8_put(char *o, uint32_t cp);
int mpcl__hex4(const char *s, size_t avail, uint32_t *out);

#endif
