/* NPY files: a reader that checks the preamble, parses the header dict
 * strictly and checks the data's length against the shape before it
 * allocates anything for them. See include/mpcl/npy.h. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/fileio.h"
#include "io/io.h"
#include "mpcl/npy.h"
#include "mpcl/number.h"

typedef unsigned long long ull;

static const struct {
    const char *name;
    size_t size;
} DTYPES[] = {
#define MPCL_NPY_DTYPE_ROW_(name, text, size) {text, size},
    MPCL_NPY_DTYPE_MAP(MPCL_NPY_DTYPE_ROW_)
#undef MPCL_NPY_DTYPE_ROW_
};

const char *mpcl_npy_dtype_name(mpcl_npy_dtype dtype) {
    return (unsigned)dtype < MPCL_NPY_DTYPE_COUNT ? DTYPES[dtype].name : NULL;
}

size_t mpcl_npy_dtype_size(mpcl_npy_dtype dtype) {
    return (unsigned)dtype < MPCL_NPY_DTYPE_COUNT ? DTYPES[dtype].size : 0;
}

struct mpcl_npy {
    char *path;
    mpcl_npy_dtype dtype;
    size_t ndim;
    size_t shape[MPCL_NPY_MAX_DIMS];
    size_t count, cols, bytes;
    void *data;
};

void mpcl_npy_destroy(mpcl_npy *a) {
    if (!a) return;
    free(a->path);
    free(a->data);
    free(a);
}

/* ---- messages ---- */

/* The file is the variable `path` where a check fails. */
#define FMT_FAIL(...) mpcl__format_error(path, __FILE__, __LINE__, __VA_ARGS__)

/* "(60000, 784)" as Python writes a tuple (tuple set), or "[3, 0, 7]" as an
 * index. */
