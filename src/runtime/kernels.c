/* The kernels area: embedded cl/ sources, one program per (context, storage
 * dtype), kernels created once, and program builds through the binary cache. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/fileio.h"
#include "runtime/runtime.h"

/* One program per float dtype of the table, with -DMPCL_STORAGE_<SUFFIX>=1
 * (cl/common.cl turns it into storage_t, LOAD and STORE); NULL for the
 * others, which have no program. Never -cl-fast-relaxed-math or
 * -cl-finite-math-only: the non-finite check of loss scaling relies on real
 * inf and NaN. */
#define STORAGE_OPTION_(suffix, name, bytes, is_float) \
    [MPCL_DTYPE_##suffix] = is_float ? "-cl-std=CL1.2 -DMPCL_STORAGE_" #suffix "=1" : NULL,
static const char *const storage_options[MPCL_DTYPE_COUNT] = {MPCL_DTYPE_TABLE(STORAGE_OPTION_)};
#undef STORAGE_OPTION_

/* The whole of an open file, NUL-terminated; NULL when it cannot be read. */
static char *read_all(FILE *f, size_t *size) {
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
            if (fread(buf, 1, (size_t)n, f) == (size_t)n) {
                buf[n] = '\0';
                if (size) *size = (size_t)n;
            } else {
                free(buf);
                buf = NULL;
            }
        }
    }
    return buf;
}

/* MPCL_CL_DIR/name into *text; *text stays NULL when the folder has no such
 * file (the embedded copy is used). Anything there that is not a readable
 * regular file is an error naming it: a FIFO is refused, never waited on. */
static mpcl_status read_dev_source(const char *dir, const char *name, char **text, size_t *size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unsigned mode = 0;
    FILE *f = mpcl__open_regular_quiet(path, &mode);
    if (!f) {
        if (mode)
            return MPCL_ERROR(NULL, MPCL_ERR_IO, "MPCL_CL_DIR: '%s' is %s, not a regular file",
                              path, mpcl__file_kind(mode));
        if (errno == ENOENT) return MPCL_OK;
        return MPCL_ERROR(NULL, MPCL_ERR_IO, "MPCL_CL_DIR: cannot open '%s': %s", path,
                          strerror(errno));
    }
    *text = read_all(f, size);
    fclose(f);
    if (!*text) return MPCL_ERROR(NULL, MPCL_ERR_IO, "MPCL_CL_DIR: cannot read '%s'", path);
    return MPCL_OK;
}

mpcl_status mpcl__cl_source_read(const char *name, char **text, size_t *size) {
    *text = NULL;
    /* Development: edit cl/ and rerun without rebuilding the library. */
    const char *dir = getenv("MPCL_CL_DIR");
    if (dir && *dir) {
        mpcl_status st = read_dev_source(dir, name, text, size);
        if (st != MPCL_OK || *text) return st;
    }
    for (size_t i = 0; i < mpcl__cl_source_count; i++) {
        if (strcmp(mpcl__cl_sources[i].name, name) != 0) continue;
        if (!(*text = malloc(mpcl__cl_sources[i].size + 1)))
            return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "kernel source %s", name);
        memcpy(*text, mpcl__cl_sources[i].data, mpcl__cl_sources[i].size + 1);
        if (size) *size = mpcl__cl_sources[i].size;
        return MPCL_OK;
    }
    return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "no kernel source named %s", name);
}

char *mpcl__cl_source_load(const char *name, size_t *size) {
    char *text = NULL;
    (void)mpcl__cl_source_read(name, &text, size);
    return text;
}

