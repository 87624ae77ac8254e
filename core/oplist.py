"""The registered operators as plain data (``dynashape ops``) and as docs/OPERATORS.md.

:func:`op_entries` lists every operator of a :class:`~dynashape.registry.Registry`: its
domain (``"ai.onnx"`` for the default domain ``""``), type, schema versions
(``since_version`` of each OpDef), the plugin(s) that registered them, and its kernels'
opset ranges. :func:`render_markdown` turns such a list into the operator reference.
"""
from __future__ import annotations

from typing import Iterable, Optional

__all__ = ["BUILTIN_PLUGIN", "DEFAULT_DOMAIN", "MARKDOWN_COMMAND", "domain_name", "op_entries",
           "plugins_of", "render_markdown"]

#: The name the builtin operators are registered under (see :mod:`dynashape.registry`).
BUILTIN_PLUGIN = "dynashape.ops_builtin"
#: How the default ONNX domain (``""`` in a model) is spelled in listings.
DEFAULT_DOMAIN = "ai.onnx"
#: The command that writes docs/OPERATORS.md (only the builtin plugin: deterministic whatever is installed).
MARKDOWN_COMMAND = f"dynashape ops --format markdown --plugin {BUILTIN_PLUGIN} > docs/OPERATORS.md"


def domain_name(domain: str) -> str:
    """The listing spelling of a registry domain: ``""`` and ``"ai.onnx"`` are ``"ai.onnx"``."""
    return domain or DEFAULT_DOMAIN


def _kernel_entry(k) -> dict:
    return {"since_version": k.since_version, "end_version": k.end_version, "device": k.device,
            "dtypes": None if k.dtypes is None else sorted(k.dtypes), "priority": k.priority, "plugin": k.plugin}


def _kernel_order(k) -> tuple:
    return k.since_version, -k.priority, k.plugin


def _distinct(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def op_entries(registry, domain: Optional[str] = None, plugins: Optional[Iterable[str]] = None) -> list[dict]:
    """Every operator of ``registry``, sorted by domain then type, as dicts with keys
    ``domain`` (``"ai.onnx"`` for the default domain), ``op_type``, ``since_versions``
    (ascending ints), ``plugin`` (the registering plugin; several are joined by ``", "``),
    ``plugins`` (list), ``kernels`` (list of ``since_version``, ``end_version`` (None:
    open), ``device``, ``dtypes`` (None: any), ``priority``, ``plugin``) and ``winners``:
    which plugin's kernel a node gets, highest priority first (``"fast (float32, float64)"``
    then ``"dynashape.ops_builtin"``: the first whose dtypes take the node's input wins).

    ``domain`` keeps one domain (``""`` or ``"ai.onnx"`` for the default one); ``plugins``
    keeps only the versions and kernels those plugins registered (an operator with none
    left is dropped; a plugin with kernels only keeps the schemas of the ops it implements).
    Neither is checked here: an unknown name just matches nothing.
    """
    want_domain = None if domain is None else domain_name(domain)
    keep = None if plugins is None else set(plugins)
    out = []
    for dom, op_type in sorted(registry.op_types(), key=lambda t: (domain_name(t[0]), t[1])):
        if want_domain is not None and domain_name(dom) != want_domain:
            continue
        kernels = [k for k in registry.kernels(dom, op_type) if keep is None or k.plugin in keep]
        schemas = [o for o in registry.schemas(dom, op_type) if keep is None or o.plugin in keep or kernels]
        if not schemas:
            continue
        names = _distinct(o.plugin for o in schemas)
        out.append({"domain": domain_name(dom), "op_type": op_type,
                    "since_versions": [o.since_version for o in schemas],
                    "plugin": ", ".join(names), "plugins": names,
                    "kernels": [_kernel_entry(k) for k in sorted(kernels, key=_kernel_order)],
                    "winners": _winners(registry.kernels(dom, op_type))})
    return out


def _winners(kernels) -> list[str]:
    """The kernels' plugins in the order the registry tries them (highest priority first)."""
    out = []
    for k in sorted(kernels, key=lambda k: -k.priority):
        out.append(k.plugin if k.dtypes is None else f"{k.plugin} ({', '.join(sorted(k.dtypes))})")
    return _distinct(out)


def plugins_of(registry) -> list[str]:
    """Names of the plugins that registered at least one operator schema or kernel, sorted."""
    names = {o.plugin for dom, t in registry.op_types() for o in registry.schemas(dom, t)}
    names |= {k.plugin for dom, t in registry.op_types() for k in registry.kernels(dom, t)}
    return sorted(names)


def _kernel_ranges(entry: dict) -> str:
    ranges = _distinct(f"{k['since_version']}+" if k["end_version"] is None
                       else f"{k['since_version']}-{k['end_version']}" for k in entry["kernels"])
    return ", ".join(ranges) or "none"


def render_markdown(entries: list[dict], plugins: Iterable[str]) -> str:
    """An operator reference for ``entries`` (from :func:`op_entries`) of the named ``plugins``:
    a "generated" header naming the command that makes it (for dynashape's own
    docs/OPERATORS.md, :data:`MARKDOWN_COMMAND`), then one table per domain (operator, schema
    since_versions, kernel opset ranges, plugin). Ends with a newline."""
    plugins = list(plugins)
    names = ", ".join(f"`{p}`" for p in plugins)
    if plugins == [BUILTIN_PLUGIN]:
        head = [f"Generated by `{MARKDOWN_COMMAND}`: do not edit by hand",
                "(tests/core/test_cli_tools.py checks that it is current).",
                f"It lists the operators registered by the plugin(s) {names} only; third-party plugins",
                "add their own (`dynashape ops` lists every installed one)."]
    else:
        command = "dynashape ops --format markdown" + "".join(f" --plugin {p}" for p in plugins)
        head = [f"Generated by `{command}`.", f"The operators registered by the plugin(s) {names}."]
    lines = ["# Operators", "", *head, "",
             "*Versions* are the `since_version`s of the operator's schemas: a model at opset N uses the",
             "largest one <= N. *Kernel opsets* are the opset ranges its CPU kernels cover (`13+`: 13 and later).", ""]
    domains = _distinct(e["domain"] for e in entries)
    lines.append(f"{len(entries)} operators in {len(domains)} domain(s): "
                 + ", ".join(f"{d} ({sum(e['domain'] == d for e in entries)})" for d in domains) + ".")
    for dom in domains:
        lines += ["", f"## {dom}", "", "| Operator | Versions | Kernel opsets | Plugin |", "|---|---|---|---|"]
        for e in entries:
            if e["domain"] == dom:
                versions = ", ".join(map(str, e["since_versions"]))
                lines.append(f"| {e['op_type']} | {versions} | {_kernel_ranges(e)} | {e['plugin']} |")
    return "\n".join(lines) + "\n"
