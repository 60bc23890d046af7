#!/usr/bin/env python3
"""What NVIDIA's assembler makes of the driver's own PTX: registers, spills
and shared memory per kernel.

NVIDIA's OpenCL driver returns a program's PTX as its binary, and mpcl's
program cache keeps each binary behind a header (src/runtime/cache.c): so
the cache that `bench/device/run.sh mma` brings back (ptx.tar.gz) holds the
PTX the driver's compiler wrote for every program the run built. This
script takes the PTX out of each entry and runs CUDA's ptxas -v on it for
the target it names, here, where the toolkit is installed: the registers
the kernels get on the GPU, which clang's PTX (tests/test_nvidia_sources.py)
only approximates, and whether any kernel spills. ptxas here may be newer
than the driver's own; the figures are its, for the driver's PTX.

usage: ptx_report.py PTX_TAR_GZ_OR_CACHE_DIR [KERNEL_REGEX] [PTXAS]
       (KERNEL_REGEX defaults to mpcl_gemm_mma; every kernel that spills is
       listed whatever it matches)"""
import os
import re
import shutil
import subprocess
import sys
import tarfile

# An entry: the magic, the key (32), the binary's size (8, little-endian),
# the tag (32), then the binary (src/runtime/cache.c).
MAGIC = b"MPCLBIN2"
HEADER_BYTES = 8 + 32 + 8 + 32


def entries(path):
    """(name, bytes) of every file under a directory or in a tar.gz."""
    if os.path.isdir(path):
        for root, _, files in os.walk(path):
            for f in sorted(files):
                with open(os.path.join(root, f), "rb") as fh:
                    yield os.path.join(root, f), fh.read()
        return
    if not os.path.isfile(path) or not tarfile.is_tarfile(path):
        sys.exit(f"ptx_report.py: {path} is neither a directory nor a tar archive")
    with tarfile.open(path) as tar:
        for member in tar:
            if member.isfile():
                yield member.name, tar.extractfile(member).read()


def ptx_of(data):
    """The PTX text of a cache entry, or None (another format, or not PTX)."""
    if len(data) < HEADER_BYTES or data[:8] != MAGIC:
        return None
    size = int.from_bytes(data[40:48], "little")
    body = data[HEADER_BYTES:HEADER_BYTES + size]
    if len(body) != size or b".version" not in body[:4096]:
        return None
    return body.rstrip(b"\0").decode("utf-8", errors="replace")


# ptxas -v reports each entry as "Compiling entry function 'NAME' for
# 'sm_XX'", its stack frame and spills, then "Used N registers, ...".
ENTRY = re.compile(r"entry function '(\w+)'.*?(\d+) bytes stack frame, (\d+) bytes spill stores, "
                   r"(\d+) bytes spill loads.*?Used (\d+) registers(?:, used \d+ barriers)?"
                   r"(?:, (\d+) bytes smem)?", re.S)


def report(name, ptx, pattern, ptxas, arch=None):
    """Assembles one program for arch (default: the PTX's own .target; ptxas
    takes PTX written for an older one) and prints its kernels that match
    pattern or spill; returns how many spill, or None when ptxas does not
    assemble it or reports no kernel. Also tests/test_nvidia_sources.py's."""
    target = re.search(r"^\.target\s+(sm_\d+)", ptx, re.M)
    arch = arch or (target.group(1) if target else None)
    if not arch:
        print(f"{name}: no .target line", file=sys.stderr)
        return None
    p = subprocess.run([ptxas, f"-arch={arch}", "-v", "-o", os.devnull, "-"],
                       input=ptx, capture_output=True, text=True)
    kernels = ENTRY.findall(p.stderr)
    if p.returncode != 0 or not kernels:
        print(f"{name}: ptxas -arch={arch} failed or found no kernel:\n{p.stderr}",
              file=sys.stderr)
        return None
    spilling = 0
    print(f"{name} ({arch}):")
    for kernel, stack, spill_st, spill_ld, regs, smem in kernels:
        spills = int(stack) or int(spill_st) or int(spill_ld)
        spilling += bool(spills)
        if spills or re.search(pattern, kernel):
            note = f", SPILLS: {stack} B stack, {spill_st}/{spill_ld} B" if spills else ""
            print(f"  {kernel}: {regs} registers, {smem or 0} B static smem{note}")
    return spilling


def main(path, pattern="mpcl_gemm_mma", ptxas=None):
    ptxas = ptxas or shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    if not os.access(ptxas, os.X_OK):
        sys.exit(f"ptx_report.py: no ptxas (CUDA's toolkit) at {ptxas}")
    programs = spilling = failed = 0
    for name, data in entries(path):
        ptx = ptx_of(data)
        if ptx is None:
            continue
        programs += 1
        spills = report(os.path.basename(name), ptx, pattern, ptxas)
        failed += spills is None
        spilling += spills or 0
    if not programs:
        sys.exit(f"ptx_report.py: no PTX in {path} (a cache from NVIDIA's driver holds it)")
    print(f"{programs} program(s), {spilling} kernel(s) spilling, {failed} not assembled")
    return 1 if spilling or failed else 0


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3, 4):
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
