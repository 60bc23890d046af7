/* The io area's internal declarations, for the areas above it. Nothing here
 * is installed. */
#ifndef MPCL_IO_H
#define MPCL_IO_H

#include "mpcl/batch.h"
#include "mpcl/data.h"
#include "mpcl/safetensors.h"
#include "nn/nn.h"

/* mpcl_safetensors_read on a file image already in memory (size bytes);
 * `name` stands for the path in messages. For the fuzz harnesses and tests:
 * the same checks, the same statuses. */
mpcl_status mpcl__safetensors_parse(const char *name, const void *bytes, size_t size,
                                    mpcl_safetensors **out);

#endif
