/* mpcl-train's data parallel: the devices of --devices, or of this rank under
 * mpirun, their contexts and the communicator; the banner lines and the JSON
 * fields they add. Kept apart from mpcl-train.c so that the tool's main only
 * calls in. */
#ifndef MPCL_TOOLS_TRAIN_DIST_H
#define MPCL_TOOLS_TRAIN_DIST_H

#include <stdio.h>

#include "jsonw.h"
#include "mpcl/mpcl.h"
#include "train_args.h"

typedef struct train_dist {
    mpcl_dist *dist;                        /* NULL: one device, no MPI */
    mpcl_context *ctx[MPCL_DIST_MAX_LOCAL]; /* this process's replicas' contexts */
    size_t n;                               /* how many */
    char (*names)[96];                      /* [world] "P:D name" of every replica */
    char err[1024];                         /* why train_dist_open failed */
} train_dist;

/* Under mpirun (and built with MPI): one replica per rank on the device
 * --device names, else the device of the local rank's index among the
 * devices of the default device's platform. With --devices: those devices
 * (all: every device of the default device's platform), one replica each.
 * Else one context as before (--device). On failure (MPCL_ERR_NO_DEVICE
 * etc.) td->err says why and everything is closed; a failing MPI rank ends
 * the job. */
mpcl_status train_dist_open(train_dist *td, const train_args *a);
void train_dist_close(train_dist *td);

/* The stop signal of the job from each rank's (0, SIGINT or SIGTERM):
 * SIGINT if any rank got it, else SIGTERM if any did, else 0. Under MPI a
 * collective (it returns once every rank has called it), so that every rank
 * takes the same stop with the same exit status. */
mpcl_status train_dist_agree_signal(train_dist *td, int mine, int *agreed);

/* Whether this process prints and writes files (rank 0, or not MPI). */
bool train_dist_leader(const train_dist *td);

/* The banner's line: world size, the replicas' devices, and the plan note. */
void train_dist_print(FILE *h, const train_dist *td, const mpcl_trainer *tr);

/* world_size, replicas [{device, samples_per_s}], allreduce_bytes_per_step
 * and allreduce_seconds; rates from train_dist_rates. */
void train_dist_json(jsonw *w, const train_dist *td, const mpcl_train_summary *s,
                     const double *rates);

/* Every rank's share of the samples per second into all[world] (collective). */
void train_dist_rates(const train_dist *td, const mpcl_train_summary *s, double *all);

#endif
