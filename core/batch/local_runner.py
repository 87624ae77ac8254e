"""``run_local``: a batch job in this process, on one :class:`~dynashape.batch.Predictor`.

    result = run_local("model.onnx", {"input_ids": rows}, buckets="pow2", batch_size=32)
    result.outputs["last_hidden_state"][i]      # row i, cut to its length
    print("\n".join(summary_lines(result)))

The same predictor and batching as :func:`~dynashape.batch.run_ray`, without Ray: for a
laptop, for tests, and as the reference a cluster run must equal.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from ..errors import DynashapeError, InvalidArgumentError
from .columns import column_rows, slice_columns
from .predictor import Predictor
from .stats import BatchResult

__all__ = ["run_local", "default_rows_per_call", "progress_bar", "collect"]


def default_rows_per_call(batch_size: int) -> int:
    """Rows handed to a predictor per call: 8 runs' worth, so each call fills a few buckets."""
    return 8 * batch_size


def progress_bar(total: Optional[int], enabled: bool):
    """A tqdm bar over rows on stderr, shown only when ``enabled`` and stderr is a terminal."""
    from tqdm import tqdm

    return tqdm(total=total, unit="row", desc="batch", file=sys.stderr, disable=None if enabled else True,
                leave=False)


def collect(outputs: dict, batch: Mapping[str, Any], names: Sequence[str]) -> int:
    """Append the rows of ``batch``'s output columns ``names`` to ``outputs`` (name -> list of
    rows); returns how many rows the batch held."""
    n = 0
    for name in names:
        rows = column_rows(batch[name])
        outputs.setdefault(name, []).extend(rows)
        n = len(rows)
    return n


def run_local(model: Any, data: Union[Mapping[str, Any], Iterable[Mapping[str, Any]]],
              output_names: Optional[Sequence[str]] = None, *, rows_per_call: Optional[int] = None,
              progress: bool = False, **predictor_kwargs: Any) -> BatchResult:
    """Predict every row of ``data`` in this process.

    Args:
        model: a path, bytes or ``onnx.ModelProto``, or a :class:`~dynashape.batch.Predictor`
            already built (then without ``output_names`` and predictor options).
        data: whole columns ``{input: column}`` (an ndarray with the rows on axis 0, or a list /
            object array of per-row arrays), cut into calls of ``rows_per_call`` rows; or an
            iterable of such batches, passed as they come.
        output_names: the outputs (default all).
        rows_per_call: rows per predictor call (default ``8 * batch_size``).
        progress: a progress bar on stderr (when it is a terminal).
        **predictor_kwargs: :class:`~dynashape.batch.Predictor`'s (``buckets``, ``pad_values``,
            ``batch_size``, ``pad_batch``, session options).

    Returns:
        A :class:`~dynashape.batch.BatchResult`: each output's rows in input order, one worker's stats.

    Raises:
        as :class:`~dynashape.batch.Predictor` and its calls (a call's error says which input
        rows its batch held); InvalidArgumentError for a bad ``rows_per_call``.
    """
    if isinstance(model, Predictor):
        if output_names is not None or predictor_kwargs:
            raise InvalidArgumentError("run_local(predictor, ...) takes no output_names or predictor options: "
                                       "they are the predictor's")
        predictor = model
    else:
        predictor = Predictor(model, output_names, keep_columns=False, **predictor_kwargs)
    per_call = rows_per_call if rows_per_call is not None else default_rows_per_call(predictor.batch_size)
    if isinstance(per_call, bool) or not isinstance(per_call, int) or per_call < 1:
        raise InvalidArgumentError(f"rows_per_call must be an int >= 1, got {rows_per_call!r}")
    if isinstance(data, Mapping):
        total: Optional[int] = len(next(iter(data.values()))) if data else 0
        batches: Iterable[Mapping[str, Any]] = slice_columns(data, per_call)
    else:
        total, batches = None, data
    outputs: dict = {name: [] for name in predictor.output_names}
    t0 = time.perf_counter()
    done = 0
    with progress_bar(total, progress) as bar:
        for batch in batches:
            try:
                n = collect(outputs, predictor(batch), predictor.output_names)
            except DynashapeError as exc:   # the predictor numbers rows within the batch: say which batch
                size = len(next(iter(batch.values()))) if batch else 0
                exc.args = (f"in the batch of input rows {done}-{done + size - 1}: "
                            f"{exc.args[0] if exc.args else exc}", *exc.args[1:])
                raise
            done += n
            bar.update(n)
    return BatchResult(outputs, [predictor.stats], time.perf_counter() - t0)
