/* safetensors files: an atomic writer, and a reader that validates the whole
 * file before handing anything out. The header's JSON is parsed by a small
 * strict parser for the subset safetensors uses (objects, arrays, strings,
 * integers); everything else, including floats, true/false/null, trailing
 * garbage and duplicate keys, is rejected with the byte offset. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/fileio.h"
#include "io/io.h"
#include "mpcl/safetensors.h"

typedef unsigned long long ull;

static const struct {
    const char *name;
    size_t size;
} DTYPES[] = {
#define MPCL_ST_DTYPE_ROW_(name, size) {#name, size},
    MPCL_ST_DTYPE_MAP(MPCL_ST_DTYPE_ROW_)
#undef MPCL_ST_DTYPE_ROW_
};

const char *mpcl_st_dtype_name(mpcl_st_dtype dtype) {
    return (unsigned)dtype < MPCL_ST_DTYPE_COUNT ? DTYPES[dtype].name : NULL;
}

size_t mpcl_st_dtype_size(mpcl_st_dtype dtype) {
    return (unsigned)dtype < MPCL_ST_DTYPE_COUNT ? DTYPES[dtype].size : 0;
}

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

/* Element count of a shape times size, or 0 with *overflow set when it does
 * not fit in 64 bits. */
static uint64_t shape_bytes(const uint64_t *shape, size_t ndim, size_t size, int *overflow) {
    uint64_t n = size;
    *overflow = 0;
    for (size_t i = 0; i < ndim; i++) {
        if (shape[i] != 0 && n > UINT64_MAX / shape[i]) {
            *overflow = 1;
            return 0;
        }
        n *= shape[i];
    }
    return n;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    if (s[0] < 0x80) return 1;
    size_t len;
    uint32_t cp, min;
    if ((s[0] & 0xe0) == 0xc0) {
        len = 2, cp = s[0] & 0x1fu, min = 0x80;
    } else if ((s[0] & 0xf0) == 0xe0) {
        len = 3, cp = s[0] & 0x0fu, min = 0x800;
    } else if ((s[0] & 0xf8) == 0xf0) {
        len = 4, cp = s[0] & 0x07u, min = 0x10000;
    } else {
        return 0;
    }
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

static int utf8_valid(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

/* ---- a strict JSON parser for the header ---- */

typedef enum jtype { J_OBJ, J_ARR, J_STR, J_INT } jtype;

typedef struct jval jval;
typedef struct jmember jmember;

struct jval {
    jtype type;
    size_t pos; /* byte offset in the header, for messages */
    size_t n;   /* members or elements */
    jmember *members;
    jval *elems;
    char *str; /* NUL-terminated; \u0000 is rejected so strlen is the length */
    int neg;   /* integer: sign and magnitude (magnitude <= 2^63) */
    uint64_t mag;
};

struct jmember {
    char *key;
    size_t pos;
    jval val;
};

typedef struct jparser {
    const char *s;
    size_t n, i;
    int depth;
    const char *path;
} jparser;

#define JSON_MAX_DEPTH 16

static void json_free(jval *v) {
    for (size_t i = 0; v->members && i < v->n; i++) {
        free(v->members[i].key);
        json_free(&v->members[i].val);
    }
    for (size_t i = 0; v->elems && i < v->n; i++) json_free(&v->elems[i]);
    free(v->members);
    free(v->elems);
    free(v->str);
}

#define JSON_FAIL(p, at, ...) mpcl__json_fail((p), (at), __FILE__, __LINE__, __VA_ARGS__)

static mpcl_status mpcl__json_fail(const jparser *p, size_t at, const char *file, int line,
                                   const char *fmt, ...) MPCL_PRINTF(5, 6);
static mpcl_status mpcl__json_fail(const jparser *p, size_t at, const char *file, int line,
                                   const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    /* The header starts at byte 8 of the file. */
    return mpcl__error(NULL, MPCL_ERR_FORMAT, file, line,
                       "'%s': header is not valid JSON at header byte %zu (file byte %zu): %s",
                       p->path, at, at + 8, what);
}

static void skip_ws(jparser *p) {
    while (p->i < p->n &&
           (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

/* Prefix for "expected X" messages when the header simply ran out. */
static const char *at_end(const jparser *p) {
    return p->i >= p->n ? "unexpected end of header, " : "";
}

static int hex4(const char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return 0;
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* At the opening quote. The decoded string is never longer than its source. */
static mpcl_status parse_string(jparser *p, char **out) {
    size_t start = p->i++;
    size_t end = p->i;
    while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n) return JSON_FAIL(p, start, "unterminated string");
    char *o = malloc(end - p->i + 1);
    if (!o) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "header string of %zu bytes", end);
    size_t k = 0;
    while (p->i < end) {
        unsigned char c = (unsigned char)p->s[p->i];
        size_t at = p->i;
        if (c < 0x20) {
            free(o);
            return JSON_FAIL(p, at, "raw control character 0x%02x in a string", c);
        }
        if (c >= 0x80) {
            size_t len = utf8_seq((const unsigned char *)p->s + at, end - at);
            if (!len) {
                free(o);
                return JSON_FAIL(p, at, "invalid UTF-8 in a string");
            }
            memcpy(o + k, p->s + at, len);
            k += len;
            p->i += len;
            continue;
        }
        if (c != '\\') {
            o[k++] = (char)c;
            p->i++;
            continue;
        }
        char e = p->s[at + 1];
        p->i += 2;
        uint32_t cp;
        switch (e) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u':
            if (end - p->i < 4 || !hex4(p->s + p->i, &cp)) {
                free(o);
                return JSON_FAIL(p, at, "\\u not followed by four hex digits");
            }
            p->i += 4;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                uint32_t lo;
                if (end - p->i < 6 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' ||
                    !hex4(p->s + p->i + 2, &lo) || lo < 0xdc00 || lo > 0xdfff) {
                    free(o);
                    return JSON_FAIL(p, at, "high surrogate \\u%04x without its low half",
                                     (unsigned)cp);
                }
                p->i += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                free(o);
                return JSON_FAIL(p, at, "lone low surrogate \\u%04x", (unsigned)cp);
            } else if (cp == 0) {
                free(o);
                return JSON_FAIL(p, at, "\\u0000 is not allowed in names or metadata");
            }
            /* 6 or 12 source bytes always cover the 1 to 4 bytes written. */
            k += put_utf8(o + k, cp);
            break;
        default:
            free(o);
            return JSON_FAIL(p, at, "unknown escape '\\%c'", e >= 0x20 && e < 0x7f ? e : '?');
        }
    }
    o[k] = '\0';
    p->i = end + 1;
    *out = o;
    return MPCL_OK;
}

static mpcl_status parse_int(jparser *p, jval *v) {
    size_t start = p->i;
    v->type = J_INT;
    v->neg = p->s[p->i] == '-';
    if (v->neg) p->i++;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
        return JSON_FAIL(p, start, "'-' without digits");
    if (p->s[p->i] == '0' && p->i + 1 < p->n && p->s[p->i + 1] >= '0' && p->s[p->i + 1] <= '9')
        return JSON_FAIL(p, start, "number with a leading zero");
    uint64_t m = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        unsigned d = (unsigned)(p->s[p->i] - '0');
        if (m > (UINT64_MAX - d) / 10 || m * 10 + d > ((uint64_t)1 << 63))
            return JSON_FAIL(p, start, "integer does not fit in 64 bits");
        m = m * 10 + d;
        p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == '.' || p->s[p->i] == 'e' || p->s[p->i] == 'E'))
        return JSON_FAIL(p, start, "non-integer number (only integers are allowed)");
    v->mag = m;
    return MPCL_OK;
}

