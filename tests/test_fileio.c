/* Every file mpcl opens goes through src/runtime/fileio.c: readers never
 * block on a FIFO (alarm() turns a blocking open into a failure instead of a
 * hang), MPCL_CL_DIR sources are read through the same open, and the atomic
 * writer refuses, before any work, a name too long for its temporary file. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mpcl/files.h"
#include "runtime/fileio.h"
#include "runtime/runtime.h"
#include "testutil.h"

static char dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mpcl-fileio-unit-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    tu_cache_dir_remove(dir);
    return 0;
}

static void quiet_open_names_a_fifo_and_never_waits(void **state) {
    (void)state;
    char fifo[128];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    unsigned mode = 0;
    alarm(10);
    assert_null(mpcl__open_regular_quiet(fifo, &mode));
    alarm(0);
    assert_true(S_ISFIFO(mode));
    mode = 1;
    snprintf(fifo, sizeof fifo, "%s/missing", dir);
    assert_null(mpcl__open_regular_quiet(fifo, &mode));
    assert_int_equal(mode, 0);
}

/* A FIFO among MPCL_CL_DIR's sources is an error naming it; a file missing
 * there comes from the embedded copies. */
static void cl_dir_fifo_is_refused_by_name(void **state) {
    (void)state;
    char fifo[128];
    snprintf(fifo, sizeof fifo, "%s/common.cl", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    setenv("MPCL_CL_DIR", dir, 1);
    char *text = NULL;
    alarm(10);
    mpcl_status st = mpcl__cl_source_read("common.cl", &text, NULL);
    alarm(0);
    assert_int_equal(st, MPCL_ERR_IO);
    assert_null(text);
    assert_non_null(strstr(mpcl_errmsg(), fifo));
    assert_non_null(strstr(mpcl_errmsg(), "MPCL_CL_DIR"));
    assert_non_null(strstr(mpcl_errmsg(), "a FIFO"));
    TU_ASSERT_OK(mpcl__cl_source_read("gemm.cl", &text, NULL)); /* not in dir: embedded */
    assert_non_null(text);
    free(text);
    unsetenv("MPCL_CL_DIR");
}

/* The writer's own limit: a name of exactly that many bytes is written, one
 * byte more is refused at begin, naming the limit (before the fix it failed
 * only at commit, when the temporary file was named). */
static void atomic_writer_refuses_a_name_without_room_for_its_temporary(void **state) {
    (void)state;
    size_t longest = mpcl_output_name_max(dir);
    long fs_limit = pathconf(dir, _PC_NAME_MAX);
    assert_true(fs_limit > MPCL_TEMP_SUFFIX_MAX);
    assert_int_equal(longest, (size_t)fs_limit - MPCL_TEMP_SUFFIX_MAX);
    char path[1024], name[512];
    memset(name, 'n', longest + 1);
    name[longest + 1] = '\0';
    snprintf(path, sizeof path, "%s/%s", dir, name);
    mpcl__atomic_file af;
    assert_int_equal(mpcl__atomic_begin(&af, path), MPCL_ERR_IO);
    char want[160];
    snprintf(want, sizeof want, "the longest mpcl can write in '%s' is %zu", dir, longest);
    assert_non_null(strstr(mpcl_errmsg(), want));
    name[longest] = '\0';
    snprintf(path, sizeof path, "%s/%s", dir, name);
    TU_ASSERT_OK(mpcl__atomic_begin(&af, path));
    TU_ASSERT_OK(mpcl__atomic_write(&af, "x", 1));
    TU_ASSERT_OK(mpcl__atomic_commit(&af));
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(quiet_open_names_a_fifo_and_never_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(cl_dir_fifo_is_refused_by_name, setup, teardown),
        cmocka_unit_test_setup_teardown(atomic_writer_refuses_a_name_without_room_for_its_temporary,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
