"""Python source for the program's generated functions.

:class:`CodeWriter` collects statements and the objects they reference (kernels, dtypes,
constants), then compiles one module with :func:`CodeWriter.compile`. :class:`ExprCoder`
writes each distinct symbolic expression once as a local variable (common subexpressions
are shared), so a generated function evaluates every shape, value and parameter of a
signature with one pass of integer arithmetic.
"""
from __future__ import annotations

import itertools
import linecache
import marshal
import sys
import threading
from collections import OrderedDict
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from typing import Any, Optional

import numpy as np

from .symbolic import CODE_NAMESPACE, Expr, as_atom
from .usercache import cache_dir, checksum, prune_oldest, read_bytes, write_bytes

__all__ = ["CodeWriter", "ExprCoder"]

#: compiled code per generated source, process-wide (a second session of a model, or a new
#: signature with the same structure, compiles nothing): most recently used last. A new
#: process reads the bytecode an earlier one wrote (the user cache: compiling a BERT's ~16 kB
#: of generated source costs ~9 ms, reading its bytecode ~0.3 ms)
_CODE: OrderedDict = OrderedDict()
_CODE_LIMIT = 512
_CODE_LOCK = threading.Lock()


class CodeWriter:
    """Lines of Python with hoisted constants; compiled into a namespace."""

    def __init__(self, name: str):
        self.name = name
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {"_np": np, **CODE_NAMESPACE}
        self._consts: dict[int, str] = {}

    def emit(self, line: str, indent: int = 1) -> None:
        self.lines.append("    " * indent + line)

    def const(self, obj: Any, prefix: str = "c") -> str:
        """A module-level name for ``obj`` (the same object gets the same name)."""
        key = id(obj)
        name = self._consts.get(key)
        if name is None:
            name = f"_{prefix}{len(self._consts)}"
            self._consts[key] = name
            self.namespace[name] = obj
        return name

    def compile(self) -> dict:
        """Execute the source; returns the namespace holding the defined functions."""
        source = "\n".join(self.lines) + "\n"
        exec(_compiled(source, self.name), self.namespace)  # noqa: S102 - our own generated code
        self.namespace["__source__"] = source
        return self.namespace


def _compiled(source: str, name: str):
    with _CODE_LOCK:
        code = _CODE.get(source)
        if code is not None:
            _CODE.move_to_end(source)
            return code
    # (a file name from the checksum of name and source: the same in every process)
    key = checksum(f"{name}\n{source}".encode())
    filename = f"<dynashape-{name}-{key}>"
    cached = len(source) >= CACHED_SOURCE_CHARS
    code = _read_cached(key, source, filename) if cached else None
    if code is None:
        code = compile(source, filename, "exec")
        if cached:
            _write_cached(key, source, filename, code)
    with _CODE_LOCK:
        _CODE[source] = code
        _register_source(filename, source)
        if len(_CODE) > _CODE_LIMIT:
            _, dropped = _CODE.popitem(last=False)
            linecache.cache.pop(dropped.co_filename, None)
    return code


def _cache_file(key: str) -> Optional[Path]:
    """Where the bytecode of a source is kept: under the cache directory, per Python bytecode
    format and optimisation level (``-O`` drops asserts), as ``__pycache__`` tells them apart."""
    root = cache_dir()
    if root is None:
        return None
    tag = f"{sys.implementation.cache_tag}-{MAGIC_NUMBER.hex()}-O{sys.flags.optimize}"
    return root / "code" / tag / key


def _read_cached(key: str, source: str, filename: str):
    """The cached code object of ``source``, or None (absent, damaged, or another source of the
    same checksum: the file holds its source, compared in full)."""
    data = read_bytes(_cache_file(key))
    if data is None:
        return None
    try:
        cached_source, cached_name, code = marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return None
    return code if cached_source == source and cached_name == filename else None


def _write_cached(key: str, source: str, filename: str, code) -> None:
    path = _cache_file(key)
    if path is not None and write_bytes(path, marshal.dumps((source, filename, code))):
        _prune(path.parent)


#: sources this long or longer go through the disk cache: Python compiles ~2 kB in ~1 ms, about
#: what writing a cache file costs once; a shorter one compiles faster than a file is opened
CACHED_SOURCE_CHARS = 2048
#: bytecode files kept per Python (the oldest written go first): a few MB, ~2 ms to list
CODE_CACHE_FILES = 4096
_written = itertools.count()


