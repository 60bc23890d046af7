/* Devices: enumeration, capabilities, selection, and the precision plan. */
#ifndef MPCL_DEVICE_H
#define MPCL_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mpcl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

typedef enum mpcl_device_type {
    MPCL_DEVICE_TYPE_CPU,
    MPCL_DEVICE_TYPE_GPU,
    MPCL_DEVICE_TYPE_ACCELERATOR,
    MPCL_DEVICE_TYPE_OTHER,
} mpcl_device_type;

/* What running a kernel with `half` arithmetic showed, against what the
 * device declares (cl_khr_fp16). Only the numbers count, never the build. */
typedef enum mpcl_fp16_math {
    MPCL_FP16_MATH_NONE,                 /* not declared, and does not run */
    MPCL_FP16_MATH_VERIFIED,             /* declared, and the numbers are right */
    MPCL_FP16_MATH_DECLARED_BUT_BROKEN,  /* declared, numbers wrong or not written */
    MPCL_FP16_MATH_UNDECLARED_BUT_WORKS, /* not declared, yet the numbers are right */
    MPCL_FP16_MATH_UNTESTED,             /* verification was not asked for */
} mpcl_fp16_math;

/* vload_half / vstore_half_rte with float math: OpenCL 1.2 core. */
typedef enum mpcl_fp16_storage {
    MPCL_FP16_STORAGE_VERIFIED,
    MPCL_FP16_STORAGE_BROKEN,
    MPCL_FP16_STORAGE_UNTESTED,
} mpcl_fp16_storage;

/* bf16 storage through common.cl's integer LOAD/STORE (bits << 16 and a
 * round-to-nearest-even store), checked bit for bit against the host's
 * conversion: no extension is needed, so only a wrong compiler can fail it. */
typedef enum mpcl_bf16_storage {
    MPCL_BF16_STORAGE_VERIFIED,
    MPCL_BF16_STORAGE_BROKEN,
    MPCL_BF16_STORAGE_UNTESTED,
} mpcl_bf16_storage;

/* AVX512-BF16's dot product of bf16 pairs (vdpbf16ps) inside OpenCL C, for
 * mpcl's bf16 GEMM on CPU devices: run only on a CPU device of an x86 host
 * whose CPU has the instruction, and checked bit for bit against the host's
 * model of it. */
typedef enum mpcl_bf16_dot {
    MPCL_BF16_DOT_NONE,     /* not a CPU device, or the host CPU lacks the instruction */
    MPCL_BF16_DOT_VERIFIED, /* built, ran, and every result had the model's bits */
    MPCL_BF16_DOT_BROKEN,   /* did not build or run, or a result was wrong */
    MPCL_BF16_DOT_UNTESTED,
} mpcl_bf16_dot;

/* A matrix engine (tensor cores and the like) reached from OpenCL C, for
 * the mpcl-mma GEMM path: the engines are rows of one table
 * (src/runtime/matrix_engine.c), each with a probe kernel that multiplies one
 * tile and is checked exactly against the host; the first row that applies
 * to the device is probed, and no row's code is built on a device it does
 * not apply to. */
typedef enum mpcl_matrix_engine {
    MPCL_MATRIX_ENGINE_NONE,     /* no row applies to the device (the detail says why) */
    MPCL_MATRIX_ENGINE_VERIFIED, /* the row's probe built, ran, and every result was exact */
    MPCL_MATRIX_ENGINE_BROKEN, /* the row applies, but its probe did not build or run, or was wrong
                                */
    MPCL_MATRIX_ENGINE_UNTESTED,
} mpcl_matrix_engine;

/* cl_device_fp_config decoded; `present` is false when the query failed or the
 * device has no such precision (half on most devices, double on some). */
typedef struct mpcl_fp_config {
    bool present;
    bool denorm, inf_nan, round_to_nearest, round_to_zero, round_to_inf, fma;
    bool correctly_rounded_divide_sqrt, soft_float;
} mpcl_fp_config;

#define MPCL_INFO_STR 256
#define MPCL_EXTENSIONS_STR 16384

