"""The tree ensembles of the ``ai.onnx.ml`` domain before TreeEnsemble-5:
TreeEnsembleClassifier and TreeEnsembleRegressor (ai.onnx.ml-1, -3 and the deprecated -5),
computed as onnxruntime's CPU kernels compute them.

A node is a (``nodes_treeids``, ``nodes_nodeids``) pair; each tree starts at its first listed
node (onnxruntime: every node whose tree id differs from the one before it starts a tree).
``prepare`` turns the attribute lists into flat arrays (children as node positions, leaves as
``-(position + 1)``), walked by :func:`.ml.walk_trees` as TreeEnsemble-5 is: one step per
level for every (sample, tree) pair at once. A leaf's weights (``target_*`` / ``class_*``)
form a CSR table leaf -> (target, weight), in onnxruntime's order; the scores of each sample
add up tree after tree in that order, in the thresholds' type (float32, or float64 for a
double X: ``np.add.at`` / ``np.bincount`` are sequential), so sums, ties and the labels drawn
from them are onnxruntime's bit for bit. The post transforms are onnxruntime's float32
formulas (``ml_common.h``: its logistic, its softmax with a sequential sum, its ``ErfInv``).

onnxruntime departs from the spec here, and these kernels follow it (tests/ops/test_ml_trees.py
pins each):

* one target (a regressor with ``n_targets`` 1, a classifier with one class): only PROBIT is
  applied (LOGISTIC, SOFTMAX, SOFTMAX_ZERO leave the score as it is); a leaf adds its first
  weight only, and a leaf without a weight adds its ``nodes_values`` entry;
* several targets: a target that no leaf reached is 0 whatever its base value;
* two classes with one weight column (``class_ids`` all one id, as scikit-learn, LightGBM and
  XGBoost exports write): the score ``s`` gives ``[1 - s, s]`` when every weight is >= 0
  (label: ``s > 0.5``; LOGISTIC: ``[1 - logistic(s), logistic(s)]``, onnxruntime >= 1.26) and
  ``[-s, s]`` otherwise (label: ``s > 0``; LOGISTIC: ``[logistic(-s), logistic(s)]``);
  SOFTMAX and SOFTMAX_ZERO are not applied; with PROBIT only the first score is written;
* two classes with weights for both: the label is ``1`` or ``0`` (not ``classlabels_int64s``)
  by whether the class-1 score is > 0; with two ``base_values`` the class-1 score is
  ``base_values[1] + score[0]`` and class 0 its negative (``tree_ensemble_aggregator.h``); a
  sample no class-1 weight reached gets one score (``[-s, s]`` without base values);
* a score onnxruntime leaves unwritten (its buffer's old content) is NaN here;
* classes above two: the top class is the first highest score among the classes some leaf
  (or a base value) reached;
* the classifier sums the trees whatever ``aggregate_function`` says (the spec has none for
  it); a weight given for a branch node is ignored.

One departure is not followed: onnxruntime folds a chain of BRANCH_EQ nodes on one feature
(integer thresholds 1..32, or 1..64 for double) into one bit-set node where it finds the true
subtrees equal, and it compares two leaves by the first weight listed at or after each, so a
leaf without a weight can "equal" another one: the chain then goes wrong and the other leaf's
weights land on the first node listed. Here the spec's walk (tests/ops/test_ml_trees.py).

Where onnxruntime fails and the spec does not (a 1-D X reading feature > 0, a shared false
child, the deprecated -5, an integer X for the regressor) these kernels run; where the spec
forbids and onnxruntime guesses (an unknown mode, post transform or aggregate function, a
weight for a node that does not exist, a class id beyond the labels, mismatched list lengths)
they fail with a ShapeInferenceError.

Source: ONNX operator spec (Operators-ml.md): TreeEnsembleClassifier-1/3/5,
TreeEnsembleRegressor-1/3/5; onnxruntime's onnxruntime/core/providers/cpu/ml
(``tree_ensemble_common.h``, ``tree_ensemble_aggregator.h``, ``ml_common.h``).
"""
from __future__ import annotations

