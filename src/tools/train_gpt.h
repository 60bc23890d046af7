/* mpcl-train --model gpt: the built-in GPT and the tokens it trains on,
 * and what the tool prints of them. */
#ifndef MPCL_TOOLS_TRAIN_GPT_H
#define MPCL_TOOLS_TRAIN_GPT_H

#include <stdbool.h>
#include <stdio.h>

#include "jsonw.h"
#include "mpcl/mpcl.h"
#include "mpcl/tokens.h"
#include "train_args.h"

/* Reads the corpus (--text, the fortunes folder by default, or --tokens
 * checked against --vocab) and sets p's model to the GPT of the shape
 * flags, its window to --context and p->tokens to the stream read (*tokens,
 * the caller's to destroy after the trainer is made). False with a message
 * naming the flag and what is wrong otherwise; nothing is kept. */
bool train_gpt_setup(const train_args *a, mpcl_train_params *p, mpcl_tokens **tokens, char *err,
                     size_t size);

/* The banner's data line: the corpus, its tokens and the held-out part. */
void train_gpt_print_data(FILE *h, const train_args *a, const mpcl_tokens *t,
                          const mpcl_train_data_info *di);

/* "gpt" in the JSON summary: the shape, the corpus, tokens/s and eval_loss
 * (the last evaluation's mean cross-entropy in nats per token). */
void train_gpt_json(jsonw *w, const train_args *a, const mpcl_tokens *t,
                    const mpcl_train_summary *s);

#endif
