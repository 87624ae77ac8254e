"""``Predictor``: a callable over batches of rows, for ``ray.data.Dataset.map_batches`` or a plain loop.

    ds.map_batches(Predictor, fn_constructor_kwargs={"model": ray.put(model_bytes)},
                   compute=ray.data.ActorPoolStrategy(size=2), batch_size=256, batch_format="numpy")

    predictor = Predictor("model.onnx")                 # the same, in one process
    for out in map(predictor, batches): ...

One :class:`~dynashape.session.InferenceSession` per predictor (per Ray actor). Each call
groups its rows by length bucket (:mod:`dynashape.batch.buckets`), pads every group into a
few session runs whose signatures repeat from call to call (plan-cache hits), and cuts each
output back to every row's true length, in the rows' order.
"""
from __future__ import annotations

import os
import socket
import time
import warnings
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from ..errors import DynashapeError, InvalidArgumentError
from .axes import ModelLayout, model_layout
from .buckets import Buckets, Run, cut_rows, pad_rows, parse_buckets, plan_runs
from .columns import input_rows, rows_column
from .stats import BatchStats

__all__ = ["Predictor", "worker_id"]

PadValues = Union[int, float, Mapping[str, Union[int, float]]]


def worker_id() -> str:
    """``host:pid`` of this process (one Ray actor is one process)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def resolve_model(model: Any) -> Any:
    """The model as ``InferenceSession`` takes it: a Ray ``ObjectRef`` is fetched (once, at
    construction), everything else is passed on (a path, bytes, an ``onnx.ModelProto``)."""
    if type(model).__name__ == "ObjectRef" and type(model).__module__.startswith("ray"):
        import ray

        return ray.get(model)
    return model


def pad_table(layout: ModelLayout, pad_values: PadValues) -> dict:
    """The value each input is padded with: ``*mask*`` inputs 0 (padded positions are masked
    out), the others ``pad_values`` (one number, or a mapping by input name; unnamed inputs 0).

    Raises:
        InvalidArgumentError: a name of the mapping that is not an input, a value that is not a number.
    """
    names = [vi.name for vi in layout.inputs]
    if isinstance(pad_values, Mapping):
        unknown = [k for k in pad_values if k not in names]
        if unknown:
            raise InvalidArgumentError(f"pad_values names {unknown}, which are not inputs of the model {names}")
        given, default = dict(pad_values), 0.0
    else:
        given, default = {}, pad_values
    table = {}
    for vi in layout.inputs:
        value = given.get(vi.name, 0 if "mask" in vi.name.lower() else default)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
            raise InvalidArgumentError(f"pad value of input '{vi.name}' must be a number, got {value!r}")
        table[vi.name] = value
    return table


class Predictor:
    """Predict rows in batches, padded to length buckets, on one dynashape session.

    Args:
        model: a path, serialized bytes, an ``onnx.ModelProto`` or a Ray ``ObjectRef`` to the
            bytes (fetched once; how :func:`~dynashape.batch.run_ray` ships the model).
        output_names: the outputs to return (default all).
        buckets: ``"pow2"`` (default), a list of lengths, ``"exact"`` or None (no bucketing:
            each run padded to its longest row); see :mod:`dynashape.batch.buckets`.
        pad_values: what variable-length inputs are padded with: one number or ``{input: number}``;
            ``*mask*`` inputs are padded with 0 unless named. Default 0.
        batch_size: the most rows in one session run (>= 1). Default 32.
        pad_batch: round each run's batch up to a power of two (<= ``batch_size``) so that the
            batch dim repeats too; the extra rows repeat a real one and are dropped. Default True.
        keep_columns: return the batch's columns that are not model inputs too (ids). Default True.
        sess_options, allocator, plan_cache_size, **session_kwargs: passed to
            :class:`~dynashape.session.InferenceSession` (``plan_cache_size`` defaults to 256, room
            for every bucket and batch size a worker sees).
        stats_sink: a Ray actor handle with ``report(stats_dict)`` (set by ``run_ray``); after
            each call the worker's :class:`BatchStats` is reported to it.

    A batch is ``{column: column}``: one column per model input (missing ``*mask*`` inputs
    are ones over each row's length, missing ``*type_ids*`` zeros), each an ndarray (axis 0
    the rows) or an object array / list of per-row arrays of the input's shape without the
    batch axis (``input_ids`` rows are int64 ``[L]``). The result has one column per output:
    an object array of per-row arrays where the output follows a length (``last_hidden_state``
    rows float32 ``[L, 64]``, cut to each row's L), else the rows stacked (``pooler_output``
    float32 ``[rows, 64]``).

    Raises:
        BatchAxisError: an input without a symbolic batch axis; an output whose batch axis, or
            (with padding) whose length axes, the symbolic shapes do not decide.
        InvalidArgumentError: bad ``buckets``, ``pad_values`` or ``batch_size``.
        OutputNameError (an InputNameError): an unknown output name.
        ModelLoadError / UnsupportedOperatorError: as ``InferenceSession``.
    """

    def __init__(self, model: Any, output_names: Optional[Sequence[str]] = None, *, buckets: Any = "pow2",
                 pad_values: PadValues = 0, batch_size: int = 32, pad_batch: bool = True, keep_columns: bool = True,
                 sess_options: Any = None, allocator: Optional[str] = None, plan_cache_size: int = 256,
                 stats_sink: Any = None, **session_kwargs: Any):
        from ..session import InferenceSession

        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.buckets: Buckets = parse_buckets(buckets)
        self.batch_size = int(batch_size)
        self.pad_batch = bool(pad_batch)
        self.keep_columns = bool(keep_columns)
        self.session = InferenceSession(resolve_model(model), sess_options, allocator=allocator,
                                        plan_cache_size=plan_cache_size, **session_kwargs)
        self.layout = model_layout(self.session, output_names)
        if self.buckets.pads and self.layout.lengths:
            self.layout.check_padding()
            if not any("mask" in vi.name.lower() for vi in self.layout.inputs):
                warnings.warn("dynashape.batch: the model has no *mask* input; padded positions are visible to it, "
                              "so outputs at real positions are exact only for causal or position-wise models "
                              "(use buckets='exact' otherwise)", UserWarning, stacklevel=2)
        else:
            self.layout.check_splittable()
        self.output_names = [o.name for o in self.layout.outputs]
        self.pad = pad_table(self.layout, pad_values)
        self.stats = BatchStats(worker=worker_id())
        self._signatures: set = set()
        self._sink = stats_sink

    def __call__(self, batch: Mapping[str, Any]) -> dict:
        """Predict one batch: ``{column: column}`` -> ``{output: column}`` (plus the kept
        columns), one entry per row, in the rows' order.

        Raises:
            InvalidFeedError (and subclasses): a column or row that does not fit the model, a row
                longer than the largest explicit bucket (rows numbered within the batch).
            InvalidArgumentError: a kept column has the name of an output.
            ShapeInferenceError / ExecutionError: as ``InferenceSession.run``.
        """
        t0 = time.perf_counter()
        n, rows, lengths = input_rows(batch, self.layout)
        labels = [self.layout.label(s) for s in self.layout.lengths]
        results: dict[str, list] = {name: [None] * n for name in self.output_names}
        for run in plan_runs(lengths, self.buckets, self.batch_size, self.pad_batch, labels):
            try:
                outs = self._run(run, rows)
            except DynashapeError as exc:   # same error, its message saying which run failed
                where = ", ".join(f"{label} {n}" for label, n in zip(labels, run.lengths)) or "no length"
                exc.args = (f"in a run of {len(run.rows)} row(s) padded to {where} (batch {run.batch}): "
                            f"{exc.args[0] if exc.args else exc}", *exc.args[1:])
                raise
            for layout, out in zip(self.layout.outputs, outs):
                for r, row in zip(run.rows, cut_rows(out, layout, self.layout, run, lengths)):
                    results[layout.name][r] = row
            self._count(run, lengths)
        columns = {o.name: rows_column(results[o.name], o.ragged) for o in self.layout.outputs}
        if self.keep_columns:
            inputs = set(self.pad)
            for name, col in batch.items():
                if name in inputs:
                    continue
                if name in columns:
                    raise InvalidArgumentError(f"the batch's column '{name}' has the name of an output; rename it "
                                               f"or pass keep_columns=False")
                columns[name] = col
        self.stats.rows += n
        self.stats.calls += 1
        self.stats.busy_s += time.perf_counter() - t0
        self._report()
        return columns

    def _run(self, run: Run, rows: Mapping[str, list]) -> list:
        index = {s: k for k, s in enumerate(self.layout.lengths)}
        feeds = {}
        for vi in self.layout.inputs:
            shape = tuple(d if isinstance(d, int) else run.lengths[index[d]] for d in vi.row_dims)
            feeds[vi.name] = pad_rows([rows[vi.name][r] for r in run.rows], shape, self.pad[vi.name], vi.dtype,
                                      run.batch)
        t0 = time.perf_counter()
        outs = self.execute(feeds)
        self.stats.run_s += time.perf_counter() - t0
        return outs

    def execute(self, feeds: dict) -> list:
        """One run of the padded ``feeds`` (``{input: (batch, ...) array}``): the requested outputs,
        in ``output_names`` order. A subclass may run them elsewhere (benchmarks/batch.py runs
        ONNX Runtime here, with the same bucketing around it)."""
        return self.session.run(self.output_names, feeds)

    def _count(self, run: Run, lengths: Sequence[tuple[int, ...]]) -> None:
        s = self.stats
        s.runs += 1
        s.real_cells += sum(int(np.prod(lengths[r])) for r in run.rows)
        s.padded_cells += run.batch * int(np.prod(run.lengths))
        self._signatures.add((run.batch, run.lengths))
        s.signatures = len(self._signatures)
        live = self.session.stats.snapshot()
        s.cache_hits, s.cache_misses = live.cache_hits, live.cache_misses

    def _report(self) -> None:
        if self._sink is None:
            return
        import ray

        ray.get(self._sink.report.remote(self.stats.to_dict()))
