#!/usr/bin/env python3
"""The tools keep stderr for errors: a tiny mpcl-train run with --quiet and
an mpcl-probe run leave stderr empty. The fp16 probe's half-math kernel does
not build on devices without half, and PoCL's compiler printed
"1 warning and 4 errors generated." on stderr on every run; that text now
belongs in the probe's detail, which the test checks on PoCL. A cold program
cache is used (a fresh folder, and a fresh PoCL kernel cache), so that every
build, the probes' included, really runs.

PoCL's clang also prints "N warnings generated." on stderr for every cold
build of a source with warnings. Kernel builds pass -w unless MPCL_VERBOSE=1:
the run uses kernel sources (MPCL_CL_DIR) with a #warning added.
test_kernels checks that MPCL_VERBOSE=1 shows such a warning on PoCL, whose
compiler prints there, so the quiet run is not quiet only because nothing
warned (there on a one-line program: a second cold build of the library took
a minute of this test).

Two parts, one per meson test. The training part (test_quiet) builds the
GEMM kernels at several launch geometries, which Rusticl's llvmpipe
compiles for ~25 s each (464 s of a CI run), so it sits in the 'jit-heavy'
suite that scripts/test.sh keeps off Rusticl; the probe's part
(test_quiet_probe) runs on every driver.

usage: test_quiet.py PATH/TO/mpcl-train PATH/TO/mpcl-probe training|probe"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from train_cli_common import FAILURES, FASHION, TRAIN, check  # argv[1]: mpcl-train

PROBE = os.path.abspath(sys.argv[2])


CL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cl")
TINY = ["--data", FASHION, "--train-limit", "256", "--test-limit", "128", "--hidden", "16",
        "--batch", "64", "--epochs", "1"]


def run(cmd, cache, **env):
    """cmd with cold caches: mpcl's in `cache`, PoCL's in a folder under it."""
    pocl = os.path.join(cache, "pocl")
    os.makedirs(pocl, exist_ok=True)
    env = dict(os.environ, MPCL_CACHE_DIR=cache, POCL_CACHE_DIR=pocl, **env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)


def warning_sources(folder):
    """A copy of cl/ whose gemm.cl (in the library program only) warns."""
    shutil.copytree(CL, folder)
    with open(os.path.join(folder, "gemm.cl"), "a", encoding="utf-8") as f:
        f.write("\n#warning mpcl test_quiet\n")
    return folder


def check_training(cache, out):
    """A cold --quiet run is silent, the library's sources warning."""
    cl_dir = warning_sources(os.path.join(out, "cl"))
    ck = os.path.join(out, "ck.safetensors")
    p = run([TRAIN, "--quiet", *TINY, "--save", ck], cache, MPCL_CL_DIR=cl_dir)
    check(p.returncode == 0, f"mpcl-train --quiet: exit 0 (got {p.returncode}: {p.stderr[-300:]!r})")
    check(p.stderr == "", f"mpcl-train --quiet: empty stderr (got {p.stderr[-300:]!r})")
    check(os.path.isfile(ck), "mpcl-train --quiet: the checkpoint was written")


def check_probe(cache):
    """mpcl-probe --json is silent, and keeps PoCL's compiler output in the detail."""
    p = run([PROBE, "--json"], cache)
    check(p.returncode == 0, f"mpcl-probe: exit 0 (got {p.returncode})")
    check(p.stderr == "", f"mpcl-probe: empty stderr (got {p.stderr[-300:]!r})")
    try:
        devices = json.loads(p.stdout)["devices"]
    except (ValueError, KeyError) as e:
        check(False, f"mpcl-probe --json parses ({e})")
        devices = []
    for d in devices:
        detail = d.get("fp16_detail", "")
        # PoCL's compiler prints a summary of the failed half-math build;
        # it must show up in the detail instead of stderr.
        if "Portable Computing Language" in d.get("platform", "") and \
                "half math: did not build" in detail:
            check("(compiler: " in detail and "error" in detail,
                  f"PoCL's compiler output kept in fp16_detail (got {detail!r})")


def main():
    if sys.argv[3:] not in (["training"], ["probe"]):
        sys.exit(__doc__.rsplit("\n\n", 1)[-1])
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        if sys.argv[3] == "training":
            check_training(cache, out)
        else:
            check_probe(cache)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
