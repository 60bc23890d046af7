#!/usr/bin/env python3
"""mpcl-train against hostile or unlucky inputs (issue 9): values inside
well-formed checkpoints, flags against resumed state, output paths that are
not regular files or alias each other, inputs that would block, corrupt class
counts, divergence, stop signals, kill -9 during training and saving, metrics
after a crash, the umask, periodic checkpoints. Each case asserts the exact
exit status and that nothing was written or overwritten. The expected values
come from the checkpoint files (read here with struct + json) and from the
rules, never from the tool's own output. Sized for well under a minute.

usage: test_train_hardening.py PATH/TO/mpcl-train"""
import json
import os
import random
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time

from train_cli_common import (FASHION, TRAIN, check, finish, idx_images, idx_labels, interrupt,
                              run, write_set)

# 512 samples in batches of 64: 8 steps an epoch.
TINY = ["--data", FASHION, "--train-limit", "512", "--test-limit", "128", "--hidden", "16",
        "--batch", "64"]


def tmp_files(d):
    return sorted(n for n in os.listdir(d) if ".tmp-" in n)


# ---- safetensors, read and written here (independent of the C code) ----

def st_read(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    return header, data[8 + n:]


def st_write(path, header, body):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + body)


def crafted(src, dst, meta=None, poke=None):
    """A copy of checkpoint src with metadata keys replaced and/or one f32
    element of a tensor replaced: poke = (name, index, value)."""
    header, body = st_read(src)
    body = bytearray(body)
    if meta:
        header["__metadata__"].update(meta)
    if poke:
        name, index, value = poke
        begin = header[name]["data_offsets"][0] + 4 * index
        body[begin:begin + 4] = struct.pack("<f", value)
    st_write(dst, header, bytes(body))


def meta_of(path):
    return st_read(path)[0]["__metadata__"]


def assert_refused(args, d, what, needles, rc_want=1, protect=None):
    """Runs with --save onto an existing file and --metrics onto a new one:
    exit rc_want, every needle in stderr, the file byte-identical, no CSV."""
    guard = os.path.join(d, "guard.safetensors")
    with open(guard, "wb") as f:
        f.write(b"earlier checkpoint")
    csv = os.path.join(d, "refused.csv")
    before = {p: open(p, "rb").read() for p in (protect or [])}
    rc, out, err = run(args + ["--save", guard, "--metrics", csv])
    check(rc == rc_want, f"{what}: exit {rc_want} (got {rc}: {err[-400:]!r})")
    for n in needles:
        check(n in err, f"{what}: message names {n!r}: {err[-400:]!r}")
    check(open(guard, "rb").read() == b"earlier checkpoint", f"{what}: --save file untouched")
    check(not os.path.exists(csv), f"{what}: no metrics file created")
    for p, b in before.items():
        check(open(p, "rb").read() == b, f"{what}: {p} untouched")
    check(tmp_files(d) == [], f"{what}: no temp files ({tmp_files(d)})")
    os.remove(guard)


# ---- 2. values inside well-formed checkpoints ----

def test_checkpoint_values(d):
    f32 = os.path.join(d, "f32.safetensors")
    mixed = os.path.join(d, "mixed.safetensors")
    rc, _, err = run(TINY + ["--epochs", "1", "--precision", "float32", "--save", f32, "--quiet"])
    check(rc == 0, f"float32 checkpoint made ({rc}: {err[-300:]})")
    rc, _, err = run(TINY + ["--epochs", "1", "--precision", "mixed_float16", "--save", mixed,
                             "--quiet"])
    check(rc == 0, f"mixed_float16 checkpoint made ({rc}: {err[-300:]})")
    m = meta_of(mixed)
    check(m["loss_scale_mode"] == "dynamic", f"mixed checkpoint scales dynamically: {m}")
    step = int(m["step"])
    bad = os.path.join(d, "bad.safetensors")
    cases = [
        (f32, "float32", None, ("dense_0.kernel", 3, float("nan")), ["dense_0.kernel", "index 3"]),
        (f32, "float32", None, ("dense_1.bias.m", 0, float("inf")), ["dense_1.bias.m", "inf"]),
        (f32, "float32", None, ("dense_0.kernel.v", 5, -0.25), ["dense_0.kernel.v", "negative"]),
        (mixed, "mixed_float16", {"loss_scale": "1e30"}, None, ["loss_scale", "1e+30"]),
        (mixed, "mixed_float16", {"loss_scale": "0.5"}, None, ["loss_scale", "0.5"]),
        (mixed, "mixed_float16", {"loss_scale_skipped": str(step + 1)}, None,
         ["loss_scale_skipped", "counters"]),
        (mixed, "mixed_float16", {"loss_scale_good_steps": "2000"}, None,
         ["loss_scale_good_steps"]),
        (f32, "float32", {"optimizer_step": str(step), "loss_scale_skipped": "1"}, None,
         ["counters"]),
    ]
    for src, policy, meta, poke, needles in cases:
        crafted(src, bad, meta, poke)
        what = f"checkpoint with {meta or poke[:2]}"
        assert_refused(TINY + ["--epochs", "2", "--precision", policy, "--resume", bad], d, what,
                       ["--resume", "bad.safetensors"] + needles, protect=[bad])
    return f32, mixed