def _prune(folder: Path) -> None:
    """Keep the cache folder under :data:`CODE_CACHE_FILES` files: checked at a process's first
    write and every 256th, the oldest quarter removed when over."""
    if next(_written) % 256 == 0:
        prune_oldest(folder, CODE_CACHE_FILES)


def _register_source(filename: str, source: str) -> None:
    """Give ``linecache`` the generated source under its file name, so that tracebacks, pdb
    and profilers show the generated lines (the kernel calls name their nodes). An entry
    without a modification time is one ``linecache.checkcache`` keeps."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


class ExprCoder:
    """Writes symbolic dims as Python expressions, computing each distinct one once.

    ``symbols`` maps a symbol's name to the variable holding its value. ``ref(d)`` returns
    code for ``d``: an int literal, a symbol's variable, or a local variable assigned (by a
    line emitted into ``writer`` now) the first time ``d`` is asked for.
    """

    def __init__(self, writer: CodeWriter, symbols: dict[str, str], indent: int = 1):
        self.writer = writer
        self.symbols = symbols
        self.indent = indent
        self._names: dict = {}
        self._count = 0

    def ref(self, d) -> str:
        if isinstance(d, (int, np.integer)):
            return repr(int(d))
        name = self._names.get(d)
        if name is not None:
            return name
        atom = as_atom(d)
        if atom is not None:
            return self._atom(atom)   # a symbol or one function of dims
        code = self._poly(d)
        name = self._new_name()
        self.writer.emit(f"{name} = {code}", self.indent)
        self._names[d] = name
        return name

    def _new_name(self) -> str:
        self._count += 1
        return f"e{self._count}"

    def _poly(self, d: Expr) -> str:
        parts = []
        for mono, coef in d._terms.items():
            factors = [] if coef == 1 and mono else [repr(coef)]
            for atom, power in mono:
                factors.extend([self._atom(atom)] * power)
            parts.append("*".join(factors))
        return " + ".join(parts) if parts else "0"

    def _atom(self, atom) -> str:
        op, args = atom
        if op == "s":
            return self.symbols[args]
        key = Expr.atom(atom)
        name = self._names.get(key)
        if name is not None:
            return name
        code = self._atom_code(op, args)
        name = self._new_name()
        self._names[key] = name
        self.writer.emit(f"{name} = {code}", self.indent)
        return name

    def _atom_code(self, op: str, args) -> str:
        refs = [self.ref(a) for a in args]
        if op == "floordiv":
            return f"({refs[0]} // {refs[1]})"
        if op == "mod":
            return f"({refs[0]} % {refs[1]})"
        fn = op if op in ("max", "min") else f"_{op}"
        return f"{fn}({', '.join(refs)})"

    # structures -------------------------------------------------------------------
    def struct(self, value: Any) -> str:
        """Code rebuilding ``value`` (tuples, named tuples, lists, dicts, slices, object
        arrays) with every symbolic dim inside replaced by its value; other objects are
        referenced as constants."""
        if isinstance(value, Expr):
            return self.ref(value)
        if isinstance(value, bool) or value is None or type(value) in (int, str):
            return repr(value)
        if isinstance(value, slice):
            return f"slice({self.struct(value.start)}, {self.struct(value.stop)}, {self.struct(value.step)})"
        if isinstance(value, tuple):
            items = [self.struct(v) for v in value]
            if hasattr(value, "_fields"):
                return f"{self.writer.const(type(value), 't')}({', '.join(items)})"
            return "(" + "".join(i + ", " for i in items) + ")"
        if isinstance(value, list):
            return "[" + ", ".join(self.struct(v) for v in value) + "]"
        if isinstance(value, dict) and all(isinstance(k, (str, int)) for k in value):
            return "{" + ", ".join(f"{k!r}: {self.struct(v)}" for k, v in value.items()) + "}"
        if isinstance(value, np.ndarray) and value.dtype == object:
            items = ", ".join(self.struct(v) for v in value.reshape(-1).tolist())
            return f"_np.array([{items}]).reshape({value.shape!r})"
        return self.writer.const(value)

    def array(self, value: np.ndarray, dtype: np.dtype) -> str:
        """Code making the int array ``value`` (an object array of dims) in ``dtype``."""
        items = "".join(self.ref(v) + ", " for v in value.reshape(-1).tolist())
        dt = self.writer.const(np.dtype(dtype), "d")
        if value.ndim == 1:
            return f"_np.array(({items}), {dt})"
        if value.ndim == 0:
            return f"_np.array({items[:-2]}, {dt})"
        return f"_np.array(({items}), {dt}).reshape({value.shape!r})"
