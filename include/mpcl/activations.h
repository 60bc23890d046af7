/* The activations: one row each, in the order of enum mpcl_activation
 * (include/mpcl/ops.h builds the enum from it; the kernels, which include
 * this file too, build one kernel set per row). A row is
 *   X(NAME, name, SAVED, POOLS_FIRST)
 * NAME makes MPCL_ACT_NAME, name is what mpcl_activation_name() spells and
 * the kernels' suffix, and SAVED is which forward tensor its derivative
 * reads: NONE, OUTPUT (the activation's output y) or PREACT (z = in + bias,
 * for a function that is not invertible). POOLS_FIRST is 1 where the
 * function as computed never decreases, so that the largest of its values
 * is its value at the largest input (NaN aside): a max pooling after it
 * may run before it, and the bias and activation then touch the pooled map
 * only (src/nn/model.c); 0 where its rounding may not keep the order
 * (sigmoid's and tanh's exp) or it is not monotonic. A new activation is
 * its row here, its two formulas in cl/activation.cl (activation_apply,
 * activation_grad) and its test. A consumer names the columns it reads
 * and takes the rest as `...`, so that a new column touches only its
 * readers. Plain preprocessor text only: it is C and OpenCL C. */
#ifndef MPCL_ACTIVATIONS_H
#define MPCL_ACTIVATIONS_H

/* GELU is the tanh form: 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))). */
#define MPCL_ACTIVATION_LIST(X)    \
    X(IDENTITY, identity, NONE, 1) \
    X(RELU, relu, OUTPUT, 1)       \
    X(GELU, gelu, PREACT, 0)       \
    X(SIGMOID, sigmoid, OUTPUT, 0) \
    X(TANH, tanh, OUTPUT, 0)

#endif
