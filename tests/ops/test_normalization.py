"""Tests of ops_builtin/normalization.py: RMSNormalization, LpNormalization,
MeanVarianceNormalization and LRN.

Values against onnxruntime (sessions with symbolic dims through changing shapes, both
allocators), onnx's ReferenceEvaluator and hand-computed values; errors by exception type,
kind and message.
"""
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
                            spec_versions, symbolic_infer)

RNG = np.random.default_rng(3)
F32 = np.dtype(np.float32)
#: onnxruntime < 1.24 rejects an RMSNormalization scale that broadcasts to X.shape[axis:]
#: (https://github.com/microsoft/onnxruntime/pull/26613) and < 1.25 has no LpNormalization-22
#: kernel (https://github.com/microsoft/onnxruntime/issues/27160): compared with the ONNX spec there
ORT_RMS_SCALE_BROADCAST = (1, 24)
ORT_LP_NORMALIZATION_22 = (1, 25)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("op", ["RMSNormalization", "LpNormalization", "MeanVarianceNormalization", "LRN"])
def test_every_spec_version_registered(op):
    assert sorted(o.since_version for o in get_registry().schemas("", op)) == spec_versions(op)


# RMSNormalization ------------------------------------------------------------------------------

@pytest.mark.parametrize("allocator", ["pool", "naive"])
@pytest.mark.parametrize("axis,scale_shape", [(-1, ("H",)), (1, (1, "H")), (-2, ("S", "H")), (0, ("H",))])
def test_rms_matches_ort_through_symbolic_shapes(axis, scale_shape, allocator):
    feeds = []
    for b, s, h in [(2, 3, 8), (1, 5, 8), (4, 1, 8), (3, 2, 8)]:
        sc = tuple({"H": h, "S": s}.get(d, d) for d in scale_shape)
        feeds.append({"in0": f32(b, s, h) * 3, "in1": f32(*sc)})
    model, _ = one_node_model("RMSNormalization", list(feeds[0].values()), {"axis": axis, "epsilon": 1e-3}, 23,
                              dims=[["B", "S", 8], list(scale_shape)], node_name="rms")
    sess = assert_runs_match_ort(model, feeds, allocator, ort_fixed_in=ORT_RMS_SCALE_BROADCAST)
    assert sess.get_inferred_outputs()[0].shape == ["B", "S", 8]
    assert sess.stats.resolved_plans == 0


def test_rms_float64_float16_and_stash_type():
    x, w = f32(3, 4, 5), f32(5)
    got = run_node("RMSNormalization", [x.astype(np.float64), w.astype(np.float64)], {}, opset=23)[0]
    (want,) = spec_node_outputs("RMSNormalization", [x.astype(np.float64), w.astype(np.float64)], {}, opset=23)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12)
    for dt in (np.float16, ml_dtypes.bfloat16):
        (y,) = run_node("RMSNormalization", [x.astype(dt), w.astype(dt)], {"axis": 1}, opset=23)
        (want,) = spec_node_outputs("RMSNormalization",
                                    [x.astype(dt).astype(np.float32), w.astype(dt).astype(np.float32)], {"axis": 1},
                                    opset=23)
        assert y.dtype == np.dtype(dt)
        np.testing.assert_allclose(y.astype(np.float32), want, rtol=2e-2, atol=2e-2)
    (y,) = run_node("RMSNormalization", [x, w], {"stash_type": 11}, opset=23)   # double stash: same values
    np.testing.assert_allclose(y, spec_node_outputs("RMSNormalization", [x, w], {}, opset=23)[0], rtol=1e-5)
    assert y.dtype == F32


def test_rms_output_has_scale_type():
    _, opdef, ctx = symbolic_infer("RMSNormalization", [(2, 3), (3,)], opset=23)
    ctx.input_dtypes = [np.dtype(np.float16), F32]
    assert opdef.infer_dtype(ctx) == [F32]


