"""load_model: a model from a safetensors checkpoint of mpcl-train or save(),
or from a Hugging Face GPT-2 folder; GPT, the GPT-2 model."""

import ctypes
import os

from . import _lib, layers, losses, mixed_precision, optimizers
from ._lib import call, lib
from .gpt import GPT, gpt2_folder
from .model import Sequential

__all__ = ["GPT", "load_model"]


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


def _gpt_config(mp):
    """The GPT-2 config of a checkpoint's params, or None when they are not
    a GPT."""
    c = _lib.Gpt2Config()
    return c if lib.mpcl_gpt_config_of(ctypes.byref(mp), ctypes.byref(c)) == 0 else None


def load_model(path, context=None):
    """The model a checkpoint holds, compiled as it was trained (optimizer,
    its state and step, loss scaling and its state, policy), ready for
    predict, evaluate, save or more fit: a GPT when its layers are one,
    else a Sequential. The file is read and checked by libmpcl's checkpoint
    reader, the checks mpcl-train --resume makes (MpclError MPCL_ERR_FORMAT
    naming the key or tensor, MPCL_ERR_IO for the file).

    A folder is a Hugging Face GPT-2 folder (config.json and
    model.safetensors): a GPT of its config on windows of context tokens
    (its n_positions when None), with its weights, compiled with
    GPT.compile()'s default optimizer, in the global policy."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return gpt2_folder(path, context)
    if context is not None:
        raise ValueError("load_model: context= applies to a GPT-2 folder; a checkpoint keeps "
                         "the context it was trained on")
    ck = _Checkpoint(path)
    mp = ck.params
    gpt = _gpt_config(mp)
    saved = mixed_precision.global_policy()
    mixed_precision.set_global_policy(_lib.text(lib.mpcl_policy_name(mp.policy)))
    try:
        if gpt:
            model = GPT(gpt.n_layer, gpt.n_head, gpt.n_embd, mp.input_shape[0], gpt.vocab_size,
                        gpt.n_positions, mp.seed, gpt.layer_norm_epsilon)
        else:
            model = Sequential(_layers(mp), seed=mp.seed)
    finally:
        mixed_precision.set_global_policy(saved)
    if gpt:
        model.compile(optimizer=_optimizer(mp))
    else:
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
