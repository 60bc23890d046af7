/* GPT-2's layer list (mpcl/gpt.h) without a device: mpcl_gpt_model_params
 * gives the GPT of a config (the kinds in order, their attributes, the
 * input shape, the loss, GPT-2's parameter count) and keeps the caller's
 * other fields; each bad config or context is refused naming what is wrong,
 * params unchanged; mpcl_gpt_config_of reads the config back and refuses
 * a list that differs from a GPT in any one way. The layer list needs the
 * kinds transformer_decoder and tied_lm_head: without them those tests skip
 * (the refusals of bad configs run regardless). */
#include <stdio.h>
#include <string.h>

#include "mpcl/gpt.h"
#include "testutil.h"

/* The reference's tiny model (tests/data/gpt2-ref). */
static const mpcl_gpt2_config TINY = {.n_layer = 2,
                                      .n_head = 2,
                                      .n_embd = 16,
                                      .n_positions = 16,
                                      .vocab_size = 256,
                                      .layer_norm_epsilon = 1e-5};

static bool gpt_kinds_known(void) {
    return mpcl_layer_kind_known("transformer_decoder") && mpcl_layer_kind_known("tied_lm_head");
}

/* Fields the builder must keep. */
static mpcl_model_params caller_params(void) {
    mpcl_model_params p = mpcl_model_default_params();
    p.policy = MPCL_POLICY_MIXED_BFLOAT16;
    p.max_batch = 7;
    p.seed = 1234;
    p.optim = mpcl_optim_default_params(MPCL_OPTIM_ADAMW);
    p.optim.decay_vectors = 0;
    return p;
}

static void expect_attr(const mpcl_layer_spec *s, const char *attr, const char *want) {
    char got[64];
    TU_ASSERT_OK(mpcl_layer_spec_get(NULL, s, attr, got, sizeof got));
    if (strcmp(got, want) != 0) fail_msg("%s %s is %s, want %s", s->kind, attr, got, want);
}

static void expect_real_attr(const mpcl_layer_spec *s, const char *attr, double want) {
    char got[64];
    TU_ASSERT_OK(mpcl_layer_spec_get(NULL, s, attr, got, sizeof got));
    double v = 0;
    assert_int_equal(mpcl_parse_real(got, &v), MPCL_NUMBER_OK);
    if (v != want) fail_msg("%s %s is %s, want %.17g", s->kind, attr, got, want);
}

static void builds_the_layer_list(void **state) {
    (void)state;
    if (!gpt_kinds_known()) skip();
    mpcl_model_params p = caller_params(), kept = p;
    TU_ASSERT_OK(mpcl_gpt_model_params(NULL, &TINY, 9, &p));
    assert_int_equal(p.input_rank, 1);
    assert_int_equal(p.input_shape[0], 9);
    assert_int_equal(p.inputs, 9);
    assert_int_equal(p.classes, 256);
    assert_int_equal(p.loss, MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY);
    assert_int_equal(p.layer_count, 5);
    assert_string_equal(p.layers[0].kind, "token_pos_embedding");
    expect_attr(&p.layers[0], "vocabulary_size", "256");
    expect_attr(&p.layers[0], "sequence_length", "16");
    expect_attr(&p.layers[0], "embedding_dim", "16");
    for (size_t i = 1; i <= 2; i++) {
        assert_string_equal(p.layers[i].kind, "transformer_decoder");
        expect_attr(&p.layers[i], "num_heads", "2");
        expect_attr(&p.layers[i], "intermediate_dim", "64");
        expect_attr(&p.layers[i], "use_bias", "true");
        expect_real_attr(&p.layers[i], "layer_norm_epsilon", 1e-5);
    }
    assert_string_equal(p.layers[3].kind, "layer_normalization");
    expect_real_attr(&p.layers[3], "epsilon", 1e-5);
    assert_string_equal(p.layers[4].kind, "tied_lm_head");
    for (size_t i = 0; i < p.layer_count; i++)
        TU_ASSERT_OK(mpcl_layer_spec_check(NULL, &p.layers[i]));
    assert_int_equal(p.policy, kept.policy);
    assert_int_equal(p.max_batch, kept.max_batch);
    assert_int_equal(p.seed, kept.seed);
    assert_memory_equal(&p.optim, &kept.optim, sizeof p.optim);
    assert_int_equal(p.loss_scaling, kept.loss_scaling);
}

