/* The loader of PyTorch's GPT-2 reference dump (gpt_reference.h). */
#include "gpt_reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "ref_ops.h"
#include "runtime/runtime.h"
#include "testutil.h"

/* The f32 loss against the cross-entropy of the f32 logits in double: the
 * f32 loss's own error is below 1e-6 (reference.json f32_error_vs_float64). */
#define LOSS_TOLERANCE 1e-5

const char *gpt_reference_folder(char buf[512]) {
    const char *root = getenv("MPCL_SOURCE_ROOT");
    if (!root) fail_msg("MPCL_SOURCE_ROOT is not set (meson test sets it)");
    snprintf(buf, 512, "%s/tests/data/gpt2-ref", root);
    return buf;
}

void gpt_reference_free(gpt_reference *ref) {
    mpcl_gpt2_weights_destroy(ref->weights);
    mpcl_safetensors_destroy(ref->file);
    free(ref->grads);
    memset(ref, 0, sizeof *ref);
}

/* "[2, 9, 256]" */
static const char *shape_text(const size_t *shape, size_t ndim, char buf[128]) {
    size_t n = (size_t)snprintf(buf, 128, "[");
    for (size_t d = 0; d < ndim && n < 128; d++)
        n += (size_t)snprintf(buf + n, 128 - n, "%s%zu", d ? ", " : "", shape[d]);
    if (n < 128) snprintf(buf + n, 128 - n, "]");
    return buf;
}

/* Tensor `name` of dtype and shape (ndim dims); NULL in *out and an error
 * naming path and the tensor otherwise. */
static mpcl_status want_tensor(const char *path, const mpcl_safetensors *st, const char *name,
                               mpcl_st_dtype dtype, const size_t *shape, size_t ndim,
                               const mpcl_st_tensor **out) {
    *out = NULL;
    const mpcl_st_tensor *t = mpcl_safetensors_find(st, name);
    if (!t) return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "%s: missing tensor '%s'", path, name);
    if (t->dtype != dtype)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "%s: tensor '%s' is %s, expected %s", path, name,
                          mpcl_st_dtype_name(t->dtype), mpcl_st_dtype_name(dtype));
    if (t->ndim != ndim || memcmp(t->shape, shape, ndim * sizeof *shape) != 0) {
        char got[128], want[128];
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", path,
                          name, shape_text(t->shape, t->ndim, got), shape_text(shape, ndim, want));
    }
    *out = t;
    return MPCL_OK;
}

static bool in_vocabulary(int32_t id, const mpcl_gpt2_config *cfg) {
    return id >= 0 && (size_t)id < cfg->vocab_size;
}

/* tokens and targets [B, T]: B and T from tokens, T within n_positions,
 * every id in the vocabulary, targets the tokens shifted by one per row. */
static mpcl_status load_batch(const char *path, gpt_reference *ref) {
    const mpcl_gpt2_config *cfg = &ref->weights->config;
    const mpcl_st_tensor *tok = mpcl_safetensors_find(ref->file, "tokens"), *tgt;
    if (!tok || tok->dtype != MPCL_ST_I32 || tok->ndim != 2)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "%s: tensor 'tokens' is not an I32 [B, T] matrix",
                          path);
    if (tok->shape[1] > cfg->n_positions)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "%s: tokens' T %zu is above n_positions %zu", path,
                          tok->shape[1], cfg->n_positions);
    mpcl_status s = want_tensor(path, ref->file, "targets", MPCL_ST_I32, tok->shape, 2, &tgt);
    if (s != MPCL_OK) return s;
    ref->batch = tok->shape[0];
    ref->seq = tok->shape[1];
    ref->tokens = tok->data;
    ref->targets = tgt->data;
    for (size_t i = 0; i < ref->batch * ref->seq; i++) {
        size_t b = i / ref->seq, t = i % ref->seq;
        if (!in_vocabulary(ref->tokens[i], cfg) || !in_vocabulary(ref->targets[i], cfg))
            return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                              "%s: tokens[%zu][%zu] = %d or targets[%zu][%zu] = %d is outside the "
                              "vocabulary of %zu",
                              path, b, t, (int)ref->tokens[i], b, t, (int)ref->targets[i],
                              cfg->vocab_size);
        if (t + 1 < ref->seq && ref->targets[i] != ref->tokens[i + 1])
            return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                              "%s: targets[%zu][%zu] = %d is not tokens[%zu][%zu] = %d", path, b, t,
                              (int)ref->targets[i], b, t + 1, (int)ref->tokens[i + 1]);
    }
    return MPCL_OK;
}

/* logits [B, T, V], loss (one element), losses [steps]. */
static mpcl_status load_outputs(const char *path, gpt_reference *ref) {
    const size_t logits_shape[3] = {ref->batch, ref->seq, ref->weights->config.vocab_size};
    const mpcl_st_tensor *logits, *losses;
    mpcl_status s = want_tensor(path, ref->file, "logits", MPCL_ST_F32, logits_shape, 3, &logits);
    if (s != MPCL_OK) return s;
    const mpcl_st_tensor *loss = mpcl_safetensors_find(ref->file, "loss");
    if (!loss || loss->dtype != MPCL_ST_F32 || loss->bytes != sizeof(float))
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "%s: tensor 'loss' is not one F32 element", path);
    losses = mpcl_safetensors_find(ref->file, "losses");
    if (!losses || losses->dtype != MPCL_ST_F32 || losses->ndim != 1 || losses->shape[0] == 0)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                          "%s: tensor 'losses' is not a non-empty F32 vector", path);
    ref->logits = logits->data;
    memcpy(&ref->loss, loss->data, sizeof ref->loss);
    ref->steps = losses->shape[0];
    ref->losses = losses->data;
    return MPCL_OK;
}

