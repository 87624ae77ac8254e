"""``dynashape ops``: every registered operator, its schema versions and its plugin.

    dynashape ops                                   # table of builtin and installed plugins' ops
    dynashape ops --domain com.microsoft --format json
    dynashape ops --format markdown --plugin dynashape.ops_builtin > docs/OPERATORS.md
"""
from __future__ import annotations

import json

import click

from .group import main


def _check_choice(value, known: list[str], option: str) -> None:
    """Raise click.BadParameter naming ``option`` and the known values when ``value`` is not one."""
    if value not in known:
        raise click.BadParameter(f"unknown {option.lstrip('-')} {value!r}; registered: {', '.join(known)}",
                                 param_hint=option)


def _table(entries: list[dict]) -> list[str]:
    header = ("domain", "op_type", "versions", "plugin", "kernels (first that takes the dtype wins)")
    rows = [(e["domain"], e["op_type"], ", ".join(map(str, e["since_versions"])), e["plugin"],
             " > ".join(e["winners"]) or "none") for e in entries]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header] + rows]


def _summary(entries: list[dict]) -> str:
    plugins: dict[str, int] = {}
    for e in entries:
        for p in e["plugins"]:
            plugins[p] = plugins.get(p, 0) + 1
    n_versions = sum(len(e["since_versions"]) for e in entries)
    domains = len({e["domain"] for e in entries})
    return (f"{len(entries)} operators ({n_versions} schema versions) in {domains} domain(s) from "
            + ", ".join(f"{p} ({n})" for p, n in sorted(plugins.items())))


@main.command()
@click.option("--domain", help="only this domain ('ai.onnx' or '' for the default one, 'com.microsoft', ...)")
@click.option("--plugin", "plugins", multiple=True,
              help="only the ops these plugins registered (repeatable; the builtin one is dynashape.ops_builtin)")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"]), default="table",
              show_default=True, help="markdown: the docs/OPERATORS.md reference")
def ops(domain, plugins, fmt: str) -> None:
    """Every registered operator (builtin and installed plugins): domain, type, schema
    since_versions, the plugin that registered it, and whose kernels run it in priority
    order (e.g. the compiled ``fast`` plugin's for float32, else the builtin numpy ones).
    Plugins that failed to load are named on stderr."""
    from ..errors import DynashapeError
    from ..oplist import domain_name, op_entries, plugins_of, render_markdown
    from ..registry import get_registry, plugin_load_errors

    try:
        registry = get_registry()
    except DynashapeError as exc:
        raise click.ClickException(str(exc)) from None
    if domain is not None:
        _check_choice(domain_name(domain), sorted({domain_name(d) for d, _ in registry.op_types()}), "--domain")
    for p in plugins:
        _check_choice(p, plugins_of(registry), "--plugin")
    entries = op_entries(registry, domain, plugins or None)
    for name, error in sorted(plugin_load_errors().items()):
        click.echo(f"warning: plugin '{name}' failed to load and is not listed: {error}", err=True)
    if fmt == "json":
        click.echo(json.dumps(entries, indent=1))
    elif fmt == "markdown":
        click.echo(render_markdown(entries, plugins or plugins_of(registry)), nl=False)
    else:
        for line in _table(entries):
            click.echo(line)
        click.echo("")
        click.echo(_summary(entries))
