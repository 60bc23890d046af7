/* A data set held on the device: its features as stored (u8, f32 or f16)
 * and its i32 labels or f32 targets, uploaded once, and batches gathered
 * from them by a kernel in the order of an index tensor. */
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

/* Uploads ds (count x features in its x dtype; count i32 labels or count x
 * target_cols f32 targets) to the device. Data that do not fit it (a buffer
 * over its largest allocation, or all of them over its global memory) are
 * refused with MPCL_ERR_OUT_OF_MEMORY naming the sizes, before anything is
 * allocated. */
mpcl_status mpcl_device_dataset_create(mpcl_context *ctx, const mpcl_dataset *ds,
                                       mpcl_device_dataset **out);
void mpcl_device_dataset_destroy(mpcl_device_dataset *dd);
size_t mpcl_device_dataset_count(const mpcl_device_dataset *dd);
size_t mpcl_device_dataset_features(const mpcl_device_dataset *dd);
/* The f32 target columns; 0 for a data set of labels. */
size_t mpcl_device_dataset_target_cols(const mpcl_device_dataset *dd);

/* Enqueues x[b] = the features of sample order[first + b] in x's dtype (u8
 * as byte / 255, f32 and f16 as they are, rounded as x's dtype rounds) and
 * y[b] = its label or target row, for b < B = rows of x.
 * x: [B, features] f32, f16 or bf16; y: [B, 1] i32 for labels, [B,
 * target_cols] f32 for targets (MPCL_ERR_DTYPE otherwise); order: [count,
 * 1] i32, a permutation of [0, count) (entries are trusted: upload them from
 * mpcl_shuffle_indices); first + B <= count (MPCL_ERR_SHAPE). */
mpcl_status mpcl_device_dataset_gather(mpcl_context *ctx, const mpcl_device_dataset *dd,
                                       const mpcl_tensor *order, size_t first, mpcl_tensor *x,
                                       mpcl_tensor *y);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
