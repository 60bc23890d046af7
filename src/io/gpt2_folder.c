/* GPT-2 weights as a Hugging Face folder (include/mpcl/gpt2_folder.h): the
 * canonical tensor list of a config, config.json read and written, and
 * model.safetensors matched tensor by tensor against the list. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/fileio.h"
#include "compute/compute.h"
#include "io/io.h"
#include "io/json.h"
#include "mpcl/gpt2_folder.h"
#include "mpcl/half.h"
#include "mpcl/number.h"

#define CONFIG_FILE "config.json"
#define WEIGHTS_FILE "model.safetensors"
#define PREFIX "transformer."
#define CONFIG_MAX_BYTES (1u << 20)

/* ---- the canonical tensor list ---- */

/* A layer's tensors, in order: rows and columns as multiples of n_embd
 * (cols 0: a vector). */
static const struct {
    const char *suffix;
    size_t rows, cols;
} LAYER[MPCL_GPT2_LAYER_TENSORS] = {
    {"ln_1.weight", 1, 0},      {"ln_1.bias", 1, 0},          {"attn.c_attn.weight", 1, 3},
    {"attn.c_attn.bias", 3, 0}, {"attn.c_proj.weight", 1, 1}, {"attn.c_proj.bias", 1, 0},
    {"ln_2.weight", 1, 0},      {"ln_2.bias", 1, 0},          {"mlp.c_fc.weight", 1, 4},
    {"mlp.c_fc.bias", 4, 0},    {"mlp.c_proj.weight", 4, 1},  {"mlp.c_proj.bias", 1, 0},
};

static size_t tensor_count(const mpcl_gpt2_config *c) {
    return 4 + MPCL_GPT2_LAYER_TENSORS * c->n_layer;
}

/* The i-th tensor of the list: name, ndim and shape (count left to the
 * caller). */
static void describe(const mpcl_gpt2_config *c, size_t i, mpcl_gpt2_tensor *t) {
    size_t C = c->n_embd, last = tensor_count(c) - 2;
    t->ndim = 2;
    t->shape[1] = C;
    if (i == 0) {
        snprintf(t->name, sizeof t->name, "wte.weight");
        t->shape[0] = c->vocab_size;
    } else if (i == 1) {
        snprintf(t->name, sizeof t->name, "wpe.weight");
        t->shape[0] = c->n_positions;
    } else if (i >= last) {
        snprintf(t->name, sizeof t->name, "ln_f.%s", i == last ? "weight" : "bias");
        t->ndim = 1;
        t->shape[0] = C;
        t->shape[1] = 1;
    } else {
        size_t layer = (i - 2) / MPCL_GPT2_LAYER_TENSORS, k = (i - 2) % MPCL_GPT2_LAYER_TENSORS;
        snprintf(t->name, sizeof t->name, "h.%zu.%s", layer, LAYER[k].suffix);
        t->ndim = LAYER[k].cols ? 2 : 1;
        t->shape[0] = LAYER[k].rows * C;
        t->shape[1] = LAYER[k].cols ? LAYER[k].cols * C : 1;
    }
}

/* "[32, 8]" */
static const char *shape_text(char buf[64], size_t ndim, const size_t *shape) {
    size_t n = (size_t)snprintf(buf, 64, "[");
    for (size_t d = 0; d < ndim && n < 64; d++)
        n += (size_t)snprintf(buf + n, 64 - n, "%s%zu", d ? ", " : "", shape[d]);
    if (n < 64) snprintf(buf + n, 64 - n, "]");
    return buf;
}

