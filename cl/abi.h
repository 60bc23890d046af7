/* The host/device ABI: every constant that the C library and the OpenCL
 * kernels in cl/ must agree on, written once. Plain #defines and comments
 * only, so the file is valid C11 and OpenCL C 1.2.
 *
 * The C side includes it as "cl/abi.h" (src/compute/compute.h). The device
 * side gets it through the embedded program: cl/meson.build lists it first,
 * cl/embed.py checks that it is first, and src/runtime/kernels.c joins the
 * files in that order, so it heads every library program (also when
 * MPCL_CL_DIR loads cl/ from disk). tests/test_abi.c runs mpcl_abi_echo
 * (cl/abi_check.cl) and compares every value in MPCL_ABI_LIST as the device
 * compiler saw it with the C compiler's. A new constant goes into its group
 * below and into MPCL_ABI_LIST (the test fails when one is missing there).
 *
 * Public enums and defines that must equal these values (mpcl_activation,
 * mpcl_loss, MPCL_LOSS_STATS_COLS, MPCL_LOSS_SCALE_CHECK_PER_LAUNCH) stay in
 * the public headers, which do not install this file; the C sources that use
 * them _Static_assert the match. */
#ifndef MPCL_CL_ABI_H
#define MPCL_CL_ABI_H

/* Loss statistics, one layout for every loss (softmax cross-entropy and the
 * dense losses): 32-bit word offsets in the stats tensor. cl/loss.cl
 * accumulates them; src/compute/losses.c zeroes and reads them. LOSS and
 * LOSS_COMP hold f32 bits (the Kahan sum of the loss terms and its
 * compensation), as do METRIC and METRIC_COMP (a real-valued metric: MAE's
 * sum of |y - t|); CORRECT counts a counted metric's hits (accuracy, binary
 * accuracy). A loss uses one of the two metric sums; the read adds them.
 * SAMPLES counts valid rows, TERMS the loss terms summed (a row each for
 * softmax cross-entropy, an element each for the dense losses), CALLS the
 * loss calls, BAD the rows with a bad target; BAD_CALL, BAD_ROW, BAD_COL and
 * BAD_TARGET name the first (BAD_TARGET: an int label for softmax
 * cross-entropy, f32 bits for the dense losses). KIND is the loss code
 * (MPCL_ABI_LOSS_*) plus one of the last call, 0 before any. WORDS is how
 * many are used; the public MPCL_LOSS_STATS_COLS must be at least that. */
#define MPCL_ABI_LOSS_STAT_LOSS 0
#define MPCL_ABI_LOSS_STAT_LOSS_COMP 1
#define MPCL_ABI_LOSS_STAT_CORRECT 2
#define MPCL_ABI_LOSS_STAT_SAMPLES 3
#define MPCL_ABI_LOSS_STAT_CALLS 4
#define MPCL_ABI_LOSS_STAT_BAD 5
#define MPCL_ABI_LOSS_STAT_BAD_CALL 6
#define MPCL_ABI_LOSS_STAT_BAD_ROW 7
#define MPCL_ABI_LOSS_STAT_BAD_TARGET 8
#define MPCL_ABI_LOSS_STAT_METRIC 9
#define MPCL_ABI_LOSS_STAT_METRIC_COMP 10
#define MPCL_ABI_LOSS_STAT_TERMS 11
#define MPCL_ABI_LOSS_STAT_BAD_COL 12
#define MPCL_ABI_LOSS_STAT_KIND 13
#define MPCL_ABI_LOSS_STAT_WORDS 14

/* Loss codes: the values of the public enum mpcl_loss (include/mpcl/losses.h,
 * asserted in losses.c); each loss kernel writes its own (plus one) into the
 * KIND word above. */
#define MPCL_ABI_LOSS_SPARSE_XENT 0
#define MPCL_ABI_LOSS_BINARY_XENT 1
#define MPCL_ABI_LOSS_MSE 2
#define MPCL_ABI_LOSS_COUNT 3

