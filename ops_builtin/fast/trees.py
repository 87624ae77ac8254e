"""TreeEnsembleClassifier and TreeEnsembleRegressor (ai.onnx.ml-1, -3, -5) with the walk and
the leaves' weights in one compiled pass (:mod:`.loops.trees`: every sample's trees walked and
added in order, ``prange`` over the samples where the session allows threads), then the
finish of a regressor and of a classifier of more than two classes compiled too (base values,
AVERAGE, the top class, the post transforms in onnxruntime's float32 formulas:
``finish_one`` / ``finish_targets`` / ``finish_classes``, straight into the planned outputs:
at batch 1 the numpy finish's dozen ufunc calls cost 3-4x the walk); a classifier of one or two
classes finishes with the numpy kernel's rules (``ops_builtin.ml_tree``: the same ``prepare``,
:func:`~dynashape.ops_builtin.ml_tree.classify` given this pass). The summed scores are the
numpy kernel's bit for bit (the same additions in the same order, in the thresholds' type);
the transformed scores agree within float32 rounding (LLVM's exp / log against numpy's, an ulp
apart); an empty X, or numba not ready yet, takes the numpy kernel.

Source: ONNX operator spec (Operators-ml.md), TreeEnsembleClassifier-1/3/5,
TreeEnsembleRegressor-1/3/5; onnxruntime's ``tree_ensemble_common.h`` (the order of the sums).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from dynashape.ops_builtin import ml_tree
from dynashape.ops_builtin.ml import POST_TRANSFORMS
from dynashape.ops_builtin.ml_linear import write_labels
from dynashape.records import OpLibrary

from .common import PRIORITY, lazy_import
from .tiering import compiled_ready

lib = OpLibrary()
#: the loop (:mod:`.loops.trees`), imported by its first call
loops = lazy_import(".loops.trees", __package__)
_AGGREGATE = {"AVERAGE": 0, "SUM": 1, "MIN": 2, "MAX": 3}
#: (sample, tree) walks below which the pass runs on one thread (waking the pool costs more)
_THREADED_WALKS = 1 << 16
PROBIT = POST_TRANSFORMS.index("PROBIT")


class _Compiled:
    """The numpy kernel's prepared ensemble (``numpy``) and the loops' arrays and scalars."""

    def __init__(self, ens: ml_tree.Ensemble):
        self.numpy = ens
        self.false_child = np.ascontiguousarray(ens.false_child, np.int32)
        self.true_child = np.ascontiguousarray(ens.true_child, np.int32)
        self.feature = np.ascontiguousarray(ens.feature, np.int32)
        self.missing = ens.missing if ens.missing is not None else np.zeros(0, bool)
        self.modes = ens.modes.astype(np.int8)
        # (the one mode of every branch, as the exporters write: no mode read per node)
        self.uniform = ens.present[0] if len(ens.present) == 1 else -1
        self.aggregate = _AGGREGATE[ens.aggregate]
        self.post = POST_TRANSFORMS.index(ens.post)
        self.average = ens.aggregate == "AVERAGE"
        self.trees = ens.dtype.type(ens.n_trees)        # (the divisor in the thresholds' type)
        self.base0 = ens.base[0] if ens.base.size == 1 else ens.dtype.type(0)
        # (SUM or AVERAGE and one mode, as the exporters write: walked by loops.forest_sums)
        self.summed = self.uniform >= 0 and self.aggregate <= 1

    def combine(self, ens: ml_tree.Ensemble, x: np.ndarray) -> tuple:
        """:func:`ml_tree.accumulate` as one compiled pass."""
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        rows = np.ascontiguousarray(rows, dtype=ens.dtype)    # (an integer X compares as float32)
        n = rows.shape[0]
        width = 1 if ens.n_out == 1 else ens.n_out
        tasks = -(-n // 128) if n * max(ens.n_trees, 1) >= _THREADED_WALKS else 1    # (128: the loop's block)
        scores, reached = np.zeros((n, width), ens.dtype), np.zeros((n, width), bool)
        if self.summed:
            loops.forest_sums.run(tasks, rows, self.feature, ens.splits, self.uniform, self.missing, self.false_child,
                                  self.true_child, ens.starts, ens.count, ens.ptr, ens.ids, ens.ws, ens.first,
                                  ens.n_out == 1, scores, reached)
        else:
            loops.forest_scores.run(tasks, rows, self.feature, ens.splits, self.modes, self.uniform, self.missing,
                                    self.false_child, self.true_child, ens.starts, ens.count, ens.ptr, ens.ids,
                                    ens.ws, ens.first, ens.n_out == 1, self.aggregate, scores, reached)
        return (scores[:, 0], None) if ens.n_out == 1 else (scores, reached)


def _float32_out(out: Optional[np.ndarray], shape: tuple) -> np.ndarray:
    """The planned output where a loop can write it, else a new array."""
    if out is not None and out.dtype == np.float32 and out.flags.c_contiguous and out.shape == shape:
        return out
    return np.empty(shape, np.float32)


def _regress(c: _Compiled, x: np.ndarray, out: Optional[np.ndarray]) -> np.ndarray:
    """Y [N, n_targets] float32: the compiled pass and the compiled finish."""
    ens = c.numpy
    scores, reached = c.combine(ens, x)
    y = _float32_out(out, (scores.shape[0], ens.n_out))
    if ens.n_out == 1:
        loops.finish_one(scores, c.average, c.trees, c.base0, c.post == PROBIT, y)
    else:
        loops.finish_targets(scores, reached, c.average, c.trees, ens.base, c.post, y)
    return y


def _classify_many(c: _Compiled, x: np.ndarray, out_scores: Optional[np.ndarray]) -> tuple:
    """More than two classes: (top class index [N], Z [N, E] float32) with the compiled pass and
    the compiled finish."""
    ens = c.numpy
    scores, reached = c.combine(ens, x)
    n = scores.shape[0]
    z = _float32_out(out_scores, (n, ens.n_out))
    top = np.empty(n, np.intp)
    loops.finish_classes(scores, reached, ens.base, c.post, top, z)
    return top, z


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
    y = _regress(c, inputs[0], outputs[0])
    return ml_tree.write_regressor(outputs, y) if y is not outputs[0] else None


@lib.kernel("TreeEnsembleClassifier", domain=ml_tree.DOMAIN, dtypes=ml_tree.X_DTYPES, priority=PRIORITY,
            prepare=_prepare)
def _tree_ensemble_classifier(inputs, outputs, c: _Compiled):
    """The compiled pass, then the numpy kernel's labels and scores."""
    if not _ready(inputs[0]):
        return ml_tree._tree_ensemble_classifier(inputs, outputs, c.numpy)
    ens = c.numpy
    if ens.n_out <= 2:
        return ml_tree.write_classifier(ens, outputs, ml_tree.classify(ens, inputs[0], c.combine))
    top, z = _classify_many(c, inputs[0], outputs[1] if len(outputs) > 1 else None)
    if outputs[0] is None or z is not outputs[1]:
        return ml_tree.write_classifier(ens, outputs, (top, False, z))
    write_labels(outputs[0], ens.labels, top)
    return None
