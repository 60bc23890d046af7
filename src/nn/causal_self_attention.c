/* CausalSelfAttention: GPT-2's masked multi-head self-attention over a
 * (T, C) sequence. qkv = x W_attn + b_attn (c_attn, [C, 3C]: q, k and v are
 * its consecutive C-wide thirds, head h their channels h hs .. (h + 1) hs - 1
 * with hs = C / num_heads); per head, position t attends to the positions
 * t' <= t with softmax(q k^T / sqrt(hs)); the heads' outputs y (T, C) give
 * out = y W_proj + b_proj (c_proj, [C, C]). The kernels are Keras Dense's
 * and GPT-2's [in, out] layout. The projections are GEMMs through the
 * model's GEMM path; the attention (cl/attention.cl, launched here: the
 * layer is its one caller) computes in f32 and keeps the probabilities in
 * f32, B H T T of them, for the backward, as llm.c does; qkv, y and their
 * gradients are in the storage dtype. Three layouts of the attention's
 * kernels (MPCL_ATTENTION: row, block or tile; unset, block on CPU devices
 * and tile elsewhere): a work-item per row (cl/attention.cl); a work-item
 * per block of rows of one head over operands packed per head in f32
 * (cl/attention_block.cl), which a CPU runs several times faster; or each
 * product as tiles of a work-group each with the softmax a work-group per
 * row (cl/attention_tile.cl), a GPU's shape. In f32 with head sizes of
 * whole 16-wide chunks the block layout reads q, k, v and dy in place
 * ("direct") and packs only the transposes of k and v. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"

static const mpcl__attr ATTN_ATTRS[] = {
    {"num_heads", MPCL_ATTR_COUNT, offsetof(mpcl_layer_spec, num_heads), NULL, 1, 1 << 16, false},
    {"use_bias", MPCL_ATTR_BOOL, offsetof(mpcl_layer_spec, use_bias), "true", 0, 0, false},
};

/* The two projections: c_attn (C -> 3C) and c_proj (C -> C). */
enum { C_ATTN, C_PROJ, PROJECTIONS };

typedef struct projection {
    size_t kernel_row;
    mpcl__bias_act bias; /* the bias only: the activation is the identity */
    mpcl_tensor *w;      /* [in, out] view of the working arena (storage) */
    mpcl_tensor *dw;     /* [in, out] view of the gradient arena */
} projection;

/* The block layout's operands, packed per head in f32
 * (mpcl_attention_pack_qkv and _dy): rows [max_batch H Tp, hsp] and
 * transposes [max_batch H hsp, Tp]; direct, the transposes alone. */
enum { PACK_Q, PACK_K, PACK_V, PACK_DY, PACK_KT, PACK_VT, PACKS };

/* The kernels' layouts, in MPCL_ATTENTION's order of names. */
typedef enum { LAYOUT_ROW, LAYOUT_BLOCK, LAYOUT_TILE } layout;

typedef struct attn {
    size_t T, C, H;
    layout layout;
    bool direct; /* block layout reading the rows in place: f32, hs % 16 == 0 */
    size_t Tp;   /* positions padded to the block layout's 16-wide chunks */
    size_t hsp;  /* head size padded likewise */
    projection proj[PROJECTIONS];
    mpcl_tensor *qkv, *dqkv;  /* [max_batch T, 3C] storage */
    mpcl_tensor *y, *dy;      /* [max_batch T, C] storage: the heads' outputs */
    mpcl_tensor *att;         /* [max_batch H T, att_ld] f32: the probabilities */
    mpcl_tensor *dscore;      /* [max_batch H T, att_ld] f32: the scores' gradient */
    mpcl_tensor *pack[PACKS]; /* block layout only */
} attn;

static bool is_block(const attn *a) {
    return a->layout == LAYOUT_BLOCK;
}

/* The row stride of att and dscore: the block layout pads rows to whole
 * 16-wide chunks. */
static size_t att_ld(const attn *a) {
    return is_block(a) ? a->Tp : a->T;
}

static size_t round_up_chunk(size_t n) {
    return (n + MPCL_ABI_ATTN_CHUNK - 1) / MPCL_ABI_ATTN_CHUNK * MPCL_ABI_ATTN_CHUNK;
}

