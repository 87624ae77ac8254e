"""``dynashape.shape_export.infer_shapes`` and ``dynashape infer-shapes``: every tensor of a
model gets its symbolic shape in value_info; onnx's checker and shape inference accept the
result, onnxruntime loads it, and the written dims are the real ones at two input shapes
(onnxruntime running the model with every tensor as an output)."""
from __future__ import annotations

import json

import dynashape
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from dynashape.cli import main
from dynashape.shape_export import infer_shapes
from dynashape.symbolic import evaluate, free_symbols
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from tests.conftest import SHARED, load_shared_module, ort_session


def _hand_model() -> onnx.ModelProto:
    """Concat of a past and a new part (``past + sequence``), a Reshape from computed dims,
    a MatMul, and NonZero (a data-dependent count)."""
    w = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(4, 2), "w")
    minus_one = numpy_helper.from_array(np.array([-1], np.int64), "minus_one")
    nodes = [helper.make_node("Concat", ["past", "x"], ["total"], axis=1),
             helper.make_node("MatMul", ["total", "w"], ["proj"]),
             helper.make_node("Shape", ["proj"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["batch_dim"], axis=0),
             helper.make_node("Concat", ["batch_dim", "minus_one"], ["flat_shape"], axis=0),
             helper.make_node("Reshape", ["proj", "flat_shape"], ["flat"]),
             helper.make_node("NonZero", ["flat"], ["where"]),
             helper.make_node("Relu", ["flat"], ["y"])]
    zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("past", T.FLOAT, ["batch", "past", 4]),
                                           helper.make_tensor_value_info("x", T.FLOAT, ["batch", "sequence", 4])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None),
                               helper.make_tensor_value_info("where", T.INT64, None)], [w, minus_one, zero])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _shapes(model: onnx.ModelProto) -> dict:
    out = {}
    for vi in list(model.graph.value_info) + list(model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = [d.dim_param if d.dim_param else d.dim_value for d in dims]
    return out


def test_every_tensor_gets_its_symbolic_shape_and_onnx_accepts_the_model():
    written, report = infer_shapes(_hand_model())
    shapes = _shapes(onnx.load_from_string(written.SerializeToString()))
    assert shapes["total"] == ["batch", "past + sequence", 4]
    assert shapes["proj"] == ["batch", "past + sequence", 2]
    assert shapes["flat"] == shapes["y"] == ["batch", "past*2 + sequence*2"]
    assert shapes["where"][0] == 2 and shapes["where"][1].startswith("unk__")
    assert shapes["shape"] == [3] and shapes["flat_shape"] == [2]
    assert report.unknown == [] and report.data_dependent == 1
    model = onnx.load_from_string(written.SerializeToString())
    onnx.checker.check_model(model)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    _assert_real_shapes(written.SerializeToString(), [
        {"past": np.ones((2, 3, 4), np.float32), "x": np.ones((2, 5, 4), np.float32)},
        {"past": np.zeros((1, 0, 4), np.float32), "x": -np.ones((1, 1, 4), np.float32)}])


def _assert_real_shapes(model_bytes: bytes, feeds_list: list) -> None:
    """Every written shape, its symbols bound by the feeds' dims, equals the shape
    onnxruntime gives that tensor (data-dependent dims: only the rank)."""
    model = onnx.load_from_string(model_bytes)
    sess = dynashape.InferenceSession(model_bytes, optimize=False)
    sg, pg = sess.symbolic, sess.graph
    produced = {o for n in model.graph.node for o in n.output}    # (a model may keep stale value_info)
    names = [vi.name for vi in model.graph.value_info if vi.type.HasField("tensor_type") and vi.name in produced
             and vi.name not in {o.name for o in model.graph.output}]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(vi for vi in model.graph.value_info if vi.name in names)
    ort = ort_session(probe.SerializeToString())
    for feeds in feeds_list:
        env = {sym: feeds[pg.names[slot]].shape[axis] for sym, (slot, axis) in sg.input_symbols.items()}
        got = dict(zip([o.name for o in ort.get_outputs()], ort.run(None, feeds)))
        for name in names + [o.name for o in model.graph.output if o.name in got]:
            shape = sg.shapes[pg.slot[name]] if sg.shapes[pg.slot[name]] is not None else \
                pg.constant_type(pg.slot[name])[0]
            real = got[name].shape
            assert len(shape) == len(real), (name, shape, real)
            for d, r in zip(shape, real):
                if isinstance(d, int) or not (free_symbols(d) & sg.fresh_symbols):
                    assert evaluate(d, env) == r, (name, shape, real, env)


def _zoo_keys() -> list:
    if not (SHARED / "zoo" / "zoo.json").exists():
        return []
    return sorted(json.loads((SHARED / "zoo" / "zoo.json").read_text()))


@pytest.mark.parametrize("key", _zoo_keys() or [pytest.param("zoo", marks=pytest.mark.skip("../shared absent"))])
def test_zoo_models_get_every_shape_and_the_real_ones_at_two_sizes(key):
    entry = json.loads((SHARED / "zoo" / "zoo.json").read_text())[key]
    path = SHARED / "zoo" / entry["file"]
    written, report = infer_shapes(str(path))
    assert report.unknown == [], report.unknown[:5]
    make = load_shared_module("zoo_make_inputs", "zoo", "make_inputs.py").make_inputs
    shapes = list(entry["shapes"])[:2]
    _assert_real_shapes(written.SerializeToString(), [make(str(path), shape=s) for s in shapes])


def _zoo2_keys() -> list:
    if not (SHARED / "zoo" / "zoo2" / "zoo2.json").exists():
        return []
    return sorted(json.loads((SHARED / "zoo" / "zoo2" / "zoo2.json").read_text()))


#: zoo2 models where a tensor's rank is not inferred, and why (none at present)
RANK_NOT_INFERRED: dict = {}


def _zoo2_params() -> list:
    return [pytest.param(k, marks=[pytest.mark.xfail(strict=True, reason=RANK_NOT_INFERRED[k])]
                         if k in RANK_NOT_INFERRED else []) for k in _zoo2_keys()]


@pytest.mark.parametrize("key", _zoo2_params() or [pytest.param("zoo2", marks=pytest.mark.skip("../shared absent"))])
def test_zoo2_models_get_every_tensor_shape_and_load_in_onnxruntime(key, tmp_path):
    """Every tensor gets a shape, onnxruntime loads the written model, and the written shapes
    are the real ones at two of the model's named shapes."""
    entry = json.loads((SHARED / "zoo" / "zoo2" / "zoo2.json").read_text())[key]
    path = SHARED / "zoo" / "zoo2" / entry["file"]
    out = tmp_path / "shapes.onnx"
    try:
        written, report = infer_shapes(str(path), out)
    except dynashape.UnsupportedOperatorError as exc:
        pytest.skip(f"not loadable here: {exc}")
    assert report.unknown == [], report.unknown[:5]
    if any((path.parent / f).exists() for f in (path.name + ".data", path.stem + ".onnx.data")):
        return   # (external data next to the model: the written model refers to it by a relative path)
    ort_session(str(out))
    make = load_shared_module("zoo2_make_inputs", "zoo", "zoo2", "make_inputs.py").make_inputs
    _assert_real_shapes(written.SerializeToString(), [make(str(path), shape=s) for s in list(entry["shapes"])[:2]])


def _seq_type(shape=None):
    return helper.make_sequence_type_proto(helper.make_tensor_type_proto(T.FLOAT, shape))


def _insert_rows(seq: str, start: str, end: str, out: str) -> list:
    """``out`` = ``seq`` with ``x[start:end]`` (rows of the outer ``x``, ``[end - start, 4]``) inserted."""
    return [helper.make_node("Slice", ["x", start, end, "axis0"], [out + "_rows"]),
            helper.make_node("SequenceInsert", [seq, out + "_rows"], [out])]


def _loop_model(body_nodes: list, body_constants: list, concat: dict, init: tuple = ()) -> onnx.ModelProto:
    """``y = ConcatFromSequence(Loop(trip, "", SequenceEmpty()), **concat)``; the body
    (``i``, ``cond``, ``seq_in`` -> ``cond_out``, ``seq_out``) reads the input ``x`` ``[N, 4]``.
    ``init``: (nodes making ``empty``, their initializers) in place of the SequenceEmpty."""
    axis0 = numpy_helper.from_array(np.array([0], np.int64), "axis0")
    body = helper.make_graph(
        body_nodes + [helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", T.INT64, []), helper.make_tensor_value_info("cond", T.BOOL, []),
         helper.make_value_info("seq_in", _seq_type())],
        [helper.make_tensor_value_info("cond_out", T.BOOL, []), helper.make_value_info("seq_out", _seq_type())],
        [axis0] + body_constants)
    init_nodes, init_constants = init or ([helper.make_node("SequenceEmpty", [], ["empty"], dtype=T.FLOAT)], [])
    nodes = init_nodes + [helper.make_node("Loop", ["trip", "", "empty"], ["seq"], body=body),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], **concat)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, ["N", 4]),
                                           helper.make_tensor_value_info("trip", T.INT64, [])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)], init_constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _growing_rows_model() -> onnx.ModelProto:
    """Iteration ``i`` inserts ``x[0:i+1]`` (``[i+1, 4]``: a length that changes every
    iteration), then ConcatFromSequence(axis=0): ``y`` ``[trip*(trip+1)/2, 4]``."""
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    nodes = [helper.make_node("Unsqueeze", ["i", "axis0"], ["i_1d"]),
             helper.make_node("Add", ["i_1d", "one"], ["end"])] + _insert_rows("seq_in", "axis0", "end", "seq_out")
    return _loop_model(nodes, [one], {"axis": 0})


