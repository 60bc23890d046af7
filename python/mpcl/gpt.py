"""GPT: GPT-2 on libmpcl (mpcl/gpt.h), trained on a token stream.

The model is the layer list mpcl_gpt_model_params gives (a
TokenAndPositionEmbedding, n_layer TransformerDecoder blocks, a
LayerNormalization and a TiedLMHead) under the Sequential machinery:
compile, summary, get_weights, save and load_model work as for any model.
fit() runs the library's trainer on a token stream (windows drawn on the
device, a held-out tail evaluated every eval_every steps); predict,
evaluate and generate run the model on token ids; save(DIR,
format="huggingface") writes a GPT-2 folder that transformers loads."""

import ctypes
import os
import sys

import numpy as np

from . import _lib, layers as layers_module, losses, optimizers
from ._lib import call, lib
from .model import (Sequential, _batch_size, _checked_callbacks, _copy_state, _read_eval, _Run,
                    _run_trainer, _U32_MAX)

_U64_MAX = 2 ** 64 - 1
_LOGITS_MAX_FLOATS = 2 ** 26  # the logits of a device model made here: 256 MiB at most
_TOKENS_MAX_VOCAB = 65536  # MPCL_TOKENS_MAX_VOCAB: the stream's ids are uint16
_SIZE_MAX = 2 ** 63 - 1  # the largest count taken (any Python size is below it)


def _config(n_layer, n_head, n_embd, n_positions, vocab_size, layer_norm_epsilon):
    """A checked mpcl_gpt2_config: TypeError for a non-integer, ValueError
    with the library's message (naming the field) for a bad value."""
    c = _lib.Gpt2Config()
    for name, value in (("n_layer", n_layer), ("n_head", n_head), ("n_embd", n_embd),
                        ("n_positions", n_positions), ("vocab_size", vocab_size)):
        setattr(c, name, _lib.check_int(name, value, 1, _SIZE_MAX))
    c.layer_norm_epsilon = _lib.check_real("layer_norm_epsilon", layer_norm_epsilon, lo=0,
                                           lo_open=True)
    try:
        call(lib.mpcl_gpt2_config_check, ctypes.byref(c))
    except _lib.MpclError as e:
        raise ValueError(e.message) from None
    return c


def _as_ids(tokens, what):
    """tokens as a numpy integer array: a str (its UTF-8 bytes) or bytes
    are byte tokens; anything else must be a numpy integer array."""
    if isinstance(tokens, str):
        tokens = tokens.encode("utf-8")
    if isinstance(tokens, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(tokens), np.uint8)
    if not isinstance(tokens, np.ndarray):
        raise TypeError(f"{what} must be a numpy integer array, a str or bytes, not "
                        f"{type(tokens).__name__}")
    if tokens.dtype.kind not in "iu":
        raise TypeError(f"{what} has dtype {tokens.dtype}; token ids are integers")
    return tokens


