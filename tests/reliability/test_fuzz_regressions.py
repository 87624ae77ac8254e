"""Regression tests for the disagreements tests/reliability/test_fuzz.py found: each a small
graph with hand-checked expected values, run on one session per allocator through the shape
changes that exposed it. The comment on each test names what was wrong."""
from __future__ import annotations

import dynashape
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

INT64_MAX = int(np.iinfo(np.int64).max)
ALLOCATORS = ("pool", "naive")


def _model(nodes, inputs, outputs, inits=(), opset: int = 18):
    """A model of ``nodes``; ``inputs``/``outputs`` are (name, elem type, dims) triples."""
    graph = helper.make_graph(
        nodes, "regression",
        [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
        [helper.make_tensor_value_info(n, t, d) for n, t, d in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def _sessions(model: bytes):
    return [dynashape.InferenceSession(model, allocator=alloc) for alloc in ALLOCATORS]


def f32(*shape) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


def test_squeeze_of_a_symbolic_dim_raises_where_it_is_not_one():
    # fuzz: Squeeze(x[b,b,b], axes=[1]) took the symbolic dim b for 1 without a guard, so a
    # later signature with b = 0 was planned from the symbolic program and returned a
    # (0, 0) tensor where onnxruntime and the spec raise (fixed: shape_ops._squeeze_infer
    # states b == 1 with ctx.assume)
    model = _model([helper.make_node("Squeeze", ["x", "axes"], ["y"])],
                   [("x", TensorProto.FLOAT, ["b", "b", "b"])], [("y", TensorProto.FLOAT, None)],
                   [("axes", np.array([1], np.int64))])
    for sess in _sessions(model):
        (y,) = sess.run(None, {"x": f32(1, 1, 1)})
        assert y.shape == (1, 1)
        for b in (0, 3, 0):
            with pytest.raises(dynashape.ShapeInferenceError, match="cannot squeeze axis 1") as info:
                sess.run(None, {"x": f32(b, b, b)})
            assert info.value.kind == "SqueezeNonUnitDim"
        (y,) = sess.run(None, {"x": np.full((1, 1, 1), 7, np.float32)})
        assert y.shape == (1, 1) and y.tolist() == [[7.0]]


def test_slice_negative_step_with_int64_max_end_is_empty():
    # fuzz row slice-neg-step-int64max-end: the spec clamps end = INT64_MAX to dim-1 for a
    # negative step, so x[-1:INT64_MAX:-1] is empty; onnxruntime returns the reversed axis
    # (microsoft/onnxruntime#11107). dynashape follows the spec
    model = _model([helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])],
                   [("x", TensorProto.FLOAT, ["a"])], [("y", TensorProto.FLOAT, None)],
                   [("starts", np.array([-1], np.int64)), ("ends", np.array([INT64_MAX], np.int64)),
                    ("axes", np.array([0], np.int64)), ("steps", np.array([-1], np.int64))])
    for sess in _sessions(model):
        for a in (5, 0, 1, 5):
            (y,) = sess.run(None, {"x": f32(a)})
            assert y.shape == (0,), a


def test_plan_value_from_an_earlier_segment_is_recomputed_for_each_signature():
    # fuzz: Where(Equal(Shape(y), 0), ...) runs once per signature (a plan node) before the
    # Squeeze without axes, whose unknown output rank starts a new segment; the Cast of the
    # Where's value in that segment was memoised with no symbol dependencies, so every run
    # returned the first run's shape [5, 3] (fixed: program.Program._plan_dependencies
    # follows plan values made in earlier segments)
    model = _model([helper.make_node("Shape", ["y"], ["s"]), helper.make_node("Equal", ["s", "zero"], ["e"]),
                    helper.make_node("Where", ["e", "s", "s"], ["w"]), helper.make_node("Squeeze", ["y"], ["q"]),
                    helper.make_node("Cast", ["w"], ["out"], to=TensorProto.FLOAT)],
                   [("y", TensorProto.FLOAT, ["c", 3])],
                   [("q", TensorProto.FLOAT, None), ("out", TensorProto.FLOAT, None)],
                   [("zero", np.array(0, np.int64))])
    for sess in _sessions(model):
        for c in (5, 0, 2, 5, 1):
            q, out = sess.run(None, {"y": f32(c, 3)})
            assert out.tolist() == [float(c), 3.0], c
            assert q.shape == ((3,) if c == 1 else (c, 3))


def _reduce_by_k_model(op: str, dims, keepdims: int) -> bytes:
    """``op(x, axes=Unsqueeze(k))``: axes known only at run time."""
    return _model([helper.make_node("Unsqueeze", ["k", "zero"], ["axes"]),
                   helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)],
                  [("x", TensorProto.FLOAT, dims), ("k", TensorProto.INT64, [])], [("y", TensorProto.FLOAT, None)],
                  [("zero", np.array([0], np.int64))])


