"""Tests of ops_builtin.elementwise against onnx's ReferenceEvaluator and hand-computed values."""
from __future__ import annotations

import math

import dynashape
import ml_dtypes
import numpy as np
import pytest
from dynashape.symbolic import dim_broadcast, dim_max, dim_min, sym
from dynashape.testing import infer_node, run_node

from tests.conftest import (assert_broadcast_mismatch, assert_runs_match_ort, one_node_model, ort_run,
                            spec_node_outputs, symbolic_context, symbolic_infer)

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(0)


# helpers -------------------------------------------------------------------------------

def check(op_type, inputs, attrs=None, opset=21, rtol=1e-6, atol=1e-7):
    (got,) = run_node(op_type, inputs, attrs, opset=opset)
    (want,) = spec_node_outputs(op_type, inputs, attrs, opset=opset)
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, want)
    return got


def propagate(op_type, values, opset=21):
    """propagate_value on host-known int64 input values (lists become object arrays)."""
    arrays = [np.asarray(v, dtype=object) if isinstance(v, list) else v for v in values]
    ctx, op = symbolic_context(op_type, [a.shape for a in arrays], [np.int64] * len(arrays), arrays, opset=opset)
    return op.propagate_value(ctx)[0]


def infer_symbolic(op_type, shapes, dtypes, attrs=None, opset=21):
    return symbolic_infer(op_type, shapes, dtypes, attrs=attrs, opset=opset)[0]


def f32(*shape, lo=-3.0, hi=3.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


# unary ---------------------------------------------------------------------------------

FLOAT_UNARY = ["Abs", "Neg", "Sign", "Ceil", "Floor", "Round", "Exp", "Tanh", "Erf", "Cos", "Sin",
               "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Reciprocal"]


@pytest.mark.parametrize("op", FLOAT_UNARY)
def test_unary_float_matches_reference(op):
    check(op, [f32(3, 4)])


@pytest.mark.parametrize("op,lo,hi", [("Sqrt", 0.0, 4.0), ("Log", 0.1, 4.0), ("Acos", -1, 1),
                                      ("Asin", -1, 1), ("Atanh", -0.9, 0.9), ("Acosh", 1, 5)])
def test_unary_domain_restricted(op, lo, hi):
    check(op, [f32(5, 2, lo=lo, hi=hi)])


@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_unary_int(op, dtype):
    check(op, [np.array([-5, 0, 3, 7], dtype=dtype)], opset=13)


def test_round_half_to_even_and_sign_nan():
    (y,) = run_node("Round", [np.float32([0.5, 1.5, 2.5, -0.5, -1.5, 2.4])])
    np.testing.assert_array_equal(y, np.float32([0, 2, 2, -0.0, -2, 2]))
    (s,) = run_node("Sign", [np.array([-2.0, 0.0, np.nan], np.float64)])
    assert s[0] == -1 and s[1] == 0 and np.isnan(s[2])


def test_erf_accuracy_float64_and_float32():
    x = np.concatenate([np.linspace(-7, 7, 2001), [0.0, -0.0, 1e-200, 0.46875, 4.0, np.inf, -np.inf]])
    want = np.array([math.erf(v) for v in x])
    (got,) = run_node("Erf", [x])
    np.testing.assert_allclose(got, want, rtol=2e-15, atol=1e-300)
    (got32,) = run_node("Erf", [x.astype(np.float32)])
    np.testing.assert_allclose(got32, want.astype(np.float32), rtol=1e-6, atol=1e-7)
    (n,) = run_node("Erf", [np.array([np.nan])])
    assert np.isnan(n[0])


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64])
@pytest.mark.parametrize("op", ["Exp", "Erf", "Sqrt", "Neg", "Floor", "Reciprocal"])
def test_unary_low_and_double_precision(op, dtype):
    x = np.float32([0.25, 1.5, 2.0, 3.75]).astype(dtype)
    (got,) = run_node(op, [x])
    (want,) = spec_node_outputs(op, [x.astype(np.float32)], opset=13)
    assert got.dtype == np.dtype(dtype)
    tol = 1e-2 if np.dtype(dtype) == BF16 else 1e-3
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol)


def test_isnan_isinf_flags():
    x = np.float32([1.0, np.inf, -np.inf, np.nan, 0.0])
    check("IsNaN", [x])
    for pos in (0, 1):
        for neg in (0, 1):
            check("IsInf", [x], {"detect_positive": pos, "detect_negative": neg})
    (y,) = run_node("IsNaN", [x.astype(ml_dtypes.float8_e4m3fn)])
    np.testing.assert_array_equal(y, [False, True, True, True, False])  # e4m3fn has no inf


