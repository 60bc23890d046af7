/* TiedLMHead: GPT-2's language-model head, whose weights are the token
 * embedding's. A sequence (T, C) gives logits (T, V) = h wte^T, wte the
 * [V, C] token_embeddings row of the model's token_pos_embedding: the head
 * adds no row. Its backward gives d_h = dlogits wte and writes its part of
 * d_wte, dlogits^T h; it runs before the embedding's backward, which adds
 * its own part (mpcl__params_share), so the optimizer, checkpoints and
 * parameter counts see wte once. Both products are GEMMs through the
 * model's GEMM path, on the views of the arenas in the storage dtype.
 *
 * Over a large vocabulary the logits outweigh the rest of the model's
 * activations (GPT-2's 50,257 a position: 823 MB in f32 for 4 x 1024
 * tokens, twice over with their gradient), so the head can fuse the loss
 * instead (forward_loss): a chunk of rows at a time goes through the
 * logits, the loss and its gradient, d_wte and d_h, and only a chunk's
 * logits exist at once. It does so where that takes less memory than the
 * whole logits (MPCL_LM_HEAD forces either way). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "runtime/runtime.h"

static const char TIED_SUFFIX[] = ".token_embeddings";

/* A chunk's logits in f32 stay within this on CPUs (GPT-2's vocabulary:
 * 83 rows). */
#define HEAD_CHUNK_BYTES ((size_t)16 << 20)
/* Elsewhere within this fraction of the device's memory (GPT-2's: some
 * 11,000 rows on a 141 GB GPU, more than a batch of 8 x 1024 tokens, which
 * then keeps its whole logits). Each chunk reads and writes the sum of
 * d_wte ([V, C] f32: 154 MB for GPT-2) for its 6 n V C flops: at 83 rows
 * that traffic would take a GPU as long as the chunk's GEMMs at 300
 * TFLOP/s, and 83 rows fill a matrix engine's tiles poorly. */
#define HEAD_CHUNK_MEMORY_FRACTION 64

typedef struct head {
    size_t row, writer; /* the shared row, and the head's place among its writers */
    size_t V, C;
    bool add;           /* a layer declared above it wrote d_wte first */
    mpcl_tensor *wte;   /* [V, C] view of the working arena (storage) */
    mpcl_tensor *d_wte; /* [V, C] view of the gradient arena */
    /* The fused loss (L->fuses_loss): rows a chunk takes, and its tensors. */
    size_t chunk;
    mpcl_tensor *x_c, *dx_c;           /* [chunk, C] storage: its input and d_h */
    mpcl_tensor *logits_c, *dlogits_c; /* [chunk, V] storage */
    mpcl_tensor *targets_c;            /* shaped as the first call's targets need */
    /* [V, C] f32: d_wte summed over the chunks and rounded once to a 16-bit
     * storage, where the GEMM path writes f32 (NULL otherwise: f32 storage,
     * or HGEMM, which sums in f16 anyway). */
    mpcl_tensor *d_wte_sum;
    /* [C, V] storage: wte^T, once per batch, where the GEMM would
     * transpose wte into its workspace at every chunk's logits
     * (mpcl__gemm_stages_bt: 80 ms a chunk for GPT-2's wte on PoCL); NULL
     * where it reads wte^T as it is. */
    mpcl_tensor *wte_t;
} head;

/* Whether a row's name ends in ".token_embeddings". */
static bool is_token_embeddings(const mpcl_param_info *r) {
    size_t n = strlen(r->name), k = sizeof TIED_SUFFIX - 1;
    return n > k && strcmp(r->name + n - k, TIED_SUFFIX) == 0;
}

/* The one row named "*.token_embeddings" in the params table. */
static mpcl_status find_token_embeddings(mpcl_context *ctx, const char *layer,
                                         const mpcl__param_table *t, size_t *row) {
    size_t found = 0;
    for (size_t i = 0; i < t->count; i++)
        if (is_token_embeddings(&t->rows[i])) {
            *row = i;
            found++;
        }
    if (found == 1) return MPCL_OK;
    return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                      "%s uses the token embedding's weights: it needs one token_pos_embedding "
                      "layer first (the model has %zu)",
                      layer, found);
}

