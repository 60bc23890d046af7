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

typedef mpcl__matrix_engine_row engine;

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
     "mma.sync m16n8k16 f32 accumulation", 32, " -DMPCL_MMA_NVIDIA=1", "gemm_mma_nvidia.cl"},
};
#define NENGINES (sizeof engines / sizeof engines[0])

/* The probe's operands: small integers (and halves of them) whose products
 * and sums are exact in f32 and in both 16-bit formats, signed and zero, so
 * that any engine that multiplies and accumulates at all gets every bit. */
static uint16_t operand(mpcl_dtype dt, int i, int salt) {
    return mpcl__f32_to_16bit(dt, (float)((i * 7 + salt * 3) % 9 - 4) * (i % 5 == 0 ? 0.5f : 1.0f));
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
                want += (double)mpcl__16bit_to_f32(dt, a[i * TILE_K + k]) *
                        (double)mpcl__16bit_to_f32(dt, b[k * TILE_N + j]);
            wrong += !mpcl__probe_same_f32(d[i * TILE_N + j], (float)want);
        }
    return wrong;
}

/* ---- the row's mpcl-mma kernels ---- */

/* mpcl__matrix_engine_emulate's engine: the NVIDIA row's kernels with its
 * instructions computed by the lanes (cl/gemm_mma_nvidia.cl), which also
 * need local memory for their exchanges: a program built with this option
 * is emulated. */
static const char EMULATED_KIND[] = "nvidia-mma-sm80-emulated";
static const char EMULATED_OPTION[] = " -DMPCL_MMA_NVIDIA=1 -DMPCL_MMA_EMULATE=1";

static bool option_emulates(const char *option) {
    return strcmp(option, EMULATED_OPTION) == 0;
}

