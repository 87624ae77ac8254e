"""Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax against onnxruntime and the ONNX
reference evaluator (all version forms, dtypes, empty sets, symbolic inference, errors)."""
from __future__ import annotations

import dynashape
import ml_dtypes
import numpy as np
import onnxruntime
import pytest
from dynashape.registry import get_registry
from dynashape.symbolic import sym
from dynashape.testing import infer_node, run_node

from onnx import TensorProto, helper

from tests.conftest import assert_runs_match, one_node_model, symbolic_context, symbolic_infer
from onnx.reference import ReferenceEvaluator

RNG = np.random.default_rng(0)
BF16 = np.dtype(ml_dtypes.bfloat16)

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
AXES_INPUT_FROM = {op: (13 if op == "ReduceSum" else 18) for op in REDUCE_OPS}


_model = one_node_model


def ort_run(op, inputs, attrs, opset, n_outputs=1, out_dtype=None):
    model, feeds = _model(op, inputs, attrs, opset, n_outputs, out_dtype)
    model.ir_version = 8 if opset < 21 else 10
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    sess = onnxruntime.InferenceSession(model.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def ref_run(op, inputs, attrs, opset, n_outputs=1, out_dtype=None):
    model, feeds = _model(op, inputs, attrs, opset, n_outputs, out_dtype)
    return ReferenceEvaluator(model).run(None, feeds)


def _reduce_inputs(op, x, axes, opset, attrs):
    """(inputs, attrs) in the attribute or the input form of ``op`` at ``opset``."""
    attrs = dict(attrs)
    if opset >= AXES_INPUT_FROM[op]:
        return [x, None if axes is None else np.array(axes, dtype=np.int64)], attrs
    if axes is not None:
        attrs["axes"] = axes
    return [x], attrs


def _positive(op, shape, dtype=np.float32):
    x = RNG.standard_normal(shape).astype(np.float32)
    if op in ("ReduceLogSum",):
        x = np.abs(x) + 0.1
    if op == "ReduceProd":
        x = (0.5 + RNG.random(shape)).astype(np.float32)
    return x.astype(dtype)


# Reduce* against onnxruntime ------------------------------------------------------------

@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("axes,keepdims", [(None, 1), (None, 0), ([1], 1), ([1], 0),
                                           ([0, 2], 0), ([-1], 1), ([-3, -1], 0)])
def test_reduce_matches_ort(op, opset, axes, keepdims):
    x = _positive(op, (3, 4, 5))
    inputs, attrs = _reduce_inputs(op, x, axes, opset, {"keepdims": keepdims})
    (got,) = run_node(op, inputs, attrs, opset=opset)
    (want,) = ort_run(op, inputs, attrs, opset)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.int64])
def test_reduce_dtypes_match_reference(op, dtype):
    if op in ("ReduceLogSum", "ReduceLogSumExp") and np.dtype(dtype).kind == "i":
        pytest.skip("float-only op")
    if np.dtype(dtype).kind == "i":
        x = RNG.integers(-4 if op not in ("ReduceProd",) else 1, 5, (3, 4, 2)).astype(dtype)
    else:
        x = _positive(op, (3, 4, 2), dtype)
    inputs, attrs = _reduce_inputs(op, x, [1], 18, {"keepdims": 0})
    (got,) = run_node(op, inputs, attrs, opset=18)
    (want,) = ref_run(op, inputs, attrs, 18)
    assert got.dtype == np.dtype(dtype)
    tol = 2e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_bfloat16_computes_in_float32(op):
    x = _positive(op, (4, 6))
    (got,) = run_node(op, [x.astype(BF16), np.array([1], np.int64)], {}, opset=18)
    (want,) = run_node(op, [x.astype(BF16).astype(np.float32), np.array([1], np.int64)], {}, opset=18)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got, want.astype(BF16))


