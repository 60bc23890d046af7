/* Opening and replacing files safely. See fileio.h. */
#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mpcl/files.h"
#include "runtime/fileio.h"
#include "runtime/runtime.h"

bool mpcl__has_suffix(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

const char *mpcl__file_kind(unsigned mode) {
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a folder";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
    }
}

static void close_keeping_errno(int fd) {
    int err = errno;
    close(fd);
    errno = err;
}

FILE *mpcl__open_regular_quiet(const char *path, unsigned *mode) {
    *mode = 0;
    /* O_NONBLOCK: opening a FIFO without a writer would wait forever, and a
     * device may block too; fstat then refuses both before any read. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close_keeping_errno(fd);
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        *mode = (unsigned)sb.st_mode;
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) close_keeping_errno(fd);
    return f;
}

mpcl_status mpcl__open_regular(const char *path, FILE **out) {
    unsigned mode = 0;
    *out = mpcl__open_regular_quiet(path, &mode);
    if (*out) return MPCL_OK;
    if (mode)
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "'%s' is %s, not a regular file", path,
                          mpcl__file_kind(mode));
    return MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
}

mpcl_status mpcl__read_regular(const char *path, size_t max_bytes, char **text, size_t *size) {
    *text = NULL;
    *size = 0;
    FILE *f;
    mpcl_status st = mpcl__open_regular(path, &f);
    if (st != MPCL_OK) return st;
    struct stat sb;
    char *buf = NULL;
    size_t n = 0;
    if (fstat(fileno(f), &sb) != 0) {
        st = MPCL_ERROR(NULL, MPCL_ERR_IO, "'%s': %s", path, strerror(errno));
    } else if ((uint64_t)sb.st_size > max_bytes) {
        st = MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "'%s': text is %llu bytes, over the limit of %zu",
                        path, (unsigned long long)sb.st_size, max_bytes);
    } else {
        n = (size_t)sb.st_size;
        buf = malloc(n + 1);
        if (!buf)
            st = MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': %zu bytes", path, n);
        else if (fread(buf, 1, n, f) != n)
            st = MPCL_ERROR(NULL, MPCL_ERR_IO, "reading '%s': %s", path,
                            ferror(f) ? strerror(errno) : "file shrank while being read");
    }
    fclose(f);
    if (st != MPCL_OK) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    *text = buf;
    *size = n;
    return MPCL_OK;
}

static char *folder_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    char *d = malloc((size_t)(slash - path) + 1);
    if (d) {
        memcpy(d, path, (size_t)(slash - path));
        d[slash - path] = '\0';
    }
    return d;
}

/* Removes the folder `name` in the folder dfd (or AT_FDCWD) with the files in
 * it: a temporary folder of mpcl__atomic_dir, which holds no subfolder. */
static void remove_flat_folder(int dfd, const char *name) {
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                (void)unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    } else if (fd >= 0) {
        close(fd);
    }
    (void)unlinkat(dfd, name, AT_REMOVEDIR);
}

/* Removes BASE.tmp-PID-* in dir whose PID no longer runs: what a writer
 * killed between naming its file and the rename left behind. A live writer's
 * file (another process saving to the same path) is left alone. */
static void remove_stale(const char *dir, const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t blen = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strncmp(n, base, blen) != 0 || strncmp(n + blen, ".tmp-", 5) != 0) continue;
        char *end = NULL;
        long pid = strtol(n + blen + 5, &end, 10);
        if (pid <= 0 || !end || *end != '-') continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        if (unlinkat(dirfd(d), n, 0) != 0 && errno == EISDIR) remove_flat_folder(dirfd(d), n);
    }
    closedir(d);
}

/* PATH.tmp-PID-N with N unique enough among this process's own writers:
 * ".tmp-", a pid_t in decimal, "-", tv_nsec and the counter in hex. */
_Static_assert(sizeof ".tmp-2147483647-3b9ac9ffffffffff" - 1 == MPCL_TEMP_SUFFIX_MAX,
               "the longest suffix temp_name writes");
static void temp_name(char *buf, size_t size, const char *path) {
    static unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, size, "%s.tmp-%ld-%lx%x", path, (long)getpid(), (unsigned long)ts.tv_nsec,
             counter++);
}