# ---- 3. flags against resumed state ----

def test_resume_flags(d, mixed):
    ck_scale = float(meta_of(mixed)["loss_scale"])
    # No scale typed: the checkpoint's scale goes on (no overflow in 8 steps).
    rc, out, err = run(TINY + ["--epochs", "2", "--precision", "mixed_float16", "--json",
                               "--resume", mixed])
    if check(rc == 0, f"resume mixed: exit 0 ({rc}: {err[-300:]})"):
        check(json.loads(out)["final_loss_scale"] == ck_scale,
              f"no scale typed: the checkpoint's {ck_scale} continues")
    for flag, value in (("--loss-scale", "128"), ("--initial-loss-scale", "256")):
        rc, out, err = run(TINY + ["--epochs", "2", "--precision", "mixed_float16", "--json",
                                   flag, value, "--resume", mixed])
        if check(rc == 0, f"resume with {flag} {value}: exit 0 ({rc}: {err[-300:]})"):
            check(json.loads(out)["final_loss_scale"] == float(value),
                  f"{flag} {value} typed on resume applies (got "
                  f"{json.loads(out)['final_loss_scale']}, checkpoint {ck_scale})")
    # Another optimizer is named as such.
    assert_refused(TINY + ["--epochs", "2", "--optimizer", "sgd", "--resume", mixed], d,
                   "resume with another --optimizer",
                   ["optimizer adam", "this run uses sgd", "--optimizer adam would match"])
    # Only the differing flag is suggested, never one the user gave as it is.
    rc, _, err = run(TINY + ["--epochs", "2", "--hidden", "8", "--resume", mixed])
    check(rc == 1 and "--hidden 16" in err and "--seed" not in err and "--classes" not in err,
          f"--hidden mismatch suggests --hidden 16 only ({rc}: {err[-400:]!r})")


# ---- 4. output paths; 5. inputs that would block ----

