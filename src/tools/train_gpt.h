/* mpcl-train --model gpt: the built-in GPT or a GPT-2 folder's, the tokens
 * it trains on, the folder written back, and what the tool prints of them. */
#ifndef MPCL_TOOLS_TRAIN_GPT_H
#define MPCL_TOOLS_TRAIN_GPT_H

#include <stdbool.h>
#include <stdio.h>

#include "jsonw.h"
#include "mpcl/gpt2_folder.h"
#include "mpcl/mpcl.h"
#include "mpcl/tokens.h"
#include "train_args.h"

typedef struct train_gpt {
    mpcl_gpt2_config config; /* the shape flags', or --init-from's config.json */
    size_t context;          /* the window */
    mpcl_tokens *tokens;     /* the corpus read */
    bool bpe;                /* --text went through the folder's GPT-2 BPE */
} train_gpt;

/* The shape (flags, or --init-from's config.json: --context then defaults
 * to the smaller of 64 and its n_positions), the corpus (--text, the
 * fortunes folder by default, through the folder's BPE where it has
 * vocab.json and merges.txt, or --tokens checked against the vocabulary),
 * and p's model, window and tokens. False with a message naming the flag
 * and what is wrong otherwise; g holds nothing then. */
bool train_gpt_setup(const train_args *a, train_gpt *g, mpcl_train_params *p, char *err,
                     size_t size);
void train_gpt_free(train_gpt *g);

/* --init-from: the folder's weights into every replica's model. */
bool train_gpt_init_weights(const train_args *a, mpcl_trainer *tr, char *err, size_t size);
/* --save-hf: the trained model as a GPT-2 folder (mpcl_gpt2_folder_write:
 * nothing half-written). */
bool train_gpt_save_hf(const train_args *a, mpcl_trainer *tr, char *err, size_t size);

/* The banner's data line: the corpus, its tokens and the held-out part. */
void train_gpt_print_data(FILE *h, const train_args *a, const train_gpt *g,
                          const mpcl_train_data_info *di);

/* "gpt" in the JSON summary: the shape, the corpus, tokens/s; and
 * "eval_loss" (the last evaluation's mean cross-entropy per token). */
void train_gpt_json(jsonw *w, const train_args *a, const train_gpt *g, const mpcl_train_summary *s);

#endif
