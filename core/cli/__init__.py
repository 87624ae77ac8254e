"""The ``dynashape`` command line: ``demo``, ``run``, ``inspect``, ``plan``.

    dynashape demo
    dynashape run model.onnx --dim batch=4 --shape x=4x3x32x32 --compare-ort

One module per subcommand family; each registers its commands on :data:`main`.
"""
from __future__ import annotations

import click

__all__ = ["main"]


@click.group()
@click.version_option(package_name="dynashape")
def main() -> None:
    """dynashape: an ONNX runtime for dynamic shapes."""


from . import demo, describe, run  # noqa: E402,F401  (registers the subcommands)

if __name__ == "__main__":  # pragma: no cover
    main()