def _if_pairs_model() -> onnx.ModelProto:
    """The body's If inserts rows 0 and 1 of ``x`` on even iterations, rows 1 and 2 on odd
    ones (a Gather: ``[2, 4]`` either way), then ConcatFromSequence stacks them
    (new_axis=1): ``y`` ``[trip, 2, 4]``."""
    consts = [numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in (("two", 2), ("zero", 0), ("rows01", [0, 1]), ("rows12", [1, 2]))]

    def branch(name: str, rows: str):
        nodes = [helper.make_node("Gather", ["x", rows], [name + "_rows"], axis=0),
                 helper.make_node("SequenceInsert", ["seq_in", name + "_rows"], [name])]
        return helper.make_graph(nodes, name, [], [helper.make_value_info(name, _seq_type())])
    nodes = [helper.make_node("Mod", ["i", "two"], ["parity"]),
             helper.make_node("Equal", ["parity", "zero"], ["even"]),
             helper.make_node("If", ["even"], ["seq_out"], then_branch=branch("then_seq", "rows01"),
                              else_branch=branch("else_seq", "rows12"))]
    return _loop_model(nodes, consts, {"axis": 0, "new_axis": 1})


def _first_row_then_pairs_model() -> onnx.ModelProto:
    """The carried sequence starts as ``[x[0]]`` (``[1, 4]``); each iteration inserts rows 0
    and 1 (``[2, 4]``); ConcatFromSequence(axis=0): ``y`` ``[1 + 2*trip, 4]``."""
    rows01 = numpy_helper.from_array(np.array([0, 1], np.int64), "rows01")
    row0 = numpy_helper.from_array(np.array([0], np.int64), "row0")
    body = [helper.make_node("Gather", ["x", "rows01"], ["pair"], axis=0),
            helper.make_node("SequenceInsert", ["seq_in", "pair"], ["seq_out"])]
    init = [helper.make_node("Gather", ["x", "row0"], ["first"], axis=0),
            helper.make_node("SequenceConstruct", ["first"], ["empty"])]
    return _loop_model(body, [rows01], {"axis": 0}, (init, [row0]))


