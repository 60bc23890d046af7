"""mpcl.models.GPT: fit on a token stream, predict and evaluate checked
against numpy and PyTorch's numbers, Hugging Face folders both ways,
generate, and bad input."""
import json
import math
import os
import re
import subprocess

import numpy as np
import pytest

import mpcl
from conftest import read_safetensors

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
V = 16


def tiny(context=8, seed=42):
    model = mpcl.models.GPT(n_layer=1, n_head=2, n_embd=16, context=context, vocab_size=V,
                            seed=seed)
    model.compile(optimizer=mpcl.optimizers.AdamW(learning_rate=1e-2, beta_2=0.95,
                                                  weight_decay=0.0))
    return model


def pattern(n=3000):
    """A stream that repeats 0 1 2 ... 6: after one token the next is known."""
    return (np.arange(n) % 7).astype(np.int64)


WINDOWS = np.stack([pattern()[s:s + 9] for s in (0, 3, 5)])  # of context + 1 tokens


def cross_entropy(logits, targets):
    """The mean of -log softmax(logits)[target] over every position, in
    float64."""
    z = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(logp, targets[..., None], axis=-1).mean()


@pytest.fixture(scope="module")
def trained():
    mpcl.mixed_precision.set_global_policy("float32")
    model = tiny()
    model.untrained_loss = model.evaluate(WINDOWS)
    history = model.fit(pattern(), steps=120, batch_size=16, eval_every=40, verbose=0)
    return model, history


def test_fit_learns_a_repeating_pattern(trained):
    model, history = trained
    h = history.history
    assert history.steps == [40, 80, 120]
    assert len(h["loss"]) == len(h["eval_loss"]) == 3
    assert all(math.isfinite(v) for v in h["loss"] + h["eval_loss"])
    # A model that knows nothing scores about log(16) = 2.77; the pattern
    # is known from one token on.
    assert model.untrained_loss > 2.0
    assert h["eval_loss"][-1] < h["eval_loss"][0] < model.untrained_loss
    assert h["eval_loss"][-1] < 0.3
    assert model.evaluate(WINDOWS) < 0.3


def test_verbose_lines(capsys):
    """One line per evaluation: the step, the two losses of History, and
    tokens/s as mpcl-train counts them (the report's windows/s times the
    context; a window is a sample, whatever the batch and micro-batches)."""
    model = tiny()
    history = model.fit(pattern(), steps=10, batch_size=4, eval_every=5, eval_batches=2,
                        grad_accum=3, verbose=1)
    lines = capsys.readouterr().out.splitlines()
    ends = [r for r in history.reports if r["epoch_end"]]
    assert len(lines) == len(ends) == 2
    for line, r, loss, eval_loss in zip(lines, ends, history.history["loss"],
                                        history.history["eval_loss"]):
        m = re.fullmatch(r"step (\d+)/10 - loss: ([\d.]+) - eval_loss: ([\d.]+) - "
                         r"([\d,]+) tokens/s", line)
        assert m, line
        assert int(m[1]) == r["step"]
        assert float(m[2]) == pytest.approx(loss, abs=1e-4)
        assert float(m[3]) == pytest.approx(eval_loss, abs=1e-4)
        assert int(m[4].replace(",", "")) == pytest.approx(r["samples_per_s"] * 8, abs=1)


def test_callbacks_run_at_each_evaluation():
    """Callbacks see each evaluation as an epoch's end (with the History's
    losses); pausing the trainer for them changes nothing (windows are keyed
    by the step: the same losses bit for bit as a run without callbacks);
    stop_training ends the run at that evaluation."""
    seen = []
    record = mpcl.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: seen.append((epoch, dict(logs))))
    args = dict(steps=10, batch_size=4, eval_every=4, eval_batches=2, verbose=0)
    with_cbs = tiny().fit(pattern(), callbacks=[record], **args)
    plain = tiny().fit(pattern(), **args)
    assert with_cbs.steps == plain.steps == [4, 8, 10]
    assert with_cbs.history == plain.history
    assert [e for e, _ in seen] == [0, 1, 2]
    assert [logs["eval_loss"] for _, logs in seen] == with_cbs.history["eval_loss"]
    assert [logs["loss"] for _, logs in seen] == with_cbs.history["loss"]
    assert not with_cbs.stopped

    model = tiny()
    stop = mpcl.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: setattr(model, "stop_training", True))
    history = model.fit(pattern(), callbacks=[stop], **args)
    assert history.steps == [4] and history.stopped
    with pytest.raises(TypeError, match="not an mpcl.callbacks.Callback"):
        model.fit(pattern(), callbacks=[print], **args)


