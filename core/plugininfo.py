"""The loaded plugins as plain data (``dynashape plugins``).

:func:`plugin_entries` lists every plugin the process-wide plugin manager holds (the
builtin ops, entry-point plugins, plugins registered at run time): its name, where it came
from (its distribution and version for an entry point), and the operator schemas, kernels
and rewrites it provides, each kernel marked with whether it wins (is the first the
registry tries for its dtypes) or which plugin's kernel is tried before it.
:func:`failed_plugins` lists the entry points that failed to load, with their error.
"""
from __future__ import annotations

from importlib import metadata
from typing import Optional

from .oplist import BUILTIN_PLUGIN, domain_name

__all__ = ["plugin_entries", "failed_plugins"]


def _origins() -> dict[str, dict]:
    """{entry-point name: {"source", "distribution", "version", "value"}} of the group."""
    from .registry import ENTRY_POINT_GROUP
    out = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        out[ep.name] = {"source": "entry point", "value": ep.value,
                        "distribution": getattr(dist, "name", None), "version": getattr(dist, "version", None)}
    return out


def _builtin_origin() -> dict:
    try:
        version: Optional[str] = metadata.version("dynashape")
    except metadata.PackageNotFoundError:   # a checkout on sys.path, not installed
        version = None
    return {"source": "builtin", "value": "dynashape.ops_builtin", "distribution": "dynashape", "version": version}


def _kernel_record(k, ahead: list) -> dict:
    """One kernel: where it applies and which of its dtypes go to kernels tried before it
    (``ahead``: its op's kernels of a higher priority whose opsets and dtypes overlap)."""
    taken: Optional[set] = set()   # the dtypes the kernels ahead take over its whole range; None: all
    for a in ahead:
        if _covers(a, k) and a.accepts is None:   # one that declines nodes (accepts) takes only some
            taken = None if a.dtypes is None or taken is None else taken | set(a.dtypes)
    if taken is None or (k.dtypes is not None and set(k.dtypes) <= taken):
        wins = "no"
    elif ahead:
        wins = "partly"
    else:
        wins = "yes"
    return {"op": f"{domain_name(k.domain)}::{k.op_type}", "since_version": k.since_version,
            "end_version": k.end_version, "dtypes": None if k.dtypes is None else sorted(k.dtypes),
            "priority": k.priority, "wins": wins, "selective": k.accepts is not None,
            "ahead": [{"plugin": a.plugin, "dtypes": None if a.dtypes is None else sorted(a.dtypes)} for a in ahead]}


def _end(k) -> int:
    return k.end_version if k.end_version is not None else 1 << 30


def _covers(a, k) -> bool:
    """a's opset range holds all of k's."""
    return a.since_version <= k.since_version and _end(a) >= _end(k)


def plugin_entries(registry=None, manager=None) -> list[dict]:
    """Every registered plugin, the builtin one first, then by name, as dicts with keys
    ``name``, ``source`` ("builtin", "entry point" or "registered at run time"),
    ``distribution`` and ``version`` (None where unknown), ``value`` (the entry point's
    target), ``ops`` (``"domain::op_type"`` with its ``since_versions``), ``kernels`` (see
    below) and ``rewrites`` (names, in the order they run). A kernel: ``op``,
    ``since_version``, ``end_version`` (None: open), ``dtypes`` (None: any), ``priority``,
    ``wins`` ("yes": no kernel is tried before it; "partly": kernels of a higher priority
    take some of its dtypes, opsets or nodes; "no": they take all of them), ``selective``
    (it declines the nodes it does not cover: ``KernelDef.accepts``) and ``ahead`` (those
    kernels: ``plugin`` and ``dtypes``)."""
    from .registry import get_registry, kernels_overlap, plugin_manager
    registry = registry or get_registry()
    manager = manager or plugin_manager()
    origins = _origins()
    by_plugin: dict[str, dict] = {}
    for name, _ in manager.list_name_plugin():
        origin = _builtin_origin() if name == BUILTIN_PLUGIN else origins.get(
            name, {"source": "registered at run time", "value": None, "distribution": None, "version": None})
        by_plugin[name] = {"name": name, **origin, "ops": [], "kernels": [], "rewrites": []}
    for dom, op_type in registry.op_types():
        versions: dict[str, list] = {}
        for o in registry.schemas(dom, op_type):
            versions.setdefault(o.plugin, []).append(o.since_version)
        for plugin, since in versions.items():
            if plugin in by_plugin:
                by_plugin[plugin]["ops"].append({"op": f"{domain_name(dom)}::{op_type}", "since_versions": since})
        kernels = registry.kernels(dom, op_type)   # highest priority first
        for i, k in enumerate(kernels):
            if k.plugin in by_plugin:
                ahead = [a for a in kernels[:i] if a.priority > k.priority and kernels_overlap(a, k)]
                by_plugin[k.plugin]["kernels"].append(_kernel_record(k, ahead))
    for rw in registry.rewrites():
        if rw.plugin in by_plugin:
            by_plugin[rw.plugin]["rewrites"].append(rw.name)
    names = sorted(by_plugin, key=lambda n: (n != BUILTIN_PLUGIN, n))
    return [by_plugin[n] for n in names]


def failed_plugins() -> list[dict]:
    """Entry points that failed to load: ``name``, ``value`` (the entry point's target),
    ``distribution``, ``version`` and ``error``."""
    from .registry import plugin_load_errors
    origins = _origins()
    return [{"name": name, **{k: origins.get(name, {}).get(k) for k in ("value", "distribution", "version")},
             "error": error} for name, error in sorted(plugin_load_errors().items())]