def test_reduce_sum_float32_accumulates_in_float32():
    x = np.full(1000, 0.1, np.float32)
    (got,) = run_node("ReduceSum", [x], {"keepdims": 0}, opset=13)
    assert got.dtype == np.float32
    assert got == np.add.reduce(x, dtype=np.float32)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_reduce_over_the_trailing_axes_of_many_rows(op, dtype):
    """Many short rows over the trailing axes (a GaussianNB's (N, classes, features) sums):
    floats sum as one BLAS product, within a few ulp of float64 sums; integers exactly."""
    x = (np.arange(1000 * 3 * 8) % 97 - 40).reshape(1000, 3, 8).astype(dtype)
    if dtype != np.int32:
        x = x / dtype(7)
    for axes in ([2], [1, 2], [1]):
        (got,) = run_node(op, [x, np.array(axes, np.int64)], {"keepdims": 1}, opset=18)
        want = x.astype(np.float64).sum(axis=tuple(axes), keepdims=True)
        if op == "ReduceMean":
            want = want / np.prod([x.shape[a] for a in axes])
        assert got.dtype == x.dtype and got.shape == want.shape
        if dtype == np.int32:
            np.testing.assert_array_equal(got, want.astype(np.int32))
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-14, atol=1e-5)


@pytest.mark.parametrize("op,dtype", [("ReduceMax", np.uint8), ("ReduceMin", np.int8),
                                      ("ReduceMax", np.bool_), ("ReduceMin", np.bool_)])
def test_reduce_max_min_small_types(op, dtype):
    x = RNG.integers(0, 2 if dtype == np.bool_ else 100, (3, 4)).astype(dtype)
    inputs, attrs = _reduce_inputs(op, x, [0], 20, {})
    (got,) = run_node(op, inputs, attrs, opset=20)
    (want,) = ref_run(op, inputs, attrs, 20)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)


# empty sets, noop, scalars ------------------------------------------------------------------

EMPTY_EXPECTED = {"ReduceSum": 0.0, "ReduceMean": np.nan, "ReduceMax": -np.inf,
                  "ReduceMin": np.inf, "ReduceProd": 1.0, "ReduceL1": 0.0, "ReduceL2": 0.0,
                  "ReduceLogSum": -np.inf, "ReduceLogSumExp": -np.inf, "ReduceSumSquare": 0.0}


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_empty_set(op):
    x = np.zeros((2, 0, 4), np.float32)
    (got,) = run_node(op, [x, np.array([1], np.int64)], {"keepdims": 1}, opset=18)
    assert got.shape == (2, 1, 4) and got.dtype == np.float32
    np.testing.assert_array_equal(got, np.full((2, 1, 4), EMPTY_EXPECTED[op], np.float32))


def test_reduce_empty_set_integer_extremes():
    x = np.zeros((0, 3), np.int32)
    (mx,) = run_node("ReduceMax", [x, np.array([0], np.int64)], {"keepdims": 0}, opset=18)
    (mn,) = run_node("ReduceMin", [x, np.array([0], np.int64)], {"keepdims": 0}, opset=18)
    assert (mx == np.iinfo(np.int32).min).all() and (mn == np.iinfo(np.int32).max).all()
    (b,) = run_node("ReduceMax", [np.zeros((0,), bool), None], {"keepdims": 0}, opset=20)
    assert b.dtype == np.bool_ and b.shape == () and not b


def test_reduce_empty_non_reduced_axis():
    x = np.zeros((2, 0, 4), np.float32)
    (got,) = run_node("ReduceSum", [x, np.array([2], np.int64)], {"keepdims": 1}, opset=13)
    assert got.shape == (2, 0, 1)


@pytest.mark.parametrize("op,fn", [("ReduceSum", lambda x: x), ("ReduceMax", lambda x: x),
                                   ("ReduceSumSquare", np.square), ("ReduceLogSum", np.log),
                                   ("ReduceL1", np.abs), ("ReduceL2", np.abs),
                                   ("ReduceLogSumExp", lambda x: x), ("ReduceMean", lambda x: x)])
@pytest.mark.parametrize("axes", [None, []])
def test_reduce_noop_with_empty_axes(op, fn, axes):
    x = _positive("ReduceLogSum", (2, 3))
    opset = AXES_INPUT_FROM[op]
    inputs, attrs = _reduce_inputs(op, x, axes, opset, {"noop_with_empty_axes": 1})
    (got,) = run_node(op, inputs, attrs, opset=opset)
    np.testing.assert_allclose(got, fn(x), rtol=1e-6)
    (want,) = ref_run(op, inputs, attrs, opset)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_reduce_empty_axes_without_noop_reduces_all():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    (got,) = run_node("ReduceSum", [x, np.zeros((0,), np.int64)], {"keepdims": 0}, opset=13)
    assert got.shape == ()
    np.testing.assert_allclose(got, x.sum(), rtol=1e-6)


