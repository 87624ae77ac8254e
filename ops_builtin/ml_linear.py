"""Linear models and preprocessing of the ``ai.onnx.ml`` domain: Scaler, Normalizer, Imputer,
LinearRegressor, LinearClassifier (what skl2onnx writes for StandardScaler/MinMaxScaler,
Normalizer, SimpleImputer, LinearRegression/Ridge/SGDRegressor and LogisticRegression/
SGDClassifier/LinearSVC/RidgeClassifier).

Inputs are [N, C] (one row per sample) or [C] (one sample); the feature count C is the last
dim, checked against the attributes (a guard where it is symbolic). Scaler, Normalizer and
LinearRegressor compute in float32 and return float32, as onnxruntime's kernels do; Imputer
keeps the input's type.

The classifiers' scores go through :func:`classifier_transform`, onnxruntime's float32
post_transforms (``ml_common.h``), which the SVMs (:mod:`.ml_svm`) share.

Source: ONNX operator spec (Operators-ml.md): Scaler-1, Normalizer-1, Imputer-1,
LinearRegressor-1, LinearClassifier-1; onnxruntime's CPU kernels
(onnxruntime/core/providers/cpu/ml) where the spec leaves a case open (a zero norm, a 1-D
regressor input, a binary classifier's second score): docs/CONFORMANCE.md.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from dynashape.records import OpLibrary, fixed_dtype, same_dtype
from dynashape.shapes import require

from .ml import POST_TRANSFORMS, post_transform
from .reduction import trailing_sums

DOMAIN = "ai.onnx.ml"
lib = OpLibrary()
_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)
_STRING = np.dtype(object)
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


def _post_code(ctx) -> int:
    """post_transform's code in POST_TRANSFORMS (a name the spec lists, or InvalidAttribute)."""
    post = ctx.attr("post_transform", "NONE")
    post = post.decode() if isinstance(post, bytes) else str(post)
    if post not in POST_TRANSFORMS:
        ctx.fail(f"post_transform '{post}' is not one of {list(POST_TRANSFORMS)}", kind="InvalidAttribute")
    return POST_TRANSFORMS.index(post)


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


#: rows up to this many columns take their max column by column (numpy's reduction over a
#: short last axis is a slow pass: ~25 us for 1000 rows of 3, against 3 vector maxima of ~1 us)
SHORT_ROWS = 16


def row_max(z: np.ndarray) -> np.ndarray:
    """Each row's largest value of a 2-D array with at least one column, as [N, 1] (NaN
    propagates, as ``max``)."""
    if z.shape[1] > SHORT_ROWS:
        return z.max(axis=1, keepdims=True)
    top = z[:, 0].copy()
    for j in range(1, z.shape[1]):
        np.maximum(top, z[:, j], out=top)
    return top[:, None]


#: from this many elements a row sum is one BLAS product (below, numpy's sum costs less)
BLAS_ROW_SUM = 4096


def row_sum(z: np.ndarray) -> np.ndarray:
    """Each row's sum of a 2-D float array, as [N, 1]: short rows (at most SHORT_ROWS
    columns) one column after the other, left to right as onnxruntime's loops add (numpy's
    reduction along a short axis is a slow pass: 1000 x 3, 20 against 4 us); else one BLAS
    product where it applies."""
    if 0 < z.shape[1] <= SHORT_ROWS:
        total = z[:, 0].copy()
        for j in range(1, z.shape[1]):
            total += z[:, j]
        return total[:, None]
    sums = trailing_sums(np.ascontiguousarray(z)) if z.size >= BLAS_ROW_SUM else None
    return sums if sums is not None else np.add.reduce(z, axis=1, keepdims=True)   # (z.sum: ~2 us more)


