#!/usr/bin/env python3
"""The tiny GPT-2 folder that Hugging Face's transformers writes, for
tests/test_gpt2_folder.c, and the check that transformers loads what mpcl
writes. Run by hand in bench/.venv-torch (torch, transformers, safetensors),
never in CI:

  bench/.venv-torch/bin/python bench/make_gpt2_fixture.py make
      GPT2LMHeadModel with n_layer 2, n_head 2, n_embd 8, n_positions 16,
      vocab_size 32, every parameter drawn from N(0, 0.5^2) with seed 1234,
      saved with save_pretrained into tests/data/gpt2-tiny/, and
      tests/data/gpt2-tiny.reference.json: for each tensor (canonical name,
      no "transformer." prefix) its shape, the sum of its elements (float64,
      by PyTorch) and a few elements by flat index, as PyTorch holds them.

  bench/.venv-torch/bin/python bench/make_gpt2_fixture.py check FOLDER
      Loads FOLDER (one mpcl wrote: MPCL_GPT2_WRITE_TO=FOLDER meson test
      test_gpt2_folder writes the fixture back there) and tests/data/gpt2-tiny
      with GPT2LMHeadModel.from_pretrained, and checks that every tensor is
      bit for bit the same, that the output projection is tied to wte, and
      that both models give the same logits on a few tokens.
"""
import json
import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDER = os.path.join(ROOT, "tests", "data", "gpt2-tiny")
REFERENCE = os.path.join(ROOT, "tests", "data", "gpt2-tiny.reference.json")
PREFIX = "transformer."
PICKS = 4  # elements recorded per tensor


def canonical(name):
    return name[len(PREFIX):] if name.startswith(PREFIX) else name


def make():
    torch.manual_seed(1234)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=8, n_positions=16, vocab_size=32,
                        bos_token_id=None, eos_token_id=None)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for p in model.parameters():  # LayerNorm's ones and zeros would hide a swap
            p.copy_(torch.randn_like(p) * 0.5)
    model.save_pretrained(FOLDER)
    ref = {"config": {k: getattr(config, k) for k in
                      ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size",
                       "layer_norm_epsilon")},
           "tensors": {}}
    gen = torch.Generator().manual_seed(99)
    for name, t in model.transformer.state_dict().items():
        flat = t.detach().reshape(-1)
        idx = sorted(set([0, flat.numel() - 1] +
                         torch.randint(0, flat.numel(), (PICKS - 2,), generator=gen).tolist()))
        ref["tensors"][canonical(name)] = {
            "shape": list(t.shape),
            "sum": float(flat.double().sum()),
            "elements": [[i, float(flat[i])] for i in idx],
        }
    lines = [f'  "{k}": {json.dumps(v)}' for k, v in ref["tensors"].items()]
    with open(REFERENCE, "w") as f:
        f.write('{"config": ' + json.dumps(ref["config"]) + ',\n "tensors": {\n' +
                ",\n".join(lines) + "\n}}\n")
    print(f"wrote {FOLDER} ({', '.join(sorted(os.listdir(FOLDER)))}) and {REFERENCE}")


def check(folder):
    ours = GPT2LMHeadModel.from_pretrained(folder).eval()
    theirs = GPT2LMHeadModel.from_pretrained(FOLDER).eval()
    a, b = ours.state_dict(), theirs.state_dict()
    problems = [f"{k}: only in one" for k in set(a) ^ set(b)]
    problems += [f"{k}: differs" for k in set(a) & set(b) if not torch.equal(a[k], b[k])]
    if ours.lm_head.weight.data_ptr() != ours.transformer.wte.weight.data_ptr():
        problems.append("lm_head.weight is not tied to wte.weight")
    ids = torch.tensor([[0, 5, 31, 7, 7, 2]])
    with torch.no_grad():
        if not torch.equal(ours(ids).logits, theirs(ids).logits):
            problems.append("the logits differ")
    if problems:
        print("FAIL:\n  " + "\n  ".join(sorted(problems)))
        return 1
    print(f"OK: {folder} loads in transformers {__import__('transformers').__version__}; "
          f"{len(a)} tensors equal to {FOLDER}'s, lm_head tied, same logits")
    return 0


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "make":
        make()
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        return check(sys.argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
