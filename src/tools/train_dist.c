/* mpcl-train's data parallel: which devices, their contexts, the
 * communicator, and what the banner and the JSON summary say about them. */
#include "train_dist.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* Every device of the platform that `selector` (NULL: $MPCL_DEVICE, then the
 * default rule) selects, as "P:D" ids in enumeration order. */
static mpcl_status platform_devices(const char *selector, char ids[][24], size_t *n) {
    mpcl_device_list *list = NULL;
    mpcl_status st = mpcl_device_list_create(MPCL_ENUM_DEFAULT, &list);
    if (st != MPCL_OK) return st;
    if (!selector) selector = getenv("MPCL_DEVICE");
    size_t chosen = 0;
    if ((st = mpcl_device_list_select(list, selector, &chosen)) == MPCL_OK) {
        const char *id = mpcl_device_list_get(list, chosen)->id;
        size_t plen = (size_t)(strchr(id, ':') - id) + 1;
        *n = 0;
        for (size_t i = 0; i < mpcl_device_list_count(list) && *n < MPCL_DIST_MAX_LOCAL; i++) {
            const char *other = mpcl_device_list_get(list, i)->id;
            if (strncmp(other, id, plen) == 0) snprintf(ids[(*n)++], 24, "%s", other);
        }
    }
    mpcl_device_list_destroy(list);
    return st;
}

static mpcl_status open_context(train_dist *td, const char *selector) {
    mpcl_context_params cp = mpcl_context_default_params();
    cp.device = selector;
    mpcl_status st = mpcl_context_create(&cp, &td->ctx[td->n]);
    if (st == MPCL_OK) td->n++;
    return st;
}

static mpcl_status open_devices(train_dist *td, const train_args *a) {
    char ids[MPCL_DIST_MAX_LOCAL][24];
    size_t count = 0;
    mpcl_status st = MPCL_OK;
    if (mpcl_dist_mpi_launched() && mpcl_dist_mpi_built()) {
        if (a->devices) {
            snprintf(td->err, sizeof td->err,
                     "--devices under mpirun: one device per rank (--device SEL chooses it; "
                     "by default the local rank's)");
            return MPCL_ERR_INVALID_ARG;
        }
        if ((st = mpcl_dist_create_mpi(a->grad_compression, &td->dist)) != MPCL_OK) return st;
        mpcl_dist_set_timeout(td->dist, a->dist_timeout);
        if (a->device) return open_context(td, a->device);
        if ((st = platform_devices(NULL, ids, &count)) != MPCL_OK) return st;
        return open_context(td, ids[mpcl_dist_local_rank(td->dist) % count]);
    }
    if (mpcl_dist_mpi_launched())
        fprintf(stderr,
                "mpcl-train: started by an MPI launcher, but this libmpcl was built "
                "without MPI: this process trains alone\n");
    if (!a->devices) return open_context(td, a->device);
    if (strcmp(a->devices, "all") == 0) {
        if ((st = platform_devices(a->device, ids, &count)) != MPCL_OK) return st;
    } else {
        for (const char *p = a->devices; *p; p += *p == ',') {
            size_t len = strcspn(p, ",");
            if (len == 0 || len >= sizeof ids[0] || count == MPCL_DIST_MAX_LOCAL) {
                snprintf(td->err, sizeof td->err,
                         "--devices %.64s: a comma-separated list of up to %d device "
                         "selectors (P:D), or all",
                         a->devices, MPCL_DIST_MAX_LOCAL);
                return MPCL_ERR_INVALID_ARG;
            }
            snprintf(ids[count++], sizeof ids[0], "%.*s", (int)len, p);
            p += len;
        }
    }
    for (size_t i = 0; i < count && st == MPCL_OK; i++) st = open_context(td, ids[i]);
    if (st == MPCL_OK) st = mpcl_dist_create_local(count, a->grad_compression, &td->dist);
    return st;
}

/* A data-parallel flag that would change nothing is a mistake to say, not a
 * setting to ignore: compression needs an all-reduce (two replicas or more),
 * the timeout MPI ranks to wait for. */
static mpcl_status check_dist_flags(train_dist *td, const train_args *a) {
    size_t world = td->dist ? mpcl_dist_world_size(td->dist) : 1;
    bool mpi = td->dist && mpcl_dist_is_mpi(td->dist);
    if (a->grad_compression != MPCL_GRAD_COMPRESSION_NONE && world == 1) {
        snprintf(td->err, sizeof td->err,
                 "--grad-compression %s: this run has one replica, so no gradients are summed "
                 "(it needs --devices with two devices or more, or mpirun -np 2 or more)",
                 mpcl_grad_compression_name(a->grad_compression));
        return MPCL_ERR_INVALID_ARG;
    }
    if (a->dist_timeout_set && !mpi) {
        snprintf(td->err, sizeof td->err,
                 "--dist-timeout: this process was not started by mpirun%s, so it has no "
                 "MPI rank to wait for",
                 mpcl_dist_mpi_built() ? "" : " (or libmpcl was built without MPI)");
        return MPCL_ERR_INVALID_ARG;
    }
    return MPCL_OK;
}

