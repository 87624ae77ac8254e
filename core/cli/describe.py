"""``dynashape inspect`` and ``dynashape plan``: what a model's tensors and memory plan look like."""
from __future__ import annotations

import click

from .group import main
from .common import cli_errors, feed_options, feeds_from_options


@main.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--rewrites", "show_rewrites", is_flag=True,
              help="list the graph rewrites that fired (rewrite, plugin, root node, nodes removed/added) and the "
                   "node and step counts before and after, instead of the tensors")
@click.option("--program", "show_program", is_flag=True,
              help="print the Python source of every function generated for the model (each kernel call names "
                   "its node), its If/Loop/Scan bodies' too, instead of the tensors")
def inspect(model: str, fmt: str, show_rewrites: bool, show_program: bool) -> None:
    """Every tensor of MODEL with dtype, symbolic shape, producing op and plugin.

    Graph rewrites (fusions) are on unless DYNASHAPE_OPTIMIZE=0 is set."""
    import json

    from ..errors import UnsupportedOperatorError
    from ..inspect import inspect_model, inspect_rewrites, inspect_session, program_sources
    from ..memreport import short_name
    from ..session import InferenceSession

    if show_program:
        with cli_errors(model):
            sources = program_sources(InferenceSession(model))
        if fmt == "json":
            click.echo(json.dumps([{"function": title, "source": source} for title, source in sources], indent=1))
            return
        for title, source in sources:
            click.echo(f"# --- {title}\n{source}")
        return
    with cli_errors(model):
        try:
            sess = InferenceSession(model)
        except UnsupportedOperatorError:
            if show_rewrites:
                raise
            sess = None     # (the model as declared, its missing ops flagged)
        report = inspect_model(model) if sess is None else \
            inspect_rewrites(sess) if show_rewrites else inspect_session(sess)
    if fmt == "json":
        click.echo(json.dumps(report, indent=1))
        return
    if show_rewrites:
        _echo_rewrites(report)
        return
    rows = [(short_name(t["name"], 96), t["dtype"] or "?",
             "?" if t["shape"] is None else "[" + ", ".join(map(str, t["shape"])) + "]",
             t["producer"], t["plugin"], "data-dependent" if t["data_dependent"] else "") for t in report["tensors"]]
    widths = [min(96, max(len(r[i]) for r in rows + [("name", "dtype", "shape", "producer", "plugin", "")]))
              for i in range(6)]
    header = ("name", "dtype", "shape", "producer", "plugin", "")
    for r in [header] + rows:
        click.echo("  ".join(short_name(str(c), 96).ljust(w) for c, w in zip(r, widths)).rstrip())
    s = report["summary"]
    if s.get("missing"):
        click.echo(f"{s['tensors']} tensors with their declared shapes: the model does not run here, no plugin "
                   f"registers {', '.join(s['missing'])} (dynashape ops lists what does)")
        return
    click.echo(f"{s['fully_symbolic']} of {s['tensors']} tensors fully symbolic, {s['data_dependent']} data-dependent")


def _echo_rewrites(report: dict) -> None:
    rows = [(f["rewrite"], f["plugin"], f["root"], str(f["removed"]), str(f["added"])) for f in report["fired"]]
    header = ("rewrite", "plugin", "root node", "removed", "added")
    widths = [min(60, max(len(r[i]) for r in rows + [header])) for i in range(5)]
    for r in [header] + rows:
        click.echo("  ".join(str(c)[:60].ljust(w) for c, w in zip(r, widths)).rstrip())
    counts = ", ".join(f"{name} x{n}" for name, n in report["counts"].items()) or "none"
    click.echo(f"fired: {counts}")
    click.echo(f"nodes: {report['nodes_before']} -> {report['nodes_after']}; "
               f"steps: {report['steps_before']} -> {report['steps_after']}")


def _plot_path(ctx, param, value):
    """--plot callback: the path, when its extension names a supported format."""
    from ..memreport import plot_format

    if value is not None:
        try:
            plot_format(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return value


def _draw(report: dict, plot_path: str, model: str, feeds: dict) -> None:
    """Write the plot; a missing matplotlib or an unwritable path is a one-line ClickException."""
    import os

    from ..memreport import plot_plan, plot_title

    inputs = {k: list(getattr(v, "shape", ())) for k, v in feeds.items()}
    try:
        plot_plan(report, plot_path, title=plot_title(report, os.path.basename(model), inputs))
    except ImportError:
        raise click.ClickException("--plot needs matplotlib (pip install 'dynashape[plot]')") from None
    except OSError as exc:
        raise click.ClickException(f"cannot write the plot to {plot_path}: {exc.strerror or exc}") from None


@main.command()
@feed_options
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), callback=_plot_path,
              help="draw the plan to this file; .png, .svg or .pdf (matplotlib)")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def plan(model: str, dims, shapes, inputs, allocator: str, plot_path, fmt: str, seed: int) -> None:
    """The memory plan of MODEL for the given input shapes: per-tensor bytes, lifetime and
    offset, and the arena / lower bound / naive totals (without running the model)."""
    import json

    from ..memreport import format_table, plan_report, public
    from ..session import InferenceSession

    with cli_errors(model):
        sess = InferenceSession(model, allocator=allocator, validate_memory=False)
        feeds = feeds_from_options(sess, dims, shapes, inputs, seed, placeholders=True)
        report = plan_report(sess, sess.plan(feeds))
    if plot_path:
        _draw(report, plot_path, model, feeds)
    if fmt == "json":
        click.echo(json.dumps(public(report), indent=1))
    else:
        click.echo(format_table(report))
        if plot_path:
            click.echo(f"plot:        {plot_path}")
