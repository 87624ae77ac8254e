"""What a batch job measured: per worker (one :class:`~dynashape.batch.Predictor`) and in total.

Padding is counted in *cells*: a row has the product of its lengths (1 for a model without
length axes) and a run ``batch * product of its padded lengths``; the overhead is the cells
computed beyond the real ones, in % of the real ones (so 25 % means a quarter more work than
the rows need). Plan-cache hits and misses are the worker's session's
(:attr:`~dynashape.session.InferenceSession.stats`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable, Optional

__all__ = ["BatchStats", "BatchResult", "merge_stats", "summary_lines"]


@dataclass
class BatchStats:
    """Counters of one worker.

    ``rows``: rows predicted; ``calls``: batches handed to the predictor; ``runs``: session
    runs; ``signatures``: distinct (batch, padded lengths) it ran; ``real_cells`` /
    ``padded_cells``: see the module; ``cache_hits`` / ``cache_misses``: plan cache;
    ``run_s``: seconds inside ``session.run``; ``busy_s``: seconds inside predictor calls
    (padding, cutting and the runs).
    """

    worker: str = ""
    rows: int = 0
    calls: int = 0
    runs: int = 0
    signatures: int = 0
    real_cells: int = 0
    padded_cells: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    run_s: float = 0.0
    busy_s: float = 0.0

    @property
    def padding_overhead(self) -> float:
        """Cells computed beyond the real ones, in % of the real ones (0.0 without rows)."""
        return 100.0 * (self.padded_cells - self.real_cells) / self.real_cells if self.real_cells else 0.0

    @property
    def hit_rate(self) -> float:
        """Plan-cache hits over lookups, in % (0.0 before any run)."""
        lookups = self.cache_hits + self.cache_misses
        return 100.0 * self.cache_hits / lookups if lookups else 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "BatchStats":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def merge_stats(stats: Iterable[BatchStats], worker: str = "all") -> BatchStats:
    """The sum of several workers' counters (``signatures`` summed too: per-worker caches)."""
    total = BatchStats(worker=worker)
    for s in stats:
        for f in fields(BatchStats):
            if f.name != "worker":
                setattr(total, f.name, getattr(total, f.name) + getattr(s, f.name))
    return total


@dataclass
class BatchResult:
    """The outcome of a batch job (:func:`~dynashape.batch.run_local`, :func:`~dynashape.batch.run_ray`).

    ``outputs``: output name -> one array per input row, in input order, each cut to its row's
    true length. ``workers``: one :class:`BatchStats` per worker. ``wall_s``: seconds from the
    first batch handed out to the last row collected (session creation excluded for local
    runs, included for Ray, where actors start while data flows).
    """

    outputs: dict = field(default_factory=dict)
    workers: list = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def rows(self) -> int:
        return len(next(iter(self.outputs.values()))) if self.outputs else 0

    @property
    def total(self) -> BatchStats:
        return merge_stats(self.workers)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.wall_s if self.wall_s > 0 else 0.0


def _shape_text(rows: list) -> str:
    """``float32 [L, 64]`` style: the dtype and the row shape, varying axes shown as ``*``."""
    if not rows:
        return "(no rows)"
    shapes = {r.shape for r in rows}
    ndim = {len(s) for s in shapes}
    if len(ndim) != 1:
        return f"{rows[0].dtype} (rows of different ranks)"
    dims = [str(d.pop()) if len(d) == 1 else "*" for d in (set(axis) for axis in zip(*shapes))]
    return f"{rows[0].dtype} [{', '.join(dims)}]"


def summary_lines(result: BatchResult, buckets: Any = None, extra: Optional[dict] = None) -> list[str]:
    """The summary a batch job prints: rows, runs, rows per second, padding overhead, and one
    line per worker with its plan-cache hit rate."""
    t = result.total
    lines = [f"rows:             {result.rows}  in {result.wall_s:.2f} s = {result.rows_per_s:.1f} rows/s",
             f"batches:          {t.runs} session runs ({t.calls} predictor calls, {t.signatures} signatures"
             f"{'' if buckets is None else f', buckets {buckets}'})",
             f"padding overhead: {t.padding_overhead:.1f} % ({t.padded_cells} cells computed for "
             f"{t.real_cells} real)",
             f"plan cache:       {t.cache_hits} hits, {t.cache_misses} misses ({t.hit_rate:.1f} % hits)"]
    for w in sorted(result.workers, key=lambda s: s.worker):
        lines.append(f"  worker {w.worker}: {w.rows} rows, {w.runs} runs, plan cache {w.cache_hits} hits / "
                     f"{w.cache_misses} misses ({w.hit_rate:.1f} %), padding {w.padding_overhead:.1f} %, "
                     f"session.run {w.run_s:.2f} s")
    for name, rows in result.outputs.items():
        lines.append(f"output {name}: {_shape_text(rows)}")
    for k, v in (extra or {}).items():
        lines.append(f"{k}: {v}")
    return lines
