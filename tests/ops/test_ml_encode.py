"""Tests of the ai.onnx.ml encoders (ops_builtin/ml_encode.py): OneHotEncoder, CategoryMapper,
FeatureVectorizer.

One-node models with symbolic batch dims run on one session per allocator through several
batch sizes (0 included) and are compared with onnxruntime, or with hand-computed values
where onnxruntime has no kernel (OneHotEncoder on int32) or aborts (FeatureVectorizer of
several inputs at batch 0); every error kind is raised once.
"""
from __future__ import annotations

import dynashape
import numpy as np
import onnx
import pytest
from dynashape.registry import get_registry
from dynashape.symbolic import sym
from dynashape.testing import infer_symbolic, run_node
from onnx import TensorProto, helper

from tests.conftest import assert_runs_match, ort_run, spec_versions

pytest.importorskip("onnxruntime")

ML = "ai.onnx.ml"
S, I32, I64, F32, F64 = TensorProto.STRING, TensorProto.INT32, TensorProto.INT64, TensorProto.FLOAT, TensorProto.DOUBLE


def model(op, inputs, attrs, outs, name="node"):
    """One ai.onnx.ml node; ``inputs``: (name, elem type, dims), ``outs``: (name, elem type)."""
    graph = helper.make_graph(
        [helper.make_node(op, [i[0] for i in inputs], [o[0] for o in outs], domain=ML, name=name, **attrs)], "g",
        [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(o, t, None) for o, t in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)])


def ml(op, inputs, attrs):
    return run_node(op, inputs, attrs, opset=1, domain=ML)


def strings(*items, shape=None):
    a = np.array(list(items), dtype=object)
    return a.reshape(shape) if shape is not None else a


def batches(x):
    """The same session at batch 4-ish, 1, 0 and a longer one (the first axis symbolic)."""
    return [x, x[:1], x[:0], np.concatenate([x, x[::-1]])]


def raises(match):
    """ShapeInferenceError matching ``match`` (its kind is asserted after the block)."""
    return pytest.raises(dynashape.ShapeInferenceError, match=match)


@pytest.mark.parametrize("op", ["OneHotEncoder", "CategoryMapper", "FeatureVectorizer"])
def test_every_spec_version_registered(op):
    assert sorted(o.since_version for o in get_registry().schemas(ML, op)) == spec_versions(op, ML)


# OneHotEncoder ----------------------------------------------------------------------------

def test_one_hot_encoder_hand_computed():
    # a repeated category keeps its column count and sets its last column (as onnxruntime)
    (y,) = ml("OneHotEncoder", [np.array([[1, 3], [2, 9]])], {"cats_int64s": [3, 1, 2, 1]})
    assert y.dtype == np.float32 and y.shape == (2, 2, 4)
    assert y.tolist() == [[[0, 0, 0, 1], [1, 0, 0, 0]], [[0, 0, 1, 0], [0, 0, 0, 0]]]
    # floats truncated toward zero; NaN and out-of-range values are INT64_MIN
    x = np.array([1.9, -1.9, np.nan, 3e20, -0.5], np.float64)
    (y,) = ml("OneHotEncoder", [x], {"cats_int64s": [1, -1, 0, np.iinfo(np.int64).min]})
    assert y.tolist() == [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 1, 0]]
    (y,) = ml("OneHotEncoder", [strings("b", "é", "")], {"cats_strings": ["é", "b", ""]})
    assert y.tolist() == [[0, 1, 0], [1, 0, 0], [0, 0, 1]]
    (y,) = ml("OneHotEncoder", [np.array(5, np.int64)], {"cats_int64s": [1, 5]})        # a scalar: [n]
    assert y.tolist() == [0, 1]


