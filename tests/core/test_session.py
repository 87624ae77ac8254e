"""Session behaviour: feed validation, recovery after a failed run, output ownership, arena policy."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from dynashape.demo import BIAS, build_demo_model, demo_input
from tests.conftest import assert_broadcast_mismatch

ALLOCATORS = ["pool", "naive"]


def _two_input_model():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "g", [a, b], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(params=ALLOCATORS)
def demo(request):
    return dynashape.InferenceSession(build_demo_model(), allocator=request.param)


def test_demo_values_are_reshape_plus_bias(demo):
    x = demo_input(3)
    (y,) = demo.run(None, {"x": x})
    np.testing.assert_allclose(y, x.reshape(3, 6) + BIAS, rtol=0, atol=0)


def test_missing_input_names_it(demo):
    with pytest.raises(dynashape.InputNameError, match="missing input 'x'") as info:
        demo.run(None, {})
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)


def test_unknown_input_name_lists_the_real_ones(demo):
    with pytest.raises(dynashape.InputNameError, match=r"unknown input name\(s\) \['z'\].*\['x'\]"):
        demo.run(None, {"x": demo_input(1), "z": demo_input(1)})


def test_wrong_rank(demo):
    with pytest.raises(dynashape.InputRankMismatch, match="input 'x': expected rank 3.*got rank 2"):
        demo.run(None, {"x": np.zeros((2, 6), np.float32)})


def test_fixed_dim_mismatch_names_axis_expected_and_got(demo):
    with pytest.raises(dynashape.InputFixedDimMismatch, match=r"input 'x', axis 1: expected 2 .*got 4"):
        demo.run(None, {"x": np.zeros((2, 4, 3), np.float32)})


def test_dtype_mismatch_is_a_type_error(demo):
    with pytest.raises(dynashape.InputDtypeMismatch, match=r"expected tensor\(float\).*got numpy float64") as info:
        demo.run(None, {"x": np.zeros((2, 2, 3))})
    assert isinstance(info.value, TypeError)


def test_one_symbol_bound_to_two_values_is_an_error_with_strict_dim_params():
    sess = dynashape.InferenceSession(_two_input_model(), strict_dim_params=True)
    with pytest.raises(dynashape.DimParamMismatch, match=r"dim_param 'n' is bound to 2 by input 'a' axis 0 "
                                                         r"and to 3 by input 'b' axis 0"):
        sess.run(None, {"a": np.zeros((2, 3), np.float32), "b": np.zeros((3, 3), np.float32)})
    (y,) = sess.run(None, {"a": np.ones((2, 3), np.float32), "b": np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(y, np.full((2, 3), 2, np.float32))


def test_declared_dim_params_are_hints_by_default():
    # n is declared on both inputs; a run binding it to 1 and 3 broadcasts like ONNX Runtime
    sess = dynashape.InferenceSession(_two_input_model())
    a, b = np.arange(3, dtype=np.float32).reshape(1, 3), np.ones((3, 3), np.float32)
    with pytest.warns(RuntimeWarning, match=r"dim_param 'n' is bound to 1 by input 'a' axis 0 and to 3 by "
                                            r"input 'b' axis 0; declared dim_params are hints"):
        (y,) = sess.run(None, {"a": a, "b": b})
    np.testing.assert_array_equal(y, a + b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # warned once per symbol: no warning from here on
        (y2,) = sess.run(None, {"a": np.ones((4, 3), np.float32), "b": np.ones((1, 3), np.float32)})
        np.testing.assert_array_equal(y2, np.full((4, 3), 2, np.float32))
        (y3,) = sess.run(None, {"a": a, "b": b})
        np.testing.assert_array_equal(y3, a + b)
    # the declared program and one for "a's n differs from b's n" (1 vs 3 and 4 vs 1 alike)
    assert len(sess.engine.programs) == 2
    assert_broadcast_mismatch(sess, {"a": np.ones((2, 3), np.float32), "b": np.ones((3, 3), np.float32)}, "Add_0")


def test_a_split_program_infers_again_only_the_nodes_the_split_reaches(monkeypatch):
    """y = Relu(Relu(a)) + Relu(Relu(b)), a and b both declared (n, 3). Fed a of 1 row and b of
    3, the split program (b's n its own symbol) takes the declared program's results for a's
    two Relus (their inputs are the same there) and infers b's two Relus and the Add again."""
    from dynashape import symbolic_inference
    nodes = [helper.make_node("Relu", ["a"], ["a1"]), helper.make_node("Relu", ["a1"], ["a2"]),
             helper.make_node("Relu", ["b"], ["b1"]), helper.make_node("Relu", ["b1"], ["b2"]),
             helper.make_node("Add", ["a2", "b2"], ["y"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 3]) for n in "aby"]
    m = helper.make_model(helper.make_graph(nodes, "g", io[:2], io[2:]), opset_imports=[helper.make_opsetid("", 17)])
    sess = dynashape.InferenceSession(m, optimize=False)
    inferred = []
    real = symbolic_inference._infer_node
    monkeypatch.setattr(symbolic_inference, "_infer_node",
                        lambda sg, idx, pn, *rest: inferred.append(pn.node.outputs[0]) or real(sg, idx, pn, *rest))
    a, b = np.array([[-1.0, 2.0, -3.0]], np.float32), np.arange(-4, 5, dtype=np.float32).reshape(3, 3)
    with pytest.warns(RuntimeWarning, match="dim_params are hints"):
        (y,) = sess.run(None, {"a": a, "b": b})
    assert sorted(inferred) == ["b1", "b2", "y"]
    np.testing.assert_array_equal(y, np.maximum(a, 0) + np.maximum(b, 0))
    (y,) = sess.run(None, {"a": b, "b": b})       # the declared program, its contexts its own still
    np.testing.assert_array_equal(y, 2 * np.maximum(b, 0))


def test_unknown_output_name(demo):
    with pytest.raises(dynashape.InputNameError, match="unknown output name 'nope'"):
        demo.run(["nope"], {"x": demo_input(1)})


def test_session_usable_after_failed_runs(demo):
    for bad in ({}, {"x": np.zeros((2, 4, 3), np.float32)}, {"x": np.zeros((2, 2, 3), np.int64)}):
        with pytest.raises(dynashape.DynashapeError):
            demo.run(None, bad)
    x = demo_input(4)
    (y,) = demo.run(None, {"x": x})
    np.testing.assert_array_equal(y, x.reshape(4, 6) + BIAS)


def test_session_usable_after_shape_inference_error():
    # Reshape to a constant [2, 3]: any batch but 1 breaks the element count
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    g = helper.make_graph([helper.make_node("Reshape", ["x", "t"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
                          "g", [x], [y], [numpy_helper.from_array(np.array([1, 3], np.int64), "t")])
    sess = dynashape.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(dynashape.ShapeInferenceError, match="Reshape"):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
    (out,) = sess.run(None, {"x": -np.ones((1, 3), np.float32)})
    np.testing.assert_array_equal(out, np.zeros((1, 3), np.float32))
    assert sess.stats.failed_runs == 1 and sess.stats.runs == 1


def test_runs_give_ieee_results_quietly_and_restore_the_callers_error_state():
    # Div by zero and Log(0) (folded at session creation): inf and -inf as ONNX Runtime gives
    # them, no RuntimeWarning;
    # numpy's error state outside the run is the caller's, after a failed run too
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    g = helper.make_graph([helper.make_node("Div", ["x", "z"], ["d"]), helper.make_node("Log", ["z"], ["l"])], "g",
                          [x], [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n"]) for n in ("d", "l")],
                          [numpy_helper.from_array(np.zeros(2, np.float32), "z")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = dynashape.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
        d, lg = sess.run(None, {"x": np.array([1, -1], np.float32)})
    assert not caught
    with np.errstate(all="raise"):
        d, lg = sess.run(None, {"x": np.array([1, -1], np.float32)})
        assert_broadcast_mismatch(sess, {"x": np.ones(3, np.float32)}, "Div_0")   # 3 vs 2 does not broadcast
        assert np.geterr()["divide"] == "raise"
    np.testing.assert_array_equal(d, [np.inf, -np.inf])
    np.testing.assert_array_equal(lg, [-np.inf, -np.inf])


def test_the_numpy_1_fallback_of_the_quiet_state_restores_it_too(monkeypatch):
    from dynashape import fpstate

    monkeypatch.setattr(fpstate, "ERRSTATE", None)          # as on numpy 1.x: np.errstate
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    g = helper.make_graph([helper.make_node("Log", ["x"], ["y"])], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    sess = dynashape.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    with np.errstate(all="raise"):
        (y,) = sess.run(None, {"x": np.array([0, 1], np.float32)})
        assert np.geterr()["divide"] == "raise"
    np.testing.assert_array_equal(y, [-np.inf, 0])


def test_returned_arrays_are_untouched_by_later_runs(demo):
    results = []
    inputs = [demo_input(b) for b in (1, 2, 8, 3, 1, 2)]
    for x in inputs:
        results.append(demo.run(None, {"x": x})[0])
    for x, y in zip(inputs, results):
        np.testing.assert_array_equal(y, x.reshape(x.shape[0], 6) + BIAS)


def _chain_model():
    # x -> Relu -> Neg -> Relu -> Neg -> y : intermediates live in the arena
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16])
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
             helper.make_node("Relu", ["b"], ["c"]), helper.make_node("Neg", ["c"], ["y"])]
    g = helper.make_graph(nodes, "chain", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_pool_arena_grows_for_larger_shapes_and_is_kept_for_smaller():
    sess = dynashape.InferenceSession(_chain_model(), allocator="pool")
    capacities = []
    for n in (4, 64, 8, 2, 64, 128):
        x = np.random.default_rng(n).standard_normal((n, 16)).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, -np.maximum(-np.maximum(x, 0), 0))
        capacities.append(sess.arena_bytes)
    # n=4 needs one block of 256 B (b and c are computed in place over a); 64 -> 4096;
    # 8, 2, 64 fit; 128 grows
    assert capacities == [256, 4096, 4096, 4096, 4096, 8192]
    assert sess.arena.grow_count == 3


def test_trim_releases_the_arena():
    sess = dynashape.InferenceSession(_chain_model(), allocator="pool")
    sess.run(None, {"x": np.ones((64, 16), np.float32)})
    assert sess.arena_bytes == 4096
    sess.trim()
    assert sess.arena_bytes == 0
    (y,) = sess.run(None, {"x": np.ones((2, 16), np.float32)})
    np.testing.assert_array_equal(y, -np.ones((2, 16), np.float32) * 0)


def test_a_dim_value_of_minus_one_is_an_unknown_dim():
    """Paddle2ONNX exports (PaddleOCR's ch_ppocr_mobile_v2.0_cls_infer.onnx) declare a free
    batch dim as ``dim_value: -1``; onnxruntime reads it as unknown, and so does dynashape."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "paddle_like",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, -1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3, -1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = dynashape.InferenceSession(model)
    assert sess.get_inputs()[0].shape == [None, 3, None]
    for batch, width in ((1, 2), (4, 5)):
        x = np.linspace(-1, 1, batch * 3 * width, dtype=np.float32).reshape(batch, 3, width)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_a_loaded_model_serves_two_sessions_with_the_same_values():
    """A Model from load_model is left whole by a session (its initializers were released
    once, and a second session then failed to find the folded weight)."""
    from dynashape.model import load_model

    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    g = helper.make_graph([helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
                           helper.make_node("Transpose", ["wt"], ["w2"], perm=[1, 0]),
                           helper.make_node("MatMul", ["x", "w2"], ["y"])],
                          "g", [x_info], [y_info], [numpy_helper.from_array(w, "w")])
    model = load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    x = np.array([[1, 2, 3], [0, -1, 0.5]], dtype=np.float32)
    want = np.array([[32, 38, 44, 50], [0, -0.5, -1, -1.5]], dtype=np.float32)
    for _ in range(2):
        (y,) = dynashape.InferenceSession(model).run(None, {"x": x})
        np.testing.assert_allclose(y, want, rtol=1e-6)
    np.testing.assert_array_equal(model.graph.initializers["w"], w)


def test_an_unknown_output_name_and_an_index_out_of_range_raise_what_they_are():
    """An unknown output name is an OutputNameError (still an InputNameError); an index a feed
    holds beyond its table (a token id) is an IndexOutOfRangeError: an IndexError and
    onnxruntime's InvalidArgument as well as the ShapeInferenceError it was."""
    from onnx import TensorProto
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "table")
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["y"])], "g",
                                                [ids], [y], [table]), opset_imports=[helper.make_opsetid("", 17)])
    sess = dynashape.InferenceSession(model.SerializeToString())
    with pytest.raises(dynashape.OutputNameError, match="unknown output name 'nope'") as info:
        sess.run(["nope"], {"ids": np.array([1])})
    assert isinstance(info.value, dynashape.InputNameError)
    with pytest.raises(IndexError, match="index 7 is out of range for a dim of size 4") as info:
        sess.run(None, {"ids": np.array([1, 7])})
    assert isinstance(info.value, dynashape.ShapeInferenceError) and info.value.kind == "GatherIndexOutOfRange"
    from dynashape.capi.onnxruntime_pybind11_state import InvalidArgument
    assert isinstance(info.value, InvalidArgument)
    np.testing.assert_array_equal(sess.run(None, {"ids": np.array([3, -4])})[0], [[9, 10, 11], [0, 1, 2]])


