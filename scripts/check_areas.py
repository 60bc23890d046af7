#!/usr/bin/env python3
"""Checks that no include runs up the area order (docs/ARCHITECTURE.md, Areas).

Each library folder under src/ and each public header belongs to an area
group; a file may include headers of its own group and of the groups below it,
never of one above. Exit 1 with every offending include listed."""
import pathlib
import re
import sys

# Lowest first. Public headers by the area that owns them.
ORDER = ["runtime", "compute", "nn", "io", "parallel", "train", "tools"]
PUBLIC = {
    "runtime": ["status", "number", "files", "device", "plan", "context", "half", "rng", "version",
                "cl_interop"],
    "compute": ["tensor", "ops", "activations", "losses", "conv", "dropout", "batchnorm", "gemm", "loss_scale",
                "optim", "lr_schedule", "quickbench"],
    "nn": ["model", "layer_spec", "generate"],
    "io": ["data", "npy", "safetensors", "gpt2_folder", "gpt", "batch", "model_file", "tokens", "bpe"],
    "parallel": ["dist"],
    "train": ["train", "plot", "checkpoint", "abi"],
    "tools": ["mpcl"],
}
AREA_OF_PUBLIC = {h: a for a, hs in PUBLIC.items() for h in hs}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def area_of_include(name):
    if name.startswith("mpcl/"):
        stem = pathlib.Path(name).stem
        if stem not in AREA_OF_PUBLIC:
            return "?"
        return AREA_OF_PUBLIC[stem]
    first = name.split("/")[0]
    return first if first in ORDER else None  # a local header of the same folder


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    files = []
    for area in ORDER:
        files += [(area, p) for p in sorted((root / "src" / area).glob("*.[ch]"))]
    for p in sorted((root / "include" / "mpcl").glob("*.h")):
        files.append((AREA_OF_PUBLIC.get(p.stem, "?"), p))
    bad = []
    for area, path in files:
        if area == "?":
            bad.append(f"{path.relative_to(root)}: public header without an area in {__file__}")
            continue
        for inc in INCLUDE.findall(path.read_text()):
            target = area_of_include(inc)
            if target is None:
                continue
            if target == "?":
                bad.append(f"{path.relative_to(root)}: includes {inc}, which has no area")
            elif ORDER.index(target) > ORDER.index(area):
                bad.append(f"{path.relative_to(root)} ({area}) includes {inc} ({target}), "
                           "which is above it")
    for line in bad:
        print(line)
    if bad:
        return 1
    print(f"areas: {len(files)} files, no include runs up the order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
