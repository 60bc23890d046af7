/* Data parallel: one model replica per device, the global batch split across
 * them, and the gradient arenas summed between backward and apply.
 *
 * A communicator has one of two back-ends:
 *   local  several replicas in this process, one per OpenCL context (device);
 *          the arenas are summed through host staging: each replica's arena
 *          is downloaded (converted to f32), summed in f32 in replica order,
 *          and the sum is uploaded (rounded once to the storage dtype) to
 *          every replica. That is a blocking host round trip per step: the
 *          "no host read per step" property of a single device does not
 *          hold for it.
 *   mpi    one replica per process, any number of processes and machines
 *          (mpirun); the arena goes through MPI_Allreduce as f32, or as 16-bit
 *          values with compression. Built only with -Dmpi (mpcl_dist_mpi_built).
 *
 * What every replica does is identical after the sum, and that is what keeps
 * them in step: the finite check of apply (found_inf) runs on the same summed
 * arena everywhere, so its OR over the replicas needs no reduction of its
 * own -- an inf or NaN in any replica's gradient is in the sum (inf + x = inf,
 * inf - inf = NaN), and every replica skips the step and halves its scale.
 * Once per epoch the trainer compares a checksum of the master weights
 * (mpcl_dist_check_weights), so a replica that drifted anyway is named.
 *
 * Compression (fp16, bf16) rounds each replica's contribution to 16 bits and
 * each partial sum again (local: in replica order; MPI: in the order of the
 * MPI reduction, with an MPI_Op that adds in f32 and rounds). With two
 * replicas the two orders are the same, so local and MPI runs agree bit for
 * bit. The error bound is in mpcl_dist_compression_bound. */
#ifndef MPCL_DIST_H
#define MPCL_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mpcl/model.h"
#include "mpcl/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

#define MPCL_DIST_MAX_LOCAL 16

typedef enum mpcl_grad_compression {
    MPCL_GRAD_COMPRESSION_NONE,
    MPCL_GRAD_COMPRESSION_FP16,
    MPCL_GRAD_COMPRESSION_BF16,
} mpcl_grad_compression;

/* "none", "fp16", "bf16"; and back (false for an unknown name). */
const char *mpcl_grad_compression_name(mpcl_grad_compression c);
bool mpcl_grad_compression_parse(const char *name, mpcl_grad_compression *out);

typedef struct mpcl_dist mpcl_dist;

/* A local communicator of `replicas` (1 to MPCL_DIST_MAX_LOCAL) replicas in
 * this process. */
mpcl_status mpcl_dist_create_local(size_t replicas, mpcl_grad_compression c, mpcl_dist **out);

/* Whether libmpcl was built with MPI, and whether this process was started by
 * an MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set): MPI is
 * initialised only then, so the plain tools never need mpirun. */
bool mpcl_dist_mpi_built(void);
bool mpcl_dist_mpi_launched(void);

/* Initialises MPI (errors returned, not fatal) and makes a communicator of
 * one replica per process. MPCL_ERR_UNSUPPORTED without MPI. */
mpcl_status mpcl_dist_create_mpi(mpcl_grad_compression c, mpcl_dist **out);

/* The longest an MPI rank waits in one collective for the others, in
 * seconds, before it ends the job (MPI_Abort) naming the collective: a rank
 * that hangs without dying (stopped, stuck) would otherwise keep the others
 * waiting for ever. 0: no limit. Local communicators have no peers to wait
 * for and ignore it. */
#define MPCL_DIST_DEFAULT_TIMEOUT 300.0
void mpcl_dist_set_timeout(mpcl_dist *d, double seconds);

/* Finalises MPI for an MPI communicator. Accepts NULL. */
void mpcl_dist_destroy(mpcl_dist *d);

/* For a failing MPI rank: ends the whole job (MPI_Abort) so that no other
 * rank waits for it. Returns only for a local communicator (or NULL). */
void mpcl_dist_abort(mpcl_dist *d, int code);

