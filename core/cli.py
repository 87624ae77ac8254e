"""The ``dynashape`` command line: ``demo``, ``run``, ``inspect``, ``plan``.

    dynashape demo
    dynashape run model.onnx --dim batch=4 --shape x=4x3x32x32 --compare-ort
"""
from __future__ import annotations

import sys
import time

import click
import numpy as np

from .errors import DynashapeError

__all__ = ["main"]


def _ort_session(model_bytes: bytes):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


@click.group()
@click.version_option(package_name="dynashape")
def main() -> None:
    """dynashape: an ONNX runtime for dynamic shapes."""


@main.command()
def demo() -> None:
    """Run the seed's runtime_shape_demo for batches 1, 2, 8, 3, 1 on one session per allocator."""
    from .demo import DEMO_BATCHES, build_demo_model, demo_input
    from .session import InferenceSession

    model = build_demo_model()
    ort_sess = _ort_session(model.SerializeToString())
    if ort_sess is None:
        click.echo("onnxruntime is not installed: results are not compared (pip install onnxruntime)")
    click.echo(f"{'allocator':<9}  {'batch':>5}  {'output shape':<12}  {'max abs diff':>12}  {'arena bytes':>11}")
    worst = 0.0
    for allocator in ("naive", "pool"):
        sess = InferenceSession(model, allocator=allocator)
        for batch in DEMO_BATCHES:
            x = demo_input(batch)
            (y,) = sess.run(None, {"x": x})
            if ort_sess is not None:
                (ref,) = ort_sess.run(None, {"x": x})
                ok = ref.shape == y.shape and np.allclose(y, ref, rtol=1e-4, atol=1e-5)
                diff = float(np.max(np.abs(y - ref))) if ref.shape == y.shape and y.size else 0.0
                worst = max(worst, diff if ok else float("inf"))
                diff_text = f"{diff:.3g}" + ("" if ok else " MISMATCH")
            else:
                diff_text = "n/a"
            arena = sess.last_plan.memory.arena_bytes if sess.last_plan and sess.last_plan.memory else 0
            click.echo(f"{allocator:<9}  {batch:>5}  {str(list(y.shape)):<12}  {diff_text:>12}  {arena:>11}")
    if worst == float("inf"):
        click.echo("FAILED: dynashape differs from ONNX Runtime")
        sys.exit(1)
    click.echo("all runs match ONNX Runtime" if ort_sess is not None else "done")


def _parse_pairs(items, what: str) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise click.BadParameter(f"{what} must be NAME=VALUE, got {item!r}")
        k, v = item.rsplit("=", 1)
        out[k] = v
    return out


def _feed_options(command):
    """MODEL plus the options that choose its feeds and allocator (``run`` and ``plan``)."""
    for option in reversed([
        click.argument("model", type=click.Path(exists=True, dir_okay=False)),
        click.option("--dim", "dims", multiple=True, help="bind a dim_param: NAME=VALUE (repeatable)"),
        click.option("--shape", "shapes", multiple=True, help="an input's whole shape: INPUT=1x3x320x320"),
        click.option("--input", "inputs", multiple=True, help="an input from a .npy file: NAME=FILE.npy"),
        click.option("--allocator", type=click.Choice(["pool", "naive"]), default="pool", show_default=True),
        click.option("--seed", type=int, default=0, show_default=True, help="seed of the random feeds"),
    ]):
        command = option(command)
    return command


def _feeds(sess, dims, shapes, inputs, seed: int) -> dict:
    """Feeds from ``--input`` files, random elsewhere, shaped by ``--dim`` / ``--shape``."""
    from .feeds import random_feeds

    dim_values = {k: int(v) for k, v in _parse_pairs(dims, "--dim").items()}
    shape_values = {k: [int(x) for x in v.lower().split("x")] if v else []
                    for k, v in _parse_pairs(shapes, "--shape").items()}
    given = {k: np.load(v) for k, v in _parse_pairs(inputs, "--input").items()}
    return random_feeds(sess, dim_values, shape_values, given, seed=seed)


