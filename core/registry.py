"""The operator registry: plugins (pluggy), and resolution of a node to OpDef + KernelDef.

Resolution rules (docs/ARCHITECTURE.md):
* schema = the OpDef with the largest ``since_version`` <= the model's opset for the domain;
* kernel = among KernelDefs whose opset range covers the model's opset and whose dtypes
  accept the node's input dtype, the highest priority;
* equal priority with overlapping range and dtypes is a :class:`KernelConflictError`
  naming both plugins, raised when the registry is built (for a lazy library's records: when
  their key is first looked up);
* a plugin's :class:`~dynashape.records.LazyLibrary` modules are imported on the first
  lookup of one of their keys (the builtin op families are such libraries), so building the
  registry imports no op family;
* rewrites run highest ``priority`` first, then by name; a name defined twice is an error.

Third-party plugins are loaded from the entry-point group ``dynashape``. One that fails
to import is reported (a warning naming it) and skipped. ``DYNASHAPE_PLUGINS_ALLOW`` and
``DYNASHAPE_PLUGINS_BLOCK`` (comma-separated entry-point names) filter them;
``DYNASHAPE_NO_ENTRY_POINTS=1`` turns entry-point loading off.
"""
from __future__ import annotations

import bisect
import os
import re
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import pluggy

from . import hookspecs
from .errors import KernelConflictError, PluginContractError, PluginError, UnsupportedOperatorError
from .records import KernelDef, LazyLibrary, OpDef
from .rewrite import RewriteDef
from .usercache import cache_dir, checksum, prune_oldest, read_json, write_json

__all__ = ["Registry", "get_registry", "register_plugin", "unregister_plugin",
           "plugin_manager", "load_entry_points", "plugin_load_errors", "plugin_provides"]

ENTRY_POINT_GROUP = "dynashape"


class Registry:
    """An index of every OpDef, KernelDef and rewrite the registered plugins provide.

    Records of :class:`~dynashape.records.LazyLibrary` libraries are imported the first time
    one of their keys is asked for (``resolve_op``, ``resolve_kernel``, ``schemas``,
    ``kernels``) or, for libraries with rewrites, when ``rewrites()`` is called; everything
    else is fixed when the registry is built. Thread-safe.
    """

    def __init__(self, ops: list[OpDef], kernels: list[KernelDef], rewrites: Sequence[RewriteDef] = (),
                 libraries: Sequence[LazyLibrary] = ()):
        self._store = _Records(libraries)
        self._excluded: frozenset = frozenset()
        self._store.add(ops, kernels, rewrites)
        for key in {(r.domain, r.op_type) for r in (*ops, *kernels)}:
            self._store.ensure(key)   # a clash with a lazy library's record shows now

    def without(self, plugins: frozenset) -> "Registry":
        """This registry less every record of the named plugins (one view per set of names,
        sharing what is loaded): e.g. a session with the compiled kernels off."""
        plugins = frozenset(plugins) | self._excluded
        views = self._store.views
        if plugins not in views:
            view = object.__new__(Registry)
            view._store, view._excluded = self._store, plugins
            views[plugins] = view
        return views[plugins]

    def _kept(self, records: list) -> list:
        return [r for r in records if r.plugin not in self._excluded] if self._excluded else records

    def rewrites(self) -> list[RewriteDef]:
        """Every registered rewrite in the order they run: highest priority first, then name."""
        return list(self._kept(self._store.all_rewrites()))

    def op_types(self) -> list[tuple[str, str]]:
        """Every (domain, op_type) with an OpDef (imports every lazy library)."""
        self._store.ensure_all()
        return sorted(key for key, versions in self._store.ops.items() if self._kept(versions))

    def schemas(self, domain: str, op_type: str) -> list[OpDef]:
        return list(self._kept(self._store.op_versions((domain, op_type))))

    def kernels(self, domain: str, op_type: str) -> list[KernelDef]:
        return list(self._kept(self._store.kernel_group((domain, op_type))))

    def resolve_op(self, domain: str, op_type: str, opset: int, node_name: str = "") -> OpDef:
        """The schema for a node; raises UnsupportedOperatorError naming what is registered."""
        versions = self._kept(self._store.op_versions((domain, op_type)))
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

        group = self._kept(self._store.kernel_group((domain, op_type)))
        for k in group:
            if k.device == device and k.covers(opset) and accepts(k) and (
                    ctx is None or k.accepts is None or _kernel_accepts(k, ctx, node_name)):
                return k
        name = None if dtype is None else dtype.name
        have = "; ".join(
            f"{k.plugin}: opsets {k.since_version}..{k.end_version or 'latest'}, dtypes of input {k.dtype_input} "
            f"{sorted(k.dtypes) if k.dtypes else 'any'}" for k in group) or "none"
        where = f" (node '{node_name}')" if node_name else ""
        raise UnsupportedOperatorError(
            f"no {device} kernel for operator {op_type} of domain '{domain or 'ai.onnx'}' at opset {opset} "
            f"with input dtype {name}{where}; registered kernels: {have}")