/* What is wrong with c, into why; false when nothing is. */
static bool config_problem(const mpcl_gpt2_config *c, char *why, size_t size) {
    const struct {
        const char *key;
        size_t value;
    } sizes[] = {{"n_layer", c->n_layer},
                 {"n_head", c->n_head},
                 {"n_embd", c->n_embd},
                 {"n_positions", c->n_positions},
                 {"vocab_size", c->vocab_size}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].value < 1 || sizes[i].value > MPCL_GPT2_MAX_SIZE) {
            snprintf(why, size, "%s is %zu; it must be from 1 to %u", sizes[i].key, sizes[i].value,
                     MPCL_GPT2_MAX_SIZE);
            return true;
        }
    if (c->n_embd % c->n_head != 0) {
        snprintf(why, size, "n_embd %zu is not a multiple of n_head %zu", c->n_embd, c->n_head);
        return true;
    }
    if (!(c->layer_norm_epsilon > 0) || !isfinite(c->layer_norm_epsilon)) {
        snprintf(why, size, "layer_norm_epsilon is %g; it must be finite and above 0",
                 c->layer_norm_epsilon);
        return true;
    }
    /* In doubles: each size is at most 2^24, so only the sum can overflow,
     * and a bound needs no exact figure. */
    double C = (double)c->n_embd;
    double floats = ((double)c->vocab_size + (double)c->n_positions + 2) * C +
                    (double)c->n_layer * (12 * C * C + 13 * C);
    if (floats * sizeof(float) >= (double)SIZE_MAX) {
        snprintf(why, size, "the weights (%.3g floats) do not fit in memory", floats);
        return true;
    }
    return false;
}

mpcl_status mpcl_gpt2_config_check(const mpcl_gpt2_config *c) {
    char why[256];
    if (!c) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "GPT-2 config: NULL");
    if (config_problem(c, why, sizeof why))
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "GPT-2 config: %s", why);
    return MPCL_OK;
}

/* ---- the weights in memory ---- */

mpcl_status mpcl_gpt2_weights_new(const mpcl_gpt2_config *config, mpcl_gpt2_weights **out) {
    if (!out) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_gpt2_weights_new: out is NULL");
    *out = NULL;
    TRY(mpcl_gpt2_config_check(config));
    mpcl_gpt2_weights *w = calloc(1, sizeof *w);
    size_t count = tensor_count(config);
    if (w) w->tensors = calloc(count, sizeof *w->tensors);
    if (!w || !w->tensors) {
        mpcl_gpt2_weights_destroy(w);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "GPT-2 weights: %zu tensors", count);
    }
    w->config = *config;
    w->count = count;
    for (size_t i = 0; i < count; i++) {
        mpcl_gpt2_tensor *t = &w->tensors[i];
        describe(config, i, t);
        t->count = t->shape[0] * t->shape[1];
        t->offset = w->total;
        w->total += t->count;
    }
    w->data = calloc(w->total, sizeof(float));
    if (!w->data) {
        size_t total = w->total;
        mpcl_gpt2_weights_destroy(w);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "GPT-2 weights: %zu floats", total);
    }
    for (size_t i = 0; i < count; i++) w->tensors[i].data = w->data + w->tensors[i].offset;
    *out = w;
    return MPCL_OK;
}

void mpcl_gpt2_weights_destroy(mpcl_gpt2_weights *w) {
    if (!w) return;
    free(w->tensors);
    free(w->data);
    free(w);
}

/* What a name (without prefix) is in a model of config c. */
typedef enum name_kind { UNKNOWN, PARAMETER, MASK_BUFFER } name_kind;

/* "h.N." with N below n_layer, plainly written: N into *layer, the rest
 * into *rest. */
static bool layer_name(const char *name, size_t n_layer, size_t *layer, const char **rest) {
    if (strncmp(name, "h.", 2) != 0) return false;
    const char *p = name + 2, *dot = strchr(p, '.');
    char digits[16];
    if (!dot || dot == p || dot - p > 8 || (p[0] == '0' && dot - p > 1)) return false;
    memcpy(digits, p, (size_t)(dot - p));
    digits[dot - p] = '\0';
    uint64_t n;
    if (mpcl_parse_uint(digits, MPCL_GPT2_MAX_SIZE, &n) != MPCL_NUMBER_OK || n >= n_layer)
        return false;
    *layer = (size_t)n;
    *rest = dot + 1;
    return true;
}

/* A parameter's place in the canonical list (*index), or the mask buffers
 * h.N.attn.bias and h.N.attn.masked_bias older transformers saved: from the
 * name alone, so that a file is checked before anything of its size is
 * allocated. */
