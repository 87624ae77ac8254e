"""Tests of the ai.onnx.ml family (ops_builtin/ml.py, ml_linear.py): LabelEncoder, TreeEnsemble,
ArrayFeatureExtractor, Binarizer, Scaler, Normalizer, Imputer, LinearRegressor.

Values are compared with onnxruntime on one session through changing symbolic shapes (both
allocators), or with hand-computed values where onnxruntime departs from the spec
(TreeEnsemble's post_transform numbering, LabelEncoder's repeated and NaN keys).
"""
from __future__ import annotations

import dynashape
import numpy as np
import onnx
import pytest
from dynashape.registry import get_registry
from dynashape.symbolic import sym
from dynashape.testing import run_node
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import assert_runs_match, spec_versions, symbolic_context

ML = "ai.onnx.ml"
S, I64, F32, F64 = TensorProto.STRING, TensorProto.INT64, TensorProto.FLOAT, TensorProto.DOUBLE
rng = np.random.default_rng(0)

#: every feed on one session per allocator against onnxruntime (or want(feeds))
runs_match = assert_runs_match


def model(op, inputs, attrs, ml_opset, outs):
    graph = helper.make_graph(
        [helper.make_node(op, [i[0] for i in inputs], [o[0] for o in outs], domain=ML, **attrs)], "g",
        [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(o, t, None) for o, t in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)])


def ml(op, inputs, attrs, opset, n_outputs=1):
    """run_node in the ai.onnx.ml domain (TensorProto attributes read as a model import does)."""
    attrs = {k: numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for k, v in attrs.items()}
    return run_node(op, inputs, attrs, opset=opset, domain=ML, n_outputs=n_outputs)


def tensor(name, values, elem):
    return helper.make_tensor(name, elem, [len(values)], values)


@pytest.mark.parametrize("op", ["LabelEncoder", "TreeEnsemble", "ArrayFeatureExtractor", "Binarizer", "Scaler",
                                "Normalizer", "Imputer", "LinearRegressor"])
def test_every_spec_version_registered(op):
    have = sorted(o.since_version for o in get_registry().schemas(ML, op))
    assert have == spec_versions(op, ML)


# LabelEncoder -----------------------------------------------------------------------------

@pytest.mark.parametrize("opset", [2, 4])
@pytest.mark.parametrize("keys,values,x,xt,yt", [
    ({"keys_strings": ["a", "b", "c"]}, {"values_int64s": [5, 6, 7], "default_int64": 42},
     lambda: np.array(["a", "z", "c", "b"], dtype=object), S, I64),
    ({"keys_int64s": [3, -1, 10]}, {"values_strings": ["x", "y", "z"]},
     lambda: np.array([10, 3, 4, -1]), I64, S),
    ({"keys_floats": [0.5, -2.0, 7.25]}, {"values_floats": [1.0, 2.0, 3.0], "default_float": 9.5},
     lambda: np.array([7.25, 0.5, 0.25, -2.0], np.float32), F32, F32),
    ({"keys_strings": ["é", "的"]}, {"values_strings": ["E", "D"], "default_string": "?"},
     lambda: np.array(["的", "é", "e"], dtype=object), S, S),
])
def test_label_encoder_v2_v4_match_ort(opset, keys, values, x, xt, yt):
    m = model("LabelEncoder", [("x", xt, ["N"])], dict(keys, **values), opset, [("y", yt)])
    a = x()
    runs_match(m, [{"x": a}, {"x": a[:1]}, {"x": np.concatenate([a, a])}])


