"""Tests of ops_builtin/loss.py: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Values against onnxruntime (sessions with symbolic N / d dims through changing shapes, both
allocators) and onnx's ReferenceEvaluator; symbolic shape rules through the registered
OpDefs; error cases by exception type, kind and message.
"""
from __future__ import annotations

import dynashape
import ml_dtypes
import numpy as np
import pytest
from dynashape.registry import get_registry
from dynashape.symbolic import sym
from dynashape.testing import run_node

from tests.conftest import assert_runs_match_ort, one_node_model, spec_node_outputs, spec_versions, symbolic_context

RNG = np.random.default_rng(7)
F32 = np.dtype(np.float32)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def labels(n_classes, *shape, dtype=np.int64):
    return RNG.integers(0, n_classes, shape).astype(dtype)


def sym_infer(op, shapes, attrs=None, opset=13, n_outputs=1):
    """(shapes, dtypes, ctx) of the registered OpDef on float32 scores, int64 target, float32 weight."""
    ctx, opdef = symbolic_context(op, shapes, [F32, np.int64, F32][:len(shapes)], None, attrs, opset=opset,
                                  n_outputs=n_outputs)
    return list(opdef.infer_shape(ctx)), list(opdef.infer_dtype(ctx)), ctx


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_every_spec_version_registered(op):
    assert sorted(o.since_version for o in get_registry().schemas("", op)) == spec_versions(op)


# onnxruntime through changing symbolic shapes ----------------------------------------------

NLL_CASES = [({}, False), ({"reduction": "none"}, False), ({"reduction": "sum"}, True),
             ({"reduction": "mean"}, True), ({"reduction": "mean", "ignore_index": 1}, False),
             ({"reduction": "none", "ignore_index": -1}, True), ({"reduction": "sum", "ignore_index": 2}, True)]


def _loss_runs(shapes, ignore):
    runs = []
    for n, c, d in shapes:
        t = labels(c, n, d)
        if ignore is not None and t.size:
            t.reshape(-1)[::3] = ignore
        runs.append((f32(n, c, d), t, RNG.uniform(0.1, 1.0, c).astype(np.float32)))
    return runs


@pytest.mark.parametrize("allocator", ["pool", "naive"])
@pytest.mark.parametrize("attrs,weighted", NLL_CASES)
@pytest.mark.parametrize("op,opset", [("NegativeLogLikelihoodLoss", 13), ("NegativeLogLikelihoodLoss", 22),
                                      ("SoftmaxCrossEntropyLoss", 13)])
def test_loss_matches_ort_through_symbolic_shapes(op, opset, attrs, weighted, allocator):
    shapes = [(3, 4, 5), (1, 4, 2), (6, 3, 1), (2, 5, 7)]
    runs = _loss_runs(shapes, attrs.get("ignore_index"))
    feeds = [{"in0": x, "in1": t, **({"in2": w} if weighted else {})} for x, t, w in runs]
    inputs = list(feeds[0].values())
    dims = [["N", "C", "D"], ["N", "D"], ["C"]][:len(inputs)]
    model, _ = one_node_model(op, inputs, attrs, opset, dims=dims, node_name="loss")
    sess = assert_runs_match_ort(model, feeds, allocator)
    assert sess.get_inferred_outputs()[0].shape == (["N", "D"] if attrs.get("reduction") == "none" else [])
    assert sess.stats.resolved_plans == 0


@pytest.mark.parametrize("allocator", ["pool", "naive"])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_sce_log_prob_and_4d_match_ort(reduction, allocator):
    feeds = []
    for n, c, h, w in [(2, 3, 4, 5), (1, 3, 1, 2), (3, 3, 2, 2)]:
        t = labels(c, n, h, w, dtype=np.int32)
        t[0, 0, 0] = -100
        feeds.append({"in0": f32(n, c, h, w) * 4, "in1": t})
    model, _ = one_node_model("SoftmaxCrossEntropyLoss", list(feeds[0].values()),
                              {"reduction": reduction, "ignore_index": -100}, 13, n_outputs=2,
                              dims=[["N", "C", "H", "W"], ["N", "H", "W"]])
    sess = assert_runs_match_ort(model, feeds, allocator)
    assert sess.get_inferred_outputs()[1].shape == ["N", "C", "H", "W"]


