/* IDX reader (raw, or gzip through libdeflate whole or zlib's inflate as a stream), batches,
 * and the portable shuffle.
 * Every byte count is checked in 64-bit arithmetic before anything is
 * allocated, so a corrupt header cannot overflow, and memory follows the
 * data that are really there rather than the header's claim (idx_body). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <libdeflate.h>
#include <zlib.h>

#include "runtime/fileio.h"
#include "io/io.h"
#include "mpcl/data.h"
#include "mpcl/half.h"

#define IDX_MAGIC_IMAGES 0x00000803u /* u8, 3 dimensions */
#define IDX_MAGIC_LABELS 0x00000801u /* u8, 1 dimension */
#define PATH_BYTES MPCL__DATA_PATH_BYTES
#define READ_CHUNK (1u << 26) /* avail_out is an unsigned int */
#define PACKAGE_HINT \
    "Debian's dataset-fashion-mnist package provides the default folder " MPCL_DATA_DEFAULT_DIR

mpcl_idx_params mpcl_idx_default_params(void) {
    mpcl_idx_params p = {10};
    return p;
}

/* One open IDX file. gzip is recognised by its 1f 8b magic, not by the name,
 * and decoded with inflate directly rather than gzread: gzread does not
 * notice a member that ends without its CRC trailer when the data happen to
 * end on a read boundary, and a checkpoint of corrupt data must fail.
 * `got` counts the (decompressed) bytes delivered so far, which is what a
 * truncation message reports. */
typedef struct idx_file {
    FILE *fp;
    char path[PATH_BYTES];
    uint64_t size; /* of the file, from fstat: a raw file's data must fit in it */
    uint64_t got;
    int gz;    /* decoding gzip */
    int zinit; /* zs needs inflateEnd */
    int zdone; /* the last member ended with a verified trailer, input exhausted */
    int zcut;  /* the input ended inside a member */
    z_stream zs;
    unsigned char in[1 << 16];
} idx_file;

/* Whether anything is at path (a FIFO or a folder too: those are then
 * named for what they are by mpcl__open_regular, not skipped as absent). */
static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int has_gz_suffix(const char *path) {
    size_t n = strlen(path);
    return n >= 3 && strcmp(path + n - 3, ".gz") == 0;
}

static void idx_close(idx_file *f) {
    if (f->zinit) inflateEnd(&f->zs);
    if (f->fp) fclose(f->fp);
    f->zinit = 0;
    f->fp = NULL;
}

static mpcl_status attach(idx_file *f);

/* Picks <dir>/<name> when it exists, else <dir>/<name>.gz. */
static mpcl_status open_file(idx_file *f, const char *dir, const char *name) {
    char raw[PATH_BYTES - 3]; /* room for ".gz" in f->path */
    int n = snprintf(raw, sizeof raw, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof raw)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "IDX path '%s/%s' is too long", dir, name);
    if (exists(raw)) {
        memcpy(f->path, raw, (size_t)n + 1);
    } else {
        snprintf(f->path, sizeof f->path, "%s.gz", raw);
        if (!exists(f->path))
            return MPCL_ERROR(NULL, MPCL_ERR_IO, "neither '%s' nor '%s' exists (%s)", raw, f->path,
                              PACKAGE_HINT);
    }
    /* Never blocks: a FIFO or a device is refused, named as what it is. */
    mpcl_status st = mpcl__open_regular(f->path, &f->fp);
    if (st != MPCL_OK) return st;
    struct stat sb;
    if (fstat(fileno(f->fp), &sb) != 0)
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot stat '%s': %s", f->path, strerror(errno));
    f->size = (uint64_t)sb.st_size;
    return attach(f);
}

/* An image in memory as an open file (for the fuzz harness): `name` stands
 * for the path, and a ".gz" at its end asks for gzip as on disk. */
static mpcl_status open_mem(idx_file *f, const char *name, const void *data, size_t size) {
    snprintf(f->path, sizeof f->path, "%s", name);
    /* fmemopen refuses size 0 on older C libraries; an empty file reads the same. */
    f->fp = size ? fmemopen((void *)(uintptr_t)data, size, "rb") : fopen("/dev/null", "rb");
    if (!f->fp)
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot open '%s': %s", f->path, strerror(errno));
    f->size = size;
    return attach(f);
}

