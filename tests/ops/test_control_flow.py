"""If, Loop and Scan through InferenceSession (subgraphs need a session), against onnxruntime
or onnx.reference, plus hand-checked edge cases and errors."""
from __future__ import annotations

import dynashape
import ml_dtypes
import numpy as np
import pytest
from dynashape.testing import infer_node
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ..conftest import ort_run

F = TP.FLOAT
I64 = TP.INT64
B = TP.BOOL


def vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def model(nodes, inputs, outputs, opset=17, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10 if opset >= 21 else 8
    return m


def run(m, feeds, allocator="pool"):
    sess = dynashape.InferenceSession(m.SerializeToString(), allocator=allocator)
    return sess.run(None, feeds)


def expected(m, feeds, opset):
    if opset <= 21:
        return ort_run(m, feeds)
    return ReferenceEvaluator(m).run(None, feeds)


def check(m, feeds, opset=17, allocator="pool"):
    got = run(m, feeds, allocator)
    want = expected(m, feeds, opset)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-6)
    return got


# If ----------------------------------------------------------------------------------

def if_model(opset=17):
    """y = cond ? x + a : concat(x, x); branches read outer x and a, shapes differ."""
    then_g = helper.make_graph([helper.make_node("Add", ["x", "a"], ["t"])], "then", [], [vi("t", F, None)])
    else_g = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["e"], axis=0)], "else", [],
                               [vi("e", F, None)])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    return model(nodes, [vi("c", B, []), vi("x", F, ["n", 3]), vi("a", F, [3])], [vi("y", F, None)], opset)


@pytest.mark.parametrize("opset", [11, 13, 16, 19, 21, 23, 25])
@pytest.mark.parametrize("flag", [True, False])
def test_if_outer_scope_and_branch_shapes(opset, flag):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a = np.array([1, 2, 3], np.float32)
    (y,) = check(if_model(opset), {"c": np.array(flag), "x": x, "a": a}, opset)
    assert y.shape == ((2, 3) if flag else (4, 3))


def test_if_reruns_with_changing_shapes_and_naive_allocator():
    m = if_model()
    a = np.ones(3, np.float32)
    sess = dynashape.InferenceSession(m.SerializeToString(), allocator="naive")
    for n, flag in [(1, True), (4, False), (2, True), (4, False), (0, False)]:
        x = np.random.rand(n, 3).astype(np.float32)
        (y,) = sess.run(None, {"c": np.array(flag), "x": x, "a": a})
        np.testing.assert_allclose(y, x + a if flag else np.concatenate([x, x]))


