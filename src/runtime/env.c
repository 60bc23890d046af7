/* mpcl's environment variables that take one of a fixed set of values, in
 * one table: a new variable is one row. Unset and empty are the same (a
 * shell's `VAR= cmd` clears it); any other value outside the set is an error
 * naming the variable, the value and the set, never a silent default. The
 * free-text variables (MPCL_DEVICE, MPCL_CACHE_DIR, MPCL_CL_DIR) are read
 * where they are used. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

static const struct {
    const char *name;
    const char *const *values; /* NULL-terminated */
} vars[MPCL_ENV_COUNT] = {
    [MPCL_ENV_FP16] = {"MPCL_FP16", (const char *const[]){"force", "off", NULL}},
    [MPCL_ENV_GEMM] = {"MPCL_GEMM", mpcl__gemm_path_names},
    [MPCL_ENV_AUTO] = {"MPCL_AUTO", (const char *const[]){"capability", NULL}},
    [MPCL_ENV_CACHE] = {"MPCL_CACHE", (const char *const[]){"0", NULL}},
    [MPCL_ENV_DATA] = {"MPCL_DATA", (const char *const[]){"auto", "device", "stream", NULL}},
    [MPCL_ENV_CONV] = {"MPCL_CONV", (const char *const[]){"direct", "im2col", NULL}},
    [MPCL_ENV_PROFILE] = {"MPCL_PROFILE", (const char *const[]){"1", NULL}},
    [MPCL_ENV_BF16_DOT] = {"MPCL_BF16_DOT", (const char *const[]){"off", NULL}},
    [MPCL_ENV_NORM] = {"MPCL_NORM", (const char *const[]){"group", "row", NULL}},
    [MPCL_ENV_ATTENTION] = {"MPCL_ATTENTION", (const char *const[]){"row", "block", "tile", NULL}},
    [MPCL_ENV_XENT] = {"MPCL_XENT", (const char *const[]){"row", "group", NULL}},
    [MPCL_ENV_LM_HEAD] = {"MPCL_LM_HEAD", (const char *const[]){"whole", "chunked", NULL}},
    [MPCL_ENV_MMA_TILE] = {"MPCL_MMA_TILE", mpcl__mma_tile_names},
};

/* The variable's value, NULL when unset or empty. */
static const char *raw_value(mpcl__env_var var) {
    const char *v = getenv(vars[var].name);
    return v && *v ? v : NULL;
}

static bool in_set(mpcl__env_var var, const char *value) {
    for (const char *const *v = vars[var].values; *v; v++)
        if (strcmp(value, *v) == 0) return true;
    return false;
}

static mpcl_status refuse(mpcl__env_var var, const char *value) {
    char set[256] = "";
    for (const char *const *v = vars[var].values; *v; v++) {
        size_t used = strlen(set);
        snprintf(set + used, sizeof set - used, "%s%s", v == vars[var].values ? "" : ", ", *v);
    }
    return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s='%s' is not one of: %s (or unset)",
                      vars[var].name, value, set);
}

mpcl_status mpcl__env_check(void) {
    for (int var = 0; var < MPCL_ENV_COUNT; var++) {
        const char *value = raw_value((mpcl__env_var)var);
        if (value && !in_set((mpcl__env_var)var, value)) return refuse((mpcl__env_var)var, value);
    }
    return MPCL_OK;
}

const char *mpcl__env_value(mpcl__env_var var) {
    const char *value = raw_value(var);
    return value && in_set(var, value) ? value : NULL;
}