size_t mpcl_output_name_max(const char *folder) {
    long limit = pathconf(folder && *folder ? folder : ".", _PC_NAME_MAX);
    if (limit <= 0) limit = NAME_MAX; /* unknown, or no limit */
    return limit > MPCL_TEMP_SUFFIX_MAX ? (size_t)(limit - MPCL_TEMP_SUFFIX_MAX) : 0;
}

/* A name too long for the temporary name would fail only at commit, after
 * all the work; refused here instead. */
static mpcl_status refuse_long_name(const char *path, const char *dir) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t longest = mpcl_output_name_max(dir);
    if (strlen(base) > longest)
        return MPCL_ERROR(NULL, MPCL_ERR_IO,
                          "cannot write '%s': the file name is %zu bytes; the longest mpcl can "
                          "write in '%s' is %zu (the file system's limit less %d for the "
                          "temporary name)",
                          path, strlen(base), dir, longest, MPCL_TEMP_SUFFIX_MAX);
    return MPCL_OK;
}

static mpcl_status refuse_special(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "'%s' is %s; only a regular file is ever replaced",
                          path, mpcl__file_kind((unsigned)sb.st_mode));
    return MPCL_OK;
}

mpcl_status mpcl__atomic_begin(mpcl__atomic_file *af, const char *path) {
    memset(af, 0, sizeof *af);
    af->fd = -1;
    af->path = path;
    mpcl_status st = refuse_special(path);
    if (st != MPCL_OK) return st;
    af->dir = folder_of(path);
    af->tmp = malloc(strlen(path) + 64);
    if (!af->dir || !af->tmp) {
        mpcl__atomic_abort(af);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "writing '%s'", path);
    }
    struct stat sb;
    int found = stat(af->dir, &sb) == 0;
    if (!found || !S_ISDIR(sb.st_mode)) {
        if (found)
            st = MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot write '%s': '%s' is %s, not a folder", path,
                            af->dir, mpcl__file_kind((unsigned)sb.st_mode));
        else
            st = MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot write '%s': folder '%s' %s", path, af->dir,
                            errno == ENOENT ? "does not exist" : strerror(errno));
        mpcl__atomic_abort(af);
        return st;
    }
    if ((st = refuse_long_name(path, af->dir)) != MPCL_OK) {
        mpcl__atomic_abort(af);
        return st;
    }
    remove_stale(af->dir, path);
    /* 0666 and the umask decide the mode, as for any file a tool creates. */
    af->fd = open(af->dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (af->fd < 0) {
        for (int tries = 0; tries < 16 && af->fd < 0; tries++) {
            temp_name(af->tmp, strlen(path) + 64, path);
            af->fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
            if (af->fd < 0 && errno != EEXIST) break;
        }
        if (af->fd < 0) {
            st = MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot create a file in '%s': %s", af->dir,
                            strerror(errno));
            mpcl__atomic_abort(af);
            return st;
        }
        af->named = 1;
    }
    return MPCL_OK;
}

mpcl_status mpcl__atomic_write(mpcl__atomic_file *af, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t k = write(af->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return MPCL_ERROR(NULL, MPCL_ERR_IO, "writing '%s': %s", af->path,
                              k < 0 ? strerror(errno) : "no progress");
        p += k;
        n -= (size_t)k;
    }
    return MPCL_OK;
}

mpcl_status mpcl__atomic_commit(mpcl__atomic_file *af) {
    mpcl_status st = MPCL_OK;
    if (fsync(af->fd) != 0) {
        st = MPCL_ERROR(NULL, MPCL_ERR_IO, "writing '%s': %s", af->path, strerror(errno));
        goto fail;
    }
    if (!af->named) {
        /* Naming the unnamed file is the only moment a kill can leave a
         * temporary file; the next writer removes it (remove_stale). */
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", af->fd);
        temp_name(af->tmp, strlen(af->path) + 64, af->path);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, af->tmp, AT_SYMLINK_FOLLOW) != 0 &&
            linkat(af->fd, "", AT_FDCWD, af->tmp, AT_EMPTY_PATH) != 0) {
            st = MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot name a file in '%s': %s", af->dir,
                            strerror(errno));
            goto fail;
        }
        af->named = 1;
    }
    if ((st = refuse_special(af->path)) != MPCL_OK) goto fail;
    if (rename(af->tmp, af->path) != 0) {
        st = MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot rename '%s' to '%s': %s", af->tmp, af->path,
                        strerror(errno));
        goto fail;
    }
    af->named = 0;
    /* The rename is durable only once the folder's entry is on disk. Some file
     * systems cannot fsync a folder (EINVAL); the file is in place anyway. */
    int dfd = open(af->dir, O_RDONLY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) != 0 && errno != EINVAL && errno != ENOTSUP)
            st =
                MPCL_ERROR(NULL, MPCL_ERR_IO, "fsync of folder '%s': %s", af->dir, strerror(errno));
        close(dfd);
    }
