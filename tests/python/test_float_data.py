"""fit, evaluate and predict on float data through the library's data sets
(mpcl_dataset_from_arrays): regression, binary classification, float16 x,
shuffle=False, the Keras CNN flow on Fashion-MNIST, and the refusals."""
import csv

import numpy as np
import pytest

import mpcl

L = mpcl.layers
W_TRUE = np.array([1.5, -2.0, 0.5, 3.0])
B_TRUE = 0.7


def regression_data(n=1024, dtype=np.float64, seed=0):
    """y = x @ W_TRUE + B_TRUE exactly (no noise), x standard normal."""
    x = np.random.default_rng(seed).normal(size=(n, 4)).astype(dtype)
    return x, x.astype(np.float64) @ W_TRUE + B_TRUE


def linear_model(optimizer=None, loss="mse", activation="linear", metrics=("mae",)):
    m = mpcl.Sequential([L.Dense(1, activation=activation, input_shape=(4,))])
    m.compile(optimizer=optimizer or mpcl.optimizers.Adam(0.05), loss=loss, metrics=list(metrics))
    return m


def test_regression_recovers_known_coefficients():
    x, y = regression_data()  # float64 x and y: converted to f32 by the library
    m = linear_model()
    h = m.fit(x, y, epochs=20, batch_size=32, validation_split=0.2, verbose=0)
    assert sorted(h.history) == ["loss", "mae", "val_loss", "val_mae"]
    kernel, bias = m.get_weights()
    # Untrained, the kernel is random (|w - W_TRUE| ~ 1); noiseless data
    # let Adam reach the coefficients to ~1e-6 (seen on PoCL).
    np.testing.assert_allclose(kernel[:, 0], W_TRUE, atol=1e-2)
    assert bias[0] == pytest.approx(B_TRUE, abs=1e-2)
    assert h.history["val_loss"][-1] < 1e-3
    # The validation rows are the last 205 (Keras' floor(1024 * 0.8) = 819
    # stay): evaluate() on them gives the trainer's last figures.
    got = m.evaluate(x[819:], y[819:], batch_size=32, return_dict=True)
    assert sorted(got) == ["loss", "mae"]
    assert got["mae"] == pytest.approx(h.history["val_mae"][-1], rel=1e-6)
    assert got["loss"] == pytest.approx(h.history["val_loss"][-1], rel=1e-6)
    p = m.predict(x[:16])
    assert p.shape == (16, 1) and p.dtype == np.float32
    np.testing.assert_allclose(p[:, 0], x[:16] @ kernel[:, 0] + bias[0], rtol=1e-5, atol=1e-5)


