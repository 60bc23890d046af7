/* A small JSON writer for the tools: indentation, commas and string escaping
 * handled in one place, so no tool prints JSON by hand. */
#ifndef MPCL_TOOLS_JSONW_H
#define MPCL_TOOLS_JSONW_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSONW_MAX_DEPTH 32

typedef struct jsonw {
    FILE *out;
    int depth;
    bool has_items[JSONW_MAX_DEPTH]; /* whether the open container has a member yet */
    bool after_key;
} jsonw;

void jsonw_init(jsonw *w, FILE *out);
void jsonw_object_begin(jsonw *w);
void jsonw_object_end(jsonw *w);
void jsonw_array_begin(jsonw *w);
void jsonw_array_end(jsonw *w);
void jsonw_key(jsonw *w, const char *key);
void jsonw_string(jsonw *w, const char *s);
void jsonw_number(jsonw *w, double v); /* NaN and inf become null */
void jsonw_int(jsonw *w, int64_t v);
void jsonw_uint(jsonw *w, uint64_t v);
void jsonw_bool(jsonw *w, bool v);
void jsonw_null(jsonw *w);

/* Key and value in one call. */
void jsonw_kv_string(jsonw *w, const char *key, const char *s);
void jsonw_kv_number(jsonw *w, const char *key, double v);
void jsonw_kv_int(jsonw *w, const char *key, int64_t v);
void jsonw_kv_uint(jsonw *w, const char *key, uint64_t v);
void jsonw_kv_bool(jsonw *w, const char *key, bool v);

#endif
