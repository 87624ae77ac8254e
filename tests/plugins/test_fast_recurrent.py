"""The compiled recurrent time loops (``dynashape.ops_builtin.fast.recurrent``): LSTM, GRU and RNN
against the numpy kernel (a ``compiled_kernels=False`` session) and ONNX Runtime on the
same feeds, several shapes through one session (dynamic batch and sequence), forward /
reverse / bidirectional, with and without initial states and sequence_lens, float32 and
float64, one and two threads; the cases the loops hand over to the numpy kernel; and the
accuracy of the vectorisable sigmoid / tanh (onnxruntime's MLAS approximations).
Skipped where numba is not installed or DYNASHAPE_FAST=0.
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

from dynashape.ops_builtin.fast import recurrent  # noqa: E402

if not recurrent.blas_available():
    pytest.skip(f"the loops need a cblas ?gemm: {recurrent.blas_source()}", allow_module_level=True)

RNG = np.random.default_rng(5)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
ELEM = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}
#: (seq, batch) through one session: one row (the gemv path), odd batches, 16 rows
SHAPES = ((1, 1), (5, 3), (2, 16), (7, 1), (3, 8))


@pytest.fixture
def loops(monkeypatch):
    """Counts the compiled loops' calls and the hand-overs to the numpy kernel."""
    calls = {"loop": 0, "numpy": 0}

    class Counted:
        def __init__(self, loop):
            self.loop = loop

        def run(self, tasks, *args):
            calls["loop"] += 1
            return self.loop.run(tasks, *args)

    for name in ("lstm_loop", "gru_loop", "rnn_loop"):
        monkeypatch.setattr(recurrent.loops, name, Counted(getattr(recurrent.loops, name)))
    numpy_compute = recurrent.rnn._rnn_compute

    def counted_numpy(*args, **kwargs):
        calls["numpy"] += 1
        return numpy_compute(*args, **kwargs)
    monkeypatch.setattr(recurrent.rnn, "_rnn_compute", counted_numpy)
    return calls


def _rnn_model(op, direction="forward", hidden=8, inp=5, *, lens=False, init=False, dtype=np.float32,
               outputs=None, weights_as_inputs=False, bias=True, opset=14, **attrs) -> bytes:
    """One LSTM / GRU / RNN node; X [s, b, inp] (layout 1: [b, s, inp]); the weights as
    initializers (or graph inputs), optional sequence_lens "lens" and initial states."""
    nd, g = (2 if direction == "bidirectional" else 1), GATES[op]
    elem = ELEM[dtype]
    weights = {"W": RNG.standard_normal((nd, g * hidden, inp)) * 0.5,
               "R": RNG.standard_normal((nd, g * hidden, hidden)) * (0.7 / np.sqrt(hidden)),
               "B": RNG.standard_normal((nd, 2 * g * hidden)) * 0.5}
    if not bias:
        del weights["B"]
    if attrs.pop("peepholes", False):
        weights["P"] = RNG.standard_normal((nd, 3 * hidden)) * 0.5
    layout = attrs.get("layout", 0)
    names = ["x", "W", "R", "B" if bias else "", "lens" if lens else "", "h0" if init else ""]
    if op == "LSTM":
        names += ["c0" if init else "", "P" if "P" in weights else ""]
    while names[-1] == "":
        names.pop()
    outs = outputs or (["y", "yh", "yc"] if op == "LSTM" else ["y", "yh"])
    node = helper.make_node(op, names, outs, hidden_size=hidden, direction=direction, **attrs)
    xdims = ["s", "b", inp] if layout == 0 else ["b", "s", inp]
    sdims = [nd, "b", hidden] if layout == 0 else ["b", nd, hidden]
    ins = [helper.make_tensor_value_info("x", elem, xdims)]
    if lens:
        ins.append(helper.make_tensor_value_info("lens", TensorProto.INT32, ["b"]))
    if init:
        ins += [helper.make_tensor_value_info(n, elem, sdims) for n in (["h0", "c0"] if op == "LSTM" else ["h0"])]
    inits = [numpy_helper.from_array(np.asarray(a, dtype), n) for n, a in weights.items()]
    if weights_as_inputs:
        ins += [helper.make_tensor_value_info(t.name, elem, list(t.dims)) for t in inits]
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(o, elem, None) for o in outs if o],
                              inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def _feeds(data: bytes, shapes=SHAPES, *, dtype=np.float32, lens_from=1, seed=0) -> list:
    """Feeds for every (seq, batch): X, lens in [lens_from, seq], initial states."""
    model = onnx.load_from_string(data)
    rng = np.random.default_rng(seed)
    dims = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    out = []
    for s, b in shapes:
        f = {}
        for name, d in dims.items():
            if name in ("W", "R", "B", "P"):
                f[name] = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))
            elif name == "lens":
                f[name] = rng.integers(lens_from, s + 1, b).astype(np.int32)
            else:
                shape = [s if v == "s" else b if v == "b" else v for v in d]
                f[name] = rng.standard_normal(shape).astype(dtype)
        out.append(f)
    return out


