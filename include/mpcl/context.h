/* The context: one device, its queue, its built programs, its error detail and
 * its memory accounting. Every call that touches a device takes one. */
#ifndef MPCL_CONTEXT_H
#define MPCL_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "mpcl/device.h"
#include "mpcl/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

typedef struct mpcl_context mpcl_context;

typedef struct mpcl_context_params {
    /* Device selector (see mpcl_device_list_select); NULL means $MPCL_DEVICE,
     * and when that is unset too, the default rule. */
    const char *device;
    /* Run the fp16 and bf16 verification kernels (needed for the plan); default true. */
    bool verify_fp16;
} mpcl_context_params;

mpcl_context_params mpcl_context_default_params(void);

/* Selects the device, creates the OpenCL context and an in-order queue, and
 * reads MPCL_FP16 / MPCL_GEMM. Programs are built on first use. */
mpcl_status mpcl_context_create(const mpcl_context_params *params, mpcl_context **out);
void mpcl_context_destroy(mpcl_context *ctx);

const mpcl_device_info *mpcl_context_device(const mpcl_context *ctx);
const mpcl_plan_overrides *mpcl_context_overrides(const mpcl_context *ctx);
/* The plan for a policy on this context's device, under its overrides. */
mpcl_plan mpcl_context_plan(const mpcl_context *ctx, mpcl_policy policy);

/* Detail of the last failure of a call made with this context. */
const char *mpcl_context_errmsg(const mpcl_context *ctx);

/* Builds (or loads from the binary cache) the programs for these storage
 * dtypes now rather than on first use; the tools call it at start-up. */
mpcl_status mpcl_context_warm_up(mpcl_context *ctx);

/* Counters for benchmarks and tests: commands launched (mpcl kernels and
 * CLBlast calls) and blocking calls made (finishes, blocking transfers, event
 * waits) since the context was created. A model's training step adds launches
 * and no blocking call; the trainer's loop adds one wait per step, for the
 * step MPCL_TRAIN_QUEUE_AHEAD back (a bound on how far it runs ahead). */
uint64_t mpcl_context_launch_count(const mpcl_context *ctx);
uint64_t mpcl_context_sync_count(const mpcl_context *ctx);

/* Waits for everything enqueued so far. */
mpcl_status mpcl_context_finish(mpcl_context *ctx);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
