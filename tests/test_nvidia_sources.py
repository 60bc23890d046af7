#!/usr/bin/env python3
"""The NVIDIA-only kernel sources (inline PTX) compile for NVIDIA's target.

No device here runs them: the matrix engine's probe (cl/mma_nvidia_probe.cl)
is built only for NVIDIA devices of compute capability 8.0 or newer, and
mpcl-mma's kernels (cl/gemm_mma_nvidia.cl) only into such a device's 16-bit
programs once the probe verified. So that
such a source cannot break unseen between sessions with a GPU, clang compiles
it as OpenCL C for nvptx64 (what NVIDIA's driver compiles is the same
language) and the PTX must hold each instruction with its operands as the PTX
ISA lays them out. Where CUDA's ptxas is installed (it is not part of
scripts/setup.sh: CUDA's toolkit is not in Debian's main archive), that PTX
is also assembled for sm_80 and sm_90, as the driver's own assembler does
with the PTX its compiler emits: the inline PTX must assemble, and no kernel
may spill to local memory. clang's register allocation is not NVIDIA's
compiler's, so the registers it prints are a guide, not the driver's figure;
what the driver makes of it waits for a GPU (bench/device/).

usage: test_nvidia_sources.py CLANG CL_DIR [PTXAS]"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench",
                                "device"))
import ptx_report  # noqa: E402  (bench/device/ptx_report.py)

MMA = (r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.{t}\.{t}\.f32 "
       r"\{{%f\d+, %f\d+, %f\d+, %f\d+\}}, \{{%r\d+, %r\d+, %r\d+, %r\d+\}}, \{{%r\d+, %r\d+\}}, "
       r"\{{%f\d+, %f\d+, %f\d+, %f\d+\}};")
LDMATRIX = (r"ldmatrix\.sync\.aligned\.m8n8\.x4{t}\.shared\.b16 "
            r"\{{%r\d+, %r\d+, %r\d+, %r\d+\}}, \[%r\d+\];")
CP_ASYNC = r"cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16, %r\d+;"
# The library program's head, which mpcl-mma's kernels build after.
LIBRARY_HEAD = ["abi.h", "../include/mpcl/activations.h", "common.cl"]


def pipelined_counts(cl_dir):
    """What the pipelined kernels hold, unrolled, from the tile rows of
    MPCL_ABI_MMA_PIPE_TILES (cl/abi.h): per kernel (3 transpose pairs, 2 C
    dtypes per row) each warp's (rows / wm / 16) x (cols / wn / 8) mma tiles
    for both 16-deep steps of a 32-deep block; an ldmatrix per 16 rows of
    A's part and per 16 columns of B's, each step; the 16-byte copies of a
    block, A's and B's, divided among the items."""
    abi = open(os.path.join(cl_dir, "abi.h"), encoding="utf-8").read()
    rows = re.findall(r"X\(\w+, (\d+), (\d+), (\d+), (\d+)\)", abi)
    assert rows, "no MPCL_ABI_MMA_PIPE_TILES rows in abi.h"
    mma = ldsm_a = ldsm_b = copies = 0
    for r, c, wm, wn in ((int(v) for v in row) for row in rows):
        items = 32 * wm * wn
        mma += 6 * 2 * (r // wm // 16) * (c // wn // 8)
        # A is transposed (.trans) in TN only, B in NN and TN (stored K x N).
        ldsm_a += 2 * 2 * (r // wm // 16)
        ldsm_b += 2 * 2 * (c // wn // 16)
        copies += 6 * (r * 32 // 8 + c * 32 // 8) // items
    return len(rows), mma, ldsm_a, ldsm_b, copies


def cases(cl_dir):
    """(what, files joined in order, clang options, [(pattern, count)]): the
    probe holds one mma per dtype; mpcl-mma's program for a 16-bit storage
    dtype holds mpcl_gemm_mma's two kernels (C in storage and in f32), each 2
    x 4 tiles for each of the two 16-deep steps of a 32-deep block, unrolled:
    16 each, then the pipelined kernels. No local (stack) memory: the
    accumulators must stay in registers."""
    tiles, mma, ldsm_a, ldsm_b, copies = pipelined_counts(cl_dir)
    # Of the ldmatrix, .trans: A's in TN, B's in NN and TN; plain: A's in NN
    # and NT, B's in NT. (Each count above is per pair, over both C dtypes.)
    trans = ldsm_a + 2 * ldsm_b
    plain = 2 * ldsm_a + ldsm_b
    return [
        ("the matrix engine's probe", ["mma_nvidia_probe.cl"], [],
         [(MMA.format(t="f16"), 1), (MMA.format(t="bf16"), 1)]),
    ] + [
        (f"mpcl-mma for {dt} storage", LIBRARY_HEAD + ["gemm_mma_nvidia.cl"],
         [f"-DMPCL_STORAGE_{dt.upper()}=1", "-DMPCL_MMA_NVIDIA=1"],
         [(MMA.format(t=dt), 32 + mma), (r"\.entry mpcl_gemm_mma\(", 1),
          (r"\.entry mpcl_gemm_mma_cf32\(", 1),
          (r"\.entry mpcl_gemm_mma_\w+_(nn|nt|tn)\(", 3 * tiles),
          (r"\.entry mpcl_gemm_mma_\w+_(nn|nt|tn)_cf32\(", 3 * tiles),
          (LDMATRIX.format(t=r"\.trans"), trans), (LDMATRIX.format(t=""), plain),
          (CP_ASYNC, copies), (r"cp\.async\.commit_group;", 6 * tiles),
          (r"cp\.async\.wait_group 1;", 6 * tiles), (r"(ld|st)\.local", 0)])
        for dt in ("f16", "bf16")
    ]


# clang's own OpenCL header declares vload_half and the like for nvptx only
# with cl_khr_fp16 (NVIDIA's driver has them regardless); common.cl uses them.
# sm_80 is the engine's oldest generation (mma's bf16 and cp.async need it).
CLANG = ["-x", "cl", "-cl-std=CL1.2", "-target", "nvptx64-nvidia-nvcl", "-march=sm_80", "-O2",
         "-S", "-Xclang", "-finclude-default-header", "-Xclang", "-cl-ext=+cl_khr_fp16"]
# The builtins the kernels call, as NVIDIA's driver provides them. clang
# leaves them as calls to functions that only libclc defines, which ptxas
# cannot resolve: the work-item ones read special registers, and the scalar
# conversions (common.cl's bf16 load and store; not saturating) are casts.
BUILTINS = """
#define MPCL_SREG(what, d) ((size_t)((d) == 0 ? __nvvm_read_ptx_sreg_##what##_x() \\
    : (d) == 1 ? __nvvm_read_ptx_sreg_##what##_y() : __nvvm_read_ptx_sreg_##what##_z()))