static int key_cmp(const void *a, const void *b) {
    const jmember *const *x = a, *const *y = b;
    return strcmp((*x)->key, (*y)->key);
}

static mpcl_status parse_value(jparser *p, jval *v);

static mpcl_status parse_object(jparser *p, jval *v) {
    size_t cap = 0;
    v->type = J_OBJ;
    p->i++;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == '}') {
        p->i++;
        return MPCL_OK;
    }
    for (;;) {
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != '"')
            return JSON_FAIL(p, p->i, "%sexpected a string key", at_end(p));
        if (v->n == cap) {
            cap = cap ? 2 * cap : 8;
            jmember *m = realloc(v->members, cap * sizeof *m);
            if (!m) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "header object");
            v->members = m;
        }
        jmember *m = &v->members[v->n];
        memset(m, 0, sizeof *m);
        m->pos = p->i;
        v->n++; /* counted now so that json_free releases a half-parsed member */
        mpcl_status st = parse_string(p, &m->key);
        if (st != MPCL_OK) return st;
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != ':')
            return JSON_FAIL(p, p->i, "%sexpected ':'", at_end(p));
        p->i++;
        st = parse_value(p, &m->val);
        if (st != MPCL_OK) return st;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == '}') {
            p->i++;
            break;
        }
        return JSON_FAIL(p, p->i, "%sexpected ',' or '}'", at_end(p));
    }
    /* Duplicate keys, found by sorting pointers: O(n log n) for big headers. */
    if (v->n > 1) {
        jmember **sorted = malloc(v->n * sizeof *sorted);
        if (!sorted) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "header keys");
        for (size_t i = 0; i < v->n; i++) sorted[i] = &v->members[i];
        qsort(sorted, v->n, sizeof *sorted, key_cmp);
        for (size_t i = 1; i < v->n; i++) {
            if (strcmp(sorted[i - 1]->key, sorted[i]->key) == 0) {
                const jmember *later =
                    sorted[i]->pos > sorted[i - 1]->pos ? sorted[i] : sorted[i - 1];
                mpcl_status st = JSON_FAIL(p, later->pos, "duplicate key \"%s\"", later->key);
                free(sorted);
                return st;
            }
        }
        free(sorted);
    }
    return MPCL_OK;
}