def test_label_encoder_v4_tensor_attributes_match_ort():
    attrs = {"keys_tensor": helper.make_tensor("k", TensorProto.INT32, [3], [4, 1, 9]),
             "values_tensor": helper.make_tensor("v", TensorProto.DOUBLE, [3], [0.5, 1.5, 2.5]),
             "default_tensor": helper.make_tensor("d", TensorProto.DOUBLE, [1], [-7.0])}
    m = model("LabelEncoder", [("x", TensorProto.INT32, ["A", "B"])], attrs, 4, [("y", F64)])
    # onnxruntime has no int32 -> double LabelEncoder: hand-computed values
    runs_match(m, [{"x": np.array([[4, 2], [9, 1]], np.int32)}, {"x": np.array([[0, 1, 4]], np.int32)}],
               want=lambda f: [np.vectorize({4: 0.5, 1: 1.5, 9: 2.5}.get, otypes=[np.float64])(f["x"], -7.0)])
    attrs = {"keys_strings": ["a", "b"], "values_tensor": helper.make_tensor("v", TensorProto.INT16, [2], [3, 4]),
             "default_tensor": helper.make_tensor("d", TensorProto.INT16, [1], [42])}
    m = model("LabelEncoder", [("x", S, ["N"])], attrs, 4, [("y", TensorProto.INT16)])
    runs_match(m, [{"x": np.array(["b", "q", "a"], dtype=object)}, {"x": np.array(["a"], dtype=object)}])
    (y,) = ml("LabelEncoder", [np.array([1, 5], np.int16)],
              {"keys_tensor": np.array([1, 2], np.int16), "values_tensor": np.array([3, 4], np.int16)}, 4)
    assert y.dtype == np.int16 and y.tolist() == [3, -1]          # built-in default of an int type


def test_label_encoder_v1_matches_ort():
    m = model("LabelEncoder", [("x", S, ["N"])], {"classes_strings": ["a", "b", "c"], "default_int64": -5}, 1,
              [("y", I64)])
    runs_match(m, [{"x": np.array(["c", "a", "q"], dtype=object)}])
    m = model("LabelEncoder", [("x", I64, ["N"])], {"classes_strings": ["a", "b"], "default_string": "zz"}, 1,
              [("y", S)])
    runs_match(m, [{"x": np.array([0, 1, 2, -1])}, {"x": np.array([1])}])


def test_label_encoder_repeated_and_nan_keys():
    attrs = {"keys_floats": [1.0, float("nan"), 2.0, 1.0], "values_strings": ["a", "n", "b", "c"]}
    x = np.array([1, 2, np.nan, 3], np.float32)
    # v4 (spec): the last repeated key wins, a NaN key matches any NaN
    assert ml("LabelEncoder", [x], attrs, 4)[0].tolist() == ["c", "b", "n", "_Unused"]
    # v2: float keys compare bit-wise (the same NaN bits match), the first repeated key wins (as onnxruntime)
    assert ml("LabelEncoder", [x], attrs, 2)[0].tolist() == ["a", "b", "n", "_Unused"]
    other_nan = np.array([0x7FC00001], np.uint32).view(np.float32)
    assert ml("LabelEncoder", [other_nan], attrs, 2)[0].tolist() == ["_Unused"]
    assert ml("LabelEncoder", [other_nan], attrs, 4)[0].tolist() == ["n"]


def test_label_encoder_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="exactly one of keys_floats, keys_int64s, keys_strings, "
                                                            "keys_tensor must be given, got 2") as e:
        ml("LabelEncoder", [np.array(["a"], dtype=object)],
           {"keys_strings": ["a"], "keys_int64s": [1], "values_int64s": [1]}, 4)
    assert e.value.kind == "InvalidAttribute"
    with pytest.raises(dynashape.ShapeInferenceError, match="keys_strings has 2 entries but values_int64s has 1"):
        ml("LabelEncoder", [np.array(["a"], dtype=object)], {"keys_strings": ["a", "b"], "values_int64s": [1]}, 2)
    with pytest.raises(dynashape.ShapeInferenceError, match="input has dtype int64 but the keys are string") as e:
        ml("LabelEncoder", [np.array([1])], {"keys_strings": ["a"], "values_int64s": [1]}, 2)
    assert e.value.kind == "InvalidDtype"
    with pytest.raises(dynashape.ShapeInferenceError, match="default_tensor must hold one int64 value"):
        ml("LabelEncoder", [np.array(["a"], dtype=object)],
           {"keys_strings": ["a"], "values_int64s": [1], "default_tensor": np.array([1.5, 2.0])}, 4)


# TreeEnsemble -----------------------------------------------------------------------------

