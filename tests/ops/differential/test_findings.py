"""What the differential test (test_differential.py) found wrong in dynashape, each pinned with
the right value: hand-computed, and onnxruntime's where it agrees with the spec. Each of these
failed before its fix."""
from __future__ import annotations

import math

import dynashape
import numpy as np
import pytest
from dynashape.differential import compare_op, model_of_node
from dynashape.testing import run_node
from onnx import numpy_helper

ort = pytest.importorskip("onnxruntime")

X0 = np.asarray(-0.7, np.float32)     # a 0-d input


def _erf_gelu(x):
    return 0.5 * x * (1 + math.erf(x / math.sqrt(2)))


def _softplus(x):
    return math.log1p(math.exp(x))


@pytest.mark.parametrize("op,opset,attrs,want", [
    ("Celu", 12, {"alpha": 0.5}, 0.5 * math.expm1(-0.7 / 0.5)),
    ("Elu", 22, {"alpha": 0.5}, 0.5 * math.expm1(-0.7)),
    ("Selu", 22, {"alpha": 1.5, "gamma": 1.1}, 1.1 * 1.5 * math.expm1(-0.7)),
    ("Softplus", 22, {}, _softplus(-0.7)),
    ("Softsign", 22, {}, -0.7 / 1.7),
    ("Mish", 22, {}, -0.7 * math.tanh(_softplus(-0.7))),
    ("Gelu", 20, {}, _erf_gelu(-0.7)),
    ("Swish", 24, {"alpha": 1.5}, -0.7 / (1 + math.exp(1.5 * 0.7))),
])
def test_an_activation_of_a_0d_tensor_is_computed(op, opset, attrs, want):
    """These kernels made temporaries numpy returns as scalars for a 0-d input, then wrote into
    them (``out=``): a TypeError inside the kernel, an ExecutionError for the user."""
    (y,) = run_node(op, [X0], attrs, opset=opset)
    assert y.shape == () and y.dtype == np.float32
    np.testing.assert_allclose(float(y), want, rtol=1e-5)
    result = compare_op(op, [X0], attrs, opset=opset)
    assert result.agree, result.describe()


def test_quickgelu_of_a_0d_tensor_is_computed():
    (y,) = run_node("QuickGelu", [X0], {"alpha": 1.702}, opset=1, domain="com.microsoft")
    np.testing.assert_allclose(float(y), -0.7 / (1 + math.exp(1.702 * 0.7)), rtol=1e-5)


def _session(op, inputs, attrs, opset, **kw):
    return dynashape.InferenceSession(model_of_node(op, inputs, attrs, opset=opset, **kw))


def test_argmax_over_an_empty_axis_is_refused_only_when_the_output_has_elements():
    sess = _session("ArgMax", [np.zeros((0, 0), np.float32)], {"axis": 0, "keepdims": 0}, 13)
    (y,) = sess.run(None, {"in0": np.zeros((0, 4), np.float32).T[:0]})      # (0, 0): an empty output
    assert y.shape == (0,) and y.dtype == np.int64
    with pytest.raises(dynashape.ShapeInferenceError, match="arg-extreme over axis 0 of size 0") as err:
        sess.run(None, {"in0": np.zeros((0, 3), np.float32)})             # three outputs, no element each
    assert err.value.kind == "EmptyReduction"
    (y,) = sess.run(None, {"in0": np.array([[1, 5], [3, 2]], np.float32)})  # the session runs after
    np.testing.assert_array_equal(y, [1, 0])


def test_onehot_refuses_0d_indices_as_onnx_shape_inference_does():
    with pytest.raises(dynashape.ShapeInferenceError, match="indices must have rank >= 1") as err:
        run_node("OneHot", [np.asarray(1), np.asarray(3), np.array([0.0, 1.0], np.float32)], opset=11)
    assert err.value.kind == "InvalidRank"
    (y,) = run_node("OneHot", [np.asarray([1]), np.asarray(3), np.array([0.0, 1.0], np.float32)], opset=11)
    np.testing.assert_array_equal(y, [[0.0, 1.0, 0.0]])


def test_a_pool_window_longer_than_the_input_gives_the_specs_count():
    """The spec's floor((in + pads - extent) / stride) + 1: 0 windows (an empty output) where the
    input falls short by less than a stride, an error further off; before, any shortfall was an
    error. One session over a symbolic length: the count is guarded, each binding judged."""
    sess = _session("MaxPool", [np.zeros((1, 1, 3), np.float32)], {"kernel_shape": [2]}, 12)
    (y,) = sess.run(None, {"in0": np.array([[[4.0]]], np.float32)})
    assert y.shape == (1, 1, 0)
    (y,) = sess.run(None, {"in0": np.array([[[4.0, 1.0, 6.0]]], np.float32)})
    np.testing.assert_array_equal(y, [[[4.0, 6.0]]])
    short = _session("MaxPool", [np.zeros((1, 1, 3), np.float32)], {"kernel_shape": [4]}, 12)
    with pytest.raises(dynashape.ShapeInferenceError, match="shorter than the kernel extent 4: -2 windows") as err:
        short.run(None, {"in0": np.zeros((1, 1, 1), np.float32)})
    assert err.value.kind == "InvalidShape"
    np.testing.assert_array_equal(short.run(None, {"in0": np.arange(5, dtype=np.float32).reshape(1, 1, 5)})[0],
                                  [[[3.0, 4.0]]])
    # stride 2, one short: the spec counts 0 windows (onnxruntime one, past the input's end)
    (y,) = run_node("AveragePool", [np.ones((1, 1, 1), np.float32)], {"kernel_shape": [2], "strides": [2]}, opset=19)
    assert y.shape == (1, 1, 0)
    (y,) = run_node("Conv", [np.ones((1, 1, 1), np.float32), np.ones((1, 1, 2), np.float32)], opset=22)
    assert y.shape == (1, 1, 0)