class _Records:
    """What a registry and its views share: the records by key, and the lazy libraries not
    imported yet (each imported once, under a lock)."""

    def __init__(self, libraries: Sequence[LazyLibrary]):
        self.lock = threading.RLock()
        self.ops: dict[tuple[str, str], list[OpDef]] = {}
        self.kernels: dict[tuple[str, str], list[KernelDef]] = {}
        self.rewrites: dict[str, RewriteDef] = {}
        self.ordered_rewrites: list[RewriteDef] = []
        self.views: dict[frozenset, Registry] = {}
        self.pending: dict[tuple[str, str], list[LazyLibrary]] = {}
        self.pending_rewrites: list[LazyLibrary] = []
        self.loaded: set = set()
        for lib in libraries:
            for key in lib.keys:
                self.pending.setdefault(tuple(key), []).append(lib)
            if lib.rewrites:
                self.pending_rewrites.append(lib)

    # lookups ---------------------------------------------------------------------
    def op_versions(self, key: tuple) -> list[OpDef]:
        if key in self.pending:
            self.ensure(key)
        return self.ops.get(key, [])

    def kernel_group(self, key: tuple) -> list[KernelDef]:
        if key in self.pending:
            self.ensure(key)
        return self.kernels.get(key, [])

    def all_rewrites(self) -> list[RewriteDef]:
        if self.pending_rewrites:
            with self.lock:
                for lib in list(self.pending_rewrites):
                    self._load(lib)
        return self.ordered_rewrites

    # loading ---------------------------------------------------------------------
    def ensure(self, key: tuple) -> None:
        """Import every pending library that declares ``key``. (The key stays pending until
        its records are in: a lookup from another thread meanwhile waits on the lock.)"""
        with self.lock:
            for lib in self.pending.get(key, ()):
                self._load(lib)
            self.pending.pop(key, None)

    def ensure_all(self) -> None:
        with self.lock:
            for key in list(self.pending):
                self.ensure(key)
            self.all_rewrites()

    def _load(self, lib: LazyLibrary) -> None:
        ident = (lib.plugin, lib.module, lib.attr)
        if ident in self.loaded:
            return
        self.loaded.add(ident)
        try:
            self._add_library(lib)
        finally:
            if lib in self.pending_rewrites:
                self.pending_rewrites.remove(lib)

    def _add_library(self, lib: LazyLibrary) -> None:
        try:
            library = lib.load()
        except Exception as exc:  # a broken library is reported, never fatal (as a broken entry point)
            _load_errors[f"{lib.plugin}:{lib.module}"] = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"dynashape: module '{lib.module}' of plugin '{lib.plugin}' failed to import and is "
                          f"skipped: {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=4)
            return
        undeclared = sorted({(r.domain, r.op_type) for r in (*library.ops, *library.kernels)} - set(lib.keys))
        if undeclared:
            names = ", ".join(f"{domain or 'ai.onnx'}::{op_type}" for domain, op_type in undeclared)
            raise PluginContractError(
                f"module '{lib.module}' of plugin '{lib.plugin}' registers {names}, which its LazyLibrary does not "
                f"declare in keys (regenerate its index: dynashape plugins --index {lib.module})")
        self.add([_stamped(r, lib.plugin) for r in library.ops], [_stamped(k, lib.plugin) for k in library.kernels],
                 [_stamped(r, lib.plugin) for r in library.rewrites])

    def add(self, ops: Sequence[OpDef], kernels: Sequence[KernelDef], rewrites: Sequence[RewriteDef]) -> None:
        """Index records; raises PluginError / KernelConflictError as the module docstring says."""
        for op in ops:
            versions = self.ops.setdefault((op.domain, op.op_type), [])
            clash = next((o for o in versions if o.since_version == op.since_version), None)
            if clash is not None:
                raise PluginError(
                    f"operator {op.domain or 'ai.onnx'}::{op.op_type} version {op.since_version} is "
                    f"defined twice: by plugin '{clash.plugin}' and by plugin '{op.plugin}'")
            versions.append(op)
            versions.sort(key=lambda o: o.since_version)
        touched = set()
        for k in kernels:
            self.kernels.setdefault((k.domain, k.op_type), []).append(k)
            touched.add((k.domain, k.op_type))
        for key in touched:
            group = self.kernels[key]
            group.sort(key=lambda k: -k.priority)
            _check_conflicts(group)
        for rw in rewrites:
            clash = self.rewrites.get(rw.name)
            if clash is not None:
                raise PluginError(f"rewrite '{rw.name}' is defined twice: by plugin '{clash.plugin}' and by "
                                  f"plugin '{rw.plugin}'")
            self.rewrites[rw.name] = rw
        if rewrites:
            self.ordered_rewrites = sorted(self.rewrites.values(), key=lambda r: (-r.priority, r.name))


