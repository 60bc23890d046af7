/* The precision plan: what a policy resolves to on one device, and why.
 * A pure function of the device's capability record and the user's overrides,
 * so that every rule is written once and can be tested on synthetic devices. */
#ifndef MPCL_PLAN_H
#define MPCL_PLAN_H

#include <stdbool.h>

#include "mpcl/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* The storage dtypes, in one table: X(SUFFIX, name, bytes, is_float). It
 * generates the enum, mpcl_dtype_name(), mpcl_dtype_size() and
 * mpcl_dtype_is_float(); the kernels area builds one program per float dtype
 * with -DMPCL_STORAGE_<SUFFIX>=1. Values are fixed by the order here: append
 * only. Float dtypes may hold activations, weights and gradients (math is
 * always f32; f16 is IEEE binary16, bf16 is the top half of an f32, both
 * rounded to nearest even); u8 holds data sets on the device. */
#define MPCL_DTYPE_TABLE(X) \
    X(F32, "f32", 4, true)  \
    X(F16, "f16", 2, true)  \
    X(I32, "i32", 4, false) \
    X(U8, "u8", 1, false)   \
    X(BF16, "bf16", 2, true)

typedef enum mpcl_dtype {
#define MPCL_DTYPE_ENUM_(suffix, name, bytes, is_float) MPCL_DTYPE_##suffix,
    MPCL_DTYPE_TABLE(MPCL_DTYPE_ENUM_)
#undef MPCL_DTYPE_ENUM_
        MPCL_DTYPE_COUNT,
} mpcl_dtype;

typedef enum mpcl_policy {
    MPCL_POLICY_AUTO,
    MPCL_POLICY_MIXED_FLOAT16,
    MPCL_POLICY_FLOAT32,
    MPCL_POLICY_MIXED_BFLOAT16,
    MPCL_POLICY_COUNT,
} mpcl_policy;

typedef enum mpcl_gemm_path {
    MPCL_GEMM_CLBLAST_SGEMM, /* f32 in, out and accumulation */
    MPCL_GEMM_CLBLAST_HGEMM, /* f16 in and out, accumulates in f16: needs fp16 math */
    MPCL_GEMM_MPCL_F32,      /* mpcl's register-tiled kernel, f32 storage */
    MPCL_GEMM_MPCL_MIXED,    /* the same kernel, f16 or bf16 storage, f32 accumulation */
    /* f16 or bf16 storage through CLBlast SGEMM: A and B widened to f32
     * workspaces (exactly), f32 accumulation, C rounded once. For GPUs, where
     * the tuned SGEMM outruns mpcl's CPU-shaped kernel by far. */
    MPCL_GEMM_CLBLAST_STAGED,
    /* f16 or bf16 storage on the device's matrix engine (tensor cores), f32
     * accumulation, C in the same dtype (rounded once) or f32: only where the
     * engine verified (mpcl_device_info.matrix_engine). */
    MPCL_GEMM_MPCL_MMA,
    MPCL_GEMM_PATH_COUNT,
} mpcl_gemm_path;

/* MPCL_FP16: how much to trust the device's half arithmetic. */
typedef enum mpcl_fp16_override {
    MPCL_FP16_DEFAULT, /* use half arithmetic only where declared and verified */
    MPCL_FP16_FORCE,   /* also where it works without being declared */
    MPCL_FP16_OFF,     /* never use half arithmetic (f16 storage is still allowed) */
} mpcl_fp16_override;

typedef struct mpcl_plan_overrides {
    mpcl_fp16_override fp16;
    bool gemm_set; /* MPCL_GEMM was given */
    mpcl_gemm_path gemm;
} mpcl_plan_overrides;

typedef struct mpcl_plan {
    mpcl_policy policy;   /* what was asked for */
    mpcl_policy resolved; /* FLOAT32, MIXED_FLOAT16 or MIXED_BFLOAT16, never AUTO */
    mpcl_dtype storage;   /* activations, gradients and the working copy of weights */
    mpcl_gemm_path gemm;
    bool loss_scaling;
    bool usable; /* false when an override asks for what the device cannot do */
    char reason[256];
} mpcl_plan;

/* Reads MPCL_FP16 (force|off) and MPCL_GEMM (a path name). An unknown value
 * is MPCL_ERR_INVALID_ARG, with the accepted values in mpcl_errmsg(). */
mpcl_status mpcl_plan_overrides_from_env(mpcl_plan_overrides *out);

mpcl_plan mpcl_plan_resolve(const mpcl_device_info *device, mpcl_policy policy,
                            const mpcl_plan_overrides *overrides);

/* Whether the device may run half arithmetic under the override. */
bool mpcl_plan_fp16_math_usable(const mpcl_device_info *device, mpcl_fp16_override fp16);

/* Whether CLBlast's HGEMM may run: half arithmetic usable and cl_khr_fp16
 * declared, since CLBlast reads the extension list and refuses HGEMM without
 * it (CLBlastNoHalfPrecision, seen on NVIDIA under MPCL_FP16=force). */
bool mpcl_plan_hgemm_usable(const mpcl_device_info *device, mpcl_fp16_override fp16);
/* Whether the device's matrix engine verified, so that mpcl-mma runs. */
bool mpcl_plan_mma_usable(const mpcl_device_info *device);

const char *mpcl_policy_name(mpcl_policy policy);
const char *mpcl_dtype_name(mpcl_dtype dtype);
/* True for f32, f16 and bf16: the dtypes that may hold activations, weights
 * and gradients (and that have a kernel program); false outside the enum. */
bool mpcl_dtype_is_float(mpcl_dtype dtype);
const char *mpcl_gemm_path_name(mpcl_gemm_path path);
/* Name to value; false for an unknown name. */
bool mpcl_policy_parse(const char *name, mpcl_policy *out);
bool mpcl_gemm_path_parse(const char *name, mpcl_gemm_path *out);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
