/* The tied_lm_head kind (src/nn/tied_lm_head.c) and the gradient row it
 * shares with the token embedding (mpcl__params_share):
 * - token_pos_embedding -> tied_lm_head through the layer interface, on
 *   random ids and a random dlogits, against a double host reference: the
 *   logits h wte^T, d_h = dlogits wte, and d_wte the SUM of the head's part
 *   (dlogits^T h) and the embedding's (d_h scattered by token), with T = 1
 *   and odd T, V = 13, C = 6, in f32 and bf16 storage;
 * - through a model (embedding -> causal_self_attention -> head): every
 *   parameter's gradient against central differences of the loss;
 * - no row of its own (the parameter count), models without a token
 *   embedding or with other channels refused, and a tiny model whose loss
 *   drops in float32 and mixed_bfloat16;
 * - the model tests once with the whole logits and once with the loss
 *   fused in chunks (MPCL_LM_HEAD), and bad labels named by their row in
 *   the batch either way. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "ref_ops.h"
#include "testutil.h"

enum { V = 13, C = 6, P = 9 };

static mpcl_model_params parse(const char *text) {
    mpcl_model_params p = mpcl_model_default_params();
    TU_ASSERT_OK(mpcl_model_spec_parse(NULL, text, &p));
    return p;
}

/* "input_shape=T; token_pos_embedding V P C; [middle;] tied_lm_head" */
static mpcl_model_params tied_params(size_t T, const char *middle, size_t max_batch,
                                     mpcl_policy policy) {
    char text[256];
    snprintf(text, sizeof text,
             "input_shape=%zu; token_pos_embedding vocabulary_size=%d sequence_length=%d "
             "embedding_dim=%d; %s%stied_lm_head",
             T, V, P, C, middle ? middle : "", middle ? "; " : "");
    mpcl_model_params p = parse(text);
    p.classes = V;
    p.max_batch = max_batch;
    p.policy = policy;
    return p;
}

/* ---- the two layers through their interface ---- */

typedef struct pair {
    mpcl__layer_env env;
    mpcl__layer L[2]; /* the embedding, the head */
    mpcl__tables *t;
    mpcl__arenas a;
    size_t B, T;
} pair;

static pair *pair_make(mpcl_context *ctx, tu_rng *rng, mpcl_policy policy, size_t B, size_t T) {
    pair *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->t = calloc(1, sizeof *s->t);
    assert_non_null(s->t);
    s->B = B;
    s->T = T;
    mpcl_plan plan = mpcl_context_plan(ctx, policy);
    s->env =
        (mpcl__layer_env){.ctx = ctx, .storage = plan.storage, .gemm = plan.gemm, .max_batch = B};
    mpcl_model_params p = tied_params(T, NULL, B, policy);
    mpcl__params_init(&s->t->params, mpcl__sub_buffer_align(ctx));
    mpcl__params_init(&s->t->buffers, mpcl__sub_buffer_align(ctx));
    TU_ASSERT_OK(mpcl__declare_layers(ctx, &p, p.layers, 2, &s->env, s->L, s->t));
    /* The head adds no row: wte and wpe only. */
    assert_int_equal(s->t->params.count, 2);
    assert_int_equal(s->L[1].out_rank, 2);
    assert_int_equal(s->L[1].out_shape[0], T);
    assert_int_equal(s->L[1].out_shape[1], V);
    size_t total = s->t->params.total;
    float *w = malloc(total * sizeof *w);
    assert_non_null(w);
    tu_fill_uniform(rng, w, total, -1, 1);
    s->a.working = tu_tensor_from(ctx, plan.storage, 1, total, w);
    s->a.grads = tu_tensor(ctx, plan.storage, 1, total);
    free(w);
    for (int l = 0; l < 2; l++) TU_ASSERT_OK(s->L[l].kind->create(&s->L[l], s->t, &s->a));
    return s;
}

static void pair_destroy(pair *s) {
    mpcl__destroy_layers(s->L, 2);
    mpcl_tensor_destroy(s->a.working);
    mpcl_tensor_destroy(s->a.grads);
    free(s->t);
    free(s);
}

/* Row i of an arena, as doubles. */
static double *arena_row(const pair *s, const mpcl_tensor *arena, size_t i) {
    const mpcl_param_info *r = &s->t->params.rows[i];
    float *all = tu_download(arena);
    double *row = tu_to_double(all + r->offset, r->count);
    free(all);
    return row;
}