static name_kind classify(const mpcl_gpt2_config *c, const char *name, size_t *index) {
    size_t count = tensor_count(c), layer;
    const char *rest;
    const char *const fixed[4] = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"};
    const size_t place[4] = {0, 1, count - 2, count - 1};
    for (size_t i = 0; i < 4; i++)
        if (strcmp(name, fixed[i]) == 0) {
            *index = place[i];
            return PARAMETER;
        }
    if (!layer_name(name, c->n_layer, &layer, &rest)) return UNKNOWN;
    for (size_t k = 0; k < MPCL_GPT2_LAYER_TENSORS; k++)
        if (strcmp(rest, LAYER[k].suffix) == 0) {
            *index = 2 + MPCL_GPT2_LAYER_TENSORS * layer + k;
            return PARAMETER;
        }
    return strcmp(rest, "attn.bias") == 0 || strcmp(rest, "attn.masked_bias") == 0 ? MASK_BUFFER
                                                                                   : UNKNOWN;
}

const mpcl_gpt2_tensor *mpcl_gpt2_weights_find(const mpcl_gpt2_weights *w, const char *name) {
    size_t i;
    if (!w || !name || classify(&w->config, name, &i) != PARAMETER) return NULL;
    return &w->tensors[i];
}

/* ---- config.json ---- */

/* "<folder>/<file>" into buf (4096 bytes); false when it does not fit. */
static bool join(char *buf, const char *folder, const char *file) {
    int n = snprintf(buf, MPCL__DATA_PATH_BYTES, "%s/%s", folder, file);
    return n > 0 && n < MPCL__DATA_PATH_BYTES;
}

static mpcl_status path_too_long(const char *folder) {
    return MPCL_ERROR(NULL, MPCL_ERR_IO, "GPT-2 folder '%s': the path is too long", folder);
}

/* MPCL_ERR_FORMAT for the value v in config.json at path. */
static mpcl_status config_error(const char *path, const mpcl__json_value *v, const char *fmt, ...)
    MPCL_PRINTF(3, 4);
static mpcl_status config_error(const char *path, const mpcl__json_value *v, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (v)
        return mpcl__format_error(path, __FILE__, __LINE__, "line %u, column %u: %s",
                                  mpcl__json_line(v), mpcl__json_column(v), what);
    return mpcl__format_error(path, __FILE__, __LINE__, "%s", what);
}

/* A required whole number from 1 to MPCL_GPT2_MAX_SIZE. */
static mpcl_status read_size(const char *path, const mpcl__json_value *root, const char *key,
                             size_t *out) {
    const mpcl__json_value *v = mpcl__json_member(root, key);
    if (!v) return config_error(path, NULL, "%s is missing", key);
    const char *text = mpcl__json_number_text(v);
    uint64_t n = 0;
    mpcl_number_error e = text ? mpcl_parse_uint(text, MPCL_GPT2_MAX_SIZE, &n) : MPCL_NUMBER_SYNTAX;
    if (e != MPCL_NUMBER_OK || n == 0)
        return config_error(path, v, "%s is %s; it must be a whole number from 1 to %u", key,
                            text ? text : mpcl__json_type_name(mpcl__json_type_of(v)),
                            MPCL_GPT2_MAX_SIZE);
    *out = (size_t)n;
    return MPCL_OK;
}

/* A string key that must hold one of the values (NULL-terminated) when
 * present. */
static mpcl_status check_string(const char *path, const mpcl__json_value *root, const char *key,
                                const char *const *values) {
    const mpcl__json_value *v = mpcl__json_member(root, key);
    if (!v) return MPCL_OK;
    const char *s = mpcl__json_string(v, NULL);
    for (size_t i = 0; s && values[i]; i++)
        if (strcmp(s, values[i]) == 0) return MPCL_OK;
    return config_error(path, v, "%s is %s%s%s; mpcl's GPT-2 needs \"%s\"%s%s%s", key,
                        s ? "\"" : "", s ? s : mpcl__json_type_name(mpcl__json_type_of(v)),
                        s ? "\"" : "", values[0], values[1] ? " or \"" : "",
                        values[1] ? values[1] : "", values[1] ? "\"" : "");
}

