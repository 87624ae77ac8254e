"""Tests of the image family: GridSample (16, 20, 22), AffineGrid (20), Col2Im (18),
DeformConv (19, 22), CenterCropPad (18), MaxUnpool (9, 11, 22), ImageDecoder (20).

Values are checked against onnxruntime where it implements the case and against
onnx.reference.ReferenceEvaluator (or hand-computed values) where it does not or where
the two disagree (each such case says which one is followed and why); symbolic shapes
through changing input shapes on one session with both allocators; error cases by
exception type, kind and message.
"""
from __future__ import annotations

import io
import itertools

import dynashape
import numpy as np
import pytest
from dynashape.registry import get_registry
from dynashape.symbolic import Expr, sym
from dynashape.testing import infer_node, infer_symbolic, run_node
from onnx import TensorProto, helper

from tests.conftest import (assert_runs_match_ort, one_node_model, ort_or_spec, ort_predates, ort_run, spec_run,
                            spec_versions)

pytest.importorskip("onnxruntime")

ALLOCATORS = ("pool", "naive")
#: onnxruntime < 1.25 has no DeformConv kernel (https://github.com/microsoft/onnxruntime/pull/27393)
#: and < 1.28 misplaces 3-D Col2Im blocks with strides or pads
#: (https://github.com/microsoft/onnxruntime/issues/18156): compared with the ONNX spec there
ORT_DEFORM_CONV = (1, 25)
ORT_COL2IM_3D = (1, 28)
#: GridSample reflection with align_corners=1 on a size-1 axis (an empty reflection range, so
#: GsReflect divides by zero and converts inf to an int) reads outside the input in
#: onnxruntime 1.23: NaN in some runs (https://github.com/microsoft/onnxruntime/pull/27975);
#: 1.32 is the first release seen right. The ONNX reference divides by zero too: not compared
ORT_GRID_SAMPLE_REFLECT_1PX = (1, 32)


def _rng(seed):
    return np.random.default_rng(seed)


def check(op, ins, attrs, opset, oracle=ort_run, rtol=1e-5, atol=1e-5):
    model, feeds = one_node_model(op, ins, attrs, opset)
    want = oracle(model, feeds)[0]
    (got,) = run_node(op, ins, attrs, opset=opset)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
    return got


def expect_error(op, ins, attrs, opset, match, kind):
    with pytest.raises(dynashape.ShapeInferenceError, match=match) as info:
        infer_node(op, ins, attrs, opset=opset)
    assert info.value.kind == kind, info.value.kind


def _obj(*dims):
    out = np.empty(len(dims), dtype=object)
    out[:] = dims
    return out


# ------------------------------------------------------------------------------ GridSample

MODES = {16: ("bilinear", "nearest", "bicubic"), 20: ("linear", "nearest", "cubic"), 22: ("linear", "nearest", "cubic")}


