/* GPT-2 weights (gpt2_folder.h) into and out of a GPT model's parameters
 * (mpcl/gpt.h): canonical tensor i is the model's row i, its name mapped
 * by the table below and its shape the same. */
#include <stdio.h>
#include <string.h>

#include "io/io.h"
#include "mpcl/gpt.h"
#include "nn/nn.h"

/* The model's row names of the canonical names: whole names, and the
 * suffixes after "h.N." / "transformer_decoder_N.". */
typedef struct name_pair {
    const char *canonical, *model;
} name_pair;

static const name_pair NAMES[] = {
    {"wte.weight", "token_pos_embedding_0.token_embeddings"},
    {"wpe.weight", "token_pos_embedding_0.position_embeddings"},
    {"ln_f.weight", "layer_normalization_0.gamma"},
    {"ln_f.bias", "layer_normalization_0.beta"},
};
static const name_pair LAYER_SUFFIXES[] = {
    {"ln_1.weight", "ln_1.gamma"},
    {"ln_1.bias", "ln_1.beta"},
    {"ln_2.weight", "ln_2.gamma"},
    {"ln_2.bias", "ln_2.beta"},
    {"attn.c_attn.weight", "attn.c_attn.kernel"},
    {"attn.c_attn.bias", "attn.c_attn.bias"},
    {"attn.c_proj.weight", "attn.c_proj.kernel"},
    {"attn.c_proj.bias", "attn.c_proj.bias"},
    {"mlp.c_fc.weight", "mlp.c_fc.kernel"},
    {"mlp.c_fc.bias", "mlp.c_fc.bias"},
    {"mlp.c_proj.weight", "mlp.c_proj.kernel"},
    {"mlp.c_proj.bias", "mlp.c_proj.bias"},
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The canonical name of a model row's name (the model makes these names,
 * so "transformer_decoder_N." is read as it writes it); false for a row
 * GPT-2 does not have. */
static bool canonical_name(const char *row, char *buf, size_t size) {
    for (size_t i = 0; i < ARRAY_LEN(NAMES); i++)
        if (strcmp(row, NAMES[i].model) == 0) {
            snprintf(buf, size, "%s", NAMES[i].canonical);
            return true;
        }
    size_t layer;
    int end = 0;
    if (sscanf(row, "transformer_decoder_%zu.%n", &layer, &end) != 1 || end == 0) return false;
    for (size_t i = 0; i < ARRAY_LEN(LAYER_SUFFIXES); i++)
        if (strcmp(row + end, LAYER_SUFFIXES[i].model) == 0) {
            snprintf(buf, size, "h.%zu.%s", layer, LAYER_SUFFIXES[i].canonical);
            return true;
        }
    return false;
}

/* "(3, 48)" of a tensor and of a row. */
static void tensor_shape(const mpcl_gpt2_tensor *t, char *buf, size_t size) {
    mpcl__shape_str(buf, size, t->ndim, t->shape);
}

static void row_shape(const mpcl_param_info *r, char *buf, size_t size) {
    mpcl__shape_str(buf, size, r->rank, r->shape);
}

static bool same_shape(const mpcl_gpt2_tensor *t, const mpcl_param_info *r) {
    if (t->ndim != r->rank || t->count != r->count) return false;
    for (size_t d = 0; d < t->ndim; d++)
        if (t->shape[d] != r->shape[d]) return false;
    return true;
}

/* Tensor i of w against row i of m, both present. */
static mpcl_status check_pair(mpcl_model *m, const mpcl_gpt2_tensor *t, const mpcl_param_info *r) {
    mpcl_context *ctx = mpcl_model_context(m);
    char want[64], a[64], b[64];
    if (!canonical_name(r->name, want, sizeof want))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "GPT-2 weights: the model's row '%s' is not a GPT-2 tensor", r->name);
    if (strcmp(want, t->name) != 0)
        return MPCL_ERROR(ctx, MPCL_ERR_FORMAT,
                          "GPT-2 weights: tensor '%s' where the model's row '%s' takes '%s'",
                          t->name, r->name, want);
    if (!same_shape(t, r) || !t->data) {
        tensor_shape(t, a, sizeof a);
        row_shape(r, b, sizeof b);
        return MPCL_ERROR(ctx, MPCL_ERR_FORMAT,
                          "GPT-2 weights: tensor '%s' has shape %s%s; the model's %s is %s",
                          t->name, a, t->data ? "" : " and no data", r->name, b);
    }
    return MPCL_OK;
}

