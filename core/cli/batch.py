"""``dynashape batch``: predict every row of a dataset file, in this process or on Ray.

    dynashape batch model.onnx --input corpus.parquet --output embeddings.parquet
    dynashape batch model.onnx --input corpus.parquet --output out.npz --ray local --concurrency 2
    dynashape batch vad.onnx --input clips/ --output probs.npz --buckets 512,1024,2048

Formats are :mod:`dynashape.batch.io`'s. The progress bar goes to stderr (only on a terminal);
the summary (rows, session runs, padding overhead, plan-cache hits per worker, rows per
second) to stdout.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from .group import main
from .common import cli_errors, parse_pairs

BUCKETS_HELP = ("length buckets: pow2 (powers of two), a list 16,32,64,128 (a longer row is an error), exact "
                "(no padding, rows grouped by exact length) or none (each run padded to its longest row)")


def _pad_values(items, input_names: list[str]):
    """``--pad VALUE`` (every non-mask input) and ``--pad NAME=VALUE`` as Predictor's pad_values."""
    default, named = 0.0, {}
    bare = [x for x in items if "=" not in x]
    for text in bare[-1:]:
        default = _number(text, text)
    for name, text in parse_pairs([x for x in items if "=" in x], "--pad").items():
        if name not in input_names:
            raise click.BadParameter(f"{name!r} is not an input of the model: its inputs are {input_names}",
                                     param_hint="'--pad'")
        named[name] = _number(text, f"{name}={text}")
    if not named:
        return default
    return {n: named.get(n, 0 if "mask" in n.lower() else default) for n in input_names}


def _number(text: str, item: str):
    try:
        value = float(text)
    except ValueError:
        raise click.BadParameter(f"{item!r}: {text!r} is not a number", param_hint="'--pad'") from None
    return int(value) if value.is_integer() else value


@main.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--input", "data", required=True, type=click.Path(exists=True),
              help="the rows: a .parquet file (one column per model input; a list column is a variable-length "
                   "input), a .npz file (one array per input, axis 0 the rows), or a folder of .npy files (one row "
                   "each; or one sub-folder per input)")
@click.option("--output", "out", required=True, type=click.Path(dir_okay=False),
              help="where the outputs go: .parquet or .npz, one column / array per output, one row per input row "
                   "in input order, each cut to its true length")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS|local",
              help="run on Ray Data: 'local' starts a local Ray instance, anything else is ray.init's address "
                   "('auto', 'ray://head:10001'); default: this process, no Ray")
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True,
              help="Ray actors (one session each); needs --ray")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True,
              help="the most rows in one session run")
@click.option("--rows-per-call", type=click.IntRange(min=1), default=None,
              help="rows handed to a worker at once (Ray's map_batches batch_size) [default: 8 x batch size]")
@click.option("--buckets", default="pow2", show_default=True, help=BUCKETS_HELP)
@click.option("--no-pad-batch", is_flag=True, help="run each bucket's leftover rows at their own batch size instead "
                                                   "of padding the batch to a power of two")
@click.option("--pad", "pads", multiple=True, metavar="[NAME=]VALUE",
              help="what variable-length inputs are padded with (default 0; *mask* inputs always 0 unless named); "
                   "repeatable")
@click.option("--outputs", "output_names", default=None, metavar="NAME,...", help="the outputs to write (default all)")
@click.option("--allocator", type=click.Choice(["pool", "naive"]), default="pool", show_default=True)
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="intra-op (BLAS and kernel) threads of each worker's session: with several workers on one "
                   "machine keep threads x workers within its cores")
def batch(model: str, data: str, out: str, ray_address: Optional[str], concurrency: int, batch_size: int,
          rows_per_call: Optional[int], buckets: str, no_pad_batch: bool, pads, output_names: Optional[str],
          allocator: str, threads: int) -> None:
    """Predict every row of DATA (--input) with MODEL and write the outputs to OUT (--output).

    Rows whose inputs vary in length are padded to the smallest length bucket that fits, run in
    batches per bucket (so each worker re-uses a few cached plans) and cut back to their true
    length wherever an output's symbolic shape says its axis follows that length. Missing
    *mask* inputs are ones over each row, missing *type_ids* zeros. Columns of the input that
    are not model inputs (an ``id``) are written to OUT too, before the outputs.

    Errors (a model that cannot be loaded, batched or run, rows that do not fit, an unreadable
    file) are one 'Error: ...' line and exit code 1; bad options exit with code 2.
    """
    from ..batch import io
    from ..batch.buckets import parse_buckets
    from ..batch.stats import summary_lines
    from ..model import load_model
    from ..options import SessionOptions

    if Path(out).suffix not in io.FORMATS:
        raise click.BadParameter(f"'{out}': the output must end in .parquet or .npz", param_hint="'--output'")
    if concurrency > 1 and ray_address is None:
        raise click.UsageError("--concurrency needs --ray (local, or a cluster address)")
    with cli_errors(model):
        try:
            bucket_spec = parse_buckets(buckets)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--buckets'") from None
        inputs = [vi.name for vi in load_model(model).graph.inputs]
        sess_options = SessionOptions()
        sess_options.intra_op_num_threads = threads
        options = dict(buckets=bucket_spec, pad_values=_pad_values(pads, inputs), batch_size=batch_size,
                       pad_batch=not no_pad_batch, allocator=allocator, sess_options=sess_options)
        names = [n.strip() for n in output_names.split(",") if n.strip()] if output_names else None
        if ray_address is None:
            from ..batch.local_runner import run_local
            from ..batch.predictor import Predictor

            predictor = Predictor(model, names, keep_columns=False, **options)
            columns = io.read_columns(data, inputs)
            result = run_local(predictor, {k: v for k, v in columns.items() if k in inputs},
                               rows_per_call=rows_per_call, progress=True)
        else:
            from ..batch.ray_runner import quiet_ray_data_logs, ray_cluster, run_ray

            quiet_ray_data_logs()
            # read here: the outputs come back here anyway, and Ray's own read tasks would need CPUs beside the actors
            columns = io.read_columns(data, inputs)
            with ray_cluster(ray_address, log_to_driver=False):   # "local": ray.init(address="local")
                result = run_ray(model, {k: v for k, v in columns.items() if k in inputs}, names,
                                 concurrency=concurrency, rows_per_call=rows_per_call, progress=True, **options)
        kept = {k: v for k, v in columns.items() if k not in inputs and k not in result.outputs}
        io.write_columns(out, {**kept, **result.outputs})
    for line in summary_lines(result, bucket_spec):
        click.echo(line)
    if ray_address is not None:
        _idle_workers_note(result, concurrency, rows_per_call or 8 * batch_size)
    click.echo(f"wrote {out}" + (f" (with the input's {', '.join(kept)} column(s))" if kept else ""))


def _idle_workers_note(result, concurrency: int, rows_per_call: int) -> None:
    """Say why fewer workers than --concurrency got rows: Ray hands a worker whole calls."""
    busy = sum(1 for w in result.workers if w.rows)
    if busy >= concurrency:
        return
    calls = -(-result.rows // rows_per_call)
    click.echo(f"note: {busy} of {concurrency} workers got rows: {result.rows} rows make {calls} call(s) of up to "
               f"{rows_per_call} rows (--rows-per-call) and a call goes to one worker; a smaller --rows-per-call "
               "spreads them")
