/* Keras model files (mpcl/model_file.h): a Keras 3 and a Keras 2
 * Sequential CNN written here by hand as model.to_json() writes them, read
 * into the specs a model is built from; every refusal the header promises,
 * with the message naming the file, line, layer and key; and a file that
 * fails leaves the params as they were. No device. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "mpcl/model_file.h"

static char dir[64];

static int setup(void **state) {
    (void)state;
    return tu_tmpdir_make(dir, "model-file");
}

static int teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(dir);
}

static const char *write_file(const char *name, const char *text) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* Keras 3.x: an InputLayer with batch_shape, module and registered_name
 * keys, initializers as objects, a dtype policy object. */
static const char KERAS3[] =
    "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"cnn\",\n"
    " \"trainable\": true, \"dtype\": {\"module\": \"keras\", \"class_name\": \"DTypePolicy\",\n"
    " \"config\": {\"name\": \"float32\"}}, \"layers\": [\n"
    " {\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\": "
    "{\"batch_shape\":\n"
    "  [null, 28, 28, 1], \"dtype\": \"float32\", \"sparse\": false, \"name\": \"input_layer\"},\n"
    "  \"registered_name\": null},\n"
    " {\"module\": \"keras.layers\", \"class_name\": \"Conv2D\", \"config\": {\"name\": "
    "\"conv2d\",\n"
    "  \"trainable\": true, \"filters\": 32, \"kernel_size\": [3, 3], \"strides\": [1, 1],\n"
    "  \"padding\": \"valid\", \"data_format\": \"channels_last\", \"dilation_rate\": [1, 1],\n"
    "  \"groups\": 1, \"activation\": \"relu\", \"use_bias\": true, \"kernel_initializer\":\n"
    "  {\"module\": \"keras.initializers\", \"class_name\": \"GlorotUniform\", \"config\":\n"
    "  {\"seed\": null}}, \"bias_initializer\": {\"class_name\": \"Zeros\", \"config\": {}},\n"
    "  \"kernel_regularizer\": null, \"bias_regularizer\": null, \"activity_regularizer\": null,\n"
    "  \"kernel_constraint\": null, \"bias_constraint\": null}, \"registered_name\": null,\n"
    "  \"build_config\": {\"input_shape\": [null, 28, 28, 1]}},\n"
    " {\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"pool\", \"pool_size\": [2, 2],\n"
    "  \"padding\": \"valid\", \"strides\": [2, 2], \"data_format\": \"channels_last\"}},\n"
    " {\"class_name\": \"Conv2D\", \"config\": {\"filters\": 64, \"kernel_size\": [3, 3],\n"
    "  \"padding\": \"same\", \"activation\": \"linear\", \"use_bias\": false}},\n"
    " {\"class_name\": \"Flatten\", \"config\": {\"name\": \"flatten\", \"data_format\":\n"
    "  \"channels_last\"}},\n"
    " {\"class_name\": \"Dense\", \"config\": {\"units\": 128, \"activation\": \"tanh\",\n"
    "  \"lora_rank\": null}},\n"
    " {\"class_name\": \"Dense\", \"config\": {\"units\": 10, \"activation\": \"softmax\"}}\n"
    "]}, \"keras_version\": \"3.3.3\", \"backend\": \"tensorflow\"}\n";

/* Keras 2.x: no InputLayer, the shape as the first layer's
 * batch_input_shape. */
