/* mpcl-probe: what each OpenCL device can do for mixed precision, and what
 * mpcl will run on it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonw.h"
#include "mpcl/mpcl.h"

enum { EXIT_OK = 0, EXIT_ERROR = 1, EXIT_NO_DEVICE = 2 };

static const char usage[] =
    "usage: mpcl-probe [--device SEL] [--json] [--bench]\n"
    "\n"
    "Reports every OpenCL device: identity, memory, fp16 math and storage and bf16\n"
    "storage (verified by running kernels, not by trusting the extension list), fp64,\n"
    "and the precision plan mpcl resolves for each policy (auto, mixed_float16,\n"
    "float32, mixed_bfloat16) with its reason.\n"
    "\n"
    "  --device SEL  only this device: an id P:D, cpu, gpu, accelerator, or part of the\n"
    "                device or platform name (default: every device; also $MPCL_DEVICE\n"
    "                is ignored here so that the report is complete)\n"
    "  --json        one JSON document (schema 1, see README.md) instead of text\n"
    "  --bench       add measured figures: CLBlast SGEMM (and HGEMM where fp16 math is\n"
    "                usable) GFLOP/s at 1024^3, copy bandwidth, kernel launch latency,\n"
    "                start-up, and the plan `auto` measures for the default model\n"
    "  --help        this text\n"
    "  --version     the mpcl version\n"
    "\n"
    "Environment: MPCL_FP16=force|off, MPCL_GEMM=<path> change the plans shown;\n"
    "MPCL_AUTO=capability makes `auto` follow the capability rule, unmeasured.\n"
    "Exit status: 0 success, 2 no OpenCL platform or device, 1 any other error.\n";

typedef struct probe {
    const mpcl_device_info *info;
    mpcl_plan plans[MPCL_POLICY_COUNT];
    bool benched;
    mpcl_quick_bench bench;
    double startup_ms;   /* context creation + building (or loading) both programs */
    mpcl_plan auto_plan; /* auto for the default model, measured (mpcl_model_auto_plan) */
    char bench_error[512];
} probe;

static const char *verdict(const mpcl_device_info *d, const mpcl_plan_overrides *o) {
    if (d->fp16_storage != MPCL_FP16_STORAGE_VERIFIED)
        return "float32 only: f16 storage failed verification";
    if (mpcl_plan_hgemm_usable(d, o->fp16))
        return "full mixed precision: f16 storage and f16 GEMM (HGEMM), f32 master weights";
    if (mpcl_plan_fp16_math_usable(d, o->fp16))
        return "mixed_float16 runs as f16 storage with f32 math: MPCL_FP16=force cannot bring "
               "HGEMM here (CLBlast needs cl_khr_fp16 declared); auto measures which is faster";
    return "mixed_float16 runs as f16 storage with f32 math (halves memory traffic); "
           "auto measures which is faster";
}

static void print_fp(const char *label, const mpcl_fp_config *c) {
    if (!c->present) {
        printf("    %-8s none\n", label);
        return;
    }
    printf("    %-8s denorm %s, inf/nan %s, round nearest/zero/inf %s/%s/%s, fma %s%s\n", label,
           c->denorm ? "yes" : "no", c->inf_nan ? "yes" : "no", c->round_to_nearest ? "y" : "n",
           c->round_to_zero ? "y" : "n", c->round_to_inf ? "y" : "n", c->fma ? "yes" : "no",
           c->soft_float ? ", soft float" : "");
}