@pytest.mark.parametrize("elem,make,cats", [
    (I64, lambda n: np.arange(n * 3).reshape(n, 3) % 5 - 1, {"cats_int64s": [0, 3, -1, 1, 3]}),
    (F32, lambda n: (np.linspace(-2.5, 3.5, n * 3).reshape(n, 3)).astype(np.float32), {"cats_int64s": [2, -1, 0, 1]}),
    (F64, lambda n: np.linspace(-2.5, 3.5, n * 3).reshape(n, 3), {"cats_int64s": [2, -2, 0, 3]}),
    (S, lambda n: strings(*["abcé"[k % 4] * (k % 3) for k in range(n * 3)], shape=(n, 3)),
     {"cats_strings": ["a", "bb", "", "é", "cc"]}),
], ids=["int64", "float", "double", "string"])
@pytest.mark.parametrize("zeros", [1, 0])
def test_one_hot_encoder_matches_ort(elem, make, cats, zeros):
    m = model("OneHotEncoder", [("x", elem, ["N", "C"])], dict(cats, zeros=zeros), [("y", F32)])
    x = make(6)
    if zeros == 0:      # only known categories: no error
        keys = cats.get("cats_int64s") or cats.get("cats_strings")
        known = np.isin(x, keys) if elem == S else np.isin(np.trunc(x).astype(np.int64), keys)
        x = np.where(known, x, keys[0]).astype(x.dtype)
    runs = [{"x": b} for b in batches(x)] + [{"x": x[:2, :1]}]
    assert_runs_match(m, runs)


def test_one_hot_encoder_int32_and_rank_3():
    # onnxruntime has no int32 kernel (the spec lists int32): hand-computed values
    m = model("OneHotEncoder", [("x", I32, ["N", 2, "K"])], {"cats_int64s": [7, 0]}, [("y", F32)])

    def want(feeds):
        x = feeds["x"].astype(np.int64)
        return [np.stack([x == 7, x == 0], axis=-1).astype(np.float32)]
    x = np.array([[[7, 0, 1]], [[0, 0, 7]]], np.int32).reshape(1, 2, 3)
    assert_runs_match(m, [{"x": x}, {"x": x[:0]}, {"x": np.concatenate([x, x + 7])}], want=want)
    m = model("OneHotEncoder", [("x", I64, ["N", 2, "K"])], {"cats_int64s": [7, 0]}, [("y", F32)])
    assert_runs_match(m, [{"x": x.astype(np.int64)}, {"x": np.zeros((3, 2, 1), np.int64)}])


def test_one_hot_encoder_input_of_the_other_kind_matches_no_category():
    # string X with cats_int64s (and numbers with cats_strings): every row is zero, as onnxruntime
    m = model("OneHotEncoder", [("x", S, ["N"])], {"cats_int64s": [1, 2]}, [("y", F32)])
    assert_runs_match(m, [{"x": strings("1", "2")}, {"x": strings()}])
    m = model("OneHotEncoder", [("x", I64, ["N"])], {"cats_strings": ["1"]}, [("y", F32)])
    assert_runs_match(m, [{"x": np.array([1, 2])}])


def test_one_hot_encoder_errors():
    with raises("exactly one of cats_int64s and cats_strings must be given, got both") as e:
        ml("OneHotEncoder", [np.array([1])], {"cats_int64s": [1], "cats_strings": ["a"]})
    assert e.value.kind == "InvalidAttribute"
    with raises("got neither") as e:
        ml("OneHotEncoder", [np.array([1])], {})
    assert e.value.kind == "InvalidAttribute"
    with raises("X has dtype bool, expected one of string, int64, int32, float32, float64") as e:
        ml("OneHotEncoder", [np.array([True])], {"cats_int64s": [1]})
    assert e.value.kind == "InvalidDtype"
    # an empty list of categories (onnxruntime refuses it too)
    node = helper.make_node("OneHotEncoder", ["x"], ["y"], domain=ML)
    node.attribute.append(helper.make_attribute("cats_int64s", [], attr_type=onnx.AttributeProto.INTS))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", I64, ["N"])],
                              [helper.make_tensor_value_info("y", F32, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)])
    with raises("cats_int64s is empty") as e:
        dynashape.InferenceSession(m).run(None, {"x": np.array([1])})
    assert e.value.kind == "InvalidAttribute"


def test_one_hot_encoder_unknown_category_with_zeros_0_fails_when_run():
    m = model("OneHotEncoder", [("x", S, ["N"])], {"cats_strings": ["a", "b"], "zeros": 0}, [("y", F32)], name="ohe")
    sess = dynashape.InferenceSession(m)
    assert sess.run(None, {"x": strings("b", "a")})[0].tolist() == [[0, 1], [1, 0]]
    assert sess.run(None, {"x": strings()})[0].shape == (0, 2)
    with raises("OneHotEncoder node 'ohe': 'z' is not one of the categories and zeros=0") as e:
        sess.run(None, {"x": strings("a", "z")})
    assert e.value.kind == "UnknownCategory" and e.value.node == "ohe"
    with pytest.raises(Exception, match="Unknown Category and zeros = 0"):        # onnxruntime refuses too
        ort_run(m, {"x": strings("a", "z")})


