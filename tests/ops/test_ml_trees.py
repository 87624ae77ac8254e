"""TreeEnsembleClassifier and TreeEnsembleRegressor (ai.onnx.ml-1, -3, -5; ops_builtin/ml_tree.py).

Hand-built one-node models: values worked out by hand, and onnxruntime's on one session per
allocator through batches of changing size (0 included). onnxruntime's departures from the
spec that the kernels follow (one target: PROBIT only; the two-class rules; unreached targets
are 0) each have a test that states the value.
"""
from __future__ import annotations

import dynashape
import numpy as np
import onnx
import pytest
from dynashape.registry import get_registry
from dynashape.testing import run_node
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import assert_runs_match, ort_predates, spec_versions

ML = "ai.onnx.ml"
F32, F64, I64, I32, S = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32, TensorProto.STRING
REG, CLS = "TreeEnsembleRegressor", "TreeEnsembleClassifier"
NP = {F32: np.float32, F64: np.float64, I64: np.int64, I32: np.int32}


def model(op, attrs, ml_opset=3, xt=F32, dims=("N", 3)):
    outs = [("y", F32)] if op == REG else [("label", S if "classlabels_strings" in attrs else I64), ("z", F32)]
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], [o for o, _ in outs], domain=ML, **attrs)], "g",
        [helper.make_tensor_value_info("x", xt, list(dims))],
        [helper.make_tensor_value_info(o, t, None) for o, t in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)])


def ml(op, x, attrs, opset=3):
    """run_node in the ai.onnx.ml domain (TensorProto attributes read as a model import does)."""
    attrs = {k: numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for k, v in attrs.items()}
    return run_node(op, [x], attrs, opset=opset, domain=ML, n_outputs=1 if op == REG else 2)