def _inferred(model: onnx.ModelProto, name: str) -> tuple:
    """(the session's symbolic shape of ``name``, its dtype there) and the shape infer_shapes writes."""
    sess = dynashape.InferenceSession(model.SerializeToString())
    slot = sess.graph.slot[name]
    written, report = infer_shapes(model)
    assert report.unknown == [] and report.containers == ["empty", "seq"]
    return sess.symbolic.shapes[slot], sess.symbolic.dtypes[sess.graph.slot["seq"]], _shapes(written)[name]


def _assert_runs_as_onnxruntime(model: onnx.ModelProto, trips: tuple, want_rows) -> None:
    sess = dynashape.InferenceSession(model.SerializeToString())
    ort = ort_session(model.SerializeToString())
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    for trip in trips:
        feeds = {"x": x, "trip": np.array(trip, np.int64)}
        got, = sess.run(None, feeds)
        want, = ort.run(None, feeds)
        assert got.shape == want_rows(trip)
        np.testing.assert_array_equal(got, want)


def test_a_sequence_a_loop_carries_has_its_elements_dims_at_import():
    """The Loop walks its body from the empty sequence: every element is ``[?, 4]`` (the
    length changes per iteration), so ConcatFromSequence's output is ``[unk, 4]``."""
    model = _growing_rows_model()
    shape, seq_type, written = _inferred(model, "y")
    assert len(shape) == 2 and shape[1] == 4 and not isinstance(shape[0], int)
    assert seq_type.dims == (None, 4) and not seq_type.empty
    assert written[1] == 4 and written[0].startswith("unk__")
    _assert_runs_as_onnxruntime(model, (1, 3, 5), lambda t: (t * (t + 1) // 2, 4))


def test_a_sequence_an_if_in_the_loop_body_makes_joins_both_branches():
    """Both branches insert ``[2, 4]``: the elements' dims stay ints through the If and the
    Loop, so the stacked output is ``[unk, 2, 4]``."""
    model = _if_pairs_model()
    shape, seq_type, written = _inferred(model, "y")
    assert len(shape) == 3 and shape[1:] == (2, 4) and not isinstance(shape[0], int)
    assert seq_type.dims == (2, 4)
    assert written[1:] == [2, 4] and written[0].startswith("unk__")
    _assert_runs_as_onnxruntime(model, (1, 2, 4), lambda t: (t, 2, 4))


def test_a_loop_joins_the_initial_elements_with_those_its_body_inserts():
    """``[1, 4]`` to begin with, ``[2, 4]`` from the body: every element is ``[?, 4]`` (the
    initial sequence's ``[1, 4]`` does not pass through the Loop as it is)."""
    model = _first_row_then_pairs_model()
    shape, seq_type, written = _inferred(model, "y")
    assert len(shape) == 2 and shape[1] == 4 and not isinstance(shape[0], int)
    assert seq_type.dims == (None, 4)
    _assert_runs_as_onnxruntime(model, (0, 1, 3), lambda t: (1 + 2 * t, 4))


def test_the_command_writes_the_model_and_says_what_it_found(tmp_path):
    src, out = tmp_path / "m.onnx", tmp_path / "m.shapes.onnx"
    src.write_bytes(_hand_model().SerializeToString())
    result = CliRunner().invoke(main, ["infer-shapes", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (f"wrote {out}: 8 tensors with a shape, 8 symbolic dims, 1 data-dependent")
    assert _shapes(onnx.load(str(out)))["total"] == ["batch", "past + sequence", 4]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    result = CliRunner().invoke(main, ["infer-shapes", str(bad), "-o", str(out)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.startswith(f"Error: cannot load '{bad}'") and len(result.output.strip().splitlines()) == 1
