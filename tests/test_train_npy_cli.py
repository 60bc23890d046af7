#!/usr/bin/env python3
"""mpcl-train on NPY arrays: the data flags that contradict each other or go
in pairs are refused before anything runs, naming the flags; bad arrays are
refused naming the file and what is wrong where; u1 and f4 features with
integer labels train for an epoch, validated on a split or on --val-x/--val-y,
and --json says which files and shape it took. The arrays are written here
with numpy; small sets, so it runs in seconds on PoCL.

usage: test_train_npy_cli.py PATH/TO/mpcl-train"""
import json
import os
import sys
import tempfile
import time

import numpy as np

from train_cli_common import check, finish, run

SMALL = ["--hidden", "8", "--epochs", "1", "--precision", "float32", "--json"]


def save(d, name, a):
    path = os.path.join(d, name)
    np.save(path, a)
    return path


def test_flag_refusals():
    with tempfile.TemporaryDirectory() as d:
        x = save(d, "x.npy", np.zeros((10, 3), np.float32))
        y = save(d, "y.npy", np.zeros(10, np.int64))
        cases = [
            (["--train-x", x], "--train-x needs --train-y"),
            (["--train-y", y], "--train-y needs --train-x"),
            (["--train-x", x, "--train-y", y, "--val-x", x], "--val-x needs --val-y"),
            (["--data", d, "--train-x", x, "--train-y", y], "--data contradicts --train-x"),
            (["--train-x", x, "--train-y", y, "--val-x", x, "--val-y", y,
              "--validation-split", "0.2"], "contradict --validation-split"),
            (["--validation-split", "0"], "--validation-split: '0' must be between 0 and 1"),
            (["--validation-split", "1.5"], "--validation-split: '1.5' must be between 0 and 1"),
            (["--loss", "hinge"], "--loss: unknown loss 'hinge'"),
            (["--loss", "mse"], "--loss mse takes float targets, and the IDX files"),
            (["--train-x", x, "--train-y", y, "--loss", "binary_crossentropy", "--classes", "3"],
             "--classes applies to class labels"),
            (["--train-x", os.path.join(d, "absent.npy"), "--train-y", y],
             "--train-x: cannot read"),
        ]
        for args, want in cases:
            rc, out, err = run(args + SMALL)
            check(rc == 1 and out == "" and want in err,
                  f"{' '.join(args)}: exit 1 saying {want!r} ({rc}: {err!r})")


def test_data_refusals():
    with tempfile.TemporaryDirectory() as d:
        xs = np.ones((20, 3), np.float32)
        xs[7, 2] = np.nan
        x_nan = save(d, "x_nan.npy", xs)
        x = save(d, "x.npy", np.ones((20, 3), np.float32))
        x_short = save(d, "x_short.npy", np.ones((19, 3), np.float32))
        y = save(d, "y.npy", np.arange(20, dtype=np.int32) % 2)
        y_float = save(d, "y_float.npy", np.zeros(20, np.float32))
        y_onehot = save(d, "y_onehot.npy", np.eye(2, dtype=np.uint8)[np.arange(20) % 2])
        cases = [
            ([x_nan, y], ["x_nan.npy'", "row 7, column 2 is NaN"]),
            ([x_short, y], ["x_short.npy' has 19 rows but '", "y.npy' has 20"]),
            ([x, y_float], ["y_float.npy'", "float targets need --loss binary_crossentropy or mse"]),
            ([x, y_onehot], ["y_onehot.npy'", "y has 2 columns"]),
        ]
        for (xp, yp), wants in cases:
            rc, out, err = run(["--train-x", xp, "--train-y", yp] + SMALL)
            check(rc == 1 and out == "" and all(w in err for w in wants),
                  f"{os.path.basename(xp)}, {os.path.basename(yp)}: exit 1 saying {wants} "
                  f"({rc}: {err!r})")
        # Targets of other widths for training and validation: not one data set.
        y2 = save(d, "y2.npy", np.zeros((20, 2), np.float32))
        y3 = save(d, "y3.npy", np.zeros((20, 3), np.float32))
        rc, out, err = run(["--train-x", x, "--train-y", y2, "--val-x", x, "--val-y", y3,
                            "--loss", "mse"] + SMALL)
        check(rc == 1 and "y2.npy' have 2 target columns" in err and "y3.npy' 3" in err,
              f"2 training and 3 validation target columns: refused naming both ({rc}: {err!r})")
        # A split that leaves no training row.
        x1 = save(d, "x1.npy", np.ones((1, 3), np.float32))
        y1 = save(d, "y1.npy", np.zeros(1, np.int64))
        rc, out, err = run(["--train-x", x1, "--train-y", y1, "--validation-split", "0.5"]
                           + SMALL)
        check(rc == 1 and "validation split 0.5 of 1 rows leaves 0 for training and 1" in err,
              f"--validation-split 0.5 of one row: refused with the counts ({rc}: {err!r})")


