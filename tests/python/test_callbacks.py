"""fit() with callbacks, validation_split and Keras' losses."""
import csv

import numpy as np
import pytest

import mpcl
from conftest import seed_model

cb = mpcl.callbacks


def recorder(events):
    return cb.LambdaCallback(
        on_train_begin=lambda logs=None: events.append("train_begin"),
        on_epoch_begin=lambda epoch, logs=None: events.append(("epoch_begin", epoch)),
        on_batch_end=lambda batch, logs=None: events.append(("batch_end", batch)),
        on_epoch_end=lambda epoch, logs=None: events.append(("epoch_end", epoch, dict(logs))),
        on_train_end=lambda logs=None: events.append("train_end"))


def test_callbacks_fire_in_keras_order(data):
    x, y, xt, yt = data
    events = []
    h = seed_model(hidden=16).fit(x[:512], y[:512], epochs=3, batch_size=128,
                                  validation_data=(xt, yt), verbose=0, report_every=2,
                                  callbacks=[recorder(events)])
    # 4 steps an epoch, a report after steps 2 and 4.
    epoch = lambda e: [("epoch_begin", e), ("batch_end", 1), ("batch_end", 3)]
    kinds = [e if isinstance(e, str) else e[:2] for e in events]
    assert kinds == (["train_begin"] + epoch(0) + [("epoch_end", 0)] + epoch(1) +
                     [("epoch_end", 1)] + epoch(2) + [("epoch_end", 2), "train_end"])
    logs = [e[2] for e in events if e[0] == "epoch_end"]
    assert all(sorted(l) == ["accuracy", "loss", "val_accuracy", "val_loss"] for l in logs)
    assert [l["val_loss"] for l in logs] == h.history["val_loss"]
    assert [l["loss"] for l in logs] == h.history["loss"]
    assert not h.stopped


def test_stop_training_ends_after_the_epoch(data):
    x, y, _, _ = data
    model = seed_model(hidden=16)

    def stop(epoch, logs=None):
        if epoch == 1:
            model.stop_training = True

    h = model.fit(x[:512], y[:512], epochs=5, batch_size=128, verbose=0,
                  callbacks=[cb.LambdaCallback(on_epoch_end=stop)])
    assert h.epoch == [0, 1] and len(h.history["loss"]) == 2 and h.stopped
    # The trainer stopped at the epoch's end: 2 epochs of 4 steps.
    assert h.reports[-1]["step"] == 8 and h.reports[-1]["epoch_end"]


def test_early_stopping_stops_and_restores(data):
    x, y, xt, yt = data
    model = seed_model(hidden=16)
    seen = []
    # An impossible min_delta: no epoch after the first improves.
    es = cb.EarlyStopping(monitor="val_loss", patience=2, min_delta=1e9,
                          restore_best_weights=True)
    keep = cb.LambdaCallback(on_epoch_end=lambda e, logs=None: seen.append(model.get_weights()))
    h = model.fit(x[:512], y[:512], epochs=10, batch_size=128, validation_data=(xt, yt),
                  verbose=0, callbacks=[keep, es])
    # Epoch 0 sets the best; epochs 1 and 2 do not improve: Keras' rule
    # (wait >= patience) stops after epoch 2 with patience 2.
    assert len(h.history["val_loss"]) == 3 and es.stopped_epoch == 2 and h.stopped
    for a, b in zip(model.get_weights(), seen[0]):
        np.testing.assert_array_equal(a, b)


def test_early_stopping_names_a_missing_monitor(data):
    x, y, _, _ = data
    with pytest.raises(KeyError, match="val_loss"):
        seed_model(hidden=8).fit(x[:256], y[:256], epochs=2, batch_size=128, verbose=0,
                                 callbacks=[cb.EarlyStopping()])


def test_csv_logger_writes_a_row_per_epoch(data, tmp_path):
    x, y, xt, yt = data
    path = tmp_path / "log.csv"
    h = seed_model(hidden=16).fit(x[:512], y[:512], epochs=2, batch_size=128,
                                  validation_data=(xt, yt), verbose=0,
                                  callbacks=[cb.CSVLogger(path)])
    rows = list(csv.reader(path.open()))
    assert rows[0] == ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"]
    assert [int(r[0]) for r in rows[1:]] == [0, 1]
    assert [float(r[2]) for r in rows[1:]] == pytest.approx(h.history["loss"], rel=1e-12)
    # append=True adds rows under the same header.
    seed_model(hidden=16).fit(x[:512], y[:512], epochs=1, batch_size=128,
                              validation_data=(xt, yt), verbose=0,
                              callbacks=[cb.CSVLogger(path, append=True)])
    rows = list(csv.reader(path.open()))
    assert len(rows) == 4 and rows[3][0] == "0"


def test_model_checkpoint_saves_each_epoch(data, tmp_path):
    x, y, xt, yt = data
    model = seed_model(hidden=16)
    model.fit(x[:512], y[:512], epochs=2, batch_size=128, validation_data=(xt, yt), verbose=0,
              callbacks=[cb.ModelCheckpoint(str(tmp_path / "ck-{epoch}.safetensors"))])
    first = mpcl.models.load_model(tmp_path / "ck-1.safetensors")
    last = mpcl.models.load_model(tmp_path / "ck-2.safetensors")
    assert first._checkpoint.position.epoch == 1 and last._checkpoint.position.epoch == 2
    for a, b in zip(last.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_validation_split_takes_the_last_rows(data):
    x, y, _, _ = data
    a = seed_model(hidden=16).fit(x[:640], y[:640], epochs=1, batch_size=128, verbose=0,
                                  validation_split=0.2)
    b = seed_model(hidden=16).fit(x[:512], y[:512], epochs=1, batch_size=128, verbose=0,
                                  validation_data=(x[512:640], y[512:640]))
    assert a.history == b.history
    with pytest.raises(ValueError, match="not both"):
        seed_model(hidden=8).fit(x[:64], y[:64], validation_split=0.5,
                                 validation_data=(x[:8], y[:8]))


def test_keras_loss_names():
    for name, want in (("binary_crossentropy", "binary_crossentropy"), ("mse", "mse"),
                       ("mean_squared_error", "mse"),
                       ("sparse_categorical_crossentropy", "sparse_categorical_crossentropy")):
        m = mpcl.Sequential([mpcl.layers.Dense(2, input_shape=(4,))])
        loss = mpcl.losses.get(name)
        if loss.output_activation:
            loss.from_logits = True
        m.compile(loss=loss)
        assert mpcl._lib.LOSSES[m._compiled.params.loss] == want


def test_binary_crossentropy_with_a_sigmoid_output_evaluates():
    m = mpcl.Sequential([mpcl.layers.Dense(1, activation="sigmoid", input_shape=(4,))])
    m.compile(loss=mpcl.losses.BinaryCrossentropy(), metrics=["accuracy"])
    kernel, bias = np.array([[1], [-1], [2], [0]], np.float32), np.array([0.5], np.float32)
    m.set_weights([kernel, bias])
    x = np.array([[255, 0, 0, 0], [0, 255, 0, 0]], np.uint8)
    t = np.array([1.0, 1.0], np.float32)
    z = (x / 255.0) @ kernel[:, 0] + bias[0]
    np.testing.assert_allclose(m.predict(x)[:, 0], 1 / (1 + np.exp(-z)), rtol=1e-6)
    loss, acc = m.evaluate(x, t)
    want = np.mean(np.maximum(z, 0) - z * t + np.log1p(np.exp(-np.abs(z))))
    assert loss == pytest.approx(want, rel=1e-6) and acc == 0.5
