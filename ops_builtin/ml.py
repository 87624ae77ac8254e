"""Classical machine-learning operators of the ``ai.onnx.ml`` domain: LabelEncoder,
TreeEnsemble, ArrayFeatureExtractor, Binarizer.

LabelEncoder looks values up in its sorted keys (``searchsorted``, last repeated key
wins); TreeEnsemble walks every (sample, tree) pair one level per step, all pairs at once,
so the Python loop runs over the trees' depth only (:func:`walk_trees`, which the older tree
ensembles of :mod:`.ml_tree` share); aggregation is one ``bincount`` (or ``minimum.at`` /
``maximum.at``).

Source: ONNX operator spec (Operators-ml.md): LabelEncoder-1/2/4, TreeEnsemble-5,
ArrayFeatureExtractor-1, Binarizer-1.
"""
from __future__ import annotations

import numpy as np
from dynashape.errors import ShapeInferenceError
from dynashape.records import OpLibrary, same_dtype
from dynashape.shapes import numel, require

DOMAIN = "ai.onnx.ml"
lib = OpLibrary()

_STRING = np.dtype(object)


def _is_string(dt) -> bool:
    return dt is not None and np.dtype(dt).kind in "OUS"


def _texts(x: np.ndarray) -> list:
    return [s.decode("utf-8", errors="replace") if isinstance(s, bytes) else str(s) for s in x.reshape(-1).tolist()]


def _dtype_name(dt) -> str:
    return "string" if _is_string(dt) else np.dtype(dt).name


# LabelEncoder ---------------------------------------------------------------------------

class _Table:
    """A LabelEncoder mapping: sorted keys, their values, the default and the NaN value.

    ``bitwise``: float32 keys compared as their bit patterns (v2: a NaN key matches the
    same NaN bits; -0.0 is not 0.0). ``last_wins``: a repeated key maps to its last value
    (v4), else to its first (v1, v2, as onnxruntime). Plain attributes (no ``__eq__``):
    the keys may hold NaN, which no deep comparison of prepared arguments should trip over.
    """

    def __init__(self, keys, values, default, out_dtype, string_keys, nan_value, bitwise, last_wins):
        self.keys, self.values, self.default, self.out_dtype = keys, values, default, out_dtype
        self.string_keys, self.nan_value, self.bitwise, self.last_wins = string_keys, nan_value, bitwise, last_wins


_BUILTIN_DEFAULT = {"O": "_Unused", "i": -1, "u": -1, "f": -0.0}


def _label_attrs(ctx):
    """(keys, values, default, key dtype, value dtype) of the node's version."""
    if ctx.opset < 2:
        classes = list(ctx.attr("classes_strings") or [])
        if _is_string(ctx.dtype(0)):
            return (np.asarray(classes, dtype=object), np.arange(len(classes), dtype=np.int64),
                    int(ctx.attr("default_int64", -1)), _STRING, np.dtype(np.int64))
        return (np.arange(len(classes), dtype=np.int64), np.asarray(classes, dtype=object),
                str(ctx.attr("default_string", "_Unused")), np.dtype(np.int64), _STRING)
    kinds = (("floats", np.float32), ("int64s", np.int64), ("strings", object))
    if ctx.opset >= 4:
        kinds = kinds + (("tensor", None),)
    found = {}
    for side in ("keys", "values"):
        given = [(name, dt) for name, dt in kinds if ctx.attr(f"{side}_{name}") is not None]
        if len(given) != 1:
            names = ", ".join(f"{side}_{n}" for n, _ in kinds)
            ctx.fail(f"exactly one of {names} must be given, got {len(given)}", kind="InvalidAttribute")
        name, dt = given[0]
        raw = ctx.attr(f"{side}_{name}")
        # (a list of str as an object array: numpy's U strings would drop trailing NULs)
        arr = np.asarray(list(raw), dtype=object) if name == "strings" else np.asarray(raw)
        arr = arr.reshape(-1).astype(dt if dt is not None else arr.dtype)
        if _is_string(arr.dtype):
            arr = np.asarray(_texts(arr), dtype=object).reshape(-1)
        found[side] = (name, arr)
    (kname, keys), (vname, values) = found["keys"], found["values"]
    if keys.size != values.size:
        ctx.fail(f"keys_{kname} has {keys.size} entries but values_{vname} has {values.size}; they must "
                 "have the same length", kind="InvalidAttribute")
    out_dtype = _STRING if _is_string(values.dtype) else values.dtype
    default = ctx.attr("default_tensor") if ctx.opset >= 4 else None
    if default is not None:
        default = np.asarray(default)
        if default.size != 1 or _dtype_name(default.dtype) != _dtype_name(out_dtype):
            ctx.fail(f"default_tensor must hold one {_dtype_name(out_dtype)} value, got "
                     f"{default.size} of {_dtype_name(default.dtype)}", kind="InvalidAttribute")
        default = default.reshape(-1)[0]
        default = _texts(np.asarray([default], dtype=object))[0] if out_dtype == _STRING else default
    elif out_dtype == _STRING:
        default = str(ctx.attr("default_string", "_Unused"))
    elif out_dtype == np.int64:
        default = int(ctx.attr("default_int64", -1))
    elif out_dtype == np.float32:
        default = float(ctx.attr("default_float", -0.0))
    else:
        default = _BUILTIN_DEFAULT[out_dtype.kind]
    key_dtype = _STRING if _is_string(keys.dtype) else keys.dtype
    return keys, values, default, key_dtype, out_dtype