def test_paths(d, ck):
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    sock_path = os.path.join(d, "sock")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(sock_path)
    specials = [(fifo, "a FIFO"), (sock_path, "a socket")]
    dev = os.path.join(d, "null")
    try:
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        specials.append((dev, "a character device"))
    except OSError:
        pass  # no CAP_MKNOD here: the FIFO and the socket stand for it
    for path, kind in specials:
        for flag in ("--save", "--metrics"):
            rc, out, err = run(TINY + ["--epochs", "1", flag, path], timeout=60)
            check(rc == 1 and flag in err and kind in err and "not a regular file" in err,
                  f"{flag} onto {kind}: exit 1 naming it ({rc}: {err[-300:]!r})")
            check(stat.S_IFMT(os.lstat(path).st_mode) != stat.S_IFREG,
                  f"{flag} onto {kind}: still {kind}")
    sock.close()
    # A name the file system takes but the writer's temporary name would not
    # (the limit: NAME_MAX less 32) is refused before training, naming both.
    longest = os.pathconf(d, "PC_NAME_MAX") - 32
    for flag in ("--save", "--plot"):
        long_name = os.path.join(d, "n" * (longest + 1))
        rc, _, err = run(TINY + ["--epochs", "1", flag, long_name], timeout=60)
        check(rc == 1 and flag in err and f"is {longest}" in err,
              f"{flag} with a {longest + 1}-byte name: refused at start-up ({rc}: {err[-300:]!r})")
    # A folder that takes no files (even for root).
    rc, _, err = run(TINY + ["--epochs", "1", "--save", "/proc/self/ck.safetensors"])
    check(rc == 1 and "cannot create files in folder '/proc/self'" in err,
          f"--save into /proc/self: exit 1 ({rc}: {err[-300:]!r})")
    # A file where the folder should be is not called missing.
    rc, _, err = run(TINY + ["--save", os.path.join(ck, "x.safetensors")])
    check(rc == 1 and "not a folder" in err and "does not exist" not in err,
          f"--save under a file: 'not a folder' ({rc}: {err[-300:]!r})")
    # Aliases: --metrics onto the checkpoint being resumed or written.
    before = open(ck, "rb").read()
    rc, _, err = run(TINY + ["--epochs", "2", "--resume", ck,
                             "--metrics", os.path.join(d, ".", os.path.basename(ck))])
    check(rc == 1 and "--metrics" in err and "--resume" in err and "same file" in err,
          f"--metrics onto --resume: exit 1 ({rc}: {err[-300:]!r})")
    check(open(ck, "rb").read() == before, "--metrics onto --resume: checkpoint untouched")
    new = os.path.join(d, "new.out")
    rc, _, err = run(TINY + ["--epochs", "1", "--save", new, "--metrics",
                             os.path.join(d, "..", os.path.basename(d), "new.out")])
    check(rc == 1 and "same file" in err and not os.path.exists(new),
          f"--metrics onto --save: exit 1, nothing written ({rc}: {err[-300:]!r})")
    # --save == --resume continues in place (documented).
    rc, _, err = run(TINY + ["--epochs", "2", "--resume", ck, "--save", ck, "--quiet"])
    check(rc == 0 and meta_of(ck)["step"] == "16", f"--save onto --resume continues ({rc})")
    # A FIFO as --resume is refused at once, not waited on.
    try:
        rc, _, err = run(TINY + ["--resume", fifo], timeout=60)
        check(rc == 1 and "is a FIFO, not a regular file" in err,
              f"--resume FIFO: exit 1 naming it ({rc}: {err[-300:]!r})")
    except subprocess.TimeoutExpired:
        check(False, "--resume FIFO: blocked")


# ---- 8. class count ----

def write_data(d, labels, test_labels):
    for prefix, lab in (("train", labels), ("t10k", test_labels)):
        write_set(d, prefix, idx_images(len(lab)), idx_labels(lab))


def test_classes(d):
    data = os.path.join(d, "corrupt")
    os.mkdir(data)
    labels = [i % 10 for i in range(40)]
    labels[7] = 255
    write_data(data, labels, list(range(10)))
    args = ["--data", data, "--epochs", "1", "--hidden", "8", "--batch", "8"]
    assert_refused(args, d, "a label 255 among 0..9", ["255", "index 7", "10-254", "--classes"])
    assert_refused(args + ["--classes", "10"], d, "--classes 10 with a label 255",
                   ["label 255 at index 7", "10"])
    # A class without an example is fine when the count is given.
    labels = [i % 10 for i in range(40) if i % 10 != 4]
    write_data(data, labels, list(range(10)))
    rc, out, err = run(args + ["--json"])
    check(rc == 1 and "labels 4" in err, f"class 4 empty, inferred: refused ({rc}: {err[-300:]})")
    rc, out, err = run(args + ["--json", "--classes", "10"])
    check(rc == 0, f"class 4 empty with --classes 10: exit 0 ({rc}: {err[-300:]})")


# ---- 9. divergence ----

