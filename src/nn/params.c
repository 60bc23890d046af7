/* The parameter table: names, shapes and aligned offsets into the arenas. */
#include <stdio.h>
#include <string.h>

#include "nn/nn.h"

static size_t round_up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

/* The least multiple of a that b divides too. */
static size_t common_multiple(size_t a, size_t b) {
    size_t m = a;
    while (m % b != 0) m += a;
    return m;
}

void mpcl__params_init(mpcl__param_table *t, size_t align_bytes) {
    memset(t, 0, sizeof *t);
    /* Every row also starts on an optimizer decay chunk, so that a chunk's
     * flag (mpcl_optimizer_write_decay) is one row's. Every device we know
     * already aligns to more (64 elements on PoCL, 256 on NVIDIA). */
    t->align = common_multiple(align_bytes / 2 > 0 ? align_bytes / 2 : 1, MPCL_OPTIM_DECAY_CHUNK);
}

mpcl_status mpcl__params_add(mpcl_context *ctx, mpcl__param_table *t, const char *name, size_t rank,
                             const size_t *shape, mpcl__param_init init, size_t *index) {
    if (t->count == MPCL__MAX_PARAMS)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "parameter %s: a model holds at most %d parameter tensors", name,
                          MPCL__MAX_PARAMS);
    if (rank == 0 || rank > MPCL_MAX_RANK)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "parameter %s: rank %zu (1 to %d)", name, rank,
                          MPCL_MAX_RANK);
    mpcl_param_info *r = &t->rows[t->count];
    memset(r, 0, sizeof *r);
    if ((size_t)snprintf(r->name, sizeof r->name, "%s", name) >= sizeof r->name)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "parameter name %s is too long", name);
    size_t count = 1;
    for (size_t d = 0; d < rank; d++) {
        if (shape[d] == 0 || count > SIZE_MAX / shape[d])
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "parameter %s: dimension %zu is %zu", name,
                              d, shape[d]);
        r->shape[d] = shape[d];
        count *= shape[d];
    }
    r->rank = rank;
    r->count = count;
    t->init[t->count] = init;
    t->grad_writers[t->count] = 1;
    r->offset = t->count
                    ? round_up(t->rows[t->count - 1].offset + t->rows[t->count - 1].count, t->align)
                    : 0;
    /* Whole optimizer granules: the update is then one launch. Both are
     * powers of two, so the larger is a multiple of the other. */
    size_t granule = t->align > MPCL__OPTIM_GRANULE ? t->align : MPCL__OPTIM_GRANULE;
    t->total = round_up(r->offset + count, granule);
    if (index) *index = t->count;
    t->count++;
    return MPCL_OK;
}

void mpcl__params_share(mpcl__param_table *t, size_t row, size_t *writer) {
    *writer = t->grad_writers[row]++;
}

bool mpcl__params_grad_adds(const mpcl__param_table *t, size_t row, size_t writer) {
    return writer + 1 < t->grad_writers[row];
}