import numpy as np
from dynashape.records import OpLibrary, fixed_dtype
from dynashape.shapes import require

from .ml import POST_TRANSFORMS, tree_depth, walk_trees

DOMAIN = "ai.onnx.ml"
lib = OpLibrary()

_F32 = np.float32
_STRING = np.dtype(object)
#: X's dtypes (the kernels' too)
X_DTYPES = ("float32", "float64", "int64", "int32")
#: node modes by name; the branch codes are :mod:`.ml`'s (``_COMPARE``)
_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5,
          "LEAF": 7}
_LEAF = 7
_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")


class Ensemble:
    """One node's trees, weights and finishing rules, as the kernel and the walk read them."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


# attributes --------------------------------------------------------------------------------

def _text(v) -> str:
    return v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v)


def _given(v) -> bool:
    return v is not None and np.size(v) > 0


def _ints(ctx, name: str):
    v = ctx.attr(name)
    return np.asarray(v, dtype=np.int64).reshape(-1) if _given(v) else None


def _reals(ctx, name: str, dtype):
    """``name`` (floats) or ``name_as_tensor`` (-3 on) as one 1-D array of ``dtype``, or None."""
    plain, tensor = ctx.attr(name), ctx.attr(f"{name}_as_tensor")
    if _given(tensor) and ctx.opset < 3:
        ctx.fail(f"{name}_as_tensor is an attribute of ai.onnx.ml-3 on, the model's ai.onnx.ml opset is "
                 f"{ctx.opset}", kind="InvalidAttribute")
    if _given(plain) and _given(tensor):
        ctx.fail(f"both {name} and {name}_as_tensor are given; at most one may be", kind="InvalidAttribute")
    if _given(tensor):
        arr = np.asarray(tensor)
        if arr.dtype.kind not in "fiu":
            ctx.fail(f"{name}_as_tensor holds {arr.dtype.name}, expected floating-point values",
                     kind="InvalidAttribute")
        return arr.reshape(-1).astype(dtype)
    return np.asarray(plain, dtype=np.float32).reshape(-1).astype(dtype) if _given(plain) else None


def _choice(ctx, name: str, default: str, allowed) -> str:
    value = _text(ctx.attr(name, default))
    if value not in allowed:
        ctx.fail(f"{name} '{value}' is not one of {list(allowed)}", kind="InvalidAttribute")
    return value


def _same_length(ctx, lists: dict, what: str) -> int:
    """The common length of ``lists`` (name -> array or None: absent, length 0)."""
    sizes = {name: (0 if arr is None else arr.size) for name, arr in lists.items()}
    first = next(iter(sizes))
    for name, size in sizes.items():
        if size != sizes[first]:
            ctx.fail(f"{name} has {size} entries, {first} has {sizes[first]}; every {what} attribute must have "
                     "one entry per " + ("node" if what == "nodes_*" else "weight"), kind="InvalidAttribute")
    return sizes[first]


def _or_empty(arr, dtype=np.int64):
    return np.zeros(0, dtype) if arr is None else arr


def _locate(ctx, index: tuple, trees: np.ndarray, nodes: np.ndarray, what: str) -> np.ndarray:
    """Positions of the (tree, node) pairs ``trees``/``nodes`` in ``index`` (``_node_index``);
    fails naming ``what`` on a pair that is no node."""
    tree_ranks, keys, order, low, span = index
    if not trees.size:
        return np.zeros(0, np.int64)
    rank = np.minimum(np.searchsorted(tree_ranks, trees), max(tree_ranks.size - 1, 0))
    local = nodes - low
    key = rank * span + local
    pos = np.minimum(np.searchsorted(keys, key), max(keys.size - 1, 0))
    found = (local >= 0) & (local < span)
    if keys.size:
        found &= (tree_ranks[rank] == trees) & (keys[pos] == key)
    else:
        found[:] = False
    if not found.all():
        bad = int(np.nonzero(~found)[0][0])
        ctx.fail(f"{what} entry {bad} names node {int(nodes[bad])} of tree {int(trees[bad])}, which is no node "
                 "(no such nodes_treeids / nodes_nodeids pair)", kind="InvalidAttribute")
    return order[pos]


def _node_index(ctx, treeids: np.ndarray, nodeids: np.ndarray) -> tuple:
    """(sorted tree ids, sorted node keys, their positions, lowest node id, node id span): a
    (tree, node) pair's key is its tree's rank times the span plus its offset node id.
    Fails on a pair listed twice."""
    tree_ranks = np.unique(treeids)
    low = int(nodeids.min()) if nodeids.size else 0
    span = int(nodeids.max()) - low + 1 if nodeids.size else 1
    keys = np.searchsorted(tree_ranks, treeids) * span + (nodeids - low)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    dup = np.nonzero(np.diff(keys) == 0)[0]
    if dup.size:
        i = int(order[dup[0] + 1])
        ctx.fail(f"node {int(nodeids[i])} of tree {int(treeids[i])} is listed twice (nodes_treeids / "
                 "nodes_nodeids pairs must be unique)", kind="InvalidAttribute")
    return tree_ranks, keys, order, low, span


def _is_double(ctx) -> bool:
    dt = ctx.dtype(0)
    return dt is not None and np.dtype(dt) == np.float64


def ensemble(ctx) -> Ensemble:
    """Every attribute checked and laid out for the walk and the aggregation."""
    classifier = ctx.node.op_type == "TreeEnsembleClassifier"
    dtype = np.dtype(np.float64 if _is_double(ctx) else np.float32)     # onnxruntime's ThresholdType
    prefix = "class" if classifier else "target"

    nodes = {name: _ints(ctx, name) for name in ("nodes_treeids", "nodes_nodeids", "nodes_featureids",
                                                  "nodes_truenodeids", "nodes_falsenodeids")}
    modes_text = np.asarray(ctx.attr("nodes_modes") if _given(ctx.attr("nodes_modes")) else [], dtype=str)
    values = _reals(ctx, "nodes_values", dtype)
    lists = dict(nodes, nodes_modes=modes_text, nodes_values=values)
    if values is None and _given(ctx.attr("nodes_values_as_tensor")):
        lists["nodes_values_as_tensor"] = lists.pop("nodes_values")
    hitrates = _reals(ctx, "nodes_hitrates", dtype)
    if hitrates is not None:
        lists["nodes_hitrates"] = hitrates
    missing = _ints(ctx, "nodes_missing_value_tracks_true")
    if missing is not None:
        lists["nodes_missing_value_tracks_true"] = missing
    n_nodes = _same_length(ctx, lists, "nodes_*")

    names, of_node = np.unique(modes_text, return_inverse=True)
    unknown = [str(m) for m in names if m not in _MODES]
    if unknown:
        ctx.fail(f"nodes_modes holds {unknown}, expected each of {list(_MODES)}", kind="InvalidAttribute")
    modes = np.asarray([_MODES[m] for m in names], dtype=np.int64)[of_node] if n_nodes else np.zeros(0, np.int64)
    treeids, nodeids = _or_empty(nodes["nodes_treeids"]), _or_empty(nodes["nodes_nodeids"])
    feature = _or_empty(nodes["nodes_featureids"])
    values = _or_empty(values, dtype)
    branch = modes != _LEAF
    if (feature[branch] < 0).any():
        ctx.fail("nodes_featureids must be >= 0", kind="InvalidAttribute")

    index = _node_index(ctx, treeids, nodeids)

    def code(pos):      # a child or a tree start: the node's position, or -(position + 1) for a leaf
        return np.where(modes[pos] == _LEAF, -pos - 1, pos)

    children = []
    for side in ("true", "false"):
        ids = _or_empty(nodes[f"nodes_{side}nodeids"])
        child = np.zeros(n_nodes, np.int64)
        where = np.nonzero(branch)[0]
        child[where] = code(_locate(ctx, index, treeids[where], ids[where], f"nodes_{side}nodeids"))
        children.append(child)
    starts = np.nonzero(np.r_[True, treeids[1:] != treeids[:-1]])[0] if n_nodes else np.zeros(0, np.int64)
    depth = tree_depth(ctx, starts[branch[starts]], children[0], children[1], n_nodes)

    # weights: leaf -> (target, weight), in onnxruntime's order (by leaf, then as listed)
    w_lists = {f"{prefix}_treeids": _ints(ctx, f"{prefix}_treeids"),
               f"{prefix}_nodeids": _ints(ctx, f"{prefix}_nodeids"),
               f"{prefix}_ids": _ints(ctx, f"{prefix}_ids")}
    weights = _reals(ctx, f"{prefix}_weights", dtype)
    w_lists[f"{prefix}_weights" if weights is not None or not _given(ctx.attr(f"{prefix}_weights_as_tensor"))
            else f"{prefix}_weights_as_tensor"] = weights
    _same_length(ctx, w_lists, f"{prefix}_*")
    w_tree = _or_empty(w_lists[f"{prefix}_treeids"])
    w_node = _or_empty(w_lists[f"{prefix}_nodeids"])
    w_ids = _or_empty(w_lists[f"{prefix}_ids"])
    weights = _or_empty(weights, dtype)

    if classifier:
        labels = _class_labels(ctx)
        n_out = len(labels)
    else:
        labels = None
        n_out = ctx.attr("n_targets")
        if n_out is None:
            ctx.fail("attribute 'n_targets' is required", kind="MissingAttribute")
        n_out = int(n_out)
        if n_out < 1:
            ctx.fail(f"n_targets {n_out} must be >= 1", kind="InvalidAttribute")
    if w_ids.size and (w_ids.min() < 0 or w_ids.max() >= n_out):
        bad = int(w_ids[(w_ids < 0) | (w_ids >= n_out)][0])
        what = "class labels" if classifier else "targets (n_targets)"
        ctx.fail(f"{prefix}_ids holds {bad}, outside [0, {n_out}): there are {n_out} {what}",
                 kind="InvalidAttribute")
    at = _locate(ctx, index, w_tree, w_node, f"{prefix}_treeids/{prefix}_nodeids")
    on_leaf = modes[at] == _LEAF if at.size else np.zeros(0, bool)     # (weights of a branch: ignored, as onnxruntime)
    by_leaf = np.argsort(at[on_leaf], kind="stable")
    leaf_of, ids, ws = at[on_leaf][by_leaf], w_ids[on_leaf][by_leaf], weights[on_leaf][by_leaf]
    count = np.bincount(leaf_of, minlength=n_nodes).astype(np.int64)
    ptr = np.concatenate([[0], np.cumsum(count)]).astype(np.int64)
    first = values.copy()                  # one target: a leaf adds its first weight, or its node value
    weighted = count > 0
    first[weighted] = ws[ptr[:-1][weighted]]

    base = _reals(ctx, "base_values", dtype)
    base = _or_empty(base, dtype)
    allowed = (0, n_out, 1) if classifier and n_out == 2 else (0, n_out)
    if base.size not in allowed:
        ctx.fail(f"base_values has {base.size} entries, expected {' or '.join(str(a) for a in sorted(set(allowed)))}"
                 f" (one per {'class' if classifier else 'target'}, or none)", kind="InvalidAttribute")
    post = _choice(ctx, "post_transform", "NONE", POST_TRANSFORMS)
    aggregate = "SUM" if classifier else _choice(ctx, "aggregate_function", "SUM", _AGGREGATES)
    return Ensemble(
        classifier=classifier, dtype=dtype, n_out=n_out, labels=labels, post=post, aggregate=aggregate,
        base=base, n_trees=int(starts.size), starts=code(starts) if starts.size else starts,
        feature=feature, splits=values, modes=modes, present=sorted(set(modes[branch].tolist())),
        missing=(missing == 1) if missing is not None and (missing == 1).any() else None,
        member_values=np.zeros(0), member_keys=np.zeros(0, np.int64),
        true_child=children[0], false_child=children[1], depth=depth,
        count=count, ptr=ptr[:-1].copy(), ids=ids, ws=ws, first=first,
        binary_case=bool(classifier and n_out == 2 and np.unique(w_ids).size == 1),
        all_positive=not bool((weights < 0).any()),      # (over every weight listed, as onnxruntime)
        max_feature=int(feature[branch].max()) if branch.any() else -1)


def _class_labels(ctx) -> np.ndarray:
    strings, ints = ctx.attr("classlabels_strings"), ctx.attr("classlabels_int64s")
    if _given(strings) == _given(ints):
        ctx.fail("exactly one of classlabels_strings, classlabels_int64s must be given (and not empty), got "
                 f"{int(_given(strings)) + int(_given(ints))}", kind="InvalidAttribute")
    if _given(strings):
        return np.asarray([_text(s) for s in strings], dtype=object)
    return np.asarray(ints, dtype=np.int64).reshape(-1)


# shape rules -------------------------------------------------------------------------------

def _rows(ctx, ens: Ensemble):
    """N of X ([N, F], or [F]: one sample), after checking X's type, rank and features."""
    shape, dt = ctx.shape(0), ctx.dtype(0)
    if dt is not None and np.dtype(dt).name not in X_DTYPES:
        ctx.fail(f"X has dtype {np.dtype(dt).name}, expected one of {', '.join(X_DTYPES)}", kind="InvalidDtype")
    if len(shape) not in (1, 2):
        ctx.fail(f"X must be [N, F] or [F], got rank {len(shape)}", kind="InvalidRank")
    if ens.max_feature >= 0:
        require(ctx, shape[-1], ">", ens.max_feature,
                f"nodes_featureids reads feature {ens.max_feature} but X has {shape[-1]} features",
                "FeatureOutOfRange")
    return shape[0] if len(shape) == 2 else 1


