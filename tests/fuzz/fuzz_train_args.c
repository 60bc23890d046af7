/* libFuzzer harness: mpcl-train's command line. The input is split at NUL
 * bytes into at most 64 arguments after argv[0]. A parse either succeeds, and
 * then its translation into the library's parameters runs too, or fails with
 * a non-empty message; it never exits, prints or writes a file (output paths
 * are only looked at with stat). */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "train_args.h"

#define MAX_ARGS 64

static volatile size_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *copy = malloc(size + 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = "mpcl-train";
    for (size_t i = 0; i <= size && argc <= MAX_ARGS;) {
        argv[argc++] = copy + i;
        i += strlen(copy + i) + 1;
    }
    argv[argc] = NULL;
    train_args a;
    char err[512];
    err[0] = '\0';
    if (train_args_parse(&a, argc, argv, err, sizeof err)) {
        mpcl_train_params p = train_args_to_params(&a);
        sink = p.batch + p.model.hidden_count + (size_t)p.epochs;
        if (a.save) train_args_check_output_path("--save", a.save, false, err, sizeof err);
        if (a.metrics) train_args_check_output_path("--metrics", a.metrics, false, err, sizeof err);
    } else if (!err[0]) {
        abort(); /* a failure always says why */
    }
    free(copy);
    return 0;
}
