"""Shared fixtures: paths to ../shared (skipped cleanly when absent) and an ORT runner."""
from __future__ import annotations

import functools
import os
import platform
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DYNASHAPE_SHARED", REPO.parent / "shared"))

# the compiled kernels' tests assert which path ran: every run waits for numba (the swap from
# the numpy path while numba starts is tested on its own, tests/plugins/test_fast_tiering.py)
os.environ.setdefault("DYNASHAPE_COMPILED_WAIT", "1")

# the tests' per-user cache (dynashape.usercache) is their own: fakes and schemas of a test
# never reach the user's, and every run starts from an empty one
if "DYNASHAPE_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile
    os.environ["DYNASHAPE_CACHE_DIR"] = _cache = tempfile.mkdtemp(prefix="dynashape-test-cache-")
    atexit.register(shutil.rmtree, _cache, True)


def _ort_version() -> tuple[int, ...] | None:
    try:
        return Version(metadata.version("onnxruntime")).release[:2]
    except metadata.PackageNotFoundError:
        return None


#: (major, minor) of the installed onnxruntime, None without it
ORT_VERSION = _ort_version()


def ort_predates(fixed_in: tuple[int, int]) -> bool:
    """Whether the installed onnxruntime is older than ``fixed_in``, the first release
    without an ORT bug that a test case hits."""
    return ORT_VERSION is not None and ORT_VERSION < fixed_in


def _blas_sums_like_mlas() -> bool:
    """Whether numpy's BLAS sums each float32 matmul reduction of up to 128 terms in one
    fused multiply-add chain, as onnxruntime's MLAS does on x86 (OpenBLAS's SkylakeX kernels
    do; its Haswell/Zen kernels interleave several chains, e.g. under OPENBLAS_CORETYPE).
    Only then can dynashape's Conv be bit-identical with onnxruntime's."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 128)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    chain = np.zeros((16, 64), np.float32)
    for k in range(128):   # fma(a, b, acc) in float32: the float64 product of two float32 is exact
        chain = (a[:, k:k + 1].astype(np.float64) * b[k].astype(np.float64) + chain).astype(np.float32)
    return bool(np.array_equal(a @ b, chain))


#: numpy's BLAS sums as MLAS does (see _blas_sums_like_mlas)
BLAS_SUMS_LIKE_MLAS = _blas_sums_like_mlas()


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test when it is not there."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} is not available")
    return p


def load_shared_module(name: str, *parts: str):
    """Import a helper script of ../shared (check_cases.py, make_inputs.py) by path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, shared_path(*parts))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_node_model(op: str, inputs, attrs: dict, opset: int, n_outputs: int = 1, out_dtype=None, dims=None,
                   node_name: str = ""):
    """(model, feeds) for one ``op`` node; ``None`` inputs become absent optional inputs.

    ``dims`` (one entry per input) declares the inputs' dims instead of the feeds' shapes,
    e.g. ``[["P", "L"], ["Q", "M"]]`` for symbolic inputs; an entry None keeps the shape.
    """
    from onnx import helper

    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outs = [f"out{i}" for i in range(n_outputs)]
    feeds = {n: x for n, x in zip(names, inputs) if n}
    declared = {n: x.shape if dims is None or dims[i] is None else dims[i]
                for i, (n, x) in enumerate(zip(names, inputs)) if n}
    odt = helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype or inputs[0].dtype))
    graph = helper.make_graph(
        [helper.make_node(op, names, outs, name=node_name, **attrs)], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), declared[n])
         for n, x in feeds.items()],
        [helper.make_tensor_value_info(o, odt, None) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), feeds


def assert_runs_match_ort(model, feeds_list, allocator: str = "pool", ort_fixed_in=None, spec=None, rtol=1e-5,
                          atol=1e-6):
    """Run every feed dict, in order, on ONE dynashape session and compare each run's
    outputs (dtype, shape, values) with ``expected_outputs``; returns the session."""
    import dynashape

    sess = dynashape.InferenceSession(model, allocator=allocator)
    for k, feeds in enumerate(feeds_list):
        got = sess.run(None, feeds)
        want = expected_outputs(model, feeds, ort_fixed_in, spec=spec)
        assert len(got) == len(want), (k, len(got), len(want))
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, g.shape, w.dtype, w.shape)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"run {k}")
    return sess


