"""QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, ConvInteger and QLinearConv
against onnxruntime, the ONNX reference evaluator and hand-computed values: every
granularity (per tensor, per axis, blocked), the quantized types (int8..uint16, int4, int2,
float8, float4, float6), rounding ties, saturation, the opset 23 precision rules, symbolic
shapes through changing inputs on one session (both allocators), and the errors."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from dynashape.registry import get_registry
from dynashape.symbolic import sym
from dynashape.testing import infer_node, infer_symbolic, run_node

from tests.conftest import assert_runs_match_ort, expected_outputs, spec_node_outputs, spec_run

RNG = np.random.default_rng(7)
# The first onnxruntime releases that run these cases right; older ones are compared with the
# ONNX spec (onnx.reference, or by hand where it is wrong too) instead.
#: QuantizeLinear-23 has no kernel: https://github.com/microsoft/onnxruntime/issues/25932
ORT_QUANTIZE_23 = (1, 24)
#: float8 outputs cannot be returned to numpy ("No corresponding Numpy type"; no issue found)
ORT_FLOAT8_OUTPUTS = (1, 24)
#: ConvInteger lacks uint8 x with int8 w: https://github.com/microsoft/onnxruntime/pull/26585
ORT_CONV_INTEGER_S8_WEIGHTS = (1, 24)
#: QLinearConv rejects per-channel uint8 weights whose zero points differ:
#: https://github.com/microsoft/onnxruntime/issues/28447
ORT_QLINEAR_CONV_U8_ZERO_POINTS = (1, 27)
#: QuantizeLinear on float16 input truncates the quotient instead of rounding it:
#: https://github.com/microsoft/onnxruntime/pull/32452
ORT_QUANTIZE_FLOAT16 = (1, 30)
#: QuantizeLinear-23 with a y_scale type other than x's fails (tensor type mismatch):
#: https://github.com/microsoft/onnxruntime/issues/32719
ORT_QUANTIZE_HALF_SCALE = (1, 32)
F8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz]
ALLOCATORS = ("pool", "naive")


def _elem(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _model(op, feeds: dict, consts: dict, attrs: dict, opset: int, outputs, dims=None, names=None):
    """One ``op`` node: graph inputs ``feeds`` (declared with ``dims[name]`` when given),
    initializers ``consts``; ``names`` orders the node's inputs ("" for an absent one);
    ``outputs`` lists the output dtypes."""
    dims = dims or {}
    names = names if names is not None else [*feeds, *consts]
    outs = [f"y{i}" for i in range(len(outputs))]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, name=f"{op}_node", **attrs)], "g",
        [helper.make_tensor_value_info(n, _elem(x.dtype), dims.get(n, x.shape)) for n, x in feeds.items()],
        [helper.make_tensor_value_info(o, _elem(dt), None) for o, dt in zip(outs, outputs)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 21 else 10
    return model


def _both(op, x, params: list, attrs: dict, opset: int, out_dtype, ort_fixed_in=None, spec=None):
    """(dynashape, onnxruntime) outputs of one node whose parameters are initializers; the
    spec's (``expected_outputs``) on an onnxruntime older than ``ort_fixed_in``."""
    consts = {f"p{i}": p for i, p in enumerate(params) if p is not None}
    names = ["x"] + [f"p{i}" if p is not None else "" for i, p in enumerate(params)]
    model = _model(op, {"x": x}, consts, attrs, opset, [out_dtype], names=names)
    (got,) = dynashape.InferenceSession(model).run(None, {"x": x})
    (want,) = expected_outputs(model, {"x": x}, ort_fixed_in, spec=spec)
    return got, want