def test_not_and_bitwise_not():
    check("Not", [np.array([[True, False]])])
    check("BitwiseNot", [np.array([0, 5, 255], np.uint8)], opset=18)
    check("BitwiseNot", [np.array([0, -5, 7], np.int32)], opset=18)


def test_unary_empty_and_scalar():
    (y,) = run_node("Exp", [np.zeros((0, 3), np.float32)])
    assert y.shape == (0, 3)
    (y,) = run_node("Neg", [np.float32(2.0)])
    assert y.shape == () and y == -2


def test_unary_dtype_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="expected a floating-point type"):
        run_node("Exp", [np.array([1, 2])])
    with pytest.raises(dynashape.ShapeInferenceError, match="expected bool"):
        run_node("Not", [np.float32([1])])


# binary arithmetic -------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 2)),
                                    ((0, 3), (1, 3)), ((5,), ())])
def test_arith_broadcast(op, shapes):
    a, b = f32(*shapes[0]), f32(*shapes[1], lo=0.5, hi=2.0)
    check(op, [a, b])


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint64])
def test_arith_ints(dtype):
    a = np.array([7, 100, 3, 0], dtype=dtype)
    b = np.array([2, 3, 5, 1], dtype=dtype)
    for op in ("Add", "Sub", "Mul", "Div"):
        check(op, [a, b])


def test_integer_div_truncates_toward_zero():
    a = np.array([-7, 7, -7, 7, -6, 5], np.int64)
    b = np.array([2, 2, -2, -2, 3, 0], np.int64)
    (y,) = run_node("Div", [a, b])
    np.testing.assert_array_equal(y, [-3, 3, 3, -3, -2, 0])  # x/0 gives 0, no exception
    (y32,) = run_node("Div", [a.astype(np.int32), np.int32(-4)])
    np.testing.assert_array_equal(y32, [1, -1, 1, -1, 1, -1])
    assert y32.dtype == np.int32


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64])
def test_arith_low_precision(dtype):
    a = np.float32([1.5, -2.25, 3.0]).astype(dtype)
    b = np.float32([0.5, 4.0, -1.0]).astype(dtype)
    for op, fn in (("Add", np.add), ("Mul", np.multiply), ("Div", np.divide), ("Sub", np.subtract)):
        (y,) = run_node(op, [a, b])
        assert y.dtype == np.dtype(dtype)
        np.testing.assert_allclose(y.astype(np.float32), fn(a.astype(np.float32), b.astype(np.float32)))


def test_legacy_broadcast_axis_opset6():
    a = f32(2, 3, 4, 5)
    b = f32(3, 4)
    (y,) = run_node("Add", [a, b], {"broadcast": 1, "axis": 1}, opset=6)
    np.testing.assert_allclose(y, a + b.reshape(1, 3, 4, 1))
    (y,) = run_node("Mul", [a, f32(5)], {"broadcast": 1}, opset=6)
    assert y.shape == a.shape
    (y,) = run_node("Sub", [a, f32(2)], {"broadcast": 1, "axis": 0}, opset=1)
    assert y.shape == a.shape
    (y,) = run_node("Equal", [np.array([1, 2]), np.array([1])], {"broadcast": 1}, opset=1)
    np.testing.assert_array_equal(y, [True, False])
    (y,) = run_node("And", [np.ones((2, 3), bool), np.array([True, False])], {"broadcast": 1, "axis": 0},
                    opset=1)
    np.testing.assert_array_equal(y, [[True] * 3, [False] * 3])


def test_legacy_broadcast_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="broadcast=1"):
        run_node("Add", [f32(2, 3), f32(3)], opset=6)
    with pytest.raises(dynashape.ShapeInferenceError, match="rank"):
        run_node("Add", [f32(3), f32(2, 3)], {"broadcast": 1}, opset=6)
    with pytest.raises(dynashape.ShapeInferenceError, match="expected 1 or A's dim"):
        run_node("Add", [f32(2, 3, 4), f32(2)], {"broadcast": 1, "axis": 1}, opset=6)
    with pytest.raises(dynashape.ShapeInferenceError, match="axis"):
        run_node("Add", [f32(2, 3, 4), f32(3, 4)], {"broadcast": 1, "axis": 2}, opset=6)


