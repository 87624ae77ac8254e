"""Resize (10, 11, 13, 18, 19) and Upsample (1, 7, 9, 10) against onnxruntime and the ONNX
reference evaluator, plus shape inference (symbolic dims) and the spec's error cases."""
from __future__ import annotations

import itertools

import dynashape
import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from dynashape.registry import get_registry
from dynashape.symbolic import sym
from dynashape.testing import infer_node, run_node
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tests.conftest import ort_predates, symbolic_context

RTOL, ATOL = 1e-4, 1e-5
RNG = np.random.default_rng(0)
X4 = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)
INPUT_NAMES = {"Resize": ("roi", "scales", "sizes"), "Upsample": ("scales",)}


# --------------------------------------------------------------------------- helpers

def _model(op, opset, attrs, inputs):
    """One-node model; inputs after X become initializers (None: omitted / empty name)."""
    names, inits = [], []
    extra = ("scales",) if op == "Upsample" or opset < 11 else INPUT_NAMES[op]
    for name, value in zip(extra, inputs[1:]):
        if value is None:
            names.append("")
            continue
        names.append(name)
        inits.append(numpy_helper.from_array(value, name))
    while names and names[-1] == "":
        names.pop()
    elem = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    node = helper.make_node(op, ["X", *names], ["Y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", elem, inputs[0].shape)],
                              [helper.make_tensor_value_info("Y", elem, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _ort(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"X": x})[0]


def _ref(model, x):
    return ReferenceEvaluator(model).run(None, {"X": x})[0]


def _check(op, opset, attrs, inputs, oracles=("ort", "ref"), rtol=RTOL, atol=ATOL):
    (got,) = run_node(op, inputs, attrs, opset=opset)
    assert got.dtype == inputs[0].dtype
    model = _model(op, opset, attrs, inputs)
    for oracle in oracles:
        want = (_ort if oracle == "ort" else _ref)(model, inputs[0])
        assert got.shape == want.shape, oracle
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=oracle)
    return got


# --------------------------------------------------------------------------- the real model's form

def test_ppocr_det_form_opset12():
    """PP-OCRv4 det: opset 12, nearest/asymmetric/floor, empty roi, scales [1,1,k,k], no sizes."""
    for k in (2.0, 4.0, 8.0):
        inputs = [X4, np.array([], np.float32), np.array([1, 1, k, k], np.float32)]
        got = _check("Resize", 12, {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                    "nearest_mode": "floor"}, inputs)
        np.testing.assert_array_equal(got, X4.repeat(int(k), axis=2).repeat(int(k), axis=3))


def test_ppocr_det_form_symbolic_shape():
    n, h, w = sym("N"), sym("H"), sym("W")
    ctx = _symbolic_ctx("Resize", 12, [(n, 96, h, w), (0,), (4,)],
                        [None, np.array([], np.float32), np.array([1, 1, 2, 2], np.float32)],
                        {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                         "nearest_mode": "floor"})
    (shape,) = _resolve("Resize", 12).infer_shape(ctx)
    assert shape == (n, 96, h * 2, w * 2)


# --------------------------------------------------------------------------- mode x transformation grid

_SCALES = {  # exact binary fractions, so float32 (onnxruntime) and float64 (reference) agree
    "up": np.array([1, 1, 2, 3], np.float32),
    "down": np.array([1, 1, 0.5, 0.75], np.float32),
    "mixed": np.array([1, 1, 1.5, 0.75], np.float32),
}
_SIZES = {"sizes_up": np.array([2, 3, 9, 11], np.int64), "sizes_down": np.array([2, 3, 3, 4], np.int64)}
_ROI = np.array([0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2], np.float32)


