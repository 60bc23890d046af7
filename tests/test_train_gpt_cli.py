#!/usr/bin/env python3
"""mpcl-train --model gpt end to end, on a tiny GPT and a small text: the
JSON summary, a GPT-2 folder written by --save-hf and trained on again by
--init-from (its weights: the first evaluation of a run that cannot move them
is the last of the run that wrote them), GPT-2's BPE through a folder's
vocab.json and merges.txt, and bad input refused with exit 1, a message
naming what is wrong, and nothing written.

usage: test_train_gpt_cli.py PATH/TO/mpcl-train"""
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import time

from train_cli_common import FAILURES, check, finish, run  # argv[1]: mpcl-train

HERE = os.path.dirname(os.path.abspath(__file__))
BPE = os.path.join(HERE, "data", "bpe")
TINY = ["--model", "gpt", "--layers", "1", "--embd", "16", "--heads", "2", "--context", "16",
        "--batch", "8", "--eval-batches", "2", "--precision", "float32"]


def summary(args, what):
    """The JSON of a run that must succeed; None (and a failure) otherwise."""
    code, out, err = run(args + ["--json"])
    if not check(code == 0, f"{what}: exit {code}: {err.strip()[-400:]}"):
        return None
    return json.loads(out)


def refused(args, needle, what, nothing_at=None):
    code, out, err = run(args)
    check(code == 1, f"{what}: exit {code}, wanted 1")
    check(needle in err, f"{what}: '{needle}' not in: {err.strip()[-400:]}")
    if nothing_at:
        check(not os.path.exists(nothing_at), f"{what}: {nothing_at} was written")


def main():
    t0 = time.time()
    d = tempfile.mkdtemp(prefix="mpcl-gpt-cli-")
    try:
        rng = random.Random(1)
        words = "the quick brown fox jumps over a lazy dog and then sleeps under the old tree"
        text = os.path.join(d, "small.txt")
        with open(text, "w") as f:
            f.write(" ".join(rng.choice(words.split()) for _ in range(3000)))
        size = os.path.getsize(text)

        # A run that writes a GPT-2 folder.
        h1 = os.path.join(d, "h1")
        s = summary(TINY + ["--text", text, "--steps", "60", "--eval-every", "20", "--lr", "0.01", "--vocab",
                            "659", "--save-hf", h1], "first run")
        if s:
            check(s["steps"] == 60, f"steps {s['steps']}")
            check(s["gpt"]["tokenizer"] == "bytes", f"tokenizer {s['gpt']['tokenizer']}")
            check(s["gpt"]["corpus_tokens"] == size, f"{s['gpt']['corpus_tokens']} tokens")
            check(s["gpt"]["vocab"] == 659 and s["gpt"]["context"] == 16, f"gpt {s['gpt']}")
            check(s["gpt"]["tokens_per_s"] > 0, "tokens/s")
            # A token run has no classes (the vocabulary, 659 here, is no label count).
            check("classes" not in s, "the JSON has classes")
            # Uniform guessing over 659 ids is 6.49 nats; the text is 16 words.
            check(isinstance(s["eval_loss"], float) and s["eval_loss"] < 4.0,
                  f"eval_loss {s['eval_loss']}")
            for name in ("config.json", "model.safetensors"):
                check(os.path.isfile(os.path.join(h1, name)), f"--save-hf wrote no {name}")
            with open(os.path.join(h1, "config.json")) as f:
                cfg = json.load(f)
            check(cfg.get("n_embd") == 16 and cfg.get("n_layer") == 1 and cfg.get("vocab_size") == 659
                  and cfg.get("n_positions") == 16, f"config {cfg}")

        # The folder's weights, trained on with an lr too small to move them:
        # its evaluation (the same held-out windows) gives the loss the first
        # run ended with.
        if s:
            s2 = summary(["--model", "gpt", "--init-from", h1, "--text", text, "--steps", "1",
                          "--lr", "1e-30", "--batch", "8", "--eval-batches", "2", "--precision",
                          "float32"], "--init-from")
            if s2:
                check(s2["eval_loss"] == s["eval_loss"],
                      f"--init-from: eval loss {s2['eval_loss']}, the folder's run ended with "
                      f"{s['eval_loss']}")
                check(s2["gpt"]["context"] == 16, "--init-from: context defaults to n_positions")

        # GPT-2's BPE when the folder has vocab.json and merges.txt.
        if s:
            h1b = os.path.join(d, "h1bpe")
            shutil.copytree(h1, h1b)
            for name in ("vocab.json", "merges.txt"):
                shutil.copy(os.path.join(BPE, name), h1b)
            h2 = os.path.join(d, "h2")
            s3 = summary(["--model", "gpt", "--init-from", h1b, "--text", text, "--steps", "5",
                          "--batch", "8", "--eval-batches", "2", "--save-hf", h2], "BPE")
            if s3:
                check(s3["gpt"]["tokenizer"] == "gpt2 bpe", f"tokenizer {s3['gpt']['tokenizer']}")
                n = s3["gpt"]["corpus_tokens"]
                check(0 < n < size, f"BPE: {n} tokens of {size} bytes")
                check(os.path.isfile(os.path.join(h2, "model.safetensors")), "BPE: no folder")

        # Bad input.
        out = os.path.join(d, "never")
        refused(TINY + ["--heads", "3"], "--heads 3 does not divide --embd 16", "heads")
        empty = os.path.join(d, "empty.txt")
        open(empty, "w").close()
        refused(TINY + ["--text", empty, "--save-hf", out], "empty.txt", "empty text", out)
        short = os.path.join(d, "short.txt")
        with open(short, "w") as f:
            f.write("tiny")
        refused(TINY + ["--text", short, "--save-hf", out], "short.txt", "text under a window",
                out)
        bad_bin = os.path.join(d, "bad.bin")
        with open(bad_bin, "wb") as f:
            f.write(struct.pack("<256i", 20240519, 1, 4, *([0] * 253)) + bytes(8))
        refused(TINY + ["--tokens", bad_bin, "--vocab", "300"], "magic", "wrong magic")
        big_id = os.path.join(d, "big.bin")
        with open(big_id, "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, 4, *([0] * 253)))
            f.write(struct.pack("<4H", 1, 2, 300, 4))
        refused(TINY + ["--tokens", big_id, "--vocab", "300"], "300", "token id at the vocabulary")
        if s:
            refused(["--model", "gpt", "--init-from", h1, "--text", text, "--context", "32"],
                    "context", "context past n_positions")
            refused(["--model", "gpt", "--init-from", h1, "--layers", "2"],
                    "--layers contradicts --init-from", "shape flag with --init-from")
            wrong = os.path.join(d, "wrong")
            shutil.copytree(h1, wrong)
            with open(os.path.join(wrong, "config.json")) as f:
                cfg = json.load(f)
            cfg["n_embd"] = 32
            with open(os.path.join(wrong, "config.json"), "w") as f:
                json.dump(cfg, f)
            refused(["--model", "gpt", "--init-from", wrong, "--text", text, "--steps", "1",
                     "--save-hf", out], "wte", "config contradicting the tensors", out)
        plain = os.path.join(d, "plain")
        open(plain, "w").close()
        refused(TINY + ["--text", text, "--save-hf", plain], "not a folder",
                "--save-hf onto a file")
        check(os.path.getsize(plain) == 0, "--save-hf: the file was changed")
        refused(["--layers", "2"], "--layers applies to --model gpt", "gpt flag alone")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return finish("mpcl-train --model gpt", t0)


if __name__ == "__main__":
    sys.exit(main())
