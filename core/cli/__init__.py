"""The ``dynashape`` command line: ``demo``, ``run``, ``inspect``, ``plan``, ``ops``, ``plugins``, ``bench``,
``profile``, ``batch``, ``infer-shapes``.

    dynashape demo
    dynashape run model.onnx --dim batch=4 --shape x=4x3x32x32 --compare-ort
    dynashape ops --domain com.microsoft
    dynashape bench model.onnx --dim batch=4 --compare-ort --repeat 50
    dynashape profile model.onnx --dim batch=4 -o trace.json
    dynashape batch model.onnx --input corpus.parquet --output out.parquet --ray local --concurrency 2
    dynashape infer-shapes model.onnx -o model.shapes.onnx

One module per subcommand family; each registers its commands on :data:`main`.
"""
from __future__ import annotations

import click

__all__ = ["main"]


@click.group()
@click.version_option(package_name="dynashape")
def main() -> None:
    """dynashape: an ONNX runtime for dynamic shapes."""


from . import batch, bench, demo, describe, ops, plugins, profile, run, shapes  # noqa: E402,F401  (registers the subcommands)

if __name__ == "__main__":  # pragma: no cover
    main()
