"""Pictures of a run: mpcl-train --plot and History.plot write one
self-contained SVG; it parses as XML, and rendered by rsvg-convert each
panel shows its lines in the colours the legend gives."""
import os
import signal
import stat
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

import mpcl
from conftest import run_cli, seed_model

SVG = "{http://www.w3.org/2000/svg}"
TRAIN, TEST, SKIP = (0x1f, 0x77, 0xb4), (0xd6, 0x27, 0x28), (0xff, 0x7f, 0x0e)


def alarm_fails(signum, frame):
    raise AssertionError("blocked: waited on a FIFO")


def read_png(path):
    """RGBA pixels, (h, w, 4) int."""
    with Image.open(path) as im:
        return np.asarray(im.convert("RGBA"), dtype=np.int32)


def panels(root):
    """Plot areas (x, y, w, h) of the four panels, in drawing order, and the
    legend boxes (whose colour swatches must not count as lines)."""
    out, legends = [], []
    for g in root.iter(SVG + "g"):
        if g.get("class") == "panel":
            r = g.find(SVG + "rect")
            out.append(tuple(float(r.get(k)) for k in ("x", "y", "width", "height")))
    for r in root.iter(SVG + "rect"):
        if r.get("class") == "legend":
            legends.append(tuple(float(r.get(k)) for k in ("x", "y", "width", "height")))
    return out, legends


def count(px, box, legends, rgb):
    """Pixels of colour rgb inside the plot area box, outside every legend."""
    hit = np.all(np.abs(px[:, :, :3] - np.array(rgb)) <= 8, axis=-1)
    mask = np.zeros(hit.shape, bool)
    x, y, w, h = (int(v) for v in box)
    mask[y + 1:y + h - 1, x + 1:x + w - 1] = True
    for lx, ly, lw, lh in legends:
        mask[int(ly) - 1:int(ly + lh) + 2, int(lx) - 1:int(lx + lw) + 2] = False
    return int(np.sum(hit & mask))


def check_legends_clear(root):
    """No plotted point (a dot of radius r) touches any legend box."""
    _, legends = panels(root)
    dots = [(float(c.get("cx")), float(c.get("cy")), float(c.get("r")))
            for c in root.iter(SVG + "circle")]
    assert dots
    for lx, ly, lw, lh in legends:
        under = [(x, y) for x, y, r in dots
                 if lx - r <= x <= lx + lw + r and ly - r <= y <= ly + lh + r]
        assert not under, ((lx, ly, lw, lh), under[:5])


def check_svg(path, colours):
    """Parses, checks it references nothing outside itself, renders it, and
    counts each panel's pixels of each colour: colours[i] lists the colours
    panel i must show (at least 20 pixels each: a line, not a stray dot)."""
    text = open(path, encoding="utf-8").read()
    root = ET.fromstring(text)
    assert root.tag == SVG + "svg"
    for el in root.iter():
        assert el.tag.split("}")[1] not in ("image", "script", "use", "foreignObject")
        assert not any("href" in k for k in el.attrib), el.attrib
    assert "url(" not in text
    boxes, legends = panels(root)
    assert len(boxes) == 4 and len(legends) == 4
    titles = [t.text for t in root.iter(SVG + "text") if t.get("font-weight") == "bold"]
    assert titles == ["Loss", "Accuracy", "Loss scale", "Throughput"]
    check_legends_clear(root)
    png = str(path) + ".png"
    subprocess.run(["rsvg-convert", "-o", png, str(path)], check=True, timeout=60)
    px = read_png(png)
    for box, want in zip(boxes, colours):
        for rgb in want:
            assert count(px, box, legends, rgb) >= 20, (box, rgb)
    return root


def test_cli_plot(train_exe, tmp_path):
    out = tmp_path / "run.svg"
    # 2^30 overflows f16 gradients: skipped steps and a falling scale to mark.
    run_cli(train_exe, "--precision", "mixed_float16", "--epochs", "2", "--report-every", "4",
            "--hidden", "32", "--initial-loss-scale", "1073741824", "--plot", str(out))
    root = check_svg(out, [[TRAIN, TEST], [TRAIN, TEST], [TRAIN, SKIP], [TRAIN]])
    title = next(root.iter(SVG + "text")).text
    assert "mixed_float16" in title and "storage f16" in title and "dynamic" in title
    dev = mpcl.devices()
    assert any(d["name"] in title for d in dev)
    marks = [g for g in root.iter(SVG + "g") if g.get("class") == "skipped"][0]
    assert len(marks) >= 1


def test_history_plot(data, tmp_path):
    x, y, xt, yt = data
    h = seed_model(hidden=32).fit(x, y, epochs=2, batch_size=128, validation_data=(xt, yt),
                                  verbose=0, report_every=4)
    out = tmp_path / "py.svg"
    h.plot(out)
    # float32: no scaling, so the scale line is flat at 1 and nothing is marked.
    root = check_svg(out, [[TRAIN, TEST], [TRAIN, TEST], [TRAIN], [TRAIN]])
    assert "float32" in next(root.iter(SVG + "text")).text
    assert not list([g for g in root.iter(SVG + "g") if g.get("class") == "skipped"][0])
    with pytest.raises(mpcl.MpclError) as e:
        h.plot(tmp_path / "no-such-folder" / "x.svg")
    assert e.value.status == "MPCL_ERR_IO"
    # A FIFO at the path is refused and left as it is, never waited on (the
    # alarm turns a blocking open into a failure instead of a hang).
    fifo = tmp_path / "fifo.svg"
    os.mkfifo(fifo)
    signal.signal(signal.SIGALRM, alarm_fails)
    signal.alarm(20)
    try:
        with pytest.raises(mpcl.MpclError) as e:
            h.plot(fifo)
    finally:
        signal.alarm(0)
    assert e.value.status == "MPCL_ERR_IO" and "a FIFO" in str(e.value)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_the_legend_never_covers_a_point(data, tmp_path):
    """Data that zig-zag between their extremes from the first step to the
    last cross all four corners of every panel: the legend then takes
    headroom above the data instead of lying on a dot (a CI run's measured
    throughput once did that)."""
    import ctypes
    x, y, _, _ = data
    h = seed_model(hidden=32).fit(x[:256], y[:256], epochs=1, batch_size=128, verbose=0,
                                  report_every=1)
    r = mpcl._lib.TrainReport(**h.reports[-1])
    for i in range(40):
        high = i % 2 == 0
        r.step += 1
        r.loss, r.accuracy = (3.0, 0.95) if high else (0.1, 0.05)
        r.samples_per_s = 50000.0 if high else 100.0
        r.loss_scale = 1.0
        mpcl._lib.call(mpcl._lib.lib.mpcl_run_record_add, h._record, ctypes.byref(r))
    out = tmp_path / "zigzag.svg"
    h.plot(out)
    check_legends_clear(ET.parse(out).getroot())


def test_cli_plot_path_checked_first(train_exe, tmp_path):
    p = run_cli(train_exe, "--plot", str(tmp_path / "missing" / "run.svg"), check=False)
    assert p.returncode == 1 and "--plot" in p.stderr and "does not exist" in p.stderr