_DOC_ATTRS = """Trees: ``nodes_treeids``, ``nodes_nodeids``, ``nodes_featureids``, ``nodes_modes``
    (BRANCH_LEQ, BRANCH_LT, BRANCH_GTE, BRANCH_GT, BRANCH_EQ, BRANCH_NEQ, LEAF), ``nodes_values``
    (thresholds), ``nodes_truenodeids`` / ``nodes_falsenodeids``, ``nodes_missing_value_tracks_true``
    (a NaN takes the true branch); -3 adds ``*_as_tensor`` forms of the float lists. An integer X
    compares as float32, a double X in double (onnxruntime)."""


@lib.op("TreeEnsembleRegressor", since_version=(1, 3, 5), domain=DOMAIN, infer_dtype=fixed_dtype(np.float32))
def _regressor_shape(ctx):
    """TreeEnsembleRegressor: X [N, F] (or [F], one sample) of float, double, int64 or int32
    -> Y [N, n_targets] float32.

    Each leaf adds its ``target_weights`` to targets ``target_ids`` (leaves named by
    ``target_treeids`` / ``target_nodeids``), combined over trees by ``aggregate_function``
    (AVERAGE, SUM, MIN, MAX), plus ``base_values`` (none or one per target), then
    ``post_transform`` (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT), as onnxruntime computes
    them (module docstring: one target takes PROBIT only). """ + _DOC_ATTRS + """
    Raises: ShapeInferenceError kinds InvalidDtype, InvalidRank, InvalidAttribute,
    MissingAttribute, FeatureOutOfRange. Source: ONNX operator spec, ai.onnx.ml
    TreeEnsembleRegressor-1, -3, -5.
    """
    ens = ensemble(ctx)
    return [(_rows(ctx, ens), ens.n_out)]


