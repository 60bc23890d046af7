/* CLBlast status codes to mpcl status, with CLBlast's name in the message. */
#ifndef MPCL_CLBLAST_STATUS_H
#define MPCL_CLBLAST_STATUS_H

#include "runtime/runtime.h"

const char *mpcl__clblast_name(int code);
mpcl_status mpcl__clblast_error(mpcl_context *ctx, int code, const char *call, const char *file,
                                int line);

#define CHECK_CLBLAST(ctx, call)                                                             \
    do {                                                                                     \
        int check_clblast_code_ = (int)(call);                                               \
        if (check_clblast_code_ != 0) {                                                      \
            st = mpcl__clblast_error((ctx), check_clblast_code_, #call, __FILE__, __LINE__); \
            goto cleanup;                                                                    \
        }                                                                                    \
    } while (0)

#endif
