"""Tests of the shape_ops family: Shape, Size, Reshape, Squeeze, Unsqueeze, Flatten, Identity,
Constant, ConstantOfShape, Range, Expand, Dropout, Cast, CastLike."""
from __future__ import annotations

import functools
import warnings

import dynashape
import ml_dtypes
import numpy as np
import pytest
from dynashape import get_registry
from dynashape.symbolic import Expr, sym
from dynashape.testing import infer_node, run_node
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import (assert_broadcast_mismatch, assert_runs_match_ort, ort_run, spec_node_outputs,
                            spec_versions, symbolic_infer)

B, S = sym("batch"), sym("seq")
I64 = np.int64


# helpers --------------------------------------------------------------------------------

#: onnx.reference's outputs of one node, its inputs declared without shapes
reference = functools.partial(spec_node_outputs, opset=21, declare_shapes=False)
#: the OpDef's infer_shape on symbolic shapes: (shapes, op, ctx)
infer_symbolic = functools.partial(symbolic_infer, opset=21)


def propagate(op_type, shapes, dtypes, values, attrs=None, opset=21):
    _, op, ctx = infer_symbolic(op_type, shapes, dtypes, values, attrs, opset=opset)
    return op.propagate_value(ctx)


def obj(*items):
    out = np.empty(len(items), dtype=object)
    out[:] = list(items)
    return out


def assert_same(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if expected.dtype.kind == "V" or expected.dtype.kind == "f":
        np.testing.assert_array_equal(actual.astype(np.float64), expected.astype(np.float64))
    else:
        np.testing.assert_array_equal(actual, expected)


# Shape / Size -------------------------------------------------------------------------------

X345 = np.arange(60, dtype=np.float32).reshape(3, 4, 5)


@pytest.mark.parametrize("attrs", [{}, {"start": 1}, {"end": -1}, {"start": -2, "end": 10},
                                   {"start": -10}, {"start": 2, "end": 1}, {"start": 3}])
def test_shape_start_end(attrs):
    (y,) = run_node("Shape", [X345], attrs, opset=21)
    assert_same(y, reference("Shape", [X345], attrs)[0])


def test_shape_opset1_ignores_start_and_scalar():
    assert_same(run_node("Shape", [X345], opset=1)[0], np.array([3, 4, 5], I64))
    assert_same(run_node("Shape", [np.float32(2)], opset=13)[0], np.zeros(0, I64))


def test_shape_symbolic_and_propagate():
    shapes, op, _ = infer_symbolic("Shape", [(B, S, 768)], [np.float32], attrs={"start": 1})
    assert shapes == [(2,)]
    assert op.shape_only_inputs == (0,)
    (v,) = propagate("Shape", [(B, S, 768)], [np.float32], [None], {"start": 1})
    assert v.dtype == object and list(v) == [S, 768]
    (v,) = propagate("Shape", [(2, 3)], [np.float32], [None])
    assert_same(v, np.array([2, 3], I64))


def test_size():
    assert_same(run_node("Size", [X345])[0], np.array(60, I64))
    assert_same(run_node("Size", [np.zeros((0, 3))])[0], np.array(0, I64))
    assert_same(run_node("Size", [np.float32(1)], opset=1)[0], np.array(1, I64))
    (v,) = propagate("Size", [(B, 4)], [np.float32], [None])
    assert v.shape == () and v[()] == B * 4


# Reshape ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,attrs", [
    ([4, 15], {}), ([-1], {}), ([0, -1], {}), ([0, 0, 5], {}), ([2, -1, 2], {}),
    ([1, 60, 1], {}), ([3, 0, 5], {"allowzero": 1}) if False else ([60], {}),
])
def test_reshape_values(shape, attrs):
    s = np.array(shape, I64)
    (y,) = run_node("Reshape", [X345, s], attrs)
    assert_same(y, reference("Reshape", [X345, s], attrs)[0])
    assert np.shares_memory(y, X345)


