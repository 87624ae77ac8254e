"""Tests of the detection family: NonMaxSuppression (10, 11) and RoiAlign (10, 16, 22).

Values are checked against onnxruntime (float32, float64) on random inputs without score
ties (the order of tied scores is the spec reference's: lower box index first, checked
against onnx.reference); symbolic shapes through changing input shapes on one session
with both allocators; error cases by exception type, kind and message.
"""
from __future__ import annotations

import dynashape
import numpy as np
import pytest
from dynashape.registry import get_registry
from dynashape.symbolic import Expr, sym
from dynashape.testing import infer_node, infer_symbolic, run_node
from onnx import TensorProto, helper

from tests.conftest import assert_runs_match_ort, one_node_model, ort_run, spec_run, spec_versions

pytest.importorskip("onnxruntime")

ALLOCATORS = ("pool", "naive")


def _rng(seed):
    return np.random.default_rng(seed)


def _boxes(rng, b, n, center, integral=False):
    xy = rng.uniform(0, 30, (b, n, 2))
    wh = rng.uniform(1, 12, (b, n, 2))
    if integral:
        xy, wh = np.round(xy), np.round(wh) + 1
    if center:
        return np.concatenate([xy + wh / 2, wh], -1).astype(np.float32)
    boxes = np.concatenate([xy[..., ::-1], (xy + wh)[..., ::-1]], -1)   # [y1, x1, y2, x2]
    flip = rng.random((b, n)) < 0.3                                      # corners in any order
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    return boxes.astype(np.float32)


def _scores(rng, b, c, n):
    """Distinct scores (no ties): a permutation scaled into (0, 1)."""
    return ((rng.permutation(b * c * n).reshape(b, c, n) + 1) / (b * c * n + 1)).astype(np.float32)


def _nms_inputs(rng, b, c, n, center, max_out, iou, score=None, integral=False):
    ins = [_boxes(rng, b, n, center, integral), _scores(rng, b, c, n), np.array([max_out], np.int64),
           np.array([iou], np.float32)]
    if score is not None:
        ins.append(np.array([score], np.float32))
    return ins


def _nms_check(ins, attrs, opset=11, oracle=ort_run):
    model, feeds = one_node_model("NonMaxSuppression", ins, attrs, opset, out_dtype=np.int64)
    want = oracle(model, feeds)[0]
    (got,) = run_node("NonMaxSuppression", ins, attrs, opset=opset)
    assert got.dtype == np.int64 and got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)
    return got


# ------------------------------------------------------------------------------ NonMaxSuppression

@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("opset", [10, 11])
def test_nms_matches_ort(seed, center, opset):
    rng = _rng(seed)
    for max_out, iou, score in ((3, 0.5, None), (100, 0.3, 0.4), (2, 0.0, 0.1), (50, 1.0, None)):
        ins = _nms_inputs(rng, 2, 3, 40, center, max_out, iou, score, integral=seed % 2 == 1)
        _nms_check(ins, {"center_point_box": center}, opset)


def test_nms_many_candidates_cross_blocks():
    """More candidates than one block (128) per group: later blocks are checked against the
    boxes kept before them; many classes; a limit reached mid-block."""
    rng = _rng(11)
    for b, c, n, max_out in ((1, 1, 700, 400), (2, 9, 300, 60), (1, 4, 500, 1000)):
        ins = _nms_inputs(rng, b, c, n, 0, max_out, 0.4)
        got = _nms_check(ins, {})
        assert len(got) > 0


def test_nms_ties_keep_lower_index_first():
    boxes = np.array([[[0, 2 * i, 1, 2 * i + 1] for i in range(10)]], np.float32)   # disjoint boxes
    scores = np.ones((1, 1, 10), np.float32)
    ins = [boxes, scores, np.array([4], np.int64), np.array([0.5], np.float32)]
    got = _nms_check(ins, {}, oracle=spec_run)
    np.testing.assert_array_equal(got[:, 2], [0, 1, 2, 3])
    overlapping = np.array([[[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 9]]], np.float32)
    ins = [overlapping, np.full((1, 1, 3), 0.5, np.float32), np.array([3], np.int64), np.array([0.5], np.float32)]
    np.testing.assert_array_equal(_nms_check(ins, {}, oracle=spec_run), [[0, 0, 0]])


