"""Tests of ops_builtin.activations against onnx's ReferenceEvaluator and hand-computed values."""
from __future__ import annotations

import math

import dynashape
import ml_dtypes
import numpy as np
import pytest
from dynashape.registry import get_registry
from dynashape.symbolic import sym
from dynashape.testing import run_node

from tests.conftest import (assert_broadcast_mismatch, assert_runs_match_ort, one_node_model, spec_node_outputs,
                            symbolic_context)

#: onnxruntime < 1.24 does not load opset-24 models (Swish): compared with the ONNX spec there;
#: https://github.com/microsoft/onnxruntime/pull/25678
ORT_OPSET_24 = (1, 24)

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(1)


def check(op_type, inputs, attrs=None, opset=22, rtol=1e-5, atol=1e-6):
    (got,) = run_node(op_type, inputs, attrs, opset=opset)
    want = np.asarray(spec_node_outputs(op_type, inputs, attrs, opset=opset)[0])
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return got


def f32(*shape, lo=-4.0, hi=4.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


CASES = [
    ("Relu", {}, 14), ("Sigmoid", {}, 13), ("HardSigmoid", {}, 22),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 6), ("HardSwish", {}, 22), ("LeakyRelu", {}, 16),
    ("LeakyRelu", {"alpha": 0.2}, 6), ("LeakyRelu", {"alpha": -1.5}, 16), ("Elu", {}, 22),
    ("Elu", {"alpha": 0.5}, 6), ("Selu", {}, 22), ("Selu", {"alpha": 2.0, "gamma": 3.0}, 6),
    ("Celu", {}, 12), ("Celu", {"alpha": 2.0}, 12), ("Softplus", {}, 22), ("Softsign", {}, 22),
    ("Mish", {}, 22), ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20),
    ("ThresholdedRelu", {}, 22), ("ThresholdedRelu", {"alpha": 0.5}, 10),
]


@pytest.mark.parametrize("op,attrs,opset", CASES, ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_activation_matches_reference(op, attrs, opset):
    check(op, [f32(3, 5)], attrs, opset)


@pytest.mark.parametrize("op,attrs,opset", CASES, ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_activation_float64_and_empty(op, attrs, opset):
    check(op, [f32(2, 3).astype(np.float64)], attrs, opset, rtol=1e-6)
    (y,) = run_node(op, [np.zeros((0, 4), np.float32)], attrs, opset=opset)
    assert y.shape == (0, 4)


@pytest.mark.parametrize("dtype", [np.float16, BF16])
@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Gelu", "Mish", "Elu", "HardSwish", "Softplus",
                                "LeakyRelu"])
def test_activation_low_precision(op, dtype):
    x = f32(4, 3)
    xl = x.astype(dtype)
    (got,) = run_node(op, [xl], opset=22)
    assert got.dtype == np.dtype(dtype)
    (want,) = spec_node_outputs(op, [xl.astype(np.float32)], opset=22)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=1e-2)


def test_relu_ints_and_nan():
    check("Relu", [np.array([-3, 0, 5], np.int8)], opset=14)
    check("Relu", [np.array([-3, 0, 5], np.int64)], opset=14)
    (y,) = run_node("Relu", [np.float32([np.nan, -1.0, np.inf])])
    assert np.isnan(y[0]) and y[1] == 0 and y[2] == np.inf


def test_sigmoid_softplus_extremes():
    x = np.float32([-200.0, -20.0, 0.0, 20.0, 200.0])
    (s,) = run_node("Sigmoid", [x])
    np.testing.assert_allclose(s, [0.0, 2.0611537e-09, 0.5, 1.0, 1.0], rtol=1e-6)
    (sp,) = run_node("Softplus", [x])
    np.testing.assert_allclose(sp, [0.0, 2.0611537e-09, math.log(2.0), 20.0, 200.0], rtol=1e-6)
    (m,) = run_node("Mish", [x])
    assert np.isfinite(m).all() and m[-1] == 200.0


def test_gelu_values():
    x = np.float32([-3.0, -1.0, 0.0, 0.5, 2.0])
    want = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    (y,) = run_node("Gelu", [x], opset=20)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=5e-7)  # float32 1 + erf cancels for x << 0
    (y64,) = run_node("Gelu", [x.astype(np.float64)], opset=20)
    np.testing.assert_allclose(y64, want, rtol=1e-14)
    with pytest.raises(dynashape.ShapeInferenceError, match="'none' or 'tanh'"):
        run_node("Gelu", [x], {"approximate": "fast"}, opset=20)


def test_prelu_broadcast():
    x = f32(2, 3, 4, 5)
    check("PRelu", [x, f32(3, 1, 1, lo=0, hi=1)], opset=16)
    check("PRelu", [x, f32(5, lo=0, hi=1)], opset=9)
    check("PRelu", [x, np.float32(0.25)], opset=7)
    check("PRelu", [np.array([-4, 3], np.int32), np.array([2], np.int32)], opset=16)
    (y,) = run_node("PRelu", [x.astype(BF16), np.float32([0.5]).astype(BF16)], opset=16)
    assert y.dtype == BF16 and y.shape == x.shape


def test_prelu_legacy_channel_slope():
    x = f32(2, 3, 4, 5)
    slope = np.float32([0.1, 0.2, 0.3])
    (y,) = run_node("PRelu", [x, slope], opset=6)
    np.testing.assert_allclose(y, np.where(x < 0, x * slope.reshape(3, 1, 1), x), rtol=1e-6)


