/* The Keras model JSON into layer specs (model_file.h says what is read,
 * ignored and refused). Every attribute goes through the kind's own
 * declaration (mpcl_layer_spec_set), so this file knows Keras' layout, not
 * the layers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdarg.h>

#include "io/io.h"
#include "io/json.h"
#include "mpcl/model_file.h"
#include "mpcl/number.h"

/* Keys mpcl does not need, whatever their value. */
static const char *const IGNORED[] = {
    "name",
    "trainable",
    "dtype",
    "seed",
    "kernel_initializer",
    "bias_initializer",
    "beta_initializer",
    "gamma_initializer",
    "moving_mean_initializer",
    "moving_variance_initializer",
    "embeddings_initializer",
    "kernel_regularizer",
    "bias_regularizer",
    "activity_regularizer",
    "beta_regularizer",
    "gamma_regularizer",
    "kernel_constraint",
    "bias_constraint",
    "beta_constraint",
    "gamma_constraint",
    "batch_input_shape",
    "batch_shape",
};

/* Keys whose value must be one mpcl honours: its JSON text, one of a few. */
static const struct {
    const char *key;
    const char *values[3];
} REQUIRED[] = {
    {"data_format", {"channels_last"}},
    {"dilation_rate", {"1", "[1,1]"}},
    {"groups", {"1"}},
    {"axis", {"-1", "3", "[-1]"}},
    {"center", {"true"}},
    {"scale", {"true"}},
    {"rms_scaling", {"false"}},
    {"renorm", {"false"}},
    {"synchronized", {"false"}},
    {"mask_zero", {"false"}},
    {"normalize_first", {"true"}},
    {"dropout", {"0", "0.0"}},
};

typedef struct reader {
    const char *path;
    char why[512]; /* the first error */
} reader;

static mpcl_status fail(reader *r, const mpcl__json_value *at, const char *fmt, ...)
    MPCL_PRINTF(3, 4);
static mpcl_status fail(reader *r, const mpcl__json_value *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    if (at)
        return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "model file '%s': line %u, column %u: %s", r->path,
                          mpcl__json_line(at), mpcl__json_column(at), r->why);
    return MPCL_ERROR(NULL, MPCL_ERR_FORMAT, "model file '%s': %s", r->path, r->why);
}

/* A scalar or a list of scalars as compact JSON-like text: "3", "[1,1]",
 * "true", "valid". false when it is anything else or too long. */
static bool value_text(const mpcl__json_value *v, char *buf, size_t size, bool brackets) {
    size_t n = 0;
    switch (mpcl__json_type_of(v)) {
    case MPCL__JSON_NUMBER: n = (size_t)snprintf(buf, size, "%s", mpcl__json_number_text(v)); break;
    case MPCL__JSON_STRING:
        n = (size_t)snprintf(buf, size, "%s", mpcl__json_string(v, NULL));
        break;
    case MPCL__JSON_BOOL:
        n = (size_t)snprintf(buf, size, "%s", mpcl__json_bool(v) ? "true" : "false");
        break;
    case MPCL__JSON_ARRAY:
        if (brackets) n = (size_t)snprintf(buf, size, "[");
        for (size_t i = 0; i < mpcl__json_count(v) && n < size; i++) {
            const mpcl__json_value *e = mpcl__json_at(v, i);
            if (mpcl__json_type_of(e) != MPCL__JSON_NUMBER) return false;
            n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? "," : "",
                                  mpcl__json_number_text(e));
        }
        if (brackets && n < size) n += (size_t)snprintf(buf + n, size - n, "]");
        break;
    default: return false;
    }
    return n < size;
}

static bool ignored(const char *key) {
    for (size_t i = 0; i < sizeof IGNORED / sizeof IGNORED[0]; i++)
        if (strcmp(IGNORED[i], key) == 0) return true;
    return false;
}