@lib.kernel("Normalizer", domain=DOMAIN, prepare=_norm)
def _normalizer(inputs, outputs, norm: str):
    x = inputs[0].astype(_F32, copy=False)
    rows = x.reshape(-1, x.shape[-1])      # (X is [N, C] or [C]: the rule takes no other rank)
    if norm == "MAX":
        scale = row_max(rows) if rows.shape[1] else np.zeros((rows.shape[0], 1), _F32)
    elif norm == "L1":
        scale = row_sum(np.abs(rows))
    else:
        scale = np.sqrt(row_sum(np.square(rows)))
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
    return _Linear(np.ascontiguousarray(coef.reshape(targets, -1).T), intercepts, _post_code(ctx))


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


# LinearClassifier ------------------------------------------------------------------------

def class_labels(ctx) -> np.ndarray:
    """The classifier's labels: ``classlabels_ints`` (int64) or ``classlabels_strings``
    (object array of str); exactly one must be given and not empty (MissingAttribute,
    InvalidAttribute otherwise)."""
    ints, strings = ctx.attr("classlabels_ints"), ctx.attr("classlabels_strings")
    given = [name for name, v in (("classlabels_ints", ints), ("classlabels_strings", strings))
             if v is not None and len(v)]
    if len(given) != 1:
        ctx.fail("exactly one of classlabels_ints and classlabels_strings must be given (and not empty), got "
                 f"{', '.join(given) or 'neither'}", kind="MissingAttribute" if not given else "InvalidAttribute")
    if given[0] == "classlabels_ints":
        return np.asarray(ints, dtype=np.int64).reshape(-1)
    texts = [v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v) for v in strings]
    out = np.empty(len(texts), dtype=object)
    out[:] = texts
    return out


def label_dtype(ctx):
    """infer_dtype of a classifier: Y int64 or string (the labels' type), Z float32."""
    strings = ctx.attr("classlabels_strings")
    return [_STRING if strings is not None and len(strings) else _I64, _F32][:max(ctx.num_outputs, 1)]


def write_labels(out, labels: np.ndarray, index: np.ndarray):
    """``labels[index]`` into the planned output ``out`` (or returned when it is None)."""
    if out is None:
        return labels[index]
    if out.dtype == labels.dtype != object and out.flags.c_contiguous and out.shape == index.shape:
        labels.take(index, out=out)        # (the method: np.take's wrapper costs ~1 us a call)
    else:
        out[...] = labels[index]
    return out


def first_argmax(scores: np.ndarray) -> np.ndarray:
    """Each row's first largest column, as onnxruntime's loops find it (``s > best``): a NaN
    in column 0 keeps column 0, a NaN elsewhere is never chosen."""
    if scores.shape[1] == 0:
        return np.zeros(scores.shape[0], np.intp)
    if not np.isnan(scores).any():     # (numpy's argmax picks a row's first NaN: only then the slow way)
        return scores.argmax(axis=1)
    first = np.where(np.isnan(scores[:, :1]), np.inf, scores[:, :1])
    rest = np.where(np.isnan(scores[:, 1:]), -np.inf, scores[:, 1:])
    return np.argmax(np.concatenate([first, rest], axis=1), axis=1)


def logistic32(s: np.ndarray) -> np.ndarray:
    """onnxruntime's ComputeLogistic in float32: ``1 / (1 + exp(-|s|))``, mirrored for s < 0."""
    v = np.float32(1) / (np.float32(1) + np.exp(-np.abs(s)))
    return np.where(s < 0, np.float32(1) - v, v)


def logistic_pair(s: np.ndarray, z: np.ndarray) -> None:
    """``z[:, 0], z[:, 1] = logistic32(-s), logistic32(s)`` from one exp: both are ``e`` or
    ``1 - e`` of ``e = 1 / (1 + exp(-|s|))`` (-0 and 0 both give e)."""
    e = np.abs(s)
    np.negative(e, out=e)
    np.exp(e, out=e)
    e += np.float32(1)
    np.divide(np.float32(1), e, out=e)
    other = np.float32(1) - e
    np.copyto(z[:, 1], e)
    np.copyto(z[:, 1], other, where=s < 0)
    np.copyto(z[:, 0], e)
    np.copyto(z[:, 0], other, where=s > 0)


