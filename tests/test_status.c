/* Status names and sentences, OpenCL error names, and the error detail. */
#include <string.h>

#include "runtime/runtime.h"
#include "testutil.h"

static void status_names_are_distinct_and_prefixed(void **state) {
    (void)state;
    for (int i = 0; i < MPCL_STATUS_COUNT; i++) {
        const char *name = mpcl_status_name((mpcl_status)i);
        assert_true(strncmp(name, "MPCL_", 5) == 0);
        assert_true(strlen(mpcl_status_str((mpcl_status)i)) > 0);
        for (int j = 0; j < i; j++) assert_string_not_equal(name, mpcl_status_name((mpcl_status)j));
    }
    assert_string_equal(mpcl_status_name(MPCL_OK), "MPCL_OK");
    assert_string_equal(mpcl_status_name(MPCL_ERR_NO_DEVICE), "MPCL_ERR_NO_DEVICE");
    assert_string_equal(mpcl_status_name((mpcl_status)999), "MPCL_STATUS_UNKNOWN");
    assert_string_equal(mpcl_status_str((mpcl_status)-1), "unknown status");
}

static void every_core_cl_error_has_a_name(void **state) {
    (void)state;
    /* OpenCL 1.0-3.0 define -1..-19 and -30..-72 without gaps. */
    for (int code = -1; code >= -72; code--) {
        if (code < -19 && code > -30) continue;
        const char *name = mpcl_cl_error_name(code);
        if (strcmp(name, "CL_UNKNOWN_ERROR") == 0) fail_msg("no name for OpenCL error %d", code);
        assert_true(strncmp(name, "CL_", 3) == 0);
    }
    assert_string_equal(mpcl_cl_error_name(-30), "CL_INVALID_VALUE");
    assert_string_equal(mpcl_cl_error_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
    assert_string_equal(mpcl_cl_error_name(-25), "CL_UNKNOWN_ERROR");
    assert_string_equal(mpcl_cl_error_name(12345), "CL_UNKNOWN_ERROR");
}

static void cl_error_detail_names_call_error_and_place(void **state) {
    (void)state;
    mpcl_status st = mpcl__cl_error(NULL, CL_INVALID_MEM_OBJECT, "clSetKernelArg(k, 0)",
                                    "/some/path/gemm.c", 42);
    assert_int_equal(st, MPCL_ERR_OPENCL);
    const char *msg = mpcl_errmsg();
    assert_non_null(strstr(msg, "MPCL_ERR_OPENCL"));
    assert_non_null(strstr(msg, "clSetKernelArg(k, 0)"));
    assert_non_null(strstr(msg, "CL_INVALID_MEM_OBJECT (-38)"));
    assert_non_null(strstr(msg, "(gemm.c:42)"));
    assert_null(strstr(msg, "/some/path"));
}

static void cl_errors_map_to_the_right_status(void **state) {
    (void)state;
    assert_int_equal(mpcl__cl_status(CL_SUCCESS), MPCL_OK);
    assert_int_equal(mpcl__cl_status(CL_MEM_OBJECT_ALLOCATION_FAILURE), MPCL_ERR_OUT_OF_MEMORY);
    assert_int_equal(mpcl__cl_status(CL_OUT_OF_RESOURCES), MPCL_ERR_OUT_OF_MEMORY);
    assert_int_equal(mpcl__cl_status(CL_OUT_OF_HOST_MEMORY), MPCL_ERR_OUT_OF_MEMORY);
    assert_int_equal(mpcl__cl_status(CL_BUILD_PROGRAM_FAILURE), MPCL_ERR_BUILD);
    assert_int_equal(mpcl__cl_status(-1001), MPCL_ERR_NO_PLATFORM);
    assert_int_equal(mpcl__cl_status(CL_INVALID_KERNEL), MPCL_ERR_OPENCL);
}

static void a_long_detail_is_truncated_not_overflowed(void **state) {
    (void)state;
    static char big[100000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    MPCL_ERROR(NULL, MPCL_ERR_BUILD, "log %s", big);
    size_t n = strlen(mpcl_errmsg());
    assert_true(n > 1000 && n < sizeof big);
    mpcl__error_append(NULL, big); /* appending past the end stays in bounds */
    assert_true(strlen(mpcl_errmsg()) < sizeof big);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(status_names_are_distinct_and_prefixed),
        cmocka_unit_test(every_core_cl_error_has_a_name),
        cmocka_unit_test(cl_error_detail_names_call_error_and_place),
        cmocka_unit_test(cl_errors_map_to_the_right_status),
        cmocka_unit_test(a_long_detail_is_truncated_not_overflowed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
