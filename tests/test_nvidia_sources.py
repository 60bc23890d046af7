#!/usr/bin/env python3
"""The NVIDIA-only kernel sources (inline PTX) compile for NVIDIA's target.

No device here runs them: the matrix engine's probe (cl/mma_nvidia_probe.cl)
is built only for NVIDIA devices of compute capability 8.0 or newer. So that
such a source cannot break unseen between sessions with a GPU, clang compiles
it as OpenCL C for nvptx64 (what NVIDIA's driver compiles is the same
language) and the PTX must hold each instruction with its operands as the PTX
ISA lays them out; ptxas is not here, so what the driver's assembler says
waits for a GPU (bench/device/).

usage: test_nvidia_sources.py CLANG CL_DIR"""
import re
import subprocess
import sys

# file -> the instructions its PTX must hold, with their operand lists.
EXPECTED = {
    "mma_nvidia_probe.cl": [
        r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32 "
        r"\{%f\d+, %f\d+, %f\d+, %f\d+\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, \{%r\d+, %r\d+\}, "
        r"\{%f\d+, %f\d+, %f\d+, %f\d+\};",
        r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32 "
        r"\{%f\d+, %f\d+, %f\d+, %f\d+\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, \{%r\d+, %r\d+\}, "
        r"\{%f\d+, %f\d+, %f\d+, %f\d+\};",
    ],
}


def main(clang, cl_dir):
    targets = subprocess.run([clang, "-print-targets"], capture_output=True, text=True).stdout
    if "nvptx64" not in targets:
        print(f"{clang} has no nvptx64 target: skipped")
        return 77
    failures = 0
    for name, patterns in EXPECTED.items():
        p = subprocess.run([clang, "-x", "cl", "-cl-std=CL1.2", "-target", "nvptx64-nvidia-nvcl",
                            "-O2", "-S", "-o", "-", f"{cl_dir}/{name}"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(f"{name}: clang failed:\n{p.stderr}", file=sys.stderr)
            failures += 1
            continue
        for pattern in patterns:
            found = len(re.findall(pattern, p.stdout))
            if found != 1:
                print(f"{name}: {found} matches (want 1) of {pattern}", file=sys.stderr)
                failures += 1
    print("ok" if not failures else f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
