/* Data parallel: the communicator, the local back-end (host staging) and what
 * both back-ends share. See dist.h for the shape of a step. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parallel/parallel.h"

static const char *const COMPRESSION_NAME[] = {"none", "fp16", "bf16"};

const char *mpcl_grad_compression_name(mpcl_grad_compression c) {
    return (unsigned)c < 3 ? COMPRESSION_NAME[c] : "?";
}

bool mpcl_grad_compression_parse(const char *name, mpcl_grad_compression *out) {
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, COMPRESSION_NAME[i]) == 0) {
            *out = (mpcl_grad_compression)i;
            return true;
        }
    return false;
}

mpcl_dtype mpcl__dist_wire_dtype(mpcl_grad_compression c) {
    return c == MPCL_GRAD_COMPRESSION_BF16 ? MPCL_DTYPE_BF16 : MPCL_DTYPE_F16;
}

static mpcl_status check_compression(mpcl_grad_compression c) {
    if ((unsigned)c > MPCL_GRAD_COMPRESSION_BF16)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "gradient compression %d", (int)c);
    return MPCL_OK;
}

mpcl_status mpcl_dist_create_local(size_t replicas, mpcl_grad_compression c, mpcl_dist **out) {
    *out = NULL;
    if (replicas < 1 || replicas > MPCL_DIST_MAX_LOCAL)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%zu local replicas: 1 to %d", replicas,
                          MPCL_DIST_MAX_LOCAL);
    mpcl_status st = check_compression(c);
    if (st != MPCL_OK) return st;
    mpcl_dist *d = calloc(1, sizeof *d);
    if (!d) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "allocating a communicator");
    d->world = d->local = replicas;
    d->compression = c;
    *out = d;
    return MPCL_OK;
}

bool mpcl_dist_mpi_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

mpcl_status mpcl_dist_create_mpi(mpcl_grad_compression c, mpcl_dist **out) {
    *out = NULL;
    mpcl_status st = check_compression(c);
    if (st != MPCL_OK) return st;
    mpcl_dist *d = calloc(1, sizeof *d);
    if (!d) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "allocating a communicator");
    d->compression = c;
    d->local = 1;
    if ((st = mpcl__dist_mpi_init(d)) != MPCL_OK) {
        free(d);
        return st;
    }
    d->mpi = true;
    d->first = d->rank;
    *out = d;
    return MPCL_OK;
}

void mpcl_dist_destroy(mpcl_dist *d) {
    if (!d) return;
    if (d->mpi) mpcl__dist_mpi_finalize(d);
    free(d->sum);
    free(d->buf);
    free(d->wire);
    free(d);
}

void mpcl_dist_set_timeout(mpcl_dist *d, double seconds) {
    d->timeout_s = seconds > 0 ? seconds : 0;
}

void mpcl_dist_abort(mpcl_dist *d, int code) {
    if (d && d->mpi) mpcl__dist_mpi_abort(d, code);
}

bool mpcl_dist_is_mpi(const mpcl_dist *d) {
    return d->mpi;
}
size_t mpcl_dist_world_size(const mpcl_dist *d) {
    return d->world;
}
size_t mpcl_dist_rank(const mpcl_dist *d) {
    return d->rank;
}
size_t mpcl_dist_local_replicas(const mpcl_dist *d) {
    return d->local;
}
size_t mpcl_dist_first_replica(const mpcl_dist *d) {
    return d->first;
}
size_t mpcl_dist_local_rank(const mpcl_dist *d) {
    return d->local_rank;
}
mpcl_grad_compression mpcl_dist_compression(const mpcl_dist *d) {
    return d->compression;
}
double mpcl_dist_allreduce_seconds(const mpcl_dist *d) {
    return d->allreduce_seconds;
}
uint64_t mpcl_dist_allreduce_calls(const mpcl_dist *d) {
    return d->allreduce_calls;
}

void mpcl_dist_slice(const mpcl_dist *d, size_t replica, size_t B, size_t *first, size_t *rows) {
    size_t base = B / d->world, extra = B % d->world;
    *rows = base + (replica < extra);
    *first = replica * base + (replica < extra ? replica : extra);
}

size_t mpcl_dist_allreduce_bytes(const mpcl_dist *d, const mpcl_model *m) {
    size_t wire = d->compression == MPCL_GRAD_COMPRESSION_NONE ? 4 : 2;
    return mpcl_model_arena_elements(m) * wire;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static mpcl_status reserve(mpcl_dist *d, mpcl_context *ctx, size_t n) {
    if (n <= d->cap) return MPCL_OK;
    float *s = realloc(d->sum, n * sizeof *s), *b = s ? realloc(d->buf, n * sizeof *b) : NULL;
    if (s) d->sum = s;
    if (b) d->buf = b;
    uint16_t *w = b ? realloc(d->wire, n * sizeof *w) : NULL;
    if (w) d->wire = w;
    if (!w) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "staging %zu gradients", n);
    d->cap = n;
    return MPCL_OK;
}

/* v rounded to the wire's 16 bits and back, through d->wire. */
static void round_to_wire(mpcl_dist *d, float *v, size_t n) {
    mpcl_dtype wire = mpcl__dist_wire_dtype(d->compression);
    mpcl__f32_to_16bit_n(wire, v, d->wire, n);
    mpcl__16bit_to_f32_n(wire, d->wire, v, n);
}

