/* The MPI transport of the communicator: one replica per process. Errors are
 * returned (MPI_ERRORS_RETURN), never fatal inside MPI; a rank that fails
 * calls mpcl_dist_abort (the tool does), which ends the job, so that no rank
 * waits forever in a collective for a peer that is gone. Open MPI also ends
 * the job when a rank dies (a signal, a kill): mpirun reports which.
 *
 * A peer that hangs without dying (stopped, stuck in a driver) is caught by
 * the timeout: a watchdog thread, told when each collective begins and
 * ends, wakes at its deadline and, if that collective is still under way,
 * says which it is and how long it waited, and ends the process. Why a
 * thread and not non-blocking collectives polled against the deadline
 * (MPI_Iallreduce + MPI_Test): Open MPI's non-blocking all-reduce is 1.5 to
 * 2.6 times slower than the blocking one for 4 to 40 MB (two ranks, shared
 * memory), and the gradient all-reduce is the hot path. Why _exit and not
 * MPI_Abort: the watchdog is not the thread that initialised MPI, and MPI
 * (at MPI_THREAD_SINGLE) allows no call from it; a rank that exits without
 * MPI_Finalize makes the launcher end the job, as a killed rank does. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mpcl/number.h"
#include "parallel/parallel.h"

#if MPCL_HAVE_MPI
#include <mpi.h>

bool mpcl_dist_mpi_built(void) {
    return true;
}

/* What the watchdog thread watches; every field under lock. */
typedef struct watchdog {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    const char *what; /* the collective under way; NULL between collectives */
    double since, timeout_s;
    size_t rank;
    bool idle; /* waiting for a collective, not for a deadline */
    bool quit;
} watchdog;

typedef struct mpi_state {
    MPI_Comm comm;
    MPI_Op sum16[2]; /* fp16, bf16 */
    bool we_initialised;
    bool watching; /* the watchdog thread runs */
    watchdog dog;
} mpi_state;

static mpcl_status mpi_error(mpcl_context *ctx, int err, const char *call) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", err);
    return MPCL_ERROR(ctx, MPCL_ERR_DIST, "%s failed: %s (a peer rank may have failed)", call, msg);
}

/* The user reductions of 16-bit values: each pair added in f32 and rounded
 * back, as the local back-end does (dist.c). */
static void sum16(void *in, void *inout, int *len, MPI_Datatype *type, mpcl_grad_compression c) {
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    mpcl_dtype wire = mpcl__dist_wire_dtype(c);
    for (int i = 0; i < *len; i++)
        b[i] = mpcl__f32_to_16bit(wire,
                                  mpcl__16bit_to_f32(wire, a[i]) + mpcl__16bit_to_f32(wire, b[i]));
}
static void sum_fp16(void *in, void *inout, int *len, MPI_Datatype *type) {
    sum16(in, inout, len, type, MPCL_GRAD_COMPRESSION_FP16);
}
static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type) {
    sum16(in, inout, len, type, MPCL_GRAD_COMPRESSION_BF16);
}

/* The launcher's local rank: the first of the two variables that is set,
 * read strictly (a value that is not a plain number is an error naming it,
 * never a silent 0 that would put every rank on one device). */
static mpcl_status env_size(const char *a, const char *b, size_t *out) {
    const char *name = getenv(a) ? a : b, *v = getenv(name);
    uint64_t u = 0;
    mpcl_number_error e = v ? mpcl_parse_uint(v, SIZE_MAX, &u) : MPCL_NUMBER_OK;
    if (e != MPCL_NUMBER_OK)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "environment %s='%s' %s", name, v,
                          mpcl_number_error_text(e));
    *out = (size_t)u;
    return MPCL_OK;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static struct timespec at(double seconds) {
    struct timespec t;
    t.tv_sec = (time_t)seconds;
    t.tv_nsec = (long)((seconds - (double)t.tv_sec) * 1e9);
    return t;
}