def test_divergence(d):
    ck = os.path.join(d, "keep.safetensors")
    with open(ck, "wb") as f:
        f.write(b"earlier checkpoint")
    diverge = TINY + ["--epochs", "3", "--precision", "float32", "--optimizer", "sgd", "--lr",
                      "1e30", "--json", "--report-every", "2"]
    rc, out, err = run(diverge + ["--save", ck])
    check(rc == 3, f"diverged float32 run: exit 3 ({rc}: {err[-300:]!r})")
    doc = json.loads(out) if out.strip() else {}
    check(doc.get("diverged") is True and doc.get("steps", 99) < 24,
          f"diverged: JSON diverged true, stopped early ({doc.get('diverged')}, "
          f"{doc.get('steps')})")
    check(doc.get("test_loss") is None or isinstance(doc.get("test_loss"), str),
          "diverged: test_loss is null (not evaluated) or a non-finite marker")
    check("diverged" in err and "--keep-going-on-nan" in err, "diverged: the message says so")
    check(open(ck, "rb").read() == b"earlier checkpoint", "diverged: nothing saved")
    rc, out, err = run(diverge + ["--keep-going-on-nan"])
    doc = json.loads(out) if out.strip() else {}
    check(rc == 0 and doc.get("diverged") is True and doc.get("steps") == 24,
          f"--keep-going-on-nan: exit 0, all 24 steps, diverged true ({rc}, {doc.get('steps')})")


# ---- 12. stop signals ----

def test_signals(d):
    # Big steps and no report in the whole epoch: the stop must not wait for
    # it. Five epochs of 79 steps (2.5 s on Intel's runtime, Zen 4): one ran
    # out within the 0.5 s settle once the data decoded faster.
    args = ["--data", FASHION, "--train-limit", "20000", "--test-limit", "100", "--hidden",
            "1024", "--batch", "256", "--report-every", "1000000", "--epochs", "5", "--json",
            "--precision", "float32"]
    t0 = [0.0]

    def settle():
        time.sleep(0.5)
        t0[0] = time.time()

    rc, out, err, _, _ = interrupt(args, "model", signal.SIGTERM, before=settle)
    waited = time.time() - t0[0]
    doc = json.loads(out) if out.strip() else {}
    check(rc == 143 and doc.get("stopped") is True,
          f"SIGTERM mid-epoch: exit 143, stopped ({rc}, {doc.get('stopped')}, "
          f"{err[-300:]!r})")
    check(doc.get("steps", 395) < 395, f"SIGTERM: the run of 5 x 79 steps did not run out "
          f"({doc.get('steps')} steps, {waited:.1f} s after the signal)")
    # A FIFO that appears at --plot's path during training (after the start-up
    # check) is refused when the plot is written, never waited on (the
    # timeout of interrupt's communicate() guards against a hang). Made after
    # the settle: start-up ends ~10 ms after the model line, and a signal
    # that came sooner (a loaded machine) stopped the run in start-up.
    fifo = os.path.join(d, "late.svg")
    rc, _, err, _, _ = interrupt(args + ["--plot", fifo], "model", signal.SIGINT,
                                 before=lambda: (settle(), os.mkfifo(fifo)))
    check(rc == 1 and "--plot" in err and "a FIFO" in err and stat.S_ISFIFO(os.lstat(fifo).st_mode),
          f"--plot onto a FIFO made during training: exit 1, left as it is ({rc}: {err[-300:]!r})")
    # A signal during start-up: nothing trained or written.
    ck = os.path.join(d, "startup.safetensors")
    rc, _, err, _, _ = interrupt(["--data", FASHION, "--save", ck, "--epochs", "1"], "device",
                                 signal.SIGTERM, on="stdout")
    check(rc == 143 and "start-up" in err and not os.path.exists(ck),
          f"SIGTERM during start-up: 143, nothing written ({rc}: {err[-200:]!r})")


# ---- 13, 14. kills, temp files, metrics after a crash, umask, periodic saves ----

def loads(ck, d):
    """The checkpoint loads in mpcl-train (its own validation) and parses here."""
    m = meta_of(ck)
    rc, _, err = run(TINY + ["--epochs", m["epoch"] if int(m["epoch"]) > 0 else "1",
                             "--resume", ck, "--quiet"])
    return rc == 0, m, err


