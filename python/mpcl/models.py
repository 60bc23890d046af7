"""load_model: a model from a safetensors checkpoint of mpcl-train or save()."""

import ctypes
import os

from . import _lib, layers, losses, mixed_precision, optimizers
from ._lib import call, lib
from .model import Sequential


class _Checkpoint:
    """A checkpoint the library has read and checked (mpcl_checkpoint_read),
    kept by the model it loaded until that model trains: save() writes the
    model's state with its position."""

    def __init__(self, path):
        h = _lib.P()
        call(lib.mpcl_checkpoint_read, os.fsencode(path), ctypes.byref(h))
        self.h = h.value
        # Copies: a view into the C struct would outlive a dropped handle.
        self.params = _lib.ModelParams.from_buffer_copy(
            lib.mpcl_checkpoint_model_params(self.h).contents)
        self.position = _lib.CheckpointPosition.from_buffer_copy(
            lib.mpcl_checkpoint_position_of(self.h).contents)

    def __del__(self):
        if getattr(self, "h", None):
            lib.mpcl_checkpoint_destroy(self.h)
            self.h = None


def _optimizer(mp):
    """The Python optimizer (and loss-scale wrapper) of the checkpoint's
    params, for the model's compile()."""
    opt = optimizers.from_params(mp.optim)
    if mp.loss_scaling == _lib.LOSS_SCALING_ON:
        opt = mixed_precision.LossScaleOptimizer(
            opt, dynamic=mp.loss_scale.mode == _lib.LOSS_SCALE_DYNAMIC,
            initial_scale=mp.loss_scale.initial_scale)
    return opt


def _layers(mp):
    """The layers of a checkpoint's params: its explicit layers, or those of
    the MLP its widths describe (a 0.1.0 file), as the library lists them."""
    specs = (_lib.LayerSpec * _lib.MAX_LAYERS)()
    n = ctypes.c_size_t()
    call(lib.mpcl_model_params_layers, None, ctypes.byref(mp), specs, ctypes.byref(n))
    shape = (ctypes.c_size_t * _lib.MAX_INPUT_RANK)()
    rank = ctypes.c_size_t()
    lib.mpcl_model_params_input_shape(ctypes.byref(mp), shape, ctypes.byref(rank))
    return [layers.from_spec(specs[i], input_shape=tuple(shape[:rank.value]) if i == 0 else None)
            for i in range(n.value)]


def load_model(path):
    """The model a checkpoint holds, compiled as it was trained (optimizer,
    its state and step, loss scaling and its state, policy), ready for
    predict, evaluate, save or more fit. The file is read and checked by
    libmpcl's checkpoint reader, the checks mpcl-train --resume makes
    (MpclError MPCL_ERR_FORMAT naming the key or tensor, MPCL_ERR_IO for the
    file)."""
    path = os.fspath(path)
    ck = _Checkpoint(path)
    mp = ck.params
    ls = _layers(mp)
    saved = mixed_precision.global_policy()
    mixed_precision.set_global_policy(_lib.text(lib.mpcl_policy_name(mp.policy)))
    try:
        model = Sequential(ls, seed=mp.seed)
    finally:
        mixed_precision.set_global_policy(saved)
    loss = losses.get(_lib.LOSSES[mp.loss])
    if loss.output_activation:
        # From logits unless the last layer declares the loss's activation
        # (a checkpoint before output activations were recorded: linear).
        loss.from_logits = _lib.activation_or_none(
            lib.mpcl_model_output_activation(ctypes.byref(mp))) is None
    model.compile(optimizer=_optimizer(mp), loss=loss,
                  metrics=[_lib.text(lib.mpcl_loss_metric_name(mp.loss))])
    # The model is the checkpoint's: its params as the reader gives them
    # (loss scaling off for a file without a scaler, whatever the policy;
    # an MLP of 0.1.0 as its widths).
    model._compiled.params = mp
    m = model._device_model(ck.position.batch)
    call(lib.mpcl_checkpoint_apply, ck.h, m, ctx=_lib.context())
    model._checkpoint = ck
    return model