/* got against want, within `rel` of the largest |want| (a storage rounding
 * or two of sums of that size). */
static void check(const char *what, const pair *s, const float *got, const double *want, size_t n,
                  double rel) {
    double scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    char name[128];
    snprintf(name, sizeof name, "%s (%s, B=%zu T=%zu)", what, mpcl_dtype_name(s->env.storage), s->B,
             s->T);
    if (!tu_check_close(name, got, want, n, rel * scale, 0, 2 * rel))
        fail_msg("%s is not the host reference", name);
}

/* Forward and backward of both layers on random ids and dlogits. Each
 * reference takes the stored inputs of its step (h, d_h as the device
 * holds them), so that each check allows one step's roundings. */
static void run_pair(pair *s, tu_rng *rng, double rel) {
    mpcl_context *ctx = s->env.ctx;
    mpcl__layer *emb = &s->L[0], *lm = &s->L[1];
    size_t n = s->B * s->T;
    int32_t ids[64];
    assert_true(n <= 64);
    for (size_t p = 0; p < n; p++) ids[p] = (int32_t)tu_uniform(rng, 0, V - 1e-9);
    mpcl_tensor *x = tu_tensor(ctx, MPCL_DTYPE_I32, s->B, s->T);
    TU_ASSERT_OK(mpcl_tensor_upload_i32(x, ids, n));
    float *dl = malloc(n * V * sizeof *dl);
    assert_non_null(dl);
    tu_fill_uniform(rng, dl, n * V, -1, 1);
    tu_poison(s->a.grads);
    TU_ASSERT_OK(emb->kind->forward(emb, x, true));
    TU_ASSERT_OK(lm->kind->forward(lm, emb->output, true));
    TU_ASSERT_OK(mpcl_tensor_upload_f32(lm->d_output, dl, n * V));
    TU_ASSERT_OK(lm->kind->backward(lm, emb->output, emb->d_output));
    TU_ASSERT_OK(emb->kind->backward(emb, x, NULL));

    float *hf = tu_download(emb->output), *logits = tu_download(lm->output);
    float *dlf = tu_download(lm->d_output), *dhf = tu_download(emb->d_output);
    double *h = tu_to_double(hf, n * C), *dlogits = tu_to_double(dlf, n * V);
    double *dh = tu_to_double(dhf, n * C);
    double *wte = arena_row(s, s->a.working, 0);
    double *want_logits = malloc(n * V * sizeof(double)), *want_dh = malloc(n * C * sizeof(double));
    double *want_dwte = malloc(V * C * sizeof(double));
    assert_non_null(want_logits);
    assert_non_null(want_dh);
    assert_non_null(want_dwte);
    ref_gemm(false, true, n, V, C, h, wte, NULL, want_logits);
    ref_gemm(false, false, n, C, V, dlogits, wte, NULL, want_dh);
    /* d_wte: the head's part dlogits^T h plus the embedding's, d_h of each
     * position added to its token's row. */
    ref_gemm(true, false, V, C, n, dlogits, h, NULL, want_dwte);
    for (size_t p = 0; p < n; p++)
        for (size_t c = 0; c < C; c++) want_dwte[(size_t)ids[p] * C + c] += dh[p * C + c];
    check("logits", s, logits, want_logits, n * V, rel);
    check("d_h", s, dhf, want_dh, n * C, rel);
    float *dwte = tu_download(s->a.grads);
    check("d token_embeddings", s, dwte + s->t->params.rows[0].offset, want_dwte, V * C, 2 * rel);

    free(dwte);
    free(hf);
    free(logits);
    free(dlf);
    free(dhf);
    free(h);
    free(dlogits);
    free(dh);
    free(wte);
    free(want_logits);
    free(want_dh);
    free(want_dwte);
    free(dl);
    mpcl_tensor_destroy(x);
}

static void layers_match_reference(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("layers_match_reference"));
    /* B, T: T = 1; odd T; T = P. */
    static const size_t cases[][2] = {{1, 1}, {3, 7}, {2, P}, {4, 5}};
    static const struct {
        mpcl_policy policy;
        double rel;
    } policies[] = {{MPCL_POLICY_FLOAT32, 1e-5}, {MPCL_POLICY_MIXED_BFLOAT16, 2e-2}};
    for (size_t k = 0; k < sizeof policies / sizeof policies[0]; k++) {
        if (!mpcl_context_plan(ctx, policies[k].policy).usable) continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            pair *s = pair_make(ctx, &rng, policies[k].policy, cases[c][0], cases[c][1]);
            run_pair(s, &rng, policies[k].rel);
            pair_destroy(s);
        }
    }
    mpcl_context_destroy(ctx);
}

