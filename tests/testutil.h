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
/* Whether ctx runs on PoCL (the suite's reference CPU driver). */
bool tu_on_pocl(const mpcl_context *ctx);
/* Whether the environment variable `var` is `value` (a TU_RUN_WITH_EACH run). */
bool tu_env_is(const char *var, const char *value);

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
/* The same with each element's bound widened by slack[i] >= 0 (the
 * uncertainty of a want that is itself an estimate), in the norm too. */
bool tu_check_close_slack(const char *what, const float *got, const double *want,
                          const double *slack, size_t n, double atol, double rtol, double norm_tol);

/* The whole-tensor bound implied by the elementwise one of tu_check_close:
 * |e_i| <= atol + rtol |w_i| gives ||e|| / ||w|| <= rtol + atol sqrt(n) /
 * ||w||; a single element (1x1) can reach it, so the normalized check uses
 * it as is. */
double tu_norm_tol(double atol, double rtol, const double *want, size_t n);

/* A rows x cols tensor; fails the test when it cannot be made. */
mpcl_tensor *tu_tensor(mpcl_context *ctx, mpcl_dtype dtype, size_t rows, size_t cols);

/* Fills an f32, f16 or bf16 tensor with the poison NaN, so that an element a
 * kernel fails to write shows up. */
void tu_poison(mpcl_tensor *t);

/* The float that poisons outputs: a NaN with a payload no kernel produces. */
float tu_poison_f32(void);

/* A seed from the clock, printed with the test's name; MPCL_TEST_SEED=N
 * replays a failure with the seed it printed. */
uint64_t tu_seed(const char *test);

/* What a tensor of `dtype` holds after an upload of x. */
float tu_stored(mpcl_dtype dtype, float x);

/* What one rounding into a storage dtype adds to a result w: at most
 * rel |w| + abs. The unit roundoff of the significand (f16: 11 bits, 2^-11;
 * bf16: 8 bits, 2^-8) and half the smallest subnormal step below the normal
 * range (f16: 2^-25; bf16, with f32's exponent range: 2^-134). f32 storage
 * adds nothing to the f32 result. */
typedef struct tu_rounding {
    double rel, abs;
} tu_rounding;
tu_rounding tu_storage_rounding(mpcl_dtype dtype);

/* A rows x cols tensor holding x (rows * cols floats, rounded to dtype), and
 * one filled with the poison (tu_poison). */
mpcl_tensor *tu_tensor_from(mpcl_context *ctx, mpcl_dtype dtype, size_t rows, size_t cols,
                            const float *x);
mpcl_tensor *tu_tensor_poisoned(mpcl_context *ctx, mpcl_dtype dtype, size_t rows, size_t cols);
/* The tensor's elements as floats, malloc'ed; x as doubles, malloc'ed. */
float *tu_download(const mpcl_tensor *t);
double *tu_to_double(const float *x, size_t n);
/* True when every element of an f32, f16 or bf16 tensor still holds the
 * poison bit pattern. */
bool tu_still_poisoned(const mpcl_tensor *t);

/* token_pos_embedding (vocabulary V, P positions, C channels) -> dense V
 * per position on sequences of T token ids: a model of next-token labels
 * per position, from its text form. */
mpcl_model_params tu_token_model_params(size_t T, size_t V, size_t P, size_t C, size_t max_batch,
                                        mpcl_policy policy);
/* An int32 [B, T] tensor of ids. */
mpcl_tensor *tu_ids_tensor(mpcl_context *ctx, size_t B, size_t T, const int32_t *ids);

/* The mean evaluation loss of m on the batch {x, y} (its statistics into
 * *s when s is not NULL), and the same as a tu_loss_fn of arg = {x, y}. */
double tu_eval_loss(mpcl_model *m, const mpcl_tensor *x, const mpcl_tensor *y, mpcl_loss_stats *s);
double tu_batch_loss(mpcl_model *m, void *xy);

/* Every parameter's master weights and optimizer state (slots the optimizer
 * lacks are zeros), concatenated slot by slot, then every buffer (a batch
 * norm's moving averages), malloc'ed; for bitwise comparisons of whole
 * model states. */
float *tu_model_state(mpcl_model *m, size_t *n_out);

/* Parameter `index`'s elements of m's gradient arena, as floats, malloc'ed. */
float *tu_param_grads(mpcl_model *m, size_t index);

