/* The matrix engines (tensor cores and the like) that OpenCL C can reach,
 * one row each, and their verification: a row says whether it applies to a
 * device and, where it does, its probe multiplies one tile per input dtype on
 * poisoned outputs and every element must be exact. A device gets the first
 * row that applies; code for a row is never built on a device it does not
 * apply to (inline PTX on any other device fails to build at best).
 *
 * Rows to come, each with its own probe where something here can test it:
 * AMD's __builtin_amdgcn_mfma_* (CDNA) and __builtin_amdgcn_wmma_* (RDNA3),
 * Intel's cl_intel_subgroup_matrix_multiply_accumulate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpcl/half.h"
#include "runtime/probe.h"
#include "runtime/runtime.h"

/* The tile every probe multiplies: d (M x N) = a (M x K) b (K x N) + c. */
enum { TILE_M = 16, TILE_N = 8, TILE_K = 16 };

typedef struct engine {
    const char *kind;                             /* as mpcl-probe reports it */
    const char *(*unavailable)(cl_device_id dev); /* NULL: the probe may run; else why not */
    const char *source;                           /* its probe, in cl/ */
    const char *instruction;                      /* for the detail */
    size_t work_items;                            /* of the work-group that multiplies a tile */
    const char *program_option; /* builds its mpcl-mma kernels into the 16-bit programs */
} engine;

/* cl_nv_device_attribute_query (cl_ext.h names them where it is new enough). */
#define NV_COMPUTE_CAPABILITY_MAJOR 0x4000
#define NV_COMPUTE_CAPABILITY_MINOR 0x4001
#define NVIDIA_VENDOR_ID 0x10de

/* mma.sync's m16n8k16 with f16 and bf16 operands needs sm_80 (Ampere). */
static const char *nvidia_sm80_unavailable(cl_device_id dev) {
    cl_uint vendor = 0, major = 0, minor = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_VENDOR_ID, sizeof vendor, &vendor, NULL) != CL_SUCCESS ||
        vendor != NVIDIA_VENDOR_ID)
        return "not an NVIDIA device";
    if (clGetDeviceInfo(dev, NV_COMPUTE_CAPABILITY_MAJOR, sizeof major, &major, NULL) !=
            CL_SUCCESS ||
        clGetDeviceInfo(dev, NV_COMPUTE_CAPABILITY_MINOR, sizeof minor, &minor, NULL) != CL_SUCCESS)
        return "an NVIDIA device without cl_nv_device_attribute_query (compute capability unknown)";
    if (major < 8) {
        static _Thread_local char why[96];
        snprintf(why, sizeof why, "compute capability %u.%u (mma.sync m16n8k16 needs 8.0)",
                 (unsigned)major, (unsigned)minor);
        return why;
    }
    return NULL;
}

static const engine engines[] = {
    {"nvidia-mma-sm80", nvidia_sm80_unavailable, "mma_nvidia_probe.cl",
     "mma.sync m16n8k16 f32 accumulation", 32, " -DMPCL_MMA_NVIDIA=1"},
};
#define NENGINES (sizeof engines / sizeof engines[0])

/* The probe's operands: small integers (and halves of them) whose products
 * and sums are exact in f32 and in both 16-bit formats, signed and zero, so
 * that any engine that multiplies and accumulates at all gets every bit. */
static uint16_t operand(mpcl_dtype dt, int i, int salt) {
    float v = (float)((i * 7 + salt * 3) % 9 - 4) * (i % 5 == 0 ? 0.5f : 1.0f);
    return dt == MPCL_DTYPE_BF16 ? mpcl_f32_to_bf16(v) : mpcl_f32_to_f16(v);
}

static float operand_value(mpcl_dtype dt, uint16_t bits) {
    return dt == MPCL_DTYPE_BF16 ? mpcl_bf16_to_f32(bits) : mpcl_f16_to_f32(bits);
}

/* Wrong elements of d (TILE_M * TILE_N), TILE_M * TILE_N + 1 when the kernel
 * did not run. */