/* After the open: gzip or raw, from the first two bytes. */
static mpcl_status attach(idx_file *f) {
    size_t have = fread(f->in, 1, 2, f->fp);
    if (ferror(f->fp))
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "reading '%s': %s", f->path, strerror(errno));
    f->gz = have == 2 && f->in[0] == 0x1f && f->in[1] == 0x8b;
    if (has_gz_suffix(f->path) && !f->gz)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                          "'%s': corrupt gzip stream: it does not begin with the gzip magic 1f 8b",
                          f->path);
    f->zs.next_in = f->in;
    f->zs.avail_in = (uInt)have;
    if (f->gz) {
        /* 16 + MAX_WBITS: a gzip wrapper, whose CRC-32 and length inflate checks. */
        if (inflateInit2(&f->zs, 16 + MAX_WBITS) != Z_OK)
            return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': inflateInit2", f->path);
        f->zinit = 1;
    }
    return MPCL_OK;
}

/* open_file, closing what it opened when it fails (a bad gzip magic, for
 * one, is found after the file is open), so that no caller can leak it. */
static mpcl_status idx_open(idx_file *f, const char *dir, const char *name) {
    mpcl_status st = open_file(f, dir, name);
    if (st != MPCL_OK) idx_close(f);
    return st;
}

/* Refills the input buffer; 0 bytes means the end of the file. */
static mpcl_status fill(idx_file *f) {
    size_t r = fread(f->in, 1, sizeof f->in, f->fp);
    if (r == 0 && ferror(f->fp))
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "reading '%s': %s", f->path, strerror(errno));
    f->zs.next_in = f->in;
    f->zs.avail_in = (uInt)r;
    return MPCL_OK;
}

static mpcl_status corrupt(const idx_file *f, const char *why) {
    return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                      "'%s': corrupt gzip stream after %llu decompressed bytes: %s", f->path,
                      (unsigned long long)f->got, why ? why : "inflate failed");
}

/* Reads up to n bytes; a read error or a corrupt gzip stream is a failure, a
 * short count is left to the caller (who knows what was expected). */
static mpcl_status idx_read(idx_file *f, void *buf, uint64_t n, uint64_t *got) {
    unsigned char *p = buf;
    mpcl_status st;
    *got = 0;
    while (*got < n) {
        uint64_t want = n - *got < READ_CHUNK ? n - *got : READ_CHUNK;
        if (f->zs.avail_in == 0 && (st = fill(f)) != MPCL_OK) return st;
        if (!f->gz) {
            /* Raw: hand out the buffered bytes. */
            if (f->zs.avail_in == 0) break;
            size_t k = f->zs.avail_in < want ? f->zs.avail_in : (size_t)want;
            memcpy(p + *got, f->zs.next_in, k);
            f->zs.next_in += k;
            f->zs.avail_in -= (uInt)k;
            *got += k;
            f->got += k;
            continue;
        }
        if (f->zdone) break;
        if (f->zs.avail_in == 0) {
            f->zcut = 1;
            break;
        }
        f->zs.next_out = p + *got;
        f->zs.avail_out = (uInt)want;
        int ret = inflate(&f->zs, Z_NO_FLUSH);
        uint64_t produced = want - f->zs.avail_out;
        *got += produced;
        f->got += produced;
        if (ret == Z_STREAM_END) {
            /* Another member may follow (gzip allows concatenation); anything
             * else after the trailer is damage. */
            if (f->zs.avail_in == 0 && (st = fill(f)) != MPCL_OK) return st;
            if (f->zs.avail_in == 0) {
                f->zdone = 1;
            } else if (f->zs.next_in[0] != 0x1f) {
                return corrupt(f, "bytes after the end of the gzip stream");
            } else if (inflateReset(&f->zs) != Z_OK) {
                return corrupt(f, f->zs.msg);
            }
        } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
            return corrupt(f, f->zs.msg);
        }
    }
    return MPCL_OK;
}