def test_predict_shape_and_evaluate_against_numpy(trained):
    model, _ = trained
    rng = np.random.default_rng(7)
    for time in (8, 5, 1):  # the context, shorter (padded), one position
        windows = rng.integers(0, V, (3, time + 1))
        logits = model.predict(windows[:, :-1])
        assert logits.shape == (3, time, V) and logits.dtype == np.float32
        assert model.evaluate(windows) == pytest.approx(
            cross_entropy(logits, windows[:, 1:]), rel=1e-5)
    # Causal: a prefix's logits are the longer input's first positions.
    x = rng.integers(0, V, (2, 8))
    np.testing.assert_allclose(model.predict(x[:, :3]), model.predict(x)[:, :3], rtol=1e-5,
                               atol=1e-6)
    # Batches of batch_size give what one batch gives.
    x = rng.integers(0, V, (5, 8))
    np.testing.assert_allclose(model.predict(x, batch_size=2), model.predict(x), rtol=1e-5,
                               atol=1e-6)


def test_the_head_fused_with_the_loss_trains_as_the_whole_logits(monkeypatch):
    """MPCL_LM_HEAD=chunked: the head takes the loss a chunk of rows at a
    time and keeps no logits in training. fit follows the run with the
    whole logits (the same seed and data: only d_wte's summation order
    differs), and predict and evaluate still agree with numpy."""
    mpcl.mixed_precision.set_global_policy("float32")
    histories = {}
    for mode in ("whole", "chunked"):
        monkeypatch.setenv("MPCL_LM_HEAD", mode)
        model = tiny()
        histories[mode] = model.fit(pattern(), steps=60, batch_size=16, eval_every=30,
                                    verbose=0).history
        windows = np.random.default_rng(3).integers(0, V, (3, 9))
        logits = model.predict(windows[:, :-1])
        assert model.evaluate(windows) == pytest.approx(
            cross_entropy(logits, windows[:, 1:]), rel=1e-5)
    for key in ("loss", "eval_loss"):
        assert histories["chunked"][key] == pytest.approx(histories["whole"][key], rel=1e-4)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy):
    """The global policy when the model is made, as for Sequential: the
    16-bit storage learns the pattern, and evaluate still matches the
    logits it predicts."""
    mpcl.mixed_precision.set_global_policy(policy)
    model = tiny()
    assert model.policy == policy
    history = model.fit(pattern(), steps=120, batch_size=16, eval_every=60, verbose=0)
    assert history.history["eval_loss"][-1] < 0.3
    windows = np.random.default_rng(1).integers(0, V, (3, 9))
    logits = model.predict(windows[:, :-1])
    assert model.evaluate(windows) == pytest.approx(cross_entropy(logits, windows[:, 1:]),
                                                    rel=1e-3)


def test_shorter_windows_run_on_the_plan_the_model_runs(monkeypatch):
    """evaluate's model of a shorter context takes the plan the model
    resolved, not "auto" again (which could choose another for the other
    shape)."""
    mpcl.mixed_precision.set_global_policy("auto")
    model = tiny()
    windows = np.random.default_rng(2).integers(0, V, (2, 9))
    model.evaluate(windows)  # the model itself, its plan resolved
    resolved = mpcl._lib.lib.mpcl_model_plan(model._model).contents.resolved
    lib, create, policies = mpcl._lib.lib, mpcl._lib.lib.mpcl_model_create, []

    def spy(ctx, params, out):
        policies.append(params._obj.policy)
        return create(ctx, params, out)

    monkeypatch.setattr(lib, "mpcl_model_create", spy)
    loss = model.evaluate(windows[:, :5])
    assert policies == [resolved]
    assert loss == pytest.approx(cross_entropy(model.predict(windows[:, :4]), windows[:, 1:5]),
                                 rel=1e-3)


