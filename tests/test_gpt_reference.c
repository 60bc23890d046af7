/* PyTorch's GPT-2 reference dump (tests/data/gpt2-ref, written by
 * bench/make_gpt_reference.py) as tests/gpt_reference.h loads it: the
 * committed dump is whole, consistent and of the configuration, and
 * each of the loader's checks refuses a copy corrupted in its one way. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "gpt_reference.h"
#include "io/json.h"

static char tmp[64];

static int group_setup(void **state) {
    (void)state;
    return tu_tmpdir_make(tmp, "gpt-ref");
}

static int group_teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(tmp);
}

/* ---- the committed dump ---- */

/* The tiny model: 2 layers, 2 heads, 16 channels and positions, 256
 * byte tokens; an odd T; torch.optim.AdamW as llm.c trains. */
static void check_settings(const gpt_reference *ref) {
    const mpcl_gpt2_config *c = &ref->weights->config;
    assert_int_equal(c->n_layer, 2);
    assert_int_equal(c->n_head, 2);
    assert_int_equal(c->n_embd, 16);
    assert_int_equal(c->n_positions, 16);
    assert_int_equal(c->vocab_size, 256);
    assert_true(c->layer_norm_epsilon == 1e-5);
    assert_int_equal(ref->seq % 2, 1);
    assert_int_equal(ref->steps, 10);
    assert_true(ref->adamw.lr == 1e-3);
    assert_true(ref->adamw.beta1 == 0.9 && ref->adamw.beta2 == 0.95);
    assert_true(ref->adamw.eps == 1e-8);
    assert_true(ref->adamw.weight_decay == 0.1);
}

/* tokens and targets are the bytes of reference.json's text as llm.c's
 * loader reads them: bytes[0 : B*T] and bytes[1 : B*T+1], viewed [B, T]. */
static void check_text(const char *folder, const gpt_reference *ref) {
    char path[600];
    snprintf(path, sizeof path, "%s/reference.json", folder);
    mpcl__json *doc = NULL;
    TU_ASSERT_OK(mpcl__json_read_file(path, 1 << 20, &doc));
    const mpcl__json_value *batch = mpcl__json_member(mpcl__json_root(doc), "batch");
    size_t len = 0;
    const unsigned char *text =
        (const unsigned char *)mpcl__json_string(mpcl__json_member(batch, "text"), &len);
    assert_non_null(text);
    assert_int_equal(mpcl__json_number(mpcl__json_member(batch, "B")), ref->batch);
    assert_int_equal(mpcl__json_number(mpcl__json_member(batch, "T")), ref->seq);
    size_t n = ref->batch * ref->seq;
    assert_int_equal(len, n + 1);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ref->tokens[i], text[i]);
        assert_int_equal(ref->targets[i], text[i + 1]);
    }
    mpcl__json_free(doc);
}

static void loads_pytorch_dump(void **state) {
    (void)state;
    char folder[512];
    gpt_reference ref;
    TU_ASSERT_OK(gpt_reference_load(gpt_reference_folder(folder), &ref));
    check_settings(&ref);
    check_text(folder, &ref);
    gpt_reference_free(&ref);
}

/* ---- corrupted copies ---- */

/* The dump's tensors as a list to change: struct copies (names and data
 * still point into the file), room for more, and the changed tensors' data. */
typedef struct dump {
    mpcl_st_tensor t[64];
    size_t n;
    void *owned[2];
    size_t n_owned;
} dump;

static mpcl_st_tensor *find(dump *d, const char *name) {
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->t[i].name, name) == 0) return &d->t[i];
    fail_msg("the dump has no tensor '%s'", name);
    return NULL;
}

/* t's data copied, to be changed in the copy. */
static void *own_data(dump *d, mpcl_st_tensor *t) {
    assert_true(d->n_owned < sizeof d->owned / sizeof *d->owned);
    void *copy = d->owned[d->n_owned++] = malloc(t->bytes);
    assert_non_null(copy);
    memcpy(copy, t->data, t->bytes);
    t->data = copy;
    return copy;
}

static void drop(dump *d, const char *name) {
    mpcl_st_tensor *t = find(d, name);
    *t = d->t[--d->n];
}

static void add_copy(dump *d, const char *of, const char *name) {
    assert_true(d->n < sizeof d->t / sizeof *d->t);
    d->t[d->n] = *find(d, of);
    d->t[d->n++].name = name;
}

