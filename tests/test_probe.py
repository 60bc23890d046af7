#!/usr/bin/env python3
"""mpcl-probe end to end: the JSON document (parsed and checked against the
schema in README.md, and against `clinfo --json` on names and extension lists),
the text report, the flags and the exit codes.

usage: test_probe.py PATH/TO/mpcl-probe"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

PROBE = sys.argv[1]
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([PROBE] + args, capture_output=True, text=True, env=e, timeout=240)
    return p.returncode, p.stdout, p.stderr


DEVICE_KEYS = {
    "id": str, "platform": str, "name": str, "vendor": str, "driver_version": str,
    "opencl_version": str, "type": str, "compute_units": int, "max_clock_mhz": int,
    "global_mem_bytes": int, "local_mem_bytes": int, "max_alloc_bytes": int,
    "extensions": list, "fp16_math": str, "fp16_storage": str, "fp64": bool, "plans": dict,
    "bf16_storage": str, "bf16_detail": str,
}
PLAN_KEYS = {"storage": str, "gemm": str, "loss_scaling": bool, "reason": str}


def test_json_schema():
    rc, out, err = run(["--json"])
    check(rc == 0, f"--json exits 0 (got {rc}: {err[-500:]})")
    doc = json.loads(out)  # raises, and so fails, on invalid JSON
    check(doc.get("schema") == 1, "schema is 1")
    check(isinstance(doc.get("mpcl_version"), str), "mpcl_version is a string")
    check(isinstance(doc.get("devices"), list) and doc["devices"], "devices is a non-empty array")
    for d in doc["devices"]:
        for key, typ in DEVICE_KEYS.items():
            check(isinstance(d.get(key), typ), f"device {d.get('id')}: {key} is {typ.__name__}")
        check(d["fp16_math"] in ("verified", "declared-but-broken", "undeclared-but-works", "none"),
              f"fp16_math value {d['fp16_math']}")
        check(d["fp16_storage"] in ("verified", "broken"), f"fp16_storage {d['fp16_storage']}")
        check(d["bf16_storage"] in ("verified", "broken"), f"bf16_storage {d['bf16_storage']}")
        check(("cl_khr_fp16" in d["extensions"]) == (d["fp16_math"] in
              ("verified", "declared-but-broken")), f"{d['id']}: fp16_math agrees with extensions")
        check(set(d["plans"]) == {"auto", "mixed_float16", "float32", "mixed_bfloat16"},
              "four plans")
        for name, plan in d["plans"].items():
            for key, typ in PLAN_KEYS.items():
                check(isinstance(plan.get(key), typ), f"plan {name}: {key} is {typ.__name__}")
            check(plan["storage"] in ("f32", "f16", "bf16"), f"plan {name} storage")
            check(plan["resolved"] in ("float32", "mixed_float16", "mixed_bfloat16"),
                  f"plan {name} resolved")
            check(plan["gemm"] in ("clblast-sgemm", "clblast-hgemm", "mpcl-f32", "mpcl-mixed"),
                  f"plan {name} gemm")
        if "Portable Computing Language" in d["platform"]:
            # docs/ARCHITECTURE.md (Testing): PoCL 3.1 has no cl_khr_fp16 but
            # runs vload_half/vstore_half_rte.
            check(d["fp16_math"] == "none", "PoCL: fp16 math none")
            check(d["fp16_storage"] == "verified", "PoCL: fp16 storage verified")
            auto = d["plans"]["auto"]
            check(auto["storage"] == "f32" and not auto["loss_scaling"], "PoCL: auto is float32")
            check("cl_khr_fp16" in auto["reason"], "PoCL: auto says why")
            # bf16 storage is integer code: verified, and mixed_bfloat16 runs
            # bf16 through mpcl-mixed without loss scaling.
            check(d["bf16_storage"] == "verified", "PoCL: bf16 storage verified")
            bf = d["plans"]["mixed_bfloat16"]
            check(bf["usable"] and bf["resolved"] == "mixed_bfloat16" and bf["storage"] == "bf16"
                  and bf["gemm"] == "mpcl-mixed" and not bf["loss_scaling"],
                  f"PoCL: mixed_bfloat16 plan {bf}")
    return doc


def test_agrees_with_clinfo(doc):
    if not shutil.which("clinfo"):
        print("clinfo not installed: comparison skipped", file=sys.stderr)
        return
    p = subprocess.run(["clinfo", "--json"], capture_output=True, text=True, timeout=120)
    ci = json.loads(p.stdout)
    clinfo_devices = []
    for plat in ci.get("devices", []):
        for dev in plat.get("online", []):
            clinfo_devices.append(dev)
    check(len(clinfo_devices) == len(doc["devices"]),
          f"device count: clinfo {len(clinfo_devices)}, mpcl {len(doc['devices'])}")
    for ours, theirs in zip(doc["devices"], clinfo_devices):
        check(ours["name"] == theirs.get("CL_DEVICE_NAME", "").strip(),
              f"name {ours['name']!r} vs clinfo {theirs.get('CL_DEVICE_NAME')!r}")
        check(ours["extensions"] == theirs.get("CL_DEVICE_EXTENSIONS", "").split(),
              f"{ours['id']}: extension list matches clinfo")


def test_text_report(doc):
    rc, out, _ = run([])
    check(rc == 0, "text report exits 0")
    for d in doc["devices"]:
        check(d["name"] in out, f"text names {d['name']}")
    for word in ("fp16 math", "fp16 storage", "bf16 storage", "fp64", "auto", "mixed_float16",
                 "float32", "mixed_bfloat16", "verdict"):
        check(word in out, f"text report has '{word}'")


def test_flags_and_exit_codes(doc):
    rc, out, _ = run(["--help"])
    check(rc == 0 and "usage: mpcl-probe" in out, "--help")
    rc, out, _ = run(["--version"])
    check(rc == 0 and doc["mpcl_version"] in out, "--version")
    rc, _, err = run(["--frobnicate"])
    check(rc == 1 and "--frobnicate" in err, "unknown flag exits 1 and names it")
    rc, _, err = run(["--device", "no-such-device-zz"])
    check(rc == 1 and doc["devices"][0]["id"] in err, "unknown device exits 1 and lists devices")
    first = doc["devices"][0]
    rc, out, _ = run(["--json", "--device", first["id"]])
    one = json.loads(out)
    check(rc == 0 and [d["id"] for d in one["devices"]] == [first["id"]], "--device ID restricts")
    with tempfile.TemporaryDirectory() as empty:
        rc, out, err = run(["--json"], env={"OCL_ICD_VENDORS": empty})
        check(rc == 2, f"no ICD exits 2 (got {rc})")
        check("pocl-opencl-icd" in err, "no ICD message says how to install one")
        check(out == "", "no ICD prints nothing on stdout")
    rc, _, err = run([], env={"MPCL_GEMM": "cublas"})
    check(rc == 1 and "MPCL_GEMM" in err, "bad MPCL_GEMM exits 1 and says so")
    # A CLBlast path forced under mixed_bfloat16 is shown as not usable, with why.
    if first["bf16_storage"] == "verified":
        rc, out, _ = run(["--json", "--device", first["id"]], env={"MPCL_GEMM": "clblast-sgemm"})
        bf = json.loads(out)["devices"][0]["plans"]["mixed_bfloat16"]
        check(rc == 0 and not bf["usable"] and "CLBlast has no bf16 GEMM" in bf["reason"],
              f"MPCL_GEMM=clblast-sgemm refuses mixed_bfloat16 ({bf})")


def main():
    doc = test_json_schema()
    test_agrees_with_clinfo(doc)
    test_text_report(doc)
    test_flags_and_exit_codes(doc)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed", file=sys.stderr)
        return 1
    print("all probe checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
