"""Linear models and preprocessing of the ``ai.onnx.ml`` domain: Scaler, Normalizer, Imputer,
LinearRegressor (what skl2onnx writes for StandardScaler/MinMaxScaler, Normalizer,
SimpleImputer and LinearRegression/Ridge/SGDRegressor).

Inputs are [N, C] (one row per sample) or [C] (one sample); the feature count C is the last
dim, checked against the attributes (a guard where it is symbolic). Scaler, Normalizer and
LinearRegressor compute in float32 and return float32, as onnxruntime's kernels do; Imputer
keeps the input's type.

Source: ONNX operator spec (Operators-ml.md): Scaler-1, Normalizer-1, Imputer-1,
LinearRegressor-1; onnxruntime's CPU kernels (onnxruntime/core/providers/cpu/ml) where the
spec leaves a case open (a zero norm, a 1-D regressor input): docs/CONFORMANCE.md.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from dynashape.records import OpLibrary, fixed_dtype, same_dtype
from dynashape.shapes import require

from .ml import POST_TRANSFORMS, post_transform

DOMAIN = "ai.onnx.ml"
lib = OpLibrary()
_F32 = np.dtype(np.float32)
_NUMERIC = ("float32", "float64", "int64", "int32")


def _features(ctx, what: str = "X"):
    """X's shape, checked: rank 1 or 2 of a numeric type; returns (shape, C)."""
    shape, dt = ctx.shape(0), ctx.dtype(0)
    if dt is not None and np.dtype(dt).name not in _NUMERIC:
        ctx.fail(f"{what} has dtype {np.dtype(dt).name}, expected one of {', '.join(_NUMERIC)}", kind="InvalidDtype")
    if len(shape) not in (1, 2):
        ctx.fail(f"{what} must be [N, C] or [C], got rank {len(shape)}", kind="InvalidRank")
    return shape, shape[-1]


def _per_feature(ctx, name: str, values, features) -> np.ndarray:
    """An attribute of one value for every feature or one per feature (``features``)."""
    arr = np.asarray(values if values is not None else [], np.float32).reshape(-1)
    if arr.size == 0:
        ctx.fail(f"attribute '{name}' is required (one value, or one per feature)", kind="MissingAttribute")
    if arr.size != 1:
        require(ctx, features, "==", arr.size, f"'{name}' has {arr.size} values, X has {features} features",
                "FeatureCountMismatch")
    return arr


# Scaler ----------------------------------------------------------------------------------

def _scaler_attrs(ctx) -> tuple:
    _, c = _features(ctx)
    return (_per_feature(ctx, "offset", ctx.attr("offset"), c), _per_feature(ctx, "scale", ctx.attr("scale"), c))


@lib.op("Scaler", since_version=1, domain=DOMAIN, infer_dtype=fixed_dtype(np.float32))
def _scaler_shape(ctx):
    """Scaler: ``Y = (X - offset) * scale`` per feature, float32, X's shape. ``offset`` and
    ``scale``: one value, or one per feature (each on its own: onnxruntime wants them the same
    length). Raises InvalidDtype, InvalidRank, MissingAttribute, FeatureCountMismatch.
    Source: ONNX operator spec, ai.onnx.ml Scaler-1."""
    _scaler_attrs(ctx)
    return [ctx.shape(0)]


@lib.kernel("Scaler", domain=DOMAIN, prepare=_scaler_attrs)
def _scaler(inputs, outputs, attrs):
    offset, scale = attrs
    y = outputs[0]
    np.subtract(inputs[0], offset, out=y, casting="unsafe")
    y *= scale


# Normalizer ------------------------------------------------------------------------------

_NORMS = ("MAX", "L1", "L2")


def _norm(ctx) -> str:
    _features(ctx)
    norm = ctx.attr("norm", "MAX")
    norm = norm.decode() if isinstance(norm, bytes) else str(norm)
    if norm not in _NORMS:
        ctx.fail(f"norm '{norm}' is not one of {list(_NORMS)}", kind="InvalidAttribute")
    return norm


@lib.op("Normalizer", since_version=1, domain=DOMAIN, infer_dtype=fixed_dtype(np.float32))
def _normalizer_shape(ctx):
    """Normalizer: each sample (row) divided by its norm: ``MAX`` (its largest value), ``L1``
    (sum of absolute values) or ``L2`` (Euclidean); float32, X's shape. A row whose norm is 0
    is left as it is (as onnxruntime; the spec does not say). Raises InvalidDtype, InvalidRank,
    InvalidAttribute. Source: ONNX operator spec, ai.onnx.ml Normalizer-1."""
    _norm(ctx)
    return [ctx.shape(0)]


@lib.kernel("Normalizer", domain=DOMAIN, prepare=_norm)
def _normalizer(inputs, outputs, norm: str):
    x = inputs[0].astype(_F32, copy=False)
    rows = x.reshape(-1, x.shape[-1])      # (X is [N, C] or [C]: the rule takes no other rank)
    if norm == "MAX":
        scale = rows.max(axis=1, keepdims=True) if rows.shape[1] else np.zeros((rows.shape[0], 1), _F32)
    elif norm == "L1":
        scale = np.abs(rows).sum(axis=1, keepdims=True)
    else:
        scale = np.sqrt(np.square(rows).sum(axis=1, keepdims=True))
    y = outputs[0].reshape(rows.shape)
    np.copyto(y, rows)
    np.divide(rows, scale, out=y, where=scale != 0)     # (a row whose norm is 0 is left as it is)


