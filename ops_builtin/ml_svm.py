"""Support vector machines of the ``ai.onnx.ml`` domain: SVMClassifier, SVMRegressor (what
skl2onnx writes for SVC/NuSVC, SVR/NuSVR/OneClassSVM).

Both ops run in one of two modes, as onnxruntime's kernels do: with support vectors (libsvm:
``vectors_per_class`` / ``n_supports`` > 0) the kernel matrix K [N, V] of the samples
against the support vectors is one matmul (RBF: ``|x|^2 - 2 x.sv + |sv|^2``), and every
pairwise (one-vs-one) decision value is a column of one more matmul, ``K @ W + rho``, where
``W`` [V, P] holds each pair's dual coefficients; without (liblinear) the scores are
``X @ coefficients^T + rho[0]``. Kernels and decision values are computed in float64 from
the float32 input (onnxruntime casts X to float32, then works in float32) and handed back
in float32.

SVMClassifier's probabilities (``prob_a`` / ``prob_b``) are libsvm's: Platt's sigmoid of
each pair's decision value, then the pairwise coupling of Wu, Lin and Weng (2004, method 2)
that onnxruntime runs (``multiclass_probability`` in ``ml_common.h``): its iterations are
emulated in float32, operation by operation, for all rows at once (a loop over iterations
and classes, each step vectorised over the rows still iterating).

Source: ONNX operator spec (Operators-ml.md), SVMClassifier-1, SVMRegressor-1; onnxruntime's
CPU kernels (onnxruntime/core/providers/cpu/ml/svmclassifier.cc, svmregressor.cc,
svmclassifier.h, ml_common.h) where the spec is silent (score layout, the binary cases,
labels): docs/CONFORMANCE.md.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
from dynashape.records import OpLibrary, fixed_dtype
from dynashape.shapes import require

from .ml import post_transform
from .ml_linear import (_features, _post_code, class_labels, classifier_transform, first_argmax, label_dtype,
                        logistic32, logistic_pair, probit32, write_labels)

DOMAIN = "ai.onnx.ml"
lib = OpLibrary()
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")
_LINEAR, _POLY, _RBF, _SIGMOID = range(4)


# the kernel ---------------------------------------------------------------------------------

class _Kernel(NamedTuple):
    kind: int               # index in KERNELS
    gamma: float
    coef0: float
    degree: float
    sv: np.ndarray          # (V, C) float64 (the float32 support vectors)
    sv_sq: np.ndarray       # (V,) their squared norms (RBF)


def _floats(ctx, name: str) -> np.ndarray:
    return np.asarray(ctx.attr(name) or [], np.float32).reshape(-1)


def _kernel_attrs(ctx) -> tuple:
    """(kernel index in KERNELS, gamma, coef0, degree) of ``kernel_type`` and
    ``kernel_params`` ([gamma, coef0, degree]; absent: zeros), checked."""
    kind = ctx.attr("kernel_type", "LINEAR")
    kind = kind.decode() if isinstance(kind, bytes) else str(kind)
    if kind not in KERNELS:
        ctx.fail(f"kernel_type '{kind}' is not one of {list(KERNELS)}", kind="InvalidAttribute")
    params = _floats(ctx, "kernel_params")
    if params.size not in (0, 3):
        ctx.fail(f"kernel_params has {params.size} values, expected 3 (gamma, coef0, degree)", kind="InvalidAttribute")
    gamma, coef0, degree = (float(v) for v in params) if params.size else (0.0, 0.0, 0.0)
    return KERNELS.index(kind), gamma, coef0, degree


def _kernel(ctx, support_vectors: np.ndarray, vectors: int) -> _Kernel:
    """The kernel over ``support_vectors`` (``vectors`` rows)."""
    sv = support_vectors.astype(_F64).reshape(vectors, -1)
    return _Kernel(*_kernel_attrs(ctx), sv, np.einsum("ij,ij->i", sv, sv))


def _kernel_matrix(k: _Kernel, x: np.ndarray) -> np.ndarray:
    """K [N, V] (float64) of the float32 samples ``x`` [N, C] against the support vectors:
    LINEAR ``x.sv``, POLY ``(gamma x.sv + coef0)^degree``, RBF ``exp(-gamma |x - sv|^2)``,
    SIGMOID ``tanh(gamma x.sv + coef0)`` (onnxruntime: LINEAR ignores gamma and coef0)."""
    x = x.astype(_F64)
    dot = x @ k.sv.T
    if k.kind == _LINEAR:
        return dot
    if k.kind == _RBF:
        dot *= -2.0
        dot += np.einsum("ij,ij->i", x, x)[:, None]
        dot += k.sv_sq
        np.maximum(dot, 0.0, out=dot)        # (rounding of the expanded square: never below 0)
        dot *= -k.gamma
        return np.exp(dot, out=dot)
    dot *= k.gamma
    dot += k.coef0
    if k.kind == _SIGMOID:
        return np.tanh(dot, out=dot)
    if k.degree == 2:
        return np.square(dot, out=dot)
    if k.degree == 3:
        return dot * dot * dot
    return np.power(dot, k.degree, out=dot)


def _rho(ctx, count: int, what: str) -> np.ndarray:
    """``rho``: ``count`` values (absent: zeros)."""
    rho = _floats(ctx, "rho")
    if rho.size == 0:
        return np.zeros(count, _F64)
    if rho.size != count:
        ctx.fail(f"rho has {rho.size} values, expected {count} ({what})", kind="InvalidAttribute")
    return rho.astype(_F64)


def _support_vectors(ctx, vectors: int, c) -> np.ndarray:
    """``support_vectors``: ``vectors`` x C values, checked against X's C features."""
    sv = _floats(ctx, "support_vectors")
    if vectors == 0:
        if sv.size:
            ctx.fail(f"support_vectors has {sv.size} values but no support vector is counted "
                     "(vectors_per_class / n_supports)", kind="InvalidAttribute")
        return sv
    if sv.size == 0 or sv.size % vectors:
        ctx.fail(f"support_vectors has {sv.size} values: expected {vectors} support vectors x features",
                 kind="InvalidAttribute")
    require(ctx, c * vectors, "==", sv.size, f"support_vectors has {sv.size} values, X has {c} features and there "
            f"are {vectors} support vectors", "FeatureCountMismatch")
    return sv


