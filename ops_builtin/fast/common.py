"""What the compiled kernels share, none of it needing numba: the priority over the numpy
kernels, the checks a kernel makes before it calls a loop, and :func:`lazy_import`, through
which each kernel module reaches its loops.

The loops (:mod:`.loops`) are numba code; a kernel module holds its family's loops module
as ``loops = lazy_import(".loops.<family>", __package__)`` and calls ``loops.<name>(...)``:
the loops module, and numba with it, is imported by the first call of one of its loops.
Building the registry, choosing kernels and tracing their ``prepare`` / ``scratch`` import
no numba.
"""
from __future__ import annotations

import ctypes
import importlib.util
import sys
import threading
import types
import weakref

import numpy as np

__all__ = ["PRIORITY", "F32", "F64", "FLOATS", "EMPTY", "contiguous", "address", "lazy_import"]

#: the priority of every compiled kernel (the builtin numpy kernels have 0)
PRIORITY = 10
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
FLOATS = (np.float32, np.float64)
#: an empty array per float dtype: what a loop gets for an absent optional input (a bias)
EMPTY = {F32: np.empty(0, F32), F64: np.empty(0, F64)}


def contiguous(*arrays) -> bool:
    """Every array given (None aside) is C-contiguous."""
    return all(a is None or a.flags.c_contiguous for a in arrays)


_char_over, _address_of = ctypes.c_char.from_buffer, ctypes.addressof
#: id -> (weak reference, address) of the arrays the buffer protocol refused (read-only
#: weights, strided views), each entry dropped when its array dies
_REFUSED: dict = {}


def address(a: np.ndarray) -> int:
    """The address of ``a``'s first element (``a.ctypes.data``). A writable, C-contiguous,
    non-empty array (a planned buffer or a view of one, what kernels pass to native code run
    after run) takes ~0.4 us through the buffer protocol, where ``a.ctypes.data`` builds
    ``__array_interface__`` (~1.5 us, and ~1 us more for the refused buffer request: ~0.1 ms
    a run on a small transformer's ~70 such calls). Any other array (a read-only weight or
    bias, which a primitive shared by several nodes receives in turn) takes
    ``a.ctypes.data`` once and its remembered address after that (~0.15 us)."""
    known = _REFUSED.get(id(a))
    if known is not None and known[0]() is a:
        return known[1]
    try:
        return _address_of(_char_over(a))
    except (TypeError, ValueError):       # read-only, strided or empty: no writable contiguous buffer
        pass
    pointer = a.ctypes.data
    if not a.size:                        # (an empty array may be resized in place: not remembered)
        return pointer
    key = id(a)
    try:
        _REFUSED[key] = (weakref.ref(a, lambda _, key=key: _REFUSED.pop(key, None)), pointer)
    except TypeError:                     # not weakly referenceable (an array subclass): not remembered
        pass
    return pointer


# ----------------------------------------------------------------------------------------
# lazy import
# ----------------------------------------------------------------------------------------
# importlib.util.LazyLoader does the same, but before Python 3.13 it is not thread-safe: the
# first thread switches the module's class back before it runs the module's code, so a
# second thread reading an attribute meanwhile gets an AttributeError from the half-run
# module. Here the module runs under a lock of its own, and its class changes after.

#: what the import system set on the module object before its code runs: read without
#: running it (introspection such as inspect.getmodule, pickle or a repr reads them on every
#: module in sys.modules; ``__class__`` is what isinstance falls back to)
_METADATA = frozenset({"__name__", "__spec__", "__loader__", "__package__", "__path__", "__file__",
                       "__cached__", "__class__"})


class _LazyModule(types.ModuleType):
    """A module whose code has not run yet (see :func:`lazy_import`)."""

    def __getattribute__(self, attr):
        if attr not in _METADATA:
            _run(self)
        return types.ModuleType.__getattribute__(self, attr)

    def __setattr__(self, attr, value):
        _run(self)
        types.ModuleType.__setattr__(self, attr, value)

    def __delattr__(self, attr):
        _run(self)
        types.ModuleType.__delattr__(self, attr)


def _run(module: types.ModuleType) -> None:
    """Run a lazy module's code, once: in the thread that gets its lock first; the others
    wait for it, then find a plain module. The code runs in place (the module object is the
    one in sys.modules and in its importers' globals), then the object becomes a plain
    ``types.ModuleType``, so a later attribute read costs what it costs on any module. Reads
    from the module's own code while it runs (the same thread) see what it defined so far.
    Where the code raises, the module stays lazy: the next read runs it again (and raises
    again)."""
    state = object.__getattribute__(module, "__spec__").loader_state
    with state["lock"]:
        if type(module) is not _LazyModule or state["running"]:
            return
        state["running"] = True
        try:
            state["loader"].exec_module(module)
            object.__setattr__(module, "__class__", types.ModuleType)
        finally:
            state["running"] = False


def lazy_import(name: str, package: str | None = None) -> types.ModuleType:
    """The module ``name`` (absolute, or relative to ``package`` as for
    ``importlib.import_module``), its code not run yet: it runs at the first read of one of
    its attributes (module metadata such as ``__name__`` or ``__file__`` aside), under a lock
    (threads that read it at once wait for the one that runs it). Its parent package is
    imported now. Where the module is already in sys.modules, that module.

    Raises:
        ModuleNotFoundError: no module ``name`` exists (found now, not at the first read).
    """
    absolute = importlib.util.resolve_name(name, package)
    if absolute in sys.modules:
        return sys.modules[absolute]
    spec = importlib.util.find_spec(absolute)
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        raise ModuleNotFoundError(f"no module named {absolute!r} to import lazily", name=absolute)
    spec.loader_state = {"loader": spec.loader, "lock": threading.RLock(), "running": False}
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _LazyModule
    module = sys.modules.setdefault(absolute, module)
    parent, _, child = absolute.rpartition(".")
    if parent and type(module) is _LazyModule:   # (as the import system binds a submodule to its package)
        setattr(sys.modules[parent], child, module)
    return module
