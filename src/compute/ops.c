/* Ops: launchers for cl/activation.cl, cl/cast.cl and mpcl_add of cl/fill.cl (the losses' are in
 * losses.c), and the argument checks every launcher uses. Every
 * launcher checks its tensors completely before it enqueues anything, so a
 * rejected call leaves its outputs untouched. */
#include <stdio.h>
#include <string.h>

#include "compute/compute.h"

/* The work-group of the elementwise launches: a few dozen items suit PoCL's
 * work-group vectorizer and any GPU. A host choice only (the kernels check
 * their range), so not in cl/abi.h; the loss kernel's group, which the kernel
 * requires, is MPCL_ABI_LOSS_WG there. */
#define ELEMENTWISE_WG 64

/* The activation codes are cl/abi.h's, which the public header repeats. */
/* Elements per work-item of the elementwise and cast kernels, and the bias
 * gradient's blocks: cl/abi.h (the kernels' float8 and their group shape). */
#define ELEMENTWISE_VEC MPCL_ABI_ELEMENTWISE_VEC
#define BIAS_GRAD_COLS MPCL_ABI_BIAS_GRAD_COLS
#define BIAS_GRAD_PARTS MPCL_ABI_BIAS_GRAD_PARTS

static size_t ceil_div(size_t a, size_t b) {
    return (a + b - 1) / b;
}

#define NAME_ROW(NAME, name, ...) [MPCL_ACT_##NAME] = #name,
static const char *const activation_names[MPCL_ACT_COUNT] = {MPCL_ACTIVATION_LIST(NAME_ROW)};
#undef NAME_ROW

const char *mpcl_activation_name(mpcl_activation act) {
    if (act == MPCL_ACT_SOFTMAX) return "softmax";
    if ((int)act < 0 || act >= MPCL_ACT_COUNT) return "unknown";
    return activation_names[act];
}

bool mpcl_activation_parse(const char *name, mpcl_activation *out) {
    if (!name) return false;
    for (int i = 0; i < MPCL_ACT_COUNT; i++) {
        if (strcmp(name, activation_names[i]) == 0) {
            *out = (mpcl_activation)i;
            return true;
        }
    }
    return false;
}

mpcl_act_saved mpcl_activation_saved(mpcl_activation act) {
#define SAVED_ROW(NAME, name, saved, ...) [MPCL_ACT_##NAME] = MPCL_ACT_SAVED_##saved,
    static const mpcl_act_saved saved[MPCL_ACT_COUNT] = {MPCL_ACTIVATION_LIST(SAVED_ROW)};
#undef SAVED_ROW
    return (unsigned)act < MPCL_ACT_COUNT ? saved[act] : MPCL_ACT_SAVED_NONE;
}

bool mpcl__activation_pools_first(mpcl_activation act) {
#define POOLS_FIRST_ROW(NAME, name, saved, pools_first) [MPCL_ACT_##NAME] = pools_first,
    static const bool pools_first[MPCL_ACT_COUNT] = {MPCL_ACTIVATION_LIST(POOLS_FIRST_ROW)};
#undef POOLS_FIRST_ROW
    return (unsigned)act < MPCL_ACT_COUNT && pools_first[act];
}

const char *mpcl_activation_names(void) {
#define LIST_ROW(NAME, name, ...) ", " #name
    /* ", identity, relu, ...": the list after its first two characters. */
    static const char list[] = "" MPCL_ACTIVATION_LIST(LIST_ROW);
#undef LIST_ROW
    return list + 2;
}

/* ---- checks ---- */

mpcl_status mpcl__check_present(mpcl_context *ctx, const mpcl_tensor *t, const char *op,
                                const char *what) {
    if (!t) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: %s is NULL", op, what);
    if (t->ctx != ctx)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: %s belongs to another context", op, what);
    return MPCL_OK;
}

mpcl_status mpcl__check_storage(mpcl_context *ctx, const mpcl_tensor *t, const char *op,
                                const char *what) {
    if (!mpcl_dtype_is_float(t->dtype))
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE, "%s: %s is %s, want f32, f16 or bf16", op, what,
                          mpcl_dtype_name(t->dtype));
    return MPCL_OK;
}

