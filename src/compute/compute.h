/* The compute area's internal declarations (tensor insides, argument
 * checks, kernel argument and launch helpers, what the optimizer reads of
 * the loss scaler), for the areas above it, and the host/device ABI
 * constants (cl/abi.h) for the launchers. Nothing here is installed. */
#ifndef MPCL_COMPUTE_H
#define MPCL_COMPUTE_H

#include <stdbool.h>

#include "cl/abi.h"
#include "mpcl/gemm.h"
#include "mpcl/losses.h"
#include "mpcl/loss_scale.h"
#include "mpcl/ops.h"
#include "mpcl/optim.h"
#include "mpcl/quickbench.h"
#include "mpcl/tensor.h"
#include "runtime/runtime.h"

/* ---- tensor ---- */

struct mpcl_tensor {
    mpcl_context *ctx;
    cl_mem mem;
    mpcl_dtype dtype;
    size_t rows, cols;
    size_t bytes;
    bool view; /* a sub-buffer of another tensor: not counted in the context's bytes */
};

/* A rows x cols view of base's elements [offset, offset + rows * cols): an
 * OpenCL sub-buffer, destroyed with mpcl_tensor_destroy. The byte offset must
 * be a multiple of mpcl__sub_buffer_align (MPCL_ERR_INVALID_ARG). */
mpcl_status mpcl__tensor_view(const mpcl_tensor *base, size_t offset, size_t rows, size_t cols,
                              mpcl_tensor **out);
/* CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes: the alignment of a sub-buffer's
 * origin. */
size_t mpcl__sub_buffer_align(mpcl_context *ctx);

/* Blocking read of t's elements [first, first + count) as floats (f32,
 * f16 or bf16 storage): one position's logits without the whole batch's.
 * MPCL_ERR_SHAPE past t's end. */
mpcl_status mpcl__tensor_download_f32_at(const mpcl_tensor *t, size_t first, float *dst,
                                         size_t count);

/* Enqueues a copy of src's elements into dst from element dst_first on (no
 * alignment needed, unlike a view): a generation step's keys and values
 * into attention's cache. MPCL_ERR_SHAPE past dst's end or across dtypes. */
mpcl_status mpcl__tensor_copy_at(mpcl_tensor *dst, size_t dst_first, const mpcl_tensor *src);
/* mpcl_cast with its kernel from the program of `program` (every program
 * holds the casts): a float32 run's all-reduce casts to 16 bits without
 * building a 16-bit program. */
mpcl_status mpcl__cast(mpcl_context *ctx, mpcl_tensor *dst, const mpcl_tensor *src,
                       mpcl_dtype program);
/* Enqueues a copy of count elements of src from element src_first on into
 * dst from element dst_first on: a chunk of rows in or out of a larger
 * tensor (tied_lm_head.c). MPCL_ERR_SHAPE past either end or across dtypes. */
mpcl_status mpcl__tensor_copy_range(mpcl_tensor *dst, size_t dst_first, const mpcl_tensor *src,
                                    size_t src_first, size_t count);

/* Fills the first `bytes` of mem (a multiple of pattern_size) with the
 * pattern by clEnqueueFillBuffer (event as there), then mpcl__host_wrote. */
mpcl_status mpcl__fill_buffer(mpcl_context *ctx, cl_mem mem, const void *pattern,
                              size_t pattern_size, size_t bytes, cl_event *event);

/* The first B rows of t as a tensor value sharing t's memory: batches
 * smaller than the buffers allocated for max_batch. Never destroyed. */
mpcl_tensor mpcl__tensor_rows(const mpcl_tensor *t, size_t B);

/* t's elements as a rows x cols tensor value sharing t's memory (rows * cols
 * must equal t's count): an NHWC batch [B, H*W*C] as the [B*H*W, C] matrix of
 * a GEMM or a bias + activation. Never destroyed. */
mpcl_tensor mpcl__tensor_reshape(const mpcl_tensor *t, size_t rows, size_t cols);
/* t's elements as rows of `cols` (which divides its count): a batch [B, T C]
 * as its [B T, C] matrix, one row per position, pixel or channel vector. */