static void set_shape(dump *d, const char *name, size_t ndim, size_t d0, size_t d1, size_t d2,
                      size_t d3) {
    mpcl_st_tensor *t = find(d, name);
    t->ndim = ndim;
    size_t shape[4] = {d0, d1, d2, d3};
    memcpy(t->shape, shape, sizeof shape);
}

static void unchanged(dump *d) {
    (void)d;
}
static void no_fc_bias_grad(dump *d) {
    drop(d, "grad.h.1.mlp.c_fc.bias");
}
static void grad_of_no_weight(dump *d) {
    add_copy(d, "grad.h.1.ln_1.weight", "grad.h.2.ln_1.weight");
}
static void unknown_tensor(dump *d) {
    add_copy(d, "loss", "extra");
}
static void grad_transposed(dump *d) {
    set_shape(d, "grad.h.0.attn.c_attn.weight", 2, 48, 16, 0, 0);
}
static void grad_i32(dump *d) {
    find(d, "grad.wpe.weight")->dtype = MPCL_ST_I32;
}
static void no_tokens(dump *d) {
    drop(d, "tokens");
}
static void tokens_f32(dump *d) {
    find(d, "tokens")->dtype = MPCL_ST_F32;
}
static void tokens_reshaped(dump *d) {
    set_shape(d, "tokens", 2, 3, 6, 0, 0);
}
static void rows_too_long(dump *d) {
    set_shape(d, "tokens", 2, 1, 18, 0, 0);
    set_shape(d, "targets", 2, 1, 18, 0, 0);
}
static void token_outside_vocabulary(dump *d) {
    int32_t *tokens = own_data(d, find(d, "tokens"));
    tokens[0] = 256;
}
static void negative_target(dump *d) {
    int32_t *targets = own_data(d, find(d, "targets"));
    targets[2 * 9 - 1] = -1; /* [1][8]: no token follows it in its row */
}
static void targets_not_shifted(dump *d) {
    int32_t *targets = own_data(d, find(d, "targets"));
    targets[3] += 1;
}
static void logits_reshaped(dump *d) {
    set_shape(d, "logits", 4, 2, 9, 16, 16);
}
static void loss_two_elements(dump *d) {
    mpcl_st_tensor *loss = find(d, "loss");
    loss->data = find(d, "losses")->data;
    set_shape(d, "loss", 1, 2, 0, 0, 0);
}
static void losses_matrix(dump *d) {
    set_shape(d, "losses", 2, 2, 5, 0, 0);
}
/* One logit at a target, 0.01 up: the mean cross-entropy moves by about
 * 0.01 (1 - p) / 18, far beyond the tolerance. */
static void logit_changed(dump *d) {
    const int32_t *targets = find(d, "targets")->data;
    float *logits = own_data(d, find(d, "logits"));
    size_t row = 1 * 9 + 2;
    logits[row * 256 + (size_t)targets[row]] += 0.01f;
}
/* loss and losses[0], which must stay equal, moved by delta. */
static void add_to_loss(dump *d, float delta) {
    float *loss = own_data(d, find(d, "loss"));
    float *losses = own_data(d, find(d, "losses"));
    loss[0] += delta;
    losses[0] = loss[0];
}
static void loss_off_5e6(dump *d) {
    add_to_loss(d, 5e-6f);
}
static void loss_off_2e5(dump *d) {
    add_to_loss(d, 2e-5f);
}
static void losses0_one_ulp(dump *d) {
    float *losses = own_data(d, find(d, "losses"));
    losses[0] = nextafterf(losses[0], INFINITY);
}

#define JSON_WITHOUT_EPS \
    "{\"optimizer\": {\"lr\": 0.001, \"betas\": [0.9, 0.95], \"weight_decay\": 0.1}}"

typedef struct corruption {
    const char *what;
    void (*apply)(dump *d);
    const char *json;   /* reference.json's text; NULL: the dump's */
    const char *needle; /* in the error; NULL: the copy loads */
} corruption;