def forest_attrs(aggregate=1, post=0, n_targets=3):
    """Two trees over 3 features: tree 0 (nodes 0-2) and tree 1 (nodes 3-4, with a member set)."""
    return {
        "tree_roots": [0, 3],
        "nodes_featureids": [0, 1, 2, 2, 0],
        "nodes_splits": tensor("s", [0.5, -1.0, 2.0, 0.0, 3.0], F32),
        "nodes_modes": tensor("m", [0, 3, 4, 6, 5], TensorProto.UINT8),
        "nodes_truenodeids": [1, 0, 1, 2, 3],
        "nodes_trueleafs": [0, 1, 1, 1, 1],
        "nodes_falsenodeids": [2, 1, 2, 4, 4],
        "nodes_falseleafs": [0, 1, 1, 0, 1],
        "nodes_missing_value_tracks_true": [1, 0, 0, 0, 1],
        "membership_values": tensor("mv", [1.0, 4.0, float("nan")], F32),
        "leaf_targetids": [0, 1, 2, 0, 1],
        "leaf_weights": tensor("w", [1.5, -2.0, 4.0, 0.25, 8.0], F32),
        "n_targets": n_targets, "aggregate_function": aggregate, "post_transform": post,
    }


def forest_input(n):
    x = rng.integers(-2, 5, (n, 3)).astype(np.float32)
    x[::4, 0] = np.nan
    x[1::5, 2] = np.nan
    return x


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_symbolic_batch_matches_ort(aggregate):
    m = model("TreeEnsemble", [("x", F32, ["N", 3])], forest_attrs(aggregate, n_targets=4), 5, [("y", F32)])
    runs_match(m, [{"x": forest_input(12)}, {"x": forest_input(1)}, {"x": forest_input(40)}])


def test_tree_ensemble_backend_cases_in_double_match_ort():
    attrs = {"tree_roots": [0], "nodes_featureids": [0, 0, 0], "nodes_splits": tensor("s", [3.14, 1.2, 4.2], F64),
             "nodes_modes": tensor("m", [0, 1, 2], TensorProto.UINT8), "nodes_truenodeids": [1, 0, 1],
             "nodes_trueleafs": [0, 1, 1], "nodes_falsenodeids": [2, 2, 3], "nodes_falseleafs": [0, 1, 1],
             "leaf_targetids": [0, 1, 0, 1], "leaf_weights": tensor("w", [5.23, 12.12, -12.23, 7.21], F64),
             "n_targets": 2}
    m = model("TreeEnsemble", [("x", F64, ["N", "F"])], attrs, 5, [("y", F64)])
    runs_match(m, [{"x": np.array([[1.2, 3.4], [-0.12, 1.66], [4.14, 1.77], [4.2, 0.0]])},
                   {"x": np.array([[3.14, 9.0, 1.0]])}])


def test_tree_ensemble_post_transforms_follow_the_spec():
    # onnxruntime numbers post_transform 1 LOGISTIC and 2 SOFTMAX; the spec: 1 SOFTMAX, 2 LOGISTIC
    x = forest_input(9)
    (raw,) = ml("TreeEnsemble", [x], forest_attrs(1, 0), 5)
    e = np.exp(raw - raw.max(axis=1, keepdims=True))
    np.testing.assert_allclose(ml("TreeEnsemble", [x], forest_attrs(1, 1), 5)[0], e / e.sum(1, keepdims=True),
                               rtol=1e-6)
    np.testing.assert_allclose(ml("TreeEnsemble", [x], forest_attrs(1, 2), 5)[0], 1 / (1 + np.exp(-raw)), rtol=1e-6)
    zero = ml("TreeEnsemble", [x], forest_attrs(1, 3), 5)[0]
    nz = raw != 0
    ez = np.where(nz, np.exp(raw - raw.max(axis=1, keepdims=True)), 0)
    np.testing.assert_allclose(zero, ez / ez.sum(1, keepdims=True), rtol=1e-6, atol=1e-7)
    m = model("TreeEnsemble", [("x", F32, ["N", 3])], forest_attrs(0, 4, n_targets=3), 5, [("y", F32)])
    feeds = {"x": np.array([[0.0, 0.0, 1.0]], np.float32)}   # average scores in (0, 1): a finite probit
    runs_match(m, [feeds])


