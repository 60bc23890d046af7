/* The io readers' one form for what is wrong inside a file. See io/io.h. */
#include <stdarg.h>
#include <stdio.h>

#include "io/io.h"

mpcl_status mpcl__format_error(const char *path, const char *file, int line, const char *fmt, ...) {
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return mpcl__error(NULL, MPCL_ERR_FORMAT, file, line, "'%s': %s", path, what);
}