static const char KERAS2[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"mlp\", \"layers\": [\n"
    " {\"class_name\": \"Flatten\", \"config\": {\"name\": \"flatten\", \"trainable\": true,\n"
    "  \"batch_input_shape\": [null, 28, 28], \"dtype\": \"float32\", \"data_format\":\n"
    "  \"channels_last\"}},\n"
    " {\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"units\": 64,\n"
    "  \"activation\": \"relu\", \"use_bias\": true}},\n"
    " {\"class_name\": \"Dense\", \"config\": {\"name\": \"dense_1\", \"units\": 10,\n"
    "  \"activation\": \"linear\"}}]}, \"keras_version\": \"2.13.1\", \"backend\": "
    "\"tensorflow\"}\n";

static void reads_keras3(void **state) {
    (void)state;
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(mpcl_model_file_read(write_file("k3.json", KERAS3), &p));
    assert_int_equal(p.input_rank, 3);
    assert_int_equal(p.input_shape[0], 28);
    assert_int_equal(p.input_shape[2], 1);
    assert_int_equal(p.inputs, 784);
    assert_int_equal(p.layer_count, 6);
    const char *kinds[] = {"conv2d", "max_pooling2d", "conv2d", "flatten", "dense", "dense"};
    for (size_t i = 0; i < 6; i++) assert_string_equal(p.layers[i].kind, kinds[i]);
    assert_int_equal(p.layers[0].filters, 32);
    assert_int_equal(p.layers[0].kernel_size[1], 3);
    assert_int_equal(p.layers[0].activation, MPCL_ACT_RELU);
    assert_int_equal(p.layers[1].strides[0], 2);
    assert_int_equal(p.layers[2].padding, MPCL_PADDING_SAME);
    assert_false(p.layers[2].use_bias);
    assert_int_equal(p.layers[2].activation, MPCL_ACT_IDENTITY);
    assert_int_equal(p.layers[4].activation, MPCL_ACT_TANH);
    /* The last softmax is kept as declared: the cross-entropy applies it. */
    assert_int_equal(p.layers[5].activation, MPCL_ACT_SOFTMAX);
    assert_int_equal(p.layers[5].units, 10);
    assert_int_equal(mpcl_model_output_activation(&p), MPCL_ACT_SOFTMAX);
    /* The model the file describes has Keras' shapes and counts. */
    p.classes = 10;
    mpcl_layer_summary s[MPCL_MAX_LAYERS];
    size_t n = 0;
    TU_ASSERT_OK(mpcl_model_summary(NULL, &p, s, &n));
    assert_int_equal(n, 6);
    assert_int_equal(s[2].out_shape[0], 13);
    assert_int_equal(s[2].out_shape[2], 64);
    assert_int_equal(s[0].params, 3 * 3 * 32 + 32);
    assert_int_equal(s[2].params, 3 * 3 * 32 * 64);
    assert_int_equal(s[3].out_shape[0], 13 * 13 * 64);
}

static void reads_keras2(void **state) {
    (void)state;
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(mpcl_model_file_read(write_file("k2.json", KERAS2), &p));
    assert_int_equal(p.input_rank, 2);
    assert_int_equal(p.inputs, 784);
    assert_int_equal(p.layer_count, 3);
    assert_string_equal(p.layers[0].kind, "flatten");
    assert_int_equal(p.layers[1].units, 64);
}

/* Keras 3.x: LayerNormalization over a (T, C) input, its config as
 * get_config() writes it (axis, epsilon, center, scale, rms_scaling, the
 * initializers, regularizers and constraints). */
static const char KERAS3_LAYER_NORM[] =
    "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"seq\",\n"
    " \"layers\": [\n"
    " {\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 16, 8],\n"
    "  \"dtype\": \"float32\", \"sparse\": false, \"name\": \"input_layer\"}},\n"
    " {\"module\": \"keras.layers\", \"class_name\": \"LayerNormalization\", \"config\":\n"
    "  {\"name\": \"layer_normalization\", \"trainable\": true, \"dtype\": \"float32\",\n"
    "  \"axis\": -1, \"epsilon\": 1e-05, \"center\": true, \"scale\": true,\n"
    "  \"rms_scaling\": false, \"beta_initializer\": {\"module\": \"keras.initializers\",\n"
    "  \"class_name\": \"Zeros\", \"config\": {}, \"registered_name\": null},\n"
    "  \"gamma_initializer\": {\"module\": \"keras.initializers\", \"class_name\": \"Ones\",\n"
    "  \"config\": {}, \"registered_name\": null}, \"beta_regularizer\": null,\n"
    "  \"gamma_regularizer\": null, \"beta_constraint\": null, \"gamma_constraint\": null},\n"
    "  \"registered_name\": null, \"build_config\": {\"input_shape\": [null, 16, 8]}},\n"
    " {\"class_name\": \"Flatten\", \"config\": {\"name\": \"flatten\"}},\n"
    " {\"class_name\": \"LayerNormalization\", \"config\": {\"axis\": [-1]}},\n"
    " {\"class_name\": \"Dense\", \"config\": {\"units\": 4}}\n"
    "]}, \"keras_version\": \"3.3.3\", \"backend\": \"tensorflow\"}\n";

static void reads_keras3_layer_norm(void **state) {
    (void)state;
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(mpcl_model_file_read(write_file("ln.json", KERAS3_LAYER_NORM), &p));
    assert_int_equal(p.input_rank, 2);
    assert_int_equal(p.input_shape[0], 16);
    assert_int_equal(p.input_shape[1], 8);
    assert_int_equal(p.layer_count, 4);
    const char *kinds[] = {"layer_normalization", "flatten", "layer_normalization", "dense"};
    for (size_t i = 0; i < 4; i++) assert_string_equal(p.layers[i].kind, kinds[i]);
    assert_true(p.layers[0].epsilon == 1e-5);
    assert_true(p.layers[2].epsilon == 1e-3); /* Keras' default */
    /* gamma and beta per channel: 8, then the 128 flattened features. */
    p.classes = 4;
    mpcl_layer_summary s[MPCL_MAX_LAYERS];
    size_t n = 0;
    TU_ASSERT_OK(mpcl_model_summary(NULL, &p, s, &n));
    assert_int_equal(s[0].params, 2 * 8);
    assert_int_equal(s[2].params, 2 * 128);
    /* What mpcl cannot honour is refused by key. */
    static const char *const cases[][3] = {
        {"\"rms_scaling\": false", "\"rms_scaling\": true", "rms_scaling is true"},
        {"\"center\": true", "\"center\": false", "center is false"},
        {"\"axis\": -1", "\"axis\": 1", "axis is 1; mpcl supports only -1"},
        {"\"epsilon\": 1e-05", "\"epsilon\": 0", "epsilon=\"0\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *at = strstr(KERAS3_LAYER_NORM, cases[i][0]);
        assert_non_null(at);
        char text[sizeof KERAS3_LAYER_NORM + 16];
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - KERAS3_LAYER_NORM), KERAS3_LAYER_NORM,
                 cases[i][1], at + strlen(cases[i][0]));
        assert_int_equal(mpcl_model_file_read(write_file("bad_ln.json", text), &p),
                         MPCL_ERR_FORMAT);
        if (!strstr(mpcl_errmsg(), cases[i][2]) || !strstr(mpcl_errmsg(), "LayerNormalization"))
            fail_msg("case %zu: wanted '%s' in: %s", i, cases[i][2], mpcl_errmsg());
    }
}