bool mpcl_dist_is_mpi(const mpcl_dist *d);
/* Replicas in all, this process's rank (0 for local), replicas in this
 * process, the global index of this process's first replica, and the rank
 * among the processes on this machine (for the choice of device). */
size_t mpcl_dist_world_size(const mpcl_dist *d);
size_t mpcl_dist_rank(const mpcl_dist *d);
size_t mpcl_dist_local_replicas(const mpcl_dist *d);
size_t mpcl_dist_first_replica(const mpcl_dist *d);
size_t mpcl_dist_local_rank(const mpcl_dist *d);
mpcl_grad_compression mpcl_dist_compression(const mpcl_dist *d);

/* Replica r's slice of a global batch of B rows: rows [*first, *first +
 * *rows) of it. The first B % world replicas take one row more than the
 * others, in replica order. */
void mpcl_dist_slice(const mpcl_dist *d, size_t replica, size_t B, size_t *first, size_t *rows);

/* Sums the gradient arenas of models[0 .. local replicas) (this process's
 * replicas, in order, all of one plan and shape) over every replica, and
 * leaves the sum in each. Blocking. */
mpcl_status mpcl_dist_allreduce_grads(mpcl_dist *d, mpcl_model *const *models);

/* Bytes one replica contributes to one gradient all-reduce: arena elements
 * times 4 (f32) or 2 (compressed). A ring all-reduce moves 2 (N-1)/N times
 * this over each link. */
size_t mpcl_dist_allreduce_bytes(const mpcl_dist *d, const mpcl_model *m);

/* Sums of n doubles over the processes (in place); local: nothing to do. */
mpcl_status mpcl_dist_sum_f64(mpcl_dist *d, mpcl_context *ctx, double *values, size_t n);

/* Process p's `bytes` bytes of `mine` into all + p * bytes, for every
 * process (local: the one copy). For the banner's list of devices. */
mpcl_status mpcl_dist_allgather(mpcl_dist *d, mpcl_context *ctx, const void *mine, size_t bytes,
                                void *all);

/* Time spent in mpcl_dist_allreduce_grads (host staging and transport,
 * seconds), and how many calls. */
double mpcl_dist_allreduce_seconds(const mpcl_dist *d);
uint64_t mpcl_dist_allreduce_calls(const mpcl_dist *d);

/* Reads and resets the training statistics of this process's replicas and
 * sums them over every replica (loss_sum, metric_sum, terms, samples; the
 * rest is replica 0's, calls summed over this process). */
mpcl_status mpcl_dist_read_train_stats(mpcl_dist *d, mpcl_model *const *models,
                                       mpcl_loss_stats *out);

/* A checksum (FNV-1a, 64 bits) of a model's f32 master weights. Blocking. */
mpcl_status mpcl_dist_weights_checksum(mpcl_model *m, uint64_t *out);

/* Compares the master-weight checksums of every replica with replica 0's:
 * MPCL_ERR_DIST naming the first replica that differs. */
mpcl_status mpcl_dist_check_weights(mpcl_dist *d, mpcl_model *const *models);

/* The largest error the compressed sum of `replicas` contributions can have
 * against their exact sum, for contributions of absolute sum `abs_sum`
 * (sum over replicas of |g_r|) of one element: with u the unit roundoff of
 * the 16-bit format (2^-11 fp16, 2^-8 bf16; plus 2^-23, as a partial sum is
 * rounded to f32 before it is rounded to 16 bits) and t its smallest subnormal
 * spacing / 2 (2^-25 fp16, 2^-134 bf16), each of the `replicas` input
 * roundings and `replicas - 1` partial-sum roundings adds at most
 * u * (partial magnitude) + t, and every partial magnitude is at most
 * (1 + u)^k * abs_sum; so (2 replicas - 1) * (u (1 + u)^(2 replicas) * abs_sum + t).
 * Overflow to inf is outside the bound (the finite check skips that step). */
double mpcl_dist_compression_bound(mpcl_grad_compression c, size_t replicas, double abs_sum);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif
