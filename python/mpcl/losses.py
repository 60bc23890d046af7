"""Losses as in Keras, each one a loss of the library (mpcl/losses.h), in f32
on the device in every policy. `name` is the library's name of the loss
(mpcl_loss_parse); `output_activation` is the activation the loss applies
itself (the library's mpcl_loss_output_activation), which a model's last
layer may declare when the loss is not from_logits: the library then runs
that layer linear, the loss reads its logits, and predict() applies it."""

from . import _lib


class Loss:
    name = None

    def __init__(self, from_logits=False):
        self.from_logits = bool(from_logits)

    @property
    def output_activation(self):
        """"softmax", "sigmoid", or None for a loss that applies none."""
        return _lib.activation_or_none(_lib.lib.mpcl_loss_output_activation(enum_of(self)))

    def get_config(self):
        return {"name": self.name, "from_logits": self.from_logits}


class SparseCategoricalCrossentropy(Loss):
    name = "sparse_categorical_crossentropy"


class BinaryCrossentropy(Loss):
    name = "binary_crossentropy"


class MeanSquaredError(Loss):
    """The mean of (y - t)^2; the last layer's output is the prediction."""

    name = "mse"

    def __init__(self):
        super().__init__(from_logits=True)

    def get_config(self):
        return {"name": "mean_squared_error"}


# Keras' string names.
_BY_NAME = {"sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
            "binary_crossentropy": BinaryCrossentropy, "mse": MeanSquaredError,
            "mean_squared_error": MeanSquaredError}


def get(loss):
    """A Loss from a Loss or one of Keras' names; ValueError otherwise."""
    if isinstance(loss, Loss):
        return loss
    if isinstance(loss, str) and loss in _BY_NAME:
        return _BY_NAME[loss]()
    raise ValueError(f"unknown loss {loss!r}; mpcl trains with {', '.join(_BY_NAME)} "
                     "(or their classes)")


def enum_of(loss):
    """The library's enum value of a Loss."""
    return _lib.parse_enum(_lib.lib.mpcl_loss_parse, loss.name, "loss", _lib.LOSSES)
