"""The loop of the ai.onnx.ml tree ensembles (TreeEnsembleClassifier / TreeEnsembleRegressor):
every (sample, tree) pair walked to its leaf and the leaf's weights added to the sample's
scores in the same pass, blocks of samples through one tree after the other, ``prange`` over
the blocks (:class:`.common.ThreadedLoop`); the kernels are :mod:`dynashape.ops_fast.trees`.

Each sample's scores take the trees in order and a leaf's weights in order, in the
thresholds' type, as onnxruntime's loop and the numpy kernel (``ops_builtin.ml_tree``) add
them: the three agree bit for bit, serial or threaded (a sample is one task's)."""
from __future__ import annotations

from numba import njit, prange

from .common import JIT, threaded

#: samples walked through one tree before the next (one parallel task)
_BLOCK = 128


@njit(inline="always", **JIT)
def _combine(scores, reached, r, k, w, aggregate):
    """One weight into sample ``r``'s score ``k``: added, or kept where it is the least / largest."""
    if aggregate <= 1:
        scores[r, k] += w
    elif not reached[r, k] or (w < scores[r, k] if aggregate == 2 else w > scores[r, k]):
        scores[r, k] = w
    reached[r, k] = True


@threaded(JIT)
def forest_scores(x, feature, splits, modes, missing, children, starts, count, ptr, ids, ws, first,
                  one_target, aggregate, scores, reached):
    """Walk and combine, into ``scores`` (N, E) / ``reached`` (N, E) (zeros on entry).

    ``x`` (N, F) in the thresholds' dtype; per node: ``feature``, ``splits``, ``modes`` (0
    LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ), ``missing`` (a NaN goes true; empty: none does),
    ``children[2 * node + went_true]`` (a node, or ``-(leaf + 1)``); ``starts`` each tree's
    first code; per leaf (a node position): ``count`` weights from ``ptr`` in ``ids`` / ``ws``,
    ``first`` its one-target value. ``one_target``: each tree adds ``first[leaf]`` to column
    0; else every weight of the leaf to its target. ``aggregate``: 0 AVERAGE and 1 SUM add,
    2 MIN and 3 MAX keep the least / largest (onnxruntime's comparison: a weight replaces
    the score where none is yet or where it compares below / above it)."""
    n = x.shape[0]
    n_trees = starts.shape[0]
    has_missing = missing.shape[0] > 0
    for block in prange((n + _BLOCK - 1) // _BLOCK):
        # a block of samples through one tree after the other: the tree's nodes stay in cache
        # (onnxruntime's order too); each sample still takes the trees in order
        lo = block * _BLOCK
        hi = min(lo + _BLOCK, n)
        for t in range(n_trees):
            for r in range(lo, hi):
                node = starts[t]
                while node >= 0:
                    v = x[r, feature[node]]
                    split = splits[node]
                    mode = modes[node]
                    if mode == 0:
                        go = v <= split
                    elif mode == 1:
                        go = v < split
                    elif mode == 2:
                        go = v >= split
                    elif mode == 3:
                        go = v > split
                    elif mode == 4:
                        go = v == split
                    else:
                        go = v != split
                    if has_missing and not go and missing[node] and v != v:
                        go = True
                    node = children[2 * node + (1 if go else 0)]
                leaf = -node - 1
                if one_target:
                    _combine(scores, reached, r, 0, first[leaf], aggregate)
                else:
                    for e in range(ptr[leaf], ptr[leaf] + count[leaf]):
                        _combine(scores, reached, r, ids[e], ws[e], aggregate)
