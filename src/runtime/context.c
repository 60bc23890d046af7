/* The context: device selection, the OpenCL context and queue, teardown. */
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

#include <clblast_c.h>

#define ERRMSG_BYTES 65536

mpcl_context_params mpcl_context_default_params(void) {
    mpcl_context_params p = {.device = NULL, .verify_fp16 = true};
    return p;
}

mpcl_status mpcl_context_create(const mpcl_context_params *params, mpcl_context **out) {
    *out = NULL;
    mpcl_context_params defaults = mpcl_context_default_params();
    if (!params) params = &defaults;
    mpcl_plan_overrides overrides;
    mpcl_status st = mpcl_plan_overrides_from_env(&overrides);
    if (st != MPCL_OK) return st;

    mpcl_device_list *list = NULL;
    st = mpcl_device_list_create(MPCL_ENUM_DEFAULT, &list);
    if (st != MPCL_OK) return st;
    const char *selector = params->device ? params->device : getenv("MPCL_DEVICE");
    size_t index = 0;
    st = mpcl_device_list_select(list, selector, &index);
    if (st != MPCL_OK) {
        mpcl_device_list_destroy(list);
        return st;
    }

    mpcl_context *ctx = calloc(1, sizeof *ctx);
    char *errmsg = calloc(1, ERRMSG_BYTES);
    if (!ctx || !errmsg) {
        free(ctx);
        free(errmsg);
        mpcl_device_list_destroy(list);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "allocating a context");
    }
    ctx->errmsg = errmsg;
    ctx->overrides = overrides;
    ctx->mma_tile = -1; /* mpcl-mma picks its tile per call */
    ctx->info = *mpcl_device_list_get(list, index);
    mpcl__device_list_ids(list, index, &ctx->platform, &ctx->device);
    mpcl_device_list_destroy(list);
    cl_ulong cache = 0;
    if (clGetDeviceInfo(ctx->device, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof cache, &cache, NULL) ==
        CL_SUCCESS)
        ctx->cache_bytes = (size_t)cache;

    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ctx->platform, 0};
    ctx->cl = clCreateContext(props, 1, &ctx->device, NULL, NULL, &err);
    CHECK_CL(ctx, err);
    if (mpcl__profile_requested() && !(ctx->profile = mpcl__profile_create())) {
        st = MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "allocating the MPCL_PROFILE table");
        goto cleanup;
    }
    ctx->queue = clCreateCommandQueue(ctx->cl, ctx->device,
                                      ctx->profile ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
    CHECK_CL(ctx, err);
    if (params->verify_fp16)
        ctx->verdict_cached =
            mpcl__fp16_verify_cached(ctx->cl, ctx->device, ctx->queue, &ctx->info);
    *out = ctx;
    return MPCL_OK;
cleanup:
    mpcl_context_destroy(ctx);
    return st;
}

void mpcl_context_destroy(mpcl_context *ctx) {
    if (!ctx) return;
    if (ctx->queue) clFinish(ctx->queue);
    mpcl__profile_report(ctx->profile);
    mpcl__profile_destroy(ctx->profile);
    /* CLBlast caches programs per OpenCL context (for every context: it has
     * no per-context call); releasing a context under them corrupts
     * Oclgrind's heap at exit. */
    CLBlastClearCache();
    for (int i = 0; i < ctx->kernel_count; i++) clReleaseKernel(ctx->kernels[i].kernel);
    for (int i = 0; i < MPCL__WORKSPACE_SLOTS; i++)
        if (ctx->workspace[i]) clReleaseMemObject(ctx->workspace[i]);
    for (int i = 0; i < MPCL_DTYPE_COUNT; i++) {
        if (ctx->programs[i]) clReleaseProgram(ctx->programs[i]);
        if (ctx->engine_programs[i]) clReleaseProgram(ctx->engine_programs[i]);
    }
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->cl) clReleaseContext(ctx->cl);
    free(ctx->errmsg);
    free(ctx);
}

const mpcl_device_info *mpcl_context_device(const mpcl_context *ctx) {
    return &ctx->info;
}

const mpcl_plan_overrides *mpcl_context_overrides(const mpcl_context *ctx) {
    return &ctx->overrides;
}

mpcl_plan mpcl_context_plan(const mpcl_context *ctx, mpcl_policy policy) {
    return mpcl_plan_resolve(&ctx->info, policy, &ctx->overrides);
}

const char *mpcl_context_errmsg(const mpcl_context *ctx) {
    return ctx ? ctx->errmsg : mpcl_errmsg();
}

mpcl_status mpcl_context_warm_up(mpcl_context *ctx) {
    cl_program p;
    mpcl_status st = mpcl__program(ctx, MPCL_DTYPE_F32, &p);
    if (st == MPCL_OK && ctx->info.fp16_storage == MPCL_FP16_STORAGE_VERIFIED)
        st = mpcl__program(ctx, MPCL_DTYPE_F16, &p);
    return st;
}

uint64_t mpcl_context_launch_count(const mpcl_context *ctx) {
    return ctx->launches;
}
uint64_t mpcl_context_sync_count(const mpcl_context *ctx) {
    return ctx->syncs;
}

mpcl_status mpcl_context_finish(mpcl_context *ctx) {
    mpcl_status st = MPCL_OK;
    ctx->syncs++;
    CHECK_CL(ctx, clFinish(ctx->queue));
cleanup:
    return st;
}

mpcl_status mpcl__marker(mpcl_context *ctx, cl_event *out) {
    cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, out);
    if (err == CL_SUCCESS) return MPCL_OK;
    *out = NULL;
    return mpcl__cl_error(ctx, err, "clEnqueueMarkerWithWaitList", __FILE__, __LINE__);
}

mpcl_status mpcl__wait_event(mpcl_context *ctx, cl_event e) {
    ctx->syncs++;
    cl_int err = clWaitForEvents(1, &e);
    clReleaseEvent(e);
    if (err != CL_SUCCESS) return mpcl__cl_error(ctx, err, "clWaitForEvents", __FILE__, __LINE__);
    return MPCL_OK;
}

mpcl_status mpcl__host_wrote(mpcl_context *ctx, cl_mem mem) {
    if (strcmp(ctx->info.platform, "Oclgrind") != 0) return MPCL_OK;
    mpcl_status st = MPCL_OK;
    cl_mem whole = NULL;
    size_t bytes = 0;
    unsigned char *host = NULL;
    CHECK_CL(ctx, clGetMemObjectInfo(mem, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof whole, &whole, NULL));
    if (!whole) whole = mem; /* not a sub-buffer */
    CHECK_CL(ctx, clGetMemObjectInfo(whole, CL_MEM_SIZE, sizeof bytes, &bytes, NULL));
    if (!(host = malloc(bytes))) {
        st = MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating %zu bytes for Oclgrind", bytes);
        goto cleanup;
    }
    CHECK_CL(ctx, clEnqueueReadBuffer(ctx->queue, whole, CL_TRUE, 0, bytes, host, 0, NULL, NULL));
    CHECK_CL(ctx, clEnqueueWriteBuffer(ctx->queue, whole, CL_TRUE, 0, bytes, host, 0, NULL, NULL));
cleanup:
    free(host);
    return st;
}

cl_context mpcl_context_cl_context(const mpcl_context *ctx) {
    return ctx->cl;
}
cl_device_id mpcl_context_cl_device(const mpcl_context *ctx) {
    return ctx->device;
}
cl_command_queue mpcl_context_cl_queue(const mpcl_context *ctx) {
    return ctx->queue;
}
