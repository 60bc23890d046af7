/* fp16 is verified, not trusted: run tiny kernels and check their numbers
 * against the host's binary16 rounding. A successful build proves nothing
 * (Oclgrind builds `half` arithmetic, then leaves the output unwritten). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static const uint32_t POISON_F32 = 0x7fc0dead; /* a NaN no kernel would produce */
static const uint16_t POISON_F16 = 0x7e55;

static float poison_f32(void) {
    float f;
    memcpy(&f, &POISON_F32, sizeof f);
    return f;
}

static bool same_f32(float got, float want) {
    if (isnan(want)) return isnan(got);
    return memcmp(&got, &want, sizeof got) == 0;
}

static cl_program build(cl_context cl, cl_device_id dev, const char *src, const char *options) {
    cl_int err;
    size_t len = strlen(src);
    cl_program p = clCreateProgramWithSource(cl, 1, &src, &len, &err);
    if (err != CL_SUCCESS) return NULL;
    if (clBuildProgram(p, 1, &dev, options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

/* Runs `kernel` over N items with 4 buffers; the ones marked as outputs are
 * poisoned before the launch and read back after. Returns false when any
 * OpenCL call fails. */
typedef struct arg {
    void *host;
    size_t bytes;
    bool output;
} arg;

static bool run4(cl_context cl, cl_command_queue q, cl_program p, const char *name, arg args[4]) {
    cl_int err;
    bool ok = false;
    cl_mem mem[4] = {0};
    cl_kernel k = clCreateKernel(p, name, &err);
    if (err != CL_SUCCESS) return false;
    for (int i = 0; i < 4; i++) {
        mem[i] = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, args[i].bytes,
                                args[i].host, &err);
        if (err != CL_SUCCESS) goto cleanup;
        if (clSetKernelArg(k, (cl_uint)i, sizeof(cl_mem), &mem[i]) != CL_SUCCESS) goto cleanup;
    }
    size_t global = N;
    if (clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL) != CL_SUCCESS)
        goto cleanup;
    for (int i = 0; i < 4; i++) {
        if (args[i].output && clEnqueueReadBuffer(q, mem[i], CL_TRUE, 0, args[i].bytes,
                                                  args[i].host, 0, NULL, NULL) != CL_SUCCESS)
            goto cleanup;
    }
    ok = clFinish(q) == CL_SUCCESS;
cleanup:
    for (int i = 0; i < 4; i++)
        if (mem[i]) clReleaseMemObject(mem[i]);
    clReleaseKernel(k);
    return ok;
}

/* Number of wrong results, N+1 when the kernel could not run at all. */
static int check_storage(cl_context cl, cl_device_id dev, cl_command_queue q, const char *src) {
    cl_program p = build(cl, dev, src, "-cl-std=CL1.2");
    if (!p) return N + 1;
    uint16_t in[N], stored[N];
    float loaded[N], srcv[N];
    memcpy(in, load_bits, sizeof in);
    memcpy(srcv, store_src, sizeof srcv);
    for (int i = 0; i < N; i++) {
        loaded[i] = poison_f32();
        stored[i] = POISON_F16;
    }
    arg args[4] = {{in, sizeof in, false},
                   {loaded, sizeof loaded, true},
                   {srcv, sizeof srcv, false},
                   {stored, sizeof stored, true}};
    int wrong = N + 1;
    if (run4(cl, q, p, "probe_half_storage", args)) {
        wrong = 0;
        for (int i = 0; i < N; i++) {
            wrong += !same_f32(loaded[i], mpcl_f16_to_f32(load_bits[i]));
            wrong += stored[i] != mpcl_f32_to_f16(store_src[i]);
        }
    }
    clReleaseProgram(p);
    return wrong;
}

static int check_math(cl_context cl, cl_device_id dev, cl_command_queue q, const char *src) {
    cl_program p = build(cl, dev, src, "-cl-std=CL1.2 -DMPCL_PROBE_HALF_MATH");
    if (!p) return N + 1;
    float a[N], b[N], prod[N], sum[N];
    memcpy(a, math_a, sizeof a);
    memcpy(b, math_b, sizeof b);
    for (int i = 0; i < N; i++) prod[i] = sum[i] = poison_f32();
    arg args[4] = {{a, sizeof a, false},
                   {b, sizeof b, false},
                   {prod, sizeof prod, true},
                   {sum, sizeof sum, true}};
    int wrong = N + 1;
    if (run4(cl, q, p, "probe_half_math", args)) {
        wrong = 0;
        for (int i = 0; i < N; i++) {
            /* Products and sums of two halves are exact in double, so one
             * rounding to half gives the correctly rounded result. */
            float want_prod = mpcl_f16_to_f32(mpcl_f64_to_f16((double)a[i] * (double)b[i]));
            float want_sum = mpcl_f16_to_f32(mpcl_f64_to_f16((double)a[i] + (double)b[i]));
            wrong += !same_f32(prod[i], want_prod);
            wrong += !same_f32(sum[i], want_sum);
        }
    }
    clReleaseProgram(p);
    return wrong;
}

static void describe(char *buf, size_t size, const char *what, int wrong) {
    if (wrong == 0)
        snprintf(buf, size, "%s: %d/%d exact", what, 2 * N, 2 * N);
    else if (wrong > N)
        snprintf(buf, size, "%s: did not build or run", what);
    else
        snprintf(buf, size, "%s: %d/%d wrong", what, wrong, 2 * N);
}

void mpcl__fp16_verify(cl_context cl, cl_device_id dev, cl_command_queue q,
                       mpcl_device_info *info) {
    char *src = mpcl__cl_source_load("fp16_probe.cl", NULL);
    int storage_wrong = src ? check_storage(cl, dev, q, src) : N + 1;
    int math_wrong = src ? check_math(cl, dev, q, src) : N + 1;
    free(src);
    bool math_ok = math_wrong == 0;
    if (info->has_fp16_extension)
        info->fp16_math = math_ok ? MPCL_FP16_MATH_VERIFIED : MPCL_FP16_MATH_DECLARED_BUT_BROKEN;
    else
        info->fp16_math = math_ok ? MPCL_FP16_MATH_UNDECLARED_BUT_WORKS : MPCL_FP16_MATH_NONE;
    info->fp16_storage = storage_wrong == 0 ? MPCL_FP16_STORAGE_VERIFIED : MPCL_FP16_STORAGE_BROKEN;
    char m[96], s[96];
    describe(m, sizeof m, "half math", math_wrong);
    describe(s, sizeof s, "vload_half/vstore_half_rte", storage_wrong);
    snprintf(info->fp16_detail, sizeof info->fp16_detail, "%s; %s", m, s);
}
