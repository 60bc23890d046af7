#!/usr/bin/env python3
"""Runs a command under Oclgrind and fails when Oclgrind reports anything.

usage: oclgrind_check.py COMMAND [ARGS...]

Oclgrind reports out-of-bounds accesses, data races and uninitialized reads
in its log but does not change the exit status, so this wrapper reads the log:
any report fails the test. One report is expected and allowed: the fp16
verification runs a `half` arithmetic kernel (probe_half_math) that Oclgrind
compiles but cannot execute, which is how mpcl learns that fp16 math is absent."""
import os
import subprocess
import sys
import tempfile

EXPECTED_KERNELS = ("Kernel: probe_half_math",)

# Tests whose kernels Oclgrind 21.10's uninitialized-value checker cannot
# run: on cl/attention.cl it stopped at LLVM's `freeze` ("Unsupported
# instruction", printed but not logged) and went on with wrong values, and
# with the remainders written without `%` it crashed. The API and data-race
# checks still run on them. test_transformer_decoder and test_gpt_model run
# cl/attention.cl too (their blocks' attention gave wrong values there the
# same way: test_gpt_model's float32 loss was off by 0.02 with the checker,
# by 1e-6 without).
WITHOUT_UNINITIALIZED = ("test_attention", "test_transformer_decoder", "test_gpt_model")


def main(argv):
    if len(argv) < 2:
        sys.exit("usage: oclgrind_check.py COMMAND [ARGS...]")
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "oclgrind.log")
        checks = ["--check-api", "--data-races"]
        if os.path.basename(argv[1]) not in WITHOUT_UNINITIALIZED:
            checks.append("--uninitialized")
        cmd = ["oclgrind"] + checks + ["--log", log] + argv[1:]
        rc = subprocess.call(cmd)
        text = open(log, errors="replace").read() if os.path.exists(log) else ""
    blocks = [b.strip() for b in text.split("\n\n") if b.strip()]
    unexpected = [b for b in blocks if not any(k in b for k in EXPECTED_KERNELS)]
    if unexpected:
        sys.stderr.write("oclgrind reported %d problem(s):\n\n" % len(unexpected))
        sys.stderr.write("\n\n".join(unexpected[:10]) + "\n")
        return rc or 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
