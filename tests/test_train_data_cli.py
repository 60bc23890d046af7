#!/usr/bin/env python3
"""mpcl-train on what the data say: a stray label that would widen the model
is called out (stderr and --json) with the --classes that refuses it, and
--classes then refuses it naming its index; --batch above the training
samples takes them all in one batch, allocates for them alone, and its
checkpoint resumes with --batch equal to the samples; where the batches come
from (MPCL_DATA) is in the banner and the JSON, a streamed run ends with the
device-resident run's test loss, and a misspelt MPCL_DATA stops the run
naming it. Small synthetic sets
(4x4 images), so it runs in seconds on PoCL.

usage: test_train_data_cli.py PATH/TO/mpcl-train"""
import json
import os
import sys
import tempfile
import time

from train_cli_common import check, finish, idx_images, idx_labels, run, write_set

SMALL = ["--hidden", "8", "--epochs", "1", "--precision", "float32", "--json"]


def write_data(d, labels):
    write_set(d, "train", idx_images(len(labels), 4, 4), idx_labels(labels))
    write_set(d, "t10k", idx_images(100, 4, 4), idx_labels([i % 10 for i in range(100)]))


def test_stray_label():
    labels = [i % 10 for i in range(2000)]
    labels[1234] = 10
    with tempfile.TemporaryDirectory() as d:
        write_data(d, labels)
        rc, out, err = run(["--data", d] + SMALL)
        if not check(rc == 0, f"stray label: the run goes on ({rc}: {err[-500:]!r})"):
            return
        doc = json.loads(out)
        classes = doc.get("classes", {})
        check(classes.get("count") == 11 and classes.get("source") == "largest training label"
              and classes.get("largest_label") == 10,
              f"stray label: JSON has 11 classes inferred from label 10: {classes!r}")
        check(classes.get("rare") == [{"class": 10, "examples": 1}],
              f"stray label: JSON names class 10 with 1 example as rare: {classes!r}")
        check("classes   11, inferred from the largest training label 10" in err,
              f"stray label: the banner says where 11 classes come from: {err!r}")
        warning = [line for line in err.splitlines() if "warning" in line]
        check(len(warning) == 1 and "class 10 has 1 training example of 2000" in warning[0]
              and "--classes 10" in warning[0],
              f"stray label: one warning naming label 10, its count and --classes 10: {warning}")
        # Declared, the stray label is refused, naming its file and index.
        rc, out, err = run(["--data", d, "--classes", "10"] + SMALL)
        check(rc == 1 and out == "" and "train-labels-idx1-ubyte'" in err
              and "label 10 at index 1234" in err and "class count 10" in err,
              f"--classes 10: the stray label refused by index ({rc}: {err!r})")
    # Clean data: no warning, nothing rare.
    with tempfile.TemporaryDirectory() as d:
        write_data(d, [i % 10 for i in range(2000)])
        rc, out, err = run(["--data", d] + SMALL)
        if check(rc == 0, f"clean data: exit 0 ({rc}: {err[-300:]!r})"):
            classes = json.loads(out).get("classes", {})
            check(classes.get("count") == 10 and classes.get("rare") == [] and "warning" not in err,
                  f"clean data: 10 classes, none rare, no warning: {classes!r} {err!r}")
        rc, out, err = run(["--data", d, "--classes", "10"] + SMALL)
        if check(rc == 0, f"--classes 10 on clean data: exit 0 ({rc}: {err[-300:]!r})"):
            check(json.loads(out).get("classes", {}).get("source") == "--classes"
                  and "classes   10, declared" in err,
                  f"--classes 10: declared in the JSON and the banner: {err!r}")


def test_batch_above_samples():
    with tempfile.TemporaryDirectory() as d:
        write_data(d, [i % 10 for i in range(2000)])
        ck = os.path.join(d, "ck.safetensors")
        base = ["--data", d, "--train-limit", "1000"] + SMALL
        rc, out, err = run(base + ["--batch", "100000", "--save", ck])
        if not check(rc == 0, f"--batch 100000: exit 0 ({rc}: {err[-500:]!r})"):
            return
        big = json.loads(out)
        check(big.get("batch") == 1000 and big.get("batch_requested") == 100000
              and big["steps"] == 1,
              f"--batch 100000: one batch of the 1000 samples: {big.get('batch')}, "
              f"{big.get('batch_requested')}, {big['steps']} steps")
        check("batch     1000: --batch 100000 is more than the 1000 training samples" in err,
              f"--batch 100000: the banner says so: {err!r}")
        rc, out, err = run(base + ["--batch", "1000"])
        if check(rc == 0, f"--batch 1000: exit 0 ({rc}: {err[-300:]!r})"):
            same = json.loads(out)
            check(big["peak_device_bytes"] == same["peak_device_bytes"],
                  f"--batch 100000 allocates what --batch 1000 does: "
                  f"{big['peak_device_bytes']} vs {same['peak_device_bytes']}")
        # The checkpoint holds the batch taken: --batch 1000 resumes it.
        rc, out, err = run(["--data", d, "--train-limit", "1000", "--hidden", "8", "--epochs",
                            "2", "--precision", "float32", "--json", "--batch", "1000",
                            "--resume", ck])
        check(rc == 0 and json.loads(out or "{}").get("steps") == 2,
              f"resume with --batch 1000: continues to step 2 ({rc}: {err[-300:]!r})")


def test_placement():
    with tempfile.TemporaryDirectory() as d:
        write_data(d, [i % 10 for i in range(500)])
        docs = {}
        for placement in ["device", "stream"]:
            rc, out, err = run(["--data", d] + SMALL, env={"MPCL_DATA": placement})
            if not check(rc == 0, f"MPCL_DATA={placement}: exit 0 ({rc}: {err[-300:]!r})"):
                return
            docs[placement] = json.loads(out)
            got = docs[placement].get("data", {}).get("placement")
            check(got == {"train": placement, "test": placement},
                  f"MPCL_DATA={placement}: the JSON says so: {got!r}")
            words = "streamed from the host" if placement == "stream" else "on the device"
            line = f"batches   training set {words}, test set {words}"
            check(line in err, f"MPCL_DATA={placement}: the banner says so: {err!r}")
        check(docs["device"]["test_loss"] == docs["stream"]["test_loss"],
              f"streamed and held: the same test loss: {docs['device']['test_loss']} vs "
              f"{docs['stream']['test_loss']}")
        rc, out, err = run(["--data", d] + SMALL, env={"MPCL_DATA": "disk"})
        check(rc == 1 and "MPCL_DATA='disk'" in err and "auto, device, stream" in err,
              f"MPCL_DATA=disk: exit 1 naming it and its values ({rc}: {err[-300:]!r})")


def main():
    t0 = time.time()
    test_stray_label()
    test_batch_above_samples()
    test_placement()
    return finish("mpcl-train data", t0)


if __name__ == "__main__":
    sys.exit(main())
