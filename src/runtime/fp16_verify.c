/* fp16 and bf16 storage are verified, not trusted: run tiny kernels and
 * check their numbers against the host's binary16 and bfloat16 rounding. A
 * successful build proves nothing (Oclgrind builds `half` arithmetic, then
 * leaves the output unwritten). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/probe.h"
#include "runtime/runtime.h"

#define N 16

/* a and b are exact halves; products and sums stay clear of the subnormal
 * range, where half denormals are optional. */
static const float math_a[N] = {
    1.5f,   300.0f,          -300.0f, 0.0999755859375f, 1.0f, 65504.0f, 2048.0f, 3.0f, 1000.0f,
    -7.25f, 0.333251953125f, 2.0f,    0.0009765625f,    5.0f, 60000.0f, -2.0f};
static const float math_b[N] = {
    2.0f, 300.0f, 300.0f, 0.0999755859375f, 0.00048828125f,   1.0f, 1.0009765625f, 3.0f, 1000.0f,
    4.0f, 3.0f,   -0.5f,  1024.0f,          0.2000732421875f, 2.0f, 65504.0f};
/* Rounding cases for vstore_half_rte: ties to even, overflow, subnormals. */
static const float store_src[N] = {1.0f,     0.1f,     65504.0f,       65519.99f,
                                   65520.0f, 70000.0f, -70000.0f,      0x1p-24f,
                                   0x3p-26f, 0x1p-25f, 1.00048828125f, 1.00146484375f,
                                   -0.0f,    1e-8f,    0x1.ffcp-15f,   3.14159265f};
static const uint16_t load_bits[N] = {0x0001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c00,
                                      0xfc00, 0x3c00, 0x8000, 0x3555, 0x0000, 0xc500,
                                      0x3bff, 0x8001, 0x5640, 0x1234};

static const uint16_t POISON_F16 = 0x7e55;

/* Number of wrong results, N+1 when the kernel could not run at all. */
static int check_storage(cl_context cl, cl_device_id dev, cl_command_queue q, const char *src,
                         mpcl__probe_log *log) {
    cl_program p = mpcl__probe_build(cl, dev, src, "-cl-std=CL1.2", log);
    if (!p) return N + 1;
    uint16_t in[N], stored[N];
    float loaded[N], srcv[N];
    memcpy(in, load_bits, sizeof in);
    memcpy(srcv, store_src, sizeof srcv);
    for (int i = 0; i < N; i++) {
        loaded[i] = mpcl__probe_poison_f32();
        stored[i] = POISON_F16;
    }
    mpcl__probe_arg args[4] = {{in, sizeof in, false},
                               {loaded, sizeof loaded, true},
                               {srcv, sizeof srcv, false},
                               {stored, sizeof stored, true}};
    int wrong = N + 1;
    if (mpcl__probe_run(cl, q, p, "probe_half_storage", args, N, 0)) {
        wrong = 0;
        for (int i = 0; i < N; i++) {
            wrong += !mpcl__probe_same_f32(loaded[i], mpcl_f16_to_f32(load_bits[i]));
            wrong += stored[i] != mpcl_f32_to_f16(store_src[i]);
        }
    }
    clReleaseProgram(p);
    return wrong;
}

static int check_math(cl_context cl, cl_device_id dev, cl_command_queue q, const char *src,
                      mpcl__probe_log *log) {
    cl_program p = mpcl__probe_build(cl, dev, src, "-cl-std=CL1.2 -DMPCL_PROBE_HALF_MATH", log);
    if (!p) return N + 1;
    float a[N], b[N], prod[N], sum[N];
    memcpy(a, math_a, sizeof a);
    memcpy(b, math_b, sizeof b);
    for (int i = 0; i < N; i++) prod[i] = sum[i] = mpcl__probe_poison_f32();
    mpcl__probe_arg args[4] = {{a, sizeof a, false},
                               {b, sizeof b, false},
                               {prod, sizeof prod, true},
                               {sum, sizeof sum, true}};
    int wrong = N + 1;
    if (mpcl__probe_run(cl, q, p, "probe_half_math", args, N, 0)) {
        wrong = 0;
        for (int i = 0; i < N; i++) {
            /* Products and sums of two halves are exact in double, so one
             * rounding to half gives the correctly rounded result. */
            float want_prod = mpcl_f16_to_f32(mpcl_f64_to_f16((double)a[i] * (double)b[i]));
            float want_sum = mpcl_f16_to_f32(mpcl_f64_to_f16((double)a[i] + (double)b[i]));
            wrong += !mpcl__probe_same_f32(prod[i], want_prod);
            wrong += !mpcl__probe_same_f32(sum[i], want_sum);
        }
    }
    clReleaseProgram(p);
    return wrong;
}