/* The layout ctx's layer runs; without a context (a model declared
 * offline, to print or plan), the block layout unless MPCL_ATTENTION names
 * another: the memory estimate counts its packs. */
static layout layout_of(mpcl_context *ctx) {
    static const char *const names[] = {
        [LAYOUT_ROW] = "row", [LAYOUT_BLOCK] = "block", [LAYOUT_TILE] = "tile"};
    const char *v = mpcl__env_value(MPCL_ENV_ATTENTION); /* one of the names, or NULL */
    for (layout l = LAYOUT_ROW; v && l <= LAYOUT_TILE; l++)
        if (strcmp(v, names[l]) == 0) return l;
    return !ctx || mpcl_context_device(ctx)->type == MPCL_DEVICE_TYPE_CPU ? LAYOUT_BLOCK
                                                                          : LAYOUT_TILE;
}

/* Whether the block layout may read q, k, v and dy in place: f32 rows whose
 * heads are whole 16-wide chunks, so every vector load stays in its head. */
static bool direct_rows(const attn *a, mpcl_dtype storage) {
    return storage == MPCL_DTYPE_F32 && (a->C / a->H) % MPCL_ABI_ATTN_CHUNK == 0;
}

/* Whether pack i is used: the transposes always, the rows unless direct. */
static bool pack_used(const attn *a, int i) {
    return is_block(a) && (!a->direct || i == PACK_KT || i == PACK_VT);
}

static mpcl_status add_projection(mpcl__layer *L, mpcl__tables *t, const char *what, size_t in,
                                  size_t out, projection *p) {
    char layer[MPCL__LAYER_NAME_MAX], prefix[64], name[MPCL__ROW_NAME_BUF];
    mpcl__layer_name(layer, sizeof layer, L);
    snprintf(prefix, sizeof prefix, "%s.%s", layer, what);
    snprintf(name, sizeof name, "%s.kernel", prefix);
    size_t shape[2] = {in, out};
    TRY(mpcl__params_add(L->env->ctx, &t->params, name, 2, shape, L->kernel_init, &p->kernel_row));
    return mpcl__bias_act_add_rows(L->env->ctx, t, prefix, out, L->spec.use_bias, &p->bias);
}

static mpcl_status attn_declare(mpcl__layer *L, mpcl__tables *t) {
    mpcl_context *ctx = L->env->ctx;
    char layer[MPCL__LAYER_NAME_MAX];
    mpcl__layer_name(layer, sizeof layer, L);
    TRY(mpcl__require_sequence(L));
    size_t T = L->in_shape[0], C = L->in_shape[1], H = L->spec.num_heads;
    if (H == 0 || C % H != 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "%s: its %zu channels do not split into num_heads=%zu heads of equal "
                          "size",
                          layer, C, H);
    /* The kernels count the rows (b, h, t) in a uint (their offsets are size_t). */
    if ((double)L->env->max_batch * (double)H * (double)T > (double)UINT32_MAX)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE,
                          "%s: %zu samples of %zu heads by %zu positions are more attention rows "
                          "than its kernels count (2^32 - 1)",
                          layer, L->env->max_batch, H, T);
    attn *a = calloc(1, sizeof *a);
    if (!a) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating %s", layer);
    L->state = a;
    *a = (attn){.T = T, .C = C, .H = H, .Tp = round_up_chunk(T), .hsp = round_up_chunk(C / H)};
    mpcl__layer_set_output(L, L->in_rank, L->in_shape);
    TRY(add_projection(L, t, "c_attn", C, 3 * C, &a->proj[C_ATTN]));
    return add_projection(L, t, "c_proj", C, C, &a->proj[C_PROJ]);
}