def _coefficients(ctx) -> np.ndarray:
    coef = _floats(ctx, "coefficients")
    if coef.size == 0:
        ctx.fail("attribute 'coefficients' is required", kind="MissingAttribute")
    return coef


def _rows(x: np.ndarray, features: int) -> np.ndarray:
    """X as float32 rows [N, C] (a 1-D X is one sample), as onnxruntime casts it."""
    return x.astype(_F32, copy=False).reshape(-1, features)


# SVMClassifier ------------------------------------------------------------------------------

class _Classifier(NamedTuple):
    kernel: Optional[_Kernel]   # None: liblinear mode (scores X @ coefficients^T + rho[0])
    features: int
    weights: np.ndarray         # liblinear: (C, K); libsvm: (V, P), each pair's dual coefficients
    rho: np.ndarray             # liblinear: (1,); libsvm: (P,)
    votes_i: np.ndarray         # (P, K) one-hot: the first class of each pair (its vote where the value > 0)
    votes_j: np.ndarray         # (P, K) the second
    pairs: tuple                # ((i, j), ...) in onnxruntime's order
    prob_a: Optional[np.ndarray]    # (P,) float32 (libsvm mode with probabilities)
    prob_b: Optional[np.ndarray]
    has_proba: bool             # prob_a given (liblinear mode: only the binary label rule reads it)
    labels: np.ndarray
    all_positive: bool          # every coefficient >= 0 (the liblinear binary label rule)
    post: int
    width: int                  # Z's columns