SCALAR_EXPECTED = {"ReduceLogSum": np.log(2.5), "ReduceSumSquare": 6.25}


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_scalar_input(op, keepdims):
    x = np.array(2.5, np.float32)
    (got,) = run_node(op, [x, None], {"keepdims": keepdims}, opset=18)
    assert got.shape == () and got.dtype == np.float32
    np.testing.assert_allclose(got, SCALAR_EXPECTED.get(op, 2.5), rtol=1e-6)


def test_reduce_log_sum_exp_stable_for_large_values():
    x = np.array([[1000.0, 1000.0], [-1000.0, -np.inf]], np.float32)
    (got,) = run_node("ReduceLogSumExp", [x], {"axes": [1], "keepdims": 0}, opset=13)
    np.testing.assert_allclose(got, [1000.0 + np.log(2.0), -1000.0], rtol=1e-6)
    (all_inf,) = run_node("ReduceLogSumExp", [np.full((2,), -np.inf, np.float32)], {}, opset=13)
    assert all_inf == -np.inf


# inference: symbolic dims, unknown axes, errors ----------------------------------------------

def _ctx(op, shapes, dtypes, values, attrs, opset):
    return symbolic_context(op, shapes, dtypes, values, attrs, opset=opset)[0]


def _infer(op, shapes, dtypes, values, attrs, opset):
    shapes, opdef, _ = symbolic_infer(op, shapes, dtypes, values, attrs, opset=opset)
    return shapes, opdef


def test_reduce_infer_symbolic_dims():
    n = sym("N")
    (shape,), _ = _infer("ReduceMean", [(n, 5, n * 2)], [np.float32], [None],
                         {"axes": [-1], "keepdims": 0}, 13)
    assert shape == (n, 5)
    (shape,), _ = _infer("ReduceSum", [(n, 5, 7), (1,)], [np.float32, np.int64],
                         [None, np.array([1])], {}, 13)
    assert shape == (n, 1, 7)


def test_reduce_infer_unknown_axes():
    n = sym("N")
    (shape,), _ = _infer("ReduceSum", [(n, 5, 7), (2,)], [np.float32, np.int64], [None, None],
                         {"keepdims": 0}, 13)
    assert len(shape) == 1 and not isinstance(shape[0], int)
    (shape,), _ = _infer("ReduceMax", [(n, 5, 7), (2,)], [np.float32, np.int64], [None, None], {}, 18)
    assert len(shape) == 3
    (shape,), _ = _infer("ReduceMax", [(n, 5, 7), (sym("k"),)], [np.float32, np.int64],
                         [None, None], {"keepdims": 0}, 18)
    assert shape is None


def test_reduce_unknown_axes_at_prepare_reads_runtime_value():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    axes = np.array([-1, 0], np.int64)
    ctx = _ctx("ReduceSum", [x.shape, axes.shape], [x.dtype, axes.dtype], [None, None],
               {"keepdims": 0}, 13)
    kernel = get_registry().resolve_kernel("", "ReduceSum", 13, x.dtype)
    res = kernel.compute([x, axes], [None], kernel.prepare(ctx))
    np.testing.assert_allclose(res[0], x.sum(axis=(0, 2)), rtol=1e-5)


def test_reduce_propagates_symbolic_values():
    n, t = sym("N"), sym("T")
    shape_value = np.array([n, t, 64], dtype=object)
    _, opdef = _infer("ReduceProd", [(3,)], [np.int64], [shape_value], {"keepdims": 0}, 13)
    ctx = _ctx("ReduceProd", [(3,)], [np.int64], [shape_value], {"keepdims": 0}, 13)
    (value,) = opdef.propagate_value(ctx)
    assert value.shape == () and value[()] == n * t * 64
    ctx = _ctx("ReduceSum", [(3,), (1,)], [np.int64, np.int64],
               [np.array([2, 3, 4]), np.array([0])], {}, 13)
    (value,) = get_registry().resolve_op("", "ReduceSum", 13).propagate_value(ctx)
    assert value.dtype == np.int64 and value.tolist() == [9]
    ctx = _ctx("ReduceMax", [(2,)], [np.int64], [np.array([n, 1], dtype=object)],
               {"keepdims": 0}, 13)
    (value,) = get_registry().resolve_op("", "ReduceMax", 13).propagate_value(ctx)
    assert value[()] == dynashape.shapes.dim_max(n, 1)


