"""The loop of the ai.onnx.ml tree ensembles (TreeEnsembleClassifier / TreeEnsembleRegressor):
every (sample, tree) pair walked to its leaf and the leaf's weights added to the sample's
scores in the same pass, blocks of samples through one tree after the other, ``prange`` over
the blocks (:class:`.threaded.ThreadedLoop`); the kernels are :mod:`dynashape.ops_builtin.fast.trees`.

Each sample's scores take the trees in order and a leaf's weights in order, in the
thresholds' type, as onnxruntime's loop and the numpy kernel (``ops_builtin.ml_tree``) add
them: the three agree bit for bit, serial or threaded (a sample is one task's)."""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .common import JIT
from .threaded import threaded

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


@njit(inline="always", **JIT)
def _goes_true(v, split, mode):
    """The branch test of ``mode`` (0 LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ)."""
    if mode == 0:
        return v <= split
    if mode == 1:
        return v < split
    if mode == 2:
        return v >= split
    if mode == 3:
        return v > split
    if mode == 4:
        return v == split
    return v != split


@njit(inline="always", **JIT)
def _leaf(x, r, node, feature, splits, modes, uniform, missing, has_missing, false_child, true_child):
    """The leaf (``-(position + 1)``) sample ``r`` reaches from ``node``. ``uniform``: every
    branch's mode where they share one (the exporters' case: a test of one comparison, no mode
    read per node), else -1 (each node's ``modes`` entry)."""
    while node >= 0:
        v = x[r, feature[node]]
        go = _goes_true(v, splits[node], uniform if uniform >= 0 else modes[node])
        if not go and has_missing and v != v and missing[node]:
            go = True
        node = true_child[node] if go else false_child[node]
    return node


@threaded(JIT)
def forest_scores(x, feature, splits, modes, uniform, missing, false_child, true_child, starts, count, ptr, ids,
                  ws, first, one_target, aggregate, scores, reached):
    """Walk and combine, into ``scores`` (N, E) / ``reached`` (N, E) (zeros on entry).

    ``x`` (N, F) in the thresholds' dtype; per node: ``feature``, ``splits``, ``modes`` (0
    LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ; ``uniform``: the one mode of every branch, or -1),
    ``missing`` (a NaN goes true; empty: none does), ``false_child`` / ``true_child`` (a node,
    or ``-(leaf + 1)``); ``starts`` each tree's first code; per leaf (a node position):
    ``count`` weights from ``ptr`` in ``ids`` / ``ws``, ``first`` its one-target value.
    ``one_target``: each tree adds ``first[leaf]`` to column 0; else every weight of the leaf
    to its target. ``aggregate``: 0 AVERAGE and 1 SUM add, 2 MIN and 3 MAX keep the least /
    largest (onnxruntime's comparison: a weight replaces the score where none is yet or where
    it compares below / above it)."""
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
                leaf = -_leaf(x, r, starts[t], feature, splits, modes, uniform, missing, has_missing, false_child,
                              true_child) - 1
                if one_target:
                    _combine(scores, reached, r, 0, first[leaf], aggregate)
                else:
                    for e in range(ptr[leaf], ptr[leaf] + count[leaf]):
                        _combine(scores, reached, r, ids[e], ws[e], aggregate)