# Two trees over 3 features, every branch mode. Tree 0 (id 0): f0 <= 0.5 (NaN: true) ? (f1 > 1 ?
# leaf 3 : leaf 4) : leaf 2. Tree 1 (id 5, listed out of order after its root): f2 == 2 ? leaf 1 :
# (f0 != 3 ? (f1 < 0 ? leaf 5 : leaf 6) : (f2 >= 1 ? leaf 7 : leaf 8)).
NODES = {
    "nodes_treeids": [0, 0, 0, 0, 0, 5, 5, 5, 5, 5, 5, 5, 5, 5],
    "nodes_nodeids": [0, 1, 2, 3, 4, 0, 4, 2, 1, 3, 8, 7, 6, 5],
    "nodes_featureids": [0, 1, 0, 0, 0, 2, 2, 0, 0, 1, 0, 0, 0, 0],
    "nodes_modes": ["BRANCH_LEQ", "BRANCH_GT", "LEAF", "LEAF", "LEAF", "BRANCH_EQ", "BRANCH_GTE", "BRANCH_NEQ",
                    "LEAF", "BRANCH_LT", "LEAF", "LEAF", "LEAF", "LEAF"],
    "nodes_values": [0.5, 1.0, 0.0, 0.0, 7.0, 2.0, 1.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    "nodes_truenodeids": [1, 3, 0, 0, 0, 1, 7, 3, 0, 5, 0, 0, 0, 0],
    "nodes_falsenodeids": [2, 4, 0, 0, 0, 2, 8, 4, 0, 6, 0, 0, 0, 0],
    "nodes_missing_value_tracks_true": [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
}
#: (tree, leaf) -> [(target, weight)]; tree 0's leaf 4 has none
LEAVES = {(0, 2): [(0, 1.5)], (0, 3): [(1, -2.0), (2, 0.5)], (5, 1): [(0, 4.0)], (5, 5): [(1, 0.25)],
          (5, 6): [(0, -1.0)], (5, 7): [(2, 8.0)], (5, 8): [(0, 0.5), (1, 0.5)]}
#: rows and the leaves they reach: [0, 2, 2] -> (0, 3), (5, 1); [1, 0, 0] -> (0, 2), (5, 6);
#: [nan, -1, 1] -> (0, 4), (5, 5) (NaN != 3 is true); [0, 0, 0] -> (0, 4), (5, 6); [3, 5, 1] -> (0, 2), (5, 7)
ROWS = np.array([[0, 2, 2], [1, 0, 0], [np.nan, -1, 1], [0, 0, 0], [3, 5, 1]], np.float32)


def weights(prefix, leaves=LEAVES, one_target=False):
    pairs = [(t, n, k, w) for (t, n), ws in leaves.items() for k, w in ws]
    return {f"{prefix}_treeids": [p[0] for p in pairs], f"{prefix}_nodeids": [p[1] for p in pairs],
            f"{prefix}_ids": [0 if one_target else p[2] for p in pairs],
            f"{prefix}_weights": [p[3] for p in pairs]}


def regressor(n_targets=3, **kw):
    return dict(NODES, **weights("target", one_target=n_targets == 1), n_targets=n_targets, **kw)


def classifier(leaves=LEAVES, labels=(10, 20, 30), **kw):
    key = "classlabels_strings" if isinstance(labels[0], str) else "classlabels_int64s"
    return dict(NODES, **weights("class", leaves), **{key: list(labels)}, **kw)


def feeds(make=lambda a: a):
    """ROWS, one row, no row, then 13 random rows (NaNs included): one session, changing N."""
    rng = np.random.default_rng(0)
    more = rng.integers(-1, 4, (13, 3)).astype(np.float32)
    more[::4, 0] = np.nan
    return [{"x": make(ROWS)}, {"x": make(ROWS[1:2])}, {"x": make(ROWS[:0])}, {"x": make(more)}]


@pytest.mark.parametrize("op", [REG, CLS])
def test_every_spec_version_registered(op):
    want = spec_versions(op, ML)
    assert want == [1, 3, 5]
    assert sorted(o.since_version for o in get_registry().schemas(ML, op)) == want


# TreeEnsembleRegressor -------------------------------------------------------------------------

def test_regressor_sums_the_leaves_of_each_target_by_hand():
    (y,) = ml(REG, ROWS, regressor(), 1)
    # unreached targets are 0: [1, 0, 0] reaches only target 0 (1.5 - 1.0)
    assert y.dtype == np.float32 and y.tolist() == [[4.0, -2.0, 0.5], [0.5, 0.0, 0.0], [0.0, 0.25, 0.0],
                                                     [-1.0, 0.0, 0.0], [1.5, 0.0, 8.0]]
    (y,) = ml(REG, ROWS, regressor(aggregate_function="AVERAGE", base_values=[10.0, 20.0, 30.0]), 1)
    # onnxruntime: a target no leaf reached stays 0, its base value is not added
    assert y.tolist() == [[12.0, 19.0, 30.25], [10.25, 0.0, 0.0], [0.0, 20.125, 0.0], [9.5, 0.0, 0.0],
                          [10.75, 0.0, 34.0]]
    (y,) = ml(REG, ROWS, regressor(aggregate_function="MIN"), 1)
    assert y.tolist()[1] == [-1.0, 0.0, 0.0] and y.tolist()[4] == [1.5, 0.0, 8.0]


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("n_targets", [1, 3])
def test_regressor_aggregates_match_ort(aggregate, n_targets):
    base = {"base_values": [0.5, -1.0, 2.0][:n_targets]} if aggregate != "MAX" else {}
    assert_runs_match(model(REG, regressor(n_targets, aggregate_function=aggregate, **base), 1), feeds())


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
def test_regressor_post_transforms_match_ort(post):
    attrs = regressor(3, post_transform=post, aggregate_function="AVERAGE",
                      base_values=[0.1, 0.2, 0.3] if post == "PROBIT" else [1.0, -1.0, 0.5])
    assert_runs_match(model(REG, attrs), feeds())
    assert_runs_match(model(REG, regressor(1, post_transform=post, aggregate_function="AVERAGE")), feeds())


def test_one_target_regressor_follows_onnxruntime():
    (raw,) = ml(REG, ROWS, regressor(1))
    # a leaf adds its first weight only (leaf (0, 3): -2.0, not -1.5); tree 0's leaf 4 has no weight
    # and adds its nodes_values entry (7.0)
    assert raw.tolist() == [[2.0], [0.5], [7.25], [6.0], [9.5]]
    for post in ("LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"):     # onnxruntime applies none of these to one target
        assert ml(REG, ROWS, regressor(1, post_transform=post))[0].tolist() == raw.tolist()
    (probit,) = ml(REG, np.array([[3, 5, 1]], np.float32),
                   dict(regressor(1, post_transform="PROBIT", aggregate_function="AVERAGE"), base_values=[-4.25]))
    np.testing.assert_allclose(probit, [[0.0]], atol=1e-6)          # probit(0.5) = 0


@pytest.mark.parametrize("xt", [F64, I64, I32])
def test_regressor_other_input_types(xt):
    make = (lambda a: a.astype(np.float64)) if xt == F64 else (lambda a: np.nan_to_num(a, nan=2).astype(NP[xt]))
    m = model(REG, regressor(3, aggregate_function="SUM"), 3, xt)
    if xt == F64:
        assert_runs_match(m, feeds(make))
    else:   # onnxruntime's regressor has no integer kernel: an integer X reads as float32 (its classifier's rule)
        assert_runs_match(m, feeds(make), want=lambda f: ml(REG, f["x"].astype(np.float32), regressor()))


def test_v3_tensor_attributes_in_double_match_ort():
    attrs = dict(regressor(3), base_values_as_tensor=helper.make_tensor("b", F64, [3], [0.1, 0.2, 0.3]))
    for name in ("nodes_values", "target_weights"):
        attrs[f"{name}_as_tensor"] = helper.make_tensor(name, F64, [len(attrs[name])], attrs.pop(name))
    attrs["nodes_hitrates_as_tensor"] = helper.make_tensor("h", F64, [14], [1.0] * 14)
    assert_runs_match(model(REG, attrs, 3, F64), feeds(lambda a: a.astype(np.float64)))
    # a threshold between two float32 values: a double X compares in double (0.5 + 2e-12 is
    # above it: leaves (0, 2) and (5, 6); 0.5 is below: leaves (0, 4) and (5, 6))
    attrs["nodes_values_as_tensor"] = helper.make_tensor("v", F64, [14], [0.5 + 1e-12] + NODES["nodes_values"][1:])
    x = np.array([[0.5 + 2e-12, 0, 0], [0.5, 0, 0]])
    assert ml(REG, x, attrs)[0].tolist() == np.float32([[0.6, 0, 0], [-0.9, 0, 0]]).tolist()


def test_integer_x_compares_as_float32_like_onnxruntime():
    attrs = {"nodes_treeids": [0, 0, 0], "nodes_nodeids": [0, 1, 2], "nodes_featureids": [0, 0, 0],
             "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"], "nodes_values": [16777216.0, 0, 0],
             "nodes_truenodeids": [1, 0, 0], "nodes_falsenodeids": [2, 0, 0],
             "class_treeids": [0, 0], "class_nodeids": [1, 2], "class_ids": [0, 1], "class_weights": [1.0, 1.0],
             "classlabels_int64s": [0, 1, 2]}
    x = np.array([[16777217], [16777218], [5]], np.int64)     # 16777217 rounds to 2^24 in float32
    label, _ = ml(CLS, x, attrs)
    assert label.tolist() == [0, 1, 0]
    assert_runs_match(model(CLS, attrs, 1, I64, ("N", 1)), [{"x": x}, {"x": x[:0]}])


def test_one_dimensional_x_is_one_sample():
    attrs = regressor(3)
    (y,) = ml(REG, ROWS[0], attrs)
    assert y.shape == (1, 3) and y.tolist() == [[4.0, -2.0, 0.5]]
    tree0 = {k: v[:5] for k, v in NODES.items()}
    tree0["nodes_featureids"] = [0, 0, 0, 0, 0]     # (onnxruntime reads a 1-D X as one feature)
    attrs = dict(tree0, **weights("class", {k: v for k, v in LEAVES.items() if k[0] == 0}),
                 classlabels_strings=["a", "b", "c"], base_values=[0.0, 0.1, 0.0])
    m = model(CLS, attrs, 1, F32, ("F",))
    assert ml(CLS, np.array([2.0], np.float32), attrs)[0].tolist() == ["a"]
    assert_runs_match(m, [{"x": np.array([0.0], np.float32)}, {"x": np.array([2.0], np.float32)}])


def test_symbolic_features_checked_per_signature():
    sess = dynashape.InferenceSession(model(REG, regressor(), 3, F32, ("N", "F")))
    assert sess.run(None, {"x": ROWS})[0].shape == (5, 3)
    assert sess.run(None, {"x": np.zeros((2, 7), np.float32)})[0].shape == (2, 3)
    with pytest.raises(dynashape.ShapeInferenceError, match="reads feature 2 but X has 2 features") as e:
        sess.run(None, {"x": np.zeros((3, 2), np.float32)})
    assert e.value.kind == "FeatureOutOfRange"


def test_deprecated_v5_runs_as_v3():
    # onnxruntime refuses ai.onnx.ml-5's deprecated schemas; here they run as -3 does
    (want,) = ml(REG, ROWS, regressor(), 3)
    assert ml(REG, ROWS, regressor(), 5)[0].tolist() == want.tolist()


# TreeEnsembleClassifier ------------------------------------------------------------------------

def test_multiclass_top_class_by_hand():
    label, z = ml(CLS, ROWS, classifier(), 1)
    assert label.dtype == np.int64 and label.tolist() == [10, 10, 20, 10, 30]
    assert z.dtype == np.float32 and z.tolist()[0] == [4.0, -2.0, 0.5]
    # [nan, -1, 1] reaches class 1 only: 0.25 is the top even over the unreached classes' 0;
    # [0, 0, 0] reaches class 0 only (-1.0): the top among reached classes, though below 0
    assert z.tolist()[2] == [0.0, 0.25, 0.0] and z.tolist()[3] == [-1.0, 0.0, 0.0]
    label, _ = ml(CLS, ROWS, classifier(base_values=[0.0, 0.0, 0.0]), 1)
    assert label.tolist()[3] == 20          # with base values every class counts: the first 0.0 after -1.0


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("labels", [(10, 20, 30), ("a", "b", "c")])
def test_multiclass_matches_ort(post, labels):
    base = {"base_values": [0.1, 0.2, 0.3]} if post == "PROBIT" else {"base_values": [0.5, -0.5, 0.0]}
    assert_runs_match(model(CLS, classifier(labels=labels, post_transform=post, **base), 3), feeds())
    if post != "PROBIT":
        assert_runs_match(model(CLS, classifier(labels=labels, post_transform=post), 1), feeds())


@pytest.mark.parametrize("xt", [F64, I64, I32])
def test_classifier_input_types_match_ort(xt):
    make = (lambda a: a.astype(np.float64)) if xt == F64 else (lambda a: np.nan_to_num(a, nan=2).astype(NP[xt]))
    assert_runs_match(model(CLS, classifier(post_transform="SOFTMAX"), 1, xt), feeds(make))


def binary(ws, **kw):
    """One weight column (class 0) for two classes, as scikit-learn, LightGBM and XGBoost export."""
    leaves = {(t, n): [(0, w)] for (t, n), w in zip(LEAVES, ws)}
    return classifier(leaves, labels=kw.pop("labels", (4, 9)), **kw)


POSITIVE = [0.125, 0.25, 0.0, 0.5, 0.625, 0.25, 0.125]
MIXED = [0.5, -1.0, 0.25, 0.75, -0.5, 1.5, -0.25]


def test_binary_one_column_by_hand():
    # all weights >= 0: s gives [1 - s, s] and the label s > 0.5
    label, z = ml(CLS, ROWS, binary(POSITIVE))
    s = np.array([0.25, 0.75, 0.5, 0.625, 0.375], np.float32)
    assert label.tolist() == [4, 9, 4, 9, 4]
    assert z.tolist() == np.stack([1 - s, s], 1).tolist()
    # mixed signs: [-s, s], the label s > 0 (with the base value 0.25)
    label, z = ml(CLS, ROWS, binary(MIXED, base_values=[0.25]))
    s = np.array([-0.5, 0.25, 1.0, -0.25, 2.25], np.float32)
    assert label.tolist() == [4, 9, 9, 4, 9]
    assert z.tolist() == np.stack([-s, s], 1).tolist()
    _, z = ml(CLS, ROWS, binary(MIXED, base_values=[0.25], post_transform="LOGISTIC"))
    np.testing.assert_allclose(z, np.stack([1 / (1 + np.exp(s)), 1 / (1 + np.exp(-s))], 1), rtol=1e-6)
    _, soft = ml(CLS, ROWS, binary(MIXED, base_values=[0.25], post_transform="SOFTMAX"))
    assert soft.tolist() == np.stack([-s, s], 1).tolist()             # (onnxruntime applies no SOFTMAX here)


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("ws", [POSITIVE, MIXED], ids=["positive", "mixed"])
@pytest.mark.parametrize("base", [None, [0.25], [0.25, -0.5]])
def test_binary_one_column_matches_ort(post, ws, base):
    if post == "LOGISTIC" and ws is POSITIVE and ort_predates((1, 26)):
        pytest.skip("onnxruntime < 1.26 skips the logistic of a binary model with weights >= 0")
    attrs = binary(ws, post_transform=post, **({"base_values": base} if base else {}))
    m = model(CLS, attrs)
    if post == "PROBIT" and (base is None or len(base) == 1):
        # onnxruntime writes the first score only; its second column is whatever the buffer held
        def want(f):
            from tests.conftest import ort_run
            label, z = ort_run(m, f)
            z[:, 1] = np.nan
            return [label, z]
        assert_runs_match(m, feeds(), want=want)
        assert np.isnan(ml(CLS, ROWS, attrs)[1][:, 1]).all()
    else:
        assert_runs_match(m, feeds())


def test_binary_with_weights_for_both_classes():
    leaves = {k: [(1, w)] if k[1] % 2 else [(0, -w)] for k, w in zip(LEAVES, MIXED)}
    attrs = classifier(leaves, labels=(4, 9))
    label, z = ml(CLS, ROWS, attrs)
    # onnxruntime: the label is 1 or 0 by whether the class-1 score is > 0, not a class label
    assert set(label.tolist()) <= {0, 1}
    assert label.tolist() == (np.where(z[:, 1] > 0, 1, 0)).tolist()
    for extra in ({}, {"base_values": [0.25, -0.5]}, {"base_values": [0.25]}, {"post_transform": "LOGISTIC"},
                  {"classlabels_strings": ["no", "yes"]}):
        a = dict(attrs, **extra)
        if "classlabels_strings" in extra:
            del a["classlabels_int64s"]
        m = model(CLS, a)
        # (a sample whose leaves feed class 0 only leaves onnxruntime's second score unwritten: NaN here)
        got = [dynashape.InferenceSession(m).run(None, f) for f in feeds()]
        from tests.conftest import ort_run
        for f, g in zip(feeds(), got):
            label, z = ort_run(m, f)
            assert g[0].tolist() == label.tolist()
            filled = ~np.isnan(g[1])
            np.testing.assert_allclose(g[1][filled], z[filled], rtol=1e-6)
            assert filled[:, 0].all()


def test_one_class():
    leaves = {k: [(0, w)] for k, w in zip(LEAVES, MIXED)}
    label, z = ml(CLS, ROWS, classifier(leaves, labels=(7,), base_values=[0.25]))
    # onnxruntime: the label is 1 or 0 by the sign of the score; the score is the sum plus the base
    # value, a leaf without a weight adding its nodes_values entry (tree 0's leaf 4: 7.0)
    assert z.tolist() == [[-0.5], [0.25], [8.0], [6.75], [2.25]] and label.tolist() == [0, 1, 1, 1, 1]
    assert_runs_match(model(CLS, classifier(leaves, labels=(7,), base_values=[0.25])), feeds())


def test_missing_value_tracks_false_without_the_attribute():
    attrs = regressor()
    del attrs["nodes_missing_value_tracks_true"]
    (y,) = ml(REG, ROWS[2:3], attrs)
    assert y.tolist() == [[1.5, 0.25, 0.0]]        # NaN <= 0.5 is false: leaf (0, 2)
    assert_runs_match(model(REG, attrs), feeds())


def test_shared_true_child_and_restarting_tree_ids():
    # LightGBM writes a categorical split as BRANCH_EQ nodes whose true branches meet
    attrs = {"nodes_treeids": [3, 3, 3, 3, 1, 1, 1], "nodes_nodeids": [0, 1, 2, 3, 0, 1, 2],
             "nodes_featureids": [0, 0, 0, 0, 1, 0, 0],
             "nodes_modes": ["BRANCH_EQ", "BRANCH_EQ", "LEAF", "LEAF", "BRANCH_LT", "LEAF", "LEAF"],
             "nodes_values": [1.0, 4.0, 0, 0, 0.0, 0, 0],
             "nodes_truenodeids": [2, 2, 0, 0, 1, 0, 0], "nodes_falsenodeids": [1, 3, 0, 0, 2, 0, 0],
             "target_treeids": [3, 3, 1, 1], "target_nodeids": [2, 3, 1, 2], "target_ids": [0, 0, 0, 0],
             "target_weights": [10.0, 20.0, 1.0, 2.0], "n_targets": 1}
    x = np.array([[1, -1], [4, 1], [2, 0]], np.float32)
    assert ml(REG, x, attrs)[0].tolist() == [[11.0], [12.0], [22.0]]
    assert_runs_match(model(REG, attrs, 1, F32, ("N", 2)), [{"x": x}, {"x": x[:0]}, {"x": x[1:]}])


def test_branch_eq_chain_follows_the_spec():
    # f1 == 1 ? leaf 1 (no weight) : (f1 == 2 ? leaf 3 : leaf 4). onnxruntime (1.2x) folds an EQ
    # chain on one feature into one bit-set node where it finds the true subtrees equal, and
    # compares leaves by the first weight at or after them: the weightless leaf 1 "equals" leaf 3,
    # the chain becomes f1 in {1, 2} ? leaf 1 : leaf 4, and leaf 3's weight goes to the first node
    # listed. Here the spec's walk: x = [0, 2] reaches leaf 3.
    attrs = {"nodes_treeids": [1, 1, 1, 1, 1], "nodes_nodeids": [0, 2, 4, 3, 1], "nodes_featureids": [1, 1, 0, 0, 0],
             "nodes_modes": ["BRANCH_EQ", "BRANCH_EQ", "LEAF", "LEAF", "LEAF"], "nodes_values": [1.0, 2.0, 0, 0, 0],
             "nodes_truenodeids": [1, 3, 0, 0, 0], "nodes_falsenodeids": [2, 4, 0, 0, 0],
             "target_treeids": [1], "target_nodeids": [3], "target_ids": [0], "target_weights": [3.0], "n_targets": 2}
    x = np.array([[0, 0], [0, 1], [0, 2], [0, 3]], np.float32)
    assert ml(REG, x, attrs)[0].tolist() == [[0, 0], [0, 0], [3, 0], [0, 0]]


# errors ---------------------------------------------------------------------------------------

# sibling classifiers of one X: the sibling_forests graph pass (ops_builtin/ml_forests_merge.py)

def _siblings(ml_opset=3):
    """Four classifiers of x: a and b (b without missing-value tracking, string labels, zero
    base values) merge; c's labels are a graph output and d has a post transform: both stay."""
    b_attrs = classifier({k: [(t, 2 * w) for t, w in ws] for k, ws in LEAVES.items()}, labels=("p", "q", "r", "s"),
                         base_values=[0.0] * 4)
    del b_attrs["nodes_missing_value_tracks_true"]
    members = {"a": classifier(), "b": b_attrs, "c": classifier(), "d": classifier(post_transform="SOFTMAX")}
    nodes = [helper.make_node(CLS, ["x"], [f"label_{k}", f"z_{k}"], domain=ML, name=k, **attrs)
             for k, attrs in members.items()]
    outs = [helper.make_tensor_value_info(f"z_{k}", F32, None) for k in members]
    outs.append(helper.make_tensor_value_info("label_c", I64, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, ["N", 3])], outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)])


