"""``dynashape infer-shapes``: a model with every tensor's symbolic shape written into it."""
from __future__ import annotations

import click

from .group import main
from .common import cli_errors


@main.command("infer-shapes")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, writable=True),
              help="where to write the model with the shapes")
def infer_shapes(model: str, output: str) -> None:
    """Write MODEL with every tensor's shape in value_info: dim_params named after expressions of
    the input dims (``sequence + past_sequence``), ``unk__N`` only where a dim depends on data
    (dynashape.shape_export; what onnxruntime's symbolic_shape_infer.py does)."""
    from ..shape_export import infer_shapes as write_shapes

    with cli_errors(model):
        _, report = write_shapes(model, output)
    unknown = f", {len(report.unknown)} without a shape ({', '.join(report.unknown[:3])}" \
              f"{', ...' if len(report.unknown) > 3 else ''})" if report.unknown else ""
    containers = f", {len(report.containers)} sequences/maps (no tensor shape)" if report.containers else ""
    click.echo(f"wrote {output}: {report.tensors} tensors with a shape, {report.symbolic} symbolic dims, "
               f"{report.data_dependent} data-dependent{unknown}{containers}")
