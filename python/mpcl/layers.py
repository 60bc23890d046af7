"""Layers: Dense, as in Keras."""


class Dense:
    """Dense(units, activation=None, input_shape=None). activation: None or
    "linear" (identity), "relu", "gelu", "tanh", "sigmoid"; on the last
    layer also "softmax" (with a loss that is not from_logits)."""

    def __init__(self, units, activation=None, input_shape=None, name=None):
        if not isinstance(units, int) or isinstance(units, bool) or units < 1:
            raise ValueError(f"Dense: units must be a positive integer, not {units!r}")
        if input_shape is not None:
            input_shape = tuple(input_shape)
            if len(input_shape) != 1 or not isinstance(input_shape[0], int) or input_shape[0] < 1:
                raise ValueError(f"Dense: input_shape must be (features,), not {input_shape!r}")
        self.units = units
        self.activation = "linear" if activation in (None, "linear", "identity") else activation
        self.input_shape = input_shape
        self.name = name
