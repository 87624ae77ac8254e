"""The compiled pools and Resize (``dynashape.ops_builtin.fast.pool`` / ``.resize``): every kernel
against the numpy kernel (a ``compiled_kernels=False`` session) and against ONNX Runtime on
the same feeds, several shapes through one session (symbolic dims), float32 and float64,
NaN / inf, the cases where the compiled kernel hands over to the numpy one (counted: a
case meant for the loop must not hand over, a hand-over case must), and a session with
``intra_op_num_threads = 2`` (the parallel loops, validation mode on) giving the serial
loops' results bit for bit. Skipped where numba is not installed or DYNASHAPE_FAST=0.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from tests.conftest import numba_session

pytest.importorskip("numba")
ort = pytest.importorskip("onnxruntime")
if not __import__("dynashape.ops_builtin.fast", fromlist=["enabled"]).enabled():
    pytest.skip("the compiled kernels are switched off (DYNASHAPE_FAST=0)", allow_module_level=True)

from dynashape.ops_builtin import nn, resize  # noqa: E402  (after the skips: needs numba)
from dynashape.ops_builtin.fast import pool as fast_pool  # noqa: E402
from dynashape.ops_builtin.fast import resize as fast_resize  # noqa: E402

RNG = np.random.default_rng(5)
ELEM = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}


def _model(op, attrs, x_dims, *, dtype=np.float32, opset=19, inits=(), graph_inputs=(), n_out=1, pre=None):
    """One ``op`` node on input x (dims may be symbolic); ``inits``: (name, array) after x
    (array None: the input is left out), ``graph_inputs``: (name, elem, dims) fed at run
    time; ``pre``: a node making x from a graph input "x0" first (a Transpose)."""
    names = ["x"] + [name if value is not None else "" for name, value in inits] + [n for n, _, _ in graph_inputs]
    while names[-1] == "":
        names.pop()
    outs = ["y", "i"][:n_out]
    nodes = [helper.make_node(op, names, outs, **attrs)]
    x_name = "x"
    if pre is not None:
        nodes.insert(0, helper.make_node(pre[0], ["x0"], ["x"], **pre[1]))
        x_name = "x0"
    elem = ELEM[dtype]
    inputs = [helper.make_tensor_value_info(x_name, elem, x_dims)]
    inputs += [helper.make_tensor_value_info(n, e, d) for n, e, d in graph_inputs]
    outputs = [helper.make_tensor_value_info("y", elem, None)]
    if n_out > 1:
        outputs.append(helper.make_tensor_value_info("i", TensorProto.INT64, None))
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, n) for n, v in inits if v is not None])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _kernels(sess) -> list:
    """The KernelDefs of a session's steps and binding nodes (a Resize whose output shape
    only the run tells)."""
    ks = [st.kernel for st in sess.program.steps]
    return ks + [b.kernel for seg in sess.program.segments for b in seg.binding if b.kernel is not None]


@pytest.fixture
def handovers(monkeypatch):
    """Counts the calls the compiled kernels make to the numpy kernels (the numpy sessions'
    KernelDefs hold the original functions, so only the hand-overs are counted)."""
    counts = {"n": 0}
    for module, names in ((nn, ("_max_pool", "_average_pool", "_lp_pool", "_global_average_pool",
                                "_global_lp_pool")), (resize, ("_resize",))):
        for name in names:
            orig = getattr(module, name)

            def spy(*args, _orig=orig):
                counts["n"] += 1
                return _orig(*args)
            monkeypatch.setattr(module, name, spy)
    return counts


def _check(model, feeds_list, *, fast_op, handovers, handover=False, rtol=1e-5, atol=1e-6, nan=False,
           exact=False, numpy_check=True, ort_check=True, reference_check=False):
    """The compiled kernel (serial, and parallel over 2 threads in validation mode) against
    the numpy kernel and onnxruntime on every feed set.

    ``exact``: compiled == numpy bit for bit; ``handover``: every run hands over to the
    numpy kernel (else none may); a float64 model is compared with onnxruntime (no float64
    kernels there) on the float32 model and inputs, at float32 tolerances;
    ``reference_check``: also against the ONNX reference evaluator (where onnxruntime is
    known to differ from the spec).
    """
    data = model.SerializeToString()
    fast = numba_session(data)
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = 2
    threaded = numba_session(data, so, validate_memory=True)
    plain = numba_session(data, compiled_kernels=False)
    assert any(k.op_type == fast_op and k.plugin == "fast" for k in _kernels(fast)), _kernels(fast)
    assert any(k.op_type == fast_op and k.plugin == "fast" for k in _kernels(threaded))
    assert all(k.plugin != "fast" for k in _kernels(plain))
    elem = model.graph.input[0].type.tensor_type.elem_type
    ref_model = model
    if elem == TensorProto.DOUBLE:
        ref_model = onnx.ModelProto()
        ref_model.CopyFrom(model)
        for vi in list(ref_model.graph.input) + list(ref_model.graph.output):
            if vi.type.tensor_type.elem_type == TensorProto.DOUBLE:
                vi.type.tensor_type.elem_type = TensorProto.FLOAT
    ref = ort.InferenceSession(ref_model.SerializeToString(), providers=["CPUExecutionProvider"]) if ort_check else None
    for feeds in feeds_list:
        before = handovers["n"]
        got = fast.run(None, feeds)
        ran = handovers["n"] - before
        assert (ran > 0) if handover else (ran == 0), f"hand-overs: {ran}"
        par = threaded.run(None, feeds)
        for g, t in zip(got, par):
            np.testing.assert_array_equal(g, t)
        if numpy_check:
            for g, p in zip(got, plain.run(None, feeds)):
                assert g.shape == p.shape and g.dtype == p.dtype
                if exact:
                    np.testing.assert_array_equal(g, p)
                else:
                    tol = 1e-12 if g.dtype == np.float64 else 1e-6
                    np.testing.assert_allclose(g, p, rtol=tol, atol=tol, equal_nan=nan)
        if ort_check:
            ref_feeds = {k: (v.astype(np.float32) if v.dtype == np.float64 else v) for k, v in feeds.items()}
            for g, w in zip(got, ref.run(None, ref_feeds)):
                assert g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=nan)
        if reference_check:
            from onnx.reference import ReferenceEvaluator
            for g, w in zip(got, ReferenceEvaluator(model).run(None, feeds)):
                assert g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=nan)


def _x(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# ----------------------------------------------------------------------------------------
# windowed pools
# ----------------------------------------------------------------------------------------

SHAPES = ((1, 5, 6), (2, 9, 10), (1, 16, 13), (3, 7, 7))
POOL_ATTRS = [
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [0, 2, 1, 0]},
    {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [3, 3], "pads": [1, 2, 1, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [4, 4], "auto_pad": "SAME_LOWER", "strides": [2, 2]},
    {"kernel_shape": [2, 2], "auto_pad": "VALID", "strides": [2, 2]},
    {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 0, 1, 1]},
    {"kernel_shape": [3, 2], "dilations": [1, 3], "strides": [1, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [1, 1]},
]


def _pool_feeds(c=3, dtype=np.float32):
    return [{"x": _x(n, c, h, w, dtype=dtype)} for n, h, w in SHAPES]


def _include_pad_reference(include_pad: int) -> dict:
    """With count_include_pad=1, onnxruntime < 1.25 divides by a wrong count on asymmetric pads
    (https://github.com/microsoft/onnxruntime/pull/27375): compare with the ONNX reference there."""
    from tests.conftest import ort_predates
    if include_pad and ort_predates((1, 25)):
        return {"ort_check": False, "reference_check": True}
    return {}


@pytest.mark.parametrize("attrs", POOL_ATTRS)
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool(attrs, include_pad, handovers):
    m = _model("AveragePool", dict(attrs, count_include_pad=include_pad), ["n", 3, "h", "w"], opset=19)
    _check(m, _pool_feeds(), fast_op="AveragePool", handovers=handovers, **_include_pad_reference(include_pad))


@pytest.mark.parametrize("attrs,opset", [(a, o) for a in POOL_ATTRS[:9] for o in (7, 11)
                                         if "dilations" not in a and not (o < 10 and a.get("ceil_mode"))])
def test_average_pool_earlier_opsets(attrs, opset, handovers):
    """(ceil_mode is AveragePool-10, dilations AveragePool-19.)"""
    m = _model("AveragePool", dict(attrs, count_include_pad=1), ["n", 3, "h", "w"], opset=opset)
    _check(m, _pool_feeds(), fast_op="AveragePool", handovers=handovers, **_include_pad_reference(1))


@pytest.mark.parametrize("attrs", POOL_ATTRS)
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(attrs, p, handovers):
    m = _model("LpPool", dict(attrs, p=p), ["n", 3, "h", "w"], opset=18)
    _check(m, _pool_feeds(), fast_op="LpPool", handovers=handovers, rtol=1e-5, atol=1e-5)


def test_lp_pool_opset11_default_p(handovers):
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}
    m = _model("LpPool", attrs, ["n", 4, "h", "w"], opset=11)
    _check(m, _pool_feeds(4), fast_op="LpPool", handovers=handovers)