static mpcl_status parse_array(jparser *p, jval *v) {
    size_t cap = 0;
    v->type = J_ARR;
    p->i++;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ']') {
        p->i++;
        return MPCL_OK;
    }
    for (;;) {
        if (v->n == cap) {
            cap = cap ? 2 * cap : 8;
            jval *e = realloc(v->elems, cap * sizeof *e);
            if (!e) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "header array");
            v->elems = e;
        }
        jval *e = &v->elems[v->n];
        memset(e, 0, sizeof *e);
        v->n++;
        mpcl_status st = parse_value(p, e);
        if (st != MPCL_OK) return st;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == ']') {
            p->i++;
            return MPCL_OK;
        }
        return JSON_FAIL(p, p->i, "%sexpected ',' or ']'", at_end(p));
    }
}

static mpcl_status parse_value(jparser *p, jval *v) {
    skip_ws(p);
    v->pos = p->i;
    if (p->i >= p->n) return JSON_FAIL(p, p->i, "unexpected end of header");
    char c = p->s[p->i];
    if (c == '"') {
        v->type = J_STR;
        return parse_string(p, &v->str);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_int(p, v);
    if (c == '{' || c == '[') {
        if (++p->depth > JSON_MAX_DEPTH)
            return JSON_FAIL(p, p->i, "nesting deeper than %d levels", JSON_MAX_DEPTH);
        mpcl_status st = c == '{' ? parse_object(p, v) : parse_array(p, v);
        p->depth--;
        return st;
    }
    return JSON_FAIL(p, p->i,
                     "unexpected character '%c' (only objects, arrays, strings and "
                     "integers are allowed)",
                     c >= 0x20 && c < 0x7f ? c : '?');
}

/* ---- reader ---- */

struct mpcl_safetensors {
    mpcl_st_tensor *tensors;
    size_t count;
    mpcl_st_meta *meta;
    size_t meta_count;
    void *data;
};

void mpcl_safetensors_destroy(mpcl_safetensors *st) {
    if (!st) return;
    for (size_t i = 0; i < st->count; i++) free((char *)st->tensors[i].name);
    for (size_t i = 0; i < st->meta_count; i++) {
        free((char *)st->meta[i].key);
        free((char *)st->meta[i].value);
    }
    free(st->tensors);
    free(st->meta);
    free(st->data);
    free(st);
}

/* What the validator keeps per tensor before the object is built. */
typedef struct span {
    const char *name;
    uint64_t begin, end;
    size_t index; /* into the tensor list */
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static mpcl_status fmt_fail(const char *path, const char *file, int line, const char *fmt, ...)
    MPCL_PRINTF(4, 5);
static mpcl_status fmt_fail(const char *path, const char *file, int line, const char *fmt, ...) {
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return mpcl__error(NULL, MPCL_ERR_FORMAT, file, line, "'%s': %s", path, what);
}
#define FMT_FAIL(...) fmt_fail(path, __FILE__, __LINE__, __VA_ARGS__)

static const jval *member(const jval *obj, const char *key) {
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->members[i].key, key) == 0) return &obj->members[i].val;
    return NULL;
}