static double attn_activation_bytes(const mpcl__layer *L, const mpcl__layer_env *env) {
    const attn *a = L->state;
    double positions = (double)env->max_batch * (double)a->T;
    double storage = 8.0 * positions * (double)a->C * (double)mpcl_dtype_size(env->storage);
    bool block = layout_of(env->ctx) == LAYOUT_BLOCK;
    double ld = (double)(block ? a->Tp : a->T);
    double probabilities = 2.0 * positions * (double)a->H * ld * sizeof(float);
    double packs = !block ? 0 : direct_rows(a, env->storage) ? 2 : PACKS;
    double packed = packs * (double)env->max_batch * (double)a->H * (double)a->Tp * (double)a->hsp *
                    sizeof(float);
    return mpcl__layer_io_bytes(L) + storage + probabilities + packed;
}

static mpcl_status create_projection(projection *p, const mpcl__layer_env *env,
                                     const mpcl__tables *t, const mpcl__arenas *ar, size_t in,
                                     size_t out, size_t rows) {
    size_t off = t->params.rows[p->kernel_row].offset;
    TRY(mpcl__tensor_view(ar->working, off, in, out, &p->w));
    TRY(mpcl__tensor_view(ar->grads, off, in, out, &p->dw));
    return mpcl__bias_act_create(&p->bias, env, t, ar, rows, MPCL_ACT_IDENTITY);
}

static mpcl_status attn_create(mpcl__layer *L, const mpcl__tables *t, const mpcl__arenas *ar) {
    attn *a = L->state;
    const mpcl__layer_env *env = L->env;
    mpcl_context *ctx = env->ctx;
    size_t positions = env->max_batch * a->T, C = a->C, rows = positions * a->H;
    a->layout = layout_of(ctx);
    a->direct = is_block(a) && direct_rows(a, env->storage);
    TRY(create_projection(&a->proj[C_ATTN], env, t, ar, C, 3 * C, positions));
    TRY(create_projection(&a->proj[C_PROJ], env, t, ar, C, C, positions));
    TRY(mpcl_tensor_create(ctx, env->storage, positions, 3 * C, &a->qkv));
    TRY(mpcl_tensor_create(ctx, env->storage, positions, 3 * C, &a->dqkv));
    TRY(mpcl_tensor_create(ctx, env->storage, positions, C, &a->y));
    TRY(mpcl_tensor_create(ctx, env->storage, positions, C, &a->dy));
    TRY(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, rows, att_ld(a), &a->att));
    TRY(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, rows, att_ld(a), &a->dscore));
    size_t heads = env->max_batch * a->H;
    for (int i = 0; i < PACKS; i++) {
        if (!pack_used(a, i)) continue;
        bool transposed = i == PACK_KT || i == PACK_VT;
        TRY(mpcl_tensor_create(ctx, MPCL_DTYPE_F32, heads * (transposed ? a->hsp : a->Tp),
                               transposed ? a->Tp : a->hsp, &a->pack[i]));
    }
    return mpcl__layer_create_io(L);
}

/* out = in W + b (+ addend, NULL: none). */
static mpcl_status project(projection *p, const mpcl__layer_env *env, const mpcl_tensor *in,
                           mpcl_tensor *out, const mpcl_tensor *addend) {
    return mpcl__bias_act_gemm_forward(&p->bias, env, in, p->w, out, false, addend);
}

/* From d_out (the gradient of out = in W + b): the bias's and W's
 * gradients, and d_in when it is not NULL. */
static mpcl_status project_backward(projection *p, const mpcl__layer_env *env,
                                    const mpcl_tensor *in, mpcl_tensor *d_out, mpcl_tensor *d_in) {
    TRY(mpcl__bias_act_backward(&p->bias, env->ctx, d_out, d_out));
    TRY(mpcl_gemm(env->ctx, env->gemm, true, false, 1.0f, in, d_out, 0.0f, p->dw));
    if (!d_in) return MPCL_OK;
    return mpcl_gemm(env->ctx, env->gemm, false, true, 1.0f, d_out, p->w, 0.0f, d_in);
}

/* 1 / sqrt(head size): the scores' scale. */
static float score_scale(const attn *a) {
    return (float)(1.0 / sqrt((double)(a->C / a->H)));
}

/* Sets a kernel's arguments after its tensors (from index `first`) and
 * launches it for a batch of B. Row layout: T, C, H, ld, the scores' scale
 * and the count of rows (b, h, t), one work-item each. Block layout: T, Tp,
 * C, H, hsp, ld, the scale and the count of blocks (b, h, block of
 * MPCL_ABI_ATTN_ROWS rows), then whether the rows are read in place. */
