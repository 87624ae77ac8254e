"""Element types: ONNX ``TensorProto`` data types and their numpy dtypes.

bfloat16, the float8/float6/float4 variants and int4/uint4/int2/uint2 are the
``ml_dtypes`` types, the ones ``onnx.helper.tensor_dtype_to_np_dtype`` gives; ``ml_dtypes`` is
imported when one of them is first asked for (its import costs ~0.6 s on the machines we
measure: a model of numpy's types never pays it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

import numpy as np
from .onnx_proto import TensorProto, native_dtype

__all__ = [
    "np_dtype",
    "onnx_type",
    "type_string",
    "is_float",
    "is_integer",
    "compute_dtype",
    "as_dtype",
    "ELEM_TYPE_NAMES",
    "ValueType",
    "SequenceType",
    "OptionalType",
    "MapType",
    "is_container",
    "type_known",
    "value_type_of",
    "value_type_string",
]

#: ONNX elem type → the name used in ``"tensor(<name>)"`` type strings (ORT's spelling).
ELEM_TYPE_NAMES: dict[int, str] = {
    TensorProto.FLOAT: "float",
    TensorProto.UINT8: "uint8",
    TensorProto.INT8: "int8",
    TensorProto.UINT16: "uint16",
    TensorProto.INT16: "int16",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.STRING: "string",
    TensorProto.BOOL: "bool",
    TensorProto.FLOAT16: "float16",
    TensorProto.DOUBLE: "double",
    TensorProto.UINT32: "uint32",
    TensorProto.UINT64: "uint64",
    TensorProto.COMPLEX64: "complex64",
    TensorProto.COMPLEX128: "complex128",
    TensorProto.BFLOAT16: "bfloat16",
    TensorProto.FLOAT8E4M3FN: "float8e4m3fn",
    TensorProto.FLOAT8E4M3FNUZ: "float8e4m3fnuz",
    TensorProto.FLOAT8E5M2: "float8e5m2",
    TensorProto.FLOAT8E5M2FNUZ: "float8e5m2fnuz",
    TensorProto.UINT4: "uint4",
    TensorProto.INT4: "int4",
    TensorProto.FLOAT4E2M1: "float4e2m1",
}
for _name in ("FLOAT8E8M0", "UINT2", "INT2", "FLOAT6E2M3", "FLOAT6E3M2"):
    if hasattr(TensorProto, _name):
        ELEM_TYPE_NAMES[getattr(TensorProto, _name)] = _name.lower()


_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


#: the ml_dtypes type of each low-precision element type (onnx.helper's mapping)
_ML_DTYPE_NAMES = {getattr(TensorProto, elem): name for elem, name in (
    ("BFLOAT16", "bfloat16"), ("FLOAT8E4M3FN", "float8_e4m3fn"), ("FLOAT8E4M3FNUZ", "float8_e4m3fnuz"),
    ("FLOAT8E5M2", "float8_e5m2"), ("FLOAT8E5M2FNUZ", "float8_e5m2fnuz"), ("UINT4", "uint4"), ("INT4", "int4"),
    ("FLOAT4E2M1", "float4_e2m1fn"), ("FLOAT8E8M0", "float8_e8m0fnu"), ("UINT2", "uint2"), ("INT2", "int2"),
    ("FLOAT6E2M3", "float6_e2m3fn"), ("FLOAT6E3M2", "float6_e3m2fn")) if hasattr(TensorProto, elem)}


@lru_cache(maxsize=None)
def np_dtype(elem_type: int) -> np.dtype:
    """The numpy dtype of an ONNX elem type (``TensorProto.FLOAT`` → ``float32``).

    Raises:
        TypeError: ``elem_type`` is UNDEFINED or unknown to this onnx or ml_dtypes version.
    """
    dt = native_dtype(elem_type)
    if dt is not None:
        return dt
    name = _ML_DTYPE_NAMES.get(elem_type)
    if name is not None:
        import ml_dtypes
        if hasattr(ml_dtypes, name):
            return np.dtype(getattr(ml_dtypes, name))
    raise TypeError(f"unsupported ONNX element type {elem_type}")


@lru_cache(maxsize=None)
def onnx_type(dtype: np.dtype | type) -> int:
    """The ONNX elem type of a numpy dtype (``float32`` → ``TensorProto.FLOAT``).

    Raises:
        TypeError: the dtype has no ONNX counterpart.
    """
    dt = np.dtype(dtype)
    if dt.kind in "OUS":
        return TensorProto.STRING
    elem = _ELEM_TYPE_OF.get(dt)
    if elem is None:
        elem = next((e for e, name in _ML_DTYPE_NAMES.items() if name == dt.name), None)
    if elem is None:
        raise TypeError(f"numpy dtype {dt} has no ONNX element type")
    return elem


_ELEM_TYPE_OF = {native_dtype(e): e for e in ELEM_TYPE_NAMES if e != TensorProto.STRING and native_dtype(e) is not None}


def type_string(elem_type: int) -> str:
    """ORT-style type string, e.g. ``"tensor(float)"``."""
    return f"tensor({ELEM_TYPE_NAMES.get(elem_type, str(elem_type))})"


def is_float(dtype: np.dtype) -> bool:
    """True for every floating type, the ml_dtypes ones (bfloat16, float8, float4) included."""
    if isinstance(dtype, ValueType):
        return False
    dt = np.dtype(dtype)
    return dt.kind == "f" or (dt.kind == "V" and "float" in dt.name)


def compute_dtype(*dtypes: Any) -> np.dtype:
    """The dtype a float kernel computes in: float64 when any of ``dtypes`` (None ignored) is
    float64, else float32 (float16, bfloat16 and the float8 types compute in float32 and are
    cast back)."""
    return _F64 if any(d is not None and np.dtype(d) == _F64 for d in dtypes) else _F32


def as_dtype(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x`` itself when it already has ``dtype``, else a converted copy."""
    return x if x.dtype == dtype else x.astype(dtype)