def test_binary_crossentropy_on_separable_data():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1024, 4)).astype(np.float32)
    t = (x @ np.array([1.0, -1.0, 0.5, 0.0]) > 0).astype(np.float32)[:, None]  # (n, 1)
    m = linear_model(loss=mpcl.losses.BinaryCrossentropy(), activation="sigmoid",
                     metrics=["accuracy"])
    h = m.fit(x[:768], t[:768], epochs=10, batch_size=32, validation_data=(x[768:], t[768:]),
              verbose=0)
    assert sorted(h.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    loss, acc = m.evaluate(x[768:], t[768:, 0])  # targets (n,) or (n, 1)
    assert acc > 0.95 and acc == pytest.approx(h.history["val_accuracy"][-1], rel=1e-9)
    # predict applies the sigmoid the device leaves to the host, as Keras outputs.
    kernel, bias = m.get_weights()
    p = m.predict(x[768:])
    np.testing.assert_allclose(p[:, 0], 1 / (1 + np.exp(-(x[768:] @ kernel[:, 0] + bias[0]))),
                               rtol=1e-5, atol=1e-6)
    assert np.mean((p[:, 0] > 0.5) == (t[768:, 0] > 0.5)) == pytest.approx(acc)


def test_float16_x_is_the_same_data_as_its_float32_values():
    x, y = regression_data(n=256, dtype=np.float16)
    a, b = linear_model(), linear_model()
    a.fit(x, y, epochs=2, batch_size=32, verbose=0)
    b.fit(x.astype(np.float32), y, epochs=2, batch_size=32, verbose=0)
    for u, v in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(a.predict(x), b.predict(x.astype(np.float32)))
    assert a.evaluate(x, y) == b.evaluate(x.astype(np.float32), y)


def test_shuffle_false_takes_the_rows_in_order():
    x, y = regression_data(n=64, dtype=np.float32)

    def run(shuffle, rows=slice(None)):
        m = linear_model(optimizer=mpcl.optimizers.SGD(0.01))
        m.set_weights([np.zeros((4, 1), np.float32), np.zeros(1, np.float32)])
        m.fit(x[rows], y[rows], epochs=2, batch_size=8, shuffle=shuffle, verbose=0)
        return np.concatenate([w.ravel() for w in m.get_weights()])

    a, b, c = run(False), run(False), run(True)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # SGD from zero, batches of 8 rows in order 0..63 each epoch, on the host:
    # the MSE gradient of a batch is 2/B * sum (pred - y) x.
    w, bias = np.zeros(4), 0.0
    for _ in range(2):
        for first in range(0, 64, 8):
            xb, yb = x[first:first + 8].astype(np.float64), y[first:first + 8]
            r = xb @ w + bias - yb
            w, bias = w - 0.01 * 2 / 8 * xb.T @ r, bias - 0.01 * 2 / 8 * r.sum()
    np.testing.assert_allclose(a, np.append(w, bias), rtol=1e-4, atol=1e-5)
    # The same rows in another order are another run.
    assert not np.array_equal(a, run(False, slice(None, None, -1)))


def test_keras_cnn_flow_on_fashion_mnist(data, tmp_path):
    x, y, xt, yt = data
    x = x[:1024].reshape(-1, 28, 28, 1).astype(np.float32) / 255
    xt = xt[:256].reshape(-1, 28, 28, 1).astype(np.float32) / 255
    y, yt = y[:1024].astype(np.int64), yt[:256]

    def build():
        m = mpcl.Sequential([L.Conv2D(8, 3, activation="relu", input_shape=(28, 28, 1)),
                             L.BatchNormalization(), L.MaxPooling2D(), L.Dropout(0.25),
                             L.Flatten(), L.Dense(10, activation="softmax")])
        m.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
        return m

    m = build()
    log = tmp_path / "log.csv"
    h = m.fit(x, y, epochs=2, batch_size=64, validation_split=0.125, verbose=0,
              callbacks=[mpcl.callbacks.CSVLogger(log)])
    assert sorted(h.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert [r["epoch"] for r in csv.DictReader(open(log))] == ["0", "1"]
    loss, acc = m.evaluate(xt, yt, batch_size=64)
    # Chance is 0.1; 2 epochs of 14 steps reach ~0.7 (seen on PoCL).
    assert acc > 0.4 and np.isfinite(loss)
    p = m.predict(xt, batch_size=64)
    assert p.shape == (256, 10) and p.dtype == np.float32
    np.testing.assert_allclose(p.sum(axis=1), 1, rtol=1e-5)  # softmax on the host
    assert np.mean(p.argmax(1) == yt) == pytest.approx(acc)
    m.save(tmp_path / "cnn.safetensors")
    loaded = mpcl.models.load_model(tmp_path / "cnn.safetensors")
    # The checkpoint keeps the softmax output: the same probabilities.
    np.testing.assert_array_equal(loaded.predict(xt, batch_size=64), p)
    np.testing.assert_array_equal(loaded.get_weights()[0], m.get_weights()[0])
    other = build()
    assert not np.array_equal(other.predict(xt, batch_size=64), p)
    other.set_weights(m.get_weights())
    for u, v in zip(other.get_weights(), m.get_weights()):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(other.predict(xt, batch_size=64), p)


def test_softmax_output_survives_save_and_load(tmp_path):
    x = np.random.default_rng(2).normal(size=(64, 4)).astype(np.float32)
    m = mpcl.Sequential([L.Dense(3, activation="softmax", input_shape=(4,))])
    m.compile(loss="sparse_categorical_crossentropy")
    m.fit(x, np.arange(64) % 3, epochs=1, verbose=0)
    m.save(tmp_path / "m.safetensors")
    loaded = mpcl.models.load_model(tmp_path / "m.safetensors")
    np.testing.assert_allclose(loaded.predict(x), m.predict(x), rtol=1e-6)
    assert loaded.layers[-1].get_config()["activation"] == "softmax"
    assert not loaded._compiled.loss.from_logits


def test_sigmoid_output_survives_save_and_load(tmp_path):
    x = np.random.default_rng(3).normal(size=(64, 4)).astype(np.float32)
    m = mpcl.Sequential([L.Dense(2, activation="sigmoid", input_shape=(4,))])
    m.compile(loss="binary_crossentropy")
    m.fit(x, (x[:, :2] > 0).astype(np.float32), epochs=1, verbose=0)
    p = m.predict(x)
    assert ((p > 0) & (p < 1)).all()  # sigmoid on the host, of the logits
    m.save(tmp_path / "m.safetensors")
    loaded = mpcl.models.load_model(tmp_path / "m.safetensors")
    np.testing.assert_allclose(loaded.predict(x), p, rtol=1e-6)


def test_bad_data_refused_with_the_librarys_messages():
    x, y = regression_data(n=32, dtype=np.float32)
    m = linear_model()
    bad = x.copy()
    bad[5, 2] = np.nan
    with pytest.raises(ValueError, match=r"row 5, column 2 is NaN"):
        m.fit(bad, y)
    bad[5, 2] = np.inf
    with pytest.raises(ValueError, match=r"^validation_data: .*'x': row 5, column 2 is inf"):
        m.fit(x, y, validation_data=(bad, y))
    with pytest.raises(ValueError, match=r"row 5, column 2 is inf"):
        m.predict(bad)
    with pytest.raises(ValueError, match=r"expected \(32, 1\)"):
        m.fit(x, np.zeros((32, 2)))
    with pytest.raises(ValueError, match=r"'y': row 3 is NaN"):
        m.evaluate(x, np.where(np.arange(32) == 3, np.nan, y))
    with pytest.raises(ValueError, match="shuffle='batch'"):
        m.fit(x, y, shuffle="batch")
    with pytest.raises(TypeError, match="int32"):
        m.fit(x.astype(np.int32), y)
    s = mpcl.Sequential([L.Dense(3, input_shape=(4,))])
    s.compile(loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(ValueError, match="float targets"):
        s.fit(x, y)
    with pytest.raises(ValueError, match="label 3 at row 1 is not below the class count 3"):
        s.fit(x, np.where(np.arange(32) == 1, 3, 0))
    with pytest.raises(ValueError, match="label -1 at row 0 is negative"):
        s.evaluate(x, np.full(32, -1))
