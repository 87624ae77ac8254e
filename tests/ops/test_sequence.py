"""Sequence and optional values through whole sessions (what the ONNX node tests do not
cover): sequence/optional graph inputs and outputs through ``run()`` (lists in and out,
None for an empty optional), If/Loop carrying sequences, SplitToSequence on symbolic shapes
through changing shapes on ONE session under both allocators, and feed errors naming the
input. Compared with ONNX Runtime.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import dynashape
from dynashape.dtypes import OptionalType, SequenceType
from dynashape.errors import ExecutionError, InputDtypeMismatch, InvalidFeedError, ShapeInferenceError
from tests.conftest import ort_run, ort_session

ALLOCATORS = ("pool", "naive")
F32 = np.float32


def _seq(elem=T.FLOAT, shape=None):
    return h.make_sequence_type_proto(h.make_tensor_type_proto(elem, shape))


def _opt(inner):
    return h.make_optional_type_proto(inner)


def _model(nodes, inputs, outputs, opset=17):
    """inputs/outputs: (name, TypeProto) or (name, elem type, shape) entries."""
    def vi(x):
        return h.make_value_info(x[0], x[1]) if len(x) == 2 else h.make_tensor_value_info(*x)
    graph = h.make_graph(nodes, "g", [vi(x) for x in inputs], [vi(x) for x in outputs])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def _same(got, want, where="output"):
    """Equal values: lists element by element, None as None, arrays in dtype, shape, values."""
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, type(got), got, want)
        for k, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{k}]")
    elif want is None:
        assert got is None, (where, got)
    else:
        assert isinstance(got, np.ndarray), (where, type(got))
        assert got.dtype == want.dtype and got.shape == want.shape, (where, got.dtype, got.shape, want.dtype,
                                                                     want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=where)


def _check_runs(model, feeds_list, allocator="pool", validate=False):
    sess = dynashape.InferenceSession(model, allocator=allocator, validate_memory=validate)
    for k, feeds in enumerate(feeds_list):
        got = sess.run(None, feeds)
        want = ort_run(model, feeds)
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"run {k} output {i}")
    return sess


def _rng():
    return np.random.default_rng(0)


# --- sequence graph inputs and outputs --------------------------------------------------------

def _seq_io_model():
    """seq input -> its length, its element 1, its elements concatenated, the seq itself and
    the seq with a tensor inserted in front (lists out)."""
    nodes = [h.make_node("SequenceLength", ["s"], ["n"]),
             h.make_node("SequenceAt", ["s", "one"], ["at"]),
             h.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0),
             h.make_node("Identity", ["s"], ["same"]),
             h.make_node("Add", ["x", "x"], ["x2"]),
             h.make_node("SequenceInsert", ["s", "x2", "zero"], ["ins"])]
    graph = h.make_graph(nodes, "g", [h.make_value_info("s", _seq(T.FLOAT, ["N", 3])),
                                      h.make_tensor_value_info("x", T.FLOAT, ["M", 3])],
                         [h.make_tensor_value_info("n", T.INT64, []), h.make_tensor_value_info("at", T.FLOAT, ["A", 3]),
                          h.make_tensor_value_info("cat", T.FLOAT, ["C", 3]), h.make_value_info("same", _seq()),
                          h.make_value_info("ins", _seq())],
                         [h.make_tensor(n, T.INT64, [], [v]) for n, v in (("one", 1), ("zero", 0))])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_sequence_input_and_outputs_through_changing_lengths(allocator):
    rng = _rng()
    feeds = []
    for lengths, m in (([2, 3], 1), ([1, 4, 2, 5], 2), ([3, 1], 4), ([2, 3], 1)):
        feeds.append({"s": [rng.standard_normal((n, 3)).astype(F32) for n in lengths],
                      "x": rng.standard_normal((m, 3)).astype(F32)})
    sess = _check_runs(_seq_io_model(), feeds, allocator)
    st = sess.symbolic
    slot = sess.graph.slot
    assert st.dtypes[slot["s"]] == SequenceType(np.dtype(F32)) and st.shapes[slot["s"]] is None
    assert st.shapes[slot["n"]] == () and st.dtypes[slot["ins"]] == SequenceType(np.dtype(F32))


def test_sequence_outputs_are_owned_copies():
    """Outputs never alias the feeds, and a later run never changes an earlier run's lists
    (the Add result put into the sequence lives in the arena)."""
    sess = dynashape.InferenceSession(_seq_io_model())
    s = [np.ones((2, 3), F32), np.zeros((1, 3), F32)]
    first = sess.run(None, {"s": s, "x": np.full((1, 3), 2, F32)})
    kept = [np.array(a, copy=True) for a in first[4]]
    assert all(not np.shares_memory(a, b) for a in first[3] for b in s)   # Identity of a feed: copied
    sess.run(None, {"s": s, "x": np.full((1, 3), 7, F32)})
    for a, b in zip(first[4], kept):
        np.testing.assert_array_equal(a, b)


def test_node_args_report_container_types_as_onnxruntime():
    model = _model([h.make_node("Identity", ["s"], ["y"]), h.make_node("Identity", ["o"], ["z"]),
                    h.make_node("Identity", ["os"], ["w"])],
                   [("s", _seq(T.INT64, [2])), ("o", _opt(h.make_tensor_type_proto(T.FLOAT, ["N", 3]))),
                    ("os", _opt(_seq(T.FLOAT)))],
                   [("y", _seq(T.INT64)), ("z", _opt(h.make_tensor_type_proto(T.FLOAT, ["N", 3]))),
                    ("w", _opt(_seq(T.FLOAT)))], opset=18)
    sess = dynashape.InferenceSession(model)
    ort = ort_session(model)
    for ours, theirs in ((sess.get_inputs(), ort.get_inputs()), (sess.get_outputs(), ort.get_outputs())):
        assert [(a.name, a.type, a.shape) for a in ours] == [(a.name, a.type, a.shape) for a in theirs]
    assert [a.type for a in sess.get_inputs()] == ["seq(tensor(int64))", "optional(tensor(float))",
                                                    "optional(seq(tensor(float)))"]
    feeds = {"s": [np.arange(2)], "o": None, "os": [np.ones(2, F32)]}
    got = sess.run(None, feeds)
    _same(got, ort.run(None, feeds))
    assert got[1] is None
    feeds = {"s": [], "o": np.ones((4, 3), F32), "os": None}
    _same(sess.run(None, feeds), ort.run(None, feeds))


# --- optionals ---------------------------------------------------------------------------------

@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_optional_input_none_and_present(allocator):
    ot = _opt(h.make_tensor_type_proto(T.FLOAT, ["N"]))
    model = _model([h.make_node("OptionalHasElement", ["o"], ["has"]), h.make_node("Identity", ["o"], ["same"]),
                    h.make_node("Optional", ["x"], ["wrapped"]),
                    h.make_node("OptionalGetElement", ["wrapped"], ["back"]),
                    h.make_node("Optional", [], ["empty"], type=h.make_tensor_type_proto(T.INT64, None))],
                   [("o", ot), ("x", T.FLOAT, ["K"])],
                   [("has", T.BOOL, []), ("same", ot), ("wrapped", _opt(h.make_tensor_type_proto(T.FLOAT, None))),
                    ("back", T.FLOAT, ["K"]), ("empty", _opt(h.make_tensor_type_proto(T.INT64, None)))], opset=18)
    x = np.arange(3, dtype=F32)
    sess = _check_runs(model, [{"o": None, "x": x}, {"o": np.ones(4, F32), "x": x[:2]},
                               {"o": None, "x": x}, {"o": np.ones(2, F32), "x": x}], allocator)
    out = sess.run(None, {"o": None, "x": x})
    assert out[0].item() is False and out[1] is None and out[4] is None
    assert sess.symbolic.dtypes[sess.graph.slot["empty"]] == OptionalType(np.dtype(np.int64))


def test_optional_get_element_of_empty_optional_is_an_error_naming_the_node():
    ot = _opt(h.make_tensor_type_proto(T.FLOAT, None))
    model = _model([h.make_node("OptionalGetElement", ["o"], ["y"], name="get")], [("o", ot)],
                   [("y", T.FLOAT, None)], opset=18)
    sess = dynashape.InferenceSession(model)
    np.testing.assert_array_equal(sess.run(None, {"o": np.ones(2, F32)})[0], np.ones(2, F32))
    with pytest.raises(ExecutionError, match="OptionalGetElement node 'get'.*optional input is empty"):
        sess.run(None, {"o": None})


# --- ops against onnxruntime ----------------------------------------------------------------------

@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_construct_insert_erase_at_positions(allocator):
    model = _model([h.make_node("Relu", ["a"], ["ra"]),
                    h.make_node("SequenceConstruct", ["ra", "b", "a"], ["s"]),
                    h.make_node("SequenceInsert", ["s", "b", "p"], ["s2"]),
                    h.make_node("SequenceErase", ["s2", "q"], ["s3"]),
                    h.make_node("SequenceErase", ["s3"], ["s4"]),
                    h.make_node("SequenceAt", ["s4", "q"], ["at"])],
                   [("a", T.FLOAT, ["N", 2]), ("b", T.FLOAT, ["M", 2]), ("p", T.INT64, []), ("q", T.INT32, [])],
                   [("s2", _seq()), ("s4", _seq()), ("at", T.FLOAT, None)])
    rng = _rng()
    feeds = []
    for n, m, p, q in ((2, 3, 0, -1), (1, 1, -2, 0), (3, 2, 3, 1), (2, 3, -3, -2)):
        feeds.append({"a": rng.standard_normal((n, 2)).astype(F32), "b": rng.standard_normal((m, 2)).astype(F32),
                      "p": np.array(p, np.int64), "q": np.array(q, np.int32)})
    _check_runs(model, feeds, allocator)


@pytest.mark.parametrize("new_axis, axis", [(0, 0), (0, 1), (0, -1), (1, 0), (1, 2), (1, -1), (1, -3)])
def test_concat_from_sequence_axes(new_axis, axis):
    model = _model([h.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=new_axis)],
                   [("s", _seq(T.FLOAT, None))], [("y", T.FLOAT, None)])
    rng = _rng()
    shape = (2, 3)
    feeds = [{"s": [rng.standard_normal(shape).astype(F32) for _ in range(k)]} for k in (1, 3, 2)]
    _check_runs(model, feeds)


@pytest.mark.parametrize("allocator", ALLOCATORS)
@pytest.mark.parametrize("split, attrs", [
    (None, {"axis": 1}), (None, {"axis": -1, "keepdims": 0}), (np.array(2, np.int64), {"axis": 1}),
    (np.array(1, np.int64), {"axis": 0, "keepdims": 0}), (np.array(3, np.int32), {"axis": -2}),
])
def test_split_to_sequence_on_symbolic_shapes(allocator, split, attrs):
    """One session through changing (batch, length): the parts and their count change."""
    names, inits = ["x"], []
    if split is not None:
        names.append("split")
        inits.append(h.make_tensor("split", h.np_dtype_to_tensor_dtype(split.dtype), split.shape,
                                   split.reshape(-1).tolist()))
    graph = h.make_graph([h.make_node("SplitToSequence", names, ["s"], **attrs),
                          h.make_node("SequenceLength", ["s"], ["n"])], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, ["B", "L"])],
                         [h.make_value_info("s", _seq()), h.make_tensor_value_info("n", T.INT64, [])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    rng = _rng()
    feeds = [{"x": rng.standard_normal(s).astype(F32)} for s in ((1, 4), (3, 7), (2, 1), (1, 4))]
    _check_runs(model, feeds, allocator)   # split=1, keepdims=0: the axis is dropped, as onnxruntime does


def test_split_to_sequence_with_split_lengths_and_bad_ones():
    model = _model([h.make_node("SplitToSequence", ["x", "split"], ["s"], axis=0, name="split_node")],
                   [("x", T.FLOAT, ["N", 2]), ("split", T.INT64, ["K"])], [("s", _seq())])
    x = np.arange(12, dtype=F32).reshape(6, 2)
    _check_runs(model, [{"x": x, "split": np.array([1, 2, 3], np.int64)},
                        {"x": x[:4], "split": np.array([4], np.int64)}])
    sess = dynashape.InferenceSession(model)
    with pytest.raises(ExecutionError, match="split_node.*sum to 5, the input has 6 along axis 0"):
        sess.run(None, {"x": x, "split": np.array([2, 3], np.int64)})
    with pytest.raises(ExecutionError, match=r"split_node.*split must hold lengths >= 0, got \[-1, 7\]"):
        sess.run(None, {"x": x, "split": np.array([-1, 7], np.int64)})
    # zero lengths are empty parts (as onnxruntime and the ONNX test test_sequence_model8)
    _check_runs(model, [{"x": x, "split": np.array([0, 6, 0], np.int64)}, {"x": x[:0], "split": np.zeros(2, np.int64)}])


def test_sequence_map_with_a_tensor_input_and_outer_value():
    """SequenceMap's body reads each element, a tensor input and an outer-scope value."""
    body = h.make_graph([h.make_node("Add", ["e", "t"], ["u"]), h.make_node("Mul", ["u", "w"], ["o1"]),
                         h.make_node("Shape", ["e"], ["o2"])], "body",
                        [h.make_tensor_value_info("e", T.FLOAT, None), h.make_tensor_value_info("t", T.FLOAT, None)],
                        [h.make_tensor_value_info("o1", T.FLOAT, None), h.make_tensor_value_info("o2", T.INT64, None)])
    model = _model([h.make_node("Relu", ["x"], ["w"]),
                    h.make_node("SequenceMap", ["s", "t"], ["y1", "y2"], body=body)],
                   [("s", _seq()), ("t", T.FLOAT, [1]), ("x", T.FLOAT, [1])],
                   [("y1", _seq()), ("y2", _seq(T.INT64))])
    rng = _rng()
    feeds = [{"s": [rng.standard_normal((k, 2)).astype(F32) for k in ks], "t": np.ones(1, F32),
              "x": np.full(1, 2, F32)} for ks in ((1, 3), (2,), ())]
    sess = dynashape.InferenceSession(model)
    for f in feeds:
        got = sess.run(None, f)
        want = [[(e + 1) * 2 for e in f["s"]], [np.array(e.shape, np.int64) for e in f["s"]]]
        _same(got, want)


