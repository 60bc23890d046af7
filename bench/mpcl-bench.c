/* mpcl-bench: timings as tables (or JSON), each against a reference measured
 * in the same run. Subcommands live in one table; add a row to add one.
 *
 *   mpcl-bench gemm|gemm-rounds|train|train-rounds|elementwise|conv|gemm-cnn [--device SEL]
 * [--json]
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int bench_fail(const char *what, mpcl_status st) {
    fprintf(stderr, "mpcl-bench: %s: %s: %s\n", what, mpcl_status_name(st), mpcl_errmsg());
    return 1;
}

/* ---- gemm ---- */

typedef struct gemm_shape {
    int m, n, k;
    bool ta, tb;
} gemm_shape;

static const gemm_shape gemm_shapes[] = {
    {128, 128, 784, false, false}, {784, 128, 128, true, false}, {128, 10, 128, false, false},
    {128, 10, 128, true, false},   {128, 128, 10, false, true},  {1024, 1024, 1024, false, false},
};

/* The five GEMMs of one training batch of the 784-128-10 MLP, batch 128:
 * forward H = X W1, out = H W2; backward dW2 = H^T dOut, dH = dOut W2^T,
 * dW1 = X^T dH. */
static const gemm_shape mlp_batch[] = {
    {128, 128, 784, false, false}, {128, 10, 128, false, false}, {128, 10, 128, true, false},
    {128, 128, 10, false, true},   {784, 128, 128, true, false},
};
#define MLP_COUNT (sizeof mlp_batch / sizeof mlp_batch[0])

/* Operands of one shape on the device and on the host. */
typedef struct gemm_operands {
    mpcl_tensor *a, *b, *c;
    float *ha, *hb, *hc;
} gemm_operands;

static void operands_free(gemm_operands *o) {
    mpcl_tensor_destroy(o->a);
    mpcl_tensor_destroy(o->b);
    mpcl_tensor_destroy(o->c);
    free(o->ha);
    free(o->hb);
    free(o->hc);
    memset(o, 0, sizeof *o);
}

static mpcl_status operands_make(mpcl_context *ctx, mpcl_dtype dtype, const gemm_shape *s,
                                 gemm_operands *o) {
    memset(o, 0, sizeof *o);
    size_t m = (size_t)s->m, n = (size_t)s->n, k = (size_t)s->k;
    o->ha = malloc(m * k * sizeof(float));
    o->hb = malloc(k * n * sizeof(float));
    o->hc = malloc(m * n * sizeof(float));
    if (!o->ha || !o->hb || !o->hc) return MPCL_ERR_OUT_OF_MEMORY;
    unsigned x = 12345;
    for (size_t i = 0; i < m * k; i++)
        o->ha[i] = (float)((x = x * 1103515245u + 12345u) >> 16) / 65536.0f - 0.5f;
    for (size_t i = 0; i < k * n; i++)
        o->hb[i] = (float)((x = x * 1103515245u + 12345u) >> 16) / 65536.0f - 0.5f;
    for (size_t i = 0; i < m * n; i++) o->hc[i] = 0.0f;
    mpcl_status st;
    if ((st = mpcl_tensor_create(ctx, dtype, s->ta ? k : m, s->ta ? m : k, &o->a)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, dtype, s->tb ? n : k, s->tb ? k : n, &o->b)) != MPCL_OK ||
        (st = mpcl_tensor_create(ctx, dtype, m, n, &o->c)) != MPCL_OK ||
        (st = mpcl_tensor_upload_f32(o->a, o->ha, m * k)) != MPCL_OK ||
        (st = mpcl_tensor_upload_f32(o->b, o->hb, k * n)) != MPCL_OK)
        return st;
    return MPCL_OK;
}

static mpcl_status device_gemm(mpcl_context *ctx, mpcl_gemm_path path, const gemm_shape *s,
                               gemm_operands *o) {
    return mpcl_gemm(ctx, path, s->ta, s->tb, 1.0f, o->a, o->b, 0.0f, o->c);
}

static void host_gemm(const gemm_shape *s, gemm_operands *o) {
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
                s->m, s->n, s->k, 1.0f, o->ha, s->ta ? s->m : s->k, o->hb, s->tb ? s->k : s->n,
                0.0f, o->hc, s->n);
}

/* Seconds per call: one untimed warm-up (kernel builds, CLBlast's compile),
 * then calls back to back for at least `min_s`, finished once at the end. */