def test_reshape_allowzero_and_empty():
    x = np.zeros((0, 3), np.float32)
    (y,) = run_node("Reshape", [x, np.array([3, 0], I64)], {"allowzero": 1})
    assert y.shape == (3, 0)
    (y,) = run_node("Reshape", [x, np.array([0, 3], I64)])
    assert y.shape == (0, 3)
    # opset < 14 ignores allowzero: 0 copies the input dim
    (y,) = run_node("Reshape", [np.zeros((2, 3)), np.array([0, 3], I64)], {"allowzero": 1}, opset=13)
    assert y.shape == (2, 3)


def test_reshape_opset1_attribute_and_scalar():
    (y,) = run_node("Reshape", [X345], {"shape": [12, 5]}, opset=1)
    assert y.shape == (12, 5)
    (y,) = run_node("Reshape", [np.array([7.0]), np.zeros(0, I64)], opset=14)
    assert y.shape == () and y == 7.0


@pytest.mark.parametrize("shape,attrs,kind,words", [
    ([7, -1], {}, "ReshapeElementCountMismatch", "element count"),
    ([4, 16], {}, "ReshapeElementCountMismatch", "size"),
    ([-1, -1], {}, "ReshapeMultipleMinusOne", "-1"),
    ([3, 4, 5, 0], {}, "ReshapeZeroIndexOutOfRange", "index"),
    ([0, 0, 0, 0], {}, "ReshapeZeroIndexOutOfRange", "0"),
    ([-2, 30], {}, "ReshapeInvalidValue", "-2"),
    ([0, -1], {"allowzero": 1}, "ReshapeAllowZeroWithMinusOne", "-1"),
])
def test_reshape_errors(shape, attrs, kind, words):
    with pytest.raises(dynashape.ShapeInferenceError, match=words) as info:
        run_node("Reshape", [X345, np.array(shape, I64)], attrs)
    assert info.value.kind == kind


def test_reshape_cannot_infer_minus_one():
    with pytest.raises(dynashape.ShapeInferenceError) as info:
        run_node("Reshape", [np.zeros((0, 3)), np.array([0, -1], I64)])
    assert info.value.kind == "ReshapeCannotInferMinusOne"


def test_reshape_symbolic():
    shapes, op, _ = infer_symbolic("Reshape", [(B, S, 768), (4,)], [np.float32, I64],
                                   [None, obj(B, S, 12, 64)])
    assert shapes == [(B, S, 12, 64)]
    assert op.value_inputs == (1,) and op.aliases == ((0, 0),)
    shapes, _, _ = infer_symbolic("Reshape", [(B, S, 768), (3,)], [np.float32, I64],
                                  [None, np.array([0, -1, 64], I64)])
    assert shapes == [(B, S * 12, 64)]
    shapes, _, _ = infer_symbolic("Reshape", [(B, S, 768), (2,)], [np.float32, I64],
                                  [None, np.array([-1, 768], I64)])
    assert shapes == [(B * S, 768)]
    # unknown shape value: rank from the shape input's length
    shapes, _, _ = infer_symbolic("Reshape", [(B, 4), (3,)], [np.float32, I64], [None, None])
    assert len(shapes[0]) == 3 and all(isinstance(d, Expr) for d in shapes[0])
    # a provable mismatch (a constant difference) is caught at import
    with pytest.raises(dynashape.ShapeInferenceError, match="element count"):
        infer_symbolic("Reshape", [(B, 4), (3,)], [np.float32, I64], [None, obj(B + 1, 4)])


def test_reshape_propagate():
    (v,) = propagate("Reshape", [(2,), (2,)], [I64, I64], [obj(B, 3), np.array([2, 1], I64)])
    assert v.shape == (2, 1) and v[0, 0] == B


# Squeeze / Unsqueeze ------------------------------------------------------------------------------

X1 = np.arange(6, dtype=np.float32).reshape(1, 3, 1, 2)


