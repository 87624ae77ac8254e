"""The loop of SVMClassifier's class probabilities (ai.onnx.ml): each sample's pairwise
decision values coupled into class probabilities, onnxruntime's ``sigmoid_probability`` and
``multiclass_probability`` (libsvm's method 2 of Wu, Lin and Weng) step by step in float32, one
sample after the other; the kernel is :mod:`dynashape.ops_builtin.fast.svm`. The numpy kernel
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


#: kernel_type codes (ops_builtin.ml_svm.KERNELS)
LINEAR, POLY, RBF, SIGMOID = 0, 1, 2, 3


@njit(**JIT)
def _kernel_row(x, sv, sv_sq, kind, gamma, coef0, degree, krow):
    """``krow`` [V] float64: the kernel of one float32 sample ``x`` [C] against each support
    vector ``sv`` [V, C] (float64), in the numpy kernel's formulas and order (RBF: the expanded
    square ``-2 x.sv + |x|^2 + |sv|^2``, never below 0)."""
    c = x.shape[0]
    x_sq = 0.0
    if kind == RBF:
        for j in range(c):
            x_sq += np.float64(x[j]) * np.float64(x[j])
    for v in range(sv.shape[0]):
        dot = 0.0
        for j in range(c):
            dot += np.float64(x[j]) * sv[v, j]
        if kind == LINEAR:
            krow[v] = dot
        elif kind == RBF:
            s = dot * -2.0 + x_sq + sv_sq[v]
            if s < 0.0:
                s = 0.0
            krow[v] = np.exp(s * -gamma)
        else:
            t = dot * gamma + coef0
            if kind == SIGMOID:
                krow[v] = np.tanh(t)
            elif degree == 2.0:
                krow[v] = t * t
            elif degree == 3.0:
                krow[v] = t * t * t
            else:
                krow[v] = t ** degree


@njit(**JIT)
def decisions(x, sv, sv_sq, kind, gamma, coef0, degree, weights, rho, d):
    """``d`` [N, P] float32 = ``K(x, sv) @ weights + rho`` for the float32 samples ``x`` [N, C]:
    per sample the kernel row (float64) and its products with each column of ``weights`` [V, P]
    (each pair's dual coefficients; one column for a regressor), summed over the support vectors
    in their order (numpy's BLAS sums in its own: within float64 rounding)."""
    krow = np.empty(sv.shape[0], np.float64)
    for r in range(x.shape[0]):
        _kernel_row(x[r], sv, sv_sq, kind, gamma, coef0, degree, krow)
        for p in range(weights.shape[1]):
            acc = 0.0
            for v in range(sv.shape[0]):
                acc += krow[v] * weights[v, p]
            d[r, p] = acc + rho[p]


@njit(**JIT)
def vote(d, first, second, classes, best):
    """``best`` [N] int64: per sample the class with the most pairwise wins (pair ``p`` votes for
    ``first[p]`` where ``d[r, p] > 0``, else ``second[p]``; the first class of the most votes)."""
    votes = np.zeros(classes, np.int64)
    for r in range(d.shape[0]):
        votes[:] = 0
        for p in range(d.shape[1]):
            votes[first[p] if d[r, p] > 0 else second[p]] += 1
        top = 0
        for k in range(1, classes):
            if votes[k] > votes[top]:
                top = k
        best[r] = top