/* ---- bf16 ---- */

#define NB 32 /* a multiple of 16: the vector kernels take 8 and 16 per item */

/* Rounding cases for the bf16 store, as f32 bit patterns: ties to even both
 * ways and either side of a tie, overflow (the largest bf16 0x7f7f, the tie
 * above it and FLT_MAX round to inf), inf, NaN whose payload is only in the
 * low half (truncation would make it inf), subnormals (ties between 0 and
 * the smallest bf16, and into the smallest normal), signed zero. */
static const uint32_t bf16_store_src[NB] = {
    0x3f800000, 0x3f808000, 0x3f818000, 0x3f808001, 0x3f817fff, 0xbf818000, 0x3dcccccd, 0x40490fdb,
    0x7f7f0000, 0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0xff7f8000, 0x7f800000, 0xff800000, 0x7fc00000,
    0xffc00001, 0x7f800001, 0xff800001, 0x7fffffff, 0x80000000, 0x00000001, 0x00008000, 0x00018000,
    0x00008001, 0x007f8000, 0x007fffff, 0x00800000, 0x807f7fff, 0x477fe000, 0x0d800000, 0x5f7fffff};
/* Load cases: zeros, subnormals, the normal extremes, inf, quiet NaNs. */
static const uint16_t bf16_load_bits[NB] = {
    0x0000, 0x8000, 0x0001, 0x007f, 0x0080, 0x8081, 0x3f80, 0xbf80, 0x7f7f, 0xff7f, 0x7f80,
    0xff80, 0x7fc0, 0xffc0, 0x7fc1, 0xffff, 0x3eaa, 0x4049, 0xc2f7, 0x0180, 0x1234, 0x4780,
    0x477f, 0x3c00, 0xbbff, 0x5f00, 0x2000, 0x7f00, 0x00ff, 0x8001, 0x3f81, 0x0100};

static const uint16_t POISON_BF16 = 0x7fa5; /* a NaN no store produces (it quiets to 0x7fc0) */

static bool same_bits(float got, uint32_t want) {
    return memcmp(&got, &want, sizeof got) == 0;
}

/* Wrong results of one kernel (scalar, 8- or 16-wide), -1 when it could not
 * run. Loads must give f32 bits exactly (bits << 16), stores the host's
 * bits exactly, NaN included (both sides return the quiet NaN 0x7fc0 with
 * the sign). */
static int check_bf16_kernel(cl_context cl, cl_command_queue q, cl_program p, const char *name,
                             size_t width) {
    uint16_t in[NB], stored[NB];
    float loaded[NB], srcv[NB];
    memcpy(in, bf16_load_bits, sizeof in);
    memcpy(srcv, bf16_store_src, sizeof srcv);
    for (int i = 0; i < NB; i++) {
        loaded[i] = mpcl__probe_poison_f32();
        stored[i] = POISON_BF16;
    }
    mpcl__probe_arg args[4] = {{in, sizeof in, false},
                               {loaded, sizeof loaded, true},
                               {srcv, sizeof srcv, false},
                               {stored, sizeof stored, true}};
    if (!mpcl__probe_run(cl, q, p, name, args, NB / width, 0)) return -1;
    int wrong = 0;
    for (int i = 0; i < NB; i++) {
        float src_f;
        memcpy(&src_f, &bf16_store_src[i], sizeof src_f);
        wrong += !same_bits(loaded[i], (uint32_t)bf16_load_bits[i] << 16);
        wrong += stored[i] != mpcl_f32_to_bf16(src_f);
    }
    return wrong;
}

/* The bf16 probe kernels (scalar, 4-, 8- and 16-wide), each checking NB
 * loads and NB stores. */
#define BF16_KERNELS 4
#define BF16_CHECKS (2 * BF16_KERNELS)