@pytest.mark.parametrize("axes", [None, [0], [-2], [0, 2], [2, -4]])
def test_squeeze(axes):
    inputs = [X1] if axes is None else [X1, np.array(axes, I64)]
    (y,) = run_node("Squeeze", inputs)
    assert_same(y, reference("Squeeze", inputs)[0])
    assert np.shares_memory(y, X1)
    attrs = {} if axes is None else {"axes": axes}
    (y11,) = run_node("Squeeze", [X1], attrs, opset=11)
    assert_same(y11, y)


def test_squeeze_errors_and_scalar():
    with pytest.raises(dynashape.ShapeInferenceError, match="1") as info:
        run_node("Squeeze", [X1, np.array([1], I64)])
    assert info.value.kind == "SqueezeNonUnitDim"
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range"):
        run_node("Squeeze", [X1, np.array([4], I64)])
    (y,) = run_node("Squeeze", [np.ones((1, 1), np.int8)])
    assert y.shape == () and y.dtype == np.int8


def test_squeeze_symbolic():
    shapes, _, _ = infer_symbolic("Squeeze", [(1, B, 1)], [np.float32])
    assert shapes == [None]  # unknown rank: B might be 1
    shapes, _, _ = infer_symbolic("Squeeze", [(1, B, 1), (1,)], [np.float32, I64], [None, np.array([0], I64)])
    assert shapes == [(B, 1)]
    shapes, _, _ = infer_symbolic("Squeeze", [(1, 3, 1)], [np.float32])
    assert shapes == [(3,)]


@pytest.mark.parametrize("axes", [[0], [-1], [1, 3], [3, 0], [-4, -1]])
def test_unsqueeze(axes):
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    inputs = [x, np.array(axes, I64)]
    (y,) = run_node("Unsqueeze", inputs)
    assert_same(y, reference("Unsqueeze", inputs)[0])
    (y11,) = run_node("Unsqueeze", [x], {"axes": axes}, opset=11)
    assert_same(y11, y)


def test_unsqueeze_errors_scalar_symbolic():
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range") as info:
        run_node("Unsqueeze", [np.zeros((3,)), np.array([2], I64)])
    assert info.value.kind == "UnsqueezeAxisOutOfRange"
    with pytest.raises(dynashape.ShapeInferenceError, match="duplicate") as info:
        run_node("Unsqueeze", [np.zeros((3,)), np.array([1, -2], I64)])
    (y,) = run_node("Unsqueeze", [np.float32(5), np.array([0], I64)])
    assert y.shape == (1,)
    shapes, op, _ = infer_symbolic("Unsqueeze", [(B, S), (2,)], [np.float32, I64], [None, np.array([1, -1], I64)])
    assert shapes == [(B, 1, S, 1)] and op.value_inputs == (1,)
    (v,) = propagate("Unsqueeze", [(), (1,)], [I64, I64], [np.array(B, dtype=object), np.array([0], I64)])
    assert v.shape == (1,) and v[0] == B


# Flatten / Identity ----------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(axis):
    (y,) = run_node("Flatten", [X345], {"axis": axis})
    assert_same(y, reference("Flatten", [X345], {"axis": axis})[0])


def test_flatten_errors_symbolic():
    with pytest.raises(dynashape.ShapeInferenceError, match="axis") as info:
        run_node("Flatten", [X345], {"axis": 4})
    assert info.value.kind == "FlattenAxisOutOfRange"
    with pytest.raises(dynashape.ShapeInferenceError):
        run_node("Flatten", [X345], {"axis": -1}, opset=9)
    shapes, _, _ = infer_symbolic("Flatten", [(B, S, 4)], [np.float32], attrs={"axis": 2})
    assert shapes == [(B * S, 4)]
    (y,) = run_node("Flatten", [np.float32(3)], {"axis": 0})
    assert y.shape == (1, 1)


def test_identity():
    (y,) = run_node("Identity", [X345])
    assert_same(y, X345)
    assert np.shares_memory(y, X345)
    (v,) = propagate("Identity", [(2,)], [I64], [obj(B, 2)])
    assert list(v) == [B, 2]