mpcl_status mpcl__check_dtype(mpcl_context *ctx, const mpcl_tensor *t, mpcl_dtype want,
                              const char *op, const char *what) {
    if (t->dtype != want)
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE, "%s: %s is %s, want %s", op, what,
                          mpcl_dtype_name(t->dtype), mpcl_dtype_name(want));
    return MPCL_OK;
}

mpcl_status mpcl__check_shape(mpcl_context *ctx, const mpcl_tensor *t, size_t rows, size_t cols,
                              const char *op, const char *what) {
    if (t->rows != rows || t->cols != cols)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "%s: %s is %zux%zu, want %zux%zu", op, what, t->rows,
                          t->cols, rows, cols);
    return MPCL_OK;
}

/* Kernels index with uint. */
mpcl_status mpcl__check_count(mpcl_context *ctx, const mpcl_tensor *t, const char *op) {
    if (t->rows * t->cols > 0xffffffffu)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "%s: %zux%zu has more than 2^32-1 elements", op,
                          t->rows, t->cols);
    return MPCL_OK;
}

static mpcl_status check_act(mpcl_context *ctx, mpcl_activation act, const char *op) {
    if ((int)act < 0 || act >= MPCL_ACT_COUNT)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: unknown activation %d", op, (int)act);
    return MPCL_OK;
}

/* ---- bias + activation ---- */

mpcl_status mpcl_bias_act_forward_z(mpcl_context *ctx, mpcl_tensor *out, mpcl_tensor *z,
                                    const mpcl_tensor *pre_in, const mpcl_tensor *bias,
                                    mpcl_activation act) {
    static const char op[] = "mpcl_bias_act_forward";
    TRY(check_act(ctx, act, op));
    TRY(mpcl__check_present(ctx, out, op, "out"));
    TRY(mpcl__check_present(ctx, pre_in, op, "pre_in"));
    TRY(mpcl__check_present(ctx, bias, op, "bias"));
    if (z) TRY(mpcl__check_present(ctx, z, op, "z"));
    TRY(mpcl__check_storage(ctx, pre_in, op, "pre_in"));
    TRY(mpcl__check_dtype(ctx, out, pre_in->dtype, op, "out"));
    if (z) TRY(mpcl__check_dtype(ctx, z, pre_in->dtype, op, "z"));
    TRY(mpcl__check_dtype(ctx, bias, MPCL_DTYPE_F32, op, "bias"));
    TRY(mpcl__check_shape(ctx, out, pre_in->rows, pre_in->cols, op, "out"));
    if (z) TRY(mpcl__check_shape(ctx, z, pre_in->rows, pre_in->cols, op, "z"));
    TRY(mpcl__check_shape(ctx, bias, 1, pre_in->cols, op, "bias"));
    TRY(mpcl__check_count(ctx, pre_in, op));

    /* One kernel per activation, and _v8 when the rows are whole vectors
     * (cl/activation.cl says why). */
#define FORWARD_ROW(NAME, name, ...) [MPCL_ACT_##NAME] = "mpcl_bias_act_forward_" #name,
#define FORWARD_Z_ROW(NAME, name, ...) [MPCL_ACT_##NAME] = "mpcl_bias_act_forward_z_" #name,
#define FORWARD_V8_ROW(NAME, name, ...) [MPCL_ACT_##NAME] = "mpcl_bias_act_forward_" #name "_v8",
#define FORWARD_Z_V8_ROW(NAME, name, ...) \
    [MPCL_ACT_##NAME] = "mpcl_bias_act_forward_z_" #name "_v8",
    static const char *const names[2][2][MPCL_ACT_COUNT] = {
        {{MPCL_ACTIVATION_LIST(FORWARD_ROW)}, {MPCL_ACTIVATION_LIST(FORWARD_Z_ROW)}},
        {{MPCL_ACTIVATION_LIST(FORWARD_V8_ROW)}, {MPCL_ACTIVATION_LIST(FORWARD_Z_V8_ROW)}},
    };
    const char *name = names[pre_in->cols % ELEMENTWISE_VEC == 0][z != NULL][act];
    cl_kernel k;
    TRY(mpcl__kernel(ctx, pre_in->dtype, name, &k));
    cl_uint cols = (cl_uint)pre_in->cols, rows = (cl_uint)pre_in->rows;
    /* Without z the kernel never touches that argument; out stands in. */
    cl_mem z_mem = z ? z->mem : out->mem;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(out->mem), MPCL_ARG(z_mem), MPCL_ARG(pre_in->mem),
                       MPCL_ARG(bias->mem), MPCL_ARG(cols), MPCL_ARG(rows), MPCL_ARGS_END));
    /* (column blocks of 8, rows) so that the kernel needs no division for
     * the bias index; the driver picks a group that divides the range
     * exactly. */
    return mpcl__launch_2d(ctx, k, name, ceil_div(cols, ELEMENTWISE_VEC), rows, NULL);
}