static void *watch(void *arg) {
    watchdog *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->quit) {
        if (!w->what || w->timeout_s <= 0) {
            w->idle = true;
            pthread_cond_wait(&w->wake, &w->lock);
            w->idle = false;
            continue;
        }
        double waited = now_s() - w->since;
        if (waited > w->timeout_s) {
            fprintf(stderr,
                    "mpcl: rank %zu: %s waited %.0f s for the other ranks (the MPI timeout, "
                    "--dist-timeout): a rank hangs or is stopped; ending the MPI job\n",
                    w->rank, w->what, waited);
            fflush(stderr);
            _exit(1);
        }
        struct timespec deadline = at(w->since + w->timeout_s + 0.01);
        pthread_cond_timedwait(&w->wake, &w->lock, &deadline);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static bool watchdog_start(watchdog *w, size_t rank) {
    pthread_condattr_t attr;
    bool ok = pthread_condattr_init(&attr) == 0;
    ok = ok && pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0;
    ok = ok && pthread_cond_init(&w->wake, &attr) == 0;
    if (ok && pthread_mutex_init(&w->lock, NULL) != 0) {
        pthread_cond_destroy(&w->wake);
        ok = false;
    }
    w->rank = rank;
    if (ok && pthread_create(&w->thread, NULL, watch, w) != 0) {
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->wake);
        ok = false;
    }
    return ok;
}

static void watchdog_stop(watchdog *w) {
    pthread_mutex_lock(&w->lock);
    w->quit = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->wake);
}

/* Around every collective: `what` is under way from now, for at most
 * d->timeout_s (0: for ever); then it is done. The thread is woken only
 * from idle: one waiting for an earlier deadline wakes then and looks again,
 * so that a step's collectives cost no thread switch. */
static void collective_begin(mpcl_dist *d, const char *what) {
    watchdog *w = &((mpi_state *)d->comm)->dog;
    pthread_mutex_lock(&w->lock);
    w->what = what;
    w->since = now_s();
    w->timeout_s = d->timeout_s;
    if (w->idle) pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
}

static void collective_end(mpcl_dist *d) {
    watchdog *w = &((mpi_state *)d->comm)->dog;
    pthread_mutex_lock(&w->lock);
    w->what = NULL;
    pthread_mutex_unlock(&w->lock);
}

mpcl_status mpcl__dist_mpi_init(mpcl_dist *d) {
    mpi_state *s = calloc(1, sizeof *s);
    if (!s) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "allocating MPI state");
    int inited = 0, rank = 0, size = 0, err = MPI_Initialized(&inited);
    if (err == MPI_SUCCESS && !inited) {
        err = MPI_Init(NULL, NULL);
        s->we_initialised = err == MPI_SUCCESS;
    }
    if (err == MPI_SUCCESS) err = MPI_Comm_dup(MPI_COMM_WORLD, &s->comm);
    if (err == MPI_SUCCESS) err = MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    if (err == MPI_SUCCESS) err = MPI_Comm_rank(s->comm, &rank);
    if (err == MPI_SUCCESS) err = MPI_Comm_size(s->comm, &size);
    if (err == MPI_SUCCESS) err = MPI_Op_create(sum_fp16, 1, &s->sum16[0]);
    if (err == MPI_SUCCESS) err = MPI_Op_create(sum_bf16, 1, &s->sum16[1]);
    if (err != MPI_SUCCESS) {
        free(s);
        return mpi_error(NULL, err, "MPI initialisation");
    }
    d->comm = s;
    d->rank = (size_t)rank;
    d->world = (size_t)size;
    d->timeout_s = MPCL_DIST_DEFAULT_TIMEOUT;
    mpcl_status st = env_size("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", &d->local_rank);
    if (st == MPCL_OK && !(s->watching = watchdog_start(&s->dog, d->rank)))
        st = MPCL_ERROR(NULL, MPCL_ERR_DIST, "starting the thread of the MPI timeout");
    if (st != MPCL_OK) mpcl__dist_mpi_finalize(d);
    return st;
}

void mpcl__dist_mpi_finalize(mpcl_dist *d) {
    mpi_state *s = d->comm;
    if (!s) return;
    if (s->watching) watchdog_stop(&s->dog);
    MPI_Op_free(&s->sum16[0]);
    MPI_Op_free(&s->sum16[1]);
    MPI_Comm_free(&s->comm);
    if (s->we_initialised) MPI_Finalize();
    free(s);
    d->comm = NULL;
}

void mpcl__dist_mpi_abort(mpcl_dist *d, int code) {
    mpi_state *s = d->comm;
    MPI_Abort(s ? s->comm : MPI_COMM_WORLD, code);
}

/* MPI counts are ints: large arenas go in chunks. */
#define CHUNK ((size_t)1 << 30)

