"""``dynashape run``: run a model on given or random feeds, optionally against ONNX Runtime."""
from __future__ import annotations

import time

import click
import numpy as np

from ..errors import DynashapeError
from . import main
from .common import feed_options, feeds_from_options, ort_session


@main.command()
@feed_options
@click.option("--repeat", type=int, default=1, show_default=True, help="runs on the same feeds")
@click.option("--compare-ort", is_flag=True, help="also run ONNX Runtime and print the max abs diff")
def run(model: str, dims, shapes, inputs, allocator: str, repeat: int, compare_ort: bool, seed: int) -> None:
    """Run MODEL on given or random feeds and print each output's name, shape, dtype and checksum."""
    from ..session import InferenceSession

    try:
        sess = InferenceSession(model, allocator=allocator)
        feeds = feeds_from_options(sess, dims, shapes, inputs, seed)
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
        ort_sess = ort_session(open(model, "rb").read())
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
