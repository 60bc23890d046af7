"""Layers as in Keras, each one an mpcl_layer_spec built by the library.

A layer's attributes, their types, defaults and checks are the library's
declarations (mpcl/layer_spec.h): a layer sets each argument through
mpcl_layer_spec_set as text, so a bad value is refused with the library's
message (ValueError), and get_config() reads the values back through
mpcl_layer_spec_get. A kind this libmpcl does not register is refused when
the layer is built."""

import ctypes

from . import _lib
from ._lib import lib

_ACTIVATION_ALIASES = {None: "linear", "identity": "linear"}


def _spec_call(fn, *args):
    """A layer_spec call whose failure is the caller's bad argument:
    ValueError with the library's message."""
    try:
        _lib.call(fn, None, *args)
    except _lib.MpclError as e:
        raise ValueError(e.message) from None


def _as_text(value):
    """An argument as the library's attribute text: pairs "3,3", booleans
    "true"/"false", numbers as Python writes them (the library refuses a
    float where it takes a count)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(_as_text(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _from_text(kind_type, text):
    """An attribute's text as Keras' JSON value: lists for pairs."""
    if kind_type == _lib.ATTR_COUNT:
        return int(text)
    if kind_type == _lib.ATTR_PAIR:
        return [int(v) for v in text.split(",")]
    if kind_type == _lib.ATTR_REAL:
        return float(text)
    if kind_type == _lib.ATTR_BOOL:
        return text == "true"
    return text


def attributes(kind):
    """[(name, type), ...] the library declares for kind, in order."""
    k = kind.encode()
    return [(lib.mpcl_layer_attr_name(k, i).decode(), lib.mpcl_layer_attr_type(k, i))
            for i in range(lib.mpcl_layer_attr_count(k))]


def keras_class(kind):
    name = lib.mpcl_layer_kind_keras_name(kind.encode())
    return name.decode() if name else None


class Layer:
    """A layer of one library kind; subclasses give `kind` and pass their
    arguments under the library's attribute names (Keras' names)."""

    kind = None

    def __init__(self, name=None, input_shape=None, **attrs):
        if not lib.mpcl_layer_kind_known(self.kind.encode()):
            raise NotImplementedError(
                f"this libmpcl has no layer kind {self.kind} ({type(self).__name__}); it has "
                f"{', '.join(_lib.LAYER_KINDS)}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{type(self).__name__}: name must be a string, not {name!r}")
        self.name = name
        self.input_shape = _input_shape(type(self).__name__, input_shape)
        act = attrs.get("activation")
        if "activation" in attrs and (act is None or isinstance(act, str)):
            attrs["activation"] = _ACTIVATION_ALIASES.get(act, act)
        self.spec = _lib.LayerSpec()
        _spec_call(lib.mpcl_layer_spec_init, self.kind.encode(), ctypes.byref(self.spec))
        for attr, value in attrs.items():
            if value is not None:
                self._set(attr, value)
        _spec_call(lib.mpcl_layer_spec_check, ctypes.byref(self.spec))

    def _set(self, attr, value):
        _spec_call(lib.mpcl_layer_spec_set, ctypes.byref(self.spec), attr.encode(),
                   _as_text(value).encode())

    def _resolved(self):
        """The spec as a model runs it: the library fills attributes that
        default from others (pooling strides 0 are the pool size) when it
        lists a model's layers."""
        mp = lib.mpcl_model_default_params()
        mp.layers[0], mp.layer_count = self.spec, 1
        out = (_lib.LayerSpec * _lib.MAX_LAYERS)()
        n = ctypes.c_size_t()
        _spec_call(lib.mpcl_model_params_layers, ctypes.byref(mp), out, ctypes.byref(n))
        return out[0]

    def get(self, attr):
        """One attribute's value as the library writes it ("3,3"), as the
        model runs it."""
        buf = ctypes.create_string_buffer(256)
        _spec_call(lib.mpcl_layer_spec_get, ctypes.byref(self._resolved()), attr.encode(), buf,
                   len(buf))
        return buf.value.decode()

    def declared_spec(self):
        """A copy of the spec as declared (a softmax output included: the
        library decides what the device runs of it)."""
        return _lib.LayerSpec.from_buffer_copy(self.spec)

    def get_config(self):
        """Keras' config: the name, then every declared attribute with its
        JSON type (lists for pairs, strings, numbers, booleans)."""
        cfg = {"name": self.name, "trainable": True, "dtype": "float32"}
        for attr, kind_type in attributes(self.kind):
            cfg[attr] = _from_text(kind_type, self.get(attr))
        return cfg

    def __repr__(self):
        return f"<{type(self).__name__} {self.name or self.kind}>"


def _input_shape(who, shape):
    """None, or a tuple of 1 to MAX_INPUT_RANK positive integers."""
    if shape is None:
        return None
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    ok = 1 <= len(shape) <= _lib.MAX_INPUT_RANK and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape)
    if not ok:
        raise ValueError(f"{who}: input_shape must be (features,) or (height, width, channels) "
                         f"of positive integers, not {shape!r}")
    return shape