static mpcl_status launch(const attn *a, mpcl_context *ctx, cl_kernel k, const char *name,
                          cl_uint first, size_t B) {
    cl_uint T = (cl_uint)a->T, Tp = (cl_uint)a->Tp, C = (cl_uint)a->C, H = (cl_uint)a->H;
    cl_uint hsp = (cl_uint)a->hsp, ld = (cl_uint)att_ld(a);
    size_t per_head = is_block(a) ? (a->T + MPCL_ABI_ATTN_ROWS - 1) / MPCL_ABI_ATTN_ROWS : a->T;
    cl_uint items = (cl_uint)(B * a->H * per_head);
    float scale = score_scale(a);
    cl_uint i = first;
    TRY(mpcl__set_arg(ctx, k, name, i++, sizeof T, &T));
    if (is_block(a)) TRY(mpcl__set_arg(ctx, k, name, i++, sizeof Tp, &Tp));
    TRY(mpcl__set_arg(ctx, k, name, i++, sizeof C, &C));
    TRY(mpcl__set_arg(ctx, k, name, i++, sizeof H, &H));
    if (is_block(a)) TRY(mpcl__set_arg(ctx, k, name, i++, sizeof hsp, &hsp));
    TRY(mpcl__set_arg(ctx, k, name, i++, sizeof ld, &ld));
    TRY(mpcl__set_arg(ctx, k, name, i++, sizeof scale, &scale));
    TRY(mpcl__set_arg(ctx, k, name, i++, sizeof items, &items));
    cl_uint direct = a->direct;
    if (is_block(a)) TRY(mpcl__set_arg(ctx, k, name, i, sizeof direct, &direct));
    /* Block items are the unit of work, as the GEMM's tiles are: one per
     * work-group, which PoCL spreads over the cores. */
    return mpcl__launch_1d(ctx, k, name, items, is_block(a) ? 1 : 0);
}

/* Sets k's last arguments from index `first`: T, Tp, C, H, hsp, the count
 * of items and, for qkv's packing, whether the rows are read in place; and
 * launches `items` work-items. */
static mpcl_status launch_packing(const attn *a, mpcl_context *ctx, cl_kernel k, const char *name,
                                  cl_uint first, size_t items, bool qkv) {
    const cl_uint args[] = {(cl_uint)a->T,   (cl_uint)a->Tp, (cl_uint)a->C,     (cl_uint)a->H,
                            (cl_uint)a->hsp, (cl_uint)items, (cl_uint)a->direct};
    for (cl_uint i = 0; i < sizeof args / sizeof args[0] - !qkv; i++)
        TRY(mpcl__set_arg(ctx, k, name, first + i, sizeof args[i], &args[i]));
    return mpcl__launch_1d(ctx, k, name, items, 0);
}

/* The rows operands (PACK_Q, _K, _V and _DY) of the block layout's
 * kernels: their packs, or direct, the tensors they are read from in place
 * (the transposes' entries are left out). */
static void rows_mems(const attn *a, cl_mem rows[PACKS]) {
    for (int i = PACK_Q; i <= PACK_DY; i++)
        rows[i] = !a->direct ? a->pack[i]->mem : i == PACK_DY ? a->dy->mem : a->qkv->mem;
}

/* Packs qkv (dy: false; k and v transposed, and their rows unless direct)
 * or dy (true) of a batch of B for the block layout. */
static mpcl_status pack(attn *a, mpcl_context *ctx, mpcl_dtype storage, bool dy, size_t B) {
    const char *name = dy ? "mpcl_attention_pack_dy" : "mpcl_attention_pack_qkv";
    size_t heads = B * a->H;
    cl_kernel k;
    TRY(mpcl__kernel(ctx, storage, name, &k));
    mpcl_tensor **p = a->pack;
    cl_mem rows[PACKS];
    rows_mems(a, rows);
    if (dy) {
        TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(p[PACK_DY]->mem), MPCL_ARG(a->dy->mem),
                           MPCL_ARGS_END));
        return launch_packing(a, ctx, k, name, 2, heads * a->Tp, false);
    }
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(rows[PACK_Q]), MPCL_ARG(rows[PACK_K]),
                       MPCL_ARG(rows[PACK_V]), MPCL_ARG(p[PACK_KT]->mem), MPCL_ARG(p[PACK_VT]->mem),
                       MPCL_ARG(a->qkv->mem), MPCL_ARGS_END));
    /* An item per 16 positions of a head. */
    return launch_packing(a, ctx, k, name, 6, heads * a->Tp / MPCL_ABI_ATTN_CHUNK, true);
}

