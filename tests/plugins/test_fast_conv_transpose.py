"""The compiled ConvTranspose of the accelerated-kernel plugin (``dynashape.ops_builtin.fast.conv_transpose``):
both of its loops (the direct one and BLAS + col2im), forced in turn, against the numpy
kernel (a ``compiled_kernels=False`` session), against ONNX Runtime (float32; it has no
float64 ConvTranspose) and against a float64 reference written from the spec, through many
attribute combinations and several shapes per session (symbolic dims); the hand-over to
the numpy kernel (1-D / 3-D, non-contiguous inputs, float16); the automatic choice of
loop; and a session with two intra-op threads.
Skipped where numba is not installed or DYNASHAPE_FAST=0.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from tests.conftest import numba_session

pytest.importorskip("numba")
ort = pytest.importorskip("onnxruntime")
if not __import__("dynashape.ops_builtin.fast", fromlist=["enabled"]).enabled():
    pytest.skip("the compiled kernels are switched off (DYNASHAPE_FAST=0)", allow_module_level=True)

from dynashape.ops_builtin import nn  # noqa: E402
from dynashape.ops_builtin.fast import conv_transpose as ct  # noqa: E402

RNG = np.random.default_rng(23)
ELEM = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}
LOOPS = ("direct", "gemm")


def _model(attrs, c, w, bias, *, dtype=np.float32, x_dims=None, w_input=False, transpose_x=False,
           opset=17) -> bytes:
    """One ConvTranspose of X (dims ``x_dims``, default ["n", c, "h", "w"]) with W (an
    initializer, or a graph input when ``w_input``) and B when given; ``transpose_x``
    feeds it X transposed on its spatial axes (a view: a non-contiguous input)."""
    et = ELEM[dtype]
    x_dims = x_dims or ["n", c, "h", "w"]
    inputs = [helper.make_tensor_value_info("x", et, x_dims)]
    inits = [] if w_input else [numpy_helper.from_array(np.asarray(w, dtype), "w")]
    if w_input:
        inputs.append(helper.make_tensor_value_info("w", et, list(w.shape)))
    names = ["xt" if transpose_x else "x", "w"]
    if bias is not None:
        inits.append(numpy_helper.from_array(np.asarray(bias, dtype), "b"))
        names.append("b")
    nodes = []
    if transpose_x:
        nodes.append(helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 1, 3, 2]))
    nodes.append(helper.make_node("ConvTranspose", names, ["y"], **attrs))
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", et, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def _pads_begin(attrs, in_hw, k, s, d):
    """pads_begin per the spec (output_shape / SAME: total = full - out, SAME_UPPER puts the
    odd pixel at the end) and the output size."""
    op = attrs.get("output_padding", [0, 0])
    full = [si * (i - 1) + o + (ki - 1) * di + 1 for i, si, o, ki, di in zip(in_hw, s, op, k, d)]
    auto = attrs.get("auto_pad", "NOTSET")
    if "output_shape" in attrs or auto.startswith("SAME"):
        out = attrs["output_shape"][-2:] if "output_shape" in attrs else [i * si for i, si in zip(in_hw, s)]
        tot = [f - o for f, o in zip(full, out)]
        return [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in tot], out
    pads = [0, 0, 0, 0] if auto == "VALID" else attrs.get("pads", [0, 0, 0, 0])
    return pads[:2], [f - pads[i] - pads[i + 2] for i, f in enumerate(full)]


def _reference(x, w, b, attrs):
    """ConvTranspose 2-D in float64 from the spec's definition: each kernel tap (kh, kw)
    scatters X, times W[:, :, kh, kw] per group, to ``i*stride + k*dilation - pad_begin``."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    _, mg, kh_, kw_ = w.shape
    g = attrs.get("group", 1)
    s, d = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    (ph, pw), (oh, ow) = _pads_begin(attrs, (h, wd), (kh_, kw_), s, d)
    y = np.zeros((n, mg * g, oh, ow))
    cg = c // g
    for kh in range(kh_):
        rows = np.arange(h) * s[0] + kh * d[0] - ph
        rv = (rows >= 0) & (rows < oh)
        for kw in range(kw_):
            cols = np.arange(wd) * s[1] + kw * d[1] - pw
            cv = (cols >= 0) & (cols < ow)
            for gi in range(g):
                xs = x[:, gi * cg:(gi + 1) * cg][:, :, rv][:, :, :, cv]
                part = np.einsum("ncij,cm->nmij", xs, w[gi * cg:(gi + 1) * cg, :, kh, kw])
                y[np.ix_(np.arange(n), np.arange(gi * mg, (gi + 1) * mg), rows[rv], cols[cv])] += part
    if b is not None:
        y += b.astype(np.float64).reshape(1, -1, 1, 1)
    return y


