/* Text generation (generate.h, src/nn/generate.c):
 * - the sampler on fixed logits: greedy is the argmax (the lower id among
 *   equals), top_k 1 is greedy at any temperature, the same seed draws the
 *   same tokens and other seeds others, and the draws follow
 *   softmax(logits / temperature) over the top k (chi-square bounds);
 * - generation on a tiny random GPT against a loop written here from the
 *   public model API (the whole window each token, padded with another
 *   token than the library's, the full logits read and their argmax
 *   taken), greedy, for prompts of 1 token to the context and past it;
 * - generation reproducible from its seed; the callback; the errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "testutil.h"

/* ---- the sampler ---- */

static int32_t sample(const float *logits, size_t n, double temperature, size_t top_k,
                      uint64_t *rng) {
    mpcl_sample_params sp = {.temperature = temperature, .top_k = top_k, .seed = 0};
    int32_t token = -1;
    TU_ASSERT_OK(mpcl_sample_logits(NULL, logits, n, &sp, rng, &token));
    return token;
}

static void greedy_is_argmax(void **state) {
    (void)state;
    const float logits[] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
    uint64_t rng = 7, before = rng;
    assert_int_equal(sample(logits, 5, 0.0, 0, &rng), 1); /* 1 and 3 tie: the lower id */
    assert_true(rng == before);                           /* greedy draws no number */
    /* top_k 1 is greedy at any temperature and seed. */
    for (uint64_t seed = 0; seed < 50; seed++) {
        rng = seed;
        assert_int_equal(sample(logits, 5, 100.0, 1, &rng), 1);
    }
    const float one[] = {-3.0f};
    assert_int_equal(sample(one, 1, 1.0, 0, &rng), 0);
}

static void same_seed_same_draws(void **state) {
    (void)state;
    float logits[16];
    for (int i = 0; i < 16; i++) logits[i] = (float)(i % 5) * 0.3f;
    int32_t a[200], b[200], c[200];
    uint64_t ra = 1234, rb = 1234, rc = 1235;
    for (int i = 0; i < 200; i++) {
        a[i] = sample(logits, 16, 1.0, 0, &ra);
        b[i] = sample(logits, 16, 1.0, 0, &rb);
        c[i] = sample(logits, 16, 1.0, 0, &rc);
    }
    assert_memory_equal(a, b, sizeof a);
    int differ = 0;
    for (int i = 0; i < 200; i++) differ += a[i] != c[i];
    /* 16 tokens of similar odds: two seeds agree on about 1 draw in 10. */
    assert_true(differ > 100);
}

/* Pearson's chi-square of the draws' counts against probabilities p
 * (zero-probability tokens must never be drawn). */
static double chi_square(const float *logits, size_t n, double temperature, size_t top_k,
                         const double *p, size_t draws, uint64_t seed) {
    size_t counts[8] = {0};
    uint64_t rng = seed;
    for (size_t i = 0; i < draws; i++) counts[sample(logits, n, temperature, top_k, &rng)]++;
    double chi2 = 0.0;
    for (size_t t = 0; t < n; t++) {
        if (p[t] == 0.0) {
            assert_int_equal(counts[t], 0);
            continue;
        }
        double want = p[t] * (double)draws, d = (double)counts[t] - want;
        chi2 += d * d / want;
    }
    return chi2;
}

/* Logits log(q): the probabilities at temperature T are q^(1/T),
 * normalized. The bound 40 is far in the tail for 3 degrees of freedom
 * (p ~ 1e-8): a correct sampler never fails it, while a wrong temperature
 * or a wrong top-k is off by hundreds over 20000 draws. */