# Constant / ConstantOfShape ------------------------------------------------------------------------

@pytest.mark.parametrize("attrs,expected", [
    ({"value": np.array([[1, 2]], np.int32)}, np.array([[1, 2]], np.int32)),
    ({"value_float": 2.5}, np.array(2.5, np.float32)),
    ({"value_floats": [1.0, 2.0]}, np.array([1, 2], np.float32)),
    ({"value_int": 7}, np.array(7, I64)),
    ({"value_ints": [1, 2, 3]}, np.array([1, 2, 3], I64)),
    ({"value_string": "hi"}, np.array("hi", dtype=object)),
    ({"value_strings": ["a", "bc"]}, np.array(["a", "bc"], dtype=object)),
    ({"sparse_value": np.array([0, 3.0, 0], np.float32)}, np.array([0, 3, 0], np.float32)),
    ({"value": np.zeros((0, 2), ml_dtypes.bfloat16)}, np.zeros((0, 2), ml_dtypes.bfloat16)),
])
def test_constant(attrs, expected):
    (y,) = run_node("Constant", [], attrs)
    assert_same(y, expected)


def test_constant_requires_one_attribute():
    with pytest.raises(dynashape.ShapeInferenceError) as info:
        run_node("Constant", [], {"value_int": 1, "value_float": 2.0})
    assert info.value.kind == "ConstantAttribute"


def test_constant_of_shape():
    (y,) = run_node("ConstantOfShape", [np.array([2, 3], I64)])
    assert_same(y, np.zeros((2, 3), np.float32))
    (y,) = run_node("ConstantOfShape", [np.array([2], I64)], {"value": np.array([7], np.int32)})
    assert_same(y, np.full(2, 7, np.int32))
    (y,) = run_node("ConstantOfShape", [np.zeros(0, I64)], {"value": np.array([True])})
    assert_same(y, np.array(True))
    (y,) = run_node("ConstantOfShape", [np.array([0, 3], I64)])
    assert y.shape == (0, 3)
    with pytest.raises(dynashape.ShapeInferenceError, match="negative"):
        run_node("ConstantOfShape", [np.array([-1], I64)])
    shapes, op, _ = infer_symbolic("ConstantOfShape", [(2,)], [I64], [obj(B, 4)])
    assert shapes == [(B, 4)] and op.value_inputs == (0,)
    shapes, _, _ = infer_symbolic("ConstantOfShape", [(3,)], [I64], [None])
    assert len(shapes[0]) == 3


# Range -----------------------------------------------------------------------------------

@pytest.mark.parametrize("start,limit,delta,dtype", [
    (3, 9, 3, np.int32), (10, 4, -2, np.int64), (1, 1, 1, np.int16), (5, 1, 1, np.int64),
    (0.5, 3.1, 0.7, np.float32), (1.0, -2.0, -0.5, np.float64), (1, 5, 2, np.float16),
])
def test_range(start, limit, delta, dtype):
    inputs = [np.array(v, dtype) for v in (start, limit, delta)]
    (y,) = run_node("Range", inputs, opset=27 if dtype == np.float16 else 11)
    expected = np.arange(start, limit, delta).astype(dtype)
    if dtype != np.float16:
        expected = reference("Range", inputs, opset=11)[0]
    np.testing.assert_allclose(y.astype(np.float64), expected.astype(np.float64), rtol=1e-6)
    assert y.dtype == np.dtype(dtype) and y.shape == expected.shape


