"""The operator registry: plugins (pluggy), and resolution of a node to OpDef + KernelDef.

Resolution rules (docs/ARCHITECTURE.md):
* schema = the OpDef with the largest ``since_version`` <= the model's opset for the domain;
* kernel = among KernelDefs whose opset range covers the model's opset and whose dtypes
  accept the node's input dtype, the highest priority;
* equal priority with overlapping range and dtypes is a :class:`KernelConflictError`
  raised when the registry is built, naming both plugins;
* rewrites run highest ``priority`` first, then by name; a name defined twice is an error.

Third-party plugins are loaded from the entry-point group ``dynashape``. One that fails
to import is reported (a warning naming it) and skipped. ``DYNASHAPE_PLUGINS_ALLOW`` and
``DYNASHAPE_PLUGINS_BLOCK`` (comma-separated entry-point names) filter them;
``DYNASHAPE_NO_ENTRY_POINTS=1`` turns entry-point loading off.
"""
from __future__ import annotations

import bisect
import os
import threading
import warnings
from dataclasses import replace
from importlib import metadata
from typing import Any, Optional, Sequence

import numpy as np
import pluggy

from . import hookspecs
from .errors import KernelConflictError, PluginContractError, PluginError, UnsupportedOperatorError
from .records import KernelDef, OpDef
from .rewrite import RewriteDef

__all__ = ["Registry", "get_registry", "register_plugin", "unregister_plugin",
           "plugin_manager", "load_entry_points", "plugin_load_errors"]

ENTRY_POINT_GROUP = "dynashape"


class Registry:
    """An immutable index of every OpDef and KernelDef the registered plugins provide."""

    def __init__(self, ops: list[OpDef], kernels: list[KernelDef], rewrites: Sequence[RewriteDef] = ()):
        self._ops: dict[tuple[str, str], list[OpDef]] = {}
        for op in ops:
            versions = self._ops.setdefault((op.domain, op.op_type), [])
            clash = next((o for o in versions if o.since_version == op.since_version), None)
            if clash is not None:
                raise PluginError(
                    f"operator {op.domain or 'ai.onnx'}::{op.op_type} version {op.since_version} is "
                    f"defined twice: by plugin '{clash.plugin}' and by plugin '{op.plugin}'")
            versions.append(op)
        for versions in self._ops.values():
            versions.sort(key=lambda o: o.since_version)
        self._kernels: dict[tuple[str, str], list[KernelDef]] = {}
        for k in kernels:
            self._kernels.setdefault((k.domain, k.op_type), []).append(k)
        for group in self._kernels.values():
            group.sort(key=lambda k: -k.priority)
            _check_conflicts(group)
        by_name: dict[str, RewriteDef] = {}
        for rw in rewrites:
            clash = by_name.get(rw.name)
            if clash is not None:
                raise PluginError(f"rewrite '{rw.name}' is defined twice: by plugin '{clash.plugin}' and by "
                                  f"plugin '{rw.plugin}'")
            by_name[rw.name] = rw
        self._rewrites = sorted(by_name.values(), key=lambda r: (-r.priority, r.name))

    def without(self, plugins: frozenset) -> "Registry":
        """This registry less every record of the named plugins (cached per set of names):
        e.g. a session with the compiled kernels off."""
        plugins = frozenset(plugins)
        cache = self.__dict__.setdefault("_without", {})
        if plugins not in cache:
            keep = lambda r: r.plugin not in plugins  # noqa: E731
            cache[plugins] = Registry([o for v in self._ops.values() for o in v if keep(o)],
                                      [k for v in self._kernels.values() for k in v if keep(k)],
                                      [r for r in self._rewrites if keep(r)])
        return cache[plugins]

    def rewrites(self) -> list[RewriteDef]:
        """Every registered rewrite in the order they run: highest priority first, then name."""
        return list(self._rewrites)

    def op_types(self) -> list[tuple[str, str]]:
        return sorted(self._ops)

    def schemas(self, domain: str, op_type: str) -> list[OpDef]:
        return list(self._ops.get((domain, op_type), []))

    def kernels(self, domain: str, op_type: str) -> list[KernelDef]:
        return list(self._kernels.get((domain, op_type), []))

    def resolve_op(self, domain: str, op_type: str, opset: int, node_name: str = "") -> OpDef:
        """The schema for a node; raises UnsupportedOperatorError naming what is registered."""
        versions = self._ops.get((domain, op_type), [])
        i = bisect.bisect_right([o.since_version for o in versions], opset)
        if i == 0:
            have = ", ".join(f"{o.since_version} ({o.plugin})" for o in versions) or "none"
            where = f" (node '{node_name}')" if node_name else ""
            raise UnsupportedOperatorError(
                f"operator {op_type} of domain '{domain or 'ai.onnx'}' at opset {opset}{where} has no "
                f"registered definition; registered since_versions: {have}")
        return versions[i - 1]

    def resolve_kernel(self, domain: str, op_type: str, opset: int, dtype: Optional[np.dtype],
                       node_name: str = "", device: str = "cpu", input_dtypes: Optional[Sequence] = None,
                       ctx: Any = None) -> KernelDef:
        """The kernel for a node at an opset (highest priority first) whose ``dtypes`` accept
        the dtype of its ``dtype_input``: read from ``input_dtypes`` (the node's input dtypes,
        None where unknown) when given, else ``dtype`` for every kernel. With the node's
        context ``ctx``, a kernel whose ``accepts(ctx)`` is False is passed over.

        Raises:
            UnsupportedOperatorError: no kernel fits (the message lists the registered ones).
            PluginContractError: a kernel's ``accepts`` raised (naming its plugin).
        """
        if dtype is not None and not isinstance(dtype, np.dtype):
            dtype = np.dtype(dtype)

        def accepts(k: KernelDef) -> bool:
            if k.dtypes is None:
                return True
            d = dtype if input_dtypes is None else (
                input_dtypes[k.dtype_input] if k.dtype_input < len(input_dtypes) else None)
            return not isinstance(d, np.dtype) or d.name in k.dtypes

        for k in self._kernels.get((domain, op_type), []):
            if k.device == device and k.covers(opset) and accepts(k) and (
                    ctx is None or k.accepts is None or _kernel_accepts(k, ctx, node_name)):
                return k
        name = None if dtype is None else dtype.name
        have = "; ".join(
            f"{k.plugin}: opsets {k.since_version}..{k.end_version or 'latest'}, dtypes of input {k.dtype_input} "
            f"{sorted(k.dtypes) if k.dtypes else 'any'}" for k in self._kernels.get((domain, op_type), [])) or "none"
        where = f" (node '{node_name}')" if node_name else ""
        raise UnsupportedOperatorError(
            f"no {device} kernel for operator {op_type} of domain '{domain or 'ai.onnx'}' at opset {opset} "
            f"with input dtype {name}{where}; registered kernels: {have}")