def test_tree_ensemble_single_leaf_tree_and_float16():
    attrs = {"tree_roots": [0], "nodes_featureids": [0], "nodes_splits": tensor("s", [0.0], F32),
             "nodes_modes": tensor("m", [0], TensorProto.UINT8), "nodes_truenodeids": [0], "nodes_trueleafs": [1],
             "nodes_falsenodeids": [0], "nodes_falseleafs": [1], "leaf_targetids": [1],
             "leaf_weights": tensor("w", [2.5], F32), "n_targets": 2}
    (y,) = ml("TreeEnsemble", [np.array([[7.0], [-3.0]], np.float16)], attrs, 5)
    assert y.dtype == np.float16 and y.tolist() == [[0.0, 2.5], [0.0, 2.5]]


def test_tree_ensemble_errors():
    x = np.zeros((2, 2), np.float32)
    bad = dict(forest_attrs(), nodes_featureids=[0, 1])
    with pytest.raises(dynashape.ShapeInferenceError, match="nodes_splits has 5 entries, nodes_featureids has 2") as e:
        ml("TreeEnsemble", [x], bad, 5)
    assert e.value.kind == "InvalidAttribute"
    with pytest.raises(dynashape.ShapeInferenceError, match="reads feature 2 but X has 2 features") as e:
        ml("TreeEnsemble", [x], forest_attrs(), 5)
    assert e.value.kind == "FeatureOutOfRange"
    with pytest.raises(dynashape.ShapeInferenceError, match="holds 2 NaN-delimited sets, expected one per"):
        ml("TreeEnsemble", [np.zeros((1, 3), np.float32)],
           dict(forest_attrs(), membership_values=tensor("mv", [1.0, float("nan"), 2.0, float("nan")], F32)), 5)
    with pytest.raises(dynashape.ShapeInferenceError, match="leaf_targetids must be in \\[0, 1\\)"):
        ml("TreeEnsemble", [np.zeros((1, 3), np.float32)], forest_attrs(n_targets=1), 5)
    with pytest.raises(dynashape.ShapeInferenceError, match="contain a cycle"):
        ml("TreeEnsemble", [np.zeros((1, 3), np.float32)],
           dict(forest_attrs(), nodes_truenodeids=[1, 0, 1, 2, 3], nodes_trueleafs=[0, 0, 1, 1, 1]), 5)
    with pytest.raises(dynashape.ShapeInferenceError, match="X must be \\[N, F\\]"):
        ml("TreeEnsemble", [np.zeros(3, np.float32)], forest_attrs(), 5)


def test_tree_ensemble_symbolic_features_checked_per_signature():
    m = model("TreeEnsemble", [("x", F32, ["N", "F"])], forest_attrs(), 5, [("y", F32)])
    sess = dynashape.InferenceSession(m)
    assert sess.run(None, {"x": forest_input(3)})[0].shape == (3, 3)
    with pytest.raises(dynashape.ShapeInferenceError, match="reads feature 2 but X has 2 features"):
        sess.run(None, {"x": np.zeros((3, 2), np.float32)})


# ArrayFeatureExtractor, Binarizer -------------------------------------------------------------

@pytest.mark.parametrize("xt,make", [(F32, lambda s: rng.standard_normal(s).astype(np.float32)),
                                     (I64, lambda s: rng.integers(0, 9, s)),
                                     (S, lambda s: np.array([str(v) for v in rng.integers(0, 99, s).ravel()],
                                                            dtype=object).reshape(s))])
def test_array_feature_extractor_matches_ort(xt, make):
    m = model("ArrayFeatureExtractor", [("x", xt, ["A", "B", "D"]), ("i", I64, ["K"])], {}, 1, [("y", xt)])
    runs_match(m, [{"x": make((2, 3, 5)), "i": np.array([4, 0, 0])}, {"x": make((1, 1, 2)), "i": np.array([1])},
                   {"x": make((3, 2, 6)), "i": np.array([5, 2, 3, 1])}])
    m = model("ArrayFeatureExtractor", [("x", xt, ["D"]), ("i", I64, [1, "K"])], {}, 1, [("y", xt)])
    runs_match(m, [{"x": make((5,)), "i": np.array([[4, 1]])}, {"x": make((3,)), "i": np.array([[2]])}])