#define get_group_id(d) MPCL_SREG(ctaid, d)
#define get_local_id(d) MPCL_SREG(tid, d)
#define barrier(flags) __nvvm_bar_sync(0)
#define convert_uint(x) ((uint)(x))
#define convert_ushort(x) ((ushort)(x))
"""
# The PTX clang wrote for sm_80 is assembled for each (ptxas takes PTX of
# an older target), by bench/device/ptx_report.py's report.
PTXAS_ARCHES = ["sm_80", "sm_90"]


def assemble(ptxas, what, ptx):
    """The count of failures: an architecture ptxas does not assemble the
    PTX for, and each kernel that spills; every kernel's registers printed."""
    failures = 0
    for arch in PTXAS_ARCHES:
        spilling = ptx_report.report(what, ptx, r".", ptxas, arch)
        failures += 1 if spilling is None else spilling
    return failures


def main(clang, cl_dir, ptxas=None):
    targets = subprocess.run([clang, "-print-targets"], capture_output=True, text=True).stdout
    if "nvptx64" not in targets:
        print(f"{clang} has no nvptx64 target: skipped")
        return 77
    failures = 0
    for what, files, options, patterns in cases(cl_dir):
        source = BUILTINS + "\n".join(
            open(os.path.join(cl_dir, f), encoding="utf-8").read() for f in files)
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
        if ptxas:
            failures += assemble(ptxas, what, p.stdout)
    if not ptxas:
        print("no ptxas (CUDA's toolkit): the PTX was not assembled")
    print("ok" if not failures else f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