def _if_with_an_unknown_op_in_else():
    then_g = helper.make_graph([helper.make_node("Add", ["x", "a"], ["t"])], "then", [], [vi("t", F, None)])
    else_g = helper.make_graph([helper.make_node("Nope", ["x"], ["e"], domain="com.nowhere")], "else", [],
                               [vi("e", F, None)])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    return helper.make_model(helper.make_graph(nodes, "g", [vi("c", B, []), vi("x", F, ["n", 3]), vi("a", F, [3])],
                                               [vi("y", F, None)]),
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.nowhere", 1)])


def test_every_if_branch_is_compiled_with_the_session():
    """By default both branches (and the bodies in them) are compiled when the session is
    created, as onnxruntime initialises its subgraphs: no run compiles one (a merged decoder's
    first two steps each compiled a whole decoder), and an op nobody registered in a branch
    is reported at creation."""
    sess = dynashape.InferenceSession(if_model().SerializeToString())
    (seg,) = [seg for seg in sess.program.segments if seg.binding]
    then_branch, else_branch = seg.binding[0].prepared
    assert then_branch.runner._engine is not None and else_branch.runner._engine is not None
    with pytest.raises(dynashape.UnsupportedOperatorError, match="Nope"):
        dynashape.InferenceSession(_if_with_an_unknown_op_in_else().SerializeToString())


def _branch_of(program, attr):
    (node,) = [pn.node for pn in program.pg.nodes if pn.node.op_type == "If"]
    return node.attrs[attr]


def _if_of_two_sums(then_reads: tuple = ("x",)):
    """If(c): then ReduceSum of then_reads' sum, else ReduceSum(a); x and a share dim_param n."""
    then_nodes, t = [], then_reads[0]
    if len(then_reads) > 1:
        then_nodes.append(helper.make_node("Add", list(then_reads), ["s"]))
        t = "s"
    then_nodes.append(helper.make_node("ReduceSum", [t], ["t"], keepdims=0))
    then_g = helper.make_graph(then_nodes, "then", [], [vi("t", F, None)])
    else_g = helper.make_graph([helper.make_node("ReduceSum", ["a"], ["e"], keepdims=0)], "else", [],
                               [vi("e", F, None)])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    return model(nodes, [vi("c", B, []), vi("x", F, ["n"]), vi("a", F, ["n"])], [vi("y", F, None)])


def _split_program(sess):
    (split,) = [p for key, p in sess.engine.programs.items() if key[0] == "split"]
    return split


def test_a_program_made_during_a_run_runs_the_branches_the_session_compiled():
    """A feed that binds a declared dim_param to two values (x's n and a's n) gets a program
    of its own while it runs; its If runs the branches compiled with the session (the same
    runners: a merged decoder's first step with its cache compiled its whole decoder again)."""
    sess = dynashape.InferenceSession(_if_of_two_sums().SerializeToString())
    base = sess.program
    x, a = np.arange(3, dtype=np.float32), np.arange(5, dtype=np.float32)
    with pytest.warns(RuntimeWarning, match="dim_params are hints"):
        (y,) = sess.run(None, {"c": np.array(True), "x": x, "a": a})
    assert y == 3.0
    split = _split_program(sess)
    for branch in ("then_branch", "else_branch"):
        runner = split.services.subgraph(_branch_of(split, branch))
        assert runner is base.services.subgraph(_branch_of(base, branch)) and runner._engine is not None
    (y,) = sess.run(None, {"c": np.array(False), "x": x, "a": a})
    assert y == 10.0


def test_a_branch_reading_two_values_a_split_tells_apart_splits_its_own_program():
    """then = ReduceSum(x + a), compiled with the session for x and a of one length n. Fed x
    of one element and a of five (n bound to 1 and to 5: the session warns once), the branch
    binds them as hints too and plans its own split program, quietly: x broadcasts, as the
    model says (2 + 0..4 sums to 20), where the session's program took them as one length."""
    sess = dynashape.InferenceSession(_if_of_two_sums(("x", "a")).SerializeToString())
    x, a = np.array([2.0], np.float32), np.arange(5, dtype=np.float32)
    (y,) = sess.run(None, {"c": np.array(True), "x": a, "a": a})
    assert y == 20.0
    with pytest.warns(RuntimeWarning, match="dim_params are hints") as caught:
        (y,) = sess.run(None, {"c": np.array(True), "x": x, "a": a})
    assert y == 20.0 and len(caught) == 1
    split = _split_program(sess)
    body = split.services.subgraph(_branch_of(split, "then_branch")).engine
    assert body is sess.program.services.subgraph(_branch_of(sess.program, "then_branch")).engine
    assert [key[0] for key in body.programs] == ["fill", "split"]
    (y,) = sess.run(None, {"c": np.array(True), "x": a[:4], "a": a[:4]})   # the first program again
    assert y == 12.0


def test_with_lazy_subgraphs_a_program_made_during_a_run_compiles_only_the_branch_it_takes():
    """With ``lazy_subgraphs=True`` a split program's branches compile when first taken, as
    the session's do."""
    sess = dynashape.InferenceSession(_if_of_two_sums().SerializeToString(), lazy_subgraphs=True)
    x, a = np.arange(3, dtype=np.float32), np.arange(5, dtype=np.float32)
    with pytest.warns(RuntimeWarning, match="dim_params are hints"):
        (y,) = sess.run(None, {"c": np.array(True), "x": x, "a": a})
    assert y == 3.0
    split = _split_program(sess)
    then_r, else_r = (split.services.subgraph(_branch_of(split, b)) for b in ("then_branch", "else_branch"))
    assert then_r._engine is not None and else_r._engine is None
    (y,) = sess.run(None, {"c": np.array(False), "x": x, "a": a})
    assert y == 10.0 and else_r._engine is not None


def test_with_lazy_subgraphs_an_if_branch_is_compiled_when_first_taken():
    """then: x + a; else: a node of an op nobody registered. With ``lazy_subgraphs=True``,
    runs that take the then branch never compile the else branch; the first run that takes
    it reports the op, and the session stays usable."""
    sess = dynashape.InferenceSession(_if_with_an_unknown_op_in_else().SerializeToString(), lazy_subgraphs=True)
    x, a = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2, 3], np.float32)
    for n in (2, 1):
        (y,) = sess.run(None, {"c": np.array(True), "x": x[:n], "a": a})
        np.testing.assert_array_equal(y, x[:n] + a)
    with pytest.raises(dynashape.UnsupportedOperatorError, match="Nope"):
        sess.run(None, {"c": np.array(False), "x": x, "a": a})
    (y,) = sess.run(None, {"c": np.array(True), "x": x, "a": a})     # the session stays usable
    np.testing.assert_array_equal(y, x + a)