/* Keras-NLP's TokenAndPositionEmbedding over int32 ids (its get_config:
 * vocabulary_size, sequence_length, embedding_dim, embeddings_initializer,
 * mask_zero), then Dense per position. */
static const char KERAS_NLP_EMBEDDING[] =
    "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"lm\",\n"
    " \"layers\": [\n"
    " {\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 8],\n"
    "  \"dtype\": \"int32\", \"sparse\": false, \"name\": \"input_layer\"}},\n"
    " {\"module\": \"keras_nlp.layers\", \"class_name\": \"TokenAndPositionEmbedding\",\n"
    "  \"config\": {\"name\": \"token_and_position_embedding\", \"trainable\": true,\n"
    "  \"dtype\": \"float32\", \"vocabulary_size\": 256, \"sequence_length\": 16,\n"
    "  \"embedding_dim\": 32, \"embeddings_initializer\": {\"module\":\n"
    "  \"keras.initializers\", \"class_name\": \"RandomUniform\", \"config\": {\"minval\":\n"
    "  -0.05, \"maxval\": 0.05, \"seed\": null}, \"registered_name\": null},\n"
    "  \"mask_zero\": false},\n"
    "  \"registered_name\": \"keras_nlp>TokenAndPositionEmbedding\"},\n"
    " {\"class_name\": \"Dense\", \"config\": {\"units\": 256}}\n"
    "]}, \"keras_version\": \"3.3.3\", \"backend\": \"tensorflow\"}\n";