@pytest.mark.parametrize("opset", [16, 20, 22])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d_matches_ort(opset, padding, align):
    """Every mode; the grid reaches 1.5x outside [-1, 1]. bicubic + border follows onnxruntime
    (each tap index clamped); the ONNX reference clamps the position first."""
    rng = _rng(opset + 3 * align)
    for mode in MODES[opset]:
        for s, o in (((5, 7), (4, 6)), ((1, 3), (2, 2)), ((2, 1), (3, 1))):
            x = rng.standard_normal((2, 3) + s).astype(np.float32)
            grid = rng.uniform(-1.5, 1.5, (2,) + o + (2,)).astype(np.float32)
            if padding == "reflection" and align and 1 in s and ort_predates(ORT_GRID_SAMPLE_REFLECT_1PX):
                continue
            check("GridSample", [x, grid], {"mode": mode, "padding_mode": padding, "align_corners": align}, opset)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_3d_and_float64_match_ort(mode, padding):
    rng = _rng(2)
    for align in (0, 1):
        x = rng.standard_normal((2, 2, 3, 4, 5)).astype(np.float32)
        grid = rng.uniform(-1.4, 1.4, (2, 2, 3, 4, 3)).astype(np.float32)
        attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
        check("GridSample", [x, grid], attrs, 20)
        check("GridSample", [x.astype(np.float64), grid.astype(np.float64)], attrs, 22, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_grid_sample_nd_against_reference(mode):
    """1-D and (for cubic) 3-D sampling, which onnxruntime does not implement: the ONNX
    reference (zeros and reflection padding, where the two position rules coincide)."""
    rng = _rng(5)
    cases = [((2, 3, 7), (2, 5, 1))]
    if mode == "cubic":
        cases.append(((1, 2, 3, 4, 3), (1, 2, 2, 3, 3)))
    for xs, gs in cases:
        for padding, align in itertools.product(("zeros", "reflection"), (0, 1)):
            x = rng.standard_normal(xs).astype(np.float32)
            grid = rng.uniform(-1.3, 1.3, gs).astype(np.float32)
            check("GridSample", [x, grid], {"mode": mode, "padding_mode": padding, "align_corners": align}, 20,
                  oracle=spec_run, rtol=1e-4, atol=1e-5)


def test_grid_sample_integer_and_string_inputs():
    rng = _rng(6)
    x = rng.integers(-50, 50, (1, 2, 4, 5)).astype(np.int32)
    grid = rng.uniform(-1.2, 1.2, (1, 3, 3, 2)).astype(np.float32)
    check("GridSample", [x, grid], {"mode": "nearest"}, 20, oracle=spec_run)
    # linear on integers: computed in float64 and truncated into the output (the reference
    # computes its weights in the integer dtype, which truncates them to 0)
    (got,) = run_node("GridSample", [x, grid], {"mode": "linear"}, opset=20)
    (flt,) = run_node("GridSample", [x.astype(np.float64), grid.astype(np.float64)], {"mode": "linear"}, opset=20)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, flt.astype(np.int32))
    s = np.array([[[["a", "b"], ["c", "d"]]]], dtype=object)
    g = np.array([[[[-0.5, -0.5], [0.5, 0.5], [2.0, 2.0]]]], np.float32)
    (got,) = run_node("GridSample", [s, g], {"mode": "nearest"}, opset=20)
    assert got.tolist() == [[[["a", "d", ""]]]]
    expect_error("GridSample", [s, g], {"mode": "linear"}, 20, "only mode 'nearest'", "InvalidDtype")


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_grid_sample_symbolic_shapes_one_session(allocator):
    rng = _rng(7)
    attrs = {"mode": "bilinear", "padding_mode": "border", "align_corners": 0}
    x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    grid = rng.uniform(-1, 1, (1, 2, 2, 2)).astype(np.float32)
    model, _ = one_node_model("GridSample", [x, grid], attrs, 16, dims=[["N", "C", "H", "W"], ["N", "h", "w", 2]])
    feeds = []
    for n, c, h, w, ho, wo in ((1, 2, 3, 3, 2, 2), (2, 3, 8, 5, 4, 7), (3, 1, 2, 9, 1, 3), (2, 3, 8, 5, 4, 7)):
        feeds.append({"in0": rng.standard_normal((n, c, h, w)).astype(np.float32),
                      "in1": rng.uniform(-1.2, 1.2, (n, ho, wo, 2)).astype(np.float32)})
    assert_runs_match_ort(model, feeds, allocator)


def test_grid_sample_symbolic_inference():
    n, c, h, w, p, q = (sym(s) for s in ("N", "C", "H", "W", "P", "Q"))
    (shape,), ctx = infer_symbolic("GridSample", [(n, c, h, w), (sym("N2"), p, q, 2)], ["float32"] * 2, {}, 16)
    assert shape[1:] == (c, p, q) and ("N", "==", "N2") in {(str(a), op, str(b)) for a, op, b in ctx.guards}
    (shape,), _ = infer_symbolic("GridSample", [(n, c, h, w, 4), (n, p, q, 3, 3)], ["float32"] * 2, {}, 20)
    assert shape == (n, c, p, q, 3)


@pytest.mark.parametrize("ins,attrs,opset,match,kind", [
    ([(1, 1, 2, 2, 2), (1, 1, 1, 1, 3)], {}, 16, "must be 4-D", "InvalidRank"),
    ([(1, 1, 2, 2), (1, 1, 1, 3)], {}, 16, "grid.shape", "DimMismatch"),
    ([(1, 1, 2, 2), (1, 1, 2)], {}, 20, "grid must have rank 4", "InvalidRank"),
    ([(2, 1, 2, 2), (1, 1, 1, 2)], {}, 20, "batch size", "DimMismatch"),
    ([(1, 1, 2, 2), (1, 1, 1, 2)], {"mode": "linear"}, 16, "mode='linear' is not one of", "InvalidAttribute"),
    ([(1, 1, 2, 2), (1, 1, 1, 2)], {"mode": "bilinear"}, 20, "mode='bilinear' is not one of", "InvalidAttribute"),
    ([(1, 1, 2, 2), (1, 1, 1, 2)], {"padding_mode": "wrap"}, 20, "padding_mode", "InvalidAttribute"),
])
def test_grid_sample_errors(ins, attrs, opset, match, kind):
    expect_error("GridSample", [np.zeros(s, np.float32) for s in ins], attrs, opset, match, kind)