@pytest.mark.parametrize("attrs", POOL_ATTRS)
def test_max_pool(attrs, handovers):
    m = _model("MaxPool", attrs, ["n", 3, "h", "w"], opset=12)
    _check(m, _pool_feeds(), fast_op="MaxPool", handovers=handovers, exact=True, rtol=0, atol=0)


@pytest.mark.parametrize("op,opset,extra", [("AveragePool", 19, {"count_include_pad": 1}), ("AveragePool", 19, {}),
                                            ("LpPool", 18, {"p": 2}), ("LpPool", 18, {"p": 1}),
                                            ("LpPool", 18, {"p": 3}), ("MaxPool", 12, {})])
@pytest.mark.parametrize("attrs", [POOL_ATTRS[0], POOL_ATTRS[5], POOL_ATTRS[11]])
def test_pools_float64(op, opset, extra, attrs, handovers):
    m = _model(op, dict(attrs, **extra), ["n", 2, "h", "w"], dtype=np.float64, opset=opset)
    _check(m, _pool_feeds(2, np.float64), fast_op=op, handovers=handovers, rtol=1e-5, atol=1e-5)


def _with_specials(x):
    x = x.copy()
    x[0, 0, 1, 2] = np.nan
    x[-1, -1, -1, -1] = np.inf
    x[0, -1, 0, 0] = -np.inf
    return x


