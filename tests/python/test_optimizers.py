"""The optimizer classes come from the library's table: one per kind, with the
declared hyperparameters, defaults and checks, and a checkpoint gives back
every declared hyperparameter of every kind."""

import inspect

import numpy as np
import pytest

import mpcl
from mpcl import _lib

lib = _lib.lib
KINDS = list(range(lib.mpcl_optim_kind_count()))


def declared(kind):
    return [_lib.text(lib.mpcl_optim_param_name(kind, i))
            for i in range(lib.mpcl_optim_param_count(kind))]


def test_keras_signatures_and_defaults():
    # Keras' documented signatures (the arguments mpcl supports), written here
    # by hand: the classes must agree with them. decay_vectors is mpcl's own
    # (False: weight decay on matrices only), after Keras' positional ones.
    o = mpcl.optimizers
    want = {
        o.SGD: dict(learning_rate=0.01, momentum=0.0, nesterov=False, weight_decay=0.0,
                    decay_vectors=True, global_clipnorm=None),
        o.Adam: dict(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                     weight_decay=0.0, decay_vectors=True, global_clipnorm=None),
        o.AdamW: dict(learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999,
                      epsilon=1e-7, decay_vectors=True, global_clipnorm=None),
        o.RMSprop: dict(learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7,
                        global_clipnorm=None),
    }
    for cls, args in want.items():
        sig = inspect.signature(cls)
        assert list(sig.parameters) == list(args), cls.__name__
        got = {k: p.default for k, p in sig.parameters.items()}
        assert got == pytest.approx(args), cls.__name__
    assert isinstance(o.RMSprop(0.01, 0.8), o.Optimizer)
    assert o.RMSprop(0.01, 0.8).rho == 0.8


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_has_its_class(kind):
    name = _lib.text(lib.mpcl_optim_kind_name(kind))
    cls = getattr(mpcl.optimizers, _lib.text(lib.mpcl_optim_kind_keras_name(kind)))
    assert list(inspect.signature(cls).parameters) == declared(kind)
    assert type(mpcl.optimizers.get(name)) is cls
    assert type(mpcl.optimizers.get(name.upper())) is cls
    with pytest.raises(TypeError, match="learning_rate"):
        cls(no_such_argument=1)
    with pytest.raises(ValueError, match=f"optimizer {name}: learning_rate -1 .*>= 0"):
        cls(learning_rate=-1)


def test_unknown_name_lists_the_kinds():
    with pytest.raises(ValueError, match="RMSprop"):
        mpcl.optimizers.get("lamb")


def _nondefault(kind):
    """Every declared hyperparameter moved off its default, within range."""
    args = {}
    for i, name in enumerate(declared(kind)):
        if lib.mpcl_optim_param_is_bool(kind, i):
            args[name] = _lib.text(lib.mpcl_optim_param_default(kind, i)) != "true"
        else:
            args[name] = float(_lib.text(lib.mpcl_optim_param_default(kind, i))) * 0.5 + 0.0625
    return args


@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_keeps_every_hyperparameter(kind, tmp_path):
    cls = mpcl.optimizers.get(_lib.text(lib.mpcl_optim_kind_name(kind))).__class__
    args = _nondefault(kind)
    m = mpcl.models.Sequential([mpcl.layers.Dense(4, activation="relu", input_shape=(3,)),
                                mpcl.layers.Dense(2, activation="softmax")])
    m.compile(optimizer=cls(**args), loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(kind)
    x = rng.random((32, 3), dtype=np.float32)
    m.fit(x, (x.sum(1) > 1.5).astype(np.int64), epochs=1, batch_size=16, verbose=0)
    m.save(tmp_path / "m.safetensors")
    loaded = mpcl.models.load_model(tmp_path / "m.safetensors")
    p = loaded._compiled.params.optim
    assert p.kind == kind
    for i, name in enumerate(declared(kind)):
        got = lib.mpcl_optim_params_value(p, i)
        assert got == pytest.approx(float(args[name]), rel=1e-7), name
