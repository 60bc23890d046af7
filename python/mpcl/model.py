"""Sequential and History: the Keras flow over libmpcl.

fit() runs the library's trainer (mpcl_trainer_fit, the loop mpcl-train
runs) on data sets built from the numpy arrays, one epoch per call so that
callbacks run between epochs; evaluate() and predict() run the model's
forward pass batch by batch; save() and load_model() use the CLI's
safetensors checkpoints."""

import ctypes
import json
import math
import os
import sys
import threading
import time

import numpy as np

from . import _lib, callbacks as callbacks_module, layers as layers_module, losses
from . import mixed_precision, optimizers
from ._lib import call, lib

# The names compile() takes for the metric of each loss (the library's
# mpcl_loss_metric_name), Keras' aliases first.
_METRIC_NAMES = {"accuracy": ("accuracy", "acc", "sparse_categorical_accuracy"),
                 "binary_accuracy": ("accuracy", "acc", "binary_accuracy"),
                 "mae": ("mae", "mean_absolute_error")}
# How predict() applies the output activation the loss applies in training
# (the library's mpcl_model_output_activation), on the host.
_HOST_ACTIVATIONS = {
    "softmax": lambda z: (lambda e: e / e.sum(axis=1, keepdims=True))(
        np.exp(z - z.max(axis=1, keepdims=True))),
    "sigmoid": lambda z: 1 / (1 + np.exp(-z)),
}


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

    def __init__(self, n, batch, epochs, verbose, metrics, scaled, history, on_batch):
        self.n, self.batch, self.epochs = n, batch, epochs
        self.verbose, self.metrics, self.scaled, self.h = verbose, metrics, scaled, history
        self.live = verbose == 1 and sys.stdout.isatty()
        self.epoch = None
        self.line_open = False
        self.live_len = 0
        self.t_last = 0.0  # elapsed_s of the last report
        self.on_batch = on_batch  # (batch, logs) at every report
        self.logs = None  # the last epoch's logs, set at its end

    def _start(self, r):
        self.epoch, self.prev, self.samples, self.loss_sum, self.correct = r.epoch, 0, 0, 0.0, 0.0
        self.t0 = 0.0  # each trainer call runs one epoch: its clock starts there
        self.logs = None
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
        self.on_batch(r.epoch_step - 1, {"loss": loss, **{m: acc for m in self.metrics}})
        if r.epoch_end:
            logs = {"loss": loss, **{m: acc for m in self.metrics}}
            if np.isfinite(r.test_loss):
                logs["val_loss"] = r.test_loss
                parts.append(f"val_loss: {r.test_loss:.4f}")
                for m in self.metrics:
                    logs["val_" + m] = r.test_accuracy
                    parts.append(f"val_{m}: {r.test_accuracy:.4f}")
            for k, v in logs.items():
                self.h.history.setdefault(k, []).append(v)
            self.h.epoch.append(r.epoch)
            self.logs = logs
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


# The x dtypes the model takes: uint8 (pixels, scaled by 1/255 as mpcl-train
# does with IDX images; Keras does not scale) and floats (as they are).
_X_DTYPES = ("uint8", "float16", "float32", "float64")


