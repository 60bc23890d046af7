/* mpcl-bench gemm-square: square NN GEMMs of 1024, 2048, 4096 and 8192 on
 * CLBlast SGEMM (f32) and on the 16-bit paths with f32 accumulation that the
 * device runs (mpcl-mma in f16 and bf16 where its matrix engine verified,
 * clblast-staged in bf16), in TFLOP/s and as a ratio to SGEMM of the same
 * size in the same run: the tensor-core path's figures (bench/device/).
 * mpcl-mma runs with the library's choice of tile, then with each row of
 * MPCL_ABI_MMA_PIPE_TILES and its staging kernel forced (MPCL_MMA_TILE): the
 * table to tune. A CPU device stops at 1024 (8192^3 is 1.1 TFLOP). Each
 * figure: one warm-up call, then calls for at least MIN_SECONDS and 3
 * calls. */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "cl/abi.h" /* MPCL_ABI_MMA_PIPE_TILES */

#define MIN_SECONDS 0.5

typedef struct square_path {
    mpcl_gemm_path path;
    mpcl_dtype dtype;
    const char *tile; /* MPCL_MMA_TILE for mpcl-mma; NULL: the library's choice */
} square_path;

#define TILE_NAME(NAME, ...) #NAME,
static const char *const mma_tiles[] = {MPCL_ABI_MMA_PIPE_TILES(TILE_NAME) "simple"};
#undef TILE_NAME
enum { MMA_TILES = sizeof mma_tiles / sizeof mma_tiles[0] };

static mpcl_status make(mpcl_context *ctx, mpcl_dtype dt, size_t n, mpcl_tensor **t) {
    mpcl_status st = mpcl_tensor_create(ctx, dt, n, n, t);
    return st == MPCL_OK ? mpcl_tensor_fill(*t, 0.25f) : st;
}

/* Seconds per n^3 GEMM on the path. */
static mpcl_status time_square(mpcl_context *ctx, const square_path *p, size_t n, double *seconds) {
    mpcl_tensor *a = NULL, *b = NULL, *c = NULL;
    mpcl_status st = make(ctx, p->dtype, n, &a);
    if (st == MPCL_OK) st = make(ctx, p->dtype, n, &b);
    if (st == MPCL_OK) st = make(ctx, p->dtype, n, &c);
    if (st == MPCL_OK) st = mpcl_gemm(ctx, p->path, false, false, 1.0f, a, b, 0.0f, c);
    if (st == MPCL_OK) st = mpcl_context_finish(ctx);
    if (p->tile) setenv("MPCL_MMA_TILE", p->tile, 1);
    long reps = 0;
    double t0 = bench_now_s(), t = 0;
    while (st == MPCL_OK && (t < MIN_SECONDS || reps < 3)) {
        st = mpcl_gemm(ctx, p->path, false, false, 1.0f, a, b, 0.0f, c);
        if (st == MPCL_OK) st = mpcl_context_finish(ctx);
        reps++;
        t = bench_now_s() - t0;
    }
    *seconds = reps ? t / (double)reps : 0;
    unsetenv("MPCL_MMA_TILE");
    mpcl_tensor_destroy(a);
    mpcl_tensor_destroy(b);
    mpcl_tensor_destroy(c);
    return st;
}

int bench_cmd_gemm_square(mpcl_context *ctx, const bench_opts *opts) {
    const mpcl_device_info *d = mpcl_context_device(ctx);
    square_path paths[4 + 2 * MMA_TILES];
    size_t np = 0;
    paths[np++] = (square_path){MPCL_GEMM_CLBLAST_SGEMM, MPCL_DTYPE_F32, NULL};
    if (mpcl_plan_mma_usable(d)) {
        paths[np++] = (square_path){MPCL_GEMM_MPCL_MMA, MPCL_DTYPE_F16, NULL};
        paths[np++] = (square_path){MPCL_GEMM_MPCL_MMA, MPCL_DTYPE_BF16, NULL};
        for (size_t t = 0; t < MMA_TILES; t++) {
            paths[np++] = (square_path){MPCL_GEMM_MPCL_MMA, MPCL_DTYPE_F16, mma_tiles[t]};
            paths[np++] = (square_path){MPCL_GEMM_MPCL_MMA, MPCL_DTYPE_BF16, mma_tiles[t]};
        }
    }
    paths[np++] = (square_path){MPCL_GEMM_CLBLAST_STAGED, MPCL_DTYPE_BF16, NULL};
    static const size_t sizes[] = {1024, 2048, 4096, 8192};
    size_t nsizes = d->type == MPCL_DEVICE_TYPE_CPU ? 1 : sizeof sizes / sizeof sizes[0];

    FILE *note = opts->json ? stderr : stdout;
    fprintf(note, "device: %s; matrix engine %s %s (%s)\n", d->name, d->matrix_engine_kind,
            mpcl_matrix_engine_name(d->matrix_engine), d->matrix_engine_detail);
    jsonw w, *j = opts->json ? &w : NULL;
    if (j) {
        jsonw_init(j, stdout);
        jsonw_array_begin(j);
    } else {
        printf("%-6s %-15s %-10s %-5s %10s %9s %9s\n", "n", "path", "tile", "dtype", "ms",
               "TFLOP/s", "x sgemm");
    }
    for (size_t si = 0; si < nsizes; si++) {
        size_t n = sizes[si];
        double flops = 2.0 * (double)n * (double)n * (double)n, sgemm_s = 0;
        for (size_t pi = 0; pi < np; pi++) {
            double s = 0;
            mpcl_status st = time_square(ctx, &paths[pi], n, &s);
            if (st != MPCL_OK && paths[pi].tile) {
                /* A forced tile the device cannot run (its local memory):
                 * the table's other rows still count. */
                fprintf(note, "mpcl-mma %s %s: skipped: %s\n", paths[pi].tile,
                        mpcl_dtype_name(paths[pi].dtype), mpcl_context_errmsg(ctx));
                continue;
            }
            if (st != MPCL_OK) return bench_fail(mpcl_gemm_path_name(paths[pi].path), st);
            if (pi == 0) sgemm_s = s;
            const char *path = mpcl_gemm_path_name(paths[pi].path);
            const char *dtype = mpcl_dtype_name(paths[pi].dtype);
            const char *tile = paths[pi].tile ? paths[pi].tile : "-";
            if (j) {
                jsonw_object_begin(j);
                jsonw_kv_number(j, "n", (double)n);
                jsonw_kv_string(j, "path", path);
                jsonw_kv_string(j, "tile", tile);
                jsonw_kv_string(j, "dtype", dtype);
                jsonw_kv_number(j, "ms", s * 1e3);
                jsonw_kv_number(j, "tflops", flops / s * 1e-12);
                jsonw_kv_number(j, "ratio_to_sgemm", sgemm_s / s);
                jsonw_object_end(j);
            } else {
                printf("%-6zu %-15s %-10s %-5s %10.3f %9.2f %9.2f\n", n, path, tile, dtype, s * 1e3,
                       flops / s * 1e-12, sgemm_s / s);
            }
        }
    }
    if (j) {
        jsonw_array_end(j);
        fputc('\n', stdout);
    }
    return 0;
}