/* ---- models ---- */

static mpcl_tensor *random_ids(mpcl_context *ctx, tu_rng *rng, size_t B, size_t T) {
    int32_t ids[64];
    assert_true(B * T <= 64);
    for (size_t i = 0; i < B * T; i++) ids[i] = (int32_t)tu_uniform(rng, 0, V - 1e-9);
    mpcl_tensor *t = tu_tensor(ctx, MPCL_DTYPE_I32, B, T);
    TU_ASSERT_OK(mpcl_tensor_upload_i32(t, ids, B * T));
    return t;
}

/* embedding -> causal_self_attention -> head in float32: every parameter's
 * gradient (wte's from both writers) against central differences. */
static void gradients_match_differences(void **state) {
    (void)state;
    enum { B = 2, T = 5 };
    mpcl_context *ctx = tu_context();
    /* The chunks run the kernels of the whole logits: a slow device's
     * checks of them (Oclgrind's) see nothing new in a second run. */
    if (tu_env_is("MPCL_LM_HEAD", "chunked") && tu_slow_device(ctx)) {
        mpcl_context_destroy(ctx);
        skip();
    }
    tu_rng rng = tu_rng_make(tu_seed("gradients_match_differences"));
    mpcl_model_params p =
        tied_params(T, "causal_self_attention num_heads=2", B, MPCL_POLICY_FLOAT32);
    mpcl_model *m = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
    /* Embeddings of std 0.02 give logits near 0, and attention's kernels
     * gradients below the differences' noise: uniform in (-1, 1) instead. */
    for (size_t i = 0; i < 2; i++) {
        size_t n = mpcl_model_param(m, i)->count;
        float *w = malloc(n * sizeof *w);
        assert_non_null(w);
        tu_fill_uniform(&rng, w, n, -1, 1);
        TU_ASSERT_OK(mpcl_model_write_param(m, i, MPCL_OPTIM_SLOT_MASTER, w, n));
        free(w);
    }
    mpcl_tensor *xy[2] = {random_ids(ctx, &rng, B, T), random_ids(ctx, &rng, B, T)};
    TU_ASSERT_OK(mpcl_model_forward(m, xy[0], xy[1]));
    TU_ASSERT_OK(mpcl_model_backward(m));
    size_t checked = tu_check_param_gradients(m, 5e-3, tu_batch_loss, xy, 3e-4, 2e-2, 2e-2);
    assert_true(checked >= (V + P) * C);
    mpcl_tensor_destroy(xy[0]);
    mpcl_tensor_destroy(xy[1]);
    mpcl_model_destroy(m);
    mpcl_context_destroy(ctx);
}

/* The head's weights are wte: the model's rows are the embedding's two
 * and the dense layer's two, and the arena is the same size as without
 * the head (a dense head of its own would add V C + V). */
static void no_row_of_its_own(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    mpcl_model_params p = tied_params(4, "dense units=6", 2, MPCL_POLICY_FLOAT32);
    mpcl_model *m = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
    assert_int_equal(mpcl_model_param_count(m), 4);
    assert_string_equal(mpcl_model_param_name(m, 0), "token_pos_embedding_0.token_embeddings");
    assert_string_equal(mpcl_model_param_name(m, 1), "token_pos_embedding_0.position_embeddings");
    assert_string_equal(mpcl_model_param_name(m, 2), "dense_0.kernel");
    assert_string_equal(mpcl_model_param_name(m, 3), "dense_0.bias");
    size_t with_head = mpcl_model_arena_elements(m);
    mpcl_model_destroy(m);
    /* The same model ending in the dense layer: the same arena. */
    p = parse(
        "input_shape=4; token_pos_embedding vocabulary_size=13 sequence_length=9 "
        "embedding_dim=6; dense units=6");
    p.classes = 6;
    p.policy = MPCL_POLICY_FLOAT32;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
    assert_int_equal(mpcl_model_arena_elements(m), with_head);
    mpcl_model_destroy(m);
    mpcl_context_destroy(ctx);
}