def _classifier_dtype(ctx):
    strings = _given(ctx.attr("classlabels_strings"))
    return [_STRING if strings else np.dtype(np.int64), np.dtype(np.float32)]


@lib.op("TreeEnsembleClassifier", since_version=(1, 3, 5), domain=DOMAIN, infer_dtype=_classifier_dtype)
def _classifier_shape(ctx):
    """TreeEnsembleClassifier: X [N, F] (or [F], one sample) of float, double, int64 or int32
    -> Y [N] labels (int64 ``classlabels_int64s`` or string ``classlabels_strings``), Z [N, E]
    float32 scores of the E classes.

    Each leaf adds its ``class_weights`` to classes ``class_ids`` (leaves named by
    ``class_treeids`` / ``class_nodeids``), summed over trees, plus ``base_values``, then
    ``post_transform``; the label is the top class, with onnxruntime's two-class rules (one
    weight column: ``[1 - s, s]`` or ``[-s, s]``; module docstring). """ + _DOC_ATTRS + """
    Raises: ShapeInferenceError kinds InvalidDtype, InvalidRank, InvalidAttribute,
    MissingAttribute, FeatureOutOfRange. Source: ONNX operator spec, ai.onnx.ml
    TreeEnsembleClassifier-1, -3, -5.
    """
    ens = ensemble(ctx)
    n = _rows(ctx, ens)
    return [(n,), (n, ens.n_out)]