def test_device_rows_are_capped_by_the_logits_size(trained, monkeypatch, tmp_path):
    """A model made for predict holds at most the rows whose logits fit the
    cap (GPT-2's 1024 x 50257 logits are 206 MB a row); larger batches run
    in pieces."""
    model, _ = trained
    monkeypatch.setattr(mpcl.gpt, "_LOGITS_MAX_FLOATS", 3 * 8 * V)
    model.save(tmp_path / "hf", format="huggingface")
    loaded = mpcl.models.load_model(tmp_path / "hf")
    assert mpcl._lib.lib.mpcl_model_params_of(loaded._model).contents.max_batch == 3
    x = np.random.default_rng(6).integers(0, V, (7, 8))
    np.testing.assert_array_equal(loaded.predict(x, batch_size=32), model.predict(x))
    windows = np.random.default_rng(6).integers(0, V, (7, 9))
    assert loaded.evaluate(windows) == pytest.approx(model.evaluate(windows), rel=1e-6)


def test_pytorch_reference_logits_and_loss():
    """tests/data/gpt2-ref: PyTorch's logits and loss for its folder's
    weights (bench/make_gpt_reference.py)."""
    ref, _ = read_safetensors(os.path.join(DATA, "gpt2-ref", "reference.safetensors"))
    model = mpcl.models.load_model(os.path.join(DATA, "gpt2-ref"))
    assert isinstance(model, mpcl.models.GPT)
    tokens = ref["tokens"].astype(np.int64)
    logits = model.predict(tokens)
    scale = np.abs(ref["logits"]).max()
    np.testing.assert_allclose(logits, ref["logits"], rtol=0, atol=1e-4 * scale)
    windows = np.concatenate([tokens, ref["targets"][:, -1:].astype(np.int64)], axis=1)
    assert np.array_equal(windows[:, 1:], ref["targets"])
    assert model.evaluate(windows) == pytest.approx(float(ref["loss"]), rel=1e-5)


def test_huggingface_folder_round_trip(trained, tmp_path):
    model, _ = trained
    folder = tmp_path / "hf"
    model.save(folder, format="huggingface")
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["n_layer"], config["n_head"], config["n_embd"],
            config["n_positions"], config["vocab_size"]) == ("gpt2", 1, 2, 16, 8, V)
    tensors, _ = read_safetensors(folder / "model.safetensors")
    weights = dict(zip([n for n, *_ in model._weight_rows()], model.get_weights()))
    assert np.array_equal(tensors["transformer.wte.weight"],
                          weights["token_pos_embedding_0.token_embeddings"])
    loaded = mpcl.models.load_model(folder)
    assert isinstance(loaded, mpcl.models.GPT) and loaded.context == 8
    x = np.random.default_rng(3).integers(0, V, (4, 8))
    assert np.array_equal(loaded.predict(x), model.predict(x))
    # A shorter context reads the same weights.
    short = mpcl.models.load_model(folder, context=4)
    np.testing.assert_allclose(short.predict(x[:, :4]), model.predict(x[:, :4]), rtol=1e-5,
                               atol=1e-6)
    # The loaded model trains on (its weights are where fit starts).
    assert loaded.evaluate(WINDOWS) < 0.3
    loaded.fit(pattern(), steps=5, batch_size=8, eval_every=5, verbose=0)
    assert not np.array_equal(loaded.predict(x), model.predict(x))
    # Saved again over its own folder (a GPT-2 folder is replaced), and not
    # into a folder of something else.
    loaded.save(folder, format="huggingface")
    assert np.array_equal(mpcl.models.load_model(folder).predict(x), loaded.predict(x))
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(mpcl.MpclError) as e:
        model.save(other, format="huggingface")
    assert e.value.status == "MPCL_ERR_IO"
    assert (other / "notes.txt").read_text() == "mine"
    with pytest.raises(mpcl.MpclError) as e:
        mpcl.models.load_model(other)
    assert "config.json" in e.value.message