/* Number of wrong results over the kernels (2 * NB checks each),
 * BF16_CHECKS * NB + 1 when the program did not build or a kernel did not run. */
static int check_bf16(cl_context cl, cl_device_id dev, cl_command_queue q, mpcl__probe_log *log) {
    cl_program p = mpcl__probe_build_after_common(cl, dev, "bf16_probe.cl", "", log);
    if (!p) return BF16_CHECKS * NB + 1;
    static const char *const names[BF16_KERNELS] = {"probe_bf16_storage", "probe_bf16_storage4",
                                                    "probe_bf16_storage8", "probe_bf16_storage16"};
    static const size_t widths[BF16_KERNELS] = {1, 4, 8, 16};
    int wrong = 0;
    for (int k = 0; k < BF16_KERNELS && wrong <= BF16_CHECKS * NB; k++) {
        int w = check_bf16_kernel(cl, q, p, names[k], widths[k]);
        wrong = w < 0 ? BF16_CHECKS * NB + 1 : wrong + w;
    }
    clReleaseProgram(p);
    return wrong;
}

/* ---- the AVX512-BF16 dot product ---- */

#define ND 64 /* lanes: 4 items of 16 */

/* The host's model of one lane of vdpbf16ps (Intel's description, which
 * AMD's Zen 4 matched bit for bit on 65,536 random patterns): bf16
 * subnormals and f32 subnormal sums read as zero, then acc + a1 b1 and
 * + a0 b0, each exact product added with one rounding (fmaf). */
static float flush_subnormal(float x) {
    return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x;
}
static float dot_model(float acc, uint32_t a, uint32_t b) {
    float a0 = flush_subnormal(mpcl_bf16_to_f32((uint16_t)a)),
          a1 = flush_subnormal(mpcl_bf16_to_f32((uint16_t)(a >> 16))),
          b0 = flush_subnormal(mpcl_bf16_to_f32((uint16_t)b)),
          b1 = flush_subnormal(mpcl_bf16_to_f32((uint16_t)(b >> 16)));
    float r = flush_subnormal(fmaf(a1, b1, flush_subnormal(acc)));
    return flush_subnormal(fmaf(a0, b0, r));
}

/* Whether the probe may run at all: executing the instruction where the CPU
 * lacks it would kill the process, so only a CPU device (the host's own
 * cores) of an x86 host whose CPU reports AVX512-BF16. NULL when it may,
 * else why not. */
static const char *dot_unavailable(cl_device_id dev) {
    cl_device_type type = 0;
    /* CPU alone: Oclgrind's simulator says CPU, GPU and accelerator at once. */
    if (clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL) != CL_SUCCESS ||
        !(type & CL_DEVICE_TYPE_CPU) || (type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)))
        return "not a CPU device";
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16")) return "the host CPU has no AVX512-BF16";
    return NULL;
#else
    return "not an x86-64 host";
#endif
}

/* Wrong lanes of ND, ND + 1 when the probe did not build or run. The pairs
 * are the bf16 load cases above (zeros, subnormals, extremes, inf, NaN)
 * against each other, then pseudo-random bit patterns; the accumulators
 * include subnormals, inf and values that cancel. */
static int check_bf16_dot(cl_context cl, cl_device_id dev, cl_command_queue q,
                          mpcl__probe_log *log) {
    cl_program p =
        mpcl__probe_build_after_common(cl, dev, "bf16_dot_probe.cl", " -DMPCL_BF16_DOT_X86=1", log);
    if (!p) return ND + 1;
    uint32_t a[ND], b[ND], seed = 12345u;
    float acc[ND], out[ND];
    static const uint32_t acc_bits[8] = {0x00000000, 0x80000000, 0x00000001, 0x3f800000,
                                         0x7f800000, 0xc2c80000, 0x007fffff, 0x5f000000};
    for (int i = 0; i < ND; i++) {
        if (i < NB) {
            a[i] = bf16_load_bits[i] | (uint32_t)bf16_load_bits[(i + 7) % NB] << 16;
            b[i] = bf16_load_bits[(i * 5 + 3) % NB] | (uint32_t)bf16_load_bits[(i + 1) % NB] << 16;
        } else {
            a[i] = seed = seed * 1664525u + 1013904223u;
            b[i] = seed = seed * 1664525u + 1013904223u;
        }
        uint32_t bits = i % 2 ? acc_bits[i / 2 % 8] : (seed = seed * 1664525u + 1013904223u);
        memcpy(&acc[i], &bits, sizeof bits);
        out[i] = mpcl__probe_poison_f32();
    }
    mpcl__probe_arg args[4] = {{a, sizeof a, false},
                               {b, sizeof b, false},
                               {acc, sizeof acc, false},
                               {out, sizeof out, true}};
    int wrong = ND + 1;
    if (mpcl__probe_run(cl, q, p, "probe_bf16_dot", args, ND / 16, 0)) {
        wrong = 0;
        for (int i = 0; i < ND; i++)
            wrong += !mpcl__probe_same_f32(out[i], dot_model(acc[i], a[i], b[i]));
    }
    clReleaseProgram(p);
    return wrong;
}

