/* The precision plan: the one place where a policy becomes storage dtypes, a
 * GEMM path and loss scaling on a given device. Pure: no OpenCL, no globals
 * (the environment is read only by mpcl_plan_overrides_from_env, through
 * env.c). */
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"

static const char *const policy_names[MPCL_POLICY_COUNT] = {"auto", "mixed_float16", "float32",
                                                            "mixed_bfloat16"};
const char *const mpcl__gemm_path_names[MPCL_GEMM_PATH_COUNT + 1] = {
    "clblast-sgemm", "clblast-hgemm", "mpcl-f32", "mpcl-mixed", "clblast-staged", "mpcl-mma", NULL};

const char *mpcl_policy_name(mpcl_policy policy) {
    return (unsigned)policy < MPCL_POLICY_COUNT ? policy_names[policy] : "unknown";
}

const char *mpcl_gemm_path_name(mpcl_gemm_path path) {
    return (unsigned)path < MPCL_GEMM_PATH_COUNT ? mpcl__gemm_path_names[path] : "unknown";
}

#define DTYPE_NAME_(suffix, name, bytes, is_float) [MPCL_DTYPE_##suffix] = name,
static const char *const dtype_names[MPCL_DTYPE_COUNT] = {MPCL_DTYPE_TABLE(DTYPE_NAME_)};
#undef DTYPE_NAME_
#define DTYPE_FLOAT_(suffix, name, bytes, is_float) [MPCL_DTYPE_##suffix] = is_float,
static const bool dtype_float[MPCL_DTYPE_COUNT] = {MPCL_DTYPE_TABLE(DTYPE_FLOAT_)};
#undef DTYPE_FLOAT_

const char *mpcl_dtype_name(mpcl_dtype dtype) {
    return (unsigned)dtype < MPCL_DTYPE_COUNT ? dtype_names[dtype] : "unknown";
}

bool mpcl_dtype_is_float(mpcl_dtype dtype) {
    return (unsigned)dtype < MPCL_DTYPE_COUNT && dtype_float[dtype];
}

bool mpcl_policy_parse(const char *name, mpcl_policy *out) {
    for (int i = 0; i < MPCL_POLICY_COUNT; i++) {
        if (name && strcmp(name, policy_names[i]) == 0) {
            *out = (mpcl_policy)i;
            return true;
        }
    }
    return false;
}

bool mpcl_gemm_path_parse(const char *name, mpcl_gemm_path *out) {
    for (int i = 0; i < MPCL_GEMM_PATH_COUNT; i++) {
        if (name && strcmp(name, mpcl__gemm_path_names[i]) == 0) {
            *out = (mpcl_gemm_path)i;
            return true;
        }
    }
    return false;
}

mpcl_status mpcl_plan_overrides_from_env(mpcl_plan_overrides *out) {
    memset(out, 0, sizeof *out);
    mpcl_status st = mpcl__env_check();
    if (st != MPCL_OK) return st;
    const char *fp16 = mpcl__env_value(MPCL_ENV_FP16);
    if (fp16) out->fp16 = strcmp(fp16, "force") == 0 ? MPCL_FP16_FORCE : MPCL_FP16_OFF;
    out->gemm_set = mpcl_gemm_path_parse(mpcl__env_value(MPCL_ENV_GEMM), &out->gemm);
    return MPCL_OK;
}

bool mpcl_plan_fp16_math_usable(const mpcl_device_info *d, mpcl_fp16_override fp16) {
    if (fp16 == MPCL_FP16_OFF) return false;
    if (d->fp16_math == MPCL_FP16_MATH_VERIFIED) return true;
    return fp16 == MPCL_FP16_FORCE && d->fp16_math == MPCL_FP16_MATH_UNDECLARED_BUT_WORKS;
}

bool mpcl_plan_hgemm_usable(const mpcl_device_info *d, mpcl_fp16_override fp16) {
    return mpcl_plan_fp16_math_usable(d, fp16) && d->has_fp16_extension;
}

bool mpcl_plan_mma_usable(const mpcl_device_info *d) {
    return d->matrix_engine == MPCL_MATRIX_ENGINE_VERIFIED;
}

/* Why half arithmetic is off the table, in words a user can act on. */
static const char *why_no_fp16_math(const mpcl_device_info *d, mpcl_fp16_override fp16) {
    if (fp16 == MPCL_FP16_OFF) return "MPCL_FP16=off";
    switch (d->fp16_math) {
    case MPCL_FP16_MATH_DECLARED_BUT_BROKEN:
        return "device declares cl_khr_fp16 but its half arithmetic failed verification";
    case MPCL_FP16_MATH_UNDECLARED_BUT_WORKS:
        return "half arithmetic works but cl_khr_fp16 is not declared (MPCL_FP16=force opts in)";
    case MPCL_FP16_MATH_UNTESTED: return "half arithmetic was not verified";
    default: return "device lacks cl_khr_fp16";
    }
}

