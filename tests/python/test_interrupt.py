"""Ctrl-C during fit: the trainer stops after the current step, the model
keeps what it learnt (a checkpoint written afterwards holds it), and
KeyboardInterrupt reaches the caller."""
import json
import signal
import subprocess
import sys
import time

from conftest import read_safetensors

SCRIPT = r'''
import json, sys, mpcl
(x, y), _ = mpcl.datasets.fashion_mnist.load_data()
x, y = x.reshape(-1, 784)[:2048], y[:2048]
m = mpcl.Sequential([mpcl.layers.Dense(32, activation="relu", input_shape=(784,)),
                     mpcl.layers.Dense(10)])
m.compile(loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True))
try:
    m.fit(x, y, epochs=100000, batch_size=64, verbose=2, report_every=1)
    print("RESULT finished")
except KeyboardInterrupt:
    m.save(sys.argv[1])
    h = m.history
    print("RESULT " + json.dumps({"stopped": h.stopped, "last": h.reports[-1]["step"],
                                 "epochs": len(h.history.get("loss", []))}))
'''


def test_ctrl_c_stops_after_the_step(tmp_path):
    ck = tmp_path / "stopped.safetensors"
    p = subprocess.Popen([sys.executable, "-u", "-c", SCRIPT, str(ck)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    # Wait until training is under way (the first epoch's line), then Ctrl-C.
    line = ""
    deadline = time.time() + 120
    while "Epoch 2/" not in line and time.time() < deadline:
        line = p.stdout.readline()
        assert line, p.stderr.read()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "stopping after the current step" in err
    result = json.loads(out.split("RESULT ", 1)[1])
    assert result["stopped"] and result["epochs"] >= 1
    # The checkpoint holds exactly the steps reported: nothing lost, nothing
    # half-done, and far from the 100000 epochs asked for.
    _, meta = read_safetensors(ck)
    assert int(meta["step"]) == result["last"] < 100000 * 32