static void shape_text(char *buf, size_t cap, const size_t *v, size_t ndim, int tuple) {
    size_t n = (size_t)snprintf(buf, cap, tuple ? "(" : "[");
    for (size_t i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%zu", i ? ", " : "", v[i]);
    if (n < cap) snprintf(buf + n, cap - n, !tuple ? "]" : ndim == 1 ? ",)" : ")");
}

/* "u1, i1, ..., f8": the names the messages offer. */
static const char *dtype_list(void) {
    static char list[128];
    if (!list[0]) {
        size_t n = 0;
        for (int d = 0; d < MPCL_NPY_DTYPE_COUNT; d++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", d ? ", " : "", DTYPES[d].name);
    }
    return list;
}

/* ---- the preamble: magic, version, header length ---- */

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* The longest preamble: magic, version, 4-byte length (2.0 and 3.0). */
#define NPY_PREAMBLE_MAX 12

/* Where the header lies in a file of `size` bytes whose first
 * min(size, NPY_PREAMBLE_MAX) bytes are p: from *start, *len bytes. */
static mpcl_status read_preamble(const char *path, const unsigned char *p, uint64_t size,
                                 size_t *start, size_t *len) {
    if (size < NPY_MAGIC_LEN || memcmp(p, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return FMT_FAIL("not an NPY file (it does not start with \\x93NUMPY)");
    if (size < 8)
        return FMT_FAIL("file is %llu bytes, too short for the NPY version (truncated)", (ull)size);
    unsigned major = p[6], minor = p[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        return FMT_FAIL("NPY format version %u.%u; mpcl reads versions 1.0, 2.0 and 3.0", major,
                        minor);
    size_t len_bytes = major == 1 ? 2 : 4;
    if (size < 8 + len_bytes)
        return FMT_FAIL("file is %llu bytes, too short for the header length (truncated)",
                        (ull)size);
    uint64_t hlen = 0;
    for (size_t i = len_bytes; i-- > 0;) hlen = (hlen << 8) | p[8 + i];
    *start = 8 + len_bytes;
    if (hlen > size - *start)
        return FMT_FAIL(
            "header length %llu runs past the end of the file (%llu bytes follow the "
            "preamble; truncated)",
            (ull)hlen, (ull)(size - *start));
    if (hlen > MPCL_NPY_MAX_HEADER)
        return FMT_FAIL(
            "header length %llu over the limit of %u bytes (mpcl reads plain numeric "
            "arrays, whose headers are short)",
            (ull)hlen, MPCL_NPY_MAX_HEADER);
    *len = (size_t)hlen;
    return MPCL_OK;
}

/* ---- the header dict ---- */

typedef struct hdr {
    const char *path;
    const char *s; /* the header, NUL-terminated */
    size_t n, i;
    size_t start; /* the header's offset in the file, for messages */
} hdr;

#define HDR_FAIL(h, ...) hdr_fail((h), __FILE__, __LINE__, __VA_ARGS__)

static mpcl_status hdr_fail(const hdr *h, const char *file, int line, const char *fmt, ...)
    MPCL_PRINTF(4, 5);
static mpcl_status hdr_fail(const hdr *h, const char *file, int line, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return mpcl__error(NULL, MPCL_ERR_FORMAT, file, line,
                       "'%s': header is not a dict of 'descr', 'fortran_order' and 'shape' at "
                       "header byte %zu (file byte %zu): %s",
                       h->path, h->i, h->start + h->i, what);
}

static void skip_spaces(hdr *h) {
    while (h->i < h->n && h->s[h->i] == ' ') h->i++;
}

/* The character at the cursor after spaces, or 0 at the end. */
static char peek(hdr *h) {
    skip_spaces(h);
    return h->i < h->n ? h->s[h->i] : '\0';
}

static mpcl_status expect(hdr *h, char c, const char *what) {
    if (peek(h) != c) return HDR_FAIL(h, "expected %s", what);
    h->i++;
    return MPCL_OK;
}

/* A quoted string without escapes into buf (cap bytes). */
static mpcl_status parse_string(hdr *h, char *buf, size_t cap, const char *what) {
    char q = peek(h);
    if (q != '\'' && q != '"') return HDR_FAIL(h, "expected %s", what);
    size_t from = ++h->i;
    while (h->i < h->n && h->s[h->i] != q && h->s[h->i] != '\\') h->i++;
    if (h->i >= h->n) return HDR_FAIL(h, "unterminated string");
    if (h->s[h->i] == '\\') return HDR_FAIL(h, "escape in a string");
    size_t len = h->i - from;
    h->i++;
    if (len >= cap) {
        h->i = from;
        return HDR_FAIL(h, "string of %zu bytes, longer than any mpcl reads here", len);
    }
    memcpy(buf, h->s + from, len);
    buf[len] = '\0';
    return MPCL_OK;
}

static int word_at(const hdr *h, const char *w) {
    size_t k = strlen(w);
    return h->n - h->i >= k && memcmp(h->s + h->i, w, k) == 0;
}

static mpcl_status parse_bool(hdr *h, int *out, const char *key) {
    peek(h);
    if (word_at(h, "True") || word_at(h, "False")) {
        *out = h->s[h->i] == 'T';
        h->i += *out ? 4 : 5;
        return MPCL_OK;
    }
    return HDR_FAIL(h, "'%s' is not True or False", key);
}

/* Why a 'descr' whose name is not one of DTYPES is refused, by its kind
 * (the letter after the byte order): "" for kinds without a note. */
static const char *kind_note(char kind) {
    switch (kind) {
    case 'b': return " (bool)";
    case 'c': return " (complex)";
    case 'O': return " (Python objects)";
    case 'S':
    case 'U': return " (strings)";
    case 'M':
    case 'm': return " (dates or times)";
    case 'V': return " (raw bytes or records)";
    default: return "";
    }
}

/* What 'descr' names, or a message saying why mpcl does not read it. */
static mpcl_status descr_dtype(const char *path, const char *descr, mpcl_npy_dtype *out) {
    char order = descr[0];
    const char *name = order ? descr + 1 : descr;
    const char *why = kind_note(*name);
    for (int d = 0; d < MPCL_NPY_DTYPE_COUNT; d++) {
        if (strcmp(name, DTYPES[d].name) != 0) continue;
        if (order == '<' || (order == '|' && DTYPES[d].size == 1)) {
            *out = (mpcl_npy_dtype)d;
            return MPCL_OK;
        }
        why = order == '>'   ? " (big-endian)"
              : order == '=' ? " (native byte order, which a file cannot carry)"
              : order == '|' ? " (no byte order, for a type of more than one byte)"
                             : " (no byte order)";
    }
    return FMT_FAIL("header 'descr' is '%s'%s; mpcl reads little-endian %s", descr, why,
                    dtype_list());
}

/* A whole number at the cursor, digits only (a '-' is read, to be refused
 * by name). */
static mpcl_status parse_dim(hdr *h, size_t index, size_t *out) {
    size_t from = h->i;
    if (h->s[h->i] == '-') h->i++;
    while (h->i < h->n && h->s[h->i] >= '0' && h->s[h->i] <= '9') h->i++;
    char digits[32];
    size_t len = h->i - from;
    if (len >= sizeof digits) len = sizeof digits - 1; /* still too large for size_t */
    memcpy(digits, h->s + from, len);
    digits[len] = '\0';
    uint64_t v;
    mpcl_number_error e = mpcl_parse_uint(digits, SIZE_MAX, &v);
    if (e != MPCL_NUMBER_OK) {
        h->i = from;
        return HDR_FAIL(h, "'shape'[%zu] '%s' %s", index, digits,
                        e == MPCL_NUMBER_EMPTY ? "is not a number" : mpcl_number_error_text(e));
    }
    *out = (size_t)v;
    return MPCL_OK;
}

/* A tuple of whole numbers: "()", "(3,)", "(3, 4)" or "(3, 4,)". */
static mpcl_status parse_shape(hdr *h, size_t *shape, size_t *ndim) {
    mpcl_status st = expect(h, '(', "'shape' to be a tuple, starting with '('");
    *ndim = 0;
    int comma = 1;
    while (st == MPCL_OK && peek(h) != ')') {
        if (!comma) return HDR_FAIL(h, "expected ',' or ')' in 'shape'");
        if (*ndim == MPCL_NPY_MAX_DIMS)
            return HDR_FAIL(h, "'shape' has more than %d dimensions; mpcl reads 1 to %d",
                            MPCL_NPY_MAX_DIMS, MPCL_NPY_MAX_DIMS);
        st = parse_dim(h, *ndim, &shape[*ndim]);
        if (st != MPCL_OK) return st;
        (*ndim)++;
        comma = peek(h) == ',';
        if (comma) h->i++;
    }
    /* "(3)" is the number 3 in Python, not a tuple. */
    if (st == MPCL_OK && *ndim == 1 && !comma)
        return HDR_FAIL(h, "'shape' (n) needs a comma: (n,)");
    if (st == MPCL_OK) h->i++;
    return st;
}

/* What the header says, before it is checked as a whole. */
typedef struct hdr_fields {
    char descr[32];
    int fortran;
    size_t shape[MPCL_NPY_MAX_DIMS], ndim;
    int seen[3]; /* descr, fortran_order, shape */
} hdr_fields;

static const char *const KEYS[3] = {"descr", "fortran_order", "shape"};

static mpcl_status parse_entry(hdr *h, hdr_fields *f) {
    char key[32];
    size_t at = h->i;
    mpcl_status st = parse_string(h, key, sizeof key, "a key in quotes");
    if (st != MPCL_OK) return st;
    int k = 0;
    while (k < 3 && strcmp(key, KEYS[k]) != 0) k++;
    if (k == 3) {
        h->i = at;
        return HDR_FAIL(h, "unknown key '%s'", key);
    }
    if (f->seen[k]) {
        h->i = at;
        return HDR_FAIL(h, "'%s' twice", key);
    }
    f->seen[k] = 1;
    if ((st = expect(h, ':', "':' after the key")) != MPCL_OK) return st;
    switch (k) {
    case 0:
        if (peek(h) == '[')
            return mpcl__format_error(h->path, __FILE__, __LINE__,
                                      "header 'descr' is a list (a structured dtype); mpcl reads "
                                      "little-endian %s",
                                      dtype_list());
        return parse_string(h, f->descr, sizeof f->descr, "'descr' to be a string");
    case 1: return parse_bool(h, &f->fortran, "fortran_order");
    default: return parse_shape(h, f->shape, &f->ndim);
    }
}

/* '{' entries '}', each entry followed by ',' except perhaps the last,
 * then spaces to the final '\n'. */
static mpcl_status parse_dict(hdr *h, hdr_fields *f) {
    mpcl_status st = expect(h, '{', "'{' (an NPY header is a Python dict)");
    int comma = 1;
    while (st == MPCL_OK && peek(h) != '}') {
        if (!comma) return HDR_FAIL(h, "expected ',' or '}'");
        if ((st = parse_entry(h, f)) != MPCL_OK) return st;
        comma = peek(h) == ',';
        if (comma) h->i++;
    }
    if (st != MPCL_OK) return st;
    h->i++;
    skip_spaces(h);
    if (h->i != h->n) return HDR_FAIL(h, "text after the dict");
    return MPCL_OK;
}

/* The header's characters: printable ASCII, and '\n' as the last. */
static mpcl_status check_chars(hdr *h) {
    const char *path = h->path;
    if (h->n == 0 || h->s[h->n - 1] != '\n')
        return FMT_FAIL("header of %zu bytes does not end with '\\n'", h->n);
    for (h->i = 0; h->i + 1 < h->n; h->i++) {
        unsigned char c = (unsigned char)h->s[h->i];
        if (c < 0x20 || c > 0x7e) return HDR_FAIL(h, "byte 0x%02x is not printable ASCII", c);
    }
    h->i = 0;
    h->n--; /* the '\n' */
    return MPCL_OK;
}

/* a's shape (ndim sizes of a->dtype's elements), its element count, row
 * size and bytes, refused when a scalar or too large for size_t. */
static mpcl_status set_shape(const char *path, mpcl_npy *a, size_t ndim, const size_t *shape) {
    if (ndim == 0)
        return FMT_FAIL("header 'shape' is () (a scalar); mpcl reads arrays of 1 to %d dimensions",
                        MPCL_NPY_MAX_DIMS);
    /* The product of the sizes that are not 0, so that neither the count
     * nor the row size overflows whatever shape[0] is. */
    size_t size = DTYPES[a->dtype].size, product = size, empty = 0;
    a->ndim = ndim;
    for (size_t i = 0; i < ndim; i++) {
        a->shape[i] = shape[i];
        if (shape[i] == 0) {
            empty = 1;
        } else if (product > SIZE_MAX / shape[i]) {
            char text[256];
            shape_text(text, sizeof text, shape, ndim, 1);
            return FMT_FAIL("header 'shape' %s of %s holds more bytes than fit in %zu bits", text,
                            DTYPES[a->dtype].name, sizeof(size_t) * 8);
        } else {
            product *= shape[i];
        }
    }
    a->bytes = empty ? 0 : product;
    a->count = a->bytes / size;
    a->cols = 1;
    for (size_t i = 1; i < a->ndim; i++) a->cols *= a->shape[i];
    return MPCL_OK;
}

/* The three keys, each as mpcl reads it, into a: dtype, shape, count and
 * bytes (overflow-checked). */
static mpcl_status check_fields(const char *path, const hdr_fields *f, mpcl_npy *a) {
    for (int k = 0; k < 3; k++)
        if (!f->seen[k]) return FMT_FAIL("header has no '%s'", KEYS[k]);
    mpcl_status st = descr_dtype(path, f->descr, &a->dtype);
    if (st != MPCL_OK) return st;
    if (f->fortran)
        return FMT_FAIL(
            "header 'fortran_order' is True; mpcl reads C-order arrays only "
            "(save numpy.ascontiguousarray(a))");
    return set_shape(path, a, f->ndim, f->shape);
}

/* Parses the header (len bytes at text, which starts at file byte start)
 * into a. */
static mpcl_status parse_header(const char *path, const char *text, size_t len, size_t start,
                                mpcl_npy *a) {
    char *s = malloc(len + 1);
    if (!s) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': header of %zu bytes", path, len);
    memcpy(s, text, len);
    s[len] = '\0';
    hdr h = {path, s, len, 0, start};
    hdr_fields f;
    memset(&f, 0, sizeof f);
    mpcl_status st = check_chars(&h);
    if (st == MPCL_OK) st = parse_dict(&h, &f);
    if (st == MPCL_OK) st = check_fields(path, &f, a);
    free(s);
    return st;
}

/* The data after the header must be exactly what the shape needs. */
static mpcl_status check_data_length(const char *path, const mpcl_npy *a, uint64_t have) {
    if (have == a->bytes) return MPCL_OK;
    char text[256];
    shape_text(text, sizeof text, a->shape, a->ndim, 1);
    if (have < a->bytes)
        return FMT_FAIL("data are %llu bytes, but header 'shape' %s of %s needs %llu (truncated)",
                        (ull)have, text, DTYPES[a->dtype].name, (ull)a->bytes);
    return FMT_FAIL(
        "data are %llu bytes, %llu more than header 'shape' %s of %s needs (the "
        "header lies about the shape, or bytes were appended)",
        (ull)have, (ull)(have - a->bytes), text, DTYPES[a->dtype].name);
}

/* An empty object that knows its path. */
static mpcl_status npy_new(const char *path, mpcl_npy **out) {
    mpcl_npy *a = calloc(1, sizeof *a);
    if (a) a->path = strdup(path);
    if (!a || !a->path) {
        mpcl_npy_destroy(a);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s'", path);
    }
    *out = a;
    return MPCL_OK;
}

/* The data section, once the header is known good and the data's length
 * matches it: 64-byte aligned, at least 64 bytes. */
static mpcl_status alloc_data(mpcl_npy *a) {
    /* aligned_alloc wants a multiple of the alignment. */
    size_t cap = a->bytes > SIZE_MAX - 63 ? 0 : a->bytes ? (a->bytes + 63) & ~(size_t)63 : 64;
    a->data = cap ? aligned_alloc(64, cap) : NULL;
    if (!a->data)
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': %zu bytes of data", a->path,
                          a->bytes);
    return MPCL_OK;
}

mpcl_status mpcl__npy_from_memory(const char *name, const void *data, mpcl_npy_dtype dtype,
                                  size_t ndim, const size_t *shape, mpcl_npy **out) {
    *out = NULL;
    const char *path = name;
    if (!data || !shape || (unsigned)dtype >= MPCL_NPY_DTYPE_COUNT || ndim > MPCL_NPY_MAX_DIMS)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "'%s': %s, dtype %d, %zu dimensions (1 to %d)", path,
                          !data || !shape ? "a NULL data or shape" : "an array of", (int)dtype,
                          ndim, MPCL_NPY_MAX_DIMS);
    mpcl_npy *a = NULL;
    mpcl_status st = npy_new(path, &a);
    if (st != MPCL_OK) return st;
    a->dtype = dtype;
    if ((st = set_shape(path, a, ndim, shape)) == MPCL_OK && (st = alloc_data(a)) == MPCL_OK) {
        memcpy(a->data, data, a->bytes);
        *out = a;
        return MPCL_OK;
    }
    mpcl_npy_destroy(a);
    return st;
}

static mpcl_status host_order(const char *path) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return MPCL_ERROR(NULL, MPCL_ERR_UNSUPPORTED,
                      "'%s': mpcl reads NPY files on little-endian hosts only", path);
#else
    (void)path;
    return MPCL_OK;
#endif
}

/* The checks of a file image of `size` bytes whose preamble and header are
 * at p: the object with everything but its data, and where the data start. */
static mpcl_status parse_front(const char *path, const unsigned char *p, uint64_t size, mpcl_npy *a,
                               size_t *data_start) {
    size_t start, len;
    mpcl_status st = read_preamble(path, p, size, &start, &len);
    if (st != MPCL_OK) return st;
    if ((st = parse_header(path, (const char *)p + start, len, start, a)) != MPCL_OK) return st;
    *data_start = start + len;
    return check_data_length(path, a, size - *data_start);
}

static mpcl_status read_file(const char *path, FILE *f, mpcl_npy *a) {
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0)
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "'%s': %s", path, strerror(errno));
    uint64_t size = (uint64_t)sb.st_size;
    unsigned char pre[NPY_PREAMBLE_MAX];
    size_t got = fread(pre, 1, size < sizeof pre ? (size_t)size : sizeof pre, f);
    if (got != (size < sizeof pre ? size : sizeof pre)) goto short_read;
    size_t start, len, data_start;
    mpcl_status st = read_preamble(path, pre, size, &start, &len);
    if (st != MPCL_OK) return st;
    /* The preamble and the header in one buffer, for parse_front; the
     * preamble read may have run into the header (or past a short one). */
    unsigned char *front = malloc(start + len);
    if (!front) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': header", path);
    memcpy(front, pre, start);
    if (fseeko(f, (off_t)start, SEEK_SET) != 0 || fread(front + start, 1, len, f) != len) {
        free(front);
        goto short_read;
    }
    st = parse_front(path, front, size, a, &data_start);
    free(front);
    if (st == MPCL_OK) st = alloc_data(a);
    if (st != MPCL_OK) return st;
    if (fread(a->data, 1, a->bytes, f) != a->bytes) goto short_read;
    return MPCL_OK;
short_read:
    return MPCL_ERROR(NULL, MPCL_ERR_IO, "reading '%s': %s", path,
                      ferror(f) ? strerror(errno) : "file shrank while being read");
}