#define GZ_CUT "corrupt or truncated gzip stream (it ends before its end marker)"

static mpcl_status truncated(const idx_file *f, const char *what, uint64_t expected) {
    return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                      "'%s': %s: expected %llu bytes (through the %s), got only %llu", f->path,
                      f->zcut ? GZ_CUT : "truncated file", (unsigned long long)expected, what,
                      (unsigned long long)f->got);
}

static mpcl_status past_end(const idx_file *f, uint64_t expected, uint64_t more) {
    return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                      "'%s': data continues past the %llu bytes its header describes (%llu "
                      "bytes more)",
                      f->path, (unsigned long long)expected, (unsigned long long)more);
}

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* What is wrong with a magic number, field by field: the first two bytes
 * must be zero, the third is the data type (0x08: u8), the fourth the
 * dimension count. */
static mpcl_status bad_magic(const idx_file *f, uint32_t found, uint32_t magic, int ndims) {
    char why[96];
    if (found >> 16)
        snprintf(why, sizeof why, "its first two bytes are 0x%04x, not zero (not an IDX file)",
                 (unsigned)(found >> 16));
    else if ((found >> 8 & 0xff) != 0x08)
        snprintf(why, sizeof why, "data type 0x%02x, not u8 (0x08)", (unsigned)(found >> 8 & 0xff));
    else
        snprintf(why, sizeof why, "dimension count %u, expected %d", (unsigned)(found & 0xff),
                 ndims);
    return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                      "'%s': magic number 0x%08x, expected 0x%08x (IDX u8 with %d dimension%s): %s",
                      f->path, (unsigned)found, (unsigned)magic, ndims, ndims == 1 ? "" : "s", why);
}

/* Reads the magic and the ndims dimensions of an IDX header. */
static mpcl_status idx_header(idx_file *f, uint32_t magic, uint32_t *dims, int ndims) {
    unsigned char h[16];
    uint64_t size = 4 + 4 * (uint64_t)ndims, got;
    mpcl_status st = idx_read(f, h, 4, &got);
    if (st != MPCL_OK) return st;
    if (got < 4) return truncated(f, "4-byte magic number", 4);
    if (be32(h) != magic) return bad_magic(f, be32(h), magic, ndims);
    st = idx_read(f, h + 4, size - 4, &got);
    if (st != MPCL_OK) return st;
    if (got < size - 4) {
        char what[64];
        snprintf(what, sizeof what, "header; dimension %d of %d is cut short", (int)(got / 4),
                 ndims);
        return truncated(f, what, size);
    }
    for (int i = 0; i < ndims; i++) dims[i] = be32(h + 4 + 4 * i);
    return MPCL_OK;
}

/* After exactly hdr + n bytes: insists on the end of the file (which also
 * makes zlib check the gzip CRC). */
static mpcl_status idx_end(idx_file *f, uint64_t n, uint64_t hdr) {
    uint64_t got;
    mpcl_status st;
    /* Read to the end, which verifies the gzip trailer; a damaged deflate
     * stream can also decode into extra bytes before inflate notices, and
     * then the damage is the better report. */
    unsigned char extra[4096];
    uint64_t more = 0;
    do {
        st = idx_read(f, extra, sizeof extra, &got);
        if (st != MPCL_OK) return st;
        more += got;
    } while (got == sizeof extra);
    if (f->zcut)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "'%s': %s after %llu decompressed bytes", f->path,
                          GZ_CUT, (unsigned long long)f->got);
    if (more != 0) return past_end(f, hdr + n, more);
    return MPCL_OK;
}

/* Where a gzip body's buffer starts; it doubles as data arrive. */
#define GZ_FIRST_BYTES ((uint64_t)1 << 20)
/* The whole-file decode below is tried only where the data claimed are at
 * most this many times the file's size (Fashion-MNIST's images: 1.8x,
 * MNIST's: 4.7x). */