def test_binary_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="cannot be broadcast"):
        run_node("Add", [f32(2, 3), f32(4)])
    with pytest.raises(dynashape.ShapeInferenceError, match="share one element type"):
        run_node("Mul", [f32(2), np.array([1, 2])])
    with pytest.raises(dynashape.ShapeInferenceError, match="expected bool"):
        run_node("And", [np.array([1]), np.array([0])])


def test_symbolic_broadcast_shape():
    n, s = sym("N"), sym("S")
    assert infer_symbolic("Add", [(n, 1, 4), (s, 4)], [np.float32] * 2)[0] == (n, s, 4)
    assert infer_symbolic("Mul", [(n, 3), (n, 3)], [np.float32] * 2)[0] == (n, 3)
    # S against 3 is 3 only when S is 1 or 3 (S = 0 is a mismatch): kept as broadcast(S, 3)
    out = infer_symbolic("Max", [(n, 1), (1, s), (3,)], [np.float32] * 3)[0]
    assert out == (n, dim_broadcast(s, 3)) and str(out[1]) == "broadcast(S, 3)"
    out = infer_symbolic("Add", [(n, 3), (s, 1)], [np.float32] * 2)[0]
    assert out == (dim_broadcast(n, s), 3) and str(out[0]) == "broadcast(N, S)"
    out = infer_symbolic("Add", [(n, 3), (3,)], [np.float32] * 2, {"broadcast": 1}, opset=6)[0]
    assert out == (n, 3)


# symbolic broadcasting on one session: distinct dim_params bound to 1 vs N and 0 vs 1 ---------

#: (a, b) shapes for inputs declared a [P, L], b [Q, M]: 1 vs N and 0 vs 1 on either side and
#: on either axis (ONNX: 0 vs 1 is 0, not max = 1), equal dims, and a repeated shape
BROADCAST_RUNS = [((2, 3), (1, 3)), ((1, 3), (4, 1)), ((0, 3), (1, 3)), ((1, 1), (0, 5)),
                  ((3, 1), (1, 0)), ((1, 0), (2, 1)), ((0, 1), (1, 0)), ((2, 2), (2, 2)), ((0, 3), (1, 3))]


def _two_input_runs(dtype, shapes=BROADCAST_RUNS):
    rng = np.random.default_rng(3)
    return [{"in0": rng.integers(-2, 3, a).astype(dtype), "in1": rng.integers(-2, 3, b).astype(dtype)}
            for a, b in shapes]


@pytest.mark.parametrize("op,out_dtype", [("Add", None), ("Mul", None), ("Equal", np.bool_), ("Sub", None)])
@pytest.mark.parametrize("allocator", ["pool", "naive"])
def test_symbolic_broadcast_runs_match_ort(op, out_dtype, allocator):
    runs = _two_input_runs(np.float32)
    model, _ = one_node_model(op, list(runs[0].values()), {}, 13, out_dtype=out_dtype,
                              dims=[["P", "L"], ["Q", "M"]], node_name="bcast")
    sess = assert_runs_match_ort(model, runs, allocator=allocator)
    assert sess.get_inferred_outputs()[0].shape == ["broadcast(P, Q)", "broadcast(L, M)"]
    # every signature was planned by the generated function, none by per-node inference
    assert (sess.stats.symbolic_plans, sess.stats.resolved_plans) == (len(runs) - 1, 0)
    assert_broadcast_mismatch(sess, _two_input_runs(np.float32, [((2, 3), (3, 3))])[0], "bcast")
    assert_broadcast_mismatch(sess, _two_input_runs(np.float32, [((0, 3), (2, 3))])[0], "bcast")
    # the session is unharmed: a new signature and a cached one still run
    for shapes in ([((5, 0), (1, 1))], [((2, 3), (1, 3))]):
        (feeds,) = _two_input_runs(np.float32, shapes)
        (got,) = sess.run(None, feeds)
        (want,) = ort_run(model, feeds)
        np.testing.assert_array_equal(got, want, strict=True)   # shape and dtype too


def test_symbolic_broadcast_against_a_constant_dim_is_checked():
    """b [5] against a [P]: P = 0 is a mismatch (not 5), P = 1 and P = 5 give 5."""
    runs = [{"in0": np.float32([2.0]), "in1": np.arange(5, dtype=np.float32)},
            {"in0": np.arange(5, dtype=np.float32), "in1": np.arange(5, dtype=np.float32)}]
    model, _ = one_node_model("Add", list(runs[0].values()), {}, 13, dims=[["P"], None], node_name="add5")
    sess = assert_runs_match_ort(model, runs)
    assert sess.get_inferred_outputs()[0].shape == ["broadcast(P, 5)"]
    assert_broadcast_mismatch(sess, {"in0": np.zeros(0, np.float32), "in1": np.zeros(5, np.float32)}, "add5")
    assert_broadcast_mismatch(sess, {"in0": np.zeros(3, np.float32), "in1": np.zeros(5, np.float32)}, "add5")
    assert sess.run(None, runs[0])[0].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]


