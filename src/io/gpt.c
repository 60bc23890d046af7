/* GPT-2's layer list (mpcl/gpt.h): a config into model params, and model
 * params back into the config. The kinds are set by their attributes' names,
 * through the layer specs' declarations, like any model file's. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "io/io.h"
#include "mpcl/gpt.h"
#include "mpcl/number.h"

#define EMBEDDING "token_pos_embedding"
#define DECODER "transformer_decoder"
#define FINAL_NORM "layer_normalization"
#define HEAD "tied_lm_head"
/* The layers around the blocks: the embedding, the final norm, the head. */
#define OUTER_LAYERS 3

/* ---- config -> params ---- */

static mpcl_status set_count(mpcl_context *ctx, mpcl_layer_spec *s, const char *attr, size_t v) {
    char text[32];
    snprintf(text, sizeof text, "%zu", v);
    return mpcl_layer_spec_set(ctx, s, attr, text);
}

static mpcl_status set_real(mpcl_context *ctx, mpcl_layer_spec *s, const char *attr, double v) {
    char text[32];
    snprintf(text, sizeof text, "%.17g", v);
    return mpcl_layer_spec_set(ctx, s, attr, text);
}

static mpcl_status embedding_spec(mpcl_context *ctx, const mpcl_gpt2_config *c,
                                  mpcl_layer_spec *s) {
    TRY(mpcl_layer_spec_init(ctx, EMBEDDING, s));
    TRY(set_count(ctx, s, "vocabulary_size", c->vocab_size));
    TRY(set_count(ctx, s, "sequence_length", c->n_positions));
    return set_count(ctx, s, "embedding_dim", c->n_embd);
}

static mpcl_status decoder_spec(mpcl_context *ctx, const mpcl_gpt2_config *c, mpcl_layer_spec *s) {
    TRY(mpcl_layer_spec_init(ctx, DECODER, s));
    TRY(set_count(ctx, s, "num_heads", c->n_head));
    TRY(set_count(ctx, s, "intermediate_dim", 4 * c->n_embd));
    TRY(set_real(ctx, s, "layer_norm_epsilon", c->layer_norm_epsilon));
    return mpcl_layer_spec_set(ctx, s, "use_bias", "true");
}

static mpcl_status final_norm_spec(mpcl_context *ctx, const mpcl_gpt2_config *c,
                                   mpcl_layer_spec *s) {
    TRY(mpcl_layer_spec_init(ctx, FINAL_NORM, s));
    return set_real(ctx, s, "epsilon", c->layer_norm_epsilon);
}

static mpcl_status gpt_layers(mpcl_context *ctx, const mpcl_gpt2_config *c, mpcl_model_params *p) {
    size_t n = 0;
    TRY(embedding_spec(ctx, c, &p->layers[n++]));
    for (size_t i = 0; i < c->n_layer; i++) TRY(decoder_spec(ctx, c, &p->layers[n++]));
    TRY(final_norm_spec(ctx, c, &p->layers[n++]));
    TRY(mpcl_layer_spec_init(ctx, HEAD, &p->layers[n++]));
    p->layer_count = n;
    return MPCL_OK;
}

mpcl_status mpcl_gpt_model_params(mpcl_context *ctx, const mpcl_gpt2_config *config, size_t context,
                                  mpcl_model_params *params) {
    if (!params) return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "GPT model: params is NULL");
    mpcl_status st = mpcl_gpt2_config_check(config);
    if (st != MPCL_OK) return mpcl__error_to_context(ctx, st);
    if (context < 1 || context > config->n_positions)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "GPT model: a context of %zu tokens; it must be from 1 to n_positions "
                          "%zu",
                          context, config->n_positions);
    if (config->n_layer > MPCL_MAX_LAYERS - OUTER_LAYERS)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "GPT model: n_layer %zu makes %zu layers (with the embedding, the final "
                          "layer norm and the head); mpcl models have at most %d",
                          config->n_layer, config->n_layer + OUTER_LAYERS, MPCL_MAX_LAYERS);
    mpcl_model_params p = *params;
    TRY(gpt_layers(ctx, config, &p));
    p.input_rank = 1;
    p.input_shape[0] = context;
    p.inputs = context;
    p.classes = config->vocab_size;
    p.loss = MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    *params = p;
    return MPCL_OK;
}

/* ---- params -> config ---- */

static mpcl_status not_gpt(const char *fmt, ...) MPCL_PRINTF(1, 2);
static mpcl_status not_gpt(const char *fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "not a GPT model: %s", why);
}

