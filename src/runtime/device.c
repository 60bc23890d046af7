/* Device enumeration, capability queries and selection. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

#ifndef CL_DEVICE_HALF_FP_CONFIG
#define CL_DEVICE_HALF_FP_CONFIG 0x1033
#endif
#ifndef CL_DEVICE_MAX_NUM_SUB_GROUPS
#define CL_DEVICE_MAX_NUM_SUB_GROUPS 0x105C /* OpenCL 2.1 */
#endif

#define MAX_PLATFORMS 16
#define MAX_DEVICES_PER_PLATFORM 16

typedef struct entry {
    mpcl_device_info info;
    cl_platform_id platform;
    cl_device_id device;
} entry;

struct mpcl_device_list {
    entry *entries;
    size_t count;
    mpcl_skipped_platform skipped[MAX_PLATFORMS];
    size_t skipped_count;
};

bool mpcl_has_extension(const char *extensions, const char *name) {
    size_t n = strlen(name);
    if (!extensions || n == 0) return false;
    for (const char *p = extensions; (p = strstr(p, name)) != NULL; p += n) {
        bool starts = p == extensions || isspace((unsigned char)p[-1]);
        bool ends = p[n] == '\0' || isspace((unsigned char)p[n]);
        if (starts && ends) return true;
    }
    return false;
}

static void query_str(cl_device_id d, cl_device_info what, char *buf, size_t size) {
    buf[0] = '\0';
    if (clGetDeviceInfo(d, what, size, buf, NULL) != CL_SUCCESS) buf[0] = '\0';
    buf[size - 1] = '\0';
    /* Drivers pad some strings with spaces (NVIDIA's vendor, PoCL's versions). */
    size_t n = strlen(buf);
    while (n > 0 && isspace((unsigned char)buf[n - 1])) buf[--n] = '\0';
}

static cl_ulong query_ulong(cl_device_id d, cl_device_info what) {
    cl_ulong v = 0;
    if (clGetDeviceInfo(d, what, sizeof v, &v, NULL) != CL_SUCCESS) v = 0;
    return v;
}

static cl_uint query_uint(cl_device_id d, cl_device_info what) {
    cl_uint v = 0;
    if (clGetDeviceInfo(d, what, sizeof v, &v, NULL) != CL_SUCCESS) v = 0;
    return v;
}

static mpcl_fp_config query_fp(cl_device_id d, cl_device_info what) {
    mpcl_fp_config c = {0};
    cl_device_fp_config bits = 0;
    if (clGetDeviceInfo(d, what, sizeof bits, &bits, NULL) != CL_SUCCESS || bits == 0) return c;
    c.present = true;
    c.denorm = bits & CL_FP_DENORM;
    c.inf_nan = bits & CL_FP_INF_NAN;
    c.round_to_nearest = bits & CL_FP_ROUND_TO_NEAREST;
    c.round_to_zero = bits & CL_FP_ROUND_TO_ZERO;
    c.round_to_inf = bits & CL_FP_ROUND_TO_INF;
    c.fma = bits & CL_FP_FMA;
    c.correctly_rounded_divide_sqrt = bits & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT;
    c.soft_float = bits & CL_FP_SOFT_FLOAT;
    return c;
}

