"""``dynashape run``: run a model on given or random feeds, optionally against ONNX Runtime."""
from __future__ import annotations

import time

import click
import numpy as np

from .group import main
from .common import cli_errors, feed_options, feeds_from_options, one_line, ort_session, settled, warmup_options


def _timed_runs(sess, feeds: dict, warmup: int, repeat: int) -> tuple[list, float, list[float]]:
    """``warmup`` untimed runs, then ``repeat`` timed ones: the outputs of the last run, the
    first run's time (cold: it plans the shape and makes the kernels) and the timed runs'
    times, ms (with no warm-up the first run is the first of them)."""
    times = []
    for i in range(warmup + repeat):
        with settled(i, warmup):
            t0 = time.perf_counter()
            outs = sess.run(None, feeds)
            times.append((time.perf_counter() - t0) * 1e3)
    return outs, times[0], times[warmup:]


def _timing_lines(first_ms: float, times: list[float], warmup: int) -> list[str]:
    which = f" after {warmup} warm-up run(s)" if warmup else ", the first (cold) run included"
    return [f"first run: {first_ms:.3f} ms (cold: plans the shape, makes the kernels)",
            f"median run time: {float(np.median(times)):.3f} ms over {len(times)} run(s){which}"]


def _ort_outputs(model: str, feeds: dict):
    """``(outputs, None)`` of ONNX Runtime on ``feeds``, ``(None, None)`` when it is not
    installed, ``(None, message)`` when it cannot load or run the model."""
    try:
        ort_sess = ort_session(model)
        return (None, None) if ort_sess is None else (ort_sess.run(None, feeds), None)
    except Exception as exc:  # noqa: BLE001 - any ONNX Runtime failure becomes one line
        return None, one_line(exc)


def _output_line(name: str, arr: np.ndarray, ref) -> str:
    """``output NAME: dtype[shape] checksum=...`` and, with ``ref``, the max abs diff to it."""
    numeric = arr.dtype.kind in "biuf"
    checksum = float(np.sum(arr.astype(np.float64))) if numeric else float("nan")
    line = f"output {name}: {arr.dtype}{list(arr.shape)} checksum={checksum:.6g}"
    if ref is None:
        return line
    if ref.shape != arr.shape:
        return line + f" ORT shape {list(ref.shape)} DIFFERS"
    if not numeric:
        return line + (" equal to ORT" if np.array_equal(arr, ref) else " DIFFERS from ORT")
    diff = float(np.max(np.abs(arr.astype(np.float64) - ref.astype(np.float64)))) if arr.size else 0.0
    return line + f" max_abs_diff_vs_ort={diff:.3g}"


def _save(path: str, feeds: dict, names: list, outs: list) -> None:
    """The outputs by name and the feeds as ``input.NAME`` in one .npz (a sequence's elements
    as ``NAME.K``; a map or list of maps as an object array)."""
    arrays = {f"input.{k}": v for k, v in feeds.items()}
    for name, value in zip(names, outs):
        if isinstance(value, list) and all(isinstance(x, np.ndarray) for x in value):
            arrays.update({f"{name}.{k}": x for k, x in enumerate(value)})
        elif isinstance(value, np.ndarray):
            arrays[name] = value
        elif value is not None:
            arrays[name] = np.array(value, dtype=object)
    try:
        with open(path, "wb") as f:
            np.savez(f, **arrays)
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from exc


@main.command()
@feed_options
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="timed runs on the same feeds, after the warm-up")
@warmup_options(2)
@click.option("-o", "--save", "save", type=click.Path(dir_okay=False, writable=True), default=None,
              help="write the outputs (and the feeds, as input.NAME) to this .npz file")
@click.option("--compare-ort", is_flag=True,
              help="also run ONNX Runtime on the same feeds and print each output's max abs diff; if ONNX "
                   "Runtime cannot load or run the model, dynashape's outputs are printed and the command "
                   "fails with 'ONNX Runtime failed: ...' (exit code 1)")
def run(model: str, dims, shapes, inputs, allocator: str, repeat: int, warmup: int, save, compare_ort: bool,
        seed: int) -> None:
    """Run MODEL on given or random feeds and print each input's dtype and shape, then each
    output's name, dtype, shape and checksum (and, with --compare-ort, its max abs diff to ONNX
    Runtime), then the first run's time and the median of the REPEAT runs after WARMUP untimed
    ones (the steady time; --no-warmup: the first, cold run counts in the median). With
    --save FILE.npz the outputs are written there by name, the feeds as ``input.NAME``
    (numpy.load reads them; a sequence output as ``NAME.0``, ``NAME.1``, ...).

    Errors (a model that cannot be loaded or run, a feed that does not fit) are one
    'Error: ...' line and exit code 1; bad options exit with code 2.
    """
    from ..session import InferenceSession

    with cli_errors(model) as errors:
        sess = InferenceSession(model, allocator=allocator)
        feeds = feeds_from_options(sess, dims, shapes, inputs, seed, errors=errors)
        outs, first_ms, times = _timed_runs(sess, feeds, warmup, repeat)
    for name, arr in feeds.items():
        click.echo(f"input  {name}: {arr.dtype}{list(arr.shape)}")
    ref, ort_error = _ort_outputs(model, feeds) if compare_ort else (None, None)
    if compare_ort and ref is None and ort_error is None:
        click.echo("onnxruntime is not installed: --compare-ort skipped")
    for i, (o, arr) in enumerate(zip(sess.get_outputs(), outs)):
        click.echo(_output_line(o.name, arr, None if ref is None else ref[i]))
    for line in _timing_lines(first_ms, times, warmup):
        click.echo(line)
    if save is not None:
        _save(save, feeds, [o.name for o in sess.get_outputs()], outs)
        click.echo(f"saved {len(outs)} output(s) and {len(feeds)} input(s) to {save}")
    if ort_error is not None:
        raise click.ClickException(f"ONNX Runtime failed: {ort_error}")
