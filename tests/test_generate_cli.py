#!/usr/bin/env python3
"""mpcl-generate end to end, on checkpoints written here (safetensors with the
metadata mpcl_trainer_save writes, the weights chosen by this test):

- a "shift" model whose answer is known without running it: one-hot token
  embeddings, a layer norm, and a Dense that maps token i to logit 20 at
  i + 1 (mod 256): greedy, the continuation of "abc" is "defg...";
- a small random GPT with attention: the same seed gives the same bytes,
  another seed others, generation past the context;
- a GPT that mpcl-train --model gpt trains here on one repeated sentence:
  greedy, it continues "the quick" with the rest of the sentence, past
  its context;
- tests/data/gpt2-ref, a GPT-2 Hugging Face folder of byte tokens: the
  greedy token after each prefix of PyTorch's two sequences is PyTorch's
  argmax of its logits there (tests/data/gpt2-ref/reference.safetensors);
- errors: a non-zero exit and a message naming the problem.


usage: test_generate_cli.py PATH/TO/mpcl-generate PATH/TO/mpcl-train"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from array import array

GENERATE, TRAIN = sys.argv[1], sys.argv[2]
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(args):
    p = subprocess.run([GENERATE] + args, capture_output=True, timeout=240)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def metadata(layers):
    """A checkpoint's metadata at step 0 (the keys mpcl_trainer_save writes)."""
    return {
        "format": "mpcl-checkpoint", "format_version": "1", "mpcl_version": "0.1.0",
        "policy": "float32", "policy_resolved": "float32", "storage": "f32",
        "gemm": "mpcl-f32", "layers": layers, "loss": "sparse_categorical_crossentropy",
        "rng_counter": "0", "optimizer": "adam", "lr": "0.001", "beta1": "0.9",
        "beta2": "0.999", "eps": "1e-07", "weight_decay": "0", "decay_vectors": "1",
        "clip_norm": "0", "lr_schedule": "constant", "warmup_steps": "0", "decay_steps": "0",
        "lr_alpha": "0", "warmup_from": "0", "step": "0", "optimizer_step": "0", "epoch": "0",
        "epoch_step": "0", "seed": "42", "batch": "1", "train_samples": "1",
        "loss_scale": "1", "loss_scale_good_steps": "0", "loss_scale_skipped": "0",
        "loss_scale_mode": "none",
    }


def write_safetensors(path, meta, tensors):
    """tensors: [(name, shape, list of floats)], written F32."""
    header, blobs, offset = {"__metadata__": meta}, [], 0
    for name, shape, values in tensors:
        blob = array("f", values).tobytes()
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_checkpoint(path, layers, params):
    """params: [(name, shape, list of floats)]; Adam's moments are zeros."""
    tensors = list(params)
    for suffix in (".m", ".v"):
        tensors += [(n + suffix, s, [0.0] * len(v)) for n, s, v in params]
    write_safetensors(path, metadata(layers), tensors)


def shift_model(path, T=8):
    """token i -> logit 20 at (i + 1) mod 256, whatever the position."""
    V = C = 256
    one_hot = [1.0 if i == j else 0.0 for i in range(V) for j in range(C)]
    shift = [20.0 if (i + 1) % V == j else 0.0 for i in range(C) for j in range(V)]
    layers = (f"input_shape={T}; token_pos_embedding vocabulary_size={V} sequence_length={T} "
              f"embedding_dim={C}; layer_normalization epsilon=0.001; dense units={V} "
              "activation=linear use_bias=true")
    write_checkpoint(path, layers, [
        ("token_pos_embedding_0.token_embeddings", [V, C], one_hot),
        ("token_pos_embedding_0.position_embeddings", [T, C], [0.0] * (T * C)),
        ("layer_normalization_0.gamma", [C], [1.0] * C),
        ("layer_normalization_0.beta", [C], [0.0] * C),
        ("dense_0.kernel", [C, V], shift),
        ("dense_0.bias", [V], [0.0] * V),
    ])


def random_gpt(path, T=16, C=16):
    """Embedding, attention, layer norm, Dense to 256: weights U(-1, 1)."""
    rng = random.Random(7)
    V = 256

    def u(n):
        return [rng.uniform(-1, 1) for _ in range(n)]
    layers = (f"input_shape={T}; token_pos_embedding vocabulary_size={V} sequence_length={T} "
              f"embedding_dim={C}; causal_self_attention num_heads=2 use_bias=true; "
              f"layer_normalization epsilon=0.001; dense units={V} activation=linear "
              "use_bias=true")
    a = "causal_self_attention_0"
    write_checkpoint(path, layers, [
        ("token_pos_embedding_0.token_embeddings", [V, C], u(V * C)),
        ("token_pos_embedding_0.position_embeddings", [T, C], u(T * C)),
        (a + ".c_attn.kernel", [C, 3 * C], u(3 * C * C)), (a + ".c_attn.bias", [3 * C], u(3 * C)),
        (a + ".c_proj.kernel", [C, C], u(C * C)), (a + ".c_proj.bias", [C], u(C)),
        ("layer_normalization_0.gamma", [C], u(C)), ("layer_normalization_0.beta", [C], u(C)),
        ("dense_0.kernel", [C, V], [4 * x for x in u(C * V)]), ("dense_0.bias", [V], u(V)),
    ])