@pytest.mark.parametrize("op,opset,extra", [("AveragePool", 19, {"count_include_pad": 1}), ("LpPool", 18, {"p": 2}),
                                            ("LpPool", 18, {"p": 3})])
def test_pool_nan_and_inf_propagate(op, opset, extra, handovers):
    m = _model(op, dict({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 1]}, **extra),
               ["n", 2, "h", "w"], opset=opset)
    feeds = [{"x": _with_specials(_x(n, 2, h, w))} for n, h, w in SHAPES[:3]]
    _check(m, feeds, fast_op=op, handovers=handovers, nan=True)


def test_max_pool_skips_nan(handovers):
    """The compiled MaxPool skips a NaN (``if (x > y) y = x``): its result is the numpy
    kernel's on the input with NaN as -inf. (ONNX leaves NaN open; the numpy kernel's
    np.maximum propagates it, and onnxruntime's vectorised pool keeps it in some windows
    and not in others, by the order of its max operands.)"""
    m = _model("MaxPool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, ["n", 2, "h", "w"], opset=12)
    data = m.SerializeToString()
    fast = numba_session(data)
    plain = numba_session(data, compiled_kernels=False)
    for n, h, w in SHAPES[:3]:
        x = _with_specials(_x(n, 2, h, w))
        x[0, 1, :2, :2] = np.nan   # a window of NaN only: -inf
        got = fast.run(None, {"x": x})[0]
        want = plain.run(None, {"x": np.where(np.isnan(x), -np.inf, x)})[0]
        np.testing.assert_array_equal(got, want)
        assert not np.isnan(got).any()


@pytest.mark.parametrize("op,opset,attrs,dims,shapes", [
    ("AveragePool", 19, {"kernel_shape": [3], "pads": [1, 1]}, ["n", 3, "w"], [(1, 3, 7), (2, 3, 12)]),
    ("AveragePool", 19, {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}, ["n", 2, "d", 6, 7], [(1, 2, 5, 6, 7)]),
    ("LpPool", 18, {"kernel_shape": [3], "p": 2}, ["n", 3, "w"], [(1, 3, 7), (2, 3, 12)]),
    ("LpPool", 18, {"kernel_shape": [2, 2, 2], "p": 3}, ["n", 2, 4, 5, 6], [(1, 2, 4, 5, 6)]),
    ("MaxPool", 12, {"kernel_shape": [3], "strides": [2]}, ["n", 3, "w"], [(1, 3, 7), (2, 3, 12)]),
    ("MaxPool", 12, {"kernel_shape": [2, 3, 2], "pads": [1, 0, 1, 0, 1, 1]}, ["n", 2, 5, 6, 7], [(1, 2, 5, 6, 7)]),
])
def test_1d_and_3d_pools_hand_over(op, opset, attrs, dims, shapes, handovers):
    m = _model(op, attrs, dims, opset=opset)
    _check(m, [{"x": _x(*s)} for s in shapes], fast_op=op, handovers=handovers, handover=True)


def _kernel_call(kernel, op, attrs, opset, inputs, out):
    """Prepare and run one KernelDef directly into ``out`` (a session hands these kernels
    contiguous arrays only: a strided view is made here)."""
    from dynashape.model import Node
    from dynashape.records import InferContext
    names = tuple(f"in{i}" if v is not None else "" for i, v in enumerate(inputs))
    node = Node("n", op, "", names, ("y",), dict(attrs))
    ctx = InferContext(node, opset, [None if v is None else v.shape for v in inputs],
                       [None if v is None else v.dtype for v in inputs], [None] + list(inputs[1:]))
    kernel.compute(list(inputs), [out], kernel.prepare(ctx))
    return out


def _registered(module, op):
    return next(k for k in module.lib.kernels if k.op_type == op)


def _strided(shape):
    """An array of ``shape`` that is a transposed (not C-contiguous) view."""
    return np.swapaxes(np.full(shape[:2] + shape[:1:-1], np.nan, np.float32), 2, 3)


@pytest.mark.parametrize("op,opset,attrs", [("AveragePool", 19, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
                                            ("LpPool", 18, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 2}),
                                            ("MaxPool", 12, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})])