def is_integer(dtype: np.dtype) -> bool:
    """True for signed and unsigned integers, int4/uint4/int2/uint2 included."""
    if isinstance(dtype, ValueType):
        return False
    dt = np.dtype(dtype)
    return dt.kind in "iu" or (dt.kind == "V" and "int" in dt.name)


# sequence and optional types (ONNX IR.md "Types": seq(T), optional(T)) -------------------

class ValueType:
    """Base of the non-tensor value types. A slot's "dtype" in the engine is a numpy dtype
    for a tensor, a :class:`SequenceType` / :class:`OptionalType` for a container, or None
    (unknown). At run time a sequence is a Python list of numpy arrays (or of containers),
    an optional is None (empty) or its element."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return value_type_string(self)

    def __str__(self) -> str:
        return value_type_string(self)


@dataclass(frozen=True, repr=False)
class SequenceType(ValueType):
    """``seq(elem)``: ``elem`` a numpy dtype (tensors), another container type, or None
    (unknown element type).

    Hints the ops that made the sequence prove (SplitToSequence, SequenceConstruct,
    SequenceInsert, a Loop that carries it), for shape inference (SequenceAt,
    ConcatFromSequence); not part of the type: two sequence types that differ only in them
    are equal. Declared ranks are never taken (exporters write wrong ones).

    * ``rank``: the rank every element has, else None;
    * ``dims``: per axis the int every element has there, None where not proven (a
      symbolic dim counts as None: a hint crosses subgraph scopes, where a symbol means
      nothing); given with a rank, ``(None,) * rank``; None when the rank is not known;
    * ``empty``: the sequence holds no element (SequenceEmpty): rank and dims say nothing,
      and :func:`join_sequences` takes the other side's.
    """

    elem: Any = None
    rank: Optional[int] = field(default=None, compare=False)
    dims: Optional[tuple] = field(default=None, compare=False)
    empty: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        dims = None if self.empty else self.dims
        if dims is None and self.rank is not None and not self.empty:
            dims = (None,) * self.rank
        dims = known_dims(dims)
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "rank", None if dims is None else len(dims))

    def __repr__(self) -> str:
        if self.empty:
            return f"SequenceType({self.elem!r}, empty=True)"
        if self.dims is None:
            return f"SequenceType({self.elem!r})"
        if all(d is None for d in self.dims):
            return f"SequenceType({self.elem!r}, rank={self.rank})"
        return f"SequenceType({self.elem!r}, dims={self.dims})"


@dataclass(frozen=True, repr=False)
class OptionalType(ValueType):
    """``optional(elem)``: ``elem`` a numpy dtype (an optional tensor), a container type, or
    None (unknown)."""

    elem: Any = None

    def __repr__(self) -> str:
        return f"OptionalType({self.elem!r})"


@dataclass(frozen=True, repr=False)
class MapType(ValueType):
    """``map(key, value)``: ``key`` the numpy dtype of the keys (int64, or object for
    strings), ``value`` the values' type (a numpy dtype: ``map(int64,tensor(float))``).
    At run time a map is a Python dict of Python keys (int, str) and scalar values, as
    onnxruntime returns it (ZipMap's ``seq(map)`` is a list of dicts)."""

    key: Any = None
    value: Any = None

    @property
    def elem(self) -> Any:
        """The values' type (a map is known when its values are: :func:`type_known`)."""
        return self.value

    def __repr__(self) -> str:
        return f"MapType({self.key!r}, {self.value!r})"


def is_container(t: Any) -> bool:
    """True for a sequence, optional or map type (a slot that never has a tensor shape)."""
    return isinstance(t, ValueType)


def type_known(t: Any) -> bool:
    """True when ``t`` names a tensor element type all the way down (no None inside)."""
    while isinstance(t, ValueType):
        t = t.elem
    return t is not None


def value_type_of(value: Any) -> Any:
    """The type of a run-time value: an array's dtype, ``SequenceType`` of a list (its
    element type read from the first element; None for an empty list), None for None (an
    empty optional: its element type is unknown)."""
    if isinstance(value, np.ndarray):
        return value.dtype
    if isinstance(value, list):
        return SequenceType(value_type_of(value[0]) if value else None)
    if isinstance(value, dict):
        return _map_type_of(value)
    if value is None:
        return None
    return np.asarray(value).dtype


def _map_type_of(value: dict) -> MapType:
    """A dict's map type, read from its first item (a string key: object)."""
    if not value:
        return MapType(None, None)
    key, item = next(iter(value.items()))
    return MapType(np.dtype(object) if isinstance(key, (str, bytes)) else np.asarray(key).dtype,
                   np.dtype(object) if isinstance(item, (str, bytes)) else np.asarray(item).dtype)


def type_key(value: Any) -> Any:
    """A hashable key of a run-time value's type for plan-cache keys (plain tuples and
    dtypes: compared in C): None for None, ``("seq", key of the first element)`` for a list
    (``("seq", None)`` when empty), ``("map", its MapType)`` for a dict, else the array's
    dtype."""
    if value is None:
        return None
    if type(value) is list:
        return ("seq", type_key(value[0]) if value else None)
    if type(value) is dict:
        return ("map", _map_type_of(value))
    return value.dtype if isinstance(value, np.ndarray) else np.asarray(value).dtype


def value_type_string(t: Any) -> str:
    """ORT-style type string: ``tensor(float)``, ``seq(tensor(float))``,
    ``optional(seq(tensor(int64)))``, ``seq(map(int64,tensor(float)))``; an unknown element
    type is ``undefined``."""
    if isinstance(t, SequenceType):
        return f"seq({value_type_string(t.elem)})"
    if isinstance(t, OptionalType):
        return f"optional({value_type_string(t.elem)})"
    if isinstance(t, MapType):     # (onnxruntime's spelling: no space, the key a bare element type)
        key = "undefined" if t.key is None else value_type_string(t.key)[len("tensor("):-1]
        return f"map({key},{value_type_string(t.value)})"
    if t is None:
        return "tensor(undefined)"
    try:
        return type_string(onnx_type(t))
    except TypeError:
        return f"tensor({np.dtype(t).name})"


def merge_types(declared: Any, actual: Any) -> Any:
    """``declared`` with its unknown element types (None) filled from ``actual`` where the
    kinds agree (a sequence's rank hint is ``declared``'s: ``actual``'s is not proven for it)."""
    if declared is None:
        return actual
    if isinstance(declared, SequenceType):
        inner = actual.elem if isinstance(actual, SequenceType) else None
        return SequenceType(merge_types(declared.elem, inner), declared.rank)
    if isinstance(declared, OptionalType):
        inner = actual.elem if isinstance(actual, OptionalType) else actual
        return OptionalType(merge_types(declared.elem, inner))
    if isinstance(declared, MapType) and isinstance(actual, MapType):
        return MapType(merge_types(declared.key, actual.key), merge_types(declared.value, actual.value))
    return declared


def known_dims(shape) -> Optional[tuple]:
    """``shape`` with every dim that is not an int as None (a symbolic dim); None for None."""
    if shape is None:
        return None
    return tuple(int(d) if isinstance(d, (int, np.integer)) and not isinstance(d, bool) else None for d in shape)


def join_dims(a, b) -> Optional[tuple]:
    """The dims two shapes (ints, symbolic dims, None) prove alike: per axis the int both
    have, else None; None when either rank is unknown or the ranks differ."""
    a, b = known_dims(a), known_dims(b)
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


def join_sequences(a: "SequenceType", b: "SequenceType") -> "SequenceType":
    """A sequence type whose hints hold for every element of ``a`` and of ``b`` (a Loop's
    carried sequence across iterations, an If's two branches): an empty side adds nothing;
    the element type is ``a``'s, or ``b``'s where ``a``'s is not known."""
    elem = a.elem if a.elem is not None else b.elem
    if a.empty or b.empty:
        other = b if a.empty else a
        return SequenceType(elem, dims=other.dims, empty=other.empty)
    return SequenceType(elem, dims=join_dims(a.dims, b.dims))


def with_element(t: "SequenceType", shape) -> "SequenceType":
    """``t`` with one more element of ``shape`` (None: rank unknown): its hints joined with
    the element's dims."""
    return join_sequences(t, SequenceType(t.elem, dims=known_dims(shape)))


def optional_elem(t: Any) -> Any:
    """The element type of an optional type (``t`` itself for any other type)."""
    return t.elem if isinstance(t, OptionalType) else t


__all__.append("merge_types")
__all__.append("type_key")
__all__.append("optional_elem")
__all__ += ["known_dims", "join_dims", "join_sequences", "with_element"]