# ------------------------------------------------------------------------------ AffineGrid

@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_matches_ort(align):
    rng = _rng(9)
    for size in ([2, 3, 4, 5], [1, 1, 7, 2], [2, 1, 3, 4, 2], [1, 2, 2, 5, 3]):
        r = len(size) - 2
        theta = rng.standard_normal((size[0], r, r + 1)).astype(np.float32)
        check("AffineGrid", [theta, np.array(size, np.int64)], {"align_corners": align}, 20, atol=1e-6)
        check("AffineGrid", [theta.astype(np.float64), np.array(size, np.int64)], {"align_corners": align}, 20,
              rtol=1e-6, atol=1e-6)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # onnx.reference divides by zero there
def test_affine_grid_length_one_axis_follows_the_spec():
    """align_corners=1 and a length-1 axis: the spec's function body (and PyTorch) put the
    single position at -1; onnxruntime's Eigen LinSpaced puts it at +1."""
    theta = np.array([[[1.0, 0.5, 0.25], [0.3, 2.0, -0.5]]], np.float32)
    got = check("AffineGrid", [theta, np.array([1, 1, 1, 3], np.int64)], {"align_corners": 1}, 20, oracle=spec_run)
    np.testing.assert_allclose(got[0, 0, :, 0], [-1 - 0.5 + 0.25, 0 - 0.5 + 0.25, 1 - 0.5 + 0.25], rtol=1e-6)


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_spatial_transformer_symbolic_one_session(allocator):
    """Shape(X) -> AffineGrid -> GridSample(X): the size value is symbolic at import."""
    nodes = [helper.make_node("Shape", ["x"], ["size"]),
             helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=0),
             helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear", padding_mode="zeros")]
    graph = helper.make_graph(nodes, "stn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C", "H", "W"]),
                               helper.make_tensor_value_info("theta", TensorProto.FLOAT, ["N", 2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("grid", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    rng = _rng(10)
    feeds = [{"x": rng.standard_normal((n, c, h, w)).astype(np.float32),
              "theta": (np.eye(2, 3) + rng.normal(0, 0.2, (n, 2, 3))).astype(np.float32)}
             for n, c, h, w in ((1, 3, 8, 8), (2, 1, 5, 11), (3, 2, 16, 4), (1, 3, 8, 8))]
    # AffineGrid's float32 rounding differs from onnxruntime's (Eigen) by an ulp, which the
    # sampling amplifies: compared within rtol 1e-4 / atol 1e-5
    sess = dynashape.InferenceSession(model, allocator=allocator)
    outs = [sess.run(None, f) for f in feeds]
    for f, got in zip(feeds, outs):
        for g, w in zip(got, ort_run(model, f)):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert outs[1][1].shape == (2, 5, 11, 2)


def test_affine_grid_symbolic_inference():
    n, h, w = sym("N"), sym("H"), sym("W")
    (shape,), _ = infer_symbolic("AffineGrid", [(n, 2, 3), (4,)], ["float32", "int64"], {}, 20,
                                 values=[None, _obj(n, 3, h, w)])
    assert shape == (n, h, w, 2)
    (shape,), _ = infer_symbolic("AffineGrid", [(n, 3, 4), (5,)], ["float32", "int64"], {}, 20)
    assert len(shape) == 5 and shape[0] == n and shape[4] == 3 and all(isinstance(d, Expr) for d in shape[1:4])


@pytest.mark.parametrize("theta,size,match,kind", [
    ((2, 3), [1, 1, 2, 2], "theta must be 3-D", "InvalidRank"),
    ((1, 2, 3), [1, 1, 2], "4 .* or 5 .* values", "InvalidShape"),
    ((1, 2, 3), [1, 1, 2, 2, 2], "theta.shape", "DimMismatch"),
    ((2, 2, 3), [1, 1, 2, 2], "N of size and theta", "DimMismatch"),
])
def test_affine_grid_errors(theta, size, match, kind):
    expect_error("AffineGrid", [np.zeros(theta, np.float32), np.array(size, np.int64)], {}, 20, match, kind)


# ------------------------------------------------------------------------------ Col2Im

def _col2im_case(rng, img, block, dil, strides, pads, n=2, c=3):
    r = len(img)
    nb = [(d + pads[i] + pads[i + r] - ((b - 1) * dl + 1)) // s + 1
          for i, (d, b, s, dl) in enumerate(zip(img, block, strides, dil))]
    x = rng.standard_normal((n, c * int(np.prod(block)), int(np.prod(nb)))).astype(np.float32)
    return [x, np.array(img, np.int64), np.array(block, np.int64)], {"dilations": dil, "strides": strides, "pads": pads}


@pytest.mark.parametrize("img,block,dil,strides,pads", [
    ([5, 5], [2, 2], [1, 1], [1, 1], [0, 0, 0, 0]),
    ([6, 7], [3, 2], [2, 1], [1, 2], [1, 0, 1, 1]),
    ([4, 9], [1, 3], [1, 2], [2, 1], [0, 2, 1, 0]),
    ([3, 4, 5], [2, 1, 2], [1, 1, 1], [1, 2, 1], [0, 1, 0, 1, 0, 1]),
])
def test_col2im_matches_ort(img, block, dil, strides, pads):
    ins, attrs = _col2im_case(_rng(11), img, block, dil, strides, pads)
    check("Col2Im", ins, attrs, 18, oracle=ort_or_spec(ORT_COL2IM_3D if len(img) == 3 else None))


def test_col2im_3d_dilated_against_reference():
    """onnxruntime's N-d Col2Im misplaces dilated blocks in 3-D; the ONNX reference is followed."""
    ins, attrs = _col2im_case(_rng(12), [5, 4, 6], [2, 2, 3], [2, 1, 2], [1, 1, 2], [1, 0, 0, 1, 1, 1])
    check("Col2Im", ins, attrs, 18, oracle=spec_run)


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_col2im_symbolic_shapes_one_session(allocator):
    """image_shape fed as an input: its value (and the output's spatial dims) change per run."""
    rng = _rng(13)
    attrs = {"strides": [2, 1], "pads": [1, 0, 1, 1]}
    ins, _ = _col2im_case(rng, [6, 5], [3, 2], [1, 1], [2, 1], [1, 0, 1, 1])
    model, _ = one_node_model("Col2Im", ins, attrs, 18, dims=[["N", "CK", "L"], [2], [2]])
    feeds = []
    for n, c, img in ((2, 3, [6, 5]), (1, 2, [9, 4]), (3, 1, [5, 8]), (1, 2, [9, 4])):
        x, *_ = _col2im_case(rng, img, [3, 2], [1, 1], [2, 1], [1, 0, 1, 1], n=n, c=c)[0]
        feeds.append({"in0": x, "in1": np.array(img, np.int64), "in2": np.array([3, 2], np.int64)})
    assert_runs_match_ort(model, feeds, allocator)


def test_col2im_symbolic_inference():
    n, ck = sym("N"), sym("CK")
    (shape,), _ = infer_symbolic("Col2Im", [(n, ck, 16), (2,), (2,)], ["float32", "int64", "int64"], {}, 18,
                                 values=[None, np.array([5, 6]), np.array([2, 3])])
    assert shape == (n, ck // 6, 5, 6)
    (shape,), _ = infer_symbolic("Col2Im", [(n, 12, 20), (3,), (3,)], ["float32", "int64", "int64"], {}, 18)
    assert len(shape) == 5 and shape[0] == n and all(isinstance(d, Expr) for d in shape[1:])


@pytest.mark.parametrize("x,img,block,match,kind", [
    ((1, 7, 16), [5, 5], [2, 2], "divisible by prod", "InvalidShape"),
    ((1, 8, 15), [5, 5], [2, 2], "number of blocks", "DimMismatch"),
    ((1, 8, 16), [5, 5], [2, 2, 1], "same length", "InvalidShape"),
    ((8, 16), [5, 5], [2, 2], "must be 3-D", "InvalidRank"),
    ((1, 8, 16), [1, 5], [2, 2], "smaller than the dilated block", "InvalidShape"),
])
def test_col2im_errors(x, img, block, match, kind):
    expect_error("Col2Im", [np.zeros(x, np.float32), np.array(img, np.int64), np.array(block, np.int64)], {}, 18,
                 match, kind)


# ------------------------------------------------------------------------------ DeformConv

def _deform_case(rng, n, c, oc, s, k, group=1, og=1, strides=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1),
                 bias=False, mask=False, scale=1.5):
    r = len(s)
    out = [(d + pads[i] + pads[i + r] - ((kk - 1) * dl + 1)) // st + 1
           for i, (d, kk, st, dl) in enumerate(zip(s, k, strides, dil))]
    kk = int(np.prod(k))
    ins = [rng.standard_normal((n, c) + tuple(s)).astype(np.float32),
           rng.standard_normal((oc, c // group) + tuple(k)).astype(np.float32),
           (rng.standard_normal((n, og * kk * r) + tuple(out)) * scale).astype(np.float32)]
    if bias or mask:
        ins.append(rng.standard_normal(oc).astype(np.float32) if bias else None)
    if mask:
        ins.append(rng.random((n, og * kk) + tuple(out)).astype(np.float32))
    attrs = {"kernel_shape": list(k), "strides": list(strides), "pads": list(pads), "dilations": list(dil),
             "group": group, "offset_group": og}
    return ins, attrs


@pytest.mark.parametrize("opset", [19, 22])
@pytest.mark.parametrize("kw", [
    {},
    {"bias": True, "mask": True},
    {"group": 2, "og": 2, "strides": (2, 1), "pads": (1, 0, 1, 2), "dil": (1, 2), "mask": True},
    {"og": 3, "bias": True, "scale": 4.0},
])
def test_deform_conv_matches_ort(opset, kw):
    rng = _rng(14)
    c = 6 if kw.get("og") == 3 else 4
    ins, attrs = _deform_case(rng, 2, c, 4, (7, 8), (3, 2), **kw)
    check("DeformConv", ins, attrs, opset, oracle=ort_or_spec(ORT_DEFORM_CONV), rtol=1e-4, atol=1e-4)


def test_deform_conv_zero_offsets_is_conv_in_1d_and_3d():
    """With zero offsets and no mask DeformConv is Conv (checked for 1-D and 3-D, which
    onnxruntime's DeformConv does not implement)."""
    rng = _rng(15)
    for s, k, pads in (((9,), (3,), (1, 2)), ((4, 5, 6), (2, 3, 2), (0, 1, 1, 1, 0, 0))):
        ins, attrs = _deform_case(rng, 2, 4, 6, s, k, group=2, pads=pads, strides=(1,) * len(s),
                                  dil=(1,) * len(s), bias=True, scale=0.0)
        (got,) = run_node("DeformConv", ins, attrs, opset=22)
        conv_attrs = {k_: v for k_, v in attrs.items() if k_ != "offset_group"}
        model, feeds = one_node_model("Conv", [ins[0], ins[1], ins[3]], conv_attrs, 11)
        np.testing.assert_allclose(got, ort_run(model, feeds)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_deform_conv_symbolic_shapes_one_session(allocator):
    rng = _rng(16)
    ins, attrs = _deform_case(rng, 1, 2, 3, (5, 5), (3, 3), pads=(1, 1, 1, 1), mask=True)
    w = ins[1]
    model, _ = one_node_model("DeformConv", [ins[0], w, ins[2], None, ins[4]], attrs, 19,
                              dims=[["N", 2, "H", "W"], None, ["N", 18, "H", "W"], None, ["N", 9, "H", "W"]])
    feeds = []
    for n, h, wd in ((1, 5, 5), (2, 9, 4), (3, 3, 7), (2, 9, 4)):
        x, _, off, _, mask = _deform_case(rng, n, 2, 3, (h, wd), (3, 3), pads=(1, 1, 1, 1), mask=True)[0]
        feeds.append({"in0": x, "in1": w, "in2": off, "in4": mask})
    # onnx.reference sums the float32 samples in another order (up to 2e-6 off float64): the
    # tolerance of test_deform_conv_matches_ort then
    tol = {"rtol": 1e-4, "atol": 1e-4} if ort_predates(ORT_DEFORM_CONV) else {}
    assert_runs_match_ort(model, feeds, allocator, ort_fixed_in=ORT_DEFORM_CONV, **tol)


def test_deform_conv_symbolic_inference():
    n, h, w = sym("N"), sym("H"), sym("W")
    (shape,), _ = infer_symbolic("DeformConv", [(n, 4, h, w), (6, 4, 3, 3), (n, 18, h - 2, w - 2)],
                                 ["float32"] * 3, {}, 19)
    assert shape == (n, 6, h - 2, w - 2)


@pytest.mark.parametrize("shapes,attrs,match,kind", [
    ([(1, 4, 5, 5), (6, 3, 3, 3), (1, 18, 3, 3)], {}, "input channels 4", "ChannelMismatch"),
    ([(1, 4, 5, 5), (6, 4, 3, 3), (1, 16, 3, 3)], {}, "offset.shape", "DimMismatch"),
    ([(1, 4, 5, 5), (6, 4, 3, 3), (1, 18, 4, 3)], {}, "offset spatial dim 0", "DimMismatch"),
    ([(1, 4, 5, 5), (6, 4, 3, 3), (1, 18, 3, 3), (5,)], {}, "B's length", "DimMismatch"),
    ([(1, 4, 5, 5), (6, 4, 3, 3), (1, 18, 3, 3), (6,), (1, 8, 3, 3)], {}, "mask.shape", "DimMismatch"),
    ([(1, 4, 5, 5), (6, 4, 3, 3), (1, 54, 3, 3)], {"offset_group": 3}, "divisible by offset_group", "ChannelMismatch"),
    ([(1, 4, 2, 5), (6, 4, 3, 3), (1, 18, 0, 3)], {}, "smaller than the dilated kernel", "InvalidShape"),
])
def test_deform_conv_errors(shapes, attrs, match, kind):
    expect_error("DeformConv", [np.zeros(s, np.float32) for s in shapes], attrs, 22, match, kind)


# ------------------------------------------------------------------------------ CenterCropPad

@pytest.mark.parametrize("xs,shape,axes", [
    ((5, 6, 3), [3, 8, 3], None),
    ((5, 6, 3), [8, 3], [0, 1]),
    ((2, 7, 4), [4, 5], [-1, 1]),
    ((3, 1, 9), [6], [2]),
    ((4, 4), [0, 4], None),
])
def test_center_crop_pad_matches_ort(xs, shape, axes):
    x = _rng(17).standard_normal(xs).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    check("CenterCropPad", [x, np.array(shape, np.int64)], attrs, 18)
    check("CenterCropPad", [x.astype(np.int32), np.array(shape, np.int64)], attrs, 18)
    # an int32 ``shape``: onnxruntime's expansion of the function fails to type-check (Max of
    # int64 and int32), so the ONNX reference is the oracle
    check("CenterCropPad", [x, np.array(shape, np.int32)], attrs, 18, oracle=spec_run)


def test_center_crop_pad_strings():
    x = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)
    (got,) = run_node("CenterCropPad", [x, np.array([4, 1], np.int64)], {}, opset=18)
    assert got.tolist() == [[""], ["b"], ["e"], [""]]


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_center_crop_pad_symbolic_one_session(allocator):
    rng = _rng(18)
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    model, _ = one_node_model("CenterCropPad", [x, np.array([6, 4], np.int64)], {"axes": [0, 1]}, 18,
                              dims=[["H", "W", "C"], [2]])
    feeds = [{"in0": rng.standard_normal(s).astype(np.float32), "in1": np.array(t, np.int64)}
             for s, t in (((4, 5, 3), (6, 4)), ((9, 2, 1), (6, 4)), ((9, 2, 1), (3, 7)), ((6, 4, 2), (6, 4)))]
    assert_runs_match_ort(model, feeds, allocator)


def test_center_crop_pad_symbolic_inference():
    h, w, c = sym("H"), sym("W"), sym("C")
    (shape,), _ = infer_symbolic("CenterCropPad", [(h, w, c), (2,)], ["float32", "int64"], {"axes": [0, 1]}, 18,
                                 values=[None, _obj(w, 5)])
    assert shape == (w, 5, c)
    (shape,), _ = infer_symbolic("CenterCropPad", [(h, w, c), (1,)], ["float32", "int64"], {"axes": [-1]}, 18)
    assert shape[:2] == (h, w) and isinstance(shape[2], Expr) and shape[2] != c


@pytest.mark.parametrize("shape,attrs,match,kind", [
    ([3, 3], {}, "shape has 2 values but there are 3 axes", "InvalidShape"),
    ([3, -1], {"axes": [0, 1]}, "must not be negative", "InvalidShape"),
    ([3], {"axes": [3]}, "out of range", "AxisOutOfRange"),
    ([3, 3], {"axes": [1, -2]}, "duplicates", "DuplicateAxes"),
])
def test_center_crop_pad_errors(shape, attrs, match, kind):
    expect_error("CenterCropPad", [np.zeros((2, 3, 4), np.float32), np.array(shape, np.int64)], attrs, 18, match, kind)


# ------------------------------------------------------------------------------ MaxUnpool

def _pool_unpool_model(opset, with_shape):
    """MaxPool -> MaxUnpool; without output_shape the pools have no padding and the inputs are
    shaped so that the inferred unpooled shape is X's (even H, odd W)."""
    pads = [0, 1, 1, 0] if with_shape else [0, 0, 0, 0]
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 3], strides=[2, 2], pads=pads)]
    ins = ["p", "i"] + (["s"] if with_shape else [])
    if with_shape:
        nodes.append(helper.make_node("Shape", ["x"], ["s"]))
    nodes.append(helper.make_node("MaxUnpool", ins, ["y"], kernel_shape=[2, 3], strides=[2, 2], pads=pads))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C", "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("allocator", ALLOCATORS)
@pytest.mark.parametrize("opset,with_shape", [(11, True), (11, False), (9, True), (22, True)])
def test_max_unpool_after_max_pool_one_session(allocator, opset, with_shape):
    """MaxPool -> MaxUnpool(Shape(X)): the unpooled tensor has X's shape, every index in place."""
    model = _pool_unpool_model(max(opset, 12) if opset == 11 else opset, with_shape)
    rng = _rng(19)
    shapes = ((1, 2, 6, 7), (2, 3, 9, 8), (1, 1, 5, 5)) if with_shape else ((1, 2, 6, 7), (2, 3, 10, 9), (1, 1, 4, 5))
    feeds = [{"x": rng.standard_normal(s).astype(np.float32)} for s in shapes]
    sess = assert_runs_match_ort(model, feeds, allocator)
    assert sess.run(None, feeds[1])[0].shape == feeds[1]["x"].shape


def test_max_unpool_output_shape_indexes_the_given_shape():
    """With output_shape the indices are flat positions in a tensor of that shape (the MaxPool
    input), as onnxruntime and the spec's input description say. ONNX's node test
    test_maxunpool_export_with_output_shape (and onnx.reference) instead scatter into the
    shape inferred from the attributes and pad it; onnxruntime excludes that test
    (onnx/onnx#2398)."""
    x = np.array([[[[5, 6], [7, 8]]]], np.float32)
    idx = np.array([[[[5, 7], [13, 15]]]], np.int64)
    got = check("MaxUnpool", [x, idx, np.array([1, 1, 5, 5], np.int64)], {"kernel_shape": [2, 2], "strides": [2, 2]},
                11)
    assert got.reshape(-1)[[5, 7, 13, 15]].tolist() == [5, 6, 7, 8]
    check("MaxUnpool", [x, idx], {"kernel_shape": [2, 2], "strides": [2, 2]}, 9)


def test_max_unpool_symbolic_inference():
    n, c, h, w = (sym(s) for s in "NCHW")
    (shape,), _ = infer_symbolic("MaxUnpool", [(n, c, h, w), (n, c, h, w)], ["float32", "int64"],
                                 {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 0, 0, 1]}, 11)
    assert shape == (n, c, h * 2 - 1, w * 2 - 1)
    (shape,), _ = infer_symbolic("MaxUnpool", [(n, c, h, w), (n, c, h, w), (4,)], ["float32", "int64", "int64"],
                                 {"kernel_shape": [2, 2]}, 22, values=[None, None, _obj(n, c, sym("H0"), 9)])
    assert shape == (n, c, sym("H0"), 9)


def test_max_unpool_errors():
    x, i = np.zeros((1, 1, 2, 2), np.float32), np.zeros((1, 1, 2, 2), np.int64)
    expect_error("MaxUnpool", [x, i], {}, 11, "'kernel_shape' is required", "MissingAttribute")
    expect_error("MaxUnpool", [x, i], {"kernel_shape": [2]}, 11, "expected 2", "InvalidAttribute")
    expect_error("MaxUnpool", [x, np.zeros((1, 1, 2, 3), np.int64)], {"kernel_shape": [2, 2]}, 11, "dim 3 of X and I",
                 "DimMismatch")
    expect_error("MaxUnpool", [x, i, np.array([1, 1, 4], np.int64)], {"kernel_shape": [2, 2]}, 11, "output_shape",
                 "InvalidShape")
    with pytest.raises(dynashape.ShapeInferenceError, match="index 16 in I is out of range") as info:
        run_node("MaxUnpool", [x, np.full((1, 1, 2, 2), 16, np.int64)], {"kernel_shape": [2, 2], "strides": [2, 2]},
                 opset=11)
    assert info.value.kind == "IndexOutOfRange"


# ------------------------------------------------------------------------------ ImageDecoder

def _encode(fmt, h, w, seed=0, mode="RGB"):
    image = pytest.importorskip("PIL.Image")
    rng = _rng(seed)
    arr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    image.fromarray(arr).convert(mode).save(buf, format=fmt)
    return np.frombuffer(buf.getvalue(), np.uint8)


@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "BMP"])
def test_image_decoder_against_reference(pixel_format, fmt):
    stream = _encode(fmt, 7, 11)
    model, feeds = one_node_model("ImageDecoder", [stream], {"pixel_format": pixel_format}, 20)
    want = spec_run(model, feeds)[0]
    (got,) = run_node("ImageDecoder", [stream], {"pixel_format": pixel_format}, opset=20)
    assert got.dtype == np.uint8 and got.shape == (7, 11, 1 if pixel_format == "Grayscale" else 3)
    np.testing.assert_array_equal(got, want)