def _nul_safe(texts: list) -> np.ndarray:
    """Strings as a numpy unicode array that keeps trailing NULs: numpy's ``U`` strings drop
    them ("B\\0" would equal "B"), so each gets one more character, the same for keys and
    inputs (equality and a consistent order are all the lookup needs)."""
    return np.asarray([t + "\x01" for t in texts], dtype=str)


def _label_table(ctx) -> _Table:
    keys, values, default, key_dtype, out_dtype = _label_attrs(ctx)
    string_keys = key_dtype == _STRING
    nan_value, last_wins = None, ctx.opset >= 4
    bitwise = not last_wins and keys.dtype == np.float32
    if string_keys:
        keys = _nul_safe(keys.tolist())
    elif bitwise:
        keys = keys.view(np.int32)
    elif keys.dtype.kind == "f":
        nan = np.isnan(keys)
        if nan.any():
            nan_value = values[np.nonzero(nan)[0][-1 if last_wins else 0]]
            keys, values = keys[~nan], values[~nan]
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    if out_dtype == _STRING:
        values = np.asarray(values.tolist() + [None], dtype=object)[:-1]
    else:
        values = values.astype(out_dtype)
    return _Table(keys, values, default, out_dtype, string_keys, nan_value, bitwise, last_wins)


def _label_dtype(ctx):
    return [_label_attrs(ctx)[4]]


def _label_shape(ctx):
    """LabelEncoder: each element mapped through ``keys_*`` -> ``values_*`` (the default
    where it is not a key); the output has the input's shape and the values' type.

    v1: ``classes_strings`` maps strings to their index (``default_int64``) or int64 indices
    to strings (``default_string``). v2: ``keys_{floats,int64s,strings}`` /
    ``values_{floats,int64s,strings}`` with ``default_{float,int64,string}``. v4 adds
    ``keys_tensor`` / ``values_tensor`` (int16/int32/int64/float/double/string) and
    ``default_tensor`` (which wins over ``default_*``); a repeated key: the last one wins
    (v1/v2: the first, as onnxruntime); a NaN key matches every NaN (v2: float keys compare
    bit-wise, so a NaN key matches the same NaN bits). Raises: ShapeInferenceError kinds InvalidAttribute,
    InvalidDtype. Source: ONNX operator spec, ai.onnx.ml LabelEncoder-1, -2, -4.
    """
    keys, _, _, key_dtype, _ = _label_attrs(ctx)
    dt = ctx.dtype(0)
    if dt is not None and _dtype_name(dt) != _dtype_name(key_dtype):
        ctx.fail(f"input has dtype {_dtype_name(dt)} but the keys are {_dtype_name(key_dtype)}; they must "
                 "match", kind="InvalidDtype")
    return [ctx.shape(0)]