def test_prelu_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="unidirectionally broadcastable"):
        run_node("PRelu", [f32(2, 3), f32(3, 1)], opset=16)
    with pytest.raises(dynashape.ShapeInferenceError, match="rank"):
        run_node("PRelu", [f32(3), f32(2, 3)], opset=16)


def test_prelu_symbolic_slope_is_judged_per_plan():
    """X [A, B], slope [S]: S must be 1 or B (unidirectional); Y is X's shape whatever S is,
    so each plan checks S on the concrete shapes (BroadcastMismatch, not a kernel error)."""
    shapes = [((2, 3), (3,)), ((2, 3), (1,)), ((2, 0), (1,)), ((2, 0), (0,)), ((0, 4), (4,)), ((3, 1), (1,))]
    runs = [{"in0": RNG.uniform(-3, 3, x).astype(np.float32), "in1": RNG.uniform(0, 1, sl).astype(np.float32)}
            for x, sl in shapes]
    model, _ = one_node_model("PRelu", list(runs[0].values()), {}, 16, dims=[["A", "B"], ["S"]], node_name="prelu")
    sess = assert_runs_match_ort(model, runs)
    assert sess.get_inferred_outputs()[0].shape == ["A", "B"]
    assert (sess.stats.symbolic_plans, sess.stats.resolved_plans) == (len(runs), 0)
    for x, sl in (((2, 1), (3,)), ((2, 3), (0,)), ((2, 1), (0,)), ((2, 0), (2,))):
        feeds = {"in0": np.zeros(x, np.float32), "in1": np.zeros(sl, np.float32)}
        assert_broadcast_mismatch(sess, feeds, "prelu")
    (y,) = sess.run(None, {"in0": np.float32([[-2.0, 4.0]]), "in1": np.float32([0.5, 0.25])})
    assert y.tolist() == [[-1.0, 4.0]]


def test_dtype_errors_and_symbolic_shape():
    with pytest.raises(dynashape.ShapeInferenceError, match="floating-point"):
        run_node("Sigmoid", [np.array([1, 2], np.int32)])
    n = sym("N")
    ctx, op = symbolic_context("Gelu", [(n, 768)], opset=20)
    assert op.infer_shape(ctx) == [(n, 768)]
    assert op.infer_dtype(ctx) == [np.dtype(np.float32)]


# Swish, Shrink --------------------------------------------------------------------------

def test_swish_shrink_registered_versions():
    reg = get_registry()
    assert [d.since_version for d in reg.schemas("", "Swish")] == [24]
    assert [d.since_version for d in reg.schemas("", "Shrink")] == [9]


@pytest.mark.parametrize("allocator", ["pool", "naive"])
@pytest.mark.parametrize("op,attrs,opset", [("Swish", {}, 24), ("Swish", {"alpha": -1.7}, 24),
                                            ("Shrink", {}, 9), ("Shrink", {"lambd": 1.0, "bias": 0.25}, 9)])
def test_swish_shrink_symbolic_match_ort(op, attrs, opset, allocator):
    runs = [{"in0": f32(*s)} for s in [(2, 5), (1, 1), (4, 0), (3, 7)]]
    model, _ = one_node_model(op, [runs[0]["in0"]], attrs, opset, dims=[["N", "M"]])
    sess = assert_runs_match_ort(model, runs, allocator, ort_fixed_in=ORT_OPSET_24 if opset >= 24 else None)
    assert sess.get_inferred_outputs()[0].shape == ["N", "M"]


def test_swish_values_and_dtypes():
    x = np.float32([-200.0, -1.0, 0.0, 2.0, 200.0])
    (y,) = run_node("Swish", [x], {"alpha": 0.5}, opset=24)
    np.testing.assert_allclose(y, x / (1 + np.exp(-0.5 * x.astype(np.float64))), rtol=1e-6, atol=1e-30)
    check("Swish", [f32(3, 4).astype(np.float64)], {"alpha": 2.0}, opset=24, rtol=1e-12)
    for dt in (np.float16, BF16):
        (y,) = run_node("Swish", [x.astype(dt)], opset=24)
        assert y.dtype == np.dtype(dt)
        np.testing.assert_allclose(y.astype(np.float32)[1:4], [-0.268941, 0.0, 1.761594], rtol=1e-2)
    with pytest.raises(dynashape.ShapeInferenceError, match="floating-point"):
        run_node("Swish", [np.int32([1])], opset=24)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.float16, np.float64])
def test_shrink_dtypes_match_ort(dtype):
    x = (np.arange(-6, 6) if np.dtype(dtype).kind != "u" else np.arange(0, 12)).astype(dtype)
    model, feeds = one_node_model("Shrink", [x], {"lambd": 1.5, "bias": 1.5}, 9)
    sess = assert_runs_match_ort(model, [feeds])
    assert sess.run(None, feeds)[0].dtype == np.dtype(dtype)
    (y,) = run_node("Shrink", [np.int32([-5, -1, 0, 1, 5])], {"lambd": 1.5, "bias": 1.5}, opset=9)
    assert y.tolist() == [-3, 0, 0, 0, 3]           # -5 + 1.5 = -3.5 truncates to -3, as onnxruntime
    with pytest.raises(dynashape.ShapeInferenceError, match="numeric"):
        run_node("Shrink", [np.array([True])], opset=9)