/* The GEMM rule, in one place. f32: on CPUs mpcl's register-tiled kernel
 * (PoCL, 128x128x784: ~250-330 GFLOP/s against ~19 for untuned CLBlast), on
 * GPUs CLBlast's tuned SGEMM. 16-bit storage: the matrix engine where it
 * verified (on an H200, mma.sync's register ceiling is ~640 TFLOP/s against
 * CLBlast SGEMM's 14.6); else f16 on CLBlast HGEMM where half arithmetic is
 * usable; else, and for bf16 (CLBlast has no bf16 GEMM), f32 accumulation:
 * mpcl-mixed on CPUs, clblast-staged elsewhere (an H200 ran mpcl-mixed at 229
 * GFLOP/s at 1024^3, CLBlast SGEMM at 14.6 TFLOP/s; bench/README.md). */
static mpcl_gemm_path default_gemm(const mpcl_device_info *d, mpcl_dtype storage, bool hgemm) {
    bool cpu = d->type == MPCL_DEVICE_TYPE_CPU;
    bool sixteen = storage == MPCL_DTYPE_F16 || storage == MPCL_DTYPE_BF16;
    if (sixteen && mpcl_plan_mma_usable(d)) return MPCL_GEMM_MPCL_MMA;
    if (storage == MPCL_DTYPE_F16 && hgemm) return MPCL_GEMM_CLBLAST_HGEMM;
    if (storage == MPCL_DTYPE_F16 || storage == MPCL_DTYPE_BF16)
        return cpu ? MPCL_GEMM_MPCL_MIXED : MPCL_GEMM_CLBLAST_STAGED;
    return cpu ? MPCL_GEMM_MPCL_F32 : MPCL_GEMM_CLBLAST_SGEMM;
}

/* Whether a GEMM path reads and writes tensors of this storage dtype. */
static bool gemm_takes(mpcl_gemm_path path, mpcl_dtype storage) {
    switch (path) {
    case MPCL_GEMM_CLBLAST_HGEMM: return storage == MPCL_DTYPE_F16;
    case MPCL_GEMM_MPCL_MIXED:
    case MPCL_GEMM_CLBLAST_STAGED:
    case MPCL_GEMM_MPCL_MMA: return storage == MPCL_DTYPE_F16 || storage == MPCL_DTYPE_BF16;
    default: return storage == MPCL_DTYPE_F32;
    }
}

static void set_float32(mpcl_plan *p, const mpcl_device_info *d) {
    p->resolved = MPCL_POLICY_FLOAT32;
    p->storage = MPCL_DTYPE_F32;
    p->gemm = default_gemm(d, MPCL_DTYPE_F32, false);
    p->loss_scaling = false;
}

/* MPCL_GEMM: honoured when the storage and the device allow it, else the plan
 * is marked unusable with the reason. */
static void apply_gemm_override(mpcl_plan *p, const mpcl_device_info *d, bool fp16_math, bool hgemm,
                                const mpcl_gemm_path *gemm) {
    if (!gemm) return;
    if (!gemm_takes(*gemm, p->storage)) {
        p->usable = false;
        const char *needs = *gemm == MPCL_GEMM_CLBLAST_HGEMM     ? "f16"
                            : gemm_takes(*gemm, MPCL_DTYPE_BF16) ? "f16 or bf16"
                                                                 : "f32";
        snprintf(p->reason, sizeof p->reason, "MPCL_GEMM=%s needs %s storage, but %s stores %s%s",
                 mpcl_gemm_path_name(*gemm), needs, mpcl_policy_name(p->resolved),
                 mpcl_dtype_name(p->storage),
                 p->storage == MPCL_DTYPE_BF16
                     ? " (CLBlast has no bf16 GEMM: use mpcl-mixed or clblast-staged)"
                     : "");
        return;
    }
    if (*gemm == MPCL_GEMM_CLBLAST_HGEMM && !hgemm) {
        p->usable = false;
        snprintf(p->reason, sizeof p->reason, "%s",
                 fp16_math ? "MPCL_GEMM=clblast-hgemm needs cl_khr_fp16 declared (CLBlast checks "
                             "the extension list), which this device does not declare"
                           : "MPCL_GEMM=clblast-hgemm needs half arithmetic, which this device "
                             "cannot use");
        return;
    }
    if (*gemm == MPCL_GEMM_MPCL_MMA && !mpcl_plan_mma_usable(d)) {
        p->usable = false;
        /* The detail may fill the reason: cut there, the head says what matters. */
        int n = snprintf(p->reason, sizeof p->reason,
                         "MPCL_GEMM=mpcl-mma needs a verified matrix engine; this device's is %s (",
                         mpcl_matrix_engine_name(d->matrix_engine));
        size_t room = sizeof p->reason - (size_t)n;
        size_t len = strnlen(d->matrix_engine_detail, room - 2);
        memcpy(p->reason + n, d->matrix_engine_detail, len);
        memcpy(p->reason + n + len, ")", 2);
        return;
    }
    p->gemm = *gemm;
    size_t n = strlen(p->reason);
    snprintf(p->reason + n, sizeof p->reason - n, "; GEMM set by MPCL_GEMM");
}

