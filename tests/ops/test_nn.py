"""Tests of the nn family: Conv, ConvTranspose, pools, normalisations.

float32 values are checked against onnxruntime on random inputs (rtol 1e-4, atol 1e-5);
float64 and a few cases ORT lacks against onnx.reference.ReferenceEvaluator.
"""
from __future__ import annotations

import itertools

import dynashape
import ml_dtypes
import numpy as np
import onnx
import pytest
from dynashape.dtypes import onnx_type
from dynashape.registry import get_registry
from dynashape.symbolic import evaluate, sym
from dynashape.testing import infer_node, run_node
from onnx import helper
from onnx.reference import ReferenceEvaluator

from tests.conftest import BLAS_SUMS_LIKE_MLAS, expected_outputs, spec_versions, symbolic_infer

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(1234)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _model(op, inputs, attrs, opset, n_out):
    ins = [helper.make_tensor_value_info(f"i{k}", onnx_type(a.dtype), a.shape)
           for k, a in enumerate(inputs) if a is not None]
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    outs = [onnx.ValueInfoProto(name=f"o{k}") for k in range(n_out)]
    node = helper.make_node(op, names, [f"o{k}" for k in range(n_out)], **attrs)
    m = helper.make_model(helper.make_graph([node], "g", ins, outs),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    feeds = {f"i{k}": a for k, a in enumerate(inputs) if a is not None}
    return m, feeds


def expected_ort(op, inputs, attrs, opset, n_out=1):
    m, feeds = _model(op, inputs, attrs, opset, n_out)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def expected_ref(op, inputs, attrs, opset, n_out=1):
    m, feeds = _model(op, inputs, attrs, opset, n_out)
    return ReferenceEvaluator(m).run(None, feeds)


def expected(ort_fixed_in):
    """A ``check`` ref: onnxruntime, or the ONNX spec on an onnxruntime older than ``ort_fixed_in``."""
    def ref(op, inputs, attrs, opset, n_out=1):
        m, feeds = _model(op, inputs, attrs, opset, n_out)
        return expected_outputs(m, feeds, ort_fixed_in)
    return ref


def check(op, inputs, attrs, *, opset=21, n_out=1, ref=expected_ort, rtol=1e-4, atol=1e-5):
    exp = ref(op, inputs, attrs, opset, n_out)
    got = run_node(op, inputs, attrs, opset=opset, n_outputs=n_out)
    assert len(got) == n_out
    for e, g in zip(exp, got):
        e = np.asarray(e)
        assert g.shape == e.shape
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol)
    return got


def infer_symbolic(op, shapes, dtypes, attrs, opset=21, n_out=1):
    return symbolic_infer(op, shapes, dtypes, None, attrs, opset=opset, n_outputs=n_out)[0]


# ------------------------------------------------------------------------------ Conv

