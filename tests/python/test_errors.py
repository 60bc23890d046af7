"""Errors: library failures as MpclError with the status name and the
library's message; bad arrays refused in Python before any device work."""
import json

import pytest

import mpcl
from conftest import run_python, seed_model


def test_library_errors_carry_status_and_message(tmp_path):
    bad = tmp_path / "not.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(mpcl.MpclError) as e:
        mpcl.models.load_model(bad)
    assert e.value.status == "MPCL_ERR_FORMAT" and str(bad) in e.value.message
    with pytest.raises(mpcl.MpclError) as e:
        mpcl.models.load_model(tmp_path / "missing.safetensors")
    assert e.value.status == "MPCL_ERR_IO" and "missing.safetensors" in e.value.message
    assert str(e.value).startswith("MPCL_ERR_IO: ")
    with pytest.raises(mpcl.MpclError) as e:
        mpcl.datasets.load_idx(str(tmp_path), "train")
    assert e.value.status == "MPCL_ERR_IO" and "train-images-idx3-ubyte" in e.value.message


def test_checkpoint_of_another_model_is_refused(data, tmp_path):
    x, y, xt, yt = data
    model = seed_model(hidden=16)
    model.fit(x[:256], y[:256], epochs=1, batch_size=128, verbose=0)
    model.save(tmp_path / "m.safetensors")
    raw = (tmp_path / "m.safetensors").read_bytes()
    # The same file with its model metadata claiming other widths.
    n = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + n])
    assert "dense units=16 " in head["__metadata__"]["layers"]
    head["__metadata__"]["layers"] = head["__metadata__"]["layers"].replace("units=16 ",
                                                                            "units=32 ")
    text = json.dumps(head, separators=(",", ":")).encode()
    text += b" " * (n - len(text))
    assert len(text) == n
    (tmp_path / "other.safetensors").write_bytes(raw[:8] + text + raw[8 + n:])
    with pytest.raises(mpcl.MpclError) as e:
        mpcl.models.load_model(tmp_path / "other.safetensors")
    assert e.value.status == "MPCL_ERR_FORMAT" and "dense_0.kernel" in e.value.message


def test_no_such_device():
    p = run_python("import mpcl, numpy as np\n"
                   "m = mpcl.Sequential([mpcl.layers.Dense(8, input_shape=(4,)), "
                   "mpcl.layers.Dense(2)])\n"
                   "m.compile(loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
                   "try:\n"
                   "    m.predict(np.zeros((1, 4), np.float32))\n"
                   "except mpcl.MpclError as e:\n"
                   "    print(e.status)\n"
                   "    print(e.message)\n",
                   env={"MPCL_DEVICE": "no-such-device-anywhere"})
    assert p.returncode == 0, p.stderr
    status, message = p.stdout.split("\n", 1)
    assert status == "MPCL_ERR_NO_DEVICE" and "no-such-device-anywhere" in message


# Every refusal runs in a process whose device selector matches nothing: had
# any of them reached the library's device code, it would fail with
# MpclError (MPCL_ERR_NO_DEVICE) instead of the TypeError or ValueError.
REFUSALS = r'''
import numpy as np, mpcl
m = mpcl.Sequential([mpcl.layers.Dense(16, activation="relu", input_shape=(784,)),
                     mpcl.layers.Dense(10)])
m.compile(optimizer="adam", loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True),
          metrics=["accuracy"])
x = np.zeros((8, 784), np.uint8); y = np.zeros(8, np.uint8)
cases = {
  "x nan": lambda: m.fit(np.where(np.arange(784) == 5, np.nan, x.astype(np.float64)), y),
  "x list": lambda: m.fit(x.tolist(), y),
  "x int32": lambda: m.predict(x.astype(np.int32)),
  "x 3-D": lambda: m.fit(x.reshape(8, 28, 28), y),
  "x width": lambda: m.evaluate(np.zeros((8, 783), np.uint8), y),
  "x empty": lambda: m.predict(np.zeros((0, 784), np.float32)),
  "y float": lambda: m.fit(x, y.astype(np.float32)),
  "y length": lambda: m.fit(x, y[:7]),
  "y 2-D": lambda: m.fit(x, np.zeros((8, 2), np.int64)),
  "y label 10": lambda: m.fit(x, np.full(8, 10)),
  "y label -1": lambda: m.evaluate(x, np.full(8, -1)),
  "y bool": lambda: m.fit(x, y.astype(bool)),
  "val y label": lambda: m.fit(x, y, validation_data=(x, np.full(8, 12))),
  "val x inf": lambda: m.fit(x, y, validation_data=(np.full((8, 784), np.inf, np.float16), y)),
  "shuffle": lambda: m.fit(x, y, shuffle="batch"),
}
for name, f in cases.items():
    try:
        f()
        print(name, "ACCEPTED")
    except (TypeError, ValueError) as e:
        print(name, "|", type(e).__name__, "|", e)
    except Exception as e:
        print(name, "OTHER", type(e).__name__, e)
'''


def test_bad_arrays_refused_before_the_device():
    p = run_python(REFUSALS, env={"MPCL_DEVICE": "no-such-device-anywhere"})
    assert p.returncode == 0, p.stderr
    lines = dict(l.split(" | ", 1) for l in p.stdout.strip().splitlines() if " | " in l)
    assert len(lines) == 15, p.stdout
    expect = {"x nan": ("ValueError", "row 0, column 5 is NaN"),
              "x list": ("TypeError", "numpy array"),
              "x int32": ("TypeError", "int32"), "x 3-D": ("ValueError", "(8, 28, 28)"),
              "x width": ("ValueError", "(8, 783)"), "x empty": ("ValueError", "no samples"),
              "y float": ("ValueError", "float targets"), "y length": ("ValueError", "has 7"),
              "y 2-D": ("ValueError", "2 columns"),
              "y label 10": ("ValueError", "label 10 at row 0 is not below the class count 10"),
              "y label -1": ("ValueError", "label -1 at row 0 is negative"),
              "y bool": ("TypeError", "bool"),
              "val y label": ("ValueError", "'y': label 12 at row 0"),
              "val x inf": ("ValueError", "'x': row 0, column 0 is inf"),
              "shuffle": ("ValueError", "shuffle='batch'")}
    for name, (kind, words) in expect.items():
        got_kind, msg = lines[name].split(" | ", 1)
        assert got_kind == kind and words in msg, (name, lines[name])
        assert msg.startswith("validation_data: ") == name.startswith("val"), lines[name]


def test_model_definition_errors():
    with pytest.raises(ValueError):
        mpcl.mixed_precision.set_global_policy("mixed_float8")
    with pytest.raises(ValueError, match="disagree"):
        seed_model().compile(loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=False))
    # Layers are explicit: hidden layers need not share an activation.
    m = mpcl.Sequential([mpcl.layers.Dense(8, activation="relu", input_shape=(4,)),
                         mpcl.layers.Dense(8, activation="tanh"), mpcl.layers.Dense(2)])
    m.compile(loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert [l.get_config()["activation"] for l in m.layers] == ["relu", "tanh", "linear"]
    m = mpcl.Sequential([mpcl.layers.Dense(2, activation="softmax", input_shape=(4,))])
    with pytest.raises(ValueError, match="mse does not read a softmax output"):
        m.compile(loss="mse")
    with pytest.raises(ValueError, match="unknown loss 'hinge'"):
        m.compile(loss="hinge")
    with pytest.raises(ValueError, match="save"):
        seed_model().save("/tmp/never-written.safetensors")