def _sessions(data: bytes, so=None):
    fast = numba_session(data, so) if so is not None else numba_session(data)
    plain = numba_session(data, compiled_kernels=False)
    op = onnx.load_from_string(data).graph.node[0].op_type
    assert any(st.kernel.plugin == "fast" and st.kernel.op_type == op for st in fast.program.steps)
    assert all(st.kernel.plugin != "fast" for st in plain.program.steps)
    return fast, plain


def _check(data: bytes, feeds: list, *, rtol=1e-5, atol=1e-6, ref=True, so=None):
    """Compiled vs numpy kernel vs ONNX Runtime (``ref``) on every feed set, one session each."""
    fast, plain = _sessions(data, so)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"]) if ref else None
    for f in feeds:
        got, want_np = fast.run(None, f), plain.run(None, f)
        want = sess.run(None, f) if ref else want_np
        for g, p, w in zip(got, want_np, want):
            assert g.shape == p.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
            np.testing.assert_allclose(g, p, rtol=max(rtol, 1e-5), atol=max(atol, 2e-6))
    return fast


# ---------------------------------------------------------------------------------------
# the approximations
# ---------------------------------------------------------------------------------------

def _activation(which: int, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    recurrent.loops.apply_activation(x, out, which)
    return out


def _exact(which: int, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return 1 / (1 + np.exp(-x)) if which in (0, 2) else np.tanh(x)


GRID = np.concatenate([np.linspace(-30, 30, 1_200_001), [-np.inf, np.inf, 0.0, -0.0, 9, -9, 18, -18, 20, -20]])


@pytest.mark.parametrize("which,bound", [(0, 1.7e-7), (1, 3.2e-7), (2, 3.1e-7), (3, 6.1e-7)])
def test_float32_approximations_over_a_dense_grid(which, bound):
    """MLAS's logistic (clamp 18, p9 / q10), tanh (clamp 9, p13 / q6), GRU's reset sigmoid
    (0.5 + 0.5 tanh(x / 2), clamp 20) and candidate tanh (clamp 10) against the exact values:
    within a few float32 ulp of 1 (GRU's tanh is 6e-7 off only for 9 < |x| <= 10, where its
    ratio is evaluated past MLAS's bound, as onnxruntime's GRU does); logistic in [0, 1], the
    others within their error of their range (the ratio is not clamped); NaN stays NaN."""
    x = GRID.astype(np.float32)
    got = _activation(which, x)
    assert got.dtype == np.float32
    err = np.abs(got.astype(np.float64) - _exact(which, x))
    assert err.max() <= bound, err.max()
    if which == 0:
        assert got.min() >= 0.0 and got.max() <= 1.0
    else:
        assert got.min() >= (-bound if which == 2 else -1.0 - bound) and got.max() <= 1.0 + bound
    assert np.isnan(_activation(which, np.array([np.nan], np.float32)))[0]


@pytest.mark.parametrize("which", [0, 1, 2, 3])
def test_float64_keeps_libm(which):
    x = np.linspace(-40, 40, 100_001)
    np.testing.assert_allclose(_activation(which, x), _exact(which, x), rtol=1e-15, atol=1e-16)


@pytest.mark.parametrize("op,which,max_diff", [("Tanh", 1, 0.0), ("Sigmoid", 0, 1.2e-7)])
def test_the_approximations_are_onnxruntimes(op, which, max_diff):
    """Tanh bit for bit as onnxruntime's Tanh op (MlasComputeTanh), logistic within one
    ulp of its Sigmoid op (MlasComputeLogistic; its FMA kernels round a term differently)."""
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", 1, [None])],
                          [helper.make_tensor_value_info("y", 1, [None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    x = np.linspace(-25, 25, 400_001).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(_activation(which, x) - want).max() <= max_diff


# ---------------------------------------------------------------------------------------
# the loops against onnxruntime
# ---------------------------------------------------------------------------------------

DIRECTIONS = ["forward", "reverse", "bidirectional"]


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("lens,init", [(False, False), (True, True), (True, False), (False, True)])
def test_lstm(direction, lens, init, loops):
    data = _rnn_model("LSTM", direction, hidden=8, lens=lens, init=init)
    _check(data, _feeds(data))
    assert loops["loop"] == len(SHAPES) and loops["numpy"] == 0


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("lens,init", [(False, False), (True, True)])
def test_gru(direction, lbr, lens, init, loops):
    data = _rnn_model("GRU", direction, hidden=8, lens=lens, init=init, linear_before_reset=lbr)
    _check(data, _feeds(data))
    assert loops["loop"] == len(SHAPES) and loops["numpy"] == 0


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("lens,init", [(False, False), (True, True)])
def test_rnn(direction, lens, init, loops):
    """(onnxruntime's RNN computes tanh with libm: within 1e-6 of the approximation.)"""
    data = _rnn_model("RNN", direction, hidden=8, lens=lens, init=init)
    _check(data, _feeds(data), atol=2e-6)
    assert loops["loop"] == len(SHAPES) and loops["numpy"] == 0


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("hidden", [1, 3, 64, 130])
def test_hidden_sizes(op, hidden, loops):
    """One hidden unit, odd sizes, lstm_small's 64 and one past 128 (rows of 4H = 520)."""
    data = _rnn_model(op, "bidirectional", hidden=hidden, inp=7, lens=True, init=True)
    _check(data, _feeds(data, ((4, 1), (3, 5), (6, 16))), atol=3e-6)
    assert loops["loop"] == 3 and loops["numpy"] == 0


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_a_long_sequence(op):
    """64 steps: the state's rounding stays within tolerance of onnxruntime's."""
    data = _rnn_model(op, "bidirectional", hidden=16, lens=True)
    _check(data, _feeds(data, ((64, 4), (64, 1))), rtol=1e-5, atol=3e-6)


@pytest.mark.parametrize("op,outputs", [(op, outs) for op in ("LSTM", "GRU", "RNN")
                                        for outs in (["y"], ["", "yh"], ["y", ""])] + [("LSTM", ["", "", "yc"])])
def test_some_outputs(op, outputs, loops):
    data = _rnn_model(op, "bidirectional", outputs=outputs, lens=True)
    _check(data, _feeds(data))
    assert loops["numpy"] == 0


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_no_bias_and_weights_fed_at_run_time(op, loops):
    """Without B; then W, R, B as graph inputs (R^T and the biases made per run)."""
    data = _rnn_model(op, "bidirectional", bias=False, init=True)
    _check(data, _feeds(data))
    data = _rnn_model(op, "reverse", weights_as_inputs=True, lens=True, linear_before_reset=1) if op == "GRU" else \
        _rnn_model(op, "reverse", weights_as_inputs=True, lens=True)
    _check(data, _feeds(data))
    assert loops["numpy"] == 0


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_sequence_lens_of_zero(op, loops):
    """An empty sequence keeps its initial state and its Y is zero (the numpy kernel's
    semantics; onnxruntime differs between ops there, so against the numpy kernel only)."""
    data = _rnn_model(op, "bidirectional", lens=True, init=True)
    feeds = _feeds(data, ((4, 5), (3, 2)), lens_from=0)
    feeds[0]["lens"] = np.array([0, 4, 1, 0, 2], np.int32)
    _check(data, feeds, ref=False)
    assert loops["numpy"] == 0


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_empty_sequence_or_batch(op):
    """seq 0: Y empty and Y_h the initial state; batch 0: everything empty (the numpy
    kernel's results, exactly)."""
    data = _rnn_model(op, "bidirectional", lens=True, init=True)
    fast, plain = _sessions(data)
    for s, b in ((0, 3), (3, 0), (0, 0)):
        f = _feeds(data, ((max(s, 1), max(b, 1)),))[0]
        f = {k: v[:s] if k == "x" else v for k, v in f.items()}
        f = {k: v[:b] if k == "lens" else v[:, :b] if k in ("x", "h0", "c0") else v for k, v in f.items()}
        for g, p in zip(fast.run(None, f), plain.run(None, f)):
            assert g.shape == p.shape
            np.testing.assert_array_equal(g, p)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_float64(op, loops):
    """float64 end to end (libm's exp / tanh) against the numpy kernel closely, and against
    onnxruntime's float32 outputs (it has no double RNNs) to float32 accuracy."""
    data = _rnn_model(op, "bidirectional", dtype=np.float64, lens=True, init=True, linear_before_reset=1) \
        if op == "GRU" else _rnn_model(op, "bidirectional", dtype=np.float64, lens=True, init=True)
    feeds = _feeds(data, dtype=np.float64)
    fast, plain = _sessions(data)
    for f in feeds:
        for g, p in zip(fast.run(None, f), plain.run(None, f)):
            assert g.dtype == np.float64
            np.testing.assert_allclose(g, p, rtol=1e-12, atol=1e-13)
    m32 = onnx.load_from_string(data)
    for t in m32.graph.initializer:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    for vi in list(m32.graph.input) + list(m32.graph.output):
        if vi.type.tensor_type.elem_type == TensorProto.DOUBLE:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    ref = ort.InferenceSession(m32.SerializeToString(), providers=["CPUExecutionProvider"])
    for f in feeds:
        f32 = {k: (v.astype(np.float32) if v.dtype == np.float64 else v) for k, v in f.items()}
        for g, w in zip(fast.run(None, f), ref.run(None, f32)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)
    assert loops["numpy"] == 0


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_two_threads(op, direction, loops):
    """``intra_op_num_threads = 2``: the parallel loop (a direction per thread, or halves of
    the batch for one direction) gives one thread's results, and onnxruntime's."""
    data = _rnn_model(op, direction, hidden=16, lens=True, init=True)
    feeds = _feeds(data, ((6, 1), (5, 7), (4, 16)))
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = 2
    two = _check(data, feeds, so=so)
    one = numba_session(data)
    for f in feeds:
        for a, b in zip(two.run(None, f), one.run(None, f)):
            # (a batch half per thread: BLAS over fewer rows rounds differently, ~1e-7 after 16 steps)
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
            if direction == "bidirectional":   # (a whole direction per thread: the same products)
                np.testing.assert_array_equal(a, b)
    assert loops["numpy"] == 0


_RUN_ONE = """
import os, sys, numpy as np, dynashape
from dynashape.ops_builtin.fast import recurrent
so = dynashape.SessionOptions()
so.intra_op_num_threads = int(sys.argv[1])
data = open(sys.argv[2], "rb").read()
sess = dynashape.InferenceSession(data, so)
sess.run(None, {"x": np.ones((3, 2, 5), np.float32)})
print(len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_a_serial_run_after_a_parallel_one_starts_no_threads(tmp_path):
    """After a process ran (and cached) the loop over two threads, a single-threaded process's
    run starts no thread: one compiled function serves both, and only a run with more than
    one intra-op thread starts the worker threads (once numba's ``parallel=True`` variant
    shared the cache entry, and its thread pool spun beside the caller)."""
    import os
    import subprocess
    import sys
    path = tmp_path / "m.onnx"
    path.write_bytes(_rnn_model("LSTM", "bidirectional"))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", NUMBA_CACHE_DIR=str(tmp_path / "cache"))   # (a fresh cache)
    run = [sys.executable, "-c", _RUN_ONE]
    subprocess.run(run + ["2", str(path)], check=True, env=env, capture_output=True)
    out = subprocess.run(run + ["1", str(path)], check=True, env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "1", out.stdout + out.stderr


def test_lstm_small_from_the_zoo(loops):
    """The benchmark's model: two bidirectional LSTMs (hidden 64) behind Transposes."""
    import os
    path = "/work/shared/zoo/lstm_small.onnx"
    if not os.path.exists(path):
        pytest.skip("zoo model not available")
    data = open(path, "rb").read()
    fast, plain = numba_session(data), numba_session(data, compiled_kernels=False)
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for b, s in ((1, 16), (3, 7), (8, 128)):
        x = {"features": RNG.standard_normal((b, s, 32)).astype(np.float32)}
        for g, p, w in zip(fast.run(None, x), plain.run(None, x), ref.run(None, x)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(g, p, rtol=1e-5, atol=2e-6)
    assert loops["loop"] == 6 and loops["numpy"] == 0


# ---------------------------------------------------------------------------------------
# what the loops hand over to the numpy kernel
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("op,attrs", [
    ("LSTM", {"clip": 0.5}), ("GRU", {"clip": 0.7}), ("RNN", {"clip": 0.4}),
    ("LSTM", {"activations": ["Sigmoid", "Relu", "Tanh"]}),
    ("GRU", {"activations": ["HardSigmoid", "Tanh"], "activation_alpha": [0.3], "activation_beta": [0.4]}),
    ("RNN", {"activations": ["Relu"]}),
    ("LSTM", {"input_forget": 1}), ("LSTM", {"peepholes": True}),
])
def test_hand_over_to_the_numpy_kernel(op, attrs, loops):
    data = _rnn_model(op, "forward", lens=True, init=True, **attrs)
    _check(data, _feeds(data, ((4, 3), (2, 1))), rtol=1e-5, atol=2e-6)
    assert loops["loop"] == 0 and loops["numpy"] == 2


def test_default_activations_spelled_out_run_the_loop(loops):
    data = _rnn_model("GRU", "bidirectional", activations=["sigmoid", "Tanh", "Sigmoid", "TANH"])
    _check(data, _feeds(data, ((3, 2),)))
    assert loops["loop"] == 1 and loops["numpy"] == 0


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_layout_1_hands_over(op, loops):
    """(onnxruntime has no batch-major RNNs: against the numpy kernel.)"""
    data = _rnn_model(op, "bidirectional", lens=True, init=True, layout=1)
    _check(data, _feeds(data, ((4, 3), (2, 1))), ref=False)
    assert loops["loop"] == 0 and loops["numpy"] == 2


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_float64_past_the_size_limit_hands_over(op, loops):
    """float64 runs the loop up to F64_COMPILED_MAX cell elements per step (its exp / tanh
    are scalar), the numpy kernel past it; both in one session."""
    hidden = recurrent.F64_COMPILED_MAX // 8
    data = _rnn_model(op, "forward", hidden=hidden, dtype=np.float64, lens=True, init=True)
    _check(data, _feeds(data, ((3, 8), (3, 9)), dtype=np.float64), rtol=1e-12, atol=1e-13, ref=False)
    assert loops["loop"] == 1 and loops["numpy"] == 1


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_float16_is_the_numpy_kernels(op):
    data = _rnn_model(op, "forward", dtype=np.float16)
    sess = numba_session(data)
    assert all(st.kernel.plugin != "fast" for st in sess.program.steps if st.kernel.op_type == op)
    f = _feeds(data, ((3, 2),), dtype=np.float16)[0]
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, f)
    for g, w in zip(sess.run(None, f), want):
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=2e-2, atol=2e-2)