/* The shapes chain and the parameters are GPT-2's: (V + P) C for the
 * embeddings, 12 C^2 + 13 C per block, 2 C for ln_f, none for the tied
 * head; the output is (T, V) logits. */
static void summary_is_gpt2s(void **state) {
    (void)state;
    if (!gpt_kinds_known()) skip();
    mpcl_model_params p = caller_params();
    TU_ASSERT_OK(mpcl_gpt_model_params(NULL, &TINY, 9, &p));
    mpcl_layer_summary s[MPCL_MAX_LAYERS];
    size_t n = 0;
    TU_ASSERT_OK(mpcl_model_summary(NULL, &p, s, &n));
    assert_int_equal(n, 5);
    size_t C = 16, V = 256, P = 16;
    assert_int_equal(s[0].params, (V + P) * C);
    assert_int_equal(s[1].params, 12 * C * C + 13 * C);
    assert_int_equal(s[2].params, 12 * C * C + 13 * C);
    assert_int_equal(s[3].params, 2 * C);
    assert_int_equal(s[4].params, 0);
    assert_int_equal(s[4].out_rank, 2);
    assert_int_equal(s[4].out_shape[0], 9);
    assert_int_equal(s[4].out_shape[1], V);
}

static void config_reads_back(void **state) {
    (void)state;
    if (!gpt_kinds_known()) skip();
    mpcl_gpt2_config c = TINY;
    c.n_layer = MPCL_MAX_LAYERS - 3; /* the most a model holds */
    c.layer_norm_epsilon = 1e-6;
    mpcl_model_params p = caller_params();
    TU_ASSERT_OK(mpcl_gpt_model_params(NULL, &c, 16, &p));
    assert_int_equal(p.layer_count, MPCL_MAX_LAYERS);
    mpcl_gpt2_config back;
    memset(&back, 0xa5, sizeof back);
    TU_ASSERT_OK(mpcl_gpt_config_of(&p, &back));
    assert_int_equal(back.n_layer, c.n_layer);
    assert_int_equal(back.n_head, c.n_head);
    assert_int_equal(back.n_embd, c.n_embd);
    assert_int_equal(back.n_positions, c.n_positions);
    assert_int_equal(back.vocab_size, c.vocab_size);
    assert_true(back.layer_norm_epsilon == c.layer_norm_epsilon);
}

/* mpcl_gpt_model_params refuses config with `needle` in the message and
 * leaves params as they were. */
static void expect_refused(const mpcl_gpt2_config *config, size_t context, const char *needle) {
    mpcl_model_params p = caller_params(), before = p;
    tu_expect_error(mpcl_gpt_model_params(NULL, config, context, &p), MPCL_ERR_INVALID_ARG, needle);
    assert_memory_equal(&p, &before, sizeof p);
}

static void bad_configs_refused(void **state) {
    (void)state;
    mpcl_gpt2_config c = TINY;
    c.n_head = 3;
    expect_refused(&c, 9, "n_embd 16 is not a multiple of n_head 3");
    expect_refused(&TINY, 0, "a context of 0 tokens; it must be from 1 to n_positions 16");
    expect_refused(&TINY, 17, "a context of 17 tokens; it must be from 1 to n_positions 16");
    c = TINY;
    c.n_layer = MPCL_MAX_LAYERS - 2;
    char want[128];
    snprintf(want, sizeof want, "n_layer %d makes %d layers", MPCL_MAX_LAYERS - 2,
             MPCL_MAX_LAYERS + 1);
    expect_refused(&c, 9, want);
    static const char *const fields[] = {"n_layer", "n_head", "n_embd", "n_positions",
                                         "vocab_size"};
    for (size_t f = 0; f < 5; f++) {
        c = TINY;
        size_t *field[] = {&c.n_layer, &c.n_head, &c.n_embd, &c.n_positions, &c.vocab_size};
        *field[f] = 0;
        snprintf(want, sizeof want, "%s is 0", fields[f]);
        expect_refused(&c, 9, want);
    }
    c = TINY;
    c.layer_norm_epsilon = 0;
    expect_refused(&c, 9, "layer_norm_epsilon is 0");
    expect_refused(NULL, 9, "GPT-2 config: NULL");
    tu_expect_error(mpcl_gpt_model_params(NULL, &TINY, 9, NULL), MPCL_ERR_INVALID_ARG,
                    "params is NULL");
}