@threaded(JIT)
def forest_sums(x, feature, splits, mode, missing, false_child, true_child, starts, count, ptr, ids, ws, first,
                one_target, scores, reached):
    """:func:`forest_scores` for the exporters' common case: SUM or AVERAGE, every branch of
    one ``mode`` (0 LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ); the other arguments as there
    (``reached`` is left alone for one target). The same additions in the same order, without
    the per-node mode reads and the per-leaf aggregate branches (docs/KERNELS.md: what that
    saves)."""
    n = x.shape[0]
    n_trees = starts.shape[0]
    has_missing = missing.shape[0] > 0
    for block in prange((n + _BLOCK - 1) // _BLOCK):
        lo = block * _BLOCK
        hi = min(lo + _BLOCK, n)
        for t in range(n_trees):
            root = starts[t]
            for r in range(lo, hi):
                node = root
                while node >= 0:
                    v = x[r, feature[node]]
                    go = _goes_true(v, splits[node], mode)
                    if not go and has_missing and v != v:
                        go = missing[node]
                    node = true_child[node] if go else false_child[node]
                leaf = -node - 1
                if one_target:
                    scores[r, 0] += first[leaf]
                else:
                    for e in range(ptr[leaf], ptr[leaf] + count[leaf]):
                        scores[r, ids[e]] += ws[e]
                        reached[r, ids[e]] = True


# finishing: base values, the top class, post transforms (onnxruntime's float32 formulas) ---

_F32 = np.float32
#: post_transform codes, the order of ``ops_builtin.ml.POST_TRANSFORMS``
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT = range(5)
_ONE, _TWO = _F32(1), _F32(2)
_LOWEST = _F32(-np.finfo(np.float32).max)
_ZERO_BAND = _F32(1e-7)
_PROBIT_A = _F32(2) / (_F32(np.pi) * _F32(0.147))
_PROBIT_B = _F32(1) / _F32(0.147)
_HALF = _F32(0.5)
_SQRT2 = _F32(np.sqrt(2.0))


@njit(inline="always", **JIT)
def _logistic(v):
    e = _ONE / (_ONE + np.exp(-abs(v)))
    return _ONE - e if v < 0 else e


@njit(inline="always", **JIT)
def _probit(v):
    """sqrt(2) * ErfInv(2v - 1), onnxruntime's Winitzki approximation in float32."""
    x = _TWO * v - _ONE
    sgn = _F32(-1) if x < 0 else _ONE
    log = np.log((_ONE - x) * (_ONE + x))
    a = _PROBIT_A + _HALF * log
    b = _PROBIT_B * log
    return _SQRT2 * (sgn * np.sqrt(np.sqrt(a * a - b) - a))


@njit(**JIT)
def _transform_row(z, r, post):
    """Post transform ``post`` of row ``r`` of the float32 scores ``z``, in place (the numpy
    kernel's ``ml_tree._transform``: a softmax's maximum ignores NaN, its sum runs left to right)."""
    width = z.shape[1]
    if post == LOGISTIC:
        for k in range(width):
            z[r, k] = _logistic(z[r, k])
    elif post == PROBIT:
        for k in range(width):
            z[r, k] = _probit(z[r, k])
    elif post == SOFTMAX or post == SOFTMAX_ZERO:
        top = _LOWEST
        for k in range(width):
            if z[r, k] > top:
                top = z[r, k]
        total = _F32(0)
        for k in range(width):
            v = z[r, k]
            if post == SOFTMAX or v > _ZERO_BAND or v < -_ZERO_BAND:
                e = np.exp(v - top)
                total += e
            else:                 # SOFTMAX_ZERO: a score within 1e-7 of 0 stays about 0, out of the sum
                e = v * np.exp(-top)
            z[r, k] = e
        for k in range(width):
            z[r, k] = z[r, k] / total


@njit(**JIT)
def finish_classes(scores, reached, base, post, top, z):
    """A classifier of more than two classes (``ml_tree.classify``): each base value added to
    its class (which then counts as reached), ``top[r]`` the first highest reached score of row
    ``r`` (a NaN: the first NaN, as numpy's argmax), ``z`` the scores in float32 (0 where no
    leaf reached the class), post-transformed."""
    n, width = scores.shape
    for r in range(n):
        for k in range(base.shape[0]):
            scores[r, k] += base[k]
            reached[r, k] = True
        best = -1
        best_value = -np.inf
        for k in range(width):
            v = scores[r, k] if reached[r, k] else -np.inf
            if v != v:
                best = k
                break
            if best < 0 or v > best_value:
                best, best_value = k, v
        top[r] = best
        for k in range(width):
            z[r, k] = _F32(scores[r, k]) if reached[r, k] else _F32(0)
        _transform_row(z, r, post)


@njit(**JIT)
def finish_targets(scores, reached, average, trees, base, post, z):
    """A regressor of several targets (``ml_tree.regress``): each score divided by ``trees``
    where ``average`` (AVERAGE), plus ``base`` (one value per target, or none), 0 where no
    leaf reached the target, in float32 into ``z``, post-transformed."""
    n, width = scores.shape
    for r in range(n):
        for k in range(width):
            s = scores[r, k]
            if average:
                s = s / trees
            if base.shape[0] == width:
                s = s + base[k]
            z[r, k] = _F32(s) if reached[r, k] else _F32(0)
        _transform_row(z, r, post)


@njit(**JIT)
def finish_one(scores, average, trees, base, probit, out):
    """One target (``ml_tree._finish_one``): each score divided by ``trees`` where ``average``
    (AVERAGE; no tree: 0 / 0, NaN) plus ``base``, in float32 into ``out`` (N, 1), PROBIT applied
    where asked (the only transform onnxruntime applies to one target)."""
    for r in range(scores.shape[0]):
        s = scores[r]
        if average:
            s = s / trees
        v = _F32(s + base)
        out[r, 0] = _probit(v) if probit else v
