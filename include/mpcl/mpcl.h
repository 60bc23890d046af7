/* mpcl: mixed-precision neural-network training on any OpenCL device. */
#ifndef MPCL_MPCL_H
#define MPCL_MPCL_H

#include "mpcl/status.h"
#include "mpcl/number.h"
#include "mpcl/device.h"
#include "mpcl/plan.h"
#include "mpcl/context.h"
#include "mpcl/half.h"
#include "mpcl/quickbench.h"
#include "mpcl/tensor.h"
#include "mpcl/ops.h"
#include "mpcl/losses.h"
#include "mpcl/gemm.h"
#include "mpcl/conv.h"
#include "mpcl/loss_scale.h"
#include "mpcl/optim.h"
#include "mpcl/rng.h"
#include "mpcl/data.h"
#include "mpcl/npy.h"
#include "mpcl/safetensors.h"
#include "mpcl/batch.h"
#include "mpcl/model.h"
#include "mpcl/dist.h"
#include "mpcl/train.h"
#include "mpcl/checkpoint.h"
#include "mpcl/abi.h"
#include "mpcl/plot.h"
#include "mpcl/files.h"
#include "mpcl/version.h"

#endif
