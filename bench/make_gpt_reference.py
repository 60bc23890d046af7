#!/usr/bin/env python3
"""PyTorch's reference for mpcl's GPT-2 training, in the manner of llm.c's
test_gpt2: a tiny GPT2LMHeadModel's logits, loss, gradients and ten AdamW
steps' losses on one batch of byte tokens. Run by hand in bench/.venv-torch
(torch, transformers, safetensors), never in CI:

  bench/.venv-torch/bin/python bench/make_gpt_reference.py

writes tests/data/gpt2-ref/:
  config.json, model.safetensors   the initial weights (save_pretrained)
  reference.safetensors            tokens, targets (I32 [B, T]),
                                   logits (F32 [B, T, V]), loss (F32 scalar),
                                   grad.<canonical name> (F32, the weight's
                                   shape, Conv1D layout [in, out]; wte's holds
                                   the tied head's part too),
                                   losses (F32 [STEPS]): the loss before each
                                   AdamW step
  reference.json                   every hyperparameter, the versions, the
                                   text, and how far the f32 values are from
                                   the same computation in float64

Before writing, it checks the semantics a C implementation follows: the
forward pass written out from the canonical tensors (spec_logits) and
torch.optim.AdamW written out (spec_run) must give transformers' and
torch.optim's logits, loss, gradients and losses within 1e-9 in float64,
or the script stops.

A rerun on the same machine writes the same bytes (one thread, deterministic
algorithms). tests/test_gpt_reference.c checks the dump is consistent;
tests/gpt_reference.h loads it for the model's test.
"""
import json
import math
import os
import sys

import safetensors
import safetensors.torch
import torch
import torch.nn.functional as F
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDER = os.path.join(ROOT, "tests", "data", "gpt2-ref")
PREFIX = "transformer."

SEED = 1234
CONFIG = dict(n_layer=2, n_head=2, n_embd=16, n_positions=16, vocab_size=256,
              activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
              attn_pdrop=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True,
              bos_token_id=None, eos_token_id=None)
# Parameters drawn so that every one matters to the loss: GPT-2's own init
# (std 0.02, LayerNorm 1 and 0, biases 0) would hide a swapped bias or gain.
INIT = {"matrix_std": 0.2, "layer_norm_weight": "1 + N(0, 0.1^2)", "vector_std": 0.1}
B, T = 2, 9  # odd T: no kernel may assume an even sequence
# B*T+1 bytes (two of them UTF-8 pairs, tokens above 127), read as llm.c's
# loader does: tokens = bytes[0 : B*T], targets = bytes[1 : B*T+1], both
# viewed [B, T], so each row's targets are its tokens shifted by one and the
# last target of row b is the first token of row b+1.
TEXT = "naïve café tokens"
STEPS = 10
ADAMW = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def canonical(name):
    return name[len(PREFIX):] if name.startswith(PREFIX) else name