/* mpcl-mma's pipelined tiles, the rows of MPCL_ABI_MMA_PIPE_TILES. */
#define MMA_KERNELS(NAME, PAIR) \
    { "mpcl_gemm_mma_" #NAME "_" #PAIR, "mpcl_gemm_mma_" #NAME "_" #PAIR "_cf32" }
#define MMA_TILE_ROW(NAME, ROWS, COLS, WM, WN) \
    {#NAME,                                    \
     ROWS,                                     \
     COLS,                                     \
     32 * (WM) * (WN),                         \
     {MMA_KERNELS(NAME, nn), MMA_KERNELS(NAME, nt), MMA_KERNELS(NAME, tn)}},
const mpcl__mma_pipe_tile mpcl__mma_pipe_tiles[MPCL__MMA_PIPE_TILES] = {
    MPCL_ABI_MMA_PIPE_TILES(MMA_TILE_ROW)};
#undef MMA_TILE_ROW
#undef MMA_KERNELS

size_t mpcl__mma_pipe_tile_bytes(const mpcl__mma_pipe_tile *t, bool emulated) {
    size_t most = 0;
    for (int pair = 0; pair < 3; pair++) {
        size_t bytes = MPCL_ABI_MMA_PIPE_LOCAL_BYTES(
            (size_t)t->rows, (size_t)t->cols, (size_t)t->items, pair == 2, pair == 1, emulated);
        if (bytes > most) most = bytes;
    }
    return most;
}

#define MMA_TILE_NAME(NAME, ...) #NAME,
const char *const mpcl__mma_tile_names[MPCL__MMA_PIPE_TILES + 2] = {
    MPCL_ABI_MMA_PIPE_TILES(MMA_TILE_NAME) "simple", NULL};
#undef MMA_TILE_NAME

/* The shapes, small integers in A, B and C so that every sum is exact in
 * f32 and in both 16-bit formats (|C| <= 2 * 2 * 40 + 3 < 256):
 *  - mpcl_gemm_mma's, with edges in M, N and K (none a multiple of its 64,
 *    64 and 32);
 *  - the pipelined kernels', twice: with stored rows of whole 16-byte pieces
 *    (M, N and K multiples of 8: the path that runs cp.async), with edges
 *    against every tile row of MPCL_ABI_MMA_PIPE_TILES (72 < 128 and 64 <
 *    72, 136 = 128 + 8) and the 32-deep K blocks (40); then with no stored
 *    row whole in any transpose (M, N and K not multiples of 8: the path
 *    that loads element by element), edges again (66 and 70 > 64, 35 > 32). */
typedef struct gemm_shape {
    int m, n, k;
} gemm_shape;
static const gemm_shape simple_shape = {70, 40, 20};
static const gemm_shape pipe_shapes[2] = {{72, 136, 40}, {66, 70, 35}};

static float small_int(int i, int salt) {
    return (float)((i * 7 + salt * 3) % 5 - 2);
}

/* One launch of a kernel with mpcl_gemm_mma's arguments (a, b, c, m, n, k,
 * ta, tb, alpha, beta), a group of `items` per rows x cols tile of C. */
typedef struct gemm_launch {
    const char *kernel;
    gemm_shape shape;
    int items, rows, cols;
    bool ta, tb;
    bool c16; /* C in dt with beta 1 (read, the sum rounded back); else f32, beta 0, poisoned */
    size_t local_bytes; /* the pipelined kernels' local memory argument; 0: none */
} gemm_launch;

/* Runs l on the device with A (m x k) and B (k x n) stored as l's
 * transposes say; c_host (C as it goes in) gets C back. False when an
 * OpenCL call fails. */
static bool run_gemm(cl_context cl, cl_command_queue q, cl_program p, const gemm_launch *l,
                     const uint16_t *a, const uint16_t *b, void *c_host, size_t c_bytes) {
    cl_int err;
    cl_kernel k = clCreateKernel(p, l->kernel, &err);
    if (err != CL_SUCCESS) return false;
    const gemm_shape *s = &l->shape;
    size_t ab = (size_t)s->m * s->k * sizeof *a, bb = (size_t)s->k * s->n * sizeof *b;
    cl_mem mem[3] = {
        clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, ab, (void *)a, NULL),
        clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bb, (void *)b, NULL),
        clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, c_bytes, c_host, NULL)};
    cl_uint m = (cl_uint)s->m, n = (cl_uint)s->n, kk = (cl_uint)s->k, ta32 = l->ta, tb32 = l->tb;
    float alpha = 1.0f, beta = l->c16 ? 1.0f : 0.0f;
    cl_uint epi = 0; /* no epilogue: C stands in for its bias and addend */
    bool ok = mem[0] && mem[1] && mem[2];
    const struct {
        size_t size;
        const void *value;
    } args[] = {{sizeof(cl_mem), &mem[0]},
                {sizeof(cl_mem), &mem[1]},
                {sizeof(cl_mem), &mem[2]},
                {sizeof m, &m},
                {sizeof n, &n},
                {sizeof kk, &kk},
                {sizeof ta32, &ta32},
                {sizeof tb32, &tb32},
                {sizeof alpha, &alpha},
                {sizeof beta, &beta},
                {sizeof(cl_mem), &mem[2]},
                {sizeof(cl_mem), &mem[2]},
                {sizeof epi, &epi}};
    for (cl_uint i = 0; ok && i < sizeof args / sizeof args[0]; i++)
        ok = clSetKernelArg(k, i, args[i].size, args[i].value) == CL_SUCCESS;
    if (ok && l->local_bytes)
        ok = clSetKernelArg(k, MPCL_ABI_MMA_PIPE_LOCAL_ARG, l->local_bytes, NULL) == CL_SUCCESS;
    const size_t local[2] = {(size_t)l->items, 1};
    const size_t global[2] = {(size_t)(s->n + l->cols - 1) / l->cols * l->items,
                              (size_t)(s->m + l->rows - 1) / l->rows};
    ok = ok && clEnqueueNDRangeKernel(q, k, 2, NULL, global, local, 0, NULL, NULL) == CL_SUCCESS;
    ok = ok &&
         clEnqueueReadBuffer(q, mem[2], CL_TRUE, 0, c_bytes, c_host, 0, NULL, NULL) == CL_SUCCESS;
    for (int i = 0; i < 3; i++)
        if (mem[i]) clReleaseMemObject(mem[i]);
    clReleaseKernel(k);
    return ok;
}