static void print_text(const probe *p, const mpcl_plan_overrides *o) {
    const mpcl_device_info *d = p->info;
    printf("device %s: %s\n", d->id, d->name);
    printf("  platform     %s (%s)\n", d->platform, d->platform_version);
    printf("  vendor       %s, driver %s\n", d->vendor, d->driver_version);
    printf("  type         %s, %u compute units, %u MHz\n", mpcl_device_type_name(d->type),
           d->compute_units, d->max_clock_mhz);
    printf("  version      %s; %s\n", d->opencl_version, d->opencl_c_version);
    printf("  memory       global %.1f GiB, local %.0f KiB, max allocation %.1f GiB\n",
           (double)d->global_mem_bytes / (1 << 30), (double)d->local_mem_bytes / 1024,
           (double)d->max_alloc_bytes / (1 << 30));
    printf("  fp16 math    %s (cl_khr_fp16 %s)\n", mpcl_fp16_math_name(d->fp16_math),
           d->has_fp16_extension ? "declared" : "not declared");
    printf("  fp16 storage %s\n", mpcl_fp16_storage_name(d->fp16_storage));
    printf("  fp16 check   %s\n", d->fp16_detail);
    printf("  bf16 storage %s\n", mpcl_bf16_storage_name(d->bf16_storage));
    printf("  bf16 check   %s\n", d->bf16_detail);
    printf("  bf16 dot     %s (%s)\n", mpcl_bf16_dot_name(d->bf16_dot), d->bf16_dot_detail);
    if (d->matrix_engine_kind[0])
        printf("  matrix engine %s %s (%s)\n", d->matrix_engine_kind,
               mpcl_matrix_engine_name(d->matrix_engine), d->matrix_engine_detail);
    else
        printf("  matrix engine %s (%s)\n", mpcl_matrix_engine_name(d->matrix_engine),
               d->matrix_engine_detail);
    printf("  fp64         %s\n", d->has_fp64 ? "yes" : "no");
    printf("  fp configs\n");
    print_fp("half", &d->half_fp);
    print_fp("single", &d->single_fp);
    print_fp("double", &d->double_fp);
    printf("  vector width half %u/%u, float %u/%u (preferred/native)\n",
           d->preferred_vector_width_half, d->native_vector_width_half,
           d->preferred_vector_width_float, d->native_vector_width_float);
    printf("  subgroups    %u, bfloat16 conversions %s, integer dot product %s\n", d->max_subgroups,
           d->intel_bfloat16_conversions ? "yes" : "no", d->integer_dot_product ? "yes" : "no");
    printf("  plans\n");
    for (int i = 0; i < MPCL_POLICY_COUNT; i++) {
        const mpcl_plan *pl = &p->plans[i];
        printf("    %-14s -> %s, storage %s, GEMM %s, loss scaling %s%s\n",
               mpcl_policy_name(pl->policy), mpcl_policy_name(pl->resolved),
               mpcl_dtype_name(pl->storage), mpcl_gemm_path_name(pl->gemm),
               pl->loss_scaling ? "on" : "off", pl->usable ? "" : " [NOT USABLE]");
        printf("    %-14s    %s\n", "", pl->reason);
    }
    if (p->benched) {
        printf("  bench        SGEMM 1024^3 %.1f GFLOP/s", p->bench.sgemm_gflops);
        if (!isnan(p->bench.hgemm_gflops)) printf(", HGEMM %.1f GFLOP/s", p->bench.hgemm_gflops);
        printf(", copy %.1f GB/s, launch %.1f us\n", p->bench.copy_gb_per_s, p->bench.launch_us);
        printf("  start-up     %.0f ms (context, fp16 verification, both programs)\n",
               p->startup_ms);
        printf("  auto         %s, GEMM %s for the default 784-128-10 model, batch 128\n",
               mpcl_policy_name(p->auto_plan.resolved), mpcl_gemm_path_name(p->auto_plan.gemm));
        printf("               %s\n", p->auto_plan.reason);
    } else if (p->bench_error[0]) {
        printf("  bench        failed: %s\n", p->bench_error);
    }
    printf("  verdict      %s\n\n", verdict(d, o));
}

static void json_fp(jsonw *w, const char *key, const mpcl_fp_config *c) {
    jsonw_key(w, key);
    if (!c->present) {
        jsonw_null(w);
        return;
    }
    jsonw_object_begin(w);
    jsonw_kv_bool(w, "denorm", c->denorm);
    jsonw_kv_bool(w, "inf_nan", c->inf_nan);
    jsonw_kv_bool(w, "round_to_nearest", c->round_to_nearest);
    jsonw_kv_bool(w, "round_to_zero", c->round_to_zero);
    jsonw_kv_bool(w, "round_to_inf", c->round_to_inf);
    jsonw_kv_bool(w, "fma", c->fma);
    jsonw_kv_bool(w, "correctly_rounded_divide_sqrt", c->correctly_rounded_divide_sqrt);
    jsonw_kv_bool(w, "soft_float", c->soft_float);
    jsonw_object_end(w);
}

