/* Text generation with a GPT: a model whose first layer is
 * token_pos_embedding (int32 token ids [B, T] in) and whose output is
 * (T, V) logits per position, run on one sample (max_batch >= 1).
 *
 * Each new token is drawn on the host from the logits of the last real
 * position: softmax(logits / temperature) in double over the top_k most
 * likely tokens (all with top_k 0), or the argmax with temperature 0. The
 * draw is a uniform from splitmix64 (rng.h) seeded with seed, one per
 * token, so that the same seed gives the same text on every device.
 *
 * The context: the model takes exactly T = mpcl_model_positions tokens. A
 * prompt of more than T tokens is refused. Generation goes past T with a
 * sliding window: the next token is predicted from the last T tokens.
 * Shorter windows are padded on the right, which is exact: with causal
 * attention the logits at position t depend only on tokens 0..t.
 *
 * When every layer can run one position at a time (a key/value cache in
 * causal self-attention; see mpcl__layer_kind.forward_step), the window is
 * computed once and each new token costs one position's work until the
 * window is full; otherwise, and after the window has slid, the whole
 * window is computed for each token. Both give the same tokens up to float
 * rounding. */
#ifndef MPCL_GENERATE_H
#define MPCL_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "mpcl/model.h"
#include "mpcl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

typedef struct mpcl_sample_params {
    double temperature; /* 1.0; 0 takes the argmax (greedy); finite, >= 0 */
    size_t top_k;       /* 0: every token; else the k most likely (ties: the lower id) */
    uint64_t seed;      /* 42 */
} mpcl_sample_params;

mpcl_sample_params mpcl_sample_default_params(void);

/* MPCL_ERR_INVALID_ARG naming the field for a temperature that is negative
 * or not finite. ctx may be NULL. */
mpcl_status mpcl_sample_check(mpcl_context *ctx, const mpcl_sample_params *sp);

/* One token drawn from logits[0..vocab): the argmax (the lowest id among
 * equals) when temperature is 0 or top_k is 1; else, with u uniform in
 * [0, 1) from mpcl_rng_next(rng_state) (53 bits), the first candidate in id
 * order whose running sum of probabilities exceeds u times their total.
 * MPCL_ERR_INVALID_ARG for a non-finite logit (naming its id), vocab 0, or
 * bad params. Greedy draws no number. */
mpcl_status mpcl_sample_logits(mpcl_context *ctx, const float *logits, size_t vocab,
                               const mpcl_sample_params *sp, uint64_t *rng_state, int32_t *token);

/* Called with each new token as it is chosen (index 0 .. new_tokens - 1);
 * a status other than MPCL_OK stops the generation, which returns it. */
typedef mpcl_status (*mpcl_token_fn)(void *user, size_t index, int32_t token);

/* Generates new_tokens tokens after prompt[0..prompt_len) into out (NULL:
 * only the callback sees them), calling on_token (may be NULL) with each.
 * Errors, before any device work: MPCL_ERR_INVALID_ARG for a model that is
 * not a GPT (as above), whose output has more classes than its embedding
 * has tokens, an empty prompt, a prompt longer than the context (naming
 * both), a prompt token outside [0, vocabulary) (naming its index and
 * value), or bad sample params. */
mpcl_status mpcl_generate(mpcl_model *m, const int32_t *prompt, size_t prompt_len,
                          size_t new_tokens, const mpcl_sample_params *sp, int32_t *out,
                          mpcl_token_fn on_token, void *user);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