# --- control flow carrying sequences -----------------------------------------------------------

@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_if_branches_return_sequences_and_optionals(allocator):
    then_g = h.make_graph([h.make_node("SplitToSequence", ["x"], ["ts"], axis=0),
                           h.make_node("Optional", ["ts"], ["to"])], "then", [],
                          [h.make_value_info("ts", _seq()), h.make_value_info("to", _opt(_seq()))])
    else_g = h.make_graph([h.make_node("SequenceEmpty", [], ["es"]),
                           h.make_node("Optional", [], ["eo"], type=_seq())], "else", [],
                          [h.make_value_info("es", _seq()), h.make_value_info("eo", _opt(_seq()))])
    model = _model([h.make_node("If", ["c"], ["s", "o"], then_branch=then_g, else_branch=else_g),
                    h.make_node("SequenceLength", ["s"], ["n"])],
                   [("c", T.BOOL, []), ("x", T.FLOAT, ["N", 2])],
                   [("s", _seq()), ("o", _opt(_seq())), ("n", T.INT64, [])], opset=16)
    x = np.arange(6, dtype=F32).reshape(3, 2)
    sess = _check_runs(model, [{"c": np.array(True), "x": x}, {"c": np.array(False), "x": x},
                               {"c": np.array(True), "x": x[:1]}], allocator)
    out = sess.run(None, {"c": np.array(False), "x": x})
    assert out[0] == [] and out[1] is None