def test_range_bfloat16_zero_delta_symbolic():
    inputs = [np.array(v, ml_dtypes.bfloat16) for v in (1, 5, 2)]
    assert_same(run_node("Range", inputs, opset=27)[0], np.array([1, 3], ml_dtypes.bfloat16))
    with pytest.raises(dynashape.ShapeInferenceError, match="delta"):
        run_node("Range", [np.array(0), np.array(3), np.array(0)])
    shapes, op, _ = infer_symbolic("Range", [(), (), ()], [I64] * 3,
                                   [np.array(0), np.array(S, dtype=object), np.array(1)])
    assert shapes == [(S,)] and op.value_inputs == (0, 1, 2)
    shapes, _, _ = infer_symbolic("Range", [(), (), ()], [I64] * 3, [None, None, None])
    assert isinstance(shapes[0][0], Expr)
    (v,) = propagate("Range", [(), (), ()], [I64] * 3, [np.array(0), np.array(4), np.array(2)])
    assert_same(v, np.array([0, 2], I64))


# Expand ----------------------------------------------------------------------------------

@pytest.mark.parametrize("xshape,shape", [((3, 1), (2, 1, 6)), ((3, 1), (3, 4)), ((1, 4), (1,)),
                                          ((2, 1), (1, 1)), ((), (2, 2)), ((3,), (0, 3))])
def test_expand(xshape, shape):
    x = np.arange(int(np.prod(xshape)), dtype=np.float32).reshape(xshape)
    s = np.array(shape, I64)
    (y,) = run_node("Expand", [x, s])
    assert_same(y, reference("Expand", [x, s])[0])


def test_expand_errors_symbolic():
    with pytest.raises(dynashape.ShapeInferenceError) as info:
        run_node("Expand", [np.zeros((3, 2)), np.array([4, 3], I64)])
    assert info.value.kind == "BroadcastMismatch"
    shapes, op, _ = infer_symbolic("Expand", [(1, S), (3,)], [np.float32, I64], [None, obj(B, 1, 1)])
    assert shapes == [(B, 1, S)] and op.value_inputs == (1,)
    (v,) = propagate("Expand", [(1,), (1,)], [I64, I64], [obj(B), np.array([3], I64)])
    assert list(v) == [B, B, B]


def _graph_model(nodes, inputs, outputs, opset=14, initializers=()):
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [vi(n, t, d) for n, t, d in inputs], [vi(o, t, None) for o, t in outputs],
                              list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _f32(*shape):
    return np.random.default_rng(5).standard_normal(shape).astype(np.float32)


def test_expand_by_the_symbolic_shape_of_another_input():
    """Expand is bidirectional: x [P] by Shape(y [Q, R]) gives (Q, broadcast(P, R)); P = 0
    against R = 1 and P = 1 against R = 0 both give 0."""
    F = TensorProto.FLOAT
    model = _graph_model([helper.make_node("Shape", ["y"], ["s"]), helper.make_node("Expand", ["x", "s"], ["z"],
                                                                                     name="expand")],
                         [("x", F, ["P"]), ("y", F, ["Q", "R"])], [("z", F)])
    runs = [{"x": _f32(3), "y": _f32(2, 3)}, {"x": _f32(1), "y": _f32(2, 0)}, {"x": _f32(0), "y": _f32(2, 1)},
            {"x": _f32(1), "y": _f32(0, 5)}, {"x": _f32(4), "y": _f32(2, 1)}, {"x": _f32(2), "y": _f32(1, 1)}]
    sess = assert_runs_match_ort(model, runs)
    assert sess.get_inferred_outputs()[0].shape == ["Q", "broadcast(P, R)"]
    assert (sess.stats.symbolic_plans, sess.stats.resolved_plans) == (len(runs), 0)
    assert_broadcast_mismatch(sess, {"x": _f32(0), "y": _f32(2, 3)}, "expand")
    assert_broadcast_mismatch(sess, {"x": _f32(2), "y": _f32(2, 3)}, "expand")
    (z,) = sess.run(None, {"x": np.float32([1, 2]), "y": _f32(3, 2)})
    assert z.tolist() == [[1, 2]] * 3