def _params(kind: str, dtype, x_shape, axis: int = 1, block: int = 0, scale_dtype=np.float32):
    """(scale, zero point) for a granularity: 'tensor', 'axis' or 'blocked'."""
    info = ml_dtypes.iinfo(dtype)
    if kind == "tensor":
        shape = ()
    elif kind == "axis":
        shape = (x_shape[axis],)
    else:
        shape = tuple(-(-d // block) if j == axis % len(x_shape) else d for j, d in enumerate(x_shape))
    scale = (RNG.random(shape) * 0.5 + 0.05).astype(scale_dtype)
    zp = RNG.integers(info.min, info.max // 2 + 1, shape).astype(dtype)
    return np.asarray(scale), np.asarray(zp)


def _x(shape, spread=40.0):
    x = (RNG.standard_normal(shape) * spread).astype(np.float32)
    flat = x.reshape(-1)
    flat[:8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e6, -1e6][:flat.size]  # ties and saturation
    return x


def test_registered_versions():
    reg = get_registry()
    versions = {op: sorted(d.since_version for d in reg.schemas("", op))
                for op in ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "ConvInteger",
                           "QLinearConv")}
    assert versions == {"QuantizeLinear": [10, 13, 19, 21, 23, 24, 25, 28],
                        "DequantizeLinear": [10, 13, 19, 21, 23, 24, 25, 28],
                        "DynamicQuantizeLinear": [11], "ConvInteger": [10], "QLinearConv": [10]}


# QuantizeLinear / DequantizeLinear against onnxruntime -----------------------------------------

Q_CASES = [(np.uint8, "tensor", 10), (np.int8, "tensor", 13), (np.uint8, "axis", 13), (np.int8, "axis", 19),
           (np.uint8, "blocked", 21), (np.int16, "axis", 21), (np.uint16, "blocked", 21),
           (np.int16, "tensor", 23), (np.int8, "blocked", 23)]


@pytest.mark.parametrize("dtype,kind,opset", Q_CASES)
def test_quantize_linear_matches_ort(dtype, kind, opset):
    x = _x((2, 6, 7))
    attrs = {"axis": -2} if kind == "axis" else {"axis": 2, "block_size": 3} if kind == "blocked" else {}
    scale, zp = _params(kind, dtype, x.shape, axis=attrs.get("axis", 1), block=attrs.get("block_size", 0))
    got, want = _both("QuantizeLinear", x, [scale, zp], attrs, opset, dtype, ORT_QUANTIZE_23 if opset >= 23 else None)
    assert got.dtype == np.dtype(dtype) and got.shape == x.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype,kind,opset", Q_CASES + [(np.int32, "tensor", 10), (np.int32, "axis", 21)])
def test_dequantize_linear_matches_ort(dtype, kind, opset):
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -70000), min(info.max, 70000)
    x = RNG.integers(lo, hi, (3, 6, 5), endpoint=True).astype(dtype)
    attrs = {"axis": 1} if kind == "axis" else {"axis": -1, "block_size": 2} if kind == "blocked" else {}
    scale, zp = _params(kind, dtype, x.shape, axis=attrs.get("axis", 1), block=attrs.get("block_size", 0))
    if dtype == np.int32:
        zp = None  # int32: no zero point
    got, want = _both("DequantizeLinear", x, [scale, zp], attrs, opset, np.float32)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_array_equal(got, want)


def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 300, -300, 127.5, 126.5], np.float32)
    (got,) = run_node("QuantizeLinear", [x, np.array(1, np.float32), np.array(0, np.int8)], opset=13)
    np.testing.assert_array_equal(got, [0, 2, 2, 0, -2, -2, 127, -128, 127, 126])
    (got,) = run_node("QuantizeLinear", [x, np.array(1, np.float32)], opset=13)  # no zero point: uint8
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, [0, 2, 2, 0, 0, 0, 255, 0, 128, 126])


def test_quantize_default_dtype_and_output_dtype():
    x = _x((4, 5))
    assert infer_node("QuantizeLinear", [x, np.array(0.5, np.float32)], opset=21)[1] == [np.uint8]
    (got,) = run_node("QuantizeLinear", [x, np.array(0.5, np.float32)], {"output_dtype": TensorProto.INT16},
                      opset=21)
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, np.clip(np.rint(x / np.float32(0.5)), -32768, 32767))


HALF_TIES = np.arange(-47, 47, 0.0078125)   # many quotients by 0.37 near .5 in float16


@pytest.mark.parametrize("x_dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("opset", [19, 21])
def test_quantize_half_inputs_before_opset23_divide_in_float32(x_dtype, opset):
    """Before opset 23 the spec names no precision: the half values' quotient is taken in
    float32 (as onnxruntime; the reference evaluator divides in float16)."""
    x = HALF_TIES.astype(x_dtype)
    scale = np.array(0.37, x_dtype)
    (got,) = run_node("QuantizeLinear", [x, scale, np.array(2, np.int8)], opset=opset)
    want = np.clip(np.rint(x.astype(np.float32) / scale.astype(np.float32)) + 2, -128, 127)
    np.testing.assert_array_equal(got, want)
    if x_dtype == np.float16:
        np.testing.assert_array_equal(got, _both("QuantizeLinear", x, [scale, np.array(2, np.int8)], {}, opset,
                                                 np.int8, ORT_QUANTIZE_FLOAT16, spec=lambda m, f: [want])[1])


def test_quantize_precision_follows_the_scale_then_the_attribute():
    """Opset 23: the division runs in y_scale's type (float16 here, as onnxruntime), unless
    ``precision`` says otherwise."""
    x = HALF_TIES.astype(np.float32)
    s16 = np.array(0.3, np.float16)
    by_hand = np.clip(np.rint(x.astype(np.float16) / s16).astype(np.float32) + 3, -128, 127)
    got, want = _both("QuantizeLinear", x, [s16, np.array(3, np.int8)], {}, 23, np.int8, ORT_QUANTIZE_HALF_SCALE,
                      spec=lambda m, f: [by_hand])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, by_hand)
    s32 = np.array(0.3, np.float32)
    attrs = {"precision": TensorProto.FLOAT16}
    by_hand = np.clip(np.rint(x.astype(np.float16) / s32.astype(np.float16)).astype(np.float32) + 3, -128, 127)
    got, want = _both("QuantizeLinear", x, [s32, np.array(3, np.int8)], attrs, 23, np.int8, ORT_QUANTIZE_HALF_SCALE,
                      spec=lambda m, f: [by_hand])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, by_hand)


