/* The activations: one row each, in the order of enum mpcl_activation
 * (include/mpcl/ops.h builds the enum from it; the kernels, which include
 * this file too, build one kernel set per row). A row is
 *   X(NAME, name, SAVED)
 * NAME makes MPCL_ACT_NAME, name is what mpcl_activation_name() spells and
 * the kernels' suffix, and SAVED is which forward tensor its derivative
 * reads: NONE, OUTPUT (the activation's output y) or PREACT (z = in + bias,
 * for a function that is not invertible). A new activation is its row here,
 * its two formulas in cl/activation.cl (activation_apply, activation_grad)
 * and its test. Plain preprocessor text only: it is C and OpenCL C. */
#ifndef MPCL_ACTIVATIONS_H
#define MPCL_ACTIVATIONS_H

/* GELU is the tanh form: 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))). */
#define MPCL_ACTIVATION_LIST(X) \
    X(IDENTITY, identity, NONE) \
    X(RELU, relu, OUTPUT)       \
    X(GELU, gelu, PREACT)       \
    X(SIGMOID, sigmoid, OUTPUT) \
    X(TANH, tanh, OUTPUT)

#endif
