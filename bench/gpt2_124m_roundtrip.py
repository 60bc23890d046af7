#!/usr/bin/env python3
"""A GPT-2 124M folder through mpcl and back, checked by Hugging Face's
transformers. Run by hand in bench/.venv-torch (torch, transformers,
safetensors), never in CI; nothing is downloaded:

  bench/.venv-torch/bin/python bench/gpt2_124m_roundtrip.py [--steps 3]
      [--context 128] [--batch 4] [--precision float32] [--mpcl-train PATH]
      [--keep DIR]

1. transformers writes GPT2LMHeadModel(GPT2Config()), GPT-2 124M's shape (12
   layers, 12 heads, 768 channels, 1024 positions, 50257 tokens), drawn
   with seed 0, as save_pretrained does: model.safetensors + config.json.
   (The released weights need the Hub; the shapes, names and layout are
   the same.)
2. mpcl-train --model gpt --init-from that folder fine-tunes it for --steps
   steps on the fortunes corpus (byte tokens: the folder has no BPE files)
   and writes it back with --save-hf.
3. transformers loads mpcl's folder: every tensor of the original is there
   with its shape, the head is tied to wte, the weights moved; and mpcl's
   Python package (mpcl.models.load_model) and transformers give the same
   logits on the same tokens.

Prints what it measured; exits non-zero when a check fails.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "transformer."


def tensors(folder):
    """The folder's tensors by canonical name (no "transformer." prefix)."""
    raw = load_file(os.path.join(folder, "model.safetensors"))
    return {(k[len(PREFIX):] if k.startswith(PREFIX) else k): v for k, v in raw.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--precision", default="float32", help="mpcl-train's policy")
    ap.add_argument("--mpcl-train", default=os.path.join(ROOT, "build", "src", "tools", "mpcl-train"))
    ap.add_argument("--keep", help="write the two folders here instead of a temporary folder")
    args = ap.parse_args()
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or tmp
        original, tuned = os.path.join(root, "gpt2-124m"), os.path.join(root, "gpt2-124m-mpcl")
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config())
        model.save_pretrained(original)
        params = sum(p.numel() for p in model.parameters())
        print(f"transformers wrote {original}: {params} parameters", flush=True)

        cmd = [args.mpcl_train, "--model", "gpt", "--init-from", original, "--context",
               str(args.context), "--batch", str(args.batch), "--steps", str(args.steps),
               "--eval-every", str(args.steps), "--eval-batches", "2", "--precision",
               args.precision, "--save-hf", tuned, "--json", "--quiet"]
        print("$ " + " ".join(cmd), flush=True)
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - t0
        check(p.returncode == 0, f"mpcl-train fine-tunes and saves (exit {p.returncode}) "
                                 f"{p.stderr[-400:]}")
        if p.returncode != 0:
            return 1
        report = json.loads(p.stdout)
        print(f"mpcl-train: {wall:.1f} s in all, {report['gpt']['tokens_per_s']:.0f} tokens/s, "
              f"eval loss {report.get('eval_loss')}, peak device memory "
              f"{report.get('peak_device_bytes', 0) / 2**20:.0f} MiB", flush=True)

        before, after = tensors(original), tensors(tuned)
        check(sorted(after) == sorted(before),
              f"mpcl's folder holds the original's {len(before)} tensors by name")
        check(all(after[k].shape == before[k].shape for k in before if k in after),
              "every tensor keeps its shape")
        moved = sum(not torch.equal(after[k], before[k]) for k in before if k in after)
        check(moved == len(before), f"fine-tuning moved {moved} of {len(before)} tensors")

        back = GPT2LMHeadModel.from_pretrained(tuned).eval()
        check(back.lm_head.weight.data_ptr() == back.transformer.wte.weight.data_ptr(),
              "transformers loads it with the head tied to wte")

        sys.path.insert(0, os.path.join(ROOT, "python"))
        os.environ.setdefault("MPCL_LIBRARY", os.path.join(ROOT, "build", "src", "libmpcl.so"))
        import mpcl  # noqa: E402  (after the library's path is set)

        tokens = np.random.default_rng(1).integers(0, 50257, size=(2, args.context), dtype=np.int32)
        ours = mpcl.models.load_model(tuned, context=args.context).predict(tokens)
        with torch.no_grad():
            theirs = back(torch.from_numpy(tokens.astype(np.int64))).logits.numpy()
        err = float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))
        check(ours.shape == theirs.shape and err < 1e-4,
              f"mpcl and transformers give the same logits {ours.shape}: largest difference "
              f"{err:.2e} of the largest logit (f32; limit 1e-4)")
    print(f"{len(failures)} failure(s)" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