@pytest.mark.parametrize("out", [np.float16, ml_dtypes.bfloat16])
def test_dequantize_output_dtype(out):
    x = RNG.integers(-128, 128, (4, 6)).astype(np.int8)
    scale, zp = np.array([0.5, 0.25, 0.125, 2.0], np.float32), np.array([1, -2, 3, 0], np.int8)
    (got,) = run_node("DequantizeLinear", [x, scale, zp], {"axis": 0, "output_dtype": _elem(out)}, opset=23)
    assert got.dtype == np.dtype(out)
    want = ((x.astype(np.float32) - zp[:, None]) * scale[:, None]).astype(out)
    np.testing.assert_array_equal(got, want)
    # opset 19/21: the scale's type is the output's
    (got,) = run_node("DequantizeLinear", [x, scale.astype(out), zp], {"axis": 0}, opset=21)
    assert got.dtype == np.dtype(out)
    np.testing.assert_array_equal(got, want)


def test_dequantize_float8e8m0_scale():
    x = RNG.integers(-8, 8, (2, 8)).astype(ml_dtypes.int4)
    scale = np.array([[0.25, 4.0], [1.0, 0.5]], ml_dtypes.float8_e8m0fnu)
    attrs = {"axis": 1, "block_size": 4, "output_dtype": TensorProto.FLOAT}
    (got,) = run_node("DequantizeLinear", [x, scale], attrs, opset=24)
    want = x.astype(np.float32) * np.repeat(scale.astype(np.float32), 4, axis=1)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(dynashape.ShapeInferenceError, match="needs the output_dtype") as info:
        infer_node("DequantizeLinear", [x, scale], {"axis": 1, "block_size": 4}, opset=24)
    assert info.value.kind == "MissingAttribute"


# float8 / int4 / int2 / float4 / float6 ---------------------------------------------------------

def test_quantize_float8e4m3fn_matches_ort_bits():
    x = np.array([0.1, -3.3, 400, 1000, -1000, np.inf, -np.inf, 17.2, 0.0], np.float32)
    for saturate in (0, 1):
        got, want = _both("QuantizeLinear", x, [np.array(0.5, np.float32),
                                                np.array(0, ml_dtypes.float8_e4m3fn)],
                          {"saturate": saturate}, 19, ml_dtypes.float8_e4m3fn, ORT_FLOAT8_OUTPUTS)
        assert got.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
        np.testing.assert_array_equal(got.view(np.uint8), np.asarray(want).view(np.uint8))


@pytest.mark.parametrize("dtype", F8)
def test_quantize_float8_saturation_tables(dtype):
    """Cast's float8 tables: saturate=1 clips to +-max (infinities too), saturate=0 gives
    NaN, or inf for e5m2."""
    mx = float(ml_dtypes.finfo(dtype).max)
    x = np.array([1e9, -1e9, np.inf, -np.inf, np.nan, 3.0, 0.0], np.float32)
    zp = np.array(0, dtype)
    (sat,) = run_node("QuantizeLinear", [x, np.array(1, np.float32), zp], opset=19)
    np.testing.assert_array_equal(sat.astype(np.float32), [mx, -mx, mx, -mx, np.nan, 3.0, 0.0])
    (raw,) = run_node("QuantizeLinear", [x, np.array(1, np.float32), zp], {"saturate": 0}, opset=19)
    over = [np.inf, -np.inf] * 2 if dtype == ml_dtypes.float8_e5m2 else [np.nan] * 4
    np.testing.assert_array_equal(raw.astype(np.float32), over + [np.nan, 3.0, 0.0])


