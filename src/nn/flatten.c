/* Flatten: (height, width, channels) to (height * width * channels,). NHWC
 * rows are already flat in memory, so the model passes tensors through. */
#include "nn/nn.h"

static mpcl_status flatten_declare(mpcl__layer *L, mpcl__tables *t) {
    (void)t;
    size_t features = L->inputs;
    mpcl__layer_set_output(L, 1, &features);
    return MPCL_OK;
}

const mpcl__layer_kind mpcl__flatten_layer = {
    .name = "flatten",
    .keras_name = "Flatten",
    .passthrough = true,
    .declare = flatten_declare,
};
