/* On-disk cache of built program binaries. An entry is
 *   "MPCLBIN2" | key (32 bytes) | size (u64 little-endian) | tag (32 bytes) | binary
 * where the key is the SHA-256 of the key material (source, options, device,
 * driver, library version; each part with its length) and the tag is the
 * SHA-256 of "mpcl-cache-entry-v2" | key | size | binary. An entry is used
 * only when the file is exactly that long and every field matches, so a
 * binary that was torn, truncated, changed or moved under another key (with
 * its own tag, or with a checksum of the body alone recomputed) is rejected
 * and rebuilt, never fatal. The tag binds a body to its key against
 * accidents and against swapping entries around; it is not a signature: a
 * writer who can run code as the user could forge it as easily as replace
 * the library, so the cache folder must be the user's own (the default is).
 *
 * Concurrency: a writer writes a temp file in the same folder, fsyncs it and
 * renames it over the entry, so a reader opens the old entry or the new one,
 * never a mix, and checks the tag anyway. Any number of processes may share
 * one folder. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/fileio.h"
#include "runtime/runtime.h"

#define HEADER_BYTES (8 + 32 + 8 + 32)
#define MAX_BINARY (1ull << 30) /* no program binary is a GiB */
static const char MAGIC[8] = {'M', 'P', 'C', 'L', 'B', 'I', 'N', '2'};
static const char TAG_DOMAIN[] = "mpcl-cache-entry-v2";

typedef unsigned long long u64;

/* ---- SHA-256 (FIPS 180-4), small and unhurried: entries are a few MB ---- */

typedef struct sha256 {
    uint32_t h[8];
    unsigned char buf[64];
    size_t fill;
    u64 bytes;
} sha256;

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) {
    return (x >> n) | (x << (32 - n));
}

static void sha256_block(sha256 *s, const unsigned char *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = ((uint32_t)p[4 * i] << 24) | ((uint32_t)p[4 * i + 1] << 16) |
               ((uint32_t)p[4 * i + 2] << 8) | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5],
             g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 =
            h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
    s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

static void sha256_init(sha256 *s) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->fill = 0;
    s->bytes = 0;
}

static void sha256_update(sha256 *s, const void *data, size_t n) {
    const unsigned char *p = data;
    s->bytes += n;
    while (n > 0) {
        size_t k = 64 - s->fill < n ? 64 - s->fill : n;
        memcpy(s->buf + s->fill, p, k);
        s->fill += k, p += k, n -= k;
        if (s->fill == 64) {
            sha256_block(s, s->buf);
            s->fill = 0;
        }
    }
}

static void sha256_final(sha256 *s, unsigned char out[32]) {
    u64 bits = s->bytes * 8;
    unsigned char pad[72] = {0x80};
    size_t padn = (s->fill < 56 ? 56 : 120) - s->fill;
    for (int i = 0; i < 8; i++) pad[padn + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
    sha256_update(s, pad, padn + 8);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) out[4 * i + j] = (unsigned char)(s->h[i] >> (24 - 8 * j));
}

void mpcl__sha256(const void *data, size_t n, unsigned char out[32]) {
    sha256 s;
    sha256_init(&s);
    sha256_update(&s, data, n);
    sha256_final(&s, out);
}

/* ---- keys and entries ---- */

mpcl__cache_key mpcl__cache_key_make(const char *const parts[], size_t count) {
    sha256 s;
    sha256_init(&s);
    for (size_t i = 0; i < count; i++) {
        /* The length goes in too, so ("ab","c") and ("a","bc") differ. */
        unsigned char len[8];
        u64 n = strlen(parts[i]);
        for (int b = 0; b < 8; b++) len[b] = (unsigned char)(n >> (8 * b));
        sha256_update(&s, len, sizeof len);
        sha256_update(&s, parts[i], (size_t)n);
    }
    mpcl__cache_key k;
    sha256_final(&s, k.bytes);
    return k;
}