def test_rms_symbolic_and_errors():
    b, s = sym("B"), sym("S")
    shapes, _, _ = symbolic_infer("RMSNormalization", [(b, s, 64), (64,)], opset=23)
    assert shapes == [(b, s, 64)]
    with pytest.raises(dynashape.ShapeInferenceError, match="cannot be broadcast") as info:
        run_node("RMSNormalization", [f32(2, 3, 4), f32(3)], {}, opset=23)
    assert info.value.kind == "BroadcastMismatch"
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range") as info:
        run_node("RMSNormalization", [f32(2, 3), f32(3)], {"axis": 2}, opset=23)
    assert info.value.kind == "AxisOutOfRange"
    with pytest.raises(dynashape.ShapeInferenceError, match="stash_type 7") as info:
        run_node("RMSNormalization", [f32(2, 3), f32(3)], {"stash_type": 7}, opset=23)
    assert info.value.kind == "InvalidAttribute"
    with pytest.raises(dynashape.ShapeInferenceError, match="floating-point"):
        run_node("RMSNormalization", [np.ones((2, 3), np.int32), f32(3)], {}, opset=23)
    x = f32(2, 3)
    model, _ = one_node_model("RMSNormalization", [x, f32(3)], {}, 23, dims=[["B", "H"], ["W"]], node_name="rms")
    sess = dynashape.InferenceSession(model)
    sess.run(None, {"in0": x, "in1": f32(1)})
    assert_broadcast_mismatch(sess, {"in0": x, "in1": f32(2)}, "rms")


# LpNormalization -------------------------------------------------------------------------------

@pytest.mark.parametrize("allocator", ["pool", "naive"])
@pytest.mark.parametrize("p,axis,opset", [(2, -1, 22), (1, -1, 22), (2, 0, 1), (1, 1, 1)])
def test_lp_matches_ort_through_symbolic_shapes(p, axis, opset, allocator):
    feeds = []
    for n, m in [(3, 4), (1, 6), (5, 1), (2, 2)]:
        x = f32(n, m)
        x[0] = 0.0          # a zero row: a zero norm gives 0, not NaN
        feeds.append({"in0": x})
    model, _ = one_node_model("LpNormalization", [feeds[0]["in0"]], {"p": p, "axis": axis}, opset, dims=[["N", "M"]])
    sess = assert_runs_match_ort(model, feeds, allocator, ort_fixed_in=ORT_LP_NORMALIZATION_22 if opset >= 22 else None,
                                 spec=lambda m, f: [lp_normalization(f["in0"], p, axis)])
    assert sess.get_inferred_outputs()[0].shape == ["N", "M"]


def lp_normalization(x, p, axis):
    """x / ||x||_p along ``axis``, 0 where the norm is 0 (onnx.reference leaves out the abs in
    sum(|x|**p), wrong for p = 1)."""
    norm = (np.abs(x.astype(np.float64)) ** p).sum(axis, keepdims=True) ** (1 / p)
    return np.divide(x, norm, out=np.zeros_like(x, np.float64), where=norm != 0).astype(x.dtype)


def test_lp_hand_computed_and_errors():
    x = np.float32([[3.0, -4.0], [0.0, 0.0]])
    (y,) = run_node("LpNormalization", [x], {}, opset=22)
    assert y.tolist() == [[0.6000000238418579, -0.800000011920929], [0.0, 0.0]]
    (y1,) = run_node("LpNormalization", [x], {"p": 1}, opset=22)   # |x| sums (the spec's L1 norm)
    np.testing.assert_allclose(y1, [[3 / 7, -4 / 7], [0, 0]], rtol=1e-6)
    (h,) = run_node("LpNormalization", [x.astype(np.float16)], {"axis": 0}, opset=22)
    assert h.dtype == np.float16 and h.tolist() == [[1.0, -1.0], [0.0, 0.0]]
    with pytest.raises(dynashape.ShapeInferenceError, match="p is 3, expected 1 or 2") as info:
        run_node("LpNormalization", [x], {"p": 3}, opset=22)
    assert info.value.kind == "InvalidAttribute"
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range"):
        run_node("LpNormalization", [x], {"axis": 2}, opset=22)


# MeanVarianceNormalization ---------------------------------------------------------------------