def test_one_hot_encoder_shape_is_symbolic_in_the_batch():
    n, k = sym("n"), sym("k")
    (shape,), ctx = infer_symbolic("OneHotEncoder", [(n, k, 3)], [np.int64], {"cats_int64s": [4, 5]}, opset=1,
                                   domain=ML)
    assert shape == (n, k, 3, 2) and not ctx.guards


# CategoryMapper ---------------------------------------------------------------------------

CATS = {"cats_strings": ["a", "bé", "c", "a", ""], "cats_int64s": [5, 6, 7, 8, 6]}


@pytest.mark.parametrize("defaults", [{}, {"default_int64": 42, "default_string": "?"}])
def test_category_mapper_string_to_int_matches_ort(defaults):
    m = model("CategoryMapper", [("x", S, ["N", 2])], dict(CATS, **defaults), [("y", I64)])
    x = strings("a", "bé", "z", "", "c", "A", shape=(3, 2))
    assert_runs_match(m, [{"x": b} for b in batches(x)])
    (y,) = ml("CategoryMapper", [x], dict(CATS, **defaults))
    assert y.dtype == np.int64 and y.tolist() == [[8, 6], [defaults.get("default_int64", -1), 6],
                                                  [7, defaults.get("default_int64", -1)]]     # a: its last pair


@pytest.mark.parametrize("defaults", [{}, {"default_string": "?"}])
def test_category_mapper_int_to_string_matches_ort(defaults):
    m = model("CategoryMapper", [("x", I64, ["N"])], dict(CATS, **defaults), [("y", S)])
    x = np.array([5, 6, 7, 8, 9, -1])
    assert_runs_match(m, [{"x": b} for b in batches(x)])
    (y,) = ml("CategoryMapper", [x], dict(CATS, **defaults))
    unused = defaults.get("default_string", "_Unused")
    assert y.dtype == object and y.tolist() == ["a", "", "c", "a", unused, unused]     # 6: its last pair


def test_category_mapper_any_rank_and_an_empty_map():
    m = model("CategoryMapper", [("x", I64, ["A", "B", "C"])], CATS, [("y", S)])
    assert_runs_match(m, [{"x": np.array([[[5], [7]]])}, {"x": np.zeros((0, 2, 1), np.int64)}])
    (y,) = ml("CategoryMapper", [strings("a", shape=())], CATS)
    assert y.shape == () and y.tolist() == 8
    (y,) = ml("CategoryMapper", [strings("a", "b")], {"cats_strings": [], "cats_int64s": [], "default_int64": 3})
    assert y.tolist() == [3, 3]


def test_category_mapper_errors():
    with raises("attribute 'cats_int64s' is required") as e:
        ml("CategoryMapper", [strings("a")], {"cats_strings": ["a"]})
    assert e.value.kind == "MissingAttribute"
    with raises("cats_strings has 2 entries, cats_int64s 1") as e:
        ml("CategoryMapper", [strings("a")], {"cats_strings": ["a", "b"], "cats_int64s": [1]})
    assert e.value.kind == "InvalidAttribute"
    with raises("X has dtype float32, expected one of string, int64") as e:
        ml("CategoryMapper", [np.array([1.0], np.float32)], CATS)
    assert e.value.kind == "InvalidDtype"


# FeatureVectorizer ------------------------------------------------------------------------

def _vectorized(inputs, dims):
    """The spec's FeatureVectorizer in numpy (one row per sample; cut or padded with 0)."""
    n = 1 if inputs[0].ndim == 1 else inputs[0].shape[0]
    cols = []
    for x, d in zip(inputs, dims):
        rows = x.reshape(n, -1) if x.size else np.zeros((n, 0), x.dtype)
        cols.append(np.pad(rows[:, :d].astype(np.float32), ((0, 0), (0, max(0, d - rows.shape[1])))))
    return np.concatenate(cols, axis=1).astype(np.float32)


def _ort_or_numpy(model_, dims):
    """onnxruntime's outputs, or (batch 0 of several inputs: onnxruntime 1.32 aborts) numpy's."""
    def want(feeds):
        xs = list(feeds.values())
        if len(xs) > 1 and xs[0].ndim > 1 and xs[0].shape[0] == 0:
            return [_vectorized(xs, dims)]
        return ort_run(model_, feeds)
    return want


