"""The loop of SVMClassifier's class probabilities (ai.onnx.ml): each sample's pairwise
decision values coupled into class probabilities, onnxruntime's ``sigmoid_probability`` and
``multiclass_probability`` (libsvm's method 2 of Wu, Lin and Weng) step by step in float32, one
sample after the other; the kernel is :mod:`dynashape.ops_fast.svm`. The numpy kernel
(``ops_builtin.ml_svm._couple``) runs the same steps over all the samples that have not
converged at once: per sample the arithmetic is the same, and the logistic's exp is LLVM's
here (an ulp from numpy's)."""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import JIT

_F32 = np.float32
_ONE, _TWO = _F32(1), _F32(2)
_LOW = _F32(1e-7)
_HIGH = _F32(1) - _F32(1e-7)
#: the most iterations (onnxruntime's max_iter)
_ITERATIONS = 100


@njit(**JIT)
def couple(d, prob_a, prob_b, first, second, classes, out):
    """``out`` [N, K] float32: the class probabilities of the pairwise decision values ``d``
    [N, P] (float32; pair ``p`` of classes ``first[p]`` < ``second[p]``), with the sigmoids'
    ``prob_a`` / ``prob_b`` [P]."""
    k = classes
    r = np.zeros((k, k), _F32)
    q = np.zeros((k, k), _F32)
    qp = np.zeros(k, _F32)
    eps = _F32(0.005) / _F32(k)
    for n in range(d.shape[0]):
        for p in range(d.shape[1]):
            v = d[n, p] * prob_a[p] + prob_b[p]
            e = _ONE / (_ONE + np.exp(-abs(v)))
            pair = _ONE - (_ONE - e if v < 0 else e)
            pair = min(max(pair, _LOW), _HIGH)
            r[first[p], second[p]] = pair
            r[second[p], first[p]] = _ONE - pair
        for i in range(k):
            q[i, i] = _F32(0)
            for j in range(k):
                if j != i:
                    q[i, i] += r[j, i] * r[j, i]
        for i in range(k):
            for j in range(k):
                if j < i:
                    q[i, j] = q[j, i]
                elif j > i:
                    q[i, j] = -r[j, i] * r[i, j]
        for i in range(k):
            out[n, i] = _ONE / _F32(k)
        for _ in range(_ITERATIONS):
            pqp = _F32(0)
            for i in range(k):
                acc = _F32(0)
                for j in range(k):
                    acc += q[i, j] * out[n, j]
                qp[i] = acc
                pqp += out[n, i] * acc
            worst = _F32(0)
            for i in range(k):
                error = abs(qp[i] - pqp)
                if error > worst:          # (a NaN error counts as 0, as the numpy kernel's max)
                    worst = error
            if worst < eps:
                break
            for i in range(k):
                qii = q[i, i]
                diff = (-qp[i] + pqp) / qii
                out[n, i] += diff
                grow = _ONE + diff
                pqp = (pqp + diff * (diff * qii + _TWO * qp[i])) / grow / grow
                for j in range(k):
                    qp[j] = (qp[j] + diff * q[i, j]) / grow
                for j in range(k):
                    out[n, j] /= grow
