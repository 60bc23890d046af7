/* Model files: the Keras model JSON that `model.to_json()` writes (Keras 2
 * and Keras 3 layouts), read into a model's input shape and layer specs,
 * so that an architecture written in Keras trains in mpcl unchanged.
 *
 * A Sequential model only. Each layer's `class_name` names a kind
 * (mpcl_layer_kind_from_keras) and each key of its `config` is one of:
 *   - an attribute the kind declares (layer_spec.h), read from its JSON
 *     value: a number, a string, a boolean, a list of two numbers for a
 *     pair; null keeps the default;
 *   - a key mpcl does not need: name, trainable, dtype, initializers,
 *     regularizers, constraints, a dropout seed (masks come from the
 *     model's seed), and any key whose value is null;
 *   - a key whose value mpcl has one way to honour, which must hold it:
 *     data_format "channels_last", dilation_rate 1, groups 1, a batch or
 *     layer norm's axis -1 (or 3 for images), center and scale true, a
 *     layer norm's rms_scaling false, a token embedding's mask_zero false
 *     (Keras-NLP's TokenAndPositionEmbedding; its embeddings_initializer
 *     is an initializer like the others: mpcl starts it normal, std 0.02),
 *     a transformer decoder's normalize_first true and dropout 0
 *     (Keras-NLP's TransformerDecoder in GPT-2's pre-norm form; its
 *     activation is GELU's tanh form and is not a key).
 * Anything else is refused, naming the layer and key. The input shape comes
 * from an InputLayer's batch_shape (Keras 3) or batch_input_shape (Keras 2),
 * or the first layer's batch_input_shape or build_config. A softmax (or a
 * sigmoid with binary cross-entropy) on the last layer is kept as declared;
 * the model leaves it to the loss, which reads logits
 * (mpcl_model_output_activation), as Keras' from_logits=False is to mpcl. */
#ifndef MPCL_MODEL_FILE_H
#define MPCL_MODEL_FILE_H

#include "mpcl/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* Largest model file read (bytes). */
#define MPCL_MODEL_FILE_MAX ((size_t)16 << 20)

/* Reads the Keras model JSON at path into params' layers and, when the file
 * gives one, its input shape (input_rank 0 otherwise: the data decide);
 * the other fields are kept. MPCL_ERR_IO when the file cannot be read,
 * MPCL_ERR_FORMAT naming the file, line, layer and key for anything else;
 * params is unchanged on failure. */
mpcl_status mpcl_model_file_read(const char *path, mpcl_model_params *params);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