mpcl_status mpcl_bias_act_forward(mpcl_context *ctx, mpcl_tensor *out, const mpcl_tensor *pre_in,
                                  const mpcl_tensor *bias, mpcl_activation act) {
    return mpcl_bias_act_forward_z(ctx, out, NULL, pre_in, bias, act);
}

/* The arguments of an activation's backward (mpcl_bias_act_backward and the
 * fused mpcl_bias_act_backward_grad). */
static mpcl_status check_backward_args(mpcl_context *ctx, const char *op, const mpcl_tensor *d_pre,
                                       const mpcl_tensor *d_out, const mpcl_tensor *saved,
                                       mpcl_activation act) {
    TRY(check_act(ctx, act, op));
    TRY(mpcl__check_present(ctx, d_pre, op, "d_pre"));
    TRY(mpcl__check_present(ctx, d_out, op, "d_out"));
    bool needs_saved = mpcl_activation_saved(act) != MPCL_ACT_SAVED_NONE;
    if (needs_saved || saved) TRY(mpcl__check_present(ctx, saved, op, "saved"));
    TRY(mpcl__check_storage(ctx, d_out, op, "d_out"));
    TRY(mpcl__check_dtype(ctx, d_pre, d_out->dtype, op, "d_pre"));
    if (saved) TRY(mpcl__check_dtype(ctx, saved, d_out->dtype, op, "saved"));
    TRY(mpcl__check_shape(ctx, d_pre, d_out->rows, d_out->cols, op, "d_pre"));
    if (saved) TRY(mpcl__check_shape(ctx, saved, d_out->rows, d_out->cols, op, "saved"));
    return mpcl__check_count(ctx, d_out, op);
}

mpcl_status mpcl_bias_act_backward(mpcl_context *ctx, mpcl_tensor *d_pre, const mpcl_tensor *d_out,
                                   const mpcl_tensor *saved, mpcl_activation act) {
    static const char op[] = "mpcl_bias_act_backward";
    TRY(check_backward_args(ctx, op, d_pre, d_out, saved, act));

#define BACKWARD_ROW(NAME, name, ...) [MPCL_ACT_##NAME] = "mpcl_bias_act_backward_" #name,
#define BACKWARD_V8_ROW(NAME, name, ...) [MPCL_ACT_##NAME] = "mpcl_bias_act_backward_" #name "_v8",
    static const char *const names[2][MPCL_ACT_COUNT] = {
        {MPCL_ACTIVATION_LIST(BACKWARD_ROW)},
        {MPCL_ACTIVATION_LIST(BACKWARD_V8_ROW)},
    };
    const char *name = names[(d_out->rows * d_out->cols) % ELEMENTWISE_VEC == 0][act];
    cl_kernel k;
    TRY(mpcl__kernel(ctx, d_out->dtype, name, &k));
    cl_uint n = (cl_uint)(d_out->rows * d_out->cols);
    /* Identity never reads saved; d_out stands in when it is NULL. */
    cl_mem saved_mem = saved ? saved->mem : d_out->mem;
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(d_pre->mem), MPCL_ARG(d_out->mem),
                       MPCL_ARG(saved_mem), MPCL_ARG(n), MPCL_ARGS_END));
    return mpcl__launch_1d(ctx, k, name, ceil_div(n, ELEMENTWISE_VEC), ELEMENTWISE_WG);
}

void mpcl__bias_grad_force_parts(mpcl_context *ctx, int parts) {
    ctx->bias_grad_parts = parts;
}

/* The bias gradient's two shapes (cl/activation.cl): on CPUs one group of
 * BIAS_GRAD_PARTS items per block of 32 columns (the items split the rows);
 * on GPUs and accelerators, which want many more items, rows in parts. */