def _check_x(x, shape, what):
    """x as the model takes it: an array (n, *shape) of one of _X_DTYPES, in
    native byte order and C order. Refused here, before anything reaches the
    library; the values are checked by the library's data sets."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{what} must be a numpy array, not {type(x).__name__}")
    if x.dtype.name not in _X_DTYPES:
        raise TypeError(f"{what} has dtype {x.dtype}; mpcl takes uint8 (pixels, scaled by 1/255 "
                        "on the device), float16, float32 or float64")
    if x.shape[1:] != tuple(shape):
        raise ValueError(f"{what} has shape {x.shape}; the model's input shape is "
                         f"{(None,) + tuple(shape)}")
    if x.shape[0] == 0:
        raise ValueError(f"{what} holds no samples")
    return _native(x)


def _native(a):
    """a in C order and native byte order, as the library reads memory."""
    return np.ascontiguousarray(a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("=")))


def _byte_exact(x):
    """float32 x that is exactly byte / 255 (x.astype("float32") / 255) as
    the bytes: the device's byte table reproduces those values bit for bit,
    and bytes take a quarter of the device memory. Any other x as it is."""
    if x.dtype != np.float32:
        return x
    with np.errstate(invalid="ignore"):
        u = np.rint(x * np.float32(255))
        if not ((u >= 0) & (u <= 255)).all():
            return x
    b = u.astype(np.uint8)
    return b if np.array_equal(b.astype(np.float32) / np.float32(255), x) else x


def _view(a, what):
    """mpcl_array_view of a (native, C order) and the shape array it points
    to, which the caller keeps alive with it."""
    name = a.dtype.str[1:]  # "<f4" -> "f4"
    if name not in _lib.NPY_DTYPES:
        raise TypeError(f"{what} has dtype {a.dtype}; mpcl reads "
                        f"{', '.join(_lib.NPY_DTYPES)} (NumPy's kind and size)")
    shape = (ctypes.c_size_t * a.ndim)(*a.shape)
    return _lib.ArrayView(a.ctypes.data, _lib.NPY_DTYPES.index(name), a.ndim, shape), shape


class _Dataset:
    """A library data set (mpcl_dataset_from_arrays, which copies): x
    checked by _check_x, y sparse labels below classes or float targets.
    What the library refuses (a non-finite x naming its row and column, a
    label out of range, float labels for sparse cross-entropy) is a
    ValueError with its message, prefixed by `what` (validation data)."""

    def __init__(self, x, y, float_targets, classes, what=""):
        self.h = _lib.P()
        if not isinstance(y, np.ndarray):
            raise TypeError(f"{what or 'y'} must be a numpy array, not {type(y).__name__}")
        x, y = _native(x), _native(y)
        xv, xs = _view(x, "x")
        yv, ys = _view(y, "y")
        params = _lib.NpyDataParams(float_targets, 0 if float_targets else classes)
        try:
            call(lib.mpcl_dataset_from_arrays, ctypes.byref(xv), ctypes.byref(yv),
                 ctypes.byref(params), ctypes.byref(self.h))
        except _lib.MpclError as e:
            raise ValueError(what + e.message) from None

    @classmethod
    def _adopt(cls, h):
        ds = cls.__new__(cls)
        ds.h = h
        return ds

    def split(self, fraction):
        """Keras' validation_split (mpcl_dataset_split): (train, validation)."""
        train, val = _lib.P(), _lib.P()
        try:
            call(lib.mpcl_dataset_split, self.h, fraction, ctypes.byref(train), ctypes.byref(val))
        except _lib.MpclError as e:
            raise ValueError(f"validation_split: {e.message}") from None
        return self._adopt(train), self._adopt(val)

    @property
    def count(self):
        return lib.mpcl_dataset_count(self.h)

    def batch(self, first, n, targets):
        """Rows first .. first+n as float32 (uint8 scaled by 1/255), and their
        targets: i32 labels (targets "labels"), f32 columns ("columns"), or
        None."""
        idx = np.arange(first, first + n, dtype=np.int32)
        x = np.empty((n, lib.mpcl_dataset_features(self.h)), np.float32)
        y = np.empty(n, np.int32) if targets == "labels" else None
        call(lib.mpcl_dataset_batch, self.h, idx.ctypes.data, n, x.ctypes.data,
             None if y is None else y.ctypes.data)
        if targets == "columns":
            y = np.empty((n, lib.mpcl_dataset_target_cols(self.h)), np.float32)
            call(lib.mpcl_dataset_batch_targets, self.h, idx.ctypes.data, n, y.ctypes.data)
        return x, y

    def __del__(self):
        if getattr(self, "h", None) and self.h.value:
            lib.mpcl_dataset_destroy(self.h)


def _check_dense_targets(y, n, columns, what):
    """The shape of a dense loss's targets: (n, columns), or (n,) for one
    column (the model decides the columns, so this is checked here; the
    values are the library's to check)."""
    if not isinstance(y, np.ndarray):
        raise TypeError(f"{what} must be a numpy array, not {type(y).__name__}")
    if y.shape != (n, columns) and not (columns == 1 and y.shape == (n,)):
        raise ValueError(f"{what} has shape {y.shape}; expected ({n}, {columns}), one target "
                         "per output" + (f", or ({n},)" if columns == 1 else ""))
    return y