static void expect_refused(mpcl_context *ctx, const char *text, const char *needle) {
    mpcl_model_params p = parse(text);
    p.classes = V;
    p.policy = MPCL_POLICY_FLOAT32;
    mpcl_model *m = NULL;
    tu_expect_error(mpcl_model_create(ctx, &p, &m), MPCL_ERR_INVALID_ARG, needle);
    assert_null(m);
}

static void bad_models_refused(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    expect_refused(ctx, "input_shape=5,6; causal_self_attention num_heads=2; tied_lm_head",
                   "tied_lm_head_0 uses the token embedding's weights: it needs one "
                   "token_pos_embedding layer first (the model has 0)");
    expect_refused(ctx,
                   "input_shape=5; token_pos_embedding vocabulary_size=13 sequence_length=9 "
                   "embedding_dim=6; dense units=4; tied_lm_head",
                   "tied_lm_head_0: its input has 4 channels; "
                   "token_pos_embedding_0.token_embeddings is [13, 6]");
    expect_refused(ctx,
                   "input_shape=5; token_pos_embedding vocabulary_size=13 sequence_length=9 "
                   "embedding_dim=6; flatten; tied_lm_head",
                   "tied_lm_head_0 takes a sequence (time, channels) input; it is given (30,)");
    mpcl_context_destroy(ctx);
}

/* Ids 0 1 2 3 0 1 ..., each label the next id: the loss of a tiny model
 * falls to under half its start in 100 Adam steps, in float32 and
 * mixed_bfloat16. */
static void learns_in_two_policies(void **state) {
    (void)state;
    enum { B = 4, T = 8 };
    mpcl_context *ctx = tu_context();
    /* 200 steps of whole models: minutes on Oclgrind, whose checks the
     * other tests here run on the same kernels. */
    if (tu_slow_device(ctx)) {
        mpcl_context_destroy(ctx);
        skip();
    }
    int32_t ids[B * T], next[B * T];
    for (size_t i = 0; i < B * T; i++) {
        ids[i] = (int32_t)((i / T + i % T) % 4);
        next[i] = (ids[i] + 1) % 4;
    }
    mpcl_tensor *x = tu_tensor(ctx, MPCL_DTYPE_I32, B, T),
                *y = tu_tensor(ctx, MPCL_DTYPE_I32, B, T);
    TU_ASSERT_OK(mpcl_tensor_upload_i32(x, ids, B * T));
    TU_ASSERT_OK(mpcl_tensor_upload_i32(y, next, B * T));
    static const mpcl_policy policies[] = {MPCL_POLICY_FLOAT32, MPCL_POLICY_MIXED_BFLOAT16};
    for (size_t k = 0; k < 2; k++) {
        if (!mpcl_context_plan(ctx, policies[k]).usable) continue;
        mpcl_model_params p = tied_params(T, "dense units=6", B, policies[k]);
        p.optim.lr = 1e-2f;
        mpcl_model *m = NULL;
        TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
        double before = tu_eval_loss(m, x, y, NULL);
        for (int i = 0; i < 100; i++) TU_ASSERT_OK(mpcl_model_train_step(m, x, y));
        double after = tu_eval_loss(m, x, y, NULL);
        printf("%s: loss %.4f -> %.4f\n", mpcl_policy_name(policies[k]), before, after);
        if (!(after < 0.5 * before))
            fail_msg("%s: the loss went from %.4f to %.4f", mpcl_policy_name(policies[k]), before,
                     after);
        mpcl_model_destroy(m);
    }
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
    mpcl_context_destroy(ctx);
}

/* Labels out of range at rows 11 and 13 of a batch of 15 rows (the last of
 * three chunks where the head fuses the loss), in the second of two calls:
 * the error names the first by its row in the batch and its call, and the
 * stats count two calls, 13 good rows of the second and all 15 of the
 * first -- as where the head keeps the whole logits. */
