/* A strict JSON reader. See io/json.h.
 *
 * The parser descends recursively (depth is capped, so hostile nesting
 * cannot exhaust the stack). Each value becomes a node on a scratch stack;
 * when a container closes, its children, now complete, move from the top of
 * the stack to the document's node array in one block, so that every
 * container's children lie side by side (index and count, no lists). Strings
 * are decoded in place in the document's copy of the text: a decoded string
 * is never longer than its source. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "io/json.h"
#include "mpcl/number.h"
#include "runtime/fileio.h"

struct mpcl__json_value {
    const char *key; /* decoded, for an object member; NULL in an array */
    union {
        const char *text;             /* a string (decoded) or a number's source */
        size_t first;                 /* a container's first child, while parsing */
        const mpcl__json_value *kids; /* a container's children, after */
    } u;
    uint32_t n; /* string or number text bytes; a container's children; a boolean */
    uint32_t line, column;
    unsigned char type;
};
_Static_assert(sizeof(struct mpcl__json_value) <= 32, "the memory note in json.h counts 32 bytes");

struct mpcl__json {
    char *text; /* the copy of the text, strings decoded in it */
    mpcl__json_value *nodes;
    size_t count; /* the root is the last node */
};

typedef struct parser {
    const char *name; /* for messages; may be NULL */
    char *s;          /* the copy, NUL-terminated */
    size_t n, i;
    size_t line, line_start;
    int depth;
    mpcl__json_value *nodes, *stack; /* the document's nodes; the scratch stack */
    size_t used, cap, top, stack_cap;
} parser;

/* ---- messages ---- */

static mpcl_status fail_where(const char *name, size_t line, size_t column, const char *file,
                              int src_line, const char *fmt, va_list ap) {
    char what[512];
    vsnprintf(what, sizeof what, fmt, ap);
    if (name)
        return mpcl__format_error(name, file, src_line, "line %zu, column %zu: %s", line, column,
                                  what);
    return mpcl__error(NULL, MPCL_ERR_FORMAT, file, src_line, "line %zu, column %zu: %s", line,
                       column, what);
}

#define FAIL(p, at, ...) fail_at((p), (at), __FILE__, __LINE__, __VA_ARGS__)

/* What is wrong at byte `at`, which lies on the current line (raw newlines
 * appear only between tokens, where skip_ws counts them). */
static mpcl_status fail_at(const parser *p, size_t at, const char *file, int src_line,
                           const char *fmt, ...) MPCL_PRINTF(5, 6);
static mpcl_status fail_at(const parser *p, size_t at, const char *file, int src_line,
                           const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mpcl_status st = fail_where(p->name, p->line, at - p->line_start + 1, file, src_line, fmt, ap);
    va_end(ap);
    return st;
}

static mpcl_status fail_node(const parser *p, const mpcl__json_value *v, const char *fmt, ...)
    MPCL_PRINTF(3, 4);
static mpcl_status fail_node(const parser *p, const mpcl__json_value *v, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mpcl_status st = fail_where(p->name, v->line, v->column, __FILE__, __LINE__, fmt, ap);
    va_end(ap);
    return st;
}

/* "'x'", "byte 0x01" or "the end of the text": what the parser found at i. */
static const char *found(const parser *p, char *buf, size_t cap) {
    if (p->i >= p->n) return "the end of the text";
    unsigned char c = (unsigned char)p->s[p->i];
    if (c > 0x20 && c < 0x7f)
        snprintf(buf, cap, "'%c'", c);
    else
        snprintf(buf, cap, "byte 0x%02x", c);
    return buf;
}

#define FAIL_EXPECTED(p, what)                                                          \
    do {                                                                                \
        char fb_[16];                                                                   \
        return FAIL((p), (p)->i, "expected %s, found %s", (what), found((p), fb_, 16)); \
    } while (0)

static mpcl_status no_memory(const parser *p) {
    return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': %zu bytes of JSON",
                      p->name ? p->name : "(text)", p->n);
}

/* ---- UTF-8 ---- */

size_t mpcl__utf8_seq(const unsigned char *s, size_t n) {
    uint32_t cp;
    return mpcl__utf8_decode(s, n, &cp);
}

size_t mpcl__utf8_decode(const unsigned char *s, size_t n, uint32_t *out) {
    if (s[0] < 0x80) {
        *out = s[0];
        return 1;
    }
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
    *out = cp;
    return len;
}

