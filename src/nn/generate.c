/* Text generation (generate.h): the sampler on the host, and the loop that
 * runs the model over a window of tokens, one sample, to pick each next
 * token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpcl/generate.h"
#include "mpcl/rng.h"
#include "nn/nn.h"

mpcl_sample_params mpcl_sample_default_params(void) {
    return (mpcl_sample_params){.temperature = 1.0, .top_k = 0, .seed = 42};
}

mpcl_status mpcl_sample_check(mpcl_context *ctx, const mpcl_sample_params *sp) {
    if (!(sp->temperature >= 0.0) || !isfinite(sp->temperature))
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "temperature %g: it must be a finite number >= 0 (0 is greedy)",
                          sp->temperature);
    return MPCL_OK;
}

/* The id of the largest logit, the lowest id among equals. */
static int32_t argmax(const float *logits, size_t vocab) {
    size_t best = 0;
    for (size_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
}

/* A token and its logit, for ranking. */
typedef struct candidate {
    float logit;
    int32_t id;
} candidate;

/* The larger logit first, then the lower id. */
static int by_rank(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}
static int by_id(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* The candidates, in id order, into c: every token, or the top_k most
 * likely. Returns how many. */
static size_t candidates(const float *logits, size_t vocab, size_t top_k, candidate *c) {
    for (size_t i = 0; i < vocab; i++) c[i] = (candidate){logits[i], (int32_t)i};
    if (top_k == 0 || top_k >= vocab) return vocab;
    qsort(c, vocab, sizeof c[0], by_rank);
    qsort(c, top_k, sizeof c[0], by_id);
    return top_k;
}

/* Draws among c[0..n) with probabilities exp((logit - max) / temperature),
 * in double. */
static int32_t draw(const candidate *c, size_t n, double temperature, uint64_t *rng_state) {
    double max = -INFINITY, total = 0.0;
    for (size_t i = 0; i < n; i++) max = fmax(max, (double)c[i].logit);
    for (size_t i = 0; i < n; i++) total += exp(((double)c[i].logit - max) / temperature);
    double u = (double)(mpcl_rng_next(rng_state) >> 11) * 0x1p-53, target = u * total, sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        sum += exp(((double)c[i].logit - max) / temperature);
        if (sum > target) return c[i].id;
    }
    return c[n - 1].id; /* rounding left the sum a hair under the target */
}

mpcl_status mpcl_sample_logits(mpcl_context *ctx, const float *logits, size_t vocab,
                               const mpcl_sample_params *sp, uint64_t *rng_state, int32_t *token) {
    mpcl_status st = mpcl_sample_check(ctx, sp);
    if (st != MPCL_OK) return st;
    if (vocab == 0 || vocab > INT32_MAX)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "sampling from %zu logits", vocab);
    for (size_t i = 0; i < vocab; i++)
        if (!isfinite(logits[i]))
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "the logit of token %zu is %g", i,
                              (double)logits[i]);
    if (sp->temperature == 0.0 || sp->top_k == 1) {
        *token = argmax(logits, vocab);
        return MPCL_OK;
    }
    candidate *c = malloc(vocab * sizeof *c);
    if (!c) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "sampling from %zu logits", vocab);
    size_t n = candidates(logits, vocab, sp->top_k, c);
    *token = draw(c, n, sp->temperature, rng_state);
    free(c);
    return MPCL_OK;
}

/* ---- the generation loop ---- */

typedef struct generation {
    mpcl_model *m;
    mpcl_context *ctx;
    size_t context;    /* T: the tokens the model takes */
    size_t vocab;      /* the embedding's token count */
    size_t classes;    /* logits per position */
    int32_t *seq;      /* prompt then generated tokens */
    size_t len;        /* tokens in seq */
    int32_t *window;   /* the model's input: T ids, right-padded */
    float *logits;     /* classes */
    mpcl_tensor *x;    /* int32 [1, T] */
    mpcl_tensor *step; /* int32 [1, 1]: the token of a cached step */
    size_t cached;     /* positions the layers' caches hold for seq; 0: none */
} generation;

/* The model is a GPT whose outputs can be fed back. */
static mpcl_status check_model(mpcl_model *m, size_t *vocab) {
    mpcl_context *ctx = mpcl_model_context(m);
    const mpcl_layer_spec *first = mpcl_model_layer(m, 0);
    if (mpcl_model_input_dtype(m) != MPCL_DTYPE_I32 || mpcl_model_positions(m) < 1 ||
        strcmp(first->kind, "token_pos_embedding") != 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "generation needs a GPT: a model whose first layer is "
                          "token_pos_embedding; this one starts with %s",
                          first->kind);
    *vocab = first->vocabulary_size;
    if (mpcl_model_classes(m) > *vocab)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "the model gives %zu logits per position but its embedding has %zu "
                          "tokens: a generated token could not be fed back",
                          mpcl_model_classes(m), *vocab);
    return MPCL_OK;
}