def test_a_strided_input_or_output_hands_over(op, opset, attrs, handovers):
    k, x = _registered(fast_pool, op), _x(2, 3, 9, 8)
    want = _kernel_call(k, op, attrs, opset, [x], np.empty((2, 3, 9, 8), np.float32))
    assert handovers["n"] == 0
    view = _strided(x.shape)
    view[...] = x
    got = _kernel_call(k, op, attrs, opset, [view], np.empty((2, 3, 9, 8), np.float32))
    assert handovers["n"] == 1
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    got = _kernel_call(k, op, attrs, opset, [x], _strided((2, 3, 9, 8)))
    assert handovers["n"] == 2
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_of_a_strided_input_or_output_hands_over(mode, handovers):
    k, x = _registered(fast_resize, "Resize"), _x(2, 3, 5, 6)
    args = ("Resize", {"mode": mode}, 13)
    scales = np.array([1, 1, 2, 1.5], np.float32)
    want = _kernel_call(k, *args, [x, None, scales], np.empty((2, 3, 10, 9), np.float32))
    assert handovers["n"] == 0
    view = _strided(x.shape)
    view[...] = x
    got = _kernel_call(k, *args, [view, None, scales], np.empty((2, 3, 10, 9), np.float32))
    assert handovers["n"] == 1
    np.testing.assert_array_equal(got, want)
    got = _kernel_call(k, *args, [x, None, scales], _strided((2, 3, 10, 9)))
    assert handovers["n"] == 2
    np.testing.assert_array_equal(got, want)