mpcl_status mpcl__device_query(cl_platform_id platform, cl_device_id d, mpcl_device_info *info) {
    char pname[MPCL_INFO_STR] = "", pversion[MPCL_INFO_STR] = "";
    if (clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof pname, pname, NULL) != CL_SUCCESS)
        pname[0] = '\0';
    if (clGetPlatformInfo(platform, CL_PLATFORM_VERSION, sizeof pversion, pversion, NULL) !=
        CL_SUCCESS)
        pversion[0] = '\0';
    if (clGetPlatformInfo(platform, CL_PLATFORM_VENDOR, sizeof info->platform_vendor,
                          info->platform_vendor, NULL) != CL_SUCCESS)
        info->platform_vendor[0] = '\0';
    info->platform_vendor[sizeof info->platform_vendor - 1] = '\0';
    pname[sizeof pname - 1] = pversion[sizeof pversion - 1] = '\0';
    memcpy(info->platform, pname, sizeof pname);
    memcpy(info->platform_version, pversion, sizeof pversion);

    cl_device_type type = 0;
    cl_int err = clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    if (err != CL_SUCCESS)
        return mpcl__cl_error(NULL, err, "clGetDeviceInfo(CL_DEVICE_TYPE)", __FILE__, __LINE__);
    info->type = (type & CL_DEVICE_TYPE_GPU)           ? MPCL_DEVICE_TYPE_GPU
                 : (type & CL_DEVICE_TYPE_ACCELERATOR) ? MPCL_DEVICE_TYPE_ACCELERATOR
                 : (type & CL_DEVICE_TYPE_CPU)         ? MPCL_DEVICE_TYPE_CPU
                                                       : MPCL_DEVICE_TYPE_OTHER;
    query_str(d, CL_DEVICE_NAME, info->name, sizeof info->name);
    query_str(d, CL_DEVICE_VENDOR, info->vendor, sizeof info->vendor);
    query_str(d, CL_DRIVER_VERSION, info->driver_version, sizeof info->driver_version);
    query_str(d, CL_DEVICE_VERSION, info->opencl_version, sizeof info->opencl_version);
    query_str(d, CL_DEVICE_OPENCL_C_VERSION, info->opencl_c_version, sizeof info->opencl_c_version);
    query_str(d, CL_DEVICE_EXTENSIONS, info->extensions, sizeof info->extensions);
    info->compute_units = query_uint(d, CL_DEVICE_MAX_COMPUTE_UNITS);
    info->max_clock_mhz = query_uint(d, CL_DEVICE_MAX_CLOCK_FREQUENCY);
    info->global_mem_bytes = query_ulong(d, CL_DEVICE_GLOBAL_MEM_SIZE);
    info->local_mem_bytes = query_ulong(d, CL_DEVICE_LOCAL_MEM_SIZE);
    info->max_alloc_bytes = query_ulong(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    info->half_fp = query_fp(d, CL_DEVICE_HALF_FP_CONFIG);
    info->single_fp = query_fp(d, CL_DEVICE_SINGLE_FP_CONFIG);
    info->double_fp = query_fp(d, CL_DEVICE_DOUBLE_FP_CONFIG);
    info->preferred_vector_width_half = query_uint(d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_HALF);
    info->preferred_vector_width_float = query_uint(d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT);
    info->native_vector_width_half = query_uint(d, CL_DEVICE_NATIVE_VECTOR_WIDTH_HALF);
    info->native_vector_width_float = query_uint(d, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT);
    /* The query exists from OpenCL 2.1; older devices answer with an error,
     * which query_uint turns into 0 = no subgroups. */
    info->max_subgroups = query_uint(d, CL_DEVICE_MAX_NUM_SUB_GROUPS);
    info->has_fp16_extension = mpcl_has_extension(info->extensions, "cl_khr_fp16");
    info->has_fp64 = mpcl_has_extension(info->extensions, "cl_khr_fp64") || info->double_fp.present;
    info->intel_bfloat16_conversions =
        mpcl_has_extension(info->extensions, "cl_intel_bfloat16_conversions");
    info->integer_dot_product = mpcl_has_extension(info->extensions, "cl_khr_integer_dot_product");
    info->fp16_math = MPCL_FP16_MATH_UNTESTED;
    info->fp16_storage = MPCL_FP16_STORAGE_UNTESTED;
    snprintf(info->fp16_detail, sizeof info->fp16_detail, "not verified");
    info->bf16_storage = MPCL_BF16_STORAGE_UNTESTED;
    snprintf(info->bf16_detail, sizeof info->bf16_detail, "not verified");
    info->bf16_dot = MPCL_BF16_DOT_UNTESTED;
    snprintf(info->bf16_dot_detail, sizeof info->bf16_dot_detail, "not verified");
    info->matrix_engine = MPCL_MATRIX_ENGINE_UNTESTED;
    info->matrix_engine_kind[0] = '\0';
    snprintf(info->matrix_engine_detail, sizeof info->matrix_engine_detail, "not verified");
    return MPCL_OK;
}