static void reads_keras_nlp_embedding(void **state) {
    (void)state;
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(mpcl_model_file_read(write_file("emb.json", KERAS_NLP_EMBEDDING), &p));
    assert_int_equal(p.input_rank, 1);
    assert_int_equal(p.inputs, 8);
    assert_int_equal(p.layer_count, 2);
    assert_string_equal(p.layers[0].kind, "token_pos_embedding");
    assert_int_equal(p.layers[0].vocabulary_size, 256);
    assert_int_equal(p.layers[0].sequence_length, 16);
    assert_int_equal(p.layers[0].embedding_dim, 32);
    /* (8, 32) after the embedding, (8, 256) logits per position. */
    p.classes = 256;
    mpcl_layer_summary s[MPCL_MAX_LAYERS];
    size_t n = 0;
    TU_ASSERT_OK(mpcl_model_summary(NULL, &p, s, &n));
    assert_int_equal(s[0].params, (256 + 16) * 32);
    assert_int_equal(s[1].out_rank, 2);
    assert_int_equal(s[1].out_shape[1], 256);
    static const char *const cases[][3] = {
        {"\"mask_zero\": false", "\"mask_zero\": true", "mask_zero is true"},
        {"\"embedding_dim\": 32,", "", "embedding_dim"},
        {"\"sequence_length\": 16", "\"sequence_length\": 0", "sequence_length=\"0\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *at = strstr(KERAS_NLP_EMBEDDING, cases[i][0]);
        assert_non_null(at);
        char text[sizeof KERAS_NLP_EMBEDDING + 16];
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - KERAS_NLP_EMBEDDING),
                 KERAS_NLP_EMBEDDING, cases[i][1], at + strlen(cases[i][0]));
        assert_int_equal(mpcl_model_file_read(write_file("bad_emb.json", text), &p),
                         MPCL_ERR_FORMAT);
        if (!strstr(mpcl_errmsg(), cases[i][2]) ||
            !strstr(mpcl_errmsg(), "TokenAndPositionEmbedding"))
            fail_msg("case %zu: wanted '%s' in: %s", i, cases[i][2], mpcl_errmsg());
    }
}

/* Keras 3.x: a custom layer registered as CausalSelfAttention (module
 * null) with num_heads and use_bias in its config, over (T, C) = (16, 8). */
static const char KERAS3_ATTENTION[] =
    "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"seq\",\n"
    " \"layers\": [\n"
    " {\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 16, 8],\n"
    "  \"dtype\": \"float32\", \"sparse\": false, \"name\": \"input_layer\"}},\n"
    " {\"module\": null, \"class_name\": \"CausalSelfAttention\", \"config\":\n"
    "  {\"name\": \"attn\", \"trainable\": true, \"dtype\": \"float32\", \"num_heads\": 4,\n"
    "  \"use_bias\": false}, \"registered_name\": \"CausalSelfAttention\",\n"
    "  \"build_config\": {\"input_shape\": [null, 16, 8]}},\n"
    " {\"class_name\": \"Flatten\", \"config\": {\"name\": \"flatten\"}},\n"
    " {\"class_name\": \"Dense\", \"config\": {\"units\": 4}}\n"
    "]}, \"keras_version\": \"3.3.3\", \"backend\": \"tensorflow\"}\n";

static void reads_keras3_causal_self_attention(void **state) {
    (void)state;
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(mpcl_model_file_read(write_file("attn.json", KERAS3_ATTENTION), &p));
    assert_int_equal(p.layer_count, 3);
    assert_string_equal(p.layers[0].kind, "causal_self_attention");
    assert_int_equal(p.layers[0].num_heads, 4);
    assert_false(p.layers[0].use_bias);
    /* The c_attn [8, 24] and c_proj [8, 8] kernels, no biases. */
    p.classes = 4;
    mpcl_layer_summary s[MPCL_MAX_LAYERS];
    size_t n = 0;
    TU_ASSERT_OK(mpcl_model_summary(NULL, &p, s, &n));
    assert_int_equal(s[0].params, 8 * 24 + 8 * 8);
    /* Without num_heads, which has no default: refused by name. */
    const char *at = strstr(KERAS3_ATTENTION, "\"num_heads\": 4,");
    assert_non_null(at);
    char text[sizeof KERAS3_ATTENTION];
    snprintf(text, sizeof text, "%.*s%s", (int)(at - KERAS3_ATTENTION), KERAS3_ATTENTION,
             at + strlen("\"num_heads\": 4,"));
    assert_int_equal(mpcl_model_file_read(write_file("bad_attn.json", text), &p), MPCL_ERR_FORMAT);
    if (!strstr(mpcl_errmsg(), "num_heads")) fail_msg("wanted num_heads in: %s", mpcl_errmsg());
}

/* Keras 3.x: token embedding, then a custom layer registered as TiedLMHead
 * (no config of its own beyond Keras' name, trainable, dtype). */