class _Compiled:
    """What compile() decided: the model's params, the metric names, the
    loss, and the output activation predict() applies on the host."""

    def __init__(self, params, metrics, loss, host_activation):
        self.params, self.metrics, self.loss = params, metrics, loss
        self.host_activation = host_activation

    @property
    def sparse(self):
        return lib.mpcl_loss_sparse_targets(self.params.loss)


class Sequential:
    """Sequential([layer, ...]): the layers of mpcl.layers in order, the
    first with input_shape=. The last layer may end in the activation its
    loss applies itself (softmax with SparseCategoricalCrossentropy, sigmoid
    with BinaryCrossentropy, both from_logits=False): the library runs that
    layer linear, the loss reads the logits, predict() applies it, and
    save() records it. The policy is the global one when the model is
    created."""

    def __init__(self, layers=None, name=None, seed=42):
        self.layers = list(layers or [])
        self.name = name or "sequential"
        self.seed = _lib.check_int("seed", seed, 0, 2 ** 64 - 1)
        self.policy = mixed_precision.global_policy()
        self.history = None
        self.stop_training = False
        self._compiled = None
        self._trainer = None
        self._model = None  # the trainer's model, or one of our own
        self._io = {}  # batch rows -> (x tensor, targets tensor)
        self._checkpoint = None  # the checkpoint this model was loaded from, until it trains

    def add(self, layer):
        self.layers.append(layer)

    # ---- the model's shape ----

    def _input_shape(self):
        ls = self.layers
        if not ls:
            raise ValueError(f"{self.name} has no layers")
        for l in ls:
            if not isinstance(l, layers_module.Layer):
                raise TypeError(f"{l!r} is not an mpcl.layers layer")
        if ls[0].input_shape is None:
            raise ValueError("the first layer needs input_shape=(features,) or "
                             "(height, width, channels)")
        if any(l.input_shape is not None for l in ls[1:]):
            raise ValueError("only the first layer takes input_shape")
        return ls[0].input_shape

    def _model_params(self, loss=None):
        """mpcl_model_params of the layers as declared (classes from the last
        layer's width), for loss (the library's enum; its default when None),
        and the library's summary rows."""
        shape = self._input_shape()
        mp = lib.mpcl_model_default_params()
        mp.input_rank = len(shape)
        for d, n in enumerate(shape):
            mp.input_shape[d] = n
        mp.inputs = math.prod(shape)
        if len(self.layers) > _lib.MAX_LAYERS:
            raise ValueError(f"{len(self.layers)} layers; mpcl takes at most {_lib.MAX_LAYERS}")
        for i, l in enumerate(self.layers):
            mp.layers[i] = l.declared_spec()
        if loss is not None:
            mp.loss = loss
        mp.layer_count = len(self.layers)
        mp.classes = 0  # any width: the summary gives it
        rows = (_lib.LayerSummary * _lib.MAX_LAYERS)()
        n = ctypes.c_size_t()
        try:
            call(lib.mpcl_model_summary, None, ctypes.byref(mp), rows, ctypes.byref(n))
        except _lib.MpclError as e:
            raise ValueError(e.message) from None
        mp.classes = self._classes(rows[n.value - 1])
        # The library's names ("dense_0") name the weights; a layer without
        # a name of its own takes its library name.
        self._lib_names = [r.name.decode() for r in rows[:n.value]]
        for l, lib_name in zip(self.layers, self._lib_names):
            if l.name is None:
                l.name = lib_name
        return mp, list(rows[:n.value])

    def _classes(self, last):
        """The model's classes from the summary row of its last layer, whose
        output must be (None, classes)."""
        if last.out_rank != 1:
            raise ValueError(f"the last layer, {last.name.decode()}, gives "
                             f"{_shape_text(last)}; the model's output must be (None, classes): "
                             "put a Flatten and a Dense layer at the end")
        return last.out_shape[0]

    # ---- compile ----

    def compile(self, optimizer="adam", loss=None, metrics=None):
        loss = losses.get("sparse_categorical_crossentropy" if loss is None else loss)
        mp, _ = self._model_params(losses.enum_of(loss))
        host_activation = _lib.activation_or_none(lib.mpcl_model_output_activation(
            ctypes.byref(mp)))
        if host_activation and loss.from_logits:
            raise ValueError(f"the output layer and the loss disagree: the output layer "
                             f"applies {host_activation} and the loss takes logits "
                             "(from_logits=True)")
        if loss.output_activation and not host_activation and not loss.from_logits:
            raise ValueError(f"the output layer and the loss disagree: use a linear output with "
                             f"from_logits=True, or activation='{loss.output_activation}' on the "
                             f"output layer with from_logits=False")
        metric = _lib.text(lib.mpcl_loss_metric_name(mp.loss))
        names = []
        for m in metrics or []:
            if m not in _METRIC_NAMES[metric]:
                raise ValueError(f"unknown metric {m!r} for {loss.name}; mpcl reports "
                                 f"{', '.join(map(repr, _METRIC_NAMES[metric]))}")
            names.append(m)
        opt = optimizers.get(optimizer)
        if isinstance(opt, mixed_precision.LossScaleOptimizer):
            mp.loss_scaling = _lib.LOSS_SCALING_ON
            mp.loss_scale = opt._loss_scale_params()
            opt = optimizers.get(opt.inner_optimizer)
        mp.optim = opt._params()
        call(lib.mpcl_optim_params_check, None, ctypes.byref(mp.optim))
        mp.lr_schedule = opt._lr_schedule()
        call(lib.mpcl_lr_schedule_check, None, ctypes.byref(mp.lr_schedule))
        mp.policy = _lib.parse_enum(lib.mpcl_policy_parse, self.policy, "policy", _lib.POLICIES)
        mp.seed = self.seed
        self._compiled = _Compiled(mp, names, loss, host_activation)

    def _params(self, batch):
        if not self._compiled:
            raise RuntimeError("compile() the model first")
        mp = _lib.ModelParams.from_buffer_copy(self._compiled.params)
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

    def _device_model(self, batch=32):
        if not self._model:
            ctx = _lib.context()
            h = _lib.P()
            call(lib.mpcl_model_create, ctx, ctypes.byref(self._params(batch)), ctypes.byref(h),
                 ctx=ctx)
            self._model = h.value
        return self._model

    def _max_batch(self):
        return lib.mpcl_model_params_of(self._model).contents.max_batch

    def _forward(self, ds, batch_size, with_targets=True):
        """Yields (rows, outputs) for each batch of the data set ds through
        eval_step, the evaluation statistics accumulating on the device;
        with_targets=False feeds zero targets (predict). Batches hold
        batch_size rows (Keras' 32 when None), at most the model's max_batch;
        the I/O tensors are kept per row count."""
        ctx = _lib.context()
        m = self._model
        storage = lib.mpcl_model_plan(m).contents.storage
        classes = self._compiled.params.classes
        sparse = self._compiled.sparse
        B = min(_batch_size(batch_size), self._max_batch())
        for first in range(0, ds.count, B):
            n = min(B, ds.count - first)
            kind = ("labels" if sparse else "columns") if with_targets else None
            xb, yb = ds.batch(first, n, kind)
            if yb is None:
                yb = np.zeros(n if sparse else (n, classes), np.int32 if sparse else np.float32)
            if n not in self._io:
                xt, yt = _lib.P(), _lib.P()
                call(lib.mpcl_tensor_create, ctx, storage, n, xb.shape[1], ctypes.byref(xt),
                     ctx=ctx)
                call(lib.mpcl_tensor_create, ctx, _lib.DTYPES.index("i32" if sparse else "f32"),
                     n, 1 if sparse else classes, ctypes.byref(yt), ctx=ctx)
                self._io[n] = (xt.value, yt.value)
            xt, yt = self._io[n]
            call(lib.mpcl_tensor_upload_f32, xt, xb.ctypes.data, xb.size, ctx=ctx)
            upload = lib.mpcl_tensor_upload_i32 if sparse else lib.mpcl_tensor_upload_f32
            call(upload, yt, yb.ctypes.data, yb.size, ctx=ctx)
            call(lib.mpcl_model_eval_step, m, xt, yt, ctx=ctx)
            out = np.empty((n, classes), np.float32)
            call(lib.mpcl_model_read_logits, m, out.ctypes.data, out.size, ctx=ctx)
            yield n, out

    def _read_eval(self):
        return _read_eval(self._model)

    def _dataset(self, x, y, what=""):
        """The library's data set of x (checked against the input shape) and
        y (the loss's targets); what prefixes the messages."""
        x = _byte_exact(_check_x(x, self._input_shape(), what + "x"))
        c = self._compiled
        if not c.sparse:
            y = _check_dense_targets(y, x.shape[0], c.params.classes, what + "y")
        return _Dataset(x, y, not c.sparse, c.params.classes, what)

    # ---- fit / evaluate / predict ----

    def fit(self, x, y, epochs=1, batch_size=None, validation_split=0.0, validation_data=None,
            shuffle=True, callbacks=None, verbose="auto", report_every=50):
        """Trains with the library's trainer, the loop mpcl-train runs: the data
        go to the device once (uint8 as bytes scaled by 1/255, as float32
        exactly byte/255 is; other floats as they are), checked by the
        library's data sets. y: integer labels for sparse categorical
        cross-entropy, float targets (n,) or (n, outputs) for binary
        cross-entropy and MSE. Every epoch is a seeded shuffle
        (shuffle=True) or the rows in order (shuffle=False).
        validation_split takes the last fraction of the rows as validation
        data (before any shuffle, as Keras). callbacks (mpcl.callbacks) run
        between epochs: the trainer runs one epoch per call. Ctrl-C stops
        after the current step; the model keeps what it learnt, self.history
        what was reported, and KeyboardInterrupt is raised again."""
        self._params(1)  # compiled
        batch = _batch_size(batch_size)
        epochs = _lib.check_int("epochs", epochs, 1, _U32_MAX)
        report_every = _lib.check_int("report_every", report_every, 1, _U32_MAX)
        if verbose != "auto":
            verbose = _lib.check_int("verbose", verbose, 0, 2)
        split = _lib.check_real("validation_split", validation_split, lo=0, hi=1, hi_open=True)
        if not isinstance(shuffle, bool):
            raise ValueError(f"shuffle={shuffle!r}: mpcl takes True (a seeded shuffle every "
                             "epoch) or False (the rows in order)")
        cbs = _checked_callbacks(callbacks)
        if split and validation_data is not None:
            raise ValueError("give validation_split or validation_data, not both")
        if validation_data is not None and (not isinstance(validation_data, (tuple, list)) or
                                            len(validation_data) != 2):
            raise ValueError("validation_data must be a tuple (x, y), not "
                             f"{type(validation_data).__name__}")
        train, test = self._dataset(x, y), None
        if split:
            train, test = train.split(split)
        elif validation_data is not None:
            test = self._dataset(*validation_data, what="validation_data: ")

        ctx = _lib.context()
        p = lib.mpcl_train_default_params()
        p.epochs, p.batch, p.seed, p.report_every = epochs, batch, self.seed, report_every
        p.model = self._params(batch)
        p.train_data = train.h
        p.test_data = test.h if test else None
        p.shuffle = shuffle
        run = _Run()
        tr, history = self._start_run(p, run)
        train_rows = train.count
        del train, test  # on the device now
        scaled = bool(lib.mpcl_model_loss_scale(self._model))
        verbose = 1 if verbose == "auto" else verbose

        def on_batch(b, logs):
            for cb in cbs:
                cb.on_batch_end(b, logs)

        progress = _Progress(train_rows, batch, epochs, verbose, self._compiled.metrics, scaled,
                             history, on_batch)

        def pausing(r):  # the callbacks run before the next epoch
            progress(r)
            return r.epoch_end

        run.progress = pausing
        for cb in cbs:
            cb.set_model(self)
            cb.set_params({"epochs": epochs, "verbose": verbose,
                           "steps": -(-train_rows // batch)})
        self.stop_training = False
        history.stopped = True
        for cb in cbs:
            cb.on_train_begin()
        for epoch in range(epochs):
            for cb in cbs:
                cb.on_epoch_begin(epoch)
            run.stop.value = 0
            progress.logs = None
            interrupted = _run_trainer(tr, run.stop, ctx, run.failure)
            if progress.live and progress.line_open:
                print(flush=True)
            if run.failure:
                raise run.failure[0]
            if interrupted:
                raise KeyboardInterrupt
            if progress.logs is None:  # the trainer stopped itself (a diverged loss)
                break
            for cb in cbs:
                cb.on_epoch_end(epoch, dict(progress.logs))
            s = _lib.TrainSummary()
            lib.mpcl_trainer_summary(tr, ctypes.byref(s))
            if self.stop_training or (s.diverged and epoch + 1 < epochs):
                break
        else:
            history.stopped = False
        for cb in cbs:
            cb.on_train_end()
        return history

    def _start_run(self, p, run):
        """The library's trainer of p, reporting to run, made this model's
        trainer (the current model's weights and state carried over), and
        the History of its run record. p.stop and p.on_report are run's."""
        ctx = _lib.context()
        p.stop = ctypes.pointer(run.stop)
        p.on_report = _lib.REPORT_FN(run.on_report)
        tr = _lib.P()
        call(lib.mpcl_trainer_create, ctx, ctypes.byref(p), ctypes.byref(tr), ctx=ctx)
        try:
            self._set_model(lib.mpcl_trainer_model(tr), tr.value)
        except BaseException:
            lib.mpcl_trainer_destroy(tr)
            raise
        self._checkpoint = None
        rec = _lib.P()
        call(lib.mpcl_run_record_create, tr, ctypes.byref(rec), ctx=ctx)
        run.record = rec.value
        self.history = History(rec.value)
        return tr, self.history

    def evaluate(self, x, y, batch_size=None, verbose=0, return_dict=False):
        """Mean loss (and the loss's metric) over x, y in batches of
        batch_size (Keras' 32 by default; the model's largest batch at most)."""
        if not self._compiled:
            raise RuntimeError("compile() the model first")
        ds = self._dataset(x, y)
        self._device_model(_batch_size(batch_size))
        self._read_eval()  # start from zero
        for _ in self._forward(ds, batch_size):
            pass
        s = self._read_eval()
        loss, acc = s.loss_sum / s.terms, s.metric_sum / s.terms
        names = self._compiled.metrics
        if return_dict:
            return {"loss": loss, **{m: acc for m in names}}
        if verbose:
            print(" - ".join([f"loss: {loss:.4f}"] + [f"{m}: {acc:.4f}" for m in names]))
        return [loss] + [acc] * len(names) if names else loss

    def predict(self, x, batch_size=None, verbose=0):
        """float32 outputs, (n, classes): the last layer's, with its output
        activation (softmax, sigmoid) applied on the host."""
        if not self._compiled:
            raise RuntimeError("compile() the model first")
        x = _byte_exact(_check_x(x, self._input_shape(), "x"))
        ds = _Dataset(x, np.zeros(x.shape[0], np.uint8), False, 1)  # x alone: no targets
        self._device_model(_batch_size(batch_size))
        c = self._compiled
        out = np.concatenate([o for _, o in self._forward(ds, batch_size, with_targets=False)])
        self._read_eval()  # leave no statistics behind
        if c.host_activation:
            out = _HOST_ACTIVATIONS[c.host_activation](out).astype(np.float32)
        return out

    # ---- weights ----

    def _weight_rows(self):
        """Per layer, in Keras' order, (name, index, is_buffer, shape) of its
        weights: the parameters (kernel, bias; gamma, beta), then the
        buffers (moving_mean, moving_variance)."""
        m = self._device_model()
        rows = [(lib.mpcl_model_param(m, i).contents, i, False)
                for i in range(lib.mpcl_model_param_count(m))]
        rows += [(lib.mpcl_model_buffer(m, i).contents, i, True)
                 for i in range(lib.mpcl_model_buffer_count(m))]
        self._model_params()
        out = []
        for l, lib_name in zip(self.layers, self._lib_names):
            prefix = lib_name + "."
            out += [(l.name + "." + info.name.decode()[len(prefix):], i, buf,
                     tuple(info.shape[:info.rank]))
                    for info, i, buf in rows if info.name.decode().startswith(prefix)]
        return out

    def get_weights(self):
        """The weights as float32 numpy arrays, layer by layer in Keras'
        order (Dense: kernel, bias; BatchNormalization: gamma, beta,
        moving_mean, moving_variance). Needs compile()."""
        if not self._compiled:
            raise RuntimeError("compile() the model first")
        ctx, m, out = _lib.context(), self._device_model(), []
        for _, i, buf, shape in self._weight_rows():
            a = np.empty(shape, np.float32)
            read = lib.mpcl_model_read_buffer if buf else lib.mpcl_model_read_param
            args = (m, i) if buf else (m, i, _lib.SLOT_MASTER)
            call(read, *args, a.ctypes.data, a.size, ctx=ctx)
            out.append(a)
        return out

    def set_weights(self, weights):
        """Writes what get_weights() gives: every array checked for its
        shape (ValueError naming the weight and both shapes) before any is
        written."""
        if not self._compiled:
            raise RuntimeError("compile() the model first")
        rows = self._weight_rows()
        weights = list(weights)
        if len(weights) != len(rows):
            raise ValueError(f"set_weights: the model has {len(rows)} weights "
                             f"({', '.join(r[0] for r in rows)}); got {len(weights)}")
        arrays = []
        for (name, _, _, shape), w in zip(rows, weights):
            a = np.ascontiguousarray(w, dtype=np.float32)
            if a.shape != shape:
                raise ValueError(f"set_weights: {name} has shape {shape}; got {a.shape}")
            arrays.append(a)
        ctx, m = _lib.context(), self._device_model()
        for (_, i, buf, _), a in zip(rows, arrays):
            write = lib.mpcl_model_write_buffer if buf else lib.mpcl_model_write_param
            args = (m, i) if buf else (m, i, _lib.SLOT_MASTER)
            call(write, *args, a.ctypes.data, a.size, ctx=ctx)

    # ---- summary, JSON, save ----

    def summary(self, print_fn=print):
        """Keras' table: each layer's name (class), output shape and
        parameters as the library counts them, then the totals."""
        _, rows = self._model_params()
        trainable = sum(r.params for r in rows)
        frozen = sum(r.buffers for r in rows)
        names = [f"{l.name} ({type(l).__name__})" for l in self.layers]
        w = max([30] + [len(n) + 2 for n in names])  # a long name keeps its column
        line = w + 35
        print_fn(f'Model: "{self.name}"')
        print_fn("_" * line)
        print_fn(f"{'Layer (type)':<{w}}{'Output Shape':<22}{'Param #':>13}")
        print_fn("=" * line)
        for name, r in zip(names, rows):
            print_fn(f"{name:<{w}}{_shape_text(r):<22}{r.params + r.buffers:>13,}")
        print_fn("=" * line)
        print_fn(f"Total params: {trainable + frozen:,}")
        print_fn(f"Trainable params: {trainable:,} (f32 master weights: {4 * trainable:,} bytes)")
        print_fn(f"Non-trainable params: {frozen:,}")
        ctx = _lib.context()
        pol = _lib.parse_enum(lib.mpcl_policy_parse, self.policy, "policy", _lib.POLICIES)
        plan = lib.mpcl_context_plan(ctx, pol)
        scaling = plan.loss_scaling
        if self._compiled and self._compiled.params.loss_scaling != _lib.LOSS_SCALING_PLAN:
            scaling = self._compiled.params.loss_scaling == _lib.LOSS_SCALING_ON
        dev = lib.mpcl_context_device(ctx).contents
        print_fn(f"Device: {_lib.text(dev.name)}")
        print_fn(f"Policy: {self.policy} -> {_lib.text(lib.mpcl_policy_name(plan.resolved))}: "
                 f"storage {_lib.text(lib.mpcl_dtype_name(plan.storage))}, GEMM "
                 f"{_lib.text(lib.mpcl_gemm_path_name(plan.gemm))}, loss scaling "
                 f"{'on' if scaling else 'off'} ({_lib.text(plan.reason)})")
        print_fn("_" * line)

    def get_config(self):
        """Keras 3's Sequential config: an InputLayer of the input shape, then
        each layer's class and config (its declared attributes)."""
        self._model_params()  # checks the layers and names them
        shape = [None] + list(self._input_shape())
        entries = [{"module": "keras.layers", "class_name": "InputLayer",
                    "config": {"batch_shape": shape, "dtype": "float32", "sparse": False,
                               "name": "input_layer"},
                    "registered_name": None}]
        for l in self.layers:
            entries.append({"module": "keras.layers",
                            "class_name": layers_module.keras_class(l.kind),
                            "config": l.get_config(), "registered_name": None})
        return {"name": self.name, "trainable": True, "dtype": "float32", "layers": entries,
                "build_input_shape": shape}

    def to_json(self, **kwargs):
        """The model as Keras 3 writes it (model.to_json()); kwargs go to
        json.dumps."""
        return json.dumps({"module": "keras", "class_name": "Sequential",
                           "config": self.get_config(), "registered_name": None}, **kwargs)

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


def _shape_text(row):
    """(None, 26, 26, 32) from a summary row."""
    return str((None,) + tuple(row.out_shape[:row.out_rank]))


def _read_eval(m):
    """The evaluation statistics of device model m, then reset."""
    s = _lib.LossStats()
    call(lib.mpcl_model_read_eval_stats, m, ctypes.byref(s), True, ctx=_lib.context())
    return s


def _checked_callbacks(callbacks):
    """fit's callbacks as a list, each an mpcl.callbacks.Callback (TypeError
    naming one that is not)."""
    cbs = list(callbacks or [])
    for cb in cbs:
        if not isinstance(cb, callbacks_module.Callback):
            raise TypeError(f"callbacks holds {cb!r}, not an mpcl.callbacks.Callback")
    return cbs


class _Run:
    """A trainer's run as fit() follows it: each report goes into the run
    record, then to progress(report), which returns whether to pause the
    trainer (its stop flag); an exception is kept in failure, never raised
    into C, and stops the trainer."""

    def __init__(self):
        self.stop = ctypes.c_int(0)
        self.failure = []
        self.record = None
        self.progress = None

    def on_report(self, _user, r):
        try:
            call(lib.mpcl_run_record_add, self.record, r)
            if self.progress(r.contents):
                self.stop.value = 1
        except BaseException as e:
            self.failure.append(e)
            self.stop.value = 1


def _run_trainer(tr, stop, ctx, failure):
    """One mpcl_trainer_fit call (to the end of the epoch, where the report
    hook sets the stop flag) in a thread, so that the main thread takes
    Ctrl-C as KeyboardInterrupt and turns it into the stop flag the trainer
    checks between steps. Returns whether Ctrl-C came. The main thread polls
    with sleep: a KeyboardInterrupt inside Thread.join can leave is_alive()
    False while the thread still runs (CPython bpo-45274)."""
    done = threading.Event()

    def run():
        try:
            call(lib.mpcl_trainer_fit, tr, ctx=ctx)
        except BaseException as e:
            failure.append(e)
        finally:
            done.set()

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
                print("\nmpcl: stopping after the current step", file=sys.stderr, flush=True)
            interrupted = True
            stop.value = 1
    return interrupted


def _copy_state(src, dst):
    """The master weights, the buffers and the dropout counter, and with the
    same optimizer kind its slots and step counter, and the loss scaler's
    state when both scale, from src to dst (same shapes: the same compiled
    model)."""
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
    for i in range(lib.mpcl_model_buffer_count(src)):
        count = lib.mpcl_model_buffer(src, i).contents.count
        buf = np.empty(count, np.float32)
        call(lib.mpcl_model_read_buffer, src, i, buf.ctypes.data, count, ctx=ctx)
        call(lib.mpcl_model_write_buffer, dst, i, buf.ctypes.data, count, ctx=ctx)
    lib.mpcl_model_set_rng_counter(dst, lib.mpcl_model_rng_counter(src))
    a, b = lib.mpcl_model_loss_scale(src), lib.mpcl_model_loss_scale(dst)
    if a and b:
        st = _lib.LossScaleState()
        call(lib.mpcl_loss_scale_read, ctx, a, ctypes.byref(st), ctx=ctx)
        call(lib.mpcl_loss_scale_write_state, ctx, b, ctypes.byref(st), ctx=ctx)
