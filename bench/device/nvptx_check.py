#!/usr/bin/env python3
"""Before a GPU session: does every kernel of mpcl's programs assemble for
NVIDIA's sm_90?

NVIDIA's driver builds the library program (cl/meson.build's files, probes
and the matrix engine's kernels excepted) once per storage dtype, and
mpcl-mma's program (the library's head and cl/gemm_mma_nvidia.cl,
src/runtime/kernels.c's mpcl__engine_program) once per 16-bit dtype; one
kernel its assembler rejects fails its whole program: the session's first
call would find no GEMM at all. Here, clang compiles each program for
nvptx64 with libclc's builtins linked (as a driver's compiler provides
them) and CUDA's ptxas assembles it for sm_90. Registers and spills are
clang's, not the driver's (ptx_report.py reads the driver's own PTX after
a run); kernels that spill are listed, since several are CPU-shaped by
design. Exit 1 when a program does not compile or assemble; 0, saying
what was skipped, where clang with a matching libclc or ptxas is missing.
bench/device/stage.sh runs it.

usage: nvptx_check.py CL_DIR"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptx_report  # noqa: E402  (same folder)

LIBCLC = "/usr/lib/clc/nvptx64--nvidiacl.bc"
CLANG = ["-x", "cl", "-cl-std=CL1.2", "-target", "nvptx64-nvidia-nvcl", "-march=sm_80", "-O2",
         "-S", "-Xclang", "-finclude-default-header", "-Xclang", "-cl-ext=+cl_khr_fp16",
         "-Xclang", "-mlink-builtin-bitcode", "-Xclang", LIBCLC, "-Wno-linker-warnings"]
# The NVIDIA row's mpcl-mma kernels (src/runtime/matrix_engine.c's table),
# after the library program's head (its files up to common.cl).
ENGINE_FILE = "gemm_mma_nvidia.cl"
# (name, library or engine, options)
PROGRAMS = [("f32 library", "library", ["-DMPCL_STORAGE_F32=1"]),
            ("f16 library", "library", ["-DMPCL_STORAGE_F16=1"]),
            ("bf16 library", "library", ["-DMPCL_STORAGE_BF16=1"]),
            ("f16 mpcl-mma", "engine", ["-DMPCL_STORAGE_F16=1", "-DMPCL_MMA_NVIDIA=1"]),
            ("bf16 mpcl-mma", "engine", ["-DMPCL_STORAGE_BF16=1", "-DMPCL_MMA_NVIDIA=1"])]


def program_files(cl_dir, kind):
    """A program's files in order, from cl/meson.build's list: the library's,
    or mpcl-mma's."""
    meson = open(os.path.join(cl_dir, "meson.build"), encoding="utf-8").read()
    listed = re.search(r"cl_sources = files\((.*?)\)", meson, re.S)
    names = re.findall(r"'([^']+)'", listed.group(1)) if listed else []
    if kind == "engine":
        names = names[:names.index("common.cl") + 1] + [ENGINE_FILE]
    else:
        names = [n for n in names if not n.endswith("_probe.cl") and n != ENGINE_FILE]
    return [os.path.join(cl_dir, n) for n in names]


def clang_with_libclc():
    """A clang that reads libclc's bitcode (the same LLVM), or None."""
    if not os.path.exists(LIBCLC):
        return None
    for name in ["clang", *(f"clang-{v}" for v in range(20, 13, -1))]:
        clang = shutil.which(name)
        if not clang:
            continue
        p = subprocess.run([clang, *CLANG, "-o", os.devnull, "-"],
                           input="__kernel void k(__global float *x) { x[0] = 1; }",
                           capture_output=True, text=True)
        if p.returncode == 0:
            return clang
    return None


def main(cl_dir):
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    if not os.access(ptxas, os.X_OK):
        print("nvptx_check: skipped: no ptxas (CUDA's toolkit)")
        return 0
    clang = clang_with_libclc()
    if not clang:
        print(f"nvptx_check: skipped: no clang that reads {LIBCLC}")
        return 0
    failures = 0
    for name, kind, options in PROGRAMS:
        source = "\n".join(open(f, encoding="utf-8").read() for f in program_files(cl_dir, kind))
        p = subprocess.run([clang, *CLANG, *options, "-o", "-", "-"], input=source,
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(f"{name} program: clang failed:\n{p.stderr}", file=sys.stderr)
            failures += 1
            continue
        # Only the spilling kernels are listed (a pattern no kernel matches).
        if ptx_report.report(f"{name} program", p.stdout, r"^$", ptxas, "sm_90") is None:
            failures += 1
    print("nvptx_check: " + ("every program assembles for sm_90" if not failures
                             else f"{failures} program(s) failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
