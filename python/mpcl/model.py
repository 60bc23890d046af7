"""Sequential, History and load_model: the Keras flow over libmpcl.

fit() runs the library's trainer (mpcl_trainer_fit, the loop mpcl-train
runs) on data sets built from the numpy arrays; evaluate() and predict() run
the model's forward pass batch by batch; save() and load_model() use the
CLI's safetensors checkpoints."""

import ctypes
import os
import sys
import threading
import time

import numpy as np

from . import _lib, losses, mixed_precision, optimizers
from ._lib import call, lib

_HIDDEN_ACTIVATIONS = ("linear", "relu", "gelu", "tanh", "sigmoid")
_ACCURACY = ("accuracy", "acc", "sparse_categorical_accuracy")


class History:
    """What fit() returns: `history` is {"loss": [...], "accuracy": [...],
    "val_loss": [...], "val_accuracy": [...]} with one value per epoch, as in
    Keras; `reports` holds every report of the trainer (a dict each);
    plot(path) writes the run's SVG."""

    def __init__(self, record):
        self.history = {}
        self.epoch = []
        self.reports = []
        self.stopped = False
        self._record = record

    def plot(self, path):
        call(lib.mpcl_run_record_write_svg, self._record, os.fsencode(path))

    def __del__(self):
        if getattr(self, "_record", None):
            lib.mpcl_run_record_destroy(self._record)
            self._record = None


def _fmt_time(s):
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s}s"


class _Progress:
    """Turns the trainer's reports into per-epoch means (weighted by the
    samples of each report) and a Keras-like progress bar."""

    def __init__(self, n, batch, epochs, verbose, metrics, scaled, history):
        self.n, self.batch, self.epochs = n, batch, epochs
        self.verbose, self.metrics, self.scaled, self.h = verbose, metrics, scaled, history
        self.live = verbose == 1 and sys.stdout.isatty()
        self.epoch = None
        self.line_open = False
        self.live_len = 0
        self.t_last = 0.0  # elapsed_s of the last report

    def _start(self, r):
        self.epoch, self.prev, self.samples, self.loss_sum, self.correct = r.epoch, 0, 0, 0.0, 0.0
        self.t0 = self.t_last
        if self.verbose:
            print(f"Epoch {r.epoch + 1}/{self.epochs}", flush=True)

    def __call__(self, r):
        if self.epoch != r.epoch:
            self._start(r)
        k = (r.epoch_step - self.prev) * self.batch
        if r.epoch_step == r.epoch_steps:  # the epoch's last batch may be short
            k -= r.epoch_steps * self.batch - self.n
        self.prev = r.epoch_step
        self.samples += k
        self.loss_sum += r.loss * k
        self.correct += r.accuracy * k
        loss, acc = self.loss_sum / self.samples, self.correct / self.samples
        self.h.reports.append({f: getattr(r, f) for f, _ in _lib.TrainReport._fields_})
        self.t_last = r.elapsed_s
        parts = [f"loss: {loss:.4f}"] + [f"{m}: {acc:.4f}" for m in self.metrics]
        if self.scaled:
            parts.append(f"loss_scale: {r.loss_scale:g}")
        if r.epoch_end:
            h = self.h.history
            h.setdefault("loss", []).append(loss)
            for m in self.metrics:
                h.setdefault(m, []).append(acc)
            if np.isfinite(r.test_loss):
                h.setdefault("val_loss", []).append(r.test_loss)
                parts.append(f"val_loss: {r.test_loss:.4f}")
                for m in self.metrics:
                    h.setdefault("val_" + m, []).append(r.test_accuracy)
                    parts.append(f"val_{m}: {r.test_accuracy:.4f}")
            self.h.epoch.append(r.epoch)
        if not self.verbose:
            return
        total = r.epoch_steps
        w = len(str(total))
        if r.epoch_end:
            secs = r.elapsed_s - self.t0
            head = f"{total}/{total} [{'=' * 30}] - {_fmt_time(secs)} " \
                   f"{1000 * secs / max(total, 1):.0f}ms/step"
            text = " - ".join([head] + parts)
            if self.live:  # over the live line, padded to its length
                text = "\r" + text.ljust(self.live_len)
            print(text, flush=True)
            self.line_open = False
        elif self.live:
            done = int(30 * r.epoch_step / total)
            bar = "=" * max(done - 1, 0) + (">" if done else "") + "." * (30 - done)
            eta = (total - r.epoch_step) * self.batch / r.samples_per_s if r.samples_per_s else 0
            line = f"{r.epoch_step:>{w}}/{total} [{bar}] - ETA: {_fmt_time(eta)}"
            text = " - ".join([line] + parts)
            self.live_len = len(text)
            sys.stdout.write("\r" + text)
            sys.stdout.flush()
            self.line_open = True


