/* A data set held on the device: u8 pixels and i32 labels, uploaded once, and
 * batches gathered from them by a kernel in the order of an index tensor. */
#ifndef MPCL_BATCH_H
#define MPCL_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "mpcl/context.h"
#include "mpcl/data.h"
#include "mpcl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

typedef struct mpcl_device_dataset mpcl_device_dataset;

/* Uploads ds (count x features bytes, count labels) to the device. */
mpcl_status mpcl_device_dataset_create(mpcl_context *ctx, const mpcl_dataset *ds,
                                       mpcl_device_dataset **out);
void mpcl_device_dataset_destroy(mpcl_device_dataset *dd);
size_t mpcl_device_dataset_count(const mpcl_device_dataset *dd);
size_t mpcl_device_dataset_features(const mpcl_device_dataset *dd);

/* Enqueues x[b] = pixels[order[first + b]] / 255 in x's dtype and labels[b] =
 * the sample's label, for b < B = rows of x.
 * x: [B, features] f32 or f16; labels: [B, 1] i32; order: [count, 1] i32, a
 * permutation of [0, count) (entries are trusted: upload them from
 * mpcl_shuffle_indices); first + B <= count (MPCL_ERR_SHAPE). */
mpcl_status mpcl_device_dataset_gather(mpcl_context *ctx, const mpcl_device_dataset *dd,
                                       const mpcl_tensor *order, size_t first, mpcl_tensor *x,
                                       mpcl_tensor *labels);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