/* The work-group of the loss kernels: their reqd_work_group_size and the
 * size of their local reductions (a power of two). A batch runs in groups
 * of MPCL_ABI_LOSS_GROUP_ROWS rows each (the softmax's eight rows an item;
 * src/compute/losses.c launches ceil(rows / that) groups). One group adds
 * its sums into the statistics itself; several write theirs as partials
 * of MPCL_ABI_LOSS_PART_WORDS words (the MPCL_ABI_LOSS_PART_* offsets) for
 * mpcl_loss_finish, which adds them in group order: row order, so the
 * first bad row is the first group's that has one. */
#define MPCL_ABI_LOSS_WG 64
#define MPCL_ABI_LOSS_GROUP_ROWS 512
/* The rows a group of the softmax's shared-rows kernel (wide rows on GPUs,
 * its items sharing each row) takes in turn: its launch has ceil(rows /
 * this) groups. */
#define MPCL_ABI_LOSS_SHARED_ROWS 16
#define MPCL_ABI_LOSS_PART_LOSS 0
#define MPCL_ABI_LOSS_PART_METRIC 1
#define MPCL_ABI_LOSS_PART_CORRECT 2
#define MPCL_ABI_LOSS_PART_VALID 3
#define MPCL_ABI_LOSS_PART_TERMS 4
#define MPCL_ABI_LOSS_PART_BAD 5
#define MPCL_ABI_LOSS_PART_FIRST_BAD 6
#define MPCL_ABI_LOSS_PART_BAD_COL 7
#define MPCL_ABI_LOSS_PART_BAD_TARGET 8
#define MPCL_ABI_LOSS_PART_WORDS 9

/* Loss-scale state: uint word offsets in the scaler's state tensor.
 * cl/loss_scale.cl writes them (the check ORs FOUND_INF, the update advances
 * the rest and clears FOUND_INF); src/compute/loss_scale.c uploads and reads
 * them; the optimizer kernels read FOUND_INF to skip a step. */
#define MPCL_ABI_LS_GOOD 0
#define MPCL_ABI_LS_FOUND_INF 1
#define MPCL_ABI_LS_SKIPPED 2
#define MPCL_ABI_LS_LAST_FOUND_INF 3
#define MPCL_ABI_LS_STATE_WORDS 4

/* Gradient tensors per mpcl_loss_scale_check launch: the kernel's (g, n)
 * argument pairs, followed by the state buffer; loss_scale.c sets them all
 * (the public MPCL_LOSS_SCALE_CHECK_PER_LAUNCH). The kernel spells out eight
 * and refuses to build with another value. */
#define MPCL_ABI_LS_CHECK_TENSORS 8

/* Arguments of the scale update that lead every kernel running it
 * (LOSS_SCALE_UPDATE_PARAMS in cl/loss_scale.cl: scale, state, dynamic,
 * growth_interval, growth_factor, backoff_factor, min_scale, max_scale);
 * the optimizer's end-of-step kernel sets its own from this index on. */
#define MPCL_ABI_LS_UPDATE_ARGS 8

/* mpcl's GEMM tiles: the rows and columns of C in one tile of cl/gemm.cl:
 * 16x16 (mpcl_gemm_w16*), 4x16 (mpcl_gemm_r4w16*) and 8x8 (mpcl_gemm_w8*).
 * src/compute/gemm.c picks one and launches ceil(N / columns) x
 * ceil(M / (rows x strip)) items, or ceil(N / (columns x strip)) x
 * ceil(M / rows) for strips along the columns. The kernels' vector types
 * (float16, float8, and float4 columns of A) fix these values: gemm.cl
 * refuses to build with others. */
#define MPCL_ABI_GEMM_TILE_WIDE 16
#define MPCL_ABI_GEMM_TILE_NARROW 8
#define MPCL_ABI_GEMM_TILE_FLAT_ROWS 4
/* The attention's block layout (cl/attention_block.cl): the query or key
 * rows of one head that an item computes (its named accumulators fix the
 * count), and the vector width its packed operands are padded to. */