class GPT(Sequential):
    """GPT(n_layer=4, n_head=4, n_embd=128, context=64, vocab_size=256,
    n_positions=None, seed=42): GPT-2 of that shape on windows of `context`
    tokens (n_positions, the position table's rows, is context when None;
    context <= n_positions), layer norms of epsilon layer_norm_epsilon. The
    weights start as the library draws them from seed; the precision policy
    is the global one when the model is made, as for Sequential."""

    def __init__(self, n_layer=4, n_head=4, n_embd=128, context=64, vocab_size=256,
                 n_positions=None, seed=42, layer_norm_epsilon=1e-5, name=None):
        context = _lib.check_int("context", context, 1, _SIZE_MAX)
        self.config = _config(n_layer, n_head, n_embd, context if n_positions is None
                              else n_positions, vocab_size, layer_norm_epsilon)
        self.context = context
        mp = self._gpt_params(context)
        ls = [layers_module.from_spec(mp.layers[i], input_shape=(context,) if i == 0 else None)
              for i in range(mp.layer_count)]
        super().__init__(ls, name=name or "gpt", seed=seed)

    def _gpt_params(self, context):
        mp = lib.mpcl_model_default_params()
        try:
            call(lib.mpcl_gpt_model_params, None, ctypes.byref(self.config), context,
                 ctypes.byref(mp))
        except _lib.MpclError as e:
            raise ValueError(e.message) from None
        return mp

    @property
    def vocab_size(self):
        return self.config.vocab_size

    def _classes(self, last):
        return last.out_shape[1]  # (None, T, vocabulary)

    def compile(self, optimizer=None):
        """optimizer: any of mpcl.optimizers (a schedule as its learning
        rate, a LossScaleOptimizer), or None for what mpcl-train --model gpt
        takes: AdamW(learning_rate=1e-3, beta_2=0.95, weight_decay=0.1,
        decay_vectors=False). The loss is always next-token sparse
        categorical cross-entropy from the logits, the mean over every
        position."""
        if optimizer is None:
            optimizer = optimizers.AdamW(learning_rate=1e-3, beta_2=0.95, weight_decay=0.1,
                                         decay_vectors=False)
        super().compile(optimizer=optimizer,
                        loss=losses.SparseCategoricalCrossentropy(from_logits=True))

    def _device_model(self, batch=32):
        """As Sequential's, with at most the rows whose logits take 256 MiB
        (GPT-2's 1024 x 50257 take 206 MB a row): the batches of predict
        and evaluate are then that many rows at most."""
        cap = max(1, _LOGITS_MAX_FLOATS // (self.context * self.vocab_size))
        return super()._device_model(min(batch, cap))

    # ---- token ids in ----

    def _check_ids(self, ids, what):
        """ids (integers) as int32, each in [0, vocab_size): ValueError
        naming the first one outside, its index and the vocabulary."""
        if ids.size == 0:
            raise ValueError(f"{what} is empty")
        bad = np.flatnonzero((ids < 0) | (ids >= self.vocab_size))
        if bad.size:
            at = np.unravel_index(bad[0], ids.shape)
            where = at[0] if len(at) == 1 else tuple(int(i) for i in at)
            raise ValueError(f"{what}[{where}] is {ids[at]}: token ids must be in [0, "
                             f"{self.vocab_size}), the model's vocabulary")
        return np.ascontiguousarray(ids, np.int32)

    def _windows(self, tokens, what, extra=0):
        """tokens as int32 (batch, time + extra), 1 <= time <= context."""
        ids = _as_ids(tokens, what)
        if ids.ndim != 2:
            raise ValueError(f"{what} has shape {ids.shape}; give token ids (batch, "
                             f"time{' + 1' if extra else ''})")
        time = ids.shape[1] - extra
        if ids.shape[0] == 0 or time < 1:
            raise ValueError(f"{what} has shape {ids.shape}: it is empty; give at least one "
                             f"window of {1 + extra} token{'s' if extra else ''}")
        if time > self.context:
            raise ValueError(f"{what} has shape {ids.shape}: {time} positions, more than the "
                             f"model's context of {self.context}")
        return self._check_ids(ids, what)

    def _io_tensors(self, n, T):
        """The input and label tensors, int32 [n, T], kept per (n, T)."""
        if (n, T) not in self._io:
            ctx, xt, yt = _lib.context(), _lib.P(), _lib.P()
            i32 = _lib.DTYPES.index("i32")
            call(lib.mpcl_tensor_create, ctx, i32, n, T, ctypes.byref(xt), ctx=ctx)
            try:
                call(lib.mpcl_tensor_create, ctx, i32, n, T, ctypes.byref(yt), ctx=ctx)
            except BaseException:
                lib.mpcl_tensor_destroy(xt)
                raise
            self._io[n, T] = (xt.value, yt.value)
        return self._io[n, T]

    def _padded(self, ids):
        """(n, time) ids right-padded with 0 to (n, context): exact for the
        first time positions, which causal attention keeps from seeing
        what follows them."""
        out = np.zeros((ids.shape[0], self.context), np.int32)
        out[:, :ids.shape[1]] = ids
        return out

    # ---- fit ----

    def fit(self, tokens, steps=1000, batch_size=32, eval_every=250, eval_fraction=0.1,
            eval_batches=20, grad_accum=1, callbacks=None, verbose="auto", report_every=50):
        """Trains on a token stream with the library's trainer, the loop
        mpcl-train --model gpt runs: tokens is a 1-D numpy integer array of
        ids below vocab_size, or a str or bytes (its bytes are the tokens,
        vocabulary 256). Its last eval_fraction is held out; each of the
        `steps` steps takes grad_accum micro-batches of batch_size windows of
        context + 1 tokens drawn on the device from the rest (seeded by the
        model's seed) and applies their mean gradient; eval_batches batches of
        held-out windows, the same every time, are evaluated every eval_every
        steps (0: at the end only) and at the end. Returns a History whose
        `history` is {"loss": [...], "eval_loss": [...]}, one value per
        evaluation (loss: the mean training loss of the steps since the
        previous one) and `steps` the step of each. callbacks
        (mpcl.callbacks) run at each evaluation as at the end of an epoch
        (epoch: the evaluation's index; logs: loss and eval_loss), so that
        EarlyStopping(monitor="eval_loss") or ModelCheckpoint work on token
        runs. Ctrl-C stops after the current step, as Sequential.fit."""
        self._params(1)  # compiled
        batch = _batch_size(batch_size)
        steps = _lib.check_int("steps", steps, 1, _U64_MAX)
        eval_every = _lib.check_int("eval_every", eval_every, 0, _U64_MAX)
        fraction = _lib.check_real("eval_fraction", eval_fraction, lo=0, hi=1, hi_open=True)
        eval_batches = _lib.check_int("eval_batches", eval_batches, 0, _SIZE_MAX)
        grad_accum = _lib.check_int("grad_accum", grad_accum, 1, _U32_MAX)
        report_every = _lib.check_int("report_every", report_every, 1, _U32_MAX)
        if verbose != "auto":
            verbose = _lib.check_int("verbose", verbose, 0, 2)
        cbs = _checked_callbacks(callbacks)
        ids = _as_ids(tokens, "tokens")
        if ids.ndim != 1:
            raise ValueError(f"tokens has shape {ids.shape}; fit takes one stream of token ids "
                             "(a 1-D array)")
        if self.vocab_size > _TOKENS_MAX_VOCAB:
            raise ValueError(f"fit: a vocabulary of {self.vocab_size}; token streams hold ids "
                             f"below {_TOKENS_MAX_VOCAB} (uint16)")
        ids = self._check_ids(ids, "tokens").astype(np.uint16)
        held = int(ids.size * fraction)  # as the library splits it
        for part, n in (("training part", ids.size - held), ("held-out part", held)):
            if (part == "training part" or fraction) and n < self.context + 1:
                raise ValueError(f"tokens: {ids.size} tokens leave {n} in the {part} "
                                 f"(eval_fraction {fraction:g}); it needs one window of "
                                 f"context + 1 = {self.context + 1}")
        stream = _lib.P()
        call(lib.mpcl_tokens_from_memory, b"tokens", ids.ctypes.data, ids.size, self.vocab_size,
             ctypes.byref(stream))
        p = lib.mpcl_train_default_params()
        p.batch, p.seed, p.report_every = batch, self.seed, report_every
        p.model = self._params(batch)
        p.tokens, p.steps, p.eval_every = stream.value, steps, eval_every
        p.eval_fraction, p.eval_batches, p.grad_accum = fraction, eval_batches, grad_accum
        run = _Run()
        try:
            tr, history = self._start_run(p, run)
        finally:
            lib.mpcl_tokens_destroy(stream)  # uploaded
        history.steps = []
        verbose = 1 if verbose == "auto" else verbose
        # With callbacks the trainer pauses at each evaluation (an epoch of
        # the library's token run) for them; without, it runs to the end.
        progress = _TokenProgress(history, steps, self.context, verbose, pause=bool(cbs))
        run.progress = progress
        for cb in cbs:
            cb.set_model(self)
            cb.set_params({"steps": steps, "eval_every": eval_every, "verbose": verbose})
        self.stop_training = False
        history.stopped = True
        for cb in cbs:
            cb.on_train_begin()
        s, evaluation = _lib.TrainSummary(), 0
        while True:
            for cb in cbs:
                cb.on_epoch_begin(evaluation)
            run.stop.value = 0
            progress.logs = None
            interrupted = _run_trainer(tr, run.stop, _lib.context(), run.failure)
            if run.failure:
                raise run.failure[0]
            if interrupted:
                raise KeyboardInterrupt
            lib.mpcl_trainer_summary(tr, ctypes.byref(s))
            if progress.logs is not None:
                for cb in cbs:
                    cb.on_epoch_end(evaluation, dict(progress.logs))
            evaluation += 1
            if (progress.logs is None or s.steps >= steps or s.diverged or
                    self.stop_training):
                break
        history.stopped = bool(s.diverged or s.steps < steps)
        for cb in cbs:
            cb.on_train_end()
        return history

    # ---- predict, evaluate, generate ----

    def _batches(self, ids, batch_size, targets=None):
        """Uploads int32 ids (n, T) (and targets (n, T)) in batches of
        batch_size rows, at most the model's max_batch, into the I/O
        tensors, yielding (input tensor, target tensor, rows) of each."""
        ctx, T = _lib.context(), ids.shape[1]
        B = min(_batch_size(batch_size), self._max_batch())
        for first in range(0, ids.shape[0], B):
            x = np.ascontiguousarray(ids[first:first + B])
            xt, yt = self._io_tensors(x.shape[0], T)
            call(lib.mpcl_tensor_upload_i32, xt, x.ctypes.data, x.size, ctx=ctx)
            if targets is not None:
                y = np.ascontiguousarray(targets[first:first + B])
                call(lib.mpcl_tensor_upload_i32, yt, y.ctypes.data, y.size, ctx=ctx)
            yield xt, yt, x.shape[0]

    def predict(self, tokens, batch_size=None, verbose=0):
        """The logits, float32 (batch, time, vocab_size), of int token ids
        (batch, time), 1 <= time <= context: position t's logits are those
        of the next token after tokens[:, :t + 1]. No softmax."""
        if not self._compiled:
            raise RuntimeError("compile() the model first")
        ids = self._windows(tokens, "tokens")
        ctx, m = _lib.context(), self._device_model(_batch_size(batch_size))
        out = []
        for xt, _, n in self._batches(self._padded(ids), batch_size):
            call(lib.mpcl_model_predict, m, xt, ctx=ctx)
            logits = np.empty((n, self.context, self.vocab_size), np.float32)
            call(lib.mpcl_model_read_logits, m, logits.ctypes.data, logits.size, ctx=ctx)
            out.append(logits[:, :ids.shape[1]])
        return np.concatenate(out)

    def evaluate(self, tokens, batch_size=None, verbose=0):
        """The mean next-token cross-entropy (natural log) of windows of
        int token ids (batch, time + 1), 1 <= time <= context: each window's
        first time tokens are the inputs, its last time tokens the targets,
        and the mean is over the batch * time predictions, computed on the
        device as fit's evaluation is. A 1-D stream is refused: cut it into
        windows."""
        if not self._compiled:
            raise RuntimeError("compile() the model first")
        ids = self._windows(tokens, "tokens", extra=1)
        m = self._device_model(_batch_size(batch_size))
        time = ids.shape[1] - 1
        # Shorter windows run on a model of their length with these weights
        # (the rows do not depend on it), so that no padded position counts.
        short = self._model_of_context(time) if time < self.context else None
        m = short or m
        try:
            _read_eval(m)  # from zero
            for xt, yt, _ in self._batches(ids[:, :-1], batch_size, targets=ids[:, 1:]):
                call(lib.mpcl_model_eval_step, m, xt, yt, ctx=_lib.context())
            s = _read_eval(m)
        finally:
            if short:
                lib.mpcl_model_destroy(short)
        return s.loss_sum / s.terms

    def _model_of_context(self, time):
        """A device model of this one's params on windows of `time` tokens,
        with this model's weights and state."""
        mp = self._params(self._max_batch())
        g = self._gpt_params(time)
        mp.layers, mp.layer_count, mp.input_shape = g.layers, g.layer_count, g.input_shape
        mp.input_rank, mp.inputs = g.input_rank, time
        # The plan this model runs (auto would time the candidates again).
        mp.policy = lib.mpcl_model_plan(self._model).contents.resolved
        ctx, h = _lib.context(), _lib.P()
        call(lib.mpcl_model_create, ctx, ctypes.byref(mp), ctypes.byref(h), ctx=ctx)
        try:
            _copy_state(self._model, h.value)
        except BaseException:
            lib.mpcl_model_destroy(h)
            raise
        return h.value

    def generate(self, prompt_tokens, max_new_tokens, temperature=1.0, top_k=0, seed=42):
        """The prompt followed by max_new_tokens tokens, each drawn from
        softmax(logits / temperature) over the top_k most likely tokens (0:
        all; temperature 0: the most likely) by the library (mpcl_generate),
        with draws from seed: the same seed gives the same tokens. The prompt
        is a 1-D int array, a str or bytes (byte tokens), 1 to context
        tokens; past the context the model reads the last context tokens.
        Returns a 1-D int32 array."""
        if not self._compiled:
            raise RuntimeError("compile() the model first")
        ids = _as_ids(prompt_tokens, "prompt_tokens")
        if ids.ndim != 1:
            raise ValueError(f"prompt_tokens has shape {ids.shape}; give one prompt (a 1-D "
                             "array)")
        if ids.size > self.context:
            raise ValueError(f"prompt_tokens holds {ids.size} tokens, more than the model's "
                             f"context of {self.context}")
        ids = self._check_ids(ids, "prompt_tokens")
        n = _lib.check_int("max_new_tokens", max_new_tokens, 0, _SIZE_MAX)
        sp = lib.mpcl_sample_default_params()
        sp.temperature = _lib.check_real("temperature", temperature, lo=0)
        sp.top_k = _lib.check_int("top_k", top_k, 0, _SIZE_MAX)
        sp.seed = _lib.check_int("seed", seed, 0, _U64_MAX)
        out = np.zeros(n, np.int32)
        m = self._device_model()
        call(lib.mpcl_generate, m, ids.ctypes.data, ids.size, n, ctypes.byref(sp),
             out.ctypes.data, _lib.TOKEN_FN(), None, ctx=_lib.context())
        return np.concatenate([ids, out])

    # ---- save ----

    def save(self, path, format=None):
        """save(path): the mpcl checkpoint, as Sequential.save (after fit or
        load_model). save(DIR, format="huggingface"): a GPT-2 folder,
        config.json and model.safetensors, that transformers'
        GPT2LMHeadModel.from_pretrained loads (mpcl_gpt2_folder_write: a new
        folder appears whole; an existing GPT-2 folder keeps its other
        files; any other non-empty folder is refused, MpclError
        MPCL_ERR_IO). The weights only: no optimizer state."""
        if format is None:
            return super().save(path)
        if format != "huggingface":
            raise ValueError(f"save: format={format!r}; mpcl writes None (an mpcl checkpoint) "
                             "or 'huggingface' (a GPT-2 folder)")
        if not self._compiled:
            raise RuntimeError("compile() the model first")
        ctx, m = _lib.context(), self._device_model()
        w = ctypes.POINTER(_lib.Gpt2Weights)()
        call(lib.mpcl_model_gpt2_weights, m, ctypes.byref(w), ctx=ctx)
        try:
            call(lib.mpcl_gpt2_folder_write, os.fsencode(path), w)
        finally:
            lib.mpcl_gpt2_weights_destroy(w)


class _TokenProgress:
    """The reports of a token run into History (one value per evaluation:
    the mean training loss since the last one, weighted by each report's
    steps, and the evaluation loss) and, with verbose, a line each."""

    def __init__(self, history, steps, context, verbose, pause=False):
        # A report's samples are windows: context tokens each, whatever the
        # batch and the micro-batches (mpcl-train's tokens/s).
        self.h, self.total, self.context, self.verbose = history, steps, context, verbose
        self.last_step, self.loss_sum, self.n = 0, 0.0, 0
        self.pause, self.logs = pause, None  # logs: the last evaluation's

    def __call__(self, r):
        k = r.step - self.last_step
        self.last_step = r.step
        self.loss_sum += r.loss * k
        self.n += k
        self.h.reports.append({f: getattr(r, f) for f, _ in _lib.TrainReport._fields_})
        if not r.epoch_end:
            return False
        loss = self.loss_sum / self.n if self.n else float("nan")
        self.loss_sum, self.n = 0.0, 0
        self.h.history.setdefault("loss", []).append(loss)
        self.h.history.setdefault("eval_loss", []).append(r.test_loss)
        self.h.epoch.append(r.epoch)
        self.h.steps.append(r.step)
        self.logs = {"loss": loss, "eval_loss": r.test_loss}
        if self.verbose:
            print(f"step {r.step}/{self.total} - loss: {loss:.4f} - eval_loss: "
                  f"{r.test_loss:.4f} - {r.samples_per_s * self.context:,.0f} tokens/s",
                  file=sys.stdout, flush=True)
        return self.pause


def gpt2_folder(path, context=None):
    """The GPT of a Hugging Face GPT-2 folder (config.json and
    model.safetensors, read and checked by mpcl_gpt2_folder_read: MpclError
    MPCL_ERR_FORMAT naming the file and the key or tensor), on windows of
    context tokens (its n_positions when None), compiled with GPT.compile's
    default optimizer, in the global policy."""
    w = ctypes.POINTER(_lib.Gpt2Weights)()
    call(lib.mpcl_gpt2_folder_read, os.fsencode(path), ctypes.byref(w))
    try:
        c = w.contents.config
        model = GPT(c.n_layer, c.n_head, c.n_embd, c.n_positions if context is None else context,
                    c.vocab_size, n_positions=c.n_positions,
                    layer_norm_epsilon=c.layer_norm_epsilon)
        model.compile()
        call(lib.mpcl_model_load_gpt2, model._device_model(), w, ctx=_lib.context())
    finally:
        lib.mpcl_gpt2_weights_destroy(w)
    return model
