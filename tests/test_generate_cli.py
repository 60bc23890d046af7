#!/usr/bin/env python3
"""mpcl-generate end to end, on checkpoints written here (safetensors with the
metadata mpcl_trainer_save writes, the weights chosen by this test):

- a "shift" model whose answer is known without running it: one-hot token
  embeddings, a layer norm, and a Dense that maps token i to logit 20 at
  i + 1 (mod 256): greedy, the continuation of "abc" is "defg...";
- a small random GPT with attention: the same seed gives the same bytes,
  another seed others, generation past the context;
- errors: a non-zero exit and a message naming the problem.

- a GPT that mpcl-train --model gpt trains here on one repeated sentence:
  greedy, it continues "the quick" with the rest of the sentence, past
  its context;

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


def write_checkpoint(path, layers, params):
    """params: [(name, shape, list of floats)]; Adam's moments are zeros."""
    tensors = list(params)
    for suffix in (".m", ".v"):
        tensors += [(n + suffix, s, [0.0] * len(v)) for n, s, v in params]
    header, blobs, offset = {"__metadata__": metadata(layers)}, [], 0
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
        for t in (test_shift_greedy, test_random_gpt_seeds, test_trained_gpt, test_errors):
            t(tmp)
    finally:
        shutil.rmtree(tmp)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)", file=sys.stderr)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