mpcl_status mpcl__cl_sources_join(const char *const names[], size_t count, char **out) {
    *out = NULL;
    char *all = NULL;
    size_t used = 0;
    for (size_t i = 0; i < count; i++) {
        size_t n = 0;
        char *text = NULL;
        mpcl_status st = mpcl__cl_source_read(names[i], &text, &n);
        char *grown = st == MPCL_OK ? realloc(all, used + n + 2) : NULL;
        if (!grown) {
            free(text);
            free(all);
            return st != MPCL_OK
                       ? st
                       : MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "joining kernel sources");
        }
        all = grown;
        memcpy(all + used, text, n);
        used += n;
        all[used++] = '\n';
        all[used] = '\0';
        free(text);
    }
    if (!all && !(all = calloc(1, 1)))
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "joining kernel sources");
    *out = all;
    return MPCL_OK;
}

/* Whether an embedded file is the mpcl-mma kernels of a matrix engine's row:
 * those have their own program (mpcl__engine_program). */
static bool is_engine_gemm_source(const char *name) {
    for (size_t i = 1; mpcl__matrix_engine_source(i); i += 2)
        if (strcmp(mpcl__matrix_engine_source(i), name) == 0) return true;
    return false;
}

/* The library program: every embedded file except the probes and the
 * matrix engines' kernels, in the order meson lists them: cl/abi.h first
 * (the constants shared with the C side, which the C sources include too),
 * then common.cl. Each file, abi.h included, comes from MPCL_CL_DIR when that
 * is set, so an edited ABI header reaches the device side without a rebuild
 * (and tests/test_abi.c notices). */
static mpcl_status library_source(char **out) {
    *out = NULL;
    const char **names = malloc(mpcl__cl_source_count * sizeof *names);
    if (!names) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "assembling kernel sources");
    size_t count = 0;
    for (size_t i = 0; i < mpcl__cl_source_count; i++) {
        const char *name = mpcl__cl_sources[i].name;
        if (!mpcl__has_suffix(name, "_probe.cl") && !is_engine_gemm_source(name))
            names[count++] = name;
    }
    mpcl_status st = mpcl__cl_sources_join(names, count, out);
    free(names);
    return st;
}

static mpcl_status build_log_error(mpcl_context *ctx, cl_program p, cl_int err) {
    mpcl_status st = MPCL_ERROR(ctx, MPCL_ERR_BUILD, "clBuildProgram returned %s (%d) on %s",
                                mpcl_cl_error_name(err), (int)err, ctx->info.name);
    size_t n = 0;
    if (clGetProgramBuildInfo(p, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) == CL_SUCCESS &&
        n > 0) {
        char *log = malloc(n + 1);
        if (log && clGetProgramBuildInfo(p, ctx->device, CL_PROGRAM_BUILD_LOG, n, log, NULL) ==
                       CL_SUCCESS) {
            log[n] = '\0';
            mpcl__error_append(ctx, "\nbuild log:\n");
            mpcl__error_append(ctx, log);
        }
        free(log);
    }
    return st;
}