def _classifier(ctx) -> _Classifier:
    _, c = _features(ctx)
    labels = class_labels(ctx)
    k = labels.size
    coef = _coefficients(ctx)
    prob_a, prob_b = _floats(ctx, "prob_a"), _floats(ctx, "prob_b")
    if prob_a.size != prob_b.size:
        ctx.fail(f"prob_a has {prob_a.size} values and prob_b {prob_b.size}: they must have the same length",
                 kind="InvalidAttribute")
    per_class = [int(v) for v in (ctx.attr("vectors_per_class") or [])]
    if any(v < 0 for v in per_class):
        ctx.fail(f"vectors_per_class {per_class} has a negative count", kind="InvalidAttribute")
    vectors = sum(per_class)
    post = _post_code(ctx)
    all_positive = bool((coef >= 0).all())
    none = np.zeros((0, k), _F64)
    if vectors == 0:                      # liblinear: one coefficient row per class (kernel_type unused)
        _kernel_attrs(ctx)
        _support_vectors(ctx, 0, c)
        if coef.size % k:
            ctx.fail(f"coefficients has {coef.size} values: expected classes ({k}) x features "
                     "(no support vectors: a linear model)", kind="InvalidAttribute")
        require(ctx, c * k, "==", coef.size, f"coefficients has {coef.size} values, X has {c} features and there "
                f"are {k} classes", "FeatureCountMismatch")
        weights = coef.astype(_F64).reshape(k, -1).T.copy()
        return _Classifier(None, coef.size // k, weights, _rho(ctx, 1, "one for a linear model"), none, none, (),
                           None, None, prob_a.size > 0, labels, all_positive, post, k)
    if len(per_class) != k:
        ctx.fail(f"vectors_per_class has {len(per_class)} counts for {k} classes", kind="InvalidAttribute")
    if k < 2:
        ctx.fail("a classifier with support vectors needs at least 2 classes", kind="InvalidAttribute")
    pairs = tuple((i, j) for i in range(k) for j in range(i + 1, k))
    if coef.size != (k - 1) * vectors:
        ctx.fail(f"coefficients has {coef.size} values, expected (classes - 1) x support vectors = "
                 f"{k - 1} x {vectors}", kind="InvalidAttribute")
    if prob_a.size not in (0, len(pairs)):
        ctx.fail(f"prob_a and prob_b have {prob_a.size} values, expected one per pair of classes ({len(pairs)})",
                 kind="InvalidAttribute")
    sv = _support_vectors(ctx, vectors, c)
    coef = coef.astype(_F64).reshape(k - 1, vectors)
    start = np.concatenate([[0], np.cumsum(per_class)])
    weights = np.zeros((vectors, len(pairs)), _F64)
    for p, (i, j) in enumerate(pairs):     # (libsvm: class i's vectors weigh coef[j - 1], class j's coef[i])
        weights[start[i]:start[i + 1], p] = coef[j - 1, start[i]:start[i + 1]]
        weights[start[j]:start[j + 1], p] = coef[i, start[j]:start[j + 1]]
    eye = np.eye(k, dtype=_F64)
    has_proba = prob_a.size > 0
    width = k if has_proba else (len(pairs) if k > 2 else 2)
    return _Classifier(_kernel(ctx, sv, vectors), sv.size // vectors, weights,
                       _rho(ctx, len(pairs), "one per pair of classes"), eye[[i for i, _ in pairs]],
                       eye[[j for _, j in pairs]], pairs, prob_a if has_proba else None,
                       prob_b if has_proba else None, has_proba, labels, all_positive, post, width)


@lib.op("SVMClassifier", since_version=1, domain=DOMAIN, infer_dtype=label_dtype)
def _svm_classifier_shape(ctx):
    """SVMClassifier: X [N, C] (or [C]: one sample) of float/double/int64/int32 -> Y [N] labels
    (``classlabels_ints`` int64 or ``classlabels_strings`` string: exactly one) and Z [N, E]
    float32.

    With support vectors (``vectors_per_class``: one count per class, ``support_vectors``
    V x C, ``coefficients`` (K - 1) x V, ``rho`` one per pair of classes, ``kernel_type`` and
    ``kernel_params`` [gamma, coef0, degree]) each pair (i, j), i < j, has the decision value
    ``d = sum coef[j-1, class i's vectors] K + sum coef[i, class j's vectors] K + rho``; Y is
    the label with most votes (i where d > 0, else j; first on ties). Z: without ``prob_a`` /
    ``prob_b``, the P = K (K - 1) / 2 decision values after ``post_transform`` (two classes:
    E = 2, ``[-d, d]`` with NONE, ``[logistic(-d), logistic(d)]`` with LOGISTIC, ``[1 - d,
    d]`` with SOFTMAX and SOFTMAX_ZERO, ``[probit(d), -probit(d)]`` with PROBIT, where
    onnxruntime leaves the second unwritten); with them, the
    K class probabilities (Platt's ``1 - logistic(d a + b)`` clipped to [1e-7, 1 - 1e-7], then
    the pairwise coupling) after ``post_transform``.

    Without support vectors (liblinear), ``coefficients`` K x C: Z = ``X @ coefficients^T +
    rho[0]`` after ``post_transform`` (one class: PROBIT only), Y the label of the first largest
    score; two classes without probabilities: label 1 where the largest score is > 0 (>= 0.5
    when every coefficient is >= 0), as onnxruntime.

    Absent ``rho`` and ``kernel_params`` are zeros (onnxruntime requires them). Raises
    InvalidDtype, InvalidRank, MissingAttribute, InvalidAttribute (counts that do not match,
    kernel_type, post_transform), FeatureCountMismatch. Source: ONNX operator spec, ai.onnx.ml
    SVMClassifier-1; onnxruntime svmclassifier.cc, ml_common.h.
    """
    shape, _ = _features(ctx)
    m = _classifier(ctx)
    n = shape[0] if len(shape) == 2 else 1
    return [(n,), (n, m.width)]