static void json_device(jsonw *w, const probe *p, const mpcl_plan_overrides *o) {
    const mpcl_device_info *d = p->info;
    jsonw_object_begin(w);
    jsonw_kv_string(w, "id", d->id);
    jsonw_kv_string(w, "platform", d->platform);
    jsonw_kv_string(w, "platform_version", d->platform_version);
    jsonw_kv_string(w, "name", d->name);
    jsonw_kv_string(w, "vendor", d->vendor);
    jsonw_kv_string(w, "driver_version", d->driver_version);
    jsonw_kv_string(w, "opencl_version", d->opencl_version);
    jsonw_kv_string(w, "opencl_c_version", d->opencl_c_version);
    jsonw_kv_string(w, "type", mpcl_device_type_name(d->type));
    jsonw_kv_uint(w, "compute_units", d->compute_units);
    jsonw_kv_uint(w, "max_clock_mhz", d->max_clock_mhz);
    jsonw_kv_uint(w, "global_mem_bytes", d->global_mem_bytes);
    jsonw_kv_uint(w, "local_mem_bytes", d->local_mem_bytes);
    jsonw_kv_uint(w, "max_alloc_bytes", d->max_alloc_bytes);
    jsonw_key(w, "extensions");
    jsonw_array_begin(w);
    char ext[MPCL_EXTENSIONS_STR];
    memcpy(ext, d->extensions, sizeof ext);
    for (char *save = NULL, *tok = strtok_r(ext, " \t\n", &save); tok;
         tok = strtok_r(NULL, " \t\n", &save))
        jsonw_string(w, tok);
    jsonw_array_end(w);
    jsonw_kv_string(w, "fp16_math", mpcl_fp16_math_name(d->fp16_math));
    jsonw_kv_string(w, "fp16_storage", mpcl_fp16_storage_name(d->fp16_storage));
    jsonw_kv_string(w, "fp16_detail", d->fp16_detail);
    jsonw_kv_string(w, "bf16_storage", mpcl_bf16_storage_name(d->bf16_storage));
    jsonw_kv_string(w, "bf16_detail", d->bf16_detail);
    jsonw_kv_string(w, "bf16_dot", mpcl_bf16_dot_name(d->bf16_dot));
    jsonw_kv_string(w, "bf16_dot_detail", d->bf16_dot_detail);
    jsonw_kv_string(w, "matrix_engine", mpcl_matrix_engine_name(d->matrix_engine));
    jsonw_kv_string(w, "matrix_engine_kind", d->matrix_engine_kind);
    jsonw_kv_string(w, "matrix_engine_detail", d->matrix_engine_detail);
    jsonw_kv_bool(w, "fp64", d->has_fp64);
    jsonw_key(w, "fp_config");
    jsonw_object_begin(w);
    json_fp(w, "half", &d->half_fp);
    json_fp(w, "single", &d->single_fp);
    json_fp(w, "double", &d->double_fp);
    jsonw_object_end(w);
    jsonw_key(w, "vector_width");
    jsonw_object_begin(w);
    jsonw_kv_uint(w, "preferred_half", d->preferred_vector_width_half);
    jsonw_kv_uint(w, "preferred_float", d->preferred_vector_width_float);
    jsonw_kv_uint(w, "native_half", d->native_vector_width_half);
    jsonw_kv_uint(w, "native_float", d->native_vector_width_float);
    jsonw_object_end(w);
    jsonw_kv_uint(w, "max_subgroups", d->max_subgroups);
    jsonw_kv_bool(w, "intel_bfloat16_conversions", d->intel_bfloat16_conversions);
    jsonw_kv_bool(w, "integer_dot_product", d->integer_dot_product);
    jsonw_key(w, "plans");
    jsonw_object_begin(w);
    for (int i = 0; i < MPCL_POLICY_COUNT; i++) {
        const mpcl_plan *pl = &p->plans[i];
        jsonw_key(w, mpcl_policy_name(pl->policy));
        jsonw_object_begin(w);
        jsonw_kv_string(w, "resolved", mpcl_policy_name(pl->resolved));
        jsonw_kv_string(w, "storage", mpcl_dtype_name(pl->storage));
        jsonw_kv_string(w, "gemm", mpcl_gemm_path_name(pl->gemm));
        jsonw_kv_bool(w, "loss_scaling", pl->loss_scaling);
        jsonw_kv_bool(w, "usable", pl->usable);
        jsonw_kv_string(w, "reason", pl->reason);
        jsonw_object_end(w);
    }
    jsonw_object_end(w);
    jsonw_kv_string(w, "verdict", verdict(d, o));
    if (p->benched) {
        jsonw_key(w, "bench");
        jsonw_object_begin(w);
        jsonw_kv_number(w, "sgemm_1024_gflops", p->bench.sgemm_gflops);
        jsonw_kv_number(w, "hgemm_1024_gflops", p->bench.hgemm_gflops);
        jsonw_kv_number(w, "copy_gb_per_s", p->bench.copy_gb_per_s);
        jsonw_kv_number(w, "launch_us", p->bench.launch_us);
        jsonw_kv_number(w, "startup_ms", p->startup_ms);
        jsonw_key(w, "auto");
        jsonw_object_begin(w);
        jsonw_kv_string(w, "resolved", mpcl_policy_name(p->auto_plan.resolved));
        jsonw_kv_string(w, "gemm", mpcl_gemm_path_name(p->auto_plan.gemm));
        jsonw_kv_string(w, "reason", p->auto_plan.reason);
        jsonw_object_end(w);
        jsonw_object_end(w);
    } else if (p->bench_error[0]) {
        jsonw_kv_string(w, "bench_error", p->bench_error);
    }
    jsonw_object_end(w);
}

