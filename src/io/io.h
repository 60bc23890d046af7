/* The io area's internal declarations, for the areas above it. Nothing here
 * is installed. */
#ifndef MPCL_IO_H
#define MPCL_IO_H

#include "mpcl/batch.h"
#include "mpcl/data.h"
#include "mpcl/safetensors.h"
#include "nn/nn.h"

#endif
