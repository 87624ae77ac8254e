"""The ``dynashape`` command group, which each subcommand module registers its commands on."""
from __future__ import annotations

import click

__all__ = ["main"]


@click.group()
@click.version_option(package_name="dynashape")
def main() -> None:
    """dynashape: an ONNX runtime for dynamic shapes."""
