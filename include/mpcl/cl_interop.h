/* OpenCL handles behind an mpcl context, for code that mixes its own OpenCL
 * with mpcl. Kept apart so that the other headers need no OpenCL include. */
#ifndef MPCL_CL_INTEROP_H
#define MPCL_CL_INTEROP_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "mpcl/context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

cl_context mpcl_context_cl_context(const mpcl_context *ctx);
cl_device_id mpcl_context_cl_device(const mpcl_context *ctx);
cl_command_queue mpcl_context_cl_queue(const mpcl_context *ctx);

typedef struct mpcl_tensor mpcl_tensor; /* mpcl/tensor.h */
/* The buffer behind a tensor; it stays owned by the tensor. */
cl_mem mpcl_tensor_cl_mem(const mpcl_tensor *t);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
