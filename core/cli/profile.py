"""``dynashape profile``: where a model's run time goes, per operator type, and a Chrome trace.

    dynashape profile model.onnx --dim batch=4 --repeat 20 -o trace.json

The session's profiler (``SessionOptions.enable_profiling``, onnxruntime's format) writes a
JSON array of Chrome trace events; ``Node`` events (``dur`` in µs, ``args.op_name`` the op
type) are summed per op type. Open the trace in chrome://tracing or https://ui.perfetto.dev.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Optional

import click

from .group import main
from .common import cli_errors, describe_feeds, one_line, ordered_feeds
from .common import feed_options, feeds_from_options, settled, warmup_options

DEFAULT_PREFIX = "dynashape_profile_"


def node_events(events: list) -> list[dict]:
    """The ``cat == "Node"`` events of a trace (one per node per run)."""
    return [e for e in events if isinstance(e, dict) and e.get("cat") == "Node"]


def session_durations_ms(events: list, name: str) -> list[float]:
    """Milliseconds of each Session event called ``name`` (``model_run``, ``plan``), in trace order."""
    return [e.get("dur", 0) / 1e3 for e in events
            if isinstance(e, dict) and e.get("cat") == "Session" and e.get("name") == name]


def after_warmup(events: list, warmup: int) -> list:
    """The events of the runs after the first ``warmup`` ones: those that start once the
    ``warmup``-th ``model_run`` event has ended (every event when ``warmup`` is 0)."""
    runs = sorted((e for e in events if isinstance(e, dict) and e.get("cat") == "Session"
                   and e.get("name") == "model_run"), key=lambda e: e.get("ts", 0))
    if not warmup or not runs:
        return events
    last = runs[min(warmup, len(runs)) - 1]
    cut = last.get("ts", 0) + last.get("dur", 0)
    return [e for e in events if isinstance(e, dict) and e.get("ts", 0) >= cut]


def own_durations(events: list) -> list[tuple[dict, float]]:
    """Each node event with its own time (µs): an If/Loop/Scan's duration less that of the
    body nodes it ran (events whose ``args.parent`` names it, inside its span), so that a
    node's time is counted once, in its own op type."""
    nodes = sorted(node_events(events), key=lambda e: (e.get("tid", 0), e.get("ts", 0), -e.get("dur", 0)))
    own = {id(e): float(e.get("dur", 0)) for e in nodes}
    open_events: list = []
    for e in nodes:
        start = e.get("ts", 0)
        while open_events and (open_events[-1].get("tid", 0) != e.get("tid", 0)
                               or open_events[-1].get("ts", 0) + open_events[-1].get("dur", 0) < start):
            open_events.pop()
        parent = (e.get("args") or {}).get("parent")
        for outer in reversed(open_events):
            if parent and outer.get("name") == f"{parent}_kernel_time":
                own[id(outer)] -= float(e.get("dur", 0))
                break
        open_events.append(e)
    return [(e, max(own[id(e)], 0.0)) for e in nodes]


def op_type_table(events: list) -> list[dict]:
    """Node events grouped by ``args.op_name``, by total time descending: dicts with
    ``op_type``, ``calls``, ``total_ms``, ``percent`` (of all node time) and ``mean_us``.
    The nodes of If/Loop/Scan bodies count in their own op types, the If/Loop/Scan itself
    with its own time only (:func:`own_durations`)."""
    groups: dict[str, list[float]] = {}
    for e, dur in own_durations(events):
        op = (e.get("args") or {}).get("op_name") or "?"
        groups.setdefault(op, []).append(dur)
    total_us = sum(sum(d) for d in groups.values()) or 1.0
    rows = [{"op_type": op, "calls": len(d), "total_ms": sum(d) / 1e3, "percent": 100.0 * sum(d) / total_us,
             "mean_us": sum(d) / len(d)} for op, d in groups.items()]
    return sorted(rows, key=lambda r: (-r["total_ms"], r["op_type"]))


def format_op_table(rows: list[dict]) -> list[str]:
    """Aligned lines: op type, calls, total ms, % of total, mean µs, and a total line."""
    header = ("op type", "calls", "total ms", "% total", "mean µs")
    body = [(r["op_type"], str(r["calls"]), f"{r['total_ms']:.3f}", f"{r['percent']:.1f}%", f"{r['mean_us']:.1f}")
            for r in rows]
    calls = sum(r["calls"] for r in rows)
    total_ms = sum(r["total_ms"] for r in rows)
    footer = ("total", str(calls), f"{total_ms:.3f}", "100.0%" if rows else "-",
              f"{1e3 * total_ms / calls:.1f}" if calls else "-")
    table = [header] + body + [footer]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in table]