def probit32(s: np.ndarray) -> np.ndarray:
    """onnxruntime's ComputeProbit in float32: sqrt(2) * erfinv(2 s - 1), erfinv by Winitzki's
    approximation (a = 0.147); 0 and 1 give -inf and inf, outside [0, 1] NaN."""
    f = np.float32
    x = f(2) * s - f(1)
    sgn = np.where(x < 0, f(-1), f(1))
    log = np.log((f(1) - x) * (f(1) + x))
    v = f(2) / (f(np.pi) * f(0.147)) + f(0.5) * log
    v3 = -v + np.sqrt(v * v - f(1) / f(0.147) * log)
    return f(np.sqrt(2)) * (sgn * np.sqrt(v3))


def classifier_transform(z: np.ndarray, post: int) -> None:
    """Apply post_transform ``post`` (code in POST_TRANSFORMS) in place to the float32 scores
    ``z`` [N, E], E >= 2, row by row as onnxruntime's classifiers do (``ml_common.h``):
    SOFTMAX ``exp(s - max) / sum``; LOGISTIC and PROBIT per score; SOFTMAX_ZERO a softmax
    over the scores of magnitude > 1e-7 that leaves the others ~0 (a row of zeros is NaN, 0/0,
    as onnxruntime)."""
    if post == 0 or z.size == 0:
        return
    f = np.float32
    if post == 1:
        np.subtract(z, row_max(z), out=z)
        np.exp(z, out=z)
        np.divide(z, row_sum(z), out=z)
    elif post == 2:
        z[...] = logistic32(z)
    elif post == 3:
        top = np.maximum(row_max(z), f(-np.finfo(np.float32).max))
        big = (z > f(1e-7)) | (z < f(-1e-7))
        e = np.where(big, np.exp(z - top), z * np.exp(-top))
        np.divide(e, np.where(big, e, f(0)).sum(axis=1, keepdims=True), out=z)
    else:
        z[...] = probit32(z)


class _LinearClassifier(NamedTuple):
    weights: np.ndarray      # (C, E), float32
    intercepts: np.ndarray   # (E,), float32
    labels: np.ndarray       # int64 or object (str)
    binary: bool             # one coefficient row, two labels: Z gets two columns
    post: int


def _linear_classifier(ctx) -> _LinearClassifier:
    _, c = _features(ctx)
    labels = class_labels(ctx)
    coef = np.asarray(ctx.attr("coefficients") or [], np.float32).reshape(-1)
    if coef.size == 0:
        ctx.fail("attribute 'coefficients' is required (classes x features values)", kind="MissingAttribute")
    given = ctx.attr("intercepts")
    targets = len(given) if given is not None and len(given) else labels.size
    if labels.size != (2 if targets == 1 else targets):
        ctx.fail(f"{labels.size} class labels for {targets} coefficient rows (intercepts): expected one label "
                 "per row, or two for a single row (binary)", kind="InvalidAttribute")
    if coef.size % targets:
        ctx.fail(f"coefficients has {coef.size} values: expected classes ({targets}) x features",
                 kind="InvalidAttribute")
    if isinstance(c, int) and coef.size > c * targets:
        coef = _leading_coefficients(ctx, coef, c, targets)
    require(ctx, c * targets, "==", coef.size, f"coefficients has {coef.size} values, X has {c} features and "
            f"{targets} class(es)", "FeatureCountMismatch")
    intercepts = (np.asarray(given, np.float32).reshape(-1) if given is not None and len(given)
                  else np.zeros(targets, np.float32))
    return _LinearClassifier(np.ascontiguousarray(coef.reshape(targets, -1).T), intercepts, labels,
                             targets == 1, _post_code(ctx))