class _Calls:
    """Counts the calls of the compiled loops and of the numpy kernel the compiled one hands over to."""

    def __init__(self, monkeypatch):
        self.n = {"direct": 0, "gemm": 0, "tiled": 0, "numpy": 0}
        for name, key in (("conv_transpose2d_direct", "direct"), ("col2im2d", "gemm"), ("col2im2d_tiled", "tiled")):
            monkeypatch.setattr(ct.loops, name, self._counting(key, getattr(ct.loops, name)))
        monkeypatch.setattr(nn, "_conv_transpose", self._counting("numpy", nn._conv_transpose))

    def _counting(self, key, fn):
        def wrapped(*args):
            self.n[key] += 1
            return fn(*args)
        return wrapped


def _sessions(data, **kw):
    fast = numba_session(data, **kw)
    plain = numba_session(data, compiled_kernels=False, **kw)
    (step,) = [st for st in fast.program.steps if st.kernel.op_type == "ConvTranspose"]
    assert step.kernel.plugin == "fast"
    assert all(st.kernel.plugin != "fast" for st in plain.program.steps)
    return fast, plain


def _run_and_compare(data, feeds_list, w, b, attrs, dtype, *, with_ort=True, rtol=None):
    """The compiled session against the numpy one and the float64 reference (and ORT for
    float32) on every feed set; returns the compiled outputs."""
    fast, plain = _sessions(data)
    with_ort = with_ort and dtype == np.float32
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]) if with_ort else None
    tol = rtol or (2e-5 if dtype == np.float32 else 1e-11)
    got_all = []
    for feeds in feeds_list:
        (got,), (want_np,) = fast.run(None, feeds), plain.run(None, feeds)
        want = _reference(feeds["x"], feeds.get("w", w), b, attrs)
        assert got.shape == want_np.shape == want.shape and got.dtype == want_np.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want_np, rtol=tol, atol=tol)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        if ref is not None:
            (want_ort,) = ref.run(None, feeds)
            np.testing.assert_allclose(got, want_ort, rtol=tol, atol=tol)
        got_all.append(got)
    return got_all