# Imputer ---------------------------------------------------------------------------------

class _Imputation(NamedTuple):
    values: np.ndarray           # per feature, or one for all, in X's dtype
    replaced: float | int | None  # the value replaced (None: NaN)
    is_nan: bool


def _imputation(ctx) -> _Imputation:
    _, c = _features(ctx)
    dt = np.dtype(ctx.dtype(0)) if ctx.dtype(0) is not None else _F32
    if dt.kind in "iu":
        _per_feature(ctx, "imputed_value_int64s", ctx.attr("imputed_value_int64s"), c)     # (checked)
        return _Imputation(np.asarray(ctx.attr("imputed_value_int64s"), np.int64).astype(dt),
                           int(ctx.attr("replaced_value_int64", 0)), False)
    values = _per_feature(ctx, "imputed_value_floats", ctx.attr("imputed_value_floats"), c)
    replaced = float(ctx.attr("replaced_value_float", 0.0))
    if np.isnan(replaced):     # (NaN matches NaN; kept as None: a prepared value equals itself)
        return _Imputation(values.astype(dt), None, True)
    return _Imputation(values.astype(dt), replaced, False)


@lib.op("Imputer", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _imputer_shape(ctx):
    """Imputer: every element equal to ``replaced_value_float`` (NaN matches NaN) or
    ``replaced_value_int64`` becomes the imputed value of its feature
    (``imputed_value_floats`` / ``_int64s``: one value or one per feature); X's type and
    shape. Raises InvalidDtype, InvalidRank, MissingAttribute, FeatureCountMismatch.
    Source: ONNX operator spec, ai.onnx.ml Imputer-1."""
    _imputation(ctx)
    return [ctx.shape(0)]


@lib.kernel("Imputer", domain=DOMAIN, prepare=_imputation)
def _imputer(inputs, outputs, imp: _Imputation):
    x, y = inputs[0], outputs[0]
    hit = np.isnan(x) if imp.is_nan else x == imp.replaced
    np.copyto(y, x)
    np.copyto(y, np.broadcast_to(imp.values, x.shape), where=hit)


# LinearRegressor -------------------------------------------------------------------------

class _Linear(NamedTuple):
    weights: np.ndarray      # (C, targets), float32
    intercepts: np.ndarray   # (targets,)
    post: int


def _linear(ctx) -> _Linear:
    _, c = _features(ctx)
    targets = int(ctx.attr("targets", 1))
    if targets < 1:
        ctx.fail(f"targets {targets} must be >= 1", kind="InvalidAttribute")
    coef = np.asarray(ctx.attr("coefficients") or [], np.float32).reshape(-1)
    if coef.size == 0 or coef.size % targets:
        ctx.fail(f"coefficients has {coef.size} values: expected targets ({targets}) x features",
                 kind="InvalidAttribute")
    require(ctx, c * targets, "==", coef.size, f"coefficients has {coef.size} values, X has {c} features and "
            f"{targets} target(s)", "FeatureCountMismatch")
    intercepts = np.asarray(ctx.attr("intercepts") or [0.0] * targets, np.float32).reshape(-1)
    if intercepts.size not in (1, targets):
        ctx.fail(f"intercepts has {intercepts.size} values, expected {targets}", kind="InvalidAttribute")
    post = ctx.attr("post_transform", "NONE")
    post = post.decode() if isinstance(post, bytes) else str(post)
    if post not in POST_TRANSFORMS:
        ctx.fail(f"post_transform '{post}' is not one of {list(POST_TRANSFORMS)}", kind="InvalidAttribute")
    return _Linear(np.ascontiguousarray(coef.reshape(targets, -1).T), intercepts, POST_TRANSFORMS.index(post))


@lib.op("LinearRegressor", since_version=1, domain=DOMAIN, infer_dtype=fixed_dtype(np.float32))
def _linear_regressor_shape(ctx):
    """LinearRegressor: ``Y [N, targets] = post_transform(X @ coefficients^T + intercepts)``,
    float32; a 1-D X is one sample ([1, targets], as onnxruntime). ``coefficients``: targets x
    C values, target-major. Raises InvalidDtype, InvalidRank, InvalidAttribute,
    FeatureCountMismatch. Source: ONNX operator spec, ai.onnx.ml LinearRegressor-1."""
    shape, _ = _features(ctx)
    lin = _linear(ctx)
    n = shape[0] if len(shape) == 2 else 1
    return [(n, lin.weights.shape[1])]


@lib.kernel("LinearRegressor", domain=DOMAIN, prepare=_linear)
def _linear_regressor(inputs, outputs, lin: _Linear):
    x = inputs[0].astype(_F32, copy=False).reshape(-1, lin.weights.shape[0])
    y = outputs[0]
    np.matmul(x, lin.weights, out=y)
    y += lin.intercepts
    if lin.post:
        y[...] = post_transform(y.astype(np.float64), lin.post)