static mpcl_status head_declare(mpcl__layer *L, mpcl__tables *t) {
    mpcl_context *ctx = L->env->ctx;
    char layer[MPCL__LAYER_NAME_MAX];
    mpcl__layer_name(layer, sizeof layer, L);
    TRY(mpcl__require_sequence(L));
    size_t row = 0;
    TRY(find_token_embeddings(ctx, layer, &t->params, &row));
    const mpcl_param_info *r = &t->params.rows[row];
    size_t T = L->in_shape[0], C = L->in_shape[1];
    if (r->shape[1] != C)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "%s: its input has %zu channels; %s is [%zu, %zu]", layer, C, r->name,
                          r->shape[0], r->shape[1]);
    head *h = calloc(1, sizeof *h);
    if (!h) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating %s", layer);
    L->state = h;
    *h = (head){.row = row, .V = r->shape[0], .C = C};
    mpcl__params_share(&t->params, row, &h->writer);
    size_t out[2] = {T, h->V};
    mpcl__layer_set_output(L, 2, out);
    return MPCL_OK;
}

/* Whether d_wte is summed over the chunks in an f32 tensor. */
static bool sums_in_f32(const mpcl__layer_env *env) {
    return mpcl__gemm_f32_c_of_16_bit(env->gemm, env->storage);
}

/* Whether the fused loss keeps wte^T (see head.wte_t). */
static bool keeps_wte_t(const head *h, const mpcl__layer_env *env, size_t chunk) {
    return mpcl__gemm_stages_bt(env->ctx, env->gemm, env->storage, chunk, h->V, h->C);
}

/* Device bytes of the fused loss's tensors for chunks of `chunk` rows. */
static double fused_bytes(const head *h, const mpcl__layer_env *env, size_t chunk) {
    double e = (double)mpcl_dtype_size(env->storage), vc = (double)h->V * (double)h->C;
    return 2.0 * (double)chunk * (double)(h->V + h->C) * e +
           (sums_in_f32(env) ? vc * sizeof(float) : 0.0) +
           (keeps_wte_t(h, env, chunk) ? vc * e : 0.0);
}

/* The most bytes of f32 logits a chunk takes on ctx's device (without a
 * context, a model declared offline: a CPU's), within one allocation (the
 * whole logits, where they fit in a chunk, are one tensor). */
static size_t chunk_bytes(mpcl_context *ctx) {
    if (!ctx) return HEAD_CHUNK_BYTES;
    const mpcl_device_info *d = mpcl_context_device(ctx);
    if (d->type == MPCL_DEVICE_TYPE_CPU) return HEAD_CHUNK_BYTES;
    uint64_t share = d->global_mem_bytes / HEAD_CHUNK_MEMORY_FRACTION;
    if (share > d->max_alloc_bytes) share = d->max_alloc_bytes;
    return share > HEAD_CHUNK_BYTES && share < SIZE_MAX ? (size_t)share : HEAD_CHUNK_BYTES;
}

/* The rows of a chunk of the fused loss; 0 where the head keeps the whole
 * logits: the default where chunks would not take less memory, or a batch
 * of one chunk. MPCL_LM_HEAD=chunked takes at most a third of the rows. */
static size_t chunk_rows(const mpcl__layer *L, const head *h) {
    const char *mode = mpcl__env_value(MPCL_ENV_LM_HEAD);
    size_t rows = L->env->max_batch * L->in_shape[0];
    size_t chunk = chunk_bytes(L->env->ctx) / (h->V * sizeof(float));
    if (chunk == 0) chunk = 1;
    if (mode && strcmp(mode, "whole") == 0) return 0;
    if (mode && chunk > (rows + 2) / 3) chunk = (rows + 2) / 3;
    if (chunk >= rows) return 0;
    if (!mode && fused_bytes(h, L->env, chunk) >= mpcl__layer_io_bytes(L)) return 0;
    return chunk;
}