def test_train_one_epoch():
    rng = np.random.default_rng(1)
    labels = (np.arange(400) % 3).astype(np.int64)
    with tempfile.TemporaryDirectory() as d:
        x = save(d, "x.npy", rng.integers(0, 256, (400, 4, 4), dtype=np.uint8))
        y = save(d, "y.npy", labels)
        rc, out, err = run(["--train-x", x, "--train-y", y, "--validation-split", "0.25"] + SMALL)
        if check(rc == 0, f"u1 x, split: exit 0 ({rc}: {err[-500:]!r})"):
            doc = json.loads(out)
            data = doc.get("data", {})
            check(data.get("train_x") == x and data.get("validation") == "split"
                  and data.get("validation_split") == 0.25
                  and data.get("loss") == "sparse_categorical_crossentropy",
                  f"u1 x, split: JSON names the files and the split: {data!r}")
            check(doc.get("input_shape") == [4, 4] and doc.get("classes", {}).get("count") == 3,
                  f"u1 x: input shape [4, 4], 3 classes: {doc.get('input_shape')!r}")
            check(doc.get("test_accuracy") is not None,
                  f"u1 x, split: the last quarter was evaluated: {doc.get('test_accuracy')!r}")
            check(f"train {x}, {y}" in err, f"u1 x: the banner names the files: {err[:400]!r}")
        xf = save(d, "xf.npy", rng.standard_normal((300, 5)).astype(np.float32))
        yf = save(d, "yf.npy", labels[:300].astype(np.uint8))
        xv = save(d, "xv.npy", rng.standard_normal((50, 5)).astype(np.float32))
        yv = save(d, "yv.npy", labels[:50].astype(np.int16))
        rc, out, err = run(["--train-x", xf, "--train-y", yf, "--val-x", xv, "--val-y", yv]
                           + SMALL)
        if check(rc == 0, f"f4 x, val files: exit 0 ({rc}: {err[-500:]!r})"):
            doc = json.loads(out)
            check(doc.get("data", {}).get("validation") == "files"
                  and doc.get("input_shape") == [5] and doc.get("test_accuracy") is not None,
                  f"f4 x, val files: evaluated on them, input shape [5]: {doc!r}"[:600])
        rc, out, err = run(["--train-x", xf, "--train-y", yf] + SMALL)
        if check(rc == 0, f"f4 x alone: exit 0 ({rc}: {err[-500:]!r})"):
            doc = json.loads(out)
            check(doc.get("data", {}).get("validation") == "none"
                  and doc.get("test_accuracy") is None and "test      not evaluated" in err,
                  f"f4 x alone: nothing evaluated: {doc.get('data')!r}")


def read_checkpoint_tensor(path, name):
    """One F32 tensor of a safetensors file, read here by its layout (8-byte
    header length, JSON header, data), not by mpcl."""
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    t = json.loads(blob[8:8 + n])[name]
    a, b = t["data_offsets"]
    return np.frombuffer(blob[8 + n + a:8 + n + b], np.float32).reshape(t["shape"])


def linear_model(d, inputs, activation):
    """A Keras 3 model file: Dense(1) on `inputs` features."""
    doc = {"module": "keras", "class_name": "Sequential", "config": {"name": "linear", "layers": [
        {"class_name": "InputLayer", "config": {"batch_shape": [None, inputs]}},
        {"class_name": "Dense", "config": {"units": 1, "activation": activation}}]}}
    path = os.path.join(d, f"linear-{activation}.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def test_regression_and_binary():
    """MSE on y = x w + b recovers w and b (the saved kernel and bias); binary
    cross-entropy on a separable set learns it; the metric is reported by
    its own name."""
    rng = np.random.default_rng(5)
    w, b = np.array([1.5, -2.0, 0.5, 3.0], np.float32), np.float32(0.7)
    x = rng.standard_normal((2000, 4)).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        xp = save(d, "x.npy", x)
        yp = save(d, "y.npy", (x @ w + b).astype(np.float32))
        ck = os.path.join(d, "linear.safetensors")
        rc, out, err = run(["--train-x", xp, "--train-y", yp, "--loss", "mse",
                            "--model", linear_model(d, 4, "linear"), "--epochs", "20",
                            "--batch", "32", "--lr", "0.02", "--precision", "float32",
                            "--validation-split", "0.1", "--save", ck, "--json"])
        if check(rc == 0, f"mse regression: exit 0 ({rc}: {err[-500:]!r})"):
            doc = json.loads(out)
            kernel = read_checkpoint_tensor(ck, "dense_0.kernel").ravel()
            bias = read_checkpoint_tensor(ck, "dense_0.bias")
            check(np.allclose(kernel, w, atol=0.02) and abs(bias[0] - b) < 0.02,
                  f"mse regression recovers w {w} b {b}: got {kernel} {bias}")
            check(doc.get("test_mae") is not None and doc["test_mae"] < 0.05
                  and "test_accuracy" not in doc,
                  f"mse: --json reports test_mae: {doc.get('test_mae')!r}")
            check("mae " in err and "acc " not in err, f"mse: the epoch lines say mae: {err!r}"[:500])
        yb = save(d, "yb.npy", (x @ w > 0).astype(np.float32))
        rc, out, err = run(["--train-x", xp, "--train-y", yb, "--loss", "binary_crossentropy",
                            "--model", linear_model(d, 4, "linear"), "--epochs", "8",
                            "--lr", "0.05", "--validation-split", "0.2", "--precision", "float32",
                            "--json"])
        if check(rc == 0, f"binary: exit 0 ({rc}: {err[-500:]!r})"):
            doc = json.loads(out)
            check((doc.get("test_binary_accuracy") or 0) > 0.95,
                  f"binary: separable set learnt: {doc.get('test_binary_accuracy')!r}")
        # Float targets with the sparse loss are refused, naming the file.
        rc, out, err = run(["--train-x", xp, "--train-y", yp, "--hidden", "4", "--epochs", "1"])
        check(rc == 1 and "y.npy" in err, f"float targets, sparse loss: refused ({rc}: {err!r})")


def main():
    t0 = time.time()
    test_flag_refusals()
    test_data_refusals()
    test_train_one_epoch()
    test_regression_and_binary()
    return finish("mpcl-train NPY", t0)


if __name__ == "__main__":
    sys.exit(main())