@main.command()
@_feed_options
@click.option("--repeat", type=int, default=1, show_default=True, help="runs on the same feeds")
@click.option("--compare-ort", is_flag=True, help="also run ONNX Runtime and print the max abs diff")
def run(model: str, dims, shapes, inputs, allocator: str, repeat: int, compare_ort: bool, seed: int) -> None:
    """Run MODEL on given or random feeds and print each output's name, shape, dtype and checksum."""
    from .session import InferenceSession

    try:
        sess = InferenceSession(model, allocator=allocator)
        feeds = _feeds(sess, dims, shapes, inputs, seed)
        times = []
        for _ in range(max(1, repeat)):
            t0 = time.perf_counter()
            outs = sess.run(None, feeds)
            times.append((time.perf_counter() - t0) * 1e3)
    except (DynashapeError, ValueError) as exc:
        raise click.ClickException(str(exc))
    for name, arr in feeds.items():
        click.echo(f"input  {name}: {arr.dtype}{list(arr.shape)}")
    ref = None
    if compare_ort:
        ort_sess = _ort_session(open(model, "rb").read())
        if ort_sess is None:
            click.echo("onnxruntime is not installed: --compare-ort skipped")
        else:
            ref = ort_sess.run(None, feeds)
    for i, (o, arr) in enumerate(zip(sess.get_outputs(), outs)):
        checksum = float(np.sum(arr.astype(np.float64))) if arr.dtype.kind in "biuf" else float("nan")
        line = f"output {o.name}: {arr.dtype}{list(arr.shape)} checksum={checksum:.6g}"
        if ref is not None:
            r = ref[i]
            if r.shape != arr.shape:
                line += f" ORT shape {list(r.shape)} DIFFERS"
            else:
                diff = float(np.max(np.abs(arr.astype(np.float64) - r.astype(np.float64)))) if arr.size else 0.0
                line += f" max_abs_diff_vs_ort={diff:.3g}"
        click.echo(line)
    click.echo(f"median run time: {float(np.median(times)):.3f} ms over {len(times)} run(s)")


@main.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def inspect(model: str, fmt: str) -> None:
    """Every tensor of MODEL with dtype, symbolic shape, producing op and plugin."""
    import json

    from .inspect import inspect_session
    from .session import InferenceSession

    try:
        report = inspect_session(InferenceSession(model))
    except (DynashapeError, ValueError) as exc:
        raise click.ClickException(str(exc))
    if fmt == "json":
        click.echo(json.dumps(report, indent=1))
        return
    rows = [(t["name"], t["dtype"] or "?", "?" if t["shape"] is None else "[" + ", ".join(map(str, t["shape"])) + "]",
             t["producer"], t["plugin"], "data-dependent" if t["data_dependent"] else "") for t in report["tensors"]]
    widths = [min(60, max(len(r[i]) for r in rows + [("name", "dtype", "shape", "producer", "plugin", "")]))
              for i in range(6)]
    header = ("name", "dtype", "shape", "producer", "plugin", "")
    for r in [header] + rows:
        click.echo("  ".join(str(c)[:60].ljust(w) for c, w in zip(r, widths)).rstrip())
    s = report["summary"]
    click.echo(f"{s['fully_symbolic']} of {s['tensors']} tensors fully symbolic, {s['data_dependent']} data-dependent")


@main.command()
@_feed_options
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="draw the plan to this PNG (matplotlib)")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def plan(model: str, dims, shapes, inputs, allocator: str, plot_path, fmt: str, seed: int) -> None:
    """The memory plan of MODEL for the given input shapes: per-tensor bytes, lifetime and
    offset, and the arena / lower bound / naive totals (without running the model)."""
    import json

    from .memreport import format_table, plan_report, plot_plan, public
    from .session import InferenceSession

    try:
        sess = InferenceSession(model, allocator=allocator, validate_memory=False)
        report = plan_report(sess, sess.plan(_feeds(sess, dims, shapes, inputs, seed)))
    except (DynashapeError, ValueError) as exc:
        raise click.ClickException(str(exc))
    if plot_path:
        try:
            plot_plan(report, plot_path, title=f"{model}: {report['allocator']} plan")
        except ImportError:
            raise click.ClickException("--plot needs matplotlib (pip install 'dynashape[plot]')")
    if fmt == "json":
        click.echo(json.dumps(public(report), indent=1))
    else:
        click.echo(format_table(report))
        if plot_path:
            click.echo(f"plot:        {plot_path}")


if __name__ == "__main__":  # pragma: no cover
    main()


