/* Token data (include/mpcl/tokens.h): text read byte by byte from a file or
 * a folder, llm.c's token files, the stream on the device and its windows.
 * File sizes are checked before anything is allocated, so memory follows
 * the data really there rather than a header's claim. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/fileio.h"
#include "io/io.h"
#include "mpcl/tokens.h"

#define BIN_HEADER_INTS (MPCL_TOKENS_BIN_HEADER_BYTES / 4)
#define MAX_CONTEXT 2147483646u /* context + 1 fits an int32 */

struct mpcl_tokens {
    char *name;
    uint16_t *ids;
    size_t count, vocab;
    char **files; /* the files read, in order */
    size_t file_count;
};

struct mpcl_token_stream {
    mpcl_tensor *ids; /* [count, 2] u8: each token's two bytes, little-endian */
    char *name;
    size_t count, eval_count, context, vocab;
};

/* ---- the host stream ---- */

static mpcl_status tokens_new(const char *name, mpcl_tokens **out) {
    mpcl_tokens *t = calloc(1, sizeof *t);
    if (t) t->name = strdup(name);
    if (!t || !t->name) {
        free(t);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': tokens", name);
    }
    *out = t;
    return MPCL_OK;
}

void mpcl_tokens_destroy(mpcl_tokens *t) {
    if (!t) return;
    for (size_t i = 0; i < t->file_count; i++) free(t->files[i]);
    free(t->files);
    free(t->ids);
    free(t->name);
    free(t);
}

size_t mpcl_tokens_count(const mpcl_tokens *t) {
    return t->count;
}
size_t mpcl_tokens_vocab(const mpcl_tokens *t) {
    return t->vocab;
}
const uint16_t *mpcl_tokens_ids(const mpcl_tokens *t) {
    return t->ids;
}
const char *mpcl_tokens_name(const mpcl_tokens *t) {
    return t->name;
}
size_t mpcl_tokens_file_count(const mpcl_tokens *t) {
    return t->file_count;
}
const char *mpcl_tokens_file(const mpcl_tokens *t, size_t i) {
    return i < t->file_count ? t->files[i] : NULL;
}

/* Hands t out on success, destroys it on failure. */
static mpcl_status finish(mpcl_status st, mpcl_tokens *t, mpcl_tokens **out) {
    if (st == MPCL_OK)
        *out = t;
    else
        mpcl_tokens_destroy(t);
    return st;
}

/* t->ids for count tokens. */
static mpcl_status alloc_ids(mpcl_tokens *t, size_t count) {
    t->ids = count <= SIZE_MAX / sizeof *t->ids ? malloc(count * sizeof *t->ids) : NULL;
    if (!t->ids)
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': %zu tokens", t->name, count);
    t->count = count;
    return MPCL_OK;
}

static mpcl_status check_vocab(const char *op, size_t vocab) {
    if (vocab < 1 || vocab > MPCL_TOKENS_MAX_VOCAB)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "%s: vocabulary %zu is outside 1..%d (tokens are uint16)", op, vocab,
                          MPCL_TOKENS_MAX_VOCAB);
    return MPCL_OK;
}

/* Every id below vocab; the first one that is not is named with its place. */
static mpcl_status check_ids(const char *name, const uint16_t *ids, size_t count, size_t vocab) {
    for (size_t i = 0; i < count; i++)
        if (ids[i] >= vocab)
            return mpcl__format_error(name, __FILE__, __LINE__,
                                      "token %zu (of %zu) is %u, at or above the vocabulary "
                                      "size %zu",
                                      i, count, (unsigned)ids[i], vocab);
    return MPCL_OK;
}

mpcl_status mpcl_tokens_from_memory(const char *name, const uint16_t *ids, size_t count,
                                    size_t vocab, mpcl_tokens **out) {
    static const char op[] = "mpcl_tokens_from_memory";
    if (!out) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: out is NULL", op);
    *out = NULL;
    if (!name) name = "tokens";
    if (!ids || count == 0)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: '%s' has no tokens (%s)", op, name,
                          ids ? "count 0" : "ids is NULL");
    TRY(check_vocab(op, vocab));
    TRY(check_ids(name, ids, count, vocab));
    mpcl_tokens *t;
    TRY(tokens_new(name, &t));
    t->vocab = vocab;
    mpcl_status st = alloc_ids(t, count);
    if (st == MPCL_OK) memcpy(t->ids, ids, count * sizeof *t->ids);
    return finish(st, t, out);
}