static bool bias_grad_in_parts(const mpcl_context *ctx) {
    if (ctx->bias_grad_parts) return ctx->bias_grad_parts > 0;
    return ctx->info.type != MPCL_DEVICE_TYPE_CPU;
}

/* Rows per part in the GPU shape: at least BIAS_PART_ROWS, in at most
 * BIAS_PARTS parts (the second launch adds that many rows per column). */
#define BIAS_PART_ROWS 16
#define BIAS_PARTS 64

/* One bias-gradient launch in the CPU shape (kernel k), or the GPU shape's
 * two: k into the partial sums, then `sum_name` into d_bias. The plain
 * kernels never read d_out and saved (the callers pass d_pre). */
static mpcl_status bias_grad_launch(mpcl_context *ctx, cl_kernel k, const char *name,
                                    const char *sum_name, const mpcl_tensor *d_bias,
                                    const mpcl_tensor *d_pre, const mpcl_tensor *d_out,
                                    const mpcl_tensor *saved) {
    cl_uint rows = (cl_uint)d_pre->rows, cols = (cl_uint)d_pre->cols;
    if (!sum_name) {
        TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(d_bias->mem), MPCL_ARG(d_pre->mem),
                           MPCL_ARG(d_out->mem), MPCL_ARG(saved->mem), MPCL_ARG(rows),
                           MPCL_ARG(cols), MPCL_ARGS_END));
        const size_t local[2] = {1, BIAS_GRAD_PARTS};
        return mpcl__launch_2d(ctx, k, name, ceil_div(cols, BIAS_GRAD_COLS), BIAS_GRAD_PARTS,
                               local);
    }
    size_t parts = ceil_div(rows, BIAS_PART_ROWS);
    if (parts > BIAS_PARTS) parts = BIAS_PARTS;
    cl_uint per = (cl_uint)ceil_div(rows, parts), nparts = (cl_uint)ceil_div(rows, per);
    cl_mem partial;
    TRY(mpcl__workspace(ctx, MPCL__WORKSPACE_BIAS_PARTIALS, (size_t)nparts * cols * sizeof(float),
                        &partial));
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(partial), MPCL_ARG(d_pre->mem), MPCL_ARG(d_out->mem),
                       MPCL_ARG(saved->mem), MPCL_ARG(rows), MPCL_ARG(cols), MPCL_ARG(per),
                       MPCL_ARGS_END));
    TRY(mpcl__launch_2d(ctx, k, name, ceil_div(cols, ELEMENTWISE_VEC), nparts, NULL));
    cl_kernel sum;
    TRY(mpcl__kernel(ctx, d_pre->dtype, sum_name, &sum));
    TRY(mpcl__set_args(ctx, sum, sum_name, MPCL_ARG(d_bias->mem), MPCL_ARG(partial),
                       MPCL_ARG(nparts), MPCL_ARG(cols), MPCL_ARGS_END));
    return mpcl__launch_1d(ctx, sum, sum_name, ceil_div(cols, ELEMENTWISE_VEC), 0);
}

/* The second launch of the GPU shape: into d_bias's dtype, _v8 for whole
 * vectors; NULL in the CPU shape. */
static const char *bias_grad_sum_name(const mpcl_context *ctx, bool f32_out, bool v8) {
    static const char *const names[2][2] = {
        {"mpcl_bias_grad_sum_parts", "mpcl_bias_grad_sum_parts_v8"},
        {"mpcl_bias_grad_sum_parts_f32", "mpcl_bias_grad_sum_parts_f32_v8"}};
    return bias_grad_in_parts(ctx) ? names[f32_out][v8] : NULL;
}

