#!/usr/bin/env python3
"""tests/oclgrind_check.py fails on what Oclgrind reports, and only on that.

The wrapper has passed everything twice: once because it read a log file
Oclgrind 21.10 left empty, once because it let Oclgrind stop after 1000
reports and did not know some kinds of report at all. So it is run here
against a stand-in `oclgrind` first on PATH, which prints report blocks in
Oclgrind 21.10's format (copied from its output on mpcl's kernels) to stderr,
records its arguments and environment, and runs the command it was given.
No Oclgrind is needed.

usage: test_oclgrind_check.py WRAPPER"""
import json
import os
import subprocess
import sys
import tempfile

STAND_IN = r'''#!/usr/bin/env python3
import json, os, subprocess, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "call.json"), "w") as f:
    json.dump({"args": sys.argv[1:], "max": os.environ.get("OCLGRIND_MAX_ERRORS")}, f)
sys.stderr.write(open(os.path.join(here, "stderr.txt")).read())
command = [a for a in sys.argv[1:] if not a.startswith("--")]
sys.exit(subprocess.run(command).returncode)
'''

UNINIT_WRITE = """Uninitialized value written to global memory address 0x4000000000004
\tKernel: mpcl_binary_xent
\tEntity: Global(0,0,0) Local(0,0,0) Group(0,0,0)
\t  store float %sub5.i, float addrspace(1)* %2, align 4
\tAt line 2240 (column 17) of input.cl:
\t  stats[comp] = as_uint((t - sum) - y);
"""
UNINIT_BRANCH = """Controlflow depends on uninitialized value
\tKernel: mpcl_mse
\tEntity: Global(1,0,0) Local(1,0,0) Group(0,0,0)
\t  %call = tail call spir_func i32 @_Z3minjj(i32 noundef %10, i32 noundef %11)
\tAt line 2228 (column 28) of input.cl:
\t  l_first[lid] = min(l_first[lid], l_first[lid + half_n]);
"""
OUT_OF_BOUNDS = """Invalid write of size 4 at global memory address 0x1000000061a80
\tKernel: mpcl_fill
\tEntity: Global(100000,0,0) Local(0,0,0) Group(1562,0,0)
\t  store float %value, float addrspace(1)* %arrayidx, align 4
\tAt line 5 (column 28) of input.cl:
\t  if (i < n) STORE(x, i, value);
"""
RACE = """Read-write data race at local memory address 0x40
\tKernel: mpcl_softmax_xent

First entity:  Global(0,0,0) Local(0,0,0) Group(0,0,0)
  %0 = load float, float addrspace(3)* %arrayidx
"""
FREEZE = """OCLGRIND FATAL ERROR (./src/plugins/Uninitialized.cpp:1805)
Unsupported instruction: freeze
\tKernel: mpcl_attention_forward
\tEntity: Global(0,0,0) Local(0,0,0) Group(0,0,0)
\t  %conv.frozen = freeze i32 %conv
\tDebugging information not available.
"""
CAPPED = "Oclgrind: 1000 errors generated - suppressing further errors\n"
HALF_PROBE = """OCLGRIND FATAL ERROR (./src/core/common.cpp:162)
Unsupported float size: 2 bytes
\tKernel: probe_half_math
\tEntity: Global(0,0,0) Local(0,0,0) Group(0,0,0)
\t  %conv = fptrunc float %0 to half
"""
DEVICE_QUERY = """Oclgrind - OpenCL runtime error detected
\tFunction: clGetDeviceInfo
\tError:    CL_INVALID_VALUE
\tFor argument 'param_name'.
"""
BAD_KERNEL_NAME = """Oclgrind - OpenCL runtime error detected
\tFunction: clCreateKernel
\tError:    CL_INVALID_KERNEL_NAME
\tKernel name 'mpcl_no_such_kernel' not found.
"""
TEST_OUTPUT = "[==========] Running 1 test(s).\ntest_x: seed 42\n"

# (what, the test's name, its exit status, Oclgrind's stderr, the wrapper's status)
CASES = [
    ("no report", "test_ops", 0, TEST_OUTPUT, 0),
    ("the test's own failure", "test_ops", 3, TEST_OUTPUT, 3),
    ("an uninitialized value written", "test_losses", 0, UNINIT_WRITE, 1),
    ("a branch on an uninitialized value", "test_losses", 0, UNINIT_BRANCH, 1),
    ("an out-of-bounds write", "test_tensor", 0, OUT_OF_BOUNDS, 1),
    ("a data race", "test_losses", 0, RACE, 1),
    ("a kernel the checker cannot run", "test_embedding", 0, FREEZE, 1),
    ("reports suppressed", "test_ops", 0, CAPPED, 1),
    ("the half-math probe", "test_device", 0, HALF_PROBE, 0),
    ("a device query newer than OpenCL 1.2", "test_device", 0, DEVICE_QUERY, 0),
    ("a kernel name test_kernels asks for on purpose", "test_kernels", 0, BAD_KERNEL_NAME, 0),
    ("the same error in another test", "test_ops", 0, BAD_KERNEL_NAME, 1),
    ("an expected report beside an unexpected one", "test_device", 0,
     HALF_PROBE + "\n" + OUT_OF_BOUNDS, 1),
]


def run_case(wrapper, folder, test, status, stderr):
    with open(os.path.join(folder, "stderr.txt"), "w") as f:
        f.write(stderr)
    program = os.path.join(folder, test)
    with open(program, "w") as f:
        f.write(f"#!/bin/sh\nexit {status}\n")
    os.chmod(program, 0o755)
    env = dict(os.environ, PATH=folder + os.pathsep + os.environ.get("PATH", ""))
    p = subprocess.run([sys.executable, wrapper, program], env=env, stderr=subprocess.PIPE,
                       text=True)
    with open(os.path.join(folder, "call.json")) as f:
        call = json.load(f)
    return p.returncode, p.stderr, call


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: test_oclgrind_check.py WRAPPER")
    wrapper = argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        stand_in = os.path.join(folder, "oclgrind")
        with open(stand_in, "w") as f:
            f.write(STAND_IN)
        os.chmod(stand_in, 0o755)
        for what, test, status, stderr, want in CASES:
            got, out, call = run_case(wrapper, folder, test, status, stderr)
            if got != want:
                failures.append(f"{what} ({test}): exit status {got}, want {want}\n{out}")
            if stderr not in out:
                failures.append(f"{what}: Oclgrind's stderr was not passed on")
            if call["max"] is None or int(call["max"]) < 100000:
                failures.append(f"{what}: OCLGRIND_MAX_ERRORS {call['max']}: reports get cut")
            checks = set(a for a in call["args"] if a.startswith("--"))
            want_checks = {"--check-api", "--data-races"}
            if test != "test_embedding":  # runs cl/attention.cl: without the checker
                want_checks.add("--uninitialized")
            if checks != want_checks:
                failures.append(f"{what}: Oclgrind ran with {sorted(checks)}, "
                                f"want {sorted(want_checks)}")
    for f in failures:
        print(f, file=sys.stderr)
    print(f"{len(failures)} failure(s)" if failures else f"all {len(CASES)} cases as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
