#!/usr/bin/env python3
"""An independent reader for files from mpcl_safetensors_write.

Uses only the standard library (struct + json), so it runs where neither
numpy nor the safetensors package is installed, and shares no code with the
C reader. Usage: safetensors_check.py FILE EXPECTED.json

EXPECTED.json: {"metadata": {key: value}, "order": [names in header order],
"tensors": {name: {"dtype": "F32", "shape": [..], "values": [..]}}}.
Float values are compared after rounding to the stored precision; exit 0
when everything matches, 1 with a message otherwise.
"""
import json
import struct
import sys

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2,
         "I8": 1, "U8": 1, "BOOL": 1}
FORMATS = {"F64": "d", "F32": "f", "F16": "e", "I64": "q", "I32": "i", "I16": "h",
           "I8": "b", "U8": "B", "BOOL": "?"}


def fail(msg):
    print("safetensors_check: " + msg, file=sys.stderr)
    sys.exit(1)


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        fail("duplicate key in header")
    return dict(pairs)


def decode(dtype, raw):
    if dtype == "BF16":
        # bfloat16 is the top half of a float32.
        return [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
    n = len(raw) // SIZES[dtype]
    return list(struct.unpack("<%d%s" % (n, FORMATS[dtype]), raw))


def stored(dtype, v):
    """v rounded to the precision of dtype, as Python float or int."""
    if dtype in ("F32", "F16", "F64"):
        f = FORMATS[dtype]
        return struct.unpack("<" + f, struct.pack("<" + f, v))[0]
    if dtype == "BF16":
        return v  # the C test writes values exact in bfloat16
    return v


def main():
    path, expected_path = sys.argv[1], sys.argv[2]
    with open(path, "rb") as f:
        blob = f.read()
    with open(expected_path, encoding="utf-8") as f:
        want = json.load(f)
    if len(blob) < 8:
        fail("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        fail("header length beyond file")
    if (8 + n) % 8:
        fail("data section not 8-byte aligned (header length %d)" % n)
    text = blob[8:8 + n].decode("utf-8")
    header = json.loads(text, object_pairs_hook=no_duplicates)
    data = blob[8 + n:]

    meta = header.pop("__metadata__", {})
    if meta != want["metadata"]:
        fail("metadata %r != expected %r" % (meta, want["metadata"]))
    if list(header.keys()) != want["order"]:
        fail("header order %r != %r" % (list(header.keys()), want["order"]))

    spans = []
    for name, info in header.items():
        if set(info) != {"dtype", "shape", "data_offsets"}:
            fail("%s: fields %r" % (name, sorted(info)))
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        count = 1
        for d in shape:
            count *= d
        if end - begin != count * SIZES[dtype]:
            fail("%s: %d bytes for shape %r of %s" % (name, end - begin, shape, dtype))
        if begin % SIZES[dtype]:
            fail("%s: begin %d not aligned to %d" % (name, begin, SIZES[dtype]))
        spans.append((begin, end, name))
        exp = want["tensors"][name]
        if dtype != exp["dtype"] or shape != exp["shape"]:
            fail("%s: %s %r, expected %s %r" % (name, dtype, shape, exp["dtype"], exp["shape"]))
        got = decode(dtype, data[begin:end])
        exp_values = [stored(dtype, v) for v in exp["values"]]
        if got != exp_values:
            fail("%s: values %r != expected %r" % (name, got[:8], exp_values[:8]))
    spans.sort()
    at = 0
    for begin, end, name in spans:
        if begin != at:
            fail("%s begins at %d, previous tensor ended at %d" % (name, begin, at))
        at = end
    if at != len(data):
        fail("tensors cover %d of %d data bytes" % (at, len(data)))
    if set(header) != set(want["tensors"]):
        fail("tensor names %r != %r" % (sorted(header), sorted(want["tensors"])))
    print("safetensors_check: %d tensors, %d metadata entries match" % (len(header), len(meta)))


if __name__ == "__main__":
    main()