mpcl_status train_dist_open(train_dist *td, const train_args *a) {
    memset(td, 0, sizeof *td);
    mpcl_status st = open_devices(td, a);
    if (st == MPCL_OK) st = check_dist_flags(td, a);
    size_t world = td->dist ? mpcl_dist_world_size(td->dist) : 1;
    if (st == MPCL_OK && !(td->names = calloc(world, sizeof *td->names))) {
        snprintf(td->err, sizeof td->err, "out of memory");
        st = MPCL_ERR_OUT_OF_MEMORY;
    }
    for (size_t r = 0; r < td->n && st == MPCL_OK; r++) {
        const mpcl_device_info *dev = mpcl_context_device(td->ctx[r]);
        snprintf(td->names[r], sizeof td->names[r], "%.23s %.70s", dev->id, dev->name);
    }
    if (st == MPCL_OK && td->dist && mpcl_dist_is_mpi(td->dist)) {
        char mine[96];
        memcpy(mine, td->names[0], sizeof mine);
        st = mpcl_dist_allgather(td->dist, td->ctx[0], mine, sizeof mine, td->names);
    }
    if (st != MPCL_OK) {
        /* The message outlives the cleanup: in td->err or on the thread. */
        if (!td->err[0]) snprintf(td->err, sizeof td->err, "%s", mpcl_errmsg());
        if (td->dist && mpcl_dist_is_mpi(td->dist)) {
            fprintf(stderr, "mpcl-train: rank %zu: %s; ending the MPI job\n",
                    mpcl_dist_rank(td->dist), td->err);
            mpcl_dist_abort(td->dist, 1);
        }
        train_dist_close(td);
    }
    return st;
}

void train_dist_close(train_dist *td) {
    for (size_t r = 0; r < td->n; r++) mpcl_context_destroy(td->ctx[r]);
    mpcl_dist_destroy(td->dist);
    free(td->names);
    td->dist = NULL;
    td->names = NULL;
    td->n = 0;
}

mpcl_status train_dist_agree_signal(train_dist *td, int mine, int *agreed) {
    double got[2] = {mine == SIGINT, mine == SIGTERM};
    mpcl_status st = td->dist ? mpcl_dist_sum_f64(td->dist, td->ctx[0], got, 2) : MPCL_OK;
    *agreed = got[0] > 0 ? SIGINT : got[1] > 0 ? SIGTERM : 0;
    return st;
}

bool train_dist_leader(const train_dist *td) {
    return !td->dist || mpcl_dist_rank(td->dist) == 0;
}

void train_dist_print(FILE *h, const train_dist *td, const mpcl_trainer *tr) {
    if (!td->dist) return;
    size_t world = mpcl_dist_world_size(td->dist);
    fprintf(h, "replicas  %zu (%s), gradients all-reduced as %s:", world,
            mpcl_dist_is_mpi(td->dist) ? "MPI, one per rank" : "local, one process",
            mpcl_dist_compression(td->dist) == MPCL_GRAD_COMPRESSION_NONE
                ? "f32"
                : mpcl_grad_compression_name(mpcl_dist_compression(td->dist)));
    for (size_t r = 0; r < world; r++) fprintf(h, "%s %s", r ? "," : "", td->names[r]);
    fputc('\n', h);
    if (*mpcl_trainer_plan_note(tr)) fprintf(h, "          plan: %s\n", mpcl_trainer_plan_note(tr));
}

void train_dist_rates(const train_dist *td, const mpcl_train_summary *s, double *all) {
    size_t world = td->dist ? mpcl_dist_world_size(td->dist) : 1;
    memset(all, 0, world * sizeof *all);
    /* Local replicas step together, each on its share of every batch. */
    for (size_t r = 0; r < td->n; r++)
        all[(td->dist ? mpcl_dist_first_replica(td->dist) : 0) + r] =
            s->replica_samples_per_s / (double)td->n;
    if (td->dist) mpcl_dist_sum_f64(td->dist, td->ctx[0], all, world);
}

void train_dist_json(jsonw *w, const train_dist *td, const mpcl_train_summary *s,
                     const double *rates) {
    jsonw_kv_uint(w, "world_size", s->world_size);
    jsonw_key(w, "replicas");
    jsonw_array_begin(w);
    for (size_t r = 0; r < s->world_size; r++) {
        jsonw_object_begin(w);
        jsonw_kv_string(w, "device", td->names[r]);
        jsonw_kv_number(w, "samples_per_s", rates[r]);
        jsonw_object_end(w);
    }
    jsonw_array_end(w);
    jsonw_kv_uint(w, "allreduce_bytes_per_step", s->allreduce_bytes_per_step);
    jsonw_kv_number(w, "allreduce_seconds", s->allreduce_seconds);
}