static const char KERAS3_TIED_HEAD[] =
    "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"lm\",\n"
    " \"layers\": [\n"
    " {\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 8],\n"
    "  \"dtype\": \"int32\", \"sparse\": false, \"name\": \"input_layer\"}},\n"
    " {\"module\": \"keras_nlp.layers\", \"class_name\": \"TokenAndPositionEmbedding\",\n"
    "  \"config\": {\"vocabulary_size\": 50, \"sequence_length\": 16, \"embedding_dim\": 12}},\n"
    " {\"module\": null, \"class_name\": \"TiedLMHead\", \"config\":\n"
    "  {\"name\": \"lm_head\", \"trainable\": true, \"dtype\": \"float32\"},\n"
    "  \"registered_name\": \"TiedLMHead\"}\n"
    "]}, \"keras_version\": \"3.3.3\", \"backend\": \"tensorflow\"}\n";

static void reads_keras3_tied_lm_head(void **state) {
    (void)state;
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(mpcl_model_file_read(write_file("tied.json", KERAS3_TIED_HEAD), &p));
    assert_int_equal(p.layer_count, 2);
    assert_string_equal(p.layers[1].kind, "tied_lm_head");
    /* Logits (8, 50) per position; the head's weights are wte: it counts none. */
    p.classes = 50;
    mpcl_layer_summary s[MPCL_MAX_LAYERS];
    size_t n = 0;
    TU_ASSERT_OK(mpcl_model_summary(NULL, &p, s, &n));
    assert_int_equal(s[0].params, (50 + 16) * 12);
    assert_int_equal(s[1].params, 0);
    assert_int_equal(s[1].out_shape[0], 8);
    assert_int_equal(s[1].out_shape[1], 50);
}

/* Keras-NLP's TransformerDecoder (registered under its class name) over
 * (T, C) = (16, 8): its attributes, and normalize_first and dropout, which
 * mpcl honours in one value only. */
static const char KERAS3_DECODER[] =
    "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"seq\",\n"
    " \"layers\": [\n"
    " {\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 16, 8]}},\n"
    " {\"module\": \"keras_nlp.layers\", \"class_name\": \"TransformerDecoder\", \"config\":\n"
    "  {\"name\": \"block\", \"trainable\": true, \"dtype\": \"float32\", \"num_heads\": 2,\n"
    "  \"intermediate_dim\": 24, \"dropout\": 0, \"layer_norm_epsilon\": 1e-05,\n"
    "  \"kernel_initializer\": {\"class_name\": \"RandomNormal\"}, \"normalize_first\": true},\n"
    "  \"registered_name\": \"keras_nlp>TransformerDecoder\"},\n"
    " {\"class_name\": \"Flatten\", \"config\": {\"name\": \"flatten\"}},\n"
    " {\"class_name\": \"Dense\", \"config\": {\"units\": 4}}\n"
    "]}, \"keras_version\": \"3.3.3\", \"backend\": \"tensorflow\"}\n";

static void reads_keras3_transformer_decoder(void **state) {
    (void)state;
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(mpcl_model_file_read(write_file("decoder.json", KERAS3_DECODER), &p));
    assert_int_equal(p.layer_count, 3);
    assert_string_equal(p.layers[0].kind, "transformer_decoder");
    assert_int_equal(p.layers[0].num_heads, 2);
    assert_int_equal(p.layers[0].intermediate_dim, 24);
    assert_true(p.layers[0].epsilon == 1e-5);
    /* Two layer norms (8 + 8 each), c_attn 8x24 + 24, c_proj 8x8 + 8, c_fc
     * 8x24 + 24, c_proj 24x8 + 8. */
    p.classes = 4;
    mpcl_layer_summary s[MPCL_MAX_LAYERS];
    size_t n = 0;
    TU_ASSERT_OK(mpcl_model_summary(NULL, &p, s, &n));
    assert_int_equal(s[0].params,
                     2 * 16 + (8 * 24 + 24) + (8 * 8 + 8) + (8 * 24 + 24) + (24 * 8 + 8));
    /* A post-norm block (normalize_first false) is not GPT-2's: refused. */
    const char *at = strstr(KERAS3_DECODER, "\"normalize_first\": true");
    assert_non_null(at);
    char text[sizeof KERAS3_DECODER + 1]; /* "false" is one byte longer than "true" */
    size_t head = (size_t)(at - KERAS3_DECODER);
    memcpy(text, KERAS3_DECODER, head);
    strcpy(text + head, "\"normalize_first\": false");
    strcat(text, at + strlen("\"normalize_first\": true"));
    assert_int_equal(mpcl_model_file_read(write_file("post_norm.json", text), &p), MPCL_ERR_FORMAT);
    if (!strstr(mpcl_errmsg(), "normalize_first"))
        fail_msg("wanted normalize_first in: %s", mpcl_errmsg());
}