def test_symbolic_broadcast_against_a_zero_dim_is_checked():
    """b [0] against a [P]: P = 1 or 0 gives 0, any other P is a mismatch."""
    runs = [{"in0": np.float32([2.0]), "in1": np.zeros(0, np.float32)},
            {"in0": np.zeros(0, np.float32), "in1": np.zeros(0, np.float32)}]
    model, _ = one_node_model("Mul", list(runs[0].values()), {}, 13, dims=[["P"], None], node_name="mul0")
    sess = assert_runs_match_ort(model, runs)
    assert sess.get_inferred_outputs()[0].shape == ["broadcast(P, 0)"]
    assert_broadcast_mismatch(sess, {"in0": np.zeros(2, np.float32), "in1": np.zeros(0, np.float32)}, "mul0")


def test_variadic_sum_broadcasts_three_symbols():
    rng = np.random.default_rng(4)
    shapes = [((1, 3), (2, 1), (1, 1)), ((0, 1), (1, 4), (1, 1)), ((1, 1), (1, 1), (0, 2)), ((3, 2), (1, 2), (3, 1))]
    runs = [{f"in{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(ss)} for ss in shapes]
    model, _ = one_node_model("Sum", list(runs[0].values()), {}, 13, dims=[["A", "B"], ["C", "D"], ["E", "F"]],
                              node_name="sum3")
    sess = assert_runs_match_ort(model, runs)
    assert sess.get_inferred_outputs()[0].shape == ["broadcast(A, C, E)", "broadcast(B, D, F)"]
    assert sess.stats.resolved_plans == 0
    bad = {"in0": np.zeros((1, 2), np.float32), "in1": np.zeros((1, 1), np.float32),
           "in2": np.zeros((1, 0), np.float32)}
    assert_broadcast_mismatch(sess, bad, "sum3")


# Pow ---------------------------------------------------------------------------------------

def test_pow_float_and_mixed_types():
    x = f32(3, 4, lo=0.1, hi=3.0)
    check("Pow", [x, np.float32(2.0)])
    check("Pow", [x, np.float32(0.5)], rtol=1e-6)
    check("Pow", [x, f32(4)], rtol=1e-5)
    check("Pow", [x, np.float32(3.0)], rtol=1e-6)
    check("Pow", [x, np.float32(-1.0)], rtol=1e-6)
    check("Pow", [x, np.float32(1.0)])
    (y,) = run_node("Pow", [x, np.array([3], np.int64)])
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, x ** 3, rtol=1e-6)
    (y,) = run_node("Pow", [x, np.array(2, np.int32)])
    np.testing.assert_allclose(y, x * x)
    (y,) = run_node("Pow", [x.astype(np.float16), np.float32(3.0)])
    assert y.dtype == np.float16


def test_pow_integer_base():
    (y,) = run_node("Pow", [np.array([2, 3, -2], np.int64), np.array([10, 3, 3], np.int64)])
    np.testing.assert_array_equal(y, [1024, 27, -8])
    (y,) = run_node("Pow", [np.array([2, 4, 9], np.int32), np.array([-1, 0.5, 0.5], np.float32)])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, [0, 2, 3])


def test_pow_broadcast_scalar_exponent_to_higher_rank():
    x = f32(3)
    (y,) = run_node("Pow", [x, np.full((2, 1), 2.0, np.float32)])
    assert y.shape == (2, 3)
    np.testing.assert_allclose(y, np.broadcast_to(x * x, (2, 3)))


# Mod, BitShift, bitwise -------------------------------------------------------------------

def test_mod_integer_and_fmod():
    a = np.array([-4, 7, 5, 4, -7, 8], np.int32)
    b = np.array([3, -3, 8, -2, 3, 5], np.int32)
    (y,) = run_node("Mod", [a, b])
    np.testing.assert_array_equal(y, [2, -2, 5, 0, 2, 3])  # sign of divisor
    (y,) = run_node("Mod", [a, b], {"fmod": 1})
    np.testing.assert_array_equal(y, [-1, 1, 5, 0, -1, 3])  # sign of dividend
    x = np.float32([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0])
    check("Mod", [x, np.float32([2.1, -3.4, 8.0, -2.1, 3.4, 5.0])], {"fmod": 1})
    (y,) = run_node("Mod", [np.array([5, 5], np.uint8), np.array([0, 3], np.uint8)])
    assert y[1] == 2