def _oracles(coord, kind, nearest_mode):
    """Where the two oracles provably differ from each other, compare to the one we follow.

    * align_corners / tf_crop_and_resize with a scale whose in*scale is not integral:
      onnxruntime uses the floored output length as length_resized, the reference (and
      this runtime) ``in * scale``.
    * half_pixel_symmetric on fractional scales: the reference picks a window one pixel
      off when x lands within 1 ulp above an integer; onnxruntime and this runtime don't.
    * tf_crop_and_resize + ceil and half_pixel_symmetric on downsampling sizes: ties that
      onnxruntime's float32 coordinate arithmetic resolves differently from float64.
    * asymmetric + round_prefer_ceil on downsampling sizes: 7 -> 4 puts x on the tie 3.5,
      which onnxruntime < 1.27 computes as 3.4999998 (2 / float32(4 / 7)) and rounds down,
      the bug of https://github.com/microsoft/onnxruntime/issues/28291.
    """
    if coord in ("align_corners", "tf_crop_and_resize") and kind in ("down", "mixed"):
        return ("ref",)
    if coord == "half_pixel_symmetric" and kind in ("down", "mixed"):
        return ("ort",)
    if coord == "half_pixel_symmetric" and kind == "sizes_down":
        return ("ref",)
    if coord == "tf_crop_and_resize" and nearest_mode == "ceil" and kind == "sizes_down":
        return ("ref",)
    if (coord, nearest_mode, kind) == ("asymmetric", "round_prefer_ceil", "sizes_down") and ort_predates((1, 27)):
        return ("ref",)
    return ("ort", "ref")


_COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize",
           "half_pixel_symmetric"]
_GRID = [(opset, mode, coord, nm, kind)
         for opset in (11, 13, 19)
         for mode in ("nearest", "linear", "cubic")
         for coord in _COORDS if not (coord == "half_pixel_symmetric" and opset < 19)
         for nm in (("round_prefer_floor", "round_prefer_ceil", "floor", "ceil") if mode == "nearest" else ("-",))
         for kind in ("up", "down", "mixed", "sizes_up", "sizes_down")]


@pytest.mark.parametrize("opset,mode,coord,nearest_mode,kind", _GRID)
def test_resize_grid(opset, mode, coord, nearest_mode, kind):
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    if mode == "nearest":
        attrs["nearest_mode"] = nearest_mode
    if mode == "cubic":
        attrs["cubic_coeff_a"] = -0.5 if kind == "down" else -0.75
        attrs["exclude_outside"] = int(kind in ("mixed", "sizes_up"))
    if coord == "tf_crop_and_resize":
        attrs["extrapolation_value"] = 10.0
        roi = _ROI
    else:
        roi = np.array([], np.float32) if opset < 13 else None
    scales = _SCALES.get(kind)
    sizes = _SIZES.get(kind)
    if sizes is not None and opset < 13:
        scales = np.array([], np.float32)
    _check("Resize", opset, attrs, [X4, roi, scales, sizes], _oracles(coord, kind, nearest_mode))


def test_resize_fractional_float32_scales_reference():
    """Non-binary float32 scales: output length in float32, coordinates in float64 (reference)."""
    for mode, coord in itertools.product(("nearest", "linear", "cubic"), ("half_pixel", "asymmetric")):
        _check("Resize", 13, {"mode": mode, "coordinate_transformation_mode": coord},
               [X4, None, np.array([1, 1, 1.7, 0.6], np.float32)], ("ref",))


# --------------------------------------------------------------------------- version forms

@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 0.5, 0.75], [1, 1, 0.6, 0.3], [1, 1, 1.5, 2.5]])
def test_resize10(mode, scales):
    """Resize-10: X and scales only; asymmetric coordinates, legacy nearest rounding."""
    _check("Resize", 10, {"mode": mode}, [X4, np.array(scales, np.float32)], ("ort",))


@pytest.mark.parametrize("opset", [9, 10])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 1.5, 2.5]])
def test_upsample_input_scales(opset, mode, scales):
    (got,) = run_node("Upsample", [X4, np.array(scales, np.float32)], {"mode": mode}, opset=opset)
    (want,) = run_node("Resize", [X4, np.array(scales, np.float32)], {"mode": mode}, opset=10)
    np.testing.assert_array_equal(got, want)
    if opset == 9:
        _check("Upsample", 9, {"mode": mode}, [X4, np.array(scales, np.float32)], ("ort",))


def test_upsample_attr_scales():
    (got,) = run_node("Upsample", [X4], {"mode": "nearest", "scales": [1.0, 1.0, 2.0, 3.0]}, opset=7)
    np.testing.assert_array_equal(got, X4.repeat(2, axis=2).repeat(3, axis=3))
    (lin,) = run_node("Upsample", [X4], {"mode": "linear", "scales": [1.0, 1.0, 1.5, 2.5]}, opset=7)
    (want,) = run_node("Upsample", [X4, np.array([1, 1, 1.5, 2.5], np.float32)], {"mode": "linear"}, opset=9)
    np.testing.assert_array_equal(lin, want)


