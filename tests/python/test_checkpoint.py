"""Checkpoints through the library's one reader and one writer: load_model
refuses every file mpcl-train --resume refuses, with the same message;
save() of a loaded model replaces only a regular file, atomically; fit()
and the optimizers check their arguments before anything reaches ctypes."""
import json
import os
import signal
import stat
import struct
import subprocess

import numpy as np
import pytest

import mpcl
from conftest import FASHION, read_safetensors, run_cli, seed_model


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    """A float32 checkpoint of the CLI's run shape (hidden 16, batch 128, the
    conftest's training samples), saved by fit() after 16 steps; and the
    saved model's evaluate() of the test samples."""
    x, y, xt, yt = data
    model = seed_model(hidden=16)
    model.fit(x, y, epochs=1, batch_size=128, verbose=0)
    path = tmp_path_factory.mktemp("ck") / "good.safetensors"
    model.save(path)
    return path, model.evaluate(xt, yt, batch_size=128)


@pytest.fixture
def ck(trained):
    return trained[0]


def rewrite(src, dst, meta=None, poke=None):
    """A copy of src with metadata values replaced and/or one f32 element
    (tensor, index, value) changed; the header is rebuilt around the same
    data."""
    raw = src.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])
    head["__metadata__"].update(meta or {})
    if poke:
        name, index, value = poke
        a = head[name]["data_offsets"][0] + 4 * index
        data[a:a + 4] = struct.pack("<f", value)
    text = json.dumps(head).encode()
    dst.write_bytes(struct.pack("<Q", len(text)) + text + bytes(data))


BAD = [
    ({"lr": "-1"}, None, "lr -1"),
    ({"beta1": "1.5"}, None, "beta1 1.5"),
    ({"eps": "0"}, None, "eps 0"),
    ({"step": "+1"}, None, 'step = "+1"'),
    ({"optimizer_step": "0x10"}, None, 'optimizer_step = "0x10"'),
    ({"optimizer_step": "4294967296"}, None, "optimizer_step"),  # wrapped through ctypes before
    ({"loss_scale_mode": "bogus"}, None, 'loss_scale_mode "bogus"'),
    ({"loss_scale_mode": "dynamic", "loss_scale": "1e30"}, None, "loss_scale 1e+30 is outside"),
    ({"epoch_step": "3"}, None, "inconsistent"),
    ({"loss_scale_skipped": "1"}, None, "counters that cannot belong to one run"),
    (None, ("dense_0.kernel", 3, float("nan")), "tensor dense_0.kernel holds nan at index 3"),
    (None, ("dense_1.bias.v", 0, -0.25), "dense_1.bias.v holds -0.25 at index 0"),
]


@pytest.mark.parametrize("meta,poke,says", BAD, ids=[b[2] for b in BAD])
def test_load_model_refuses_what_resume_refuses(ck, train_exe, tmp_path, meta, poke, says):
    bad = tmp_path / "bad.safetensors"
    rewrite(ck, bad, meta, poke)
    with pytest.raises(mpcl.MpclError) as e:
        mpcl.models.load_model(bad)
    assert e.value.status == "MPCL_ERR_FORMAT" and says in e.value.message, e.value.message
    assert str(bad) in e.value.message
    p = run_cli(train_exe, "--hidden", "16", "--batch", "128", "--precision", "float32",
                "--epochs", "2", "--resume", str(bad), check=False)
    assert p.returncode == 1 and e.value.message in p.stderr, (e.value.message, p.stderr)


def test_save_of_a_loaded_model_replaces_a_regular_file_only(ck, tmp_path):
    model = mpcl.models.load_model(ck)
    # Onto a regular file: replaced whole, same bytes as the file it came
    # from, no temp file left.
    out = tmp_path / "out.safetensors"
    out.write_bytes(b"earlier")
    model.save(out)
    assert out.read_bytes() == ck.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["out.safetensors"]

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link_null = tmp_path / "null-link"
    link_null.symlink_to("/dev/null")
    link_file = tmp_path / "file-link"
    link_file.symlink_to(out)
    before = out.read_bytes()
    # A FIFO opened for writing would block: the alarm turns that into a failure.
    old = signal.signal(signal.SIGALRM, lambda *a: pytest.fail("save() blocked on a FIFO"))
    signal.alarm(30)
    try:
        for target in (fifo, link_null, link_file, "/dev/null"):
            with pytest.raises(mpcl.MpclError) as e:
                model.save(target)
            assert e.value.status == "MPCL_ERR_IO" and str(target) in e.value.message, \
                e.value.message
            assert ".tmp" not in e.value.message and "mkstemp" not in e.value.message
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert os.path.islink(link_null) and os.readlink(link_null) == "/dev/null"
    assert os.path.islink(link_file) and out.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["fifo", "file-link", "null-link", "out.safetensors"]