def test_mod_float_requires_fmod_before_28():
    with pytest.raises(dynashape.ShapeInferenceError, match="fmod=1"):
        run_node("Mod", [f32(3), f32(3)], opset=13)
    (y,) = run_node("Mod", [np.float32([-5.0, 5.0]), np.float32([3.0, -3.0])], opset=28)
    np.testing.assert_allclose(y, [1.0, -1.0])


def test_bitshift():
    x = np.array([16, 4, 1], np.uint32)
    y = np.array([1, 2, 3], np.uint32)
    check("BitShift", [x, y], {"direction": "RIGHT"}, opset=11)
    check("BitShift", [x, y], {"direction": "LEFT"}, opset=11)
    (z,) = run_node("BitShift", [np.array([-8, -8, 8, 1], np.int8), np.array([1, 9, 9, -1], np.int8)],
                    {"direction": "RIGHT"}, opset=28)
    np.testing.assert_array_equal(z, [-4, -1, 0, 0])
    (z,) = run_node("BitShift", [np.array([1, 1, 64], np.int8), np.array([7, 8, 1], np.int8)],
                    {"direction": "LEFT"}, opset=28)
    np.testing.assert_array_equal(z, [-128, 0, -128])
    with pytest.raises(dynashape.ShapeInferenceError, match="'LEFT' or 'RIGHT'"):
        run_node("BitShift", [x, y], {"direction": "UP"}, opset=11)


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise_binary(op):
    check(op, [np.array([[12, -3], [7, 0]], np.int16), np.array([10, 6], np.int16)], opset=18)
    check(op, [np.array([255, 1], np.uint8), np.array([15, 3], np.uint8)], opset=18)


# comparison and logical -----------------------------------------------------------------

@pytest.mark.parametrize("op", ["Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint16])
def test_comparisons(op, dtype):
    a = np.array([[1, 2, 3], [4, 5, 6]], dtype=dtype)
    b = np.array([3, 2, 1], dtype=dtype)
    y = check(op, [a, b])
    assert y.dtype == np.bool_


def test_comparison_low_precision_and_strings():
    a = np.float32([1.0, 2.0, 3.0]).astype(BF16)
    (y,) = run_node("Greater", [a, np.float32([2.0]).astype(BF16)])
    np.testing.assert_array_equal(y, [False, False, True])
    s = np.array(["a", "bc", ""], dtype=object)
    (y,) = run_node("Equal", [s, np.array(["a", "b", ""], dtype=object)], opset=19)
    np.testing.assert_array_equal(y, [True, False, True])
    (y,) = run_node("Equal", [np.array([True, False]), np.array([True, True])], opset=11)
    np.testing.assert_array_equal(y, [True, False])


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical(op):
    a = np.array([[True, False], [True, True]])
    check(op, [a, np.array([False, True])])


# variadic ---------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic(op):
    check(op, [f32(2, 3)])
    check(op, [f32(2, 3), f32(3)])
    xs = [f32(2, 1, 3), f32(4, 1), f32(1), f32(2, 4, 3)]
    (y,) = run_node(op, xs)
    b = np.broadcast_arrays(*xs)
    want = {"Max": np.maximum.reduce(b), "Min": np.minimum.reduce(b), "Sum": sum(b), "Mean": sum(b) / 4}[op]
    assert y.shape == (2, 4, 3)
    np.testing.assert_allclose(y, want, rtol=1e-5)


def test_variadic_int_and_low_precision():
    (y,) = run_node("Max", [np.array([1, 5], np.int32), np.array([3, 2], np.int32), np.int32(4)])
    np.testing.assert_array_equal(y, [4, 5])
    (y,) = run_node("Mean", [np.float16([1, 2]), np.float16([2, 5])])
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, [1.5, 3.5])
    (y,) = run_node("Sum", [np.float32([1, 2]).astype(BF16)] * 3)
    assert y.dtype == BF16
    np.testing.assert_allclose(y.astype(np.float32), [3, 6])


def test_variadic_same_shape_before_opset8():
    with pytest.raises(dynashape.ShapeInferenceError, match="same shape"):
        run_node("Sum", [f32(2, 3), f32(3)], opset=6)
    with pytest.raises(dynashape.ShapeInferenceError, match="!="):
        run_node("Max", [f32(2, 3), f32(2, 4)], opset=6)
    (y,) = run_node("Min", [f32(2, 3), f32(2, 3)], opset=6)
    assert y.shape == (2, 3)


# Clip ---------------------------------------------------------------------------------------

def test_clip_attribute_form():
    x = f32(3, 4)
    check("Clip", [x], {"min": -1.0, "max": 0.5}, opset=6)
    check("Clip", [x], {"max": 0.5}, opset=6)
    (y,) = run_node("Clip", [x.astype(np.float16)], {"min": 0.0}, opset=6)
    assert y.dtype == np.float16 and (y >= 0).all()


def test_clip_input_form():
    x = f32(3, 4)
    check("Clip", [x, np.float32(-1), np.float32(1)], opset=13)
    check("Clip", [x, None, np.float32(0.2)], opset=13)
    check("Clip", [x, np.float32(-0.2)], opset=11)
    check("Clip", [x], opset=13)
    check("Clip", [np.array([-5, 3, 9], np.int64), np.int64(0), np.int64(4)], opset=13)
    (y,) = run_node("Clip", [x, np.float32(2.0), np.float32(1.0)], opset=13)  # min > max gives max
    np.testing.assert_array_equal(y, np.ones_like(x))
    (y,) = run_node("Clip", [np.float32(3.0), np.float32([0.0]), np.float32([1.0])], opset=13)
    assert y.shape == () and y == 1.0
    (y,) = run_node("Clip", [x.astype(BF16), np.float32(0).astype(BF16), None], opset=13)
    assert y.dtype == BF16 and (y.astype(np.float32) >= 0).all()


def test_clip_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="expected a scalar"):
        run_node("Clip", [f32(3), f32(2)], opset=13)
    with pytest.raises(dynashape.ShapeInferenceError, match="share one element type"):
        run_node("Clip", [f32(3), np.float64(0)], opset=13)


