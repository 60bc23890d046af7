/* libFuzzer harness: the IDX reader, images and labels, raw and gzip.
 *
 * Input: a mode byte, then the bytes of the fuzzed file.
 *   mode & 1: 0 fuzzes the images file (the labels file is a valid one whose
 *             count is the images header's count, up to 4096), 1 the labels
 *             file (the images file holds 3 images of 2 x 2).
 *   (mode >> 1) & 3: how the fuzzed bytes reach the reader:
 *     0 raw, under the raw name;
 *     1 gzip-compressed here, under the .gz name (so the IDX parser behind
 *       zlib sees the fuzzed bytes, not a broken CRC);
 *     2 as they are, under the .gz name (zlib's side: members, trailers,
 *       truncation, garbage);
 *     3 gzip-compressed here, in two members, under the raw name (gzip is
 *       known by its magic).
 *   mode & 8: num_classes 0 (no label check) instead of 10.
 * The files go to the reader in memory (mpcl__idx_load_mem: the same code
 * after the open, the name deciding .gz as on disk), which runs about five
 * times faster than writing them to tmpfs; the path lookup is the unit
 * tests'. The reader must load or fail with MPCL_ERR_FORMAT; on success the
 * data set is read back in full. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fuzz_common.h"
#include "io/io.h"

#define IMAGES "train-images-idx3-ubyte"
#define LABELS "train-labels-idx1-ubyte"

static volatile unsigned sink;

/* gzip of data into a malloc'ed buffer, as `members` concatenated members; level 1
 * with a 1 KiB window and the least memory, since deflate's set-up dominates
 * the cost of an input otherwise. */
static unsigned char *gzip(const uint8_t *data, size_t n, int members, size_t *out_n) {
    size_t cap = 64 + 2 * (size_t)members * (compressBound((uLong)n) + 32), used = 0;
    unsigned char *out = malloc(cap);
    if (!out) abort();
    for (int m = 0; m < members; m++) {
        size_t from = n * (size_t)m / (size_t)members, to = n * (size_t)(m + 1) / (size_t)members;
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (deflateInit2(&zs, 1, Z_DEFLATED, 16 + 10, 1, Z_DEFAULT_STRATEGY) != Z_OK) abort();
        zs.next_in = (unsigned char *)(uintptr_t)(data + from);
        zs.avail_in = (uInt)(to - from);
        zs.next_out = out + used;
        zs.avail_out = (uInt)(cap - used);
        if (deflate(&zs, Z_FINISH) != Z_STREAM_END) abort();
        used = cap - zs.avail_out;
        deflateEnd(&zs);
    }
    *out_n = used;
    return out;
}

/* One file as the reader gets it: its name and bytes (malloc'ed or NULL). */
typedef struct file {
    char name[64];
    const uint8_t *data;
    size_t n;
    unsigned char *owned;
} file;

static void put(file *f, const char *name, const uint8_t *data, size_t n, int how) {
    snprintf(f->name, sizeof f->name, "%s%s", name, how == 1 || how == 2 ? ".gz" : "");
    f->owned = NULL;
    f->data = data;
    f->n = n;
    if (how == 1 || how == 3) {
        f->owned = gzip(data, n, how == 3 ? 2 : 1, &f->n);
        f->data = f->owned;
    }
}

static void be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned mode = data[0];
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    int how = (int)((mode >> 1) & 3);
    file img, lab;
    static uint8_t labels[8 + 4096];
    if (mode & 1) {
        static const uint8_t images[16 + 12] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2,  0,  0,
                                                0, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
        put(&img, IMAGES, images, sizeof images, 0);
        put(&lab, LABELS, body, n, how);
    } else {
        uint32_t count = 0;
        if (n >= 8)
            count = ((uint32_t)body[4] << 24) | ((uint32_t)body[5] << 16) |
                    ((uint32_t)body[6] << 8) | body[7];
        if (count > 4096) count = 4096;
        be32(labels, 0x801);
        be32(labels + 4, count);
        for (uint32_t i = 0; i < count; i++) labels[8 + i] = (uint8_t)(i % 10);
        put(&lab, LABELS, labels, 8 + count, 0);
        put(&img, IMAGES, body, n, how);
    }
    mpcl_dataset *ds = (mpcl_dataset *)&ds;
    mpcl_status st = mpcl__idx_load_mem(img.name, img.data, img.n, lab.name, lab.data, lab.n,
                                        mode & 8 ? 0 : 10, &ds);
    free(img.owned);
    free(lab.owned);
    if (st == MPCL_OK) {
        size_t count = mpcl_dataset_count(ds), features = mpcl_dataset_features(ds);
        const uint8_t *px = mpcl_dataset_pixels(ds), *lb = mpcl_dataset_labels(ds);
        unsigned h = 0;
        for (size_t i = 0; i < count * features; i++) h += px[i];
        for (size_t i = 0; i < count; i++) {
            if (lb[i] >= mpcl_dataset_num_classes(ds)) abort();
            h += lb[i];
        }
        sink = h;
        mpcl_dataset_destroy(ds);
    } else if (ds != NULL || st != MPCL_ERR_FORMAT) {
        abort();
    }
    return 0;
}