static bool is_output(const char *name) {
    static const char *const outputs[] = {"tokens", "targets", "logits", "loss", "losses"};
    for (size_t i = 0; i < sizeof outputs / sizeof *outputs; i++)
        if (strcmp(name, outputs[i]) == 0) return true;
    return false;
}

/* grad.<name> of each weight's shape, and no tensor that is neither an
 * output nor a weight's gradient. */
static mpcl_status load_grads(const char *path, gpt_reference *ref) {
    const mpcl_gpt2_weights *w = ref->weights;
    ref->grads = calloc(w->count, sizeof *ref->grads);
    if (!ref->grads) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "%s: grads", path);
    for (size_t i = 0; i < mpcl_safetensors_count(ref->file); i++) {
        const char *name = mpcl_safetensors_tensor(ref->file, i)->name;
        if (is_output(name)) continue;
        const mpcl_gpt2_tensor *weight =
            strncmp(name, "grad.", 5) == 0 ? mpcl_gpt2_weights_find(w, name + 5) : NULL;
        if (!weight)
            return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                              "%s: tensor '%s' is neither an output nor the gradient of a weight",
                              path, name);
        const mpcl_st_tensor *g;
        mpcl_status s =
            want_tensor(path, ref->file, name, MPCL_ST_F32, weight->shape, weight->ndim, &g);
        if (s != MPCL_OK) return s;
        ref->grads[weight - w->tensors] = g->data;
    }
    for (size_t i = 0; i < w->count; i++)
        if (!ref->grads[i])
            return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "%s: missing tensor 'grad.%s'", path,
                              w->tensors[i].name);
    return MPCL_OK;
}

/* loss against the mean cross-entropy of the logits at the targets, in
 * double, and losses[0] against loss. */
static mpcl_status check_loss(const char *path, const gpt_reference *ref) {
    size_t rows = ref->batch * ref->seq, vocab = ref->weights->config.vocab_size;
    double *logits = tu_to_double(ref->logits, rows * vocab);
    double sum = 0;
    size_t correct;
    ref_softmax_xent(logits, ref->targets, rows, vocab, 1.0, &sum, &correct, NULL);
    free(logits);
    double mean = sum / (double)rows;
    if (!(fabs(mean - (double)ref->loss) <= LOSS_TOLERANCE))
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT,
                          "%s: loss %.9g is not the logits' mean cross-entropy %.9g (within %g)",
                          path, (double)ref->loss, mean, LOSS_TOLERANCE);
    if (ref->losses[0] != ref->loss)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "%s: losses[0] %.9g is not loss %.9g", path,
                          (double)ref->losses[0], (double)ref->loss);
    return MPCL_OK;
}

/* A number of reference.json's "optimizer", which `at` may index. */
static mpcl_status json_real(const char *path, const mpcl__json_value *opt, const char *key, int at,
                             double *out) {
    const mpcl__json_value *v = mpcl__json_member(opt, key);
    if (at >= 0) v = mpcl__json_at(v, (size_t)at);
    if (mpcl__json_type_of(v) != MPCL__JSON_NUMBER)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "%s: optimizer.%s%s is not a number", path, key,
                          at < 0 ? ""
                          : at   ? "[1]"
                                 : "[0]");
    *out = mpcl__json_number(v);
    return MPCL_OK;
}

static mpcl_status load_adamw(const char *folder, gpt_reference_adamw *out) {
    char path[600];
    snprintf(path, sizeof path, "%s/reference.json", folder);
    mpcl__json *doc = NULL;
    mpcl_status s = mpcl__json_read_file(path, 1 << 20, &doc);
    if (s != MPCL_OK) return s;
    const mpcl__json_value *opt = mpcl__json_member(mpcl__json_root(doc), "optimizer");
    s = json_real(path, opt, "lr", -1, &out->lr);
    if (s == MPCL_OK) s = json_real(path, opt, "betas", 0, &out->beta1);
    if (s == MPCL_OK) s = json_real(path, opt, "betas", 1, &out->beta2);
    if (s == MPCL_OK) s = json_real(path, opt, "eps", -1, &out->eps);
    if (s == MPCL_OK) s = json_real(path, opt, "weight_decay", -1, &out->weight_decay);
    mpcl__json_free(doc);
    return s;
}

mpcl_status gpt_reference_load(const char *folder, gpt_reference *ref) {
    memset(ref, 0, sizeof *ref);
    char path[600];
    snprintf(path, sizeof path, "%s/reference.safetensors", folder);
    mpcl_status s = mpcl_gpt2_folder_read(folder, &ref->weights);
    if (s == MPCL_OK) s = mpcl_safetensors_read(path, &ref->file);
    if (s == MPCL_OK) s = load_batch(path, ref);
    if (s == MPCL_OK) s = load_outputs(path, ref);
    if (s == MPCL_OK) s = load_grads(path, ref);
    if (s == MPCL_OK) s = check_loss(path, ref);
    if (s == MPCL_OK) s = load_adamw(folder, &ref->adamw);
    if (s != MPCL_OK) gpt_reference_free(ref);
    return s;
}