# symbolic value propagation --------------------------------------------------------------

def test_propagate_arith_symbolic():
    b = sym("batch")
    out = propagate("Add", [[b, 3], np.array([1, 2], np.int64)])
    assert out.dtype == object and list(out) == [b + 1, 5]
    assert list(propagate("Mul", [[b, 4], [2, 3]])) == [b * 2, 12]
    assert list(propagate("Sub", [[b * 2], [b]])) == [b]
    out = propagate("Sub", [[b], [b]])
    assert out.dtype == np.int64 and list(out) == [0]
    assert list(propagate("Div", [[b * 6, -7], [6, 2]])) == [b, -3]  # ints truncate
    assert list(propagate("Neg", [[b, 2]])) == [-b, -2]
    assert propagate("Add", [np.array([1], np.int64), np.array([2], np.int64)]) is None  # kernel folds


def test_propagate_max_min_equal():
    b, s = sym("b"), sym("s")
    assert list(propagate("Max", [[b, 1], [s, 4]])) == [dim_max(b, s), 4]
    assert list(propagate("Min", [[b], [2], [s]])) == [dim_min(b, 2, s)]
    eq = propagate("Equal", [[b, 3, b * 2], [b, 4, b * 2]])
    assert eq.dtype == np.bool_ and list(eq) == [True, False, True]
    assert propagate("Equal", [[b], [s]]) is None
    assert propagate("Equal", [[b], [1]]) is None


def test_infer_node_dtypes():
    shapes, dtypes = infer_node("Less", [f32(2), f32(2)])
    assert shapes == [(2,)] and dtypes == [np.dtype(np.bool_)]
    shapes, dtypes = infer_node("Pow", [np.array([1], np.int32), f32(1)])
    assert dtypes == [np.dtype(np.int32)]


def test_bool_and_integer_only_ops_list_no_low_precision_float_kernel():
    """And/Or/Xor/Not take bool, the bitwise ops integers: no float8/bfloat16 kernel of theirs
    is registered (``dynashape ops`` listed one), while Add keeps its low-precision one."""
    from dynashape.oplist import op_entries
    from dynashape.registry import get_registry

    entries = {e["op_type"]: e for e in op_entries(get_registry(), domain="", plugins=["dynashape.ops_builtin"])}
    for op in ("And", "Or", "Xor", "Not", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitShift"):
        assert all(k["dtypes"] is None for k in entries[op]["kernels"]), (op, entries[op]["kernels"])
    assert any(k["dtypes"] and "float8_e4m3fn" in k["dtypes"] for k in entries["Add"]["kernels"])
