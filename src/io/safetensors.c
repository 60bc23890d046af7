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

#include "runtime/fileio.h"
#include "io/io.h"
#include "io/json.h"
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

static int utf8_valid(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = mpcl__utf8_seq((const unsigned char *)s + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

/* A tensor's name, by one rule for the writer and the reader: not empty, not
 * the metadata key, valid UTF-8. */
static int tensor_name_ok(const char *name) {
    return name && *name && strcmp(name, "__metadata__") != 0 && utf8_valid(name);
}

/* ---- a strict JSON parser for the header ---- */

/* Memory: the parser keeps the tree in one block of nodes whose size is known
 * before anything is allocated. A first pass counts the values in the header
 * (scan_values); the tree then needs exactly that many nodes, and a header
 * whose tree would take more than ST_TREE_RATIO times its own length, or
 * more than ST_TREE_MAX bytes, is refused before the block is allocated.
 * Strings are decoded in place in the header (a decoded string is never
 * longer than its source), so keys, names and metadata cost nothing more,
 * and the reader's object points into the header it keeps. Each container
 * takes its children from the block in one piece, counted by the same scan
 * over the container alone. The whole read thus takes at most
 * (1 + ST_TREE_RATIO + ST_BUILD_RATIO) times the header, plus the data
 * section, plus a constant. */
#define ST_TREE_RATIO 8u
#define ST_TREE_SLACK ((uint64_t)64 << 10)
#define ST_TREE_MAX ((uint64_t)512 << 20)
/* The reader's tables (tensors, spans, metadata) are checked against this
 * ratio too; a valid tensor entry takes at least 49 header bytes and 144
 * table bytes, so valid headers never come near it. */
#define ST_BUILD_RATIO 4u

typedef enum jtype { J_OBJ, J_ARR, J_STR, J_INT } jtype;

typedef struct jval jval;

/* 32 bytes: the scan's ratio is in these units. */
struct jval {
    const char *key; /* member key, NUL-terminated in the header; NULL in an array */
    union {
        jval *kids;      /* J_OBJ members or J_ARR elements, n of them */
        const char *str; /* J_STR, NUL-terminated in the header (\u0000 is refused) */
        uint64_t mag;    /* J_INT magnitude (<= 2^63), sign in neg */
    } u;
    uint32_t pos;    /* byte offset in the header, for messages */
    uint32_t keypos; /* offset of the key, for the duplicate-key message */
    uint32_t n;
    uint8_t type, neg;
};

typedef struct jparser {
    char *s; /* the header, decoded in place */
    size_t n, i;
    int depth;
    const char *path;
    jval *pool; /* the node block */
    size_t pool_used, pool_size;
    int dropped; /* a value did not fit the scan's count (see next_kid) */
} jparser;

#define JSON_MAX_DEPTH 16

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

static int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void skip_ws(jparser *p) {
    while (p->i < p->n && is_ws(p->s[p->i])) p->i++;
}

/* The index just past the string whose opening quote is at i (n when it is
 * unterminated). The parser finds the end of a string the same way. */
static size_t string_end(const char *s, size_t n, size_t i) {
    size_t end = i + 1;
    while (end < n && s[end] != '"') end += s[end] == '\\' ? 2 : 1;
    return end < n ? end + 1 : n;
}

/* Counts the values that start in s[i, n) at nesting level 0 relative to i,
 * stopping at the bracket that closes the level (when `one_level`), or
 * counts the values at every level (when not). A value starts at a string
 * that is not followed by ':', at a '-' or digit after a non-digit, and at
 * '{' or '['. On valid JSON this is the exact count; on anything else it is
 * what the parser can ask for before it fails, and the parser checks. */
static size_t scan_values(const char *s, size_t n, size_t i, int one_level) {
    size_t count = 0;
    int level = 0, in_number = 0;
    while (i < n) {
        char c = s[i];
        if (c == '"') {
            size_t j = string_end(s, n, i);
            size_t k = j;
            while (k < n && is_ws(s[k])) k++;
            if ((k >= n || s[k] != ':') && (level == 0 || !one_level)) count++;
            in_number = 0;
            i = j;
            continue;
        }
        int digit = (c >= '0' && c <= '9') || c == '-';
        if (digit && !in_number && (level == 0 || !one_level)) count++;
        in_number = digit;
        if (c == '{' || c == '[') {
            if (level == 0 || !one_level) count++;
            level++;
        } else if (c == '}' || c == ']') {
            if (level == 0) break;
            level--;
        }
        i++;
    }
    return count;
}

/* Prefix for "expected X" messages when the header simply ran out. */
static const char *at_end(const jparser *p) {
    return p->i >= p->n ? "unexpected end of header, " : "";
}

/* At the opening quote. Decodes in place: the output starts at the opening
 * quote and never overtakes the input (an escape of 2, 6 or 12 source bytes
 * writes 1 to 4), and the NUL goes at most where the closing quote was. */
static mpcl_status parse_string(jparser *p, const char **out) {
    size_t start = p->i++;
    size_t end = string_end(p->s, p->n, start) - 1;
    if (end >= p->n || p->s[end] != '"') return JSON_FAIL(p, start, "unterminated string");
    char *o = p->s + start;
    size_t k = 0;
    while (p->i < end) {
        unsigned char c = (unsigned char)p->s[p->i];
        size_t at = p->i;
        if (c < 0x20) return JSON_FAIL(p, at, "raw control character 0x%02x in a string", c);
        if (c >= 0x80) {
            size_t len = mpcl__utf8_seq((const unsigned char *)p->s + at, end - at);
            if (!len) return JSON_FAIL(p, at, "invalid UTF-8 in a string");
            memmove(o + k, p->s + at, len);
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
            if (!mpcl__hex4(p->s + p->i, end - p->i, &cp))
                return JSON_FAIL(p, at, "\\u not followed by four hex digits");
            p->i += 4;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                uint32_t lo;
                if (end - p->i < 6 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' ||
                    !mpcl__hex4(p->s + p->i + 2, 4, &lo) || lo < 0xdc00 || lo > 0xdfff)
                    return JSON_FAIL(p, at, "high surrogate \\u%04x without its low half",
                                     (unsigned)cp);
                p->i += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                return JSON_FAIL(p, at, "lone low surrogate \\u%04x", (unsigned)cp);
            } else if (cp == 0) {
                return JSON_FAIL(p, at, "\\u0000 is not allowed in names or metadata");
            }
            k += mpcl__utf8_put(o + k, cp);
            break;
        default: return JSON_FAIL(p, at, "unknown escape '\\%c'", e >= 0x20 && e < 0x7f ? e : '?');
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
    v->u.mag = m;
    return MPCL_OK;
}

static int key_cmp(const void *a, const void *b) {
    const jval *const *x = a, *const *y = b;
    return strcmp((*x)->key, (*y)->key);
}

static mpcl_status parse_value(jparser *p, jval *v);

/* Takes the children of the container opening at p->i from the node block:
 * as many as the scan counts, which the caller may not exceed. */
static mpcl_status take_kids(jparser *p, jval *v, size_t *cap) {
    size_t want = scan_values(p->s, p->n, p->i + 1, 1);
    size_t left = p->pool_size - p->pool_used;
    *cap = want < left ? want : left;
    v->u.kids = p->pool + p->pool_used;
    p->pool_used += *cap;
    return MPCL_OK;
}

/* The next child's node: from the block while the scan's count lasts, else
 * the caller's spare. The scan counts exactly on valid JSON, so a spare is
 * used only on broken JSON, whose parse then fails where it is broken (a
 * parse that succeeds anyway is refused at the end, through `dropped`). */
static jval *next_kid(jparser *p, jval *v, size_t cap, jval *spare) {
    jval *k = spare;
    if (v->n < cap)
        k = &v->u.kids[v->n++];
    else
        p->dropped = 1;
    memset(k, 0, sizeof *k);
    return k;
}

static mpcl_status parse_object(jparser *p, jval *v) {
    size_t cap;
    v->type = J_OBJ;
    mpcl_status st = take_kids(p, v, &cap);
    if (st != MPCL_OK) return st;
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
        size_t keypos = p->i;
        const char *key;
        st = parse_string(p, &key);
        if (st != MPCL_OK) return st;
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != ':')
            return JSON_FAIL(p, p->i, "%sexpected ':'", at_end(p));
        p->i++;
        jval spare, *m = next_kid(p, v, cap, &spare);
        m->key = key;
        m->keypos = (uint32_t)keypos;
        st = parse_value(p, m);
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
    /* Duplicate keys, found by sorting pointers: O(n log n) for big headers.
     * The pointers take n * 8 bytes, a quarter of the nodes' own size. */
    if (v->n > 1) {
        const jval **sorted = malloc(v->n * sizeof *sorted);
        if (!sorted) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "header keys");
        for (size_t i = 0; i < v->n; i++) sorted[i] = &v->u.kids[i];
        qsort(sorted, v->n, sizeof *sorted, key_cmp);
        for (size_t i = 1; i < v->n; i++) {
            if (strcmp(sorted[i - 1]->key, sorted[i]->key) == 0) {
                const jval *later =
                    sorted[i]->keypos > sorted[i - 1]->keypos ? sorted[i] : sorted[i - 1];
                st = JSON_FAIL(p, later->keypos, "duplicate key \"%s\"", later->key);
                free(sorted);
                return st;
            }
        }
        free(sorted);
    }
    return MPCL_OK;
}

static mpcl_status parse_array(jparser *p, jval *v) {
    size_t cap;
    v->type = J_ARR;
    mpcl_status st = take_kids(p, v, &cap);
    if (st != MPCL_OK) return st;
    p->i++;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ']') {
        p->i++;
        return MPCL_OK;
    }
    for (;;) {
        jval spare, *e = next_kid(p, v, cap, &spare);
        st = parse_value(p, e);
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
    v->pos = (uint32_t)p->i;
    if (p->i >= p->n) return JSON_FAIL(p, p->i, "unexpected end of header");
    char c = p->s[p->i];
    if (c == '"') {
        v->type = J_STR;
        return parse_string(p, &v->u.str);
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
    char *header; /* decoded in place: names, keys and values point into it */
    void *data;
};

void mpcl_safetensors_destroy(mpcl_safetensors *st) {
    if (!st) return;
    free(st->tensors);
    free(st->meta);
    free(st->header);
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

/* The file is the variable `path` where a check fails. */
#define FMT_FAIL(...) mpcl__format_error(path, __FILE__, __LINE__, __VA_ARGS__)

static const jval *member(const jval *obj, const char *key) {
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->u.kids[i].key, key) == 0) return &obj->u.kids[i];
    return NULL;
}

/* A size or an offset: an integer without a '-' ("-0" included: JSON allows
 * it, no writer writes it, and a reader that took it would accept two
 * spellings of one header). */
static int is_count(const jval *v) {
    return v->type == J_INT && !v->neg;
}

static mpcl_status check_tensor(const char *path, const char *name, const jval *v,
                                uint64_t data_size, mpcl_st_tensor *t, span *sp) {
    if (!tensor_name_ok(name)) return FMT_FAIL("tensor name \"%s\" is empty", name);
    if (v->type != J_OBJ) return FMT_FAIL("tensor '%s': entry is not an object", name);
    for (size_t i = 0; i < v->n; i++) {
        const char *k = v->u.kids[i].key;
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
        if (strcmp(dt->u.str, DTYPES[k].name) == 0) d = k;
    if (d < 0) return FMT_FAIL("tensor '%s': unknown dtype \"%s\"", name, dt->u.str);
    if (sh->type != J_ARR) return FMT_FAIL("tensor '%s': shape is not an array", name);
    if (sh->n > MPCL_ST_MAX_DIMS)
        return FMT_FAIL("tensor '%s': %zu dimensions, at most %d are supported", name,
                        (size_t)sh->n, MPCL_ST_MAX_DIMS);
    uint64_t shape[MPCL_ST_MAX_DIMS];
    for (size_t i = 0; i < sh->n; i++) {
        const jval *e = &sh->u.kids[i];
        if (!is_count(e))
            return FMT_FAIL("tensor '%s': shape[%zu] is not a non-negative integer", name, i);
        if (e->u.mag > SIZE_MAX) return FMT_FAIL("tensor '%s': shape[%zu] too large", name, i);
        shape[i] = e->u.mag;
    }
    if (off->type != J_ARR || off->n != 2)
        return FMT_FAIL("tensor '%s': data_offsets is not an array of two integers", name);
    for (int i = 0; i < 2; i++)
        if (!is_count(&off->u.kids[i]))
            return FMT_FAIL("tensor '%s': data_offsets[%d] is not a non-negative integer", name, i);
    uint64_t begin = off->u.kids[0].u.mag, end = off->u.kids[1].u.mag;
    if (begin > end)
        return FMT_FAIL("tensor '%s': data_offsets [%llu, %llu] end before they begin", name,
                        (ull)begin, (ull)end);
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

/* A tensor entry before any table is allocated, so that the tables are
 * sized only for entries that are all valid. */
static mpcl_status build(const char *path, const jval *root, uint64_t hlen, uint64_t data_size,
                         mpcl_safetensors *st) {
    if (root->type != J_OBJ) return FMT_FAIL("header is not a JSON object");
    const jval *meta = member(root, "__metadata__");
    size_t ntensors = root->n - (meta ? 1 : 0);
    if (meta) {
        if (meta->type != J_OBJ) return FMT_FAIL("__metadata__ is not an object");
        for (size_t i = 0; i < meta->n; i++)
            if (meta->u.kids[i].type != J_STR)
                return FMT_FAIL("__metadata__ value of \"%s\" is not a string",
                                meta->u.kids[i].key);
    }
    /* Every entry first, into scratch: a bad one is reported before the
     * tables exist, and the tables are then sized for valid entries only. */
    for (size_t i = 0; i < root->n; i++) {
        const jval *m = &root->u.kids[i];
        if (m == meta) continue;
        mpcl_st_tensor t;
        span sp;
        mpcl_status s = check_tensor(path, m->key, m, data_size, &t, &sp);
        if (s != MPCL_OK) return s;
    }
    uint64_t table_bytes = (uint64_t)ntensors * (sizeof *st->tensors + sizeof(span)) +
                           (uint64_t)(meta ? meta->n : 0) * sizeof *st->meta;
    if (table_bytes > ST_BUILD_RATIO * hlen + ST_TREE_SLACK)
        return FMT_FAIL(
            "header of %llu bytes describes %zu tensors; their tables would take "
            "%llu bytes, more than %u times the header",
            (ull)hlen, ntensors, (ull)table_bytes, ST_BUILD_RATIO);
    if (meta) {
        st->meta = calloc(meta->n ? meta->n : 1, sizeof *st->meta);
        if (!st->meta) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "metadata");
        for (size_t i = 0; i < meta->n; i++) {
            st->meta[i].key = meta->u.kids[i].key;
            st->meta[i].value = meta->u.kids[i].u.str;
        }
        st->meta_count = meta->n;
    }
    st->tensors = calloc(ntensors ? ntensors : 1, sizeof *st->tensors);
    span *spans = calloc(ntensors ? ntensors : 1, sizeof *spans);
    if (!st->tensors || !spans) {
        free(spans);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "%zu tensors", ntensors);
    }
    mpcl_status s = MPCL_OK;
    for (size_t i = 0; i < root->n && s == MPCL_OK; i++) {
        const jval *m = &root->u.kids[i];
        if (m == meta) continue;
        mpcl_st_tensor *t = &st->tensors[st->count];
        s = check_tensor(path, m->key, m, data_size, t, &spans[st->count]);
        if (s != MPCL_OK) break;
        spans[st->count].index = st->count;
        t->name = m->key;
        st->count++;
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

/* The checks on a file of `size` bytes whose first 8 bytes say hlen. */
static mpcl_status check_lengths(const char *path, uint64_t size, uint64_t hlen) {
    if (hlen > size - 8)
        return FMT_FAIL(
            "header length %llu beyond the %llu bytes that follow it (not a safetensors "
            "file, or truncated)",
            (ull)hlen, (ull)(size - 8));
    if (hlen > MPCL_ST_MAX_HEADER)
        return FMT_FAIL("header length %llu over the limit of %u bytes", (ull)hlen,
                        MPCL_ST_MAX_HEADER);
    if (hlen < 2) return FMT_FAIL("header length %llu is too short for a JSON object", (ull)hlen);
    return MPCL_OK;
}

static mpcl_status too_short(const char *path, uint64_t size) {
    return FMT_FAIL(
        "file is %llu bytes, shorter than the 8-byte header length (not a "
        "safetensors file)",
        (ull)size);
}

/* The header buffer (hlen + 1 bytes, for a NUL after it) and the 16-byte
 * aligned data section of an object under construction. */
static mpcl_status alloc_sections(const char *path, uint64_t size, uint64_t hlen,
                                  mpcl_safetensors **out) {
    uint64_t data_size = size - 8 - hlen;
    mpcl_safetensors *s = calloc(1, sizeof *s);
    if (s) s->header = malloc((size_t)hlen + 1);
    /* aligned_alloc wants a multiple of 16. */
    if (s && s->header) s->data = aligned_alloc(16, ((size_t)data_size + 16) & ~(size_t)15);
    if (!s || !s->header || !s->data) {
        mpcl_safetensors_destroy(s);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': %llu bytes", path, (ull)size);
    }
    s->header[hlen] = '\0';
    *out = s;
    return MPCL_OK;
}

/* Parses and validates s->header (hlen bytes) against a data section of
 * data_size bytes; see the memory note above the parser. */
static mpcl_status parse_header(const char *path, mpcl_safetensors *s, uint64_t hlen,
                                uint64_t data_size) {
    if (s->header[0] != '{')
        return FMT_FAIL("header does not start with '{' (not a safetensors file)");
    size_t values = scan_values(s->header, (size_t)hlen, 0, 0);
    uint64_t tree = (uint64_t)values * sizeof(jval);
    if (tree > ST_TREE_RATIO * hlen + ST_TREE_SLACK || tree > ST_TREE_MAX)
        return FMT_FAIL(
            "header of %llu bytes holds %zu JSON values; parsing it would take %llu "
            "bytes, over the limit of %u times its length and %llu bytes in all",
            (ull)hlen, values, (ull)tree, ST_TREE_RATIO, (ull)ST_TREE_MAX);
    jparser p = {s->header, (size_t)hlen, 0, 0, path, NULL, 0, values, 0};
    p.pool = malloc(values ? values * sizeof(jval) : 1);
    if (!p.pool)
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': %zu header values", path, values);
    jval root;
    memset(&root, 0, sizeof root);
    mpcl_status st = parse_value(&p, &root);
    /* The format allows trailing spaces as padding; anything else is garbage. */
    if (st == MPCL_OK) {
        skip_ws(&p);
        if (p.i != p.n) st = JSON_FAIL(&p, p.i, "trailing garbage after the header object");
    }
    if (st == MPCL_OK && p.dropped)
        st = FMT_FAIL("header parsed into more values than it was counted to hold");
    if (st == MPCL_OK) st = build(path, &root, hlen, data_size, s);
    free(p.pool);
    return st;
}

mpcl_status mpcl_safetensors_read(const char *path, mpcl_safetensors **out) {
    if (!out) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_safetensors_read: out is NULL");
    *out = NULL;
    if (!path) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_safetensors_read: path is NULL");
    mpcl_status st = MPCL_OK;
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
        st = too_short(path, size);
        goto cleanup;
    }
    if (fread(lenbuf, 1, 8, f) != 8) {
        st = MPCL_ERROR(NULL, MPCL_ERR_IO, "reading '%s': %s", path, strerror(errno));
        goto cleanup;
    }
    uint64_t hlen = get_le64(lenbuf);
    if ((st = check_lengths(path, size, hlen)) != MPCL_OK) goto cleanup;
    uint64_t data_size = size - 8 - hlen;
    if ((st = alloc_sections(path, size, hlen, &s)) != MPCL_OK) goto cleanup;
    if (fread(s->header, 1, (size_t)hlen, f) != hlen ||
        fread(s->data, 1, (size_t)data_size, f) != data_size) {
        st = MPCL_ERROR(NULL, MPCL_ERR_IO, "reading '%s': %s", path,
                        ferror(f) ? strerror(errno) : "file shrank while being read");
        goto cleanup;
    }
    st = parse_header(path, s, hlen, data_size);
cleanup:
    fclose(f);
    if (st != MPCL_OK) {
        mpcl_safetensors_destroy(s);
        return st;
    }
    *out = s;
    return MPCL_OK;
}

mpcl_status mpcl__safetensors_parse(const char *name, const void *bytes, size_t size,
                                    mpcl_safetensors **out) {
    *out = NULL;
    const char *path = name;
    if (size < 8) return too_short(path, size);
    uint64_t hlen = get_le64(bytes);
    mpcl_status st = check_lengths(path, size, hlen);
    if (st != MPCL_OK) return st;
    mpcl_safetensors *s;
    if ((st = alloc_sections(path, size, hlen, &s)) != MPCL_OK) return st;
    memcpy(s->header, (const unsigned char *)bytes + 8, (size_t)hlen);
    memcpy(s->data, (const unsigned char *)bytes + 8 + hlen, (size_t)(size - 8 - hlen));
    st = parse_header(path, s, hlen, size - 8 - hlen);
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
        if (!tensor_name_ok(t->name))
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
