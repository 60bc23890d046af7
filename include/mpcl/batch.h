/* A data set for the batches of a training loop: held on the device (its
 * features as stored, u8, f32 or f16, and its i32 labels or f32 targets,
 * uploaded once, and batches gathered from them by a kernel in the order of
 * an index tensor), or, when it does not fit the device, streamed: each
 * batch gathered on the host in the same order, converted as the kernel
 * converts, and uploaded, so that both give the same batches bit for bit. */
#ifndef MPCL_BATCH_H
#define MPCL_BATCH_H

#include <stdbool.h>
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

/* Where a data set's batches come from. AUTO: the device when the data set
 * fits it, else streamed. It fits when each of its buffers fits the device's
 * largest allocation and all of them fit its global memory less what ctx
 * already holds (mpcl_context_bytes_now: the trainer's model and batch
 * buffers, and its training set when it places the test set). DEVICE: held
 * on the device, refused as mpcl_device_dataset_create refuses what does not
 * fit. STREAM: streamed, fitting or not. */
typedef enum mpcl_data_placement {
    MPCL_DATA_AUTO,
    MPCL_DATA_DEVICE,
    MPCL_DATA_STREAM
} mpcl_data_placement;

/* ds placed as `placement` says; a streamed data set keeps a host copy of
 * ds. MPCL_ERR_OUT_OF_MEMORY as mpcl_device_dataset_create. */
mpcl_status mpcl_device_dataset_place(mpcl_context *ctx, const mpcl_dataset *ds,
                                      mpcl_data_placement placement, mpcl_device_dataset **out);
void mpcl_device_dataset_destroy(mpcl_device_dataset *dd);
/* Whether the batches are gathered on the host and uploaded. */
bool mpcl_device_dataset_streamed(const mpcl_device_dataset *dd);
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
/* The same batch from either placement: gathered on the device from order
 * when the data set is held there; when it is streamed, gathered on the host
 * from host_order (the same permutation, count entries, checked) into one
 * of a few staging buffers, used in turn, and its uploads into x and y
 * enqueued without a wait (a buffer is refilled once its uploads are done),
 * so the host gathers the next batch while the device runs the last step
 * (MPCL_ERR_INVALID_ARG for a NULL host_order). mpcl_device_dataset_gather
 * refuses a streamed data set the same way. */
mpcl_status mpcl_device_dataset_batch(mpcl_context *ctx, mpcl_device_dataset *dd,
                                      const mpcl_tensor *order, const int32_t *host_order,
                                      size_t first, mpcl_tensor *x, mpcl_tensor *y);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
