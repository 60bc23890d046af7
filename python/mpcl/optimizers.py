"""Optimizers with Keras' names and defaults; each becomes a row of the
library's optimizer table (mpcl_optim_params). Hyperparameters are checked
when the optimizer is made, under the library's rules
(mpcl_optim_params_check), with errors that name the argument."""

from . import schedules
from ._lib import check_real


class Optimizer:
    kind = None

    def __init__(self, learning_rate, global_clipnorm=None):
        # A number, or a schedule (mpcl.optimizers.schedules) as in Keras.
        self.learning_rate = learning_rate if isinstance(
            learning_rate, schedules.LearningRateSchedule) else check_real(
                "learning_rate", learning_rate, lo=0)
        self.global_clipnorm = None if global_clipnorm is None else check_real(
            "global_clipnorm", global_clipnorm, lo=0)

    def _params(self):
        from . import _lib
        p = _lib.lib.mpcl_optim_default_params(self.kind)
        lr = self.learning_rate
        p.lr = lr._peak() if isinstance(lr, schedules.LearningRateSchedule) else lr
        if self.global_clipnorm is not None:
            p.clip_norm = self.global_clipnorm
        self._fill(p)
        return p

    def _fill(self, p):
        pass

    def _lr_schedule(self):
        """The mpcl_lr_schedule of learning_rate (constant for a number)."""
        from . import _lib
        lr = self.learning_rate
        if isinstance(lr, schedules.LearningRateSchedule):
            return lr._schedule()
        return _lib.lib.mpcl_lr_schedule_default()


class Adam(Optimizer):
    kind = 1

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 global_clipnorm=None):
        super().__init__(learning_rate, global_clipnorm)
        self.beta_1 = check_real("beta_1", beta_1, lo=0, hi=1, hi_open=True)
        self.beta_2 = check_real("beta_2", beta_2, lo=0, hi=1, hi_open=True)
        self.epsilon = check_real("epsilon", epsilon, lo=0, lo_open=True)

    def _fill(self, p):
        p.beta1, p.beta2, p.eps = self.beta_1, self.beta_2, self.epsilon


class AdamW(Adam):
    kind = 2

    def __init__(self, learning_rate=1e-3, weight_decay=0.004, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-7, global_clipnorm=None):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, global_clipnorm)
        self.weight_decay = check_real("weight_decay", weight_decay, lo=0)

    def _fill(self, p):
        super()._fill(p)
        p.weight_decay = self.weight_decay


class SGD(Optimizer):
    kind = 0

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, global_clipnorm=None):
        super().__init__(learning_rate, global_clipnorm)
        self.momentum = check_real("momentum", momentum, lo=0, hi=1)
        if not isinstance(nesterov, bool):
            raise TypeError(f"nesterov must be True or False, not {nesterov!r}")
        self.nesterov = nesterov

    def _fill(self, p):
        p.momentum, p.nesterov = self.momentum, int(self.nesterov)


def get(identifier):
    """An optimizer from an object or a name ("adam", "adamw", "sgd")."""
    from .mixed_precision import LossScaleOptimizer
    if isinstance(identifier, (Optimizer, LossScaleOptimizer)):
        return identifier
    names = {"adam": Adam, "adamw": AdamW, "sgd": SGD}
    if isinstance(identifier, str) and identifier.lower() in names:
        return names[identifier.lower()]()
    raise ValueError(f"unknown optimizer {identifier!r}; use Adam, AdamW or SGD")
