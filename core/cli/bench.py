"""``dynashape bench``: how long a model's runs take, against ONNX Runtime, and what a new shape costs.

    dynashape bench model.onnx --dim batch=4 --compare-ort --repeat 50 --warmup 5

Times are wall-clock milliseconds of ``session.run`` (``time.perf_counter``). The progress
bar goes to stderr and only when stderr is a terminal.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

import click
import numpy as np

from .group import main
from .common import (cli_errors, describe_feeds, feed_options, feeds_from_options, one_line, ordered_feeds,
                     ort_session, settled, warmup_options)


def timed_ms(fn: Callable[[], object]) -> float:
    """Wall-clock milliseconds of one call of ``fn``."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def spread(times_ms) -> tuple[float, float, float]:
    """(median, p10, p90) of ``times_ms``, in the same unit."""
    p10, med, p90 = np.percentile(np.asarray(times_ms, dtype=np.float64), [10, 50, 90])
    return float(med), float(p10), float(p90)


def times(a: float, b: float, digits: int = 1) -> str:
    """``a / b`` as ``"2.5x"`` (``"-"`` when ``b`` is 0)."""
    return f"{a / b:.{digits}f}x" if b > 0 else "-"


def progress(total: int, desc: str):
    """A tqdm progress bar on stderr, shown only when stderr is a terminal."""
    import sys

    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="run", file=sys.stderr, disable=None, leave=False)


def _grow_axis(arr: np.ndarray, axis: int) -> np.ndarray:
    """``arr`` one longer on ``axis``: its last slice repeated (zeros when the axis is empty)."""
    if arr.shape[axis] == 0:
        shape = list(arr.shape)
        shape[axis] = 1
        return np.zeros(shape, arr.dtype)
    pad = [(0, 0)] * arr.ndim
    pad[axis] = (0, 1)
    return np.pad(arr, pad, mode="edge")


def bumped_feeds(sess, feeds: dict) -> Optional[tuple[str, dict]]:
    """(label, feeds) with the model's first symbolic input dim one larger on every input
    that declares it (``"batch 4 -> 5"``); None when no input has a symbolic or unknown dim."""
    from ..model import FIXED, SYMBOLIC

    for vi in sess.model.graph.inputs:
        for axis, d in enumerate(vi.dims or ()):
            if d.kind == FIXED or vi.name not in feeds:
                continue
            if d.kind == SYMBOLIC:
                where = [(v.name, a) for v in sess.model.graph.inputs for a, e in enumerate(v.dims or ())
                         if e.kind == SYMBOLIC and e.value == d.value and v.name in feeds]
                label = str(d.value)
            else:
                where, label = [(vi.name, axis)], f"{vi.name}:{axis}"
            out = dict(feeds)
            for name, a in where:
                out[name] = _grow_axis(out[name], a)
            old = feeds[vi.name].shape[axis]
            return f"{label} {old} -> {old + 1}", out
    return None


def _ort_for(model: str, feeds: dict, threads: int):
    """(onnxruntime session that ran ``feeds`` once, or None; a note when there is none)."""
    try:
        sess = ort_session(model, threads)
        if sess is not None:
            sess.run(None, feeds)
    except Exception as exc:  # onnxruntime raises its own error types
        return None, f"onnxruntime cannot run the model: {one_line(exc)}"
    return sess, None if sess is not None else "onnxruntime is not installed (pip install onnxruntime)"


def _time_runs(sess, ort_sess, feeds: dict, repeat: int, warmup: int) -> tuple[list, list]:
    """Warm-up runs, then ``repeat`` timed runs of each engine, interleaved: (dynashape ms, ORT ms)."""
    ds, ort = [], []
    with progress(warmup + repeat, "bench") as bar:
        for i in range(warmup + repeat):
            with settled(i, warmup):
                t = timed_ms(lambda: sess.run(None, feeds))
            t_ort = timed_ms(lambda: ort_sess.run(None, feeds)) if ort_sess is not None else None
            if i >= warmup:
                ds.append(t)
                if t_ort is not None:
                    ort.append(t_ort)
            bar.update(1)
    return ds, ort