def test_mpcl_checkpoint_round_trip(trained, tmp_path):
    model, _ = trained
    path = tmp_path / "gpt.safetensors"
    model.save(path)
    loaded = mpcl.models.load_model(path)
    assert isinstance(loaded, mpcl.models.GPT)
    assert (loaded.context, loaded.config.n_embd, loaded.vocab_size) == (8, 16, V)
    x = np.random.default_rng(4).integers(0, V, (2, 8))
    assert np.array_equal(loaded.predict(x), model.predict(x))


def test_a_gpt_of_mpcl_train_loads_as_a_gpt(train_exe, tmp_path):
    """mpcl-train --model gpt's checkpoint opens as a GPT of its flags, and
    its predictions are a distribution's logits over the bytes."""
    text = tmp_path / "text.txt"
    text.write_bytes(b"abcdefg" * 300)
    ck = tmp_path / "gpt.safetensors"
    p = subprocess.run([train_exe, "--model", "gpt", "--layers", "1", "--heads", "2", "--embd",
                        "16", "--context", "8", "--text", str(text), "--steps", "30",
                        "--eval-every", "30", "--eval-batches", "2", "--batch", "8", "--save",
                        str(ck), "--quiet"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    model = mpcl.models.load_model(ck)
    assert isinstance(model, mpcl.models.GPT)
    c = model.config
    assert (c.n_layer, c.n_head, c.n_embd, model.context, c.vocab_size) == (1, 2, 16, 8, 256)
    logits = model.predict(np.frombuffer(b"abcdefga", np.uint8)[None])
    assert logits.shape == (1, 8, 256) and np.isfinite(logits).all()


def test_load_the_gpt2_tiny_fixture():
    """tests/data/gpt2-tiny, written by transformers: its weights as
    transformers' reference.json records them (sums and sampled
    elements)."""
    model = mpcl.models.load_model(os.path.join(DATA, "gpt2-tiny"))
    c = model.config
    assert (c.n_layer, c.n_head, c.n_embd, c.n_positions, c.vocab_size) == (2, 2, 8, 16, 32)
    assert model.context == 16
    with open(os.path.join(DATA, "gpt2-tiny.reference.json")) as f:
        ref = json.load(f)["tensors"]
    ours = {"wte.weight": "token_pos_embedding_0.token_embeddings",
            "wpe.weight": "token_pos_embedding_0.position_embeddings",
            "h.0.attn.c_attn.weight": "transformer_decoder_0.attn.c_attn.kernel",
            "h.1.mlp.c_proj.bias": "transformer_decoder_1.mlp.c_proj.bias",
            "ln_f.weight": "layer_normalization_0.gamma"}
    weights = dict(zip([n for n, *_ in model._weight_rows()], model.get_weights()))
    for hf, name in ours.items():
        w = weights[name]
        assert list(w.shape) == ref[hf]["shape"]
        assert w.astype(np.float64).sum() == pytest.approx(ref[hf]["sum"], rel=1e-6, abs=1e-6)
        for i, v in ref[hf]["elements"]:
            assert w.flat[i] == np.float32(v)
    logits = model.predict(np.arange(10).reshape(1, 10))
    assert logits.shape == (1, 10, 32) and np.isfinite(logits).all()


def test_transformers_reads_the_same_logits(trained, tmp_path):
    """Only where transformers is installed (never installed for CI)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    model, _ = trained
    model.save(tmp_path / "hf", format="huggingface")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    x = np.random.default_rng(5).integers(0, V, (2, 8))
    with torch.no_grad():
        want = hf(torch.from_numpy(x)).logits.numpy()
    np.testing.assert_allclose(model.predict(x), want, rtol=1e-4, atol=1e-4)


def test_generate(trained):
    model, _ = trained
    prompt = np.array([3, 4])
    a = model.generate(prompt, 12, temperature=1.0, seed=9)
    assert a.shape == (14,) and np.array_equal(a[:2], prompt)
    assert np.array_equal(model.generate(prompt, 12, temperature=1.0, seed=9), a)
    assert ((0 <= a) & (a < V)).all()
    # Greedy is the argmax of predict, token by token (past the context of
    # 8, the last 8 tokens).
    greedy = model.generate(prompt, 10, temperature=0)
    seq = list(prompt)
    for _ in range(10):
        window = np.array(seq[-8:])[None]
        seq.append(int(model.predict(window)[0, -1].argmax()))
    assert greedy.tolist() == seq
    # The pattern it learnt: 3 4 5 6 0 1 ...
    assert greedy.tolist() == [(3 + i) % 7 for i in range(12)]
    # Seeds give other draws at a temperature that spreads the choice.
    draws = {tuple(model.generate(prompt, 8, temperature=5.0, seed=s)) for s in range(4)}
    assert len(draws) > 1


def test_text_in():
    """A str is its UTF-8 bytes as tokens (vocabulary 256)."""
    model = mpcl.models.GPT(n_layer=1, n_head=2, n_embd=16, context=8, vocab_size=256)
    model.compile()
    history = model.fit("the cat sat on the mat. " * 40, steps=4, batch_size=4, eval_every=2,
                        eval_batches=2, verbose=0)
    assert len(history.history["eval_loss"]) == 2
    out = model.generate("the ", 3, seed=1)
    assert out[:4].tolist() == list(b"the ")
    assert model.predict(np.frombuffer(b"the cat", np.uint8)[None]).shape == (1, 7, 256)


def test_bad_input_is_named():
    model = tiny()
    with pytest.raises(ValueError, match=r"tokens\[5\] is 16: token ids must be in \[0, 16\)"):
        model.fit(np.array([0, 1, 2, 3, 4, 16] * 100), steps=1, verbose=0)
    with pytest.raises(ValueError, match=r"tokens\[\(1, 2\)\] is -1"):
        model.predict(np.array([[0, 1, 2], [3, 4, -1]]))
    with pytest.raises(ValueError, match="9 positions, more than the model's context of 8"):
        model.predict(np.zeros((1, 9), np.int64))
    with pytest.raises(ValueError, match="9 positions, more than the model's context of 8"):
        model.evaluate(np.zeros((1, 10), np.int64))
    with pytest.raises(ValueError, match="empty"):
        model.predict(np.zeros((0, 4), np.int64))
    with pytest.raises(ValueError, match="empty"):
        model.evaluate(np.zeros((2, 1), np.int64))
    with pytest.raises(ValueError, match="empty"):
        model.fit(np.zeros(0, np.int64), steps=1)
    with pytest.raises(ValueError, match="empty"):
        model.generate(np.zeros(0, np.int64), 3)
    with pytest.raises(ValueError, match=r"shape \(4,\); give token ids \(batch, time\)"):
        model.predict(np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="1-D"):
        model.fit(np.zeros((10, 10), np.int64), steps=1)
    with pytest.raises(ValueError, match="prompt_tokens holds 9 tokens, more than the model's "
                                         "context of 8"):
        model.generate(np.zeros(9, np.int64), 1)
    with pytest.raises(ValueError, match=r"prompt_tokens\[0\] is 99"):
        model.generate(np.array([99]), 1)
    with pytest.raises(ValueError, match=r"held-out part .* needs one window of context \+ 1 = 9"):
        model.fit(np.zeros(50, np.int64), steps=1)
    with pytest.raises(TypeError, match="dtype float64; token ids are integers"):
        model.predict(np.zeros((1, 4)))
    with pytest.raises(TypeError, match="steps must be an integer"):
        model.fit(pattern(), steps=1.5)
    with pytest.raises(ValueError, match="temperature"):
        model.generate(np.array([1]), 1, temperature=-1)
    with pytest.raises(ValueError, match="format='onnx'"):
        model.save("x", format="onnx")
    big = mpcl.models.GPT(n_layer=1, n_head=2, n_embd=16, context=8, vocab_size=70000)
    big.compile()
    with pytest.raises(ValueError, match="a vocabulary of 70000; token streams hold ids below "
                                         "65536"):
        big.fit(pattern(), steps=1)
    with pytest.raises(ValueError, match="n_head"):
        mpcl.models.GPT(n_layer=1, n_head=3, n_embd=16, context=8)
    with pytest.raises(ValueError, match="context"):
        mpcl.models.GPT(n_layer=1, n_head=2, n_embd=16, context=9, n_positions=8)
