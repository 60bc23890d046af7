"""The seed's Keras flow, one short epoch in each policy, and what fit,
evaluate and predict must agree on."""
import numpy as np
import pytest

import mpcl
from conftest import seed_model


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16", "auto"])
def test_seed_flow_each_policy(data, policy):
    x, y, xt, yt = data
    mpcl.mixed_precision.set_global_policy(policy)
    model = seed_model()
    history = model.fit(x, y, epochs=1, batch_size=128, validation_data=(xt, yt), verbose=0)
    h = history.history
    assert sorted(h) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert all(len(v) == 1 for v in h.values())
    # Untrained, a 10-class model is right about 10% of the time with a loss
    # near ln 10 = 2.30; 16 steps of Adam on 2048 samples reach ~70% (seen
    # 0.70-0.72 in every policy on PoCL). 50% leaves room for rounding.
    assert h["val_accuracy"][0] > 0.5 and h["accuracy"][0] > 0.4
    assert 0 < h["val_loss"][0] < 1.5 and np.isfinite(h["loss"][0])
    # The trainer's evaluation (device gather of the bytes) and evaluate()
    # (host upload of byte/255 in the storage dtype) see the same numbers in
    # the same batches: the same figures, not just close ones.
    loss, acc = model.evaluate(xt, yt, batch_size=128)
    assert loss == h["val_loss"][0] and acc == h["val_accuracy"][0]
    p = model.predict(xt, batch_size=128)
    assert p.dtype == np.float32 and p.shape == (len(xt), 10)
    assert np.mean(p.argmax(1) == yt) == acc
    assert model.history is history and not history.stopped
    # The reports: one per report_every (50) steps and one at the epoch's end.
    assert history.reports[-1]["step"] == 16 and history.reports[-1]["epoch_end"]


def test_history_over_epochs_and_float_input(data):
    x, y, xt, yt = data
    a = seed_model().fit(x, y, epochs=2, batch_size=256, validation_data=(xt, yt), verbose=0,
                         report_every=3)
    # x / 255 in float32 is the same data as the bytes: the same run, bit for bit.
    b = seed_model().fit(x.astype("float32") / 255, y, epochs=2, batch_size=256,
                         validation_data=(xt.astype("float32") / 255, yt), verbose=0,
                         report_every=3)
    assert a.history == b.history
    assert len(a.history["loss"]) == 2 and a.history["loss"][1] < a.history["loss"][0]
    # The epoch's loss is the mean over its samples of the reports' means,
    # weighted by the samples each report covers (8 steps: reports after 3,
    # 6 and 8 steps of 256).
    r = [q for q in a.reports if q["epoch"] == 0]
    assert [q["epoch_step"] for q in r] == [3, 6, 8]
    w = np.array([3 * 256, 3 * 256, 2 * 256])
    assert a.history["loss"][0] == pytest.approx(np.dot(w, [q["loss"] for q in r]) / w.sum(),
                                                 rel=1e-12)


def test_fit_without_validation_and_again(data):
    x, y, xt, yt = data
    model = seed_model()
    before = model.predict(xt[:64])
    h1 = model.fit(x, y, epochs=1, batch_size=128, verbose=0)
    assert sorted(h1.history) == ["accuracy", "loss"]
    # A second fit continues from the trained weights (Keras' behaviour):
    # its first epoch starts below the first fit's.
    h2 = model.fit(x, y, epochs=1, batch_size=64, verbose=0)
    assert h2.history["loss"][0] < h1.history["loss"][0]
    assert not np.array_equal(before, model.predict(xt[:64]))


def test_softmax_output_predicts_probabilities(data):
    x, y, xt, yt = data
    model = mpcl.Sequential([mpcl.layers.Dense(32, activation="tanh", input_shape=(784,)),
                             mpcl.layers.Dense(10, activation="softmax")])
    model.compile(optimizer="sgd", loss=mpcl.losses.SparseCategoricalCrossentropy(),
                  metrics=["accuracy"])
    model.fit(x, y, epochs=1, batch_size=128, verbose=0)
    p = model.predict(xt)
    assert np.allclose(p.sum(1), 1, atol=1e-5) and (p >= 0).all()


def test_loss_scale_optimizer_explicit(data):
    x, y, xt, yt = data
    # float32 with an explicit fixed loss scale: the scale stays as given.
    model = mpcl.Sequential([mpcl.layers.Dense(64, activation="relu", input_shape=(784,)),
                             mpcl.layers.Dense(10)])
    opt = mpcl.mixed_precision.LossScaleOptimizer(mpcl.optimizers.Adam(), dynamic=False,
                                                  initial_scale=256)
    model.compile(optimizer=opt, loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True))
    h = model.fit(x, y, epochs=1, batch_size=128, verbose=0, report_every=4)
    assert {r["loss_scale"] for r in h.reports} == {256.0}
    # Under mixed_float16 without a wrapper the scale is dynamic from 2^15 (as
    # Keras wraps it); a first scale of 2^30 overflows f16 gradients, so steps
    # are skipped and the scale halves.
    mpcl.mixed_precision.set_global_policy("mixed_float16")
    model = seed_model()
    h = model.fit(x, y, epochs=1, batch_size=128, verbose=0, report_every=4)
    assert h.reports[0]["loss_scale"] == 32768.0
    model = mpcl.Sequential([mpcl.layers.Dense(64, activation="relu", input_shape=(784,)),
                             mpcl.layers.Dense(10)])
    opt = mpcl.mixed_precision.LossScaleOptimizer(mpcl.optimizers.Adam(), initial_scale=2.0 ** 30)
    model.compile(optimizer=opt, loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True))
    h = model.fit(x, y, epochs=1, batch_size=128, verbose=0, report_every=4)
    assert h.reports[-1]["skipped"] > 0 and h.reports[-1]["loss_scale"] < 2.0 ** 30


def test_summary_and_devices(capsys):
    model = seed_model()
    model.summary()
    out = capsys.readouterr().out
    assert "101,770" in out  # 784*128+128 + 128*10+10
    assert "float32 -> float32" in out
    d = mpcl.devices()
    assert d and {"id", "name", "fp16_math", "plans", "verdict"} <= set(d[0])
    assert set(d[0]["plans"]) == {"auto", "float32", "mixed_float16", "mixed_bfloat16"}