#define GZ_WHOLE_MAX_RATIO 64

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* The fast path for a gzip body: libdeflate decodes the whole file at once,
 * 2-3x faster than inflate (the training images were ~0.27 s of CPU, most of
 * mpcl-train's start-up). It needs its output's size up front, so it runs
 * only where everything agrees: the header's claim hdr + n is at most
 * GZ_WHOLE_MAX_RATIO times the file's size (memory follows the file) and
 * equals the gzip trailer's length (mod 2^32); libdeflate then checks the
 * CRC and that length, and the file must be one member that ends where the
 * data do. On success (0) *out holds the n data bytes and the stream is at
 * its verified end. Otherwise (1, *out NULL) the file is where it was: the
 * streaming path that follows reads it as before and reports what is wrong
 * with it; -1 if it could not be put back. */
static int gz_whole(idx_file *f, uint8_t **out, uint64_t n, uint64_t hdr) {
    *out = NULL;
    uint64_t total = hdr + n;
    if (f->size < 18 || total > GZ_WHOLE_MAX_RATIO * f->size || total > SIZE_MAX) return 1;
    long pos = ftell(f->fp);
    unsigned char *in = malloc((size_t)f->size);
    uint8_t *buf = NULL;
    int failed = 1;
    if (pos < 0 || !in || fseek(f->fp, 0, SEEK_SET) != 0 ||
        fread(in, 1, (size_t)f->size, f->fp) != f->size ||
        le32(in + f->size - 4) != (uint32_t)total || !(buf = malloc(total ? (size_t)total : 1)))
        goto done;
    struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
    size_t used_in = 0, used_out = 0;
    if (d &&
        libdeflate_gzip_decompress_ex(d, in, (size_t)f->size, buf, (size_t)total, &used_in,
                                      &used_out) == LIBDEFLATE_SUCCESS &&
        used_in == f->size && used_out == total) {
        memmove(buf, buf + hdr, (size_t)n);
        f->got = total;
        f->zdone = 1; /* idx_end reads nothing more: the trailer was checked */
        *out = buf;
        buf = NULL;
        failed = 0;
    }
    libdeflate_free_decompressor(d);
done:
    free(in);
    free(buf);
    /* Back where the streaming path left off; -1 if that fails. */
    if (failed && pos >= 0 && fseek(f->fp, pos, SEEK_SET) != 0) return -1;
    return failed;
}

/* Allocates and reads exactly n data bytes after a header of hdr bytes, then
 * checks the end of the file. Memory follows the input, never the header's
 * claim alone: a raw file must hold hdr + n bytes (checked against its size
 * before anything is allocated), and a gzip body's buffer starts at
 * GZ_FIRST_BYTES and doubles only as decompressed bytes arrive (gzip's
 * ISIZE trailer is the length mod 2^32 and comes last, so it cannot be
 * trusted up front), so it is at most twice the data that really are there
 * and at most n; deflate expands at most ~1032:1, which bounds that by the
 * compressed size too. The whole-file gzip decode (gz_whole) allocates the
 * claim up front, but only a claim the trailer agrees with and at most
 * GZ_WHOLE_MAX_RATIO times the file's size. *out is NULL after a failure. */
static mpcl_status idx_body(idx_file *f, uint8_t **out, uint64_t n, uint64_t hdr,
                            const char *what) {
    *out = NULL;
    if (!f->gz) {
        uint64_t have = f->size > hdr ? f->size - hdr : 0;
        if (have < n)
            return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                              "'%s': truncated file: expected %llu bytes (through the %s), got "
                              "only %llu",
                              f->path, (unsigned long long)(hdr + n), what,
                              (unsigned long long)f->size);
        if (have > n) return past_end(f, hdr + n, have - n);
    }
    if (f->gz) {
        int whole = gz_whole(f, out, n, hdr);
        if (whole == 0) return MPCL_OK;
        if (whole < 0)
            return MPCL_ERROR(NULL, MPCL_ERR_IO, "reading '%s': %s", f->path, strerror(errno));
    }
    uint64_t cap = f->gz && n > GZ_FIRST_BYTES ? GZ_FIRST_BYTES : n, got = 0, more;
    uint8_t *buf = malloc(cap ? (size_t)cap : 1);
    mpcl_status st = MPCL_OK;
    for (;;) {
        if (!buf) {
            st = MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': cannot allocate %llu bytes of %s",
                            f->path, (unsigned long long)cap, what);
            break;
        }
        if ((st = idx_read(f, buf + got, cap - got, &more)) != MPCL_OK) break;
        got += more;
        if (got < cap) {
            st = truncated(f, what, hdr + n);
            break;
        }
        if (got == n) break;
        cap = 2 * cap < n ? 2 * cap : n;
        uint8_t *grown = realloc(buf, (size_t)cap);
        if (!grown) free(buf);
        buf = grown;
    }
    if (st == MPCL_OK) st = idx_end(f, n, hdr);
    if (st != MPCL_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    return MPCL_OK;
}

