/* GPT-2 as an mpcl model, and its weights to and from a Hugging Face
 * folder's (gpt2_folder.h).
 *
 * A GPT of config c on sequences of T tokens is the layer list
 *   input_shape=T;
 *   token_pos_embedding vocabulary_size=V sequence_length=P embedding_dim=C;
 *   transformer_decoder num_heads=H intermediate_dim=4C layer_norm_epsilon=e
 *     use_bias=true                                     (n_layer times);
 *   layer_normalization epsilon=e;
 *   tied_lm_head
 * with a sparse categorical cross-entropy per position (labels int32 [B, T],
 * the next tokens). Its parameter rows are, in order,
 *   token_pos_embedding_0.token_embeddings [V, C], .position_embeddings [P, C],
 *   transformer_decoder_N.ln_1.gamma [C], .ln_1.beta [C],
 *     .attn.c_attn.kernel [C, 3C], .attn.c_attn.bias [3C],
 *     .attn.c_proj.kernel [C, C], .attn.c_proj.bias [C],
 *     .ln_2.gamma [C], .ln_2.beta [C],
 *     .mlp.c_fc.kernel [C, 4C], .mlp.c_fc.bias [4C],
 *     .mlp.c_proj.kernel [4C, C], .mlp.c_proj.bias [C]      (N = 0 .. n_layer-1),
 *   layer_normalization_0.gamma [C], .beta [C]
 * -- the canonical tensors of gpt2_folder.h (wte, wpe, h.N.*, ln_f) one to
 * one, in the same order and shapes (GPT-2's Conv1D [in, out] is the Keras
 * kernel [in, out]); the output projection is token_embeddings itself. */
#ifndef MPCL_GPT_H
#define MPCL_GPT_H

#include <stddef.h>

#include "mpcl/context.h"
#include "mpcl/gpt2_folder.h"
#include "mpcl/model.h"
#include "mpcl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

/* Sets params' input shape to (context,), its layers to the GPT of config
 * (above), classes to vocab_size and the loss to sparse categorical
 * cross-entropy; every other field (policy, optimizer, max_batch, seed...)
 * is kept as the caller set it. The kinds are named, not linked: a library
 * without one fails when the model is built. Errors (MPCL_ERR_INVALID_ARG,
 * params unchanged): those of mpcl_gpt2_config_check (a field 0, n_embd not
 * a multiple of n_head...), context 0 or above n_positions, n_layer + 3
 * layers above MPCL_MAX_LAYERS. ctx may be NULL. */
mpcl_status mpcl_gpt_model_params(mpcl_context *ctx, const mpcl_gpt2_config *config, size_t context,
                                  mpcl_model_params *params);

/* The config of params when they are a GPT as mpcl_gpt_model_params makes
 * one (any context): the inverse of it. Anything else is refused
 * (MPCL_ERR_INVALID_ARG naming the layer and what differs: another kind,
 * intermediate_dim other than 0 or 4C, no biases, layer norms of different
 * epsilons, another loss...). */
mpcl_status mpcl_gpt_config_of(const mpcl_model_params *params, mpcl_gpt2_config *out);

/* Writes w's tensors into m's parameters (the f32 masters and the working
 * copy), tensor i into row i: m must be a GPT of w's config (its params'
 * config, mpcl_gpt_config_of, equal to w's) and each tensor's name and
 * shape those of row i (wte.weight -> token_pos_embedding_0.token_embeddings,
 * h.N.attn.c_attn.weight -> transformer_decoder_N.attn.c_attn.kernel...).
 * Errors: MPCL_ERR_INVALID_ARG when m is not a GPT, MPCL_ERR_FORMAT naming
 * the tensor and both shapes for a missing, extra, misnamed or misshapen
 * tensor -- checked before anything is written, so m is unchanged -- and
 * the device's errors while writing. The optimizer's state and step are
 * left as they are. */
mpcl_status mpcl_model_load_gpt2(mpcl_model *m, const mpcl_gpt2_weights *w);

/* m's parameters (the f32 masters) as GPT-2 weights of its config, for
 * mpcl_gpt2_folder_write; *out is the caller's (mpcl_gpt2_weights_destroy).
 * Errors: MPCL_ERR_INVALID_ARG when m is not a GPT, those of
 * mpcl_gpt2_weights_new and of the device. */
mpcl_status mpcl_model_gpt2_weights(mpcl_model *m, mpcl_gpt2_weights **out);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
