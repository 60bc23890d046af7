/* GPT-2 weights as a Hugging Face folder: config.json and model.safetensors,
 * as transformers' GPT2LMHeadModel.save_pretrained writes them and
 * GPT2LMHeadModel.from_pretrained reads them.
 *
 * In memory the weights are the model's parameters in one fixed (canonical)
 * order, each with its name without the "transformer." prefix, its shape and
 * its f32 data, all in one block:
 *
 *   wte.weight [V, C], wpe.weight [P, C],
 *   for each layer N = 0 .. n_layer-1:
 *     h.N.ln_1.weight [C], h.N.ln_1.bias [C],
 *     h.N.attn.c_attn.weight [C, 3C], h.N.attn.c_attn.bias [3C],
 *     h.N.attn.c_proj.weight [C, C], h.N.attn.c_proj.bias [C],
 *     h.N.ln_2.weight [C], h.N.ln_2.bias [C],
 *     h.N.mlp.c_fc.weight [C, 4C], h.N.mlp.c_fc.bias [4C],
 *     h.N.mlp.c_proj.weight [4C, C], h.N.mlp.c_proj.bias [C],
 *   ln_f.weight [C], ln_f.bias [C]
 *
 * (V vocab_size, P n_positions, C n_embd). The linear layers keep GPT-2's
 * Conv1D layout, [in, out], row-major: y = x W + b. The output projection is
 * wte itself (tied), so there is no lm_head tensor. */
#ifndef MPCL_GPT2_FOLDER_H
#define MPCL_GPT2_FOLDER_H

#include <stddef.h>

#include "mpcl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

typedef struct mpcl_gpt2_config {
    size_t n_layer, n_head, n_embd, n_positions, vocab_size;
    double layer_norm_epsilon;
} mpcl_gpt2_config;

/* The largest size any config field may have (n_embd, vocab_size...). */
#define MPCL_GPT2_MAX_SIZE (1u << 24)
/* Tensors per layer, in the order above. */
#define MPCL_GPT2_LAYER_TENSORS 12
/* The longest canonical name ("h.16777215.attn.c_attn.weight") and its NUL. */
#define MPCL_GPT2_NAME_MAX 48

/* Every size from 1 to MPCL_GPT2_MAX_SIZE, n_embd a multiple of n_head, a
 * finite layer_norm_epsilon above 0, and every tensor's element count
 * within size_t: MPCL_ERR_INVALID_ARG naming the field otherwise. */
mpcl_status mpcl_gpt2_config_check(const mpcl_gpt2_config *config);

typedef struct mpcl_gpt2_tensor {
    char name[MPCL_GPT2_NAME_MAX]; /* canonical: "h.3.mlp.c_fc.weight" */
    size_t ndim;                   /* 1 or 2 */
    size_t shape[2];               /* shape[1] is 1 when ndim is 1 */
    size_t count;                  /* elements */
    size_t offset;                 /* of data in the weights' block, in floats */
    float *data;                   /* into the block */
} mpcl_gpt2_tensor;

typedef struct mpcl_gpt2_weights {
    mpcl_gpt2_config config;
    size_t count;              /* 2 + MPCL_GPT2_LAYER_TENSORS * n_layer + 2 */
    mpcl_gpt2_tensor *tensors; /* canonical order */
    size_t total;              /* floats in the block: the sum of the counts */
    float *data;               /* the block: the tensors back to back */
} mpcl_gpt2_weights;

/* Weights of that config, every element 0, for a writer to fill.
 * Errors: those of mpcl_gpt2_config_check, MPCL_ERR_OUT_OF_MEMORY. */
mpcl_status mpcl_gpt2_weights_new(const mpcl_gpt2_config *config, mpcl_gpt2_weights **out);
void mpcl_gpt2_weights_destroy(mpcl_gpt2_weights *w);
/* The tensor of that canonical name (no "transformer." prefix); NULL when
 * there is none. */
const mpcl_gpt2_tensor *mpcl_gpt2_weights_find(const mpcl_gpt2_weights *w, const char *name);

/* The config in <folder>/config.json. Read: n_layer, n_head, n_embd,
 * n_positions, vocab_size (required), layer_norm_epsilon (default 1e-5).
 * Checked when present: model_type "gpt2", n_ctx equal to n_positions,
 * activation_function gelu_new or gelu_pytorch_tanh (the same function),
 * n_inner null or 4 n_embd, tie_word_embeddings and scale_attn_weights true,
 * scale_attn_by_inverse_layer_idx and add_cross_attention false (the keys
 * that would change the model mpcl computes). Other keys are ignored.
 * Errors: MPCL_ERR_IO when it cannot be read, MPCL_ERR_FORMAT naming the
 * file, the key and its line for anything wrong, and those of
 * mpcl_gpt2_config_check as MPCL_ERR_FORMAT. */
mpcl_status mpcl_gpt2_config_read(const char *folder, mpcl_gpt2_config *out);

/* The whole folder: its config, then every tensor of model.safetensors.
 * Names with or without the "transformer." prefix (one or the other for all
 * of them); F32, F16 and BF16 data, converted to f32 exactly. Accepted and
 * ignored: the buffers h.N.attn.bias and h.N.attn.masked_bias that older
 * transformers saved. Accepted: lm_head.weight when it has wte's shape and
 * the same values (the tie; any other value is refused, since mpcl's output
 * projection is wte). Refused with MPCL_ERR_FORMAT naming the file and the
 * tensor: a missing tensor, one mpcl does not know, a shape other than the
 * config's (expected and found shapes given), another dtype, a tensor name
 * with and another without the prefix. */
mpcl_status mpcl_gpt2_folder_read(const char *folder, mpcl_gpt2_weights **out);

/* Writes w as a folder transformers loads: config.json (GPT-2's keys and
 * defaults: architectures ["GPT2LMHeadModel"], dropouts 0.1,
 * initializer_range 0.02, ...), and model.safetensors (F32 tensors named
 * "transformer.<canonical name>", metadata {"format": "pt"}).
 * Nothing half-written: a new folder (folder missing, or an empty folder)
 * is written whole into <folder>.tmp-PID-N beside it and renamed to folder
 * at the end (a killed writer's temporary folder is removed by the next
 * write to the same folder). An existing GPT-2 folder (its config.json has
 * "model_type": "gpt2") keeps its other files (a tokenizer...) and has its
 * two files replaced, each atomically, model.safetensors first: a kill
 * between the two leaves the new weights beside the old config, which the
 * reader refuses whenever their sizes differ. Any other non-empty folder, or
 * a path that is not a folder, is refused (MPCL_ERR_IO) and left alone.
 * Errors: MPCL_ERR_INVALID_ARG when w's tensors are not its config's,
 * MPCL_ERR_IO naming the path. */
mpcl_status mpcl_gpt2_folder_write(const char *folder, const mpcl_gpt2_weights *w);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