mpcl_status mpcl_npy_read(const char *path, mpcl_npy **out) {
    if (!out) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_npy_read: out is NULL");
    *out = NULL;
    if (!path) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_npy_read: path is NULL");
    mpcl_status st = host_order(path);
    FILE *f = NULL;
    if (st == MPCL_OK) st = mpcl__open_regular(path, &f);
    if (st != MPCL_OK) return st;
    mpcl_npy *a = NULL;
    st = npy_new(path, &a);
    if (st == MPCL_OK) st = read_file(path, f, a);
    fclose(f);
    if (st != MPCL_OK) {
        mpcl_npy_destroy(a);
        return st;
    }
    *out = a;
    return MPCL_OK;
}

mpcl_status mpcl__npy_parse(const char *name, const void *bytes, size_t size, mpcl_npy **out) {
    *out = NULL;
    const char *path = name;
    mpcl_status st = host_order(path);
    if (st != MPCL_OK) return st;
    mpcl_npy *a = NULL;
    size_t data_start = 0;
    if ((st = npy_new(path, &a)) == MPCL_OK) st = parse_front(path, bytes, size, a, &data_start);
    if (st == MPCL_OK) st = alloc_data(a);
    if (st != MPCL_OK) {
        mpcl_npy_destroy(a);
        return st;
    }
    if (a->bytes) memcpy(a->data, (const unsigned char *)bytes + data_start, a->bytes);
    *out = a;
    return MPCL_OK;
}