mpcl_tensor mpcl__tensor_by_last(const mpcl_tensor *t, size_t cols);

/* ---- launcher checks (ops.c), for every launcher of the area ---- */

/* Returns from the calling function with the status of `call` when it fails. */
#define TRY(call)                               \
    do {                                        \
        mpcl_status try_st_ = (call);           \
        if (try_st_ != MPCL_OK) return try_st_; \
    } while (0)

/* Each records an error naming the op and the tensor (`what`) and returns
 * it: t NULL or of another context (MPCL_ERR_INVALID_ARG); not f32, f16 or
 * bf16, or not `want` (MPCL_ERR_DTYPE); not rows x cols, or more elements
 * than a kernel's uint index reaches (MPCL_ERR_SHAPE). */
mpcl_status mpcl__check_present(mpcl_context *ctx, const mpcl_tensor *t, const char *op,
                                const char *what);
mpcl_status mpcl__check_storage(mpcl_context *ctx, const mpcl_tensor *t, const char *op,
                                const char *what);
mpcl_status mpcl__check_dtype(mpcl_context *ctx, const mpcl_tensor *t, mpcl_dtype want,
                              const char *op, const char *what);
mpcl_status mpcl__check_shape(mpcl_context *ctx, const mpcl_tensor *t, size_t rows, size_t cols,
                              const char *op, const char *what);
mpcl_status mpcl__check_count(mpcl_context *ctx, const mpcl_tensor *t, const char *op);

/* Sets argument `index` of k; a failure names the kernel and the index. */
mpcl_status mpcl__set_arg(mpcl_context *ctx, cl_kernel k, const char *name, cl_uint index,
                          size_t size, const void *value);

/* Sets the arguments of k from a list of (size, pointer) pairs ended by
 * MPCL_ARGS_END; a failure names the kernel and the argument index. */
mpcl_status mpcl__set_args(mpcl_context *ctx, cl_kernel k, const char *name, ...);
#define MPCL_ARG(x) sizeof(x), (const void *)&(x)
#define MPCL_ARGS_END (size_t)0

/* Workspace `slot` of ctx (MPCL__WORKSPACE_* in runtime/runtime.h) with at
 * least `bytes` bytes: grown when smaller (never shrunk), counted in the
 * context's device bytes. Valid until the next call for the same slot. */
mpcl_status mpcl__workspace(mpcl_context *ctx, int slot, size_t bytes, cl_mem *out);
/* A rows x cols tensor value of `dtype` over workspace `slot`, grown to fit:
 * it shares the workspace's memory and is never destroyed. */
mpcl_status mpcl__workspace_tensor(mpcl_context *ctx, int slot, mpcl_dtype dtype, size_t rows,
                                   size_t cols, mpcl_tensor *out);

/* Enqueues a 1-D kernel over n items; the global size is rounded up to a
 * multiple of `local` (0 lets the driver choose the work-group). */
mpcl_status mpcl__launch_1d(mpcl_context *ctx, cl_kernel k, const char *name, size_t n,
                            size_t local);
/* The largest power-of-two fraction of `want` (itself included) that k may
 * run as a work-group on ctx's device. Elementwise kernels over long ranges
 * want big groups: PoCL pays per work-group (the Adam update over 102k
 * elements took 729 us in groups of 64 and 60 us in groups of 256). */
size_t mpcl__local_size(mpcl_context *ctx, cl_kernel k, size_t want);
/* Enqueues a 2-D kernel; with `local`, global sizes are rounded up to it. */
mpcl_status mpcl__launch_2d(mpcl_context *ctx, cl_kernel k, const char *name, size_t gx, size_t gy,
                            const size_t *local);

/* ---- activations (ops.c) ---- */

/* POOLS_FIRST of the activation's row (include/mpcl/activations.h):
 * whether a max pooling after it may run before it. */
bool mpcl__activation_pools_first(mpcl_activation act);

