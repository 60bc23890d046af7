#!/usr/bin/env python3
"""mpcl-train end to end: flags and their errors (nothing written on a bad
flag), bad data sets, a tiny real run with --json, --metrics and --save,
--resume (matching, mismatched, corrupt), a failed run leaving an existing
checkpoint intact, and Ctrl-C (SIGINT) stopping cleanly with a checkpoint
that resumes. Runs on $MPCL_DEVICE; sized to take well under a minute on PoCL.

usage: test_train_cli.py PATH/TO/mpcl-train"""
import csv
import gzip
import json
import math
import os
import signal
import struct
import sys
import tempfile
import time

from train_cli_common import (FASHION, check, finish, idx_images, idx_labels, interrupt, run,
                              write_set)

# A small real problem: a few steps of Adam on the first Fashion-MNIST samples.
TINY = ["--data", FASHION, "--train-limit", "512", "--test-limit", "256", "--hidden", "16",
        "--batch", "64"]


def files_in(d):
    return sorted(os.listdir(d))


def test_help_version():
    rc, out, _ = run(["--help"])
    check(rc == 0 and "usage: mpcl-train" in out and "--loss-scale" in out, "--help")
    intro = out.split("\n\n")[1]
    check("--model" in intro and "multilayer perceptron on" not in intro,
          f"--help says it trains --model's layers too ({intro!r})")
    rc, out, _ = run(["--version"])
    check(rc == 0 and out.startswith("mpcl-train ") and out.strip().split()[-1][0].isdigit(),
          f"--version ({out!r})")
    with tempfile.TemporaryDirectory() as empty:
        rc, out, err = run(["--json", "--save", os.path.join(empty, "ck.safetensors")],
                           env={"OCL_ICD_VENDORS": empty})
        check(rc == 2, f"no OpenCL platform: exit 2 (got {rc}: {err[-200:]!r})")
        check(out == "" and files_in(empty) == [], "no OpenCL platform: no output, no files")


BAD_FLAGS = [
    (["--batch", "0"], "--batch"),
    (["--batch", "-1"], "--batch"),
    (["--batch", "12abc"], "--batch"),
    (["--batch="], "--batch"),
    (["--batch=99999999999999999999999"], "--batch"),
    (["--lr", "-1"], "--lr"),
    (["--lr", "nan"], "--lr"),
    (["--lr=inf"], "--lr"),
    (["--lr", "+1"], "--lr"),
    (["--clip-norm", "0x1p3"], "--clip-norm"),
    (["--epochs", "1e3"], "--epochs"),
    (["--epochs", "0"], "--epochs"),
    (["--hidden", "128,,64"], "--hidden"),
    (["--hidden", "0"], "--hidden"),
    (["--activation", "swish"], "--activation"),
    (["--optimizer", "lamb"], "--optimizer"),
    (["--precision", "half"], "--precision"),
    (["--loss-scale", "banana"], "--loss-scale"),
    (["--loss-scale", "0"], "--loss-scale"),
    (["--seed", "-3"], "--seed"),
    (["--report-every", "0"], "--report-every"),
    (["--lr-schedule", "linear"], "--lr-schedule"),
    (["--warmup-steps", "-4"], "--warmup-steps"),
    (["--decay-steps", "0"], "--decay-steps"),
    (["--lr-min-ratio", "2"], "--lr-min-ratio"),
    (["--decay-steps", "100"], "--decay-steps"),  # without --lr-schedule cosine
    (["--frobnicate"], "--frobnicate"),
    (["--batch"], "--batch"),
]