#define MPCL_ABI_ATTN_ROWS 8
#define MPCL_ABI_ATTN_CHUNK 16
/* The attention's tile layout (cl/attention_tile.cl): its products compute
 * TILE x TILE tiles of a head's result, one per work-group of TILE_ITEMS x
 * TILE_ITEMS items (their reqd_work_group_size); src/nn/
 * causal_self_attention.c launches ceil(N / TILE) x ceil(T / TILE) x heads
 * such groups. Its row kernels (the softmax and its backward) take a
 * work-group of MPCL_ABI_BATCHNORM_WG items per row. */
#define MPCL_ABI_ATTN_TILE 64
#define MPCL_ABI_ATTN_TILE_ITEMS 16
/* The layer norm's CPU backward (cl/layernorm.cl's
 * mpcl_layernorm_backward_rows): the rows an item takes; src/nn/
 * layer_normalization.c launches ceil(rows / this) items and sizes the
 * workspace of their column sums by that count. */
#define MPCL_ABI_LN_BLOCK_ROWS 16
/* The most 4x16 tiles one item of mpcl_gemm_r4w16* computes down the rows,
 * and the most 16x16 tiles one of mpcl_gemm_w16* computes along the columns
 * (their private partial sums are sized by them); the host passes 1 to
 * mpcl_gemm_w8*. */
#define MPCL_ABI_GEMM_STRIP_MAX 8
#define MPCL_ABI_GEMM_COL_STRIP_MAX 4
/* The epilogue word of mpcl's GEMM kernels (cl/gemm.cl): which of the
 * bias and addend arguments they add. 0: C alone. */
#define MPCL_ABI_GEMM_EPI_BIAS 1
#define MPCL_ABI_GEMM_EPI_ADDEND 2
/* mpcl-mma's tile (cl/gemm_mma_nvidia.cl): one work-group of this many items
 * (four warps) computes MMA_TILE x MMA_TILE of C; src/compute/gemm_mma.c
 * launches ceil(N / MMA_TILE) x ceil(M / MMA_TILE) groups. */
#define MPCL_ABI_MMA_ITEMS 128
#define MPCL_ABI_MMA_TILE 64
/* mpcl-mma's pipelined tiles (cl/gemm_mma_nvidia.cl), one row each:
 * X(name, rows, cols, warps down, warps across). A work-group of 32 x warps
 * items computes rows x cols of C, each warp its (rows / warps down) x (cols
 * / warps across) part; K goes in blocks of MMA_PIPE_BK, two blocks in local
 * memory at once. src/compute/gemm_mma.c picks a row per call (or
 * MPCL_MMA_TILE names one); the shapes are for tuning on a GPU. */
#define MPCL_ABI_MMA_PIPE_TILES(X) \
    X(128x128w8, 128, 128, 2, 4)   \
    X(128x128w4, 128, 128, 2, 2)   \
    X(128x64w4, 128, 64, 2, 2)     \
    X(64x64w4, 64, 64, 2, 2)
#define MPCL_ABI_MMA_PIPE_BK 32
/* Their local memory comes as one argument (a static array per kernel would
 * count against every kernel of the program on some implementations, e.g.
 * Oclgrind): two K blocks of op(A) and of op(B), in 16-bit elements, each
 * laid out as the matrix is stored (ta, tb: transposed), its rows padded by
 * MMA_PIPE_PAD elements; then, built with MPCL_MMA_EMULATE alone, six words
 * an item for the emulation's exchanges. */
#define MPCL_ABI_MMA_PIPE_PAD 8
#define MPCL_ABI_MMA_PIPE_A_ELEMS(rows, ta)                         \
    ((ta) ? MPCL_ABI_MMA_PIPE_BK * ((rows) + MPCL_ABI_MMA_PIPE_PAD) \
          : (rows) * (MPCL_ABI_MMA_PIPE_BK + MPCL_ABI_MMA_PIPE_PAD))
#define MPCL_ABI_MMA_PIPE_B_ELEMS(cols, tb)                         \
    ((tb) ? (cols) * (MPCL_ABI_MMA_PIPE_BK + MPCL_ABI_MMA_PIPE_PAD) \
          : MPCL_ABI_MMA_PIPE_BK * ((cols) + MPCL_ABI_MMA_PIPE_PAD))
