"""The package itself: the ctypes mirrors of the C structs agree with the
library (defaults read through them are the documented ones), the library is
found as documented, and pip installs the package without a compiler."""
import glob
import os
import shutil
import subprocess
import sys

import mpcl
from mpcl import _lib
from conftest import run_python


def test_struct_mirrors_read_the_documented_defaults():
    # Read through the mirrored layouts: a field out of place reads garbage.
    p = _lib.lib.mpcl_train_default_params()
    assert (p.epochs, p.batch, p.seed, p.report_every) == (10, 128, 42, 50)
    assert not p.train_data and not p.test_data and not p.stop
    m = p.model
    assert (m.inputs, m.layer_count, m.hidden[0], m.hidden_count, m.classes) == (784, 0, 128, 1,
                                                                                 10)
    assert _lib.ACTIVATIONS[m.activation] == "relu" and _lib.POLICIES[m.policy] == "auto"
    assert (m.max_batch, m.seed, m.loss_scaling) == (128, 42, _lib.LOSS_SCALING_PLAN)
    o = m.optim
    assert o.kind == _lib.OPTIM_ADAM
    # c_float fields read back as the nearest double of the float.
    assert abs(o.lr - 1e-3) < 1e-9 and abs(o.beta1 - 0.9) < 1e-7 and abs(o.beta2 - 0.999) < 1e-7
    assert abs(o.eps - 1e-7) < 1e-12 and o.clip_norm == 0
    ls = m.loss_scale
    assert (ls.mode, ls.initial_scale, ls.growth_interval) == (_lib.LOSS_SCALE_DYNAMIC, 32768.0,
                                                               2000)
    assert (ls.backoff_factor, ls.min_scale, ls.max_scale) == (0.5, 1.0, 2.0 ** 24)
    for i, name in enumerate(_lib.ACTIVATIONS):
        assert _lib.text(_lib.lib.mpcl_activation_name(i)) == name
    for i, name in enumerate(_lib.POLICIES):
        assert _lib.text(_lib.lib.mpcl_policy_name(i)) == name
    for i, name in enumerate(_lib.DTYPES):
        assert _lib.text(_lib.lib.mpcl_dtype_name(i)) == name


def test_devices_equal_the_probe():
    import json
    p = subprocess.run([os.environ["MPCL_PROBE"], "--json"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    probe, ours = json.loads(p.stdout)["devices"], mpcl.devices()
    assert len(probe) == len(ours)
    for a, b in zip(ours, probe):
        assert sorted(a) == sorted(b)
        diff = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
        # PoCL derives the memory sizes from the host's free memory, which
        # moves between two calls on a shared machine.
        assert set(diff) <= {"global_mem_bytes", "max_alloc_bytes"}, diff


def test_library_lookup(tmp_path):
    lib = os.environ["MPCL_LIBRARY"]
    code = "import mpcl; print(mpcl.library_path)"
    # A wrong MPCL_LIBRARY is an error naming it, not a silent fallback.
    p = run_python(code, env={"MPCL_LIBRARY": str(tmp_path / "nope.so")})
    assert p.returncode != 0 and "nope.so" in p.stderr
    # Without it, pkg-config's libdir comes first.
    pc = tmp_path / "mpcl.pc"
    libdir = tmp_path / "lib"
    libdir.mkdir()
    os.symlink(lib, libdir / "libmpcl.so.0")
    pc.write_text(f"libdir={libdir}\nName: mpcl\nDescription: x\nVersion: 0.1.0\n"
                  "Libs: -L${libdir} -lmpcl\n")
    env = dict(os.environ, PKG_CONFIG_PATH=str(tmp_path))
    env.pop("MPCL_LIBRARY")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(libdir / "libmpcl.so.0")
    # With neither (and no mpcl.pc anywhere pkg-config looks), a checkout
    # whose build folder is build/ finds build/src/libmpcl.so.0: running from
    # the build tree. Checked on a copy of the package in a checkout made
    # here, whose build/ links to this build's library, so that the check
    # runs wherever this build is (meson may build outside the checkout).
    # Only where nothing is installed: an installed libmpcl comes first.
    installed = [f for prefix in ("/usr/local", "/usr") for pattern in (
        "/lib*/libmpcl.so*", "/lib*/*/libmpcl.so*") for f in glob.glob(prefix + pattern)]
    if installed:
        return
    checkout = tmp_path / "checkout"
    shutil.copytree(os.path.dirname(os.path.abspath(mpcl.__file__)), checkout / "python" / "mpcl",
                    ignore=shutil.ignore_patterns("__pycache__"))
    tree = checkout / "build" / "src" / "libmpcl.so.0"
    tree.parent.mkdir(parents=True)
    os.symlink(lib, tree)
    env.update(PKG_CONFIG_PATH=str(tmp_path / "none"), PKG_CONFIG_LIBDIR=str(tmp_path / "none"),
               PYTHONPATH=str(checkout / "python"))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert os.path.normpath(p.stdout.strip()) == str(tree)


def test_pip_installs_without_a_compiler(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(os.path.join(os.path.dirname(mpcl.__file__), ".."), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation",
                        "--no-deps", "--no-index", "--target", str(target), str(src)],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, CC="false"))
    assert p.returncode == 0, p.stderr
    assert not list(target.rglob("*.so"))
    env = dict(os.environ, PYTHONPATH=str(target))
    p = subprocess.run([sys.executable, "-c", "import mpcl; print(mpcl.__file__, mpcl.__version__)"],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    path, version = p.stdout.split()
    assert path.startswith(str(target)) and version == mpcl.__version__