def test_bad_flags():
    with tempfile.TemporaryDirectory() as d:
        for args, flag in BAD_FLAGS:
            rc, out, err = run(["--save", "ck.safetensors", "--metrics", "m.csv"] + args, cwd=d)
            check(rc == 1, f"{args}: exit 1 (got {rc})")
            check(flag in err and err.startswith("mpcl-train: "), f"{args}: names {flag}: {err!r}")
            value = args[1] if len(args) > 1 else ""
            check(value in err, f"{args}: names the value: {err!r}")
            check(out == "", f"{args}: nothing on stdout")
            check(files_in(d) == [], f"{args}: created no files ({files_in(d)})")
        # --save into a folder that does not exist: refused before any device work.
        rc, out, err = run(TINY + ["--save", os.path.join(d, "no", "ck.safetensors"),
                                   "--metrics", "m.csv"], cwd=d)
        check(rc == 1 and "--save" in err and "does not exist" in err,
              f"--save into a missing folder: exit 1 naming it ({rc}, {err!r})")
        check("epoch" not in out + err and "device" not in out,
              "--save check comes before training")
        check(files_in(d) == [], "--save into a missing folder created nothing")
        rc, _, err = run(["--resume", os.path.join(d, "absent.safetensors")], cwd=d)
        check(rc == 1 and "--resume" in err and "absent.safetensors" in err,
              f"--resume of a missing file: exit 1 naming it ({err!r})")


def test_bad_environment():
    """A value outside an environment variable's documented set stops the run
    with exit 1, naming the variable, the value and the accepted set, before
    any file is written."""
    with tempfile.TemporaryDirectory() as d:
        for var, value, accepted in [("MPCL_AUTO", "bogus", "capability"),
                                     ("MPCL_CACHE", "no", "0"),
                                     ("MPCL_FP16", "on", "force, off"),
                                     ("MPCL_PROFILE", "yes", "1")]:
            rc, out, err = run(TINY + ["--epochs", "1", "--save", "ck.safetensors",
                                       "--metrics", "m.csv"], cwd=d, env={var: value})
            check(rc == 1, f"{var}={value}: exit 1 (got {rc}: {err[-300:]!r})")
            check(f"{var}='{value}'" in err and f"not one of: {accepted}" in err,
                  f"{var}={value}: names it and the set: {err!r}")
            check(files_in(d) == [], f"{var}={value}: created no files ({files_in(d)})")


def test_profile():
    """MPCL_PROFILE=1 prints the device time of every kernel by name, with its
    call count, when the run ends; without it, nothing of the kind."""
    rc, out, err = run(TINY + ["--epochs", "1", "--quiet", "--json"], env={"MPCL_PROFILE": "1"})
    check(rc == 0, f"MPCL_PROFILE=1: exit 0 (got {rc}: {err[-300:]!r})")
    steps = json.loads(out)["steps"] if rc == 0 else -1
    rows = {}
    for line in err.splitlines():
        f = line.split()
        if len(f) == 5 and f[4].endswith("%") and f[1].isdigit():
            rows[f[0]] = (int(f[1]), float(f[2]))
    check("mpcl profile" in err, f"MPCL_PROFILE=1: the table's title: {err[-500:]!r}")
    # One Adam update per step; five GEMMs per step of the MLP, more for
    # evaluation: mpcl's GEMM kernels, or CLBlast's where the plan takes it.
    # The shapes may split them over several kernels (on an AVX2 CPU, PoCL
    # gets mpcl_gemm_r4w16 for some and mpcl_gemm_w8 for others).
    gemm = [(n, ms) for k, (n, ms) in rows.items() if k.startswith(("mpcl_gemm", "CLBlast"))]
    check(steps > 0 and rows.get("mpcl_optim_adam_v8", (0, 0))[0] == steps and
          sum(n for n, _ in gemm) > 5 * steps and sum(ms for _, ms in gemm) > 0,
          f"MPCL_PROFILE=1: the {steps} steps' kernels counted: {rows}")
    rc, out, err = run(TINY + ["--epochs", "1", "--quiet"])
    check(rc == 0 and "mpcl profile" not in err, f"no MPCL_PROFILE: no table ({err[-300:]!r})")


# ---- IDX files ----

def check_bad_data(d, out_dir, what, name):
    ck = os.path.join(out_dir, "ck.safetensors")
    metrics = os.path.join(out_dir, "m.csv")
    rc, out, err = run(["--data", d, "--epochs", "1", "--hidden", "8", "--save", ck,
                        "--metrics", metrics])
    check(rc == 1, f"bad data ({what}): exit 1 (got {rc}: {err[-300:]!r})")
    check(name in err and "mpcl-train: " in err, f"bad data ({what}): names {name}: {err!r}")
    check(files_in(out_dir) == [], f"bad data ({what}): no checkpoint or metrics file")