/* ---- the tile layout ---- */

/* A storage operand of the tile kernels: its buffer, its row stride and
 * head 0's first column (qkv's q, k and v parts: 0, C and 2C of 3C). */
typedef struct operand {
    cl_mem mem;
    cl_uint ld, off;
} operand;

/* Part 0 (q), 1 (k) or 2 (v) of qkv or dqkv. */
static operand part_of(const attn *a, const mpcl_tensor *t, int part) {
    return (operand){t->mem, (cl_uint)(3 * a->C), (cl_uint)(part * a->C)};
}

/* y or dy, [positions, C]. */
static operand heads_of(const attn *a, const mpcl_tensor *t) {
    return (operand){t->mem, (cl_uint)a->C, 0};
}

/* Launches a product over ceil(cols / TILE) x ceil(T / TILE) tiles of each
 * of a batch's B H heads, a work-group each. */
static mpcl_status launch_tiles(const attn *a, mpcl_context *ctx, cl_kernel k, const char *name,
                                size_t cols, size_t B) {
    enum { TILE = MPCL_ABI_ATTN_TILE, ITEMS = MPCL_ABI_ATTN_TILE_ITEMS };
    const size_t local[2] = {ITEMS, ITEMS};
    size_t tiles_t = (a->T + TILE - 1) / TILE, tiles_c = (cols + TILE - 1) / TILE;
    return mpcl__launch_2d(ctx, k, name, tiles_c * ITEMS, tiles_t * ITEMS * B * a->H, local);
}

/* s = alpha x y^T per head, for t' <= t: att or dscore. */
static mpcl_status tile_scores(const attn *a, mpcl_context *ctx, mpcl_dtype storage, mpcl_tensor *s,
                               operand x, operand y, float alpha, size_t B) {
    static const char name[] = "mpcl_attention_scores_tile";
    cl_kernel k;
    TRY(mpcl__kernel(ctx, storage, name, &k));
    cl_uint T = (cl_uint)a->T, C = (cl_uint)a->C, H = (cl_uint)a->H, ld = (cl_uint)att_ld(a);
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(s->mem), MPCL_ARG(x.mem), MPCL_ARG(x.ld),
                       MPCL_ARG(x.off), MPCL_ARG(y.mem), MPCL_ARG(y.ld), MPCL_ARG(y.off),
                       MPCL_ARG(T), MPCL_ARG(C), MPCL_ARG(H), MPCL_ARG(ld), MPCL_ARG(alpha),
                       MPCL_ARGS_END));
    return launch_tiles(a, ctx, k, name, a->T, B);
}

/* out = alpha p x per head (transposed: alpha p^T x), p att or dscore. */
static mpcl_status tile_mix(const attn *a, mpcl_context *ctx, mpcl_dtype storage, operand out,
                            const mpcl_tensor *p, operand x, float alpha, bool transposed,
                            size_t B) {
    static const char name[] = "mpcl_attention_mix_tile";
    cl_kernel k;
    TRY(mpcl__kernel(ctx, storage, name, &k));
    cl_uint T = (cl_uint)a->T, C = (cl_uint)a->C, H = (cl_uint)a->H, ld = (cl_uint)att_ld(a);
    cl_uint flag = transposed;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(out.mem), MPCL_ARG(out.ld), MPCL_ARG(out.off),
                       MPCL_ARG(p->mem), MPCL_ARG(x.mem), MPCL_ARG(x.ld), MPCL_ARG(x.off),
                       MPCL_ARG(T), MPCL_ARG(C), MPCL_ARG(H), MPCL_ARG(ld), MPCL_ARG(alpha),
                       MPCL_ARG(flag), MPCL_ARGS_END));
    return launch_tiles(a, ctx, k, name, a->C / a->H, B);
}