def test_nms_defaults_and_empty():
    rng = _rng(3)
    boxes, scores = _boxes(rng, 1, 6, 0), _scores(rng, 1, 2, 6)
    for ins in ([boxes, scores], [boxes, scores, np.array([0], np.int64)],
                [boxes, scores, np.array([-3], np.int64)],
                [boxes, scores, np.array([5], np.int64), np.array([0.5], np.float32), np.array([2.0], np.float32)],
                [boxes[:, :0], scores[:, :, :0], np.array([5], np.int64)],
                [boxes, scores[:, :0], np.array([5], np.int64)]):
        got = _nms_check(ins, {})
        assert got.shape == (0, 3)
    # scalar (0-D) inputs, iou_threshold absent (0: any overlap suppresses), score_threshold only
    ins = [boxes, scores, np.array(4, np.int64), None, np.array(0.3, np.float32)]
    _nms_check(ins, {})


def test_nms_identical_and_degenerate_boxes():
    boxes = np.array([[[0, 0, 1, 1]] * 4 + [[2, 2, 2, 5], [3, 3, 3, 3], [0, 0, 1, 1]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7, 0.6, 0.95, 0.5, 0.4]]], np.float32)
    got = _nms_check([boxes, scores, np.array([10], np.int64), np.array([0.5], np.float32)], {})
    np.testing.assert_array_equal(got[:, 2], [4, 0, 5])   # zero-area boxes never suppress


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_nms_symbolic_shapes_one_session(allocator):
    """boxes (B, N, 4) / scores (B, C, N) symbolic: every run a new signature and a new count."""
    rng = _rng(5)
    ins = _nms_inputs(rng, 1, 1, 4, 0, 5, 0.5, 0.2)
    model, _ = one_node_model("NonMaxSuppression", ins, {}, 11, out_dtype=np.int64,
                              dims=[["B", "N", 4], ["B", "C", "N"], None, None, None])
    feeds = []
    for b, c, n, max_out, score in ((1, 1, 30, 5, 0.2), (2, 3, 17, 4, 0.5), (3, 2, 64, 10, 0.0),
                                    (1, 4, 9, 3, 0.99), (2, 3, 17, 4, 0.5), (1, 1, 0, 5, 0.2)):
        x = _nms_inputs(rng, b, c, n, 0, max_out, 0.45, score)
        feeds.append({f"in{i}": a for i, a in enumerate(x)})
    assert_runs_match_ort(model, feeds, allocator)


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_nms_count_flows_downstream(allocator):
    """The data-dependent count feeds Gather/Shape downstream (a fresh symbol at import)."""
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou", "thr"], ["sel"]),
             helper.make_node("Gather", ["sel", "two"], ["box_idx"], axis=1),
             helper.make_node("Squeeze", ["boxes", "zero"], ["boxes0"]),
             helper.make_node("Gather", ["boxes0", "box_idx"], ["kept"], axis=0),
             helper.make_node("Shape", ["sel"], ["count"])]
    inits = [helper.make_tensor("max", TensorProto.INT64, [1], [6]),
             helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.4]),
             helper.make_tensor("thr", TensorProto.FLOAT, [1], [0.3]),
             helper.make_tensor("two", TensorProto.INT64, [], [2]),
             helper.make_tensor("zero", TensorProto.INT64, [1], [0])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, "N", 4]),
                                           helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, "C", "N"])],
                              [helper.make_tensor_value_info("kept", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("count", TensorProto.INT64, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rng = _rng(9)
    feeds = [{"boxes": _boxes(rng, 1, n, 0), "scores": _scores(rng, 1, c, n)} for n, c in ((20, 2), (45, 1), (7, 3))]
    assert_runs_match_ort(model, feeds, allocator)


def test_nms_symbolic_inference():
    b, n, c = sym("B"), sym("N"), sym("C")
    (shape,), ctx = infer_symbolic("NonMaxSuppression", [(b, n, 4), (b, c, n), (1,), (1,), (1,)],
                                   ["float32", "float32", "int64", "float32", "float32"], {}, 11)
    assert len(shape) == 2 and shape[1] == 3 and isinstance(shape[0], Expr) and shape[0] not in (b, n, c)
    (shape,), ctx = infer_symbolic("NonMaxSuppression", [(b, n, 4), (sym("B2"), c, sym("N2"))],
                                   ["float32", "float32"], {}, 10)
    assert {(str(a), r, str(v)) for a, r, v in ctx.guards} >= {("B", "==", "B2"), ("N", "==", "N2")}
    shapes, dtypes = infer_node("NonMaxSuppression", [np.zeros((2, 5, 4), np.float32), np.zeros((2, 3, 5), np.float32)],
                                opset=11)
    assert dtypes == [np.dtype(np.int64)] and shapes[0][1] == 3


@pytest.mark.parametrize("ins,attrs,match,kind", [
    ([np.zeros((5, 4), np.float32), np.zeros((1, 1, 5), np.float32)], {}, "boxes must have rank 3", "InvalidRank"),
    ([np.zeros((1, 5, 4), np.float32), np.zeros((1, 5), np.float32)], {}, "scores must have rank 3", "InvalidRank"),
    ([np.zeros((1, 5, 5), np.float32), np.zeros((1, 1, 5), np.float32)], {}, "4 box coordinates", "DimMismatch"),
    ([np.zeros((2, 5, 4), np.float32), np.zeros((1, 1, 5), np.float32)], {}, "num_batches", "DimMismatch"),
    ([np.zeros((1, 5, 4), np.float32), np.zeros((1, 1, 6), np.float32)], {}, "spatial_dimension", "DimMismatch"),
    ([np.zeros((1, 5, 4), np.float32), np.zeros((1, 1, 5), np.float32)], {"center_point_box": 2},
     "center_point_box 2 must be 0", "InvalidAttribute"),
    ([np.zeros((1, 5, 4), np.float64), np.zeros((1, 1, 5), np.float64)], {}, "expected float32", "InvalidDtype"),
    ([np.zeros((1, 5, 4), np.float32), np.zeros((1, 1, 5), np.float32), np.array([1, 2], np.int64)], {},
     "max_output_boxes_per_class must be a scalar", "InvalidScalarInput"),
    ([np.zeros((1, 5, 4), np.float32), np.zeros((1, 1, 5), np.float32), np.array([1], np.int32)], {},
     "max_output_boxes_per_class has dtype int32", "InvalidDtype"),
])
def test_nms_errors(ins, attrs, match, kind):
    with pytest.raises(dynashape.ShapeInferenceError, match=match) as info:
        infer_node("NonMaxSuppression", ins, attrs, opset=11)
    assert info.value.kind == kind


def test_nms_iou_threshold_out_of_range_fails_at_run():
    ins = [np.zeros((1, 5, 4), np.float32), np.zeros((1, 1, 5), np.float32), np.array([2], np.int64),
           np.array([1.5], np.float32)]
    model, feeds = one_node_model("NonMaxSuppression", ins, {}, 11, out_dtype=np.int64, node_name="nms")
    sess = dynashape.InferenceSession(model)
    with pytest.raises(dynashape.ShapeInferenceError, match=r"'nms': iou_threshold 1.5 must be in \[0, 1\]") as info:
        sess.run(None, feeds)
    assert info.value.kind == "InvalidThreshold"


# ------------------------------------------------------------------------------ RoiAlign

def _roi_inputs(rng, n, c, h, w, r, dtype=np.float32, spread=1.0):
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    p = rng.uniform(-3, max(h, w) + 2, (r, 2)) * spread
    s = rng.uniform(-1, max(h, w) * 0.8, (r, 2)) * spread
    rois = np.concatenate([p, p + s], 1).astype(dtype)
    return [x, rois, rng.integers(0, n, r).astype(np.int64)]


ROI_ATTRS = [
    {},
    {"output_height": 3, "output_width": 2, "sampling_ratio": 2},
    {"output_height": 2, "output_width": 4, "spatial_scale": 0.5, "mode": "max"},
    {"output_height": 5, "output_width": 5, "sampling_ratio": 1, "spatial_scale": 0.25},
    {"output_height": 2, "output_width": 3, "mode": "max", "sampling_ratio": 3},
]


@pytest.mark.parametrize("attrs", ROI_ATTRS)
@pytest.mark.parametrize("opset,ctm", [(10, None), (16, "half_pixel"), (16, "output_half_pixel")])
def test_roi_align_matches_ort(attrs, opset, ctm):
    rng = _rng(21)
    attrs = dict(attrs, **({"coordinate_transformation_mode": ctm} if ctm else {}))
    for spread, (n, c, h, w, r) in ((1.0, (2, 3, 9, 11, 7)), (4.0, (1, 2, 6, 5, 4)), (0.1, (3, 1, 4, 4, 5))):
        ins = _roi_inputs(rng, n, c, h, w, r, spread=spread)
        model, feeds = one_node_model("RoiAlign", ins, attrs, opset)
        want = ort_run(model, feeds)[0]
        (got,) = run_node("RoiAlign", ins, attrs, opset=opset)
        assert got.shape == want.shape == (r, c, attrs.get("output_height", 1), attrs.get("output_width", 1))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_roi_align_float64_float16_and_opset22():
    rng = _rng(4)
    ins = _roi_inputs(rng, 2, 3, 8, 8, 6, dtype=np.float64)
    attrs = {"output_height": 3, "output_width": 3}
    model, feeds = one_node_model("RoiAlign", ins, attrs, 16)
    (got,) = run_node("RoiAlign", ins, attrs, opset=16)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ort_run(model, feeds)[0], rtol=1e-12, atol=1e-12)
    # RoiAlign-22 (bfloat16 added, no ORT kernel): same values as 16; float16 computes in float32
    (got22,) = run_node("RoiAlign", ins, attrs, opset=22)
    np.testing.assert_allclose(got22, got, rtol=1e-12)
    half = [ins[0].astype(np.float16), ins[1].astype(np.float16), ins[2]]
    (h16,) = run_node("RoiAlign", half, attrs, opset=22)
    (f32,) = run_node("RoiAlign", [a.astype(np.float32) for a in half[:2]] + [ins[2]], attrs, opset=22)
    assert h16.dtype == np.float16
    np.testing.assert_allclose(h16, f32.astype(np.float16), rtol=1e-3)


def test_roi_align_chunks_and_empty_rois(monkeypatch):
    """RoIs split over several chunks give the same values; no RoIs give (0, C, h, w)."""
    import dynashape.ops_builtin.detection as det
    rng = _rng(8)
    ins = _roi_inputs(rng, 2, 4, 10, 10, 12, spread=2.0)
    attrs = {"output_height": 2, "output_width": 3}
    model, feeds = one_node_model("RoiAlign", ins, attrs, 16)
    monkeypatch.setattr(det, "_ROI_CHUNK", 64)
    (got,) = run_node("RoiAlign", ins, attrs, opset=16)
    np.testing.assert_allclose(got, ort_run(model, feeds)[0], rtol=1e-5, atol=1e-6)
    (empty,) = run_node("RoiAlign", [ins[0], ins[1][:0], ins[2][:0]], attrs, opset=16)
    assert empty.shape == (0, 4, 2, 3)


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_roi_align_symbolic_shapes_one_session(allocator):
    rng = _rng(12)
    attrs = {"output_height": 2, "output_width": 3, "sampling_ratio": 0, "spatial_scale": 0.5}
    ins = _roi_inputs(rng, 1, 2, 5, 5, 3)
    model, _ = one_node_model("RoiAlign", ins, attrs, 16, dims=[["N", "C", "H", "W"], ["R", 4], ["R"]])
    feeds = [dict(zip(("in0", "in1", "in2"), _roi_inputs(rng, *s))) for s in
             ((1, 2, 5, 5, 3), (2, 3, 9, 7, 6), (3, 1, 4, 12, 1), (2, 3, 9, 7, 6), (1, 2, 6, 6, 0))]
    assert_runs_match_ort(model, feeds, allocator)


def test_roi_align_symbolic_inference():
    n, c, h, w, r = (sym(s) for s in "NCHWR")
    (shape,), _ = infer_symbolic("RoiAlign", [(n, c, h, w), (r, 4), (r,)], ["float32", "float32", "int64"],
                                 {"output_height": 7, "output_width": 5}, 16)
    assert shape == (r, c, 7, 5)
    (shape,), ctx = infer_symbolic("RoiAlign", [(n, c, h, w), (r, 4), (sym("R2"),)],
                                   ["float32", "float32", "int64"], {}, 10)
    assert shape[1:] == (c, 1, 1) and str(shape[0]) in ("R", "R2")
    assert ("R", "==", "R2") in {(str(a), op, str(b)) for a, op, b in ctx.guards}


@pytest.mark.parametrize("ins,attrs,opset,match,kind", [
    ([np.zeros((1, 2, 4, 4), np.float32), np.zeros((3, 5), np.float32), np.zeros(3, np.int64)], {}, 16,
     "rois.shape", "DimMismatch"),
    ([np.zeros((1, 2, 4, 4), np.float32), np.zeros((3, 4), np.float32), np.zeros(2, np.int64)], {}, 16,
     "num_rois", "DimMismatch"),
    ([np.zeros((1, 2, 4), np.float32), np.zeros((3, 4), np.float32), np.zeros(3, np.int64)], {}, 16,
     "X must have rank 4", "InvalidRank"),
    ([np.zeros((1, 2, 4, 4), np.float32), np.zeros((3, 4), np.float32), np.zeros(3, np.int32)], {}, 16,
     "batch_indices has dtype int32", "InvalidDtype"),
    ([np.zeros((1, 2, 4, 4), np.int32), np.zeros((3, 4), np.int32), np.zeros(3, np.int64)], {}, 16,
     "floating-point", "InvalidDtype"),
    ([np.zeros((1, 2, 4, 4), np.float32), np.zeros((3, 4), np.float32), np.zeros(3, np.int64)], {"mode": "sum"},
     16, "mode 'sum'", "InvalidAttribute"),
    ([np.zeros((1, 2, 4, 4), np.float32), np.zeros((3, 4), np.float32), np.zeros(3, np.int64)],
     {"coordinate_transformation_mode": "align_corners"}, 16, "coordinate_transformation_mode", "InvalidAttribute"),
    ([np.zeros((1, 2, 4, 4), np.float32), np.zeros((3, 4), np.float32), np.zeros(3, np.int64)],
     {"output_height": 0}, 16, "output_height 0", "InvalidAttribute"),
])
def test_roi_align_errors(ins, attrs, opset, match, kind):
    with pytest.raises(dynashape.ShapeInferenceError, match=match) as info:
        infer_node("RoiAlign", ins, attrs, opset=opset)
    assert info.value.kind == kind


def test_roi_align_batch_index_out_of_range():
    ins = [np.zeros((2, 1, 4, 4), np.float32), np.zeros((2, 4), np.float32), np.array([0, 2], np.int64)]
    with pytest.raises(dynashape.ShapeInferenceError, match="batch index 2 is out of range") as info:
        run_node("RoiAlign", ins, {}, opset=16)
    assert info.value.kind == "RoiBatchIndexOutOfRange"


def test_all_versions_registered():
    reg = get_registry()
    for op in ("NonMaxSuppression", "RoiAlign"):
        versions = spec_versions(op)
        assert versions
        for v in versions:
            assert reg.resolve_op("", op, v).since_version == v