/* ---- text ---- */

/* Records path as read. */
static mpcl_status add_file(mpcl_tokens *t, const char *path) {
    char **files = realloc(t->files, (t->file_count + 1) * sizeof *files);
    if (files) t->files = files;
    char *copy = files ? strdup(path) : NULL;
    if (!copy) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': its name", path);
    t->files[t->file_count++] = copy;
    return MPCL_OK;
}

/* The size of the open file f at path. */
static mpcl_status file_size(const char *path, FILE *f, uint64_t *size) {
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0)
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    *size = (uint64_t)sb.st_size;
    return MPCL_OK;
}

static mpcl_status short_read(const char *path, FILE *f) {
    return MPCL_ERROR(NULL, MPCL_ERR_IO, "reading '%s': %s", path,
                      ferror(f) ? strerror(errno) : "the file shrank while it was read");
}

/* Appends the bytes of the open file f at path to t's ids, one token each:
 * read into the new ids' memory, then widened in place from the end (token
 * i's two bytes lie at or after byte i). */
static mpcl_status append_bytes(mpcl_tokens *t, const char *path, FILE *f) {
    uint64_t size;
    TRY(file_size(path, f, &size));
    if (size > SIZE_MAX / 4 - t->count) /* the ids' bytes, with room to spare */
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': %llu bytes more than %zu", path,
                          (unsigned long long)size, t->count);
    size_t n = (size_t)size;
    uint16_t *ids = realloc(t->ids, (t->count + n) * sizeof *ids + 1);
    if (!ids) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': %zu bytes of text", path, n);
    t->ids = ids;
    unsigned char *raw = (unsigned char *)(ids + t->count);
    if (fread(raw, 1, n, f) != n) return short_read(path, f);
    for (size_t i = n; i-- > 0;) ids[t->count + i] = raw[i];
    t->count += n;
    return add_file(t, path);
}

/* Appends the text file at path (never waiting on a FIFO or a device). */
static mpcl_status append_file(mpcl_tokens *t, const char *path) {
    FILE *f;
    TRY(mpcl__open_regular(path, &f));
    mpcl_status st = append_bytes(t, path, f);
    fclose(f);
    return st;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* The folder's entries that are text files: regular by lstat (no link,
 * FIFO or folder), not named *.dat; their full paths, unsorted. */
static mpcl_status list_text_files(const char *dir, char ***out, size_t *count) {
    DIR *d = opendir(dir);
    if (!d)
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot open folder '%s': %s", dir, strerror(errno));
    mpcl_status st = MPCL_OK;
    char **paths = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (mpcl__has_suffix(e->d_name, ".dat")) continue;
        char *path = join(dir, e->d_name);
        char **grown = path ? realloc(paths, (n + 1) * sizeof *paths) : NULL;
        if (!grown) {
            free(path);
            st = MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "listing folder '%s'", dir);
            break;
        }
        paths = grown;
        struct stat sb;
        if (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode))
            paths[n++] = path;
        else
            free(path);
    }
    closedir(d);
    *out = paths;
    *count = n;
    return st;
}

/* The folder's text files, in the byte order of their names. */
static mpcl_status append_folder(mpcl_tokens *t, const char *dir) {
    char **paths = NULL;
    size_t n = 0;
    mpcl_status st = list_text_files(dir, &paths, &n);
    if (st == MPCL_OK && n == 0)
        st = mpcl__format_error(dir, __FILE__, __LINE__,
                                "the folder holds no text file (a regular file whose name does "
                                "not end in .dat)");
    if (st == MPCL_OK) qsort(paths, n, sizeof *paths, compare_names);
    for (size_t i = 0; i < n && st == MPCL_OK; i++) st = append_file(t, paths[i]);
    for (size_t i = 0; i < n; i++) free(paths[i]);
    free(paths);
    return st;
}