def test_shift_greedy(tmp):
    path = os.path.join(tmp, "shift.safetensors")
    shift_model(path)
    rc, out, err = run(["--model", path, "--prompt", "abc", "--tokens", "20",
                        "--temperature", "0"])
    check(rc == 0, f"shift model exits 0 (got {rc}: {err})")
    # 20 tokens from an 8-token context: the window slides past it.
    check(out == b"defghijklmnopqrstuvw", f"greedy continuation of 'abc' is d..w (got {out!r})")
    # top_k 1 is greedy at any temperature; the wrap past 255 is byte 0.
    rc, out, err = run(["--model", path, "--prompt", b"\xfe", "--tokens", "3",
                        "--top-k", "1", "--temperature", "5"])
    check(rc == 0 and out == b"\xff\x00\x01",
          f"top-k 1 continues byte 0xfe with 0xff 0x00 0x01 (got {rc}: {out!r}, {err})")
    # A prompt of 9 bytes for a context of 8.
    rc, out, err = run(["--model", path, "--prompt", "123456789", "--tokens", "1"])
    check(rc != 0 and "--prompt: 9 tokens; the model's context is 8" in err,
          f"a prompt past the context is refused (got {rc}: {err})")


def test_random_gpt_seeds(tmp):
    path = os.path.join(tmp, "gpt.safetensors")
    random_gpt(path)
    base = ["--model", path, "--prompt", "Hello", "--tokens", "40", "--temperature", "1.5",
            "--top-k", "50"]
    rc1, a, err = run(base + ["--seed", "3"])
    rc2, b, _ = run(base + ["--seed", "3"])
    rc3, c, _ = run(base + ["--seed", "4"])
    check(rc1 == rc2 == rc3 == 0, f"the random GPT generates (got {rc1}, {rc2}, {rc3}: {err})")
    check(len(a) == 40, f"40 byte tokens give 40 bytes (got {len(a)})")
    check(a == b, f"the same seed gives the same bytes ({a!r} and {b!r})")
    check(a != c, "another seed gives other bytes")


def test_trained_gpt(tmp):
    text = os.path.join(tmp, "fox.txt")
    with open(text, "w") as f:
        f.write("the quick brown fox jumps over the lazy dog.\n" * 300)
    ckpt = os.path.join(tmp, "fox.safetensors")
    p = subprocess.run([TRAIN, "--model", "gpt", "--text", text, "--layers", "2", "--heads", "2",
                        "--embd", "32", "--context", "32", "--steps", "600", "--batch", "8",
                        "--lr", "0.003", "--precision", "float32", "--save", ckpt, "--quiet"],
                       capture_output=True, text=True, timeout=240)
    check(p.returncode == 0, f"mpcl-train --model gpt exits 0 (got {p.returncode}: {p.stderr})")
    rc, out, err = run(["--model", ckpt, "--prompt", "the quick", "--tokens", "70",
                        "--temperature", "0"])
    want = b" brown fox jumps over the lazy dog.\nthe quick brown fox jumps"
    check(rc == 0 and out.startswith(want), f"the trained GPT continues the sentence (got {rc}: "
          f"{out!r}, {err})")


