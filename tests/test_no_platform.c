/* No OpenCL platform at all: OCL_ICD_VENDORS points at an empty folder before
 * the ICD loader first runs, so it finds no ICD. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static void enumeration_says_no_platform_and_how_to_fix_it(void **state) {
    (void)state;
    mpcl_device_list *list = (mpcl_device_list *)0x1;
    assert_int_equal(mpcl_device_list_create(MPCL_ENUM_DEFAULT, &list), MPCL_ERR_NO_PLATFORM);
    assert_null(list);
    assert_non_null(strstr(mpcl_errmsg(), "pocl-opencl-icd"));
}

static void context_creation_says_no_platform(void **state) {
    (void)state;
    mpcl_context *ctx = (mpcl_context *)0x1;
    assert_int_equal(mpcl_context_create(NULL, &ctx), MPCL_ERR_NO_PLATFORM);
    assert_null(ctx);
}

int main(void) {
    char dir[] = "/tmp/mpcl-no-icd-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    setenv("OCL_ICD_VENDORS", dir, 1);
    unsetenv("OCL_ICD_FILENAMES");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(enumeration_says_no_platform_and_how_to_fix_it),
        cmocka_unit_test(context_creation_says_no_platform),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(dir);
    return failed;
}
