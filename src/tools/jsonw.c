#include "jsonw.h"

#include <inttypes.h>
#include <math.h>

void jsonw_init(jsonw *w, FILE *out) {
    w->out = out;
    w->depth = 0;
    w->has_items[0] = false;
    w->after_key = false;
}

static void indent(jsonw *w) {
    fputc('\n', w->out);
    for (int i = 0; i < w->depth; i++) fputs("  ", w->out);
}

/* Comma and newline before a value, unless it follows its key. */
static void before_value(jsonw *w) {
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->depth > 0) {
        if (w->has_items[w->depth]) fputc(',', w->out);
        indent(w);
    }
    w->has_items[w->depth] = true;
}

static void open_container(jsonw *w, char c) {
    before_value(w);
    fputc(c, w->out);
    if (w->depth + 1 < JSONW_MAX_DEPTH) w->depth++;
    w->has_items[w->depth] = false;
}

static void close_container(jsonw *w, char c) {
    bool had = w->has_items[w->depth];
    if (w->depth > 0) w->depth--;
    if (had) indent(w);
    fputc(c, w->out);
    if (w->depth == 0) fputc('\n', w->out);
}

void jsonw_object_begin(jsonw *w) {
    open_container(w, '{');
}
void jsonw_object_end(jsonw *w) {
    close_container(w, '}');
}
void jsonw_array_begin(jsonw *w) {
    open_container(w, '[');
}
void jsonw_array_end(jsonw *w) {
    close_container(w, ']');
}

static void write_escaped(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        case '\b': fputs("\\b", out); break;
        case '\f': fputs("\\f", out); break;
        default:
            if (*p < 0x20)
                fprintf(out, "\\u%04x", *p);
            else
                fputc(*p, out); /* UTF-8 passes through as is */
        }
    }
    fputc('"', out);
}

void jsonw_key(jsonw *w, const char *key) {
    before_value(w);
    write_escaped(w->out, key);
    fputs(": ", w->out);
    w->after_key = true;
}

void jsonw_string(jsonw *w, const char *s) {
    before_value(w);
    write_escaped(w->out, s);
}

void jsonw_number(jsonw *w, double v) {
    before_value(w);
    if (isfinite(v))
        fprintf(w->out, "%.6g", v);
    else
        fputs("null", w->out);
}

void jsonw_int(jsonw *w, int64_t v) {
    before_value(w);
    fprintf(w->out, "%" PRId64, v);
}

void jsonw_uint(jsonw *w, uint64_t v) {
    before_value(w);
    fprintf(w->out, "%" PRIu64, v);
}

void jsonw_bool(jsonw *w, bool v) {
    before_value(w);
    fputs(v ? "true" : "false", w->out);
}

void jsonw_null(jsonw *w) {
    before_value(w);
    fputs("null", w->out);
}

void jsonw_kv_string(jsonw *w, const char *key, const char *s) {
    jsonw_key(w, key);
    jsonw_string(w, s);
}

void jsonw_kv_number(jsonw *w, const char *key, double v) {
    jsonw_key(w, key);
    jsonw_number(w, v);
}

void jsonw_kv_int(jsonw *w, const char *key, int64_t v) {
    jsonw_key(w, key);
    jsonw_int(w, v);
}

void jsonw_kv_uint(jsonw *w, const char *key, uint64_t v) {
    jsonw_key(w, key);
    jsonw_uint(w, v);
}

void jsonw_kv_bool(jsonw *w, const char *key, bool v) {
    jsonw_key(w, key);
    jsonw_bool(w, v);
}
