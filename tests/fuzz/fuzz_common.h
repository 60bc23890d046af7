/* Shared by the libFuzzer harnesses: a private folder for the files a
 * harness must hand the library by name (on tmpfs when there is one), and
 * file writing that aborts on failure, since a harness that cannot write its
 * input would otherwise fuzz nothing. */
#ifndef MPCL_FUZZ_COMMON_H
#define MPCL_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The folder, made on first use and removed at exit. */
const char *fuzz_dir(void);
/* Writes n bytes to <fuzz_dir>/<name>, replacing it. */
void fuzz_write(const char *name, const void *data, size_t n);
/* Removes <fuzz_dir>/<name> if it exists. */
void fuzz_unlink(const char *name);

#endif