static void skip(mpcl_device_list *list, unsigned p, const char *name, const char *reason,
                 cl_int err) {
    if (list->skipped_count >= MAX_PLATFORMS) return;
    mpcl_skipped_platform *s = &list->skipped[list->skipped_count++];
    s->platform_index = p;
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->reason, sizeof s->reason, "%s (%s)", reason, mpcl_cl_error_name(err));
}

mpcl_status mpcl_device_list_create(unsigned flags, mpcl_device_list **out) {
    *out = NULL;
    mpcl_status st = mpcl__env_check(); /* every entry point lists the devices first */
    if (st != MPCL_OK) return st;
    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint nplat = 0;
    cl_int err = clGetPlatformIDs(MAX_PLATFORMS, platforms, &nplat);
    if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (err == CL_SUCCESS && nplat == 0)) {
        return MPCL_ERROR(NULL, MPCL_ERR_NO_PLATFORM,
                          "the OpenCL ICD loader found no platform; install one, e.g. "
                          "`apt-get install pocl-opencl-icd` for CPUs, or check "
                          "OCL_ICD_VENDORS and /etc/OpenCL/vendors");
    }
    if (err != CL_SUCCESS) return mpcl__cl_error(NULL, err, "clGetPlatformIDs", __FILE__, __LINE__);
    if (nplat > MAX_PLATFORMS) nplat = MAX_PLATFORMS;

    mpcl_device_list *list = calloc(1, sizeof *list);
    if (!list) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "allocating the device list");
    for (cl_uint p = 0; p < nplat; p++) {
        char pname[MPCL_INFO_STR] = "(unnamed)";
        if (clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof pname, pname, NULL) !=
            CL_SUCCESS)
            snprintf(pname, sizeof pname, "(unnamed)");
        pname[sizeof pname - 1] = '\0';
        cl_device_id devices[MAX_DEVICES_PER_PLATFORM];
        cl_uint ndev = 0;
        err = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES_PER_PLATFORM, devices,
                             &ndev);
        if (err == CL_DEVICE_NOT_FOUND || (err == CL_SUCCESS && ndev == 0)) {
            skip(list, p, pname, "platform has no devices", CL_DEVICE_NOT_FOUND);
            continue;
        }
        if (err != CL_SUCCESS) {
            skip(list, p, pname, "clGetDeviceIDs failed", err);
            continue;
        }
        if (ndev > MAX_DEVICES_PER_PLATFORM) ndev = MAX_DEVICES_PER_PLATFORM;
        entry *grown = realloc(list->entries, (list->count + ndev) * sizeof *grown);
        if (!grown) {
            st = MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "allocating the device list");
            goto cleanup;
        }
        list->entries = grown;
        for (cl_uint d = 0; d < ndev; d++) {
            entry *e = &list->entries[list->count];
            memset(e, 0, sizeof *e);
            if (mpcl__device_query(platforms[p], devices[d], &e->info) != MPCL_OK) {
                skip(list, p, pname, "a device query failed", CL_INVALID_DEVICE);
                continue;
            }
            e->platform = platforms[p];
            e->device = devices[d];
            e->info.platform_index = p;
            e->info.device_index = d;
            snprintf(e->info.id, sizeof e->info.id, "%u:%u", p, d);
            list->count++;
        }
    }
    if (list->count == 0) {
        st = MPCL_ERROR(NULL, MPCL_ERR_NO_DEVICE,
                        "%u OpenCL platform(s) found but none has a usable device; for CPUs "
                        "install `pocl-opencl-icd`",
                        (unsigned)nplat);
        goto cleanup;
    }
    if (flags & MPCL_ENUM_VERIFY_FP16) {
        for (size_t i = 0; i < list->count; i++) mpcl_device_list_verify_fp16(list, i);
    }
    *out = list;
    return MPCL_OK;