def _leading_coefficients(ctx, coef: np.ndarray, c: int, targets: int) -> np.ndarray:
    """The first ``targets x c`` coefficients, where a model has more than its X's ``c``
    features take (the spec is silent; onnxruntime reads those and ignores the rest, and its
    own example ``logreg_iris.onnx``, 12 values for 3 classes of 2 features, relies on it),
    with a RuntimeWarning: the model was most likely exported for more features."""
    import warnings
    node = ctx.node.name or "<unnamed>"
    warnings.warn(f"LinearClassifier node '{node}': coefficients has {coef.size} values for {targets} class(es) "
                  f"of {c} features; the first {c * targets} are used (as onnxruntime does)",
                  RuntimeWarning, stacklevel=2)
    return coef[:c * targets]


@lib.op("LinearClassifier", since_version=1, domain=DOMAIN, infer_dtype=label_dtype)
def _linear_classifier_shape(ctx):
    """LinearClassifier: scores ``S = X @ coefficients^T + intercepts`` (float32), labels from S.

    X [N, C] (or [C]: one sample, N = 1), any of float/double/int64/int32 (computed in float32).
    Outputs Y [N] (``classlabels_ints`` int64 or ``classlabels_strings`` string: exactly one
    given) and Z [N, E] float32. ``coefficients``: E x C values, class-major (more: the first E
    x C, with a RuntimeWarning, as onnxruntime reads them); ``intercepts``: E values (absent: E
    is the number of labels, intercepts 0; onnxruntime wants them). E > 1: Y is the label of
    each row's first largest score, Z the scores after ``post_transform``. One row (E = 1) with
    two labels (binary): Y is label 1 where S > 0, else label 0; Z is [N, 2] derived from s = S
    as onnxruntime does: NONE, SOFTMAX, SOFTMAX_ZERO ``[1 - s, s]``, LOGISTIC ``[1 -
    logistic(s), logistic(s)]``, PROBIT ``[-probit(s), probit(s)]`` (onnxruntime leaves half of
    Z unwritten there). ``multi_class`` is read by no engine. Raises InvalidDtype, InvalidRank,
    MissingAttribute, InvalidAttribute (label count, coefficient count, post_transform),
    FeatureCountMismatch. Source: ONNX operator spec, ai.onnx.ml LinearClassifier-1; onnxruntime
    linearclassifier.cc, ml_common.h.
    """
    shape, _ = _features(ctx)
    lc = _linear_classifier(ctx)
    n = shape[0] if len(shape) == 2 else 1
    return [(n,), (n, 2 if lc.binary else lc.weights.shape[1])]


@lib.kernel("LinearClassifier", domain=DOMAIN, prepare=_linear_classifier)
def _linear_classifier_kernel(inputs, outputs, lc: _LinearClassifier):
    x = inputs[0].astype(_F32, copy=False).reshape(-1, lc.weights.shape[0])
    scores = np.matmul(x, lc.weights)
    scores += lc.intercepts
    z = outputs[1] if len(outputs) > 1 else None
    if lc.binary:
        s = scores[:, 0]
        y = write_labels(outputs[0], lc.labels, (s > 0).astype(np.intp))
        if z is not None:
            if lc.post == 2:      # LOGISTIC: onnxruntime's ComputeLogistic of -s and s
                logistic_pair(s, z)
            elif lc.post == 4:    # PROBIT (onnxruntime: half of Z unwritten): the negated score first
                z[:, 1] = probit32(s)
                np.negative(z[:, 1], out=z[:, 0])
            else:                 # onnxruntime writes [1 - s, s] unchanged for the other transforms
                np.subtract(np.float32(1), s, out=z[:, 0])
                z[:, 1] = s
    else:
        y = write_labels(outputs[0], lc.labels, first_argmax(scores))
        if z is not None:
            np.copyto(z, scores)
            classifier_transform(z, lc.post)
    return None if outputs[0] is not None else [y, z]