def test_loaded_model_evaluates_as_saved(trained, data):
    _, _, xt, yt = data
    path, figures = trained
    model = mpcl.models.load_model(path)
    assert model.evaluate(xt, yt, batch_size=128) == figures


def test_position_mirror_matches_the_file(ck):
    """_lib.CheckpointPosition mirrors the C struct field for field: each
    field reads back what the metadata says."""
    pos = mpcl.models._Checkpoint(ck).position
    _, meta = read_safetensors(ck)
    got = {k: getattr(pos, k) for k in ("step", "epoch", "epoch_step", "optimizer_step", "seed",
                                        "batch", "train_samples")}
    assert got == {k: int(meta[k]) for k in got} and got["step"] == 16 and got["seed"] == 42
    assert got["batch"] == 128 and got["train_samples"] == 2048
    assert pos.scaled == (meta["loss_scale_mode"] != "none")
    assert pos.loss_scale.scale == float(meta["loss_scale"])
    assert pos.loss_scale.skipped_steps == int(meta["loss_scale_skipped"])


FIT_ARGS = [
    ({"epochs": -1}, ValueError, "epochs"),
    ({"epochs": 0}, ValueError, "epochs"),
    ({"epochs": 2 ** 40}, ValueError, "epochs"),
    ({"epochs": 1.5}, TypeError, "epochs"),
    ({"epochs": "2"}, TypeError, "epochs"),
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"batch_size": -8}, ValueError, "batch_size"),
    ({"batch_size": "8"}, TypeError, "batch_size"),
    ({"batch_size": 8.0}, TypeError, "batch_size"),
    ({"batch_size": 2 ** 64 + 8}, ValueError, "batch_size"),
    ({"report_every": 0}, ValueError, "report_every"),
    ({"report_every": 2 ** 32}, ValueError, "report_every"),
    ({"verbose": 7}, ValueError, "verbose"),
    ({"verbose": "loud"}, TypeError, "verbose"),
    ({"validation_data": (np.zeros((8, 784), np.uint8),)}, ValueError, "validation_data"),
]


@pytest.fixture
def no_hang():
    """A fit() that took epochs=-1 would train for ever: fail it instead."""
    old = signal.signal(signal.SIGALRM, lambda *a: pytest.fail("still running after 60 s"))
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("kwargs,kind,name", FIT_ARGS, ids=[f"{a[2]}-{i}" for i, a in enumerate(FIT_ARGS)])
def test_fit_checks_its_arguments(no_hang, kwargs, kind, name):
    model = seed_model(hidden=8)
    x, y = np.zeros((8, 784), np.uint8), np.zeros(8, np.uint8)
    with pytest.raises(kind, match=name):
        model.fit(x, y, **kwargs)
    # Nothing ran: no trainer, no history.
    assert model._trainer is None and model.history is None


def test_evaluate_and_predict_check_batch_size():
    model = seed_model(hidden=8)
    x, y = np.zeros((8, 784), np.uint8), np.zeros(8, np.uint8)
    with pytest.raises(ValueError, match="batch_size"):
        model.evaluate(x, y, batch_size=0)
    with pytest.raises(TypeError, match="batch_size"):
        model.predict(x, batch_size=2.5)
    with pytest.raises(ValueError, match="seed"):
        mpcl.Sequential(seed=-1)