def test_an_if_prepared_once_for_every_shape_without_walking_its_branches(monkeypatch):
    """The If kernel's prepared value keeps its branches (and so its node and their graphs): it is
    static (made once per program, reused by every run), and classifying it does not walk
    the imported graphs (model.Node and model.Graph are opaque to tracing: a merged
    decoder's 600-node branches cost ~30 ms a program when they were walked)."""
    from dynashape import node as node_mod
    from dynashape.model import Graph, Node
    from dynashape.symbolic import sym

    calls = []
    real = node_mod.contains_expr

    def counting(value, depth=0):
        calls.append(type(value).__name__)
        return real(value, depth)
    monkeypatch.setattr(node_mod, "contains_expr", counting)
    sess = dynashape.InferenceSession(if_model().SerializeToString())
    (seg,) = [seg for seg in sess.program.segments if seg.binding]
    (node,) = seg.binding
    prepared = node.prepared
    assert [type(p).__name__ for p in prepared] == ["NodeSubgraph"] * 2    # static: made once, reused per run
    if_node = sess.program.pg.nodes[node.index].node
    assert [p.runner.graph for p in prepared] == [if_node.attrs["then_branch"], if_node.attrs["else_branch"]]
    assert "Graph" not in calls and "ValueInfo" not in calls
    # a symbolic dim inside an imported node's attributes is never taken for a traced one
    g = Graph("g", [Node("n", "Identity", "", ("a",), ("b",), {"x": sym("n")})], [], [], {}, {})
    assert real(g) is False and real(g.nodes[0]) is False
    a = np.ones(3, np.float32)
    for n, flag in [(2, True), (3, False), (1, True)]:
        x = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
        (y,) = sess.run(None, {"c": np.array(flag), "x": x, "a": a})
        np.testing.assert_array_equal(y, x + a if flag else np.concatenate([x, x]))


