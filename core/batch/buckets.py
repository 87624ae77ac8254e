"""Length buckets: which padded length each row runs at, how rows are grouped into session runs,
how a run's feeds are padded and how its outputs are cut back to each row.

Every distinct (batch, length) pair is a new input signature, so a plan-cache miss. Rounding
lengths up to a few buckets, and a run's batch up to a power of two, bounds the signatures a
worker ever sees to ``len(length buckets) * len(batch buckets)``; the price is the padded
positions computed and thrown away, which :class:`~dynashape.batch.stats.BatchStats` counts.

Modes (``buckets=``):

=================  ======================================================================
``"pow2"``         the smallest power of two >= the length (1, 2, 4, ... ; the default)
``[16, 32, 64]``   the smallest listed length >= the length; a longer row is an error
``"exact"``        no padding: rows grouped by their exact lengths (many signatures)
``None``           no bucketing: each run padded to its own longest row, rows in input order
                   (what a plain ``map_batches(session.run)`` does)
=================  ======================================================================
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, Union

import numpy as np

from ..errors import InvalidArgumentError, InvalidFeedError
from .axes import BatchAxisError, ModelLayout, OutputLayout

__all__ = ["Buckets", "Run", "parse_buckets", "plan_runs", "batch_bucket", "pad_rows", "cut_rows"]

BucketSpec = Union[str, Sequence[int], None]


@dataclass(frozen=True)
class Buckets:
    """A bucketing mode: ``mode`` is ``"pow2"``, ``"explicit"`` (``lengths`` sorted ascending),
    ``"exact"`` or ``"none"``."""

    mode: str
    lengths: tuple[int, ...] = ()

    @property
    def pads(self) -> bool:
        """Whether rows may be padded along a length (every mode but ``"exact"``)."""
        return self.mode != "exact"

    def fit(self, length: int, what: str = "length") -> int:
        """The padded length a row of ``length`` runs at (``"pow2"``, ``"explicit"``, ``"exact"``).

        Raises:
            InvalidFeedError: ``length`` exceeds the largest explicit bucket (``what`` names it).
        """
        if self.mode == "pow2":
            return 1 if length <= 1 else 1 << (length - 1).bit_length()
        if self.mode == "explicit":
            for b in self.lengths:
                if b >= length:
                    return b
            raise InvalidFeedError(f"{what} {length} exceeds the largest bucket {self.lengths[-1]} "
                                   f"(buckets {list(self.lengths)}): add a larger bucket or use buckets='pow2'")
        return length

    def __str__(self) -> str:
        return ",".join(map(str, self.lengths)) if self.mode == "explicit" else self.mode


def parse_buckets(spec: Any) -> Buckets:
    """A :class:`Buckets` from ``"pow2"``, ``"exact"``, ``None`` / ``"none"``, a sequence of
    positive ints or a string of them (``"16,32,64"``).

    Raises:
        InvalidArgumentError: anything else (a non-positive or non-integer length, an empty list).
    """
    if isinstance(spec, Buckets):
        return spec
    if spec is None:
        return Buckets("none")
    items = spec.split(",") if isinstance(spec, str) else spec
    if isinstance(spec, str) and spec.strip().lower() in ("pow2", "exact", "none"):
        return Buckets(spec.strip().lower())
    lengths = set()
    try:
        for x in items:
            if isinstance(x, (bool, float)) or not str(x).strip().isdigit() or int(x) < 1:
                raise ValueError(x)
            lengths.add(int(x))
    except (TypeError, ValueError):
        lengths = set()
    if not lengths:
        raise InvalidArgumentError(f"buckets must be 'pow2', 'exact', None or positive integer lengths "
                                   f"(16,32,64), got {spec!r}")
    return Buckets("explicit", tuple(sorted(lengths)))


def batch_bucket(rows: int, batch_size: int) -> int:
    """The batch a run of ``rows`` rows is padded to: the smallest power of two >= ``rows``,
    at most ``batch_size``."""
    return min(batch_size, 1 if rows <= 1 else 1 << (rows - 1).bit_length())


@dataclass(frozen=True)
class Run:
    """One session run: the rows it holds (indices into the call's rows, in order), the batch it
    runs at (>= ``len(rows)``; the extra rows repeat the first) and the padded length of each
    length symbol (in :attr:`ModelLayout.lengths` order)."""

    rows: tuple[int, ...]
    batch: int
    lengths: tuple[int, ...]


def plan_runs(lengths: Sequence[tuple[int, ...]], buckets: Buckets, batch_size: int, pad_batch: bool = True,
              labels: Sequence[str] = ()) -> list[Run]:
    """The session runs for rows of the given lengths (one tuple per row, one entry per length symbol).

    ``"none"``: consecutive chunks of ``batch_size`` rows, each padded to its own longest row,
    batch not padded. Other modes: rows grouped by bucket (groups in order of first row), each
    group cut into chunks of ``batch_size``; with ``pad_batch`` a chunk's batch is rounded up by
    :func:`batch_bucket`.

    Raises:
        InvalidFeedError: a row longer than the largest explicit bucket (names the row).
    """
    if buckets.mode == "none":
        runs = []
        for start in range(0, len(lengths), batch_size):
            chunk = tuple(range(start, min(start + batch_size, len(lengths))))
            longest = tuple(max(col) for col in zip(*(lengths[r] for r in chunk)))
            runs.append(Run(chunk, len(chunk), longest))
        return runs
    groups: dict[tuple, list[int]] = {}
    for r, row in enumerate(lengths):
        key = tuple(buckets.fit(n, f"row {r}: {labels[k] if k < len(labels) else 'length'}")
                    for k, n in enumerate(row))
        groups.setdefault(key, []).append(r)
    runs = []
    for key, members in groups.items():
        for start in range(0, len(members), batch_size):
            chunk = tuple(members[start:start + batch_size])
            runs.append(Run(chunk, batch_bucket(len(chunk), batch_size) if pad_batch else len(chunk), key))
    return runs


def pad_rows(rows: Sequence[np.ndarray], shape: tuple[int, ...], fill: Any, dtype: np.dtype, batch: int) -> np.ndarray:
    """``rows`` stacked into one ``(batch, *shape)`` array of ``dtype``: each row at the start
    of its slot, the rest ``fill``; slots past ``len(rows)`` repeat the first row (real data, so
    a padded batch row never holds values the model has not seen)."""
    if len(rows) == batch and all(r.shape == shape for r in rows):
        return np.stack(rows).astype(dtype, copy=False)
    out = np.full((batch, *shape), fill, dtype=dtype)
    for i, r in enumerate(rows):
        out[(i,) + tuple(slice(0, n) for n in r.shape)] = r
    if len(rows) < batch:
        out[len(rows):] = out[0]
    return out


def cut_rows(out: np.ndarray, layout: OutputLayout, model: ModelLayout, run: Run,
             row_lengths: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    """One array per real row of ``run`` from the output ``out`` of that run: the row's slice
    along the batch axis, cut to the row's true length on every axis that follows a length.
    Rows are copies (the padded batch is not kept alive by them).

    Raises:
        BatchAxisError: the output's batch axis is not the run's batch, or an axis that follows
            a length is not the run's padded length (the symbolic shape was wrong for this run).
    """
    b = layout.batch_axis
    if b is None or out.ndim != layout.rank or out.shape[b] != run.batch:
        got = "rank" if b is None or out.ndim != layout.rank else f"axis {b}"
        raise BatchAxisError(f"output '{layout.name}' has shape {list(out.shape)} for a run of {run.batch} rows "
                             f"(its {got} does not match its symbolic shape)")
    sym_index = {s: k for k, s in enumerate(model.lengths)}
    for axis, s in layout.follows:
        if out.shape[axis] != run.lengths[sym_index[s]]:
            raise BatchAxisError(f"output '{layout.name}' axis {axis} is {out.shape[axis]} long for a padded "
                                 f"'{model.label(s)}' of {run.lengths[sym_index[s]]}: it does not follow that length")
    rows = []
    for slot, r in enumerate(run.rows):
        index: list[Any] = [slice(None)] * out.ndim
        index[b] = slot
        for axis, s in layout.follows:
            index[axis] = slice(0, row_lengths[r][sym_index[s]])
        rows.append(np.array(out[tuple(index)], copy=True))
    return rows