def _stamped(record: Any, plugin: str) -> Any:
    """``record`` with ``plugin`` set (a copy: the plugin's own record is left as it is;
    cheaper than ``dataclasses.replace``, which runs ``__init__`` again)."""
    if record.plugin == plugin:
        return record
    copy = object.__new__(type(record))
    copy.__dict__.update(record.__dict__)
    copy.__dict__["plugin"] = plugin
    return copy


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
    for ep in _entry_points():
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


def _entry_points() -> list:
    """The entry points of the group ``dynashape``. Finding them reads the metadata of every
    installed distribution (~5-15 ms), so they are kept in the per-user cache
    (:mod:`dynashape.usercache`), a file per ``sys.path`` (scripts in different folders, test
    processes and benchmarks each keep theirs), with each entry's modification time and the
    names and times of the distribution metadata it held (:func:`_metadata_signature`). They
    are read again when a directory that changed holds other metadata than it did (a
    distribution installed, removed or installed again). A directory that changed otherwise
    (the running script's own, edited between runs; a site-packages that got a module's
    bytecode) costs a listing of its names, not a new read."""
    entries = list(sys.path)
    path = _entry_point_cache(entries)
    cached = read_json(path)
    stamp = _still_valid(cached.get("sys_path"), entries) if isinstance(cached, dict) else None
    found = _cached_entry_points(cached) if stamp is not None else None
    if found is not None:
        if stamp != cached["sys_path"]:     # (a directory without metadata changed: its new time)
            write_json(path, {"sys_path": stamp, "entry_points": cached["entry_points"]})
        return found
    from importlib import metadata
    found = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    stamp = [[entry, _mtime(entry), _metadata_signature(entry)] for entry in entries]
    write_json(path, {"sys_path": stamp, "entry_points": [[ep.name, ep.value] for ep in found]})
    if path is not None:
        prune_oldest(path.parent, ENTRY_POINT_FILES)
    return found


#: the most files of entry points the cache keeps (one per sys.path seen)
ENTRY_POINT_FILES = 64


def _entry_point_cache(entries: list) -> Optional[Path]:
    root = cache_dir()
    if root is None:
        return None
    key = checksum("\0".join(entries).encode(errors="surrogateescape"))
    return root / "entry-points" / f"{sys.implementation.cache_tag}-{key}.json"


def _cached_entry_points(cached: dict) -> Optional[list]:
    try:
        return [CachedEntryPoint(str(name), str(value)) for name, value in cached["entry_points"]]
    except (KeyError, TypeError, ValueError):   # a cache of another form
        return None


class CachedEntryPoint:
    """An entry point read from the cache: what the registry uses of ``importlib.metadata``'s
    EntryPoint (its name, value and ``load``), without importing ``importlib.metadata``
    (~10 ms: it imports zipfile, csv and the e-mail parser). ``value``: ``"module.path:attr"``,
    optionally with ``" [extras]"``."""

    __slots__ = ("name", "value")

    def __init__(self, name: str, value: str):
        self.name, self.value = name, value

    def load(self):
        """Import the module and return the object the value names (``EntryPoint.load``)."""
        import importlib
        found = re.fullmatch(r"\s*(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?(\[.*\])?\s*", self.value)
        if found is None:
            raise ValueError(f"entry point '{self.name}': malformed value {self.value!r}")
        entry_point_module = found.group("module")
        obj = importlib.import_module(entry_point_module)
        for part in found.group("attr").split(".") if found.group("attr") else ():
            obj = getattr(obj, part)
        return obj


#: the names importlib.metadata finds distributions by, in a sys.path directory
_METADATA_SUFFIXES = (".dist-info", ".egg-info", ".egg")