mpcl_status mpcl_bias_grad(mpcl_context *ctx, mpcl_tensor *d_bias, const mpcl_tensor *d_pre) {
    static const char op[] = "mpcl_bias_grad";
    TRY(mpcl__check_present(ctx, d_bias, op, "d_bias"));
    TRY(mpcl__check_present(ctx, d_pre, op, "d_pre"));
    TRY(mpcl__check_storage(ctx, d_pre, op, "d_pre"));
    if (d_bias->dtype != d_pre->dtype && d_bias->dtype != MPCL_DTYPE_F32)
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE, "%s: d_bias is %s, want %s (as d_pre) or f32", op,
                          mpcl_dtype_name(d_bias->dtype), mpcl_dtype_name(d_pre->dtype));
    TRY(mpcl__check_shape(ctx, d_bias, 1, d_pre->cols, op, "d_bias"));
    TRY(mpcl__check_count(ctx, d_pre, op));

    /* The f32 output of an f16 d_pre has a kernel of its own (in the f32
     * program both are the same kernel), and _v8 serves whole vectors. */
    static const char *const names[2][2] = {{"mpcl_bias_grad", "mpcl_bias_grad_v8"},
                                            {"mpcl_bias_grad_f32", "mpcl_bias_grad_f32_v8"}};
    static const char *const part_names[2] = {"mpcl_bias_grad_parts", "mpcl_bias_grad_parts_v8"};
    bool f32_out = d_bias->dtype != d_pre->dtype, v8 = d_pre->cols % ELEMENTWISE_VEC == 0;
    const char *sum_name = bias_grad_sum_name(ctx, f32_out, v8);
    const char *name = sum_name ? part_names[v8] : names[f32_out][v8];
    cl_kernel k;
    TRY(mpcl__kernel(ctx, d_pre->dtype, name, &k));
    return bias_grad_launch(ctx, k, name, sum_name, d_bias, d_pre, d_pre, d_pre);
}

