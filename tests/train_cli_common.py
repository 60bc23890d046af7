"""What the end-to-end tests of mpcl-train share: the tool's path (argv[1]),
a failure list that main() turns into the exit status, a runner, IDX writers
and a reader of progress lines."""
import gzip
import os
import struct
import subprocess
import sys
import time

TRAIN = os.path.abspath(sys.argv[1])
FASHION = "/usr/share/datasets/fashion-mnist"
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)
    return cond


# Generous: a cold program cache on Rusticl (llvmpipe) takes minutes to build.
def run(args, cwd=None, timeout=900, env=None, umask=None):
    e = dict(os.environ)
    e.update(env or {})
    pre = (lambda: os.umask(umask)) if umask is not None else None
    p = subprocess.run([TRAIN] + args, capture_output=True, text=True, cwd=cwd, timeout=timeout,
                       env=e, preexec_fn=pre)
    return p.returncode, p.stdout, p.stderr


def finish(what, t0):
    """The exit status of a test script: 1 when any check failed."""
    print(f"{time.time() - t0:.1f} s", file=sys.stderr)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed", file=sys.stderr)
        return 1
    print(f"all {what} checks passed")
    return 0


def idx_images(n, rows=28, cols=28, magic=0x803, fill=None):
    body = bytes((i * 7 + j) % 256 for i in range(n) for j in range(rows * cols)) \
        if fill is None else fill
    return struct.pack(">IIII", magic, n, rows, cols) + body


def idx_labels(labels, magic=0x801):
    return struct.pack(">II", magic, len(labels)) + bytes(labels)


def write_set(d, prefix, images, labels, gz=False):
    names = {f"{prefix}-images-idx3-ubyte": images, f"{prefix}-labels-idx1-ubyte": labels}
    for name, data in names.items():
        if gz:
            with open(os.path.join(d, name + ".gz"), "wb") as f:
                f.write(gzip.compress(data))
        else:
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)


def wait_for_line(stream, needle, limit_s):
    """Reads stream line by line until a line holds needle."""
    seen = []
    deadline = time.time() + limit_s
    while time.time() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return True, seen
    return False, seen


def interrupt(args, needle, sig, on="stderr", before=None, limit_s=900):
    """Starts mpcl-train, waits for a line holding needle on stdout or
    stderr, calls before() if given, sends sig, and collects the rest:
    (exit status, stdout, stderr, whether the line came, the lines seen)."""
    proc = subprocess.Popen([TRAIN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        ok, seen = wait_for_line(getattr(proc, on), needle, limit_s)
        if before:
            before()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err, ok, seen