/* The key is one of REQUIRED: its value must be one of the listed. */
static mpcl_status check_required(reader *r, const mpcl__json_value *v, size_t layer,
                                  const char *cls, const char *key, bool *known) {
    for (size_t i = 0; i < sizeof REQUIRED / sizeof REQUIRED[0]; i++) {
        if (strcmp(REQUIRED[i].key, key) != 0) continue;
        *known = true;
        char text[64];
        bool ok = value_text(v, text, sizeof text, true);
        for (size_t j = 0; ok && j < 3 && REQUIRED[i].values[j]; j++)
            if (strcmp(text, REQUIRED[i].values[j]) == 0) return MPCL_OK;
        return fail(r, v, "layer %zu (%s): %s is %s; mpcl supports only %s", layer, cls, key,
                    ok ? text : "not a plain value", REQUIRED[i].values[0]);
    }
    *known = false;
    return MPCL_OK;
}

/* [null, d1, ...] into shape: 1 to MPCL_MAX_INPUT_RANK positive sizes. */
static mpcl_status read_shape(reader *r, const mpcl__json_value *v, mpcl_model_params *p) {
    size_t n = mpcl__json_count(v);
    if (mpcl__json_type_of(v) != MPCL__JSON_ARRAY || n < 2 || n - 1 > MPCL_MAX_INPUT_RANK ||
        mpcl__json_type_of(mpcl__json_at(v, 0)) != MPCL__JSON_NULL)
        return fail(r, v, "an input shape is [null, then 1 to %d sizes]", MPCL_MAX_INPUT_RANK);
    for (size_t d = 1; d < n; d++) {
        const char *t = mpcl__json_number_text(mpcl__json_at(v, d));
        uint64_t size;
        if (!t || mpcl_parse_uint(t, 1u << 30, &size) != MPCL_NUMBER_OK || size == 0)
            return fail(r, mpcl__json_at(v, d), "input size %zu is not a positive whole number", d);
        p->input_shape[d - 1] = (size_t)size;
    }
    p->input_rank = n - 1;
    return MPCL_OK;
}

/* An input shape a layer object may carry (first layer only). */
static mpcl_status layer_input_shape(reader *r, const mpcl__json_value *layer,
                                     const mpcl__json_value *config, mpcl_model_params *p) {
    const char *keys[] = {"batch_shape", "batch_input_shape"};
    for (size_t i = 0; i < 2; i++) {
        const mpcl__json_value *v = mpcl__json_member(config, keys[i]);
        if (v) return read_shape(r, v, p);
    }
    const mpcl__json_value *build = mpcl__json_member(layer, "build_config");
    const mpcl__json_value *v = build ? mpcl__json_member(build, "input_shape") : NULL;
    return v ? read_shape(r, v, p) : MPCL_OK;
}

