/* PyTorch's reference for mpcl's GPT-2 (tests/data/gpt2-ref, written by
 * bench/make_gpt_reference.py), loaded for the model's tests: the initial
 * weights, one batch of byte tokens, and what PyTorch computed from them.
 * gpt_reference_load refuses a dump that is not whole and consistent, so a
 * model test compares with it and nothing else. */
#ifndef MPCL_TESTS_GPT_REFERENCE_H
#define MPCL_TESTS_GPT_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "mpcl/gpt2_folder.h"
#include "mpcl/safetensors.h"

/* torch.optim.AdamW's settings of the losses (reference.json "optimizer"):
 * constant lr, no clipping, weight decay on the tensors of 2 or more dims. */
typedef struct gpt_reference_adamw {
    double lr, beta1, beta2, eps, weight_decay;
} gpt_reference_adamw;

typedef struct gpt_reference {
    mpcl_gpt2_weights *weights; /* config.json + model.safetensors, canonical order */
    size_t batch, seq;          /* B, T */
    const int32_t *tokens;      /* [B, T] */
    const int32_t *targets;     /* [B, T]: in each row, targets[t] = tokens[t + 1] for t < T-1 */
    const float *logits;        /* [B, T, vocab_size] */
    float loss;                 /* mean cross-entropy over the B*T positions */
    const float **grads;        /* grads[i]: the gradient of weights->tensors[i], its shape;
                                   wte's includes the tied output projection's */
    size_t steps;
    const float *losses; /* [steps]: the loss before each AdamW step; losses[0] is loss */
    gpt_reference_adamw adamw;
    mpcl_safetensors *file; /* reference.safetensors: tokens...losses point into it */
} gpt_reference;

/* Reads <folder>/config.json, model.safetensors, reference.safetensors and
 * reference.json, and checks: tensors tokens and targets (I32 [B, T], T at
 * most n_positions, tokens below vocab_size, targets the tokens shifted by
 * one within each row), logits (F32 [B, T, V]), loss (F32, one element),
 * losses (F32 [steps]), one grad.<name> (F32, the weight's shape) for every
 * weight and no other tensor; that loss is the mean cross-entropy of the
 * logits at the targets (computed in double) within 1e-5, and losses[0] is
 * loss exactly. Errors: those of the readers, MPCL_ERR_FORMAT naming the
 * file and tensor otherwise. On failure *ref is left empty. */
mpcl_status gpt_reference_load(const char *folder, gpt_reference *ref);
void gpt_reference_free(gpt_reference *ref);

/* "<MPCL_SOURCE_ROOT>/tests/data/gpt2-ref" into buf; fails the test when
 * MPCL_SOURCE_ROOT (set by meson test) is missing. */
const char *gpt_reference_folder(char buf[512]);

#endif
