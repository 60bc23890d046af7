/* On-disk cache of built program binaries. An entry is
 *   "MPCLBIN1" | key.a | key.b | size | checksum | binary      (u64 little-endian)
 * and is used only when every field matches; anything else (corrupt, truncated,
 * foreign, unreadable) is ignored and rebuilt, never fatal. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/runtime.h"

#define HEADER_BYTES 40
static const char MAGIC[8] = {'M', 'P', 'C', 'L', 'B', 'I', 'N', '1'};

typedef unsigned long long u64;

static u64 fnv1a(u64 h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* A second, differently mixed hash so that a key is 128 bits. */
static u64 mix64(u64 h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    return h;
}

mpcl__cache_key mpcl__cache_key_make(const char *const parts[], size_t count) {
    mpcl__cache_key k = {0xcbf29ce484222325ull, 0x6a09e667f3bcc908ull};
    for (size_t i = 0; i < count; i++) {
        /* The length goes in too, so ("ab","c") and ("a","bc") differ. */
        u64 len = strlen(parts[i]);
        k.a = fnv1a(k.a, (const unsigned char *)&len, sizeof len);
        k.b = mix64(k.b, (const unsigned char *)&len, sizeof len);
        k.a = fnv1a(k.a, (const unsigned char *)parts[i], len);
        k.b = mix64(k.b, (const unsigned char *)parts[i], len);
    }
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
    const char *off = getenv("MPCL_CACHE");
    if (off && strcmp(off, "0") == 0) return 0;
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

static void entry_path(char *buf, size_t size, const char *dir, mpcl__cache_key key) {
    snprintf(buf, size, "%s/%016llx%016llx.bin", dir, key.a, key.b);
}

static void put64(unsigned char *p, u64 v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static u64 get64(const unsigned char *p) {
    u64 v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

unsigned char *mpcl__cache_read(const char *dir, mpcl__cache_key key, size_t *size, int *rejected) {
    char path[4200];
    entry_path(path, sizeof path, dir, key);
    *rejected = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char header[HEADER_BYTES];
    unsigned char *data = NULL;
    *rejected = 1;
    if (fread(header, 1, sizeof header, f) != sizeof header) goto bad;
    if (memcmp(header, MAGIC, sizeof MAGIC) != 0) goto bad;
    if (get64(header + 8) != key.a || get64(header + 16) != key.b) goto bad;
    u64 n = get64(header + 24);
    if (n == 0 || n > (1ull << 30)) goto bad; /* no program binary is a GiB */
    data = malloc((size_t)n);
    if (!data || fread(data, 1, (size_t)n, f) != n || fgetc(f) != EOF) goto bad;
    if (fnv1a(0xcbf29ce484222325ull, data, (size_t)n) != get64(header + 32)) goto bad;
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
    char path[4200], tmp[4300];
    entry_path(path, sizeof path, dir, key);
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) return;
    unsigned char header[HEADER_BYTES];
    memcpy(header, MAGIC, sizeof MAGIC);
    put64(header + 8, key.a);
    put64(header + 16, key.b);
    put64(header + 24, size);
    put64(header + 32, fnv1a(0xcbf29ce484222325ull, data, size));
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        unlink(tmp);
        return;
    }
    int ok =
        fwrite(header, 1, sizeof header, f) == sizeof header && fwrite(data, 1, size, f) == size;
    ok = (fclose(f) == 0) && ok;
    /* rename() replaces atomically: readers see the old entry or the new one. */
    if (!ok || rename(tmp, path) != 0) unlink(tmp);
}
