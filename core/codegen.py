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
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from .symbolic import CODE_NAMESPACE, Expr, as_atom

__all__ = ["CodeWriter", "ExprCoder"]

_module_ids = itertools.count()
#: compiled code per generated source, process-wide (a second session of a model, or a new
#: signature with the same structure, compiles nothing): most recently used last
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
    filename = f"<dynashape-{name}-{next(_module_ids)}>"
    code = compile(source, filename, "exec")
    with _CODE_LOCK:
        _CODE[source] = code
        _register_source(filename, source)
        if len(_CODE) > _CODE_LIMIT:
            _, dropped = _CODE.popitem(last=False)
            linecache.cache.pop(dropped.co_filename, None)
    return code


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
