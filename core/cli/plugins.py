"""``dynashape plugins``: every loaded plugin, what it provides, whose kernel wins.

    dynashape plugins                  # one block per plugin; failed ones last
    dynashape plugins --verbose        # every op and kernel of the builtin plugin too
    dynashape plugins --format json    # everything, as data (dynashape.plugininfo)
    dynashape plugins --index mypkg.ops_a mypkg.ops_b > mypkg/index.py   # a lazy plugin's index
"""
from __future__ import annotations

import json

import click

from .group import main

#: a plugin with more kernels than this is summarised (counts and the overridden ones) unless --verbose
_LIST_UP_TO = 40


def _kernel_text(k: dict) -> str:
    dtypes = "any dtype" if k["dtypes"] is None else ", ".join(k["dtypes"])
    opsets = f"{k['since_version']}+" if k["end_version"] is None else f"{k['since_version']}-{k['end_version']}"
    ahead = ", ".join(f"{a['plugin']} ({'any dtype' if a['dtypes'] is None else ', '.join(a['dtypes'])})"
                      for a in k["ahead"])
    verdict = {"yes": "wins", "partly": f"wins, except where {ahead} first",
               "no": f"never runs: {ahead} first"}[k["wins"]]
    if k.get("selective"):
        verdict += " (on the nodes it accepts)"
    return f"{k['op']} (opsets {opsets}; {dtypes}; priority {k['priority']}) {verdict}"


def _origin_text(p: dict) -> str:
    dist = f"{p['distribution']} {p['version'] or ''}".strip() if p["distribution"] else "no distribution"
    value = f", {p['value']}" if p["value"] else ""
    return f"{p['source']}: {dist}{value}"


def _print_index(modules: tuple) -> None:
    from ..libindex import index_source
    if not modules:
        raise click.UsageError("--index needs the modules to index (dotted names: mypkg.ops_a mypkg.ops_b)")
    try:
        click.echo(index_source(list(modules), "dynashape plugins --index " + " ".join(modules)), nl=False)
    except (ImportError, AttributeError) as exc:
        raise click.ClickException(f"cannot index {' '.join(modules)}: {type(exc).__name__}: {exc}") from None


def _plugin_lines(p: dict, verbose: bool) -> list[str]:
    wins = sum(k["wins"] == "yes" for k in p["kernels"])
    partly = sum(k["wins"] == "partly" for k in p["kernels"])
    lines = [f"{p['name']}  ({_origin_text(p)})",
             f"  {len(p['ops'])} ops ({sum(len(o['since_versions']) for o in p['ops'])} schema versions), "
             f"{len(p['kernels'])} kernels ({wins} win, {partly} partly), {len(p['rewrites'])} rewrites"]
    listed = verbose or len(p["kernels"]) <= _LIST_UP_TO
    if listed and p["ops"]:
        lines.append("  ops: " + ", ".join(f"{o['op']} v{'/'.join(map(str, o['since_versions']))}"
                                           for o in p["ops"]))
    others = lambda k: any(a["plugin"] != p["name"] for a in k["ahead"])  # noqa: E731
    shown = p["kernels"] if listed else [k for k in p["kernels"] if k["wins"] != "yes" and others(k)]
    if shown:
        lines.append("  kernels:" if listed else "  kernels another plugin's are tried before:")
        lines += [f"    {_kernel_text(k)}" for k in shown]
    if p["rewrites"]:
        lines.append("  rewrites: " + ", ".join(p["rewrites"]))
    return lines


@main.command()
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--verbose", "-v", is_flag=True, help="list every op and kernel of large plugins (the builtin one) too")
@click.option("--index", "index_of", is_flag=True,
              help="print the index of the MODULES given (the ops of each one's OpLibrary 'lib'): the "
                   "Python module a lazy plugin's entry point reads (dynashape.libindex)")
@click.argument("modules", nargs=-1)
def plugins(fmt: str, verbose: bool, index_of: bool, modules: tuple) -> None:
    """Every loaded plugin (the builtin ops, entry points of the group ``dynashape``, plugins
    registered at run time): its distribution and version, the operator schemas, kernels
    and rewrites it provides, and for each kernel whether it wins (the first the registry
    tries for its opsets and dtypes) or whose kernel is tried before it; then the plugins
    that failed to load, with their error. With ``--index MODULE...``: the index of those
    modules' op libraries, for a plugin whose modules are imported on first use."""
    from ..errors import DynashapeError
    from ..plugininfo import failed_plugins, plugin_entries

    if index_of or modules:
        _print_index(modules)
        return

    try:
        entries = plugin_entries()
    except DynashapeError as exc:
        raise click.ClickException(str(exc)) from None
    failed = failed_plugins()
    if fmt == "json":
        click.echo(json.dumps({"plugins": entries, "failed": failed}, indent=1))
        return
    for p in entries:
        for line in _plugin_lines(p, verbose):
            click.echo(line)
        click.echo("")
    if failed:
        click.echo("failed to load (skipped):")
        for f in failed:
            dist = f" [{f['distribution']} {f['version'] or ''}]".rstrip() if f["distribution"] else ""
            click.echo(f"  {f['name']} ({f['value']}){dist}: {f['error']}")
    else:
        click.echo("no plugin failed to load")
