/* The layout of the public structs as this library was compiled: sizes and
 * field offsets by name, so that a binding which restates the structs (the
 * Python package's ctypes mirrors) can check its copies against the library
 * at load time instead of trusting the header it was written from. */
#ifndef MPCL_ABI_H
#define MPCL_ABI_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* sizeof the struct named type ("mpcl_model_params"); SIZE_MAX for a type
 * the table does not list. */
size_t mpcl_abi_sizeof(const char *type);
/* offsetof(type, field) ("mpcl_model_params", "loss"); SIZE_MAX for a type
 * or field the table does not list. */
size_t mpcl_abi_offsetof(const char *type, const char *field);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