@pytest.mark.parametrize("allocator", ["pool", "naive"])
@pytest.mark.parametrize("axes,opset", [(None, 13), ([1], 9), ([0, 2, 3], 13), ([-1, -2], 13)])
def test_mvn_matches_ort_through_symbolic_shapes(axes, opset, allocator):
    feeds = [{"in0": f32(*s) * 5 + 2} for s in [(2, 3, 4, 5), (1, 3, 2, 2), (4, 3, 1, 6)]]
    attrs = {} if axes is None else {"axes": axes}
    model, _ = one_node_model("MeanVarianceNormalization", [feeds[0]["in0"]], attrs, opset,
                              dims=[["N", 3, "H", "W"]])
    sess = assert_runs_match_ort(model, feeds, allocator)
    assert sess.get_inferred_outputs()[0].shape == ["N", 3, "H", "W"]


def test_mvn_constant_input_float64_and_errors():
    (y,) = run_node("MeanVarianceNormalization", [np.full((2, 3, 2, 2), 7.0)], {}, opset=13)
    assert y.dtype == np.float64 and not y.any()   # (x - mean) / (0 + 1e-9)
    x = f32(2, 3, 4)
    (y,) = run_node("MeanVarianceNormalization", [x], {"axes": [2]}, opset=13)
    want = (x - x.mean(2, keepdims=True)) / (x.std(2, keepdims=True) + 1e-9)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range") as info:
        run_node("MeanVarianceNormalization", [x], {}, opset=13)   # default axes [0, 2, 3] need rank 4
    assert info.value.kind == "AxisOutOfRange"
    with pytest.raises(dynashape.ShapeInferenceError, match="duplicates"):
        run_node("MeanVarianceNormalization", [x], {"axes": [1, -2]}, opset=13)


# LRN --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("allocator", ["pool", "naive"])
@pytest.mark.parametrize("attrs", [{"size": 3}, {"size": 5, "alpha": 0.01, "beta": 0.5, "bias": 2.0}, {"size": 1},
                                   {"size": 9}])
def test_lrn_matches_ort_through_symbolic_shapes(attrs, allocator):
    feeds = [{"in0": f32(*s) * 3} for s in [(2, 5, 3, 4), (1, 5, 1, 1), (3, 5, 2, 6)]]
    model, _ = one_node_model("LRN", [feeds[0]["in0"]], attrs, 13, dims=[["N", 5, "H", "W"]])
    sess = assert_runs_match_ort(model, feeds, allocator)
    assert sess.get_inferred_outputs()[0].shape == ["N", 5, "H", "W"]


def _lrn_by_hand(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    c = x.shape[1]
    lo, hi = math.floor((size - 1) / 2), math.ceil((size - 1) / 2)
    sq = np.zeros_like(x, dtype=np.float64)
    for ch in range(c):
        sq[:, ch] = (x[:, max(0, ch - lo):min(c - 1, ch + hi) + 1].astype(np.float64) ** 2).sum(axis=1)
    return x / (bias + alpha / size * sq) ** beta


def test_lrn_other_ranks_and_dtypes():
    for shape, size in [((2, 6), 3), ((2, 6, 3), 4), ((1, 4, 2, 2, 2), 3), ((2, 7, 2, 3), 6)]:
        x = f32(*shape) * 10     # even sizes (onnxruntime refuses them) reach one more channel above
        (y,) = run_node("LRN", [x], {"size": size, "alpha": 0.5}, opset=13)
        np.testing.assert_allclose(y, _lrn_by_hand(x, size, alpha=0.5), rtol=1e-5)
    x = f32(2, 3, 2, 2)
    (y,) = run_node("LRN", [x.astype(np.float16)], {"size": 2}, opset=1)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), _lrn_by_hand(x.astype(np.float16).astype(np.float32), 2),
                               rtol=2e-3, atol=2e-3)


def test_lrn_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match="'size' is required") as info:
        run_node("LRN", [f32(1, 2, 3, 3)], {}, opset=13)
    assert info.value.kind == "MissingAttribute"
    with pytest.raises(dynashape.ShapeInferenceError, match="size 0 must be >= 1"):
        run_node("LRN", [f32(1, 2, 3, 3)], {"size": 0}, opset=13)
    with pytest.raises(dynashape.ShapeInferenceError, match="rank >= 2") as info:
        run_node("LRN", [f32(3)], {"size": 3}, opset=13)
    assert info.value.kind == "InvalidRank"
