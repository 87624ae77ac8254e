"""The ``dynashape`` command line: ``demo``, ``run``, ``inspect``, ``plan``, ``ops``, ``plugins``, ``bench``,
``profile``, ``batch``, ``infer-shapes``.

    dynashape demo
    dynashape run model.onnx --dim batch=4 --shape x=4x3x32x32 --compare-ort
    dynashape ops --domain com.microsoft
    dynashape bench model.onnx --dim batch=4 --compare-ort --repeat 50
    dynashape profile model.onnx --dim batch=4 -o trace.json
    dynashape batch model.onnx --input corpus.parquet --output out.parquet --ray local --concurrency 2
    dynashape infer-shapes model.onnx -o model.shapes.onnx

One module per subcommand family; each registers its commands on :data:`main` (``group``).
"""
from __future__ import annotations

from . import batch, bench, demo, describe, ops, plugins, profile, run, shapes  # noqa: F401  (registers the subcommands)
from .group import main

__all__ = ["main"]

if __name__ == "__main__":  # pragma: no cover
    main()