def test_expand_by_a_runtime_shape_input():
    """The shape as a graph input (read by value): the input's dims may exceed the shape's."""
    model = _graph_model([helper.make_node("Expand", ["x", "shape"], ["z"], name="expand")],
                         [("x", TensorProto.FLOAT, ["P"]), ("shape", TensorProto.INT64, ["N"])],
                         [("z", TensorProto.FLOAT)])
    runs = [{"x": _f32(3), "shape": np.array([2, 3], I64)}, {"x": _f32(1), "shape": np.array([2, 0], I64)},
            {"x": _f32(0), "shape": np.array([2, 1], I64)}, {"x": _f32(4), "shape": np.array([1], I64)},
            {"x": _f32(0), "shape": np.array([1, 1, 1], I64)}]
    sess = assert_runs_match_ort(model, runs)
    assert [sess.run(None, r)[0].shape for r in runs] == [(2, 3), (2, 0), (2, 0), (4,), (1, 1, 0)]
    assert_broadcast_mismatch(sess, {"x": _f32(0), "shape": np.array([3], I64)}, "expand")


def test_reshape_to_the_shape_of_a_broadcast_zero_vs_one():
    """Reshape(x, Shape(Add(a [P, L], b [Q, M]))): P = 0 against Q = 1 makes the target
    [0, L], so x with 0 elements fits (a planner writing max(P, Q) = 1 reports a false
    ReshapeElementCountMismatch at plan time)."""
    F = TensorProto.FLOAT
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Shape", ["s"], ["target"]),
             helper.make_node("Reshape", ["x", "target"], ["r"], allowzero=1)]
    model = _graph_model(nodes, [("a", F, ["P", "L"]), ("b", F, ["Q", "M"]), ("x", F, ["N"])],
                         [("r", F), ("target", TensorProto.INT64)])
    runs = [{"a": _f32(2, 3), "b": _f32(1, 3), "x": _f32(6)}, {"a": _f32(0, 3), "b": _f32(1, 3), "x": _f32(0)},
            {"a": _f32(1, 1), "b": _f32(0, 5), "x": _f32(0)}, {"a": _f32(3, 1), "b": _f32(1, 0), "x": _f32(0)},
            {"a": _f32(1, 4), "b": _f32(2, 1), "x": _f32(8)}]
    sess = assert_runs_match_ort(model, runs)
    assert [sess.run(None, r)[1].tolist() for r in runs] == [[2, 3], [0, 3], [0, 5], [3, 0], [2, 4]]
    assert sess.stats.resolved_plans == 0


# Dropout ---------------------------------------------------------------------------------

def test_dropout_inference():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    y, mask = run_node("Dropout", [x, np.array(0.3, np.float32)], n_outputs=2, opset=13)
    assert_same(y, x)
    assert_same(mask, np.ones((3, 4), bool))
    y, mask = run_node("Dropout", [x], {"ratio": 0.4}, n_outputs=2, opset=7)
    assert_same(y, x)
    assert mask.dtype == np.float32  # mask has the input's type before opset 10
    (y,) = run_node("Dropout", [x.astype(np.float16)], opset=22)
    assert y.dtype == np.float16


def test_dropout_training_seeded():
    x = np.ones((4, 5), np.float32)
    y, mask = run_node("Dropout", [x, np.array(0.5, np.float32), np.array(True)], {"seed": 0},
                       n_outputs=2, opset=13)
    np.random.seed(0)
    expected_mask = np.random.uniform(0, 1.0, x.shape) >= 0.5
    assert_same(mask, expected_mask)
    assert_same(y, (expected_mask * x * 2).astype(np.float32))
    y, = run_node("Dropout", [x, np.array(0.0, np.float32), np.array(True)], opset=13)
    assert_same(y, x)


# Cast / CastLike ------------------------------------------------------------------------------

_VALUES = np.array([0.47892547, -0.48033667, 3.5, 1000000, 1e-7, -0.0, np.nan, np.inf, -np.inf, 2.5,
                    -7, 17], np.float32)
_ALL = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16,
        TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
        TensorProto.FLOAT8E5M2FNUZ, TensorProto.FLOAT4E2M1, TensorProto.INT4, TensorProto.UINT4,
        TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32,
        TensorProto.UINT32, TensorProto.INT64, TensorProto.UINT64, TensorProto.BOOL]