static mpcl_status head_create(mpcl__layer *L, const mpcl__tables *t, const mpcl__arenas *a) {
    head *h = L->state;
    const mpcl__layer_env *env = L->env;
    size_t off = t->params.rows[h->row].offset;
    h->add = mpcl__params_grad_adds(&t->params, h->row, h->writer);
    TRY(mpcl__tensor_view(a->working, off, h->V, h->C, &h->wte));
    TRY(mpcl__tensor_view(a->grads, off, h->V, h->C, &h->d_wte));
    h->chunk = chunk_rows(L, h);
    if (!h->chunk) return mpcl__layer_create_io(L);
    L->fuses_loss = true;
    TRY(mpcl_tensor_create(env->ctx, env->storage, h->chunk, h->C, &h->x_c));
    TRY(mpcl_tensor_create(env->ctx, env->storage, h->chunk, h->C, &h->dx_c));
    TRY(mpcl_tensor_create(env->ctx, env->storage, h->chunk, h->V, &h->logits_c));
    TRY(mpcl_tensor_create(env->ctx, env->storage, h->chunk, h->V, &h->dlogits_c));
    if (sums_in_f32(env))
        TRY(mpcl_tensor_create(env->ctx, MPCL_DTYPE_F32, h->V, h->C, &h->d_wte_sum));
    if (keeps_wte_t(h, env, h->chunk))
        TRY(mpcl_tensor_create(env->ctx, env->storage, h->C, h->V, &h->wte_t));
    return MPCL_OK;
}

/* The output, made at the first prediction where the head fuses the loss. */
static mpcl_status head_output(mpcl__layer *L) {
    const mpcl__layer_env *env = L->env;
    if (L->output) return MPCL_OK;
    return mpcl_tensor_create(env->ctx, env->storage, env->max_batch, L->outputs, &L->output);
}

/* The first B samples of a [max_batch, T cols] tensor as [B T, cols]. */
static mpcl_tensor by_position(const mpcl_tensor *t, size_t B, size_t cols) {
    mpcl_tensor rows = mpcl__tensor_rows(t, B);
    return mpcl__tensor_by_last(&rows, cols);
}

/* logits = x wte^T: rows of C features to rows of V logits. */
static mpcl_status logits_of(const mpcl__layer *L, const mpcl_tensor *x, mpcl_tensor *logits) {
    const head *h = L->state;
    return mpcl_gemm(L->env->ctx, L->env->gemm, false, true, 1.0f, x, h->wte, 0.0f, logits);
}

static mpcl_status head_forward(mpcl__layer *L, const mpcl_tensor *in, bool training) {
    (void)training;
    TRY(head_output(L));
    head *h = L->state;
    size_t B = in->rows;
    mpcl_tensor x = by_position(in, B, h->C), logits = by_position(L->output, B, h->V);
    return logits_of(L, &x, &logits);
}

/* One position's row in, its logits into the output's first row. */
static mpcl_status head_forward_step(mpcl__layer *L, const mpcl_tensor *in, size_t position) {
    (void)position;
    TRY(head_output(L));
    mpcl_tensor logits = mpcl__layer_step_row(L);
    return logits_of(L, in, &logits);
}

static mpcl_status head_backward(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in) {
    head *h = L->state;
    const mpcl__layer_env *env = L->env;
    size_t B = in->rows;
    mpcl_tensor x = by_position(in, B, h->C), dlogits = by_position(L->d_output, B, h->V);
    TRY(mpcl_gemm(env->ctx, env->gemm, true, false, 1.0f, &dlogits, &x, h->add ? 1.0f : 0.0f,
                  h->d_wte));
    if (!d_in) return MPCL_OK;
    mpcl_tensor dx = by_position(d_in, B, h->C);
    return mpcl_gemm(env->ctx, env->gemm, false, false, 1.0f, &dlogits, h->wte, 0.0f, &dx);
}

/* The chunk's targets tensor, shaped as these targets' rows need. */
static mpcl_status chunk_targets(mpcl__layer *L, const mpcl_tensor *targets) {
    head *h = L->state;
    mpcl_tensor *t = h->targets_c;
    if (t && t->dtype == targets->dtype && t->cols == targets->cols) return MPCL_OK;
    mpcl_tensor_destroy(t);
    h->targets_c = NULL;
    return mpcl_tensor_create(L->env->ctx, targets->dtype, h->chunk, targets->cols, &h->targets_c);
}

