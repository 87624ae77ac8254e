"""The loops of LinearClassifier and Normalizer (ai.onnx.ml). LinearClassifier: per sample the
scores ``x @ W + b``, the label of the first largest score (or of the score's sign, binary), and
the scores after the post transform, in one pass in float32; Normalizer: per row its norm and
the row divided by it. The kernels are :mod:`dynashape.ops_builtin.fast.ml_linear`. The numpy
kernel (``ops_builtin.ml_linear``) takes a dozen array calls for the same steps, which at batch
1 cost ~4x onnxruntime's whole model. The products sum in the features' order (numpy's BLAS
sums in its own: the scores agree within float32 rounding), the exp is LLVM's (an ulp from
numpy's)."""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import JIT

#: the dot products: lanes and fused multiply-adds (reassociated: within float32 rounding)
_DOT_JIT = dict(JIT, fastmath={"reassoc", "contract"})

_F32 = np.float32
_ONE = _F32(1)
#: post_transform codes the loop computes (ml_linear.POST_TRANSFORMS): NONE, SOFTMAX, LOGISTIC;
#: binary: SOFTMAX_ZERO too (its two scores are those of NONE)
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO = 0, 1, 2, 3


@njit(inline="always", **JIT)
def _logistic(s):
    """onnxruntime's ComputeLogistic in float32: ``1 / (1 + exp(-|s|))``, mirrored for s < 0."""
    v = _ONE / (_ONE + np.exp(-abs(s)))
    return _ONE - v if s < 0 else v


@njit(**_DOT_JIT)
def scores(x, wt, b, z):
    """``z`` [N, E] = ``x`` [N, C] @ ``wt``.T + ``b``: ``wt`` [E, C] the transposed weights."""
    n, c = x.shape
    for r in range(n):
        for k in range(wt.shape[0]):
            acc = _F32(0)
            for j in range(c):
                acc += x[r, j] * wt[k, j]
            z[r, k] = acc + b[k]


@njit(**JIT)
def classify(x, wt, b, labels, post, y, z):
    """``y`` [N] int64 the labels, ``z`` [N, E] float32 the transformed scores (E > 1) of ``x``
    [N, C] float32 with the transposed weights ``wt`` [E, C] and intercepts ``b`` [E]; ``post``
    NONE, SOFTMAX or LOGISTIC. The label is the first largest score's (``s > best``: a NaN
    never wins, but a NaN first score keeps label 0), as onnxruntime's loop picks it."""
    scores(x, wt, b, z)
    e = wt.shape[0]
    for r in range(x.shape[0]):
        best, top = z[r, 0], 0
        for k in range(1, e):
            if z[r, k] > best:
                best, top = z[r, k], k
        y[r] = labels[top]
        if post == SOFTMAX:
            m = z[r, 0]
            for k in range(1, e):
                if z[r, k] > m or np.isnan(z[r, k]):     # (a NaN score makes the row NaN, as numpy's max)
                    m = z[r, k]
            total = _F32(0)
            for k in range(e):
                z[r, k] = np.exp(z[r, k] - m)
                total += z[r, k]
            for k in range(e):
                z[r, k] = z[r, k] / total
        elif post == LOGISTIC:
            for k in range(e):
                z[r, k] = _logistic(z[r, k])


@njit(**JIT)
def classify_binary(x, wt, b, labels, post, y, z):
    """One coefficient row ``wt`` [1, C], two labels: ``y[r]`` labels[1] where the score ``s``
    > 0, else labels[0]; ``z`` [N, 2]: LOGISTIC ``[logistic(-s), logistic(s)]`` (from one
    exp), otherwise ``[1 - s, s]``, as onnxruntime writes them (the score goes through z[:, 1])."""
    scores(x, wt, b, z[:, 1:])
    for r in range(x.shape[0]):
        s = z[r, 1]
        y[r] = labels[1] if s > 0 else labels[0]
        if post == LOGISTIC:
            v = _ONE / (_ONE + np.exp(-abs(s)))
            z[r, 1] = _ONE - v if s < 0 else v
            z[r, 0] = _ONE - v if s > 0 else v
        else:
            z[r, 0] = _ONE - s
            z[r, 1] = s


#: Normalizer's norms
MAX, L1, L2 = 0, 1, 2


@njit(**JIT)
def normalize(x, norm, y):
    """``y`` [N, C] = each row of ``x`` [N, C] float32 divided by its norm: MAX its largest value
    (NaN propagates), L1 the sum of the absolute values, L2 the square root of the sum of the
    squares, summed left to right as onnxruntime's loop; a row whose norm is 0 is copied as it is."""
    n, c = x.shape
    for r in range(n):
        if norm == MAX:
            scale = x[r, 0] if c else _F32(0)
            for j in range(1, c):
                if x[r, j] > scale or np.isnan(x[r, j]):
                    scale = x[r, j]
        else:
            scale = _F32(0)
            for j in range(c):
                scale += abs(x[r, j]) if norm == L1 else x[r, j] * x[r, j]
            if norm == L2:
                scale = np.sqrt(scale)
        for j in range(c):
            y[r, j] = x[r, j] / scale if scale != 0 else x[r, j]
