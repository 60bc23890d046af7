"""Callbacks as in Keras: fit() calls on_train_begin, then per epoch
on_epoch_begin(epoch), on_batch_end(batch, logs) at each report of the
trainer (every report_every steps and at the epoch's end; batch is the
0-based batch of the epoch), on_epoch_end(epoch, logs) with logs {"loss",
the metrics, "val_loss", "val_<metric>"}, and on_train_end. A callback
stops training by setting model.stop_training = True: fit() ends after the
epoch."""

import csv
import math
import os


class Callback:
    def __init__(self):
        self.model = None
        self.params = {}

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_batch_end(self, batch, logs=None):
        """Called at each report of the trainer, not after every batch: after
        every report_every-th step of an epoch (fit's argument, 50 by
        default) and after the epoch's last step. batch is the 0-based index
        in the epoch of the last batch the report covers; the batches
        between reports get no call. logs: {"loss", the compiled metrics},
        the epoch's means so far (weighted by samples). fit(report_every=1)
        calls it after every batch, at the cost of a read of the device's
        statistics at every step."""


class LambdaCallback(Callback):
    """The given functions as the callback's methods (the others do nothing)."""

    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_begin=None,
                 on_train_end=None, on_batch_end=None):
        super().__init__()
        for name, fn in (("on_epoch_begin", on_epoch_begin), ("on_epoch_end", on_epoch_end),
                         ("on_train_begin", on_train_begin), ("on_train_end", on_train_end),
                         ("on_batch_end", on_batch_end)):
            if fn is not None:
                setattr(self, name, fn)


def _better(mode, monitor):
    """How a new value of monitor beats the best one, as Keras decides
    "auto": accuracies grow, everything else falls."""
    if mode not in ("auto", "min", "max"):
        raise ValueError(f"mode must be 'auto', 'min' or 'max', not {mode!r}")
    if mode == "auto":
        mode = "max" if "acc" in monitor else "min"
    return mode


def _monitored(logs, monitor, who):
    if monitor not in (logs or {}):
        raise KeyError(f"{who}: the logs hold no {monitor!r} (they hold "
                       f"{', '.join(sorted(logs or {}))}); validation metrics need "
                       "validation_data or validation_split")
    return logs[monitor]


class EarlyStopping(Callback):
    """Stops when monitor has not improved by more than min_delta for
    `patience` epochs (never after the first epoch), as Keras 3 does;
    restore_best_weights puts back the weights of the best epoch at the end."""

    def __init__(self, monitor="val_loss", patience=0, min_delta=0, mode="auto",
                 restore_best_weights=False):
        super().__init__()
        self.monitor, self.patience = monitor, patience
        self.min_delta = abs(min_delta)
        self.mode = _better(mode, monitor)
        self.restore_best_weights = restore_best_weights
        self.stopped_epoch = 0

    def on_train_begin(self, logs=None):
        self.wait, self.stopped_epoch = 0, 0
        self.best = math.inf if self.mode == "min" else -math.inf
        self.best_weights = None

    def _improved(self, value):
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def on_epoch_end(self, epoch, logs=None):
        value = _monitored(logs, self.monitor, "EarlyStopping")
        if self._improved(value):
            self.best, self.wait = value, 0
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            return
        self.wait += 1
        if self.wait >= self.patience and epoch > 0:  # Keras 3's rule
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.restore_best_weights and self.best_weights is not None:
            self.model.set_weights(self.best_weights)


class ModelCheckpoint(Callback):
    """model.save(filepath) after each epoch, or only when monitor improved
    (save_best_only). filepath may hold {epoch} (1-based) and log keys, as
    in Keras ("ckpt-{epoch:02d}.safetensors")."""

    def __init__(self, filepath, monitor="val_loss", save_best_only=False, mode="auto"):
        super().__init__()
        self.filepath = os.fspath(filepath)
        self.monitor, self.save_best_only = monitor, save_best_only
        self.mode = _better(mode, monitor)
        self.best = None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.save_best_only:
            value = _monitored(logs, self.monitor, "ModelCheckpoint")
            if self.best is not None and (value >= self.best if self.mode == "min"
                                          else value <= self.best):
                return
            self.best = value
        self.model.save(self.filepath.format(epoch=epoch + 1, **logs))


class CSVLogger(Callback):
    """One row per epoch: epoch (0-based) then the logs' keys in sorted
    order, as Keras writes it."""

    def __init__(self, filename, separator=",", append=False):
        super().__init__()
        self.filename, self.sep, self.append = os.fspath(filename), separator, append
        self.keys, self.file, self.writer = None, None, None

    def on_train_begin(self, logs=None):
        self.keys = None
        has_rows = self.append and os.path.exists(self.filename) and \
            os.path.getsize(self.filename) > 0
        self.file = open(self.filename, "a" if self.append else "w", newline="")
        self.has_header = has_rows

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.keys is None:
            self.keys = sorted(logs)
            self.writer = csv.writer(self.file, delimiter=self.sep)
            if not self.has_header:
                self.writer.writerow(["epoch"] + self.keys)
        self.writer.writerow([epoch] + [logs.get(k, "NA") for k in self.keys])
        self.file.flush()

    def on_train_end(self, logs=None):
        if self.file:
            self.file.close()
            self.file, self.writer = None, None