/* Every element of every parameter of m: its gradient in the gradient
 * arena (the caller's backward) against finite differences of loss(m, arg),
 * the master weight moved each way and put back. The central differences
 * D(h) and D(h/2) (each (loss(w + s) - loss(w - s)) / the two weights' f32
 * difference) give Richardson's (4 D(h/2) - D(h)) / 3, whose h^2 error
 * cancels, and |D(h) - D(h/2)| estimates what is left of the truncation
 * and the loss's f32 rounding: that slack widens the element's bound
 * (tu_check_close_slack). One step size alone had to be small for curved
 * losses (a layer norm over 4 channels: D(5e-3) 4% off) and large for the
 * rounding. Fails naming the parameter unless the check passes. Returns
 * the elements checked. */
typedef double (*tu_loss_fn)(mpcl_model *m, void *arg);
size_t tu_check_param_gradients(mpcl_model *m, double h, tu_loss_fn loss, void *arg, double atol,
                                double rtol, double norm_tol);
#define TU_POISON_F16 ((uint16_t)0x7e55)
/* bf16: a signaling NaN, which no bf16 store produces (NaN stores as 0x7fc0). */
#define TU_POISON_BF16 ((uint16_t)0x7fa5)
/* The poison bit pattern of a 16-bit float dtype. */
#define TU_POISON_16(dtype) ((dtype) == MPCL_DTYPE_BF16 ? TU_POISON_BF16 : TU_POISON_F16)

/* A fresh folder /tmp/mpcl-test-<name>-XXXXXX into dir (64 bytes), and its
 * removal with everything in it: a test group's setup and teardown. Both
 * return 0 on success, as cmocka's group fixtures do. */
int tu_tmpdir_make(char dir[64], const char *name);
int tu_tmpdir_remove(const char *dir);

/* A fresh folder from mkdtemp(template) made this process's cache folder
 * (MPCL_CACHE_DIR); false when it cannot be made. */
bool tu_cache_dir_make(char *template_path);
/* Copies into dir the entries (compiled programs, capability verdicts; not
 * the auto plan's verdicts/) of the suite's cache folder, the MPCL_CACHE_DIR
 * the test started with: for tests of other caches than the program cache,
 * which on a driver with a slow compiler (Intel's: ~20 s a program) would
 * otherwise build every program again. False when a copy fails. */
bool tu_cache_dir_add_programs(const char *dir);
/* Removes a folder made by tu_cache_dir_make with what is in it (files and
 * the verdicts/ folder), and makes the suite's folder the cache again. */
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

/* Runs cmocka's group `tests` once with the environment variable `var` set
 * to each of the values after it in turn (kernel layouts, whatever the
 * device would take by default), and returns the failures of all the runs;
 * `var` is unset after them. */
#define TU_RUN_WITH_EACH(tests, var, ...)                                                    \
    tu_run_with_each(#tests, (tests), sizeof(tests) / sizeof((tests)[0]), NULL, NULL, (var), \
                     (const char *const[]){__VA_ARGS__, NULL})
/* The same with a group setup and teardown around each run. */
#define TU_RUN_GROUP_WITH_EACH(tests, setup, teardown, var, ...)                               \
    tu_run_with_each(#tests, (tests), sizeof(tests) / sizeof((tests)[0]), (setup), (teardown), \
                     (var), (const char *const[]){__VA_ARGS__, NULL})
/* values: NULL-terminated. */
int tu_run_with_each(const char *name, const struct CMUnitTest *tests, size_t count,
                     CMFixtureFunction setup, CMFixtureFunction teardown, const char *var,
                     const char *const *values);

/* Fails the test unless `got` is `want` and the error detail contains
 * `needle`, printing both statuses and the detail. */
void tu_expect_error(mpcl_status got, mpcl_status want, const char *needle);

/* Fails the test unless `call` returns the status `want`, naming the call,
 * the two statuses and the error detail. */
#define TU_EXPECT_STATUS(want, call)                                                \
    do {                                                                            \
        mpcl_status got_ = (call);                                                  \
        if (got_ != (want))                                                         \
            fail_msg("%s -> %s, want %s (%s)", #call, mpcl_status_name(got_),       \
                     mpcl_status_name(want), got_ == MPCL_OK ? "" : mpcl_errmsg()); \
    } while (0)

/* assert_int_equal with the error detail printed when it fails. */
#define TU_ASSERT_OK(call)                                                 \
    do {                                                                   \
        mpcl_status tu_st_ = (call);                                       \
        if (tu_st_ != MPCL_OK) fail_msg("%s -> %s", #call, mpcl_errmsg()); \
    } while (0)

#endif