def _loop_model(concat: bool = True):
    """Loop carrying a sequence: each iteration inserts (i+1) * x and outputs the length as a
    scan output; then the sequence is concatenated (an empty one cannot be)."""
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]),
         h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
         h.make_node("Add", ["fi", "one"], ["k"]),
         h.make_node("Mul", ["x", "k"], ["xk"]),
         h.make_node("SequenceInsert", ["seq_in", "xk"], ["seq_out"]),
         h.make_node("SequenceLength", ["seq_out"], ["len"])],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_value_info("seq_in", _seq())],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_value_info("seq_out", _seq()),
         h.make_tensor_value_info("len", T.INT64, [])],
        [h.make_tensor("one", T.FLOAT, [], [1.0])])
    return _model([h.make_node("SequenceEmpty", [], ["empty"]),
                   h.make_node("SplitToSequence", ["x"], ["init"], axis=0),
                   h.make_node("And", ["from_x", "c"], ["cc"]),
                   h.make_node("Loop", ["m", "cc", "init"], ["final", "lens"], body=body),
                   h.make_node("Loop", ["m", "", "empty"], ["final2", "lens2"], body=body)]
                  + [h.make_node("ConcatFromSequence", ["final2"], ["cat"], axis=0, new_axis=1)] * concat,
                  [("m", T.INT64, []), ("c", T.BOOL, []), ("from_x", T.BOOL, []), ("x", T.FLOAT, ["N", 2])],
                  [("final", _seq()), ("lens", T.INT64, ["T"]), ("final2", _seq())]
                  + [("cat", T.FLOAT, None)] * concat, opset=16)


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_loop_carries_sequences(allocator):
    x = np.arange(6, dtype=F32).reshape(3, 2)
    feeds = [{"m": np.array(m, np.int64), "c": np.array(True), "from_x": np.array(True), "x": x[:n]}
             for m, n in ((3, 3), (1, 2), (4, 1), (3, 3))]
    _check_runs(_loop_model(), feeds, allocator)
    # no trip: the initial sequences come back, the scan output is empty; then a trip again
    zero = {"m": np.array(0, np.int64), "c": np.array(True), "from_x": np.array(True), "x": x}
    sess = _check_runs(_loop_model(concat=False), [zero, feeds[0], zero], allocator)
    _same(sess.run(None, zero), [list(x[:, None, :]), np.zeros(0, np.int64), []])
    _same(sess.run(None, {**zero, "c": np.array(False), "m": np.array(5, np.int64)})[:2],
          [list(x[:, None, :]), np.zeros(0, np.int64)])


