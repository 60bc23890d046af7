"""load_model: a model from a safetensors checkpoint of mpcl-train or save()."""

import ctypes
import os

import numpy as np

from . import _lib, layers, losses, mixed_precision, optimizers
from ._lib import MpclError, call, lib
from .model import Sequential

_SLOTS = {"": _lib.SLOT_MASTER, ".m": _lib.SLOT_M, ".v": _lib.SLOT_V}


def _optimizer(meta):
    kind, lr = meta("optimizer"), float(meta("lr"))
    clip = float(meta("clip_norm")) or None
    if kind == "sgd":
        return optimizers.SGD(lr, float(meta("momentum")), meta("nesterov") == "1", clip)
    args = (float(meta("beta1")), float(meta("beta2")), float(meta("eps")))
    if kind == "adamw":
        return optimizers.AdamW(lr, float(meta("weight_decay")), *args, global_clipnorm=clip)
    if kind == "adam":
        return optimizers.Adam(lr, *args, global_clipnorm=clip)
    raise MpclError("MPCL_ERR_FORMAT", f"unknown optimizer {kind!r} in the checkpoint")


def load_model(path):
    """The model a checkpoint holds, compiled as it was trained (optimizer,
    its state and step, loss scaling and its state, policy), ready for
    predict, evaluate, save or more fit. The file is read by libmpcl's
    safetensors reader; every tensor must be F32 of the model's shape, and
    the file may hold no other (MpclError MPCL_ERR_FORMAT otherwise)."""
    path = os.fspath(path)
    f = _lib.P()
    call(lib.mpcl_safetensors_read, os.fsencode(path), ctypes.byref(f))
    try:
        def meta(key):
            v = lib.mpcl_safetensors_meta_get(f, key.encode())
            if v is None:
                raise MpclError("MPCL_ERR_FORMAT", f"checkpoint {path}: metadata has no {key!r}")
            return _lib.text(v)

        if meta("format") != "mpcl-checkpoint" or meta("format_version") != "1":
            raise MpclError("MPCL_ERR_FORMAT", f"{path}: format {meta('format')!r} version "
                            f"{meta('format_version')!r}, not mpcl-checkpoint 1")
        widths = [int(w) for w in meta("model").split(",")]
        act = meta("activation")
        ls = [layers.Dense(widths[1], activation=act, input_shape=(widths[0],))]
        ls += [layers.Dense(w, activation=act) for w in widths[2:-1]] + [layers.Dense(widths[-1])]
        saved = mixed_precision.global_policy()
        mixed_precision.set_global_policy(meta("policy"))
        try:
            model = Sequential(ls, seed=int(meta("seed")))
        finally:
            mixed_precision.set_global_policy(saved)
        opt = _optimizer(meta)
        mode = meta("loss_scale_mode")
        if mode != "none":
            opt = mixed_precision.LossScaleOptimizer(opt, dynamic=mode == "dynamic",
                                                     initial_scale=float(meta("loss_scale")))
        model.compile(optimizer=opt, loss=losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        m = model._device_model(int(meta("batch")))
        _write_tensors(f, m, path)
        ctx = _lib.context()
        call(lib.mpcl_model_write_step, m, int(meta("optimizer_step")), ctx=ctx)
        scaler = lib.mpcl_model_loss_scale(m)
        if scaler and mode != "none":
            st = _lib.LossScaleState(float(meta("loss_scale")), int(meta("loss_scale_good_steps")),
                                     int(meta("loss_scale_skipped")), 0, 0)
            call(lib.mpcl_loss_scale_write_state, ctx, scaler, ctypes.byref(st), ctx=ctx)
        model._loaded_from = os.path.abspath(path)
        return model
    except ValueError as e:  # a number or a name in the metadata that does not parse
        raise MpclError("MPCL_ERR_FORMAT", f"checkpoint {path}: {e}") from e
    finally:
        lib.mpcl_safetensors_destroy(f)


def _write_tensors(f, m, path):
    """Every tensor the model keeps (walking its parameter table, as the C
    loader does) from the file into the model."""
    ctx = _lib.context()
    wanted = set()
    for i in range(lib.mpcl_model_param_count(m)):
        info = lib.mpcl_model_param(m, i).contents
        for suffix, slot in _SLOTS.items():
            if not lib.mpcl_model_has_slot(m, slot):
                continue
            name = _lib.text(info.name) + suffix
            wanted.add(name)
            t = lib.mpcl_safetensors_find(f, name.encode())
            if not t:
                raise MpclError("MPCL_ERR_FORMAT", f"checkpoint {path} has no tensor {name}")
            t = t.contents
            shape = tuple(t.shape[:t.ndim])
            want = tuple(info.shape[:info.rank])
            if _lib.text(lib.mpcl_st_dtype_name(t.dtype)) != "F32" or shape != want:
                raise MpclError("MPCL_ERR_FORMAT", f"checkpoint {path}: tensor {name} is "
                                f"{_lib.text(lib.mpcl_st_dtype_name(t.dtype))} {list(shape)}, "
                                f"the model's is F32 {list(want)}")
            buf = np.frombuffer(ctypes.string_at(t.data, t.bytes), np.float32).copy()
            call(lib.mpcl_model_write_param, m, i, slot, buf.ctypes.data, buf.size, ctx=ctx)
    for j in range(lib.mpcl_safetensors_count(f)):
        name = _lib.text(lib.mpcl_safetensors_tensor(f, j).contents.name)
        if name not in wanted:
            raise MpclError("MPCL_ERR_FORMAT",
                            f"checkpoint {path} holds tensor {name}, which the model does not have")
