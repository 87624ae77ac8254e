"""ONNX operator schemas as plain data, kept in a per-user disk cache per onnx version.

Load-time validation (:mod:`dynashape.validate`) reads, for each node, its schema's arity,
attributes and type constraints. ``onnx.defs.get_schema`` answers from onnx's C++ schema
registry, whose first use registers every schema of every domain (~20 ms, once per process:
as long as a small model's whole session). The facts read are kept here as
:class:`Schema` tuples, and the ones a process looked up are written to
``<cache dir>/onnx-schemas-<onnx version>.json`` (JSON: data only), so the next process
reads them from there and touches ``onnx.defs`` only for a schema it has not seen (``onnx``
itself is imported then, and only then: :mod:`dynashape.onnx_proto`). The newest ai.onnx
opset onnx defines is cached beside them (:func:`newest_opset`).

The cache directory and how it is turned off: :mod:`dynashape.usercache`. A cache file that
cannot be read or written is ignored (the schemas come from onnx).
"""
from __future__ import annotations

import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple, Optional

from .onnx_proto import onnx_version
from .usercache import cache_dir, read_json, write_json

__all__ = ["Schema", "Formal", "Attribute", "get_schema", "save", "newest_opset"]

#: onnx's OpSchema.FormalParameterOption values
_OPTIONAL = 1
_VARIADIC = 2


class Formal(NamedTuple):
    """A formal input of a schema: its name, ``option`` (onnx's FormalParameterOption:
    0 single, 1 optional, 2 variadic), type string (``"T"`` or ``"tensor(int64)"``) and
    whether a variadic one takes one type for all its values."""
    name: str
    option: int
    type_str: str
    is_homogeneous: bool

    @property
    def optional(self) -> bool:
        return self.option == _OPTIONAL

    @property
    def variadic(self) -> bool:
        return self.option == _VARIADIC


class Attribute(NamedTuple):
    """An attribute of a schema: its AttributeProto type (int and name) and whether it is required."""
    type: int
    type_name: str
    required: bool


class Schema(NamedTuple):
    """What validation reads of one operator schema (``onnx.defs.OpSchema``)."""
    since_version: int
    min_input: int
    max_input: int
    min_output: int
    max_output: int
    inputs: tuple        # of Formal
    attributes: dict     # name -> Attribute
    type_constraints: dict   # type parameter ("T") -> tuple of allowed type strings


_lock = threading.Lock()
_schemas: dict[tuple, Optional[Schema]] = {}   # (domain, op_type, opset) -> schema (None: onnx has none)
_read: set = set()       # (domain, op_type) whose cache file was read
_dirty: set = set()      # (domain, op_type) with schemas the cache file lacks
#: operator and domain names that are file names as they are (others are not cached on disk)
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _cache_file(domain: str, op_type: str) -> Optional[Path]:
    root = cache_dir()
    if root is None or not _PLAIN_NAME.fullmatch(op_type) or not _PLAIN_NAME.fullmatch(domain or "ai.onnx"):
        return None
    return root / f"onnx-schemas-{onnx_version()}" / (domain or "ai.onnx") / f"{op_type}.json"


@lru_cache(maxsize=None)
def newest_opset() -> int:
    """The newest ai.onnx opset the installed onnx defines (``onnx.defs.onnx_opset_version``),
    from the cache when it holds it."""
    root = cache_dir()
    path = None if root is None else root / f"onnx-schemas-{onnx_version()}" / "newest-opset.json"
    found = read_json(path)
    if not isinstance(found, int) or isinstance(found, bool):
        from onnx import defs
        found = int(defs.onnx_opset_version())
        write_json(path, found)
    return found


def get_schema(op_type: str, opset: int, domain: str) -> Optional[Schema]:
    """The schema of ``domain::op_type`` at ``opset`` (None: onnx defines none there)."""
    key = (domain, op_type, opset)
    found = _schemas.get(key, _schemas)
    if found is not _schemas:
        return found
    with _lock:
        if (domain, op_type) not in _read:
            _read.add((domain, op_type))
            _schemas.update(_read_file(domain, op_type))
        if key not in _schemas:
            _schemas[key] = _from_onnx(op_type, opset, domain)
            _dirty.add((domain, op_type))
        return _schemas[key]


def save() -> None:
    """Write the cache files of the operators whose schemas came from onnx."""
    if not _dirty:
        return
    with _lock:
        written = [(d, t, {str(v): None if s is None else _to_json(s) for (d2, t2, v), s in _schemas.items()
                           if (d2, t2) == (d, t)}) for d, t in _dirty]
        _dirty.clear()
    for domain, op_type, data in written:
        path = _cache_file(domain, op_type)
        write_json(path, data)


def _read_file(domain: str, op_type: str) -> dict:
    data = read_json(_cache_file(domain, op_type))
    try:
        return {(domain, op_type, int(v)): None if e is None else _from_json(e) for v, e in data.items()}
    except (AttributeError, ValueError, TypeError, KeyError):
        return {}   # absent or damaged: the schemas come from onnx (and the file is rewritten)


def _from_onnx(op_type: str, opset: int, domain: str) -> Optional[Schema]:
    from onnx import defs
    try:
        s = defs.get_schema(op_type, opset, domain)
    except Exception:  # noqa: BLE001 - onnx's SchemaError: no schema (custom domains, newer opsets)
        return None
    return Schema(
        s.since_version, s.min_input, s.max_input, s.min_output, s.max_output,
        tuple(Formal(f.name, int(f.option), f.type_str, bool(f.is_homogeneous)) for f in s.inputs),
        {name: Attribute(int(a.type), a.type.name, bool(a.required)) for name, a in s.attributes.items()},
        {c.type_param_str: tuple(c.allowed_type_strs) for c in s.type_constraints})


def _to_json(s: Schema) -> list:
    return [s.since_version, s.min_input, s.max_input, s.min_output, s.max_output,
            [list(f) for f in s.inputs], {k: list(a) for k, a in s.attributes.items()}, s.type_constraints]


def _from_json(v: list) -> Schema:
    return Schema(*v[:5], tuple(Formal(*f) for f in v[5]), {k: Attribute(*a) for k, a in v[6].items()},
                  {k: tuple(t) for k, t in v[7].items()})