def test_upsample1_height_width_scale():
    (got,) = run_node("Upsample", [X4], {"mode": "bilinear", "height_scale": 2.0, "width_scale": 2.0}, opset=1)
    (want,) = run_node("Upsample", [X4], {"mode": "linear", "scales": [1.0, 1.0, 2.0, 2.0]}, opset=7)
    np.testing.assert_array_equal(got, want)


def test_upsample_backend_nearest():
    x = np.array([[[[1, 2], [3, 4]]]], np.float32)
    (got,) = run_node("Upsample", [x, np.array([1, 1, 2, 3], np.float32)], {"mode": "nearest"}, opset=9)
    np.testing.assert_array_equal(got, [[[[1, 1, 1, 2, 2, 2], [1, 1, 1, 2, 2, 2],
                                           [3, 3, 3, 4, 4, 4], [3, 3, 3, 4, 4, 4]]]])


# --------------------------------------------------------------------------- opset 18 attributes

@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 0.5, 0.75], [1, 1, 0.3, 0.6], [1, 1, 2, 0.4]])
def test_antialias_scales(mode, scales):
    _check("Resize", 18, {"mode": mode, "antialias": 1}, [X4, None, np.array(scales, np.float32)])


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias_sizes(mode):
    _check("Resize", 19, {"mode": mode, "antialias": 1}, [X4, None, None, np.array([2, 3, 2, 3], np.int64)])


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
@pytest.mark.parametrize("sizes", [[3, 3], [9, 4], [10, 20]])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_keep_aspect_ratio_policy(policy, sizes, mode):
    attrs = {"mode": mode, "keep_aspect_ratio_policy": policy, "axes": [2, 3]}
    _check("Resize", 18, attrs, [X4, None, None, np.array(sizes, np.int64)])


def test_keep_aspect_ratio_without_axes_and_stretch():
    sizes = np.array([2, 3, 4, 4], np.int64)
    _check("Resize", 19, {"keep_aspect_ratio_policy": "not_larger"}, [X4, None, None, sizes], ("ref",))
    (got,) = run_node("Resize", [X4, None, None, sizes], {"keep_aspect_ratio_policy": "stretch"}, opset=19)
    assert got.shape == (2, 3, 4, 4)


def test_axes_forms():
    _check("Resize", 18, {"mode": "cubic", "axes": [3, 1]}, [X4, None, np.array([1.5, 2], np.float32)], ("ref",))
    _check("Resize", 18, {"mode": "nearest", "axes": [3, 2]}, [X4, None, None, np.array([4, 8], np.int64)])
    roi = np.array([0.1, -0.2, 0.8, 1.1], np.float32)
    _check("Resize", 18, {"mode": "linear", "axes": [3, 2], "coordinate_transformation_mode": "tf_crop_and_resize",
                          "extrapolation_value": -1.0}, [X4, roi, None, np.array([4, 6], np.int64)])


def test_negative_axes_equal_positive():
    sizes = np.array([9, 4], np.int64)
    for policy in ("stretch", "not_larger"):
        (neg,) = run_node("Resize", [X4, None, None, sizes],
                          {"mode": "linear", "axes": [-1, -2], "keep_aspect_ratio_policy": policy}, opset=18)
        (pos,) = run_node("Resize", [X4, None, None, sizes],
                          {"mode": "linear", "axes": [3, 2], "keep_aspect_ratio_policy": policy}, opset=18)
        np.testing.assert_array_equal(neg, pos)


# --------------------------------------------------------------------------- ranks and dtypes

def test_other_ranks():
    x3 = RNG.standard_normal((2, 4, 6)).astype(np.float32)
    _check("Resize", 13, {"mode": "linear"}, [x3, None, np.array([1, 1.5, 0.5], np.float32)])
    x5 = RNG.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    _check("Resize", 13, {"mode": "linear"}, [x5, None, np.array([1, 1, 2, 1.5, 0.5], np.float32)])
    _check("Resize", 13, {"mode": "nearest"}, [x5, None, np.array([2, 1, 2, 1, 0.5], np.float32)])
    x1 = RNG.standard_normal(6).astype(np.float32)
    _check("Resize", 13, {"mode": "cubic"}, [x1, None, np.array([1.5], np.float32)], ("ref",))


