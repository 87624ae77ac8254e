"""TreeEnsembleClassifier and TreeEnsembleRegressor (ai.onnx.ml-1, -3, -5) with the walk and
the leaves' weights in one compiled pass (:mod:`.loops.trees`: every sample's trees walked and
added in order, ``prange`` over the samples where the session allows threads); the base
values, labels and post transforms are the numpy kernel's (``ops_builtin.ml_tree``: the same
``prepare``, :func:`~dynashape.ops_builtin.ml_tree.regress` /
:func:`~dynashape.ops_builtin.ml_tree.classify` given this pass). The scores are the numpy
kernel's bit for bit (the same additions in the same order, in the thresholds' type); an empty
X, or numba not ready yet, takes the numpy kernel.

Source: ONNX operator spec (Operators-ml.md), TreeEnsembleClassifier-1/3/5,
TreeEnsembleRegressor-1/3/5; onnxruntime's ``tree_ensemble_common.h`` (the order of the sums).
"""
from __future__ import annotations

import numpy as np
from dynashape.ops_builtin import ml_tree
from dynashape.records import OpLibrary

from .common import PRIORITY, lazy_import
from .tiering import compiled_ready

lib = OpLibrary()
#: the loop (:mod:`.loops.trees`), imported by its first call
loops = lazy_import(".loops.trees", __package__)
_AGGREGATE = {"AVERAGE": 0, "SUM": 1, "MIN": 2, "MAX": 3}
#: (sample, tree) walks below which the pass runs on one thread (waking the pool costs more)
_THREADED_WALKS = 1 << 16


class _Compiled:
    """The numpy kernel's prepared ensemble (``numpy``) and the loop's arrays."""

    def __init__(self, ens: ml_tree.Ensemble):
        self.numpy = ens
        self.children = np.ascontiguousarray(np.stack([ens.false_child, ens.true_child], axis=1).reshape(-1))
        self.missing = ens.missing if ens.missing is not None else np.zeros(0, bool)
        self.modes = ens.modes.astype(np.int8)
        self.aggregate = _AGGREGATE[ens.aggregate]


    def combine(self, ens: ml_tree.Ensemble, x: np.ndarray) -> tuple:
        """:func:`ml_tree.accumulate` as one compiled pass."""
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        rows = np.ascontiguousarray(rows, dtype=ens.dtype)    # (an integer X compares as float32)
        n = rows.shape[0]
        width = 1 if ens.n_out == 1 else ens.n_out
        scores, reached = np.zeros((n, width), ens.dtype), np.zeros((n, width), bool)
        tasks = -(-n // 128) if n * max(ens.n_trees, 1) >= _THREADED_WALKS else 1    # (128: the loop's block)
        loops.forest_scores.run(tasks, rows, ens.feature, ens.splits, self.modes, self.missing, self.children,
                                ens.starts, ens.count, ens.ptr, ens.ids, ens.ws, ens.first, ens.n_out == 1,
                                self.aggregate, scores, reached)
        return (scores[:, 0], None) if ens.n_out == 1 else (scores, reached)


def _prepare(ctx) -> _Compiled:
    return _Compiled(ml_tree.ensemble(ctx))


def _ready(x: np.ndarray) -> bool:
    return x.size > 0 and compiled_ready()


@lib.kernel("TreeEnsembleRegressor", domain=ml_tree.DOMAIN, dtypes=ml_tree.X_DTYPES, priority=PRIORITY,
            prepare=_prepare)
def _tree_ensemble_regressor(inputs, outputs, c: _Compiled):
    """The compiled pass, then the numpy kernel's finish."""
    if not _ready(inputs[0]):
        return ml_tree._tree_ensemble_regressor(inputs, outputs, c.numpy)
    return ml_tree.write_regressor(outputs, ml_tree.regress(c.numpy, inputs[0], c.combine))


@lib.kernel("TreeEnsembleClassifier", domain=ml_tree.DOMAIN, dtypes=ml_tree.X_DTYPES, priority=PRIORITY,
            prepare=_prepare)
def _tree_ensemble_classifier(inputs, outputs, c: _Compiled):
    """The compiled pass, then the numpy kernel's labels and scores."""
    if not _ready(inputs[0]):
        return ml_tree._tree_ensemble_classifier(inputs, outputs, c.numpy)
    return ml_tree.write_classifier(c.numpy, outputs, ml_tree.classify(c.numpy, inputs[0], c.combine))
