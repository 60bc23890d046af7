/* Tiny verification kernels (probe.h): build with the compiler's stderr
 * kept, run on poisoned outputs, describe. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/probe.h"
#include "runtime/runtime.h"

static const uint32_t POISON_F32 = 0x7fc0dead; /* a NaN no kernel would produce */

float mpcl__probe_poison_f32(void) {
    float f;
    memcpy(&f, &POISON_F32, sizeof f);
    return f;
}

bool mpcl__probe_same_f32(float got, float want) {
    if (isnan(want)) return isnan(got);
    return memcmp(&got, &want, sizeof got) == 0;
}

/* Serialises the fd 2 redirection below within the process. */
static pthread_mutex_t stderr_lock = PTHREAD_MUTEX_INITIALIZER;

/* clBuildProgram with file descriptor 2 pointed at an unlinked temp file for
 * the duration, the text kept in `log`. The half-math probe is expected not
 * to build on devices without half, and some compilers (PoCL's clang) print
 * their diagnostics' summary ("1 warning and 4 errors generated.") straight
 * to fd 2 besides the build log, which would reach the terminal of every
 * run, --quiet or not; that text belongs to the probe's detail only.
 * fd 2 is the whole process's: the mutex serialises mpcl's own probes, and
 * anything another thread of the application writes to stderr during the
 * build (milliseconds, once per context) lands in the same file; it is
 * then kept in the detail rather than shown. When no temp file can be made
 * the build runs with stderr as it is. A temp file rather than a pipe, so
 * that a long diagnostic cannot fill a pipe and block the build. */
static cl_int build_capturing_stderr(cl_program p, cl_device_id dev, const char *options,
                                     mpcl__probe_log *log) {
    log->text[0] = '\0';
    pthread_mutex_lock(&stderr_lock);
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = tmp ? dup(STDERR_FILENO) : -1;
    bool redirected = saved >= 0 && dup2(fileno(tmp), STDERR_FILENO) >= 0;
    cl_int err = clBuildProgram(p, 1, &dev, options, NULL, NULL);
    if (redirected) {
        fflush(stderr);
        dup2(saved, STDERR_FILENO);
    }
    if (saved >= 0) close(saved);
    if (tmp) {
        rewind(tmp);
        size_t n = fread(log->text, 1, sizeof log->text - 1, tmp);
        log->text[n] = '\0';
        fclose(tmp);
    }
    pthread_mutex_unlock(&stderr_lock);
    /* One line for the detail: newlines and tabs become spaces, trailing
     * ones go. */
    size_t n = strlen(log->text);
    for (size_t i = 0; i < n; i++)
        if (log->text[i] == '\n' || log->text[i] == '\t' || log->text[i] == '\r')
            log->text[i] = ' ';
    while (n > 0 && log->text[n - 1] == ' ') log->text[--n] = '\0';
    return err;
}

cl_program mpcl__probe_build(cl_context cl, cl_device_id dev, const char *src, const char *options,
                             mpcl__probe_log *log) {
    cl_int err;
    size_t len = strlen(src);
    log->text[0] = '\0';
    cl_program p = clCreateProgramWithSource(cl, 1, &src, &len, &err);
    if (err != CL_SUCCESS) return NULL;
    if (build_capturing_stderr(p, dev, options, log) != CL_SUCCESS) {
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

bool mpcl__probe_run(cl_context cl, cl_command_queue q, cl_program p, const char *name,
                     mpcl__probe_arg args[4], size_t items, size_t local) {
    cl_int err;
    bool ok = false;
    cl_mem mem[4] = {0};
    cl_kernel k = clCreateKernel(p, name, &err);
    if (err != CL_SUCCESS) return false;
    for (int i = 0; i < 4; i++) {
        mem[i] = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, args[i].bytes,
                                args[i].host, &err);
        if (err != CL_SUCCESS) goto cleanup;
        if (clSetKernelArg(k, (cl_uint)i, sizeof(cl_mem), &mem[i]) != CL_SUCCESS) goto cleanup;
    }
    size_t global = items;
    if (clEnqueueNDRangeKernel(q, k, 1, NULL, &global, local ? &local : NULL, 0, NULL, NULL) !=
        CL_SUCCESS)
        goto cleanup;
    for (int i = 0; i < 4; i++) {
        if (args[i].output && clEnqueueReadBuffer(q, mem[i], CL_TRUE, 0, args[i].bytes,
                                                  args[i].host, 0, NULL, NULL) != CL_SUCCESS)
            goto cleanup;
    }
    ok = clFinish(q) == CL_SUCCESS;
cleanup:
    for (int i = 0; i < 4; i++)
        if (mem[i]) clReleaseMemObject(mem[i]);
    clReleaseKernel(k);
    return ok;
}

/* The probe file `name` after common.cl, built for bf16 storage plus
 * `options`, so that it runs the library's own macros; NULL when a source
 * is missing or the build fails. */
cl_program mpcl__probe_build_sources(cl_context cl, cl_device_id dev, const char *const names[],
                                     size_t count, const char *options, mpcl__probe_log *log) {
    char *src = NULL;
    cl_program p = mpcl__cl_sources_join(names, count, &src) == MPCL_OK
                       ? mpcl__probe_build(cl, dev, src, options, log)
                       : NULL;
    free(src);
    return p;
}

cl_program mpcl__probe_build_after_common(cl_context cl, cl_device_id dev, const char *name,
                                          const char *options, mpcl__probe_log *log) {
    const char *const names[] = {"common.cl", name};
    char all_options[160];
    snprintf(all_options, sizeof all_options, "-cl-std=CL1.2 -DMPCL_STORAGE_BF16=1%s", options);
    return mpcl__probe_build_sources(cl, dev, names, 2, all_options, log);
}

/* `total` results were checked; more than `total` wrong means it never ran.
 * What the compiler printed, if anything, follows in brackets. */
void mpcl__probe_describe(char *buf, size_t size, const char *what, int wrong, int total,
                          const mpcl__probe_log *log) {
    int n;
    if (wrong == 0)
        n = snprintf(buf, size, "%s: %d/%d exact", what, total, total);
    else if (wrong > total)
        n = snprintf(buf, size, "%s: did not build or run", what);
    else
        n = snprintf(buf, size, "%s: %d/%d wrong", what, wrong, total);
    if (log->text[0] && n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, " (compiler: %s)", log->text);
}