def _kernel_accepts(k: KernelDef, ctx: Any, node_name: str) -> bool:
    try:
        return bool(k.accepts(ctx))
    except Exception as exc:
        raise PluginContractError(
            f"accepts of the {k.domain or 'ai.onnx'}::{k.op_type} kernel of plugin '{k.plugin}' raised for node "
            f"'{node_name}': {type(exc).__name__}: {exc}") from exc


def _ranges_overlap(a: KernelDef, b: KernelDef) -> bool:
    a_end = a.end_version if a.end_version is not None else 1 << 30
    b_end = b.end_version if b.end_version is not None else 1 << 30
    return a.since_version <= b_end and b.since_version <= a_end


def kernels_overlap(a: KernelDef, b: KernelDef) -> bool:
    """Some node could take either kernel: same device, overlapping opsets and dtypes."""
    return (a.device == b.device and _ranges_overlap(a, b)
            and (a.dtypes is None or b.dtypes is None or bool(a.dtypes & b.dtypes)))


def _check_conflicts(group: list[KernelDef]) -> None:
    for i, a in enumerate(group):
        for b in group[i + 1:]:
            if a.priority == b.priority and kernels_overlap(a, b):
                raise KernelConflictError(
                    f"kernels for {a.domain or 'ai.onnx'}::{a.op_type} conflict: plugin '{a.plugin}' "
                    f"(opsets {a.since_version}..{a.end_version or 'latest'}) and plugin '{b.plugin}' "
                    f"(opsets {b.since_version}..{b.end_version or 'latest'}) have equal priority "
                    f"{a.priority} and overlapping dtypes; give one a higher priority")


# --- the plugin manager --------------------------------------------------------------

_lock = threading.RLock()
_pm: Optional[pluggy.PluginManager] = None
_registry: Optional[Registry] = None
_load_errors: dict[str, str] = {}