/* Formats a JSON integer for messages. */
static const char *int_text(const jval *v, char *buf, size_t size) {
    snprintf(buf, size, "%s%llu", v->neg ? "-" : "", (ull)v->mag);
    return buf;
}

static mpcl_status check_tensor(const char *path, const char *name, const jval *v,
                                uint64_t data_size, mpcl_st_tensor *t, span *sp) {
    if (v->type != J_OBJ) return FMT_FAIL("tensor '%s': entry is not an object", name);
    for (size_t i = 0; i < v->n; i++) {
        const char *k = v->members[i].key;
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return FMT_FAIL("tensor '%s': unknown field \"%s\"", name, k);
    }
    const jval *dt = member(v, "dtype"), *sh = member(v, "shape"), *off = member(v, "data_offsets");
    if (!dt || !sh || !off)
        return FMT_FAIL("tensor '%s': missing \"%s\"", name,
                        !dt   ? "dtype"
                        : !sh ? "shape"
                              : "data_offsets");
    if (dt->type != J_STR) return FMT_FAIL("tensor '%s': dtype is not a string", name);
    int d = -1;
    for (int k = 0; k < MPCL_ST_DTYPE_COUNT; k++)
        if (strcmp(dt->str, DTYPES[k].name) == 0) d = k;
    if (d < 0) return FMT_FAIL("tensor '%s': unknown dtype \"%s\"", name, dt->str);
    if (sh->type != J_ARR) return FMT_FAIL("tensor '%s': shape is not an array", name);
    if (sh->n > MPCL_ST_MAX_DIMS)
        return FMT_FAIL("tensor '%s': %zu dimensions, at most %d are supported", name, sh->n,
                        MPCL_ST_MAX_DIMS);
    uint64_t shape[MPCL_ST_MAX_DIMS];
    char b0[32], b1[32];
    for (size_t i = 0; i < sh->n; i++) {
        const jval *e = &sh->elems[i];
        if (e->type != J_INT || e->neg)
            return FMT_FAIL("tensor '%s': shape[%zu] is not a non-negative integer", name, i);
        if (e->mag > SIZE_MAX) return FMT_FAIL("tensor '%s': shape[%zu] too large", name, i);
        shape[i] = e->mag;
    }
    if (off->type != J_ARR || off->n != 2)
        return FMT_FAIL("tensor '%s': data_offsets is not an array of two integers", name);
    for (int i = 0; i < 2; i++)
        if (off->elems[i].type != J_INT || (off->elems[i].neg && off->elems[i].mag))
            return FMT_FAIL("tensor '%s': data_offsets[%d] is not a non-negative integer", name, i);
    uint64_t begin = off->elems[0].mag, end = off->elems[1].mag;
    if (begin > end)
        return FMT_FAIL("tensor '%s': data_offsets [%s, %s] end before they begin", name,
                        int_text(&off->elems[0], b0, sizeof b0),
                        int_text(&off->elems[1], b1, sizeof b1));
    if (end > data_size)
        return FMT_FAIL("tensor '%s': data_offsets [%llu, %llu] beyond data section of %llu bytes",
                        name, (ull)begin, (ull)end, (ull)data_size);
    int overflow;
    uint64_t bytes = shape_bytes(shape, sh->n, DTYPES[d].size, &overflow);
    if (overflow || bytes != end - begin) {
        char shape_text[256];
        size_t n = 0;
        shape_text[n++] = '[';
        for (size_t i = 0; i < sh->n && n < sizeof shape_text - 32; i++)
            n += (size_t)snprintf(shape_text + n, sizeof shape_text - n, "%s%llu", i ? ", " : "",
                                  (ull)shape[i]);
        snprintf(shape_text + n, sizeof shape_text - n, "]");
        if (overflow)
            return FMT_FAIL("tensor '%s': shape %s of %s overflows 64 bits of bytes", name,
                            shape_text, DTYPES[d].name);
        return FMT_FAIL(
            "tensor '%s': shape %s of %s needs %llu bytes but data_offsets [%llu, "
            "%llu] hold %llu",
            name, shape_text, DTYPES[d].name, (ull)bytes, (ull)begin, (ull)end, (ull)(end - begin));
    }
    t->dtype = (mpcl_st_dtype)d;
    t->ndim = sh->n;
    for (size_t i = 0; i < sh->n; i++) t->shape[i] = (size_t)shape[i];
    t->bytes = (size_t)bytes;
    sp->name = name;
    sp->begin = begin;
    sp->end = end;
    return MPCL_OK;
}