static void bad_labels_named_by_their_row(void **state) {
    (void)state;
    enum { B = 3, T = 5 };
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("bad_labels_named_by_their_row"));
    mpcl_model_params p = tied_params(T, NULL, B, MPCL_POLICY_FLOAT32);
    mpcl_model *m = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
    mpcl_tensor *x = random_ids(ctx, &rng, B, T), *y = random_ids(ctx, &rng, B, T);
    TU_ASSERT_OK(mpcl_model_forward(m, x, y));
    int32_t labels[B * T];
    TU_ASSERT_OK(mpcl_tensor_download_i32(y, labels, B * T));
    labels[11] = V;
    labels[13] = -1;
    TU_ASSERT_OK(mpcl_tensor_upload_i32(y, labels, B * T));
    TU_ASSERT_OK(mpcl_model_forward(m, x, y));
    mpcl_loss_stats st;
    tu_expect_error(mpcl_model_read_train_stats(m, &st, false), MPCL_ERR_LABEL,
                    "2 row(s) with a label out of range; the first: label 13 in row 11 of loss "
                    "call 1 since the last reset");
    assert_int_equal(st.calls, 2);
    assert_int_equal(st.samples, 2 * B * T - 2);
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
    mpcl_model_destroy(m);
    mpcl_context_destroy(ctx);
}

/* A vocabulary large enough (V C >= 16384) that mpcl's GEMM would stage
 * wte^T for every chunk, which the head then makes once a batch
 * (mpcl__gemm_stages_bt): in float32 the chunks give the whole logits'
 * loss and every gradient but for the summation order of d_wte. */
static void chunks_match_the_whole_logits_over_a_large_vocabulary(void **state) {
    (void)state;
    enum { B = 3, T = 7, BIG_V = 1030, BIG_C = 16 };
    mpcl_context *ctx = tu_context();
    tu_rng rng = tu_rng_make(tu_seed("chunks_match_the_whole_logits"));
    mpcl_tensor *x = random_ids(ctx, &rng, B, T), *y = random_ids(ctx, &rng, B, T);
    static const char *const modes[] = {"whole", "chunked"};
    double loss[2];
    float *grads[2][2];
    for (size_t k = 0; k < 2; k++) {
        setenv("MPCL_LM_HEAD", modes[k], 1);
        mpcl_model_params p = parse(
            "input_shape=7; token_pos_embedding vocabulary_size=1030 sequence_length=9 "
            "embedding_dim=16; tied_lm_head");
        p.classes = BIG_V;
        p.max_batch = B;
        p.policy = MPCL_POLICY_FLOAT32;
        mpcl_model *m = NULL;
        TU_ASSERT_OK(mpcl_model_create(ctx, &p, &m));
        TU_ASSERT_OK(mpcl_model_forward(m, x, y));
        TU_ASSERT_OK(mpcl_model_backward(m));
        mpcl_loss_stats st;
        TU_ASSERT_OK(mpcl_model_read_train_stats(m, &st, true));
        loss[k] = st.loss_sum / (double)st.terms;
        for (size_t i = 0; i < 2; i++) grads[k][i] = tu_param_grads(m, i);
        mpcl_model_destroy(m);
    }
    unsetenv("MPCL_LM_HEAD");
    printf("loss whole %.9g, chunked %.9g\n", loss[0], loss[1]);
    assert_true(fabs(loss[0] - loss[1]) <= 1e-6 * fabs(loss[0]));
    const size_t count[2] = {BIG_V * BIG_C, 9 * BIG_C};
    for (size_t i = 0; i < 2; i++) {
        double scale = 0;
        for (size_t j = 0; j < count[i]; j++) scale = fmax(scale, fabs((double)grads[0][i][j]));
        for (size_t j = 0; j < count[i]; j++)
            if (!(fabs((double)grads[1][i][j] - (double)grads[0][i][j]) <= 1e-5 * scale))
                fail_msg("gradient %zu [%zu]: chunked %.9g, whole %.9g", i, j,
                         (double)grads[1][i][j], (double)grads[0][i][j]);
        free(grads[0][i]);
        free(grads[1][i]);
    }
    mpcl_tensor_destroy(x);
    mpcl_tensor_destroy(y);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest layers[] = {
        cmocka_unit_test(layers_match_reference),
        cmocka_unit_test(no_row_of_its_own),
        cmocka_unit_test(bad_models_refused),
        cmocka_unit_test(chunks_match_the_whole_logits_over_a_large_vocabulary),
    };
    /* Through models: the head keeps the whole logits, or fuses the loss
     * in chunks of a third of the rows. */
    const struct CMUnitTest models[] = {
        cmocka_unit_test(gradients_match_differences),
        cmocka_unit_test(bad_labels_named_by_their_row),
        cmocka_unit_test(learns_in_two_policies),
    };
    int failed = cmocka_run_group_tests(layers, NULL, NULL);
    return failed + TU_RUN_WITH_EACH(models, "MPCL_LM_HEAD", "whole", "chunked");
}