def test_array_feature_extractor_errors_and_values():
    with pytest.raises(dynashape.ShapeInferenceError, match=r"index 4 is out of range .* \(size 4\)") as e:
        ml("ArrayFeatureExtractor", [np.zeros((2, 4), np.float32), np.array([1, 4])], {}, 1)
    assert e.value.kind == "IndexOutOfRange"
    with pytest.raises(dynashape.ShapeInferenceError, match="Y has dtype int32, expected int64"):
        ml("ArrayFeatureExtractor", [np.zeros((2, 4), np.float32), np.array([1], np.int32)], {}, 1)
    m = model("ArrayFeatureExtractor", [("x", F32, ["A", "D"]), ("i", I64, ["K"])], {}, 1, [("y", F32)])
    sess = dynashape.InferenceSession(m)
    with pytest.raises(dynashape.ShapeInferenceError, match="index -1 is out of range"):
        sess.run(None, {"x": np.zeros((2, 4), np.float32), "i": np.array([-1])})
    b = sym("b")
    values = [np.array([[b, 3, 4]], dtype=object), np.array([2, 0])]
    ctx, opdef = symbolic_context("ArrayFeatureExtractor", [(1, 3), (2,)], [np.int64] * 2, values, opset=1, domain=ML)
    assert opdef.infer_shape(ctx) == [(1, 2)]
    assert opdef.propagate_value(ctx)[0].tolist() == [[4, b]]


def test_binarizer_matches_ort():
    m = model("Binarizer", [("x", F32, ["A", "B"])], {"threshold": 1.5}, 1, [("y", F32)])
    runs_match(m, [{"x": (rng.standard_normal((3, 4)) * 3).astype(np.float32)},
                   {"x": np.arange(-2, 3, dtype=np.float32).reshape(1, 5)}])
    for dt in (np.float64, np.int64, np.int32):      # onnxruntime has Binarizer for float only
        (y,) = ml("Binarizer", [np.arange(-2, 4, dtype=dt).reshape(2, 3)], {"threshold": 0.5}, 1)
        assert y.dtype == dt and y.tolist() == [[0, 0, 0], [1, 1, 1]]
    with pytest.raises(dynashape.ShapeInferenceError, match="X has dtype bool"):
        ml("Binarizer", [np.zeros(2, bool)], {}, 1)


# Scaler, Normalizer, Imputer, LinearRegressor (ml_linear.py) -----------------------------

X3 = np.array([[1.0, -4.0, 2.0], [0.0, 0.0, 0.0], [3.0, 1.0, -1.0]], np.float32)


def _batches(x):
    """The same session at batch 3, 1, 0 and 5 (symbolic N)."""
    return [{"x": x}, {"x": x[:1]}, {"x": x[:0]}, {"x": np.concatenate([x, x[:2]])}]


def test_scaler_is_offset_then_scale_per_feature():
    m = model("Scaler", [("x", F32, ["N", 3])], {"offset": [1.0, 0.0, -2.0], "scale": [2.0, 0.5, 1.0]}, 1,
              [("y", F32)])
    runs_match(m, _batches(X3))
    (y,) = ml("Scaler", [X3[:1]], {"offset": [1.0, 0.0, -2.0], "scale": [2.0, 0.5, 1.0]}, 1)
    np.testing.assert_allclose(y, [[0.0, -2.0, 4.0]])
    (y,) = ml("Scaler", [np.array([[2, 3]], np.int64)], {"offset": [1.0], "scale": [2.0, 3.0]}, 1)
    assert y.dtype == np.float32 and y.tolist() == [[2.0, 6.0]]      # one offset, one scale per feature


def test_normalizer_divides_each_row_by_its_norm():
    for norm, want in (("MAX", [0.5, -2.0, 1.0]), ("L1", [1 / 7, -4 / 7, 2 / 7]),
                       ("L2", [1 / 21 ** 0.5, -4 / 21 ** 0.5, 2 / 21 ** 0.5])):
        m = model("Normalizer", [("x", F32, ["N", 3])], {"norm": norm}, 1, [("y", F32)])
        runs_match(m, _batches(X3))
        (y,) = ml("Normalizer", [X3], {"norm": norm}, 1)
        np.testing.assert_allclose(y[0], want, rtol=1e-6)
        assert y[1].tolist() == [0.0, 0.0, 0.0]                          # a zero norm leaves the row
    (y,) = ml("Normalizer", [np.array([[0.0, -2.0]], np.float32)], {"norm": "MAX"}, 1)
    assert y.tolist() == [[0.0, -2.0]]                                   # max 0: left as it is (onnxruntime)
    with pytest.raises(dynashape.ShapeInferenceError, match="norm 'L3' is not one of") as info:
        ml("Normalizer", [X3], {"norm": "L3"}, 1)
    assert info.value.kind == "InvalidAttribute"


