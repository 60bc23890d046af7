#define _POSIX_C_SOURCE 200809L
#include "fuzz_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static void remove_dir(void) {
    char cmd[300];
    /* Only files this harness wrote, in a folder only it uses. */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", dir);
}

const char *fuzz_dir(void) {
    if (dir[0]) return dir;
    struct stat sb;
    const char *base = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/mpcl-fuzz-XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(remove_dir);
    return dir;
}

void fuzz_write(const char *name, const void *data, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror("fuzz: writing an input file");
        abort();
    }
}

void fuzz_unlink(const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", fuzz_dir(), name);
    if (unlink(p) != 0 && errno != ENOENT) {
        perror("fuzz: unlink");
        abort();
    }
}