# post transforms (onnxruntime's float32 formulas, ml_common.h) ----------------------------------

def _logistic(v: np.ndarray) -> np.ndarray:
    e = _F32(1) / (_F32(1) + np.exp(-np.abs(v)))
    return np.where(v < 0, _F32(1) - e, e)


def _probit(v: np.ndarray) -> np.ndarray:
    """sqrt(2) * ErfInv(2v - 1) with onnxruntime's Winitzki approximation, in float32."""
    x = _F32(2) * v - _F32(1)
    sgn = np.where(x < 0, _F32(-1), _F32(1))
    log = np.log((_F32(1) - x) * (_F32(1) + x))
    a = _F32(2) / (_F32(np.pi) * _F32(0.147)) + _F32(0.5) * log
    b = _F32(1) / _F32(0.147) * log
    return _F32(np.sqrt(2.0)) * (sgn * np.sqrt(np.sqrt(a * a - b) - a))


def _row_sum(v: np.ndarray) -> np.ndarray:
    """Each row's sum in float32, added left to right (onnxruntime's loop)."""
    return np.cumsum(v, axis=1, dtype=_F32)[:, -1:] if v.shape[1] else np.zeros((v.shape[0], 1), _F32)


def _transform(v: np.ndarray, post: str) -> np.ndarray:
    """``post`` on float32 rows of two or more scores (onnxruntime's ``write_scores``)."""
    if post == "LOGISTIC":
        return _logistic(v)
    if post == "PROBIT":
        return _probit(v)
    if post in ("SOFTMAX", "SOFTMAX_ZERO"):
        top = np.fmax.reduce(v, axis=1, keepdims=True, initial=-np.finfo(_F32).max)
        e = np.exp(v - top)
        if post == "SOFTMAX_ZERO":     # scores within 1e-7 of 0 stay (about) 0, out of the sum
            far = (v > _F32(1e-7)) | (v < _F32(-1e-7))
            e = np.where(far, e, v * np.exp(-top))
            return e / _row_sum(np.where(far, e, _F32(0)))
        return e / _row_sum(e)
    return v


