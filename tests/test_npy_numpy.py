#!/usr/bin/env python3
"""The NPY reader (mpcl_npy_read) against files numpy itself writes: every
dtype mpcl reads, in NPY versions 1.0, 2.0 and 3.0 and through numpy.save,
at 1 to 8 dimensions and with empty arrays, must come back with numpy's
dtype, shape and bytes, bit for bit; what numpy writes that mpcl does not
read (big-endian, Fortran order, complex, objects, records, scalars,
9 dimensions), numpy's files cut short or lengthened, and NaN or inf in
float arrays must each be refused naming the file and what is wrong.

usage: test_npy_numpy.py PATH/TO/npy_dump"""
import os
import subprocess
import sys
import tempfile

import numpy as np

DUMP = sys.argv[1]
failures = []

# mpcl's names, which are numpy's dtype.str without the byte order.
DTYPES = ["u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8", "f2", "f4", "f8"]
SHAPES = [(7,), (3, 5), (2, 3, 4), (0,), (0, 3), (4, 0), (1, 1, 1, 1, 1, 1, 2, 3)]
VERSIONS = [(1, 0), (2, 0), (3, 0), None]  # None: numpy.save's own choice


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)
    return ok


def dump(path, *flags):
    r = subprocess.run([DUMP, *flags, path], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def save(path, a, version):
    if version is None:
        np.save(path, a, allow_pickle=a.dtype.hasobject)
    else:
        with open(path, "wb") as f:
            np.lib.format.write_array(f, a, version=version, allow_pickle=a.dtype.hasobject)


def values(rng, name, shape):
    """Values over the dtype's whole range: integers from min to max, floats
    from random bits (NaN and inf replaced), so every bit of every byte
    varies."""
    dt = np.dtype("<" + name)
    n = int(np.prod(shape))
    raw = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8).view(dt)
    if dt.kind == "f":
        raw = np.where(np.isfinite(raw), raw, dt.type(-0.0))
    return raw.reshape(shape)


def test_round_trips(d):
    rng = np.random.default_rng(20261204)
    path = os.path.join(d, "a.npy")
    for name in DTYPES:
        for shape in SHAPES:
            for version in VERSIONS:
                a = values(rng, name, shape)
                save(path, a, version)
                rc, out, err = dump(path)
                what = f"{name} {shape} version {version}"
                if not check(rc == 0, f"{what}: read ({err.strip()})"):
                    continue
                got = dict(line.split(" ", 1) if " " in line else (line, "")
                           for line in out.splitlines())
                check(got["dtype"] == a.dtype.str[1:], f"{what}: dtype {got['dtype']}")
                check(got["shape"].split() == [str(s) for s in a.shape],
                      f"{what}: shape {got['shape']}")
                check(int(got["rows"]) == a.shape[0], f"{what}: rows {got['rows']}")
                check(int(got["cols"]) == int(np.prod(a.shape[1:])), f"{what}: cols {got['cols']}")
                check(int(got["count"]) == a.size, f"{what}: count {got['count']}")
                check(got["data"] == a.astype(a.dtype.newbyteorder("<")).tobytes().hex(),
                      f"{what}: the bytes differ")


# What numpy writes that mpcl refuses, with what the message must say.
REFUSED = [
    ("big-endian f4", lambda: np.arange(6, dtype=">f4"), "header 'descr' is '>f4' (big-endian)"),
    ("big-endian i8", lambda: np.arange(6, dtype=">i8"), "header 'descr' is '>i8' (big-endian)"),
    ("Fortran order", lambda: np.asfortranarray(np.ones((3, 4), dtype="<f4")),
     "header 'fortran_order' is True"),
    ("complex", lambda: np.ones(3, dtype="<c8"), "header 'descr' is '<c8' (complex)"),
    ("objects", lambda: np.array([None, 1], dtype=object),
     "header 'descr' is '|O' (Python objects)"),
    ("bool", lambda: np.ones(3, dtype=bool), "header 'descr' is '|b1' (bool)"),
    ("strings", lambda: np.array(["ab"]), "header 'descr' is '<U2' (strings)"),
    ("records", lambda: np.zeros(3, dtype=[("a", "<f4"), ("b", "<i4")]),
     "header 'descr' is a list (a structured dtype)"),
    ("scalar", lambda: np.float32(1.5), "header 'shape' is () (a scalar)"),
    ("9 dimensions", lambda: np.zeros((1,) * 9, dtype="<f4"),
     "'shape' has more than 8 dimensions"),
]


def test_refused(d):
    path = os.path.join(d, "refused.npy")
    for what, make, text in REFUSED:
        save(path, np.asarray(make()), None)
        rc, out, err = dump(path)
        check(rc == 1 and out == "" and "MPCL_ERR_FORMAT" in err and f"'{path}'" in err
              and text in err, f"{what}: refused naming the file and {text!r} ({rc}: {err!r})")


def test_length(d):
    """numpy's file cut by one element or lengthened by one byte."""
    path = os.path.join(d, "length.npy")
    a = np.arange(12, dtype="<f4").reshape(3, 4)
    np.save(path, a)
    whole = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(whole[:-4])
    rc, out, err = dump(path)
    check(rc == 1 and f"'{path}': data are 44 bytes, but header 'shape' (3, 4) of f4 needs 48 "
          "(truncated)" in err, f"truncated: both byte counts ({rc}: {err!r})")
    with open(path, "wb") as f:
        f.write(whole + b"\0")
    rc, out, err = dump(path)
    check(rc == 1 and f"'{path}': data are 49 bytes, 1 more than header 'shape' (3, 4) of f4 "
          "needs (the header lies" in err, f"trailing byte: the header lies ({rc}: {err!r})")


def test_finite(d):
    path = os.path.join(d, "finite.npy")
    cases = [
        ("f4", (4, 5), (2, 3), np.nan, "row 2, column 3 is NaN"),
        ("f4", (4, 5), (0, 0), -np.inf, "row 0, column 0 is -inf"),
        ("f2", (2, 3, 4), (1, 0, 2), -np.inf, "row 1, column 2 (element [1, 0, 2]) is -inf"),
        ("f2", (3, 2), (2, 1), np.nan, "row 2, column 1 is NaN"),
        ("f8", (6,), (4,), np.inf, "row 4 is inf"),
        ("f8", (2, 2, 2, 2), (1, 1, 0, 1), np.nan, "row 1, column 5 (element [1, 1, 0, 1]) is NaN"),
    ]
    for name, shape, at, bad, text in cases:
        a = np.ones(shape, dtype="<" + name)
        np.save(path, a)
        rc, out, err = dump(path, "--finite")
        check(rc == 0 and out == "finite\n", f"{name} {shape}: all finite ({rc}: {err!r})")
        a[at] = bad
        # A second bad element after the first: the message names the first.
        a.flat[-1] = np.nan
        np.save(path, a)
        rc, out, err = dump(path, "--finite")
        check(rc == 1 and f"'{path}': {text}" in err,
              f"{name} {shape}: {bad} at {at} named ({rc}: {err!r})")
    # Integers are always finite, whatever their bits.
    np.save(path, np.full((3, 3), -1, dtype="<i4"))
    rc, out, err = dump(path, "--finite")
    check(rc == 0 and out == "finite\n", f"i4: finite ({rc}: {err!r})")


def main():
    with tempfile.TemporaryDirectory() as d:
        test_round_trips(d)
        test_refused(d)
        test_length(d)
        test_finite(d)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("all NPY checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