cleanup:
    mpcl_device_list_destroy(list);
    return st;
}

void mpcl_device_list_destroy(mpcl_device_list *list) {
    if (!list) return;
    free(list->entries);
    free(list);
}

size_t mpcl_device_list_count(const mpcl_device_list *list) {
    return list->count;
}

const mpcl_device_info *mpcl_device_list_get(const mpcl_device_list *list, size_t index) {
    return index < list->count ? &list->entries[index].info : NULL;
}

size_t mpcl_device_list_skipped_count(const mpcl_device_list *list) {
    return list->skipped_count;
}

const mpcl_skipped_platform *mpcl_device_list_skipped(const mpcl_device_list *list, size_t index) {
    return index < list->skipped_count ? &list->skipped[index] : NULL;
}

void mpcl__device_list_ids(const mpcl_device_list *list, size_t index, cl_platform_id *platform,
                           cl_device_id *device) {
    *platform = list->entries[index].platform;
    *device = list->entries[index].device;
}

mpcl_status mpcl_device_list_verify_fp16(mpcl_device_list *list, size_t index) {
    if (index >= list->count)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "device index %zu out of range", index);
    entry *e = &list->entries[index];
    cl_int err;
    mpcl_status st = MPCL_OK;
    cl_command_queue q = NULL;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)e->platform, 0};
    cl_context cl = clCreateContext(props, 1, &e->device, NULL, NULL, &err);
    CHECK_CL(NULL, err);
    q = clCreateCommandQueue(cl, e->device, 0, &err);
    CHECK_CL(NULL, err);
    mpcl__fp16_verify(cl, e->device, q, &e->info);
cleanup:
    if (q) clReleaseCommandQueue(q);
    if (cl) clReleaseContext(cl);
    if (st != MPCL_OK) {
        e->info.fp16_math =
            e->info.has_fp16_extension ? MPCL_FP16_MATH_DECLARED_BUT_BROKEN : MPCL_FP16_MATH_NONE;
        e->info.fp16_storage = MPCL_FP16_STORAGE_BROKEN;
        snprintf(e->info.fp16_detail, sizeof e->info.fp16_detail,
                 "could not create a context to verify: %s", mpcl_status_name(st));
        e->info.bf16_storage = MPCL_BF16_STORAGE_BROKEN;
        snprintf(e->info.bf16_detail, sizeof e->info.bf16_detail, "%s", e->info.fp16_detail);
        e->info.bf16_dot = MPCL_BF16_DOT_BROKEN;
        snprintf(e->info.bf16_dot_detail, sizeof e->info.bf16_dot_detail, "%s",
                 e->info.fp16_detail);
        e->info.matrix_engine = MPCL_MATRIX_ENGINE_BROKEN;
        snprintf(e->info.matrix_engine_detail, sizeof e->info.matrix_engine_detail, "%s",
                 e->info.fp16_detail);
    }
    return st;
}

/* ---- selection ---- */

static bool contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n) return true;
    }
    return n == 0;
}

static bool equal_nocase(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return false;
    }
    return *a == *b;
}

static bool first_of_type(const mpcl_device_list *list, mpcl_device_type type, size_t *index) {
    for (size_t i = 0; i < list->count; i++) {
        if (list->entries[i].info.type == type) {
            *index = i;
            return true;
        }
    }
    return false;
}

