/* The parallel area's internal declarations: the communicator, shared by dist.c
 * (the local back-end and what both back-ends share) and mpi.c (the MPI
 * transport). Nothing here is installed. */
#ifndef MPCL_PARALLEL_H
#define MPCL_PARALLEL_H

#include "mpcl/dist.h"
#include "nn/nn.h"

struct mpcl_dist {
    bool mpi;
    size_t world, rank, local, first, local_rank;
    mpcl_grad_compression compression;
    float *sum, *buf; /* host staging, [cap] each */
    uint16_t *wire;   /* compressed values, [cap] */
    size_t cap;
    double timeout_s; /* MPI: longest wait in a collective (0: no limit) */
    double allreduce_seconds;
    uint64_t allreduce_calls;
    void *comm; /* mpi.c's state */
};

/* mpi.c. Without MPI, init says MPCL_ERR_UNSUPPORTED and the others are
 * never reached (d->mpi is false). Errors are recorded on ctx. */
mpcl_status mpcl__dist_mpi_init(mpcl_dist *d);
void mpcl__dist_mpi_finalize(mpcl_dist *d);
void mpcl__dist_mpi_abort(mpcl_dist *d, int code);
/* In-place sums over the processes: f32 values, 16-bit values of the
 * compression format (added in f32, rounded back at each step), doubles. */
mpcl_status mpcl__dist_mpi_sum_f32(mpcl_dist *d, mpcl_context *ctx, float *v, size_t n);
mpcl_status mpcl__dist_mpi_sum_u16(mpcl_dist *d, mpcl_context *ctx, uint16_t *v, size_t n);
mpcl_status mpcl__dist_mpi_sum_f64(mpcl_dist *d, mpcl_context *ctx, double *v, size_t n);
/* all + p * bytes = process p's `mine`, for every process. */
mpcl_status mpcl__dist_mpi_allgather(mpcl_dist *d, mpcl_context *ctx, const void *mine,
                                     size_t bytes, void *all);

/* The 16-bit dtype a compression sends (bf16, or f16 for fp16). */
mpcl_dtype mpcl__dist_wire_dtype(mpcl_grad_compression c);

#endif