/* Tensors must tile the data section exactly: from 0, each beginning where the
 * previous ended, the last ending at the section's end. */
static mpcl_status check_layout(const char *path, span *spans, size_t n, uint64_t data_size) {
    qsort(spans, n, sizeof *spans, span_cmp);
    uint64_t at = 0;
    const span *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        const span *s = &spans[i];
        if (s->begin < at)
            return FMT_FAIL("tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap", prev->name,
                            (ull)prev->begin, (ull)prev->end, s->name, (ull)s->begin, (ull)s->end);
        if (s->begin > at) {
            if (prev)
                return FMT_FAIL(
                    "gap of %llu bytes between tensors '%s' (ends at %llu) and '%s' "
                    "(begins at %llu)",
                    (ull)(s->begin - at), prev->name, (ull)at, s->name, (ull)s->begin);
            return FMT_FAIL("gap of %llu bytes before the first tensor '%s' (begins at %llu)",
                            (ull)s->begin, s->name, (ull)s->begin);
        }
        at = s->end;
        prev = s;
    }
    if (at != data_size)
        return FMT_FAIL("data section has %llu bytes but the tensors cover only %llu",
                        (ull)data_size, (ull)at);
    return MPCL_OK;
}

static mpcl_status build(const char *path, const jval *root, uint64_t data_size,
                         mpcl_safetensors *st) {
    if (root->type != J_OBJ) return FMT_FAIL("header is not a JSON object");
    const jval *meta = member(root, "__metadata__");
    size_t ntensors = root->n - (meta ? 1 : 0);
    if (meta) {
        if (meta->type != J_OBJ) return FMT_FAIL("__metadata__ is not an object");
        for (size_t i = 0; i < meta->n; i++)
            if (meta->members[i].val.type != J_STR)
                return FMT_FAIL("__metadata__ value of \"%s\" is not a string",
                                meta->members[i].key);
        st->meta = calloc(meta->n ? meta->n : 1, sizeof *st->meta);
        if (!st->meta) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "metadata");
        for (size_t i = 0; i < meta->n; i++) {
            st->meta[i].key = strdup(meta->members[i].key);
            st->meta[i].value = strdup(meta->members[i].val.str);
            st->meta_count++;
            if (!st->meta[i].key || !st->meta[i].value)
                return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "metadata");
        }
    }
    st->tensors = calloc(ntensors ? ntensors : 1, sizeof *st->tensors);
    span *spans = calloc(ntensors ? ntensors : 1, sizeof *spans);
    if (!st->tensors || !spans) {
        free(spans);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "%zu tensors", ntensors);
    }
    mpcl_status s = MPCL_OK;
    for (size_t i = 0; i < root->n && s == MPCL_OK; i++) {
        const jmember *m = &root->members[i];
        if (&m->val == meta) continue;
        mpcl_st_tensor *t = &st->tensors[st->count];
        s = check_tensor(path, m->key, &m->val, data_size, t, &spans[st->count]);
        if (s != MPCL_OK) break;
        spans[st->count].index = st->count;
        t->name = strdup(m->key);
        st->count++;
        if (!t->name) s = MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "tensor name");
    }
    if (s == MPCL_OK) s = check_layout(path, spans, ntensors, data_size);
    if (s == MPCL_OK)
        for (size_t i = 0; i < ntensors; i++)
            st->tensors[spans[i].index].data = (const unsigned char *)st->data + spans[i].begin;
    free(spans);
    return s;
}

