"""The compiled program: a new signature costs no per-node inference, values computed from
shapes are made once per signature, data-dependent nodes bind symbols and the rest stays
symbolic, runs on execution contexts are isolated, subgraphs keep the session's registry."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from dynashape import plan as plan_module
from dynashape.records import OpLibrary, same_dtype
from dynashape.symbolic_inference import BINDING, FOLDED, PLAN, STEP

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=(), opsets=(("", 17),)):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def _i64(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


@pytest.fixture
def counting_ops():
    """test.count::Twice (y = 2x, counting its inference calls) and a Range kernel that
    counts its runs (priority above the builtin one)."""
    calls = {"infer": 0, "range": 0}
    lib = OpLibrary()

    @lib.op("Twice", 1, domain="test.count", infer_dtype=same_dtype(0))
    def _twice_shape(ctx):
        calls["infer"] += 1
        return [ctx.shape(0)]

    @lib.kernel("Twice", domain="test.count", may_inplace=((0, 0),))
    def _twice(inputs, outputs, ctx):
        np.multiply(inputs[0], 2, out=outputs[0])

    @lib.kernel("Range", priority=10)
    def _range(inputs, outputs, ctx):
        calls["range"] += 1
        start, limit, delta = (np.asarray(a).item() for a in inputs)
        outputs[0][...] = np.arange(start, limit, delta, dtype=outputs[0].dtype)

    name = dynashape.register_plugin(lib.plugin(), name="test-counting-ops")
    yield calls
    dynashape.unregister_plugin(name)


def _position_model():
    # y = Twice(Twice(x)) + Range(0, seq) broadcast over the batch: the Range depends on shapes only
    nodes = [helper.make_node("Twice", ["x"], ["t1"], domain="test.count"),
             helper.make_node("Twice", ["t1"], ["t2"], domain="test.count"),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
             helper.make_node("Cast", ["seq"], ["seqf"], to=F),
             helper.make_node("Range", ["zero", "seqf", "onef"], ["pos"]),
             helper.make_node("Add", ["t2", "pos"], ["y"])]
    inits = [_i64("one", 1), numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(1, np.float32), "onef")]
    return _model(nodes, [("x", F, ["batch", "seq"])], [("y", F, ["batch", "seq"])], inits,
                  opsets=(("", 17), ("test.count", 1)))


def test_a_new_signature_is_planned_without_per_node_inference(counting_ops, monkeypatch):
    # (validation mode checks every plan against per-node inference on purpose: off here)
    sess = dynashape.InferenceSession(_position_model(), validate_memory=False, optimize=False)
    after_compile = counting_ops["infer"]
    assert after_compile == 2                     # once per Twice node, symbolically (rewrites would add one pass)
    calls = []
    real = plan_module.infer
    monkeypatch.setattr(plan_module, "infer", lambda pn, ctx: calls.append(pn) or real(pn, ctx))
    for batch, seq in ((1, 4), (3, 7), (2, 0), (5, 16), (1, 4)):
        x = np.random.default_rng(seq).standard_normal((batch, seq)).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(y, 4 * x + np.arange(seq, dtype=np.float32), rtol=1e-6)
    assert counting_ops["infer"] == after_compile and calls == []
    assert (sess.stats.cache_misses, sess.stats.symbolic_plans, sess.stats.resolved_plans) == (4, 4, 0)


def test_values_computed_from_shapes_run_once_per_signature(counting_ops):
    sess = dynashape.InferenceSession(_position_model())
    status = {pn.node.op_type: st for pn, st in zip(sess.graph.nodes, sess.symbolic.status)}
    assert status == {"Twice": STEP, "Shape": FOLDED, "Gather": FOLDED, "Cast": FOLDED, "Range": PLAN, "Add": STEP}
    x = np.ones((2, 5), np.float32)
    for _ in range(3):
        (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.broadcast_to(4 + np.arange(5, dtype=np.float32), (2, 5)))
    assert counting_ops["range"] == 1             # made with the plan, not by the two cached runs
    sess.run(None, {"x": np.ones((2, 6), np.float32)})
    assert counting_ops["range"] == 2
    # a new batch with a sequence length seen before: the positions depend on seq only, kept
    (y,) = sess.run(None, {"x": np.ones((7, 6), np.float32)})
    np.testing.assert_array_equal(y, np.broadcast_to(4 + np.arange(6, dtype=np.float32), (7, 6)))
    assert counting_ops["range"] == 2 and sess.stats.cache_misses == 3 and sess.stats.cache_hits == 2


def _reshape_by_batch_model(rest):
    # Reshape to [batch, rest] where batch comes from the shape: the symbolic rule assumes the
    # entry is not 0 (0 would mean "copy the input dim"); an empty batch breaks the guard
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Slice", ["s", "zero", "one"], ["b"]),
             helper.make_node("Concat", ["b", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"])]
    return _model(nodes, [("x", F, ["batch", 3, 4])], [("y", F, None)],
                  [_i64("zero", [0]), _i64("one", [1]), _i64("rest", [rest])])


def test_a_failing_guard_is_planned_by_per_node_inference(monkeypatch):
    calls = []
    real = plan_module.infer
    monkeypatch.setattr(plan_module, "infer", lambda pn, ctx: calls.append(pn.node.op_type) or real(pn, ctx))
    # (validation mode checks every plan against per-node inference on purpose: off here)
    # [batch, 12]: batch = 0 copies the input's 0, a valid plan made by per-node inference
    sess = dynashape.InferenceSession(_reshape_by_batch_model(12), validate_memory=False)
    (y,) = sess.run(None, {"x": -np.ones((2, 3, 4), np.float32)})
    assert y.shape == (2, 12) and calls == [] and sess.stats.symbolic_plans == 1
    (y,) = sess.run(None, {"x": -np.ones((0, 3, 4), np.float32)})
    assert y.shape == (0, 12) and "Reshape" in calls
    assert (sess.stats.symbolic_plans, sess.stats.resolved_plans) == (1, 1)
    # [batch, -1]: batch = 0 makes [0, -1], and per-node inference names the broken node
    calls.clear()
    sess = dynashape.InferenceSession(_reshape_by_batch_model(-1), validate_memory=False)
    (y,) = sess.run(None, {"x": -np.ones((2, 3, 4), np.float32)})
    assert y.shape == (2, 12) and calls == [] and sess.stats.symbolic_plans == 1
    with pytest.raises(dynashape.ShapeInferenceError, match="cannot infer the -1") as info:
        sess.run(None, {"x": np.ones((0, 3, 4), np.float32)})   # [0, -1]: 0 copies 0, -1 of 0 elements
    assert info.value.kind == "ReshapeCannotInferMinusOne" and info.value.node == "reshape"
    assert "Reshape" in calls
    assert sess.stats.resolved_plans == 0 and sess.stats.failed_runs == 1
    calls.clear()
    (y,) = sess.run(None, {"x": np.ones((5, 3, 4), np.float32)})
    np.testing.assert_array_equal(y, np.ones((5, 12), np.float32))
    assert calls == [] and sess.stats.symbolic_plans == 2


def test_a_data_dependent_node_binds_its_symbols_and_the_rest_stays_symbolic():
    # n = NonZero(mask) count; everything after it is planned symbolically in n
    nodes = [helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Cast", ["nz"], ["nzf"], to=F),
             helper.make_node("Relu", ["nzf"], ["r"]),
             helper.make_node("Mul", ["r", "r"], ["y"]),
             helper.make_node("Shape", ["y"], ["ys"])]
    m = _model(nodes, [("mask", TensorProto.BOOL, ["n"])], [("y", F, None), ("ys", I64, None)])
    sess = dynashape.InferenceSession(m)
    assert sess.symbolic.status == [BINDING, STEP, STEP, STEP, FOLDED]
    assert len(sess.program.segments) == 2 and len(sess.program.segments[1].steps) == 3
    for mask in ([True, False, True], [False] * 4, [True, True, False, True], [True, False, True]):
        mask = np.array(mask)
        y, ys = sess.run(None, {"mask": mask})
        want = np.nonzero(mask)[0].astype(np.float32).reshape(1, -1) ** 2
        np.testing.assert_array_equal(y, want)
        np.testing.assert_array_equal(ys, [1, want.shape[1]])
    # one plan per signature of the inputs, one continuation per count of true values
    assert (sess.stats.cache_misses, sess.stats.continuation_plans) == (2, 3)


def test_outputs_are_detached_before_the_next_run_starts():
    # y views a (Reshape), z is in place over Relu's output: neither may change when the
    # next run (same signature, same execution context, same arena) overwrites the arena
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Reshape", ["a", "flat"], ["y"]),
             helper.make_node("Neg", ["x"], ["b"]), helper.make_node("Exp", ["b"], ["c"]),
             helper.make_node("Identity", ["c"], ["z"]), helper.make_node("Identity", ["x"], ["w"])]
    m = _model(nodes, [("x", F, ["n", 4])], [("y", F, None), ("z", F, None), ("w", F, None)], [_i64("flat", [-1])])
    for allocator in ("pool", "naive"):
        sess = dynashape.InferenceSession(m, allocator=allocator)
        x1, x2 = np.arange(8, dtype=np.float32).reshape(2, 4) - 3, np.full((2, 4), 7, np.float32)
        first = sess.run(None, {"x": x1})
        second = sess.run(None, {"x": x2})
        np.testing.assert_array_equal(first[0], np.maximum(x1, 0).reshape(-1))
        np.testing.assert_array_equal(first[1], np.exp(-x1))
        np.testing.assert_array_equal(first[2], x1)
        assert not np.shares_memory(first[2], x1)          # a feed is handed back as a copy
        np.testing.assert_array_equal(second[0], np.maximum(x2, 0).reshape(-1))
        np.testing.assert_array_equal(second[1], np.exp(-x2))
        np.testing.assert_array_equal(second[2], x2)
        for a, b in zip(first, second):
            assert not np.shares_memory(a, b)


@pytest.fixture
def gate_op():
    """test.gate::Gate(x) = x + 1 that waits, in the kernel, until the test opens its gate."""
    lib = OpLibrary()
    state = {"entered": threading.Event(), "open": threading.Event(), "block": True}

    @lib.op("Gate", 1, domain="test.gate", infer_dtype=same_dtype(0))
    def _shape(ctx):
        return [ctx.shape(0)]

    @lib.kernel("Gate", domain="test.gate")
    def _gate(inputs, outputs, ctx):
        np.add(inputs[0], 1, out=outputs[0])
        if state["block"]:
            state["entered"].set()
            state["open"].wait(10)

    name = dynashape.register_plugin(lib.plugin(), name="test-gate")
    yield state
    dynashape.unregister_plugin(name)


def test_concurrent_runs_overlap_on_separate_execution_contexts(gate_op):
    # thread 1 stops inside Gate, in the middle of its run; the main thread runs the same
    # signature to the end meanwhile; then thread 1 finishes: both results are right
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Gate", ["a"], ["b"], domain="test.gate"),
             helper.make_node("Mul", ["b", "b"], ["c"]), helper.make_node("Neg", ["c"], ["y"])]
    m = _model(nodes, [("x", F, ["n", 8])], [("y", F, None)], opsets=(("", 17), ("test.gate", 1)))
    sess = dynashape.InferenceSession(m)
    x1, x2 = np.full((4, 8), 2, np.float32), np.full((4, 8), 5, np.float32)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("y1", sess.run(None, {"x": x1})[0]))
    t.start()
    assert gate_op["entered"].wait(10)
    gate_op["block"] = False
    (y2,) = sess.run(None, {"x": x2})
    gate_op["open"].set()
    t.join(10)
    np.testing.assert_array_equal(result["y1"], np.full((4, 8), -9, np.float32))
    np.testing.assert_array_equal(y2, np.full((4, 8), -36, np.float32))
    assert len(sess.engine._contexts) == 2 and sess.stats.runs == 2


def test_many_threads_with_changing_shapes_match_one_thread():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Softmax", ["r"], ["s"], axis=-1), helper.make_node("Reshape", ["s", "flat"], ["y"])]
    m = _model(nodes, [("x", F, ["b", "t", 8])], [("y", F, None)], [w, _i64("flat", [-1])])
    feeds = [rng.standard_normal((int(b), int(t), 8)).astype(np.float32)
             for b, t in rng.integers(1, 6, size=(60, 2))]
    ref = dynashape.InferenceSession(m)
    want = [ref.run(None, {"x": x})[0] for x in feeds]
    sess = dynashape.InferenceSession(m, plan_cache_size=4)
    got: dict = {}

    def worker(k):
        got[k] = [sess.run(None, {"x": x})[0] for x in feeds[k::4]]

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        for a, b in zip(got[k], want[k::4]):
            np.testing.assert_array_equal(a, b)


def test_subgraphs_keep_the_registry_the_session_was_built_with():
    then_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                                    [helper.make_tensor_value_info("t", F, None)])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                                    [helper.make_tensor_value_info("e", F, None)])
    m = _model([helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)],
               [("c", TensorProto.BOOL, []), ("x", F, ["n"])], [("y", F, None)])
    sess = dynashape.InferenceSession(m)
    lib = OpLibrary()

    @lib.kernel("Neg", priority=100)
    def _not_neg(inputs, outputs, ctx):
        outputs[0][...] = 42

    name = dynashape.register_plugin(lib.plugin(), name="test-late-neg")
    try:
        x = np.arange(3, dtype=np.float32)
        (y,) = sess.run(None, {"c": np.array(True), "x": x})     # the body is compiled now, with the old registry
        np.testing.assert_array_equal(y, -x)
        (y,) = dynashape.InferenceSession(m).run(None, {"c": np.array(True), "x": x})
        np.testing.assert_array_equal(y, [42, 42, 42])           # a new session sees the plugin
    finally:
        dynashape.unregister_plugin(name)


def test_a_kernel_error_inside_generated_code_shows_the_generated_line_naming_the_node():
    """The generated functions' source is in linecache: the traceback through the generated
    run shows the line that called the kernel, with the node's op type and name (what is
    not printable in the name escaped, so that the lines stay the source's lines)."""
    import traceback
    calls = [0]
    lib = OpLibrary()

    @lib.op("Boom", 1, domain="test.boom", infer_dtype=same_dtype(0))
    def _shape(ctx):
        return [ctx.shape(0)]

    @lib.kernel("Boom", domain="test.boom")
    def _boom(inputs, outputs, ctx):
        calls[0] += 1
        if calls[0] == 3:       # (the first run of a plan checks the kernel's contract step by step)
            raise ValueError("boom")
        outputs[0][...] = inputs[0]

    name = dynashape.register_plugin(lib.plugin(), name="test-boom")
    try:
        nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
                 helper.make_node("Boom", ["a"], ["y"], name="boom\u2028node", domain="test.boom")]
        sess = dynashape.InferenceSession(_model(nodes, [("x", F, ["n"])], [("y", F, ["n"])],
                                                 opsets=(("", 17), ("test.boom", 1))).SerializeToString(),
                                          validate_memory=False)        # (validation mode runs no generated code)
        x = np.array([-1.0, 2.0], np.float32)
        for _ in range(2):
            np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [0.0, 2.0])
        failure = "Boom node 'boom\u2028node' failed: ValueError: boom"
        with pytest.raises(dynashape.errors.ExecutionError, match=failure) as info:
            sess.run(None, {"x": x})
        text = "".join(traceback.format_exception(info.value))
        generated = [f for f in traceback.extract_tb(info.value.__cause__.__traceback__)
                     if f.filename.startswith("<dynashape-")]
        assert len(generated) == 1 and generated[0].line.endswith("# test.boom::Boom 'boom\\u2028node'")
        assert generated[0].line.startswith("r = _k") and generated[0].line in text
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [0.0, 2.0])     # (usable after)
    finally:
        dynashape.unregister_plugin(name)