/* Layer i of p is of that kind. */
static mpcl_status want_kind(const mpcl_model_params *p, size_t i, const char *kind) {
    if (strcmp(p->layers[i].kind, kind) == 0) return MPCL_OK;
    return not_gpt("layer %zu is %s; a GPT's is %s", i, p->layers[i].kind, kind);
}

/* An attribute's value as text; false when the kind has no such attribute. */
static bool attr_text(const mpcl_layer_spec *s, const char *attr, char buf[64]) {
    return mpcl_layer_spec_get(NULL, s, attr, buf, 64) == MPCL_OK;
}

static mpcl_status get_count(const mpcl_model_params *p, size_t i, const char *attr, size_t *out) {
    char text[64];
    uint64_t v = 0;
    if (!attr_text(&p->layers[i], attr, text) ||
        mpcl_parse_uint(text, SIZE_MAX, &v) != MPCL_NUMBER_OK)
        return not_gpt("layer %zu (%s) has no count %s", i, p->layers[i].kind, attr);
    *out = (size_t)v;
    return MPCL_OK;
}

static mpcl_status get_real(const mpcl_model_params *p, size_t i, const char *attr, double *out) {
    char text[64];
    if (!attr_text(&p->layers[i], attr, text) || mpcl_parse_real(text, out) != MPCL_NUMBER_OK)
        return not_gpt("layer %zu (%s) has no number %s", i, p->layers[i].kind, attr);
    return MPCL_OK;
}

/* Block i (layer i) against the config read so far: the first block sets
 * n_head and the epsilon, the others must repeat them. */
static mpcl_status read_decoder(const mpcl_model_params *p, size_t i, mpcl_gpt2_config *c) {
    TRY(want_kind(p, i, DECODER));
    size_t heads, inner;
    double eps;
    char bias[64];
    TRY(get_count(p, i, "num_heads", &heads));
    TRY(get_count(p, i, "intermediate_dim", &inner));
    TRY(get_real(p, i, "layer_norm_epsilon", &eps));
    if (i == 1) {
        c->n_head = heads;
        c->layer_norm_epsilon = eps;
    }
    if (heads != c->n_head)
        return not_gpt("layer %zu has num_heads %zu; layer 1 has %zu", i, heads, c->n_head);
    if (eps != c->layer_norm_epsilon)
        return not_gpt("layer %zu has layer_norm_epsilon %g; layer 1 has %g", i, eps,
                       c->layer_norm_epsilon);
    if (inner != 0 && inner != 4 * c->n_embd)
        return not_gpt("layer %zu has intermediate_dim %zu; GPT-2's is 4 n_embd = %zu", i, inner,
                       4 * c->n_embd);
    if (!attr_text(&p->layers[i], "use_bias", bias) || strcmp(bias, "true") != 0)
        return not_gpt("layer %zu has no biases (use_bias); GPT-2's blocks have them", i);
    return MPCL_OK;
}

mpcl_status mpcl_gpt_config_of(const mpcl_model_params *p, mpcl_gpt2_config *out) {
    if (!p || !out) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_gpt_config_of: NULL");
    size_t n = p->layer_count;
    if (n < OUTER_LAYERS + 1)
        return not_gpt("%zu layers; a GPT has %s, at least one %s, %s and %s", n, EMBEDDING,
                       DECODER, FINAL_NORM, HEAD);
    mpcl_gpt2_config c = {.n_layer = n - OUTER_LAYERS};
    TRY(want_kind(p, 0, EMBEDDING));
    TRY(get_count(p, 0, "vocabulary_size", &c.vocab_size));
    TRY(get_count(p, 0, "sequence_length", &c.n_positions));
    TRY(get_count(p, 0, "embedding_dim", &c.n_embd));
    for (size_t i = 1; i < n - 2; i++) TRY(read_decoder(p, i, &c));
    double eps;
    TRY(want_kind(p, n - 2, FINAL_NORM));
    TRY(get_real(p, n - 2, "epsilon", &eps));
    if (eps != c.layer_norm_epsilon)
        return not_gpt("layer %zu (%s) has epsilon %g; the blocks' layer_norm_epsilon is %g", n - 2,
                       FINAL_NORM, eps, c.layer_norm_epsilon);
    TRY(want_kind(p, n - 1, HEAD));
    if (p->loss != MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY)
        return not_gpt("its loss is %s; a GPT's is %s", mpcl_loss_name(p->loss),
                       mpcl_loss_name(MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY));
    mpcl_status st = mpcl_gpt2_config_check(&c);
    if (st != MPCL_OK) return st;
    *out = c;
    return MPCL_OK;
}
