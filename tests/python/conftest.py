"""Shared fixtures for the Python package's tests. Run by meson (suite
`python`, on PoCL) with MPCL_LIBRARY, PYTHONPATH, MPCL_TRAIN and MPCL_PROBE set
to the build's library, python/, and tools. Every test uses small subsets of
Fashion-MNIST so that the whole suite takes well under two minutes."""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import mpcl

TRAIN_N, TEST_N = 2048, 512
FASHION = "/usr/share/datasets/fashion-mnist"


@pytest.fixture(scope="session")
def data():
    """First TRAIN_N training and TEST_N test samples, x (n, 784) uint8."""
    (x, y), (xt, yt) = mpcl.datasets.fashion_mnist.load_data()
    return (x.reshape(-1, 784)[:TRAIN_N], y[:TRAIN_N], xt.reshape(-1, 784)[:TEST_N], yt[:TEST_N])


@pytest.fixture(scope="session")
def train_exe():
    return os.environ["MPCL_TRAIN"]


@pytest.fixture(autouse=True)
def float32_policy():
    mpcl.mixed_precision.set_global_policy("float32")
    yield
    mpcl.mixed_precision.set_global_policy("float32")


def seed_model(hidden=128):
    model = mpcl.Sequential([mpcl.layers.Dense(hidden, activation="relu", input_shape=(784,)),
                             mpcl.layers.Dense(10)])
    model.compile(optimizer=mpcl.optimizers.Adam(1e-3),
                  loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def run_cli(exe, *args, check=True):
    p = subprocess.run([exe, "--data", FASHION, "--train-limit", str(TRAIN_N), "--test-limit",
                        str(TEST_N), "--quiet", *args], capture_output=True, text=True,
                       timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def read_safetensors(path):
    """An independent reader (the format is an 8-byte length, a JSON header and
    the data): {name: array (F32 as float32, I32 as int32)}, metadata."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        dtype = {"F32": "<f4", "I32": "<i4"}[t["dtype"]]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype).reshape(t["shape"])
    return out, meta


def run_python(code, env=None, timeout=120):
    """Runs code in a fresh interpreter (for what needs its own process: a
    device selector, a signal)."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                          timeout=timeout)