#define MIN_SECONDS 0.3
static mpcl_status time_device(mpcl_context *ctx, mpcl_gemm_path path, const gemm_shape *s,
                               size_t count, gemm_operands *o, double *seconds) {
    mpcl_status st;
    for (size_t i = 0; i < count; i++)
        if ((st = device_gemm(ctx, path, &s[i], &o[i])) != MPCL_OK) return st;
    if ((st = mpcl_context_finish(ctx)) != MPCL_OK) return st;
    long reps = 0, batch = 1;
    double t0 = bench_now_s(), t = 0;
    for (;;) {
        for (long r = 0; r < batch; r++)
            for (size_t i = 0; i < count; i++)
                if ((st = device_gemm(ctx, path, &s[i], &o[i])) != MPCL_OK) return st;
        if ((st = mpcl_context_finish(ctx)) != MPCL_OK) return st;
        reps += batch;
        t = bench_now_s() - t0;
        if (t >= MIN_SECONDS && reps >= 3) break;
        if (batch < 64) batch *= 2;
    }
    *seconds = t / (double)reps;
    return MPCL_OK;
}

static double time_host(const gemm_shape *s, size_t count, gemm_operands *o) {
    for (size_t i = 0; i < count; i++) host_gemm(&s[i], &o[i]);
    long reps = 0;
    double t0 = bench_now_s(), t = 0;
    for (;;) {
        for (size_t i = 0; i < count; i++) host_gemm(&s[i], &o[i]);
        reps++;
        t = bench_now_s() - t0;
        if (t >= MIN_SECONDS && reps >= 3) break;
    }
    return t / (double)reps;
}

static double flops_of(const gemm_shape *s, size_t count) {
    double f = 0;
    for (size_t i = 0; i < count; i++) f += 2.0 * s[i].m * s[i].n * s[i].k;
    return f;
}

typedef struct gemm_row {
    char shape[48], trans[8];
    const char *path, *dtype;
    double gflops, us, openblas_gflops, ratio;
} gemm_row;