@pytest.mark.parametrize("attrs,match", [({"axes": [3]}, "out of range"),
                                         ({"axes": [0, -3]}, "duplicates")])
def test_reduce_axis_errors(attrs, match):
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(dynashape.ShapeInferenceError, match=match):
        infer_node("ReduceSum", [x], attrs, opset=11)


def test_reduce_axes_input_errors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(dynashape.ShapeInferenceError, match="int64"):
        infer_node("ReduceMean", [x, np.array([0], np.int32)], opset=18)
    with pytest.raises(dynashape.ShapeInferenceError, match="1-D"):
        infer_node("ReduceMean", [x, np.array([[0]], np.int64)], opset=18)
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range"):
        infer_node("ReduceMean", [x, np.array([2], np.int64)], opset=18)


def test_reduce_registered_versions():
    reg = get_registry()
    for op in REDUCE_OPS:
        versions = sorted(d.since_version for d in reg.schemas("", op))
        assert versions[0] == 1 and AXES_INPUT_FROM[op] in versions, (op, versions)


# ArgMax / ArgMin ------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("attrs", [{}, {"axis": 1, "keepdims": 0}, {"axis": -1},
                                   {"axis": 2, "select_last_index": 1},
                                   {"axis": 0, "keepdims": 0, "select_last_index": 1}])
def test_arg_matches_ort(op, opset, attrs):
    if opset < 12 and "select_last_index" in attrs:
        pytest.skip("select_last_index is new in opset 12")
    x = RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    (got,) = run_node(op, [x], attrs, opset=opset)
    (want,) = ort_run(op, [x], attrs, opset, out_dtype=np.int64)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int64, np.float16, BF16, np.float64])
def test_arg_dtypes(dtype):
    x = RNG.integers(0, 50, (4, 6)).astype(np.float32).astype(dtype)
    (got,) = run_node("ArgMax", [x], {"axis": 1, "select_last_index": 1}, opset=13)
    xf = x.astype(np.float32)
    np.testing.assert_array_equal(got[:, 0], 5 - np.argmax(xf[:, ::-1], axis=1))


def test_arg_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range"):
        infer_node("ArgMax", [np.zeros((2, 3), np.float32)], {"axis": 2}, opset=13)
    with pytest.raises(dynashape.ShapeInferenceError, match="size 0"):
        infer_node("ArgMin", [np.zeros((2, 0), np.float32)], {"axis": 1}, opset=13)
    with pytest.raises(dynashape.ShapeInferenceError, match="rank >= 1"):
        infer_node("ArgMin", [np.float32(1.0)], {}, opset=13)
    shapes, dtypes = infer_node("ArgMax", [np.zeros((0, 3), np.float32)], {"axis": 1}, opset=13)
    assert shapes == [(0, 1)] and dtypes == [np.int64]


# Softmax / LogSoftmax / Hardmax -------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, 2])
def test_softmax_family_matches_ort(op, opset, axis):
    if opset == 1 and axis is not None and axis < 0:
        pytest.skip("negative axis is new in opset 11")
    x = (RNG.standard_normal((2, 3, 4)) * 5).astype(np.float32)
    x[0, 0, :2] = 7.0  # a tie for Hardmax
    attrs = {} if axis is None else {"axis": axis}
    (got,) = run_node(op, [x], attrs, opset=opset)
    (want,) = ort_run(op, [x], attrs, opset)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_numerically_stable(op):
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0]], np.float32)
    (got,) = run_node(op, [x], {}, opset=13)
    (want,) = ort_run(op, [x], {}, 13)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64])
def test_softmax_family_dtypes(op, dtype):
    x = RNG.standard_normal((3, 5)).astype(dtype)
    (got,) = run_node(op, [x], {}, opset=13)
    (want,) = run_node(op, [x.astype(np.float32)], {}, opset=13)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)


def test_softmax_empty_and_errors():
    (got,) = run_node("Softmax", [np.zeros((0, 4), np.float32)], {}, opset=13)
    assert got.shape == (0, 4)
    (got,) = run_node("Softmax", [np.zeros((3, 0), np.float32)], {"axis": 1}, opset=11)
    assert got.shape == (3, 0)
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range"):
        infer_node("Softmax", [np.zeros((2, 3), np.float32)], {"axis": 2}, opset=13)
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range"):
        infer_node("LogSoftmax", [np.zeros((2, 3), np.float32)], {"axis": -3}, opset=11)