def _check_writable(path: Optional[str]) -> None:
    """Raise click.BadParameter (-o) when the trace could not be written to ``path``."""
    if path is None:
        return
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise click.BadParameter(f"{path} is a directory", param_hint="'-o' / '--output'")
    if not os.path.isdir(parent):
        raise click.BadParameter(f"directory {parent} does not exist", param_hint="'-o' / '--output'")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise click.BadParameter(f"{path} is not writable", param_hint="'-o' / '--output'")


def _session_options(prefix: str):
    import dynashape

    if not hasattr(dynashape, "SessionOptions"):
        raise click.ClickException("this dynashape has no profiler (dynashape.SessionOptions is missing)")
    so = dynashape.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = prefix
    return so


def profile_runs(model: str, allocator: str, feed_args: tuple, runs: int, prefix: str,
                 warmup: int = 0, errors=None) -> tuple[str, dict]:
    """Run ``model`` ``runs`` times with profiling on; (trace path written by the session, feeds).
    With ``warmup``, the runs after the first wait for the compiled kernels (:func:`.common.settled`);
    ``errors``: the command's :func:`.common.cli_errors` context (told which feeds are random).

    Raises:
        DynashapeError / ValueError / OSError: the model does not load or run, or bad feeds.
    """
    from ..session import InferenceSession

    sess = InferenceSession(model, _session_options(prefix), allocator=allocator)
    feeds = ordered_feeds(sess, feeds_from_options(sess, *feed_args, errors=errors))
    for i in range(runs):
        with settled(i, warmup):
            sess.run(None, feeds)
    return sess.end_profiling(), feeds


def _runs_line(events: list, timed: list, warmup: int, node_ms: float) -> str:
    """How the timed runs' ``model_run`` time splits into nodes, planning and the rest (ms),
    after what the warm-up (the first run) took."""
    runs = session_durations_ms(timed, "model_run")
    plans = session_durations_ms(timed, "plan")
    run_ms = sum(runs)
    share = f"{100.0 * node_ms / run_ms:.1f}%" if run_ms else "-"
    first = (session_durations_ms(events, "model_run") or [0.0])[0]
    warm = (f" after {warmup} warm-up run(s) (the first: {first:.3f} ms, not in the table)" if warmup
            else f" (the first, cold, included: {first:.3f} ms)")
    return (f"{len(runs)} runs{warm}: {run_ms:.3f} ms in model_run, {node_ms:.3f} ms in nodes ({share}), "
            f"{sum(plans):.3f} ms in {len(plans)} plan(s) for new signatures; "
            "the rest is the executor and the profiler itself")


def _load_trace(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        events = json.load(f)
    if not isinstance(events, list):
        raise click.ClickException(f"{path} is not a Chrome trace (a JSON array of events)")
    return events


@main.command()
@feed_options
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False),
              help=f"write the Chrome trace here (default: {DEFAULT_PREFIX}<date>.json in the current directory)")
@click.option("--repeat", type=click.IntRange(min=1), default=10, show_default=True,
              help="profiled runs after the warm-up")
@warmup_options(2)
def profile(model: str, dims, shapes, inputs, allocator: str, seed: int, output: Optional[str], repeat: int,
            warmup: int) -> None:
    """Profile REPEAT runs of MODEL after WARMUP ones: time per op type (calls, total ms, % of
    total, mean µs per call) of the REPEAT runs, and a Chrome-trace JSON of every node of every
    run, the warm-up included (onnxruntime's format). The warm-up keeps a first run's one-time
    costs (planning the shape, making the kernels) and the second's (the first run that waits
    for the compiled kernels loads their code) out of the table; --no-warmup puts the cold run
    in."""
    _check_writable(output)
    tmp = tempfile.mkdtemp(prefix="dynashape_profile_") if output else None
    try:
        with cli_errors(model) as errors:
            prefix = os.path.join(tmp, DEFAULT_PREFIX) if tmp else DEFAULT_PREFIX
            written, feeds = profile_runs(model, allocator, (dims, shapes, inputs, seed), warmup + repeat, prefix,
                                          warmup, errors)
            events = _load_trace(written)
            if output:
                try:
                    shutil.move(written, output)
                except OSError as exc:
                    raise click.ClickException(f"cannot write the trace to {output}: {one_line(exc)}") from None
                written = output
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    timed = after_warmup(events, warmup)
    rows = op_type_table(timed)
    for line in format_op_table(rows):
        click.echo(line)
    click.echo("")
    click.echo(f"inputs: {describe_feeds(feeds)}")
    click.echo(_runs_line(events, timed, warmup, sum(r["total_ms"] for r in rows)))
    click.echo(f"trace: {written} ({len(events)} events; open in chrome://tracing or https://ui.perfetto.dev)")