def plugin_manager(load_entry_points_now: bool = True) -> pluggy.PluginManager:
    """The process-wide ``pluggy.PluginManager("dynashape")`` with the builtin ops."""
    global _pm
    with _lock:
        if _pm is None:
            pm = pluggy.PluginManager(hookspecs.PROJECT)
            pm.add_hookspecs(hookspecs)
            from . import ops_builtin  # noqa: WPS433 (registered like any plugin)
            pm.register(ops_builtin, name="dynashape.ops_builtin")
            _pm = pm
            if load_entry_points_now and os.environ.get("DYNASHAPE_NO_ENTRY_POINTS", "") not in ("1", "true"):
                load_entry_points()
            pm.check_pending()
        return _pm


def load_entry_points() -> dict[str, str]:
    """Load plugins of the entry-point group ``dynashape``; returns {name: error} of those skipped."""
    pm = plugin_manager(load_entry_points_now=False)
    allow = {s.strip() for s in os.environ.get("DYNASHAPE_PLUGINS_ALLOW", "").split(",") if s.strip()}
    block = {s.strip() for s in os.environ.get("DYNASHAPE_PLUGINS_BLOCK", "").split(",") if s.strip()}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if (allow and ep.name not in allow) or ep.name in block or pm.has_plugin(ep.name):
            continue
        try:
            plugin = ep.load()
            pm.register(plugin, name=ep.name)
            pm.check_pending()
            _require_hooks(pm, plugin, ep.name)
        except Exception as exc:  # a broken plugin is reported, never fatal
            if pm.has_plugin(ep.name):
                pm.unregister(name=ep.name)
            _load_errors[ep.name] = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"dynashape: plugin '{ep.name}' ({ep.value}) failed to load and is skipped: "
                          f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
    _invalidate()
    return dict(_load_errors)


def plugin_load_errors() -> dict[str, str]:
    """Entry-point plugins that failed to load: {name: error text}."""
    return dict(_load_errors)


def register_plugin(plugin: Any, name: Optional[str] = None) -> str:
    """Register a plugin object/module at run time; returns its name. Rebuilds the registry lazily.

    Raises:
        PluginError: a hook is misspelled (``check_pending``), the object implements no
            dynashape hook, or the name is taken.
    """
    pm = plugin_manager()
    with _lock:
        try:
            registered = pm.register(plugin, name=name)
            pm.check_pending()
            _require_hooks(pm, plugin, name or registered or repr(plugin))
        except Exception as exc:
            if name and pm.has_plugin(name):
                pm.unregister(name=name)
            raise PluginError(f"plugin '{name or plugin}' could not be registered: {exc}") from exc
        _invalidate()
        return registered or name or ""


def _require_hooks(pm: pluggy.PluginManager, plugin: Any, name: str) -> None:
    """Unregister ``plugin`` and raise PluginError when it implements no dynashape hook (an
    object without ``@hookimpl`` functions registers nothing, silently, in pluggy)."""
    if not pm.get_hookcallers(plugin):
        pm.unregister(plugin)
        hooks = ", ".join(sorted(n for n in dir(hookspecs) if n.startswith("dynashape_")))
        raise PluginError(f"plugin '{name}' implements no dynashape hook: decorate functions named "
                          f"{hooks} with dynashape.hookimpl (or use OpLibrary.plugin())")


def unregister_plugin(name: str) -> None:
    """Remove a plugin registered under ``name``."""
    pm = plugin_manager()
    with _lock:
        pm.unregister(name=name)
        _invalidate()


def _invalidate() -> None:
    global _registry
    _registry = None


def get_registry() -> Registry:
    """The registry built from every registered plugin (cached until plugins change)."""
    global _registry
    with _lock:
        if _registry is None:
            pm = plugin_manager()
            ops: list[OpDef] = []
            kernels: list[KernelDef] = []
            for impl in pm.hook.dynashape_register_ops.get_hookimpls():
                for rec in impl.function() or ():
                    ops.append(replace(rec, plugin=impl.plugin_name))
            for impl in pm.hook.dynashape_register_kernels.get_hookimpls():
                for rec in impl.function() or ():
                    kernels.append(replace(rec, plugin=impl.plugin_name))
            rewrites: list[RewriteDef] = []
            for impl in pm.hook.dynashape_register_rewrites.get_hookimpls():
                for rec in impl.function() or ():
                    rewrites.append(replace(rec, plugin=impl.plugin_name))
            _registry = Registry(ops, kernels, rewrites)
        return _registry