def test_max_pool_with_indices_hands_over(handovers):
    m = _model("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, ["n", 2, "h", "w"], opset=12, n_out=2)
    _check(m, [{"x": _x(n, 2, h, w)} for n, h, w in SHAPES[:3]], fast_op="MaxPool", handovers=handovers,
           handover=True, exact=True)


@pytest.mark.parametrize("op,attrs,inits,out", [
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, [], (0, 2, 5, 5)),
    ("MaxPool", {"kernel_shape": [2, 2]}, [], (0, 2, 4, 4)),
    ("GlobalAveragePool", {}, [], (0, 2, 1, 1)),
    ("Resize", {"mode": "linear"}, [("roi", None), ("scales", np.array([1, 1, 2, 2], np.float32))], (0, 2, 10, 10))])
def test_an_empty_batch(op, attrs, inits, out):
    m = _model(op, attrs, ["n", 2, 5, 5], opset=19 if op != "MaxPool" else 12, inits=inits).SerializeToString()
    for sess in (numba_session(m), numba_session(m, compiled_kernels=False)):
        assert sess.run(None, {"x": np.zeros((0, 2, 5, 5), np.float32)})[0].shape == out


# ----------------------------------------------------------------------------------------
# global pools
# ----------------------------------------------------------------------------------------

GLOBAL_SHAPES = {3: [(1, 3, 7), (2, 3, 40)], 4: [(1, 3, 1, 1), (2, 3, 5, 6), (1, 3, 33, 17)],
                 5: [(1, 2, 3, 4, 5), (2, 2, 1, 6, 3)]}


@pytest.mark.parametrize("rank", [3, 4, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op,attrs", [("GlobalAveragePool", {}), ("GlobalLpPool", {}), ("GlobalLpPool", {"p": 1}),
                                      ("GlobalLpPool", {"p": 3})])
def test_global_pools(op, attrs, rank, dtype, handovers):
    dims = ["n", GLOBAL_SHAPES[rank][0][1]] + [f"s{i}" for i in range(rank - 2)]
    m = _model(op, attrs, dims, dtype=dtype, opset=13)
    feeds = [{"x": _x(*s, dtype=dtype) * 3 + 1} for s in GLOBAL_SHAPES[rank]]
    _check(m, feeds, fast_op=op, handovers=handovers, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalLpPool"])
def test_global_pools_nan_and_inf(op, handovers):
    m = _model(op, {}, ["n", 2, "h", "w"], opset=13)
    feeds = [{"x": _with_specials(_x(n, 2, h, w))} for n, h, w in SHAPES[:3]]
    _check(m, feeds, fast_op=op, handovers=handovers, nan=True)


def test_global_max_pool_stays_on_numpy():
    """(numpy's SIMD max reduction measured as fast as or faster than the compiled loops.)"""
    m = _model("GlobalMaxPool", {}, ["n", 3, "h", "w"], opset=13).SerializeToString()
    sess = numba_session(m)
    assert all(k.plugin != "fast" for k in _kernels(sess))
    x = _x(2, 3, 5, 6)
    x[0, 0, 1, 1], x[1, 2, 0, 0] = np.inf, -np.inf
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)


def test_global_pool_of_a_float16_input_is_the_numpy_kernel():
    m = _model("GlobalAveragePool", {}, ["n", 3, 4, 4], dtype=np.float16, opset=13).SerializeToString()
    assert all(k.plugin != "fast" for k in _kernels(numba_session(m)))


