"""The accelerated-kernel plugin (``dynashape.ops_builtin.fast``, entry point ``fast``): every
compiled kernel against the numpy kernel on the same inputs (one session with compiled
kernels, one with ``compiled_kernels=False``) and against ONNX Runtime, through changing
shapes, including the cases where a compiled kernel hands over to the numpy one
(non-contiguous inputs, another axis, Indices); and the switches that turn it off.
Skipped where numba is not installed or DYNASHAPE_FAST=0 (the numpy kernels are then the
only ones, and the rest of the suite tests them).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from tests.conftest import BLAS_SUMS_LIKE_MLAS, numba_session
from dynashape import registry as registry_module

pytest.importorskip("numba")
ort = pytest.importorskip("onnxruntime")
if not __import__("dynashape.ops_builtin.fast", fromlist=["enabled"]).enabled():
    pytest.skip("the compiled kernels are switched off (DYNASHAPE_FAST=0)", allow_module_level=True)

RNG = np.random.default_rng(11)
F = TensorProto.FLOAT


def _model(nodes, inputs, inits=(), opset=17, outputs=("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, d) for n, d in inputs],
                              [helper.make_tensor_value_info(o, F, None) for o in outputs],
                              [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _check(model, feeds_list, *, fast_ops, rtol=1e-5, atol=1e-5, nan=False):
    """Compiled vs numpy vs ONNX Runtime on every feed set; ``fast_ops``: the op types whose
    steps must run the compiled kernel."""
    data = model.SerializeToString()
    fast = numba_session(data, optimize=True)   # (the fused ops' kernels too, whatever DYNASHAPE_OPTIMIZE)
    plain = numba_session(data, optimize=True, compiled_kernels=False)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    used = {st.kernel.op_type for st in fast.program.steps if st.kernel.plugin == "fast"}
    assert set(fast_ops) <= used, f"compiled kernels used: {used}"
    assert all(st.kernel.plugin != "fast" for st in plain.program.steps)
    for feeds in feeds_list:
        got, want_np, want = fast.run(None, feeds), plain.run(None, feeds), ref.run(None, feeds)
        for g, p, w in zip(got, want_np, want):
            assert g.shape == p.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, p, rtol=rtol, atol=atol, equal_nan=nan)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=nan)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_erf_and_gelu_and_a_transposed_input():
    nodes = [helper.make_node("Erf", ["x"], ["e"]), helper.make_node("Gelu", ["x"], ["g"]),
             helper.make_node("Gelu", ["x"], ["t"], approximate="tanh"),
             helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]), helper.make_node("Erf", ["xt"], ["et"])]
    m = _model(nodes, [("x", ["a", "b", 5])], opset=20, outputs=("e", "g", "t", "et"))
    feeds = [{"x": _rand(a, b, 5) * 3} for a, b in ((1, 1), (3, 4), (2, 7), (1, 1))]
    feeds.append({"x": np.array([[[0.0, -0.0, 4.5, -9.0, np.inf]]], np.float32)})
    _check(m, feeds, fast_ops={"Erf", "Gelu"})


@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_normalization(axis, bias):
    shape = (8,) if axis == -1 else (4, 8)
    inits = [("scale", RNG.uniform(0.5, 1.5, shape))] + ([("bias", RNG.standard_normal(shape))] if bias else [])
    node = helper.make_node("LayerNormalization", ["x", "scale"] + (["bias"] if bias else []), ["y"], axis=axis)
    m = _model([node], [("x", ["n", 4, 8])], inits)
    _check(m, [{"x": _rand(n, 4, 8) * 5 + 3} for n in (1, 3, 2)], fast_ops={"LayerNormalization"}, rtol=1e-4)


@pytest.mark.parametrize("axis,scale_shape", [(-1, (8,)), (1, (4, 8)), (-2, (4, 8)), (-1, (1, 8))])
def test_rms_normalization(axis, scale_shape):
    """The one-pass loop (a scale of one value per row element) and its hand-over to the numpy
    kernel (a scale with a leading 1 dim), against the numpy kernel and onnxruntime through
    changing shapes, a one-row decode step included; the same bits with two threads."""
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=axis, epsilon=1e-4)
    m = _model([node], [("x", ["n", 4, 8])], [("scale", RNG.uniform(0.5, 1.5, scale_shape))], opset=23)
    feeds = [{"x": _rand(n, 4, 8) * 5 + 3} for n in (1, 3, 2)]
    _check(m, feeds, fast_ops={"RMSNormalization"}, rtol=1e-5)
    options = dynashape.SessionOptions()
    options.intra_op_num_threads = 2
    two = numba_session(m.SerializeToString(), options)
    one = numba_session(m.SerializeToString())
    for f in feeds:
        np.testing.assert_array_equal(two.run(None, f)[0], one.run(None, f)[0])


def test_rms_normalization_by_hand_and_in_double():
    """y = x / sqrt(mean(x^2) + eps) * scale on a row worked by hand (mean of squares of 3, 4:
    12.5); float64 X runs the loop in float64, stash_type double on float32 X the numpy kernel."""
    x = np.array([[3.0, 4.0]], np.float32)
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], epsilon=0.0)
    m = _model([node], [("x", ["n", 2])], [("scale", [1.0, 2.0])], opset=23)
    (y,) = numba_session(m.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(y, [[3 / 12.5 ** 0.5, 8 / 12.5 ** 0.5]], rtol=1e-6)
    for dtype, stash in ((TensorProto.DOUBLE, 1), (TensorProto.FLOAT, 11)):
        node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], stash_type=stash)
        np_type = helper.tensor_dtype_to_np_dtype(dtype)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, ["n", 5])],
                                  [helper.make_tensor_value_info("y", dtype, None)],
                                  [numpy_helper.from_array(RNG.uniform(0.5, 1.5, 5).astype(np_type), "scale")])
        data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]).SerializeToString()
        xs = (RNG.standard_normal((3, 5)) * 4).astype(np_type)
        got = numba_session(data).run(None, {"x": xs})[0]
        want = numba_session(data, compiled_kernels=False).run(None, {"x": xs})[0]
        assert got.dtype == np_type
        np.testing.assert_allclose(got, want, rtol=1e-12 if np_type == np.float64 else 1e-6)


@pytest.mark.parametrize("axis,opset", [(-1, 13), (1, 13), (1, 11), (2, 11)])
def test_softmax(axis, opset):
    m = _model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], [("x", ["n", 3, "t"])], opset=opset)
    feeds = [{"x": _rand(n, 3, t) * 4} for n, t in ((1, 1), (2, 17), (3, 40), (2, 5))]
    feeds.append({"x": np.array([[[1.0, np.nan, 2.0]] * 3], np.float32)})
    feeds.append({"x": np.array([[[1.0, np.inf, 2.0], [-np.inf] * 3, [-np.inf, 0.0, 1.0]]], np.float32)})
    fast_ops = {"Softmax"} if (axis == -1 or opset == 11) else set()
    _check(m, feeds, fast_ops=fast_ops, nan=True)


@pytest.mark.parametrize("axes,opset,keepdims", [([1], 13, 0), ([-1], 18, 1), ([1, 2], 18, 0), ([0], 13, 1)])
def test_reduce_log_sum_exp_over_trailing_axes(axes, opset, keepdims, monkeypatch):
    """One compiled pass per row over the trailing axes (a classifier's few classes: naive
    Bayes' normaliser), the numpy kernel over leading ones; rows of -inf, +inf and NaN as
    onnxruntime: -inf, +inf, NaN."""
    from dynashape.ops_builtin.fast import softmax as fast_softmax
    calls = _spy(monkeypatch, fast_softmax.loops, "log_sum_exp_rows")
    node = helper.make_node("ReduceLogSumExp", ["x"] + (["axes"] if opset >= 18 else []), ["y"], keepdims=keepdims,
                            **({"axes": axes} if opset < 18 else {}))
    m = _model([node], [("x", ["n", 3, "t"])], opset=opset)
    if opset >= 18:
        m.graph.initializer.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    special = np.array([[[-np.inf] * 4, [1.0, np.inf, 2.0, 0.0], [1.0, np.nan, 2.0, 0.0]]], np.float32)
    feeds = [{"x": _rand(n, 3, t) * 8} for n, t in ((1, 1), (2, 3), (4, 40))] + [{"x": special}]
    _check(m, feeds, fast_ops={"ReduceLogSumExp"}, nan=True)
    assert bool(calls) == (axes in ([-1], [1, 2]))        # (axis 1 of three and axis 0: numpy's)


@pytest.mark.parametrize("activation", [None, "Relu", "Gelu", "Sigmoid"])
def test_fused_matmul_bias_activation(activation):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a" if activation else "y"])]
    if activation:
        nodes.append(helper.make_node(activation, ["a"], ["y"]))
    m = _model(nodes, [("x", ["n", "s", 8])], [("w", RNG.standard_normal((8, 6))), ("b", RNG.standard_normal(6))],
               opset=20)
    feeds = [{"x": _rand(n, s, 8)} for n, s in ((1, 1), (2, 5), (3, 9))]
    inf = _rand(1, 2, 8)
    inf[0, 0, 0] = -np.inf   # Relu(-inf) is 0, Gelu(-inf) is -0 / nan in both kernels alike
    feeds.append({"x": inf})
    _check(m, feeds, fast_ops={"FusedMatMul"}, rtol=1e-4, nan=True)


@pytest.mark.parametrize("mask_dims", [None, ["n", 1, 1, "t"], ["n", 2, "t", "t"]])
def test_fused_attention(mask_dims):
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["ss"])]
    last = "ss"
    if mask_dims is not None:
        nodes.append(helper.make_node("Add", ["ss", "mask"], ["sm"]))
        last = "sm"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    inputs = [("q", ["n", 2, "t", 4]), ("k", ["n", 2, "t", 4]), ("v", ["n", 2, "t", 4])]
    if mask_dims is not None:
        inputs.append(("mask", mask_dims))
    m = _model(nodes, inputs, [("scale", 0.5)], opset=13)
    feeds = []
    for n, t in ((1, 1), (2, 6), (3, 11)):
        f = {name: _rand(n, 2, t, 4) for name in ("q", "k", "v")}
        if mask_dims is not None:
            f["mask"] = _rand(*[n if d == "n" else t if d == "t" else d for d in mask_dims])
        feeds.append(f)
    _check(m, feeds, fast_ops={"FusedAttention"}, rtol=1e-4)


@pytest.mark.parametrize("attrs", [{"pads": [1, 1, 1, 1]}, {"strides": [2, 1], "pads": [0, 1, 2, 1]},
                                   {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, {"auto_pad": "VALID"}])
@pytest.mark.parametrize("activation", [None, "Relu", "HardSigmoid"])
def test_depthwise_conv(attrs, activation):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if activation else "y"], group=4, **attrs)]
    if activation:
        nodes.append(helper.make_node(activation, ["c"], ["y"]))
    m = _model(nodes, [("x", ["n", 4, "h", "h"])],
               [("w", RNG.standard_normal((4, 1, 3, 3))), ("b", RNG.standard_normal(4))])
    feeds = [{"x": _rand(n, 4, h, h)} for n, h in ((1, 5), (2, 9), (1, 12))]
    _check(m, feeds, fast_ops={"FusedConv" if activation else "Conv"}, rtol=1e-4, atol=1e-4)


def _fma_cpu() -> bool:
    from llvmlite import binding
    return binding.get_host_cpu_features().get("fma", False)


def _spy(monkeypatch, module, name: str) -> list:
    """Replace ``module.name`` by a wrapper that records each call (the loop still runs)."""
    calls, loop = [], getattr(module, name)

    def spy(*args):
        calls.append(args)
        return loop(*args)
    monkeypatch.setattr(module, name, spy)
    return calls


# (x channels, w shape, attrs, (n, h, w) per run, the path): direct = a reduction of at most
# DIRECT_MAX_DEPTH terms over rows >= DIRECT_MIN_WIDTH wide; columns = per-image im2col,
# >= COLUMNS_MIN_PIXELS pixels, one chain (depth 36) or two (depth 144 > MLAS's 128); the
# smaller runs take the numpy kernel in the same session
_CONV_PATHS = [
    (3, (8, 3, 3, 3), {"pads": [1, 1, 1, 1]}, [(1, 7, 20), (2, 16, 5), (1, 3, 3), (1, 1, 1)], "conv2d_direct"),
    (3, (4, 3, 3, 3), {"strides": [2, 2], "pads": [0, 1, 2, 1]}, [(2, 9, 40), (1, 6, 6), (2, 1, 2)], "conv2d_direct"),
    (2, (8, 2, 2, 5), {"dilations": [2, 1], "pads": [1, 2, 1, 2], "strides": [1, 2]}, [(1, 8, 40), (3, 5, 36)],
     "conv2d_direct"),
    (4, (8, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, [(1, 6, 20), (2, 9, 4)], "conv2d_direct"),
    (4, (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}, [(1, 32, 40), (2, 37, 33), (1, 8, 8)], "im2col_phases"),
    (4, (6, 4, 3, 3), {"strides": [2, 2], "dilations": [1, 2]}, [(1, 70, 80), (2, 66, 72)], "im2col_phases"),
    (16, (8, 16, 3, 3), {"pads": [1, 1, 1, 1]}, [(1, 32, 32), (2, 33, 35)], "im2col_phases"),
    (6, (6, 3, 3, 3), {"group": 2, "pads": [1, 0, 1, 0]}, [(1, 34, 34), (2, 32, 36)], "im2col_phases"),
]


@pytest.mark.parametrize("channels,w_shape,attrs,runs,path", _CONV_PATHS)
@pytest.mark.parametrize("activation", [None, "Relu", "Sigmoid"])
def test_direct_and_per_image_conv(channels, w_shape, attrs, runs, path, activation, monkeypatch):
    """Both compiled paths against the numpy kernel and onnxruntime through changing shapes;
    the direct loop's float32 results are bit-identical with single-threaded onnxruntime
    without graph optimizations (its MLAS im2col + SGEMM) where the CPU has FMA. (The
    per-image path is as exact as its BLAS: OpenBLAS's SkylakeX kernels sum like MLAS in
    most shapes, not all: (2, 4, 23, 17) differs in 60 of 4692 last bits.)"""
    from dynashape.ops_builtin.fast import conv
    calls = _spy(monkeypatch, conv.loops, path)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if activation else "y"], **attrs)]
    if activation:
        nodes.append(helper.make_node(activation, ["c"], ["y"]))
    m = _model(nodes, [("x", ["n", channels, "h", "w"])], [("w", RNG.standard_normal(w_shape)),
                                                          ("b", RNG.standard_normal(w_shape[0]))])
    feeds = [{"x": _rand(n, channels, h, w)} for n, h, w in runs]
    # (outputs up to ~15 from up to 144 terms: the orders of BLAS and of MLAS's blocks differ by ~1e-5)
    _check(m, feeds, fast_ops={"FusedConv" if activation else "Conv"}, rtol=1e-5, atol=1e-4)
    assert calls, f"{path} never ran"
    if path == "conv2d_direct" and _fma_cpu() and activation != "Sigmoid":
        data = m.SerializeToString()
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        ref = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        sess = numba_session(data)
        for f in feeds:
            before = len(calls)
            got, want = sess.run(None, f)[0], ref.run(None, f)[0]
            # (below 16 pixels MLAS takes its matrix-vector paths; a run too narrow for the direct
            # loop takes the numpy kernel, as exact as numpy's BLAS)
            if got.shape[2] * got.shape[3] >= 16 and (len(calls) > before or BLAS_SUMS_LIKE_MLAS):
                np.testing.assert_array_equal(got, want)


def test_conv_paths_with_two_threads_give_the_same_bits():
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], [("x", ["n", 3, "h", "h"])],
               [("w", RNG.standard_normal((8, 3, 3, 3)))]).SerializeToString()
    m2 = _model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], [("x", ["n", 6, "h", "h"])],
                [("w", RNG.standard_normal((8, 6, 3, 3)))]).SerializeToString()
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = 2
    for data, c in ((m, 3), (m2, 6)):
        one, two = numba_session(data), numba_session(data, so)
        for n, h in ((1, 20), (3, 17)):
            x = _rand(n, c, h, h)
            np.testing.assert_array_equal(two.run(None, {"x": x})[0], one.run(None, {"x": x})[0])


@pytest.mark.parametrize("banded", [False, True])
@pytest.mark.parametrize("attrs", [{"pads": [1, 1, 1, 1]}, {"strides": [2, 2], "dilations": [1, 2]},
                                   {"group": 2, "pads": [0, 2, 1, 0]}])
def test_a_regular_conv_is_the_numpy_kernel_bit_for_bit(attrs, banded, monkeypatch):
    """(im2col + BLAS in MLAS's blocks either way: QDQ models stay exact; the compiled
    kernel adds only the activation.)"""
    from dynashape.ops_builtin import nn
    if banded:
        monkeypatch.setattr(nn, "_COLS_BYTES", 4000)
    c_in = 4 // attrs.get("group", 1)
    m = _model([helper.make_node("Conv", ["x", "w"], ["c"], **attrs), helper.make_node("Gelu", ["c"], ["y"])],
               [("x", ["n", 4, "h", "h"])], [("w", RNG.standard_normal((6, c_in, 3, 3)))], opset=20)
    feeds = [{"x": _rand(n, 4, h, h)} for n, h in ((1, 6), (2, 11))]
    _check(m, feeds, fast_ops={"FusedConv"}, rtol=1e-5, atol=1e-5)
    data = m.SerializeToString()
    fast = numba_session(data, optimize=False)
    plain = numba_session(data, optimize=False, compiled_kernels=False)
    for f in feeds:   # the same kernel, and Gelu with the same erf: the same bits
        np.testing.assert_array_equal(fast.run(None, f)[0], plain.run(None, f)[0])


@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]},
                                   {"kernel_shape": [2, 3], "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]}])
def test_max_pool(attrs):
    m = _model([helper.make_node("MaxPool", ["x"], ["y"], **attrs)], [("x", ["n", 3, "h", "h"])], opset=12)
    _check(m, [{"x": _rand(n, 3, h, h)} for n, h in ((1, 4), (2, 9), (1, 13))], fast_ops={"MaxPool"})


def test_max_pool_with_indices_uses_the_numpy_kernel():
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, ["n", 1, 4, 4])],
                          [helper.make_tensor_value_info("y", F, None),
                           helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])
    x = _rand(2, 1, 4, 4)
    got = numba_session(m.SerializeToString()).run(None, {"x": x})
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_dynashape_fast_0_and_compiled_kernels_false_run_the_numpy_kernels(monkeypatch):
    """(A plain Erf: no rewrite touches it.)"""
    m = _model([helper.make_node("Erf", ["x"], ["y"])], [("x", ["n"])]).SerializeToString()
    assert numba_session(m).program.steps[0].kernel.plugin == "fast"
    assert numba_session(m, compiled_kernels=False).program.steps[0].kernel.plugin == \
        "dynashape.ops_builtin"
    monkeypatch.setenv("DYNASHAPE_FAST", "0")
    registry_module._invalidate()
    try:
        assert all(k.plugin != "fast" for k in dynashape.get_registry().kernels("", "Erf"))
        assert numba_session(m).program.steps[0].kernel.plugin == "dynashape.ops_builtin"
    finally:
        monkeypatch.delenv("DYNASHAPE_FAST")
        registry_module._invalidate()
    assert any(k.plugin == "fast" for k in dynashape.get_registry().kernels("", "Erf"))


def test_the_plugin_says_why_it_is_off_without_numba(monkeypatch):
    import importlib
    import sys

    from dynashape.ops_builtin import fast as ops_fast
    assert ops_fast.AVAILABLE and ops_fast.REASON == "" and ops_fast.enabled()
    monkeypatch.setitem(sys.modules, "numba", None)   # as if the [fast] extra were not installed
    try:
        importlib.reload(ops_fast)
        assert not ops_fast.AVAILABLE and not ops_fast.enabled()
        assert "pip install 'dynashape[fast]'" in ops_fast.REASON
        assert ops_fast.dynashape_register_libraries() == []
    finally:
        monkeypatch.undo()
        importlib.reload(ops_fast)
    assert ops_fast.enabled() and ops_fast.dynashape_register_libraries()


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("with_lens", [False, True])
def test_lstm_time_loop(direction, with_lens):
    nd, hidden, inp = (2 if direction == "bidirectional" else 1), 8, 5
    inits = [("W", RNG.standard_normal((nd, 4 * hidden, inp)) * 0.5),
             ("R", RNG.standard_normal((nd, 4 * hidden, hidden)) * 0.5), ("B", RNG.standard_normal((nd, 8 * hidden)))]
    ins = ["x", "W", "R", "B", "lens" if with_lens else "", "h0"]
    node = helper.make_node("LSTM", ins, ["y", "yh", "yc"], hidden_size=hidden, direction=direction)
    inputs = [helper.make_tensor_value_info("x", F, ["s", "b", inp]),
              helper.make_tensor_value_info("h0", F, [nd, "b", hidden])]
    if with_lens:
        inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, ["b"]))
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(o, F, None) for o in ("y", "yh", "yc")],
                          [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    feeds = []
    for s, b in ((1, 1), (6, 3), (9, 40)):   # up to 40 x 8 x nd cell elements per step
        f = {"x": _rand(s, b, inp), "h0": _rand(nd, b, hidden)}
        if with_lens:
            f["lens"] = RNG.integers(1, s + 1, b).astype(np.int32)
        feeds.append(f)
    _check(m, feeds, fast_ops={"LSTM"}, rtol=1e-4, atol=1e-5)


def test_lstm_with_other_activations_uses_the_numpy_loop():
    node = helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=4, activations=["Sigmoid", "Relu", "Tanh"])
    inits = [("W", RNG.standard_normal((1, 16, 3))), ("R", RNG.standard_normal((1, 16, 4)))]
    m = _model([node], [("x", ["s", 2, 3])], inits, opset=14)
    data = m.SerializeToString()
    sess = numba_session(data)
    step = next(st for st in sess.program.steps if st.kernel.op_type == "LSTM")
    assert step.kernel.plugin == "fast"
    x = _rand(4, 2, 3)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)
