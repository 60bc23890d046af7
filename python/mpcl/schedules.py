"""Learning-rate schedules with Keras' names, as mpcl.optimizers.schedules:
give one as an optimizer's learning_rate. A schedule is data for the
library's trainer (mpcl_lr_schedule, include/mpcl/lr_schedule.h), which sets
the lr before every step from the global step count: every batch of fit(),
a step the mixed_float16 loss scaler skips included, counted from 0 at the
start of each fit() call (Keras counts optimizer.iterations on across
calls)."""

import ctypes

from ._lib import check_int, check_real

# The library's largest step count: every whole number up to it is a double.
_MAX_STEPS = 2 ** 53


class LearningRateSchedule:
    """A schedule: calling it with a step gives that step's lr, as the
    trainer computes it (float32)."""

    def _peak(self):
        """The optimizer's lr (mpcl_optim_params.lr): the schedule's base."""
        raise NotImplementedError

    def _schedule(self):
        """The mpcl_lr_schedule of this schedule."""
        raise NotImplementedError

    @staticmethod
    def _of_kind(name):
        """A default mpcl_lr_schedule of the library's kind `name`."""
        from . import _lib
        s = _lib.lib.mpcl_lr_schedule_default()
        kind = ctypes.c_int()
        if not _lib.lib.mpcl_lr_schedule_kind_parse(name.encode(), ctypes.byref(kind)):
            raise RuntimeError(f"this libmpcl has no {name} schedule")
        s.kind = kind.value
        return s

    def __call__(self, step):
        from . import _lib
        step = check_int("step", step, 0, 2 ** 64 - 1)
        s = self._schedule()
        return float(_lib.lib.mpcl_lr_at(ctypes.byref(s), self._peak(), step))


class CosineDecay(LearningRateSchedule):
    """keras.optimizers.schedules.CosineDecay: with warmup_target, a linear
    warm-up from initial_learning_rate to warmup_target over warmup_steps,
    then a cosine from warmup_target down to alpha * warmup_target over
    decay_steps; without it (None), the cosine from initial_learning_rate
    and no warm-up (warmup_steps is then not read, as in Keras). After the
    decay the lr stays at its floor."""

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name="CosineDecay",
                 warmup_target=None, warmup_steps=0):
        self.initial_learning_rate = check_real("initial_learning_rate", initial_learning_rate,
                                                lo=0)
        self.decay_steps = check_int("decay_steps", decay_steps, 1, _MAX_STEPS)
        self.alpha = check_real("alpha", alpha, lo=0, hi=1)
        self.name = name
        self.warmup_target = None if warmup_target is None else check_real(
            "warmup_target", warmup_target, lo=0)
        self.warmup_steps = check_int("warmup_steps", warmup_steps, 0, _MAX_STEPS)

    def _peak(self):
        return self.initial_learning_rate if self.warmup_target is None else self.warmup_target

    def _schedule(self):
        s = self._of_kind("cosine")
        s.decay_steps = self.decay_steps
        s.alpha = self.alpha
        if self.warmup_target is not None:
            s.warmup_steps = self.warmup_steps
            s.warmup_from = self.initial_learning_rate
        return s

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "alpha": self.alpha, "name": self.name,
                "warmup_target": self.warmup_target, "warmup_steps": self.warmup_steps}
