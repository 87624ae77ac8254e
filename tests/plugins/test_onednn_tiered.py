"""oneDNN primitives made off the run path (``dynashape.ops_builtin.fast.onednn.tiered``): a new
shape's LayerNormalization, Softmax, attention core, Gelu, pool or Transpose runs its numpy
path while a background thread makes (and first executes) the primitive; the runs after take
the primitive, within the tolerance the oneDNN kernels are tested to; a run that waits for
compiled kernels makes it on the run path; a shape oneDNN has no implementation for keeps
numpy. Also the weight relayout that goes through the plain layout where oneDNN's direct
reorder is its generic loop. Skipped where the library is missing or the plugin is off.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from dynashape.ops_builtin.fast import onednn, tiering
from dynashape.ops_builtin.fast.onednn import api, tiered

ort = pytest.importorskip("onnxruntime")
if not onednn.enabled() or api.library() is None:
    pytest.skip(f"the oneDNN kernels are off or missing ({api.unavailable_reason() or 'switched off'})",
                allow_module_level=True)

RNG = np.random.default_rng(11)


@pytest.fixture
def tiers(monkeypatch):
    """Runs take the numpy path until a primitive is made (the default outside the tests,
    which wait: DYNASHAPE_COMPILED_WAIT=1), with a cache of their own."""
    monkeypatch.setattr(tiering, "WAIT_ALWAYS", False)
    monkeypatch.setattr(api, "SHARED", api.PrimitiveCache(api.SHARED_CAPACITY))
    yield
    assert tiered.BACKGROUND.wait_idle(30)


def _block_model() -> onnx.ModelProto:
    """LayerNormalization -> the attention core (the builtin rewrite fuses it) -> Gelu."""
    h = 64
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
             helper.make_node("Transpose", ["n"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["n", "kt"], ["s"]), helper.make_node("Mul", ["s", "c"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "n"], ["a"]),
             helper.make_node("Gelu", ["a"], ["y"])]
    inits = [numpy_helper.from_array(RNG.uniform(0.5, 1.5, h).astype(np.float32), "g"),
             numpy_helper.from_array(RNG.standard_normal(h).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(0.125, np.float32), "c")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", h])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    return m


def _onednn_ops(sess) -> set:
    return {st.kernel.op_type for st in sess.program.steps if st.kernel.plugin == "onednn"}


def _numpy_paths(monkeypatch) -> list:
    """Records each call of the numpy paths the oneDNN LayerNormalization, attention core and
    Gelu fall back to (their op names)."""
    from dynashape.ops_builtin import fusions, nn
    called = []
    for module, name, op in ((nn, "_layer_norm", "LayerNormalization"),
                             (fusions, "_fused_attention", "FusedAttention")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _op=op: (called.append(_op), _real(*a))[1])
    gelu = fusions.EPILOGUES["Gelu"]
    monkeypatch.setitem(fusions.EPILOGUES, "Gelu", (lambda *a: (called.append("Gelu"), gelu[0](*a))[1], gelu[1]))
    return called


def test_a_new_shape_runs_numpy_while_its_primitives_are_made_in_the_background(tiers, monkeypatch):
    m = _block_model()
    sess = dynashape.InferenceSession(m.SerializeToString(), optimize=True)
    reference = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert {"LayerNormalization", "FusedAttention", "Gelu"} <= _onednn_ops(sess)
    x = RNG.standard_normal((2, 24, 64)).astype(np.float32) * 2
    want = reference.run(None, {"x": x})[0]
    numpy_calls = _numpy_paths(monkeypatch)
    (first,) = sess.run(None, {"x": x})                 # the numpy paths: nothing is made yet
    assert sorted(set(numpy_calls)) == ["FusedAttention", "Gelu", "LayerNormalization"]
    assert tiered.BACKGROUND.wait_idle(30)
    numpy_calls.clear()
    made = [v for v in api.SHARED._made.values()]
    kinds = {k[0] for k in api.SHARED._made}
    assert {"layer_norm", "attention", "gelu"} <= kinds and tiered.UNAVAILABLE not in made
    prims = [p for v in made for p in tiered._primitives_of(v)]
    assert all(p.made for p in prims)                    # executed once in the background
    executed = set()
    execute = api.Primitive.execute

    def counted(self, *args, **kwargs):
        executed.add(id(self))
        return execute(self, *args, **kwargs)
    monkeypatch.setattr(api.Primitive, "execute", counted)
    (second,) = sess.run(None, {"x": x})                # takes every primitive made
    assert {id(p) for p in prims} <= executed and numpy_calls == []
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(second, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(second, first, rtol=1e-4, atol=1e-5)


def test_a_run_that_waits_for_compiled_kernels_makes_the_primitives_first(tiers, monkeypatch):
    m = _block_model()
    sess = dynashape.InferenceSession(m.SerializeToString(), wait_for_compiled_kernels=True, optimize=True)
    x = RNG.standard_normal((1, 20, 64)).astype(np.float32)
    numpy_calls = _numpy_paths(monkeypatch)
    (y,) = sess.run(None, {"x": x})
    assert numpy_calls == []                             # the primitives ran from the first run
    kinds = {k[0] for k in api.SHARED._made}             # made on the run path, before the run ended
    assert {"layer_norm", "attention", "gelu"} <= kinds
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def test_a_shape_onednn_cannot_make_keeps_the_numpy_path(tiers, monkeypatch):
    from dynashape.ops_builtin.fast.onednn import rowwise
    asked = []

    def refuse(*args):
        asked.append(args[0])
        raise api.OneDNNError("dnnl_matmul_primitive_desc_create", api.UNIMPLEMENTED)
    monkeypatch.setattr(rowwise, "_AttentionPrims", refuse)
    m = _block_model()
    sess = dynashape.InferenceSession(m.SerializeToString(), optimize=True)
    want_of = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = RNG.standard_normal((1, 16, 64)).astype(np.float32)
    for _ in range(3):
        (y,) = sess.run(None, {"x": x})
        assert tiered.BACKGROUND.wait_idle(30)
        np.testing.assert_allclose(y, want_of.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert asked == [(1, 16, 64)]                         # asked once, then known to be unavailable
    assert tiered.UNAVAILABLE in api.SHARED._made.values()


def test_tiered_primitives_of_pools_and_transposes_agree_with_onnxruntime(tiers):
    """A CNN's pools (channels-last) and a large Transpose: numpy first, the primitive after."""
    c = 8
    nodes = [helper.make_node("Conv", ["x", "w"], ["cv"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["cv"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["p"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Transpose", ["x2"], ["t"], perm=[0, 2, 3, 1])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"]),
                                       helper.make_tensor_value_info("x2", TensorProto.FLOAT, ["m", 16, 64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(RNG.standard_normal((c, 3, 3, 3)).astype(np.float32), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    sess = dynashape.InferenceSession(m.SerializeToString(), optimize=True)
    assert {"NhwcMaxPool", "NhwcAveragePool", "Transpose"} <= _onednn_ops(sess)
    reference = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"x": RNG.standard_normal((2, 3, 20, 18)).astype(np.float32),
             "x2": RNG.standard_normal((1, 16, 64, 64)).astype(np.float32)}
    want = reference.run(None, feeds)
    for _ in range(2):
        got = sess.run(None, feeds)
        assert tiered.BACKGROUND.wait_idle(30)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert {"pool", "reorder"} <= {k[0] for k in api.SHARED._made}


@pytest.mark.parametrize("group,activation,residual", [(1, "Relu", True), (2, None, False), (8, "Relu", False)])
def test_a_small_convolution_runs_numpy_on_the_unpacked_weights_until_its_primitive_is_made(
        tiers, group, activation, residual):
    """A new image size of a convolution below NUMPY_FIRST_MACS: numpy (bias, residual and
    activation as the fused node has them) on the weights as the model gave them before the
    first primitive run, on the weights copied out of oneDNN's packed layout after it; then the
    primitive; values as onnxruntime's every time, through three sizes."""
    from dynashape.ops_builtin.fast.onednn import conv
    c, m = 8, 16
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["cv"], pads=[1, 1, 1, 1], group=group)]
    last = "cv"
    if residual:
        nodes.append(helper.make_node("Add", [last, "r"], ["sum"]))
        last = "sum"
    if activation:
        nodes.append(helper.make_node(activation, [last], ["act"]))
        last = "act"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", c, "h", "w"])]
    if residual:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, ["n", m, "h", "w"]))
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(RNG.standard_normal((m, c // group, 3, 3)).astype(np.float32), "w"),
                           numpy_helper.from_array(RNG.standard_normal(m).astype(np.float32), "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = dynashape.InferenceSession(model.SerializeToString(), optimize=True)
    assert "NhwcConv" in _onednn_ops(sess)
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    numpy_runs = []
    run_numpy = conv.PackedConv._run_numpy

    def counted(self, *args):
        numpy_runs.append((args[-1], self._given is not None))
        return run_numpy(self, *args)
    conv.PackedConv._run_numpy = counted
    try:
        for n, h, w in ((1, 9, 7), (2, 5, 5), (1, 9, 7)):
            feeds = {"x": RNG.standard_normal((n, c, h, w)).astype(np.float32)}
            if residual:
                feeds["r"] = RNG.standard_normal((n, m, h, w)).astype(np.float32)
            for _ in range(2):
                (y,) = sess.run(None, feeds)
                assert tiered.BACKGROUND.wait_idle(30)
                np.testing.assert_allclose(y, reference.run(None, feeds)[0], rtol=1e-4, atol=1e-4)
    finally:
        conv.PackedConv._run_numpy = run_numpy
    # each size's first run only: the first on the given weights, the next (after a primitive
    # ran, which drops them) on the copy out of the packed layout
    assert numpy_runs == [((1, c, 9, 7), True), ((2, c, 5, 5), False)]


def _dense_model(activation: str) -> onnx.ModelProto:
    """MatMul by a constant 64 x 128 weight, + bias, then the activation (the builtin rewrites
    fuse them into one FusedMatMul)."""
    k, n = 64, 128
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["y0"])]
    if activation:
        nodes.append(helper.make_node(activation, ["y0"], ["y1"]))
    nodes.append(helper.make_node("Identity", [nodes[-1].output[0]], ["y"]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(RNG.standard_normal((k, n)).astype(np.float32), "w"),
                           numpy_helper.from_array(RNG.standard_normal(n).astype(np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("activation", ["", "Gelu"])
def test_a_small_packed_gemm_runs_numpy_on_its_weights_until_its_primitive_is_made(tiers, monkeypatch, activation):
    """A weight small enough to keep as given (a 64 x 128 FusedMatMul): a new row count runs
    numpy's matmul (bias and activation after it) while its primitive is made off the run
    path, then the primitive; values as onnxruntime's every time. The given copy of a weight
    oneDNN alone computes (a Gelu epilogue) is dropped at its first primitive run, so a later
    new row count makes its primitive on the run path; the plain one (no activation) is kept
    for numpy."""
    from dynashape.ops_builtin.fast.onednn import gemm
    m = _dense_model(activation)
    sess = dynashape.InferenceSession(m.SerializeToString(), optimize=True)
    (packed,) = [st.prepacked for st in sess.program.steps if isinstance(st.prepacked, gemm.PackedGemm)]
    if packed.panels is not None or packed.row_major is not None:
        pytest.skip("the weight is not in a blocked oneDNN layout here (an AVX2-only CPU): no primitive per row count")
    reference = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    numpy_runs = []
    epilogue = gemm.PackedGemm._bias_and_epilogue
    monkeypatch.setattr(gemm.PackedGemm, "_bias_and_epilogue",
                        lambda self, y2: (numpy_runs.append(y2.shape[0]), epilogue(self, y2))[1])
    outs = []
    for rows in (64, 64, 48, 48):
        x = {"x": RNG.standard_normal((rows, 64)).astype(np.float32)}
        (y,) = sess.run(None, x)
        assert tiered.BACKGROUND.wait_idle(30)
        np.testing.assert_allclose(y, reference.run(None, x)[0], rtol=1e-4, atol=1e-4)
        outs.append((x, y))
    assert numpy_runs == ([64, 48] if not activation else [64])
    assert (packed._given is None) == bool(activation)
    (again,) = sess.run(None, outs[0][0])                   # the primitive, within the tolerance of numpy's run
    np.testing.assert_allclose(again, outs[0][1], rtol=1e-4, atol=1e-4)
    waiting = dynashape.InferenceSession(m.SerializeToString(), optimize=True, wait_for_compiled_kernels=True)
    numpy_runs.clear()
    x = {"x": RNG.standard_normal((40, 64)).astype(np.float32)}
    (y,) = waiting.run(None, x)
    assert numpy_runs == []                                  # a session that waits: the primitive from its first run
    np.testing.assert_allclose(y, reference.run(None, x)[0], rtol=1e-4, atol=1e-4)


def test_a_blocked_layout_is_copied_into_the_plain_one_by_numpy():
    """Blocking.plain_copy on a layout with two inner blocks of one dim and one of another
    (as AVX-512's OIhw16i16o-like layouts have), padded, built by hand: every element lands
    where the layout's formula puts it."""
    dims = (5, 6)
    padded = (8, 8)
    blocking = api.Blocking(padded, (32, 16), (2, 4, 2), (1, 0, 1))   # blocks: b by 2, a by 4, b by 2
    data = np.full(64, np.nan, np.float32)
    want = RNG.standard_normal(dims).astype(np.float32)
    for i in range(dims[0]):
        for j in range(dims[1]):
            offset = (i // 4) * 32 + (j // 4) * 16 + ((j % 4) // 2) * 8 + (i % 4) * 2 + (j % 2)
            data[offset] = want[i, j]
    np.testing.assert_array_equal(blocking.plain_copy(data, dims), want)


def test_a_relayout_through_the_plain_layout_copies_what_a_direct_reorder_copies():
    """Two blocked layouts oneDNN chose for one 3 x 3 convolution weight (a 16 x 16 image's
    and a 1 x 1 image's): relayout gives the bytes the direct reorder gives, whichever
    route it takes."""
    from dynashape.ops_builtin.fast.onednn import conv
    w = RNG.standard_normal((64, 32, 3, 3)).astype(np.float32)
    plain = api.MemoryDesc(w.shape, strides=(288, 9, 3, 1))
    layouts = []
    for side in (16, 1):
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
        packed = conv.PackedConv.__new__(conv.PackedConv)
        packed.attrs, packed.group, packed.m, packed.c, packed.kernel = dict(
            (a.name, list(a.ints)) for a in node.attribute), 1, 64, 32, (3, 3)
        packed.bias, packed.residual, packed.post_ops = None, False, ()
        layouts.append(packed._probe((1, 32, side, side)).mds[1])
    src, dst = layouts
    packed_w = np.zeros(src.nbytes // 4 + 16, np.float32)
    api.reorder(plain, src, w.ctypes.data, packed_w.ctypes.data)
    direct = np.full(dst.nbytes // 4, np.nan, np.float32)
    routed = np.full(dst.nbytes // 4, np.nan, np.float32)
    api.reorder(src, dst, packed_w.ctypes.data, direct.ctypes.data)
    api.relayout(src, dst, packed_w.ctypes.data, routed.ctypes.data)
    np.testing.assert_array_equal(routed, direct)
    back = np.zeros_like(w)                              # and the values are the weight's
    api.reorder(dst, plain, routed.ctypes.data, back.ctypes.data)
    np.testing.assert_array_equal(back, w)


@pytest.mark.parametrize("group", [1, 2, 8])
def test_a_primitive_made_on_one_thread_runs_on_another(group):
    """Each primitive runs on the calling thread's scratchpad: a grouped convolution whose
    primitive a first run made on another thread (oneDNN 3.2's gemm-based convolution on an
    AVX2 CPU, which crashed the process on a second thread with its library-owned
    scratchpad) gives onnxruntime's values on this one, and on that one again."""
    import threading
    c, m = 8, 16
    g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], group=group)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", c, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(RNG.standard_normal((m, c // group, 3, 3)).astype(np.float32), "w"),
                           numpy_helper.from_array(RNG.standard_normal(m).astype(np.float32), "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = dynashape.InferenceSession(model.SerializeToString(), wait_for_compiled_kernels=True, optimize=True)
    x = RNG.standard_normal((1, c, 9, 7)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = []
    for _ in range(2):
        worker = threading.Thread(target=lambda: got.append(sess.run(None, {"x": x})[0]))
        worker.start()
        worker.join()
        got.append(sess.run(None, {"x": x})[0])
    assert len(got) == 4
    for y in got:
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


_FORKED = """
import os, sys
import numpy as np
import dynashape
from dynashape.ops_builtin.fast.onednn import api, tiered
data = open(sys.argv[1], "rb").read()
sess = dynashape.InferenceSession(data, optimize=True)
sess.run(None, {"x": np.ones((1, 8, 64), np.float32)})      # the parent's thread starts
assert tiered.BACKGROUND.wait_idle(30)
pid = os.fork()
if pid == 0:                                                 # the child: a new shape, made by a thread of its own
    sess.run(None, {"x": np.ones((1, 5, 64), np.float32)})
    ok = tiered.BACKGROUND.wait_idle(30) and any(k[0] == "layer_norm" and k[1] == 5 for k in api.SHARED._made)
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_makes_its_primitives_with_a_thread_of_its_own(tmp_path):
    """A process forked after the background thread started (a worker pool's fork): the
    child has no such thread; its new shapes start one of its own and get their primitives."""
    import subprocess
    import sys
    if not hasattr(__import__("os"), "fork"):
        pytest.skip("no fork here")
    path = tmp_path / "block.onnx"
    path.write_bytes(_block_model().SerializeToString())
    env = dict(__import__("os").environ, DYNASHAPE_COMPILED_WAIT="0")
    out = subprocess.run([sys.executable, "-c", _FORKED, str(path)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0", out.stderr