void mpcl__fp16_verify(cl_context cl, cl_device_id dev, cl_command_queue q,
                       mpcl_device_info *info) {
    char *src = mpcl__cl_source_load("fp16_probe.cl", NULL);
    mpcl__probe_log storage_log = {""}, math_log = {""}, bf16_log = {""};
    int storage_wrong = src ? check_storage(cl, dev, q, src, &storage_log) : N + 1;
    int math_wrong = src ? check_math(cl, dev, q, src, &math_log) : N + 1;
    free(src);
    bool math_ok = math_wrong == 0;
    if (info->has_fp16_extension)
        info->fp16_math = math_ok ? MPCL_FP16_MATH_VERIFIED : MPCL_FP16_MATH_DECLARED_BUT_BROKEN;
    else
        info->fp16_math = math_ok ? MPCL_FP16_MATH_UNDECLARED_BUT_WORKS : MPCL_FP16_MATH_NONE;
    info->fp16_storage = storage_wrong == 0 ? MPCL_FP16_STORAGE_VERIFIED : MPCL_FP16_STORAGE_BROKEN;
    char m[MPCL_INFO_STR], s[MPCL_INFO_STR];
    mpcl__probe_describe(m, sizeof m, "half math", math_wrong > N ? 2 * N + 1 : math_wrong, 2 * N,
                         &math_log);
    mpcl__probe_describe(s, sizeof s, "vload_half/vstore_half_rte",
                         storage_wrong > N ? 2 * N + 1 : storage_wrong, 2 * N, &storage_log);
    /* "m; s", cut so that each keeps at least half of the field. */
    size_t room = sizeof info->fp16_detail - 3, km = strlen(m), ks = strlen(s);
    if (km + ks > room) {
        if (km > room / 2) km = ks < room / 2 ? room - ks : room / 2;
        if (ks > room - km) ks = room - km;
    }
    memcpy(info->fp16_detail, m, km);
    memcpy(info->fp16_detail + km, "; ", 2);
    memcpy(info->fp16_detail + km + 2, s, ks);
    info->fp16_detail[km + 2 + ks] = '\0';

    int bf16_wrong = check_bf16(cl, dev, q, &bf16_log);
    info->bf16_storage = bf16_wrong == 0 ? MPCL_BF16_STORAGE_VERIFIED : MPCL_BF16_STORAGE_BROKEN;
    mpcl__probe_describe(info->bf16_detail, sizeof info->bf16_detail,
                         "bf16 LOAD/STORE (scalar, 4-, 8- and 16-wide)", bf16_wrong,
                         BF16_CHECKS * NB, &bf16_log);

    const char *why_not = dot_unavailable(dev);
    if (why_not) {
        info->bf16_dot = MPCL_BF16_DOT_NONE;
        snprintf(info->bf16_dot_detail, sizeof info->bf16_dot_detail, "%s", why_not);
    } else {
        mpcl__probe_log dot_log = {""};
        int dot_wrong = check_bf16_dot(cl, dev, q, &dot_log);
        info->bf16_dot = dot_wrong == 0 ? MPCL_BF16_DOT_VERIFIED : MPCL_BF16_DOT_BROKEN;
        mpcl__probe_describe(info->bf16_dot_detail, sizeof info->bf16_dot_detail, "vdpbf16ps",
                             dot_wrong, ND, &dot_log);
    }
    mpcl__matrix_engine_verify(cl, dev, q, info);
}