/* Half arithmetic forced on a device that does not declare cl_khr_fp16:
 * mpcl's kernels never use it (docs/ARCHITECTURE.md, The precision plan) and
 * CLBlast refuses HGEMM. */
#define NO_HGEMM_REASON                                                               \
    "(MPCL_FP16=force), GEMM accumulating in f32: CLBlast's HGEMM needs cl_khr_fp16 " \
    "declared"

mpcl_plan mpcl_plan_resolve(const mpcl_device_info *d, mpcl_policy policy,
                            const mpcl_plan_overrides *overrides) {
    mpcl_plan_overrides none = {0};
    if (!overrides) overrides = &none;
    mpcl_plan p;
    memset(&p, 0, sizeof p);
    p.policy = policy;
    p.usable = true;
    bool fp16_math = mpcl_plan_fp16_math_usable(d, overrides->fp16);
    bool hgemm = mpcl_plan_hgemm_usable(d, overrides->fp16);
    bool f16_storage = d->fp16_storage == MPCL_FP16_STORAGE_VERIFIED;
    bool bf16_storage = d->bf16_storage == MPCL_BF16_STORAGE_VERIFIED;

    switch (policy) {
    case MPCL_POLICY_FLOAT32:
        set_float32(&p, d);
        snprintf(p.reason, sizeof p.reason, "float32 requested: f32 everywhere");
        break;
    case MPCL_POLICY_AUTO:
        if (fp16_math && f16_storage) {
            p.resolved = MPCL_POLICY_MIXED_FLOAT16;
            p.storage = MPCL_DTYPE_F16;
            p.gemm = default_gemm(d, MPCL_DTYPE_F16, hgemm);
            p.loss_scaling = true;
            snprintf(p.reason, sizeof p.reason, "device has verified fp16 math: mixed_float16 %s",
                     p.gemm == MPCL_GEMM_MPCL_MMA ? "accumulating in f32"
                     : hgemm                      ? "with HGEMM"
                                                  : NO_HGEMM_REASON);
        } else {
            set_float32(&p, d);
            snprintf(p.reason, sizeof p.reason, "%s: float32",
                     f16_storage ? why_no_fp16_math(d, overrides->fp16)
                                 : "f16 storage failed verification");
        }
        break;
    case MPCL_POLICY_MIXED_BFLOAT16:
        if (!bf16_storage) {
            set_float32(&p, d);
            p.usable = false;
            snprintf(p.reason, sizeof p.reason,
                     "mixed_bfloat16 needs bf16 storage, and the bf16 store/load kernel %s on this "
                     "device",
                     d->bf16_storage == MPCL_BF16_STORAGE_UNTESTED ? "was not run"
                                                                   : "failed verification");
            break;
        }
        /* As Keras' mixed_bfloat16: bf16 has f32's exponent range, so the
         * small gradients f16 loses (below 2^-24) are normal bf16 numbers and
         * nothing overflows before f32 would; loss scaling is off by default. */
        p.resolved = MPCL_POLICY_MIXED_BFLOAT16;
        p.storage = MPCL_DTYPE_BF16;
        p.gemm = default_gemm(d, MPCL_DTYPE_BF16, hgemm);
        p.loss_scaling = false;
        snprintf(p.reason, sizeof p.reason,
                 "bf16 storage with f32 math; the GEMM accumulates in f32 (CLBlast has no bf16 "
                 "GEMM); no loss scaling (bf16 has f32's exponent range)");
        break;
    case MPCL_POLICY_MIXED_FLOAT16:
    default:
        if (!f16_storage) {
            set_float32(&p, d);
            p.policy = policy;
            p.usable = false;
            snprintf(p.reason, sizeof p.reason,
                     "mixed_float16 needs f16 storage, and vload_half/vstore_half_rte failed "
                     "verification on this device");
            break;
        }
        p.resolved = MPCL_POLICY_MIXED_FLOAT16;
        p.storage = MPCL_DTYPE_F16;
        p.gemm = default_gemm(d, MPCL_DTYPE_F16, hgemm);
        p.loss_scaling = true;
        if (fp16_math)
            snprintf(p.reason, sizeof p.reason, "device has verified fp16 math: f16 storage, %s",
                     p.gemm == MPCL_GEMM_MPCL_MMA ? "GEMM accumulates in f32"
                     : hgemm                      ? "HGEMM"
                                                  : NO_HGEMM_REASON);
        else
            snprintf(p.reason, sizeof p.reason,
                     "%s: f16 storage with f32 math, GEMM accumulates in f32",
                     why_no_fp16_math(d, overrides->fp16));
        break;
    }
    if (p.usable && overrides->gemm_set)
        apply_gemm_override(&p, d, fp16_math, hgemm, &overrides->gemm);
    else if (p.usable && p.gemm == MPCL_GEMM_MPCL_MMA) {
        size_t n = strlen(p.reason);
        snprintf(p.reason + n, sizeof p.reason - n, "; GEMMs on the matrix engine (%s)",
                 d->matrix_engine_kind);
    }
    return p;
}