/* A boolean key that must be `want` when present. */
static mpcl_status check_bool(const char *path, const mpcl__json_value *root, const char *key,
                              bool want) {
    const mpcl__json_value *v = mpcl__json_member(root, key);
    if (!v || (mpcl__json_type_of(v) == MPCL__JSON_BOOL && mpcl__json_bool(v) == want))
        return MPCL_OK;
    return config_error(path, v, "%s is %s; mpcl's GPT-2 needs %s", key,
                        mpcl__json_type_of(v) == MPCL__JSON_BOOL
                            ? (mpcl__json_bool(v) ? "true" : "false")
                            : mpcl__json_type_name(mpcl__json_type_of(v)),
                        want ? "true" : "false");
}

/* Keys that change the model when present: n_ctx, n_inner, the booleans. */
static mpcl_status check_model_keys(const char *path, const mpcl__json_value *root,
                                    const mpcl_gpt2_config *c) {
    static const char *const model_types[] = {"gpt2", NULL};
    static const char *const activations[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
    TRY(check_string(path, root, "model_type", model_types));
    TRY(check_string(path, root, "activation_function", activations));
    TRY(check_bool(path, root, "tie_word_embeddings", true));
    TRY(check_bool(path, root, "scale_attn_weights", true));
    TRY(check_bool(path, root, "scale_attn_by_inverse_layer_idx", false));
    TRY(check_bool(path, root, "add_cross_attention", false));
    const mpcl__json_value *v = mpcl__json_member(root, "n_ctx");
    size_t n = 0;
    if (v) {
        TRY(read_size(path, root, "n_ctx", &n));
        if (n != c->n_positions)
            return config_error(path, v, "n_ctx is %zu but n_positions is %zu; they must agree", n,
                                c->n_positions);
    }
    v = mpcl__json_member(root, "n_inner");
    if (v && mpcl__json_type_of(v) != MPCL__JSON_NULL) {
        TRY(read_size(path, root, "n_inner", &n));
        if (n != 4 * c->n_embd)
            return config_error(path, v,
                                "n_inner is %zu; mpcl's GPT-2 needs null or 4 n_embd (%zu)", n,
                                4 * c->n_embd);
    }
    return MPCL_OK;
}

static mpcl_status read_epsilon(const char *path, const mpcl__json_value *root, double *out) {
    const mpcl__json_value *v = mpcl__json_member(root, "layer_norm_epsilon");
    *out = 1e-5;
    if (!v) return MPCL_OK;
    const char *text = mpcl__json_number_text(v);
    if (!text || mpcl_parse_real(text, out) != MPCL_NUMBER_OK || !(*out > 0))
        return config_error(path, v, "layer_norm_epsilon is %s; it must be a number above 0",
                            text ? text : mpcl__json_type_name(mpcl__json_type_of(v)));
    return MPCL_OK;
}

/* The config in the parsed config.json at path. */
static mpcl_status config_from_json(const char *path, const mpcl__json_value *root,
                                    mpcl_gpt2_config *c) {
    if (mpcl__json_type_of(root) != MPCL__JSON_OBJECT)
        return config_error(path, root, "the config is %s, not an object",
                            mpcl__json_type_name(mpcl__json_type_of(root)));
    TRY(read_size(path, root, "n_layer", &c->n_layer));
    TRY(read_size(path, root, "n_head", &c->n_head));
    TRY(read_size(path, root, "n_embd", &c->n_embd));
    TRY(read_size(path, root, "n_positions", &c->n_positions));
    TRY(read_size(path, root, "vocab_size", &c->vocab_size));
    TRY(read_epsilon(path, root, &c->layer_norm_epsilon));
    TRY(check_model_keys(path, root, c));
    char why[256];
    return config_problem(c, why, sizeof why) ? config_error(path, NULL, "%s", why) : MPCL_OK;
}

mpcl_status mpcl__gpt2_config_parse(const char *name, const char *text, size_t size,
                                    mpcl_gpt2_config *out) {
    mpcl__json *doc = NULL;
    TRY(mpcl__json_parse(name, text, size, CONFIG_MAX_BYTES, &doc));
    mpcl_gpt2_config c;
    mpcl_status st = config_from_json(name, mpcl__json_root(doc), &c);
    mpcl__json_free(doc);
    if (st == MPCL_OK) *out = c;
    return st;
}

mpcl_status mpcl_gpt2_config_read(const char *folder, mpcl_gpt2_config *out) {
    if (!folder || !out)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_gpt2_config_read: NULL argument");
    char path[MPCL__DATA_PATH_BYTES];
    if (!join(path, folder, CONFIG_FILE)) return path_too_long(folder);
    mpcl__json *doc = NULL;
    TRY(mpcl__json_read_file(path, CONFIG_MAX_BYTES, &doc));
    mpcl_gpt2_config c;
    mpcl_status st = config_from_json(path, mpcl__json_root(doc), &c);
    mpcl__json_free(doc);
    if (st == MPCL_OK) *out = c;
    return st;
}

/* ---- model.safetensors ---- */

/* model.safetensors at path against config c: every tensor a parameter
 * (or a mask buffer, or lm_head.weight) of the right shape and dtype, one
 * prefix for all, none missing. */
typedef struct matcher {
    const char *path;
    const mpcl_gpt2_config *c;
    const mpcl_safetensors *st;
    int prefixed; /* -1 until the first parameter is met */
    const mpcl_st_tensor *lm_head;
} matcher;

static mpcl_status check_dtype(const matcher *m, const mpcl_st_tensor *t) {
    if (t->dtype == MPCL_ST_F32 || t->dtype == MPCL_ST_F16 || t->dtype == MPCL_ST_BF16)
        return MPCL_OK;
    return mpcl__format_error(m->path, __FILE__, __LINE__,
                              "tensor '%s' is %s; mpcl reads F32, F16 and BF16 weights", t->name,
                              mpcl_st_dtype_name(t->dtype));
}

static mpcl_status check_shape(const matcher *m, const mpcl_st_tensor *t, const size_t *shape,
                               size_t ndim, const char *why) {
    bool same = t->ndim == ndim;
    for (size_t d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    char a[64], b[64];
    if (!same)
        return mpcl__format_error(
            m->path, __FILE__, __LINE__, "tensor '%s' has shape %s; %s make it %s", t->name,
            shape_text(a, t->ndim, t->shape), why, shape_text(b, ndim, shape));
    return check_dtype(m, t);
}

/* The canonical name of a file tensor, with the prefix rule checked; NULL
 * for lm_head.weight. */
static mpcl_status strip_prefix(matcher *m, const mpcl_st_tensor *t, const char **name) {
    bool prefixed = strncmp(t->name, PREFIX, strlen(PREFIX)) == 0;
    *name = prefixed ? t->name + strlen(PREFIX) : t->name;
    if (m->prefixed < 0) m->prefixed = prefixed;
    if (m->prefixed != prefixed)
        return mpcl__format_error(m->path, __FILE__, __LINE__,
                                  "tensor '%s' is named %s the '" PREFIX
                                  "' prefix, the tensors before it %s it: one or the other for "
                                  "all",
                                  t->name, prefixed ? "with" : "without",
                                  prefixed ? "without" : "with");
    return MPCL_OK;
}

/* One file tensor: *index is its place, or SIZE_MAX when it holds no
 * parameter. */
static mpcl_status match_tensor(matcher *m, const mpcl_st_tensor *t, size_t *index) {
    *index = SIZE_MAX;
    if (strcmp(t->name, "lm_head.weight") == 0) {
        m->lm_head = t;
        return MPCL_OK;
    }
    const char *name;
    TRY(strip_prefix(m, t, &name));
    name_kind kind = classify(m->c, name, index);
    if (kind == MASK_BUFFER) *index = SIZE_MAX;
    if (kind != PARAMETER)
        return kind == MASK_BUFFER
                   ? MPCL_OK
                   : mpcl__format_error(m->path, __FILE__, __LINE__,
                                        "tensor '%s' is not a parameter of GPT-2 with "
                                        "config.json's sizes (n_layer %zu)",
                                        t->name, m->c->n_layer);
    mpcl_gpt2_tensor want;
    describe(m->c, *index, &want);
    char why[160];
    snprintf(why, sizeof why, "config.json's sizes (n_embd %zu, vocab_size %zu, n_positions %zu)",
             m->c->n_embd, m->c->vocab_size, m->c->n_positions);
    return check_shape(m, t, want.shape, want.ndim, why);
}

/* Every file tensor checked; then the first parameter missing, if any. */
static mpcl_status match_all(matcher *m) {
    size_t params = 0, index;
    for (size_t i = 0; i < mpcl_safetensors_count(m->st); i++) {
        TRY(match_tensor(m, mpcl_safetensors_tensor(m->st, i), &index));
        params += index != SIZE_MAX;
    }
    if (m->lm_head) {
        mpcl_gpt2_tensor wte;
        describe(m->c, 0, &wte);
        TRY(check_shape(m, m->lm_head, wte.shape, 2, "tied to wte.weight, config.json's sizes"));
    }
    /* Names are unique and each has one place: only a missing one leaves
     * fewer than the list. The search stops at it, within params + 1 steps. */
    for (size_t i = 0; params < tensor_count(m->c) && i < tensor_count(m->c); i++) {
        mpcl_gpt2_tensor t;
        describe(m->c, i, &t);
        char name[MPCL_GPT2_NAME_MAX + sizeof PREFIX];
        snprintf(name, sizeof name, "%s%s", m->prefixed == 1 ? PREFIX : "", t.name);
        if (!mpcl_safetensors_find(m->st, name))
            return mpcl__format_error(m->path, __FILE__, __LINE__,
                                      "tensor '%s' is missing (config.json: n_layer %zu)", name,
                                      m->c->n_layer);
    }
    return MPCL_OK;
}

/* Elements of a file tensor as f32 (F32, F16 or BF16, little-endian: the
 * safetensors reader runs on little-endian hosts only), from element
 * `first` on. */
static void to_f32(const mpcl_st_tensor *t, size_t first, float *dst, size_t n) {
    const unsigned char *src =
        (const unsigned char *)t->data + first * mpcl_st_dtype_size(t->dtype);
    if (t->dtype == MPCL_ST_F32) {
        memcpy(dst, src, n * sizeof *dst);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = t->dtype == MPCL_ST_F16 ? mpcl_f16_to_f32(h) : mpcl_bf16_to_f32(h);
    }
}

/* lm_head.weight holds wte's values: mpcl's output projection is wte. */
static mpcl_status check_tied(const matcher *m, const mpcl_gpt2_tensor *wte) {
    float x[256];
    for (size_t done = 0; m->lm_head && done < wte->count; done += 256) {
        size_t n = wte->count - done < 256 ? wte->count - done : 256;
        to_f32(m->lm_head, done, x, n);
        for (size_t i = 0; i < n; i++)
            if (memcmp(&x[i], &wte->data[done + i], sizeof x[i]) != 0)
                return mpcl__format_error(m->path, __FILE__, __LINE__,
                                          "tensor 'lm_head.weight' differs from wte.weight at "
                                          "element %zu (%g, not %g); mpcl ties the output "
                                          "projection to wte",
                                          done + i, (double)x[i], (double)wte->data[done + i]);
    }
    return MPCL_OK;
}

/* The checked file's parameters into w. */
static mpcl_status fill(matcher *m, mpcl_gpt2_weights *w) {
    for (size_t i = 0; i < mpcl_safetensors_count(m->st); i++) {
        const mpcl_st_tensor *t = mpcl_safetensors_tensor(m->st, i);
        const char *name = t->name;
        size_t index;
        if (m->prefixed == 1 && strncmp(name, PREFIX, strlen(PREFIX)) == 0) name += strlen(PREFIX);
        if (classify(&w->config, name, &index) == PARAMETER)
            to_f32(t, 0, w->tensors[index].data, w->tensors[index].count);
    }
    return check_tied(m, &w->tensors[0]);
}

mpcl_status mpcl_gpt2_folder_read(const char *folder, mpcl_gpt2_weights **out) {
    if (!folder || !out)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_gpt2_folder_read: NULL argument");
    *out = NULL;
    char path[MPCL__DATA_PATH_BYTES];
    if (!join(path, folder, WEIGHTS_FILE)) return path_too_long(folder);
    mpcl_gpt2_config config;
    TRY(mpcl_gpt2_config_read(folder, &config));
    mpcl_safetensors *st = NULL;
    TRY(mpcl_safetensors_read(path, &st));
    matcher m = {path, &config, st, -1, NULL};
    mpcl_gpt2_weights *w = NULL;
    mpcl_status s = match_all(&m);
    if (s == MPCL_OK) s = mpcl_gpt2_weights_new(&config, &w);
    if (s == MPCL_OK) s = fill(&m, w);
    mpcl_safetensors_destroy(st);
    if (s != MPCL_OK) {
        mpcl_gpt2_weights_destroy(w);
        return s;
    }
    *out = w;
    return MPCL_OK;
}

/* ---- writing ---- */

/* w's tensors are those of its config, in order, with their data. */
static mpcl_status check_weights(const mpcl_gpt2_weights *w) {
    TRY(mpcl_gpt2_config_check(&w->config));
    if (w->count != tensor_count(&w->config) || !w->tensors)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "GPT-2 weights: %zu tensors; the config's n_layer %zu makes %zu",
                          w->count, w->config.n_layer, tensor_count(&w->config));
    for (size_t i = 0; i < w->count; i++) {
        mpcl_gpt2_tensor want;
        describe(&w->config, i, &want);
        const mpcl_gpt2_tensor *t = &w->tensors[i];
        char a[64], b[64];
        if (strcmp(t->name, want.name) != 0 || t->ndim != want.ndim ||
            t->shape[0] != want.shape[0] || t->shape[1] != want.shape[1] ||
            t->count != want.shape[0] * want.shape[1] || !t->data)
            return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                              "GPT-2 weights: tensor %zu is '%s' %s%s; the config makes it '%s' "
                              "%s",
                              i, t->name, shape_text(a, t->ndim, t->shape),
                              t->data ? "" : " without data", want.name,
                              shape_text(b, want.ndim, want.shape));
    }
    return MPCL_OK;
}