def test_if_cond_computed_from_data_and_one_element_cond():
    """cond = ReduceSum(x) > 0 (shape (1,)), then a downstream op reads the If output."""
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", F, ["n", 2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", F, ["n", 2])])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        const("zero", np.float32(0)),
        helper.make_node("Greater", ["s", "zero"], ["c0"]),
        const("one", np.array([1], np.int64)),
        helper.make_node("Reshape", ["c0", "one"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Mul", ["y", "y"], ["z"]),
    ]
    m = model(nodes, [vi("x", F, ["n", 2])], [vi("z", F, ["n", 2])])
    for x in (np.array([[1, -2], [3, 4]], np.float32), np.array([[-1, -2], [3, -4]], np.float32)):
        check(m, {"x": x})


def test_if_nested_if_reads_main_graph_value():
    inner_then = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["it"])], "it", [], [vi("it", F, None)])
    inner_else = helper.make_graph([helper.make_node("Identity", ["x"], ["ie"])], "ie", [], [vi("ie", F, None)])
    outer_then = helper.make_graph(
        [helper.make_node("If", ["c2"], ["o"], then_branch=inner_then, else_branch=inner_else)],
        "ot", [], [vi("o", F, None)])
    outer_else = helper.make_graph([helper.make_node("Neg", ["x"], ["oe"])], "oe", [], [vi("oe", F, None)])
    nodes = [helper.make_node("If", ["c1"], ["y"], then_branch=outer_then, else_branch=outer_else)]
    m = model(nodes, [vi("c1", B, []), vi("c2", B, []), vi("x", F, [2])], [vi("y", F, None)])
    x = np.array([3, -2], np.float32)
    for c1 in (True, False):
        for c2 in (True, False):
            check(m, {"c1": np.array(c1), "c2": np.array(c2), "x": x})


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.int8, np.uint64, np.bool_, np.float64])
def test_if_passes_any_dtype(dtype):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "t", [], [vi("t", elem, [2])])
    else_g = helper.make_graph([helper.make_node("Identity", ["w"], ["e"])], "e", [], [vi("e", elem, [2])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    m = model(nodes, [vi("c", B, [1]), vi("x", elem, [2]), vi("w", elem, [2])], [vi("y", elem, [2])])
    x = np.array([1, 0], dtype=dtype)
    w = np.array([0, 1], dtype=dtype)
    for flag in (True, False):
        (y,) = run(m, {"c": np.array([flag]), "x": x, "w": w})
        assert y.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(y, x if flag else w)


def test_if_string_outputs():
    then_g = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "t", [], [vi("t", TP.STRING, [2])])
    else_g = helper.make_graph([const("e", np.array(["no", "pe"], dtype=object))], "e", [],
                               [vi("e", TP.STRING, [2])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    m = model(nodes, [vi("c", B, []), vi("s", TP.STRING, [2])], [vi("y", TP.STRING, [2])])
    s = np.array(["a", "b"], dtype=object)
    assert run(m, {"c": np.array(True), "s": s})[0].tolist() == ["a", "b"]
    assert run(m, {"c": np.array(False), "s": s})[0].tolist() == ["no", "pe"]


def test_if_branch_returns_constant_and_outer_value_directly():
    then_g = helper.make_graph([], "t", [], [vi("x", F, [2])])  # the outer value itself
    else_g = helper.make_graph([const("k", np.array([7, 8], np.float32))], "e", [], [vi("k", F, [2])])
    nodes = [helper.make_node("Relu", ["x0"], ["x"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Add", ["y", "x"], ["z"])]
    m = model(nodes, [vi("c", B, []), vi("x0", F, [2])], [vi("z", F, [2]), vi("y", F, [2])])
    x = np.array([1, -1], np.float32)
    for flag in (True, False):  # onnxruntime refuses a branch returning an outer value directly
        z, y = run(m, {"c": np.array(flag), "x0": x})
        want = ReferenceEvaluator(m).run(None, {"c": np.array(flag), "x0": x})
        np.testing.assert_array_equal(z, want[0])
        np.testing.assert_array_equal(y, want[1])


def test_if_infer_uses_known_cond_and_merges_branches():
    then_g = helper.make_graph([], "t", [], [vi("a", F, [2, 3])])
    else_g = helper.make_graph([], "e", [], [vi("b", F, [2, 4])])
    g_then, g_else = (dynashape.model._graph(g) for g in (then_g, else_g))
    attrs = {"then_branch": g_then, "else_branch": g_else}
    shapes, dtypes = infer_node("If", [np.array(True)], attrs)
    assert shapes == [(2, 3)] and dtypes == [np.float32]
    shapes, _ = infer_node("If", [np.array([False])], attrs)
    assert shapes == [(2, 4)]


def test_if_errors():
    then_g = helper.make_graph([], "t", [], [vi("x", F, [2]), vi("x", F, [2])])
    else_g = helper.make_graph([], "e", [], [vi("x", F, [2])])
    m = model([helper.make_node("If", ["c"], ["y", "y2"], then_branch=then_g, else_branch=else_g)],
              [vi("c", B, []), vi("x", F, [2])], [vi("y", F, None), vi("y2", F, None)])
    with pytest.raises(dynashape.ShapeInferenceError, match="else_branch has 1 outputs, expected 2"):
        run(m, {"c": np.array(True), "x": np.ones(2, np.float32)})
    m = if_model()
    m.graph.input[0].type.tensor_type.shape.dim.add().dim_value = 2
    with pytest.raises(dynashape.ShapeInferenceError, match="cond must hold exactly one element"):
        run(m, {"c": np.array([True, False]), "x": np.ones((1, 3), np.float32), "a": np.ones(3, np.float32)})
    then_i = helper.make_graph([], "t", [], [vi("x", TP.INT32, [2])])
    m = model([helper.make_node("If", ["c"], ["y"], then_branch=then_i, else_branch=else_g)],
              [vi("c", B, []), vi("x", F, [2])], [vi("y", F, None)])
    with pytest.raises(dynashape.ShapeInferenceError, match="must have one dtype"):
        run(m, {"c": np.array(True), "x": np.ones(2, np.float32)})


# Loop --------------------------------------------------------------------------------

def loop_body_accumulate(with_if=False, opset=17):
    """body(i, cond, acc) -> (cond, acc + x[i] (or -x[i] inside an If when i is odd), acc * 1)."""
    nodes = [
        const("one", np.array([1], np.int64)),
        helper.make_node("Unsqueeze", ["i", "zero_axis"], ["i1"]) if opset >= 13
        else helper.make_node("Unsqueeze", ["i"], ["i1"], axes=[0]),
        helper.make_node("Add", ["i1", "one"], ["i2"]),
        helper.make_node("Slice", ["x", "i1", "i2"], ["xi"]),
    ]
    if with_if:
        then_g = helper.make_graph([helper.make_node("Neg", ["xi"], ["nx"])], "t", [], [vi("nx", F, None)])
        else_g = helper.make_graph([helper.make_node("Identity", ["xi"], ["px"])], "e", [], [vi("px", F, None)])
        nodes += [
            const("two", np.array(2, np.int64)),
            helper.make_node("Mod", ["i", "two"], ["r"]),
            helper.make_node("Cast", ["r"], ["odd"], to=B),
            helper.make_node("If", ["odd"], ["term"], then_branch=then_g, else_branch=else_g),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["xi"], ["term"]))
    nodes += [helper.make_node("Add", ["acc", "term"], ["acc_out"]),
              helper.make_node("Identity", ["cond"], ["cond_out"]),
              helper.make_node("Identity", ["acc_out"], ["scan_out"])]
    return helper.make_graph(nodes, "body", [vi("i", I64, []), vi("cond", B, []), vi("acc", F, [1])],
                             [vi("cond_out", B, []), vi("acc_out", F, [1]), vi("scan_out", F, [1])])


def loop_model(opset=17, with_if=False):
    nodes = [const("zero_axis", np.array([0], np.int64)),
             helper.make_node("Loop", ["M", "c", "acc0"], ["acc", "scan"], body=loop_body_accumulate(with_if, opset))]
    return model(nodes, [vi("M", I64, []), vi("c", B, []), vi("acc0", F, [1]), vi("x", F, ["n"])],
                 [vi("acc", F, None), vi("scan", F, None)], opset)


@pytest.mark.parametrize("opset", [11, 13, 16, 19, 21, 23, 25])
def test_loop_outer_scope_and_scan_output(opset):
    x = np.arange(1, 6, dtype=np.float32)
    feeds = {"M": np.array(5, np.int64), "c": np.array(True), "acc0": np.zeros(1, np.float32), "x": x}
    acc, scan = check(loop_model(opset), feeds, opset)
    assert scan.shape == (5, 1) and acc[0] == 15


def test_loop_with_nested_if():
    x = np.arange(1, 7, dtype=np.float32)
    feeds = {"M": np.array(6, np.int64), "c": np.array(True), "acc0": np.zeros(1, np.float32), "x": x}
    acc, _scan = check(loop_model(with_if=True), feeds)
    assert acc[0] == 1 - 2 + 3 - 4 + 5 - 6


@pytest.mark.parametrize("allocator", ["pool", "naive"])
def test_loop_zero_trips(allocator):
    feeds = {"M": np.array(0, np.int64), "c": np.array(True), "acc0": np.full(1, 4, np.float32),
             "x": np.ones(3, np.float32)}
    acc, scan = run(loop_model(), feeds, allocator)
    np.testing.assert_array_equal(acc, [4])
    assert scan.shape == (0, 1) and scan.dtype == np.float32
    feeds.update(M=np.array(3, np.int64), c=np.array(False))
    acc, scan = run(loop_model(), feeds, allocator)
    np.testing.assert_array_equal(acc, [4])
    assert scan.shape == (0, 1)


def test_loop_zero_trips_scan_shape_from_body_inference():
    """The body declares no shapes: an empty scan output takes its dims from shape inference."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["co"]),
         helper.make_node("Concat", ["v", "v"], ["s"], axis=1)],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("v", F, None)],
        [vi("co", B, None), vi("v", F, None), vi("s", F, None)])
    m = model([helper.make_node("Loop", ["M", "", "v0"], ["v", "s"], body=body)],
              [vi("M", I64, []), vi("v0", F, [2, 3])], [vi("v", F, None), vi("s", F, None)])
    v0 = np.ones((2, 3), np.float32)
    v, s = run(m, {"M": np.array(0, np.int64), "v0": v0})
    np.testing.assert_array_equal(v, v0)
    assert s.shape == (0, 2, 6)
    _v, s = run(m, {"M": np.array(2, np.int64), "v0": v0})
    assert s.shape == (2, 2, 6)


def test_loop_carried_value_grows_each_iteration():
    """v = concat(v, [i]); shapes change every iteration (M given, cond absent)."""
    body = helper.make_graph(
        [const("ax", np.array([0], np.int64)),
         helper.make_node("Unsqueeze", ["i", "ax"], ["i1"]),
         helper.make_node("Concat", ["v", "i1"], ["vo"], axis=0),
         helper.make_node("Identity", ["cond"], ["co"]),
         helper.make_node("ReduceSum", ["vo"], ["s"], keepdims=0)],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("v", I64, [None])],
        [vi("co", B, []), vi("vo", I64, [None]), vi("s", I64, [])])
    m = model([helper.make_node("Loop", ["M", "", "v0"], ["v", "s"], body=body)],
              [vi("M", I64, []), vi("v0", I64, [None])], [vi("v", I64, None), vi("s", I64, None)])
    feeds = {"M": np.array(4, np.int64), "v0": np.array([9], np.int64)}
    v, s = check(m, feeds)
    np.testing.assert_array_equal(v, [9, 0, 1, 2, 3])
    np.testing.assert_array_equal(s, [9, 10, 12, 15])


def test_loop_while_cond_without_trip_count_and_for_without_cond():
    """M absent: runs while the body's cond (i + 1 < 3) holds; cond absent: the body's cond is ignored."""
    body = helper.make_graph(
        [const("one", np.array(1, np.int64)), const("three", np.array(3, np.int64)),
         helper.make_node("Add", ["i", "one"], ["n"]),
         helper.make_node("Less", ["n", "three"], ["co"]),
         helper.make_node("Mul", ["v", "two"], ["vo"])],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("v", F, [2])],
        [vi("co", B, []), vi("vo", F, [2])])
    inputs = [vi("c", B, []), vi("v0", F, [2]), vi("two", F, [])]
    m = model([helper.make_node("Loop", ["", "c", "v0"], ["v"], body=body)], inputs, [vi("v", F, [2])])
    feeds = {"c": np.array(True), "v0": np.ones(2, np.float32), "two": np.array(2, np.float32)}
    (v,) = check(m, feeds)
    np.testing.assert_array_equal(v, [8, 8])  # iterations i = 0, 1, 2 (cond false after i = 2)
    m = model([helper.make_node("Loop", ["M", "", "v0"], ["v"], body=body)],
              [vi("M", I64, [])] + inputs[1:], [vi("v", F, [2])])
    feeds = {"M": np.array(5, np.int64), "v0": np.ones(2, np.float32), "two": np.array(2, np.float32)}
    (v,) = run(m, feeds)  # the spec's "for loop": onnxruntime stops at the body's cond anyway
    np.testing.assert_array_equal(v, [32, 32])


def test_loop_scan_output_of_changing_shape_fails():
    body = helper.make_graph(
        [const("ax", np.array([0], np.int64)),
         helper.make_node("Unsqueeze", ["i", "ax"], ["i1"]),
         helper.make_node("Concat", ["v", "i1"], ["vo"], axis=0),
         helper.make_node("Identity", ["cond"], ["co"]),
         helper.make_node("Identity", ["vo"], ["s"])],
        "body", [vi("i", I64, []), vi("cond", B, []), vi("v", I64, [None])],
        [vi("co", B, []), vi("vo", I64, [None]), vi("s", I64, [None])])
    m = model([helper.make_node("Loop", ["M", "", "v0"], ["v", "s"], body=body)],
              [vi("M", I64, []), vi("v0", I64, [None])], [vi("v", I64, None), vi("s", I64, None)])
    with pytest.raises(dynashape.ExecutionError, match="scan outputs must keep one shape"):
        run(m, {"M": np.array(3, np.int64), "v0": np.array([1], np.int64)})


def test_loop_errors():
    body = helper.make_graph([helper.make_node("Identity", ["cond"], ["co"])], "body",
                             [vi("i", I64, []), vi("cond", B, [])], [vi("co", B, [])])
    m = model([helper.make_node("Loop", ["M", "", "v0"], ["v"], body=body)],
              [vi("M", I64, []), vi("v0", F, [1])], [vi("v", F, None)])
    with pytest.raises(dynashape.ShapeInferenceError, match="body has 2 inputs, expected 3"):
        run(m, {"M": np.array(1, np.int64), "v0": np.ones(1, np.float32)})
    m = loop_model()
    m.graph.input[0].type.tensor_type.shape.dim.add().dim_value = 2
    feeds = {"M": np.array([1, 2], np.int64), "c": np.array(True), "acc0": np.zeros(1, np.float32),
             "x": np.ones(2, np.float32)}
    with pytest.raises(dynashape.ShapeInferenceError, match="M \\(the trip count\\) must hold exactly one"):
        run(m, feeds)


# Scan --------------------------------------------------------------------------------

def scan_model(opset=11, **attrs):
    """state s (2,), scan x (len, 2) on some axis: s' = s + x_t, outputs y_t = s' and z_t = x_t * 2."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["so"]),
         helper.make_node("Identity", ["so"], ["y"]),
         helper.make_node("Mul", ["xt", "two"], ["z"])],
        "body", [vi("s", F, [2]), vi("xt", F, [2])], [vi("so", F, [2]), vi("y", F, [2]), vi("z", F, [2])])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "y", "z"], body=body, num_scan_inputs=1, **attrs)
    return model([node], [vi("s0", F, [2]), vi("x", F, None), vi("two", F, [])],
                 [vi("s", F, None), vi("y", F, None), vi("z", F, None)], opset)


@pytest.mark.parametrize("opset", [9, 11, 16, 19, 21])
@pytest.mark.parametrize("attrs,xshape", [
    ({}, (4, 2)),
    ({"scan_input_directions": [1], "scan_output_directions": [0, 1]}, (4, 2)),
    ({"scan_input_axes": [1], "scan_output_axes": [1, 0]}, (2, 4)),
    ({"scan_input_axes": [-1], "scan_output_axes": [-1, -2]}, (2, 3)),
    ({}, (0, 2)),
])
def test_scan_axes_directions(opset, attrs, xshape):
    if opset < 11 and any(a < 0 for k, v in attrs.items() if "axes" in k for a in v):
        pytest.skip("negative axes are Scan-11+")
    x = np.arange(np.prod(xshape), dtype=np.float32).reshape(xshape)
    feeds = {"s0": np.array([1, -1], np.float32), "x": x, "two": np.array(2, np.float32)}
    m = scan_model(opset, **attrs)
    if xshape[0] == 0:  # onnxruntime and the reference both refuse a zero-length scan
        s, y, z = run(m, feeds)
        np.testing.assert_array_equal(s, [1, -1])
        assert y.shape == (0, 2) and z.shape == (0, 2)
        return
    check(m, feeds, opset)


def test_scan_two_scan_inputs_and_outer_scope():
    body = helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["ab"]),
         helper.make_node("Add", ["s", "ab"], ["so"]),
         helper.make_node("Add", ["so", "bias"], ["y"])],
        "body", [vi("s", F, [3]), vi("a", F, [3]), vi("b", F, [3])], [vi("so", F, [3]), vi("y", F, [3])])
    node = helper.make_node("Scan", ["s0", "A", "B"], ["s", "y"], body=body, num_scan_inputs=2,
                            scan_input_directions=[0, 1])
    m = model([node], [vi("s0", F, [3]), vi("A", F, ["t", 3]), vi("B", F, ["t", 3]), vi("bias", F, [3])],
              [vi("s", F, None), vi("y", F, None)])
    rng = np.random.default_rng(0)
    feeds = {"s0": np.zeros(3, np.float32), "A": rng.random((5, 3), np.float32),
             "B": rng.random((5, 3), np.float32), "bias": np.ones(3, np.float32)}
    check(m, feeds)