lib.op("LabelEncoder", since_version=(1, 2, 4), domain=DOMAIN, infer_dtype=_label_dtype)(_label_shape)


@lib.kernel("LabelEncoder", domain=DOMAIN, prepare=_label_table)
def _label_encoder(inputs, outputs, table):
    """Binary search of every element in the sorted keys (last repeated key wins)."""
    x = inputs[0]
    if table.string_keys:
        vals = _nul_safe(_texts(x)).reshape(x.shape)
    elif table.bitwise:
        vals = np.ascontiguousarray(x, dtype=np.float32).view(np.int32)
    else:
        vals = x
    n = table.keys.size
    if n:
        if table.last_wins:
            pos = np.searchsorted(table.keys, vals, side="right") - 1
        else:
            pos = np.searchsorted(table.keys, vals, side="left")
        safe = np.clip(pos, 0, n - 1)
        found = (pos >= 0) & (table.keys[safe] == vals)
        y = np.where(found, table.values[safe], np.asarray(table.default, dtype=table.out_dtype))
    else:
        y = np.full(x.shape, table.default, dtype=table.out_dtype)
    if table.nan_value is not None:
        y = np.where(np.isnan(vals), table.nan_value, y)
    if outputs[0] is None:
        return [np.asarray(y, dtype=table.out_dtype)]
    outputs[0][...] = y
    return None


# TreeEnsemble ---------------------------------------------------------------------------

_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_MEMBER")
_MEMBER = 6
_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
#: post_transform's values, by their int code (TreeEnsemble-5) or name (the ml ops of opset 1-3)
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
_COMPARE = {0: np.less_equal, 1: np.less, 2: np.greater_equal, 3: np.greater, 4: np.equal, 5: np.not_equal}