#define MPCL_ABI_MMA_PIPE_LOCAL_BYTES(rows, cols, items, ta, tb, emulated)                 \
    (2 * 2 * (MPCL_ABI_MMA_PIPE_A_ELEMS(rows, ta) + MPCL_ABI_MMA_PIPE_B_ELEMS(cols, tb)) + \
     ((emulated) ? 4 * 6 * (items) : 0))
/* That argument's index: after mpcl_gemm_mma's thirteen (a, b, c, m, n, k,
 * ta, tb, alpha, beta, and the epilogue's bias, addend and word). */
#define MPCL_ABI_MMA_PIPE_LOCAL_ARG 13

/* Floats per work-item of mpcl_copy_f32x4 (cl/fill.cl, a float4 each): the
 * host passes the element count divided by this (src/compute/quickbench.c). */
#define MPCL_ABI_COPY_F32_LANES 4

/* Elementwise kernels (cl/activation.cl, cl/cast.cl, through LOAD8/STORE8 of
 * cl/common.cl): elements per work-item; src/compute/ops.c launches
 * ceil(n / VEC) items and picks the _v8 forms when n is a multiple of it.
 * The bias gradient: each item sums BIAS_GRAD_COLS columns over one of
 * BIAS_GRAD_PARTS row blocks; a group (its reqd_work_group_size) is one
 * column block. */
#define MPCL_ABI_ELEMENTWISE_VEC 8
#define MPCL_ABI_BIAS_GRAD_COLS 32
#define MPCL_ABI_BIAS_GRAD_PARTS 16

/* The optimizer (cl/optim.cl, src/compute/optim.c). Step state: uint word
 * offsets of the step tensor; mpcl_optim_set_step and mpcl_optim_advance
 * write it, the Adam update reads the bias corrections (f32 bits) of the
 * coming step, optim.c reads COUNT. Clip state: f32 word offsets of the clip
 * tensor; mpcl_optim_grad_norm writes the global norm and the factor, the
 * updates multiply gradients by FACTOR, optim.c reads NORM. The norm's first
 * pass runs NORM_GROUPS work-groups of NORM_WG items (its
 * reqd_work_group_size; a power of two), each writing one partial sum. */
#define MPCL_ABI_OPTIM_STEP_COUNT 0
#define MPCL_ABI_OPTIM_STEP_BC1 1
#define MPCL_ABI_OPTIM_STEP_BC2 2
#define MPCL_ABI_OPTIM_STEP_WORDS 4
#define MPCL_ABI_OPTIM_CLIP_NORM 0
#define MPCL_ABI_OPTIM_CLIP_FACTOR 1
#define MPCL_ABI_OPTIM_CLIP_WORDS 2
#define MPCL_ABI_OPTIM_NORM_WG 64
#define MPCL_ABI_OPTIM_NORM_GROUPS 64

/* Batch normalization (cl/batchnorm.cl, src/compute/batchnorm.c): one
 * work-group of BATCHNORM_WG items (its reqd_work_group_size; a power of
 * two) per channel, reducing over the rows in local memory. */
#define MPCL_ABI_BATCHNORM_WG 64

