/* mpcl status codes: one X-macro list generates the enum, the names and the
 * sentences, so the three cannot drift apart. */
#ifndef MPCL_STATUS_H
#define MPCL_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* X(suffix, sentence) */
#define MPCL_STATUS_MAP(X)                             \
    X(OK, "success")                                   \
    X(ERR_INVALID_ARG, "invalid argument")             \
    X(ERR_NO_PLATFORM, "no OpenCL platform found")     \
    X(ERR_NO_DEVICE, "no matching OpenCL device")      \
    X(ERR_OPENCL, "an OpenCL call failed")             \
    X(ERR_BUILD, "OpenCL program build failed")        \
    X(ERR_OUT_OF_MEMORY, "out of memory")              \
    X(ERR_UNSUPPORTED, "not supported on this device") \
    X(ERR_SHAPE, "tensor shapes do not fit")           \
    X(ERR_DTYPE, "tensor dtype not allowed here")      \
    X(ERR_LABEL, "label out of range")                 \
    X(ERR_CLBLAST, "a CLBlast call failed")            \
    X(ERR_IO, "file input/output failed")              \
    X(ERR_FORMAT, "malformed file")                    \
    X(ERR_DIST, "data-parallel replicas disagree or one failed")

typedef enum mpcl_status {
#define MPCL_STATUS_ENUM_(name, sentence) MPCL_##name,
    MPCL_STATUS_MAP(MPCL_STATUS_ENUM_)
#undef MPCL_STATUS_ENUM_
        MPCL_STATUS_COUNT
} mpcl_status;

/* "MPCL_ERR_NO_DEVICE"; "MPCL_STATUS_UNKNOWN" for a value outside the enum. */
const char *mpcl_status_name(mpcl_status status);

/* "no matching OpenCL device"; never NULL. */
const char *mpcl_status_str(mpcl_status status);

/* The detail of the last failure on this thread: the failing call, the OpenCL
 * error name, file and line, and for a build failure the whole build log.
 * Calls made with a context also keep it there (mpcl_context_errmsg). */
const char *mpcl_errmsg(void);

/* "CL_INVALID_VALUE" for -30; "CL_UNKNOWN_ERROR" for codes OpenCL does not name. */
const char *mpcl_cl_error_name(int cl_error);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
