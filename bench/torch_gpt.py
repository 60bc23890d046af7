"""mpcl-train --model gpt in PyTorch: bench/compare's reference for `--model gpt`.

The same GPT (GPT-2's pre-norm blocks, GELU's tanh form, LayerNorm eps 1e-5,
the LM head tied to the token embedding), the same data (byte tokens of the
same files in the same order, the last tenth held out, random windows of
context + 1 tokens), the same init (embeddings and kernels N(0, 0.02),
biases 0, LayerNorm gamma 1 and beta 0), the same recipe (AdamW lr 1e-3,
betas 0.9/0.95, eps 1e-7, weight decay 0.1 on the tensors of 2 or more dims;
a linear warm-up over 100 steps, a tenth of runs under 1000, then a cosine to
0.1 of the lr) and the same evaluation (eval_batches batches of held-out
windows, the same ones each time, every eval_every steps and at the end).
The windows themselves are PyTorch's own draws, not mpcl's.

Precision: fp32, fp16 autocast with GradScaler, or bf16 autocast, on the
CPU. Prints one JSON object: tokens/s of each evaluation interval's training
steps (evaluation timed apart), and the evaluation losses.

Run by bench/compare inside bench/.venv-torch; not part of the suite.
"""

import argparse
import json
import math
import os
import stat
import time

import torch
import torch.nn.functional as F

DEFAULT_TEXT = "/usr/share/games/fortunes"


def read_text(path):
    """mpcl_tokens_read_text: a file, or a folder's regular files in byte order of
    their names, without names ending in .dat, symbolic links or folders."""
    if not os.path.isdir(path):
        with open(path, "rb") as f:
            return f.read()
    data = bytearray()
    for name in sorted(os.listdir(path), key=lambda n: n.encode()):
        full = os.path.join(path, name)
        if name.endswith(".dat") or not stat.S_ISREG(os.lstat(full).st_mode):
            continue
        with open(full, "rb") as f:
            data += f.read()
    return bytes(data)


class Block(torch.nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(c, eps=1e-5), torch.nn.LayerNorm(c, eps=1e-5)
        self.c_attn, self.attn_proj = torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)
        self.c_fc, self.mlp_proj = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, vocab, context, layers, heads, c):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(vocab, c), torch.nn.Embedding(context, c)
        self.blocks = torch.nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(c, eps=1e-5)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                torch.nn.init.normal_(p, 0.0, 0.02)
            elif "ln" in name and name.endswith("weight"):
                torch.nn.init.ones_(p)
            else:
                torch.nn.init.zeros_(p)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()


def lr_at(step, a):
    """mpcl's warm cosine (lr_schedule.h) with mpcl-train --model gpt's defaults."""
    w = a.steps // 10 if a.steps < 1000 else 100
    if step < w:
        return a.lr * step / w
    d = max(a.steps - w, 1)
    t = min(step - w, d)
    return a.lr * (0.9 * 0.5 * (1 + math.cos(math.pi * t / d)) + 0.1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32")
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    # The reference at its fastest: subnormals flushed to zero, as mpcl's
    # kernels may (OpenCL lets f32 denormals flush); it can only help.
    torch.set_flush_denormal(True)
    torch.manual_seed(a.seed)

    data = torch.frombuffer(bytearray(read_text(a.text)), dtype=torch.uint8).long()
    held = int(len(data) * 0.1)
    train, test = data[: len(data) - held], data[len(data) - held :]
    T = a.context

    def windows(part, gen):
        starts = torch.randint(0, len(part) - T, (a.batch,), generator=gen)
        w = torch.stack([part[s : s + T + 1] for s in starts.tolist()])
        return w[:, :-1], w[:, 1:]

    model = GPT(256, T, a.layers, a.heads, a.embd)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-7)
    dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[a.precision]
    scaler = torch.amp.GradScaler("cpu") if a.precision == "fp16" else None

    def autocast():
        return torch.autocast("cpu", dtype=dtype, enabled=dtype is not None)

    def evaluate():
        gen = torch.Generator().manual_seed(a.seed + 1)
        total = 0.0
        with torch.no_grad(), autocast():
            for _ in range(a.eval_batches):
                x, y = windows(test, gen)
                total += F.cross_entropy(model(x).float().flatten(0, 1), y.flatten()).item()
        return total / a.eval_batches

    gen = torch.Generator().manual_seed(a.seed)
    rates, evals, losses = [], [], []
    step = 0
    while step < a.steps:
        n = min(a.eval_every, a.steps - step)
        t0 = time.perf_counter()
        for _ in range(n):
            for g in opt.param_groups:
                g["lr"] = lr_at(step, a)
            x, y = windows(train, gen)
            with autocast():
                loss = F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            step += 1
        losses.append(loss.item())
        rates.append(n * a.batch * T / (time.perf_counter() - t0))
        evals.append(evaluate())
    print(json.dumps({"torch": torch.__version__, "mkldnn": torch.backends.mkldnn.is_available(),
                      "interval_tokens_per_s": rates, "eval_losses": evals,
                      "train_losses": losses, "eval_loss": evals[-1]}))


if __name__ == "__main__":
    main()
