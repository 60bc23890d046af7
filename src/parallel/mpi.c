/* The MPI transport of the communicator: one replica per process. Errors are
 * returned (MPI_ERRORS_RETURN), never fatal inside MPI; a rank that fails
 * calls mpcl_dist_abort (the tool does), which ends the job, so that no rank
 * waits forever in a collective for a peer that is gone. Open MPI also ends
 * the job when a rank dies (a signal, a kill): mpirun reports which.
 *
 * A peer that hangs without dying (stopped, stuck in a driver) is caught by
 * the timeout: every collective is started non-blocking and waited for with
 * MPI_Test until its deadline, past which this rank says which collective
 * waited how long and calls MPI_Abort. Why not a watchdog thread: MPI_Abort
 * from a second thread needs MPI_THREAD_MULTIPLE, which not every MPI build
 * gives; the polling loop does what a blocking collective does anyway (Open
 * MPI progresses by polling) and keeps every MPI call on the one thread. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpcl/number.h"
#include "parallel/parallel.h"

#if MPCL_HAVE_MPI
#include <mpi.h>

bool mpcl_dist_mpi_built(void) {
    return true;
}

typedef struct mpi_state {
    MPI_Comm comm;
    MPI_Op sum16[2]; /* fp16, bf16 */
    bool we_initialised;
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
    for (int i = 0; i < *len; i++)
        b[i] = mpcl__dist_to16(c, mpcl__dist_from16(c, a[i]) + mpcl__dist_from16(c, b[i]));
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

/* Waits for a started collective, at most d->timeout_s (0: for ever); past
 * that the job ends here (see the top of the file). */
static int wait_collective(mpcl_dist *d, MPI_Request *req, const char *what) {
    mpi_state *s = d->comm;
    double start = now_s();
    int done = 0, err;
    while ((err = MPI_Test(req, &done, MPI_STATUS_IGNORE)) == MPI_SUCCESS && !done) {
        double waited = now_s() - start;
        if (d->timeout_s > 0 && waited > d->timeout_s) {
            fprintf(stderr,
                    "mpcl: rank %zu: %s waited %.0f s for the other ranks (the MPI timeout, "
                    "--dist-timeout): a rank hangs or is stopped; ending the MPI job\n",
                    d->rank, what, waited);
            fflush(stderr);
            MPI_Abort(s->comm, 1);
        }
    }
    return err;
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
    if (st != MPCL_OK) mpcl__dist_mpi_finalize(d);
    return st;
}

void mpcl__dist_mpi_finalize(mpcl_dist *d) {
    mpi_state *s = d->comm;
    if (!s) return;
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
        MPI_Request req;
        int err = MPI_Iallreduce(MPI_IN_PLACE, v + i, k, MPI_FLOAT, MPI_SUM, s->comm, &req);
        if (err == MPI_SUCCESS) err = wait_collective(d, &req, what);
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
        MPI_Request req;
        int err = MPI_Iallreduce(MPI_IN_PLACE, v + i, k, MPI_UINT16_T, op, s->comm, &req);
        if (err == MPI_SUCCESS) err = wait_collective(d, &req, what);
        if (err != MPI_SUCCESS) return mpi_error(ctx, err, what);
    }
    return MPCL_OK;
}

mpcl_status mpcl__dist_mpi_sum_f64(mpcl_dist *d, mpcl_context *ctx, double *v, size_t n) {
    mpi_state *s = d->comm;
    MPI_Request req;
    int err = MPI_Iallreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM, s->comm, &req);
    if (err == MPI_SUCCESS) err = wait_collective(d, &req, "MPI_Allreduce");
    return err == MPI_SUCCESS ? MPCL_OK : mpi_error(ctx, err, "MPI_Allreduce");
}

mpcl_status mpcl__dist_mpi_allgather(mpcl_dist *d, mpcl_context *ctx, const void *mine,
                                     size_t bytes, void *all) {
    mpi_state *s = d->comm;
    MPI_Request req;
    int err = MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, s->comm, &req);
    if (err == MPI_SUCCESS) err = wait_collective(d, &req, "MPI_Allgather");
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