def build_model():
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(GPT2Config(**CONFIG, attn_implementation="eager"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn_like(p) * INIT["matrix_std"])
            elif ".ln_" in name and name.endswith(".weight"):
                p.copy_(1 + torch.randn_like(p) * INIT["vector_std"])
            else:  # biases
                p.copy_(torch.randn_like(p) * INIT["vector_std"])
    assert model.config._attn_implementation == "eager"
    assert model.lm_head.weight is model.transformer.wte.weight
    return model.train()  # dropouts are 0: train() and eval() compute the same


def batch():
    data = torch.tensor(list(TEXT.encode("utf-8")), dtype=torch.int64)
    assert data.numel() == B * T + 1, data.numel()
    return data[:-1].view(B, T), data[1:].view(B, T)


def loss_of(model, tokens, targets):
    logits = model(tokens).logits
    return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def optimizer(model):
    """llm.c's and nanoGPT's rule: decay the tensors of 2 or more dims only."""
    params = list(model.named_parameters())  # the tied head once, as wte
    groups = [{"params": [p for _, p in params if p.dim() >= 2],
               "weight_decay": ADAMW["weight_decay"]},
              {"params": [p for _, p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"],
                             foreach=False, fused=False)


def run(dtype):
    """The reference computation in dtype: logits, loss and gradients before
    the first step, and the loss before each of the STEPS steps."""
    model = build_model().to(dtype)
    tokens, targets = batch()
    opt = optimizer(model)
    out = {}
    losses = []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        logits, loss = loss_of(model, tokens, targets)
        loss.backward()
        losses.append(loss.detach().clone())
        if step == 0:
            out["logits"] = logits.detach().clone()
            out["loss"] = loss.detach().clone()
            for name, p in model.named_parameters():
                out["grad." + canonical(name)] = p.grad.detach().clone()
        opt.step()
    out["losses"] = torch.stack(losses)
    return model, tokens, targets, out


def errors(f32, f64):
    """The largest |f32 - f64| of each kind of value, and the largest relative
    to that tensor's largest |f64|: the f32 reference's own error."""
    kinds = {}
    for name, a in f32.items():
        kind = "grad" if name.startswith("grad.") else name
        d = (a.double() - f64[name]).abs().max().item()
        scale = f64[name].abs().max().item()
        k = kinds.setdefault(kind, {"max_abs": 0.0, "max_rel_to_tensor_max": 0.0})
        k["max_abs"] = max(k["max_abs"], d)
        k["max_rel_to_tensor_max"] = max(k["max_rel_to_tensor_max"], d / scale if scale else d)
    return {k: {n: float(f"{x:.3g}") for n, x in v.items()} for k, v in kinds.items()}


# ---- the semantics a C implementation follows, written out and checked ----

def spec_logits(params, tokens):
    """GPT2LMHeadModel's forward pass from the canonical tensors, written
    out step by step as a C implementation computes it; spec_check holds it
    to transformers' in float64."""
    cfg = GPT2Config(**CONFIG)
    C, H = cfg.n_embd, cfg.n_head
    D = C // H  # head dim
    Bn, Tn = tokens.shape

    def layer_norm(x, name):  # biased variance, eps inside the square root
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + cfg.layer_norm_epsilon) * params[name + ".weight"] \
            + params[name + ".bias"]

    def linear(x, name):  # Conv1D: W is [in, out], y = x W + b
        return x @ params[name + ".weight"] + params[name + ".bias"]

    def gelu_tanh(x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    causal = torch.ones(Tn, Tn, dtype=torch.bool).tril()  # query t sees keys 0..t
    x = params["wte.weight"][tokens] + params["wpe.weight"][:Tn]
    for n in range(cfg.n_layer):
        h = f"h.{n}."
        qkv = linear(layer_norm(x, h + "ln_1"), h + "attn.c_attn")  # columns: q | k | v
        q, k, v = (t.view(Bn, Tn, H, D).transpose(1, 2) for t in qkv.split(C, dim=-1))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        attn = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (attn @ v).transpose(1, 2).reshape(Bn, Tn, C)  # heads side by side
        x = x + linear(y, h + "attn.c_proj")
        x = x + linear(gelu_tanh(linear(layer_norm(x, h + "ln_2"), h + "mlp.c_fc")),
                       h + "mlp.c_proj")
    return layer_norm(x, "ln_f") @ params["wte.weight"].T  # the tied head


def spec_run(tokens, targets):
    """spec_logits' loss and gradients before the first step, and torch.optim.AdamW
    written out (decoupled decay first, then Adam with bias correction)."""
    model = build_model().double()
    params = {canonical(n): p.detach().clone().requires_grad_(True)
              for n, p in model.named_parameters()}
    lr, (beta1, beta2), eps, wd = ADAMW["lr"], ADAMW["betas"], ADAMW["eps"], ADAMW["weight_decay"]
    m = {n: torch.zeros_like(p) for n, p in params.items()}
    v = {n: torch.zeros_like(p) for n, p in params.items()}
    out, losses = {}, []
    for step in range(1, STEPS + 1):
        logits = spec_logits(params, tokens)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        grads = torch.autograd.grad(loss, list(params.values()))
        losses.append(loss.detach())
        if step == 1:
            out["logits"], out["loss"] = logits.detach(), loss.detach()
            out.update({"grad." + n: g for n, g in zip(params, grads)})
        with torch.no_grad():
            for (n, p), g in zip(params.items(), grads):
                if p.dim() >= 2:
                    p.mul_(1 - lr * wd)
                m[n] = beta1 * m[n] + (1 - beta1) * g
                v[n] = beta2 * v[n] + (1 - beta2) * g * g
                m_hat = m[n] / (1 - beta1 ** step)
                v_hat = v[n] / (1 - beta2 ** step)
                p.sub_(lr * m_hat / (torch.sqrt(v_hat) + eps))
    out["losses"] = torch.stack(losses)
    return out


def spec_check(ref64, tokens, targets):
    """The largest |spec - PyTorch| in float64, per kind; fails above 1e-9."""
    spec = spec_run(tokens, targets)
    assert set(spec) == set(ref64), set(spec) ^ set(ref64)
    worst = {}
    for name, a in spec.items():
        kind = "grad" if name.startswith("grad.") else name
        worst[kind] = max(worst.get(kind, 0.0), (a - ref64[name]).abs().max().item())
    bad = {k: d for k, d in worst.items() if not d <= 1e-9}
    if bad:
        raise SystemExit(f"the written-out semantics differ from PyTorch: {bad}")
    return {k: float(f"{d:.3g}") for k, d in worst.items()}


def main():
    if len(sys.argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model, tokens, targets, ref = run(torch.float32)
    _, _, _, ref64 = run(torch.float64)
    spec_error = spec_check(ref64, tokens, targets)

    # The initial weights, as transformers saves them.
    initial = build_model()
    initial.save_pretrained(FOLDER)
    for extra in ("generation_config.json",):  # not part of the model
        path = os.path.join(FOLDER, extra)
        if os.path.exists(path):
            os.remove(path)

    tensors = {"tokens": tokens.to(torch.int32).contiguous(),
               "targets": targets.to(torch.int32).contiguous()}
    tensors.update({k: v.to(torch.float32).contiguous() for k, v in ref.items()})
    safetensors.torch.save_file(tensors, os.path.join(FOLDER, "reference.safetensors"),
                                metadata={"format": "pt"})

    info = {
        "description": "PyTorch reference for mpcl's GPT-2: bench/make_gpt_reference.py",
        "config": CONFIG,
        "init": dict(INIT, seed=SEED),
        "batch": {"B": B, "T": T, "text": TEXT, "text_utf8_hex": TEXT.encode("utf-8").hex(),
                  "tokens": "bytes[0:B*T] viewed [B, T]",
                  "targets": "bytes[1:B*T+1] viewed [B, T]"},
        "loss": "mean cross-entropy over the B*T positions (natural log)",
        "optimizer": {"name": "torch.optim.AdamW", "lr": ADAMW["lr"], "lr_schedule": "constant",
                      "betas": list(ADAMW["betas"]), "eps": ADAMW["eps"],
                      "weight_decay": ADAMW["weight_decay"],
                      "weight_decay_on": "tensors of 2 or more dims: wte, wpe, and each "
                                         "layer's c_attn, attn.c_proj, c_fc, mlp.c_proj weights",
                      "amsgrad": False, "grad_clip": None, "steps": STEPS,
                      "losses": "losses[k]: the loss before step k+1 (losses[0] is loss)"},
        "attn_implementation": "eager",
        "dtype": "float32",
        "f32_error_vs_float64": errors(ref, ref64),
        "written_out_semantics_vs_pytorch_float64": spec_error,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "safetensors": safetensors.__version__,
                     "python": sys.version.split()[0]},
    }
    with open(os.path.join(FOLDER, "reference.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")

    total = sum(os.path.getsize(os.path.join(FOLDER, n)) for n in os.listdir(FOLDER))
    print(f"wrote {FOLDER}: {', '.join(sorted(os.listdir(FOLDER)))} ({total} bytes)")
    print(f"loss {ref['loss'].item():.6f}, losses {[round(x, 6) for x in ref['losses'].tolist()]}")
    print("f32 error vs float64:", json.dumps(info["f32_error_vs_float64"]))
    print("written-out semantics vs PyTorch (float64):", json.dumps(spec_error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
