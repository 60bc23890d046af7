/* Files the library reads and replaces: opening that never blocks, and
 * atomic replacement that honours the umask, never replaces anything but a
 * regular file, and leaves no temporary file behind a killed writer. Nothing
 * here is installed. */
#ifndef MPCL_RUNTIME_FILEIO_H
#define MPCL_RUNTIME_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "mpcl/status.h"

/* Opens path for reading without ever blocking (a FIFO or a device is
 * refused before anything waits on it): MPCL_ERR_IO naming the path and what
 * it is when it is not a regular file. */
mpcl_status mpcl__open_regular(const char *path, FILE **out);
/* The same open for readers to which a missing or odd file is no error (a
 * cache entry, an optional source): records nothing. NULL with errno set
 * when path cannot be opened, or with *mode set to its type when it is not a
 * regular file (*mode is 0 otherwise). */
FILE *mpcl__open_regular_quiet(const char *path, unsigned *mode);

/* The whole regular file at path (opened as mpcl__open_regular), NUL-added,
 * in *text (the caller frees it) with its size in bytes: MPCL_ERR_IO naming
 * the path when it cannot be opened or read, MPCL_ERR_FORMAT "'<path>': text
 * is N bytes, over the limit of M" before anything is read from a file over
 * max_bytes. *text is NULL after a failure. */
mpcl_status mpcl__read_regular(const char *path, size_t max_bytes, char **text, size_t *size);

/* "a FIFO", "a folder", "a character device"... for messages. */
const char *mpcl__file_kind(unsigned mode);
/* Whether a file name ends with `suffix` (".dat", "_probe.cl"). */
bool mpcl__has_suffix(const char *name, const char *suffix);

/* An atomic replacement of `path`: the data go to an unnamed file in the same
 * folder (O_TMPFILE; where the file system lacks it, a file named
 * PATH.tmp-PID-N), which commit names and renames over path. */
typedef struct mpcl__atomic_file {
    const char *path;
    char *dir;
    char *tmp; /* the temporary name, once the file has one */
    int fd;
    int named; /* tmp exists on disk */
} mpcl__atomic_file;

/* Refuses a path that exists and is not a regular file, removes the
 * PATH.tmp-PID-* files of writers that are gone, and creates the file
 * (mode 0666 less the umask). */
mpcl_status mpcl__atomic_begin(mpcl__atomic_file *af, const char *path);
mpcl_status mpcl__atomic_write(mpcl__atomic_file *af, const void *data, size_t n);
/* fsync, name, rename over path, fsync the folder; af is closed either way. */
mpcl_status mpcl__atomic_commit(mpcl__atomic_file *af);
/* Closes and removes the temporary file (after a failure). Accepts a closed af. */
void mpcl__atomic_abort(mpcl__atomic_file *af);

/* A new folder made whole: the caller writes its files (none in subfolders)
 * into ad->tmp, a folder PATH.tmp-PID-N beside path, which commit renames to
 * path. path may be missing or an empty folder; anything else is refused by
 * begin (MPCL_ERR_IO) and left alone. The folder of a writer that is gone is
 * removed by the next begin on the same path, as the files of
 * mpcl__atomic_begin are. */
typedef struct mpcl__atomic_dir {
    char *path; /* a copy, without trailing slashes */
    char *tmp;
    int made; /* tmp exists on disk */
} mpcl__atomic_dir;

mpcl_status mpcl__atomic_dir_begin(mpcl__atomic_dir *ad, const char *path);
/* Renames tmp to path and fsyncs the parent folder; ad is closed either way
 * (tmp removed with its files on failure). */
mpcl_status mpcl__atomic_dir_commit(mpcl__atomic_dir *ad);
/* Removes tmp and its files (after a failure). Accepts a closed ad. */
void mpcl__atomic_dir_abort(mpcl__atomic_dir *ad);

#endif
