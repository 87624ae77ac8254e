"""``dynashape demo``: the seed's runtime_shape_demo against ONNX Runtime."""
from __future__ import annotations

import sys

import click
import numpy as np

from .group import main
from .common import ort_session


@main.command()
def demo() -> None:
    """Run the seed's runtime_shape_demo for batches 1, 2, 8, 3, 1 on one session per allocator."""
    from ..demo import DEMO_BATCHES, build_demo_model, demo_input
    from ..session import InferenceSession

    model = build_demo_model()
    ort_sess = ort_session(model.SerializeToString())
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
    click.echo("arena bytes: the intermediate tensors of the plan (0 here: the Reshape is a view of the input "
               "and the output is a new array the caller owns)")
    click.echo("all runs match ONNX Runtime" if ort_sess is not None else "done")