static cl_program from_binary(mpcl_context *ctx, const unsigned char *bin, size_t size) {
    cl_int err, bin_status;
    cl_program p =
        clCreateProgramWithBinary(ctx->cl, 1, &ctx->device, &size, &bin, &bin_status, &err);
    if (err != CL_SUCCESS || bin_status != CL_SUCCESS) {
        if (p) clReleaseProgram(p);
        return NULL;
    }
    if (clBuildProgram(p, 1, &ctx->device, NULL, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

static void store_binary(cl_program p, const char *dir, mpcl__cache_key key) {
    size_t size = 0;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS ||
        size == 0)
        return;
    unsigned char *bin = malloc(size);
    if (bin && clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS)
        mpcl__cache_write(dir, key, bin, size);
    free(bin);
}

/* PoCL's clang prints "N warnings generated." straight to stderr, besides
 * the build log, on every cold build. -w drops the warnings at the source
 * (errors still reach the build log, which a failure's message carries),
 * unless MPCL_VERBOSE=1 asks to see them. Not part of the cache key: the
 * binary is the same. */
char *mpcl__compiler_options(const char *options) {
    const char *verbose = getenv("MPCL_VERBOSE");
    const char *extra = verbose && strcmp(verbose, "1") == 0 ? "" : " -w";
    size_t n = strlen(options ? options : "") + strlen(extra) + 1;
    char *all = malloc(n);
    if (all) snprintf(all, n, "%s%s", options ? options : "", extra);
    return all;
}

mpcl_status mpcl__program_build(mpcl_context *ctx, const char *source, const char *options,
                                cl_program *out) {
    *out = NULL;
    char dir[4096];
    const char *parts[] = {
        source,      options, ctx->info.name, ctx->info.driver_version, ctx->info.platform_version,
        MPCL_VERSION};
    mpcl__cache_key key = mpcl__cache_key_make(parts, sizeof parts / sizeof parts[0]);
    ctx->cache_key = key;
    bool cached = mpcl__cache_dir(dir, sizeof dir);
    ctx->cache_outcome = cached ? MPCL__CACHE_MISS : MPCL__CACHE_OFF;
    if (cached) {
        size_t size = 0;
        int rejected = 0;
        unsigned char *bin = mpcl__cache_read(dir, key, &size, &rejected);
        cl_program p = bin ? from_binary(ctx, bin, size) : NULL;
        free(bin);
        if (p) {
            ctx->cache_outcome = MPCL__CACHE_HIT;
            *out = p;
            return MPCL_OK;
        }
        /* An entry that reads back but does not load is as bad as a corrupt one. */
        if (rejected || bin) ctx->cache_outcome = MPCL__CACHE_REJECTED;
    }

    cl_int err;
    size_t len = strlen(source);
    cl_program p = clCreateProgramWithSource(ctx->cl, 1, &source, &len, &err);
    if (err != CL_SUCCESS)
        return mpcl__cl_error(ctx, err, "clCreateProgramWithSource", __FILE__, __LINE__);
    char *all_options = mpcl__compiler_options(options);
    err = all_options ? clBuildProgram(p, 1, &ctx->device, all_options, NULL, NULL)
                      : CL_OUT_OF_HOST_MEMORY;
    free(all_options);
    if (err != CL_SUCCESS) {
        mpcl_status st = build_log_error(ctx, p, err);
        clReleaseProgram(p);
        return st;
    }
    if (cached) store_binary(p, dir, key);
    *out = p;
    return MPCL_OK;
}

mpcl__cache_outcome mpcl__cache_last_outcome(const mpcl_context *ctx) {
    return ctx->cache_outcome;
}

mpcl__cache_key mpcl__cache_last_key(const mpcl_context *ctx) {
    return ctx->cache_key;
}

/* Clang's __builtin_prefetch in the kernels (MPCL_PREFETCH, cl/gemm.cl)
 * where the device's compiler lowers it to a prefetch instruction: PoCL's
 * and Intel's CPU runtimes. Rusticl's SPIR-V writer rejects llvm.prefetch
 * and Oclgrind reports it as an error, CPU devices too; a GPU hides memory
 * latency with its other work-items. */
static const char *prefetch_option(const mpcl_device_info *d) {
    static const char *const platforms[] = {"Portable Computing Language", "Intel(R) OpenCL"};
    if (d->type != MPCL_DEVICE_TYPE_CPU) return "";
    for (size_t i = 0; i < sizeof platforms / sizeof platforms[0]; i++)
        if (strcmp(d->platform, platforms[i]) == 0) return " -DMPCL_PREFETCH=1";
    return "";
}

mpcl_status mpcl__program(mpcl_context *ctx, mpcl_dtype storage, cl_program *out) {
    if (!mpcl_dtype_is_float(storage) || !storage_options[storage])
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE, "no program for storage dtype %s",
                          mpcl_dtype_name(storage));
    if (!ctx->programs[storage]) {
        char *source = NULL;
        mpcl_status st = library_source(&source);
        if (st != MPCL_OK) {
            mpcl__error_append(ctx, ", assembling the kernel program"); /* and onto ctx */
            return st;
        }
        /* The bf16 program takes the AVX512-BF16 GEMM (cl/gemm_bf16_dot.cl)
         * where the verification ran its instruction and got the right bits. */
        char options[256];
        snprintf(options, sizeof options, "%s%s%s", storage_options[storage],
                 storage == MPCL_DTYPE_BF16 && ctx->info.bf16_dot == MPCL_BF16_DOT_VERIFIED
                     ? " -DMPCL_BF16_DOT_X86=1"
                     : "",
                 prefetch_option(&ctx->info));
        st = mpcl__program_build(ctx, source, options, &ctx->programs[storage]);
        free(source);
        if (st != MPCL_OK) return st;
    }
    *out = ctx->programs[storage];
    return MPCL_OK;
}

mpcl_status mpcl__engine_program(mpcl_context *ctx, mpcl_dtype storage, cl_program *out) {
    if (storage != MPCL_DTYPE_F16 && storage != MPCL_DTYPE_BF16)
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE, "mpcl-mma takes f16 or bf16 storage, not %s",
                          mpcl_dtype_name(storage));
    if (!ctx->engine_programs[storage]) {
        const char *names[MPCL__ENGINE_PROGRAM_FILES];
        char options[160];
        if (!mpcl__matrix_engine_gemm_program(&ctx->info, storage, names, options, sizeof options))
            return MPCL_ERROR(ctx, MPCL_ERR_UNSUPPORTED, "%s has no verified matrix engine (%s)",
                              ctx->info.name, ctx->info.matrix_engine_detail);
        char *source = NULL;
        mpcl_status st = mpcl__cl_sources_join(names, MPCL__ENGINE_PROGRAM_FILES, &source);
        if (st != MPCL_OK) {
            mpcl__error_append(ctx, ", assembling mpcl-mma's program");
            return st;
        }
        st = mpcl__program_build(ctx, source, options, &ctx->engine_programs[storage]);
        free(source);
        if (st != MPCL_OK) return st;
    }
    *out = ctx->engine_programs[storage];
    return MPCL_OK;
}