CONV_CASES = [
    ((2, 4, 9, 10), (6, 4, 3, 3), True, {}),
    ((2, 4, 9, 10), (6, 4, 3, 3), True, {"pads": [1, 2, 0, 1], "strides": [2, 1], "dilations": [1, 2]}),
    ((2, 4, 9, 10), (6, 2, 3, 3), False, {"group": 2, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((2, 4, 9, 10), (6, 2, 3, 3), False, {"group": 2, "auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((2, 4, 9, 10), (6, 4, 2, 3), False, {"auto_pad": "VALID", "strides": [2, 2]}),
    ((2, 4, 9, 10), (8, 1, 3, 3), True, {"group": 4, "pads": [1, 1, 1, 1]}),            # multiplier 2
    ((2, 4, 9, 10), (4, 1, 3, 3), True, {"group": 4, "pads": [1, 1, 1, 1]}),            # depthwise
    ((2, 4, 9, 10), (4, 1, 3, 3), False, {"group": 4, "pads": [0, 1, 2, 1], "strides": [2, 3],
                                          "dilations": [2, 1]}),
    ((1, 4, 9, 10), (4, 1, 5, 5), True, {"group": 4, "auto_pad": "SAME_UPPER"}),
    ((2, 4, 9), (8, 4, 3), True, {"strides": [2], "pads": [1, 0]}),                       # 1-D
    ((1, 3, 5, 6, 7), (4, 3, 2, 3, 2), True, {"pads": [1, 0, 1, 0, 1, 1]}),                # 3-D
    ((1, 3, 5, 6), (4, 3, 1, 1), True, {}),                                                # pointwise
    ((1, 3, 5, 6), (4, 3, 1, 1), False, {"strides": [2, 2]}),
    ((2, 3, 7, 8), (5, 3, 3, 3), False, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize("xs,ws,bias,attrs", CONV_CASES)
def test_conv_matches_ort(xs, ws, bias, attrs):
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[0])] if bias else [])
    check("Conv", inputs, attrs)


def test_conv_banded_im2col(monkeypatch):
    from dynashape.ops_builtin import nn
    monkeypatch.setattr(nn, "_COLS_BYTES", 2000)
    for xs, ws, bias, attrs in CONV_CASES:
        inputs = [rand(*xs), rand(*ws)] + ([rand(ws[0])] if bias else [])
        check("Conv", inputs, attrs)


def test_numpy_depthwise_conv_in_channel_blocks(monkeypatch):
    """The numpy depthwise kernel over blocks of channels of one image (here 2 channels per
    block, the last one short) equals onnxruntime, through changing shapes on one session."""
    from dynashape.ops_builtin import nn
    monkeypatch.setattr(nn, "_DEPTHWISE_BLOCK_BYTES", 2 * 9 * 10 * 4)
    w, b = rand(5, 1, 3, 3), rand(5)
    m, _ = _model("Conv", [rand(2, 5, 9, 10), w, b], {"group": 5, "pads": [1, 0, 1, 2]}, 17, 1)
    x_dims = m.graph.input[0].type.tensor_type.shape.dim
    for d, name in zip(x_dims, ("n", "c", "h", "w")):
        if name != "c":
            d.dim_param = name
    data = m.SerializeToString()
    sess = dynashape.InferenceSession(data, compiled_kernels=False)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for shape in ((2, 5, 9, 10), (3, 5, 4, 7), (1, 5, 9, 10)):
        feeds = {"i0": rand(*shape), "i1": w, "i2": b}
        np.testing.assert_allclose(sess.run(None, feeds)[0], ref.run(None, feeds)[0], rtol=1e-5, atol=1e-5)


#: kernels of 16 taps or more without padding: the numpy kernel's columns are one strided copy
WINDOW_CASES = [
    ((2, 1, 700), (9, 1, 64), {"strides": [32]}),                                        # an STFT as Conv
    ((1, 1, 640), (258, 1, 256), {"strides": [128]}),                                    # silero's
    ((3, 4, 17, 15), (6, 2, 5, 4), {"group": 2, "strides": [2, 1], "dilations": [2, 1]}),
    ((2, 3, 6, 7, 5), (4, 3, 3, 3, 2), {"strides": [1, 2, 1]}),                         # 3-D, 18 taps
    ((2, 3, 9, 10), (4, 3, 4, 4), {"pads": [1, 2, 1, 0]}),                              # padded: per tap
    ((0, 2, 40), (3, 2, 20), {}),                                                        # empty batch
]


@pytest.mark.parametrize("banded", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", WINDOW_CASES)
def test_conv_long_kernel_columns_in_one_strided_copy(xs, ws, attrs, banded, monkeypatch):
    """A kernel of many taps (a 1-D STFT as a Conv: 256 taps) builds its im2col columns in one
    copy of a strided view of X instead of one slice assignment per tap (240 -> ~40 us for
    silero's); float32 against onnxruntime, float64 against the spec's reference, with the
    compiled kernels on and off and in bands of output rows."""
    from dynashape.ops_builtin import nn
    if banded:
        monkeypatch.setattr(nn, "_COLS_BYTES", 3000)
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    m, feeds = _model("Conv", [x, w, b], attrs, 17, 1)
    data = m.SerializeToString()
    exp = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    for compiled in (False, True):
        got = dynashape.InferenceSession(data, compiled_kernels=compiled).run(None, feeds)[0]
        np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-4)
    m64, feeds64 = _model("Conv", [x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)], attrs, 17, 1)
    got64 = dynashape.InferenceSession(m64.SerializeToString(), compiled_kernels=False).run(None, feeds64)[0]
    np.testing.assert_allclose(got64, ReferenceEvaluator(m64).run(None, feeds64)[0], rtol=1e-10, atol=1e-10)


def test_conv_window_columns_are_the_numpy_kernels_plan_only_without_padding():
    """The one-copy columns are planned for a long kernel whose band reads no padding; a short
    kernel or a padded band keeps its per-tap copies."""
    from dynashape.ops_builtin import nn
    geometry = nn._Geometry
    unpadded = nn._conv_bands((1, 1, 640), (4,), geometry((256,), (128,), (1,), (0,), None, (4,)), 1, 258, 256, 4)
    padded = nn._conv_bands((1, 1, 640), (6,), geometry((256,), (128,), (1,), (128,), None, (6,)), 1, 258, 256, 4)
    short = nn._conv_bands((1, 1, 640), (638,), geometry((3,), (1,), (1,), (0,), None, (638,)), 1, 8, 3, 4)
    assert unpadded[0].window == ((0,), (256,), (128,), (1,)) and unpadded[0].taps == ()
    assert padded[0].window is None and len(padded[0].taps) == 256
    assert short[0].window is None and len(short[0].taps) == 3


@pytest.mark.parametrize("pixels,depth,block", [
    (256, 288, 128), (4096, 147, 128), (64, 288, 256), (32, 100, 512), (16, 576, 1024),
    (4, 1152, 1024), (300, 300, 128), (8, 64, 1024)])
def test_conv_reduction_block_follows_mlas(pixels, depth, block):
    """MLAS's K stride: 128, doubled while its N stride (128) can halve with N/2 >= pixels
    and N > 16, only when pixels < depth (hand-computed from MlasConvOperation)."""
    from dynashape.ops_builtin import nn
    assert nn._reduction_block(pixels, depth) == block


#: Conv reductions (C/G * taps) longer than 128, with the MLAS blocks they are summed in.
#: Output columns (N * pixels) are multiples of 16: OpenBLAS's small-matrix kernels sum a
#: ragged edge of fewer than 16 columns in another order (an ulp off now and then).
LONG_REDUCTIONS = [
    ((2, 32, 16, 16), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}),              # 288 = 128 + 128 + 32
    ((2, 64, 8, 8), (16, 32, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),    # 64 pixels: 256 + 32
    ((1, 300, 12, 12), (16, 300, 1, 1), {}),                                 # pointwise: 128 + 128 + 44
    ((16, 20, 15, 9), (8, 20, 3, 3), {"strides": [2, 1]}),                   # 49 pixels: one block of 180
]


def _ort_single_thread(op, inputs, attrs):
    m, feeds = _model(op, inputs, attrs, 21, 1)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


@pytest.mark.parametrize("banded", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", LONG_REDUCTIONS)
def test_conv_long_reduction_is_bit_identical_with_onnxruntime(xs, ws, attrs, banded, monkeypatch):
    """Regression (zoo2 quant/resnet_tiny_qdq): summed in one chain, a K=288 Conv was an ulp off
    onnxruntime's at a few outputs, and a QDQ model turned one of them into a whole
    quantization step. Blocked as MLAS blocks it, the float32 result is bit-identical where
    numpy's BLAS sums each block in one FMA chain as MLAS does (``BLAS_SUMS_LIKE_MLAS``:
    OpenBLAS's SkylakeX kernels on x86); summed in one chain (the first three) or in blocks
    of 128 (the last), each case here differs at hundreds of outputs."""
    from dynashape.ops_builtin import nn
    if banded:
        monkeypatch.setattr(nn, "_COLS_BYTES", 20000)
    inputs = [rand(*xs), rand(*ws), rand(ws[0])]
    exp = _ort_single_thread("Conv", inputs, attrs)
    (got,) = run_node("Conv", inputs, attrs, opset=21)
    if BLAS_SUMS_LIKE_MLAS:
        np.testing.assert_array_equal(got, exp)
    else:
        np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-4)   # sums of ~300 terms of size ~1


@pytest.mark.parametrize("opset", [1, 11, 22])
def test_conv_versions_and_float64(opset):
    inputs = [rand(1, 2, 6, 5, dtype=np.float64), rand(3, 2, 3, 3, dtype=np.float64),
              rand(3, dtype=np.float64)]
    check("Conv", inputs, {"pads": [1, 1, 1, 1]}, opset=opset, ref=expected_ref, rtol=1e-10, atol=1e-10)


def test_conv_float16_and_bfloat16():
    x, w = rand(1, 2, 6, 5), rand(3, 2, 3, 3)
    (y32,) = run_node("Conv", [x, w], {})
    (y16,) = run_node("Conv", [x.astype(np.float16), w.astype(np.float16)], {})
    assert y16.dtype == np.float16
    np.testing.assert_allclose(y16.astype(np.float32), y32, rtol=2e-2, atol=2e-2)
    bf = np.dtype(ml_dtypes.bfloat16)
    (ybf,) = run_node("Conv", [x.astype(bf), w.astype(bf)], {}, opset=22)
    assert ybf.dtype == bf
    np.testing.assert_allclose(ybf.astype(np.float32), y32, rtol=5e-2, atol=1e-1)


def test_conv_symbolic_shapes():
    n, h, w = sym("N"), sym("H"), sym("W")
    (shape,) = infer_symbolic("Conv", [(n, 3, h, w), (8, 3, 3, 3)], ["float32"] * 2,
                              {"pads": [1, 1, 1, 1], "strides": [2, 2]})
    assert shape == (n, 8, (h - 1) // 2 + 1, (w - 1) // 2 + 1)
    (shape,) = infer_symbolic("Conv", [(n, 3, h, w), (8, 3, 3, 3)], ["float32"] * 2,
                              {"auto_pad": "SAME_UPPER", "strides": [2, 2]})
    assert shape == (n, 8, (h + 1) // 2, (w + 1) // 2)


def test_conv_errors():
    x, w = rand(1, 4, 5, 5), rand(6, 4, 3, 3)
    with pytest.raises(dynashape.ShapeInferenceError, match="input channels 4 must equal"):
        infer_node("Conv", [x, rand(6, 3, 3, 3)])
    with pytest.raises(dynashape.ShapeInferenceError, match="divisible by group"):
        infer_node("Conv", [x, rand(5, 2, 3, 3)], {"group": 2})
    with pytest.raises(dynashape.ShapeInferenceError, match="bias B must have shape"):
        infer_node("Conv", [x, w, rand(5)])
    with pytest.raises(dynashape.ShapeInferenceError, match="rank"):
        infer_node("Conv", [x, rand(6, 4, 3)])
    with pytest.raises(dynashape.ShapeInferenceError, match="kernel_shape .* does not match"):
        infer_node("Conv", [x, w], {"kernel_shape": [2, 2]})
    with pytest.raises(dynashape.ShapeInferenceError, match="'pads' has 2 values, expected 4"):
        infer_node("Conv", [x, w], {"pads": [1, 1]})
    with pytest.raises(dynashape.ShapeInferenceError, match="auto_pad 'SAME' is not one of"):
        infer_node("Conv", [x, w], {"auto_pad": "SAME"})
    with pytest.raises(dynashape.ShapeInferenceError, match="shorter than the kernel extent 3: -1 windows"):
        infer_node("Conv", [rand(1, 4, 1, 1), w])
    # one short of the kernel: the spec's floor((2 - 3) / 1) + 1 = 0 windows, an empty output
    assert infer_node("Conv", [rand(1, 4, 2, 2), w])[0] == [(1, 6, 0, 0)]
    with pytest.raises(dynashape.ShapeInferenceError, match="'strides' .* must be >= 1"):
        infer_node("Conv", [x, w], {"strides": [0, 1]})


def test_conv_empty_batch():
    (y,) = run_node("Conv", [rand(0, 2, 5, 5), rand(3, 2, 3, 3), rand(3)], {"pads": [1, 1, 1, 1]})
    assert y.shape == (0, 3, 5, 5)
    (y,) = run_node("Conv", [rand(0, 2, 5, 5), rand(2, 1, 3, 3)], {"group": 2})
    assert y.shape == (0, 2, 3, 3)


# ------------------------------------------------------------------------------ ConvTranspose

CONVT_CASES = [
    ((2, 4, 5, 6), (4, 3, 3, 3), True, {}),
    ((2, 4, 5, 6), (4, 3, 3, 3), True, {"strides": [2, 2], "pads": [1, 0, 1, 2], "output_padding": [1, 0]}),
    ((2, 4, 5, 6), (4, 3, 2, 2), True, {"strides": [2, 2]}),                      # tiling
    ((2, 4, 5, 6), (4, 2, 3, 3), False, {"strides": [2, 2], "group": 2, "dilations": [2, 1]}),
    ((2, 4, 5, 6), (4, 2, 3, 3), False, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((2, 4, 5, 6), (4, 2, 3, 3), False, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((2, 4, 5, 6), (4, 2, 3, 3), False, {"strides": [3, 2], "output_shape": [16, 12]}),
    ((2, 4, 5, 6), (4, 2, 3, 3), False, {"strides": [3, 2], "output_shape": [14, 12]}),
    ((2, 4, 5), (4, 2, 3), True, {"strides": [3]}),                                # 1-D
    ((1, 2, 3, 4, 3), (2, 3, 2, 2, 3), False, {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1]}),  # 3-D
    ((2, 4, 5, 6), (4, 1, 3, 3), True, {"group": 4, "strides": [2, 2]}),           # depthwise
]


@pytest.mark.parametrize("xs,ws,bias,attrs", CONVT_CASES)
def test_conv_transpose_matches_ort(xs, ws, bias, attrs):
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[1] * attrs.get("group", 1))] if bias else [])
    check("ConvTranspose", inputs, attrs)


def test_conv_transpose_float64_reference():
    inputs = [rand(1, 2, 4, 4, dtype=np.float64), rand(2, 3, 3, 3, dtype=np.float64)]
    check("ConvTranspose", inputs, {"strides": [2, 2], "output_padding": [1, 1]}, opset=11,
          ref=expected_ref, rtol=1e-10, atol=1e-10)


def test_conv_transpose_shapes_and_errors():
    shapes, dtypes = infer_node("ConvTranspose", [rand(1, 4, 5, 6), rand(4, 3, 3, 3)],
                                {"strides": [2, 2], "output_shape": [1, 3, 11, 13]})
    assert shapes == [(1, 3, 11, 13)] and dtypes == [np.float32]
    h = sym("H")
    (shape,) = infer_symbolic("ConvTranspose", [(1, 4, h, 6), (4, 3, 3, 3)], ["float32"] * 2,
                              {"strides": [2, 2]})
    assert shape == (1, 3, 2 * h + 1, 13)
    (shape,) = infer_symbolic("ConvTranspose", [(1, 4, h, 6), (4, 3, 3, 3)], ["float32"] * 2,
                              {"strides": [2, 2], "auto_pad": "SAME_UPPER"})
    assert shape == (1, 3, 2 * h, 12)
    with pytest.raises(dynashape.ShapeInferenceError, match="must equal W.shape\\[0\\]"):
        infer_node("ConvTranspose", [rand(1, 4, 5, 6), rand(3, 3, 3, 3)])
    with pytest.raises(dynashape.ShapeInferenceError, match="output_padding"):
        infer_node("ConvTranspose", [rand(1, 4, 5, 6), rand(4, 3, 3, 3)], {"output_padding": [1, 1]})
    with pytest.raises(dynashape.ShapeInferenceError, match="bias B"):
        infer_node("ConvTranspose", [rand(1, 4, 5, 6), rand(4, 3, 3, 3), rand(4)])


# ------------------------------------------------------------------------------ pools

POOL_ATTRS = [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2]},
    {"kernel_shape": [2, 2], "auto_pad": "VALID", "strides": [2, 2]},
    {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 0, 1, 1]},
]