/* The GPT of TINY with one change made by `change`, refused by
 * mpcl_gpt_config_of with needle. */
static void expect_not_gpt(void (*change)(mpcl_model_params *), const char *needle) {
    mpcl_model_params p = caller_params();
    TU_ASSERT_OK(mpcl_gpt_model_params(NULL, &TINY, 9, &p));
    change(&p);
    mpcl_gpt2_config out = {0};
    tu_expect_error(mpcl_gpt_config_of(&p, &out), MPCL_ERR_INVALID_ARG, needle);
    assert_int_equal(out.n_layer, 0);
}

static void set(mpcl_model_params *p, size_t layer, const char *attr, const char *value) {
    TU_ASSERT_OK(mpcl_layer_spec_set(NULL, &p->layers[layer], attr, value));
}

static void heads_differ(mpcl_model_params *p) {
    set(p, 2, "num_heads", "4");
}
static void inner_not_4c(mpcl_model_params *p) {
    set(p, 1, "intermediate_dim", "32");
}
static void no_biases(mpcl_model_params *p) {
    set(p, 2, "use_bias", "false");
}
static void block_epsilon_differs(mpcl_model_params *p) {
    set(p, 2, "layer_norm_epsilon", "0.001");
}
static void final_epsilon_differs(mpcl_model_params *p) {
    set(p, 3, "epsilon", "0.001");
}
static void dense_head(mpcl_model_params *p) {
    TU_ASSERT_OK(mpcl_layer_spec_parse(NULL, "dense units=256", &p->layers[4]));
}
static void dense_block(mpcl_model_params *p) {
    TU_ASSERT_OK(mpcl_layer_spec_parse(NULL, "dense units=16", &p->layers[1]));
}
static void no_blocks(mpcl_model_params *p) {
    p->layers[1] = p->layers[3];
    p->layers[2] = p->layers[4];
    p->layer_count = 3;
}
static void mse_loss(mpcl_model_params *p) {
    p->loss = MPCL_LOSS_MSE;
}
static void mlp(mpcl_model_params *p) {
    p->layer_count = 0;
}

static void other_lists_refused(void **state) {
    (void)state;
    if (!gpt_kinds_known()) skip();
    expect_not_gpt(heads_differ, "not a GPT model: layer 2 has num_heads 4; layer 1 has 2");
    expect_not_gpt(inner_not_4c, "layer 1 has intermediate_dim 32; GPT-2's is 4 n_embd = 64");
    expect_not_gpt(no_biases, "layer 2 has no biases (use_bias)");
    expect_not_gpt(block_epsilon_differs,
                   "layer 2 has layer_norm_epsilon 0.001; layer 1 has 1e-05");
    expect_not_gpt(final_epsilon_differs,
                   "layer 3 (layer_normalization) has epsilon 0.001; the blocks' "
                   "layer_norm_epsilon is 1e-05");
    expect_not_gpt(dense_head, "layer 4 is dense; a GPT's is tied_lm_head");
    expect_not_gpt(dense_block, "layer 1 is dense; a GPT's is transformer_decoder");
    expect_not_gpt(no_blocks, "3 layers; a GPT has token_pos_embedding, at least one");
    expect_not_gpt(mse_loss, "its loss is mse");
    expect_not_gpt(mlp, "0 layers");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(builds_the_layer_list), cmocka_unit_test(summary_is_gpt2s),
        cmocka_unit_test(config_reads_back),     cmocka_unit_test(bad_configs_refused),
        cmocka_unit_test(other_lists_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