/* An images header's dimensions (count, rows, cols), each checked and
 * named with its byte offset: no zero side, at most INT32_MAX images and
 * MPCL_IDX_MAX_BYTES of pixels. Each factor is below 2^32, so the products
 * fit in 64 bits when checked stepwise. */
static mpcl_status check_image_dims(const idx_file *f, const uint32_t *d) {
    static const char *const name[3] = {"image count", "rows", "cols"};
    char why[160];
    uint64_t pixels = (uint64_t)d[1] * d[2];
    int bad = -1;
    for (int i = 0; i < 3 && bad < 0; i++)
        if (d[i] == 0) bad = i;
    if (bad == 0)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                          "'%s': header says zero images (dimension 0, the image count, at byte "
                          "offset 4)",
                          f->path);
    if (bad > 0)
        snprintf(why, sizeof why, "dimension %d (%s, at byte offset %d) is zero", bad, name[bad],
                 4 + 4 * bad);
    else if (d[0] > INT32_MAX)
        snprintf(why, sizeof why,
                 "dimension 0 (the image count, at byte offset 4) is more than %d images",
                 INT32_MAX);
    else if (pixels > MPCL_IDX_MAX_BYTES || (uint64_t)d[0] * pixels > MPCL_IDX_MAX_BYTES ||
             (uint64_t)d[0] * pixels > SIZE_MAX)
        snprintf(why, sizeof why, "%s is more than the limit of %llu bytes of pixels",
                 pixels > MPCL_IDX_MAX_BYTES ? "one image (dimensions 1 x 2)" : "the product",
                 (unsigned long long)MPCL_IDX_MAX_BYTES);
    else
        return MPCL_OK;
    return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                      "'%s': absurd dimensions %u x %u x %u in the header: %s", f->path,
                      (unsigned)d[0], (unsigned)d[1], (unsigned)d[2], why);
}

/* Reads and checks an open images file into ds; the caller closes it. */
static mpcl_status read_images(mpcl_dataset *ds, idx_file *f) {
    uint32_t d[3];
    mpcl_status st = idx_header(f, IDX_MAGIC_IMAGES, d, 3);
    if (st == MPCL_OK) st = check_image_dims(f, d);
    if (st != MPCL_OK) return st;
    mpcl__dataset_set_shape(ds, d[0], MPCL_NPY_U1, 2, (size_t[]){d[1], d[2]});
    snprintf(ds->images_path, sizeof ds->images_path, "%s", f->path);
    return idx_body(f, &ds->x, (uint64_t)d[0] * d[1] * d[2], 16, "pixel data");
}

/* Reads and checks an open labels file into ds, whose images are read. */
static mpcl_status read_labels(mpcl_dataset *ds, idx_file *f, int num_classes) {
    uint32_t count;
    mpcl_status st = idx_header(f, IDX_MAGIC_LABELS, &count, 1);
    if (st != MPCL_OK) return st;
    if (count != ds->count)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                          "'%s' has %u labels (dimension 0 of its header) but '%s' has %zu "
                          "images: the counts must match",
                          f->path, (unsigned)count, ds->images_path, ds->count);
    snprintf(ds->labels_path, sizeof ds->labels_path, "%s", f->path);
    st = idx_body(f, &ds->labels, ds->count, 8, "label data");
    if (st != MPCL_OK) return st;
    int max = 0;
    for (size_t i = 0; i < ds->count; i++) {
        if (num_classes > 0 && ds->labels[i] >= num_classes)
            return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                              "'%s': label %u at index %zu (%sbyte offset %zu) is not below the "
                              "class count %d",
                              f->path, (unsigned)ds->labels[i], i, f->gz ? "decompressed " : "",
                              8 + i, num_classes);
        if (ds->labels[i] > max) max = ds->labels[i];
    }
    ds->num_classes = num_classes > 0 ? num_classes : max + 1;
    return MPCL_OK;
}

