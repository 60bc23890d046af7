#!/usr/bin/env python3
"""The NVIDIA-only kernel sources (inline PTX) compile for NVIDIA's target.

No device here runs them: the matrix engine's probe (cl/mma_nvidia_probe.cl)
is built only for NVIDIA devices of compute capability 8.0 or newer, and
mpcl-mma's kernels (cl/gemm_mma_nvidia.cl) only into such a device's 16-bit
programs once the probe verified. So that
such a source cannot break unseen between sessions with a GPU, clang compiles
it as OpenCL C for nvptx64 (what NVIDIA's driver compiles is the same
language) and the PTX must hold each instruction with its operands as the PTX
ISA lays them out; ptxas is not here, so what the driver's assembler says
waits for a GPU (bench/device/).

usage: test_nvidia_sources.py CLANG CL_DIR"""
import os
import re
import subprocess
import sys

MMA = (r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.{t}\.{t}\.f32 "
       r"\{{%f\d+, %f\d+, %f\d+, %f\d+\}}, \{{%r\d+, %r\d+, %r\d+, %r\d+\}}, \{{%r\d+, %r\d+\}}, "
       r"\{{%f\d+, %f\d+, %f\d+, %f\d+\}};")
# The library program's head, which mpcl-mma's kernels build after.
LIBRARY_HEAD = ["abi.h", "../include/mpcl/activations.h", "common.cl"]
# (what, files joined in order, clang options, [(pattern, count)]): the probe
# holds one mma per dtype; mpcl-mma's program for a 16-bit storage dtype
# holds its two kernels (C in storage and in f32), each 2 x 4 tiles for each
# of the two 16-deep steps of a 32-deep block, unrolled: 16 each. No local
# (stack) memory: the accumulators must stay in registers.
CASES = [
    ("the matrix engine's probe", ["mma_nvidia_probe.cl"], [],
     [(MMA.format(t="f16"), 1), (MMA.format(t="bf16"), 1)]),
] + [
    (f"mpcl-mma for {dt} storage", LIBRARY_HEAD + ["gemm_mma_nvidia.cl"],
     [f"-DMPCL_STORAGE_{dt.upper()}=1", "-DMPCL_MMA_NVIDIA=1"],
     [(MMA.format(t=dt), 32), (r"\.entry mpcl_gemm_mma\(", 1), (r"\.entry mpcl_gemm_mma_cf32\(", 1),
      (r"(ld|st)\.local", 0)])
    for dt in ("f16", "bf16")
]
# clang's own OpenCL header declares vload_half and the like for nvptx only
# with cl_khr_fp16 (NVIDIA's driver has them regardless); common.cl uses them.
CLANG = ["-x", "cl", "-cl-std=CL1.2", "-target", "nvptx64-nvidia-nvcl", "-O2", "-S",
         "-Xclang", "-finclude-default-header", "-Xclang", "-cl-ext=+cl_khr_fp16"]


def main(clang, cl_dir):
    targets = subprocess.run([clang, "-print-targets"], capture_output=True, text=True).stdout
    if "nvptx64" not in targets:
        print(f"{clang} has no nvptx64 target: skipped")
        return 77
    failures = 0
    for what, files, options, patterns in CASES:
        source = "\n".join(open(os.path.join(cl_dir, f), encoding="utf-8").read() for f in files)
        p = subprocess.run([clang, *CLANG, *options, "-o", "-", "-"], input=source,
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(f"{what}: clang failed:\n{p.stderr}", file=sys.stderr)
            failures += 1
            continue
        for pattern, want in patterns:
            found = len(re.findall(pattern, p.stdout))
            if found != want:
                print(f"{what}: {found} matches (want {want}) of {pattern}", file=sys.stderr)
                failures += 1
    print("ok" if not failures else f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