@pytest.mark.parametrize("dtype,opset", [(ml_dtypes.int4, 21), (ml_dtypes.uint4, 21), (ml_dtypes.int2, 25),
                                         (ml_dtypes.uint2, 25), (ml_dtypes.float4_e2m1fn, 23)])
@pytest.mark.parametrize("kind", ["tensor", "axis", "blocked"])
def test_small_types_match_reference(dtype, opset, kind):
    x = _x((4, 6), spread=4.0)
    attrs = {"axis": 0} if kind == "axis" else {"axis": 1, "block_size": 4} if kind == "blocked" else {}
    shape = () if kind == "tensor" else (4,) if kind == "axis" else (4, 2)
    scale = (RNG.random(shape) + 0.5).astype(np.float32)
    zp = np.zeros(shape, dtype)
    (q,) = run_node("QuantizeLinear", [x, scale, zp], attrs, opset=opset)
    (want,) = spec_node_outputs("QuantizeLinear", [x, scale, zp], attrs, opset=opset)
    assert q.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(q.astype(np.float32), want.astype(np.float32))
    (dq,) = run_node("DequantizeLinear", [q, scale, zp], attrs, opset=opset)
    (want,) = spec_node_outputs("DequantizeLinear", [q, scale, zp], attrs, opset=opset)
    np.testing.assert_array_equal(dq, want)


@pytest.mark.parametrize("dtype", [ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn])
def test_float6_opset28(dtype):
    x = np.array([0.3, -1.7, 100.0, -1e4, 2.2], np.float32)
    (q,) = run_node("QuantizeLinear", [x, np.array(0.5, np.float32), np.array(0, dtype)], opset=28)
    mx = float(ml_dtypes.finfo(dtype).max)
    np.testing.assert_array_equal(q, np.clip(x / np.float32(0.5), -mx, mx).astype(dtype))
    (dq,) = run_node("DequantizeLinear", [q, np.array(0.5, np.float32)], opset=28)
    np.testing.assert_array_equal(dq, q.astype(np.float32) * np.float32(0.5))
    with pytest.raises(dynashape.ShapeInferenceError, match="expected one of") as info:
        infer_node("QuantizeLinear", [x, np.array(0.5, np.float32), np.array(0, dtype)], opset=25)
    assert info.value.kind == "InvalidDtype"


def test_blocked_partial_last_block():
    """D = 7 with block 3: the last block holds one element."""
    x = _x((2, 7))
    scale = np.array([[0.5, 1.0, 2.0], [0.25, 4.0, 8.0]], np.float32)
    zp = np.array([[1, 2, 3], [4, 5, 6]], np.uint8)
    (got,) = run_node("QuantizeLinear", [x, scale, zp], {"axis": 1, "block_size": 3}, opset=21)
    s, z = np.repeat(scale, 3, axis=1)[:, :7], np.repeat(zp, 3, axis=1)[:, :7]
    np.testing.assert_array_equal(got, np.clip(np.rint(x / s) + z, 0, 255))
    (back,) = run_node("DequantizeLinear", [got, scale, zp], {"axis": 1, "block_size": 3}, opset=21)
    np.testing.assert_array_equal(back, (got.astype(np.float32) - z) * s)


def test_one_element_parameters_are_per_tensor():
    """A (1,) scale with a scalar zero point (the node tests' and quantizers' form) is per
    tensor whatever the axis, also for a rank-1 input (the default axis 1 is out of range)."""
    x = _x((5,))
    (got,) = run_node("QuantizeLinear", [x, np.array([0.5], np.float32), np.array(3, np.int8)], opset=13)
    np.testing.assert_array_equal(got, np.clip(np.rint(x / np.float32(0.5)) + 3, -128, 127))
    q = np.arange(5, dtype=np.int32)
    (got,) = run_node("DequantizeLinear", [q, np.array([0.5], np.float32)], opset=13)
    np.testing.assert_array_equal(got, q * np.float32(0.5))


def test_empty_and_scalar_inputs():
    (got,) = run_node("QuantizeLinear", [np.zeros((0, 3), np.float32), np.array(1, np.float32)], opset=13)
    assert got.shape == (0, 3) and got.dtype == np.uint8
    (got,) = run_node("DequantizeLinear", [np.array(7, np.uint8), np.array(0.5, np.float32),
                                           np.array(3, np.uint8)], opset=13)
    assert got.shape == () and got == np.float32(2.0)


# symbolic shapes on one session -------------------------------------------------------------------