static void draws_follow_the_softmax(void **state) {
    (void)state;
    const double q[4] = {0.1, 0.2, 0.3, 0.4};
    float logits[4];
    for (int i = 0; i < 4; i++) logits[i] = (float)log(q[i]);
    const double temperatures[] = {1.0, 0.5, 2.0};
    for (size_t k = 0; k < 3; k++) {
        double T = temperatures[k], p[4], total = 0.0;
        for (int i = 0; i < 4; i++) total += (p[i] = pow(q[i], 1.0 / T));
        for (int i = 0; i < 4; i++) p[i] /= total;
        double chi2 = chi_square(logits, 4, T, 0, p, 20000, 99 + k);
        printf("temperature %g: chi-square %.2f (3 dof)\n", T, chi2);
        assert_true(chi2 < 40.0);
    }
    /* top_k 2: tokens 3 and 2 only, 4:3. */
    const double p2[4] = {0.0, 0.0, 3.0 / 7.0, 4.0 / 7.0};
    double chi2 = chi_square(logits, 4, 1.0, 2, p2, 20000, 5);
    printf("top_k 2: chi-square %.2f (1 dof)\n", chi2);
    assert_true(chi2 < 30.0);
    /* A temperature near 0 is nearly greedy; a huge one nearly uniform. */
    const double greedy[4] = {0.0, 0.0, 0.0, 1.0}, uniform[4] = {0.25, 0.25, 0.25, 0.25};
    assert_true(chi_square(logits, 4, 1e-3, 0, greedy, 2000, 3) < 1e-9);
    assert_true(chi_square(logits, 4, 1e6, 0, uniform, 20000, 4) < 40.0);
}

static void sampler_errors(void **state) {
    (void)state;
    float logits[3] = {0.0f, NAN, 1.0f};
    mpcl_sample_params sp = mpcl_sample_default_params();
    uint64_t rng = 0;
    int32_t token;
    tu_expect_error(mpcl_sample_logits(NULL, logits, 3, &sp, &rng, &token), MPCL_ERR_INVALID_ARG,
                    "the logit of token 1 is nan");
    logits[1] = INFINITY;
    tu_expect_error(mpcl_sample_logits(NULL, logits, 3, &sp, &rng, &token), MPCL_ERR_INVALID_ARG,
                    "the logit of token 1 is inf");
    logits[1] = 0.0f;
    sp.temperature = -0.5;
    tu_expect_error(mpcl_sample_logits(NULL, logits, 3, &sp, &rng, &token), MPCL_ERR_INVALID_ARG,
                    "temperature -0.5");
    sp.temperature = NAN;
    tu_expect_error(mpcl_sample_check(NULL, &sp), MPCL_ERR_INVALID_ARG, "temperature nan");
}

/* ---- generation on a tiny GPT ---- */

enum { T = 8, V = 11 };

/* Weights of U(-1, 1): the initial ones (embeddings of std 0.02) give
 * nearly the same logits after every context. */
static mpcl_model *random_model(mpcl_context *ctx, mpcl_model_params *p, uint64_t seed,
                                mpcl_policy policy) {
    p->max_batch = 2;
    p->seed = seed;
    p->policy = policy;
    mpcl_model *m = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, p, &m));
    tu_rng r = tu_rng_make(seed);
    for (size_t i = 0; i < mpcl_model_param_count(m); i++) {
        size_t n = mpcl_model_param(m, i)->count;
        float *w = malloc(n * sizeof *w);
        tu_fill_uniform(&r, w, n, -1.0f, 1.0f);
        TU_ASSERT_OK(mpcl_model_write_param(m, i, MPCL_OPTIM_SLOT_MASTER, w, n));
        free(w);
    }
    return m;
}

/* The embedding, then `layers`, which end in V logits. */
static mpcl_model *tiny_gpt_in(mpcl_context *ctx, const char *layers, uint64_t seed,
                               mpcl_policy policy) {
    char text[512];
    snprintf(text, sizeof text,
             "input_shape=%d; token_pos_embedding vocabulary_size=%d sequence_length=%d "
             "embedding_dim=8; %s",
             T, V, T, layers);
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(mpcl_model_spec_parse(NULL, text, &p));
    p.classes = V;
    return random_model(ctx, &p, seed, policy);
}

static mpcl_model *tiny_gpt(mpcl_context *ctx, const char *layers, uint64_t seed) {
    return tiny_gpt_in(ctx, layers, seed, MPCL_POLICY_FLOAT32);
}

static const char GPT_LAYERS[] =
    "causal_self_attention num_heads=2; layer_normalization epsilon=0.00001; dense units=16 "
    "activation=gelu; causal_self_attention num_heads=4; dense units=11";