mpcl_status mpcl_tokens_read_text(const char *path, mpcl_tokens **out) {
    if (!out) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_tokens_read_text: out is NULL");
    *out = NULL;
    if (!path) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_tokens_read_text: path is NULL");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    mpcl_tokens *t;
    TRY(tokens_new(path, &t));
    t->vocab = MPCL_TOKENS_BYTE_VOCAB;
    bool folder = S_ISDIR(sb.st_mode);
    mpcl_status st = folder ? append_folder(t, path) : append_file(t, path);
    if (st == MPCL_OK && t->count == 0)
        st = folder ? mpcl__format_error(path, __FILE__, __LINE__,
                                         "its %zu text files are all empty: a corpus needs at "
                                         "least one byte",
                                         t->file_count)
                    : mpcl__format_error(path, __FILE__, __LINE__,
                                         "the file is empty: a corpus needs at least one byte");
    return finish(st, t, out);
}

/* ---- llm.c token files ---- */

static int32_t le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* The token count of a file of `size` bytes whose first bytes are header
 * (its first min(size, header bytes)), after every check of the header
 * against the size. */
static mpcl_status bin_count(const char *name, const unsigned char *header, uint64_t size,
                             size_t *count) {
    const uint64_t hb = MPCL_TOKENS_BIN_HEADER_BYTES;
    if (size < hb)
        return mpcl__format_error(name, __FILE__, __LINE__,
                                  "the file holds %llu bytes, fewer than the %llu-byte header of "
                                  "an llm.c token file",
                                  (unsigned long long)size, (unsigned long long)hb);
    int32_t magic = le32(header), version = le32(header + 4), n = le32(header + 8);
    if (magic != MPCL_TOKENS_BIN_MAGIC)
        return mpcl__format_error(name, __FILE__, __LINE__,
                                  "magic number %ld, expected %d (not an llm.c token file)",
                                  (long)magic, MPCL_TOKENS_BIN_MAGIC);
    if (version != MPCL_TOKENS_BIN_VERSION)
        return mpcl__format_error(name, __FILE__, __LINE__,
                                  "version %ld, expected %d (uint16 tokens)", (long)version,
                                  MPCL_TOKENS_BIN_VERSION);
    if (n < 1)
        return mpcl__format_error(name, __FILE__, __LINE__,
                                  "header says %ld tokens: a token file holds at least one",
                                  (long)n);
    uint64_t body = size - hb, want = 2 * (uint64_t)n;
    if (body != want)
        return mpcl__format_error(name, __FILE__, __LINE__,
                                  "header says %ld tokens, the file holds %llu%s (2 bytes each "
                                  "after the %llu-byte header)",
                                  (long)n, (unsigned long long)(body / 2),
                                  body % 2 ? " and an odd byte" : "", (unsigned long long)hb);
    *count = (size_t)n;
    return MPCL_OK;
}

/* ids[i] from the little-endian bytes raw[2i], raw[2i + 1]; raw may be ids. */
static void decode_le16(uint16_t *ids, const unsigned char *raw, size_t count) {
    for (size_t i = 0; i < count; i++)
        ids[i] = (uint16_t)(raw[2 * i] | (unsigned)raw[2 * i + 1] << 8);
}

static mpcl_status read_bin(mpcl_tokens *t, const char *path, FILE *f) {
    unsigned char header[MPCL_TOKENS_BIN_HEADER_BYTES];
    uint64_t size;
    size_t count;
    TRY(file_size(path, f, &size));
    size_t head = size < sizeof header ? (size_t)size : sizeof header;
    if (fread(header, 1, head, f) != head) return short_read(path, f);
    TRY(bin_count(path, header, size, &count));
    TRY(alloc_ids(t, count));
    if (fread(t->ids, 2, count, f) != count) return short_read(path, f);
    decode_le16(t->ids, (const unsigned char *)t->ids, count);
    TRY(check_ids(path, t->ids, count, t->vocab));
    return add_file(t, path);
}

mpcl_status mpcl_tokens_read_bin(const char *path, size_t vocab, mpcl_tokens **out) {
    static const char op[] = "mpcl_tokens_read_bin";
    if (!out) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: out is NULL", op);
    *out = NULL;
    if (!path) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: path is NULL", op);
    TRY(check_vocab(op, vocab));
    FILE *f;
    TRY(mpcl__open_regular(path, &f));
    mpcl_tokens *t;
    mpcl_status st = tokens_new(path, &t);
    if (st == MPCL_OK) {
        t->vocab = vocab;
        st = finish(read_bin(t, path, f), t, out);
    }
    fclose(f);
    return st;
}