# ----------------------------------------------------------------------------------------
# Resize
# ----------------------------------------------------------------------------------------

_EMPTY = np.array([], np.float32)
COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric",
          "tf_crop_and_resize"]
_ROI = np.array([0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2], np.float32)
#: scales whose output lengths (and, for align_corners, in * scale) are integers at every
#: input shape below, so onnxruntime (length_resized = the floored output length) and the
#: numpy kernel (in * scale, as the ONNX reference) agree (see tests/ops/test_resize.py)
RESIZE_SCALES = {"up": [1, 1, 2, 2], "down": [1, 1, 0.5, 0.5], "mixed": [1, 1, 1.5, 0.5], "w_only": [1, 1, 1, 3],
                 "h_only": [1, 1, 0.5, 1]}
RESIZE_SHAPES = ((1, 3, 4, 6), (2, 3, 8, 10), (1, 3, 12, 4))


def _resize_model(attrs, *, opset=19, scales=None, sizes=None, roi=None, dtype=np.float32, dims=("n", 3, "h", "w")):
    sc = None if scales is None else np.array(scales, np.float32)
    sz = None if sizes is None else np.array(sizes, np.int64)
    if opset < 13:
        roi = _EMPTY if roi is None else roi
        sc = _EMPTY if sc is None else sc
    if opset == 10:
        return _model("Resize", attrs, list(dims), dtype=dtype, opset=10, inits=[("scales", sc)])
    return _model("Resize", attrs, list(dims), dtype=dtype, opset=opset,
                  inits=[("roi", roi), ("scales", sc), ("sizes", sz)])


def _resize_feeds(dtype=np.float32, shapes=RESIZE_SHAPES):
    return [{"x": _x(*s, dtype=dtype)} for s in shapes]


def _ort_agrees(coord, kind):
    """Where onnxruntime differs from the ONNX reference (which the numpy kernel follows;
    those cases are checked against the reference): half_pixel_symmetric on a downscale
    (onnxruntime's float32 offset picks other ties, tests/ops/test_resize.py lists it), and
    tf_crop_and_resize with a scale of 1 on one axis (onnxruntime leaves that axis
    uncropped; the reference crops it to its roi)."""
    if coord == "half_pixel_symmetric":
        return kind not in ("down", "mixed", "h_only")
    return not (coord == "tf_crop_and_resize" and kind in ("w_only", "h_only"))


@pytest.mark.parametrize("kind", list(RESIZE_SCALES))
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_interp(mode, coord, kind, handovers):
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    roi = None
    if coord == "tf_crop_and_resize":
        attrs["extrapolation_value"] = 10.0
        roi = _ROI
    m = _resize_model(attrs, scales=RESIZE_SCALES[kind], roi=roi)
    agrees = _ort_agrees(coord, kind)
    _check(m, _resize_feeds(), fast_op="Resize", handovers=handovers, exact=True, rtol=1e-4, atol=1e-5,
           ort_check=agrees, reference_check=not agrees)


@pytest.mark.parametrize("kind", list(RESIZE_SCALES))
@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest(nearest_mode, coord, kind, handovers):
    attrs = {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": nearest_mode}
    roi = None
    if coord == "tf_crop_and_resize":
        attrs["extrapolation_value"] = -3.0
        roi = _ROI
    m = _resize_model(attrs, scales=RESIZE_SCALES[kind], roi=roi)
    # (tf_crop_and_resize: onnxruntime's float32 coordinates resolve rounding ties otherwise)
    agrees = _ort_agrees(coord, kind) and not (coord == "tf_crop_and_resize" and nearest_mode != "floor")
    _check(m, _resize_feeds(), fast_op="Resize", handovers=handovers, exact=True, rtol=0, atol=0,
           ort_check=agrees, reference_check=not agrees)


@pytest.mark.parametrize("a,exclude", [(-0.75, 0), (-0.5, 0), (-0.5, 1), (-0.75, 1)])
@pytest.mark.parametrize("kind", ["up", "down", "mixed"])
def test_resize_cubic_coefficients(a, exclude, kind, handovers):
    m = _resize_model({"mode": "cubic", "cubic_coeff_a": a, "exclude_outside": exclude}, scales=RESIZE_SCALES[kind])
    _check(m, _resize_feeds(), fast_op="Resize", handovers=handovers, exact=True, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 0.5, 0.5], [1, 1, 0.25, 0.5], [1, 1, 2, 0.5]])