def test_kills(d):
    ck = os.path.join(d, "kill.safetensors")
    rng = random.Random(9)
    every = 3
    for i in range(4):
        # Saves every 3 steps and at the end: a kill lands in training or in a save.
        args = TINY + ["--epochs", "400", "--save", ck, "--save-every", str(every)]
        if os.path.exists(ck):
            args += ["--resume", ck]
        # Killed once it trains (its first epoch line: saves have happened),
        # a random moment later.
        rc, _, _, ok, _ = interrupt(args, "epoch ", signal.SIGKILL, on="stdout",
                                    before=lambda: time.sleep(rng.uniform(0.0, 0.3)))
        check(ok and rc == -signal.SIGKILL, f"kill {i}: killed while training ({rc})")
        check(len(tmp_files(d)) <= 1, f"kill {i}: temp files do not pile up ({tmp_files(d)})")
        if os.path.exists(ck):
            ok, m, err = loads(ck, d)
            check(ok, f"kill {i}: the checkpoint loads ({err[-300:]!r})")
            check(int(m["step"]) % every == 0, f"kill {i}: saved at a multiple of {every} "
                  f"steps ({m['step']})")
    check(os.path.exists(ck), "kill -9: periodic saves wrote a checkpoint during the runs")
    # The next save removes what a killed writer left.
    run(TINY + ["--epochs", "1", "--save", ck, "--quiet"])
    check(tmp_files(d) == [], f"after a clean save no temp files remain ({tmp_files(d)})")

    # Two writers at once: one complete checkpoint, no temp files.
    both = os.path.join(d, "both.safetensors")
    procs = [subprocess.Popen([TRAIN] + TINY + ["--epochs", "3", "--seed", str(s), "--save", both,
                                                "--save-every", "1", "--quiet"])
             for s in (1, 2)]
    for p in procs:
        p.wait()
    check(all(p.returncode == 0 for p in procs), "two writers: both exit 0")
    m = meta_of(both)
    check(m["seed"] in ("1", "2") and m["step"] == "24", f"two writers: a whole checkpoint {m}")
    rc, _, err = run(TINY + ["--epochs", "3", "--seed", m["seed"], "--resume", both, "--quiet"])
    check(rc == 0, f"two writers: the checkpoint loads ({err[-300:]!r})")
    check(tmp_files(d) == [], f"two writers: no temp files ({tmp_files(d)})")


def csv_steps(path):
    with open(path) as f:
        return [int(line.split(",")[0]) for line in f.readlines()[1:]]


def test_metrics_and_umask(d):
    early = os.path.join(d, "early.safetensors")
    metrics = os.path.join(d, "m.csv")
    # A run saved at step 8 and went on to step 16 before "crashing".
    rc, _, _ = run(TINY + ["--epochs", "1", "--save", early, "--quiet"], umask=0o077)
    check(rc == 0 and stat.S_IMODE(os.stat(early).st_mode) == 0o600,
          f"umask 077: checkpoint 0600 ({oct(stat.S_IMODE(os.stat(early).st_mode))})")
    rc, _, _ = run(TINY + ["--epochs", "2", "--metrics", metrics, "--report-every", "1",
                           "--quiet"], umask=0o027)
    check(rc == 0 and csv_steps(metrics) == list(range(1, 17)), "the first run wrote 16 rows")
    check(stat.S_IMODE(os.stat(metrics).st_mode) == 0o640, "umask 027: metrics 0640")
    with open(metrics, "a") as f:
        f.write("17,2,0.5")  # a row cut short by the crash
    rc, _, err = run(TINY + ["--epochs", "2", "--metrics", metrics, "--report-every", "1",
                             "--resume", early, "--quiet"])
    check(rc == 0, f"resume with the old metrics ({rc}: {err[-300:]})")
    check(csv_steps(metrics) == list(range(1, 17)),
          f"metrics after resume: each step once ({csv_steps(metrics)})")
    check(tmp_files(d) == [], f"metrics rewrite left no temp files ({tmp_files(d)})")
    rc, _, _ = run(TINY + ["--epochs", "1", "--save", early, "--quiet"], umask=0o022)
    check(stat.S_IMODE(os.stat(early).st_mode) == 0o644, "umask 022: checkpoint 0644")


def main():
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d:
        f32, mixed = test_checkpoint_values(d)
        test_resume_flags(d, mixed)
        test_paths(d, f32)
        test_classes(d)
        test_divergence(d)
        test_signals(d)
    with tempfile.TemporaryDirectory() as d:
        test_kills(d)
    with tempfile.TemporaryDirectory() as d:
        test_metrics_and_umask(d)
    return finish("hardening", t0)


if __name__ == "__main__":
    sys.exit(main())
