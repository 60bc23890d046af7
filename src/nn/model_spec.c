/* A model's text form (its input shape and layer specs) and its summary:
 * what checkpoints store, what the auto plan's key hashes, what a summary
 * prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpcl/number.h"
#include "nn/nn.h"

#define SEPARATOR "; "

mpcl_status mpcl_model_spec_format(mpcl_context *ctx, const mpcl_model_params *params, char *buf,
                                   size_t size) {
    mpcl_layer_spec specs[MPCL_MAX_LAYERS];
    size_t count, rank, shape[MPCL_MAX_INPUT_RANK];
    mpcl_status st = mpcl_model_params_layers(ctx, params, specs, &count);
    if (st != MPCL_OK) return st;
    mpcl_model_params_input_shape(params, shape, &rank);
    size_t len = (size_t)snprintf(buf, size, "input_shape=");
    for (size_t d = 0; d < rank && len < size; d++)
        len += (size_t)snprintf(buf + len, size - len, "%s%zu", d ? "," : "", shape[d]);
    for (size_t l = 0; l < count && len < size; l++) {
        len += (size_t)snprintf(buf + len, size - len, SEPARATOR);
        if (len >= size) break;
        if ((st = mpcl_layer_spec_format(ctx, &specs[l], buf + len, size - len)) != MPCL_OK)
            return st;
        len += strlen(buf + len);
    }
    if (len >= size)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "model spec: a buffer of %zu bytes is too short",
                          size);
    return MPCL_OK;
}

/* "28,28,1" into shape; false unless 1 to MPCL_MAX_INPUT_RANK positive
 * whole numbers. */
static bool parse_shape(const char *text, size_t *shape, size_t *rank) {
    *rank = 0;
    for (const char *p = text;;) {
        char part[32];
        size_t len = strcspn(p, ",");
        uint64_t v;
        if (*rank == MPCL_MAX_INPUT_RANK || len >= sizeof part) return false;
        memcpy(part, p, len);
        part[len] = '\0';
        if (mpcl_parse_uint(part, 1u << 30, &v) != MPCL_NUMBER_OK || v == 0) return false;
        shape[(*rank)++] = (size_t)v;
        p += len;
        if (!*p) return true;
        p++;
    }
}

mpcl_status mpcl_model_spec_parse(mpcl_context *ctx, const char *text, mpcl_model_params *params) {
    mpcl_model_params p = *params;
    const char *s = text ? text : "";
    size_t len = strcspn(s, ";");
    char *part = malloc(strlen(s) + 1);
    if (!part) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "parsing a model spec");
    memcpy(part, s, len);
    part[len] = '\0';
    mpcl_status st = MPCL_OK;
    const char *key = "input_shape=";
    if (strncmp(part, key, strlen(key)) != 0 ||
        !parse_shape(part + strlen(key), p.input_shape, &p.input_rank)) {
        st = MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                        "model spec \"%.80s\" does not start with input_shape=N[,N[,N]]", s);
        goto done;
    }
    p.inputs = 1;
    for (size_t d = 0; d < p.input_rank; d++) p.inputs *= p.input_shape[d];
    p.layer_count = 0;
    for (s += len; *s; s += len) {
        s += strspn(s, "; ");
        len = strcspn(s, ";");
        if (len == 0) break;
        if (p.layer_count == MPCL_MAX_LAYERS) {
            st = MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "model spec: more than %d layers",
                            MPCL_MAX_LAYERS);
            goto done;
        }
        memcpy(part, s, len);
        part[len] = '\0';
        if (mpcl_layer_spec_parse(ctx, part, &p.layers[p.layer_count]) != MPCL_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", mpcl_errmsg());
            st = MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "model spec layer %zu: %s", p.layer_count,
                            why);
            goto done;
        }
        p.layer_count++;
    }
    if (p.layer_count == 0) {
        st = MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "model spec has no layers");
        goto done;
    }
    *params = p;
done:
    free(part);
    return st;
}

/* "conv2d_0.kernel" belongs to conv2d_0. */
static bool row_of_layer(const mpcl_param_info *row, const char *layer) {
    size_t n = strlen(layer);
    return strncmp(row->name, layer, n) == 0 && row->name[n] == '.';
}

/* Declares params' layers without a device into t (env's ctx may be NULL)
 * and, when out is given, summarizes each layer there; *count gets the
 * layer count. The one walk behind mpcl_model_summary and the checkpoint's
 * list of tensors. */
static mpcl_status declare_offline(mpcl_context *ctx, const mpcl_model_params *p, mpcl__tables *t,
                                   mpcl_layer_summary *out, size_t *count) {
    mpcl_layer_spec specs[MPCL_MAX_LAYERS];
    size_t n;
    *count = 0;
    mpcl_status st = mpcl__model_device_layers(ctx, p, specs, &n);
    if (st != MPCL_OK) return st;
    mpcl__layer *layers = calloc(MPCL_MAX_LAYERS, sizeof *layers);
    if (!layers) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "declaring a model's layers");
    mpcl__params_init(&t->params, 2);
    mpcl__params_init(&t->buffers, 2);
    mpcl__layer_env env = {ctx, MPCL_DTYPE_F32, MPCL_GEMM_MPCL_F32, p->max_batch, p->seed, 0};
    st = mpcl__declare_layers(ctx, p, specs, n, &env, layers, t);
    /* Rows are added layer by layer: each layer's are the new ones. */
    size_t prow = 0, brow = 0;
    for (size_t l = 0; out && l < n && st == MPCL_OK; l++) {
        mpcl__layer *L = &layers[l];
        mpcl_layer_summary *o = &out[l];
        memset(o, 0, sizeof *o);
        mpcl__layer_name(o->name, sizeof o->name, L);
        o->out_rank = L->out_rank;
        memcpy(o->out_shape, L->out_shape, sizeof o->out_shape);
        for (; prow < t->params.count && row_of_layer(&t->params.rows[prow], o->name); prow++)
            o->params += t->params.rows[prow].count;
        for (; brow < t->buffers.count && row_of_layer(&t->buffers.rows[brow], o->name); brow++)
            o->buffers += t->buffers.rows[brow].count;
    }
    if (st == MPCL_OK) *count = n;
    mpcl__destroy_layers(layers, n);
    free(layers);
    return st;
}

mpcl_status mpcl_model_summary(mpcl_context *ctx, const mpcl_model_params *params,
                               mpcl_layer_summary out[MPCL_MAX_LAYERS], size_t *count) {
    mpcl__tables *t = malloc(sizeof *t);
    *count = 0;
    if (!t) return MPCL_ERROR(ctx, MPCL_ERR_OUT_OF_MEMORY, "a model summary");
    mpcl_status st = declare_offline(ctx, params, t, out, count);
    free(t);
    return st;
}

mpcl_status mpcl__model_tables(mpcl_context *ctx, const mpcl_model_params *p, mpcl__tables *t) {
    size_t n;
    return declare_offline(ctx, p, t, NULL, &n);
}