/* The same trunk under the tied head (logits = h wte^T). */
static const char TIED_LAYERS[] =
    "causal_self_attention num_heads=2; layer_normalization epsilon=0.00001; tied_lm_head";

/* The GPTs the cache is tested on: the embedding, attention, layer norm
 * and Dense kinds of GPT_LAYERS; TIED_LAYERS; and GPT-2's own layers
 * (mpcl_gpt_model_params: two transformer_decoder blocks and the tied
 * head). NULL when this library lacks a kind. */
enum { STACK, TIED, GPT2, MODELS };
static const char *const MODEL_NAMES[MODELS] = {"layer stack", "tied head", "GPT-2 blocks"};

static mpcl_model *test_gpt(mpcl_context *ctx, int which, uint64_t seed, mpcl_policy policy) {
    if (which == STACK) return tiny_gpt_in(ctx, GPT_LAYERS, seed, policy);
    if (which == TIED) {
        if (mpcl_layer_kind_known("tied_lm_head"))
            return tiny_gpt_in(ctx, TIED_LAYERS, seed, policy);
        printf("no tied_lm_head kind: the tied head left out\n");
        return NULL;
    }
    if (!mpcl_layer_kind_known("transformer_decoder") || !mpcl_layer_kind_known("tied_lm_head")) {
        printf("no transformer_decoder or tied_lm_head kind: GPT-2's layers left out\n");
        return NULL;
    }
    mpcl_gpt2_config config = {.n_layer = 2,
                               .n_head = 2,
                               .n_embd = 8,
                               .n_positions = T,
                               .vocab_size = V,
                               .layer_norm_epsilon = 1e-5};
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(mpcl_gpt_model_params(NULL, &config, T, &p));
    return random_model(ctx, &p, seed, policy);
}

/* Greedy generation written here: the whole window each token (its last T
 * tokens), padded with token V - 1, all the logits read back and the
 * argmax of the last real position taken. */
static void reference_greedy(mpcl_model *m, const int32_t *prompt, size_t len, size_t new_tokens,
                             int32_t *out) {
    mpcl_context *ctx = mpcl_model_context(m);
    int32_t seq[64], window[T];
    float logits[T * V];
    memcpy(seq, prompt, len * sizeof *seq);
    mpcl_tensor *x = tu_tensor(ctx, MPCL_DTYPE_I32, 1, T);
    for (size_t i = 0; i < new_tokens; i++) {
        size_t start = len > T ? len - T : 0, n = len - start;
        for (size_t t = 0; t < T; t++) window[t] = t < n ? seq[start + t] : V - 1;
        TU_ASSERT_OK(mpcl_tensor_upload_i32(x, window, T));
        TU_ASSERT_OK(mpcl_model_predict(m, x));
        TU_ASSERT_OK(mpcl_model_read_logits(m, logits, T * V));
        const float *last = logits + (n - 1) * V;
        int32_t best = 0;
        for (int32_t v = 1; v < V; v++)
            if (last[v] > last[best]) best = v;
        seq[len++] = out[i] = best;
    }
    mpcl_tensor_destroy(x);
}

static void greedy_matches_the_reference(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const int32_t prompt[T] = {3, 1, 4, 1, 5, 9, 2, 6};
    mpcl_sample_params sp = mpcl_sample_default_params();
    sp.temperature = 0.0;
    for (int which = 0; which < MODELS; which++) {
        mpcl_model *m = test_gpt(ctx, which, 5, MPCL_POLICY_FLOAT32);
        if (!m) continue;
        assert_true(mpcl__model_can_step(m)); /* the cached path is the one tested */
        /* 1 token, some, T - 1 and T, each run past the context. */
        const size_t lens[] = {1, 3, T - 1, T};
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
            int32_t got[2 * T], want[2 * T];
            TU_ASSERT_OK(mpcl_generate(m, prompt, lens[k], 2 * T, &sp, got, NULL, NULL));
            reference_greedy(m, prompt, lens[k], 2 * T, want);
            printf("%s, prompt of %zu:", MODEL_NAMES[which], lens[k]);
            for (int i = 0; i < 2 * T; i++) printf(" %d", got[i]);
            printf("\n");
            assert_memory_equal(got, want, sizeof got);
        }
        mpcl_model_destroy(m);
    }
    mpcl_context_destroy(ctx);
}