def test_loop_carries_sequences_in_validation_mode():
    x = np.arange(6, dtype=F32).reshape(3, 2)
    feeds = [{"m": np.array(m, np.int64), "c": np.array(True), "from_x": np.array(True), "x": x[:n]}
             for m, n in ((2, 3), (3, 1))]
    for allocator in ALLOCATORS:
        _check_runs(_loop_model(), feeds, allocator, validate=True)


# --- feeds ---------------------------------------------------------------------------------------

def test_wrong_sequence_feeds_name_the_input():
    sess = dynashape.InferenceSession(_seq_io_model())
    x = np.ones((1, 3), F32)
    with pytest.raises(InputDtypeMismatch, match=r"input 's' element 1: expected tensor\(float\) \(numpy float32\), "
                                                 r"got ndarray of numpy int64"):
        sess.run(None, {"s": [np.ones((1, 3), F32), np.ones((1, 3), np.int64)], "x": x})
    with pytest.raises(InvalidFeedError, match=r"input 's': expected seq\(tensor\(float\)\) \(a list of arrays\), "
                                               "got a ndarray"):
        sess.run(None, {"s": np.ones((2, 3), F32), "x": x})
    with pytest.raises(InvalidFeedError, match=r"input 's': expected seq\(tensor\(float\)\) .*got None"):
        sess.run(None, {"s": None, "x": x})
    # lists of numbers become elements of the declared type; a tuple is a sequence too
    got = sess.run(["n", "cat"], {"s": ([[1, 2, 3]], [[4.0, 5, 6]]), "x": x})
    assert got[0] == 2 and got[1].dtype == F32
    # a failed run leaves the session as it was
    assert sess.run(["n"], {"s": [np.ones((1, 3), F32)] * 2, "x": x})[0] == 2