def _mtime(entry: str) -> Optional[int]:
    try:
        return os.stat(entry or ".").st_mtime_ns
    except OSError:
        return None


def _metadata_signature(entry: str) -> Any:
    """What a sys.path entry holds of distribution metadata: ``[[name, mtime_ns], ...]``,
    sorted (empty: none; an absent entry holds none); True for an entry that is no
    directory (a zip), taken to hold metadata that cannot be compared."""
    directory = entry or "."
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError:
        return True
    return sorted([name, _mtime(os.path.join(directory, name))] for name in names if name.endswith(_METADATA_SUFFIXES))


def _still_valid(stamp: Any, entries: list) -> Optional[list]:
    """The stamp of ``entries`` when entry points read under ``stamp`` still hold, else None."""
    try:
        if [entry for entry, _, _ in stamp] != entries:
            return None
        now = []
        for entry, mtime, signature in stamp:
            current = _mtime(entry)
            if current != mtime and (signature is True or _metadata_signature(entry) != signature):
                return None
            now.append([entry, current, signature])
        return now
    except (TypeError, ValueError):   # a stamp of another form (an earlier version's)
        return None


def plugin_provides(name: str, domain: str, op_type: str) -> Optional[bool]:
    """Whether the entry-point plugin ``name`` provides the op ``domain::op_type``.

    False when the plugin is loaded (the registry holds every op of a loaded plugin: one it
    lacks is not the plugin's) or its entry point fails to load; for one installed but not
    loaded (``DYNASHAPE_PLUGINS_BLOCK``, ``DYNASHAPE_PLUGINS_ALLOW``,
    ``DYNASHAPE_NO_ENTRY_POINTS``), whether its hooks declare the op (its entry point is
    loaded, not registered: a lazy plugin imports its index only); None when it is not
    installed (nothing can tell). For error messages that name a plugin.
    """
    if plugin_manager().has_plugin(name):
        return False
    ep = next((e for e in _entry_points() if e.name == name), None)
    if ep is None:
        return None
    try:
        plugin = ep.load()
        keys = {key for lib in _hook(plugin, "dynashape_register_libraries") for key in lib.keys}
        keys |= {(op.domain, op.op_type) for op in _hook(plugin, "dynashape_register_ops")}
    except Exception:  # noqa: BLE001 - a broken plugin is named by its load warning, not here
        return False
    return (domain, op_type) in keys


def _hook(plugin: Any, hook: str) -> list:
    fn = getattr(plugin, hook, None)
    return list(fn() or ()) if callable(fn) else []


def plugin_load_errors() -> dict[str, str]:
    """Entry-point plugins that failed to load: {name: error text}."""
    return dict(_load_errors)


def register_plugin(plugin: Any, name: Optional[str] = None) -> str:
    """Register a plugin object/module at run time; returns its name. Rebuilds the registry lazily.
    Registering the same object again (a notebook cell run twice) does nothing and returns the
    name it has.

    Raises:
        PluginError: a hook is misspelled (``check_pending``), the object implements no
            dynashape hook, or another plugin has the name.
    """
    pm = plugin_manager()
    with _lock:
        if pm.is_registered(plugin):
            return pm.get_name(plugin) or ""
        what = name or _describe(plugin)
        if name and pm.has_plugin(name):
            raise PluginError(f"plugin '{name}' could not be registered: another plugin has that name; "
                              f"unregister_plugin('{name}') first, or register this one under another name")
        try:
            registered = pm.register(plugin, name=name)
            pm.check_pending()
            _require_hooks(pm, plugin, what)
        except PluginError:
            raise
        except Exception as exc:
            if name and pm.has_plugin(name):
                pm.unregister(name=name)
            raise PluginError(f"plugin '{what}' could not be registered: {exc}") from exc
        _invalidate()
        return registered or name or ""


def _describe(plugin: Any) -> str:
    """A short name for a plugin object in a message (its module's name, or its type's; never
    the repr of every hook)."""
    name = getattr(plugin, "__name__", None)
    return name if isinstance(name, str) else f"{type(plugin).__name__} object"


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
            hook = plugin_manager().hook

            def collected(caller) -> list:
                return [_stamped(rec, impl.plugin_name) for impl in caller.get_hookimpls()
                        for rec in impl.function() or ()]
            _registry = Registry(collected(hook.dynashape_register_ops), collected(hook.dynashape_register_kernels),
                                 collected(hook.dynashape_register_rewrites),
                                 collected(hook.dynashape_register_libraries))
        return _registry