# aggregation -------------------------------------------------------------------------------

def _leaves(ens: Ensemble, x: np.ndarray) -> np.ndarray:
    """[N, trees] positions of the leaves reached."""
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    # (an integer X compares as float32, as C++ compares an integer with a float threshold)
    return walk_trees(ens, rows.astype(ens.dtype, copy=False), ens.starts)


def _one_target(ens: Ensemble, leaves: np.ndarray) -> np.ndarray:
    """[N] the one-target path's trees combined: the sum (SUM, AVERAGE), least or largest of
    the value each leaf reached (onnxruntime's ``ProcessTreeNodePrediction1``)."""
    if not ens.n_trees:
        return np.zeros(leaves.shape[0], ens.dtype)
    vals = ens.first[leaves]
    if ens.aggregate in ("SUM", "AVERAGE"):
        return np.cumsum(vals, axis=1, dtype=ens.dtype)[:, -1]
    return vals.min(axis=1) if ens.aggregate == "MIN" else vals.max(axis=1)


def _finish_one(ens: Ensemble, acc: np.ndarray) -> np.ndarray:
    """[N] the one-target score: divided by the trees (AVERAGE), plus the one base value
    (``FinalizeScores1``)."""
    dt = ens.dtype
    if ens.aggregate == "AVERAGE":
        acc = acc / dt.type(ens.n_trees)       # (no tree: 0 / 0, NaN, as onnxruntime)
    return acc + (ens.base[0] if ens.base.size == 1 else dt.type(0))