/* The shortest text that reads back as x. */
static void real_text(char buf[32], double x) {
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, 32, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) return;
    }
}

static mpcl_status write_config(const char *path, const mpcl_gpt2_config *c) {
    char eps[32], tokens[32], text[2048];
    real_text(eps, c->layer_norm_epsilon);
    /* GPT-2's end-of-text token, where the vocabulary has it. */
    if (c->vocab_size > 50256)
        snprintf(tokens, sizeof tokens, "50256");
    else
        snprintf(tokens, sizeof tokens, "null");
    int n = snprintf(text, sizeof text,
                     "{\n"
                     "  \"activation_function\": \"gelu_new\",\n"
                     "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                     "  \"attn_pdrop\": 0.1,\n"
                     "  \"bos_token_id\": %s,\n"
                     "  \"dtype\": \"float32\",\n"
                     "  \"embd_pdrop\": 0.1,\n"
                     "  \"eos_token_id\": %s,\n"
                     "  \"initializer_range\": 0.02,\n"
                     "  \"layer_norm_epsilon\": %s,\n"
                     "  \"model_type\": \"gpt2\",\n"
                     "  \"n_ctx\": %zu,\n"
                     "  \"n_embd\": %zu,\n"
                     "  \"n_head\": %zu,\n"
                     "  \"n_inner\": null,\n"
                     "  \"n_layer\": %zu,\n"
                     "  \"n_positions\": %zu,\n"
                     "  \"resid_pdrop\": 0.1,\n"
                     "  \"summary_activation\": null,\n"
                     "  \"summary_first_dropout\": 0.1,\n"
                     "  \"summary_proj_to_labels\": true,\n"
                     "  \"summary_type\": \"cls_index\",\n"
                     "  \"summary_use_proj\": true,\n"
                     "  \"tie_word_embeddings\": true,\n"
                     "  \"vocab_size\": %zu\n"
                     "}\n",
                     tokens, tokens, eps, c->n_positions, c->n_embd, c->n_head, c->n_layer,
                     c->n_positions, c->vocab_size);
    mpcl__atomic_file af;
    TRY(mpcl__atomic_begin(&af, path));
    mpcl_status st = mpcl__atomic_write(&af, text, (size_t)n);
    if (st != MPCL_OK) {
        mpcl__atomic_abort(&af);
        return st;
    }
    return mpcl__atomic_commit(&af);
}

