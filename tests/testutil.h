/* Shared test helpers: a context on the device the suite runs on, a seeded
 * RNG, and the three output checks (elementwise abs+rel with the first
 * mismatches printed, whole-tensor normalized error, NaN/inf policy). */
#ifndef MPCL_TESTUTIL_H
#define MPCL_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs these first. */
#include <cmocka.h>

#include "mpcl/mpcl.h"

/* A context on $MPCL_DEVICE (the suite sets it per OpenCL implementation);
 * fails the test with the error detail when none can be made. */
mpcl_context *tu_context(void);

/* True on slow implementations (Oclgrind, Rusticl): tests may pick smaller cases. */
bool tu_slow_device(const mpcl_context *ctx);

/* xorshift64*: fresh inputs per test, reproducible from the printed seed. */
typedef struct tu_rng {
    uint64_t s;
} tu_rng;
tu_rng tu_rng_make(uint64_t seed);
double tu_uniform(tu_rng *r, double lo, double hi);
void tu_fill_uniform(tu_rng *r, float *x, size_t n, float lo, float hi);

/* The elementwise check: |got - want| <= atol + rtol * |want| for every
 * element, and the normalized error ||got - want|| / max(||want||, 1e-30) <=
 * norm_tol. NaN in got fails unless want is NaN; an expected inf must be the
 * same inf. Prints the first mismatches with `what`. Returns true on pass. */
bool tu_check_close(const char *what, const float *got, const double *want, size_t n, double atol,
                    double rtol, double norm_tol);

/* A rows x cols tensor; fails the test when it cannot be made. */
mpcl_tensor *tu_tensor(mpcl_context *ctx, mpcl_dtype dtype, size_t rows, size_t cols);

/* Fills an f32, f16 or bf16 tensor with the poison NaN, so that an element a
 * kernel fails to write shows up. */
void tu_poison(mpcl_tensor *t);

/* The float that poisons outputs: a NaN with a payload no kernel produces. */
float tu_poison_f32(void);

/* Every parameter's master weights and optimizer state (slots the optimizer
 * lacks are zeros), concatenated slot by slot, malloc'ed; for bitwise
 * comparisons of whole model states. */
float *tu_model_state(mpcl_model *m, size_t *n_out);
#define TU_POISON_F16 ((uint16_t)0x7e55)
/* bf16: a signaling NaN, which no bf16 store produces (NaN stores as 0x7fc0). */
#define TU_POISON_BF16 ((uint16_t)0x7fa5)
/* The poison bit pattern of a 16-bit float dtype. */
#define TU_POISON_16(dtype) ((dtype) == MPCL_DTYPE_BF16 ? TU_POISON_BF16 : TU_POISON_F16)

/* A fresh folder from mkdtemp(template) made this process's cache folder
 * (MPCL_CACHE_DIR); false when it cannot be made. */
bool tu_cache_dir_make(char *template_path);
/* Removes a folder made by tu_cache_dir_make with what is in it (files and
 * the verdicts/ folder). */
void tu_cache_dir_remove(const char *dir);
/* A whole file, malloc'ed (at least 1 byte), its length in *n; fails the
 * test when it cannot be read. */
unsigned char *tu_slurp(const char *path, size_t *n);

/* Runs fn(arg) in a forked child whose address space is limited to what the
 * process maps now plus `extra` bytes (RLIMIT_AS), and returns fn's result
 * (0..255), or -1 when the child died. Under AddressSanitizer, which maps
 * terabytes of shadow up front, the limit cannot be applied: fn then runs
 * unlimited in the child, and *limited is set to false. */
int tu_run_memory_limited(size_t extra, int (*fn)(void *), void *arg, bool *limited);

/* assert_int_equal with the error detail printed when it fails. */
#define TU_ASSERT_OK(call)                                                 \
    do {                                                                   \
        mpcl_status tu_st_ = (call);                                       \
        if (tu_st_ != MPCL_OK) fail_msg("%s -> %s", #call, mpcl_errmsg()); \
    } while (0)

#endif