class Dense(Layer):
    kind = "dense"

    def __init__(self, units, activation=None, use_bias=True, input_shape=None, name=None):
        if units is None:
            raise ValueError("Dense: units is required")
        super().__init__(name, input_shape, units=units, activation=activation,
                         use_bias=use_bias)


class Conv2D(Layer):
    kind = "conv2d"

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", activation=None,
                 use_bias=True, input_shape=None, name=None):
        super().__init__(name, input_shape, filters=filters, kernel_size=kernel_size,
                         strides=strides, padding=padding, activation=activation,
                         use_bias=use_bias)


class MaxPooling2D(Layer):
    kind = "max_pooling2d"

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", input_shape=None,
                 name=None):
        super().__init__(name, input_shape, pool_size=pool_size, strides=strides,
                         padding=padding)


class Flatten(Layer):
    kind = "flatten"

    def __init__(self, input_shape=None, name=None):
        super().__init__(name, input_shape)


class Dropout(Layer):
    kind = "dropout"

    def __init__(self, rate, input_shape=None, name=None):
        super().__init__(name, input_shape, rate=rate)


class BatchNormalization(Layer):
    kind = "batch_normalization"

    def __init__(self, momentum=0.99, epsilon=0.001, input_shape=None, name=None):
        super().__init__(name, input_shape, momentum=momentum, epsilon=epsilon)


class LayerNormalization(Layer):
    kind = "layer_normalization"

    def __init__(self, epsilon=0.001, input_shape=None, name=None):
        super().__init__(name, input_shape, epsilon=epsilon)


class TokenAndPositionEmbedding(Layer):
    """Keras-NLP's TokenAndPositionEmbedding: int32 token ids (T,), T <=
    sequence_length, to (T, embedding_dim) = the token's embedding plus the
    position's (GPT-2's wte and wpe, started normal with std 0.02). Only a
    model's first layer; the model's x is then int32 token ids."""
    kind = "token_pos_embedding"

    def __init__(self, vocabulary_size, sequence_length, embedding_dim, input_shape=None,
                 name=None):
        for arg, value in (("vocabulary_size", vocabulary_size),
                           ("sequence_length", sequence_length),
                           ("embedding_dim", embedding_dim)):
            if value is None:
                raise ValueError(f"TokenAndPositionEmbedding: {arg} is required")
        super().__init__(name, input_shape, vocabulary_size=vocabulary_size,
                         sequence_length=sequence_length, embedding_dim=embedding_dim)


class CausalSelfAttention(Layer):
    """GPT-2's masked multi-head self-attention over (T, C) sequences: the
    c_attn kernel [C, 3C] (q, k, v) and bias, the c_proj kernel [C, C] and
    bias; num_heads must divide C."""
    kind = "causal_self_attention"

    def __init__(self, num_heads, use_bias=True, input_shape=None, name=None):
        if num_heads is None:
            raise ValueError("CausalSelfAttention: num_heads is required")
        super().__init__(name, input_shape, num_heads=num_heads, use_bias=use_bias)


class TiedLMHead(Layer):
    """GPT-2's language-model head: (T, C) to logits (T, V) = h wte^T, wte
    the token embeddings of the model's TokenAndPositionEmbedding (which
    must come first). No weights of its own: wte's gradient gets both the
    head's part and the embedding's."""
    kind = "tied_lm_head"

    def __init__(self, input_shape=None, name=None):
        super().__init__(name, input_shape)


class TransformerDecoder(Layer):
    """Keras-NLP's TransformerDecoder in GPT-2's pre-norm form over (T, C)
    sequences: h = x + attn(ln_1(x)), out = h + c_proj(gelu(c_fc(ln_2(h)))),
    with c_fc C -> intermediate_dim (None: 4 C); num_heads must divide C.
    Its rows are GPT-2's: <name>.ln_1.gamma ... <name>.mlp.c_proj.bias."""
    kind = "transformer_decoder"

    def __init__(self, num_heads, intermediate_dim=None, layer_norm_epsilon=1e-05,
                 use_bias=True, input_shape=None, name=None):
        if num_heads is None:
            raise ValueError("TransformerDecoder: num_heads is required")
        super().__init__(name, input_shape, num_heads=num_heads,
                         intermediate_dim=intermediate_dim,
                         layer_norm_epsilon=layer_norm_epsilon, use_bias=use_bias)


def from_spec(spec, name=None, input_shape=None):
    """The layer of a library spec (a checkpoint's), of the class of its
    kind."""
    kind = spec.kind.decode()
    cls = next((c for c in Layer.__subclasses__() if c.kind == kind), None)
    if cls is None:
        raise ValueError(f"layer kind {kind!r} has no class in this mpcl package")
    layer = cls.__new__(cls)
    layer.name = name
    layer.input_shape = input_shape
    layer.spec = _lib.LayerSpec.from_buffer_copy(spec)
    return layer