def _qdq_model(opset: int, axis: int, per_axis: bool):
    c = 3
    scale = np.array([0.5, 0.1, 0.02], np.float32) if per_axis else np.array(0.05, np.float32)
    zp = np.array([10, 128, 200], np.uint8) if per_axis else np.array(120, np.uint8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=axis),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=axis)]
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, "L"])],
        [helper.make_tensor_value_info("q", TensorProto.UINT8, None),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 21 else 10
    return model


@pytest.mark.parametrize("allocator", ALLOCATORS)
@pytest.mark.parametrize("opset,per_axis", [(13, True), (13, False), (21, True)])
def test_qdq_through_changing_shapes(allocator, opset, per_axis):
    model = _qdq_model(opset, 1, per_axis)
    feeds = [{"x": _x(s, spread=5.0)} for s in [(2, 3, 5), (1, 3, 17), (4, 3, 1), (3, 3, 0), (2, 3, 5)]]
    sess = assert_runs_match_ort(model, feeds, allocator=allocator)
    assert sess.stats.cache_misses == 4


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_blocked_symbolic_scale_through_changing_shapes(allocator):
    """Blocked DequantizeLinear whose scale is an input: x (N, D), scale (N, S) with
    S = ceil(D / 4) checked for every new signature."""
    x = {"x": np.zeros((2, 8), np.int8), "s": np.zeros((2, 2), np.float32)}
    model = _model("DequantizeLinear", x, {}, {"axis": 1, "block_size": 4}, 21, [np.float32],
                   dims={"x": ["N", "D"], "s": ["N", "S"]})
    feeds = []
    for n, d in [(2, 8), (3, 10), (1, 4), (2, 1), (2, 8)]:
        feeds.append({"x": RNG.integers(-128, 128, (n, d)).astype(np.int8),
                      "s": (RNG.random((n, -(-d // 4))) + 0.1).astype(np.float32)})
    sess = assert_runs_match_ort(model, feeds, allocator=allocator)
    with pytest.raises(dynashape.ShapeInferenceError, match="ceil") as info:
        sess.run(None, {"x": np.zeros((2, 8), np.int8), "s": np.ones((2, 3), np.float32)})
    assert info.value.kind == "DimMismatch" and info.value.node == "DequantizeLinear_node"


def _dynamic_quant_model():
    """The quantize_dynamic pattern: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul."""
    w = RNG.integers(-127, 128, (8, 5)).astype(np.int8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "ws"], ["sc"]),
             helper.make_node("Mul", ["accf", "sc"], ["y"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"])]
    graph = helper.make_graph(
        nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", 8])],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         [("y", TensorProto.FLOAT), ("xq", TensorProto.UINT8), ("xs", TensorProto.FLOAT),
          ("xz", TensorProto.UINT8), ("xd", TensorProto.FLOAT)]],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0.02, np.float32), "ws")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_dynamic_quantize_through_changing_shapes(allocator):
    feeds = [{"x": RNG.standard_normal(s).astype(np.float32) * k}
             for s, k in [((2, 3, 8), 1.0), ((1, 9, 8), 3.0), ((3, 1, 8), 0.0), ((2, 0, 8), 1.0), ((2, 3, 8), 0.5)]]
    feeds.append({"x": -np.abs(feeds[0]["x"]) - 0.1})      # all negative: zero point 255
    feeds.append({"x": np.abs(feeds[0]["x"]) + 0.1})       # all positive: zero point 0
    assert_runs_match_ort(_dynamic_quant_model(), feeds, allocator=allocator)


def test_dynamic_quantize_values():
    x = np.array([[-1.0, 0.0, 2.0], [3.5, -0.25, 1.0]], np.float32)
    y, scale, zp = run_node("DynamicQuantizeLinear", [x], opset=11, n_outputs=3)
    want_scale = np.float32(4.5) / np.float32(255)
    want_zp = np.rint(np.float32(1.0) / want_scale)
    assert scale.shape == () and scale.dtype == np.float32 and scale == want_scale
    assert zp.shape == () and zp.dtype == np.uint8 and zp == want_zp
    np.testing.assert_array_equal(y, np.clip(np.rint(x / want_scale) + want_zp, 0, 255))
    y, scale, zp = run_node("DynamicQuantizeLinear", [np.zeros((2, 2), np.float32)], opset=11, n_outputs=3)
    assert scale == 1 and zp == 0 and not y.any()      # onnxruntime's rule for an all-zero input


# ConvInteger / QLinearConv -------------------------------------------------------------------------

CONV_CASES = [
    ((2, 4, 9, 8), (6, 4, 3, 3), {}),
    ((2, 4, 9, 8), (6, 4, 3, 3), {"pads": [1, 2, 0, 1], "strides": [2, 1]}),
    ((1, 4, 9, 8), (8, 2, 3, 2), {"group": 2, "dilations": [2, 1], "pads": [1, 1, 1, 1]}),
    ((2, 6, 7, 7), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),       # depthwise
    ((2, 6, 7, 7), (5, 6, 1, 1), {}),                                      # pointwise
    ((3, 3, 11), (4, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2]}),   # 1-D
    ((1, 2, 4, 5, 6), (3, 2, 2, 2, 2), {"auto_pad": "SAME_LOWER"}),        # 3-D
]


def _ints(dtype, shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
def test_conv_integer_matches_ort(x_shape, w_shape, attrs):
    x, w = _ints(np.uint8, x_shape), _ints(np.int8, w_shape)
    feeds = {"x": x, "w": w, "xz": np.array(77, np.uint8), "wz": np.array(-5, np.int8)}
    model = _model("ConvInteger", feeds, {}, attrs, 10, [np.int32])
    (got,) = dynashape.InferenceSession(model).run(None, feeds)
    (want,) = expected_outputs(model, feeds, ORT_CONV_INTEGER_S8_WEIGHTS)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_conv_integer_per_channel_zero_point_and_int8_input():
    """int8 x and a per-output-channel w_zero_point (onnxruntime has neither): against the
    integer convolution computed by hand."""
    x, w = _ints(np.int8, (2, 3, 5, 5)), _ints(np.int8, (4, 3, 2, 2))
    xz, wz = np.array(-3, np.int8), np.array([1, -2, 3, 0], np.int8)
    (got,) = run_node("ConvInteger", [x, w, xz, wz], opset=10)
    xc = x.astype(np.int64) - xz
    wc = w.astype(np.int64) - wz[:, None, None, None]
    want = np.zeros((2, 4, 4, 4), np.int64)
    for i in range(2):
        for j in range(2):
            want += np.einsum("nchw,mc->nmhw", xc[:, :, i:i + 4, j:j + 4], wc[:, :, i, j])
    np.testing.assert_array_equal(got, want)
    (no_zp,) = run_node("ConvInteger", [x, w], opset=10)
    np.testing.assert_array_equal(no_zp, run_node("ConvInteger", [x, w, np.array(0, np.int8)], opset=10)[0])


def _qlinear_inputs(x, w, y_dtype, per_channel: bool, bias: bool):
    m = w.shape[0]
    w_scale = (RNG.random(m) * 0.01 + 0.001).astype(np.float32) if per_channel else np.array(0.004, np.float32)
    w_zp = np.zeros(m, w.dtype) if per_channel else np.array(0, w.dtype)
    if per_channel and w.dtype == np.uint8:
        w_zp = RNG.integers(100, 150, m).astype(np.uint8)
    return [x, np.array(0.02, np.float32), np.array(RNG.integers(0, 100), x.dtype), w, w_scale, w_zp,
            np.array(0.3, np.float32), np.array(RNG.integers(0, 100), y_dtype),
            RNG.integers(-5000, 5000, m).astype(np.int32) if bias else None]


def _qlinear_conv_by_channel(model, feeds):
    """QLinearConv by onnx.reference one output channel at a time, each with scalar w_scale and
    w_zero_point (its per-channel path broadcasts as for 2-D convolutions only)."""
    node = model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    group = attrs.pop("group", 1)
    x, w = feeds["x"], feeds["w"]
    cg, mg = x.shape[1] // group, w.shape[0] // group
    outs = []
    for m in range(w.shape[0]):
        g = m // mg
        ins = dict(feeds, x=x[:, g * cg:(g + 1) * cg], w=w[m:m + 1], ws=feeds["ws"][m], wz=feeds["wz"][m])
        if "b" in ins:
            ins["b"] = ins["b"][m:m + 1]
        one = _model("QLinearConv", ins, {}, attrs, 10, [x.dtype], names=list(node.input))
        outs.append(spec_run(one, ins)[0])
    return [np.concatenate(outs, axis=1)]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
@pytest.mark.parametrize("x_dtype,w_dtype", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)])
def test_qlinear_conv_matches_ort(x_shape, w_shape, attrs, x_dtype, w_dtype):
    for per_channel, bias in [(False, False), (True, True)]:
        inputs = _qlinear_inputs(_ints(x_dtype, x_shape), _ints(w_dtype, w_shape), x_dtype, per_channel, bias)
        names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]
        feeds = {n: v for n, v in zip(names, inputs) if v is not None}
        model = _model("QLinearConv", feeds, {}, attrs, 10, [x_dtype],
                       names=[n if v is not None else "" for n, v in zip(names, inputs)])
        (got,) = dynashape.InferenceSession(model).run(None, feeds)
        fixed_in = ORT_QLINEAR_CONV_U8_ZERO_POINTS if per_channel and w_dtype == np.uint8 else None
        (want,) = expected_outputs(model, feeds, fixed_in, spec=_qlinear_conv_by_channel)
        assert got.dtype == np.dtype(x_dtype)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_integer_convs_through_changing_shapes(allocator):
    """ConvInteger and QLinearConv (per-channel weights, bias) with symbolic N, H, W."""
    w = _ints(np.int8, (4, 3, 3, 3))
    consts = {"w": w, "xs": np.array(0.02, np.float32), "xz": np.array(128, np.uint8),
              "ws": (RNG.random(4) * 0.01 + 0.001).astype(np.float32), "wz": np.zeros(4, np.int8),
              "ys": np.array(0.25, np.float32), "yz": np.array(3, np.uint8),
              "b": RNG.integers(-3000, 3000, 4).astype(np.int32)}
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["yq"],
                              pads=[1, 1, 1, 1], strides=[2, 1]),
             helper.make_node("ConvInteger", ["x", "w", "xz"], ["yi"], dilations=[1, 2])]
    graph = helper.make_graph(
        nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.UINT8, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("yq", TensorProto.UINT8, None),
         helper.make_tensor_value_info("yi", TensorProto.INT32, None)],
        [numpy_helper.from_array(v, n) for n, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    feeds = [{"x": _ints(np.uint8, s)} for s in [(1, 3, 8, 8), (2, 3, 5, 11), (3, 3, 16, 5), (1, 3, 8, 8)]]
    sess = assert_runs_match_ort(model, feeds, allocator=allocator, ort_fixed_in=ORT_CONV_INTEGER_S8_WEIGHTS)
    assert sess.stats.cache_misses == 3


# symbolic inference --------------------------------------------------------------------------------


def test_symbolic_inference():
    n, length, d = sym("N"), sym("L"), sym("D")
    shapes, ctx = infer_symbolic("QuantizeLinear", [(n, 3, length), (3,), (3,)],
                                  [np.float32, np.float32, np.int8], {"axis": 1}, 13)
    assert shapes == [(n, 3, length)] and not ctx.guards
    # blocked with a symbolic blocked dim: the scale's dim is assumed ceil(D / 4)
    s = sym("S")
    shapes, ctx = infer_symbolic("DequantizeLinear", [(n, d), (n, s)], [np.int8, np.float32],
                                  {"axis": 1, "block_size": 4}, 21)
    assert shapes == [(n, d)] and len(ctx.guards) == 1
    shapes, _ = infer_symbolic("ConvInteger", [(n, 3, sym("H"), sym("W")), (4, 3, 3, 3)],
                                [np.uint8, np.int8], {"pads": [1, 1, 1, 1]}, 10)
    assert shapes[0][:2] == (n, 4) and str(shapes[0][2]) == "H" and str(shapes[0][3]) == "W"
    shapes, _ = infer_symbolic("DynamicQuantizeLinear", [(n, length)], [np.float32], {}, 11)
    assert shapes == [(n, length), (), ()]


# errors ----------------------------------------------------------------------------------------------

F = np.float32


def _fails(kind: str, match: str, op: str, inputs, attrs=None, opset: int = 21, n_outputs: int = 1):
    with pytest.raises(dynashape.ShapeInferenceError, match=match) as info:
        infer_node(op, inputs, attrs or {}, opset=opset, n_outputs=n_outputs)
    assert info.value.kind == kind, str(info.value)
    assert f"{op} node" in str(info.value)


def test_quantize_errors():
    x = np.zeros((2, 3, 4), F)
    _fails("InvalidDtype", "x has dtype int8", "QuantizeLinear", [x.astype(np.int8), np.array(1, F)], opset=13)
    _fails("InvalidDtype", "int16", "QuantizeLinear", [x, np.array(1, F), np.array(0, np.int16)], opset=19)
    _fails("DtypeMismatch", "y_scale must have x's dtype", "QuantizeLinear",
           [x, np.array(1, np.float16)], opset=19)
    _fails("DimMismatch", "per-axis y_scale length", "QuantizeLinear",
           [x, np.ones(4, F), np.zeros(4, np.uint8)], {"axis": 1}, opset=13)
    _fails("AxisOutOfRange", "axis 3 is out of range", "QuantizeLinear", [x, np.ones(3, F)], {"axis": 3}, opset=13)
    _fails("InvalidQuantParam", "opset 10 has per-tensor quantization only", "QuantizeLinear",
           [x, np.ones(3, F)], opset=10)
    _fails("InvalidQuantParam", "scalar or 1-D", "QuantizeLinear", [x, np.ones((2, 3), F)], opset=13)
    _fails("InvalidQuantParam", "needs a y_scale of the input's rank", "QuantizeLinear",
           [x, np.ones((2, 3), F)], {"block_size": 2}, opset=21)
    _fails("DimMismatch", "ceil", "QuantizeLinear", [x, np.ones((2, 3, 3), F)], {"axis": 2, "block_size": 2})
    _fails("InvalidAttribute", "block_size -1", "QuantizeLinear", [x, np.ones((2, 3, 2), F)],
           {"axis": 2, "block_size": -1})
    _fails("DtypeMismatch", "output_dtype int16 must equal y_zero_point's dtype int8", "QuantizeLinear",
           [x, np.array(1, F), np.array(0, np.int8)], {"output_dtype": TensorProto.INT16})
    _fails("QuantParamShapeMismatch", "must have the shape of y_scale", "QuantizeLinear",
           [x, np.ones(3, F), np.zeros((3, 1), np.uint8)])
    _fails("DimMismatch", "y_zero_point and y_scale dims: 2 != 3", "QuantizeLinear",
           [x, np.ones(3, F), np.zeros(2, np.uint8)])
    _fails("InvalidAttribute", "precision", "QuantizeLinear", [x, np.array(1, F)],
           {"precision": TensorProto.INT8}, opset=23)


def test_dequantize_errors():
    x = np.zeros((2, 3), np.int8)
    _fails("InvalidDtype", "x has dtype int16", "DequantizeLinear", [x.astype(np.int16), np.array(1, F)], opset=19)
    _fails("InvalidDtype", "x_scale has dtype float16", "DequantizeLinear", [x, np.array(1, np.float16)],
           opset=13)
    _fails("DtypeMismatch", "x_zero_point has dtype uint8", "DequantizeLinear",
           [x, np.array(1, F), np.array(0, np.uint8)])
    _fails("InvalidAttribute", "output_dtype", "DequantizeLinear", [x, np.array(1, F)],
           {"output_dtype": TensorProto.INT32}, opset=23)
    _fails("DimMismatch", "per-axis x_scale length", "DequantizeLinear", [x, np.ones(2, F)], {"axis": 1})


def test_dynamic_quantize_and_conv_errors():
    _fails("InvalidDtype", "x has dtype float16", "DynamicQuantizeLinear", [np.zeros((2, 2), np.float16)],
           opset=11, n_outputs=3)
    x, w = np.zeros((1, 4, 5, 5), np.uint8), np.zeros((2, 4, 3, 3), np.int8)
    _fails("InvalidDtype", "x has dtype float32", "ConvInteger", [x.astype(F), w], opset=10)
    _fails("ChannelMismatch", "input channels 4", "ConvInteger", [x, np.zeros((2, 3, 3, 3), np.int8)], opset=10)
    _fails("DtypeMismatch", "x_zero_point and x", "ConvInteger", [x, w, np.array(0, np.int8)], opset=10)
    _fails("InvalidQuantParam", "x_zero_point must be a scalar", "ConvInteger",
           [x, w, np.zeros(2, np.uint8)], opset=10)
    q = [x, np.array(1, F), np.array(0, np.uint8), w, np.ones(2, F), np.zeros(2, np.int8), np.array(1, F),
         np.array(0, np.uint8)]
    _fails("DimMismatch", "w_scale length", "QLinearConv", q[:4] + [np.ones(3, F)] + q[5:], opset=10)
    _fails("InvalidQuantParam", "x_scale must be a scalar", "QLinearConv", [x, np.ones(2, F)] + q[2:], opset=10)
    _fails("InvalidDtype", "B has dtype int8", "QLinearConv", q + [np.zeros(2, np.int8)], opset=10)
    _fails("BiasShapeMismatch", "bias B", "QLinearConv", q + [np.zeros(3, np.int32)], opset=10)


def test_a_scale_of_symbolic_length_is_per_tensor_at_one_and_per_axis_otherwise():
    """QuantizeLinear whose scale length is a dim of the feed: its granularity is decided per
    signature (validation mode compares the traced preparation with each concrete one)."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "c"]),
                                           helper.make_tensor_value_info("s", TensorProto.FLOAT, ["c"])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    sess = dynashape.InferenceSession(model.SerializeToString(), validate_memory=True)
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    for xs, s in ((x[:, :1], np.array([0.5], np.float32)), (x, np.array([0.5, 1.0, 2.0], np.float32))):
        (y,) = sess.run(None, {"x": xs, "s": s})
        np.testing.assert_array_equal(y, np.clip(np.rint(xs / s), 0, 255).astype(np.uint8))