/* Every tensor of w has its row in m, in order, of its shape, and no row
 * is left without a tensor. */
static mpcl_status check_tensors(mpcl_model *m, const mpcl_gpt2_weights *w) {
    mpcl_context *ctx = mpcl_model_context(m);
    size_t rows = mpcl_model_param_count(m);
    char shape[64];
    for (size_t i = 0; i < rows || i < w->count; i++) {
        const mpcl_param_info *r = mpcl_model_param(m, i);
        if (i >= w->count) {
            row_shape(r, shape, sizeof shape);
            return MPCL_ERROR(ctx, MPCL_ERR_FORMAT,
                              "GPT-2 weights: %zu tensors, no tensor for the model's row %zu, "
                              "'%s' %s",
                              w->count, i, r->name, shape);
        }
        if (i >= rows) {
            tensor_shape(&w->tensors[i], shape, sizeof shape);
            return MPCL_ERROR(ctx, MPCL_ERR_FORMAT,
                              "GPT-2 weights: tensor '%s' %s has no row in the model (%zu rows)",
                              w->tensors[i].name, shape, rows);
        }
        TRY(check_pair(m, &w->tensors[i], r));
    }
    return MPCL_OK;
}

/* The fields of w's config the shapes do not show (n_head, the epsilon)
 * are the model's. */
static mpcl_status check_config(mpcl_model *m, const mpcl_gpt2_config *model,
                                const mpcl_gpt2_config *w) {
    mpcl_context *ctx = mpcl_model_context(m);
    if (w->n_head != model->n_head)
        return MPCL_ERROR(ctx, MPCL_ERR_FORMAT, "GPT-2 weights: n_head is %zu; the model's is %zu",
                          w->n_head, model->n_head);
    if (w->layer_norm_epsilon != model->layer_norm_epsilon)
        return MPCL_ERROR(ctx, MPCL_ERR_FORMAT,
                          "GPT-2 weights: layer_norm_epsilon is %.17g; the model's is %.17g",
                          w->layer_norm_epsilon, model->layer_norm_epsilon);
    return MPCL_OK;
}

/* m's GPT config: MPCL_ERR_INVALID_ARG, recorded on m's context, when m
 * is not a GPT. */
static mpcl_status model_config(mpcl_model *m, mpcl_gpt2_config *out) {
    mpcl_status st = mpcl_gpt_config_of(mpcl_model_params_of(m), out);
    return mpcl__error_to_context(mpcl_model_context(m), st);
}

mpcl_status mpcl_model_load_gpt2(mpcl_model *m, const mpcl_gpt2_weights *w) {
    if (!m || !w) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_model_load_gpt2: NULL");
    mpcl_gpt2_config config;
    TRY(model_config(m, &config));
    TRY(check_tensors(m, w));
    TRY(check_config(m, &config, &w->config));
    for (size_t i = 0; i < w->count; i++) {
        const mpcl_gpt2_tensor *t = &w->tensors[i];
        TRY(mpcl_model_write_param(m, i, MPCL_OPTIM_SLOT_MASTER, t->data, t->count));
    }
    return MPCL_OK;
}

mpcl_status mpcl_model_gpt2_weights(mpcl_model *m, mpcl_gpt2_weights **out) {
    if (!m || !out) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_model_gpt2_weights: NULL");
    *out = NULL;
    mpcl_gpt2_config config;
    TRY(model_config(m, &config));
    mpcl_gpt2_weights *w = NULL;
    mpcl_status st =
        mpcl__error_to_context(mpcl_model_context(m), mpcl_gpt2_weights_new(&config, &w));
    if (st == MPCL_OK) st = check_tensors(m, w);
    for (size_t i = 0; st == MPCL_OK && i < w->count; i++) {
        mpcl_gpt2_tensor *t = &w->tensors[i];
        st = mpcl_model_read_param(m, i, MPCL_OPTIM_SLOT_MASTER, t->data, t->count);
    }
    if (st != MPCL_OK) {
        mpcl_gpt2_weights_destroy(w);
        return st;
    }
    *out = w;
    return MPCL_OK;
}