/* Opens <dir>/<prefix>-<kind> (or its .gz). */
static mpcl_status open_prefixed(idx_file *f, const char *dir, const char *prefix,
                                 const char *kind) {
    char name[256];
    if (snprintf(name, sizeof name, "%s-%s", prefix, kind) >= (int)sizeof name)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "IDX prefix '%s' is too long", prefix);
    return idx_open(f, dir, name);
}

static mpcl_status load_images(mpcl_dataset *ds, const char *dir, const char *prefix) {
    idx_file f = {0};
    mpcl_status st = open_prefixed(&f, dir, prefix, "images-idx3-ubyte");
    if (st == MPCL_OK) st = read_images(ds, &f);
    idx_close(&f);
    return st;
}

static mpcl_status load_labels(mpcl_dataset *ds, const char *dir, const char *prefix,
                               int num_classes) {
    idx_file f = {0};
    mpcl_status st = open_prefixed(&f, dir, prefix, "labels-idx1-ubyte");
    if (st == MPCL_OK) st = read_labels(ds, &f, num_classes);
    idx_close(&f);
    return st;
}

mpcl_status mpcl__idx_peek(const char *dir, const char *prefix, int num_classes, size_t *count,
                           size_t *features, int *classes) {
    if (!dir) dir = MPCL_DATA_DEFAULT_DIR;
    /* The 64 KiB input buffer needs no zeroing; the fields before it do. */
    idx_file *f = malloc(sizeof *f);
    mpcl_dataset *ds = calloc(1, sizeof *ds);
    if (!f || !ds) {
        free(f);
        free(ds);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "mpcl__idx_peek: file");
    }
    memset(f, 0, offsetof(idx_file, in));
    uint32_t d[3] = {0, 0, 0};
    mpcl_status st = open_prefixed(f, dir, prefix, "images-idx3-ubyte");
    if (st == MPCL_OK) st = idx_header(f, IDX_MAGIC_IMAGES, d, 3);
    if (st == MPCL_OK) st = check_image_dims(f, d);
    idx_close(f);
    ds->count = d[0];
    ds->num_classes = num_classes;
    snprintf(ds->images_path, sizeof ds->images_path, "%s", f->path);
    if (st == MPCL_OK && num_classes == 0) {
        memset(f, 0, offsetof(idx_file, in));
        st = open_prefixed(f, dir, prefix, "labels-idx1-ubyte");
        if (st == MPCL_OK) st = read_labels(ds, f, 0);
        idx_close(f);
    }
    free(f);
    if (st == MPCL_OK) {
        *count = d[0];
        *features = (size_t)d[1] * d[2];
        *classes = ds->num_classes;
    }
    mpcl_dataset_destroy(ds);
    return st;
}

mpcl_status mpcl__idx_load_mem(const char *images_name, const void *images, size_t images_size,
                               const char *labels_name, const void *labels, size_t labels_size,
                               int num_classes, mpcl_dataset **out) {
    *out = NULL;
    mpcl_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "mpcl_idx_load: dataset");
    /* The 64 KiB input buffer needs no zeroing; the fields before it do. */
    idx_file *f = malloc(sizeof *f);
    if (f) memset(f, 0, offsetof(idx_file, in));
    mpcl_status st = f ? open_mem(f, images_name, images, images_size)
                       : MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "mpcl_idx_load: file");
    if (st == MPCL_OK) st = read_images(ds, f);
    if (f) idx_close(f);
    if (st == MPCL_OK) {
        memset(f, 0, offsetof(idx_file, in));
        st = open_mem(f, labels_name, labels, labels_size);
        if (st == MPCL_OK) st = read_labels(ds, f, num_classes);
        idx_close(f);
    }
    free(f);
    if (st != MPCL_OK) {
        mpcl_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return MPCL_OK;
}