static uint64_t get_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

mpcl_status mpcl_safetensors_read(const char *path, mpcl_safetensors **out) {
    if (!out) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_safetensors_read: out is NULL");
    *out = NULL;
    if (!path) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_safetensors_read: path is NULL");
    mpcl_status st = MPCL_OK;
    char *header = NULL;
    jval root;
    memset(&root, 0, sizeof root);
    mpcl_safetensors *s = NULL;
    FILE *f = NULL;
    if ((st = mpcl__open_regular(path, &f)) != MPCL_OK) return st;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        st = MPCL_ERROR(NULL, MPCL_ERR_IO, "'%s': %s", path, strerror(errno));
        goto cleanup;
    }
    uint64_t size = (uint64_t)sb.st_size;
    unsigned char lenbuf[8];
    if (size < 8) {
        st = FMT_FAIL(
            "file is %llu bytes, shorter than the 8-byte header length (not a "
            "safetensors file)",
            (ull)size);
        goto cleanup;
    }
    if (fread(lenbuf, 1, 8, f) != 8) {
        st = MPCL_ERROR(NULL, MPCL_ERR_IO, "reading '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    uint64_t hlen = get_le64(lenbuf);
    if (hlen > size - 8) {
        st = FMT_FAIL(
            "header length %llu beyond the %llu bytes that follow it (not a safetensors "
            "file, or truncated)",
            (ull)hlen, (ull)(size - 8));
        goto cleanup;
    }
    if (hlen > MPCL_ST_MAX_HEADER) {
        st = FMT_FAIL("header length %llu over the limit of %u bytes", (ull)hlen,
                      MPCL_ST_MAX_HEADER);
        goto cleanup;
    }
    if (hlen < 2) {
        st = FMT_FAIL("header length %llu is too short for a JSON object", (ull)hlen);
        goto cleanup;
    }
    uint64_t data_size = size - 8 - hlen;
    header = malloc((size_t)hlen);
    s = calloc(1, sizeof *s);
    /* 16-byte aligned data (see the header); aligned_alloc wants a multiple of 16. */
    if (s) s->data = aligned_alloc(16, ((size_t)data_size + 16) & ~(size_t)15);
    if (!header || !s || !s->data) {
        st = MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': %llu bytes", path, (ull)size);
        goto cleanup;
    }
    if (fread(header, 1, (size_t)hlen, f) != hlen ||
        fread(s->data, 1, (size_t)data_size, f) != data_size) {
        st = MPCL_ERROR(NULL, MPCL_ERR_IO, "reading '%s': %s", path,
                        ferror(f) ? strerror(errno) : "file shrank while being read");
        goto cleanup;
    }
    if (header[0] != '{') {
        st = FMT_FAIL("header does not start with '{' (not a safetensors file)");
        goto cleanup;
    }
    jparser p = {header, (size_t)hlen, 0, 0, path};
    st = parse_value(&p, &root);
    if (st != MPCL_OK) goto cleanup;
    /* The format allows trailing spaces as padding; anything else is garbage. */
    skip_ws(&p);
    if (p.i != p.n) {
        st = JSON_FAIL(&p, p.i, "trailing garbage after the header object");
        goto cleanup;
    }
    st = build(path, &root, data_size, s);
cleanup:
    json_free(&root);
    free(header);
    if (f) fclose(f);
    if (st != MPCL_OK) {
        mpcl_safetensors_destroy(s);
        return st;
    }
    *out = s;
    return MPCL_OK;
}

size_t mpcl_safetensors_count(const mpcl_safetensors *st) {
    return st->count;
}

const mpcl_st_tensor *mpcl_safetensors_tensor(const mpcl_safetensors *st, size_t index) {
    return index < st->count ? &st->tensors[index] : NULL;
}

const mpcl_st_tensor *mpcl_safetensors_find(const mpcl_safetensors *st, const char *name) {
    for (size_t i = 0; i < st->count; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

size_t mpcl_safetensors_meta_count(const mpcl_safetensors *st) {
    return st->meta_count;
}

const mpcl_st_meta *mpcl_safetensors_meta(const mpcl_safetensors *st, size_t index) {
    return index < st->meta_count ? &st->meta[index] : NULL;
}

const char *mpcl_safetensors_meta_get(const mpcl_safetensors *st, const char *key) {
    for (size_t i = 0; i < st->meta_count; i++)
        if (strcmp(st->meta[i].key, key) == 0) return st->meta[i].value;
    return NULL;
}

/* ---- writer ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) {
    sb_put(b, s, strlen(s));
}

/* A JSON string literal: quotes, backslashes and control characters escaped;
 * other bytes (checked to be UTF-8) as they are. */
static void sb_json_string(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        switch (c) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                sb_put(b, esc, 6);
            } else {
                sb_put(b, (const char *)s, 1);
            }
        }
    }
    sb_put(b, "\"", 1);
}