def test_float64_and_2d_match_reference():
    x, t, w = f32(5, 4).astype(np.float64), labels(4, 5), RNG.uniform(0.1, 1, 4)
    for op in ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"):
        for red in ("none", "sum", "mean"):
            got = run_node(op, [x, t, w], {"reduction": red}, opset=13)
            want = spec_node_outputs(op, [x, t, w], {"reduction": red}, opset=13)
            assert got[0].dtype == np.float64 and got[0].shape == np.shape(want[0])
            np.testing.assert_allclose(got[0], want[0], rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_low_precision_computed_in_float32(dtype):
    x, t = f32(4, 6, 3), labels(6, 4, 3)
    loss, logp = run_node("SoftmaxCrossEntropyLoss", [x.astype(dtype), t], {"reduction": "sum"}, opset=13,
                          n_outputs=2)
    want_loss, want_logp = spec_node_outputs("SoftmaxCrossEntropyLoss", [x.astype(dtype).astype(np.float32), t],
                                             {"reduction": "sum"}, opset=13, n_outputs=2)
    assert loss.dtype == np.dtype(dtype) and logp.dtype == np.dtype(dtype) and logp.shape == x.shape
    np.testing.assert_allclose(loss.astype(np.float32), want_loss, rtol=1e-2)
    np.testing.assert_allclose(logp.astype(np.float32), want_logp, rtol=1e-2, atol=1e-2)
    (nll,) = run_node("NegativeLogLikelihoodLoss", [x.astype(dtype), t], {}, opset=22)
    assert nll.dtype == np.dtype(dtype)


# hand-computed edge cases ----------------------------------------------------------------------

def test_nll_hand_computed_spec_examples():
    x = np.array([[[1.0, 2.0], [2.0, 2.0], [3.0, 2.0]], [[0.0, 1.0], [2.0, 2.0], [1.0, 2]]], np.float32)
    t = np.array([[2, 1], [0, 2]], np.int64)
    w = np.float32([0.2, 0.3, 0.1])
    (none,) = run_node("NegativeLogLikelihoodLoss", [x, t], {"reduction": "none"}, opset=13)
    assert none.tolist() == [[-3.0, -2.0], [-0.0, -2.0]]
    (s,) = run_node("NegativeLogLikelihoodLoss", [x, t, w], {"reduction": "sum"}, opset=13)
    np.testing.assert_allclose(s, -1.1, rtol=1e-6)
    (m,) = run_node("NegativeLogLikelihoodLoss", [x, t, w], {"reduction": "mean"}, opset=13)
    np.testing.assert_allclose(m, -1.1 / 0.7, rtol=1e-6)


def test_ignored_minus_inf_gives_zero_and_all_ignored_mean_is_nan():
    x = np.float32([[-np.inf, -1.0], [-2.0, -3.0]])
    t = np.array([5, 1], np.int64)   # 5 = ignore_index, out of [0, C): never gathered
    (none,) = run_node("NegativeLogLikelihoodLoss", [x, t], {"reduction": "none", "ignore_index": 5}, opset=13)
    assert none.tolist() == [0.0, 3.0]
    (mean,) = run_node("NegativeLogLikelihoodLoss", [x, np.array([5, 5])], {"ignore_index": 5}, opset=13)
    assert np.isnan(mean)


def test_empty_batch():
    (none,) = run_node("NegativeLogLikelihoodLoss", [np.zeros((0, 3, 2), np.float32), np.zeros((0, 2), np.int64)],
                       {"reduction": "none"}, opset=13)
    assert none.shape == (0, 2)
    loss, logp = run_node("SoftmaxCrossEntropyLoss", [np.zeros((0, 3), np.float32), np.zeros(0, np.int64)],
                          {"reduction": "sum"}, opset=13, n_outputs=2)
    assert loss.shape == () and loss == 0 and logp.shape == (0, 3)


# symbolic inference ----------------------------------------------------------------------------

def test_symbolic_shapes_and_dtypes():
    n, c, d = sym("N"), sym("C"), sym("D")
    shapes, dtypes, _ = sym_infer("NegativeLogLikelihoodLoss", [(n, c, d), (n, d)], {"reduction": "none"})
    assert shapes == [(n, d)] and dtypes == [F32]
    shapes, _, _ = sym_infer("NegativeLogLikelihoodLoss", [(n, c), (n,), (c,)])
    assert shapes == [()]
    shapes, dtypes, _ = sym_infer("SoftmaxCrossEntropyLoss", [(n, 10, d), (n, d)], {"reduction": "sum"},
                                  n_outputs=2)
    assert shapes == [(), (n, 10, d)] and dtypes == [F32, F32]


def test_symbolic_mismatch_is_assumed_then_checked_per_run():
    n, m = sym("N"), sym("M")
    _, _, ctx = sym_infer("NegativeLogLikelihoodLoss", [(n, 3), (m,)])
    assert (n, "==", m) in ctx.guards or (m, "==", n) in ctx.guards
    x, t = f32(3, 4), labels(4, 3)
    model, _ = one_node_model("NegativeLogLikelihoodLoss", [x, t], {}, 13, dims=[["N", "C"], ["M"]], node_name="nll")
    sess = dynashape.InferenceSession(model)
    sess.run(None, {"in0": x, "in1": t})
    with pytest.raises(dynashape.ShapeInferenceError, match="dim 0") as info:
        sess.run(None, {"in0": f32(3, 4), "in1": labels(4, 2)})
    assert info.value.kind == "DimMismatch" and info.value.node == "nll"


# errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("inputs,attrs,kind,match", [
    ([f32(3), labels(3, 3)], {}, "InvalidRank", "rank >= 2"),
    ([f32(3, 4), labels(4, 3, 1)], {}, "InvalidRank", "must have rank 1"),
    ([f32(3, 4, 2), labels(4, 3, 5)], {}, "DimMismatch", "dim 1"),
    ([f32(3, 4), labels(4, 3), f32(5)], {}, "DimMismatch", "class count"),
    ([f32(3, 4), labels(4, 3), f32(4, 1)], {}, "InvalidRank", "1-D"),
    ([f32(3, 4), labels(4, 3)], {"reduction": "avg"}, "InvalidAttribute", "'avg'"),
    ([f32(3, 4), f32(3)], {}, "UnsupportedDtype", "int32 or int64"),
    ([labels(4, 3, 4), labels(4, 3)], {}, "UnsupportedDtype", "floating-point"),
    ([f32(3, 4), labels(4, 3), f32(4).astype(np.float64)], {}, "DtypeMismatch", "float32"),
])
@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_inference_errors(op, inputs, attrs, kind, match):
    with pytest.raises(dynashape.ShapeInferenceError, match=match) as info:
        run_node(op, inputs, attrs, opset=13)
    assert info.value.kind == kind


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_target_out_of_range(op):
    for t in (np.array([0, 4, 1]), np.array([0, -1, 1])):
        with pytest.raises(dynashape.ShapeInferenceError, match=r"target -?\d is out of range for C = 4") as info:
            run_node(op, [f32(3, 4), t], {}, opset=13)
        assert info.value.kind == "TargetOutOfRange"
    run_node(op, [f32(3, 4), np.array([0, -1, 1])], {"ignore_index": -1}, opset=13)   # ignored: fine
