"""mpcl.optimizers.schedules.CosineDecay: Keras' arguments and values, its
refusals naming the argument, and a fit whose every step takes the
schedule's lr."""
import math

import numpy as np
import pytest

import mpcl
from mpcl.optimizers import schedules

from conftest import seed_model


def keras_cosine(initial, decay_steps, alpha, warmup_target, warmup_steps, step):
    """Keras 3's CosineDecay.__call__, restated in float64."""
    if warmup_target is None:
        s = min(step, decay_steps)
        return initial * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * s / decay_steps)) + alpha)
    s = min(step, decay_steps + warmup_steps)
    if s < warmup_steps:
        return (warmup_target - initial) * (s / warmup_steps) + initial
    frac = (s - warmup_steps) / decay_steps
    return warmup_target * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * frac)) + alpha)


@pytest.mark.parametrize("args", [
    dict(initial_learning_rate=0.1, decay_steps=100),
    dict(initial_learning_rate=0.1, decay_steps=100, alpha=0.2),
    dict(initial_learning_rate=0.0, decay_steps=90, alpha=0.1, warmup_target=3e-3,
         warmup_steps=10),
    dict(initial_learning_rate=1e-4, decay_steps=5, warmup_target=1e-3, warmup_steps=3),
    # Keras reads warmup_steps only with a warmup_target.
    dict(initial_learning_rate=0.1, decay_steps=100, warmup_steps=50),
])
def test_values_are_keras(args):
    sched = schedules.CosineDecay(**args)
    want_args = [args.get(k, d) for k, d in (("initial_learning_rate", None),
                                             ("decay_steps", None), ("alpha", 0.0),
                                             ("warmup_target", None), ("warmup_steps", 0))]
    for step in (0, 1, 2, 5, 9, 10, 11, 50, 99, 100, 101, 1000):
        want = keras_cosine(*want_args, step)
        assert sched(step) == pytest.approx(want, rel=1e-6, abs=1e-12), (args, step)
    assert sched.get_config()["decay_steps"] == args["decay_steps"]


@pytest.mark.parametrize("args, name", [
    (dict(initial_learning_rate=0.1, decay_steps=0), "decay_steps"),
    (dict(initial_learning_rate=0.1, decay_steps=-5), "decay_steps"),
    (dict(initial_learning_rate=0.1, decay_steps=10.5), "decay_steps"),
    (dict(initial_learning_rate=0.1, decay_steps=10, alpha=1.5), "alpha"),
    (dict(initial_learning_rate=0.1, decay_steps=10, alpha=-0.1), "alpha"),
    (dict(initial_learning_rate=-0.1, decay_steps=10), "initial_learning_rate"),
    (dict(initial_learning_rate=0.1, decay_steps=10, warmup_target=float("nan")),
     "warmup_target"),
    (dict(initial_learning_rate=0.1, decay_steps=10, warmup_target=1.0, warmup_steps=-1),
     "warmup_steps"),
])
def test_bad_arguments_are_named(args, name):
    with pytest.raises((ValueError, TypeError), match=name):
        schedules.CosineDecay(**args)


def test_optimizers_take_a_schedule():
    sched = schedules.CosineDecay(0.0, 90, alpha=0.1, warmup_target=3e-3, warmup_steps=10)
    for opt in (mpcl.optimizers.Adam(sched), mpcl.optimizers.AdamW(learning_rate=sched),
                mpcl.optimizers.SGD(learning_rate=sched)):
        assert opt.learning_rate is sched
        assert opt._params().lr == pytest.approx(3e-3)
    with pytest.raises(TypeError, match="learning_rate"):
        mpcl.optimizers.Adam(learning_rate="0.1")


def test_fit_follows_the_schedule(data):
    x, y, _, _ = data
    x, y = x[:512], y[:512]  # 8 steps of 64 per epoch, 2 epochs: 16 steps
    sched = schedules.CosineDecay(0.0, 12, alpha=0.1, warmup_target=5e-3, warmup_steps=4)
    model = seed_model(16)
    model.compile(optimizer=mpcl.optimizers.Adam(sched),
                  loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True))
    h = model.fit(x, y, epochs=2, batch_size=64, verbose=0, report_every=1)
    lrs = [(r["step"], r["lr"]) for r in h.reports]
    assert [s for s, _ in lrs] == list(range(1, 17))
    for step, lr in lrs:  # a report's lr is its step's: step - 1 counted from 0
        want = keras_cosine(0.0, 12, 0.1, 5e-3, 4, step - 1)
        assert lr == pytest.approx(want, rel=1e-6, abs=1e-12), (step, lr, want)
    assert lrs[0][1] == 0.0 and lrs[4][1] == pytest.approx(5e-3)
    assert np.isfinite(h.history["loss"]).all()