def read_safetensors(path):
    """{name: (shape, flat list)} of a safetensors file of F32 and I32."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header, body = json.loads(data[8:8 + n]), data[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] not in ("F32", "I32"):
            continue
        begin, end = t["data_offsets"]
        out[name] = (t["shape"], array("f" if t["dtype"] == "F32" else "i", body[begin:end]))
    return out


def test_gpt2_folder_against_pytorch():
    """tests/data/gpt2-ref: a GPT-2 folder of byte tokens (vocabulary 256)
    and PyTorch's logits for two sequences of 9 bytes. With causal
    attention the logits at position k - 1 are those of the prefix of k
    bytes, so the greedy first token after each prefix is PyTorch's
    argmax there."""
    folder = os.path.join(DATA, "gpt2-ref")
    ref = read_safetensors(os.path.join(folder, "reference.safetensors"))
    (B, T, V), logits = ref["logits"]
    tokens = ref["tokens"][1]
    for b in range(B):
        for k in range(1, T + 1):
            row = logits[(b * T + k - 1) * V:(b * T + k) * V]
            want = max(range(V), key=lambda v: row[v])
            prompt = bytes(list(tokens[b * T:b * T + k]))
            rc, out, err = run(["--model", folder, "--prompt", prompt, "--tokens", "1",
                                "--temperature", "0"])
            check(rc == 0 and out == bytes([want]),
                  f"gpt2-ref after {prompt!r}: PyTorch's argmax {want} (got {rc}: {out!r}, {err})")
    # Past its context of 16, sampled: the same seed, the same bytes.
    args = ["--model", folder, "--prompt", "caf\u00e9", "--tokens", "40", "--seed", "9"]
    rc1, a, err = run(args)
    rc2, b, _ = run(args)
    check(rc1 == rc2 == 0 and len(a) == 40 and a == b,
          f"gpt2-ref: 40 sampled bytes, the same twice (got {rc1}, {rc2}: {a!r}, {b!r}, {err})")


def test_gpt2_folder_errors(tmp):
    tiny = os.path.join(DATA, "gpt2-tiny")  # vocabulary 32, no tokenizer
    rc, out, err = run(["--model", tiny, "--prompt", "ab", "--tokens", "1"])
    check(rc == 1 and "--prompt: byte 0 is 97; the model's vocabulary is 0..31" in err,
          f"bytes outside gpt2-tiny's 32 tokens are refused (got {rc}: {err})")
    rc, out, err = run(["--model", tiny, "--prompt", b"\x01\x02", "--tokens", "3",
                        "--temperature", "0"])
    check(rc == 0 and len(out) == 3 and max(out) < 32,
          f"gpt2-tiny continues bytes below 32 (got {rc}: {out!r}, {err})")
    # A tokenizer file without its pair.
    half = os.path.join(tmp, "half")
    shutil.copytree(tiny, half)
    shutil.copy(os.path.join(DATA, "bpe", "vocab.json"), half)
    rc, out, err = run(["--model", half, "--prompt", "a"])
    check(rc == 1 and "merges.txt" in err, f"vocab.json without merges.txt (got {rc}: {err})")
    # A tokenizer of more tokens than the model's 32.
    shutil.copy(os.path.join(DATA, "bpe", "merges.txt"), half)
    rc, out, err = run(["--model", half, "--prompt", "a"])
    check(rc == 1 and "vocab.json has" in err and "the model has 32 logits" in err,
          f"a tokenizer larger than the model (got {rc}: {err})")
    # Not a GPT-2 folder.
    empty = os.path.join(tmp, "empty")
    os.mkdir(empty)
    rc, out, err = run(["--model", empty, "--prompt", "a"])
    check(rc == 1 and "config.json" in err, f"a folder without config.json (got {rc}: {err})")


def one_token_gpt2_folder(folder, token, vocab, C=8, P=16):
    """A GPT-2 folder (one layer) whose greedy choice is `token` after any
    prompt: ln_f's gain is 0 and its bias e0, so every position's logits
    are e0 . wte[v], 5 for `token` (wte[token] = 5 e0) and 0 for the rest."""
    os.mkdir(folder)
    with open(os.path.join(DATA, "gpt2-tiny", "config.json")) as f:
        config = json.load(f)
    config.update(n_layer=1, n_head=2, n_embd=C, n_positions=P, n_ctx=P, vocab_size=vocab)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    zeros = lambda n: [0.0] * n  # noqa: E731
    wte = zeros(vocab * C)
    wte[token * C] = 5.0
    e0 = [1.0] + zeros(C - 1)
    shapes = {"ln_1.weight": [C], "ln_1.bias": [C], "attn.c_attn.weight": [C, 3 * C],
              "attn.c_attn.bias": [3 * C], "attn.c_proj.weight": [C, C], "attn.c_proj.bias": [C],
              "ln_2.weight": [C], "ln_2.bias": [C], "mlp.c_fc.weight": [C, 4 * C],
              "mlp.c_fc.bias": [4 * C], "mlp.c_proj.weight": [4 * C, C], "mlp.c_proj.bias": [C]}
    tensors = [("wte.weight", [vocab, C], wte), ("wpe.weight", [P, C], zeros(P * C))]
    for name, shape in shapes.items():
        n = shape[0] * (shape[1] if len(shape) > 1 else 1)
        tensors.append(("h.0." + name, shape, zeros(n)))
    tensors += [("ln_f.weight", [C], zeros(C)), ("ln_f.bias", [C], e0)]
    write_safetensors(os.path.join(folder, "model.safetensors"), {"format": "pt"},
                      [("transformer." + n, s, v) for n, s, v in tensors])


def test_gpt2_folder_bpe(tmp):
    """GPT-2's BPE from the folder's vocab.json and merges.txt: the prompt
    encoded (its token count against the context), the output decoded."""
    bpe = os.path.join(DATA, "bpe")
    with open(os.path.join(bpe, "vocab.json")) as f:
        vocab = json.load(f)
    folder = os.path.join(tmp, "bpe-gpt2")
    one_token_gpt2_folder(folder, vocab["\u0120over"], len(vocab))  # "Ġover" is " over"
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(bpe, name), folder)
    rc, out, err = run(["--model", folder, "--prompt", "The quick brown fox", "--tokens", "3",
                        "--temperature", "0"])
    check(rc == 0 and out == b" over over over", f"BPE: greedy ' over' x3 (got {rc}: {out!r}, {err})")
    # tests/data/bpe/expected.json: the ids GPT2Tokenizer gives each case.
    with open(os.path.join(bpe, "expected.json")) as f:
        case = json.load(f)["cases"][0]
    rc, out, err = run(["--model", folder, "--prompt", bytes.fromhex(case["hex"]), "--tokens", "1"])
    want = f"--prompt: {len(case['ids'])} tokens; the model's context is 16"
    check(rc == 1 and want in err, f"BPE: a prompt of more tokens than the context (got {rc}: {err})")


def test_errors(tmp):
    path = os.path.join(tmp, "shift.safetensors")
    shift_model(path)
    cases = [
        ([], "--model is required"),
        (["--model", path], "--prompt is required"),
        (["--model", path, "--prompt", ""], "--prompt is empty"),
        (["--model", os.path.join(tmp, "missing.safetensors"), "--prompt", "a"],
         "missing.safetensors"),
        (["--model", path, "--prompt", "a", "--tokens", "ten"], "--tokens: 'ten'"),
        (["--model", path, "--prompt", "a", "--tokens", "-1"], "--tokens: '-1' is negative"),
        (["--model", path, "--prompt", "a", "--temperature", "-1"],
         "--temperature: '-1' is negative"),
        (["--model", path, "--prompt", "a", "--temperature", "inf"], "--temperature: 'inf'"),
        (["--model", path, "--prompt", "a", "--top-k", "1.5"], "--top-k: '1.5'"),
        (["--model", path, "--prompt", "a", "--seed", "0x10"], "--seed: '0x10'"),
        (["--model", path, "--prompt", "a", "--precision", "float64"],
         "unknown policy 'float64'"),
        (["--model", path, "--prompt", "a", "--bogus", "1"], "unknown option '--bogus'"),
        (["--model", path, "--prompt"], "option '--prompt' without its value"),
    ]
    for args, needle in cases:
        rc, out, err = run(args)
        check(rc == 1 and needle in err, f"{args}: exit 1 naming {needle!r} (got {rc}: {err})")
    # A vocabulary of 100: the prompt's byte 1 is above it.
    small = os.path.join(tmp, "small.safetensors")
    write_checkpoint(small, "input_shape=4; token_pos_embedding vocabulary_size=100 "
                     "sequence_length=4 embedding_dim=2; dense units=100 activation=linear "
                     "use_bias=true",
                     [("token_pos_embedding_0.token_embeddings", [100, 2], [0.1] * 200),
                      ("token_pos_embedding_0.position_embeddings", [4, 2], [0.1] * 8),
                      ("dense_0.kernel", [2, 100], [0.1] * 200), ("dense_0.bias", [100], [0.0] * 100)])
    rc, out, err = run(["--model", small, "--prompt", "a\u00e9"])
    check(rc == 1 and "--prompt: byte 1 is 195; the model's vocabulary is 0..99" in err,
          f"a prompt byte outside the vocabulary (got {rc}: {err})")
    mlp = os.path.join(tmp, "mlp.safetensors")
    write_checkpoint(mlp, "input_shape=4; dense units=4 activation=linear use_bias=true",
                     [("dense_0.kernel", [4, 4], [0.5] * 16), ("dense_0.bias", [4], [0.0] * 4)])
    rc, out, err = run(["--model", mlp, "--prompt", "a"])
    check(rc == 1 and "generation needs a GPT" in err and out == b"",
          f"an MLP checkpoint is refused (got {rc}: {out!r}, {err})")
    rc, out, err = run(["--help"])
    check(rc == 0 and "--temperature" in out.decode(), "--help exits 0 with the options")


def main():
    tmp = tempfile.mkdtemp(prefix="mpcl-generate-")
    try:
        for t in (test_shift_greedy, test_random_gpt_seeds, test_trained_gpt, test_errors,
                  test_gpt2_folder_errors, test_gpt2_folder_bpe):
            t(tmp)
        test_gpt2_folder_against_pytorch()
    finally:
        shutil.rmtree(tmp)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)", file=sys.stderr)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