def assert_same_output(got: np.ndarray, want, where: str = "", rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """``got`` equals ``want`` in shape and dtype (string tensors: object arrays of equal
    strings, whatever numpy string dtype ``want`` has) and in values within rtol/atol."""
    want = np.asarray(want)
    assert got.shape == want.shape, (where, got.shape, want.shape)
    if want.dtype == object or want.dtype.kind in "US":
        assert got.dtype == object, (where, got.dtype)
        assert got.tolist() == want.tolist(), (where, got.tolist(), want.tolist())
    else:
        assert got.dtype == want.dtype, (where, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=where)


def assert_runs_match(model, feeds_list, want=None, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Every feed dict, in order, on ONE session per allocator ("pool", "naive"); each run's
    outputs compared (count, dtype, shape, values) with ``want(feeds)`` (default: onnxruntime)."""
    import dynashape

    for allocator in ("pool", "naive"):
        sess = dynashape.InferenceSession(model, allocator=allocator)
        for k, feeds in enumerate(feeds_list):
            feeds = {name: np.asarray(v) for name, v in feeds.items()}   # numpy scalars too: ORT takes arrays only
            got = sess.run(None, feeds)
            ref = want(feeds) if want is not None else ort_run(model, feeds)
            assert len(got) == len(ref), (allocator, k, len(got), len(ref))
            for g, w in zip(got, ref):
                assert_same_output(g, w, f"{allocator} run {k}", rtol, atol)


def assert_broadcast_mismatch(sess, feeds: dict, node: str) -> None:
    """``sess.run(feeds)`` raises ShapeInferenceError of kind BroadcastMismatch naming ``node``."""
    import dynashape

    with pytest.raises(dynashape.ShapeInferenceError, match="cannot be broadcast") as info:
        sess.run(None, feeds)
    assert info.value.kind == "BroadcastMismatch" and info.value.node == node, str(info.value)
    assert f"'{node}'" in str(info.value)


def ort_session(model):
    """An ONNX Runtime session (single thread, CPU) on a path, bytes or ModelProto."""
    ort = pytest.importorskip("onnxruntime")
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    elif not isinstance(model, (bytes, bytearray)):
        model = str(model)       # by path: external data is found next to the file
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def ort_run(model, feeds: dict, output_names=None) -> list[np.ndarray]:
    """ONNX Runtime (single thread, CPU) on a path, bytes or ModelProto."""
    return ort_session(model).run(output_names, feeds)


def spec_run(model, feeds: dict, output_names=None) -> list[np.ndarray]:
    """The ONNX spec's outputs, from onnx.reference.ReferenceEvaluator."""
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(output_names, feeds)


def spec_node_outputs(op: str, inputs, attrs: dict | None = None, *, opset: int, n_outputs: int = 1,
                      domain: str = "", declare_shapes: bool = True) -> list:
    """onnx.reference's outputs of one ``op`` node (None: an absent optional input; object arrays: strings)."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    names = ["" if x is None else f"in{i}" for i, x in enumerate(inputs)]
    outs = [f"out{i}" for i in range(n_outputs)]
    feeds = {n: x for n, x in zip(names, inputs) if n}

    def elem(x) -> int:
        dt = np.asarray(x).dtype
        return TensorProto.STRING if dt.kind in "OUS" else helper.np_dtype_to_tensor_dtype(dt)

    graph = helper.make_graph(
        [helper.make_node(op, names, outs, domain=domain, **(attrs or {}))], "g",
        [helper.make_tensor_value_info(n, elem(x), np.shape(x) if declare_shapes else None) for n, x in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    return ReferenceEvaluator(model).run(None, feeds)


def spec_versions(op: str, domain: str = "") -> list[int]:
    """The since_versions onnx defines for ``op`` of ``domain``, sorted."""
    import onnx.defs

    return sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                   if s.name == op and s.domain == domain})


def symbolic_context(op: str, shapes, dtypes=None, values=None, attrs: dict | None = None, *, opset: int,
                     n_outputs: int = 1, domain: str = ""):
    """(InferContext, resolved OpDef) of one symbolic ``op`` node; an input whose shape and dtype are None is absent."""
    from dynashape.model import Node
    from dynashape.records import InferContext
    from dynashape.registry import get_registry

    dtypes = [np.float32] * len(shapes) if dtypes is None else dtypes
    dtypes = [None if d is None else np.dtype(d) for d in dtypes]
    names = tuple("" if s is None and d is None else f"in{i}" for i, (s, d) in enumerate(zip(shapes, dtypes)))
    node = Node(f"{op}_sym", op, domain, names, tuple(f"out{i}" for i in range(n_outputs)), dict(attrs or {}))
    values = [None] * len(shapes) if values is None else list(values)
    ctx = InferContext(node, opset, list(shapes), dtypes, values, symbolic=True)
    return ctx, get_registry().resolve_op(domain, op, opset)


def symbolic_infer(*args, **kwargs):
    """(output shapes, OpDef, InferContext): ``infer_shape`` on ``symbolic_context(*args, **kwargs)``."""
    ctx, opdef = symbolic_context(*args, **kwargs)
    return list(opdef.infer_shape(ctx)), opdef, ctx


def _ort_u8s8_saturates() -> bool:
    """Whether onnxruntime's uint8 x int8 integer kernels saturate on this CPU: without
    AVX-VNNI, MLAS adds each pair of uint8*int8 products in int16 with saturation
    (``vpmaddubsw``; onnxruntime's quantization docs suggest ``reduce_range`` for it), so
    255*127 + 255*127 = 64770 comes out 32767."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])],
                              [numpy_helper.from_array(np.full((2, 1), 127, np.int8), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    model.ir_version = 8
    (y,) = ort_run(model, {"a": np.full((1, 2), 255, np.uint8)})
    return int(y[0, 0]) != 64770


#: integer ops -> (the uint8 input, the int8 input multiplied by it, that one's zero point)
_INTEGER_OPS = {"MatMulInteger": (0, 1, 3), "ConvInteger": (0, 1, 3), "QLinearConv": (0, 3, 5),
                "QLinearMatMul": (0, 3, 5)}


def _u8s8_products(model) -> list:
    """The integer nodes of ``model`` that multiply a uint8 tensor by an int8 one."""
    import onnx

    try:
        g = onnx.shape_inference.infer_shapes(model).graph
    except Exception:   # (ops onnx does not know: the declared types only)
        g = model.graph
    types = {v.name: v.type.tensor_type.elem_type for v in list(g.input) + list(g.value_info) + list(g.output)}
    types.update({t.name: t.data_type for t in g.initializer})
    return [n for n in model.graph.node if n.op_type in _INTEGER_OPS and len(n.input) > _INTEGER_OPS[n.op_type][1]
            and types.get(n.input[_INTEGER_OPS[n.op_type][0]]) == onnx.TensorProto.UINT8
            and types.get(n.input[_INTEGER_OPS[n.op_type][1]]) == onnx.TensorProto.INT8]


def uint8_weights(model, feeds: dict):
    """``(model, feeds)`` with the int8 side of every uint8 x int8 integer product (and its
    zero point) moved to uint8 by +128: ``(a - a0) * (b - b0)`` is unchanged, and onnxruntime
    multiplies uint8 by uint8 exactly on every CPU. None where an int8 operand is computed in
    the graph or read by another node too (it cannot move alone)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    nodes = _u8s8_products(model)
    g = model.graph
    inits, inputs = {t.name: t for t in g.initializer}, {v.name: v for v in g.input}
    names = set()
    for n in nodes:
        _, b, zp = _INTEGER_OPS[n.op_type]
        names.add(n.input[b])
        if len(n.input) > zp and n.input[zp]:
            names.add(n.input[zp])
        else:
            if "__u8s8_zero_128" not in inits:
                inits["__u8s8_zero_128"] = numpy_helper.from_array(np.array(128, np.uint8), "__u8s8_zero_128")
                g.initializer.append(inits["__u8s8_zero_128"])
            ins = list(n.input) + [""] * (zp + 1 - len(n.input))
            ins[zp] = "__u8s8_zero_128"
            del n.input[:]
            n.input.extend(ins)
    for n in g.node:
        pos = _INTEGER_OPS.get(n.op_type, ())[1:]
        for i, name in enumerate(n.input):
            if name in names and not (n in nodes and i in pos):
                return None
    feeds = dict(feeds)
    for name in names:
        if name in inits:
            inits[name].CopyFrom(numpy_helper.from_array(_plus_128(numpy_helper.to_array(inits[name])), name))
        elif name in inputs and name in feeds:
            feeds[name] = _plus_128(feeds[name])
            inputs[name].type.tensor_type.elem_type = onnx.TensorProto.UINT8
        else:
            return None
    return model, feeds


def _plus_128(a) -> np.ndarray:
    return np.asarray(np.asarray(a).astype(np.int16) + 128, dtype=np.uint8)


def expected_outputs(model, feeds: dict, ort_fixed_in=None, output_names=None, spec=None) -> list[np.ndarray]:
    """ONNX Runtime's outputs, or the ONNX spec's where the installed onnxruntime predates
    ``ort_fixed_in``: ``spec(model, feeds)`` where onnx.reference (``spec_run``) is wrong too.
    ORT is not called then, as some of those bugs abort the process. The spec's too for a
    uint8 x int8 integer product on a CPU where onnxruntime's saturates (ORT_U8S8_SATURATES),
    unless its int8 operands can move to uint8 (``uint8_weights``): onnxruntime's outputs then."""
    if hasattr(model, "graph") and ORT_U8S8_SATURATES and _u8s8_products(model):
        exact = uint8_weights(model, feeds)
        if exact is not None:
            return expected_outputs(*exact, ort_fixed_in, output_names, spec)
        ort_fixed_in = (10**6, 0)   # no release multiplies them exactly here
    if ort_fixed_in is None or not ort_predates(ort_fixed_in):
        return ort_run(model, feeds, output_names)
    return spec_run(model, feeds, output_names) if spec is None else spec(model, feeds)


#: onnxruntime's uint8 x int8 integer products saturate on this CPU (see _ort_u8s8_saturates)
ORT_U8S8_SATURATES = _ort_u8s8_saturates()


def ort_or_spec(ort_fixed_in, spec=None):
    """``expected_outputs`` for ``ort_fixed_in`` (and ``spec``) as a ``(model, feeds) -> outputs``."""
    return lambda model, feeds: expected_outputs(model, feeds, ort_fixed_in, spec=spec)


def _ort_max_ir_version():
    """The highest IR version the installed onnxruntime loads (older wheels, e.g. the last
    ones for Python 3.10, stop below the IR version onnx.helper writes by default)."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    probe = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", [x],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]),
                              opset_imports=[helper.make_opsetid("", 13)])
    for ir in range(probe.ir_version, 6, -1):
        probe.ir_version = ir
        try:
            ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
            return ir
        except Exception:  # noqa: BLE001 - probing
            continue
    return None


def _cap_default_ir_version() -> None:
    from onnx import helper

    cap = _ort_max_ir_version()
    original = helper.make_model
    if cap is None or cap >= original(helper.make_graph([], "g", [], [])).ir_version:
        return

    def make_model(graph, **kwargs):
        model = original(graph, **kwargs)
        if "ir_version" not in kwargs:
            model.ir_version = min(model.ir_version, cap)
        return model

    helper.make_model = make_model


_cap_default_ir_version()


def numba_session(*args, **kwargs):
    """An InferenceSession with the numba kernels (``dynashape.ops_builtin.fast``) and not the oneDNN
    ones, which take GEMM and convolutions first where they are installed: what the tests of
    the numba loops run (``compiled_kernels=False`` given stays the numpy kernels alone)."""
    import dynashape

    kwargs.setdefault("compiled_kernels", {"fast"})
    return dynashape.InferenceSession(*args, **kwargs)


@functools.lru_cache(maxsize=None)
def onednn_blocks_weights(k: int = 768, n: int = 2304) -> bool:
    """Whether oneDNN packs a (k, n) float32 MatMul weight into blocks on this CPU (AVX-512
    CPUs: 16-row x 64-column blocks, which one row streams through the numba loop,
    ``ops_builtin/fast/onednn/gemm.py``); on AVX2-only CPUs it keeps the plain row-major layout and
    the GEMMs run the native column-panel loop (or, where it cannot run, the primitive and BLAS)."""
    from dynashape.ops_builtin.fast.onednn import gemm

    packed = gemm.PackedGemm(np.zeros((k, n), np.float32), None, ())
    if packed.weights is None:      # (column panels for the native loop: a row-major choice)
        return False
    blocking = packed.weights.layouts[0][0].blocking()
    return blocking is not None and bool(blocking.inner_blks)


@pytest.fixture(autouse=True)
def _fresh_compilations():
    """Each test compiles its own models: a second session of a model shares the first one's
    compilation (dynashape.compiled), which must not carry one test's monkeypatched
    settings into another."""
    from dynashape import compiled
    compiled.clear()
    yield

