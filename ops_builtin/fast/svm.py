"""SVMClassifier and SVMRegressor (ai.onnx.ml) with compiled loops (:mod:`.loops.svm`).

* The decision values of a small batch (up to :data:`SMALL_BATCH` samples; beyond, numpy's
  BLAS products win): per sample the kernel row against the support vectors and its products
  with each pair's dual coefficients (a regressor's one column), in one pass, where the numpy
  kernel makes a dozen array calls (~15 us at batch 1, onnxruntime's whole SVC ~13 us).
* The votes: each sample's winning class counted in one pass (the numpy kernel: two matrix
  products and an argmax).
* The class probabilities (``prob_a`` / ``prob_b`` given): libsvm's coupling one sample at a
  time, where the numpy kernel iterates over all the samples at once, up to 100 rounds of a
  dozen small numpy calls per class (~0.4 ms at batch 1).

Labels, Z's layout and the post transforms are the numpy kernel's (``ops_builtin.ml_svm``,
given these loops); liblinear mode (no support vectors), or numba not ready yet, run the numpy
kernel.

Source: ONNX operator spec (Operators-ml.md), SVMClassifier-1, SVMRegressor-1; onnxruntime's
svmclassifier.cc, svmregressor.cc and ml_common.h (``multiclass_probability``).
"""
from __future__ import annotations

import numpy as np
from dynashape.ops_builtin import ml_svm
from dynashape.records import OpLibrary

from .common import PRIORITY, lazy_import
from .tiering import compiled_ready

lib = OpLibrary()
#: the loops (:mod:`.loops.svm`), imported by the first call of one
loops = lazy_import(".loops.svm", __package__)

#: the most samples whose decision values the compiled loop computes (a batch of more: the
#: numpy kernel's BLAS products, ~0.9x onnxruntime's at batch 1000)
SMALL_BATCH = 32
_F32 = np.dtype(np.float32)


def _kernel_decisions(k: ml_svm._Kernel, x: np.ndarray, weights: np.ndarray, rho: np.ndarray,
                      out: np.ndarray) -> np.ndarray:
    loops.decisions(np.ascontiguousarray(x, _F32), k.sv, k.sv_sq, k.kind, k.gamma, k.coef0, k.degree, weights, rho, out)
    return out


class _Compiled:
    """The numpy kernel's prepared classifier (``numpy``) and each pair's two classes."""

    def __init__(self, m: ml_svm._Classifier):
        self.numpy = m
        self.first = np.asarray([i for i, _ in m.pairs], np.int64)
        self.second = np.asarray([j for _, j in m.pairs], np.int64)

    def decide(self, m: ml_svm._Classifier, x: np.ndarray) -> np.ndarray:
        if x.shape[0] > SMALL_BATCH:
            return ml_svm.decisions(m, x)
        return _kernel_decisions(m.kernel, x, m.weights, m.rho, np.empty((x.shape[0], len(m.pairs)), _F32))

    def vote(self, m: ml_svm._Classifier, d: np.ndarray) -> np.ndarray:
        best = np.empty(d.shape[0], np.int64)
        loops.vote(d, self.first, self.second, m.labels.size, best)
        return best

    def couple(self, d: np.ndarray, m: ml_svm._Classifier) -> np.ndarray:
        out = np.empty((d.shape[0], m.labels.size), np.float32)
        loops.couple(np.ascontiguousarray(d, np.float32), m.prob_a, m.prob_b, self.first, self.second,
                     m.labels.size, out)
        return out


def _prepare(ctx) -> _Compiled:
    return _Compiled(ml_svm._classifier(ctx))


@lib.kernel("SVMClassifier", domain=ml_svm.DOMAIN, priority=PRIORITY, prepare=_prepare)
def _svm_classifier(inputs, outputs, c: _Compiled):
    """The numpy kernel with the compiled decisions, votes and coupling (libsvm mode)."""
    m = c.numpy
    if m.kernel is None or not compiled_ready():
        return ml_svm.classify(inputs, outputs, m)
    return ml_svm.classify(inputs, outputs, m, c.couple if m.prob_a is not None else ml_svm._couple,
                           c.decide, c.vote)


class _Regressor:
    """The numpy kernel's prepared regressor and its coefficients as one column."""

    def __init__(self, m: ml_svm._Regressor):
        self.numpy = m
        self.weights = m.coef.reshape(-1, 1)
        self.rho = np.array([m.rho])

    def scores(self, m: ml_svm._Regressor, x: np.ndarray) -> np.ndarray:
        if x.shape[0] > SMALL_BATCH:
            return ml_svm.scores(m, x)
        out = np.empty((x.shape[0], 1))        # (float64, as the numpy kernel's scores)
        return _kernel_decisions(m.kernel, x, self.weights, self.rho, out)[:, 0]


def _prepare_regressor(ctx) -> _Regressor:
    return _Regressor(ml_svm._regressor(ctx))


@lib.kernel("SVMRegressor", domain=ml_svm.DOMAIN, priority=PRIORITY, prepare=_prepare_regressor)
def _svm_regressor(inputs, outputs, r: _Regressor):
    """The numpy kernel with the compiled scores of a small batch (support vectors given)."""
    if r.numpy.kernel is None or not compiled_ready():
        return ml_svm.regress(inputs, outputs, r.numpy)
    return ml_svm.regress(inputs, outputs, r.numpy, r.scores)
