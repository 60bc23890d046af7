/* The fp16 and bf16 verification of a context, kept in the cache folder.
 *
 * Verifying builds three probe programs, and the half-math one fails to
 * build on devices without half, which a compiler cannot cache: on PoCL the
 * three cost ~0.7 s of every start. The verdict depends only on the device,
 * its driver and the probe sources, so a context reads it back when all of
 * those are the same. mpcl-probe's device list does not use this: the
 * capability report always runs the kernels (mpcl_device_list_verify_fp16). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpcl/number.h"
#include "runtime/runtime.h"

#define VERDICT_MAGIC "mpcl verification 2"

/* The probe sources the verification builds (fp16_verify.c). */
static const char *const PROBE_SOURCES[] = {"common.cl", "fp16_probe.cl", "bf16_probe.cl",
                                            "bf16_dot_probe.cl"};
#define NSOURCES (sizeof PROBE_SOURCES / sizeof PROBE_SOURCES[0])

static bool verdict_key(const mpcl_device_info *d, mpcl__cache_key *key) {
    char *src[NSOURCES] = {0};
    bool ok = true;
    for (size_t i = 0; i < NSOURCES; i++)
        ok = ok && (src[i] = mpcl__cl_source_load(PROBE_SOURCES[i], NULL));
    if (ok) {
        const char *parts[] = {VERDICT_MAGIC,
                               mpcl_version(),
                               d->platform,
                               d->platform_version,
                               d->name,
                               d->vendor,
                               d->driver_version,
                               d->opencl_c_version,
                               src[0],
                               src[1],
                               src[2],
                               src[3]};
        *key = mpcl__cache_key_make(parts, sizeof parts / sizeof parts[0]);
    }
    for (size_t i = 0; i < NSOURCES; i++) free(src[i]);
    return ok;
}

/* The verdict as text: the four outcomes as numbers, then the three
 * details, one per line (details never hold a newline: fp16_verify.c writes
 * one line). */
static int verdict_format(const mpcl_device_info *d, char *buf, size_t size) {
    return snprintf(buf, size, "%d %d %d %d\n%s\n%s\n%s\n", (int)d->fp16_math, (int)d->fp16_storage,
                    (int)d->bf16_storage, (int)d->bf16_dot, d->fp16_detail, d->bf16_detail,
                    d->bf16_dot_detail);
}

static void copy_line(char *dst, size_t size, const char *src, const char *end) {
    size_t n = (size_t)(end - src) < size - 1 ? (size_t)(end - src) : size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* The first line's four outcomes, exactly as verdict_format writes them:
 * single spaces, plain decimal (the strict parser), nothing else. */
static bool outcomes_parse(const char *line, const char *end, int out[4]) {
    char text[64];
    if ((size_t)(end - line) >= sizeof text) return false;
    copy_line(text, sizeof text, line, end);
    char *rest = text;
    for (int i = 0; i < 4; i++) {
        uint64_t v;
        if (mpcl_parse_uint(mpcl__next_field(&rest), INT32_MAX, &v) != MPCL_NUMBER_OK) return false;
        out[i] = (int)v;
    }
    return rest == NULL;
}

/* Parses what verdict_format wrote; false (info untouched) for anything else. */
static bool verdict_parse(const char *text, mpcl_device_info *info) {
    int outcome[4];
    const char *l1 = strchr(text, '\n'), *l2 = l1 ? strchr(l1 + 1, '\n') : NULL;
    const char *l3 = l2 ? strchr(l2 + 1, '\n') : NULL, *l4 = l3 ? strchr(l3 + 1, '\n') : NULL;
    if (!l4 || l4[1] != '\0' || !outcomes_parse(text, l1, outcome)) return false;
    int math = outcome[0], storage = outcome[1], bf16 = outcome[2], dot = outcome[3];
    if (math < MPCL_FP16_MATH_NONE || math > MPCL_FP16_MATH_UNDECLARED_BUT_WORKS ||
        (storage != MPCL_FP16_STORAGE_VERIFIED && storage != MPCL_FP16_STORAGE_BROKEN) ||
        (bf16 != MPCL_BF16_STORAGE_VERIFIED && bf16 != MPCL_BF16_STORAGE_BROKEN) ||
        dot < MPCL_BF16_DOT_NONE || dot > MPCL_BF16_DOT_BROKEN)
        return false;
    info->fp16_math = (mpcl_fp16_math)math;
    info->fp16_storage = (mpcl_fp16_storage)storage;
    info->bf16_storage = (mpcl_bf16_storage)bf16;
    info->bf16_dot = (mpcl_bf16_dot)dot;
    copy_line(info->fp16_detail, sizeof info->fp16_detail, l1 + 1, l2);
    copy_line(info->bf16_detail, sizeof info->bf16_detail, l2 + 1, l3);
    copy_line(info->bf16_dot_detail, sizeof info->bf16_dot_detail, l3 + 1, l4);
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