int bench_cmd_gemm(mpcl_context *ctx, const bench_opts *opts) {
    /* Every path the device can run, in the plan's vocabulary. */
    mpcl_gemm_path paths[MPCL_GEMM_PATH_COUNT];
    size_t np = 0;
    paths[np++] = MPCL_GEMM_MPCL_F32;
    paths[np++] = MPCL_GEMM_CLBLAST_SGEMM;
    paths[np++] = MPCL_GEMM_MPCL_MIXED;
    paths[np++] = MPCL_GEMM_CLBLAST_STAGED;
    if (mpcl_plan_hgemm_usable(mpcl_context_device(ctx), mpcl_context_overrides(ctx)->fp16))
        paths[np++] = MPCL_GEMM_CLBLAST_HGEMM;
    if (mpcl_plan_mma_usable(mpcl_context_device(ctx))) paths[np++] = MPCL_GEMM_MPCL_MMA;

    enum { NSHAPE = sizeof gemm_shapes / sizeof gemm_shapes[0] };
    const size_t nshape = NSHAPE;
    /* A row per path and shape, the MLP batch's included. */
    gemm_row rows[MPCL_GEMM_PATH_COUNT * (NSHAPE + 1)];
    size_t nrow = 0;
    FILE *note = opts->json ? stderr : stdout;
    fprintf(note, "device: %s\n", mpcl_context_device(ctx)->name);
    fprintf(note, "OpenBLAS runs its %s kernels (CPU: %s; OPENBLAS_CORETYPE %s)\n",
            bench_openblas_core(), bench_cpu_features(),
            getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset");

    /* OpenBLAS once per shape (f32: it has no f16 GEMM). */
    double blas_s[NSHAPE + 1];
    for (size_t si = 0; si < nshape; si++) {
        gemm_operands o;
        mpcl_status st = operands_make(ctx, MPCL_DTYPE_F32, &gemm_shapes[si], &o);
        if (st != MPCL_OK) return bench_fail("allocating operands", st);
        blas_s[si] = time_host(&gemm_shapes[si], 1, &o);
        operands_free(&o);
    }
    gemm_operands mo[MLP_COUNT];
    for (size_t i = 0; i < MLP_COUNT; i++) {
        mpcl_status st = operands_make(ctx, MPCL_DTYPE_F32, &mlp_batch[i], &mo[i]);
        if (st != MPCL_OK) return bench_fail("allocating operands", st);
    }
    blas_s[nshape] = time_host(mlp_batch, MLP_COUNT, mo);
    for (size_t i = 0; i < MLP_COUNT; i++) operands_free(&mo[i]);

    for (size_t pi = 0; pi < np; pi++) {
        mpcl_gemm_path path = paths[pi];
        mpcl_dtype dtype = path == MPCL_GEMM_CLBLAST_STAGED ? MPCL_DTYPE_BF16
                           : path == MPCL_GEMM_MPCL_MIXED || path == MPCL_GEMM_CLBLAST_HGEMM ||
                                   path == MPCL_GEMM_MPCL_MMA
                               ? MPCL_DTYPE_F16
                               : MPCL_DTYPE_F32;
        for (size_t si = 0; si <= nshape; si++) {
            bool mlp = si == nshape;
            const gemm_shape *s = mlp ? mlp_batch : &gemm_shapes[si];
            size_t count = mlp ? MLP_COUNT : 1;
            gemm_operands o[MLP_COUNT];
            mpcl_status st = MPCL_OK;
            for (size_t i = 0; i < count && st == MPCL_OK; i++)
                st = operands_make(ctx, dtype, &s[i], &o[i]);
            double sec = 0;
            if (st == MPCL_OK) st = time_device(ctx, path, s, count, o, &sec);
            for (size_t i = 0; i < count; i++) operands_free(&o[i]);
            if (st != MPCL_OK) return bench_fail(mpcl_gemm_path_name(path), st);
            gemm_row *r = &rows[nrow++];
            if (mlp) {
                snprintf(r->shape, sizeof r->shape, "mlp-batch");
                snprintf(r->trans, sizeof r->trans, "5");
            } else {
                snprintf(r->shape, sizeof r->shape, "%dx%dx%d", s->m, s->n, s->k);
                snprintf(r->trans, sizeof r->trans, "%c%c", s->ta ? 'T' : 'N', s->tb ? 'T' : 'N');
            }
            r->path = mpcl_gemm_path_name(path);
            r->dtype = mpcl_dtype_name(dtype);
            r->us = sec * 1e6;
            r->gflops = flops_of(s, count) / sec * 1e-9;
            r->openblas_gflops = flops_of(s, count) / blas_s[si] * 1e-9;
            r->ratio = r->gflops / r->openblas_gflops;
        }
    }

    if (opts->json) {
        jsonw w;
        jsonw_init(&w, stdout);
        jsonw_array_begin(&w);
        for (size_t i = 0; i < nrow; i++) {
            jsonw_object_begin(&w);
            jsonw_kv_string(&w, "shape", rows[i].shape);
            jsonw_kv_string(&w, "trans", rows[i].trans);
            jsonw_kv_string(&w, "path", rows[i].path);
            jsonw_kv_string(&w, "dtype", rows[i].dtype);
            jsonw_kv_number(&w, "gflops", rows[i].gflops);
            jsonw_kv_number(&w, "us", rows[i].us);
            jsonw_kv_number(&w, "openblas_gflops", rows[i].openblas_gflops);
            jsonw_kv_number(&w, "ratio", rows[i].ratio);
            jsonw_kv_string(&w, "openblas_core", bench_openblas_core());
            jsonw_object_end(&w);
        }
        jsonw_array_end(&w);
        fputc('\n', stdout);
    } else {
        printf("%-15s %-5s %-15s %-5s %10s %12s %10s %8s\n", "shape MxNxK", "trans", "path",
               "dtype", "GFLOP/s", "us/call", "OpenBLAS", "ratio");
        for (size_t i = 0; i < nrow; i++)
            printf("%-15s %-5s %-15s %-5s %10.1f %12.1f %10.1f %8.2f\n", rows[i].shape,
                   rows[i].trans, rows[i].path, rows[i].dtype, rows[i].gflops, rows[i].us,
                   rows[i].openblas_gflops, rows[i].ratio);
        printf(
            "mlp-batch: the five GEMMs of one 784-128-10 training batch (batch 128) back to "
            "back; us/call is their sum (OpenBLAS: %.3f ms)\n",
            blas_s[nshape] * 1e3);
    }
    return 0;
}

/* ---- gemm-rounds ---- */

/* The MLP batch's GEMMs in mpcl's own kernels for each storage and in
 * OpenBLAS, interleaved: each round times every (path, shape) for
 * ROUND_CALLS calls, and a figure is the fastest round. On a shared VM the
 * speed of the machine moves by 2x from one second to the next; taking each
 * path's best over rounds spread across the same minutes compares them at
 * the machine's best, where `gemm` times one path after the other. */
#define ROUNDS 60
#define ROUND_CALLS 20
enum { ROUND_F32, ROUND_F16, ROUND_BF16, ROUND_OPENBLAS, ROUND_PATHS };

static mpcl_status time_round(mpcl_context *ctx, int path, const gemm_shape *s, size_t count,
                              gemm_operands *o, double *seconds) {
    mpcl_status st = mpcl_context_finish(ctx);
    if (st != MPCL_OK) return st;
    double t0 = bench_now_s();
    for (int r = 0; r < ROUND_CALLS; r++)
        for (size_t i = 0; i < count; i++) {
            if (path == ROUND_OPENBLAS)
                host_gemm(&s[i], &o[i]);
            else if ((st = device_gemm(
                          ctx, path == ROUND_F32 ? MPCL_GEMM_MPCL_F32 : MPCL_GEMM_MPCL_MIXED, &s[i],
                          &o[i])) != MPCL_OK)
                return st;
        }
    if ((st = mpcl_context_finish(ctx)) != MPCL_OK) return st;
    *seconds = (bench_now_s() - t0) / ROUND_CALLS;
    return MPCL_OK;
}

int bench_cmd_gemm_rounds(mpcl_context *ctx, const bench_opts *opts) {
    static const mpcl_dtype dtypes[ROUND_PATHS] = {MPCL_DTYPE_F32, MPCL_DTYPE_F16, MPCL_DTYPE_BF16,
                                                   MPCL_DTYPE_F32};
    static const char *const names[ROUND_PATHS] = {"mpcl-f32", "mpcl-mixed f16", "mpcl-mixed bf16",
                                                   "OpenBLAS"};
    gemm_operands o[ROUND_PATHS][MLP_COUNT];
    memset(o, 0, sizeof o);
    double best[ROUND_PATHS][MLP_COUNT + 1];
    int rc = 0;
    for (int p = 0; p < ROUND_PATHS && rc == 0; p++)
        for (size_t i = 0; i < MLP_COUNT && rc == 0; i++) {
            mpcl_status st = operands_make(ctx, dtypes[p], &mlp_batch[i], &o[p][i]);
            if (st != MPCL_OK) rc = bench_fail("allocating operands", st);
        }
    for (int p = 0; p < ROUND_PATHS; p++)
        for (size_t i = 0; i <= MLP_COUNT; i++) best[p][i] = INFINITY;
    /* The first round builds the kernels; it counts like any other. */
    for (int r = 0; r < ROUNDS && rc == 0; r++)
        for (int p = 0; p < ROUND_PATHS && rc == 0; p++)
            for (size_t i = 0; i <= MLP_COUNT && rc == 0; i++) {
                bool all = i == MLP_COUNT;
                double sec = 0;
                mpcl_status st = time_round(ctx, p, all ? mlp_batch : &mlp_batch[i],
                                            all ? MLP_COUNT : 1, all ? o[p] : &o[p][i], &sec);
                if (st != MPCL_OK) rc = bench_fail(names[p], st);
                best[p][i] = fmin(best[p][i], sec);
            }
    for (int p = 0; p < ROUND_PATHS; p++)
        for (size_t i = 0; i < MLP_COUNT; i++) operands_free(&o[p][i]);
    if (rc) return rc;

    char shape[MLP_COUNT + 1][32];
    for (size_t i = 0; i <= MLP_COUNT; i++) {
        const gemm_shape *s = &mlp_batch[i < MLP_COUNT ? i : 0];
        if (i == MLP_COUNT)
            snprintf(shape[i], sizeof shape[i], "mlp-batch");
        else
            snprintf(shape[i], sizeof shape[i], "%dx%dx%d %c%c", s->m, s->n, s->k,
                     s->ta ? 'T' : 'N', s->tb ? 'T' : 'N');
    }
    if (opts->json) {
        jsonw w;
        jsonw_init(&w, stdout);
        jsonw_array_begin(&w);
        for (size_t i = 0; i <= MLP_COUNT; i++)
            for (int p = 0; p < ROUND_OPENBLAS; p++) {
                jsonw_object_begin(&w);
                jsonw_kv_string(&w, "shape", shape[i]);
                jsonw_kv_string(&w, "path", names[p]);
                jsonw_kv_number(&w, "us", best[p][i] * 1e6);
                jsonw_kv_number(&w, "openblas_us", best[ROUND_OPENBLAS][i] * 1e6);
                jsonw_kv_number(&w, "ratio", best[ROUND_OPENBLAS][i] / best[p][i]);
                jsonw_kv_string(&w, "openblas_core", bench_openblas_core());
                jsonw_object_end(&w);
            }
        jsonw_array_end(&w);
        fputc('\n', stdout);
        return 0;
    }
    printf("device: %s; OpenBLAS on its %s kernels; best of %d interleaved rounds of %d calls\n",
           mpcl_context_device(ctx)->name, bench_openblas_core(), ROUNDS, ROUND_CALLS);
    printf("%-16s %10s %10s %10s %10s   ratio to OpenBLAS: f32 f16 bf16\n", "us/call", "f32", "f16",
           "bf16", "OpenBLAS");
    for (size_t i = 0; i <= MLP_COUNT; i++) {
        printf("%-16s", shape[i]);
        for (int p = 0; p < ROUND_PATHS; p++) printf(" %10.1f", best[p][i] * 1e6);
        printf("   %.2f %.2f %.2f\n", best[ROUND_OPENBLAS][i] / best[ROUND_F32][i],
               best[ROUND_OPENBLAS][i] / best[ROUND_F16][i],
               best[ROUND_OPENBLAS][i] / best[ROUND_BF16][i]);
    }
    return 0;
}

/* ---- main ---- */

typedef struct bench_cmd {
    const char *name;
    int (*run)(mpcl_context *ctx, const bench_opts *opts);
    const char *help;
} bench_cmd;

static const bench_cmd commands[] = {
    {"gemm", bench_cmd_gemm,
     "every GEMM path the device runs on the MLP shapes and 1024^3, against OpenBLAS"},
    {"gemm-rounds", bench_cmd_gemm_rounds,
     "the MLP batch's GEMMs in f32, f16, bf16 and OpenBLAS, interleaved, best of 60 rounds"},
    {"train", bench_cmd_train,
     "training samples/s per policy, one step split by phase, launches per step"},
    {"train-rounds", bench_cmd_train_rounds,
     "the three policies' training steps interleaved over 25 rounds: best and median"},
    {"elementwise", bench_cmd_elementwise,
     "bandwidth of the elementwise kernels at 16 MB, against host memcpy"},
    {"conv", bench_cmd_conv,
     "the CNN's convolutions: im2col + GEMM against the direct kernels, interleaved"},
    {"gemm-cnn", bench_cmd_gemm_cnn,
     "the CNN step's GEMMs in f32 and bf16, with and without AVX512-BF16, interleaved"},
    {"gemm-square", bench_cmd_gemm_square,
     "square GEMMs to 8192 on SGEMM and the 16-bit paths (mpcl-mma where verified), TFLOP/s"},
};
#define COMMAND_COUNT (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
    fprintf(out,
            "usage: mpcl-bench COMMAND [--device SEL] [--json]\n"
            "  --device SEL  device: an id P:D, cpu, gpu, accelerator, or part of the device or\n"
            "                platform name (default: $MPCL_DEVICE, then the default rule)\n"
            "  --json        machine-readable output on stdout (notes go to stderr)\n"
            "  --help        this text\n"
            "commands:\n");
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    bench_opts opts = {NULL, false};
    const bench_cmd *cmd = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            opts.json = true;
        } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            opts.device = argv[++i];
        } else if (!cmd && argv[i][0] != '-') {
            for (size_t c = 0; c < COMMAND_COUNT; c++)
                if (strcmp(argv[i], commands[c].name) == 0) cmd = &commands[c];
            if (!cmd) {
                fprintf(stderr, "mpcl-bench: unknown command '%s'\n", argv[i]);
                usage(stderr);
                return 2;
            }
        } else {
            fprintf(stderr, "mpcl-bench: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!cmd) {
        usage(stderr);
        return 2;
    }
    bench_openblas_pick_core(argv);
    mpcl_context_params params = mpcl_context_default_params();
    params.device = opts.device;
    mpcl_context *ctx = NULL;
    mpcl_status st = mpcl_context_create(&params, &ctx);
    if (st != MPCL_OK) return bench_fail("creating the context", st);
    if ((st = mpcl_context_warm_up(ctx)) != MPCL_OK) {
        mpcl_context_destroy(ctx);
        return bench_fail("building kernels", st);
    }
    int rc = cmd->run(ctx, &opts);
    mpcl_context_destroy(ctx);
    return rc;
}