static int cstr_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that occurs twice, or NULL. */
static const char *first_duplicate(const char **names, size_t n) {
    qsort(names, n, sizeof *names, cstr_cmp);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) return names[i];
    return NULL;
}

static mpcl_status check_write_args(const mpcl_st_tensor *tensors, size_t count,
                                    const mpcl_st_meta *meta, size_t meta_count, uint64_t *bytes) {
    const char *fn = "mpcl_safetensors_write";
    if ((count && !tensors) || (meta_count && !meta))
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: NULL tensor or metadata list", fn);
    for (size_t i = 0; i < count; i++) {
        const mpcl_st_tensor *t = &tensors[i];
        if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0 || !utf8_valid(t->name))
            return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                              "%s: tensor %zu has a NULL, empty, reserved or non-UTF-8 name", fn,
                              i);
        if ((unsigned)t->dtype >= MPCL_ST_DTYPE_COUNT)
            return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: tensor '%s' has unknown dtype %d",
                              fn, t->name, (int)t->dtype);
        if (t->ndim > MPCL_ST_MAX_DIMS)
            return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                              "%s: tensor '%s' has %zu dimensions, at most %d", fn, t->name,
                              t->ndim, MPCL_ST_MAX_DIMS);
        uint64_t shape[MPCL_ST_MAX_DIMS];
        for (size_t k = 0; k < t->ndim; k++) shape[k] = t->shape[k];
        int overflow;
        bytes[i] = shape_bytes(shape, t->ndim, DTYPES[t->dtype].size, &overflow);
        if (overflow || bytes[i] > SIZE_MAX)
            return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: tensor '%s' is too large", fn,
                              t->name);
        if (bytes[i] && !t->data)
            return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: tensor '%s' has NULL data", fn,
                              t->name);
    }
    for (size_t i = 0; i < meta_count; i++)
        if (!meta[i].key || !meta[i].value || !utf8_valid(meta[i].key) ||
            !utf8_valid(meta[i].value))
            return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                              "%s: metadata entry %zu has a NULL or non-UTF-8 key or value", fn, i);
    size_t most = count > meta_count ? count : meta_count;
    const char **names = malloc((most ? most : 1) * sizeof *names);
    if (!names) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "%s: names", fn);
    for (size_t i = 0; i < count; i++) names[i] = tensors[i].name;
    const char *dup = first_duplicate(names, count);
    mpcl_status st = MPCL_OK;
    if (dup) st = MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: tensor name '%s' twice", fn, dup);
    for (size_t i = 0; i < meta_count && st == MPCL_OK; i++) names[i] = meta[i].key;
    if (st == MPCL_OK && (dup = first_duplicate(names, meta_count)) != NULL)
        st = MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: metadata key '%s' twice", fn, dup);
    free(names);
    return st;
}

