/* The registered layer kinds. A new kind is one file plus one line here. */
#include <string.h>

#include "nn/nn.h"

static const mpcl__layer_kind *const KINDS[] = {
    &mpcl__dense_layer,
};

const mpcl__layer_kind *mpcl__layer_kind_find(const char *name) {
    for (size_t i = 0; name && i < sizeof KINDS / sizeof KINDS[0]; i++)
        if (strcmp(KINDS[i]->name, name) == 0) return KINDS[i];
    return NULL;
}

bool mpcl_layer_kind_known(const char *kind) {
    return mpcl__layer_kind_find(kind) != NULL;
}
