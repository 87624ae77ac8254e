"""The oneDNN plugin (``dynashape.ops_builtin.fast.onednn``, entry point ``onednn``): every kernel
against the numpy kernels (a session with ``compiled_kernels=False``) and ONNX Runtime on
the same feeds, through changing shapes on one session, with one and two intra-op threads:
GEMM against a constant weight (MatMul, Gemm, FusedMatMul with its post-ops), the
channels-last regions (NhwcConv with groups, dilations, strides, pads and auto_pad, the
residual and activation epilogues, NHWC pools, Concat, the borders), Transpose; the nodes
each kernel declines (QDQ neighbours, non-constant weights, other dtypes); the packed weight
replacing the initializer; the NHWC ops' numpy reference kernels. Skipped where the library
is not installed or the plugin is switched off (DYNASHAPE_ONEDNN=0 / DYNASHAPE_FAST=0).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from dynashape import compiled
from dynashape.ops_builtin.fast import onednn
from dynashape.ops_builtin.fast.onednn import api
from tests.conftest import onednn_blocks_weights

ort = pytest.importorskip("onnxruntime")
if not onednn.enabled() or api.library() is None:
    pytest.skip(f"the oneDNN kernels are off or missing ({api.unavailable_reason() or 'switched off'})",
                allow_module_level=True)

RNG = np.random.default_rng(5)
F = TensorProto.FLOAT


def _model(nodes, inputs, inits=(), opset=17, outputs=("y",), domains=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, d) for n, d in inputs],
                              [helper.make_tensor_value_info(o, F, None) for o in outputs],
                              [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]
                          + [helper.make_opsetid(d, 1) for d in domains])
    m.ir_version = 8
    return m


def _rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _sessions(model, threads: int):
    data = model.SerializeToString()
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = threads
    fast = dynashape.InferenceSession(data, so, optimize=True)
    plain = dynashape.InferenceSession(data, optimize=True, compiled_kernels=False)
    return fast, plain


def _check(model, feeds_list, *, ops, threads=1, rtol=2e-5, atol=2e-5, with_ort=True):
    """oneDNN vs numpy vs ONNX Runtime on every feed set (one session each, the feeds in
    turn, compared after the whole sequence); ``ops``: op types that must run oneDNN kernels."""
    fast, plain = _sessions(model, threads)
    used = {st.kernel.op_type for st in fast.program.steps if st.kernel.plugin == "onednn"}
    assert set(ops) <= used, f"oneDNN kernels used: {used}, expected {set(ops)}"
    assert all(st.kernel.plugin != "onednn" for st in plain.program.steps)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]) if with_ort else None
    runs = [(feeds, fast.run(None, feeds)) for feeds in feeds_list]
    for feeds, got in runs:
        want_np = plain.run(None, feeds)
        want = ref.run(None, feeds) if ref is not None else want_np
        for g, p, w in zip(got, want_np, want):
            assert g.shape == p.shape == w.shape and g.dtype == w.dtype
            scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
            np.testing.assert_allclose(g, p, rtol=rtol, atol=atol * scale)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * scale)
    return fast


THREADS = pytest.mark.parametrize("threads", [1, 2])


# GEMM ---------------------------------------------------------------------------------

@THREADS
@pytest.mark.parametrize("k,n", [(67, 129), (128, 64), (256, 17)])
def test_matmul_against_a_constant_weight_is_one_gemm_over_the_leading_dims(k, n, threads):
    w = _rand(k, n)
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", ["a", "b", k])], [("w", w)])
    feeds = [{"x": _rand(a, b, k)} for a, b in ((1, 1), (2, 7), (0, 5), (3, 1), (1, 33), (2, 7))]
    sess = _check(m, feeds, ops={"MatMul"}, threads=threads)
    assert sess.graph.packed_away, "the packed weight replaces the initializer"


@pytest.mark.parametrize("n", [512, 520])
def test_a_row_major_weight_with_rows_2_kib_apart_is_padded(n, monkeypatch):
    """Where oneDNN keeps the weight row-major (AVX2-only CPUs), rows a multiple of 2 KiB
    apart (512 floats) get 16 floats of padding each (gemm.PLAIN_ROW_PAD: they would share
    cache sets); 520-float rows stay as they are; the products are the same at every row count.
    (The layout of the primitive: where the native loop runs, an AVX2 CPU packs column panels instead.)"""
    from dynashape.ops_builtin.fast.onednn import gemm
    monkeypatch.setattr(gemm, "panels_supported", lambda: False)
    w = _rand(96, n)
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", ["a", 96])], [("w", w)])
    sess = _check(m, [{"x": _rand(a, 96)} for a in (64, 1, 300, 7)], ops={"MatMul"})
    (packed,) = [st.prepacked for st in sess.program.steps if st.kernel.plugin == "onednn"]
    blocking = packed.weights.layouts[0][0].blocking()
    if not blocking.inner_blks:      # (blocked layouts, AVX-512 CPUs: oneDNN's own)
        assert blocking.strides == ((n + gemm.PLAIN_ROW_PAD, 1) if n % 512 == 0 else (n, 1))


def _force_panels(monkeypatch):
    """Column panels for every weight (as an AVX2-only CPU chooses), so every CPU that can
    run the native loop runs them; the loop loaded (not numpy's stand-in)."""
    from dynashape.ops_builtin.fast.onednn import gemm
    if not gemm.panels_supported():
        pytest.skip("the native panel loop needs x86-64 Linux with AVX2 and FMA, and llvmlite")
    assert gemm.native_panels.wait_until_ready(300), gemm.native_panels._LOADING.failed
    monkeypatch.setattr(gemm, "_row_major_layout", lambda md: True)
    return gemm


@THREADS
@pytest.mark.parametrize("k,n", [(67, 129), (1, 4096), (300, 16), (5000, 3), (768, 2304)])
@pytest.mark.parametrize("epilogue", [None, "bias", "Gelu"])
def test_a_weight_in_column_panels_runs_the_native_loop_at_every_row_count(k, n, epilogue, threads, monkeypatch):
    """A weight packed in 16-column panels (the last one zero-padded), replacing the
    initializer, runs the native tile loop at every row count (tiles of 6, 4, 2 and 1 rows,
    row blocks of M_BLOCK and a partial last one, the partial last panel through scratch, the
    panels split over the threads), then the bias and the activation; 0 rows too."""
    gemm = _force_panels(monkeypatch)
    calls = []
    real = gemm.native_panels.panel_gemm
    monkeypatch.setattr(gemm.native_panels, "panel_gemm", lambda *a: calls.append(a[0].shape) or real(*a))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h" if epilogue else "y"])]
    inits = [("w", _rand(k, n, scale=k ** -0.5))]
    if epilogue:
        nodes.append(helper.make_node("Add", ["h", "b"], ["y" if epilogue == "bias" else "a"]))
        inits.append(("b", _rand(n)))
    if epilogue == "Gelu":
        nodes.append(helper.make_node("Gelu", ["a"], ["y"]))
    m = _model(nodes, [("x", ["a", "b", k])], inits, opset=20)
    blocks = (1, 2 * gemm.native_panels.M_BLOCK + 17)
    feeds = [{"x": _rand(a, b, k)} for a, b in ((1, 1), (1, 5), (2, 7), (1, 16), (0, 3), (3, 11), blocks, (1, 1))]
    sess = _check(m, feeds, ops={"FusedMatMul" if epilogue else "MatMul"}, threads=threads)
    (packed,) = [st.prepacked for st in sess.program.steps if st.prepacked is not None]
    assert packed.weights is None and packed.panels.shape == (-(-n // 16), k, 16)
    assert sess.graph.packed_away, "the panels replace the initializer"
    if n % 16:
        assert not packed.panels[-1, :, n % 16:].any()
    assert calls, "the native loop ran"
    assert (blocks[0] * blocks[1], k) in calls, "two row blocks and a partial one went through the native loop"


def test_a_cnns_classifier_head_keeps_onednns_primitive_and_numba_unloaded(monkeypatch):
    """Column panels only where the model's GEMM weights weigh at least its convolution
    weights (gemm.panels_pay, through ctx.services.constant_bytes): a CNN's classifier Gemm
    keeps oneDNN's row-major primitive (the panels measured no faster on a node that is a
    sliver of the run); the same Gemm alone takes the panels."""
    _force_panels(monkeypatch)
    c = 64
    head = [helper.make_node("GlobalAveragePool", ["r"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
            helper.make_node("Gemm", ["f", "wg", "bg"], ["y"])]
    nodes = [helper.make_node("Conv", ["x", "wc"], ["cv"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["cv"], ["r"])]
    inits = [("wc", _rand(c, c, 3, 3, scale=0.05)), ("wg", _rand(c, 100, scale=0.1)), ("bg", _rand(100))]
    cnn = _check(_model(nodes + head, [("x", ["n", c, 6, 6])], inits), [{"x": _rand(n, c, 6, 6)} for n in (1, 3)],
                 ops={"Gemm"}, rtol=1e-4, atol=1e-5)
    (gemm,) = [st.prepacked for st in cnn.program.steps if st.node.node.op_type == "Gemm"]
    assert gemm.panels is None and gemm.weights is not None
    services = cnn.program.services
    assert services.constant_bytes(("Gemm",)) == (c * 100 + 100) * 4
    alone = _check(_model(head, [("r", ["n", c, 6, 6])], inits[1:]), [{"r": _rand(n, c, 6, 6)} for n in (1, 3)],
                   ops={"Gemm"})
    (gemm,) = [st.prepacked for st in alone.program.steps if st.node.node.op_type == "Gemm"]
    assert gemm.panels is not None


def test_every_row_and_column_of_a_panel_product_rounds_alike(monkeypatch):
    """Each output element is one fused multiply-add chain over k in order, whatever tile or
    panel computes it: equal rows of A give bit-identical output rows (ONNX's light_squeezenet
    needs that of its convs) and equal columns of W bit-identical output columns; one row
    (several panels at once: native.panels.ROW_PANELS) sums the same chain."""
    gemm = _force_panels(monkeypatch)
    k, n, m = 200, 16 * 13 + 5, 17          # one row: two groups of six panels, then tiles
    row, col = _rand(k), _rand(k)
    w = np.repeat(col[:, None], n, axis=1)
    packed = gemm.PackedGemm(w, None, ())
    a = np.repeat(row[None], m, axis=0)
    y, y1 = np.empty((m, n), np.float32), np.empty((1, n), np.float32)
    packed.run(a, y)
    packed.run(a[:1], y1)
    assert (y == y[0, 0]).all() and (y1 == y[0, 0]).all()
    chain = np.float32(0)
    for x, v in zip(row, col):      # fma(x, v, chain) in float32: the float64 product of two float32 is exact
        chain = np.float32(np.float64(x) * np.float64(v) + np.float64(chain))
    assert y[0, 0] == chain


def test_before_the_native_loop_is_loaded_the_panels_run_numpy(monkeypatch):
    """The first calls of a process, while the native loop loads (or builds) in the
    background: numpy's batched matmul over the panels, the same product."""
    gemm = _force_panels(monkeypatch)
    monkeypatch.setattr(gemm.native_panels, "ready", lambda: False)
    k, n = 70, 45
    w, b = _rand(k, n), _rand(n)
    packed = gemm.PackedGemm(w, b, (("eltwise", "relu", 0.0, 0.0),))
    for m in (1, 9):
        a, y = _rand(m, k), np.empty((m, n), np.float32)
        packed.run(a, y)
        np.testing.assert_allclose(y, np.maximum(a @ w + b, 0), rtol=1e-5, atol=1e-5)


@THREADS
@pytest.mark.parametrize("activation", [None, "Gelu"])
def test_few_rows_against_a_row_major_packed_weight_run_blas_on_its_memory(activation, threads, monkeypatch):
    """Where oneDNN keeps a weight row-major (AVX2-only CPUs; forced here, so every CPU runs
    it) and the native loop cannot run (no column panels), up to gemm.BLAS_ROWS rows at one thread run
    numpy's matmul on a view of the packed memory (no copy), then the bias and the
    activation; more rows, or more threads (OpenBLAS's would wait on oneDNN's spinning OpenMP
    workers), take oneDNN's primitive. Every row count agrees with ONNX Runtime and the numpy
    kernels."""
    from dynashape.ops_builtin.fast.onednn import gemm
    monkeypatch.setattr(gemm, "_padded", lambda md: api.MemoryDesc(md.dims, strides=(md.dims[1] + 16, 1)))
    monkeypatch.setattr(gemm, "panels_supported", lambda: False)     # (else column panels)
    k, n = 512, 520                   # 1.06 MB: at least BLAS_MIN_BYTES
    added = "y" if activation is None else "a"
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], [added])]
    if activation:
        nodes.append(helper.make_node(activation, ["a"], ["y"]))
    m = _model(nodes, [("x", ["a", "b", k])], [("w", _rand(k, n, scale=k ** -0.5)), ("b", _rand(n))], opset=20)
    rows = (1, 4, 16, 17, 40, 16, 1)
    sess = _check(m, [{"x": _rand(1, r, k)} for r in rows], ops={"FusedMatMul"}, threads=threads)
    (packed,) = [st.prepacked for st in sess.program.steps if st.kernel.plugin == "onednn"]
    _, buf, _ = packed.weights.layouts[0]
    assert packed.blas_rows == gemm.BLAS_ROWS and np.shares_memory(packed.row_major, buf)
    a, y = _rand(16, k), np.empty((16, n), np.float32)
    monkeypatch.setattr(gemm, "intra_op_threads", lambda: 1)
    packed.run(a, y)
    want = np.matmul(a, packed.row_major) + packed.bias
    if activation is None:
        np.testing.assert_array_equal(y, want)      # BLAS itself, bias added after


def test_a_primitive_shared_by_call_sites_keeps_each_sites_pointers(monkeypatch):
    """One primitive called from several sites in turn (the equal nodes of a transformer's
    blocks), each with its own arrays, a site handed new arrays, and more sites than a thread
    keeps (the oldest dropped): every call reads and writes the arrays it was given."""
    if api.library() is None:
        pytest.skip(api.unavailable_reason())
    monkeypatch.setattr(api, "MAX_SITES", 3)
    prim = api.make_eltwise(48, "relu")
    rng = np.random.default_rng(0)
    sites = [object() for _ in range(5)]
    arrays = {id(s): (rng.standard_normal(48).astype(np.float32), np.empty(48, np.float32)) for s in sites}
    for _ in range(3):
        for site in sites + [None]:
            x, y = arrays[id(site)] if site is not None else (rng.standard_normal(48).astype(np.float32),
                                                              np.empty(48, np.float32))
            y.fill(np.nan)
            prim.execute((x, y), site)
            np.testing.assert_array_equal(y, np.maximum(x, 0))
        first = id(sites[0])
        arrays[first] = (rng.standard_normal(48).astype(np.float32), np.empty(48, np.float32))   # new data, same site
    assert len(prim._local.sites) <= 3
    # within MAX_SITES, each site's memory objects hold its own arrays' pointers, not the last caller's
    a, b = sites[:2]
    prim.execute(arrays[id(a)], a)
    prim.execute(arrays[id(b)], b)
    for site in (a, b):
        held = [entry[1] for entry in prim._local.sites[id(site)].last]
        assert held == [arr.ctypes.data for arr in arrays[id(site)]]


def test_matmul_of_a_vector_and_of_four_dims():
    w = _rand(96, 80)
    nodes = [helper.make_node("MatMul", ["v", "w"], ["y"]), helper.make_node("MatMul", ["x", "w"], ["z"])]
    m = _model(nodes, [("v", [96]), ("x", ["a", 3, "b", 96])], [("w", w)], outputs=("y", "z"))
    feeds = [{"v": _rand(96), "x": _rand(a, 3, b, 96)} for a, b in ((1, 2), (2, 1), (1, 0))]
    _check(m, feeds, ops={"MatMul"})


@THREADS
@pytest.mark.parametrize("k,n", [(768, 2304), (100, 41), (5000, 70), (17, 1000), (300, 64)])
@pytest.mark.parametrize("activation", [None, "Relu", "tanh", "LeakyRelu", "HardSigmoid"])
@pytest.mark.parametrize("native", [True, False], ids=["native", "primitive"])
def test_one_row_streams_the_packed_weight_through_the_native_slab_loop(k, n, activation, native, threads,
                                                                        monkeypatch):
    """A decode step's single row: the native loop over the packed weight's 64-column slabs
    (rows and columns padded, a partial last slab through scratch, the slabs split over the
    threads) with the bias in the same pass, then the activation (oneDNN's eltwise primitive
    of the post-op, its alpha and beta too); before the loop is loaded, oneDNN's primitive.
    More rows take the primitive."""
    from dynashape.ops_builtin.fast.onednn import gemm
    if not gemm.gemv_supported():
        pytest.skip("the native one-row loop needs x86-64 Linux with AVX2 and FMA, and llvmlite")
    if native:
        assert gemm.native_gemv.wait_until_ready(300), gemm.native_gemv._LOADING.failed
    else:
        monkeypatch.setattr(gemm.native_gemv, "ready", lambda: False)
    calls = []
    real = gemm.native_gemv.slab_gemv
    monkeypatch.setattr(gemm.native_gemv, "slab_gemv", lambda *a: calls.append(a[0].shape) or real(*a))
    added = "y" if activation is None else "a"
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], [added])]
    if activation == "Relu":
        nodes.append(helper.make_node("Relu", ["a"], ["y"]))
    elif activation == "tanh":
        nodes.append(helper.make_node("Gelu", ["a"], ["y"], approximate="tanh"))
    elif activation == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", ["a"], ["y"], alpha=0.1))
    elif activation == "HardSigmoid":
        nodes.append(helper.make_node("HardSigmoid", ["a"], ["y"], alpha=0.25, beta=0.4))
    m = _model(nodes, [("x", ["a", "b", k])], [("w", _rand(k, n, scale=k ** -0.5)), ("b", _rand(n))], opset=20)
    feeds = [{"x": _rand(a, b, k)} for a, b in ((1, 1), (2, 3), (1, 1), (1, 0))]
    sess = _check(m, feeds, ops={"FusedMatMul"}, threads=threads)
    packed = [st.prepacked for st in sess.program.steps if st.kernel.plugin == "onednn"]
    assert len(packed) == 1
    if not onednn_blocks_weights(k, n):   # (AVX2 only: column panels, one row runs the panel loop)
        assert packed[0].slabs is None and packed[0].panels is not None
        return
    slabs = packed[0].slabs
    if slabs is None:     # a layout other than 64-column blocks (a narrow weight): the primitive
        assert not calls
        return
    assert slabs.shape[1:] == (-(-k // 16) * 16, 64) and slabs.shape[0] == -(-n // 64)
    if packed[0].plain is not None and k * n < gemm.MIN_WORK:
        assert not calls      # a product too small for oneDNN runs numpy's matmul on the plain weight
    else:
        assert calls == ([(k,), (k,)] if native else [])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("k,n", [(1, 64), (5, 1), (16, 63), (33, 65), (768, 2304), (300, 64 * 7 + 9)])
def test_the_native_slab_loop_sums_each_column_as_one_chain(k, n, threads, monkeypatch):
    """``native.gemv.slab_gemv`` on slabs made by hand (zero-padded rows and columns), with a
    bias and without, a partial last slab, over 1 and 2 threads: small integers give the exact
    sums; random values give, bit for bit, each column's fused multiply-add chain over k in
    order, then the bias; K = 0 gives the bias alone."""
    from dynashape.ops_builtin.fast.native import gemv
    from dynashape import threads as dyn_threads
    if not gemv.supported():
        pytest.skip("the native one-row loop needs x86-64 Linux with AVX2 and FMA, and llvmlite")
    assert gemv.wait_until_ready(300), gemv._LOADING.failed
    monkeypatch.setattr(dyn_threads._run, "threads", threads, raising=False)
    rng = np.random.default_rng(k * n)
    w = rng.integers(-4, 5, (k, n)).astype(np.float32)
    x = rng.integers(-4, 5, k).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    kp, nb = -(-k // 16) * 16, -(-n // 64)
    slabs = np.zeros((nb, kp, 64), np.float32)
    padded = np.zeros((kp, nb * 64), np.float32)
    padded[:k, :n] = w
    slabs[...] = padded.reshape(kp, nb, 64).transpose(1, 0, 2)
    exact = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.float32)
    y = np.full(n, np.nan, np.float32)
    gemv.slab_gemv(x, slabs, y)
    np.testing.assert_array_equal(y, exact)
    gemv.slab_gemv(x, slabs, y, bias)
    np.testing.assert_array_equal(y, exact + bias)
    gemv.slab_gemv(x[:0], slabs, y, bias)
    np.testing.assert_array_equal(y, bias)
    w = RNG.standard_normal((k, n)).astype(np.float32)       # non-integer values: the order of the sums shows
    x = RNG.standard_normal(k).astype(np.float32)
    padded[:k, :n] = w
    slabs[...] = padded.reshape(kp, nb, 64).transpose(1, 0, 2)
    chain = np.zeros(n, np.float32)
    for xk, row in zip(x, w):   # fma(x[k], w[k], chain) in float32: the float64 product of two float32 is exact
        chain = (np.float64(xk) * row.astype(np.float64) + chain.astype(np.float64)).astype(np.float32)
    gemv.slab_gemv(x, slabs, y, bias)
    np.testing.assert_array_equal(y, chain + bias)


@THREADS
def test_nodes_of_equal_shapes_share_their_primitives_and_keep_their_own_values(threads, monkeypatch):
    """A transformer's blocks repeat their shapes: equal GEMMs, LayerNorms and attention cores
    share one primitive per shape in the process (api.shared), a second session's too, and each
    node still multiplies by its own weight, at every row count, in any order. (The GEMMs'
    primitives: an AVX2 CPU packs column panels for the native loop instead.)"""
    from dynashape.ops_builtin.fast.onednn import gemm
    monkeypatch.setattr(gemm, "panels_supported", lambda: False)
    k = n = 256    # 40 rows: enough work for oneDNN's primitive (gemm.MIN_WORK)
    nodes, weights, inits, x = [], [], [], "x"
    for i in range(3):
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"]),
                  helper.make_node("Add", [f"h{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("LayerNormalization", [f"a{i}", f"g{i}", f"s{i}"], [f"n{i}"], axis=-1)]
        weights.append((_rand(k, n, scale=0.1), _rand(n)))
        inits += [(f"w{i}", weights[-1][0]), (f"b{i}", weights[-1][1]), (f"g{i}", _rand(n)), (f"s{i}", _rand(n))]
        x = f"n{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    m = _model(nodes, [("x", ["a", "b", k])], inits)
    feeds = [{"x": _rand(a, b, k)} for a, b in ((2, 20), (1, 1), (3, 40), (2, 20))]
    sess = _check(m, feeds, ops={"FusedMatMul", "LayerNormalization"}, threads=threads)
    gemms = [st.prepacked for st in sess.program.steps if st.node.node.op_type == "FusedMatMul"]
    assert len(gemms) == 3 and len({id(g) for g in gemms}) == 3
    a = _rand(40, k)
    made = [g.primitive(40, a.strides, threads)[0] for g in gemms]
    assert made[0] is made[1] is made[2]
    again = _sessions(m, threads)[0]
    other = [st.prepacked for st in again.program.steps if st.node.node.op_type == "FusedMatMul"]
    assert other[0].primitive(40, a.strides, threads)[0] is made[0]
    y = np.empty((40, n), np.float32)
    for i in (2, 0, 1, 2):
        gemms[i].run(a, y)
        np.testing.assert_allclose(y, a @ weights[i][0] + weights[i][1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [3, 64])   # the kept plain copy (little work) and oneDNN's primitive
def test_matmul_rows_into_a_strided_output_go_through_a_contiguous_buffer(rows):
    from dynashape.ops_builtin.fast.onednn import gemm
    w, a = _rand(96, 80), _rand(2, rows, 96)
    out = np.full((2, rows, 160), np.nan, np.float32)
    gemm._run_rows(a, out[..., ::2], gemm.PackedGemm(w, None, ()))
    np.testing.assert_allclose(out[..., ::2], a @ w, rtol=1e-5, atol=1e-5)
    assert np.isnan(out[..., 1::2]).all()


def test_the_packed_weights_follow_each_other_in_the_sessions_weight_arena():
    """Each packed weight is carved from the prepared graph's weight arena, in the order the
    program runs the nodes (the stream a small-row run reads), and the results stay right."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"]), helper.make_node("Relu", ["h1"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["h2"]),
             helper.make_node("Gemm", ["h2", "w3", "b3"], ["y"], transB=1)]
    inits = [("w1", _rand(96, 128, scale=0.1)), ("w2", _rand(128, 80, scale=0.1)), ("w3", _rand(72, 80, scale=0.1)),
             ("b3", _rand(72))]
    m = _model(nodes, [("x", ["a", 96])], inits)
    sess = _check(m, [{"x": _rand(a, 96)} for a in (16, 1, 200)], ops={"MatMul", "Gemm"})
    packed = [_packed_memory(st.prepacked) for st in sess.program.steps if st.prepacked is not None]
    assert len(packed) == 3
    pointers = [pointer for pointer, _ in packed]
    sizes = [nbytes + (-nbytes) % 64 for _, nbytes in packed]
    assert [b - a for a, b in zip(pointers, pointers[1:])] == sizes[:-1]
    assert sess.graph.weight_arena.handed_out == sum(nbytes for _, nbytes in packed)


def _packed_memory(packed) -> tuple:
    """(address, bytes) of a PackedGemm's weight: its column panels or oneDNN's layout."""
    if packed.panels is not None:
        return packed.panels.ctypes.data, packed.panels.nbytes
    md, _, pointer = packed.weights.layouts[0]
    return pointer, md.nbytes


def test_a_weight_read_by_another_node_is_kept():
    w = _rand(64, 96)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Add", ["w", "x2"], ["s"])]
    m = _model(nodes, [("x", ["a", 64]), ("x2", [64, 96])], [("w", w)], outputs=("y", "s"))
    sess = _check(m, [{"x": _rand(a, 64), "x2": _rand(64, 96)} for a in (3, 1)], ops={"MatMul"})
    assert sess.graph.packed_away == set()


def test_a_weight_only_folded_nodes_read_is_released():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("ReduceSum", ["w"], ["s"], keepdims=0)]
    m = _model(nodes, [("x", ["a", 64])], [("w", _rand(64, 96))], outputs=("y", "s"))
    sess = _check(m, [{"x": _rand(a, 64)} for a in (3, 1)], ops={"MatMul"})
    assert sess.graph.packed_away or sess.graph.released


@THREADS
@pytest.mark.parametrize("trans_a,trans_b,alpha,beta,c", [
    (0, 0, 1.0, 1.0, "vector"), (0, 1, 0.5, 2.0, "row"), (1, 0, 1.0, 1.0, None), (1, 1, 2.0, 0.25, "scalar")])
def test_gemm_with_alpha_beta_and_c_folded_into_the_packed_weight(trans_a, trans_b, alpha, beta, c, threads):
    k, n = 72, 90
    w = _rand(n, k) if trans_b else _rand(k, n)
    inits = [("w", w)]
    inputs = ["x", "w"]
    if c is not None:
        inits.append(("c", {"vector": _rand(n), "row": _rand(1, n), "scalar": _rand(1)}[c]))
        inputs.append("c")
    node = helper.make_node("Gemm", inputs, ["y"], transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)
    x_dims = [k, "m"] if trans_a else ["m", k]
    m = _model([node], [("x", x_dims)], inits)
    feeds = [{"x": _rand(*((k, r) if trans_a else (r, k)))} for r in (5, 1, 0, 17)]
    _check(m, feeds, ops={"Gemm"}, threads=threads)


def test_gemm_with_a_full_c_matrix_takes_the_numpy_kernel():
    node = helper.make_node("Gemm", ["x", "w", "c"], ["y"])
    m = _model([node], [("x", [4, 80])], [("w", _rand(80, 64)), ("c", _rand(4, 64))])
    fast, _ = _sessions(m, 1)
    assert fast.program.steps[0].kernel.plugin != "onednn"
    _check(m, [{"x": _rand(4, 80)}], ops=set())


@pytest.mark.parametrize("activation", ["Relu", "Sigmoid", "Tanh", "Gelu", "GeluTanh", "LeakyRelu", "HardSigmoid",
                                        "HardSwish", "Clip"])
def test_fused_matmul_runs_bias_and_activation_as_post_ops(activation):
    k, n = 64, 100
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"])]
    opset = 20
    if activation == "GeluTanh":
        nodes.append(helper.make_node("Gelu", ["a"], ["y"], approximate="tanh"))
    elif activation == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", ["a"], ["y"], alpha=0.1))
    elif activation == "HardSigmoid":
        nodes.append(helper.make_node("HardSigmoid", ["a"], ["y"], alpha=0.3, beta=0.4))
    elif activation == "Clip":
        nodes.append(helper.make_node("Clip", ["a", "lo", "hi"], ["y"]))
    else:
        nodes.append(helper.make_node(activation, ["a"], ["y"]))
    inits = [("w", _rand(k, n, scale=0.3)), ("b", _rand(n)), ("lo", np.array(-0.5)), ("hi", np.array(1.5))]
    m = _model(nodes, [("x", ["s", k])], inits, opset=opset)
    sess = _check(m, [{"x": _rand(s, k)} for s in (3, 1, 9)], ops={"FusedMatMul"}, rtol=1e-4, atol=1e-5)
    (step,) = sess.program.steps
    want = "Gelu" if activation == "GeluTanh" else activation
    assert step.node.node.attrs.get("activation", "").startswith(want)


def test_matmul_beside_a_dequantize_linear_keeps_the_numpy_kernel():
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("MatMul", ["d", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["a", 64])],
                              [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(_rand(64, 80), "w"),
                               numpy_helper.from_array(np.array(0.05, np.float32), "s"),
                               numpy_helper.from_array(np.array(0, np.uint8), "z")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    fast, _ = _sessions(m, 1)
    assert all(st.kernel.plugin != "onednn" for st in fast.program.steps)


def test_matmul_of_two_activations_and_float64_take_other_kernels():
    nodes = [helper.make_node("MatMul", ["x", "x2"], ["y"])]
    m = _model(nodes, [("x", ["a", 64]), ("x2", [64, 70])])
    fast, _ = _sessions(m, 1)
    assert fast.program.steps[0].kernel.plugin != "onednn"
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["a", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
                          [numpy_helper.from_array(RNG.standard_normal((64, 70)), "w")])
    m64 = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m64.ir_version = 8
    s64 = dynashape.InferenceSession(m64.SerializeToString())
    assert s64.program.steps[0].kernel.plugin != "onednn"
    x = RNG.standard_normal((3, 64))
    np.testing.assert_allclose(s64.run(None, {"x": x})[0], x @ numpy_helper.to_array(g.initializer[0]), rtol=1e-12)


# channels-last convolutions -----------------------------------------------------------

def _conv_model(c, m_, k, *, group=1, bias=True, extra=(), opset=17, **attrs):
    inits = [("w", _rand(m_, c // group, k, k, scale=0.3))] + ([("b", _rand(m_))] if bias else [])
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["c"], group=group, **attrs)
    nodes = [node] + list(extra)
    out = nodes[-1].output[0]
    return _model(nodes, [("x", ["n", c, "h", "w_"])], inits + [(n, a) for n, a in getattr(extra, "inits", [])],
                  opset=opset, outputs=(out,))


CONVS = {
    "3x3": dict(c=3, m_=8, k=3, pads=[1, 1, 1, 1]),
    "strided_asymmetric": dict(c=8, m_=16, k=3, strides=[2, 2], pads=[0, 1, 1, 2]),
    "depthwise_dilated": dict(c=8, m_=8, k=3, group=8, dilations=[2, 2], pads=[2, 2, 2, 2]),
    "depthwise_5x5_stride2": dict(c=12, m_=12, k=5, group=12, strides=[2, 2], pads=[2, 2, 2, 2]),
    "grouped_1x1": dict(c=12, m_=6, k=1, group=3),
    "pointwise_strided": dict(c=16, m_=24, k=1, strides=[2, 2], bias=False),
    "same_upper": dict(c=4, m_=4, k=4, strides=[2, 2], auto_pad="SAME_UPPER"),
    "same_lower": dict(c=4, m_=6, k=3, strides=[2, 1], auto_pad="SAME_LOWER"),
    "valid": dict(c=5, m_=7, k=3, auto_pad="VALID"),
    "channel_multiplier": dict(c=4, m_=8, k=3, group=4, pads=[1, 1, 1, 1]),
}


@THREADS
@pytest.mark.parametrize("case", sorted(CONVS))
def test_conv_runs_channels_last_through_changing_shapes(case, threads):
    m = _conv_model(**CONVS[case])
    c = CONVS[case]["c"]
    feeds = [{"x": _rand(n, c, h, w)} for n, h, w in ((1, 13, 17), (3, 8, 8), (0, 9, 9), (2, 21, 6), (1, 13, 17))]
    sess = _check(m, feeds, ops={"NhwcConv"}, threads=threads, rtol=1e-4, atol=1e-5)
    assert sess.rewrites.counts().get("channels_last") == 1
    assert sess.graph.packed_away, "the reordered weight replaces the initializer"


class _Extra(list):
    inits: list = []


def _epilogue(kind: str) -> _Extra:
    extra = _Extra()
    if kind == "relu":
        extra.append(helper.make_node("Relu", ["c"], ["y"]))
    elif kind == "silu":
        extra += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    elif kind == "hardswish":
        extra.append(helper.make_node("HardSwish", ["c"], ["y"]))
    elif kind == "clip":
        extra.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
        extra.inits = [("lo", np.array(0.0)), ("hi", np.array(6.0))]
    elif kind == "residual_relu":
        extra += [helper.make_node("Add", ["c", "x"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    elif kind == "residual_of_a_later_conv":
        extra += [helper.make_node("Conv", ["x", "w2"], ["c2"], pads=[1, 1, 1, 1]),
                  helper.make_node("Add", ["c2", "c"], ["y"])]
        extra.inits = [("w2", _rand(8, 8, 3, 3, scale=0.3))]
    return extra


@pytest.mark.parametrize("kind", ["relu", "silu", "hardswish", "clip", "residual_relu", "residual_of_a_later_conv"])
def test_epilogues_are_absorbed_into_the_channels_last_conv(kind):
    m = _conv_model(8, 8, 3, pads=[1, 1, 1, 1], extra=_epilogue(kind), opset=17)
    feeds = [{"x": _rand(n, 8, h, w)} for n, h, w in ((1, 10, 12), (2, 5, 5), (1, 10, 12))]
    sess = _check(m, feeds, ops={"NhwcConv"}, rtol=1e-4, atol=1e-5)
    op_types = [st.node.node.op_type for st in sess.program.steps]
    assert op_types.count("Transpose") == 2 and all(t in ("NhwcConv", "Transpose") for t in op_types), op_types


def test_a_region_reads_and_returns_nchw_tensors_at_its_borders():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Mul", ["r", "scale"], ["s"]),                 # a (C, 1, 1) constant, permuted
             helper.make_node("Add", ["s", "other"], ["a"]),                 # an outside 4-D operand enters
             helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                              ceil_mode=1),
             helper.make_node("Conv", ["p", "w2"], ["c2"]),
             helper.make_node("Concat", ["c2", "c2"], ["cat"], axis=1),
             helper.make_node("GlobalAveragePool", ["cat"], ["g"]),
             helper.make_node("Flatten", ["g"], ["y"]),
             helper.make_node("Reshape", ["r", "shape"], ["flat"])]          # a region tensor read outside
    inits = [("w", _rand(6, 3, 3, 3)), ("w2", _rand(4, 6, 1, 1)), ("scale", _rand(6, 1, 1)),
             ("shape", np.array([0, -1], np.int64))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 3, "h", "w"]),
                                           helper.make_tensor_value_info("other", F, ["n", 6, "h", "w"])],
                              [helper.make_tensor_value_info(o, F, None) for o in ("y", "flat", "c")],
                              [numpy_helper.from_array(np.asarray(a), n) if n == "shape"
                               else numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    feeds = [{"x": _rand(n, 3, h, w), "other": _rand(n, 6, h, w)} for n, h, w in ((1, 9, 11), (2, 4, 4), (1, 9, 11))]
    sess = _check(m, feeds, ops={"NhwcConv", "NhwcMaxPool"}, rtol=1e-4, atol=1e-5)
    op_types = [st.node.node.op_type for st in sess.program.steps]
    assert "ReduceMean" in op_types and op_types.count("NhwcConv") == 2


@THREADS
@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[2, 3], strides=[2, 1], ceil_mode=1, dilations=[1, 2])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 0])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, count_include_pad=1, pads=[1, 1, 1, 1])),
])
def test_pools_inside_a_region_run_channels_last(op, attrs, threads):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c"], ["y"], **attrs)]
    m = _model(nodes, [("x", ["n", 4, "h", "w"])], [("w", _rand(8, 4, 3, 3))], opset=19)
    feeds = [{"x": _rand(n, 4, h, w)} for n, h, w in ((1, 11, 9), (2, 6, 7), (1, 11, 9))]
    nhwc_op = "Nhwc" + op
    sess = _check(m, feeds, ops={"NhwcConv", nhwc_op}, threads=threads, rtol=1e-4, atol=1e-5)
    assert nhwc_op in [st.node.node.op_type for st in sess.program.steps]


def test_qdq_convs_keep_nchw_and_the_mlas_order_kernel():
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("Conv", ["d", "w"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 4, 8, 8])],
                              [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(_rand(4, 4, 3, 3), "w"),
                               numpy_helper.from_array(np.array(0.05, np.float32), "s"),
                               numpy_helper.from_array(np.array(128, np.uint8), "z")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    sess = dynashape.InferenceSession(m.SerializeToString())
    assert "channels_last" not in sess.rewrites.counts()


def test_a_1d_conv_and_a_non_constant_weight_stay_nchw():
    c1 = _model([helper.make_node("Conv", ["x", "w"], ["y"])], [("x", ["n", 4, 10])], [("w", _rand(5, 4, 3))])
    assert "channels_last" not in dynashape.InferenceSession(c1.SerializeToString()).rewrites.counts()
    c2 = _model([helper.make_node("Conv", ["x", "w"], ["y"])], [("x", ["n", 4, 6, 6]), ("w", [5, 4, 3, 3])])
    assert "channels_last" not in dynashape.InferenceSession(c2.SerializeToString()).rewrites.counts()


# the NHWC ops' numpy reference kernels -------------------------------------------------

def _nhwc_model(op, attrs, w=None, b=None, z=False):
    inputs = [("x", ["n", "h", "w", 6])] + ([("z", None)] if z else [])
    ins = ["x"] + (["w"] if w is not None else []) + (["b"] if b is not None else [""] if z else []) + \
        (["z"] if z else [])
    inits = ([("w", w)] if w is not None else []) + ([("b", b)] if b is not None else [])
    node = helper.make_node(op, ins, ["y"], domain="dynashape", **attrs)
    return _model([node], inputs, inits, domains=("dynashape",))


@pytest.mark.parametrize("op,attrs,weights", [
    ("NhwcConv", dict(pads=[1, 1, 1, 1], activation="Relu"), True),
    ("NhwcConv", dict(group=3, strides=[2, 2], auto_pad="SAME_UPPER"), True),
    ("NhwcMaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), False),
    ("NhwcAveragePool", dict(kernel_shape=[2, 2], pads=[1, 1, 0, 0], count_include_pad=1), False),
])
def test_the_numpy_reference_of_each_nhwc_op_equals_the_onednn_kernel(op, attrs, weights, monkeypatch):
    group = attrs.get("group", 1)
    w = _rand(9, 6 // group, 3, 3) if weights else None
    b = _rand(9) if weights else None
    m = _nhwc_model(op, attrs, w, b).SerializeToString()
    feeds = [{"x": _rand(n, h, wd, 6)} for n, h, wd in ((1, 7, 8), (2, 5, 5))]
    fast = dynashape.InferenceSession(m)
    assert fast.program.steps[0].kernel.plugin == "onednn"
    got = [fast.run(None, f)[0] for f in feeds]
    monkeypatch.setattr(api, "library", lambda: None)   # every oneDNN kernel declines: the reference runs
    compiled.clear()                                     # (compiled anew: not the first session's)
    reference = dynashape.InferenceSession(m)
    assert reference.program.steps[0].kernel.priority == 0
    for f, g in zip(feeds, got):
        np.testing.assert_allclose(g, reference.run(None, f)[0], rtol=1e-4, atol=1e-5)


def test_nhwc_conv_reports_a_residual_of_another_shape():
    m = _nhwc_model("NhwcConv", dict(pads=[1, 1, 1, 1]), _rand(6, 6, 3, 3), None, z=True)
    sess = dynashape.InferenceSession(m.SerializeToString())
    with pytest.raises(dynashape.ShapeInferenceError, match="Z must have the output's shape"):
        sess.run(None, {"x": _rand(1, 4, 4, 6), "z": _rand(1, 4, 5, 6)})
    out = sess.run(None, {"x": _rand(1, 4, 4, 6), "z": np.ones((1, 4, 4, 6), np.float32)})[0]
    assert out.shape == (1, 4, 4, 6)


# Transpose ----------------------------------------------------------------------------

@pytest.mark.parametrize("shape,perm", [((1, 64, 30, 31), (0, 2, 3, 1)), ((2, 30, 31, 64), (0, 3, 1, 2)),
                                        ((4, 40, 6, 32), (0, 2, 1, 3)), ((300, 70), (1, 0)),
                                        ((2, 3, 4, 5, 6, 40), (5, 3, 1, 0, 2, 4))])
def test_transpose_is_a_reorder_bit_equal_to_numpy(shape, perm):
    m = _model([helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))], [("x", list(shape))])
    sess = dynashape.InferenceSession(m.SerializeToString())
    assert sess.program.steps[0].kernel.plugin == "onednn"
    x = _rand(*shape)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.transpose(x, perm))


def test_a_models_own_permutes_cancel_against_the_region():
    """ConvNeXt's block: depthwise Conv, its own permute to NHWC, LayerNorm and a MatMul
    channels-last, the permute back, a layer scale and the residual Add: only the graph
    input's entry and the output's exit Transpose remain."""
    c = 8
    nodes = [helper.make_node("Conv", ["x", "dw"], ["d"], group=c, pads=[3, 3, 3, 3]),
             helper.make_node("Transpose", ["d"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g"], ["ln"], axis=-1),
             helper.make_node("MatMul", ["ln", "w"], ["mm"]),
             helper.make_node("Transpose", ["mm"], ["back"], perm=[0, 3, 1, 2]),
             helper.make_node("Mul", ["gamma", "back"], ["scaled"]),
             helper.make_node("Add", ["scaled", "x"], ["res"]),
             helper.make_node("Conv", ["res", "pw"], ["y"])]
    inits = [("dw", _rand(c, 1, 7, 7, scale=0.2)), ("g", RNG.uniform(0.5, 1.5, c)), ("w", _rand(c, c)),
             ("gamma", _rand(c, 1, 1)), ("pw", _rand(4, c, 1, 1))]
    m = _model(nodes, [("x", ["n", c, "h", "w"])], inits)
    feeds = [{"x": _rand(n, c, h, w)} for n, h, w in ((1, 9, 10), (2, 7, 7), (1, 9, 10))]
    sess = _check(m, feeds, ops={"NhwcConv"}, rtol=1e-4, atol=1e-5)
    op_types = [st.node.node.op_type for st in sess.program.steps]
    assert op_types.count("Transpose") == 2, op_types


# LayerNormalization, Softmax, attention, Gelu -------------------------------------------

@THREADS
@pytest.mark.parametrize("axis,shape,bias", [(-1, ["a", "b", 96], True), (-1, ["a", 768], False),
                                             (1, ["a", 8, 12], True)])
def test_layer_normalization(axis, shape, bias, threads):
    inner = (96,) if shape[-1] == 96 else (768,) if shape[-1] == 768 else (8, 12)
    inits = [("g", RNG.uniform(0.5, 1.5, inner).astype(np.float32))] + ([("b", _rand(*inner))] if bias else [])
    node = helper.make_node("LayerNormalization", ["x", "g"] + (["b"] if bias else []), ["y"], axis=axis)
    m = _model([node], [("x", shape)], inits)
    dims = {"a": (1, 3, 0, 2), "b": (1, 7, 5, 4)}
    feeds = [{"x": _rand(*[dims[d][k] if isinstance(d, str) else d for d in shape], scale=3.0) + 1}
             for k in range(4)]
    _check(m, feeds, ops={"LayerNormalization"}, threads=threads, rtol=1e-4, atol=1e-5)


@THREADS
@pytest.mark.parametrize("min_elements", [0, None], ids=["primitive", "small-to-numpy"])
@pytest.mark.parametrize("axis,scale_shape", [(-1, (96,)), (1, (4, 96)), (-1, (1, 96))])
def test_rms_normalization_is_layer_normalization_with_global_statistics(axis, scale_shape, threads, min_elements,
                                                                          monkeypatch):
    """oneDNN's layer normalization with a mean of 0 and a variance of mean(x^2) per row,
    scale only, against the numpy kernel and onnxruntime through changing shapes (one row, no
    rows); a scale with more dims than the normalized axes goes to the numpy kernel, and so
    does an input of fewer than RMS_MIN_ELEMENTS (all of these, at its default)."""
    from dynashape.ops_builtin.fast.onednn import rowwise
    if min_elements is not None:
        monkeypatch.setattr(rowwise, "RMS_MIN_ELEMENTS", min_elements)
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=axis, epsilon=1e-4)
    m = _model([node], [("x", ["n", 4, 96])], [("scale", RNG.uniform(0.5, 1.5, scale_shape).astype(np.float32))],
               opset=23)
    feeds = [{"x": _rand(n, 4, 96, scale=5.0) + 3} for n in (1, 3, 0, 2)]
    _check(m, feeds, ops={"RMSNormalization"}, threads=threads, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("min_elements", [0, None], ids=["primitive", "small-to-numpy"])
def test_rms_normalization_by_hand(min_elements, monkeypatch):
    """A row worked by hand: the mean of the squares of 3 and 4 is 12.5."""
    from dynashape.ops_builtin.fast.onednn import rowwise
    if min_elements is not None:
        monkeypatch.setattr(rowwise, "RMS_MIN_ELEMENTS", min_elements)
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], epsilon=0.0)
    m = _model([node], [("x", ["n", 2])], [("scale", np.array([1.0, 2.0], np.float32))], opset=23)
    fast, _ = _sessions(m, 1)
    assert {st.kernel.plugin for st in fast.program.steps} == {"onednn"}
    (y,) = fast.run(None, {"x": np.array([[3.0, 4.0]], np.float32)})
    np.testing.assert_allclose(y, [[3 / 12.5 ** 0.5, 8 / 12.5 ** 0.5]], rtol=1e-6)


@pytest.mark.parametrize("opset,axis", [(13, -1), (11, 1), (13, 1)])
def test_softmax(opset, axis):
    m = _model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], [("x", ["a", 64, "b"])], opset=opset)
    feeds = [{"x": _rand(a, 64, b, scale=4.0)} for a, b in ((2, 100), (1, 1), (3, 70))]
    _check(m, feeds, ops={"Softmax"}, rtol=1e-5, atol=1e-6)   # another axis: the numpy body inside


def test_a_softmax_row_with_a_nan_or_inf_is_nan_as_in_onnxruntime(monkeypatch):
    """oneDNN's primitive gives [0, nan, 0] for a row holding a NaN or +inf; the kernel makes
    the whole row NaN (onnxruntime, the spec's formula); a row of -inf is NaN in all three."""
    from dynashape.ops_builtin.fast.onednn import rowwise
    spread = []
    fix = rowwise._spread_nan_rows
    monkeypatch.setattr(rowwise, "_spread_nan_rows", lambda rows: (spread.append(rows.shape), fix(rows))[1])
    m = _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", ["a", 64])])
    x = _rand(40, 64)
    x[5, :] = -np.inf
    x[6, 2] = np.inf
    x[7, 1] = np.nan
    fast = _check(m, [{"x": x}], ops={"Softmax"}, rtol=1e-6, atol=1e-7)
    assert spread == [(40, 64)]                        # the primitive ran
    (y,) = fast.run(None, {"x": x})
    assert np.isnan(y[5:8]).all() and not np.isnan(y[8:]).any() and not np.isnan(y[:5]).any()


@pytest.mark.parametrize("numba_up", [True, False])
def test_a_small_softmax_takes_numbas_loops_only_where_numba_is_up(numba_up, monkeypatch):
    """Below MIN_ELEMENTS, or rows shorter than SOFTMAX_MIN_ROW (8), no primitive: numba's loop
    (one call for rows this short) where numba is already up in the process (it is not started
    for them), else the numpy body; both equal onnxruntime."""
    from dynashape.ops_builtin.fast import softmax as fast_softmax
    from dynashape.ops_builtin.fast.onednn import rowwise
    pytest.importorskip("numba")
    rows = []
    loop = fast_softmax.loops.softmax_short_rows
    monkeypatch.setattr(fast_softmax.loops, "softmax_short_rows",
                        lambda x, y: (rows.append(x.shape[0]), loop(x, y))[1])
    monkeypatch.setattr(rowwise.NUMBA, "is_ready", numba_up and rowwise.NUMBA.wait())
    m = _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", ["a", 3])])
    feeds = [{"x": _rand(a, 3, scale=4.0)} for a in (1, 5, 0, 900)]      # (900 x 3: rows too short)
    _check(m, feeds, ops={"Softmax"}, rtol=1e-6, atol=1e-7)
    assert rows == ([1, 5, 900] if numba_up else [])


@THREADS
@pytest.mark.parametrize("mask,divide", [(None, 0), ("full", 1), ("broadcast", 0)])
def test_the_attention_core_runs_matmul_softmax_matmul(mask, divide, threads):
    """MatMul(Softmax(MatMul(Q, KT) / scale + mask), V) fused (the builtin rewrite) and run as
    two matmuls with the scale and mask as post-ops and a softmax between them."""
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div" if divide else "Mul", ["s", "scale"], ["ss"])]
    last = "ss"
    inputs = [("q", ["b", 4, "t", 32]), ("kt", ["b", 4, 32, "t"]), ("v", ["b", 4, "t", 32])]
    if mask:
        nodes.append(helper.make_node("Add", ["ss", "mask"], ["sm"]))
        last = "sm"
        inputs.append(("mask", ["b", 4, "t", "t"] if mask == "full" else ["b", 1, 1, "t"]))
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    m = _model(nodes, inputs, [("scale", np.array(8.0 if divide else 0.125))])
    feeds = []
    for b, t in ((2, 40), (1, 65), (3, 33)):
        f = {"q": _rand(b, 4, t, 32), "kt": _rand(b, 4, 32, t), "v": _rand(b, 4, t, 32)}
        if mask:
            shape = (b, 4, t, t) if mask == "full" else (b, 1, 1, t)
            f["mask"] = np.where(RNG.random(shape) < 0.2, -1e4, 0.0).astype(np.float32)
        feeds.append(f)
    _check(m, feeds, ops={"FusedAttention"}, threads=threads, rtol=1e-4, atol=1e-5)


def test_a_single_query_attention_over_a_cache_runs_numpy_and_makes_no_primitive(monkeypatch):
    """A decode step (one query row, a new past length every step) keeps the numpy kernel:
    as fast there, and no three primitives per past length; a query of several rows and a
    single query over many keys still run oneDNN."""
    from dynashape.ops_builtin.fast.onednn import rowwise
    made = []

    def asked(q_shape, *args):   # records what oneDNN was asked for; its refusal sends the node to numpy
        made.append(q_shape)
        raise api.OneDNNError("dnnl_matmul_primitive_desc_create", api.UNIMPLEMENTED)
    monkeypatch.setattr(rowwise, "_AttentionPrims", asked)
    monkeypatch.setattr(api, "SHARED", api.PrimitiveCache(api.SHARED_CAPACITY))   # (none from earlier tests)
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    m = _model(nodes, [("q", ["b", 4, "s", 32]), ("kt", ["b", 4, 32, "t"]), ("v", ["b", 4, "t", 32])],
               [("scale", np.array(0.125))])
    feeds = [{"q": _rand(b, 4, s, 32), "kt": _rand(b, 4, 32, t), "v": _rand(b, 4, t, 32)}
             for b, s, t in ((1, 1, 9), (1, 1, 10), (2, 1, 11), (1, 1, 1))]
    _check(m, feeds, ops={"FusedAttention"}, rtol=1e-4, atol=1e-5)
    assert made == []
    # past the threshold (4 heads x 4100 keys) and with several query rows: oneDNN is asked
    _check(m, [{"q": _rand(1, 4, 1, 32), "kt": _rand(1, 4, 32, 4100), "v": _rand(1, 4, 4100, 32)},
               {"q": _rand(1, 4, 3, 32), "kt": _rand(1, 4, 32, 9), "v": _rand(1, 4, 9, 32)}],
           ops={"FusedAttention"}, rtol=1e-4, atol=1e-5)
    assert made == [(1, 4, 1, 32), (1, 4, 3, 32)]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    m = _model([helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)], [("x", ["a", 100])], opset=20)
    _check(m, [{"x": _rand(a, 100, scale=3.0)} for a in (50, 1, 70)], ops=set(), rtol=1e-5, atol=1e-6)


def test_layer_normalization_before_a_dynamic_quantize_keeps_its_kernel():
    nodes = [helper.make_node("LayerNormalization", ["x", "g"], ["n"], axis=-1),
             helper.make_node("DynamicQuantizeLinear", ["n"], ["q", "s", "z"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["a", 64])],
                          [helper.make_tensor_value_info("q", TensorProto.UINT8, None)],
                          [numpy_helper.from_array(np.ones(64, np.float32), "g")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    sess = dynashape.InferenceSession(m.SerializeToString())
    assert all(st.kernel.plugin != "onednn" for st in sess.program.steps)


_TRANSFORMER_WITHOUT_NUMBA = """
import json, sys
import numpy as np
import dynashape
sess = dynashape.InferenceSession(open(sys.argv[1], "rb").read())
sess.run(None, {"x": np.ones((2, 16, 64), np.float32)})
print(json.dumps({"numba": "numba" in sys.modules, "llvmlite": "llvmlite" in sys.modules,
                  "fast": sorted({st.node.node.op_type for st in sess.program.steps if st.kernel.plugin == "fast"})}))
"""


def test_a_transformer_block_runs_without_loading_numba(tmp_path):
    """The GEMMs, LayerNormalization and the attention core take oneDNN kernels: numba (and
    llvmlite's ~100 MB) is never loaded: where oneDNN packs the weights into blocks (AVX-512),
    and on an AVX2-only CPU too, whose GEMMs run the native column-panel loop (machine code
    mapped without LLVM: ops_builtin/fast/native)."""
    import json
    import subprocess
    import sys
    h = 64
    nodes = [helper.make_node("LayerNormalization", ["x", "g"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "wq"], ["q0"]), helper.make_node("MatMul", ["n", "wk"], ["k0"]),
             helper.make_node("MatMul", ["n", "wv"], ["v"]),
             helper.make_node("Transpose", ["k0"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q0", "kt"], ["s"]), helper.make_node("Mul", ["s", "c"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["a"]),
             helper.make_node("MatMul", ["a", "wo"], ["o"]), helper.make_node("Add", ["o", "x"], ["y"])]
    inits = [("g", np.ones(h)), ("c", np.array(0.125))] + [(f"w{k}", _rand(h, h)) for k in "qkvo"]
    path = tmp_path / "block.onnx"
    path.write_bytes(_model(nodes, [("x", ["b", "s", h])], inits).SerializeToString())
    out = subprocess.run([sys.executable, "-c", _TRANSFORMER_WITHOUT_NUMBA, str(path)], capture_output=True,
                         text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"numba": False, "llvmlite": False, "fast": []}


def test_a_batch_norm_after_an_activation_runs_channels_last():
    """Conv -> Relu -> BatchNormalization (not foldable into the conv) -> MaxPool: the
    normalization is a Mul and an Add by channel constants inside the region, no border."""
    c = 6
    nodes = [helper.make_node("Conv", ["x", "w"], ["cv"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["cv"], ["r"]),
             helper.make_node("BatchNormalization", ["r", "s", "b", "m", "v"], ["bn"], epsilon=1e-3),
             helper.make_node("MaxPool", ["bn"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    inits = [("w", _rand(c, 3, 3, 3)), ("s", RNG.uniform(0.5, 2, c)), ("b", _rand(c)), ("m", _rand(c)),
             ("v", RNG.uniform(0.5, 2, c))]
    m = _model(nodes, [("x", ["n", 3, "h", "w"])], inits)
    sess = _check(m, [{"x": _rand(n, 3, h, w)} for n, h, w in ((2, 8, 10), (1, 5, 5))], ops={"NhwcConv"},
                  rtol=1e-4, atol=1e-5)
    assert [st.node.node.op_type for st in sess.program.steps].count("Transpose") == 2


def test_the_primitive_cache_makes_each_key_once_and_drops_the_oldest():
    """Every oneDNN kernel keeps its primitives in an api.PrimitiveCache: a key is made once
    (by make(*args), even with eight threads asking at once), and at capacity the oldest key
    goes first."""
    import threading
    import time
    made = []

    def make(key, tag):
        time.sleep(0.01)          # a primitive takes a while to make: the threads overlap
        made.append(key)
        return (key, tag)

    cache = api.PrimitiveCache(2)
    got = []
    threads = [threading.Thread(target=lambda: got.append(cache.get("a", make, "a", 1))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert made == ["a"] and got == [("a", 1)] * 8
    assert cache.get("b", make, "b", 2) == ("b", 2) and cache.get("a", make, "a", 9) == ("a", 1)
    assert cache.get("c", make, "c", 3) == ("c", 3)          # full: "a", the oldest, is dropped
    assert cache.get("a", make, "a", 4) == ("a", 4) and made == ["a", "b", "c", "a"]
    assert cache.get("c", make, "c", 5) == ("c", 3)          # "b" went to make room for "a"; "c" stayed


def test_a_primitive_is_made_when_it_first_executes_and_a_probe_never(monkeypatch):
    """The kernel of a primitive (oneDNN's JIT code) is made at its first execute: the probe
    a packed weight's layout is chosen with (a conv over a guessed 16 x 16 image when H and W
    are symbolic, a 64-row GEMM) is never made. A session of a Conv, and one of a MatMul,
    each make one kernel, the reorder that packs the weight; the first run one, for its
    shapes; a second run of the same shapes none. Results as onnxruntime's."""
    made = []
    new = api._new

    def counting(name, *args):
        if name == "dnnl_primitive_create":
            made.append(name)
        return new(name, *args)
    monkeypatch.setattr(api, "SHARED", api.PrimitiveCache(api.SHARED_CAPACITY))   # (none from earlier tests)
    monkeypatch.setattr(api, "_new", counting)
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = 1
    conv = _conv_model(4, 8, 3, pads=[1, 1, 1, 1])
    gemm = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", ["a", 128])], [("w", _rand(128, 64))])
    # an AVX2-only CPU keeps the MatMul weight row-major in column panels: no reorder, no primitive
    gemm_primitives = 1 if onednn_blocks_weights(128, 64) else 0
    for model, op, x, primitives in ((conv, "NhwcConv", _rand(1, 4, 9, 7), 1),
                                     (gemm, "MatMul", _rand(40, 128), gemm_primitives)):
        made.clear()
        sess = dynashape.InferenceSession(model.SerializeToString(), so, optimize=True)   # (NhwcConv is a rewrite)
        assert op in {st.kernel.op_type for st in sess.program.steps if st.kernel.plugin == "onednn"}
        assert len(made) == primitives, made        # the weight's reorder
        (y,) = sess.run(None, {"x": x})
        assert len(made) == 2 * primitives
        (again,) = sess.run(None, {"x": x})
        assert len(made) == 2 * primitives
        (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x})
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(again, y)
    probe = api.make_eltwise(16, "relu")
    assert not probe.made and probe.impl          # a descriptor: its implementation is known
    data = np.array([-1.0, 2.0] * 8, np.float32)
    probe.execute((data, data))
    assert probe.made and data.tolist() == [0.0, 2.0] * 8


def test_weights_of_one_shape_share_the_probe_that_chooses_their_layout(monkeypatch):
    """Two MatMul weights of one shape (a transformer's layers) are packed after one probe
    (a primitive descriptor search, ~0.3 ms each): one descriptor made at session creation for
    both, and each weight in the layout it chose; values as onnxruntime's."""
    made = []
    new = api._new

    def counting(name, *args):
        made.append(name)
        return new(name, *args)
    monkeypatch.setattr(api, "SHARED", api.PrimitiveCache(api.SHARED_CAPACITY))
    monkeypatch.setattr(api, "_new", counting)
    w1, w2 = _rand(128, 96), _rand(128, 96)
    m = _model([helper.make_node("MatMul", ["x", "w1"], ["y1"]), helper.make_node("MatMul", ["x", "w2"], ["y2"])],
               [("x", ["a", 128])], [("w1", w1), ("w2", w2)], outputs=("y1", "y2"))
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = 1
    sess = dynashape.InferenceSession(m.SerializeToString(), so)
    packed = [st.prepacked for st in sess.program.steps if st.prepacked is not None]
    assert len(packed) == 2
    assert made.count("dnnl_matmul_primitive_desc_create") == 1
    x = _rand(40, 128)
    got = sess.run(None, {"x": x})
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
