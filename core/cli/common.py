"""What the subcommands share: the feed options (``--dim``, ``--shape``, ``--input``,
``--allocator``, ``--seed``), turning them into feeds, and an ONNX Runtime session to compare with."""
from __future__ import annotations

import click
import numpy as np

__all__ = ["feed_options", "feeds_from_options", "ort_session", "parse_pairs"]


def ort_session(model_bytes: bytes):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def parse_pairs(items, what: str) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise click.BadParameter(f"{what} must be NAME=VALUE, got {item!r}")
        k, v = item.rsplit("=", 1)
        out[k] = v
    return out


def feed_options(command):
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


def feeds_from_options(sess, dims, shapes, inputs, seed: int) -> dict:
    """Feeds from ``--input`` files, random elsewhere, shaped by ``--dim`` / ``--shape``."""
    from ..feeds import random_feeds

    dim_values = {k: int(v) for k, v in parse_pairs(dims, "--dim").items()}
    shape_values = {k: [int(x) for x in v.lower().split("x")] if v else []
                    for k, v in parse_pairs(shapes, "--shape").items()}
    given = {k: np.load(v) for k, v in parse_pairs(inputs, "--input").items()}
    return random_feeds(sess, dim_values, shape_values, given, seed=seed)