mpcl_status mpcl__tokens_bin_parse(const char *name, const void *bytes, size_t size, size_t vocab,
                                   mpcl_tokens **out) {
    *out = NULL;
    TRY(check_vocab("mpcl__tokens_bin_parse", vocab));
    size_t count;
    TRY(bin_count(name, bytes, size, &count));
    mpcl_tokens *t;
    TRY(tokens_new(name, &t));
    t->vocab = vocab;
    mpcl_status st = alloc_ids(t, count);
    if (st == MPCL_OK) {
        decode_le16(t->ids, (const unsigned char *)bytes + MPCL_TOKENS_BIN_HEADER_BYTES, count);
        st = check_ids(name, t->ids, count, vocab);
    }
    return finish(st, t, out);
}

/* ---- the stream on the device ---- */

/* The parts' sizes for a window of context + 1 tokens: each one that is
 * there must hold a window. */
static mpcl_status split(const mpcl_tokens *t, size_t context, double eval_fraction,
                         size_t *eval_count) {
    static const char op[] = "mpcl_token_stream_create";
    if (context < 1 || context > MAX_CONTEXT)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: context %zu is outside 1..%u", op,
                          context, MAX_CONTEXT);
    if (!(eval_fraction >= 0 && eval_fraction < 1))
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "%s: evaluation fraction %g is outside [0, 1)", op, eval_fraction);
    size_t n = t->count, window = context + 1;
    size_t held = (size_t)floor((double)n * eval_fraction);
    if (held > n) held = n; /* double rounding near the top */
    if (n - held < window)
        return mpcl__format_error(t->name, __FILE__, __LINE__,
                                  "the training part holds %zu tokens (%zu in all, %zu held out), "
                                  "fewer than one window of %zu (context %zu + 1)",
                                  n - held, n, held, window, context);
    if (eval_fraction > 0 && held < window)
        return mpcl__format_error(t->name, __FILE__, __LINE__,
                                  "the held-out part holds %zu tokens (fraction %g of %zu), "
                                  "fewer than one window of %zu (context %zu + 1)",
                                  held, eval_fraction, n, window, context);
    *eval_count = held;
    return MPCL_OK;
}

/* The ids on the device, two little-endian bytes each. */
static mpcl_status upload(mpcl_context *ctx, const mpcl_tokens *t, mpcl_tensor **out) {
    size_t n = t->count;
    unsigned char *bytes = malloc(2 * n);
    if (!bytes)
        return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "'%s': staging %zu tokens", t->name, n);
    for (size_t i = 0; i < n; i++) {
        bytes[2 * i] = (unsigned char)(t->ids[i] & 0xff);
        bytes[2 * i + 1] = (unsigned char)(t->ids[i] >> 8);
    }
    mpcl_status st = mpcl_tensor_create(ctx, MPCL_DTYPE_U8, n, 2, out);
    if (st == MPCL_OK) st = mpcl_tensor_upload_raw(*out, bytes, 2 * n);
    free(bytes);
    return st;
}

mpcl_status mpcl_token_stream_create(mpcl_context *ctx, const mpcl_tokens *t, size_t context,
                                     double eval_fraction, mpcl_token_stream **out) {
    static const char op[] = "mpcl_token_stream_create";
    if (!out) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: out is NULL", op);
    *out = NULL;
    if (!ctx || !t)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: %s is NULL", op, ctx ? "tokens" : "ctx");
    size_t eval_count = 0;
    TRY(split(t, context, eval_fraction, &eval_count));
    mpcl_token_stream *s = calloc(1, sizeof *s);
    if (s) s->name = strdup(t->name);
    if (!s || !s->name) {
        free(s);
        return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "%s", op);
    }
    s->count = t->count;
    s->eval_count = eval_count;
    s->context = context;
    s->vocab = t->vocab;
    mpcl_status st = upload(ctx, t, &s->ids);
    if (st == MPCL_OK)
        *out = s;
    else
        mpcl_token_stream_destroy(s);
    return st;
}

