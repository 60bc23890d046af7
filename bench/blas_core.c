/* Which kernel the OpenBLAS reference runs, and the right one for this CPU.
 *
 * OpenBLAS built with DYNAMIC_ARCH picks its kernels by CPU model when it is
 * loaded. A CPU newer than the library knows (OpenBLAS 0.3.21 on a recent
 * Xeon) gets a generic core such as "Prescott": SSE kernels, 5x slower, which
 * would make every ratio against it look too good. OPENBLAS_CORETYPE names
 * the core instead, but it is read at load time, so the bench sets it and
 * runs itself again before anything is timed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "bench.h"

char *openblas_get_corename(void);

/* Cores whose kernels use AVX2 and FMA (or AVX-512), by OpenBLAS' names. */
static const char *const avx2_cores[] = {"haswell", "zen", "skylakex", "cooperlake",
                                         "sapphirerapids"};
static const char *const avx512_cores[] = {"skylakex", "cooperlake", "sapphirerapids"};

static bool named(const char *core, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(core, list[i]) == 0) return true;
    return false;
}

static bool cpu_has_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512cd");
}

static bool cpu_has_avx2_fma(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

const char *bench_cpu_features(void) {
    return cpu_has_avx512() ? "AVX-512" : cpu_has_avx2_fma() ? "AVX2+FMA" : "below AVX2+FMA";
}

/* The core OpenBLAS should run here, or NULL when its own choice is right. */
static const char *better_core(const char *core) {
    if (cpu_has_avx512() && !named(core, avx512_cores, 3)) return "SkylakeX";
    if (cpu_has_avx2_fma() && !named(core, avx2_cores, 5))
        return __builtin_cpu_is("amd") ? "Zen" : "Haswell";
    return NULL;
}

const char *bench_openblas_core(void) {
    return openblas_get_corename();
}

void bench_openblas_pick_core(char **argv) {
    const char *core = openblas_get_corename(), *want = better_core(core);
    if (!want) return;
    if (getenv("OPENBLAS_CORETYPE")) { /* the user's choice, or our re-run that did not take */
        fprintf(stderr,
                "mpcl-bench: warning: OpenBLAS runs its %s kernels (OPENBLAS_CORETYPE=%s), below "
                "this CPU's %s (%s): ratios against it are too good\n",
                core, getenv("OPENBLAS_CORETYPE"), want, bench_cpu_features());
        return;
    }
    fprintf(stderr,
            "mpcl-bench: OpenBLAS chose the %s kernels on a CPU with %s; running again with "
            "OPENBLAS_CORETYPE=%s\n",
            core, bench_cpu_features(), want);
    setenv("OPENBLAS_CORETYPE", want, 1);
    execv("/proc/self/exe", argv);
    perror("mpcl-bench: running again with OPENBLAS_CORETYPE");
}