def _many_targets(ens: Ensemble, leaves: np.ndarray):
    """([N, E] scores, [N, E] whether a leaf reached each) of the several-target path."""
    n, e_out, dt = leaves.shape[0], ens.n_out, ens.dtype
    flat = leaves.reshape(-1)
    cnt = ens.count[flat]
    total = int(cnt.sum())
    entry = np.repeat(ens.ptr[flat], cnt) + (np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt))
    rows = np.repeat(np.arange(n), cnt.reshape(n, -1).sum(axis=1)) if n else np.zeros(0, np.int64)
    idx = rows * e_out + ens.ids[entry]
    w = ens.ws[entry]
    size = n * e_out
    reached = np.bincount(idx, minlength=size) > 0
    if ens.aggregate in ("SUM", "AVERAGE"):
        if dt == np.float64:
            s = np.bincount(idx, w, minlength=size).astype(dt, copy=False)     # (int64 when idx is empty)
        else:
            s = np.zeros(size, dt)
            np.add.at(s, idx, w)
    else:
        s = np.full(size, np.inf if ens.aggregate == "MIN" else -np.inf, dt)
        (np.minimum if ens.aggregate == "MIN" else np.maximum).at(s, idx, w)
        s[~reached] = 0
    return s.reshape(n, e_out), reached.reshape(n, e_out)


def accumulate(ens: Ensemble, x: np.ndarray) -> tuple:
    """The trees' leaves combined per sample, before base values and post transforms: one
    target, ([N] scores, None); several, ([N, E] scores, [N, E] whether a leaf reached each
    target). ``x``: X as fed ([N, F] or [F]). The compiled kernel (``fast.trees``) computes
    the same in one pass."""
    leaves = _leaves(ens, x)
    if ens.n_out == 1:
        return _one_target(ens, leaves), None
    return _many_targets(ens, leaves)


def regress(ens: Ensemble, x: np.ndarray, combine=accumulate) -> np.ndarray:
    """Y [N, n_targets] float32 from ``combine(ens, x)`` (:func:`accumulate`'s result)."""
    s, reached = combine(ens, x)
    if ens.n_out == 1:
        s = _finish_one(ens, s).astype(_F32)[:, None]
        return _probit(s) if ens.post == "PROBIT" else s
    use_base = ens.base.size == ens.n_out
    if ens.aggregate == "AVERAGE":
        s = s / ens.dtype.type(ens.n_trees)
    if use_base:
        s = s + ens.base
    return _transform(np.where(reached, s, 0).astype(_F32), ens.post)