/* The loss over [B T] rows of C features, a chunk of rows at a time. Each
 * chunk's rows are copied in and out, so a chunk may start anywhere (a
 * sub-buffer's origin must be aligned). Training: the chunk's gradient,
 * then d_wte (the head's part: overwritten by the first chunk unless a
 * layer above wrote it first; summed in f32 where d_wte_sum exists, then
 * rounded once) and its rows of d_in. */
static mpcl_status head_forward_loss(mpcl__layer *L, const mpcl_tensor *in,
                                     const mpcl__loss_job *job, mpcl_tensor *d_in) {
    head *h = L->state;
    const mpcl__layer_env *env = L->env;
    mpcl_context *ctx = env->ctx;
    size_t B = in->rows, rows = B * L->in_shape[0];
    mpcl_tensor x = by_position(in, B, h->C), dx = d_in ? by_position(d_in, B, h->C) : x;
    const mpcl_tensor *y = job->targets;
    TRY(chunk_targets(L, y));
    mpcl_tensor *sum = h->d_wte_sum ? h->d_wte_sum : h->d_wte;
    if (d_in && h->d_wte_sum && h->add) TRY(mpcl_cast(ctx, sum, h->d_wte));
    if (h->wte_t) TRY(mpcl__transpose(ctx, h->wte_t, h->wte, 1));
    for (size_t r0 = 0; r0 < rows; r0 += h->chunk) {
        size_t n = rows - r0 < h->chunk ? rows - r0 : h->chunk;
        bool last = r0 + n == rows;
        mpcl_tensor x_c = mpcl__tensor_rows(h->x_c, n), y_c = mpcl__tensor_rows(h->targets_c, n);
        mpcl_tensor logits = mpcl__tensor_rows(h->logits_c, n);
        mpcl_tensor dlogits = mpcl__tensor_rows(h->dlogits_c, n);
        TRY(mpcl__tensor_copy_range(&x_c, 0, &x, r0 * h->C, n * h->C));
        TRY(mpcl__tensor_copy_range(&y_c, 0, y, r0 * y->cols, n * y->cols));
        if (h->wte_t)
            TRY(mpcl_gemm(ctx, env->gemm, false, false, 1.0f, &x_c, h->wte_t, 0.0f, &logits));
        else
            TRY(logits_of(L, &x_c, &logits));
        TRY(mpcl__loss_chunk(ctx, job->loss, job->stats, d_in ? &dlogits : NULL, &logits, &y_c,
                             job->scale, job->divisor, r0, last));
        if (!d_in) continue;
        float beta = r0 > 0 || h->add ? 1.0f : 0.0f;
        TRY(mpcl_gemm(ctx, env->gemm, true, false, 1.0f, &dlogits, &x_c, beta, sum));
        mpcl_tensor dx_c = mpcl__tensor_rows(h->dx_c, n);
        TRY(mpcl_gemm(ctx, env->gemm, false, false, 1.0f, &dlogits, h->wte, 0.0f, &dx_c));
        TRY(mpcl__tensor_copy_range(&dx, r0 * h->C, &dx_c, 0, n * h->C));
    }
    return d_in && h->d_wte_sum ? mpcl_cast(ctx, h->d_wte, h->d_wte_sum) : MPCL_OK;
}

static void head_destroy(mpcl__layer *L) {
    head *h = L->state;
    if (!h) return;
    mpcl_tensor *owned[] = {h->wte,       h->d_wte,     h->x_c,       h->dx_c, h->logits_c,
                            h->dlogits_c, h->targets_c, h->d_wte_sum, h->wte_t};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) mpcl_tensor_destroy(owned[i]);
    free(h);
    L->state = NULL;
}

static double head_activation_bytes(const mpcl__layer *L, const mpcl__layer_env *env) {
    const head *h = L->state;
    size_t chunk = chunk_rows(L, h);
    return chunk ? fused_bytes(h, env, chunk) : mpcl__layer_io_bytes(L);
}

const mpcl__layer_kind mpcl__tied_lm_head_layer = {
    .name = "tied_lm_head",
    .keras_name = "TiedLMHead",
    .declare = head_declare,
    .activation_bytes = head_activation_bytes,
    .create = head_create,
    .forward = head_forward,
    .forward_step = head_forward_step,
    .backward = head_backward,
    .forward_loss = head_forward_loss,
    .destroy = head_destroy,
};
