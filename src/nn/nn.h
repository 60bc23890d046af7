/* The nn area's internal declarations, for the areas above it. Nothing here
 * is installed. */
#ifndef MPCL_NN_H
#define MPCL_NN_H

#include "compute/compute.h"
#include "mpcl/model.h"

#endif
