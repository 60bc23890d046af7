"""The precision policy and loss scaling, named as in keras.mixed_precision.

The global policy is read when a model is created (Sequential(...)), as Keras
reads it when its layers are. Besides Keras' "float32", "mixed_float16" and
"mixed_bfloat16", "auto" asks the library for the best plan the device runs
correctly (see the README's precision plan)."""

from . import _lib

_policy = "float32"  # Keras' default


def set_global_policy(policy):
    global _policy
    name = getattr(policy, "name", policy)
    _lib.parse_enum(_lib.lib.mpcl_policy_parse, name, "policy", _lib.POLICIES)
    _policy = name


def global_policy():
    return _policy


class LossScaleOptimizer:
    """Keras' wrapper: dynamic loss scaling (initial_scale 2^15, doubling after
    dynamic_growth_steps finite steps, halving and skipping the step on a
    non-finite gradient) or, with dynamic=False, a fixed initial_scale. A
    model compiled with it scales the loss in every policy; without it,
    mixed_float16 scales dynamically as Keras' compile wraps it."""

    def __init__(self, inner_optimizer, dynamic=True, initial_scale=None,
                 dynamic_growth_steps=None):
        from . import optimizers
        if isinstance(inner_optimizer, str):
            inner_optimizer = optimizers.get(inner_optimizer)
        if not isinstance(inner_optimizer, optimizers.Optimizer):
            raise TypeError("LossScaleOptimizer: inner_optimizer must be an mpcl.optimizers "
                            f"optimizer, not {type(inner_optimizer).__name__}")
        if not isinstance(dynamic, bool):
            raise TypeError(f"LossScaleOptimizer: dynamic must be True or False, not {dynamic!r}")
        if not dynamic and initial_scale is None:
            raise ValueError("LossScaleOptimizer: dynamic=False needs an initial_scale")
        self.inner_optimizer = inner_optimizer
        self.dynamic = dynamic
        self.initial_scale = 2.0 ** 15 if initial_scale is None else _lib.check_real(
            "LossScaleOptimizer: initial_scale", initial_scale, lo=0, lo_open=True)
        self.dynamic_growth_steps = 2000 if dynamic_growth_steps is None else _lib.check_int(
            "LossScaleOptimizer: dynamic_growth_steps", dynamic_growth_steps, 1, 2 ** 32 - 1)

    def _loss_scale_params(self):
        p = _lib.lib.mpcl_loss_scale_default_params()
        p.mode = _lib.LOSS_SCALE_DYNAMIC if self.dynamic else _lib.LOSS_SCALE_FIXED
        p.initial_scale = self.initial_scale
        p.growth_interval = self.dynamic_growth_steps
        # As mpcl-train does: an explicit scale widens the bounds to take it in.
        p.min_scale = min(p.min_scale, p.initial_scale)
        p.max_scale = max(p.max_scale, p.initial_scale)
        return p
