"""The separately installed plugins_example package, found through its entry point,
runs com.microsoft GELU ops equal to ONNX Runtime's contrib kernels."""
from __future__ import annotations

import math
from importlib import metadata

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from tests.conftest import ort_run

pytestmark = pytest.mark.skipif(
    not any(ep.name == "example" for ep in metadata.entry_points(group="dynashape")),
    reason="plugins_example is not installed (pip install ./plugins_example)")


def _model(op_type, with_bias):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])]
    names = ["x"]
    if with_bias:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [8]))
        names.append("b")
    g = helper.make_graph([helper.make_node(op_type, names, ["y"], domain="com.microsoft")], "g", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def test_entry_point_plugin_is_registered_under_its_name():
    assert dynashape.get_registry().resolve_op("com.microsoft", "FastGelu", 1).plugin == "example"


@pytest.mark.parametrize("op_type,with_bias", [("FastGelu", False), ("FastGelu", True), ("BiasGelu", True),
                                               ("Gelu", False)])
def test_plugin_op_matches_ort_contrib_kernel(op_type, with_bias):
    model = _model(op_type, with_bias)
    sess = dynashape.InferenceSession(model)
    rng = np.random.default_rng(0)
    for shape in ((1, 3, 8), (4, 7, 8)):
        feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
        if with_bias:
            feeds["b"] = rng.standard_normal(8).astype(np.float32)
        (y,) = sess.run(None, feeds)
        (exp,) = ort_run(model, feeds)
        np.testing.assert_allclose(y, exp, rtol=1e-4, atol=1e-5)


def test_plugin_bias_rule_guards_symbolic_dims_and_matches_onnxruntime():
    """BiasGelu's bias must be 1-D of x's last dim (onnxruntime's contrib kernel: "Input 1
    dimension 0 should have same length as the last dimension of input 0"; the rule once
    broadcast it, accepting biases onnxruntime refuses). With symbolic H and N the rule
    records a guard: equal bindings are planned from the symbols, others refused by name,
    and the session runs after. Values: GELU(x + b) by math.erf, and onnxruntime's."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", "H"])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N"])
    node = helper.make_node("BiasGelu", ["x", "b"], ["y"], domain="com.microsoft", name="bias_gelu")
    g = helper.make_graph([node], "g", [x, b], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    sess = dynashape.InferenceSession(model)
    assert sess.get_inferred_outputs()[0].shape == ["batch", "seq", "H"]
    rng = np.random.default_rng(2)
    erf = np.vectorize(math.erf)
    for xs, bs in (((2, 3, 4), (4,)), ((2, 3, 1), (1,)), ((2, 3, 0), (0,)), ((0, 3, 4), (4,))):
        xv, bv = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(bs).astype(np.float32)
        (y,) = sess.run(None, {"x": xv, "b": bv})
        v = (xv + bv).astype(np.float64)
        want = 0.5 * v * (1.0 + erf(v / math.sqrt(2.0))) if v.size else v
        assert y.shape == v.shape and y.dtype == np.float32
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
        if v.size:
            np.testing.assert_allclose(y, ort_run(model, {"x": xv, "b": bv})[0], rtol=1e-5, atol=1e-6)
    for xs, bs in (((2, 3, 1), (4,)), ((2, 3, 4), (1,)), ((1, 1, 0), (3,))):
        with pytest.raises(dynashape.ShapeInferenceError, match="elements, A's last dim is") as info:
            sess.run(None, {"x": np.zeros(xs, np.float32), "b": np.zeros(bs, np.float32)})
        assert info.value.kind == "BiasShapeMismatch" and info.value.node == "bias_gelu"
    assert sess.run(None, {"x": np.ones((1, 1, 2), np.float32), "b": np.zeros(2, np.float32)})[0].shape == (1, 1, 2)


def test_plugin_rotary_hidden_size_is_guarded_on_a_symbolic_dim():
    """RotaryEmbedding (com.microsoft) with a 3-D input: the hidden size must be a multiple of
    num_heads. The rule checked it for an int only: a symbolic H bound to 7 reached the
    kernel's reshape (an ExecutionError); now a guard refuses it by name, and H of 8 or 6
    (head sizes 4 and 3, rotary dim 2) match onnxruntime on the same session."""
    rng = np.random.default_rng(0)
    cos, sin = rng.standard_normal((8, 1)).astype(np.float32), rng.standard_normal((8, 1)).astype(np.float32)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft",
                            num_heads=2, rotary_embedding_dim=2, name="rot")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, "H"]),
                                        helper.make_tensor_value_info("pos", TensorProto.INT64, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    sess = dynashape.InferenceSession(model)
    pos = np.array([[0, 1]], np.int64)
    for hidden in (8, 6):
        x = rng.standard_normal((1, 2, hidden)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x, "pos": pos})[0], ort_run(model, {"x": x, "pos": pos})[0],
                                   rtol=1e-5, atol=1e-6)
    with pytest.raises(dynashape.ShapeInferenceError, match=r"\(7\) must be a multiple of 2") as info:
        sess.run(None, {"x": np.zeros((1, 2, 7), np.float32), "pos": pos})
    assert info.value.kind == "HiddenSizeMismatch" and info.value.node == "rot"