def test_image_decoder_grayscale_and_rgba_sources_give_the_requested_channels():
    (rgb,) = run_node("ImageDecoder", [_encode("PNG", 4, 5, mode="L")], {}, opset=20)
    assert rgb.shape == (4, 5, 3) and (rgb[..., 0] == rgb[..., 1]).all()
    (gray,) = run_node("ImageDecoder", [_encode("PNG", 4, 5, mode="RGBA")], {"pixel_format": "Grayscale"}, opset=20)
    assert gray.shape == (4, 5, 1)


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_image_decoder_changing_sizes_one_session(allocator):
    model, _ = one_node_model("ImageDecoder", [_encode("PNG", 3, 3)], {"pixel_format": "BGR"}, 20, dims=[["bytes"]])
    sess = dynashape.InferenceSession(model, allocator=allocator)
    streams = [_encode("PNG", h, w, seed=h) for h, w in ((3, 3), (10, 4), (2, 17))] + [np.zeros(9, np.uint8)]
    outs = [sess.run(None, {"in0": s})[0] for s in streams]
    for s, got in zip(streams, outs):
        np.testing.assert_array_equal(got, spec_run(model, {"in0": s})[0] if s.any() else np.zeros((0, 0, 3), np.uint8))


def test_image_decoder_shape_inference_and_errors():
    (shape,), _ = infer_symbolic("ImageDecoder", [(sym("B"),)], ["uint8"], {"pixel_format": "Grayscale"}, 20)
    assert len(shape) == 3 and shape[2] == 1 and all(isinstance(d, Expr) for d in shape[:2])
    expect_error("ImageDecoder", [np.zeros(4, np.uint8)], {"pixel_format": "RGBA"}, 20, "pixel_format",
                 "InvalidAttribute")
    expect_error("ImageDecoder", [np.zeros((2, 2), np.uint8)], {}, 20, "must be 1-D", "InvalidRank")
    expect_error("ImageDecoder", [np.zeros(4, np.int8)], {}, 20, "expected uint8", "InvalidDtype")


def test_image_decoder_without_pillow_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pil(name, *args, **kwargs):
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError("No module named 'PIL'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pil)
    model, feeds = one_node_model("ImageDecoder", [np.zeros(8, np.uint8)], {}, 20, node_name="dec")
    with pytest.raises(dynashape.ExecutionError, match=r"pip install 'dynashape\[image\]'"):
        dynashape.InferenceSession(model).run(None, feeds)


def test_all_versions_registered():
    reg = get_registry()
    for op in ("GridSample", "AffineGrid", "Col2Im", "DeformConv", "CenterCropPad", "MaxUnpool", "ImageDecoder"):
        versions = spec_versions(op)
        assert versions
        for v in versions:
            assert reg.resolve_op("", op, v).since_version == v