typedef struct mpcl_device_info {
    char id[24]; /* "P:D": platform and device index in enumeration order */
    unsigned platform_index, device_index;
    char platform[MPCL_INFO_STR];
    char platform_version[MPCL_INFO_STR];
    char platform_vendor[MPCL_INFO_STR]; /* "The pocl project": `pocl` selects PoCL */
    char name[MPCL_INFO_STR];
    char vendor[MPCL_INFO_STR];
    char driver_version[MPCL_INFO_STR];
    char opencl_version[MPCL_INFO_STR];
    char opencl_c_version[MPCL_INFO_STR];
    mpcl_device_type type;
    uint32_t compute_units, max_clock_mhz;
    uint64_t global_mem_bytes, local_mem_bytes, max_alloc_bytes;
    char extensions[MPCL_EXTENSIONS_STR]; /* space-separated, as the driver gives it */
    mpcl_fp_config half_fp, single_fp, double_fp;
    uint32_t preferred_vector_width_half, preferred_vector_width_float;
    uint32_t native_vector_width_half, native_vector_width_float;
    uint32_t max_subgroups; /* 0 when the device has no subgroups */
    bool has_fp16_extension, has_fp64, intel_bfloat16_conversions, integer_dot_product;
    mpcl_fp16_math fp16_math;
    mpcl_fp16_storage fp16_storage;
    char fp16_detail[MPCL_INFO_STR]; /* what the verification saw, for reports */
    mpcl_bf16_storage bf16_storage;  /* filled by the same verification as fp16 */
    char bf16_detail[MPCL_INFO_STR];
    mpcl_bf16_dot bf16_dot; /* filled by the same verification */
    char bf16_dot_detail[MPCL_INFO_STR];
    mpcl_matrix_engine matrix_engine; /* filled by the same verification */
    char matrix_engine_kind[32];      /* the row probed, "nvidia-mma-sm80"; "" when none */
    char matrix_engine_detail[MPCL_INFO_STR];
} mpcl_device_info;

/* A platform that was found but contributed no device, and why. */
typedef struct mpcl_skipped_platform {
    unsigned platform_index;
    char name[MPCL_INFO_STR];
    char reason[MPCL_INFO_STR];
} mpcl_skipped_platform;

typedef struct mpcl_device_list mpcl_device_list;

typedef enum mpcl_enum_flags {
    MPCL_ENUM_DEFAULT = 0,
    MPCL_ENUM_VERIFY_FP16 = 1, /* run the fp16 and bf16 kernels on every device (slower) */
} mpcl_enum_flags;

/* Every device of every platform. Platforms whose queries fail or that have no
 * device are skipped and listed, never fatal. MPCL_ERR_NO_PLATFORM when the ICD
 * loader finds none, MPCL_ERR_NO_DEVICE when no platform has a device. */
mpcl_status mpcl_device_list_create(unsigned flags, mpcl_device_list **out);
void mpcl_device_list_destroy(mpcl_device_list *list);
size_t mpcl_device_list_count(const mpcl_device_list *list);
const mpcl_device_info *mpcl_device_list_get(const mpcl_device_list *list, size_t index);
size_t mpcl_device_list_skipped_count(const mpcl_device_list *list);
const mpcl_skipped_platform *mpcl_device_list_skipped(const mpcl_device_list *list, size_t index);

/* Runs the fp16 math and storage kernels and the bf16 storage kernel on
 * device `index` and records the outcome in its info (the only way a list
 * entry changes after creation). */
mpcl_status mpcl_device_list_verify_fp16(mpcl_device_list *list, size_t index);

/* Selector: NULL or "" for the default (first GPU, else accelerator, else
 * CPU); "P:D"; "cpu", "gpu" or "accelerator"; otherwise a case-insensitive
 * substring of the device name, its platform's name or its platform's vendor
 * ("pocl" selects PoCL, whose platform is "Portable Computing Language"). MPCL_ERR_NO_DEVICE
 * with the list of devices in mpcl_errmsg() when nothing matches. */
mpcl_status mpcl_device_list_select(const mpcl_device_list *list, const char *selector,
                                    size_t *index);

/* Exact token match in a space-separated extension list: "cl_khr_fp16" does
 * not match "cl_khr_fp16_something". */
bool mpcl_has_extension(const char *extensions, const char *name);

const char *mpcl_device_type_name(mpcl_device_type type);
const char *mpcl_fp16_math_name(mpcl_fp16_math math);
const char *mpcl_fp16_storage_name(mpcl_fp16_storage storage);
const char *mpcl_bf16_storage_name(mpcl_bf16_storage storage);
const char *mpcl_bf16_dot_name(mpcl_bf16_dot dot);
const char *mpcl_matrix_engine_name(mpcl_matrix_engine engine);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
