/* Tiny verification kernels, as fp16_verify.c and matrix_engine.c run them:
 * built with whatever the compiler printed kept for the report, run on
 * poisoned outputs, and their outcome described in one line. */
#ifndef MPCL_RUNTIME_PROBE_H
#define MPCL_RUNTIME_PROBE_H

#include <stdbool.h>
#include <stddef.h>

#include "mpcl/cl_interop.h"

/* A NaN no kernel produces, for outputs; and bit equality (any NaN matching
 * a NaN). */
float mpcl__probe_poison_f32(void);
bool mpcl__probe_same_f32(float got, float want);

/* What a probe's compiler wrote to stderr, when it wrote anything. */
typedef struct mpcl__probe_log {
    char text[160];
} mpcl__probe_log;

/* The program from src; NULL when it does not build. */
cl_program mpcl__probe_build(cl_context cl, cl_device_id dev, const char *src, const char *options,
                             mpcl__probe_log *log);
/* The embedded (or MPCL_CL_DIR) sources `names`, joined in order, built
 * with `options`; NULL when a source is missing or the build fails. */
cl_program mpcl__probe_build_sources(cl_context cl, cl_device_id dev, const char *const names[],
                                     size_t count, const char *options, mpcl__probe_log *log);
/* The probe file `name` after common.cl, built for bf16 storage plus
 * `options`, so that it runs the library's own macros; NULL when a source
 * is missing or the build fails. */
cl_program mpcl__probe_build_after_common(cl_context cl, cl_device_id dev, const char *name,
                                          const char *options, mpcl__probe_log *log);

/* One buffer of a probe: its host copy, which the outputs are read back
 * into (poisoned by the caller before the launch). */
typedef struct mpcl__probe_arg {
    void *host;
    size_t bytes;
    bool output;
} mpcl__probe_arg;
/* Runs kernel `name` over `items` work-items in groups of `local` (0: the
 * driver's choice) with the 4 buffers as its arguments. False when any
 * OpenCL call fails. */
bool mpcl__probe_run(cl_context cl, cl_command_queue q, cl_program p, const char *name,
                     mpcl__probe_arg args[4], size_t items, size_t local);

/* "what: total/total exact", "what: k/total wrong" or "what: did not build
 * or run" (wrong > total), then what the compiler printed, in brackets. */
void mpcl__probe_describe(char *buf, size_t size, const char *what, int wrong, int total,
                          const mpcl__probe_log *log);

#endif