OPTIMIZERS = [
    (lambda: mpcl.optimizers.Adam(learning_rate=-1), ValueError, "learning_rate"),
    (lambda: mpcl.optimizers.Adam(learning_rate=float("nan")), ValueError, "learning_rate"),
    (lambda: mpcl.optimizers.Adam(learning_rate=1e39), ValueError, "learning_rate"),
    (lambda: mpcl.optimizers.Adam(learning_rate="fast"), TypeError, "learning_rate"),
    (lambda: mpcl.optimizers.Adam(beta_1=1.0), ValueError, "beta_1"),
    (lambda: mpcl.optimizers.Adam(beta_2=-0.1), ValueError, "beta_2"),
    (lambda: mpcl.optimizers.Adam(epsilon=0), ValueError, "epsilon"),
    (lambda: mpcl.optimizers.AdamW(weight_decay=-1), ValueError, "weight_decay"),
    (lambda: mpcl.optimizers.SGD(momentum=1.5), ValueError, "momentum"),
    (lambda: mpcl.optimizers.SGD(nesterov="yes"), TypeError, "nesterov"),
    (lambda: mpcl.optimizers.SGD(global_clipnorm=-1), ValueError, "global_clipnorm"),
    (lambda: mpcl.mixed_precision.LossScaleOptimizer(mpcl.optimizers.Adam(), initial_scale=-1),
     ValueError, "initial_scale"),
    (lambda: mpcl.mixed_precision.LossScaleOptimizer(mpcl.optimizers.Adam(), initial_scale=0),
     ValueError, "initial_scale"),
    (lambda: mpcl.mixed_precision.LossScaleOptimizer(mpcl.optimizers.Adam(),
                                                     initial_scale=float("inf")),
     ValueError, "initial_scale"),
    (lambda: mpcl.mixed_precision.LossScaleOptimizer(mpcl.optimizers.Adam(),
                                                     dynamic_growth_steps=0),
     ValueError, "dynamic_growth_steps"),
    (lambda: mpcl.mixed_precision.LossScaleOptimizer(mpcl.optimizers.Adam(),
                                                     dynamic_growth_steps=2.5),
     TypeError, "dynamic_growth_steps"),
    (lambda: mpcl.mixed_precision.LossScaleOptimizer(42), TypeError, "inner_optimizer"),
    (lambda: mpcl.mixed_precision.LossScaleOptimizer(mpcl.optimizers.Adam(), dynamic="no"),
     TypeError, "dynamic"),
]


@pytest.mark.parametrize("make,kind,name", OPTIMIZERS, ids=[o[2] for o in OPTIMIZERS])
def test_optimizers_check_at_construction(make, kind, name):
    with pytest.raises(kind, match=name):
        make()


def test_load_model_of_a_model_without_hidden_layers(data, tmp_path):
    """Layers are explicit now: one Dense layer is a model like any other,
    saved and loaded as it was trained."""
    x, y, xt, yt = data
    model = mpcl.Sequential([mpcl.layers.Dense(10, input_shape=(784,))])
    model.compile(loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x[:256], y[:256], epochs=1, batch_size=128, verbose=0)
    model.save(tmp_path / "flat.safetensors")
    loaded = mpcl.models.load_model(tmp_path / "flat.safetensors")
    assert [type(l).__name__ for l in loaded.layers] == ["Dense"]
    np.testing.assert_array_equal(loaded.predict(xt[:32]), model.predict(xt[:32]))


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_v0_1_0_checkpoint_loads(policy, data):
    """A 0.1.0 file (an MLP as widths, tests/fixtures) loads as its Dense
    layers and evaluates."""
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures",
                        f"v0.1.0-{policy}.safetensors")
    model = mpcl.models.load_model(path)
    assert [(type(l).__name__, l.get_config()["units"], l.get_config()["activation"])
            for l in model.layers] == [("Dense", 8, "relu"), ("Dense", 10, "linear")]
    assert model.layers[0].input_shape == (784,)
    weights, _ = read_safetensors(path)
    np.testing.assert_array_equal(model.get_weights()[0], weights["dense_0.kernel"])
    x, y, xt, yt = data
    loss, acc = model.evaluate(xt, yt)
    assert np.isfinite(loss) and 0 <= acc <= 1


def test_cli_checkpoint_of_a_keras_softmax_output(train_exe, data, tmp_path):
    """bench/models/cnn.json ends in Dense(10, softmax): mpcl-train trains it
    on logits, records the softmax, resumes from its file, and load_model
    predicts probabilities."""
    model = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "models", "cnn.json")
    ck, more = tmp_path / "cnn.safetensors", tmp_path / "more.safetensors"
    small = ["--data", FASHION, "--train-limit", "128", "--test-limit", "64", "--batch", "64",
             "--model", model, "--quiet"]

    def cli(*args):
        p = subprocess.run([train_exe, *small, *args], capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr
        return p.stdout

    cli("--epochs", "1", "--save", str(ck))
    _, meta = read_safetensors(ck)
    assert meta["layers"].endswith("; dense units=10 activation=softmax use_bias=true")
    doc = json.loads(cli("--epochs", "2", "--resume", str(ck), "--json", "--save", str(more)))
    assert doc["steps"] == 4
    loaded = mpcl.models.load_model(more)
    assert loaded.layers[-1].get_config()["activation"] == "softmax"
    x = data[2][:32].reshape(-1, 28, 28, 1).astype(np.float32) / 255
    p = loaded.predict(x)
    assert ((p > 0) & (p < 1)).all()
    np.testing.assert_allclose(p.sum(axis=1), 1, rtol=1e-5)