size_t mpcl__utf8_put(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    size_t len = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const unsigned char lead[5] = {0, 0, 0xc0, 0xe0, 0xf0};
    for (size_t k = len - 1; k > 0; k--, cp >>= 6) o[k] = (char)(0x80 | (cp & 0x3f));
    o[0] = (char)(lead[len] | cp);
    return len;
}

/* ---- tokens ---- */

static void skip_ws(parser *p) {
    for (; p->i < p->n; p->i++) {
        char c = p->s[p->i];
        if (c == '\n') {
            p->line++;
            p->line_start = p->i + 1;
        } else if (c != ' ' && c != '\t' && c != '\r') {
            return;
        }
    }
}

/* The character at the cursor after blanks, or 0 at the end. */
static char peek(parser *p) {
    skip_ws(p);
    return p->i < p->n ? p->s[p->i] : '\0';
}

int mpcl__hex4(const char *s, size_t avail, uint32_t *out) {
    if (avail < 4) return 0;
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

/* The code point of the \uXXXX escape at p->i (the backslash), a surrogate
 * pair taken whole; moves past it. */
static mpcl_status unicode_escape(parser *p, uint32_t *cp) {
    size_t at = p->i;
    if (!mpcl__hex4(p->s + at + 2, p->n - at - 2, cp))
        return FAIL(p, at, "\\u not followed by four hex digits");
    p->i += 6;
    if (*cp >= 0xdc00 && *cp <= 0xdfff)
        return FAIL(p, at, "unpaired low surrogate \\u%04x", (unsigned)*cp);
    if (*cp >= 0xd800 && *cp <= 0xdbff) {
        uint32_t lo;
        if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' ||
            !mpcl__hex4(p->s + p->i + 2, p->n - p->i - 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
            return FAIL(p, at, "unpaired high surrogate \\u%04x", (unsigned)*cp);
        p->i += 6;
        *cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (*cp == 0) return FAIL(p, at, "\\u0000 (a NUL character) in a string");
    return MPCL_OK;
}

static const char ESCAPES[] = "\"\"\\\\//b\bf\fn\nr\rt\t";

/* At the opening quote: decodes the string in place, from the quote on, and
 * NUL-terminates it (at most where the closing quote was). */
static mpcl_status parse_string(parser *p, const char **out, size_t *len) {
    char *o = p->s + p->i++;
    size_t k = 0;
    for (;;) {
        size_t at = p->i;
        if (at >= p->n) return FAIL(p, at, "unterminated string");
        unsigned char c = (unsigned char)p->s[at];
        if (c == '"') break;
        if (c < 0x20) return FAIL(p, at, "raw control character 0x%02x in a string", c);
        if (c != '\\') {
            size_t seq = mpcl__utf8_seq((const unsigned char *)p->s + at, p->n - at);
            if (!seq) return FAIL(p, at, "invalid UTF-8 in a string");
            memmove(o + k, p->s + at, seq);
            k += seq;
            p->i += seq;
            continue;
        }
        char e = at + 1 < p->n ? p->s[at + 1] : '\0';
        const char *esc = e ? strchr(ESCAPES, e) : NULL;
        if (e == 'u') {
            uint32_t cp;
            mpcl_status st = unicode_escape(p, &cp);
            if (st != MPCL_OK) return st;
            k += mpcl__utf8_put(o + k, cp);
        } else if (esc && (esc - ESCAPES) % 2 == 0) {
            o[k++] = esc[1];
            p->i += 2;
        } else {
            return FAIL(p, at, "unknown escape '\\%c' in a string", e > 0x20 && e < 0x7f ? e : '?');
        }
    }
    o[k] = '\0';
    p->i++;
    *out = o;
    *len = k;
    return MPCL_OK;
}

static int is_digit(const parser *p) {
    return p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9';
}

/* Moves past one or more digits; `what` names the place in a message. */
static mpcl_status digits(parser *p, const char *what) {
    if (!is_digit(p)) FAIL_EXPECTED(p, what);
    while (is_digit(p)) p->i++;
    return MPCL_OK;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, and its value as a double. */
static mpcl_status parse_number(parser *p, mpcl__json_value *v) {
    size_t start = p->i;
    if (p->s[p->i] == '-') p->i++;
    if (p->i < p->n && p->s[p->i] == 'I') return FAIL(p, start, "Infinity is not a JSON number");
    if (p->i < p->n && p->s[p->i] == '0' && p->i + 1 < p->n && p->s[p->i + 1] >= '0' &&
        p->s[p->i + 1] <= '9')
        return FAIL(p, start, "number with a leading zero");
    mpcl_status st = digits(p, "a digit in a number");
    if (st == MPCL_OK && p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        st = digits(p, "a digit after the decimal point");
    }
    if (st == MPCL_OK && p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        st = digits(p, "a digit in the exponent");
    }
    if (st != MPCL_OK) return st;
    /* The number's text ends at a blank, ',', ']', '}' or the end, none of
     * which is needed again: it is NUL-terminated there (the copy has a NUL
     * after its last byte). */
    char after = p->s[p->i];
    p->s[p->i] = '\0';
    double num;
    mpcl_number_error e = mpcl_parse_real(p->s + start, &num);
    p->s[p->i] = after;
    if (e != MPCL_NUMBER_OK)
        return FAIL(p, start, "number '%.40s' %s", p->s + start, mpcl_number_error_text(e));
    v->type = MPCL__JSON_NUMBER;
    v->u.text = p->s + start;
    v->n = (uint32_t)(p->i - start);
    return MPCL_OK;
}

/* true, false, null; NaN and Infinity by name; anything else. */
static mpcl_status parse_word(parser *p, mpcl__json_value *v) {
    static const struct {
        const char *word;
        mpcl__json_type type;
        bool truth;
    } WORDS[] = {{"true", MPCL__JSON_BOOL, true},
                 {"false", MPCL__JSON_BOOL, false},
                 {"null", MPCL__JSON_NULL, false}};
    for (size_t w = 0; w < sizeof WORDS / sizeof WORDS[0]; w++) {
        size_t len = strlen(WORDS[w].word);
        if (p->n - p->i >= len && memcmp(p->s + p->i, WORDS[w].word, len) == 0) {
            v->type = (unsigned char)WORDS[w].type;
            v->n = WORDS[w].truth;
            p->i += len;
            return MPCL_OK;
        }
    }
    char c = p->s[p->i];
    if (c == 'N' || c == 'I') return FAIL(p, p->i, "NaN and Infinity are not JSON numbers");
    if (c == '/') return FAIL(p, p->i, "comments are not JSON");
    FAIL_EXPECTED(p, "a value");
}

/* ---- values ---- */

static mpcl_status parse_value(parser *p);

/* A new node on the scratch stack, where the cursor is. */
static mpcl_status push(parser *p) {
    if (p->top == p->stack_cap) {
        size_t cap = p->stack_cap ? 2 * p->stack_cap : 64;
        mpcl__json_value *s = realloc(p->stack, cap * sizeof *s);
        if (!s) return no_memory(p);
        p->stack = s, p->stack_cap = cap;
    }
    mpcl__json_value *v = &p->stack[p->top++];
    memset(v, 0, sizeof *v);
    v->line = (uint32_t)p->line;
    v->column = (uint32_t)(p->i - p->line_start + 1);
    return MPCL_OK;
}

/* Moves the nodes stack[from, top) to the end of the node array. */
static mpcl_status move_to_nodes(parser *p, size_t from) {
    size_t count = p->top - from;
    if (p->cap - p->used < count) {
        /* Doubling, or exactly enough for one big block. */
        size_t cap = p->cap ? 2 * p->cap : 64;
        if (cap - p->used < count) cap = p->used + count;
        mpcl__json_value *nodes = realloc(p->nodes, cap * sizeof *nodes);
        if (!nodes) return no_memory(p);
        p->nodes = nodes, p->cap = cap;
    }
    if (count) memcpy(p->nodes + p->used, p->stack + from, count * sizeof *p->nodes);
    p->used += count;
    p->top = from;
    return MPCL_OK;
}

/* The children on the stack above `base`, now complete, become the children
 * of the container stack[base - 1]. */
static mpcl_status close_container(parser *p, size_t base) {
    p->stack[base - 1].u.first = p->used;
    p->stack[base - 1].n = (uint32_t)(p->top - base);
    return move_to_nodes(p, base);
}

static int by_key(const void *a, const void *b) {
    const mpcl__json_value *const *x = a, *const *y = b;
    int c = strcmp((*x)->key, (*y)->key);
    return c ? c : (*x < *y ? -1 : 1);
}

/* The object's members, sorted by key (and by place for equal keys), so that
 * a repeated key is found in n log n even in a hostile object. */
static mpcl_status check_duplicates(const parser *p, const mpcl__json_value *obj) {
    if (obj->n < 2) return MPCL_OK;
    const mpcl__json_value **sorted = malloc(obj->n * sizeof *sorted);
    if (!sorted) return no_memory(p);
    for (size_t k = 0; k < obj->n; k++) sorted[k] = &p->nodes[obj->u.first + k];
    qsort(sorted, obj->n, sizeof *sorted, by_key);
    mpcl_status st = MPCL_OK;
    for (size_t k = 1; k < obj->n && st == MPCL_OK; k++)
        if (strcmp(sorted[k - 1]->key, sorted[k]->key) == 0)
            st = fail_node(p, sorted[k], "duplicate key \"%.200s\" (first at line %u, column %u)",
                           sorted[k]->key, sorted[k - 1]->line, sorted[k - 1]->column);
    free(sorted);
    return st;
}

/* One member of an object, at its key: the value is placed where the key is. */
static mpcl_status parse_member(parser *p) {
    if (peek(p) != '"') FAIL_EXPECTED(p, "a string key");
    uint32_t line = (uint32_t)p->line, column = (uint32_t)(p->i - p->line_start + 1);
    const char *key;
    size_t len;
    mpcl_status st = parse_string(p, &key, &len);
    if (st != MPCL_OK) return st;
    if (peek(p) != ':') FAIL_EXPECTED(p, "':' after a key");
    p->i++;
    if ((st = parse_value(p)) != MPCL_OK) return st;
    mpcl__json_value *m = &p->stack[p->top - 1];
    m->key = key, m->line = line, m->column = column;
    return MPCL_OK;
}

/* At '[' or '{': the elements or members, then the closing bracket. */
static mpcl_status parse_container(parser *p, bool object) {
    size_t self = p->top - 1, base = p->top;
    char close = object ? '}' : ']';
    p->stack[self].type = object ? MPCL__JSON_OBJECT : MPCL__JSON_ARRAY;
    if (++p->depth > MPCL__JSON_MAX_DEPTH)
        return FAIL(p, p->i, "nesting deeper than %d levels", MPCL__JSON_MAX_DEPTH);
    p->i++;
    if (peek(p) != close) {
        for (;;) {
            mpcl_status st = object ? parse_member(p) : parse_value(p);
            if (st != MPCL_OK) return st;
            char c = peek(p);
            if (c == close) break;
            if (c != ',')
                FAIL_EXPECTED(p, object ? "',' or '}' after an object member"
                                        : "',' or ']' after an array element");
            p->i++;
            if (peek(p) == close) return FAIL(p, p->i, "trailing comma before '%c'", close);
        }
    }
    p->i++;
    p->depth--;
    mpcl_status st = close_container(p, base);
    if (st == MPCL_OK && object) st = check_duplicates(p, &p->stack[self]);
    return st;
}

/* One value, pushed on the stack. */
static mpcl_status parse_value(parser *p) {
    char c = peek(p);
    mpcl_status st = push(p);
    if (st != MPCL_OK) return st;
    mpcl__json_value *v = &p->stack[p->top - 1];
    if (p->i >= p->n) FAIL_EXPECTED(p, "a value");
    if (c == '{' || c == '[') return parse_container(p, c == '{');
    if (c == '"') {
        v->type = MPCL__JSON_STRING;
        size_t len = 0;
        st = parse_string(p, &v->u.text, &len);
        v->n = (uint32_t)len;
        return st;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
    return parse_word(p, v);
}

/* ---- documents ---- */

void mpcl__json_free(mpcl__json *doc) {
    if (!doc) return;
    free(doc->text);
    free(doc->nodes);
    free(doc);
}

/* The whole text: one value and blanks around it. The root goes last into
 * the node array; then the children's indices become pointers and each
 * number's text is NUL-terminated. */
static mpcl_status parse_document(parser *p) {
    mpcl_status st = parse_value(p);
    skip_ws(p);
    if (st == MPCL_OK && p->i < p->n) {
        char fb[16];
        st = FAIL(p, p->i, "%s after the value (only blanks may follow it)", found(p, fb, 16));
    }
    if (st == MPCL_OK) st = move_to_nodes(p, 0);
    if (st != MPCL_OK) return st;
    for (size_t k = 0; k < p->used; k++) {
        mpcl__json_value *v = &p->nodes[k];
        if (v->type == MPCL__JSON_ARRAY || v->type == MPCL__JSON_OBJECT)
            v->u.kids = p->nodes + v->u.first;
        else if (v->type == MPCL__JSON_NUMBER)
            p->s[v->u.text - p->s + v->n] = '\0';
    }
    return MPCL_OK;
}

/* Over the caller's limit, or over 4 GiB (the nodes' sizes are 32-bit). */
static mpcl_status too_big(const char *name, size_t size, size_t max_bytes) {
    if (max_bytes > UINT32_MAX) max_bytes = UINT32_MAX;
    const char *what = "text is %zu bytes, over the limit of %zu";
    if (name) return mpcl__format_error(name, __FILE__, __LINE__, what, size, max_bytes);
    return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, what, size, max_bytes);
}

mpcl_status mpcl__json_parse(const char *name, const char *text, size_t size, size_t max_bytes,
                             mpcl__json **out) {
    *out = NULL;
    if (size > max_bytes || size > UINT32_MAX) return too_big(name, size, max_bytes);
    parser p = {.name = name, .n = size, .line = 1};
    p.s = malloc(size + 1);
    mpcl__json *doc = calloc(1, sizeof *doc);
    mpcl_status st = p.s && doc ? MPCL_OK : no_memory(&p);
    if (st == MPCL_OK) {
        if (size) memcpy(p.s, text, size);
        p.s[size] = '\0';
        st = parse_document(&p);
    }
    free(p.stack);
    if (st != MPCL_OK) {
        free(p.s);
        free(p.nodes);
        free(doc);
        return st;
    }
    doc->text = p.s, doc->nodes = p.nodes, doc->count = p.used;
    *out = doc;
    return MPCL_OK;
}

mpcl_status mpcl__json_read_file(const char *path, size_t max_bytes, mpcl__json **out) {
    *out = NULL;
    char *text;
    size_t size;
    if (max_bytes > UINT32_MAX) max_bytes = UINT32_MAX;
    TRY(mpcl__read_regular(path, max_bytes, &text, &size));
    mpcl_status st = mpcl__json_parse(path, text, size, max_bytes, out);
    free(text);
    return st;
}

/* ---- accessors ---- */

const mpcl__json_value *mpcl__json_root(const mpcl__json *doc) {
    return &doc->nodes[doc->count - 1];
}

mpcl__json_type mpcl__json_type_of(const mpcl__json_value *v) {
    return v ? (mpcl__json_type)v->type : MPCL__JSON_NULL;
}

const char *mpcl__json_type_name(mpcl__json_type t) {
    static const char *const NAMES[] = {"null",     "a boolean", "a number",
                                        "a string", "an array",  "an object"};
    return (unsigned)t < sizeof NAMES / sizeof NAMES[0] ? NAMES[t] : "?";
}

unsigned mpcl__json_line(const mpcl__json_value *v) {
    return v ? v->line : 0;
}

unsigned mpcl__json_column(const mpcl__json_value *v) {
    return v ? v->column : 0;
}

static bool is_container(const mpcl__json_value *v) {
    return v && (v->type == MPCL__JSON_ARRAY || v->type == MPCL__JSON_OBJECT);
}

const mpcl__json_value *mpcl__json_member(const mpcl__json_value *v, const char *key) {
    if (!v || v->type != MPCL__JSON_OBJECT) return NULL;
    for (size_t k = 0; k < v->n; k++)
        if (strcmp(v->u.kids[k].key, key) == 0) return &v->u.kids[k];
    return NULL;
}

size_t mpcl__json_count(const mpcl__json_value *v) {
    return is_container(v) ? v->n : 0;
}

const mpcl__json_value *mpcl__json_at(const mpcl__json_value *v, size_t i) {
    return is_container(v) && i < v->n ? &v->u.kids[i] : NULL;
}

const char *mpcl__json_key_at(const mpcl__json_value *v, size_t i) {
    return v && v->type == MPCL__JSON_OBJECT && i < v->n ? v->u.kids[i].key : NULL;
}

const char *mpcl__json_number_text(const mpcl__json_value *v) {
    return v && v->type == MPCL__JSON_NUMBER ? v->u.text : NULL;
}

double mpcl__json_number(const mpcl__json_value *v) {
    double num = 0.0;
    /* Checked when parsed: this cannot fail. */
    if (v && v->type == MPCL__JSON_NUMBER) mpcl_parse_real(v->u.text, &num);
    return num;
}

const char *mpcl__json_string(const mpcl__json_value *v, size_t *len) {
    if (!v || v->type != MPCL__JSON_STRING) return NULL;
    if (len) *len = v->n;
    return v->u.text;
}

bool mpcl__json_bool(const mpcl__json_value *v) {
    return v && v->type == MPCL__JSON_BOOL && v->n;
}