@pytest.mark.parametrize("np_dtype,elem", [(np.float32, F32), (np.float64, F64), (np.int64, I64), (np.int32, I32)])
def test_feature_vectorizer_pads_and_cuts_each_input(np_dtype, elem):
    dims = [3, 1, 2]
    m = model("FeatureVectorizer", [("a", elem, ["N", 2]), ("b", elem, ["N", "K"]), ("c", elem, ["N", 2, 2])],
              {"inputdimensions": dims}, [("y", F32)])
    rng = np.random.default_rng(0)

    def make(*s):
        return (rng.standard_normal(s) * 4).astype(np_dtype)

    def feeds(n, k):
        return {"a": make(n, 2), "b": make(n, k), "c": make(n, 2, 2)}
    runs = [feeds(3, 3), feeds(1, 0), feeds(0, 2), feeds(5, 1), feeds(2, 4)]
    assert_runs_match(m, runs, want=_ort_or_numpy(m, dims))
    sess = dynashape.InferenceSession(m)
    for f in runs:      # (the spec's values too: onnxruntime's agree with them)
        np.testing.assert_array_equal(sess.run(None, f)[0], _vectorized(list(f.values()), dims))


def test_feature_vectorizer_one_dimensional_inputs_are_one_row():
    m = model("FeatureVectorizer", [("a", F64, ["A"]), ("b", F64, ["B"])], {"inputdimensions": [2, 2]}, [("y", F32)])
    assert_runs_match(m, [{"a": np.array([1.5, 2.5, 3.5]), "b": np.array([4.0])},
                          {"a": np.zeros(0), "b": np.array([1.0, 2.0])}])
    m = model("FeatureVectorizer", [("a", F32, ["N", 2])], {"inputdimensions": [3]}, [("y", F32)])
    assert_runs_match(m, [{"a": np.ones((2, 2), np.float32)}, {"a": np.ones((0, 2), np.float32)}])


def test_feature_vectorizer_batch_sizes_are_guarded_when_symbolic():
    m = model("FeatureVectorizer", [("a", F32, ["N", 2]), ("b", F32, ["M", 1])], {"inputdimensions": [2, 1]},
              [("y", F32)], name="fv")
    sess = dynashape.InferenceSession(m)
    assert sess.run(None, {"a": np.ones((2, 2), np.float32), "b": np.ones((2, 1), np.float32)})[0].shape == (2, 3)
    with raises("input 1 has batch size 3, input 0 2: every input must have the same batch size") as e:
        sess.run(None, {"a": np.ones((2, 2), np.float32), "b": np.ones((3, 1), np.float32)})
    assert e.value.kind == "BatchMismatch" and e.value.node == "fv"
    (shape,), ctx = infer_symbolic("FeatureVectorizer", [(sym("n"), 4), (sym("n"), sym("k"))], [np.float32] * 2,
                                   {"inputdimensions": [4, 3]}, opset=1, domain=ML)
    assert shape == (sym("n"), 7)


def test_feature_vectorizer_errors():
    a, b = np.ones((2, 2), np.float32), np.ones((2, 3), np.float32)
    cases = [({}, [a], "MissingAttribute", "attribute 'inputdimensions' is required"),
             ({"inputdimensions": [2]}, [a, b], "InvalidAttribute", "inputdimensions has 1 values, the node has 2"),
             ({"inputdimensions": [2, -1]}, [a, b], "InvalidAttribute", r"inputdimensions \[2, -1\] must be >= 0"),
             ({"inputdimensions": [2, 3]}, [a, b.astype(np.float64)], "InvalidDtype",
              "input 1 has dtype float64, input 0 float32: every input must have the same type"),
             ({"inputdimensions": [2]}, [a.astype(bool)], "InvalidDtype", "input 0 has dtype bool"),
             ({"inputdimensions": [2]}, [np.float32(1.0)], "InvalidRank", "input 0 is a scalar"),
             ({"inputdimensions": [2, 3]}, [a, b[:1]], "BatchMismatch", "input 1 has batch size 1, input 0 2"),
             ({"inputdimensions": [2, 3]}, [a, b[0]], "BatchMismatch", "input 1 has batch size 1, input 0 2")]
    for attrs, inputs, kind, match in cases:
        with raises(match) as e:
            ml("FeatureVectorizer", inputs, attrs)
        assert e.value.kind == kind, (kind, str(e.value))
