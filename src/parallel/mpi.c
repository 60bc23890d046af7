/* The MPI transport of the communicator: one replica per process. Errors are
 * returned (MPI_ERRORS_RETURN), never fatal inside MPI; a rank that fails
 * calls mpcl_dist_abort (the tool does), which ends the job, so that no rank
 * waits forever in a collective for a peer that is gone. Open MPI also ends
 * the job when a rank dies (a signal, a kill): mpirun reports which. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static size_t env_size(const char *a, const char *b, size_t fallback) {
    const char *v = getenv(a);
    if (!v) v = getenv(b);
    return v ? (size_t)strtoul(v, NULL, 10) : fallback;
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
    d->local_rank = env_size("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", 0);
    return MPCL_OK;
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
        int err = MPI_Allreduce(MPI_IN_PLACE, v + i, k, MPI_FLOAT, MPI_SUM, s->comm);
        if (err != MPI_SUCCESS) return mpi_error(ctx, err, "MPI_Allreduce of the gradients");
    }
    return MPCL_OK;
}

mpcl_status mpcl__dist_mpi_sum_u16(mpcl_dist *d, mpcl_context *ctx, uint16_t *v, size_t n) {
    mpi_state *s = d->comm;
    MPI_Op op = s->sum16[d->compression == MPCL_GRAD_COMPRESSION_BF16];
    for (size_t i = 0; i < n; i += CHUNK) {
        int k = (int)(n - i < CHUNK ? n - i : CHUNK);
        int err = MPI_Allreduce(MPI_IN_PLACE, v + i, k, MPI_UINT16_T, op, s->comm);
        if (err != MPI_SUCCESS)
            return mpi_error(ctx, err, "MPI_Allreduce of the compressed gradients");
    }
    return MPCL_OK;
}

mpcl_status mpcl__dist_mpi_sum_f64(mpcl_dist *d, mpcl_context *ctx, double *v, size_t n) {
    mpi_state *s = d->comm;
    int err = MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM, s->comm);
    return err == MPI_SUCCESS ? MPCL_OK : mpi_error(ctx, err, "MPI_Allreduce");
}

mpcl_status mpcl__dist_mpi_allgather(mpcl_dist *d, mpcl_context *ctx, const void *mine,
                                     size_t bytes, void *all) {
    mpi_state *s = d->comm;
    int err = MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, s->comm);
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
