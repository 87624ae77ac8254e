"""Maps of the ``ai.onnx.ml`` domain: ZipMap (class scores as a ``seq(map)``: what skl2onnx
writes after every classifier by default), DictVectorizer and CastMap (a ``map`` input).

Run-time values: a map is a Python dict of Python keys (int, str) and scalar values, a
``seq(map)`` a list of them, as onnxruntime returns them (its maps are ``std::map``: keys in
ascending order, a repeated key holding its last value). Their slots have no shape and a
:class:`~dynashape.dtypes.MapType` (inside a :class:`~dynashape.dtypes.SequenceType`) as
their dtype; the engine leaves them outside the arena, as sequences.

Source: ONNX operator spec (Operators-ml.md): ZipMap-1, DictVectorizer-1, CastMap-1;
onnxruntime's CPU kernels (onnxruntime/core/providers/cpu/ml: zipmap.cc, dictvectorizer.h,
cast_map.cc) where the spec leaves a case open (key order, CastMap's string format).
"""
from __future__ import annotations

import ast
from typing import Callable, NamedTuple, Optional

import numpy as np
from dynashape.dtypes import MapType, SequenceType, value_type_string
from dynashape.records import InferContext, OpLibrary

DOMAIN = "ai.onnx.ml"
lib = OpLibrary()
_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)
_STRING = np.dtype(object)


def _labels(ctx: InferContext, strings: str, ints: str) -> tuple:
    """(labels, key dtype) from exactly one of the attributes ``strings`` / ``ints``."""
    s, i = ctx.attr(strings), ctx.attr(ints)
    if bool(s is not None and len(s)) == bool(i is not None and len(i)):
        ctx.fail(f"exactly one of {strings} and {ints} must be given (and not empty)", kind="InvalidAttribute")
    if s is not None and len(s):
        return [x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in s], _STRING
    return [int(x) for x in i], _I64


# ZipMap ----------------------------------------------------------------------------------

class _Keys(NamedTuple):
    keys: tuple        # the distinct labels in ascending order (a dict's key order)
    columns: Optional[list]  # the column of X each key takes (a repeated label: its last); None: X's order
    count: int         # how many labels (X's feature count)
    to_dicts: Callable  # rows (lists of one float per key, in key order) -> one dict per row


def _zipmap_keys(ctx: InferContext) -> _Keys:
    labels, _ = _labels(ctx, "classlabels_strings", "classlabels_int64s")
    last = {label: c for c, label in enumerate(labels)}
    keys = tuple(sorted(last))
    columns = [last[k] for k in keys]
    return _Keys(keys, None if columns == list(range(len(labels))) else columns, len(labels), _row_dicts(keys))


#: the most labels a generated dict display takes (beyond: dicts from zip)
_DISPLAY_LIMIT = 256


def _row_dicts(keys: tuple) -> Callable:
    """A function making each row's dict. Up to ``_DISPLAY_LIMIT`` labels it is generated: one
    dict display with the labels as literal keys, ``[{0: v0, 1: v1} for v0, v1 in rows]``,
    which builds each dict in one step (~2x faster than ``dict(zip(keys, row))``, the fallback:
    at 1000 rows of 3 labels ~0.25 ms against ~0.5 ms). A label's literal is its ``repr``,
    which reads back as the same int or str."""
    literals = [repr(k) for k in keys]
    if len(keys) > _DISPLAY_LIMIT or not all(type(k) in (int, str) for k in keys) \
            or any(ast.literal_eval(s) != k for s, k in zip(literals, keys)):
        return lambda rows: list(map(dict, map(zip, [keys] * len(rows), rows)))
    names = [f"v{c}" for c in range(len(keys))]
    display = ", ".join(f"{s}: {v}" for s, v in zip(literals, names))
    source = f"def to_dicts(rows):\n    return [{{{display}}} for {', '.join(names)}, in rows]\n"
    namespace: dict = {}
    exec(compile(source, "<dynashape-zipmap>", "exec"), namespace)  # noqa: S102 - literals checked above
    return namespace["to_dicts"]


def _zipmap_dtype(ctx: InferContext):
    _, key = _labels(ctx, "classlabels_strings", "classlabels_int64s")
    return [SequenceType(MapType(key, _F32))]