@pytest.mark.parametrize("ml_opset", [1, 3])
def test_sibling_classifiers_walk_as_one_regressor_with_the_same_scores(ml_opset):
    """a and b become one TreeEnsembleRegressor of 3 + 4 target columns and a Split (the
    trees of b numbered after a's); their scores are the unmerged session's bit for bit, and
    onnxruntime's; c and d stay classifiers."""
    m = _siblings(ml_opset).SerializeToString()
    sess, plain = dynashape.InferenceSession(m, optimize=True), dynashape.InferenceSession(m, optimize=False)
    assert sess.rewrites.counts() == {"sibling_forests": 1}
    ops = sorted(pn.node.op_type for pn in sess.engine.pg.nodes)
    assert ops == ["Split", CLS, CLS, REG]
    for f in feeds():
        got, want = sess.run(None, f), plain.run(None, f)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w, equal_nan=True)
    z_a, z_b = sess.run(["z_a", "z_b"], {"x": ROWS[:1]})
    assert z_a.tolist() == [[4.0, -2.0, 0.5]] and z_b.tolist() == [[8.0, -4.0, 1.0, 0.0]]
    assert_runs_match(_siblings(ml_opset), feeds())


def test_a_classifier_whose_labels_are_read_or_of_two_classes_is_not_merged():
    """a's labels read by a node: b is left alone, no group; two classes each: no group."""
    m = _siblings()
    reader = helper.make_node("Identity", ["label_a"], ["label_a_copy"])
    m.graph.node.append(reader)
    m.graph.output.append(helper.make_tensor_value_info("label_a_copy", I64, None))
    assert dynashape.InferenceSession(m.SerializeToString(), optimize=True).rewrites.counts() == {}
    two = helper.make_graph(
        [helper.make_node(CLS, ["x"], [f"label_{k}", f"z_{k}"], domain=ML, name=k,
                          **classifier({key: [(min(t, 1), w) for t, w in ws] for key, ws in LEAVES.items()},
                                       labels=(1, 2))) for k in "ab"],
        "g", [helper.make_tensor_value_info("x", F32, ["N", 3])],
        [helper.make_tensor_value_info(f"z_{k}", F32, None) for k in "ab"])
    two = helper.make_model(two, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    assert dynashape.InferenceSession(two.SerializeToString(), optimize=True).rewrites.counts() == {}


def fails(op, attrs, match, kind, x=ROWS, opset=3):
    with pytest.raises(dynashape.ShapeInferenceError, match=match) as e:
        ml(op, x, attrs, opset)
    assert e.value.kind == kind, e.value.kind


def test_attribute_errors():
    bad = dict(regressor(), nodes_featureids=[0, 1])
    fails(REG, bad, "nodes_featureids has 2 entries, nodes_treeids has 14", "InvalidAttribute")
    fails(REG, dict(regressor(), nodes_missing_value_tracks_true=[1]), "nodes_missing_value_tracks_true has 1",
          "InvalidAttribute")
    fails(REG, dict(regressor(), target_ids=[0]), "target_ids has 1 entries, target_treeids has 9",
          "InvalidAttribute")
    tensor = helper.make_tensor("v", F32, [14], NODES["nodes_values"])
    fails(REG, dict(regressor(), nodes_values_as_tensor=tensor),
          "both nodes_values and nodes_values_as_tensor are given", "InvalidAttribute")
    fails(REG, dict({k: v for k, v in regressor().items() if k != "nodes_values"}, nodes_values_as_tensor=tensor),
          "nodes_values_as_tensor is an attribute of ai.onnx.ml-3 on", "InvalidAttribute", opset=1)
    modes = list(NODES["nodes_modes"])
    modes[1] = "BRANCH_MEMBER"
    fails(REG, dict(regressor(), nodes_modes=modes), r"nodes_modes holds \['BRANCH_MEMBER'\]", "InvalidAttribute")
    fails(REG, dict(regressor(), post_transform="RELU"), "post_transform 'RELU' is not one of", "InvalidAttribute")
    fails(REG, dict(regressor(), aggregate_function="MEDIAN"), "aggregate_function 'MEDIAN' is not one of",
          "InvalidAttribute")
    fails(REG, dict(regressor(), base_values=[1.0, 2.0]), "base_values has 2 entries, expected 0 or 3",
          "InvalidAttribute")
    fails(REG, {k: v for k, v in regressor().items() if k != "n_targets"}, "'n_targets' is required",
          "MissingAttribute")
    fails(REG, dict(regressor(), n_targets=0), "n_targets 0 must be >= 1", "InvalidAttribute")
    fails(REG, dict(regressor(), n_targets=2), r"target_ids holds 2, outside \[0, 2\)", "InvalidAttribute")
    fails(REG, dict(regressor(), nodes_featureids=[-1] + NODES["nodes_featureids"][1:]),
          "nodes_featureids must be >= 0", "InvalidAttribute")


def test_structure_errors():
    ids = list(NODES["nodes_nodeids"])
    ids[1] = 0
    fails(REG, dict(regressor(), nodes_nodeids=ids), "node 0 of tree 0 is listed twice", "InvalidAttribute")
    true = list(NODES["nodes_truenodeids"])
    true[0] = 9
    fails(REG, dict(regressor(), nodes_truenodeids=true), "nodes_truenodeids entry 0 names node 9 of tree 0",
          "InvalidAttribute")
    true[0] = 0
    fails(REG, dict(regressor(), nodes_truenodeids=true), "contain a cycle", "InvalidAttribute")
    w = weights("target")
    w["target_nodeids"][0] = 11
    fails(REG, dict(regressor(), **w), "target_treeids/target_nodeids entry 0 names node 11 of tree 0",
          "InvalidAttribute")


def test_classifier_errors():
    fails(CLS, dict(classifier(), classlabels_strings=["a", "b", "c"]),
          "exactly one of classlabels_strings, classlabels_int64s must be given", "InvalidAttribute")
    fails(CLS, {k: v for k, v in classifier().items() if k != "classlabels_int64s"},
          "exactly one of classlabels_strings, classlabels_int64s", "InvalidAttribute")
    fails(CLS, classifier(labels=(1, 2)), r"class_ids holds 2, outside \[0, 2\): there are 2 class labels",
          "InvalidAttribute")
    fails(CLS, classifier(base_values=[1.0]), "base_values has 1 entries, expected 0 or 3", "InvalidAttribute")
    fails(CLS, binary(POSITIVE, base_values=[1.0, 2.0, 3.0]), "base_values has 3 entries, expected 0 or 1 or 2",
          "InvalidAttribute")


def test_input_errors():
    fails(REG, regressor(), "reads feature 2 but X has 2 features", "FeatureOutOfRange", x=ROWS[:, :2])
    fails(REG, regressor(), "X must be", "InvalidRank", x=np.zeros((1, 2, 3), np.float32))
    fails(CLS, classifier(), "X has dtype bool", "InvalidDtype", x=np.zeros((1, 3), bool))