static mpcl_status check_prompt(const generation *g, const int32_t *prompt, size_t prompt_len) {
    if (prompt_len == 0 || !prompt)
        return MPCL_ERROR(g->ctx, MPCL_ERR_INVALID_ARG,
                          "the prompt is empty: give one token "
                          "at least");
    if (prompt_len > g->context)
        return MPCL_ERROR(g->ctx, MPCL_ERR_INVALID_ARG,
                          "the prompt has %zu tokens; the model's context is %zu", prompt_len,
                          g->context);
    for (size_t i = 0; i < prompt_len; i++)
        if (prompt[i] < 0 || (size_t)prompt[i] >= g->vocab)
            return MPCL_ERROR(g->ctx, MPCL_ERR_INVALID_ARG,
                              "prompt token %zu is %d; the vocabulary is 0..%zu", i, (int)prompt[i],
                              g->vocab - 1);
    return MPCL_OK;
}

static void generation_free(generation *g) {
    free(g->seq);
    free(g->window);
    free(g->logits);
    mpcl_tensor_destroy(g->x);
    mpcl_tensor_destroy(g->step);
}

static mpcl_status generation_init(generation *g, mpcl_model *m, const int32_t *prompt,
                                   size_t prompt_len, size_t new_tokens) {
    memset(g, 0, sizeof *g);
    g->m = m;
    g->ctx = mpcl_model_context(m);
    g->context = mpcl_model_positions(m);
    g->classes = mpcl_model_classes(m);
    TRY(check_model(m, &g->vocab));
    TRY(check_prompt(g, prompt, prompt_len));
    if (new_tokens > SIZE_MAX / sizeof(int32_t) - prompt_len)
        return MPCL_ERROR(g->ctx, MPCL_ERR_INVALID_ARG, "%zu new tokens", new_tokens);
    g->seq = malloc((prompt_len + new_tokens) * sizeof *g->seq);
    g->window = calloc(g->context, sizeof *g->window);
    g->logits = malloc(g->classes * sizeof *g->logits);
    if (!g->seq || !g->window || !g->logits)
        return MPCL_ERROR(g->ctx, MPCL_ERR_OUT_OF_MEMORY, "generating %zu tokens", new_tokens);
    memcpy(g->seq, prompt, prompt_len * sizeof *prompt);
    g->len = prompt_len;
    TRY(mpcl_tensor_create(g->ctx, MPCL_DTYPE_I32, 1, g->context, &g->x));
    return mpcl_tensor_create(g->ctx, MPCL_DTYPE_I32, 1, 1, &g->step);
}

/* The logits after seq from the whole window: its last T tokens at most,
 * padded on the right with token 0, read at the last real position. The
 * layers' caches then hold the window's positions. */
static mpcl_status logits_of_window(generation *g) {
    size_t start = g->len > g->context ? g->len - g->context : 0, n = g->len - start;
    memcpy(g->window, g->seq + start, n * sizeof *g->window);
    memset(g->window + n, 0, (g->context - n) * sizeof *g->window);
    TRY(mpcl_tensor_upload_i32(g->x, g->window, g->context));
    TRY(mpcl_model_predict(g->m, g->x));
    g->cached = start == 0 ? n : 0;
    return mpcl_model_read_position_logits(g->m, 0, n - 1, g->logits, g->classes);
}

/* The logits after seq: one cached position when the layers can step and
 * hold seq but its last token, else the whole window. */
static mpcl_status next_logits(generation *g) {
    size_t position = g->len - 1;
    if (g->cached != position || position >= g->context || !mpcl__model_can_step(g->m))
        return logits_of_window(g);
    TRY(mpcl_tensor_upload_i32(g->step, &g->seq[position], 1));
    TRY(mpcl__model_forward_step(g->m, g->step, position));
    g->cached = g->len;
    return mpcl__model_read_step_logits(g->m, g->logits, g->classes);
}

mpcl_status mpcl_generate(mpcl_model *m, const int32_t *prompt, size_t prompt_len,
                          size_t new_tokens, const mpcl_sample_params *sp, int32_t *out,
                          mpcl_token_fn on_token, void *user) {
    mpcl_status st = mpcl_sample_check(mpcl_model_context(m), sp);
    if (st != MPCL_OK) return st;
    generation g;
    st = generation_init(&g, m, prompt, prompt_len, new_tokens);
    uint64_t rng = sp->seed;
    for (size_t i = 0; i < new_tokens && st == MPCL_OK; i++) {
        int32_t token = 0;
        st = next_logits(&g);
        if (st == MPCL_OK) st = mpcl_sample_logits(g.ctx, g.logits, g.classes, sp, &rng, &token);
        if (st != MPCL_OK) break;
        g.seq[g.len++] = token;
        if (out) out[i] = token;
        if (on_token) st = on_token(user, i, token);
    }
    generation_free(&g);
    return st;
}