/* ---- optimizer ---- */

/* The update's work-group and elements per work-item: an arena of a multiple
 * of MPCL__OPTIM_GRANULE elements is one launch. */
#define MPCL__OPTIM_GROUP 256
#define MPCL__OPTIM_VEC MPCL_ABI_ELEMENTWISE_VEC
#define MPCL__OPTIM_GRANULE (MPCL__OPTIM_GROUP * MPCL__OPTIM_VEC)

/* ---- loss scale ---- */

/* The state buffer: MPCL_ABI_LS_STATE_WORDS uints at the MPCL_ABI_LS_*
 * offsets of cl/abi.h (good_steps, found_inf, skipped_steps, last_found_inf). */
cl_mem mpcl__loss_scale_state_mem(const mpcl_loss_scale *ls);
cl_mem mpcl__loss_scale_scale_mem(const mpcl_loss_scale *ls);
/* Sets arguments 0..7 of a kernel that runs the scale update
 * (LOSS_SCALE_UPDATE_PARAMS in cl/loss_scale.cl): mpcl_loss_scale_update's
 * own, and the optimizer's end-of-step kernel. */
mpcl_status mpcl__loss_scale_set_update_args(mpcl_context *ctx, const mpcl_loss_scale *ls,
                                             cl_kernel k, const char *name);

/* mpcl_loss_forward_backward with the gradient divided by grad_rows (>=
 * the rows of pred; times the columns for a dense loss) instead of the
 * rows: a data-parallel replica holds a slice of a global batch of
 * grad_rows rows, so that the slices' gradients sum to the global batch's
 * (model.c's mpcl_model_forward_slice). */
mpcl_status mpcl__loss_forward_backward_rows(mpcl_context *ctx, mpcl_loss loss, mpcl_tensor *stats,
                                             mpcl_tensor *d_pred, const mpcl_tensor *pred,
                                             const mpcl_tensor *targets, const mpcl_tensor *scale,
                                             size_t grad_rows);
/* One chunk of rows of a loss call computed in pieces (a language-model
 * head's over a large vocabulary, tied_lm_head.c): the call's rows [row0,
 * row0 + pred->rows). A bad target is recorded with its row in the whole
 * call, and the stats count the call once, at the chunk that ends it. With
 * d_pred, the gradient as mpcl__loss_forward_backward_rows; without, the
 * forward alone (grad_rows unused). */
mpcl_status mpcl__loss_chunk(mpcl_context *ctx, mpcl_loss loss, mpcl_tensor *stats,
                             mpcl_tensor *d_pred, const mpcl_tensor *pred,
                             const mpcl_tensor *targets, const mpcl_tensor *scale, size_t grad_rows,
                             size_t row0, bool ends_call);

/* ---- gemm ---- */

/* Everything mpcl_gemm checks before it enqueues anything (the same
 * statuses and messages), for ops that run a GEMM after other launches and
 * must refuse before the first. */
mpcl_status mpcl__gemm_check(mpcl_context *ctx, mpcl_gemm_path path, bool trans_a, bool trans_b,
                             const mpcl_tensor *a, const mpcl_tensor *b, const mpcl_tensor *c);

/* Whether mpcl_gemm, given A (m x k, not transposed, of a_dtype) times
 * B^T for a B of n x k, first transposes B into its workspace: mpcl's own
 * kernels do for a large B, CLBlast and the bf16 dot kernels read B^T as
 * it is. A caller that multiplies by the same B^T many times can transpose
 * it once (mpcl__transpose) and multiply NN (tied_lm_head.c). */
bool mpcl__gemm_stages_bt(const mpcl_context *ctx, mpcl_gemm_path path, mpcl_dtype a_dtype,
                          size_t m, size_t n, size_t k);

/* Whether the path multiplies A and B stored in `storage` (f16 or bf16)
 * into an f32 C: it accumulates in f32 and can hand the sums on unrounded. */
bool mpcl__gemm_f32_c_of_16_bit(mpcl_gemm_path path, mpcl_dtype storage);

