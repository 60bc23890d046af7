"""Optimizers with Keras' names and defaults; each becomes a row of the
library's optimizer table (mpcl_optim_params)."""


class Optimizer:
    kind = None

    def __init__(self, learning_rate, global_clipnorm=None):
        self.learning_rate = float(learning_rate)
        self.global_clipnorm = global_clipnorm

    def _params(self):
        from . import _lib
        p = _lib.lib.mpcl_optim_default_params(self.kind)
        p.lr = self.learning_rate
        if self.global_clipnorm is not None:
            p.clip_norm = float(self.global_clipnorm)
        self._fill(p)
        return p

    def _fill(self, p):
        pass


class Adam(Optimizer):
    kind = 1

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 global_clipnorm=None):
        super().__init__(learning_rate, global_clipnorm)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)

    def _fill(self, p):
        p.beta1, p.beta2, p.eps = self.beta_1, self.beta_2, self.epsilon


class AdamW(Adam):
    kind = 2

    def __init__(self, learning_rate=1e-3, weight_decay=0.004, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-7, global_clipnorm=None):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, global_clipnorm)
        self.weight_decay = float(weight_decay)

    def _fill(self, p):
        super()._fill(p)
        p.weight_decay = self.weight_decay


class SGD(Optimizer):
    kind = 0

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, global_clipnorm=None):
        super().__init__(learning_rate, global_clipnorm)
        self.momentum, self.nesterov = float(momentum), bool(nesterov)

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