/* Every constant above, for the echo kernel and its test: X(name) each. */
#define MPCL_ABI_LIST(X)              \
    X(MPCL_ABI_LOSS_STAT_LOSS)        \
    X(MPCL_ABI_LOSS_STAT_LOSS_COMP)   \
    X(MPCL_ABI_LOSS_STAT_CORRECT)     \
    X(MPCL_ABI_LOSS_STAT_SAMPLES)     \
    X(MPCL_ABI_LOSS_STAT_CALLS)       \
    X(MPCL_ABI_LOSS_STAT_BAD)         \
    X(MPCL_ABI_LOSS_STAT_BAD_CALL)    \
    X(MPCL_ABI_LOSS_STAT_BAD_ROW)     \
    X(MPCL_ABI_LOSS_STAT_BAD_TARGET)  \
    X(MPCL_ABI_LOSS_STAT_METRIC)      \
    X(MPCL_ABI_LOSS_STAT_METRIC_COMP) \
    X(MPCL_ABI_LOSS_STAT_TERMS)       \
    X(MPCL_ABI_LOSS_STAT_BAD_COL)     \
    X(MPCL_ABI_LOSS_STAT_KIND)        \
    X(MPCL_ABI_LOSS_STAT_WORDS)       \
    X(MPCL_ABI_LOSS_SPARSE_XENT)      \
    X(MPCL_ABI_LOSS_BINARY_XENT)      \
    X(MPCL_ABI_LOSS_MSE)              \
    X(MPCL_ABI_LOSS_COUNT)            \
    X(MPCL_ABI_LOSS_WG)               \
    X(MPCL_ABI_LOSS_GROUP_ROWS)       \
    X(MPCL_ABI_LOSS_SHARED_ROWS)      \
    X(MPCL_ABI_LOSS_PART_LOSS)        \
    X(MPCL_ABI_LOSS_PART_METRIC)      \
    X(MPCL_ABI_LOSS_PART_CORRECT)     \
    X(MPCL_ABI_LOSS_PART_VALID)       \
    X(MPCL_ABI_LOSS_PART_TERMS)       \
    X(MPCL_ABI_LOSS_PART_BAD)         \
    X(MPCL_ABI_LOSS_PART_FIRST_BAD)   \
    X(MPCL_ABI_LOSS_PART_BAD_COL)     \
    X(MPCL_ABI_LOSS_PART_BAD_TARGET)  \
    X(MPCL_ABI_LOSS_PART_WORDS)       \
    X(MPCL_ABI_LS_GOOD)               \
    X(MPCL_ABI_LS_FOUND_INF)          \
    X(MPCL_ABI_LS_SKIPPED)            \
    X(MPCL_ABI_LS_LAST_FOUND_INF)     \
    X(MPCL_ABI_LS_STATE_WORDS)        \
    X(MPCL_ABI_LS_CHECK_TENSORS)      \
    X(MPCL_ABI_LS_UPDATE_ARGS)        \
    X(MPCL_ABI_GEMM_TILE_WIDE)        \
    X(MPCL_ABI_GEMM_TILE_NARROW)      \
    X(MPCL_ABI_GEMM_TILE_FLAT_ROWS)   \
    X(MPCL_ABI_GEMM_STRIP_MAX)        \
    X(MPCL_ABI_GEMM_COL_STRIP_MAX)    \
    X(MPCL_ABI_GEMM_EPI_BIAS)         \
    X(MPCL_ABI_GEMM_EPI_ADDEND)       \
    X(MPCL_ABI_MMA_ITEMS)             \
    X(MPCL_ABI_MMA_TILE)              \
    X(MPCL_ABI_MMA_PIPE_BK)           \
    X(MPCL_ABI_MMA_PIPE_PAD)          \
    X(MPCL_ABI_MMA_PIPE_LOCAL_ARG)    \
    X(MPCL_ABI_COPY_F32_LANES)        \
    X(MPCL_ABI_ELEMENTWISE_VEC)       \
    X(MPCL_ABI_BIAS_GRAD_COLS)        \
    X(MPCL_ABI_BIAS_GRAD_PARTS)       \
    X(MPCL_ABI_OPTIM_STEP_COUNT)      \
    X(MPCL_ABI_OPTIM_STEP_BC1)        \
    X(MPCL_ABI_OPTIM_STEP_BC2)        \
    X(MPCL_ABI_OPTIM_STEP_WORDS)      \
    X(MPCL_ABI_OPTIM_CLIP_NORM)       \
    X(MPCL_ABI_OPTIM_CLIP_FACTOR)     \
    X(MPCL_ABI_OPTIM_CLIP_WORDS)      \
    X(MPCL_ABI_OPTIM_NORM_WG)         \
    X(MPCL_ABI_OPTIM_NORM_GROUPS)     \
    X(MPCL_ABI_BATCHNORM_WG)          \
    X(MPCL_ABI_ATTN_ROWS)             \
    X(MPCL_ABI_ATTN_CHUNK)            \
    X(MPCL_ABI_ATTN_TILE)             \
    X(MPCL_ABI_ATTN_TILE_ITEMS)       \
    X(MPCL_ABI_LN_BLOCK_ROWS)

#endif