def test_a_rule_broken_by_its_attributes_fails_when_the_session_is_made():
    """An attribute no input can make valid (ZipMap without labels, a Softmax axis beyond the
    rank) is refused by InferenceSession(...), not by the first run; a rule only some shapes
    break still waits for them."""
    from onnx import TensorProto
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    bad_axis = helper.make_model(helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=5)], "g", [x], [y]),
                                 opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(dynashape.ShapeInferenceError, match="axis") as info:
        dynashape.InferenceSession(bad_axis.SerializeToString())
    assert info.value.kind == "AxisOutOfRange" and info.value.node == "Softmax_0"
    shape = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    reshape = helper.make_model(helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "g", [x, shape],
                                                  [y]), opset_imports=[helper.make_opsetid("", 17)])
    sess = dynashape.InferenceSession(reshape.SerializeToString())     # (fed shapes: decided per run)
    with pytest.raises(dynashape.ShapeInferenceError):
        sess.run(None, {"x": np.zeros((2, 3), np.float32), "s": np.array([4, 2])})
    assert sess.run(None, {"x": np.zeros((2, 3), np.float32), "s": np.array([3, 2])})[0].shape == (3, 2)


# one compile path for the graph and its bodies --------------------------------------------

def _if_with_a_constant_branch():
    """If(c): then = x + (2 * 3), the product constant-only; else = -x."""
    f = TensorProto.FLOAT
    then = helper.make_graph(
        [helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2.0, np.float32))),
         helper.make_node("Constant", [], ["three"], value=numpy_helper.from_array(np.array(3.0, np.float32))),
         helper.make_node("Mul", ["two", "three"], ["six"], name="six"),
         helper.make_node("Add", ["x", "six"], ["t"])],
        "then", [], [helper.make_tensor_value_info("t", f, ["n"])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", f, ["n"])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
                          [helper.make_tensor_value_info("x", f, ["n"]),
                           helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", f, ["n"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("level,folds", [(dynashape.GraphOptimizationLevel.ORT_ENABLE_ALL, True),
                                         (dynashape.GraphOptimizationLevel.ORT_DISABLE_ALL, False)])