mpcl_status mpcl__dist_mpi_sum_f32(mpcl_dist *d, mpcl_context *ctx, float *v, size_t n) {
    mpi_state *s = d->comm;
    for (size_t i = 0; i < n; i += CHUNK) {
        int k = (int)(n - i < CHUNK ? n - i : CHUNK);
        const char *what = "MPI_Allreduce of the gradients";
        collective_begin(d, what);
        int err = MPI_Allreduce(MPI_IN_PLACE, v + i, k, MPI_FLOAT, MPI_SUM, s->comm);
        collective_end(d);
        if (err != MPI_SUCCESS) return mpi_error(ctx, err, what);
    }
    return MPCL_OK;
}

mpcl_status mpcl__dist_mpi_sum_u16(mpcl_dist *d, mpcl_context *ctx, uint16_t *v, size_t n) {
    mpi_state *s = d->comm;
    MPI_Op op = s->sum16[d->compression == MPCL_GRAD_COMPRESSION_BF16];
    for (size_t i = 0; i < n; i += CHUNK) {
        int k = (int)(n - i < CHUNK ? n - i : CHUNK);
        const char *what = "MPI_Allreduce of the compressed gradients";
        collective_begin(d, what);
        int err = MPI_Allreduce(MPI_IN_PLACE, v + i, k, MPI_UINT16_T, op, s->comm);
        collective_end(d);
        if (err != MPI_SUCCESS) return mpi_error(ctx, err, what);
    }
    return MPCL_OK;
}

mpcl_status mpcl__dist_mpi_sum_f64(mpcl_dist *d, mpcl_context *ctx, double *v, size_t n) {
    mpi_state *s = d->comm;
    collective_begin(d, "MPI_Allreduce");
    int err = MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM, s->comm);
    collective_end(d);
    return err == MPI_SUCCESS ? MPCL_OK : mpi_error(ctx, err, "MPI_Allreduce");
}

mpcl_status mpcl__dist_mpi_allgather(mpcl_dist *d, mpcl_context *ctx, const void *mine,
                                     size_t bytes, void *all) {
    mpi_state *s = d->comm;
    collective_begin(d, "MPI_Allgather");
    int err = MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, s->comm);
    collective_end(d);
    return err == MPI_SUCCESS ? MPCL_OK : mpi_error(ctx, err, "MPI_Allgather");
}

#else /* without MPI */

bool mpcl_dist_mpi_built(void) {
    return false;
}

mpcl_status mpcl__dist_mpi_init(mpcl_dist *d) {
    (void)d;
    return MPCL_ERROR(NULL, MPCL_ERR_UNSUPPORTED,
                      "this libmpcl was built without MPI (meson setup -Dmpi=enabled, with "
                      "libopenmpi-dev installed)");
}

/* Never reached: d->mpi is false without MPI. */
void mpcl__dist_mpi_finalize(mpcl_dist *d) {
    (void)d;
}
void mpcl__dist_mpi_abort(mpcl_dist *d, int code) {
    (void)d;
    (void)code;
}
mpcl_status mpcl__dist_mpi_sum_f32(mpcl_dist *d, mpcl_context *ctx, float *v, size_t n) {
    (void)d, (void)v, (void)n;
    return MPCL_ERROR(ctx, MPCL_ERR_UNSUPPORTED, "built without MPI");
}
mpcl_status mpcl__dist_mpi_sum_u16(mpcl_dist *d, mpcl_context *ctx, uint16_t *v, size_t n) {
    (void)d, (void)v, (void)n;
    return MPCL_ERROR(ctx, MPCL_ERR_UNSUPPORTED, "built without MPI");
}
mpcl_status mpcl__dist_mpi_sum_f64(mpcl_dist *d, mpcl_context *ctx, double *v, size_t n) {
    (void)d, (void)v, (void)n;
    return MPCL_ERROR(ctx, MPCL_ERR_UNSUPPORTED, "built without MPI");
}
mpcl_status mpcl__dist_mpi_allgather(mpcl_dist *d, mpcl_context *ctx, const void *mine,
                                     size_t bytes, void *all) {
    (void)d, (void)mine, (void)bytes, (void)all;
    return MPCL_ERROR(ctx, MPCL_ERR_UNSUPPORTED, "built without MPI");
}

#endif