static mpcl_status read_layer(reader *r, const mpcl__json_value *layer, size_t index,
                              mpcl_model_params *p) {
    const mpcl__json_value *cv = mpcl__json_member(layer, "class_name");
    const mpcl__json_value *config = mpcl__json_member(layer, "config");
    const char *cls = mpcl__json_string(cv, NULL);
    if (!cls || mpcl__json_type_of(config) != MPCL__JSON_OBJECT)
        return fail(r, layer, "layer %zu has no class_name string and config object", index);
    if (strcmp(cls, "InputLayer") == 0) return layer_input_shape(r, layer, config, p);
    const char *kind = mpcl_layer_kind_from_keras(cls);
    if (!kind) {
        char known[256] = "";
        for (size_t i = 0; i < mpcl_layer_kind_count(); i++) {
            size_t n = strlen(known);
            snprintf(known + n, sizeof known - n, "%s, ",
                     mpcl_layer_kind_keras_name(mpcl_layer_kind_name(i)));
        }
        return fail(r, cv, "layer %zu is %s, which mpcl does not have (it has %sInputLayer)", index,
                    cls, known);
    }
    if (p->layer_count == MPCL_MAX_LAYERS)
        return fail(r, layer, "more than %d layers", MPCL_MAX_LAYERS);
    if (p->layer_count == 0 && p->input_rank == 0) {
        mpcl_status st = layer_input_shape(r, layer, config, p);
        if (st != MPCL_OK) return st;
    }
    mpcl_layer_spec *s = &p->layers[p->layer_count];
    mpcl_layer_spec_init(NULL, kind, s);
    for (size_t i = 0; i < mpcl__json_count(config); i++) {
        const char *key = mpcl__json_key_at(config, i);
        const mpcl__json_value *v = mpcl__json_at(config, i);
        bool declared = false, required = false;
        for (size_t a = 0; a < mpcl_layer_attr_count(kind) && !declared; a++)
            declared = strcmp(mpcl_layer_attr_name(kind, a), key) == 0;
        mpcl_status st = check_required(r, v, index, cls, key, &required);
        if (st != MPCL_OK) return st;
        if (required || ignored(key) || mpcl__json_type_of(v) == MPCL__JSON_NULL) continue;
        if (!declared)
            return fail(r, v, "layer %zu (%s): unknown attribute \"%s\"", index, cls, key);
        char text[128];
        if (!value_text(v, text, sizeof text, false))
            return fail(r, v,
                        "layer %zu (%s): %s is %s, not a number, string, boolean or list of "
                        "numbers",
                        index, cls, key, mpcl__json_type_name(mpcl__json_type_of(v)));
        if (mpcl_layer_spec_set(NULL, s, key, text) != MPCL_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", mpcl_errmsg());
            return fail(r, v, "layer %zu (%s): %s", index, cls, why);
        }
    }
    if (mpcl_layer_spec_check(NULL, s) != MPCL_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", mpcl_errmsg());
        return fail(r, config, "layer %zu (%s): %s", index, cls, why);
    }
    p->layer_count++;
    return MPCL_OK;
}

static mpcl_status read_model(reader *r, const mpcl__json_value *root, mpcl_model_params *p) {
    const char *cls = mpcl__json_string(mpcl__json_member(root, "class_name"), NULL);
    if (!cls || strcmp(cls, "Sequential") != 0)
        return fail(r, root, "the model is %s%s%s; mpcl reads Sequential models", cls ? "a " : "",
                    cls ? cls : "not a Keras model (no class_name)", "");
    const mpcl__json_value *config = mpcl__json_member(root, "config");
    /* Keras 2.0-2.2 wrote the layer list as the config itself. */
    const mpcl__json_value *layers = mpcl__json_type_of(config) == MPCL__JSON_ARRAY
                                         ? config
                                         : mpcl__json_member(config, "layers");
    if (mpcl__json_type_of(layers) != MPCL__JSON_ARRAY)
        return fail(r, config ? config : root, "the Sequential model has no layers list");
    size_t n = mpcl__json_count(layers);
    p->layer_count = 0;
    p->input_rank = 0;
    for (size_t i = 0; i < n; i++) {
        mpcl_status st = read_layer(r, mpcl__json_at(layers, i), i, p);
        if (st != MPCL_OK) return st;
    }
    if (p->layer_count == 0) return fail(r, layers, "the model has no layers mpcl trains");
    if (p->input_rank) {
        p->inputs = 1;
        for (size_t d = 0; d < p->input_rank; d++) p->inputs *= p->input_shape[d];
    }
    return MPCL_OK;
}

mpcl_status mpcl_model_file_read(const char *path, mpcl_model_params *params) {
    if (!path || !params)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_model_file_read: NULL argument");
    mpcl__json *doc = NULL;
    mpcl_status st = mpcl__json_read_file(path, MPCL_MODEL_FILE_MAX, &doc);
    if (st != MPCL_OK) return st;
    mpcl_model_params *p = malloc(sizeof *p);
    if (!p) {
        mpcl__json_free(doc);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "reading model file '%s'", path);
    }
    *p = *params;
    reader r = {path, ""};
    st = read_model(&r, mpcl__json_root(doc), p);
    if (st == MPCL_OK) *params = *p;
    free(p);
    mpcl__json_free(doc);
    return st;
}
