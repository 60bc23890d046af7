/* The runtime area's internal declarations (status, device, kernels, cache,
 * context), for the areas above it. Nothing here is installed. */
#ifndef MPCL_RUNTIME_H
#define MPCL_RUNTIME_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stdarg.h>
#include <stddef.h>

#include "mpcl/cl_interop.h"
#include "mpcl/context.h"
#include "mpcl/device.h"
#include "mpcl/plan.h"
#include "mpcl/status.h"
#include "mpcl/half.h"
#include "mpcl/rng.h"

#include "cl/abi.h" /* mpcl-mma's pipelined tiles */
#include "mpcl/version.h"

#if defined(__GNUC__)
#define MPCL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define MPCL_PRINTF(f, a)
#endif

/* ---- 16-bit floats on the host (half.c) ---- */

/* One value or whole arrays between f32 and a 16-bit dtype (f16, or bf16
 * when dtype is MPCL_DTYPE_BF16), rounding as mpcl_f32_to_f16 and
 * mpcl_f32_to_bf16 do: as the device's stores round. */
uint16_t mpcl__f32_to_16bit(mpcl_dtype dtype, float x);
float mpcl__16bit_to_f32(mpcl_dtype dtype, uint16_t bits);
void mpcl__f32_to_16bit_n(mpcl_dtype dtype, const float *src, uint16_t *dst, size_t n);
void mpcl__16bit_to_f32_n(mpcl_dtype dtype, const uint16_t *src, float *dst, size_t n);

/* ---- status ---- */

/* Records "file:line: message" as the detail of the failure on this thread
 * (and on ctx when given) and returns status, so callers can write
 * `return mpcl__error(...)`. */
mpcl_status mpcl__error(mpcl_context *ctx, mpcl_status status, const char *file, int line,
                        const char *fmt, ...) MPCL_PRINTF(5, 6);
#define MPCL_ERROR(ctx, status, ...) mpcl__error((ctx), (status), __FILE__, __LINE__, __VA_ARGS__)

/* Maps an OpenCL error to an mpcl status and records the call and its name. */
mpcl_status mpcl__cl_error(mpcl_context *ctx, cl_int err, const char *call, const char *file,
                           int line);
mpcl_status mpcl__cl_status(cl_int err);