@pytest.mark.parametrize("opset", [18, 19])
def test_resize_antialias(mode, scales, opset, handovers):
    m = _resize_model({"mode": mode, "antialias": 1}, scales=scales, opset=opset)
    feeds = _resize_feeds(shapes=((1, 3, 8, 8), (2, 3, 16, 12)))
    _check(m, feeds, fast_op="Resize", handovers=handovers, exact=True, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("sizes", [[2, 3, 9, 11], [1, 3, 3, 4], [1, 3, 6, 1]])
def test_resize_sizes_static_shape(mode, sizes, handovers):
    m = _resize_model({"mode": mode}, sizes=sizes, opset=13, dims=(sizes[0], 3, 6, 8))
    _check(m, [{"x": _x(sizes[0], 3, 6, 8)} for _ in range(2)], fast_op="Resize", handovers=handovers, exact=True,
           rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_axes_and_keep_aspect_ratio(policy, mode, handovers):
    m = _resize_model({"mode": mode, "axes": [2, 3], "keep_aspect_ratio_policy": policy}, sizes=[9, 4], opset=18)
    feeds = _resize_feeds(shapes=((1, 3, 4, 6), (2, 3, 8, 10), (1, 3, 5, 3)))   # (never the identity)
    _check(m, feeds, fast_op="Resize", handovers=handovers, exact=True, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 0.5, 0.75], [1, 1, 1.5, 2.5]])
def test_resize10_and_upsample9(mode, scales, handovers):
    m = _resize_model({"mode": mode}, scales=scales, opset=10, dims=("n", 3, 4, 8))
    feeds = [{"x": _x(n, 3, 4, 8)} for n in (1, 2)]
    _check(m, feeds, fast_op="Resize", handovers=handovers, exact=True, rtol=1e-4, atol=1e-5)
    if min(scales) < 1:
        return   # (Upsample's scales are >= 1)
    up = _model("Upsample", {"mode": mode}, ["n", 3, 4, 8], opset=9, inits=[("scales", np.array(scales, np.float32))])
    _check(up, feeds, fast_op="Upsample", handovers=handovers, exact=True, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_scales_known_only_at_run_time(mode, handovers):
    """(The numpy prepare cannot plan: the kernel plans, tables too, per call.)"""
    m = _model("Resize", {"mode": mode}, ["n", 3, "h", "w"], opset=13, inits=[("roi", None)],
               graph_inputs=[("scales", TensorProto.FLOAT, [4])])
    m.graph.node[0].input[1] = ""
    feeds = [{"x": _x(*s), "scales": np.array(sc, np.float32)} for s, sc in
             (((1, 3, 4, 6), [1, 1, 2, 2]), ((2, 3, 8, 10), [1, 1, 0.5, 1.5]), ((1, 3, 4, 6), [1, 1, 3, 1]))]
    _check(m, feeds, fast_op="Resize", handovers=handovers, exact=True, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 0.5, 1.5]])