mpcl_status mpcl_idx_load_ex(const char *dir, const char *prefix, const mpcl_idx_params *params,
                             mpcl_dataset **out) {
    if (!out) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_idx_load: out is NULL");
    *out = NULL;
    if (!prefix || !*prefix)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_idx_load: prefix is NULL or empty");
    if (!dir) dir = MPCL_DATA_DEFAULT_DIR;
    mpcl_idx_params p = params ? *params : mpcl_idx_default_params();
    if (p.num_classes < 0)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_idx_load: num_classes %d is negative",
                          p.num_classes);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "data folder '%s' %s (%s)", dir,
                          stat(dir, &sb) != 0 ? "does not exist" : "is not a folder", PACKAGE_HINT);
    mpcl_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "mpcl_idx_load: dataset");
    mpcl_status st = load_images(ds, dir, prefix);
    if (st == MPCL_OK) st = load_labels(ds, dir, prefix, p.num_classes);
    if (st != MPCL_OK) {
        mpcl_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return MPCL_OK;
}

mpcl_status mpcl_idx_load(const char *dir, const char *prefix, mpcl_dataset **out) {
    return mpcl_idx_load_ex(dir, prefix, NULL, out);
}

mpcl_status mpcl_dataset_subset(const mpcl_dataset *src, size_t n, mpcl_dataset **out) {
    if (!out) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_dataset_subset: out is NULL");
    *out = NULL;
    if (!src || n == 0 || n > src->count)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "mpcl_dataset_subset: %zu samples asked of a dataset of %zu", n,
                          src ? src->count : 0);
    return mpcl__dataset_slice(src, 0, n, out);
}

void mpcl_dataset_destroy(mpcl_dataset *ds) {
    if (!ds) return;
    free(ds->x);
    free(ds->labels);
    free(ds->targets);
    free(ds);
}

const char *mpcl__dataset_path(const mpcl_dataset *ds, bool labels) {
    return labels ? ds->labels_path : ds->images_path;
}

size_t mpcl_dataset_count(const mpcl_dataset *ds) {
    return ds->count;
}
size_t mpcl_dataset_rows(const mpcl_dataset *ds) {
    return ds->rows;
}
size_t mpcl_dataset_cols(const mpcl_dataset *ds) {
    return ds->cols;
}
size_t mpcl_dataset_features(const mpcl_dataset *ds) {
    return ds->rows * ds->cols;
}
size_t mpcl_dataset_shape(const mpcl_dataset *ds, size_t shape[3]) {
    for (size_t i = 0; i < ds->rank; i++) shape[i] = ds->shape[i];
    return ds->rank;
}
mpcl_npy_dtype mpcl_dataset_x_dtype(const mpcl_dataset *ds) {
    return ds->x_dtype;
}
const void *mpcl_dataset_x(const mpcl_dataset *ds) {
    return ds->x;
}
size_t mpcl_dataset_target_cols(const mpcl_dataset *ds) {
    return ds->target_cols;
}
const float *mpcl_dataset_targets(const mpcl_dataset *ds) {
    return ds->targets;
}
int mpcl_dataset_num_classes(const mpcl_dataset *ds) {
    return ds->num_classes;
}
const uint8_t *mpcl_dataset_pixels(const mpcl_dataset *ds) {
    return ds->x_dtype == MPCL_NPY_U1 ? ds->x : NULL;
}
const uint8_t *mpcl_dataset_labels(const mpcl_dataset *ds) {
    return ds->labels;
}

/* All indices first, so that a bad one leaves the outputs untouched. */
static mpcl_status check_indices(const mpcl_dataset *ds, const int32_t *idx, size_t n,
                                 const char *fn) {
    if (!ds || (n > 0 && !idx))
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: NULL dataset or idx", fn);
    for (size_t i = 0; i < n; i++)
        if (idx[i] < 0 || (size_t)idx[i] >= ds->count)
            return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: idx[%zu] = %d outside [0, %zu)", fn,
                              i, (int)idx[i], ds->count);
    return MPCL_OK;
}