def test_imputer_replaces_nan_or_a_value_per_feature():
    x = np.array([[1.0, np.nan, 3.0], [np.nan, 5.0, 0.0]], np.float32)
    m = model("Imputer", [("x", F32, ["N", 3])], {"imputed_value_floats": [9.0, 8.0, 7.0],
                                                    "replaced_value_float": float("nan")}, 1, [("y", F32)])
    runs_match(m, _batches(x))
    (y,) = ml("Imputer", [x], {"imputed_value_floats": [9.0, 8.0, 7.0], "replaced_value_float": float("nan")}, 1)
    assert y.tolist() == [[1.0, 8.0, 3.0], [9.0, 5.0, 0.0]]
    (y,) = ml("Imputer", [np.array([[1, -1], [-1, 2]], np.int64)], {"imputed_value_int64s": [5, 6],
                                                                    "replaced_value_int64": -1}, 1)
    assert y.dtype == np.int64 and y.tolist() == [[1, 6], [5, 2]]
    sess = dynashape.InferenceSession(model("Imputer", [("x", F32, ["N", "C"])], {"imputed_value_floats": [1.0, 2.0]},
                                            1, [("y", F32)]))
    with pytest.raises(dynashape.ShapeInferenceError, match="has 2 values, X has 3 features") as info:
        sess.run(None, {"x": np.zeros((1, 3), np.float32)})              # a symbolic C: guarded
    assert info.value.kind == "FeatureCountMismatch"
    assert sess.run(None, {"x": np.zeros((1, 2), np.float32)})[0].tolist() == [[1.0, 2.0]]


def test_linear_regressor_is_x_times_the_coefficients_plus_intercepts():
    attrs = {"coefficients": [1.0, 2.0, 3.0, 0.0, 1.0, 0.0], "intercepts": [0.5, 1.0], "targets": 2}
    m = model("LinearRegressor", [("x", F32, ["N", 3])], attrs, 1, [("y", F32)])
    runs_match(m, _batches(X3))
    (y,) = ml("LinearRegressor", [X3], attrs, 1)
    np.testing.assert_allclose(y, [[1 - 8 + 6 + 0.5, -4 + 1.0], [0.5, 1.0], [3 + 2 - 3 + 0.5, 1 + 1.0]])
    (y,) = ml("LinearRegressor", [X3[0]], attrs, 1)                       # one sample, [1, targets]
    assert y.shape == (1, 2)
    soft = dict(attrs, post_transform="SOFTMAX")
    runs_match(model("LinearRegressor", [("x", F32, ["N", 3])], soft, 1, [("y", F32)]), _batches(X3))
    sess = dynashape.InferenceSession(model("LinearRegressor", [("x", F32, ["N", "C"])], attrs, 1, [("y", F32)]))
    with pytest.raises(dynashape.ShapeInferenceError, match="coefficients has 6 values, X has 2 features") as info:
        sess.run(None, {"x": np.zeros((1, 2), np.float32)})
    assert info.value.kind == "FeatureCountMismatch"


def test_label_encoder_string_keys_keep_trailing_nuls():
    """"B\\0B\\0\\0" and "B\\0B\\0" are different keys (numpy's U strings would drop the NULs);
    onnxruntime agrees (its test_run_model_mlnet)."""
    from tests.conftest import ort_run
    m = model("LabelEncoder", [("x", S, ["n"])],
              {"keys_strings": ["B\0B\0", "B\0B\0\0", "A"], "values_int64s": [1, 2, 3], "default_int64": -1}, 2,
              [("y", I64)])
    x = np.array(["B\0B\0\0", "B\0B\0", "A", "A\0"], dtype=object)
    (y,) = dynashape.InferenceSession(model_bytes := m.SerializeToString()).run(None, {"x": x})
    assert y.tolist() == [2, 1, 3, -1]
    assert ort_run(model_bytes, {"x": x})[0].tolist() == [2, 1, 3, -1]
