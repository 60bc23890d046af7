/* MPCL_PROFILE=1: every kernel launch and CLBlast call is timed on the
 * device through OpenCL event profiling, summed by name, and printed to
 * stderr as a table when the context goes, largest first. Off (the default),
 * the queue has no profiling and launches pass no event: no cost.
 *
 * Events wait in a small buffer and are read when it fills (the queue is in
 * order, so waiting on the last waits on all), so profiling adds one host
 * wait per PENDING launches, not one per launch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

#define PENDING 256
#define NAMES 128

struct mpcl__profile {
    struct {
        const char *name; /* static strings of the launchers */
        cl_event event;
    } pending[PENDING];
    int pending_count;
    struct {
        const char *name;
        uint64_t calls, ns;
    } totals[NAMES];
    int name_count;
    uint64_t dropped; /* launches whose name did not fit the table */
};

bool mpcl__profile_requested(void) {
    return mpcl__env_value(MPCL_ENV_PROFILE) != NULL;
}

mpcl__profile *mpcl__profile_create(void) {
    return calloc(1, sizeof(mpcl__profile));
}

static void add(mpcl__profile *p, const char *name, uint64_t ns) {
    for (int i = 0; i < p->name_count; i++) {
        if (p->totals[i].name == name || strcmp(p->totals[i].name, name) == 0) {
            p->totals[i].calls++;
            p->totals[i].ns += ns;
            return;
        }
    }
    if (p->name_count == NAMES) {
        p->dropped++;
        return;
    }
    p->totals[p->name_count].name = name;
    p->totals[p->name_count].calls = 1;
    p->totals[p->name_count++].ns = ns;
}

static void drain(mpcl__profile *p) {
    if (p->pending_count == 0) return;
    clWaitForEvents(1, &p->pending[p->pending_count - 1].event);
    for (int i = 0; i < p->pending_count; i++) {
        cl_ulong start = 0, end = 0;
        cl_event e = p->pending[i].event;
        if (clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof start, &start, NULL) ==
                CL_SUCCESS &&
            clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL) ==
                CL_SUCCESS &&
            end >= start)
            add(p, p->pending[i].name, end - start);
        clReleaseEvent(e);
    }
    p->pending_count = 0;
}

cl_event *mpcl__profile_slot(mpcl_context *ctx) {
    mpcl__profile *p = ctx->profile;
    if (!p) return NULL;
    if (p->pending_count == PENDING) drain(p);
    p->pending[p->pending_count].event = NULL;
    return &p->pending[p->pending_count].event;
}

void mpcl__profile_record(mpcl_context *ctx, const char *name) {
    mpcl__profile *p = ctx->profile;
    if (!p || !p->pending[p->pending_count].event) return;
    p->pending[p->pending_count++].name = name;
}

static int by_time(const void *a, const void *b) {
    uint64_t x = ((const uint64_t *)a)[2], y = ((const uint64_t *)b)[2];
    return x < y ? 1 : x > y ? -1 : 0;
}

void mpcl__profile_report(mpcl__profile *p) {
    if (!p) return;
    drain(p);
    /* rows of (name index, calls, ns), sorted by time */
    uint64_t rows[NAMES][3], total = 0;
    for (int i = 0; i < p->name_count; i++) {
        rows[i][0] = (uint64_t)i;
        rows[i][1] = p->totals[i].calls;
        rows[i][2] = p->totals[i].ns;
        total += p->totals[i].ns;
    }
    qsort(rows, (size_t)p->name_count, sizeof rows[0], by_time);
    fprintf(stderr, "mpcl profile (MPCL_PROFILE): device time by kernel, %.1f ms in all\n",
            (double)total / 1e6);
    fprintf(stderr, "%-36s %9s %11s %10s %6s\n", "kernel", "calls", "total ms", "mean us", "share");
    for (int r = 0; r < p->name_count; r++) {
        uint64_t calls = rows[r][1], ns = rows[r][2];
        fprintf(stderr, "%-36s %9llu %11.1f %10.1f %5.1f%%\n", p->totals[rows[r][0]].name,
                (unsigned long long)calls, (double)ns / 1e6, (double)ns / 1e3 / (double)calls,
                total ? 100.0 * (double)ns / (double)total : 0.0);
    }
    if (p->dropped)
        fprintf(stderr, "(%llu launches under further names not counted)\n",
                (unsigned long long)p->dropped);
}

void mpcl__profile_destroy(mpcl__profile *p) {
    free(p);
}