mpcl_status mpcl_device_list_select(const mpcl_device_list *list, const char *selector,
                                    size_t *index) {
    if (!selector || !*selector) {
        if (first_of_type(list, MPCL_DEVICE_TYPE_GPU, index) ||
            first_of_type(list, MPCL_DEVICE_TYPE_ACCELERATOR, index) ||
            first_of_type(list, MPCL_DEVICE_TYPE_CPU, index))
            return MPCL_OK;
        *index = 0;
        return MPCL_OK;
    }
    for (size_t i = 0; i < list->count; i++) {
        if (strcmp(list->entries[i].info.id, selector) == 0) {
            *index = i;
            return MPCL_OK;
        }
    }
    static const struct {
        const char *word;
        mpcl_device_type type;
    } types[] = {{"cpu", MPCL_DEVICE_TYPE_CPU},
                 {"gpu", MPCL_DEVICE_TYPE_GPU},
                 {"accelerator", MPCL_DEVICE_TYPE_ACCELERATOR}};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        if (equal_nocase(selector, types[t].word)) {
            if (first_of_type(list, types[t].type, index)) return MPCL_OK;
            goto none;
        }
    }
    for (size_t i = 0; i < list->count; i++) {
        if (contains_nocase(list->entries[i].info.name, selector) ||
            contains_nocase(list->entries[i].info.platform, selector) ||
            contains_nocase(list->entries[i].info.platform_vendor, selector)) {
            *index = i;
            return MPCL_OK;
        }
    }
none:
    MPCL_ERROR(NULL, MPCL_ERR_NO_DEVICE, "no device matches '%s'; the devices are:", selector);
    for (size_t i = 0; i < list->count; i++) {
        char line[3 * MPCL_INFO_STR];
        const mpcl_device_info *d = &list->entries[i].info;
        snprintf(line, sizeof line, "\n  %s  %s (%s, %s)", d->id, d->name, d->platform,
                 mpcl_device_type_name(d->type));
        mpcl__error_append(NULL, line);
    }
    mpcl__error_append(NULL,
                       "\nselect one by id (P:D), by cpu/gpu/accelerator, or by a part of its "
                       "name or platform name");
    return MPCL_ERR_NO_DEVICE;
}

const char *mpcl_device_type_name(mpcl_device_type type) {
    switch (type) {
    case MPCL_DEVICE_TYPE_CPU: return "cpu";
    case MPCL_DEVICE_TYPE_GPU: return "gpu";
    case MPCL_DEVICE_TYPE_ACCELERATOR: return "accelerator";
    default: return "other";
    }
}

const char *mpcl_fp16_math_name(mpcl_fp16_math math) {
    switch (math) {
    case MPCL_FP16_MATH_NONE: return "none";
    case MPCL_FP16_MATH_VERIFIED: return "verified";
    case MPCL_FP16_MATH_DECLARED_BUT_BROKEN: return "declared-but-broken";
    case MPCL_FP16_MATH_UNDECLARED_BUT_WORKS: return "undeclared-but-works";
    default: return "untested";
    }
}

const char *mpcl_fp16_storage_name(mpcl_fp16_storage storage) {
    switch (storage) {
    case MPCL_FP16_STORAGE_VERIFIED: return "verified";
    case MPCL_FP16_STORAGE_BROKEN: return "broken";
    default: return "untested";
    }
}

const char *mpcl_bf16_dot_name(mpcl_bf16_dot dot) {
    switch (dot) {
    case MPCL_BF16_DOT_NONE: return "none";
    case MPCL_BF16_DOT_VERIFIED: return "verified";
    case MPCL_BF16_DOT_BROKEN: return "broken";
    default: return "untested";
    }
}

const char *mpcl_matrix_engine_name(mpcl_matrix_engine engine) {
    switch (engine) {
    case MPCL_MATRIX_ENGINE_NONE: return "none";
    case MPCL_MATRIX_ENGINE_VERIFIED: return "verified";
    case MPCL_MATRIX_ENGINE_BROKEN: return "broken";
    default: return "untested";
    }
}

const char *mpcl_bf16_storage_name(mpcl_bf16_storage storage) {
    switch (storage) {
    case MPCL_BF16_STORAGE_VERIFIED: return "verified";
    case MPCL_BF16_STORAGE_BROKEN: return "broken";
    default: return "untested";
    }
}