/* The softmax of att's rows (dscore NULL), or its backward (dscore's rows
 * from att's), in place: a work-group per row (b, h, t) of a batch of B. */
static mpcl_status tile_softmax(const attn *a, mpcl_context *ctx, mpcl_dtype storage,
                                mpcl_tensor *dscore, size_t B) {
    const char *name =
        dscore ? "mpcl_attention_softmax_backward_tile" : "mpcl_attention_softmax_tile";
    cl_kernel k;
    TRY(mpcl__kernel(ctx, storage, name, &k));
    cl_uint T = (cl_uint)a->T, ld = (cl_uint)att_ld(a);
    if (dscore)
        TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(dscore->mem), MPCL_ARG(a->att->mem), MPCL_ARG(T),
                           MPCL_ARG(ld), MPCL_ARGS_END));
    else
        TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(a->att->mem), MPCL_ARG(T), MPCL_ARG(ld),
                           MPCL_ARGS_END));
    size_t rows = B * a->H * a->T;
    return mpcl__launch_1d(ctx, k, name, rows * MPCL_ABI_BATCHNORM_WG, MPCL_ABI_BATCHNORM_WG);
}

/* att and y from qkv: the scores, their softmax, y = att v. */
static mpcl_status attend_tiles(attn *a, mpcl_context *ctx, mpcl_dtype storage, size_t B) {
    TRY(tile_scores(a, ctx, storage, a->att, part_of(a, a->qkv, 0), part_of(a, a->qkv, 1),
                    score_scale(a), B));
    TRY(tile_softmax(a, ctx, storage, NULL, B));
    return tile_mix(a, ctx, storage, heads_of(a, a->y), a->att, part_of(a, a->qkv, 2), 1.0f, false,
                    B);
}

/* dqkv from dy: dscore = dy v^T, the softmax's backward, then dq =
 * scale dscore k, dk = scale dscore^T q and dv = att^T dy. */
static mpcl_status attend_tiles_backward(attn *a, mpcl_context *ctx, mpcl_dtype storage, size_t B) {
    operand q = part_of(a, a->qkv, 0), k = part_of(a, a->qkv, 1), v = part_of(a, a->qkv, 2);
    operand dy = heads_of(a, a->dy);
    float scale = score_scale(a);
    TRY(tile_scores(a, ctx, storage, a->dscore, dy, v, 1.0f, B));
    TRY(tile_softmax(a, ctx, storage, a->dscore, B));
    TRY(tile_mix(a, ctx, storage, part_of(a, a->dqkv, 0), a->dscore, k, scale, false, B));
    TRY(tile_mix(a, ctx, storage, part_of(a, a->dqkv, 1), a->dscore, q, scale, true, B));
    return tile_mix(a, ctx, storage, part_of(a, a->dqkv, 2), a->att, dy, 1.0f, true, B);
}

/* ---- the layer ---- */

/* att and y from qkv, for a batch of B. */
static mpcl_status attend(attn *a, mpcl_context *ctx, mpcl_dtype storage, size_t B) {
    cl_kernel k;
    if (a->layout == LAYOUT_TILE) return attend_tiles(a, ctx, storage, B);
    if (!is_block(a)) {
        static const char name[] = "mpcl_attention_forward";
        TRY(mpcl__kernel(ctx, storage, name, &k));
        TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(a->att->mem), MPCL_ARG(a->y->mem),
                           MPCL_ARG(a->qkv->mem), MPCL_ARGS_END));
        return launch(a, ctx, k, name, 3, B);
    }
    mpcl_tensor **p = a->pack;
    cl_mem rows[PACKS];
    rows_mems(a, rows);
    TRY(pack(a, ctx, storage, false, B));
    static const char name[] = "mpcl_attention_forward_block";
    TRY(mpcl__kernel(ctx, storage, name, &k));
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(a->att->mem), MPCL_ARG(a->y->mem),
                       MPCL_ARG(rows[PACK_Q]), MPCL_ARG(p[PACK_KT]->mem), MPCL_ARG(rows[PACK_V]),
                       MPCL_ARGS_END));
    return launch(a, ctx, k, name, 5, B);
}