/* Needs `mpcl_status st` and a `cleanup:` label in the calling function. */
#define CHECK_CL(ctx, call)                                                       \
    do {                                                                          \
        cl_int check_cl_err_ = (call);                                            \
        if (check_cl_err_ != CL_SUCCESS) {                                        \
            st = mpcl__cl_error((ctx), check_cl_err_, #call, __FILE__, __LINE__); \
            goto cleanup;                                                         \
        }                                                                         \
    } while (0)

/* Appends to the message just recorded (for build logs, device lists). */
void mpcl__error_append(mpcl_context *ctx, const char *text);
/* Records `text`, a whole message another thread recorded (mpcl_errmsg
 * there), as this thread's and ctx's message, word for word; returns status. */
mpcl_status mpcl__error_restore(mpcl_context *ctx, mpcl_status status, const char *text);
/* The failure this thread just recorded without a context (a call that
 * takes none) recorded on ctx too; returns status. */
mpcl_status mpcl__error_to_context(mpcl_context *ctx, mpcl_status status);

/* ---- device ---- */

/* Fills info for one device; the fp16 and bf16 fields are left UNTESTED. */
mpcl_status mpcl__device_query(cl_platform_id platform, cl_device_id device,
                               mpcl_device_info *info);
/* The fp16, bf16 and matrix-engine verification kernels on an existing
 * context and queue. */
void mpcl__fp16_verify(cl_context cl, cl_device_id device, cl_command_queue queue,
                       mpcl_device_info *info);
/* The first matrix engine (matrix_engine.c) that applies to the device,
 * probed; MPCL_MATRIX_ENGINE_NONE with every row's reason when none does.
 * Part of mpcl__fp16_verify. */
void mpcl__matrix_engine_verify(cl_context cl, cl_device_id device, cl_command_queue queue,
                                mpcl_device_info *info);
/* One row of the matrix-engine table (matrix_engine.c). */
typedef struct mpcl__matrix_engine_row {
    const char *kind;                             /* as mpcl-probe reports it */
    const char *(*unavailable)(cl_device_id dev); /* NULL: the probe may run; else why not */
    const char *source;         /* its probe (cl/): probe_mma_f16 and probe_mma_bf16 */
    const char *instruction;    /* for the detail */
    size_t work_items;          /* of the work-group that multiplies a probe's tile */
    const char *program_option; /* builds its mpcl-mma kernels (mpcl__engine_program) */
    const char *gemm_source;    /* those kernels (cl/), checked as part of the verification */
} mpcl__matrix_engine_row;
/* Verifies `row` on the device whatever its `unavailable` says (the table
 * asks that first; tests give rows of their own that run anywhere): its
 * probe's tiles, then its mpcl-mma kernels on one shape with edges. */
void mpcl__matrix_engine_verify_row(cl_context cl, cl_device_id device, cl_command_queue queue,
                                    const mpcl__matrix_engine_row *row, mpcl_device_info *info);
/* For tests: ctx's device gets a verified engine whose mpcl-mma kernels are
 * the NVIDIA row's with mma.sync computed by the lanes themselves, so that
 * they run on any device. Before mpcl-mma's programs are built. */
mpcl_status mpcl__matrix_engine_emulate(mpcl_context *ctx);
/* Whether the verified engine is mpcl__matrix_engine_emulate's. */
bool mpcl__matrix_engine_emulated(const mpcl_device_info *info);
/* The build option of the verified engine's mpcl-mma kernels; "" where no
 * engine verified. */
const char *mpcl__matrix_engine_program_option(const mpcl_device_info *info);
/* The program of the verified engine's mpcl-mma kernels for dt (f16 or
 * bf16), the same as its verification built: the cl/ files to join, in
 * order, and the build options. False where no engine verified. */
#define MPCL__ENGINE_PROGRAM_FILES 4
bool mpcl__matrix_engine_gemm_program(const mpcl_device_info *info, mpcl_dtype dt,
                                      const char *names[MPCL__ENGINE_PROGRAM_FILES], char *options,
                                      size_t size);
/* The cl/ sources of the rows' verification, NULL past the last: each row's
 * probe, then its mpcl-mma kernels (whose program starts with abi.h,
 * activations.h and common.cl). The verification's cache key covers them. */
const char *mpcl__matrix_engine_source(size_t i);
/* <cache folder>/verdicts, made when missing: small measured or verified
 * facts (verify_cache.c, nn/auto_plan.c), apart from the kernel binaries.
 * 0 when caching is off or the folder cannot be made. */
int mpcl__verdict_dir(char *buf, size_t size);
/* mpcl__fp16_verify through the cache folder (verify_cache.c): the verdict
 * of an earlier context on the same device, driver and probe sources when
 * there is one (true), else verified now and stored (false). */
bool mpcl__fp16_verify_cached(cl_context cl, cl_device_id device, cl_command_queue queue,
                              mpcl_device_info *info);
/* The cl ids behind a list entry. */
void mpcl__device_list_ids(const mpcl_device_list *list, size_t index, cl_platform_id *platform,
                           cl_device_id *device);

/* ---- kernels ---- */

typedef struct mpcl__cl_source {
    const char *name; /* file name in cl/ */
    const unsigned char *data;
    size_t size;
} mpcl__cl_source;

/* Generated at build time from the files in cl/ by cl/embed.py. */
extern const mpcl__cl_source mpcl__cl_sources[];
extern const size_t mpcl__cl_source_count;

/* One embedded file by name (or from $MPCL_CL_DIR when set, for development:
 * a file missing there is taken from the embedded copies; one that is there
 * but not a readable regular file is MPCL_ERR_IO naming it). *text is
 * malloc'ed and NUL-terminated; the caller frees it. */
mpcl_status mpcl__cl_source_read(const char *name, char **text, size_t *size);
/* The same, NULL on any failure (the reason recorded, mpcl_errmsg). */
char *mpcl__cl_source_load(const char *name, size_t *size);
/* The files `names`, read as mpcl__cl_source_read does, joined in order,
 * each followed by a newline; *out is malloc'ed. */
mpcl_status mpcl__cl_sources_join(const char *const names[], size_t count, char **out);

/* The library's program for one storage dtype, built on first use. */
mpcl_status mpcl__program(mpcl_context *ctx, mpcl_dtype storage, cl_program *out);
/* A kernel from that program, created once and kept by the context. */
mpcl_status mpcl__kernel(mpcl_context *ctx, mpcl_dtype storage, const char *name, cl_kernel *out);
/* mpcl-mma's program for f16 or bf16 storage, on a device whose matrix
 * engine verified (MPCL_ERR_UNSUPPORTED with the engine's detail where not),
 * built on first use: apart from the library's, so that the library never
 * depends on the engine and the engine's kernels compile only where used. */
mpcl_status mpcl__engine_program(mpcl_context *ctx, mpcl_dtype storage, cl_program *out);
/* A kernel from that program, as mpcl__kernel. */
mpcl_status mpcl__engine_kernel(mpcl_context *ctx, mpcl_dtype storage, const char *name,
                                cl_kernel *out);

/* `options` as every build of mpcl's own programs passes them: with -w
 * unless MPCL_VERBOSE=1 (kernels.c says why); malloc'ed, NULL when out of
 * memory. */
char *mpcl__compiler_options(const char *options);
/* Builds `source` with `options` through the binary cache. The build log of a
 * failure is in the error message. Exposed for tests. */
mpcl_status mpcl__program_build(mpcl_context *ctx, const char *source, const char *options,
                                cl_program *out);

/* The tile shapes of mpcl's GEMM (src/compute/gemm.c picks one; tests force
 * each). */
typedef enum mpcl__gemm_tiles {
    MPCL__GEMM_TILES_AUTO,
    MPCL__GEMM_TILES_16X16,
    MPCL__GEMM_TILES_4X16,
    MPCL__GEMM_TILES_8X8,
    MPCL__GEMM_TILES_BF16_DOT, /* bf16 on AVX512-BF16 where verified (gemm.c's dot_kernel) */
} mpcl__gemm_tiles;

/* What the last mpcl__program_build did with the cache; for tests and bench. */
typedef enum mpcl__cache_outcome {
    MPCL__CACHE_OFF,
    MPCL__CACHE_HIT,
    MPCL__CACHE_MISS,     /* no entry: built and stored */
    MPCL__CACHE_REJECTED, /* an entry was there but corrupt or foreign: rebuilt */
} mpcl__cache_outcome;
mpcl__cache_outcome mpcl__cache_last_outcome(const mpcl_context *ctx);

/* ---- counter-based random numbers (rng.c) ---- */

/* splitmix64's output function (mpcl_rng_next's): a bijection of 64-bit
 * words in which every output bit depends on every input bit. */
uint64_t mpcl__mix64(uint64_t z);
/* Draw `index` of the stream that (seed, counter) names: mix64(key +
 * 0x9e3779b97f4a7c15 * (index + 1)) with key = mpcl__counter_key(seed,
 * counter) = mix64(seed ^ mix64(counter)), all mod 2^64. Any draw is
 * computed alone, on the host or on the device (mpcl_counter_draw in
 * cl/dropout.cl, the same bits): the dropout masks and the token windows. */
uint64_t mpcl__counter_key(uint64_t seed, uint64_t counter);
uint64_t mpcl__counter_draw(uint64_t key, uint64_t index);

/* ---- cached text (number.c) ---- */

/* Cache bodies are read back only in the exact form written: fields split at
 * single spaces. Returns the field at *rest, cut at its space, and moves
 * *rest past it (NULL after the last field; an empty field for a doubled
 * space). */
char *mpcl__next_field(char **rest);

/* ---- environment (env.c) ---- */

/* mpcl's environment variables with a fixed set of values. */
typedef enum mpcl__env_var {
    MPCL_ENV_FP16,      /* force, off */
    MPCL_ENV_GEMM,      /* a GEMM path's name */
    MPCL_ENV_AUTO,      /* capability */
    MPCL_ENV_CACHE,     /* 0 */
    MPCL_ENV_DATA,      /* auto, device, stream: where the trainer's data sets go */
    MPCL_ENV_CONV,      /* direct, im2col: the convolution's kernels (compute/conv.c) */
    MPCL_ENV_PROFILE,   /* 1: time every launch on the device (profile.c) */
    MPCL_ENV_BF16_DOT,  /* off: bf16 GEMMs without AVX512-BF16's dot product (gemm.c) */
    MPCL_ENV_NORM,      /* group, row: the layer norm's kernels (layer_normalization.c) */
    MPCL_ENV_ATTENTION, /* row, block, tile: the attention's kernels (causal_self_attention.c) */
    MPCL_ENV_LM_HEAD,   /* whole, chunked: the LM head's logits (tied_lm_head.c) */
    MPCL_ENV_XENT,      /* row, group: the softmax loss's kernel for wide rows (losses.c) */
    MPCL_ENV_MMA_TILE,  /* a tile row's name or simple: mpcl-mma's kernels (gemm_mma.c) */
    MPCL_ENV_COUNT
} mpcl__env_var;
/* Every variable checked: a value outside its set (empty counts as unset) is
 * MPCL_ERR_INVALID_ARG naming the variable, the value and the set. Called
 * where the library is entered (the device list, the plan overrides), so a
 * typo stops the program there instead of falling back silently later. */
mpcl_status mpcl__env_check(void);
/* The variable's value, one of its set; NULL when unset, empty, or outside
 * the set (which mpcl__env_check refuses). */
const char *mpcl__env_value(mpcl__env_var var);
/* The GEMM paths' names by mpcl_gemm_path, NULL-terminated (plan.c). */
extern const char *const mpcl__gemm_path_names[MPCL_GEMM_PATH_COUNT + 1];
/* mpcl-mma's pipelined tiles (matrix_engine.c), the rows of
 * MPCL_ABI_MMA_PIPE_TILES: C's tile and the work-group's items, and the
 * kernels' names (static strings) by transpose pair (NN, NT, TN) and C in
 * the storage dtype or f32. */
#define MPCL__MMA_PIPE_ROW_COUNT(...) +1
enum { MPCL__MMA_PIPE_TILES = 0 MPCL_ABI_MMA_PIPE_TILES(MPCL__MMA_PIPE_ROW_COUNT) };
typedef struct mpcl__mma_pipe_tile {
    const char *name;
    unsigned rows, cols, items;
    const char *kernels[3][2];
} mpcl__mma_pipe_tile;
extern const mpcl__mma_pipe_tile mpcl__mma_pipe_tiles[MPCL__MMA_PIPE_TILES];
/* The most local memory t's kernels take (over its transpose pairs), in
 * bytes: a device with less never runs them. */
size_t mpcl__mma_pipe_tile_bytes(const mpcl__mma_pipe_tile *t, bool emulated);
/* The names MPCL_MMA_TILE takes: the pipelined tiles', then "simple". */
extern const char *const mpcl__mma_tile_names[MPCL__MMA_PIPE_TILES + 2];

/* ---- cache ---- */

/* The cache folder (without trailing slash) into buf; false when caching is off
 * (MPCL_CACHE=0) or no folder can be named. */
int mpcl__cache_dir(char *buf, size_t size);
typedef struct mpcl__cache_key {
    unsigned char bytes[32]; /* SHA-256 of the key material */
} mpcl__cache_key;
mpcl__cache_key mpcl__cache_key_make(const char *const parts[], size_t count);
/* The key of the last mpcl__program_build's entry, for tests. */
mpcl__cache_key mpcl__cache_last_key(const mpcl_context *ctx);
/* <dir>/<64 hex digits of key>.bin */
void mpcl__cache_entry_path(char *buf, size_t size, const char *dir, mpcl__cache_key key);
/* SHA-256 of n bytes (FIPS 180-4), for the cache and its tests. */
void mpcl__sha256(const void *data, size_t n, unsigned char out[32]);
/* The binary stored under key, malloc'ed; NULL when absent. *rejected is set
 * when an entry existed but failed validation or is not a regular file (a
 * FIFO there is never waited on). */
unsigned char *mpcl__cache_read(const char *dir, mpcl__cache_key key, size_t *size, int *rejected);
/* Through the atomic writer (fileio.h): temp file in the same folder,
 * fsynced, then renamed over the entry; anything but a regular file under
 * the entry's name is left alone. Failure returns nothing by design (the
 * reason is in mpcl_errmsg): a cache that cannot be written only costs
 * time. */
void mpcl__cache_write(const char *dir, mpcl__cache_key key, const unsigned char *data,
                       size_t size);

/* ---- profiling (profile.c) ---- */

/* Per-kernel device times, summed by name, when MPCL_PROFILE=1. */
typedef struct mpcl__profile mpcl__profile;
bool mpcl__profile_requested(void);
mpcl__profile *mpcl__profile_create(void);
/* Prints the table to stderr (nothing for NULL). */
void mpcl__profile_report(mpcl__profile *p);
void mpcl__profile_destroy(mpcl__profile *p);
/* A launch passes mpcl__profile_slot(ctx) as its event (NULL when not
 * profiling), then calls mpcl__profile_record(ctx, name) once it is
 * enqueued; name must outlive the context (a static string). */
cl_event *mpcl__profile_slot(mpcl_context *ctx);
void mpcl__profile_record(mpcl_context *ctx, const char *name);

/* ---- context ---- */

#define MPCL__MAX_KERNELS 256
/* The context's workspaces (compute/tensor.c's mpcl__workspace): slots 0-2
 * are the GEMM's (clblast-staged's A, B and C; the packs and the staged
 * transpose reuse 0 and 1), then the slots named below. */
#define MPCL__WORKSPACE_LOSS_PARTIALS 3
#define MPCL__WORKSPACE_BIAS_PARTIALS 4  /* the GPU-shaped bias gradient's (ops.c) */
#define MPCL__WORKSPACE_CONV_WEIGHTS_T 5 /* the chunked input gradient's weights^T (conv.c) */
#define MPCL__WORKSPACE_NORM_PARTIALS 6  /* the layer norm's parameter gradients (CPU layout) */
#define MPCL__WORKSPACE_SLOTS 7

struct mpcl_context {
    cl_platform_id platform;
    cl_device_id device;
    cl_context cl;
    cl_command_queue queue;
    mpcl_device_info info;
    mpcl_plan_overrides overrides;
    cl_program programs[MPCL_DTYPE_COUNT];        /* the library's, per storage dtype */
    cl_program engine_programs[MPCL_DTYPE_COUNT]; /* mpcl-mma's (f16, bf16) */
    struct {
        mpcl_dtype storage;
        const char *name; /* points into static strings of the callers */
        cl_kernel kernel;
    } kernels[MPCL__MAX_KERNELS];
    int kernel_count;
    mpcl__cache_outcome cache_outcome;
    mpcl__cache_key cache_key;    /* the last program build's */
    bool verdict_cached;          /* the fp16/bf16 verification was read from the cache */
    mpcl__gemm_tiles gemm_tiles;  /* mpcl's GEMM tiles; AUTO but in tests */
    unsigned gemm_strip;          /* tiles per item (a strip); 0: by the shape */
    int mma_tile;                 /* mpcl-mma's pipelined tile; -1 but in tests */
    int bias_grad_parts;          /* the bias gradient's shape: 0 by the device, 1 GPU, -1 CPU */
    size_t cache_bytes;           /* CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, 0 if none; tests set it */
    size_t bytes_now, bytes_peak; /* tensors and workspaces */
    /* Workspaces, grown on demand (never shrunk) and reused by every call:
     * the queue is in order. */
    cl_mem workspace[MPCL__WORKSPACE_SLOTS];
    size_t workspace_bytes[MPCL__WORKSPACE_SLOTS];
    uint64_t launches;      /* kernels and CLBlast calls enqueued */
    uint64_t syncs;         /* blocking calls: finishes, blocking reads and writes */
    mpcl__profile *profile; /* NULL unless MPCL_PROFILE=1 */
    char *errmsg;           /* owned; never NULL after create */
};

/* A marker on ctx's queue: *out completes when everything enqueued before
 * it has (*out NULL on failure). */
mpcl_status mpcl__marker(mpcl_context *ctx, cl_event *out);
/* Waits for e and releases it; a blocking call, counted in ctx->syncs. */
mpcl_status mpcl__wait_event(mpcl_context *ctx, cl_event e);

/* Call after a host-side write into mem (a write, copy or fill command, or a
 * new buffer before its first use); does something on Oclgrind only. Its
 * uninitialized-value checker mistracks such writes: it replaces a buffer's
 * whole record by one the size of the write, so that a write which starts
 * past the buffer's start or stops short of its end (a fill of one pattern
 * is many of them; a tensor view; a copy at an offset) leaves the rest, and
 * then all of it, "uninitialized"; and a new buffer inherits the record of
 * the released one whose number it reuses. Rewriting the whole underlying
 * buffer from the host gives it a record that matches: everything
 * initialized (mpcl zero-fills every tensor it creates), so the checker's
 * reports come from private and local memory and what flows from them.
 * Blocking, and not counted in ctx->syncs (tests that count a step's
 * blocking calls run on Oclgrind too). */
mpcl_status mpcl__host_wrote(mpcl_context *ctx, cl_mem mem);

/* Counts `bytes` more of device memory held by ctx (tensors, workspaces). */
static inline void mpcl__count_bytes(mpcl_context *ctx, size_t bytes) {
    ctx->bytes_now += bytes;
    if (ctx->bytes_now > ctx->bytes_peak) ctx->bytes_peak = ctx->bytes_now;
}

#endif