/* Layout order: larger elements first, ties in the caller's order, so every
 * tensor begins at a multiple of its element size. */
static size_t *layout_order(const mpcl_st_tensor *tensors, size_t count) {
    size_t *order = malloc((count ? count : 1) * sizeof *order);
    if (!order) return NULL;
    size_t k = 0;
    for (size_t size = 8; size >= 1; size /= 2)
        for (size_t i = 0; i < count; i++)
            if (DTYPES[tensors[i].dtype].size == size) order[k++] = i;
    return order;
}

mpcl_status mpcl_safetensors_write(const char *path, const mpcl_st_tensor *tensors, size_t count,
                                   const mpcl_st_meta *meta, size_t meta_count) {
    if (!path || !*path)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_safetensors_write: no path");
    if (!host_is_little_endian())
        return MPCL_ERROR(NULL, MPCL_ERR_UNSUPPORTED,
                          "mpcl_safetensors_write: big-endian hosts are not supported");
    mpcl_status st = MPCL_OK;
    uint64_t *bytes = malloc((count ? count : 1) * sizeof *bytes);
    size_t *order = NULL;
    sbuf h = {0};
    if (!bytes) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "mpcl_safetensors_write");
    st = check_write_args(tensors, count, meta, meta_count, bytes);
    if (st != MPCL_OK) goto cleanup;

    order = layout_order(tensors, count);
    uint64_t *begin = calloc(count ? count : 1, sizeof *begin);
    if (!order || !begin) {
        free(begin);
        st = MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "mpcl_safetensors_write");
        goto cleanup;
    }
    uint64_t at = 0;
    for (size_t k = 0; k < count; k++) {
        begin[order[k]] = at;
        at += bytes[order[k]];
    }
    /* The header, tensors in the caller's order. */
    sb_str(&h, "{");
    if (meta_count) {
        sb_str(&h, "\"__metadata__\":{");
        for (size_t i = 0; i < meta_count; i++) {
            if (i) sb_str(&h, ",");
            sb_json_string(&h, meta[i].key);
            sb_str(&h, ":");
            sb_json_string(&h, meta[i].value);
        }
        sb_str(&h, "}");
    }
    for (size_t i = 0; i < count; i++) {
        const mpcl_st_tensor *t = &tensors[i];
        char num[64];
        if (i || meta_count) sb_str(&h, ",");
        sb_json_string(&h, t->name);
        sb_str(&h, ":{\"dtype\":\"");
        sb_str(&h, DTYPES[t->dtype].name);
        sb_str(&h, "\",\"shape\":[");
        for (size_t k = 0; k < t->ndim; k++) {
            snprintf(num, sizeof num, "%s%llu", k ? "," : "", (ull)t->shape[k]);
            sb_str(&h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (ull)begin[i],
                 (ull)(begin[i] + bytes[i]));
        sb_str(&h, num);
    }
    free(begin);
    sb_str(&h, "}");
    while (h.n % 8) sb_str(&h, " "); /* data section 8-byte aligned in the file */
    if (h.oom) {
        st = MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "mpcl_safetensors_write: header");
        goto cleanup;
    }

    mpcl__atomic_file af;
    if ((st = mpcl__atomic_begin(&af, path)) != MPCL_OK) goto cleanup;
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    st = mpcl__atomic_write(&af, lenbuf, 8);
    if (st == MPCL_OK) st = mpcl__atomic_write(&af, h.p, h.n);
    for (size_t k = 0; k < count && st == MPCL_OK; k++)
        st = mpcl__atomic_write(&af, tensors[order[k]].data, (size_t)bytes[order[k]]);
    if (st == MPCL_OK)
        st = mpcl__atomic_commit(&af);
    else
        mpcl__atomic_abort(&af);
cleanup:
    free(h.p);
    free(order);
    free(bytes);
    return st;
}
