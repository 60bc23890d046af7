"""The package and mpcl-train are one training loop and one checkpoint
format: the same run gives the same weights, a CLI checkpoint predicts in
Python as the CLI evaluates it, and each resumes the other's file."""
import json

import numpy as np
import pytest

import mpcl
from conftest import read_safetensors, run_cli, seed_model


def test_same_run_same_weights(data, train_exe, tmp_path):
    x, y, xt, yt = data
    cli = tmp_path / "cli.safetensors"
    p = run_cli(train_exe, "--precision", "float32", "--epochs", "1", "--save", str(cli), "--json")
    summary = json.loads(p.stdout)
    model = seed_model()
    h = model.fit(x, y, epochs=1, batch_size=128, validation_data=(xt, yt), verbose=0)
    py = tmp_path / "py.safetensors"
    model.save(py)
    a, ma = read_safetensors(cli)
    b, mb = read_safetensors(py)
    assert sorted(a) == sorted(b)
    for name in a:
        assert np.array_equal(a[name], b[name]), name
    for key in ("layers", "loss", "rng_counter", "step", "optimizer_step", "epoch", "batch", "seed", "train_samples",
                "policy_resolved", "loss_scale_mode"):
        assert ma[key] == mb[key], key
    # The CLI prints 6 significant digits.
    assert f"{h.history['val_loss'][0]:.6g}" == f"{summary['test_loss']:.6g}"
    assert f"{h.history['val_accuracy'][0]:.6g}" == f"{summary['test_accuracy']:.6g}"


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_predictions_of_a_cli_checkpoint(data, train_exe, tmp_path, policy):
    x, y, xt, yt = data
    ck = tmp_path / "run.safetensors"
    p = run_cli(train_exe, "--precision", policy, "--epochs", "1", "--hidden", "64", "--save",
                str(ck), "--json")
    summary = json.loads(p.stdout)
    model = mpcl.models.load_model(ck)
    assert model.policy == policy
    loss, acc = model.evaluate(xt, yt, batch_size=128)
    assert f"{loss:.6g}" == f"{summary['test_loss']:.6g}"
    assert f"{acc:.6g}" == f"{summary['test_accuracy']:.6g}"
    logits = model.predict(xt)
    # An independent reference: the checkpoint's weights (read without
    # libmpcl) applied in float64 to byte/255. float32 differs from it by
    # accumulation order only (784-term sums of ~1e-2 terms: ~1e-5); f16
    # storage rounds inputs, hidden activations and logits to 11 bits
    # (relative 2^-11 each, a few 1e-3 on logits of magnitude ~10).
    w, _ = read_safetensors(ck)
    h = np.maximum(xt / 255.0 @ w["dense_0.kernel"] + w["dense_0.bias"], 0)
    ref = h @ w["dense_1.kernel"] + w["dense_1.bias"]
    tol = 1e-4 if policy == "float32" else 5e-2
    assert np.max(np.abs(logits - ref)) <= tol * max(1.0, np.max(np.abs(ref)))
    assert np.mean(logits.argmax(1) == yt) == acc
    if policy == "float32":
        assert np.array_equal(logits.argmax(1), ref.argmax(1))


def test_python_checkpoint_resumes_in_the_cli(data, train_exe, tmp_path):
    x, y, xt, yt = data
    model = seed_model()
    model.fit(x, y, epochs=1, batch_size=128, verbose=0)
    ck = tmp_path / "py.safetensors"
    model.save(ck)
    p = run_cli(train_exe, "--precision", "float32", "--epochs", "2", "--resume", str(ck),
                "--save", str(tmp_path / "resumed.safetensors"), "--json")
    assert json.loads(p.stdout)["steps"] == 32
    # And the CLI's straight two-epoch run ends with the same weights.
    run_cli(train_exe, "--precision", "float32", "--epochs", "2", "--save",
            str(tmp_path / "straight.safetensors"))
    a, _ = read_safetensors(tmp_path / "resumed.safetensors")
    b, _ = read_safetensors(tmp_path / "straight.safetensors")
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_load_model_keeps_training_state(data, train_exe, tmp_path):
    x, y, xt, yt = data
    ck = tmp_path / "run.safetensors"
    run_cli(train_exe, "--precision", "mixed_float16", "--epochs", "1", "--save", str(ck))
    model = mpcl.models.load_model(ck)
    # Saved again unchanged: the same file.
    model.save(tmp_path / "copy.safetensors")
    assert (tmp_path / "copy.safetensors").read_bytes() == ck.read_bytes()
    h = model.fit(x, y, epochs=1, batch_size=128, verbose=0)
    # It continues: a fresh model's first epoch averages ~1.55, its second ~0.84.
    assert h.history["loss"][0] < 1.1
    model.save(tmp_path / "after.safetensors")
    _, meta = read_safetensors(tmp_path / "after.safetensors")
    # Adam's step counter went on from the checkpoint's (at most 16 updates there).
    assert int(meta["optimizer_step"]) > 16 and meta["loss_scale_mode"] == "dynamic"