static mpcl_status write_tensors(const char *path, const mpcl_gpt2_weights *w) {
    mpcl_st_tensor *ts = calloc(w->count, sizeof *ts);
    char(*names)[MPCL_GPT2_NAME_MAX + sizeof PREFIX] = calloc(w->count, sizeof *names);
    mpcl_status st = MPCL_OK;
    if (!ts || !names) st = MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "writing '%s'", path);
    for (size_t i = 0; st == MPCL_OK && i < w->count; i++) {
        const mpcl_gpt2_tensor *t = &w->tensors[i];
        snprintf(names[i], sizeof names[i], PREFIX "%s", t->name);
        ts[i] = (mpcl_st_tensor){.name = names[i],
                                 .dtype = MPCL_ST_F32,
                                 .ndim = t->ndim,
                                 .shape = {t->shape[0], t->shape[1]},
                                 .data = t->data};
    }
    const mpcl_st_meta meta = {"format", "pt"};
    if (st == MPCL_OK) st = mpcl_safetensors_write(path, ts, w->count, &meta, 1);
    free(names);
    free(ts);
    return st;
}

/* The two files into folder, weights first. */
static mpcl_status write_files(const char *folder, const mpcl_gpt2_weights *w) {
    char path[MPCL__DATA_PATH_BYTES];
    if (!join(path, folder, WEIGHTS_FILE)) return path_too_long(folder);
    TRY(write_tensors(path, w));
    if (!join(path, folder, CONFIG_FILE)) return path_too_long(folder);
    return write_config(path, &w->config);
}