@lib.op("ZipMap", since_version=1, domain=DOMAIN, infer_dtype=_zipmap_dtype, deterministic=False)
def _zipmap_shape(ctx: InferContext):
    """ZipMap: X [N, C] (or [C]: one row) float32 -> ``seq(map(int64|string, float))``, one
    dict per row mapping label ``classlabels_int64s[c]`` (or ``classlabels_strings[c]``) to
    ``X[n, c]`` as a Python float. Keys come in ascending order and a repeated label keeps
    its last column (onnxruntime's ``std::map``). Raises ShapeInferenceError kinds
    InvalidAttribute (neither or both label lists), InvalidDtype (X not float32),
    InvalidRank (X not 1-D or 2-D), FeatureCountMismatch (C differs from the label count).
    Source: ONNX operator spec, ai.onnx.ml ZipMap-1."""
    keys = _zipmap_keys(ctx)
    dt = ctx.dtype(0)
    if dt is not None and np.dtype(dt) != _F32:
        ctx.fail(f"X must be tensor(float), got {value_type_string(dt)}", kind="InvalidDtype")
    shape = ctx.shape(0)
    if shape is not None:
        if len(shape) not in (1, 2):
            ctx.fail(f"X must be [N, C] or [C], got rank {len(shape)}", kind="InvalidRank")
        if ctx.assume(shape[-1], "!=", keys.count):
            ctx.fail(f"X has {shape[-1]} columns, the labels are {keys.count}", kind="FeatureCountMismatch")
    return [None]


@lib.kernel("ZipMap", domain=DOMAIN, prepare=_zipmap_keys)
def _zipmap(inputs, outputs, keys: _Keys):
    x = inputs[0].reshape(-1, keys.count)
    rows = x if keys.columns is None else x[:, keys.columns]
    return [keys.to_dicts(rows.tolist())]   # (Python floats, as onnxruntime)


# DictVectorizer --------------------------------------------------------------------------

#: the map value types DictVectorizer takes, by key type (onnxruntime's kernels)
_VECTORIZED = {_STRING: (_I64, _F32, np.dtype(np.float64)), _I64: (_STRING, _F32, np.dtype(np.float64))}


def _map_input(ctx: InferContext, what: str) -> MapType | None:
    t = ctx.dtype(0)
    if t is None:
        return None
    if not isinstance(t, MapType):
        ctx.fail(f"X must be a map, got {value_type_string(t)}", kind="TypeMismatch")
    return t


class _Vocabulary(NamedTuple):
    words: tuple
    dtype: np.dtype     # the values' (and the output's) dtype


def _vocabulary(ctx: InferContext) -> _Vocabulary:
    words, key = _labels(ctx, "string_vocabulary", "int64_vocabulary")
    t = _map_input(ctx, "X")
    if t is not None and t.key is not None and np.dtype(t.key) != key:
        ctx.fail(f"the vocabulary is {value_type_string(key)}, X's keys are {value_type_string(t.key)}",
                 kind="TypeMismatch")
    value = (_F32 if key == _STRING else _STRING) if t is None or t.value is None else np.dtype(t.value)
    if value not in _VECTORIZED[key]:
        ctx.fail(f"X {value_type_string(t)} is not one DictVectorizer takes: map(string, int64|float|double) or "
                 "map(int64, string|float|double)", kind="InvalidDtype")
    return _Vocabulary(tuple(words), value)


@lib.op("DictVectorizer", since_version=1, domain=DOMAIN, infer_dtype=lambda ctx: [_vocabulary(ctx).dtype])
def _dict_vectorizer_shape(ctx: InferContext):
    """DictVectorizer: a map X -> Y [1, V], ``Y[0, v] = X[vocabulary[v]]`` (0, or "" for
    strings, where X lacks the word), V the length of ``string_vocabulary`` /
    ``int64_vocabulary``; Y has the map's value type. Raises ShapeInferenceError kinds
    InvalidAttribute, TypeMismatch (X not a map, or its keys not the vocabulary's type),
    InvalidDtype (a value type onnxruntime has no kernel for). Source: ONNX operator spec,
    ai.onnx.ml DictVectorizer-1; the key/value pairs as onnxruntime registers them."""
    return [(1, len(_vocabulary(ctx).words))]