#: (C, W shape, attrs, B): ppocrv4_det's 2x2 stride 2 (tiling) and its 1-channel output,
#: decoder-style 4x4 stride 2 pad 1, and every attribute
CASES = [
    ("plain 3x3", 4, (4, 3, 3, 3), {}, True),
    ("tiling 2x2 s2", 8, (8, 8, 2, 2), {"strides": [2, 2]}, True),
    ("1-channel output 2x2 s2", 8, (8, 1, 2, 2), {"strides": [2, 2]}, True),
    ("4x4 s2 p1", 8, (8, 5, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    ("asymmetric pads, output_padding", 5, (5, 3, 3, 3),
     {"strides": [2, 2], "pads": [1, 0, 1, 2], "output_padding": [1, 0]}, True),
    ("dilations, strides 2x1", 6, (6, 4, 3, 2), {"strides": [2, 1], "dilations": [2, 3], "pads": [2, 1, 0, 1]}, True),
    ("strides 3x2, output_padding 2x1", 4, (4, 2, 3, 3), {"strides": [3, 2], "output_padding": [2, 1]}, False),
    ("1x1 stride 2 (gaps)", 4, (4, 6, 1, 1), {"strides": [2, 2]}, True),
    ("5x3 stride 1x3", 4, (4, 3, 5, 3), {"strides": [1, 3], "pads": [2, 1, 2, 0]}, True),
    ("SAME_UPPER", 4, (4, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, True),
    ("SAME_LOWER", 4, (4, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}, False),
    ("VALID", 4, (4, 3, 3, 3), {"strides": [2, 2], "auto_pad": "VALID"}, True),
    ("group 2", 6, (6, 2, 3, 3), {"strides": [2, 2], "group": 2, "dilations": [2, 1]}, True),
    ("group 3, 5 out per group", 12, (12, 5, 2, 2), {"strides": [2, 2], "group": 3}, True),
    ("depthwise 4x4 s2 p1", 8, (8, 1, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 8}, True),
    ("no bias, many channels", 20, (20, 9, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, False),
]
SHAPES = ((1, 5, 6), (2, 7, 3), (1, 1, 1), (3, 4, 9), (1, 12, 11))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("name,c,ws,attrs,bias", CASES, ids=[c[0] for c in CASES])
def test_conv_transpose_loops(name, c, ws, attrs, bias, loop, dtype, monkeypatch):
    """Each loop, forced, on every attribute combination through one session of changing
    shapes: equal to the numpy kernel, the float64 reference and ORT (float32)."""
    monkeypatch.setattr(ct, "_mode", lambda *a: loop)
    calls = _Calls(monkeypatch)
    w = RNG.standard_normal(ws).astype(dtype)
    b = RNG.standard_normal(ws[1] * attrs.get("group", 1)).astype(dtype) if bias else None
    data = _model(attrs, c, w, b, dtype=dtype)
    feeds = [{"x": RNG.standard_normal((n, c, h, wd)).astype(dtype)} for n, h, wd in SHAPES]
    _run_and_compare(data, feeds, w, b, attrs, dtype)
    ran = calls.n[loop] + (calls.n["tiled"] if loop == "gemm" else 0)
    assert ran == len(SHAPES) and calls.n["numpy"] == 0   # (no hand-over)


@pytest.mark.parametrize("loop", LOOPS)
def test_output_shape(loop, monkeypatch):
    """output_shape fixes the output whatever the input, the pads follow: negative (the
    output reaches past the full one: bias alone there) or past the kernel. ORT takes only
    inputs of the one size that gives output_shape without them (5 x 6 here)."""
    monkeypatch.setattr(ct, "_mode", lambda *a: loop)
    calls = _Calls(monkeypatch)
    attrs = {"strides": [3, 2], "output_shape": [16, 12]}
    w = RNG.standard_normal((4, 2, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(2).astype(np.float32)
    data = _model(attrs, 4, w, b)
    _run_and_compare(data, [{"x": RNG.standard_normal((n, 4, 5, 6)).astype(np.float32)} for n in (2, 1)],
                     w, b, attrs, np.float32)
    others = [{"x": RNG.standard_normal((n, 4, h, wd)).astype(np.float32)}
              for n, h, wd in ((1, 4, 6), (2, 7, 2), (1, 1, 9))]
    _run_and_compare(data, others, w, b, attrs, np.float32, with_ort=False)
    assert calls.n[loop] == 5


def test_the_choice_of_loop():
    """ppocrv4_det's DB head at 320 x 320 / 2 x 640 x 640: its 24 -> 24 2x2 stride 2
    ConvTransposes run BLAS + col2im (the tiled one: see below), its 24 -> 1 ones (an X
    of 2.4 MB and up) the direct loop; depthwise and few-channel ones the direct loop;
    decoder-style 4x4 ones BLAS."""
    mib = 1 << 20
    assert ct._mode(24, 24, 4, 24 * 80 * 80 * 4) == "gemm"
    assert ct._mode(24, 1, 4, 24 * 160 * 160 * 4) == "direct"
    assert ct._mode(24, 1, 4, 2 * 24 * 320 * 320 * 4) == "direct"
    assert ct._mode(24, 1, 4, mib) == "gemm"                       # X in the caches: BLAS
    assert ct._mode(64, 1, 4, 64 * 160 * 160 * 4) == "gemm"        # deep enough for BLAS
    assert ct._mode(1, 1, 16, 4096) == "direct"                    # depthwise
    assert ct._mode(8, 8, 16, mib) == "direct" and ct._mode(8, 2, 16, mib) == "gemm"
    assert ct._mode(64, 32, 16, 64 * 64 * 64 * 4) == "gemm"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_loop_chosen_on_model_shapes(dtype, monkeypatch):
    """The loops _mode picks run (and give the numpy kernel's, the reference's and ORT's values)."""
    calls = _Calls(monkeypatch)
    s2p1 = {"strides": [2, 2], "pads": [1, 1, 1, 1]}
    for (c, ws, attrs, h, loop) in ((24, (24, 24, 2, 2), {"strides": [2, 2]}, 20, "tiled"),
                                    (24, (24, 1, 2, 2), {"strides": [2, 2]}, 160, "direct"),
                                    (16, (16, 1, 4, 4), dict(s2p1, group=16), 9, "direct"),
                                    (32, (32, 16, 4, 4), s2p1, 9, "gemm")):
        w = RNG.standard_normal(ws).astype(dtype)
        b = RNG.standard_normal(ws[1] * attrs.get("group", 1)).astype(dtype)
        before = dict(calls.n)
        _run_and_compare(_model(attrs, c, w, b, dtype=dtype), [{"x": RNG.standard_normal((1, c, h, h)).astype(dtype)}],
                         w, b, attrs, dtype)
        assert calls.n[loop] - before[loop] == 1, (ws, attrs, calls.n)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("c,ws,attrs", [
    (8, (8, 6, 2, 2), {"strides": [2, 2]}),
    (8, (8, 1, 2, 2), {"strides": [2, 2]}),
    (4, (4, 3, 3, 3), {"strides": [3, 3]}),
    (4, (4, 3, 2, 2), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),     # shifted phases
    (4, (4, 3, 2, 2), {"strides": [2, 2], "pads": [1, 0, 0, 1]}),     # an odd output width
    (4, (4, 5, 3, 1), {"strides": [3, 1]}),
    (6, (6, 2, 2, 3), {"strides": [2, 3], "group": 3}),
])
def test_tiling_conv_transpose_runs_the_tiled_col2im(c, ws, attrs, dtype, monkeypatch):
    """Every output element takes exactly one tap (the numpy plan's ``tiling``): BLAS, then
    each output row straight from its columns (col2im2d_tiled), no sum."""
    monkeypatch.setattr(ct, "_mode", lambda *a: "gemm")
    calls = _Calls(monkeypatch)
    w = RNG.standard_normal(ws).astype(dtype)
    b = RNG.standard_normal(ws[1] * attrs.get("group", 1)).astype(dtype)
    shapes = [s for s in SHAPES if s[1] > 1]   # (a 1 x 1 input: no output once padded)
    feeds = [{"x": RNG.standard_normal((n, c, h, wd)).astype(dtype)} for n, h, wd in shapes]
    _run_and_compare(_model(attrs, c, w, b, dtype=dtype), feeds, w, b, attrs, dtype)
    assert calls.n["tiled"] == len(shapes) and calls.n["gemm"] == 0


def test_phases():
    assert ct._phases(2, 2, 1, 0).tolist() == [[0, 0], [1, 0]]
    assert ct._phases(2, 2, 1, 1).tolist() == [[1, 0], [0, 1]]     # output 2q <- kw 1 at q; 2q + 1 <- kw 0 at q + 1
    assert ct._phases(3, 3, 1, 0).tolist() == [[0, 0], [1, 0], [2, 0]]


def test_two_intra_op_threads_give_the_same_results(monkeypatch):
    """``intra_op_num_threads = 2``: the loops cut into two parts (prange over the jobs,
    bands of rows where there are few planes) give the one-thread results: the direct loop bit for bit
    (each output element's sum in the same order), BLAS + col2im within BLAS's threading."""
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = 2
    cases = [(8, (8, 1, 2, 2), {"strides": [2, 2]}, (1, 2)),                     # one plane: bands of rows
             (8, (8, 6, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, (2, 3)),
             (20, (20, 9, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 1], "output_padding": [1, 1]}, (1, 3)),
             (6, (6, 2, 3, 3), {"group": 3, "dilations": [2, 2]}, (3, 1))]
    for loop in LOOPS:
        monkeypatch.setattr(ct, "_mode", lambda *a, loop=loop: loop)
        for c, ws, attrs, ns in cases:
            w = RNG.standard_normal(ws).astype(np.float32)
            b = RNG.standard_normal(ws[1] * attrs.get("group", 1)).astype(np.float32)
            data = _model(attrs, c, w, b)
            serial = numba_session(data)
            threaded = numba_session(data, so)
            for n in ns:
                x = {"x": RNG.standard_normal((n, c, 13, 10)).astype(np.float32)}
                (one,), (two,) = serial.run(None, x), threaded.run(None, x)
                if loop == "direct":
                    np.testing.assert_array_equal(one, two)
                else:
                    np.testing.assert_allclose(one, two, rtol=1e-6, atol=1e-6)
                np.testing.assert_allclose(two, _reference(x["x"], w, b, attrs), rtol=2e-5, atol=2e-5)
    assert all(getattr(ct.loops, name).most_parts > 1
               for name in ("conv_transpose2d_direct", "col2im2d", "col2im2d_tiled"))


def test_rows_per_job(monkeypatch):
    from dynashape import threads
    monkeypatch.setattr(threads._run, "threads", 1, raising=False)
    assert ct._rows_per_job(1, 50) == 50                       # serial: a plane per job
    monkeypatch.setattr(threads._run, "threads", 2, raising=False)
    assert ct._rows_per_job(1, 50) == 7                        # 8 jobs of up to 7 rows
    assert ct._rows_per_job(3, 50) == 17
    assert ct._rows_per_job(8, 50) == 50                       # enough planes
    assert ct._rows_per_job(1, 0) == 1


@pytest.mark.parametrize("attrs,xs,ws", [
    ({"strides": [3]}, ["n", 4, "h"], (4, 2, 3)),                                                   # 1-D
    ({"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1]}, ["n", 2, "d", 3, 4], (2, 3, 2, 2, 3)),     # 3-D
])
def test_1d_and_3d_run_the_numpy_kernel(attrs, xs, ws, monkeypatch):
    calls = _Calls(monkeypatch)
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(ws[1]).astype(np.float32)
    data = _model(attrs, xs[1], w, b, x_dims=xs)
    fast, plain = _sessions(data)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for n, s in ((1, 4), (2, 6)):
        x = RNG.standard_normal([n if d == "n" else s if isinstance(d, str) else d for d in xs]).astype(np.float32)
        got = fast.run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, plain.run(None, {"x": x})[0])
        np.testing.assert_allclose(got, ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert calls.n["direct"] == calls.n["gemm"] == calls.n["tiled"] == 0 and calls.n["numpy"] == 2


def test_non_contiguous_inputs_run_the_numpy_kernel(monkeypatch):
    """X fed as a strided view, W fed in another memory order: the numpy kernel, bit for bit;
    the same values contiguous: a compiled loop."""
    calls = _Calls(monkeypatch)
    attrs = {"strides": [2, 2], "pads": [1, 1, 1, 1]}
    w = RNG.standard_normal((4, 3, 4, 4)).astype(np.float32)
    b = RNG.standard_normal(3).astype(np.float32)
    data = _model(attrs, 4, w, b, w_input=True)
    fast, plain = _sessions(data)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    wt = np.ascontiguousarray(w.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)   # W's values, not C-contiguous
    for n, h, wd in ((1, 5, 7), (2, 6, 3)):
        x = RNG.standard_normal((n, 4, h, 2 * wd)).astype(np.float32)[..., ::2]
        assert not x.flags.c_contiguous and not wt.flags.c_contiguous
        for feeds in ({"x": x, "w": w}, {"x": np.ascontiguousarray(x), "w": wt}):
            got = fast.run(None, feeds)[0]
            np.testing.assert_array_equal(got, plain.run(None, feeds)[0])
            np.testing.assert_allclose(got, ref.run(None, feeds)[0], rtol=1e-5, atol=1e-5)
    assert calls.n["numpy"] == 4 and calls.n["direct"] + calls.n["gemm"] + calls.n["tiled"] == 0
    x = np.ascontiguousarray(x)
    got = fast.run(None, {"x": x, "w": w})[0]
    np.testing.assert_allclose(got, _reference(x, w, b, attrs), rtol=1e-5, atol=1e-5)
    assert calls.n["numpy"] == 4 and calls.n["direct"] + calls.n["gemm"] + calls.n["tiled"] == 1


def test_float16_runs_the_numpy_kernel():
    w = RNG.standard_normal((4, 3, 2, 2)).astype(np.float16)
    b = RNG.standard_normal(3).astype(np.float16)
    data = _model({"strides": [2, 2]}, 4, w, b, dtype=np.float16)
    sess = numba_session(data)
    (step,) = [st for st in sess.program.steps if st.kernel.op_type == "ConvTranspose"]
    assert step.kernel.plugin != "fast"
    x = RNG.standard_normal((1, 4, 5, 5)).astype(np.float16)
    got = sess.run(None, {"x": x})[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, _reference(x, w, b, {"strides": [2, 2]}), rtol=1e-2, atol=2e-2)


@pytest.mark.parametrize("loop", LOOPS)
def test_empty_batch(loop, monkeypatch):
    monkeypatch.setattr(ct, "_mode", lambda *a: loop)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    fast, _ = _sessions(_model({"strides": [2, 2]}, 4, w, np.ones(3, np.float32)))
    assert fast.run(None, {"x": np.zeros((0, 4, 5, 5), np.float32)})[0].shape == (0, 3, 11, 11)
    (y,) = fast.run(None, {"x": RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)})
    assert y.shape == (1, 3, 11, 11)


def test_validation_mode_output_is_fully_written(monkeypatch):
    """(validate_memory poisons planned buffers with NaN: every output element is written.)"""
    attrs = {"strides": [2, 2], "output_padding": [1, 1]}   # a last row / column no tap reaches
    w = RNG.standard_normal((4, 3, 1, 1)).astype(np.float32)
    for loop in LOOPS:
        monkeypatch.setattr(ct, "_mode", lambda *a, loop=loop: loop)
        sess = numba_session(_model(attrs, 4, w, None), validate_memory=True)
        x = RNG.standard_normal((2, 4, 3, 4)).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        assert np.isfinite(y).all()
        np.testing.assert_allclose(y, _reference(x, w, None, attrs), rtol=1e-5, atol=1e-5)