for _name in ("INT2", "UINT2", "FLOAT8E8M0"):
    if hasattr(TensorProto, _name):
        _ALL.append(getattr(TensorProto, _name))


def _finite_source(to_np):
    """Values that are well defined when cast to ``to_np`` (no NaN/inf into ints)."""
    dt = np.dtype(to_np)
    if dt.kind in "iub" or (dt.kind == "V" and "int" in dt.name):
        return np.array([0, 1, 2, 3, 1, 0], np.float32)
    if "e8m0" in dt.name:
        return np.array([0.25, 0.5, 1.0, 2.0, 8.0], np.float32)
    return _VALUES


@pytest.mark.parametrize("to", _ALL, ids=lambda t: TensorProto.DataType.Name(t))
def test_cast_from_float_matches_reference(to):
    x = _finite_source(helper.tensor_dtype_to_np_dtype(to))
    (y,) = run_node("Cast", [x], {"to": to})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (e,) = reference("Cast", [x], {"to": to})
    assert_same(y, e)


@pytest.mark.parametrize("src", _ALL, ids=lambda t: TensorProto.DataType.Name(t))
def test_cast_to_float_and_int64(src):
    np_src = helper.tensor_dtype_to_np_dtype(src)
    x = np.array([0, 1, 2, 1, 0], np.float32)
    x = (x + 1 if "e8m0" in np.dtype(np_src).name else x).astype(np_src)  # e8m0 has no zero
    for to in (TensorProto.FLOAT, TensorProto.INT64):
        (y,) = run_node("Cast", [x], {"to": to})
        assert_same(y, x.astype(np.float32).astype(helper.tensor_dtype_to_np_dtype(to)))


@pytest.mark.parametrize("to", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ,
                                TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ])
def test_cast_float8_saturate(to):
    np_to = helper.tensor_dtype_to_np_dtype(to)
    x = np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 0.3], np.float32)
    (sat,) = run_node("Cast", [x], {"to": to}, opset=19)
    fmax = float(ml_dtypes.finfo(np_to).max)
    assert list(sat.astype(np.float32)[:4]) == [fmax, -fmax, fmax, -fmax]
    (raw,) = run_node("Cast", [x], {"to": to, "saturate": 0}, opset=19)
    assert_same(raw, x.astype(np_to))
    (like,) = run_node("CastLike", [x, np.zeros(1, np_to)], {"saturate": 0}, opset=19)
    assert_same(like, raw)


def test_cast_int_wraps_and_bool():
    assert_same(run_node("Cast", [np.array([200, -1], np.int16)], {"to": TensorProto.INT8})[0],
                np.array([-56, -1], np.int8))
    assert_same(run_node("Cast", [np.array([0.0, -0.0, 0.5, np.nan], np.float32)], {"to": TensorProto.BOOL})[0],
                np.array([False, False, True, True]))
    assert_same(run_node("Cast", [np.array([True, False])], {"to": TensorProto.FLOAT16})[0],
                np.array([1, 0], np.float16))


def test_cast_strings():
    s = np.array(["3.14", "1e-5", "1E8", "INF", "+inf", "-INF", "NaN"], dtype=object)
    (y,) = run_node("Cast", [s], {"to": TensorProto.FLOAT})
    np.testing.assert_array_equal(y, np.array([3.14, 1e-5, 1e8, np.inf, np.inf, -np.inf, np.nan], np.float32))
    (y,) = run_node("Cast", [np.array(["100", "-7"], dtype=object)], {"to": TensorProto.INT32})
    assert_same(y, np.array([100, -7], np.int32))
    (y,) = run_node("Cast", [np.array(["100.5"], dtype=object)], {"to": TensorProto.INT64})
    assert_same(y, np.array([100], I64))
    (y,) = run_node("Cast", [np.array([1.5, 3.0, np.inf, -np.inf, np.nan], np.float32)], {"to": TensorProto.STRING})
    assert_same(y, np.array(["1.5", "3", "INF", "-INF", "NaN"], dtype=object))
    (y,) = run_node("Cast", [np.array([5, -3], I64)], {"to": TensorProto.STRING})
    assert_same(y, np.array(["5", "-3"], dtype=object))
    (y,) = run_node("Cast", [np.array(["a"], dtype=object)], {"to": TensorProto.STRING})
    assert_same(y, np.array(["a"], dtype=object))