def test_softmax_infer_symbolic():
    n = sym("N")
    (shape,), _ = _infer("Softmax", [(n, 12, n, n)], [np.float32], [None], {}, 13)
    assert shape == (n, 12, n, n)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_propagates_concrete_values(op):
    x = _positive(op, (2, 3))
    opset = AXES_INPUT_FROM[op]
    inputs, attrs = _reduce_inputs(op, x, [-1], opset, {"keepdims": 0})
    ctx = _ctx(op, [a.shape for a in inputs], [a.dtype for a in inputs], inputs, attrs, opset)
    (value,) = get_registry().resolve_op("", op, opset).propagate_value(ctx)
    (want,) = run_node(op, inputs, attrs, opset=opset)
    assert value.dtype == want.dtype
    if op == "ReduceLogSumExp":     # (a compiled kernel's exp is libm's, numpy's its own SIMD one)
        np.testing.assert_array_max_ulp(value, want, maxulp=2)
    else:
        np.testing.assert_array_equal(value, want)


def test_reduce_value_inputs_only_in_input_form():
    reg = get_registry()
    assert reg.resolve_op("", "ReduceMean", 13).value_inputs == ()
    assert reg.resolve_op("", "ReduceMean", 18).value_inputs == (1,)
    assert reg.resolve_op("", "ReduceSum", 13).value_inputs == (1,)


def test_an_axes_input_of_symbolic_length_is_checked_when_it_runs():
    """axes of a symbolic length K: the output binds at run time, where K = 3 axes for a
    rank-2 input are refused by name (the rule test_rule_guards lists as sound), and the
    session runs after it."""
    from onnx import TensorProto, helper

    node = helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=0, name="n")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                            helper.make_tensor_value_info("a", TensorProto.INT64, ["K"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    sess = dynashape.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(sess.run(None, {"x": x, "a": np.array([1], np.int64)})[0], [3, 12])
    for axes in ([0, 1, 0], [0, 1, 1]):
        with pytest.raises(dynashape.ShapeInferenceError) as info:
            sess.run(None, {"x": x, "a": np.array(axes, np.int64)})
        assert info.value.kind == "DuplicateAxes" and info.value.node == "n"
    np.testing.assert_array_equal(sess.run(None, {"x": x, "a": np.array([0, -1], np.int64)})[0], 15)


# short last axes folded column by column (reduction.extreme_keepdims) ----------------------

@pytest.mark.parametrize("op, attrs", [("ReduceMax", {}), ("ReduceMin", {}), ("ReduceLogSumExp", {}),
                                       ("Softmax", {"axis": -1})])
@pytest.mark.parametrize("cols", [2, 3, 16, 17])
def test_many_short_rows_reduce_as_onnxruntime_and_the_spec(op, attrs, cols):
    """[N, cols] over the last axis at row counts below and above SHORT_ROW_MIN_ROWS, with
    +-inf and -0.0 in rows: the column fold gives onnxruntime's values; a NaN propagates to its
    row as in onnx.reference (onnxruntime's max may skip it)."""
    axes = {} if op == "Softmax" else {"axes": [-1]}
    node = helper.make_node(op, ["x"], ["y"], **attrs, **axes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", cols])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rng = np.random.default_rng(cols)
    feeds = []
    for n in (1, 31, 32, 700):
        x = (rng.normal(size=(n, cols)) * 5).astype(np.float32)
        x[n - 1, :] = -np.inf if op != "Softmax" else 0
        x[0, 0] = np.inf if op in ("ReduceMax", "ReduceMin") else -0.0
        feeds.append({"x": x})
    assert_runs_match(model, feeds)
    sess = dynashape.InferenceSession(model)
    x = feeds[-1]["x"].copy()
    x[5, cols // 2] = np.nan
    (got,) = sess.run(None, {"x": x})
    spec = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got[:-1], spec[:-1], rtol=1e-5, atol=1e-6)   # (its -inf row: onnx.reference NaN)
    assert np.isnan(got[5]).all() and not np.isnan(got[6]).any()
    if op in ("ReduceMax", "ReduceMin") and cols == 3:        # by hand
        x = np.array([[1, 7, -2]] * 40, np.float32)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.full((40, 1), 7 if op == "ReduceMax" else -2))