/* What mpcl__gemm_fused adds to C = op(A) op(B): a bias [1, N] f32 per
 * column and an addend of C's dtype and shape (not C itself); NULL: none. */
typedef struct mpcl__gemm_epilogue {
    const mpcl_tensor *bias, *addend;
} mpcl__gemm_epilogue;

/* The epilogue as mpcl's GEMM kernels take it: the word (cl/abi.h's
 * MPCL_ABI_GEMM_EPI_*) and the tensors' buffers, C's standing in for those
 * it does not use (e NULL: none). */
typedef struct mpcl__gemm_epilogue_args {
    cl_uint word;
    cl_mem bias, addend;
} mpcl__gemm_epilogue_args;
mpcl__gemm_epilogue_args mpcl__gemm_epilogue_args_of(const mpcl__gemm_epilogue *e,
                                                     const mpcl_tensor *c);

/* C = op(A) op(B) + bias + addend: in the GEMM kernel's stores on mpcl's
 * own paths and mpcl-mma (one pass over C), as separate launches on the
 * others (the bias kernel, mpcl_add). Checked as mpcl_gemm, and the epilogue's tensors
 * too, before anything is enqueued. Activations keep their own pass
 * (mpcl__bias_act_gemm_forward says why). */
mpcl_status mpcl__gemm_fused(mpcl_context *ctx, mpcl_gemm_path path, bool trans_a, bool trans_b,
                             const mpcl_tensor *a, const mpcl_tensor *b, mpcl_tensor *c,
                             const mpcl__gemm_epilogue *e);

/* mpcl-mma (gemm_mma.c): op(A) m x k times op(B) k x n into C, checked,
 * with the epilogue e (NULL: none) in the kernel's stores. */
mpcl_status mpcl__gemm_run_mma(mpcl_context *ctx, bool ta, bool tb, size_t m, size_t n, size_t k,
                               float alpha, const mpcl_tensor *a, const mpcl_tensor *b, float beta,
                               mpcl_tensor *c, const mpcl__gemm_epilogue *e);
/* The mpcl-mma kernel a call with an m x n C runs (for tests; K does not
 * enter the choice). */
const char *mpcl__gemm_mma_kernel(const mpcl_context *ctx, bool ta, bool tb, size_t m, size_t n,
                                  bool c_f32);
/* Forces mpcl-mma's pipelined tile: a row of MPCL_ABI_MMA_PIPE_TILES by its
 * index, their count for mpcl_gemm_mma alone, or -1 for the usual choice
 * (MPCL_MMA_TILE, else by the shape), so that tests cover every row. */
void mpcl__gemm_mma_force_tile(mpcl_context *ctx, int tile);
/* Whether the device's local memory holds that row's pipelined kernels
 * (every transpose pair); the choice never takes a row that does not. */
bool mpcl__gemm_mma_tile_fits(const mpcl_context *ctx, int tile);

/* Forces the bias gradient's shape (ops.c): in row parts, as on GPUs (> 0),
 * in groups per column block, as on CPUs (< 0), or the device's (0), so that
 * tests cover both on any device. */
void mpcl__bias_grad_force_parts(mpcl_context *ctx, int parts);

/* Forces the tiles of mpcl's GEMM (every kernel takes any N: narrower
 * outputs clamp their columns) and the tiles per item of the 4x16 kernel (0:
 * by the shape), so that tests cover every kernel on any device. */
void mpcl__gemm_force_tiles(mpcl_context *ctx, mpcl__gemm_tiles tiles, unsigned strip);

/* in holds `count` matrices of in->rows / count x in->cols, one after the
 * other; out (as many elements, in's dtype) gets each transposed, in the same
 * order: bits copied, one launch (cl/conv.cl's mpcl_transpose). The GEMM
 * stages a large transposed B with it (gemm.c); the direct convolution its
 * weights per tap (conv.c). */
mpcl_status mpcl__transpose(mpcl_context *ctx, mpcl_tensor *out, const mpcl_tensor *in,
                            size_t count);

#endif
