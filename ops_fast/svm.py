"""SVMClassifier (ai.onnx.ml) with the class probabilities (``prob_a`` / ``prob_b`` given) coupled
by a compiled loop (:mod:`.loops.svm`): the numpy kernel (``ops_builtin.ml_svm``) iterates
libsvm's coupling over all the samples at once, up to 100 rounds of a dozen small numpy calls
per class, which at batch 1 cost ~0.4 ms against onnxruntime's 15 us for the whole model. The
kernel matrix, votes and labels are the numpy kernel's (:func:`ml_svm.classify` given the loop);
without probabilities, or numba not ready yet, the numpy kernel runs.

Source: ONNX operator spec (Operators-ml.md), SVMClassifier-1; onnxruntime's svmclassifier.cc
and ml_common.h (``multiclass_probability``).
"""
from __future__ import annotations

import numpy as np
from dynashape.ops_builtin import ml_svm
from dynashape.records import OpLibrary

from .common import PRIORITY, lazy_import
from .tiering import compiled_ready

lib = OpLibrary()
#: the loop (:mod:`.loops.svm`), imported by its first call
loops = lazy_import(".loops.svm", __package__)


class _Compiled:
    """The numpy kernel's prepared classifier (``numpy``) and each pair's two classes."""

    def __init__(self, m: ml_svm._Classifier):
        self.numpy = m
        self.first = np.asarray([i for i, _ in m.pairs], np.int64)
        self.second = np.asarray([j for _, j in m.pairs], np.int64)

    def couple(self, d: np.ndarray, m: ml_svm._Classifier) -> np.ndarray:
        out = np.empty((d.shape[0], m.labels.size), np.float32)
        loops.couple(np.ascontiguousarray(d, np.float32), m.prob_a, m.prob_b, self.first, self.second,
                     m.labels.size, out)
        return out


def _prepare(ctx) -> _Compiled:
    return _Compiled(ml_svm._classifier(ctx))


@lib.kernel("SVMClassifier", domain=ml_svm.DOMAIN, priority=PRIORITY, prepare=_prepare)
def _svm_classifier(inputs, outputs, c: _Compiled):
    """The numpy kernel with the compiled coupling where probabilities are asked for."""
    m = c.numpy
    if m.prob_a is None or not compiled_ready():
        return ml_svm.classify(inputs, outputs, m)
    return ml_svm.classify(inputs, outputs, m, c.couple)