class _Forest:
    """The trees as flat arrays. A child is a node index (>= 0) or ``-(leaf + 1)``."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def _tensor_attr(ctx, name: str, required: bool = True):
    """Attribute ``name`` flattened to 1-D (None when absent and not ``required``)."""
    v = ctx.attr(name)
    if v is None:
        if required:
            ctx.fail(f"attribute '{name}' is required", kind="MissingAttribute")
        return None
    return np.asarray(v).reshape(-1)


def _int_attr_list(ctx, name: str, required: bool = True):
    v = _tensor_attr(ctx, name, required)
    return None if v is None else v.astype(np.int64)


def _forest(ctx) -> _Forest:
    feature = _int_attr_list(ctx, "nodes_featureids")
    splits = _tensor_attr(ctx, "nodes_splits").astype(np.float64)
    modes = _tensor_attr(ctx, "nodes_modes").astype(np.int64)
    true_ids, false_ids = _int_attr_list(ctx, "nodes_truenodeids"), _int_attr_list(ctx, "nodes_falsenodeids")
    true_leaf, false_leaf = _int_attr_list(ctx, "nodes_trueleafs"), _int_attr_list(ctx, "nodes_falseleafs")
    missing = _int_attr_list(ctx, "nodes_missing_value_tracks_true", required=False)
    n_nodes = feature.size
    named = {"nodes_splits": splits, "nodes_modes": modes, "nodes_truenodeids": true_ids,
             "nodes_falsenodeids": false_ids, "nodes_trueleafs": true_leaf, "nodes_falseleafs": false_leaf}
    if missing is not None:
        named["nodes_missing_value_tracks_true"] = missing
    for name, arr in named.items():
        if arr.size != n_nodes:
            ctx.fail(f"{name} has {arr.size} entries, nodes_featureids has {n_nodes}; every nodes_* attribute "
                     "must have one entry per node", kind="InvalidAttribute")
    targets = _int_attr_list(ctx, "leaf_targetids")
    weights = _tensor_attr(ctx, "leaf_weights").astype(np.float64)
    if weights.size != targets.size:
        ctx.fail(f"leaf_weights has {weights.size} entries, leaf_targetids has {targets.size}",
                 kind="InvalidAttribute")
    roots = _int_attr_list(ctx, "tree_roots")
    n_targets = ctx.attr("n_targets")
    n_targets = int(n_targets) if n_targets is not None else (int(targets.max()) + 1 if targets.size else 1)
    aggregate, post = int(ctx.attr("aggregate_function", 1)), int(ctx.attr("post_transform", 0))
    if not 0 <= aggregate < len(_AGGREGATES):
        ctx.fail(f"aggregate_function {aggregate} is not one of 0..3 ({', '.join(_AGGREGATES)})",
                 kind="InvalidAttribute")
    if not 0 <= post < len(POST_TRANSFORMS):
        ctx.fail(f"post_transform {post} is not one of 0..4 ({', '.join(POST_TRANSFORMS)})", kind="InvalidAttribute")
    if modes.size and (modes.min() < 0 or modes.max() > _MEMBER):
        ctx.fail(f"nodes_modes must be in 0..6 ({', '.join(_MODES)})", kind="InvalidAttribute")
    if targets.size and (targets.min() < 0 or targets.max() >= n_targets):
        ctx.fail(f"leaf_targetids must be in [0, {n_targets}) (n_targets)", kind="InvalidAttribute")
    if roots.size and (roots.min() < 0 or roots.max() >= n_nodes):
        ctx.fail(f"tree_roots must index nodes in [0, {n_nodes})", kind="InvalidAttribute")
    if n_nodes and feature.min() < 0:
        ctx.fail("nodes_featureids must be >= 0", kind="InvalidAttribute")
    children = []
    for ids, leaf, what in ((true_ids, true_leaf, "true"), (false_ids, false_leaf, "false")):
        is_leaf = leaf != 0
        bound = np.where(is_leaf, targets.size, n_nodes)
        if ids.size and ((ids < 0) | (ids >= bound)).any():
            ctx.fail(f"nodes_{what}nodeids must index leaves in [0, {targets.size}) where nodes_{what}leafs "
                     f"is 1 and nodes in [0, {n_nodes}) otherwise", kind="InvalidAttribute")
        children.append(np.where(is_leaf, -ids - 1, ids))
    member_values, member_keys = _membership(ctx, modes)
    depth = tree_depth(ctx, roots, children[0], children[1], n_nodes)
    return _Forest(feature=feature, splits=splits, modes=modes, true_child=children[0], false_child=children[1],
                   missing=(missing != 0) if missing is not None else None, roots=roots, targets=targets,
                   weights=weights, n_targets=n_targets, aggregate=aggregate, post=post, depth=depth,
                   member_values=member_values, member_keys=member_keys,
                   present=sorted(set(modes.tolist())), max_feature=int(feature.max()) if n_nodes else -1)


def _membership(ctx, modes):
    """(sorted distinct member values, sorted keys ``node * len(values) + value rank``)."""
    members = np.nonzero(modes == _MEMBER)[0]
    values = _tensor_attr(ctx, "membership_values", required=False)
    if values is None:
        if members.size:
            ctx.fail("BRANCH_MEMBER nodes need the attribute membership_values", kind="MissingAttribute")
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    values = values.astype(np.float64)
    nan = np.isnan(values)
    n_sets = int(nan.sum()) + int(values.size > 0 and not nan[-1])
    if n_sets != members.size:
        ctx.fail(f"membership_values holds {n_sets} NaN-delimited sets, expected one per BRANCH_MEMBER node "
                 f"({members.size})", kind="InvalidAttribute")
    set_of = np.cumsum(nan)[~nan]
    vals = values[~nan]
    uniq = np.unique(vals)
    keys = np.unique(members[set_of] * uniq.size + np.searchsorted(uniq, vals))
    return uniq, keys


def tree_depth(ctx, roots, true_child, false_child, n_nodes) -> int:
    """The number of levels to walk from the ``roots`` (node positions; children: a node, or a
    leaf as a negative code). Fails on a cycle."""
    level, depth = np.unique(roots), 0
    while level.size:
        depth += 1
        if depth > n_nodes:
            ctx.fail("the trees contain a cycle (a node reachable from itself)", kind="InvalidAttribute")
        nxt = np.concatenate([true_child[level], false_child[level]])
        level = np.unique(nxt[nxt >= 0])
    return depth


@lib.op("TreeEnsemble", since_version=5, domain=DOMAIN, infer_dtype=same_dtype(0))
def _tree_shape(ctx):
    """TreeEnsemble: [N, F] features -> [N, n_targets] aggregated leaf weights.

    Each tree is walked from ``tree_roots`` by comparing feature ``nodes_featureids`` with
    ``nodes_splits`` (``nodes_modes``: LEQ, LT, GTE, GT, EQ, NEQ, or MEMBER of the node's
    NaN-delimited set in ``membership_values``; NaN features take the true branch where
    ``nodes_missing_value_tracks_true``); children are nodes, or leaves where
    ``nodes_{true,false}leafs``. Leaf weights add to target ``leaf_targetids`` by
    ``aggregate_function`` (AVERAGE, SUM, MIN, MAX; a target no leaf reaches is 0), then
    ``post_transform`` (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT). Raises:
    ShapeInferenceError kinds InvalidRank, InvalidAttribute, MissingAttribute,
    FeatureOutOfRange. Source: ONNX operator spec, ai.onnx.ml TreeEnsemble-5.
    """
    forest = _forest(ctx)
    shape = ctx.shape(0)
    if len(shape) != 2:
        ctx.fail(f"X must be [N, F], got rank {len(shape)}", kind="InvalidRank")
    n_features = shape[1]
    require(ctx, n_features, ">", forest.max_feature,
            f"nodes_featureids reads feature {forest.max_feature} but X has {n_features} features", "FeatureOutOfRange")
    return [(shape[0], forest.n_targets)]


def _branch(forest: _Forest, nodes: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Whether each (node, feature value) pair takes the true branch."""
    modes = forest.modes[nodes]
    cond = np.zeros(nodes.size, dtype=bool)
    for mode in forest.present:
        sel = modes == mode if len(forest.present) > 1 else slice(None)
        if mode == _MEMBER:
            xs, uniq = x[sel], forest.member_values
            rank = np.minimum(np.searchsorted(uniq, xs), max(uniq.size - 1, 0))
            hit = (uniq[rank] == xs) if uniq.size else np.zeros(xs.shape, dtype=bool)
            cond[sel] = hit & np.isin(nodes[sel] * uniq.size + rank, forest.member_keys)
        else:
            cond[sel] = _COMPARE[mode](x[sel], forest.splits[nodes[sel]])
    if forest.missing is not None:
        cond |= forest.missing[nodes] & np.isnan(x)
    return cond