void mpcl_token_stream_destroy(mpcl_token_stream *s) {
    if (!s) return;
    mpcl_tensor_destroy(s->ids);
    free(s->name);
    free(s);
}

size_t mpcl_token_stream_context(const mpcl_token_stream *s) {
    return s->context;
}
size_t mpcl_token_stream_vocab(const mpcl_token_stream *s) {
    return s->vocab;
}
size_t mpcl_token_stream_count(const mpcl_token_stream *s, mpcl_token_part part) {
    return part == MPCL_TOKENS_EVAL ? s->eval_count : s->count - s->eval_count;
}
size_t mpcl_token_stream_first(const mpcl_token_stream *s, mpcl_token_part part) {
    return part == MPCL_TOKENS_EVAL ? s->count - s->eval_count : 0;
}

/* The high 64 bits of a * b, in 32-bit halves. */
static uint64_t mul_hi64(uint64_t a, uint64_t b) {
    uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p10 = a1 * b0, p01 = a0 * b1, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (uint32_t)p10 + (uint32_t)p01;
    return p11 + (p10 >> 32) + (p01 >> 32) + (mid >> 32);
}

uint64_t mpcl_token_window_start(uint64_t seed, uint64_t step, uint64_t b, uint64_t starts) {
    return mul_hi64(mpcl__counter_draw(mpcl__counter_key(seed, step), b), starts);
}

static mpcl_status check_windows(mpcl_context *ctx, const mpcl_token_stream *s,
                                 mpcl_token_part part, const mpcl_tensor *inputs,
                                 const mpcl_tensor *targets) {
    static const char op[] = "mpcl_token_stream_windows";
    if (!s) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: the stream is NULL", op);
    if (part != MPCL_TOKENS_TRAIN && part != MPCL_TOKENS_EVAL)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: unknown part %d", op, (int)part);
    if (mpcl_token_stream_count(s, part) == 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "%s: '%s' has no held-out part (evaluation fraction 0)", op, s->name);
    TRY(mpcl__check_present(ctx, inputs, op, "inputs"));
    TRY(mpcl__check_present(ctx, targets, op, "targets"));
    TRY(mpcl__check_dtype(ctx, inputs, MPCL_DTYPE_I32, op, "inputs"));
    TRY(mpcl__check_dtype(ctx, targets, MPCL_DTYPE_I32, op, "targets"));
    TRY(mpcl__check_shape(ctx, inputs, inputs->rows, s->context, op, "inputs"));
    TRY(mpcl__check_shape(ctx, targets, inputs->rows, s->context, op, "targets"));
    return mpcl__check_count(ctx, inputs, op);
}

mpcl_status mpcl_token_stream_windows(mpcl_context *ctx, const mpcl_token_stream *s,
                                      mpcl_token_part part, uint64_t seed, uint64_t step,
                                      mpcl_tensor *inputs, mpcl_tensor *targets) {
    return mpcl_token_stream_windows_at(ctx, s, part, seed, step, 0, inputs, targets);
}

mpcl_status mpcl_token_stream_windows_at(mpcl_context *ctx, const mpcl_token_stream *s,
                                         mpcl_token_part part, uint64_t seed, uint64_t step,
                                         uint64_t first_window, mpcl_tensor *inputs,
                                         mpcl_tensor *targets) {
    TRY(check_windows(ctx, s, part, inputs, targets));
    static const char name[] = "mpcl_token_windows";
    cl_kernel k;
    TRY(mpcl__kernel(ctx, MPCL_DTYPE_F32, name, &k));
    cl_ulong first = mpcl_token_stream_first(s, part);
    cl_ulong starts = mpcl_token_stream_count(s, part) - s->context;
    cl_ulong key = mpcl__counter_key(seed, step);
    cl_uint T = (cl_uint)s->context, B = (cl_uint)inputs->rows;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(inputs->mem), MPCL_ARG(targets->mem),
                       MPCL_ARG(s->ids->mem), MPCL_ARG(first), MPCL_ARG(starts), MPCL_ARG(key),
                       MPCL_ARG(T), MPCL_ARG(B), MPCL_ARG(first_window), MPCL_ARGS_END));
    return mpcl__launch_2d(ctx, k, name, T, B, NULL);
}