static void run_bench(probe *p) {
    mpcl_context_params params = mpcl_context_default_params();
    params.device = p->info->id;
    mpcl_context *ctx = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    mpcl_status st = mpcl_context_create(&params, &ctx);
    if (st == MPCL_OK) st = mpcl_context_warm_up(ctx);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    p->startup_ms =
        1e3 * (double)(t1.tv_sec - t0.tv_sec) + 1e-6 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (st == MPCL_OK) st = mpcl_quick_bench_run(ctx, &p->bench);
    mpcl_model_params mp = mpcl_model_default_params();
    if (st == MPCL_OK) st = mpcl_model_auto_plan(ctx, &mp, &p->auto_plan);
    if (st == MPCL_OK)
        p->benched = true;
    else
        snprintf(p->bench_error, sizeof p->bench_error, "%s", mpcl_errmsg());
    mpcl_context_destroy(ctx);
}

int main(int argc, char **argv) {
    const char *selector = NULL;
    bool json = false, bench = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return EXIT_OK;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("mpcl-probe %s\n", mpcl_version());
            return EXIT_OK;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--bench") == 0) {
            bench = true;
        } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            selector = argv[++i];
        } else if (strncmp(argv[i], "--device=", 9) == 0) {
            selector = argv[i] + 9;
        } else {
            fprintf(stderr, "mpcl-probe: unknown or incomplete option '%s'\n\n%s", argv[i], usage);
            return EXIT_ERROR;
        }
    }

    mpcl_plan_overrides overrides;
    if (mpcl_plan_overrides_from_env(&overrides) != MPCL_OK) {
        fprintf(stderr, "mpcl-probe: %s\n", mpcl_errmsg());
        return EXIT_ERROR;
    }
    mpcl_device_list *list = NULL;
    mpcl_status st = mpcl_device_list_create(MPCL_ENUM_DEFAULT, &list);
    if (st == MPCL_ERR_NO_PLATFORM || st == MPCL_ERR_NO_DEVICE) {
        fprintf(stderr, "mpcl-probe: %s\n", mpcl_errmsg());
        return EXIT_NO_DEVICE;
    }
    if (st != MPCL_OK) {
        fprintf(stderr, "mpcl-probe: %s\n", mpcl_errmsg());
        return EXIT_ERROR;
    }
    size_t first = 0, count = mpcl_device_list_count(list);
    if (selector) {
        if (mpcl_device_list_select(list, selector, &first) != MPCL_OK) {
            fprintf(stderr, "mpcl-probe: %s\n", mpcl_errmsg());
            mpcl_device_list_destroy(list);
            return EXIT_ERROR;
        }
        count = first + 1;
    }

    probe *probes = calloc(count, sizeof *probes);
    if (!probes) {
        fprintf(stderr, "mpcl-probe: out of memory\n");
        mpcl_device_list_destroy(list);
        return EXIT_ERROR;
    }
    for (size_t i = first; i < count; i++) {
        probe *p = &probes[i];
        /* A device whose verification cannot even start is reported as broken,
         * not fatal: the other devices still deserve a report. */
        mpcl_device_list_verify_fp16(list, i);
        p->info = mpcl_device_list_get(list, i);
        for (int k = 0; k < MPCL_POLICY_COUNT; k++)
            p->plans[k] = mpcl_plan_resolve(p->info, (mpcl_policy)k, &overrides);
        if (bench) run_bench(p);
    }

    if (json) {
        jsonw w;
        jsonw_init(&w, stdout);
        jsonw_object_begin(&w);
        jsonw_kv_int(&w, "schema", 1);
        jsonw_kv_string(&w, "mpcl_version", mpcl_version());
        jsonw_key(&w, "devices");
        jsonw_array_begin(&w);
        for (size_t i = first; i < count; i++) json_device(&w, &probes[i], &overrides);
        jsonw_array_end(&w);
        jsonw_key(&w, "skipped_platforms");
        jsonw_array_begin(&w);
        for (size_t i = 0; i < mpcl_device_list_skipped_count(list); i++) {
            const mpcl_skipped_platform *s = mpcl_device_list_skipped(list, i);
            jsonw_object_begin(&w);
            jsonw_kv_uint(&w, "platform_index", s->platform_index);
            jsonw_kv_string(&w, "name", s->name);
            jsonw_kv_string(&w, "reason", s->reason);
            jsonw_object_end(&w);
        }
        jsonw_array_end(&w);
        jsonw_object_end(&w);
    } else {
        printf("mpcl %s: %zu device(s)\n\n", mpcl_version(), count - first);
        for (size_t i = first; i < count; i++) print_text(&probes[i], &overrides);
        for (size_t i = 0; i < mpcl_device_list_skipped_count(list); i++) {
            const mpcl_skipped_platform *s = mpcl_device_list_skipped(list, i);
            printf("skipped platform %u (%s): %s\n", s->platform_index, s->name, s->reason);
        }
    }
    free(probes);
    mpcl_device_list_destroy(list);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_ERROR;
}