/* A folder whose config.json says "model_type": "gpt2" (or no folder, or an
 * empty one: *whole is then true, for a new folder written whole). */
static mpcl_status check_target(const char *folder, bool *whole) {
    struct stat sb;
    *whole = lstat(folder, &sb) != 0 && errno == ENOENT;
    if (*whole) return MPCL_OK;
    char path[MPCL__DATA_PATH_BYTES];
    if (!join(path, folder, CONFIG_FILE)) return path_too_long(folder);
    struct stat cb;
    if (S_ISDIR(sb.st_mode) && lstat(path, &cb) != 0) {
        *whole = true; /* mpcl__atomic_dir_begin refuses it unless empty */
        return MPCL_OK;
    }
    mpcl__json *doc = NULL;
    const char *type = NULL;
    /* Any failure to read it is the refusal below, with its own message. */
    if (S_ISDIR(sb.st_mode) && mpcl__json_read_file(path, CONFIG_MAX_BYTES, &doc) == MPCL_OK)
        type = mpcl__json_string(mpcl__json_member(mpcl__json_root(doc), "model_type"), NULL);
    bool gpt2 = type && strcmp(type, "gpt2") == 0;
    mpcl__json_free(doc);
    if (!gpt2)
        return MPCL_ERROR(NULL, MPCL_ERR_IO,
                          "cannot write GPT-2 folder '%s': it is %s; mpcl replaces only an empty "
                          "folder or one whose " CONFIG_FILE " has \"model_type\": \"gpt2\"",
                          folder,
                          S_ISDIR(sb.st_mode) ? "a folder that holds other things"
                                              : mpcl__file_kind((unsigned)sb.st_mode));
    return MPCL_OK;
}

mpcl_status mpcl_gpt2_folder_write(const char *folder, const mpcl_gpt2_weights *w) {
    if (!folder || !w)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_gpt2_folder_write: NULL argument");
    TRY(check_weights(w));
    bool whole;
    TRY(check_target(folder, &whole));
    if (!whole) return write_files(folder, w);
    mpcl__atomic_dir ad;
    TRY(mpcl__atomic_dir_begin(&ad, folder));
    mpcl_status st = write_files(ad.tmp, w);
    if (st != MPCL_OK) {
        mpcl__atomic_dir_abort(&ad);
        return st;
    }
    return mpcl__atomic_dir_commit(&ad);
}