typedef mpcl_status (*program_getter)(mpcl_context *ctx, mpcl_dtype storage, cl_program *out);

/* `name` from `program`'s program for `storage`, created once: the two
 * programs' kernel names are distinct, so (storage, name) finds it again. */
static mpcl_status kernel_from(mpcl_context *ctx, program_getter program, mpcl_dtype storage,
                               const char *name, cl_kernel *out) {
    for (int i = 0; i < ctx->kernel_count; i++) {
        if (ctx->kernels[i].storage == storage && strcmp(ctx->kernels[i].name, name) == 0) {
            *out = ctx->kernels[i].kernel;
            return MPCL_OK;
        }
    }
    if (ctx->kernel_count == MPCL__MAX_KERNELS)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "more than %d kernels; raise MPCL__MAX_KERNELS", MPCL__MAX_KERNELS);
    cl_program p;
    mpcl_status st = program(ctx, storage, &p);
    if (st != MPCL_OK) return st;
    cl_int err;
    cl_kernel k = clCreateKernel(p, name, &err);
    if (err != CL_SUCCESS) {
        return MPCL_ERROR(ctx, mpcl__cl_status(err), "clCreateKernel(\"%s\") returned %s (%d)",
                          name, mpcl_cl_error_name(err), (int)err);
    }
    ctx->kernels[ctx->kernel_count].storage = storage;
    ctx->kernels[ctx->kernel_count].name = name;
    ctx->kernels[ctx->kernel_count].kernel = k;
    ctx->kernel_count++;
    *out = k;
    return MPCL_OK;
}

mpcl_status mpcl__kernel(mpcl_context *ctx, mpcl_dtype storage, const char *name, cl_kernel *out) {
    return kernel_from(ctx, mpcl__program, storage, name, out);
}

mpcl_status mpcl__engine_kernel(mpcl_context *ctx, mpcl_dtype storage, const char *name,
                                cl_kernel *out) {
    return kernel_from(ctx, mpcl__engine_program, storage, name, out);
}