def test_the_session_and_its_subgraph_bodies_compile_through_one_path_with_one_setting(monkeypatch, level, folds):
    """The main graph and an If branch both go through compilation.compile_graph with the
    session's settings: the branch's constant-only Mul is folded unless the graph
    optimisation level is ORT_DISABLE_ALL (as onnxruntime, which optimises no subgraph then),
    with the same results either way."""
    from dynashape import compilation, session, subgraph
    calls = []
    real = compilation.compile_graph

    def recording(source, *args, **kwargs):
        c = real(source, *args, **kwargs)
        calls.append((type(source).__name__, kwargs["fold"], kwargs["memory_limit"],
                      [pn.node.name for pn in c.graph.nodes]))
        return c
    monkeypatch.setattr(session, "compile_graph", recording)
    monkeypatch.setattr(subgraph, "compile_graph", recording)
    so = dynashape.SessionOptions()
    so.graph_optimization_level = level
    sess = dynashape.InferenceSession(_if_with_a_constant_branch(), so, memory_limit="64MiB")
    x = np.array([1.0, -2.0], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x, "c": np.array(True)})[0], [7.0, 4.0])
    np.testing.assert_array_equal(sess.run(None, {"x": x, "c": np.array(False)})[0], [-1.0, 2.0])
    assert [(kind, fold, limit) for kind, fold, limit, _ in calls] == [("Model", folds, 64 << 20)] + \
        [("Graph", folds, 64 << 20)] * 2
    then_nodes = calls[1][3]
    assert ("six" in then_nodes) is not folds