_U32_MAX = 2 ** 32 - 1


def _batch_size(batch_size):
    """Keras' 32 for None; else an integer in [1, 2^31 - 1]."""
    return 32 if batch_size is None else _lib.check_int("batch_size", batch_size, 1, 2 ** 31 - 1)


def _check_x(x, features, what):
    """x as the model takes it: a 2-D uint8 or float32 array of `features`
    columns. Refused here, before anything reaches the device."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{what} must be a numpy array, not {type(x).__name__}")
    if x.dtype not in (np.uint8, np.float32):
        raise TypeError(f"{what} has dtype {x.dtype}; mpcl takes uint8 (pixels, scaled by 1/255 "
                        "on the device) or float32")
    if x.ndim != 2 or x.shape[1] != features:
        raise ValueError(f"{what} has shape {x.shape}; the model's input shape is "
                         f"(None, {features})")
    if x.shape[0] == 0:
        raise ValueError(f"{what} holds no samples")
    return np.ascontiguousarray(x)


def _check_y(y, n, classes, what):
    """Sparse labels: integers in [0, classes), one per sample, shape (n,) or
    (n, 1)."""
    if not isinstance(y, np.ndarray):
        raise TypeError(f"{what} must be a numpy array, not {type(y).__name__}")
    if y.dtype.kind not in "iu":
        raise TypeError(f"{what} has dtype {y.dtype}; sparse categorical cross-entropy takes "
                        "integer class indices")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] != n:
        raise ValueError(f"{what} has shape {y.shape}; expected ({n},), one label per sample")
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi >= classes:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{what} holds label {bad}; the model has {classes} outputs, so labels "
                         f"must be in [0, {classes - 1}]")
    return y


def _as_bytes(x, what):
    """The u8 pixels the trainer holds on the device. float32 is taken when it
    is exactly byte / 255 (what x.astype("float32") / 255 gives), which the
    device's table reproduces bit for bit; anything else would be silently
    changed, so it is refused."""
    if x.dtype == np.uint8:
        return x
    u = np.rint(np.nan_to_num(x, nan=-1.0) * np.float32(255))
    ok = (u >= 0) & (u <= 255)
    b = np.where(ok, u, 0).astype(np.uint8)
    if not ok.all() or not np.array_equal(b.astype(np.float32) / np.float32(255), x):
        raise ValueError(f"{what}: fit() takes float32 only as byte / 255 values "
                         "(x.astype('float32') / 255), because the trainer keeps data sets as "
                         "bytes on the device as mpcl-train does; pass the uint8 array instead")
    return b


def _as_float(x):
    return x.astype(np.float32) / np.float32(255) if x.dtype == np.uint8 else x


class _Dataset:
    def __init__(self, x, y, classes):
        self.h = _lib.P()
        call(lib.mpcl_dataset_from_memory, x.ctypes.data, y.ctypes.data, x.shape[0], 1,
             x.shape[1], classes, ctypes.byref(self.h))

    def __del__(self):
        if getattr(self, "h", None) and self.h.value:
            lib.mpcl_dataset_destroy(self.h)


class Sequential:
    """Sequential([Dense(w, activation=a, input_shape=(f,)), ..., Dense(classes)]):
    an MLP whose hidden layers share one activation (as mpcl-train's
    --hidden/--activation, so checkpoints stay the CLI's), 1 to 7 of them,
    and an output layer that is linear (loss from_logits=True) or softmax
    (from_logits=False; predict() then applies the softmax on the host). The
    policy is the global one when the model is created."""

    def __init__(self, layers=None, name=None, seed=42):
        self.layers = list(layers or [])
        self.name = name or "sequential"
        self.seed = _lib.check_int("seed", seed, 0, 2 ** 64 - 1)
        self.policy = mixed_precision.global_policy()
        self.history = None
        self._compiled = None
        self._trainer = None
        self._model = None  # the trainer's model, or one of our own
        self._io = {}  # batch rows -> (x tensor, labels tensor)
        self._checkpoint = None  # the checkpoint this model was loaded from, until it trains

    def add(self, layer):
        self.layers.append(layer)

    # ---- the model's shape ----

    def _shape(self):
        ls = self.layers
        if not ls or ls[0].input_shape is None:
            raise ValueError("the first layer needs input_shape=(features,)")
        if any(l.input_shape is not None for l in ls[1:]):
            raise ValueError("only the first layer takes input_shape")
        hidden, out = ls[:-1], ls[-1]
        if not 1 <= len(hidden) <= _lib.MAX_HIDDEN:
            raise ValueError(f"mpcl trains 1 to {_lib.MAX_HIDDEN} hidden Dense layers before "
                             f"the output layer; this model has {len(hidden)}")
        acts = {l.activation for l in hidden}
        if len(acts) != 1 or next(iter(acts)) not in _HIDDEN_ACTIVATIONS:
            raise ValueError(f"hidden layers must share one activation of "
                             f"{', '.join(_HIDDEN_ACTIVATIONS)}; got {sorted(acts)}")
        if out.activation not in ("linear", "softmax"):
            raise ValueError(f"the output layer's activation must be None (logits) or softmax, "
                             f"not {out.activation!r}")
        return ls[0].input_shape[0], [l.units for l in hidden], acts.pop(), out.units

    # ---- compile ----

    def compile(self, optimizer="adam", loss=None, metrics=None):
        features, hidden, act, classes = self._shape()
        if isinstance(loss, str) and loss == "sparse_categorical_crossentropy":
            loss = losses.SparseCategoricalCrossentropy()
        if not isinstance(loss, losses.SparseCategoricalCrossentropy):
            raise ValueError("mpcl trains with SparseCategoricalCrossentropy only")
        softmax = self.layers[-1].activation == "softmax"
        if loss.from_logits == softmax:
            raise ValueError("the output layer and the loss disagree: use Dense(classes) with "
                             "from_logits=True, or Dense(classes, activation='softmax') with "
                             "from_logits=False")
        names = []
        for m in metrics or []:
            if m not in _ACCURACY:
                raise ValueError(f"unknown metric {m!r}; mpcl reports {_ACCURACY[0]!r}")
            names.append(m)
        opt = optimizers.get(optimizer)
        mp = lib.mpcl_model_default_params()
        if isinstance(opt, mixed_precision.LossScaleOptimizer):
            mp.loss_scaling = _lib.LOSS_SCALING_ON
            mp.loss_scale = opt._loss_scale_params()
            opt = optimizers.get(opt.inner_optimizer)
        mp.optim = opt._params()
        call(lib.mpcl_optim_params_check, None, ctypes.byref(mp.optim))
        mp.inputs, mp.classes = features, classes
        mp.hidden_count = len(hidden)
        for i, w in enumerate(hidden):
            mp.hidden[i] = w
        mp.activation = _lib.ACTIVATIONS.index("identity" if act == "linear" else act)
        mp.policy = _lib.parse_enum(lib.mpcl_policy_parse, self.policy, "policy", _lib.POLICIES)
        mp.seed = self.seed
        self._compiled = (mp, names)

    def _params(self, batch):
        if not self._compiled:
            raise RuntimeError("compile() the model first")
        mp = _lib.ModelParams.from_buffer_copy(self._compiled[0])
        mp.max_batch = batch
        return mp

    # ---- the device model ----

    def _set_model(self, model, trainer):
        """Replaces the device model, carrying the old one's state over."""
        if self._model:
            _copy_state(self._model, model)
        self._release()
        self._model, self._trainer = model, trainer

    def _release(self):
        for xt, yt in self._io.values():
            lib.mpcl_tensor_destroy(xt)
            lib.mpcl_tensor_destroy(yt)
        self._io = {}
        if self._trainer:
            lib.mpcl_trainer_destroy(self._trainer)
        elif self._model:
            lib.mpcl_model_destroy(self._model)
        self._model = self._trainer = None

    def __del__(self):
        try:
            self._release()
        except Exception:  # at interpreter exit the library may be gone
            pass

    def _device_model(self, batch):
        if not self._model:
            ctx = _lib.context()
            h = _lib.P()
            call(lib.mpcl_model_create, ctx, ctypes.byref(self._params(batch)), ctypes.byref(h),
                 ctx=ctx)
            self._model = h.value
        return self._model

    def _max_batch(self):
        return lib.mpcl_model_params_of(self._model).contents.max_batch

    def _forward(self, x, y, batch_size):
        """Yields (rows, logits) for each batch of x through eval_step, the
        evaluation statistics accumulating on the device. Batches hold
        batch_size rows (Keras' 32 when None), at most the model's max_batch;
        the I/O tensors are kept per row count."""
        ctx = _lib.context()
        m = self._model
        storage = lib.mpcl_model_plan(m).contents.storage
        classes = self._compiled[0].classes
        B = min(_batch_size(batch_size), self._max_batch())
        for first in range(0, x.shape[0], B):
            xb = np.ascontiguousarray(_as_float(x[first:first + B]))
            yb = np.ascontiguousarray(y[first:first + B], dtype=np.int32)
            n = xb.shape[0]
            if n not in self._io:
                xt, yt = _lib.P(), _lib.P()
                call(lib.mpcl_tensor_create, ctx, storage, n, xb.shape[1], ctypes.byref(xt),
                     ctx=ctx)
                call(lib.mpcl_tensor_create, ctx, 2, n, 1, ctypes.byref(yt), ctx=ctx)
                self._io[n] = (xt.value, yt.value)
            xt, yt = self._io[n]
            call(lib.mpcl_tensor_upload_f32, xt, xb.ctypes.data, xb.size, ctx=ctx)
            call(lib.mpcl_tensor_upload_i32, yt, yb.ctypes.data, yb.size, ctx=ctx)
            call(lib.mpcl_model_eval_step, m, xt, yt, ctx=ctx)
            out = np.empty((n, classes), np.float32)
            call(lib.mpcl_model_read_logits, m, out.ctypes.data, out.size, ctx=ctx)
            yield n, out

    def _read_eval(self):
        s = _lib.XentStats()
        call(lib.mpcl_model_read_eval_stats, self._model, ctypes.byref(s), True,
             ctx=_lib.context())
        return s

    # ---- fit / evaluate / predict ----

    def fit(self, x, y, epochs=1, batch_size=None, validation_data=None, verbose="auto",
            report_every=50):
        """Trains with the library's trainer, the loop mpcl-train runs: the data
        go to the device once as bytes (uint8, or float32 holding byte/255),
        every epoch is a seeded shuffle. Ctrl-C stops after the current step;
        the model keeps what it learnt, self.history what was reported, and
        KeyboardInterrupt is raised again."""
        mp = self._params(1)
        features, classes = mp.inputs, mp.classes
        batch = _batch_size(batch_size)
        epochs = _lib.check_int("epochs", epochs, 1, _U32_MAX)
        report_every = _lib.check_int("report_every", report_every, 1, _U32_MAX)
        if verbose != "auto":
            verbose = _lib.check_int("verbose", verbose, 0, 2)
        x = _as_bytes(_check_x(x, features, "x"), "x")
        y = _check_y(y, x.shape[0], classes, "y").astype(np.uint8)
        test = None
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
                raise ValueError("validation_data must be a tuple (x, y), not "
                                 f"{type(validation_data).__name__}")
            vx, vy = validation_data
            vx = _as_bytes(_check_x(vx, features, "validation x"), "validation x")
            vy = _check_y(vy, vx.shape[0], classes, "validation y").astype(np.uint8)
            test = _Dataset(vx, np.ascontiguousarray(vy), classes)
        train = _Dataset(x, np.ascontiguousarray(y), classes)

        ctx = _lib.context()
        p = lib.mpcl_train_default_params()
        p.epochs, p.batch, p.seed, p.report_every = epochs, batch, self.seed, report_every
        p.model = self._params(batch)
        p.train_data = train.h
        p.test_data = test.h if test else None
        stop = ctypes.c_int(0)
        p.stop = ctypes.pointer(stop)
        failure, hooks = [], {}

        def on_report(_user, r):
            try:
                call(lib.mpcl_run_record_add, hooks["record"], r)
                hooks["progress"](r.contents)
            except BaseException as e:  # never into C: stop, and raise it afterwards
                failure.append(e)
                stop.value = 1

        p.on_report = _lib.REPORT_FN(on_report)
        tr = _lib.P()
        call(lib.mpcl_trainer_create, ctx, ctypes.byref(p), ctypes.byref(tr), ctx=ctx)
        try:
            self._set_model(lib.mpcl_trainer_model(tr), tr.value)
        except BaseException:
            lib.mpcl_trainer_destroy(tr)
            raise
        self._checkpoint = None
        del train, test  # on the device now
        rec = _lib.P()
        call(lib.mpcl_run_record_create, tr, ctypes.byref(rec), ctx=ctx)
        history = History(rec.value)
        self.history = history
        scaled = bool(lib.mpcl_model_loss_scale(self._model))
        verbose = 1 if verbose == "auto" else verbose
        progress = _Progress(x.shape[0], batch, epochs, verbose, self._compiled[1], scaled,
                             history)
        hooks.update(record=rec, progress=progress)

        done = threading.Event()

        def run():
            try:
                call(lib.mpcl_trainer_fit, tr, ctx=ctx)
            except BaseException as e:
                failure.append(e)
            finally:
                done.set()

        # fit runs in a thread (ctypes releases the GIL) so that the main
        # thread takes Ctrl-C as KeyboardInterrupt and turns it into the stop
        # flag the trainer checks between steps. The main thread polls with
        # sleep: a KeyboardInterrupt inside Thread.join can leave is_alive()
        # False while the thread still runs (CPython bpo-45274).
        t = threading.Thread(target=run, name="mpcl-fit", daemon=True)
        interrupted = False
        t.start()
        while not done.is_set():
            try:
                time.sleep(0.02)
            except KeyboardInterrupt:
                # Once is enough: the trainer stops within a step, and raising
                # here would leave it training in the background.
                if not interrupted:
                    print("\nmpcl: stopping after the current step", file=sys.stderr,
                          flush=True)
                interrupted = True
                stop.value = 1
        if progress.live and progress.line_open:
            print(flush=True)
        s = _lib.TrainSummary()
        lib.mpcl_trainer_summary(tr, ctypes.byref(s))
        history.stopped = bool(s.stopped)
        if failure:
            raise failure[0]
        if interrupted:
            raise KeyboardInterrupt
        return history

    def evaluate(self, x, y, batch_size=None, verbose=0, return_dict=False):
        """Mean loss (and accuracy) over x, y in batches of batch_size (Keras'
        32 by default; the model's largest batch at most)."""
        if not self._compiled:
            raise RuntimeError("compile() the model first")
        mp = self._compiled[0]
        x = _check_x(x, mp.inputs, "x")
        y = _check_y(y, x.shape[0], mp.classes, "y")
        self._device_model(_batch_size(batch_size))
        self._read_eval()  # start from zero
        for _ in self._forward(x, y, batch_size):
            pass
        s = self._read_eval()
        loss, acc = s.loss_sum / s.samples, s.correct / s.samples
        names = self._compiled[1]
        if return_dict:
            return {"loss": loss, **{m: acc for m in names}}
        if verbose:
            print(" - ".join([f"loss: {loss:.4f}"] + [f"{m}: {acc:.4f}" for m in names]))
        return [loss] + [acc] * len(names) if names else loss

    def predict(self, x, batch_size=None, verbose=0):
        """float32 outputs, (n, classes): logits, or probabilities when the
        output layer is softmax."""
        if not self._compiled:
            raise RuntimeError("compile() the model first")
        x = _check_x(x, self._compiled[0].inputs, "x")
        self._device_model(_batch_size(batch_size))
        zeros = np.zeros(x.shape[0], np.int32)
        out = np.concatenate([o for _, o in self._forward(x, zeros, batch_size)])
        self._read_eval()  # leave no statistics behind
        if self.layers[-1].activation == "softmax":
            e = np.exp(out - out.max(axis=1, keepdims=True))
            out = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
        return out

    # ---- summary, save ----

    def summary(self, print_fn=print):
        features, hidden, act, classes = self._shape()
        rows, inputs, total = [], features, 0
        for i, l in enumerate(self.layers):
            n = inputs * l.units + l.units
            rows.append((l.name or f"dense_{i} (Dense)", f"(None, {l.units})", n))
            total += n
            inputs = l.units
        print_fn(f'Model: "{self.name}"')
        print_fn("_" * 65)
        print_fn(f"{'Layer (type)':<30}{'Output Shape':<22}{'Param #':>13}")
        print_fn("=" * 65)
        for name, shape, n in rows:
            print_fn(f"{name:<30}{shape:<22}{n:>13,}")
        print_fn("=" * 65)
        print_fn(f"Total params: {total:,} (f32 master weights: {4 * total:,} bytes)")
        ctx = _lib.context()
        pol = _lib.parse_enum(lib.mpcl_policy_parse, self.policy, "policy", _lib.POLICIES)
        plan = lib.mpcl_context_plan(ctx, pol)
        scaling = plan.loss_scaling
        if self._compiled and self._compiled[0].loss_scaling != _lib.LOSS_SCALING_PLAN:
            scaling = self._compiled[0].loss_scaling == _lib.LOSS_SCALING_ON
        dev = lib.mpcl_context_device(ctx).contents
        print_fn(f"Device: {_lib.text(dev.name)}")
        print_fn(f"Policy: {self.policy} -> {_lib.text(lib.mpcl_policy_name(plan.resolved))}: "
                 f"storage {_lib.text(lib.mpcl_dtype_name(plan.storage))}, GEMM "
                 f"{_lib.text(lib.mpcl_gemm_path_name(plan.gemm))}, loss scaling "
                 f"{'on' if scaling else 'off'} ({_lib.text(plan.reason)})")
        print_fn("_" * 65)

    def save(self, path):
        """A safetensors checkpoint, the same file mpcl-train --save writes,
        through the library's one writer: atomic, and only a regular file is
        ever replaced (MpclError MPCL_ERR_IO naming the path otherwise). A
        model needs a fit() or a load_model() first: the file records the
        training run."""
        path = os.fspath(path)
        if self._trainer:
            call(lib.mpcl_trainer_save, self._trainer, os.fsencode(path), ctx=_lib.context())
        elif self._checkpoint:
            call(lib.mpcl_checkpoint_save_model, self._checkpoint.h, self._model,
                 os.fsencode(path), ctx=_lib.context())
        else:
            raise ValueError("save(): fit() the model (or load one) first; mpcl checkpoints "
                             "record the training run")


def _copy_state(src, dst):
    """The master weights, and with the same optimizer kind its slots and step
    counter, and the loss scaler's state when both scale, from src to dst
    (same shapes: the same compiled model)."""
    ctx = _lib.context()
    same_optim = (lib.mpcl_model_params_of(src).contents.optim.kind ==
                  lib.mpcl_model_params_of(dst).contents.optim.kind)
    for i in range(lib.mpcl_model_param_count(src)):
        count = lib.mpcl_model_param(src, i).contents.count
        buf = np.empty(count, np.float32)
        for slot in (_lib.SLOT_MASTER, _lib.SLOT_M, _lib.SLOT_V):
            if slot == _lib.SLOT_MASTER or (same_optim and lib.mpcl_model_has_slot(src, slot)):
                call(lib.mpcl_model_read_param, src, i, slot, buf.ctypes.data, count, ctx=ctx)
                call(lib.mpcl_model_write_param, dst, i, slot, buf.ctypes.data, count, ctx=ctx)
    if same_optim:
        step = ctypes.c_uint32()
        call(lib.mpcl_model_read_step, src, ctypes.byref(step), ctx=ctx)
        call(lib.mpcl_model_write_step, dst, step.value, ctx=ctx)
    a, b = lib.mpcl_model_loss_scale(src), lib.mpcl_model_loss_scale(dst)
    if a and b:
        st = _lib.LossScaleState()
        call(lib.mpcl_loss_scale_read, ctx, a, ctypes.byref(st), ctx=ctx)
        call(lib.mpcl_loss_scale_write_state, ctx, b, ctypes.byref(st), ctx=ctx)
