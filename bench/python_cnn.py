"""Issue 21's target CNN on Fashion-MNIST through the Python package (not a test).

Conv2D 32 3x3 relu, MaxPooling2D 2, Conv2D 64 3x3 relu, MaxPooling2D 2,
Flatten, Dense 128 relu, Dense 10 (logits), Adam (lr 1e-3), sparse
categorical cross-entropy, batch 128, a new shuffle every epoch, on the full
training set (60000) for --epochs in --policy; then the test set (10000) is
evaluated once. Prints one JSON object: the test accuracy and loss, and the
training samples/s two ways: `fit_samples_per_s` over fit()'s wall time
(data upload and kernel builds included) and `trainer_samples_per_s`, the
median of the trainer's reports after the first epoch's first (the steady
rate). The device is the library's choice ($MPCL_DEVICE selects one).

    PYTHONPATH=python MPCL_LIBRARY=build/src/libmpcl.so \\
        python3 bench/python_cnn.py --epochs 10 --policy mixed_float16

--train-limit and --test-limit take the first N samples, for a smoke run.
"""

import argparse
import json
import statistics
import sys
import time

import mpcl

L = mpcl.layers


def build(policy, seed, lr=1e-3):
    mpcl.mixed_precision.set_global_policy(policy)
    m = mpcl.Sequential([L.Conv2D(32, 3, activation="relu", input_shape=(28, 28, 1)),
                         L.MaxPooling2D(2), L.Conv2D(64, 3, activation="relu"),
                         L.MaxPooling2D(2), L.Flatten(), L.Dense(128, activation="relu"),
                         L.Dense(10)], seed=seed)
    m.compile(optimizer=mpcl.optimizers.Adam(lr),
              loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
    return m


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--policy", default="auto",
                    help="float32, mixed_float16, mixed_bfloat16 or auto (default)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--data", default=mpcl.datasets.FASHION_MNIST_DIR)
    ap.add_argument("--train-limit", type=int, default=0, help="first N training samples")
    ap.add_argument("--test-limit", type=int, default=0, help="first N test samples")
    ap.add_argument("--lr-schedule", default="constant", choices=("constant", "cosine"),
                    help="cosine: Keras' CosineDecay from 1e-3 to 0 over the run's steps")
    ap.add_argument("--verbose", type=int, default=0, choices=(0, 1, 2))
    a = ap.parse_args(argv)
    (x, y), (xt, yt) = mpcl.datasets.fashion_mnist.load_data(a.data)
    if a.train_limit:
        x, y = x[:a.train_limit], y[:a.train_limit]
    if a.test_limit:
        xt, yt = xt[:a.test_limit], yt[:a.test_limit]
    # uint8 pixels: mpcl scales them by 1/255 on the device.
    x, xt = x.reshape(-1, 28, 28, 1), xt.reshape(-1, 28, 28, 1)
    lr = 1e-3
    if a.lr_schedule == "cosine":
        steps = a.epochs * -(-len(x) // a.batch)
        lr = mpcl.optimizers.schedules.CosineDecay(1e-3, decay_steps=steps)
    model = build(a.policy, a.seed, lr)
    t0 = time.perf_counter()
    history = model.fit(x, y, epochs=a.epochs, batch_size=a.batch, verbose=a.verbose)
    fit_s = time.perf_counter() - t0
    loss, acc = model.evaluate(xt, yt, batch_size=a.batch)
    steady = [r["samples_per_s"] for r in history.reports[1:] if r["samples_per_s"] > 0]
    print(json.dumps({
        "model": "conv32-pool-conv64-pool-dense128-dense10", "policy": a.policy,
        "epochs": len(history.history.get("loss", [])), "batch": a.batch,
        "lr_schedule": a.lr_schedule,
        "train_samples": len(x), "test_samples": len(xt),
        "test_accuracy": acc, "test_loss": loss, "train_loss": history.history["loss"][-1],
        "fit_seconds": fit_s,
        "fit_samples_per_s": len(x) * len(history.epoch) / fit_s,
        "trainer_samples_per_s": statistics.median(steady) if steady else None,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