def _couple(d: np.ndarray, m: _Classifier) -> np.ndarray:
    """The class probabilities [N, K] (float32) of the pairwise decision values ``d`` [N, P]:
    onnxruntime's sigmoid_probability and multiclass_probability, step by step in float32."""
    f = np.float32
    k, n = m.labels.size, d.shape[0]
    pair = f(1) - logistic32(d * m.prob_a + m.prob_b)
    pair = np.minimum(np.maximum(pair, f(1e-7)), f(1) - f(1e-7))
    r = np.zeros((n, k, k), _F32)
    for p, (i, j) in enumerate(m.pairs):
        r[:, i, j] = pair[:, p]
        r[:, j, i] = f(1) - pair[:, p]
    q = np.zeros((n, k, k), _F32)
    for i in range(k):
        for j in range(k):
            if j != i:
                q[:, i, i] += r[:, j, i] * r[:, j, i]
            if j < i:
                q[:, i, j] = q[:, j, i]
            elif j > i:
                q[:, i, j] = -r[:, j, i] * r[:, i, j]
    prob = np.full((n, k), f(1) / f(k), _F32)
    eps = f(0.005) / f(k)
    active = np.arange(n)
    for _ in range(100):
        p, qq = prob[active], q[active]
        qp = np.zeros_like(p)
        pqp = np.zeros(p.shape[0], _F32)
        for i in range(k):
            acc = np.zeros(p.shape[0], _F32)
            for j in range(k):
                acc += qq[:, i, j] * p[:, j]
            qp[:, i] = acc
            pqp += p[:, i] * acc
        error = np.abs(qp - pqp[:, None])
        keep = ~(np.where(np.isnan(error), f(0), error).max(axis=1, initial=f(0)) < eps)
        active, p, qq, qp, pqp = active[keep], p[keep], qq[keep], qp[keep], pqp[keep]
        if active.size == 0:
            break
        for i in range(k):
            qii = qq[:, i, i]
            diff = (-qp[:, i] + pqp) / qii
            p[:, i] += diff
            grow = f(1) + diff
            pqp = (pqp + diff * (diff * qii + f(2) * qp[:, i])) / grow / grow
            qp = (qp + diff[:, None] * qq[:, i, :]) / grow[:, None]
            p /= grow[:, None]
        prob[active] = p
    return prob


@lib.kernel("SVMClassifier", domain=DOMAIN, prepare=_classifier)
def _svm_classifier(inputs, outputs, m: _Classifier):
    return classify(inputs, outputs, m)


def decisions(m: _Classifier, x: np.ndarray) -> np.ndarray:
    """d [N, P] float32: each pair's decision value ``K(x, sv) @ weights + rho`` (float64,
    then rounded) for the float32 samples ``x`` [N, C] (libsvm mode)."""
    return (_kernel_matrix(m.kernel, x) @ m.weights + m.rho).astype(_F32)


def elect(m: _Classifier, d: np.ndarray) -> np.ndarray:
    """The index of each sample's class with the most pairwise wins (d > 0: the pair's first
    class, else its second; the first of the most votes)."""
    positive = d > 0
    return np.argmax(positive @ m.votes_i + (~positive) @ m.votes_j, axis=1)


def classify(inputs, outputs, m: _Classifier, couple=_couple, decide=decisions, vote=elect):
    """The SVMClassifier kernel: in libsvm mode the decision values from ``decide(m, x)``, the
    winners from ``vote(m, d)``, the class probabilities from ``couple(d, m)`` (the contracts
    of :func:`decisions`, :func:`elect` and :func:`_couple`: the compiled kernel,
    ``fast.svm``, passes its loops)."""
    x = _rows(inputs[0], m.features)
    z = outputs[1] if len(outputs) > 1 else None
    k = m.labels.size
    if m.kernel is None:
        scores = (x.astype(_F64) @ m.weights + m.rho[0]).astype(_F32)
        best = first_argmax(scores)
        if k == 2 and not m.has_proba:      # onnxruntime's binary rule on the largest score
            top = np.take_along_axis(scores, best[:, None], axis=1)[:, 0]
            second = (top >= 0.5) if m.all_positive else (top > 0)
            best = np.where(second, 1, best)
        y = write_labels(outputs[0], m.labels, best)
        if z is not None:
            np.copyto(z, scores)
            if k >= 2:
                classifier_transform(z, m.post)
            elif m.post == 4:
                z[...] = probit32(z)
        return None if outputs[0] is not None else [y, z]
    d = decide(m, x)
    y = write_labels(outputs[0], m.labels, vote(m, d))
    if z is not None:
        if m.prob_a is not None:
            np.copyto(z, couple(d, m))
            classifier_transform(z, m.post)
        elif k > 2:
            np.copyto(z, d)
            classifier_transform(z, m.post)
        else:
            s = d[:, 0]
            if m.post == 0:
                np.negative(s, out=z[:, 0])
                z[:, 1] = s
            elif m.post == 2:
                logistic_pair(s, z)
            elif m.post == 4:
                z[:, 0] = probit32(s)
                np.negative(z[:, 0], out=z[:, 1])
            else:
                np.subtract(np.float32(1), s, out=z[:, 0])
                z[:, 1] = s
    return None if outputs[0] is not None else [y, z]


