"""Optimizers with Keras' names, signatures and defaults. The classes are made
from the library's optimizer table (include/mpcl/optim.h): one class per
kind, under its Keras class name (Adam, AdamW, SGD, RMSprop, ...), whose
arguments are the hyperparameters that kind declares, in Keras' order, with
the library's defaults. Each argument is checked when the optimizer is made,
by the library's declaration (TypeError for a wrong type, ValueError with the
library's message, which names the optimizer, the argument and its range).
None for an argument means its default (Keras' global_clipnorm=None: no
clipping)."""

import ctypes
import inspect
import numbers

from . import _lib, schedules


def _text(value):
    """A number as the library's plain decimal text (no '+' in the exponent)."""
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return format(float(value), ".17g").replace("e+", "e")


class Optimizer:
    """The base class; each kind's class sets `name` (the library's kind name)
    and `__signature__` (its declared hyperparameters)."""

    name = None

    def __init__(self, *args, **kwargs):
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{type(self).__name__}: {e} (it takes "
                            f"{', '.join(self.__signature__.parameters)})") from None
        bound.apply_defaults()
        kind = _kind(self.name)
        self._p = _lib.lib.mpcl_optim_default_params(kind)
        for i, (arg, value) in enumerate(bound.arguments.items()):
            # learning_rate may be a schedule (mpcl.optimizers.schedules), as
            # in Keras: the library's lr is then its peak.
            scheduled = isinstance(value, schedules.LearningRateSchedule)
            if value is not None:
                self._set(arg, _lib.lib.mpcl_optim_param_is_bool(kind, i),
                          value._peak() if scheduled else value)
            setattr(self, arg, value)

    def _set(self, arg, is_bool, value):
        if is_bool and not isinstance(value, bool):
            raise TypeError(f"{arg} must be True or False, not {value!r}")
        if not is_bool and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise TypeError(f"{arg} must be a number, not {type(value).__name__} {value!r}")
        text = ("true" if value else "false") if is_bool else _text(value)
        try:
            _lib.call(_lib.lib.mpcl_optim_params_set, None, ctypes.byref(self._p),
                      arg.encode(), text.encode())
        except _lib.MpclError as e:
            raise ValueError(e.message) from None

    def _params(self):
        """The library's mpcl_optim_params: a copy, checked when made."""
        return type(self._p).from_buffer_copy(self._p)

    def get_config(self):
        """Keras' config: every declared hyperparameter by name."""
        return {arg: getattr(self, arg) for arg in self.__signature__.parameters}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"

    def _lr_schedule(self):
        """The mpcl_lr_schedule of learning_rate (constant for a number)."""
        lr = self.learning_rate
        if isinstance(lr, schedules.LearningRateSchedule):
            return lr._schedule()
        return _lib.lib.mpcl_lr_schedule_default()


def _kind(name):
    kind = ctypes.c_int()
    if not _lib.lib.mpcl_optim_kind_parse(name.encode(), ctypes.byref(kind)):
        raise ValueError(f"this libmpcl has no optimizer {name}")
    return kind.value


def _default(kind, i):
    text = _lib.text(_lib.lib.mpcl_optim_param_default(kind, i))
    return text == "true" if _lib.lib.mpcl_optim_param_is_bool(kind, i) else float(text)


def _signature(kind):
    """learning_rate first (positional, as Keras), then the kind's own
    hyperparameters and global_clipnorm, with the library's defaults."""
    params = []
    for i in range(_lib.lib.mpcl_optim_param_count(kind)):
        name = _lib.text(_lib.lib.mpcl_optim_param_name(kind, i))
        # Keras' global_clipnorm=None: no clipping (the library's 0).
        default = None if name == "global_clipnorm" else _default(kind, i)
        params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=default))
    return inspect.Signature(params)


def _make_classes():
    classes = {}
    for kind in range(_lib.lib.mpcl_optim_kind_count()):
        name = _lib.text(_lib.lib.mpcl_optim_kind_name(kind))
        keras = _lib.text(_lib.lib.mpcl_optim_kind_keras_name(kind))
        sig = _signature(kind)
        doc = (f"Keras' {keras}: {keras}{sig} (the library's optimizer {name!r}; see "
               "include/mpcl/optim.h for its update).")
        classes[name] = type(keras, (Optimizer,), {"name": name, "__signature__": sig,
                                                   "__doc__": doc, "__module__": __name__})
    return classes


_CLASSES = _make_classes()
globals().update({cls.__name__: cls for cls in _CLASSES.values()})
__all__ = ["Optimizer", "get"] + [cls.__name__ for cls in _CLASSES.values()]


def from_params(p):
    """The optimizer of a library mpcl_optim_params (a checkpoint's)."""
    cls = _CLASSES[_lib.OPTIMIZERS[p.kind]]
    args = {}
    for i, arg in enumerate(cls.__signature__.parameters):
        value = _lib.lib.mpcl_optim_params_value(ctypes.byref(p), i)
        if _lib.lib.mpcl_optim_param_is_bool(p.kind, i):
            value = bool(value)
        args[arg] = None if arg == "global_clipnorm" and value == 0 else value
    return cls(**args)


def get(identifier):
    """An optimizer from an object or a name ("adam", "rmsprop", ...: the
    library's kinds, any case)."""
    from .mixed_precision import LossScaleOptimizer
    if isinstance(identifier, (Optimizer, LossScaleOptimizer)):
        return identifier
    if isinstance(identifier, str) and identifier.lower() in _CLASSES:
        return _CLASSES[identifier.lower()]()
    names = ", ".join(cls.__name__ for cls in _CLASSES.values())
    raise ValueError(f"unknown optimizer {identifier!r}; use {names}")