@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_with_run_time_axes_out_of_range_raises_shape_inference_error(keepdims):
    # fuzz: ReduceLogSumExp(x, axes=Unsqueeze(k)) with k out of range reached numpy with the
    # unchecked axes and failed as "ExecutionError: IndexError: tuple index out of range"
    # (fixed: reduction._runtime_axes checks them as inference does, and inference fails a
    # 1-axis input for a 0-d tensor, which it took for a reduction to rank -1)
    model = _reduce_by_k_model("ReduceLogSumExp", ["a"], keepdims)
    for sess in _sessions(model):
        (y,) = sess.run(None, {"x": np.zeros(3, np.float32), "k": np.array(-1, np.int64)})
        np.testing.assert_allclose(y, [np.log(3.0)] if keepdims else np.log(3.0), rtol=1e-6)
        for k in (1, -2, 6):
            with pytest.raises(dynashape.ShapeInferenceError, match="out of range") as info:
                sess.run(None, {"x": np.zeros(3, np.float32), "k": np.array(k, np.int64)})
            assert info.value.kind == "AxisOutOfRange"
        (y,) = sess.run(None, {"x": np.ones(2, np.float32), "k": np.array(0, np.int64)})
        np.testing.assert_allclose(y, [1 + np.log(2.0)] if keepdims else 1 + np.log(2.0), rtol=1e-6)
    # a 0-d input has no axis at all: onnxruntime reduces it anyway, the spec's range is empty,
    # whatever k is: the session is refused when it is made
    for allocator in ("pool", "naive"):
        with pytest.raises(dynashape.ShapeInferenceError, match="rank 0") as info:
            dynashape.InferenceSession(_reduce_by_k_model("ReduceSum", [], keepdims), allocator=allocator)
        assert info.value.kind == "AxisOutOfRange"


def test_reduce_with_run_time_duplicate_axes_raises_shape_inference_error():
    # fuzz: axes computed at run time (Sub(Shape(x), Shape(x)) = [0, 0]) reached numpy,
    # whose "duplicate value in 'axis'" became an ExecutionError (fixed with the check above;
    # repeated axes raise, as in onnx.reference: KNOWN_DEVIATIONS reduce-duplicate-axes)
    model = _model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Sub", ["s", "s"], ["axes"]),
                    helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
                   [("x", TensorProto.FLOAT, ["a", "b"])], [("y", TensorProto.FLOAT, None)])
    for sess in _sessions(model):
        for shape in ((2, 3), (0, 1), (2, 3)):
            with pytest.raises(dynashape.ShapeInferenceError, match="duplicates"):
                sess.run(None, {"x": f32(*shape)})


def test_guard_broken_before_a_binding_node_replans_the_later_segments():
    # fuzz: Reshape(x[c,a,c], [1, c*a, c]) read the computed target entry c*a as a dim under
    # the guard c*a > 0 (a 0 entry means "copy the input dim"); with c = 0 the guard failed
    # and per-node inference planned the first segment right, (1, 1, 0), but the segment
    # after the NonZero (a binding node) still used the symbolic shape and gave Shape = [1,
    # 0, 0] (a Split there cut the wrong dim; fixed: emit.Emitter._sig checks the
    # earlier segments' guards too)
    def node(op, ins, outs, **kw):
        return helper.make_node(op, ins, outs, **kw)
    model = _model([node("Shape", ["x"], ["s"]), node("Slice", ["s", "zero", "two"], ["s01"]),
                    node("ReduceProd", ["s01"], ["ca"], keepdims=1), node("Slice", ["s", "two", "three"], ["s2"]),
                    node("Concat", ["one", "ca", "s2"], ["target"], axis=0), node("Reshape", ["x", "target"], ["r"]),
                    node("Greater", ["x", "fzero"], ["pos"]), node("NonZero", ["pos"], ["nz"]),
                    node("Shape", ["r"], ["rs"])],
                   [("x", TensorProto.FLOAT, ["c", "a", "c"])],
                   [("nz", TensorProto.INT64, None), ("rs", TensorProto.INT64, None)],
                   [("zero", np.array([0], np.int64)), ("one", np.array([1], np.int64)),
                    ("two", np.array([2], np.int64)), ("three", np.array([3], np.int64)),
                    ("fzero", np.array(0.0, np.float32))])
    for sess in _sessions(model):
        for shape, want in (((2, 1, 2), [1, 2, 2]), ((0, 1, 0), [1, 1, 0]), ((0, 3, 0), [1, 3, 0]),
                            ((2, 1, 2), [1, 2, 2]), ((0, 1, 0), [1, 1, 0])):
            nz, rs = sess.run(None, {"x": np.ones(shape, np.float32)})
            assert rs.tolist() == want, shape
            assert nz.shape == (3, int(np.prod(shape)))


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_forward_slice_of_an_empty_axis_passes_the_validation_mode_check(allocator):
    # fuzz under DYNASHAPE_VALIDATE_MEMORY=1: Slice(x[a], starts=[0], ends=[INT64_MAX]) on
    # a = 0: the symbolic index slice(0, 0, 1) and the concrete one slice(0, 0) select the same,
    # but the plan check compared them as different and raised PlanCheckError (fixed:
    # tensor_ops._slice_index clamps forward bounds to [0, d] as the symbolic index does)
    model = _model([helper.make_node("Slice", ["x", "s", "e"], ["y"])], [("x", TensorProto.FLOAT, ["a"])],
                   [("y", TensorProto.FLOAT, None)], [("s", np.array([0])), ("e", np.array([INT64_MAX]))])
    sess = dynashape.InferenceSession(model, allocator=allocator, validate_memory=True)
    for n in (0, 3, 0, 5):
        np.testing.assert_array_equal(sess.run(None, {"x": f32(n)})[0], f32(n))
    model = _model([helper.make_node("Slice", ["x", "s", "e"], ["y"])], [("x", TensorProto.FLOAT, ["a"])],
                   [("y", TensorProto.FLOAT, None)], [("s", np.array([-2])), ("e", np.array([1]))])
    sess = dynashape.InferenceSession(model, allocator=allocator, validate_memory=True)
    np.testing.assert_array_equal(sess.run(None, {"x": f32(5)})[0], np.zeros(0, np.float32))   # [3:1]
    np.testing.assert_array_equal(sess.run(None, {"x": f32(2)})[0], [0.0])                     # [0:1]