/* KERAS3 with the first `from` replaced by `to`. */
static char *edited(const char *from, const char *to) {
    const char *at = strstr(KERAS3, from);
    assert_non_null(at);
    size_t head = (size_t)(at - KERAS3);
    char *s = malloc(sizeof KERAS3 + strlen(to));
    memcpy(s, KERAS3, head);
    strcpy(s + head, to);
    strcat(s, at + strlen(from));
    return s;
}

static void refuses_with_reason(void **state) {
    (void)state;
    static const char *const cases[][3] = {
        {"\"Conv2D\", \"config\": {\"name\": \"conv2d\"",
         "\"Conv3D\", \"config\": {\"name\": \"c\"", "layer 1 is Conv3D, which mpcl does not have"},
        {"\"filters\": 32", "\"filterz\": 32", "layer 1 (Conv2D): unknown attribute \"filterz\""},
        {"\"filters\": 32", "\"filters\": -32", "filters=\"-32\""},
        {"\"filters\": 32", "\"filters\": 2.5", "filters=\"2.5\""},
        {"\"filters\": 32", "\"filters\": \"many\"", "filters=\"many\""},
        {"\"dilation_rate\": [1, 1]", "\"dilation_rate\": [2, 2]",
         "dilation_rate is [2,2]; mpcl supports only 1"},
        {"\"data_format\": \"channels_last\", \"dil", "\"data_format\": \"channels_first\", \"dil",
         "data_format is channels_first"},
        {"\"activation\": \"relu\"", "\"activation\": \"swish\"", "activation=\"swish\""},
        {"\"activation\": \"relu\"", "\"activation\": {\"f\": 1}", "activation is an object"},
        {"\"padding\": \"valid\", \"data", "\"padding\": \"causal\", \"data", "padding=\"causal\""},
        {"\"class_name\": \"Sequential\"", "\"class_name\": \"Functional\"",
         "mpcl reads Sequential models"},
        {"\"layers\": [", "\"layerz\": [", "has no layers list"},
        {"[null, 28, 28, 1], \"dtype\"", "[28, 28, 1], \"dtype\"", "an input shape is [null"},
        {"\"units\": 128", "\"units\": 0", "units=\"0\""},
        {"\"kernel_size\": [3, 3], \"strides\"", "\"kernel_size\": [3, 3, 3], \"strides\"",
         "kernel_size=\"3,3,3\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = edited(cases[i][0], cases[i][1]);
        const char *path = write_file("bad.json", text);
        mpcl_model_params p = mpcl_model_default_params(), before = p;
        mpcl_status st = mpcl_model_file_read(path, &p);
        if (st != MPCL_ERR_FORMAT)
            fail_msg("case %zu: %s, want a format error", i, mpcl_status_name(st));
        if (!strstr(mpcl_errmsg(), cases[i][2]) || !strstr(mpcl_errmsg(), "bad.json") ||
            !strstr(mpcl_errmsg(), "line "))
            fail_msg("case %zu: wanted '%s', the file and a line in: %s", i, cases[i][2],
                     mpcl_errmsg());
        assert_memory_equal(&p, &before, sizeof p);
        free(text);
    }
    /* Not JSON, not there, and a folder. */
    mpcl_model_params p = mpcl_model_default_params();
    assert_int_equal(mpcl_model_file_read(write_file("trunc.json", "{\"class_name\": "), &p),
                     MPCL_ERR_FORMAT);
    assert_non_null(strstr(mpcl_errmsg(), "trunc.json"));
    char missing[128];
    snprintf(missing, sizeof missing, "%s/none.json", dir);
    assert_int_equal(mpcl_model_file_read(missing, &p), MPCL_ERR_IO);
    assert_non_null(strstr(mpcl_errmsg(), "none.json"));
    assert_int_equal(mpcl_model_file_read(dir, &p), MPCL_ERR_IO);
    assert_int_equal(mpcl_model_file_read(NULL, &p), MPCL_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_keras3),
        cmocka_unit_test(reads_keras2),
        cmocka_unit_test(reads_keras3_layer_norm),
        cmocka_unit_test(reads_keras_nlp_embedding),
        cmocka_unit_test(reads_keras3_causal_self_attention),
        cmocka_unit_test(reads_keras3_tied_lm_head),
        cmocka_unit_test(reads_keras3_transformer_decoder),
        cmocka_unit_test(refuses_with_reason),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