static int mkdir_p(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

int mpcl__cache_dir(char *buf, size_t size) {
    if (mpcl__env_value(MPCL_ENV_CACHE)) return 0; /* MPCL_CACHE=0, its one value */
    const char *dir = getenv("MPCL_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (dir && *dir)
        n = snprintf(buf, size, "%s", dir);
    else if (xdg && *xdg)
        n = snprintf(buf, size, "%s/mpcl", xdg);
    else if (home && *home)
        n = snprintf(buf, size, "%s/.cache/mpcl", home);
    else
        return 0;
    if (n <= 0 || (size_t)n >= size) return 0;
    return mkdir_p(buf) == 0;
}

void mpcl__cache_entry_path(char *buf, size_t size, const char *dir, mpcl__cache_key key) {
    int n = snprintf(buf, size, "%s/", dir);
    for (int i = 0; i < 32 && n > 0 && (size_t)n + 3 < size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%02x", key.bytes[i]);
    if (n > 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, ".bin");
}

static void put64(unsigned char *p, u64 v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static u64 get64(const unsigned char *p) {
    u64 v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* The tag of a body under a key: SHA-256(domain | key | size | body). */
static void entry_tag(mpcl__cache_key key, const unsigned char *data, size_t size,
                      unsigned char out[32]) {
    sha256 s;
    unsigned char n[8];
    put64(n, size);
    sha256_init(&s);
    sha256_update(&s, TAG_DOMAIN, sizeof TAG_DOMAIN - 1);
    sha256_update(&s, key.bytes, sizeof key.bytes);
    sha256_update(&s, n, sizeof n);
    sha256_update(&s, data, size);
    sha256_final(&s, out);
}

unsigned char *mpcl__cache_read(const char *dir, mpcl__cache_key key, size_t *size, int *rejected) {
    char path[4200];
    mpcl__cache_entry_path(path, sizeof path, dir, key);
    /* Never blocks: a FIFO or a device at the entry's name is a rejected
     * entry, refused before anything waits on it. */
    unsigned mode = 0;
    FILE *f = mpcl__open_regular_quiet(path, &mode);
    *rejected = mode != 0;
    if (!f) return NULL;
    unsigned char header[HEADER_BYTES], tag[32];
    unsigned char *data = NULL;
    struct stat sb;
    *rejected = 1;
    if (fstat(fileno(f), &sb) != 0) goto bad;
    if (fread(header, 1, sizeof header, f) != sizeof header) goto bad;
    if (memcmp(header, MAGIC, sizeof MAGIC) != 0) goto bad;
    if (memcmp(header + 8, key.bytes, sizeof key.bytes) != 0) goto bad;
    u64 n = get64(header + 40);
    /* The size must be the file's, before anything is allocated for it. */
    if (n == 0 || n > MAX_BINARY || (u64)sb.st_size != HEADER_BYTES + n) goto bad;
    data = malloc((size_t)n);
    if (!data || fread(data, 1, (size_t)n, f) != n || fgetc(f) != EOF) goto bad;
    entry_tag(key, data, (size_t)n, tag);
    if (memcmp(tag, header + 48, sizeof tag) != 0) goto bad;
    fclose(f);
    *rejected = 0;
    *size = (size_t)n;
    return data;
bad:
    free(data);
    fclose(f);
    return NULL;
}

void mpcl__cache_write(const char *dir, mpcl__cache_key key, const unsigned char *data,
                       size_t size) {
    char path[4200];
    if (size == 0 || size > MAX_BINARY) return;
    mpcl__cache_entry_path(path, sizeof path, dir, key);
    unsigned char header[HEADER_BYTES];
    memcpy(header, MAGIC, sizeof MAGIC);
    memcpy(header + 8, key.bytes, sizeof key.bytes);
    put64(header + 40, size);
    entry_tag(key, data, size, header + 48);
    /* The atomic writer: readers see the old entry or the new one, the data
     * reach the disk before the name does, and a FIFO or anything else that
     * is not a regular file at the entry's name is left alone. */
    mpcl__atomic_file af;
    if (mpcl__atomic_begin(&af, path) != MPCL_OK) return;
    if (mpcl__atomic_write(&af, header, sizeof header) == MPCL_OK &&
        mpcl__atomic_write(&af, data, size) == MPCL_OK)
        (void)mpcl__atomic_commit(&af);
    else
        mpcl__atomic_abort(&af);
}