/* A replica's gradients rounded to the wire's 16 bits, into d->wire: the
 * device rounds (mpcl_cast, as the host conversions do) where the arena is
 * stored in another dtype, so that half the bytes cross to the host and the
 * host converts nothing down. */
static mpcl_status download_wire(mpcl_dist *d, mpcl_model *m, size_t n) {
    mpcl_tensor *arena = mpcl_model_grad_arena(m), *t;
    mpcl_status st = mpcl__model_grad_wire(m, mpcl__dist_wire_dtype(d->compression), &t);
    if (st == MPCL_OK && t != arena) st = mpcl__cast(mpcl_model_context(m), t, arena, arena->dtype);
    return st == MPCL_OK ? mpcl_tensor_download_raw(t, d->wire, n * sizeof *d->wire) : st;
}

/* d->wire (the summed gradients in the wire's format) into a replica's
 * arena, widened or rounded on the device where it is stored in another
 * dtype (as the host's conversion through f32 would). */
static mpcl_status upload_wire(mpcl_dist *d, mpcl_model *m, size_t n) {
    mpcl_tensor *arena = mpcl_model_grad_arena(m), *t;
    mpcl_status st = mpcl__model_grad_wire(m, mpcl__dist_wire_dtype(d->compression), &t);
    if (st == MPCL_OK) st = mpcl_tensor_upload_raw(t, d->wire, n * sizeof *d->wire);
    return st == MPCL_OK && t != arena ? mpcl__cast(mpcl_model_context(m), arena, t, arena->dtype)
                                       : st;
}

/* The sum of this process's replicas in replica order: in f32 into d->sum,
 * or with compression into d->wire, each contribution rounded to 16 bits and
 * each partial sum rounded again (what the MPI reduction of 16-bit values
 * does, so that local and MPI runs of two replicas agree bit for bit). */
static mpcl_status local_sum(mpcl_dist *d, mpcl_model *const *models, size_t n) {
    bool compress = d->compression != MPCL_GRAD_COMPRESSION_NONE;
    mpcl_dtype wire = mpcl__dist_wire_dtype(d->compression);
    if (compress && d->local == 1) return download_wire(d, models[0], n);
    for (size_t r = 0; r < d->local; r++) {
        float *dst = r == 0 ? d->sum : d->buf;
        mpcl_status st = compress
                             ? download_wire(d, models[r], n)
                             : mpcl_tensor_download_f32(mpcl_model_grad_arena(models[r]), dst, n);
        if (st != MPCL_OK) return st;
        if (compress) mpcl__16bit_to_f32_n(wire, d->wire, dst, n);
        if (r == 0) continue;
        for (size_t i = 0; i < n; i++) d->sum[i] += d->buf[i];
        if (compress) round_to_wire(d, d->sum, n);
    }
    return MPCL_OK;
}

mpcl_status mpcl_dist_allreduce_grads(mpcl_dist *d, mpcl_model *const *models) {
    if (d->world == 1) return MPCL_OK;
    /* The clock starts once the backward passes are done, so that it counts
     * the all-reduce alone. */
    mpcl_status st = MPCL_OK;
    for (size_t r = 0; r < d->local && st == MPCL_OK; r++)
        st = mpcl_context_finish(mpcl_model_context(models[r]));
    if (st != MPCL_OK) return st;
    double t0 = now_s();
    mpcl_context *ctx = mpcl_model_context(models[0]);
    size_t n = mpcl_model_arena_elements(models[0]);
    for (size_t r = 1; r < d->local; r++)
        if (mpcl_model_arena_elements(models[r]) != n ||
            mpcl_model_plan(models[r])->storage != mpcl_model_plan(models[0])->storage)
            return MPCL_ERROR(ctx, MPCL_ERR_DIST,
                              "replica %zu has a gradient arena of %zu %s elements, replica 0 "
                              "%zu %s: not one model",
                              r, mpcl_model_arena_elements(models[r]),
                              mpcl_dtype_name(mpcl_model_plan(models[r])->storage), n,
                              mpcl_dtype_name(mpcl_model_plan(models[0])->storage));
    st = reserve(d, ctx, n);
    if (st == MPCL_OK) st = local_sum(d, models, n);
    bool compress = d->compression != MPCL_GRAD_COMPRESSION_NONE;
    if (st == MPCL_OK && d->mpi)
        st = compress ? mpcl__dist_mpi_sum_u16(d, ctx, d->wire, n)
                      : mpcl__dist_mpi_sum_f32(d, ctx, d->sum, n);
    for (size_t r = 0; r < d->local && st == MPCL_OK; r++)
        st = compress ? upload_wire(d, models[r], n)
                      : mpcl_tensor_upload_f32(mpcl_model_grad_arena(models[r]), d->sum, n);
    d->allreduce_seconds += now_s() - t0;
    d->allreduce_calls++;
    return st;
}