/* Feature j of sample i as the batch takes it: u8 / 255, f32 and f16 as they are. */
static float feature(const mpcl_dataset *ds, size_t i, size_t j) {
    size_t k = i * ds->rows * ds->cols + j;
    switch (ds->x_dtype) {
    case MPCL_NPY_F4: return ((const float *)(const void *)ds->x)[k];
    case MPCL_NPY_F2: return mpcl_f16_to_f32(((const uint16_t *)(const void *)ds->x)[k]);
    default: return ds->x[k] / 255.0f;
    }
}

mpcl_status mpcl_dataset_batch(const mpcl_dataset *ds, const int32_t *idx, size_t n, float *pixels,
                               int32_t *labels) {
    mpcl_status st = check_indices(ds, idx, n, "mpcl_dataset_batch");
    if (st != MPCL_OK) return st;
    if (labels && !ds->labels)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "mpcl_dataset_batch: the data set has f32 targets, not labels "
                          "(mpcl_dataset_batch_targets)");
    size_t features = ds->rows * ds->cols;
    for (size_t i = 0; i < n; i++) {
        if (pixels)
            for (size_t j = 0; j < features; j++)
                pixels[i * features + j] = feature(ds, (size_t)idx[i], j);
        if (labels) labels[i] = ds->labels[idx[i]];
    }
    return MPCL_OK;
}

mpcl_status mpcl_dataset_batch_targets(const mpcl_dataset *ds, const int32_t *idx, size_t n,
                                       float *targets) {
    mpcl_status st = check_indices(ds, idx, n, "mpcl_dataset_batch_targets");
    if (st != MPCL_OK) return st;
    if (!ds->targets || (n > 0 && !targets))
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_dataset_batch_targets: %s",
                          ds->targets ? "targets is NULL" : "the data set has sparse labels");
    size_t T = ds->target_cols;
    for (size_t i = 0; i < n; i++)
        memcpy(targets + i * T, ds->targets + (size_t)idx[i] * T, T * sizeof *targets);
    return MPCL_OK;
}

mpcl_status mpcl_dataset_from_memory(const uint8_t *pixels, const uint8_t *labels, size_t count,
                                     size_t rows, size_t cols, int num_classes,
                                     mpcl_dataset **out) {
    if (!out)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_dataset_from_memory: out is NULL");
    *out = NULL;
    if (!pixels || !labels || count == 0 || rows == 0 || cols == 0 || num_classes < 1 ||
        num_classes > 256)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "mpcl_dataset_from_memory: %zu samples of %zux%zu, %d classes (%s)",
                          count, rows, cols, num_classes,
                          !pixels || !labels ? "a NULL buffer" : "each must be at least 1");
    /* The same bound as a file's image section: the product cannot overflow. */
    if ((uint64_t)rows > MPCL_IDX_MAX_BYTES || (uint64_t)cols > MPCL_IDX_MAX_BYTES ||
        (uint64_t)rows * cols > MPCL_IDX_MAX_BYTES / count)
        return MPCL_ERROR(
            NULL, MPCL_ERR_INVALID_ARG,
            "mpcl_dataset_from_memory: %zu samples of %zux%zu is more than %llu bytes", count, rows,
            cols, (unsigned long long)MPCL_IDX_MAX_BYTES);
    for (size_t i = 0; i < count; i++)
        if (labels[i] >= num_classes)
            return MPCL_ERROR(NULL, MPCL_ERR_LABEL,
                              "mpcl_dataset_from_memory: label %u of sample %zu is not below the "
                              "class count %d",
                              labels[i], i, num_classes);
    size_t features = rows * cols;
    mpcl_dataset *ds = calloc(1, sizeof *ds);
    if (ds) {
        mpcl__dataset_set_shape(ds, count, MPCL_NPY_U1, 2, (size_t[]){rows, cols});
        ds->num_classes = num_classes;
        ds->x = malloc(count * features);
        ds->labels = malloc(count);
    }
    if (!ds || !ds->x || !ds->labels) {
        mpcl_dataset_destroy(ds);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "mpcl_dataset_from_memory: %zu samples",
                          count);
    }
    memcpy(ds->x, pixels, count * features);
    memcpy(ds->labels, labels, count);
    *out = ds;
    return MPCL_OK;
}