fail:
    mpcl__atomic_abort(af);
    return st;
}

void mpcl__atomic_abort(mpcl__atomic_file *af) {
    if (af->fd >= 0) close(af->fd);
    af->fd = -1;
    if (af->named && af->tmp) unlink(af->tmp);
    af->named = 0;
    free(af->tmp);
    free(af->dir);
    af->tmp = af->dir = NULL;
}

/* ---- a new folder, made whole ---- */

/* An empty folder or none at path: what a new folder may replace. */
static mpcl_status check_dir_target(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return errno == ENOENT
                   ? MPCL_OK
                   : MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot write folder '%s': it is %s", path,
                          mpcl__file_kind((unsigned)sb.st_mode));
    DIR *d = opendir(path);
    if (!d) return MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)) != NULL)
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    if (!empty)
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot write folder '%s': it exists and is not empty",
                          path);
    return MPCL_OK;
}

mpcl_status mpcl__atomic_dir_begin(mpcl__atomic_dir *ad, const char *path_given) {
    memset(ad, 0, sizeof *ad);
    /* "out/" is the folder "out": its temporary folder goes beside it. */
    char *path = ad->path = strdup(path_given);
    size_t len = path ? strlen(path) : 0;
    while (len > 1 && path[len - 1] == '/') path[--len] = '\0';
    char *parent = path ? folder_of(path) : NULL;
    ad->tmp = malloc(len + 64);
    if (!parent || !ad->tmp) {
        free(parent);
        mpcl__atomic_dir_abort(ad);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "writing '%s'", path_given);
    }
    mpcl_status st = check_dir_target(path);
    if (st != MPCL_OK) {
        free(parent);
        mpcl__atomic_dir_abort(ad);
        return st;
    }
    st = refuse_long_name(path, parent);
    if (st == MPCL_OK) remove_stale(parent, path);
    free(parent);
    if (st != MPCL_OK) {
        mpcl__atomic_dir_abort(ad);
        return st;
    }
    /* 0777 and the umask decide the mode, as for any folder a tool creates. */
    int made = -1;
    for (int tries = 0; tries < 16 && made != 0; tries++) {
        temp_name(ad->tmp, strlen(path) + 64, path);
        made = mkdir(ad->tmp, 0777);
        if (made != 0 && errno != EEXIST) break;
    }
    if (made != 0) {
        st = MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot make a folder beside '%s': %s", path,
                        strerror(errno));
        mpcl__atomic_dir_abort(ad);
        return st;
    }
    ad->made = 1;
    return MPCL_OK;
}

mpcl_status mpcl__atomic_dir_commit(mpcl__atomic_dir *ad) {
    mpcl_status st = MPCL_OK;
    /* rename replaces an empty folder, and fails on a non-empty one that
     * appeared since begin (ENOTEMPTY or EEXIST), which stays as it was. */
    if (rename(ad->tmp, ad->path) != 0) {
        st = MPCL_ERROR(NULL, MPCL_ERR_IO, "cannot rename '%s' to '%s': %s", ad->tmp, ad->path,
                        strerror(errno));
        mpcl__atomic_dir_abort(ad);
        return st;
    }
    ad->made = 0;
    char *parent = folder_of(ad->path);
    int dfd = parent ? open(parent, O_RDONLY | O_CLOEXEC) : -1;
    if (dfd >= 0) {
        if (fsync(dfd) != 0 && errno != EINVAL && errno != ENOTSUP)
            st = MPCL_ERROR(NULL, MPCL_ERR_IO, "fsync of folder '%s': %s", parent, strerror(errno));
        close(dfd);
    }
    free(parent);
    mpcl__atomic_dir_abort(ad);
    return st;
}

void mpcl__atomic_dir_abort(mpcl__atomic_dir *ad) {
    if (ad->made && ad->tmp) remove_flat_folder(AT_FDCWD, ad->tmp);
    ad->made = 0;
    free(ad->tmp);
    free(ad->path);
    ad->tmp = ad->path = NULL;
}
