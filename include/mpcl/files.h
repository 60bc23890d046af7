/* Files mpcl replaces (checkpoints, plots, cache entries): every one is
 * written to a temporary file next to it and renamed over it, so its name
 * must leave room for the temporary name. A tool checks a name with this
 * before it starts work that would end in writing it. */
#ifndef MPCL_FILES_H
#define MPCL_FILES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

/* The longest file name (bytes of the last path component) that mpcl can
 * write in `folder`: the file system's limit there (NAME_MAX, usually 255)
 * less the suffix of the writer's temporary name (".tmp-PID-N", at most
 * MPCL_TEMP_SUFFIX_MAX bytes). */
size_t mpcl_output_name_max(const char *folder);
#define MPCL_TEMP_SUFFIX_MAX 32

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
