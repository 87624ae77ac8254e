"""Encoders of the ``ai.onnx.ml`` domain: OneHotEncoder, CategoryMapper, FeatureVectorizer
(what skl2onnx writes for OneHotEncoder, for string labels and for feature unions).

Categories are looked up in their sorted keys (``searchsorted``, a repeated category's last
position wins, as onnxruntime's hash maps); FeatureVectorizer copies each input's rows into
its columns of the output, padded with 0 or cut to its ``inputdimensions`` entry. No Python
loop runs over elements (strings are compared as a numpy ``U`` array).

Source: ONNX operator spec (Operators-ml.md): OneHotEncoder-1, CategoryMapper-1,
FeatureVectorizer-1; onnxruntime's CPU kernels (onnxruntime/core/providers/cpu/ml:
onehotencoder.cc, category_mapper.cc, feature_vectorizer.cc) where the spec leaves a case
open (float categories, repeated categories, inputs longer than their dimension):
docs/CONFORMANCE.md.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from dynashape.errors import ShapeInferenceError
from dynashape.records import OpLibrary, fixed_dtype
from dynashape.shapes import require

DOMAIN = "ai.onnx.ml"
lib = OpLibrary()

_STRING = np.dtype(object)
_F32, _I64 = np.dtype(np.float32), np.dtype(np.int64)
_INT64_MIN = np.iinfo(np.int64).min
#: 2**63 as a float: the first float64 outside int64's range
_TWO_63 = 9.223372036854775808e18


def _is_string(dt) -> bool:
    return dt is not None and np.dtype(dt).kind in "OUS"


def _dtype_name(dt) -> str:
    return "string" if _is_string(dt) else np.dtype(dt).name


def _text(s) -> str:
    return s.decode("utf-8", errors="replace") if isinstance(s, bytes) else str(s)


def _texts(x: np.ndarray) -> np.ndarray:
    """A string tensor as a flat numpy ``U`` array (comparable, sortable)."""
    flat = x.reshape(-1)
    if flat.dtype.kind == "U":
        return flat
    return np.asarray([_text(s) for s in flat.tolist()], dtype=str).reshape(-1)


def _check_dtype(ctx, i: int, allowed: tuple, what: str) -> None:
    dt = ctx.dtype(i)
    if dt is not None and _dtype_name(dt) not in allowed:
        ctx.fail(f"{what} has dtype {_dtype_name(dt)}, expected one of {', '.join(allowed)}", kind="InvalidDtype")


def _lookup(keys: np.ndarray, vals: np.ndarray) -> tuple:
    """(position of each value in the sorted ``keys`` clipped to a valid index, found)."""
    if keys.size == 0:
        return np.zeros(vals.shape, np.int64), np.zeros(vals.shape, bool)
    pos = np.minimum(np.searchsorted(keys, vals), keys.size - 1)
    return pos, keys[pos] == vals


def _last_wins(keys: np.ndarray, values: np.ndarray) -> tuple:
    """(sorted distinct keys, the value of each key's last occurrence)."""
    uniq, first_of_reversed = np.unique(keys[::-1], return_index=True)
    return uniq, values[::-1][first_of_reversed]


def _as_int64(x: np.ndarray) -> np.ndarray:
    """``static_cast<int64_t>`` of x86 onnxruntime: floats truncated toward zero; NaN and
    values outside int64's range become INT64_MIN (``cvttsd2si``'s "integer indefinite")."""
    if x.dtype.kind != "f":
        return x.astype(np.int64, copy=False)
    xf = x.astype(np.float64, copy=False)
    ok = (xf >= -_TWO_63) & (xf < _TWO_63)
    return np.where(ok, np.where(ok, xf, 0.0).astype(np.int64), _INT64_MIN)


# OneHotEncoder --------------------------------------------------------------------------

class _Categories(NamedTuple):
    keys: np.ndarray        # sorted distinct categories (int64, or ``U`` strings)
    columns: np.ndarray     # the output column of each key (a repeated category: its last position)
    width: int              # the number of categories, repeats included (the output's last dim)
    comparable: bool        # the input's kind is the categories' (else every element is unknown)
    zeros: bool             # an unknown category is an all-zero row (else an error)
    node: str


_ONE_HOT_INPUTS = ("string", "int64", "int32", "float32", "float64")


def _categories(ctx) -> _Categories:
    _check_dtype(ctx, 0, _ONE_HOT_INPUTS, "X")
    ints, strings = ctx.attr("cats_int64s"), ctx.attr("cats_strings")
    if (ints is None) == (strings is None):
        ctx.fail("exactly one of cats_int64s and cats_strings must be given, got "
                 f"{'both' if ints is not None else 'neither'}", kind="InvalidAttribute")
    if strings is not None:
        cats = np.asarray([_text(s) for s in strings], dtype=str).reshape(-1)
    else:
        cats = np.asarray(ints, dtype=np.int64).reshape(-1)
    if cats.size == 0:
        name = "cats_strings" if strings is not None else "cats_int64s"
        ctx.fail(f"{name} is empty: at least one category is needed", kind="InvalidAttribute")
    keys, columns = _last_wins(cats, np.arange(cats.size, dtype=np.int64))
    comparable = _is_string(ctx.dtype(0)) == (strings is not None)
    return _Categories(keys, columns, int(cats.size), comparable, bool(ctx.attr("zeros", 1)), ctx.node.name)


@lib.op("OneHotEncoder", since_version=1, domain=DOMAIN, infer_dtype=fixed_dtype(np.float32))
def _one_hot_shape(ctx):
    """OneHotEncoder: X's shape + [n_categories] float32, a 1 at each element's category.

    ``cats_int64s`` or ``cats_strings`` (exactly one, not empty); string X is looked up in
    ``cats_strings``, int64/int32/float/double X in ``cats_int64s`` (floats truncated toward
    zero; NaN and out-of-range values match INT64_MIN only, as onnxruntime on x86); X of the
    other kind matches no category. A repeated category sets its last column (the count
    keeps the repeats). An unknown value gives an all-zero row (``zeros=1``, the default) or
    fails (``zeros=0``: kind UnknownCategory, when run). Any rank, a scalar too. Raises:
    ShapeInferenceError kinds InvalidDtype, InvalidAttribute, UnknownCategory. Source: ONNX
    operator spec, ai.onnx.ml OneHotEncoder-1; onnxruntime onehotencoder.cc.
    """
    cats = _categories(ctx)
    return [tuple(ctx.shape(0)) + (cats.width,)]


@lib.kernel("OneHotEncoder", domain=DOMAIN, prepare=_categories)
def _one_hot_encoder(inputs, outputs, cats: _Categories):
    x, y = inputs[0], outputs[0]
    fresh = y is None
    if fresh:
        y = np.zeros(x.shape + (cats.width,), np.float32)
    else:
        y[...] = 0
    if not cats.comparable:
        found = np.zeros(x.size, bool)
        pos = None
    else:
        vals = _texts(x) if x.dtype.kind in "OUS" else _as_int64(x.reshape(-1))
        pos, found = _lookup(cats.keys, vals)
    if not cats.zeros and not found.all():
        bad = x.reshape(-1)[np.argmin(found)]
        bad = bad.item() if isinstance(bad, np.generic) else bad
        raise ShapeInferenceError(
            f"OneHotEncoder node '{cats.node or '<unnamed>'}': {bad!r} is not one of the categories and zeros=0",
            node=cats.node, op_type="OneHotEncoder", kind="UnknownCategory")
    if pos is not None:
        rows = np.flatnonzero(found)
        y.reshape(-1, cats.width)[rows, cats.columns[pos[rows]]] = 1.0
    return [y] if fresh else None


# CategoryMapper -------------------------------------------------------------------------

class _Mapping(NamedTuple):
    keys: np.ndarray        # sorted distinct keys: ``U`` strings (string X) or int64
    values: np.ndarray      # the value of each key (a repeated key: its last pair)
    default: Any            # default_int64 or default_string
    to_int: bool            # strings -> int64 (else int64 -> strings)


def _mapping(ctx) -> _Mapping:
    _check_dtype(ctx, 0, ("string", "int64"), "X")
    strings, ints = ctx.attr("cats_strings"), ctx.attr("cats_int64s")
    for name, value in (("cats_strings", strings), ("cats_int64s", ints)):
        if value is None:
            ctx.fail(f"attribute '{name}' is required", kind="MissingAttribute")
    strings = np.asarray([_text(s) for s in strings], dtype=str).reshape(-1)
    ints = np.asarray(ints, dtype=np.int64).reshape(-1)
    if strings.size != ints.size:
        ctx.fail(f"cats_strings has {strings.size} entries, cats_int64s {ints.size}: they must have the same "
                 "length", kind="InvalidAttribute")
    if _is_string(ctx.dtype(0)):
        keys, values = _last_wins(strings, ints)
        return _Mapping(keys, values, int(ctx.attr("default_int64", -1)), True)
    keys, values = _last_wins(ints, strings.astype(object))
    return _Mapping(keys, values, _text(ctx.attr("default_string", "_Unused")), False)


def _category_dtype(ctx):
    _check_dtype(ctx, 0, ("string", "int64"), "X")
    return [_I64 if _is_string(ctx.dtype(0)) else _STRING]


@lib.op("CategoryMapper", since_version=1, domain=DOMAIN, infer_dtype=_category_dtype)
def _category_shape(ctx):
    """CategoryMapper: strings to int64 or int64 to strings through the pairs
    (``cats_strings[i]``, ``cats_int64s[i]``); X's shape, any rank.

    String X maps to int64 (``default_int64``, -1, where a string is not in the map), int64
    X to strings (``default_string``, "_Unused"); the direction is X's type (onnxruntime and
    ONNX's type inference; both defaults may be given). A repeated key maps to its last
    pair (as onnxruntime). Raises: ShapeInferenceError kinds InvalidDtype, MissingAttribute,
    InvalidAttribute. Source: ONNX operator spec, ai.onnx.ml CategoryMapper-1; onnxruntime
    category_mapper.cc.
    """
    _mapping(ctx)
    return [ctx.shape(0)]


@lib.kernel("CategoryMapper", domain=DOMAIN, prepare=_mapping)
def _category_mapper(inputs, outputs, mapping: _Mapping):
    x = inputs[0]
    vals = _texts(x) if mapping.to_int else x.reshape(-1)
    pos, found = _lookup(mapping.keys, vals)
    y = np.full(vals.shape, mapping.default, dtype=_I64 if mapping.to_int else _STRING)
    if mapping.keys.size:
        y[found] = mapping.values[pos[found]]
    if outputs[0] is None:
        return [y.reshape(x.shape)]
    outputs[0][...] = y.reshape(x.shape)
    return None


# FeatureVectorizer ----------------------------------------------------------------------

_VECTORIZER_INPUTS = ("int32", "int64", "float32", "float64")


def _input_dimensions(ctx) -> tuple:
    dims = ctx.attr("inputdimensions")
    if dims is None or len(dims) == 0:
        ctx.fail("attribute 'inputdimensions' is required (one size per input)", kind="MissingAttribute")
    dims = tuple(int(d) for d in dims)
    if len(dims) != ctx.num_inputs:
        ctx.fail(f"inputdimensions has {len(dims)} values, the node has {ctx.num_inputs} inputs: one size per "
                 "input", kind="InvalidAttribute")
    if min(dims) < 0:
        ctx.fail(f"inputdimensions {list(dims)} must be >= 0", kind="InvalidAttribute")
    return dims


@lib.op("FeatureVectorizer", since_version=1, domain=DOMAIN, infer_dtype=fixed_dtype(np.float32))
def _vectorizer_shape(ctx):
    """FeatureVectorizer: the inputs side by side, [N, sum(inputdimensions)] float32.

    Input i is [N, ...] (its dims after the first flattened to one row, as onnxruntime) or
    [C] (one row: N = 1); its row fills ``inputdimensions[i]`` columns, padded with 0 where
    it is shorter and cut where it is longer. Every input has the batch size N of the first
    (a guard where N is symbolic) and the same type (int32, int64, float or double).
    Raises: ShapeInferenceError kinds MissingAttribute, InvalidAttribute, InvalidDtype,
    InvalidRank, BatchMismatch. Source: ONNX operator spec, ai.onnx.ml FeatureVectorizer-1;
    onnxruntime feature_vectorizer.cc.
    """
    dims = _input_dimensions(ctx)
    first = ctx.dtype(0)
    n = None
    for i in range(ctx.num_inputs):
        _check_dtype(ctx, i, _VECTORIZER_INPUTS, f"input {i}")
        if first is not None and ctx.dtype(i) is not None and np.dtype(ctx.dtype(i)) != np.dtype(first):
            ctx.fail(f"input {i} has dtype {np.dtype(ctx.dtype(i)).name}, input 0 {np.dtype(first).name}: every "
                     "input must have the same type", kind="InvalidDtype")
        shape = ctx.shape(i)
        if len(shape) == 0:
            ctx.fail(f"input {i} is a scalar: expected [N, C] or [C]", kind="InvalidRank")
        rows = 1 if len(shape) == 1 else shape[0]
        if n is None:
            n = rows
            continue
        require(ctx, rows, "==", n, f"input {i} has batch size {rows}, input 0 {n}: every input must have the "
                "same batch size", "BatchMismatch")
        if isinstance(rows, int):
            n = rows
    return [(n, sum(dims))]


@lib.kernel("FeatureVectorizer", domain=DOMAIN, prepare=_input_dimensions)
def _feature_vectorizer(inputs, outputs, dims: tuple):
    y = outputs[0]
    fresh = y is None
    if fresh:
        y = np.empty((inputs[0].shape[0] if inputs[0].ndim > 1 else 1, sum(dims)), np.float32)
    n = y.shape[0]
    start = 0
    for x, d in zip(inputs, dims):          # (a loop over the inputs: each is one slice copy)
        rows = x.reshape(1, -1) if x.ndim == 1 else x.reshape(n, int(np.prod(x.shape[1:])))
        k = min(rows.shape[1], d)
        y[:, start:start + k] = rows[:, :k]
        y[:, start + k:start + d] = 0
        start += d
    return [y] if fresh else None