def test_resize_float64(mode, scales, handovers):
    m = _resize_model({"mode": mode}, scales=scales, dtype=np.float64)
    _check(m, _resize_feeds(np.float64), fast_op="Resize", handovers=handovers, exact=True, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_nan_and_inf(mode, handovers):
    """NaN / inf spread as in the numpy kernel, whose zero-weight taps are multiplied too
    (0 * inf = NaN); onnxruntime skips some of those taps, so its values are the check only
    away from them."""
    m = _resize_model({"mode": mode}, scales=[1, 1, 2, 1.5])
    feeds = [{"x": _with_specials(_x(*s))} for s in RESIZE_SHAPES]
    _check(m, feeds, fast_op="Resize", handovers=handovers, exact=True, nan=True, ort_check=False)
    data = m.SerializeToString()
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    fast = numba_session(data)
    for f in feeds:
        got, want = fast.run(None, f)[0], ref.run(None, f)[0]
        finite = np.isfinite(got) & np.isfinite(want)
        assert finite.mean() > 0.5
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-5)
        if mode == "nearest":
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", ["rank3", "rank5", "channels", "identity", "batch"])
def test_resize_hands_over(case, handovers):
    """Another rank, a resized N or C axis, the identity: the numpy kernel."""
    if case == "rank3":
        m = _model("Resize", {"mode": "linear"}, ["n", 4, "w"], opset=13,
                   inits=[("roi", None), ("scales", np.array([1, 1.5, 2], np.float32))])
        feeds = [{"x": _x(1, 4, 6)}, {"x": _x(2, 4, 9)}]
    elif case == "rank5":
        m = _model("Resize", {"mode": "nearest"}, ["n", 2, 3, 4, 5], opset=13,
                   inits=[("roi", None), ("scales", np.array([1, 1, 2, 1, 0.5], np.float32))])
        feeds = [{"x": _x(1, 2, 3, 4, 5)}]
    else:
        scales = {"channels": [1, 2, 2, 2], "identity": [1, 1, 1, 1], "batch": [2, 1, 1, 1]}[case]
        mode = "linear" if case == "identity" else "nearest"   # (onnxruntime's linear resizes H, W only)
        m = _resize_model({"mode": mode}, scales=scales, opset=13)
        feeds = _resize_feeds()
    _check(m, feeds, fast_op="Resize", handovers=handovers, handover=True, exact=True, rtol=1e-4, atol=1e-5)


def test_resize_float16_is_the_numpy_kernel():
    m = _resize_model({"mode": "linear"}, scales=[1, 1, 2, 2], dtype=np.float16).SerializeToString()
    assert all(k.plugin != "fast" for k in _kernels(numba_session(m)))


def test_resize_tables():
    """The per-axis tables come from the numpy plan: taps-major W tables, uint32 indices."""
    from dynashape.model import Node
    from dynashape.records import InferContext
    node = Node("n", "Resize", "", ("x", "", "scales"), ("y",), {"mode": "cubic"})
    scales = np.array([1, 1, 2, 1.5], np.float32)
    ctx = InferContext(node, 13, [(2, 3, 4, 6), None, (4,)], [np.dtype(np.float32), None, np.dtype(np.float32)],
                       [None, None, scales])
    plan = fast_resize._prepare(ctx)
    t = plan.tables
    assert not t.nearest and t.has_h and t.has_w
    assert t.hidx.shape == (8, 4) and t.hw.shape == (8, 4) and t.widx.shape == (4, 9) and t.ww.shape == (4, 9)
    assert t.widx.dtype == np.uint32 and t.hw.dtype == np.float32
    idx, w = plan.numpy.index[1]
    np.testing.assert_array_equal(t.widx.T, idx)
    np.testing.assert_array_equal(t.ww.T, w)


def test_threaded_loops_run_their_parallel_variant():
    """A session with intra_op_num_threads = 2 runs the loops cut into two parts."""
    m = _resize_model({"mode": "linear"}, scales=[1, 1, 2, 2]).SerializeToString()
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = 2
    x = _x(2, 3, 8, 10)
    got = numba_session(m, so).run(None, {"x": x})[0]
    assert fast_resize.loops.resize_interp2d.most_parts > 1
    np.testing.assert_array_equal(got, numba_session(m).run(None, {"x": x})[0])