def _fmt_spread(times_ms: list) -> str:
    med, p10, p90 = spread(times_ms)
    return f"median {med:.3f} ms  p10 {p10:.3f} ms  p90 {p90:.3f} ms"


def _warm_new_shape(sess, feeds: dict, repeat: int) -> str:
    """The line about a second new signature on the warm session."""
    from ..errors import DynashapeError

    bumped = bumped_feeds(sess, feeds)
    if bumped is None:
        return "skipped (no symbolic input dim)"
    label, new = bumped
    try:
        first = timed_ms(lambda: sess.run(None, new))
        cached = [timed_ms(lambda: sess.run(None, new)) for _ in range(min(repeat, 5))]
    except (DynashapeError, ValueError) as exc:
        return f"{label}: failed: {one_line(exc)}"
    med = spread(cached)[0]
    return f"{label}: first run {first:.3f} ms vs its cached median {med:.3f} ms {_extra(first, cached)}"


def _extra(first: float, cached: list) -> str:
    """What a first run costs over the cached runs: ``= +X ms (Nx)``, or that it is within
    their spread (a first run measured below the median is noise, not a negative cost)."""
    med, _, p90 = spread(cached)
    if first <= p90:
        return "= no more than a cached run (within their p10-p90)"
    return f"= +{first - med:.3f} ms ({times(first, med)})"


@main.command()
@feed_options
@click.option("--repeat", type=click.IntRange(min=1), default=20, show_default=True,
              help="timed runs per engine")
@warmup_options(3)
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="intra-op (BLAS) threads of both engines")
@click.option("--compare-ort", is_flag=True, help="also time onnxruntime on the same feeds")
def bench(model: str, dims, shapes, inputs, allocator: str, seed: int, repeat: int, warmup: int, threads: int,
          compare_ort: bool) -> None:
    """Time MODEL: median, p10 and p90 of REPEAT runs on the same feeds after the first run and
    WARMUP untimed ones (ms; --no-warmup: the first, cold run is the first timed one), the ratio
    to onnxruntime (--compare-ort), and the cost of a first run at a new input shape on a fresh
    session and on a warm one (the first symbolic dim + 1)."""
    from ..options import SessionOptions
    from ..session import InferenceSession

    with cli_errors(model) as errors:
        t0 = time.perf_counter()
        options = SessionOptions()
        options.intra_op_num_threads = threads
        sess = InferenceSession(model, options, allocator=allocator)
        create_ms = (time.perf_counter() - t0) * 1e3
        feeds = ordered_feeds(sess, feeds_from_options(sess, dims, shapes, inputs, seed, errors=errors))
        first = timed_ms(lambda: sess.run(None, feeds))
        planning = sess.stats.planning_ms
        ort_sess, note = _ort_for(model, feeds, threads) if compare_ort else (None, None)
        ds, ort = _time_runs(sess, ort_sess, feeds, repeat, warmup)
        if warmup == 0:   # the timed runs start with the cold one (onnxruntime's ran in _ort_for)
            ds = [first] + ds[:-1]
        warm = _warm_new_shape(sess, feeds, repeat)
    med = spread(ds)[0]
    click.echo(f"model:           {model}")
    click.echo(f"inputs:          {describe_feeds(feeds)}")
    click.echo(f"session created: {create_ms:.1f} ms (import, constant folding, symbolic program)")
    runs = f"{repeat} runs after {warmup} warm-up" if warmup else f"{repeat} runs, the first (cold) included"
    click.echo(f"dynashape:       {_fmt_spread(ds)}  ({runs}, {threads} thread(s))")
    if ort:
        ort_med = spread(ort)[0]
        click.echo(f"onnxruntime:     {_fmt_spread(ort)}  ({len(ort)} runs)")
        click.echo(f"ratio:           dynashape / onnxruntime = {times(med, ort_med, 2)} "
                   "(medians; > 1: dynashape slower)")
    elif note:
        click.echo(f"onnxruntime:     {note}")
    click.echo(f"new shape:       first run of a fresh session {first:.3f} ms (planning {planning:.3f} ms) "
               f"vs cached median {med:.3f} ms {_extra(first, ds)}")
    click.echo(f"warm new shape:  {warm}")
