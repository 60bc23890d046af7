/* Status names and sentences, and the per-thread / per-context error detail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

#define MPCL__ERRMSG_SIZE 65536 /* room for a whole build log */

static _Thread_local char thread_errmsg[MPCL__ERRMSG_SIZE];

const char *mpcl_status_name(mpcl_status status) {
    switch (status) {
#define MPCL_STATUS_NAME_(name, sentence) \
    case MPCL_##name: return "MPCL_" #name;
        MPCL_STATUS_MAP(MPCL_STATUS_NAME_)
#undef MPCL_STATUS_NAME_
    default: return "MPCL_STATUS_UNKNOWN";
    }
}

const char *mpcl_status_str(mpcl_status status) {
    switch (status) {
#define MPCL_STATUS_STR_(name, sentence) \
    case MPCL_##name: return sentence;
        MPCL_STATUS_MAP(MPCL_STATUS_STR_)
#undef MPCL_STATUS_STR_
    default: return "unknown status";
    }
}

const char *mpcl_errmsg(void) {
    return thread_errmsg;
}

static void copy_to_context(mpcl_context *ctx) {
    if (ctx && ctx->errmsg) memcpy(ctx->errmsg, thread_errmsg, strlen(thread_errmsg) + 1);
}

mpcl_status mpcl__error(mpcl_context *ctx, mpcl_status status, const char *file, int line,
                        const char *fmt, ...) {
    /* Only the file's base name: build paths say nothing to a user. */
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int n = snprintf(thread_errmsg, sizeof thread_errmsg, "%s: ", mpcl_status_name(status));
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof thread_errmsg)
        n += vsnprintf(thread_errmsg + n, sizeof thread_errmsg - (size_t)n, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof thread_errmsg)
        snprintf(thread_errmsg + n, sizeof thread_errmsg - (size_t)n, " (%s:%d)", base, line);
    copy_to_context(ctx);
    return status;
}

void mpcl__error_append(mpcl_context *ctx, const char *text) {
    size_t n = strlen(thread_errmsg);
    snprintf(thread_errmsg + n, sizeof thread_errmsg - n, "%s", text);
    copy_to_context(ctx);
}

mpcl_status mpcl__error_restore(mpcl_context *ctx, mpcl_status status, const char *text) {
    snprintf(thread_errmsg, sizeof thread_errmsg, "%s", text);
    copy_to_context(ctx);
    return status;
}

mpcl_status mpcl__error_to_context(mpcl_context *ctx, mpcl_status status) {
    copy_to_context(ctx);
    return status;
}

mpcl_status mpcl__cl_status(cl_int err) {
    switch (err) {
    case CL_SUCCESS: return MPCL_OK;
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
    case CL_OUT_OF_HOST_MEMORY:
    case CL_INVALID_BUFFER_SIZE: return MPCL_ERR_OUT_OF_MEMORY;
    case CL_BUILD_PROGRAM_FAILURE:
    case CL_COMPILE_PROGRAM_FAILURE:
    case CL_LINK_PROGRAM_FAILURE: return MPCL_ERR_BUILD;
    case CL_DEVICE_NOT_FOUND: return MPCL_ERR_NO_DEVICE;
    case -1001: /* CL_PLATFORM_NOT_FOUND_KHR */ return MPCL_ERR_NO_PLATFORM;
    default: return MPCL_ERR_OPENCL;
    }
}

mpcl_status mpcl__cl_error(mpcl_context *ctx, cl_int err, const char *call, const char *file,
                           int line) {
    return mpcl__error(ctx, mpcl__cl_status(err), file, line, "%s returned %s (%d)", call,
                       mpcl_cl_error_name(err), (int)err);
}

const char *mpcl_version(void) {
    return MPCL_VERSION;
}