mpcl_status mpcl_dist_sum_f64(mpcl_dist *d, mpcl_context *ctx, double *values, size_t n) {
    return d->mpi ? mpcl__dist_mpi_sum_f64(d, ctx, values, n) : MPCL_OK;
}

mpcl_status mpcl_dist_allgather(mpcl_dist *d, mpcl_context *ctx, const void *mine, size_t bytes,
                                void *all) {
    if (d->mpi) return mpcl__dist_mpi_allgather(d, ctx, mine, bytes, all);
    memcpy(all, mine, bytes);
    return MPCL_OK;
}

mpcl_status mpcl_dist_read_train_stats(mpcl_dist *d, mpcl_model *const *models,
                                       mpcl_loss_stats *out) {
    double v[4] = {0, 0, 0, 0};
    for (size_t r = 0; r < d->local; r++) {
        mpcl_loss_stats s;
        mpcl_status st = mpcl_model_read_train_stats(models[r], &s, true);
        if (st != MPCL_OK) return st;
        if (r == 0)
            *out = s;
        else
            out->calls += s.calls;
        v[0] += s.loss_sum;
        v[1] += s.metric_sum;
        v[2] += (double)s.terms;
        v[3] += (double)s.samples;
    }
    mpcl_status st = mpcl_dist_sum_f64(d, mpcl_model_context(models[0]), v, 4);
    out->loss_sum = v[0];
    out->metric_sum = v[1];
    out->terms = (uint64_t)v[2];
    out->samples = (uint64_t)v[3];
    return st;
}

mpcl_status mpcl_dist_weights_checksum(mpcl_model *m, uint64_t *out) {
    uint64_t h = 0xcbf29ce484222325ull;
    mpcl_status st = MPCL_OK;
    for (size_t p = 0; p < mpcl_model_param_count(m) && st == MPCL_OK; p++) {
        size_t count = mpcl_model_param(m, p)->count;
        float *w = malloc(count * sizeof *w);
        if (!w)
            return MPCL_ERROR(mpcl_model_context(m), MPCL_ERR_OUT_OF_MEMORY, "checksum of %zu",
                              count);
        st = mpcl_model_read_param(m, p, MPCL_OPTIM_SLOT_MASTER, w, count);
        const unsigned char *b = (const unsigned char *)w;
        for (size_t i = 0; i < count * sizeof *w && st == MPCL_OK; i++)
            h = (h ^ b[i]) * 0x100000001b3ull;
        free(w);
    }
    *out = h;
    return st;
}

mpcl_status mpcl_dist_check_weights(mpcl_dist *d, mpcl_model *const *models) {
    mpcl_context *ctx = mpcl_model_context(models[0]);
    uint64_t local[MPCL_DIST_MAX_LOCAL];
    for (size_t r = 0; r < d->local; r++) {
        mpcl_status st = mpcl_dist_weights_checksum(models[r], &local[r]);
        if (st != MPCL_OK) return st;
    }
    for (size_t r = 1; r < d->local; r++)
        if (local[r] != local[0])
            return MPCL_ERROR(ctx, MPCL_ERR_DIST,
                              "replica %zu's master weights differ from replica 0's (checksum "
                              "%016llx, replica 0 %016llx): the replicas have drifted apart",
                              d->first + r, (unsigned long long)local[r],
                              (unsigned long long)local[0]);
    if (!d->mpi) return MPCL_OK;
    uint64_t *all = malloc(d->world * sizeof *all);
    if (!all) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "checksums of %zu ranks", d->world);
    mpcl_status st = mpcl__dist_mpi_allgather(d, ctx, &local[0], sizeof local[0], all);
    for (size_t p = 1; p < d->world && st == MPCL_OK; p++)
        if (all[p] != all[0])
            st = MPCL_ERROR(ctx, MPCL_ERR_DIST,
                            "replica %zu (rank %zu)'s master weights differ from replica 0's "
                            "(checksum %016llx, rank 0 %016llx): the replicas have drifted apart",
                            p, p, (unsigned long long)all[p], (unsigned long long)all[0]);
    free(all);
    return st;
}

double mpcl_dist_compression_bound(mpcl_grad_compression c, size_t replicas, double abs_sum) {
    if (c == MPCL_GRAD_COMPRESSION_NONE || replicas == 0) return 0.0;
    /* A partial sum is first rounded to f32, then to 16 bits: 2^-23 more. */
    double u =
        (c == MPCL_GRAD_COMPRESSION_FP16 ? ldexp(1.0, -11) : ldexp(1.0, -8)) + ldexp(1.0, -23);
    double t = c == MPCL_GRAD_COMPRESSION_FP16 ? ldexp(1.0, -25) : ldexp(1.0, -134);
    double k = (double)(2 * replicas - 1);
    return k * (u * pow(1.0 + u, (double)(2 * replicas)) * abs_sum + t);
}