/* The logits of cached steps against those of whole windows: the window
 * of a prompt of `len` tokens is run, then each later position of seq is
 * stepped alone and its logits compared with those of the whole sequence
 * at that position. */
static void check_steps(mpcl_model *m, const int32_t *seq, size_t len, double tol) {
    mpcl_context *ctx = mpcl_model_context(m);
    float full[T * V], step[V];
    int32_t window[T];
    mpcl_tensor *x = tu_tensor(ctx, MPCL_DTYPE_I32, 1, T);
    mpcl_tensor *token = tu_tensor(ctx, MPCL_DTYPE_I32, 1, 1);
    TU_ASSERT_OK(mpcl_tensor_upload_i32(x, seq, T));
    TU_ASSERT_OK(mpcl_model_predict(m, x));
    TU_ASSERT_OK(mpcl_model_read_logits(m, full, T * V));
    for (size_t t = 0; t < T; t++) window[t] = t < len ? seq[t] : 0;
    TU_ASSERT_OK(mpcl_tensor_upload_i32(x, window, T));
    TU_ASSERT_OK(mpcl_model_predict(m, x));
    for (size_t t = len; t < T; t++) {
        TU_ASSERT_OK(mpcl_tensor_upload_i32(token, &seq[t], 1));
        TU_ASSERT_OK(mpcl__model_forward_step(m, token, t));
        TU_ASSERT_OK(mpcl__model_read_step_logits(m, step, V));
        double *want = tu_to_double(full + t * V, V);
        char what[64];
        snprintf(what, sizeof what, "prompt %zu, step at %zu", len, t);
        assert_true(tu_check_close(what, step, want, V, tol, tol, tol));
        free(want);
    }
    mpcl_tensor_destroy(token);
    mpcl_tensor_destroy(x);
}

/* A step or a read outside the model's positions is refused. */
static void step_errors(mpcl_context *ctx, mpcl_model *m) {
    mpcl_tensor *token = tu_tensor(ctx, MPCL_DTYPE_I32, 1, 1);
    tu_expect_error(mpcl__model_forward_step(m, token, T), MPCL_ERR_INVALID_ARG,
                    "a step at position 8 of a model of 8 positions");
    /* One position's logits: inside the last step's samples and positions. */
    float logits[V];
    tu_expect_error(mpcl_model_read_position_logits(m, 0, T, logits, V), MPCL_ERR_SHAPE,
                    "logits of sample 0, position 8, 11 of them");
    tu_expect_error(mpcl_model_read_position_logits(m, 1, 0, logits, V), MPCL_ERR_SHAPE,
                    "the last step had 1 samples of 8 positions of 11 logits");
    tu_expect_error(mpcl_model_read_position_logits(m, 0, 0, logits, V - 1), MPCL_ERR_SHAPE,
                    "10 of them");
    mpcl_tensor_destroy(token);
}

static void cached_steps_match_whole_windows(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    const int32_t seq[T] = {3, 1, 4, 1, 5, 9, 2, 6};
    /* In f16 and bf16 storage both paths round the same activations; only
     * the GEMMs' sums of one row against all rows may differ in order. */
    const mpcl_policy policies[] = {MPCL_POLICY_FLOAT32, MPCL_POLICY_MIXED_FLOAT16,
                                    MPCL_POLICY_MIXED_BFLOAT16};
    for (int which = 0; which < MODELS; which++)
        for (size_t i = 0; i < 3; i++) {
            if (!mpcl_context_plan(ctx, policies[i]).usable) continue;
            mpcl_model *m = test_gpt(ctx, which, 8, policies[i]);
            if (!m) continue;
            assert_true(mpcl__model_can_step(m));
            bool f32 = policies[i] == MPCL_POLICY_FLOAT32;
            for (size_t len = 1; len < T; len += f32 ? 1 : 3)
                check_steps(m, seq, len, f32 ? 1e-4 : 5e-2);
            if (f32) step_errors(ctx, m);
            mpcl_model_destroy(m);
        }
    mpcl_context_destroy(ctx);
}