/* Wrong elements of l's C (m n of them), -1 when the kernel did not build or
 * run or memory ran out. */
static int check_launch(cl_context cl, cl_command_queue q, cl_program p, mpcl_dtype dt,
                        const gemm_launch *l) {
    const int m = l->shape.m, n = l->shape.n, k = l->shape.k;
    uint16_t *a = malloc((size_t)m * k * sizeof *a), *b = malloc((size_t)k * n * sizeof *b);
    uint16_t *c16 = malloc((size_t)m * n * sizeof *c16);
    float *c32 = malloc((size_t)m * n * sizeof *c32);
    double *want = malloc((size_t)m * n * sizeof *want);
    int wrong = -1;
    if (!a || !b || !c16 || !c32 || !want) goto done;
    /* A(i, p) and B(p, j), stored transposed where l says. */
    for (int i = 0; i < m; i++)
        for (int pp = 0; pp < k; pp++)
            a[l->ta ? pp * m + i : i * k + pp] = mpcl__f32_to_16bit(dt, small_int(i * k + pp, 1));
    for (int pp = 0; pp < k; pp++)
        for (int j = 0; j < n; j++)
            b[l->tb ? j * k + pp : pp * n + j] = mpcl__f32_to_16bit(dt, small_int(pp * n + j, 2));
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double c = small_int(i * n + j, 3), s = 0;
            for (int pp = 0; pp < k; pp++)
                s += (double)small_int(i * k + pp, 1) * (double)small_int(pp * n + j, 2);
            want[i * n + j] = l->c16 ? c + s : s;
            c16[i * n + j] = mpcl__f32_to_16bit(dt, (float)c);
            c32[i * n + j] = mpcl__probe_poison_f32();
        }
    bool ran = l->c16 ? run_gemm(cl, q, p, l, a, b, c16, (size_t)m * n * sizeof *c16)
                      : run_gemm(cl, q, p, l, a, b, c32, (size_t)m * n * sizeof *c32);
    if (ran) {
        wrong = 0;
        for (int i = 0; i < m * n; i++)
            wrong += l->c16 ? mpcl__16bit_to_f32(dt, c16[i]) != (float)want[i]
                            : !mpcl__probe_same_f32(c32[i], (float)want[i]);
    }
done:
    free(a);
    free(b);
    free(c16);
    free(c32);
    free(want);
    return wrong;
}

/* A row's mpcl-mma program for dt, as the verification builds it and
 * mpcl__engine_program later does: the shared headers and common.cl, then
 * the row's kernels, with the row's option. */
static void gemm_program(const char *gemm_source, const char *option, mpcl_dtype dt,
                         const char *names[MPCL__ENGINE_PROGRAM_FILES], char *options,
                         size_t size) {
    names[0] = "abi.h";
    names[1] = "activations.h";
    names[2] = "common.cl";
    names[3] = gemm_source;
    snprintf(options, size, "-cl-std=CL1.2 %s%s",
             dt == MPCL_DTYPE_BF16 ? "-DMPCL_STORAGE_BF16=1" : "-DMPCL_STORAGE_F16=1", option);
}

/* Wrong elements over every launch, whose elements (the checks) go to
 * *total; *total + 1 when a kernel did not build or run. In dt's program with
 * the row's option: mpcl_gemm_mma with A^T B^T into a 16-bit C, then A B
 * into an f32 C; then the pipelined kernels, NN, NT and TN, of every tile
 * row whose local memory the device has (the others are never taken:
 * mpcl__mma_pipe_tile_bytes), on both of pipe_shapes, one with C 16-bit and
 * the other with C f32 (alternating over the rows and pairs): every kernel
 * runs, and every tile row and pair on both paths of its loads. */