def _erfinv(y: np.ndarray) -> np.ndarray:
    """Inverse error function, Winitzki's approximation (as onnxruntime's ML ops)."""
    sgn = np.where(y < 0, -1.0, 1.0)
    log = np.log((1.0 - y) * (1.0 + y))
    a = 2.0 / (np.pi * 0.147) + 0.5 * log
    return sgn * np.sqrt(np.sqrt(a * a - log / 0.147) - a)


def post_transform(scores: np.ndarray, post: int) -> np.ndarray:
    """``scores`` (N, targets) after the post_transform of code ``post`` (POST_TRANSFORMS)."""
    if post == 1:        # SOFTMAX
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if post == 2:        # LOGISTIC
        return 1.0 / (1.0 + np.exp(-scores))
    if post == 3:        # SOFTMAX_ZERO: zeros stay zero, the others are a softmax among themselves
        nonzero = np.abs(scores) > 1e-7
        e = np.where(nonzero, np.exp(scores - scores.max(axis=1, keepdims=True)), 0.0)
        total = e.sum(axis=1, keepdims=True)
        return np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    if post == 4:        # PROBIT
        return np.sqrt(2.0) * _erfinv(2.0 * scores - 1.0)
    return scores


def walk_trees(forest, x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The leaf each sample reaches in each tree: [N, trees] leaf numbers.

    ``x`` [N, F] in the dtype the splits compare in; ``starts`` one code per tree, a node
    (>= 0) or a leaf ``-(leaf + 1)`` (a tree that is a single leaf). ``forest`` gives
    ``feature``, ``splits``, ``modes``, ``present``, ``missing``, ``member_*``,
    ``true_child`` / ``false_child`` (codes as ``starts``) and ``depth``. Every (sample,
    tree) pair still on a node takes one step per level, all at once; the pairs that reached
    a leaf drop out of the (flat) list of those still walking.
    """
    n, n_trees = x.shape[0], starts.size
    cur = np.tile(starts, n)
    flat_x = np.ascontiguousarray(x).reshape(-1)
    walking = np.nonzero(cur >= 0)[0]
    offset = walking // max(n_trees, 1) * x.shape[1]      # where each walking pair's sample starts in flat_x
    children = np.stack([forest.false_child, forest.true_child], axis=1).reshape(-1)   # node * 2 + went true
    for _ in range(forest.depth):
        if walking.size == 0:
            break
        nodes = cur[walking]
        go_true = _branch(forest, nodes, flat_x[offset + forest.feature[nodes]])
        step = children[nodes * 2 + go_true]
        cur[walking] = step
        on = step >= 0
        walking, offset = walking[on], offset[on]
    return (-cur - 1).reshape(n, n_trees)


@lib.kernel("TreeEnsemble", domain=DOMAIN, prepare=_forest, dtypes=("float32", "float64", "float16"))
def _tree_ensemble(inputs, outputs, forest):
    x = inputs[0].astype(np.float64)
    n, n_trees = x.shape[0], forest.roots.size
    leaves = walk_trees(forest, x, forest.roots)
    flat = (np.arange(n)[:, None] * forest.n_targets + forest.targets[leaves]).reshape(-1)
    weights = forest.weights[leaves].reshape(-1)
    size = n * forest.n_targets
    if forest.aggregate in (0, 1):
        scores = np.bincount(flat, weights, minlength=size)
        if forest.aggregate == 0 and n_trees:
            scores /= n_trees
    else:
        fill = np.inf if forest.aggregate == 2 else -np.inf
        scores = np.full(size, fill)
        (np.minimum if forest.aggregate == 2 else np.maximum).at(scores, flat, weights)
        scores[np.isinf(scores) & (scores == fill)] = 0.0
    scores = post_transform(scores.reshape(n, forest.n_targets), forest.post)
    if outputs[0] is None:
        return [scores.astype(inputs[0].dtype)]
    np.copyto(outputs[0], scores, casting="unsafe")
    return None


# ArrayFeatureExtractor ------------------------------------------------------------------

def _extractor_out(shape_x, shape_y):
    k = numel(shape_y)
    return (1, k) if len(shape_x) == 1 else tuple(shape_x[:-1]) + (k,)


def _extractor_shape(ctx):
    """ArrayFeatureExtractor: X[..., Y] with the int64 indices Y flattened: [..., numel(Y)];
    a 1-D X gives [1, numel(Y)] (as onnxruntime). Indices must be in [0, X.shape[-1]).

    Raises: ShapeInferenceError kinds InvalidRank, InvalidDtype, IndexOutOfRange.
    Source: ONNX operator spec, ai.onnx.ml ArrayFeatureExtractor-1.
    """
    shape_x, shape_y = ctx.shape(0), ctx.shape(1)
    if len(shape_x) == 0:
        ctx.fail("X must have rank >= 1", kind="InvalidRank")
    if ctx.dtype(1) is not None and ctx.dtype(1) != np.int64:
        ctx.fail(f"Y has dtype {np.dtype(ctx.dtype(1)).name}, expected int64", kind="InvalidDtype")
    dt = ctx.dtype(0)
    if dt is not None and not _is_string(dt) and np.dtype(dt).name not in ("float32", "float64", "int64", "int32"):
        ctx.fail(f"X has dtype {np.dtype(dt).name}, expected float, double, int64, int32 or string",
                 kind="InvalidDtype")
    y = ctx.value(1)
    d = shape_x[-1]
    for v in ([] if y is None else np.asarray(y).reshape(-1).tolist()):
        message = f"index {v} is out of range for the last axis of X (size {d}); expected [0, {d - 1}]"
        require(ctx, v, ">=", 0, message, "IndexOutOfRange")
        require(ctx, d, ">", v, message, "IndexOutOfRange")
    return [_extractor_out(shape_x, shape_y)]


def _extractor_value(ctx):
    x, y = ctx.value(0), ctx.value(1)
    if x is None or y is None or np.asarray(y).dtype == object:
        return [None]
    x, idx = np.asarray(x), np.asarray(y).reshape(-1).astype(np.int64)
    if x.ndim == 0 or ((idx < 0) | (idx >= x.shape[-1])).any():
        return [None]
    return [np.take(x, idx, axis=-1).reshape(_extractor_out(x.shape, np.shape(y)))]


lib.op("ArrayFeatureExtractor", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0),
       propagate_value=_extractor_value)(_extractor_shape)


class _Extraction:
    """The indices when they are a constant of the model (the shape rule's guards checked them
    against X's last dim once per signature: the kernel takes them as they are), else None."""

    __slots__ = ("indices", "node")

    def __init__(self, indices, node: str):
        self.indices, self.node = indices, node


def _extraction(ctx) -> _Extraction:
    y = ctx.value(1)
    known = y is not None and np.asarray(y).dtype != object
    return _Extraction(np.ascontiguousarray(np.asarray(y).reshape(-1), dtype=np.intp) if known else None,
                       ctx.node.name or "<unnamed>")


@lib.kernel("ArrayFeatureExtractor", domain=DOMAIN, prepare=_extraction)
def _array_feature_extractor(inputs, outputs, plan: _Extraction):
    x, y = inputs
    idx = plan.indices
    if idx is None:      # (indices fed at run time: checked here)
        idx = np.asarray(y).reshape(-1)
        _check_indices(idx, x.shape[-1], plan.node)
    out = outputs[0]
    if out is not None and out.flags.c_contiguous:       # (indices in range: "clip" moves nothing)
        np.take(x, idx, axis=-1, out=out.reshape(x.shape[:-1] + idx.shape), mode="clip")
        return None
    res = np.take(x, idx, axis=-1).reshape(_extractor_out(x.shape, y.shape))
    if out is None:
        return [res]
    out[...] = res
    return None


def _check_indices(idx: np.ndarray, d: int, node: str) -> None:
    """Raise IndexOutOfRange unless every index is in [0, d). int64 indices viewed as unsigned
    take one reduction (a negative one is then larger than any size)."""
    if not idx.size:
        return
    if idx.size == 1:                  # (a classifier's one label at batch 1: no reduction)
        inside = 0 <= idx.item() < d
    elif idx.dtype == np.int64 and idx.flags.c_contiguous:
        inside = int(idx.view(np.uint64).max()) < d
    else:
        inside = idx.min() >= 0 and idx.max() < d
    if not inside:
        bad = idx[(idx < 0) | (idx >= d)][0]
        raise ShapeInferenceError(
            f"ArrayFeatureExtractor node '{node}': index {bad} is out of range for the last axis of X "
            f"(size {d}); expected [0, {d - 1}]", node=node, op_type="ArrayFeatureExtractor", kind="IndexOutOfRange")


# Binarizer ------------------------------------------------------------------------------

@lib.op("Binarizer", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _binarizer_shape(ctx):
    """Binarizer: 1 where X > ``threshold`` (default 0.0), else 0, in X's type and shape.

    Raises: ShapeInferenceError kind InvalidDtype. Source: ONNX operator spec, ai.onnx.ml
    Binarizer-1.
    """
    dt = ctx.dtype(0)
    if dt is not None and np.dtype(dt).name not in ("float32", "float64", "int64", "int32"):
        ctx.fail(f"X has dtype {np.dtype(dt).name}, expected float, double, int64 or int32", kind="InvalidDtype")
    return [ctx.shape(0)]


@lib.kernel("Binarizer", domain=DOMAIN, prepare=lambda ctx: float(ctx.attr("threshold", 0.0)),
            may_inplace=((0, 0),))
def _binarizer(inputs, outputs, threshold):
    np.copyto(outputs[0], np.greater(inputs[0], threshold), casting="unsafe")