/* ---- accessors ---- */

const char *mpcl_npy_path(const mpcl_npy *a) {
    return a->path;
}

mpcl_npy_dtype mpcl_npy_dtype_of(const mpcl_npy *a) {
    return a->dtype;
}

size_t mpcl_npy_ndim(const mpcl_npy *a) {
    return a->ndim;
}

const size_t *mpcl_npy_shape(const mpcl_npy *a) {
    return a->shape;
}

size_t mpcl_npy_count(const mpcl_npy *a) {
    return a->count;
}

size_t mpcl_npy_rows(const mpcl_npy *a) {
    return a->shape[0];
}

size_t mpcl_npy_cols(const mpcl_npy *a) {
    return a->cols;
}

const void *mpcl_npy_data(const mpcl_npy *a) {
    return a->data;
}

size_t mpcl_npy_bytes(const mpcl_npy *a) {
    return a->bytes;
}

/* ---- finite values ---- */

/* "NaN", "inf" or "-inf" for a non-finite element k of a float array, NULL
 * for a finite one: by the bits, whatever the compiler's float flags. */
static const char *nonfinite(const mpcl_npy *a, size_t k) {
    uint64_t bits, exp, frac, sign;
    switch (a->dtype) {
    case MPCL_NPY_F2: {
        uint16_t v;
        memcpy(&v, (const uint16_t *)a->data + k, sizeof v);
        bits = v, exp = 0x7c00, frac = 0x03ff, sign = 0x8000;
        break;
    }
    case MPCL_NPY_F4: {
        uint32_t v;
        memcpy(&v, (const uint32_t *)a->data + k, sizeof v);
        bits = v, exp = 0x7f800000u, frac = 0x007fffffu, sign = 0x80000000u;
        break;
    }
    case MPCL_NPY_F8:
        memcpy(&bits, (const uint64_t *)a->data + k, sizeof bits);
        exp = 0x7ff0000000000000ull, frac = 0x000fffffffffffffull, sign = 0x8000000000000000ull;
        break;
    default: return NULL;
    }
    if ((bits & exp) != exp) return NULL;
    if (bits & frac) return "NaN";
    return bits & sign ? "-inf" : "inf";
}

mpcl_status mpcl_npy_check_finite(const mpcl_npy *a) {
    const char *path = a->path;
    for (size_t k = 0; k < a->count; k++) {
        const char *what = nonfinite(a, k);
        if (!what) continue;
        size_t row = k / a->cols, col = k % a->cols;
        if (a->ndim == 1) return FMT_FAIL("row %zu is %s; mpcl needs finite values", row, what);
        char where[256] = "";
        if (a->ndim > 2) {
            size_t index[MPCL_NPY_MAX_DIMS], rest = k;
            for (size_t i = a->ndim; i-- > 0;) {
                index[i] = rest % a->shape[i];
                rest /= a->shape[i];
            }
            char text[240];
            shape_text(text, sizeof text, index, a->ndim, 0);
            snprintf(where, sizeof where, " (element %s)", text);
        }
        return FMT_FAIL("row %zu, column %zu%s is %s; mpcl needs finite values", row, col, where,
                        what);
    }
    return MPCL_OK;
}