def test_a_global_pool_over_an_empty_extent_is_refused_by_name():
    """GlobalMaxPool's kernel failed inside numpy (no max of nothing); GlobalAveragePool gave NaN
    and GlobalLpPool 0 where onnxruntime refuses all three."""
    for op in ("GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"):
        sess = _session(op, [np.zeros((1, 2, 3), np.float32)], {}, 22 if op != "GlobalLpPool" else 2)
        with pytest.raises(dynashape.ShapeInferenceError, match="empty spatial extent") as err:
            sess.run(None, {"in0": np.zeros((1, 2, 0), np.float32)})
        assert err.value.kind == "EmptyReduction"
        assert sess.run(None, {"in0": np.zeros((0, 2, 0), np.float32)})[0].shape == (0, 2, 1)   # nothing to pool
        x = np.array([[[1.0, 3.0]]], np.float32)
        want = {"GlobalMaxPool": 3.0, "GlobalAveragePool": 2.0, "GlobalLpPool": math.sqrt(10.0)}[op]
        np.testing.assert_allclose(sess.run(None, {"in0": x})[0], [[[want]]], rtol=1e-6)


def test_run_node_reads_a_tensor_attribute_as_a_model_would():
    value = numpy_helper.from_array(np.asarray([2.5], np.float32))
    (y,) = run_node("ConstantOfShape", [np.array([2, 1], np.int64)], {"value": value}, opset=9)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, [[2.5], [2.5]])


def test_the_contrib_gelus_take_the_bias_their_schemas_take():
    a = np.array([[0.5, -1.0]], np.float32)
    b = np.array([0.25, 0.5], np.float32)
    with pytest.raises(dynashape.ShapeInferenceError, match="B, the bias") as err:
        run_node("BiasGelu", [a], domain="com.microsoft", opset=1)
    assert err.value.kind == "MissingInput"
    with pytest.raises(dynashape.ShapeInferenceError, match="one input") as err:
        run_node("Gelu", [a, b], domain="com.microsoft", opset=1)
    assert err.value.kind == "UnexpectedInput"
    sess = _session("FastGelu", [a, b], {}, 1, domain="com.microsoft")
    with pytest.raises(dynashape.ShapeInferenceError, match="3 elements, A's last dim is 2") as err:
        sess.run(None, {"in0": a, "in1": np.zeros(3, np.float32)})
    assert err.value.kind == "BiasShapeMismatch"
    (y,) = sess.run(None, {"in0": a, "in1": b})
    x = a + b
    np.testing.assert_allclose(y, 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
                               rtol=1e-5)
    (y,) = run_node("BiasGelu", [a, b], domain="com.microsoft", opset=1)
    np.testing.assert_allclose(y, [[_erf_gelu(0.75), _erf_gelu(-0.5)]], rtol=1e-5)


def test_gather_checks_its_indices_where_the_output_is_empty():
    """Gather's small-output path relied on numpy's own range check (take, mode="raise"),
    which takes nothing, and checks nothing, for an empty output: an out-of-range index into
    an empty axis passed in a session (the per-node run and onnxruntime refuse it)."""
    sess = _session("Gather", [np.zeros((2, 3), np.float32), np.asarray(0)], {"axis": 1}, 13)
    with pytest.raises(dynashape.ShapeInferenceError, match="index 0 is out of range for a dim of size 0") as err:
        sess.run(None, {"in0": np.zeros((0, 0), np.float32), "in1": np.asarray(0)})
    assert err.value.kind == "GatherIndexOutOfRange"
    (y,) = sess.run(None, {"in0": np.zeros((0, 3), np.float32), "in1": np.asarray(-3)})   # in range: empty result
    assert y.shape == (0,)
    np.testing.assert_array_equal(sess.run(None, {"in0": np.arange(6, dtype=np.float32).reshape(2, 3),
                                                  "in1": np.asarray(-1)})[0], [2, 5])


def test_pad_reflect_measures_its_pads_against_the_cropped_axis():
    """Reflect pads must be smaller than the axis they reflect: the axis after negative pads
    crop it (3 cropped to 2 cannot take a reflect pad of 2, as onnxruntime says); the rule
    compared them with the uncropped length and numpy's pad reflected past the data."""
    with pytest.raises(dynashape.ShapeInferenceError, match="cropped by the negative pad to 2") as err:
        run_node("Pad", [np.ones((3, 1), np.float32), np.array([2, 0, -1, 0])], {"mode": "reflect"}, opset=11)
    assert err.value.kind == "PadReflectTooLarge"
    (y,) = run_node("Pad", [np.arange(3, dtype=np.float32).reshape(3, 1), np.array([1, 0, -1, 0])],
                    {"mode": "reflect"}, opset=11)
    np.testing.assert_array_equal(y.ravel(), [1, 0, 1])      # [0, 1] after the crop, reflected by 1