def test_wrong_optional_feed_names_the_input():
    ot = _opt(h.make_tensor_type_proto(T.FLOAT, ["N"]))
    sess = dynashape.InferenceSession(_model([h.make_node("Identity", ["o"], ["y"])], [("o", ot)], [("y", ot)],
                                             opset=18))
    with pytest.raises(InputDtypeMismatch, match=r"input 'o': expected tensor\(float\)"):
        sess.run(None, {"o": np.ones(2, np.int64)})
    with pytest.raises(dynashape.InputRankMismatch, match="input 'o': expected rank 1"):
        sess.run(None, {"o": np.ones((2, 2), F32)})
    with pytest.raises(InvalidFeedError, match="input 'o'.*got a list of arrays"):
        sess.run(None, {"o": [np.ones(2, F32)]})
    assert sess.run(None, {"o": None}) == [None]


def test_bad_positions_and_bad_concats_name_the_node():
    at = dynashape.InferenceSession(_model([h.make_node("SequenceAt", ["s", "p"], ["y"], name="at")],
                                           [("s", _seq()), ("p", T.INT64, [])], [("y", T.FLOAT, None)]))
    with pytest.raises(ShapeInferenceError, match=r"SequenceAt node 'at': position 2 is out of range \[-2, 1\]"):
        at.run(None, {"s": [np.ones(1, F32)] * 2, "p": np.array(2, np.int64)})
    cat = dynashape.InferenceSession(_model([h.make_node("ConcatFromSequence", ["s"], ["z"], axis=0, name="cat")],
                                            [("s", _seq())], [("z", T.FLOAT, None)]))
    with pytest.raises(ShapeInferenceError, match="node 'cat': input_sequence is empty"):
        cat.run(None, {"s": []})
    with pytest.raises(ShapeInferenceError, match="node 'cat': element 1 has shape"):
        cat.run(None, {"s": [np.ones((1, 2), F32), np.ones((1, 3), F32)]})
    bad_axis = dynashape.InferenceSession(_model([h.make_node("ConcatFromSequence", ["s"], ["z"], axis=2,
                                                              name="cat")], [("s", _seq())], [("z", T.FLOAT, None)]))
    with pytest.raises(ShapeInferenceError, match="node 'cat': axis 2 is out of range for rank 2"):
        bad_axis.run(None, {"s": [np.ones((1, 2), F32)]})


def test_backend_takes_and_returns_lists():
    from dynashape import backend

    rep = backend.prepare(_seq_io_model())
    s = [np.ones((2, 3), F32), np.full((1, 3), 2, F32)]
    out = rep.run([s, np.ones((1, 3), F32)])
    assert out[0] == 2 and isinstance(out[3], list) and isinstance(out[4], list) and len(out[4]) == 3
