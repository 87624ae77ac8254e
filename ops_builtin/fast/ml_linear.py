"""LinearClassifier and Normalizer (ai.onnx.ml) as compiled passes (:mod:`.loops.ml_linear`).

LinearClassifier: scores, labels and the post transform of each sample in one pass. The numpy
kernel (``ops_builtin.ml_linear``) makes a dozen array calls (matmul, intercepts, argmax with
onnxruntime's NaN rule, the labels' gather, the transform), ~40 us at batch 1 against
onnxruntime's ~11 us for the whole model. The loop serves int64 labels with NONE, SOFTMAX,
LOGISTIC (and SOFTMAX_ZERO for a binary classifier, whose scores are NONE's); string labels, the
other transforms, or numba not ready yet run the numpy kernel. Normalizer: each row's norm and
the row divided by it in one pass, for float32 rows (the numpy kernel's half dozen calls cost
~3x onnxruntime's at batch 1).

Source: ONNX operator spec (Operators-ml.md), LinearClassifier-1, Normalizer-1; onnxruntime's
linearclassifier.cc, normalizer.cc and ml_common.h.
"""
from __future__ import annotations

import numpy as np
from dynashape.ops_builtin import ml_linear
from dynashape.records import OpLibrary

from .common import PRIORITY, lazy_import
from .tiering import compiled_ready

lib = OpLibrary()
#: the loops (:mod:`.loops.ml_linear`), imported by the first call of one
loops = lazy_import(".loops.ml_linear", __package__)

_F32 = np.dtype(np.float32)
_I64 = np.dtype(np.int64)
#: the post_transform codes (ml_linear's) the loop computes, per kind: multiclass, binary
_LOOP_POSTS = (frozenset({0, 1, 2}), frozenset({0, 1, 2, 3}))


class _Compiled:
    """The numpy kernel's prepared classifier (``numpy``), the weights transposed ([E, C], the
    loop's dot products run along a row), and whether the loop serves it."""

    def __init__(self, lc: ml_linear._LinearClassifier):
        self.numpy = lc
        self.wt = np.ascontiguousarray(lc.weights.T)
        self.loop = lc.labels.dtype == _I64 and lc.post in _LOOP_POSTS[lc.binary]


def _prepare(ctx) -> _Compiled:
    return _Compiled(ml_linear._linear_classifier(ctx))


@lib.kernel("LinearClassifier", domain=ml_linear.DOMAIN, priority=PRIORITY, prepare=_prepare)
def _linear_classifier(inputs, outputs, c: _Compiled):
    """The compiled pass where it serves (planned int64 Y), else the numpy kernel."""
    lc, y = c.numpy, outputs[0]
    if y is None or not c.loop or not y.flags.c_contiguous or not compiled_ready():
        return ml_linear._linear_classifier_kernel(inputs, outputs, lc)
    x = inputs[0]
    if x.dtype != _F32 or not x.flags.c_contiguous:
        x = np.ascontiguousarray(x, dtype=_F32)
    x = x.reshape(-1, lc.weights.shape[0])
    z = outputs[1] if len(outputs) > 1 and outputs[1] is not None else None
    if z is None or not z.flags.c_contiguous:
        z = np.empty((x.shape[0], 2 if lc.binary else lc.weights.shape[1]), _F32)
    (loops.classify_binary if lc.binary else loops.classify)(x, c.wt, lc.intercepts, lc.labels, lc.post, y, z)
    if len(outputs) > 1 and outputs[1] is not None and outputs[1] is not z:
        outputs[1][...] = z
    return None


#: Normalizer's ``norm`` -> the loop's code
_NORMS = {"MAX": 0, "L1": 1, "L2": 2}


@lib.kernel("Normalizer", domain=ml_linear.DOMAIN, priority=PRIORITY, prepare=ml_linear._norm)
def _normalizer(inputs, outputs, norm: str):
    """The compiled pass for float32 rows into a contiguous output, else the numpy kernel."""
    x, y = inputs[0], outputs[0]
    if x.dtype != _F32 or not x.flags.c_contiguous or not y.flags.c_contiguous or not compiled_ready():
        return ml_linear._normalizer(inputs, outputs, norm)
    rows = x.reshape(-1, x.shape[-1])
    loops.normalize(rows, _NORMS[norm], y.reshape(rows.shape))
    return None