@lib.kernel("DictVectorizer", domain=DOMAIN, prepare=_vocabulary)
def _dict_vectorizer(inputs, outputs, vocab: _Vocabulary):
    x, y = inputs[0], outputs[0]
    missing = "" if vocab.dtype == _STRING else 0
    y[0] = [x.get(w, missing) for w in vocab.words]


# CastMap ---------------------------------------------------------------------------------

_CAST_TO = {"TO_FLOAT": _F32, "TO_STRING": _STRING, "TO_INT64": _I64}
_PAD = {"TO_FLOAT": 0.0, "TO_STRING": "0.f", "TO_INT64": 0}     # (onnxruntime's pad values)


class _Cast(NamedTuple):
    to: str
    dense: bool
    max_map: int


def _cast(ctx: InferContext) -> _Cast:
    to, form = str(ctx.attr("cast_to", "TO_FLOAT")), str(ctx.attr("map_form", "DENSE"))
    if to not in _CAST_TO:
        ctx.fail(f"cast_to '{to}' is not one of {list(_CAST_TO)}", kind="InvalidAttribute")
    if form not in ("DENSE", "SPARSE"):
        ctx.fail(f"map_form '{form}' is not DENSE or SPARSE", kind="InvalidAttribute")
    max_map = int(ctx.attr("max_map", 1))
    if form == "SPARSE" and max_map < 1:
        ctx.fail(f"max_map {max_map} must be >= 1 for a SPARSE map_form", kind="InvalidAttribute")
    t = _map_input(ctx, "X")
    if t is not None and ((t.key is not None and np.dtype(t.key) != _I64)
                          or (t.value is not None and np.dtype(t.value) not in (_F32, _STRING))):
        ctx.fail(f"X must be map(int64, string) or map(int64, float), got {value_type_string(t)}",
                 kind="InvalidDtype")
    return _Cast(to, form == "DENSE", max_map)


@lib.op("CastMap", since_version=1, domain=DOMAIN, infer_dtype=lambda ctx: [_CAST_TO[_cast(ctx).to]],
        data_dependent=True)
def _cast_map_shape(ctx: InferContext):
    """CastMap: a map X (int64 keys, string or float values) -> Y [1, K] of ``cast_to``
    (TO_FLOAT float32, TO_INT64 (floats truncated), TO_STRING (floats as C's ``%f``)).
    ``map_form`` DENSE: the values in ascending key order, K the map's size (data-dependent);
    SPARSE: K = ``max_map``, ``Y[0, k] = X[k]`` and the pad value where X has no key k (0,
    or "0.f" for strings, as onnxruntime; keys >= max_map are left out, a negative key is an
    error). Raises ShapeInferenceError kinds InvalidAttribute, TypeMismatch, InvalidDtype.
    Source: ONNX operator spec, ai.onnx.ml CastMap-1."""
    cast = _cast(ctx)
    return [(1, cast.max_map if not cast.dense else (len(ctx.value(0)) if isinstance(ctx.value(0), dict)
                                                      else ctx.new_dim()))]


def _converted(values: list, to: str) -> np.ndarray:
    if to == "TO_STRING":
        return np.asarray([v if isinstance(v, str) else "%f" % v for v in values], dtype=object)
    floats = np.asarray([float(v) for v in values], dtype=np.float64)
    return floats.astype(np.float32) if to == "TO_FLOAT" else np.trunc(floats.astype(np.float32)).astype(np.int64)


@lib.kernel("CastMap", domain=DOMAIN, prepare=_cast)
def _cast_map(inputs, outputs, cast: _Cast):
    x = inputs[0]
    keys = sorted(x)
    values = _converted([x[k] for k in keys], cast.to)
    if cast.dense:
        return [values.reshape(1, -1)]
    if keys and keys[0] < 0:
        raise ValueError(f"CastMap with map_form SPARSE takes keys >= 0, got {keys[0]}")
    y = np.full((1, cast.max_map), _PAD[cast.to], dtype=_CAST_TO[cast.to])
    k = np.asarray(keys, dtype=np.int64)
    inside = k < cast.max_map
    y[0, k[inside]] = values[inside]
    return [y]
