/* The host/device ABI (cl/abi.h): every constant as the device compiler saw
 * it, echoed by mpcl_abi_echo from the library program with a hash of its
 * name, equals the value the C compiler saw, in both storage programs; and no constant of the
 * header is missing from MPCL_ABI_LIST, the list the echo walks. The device side can drift from the
 * C side when MPCL_CL_DIR points at edited sources or a stale copy; this test is what notices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"
#include "testutil.h"

typedef struct abi_entry {
    const char *name;
    unsigned value;
} abi_entry;

#define HOST_ENTRY(name) {#name, (unsigned)(name)},
static const abi_entry host_abi[] = {MPCL_ABI_LIST(HOST_ENTRY)};
#undef HOST_ENTRY
#define HOST_COUNT (sizeof host_abi / sizeof host_abi[0])

/* Room for far more constants than there are, so that a device-side list
 * that grew still writes inside the buffer (and shows in out[0]). */
#define ECHO_WORDS 1024
#define POISON 0xa5a5a5a5u

/* FNV-1a, as cl/abi_check.cl hashes the names. */
static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint32_t)(unsigned char)*s) * 16777619u;
    return h;
}

/* Runs the echo from the program of `storage` on a poisoned buffer and
 * matches each echoed (name hash, value) with the host's constant of that
 * name; prints every mismatch, missing and unknown constant. Returns the
 * number of problems. */
static int echo_mismatches(mpcl_context *ctx, mpcl_dtype storage) {
    static uint32_t out[ECHO_WORDS];
    for (size_t i = 0; i < ECHO_WORDS; i++) out[i] = POISON;
    mpcl_tensor *t = tu_tensor(ctx, MPCL_DTYPE_I32, 1, ECHO_WORDS);
    TU_ASSERT_OK(mpcl_tensor_upload_raw(t, out, sizeof out));
    cl_kernel k;
    TU_ASSERT_OK(mpcl__kernel(ctx, storage, "mpcl_abi_echo", &k));
    TU_ASSERT_OK(mpcl__set_args(ctx, k, "mpcl_abi_echo", MPCL_ARG(t->mem), MPCL_ARGS_END));
    TU_ASSERT_OK(mpcl__launch_1d(ctx, k, "mpcl_abi_echo", 1, 1));
    TU_ASSERT_OK(mpcl_tensor_download_raw(t, out, sizeof out));
    mpcl_tensor_destroy(t);

    const char *prog = mpcl_dtype_name(storage);
    const size_t n = out[0];
    if (n == POISON || 1 + 2 * n > ECHO_WORDS) {
        printf("%s program: mpcl_abi_echo wrote no usable count (%zu)\n", prog, n);
        return 1;
    }
    int bad = 0;
    if (n != HOST_COUNT) {
        printf("%s program: the device lists %zu ABI constants, the host %zu\n", prog, n,
               HOST_COUNT);
        bad++;
    }
    bool seen[HOST_COUNT] = {false};
    for (size_t d = 0; d < n; d++) {
        uint32_t hash = out[1 + 2 * d], value = out[2 + 2 * d];
        size_t h = 0;
        while (h < HOST_COUNT && name_hash(host_abi[h].name) != hash) h++;
        if (h == HOST_COUNT) {
            printf(
                "%s program: constant %zu of the device (name hash 0x%08x, value %u) is "
                "unknown to the host\n",
                prog, d, (unsigned)hash, (unsigned)value);
            bad++;
            continue;
        }
        seen[h] = true;
        if (value != host_abi[h].value) {
            printf("%s program: %s is %u on the device, %u on the host\n", prog, host_abi[h].name,
                   (unsigned)value, host_abi[h].value);
            bad++;
        }
    }
    for (size_t h = 0; h < HOST_COUNT; h++) {
        if (!seen[h]) {
            printf("%s program: %s is missing on the device\n", prog, host_abi[h].name);
            bad++;
        }
    }
    /* Nothing past the list is written. */
    for (size_t i = 1 + 2 * n; i < ECHO_WORDS; i++) {
        if (out[i] != POISON) {
            printf("%s program: word %zu past the list was written (%u)\n", prog, i,
                   (unsigned)out[i]);
            bad++;
            break;
        }
    }
    return bad;
}

static void device_and_host_agree_on_every_constant(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    int bad = echo_mismatches(ctx, MPCL_DTYPE_F32) + echo_mismatches(ctx, MPCL_DTYPE_F16);
    mpcl_context_destroy(ctx);
    if (bad) fail_msg("%d host/device ABI mismatch(es), listed above", bad);
}

/* Every object-like `#define MPCL_ABI_<NAME> <value>` of the header the
 * device gets (the embedded copy, or MPCL_CL_DIR's) is in MPCL_ABI_LIST, so
 * the echo checks it. The include guard and the list macro have no value. */
static void every_constant_is_echoed(void **state) {
    (void)state;
    char *text = mpcl__cl_source_load("abi.h", NULL);
    assert_non_null(text);
    int defines = 0, missing = 0;
    static const char prefix[] = "#define MPCL_ABI_";
    for (const char *line = text; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, prefix, sizeof prefix - 1) != 0) continue;
        const char *name = line + strlen("#define ");
        size_t len = strcspn(name, " \t\n(");
        if (name[len] != ' ' && name[len] != '\t') continue; /* function-like or no value */
        const char *value = name + len + strspn(name + len, " \t");
        if (*value == '\n' || *value == '\0') continue;
        defines++;
        bool found = false;
        for (size_t i = 0; i < HOST_COUNT && !found; i++)
            found = strlen(host_abi[i].name) == len && strncmp(host_abi[i].name, name, len) == 0;
        if (!found) {
            printf("%.*s is defined in cl/abi.h but not in MPCL_ABI_LIST\n", (int)len, name);
            missing++;
        }
    }
    free(text);
    assert_int_equal(missing, 0);
    assert_int_equal(defines, (int)HOST_COUNT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_constant_is_echoed),
        cmocka_unit_test(device_and_host_agree_on_every_constant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