/* dqkv from dy, for a batch of B: the query rows' kernel (dscore, dq),
 * then the key rows' (dk, dv). The block layout reuses the forward's packed
 * q, k and v: the layer's forward of the same batch ran last. */
static mpcl_status attend_backward(attn *a, mpcl_context *ctx, mpcl_dtype storage, size_t B) {
    cl_kernel k;
    if (a->layout == LAYOUT_TILE) return attend_tiles_backward(a, ctx, storage, B);
    if (!is_block(a)) {
        static const char query[] = "mpcl_attention_backward_query";
        static const char key[] = "mpcl_attention_backward_key";
        TRY(mpcl__kernel(ctx, storage, query, &k));
        TRY(mpcl__set_args(ctx, k, query, MPCL_ARG(a->dscore->mem), MPCL_ARG(a->dqkv->mem),
                           MPCL_ARG(a->att->mem), MPCL_ARG(a->qkv->mem), MPCL_ARG(a->dy->mem),
                           MPCL_ARGS_END));
        TRY(launch(a, ctx, k, query, 5, B));
        TRY(mpcl__kernel(ctx, storage, key, &k));
        TRY(mpcl__set_args(ctx, k, key, MPCL_ARG(a->dqkv->mem), MPCL_ARG(a->dscore->mem),
                           MPCL_ARG(a->att->mem), MPCL_ARG(a->qkv->mem), MPCL_ARG(a->dy->mem),
                           MPCL_ARGS_END));
        return launch(a, ctx, k, key, 5, B);
    }
    mpcl_tensor **p = a->pack;
    cl_mem rows[PACKS];
    rows_mems(a, rows);
    if (!a->direct) TRY(pack(a, ctx, storage, true, B));
    static const char query[] = "mpcl_attention_backward_query_block";
    static const char key[] = "mpcl_attention_backward_key_block";
    TRY(mpcl__kernel(ctx, storage, query, &k));
    TRY(mpcl__set_args(ctx, k, query, MPCL_ARG(a->dscore->mem), MPCL_ARG(a->dqkv->mem),
                       MPCL_ARG(a->att->mem), MPCL_ARG(rows[PACK_DY]), MPCL_ARG(p[PACK_VT]->mem),
                       MPCL_ARG(rows[PACK_K]), MPCL_ARGS_END));
    TRY(launch(a, ctx, k, query, 6, B));
    TRY(mpcl__kernel(ctx, storage, key, &k));
    TRY(mpcl__set_args(ctx, k, key, MPCL_ARG(a->dqkv->mem), MPCL_ARG(a->dscore->mem),
                       MPCL_ARG(a->att->mem), MPCL_ARG(rows[PACK_Q]), MPCL_ARG(rows[PACK_DY]),
                       MPCL_ARGS_END));
    return launch(a, ctx, k, key, 5, B);
}

static mpcl_status attn_forward(mpcl__layer *L, const mpcl_tensor *in, bool training) {
    (void)training; /* the probabilities are computed either way; keeping them is free */
    attn *a = L->state;
    const mpcl__layer_env *env = L->env;
    size_t B = in->rows, positions = B * a->T;
    mpcl_tensor x = mpcl__tensor_by_last(in, a->C), qkv = mpcl__tensor_rows(a->qkv, positions);
    mpcl_tensor y = mpcl__tensor_rows(a->y, positions), out_rows = mpcl__tensor_rows(L->output, B);
    mpcl_tensor out = mpcl__tensor_by_last(&out_rows, a->C), addend_rows, addend;
    if (L->out_addend) {
        addend_rows = mpcl__tensor_rows(L->out_addend, B);
        addend = mpcl__tensor_by_last(&addend_rows, a->C);
    }
    TRY(project(&a->proj[C_ATTN], env, &x, &qkv, NULL));
    TRY(attend(a, env->ctx, env->storage, B));
    return project(&a->proj[C_PROJ], env, &y, &out, L->out_addend ? &addend : NULL);
}