def test_dtypes_numeric():
    scales = np.array([1, 1, 1.5, 0.75], np.float32)
    _check("Resize", 13, {"mode": "linear"}, [X4.astype(np.float16), None, scales], rtol=2e-3, atol=2e-3)
    _check("Resize", 13, {"mode": "cubic"}, [X4.astype(np.float64), None, scales], ("ref",))
    xu = (RNG.random((1, 1, 4, 5)) * 255).astype(np.uint8)
    # onnxruntime's uint8 path uses fixed-point weights: equal up to one unit
    _check("Resize", 13, {"mode": "linear"}, [xu, None, np.array([1, 1, 1.5, 0.8], np.float32)], ("ort",), atol=1)
    xi = (RNG.random((1, 1, 4, 5)) * 255 - 128).astype(np.int8)
    _check("Resize", 13, {"mode": "linear"}, [xi, None, np.array([1, 1, 1.5, 0.8], np.float32)], ("ref",))
    for dt in (np.int8, np.int16, np.int32, np.int64, np.uint16, np.uint32, np.uint64, np.float64):
        x = (RNG.random((1, 2, 3, 4)) * 100).astype(dt)
        _check("Resize", 13, {"mode": "nearest"}, [x, None, np.array([1, 1, 2, 1.5], np.float32)], ("ref",))


def test_dtypes_bfloat16_bool_string_complex():
    scales = np.array([1, 1, 2, 0.5], np.float32)
    xb = X4.astype(ml_dtypes.bfloat16)
    (got,) = run_node("Resize", [xb, None, scales], {"mode": "linear"}, opset=13)
    (want,) = run_node("Resize", [xb.astype(np.float32), None, scales], {"mode": "linear"}, opset=13)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)
    xbool = X4 > 0
    (got,) = run_node("Resize", [xbool, None, scales], {"mode": "nearest"}, opset=13)
    (want,) = run_node("Resize", [X4, None, scales], {"mode": "nearest"}, opset=13)
    np.testing.assert_array_equal(got, want > 0)
    xs = np.array([["a", "b"], ["c", "d"]], dtype=object)
    (got,) = run_node("Resize", [xs, None, np.array([2, 1], np.float32)], {"mode": "nearest"}, opset=13)
    np.testing.assert_array_equal(got, [["a", "b"], ["a", "b"], ["c", "d"], ["c", "d"]])
    xc = (X4 + 1j * X4[::-1]).astype(np.complex64)
    (got,) = run_node("Resize", [xc, None, scales], {"mode": "linear"}, opset=13)
    (re,) = run_node("Resize", [xc.real.copy(), None, scales], {"mode": "linear"}, opset=13)
    (im,) = run_node("Resize", [xc.imag.copy(), None, scales], {"mode": "linear"}, opset=13)
    assert got.dtype == np.complex64
    np.testing.assert_allclose(got, re + 1j * im, rtol=RTOL, atol=ATOL)


def test_empty_and_identity():
    x = np.zeros((0, 3, 4, 4), np.float32)
    (got,) = run_node("Resize", [x, None, np.array([1, 1, 2, 2], np.float32)], {"mode": "linear"}, opset=13)
    assert got.shape == (0, 3, 8, 8)
    (got,) = run_node("Resize", [X4, None, None, np.array([2, 3, 0, 7], np.int64)], {"mode": "linear"}, opset=13)
    assert got.shape == (2, 3, 0, 7)
    for mode in ("nearest", "linear", "cubic"):
        (got,) = run_node("Resize", [X4, None, np.ones(4, np.float32)], {"mode": mode}, opset=13)
        np.testing.assert_array_equal(got, X4)