@pytest.mark.parametrize("attrs", POOL_ATTRS)
def test_max_pool_matches_ort(attrs):
    x = rand(2, 3, 9, 10)
    check("MaxPool", [x], attrs)
    check("MaxPool", [x], attrs, n_out=2)
    check("MaxPool", [x], dict(attrs, storage_order=1), n_out=2)


@pytest.mark.parametrize("attrs", POOL_ATTRS)
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool_matches_ort(attrs, include_pad):
    # With count_include_pad=1, onnxruntime < 1.25 ends the height window at pads[1] (width's
    # begin pad) instead of pads[2], dividing by a wrong count on asymmetric pads:
    # https://github.com/microsoft/onnxruntime/pull/27375
    ref = expected(ort_fixed_in=(1, 25) if include_pad else None)
    check("AveragePool", [rand(2, 3, 9, 10)], dict(attrs, count_include_pad=include_pad), ref=ref)


@pytest.mark.parametrize("attrs", POOL_ATTRS[:4])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_matches_ort(attrs, p):
    check("LpPool", [rand(2, 3, 9, 10)], dict(attrs, p=p), opset=18)


def test_pools_1d_3d_and_versions():
    check("MaxPool", [rand(2, 3, 11)], {"kernel_shape": [3], "strides": [2]}, n_out=2)
    check("AveragePool", [rand(2, 3, 11)], {"kernel_shape": [3], "pads": [1, 1]}, opset=7)
    check("MaxPool", [rand(1, 2, 5, 6, 7)], {"kernel_shape": [2, 3, 2], "pads": [1, 0, 1, 0, 1, 1]}, n_out=2)
    check("AveragePool", [rand(1, 2, 5, 6, 7)], {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]})
    check("MaxPool", [rand(1, 2, 6, 6)], {"kernel_shape": [2, 2]}, opset=1, ref=expected_ref)
    check("AveragePool", [rand(1, 2, 6, 6)], {"kernel_shape": [2, 2]}, opset=1, ref=expected_ref)
    check("LpPool", [rand(1, 2, 6, 6)], {"kernel_shape": [2, 2], "p": 2}, opset=11)


