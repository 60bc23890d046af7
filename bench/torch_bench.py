"""What bench/torch_mlp.py and bench/torch_cnn.py share: mpcl-train's data and training.

Fashion-MNIST pixels scaled to [0, 1], Adam (lr 1e-3, eps 1e-7, Keras'
epsilon, which mpcl uses), batch 128, a new shuffle every epoch, softmax
cross-entropy on the logits; Glorot-uniform kernels and zero biases (PyTorch's
xavier_uniform_ takes Keras' fans: a conv's fan_in = kh*kw*in, fan_out =
kh*kw*out). Precision: fp32, fp16 autocast with GradScaler (PyTorch AMP), or
bf16 autocast (no scaler), on the CPU. Prints one JSON object: samples/s of
each epoch's training loop (the test evaluation after it is timed apart),
and the final test accuracy.

Run by bench/compare inside bench/.venv-torch; not part of the suite.
"""

import argparse
import gzip
import json
import os
import time

import numpy as np
import torch

EVAL_CHUNK = 1000  # test samples per forward pass: bounds a CNN's activations


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, prefix, limit, shape):
    """Images reshaped to (N, *shape), pixels / 255, and int64 labels."""

    def find(kind):
        for name in (f"{prefix}-{kind}-ubyte", f"{prefix}-{kind}-ubyte.gz"):
            if os.path.exists(os.path.join(data_dir, name)):
                return os.path.join(data_dir, name)
        raise SystemExit(f"torch_bench: no {prefix}-{kind}-ubyte[.gz] in {data_dir}")

    x = read_idx(find("images-idx3")).reshape(-1, *shape)
    y = read_idx(find("labels-idx1"))
    if limit:
        x, y = x[:limit], y[:limit]
    return torch.from_numpy(x.astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64))


def glorot_zero(model):
    """Keras' initializers on every conv and dense layer of model."""
    for layer in model.modules():
        if isinstance(layer, (torch.nn.Linear, torch.nn.Conv2d)):
            torch.nn.init.xavier_uniform_(layer.weight)
            torch.nn.init.zeros_(layer.bias)


def parse_args(doc, extra=None):
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--lr-schedule", choices=["constant", "cosine"], default="constant",
                    help="cosine: from 1e-3 to 0 over the run's steps (mpcl-train's "
                         "--lr-schedule cosine, Keras' CosineDecay)")
    ap.add_argument("--train-limit", type=int, default=0)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    if extra:
        extra(ap)
    return ap.parse_args()


def run(a, model, shape, memory_format=torch.contiguous_format, report=None):
    """Trains model on inputs of shape (N, *shape) as a says; prints the JSON."""
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x, y = load(a.data, "train", a.train_limit, shape)
    xt, yt = load(a.data, "t10k", 0, shape)
    x, xt = x.contiguous(memory_format=memory_format), xt.contiguous(memory_format=memory_format)
    glorot_zero(model)
    model = model.to(memory_format=memory_format)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    steps = a.epochs * -(-x.shape[0] // a.batch)
    # Stepped after every batch: the lr of step t is 1e-3 * (1 + cos(pi t / steps)) / 2.
    sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
             if a.lr_schedule == "cosine" else None)
    loss_fn = torch.nn.CrossEntropyLoss()
    dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[a.precision]
    scaler = torch.amp.GradScaler("cpu") if a.precision == "fp16" else None

    def autocast():
        return torch.autocast("cpu", dtype=dtype, enabled=dtype is not None)

    def accuracy():
        with torch.no_grad(), autocast():
            right = sum(
                (model(xt[i : i + EVAL_CHUNK]).argmax(1) == yt[i : i + EVAL_CHUNK]).sum().item()
                for i in range(0, xt.shape[0], EVAL_CHUNK)
            )
        return right / xt.shape[0]

    rates, eval_s = [], []
    n = x.shape[0]
    for _ in range(a.epochs):
        order = torch.randperm(n)
        t0 = time.perf_counter()
        for i in range(0, n, a.batch):
            idx = order[i : i + a.batch]
            with autocast():
                loss = loss_fn(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            if sched:
                sched.step()
        rates.append(n / (time.perf_counter() - t0))
        t1 = time.perf_counter()
        test_accuracy = accuracy()
        eval_s.append(time.perf_counter() - t1)

    print(
        json.dumps(
            {
                "torch": torch.__version__,
                "mkldnn": torch.backends.mkldnn.is_available(),
                "precision": a.precision,
                "lr_schedule": a.lr_schedule,
                "batch": a.batch,
                "threads": torch.get_num_threads(),
                **(report or {}),
                "epoch_samples_per_s": rates,
                "eval_seconds": eval_s,
                "test_accuracy": test_accuracy,
            }
        )
    )
