/* The fp16, bf16 and matrix-engine verification of a context, kept in the
 * cache folder.
 *
 * Verifying builds three probe programs, and the half-math one fails to
 * build on devices without half, which a compiler cannot cache: on PoCL the
 * three cost ~0.7 s of every start. The verdict depends only on the device,
 * its driver and the sources it builds, so a context reads it back when all
 * of those are the same. mpcl-probe's device list does not use this: the
 * capability report always runs the kernels (mpcl_device_list_verify_fp16). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpcl/number.h"
#include "runtime/runtime.h"

/* 4: the matrix engines' mpcl-mma kernels, which their verification runs
 * (on two shapes since this version), are in the key. */
#define VERDICT_MAGIC "mpcl verification 4"

/* The sources the verification builds: fp16_verify.c's probes and the head
 * of the matrix engines' GEMM programs, before the engines' own
 * (matrix_engine.c). */
static const char *const PROBE_SOURCES[] = {"common.cl",         "fp16_probe.cl", "bf16_probe.cl",
                                            "bf16_dot_probe.cl", "abi.h",         "activations.h"};
#define NFIXED (sizeof PROBE_SOURCES / sizeof PROBE_SOURCES[0])
#define MAX_SOURCES (NFIXED + 8)

static bool verdict_key(const mpcl_device_info *d, mpcl__cache_key *key) {
    const char *parts[8 + MAX_SOURCES] = {
        VERDICT_MAGIC, mpcl_version(), d->platform,       d->platform_version,
        d->name,       d->vendor,      d->driver_version, d->opencl_c_version};
    size_t n = 8, first_source = n;
    bool ok = true;
    for (size_t i = 0; ok && i < MAX_SOURCES; i++) {
        const char *name = i < NFIXED ? PROBE_SOURCES[i] : mpcl__matrix_engine_source(i - NFIXED);
        if (!name) break;
        ok = (parts[n++] = mpcl__cl_source_load(name, NULL)) != NULL;
    }
    if (ok) *key = mpcl__cache_key_make(parts, n);
    for (size_t i = first_source; i < n; i++) free((char *)parts[i]);
    return ok;
}

/* The verdict as text: the five outcomes as numbers, then the four details
 * and the matrix engine's kind, one per line (none of them holds a newline:
 * fp16_verify.c and matrix_engine.c write one line). */
#define OUTCOMES 5
#define LINES 5
static int verdict_format(const mpcl_device_info *d, char *buf, size_t size) {
    return snprintf(buf, size, "%d %d %d %d %d\n%s\n%s\n%s\n%s\n%s\n", (int)d->fp16_math,
                    (int)d->fp16_storage, (int)d->bf16_storage, (int)d->bf16_dot,
                    (int)d->matrix_engine, d->fp16_detail, d->bf16_detail, d->bf16_dot_detail,
                    d->matrix_engine_detail, d->matrix_engine_kind);
}

static void copy_line(char *dst, size_t size, const char *src, const char *end) {
    size_t n = (size_t)(end - src) < size - 1 ? (size_t)(end - src) : size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* The first line's outcomes, exactly as verdict_format writes them: single
 * spaces, plain decimal (the strict parser), nothing else. */
static bool outcomes_parse(const char *line, const char *end, int out[OUTCOMES]) {
    char text[64];
    if ((size_t)(end - line) >= sizeof text) return false;
    copy_line(text, sizeof text, line, end);
    char *rest = text;
    for (int i = 0; i < OUTCOMES; i++) {
        uint64_t v;
        if (mpcl_parse_uint(mpcl__next_field(&rest), INT32_MAX, &v) != MPCL_NUMBER_OK) return false;
        out[i] = (int)v;
    }
    return rest == NULL;
}

/* Parses what verdict_format wrote; false (info untouched) for anything else. */
static bool verdict_parse(const char *text, mpcl_device_info *info) {
    int outcome[OUTCOMES];
    const char *end[1 + LINES]; /* end[0]: the outcomes' line; end[i]: detail line i's */
    const char *at = text;
    for (int i = 0; i <= LINES; i++) {
        end[i] = strchr(at, '\n');
        if (!end[i]) return false;
        at = end[i] + 1;
    }
    if (*at != '\0' || !outcomes_parse(text, end[0], outcome)) return false;
    int math = outcome[0], storage = outcome[1], bf16 = outcome[2], dot = outcome[3],
        engine = outcome[4];
    if (math < MPCL_FP16_MATH_NONE || math > MPCL_FP16_MATH_UNDECLARED_BUT_WORKS ||
        (storage != MPCL_FP16_STORAGE_VERIFIED && storage != MPCL_FP16_STORAGE_BROKEN) ||
        (bf16 != MPCL_BF16_STORAGE_VERIFIED && bf16 != MPCL_BF16_STORAGE_BROKEN) ||
        dot < MPCL_BF16_DOT_NONE || dot > MPCL_BF16_DOT_BROKEN ||
        engine < MPCL_MATRIX_ENGINE_NONE || engine > MPCL_MATRIX_ENGINE_BROKEN)
        return false;
    info->fp16_math = (mpcl_fp16_math)math;
    info->fp16_storage = (mpcl_fp16_storage)storage;
    info->bf16_storage = (mpcl_bf16_storage)bf16;
    info->bf16_dot = (mpcl_bf16_dot)dot;
    info->matrix_engine = (mpcl_matrix_engine)engine;
    char *const lines[LINES] = {info->fp16_detail, info->bf16_detail, info->bf16_dot_detail,
                                info->matrix_engine_detail, info->matrix_engine_kind};
    const size_t sizes[LINES] = {sizeof info->fp16_detail, sizeof info->bf16_detail,
                                 sizeof info->bf16_dot_detail, sizeof info->matrix_engine_detail,
                                 sizeof info->matrix_engine_kind};
    for (int i = 0; i < LINES; i++) copy_line(lines[i], sizes[i], end[i] + 1, end[i + 1]);
    return true;
}

int mpcl__verdict_dir(char *buf, size_t size) {
    if (!mpcl__cache_dir(buf, size)) return 0;
    size_t n = strlen(buf);
    if (n + sizeof "/verdicts" > size) return 0;
    memcpy(buf + n, "/verdicts", sizeof "/verdicts");
    return mkdir(buf, 0777) == 0 || errno == EEXIST;
}

bool mpcl__fp16_verify_cached(cl_context cl, cl_device_id device, cl_command_queue queue,
                              mpcl_device_info *info) {
    char dir[4096];
    mpcl__cache_key key;
    bool cacheable = mpcl__verdict_dir(dir, sizeof dir) && verdict_key(info, &key);
    if (cacheable) {
        size_t size = 0;
        int rejected = 0;
        unsigned char *body = mpcl__cache_read(dir, key, &size, &rejected);
        bool hit = false;
        if (body && size < 4096) {
            char text[4096];
            memcpy(text, body, size);
            text[size] = '\0';
            hit = verdict_parse(text, info);
        }
        free(body);
        if (hit) return true;
    }
    mpcl__fp16_verify(cl, device, queue, info);
    char text[4096];
    int n = verdict_format(info, text, sizeof text);
    if (cacheable && n > 0 && (size_t)n < sizeof text)
        mpcl__cache_write(dir, key, (const unsigned char *)text, (size_t)n);
    return false;
}