def test_max_pool_int8_uint8_float16():
    for dt in (np.int8, np.uint8):
        x = RNG.integers(0, 100, (1, 2, 6, 7)).astype(dt)
        check("MaxPool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}, opset=12)
    x = rand(1, 2, 6, 7, dtype=np.float16)
    check("MaxPool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, rtol=0, atol=0)
    check("AveragePool", [x], {"kernel_shape": [3, 3]}, rtol=1e-2, atol=1e-2)


def test_pool_float64_reference():
    x = rand(1, 2, 7, 6, dtype=np.float64)
    check("AveragePool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
          ref=expected_ref, rtol=1e-10, atol=1e-12)
    check("MaxPool", [x], {"kernel_shape": [3, 3], "dilations": [2, 1]}, ref=expected_ref)


def test_pool_symbolic_and_errors():
    n, h = sym("N"), sym("H")
    shapes = infer_symbolic("MaxPool", [(n, 3, h, 10)], ["float32"],
                            {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, n_out=2)
    assert shapes[0] == (n, 3, (h - 1) // 2 + 1, 5) and shapes[1] == shapes[0]
    (shape,) = infer_symbolic("AveragePool", [(n, 3, h, 10)], ["float32"],
                              {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"})
    assert shape == (n, 3, (h + 1) // 2, 5)
    assert infer_node("MaxPool", [rand(1, 1, 4, 4)], {"kernel_shape": [2, 2]}, n_outputs=2)[1] == \
        [np.float32, np.int64]
    x = rand(1, 2, 5, 5)
    with pytest.raises(dynashape.ShapeInferenceError, match="'kernel_shape' is required"):
        infer_node("MaxPool", [x], {})
    with pytest.raises(dynashape.ShapeInferenceError, match="kernel_shape .* expected 2"):
        infer_node("AveragePool", [x], {"kernel_shape": [2]})
    with pytest.raises(dynashape.ShapeInferenceError, match="'dilations' is not defined"):
        infer_node("AveragePool", [x], {"kernel_shape": [2, 2], "dilations": [2, 2]}, opset=11)
    with pytest.raises(dynashape.ShapeInferenceError, match="rank >= 3"):
        infer_node("MaxPool", [rand(2, 5)], {"kernel_shape": [2]})
    with pytest.raises(dynashape.ShapeInferenceError, match="expected a floating-point"):
        infer_node("AveragePool", [x.astype(np.int32)], {"kernel_shape": [2, 2]})
    with pytest.raises(dynashape.ShapeInferenceError, match="not allowed"):
        infer_node("MaxPool", [x.astype(np.int32)], {"kernel_shape": [2, 2]})


def test_ceil_mode_last_window_starting_in_the_right_padding_is_dropped_for_symbolic_dims():
    """ceil_mode: the last window must start inside the input or the left padding (onnx PR
    #5741): k2 s2 pads 1 on H=5 gives 3 windows, not 4 (the fourth would be all padding).
    With symbolic H/W the correction is part of the output dim's expression, so every
    signature gets it from the symbolic plan (it used to apply to int dims only)."""
    vi = helper.make_tensor_value_info
    f = onnx.TensorProto.FLOAT
    ceil = {"ceil_mode": 1}
    nodes = [helper.make_node("MaxPool", ["x"], ["mp"], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
                              **ceil),
             helper.make_node("AveragePool", ["x"], ["ap"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1], count_include_pad=0, **ceil),
             helper.make_node("AveragePool", ["x"], ["apd"], kernel_shape=[2, 2], strides=[3, 2],
                              pads=[1, 0, 1, 1], dilations=[2, 2], count_include_pad=1, **ceil),
             helper.make_node("MaxPool", ["x"], ["mpd"], kernel_shape=[2, 2], strides=[3, 2], pads=[0, 0, 1, 1],
                              dilations=[2, 1], **ceil),
             helper.make_node("LpPool", ["x"], ["lp"], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
                              p=2, **ceil)]
    outs = ["mp", "ap", "apd", "mpd", "lp"]
    graph = helper.make_graph(nodes, "g", [vi("x", f, ["N", "C", "H", "W"])], [vi(o, f, None) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 8
    sizes = [(5, 5), (4, 7), (1, 1), (7, 2), (6, 9), (5, 3), (8, 8)]
    runs = [{"x": rand(1, 2, h, w)} for h, w in sizes] + [{"x": rand(0, 2, 5, 5)}]
    sess = dynashape.InferenceSession(model)
    ort_sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    reference = ReferenceEvaluator(model)
    # onnxruntime 1.23 divides a dilated count_include_pad window that reaches into the end
    # padding by its input elements only (1.32 agrees with the spec's reference)
    ort_apd_ok = tuple(int(p) for p in ort.__version__.split(".")[:2]) >= (1, 32)
    for k, feeds in enumerate(runs):
        got, want = sess.run(None, feeds), ort_sess.run(None, feeds)
        if not ort_apd_ok:
            want[2] = reference.run(None, feeds)[2]
        for name, g, w in zip(outs, got, want):
            assert g.shape == w.shape, (k, name, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"run {k} {name}")
        if k == 0:   # H=W=5: 3 windows, not 4 (onnx #5711); the 4th would be all padding
            assert got[0].shape == (1, 2, 3, 3) and np.isfinite(got[0]).all()
    assert (sess.stats.symbolic_plans, sess.stats.resolved_plans) == (len(runs), 0)
    h = sym("H")
    (shape,) = infer_symbolic("MaxPool", [(1, 1, h, 4)], ["float32"],
                              {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1})
    assert [evaluate(shape[2], {"H": v}) for v in (1, 2, 3, 4, 5, 6, 7)] == [1, 2, 2, 3, 3, 4, 4]
    assert shape[3] == 3
    for k, s, pb, pe, dil in itertools.product((1, 2, 3), (1, 2, 3), (0, 1, 2), (0, 1, 2), (1, 2)):
        if max(pb, pe) >= k:
            continue
        (shape,) = infer_symbolic("MaxPool", [(1, 1, h)], ["float32"], {
            "kernel_shape": [k], "strides": [s], "pads": [pb, pe], "dilations": [dil], "ceil_mode": 1})
        for size in range((k - 1) * dil + 1, 14):
            # onnx.reference's get_output_shape_explicit_padding (onnx PR #5741)
            out = int(np.ceil((size + pb + pe - (k - 1) * dil - 1) / s + 1))
            out -= (out - 1) * s >= size + pb
            assert evaluate(shape[2], {"H": size}) == out, (k, s, pb, pe, dil, size)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_global_pools(op):
    check(op, [rand(2, 3, 5, 6)], {})
    check(op, [rand(2, 3, 7)], {})
    for x, opset in ((rand(2, 3, 7), 1), (rand(1, 2, 3, 4, 5, dtype=np.float64), 22)):
        (y,) = run_node(op, [x], {}, opset=opset)
        axes = tuple(range(2, x.ndim))
        hand = {"GlobalAveragePool": x.mean(axes), "GlobalMaxPool": x.max(axes),
                "GlobalLpPool": np.sqrt((x * x).sum(axes))}[op]
        assert y.dtype == x.dtype and y.shape == x.shape[:2] + (1,) * len(axes)
        np.testing.assert_allclose(y.reshape(hand.shape), hand, rtol=1e-6, atol=1e-7)
    (y,) = run_node(op, [rand(2, 3, 4, 4, dtype=np.float16)], {})
    assert y.shape == (2, 3, 1, 1) and y.dtype == np.float16
    with pytest.raises(dynashape.ShapeInferenceError, match="rank >= 3"):
        infer_node(op, [rand(2, 3)])


# ------------------------------------------------------------------------------ normalisations

@pytest.mark.parametrize("opset", [6, 7, 9, 14, 15])
def test_batch_norm_inference(opset):
    x = rand(2, 3, 5, 6)
    params = [rand(3), rand(3), rand(3), np.abs(rand(3)) + 0.1]
    attrs = {"epsilon": 1e-3}
    if opset < 7:
        attrs["is_test"] = 1
    check("BatchNormalization", [x] + params, attrs, opset=opset, ref=expected_ref if opset < 7 else expected_ort)
    check("BatchNormalization", [rand(4, 3)] + params, {}, opset=max(opset, 7))


def test_batch_norm_spatial0_and_training():
    x = rand(2, 3, 4)
    params = [rand(3, 4), rand(3, 4), rand(3, 4), np.abs(rand(3, 4)) + 0.1]
    scale, b, mean, var = params
    (y,) = run_node("BatchNormalization", [x] + params, {"spatial": 0}, opset=7)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-5) * scale + b, rtol=1e-5, atol=1e-6)
    x = rand(4, 3, 5, 5)
    params = [rand(3), rand(3), rand(3), np.abs(rand(3)) + 0.1]
    check("BatchNormalization", [x] + params, {"training_mode": 1, "momentum": 0.8}, opset=15, n_out=3,
          ref=expected_ref, rtol=1e-4, atol=1e-5)
    with pytest.raises(dynashape.ShapeInferenceError, match="training_mode=1"):
        infer_node("BatchNormalization", [x] + params, {}, opset=15, n_outputs=3)
    with pytest.raises(dynashape.ShapeInferenceError, match="scale must have shape"):
        infer_node("BatchNormalization", [x, rand(4)] + params[1:], {}, opset=15)


def test_batch_norm_half_types():
    x = rand(2, 3, 4, 4)
    params = [rand(3), rand(3), rand(3), np.abs(rand(3)) + 0.1]
    (y32,) = run_node("BatchNormalization", [x] + params, {}, opset=15)
    (y16,) = run_node("BatchNormalization", [x.astype(np.float16)] + params, {}, opset=15)
    assert y16.dtype == np.float16
    np.testing.assert_allclose(y16.astype(np.float32), y32, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("opset", [1, 6, 22])
def test_instance_norm(opset):
    check("InstanceNormalization", [rand(2, 3, 5, 6), rand(3), rand(3)], {"epsilon": 1e-3},
          opset=max(opset, 6))
    check("InstanceNormalization", [rand(2, 3, 7, dtype=np.float64), rand(3, dtype=np.float64),
                                    rand(3, dtype=np.float64)], {}, opset=opset, ref=expected_ref, rtol=1e-9)
    with pytest.raises(dynashape.ShapeInferenceError, match="scale must have shape"):
        infer_node("InstanceNormalization", [rand(2, 3, 5), rand(4), rand(3)], opset=opset)


@pytest.mark.parametrize("axis", [-1, -2, 1, 0])
def test_layer_norm(axis):
    x = rand(2, 3, 5, 6)
    norm_shape = x.shape[axis % 4:]
    check("LayerNormalization", [x, rand(*norm_shape), rand(*norm_shape)], {"axis": axis}, opset=17, n_out=3)
    check("LayerNormalization", [x, rand(*norm_shape)], {"axis": axis, "epsilon": 1e-2}, opset=17)


def test_layer_norm_dtypes_and_errors():
    x = rand(2, 4, 8)
    y, mean, inv = run_node("LayerNormalization", [x.astype(np.float16), rand(8).astype(np.float16)], {},
                            opset=17, n_outputs=3)
    assert y.dtype == np.float16 and mean.dtype == np.float32 and inv.dtype == np.float32
    assert mean.shape == (2, 4, 1)
    check("LayerNormalization", [x.astype(np.float64), rand(8, dtype=np.float64)], {}, opset=17,
          ref=expected_ref, rtol=1e-9)
    with pytest.raises(dynashape.ShapeInferenceError, match="out of range"):
        infer_node("LayerNormalization", [x, rand(8)], {"axis": 3}, opset=17)
    with pytest.raises(dynashape.ShapeInferenceError, match="not broadcastable"):
        infer_node("LayerNormalization", [x, rand(5)], {}, opset=17)


def test_group_norm():
    x = rand(2, 6, 4, 5)
    check("GroupNormalization", [x, rand(6), rand(6)], {"num_groups": 3, "epsilon": 1e-3}, opset=21)
    check("GroupNormalization", [x, rand(3), rand(3)], {"num_groups": 3}, opset=18, ref=expected_ref,
          rtol=1e-4, atol=1e-5)
    with pytest.raises(dynashape.ShapeInferenceError, match="divisible by num_groups"):
        infer_node("GroupNormalization", [x, rand(4), rand(4)], {"num_groups": 4}, opset=21)
    with pytest.raises(dynashape.ShapeInferenceError, match="scale must have shape"):
        infer_node("GroupNormalization", [x, rand(3), rand(3)], {"num_groups": 3}, opset=21)
    with pytest.raises(dynashape.ShapeInferenceError, match="'num_groups' is required"):
        infer_node("GroupNormalization", [x, rand(6), rand(6)], {}, opset=21)


def test_all_versions_registered():
    reg = get_registry()
    for op in ("Conv", "ConvTranspose", "AveragePool", "MaxPool", "GlobalAveragePool", "GlobalMaxPool",
               "LpPool", "GlobalLpPool", "BatchNormalization", "InstanceNormalization",
               "LayerNormalization", "GroupNormalization"):
        for v in spec_versions(op):
            assert reg.resolve_op("", op, v).since_version == v