def test_scan8_batch_and_sequence_lens():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["so"]), helper.make_node("Identity", ["so"], ["y"])],
        "body", [vi("s", F, [2]), vi("xt", F, [2])], [vi("so", F, [2]), vi("y", F, [2])])
    for directions in ([0], [1]):
        node = helper.make_node("Scan", ["lens", "s0", "x"], ["s", "y"], body=body, num_scan_inputs=1,
                                directions=directions)
        m = model([node], [vi("lens", I64, [2]), vi("s0", F, [2, 2]), vi("x", F, [2, 3, 2])],
                  [vi("s", F, None), vi("y", F, None)], opset=8)
        x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
        feeds = {"lens": np.array([3, 2], np.int64), "s0": np.zeros((2, 2), np.float32), "x": x}
        check(m, feeds, opset=8)
        node = helper.make_node("Scan", ["", "s0", "x"], ["s", "y"], body=body, num_scan_inputs=1,
                                directions=directions)
        m = model([node], [vi("s0", F, [2, 2]), vi("x", F, [2, 3, 2])],
                  [vi("s", F, None), vi("y", F, None)], opset=8)
        check(m, {"s0": feeds["s0"], "x": x}, opset=8)


def test_scan_errors():
    m = scan_model()
    feeds = {"s0": np.zeros(2, np.float32), "x": np.ones((3, 2), np.float32), "two": np.array(2, np.float32)}
    m.graph.node[0].attribute[1].i = 3  # num_scan_inputs
    with pytest.raises(dynashape.ShapeInferenceError, match="num_scan_inputs=3 must be in"):
        run(m, feeds)
    m = scan_model(scan_input_axes=[2])
    with pytest.raises(dynashape.ShapeInferenceError, match="scan_input_axes"):
        run(m, feeds)
    m = scan_model(scan_input_directions=[2])
    with pytest.raises(dynashape.ShapeInferenceError, match="0 \\(forward\\) or 1 \\(reverse\\)"):
        run(m, feeds)
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "a"], ["so"])],
        "body", [vi("s", F, [2]), vi("a", F, [2]), vi("b", F, [2])], [vi("so", F, [2])])
    node = helper.make_node("Scan", ["s0", "A", "B"], ["s"], body=body, num_scan_inputs=2)
    m = model([node], [vi("s0", F, [2]), vi("A", F, None), vi("B", F, None)], [vi("s", F, None)])
    with pytest.raises(dynashape.ShapeInferenceError, match="different sequence lengths 3 and 4"):
        run(m, {"s0": np.zeros(2, np.float32), "A": np.ones((3, 2), np.float32), "B": np.ones((4, 2), np.float32)})


def test_scan8_empty_batch_and_zero_length():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["so"]), helper.make_node("Identity", ["so"], ["y"])],
        "body", [vi("s", F, [2]), vi("xt", F, [2])], [vi("so", F, [2]), vi("y", F, [2])])
    node = helper.make_node("Scan", ["", "s0", "x"], ["s", "y"], body=body, num_scan_inputs=1)
    m = model([node], [vi("s0", F, ["b", 2]), vi("x", F, ["b", "t", 2])], [vi("s", F, None), vi("y", F, None)],
              opset=8)
    s, y = run(m, {"s0": np.zeros((0, 2), np.float32), "x": np.zeros((0, 3, 2), np.float32)})
    assert s.shape == (0, 2) and y.shape == (0, 3, 2)
    s0 = np.array([[1, 2]], np.float32)
    s, y = run(m, {"s0": s0, "x": np.zeros((1, 0, 2), np.float32)})
    np.testing.assert_array_equal(s, s0)
    assert y.shape == (1, 0, 2)