mpcl_status mpcl_bias_act_backward_grad(mpcl_context *ctx, mpcl_tensor *d_pre, mpcl_tensor *d_bias,
                                        const mpcl_tensor *d_out, const mpcl_tensor *saved,
                                        mpcl_activation act) {
    static const char op[] = "mpcl_bias_act_backward_grad";
    TRY(check_backward_args(ctx, op, d_pre, d_out, saved, act));
    TRY(mpcl__check_present(ctx, d_bias, op, "d_bias"));
    TRY(mpcl__check_dtype(ctx, d_bias, d_out->dtype, op, "d_bias"));
    TRY(mpcl__check_shape(ctx, d_bias, 1, d_out->cols, op, "d_bias"));
#define GRAD_ROW(NAME, name, ...) [MPCL_ACT_##NAME] = "mpcl_bias_act_backward_grad_" #name,
#define GRAD_V8_ROW(NAME, name, ...) [MPCL_ACT_##NAME] = "mpcl_bias_act_backward_grad_" #name "_v8",
#define PARTS_ROW(NAME, name, ...) [MPCL_ACT_##NAME] = "mpcl_bias_act_backward_grad_parts_" #name,
#define PARTS_V8_ROW(NAME, name, ...) \
    [MPCL_ACT_##NAME] = "mpcl_bias_act_backward_grad_parts_" #name "_v8",
    static const char *const names[2][2][MPCL_ACT_COUNT] = {
        {{MPCL_ACTIVATION_LIST(GRAD_ROW)}, {MPCL_ACTIVATION_LIST(GRAD_V8_ROW)}},
        {{MPCL_ACTIVATION_LIST(PARTS_ROW)}, {MPCL_ACTIVATION_LIST(PARTS_V8_ROW)}},
    };
    bool v8 = d_out->cols % ELEMENTWISE_VEC == 0;
    const char *sum_name = bias_grad_sum_name(ctx, false, v8);
    const char *name = names[sum_name != NULL][v8][act];
    cl_kernel k;
    TRY(mpcl__kernel(ctx, d_out->dtype, name, &k));
    return bias_grad_launch(ctx, k, name, sum_name, d_bias, d_pre, d_out, saved ? saved : d_out);
}

/* ---- the elementwise sum (cl/fill.cl) ---- */

mpcl_status mpcl_add(mpcl_context *ctx, mpcl_tensor *out, const mpcl_tensor *a,
                     const mpcl_tensor *b) {
    static const char op[] = "mpcl_add";
    const mpcl_tensor *in[] = {out, a, b};
    static const char *const what[] = {"out", "a", "b"};
    for (int i = 0; i < 3; i++) TRY(mpcl__check_present(ctx, in[i], op, what[i]));
    TRY(mpcl__check_storage(ctx, out, op, "out"));
    for (int i = 1; i < 3; i++) {
        TRY(mpcl__check_dtype(ctx, in[i], out->dtype, op, what[i]));
        TRY(mpcl__check_shape(ctx, in[i], out->rows, out->cols, op, what[i]));
    }
    TRY(mpcl__check_count(ctx, out, op));
    cl_kernel k;
    TRY(mpcl__kernel(ctx, out->dtype, op, &k));
    cl_uint n = (cl_uint)(out->rows * out->cols);
    TRY(mpcl__set_args(ctx, k, op, MPCL_ARG(out->mem), MPCL_ARG(a->mem), MPCL_ARG(b->mem),
                       MPCL_ARG(n), MPCL_ARGS_END));
    return mpcl__launch_1d(ctx, k, op, n, ELEMENTWISE_WG);
}

/* ---- casts ---- */

mpcl_status mpcl_cast(mpcl_context *ctx, mpcl_tensor *dst, const mpcl_tensor *src) {
    /* The program of the 16-bit side, which the run builds anyway (a missing
     * tensor is refused there). */
    mpcl_dtype program = dst && dst->dtype != MPCL_DTYPE_F32 ? dst->dtype
                         : src                               ? src->dtype
                                                             : MPCL_DTYPE_F32;
    return mpcl__cast(ctx, dst, src, program);
}

/* A cast's kernels (cl/cast.cl): for any n, then the _v8 form for n a
 * multiple of 8. Each takes ELEMENTWISE_VEC elements per work-item. */
#define CAST_KERNELS(NAME) \
    { NAME, NAME "_v8" }

mpcl_status mpcl__cast(mpcl_context *ctx, mpcl_tensor *dst, const mpcl_tensor *src,
                       mpcl_dtype program) {
    static const char op[] = "mpcl_cast";
    TRY(mpcl__check_present(ctx, dst, op, "dst"));
    TRY(mpcl__check_present(ctx, src, op, "src"));
    TRY(mpcl__check_storage(ctx, src, op, "src"));
    TRY(mpcl__check_storage(ctx, dst, op, "dst"));
    TRY(mpcl__check_shape(ctx, dst, src->rows, src->cols, op, "dst"));
    TRY(mpcl__check_count(ctx, src, op));
    if (dst->dtype == src->dtype) return dst == src ? MPCL_OK : mpcl__tensor_copy_at(dst, 0, src);
    /* [dst][src] over the float dtypes (the diagonal is the copy above). */
    static const char *const names[MPCL_DTYPE_COUNT][MPCL_DTYPE_COUNT][2] = {
        [MPCL_DTYPE_F16][MPCL_DTYPE_F32] = CAST_KERNELS("mpcl_cast_f32_to_f16"),
        [MPCL_DTYPE_F32][MPCL_DTYPE_F16] = CAST_KERNELS("mpcl_cast_f16_to_f32"),
        [MPCL_DTYPE_BF16][MPCL_DTYPE_F32] = CAST_KERNELS("mpcl_cast_f32_to_bf16"),
        [MPCL_DTYPE_F32][MPCL_DTYPE_BF16] = CAST_KERNELS("mpcl_cast_bf16_to_f32"),
        [MPCL_DTYPE_BF16][MPCL_DTYPE_F16] = CAST_KERNELS("mpcl_cast_f16_to_bf16"),
        [MPCL_DTYPE_F16][MPCL_DTYPE_BF16] = CAST_KERNELS("mpcl_cast_bf16_to_f16"),
    };
    bool v8 = (src->rows * src->cols) % ELEMENTWISE_VEC == 0;
    const char *name = names[dst->dtype][src->dtype][v8];
    if (!name)
        return MPCL_ERROR(ctx, MPCL_ERR_DTYPE, "%s: no cast from %s to %s", op,
                          mpcl_dtype_name(src->dtype), mpcl_dtype_name(dst->dtype));
    cl_kernel k;
    TRY(mpcl__kernel(ctx, program, name, &k));
    cl_uint n = (cl_uint)(src->rows * src->cols);
    TRY(mpcl__set_args(ctx, k, name, MPCL_ARG(dst->mem), MPCL_ARG(src->mem), MPCL_ARG(n),
                       MPCL_ARGS_END));
    return mpcl__launch_1d(ctx, k, name, ceil_div(n, ELEMENTWISE_VEC), ELEMENTWISE_WG);
}