static int check_gemm(cl_context cl, cl_device_id dev, cl_command_queue q, const engine *e,
                      mpcl_dtype dt, mpcl__probe_log *log, int *total) {
    const char *names[MPCL__ENGINE_PROGRAM_FILES];
    char options[160];
    gemm_program(e->gemm_source, e->program_option, dt, names, options, sizeof options);
    gemm_launch launches[2 + 3 * 2 * MPCL__MMA_PIPE_TILES] = {
        {"mpcl_gemm_mma", simple_shape, MPCL_ABI_MMA_ITEMS, MPCL_ABI_MMA_TILE, MPCL_ABI_MMA_TILE,
         true, true, true, 0},
        {"mpcl_gemm_mma_cf32", simple_shape, MPCL_ABI_MMA_ITEMS, MPCL_ABI_MMA_TILE,
         MPCL_ABI_MMA_TILE, false, false, false, 0}};
    size_t count = 2;
    cl_ulong local_mem = 0;
    clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL);
    bool emulated = option_emulates(e->program_option);
    for (int t = 0; t < MPCL__MMA_PIPE_TILES; t++) {
        const mpcl__mma_pipe_tile *pt = &mpcl__mma_pipe_tiles[t];
        if (mpcl__mma_pipe_tile_bytes(pt, emulated) > local_mem) continue;
        for (int pair = 0; pair < 3; pair++)
            for (int shape = 0; shape < 2; shape++) {
                bool c16 = (t + pair + shape) % 2 == 0, ta = pair == 2, tb = pair == 1;
                launches[count++] = (gemm_launch){
                    pt->kernels[pair][!c16],
                    pipe_shapes[shape],
                    (int)pt->items,
                    (int)pt->rows,
                    (int)pt->cols,
                    ta,
                    tb,
                    c16,
                    MPCL_ABI_MMA_PIPE_LOCAL_BYTES(pt->rows, pt->cols, pt->items, ta, tb, emulated)};
            }
    }
    *total = 0;
    for (size_t i = 0; i < count; i++) *total += launches[i].shape.m * launches[i].shape.n;
    /* With the options of the run's own build (mpcl__engine_program), so
     * that the program verified is the program run, and a driver's cache of
     * it serves both. */
    char *build_options = mpcl__compiler_options(options);
    cl_program p = build_options
                       ? mpcl__probe_build_sources(cl, dev, names, MPCL__ENGINE_PROGRAM_FILES,
                                                   build_options, log)
                       : NULL;
    free(build_options);
    if (!p) return *total + 1;
    int wrong = 0;
    for (size_t i = 0; i < count && wrong <= *total; i++) {
        int w = check_launch(cl, q, p, dt, &launches[i]);
        wrong = w < 0 ? *total + 1 : wrong + w;
    }
    clReleaseProgram(p);
    return wrong;
}

/* Runs e's probe (f16 and bf16 tiles) and, where the tiles are exact, its
 * mpcl-mma kernels: verified only when both are, so that the plan never
 * takes kernels that did not build or were wrong here. */
void mpcl__matrix_engine_verify_row(cl_context cl, cl_device_id dev, cl_command_queue q,
                                    const engine *e, mpcl_device_info *info) {
    snprintf(info->matrix_engine_kind, sizeof info->matrix_engine_kind, "%s", e->kind);
    enum { TILE = TILE_M * TILE_N };
    mpcl__probe_log log = {""}, none = {""}, gemm_log[2] = {{""}, {""}};
    char *src = mpcl__cl_source_load(e->source, NULL);
    cl_program p = src ? mpcl__probe_build(cl, dev, src, "-cl-std=CL1.2", &log) : NULL;
    free(src);
    int f16 = p ? check_tile(cl, q, p, e, "probe_mma_f16", MPCL_DTYPE_F16) : TILE + 1;
    int bf16 = p ? check_tile(cl, q, p, e, "probe_mma_bf16", MPCL_DTYPE_BF16) : TILE + 1;
    if (p) clReleaseProgram(p);
    bool tiles = f16 == 0 && bf16 == 0;
    int total16 = 0, totalbf16 = 0;
    int g16 = tiles ? check_gemm(cl, dev, q, e, MPCL_DTYPE_F16, &gemm_log[0], &total16) : 0;
    int gbf16 = tiles ? check_gemm(cl, dev, q, e, MPCL_DTYPE_BF16, &gemm_log[1], &totalbf16) : 0;
    info->matrix_engine =
        tiles && g16 == 0 && gbf16 == 0 ? MPCL_MATRIX_ENGINE_VERIFIED : MPCL_MATRIX_ENGINE_BROKEN;
    /* Four parts of the detail, each of at most (MPCL_INFO_STR - 8) / 4
     * characters; the kernels' only where the tiles were exact. */
    char part[4][(MPCL_INFO_STR - 8) / 4 + 1], what[64];
    snprintf(what, sizeof what, "%s, f16", e->instruction);
    mpcl__probe_describe(part[0], sizeof part[0], what, f16, TILE, &log);
    mpcl__probe_describe(part[1], sizeof part[1], "bf16", bf16, TILE, &none);
    if (!tiles) {
        snprintf(info->matrix_engine_detail, sizeof info->matrix_engine_detail, "%s; %s", part[0],
                 part[1]);
        return;
    }
    mpcl__probe_describe(part[2], sizeof part[2], "mpcl-mma f16", g16, total16, &gemm_log[0]);
    mpcl__probe_describe(part[3], sizeof part[3], "bf16", gbf16, totalbf16, &gemm_log[1]);
    snprintf(info->matrix_engine_detail, sizeof info->matrix_engine_detail, "%s; %s; %s; %s",
             part[0], part[1], part[2], part[3]);
}