def test_tf_crop_and_resize_single_output_pixel():
    roi = np.array([0, 0, 0.4, 0.2, 1, 1, 0.6, 0.9], np.float32)
    for mode in ("nearest", "linear"):
        _check("Resize", 13, {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize"},
               [X4, roi, None, np.array([2, 3, 1, 1], np.int64)])


# --------------------------------------------------------------------------- backend node cases

def _backend_cases():
    """onnx's backend node cases for Resize/Upsample, generated by running only their exports
    (``collect_testcases`` would run every op's generator: too slow for this file)."""
    import onnx.backend.test.case.node as nodecases
    from onnx.backend.test.case.node import resize, upsample
    start, target = len(nodecases._NodeTestCases), nodecases._TargetOpType
    names = dict(nodecases._existing_names)
    try:
        nodecases._existing_names.clear()
        for op, module in (("Resize", resize), ("Upsample", upsample)):
            nodecases._TargetOpType = op
            cls = getattr(module, op)
            for attr in dir(cls):
                if attr.startswith("export"):
                    getattr(cls, attr)()
        cases = list(nodecases._NodeTestCases[start:])
    finally:
        del nodecases._NodeTestCases[start:]
        nodecases._TargetOpType = target
        nodecases._existing_names.clear()
        nodecases._existing_names.update(names)
    return cases


@pytest.mark.parametrize("case", _backend_cases(), ids=lambda c: c.name)
def test_onnx_backend_cases(case):
    node = case.model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    ins, outs = case.data_sets[0]
    it = iter(ins)
    inputs = [next(it) if name else None for name in node.input]
    (got,) = run_node(node.op_type, inputs, attrs, opset=case.model.opset_import[0].version)
    assert got.shape == outs[0].shape
    np.testing.assert_allclose(got, outs[0], rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------- shape inference

def _resolve(op, opset):
    return get_registry().resolve_op("", op, opset)


def _symbolic_ctx(op, opset, shapes, values, attrs, dtype=np.float32):
    dtypes = [None if s is None else np.int64 if i == 3 else dtype if i == 0 else np.float32
              for i, s in enumerate(shapes)]
    return symbolic_context(op, shapes, dtypes, values, attrs, opset=opset)[0]


def test_symbolic_shapes():
    n, h, w = sym("N"), sym("H"), sym("W")
    op = _resolve("Resize", 13)
    ctx = _symbolic_ctx("Resize", 13, [(n, 3, h, w), None, (4,)], [None, None, np.array([1, 1, 2, 0.5], np.float32)],
                        {})
    (shape,) = op.infer_shape(ctx)
    assert shape[:3] == (n, 3, h * 2) and not isinstance(shape[3], int) and shape[3] != w
    sizes = np.array([n, 3, h * 3, 5], dtype=object)
    ctx = _symbolic_ctx("Resize", 13, [(n, 3, h, w), None, None, (4,)], [None, None, None, sizes], {})
    assert op.infer_shape(ctx) == [(n, 3, h * 3, 5)]
    ctx = _symbolic_ctx("Resize", 13, [(n, 3, h, w), None, None, (4,)], [None, None, None, None], {})
    (shape,) = op.infer_shape(ctx)
    assert len(shape) == 4 and all(not isinstance(d, int) for d in shape)
    op18 = _resolve("Resize", 18)
    ctx = _symbolic_ctx("Resize", 18, [(n, 3, h, w), None, None, (2,)], [None, None, None, None], {"axes": [2, 3]})
    (shape,) = op18.infer_shape(ctx)
    assert shape[:2] == (n, 3) and not isinstance(shape[2], int)
    ctx = _symbolic_ctx("Resize", 18, [(n, 3, h, w), None, None, (2,)], [None, None, None, np.array([4, 4])],
                        {"axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"})
    (shape,) = op18.infer_shape(ctx)
    assert shape[:2] == (n, 3) and not isinstance(shape[2], int)


def test_infer_concrete():
    shapes, dtypes = infer_node("Resize", [X4, None, np.array([1, 1, 0.7, 0.7], np.float32)], opset=13)
    assert shapes == [(2, 3, 3, 4)] and dtypes == [np.float32]  # floor(5*0.7f)=3, floor(7*0.7f)=4 (float32)
    shapes, _ = infer_node("Resize", [np.zeros((1, 1, 10, 10), np.float32), None,
                                      np.array([1, 1, 0.7, 0.7], np.float32)], opset=13)
    assert shapes == [(1, 1, 7, 7)]  # float32 product rounds to 7.0, as onnxruntime


def test_runtime_values_path():
    """Value inputs unknown at prepare time: the kernel plans on the fly."""
    from dynashape.model import Node
    from dynashape.records import InferContext
    scales = np.array([1, 1, 2, 1.5], np.float32)
    reg = get_registry()
    node = Node("resize", "Resize", "", ("x", "", "scales"), ("y",), {"mode": "linear"})
    ctx = InferContext(node, 13, [X4.shape, None, scales.shape], [X4.dtype, None, scales.dtype], [None, None, None])
    kernel = reg.resolve_kernel("", "Resize", 13, np.dtype(np.float32))
    prepared = kernel.prepare(ctx)
    (got,) = kernel.compute([X4, None, scales], [None], prepared)
    (want,) = run_node("Resize", [X4, None, scales], {"mode": "linear"}, opset=13)
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- errors

@pytest.mark.parametrize("opset,inputs,attrs,match", [
    (13, [X4, None, np.array([1, 1, 2, 2], np.float32), np.array([2, 3, 4, 4], np.int64)], {}, "only one of"),
    (13, [X4, None, None, None], {}, "one of 'scales' and 'sizes' must"),
    (11, [X4, np.array([], np.float32), np.array([], np.float32)], {}, "one of 'scales' and 'sizes' must"),
    (13, [X4, None, np.array([1, 2, 2], np.float32)], {}, "has 3 elements, expected 4"),
    (13, [X4, None, None, np.array([2, 3], np.int64)], {}, "has 2 elements, expected 4"),
    (13, [X4, None, np.array([1, 1, 0, 2], np.float32)], {}, "> 0"),
    (13, [X4, None, None, np.array([2, 3, -1, 4], np.int64)], {}, "non-negative"),
    (13, [X4, None, np.array([1, 1, 2, 2], np.float32)], {"mode": "bicubic"}, "mode='bicubic'"),
    (13, [X4, None, np.array([1, 1, 2, 2], np.float32)], {"coordinate_transformation_mode": "half_pixel_symmetric"},
     "half_pixel_symmetric"),
    (19, [X4, None, np.array([1, 1, 2, 2], np.float32)], {"nearest_mode": "up"}, "nearest_mode"),
    (19, [X4, None, None, np.array([4, 4], np.int64)], {"axes": [2, 2]}, "duplicates"),
    (19, [X4, None, None, np.array([4, 4], np.int64)], {"axes": [2, 4]}, "out of range"),
    (19, [X4, None, None, np.array([4, 4], np.int64)], {"axes": [2, 3], "keep_aspect_ratio_policy": "fit"},
     "keep_aspect_ratio_policy"),
    (13, [X4, None, np.array([1, 1, 2, 2], np.float32)], {"coordinate_transformation_mode": "tf_crop_and_resize"},
     "roi"),
    (10, [X4, np.array([1, 1, 2, 2], np.float32)], {"mode": "cubic"}, "mode='cubic'"),
    (13, [np.zeros((1, 0, 2), np.float32), None, None, np.array([1, 3, 2], np.int64)], {}, "empty axis"),
])
def test_resize_errors(opset, inputs, attrs, match):
    with pytest.raises(dynashape.ShapeInferenceError, match=match):
        run_node("Resize", inputs, attrs, opset=opset)


def test_resize_error_string_linear_and_sizes_dtype():
    xs = np.array([["a", "b"]], dtype=object)
    with pytest.raises(dynashape.ShapeInferenceError, match="numeric"):
        run_node("Resize", [xs, None, np.array([1, 2], np.float32)], {"mode": "linear"}, opset=13)
    with pytest.raises(dynashape.ShapeInferenceError, match="int64"):
        run_node("Resize", [X4, None, None, np.array([2, 3, 4, 4], np.int32)], {}, opset=13)


def test_upsample_errors():
    with pytest.raises(dynashape.ShapeInferenceError, match=">= 1"):
        run_node("Upsample", [X4, np.array([1, 1, 0.5, 2], np.float32)], {}, opset=9)
    with pytest.raises(dynashape.ShapeInferenceError, match="'scales' is required"):
        run_node("Upsample", [X4], {}, opset=7)
    with pytest.raises(dynashape.ShapeInferenceError, match="expected 4"):
        run_node("Upsample", [X4], {"scales": [1.0, 2.0]}, opset=7)
    with pytest.raises(dynashape.ShapeInferenceError, match="4-D"):
        run_node("Upsample", [X4[0]], {"height_scale": 2.0, "width_scale": 2.0}, opset=1)
    with pytest.raises(dynashape.ShapeInferenceError, match="mode='cubic'"):
        run_node("Upsample", [X4, np.array([1, 1, 2, 2], np.float32)], {"mode": "cubic"}, opset=9)


def test_registered_versions():
    reg = get_registry()
    for op, versions in (("Resize", (10, 11, 13, 18, 19)), ("Upsample", (1, 7, 9, 10))):
        for v in versions:
            assert reg.resolve_op("", op, v).since_version == v
    assert onnx.defs.get_schema("Resize").since_version <= 19