def test_cast_empty_scalar_old_opset():
    assert run_node("Cast", [np.zeros((0, 3), np.float32)], {"to": TensorProto.INT8})[0].shape == (0, 3)
    assert_same(run_node("Cast", [np.float64(2.5)], {"to": TensorProto.FLOAT}, opset=6)[0], np.array(2.5, np.float32))
    assert_same(run_node("Cast", [np.array([1.0])], {"to": "INT32"}, opset=1)[0], np.array([1], np.int32))


def test_cast_e8m0_round_modes():
    x = np.array([0.124, 1.1, 3.0, 8.0], np.float32)
    for mode in ("up", "down", "nearest"):
        (y,) = run_node("Cast", [x], {"to": TensorProto.FLOAT8E8M0, "round_mode": mode}, opset=24)
        assert_same(y, numpy_helper.to_float8e8m0(x, True, mode))


def test_cast_propagate_keeps_symbols():
    (v,) = propagate("Cast", [(2,)], [I64], [obj(B, 3)], {"to": TensorProto.INT32})
    assert list(v) == [B, 3]
    (v,) = propagate("Cast", [(2,)], [I64], [np.array([1, 2], I64)], {"to": TensorProto.INT32})
    assert_same(v, np.array([1, 2], np.int32))
    # a dim cast to float32/float64 keeps its (whole) value; float16 cannot hold every dim
    (v,) = propagate("Cast", [(2,)], [I64], [obj(B, 3)], {"to": TensorProto.FLOAT})
    assert list(v) == [B, 3]
    (v,) = propagate("Cast", [(2,)], [I64], [obj(B, 3)], {"to": TensorProto.FLOAT16})
    assert v is None


def test_a_dim_cast_to_float_feeds_a_range_planned_per_signature():
    # Range(0.0, float(seq), 1.0): its length is seq; its values are made once per signature
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1), helper.make_node("Squeeze", ["s"], ["n1"]),
             helper.make_node("Cast", ["n1"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Range", ["zero", "nf", "step"], ["pos"]),
             helper.make_node("Add", ["x", "pos"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(1, np.float32), "step")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    sess = dynashape.InferenceSession(model)
    assert sess.symbolic.status == ["folded", "folded", "folded", "plan", "step"]
    for n, seq in ((2, 3), (1, 0), (3, 5)):
        xs = np.ones((n, seq), np.float32)
        (out,) = sess.run(None, {"x": xs})
        np.testing.assert_array_equal(out, xs + np.arange(seq, dtype=np.float32))
        np.testing.assert_array_equal(out, ort_run(model, {"x": xs})[0])


def test_castlike():
    x = np.array([1.7, -2.2], np.float32)
    (y,) = run_node("CastLike", [x, np.zeros(0, np.int32)], opset=15)
    assert_same(y, np.array([1, -2], np.int32))
    shapes, dtypes = infer_node("CastLike", [x, np.zeros(1, ml_dtypes.bfloat16)])
    assert shapes == [(2,)] and dtypes == [np.dtype(ml_dtypes.bfloat16)]


# registration ------------------------------------------------------------------------------

@pytest.mark.parametrize("op_type", ["Shape", "Size", "Reshape", "Squeeze", "Unsqueeze", "Flatten",
                                     "Identity", "Constant", "ConstantOfShape", "Range", "Expand",
                                     "Dropout", "Cast", "CastLike"])
def test_all_versions_registered(op_type):
    ours = sorted(op.since_version for op in get_registry().schemas("", op_type))
    assert ours == spec_versions(op_type)