typedef struct seen {
    int32_t tokens[32];
    size_t count;
    size_t stop_at; /* the index whose callback fails */
} seen;

static mpcl_status record(void *user, size_t index, int32_t token) {
    seen *s = user;
    assert_int_equal(index, s->count);
    s->tokens[s->count++] = token;
    return index == s->stop_at ? MPCL_ERR_INVALID_ARG : MPCL_OK;
}

static void reproducible_from_the_seed(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_model *m = tiny_gpt(ctx, GPT_LAYERS, 6);
    const int32_t prompt[] = {2, 7};
    mpcl_sample_params sp = mpcl_sample_default_params();
    sp.temperature = 3.0; /* flat odds: the draws decide */
    int32_t a[20], b[20], c[20];
    seen s = {.stop_at = SIZE_MAX};
    TU_ASSERT_OK(mpcl_generate(m, prompt, 2, 20, &sp, a, record, &s));
    TU_ASSERT_OK(mpcl_generate(m, prompt, 2, 20, &sp, b, NULL, NULL));
    sp.seed++;
    TU_ASSERT_OK(mpcl_generate(m, prompt, 2, 20, &sp, c, NULL, NULL));
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(s.count, 20);
    assert_memory_equal(s.tokens, a, sizeof a);
    assert_true(memcmp(a, c, sizeof a) != 0);
    /* A callback that fails stops the generation with its status. */
    seen stop = {.stop_at = 3};
    assert_int_equal(mpcl_generate(m, prompt, 2, 20, &sp, NULL, record, &stop),
                     MPCL_ERR_INVALID_ARG);
    assert_int_equal(stop.count, 4);
    mpcl_model_destroy(m);
    mpcl_context_destroy(ctx);
}

static void generation_errors(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_model *m = tiny_gpt(ctx, "layer_normalization; dense units=11", 1);
    mpcl_sample_params sp = mpcl_sample_default_params();
    int32_t prompt[T + 1] = {0}, out[4];
    tu_expect_error(mpcl_generate(m, prompt, 0, 4, &sp, out, NULL, NULL), MPCL_ERR_INVALID_ARG,
                    "the prompt is empty");
    tu_expect_error(mpcl_generate(m, prompt, T + 1, 4, &sp, out, NULL, NULL), MPCL_ERR_INVALID_ARG,
                    "the prompt has 9 tokens; the model's context is 8");
    prompt[2] = V;
    tu_expect_error(mpcl_generate(m, prompt, 3, 4, &sp, out, NULL, NULL), MPCL_ERR_INVALID_ARG,
                    "prompt token 2 is 11; the vocabulary is 0..10");
    prompt[2] = -1;
    tu_expect_error(mpcl_generate(m, prompt, 3, 4, &sp, out, NULL, NULL), MPCL_ERR_INVALID_ARG,
                    "prompt token 2 is -1");
    prompt[2] = 0;
    sp.temperature = -1.0;
    tu_expect_error(mpcl_generate(m, prompt, 3, 4, &sp, out, NULL, NULL), MPCL_ERR_INVALID_ARG,
                    "temperature -1");
    mpcl_model_destroy(m);
    /* Not a GPT: an MLP of features. */
    mpcl_model_params p = mpcl_model_default_params();
    p.inputs = 4;
    p.policy = MPCL_POLICY_FLOAT32;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
    sp.temperature = 1.0;
    tu_expect_error(mpcl_generate(m, prompt, 3, 4, &sp, out, NULL, NULL), MPCL_ERR_INVALID_ARG,
                    "generation needs a GPT");
    mpcl_model_destroy(m);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(greedy_is_argmax),
        cmocka_unit_test(same_seed_same_draws),
        cmocka_unit_test(draws_follow_the_softmax),
        cmocka_unit_test(sampler_errors),
        cmocka_unit_test(greedy_matches_the_reference),
        cmocka_unit_test(cached_steps_match_whole_windows),
        cmocka_unit_test(reproducible_from_the_seed),
        cmocka_unit_test(generation_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