static int check_tile(cl_context cl, cl_command_queue q, cl_program p, const engine *e,
                      const char *kernel, mpcl_dtype dt) {
    uint16_t a[TILE_M * TILE_K], b[TILE_K * TILE_N];
    float c[TILE_M * TILE_N], d[TILE_M * TILE_N];
    for (int i = 0; i < TILE_M * TILE_K; i++) a[i] = operand(dt, i, 1);
    for (int i = 0; i < TILE_K * TILE_N; i++) b[i] = operand(dt, i, 2);
    for (int i = 0; i < TILE_M * TILE_N; i++) {
        c[i] = (float)(i % 11 - 5);
        d[i] = mpcl__probe_poison_f32();
    }
    mpcl__probe_arg args[4] = {
        {a, sizeof a, false}, {b, sizeof b, false}, {c, sizeof c, false}, {d, sizeof d, true}};
    if (!mpcl__probe_run(cl, q, p, kernel, args, e->work_items, e->work_items))
        return TILE_M * TILE_N + 1;
    int wrong = 0;
    for (int i = 0; i < TILE_M; i++)
        for (int j = 0; j < TILE_N; j++) {
            double want = c[i * TILE_N + j];
            for (int k = 0; k < TILE_K; k++)
                want += (double)operand_value(dt, a[i * TILE_K + k]) *
                        (double)operand_value(dt, b[k * TILE_N + j]);
            wrong += !mpcl__probe_same_f32(d[i * TILE_N + j], (float)want);
        }
    return wrong;
}

/* Runs e's probe: f16 and bf16 tiles. */
static void verify_row(cl_context cl, cl_device_id dev, cl_command_queue q, const engine *e,
                       mpcl_device_info *info) {
    enum { TOTAL = TILE_M * TILE_N };
    mpcl__probe_log log = {""};
    char *src = mpcl__cl_source_load(e->source, NULL);
    cl_program p = src ? mpcl__probe_build(cl, dev, src, "-cl-std=CL1.2", &log) : NULL;
    free(src);
    int f16 = p ? check_tile(cl, q, p, e, "probe_mma_f16", MPCL_DTYPE_F16) : TOTAL + 1;
    int bf16 = p ? check_tile(cl, q, p, e, "probe_mma_bf16", MPCL_DTYPE_BF16) : TOTAL + 1;
    if (p) clReleaseProgram(p);
    info->matrix_engine =
        f16 == 0 && bf16 == 0 ? MPCL_MATRIX_ENGINE_VERIFIED : MPCL_MATRIX_ENGINE_BROKEN;
    /* Two halves of the detail, each of at most (MPCL_INFO_STR - 4) / 2 characters. */
    char what[96], first[(MPCL_INFO_STR - 2) / 2], second[(MPCL_INFO_STR - 2) / 2];
    snprintf(what, sizeof what, "%s, f16", e->instruction);
    mpcl__probe_describe(first, sizeof first, what, f16, TOTAL, &log);
    mpcl__probe_describe(second, sizeof second, "bf16", bf16, TOTAL, &(mpcl__probe_log){""});
    snprintf(info->matrix_engine_detail, sizeof info->matrix_engine_detail, "%s; %s", first,
             second);
}

void mpcl__matrix_engine_verify(cl_context cl, cl_device_id dev, cl_command_queue q,
                                mpcl_device_info *info) {
    char why[MPCL_INFO_STR] = "";
    size_t used = 0;
    for (size_t i = 0; i < NENGINES; i++) {
        const char *reason = engines[i].unavailable(dev);
        if (!reason) {
            snprintf(info->matrix_engine_kind, sizeof info->matrix_engine_kind, "%s",
                     engines[i].kind);
            verify_row(cl, dev, q, &engines[i], info);
            return;
        }
        int n = snprintf(why + used, sizeof why - used, "%s%s: %s", used ? "; " : "",
                         engines[i].kind, reason);
        if (n > 0) used = used + (size_t)n < sizeof why ? used + (size_t)n : sizeof why - 1;
    }
    info->matrix_engine = MPCL_MATRIX_ENGINE_NONE;
    info->matrix_engine_kind[0] = '\0';
    snprintf(info->matrix_engine_detail, sizeof info->matrix_engine_detail, "%s", why);
}

const char *mpcl__matrix_engine_program_option(const mpcl_device_info *info) {
    if (info->matrix_engine != MPCL_MATRIX_ENGINE_VERIFIED) return "";
    for (size_t i = 0; i < NENGINES; i++)
        if (strcmp(engines[i].kind, info->matrix_engine_kind) == 0)
            return engines[i].program_option;
    return "";
}

const char *mpcl__matrix_engine_probe_source(size_t i) {
    return i < NENGINES ? engines[i].source : NULL;
}
