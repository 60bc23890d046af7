"""Data sets as Keras' loaders give them, read by libmpcl's IDX reader."""

import ctypes
import os

import numpy as np

from . import _lib
from ._lib import call, lib

#: Where Debian's dataset-fashion-mnist package puts the files (as mpcl-train).
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


def load_idx(path, prefix):
    """(x, y) from <path>/<prefix>-images-idx3-ubyte[.gz] and the labels: x
    uint8 (n, rows, cols), y uint8 (n,)."""
    ds = _lib.P()
    call(lib.mpcl_idx_load, os.fsencode(path), prefix.encode(), ctypes.byref(ds))
    try:
        n, r, c = (lib.mpcl_dataset_count(ds), lib.mpcl_dataset_rows(ds),
                   lib.mpcl_dataset_cols(ds))
        x = np.frombuffer(ctypes.string_at(lib.mpcl_dataset_pixels(ds), n * r * c), np.uint8)
        y = np.frombuffer(ctypes.string_at(lib.mpcl_dataset_labels(ds), n), np.uint8)
        return x.reshape(n, r, c).copy(), y.copy()
    finally:
        lib.mpcl_dataset_destroy(ds)


class fashion_mnist:
    @staticmethod
    def load_data(path=None):
        """((x_train, y_train), (x_test, y_test)) as keras.datasets.fashion_mnist
        gives them: uint8 images (n, 28, 28) and uint8 labels (n,). path: a
        folder of the IDX files (default the Debian package's)."""
        path = path or FASHION_MNIST_DIR
        return load_idx(path, "train"), load_idx(path, "t10k")