def test_bad_data():
    good_labels = [i % 10 for i in range(20)]
    corrupt_gz = bytearray(gzip.compress(idx_images(20)))
    corrupt_gz[len(corrupt_gz) // 2] ^= 0xFF
    # (what, train images bytes, train labels bytes, file the message must name)
    cases = [
        ("wrong magic", idx_images(20, magic=0x802), idx_labels(good_labels),
         "train-images-idx3-ubyte"),
        ("truncated", idx_images(20)[:-100], idx_labels(good_labels), "train-images-idx3-ubyte"),
        ("count mismatch", idx_images(20), idx_labels(good_labels[:19]),
         "train-labels-idx1-ubyte"),
        ("zero images", idx_images(0), idx_labels([]), "train-images-idx3-ubyte"),
        ("corrupt gzip", None, idx_labels(good_labels), "train-images-idx3-ubyte.gz"),
    ]
    for what, images, labels, name in cases:
        with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as out_dir:
            write_set(d, "t10k", idx_images(10), idx_labels(list(range(10))))
            if images is None:
                write_set(d, "train", b"", labels)
                os.remove(os.path.join(d, "train-images-idx3-ubyte"))
                with open(os.path.join(d, "train-images-idx3-ubyte.gz"), "wb") as f:
                    f.write(corrupt_gz)
            else:
                write_set(d, "train", images, labels)
            check_bad_data(d, out_dir, what, name)
    # The training labels define the classes (10 here); a test label outside
    # them is the error.
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as out_dir:
        write_set(d, "train", idx_images(20), idx_labels(good_labels))
        write_set(d, "t10k", idx_images(10), idx_labels(list(range(9)) + [11]), gz=True)
        check_bad_data(d, out_dir, "test label 11", "t10k-labels-idx1-ubyte.gz")
    with tempfile.TemporaryDirectory() as d:
        rc, _, err = run(["--data", os.path.join(d, "nowhere")])
        check(rc == 1 and "nowhere" in err, f"missing data folder: exit 1 naming it ({err!r})")
        write_set(d, "train", idx_images(20), idx_labels(good_labels))
        rc, _, err = run(["--data", d])
        check(rc == 1 and "t10k-images-idx3-ubyte" in err,
              f"missing test file: exit 1 naming it ({err!r})")


JSON_KEYS = {
    "device": str, "policy": str, "plan": dict, "epochs": int, "test_accuracy": (int, float),
    "test_loss": float, "train_samples_per_s": (int, float), "skipped_steps": int,
    "final_loss_scale": (int, float), "peak_device_bytes": int, "seconds": (int, float),
    "lr_schedule": dict, "final_lr": (int, float),
    "steps": int,
    "stopped": bool, "mpcl_version": str,
}


def check_summary(doc, what):
    for key, typ in JSON_KEYS.items():
        check(isinstance(doc.get(key), typ), f"{what}: JSON {key} is {typ}: {doc.get(key)!r}")
    plan = doc.get("plan", {})
    for key in ("storage", "gemm", "loss_scaling", "reason"):
        check(key in plan, f"{what}: plan has {key}")


def test_run_save_resume(d):
    ck = os.path.join(d, "ck.safetensors")
    metrics = os.path.join(d, "m.csv")
    rc, out, err = run(TINY + ["--epochs", "2", "--json", "--report-every", "3",
                               "--metrics", metrics, "--save", ck])
    if not check(rc == 0, f"tiny run exits 0 (got {rc}: {err[-800:]})"):
        return None
    doc = json.loads(out)  # stdout holds only the JSON document
    check_summary(doc, "tiny run")
    check(doc["epochs"] == 2 and doc["steps"] == 16 and not doc["stopped"],
          f"tiny run: 2 epochs of 8 steps ({doc['epochs']}, {doc['steps']})")
    check(doc["test_accuracy"] > 0.3, f"tiny run learns: test accuracy {doc['test_accuracy']}")
    check(doc["peak_device_bytes"] > 0, "peak device memory reported")
    check("precision" in err and doc["plan"]["reason"] in err, "start lines on stderr with --json")
    check("test acc" in err or "test      accuracy" in err, "end summary on stderr")
    with open(metrics) as f:
        rows = list(csv.reader(f))
    check(rows and rows[0] == ["step", "epoch", "loss", "accuracy", "loss_scale", "skipped",
                               "samples_per_s", "grad_norm", "lr"], f"metrics header {rows[:1]}")
    check(all(r[7] == "" for r in rows[1:]), "no grad_norm without --clip-norm")
    # The column holds the float32 lr to 9 digits; the JSON 6 digits.
    check(all(abs(float(r[8]) - 1e-3) < 1e-10 for r in rows[1:]), "constant lr column: Adam's 1e-3")
    check(doc["lr_schedule"] == {"kind": "constant", "warmup_steps": 0} and doc["final_lr"] == 1e-3,
          f"constant schedule in the JSON: {doc['lr_schedule']}, {doc['final_lr']}")
    check(len(rows) >= 1 + 16 // 3, f"metrics has a row per report ({len(rows) - 1} rows)")
    steps = [int(r[0]) for r in rows[1:]]
    check(steps == sorted(steps) and steps[-1] == 16, f"metrics steps rise to 16: {steps}")
    check(all(float(r[3]) >= 0 and float(r[3]) <= 1 for r in rows[1:]), "metrics accuracy in [0,1]")
    check(os.path.getsize(ck) > 0, "--save wrote a checkpoint")
    with open(ck, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    check("dense_0.kernel" in header and header["dense_0.kernel"]["shape"] == [784, 16],
          f"checkpoint has dense_0.kernel [784, 16]: {list(header)[:6]}")

    # Resume with the same model flags: continues to epoch 3.
    rc, out, err = run(TINY + ["--epochs", "3", "--json", "--resume", ck])
    if check(rc == 0, f"resume exits 0 ({rc}: {err[-500:]})"):
        doc2 = json.loads(out)
        check(doc2["steps"] == 24 and doc2["epochs"] == 3,
              f"resume continues from step 16 to 24 ({doc2['steps']}, epoch {doc2['epochs']})")
    # A different model: the shape mismatch is named, and the file is untouched
    # even though --save points at it.
    before = open(ck, "rb").read()
    rc, out, err = run(TINY + ["--epochs", "3", "--hidden", "32", "--resume", ck, "--save", ck])
    check(rc == 1 and "holds another model" in err and "dense units=32" in err
          and "to match: --hidden 16" in err,
          f"resume with --hidden 32: exit 1 naming the mismatch ({rc}: {err[-400:]!r})")
    check(open(ck, "rb").read() == before, "failed run leaves the checkpoint byte-identical")
    # Bad data with --save over an existing checkpoint: the file survives too.
    rc, _, err = run(TINY + ["--data", os.path.join(d, "nowhere"), "--save", ck])
    check(rc == 1 and open(ck, "rb").read() == before, "failed load leaves the checkpoint intact")

    # Corrupt copies.
    bad = os.path.join(d, "bad.safetensors")
    corruptions = [
        ("truncated", before[: len(before) // 2]),
        ("header length", struct.pack("<Q", 1 << 40) + before[8:]),
        ("not safetensors", b"PK\x03\x04 this is a zip file, not safetensors" * 4),
        ("empty", b""),
    ]
    for what, data in corruptions:
        with open(bad, "wb") as f:
            f.write(data)
        rc, out, err = run(TINY + ["--epochs", "3", "--resume", bad])
        check(rc == 1 and "--resume" in err and "bad.safetensors" in err,
              f"corrupt checkpoint ({what}): exit 1 naming it ({rc}: {err[-300:]!r})")
    return ck


def keras_cosine(peak, warmup, decay, alpha, step):
    """Keras' CosineDecay(0, decay, alpha, warmup_target=peak, warmup_steps=warmup)."""
    s = min(step, decay + warmup)
    if s < warmup:
        return peak * (s / warmup)
    return peak * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * (s - warmup) / decay)) + alpha)


def tensor_bytes(path):
    """The data section of a safetensors file (after its JSON header)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        f.read(n)
        return f.read()


def test_lr_schedule(d):
    """--lr-schedule cosine with warm-up: the metrics' lr column is Keras'
    CosineDecay at each row's last step, the decay runs to the end of the run
    by default, and a run resumed from its middle ends with the weights of
    the uninterrupted one, bit for bit. A checkpoint whose schedule this run
    would not continue is refused, naming the flag that would."""
    sched = ["--lr", "0.01", "--lr-schedule", "cosine", "--warmup-steps", "4",
             "--lr-min-ratio", "0.1"]
    metrics, full = os.path.join(d, "cos.csv"), os.path.join(d, "cos-full.safetensors")
    rc, out, err = run(TINY + sched + ["--epochs", "2", "--json", "--report-every", "1",
                                       "--metrics", metrics, "--save", full])
    if not check(rc == 0, f"cosine run exits 0 ({rc}: {err[-500:]})"):
        return
    doc = json.loads(out)
    check(doc["lr_schedule"] == {"kind": "cosine", "warmup_steps": 4, "decay_steps": 12,
                                 "alpha": 0.1},
          f"cosine decays over the 16 - 4 steps left: {doc['lr_schedule']}")
    with open(metrics) as f:
        rows = list(csv.DictReader(f))
    check([int(r["step"]) for r in rows] == list(range(1, 17)), "a row per step")
    for r in rows:
        step, lr = int(r["step"]), float(r["lr"])
        want = keras_cosine(0.01, 4, 12, 0.1, step - 1)
        check(abs(lr - want) <= 1e-6 * want + 1e-12, f"step {step}: lr {lr}, Keras {want}")
    check(abs(doc["final_lr"] / keras_cosine(0.01, 4, 12, 0.1, 15) - 1) < 1e-5,
          f"final_lr {doc['final_lr']}")
    check("lr        cosine, warm-up 4 steps, decay 12 steps to 0.1 x lr" in err,
          "the start lines show the schedule")

    half, resumed = os.path.join(d, "cos-half.safetensors"), os.path.join(d, "cos-res.safetensors")
    rc, _, err = run(TINY + sched + ["--epochs", "1", "--decay-steps", "12", "--save", half])
    if check(rc == 0, f"cosine first epoch exits 0 ({rc}: {err[-300:]})"):
        rc, _, err = run(TINY + sched + ["--epochs", "2", "--resume", half, "--save", resumed])
        check(rc == 0 and tensor_bytes(resumed) == tensor_bytes(full),
              f"resumed cosine run ends bit for bit as the uninterrupted one ({rc}: {err[-300:]})")
    rc, _, err = run(TINY + sched + ["--epochs", "1", "--save", half])
    if check(rc == 0, f"1-epoch cosine run exits 0 ({rc})"):
        rc, _, err = run(TINY + sched + ["--epochs", "2", "--resume", half])
        check(rc == 1 and "another lr schedule" in err
              and "--decay-steps 4 --lr-min-ratio 0.1 (" in err,
              f"resume over another decay: exit 1 naming --decay-steps 4 ({rc}: {err[-400:]!r})")


def test_clip_and_scaling_flags(d):
    """--clip-norm: the metrics carry the global gradient norm of each report's
    last step; a clip far below it still trains. --loss-scale off on
    mixed_float16 and dynamic on float32 are applied and shown."""
    metrics = os.path.join(d, "clip.csv")
    rc, out, err = run(TINY + ["--epochs", "1", "--json", "--report-every", "2", "--clip-norm",
                               "0.05", "--metrics", metrics])
    if check(rc == 0, f"--clip-norm run exits 0 ({rc}: {err[-500:]})"):
        with open(metrics) as f:
            rows = list(csv.DictReader(f))
        norms = [float(r["grad_norm"]) for r in rows]
        check(norms and all(n > 0.05 and n < 1e3 for n in norms),
              f"--clip-norm 0.05: finite norms above the clip in the metrics: {norms}")
        check(json.loads(out)["test_accuracy"] > 0.2, "clipped run still learns")
    for policy, flag, want in (("mixed_float16", "off", False), ("float32", "dynamic", True)):
        rc, out, err = run(TINY + ["--epochs", "1", "--json", "--precision", policy,
                                   "--loss-scale", flag])
        if check(rc == 0, f"{policy} --loss-scale {flag} exits 0 ({rc}: {err[-300:]})"):
            check(json.loads(out)["plan"]["loss_scaling"] == want,
                  f"{policy} --loss-scale {flag}: loss_scaling {want} in the JSON")


def test_sigint(d):
    ck = os.path.join(d, "int.safetensors")
    args = ["--data", FASHION, "--train-limit", "512", "--test-limit", "256", "--hidden", "16",
            "--batch", "64", "--json"]
    rc, out, err, ok, seen = interrupt(args + ["--epochs", "2000", "--save", ck], "epoch 1/2000",
                                       signal.SIGINT)
    check(ok, f"a progress line before SIGINT: {''.join(seen)[-500:]!r}")
    check(rc == 130, f"SIGINT: exit 130 (got {rc}: {err[-500:]!r})")
    try:
        doc = json.loads(out)
    except ValueError:
        check(False, f"SIGINT: JSON summary still printed ({out!r})")
        return
    check(doc["stopped"] and doc["epochs"] < 2000, f"SIGINT: stopped early ({doc['epochs']})")
    check(os.path.exists(ck), "SIGINT: checkpoint written")
    # Resume to the end of the next epoch: continues from the saved step.
    target = doc["epochs"] + 1
    rc, out2, err2 = run(args + ["--epochs", str(target), "--resume", ck])
    if check(rc == 0, f"resume after SIGINT exits 0 ({rc}: {err2[-500:]!r})"):
        doc2 = json.loads(out2)
        check(doc2["steps"] == 8 * target and not doc2["stopped"],
              f"resume after SIGINT ends at step {8 * target} (got {doc2['steps']}, "
              f"interrupted at {doc['steps']})")


def test_save_fails_late(d):
    """The folder checked at start vanishes during training: the library
    refuses at save time, the tool says so and exits 1, nothing is written."""
    real = os.path.join(d, "real")
    link = os.path.join(d, "link")
    os.mkdir(real)
    os.symlink(real, link)
    args = ["--data", FASHION, "--train-limit", "512", "--test-limit", "256", "--hidden", "16",
            "--batch", "64", "--epochs", "2000", "--json",
            "--save", os.path.join(link, "late.safetensors")]

    def move_folder():
        os.remove(link)
        os.symlink(os.path.join(d, "gone"), link)

    rc, _, err, ok, seen = interrupt(args, "epoch 1/2000", signal.SIGINT, before=move_folder)
    check(ok, f"late save: a progress line ({''.join(seen)[-300:]!r})")
    check(rc == 1 and "--save" in err and "late.safetensors" in err,
          f"late save failure: exit 1 naming the file ({rc}: {err[-300:]!r})")
    check(os.listdir(real) == [], "late save failure wrote nothing")


def test_sigterm():
    """SIGTERM stops like Ctrl-C, with its own exit status (128 + 15)."""
    args = ["--data", FASHION, "--train-limit", "512", "--test-limit", "256", "--hidden", "16",
            "--batch", "64", "--epochs", "2000", "--json"]
    rc, out, err, ok, seen = interrupt(args, "epoch 1/2000", signal.SIGTERM)
    check(ok, f"SIGTERM: a progress line ({''.join(seen)[-300:]!r})")
    check(rc == 143, f"SIGTERM: exit 143 (got {rc}: {err[-300:]!r})")
    check('"stopped": true' in out, "SIGTERM: JSON says stopped")


def main():
    t0 = time.time()
    test_help_version()
    test_bad_flags()
    test_bad_environment()
    test_profile()
    test_bad_data()
    with tempfile.TemporaryDirectory() as d:
        test_run_save_resume(d)
        test_clip_and_scaling_flags(d)
        test_lr_schedule(d)
        test_sigint(d)
        test_save_fails_late(d)
    test_sigterm()
    return finish("mpcl-train", t0)


if __name__ == "__main__":
    sys.exit(main())