static const corruption corruptions[] = {
    {"unchanged", unchanged, NULL, NULL},
    {"a missing gradient", no_fc_bias_grad, NULL, "missing tensor 'grad.h.1.mlp.c_fc.bias'"},
    {"the gradient of no weight", grad_of_no_weight, NULL,
     "'grad.h.2.ln_1.weight' is neither an output nor the gradient of a weight"},
    {"an unknown tensor", unknown_tensor, NULL, "'extra' is neither"},
    {"a gradient in [out, in]", grad_transposed, NULL,
     "'grad.h.0.attn.c_attn.weight' has shape [48, 16], expected [16, 48]"},
    {"an I32 gradient", grad_i32, NULL, "'grad.wpe.weight' is I32, expected F32"},
    {"no tokens", no_tokens, NULL, "'tokens' is not an I32 [B, T] matrix"},
    {"F32 tokens", tokens_f32, NULL, "'tokens' is not an I32 [B, T] matrix"},
    {"tokens [3, 6]", tokens_reshaped, NULL, "'targets' has shape [2, 9], expected [3, 6]"},
    {"T above n_positions", rows_too_long, NULL, "tokens' T 18 is above n_positions 16"},
    {"token 256", token_outside_vocabulary, NULL, "tokens[0][0] = 256 or targets[0][0]"},
    {"target -1", negative_target, NULL, "targets[1][8] = -1 is outside the vocabulary of 256"},
    {"targets not shifted", targets_not_shifted, NULL, "is not tokens[0][4]"},
    {"logits of 4 dims", logits_reshaped, NULL,
     "'logits' has shape [2, 9, 16, 16], expected [2, 9, 256]"},
    {"a loss of 2 elements", loss_two_elements, NULL, "'loss' is not one F32 element"},
    {"losses [2, 5]", losses_matrix, NULL, "'losses' is not a non-empty F32 vector"},
    {"a logit 0.01 up", logit_changed, NULL, "is not the logits' mean cross-entropy"},
    {"the loss 5e-6 off (within the tolerance)", loss_off_5e6, NULL, NULL},
    {"the loss 2e-5 off", loss_off_2e5, NULL, "is not the logits' mean cross-entropy"},
    {"losses[0] one ulp above loss", losses0_one_ulp, NULL, "losses[0]"},
    {"no optimizer.eps", unchanged, JSON_WITHOUT_EPS, "optimizer.eps is not a number"},
};

static void write_file(const char *folder, const char *name, const void *bytes, size_t n) {
    char path[800];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void copy_file(const char *from_folder, const char *to_folder, const char *name) {
    char from[800];
    snprintf(from, sizeof from, "%s/%s", from_folder, name);
    size_t n;
    unsigned char *bytes = tu_slurp(from, &n);
    write_file(to_folder, name, bytes, n);
    free(bytes);
}

/* A copy of the dump in <tmp>/case-<index>, changed by c. */
static void write_copy(const char *real, const mpcl_safetensors *st, const corruption *c,
                       size_t index, char folder[600]) {
    snprintf(folder, 600, "%s/case-%zu", tmp, index);
    assert_int_equal(mkdir(folder, 0700), 0);
    copy_file(real, folder, "config.json");
    copy_file(real, folder, "model.safetensors");
    if (c->json)
        write_file(folder, "reference.json", c->json, strlen(c->json));
    else
        copy_file(real, folder, "reference.json");
    dump d = {.n = mpcl_safetensors_count(st)};
    assert_true(d.n < sizeof d.t / sizeof *d.t);
    for (size_t i = 0; i < d.n; i++) d.t[i] = *mpcl_safetensors_tensor(st, i);
    c->apply(&d);
    char path[700];
    snprintf(path, sizeof path, "%s/reference.safetensors", folder);
    TU_ASSERT_OK(mpcl_safetensors_write(path, d.t, d.n, NULL, 0));
    for (size_t i = 0; i < d.n_owned; i++) free(d.owned[i]);
}

static void refuses_corrupted_copies(void **state) {
    (void)state;
    char real[512], path[600], folder[600];
    gpt_reference_folder(real);
    snprintf(path, sizeof path, "%s/reference.safetensors", real);
    mpcl_safetensors *st = NULL;
    TU_ASSERT_OK(mpcl_safetensors_read(path, &st));
    for (size_t i = 0; i < sizeof corruptions / sizeof *corruptions; i++) {
        const corruption *c = &corruptions[i];
        print_message("%s\n", c->what);
        write_copy(real, st, c, i, folder);
        gpt_reference ref;
        if (c->needle) {
            tu_expect_error(gpt_reference_load(folder, &ref), MPCL_ERR_FORMAT, c->needle);
            assert_null(ref.weights);
            assert_null(ref.file);
        } else {
            TU_ASSERT_OK(gpt_reference_load(folder, &ref));
            gpt_reference_free(&ref);
        }
    }
    mpcl_safetensors_destroy(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(loads_pytorch_dump),
        cmocka_unit_test(refuses_corrupted_copies),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