void mpcl__matrix_engine_verify(cl_context cl, cl_device_id dev, cl_command_queue q,
                                mpcl_device_info *info) {
    char why[MPCL_INFO_STR] = "";
    size_t used = 0;
    for (size_t i = 0; i < NENGINES; i++) {
        const char *reason = engines[i].unavailable(dev);
        if (!reason) {
            mpcl__matrix_engine_verify_row(cl, dev, q, &engines[i], info);
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

mpcl_status mpcl__matrix_engine_emulate(mpcl_context *ctx) {
    if (ctx->engine_programs[MPCL_DTYPE_F16] || ctx->engine_programs[MPCL_DTYPE_BF16])
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "the matrix engine's emulation must come before mpcl-mma's programs");
    ctx->info.matrix_engine = MPCL_MATRIX_ENGINE_VERIFIED;
    snprintf(ctx->info.matrix_engine_kind, sizeof ctx->info.matrix_engine_kind, "%s",
             EMULATED_KIND);
    snprintf(ctx->info.matrix_engine_detail, sizeof ctx->info.matrix_engine_detail,
             "emulated for tests");
    return MPCL_OK;
}

bool mpcl__matrix_engine_emulated(const mpcl_device_info *info) {
    return option_emulates(mpcl__matrix_engine_program_option(info));
}

/* The verified row of info, NULL where none verified; the emulation is the
 * NVIDIA row's kernels. */
static const engine *verified_row(const mpcl_device_info *info, const char **option) {
    if (info->matrix_engine != MPCL_MATRIX_ENGINE_VERIFIED) return NULL;
    if (strcmp(info->matrix_engine_kind, EMULATED_KIND) == 0) {
        *option = EMULATED_OPTION;
        return &engines[0];
    }
    for (size_t i = 0; i < NENGINES; i++)
        if (strcmp(engines[i].kind, info->matrix_engine_kind) == 0) {
            *option = engines[i].program_option;
            return &engines[i];
        }
    return NULL;
}

const char *mpcl__matrix_engine_program_option(const mpcl_device_info *info) {
    const char *option = "";
    verified_row(info, &option);
    return option;
}

bool mpcl__matrix_engine_gemm_program(const mpcl_device_info *info, mpcl_dtype dt,
                                      const char *names[MPCL__ENGINE_PROGRAM_FILES], char *options,
                                      size_t size) {
    const char *option = "";
    const engine *e = verified_row(info, &option);
    if (e) gemm_program(e->gemm_source, option, dt, names, options, size);
    return e != NULL;
}

const char *mpcl__matrix_engine_source(size_t i) {
    if (i >= 2 * NENGINES) return NULL;
    return i % 2 == 0 ? engines[i / 2].source : engines[i / 2].gemm_source;
}
