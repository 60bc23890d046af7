/* Layer specs: a model described as plain data. A spec is a kind ("dense",
 * "conv2d", ...) and the typed attributes that kind declares, under Keras'
 * names (units, filters, kernel_size, strides, padding, ...). Each kind
 * declares its attributes once -- name, type, default, range -- and every
 * reader goes through that declaration: the checkpoint's metadata, the
 * Keras model files of mpcl-train --model, and the Python layers, which ask
 * the library for the kinds and attributes instead of restating them.
 *
 * The text form of a spec is the kind and every attribute as name=value:
 *   conv2d filters=32 kernel_size=3,3 strides=1,1 padding=valid use_bias=true activation=relu
 * and a model's is its input shape and one spec per layer, separated by "; ":
 *   input_shape=28,28,1; conv2d filters=32 ...; flatten; dense units=10 ...
 * Pairs take one number for both ("kernel_size=3"). */
#ifndef MPCL_LAYER_SPEC_H
#define MPCL_LAYER_SPEC_H

#include <stdbool.h>
#include <stddef.h>

#include "mpcl/context.h"
#include "mpcl/conv.h"
#include "mpcl/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

#define MPCL_MAX_LAYERS 64
#define MPCL_LAYER_KIND_MAX 24
/* Rank of an input shape: (features) or (height, width, channels). */
#define MPCL_MAX_INPUT_RANK 3

/* One layer. Fields a kind does not declare are ignored by it. */
typedef struct mpcl_layer_spec {
    char kind[MPCL_LAYER_KIND_MAX];
    mpcl_activation activation; /* dense, conv2d */
    size_t units;               /* dense */
    size_t filters;             /* conv2d */
    size_t kernel_size[2];      /* conv2d */
    size_t pool_size[2];        /* max_pooling2d */
    size_t strides[2];          /* conv2d; max_pooling2d (0,0: the pool size) */
    mpcl_padding padding;       /* conv2d, max_pooling2d */
    bool use_bias;              /* dense, conv2d */
    double rate;                /* dropout: the fraction dropped, [0, 1) */
    double momentum;            /* batch_normalization: of the moving averages, [0, 1] */
    double epsilon;             /* batch_normalization, layer_normalization: added to the
                                 * variance, > 0; transformer_decoder's layer_norm_epsilon */
    size_t num_heads;           /* causal_self_attention, transformer_decoder: heads, dividing
                                 * the channels */
    size_t vocabulary_size;     /* token_pos_embedding: token ids in [0, vocabulary_size) */
    size_t sequence_length;     /* token_pos_embedding: the longest sequence (positions) */
    size_t embedding_dim;       /* token_pos_embedding: channels per position */
    size_t intermediate_dim;    /* transformer_decoder: the MLP's width, 0 for 4 C */
} mpcl_layer_spec;

/* ---- the kinds and their declared attributes ---- */

typedef enum mpcl_attr_type {
    MPCL_ATTR_COUNT,      /* a whole number */
    MPCL_ATTR_PAIR,       /* two whole numbers: "3,3", or "3" for both */
    MPCL_ATTR_REAL,       /* a finite real */
    MPCL_ATTR_BOOL,       /* "true" or "false" */
    MPCL_ATTR_ACTIVATION, /* an activation name ("linear" is identity; "softmax", an output
                           * layer's: see mpcl_model_output_activation) */
    MPCL_ATTR_PADDING,    /* "valid" or "same" */
} mpcl_attr_type;

/* The registered kinds, in registry order: index < mpcl_layer_kind_count. */
size_t mpcl_layer_kind_count(void);
/* "dense"; NULL past the end. */
const char *mpcl_layer_kind_name(size_t index);
/* Keras' class name of a kind ("Dense", "Conv2D"); NULL for an unknown kind. */
const char *mpcl_layer_kind_keras_name(const char *kind);
/* The kind of a Keras class name; NULL when mpcl has none. */
const char *mpcl_layer_kind_from_keras(const char *class_name);
/* Whether kind is a registered layer kind. */
bool mpcl_layer_kind_known(const char *kind);
/* The input rank a kind takes: 1 (features), 3 (height, width, channels),
 * 0 for any or an unknown kind. */
size_t mpcl_layer_kind_input_rank(const char *kind);

/* A kind's attributes, in declaration order; 0 / NULL for an unknown kind
 * or an index past the end. A NULL default means the attribute is required
 * (Dense's units, Conv2D's filters and kernel_size). */
size_t mpcl_layer_attr_count(const char *kind);
const char *mpcl_layer_attr_name(const char *kind, size_t index);
mpcl_attr_type mpcl_layer_attr_type(const char *kind, size_t index);
const char *mpcl_layer_attr_default(const char *kind, size_t index);

/* ---- building and reading specs ---- */

/* A spec of that kind with every attribute at its default; the required
 * ones are unset (zero) until mpcl_layer_spec_set gives them.
 * MPCL_ERR_INVALID_ARG for an unknown kind, naming the known ones. ctx may be
 * NULL (the thread's message only), as in every call of this header. */
mpcl_status mpcl_layer_spec_init(mpcl_context *ctx, const char *kind, mpcl_layer_spec *out);
/* Sets one attribute from its text, checked against its declaration
 * (MPCL_ERR_INVALID_ARG naming the kind, the attribute and the value). The
 * spec is unchanged on failure. */
mpcl_status mpcl_layer_spec_set(mpcl_context *ctx, mpcl_layer_spec *spec, const char *attr,
                                const char *value);
/* The text of one attribute's value ("3,3"); MPCL_ERR_INVALID_ARG for an
 * attribute the kind does not declare, MPCL_ERR_SHAPE for a short buffer. */
mpcl_status mpcl_layer_spec_get(mpcl_context *ctx, const mpcl_layer_spec *spec, const char *attr,
                                char *buf, size_t size);
/* Every attribute the kind requires is set and every value is in range. */
mpcl_status mpcl_layer_spec_check(mpcl_context *ctx, const mpcl_layer_spec *spec);

/* The text form of a spec ("dense units=10 activation=linear use_bias=true");
 * MPCL_ERR_SHAPE for a short buffer. */
mpcl_status mpcl_layer_spec_format(mpcl_context *ctx, const mpcl_layer_spec *spec, char *buf,
                                   size_t size);
/* The text form back into a spec: the kind, then name=value words separated
 * by blanks, each attribute at most once; what is not given keeps its
 * default; then mpcl_layer_spec_check. */
mpcl_status mpcl_layer_spec_parse(mpcl_context *ctx, const char *text, mpcl_layer_spec *out);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