def classify(ens: Ensemble, x: np.ndarray, combine=accumulate) -> tuple:
    """(label per sample: an index into the labels, or where ``literal`` onnxruntime's 1 / 0,
    literal, [N, E] float32 scores) from ``combine(ens, x)`` (:func:`accumulate`'s result), by
    onnxruntime's rules (``TreeAggregatorClassifier``)."""
    s, has = combine(ens, x)
    dt, post = ens.dtype, ens.post
    if ens.n_out == 1:                    # one class: FinalizeScores1
        s = _finish_one(ens, s)
        z = s.astype(_F32)[:, None]
        return (s > 0).astype(np.int64), True, (_probit(z) if post == "PROBIT" else z)
    n = s.shape[0]
    if ens.n_out > 2:
        s[:, :ens.base.size] += ens.base
        has[:, :ens.base.size] = True
        top = np.argmax(np.where(has, s, -np.inf), axis=1)
        return top, False, _transform(np.where(has, s, 0).astype(_F32), post)
    s0, s1, h0, h1 = s[:, 0], s[:, 1], has[:, 0], has[:, 1]
    additional = np.full(n, -1)
    if ens.base.size == 2:
        t = ens.base[1] + s0
        s0, s1 = np.where(h1, -t, s0 + ens.base[0]), np.where(h1, t, s1 + ens.base[1])
        pair = np.ones(n, bool)
    else:
        if ens.base.size == 1:
            s0 = s0 + ens.base[0]
        else:
            additional[:] = 3
        pair = h1
    v0, v1 = np.where(h0, s0, dt.type(0)), np.where(h1, s1, dt.type(0))
    pos = np.where(pair & h1, s1, v0)
    if ens.binary_case:
        win = pos > 0.5 if ens.all_positive else pos > 0
        additional = np.where(win, 0, 1) if ens.all_positive else np.where(win, 2, 3)
        label, literal = win.astype(np.int64), False
    else:
        label, literal = (pos > 0).astype(np.int64), True
    z = np.empty((n, 2), _F32)
    if pair.any():
        z[pair] = _transform(np.stack([v0[pair], v1[pair]], axis=1).astype(_F32), post)
    one = ~pair
    if one.any():
        a, w0 = additional[one], v0[one]
        if post == "PROBIT":
            first, second = _probit(w0.astype(_F32)), np.full(w0.shape, np.nan, _F32)
        else:
            second = np.where(a >= 0, w0, np.nan).astype(_F32)
            first = np.where(a <= 1, dt.type(1) - w0, -w0)
            first = np.where(a < 0, w0, first).astype(_F32)
            if post == "LOGISTIC":     # (mixed weights: [logistic(-s), logistic(s)]; else [1 - logistic(s), ...])
                f32 = w0.astype(_F32)
                prob = _logistic(f32)
                first = np.where(a >= 2, _logistic(-f32), np.where(a >= 0, _F32(1) - prob, first))
                second = np.where(a >= 0, prob, second)
        z[one, 0], z[one, 1] = first, second
    return label, literal, z


def write_regressor(outputs, y: np.ndarray):
    if outputs[0] is None:
        return [y]
    outputs[0][...] = y
    return None


def write_classifier(ens: Ensemble, outputs, classified: tuple):
    """The label and score outputs from :func:`classify`'s result."""
    index, literal, z = classified
    if literal and ens.labels.dtype == np.int64:
        label = index                               # (onnxruntime: 1 or 0, not a class label)
    else:                                           # (one string label: index 1 is past it in onnxruntime)
        label = ens.labels[np.minimum(index, ens.labels.size - 1)]
    if outputs[0] is None or outputs[1] is None:
        return [label, z]
    outputs[0][...] = label
    if z is not outputs[1]:
        outputs[1][...] = z
    return None


@lib.kernel("TreeEnsembleRegressor", domain=DOMAIN, prepare=ensemble, dtypes=X_DTYPES)
def _tree_ensemble_regressor(inputs, outputs, ens: Ensemble):
    return write_regressor(outputs, regress(ens, inputs[0]))


@lib.kernel("TreeEnsembleClassifier", domain=DOMAIN, prepare=ensemble, dtypes=X_DTYPES)
def _tree_ensemble_classifier(inputs, outputs, ens: Ensemble):
    return write_classifier(ens, outputs, classify(ens, inputs[0]))
