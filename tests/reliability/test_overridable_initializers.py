"""Initializers also listed as graph inputs are defaults a feed may override (IR.md "Graphs";
onnxruntime's get_overridable_initializers), checked against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape as ds
from tests.conftest import ort_run

F = TensorProto.FLOAT
W = np.array([1.0, 2.0, 3.0], np.float32)


def _model(nodes, inputs, inits, ir_version=None):
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    if ir_version is not None:
        m.ir_version = ir_version
    return m


def _add_model():
    return _model([helper.make_node("Add", ["x", "w"], ["y"])],
                  [helper.make_tensor_value_info("x", F, ["n"]), helper.make_tensor_value_info("w", F, [3])],
                  [numpy_helper.from_array(W, "w")])


@pytest.mark.parametrize("allocator", ["pool", "naive"])
def test_a_feed_overrides_the_initializer_and_the_default_stays(allocator):
    m = _add_model()
    s = ds.InferenceSession(m.SerializeToString(), allocator=allocator)
    assert [a.name for a in s.get_inputs()] == ["x"]
    assert [(a.name, a.shape) for a in s.get_overridable_initializers()] == [("w", [3])]
    x = np.ones(3, np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], [2.0, 3.0, 4.0])
    w = np.array([10.0, 20.0, 30.0], np.float32)
    got = s.run(None, {"x": x, "w": w})[0]
    np.testing.assert_array_equal(got, ort_run(m, {"x": x, "w": w})[0])
    np.testing.assert_array_equal(got, [11.0, 21.0, 31.0])
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], [2.0, 3.0, 4.0])      # the default again
    np.testing.assert_array_equal(s.run(None, {"x": x, "w": w * 2})[0], [21.0, 41.0, 61.0])


def test_an_override_of_another_shape_reaches_shape_computations():
    """w feeds Shape -> ConstantOfShape: overriding it with 5 elements gives 5 outputs."""
    m = _model([helper.make_node("Shape", ["w"], ["s"]),
                helper.make_node("ConstantOfShape", ["s"], ["y"], value=numpy_helper.from_array(np.array([7.0],
                                                                                                  np.float32)))],
               [helper.make_tensor_value_info("w", F, ["k"])], [numpy_helper.from_array(W, "w")])
    s = ds.InferenceSession(m.SerializeToString())
    np.testing.assert_array_equal(s.run(None, {})[0], [7.0] * 3)
    feed = {"w": np.zeros(5, np.float32)}
    np.testing.assert_array_equal(s.run(None, feed)[0], ort_run(m, feed)[0])
    np.testing.assert_array_equal(s.run(None, feed)[0], [7.0] * 5)


def test_an_override_with_the_wrong_dtype_names_the_initializer():
    s = ds.InferenceSession(_add_model().SerializeToString())
    x = np.ones(3, np.float32)
    with pytest.raises(ds.InputDtypeMismatch, match="'w'"):
        s.run(None, {"x": x, "w": np.zeros(3, np.int64)})
    np.testing.assert_array_equal(s.run(None, {"x": x, "w": np.zeros(3, np.float32)})[0], x)


def test_an_unknown_name_is_still_an_error():
    s = ds.InferenceSession(_add_model().SerializeToString())
    with pytest.raises(ds.InputNameError, match="'v'"):
        s.run(None, {"x": np.ones(3, np.float32), "v": W})