/* Generation's step at position t of sample 0, from its input row x [1, C]:
 * its q, k and v (through dqkv's first row: inference has no backward)
 * into row t of qkv, which holds the rows of positions 0 .. t - 1 from the
 * last forward and the steps since (the key/value cache); the attention of
 * that row alone; the projection into the output's first row. */
static mpcl_status attn_forward_step(mpcl__layer *L, const mpcl_tensor *x, size_t t) {
    attn *a = L->state;
    const mpcl__layer_env *env = L->env;
    mpcl_context *ctx = env->ctx;
    mpcl_tensor qkv_row = mpcl__tensor_rows(a->dqkv, 1), y = mpcl__tensor_rows(a->y, 1);
    mpcl_tensor out = mpcl__layer_step_row(L);
    TRY(project(&a->proj[C_ATTN], env, x, &qkv_row, NULL));
    TRY(mpcl__tensor_copy_at(a->qkv, t * 3 * a->C, &qkv_row));
    static const char name[] = "mpcl_attention_forward_position";
    cl_kernel k;
    TRY(mpcl__kernel(ctx, env->storage, name, &k));
    cl_uint T = (cl_uint)a->T, C = (cl_uint)a->C, H = (cl_uint)a->H, position = (cl_uint)t;
    cl_uint ld = (cl_uint)att_ld(a);
    float scale = score_scale(a);
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(a->att->mem), MPCL_ARG(a->y->mem),
                       MPCL_ARG(a->qkv->mem), MPCL_ARG(T), MPCL_ARG(C), MPCL_ARG(H), MPCL_ARG(ld),
                       MPCL_ARG(scale), MPCL_ARG(position), MPCL_ARGS_END));
    TRY(mpcl__launch_1d(ctx, k, name, a->H, 0));
    return project(&a->proj[C_PROJ], env, &y, &out, L->out_addend);
}

static mpcl_status attn_backward(mpcl__layer *L, const mpcl_tensor *in, mpcl_tensor *d_in) {
    attn *a = L->state;
    const mpcl__layer_env *env = L->env;
    size_t B = in->rows, positions = B * a->T;
    mpcl_tensor d_rows = mpcl__tensor_rows(L->d_output, B),
                d_out = mpcl__tensor_by_last(&d_rows, a->C);
    mpcl_tensor y = mpcl__tensor_rows(a->y, positions), dy = mpcl__tensor_rows(a->dy, positions);
    mpcl_tensor x = mpcl__tensor_by_last(in, a->C), dqkv = mpcl__tensor_rows(a->dqkv, positions);
    TRY(project_backward(&a->proj[C_PROJ], env, &y, &d_out, &dy));
    TRY(attend_backward(a, env->ctx, env->storage, B));
    mpcl_tensor dx = d_in ? mpcl__tensor_by_last(d_in, a->C) : (mpcl_tensor){0};
    return project_backward(&a->proj[C_ATTN], env, &x, &dqkv, d_in ? &dx : NULL);
}

static void attn_destroy(mpcl__layer *L) {
    attn *a = L->state;
    if (!a) return;
    for (int i = 0; i < PROJECTIONS; i++) {
        mpcl__bias_act_destroy(&a->proj[i].bias);
        mpcl_tensor_destroy(a->proj[i].w);
        mpcl_tensor_destroy(a->proj[i].dw);
    }
    mpcl_tensor *own[] = {a->qkv, a->dqkv, a->y, a->dy, a->att, a->dscore};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) mpcl_tensor_destroy(own[i]);
    for (int i = 0; i < PACKS; i++) mpcl_tensor_destroy(a->pack[i]);
    free(a);
    L->state = NULL;
}

const mpcl__layer_kind mpcl__causal_self_attention_layer = {
    .name = "causal_self_attention",
    .keras_name = "CausalSelfAttention",
    .attrs = ATTN_ATTRS,
    .attr_count = sizeof ATTN_ATTRS / sizeof ATTN_ATTRS[0],
    .declare = attn_declare,
    .activation_bytes = attn_activation_bytes,
    .create = attn_create,
    .forward = attn_forward,
    .backward = attn_backward,
    .forward_step = attn_forward_step,
    .destroy = attn_destroy,
};