# SVMRegressor -------------------------------------------------------------------------------

class _Regressor(NamedTuple):
    kernel: Optional[_Kernel]   # None: linear (Y = X @ coefficients + rho)
    features: int
    coef: np.ndarray            # (V,) or (C,), float64
    rho: float
    one_class: bool
    post: int


def _regressor(ctx) -> _Regressor:
    _, c = _features(ctx)
    coef = _coefficients(ctx)
    vectors = int(ctx.attr("n_supports", 0))
    if vectors < 0:
        ctx.fail(f"n_supports {vectors} must be >= 0", kind="InvalidAttribute")
    one_class, post = bool(ctx.attr("one_class", 0)), _post_code(ctx)
    rho = float(_rho(ctx, 1, "one")[0])
    if vectors == 0:
        _kernel_attrs(ctx)
        _support_vectors(ctx, 0, c)
        require(ctx, c, "==", coef.size, f"coefficients has {coef.size} values, X has {c} features "
                "(no support vectors: a linear model)", "FeatureCountMismatch")
        return _Regressor(None, coef.size, coef.astype(_F64), rho, one_class, post)
    if coef.size != vectors:
        ctx.fail(f"coefficients has {coef.size} values, expected one per support vector ({vectors})",
                 kind="InvalidAttribute")
    sv = _support_vectors(ctx, vectors, c)
    return _Regressor(_kernel(ctx, sv, vectors), sv.size // vectors, coef.astype(_F64), rho, one_class, post)


@lib.op("SVMRegressor", since_version=1, domain=DOMAIN, infer_dtype=fixed_dtype(np.float32))
def _svm_regressor_shape(ctx):
    """SVMRegressor: X [N, C] (or [C]: one sample) of float/double/int64/int32 -> Y [N, 1]
    float32, ``K(X, support_vectors) @ coefficients + rho[0]`` (``n_supports`` V > 0:
    ``support_vectors`` V x C, ``coefficients`` V, ``kernel_type`` / ``kernel_params`` as
    SVMClassifier) or ``X @ coefficients + rho[0]`` (V = 0: ``coefficients`` C), then
    ``post_transform`` (the spec; onnxruntime applies none); ``one_class``: Y is 1 where the
    score (before post_transform) is > 0, else -1. Absent ``rho`` / ``kernel_params`` are zeros
    (onnxruntime requires them). Raises InvalidDtype, InvalidRank, MissingAttribute,
    InvalidAttribute, FeatureCountMismatch. Source: ONNX operator spec, ai.onnx.ml
    SVMRegressor-1; onnxruntime svmregressor.cc.
    """
    shape, _ = _features(ctx)
    _regressor(ctx)
    return [(shape[0] if len(shape) == 2 else 1, 1)]


def scores(m: _Regressor, x: np.ndarray) -> np.ndarray:
    """The regressor's scores [N] float64 for the float32 samples ``x`` [N, C]."""
    base = _kernel_matrix(m.kernel, x) if m.kernel is not None else x.astype(_F64)
    return base @ m.coef + m.rho


@lib.kernel("SVMRegressor", domain=DOMAIN, prepare=_regressor)
def _svm_regressor(inputs, outputs, m: _Regressor):
    regress(inputs, outputs, m)


def regress(inputs, outputs, m: _Regressor, score_of=scores):
    """The SVMRegressor kernel with the scores from ``score_of(m, x)`` (:func:`scores`)."""
    score = score_of(m, _rows(inputs[0], m.features))
    y = outputs[0]
    if m.one_class:
        y[:, 0] = np.where(score > 0, 1.0, -1.0)
    elif m.post:
        y[...] = post_transform(score.astype(_F32).astype(_F64)[:, None], m.post)
    else:
        y[:, 0] = score
