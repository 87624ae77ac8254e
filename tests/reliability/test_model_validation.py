"""Load-time validation (dynashape.validate): models onnxruntime rejects are rejected here too,
with a typed error naming the node; plus linear-time import and nesting limits."""
from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import dynashape as ds
from dynashape.validate import MAX_NESTING
from tests.reliability.builders import nested_if as _nested_if

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=18) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, dims=None, elem=F):
    return helper.make_tensor_value_info(name, elem, dims)


def _ort_rejects(model: onnx.ModelProto) -> None:
    with pytest.raises(Exception):   # noqa: B017 - onnxruntime raises its own exception types
        ort.InferenceSession(model.SerializeToString())


def _flatten_with_float_axis():
    node = helper.make_node("Flatten", ["x"], ["y"], name="flat")
    node.attribute.append(helper.make_attribute("axis", 1.0))
    return _model([node], [_vi("x", ["n"])], [_vi("y")])


INVALID = {
    "two nodes write one name": (
        lambda: _model([helper.make_node("Relu", ["x"], ["y"], name="a"),
                        helper.make_node("Neg", ["x"], ["y"], name="b")], [_vi("x", ["n"])], [_vi("y")]),
        ds.DuplicateNameError, ["'y'", "node 'a' (Relu)", "node 'b' (Neg)"]),
    "node output shadows a graph input": (
        lambda: _model([helper.make_node("Relu", ["x"], ["x"], name="r"), helper.make_node("Neg", ["x"], ["y"])],
                       [_vi("x", ["n"])], [_vi("y")]),
        ds.DuplicateNameError, ["node 'r' (Relu)", "'x'", "graph input"]),
    "node output shadows an initializer": (
        lambda: _model([helper.make_node("Relu", ["x"], ["w"], name="r"), helper.make_node("Add", ["x", "w"], ["y"])],
                       [_vi("x", [2])], [_vi("y")], [numpy_helper.from_array(np.ones(2, np.float32), "w")]),
        ds.DuplicateNameError, ["node 'r'", "'w'", "initializer"]),
    "duplicate graph inputs": (
        lambda: _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["n"]), _vi("x", ["n"])], [_vi("y")]),
        ds.DuplicateNameError, ["input 'x' twice"]),
    "graph output no node produces": (
        lambda: _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["n"])], [_vi("y"), _vi("z")]),
        ds.UndefinedValueError, ["output 'z'", "not produced"]),
    "float attribute where an int is required": (
        _flatten_with_float_axis, ds.InvalidAttributeError, ["Flatten node 'flat'", "'axis' must be INT", "FLOAT"]),
    "Split-18 with neither split nor num_outputs": (
        lambda: _model([helper.make_node("Split", ["x"], ["a", "b"], axis=0, name="sp")],
                       [_vi("x", [4])], [_vi("a"), _vi("b")]),
        ds.InvalidAttributeError, ["Split node 'sp'", "'split'", "'num_outputs'", "neither"]),
    "unknown attribute": (
        lambda: _model([helper.make_node("Relu", ["x"], ["y"], name="r", alpha=0.5)], [_vi("x", ["n"])], [_vi("y")]),
        ds.InvalidAttributeError, ["Relu node 'r'", "'alpha'", "does not define"]),
    "required attribute missing": (
        lambda: _model([helper.make_node("Cast", ["x"], ["y"], name="c")], [_vi("x", ["n"])], [_vi("y")]),
        ds.InvalidAttributeError, ["Cast node 'c'", "required attribute 'to'"]),
    "node reads an undefined name": (
        lambda: _model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")], [_vi("x", ["n"])], [_vi("y")]),
        ds.UndefinedValueError, ["node 'add'", "'nowhere'"]),
    "a cycle": (
        lambda: _model([helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
                        helper.make_node("Relu", ["a"], ["b"], name="n2"), helper.make_node("Relu", ["a"], ["y"])],
                       [_vi("x", ["n"])], [_vi("y")]),
        ds.UndefinedValueError, ["cycle", "'n1'", "'n2'"]),
}

@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_model_is_rejected_like_onnxruntime(case):
    build, error, words = INVALID[case]
    model = build()
    _ort_rejects(model)
    with pytest.raises(error) as info:
        ds.InferenceSession(model.SerializeToString())
    assert isinstance(info.value, ds.ModelLoadError)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_invalid_attribute_error_names_the_node():
    with pytest.raises(ds.InvalidAttributeError) as info:
        ds.InferenceSession(_flatten_with_float_axis())
    assert info.value.node == "flat" and info.value.op_type == "Flatten" and info.value.graph == "g"


def test_split18_with_num_outputs_or_split_input_still_loads():
    x = np.arange(5, dtype=np.float32)
    m = _model([helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=2)], [_vi("x", ["n"])],
               [_vi("a"), _vi("b")])
    a, b = ds.InferenceSession(m).run(None, {"x": x})
    np.testing.assert_array_equal(a, [0, 1, 2])
    np.testing.assert_array_equal(b, [3, 4])
    m = _model([helper.make_node("Split", ["x", "s"], ["a", "b"], axis=0)], [_vi("x", ["n"])], [_vi("a"), _vi("b")],
               [numpy_helper.from_array(np.array([1, 4]), "s")])
    a, b = ds.InferenceSession(m).run(None, {"x": x})
    np.testing.assert_array_equal(a, [0])
    np.testing.assert_array_equal(b, [1, 2, 3, 4])


def test_duplicate_name_inside_a_subgraph_is_found():
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="r1"),
                              helper.make_node("Neg", ["x"], ["t"], name="r2")], "then", [], [_vi("t")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_vi("e")])
    m = _model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
               [_vi("x", ["n"]), _vi("c", [], TensorProto.BOOL)], [_vi("y")])
    with pytest.raises(ds.DuplicateNameError) as info:
        ds.InferenceSession(m)
    assert "g/if.then_branch" in str(info.value) and "'r1'" in str(info.value)


def test_subgraph_output_may_be_an_outer_value():
    then = helper.make_graph([], "then", [], [_vi("x")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_vi("e")])
    m = _model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
               [_vi("x", ["n"]), _vi("c", [], TensorProto.BOOL)], [_vi("y")])
    s = ds.InferenceSession(m)
    np.testing.assert_array_equal(s.run(None, {"x": np.array([1., 2.], np.float32), "c": np.array(True)})[0], [1, 2])
    np.testing.assert_array_equal(s.run(None, {"x": np.array([1., 2.], np.float32), "c": np.array(False)})[0],
                                  [-1, -2])


# --- linear import ------------------------------------------------------------------------

def _chain(n: int, reverse: bool) -> onnx.ModelProto:
    nodes = [helper.make_node("Abs" if k % 2 else "Neg", [f"t{k}"], [f"t{k + 1}"]) for k in range(n)]
    if reverse:
        nodes = nodes[::-1]
    return _model(nodes, [_vi("t0", ["n"])], [_vi(f"t{n}")])


def test_import_in_reverse_order_is_not_quadratic():
    """6,000 nodes listed last-to-first load about as fast as in order (was 12.5 s vs 0.17 s)."""
    n = 6000
    times = {}
    for reverse in (False, True):
        model = _chain(n, reverse).SerializeToString()
        t0 = time.perf_counter()
        s = ds.InferenceSession(model)
        times[reverse] = time.perf_counter() - t0
        x = np.array([-1.0, 2.0], np.float32)
        np.testing.assert_array_equal(s.run(None, {"t0": x})[0], [1.0, 2.0])   # Neg then Abs, 3000 times
    assert times[True] < 3 * times[False] + 1.0, times


def test_nodes_in_any_order_run_in_dependency_order():
    nodes = [helper.make_node("Mul", ["a", "x"], ["y"]), helper.make_node("Add", ["x", "x"], ["a"])]
    s = ds.InferenceSession(_model(nodes, [_vi("x", ["n"])], [_vi("y")]))
    np.testing.assert_array_equal(s.run(None, {"x": np.array([1., 3.], np.float32)})[0], [2., 18.])


# --- nesting --------------------------------------------------------------------------------

def test_nesting_up_to_the_limit_runs():
    s = ds.InferenceSession(_nested_if(MAX_NESTING))
    x = np.array([1.0, -2.0], np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x, "c": np.array(True)})[0], [2.0, -4.0])
    np.testing.assert_array_equal(s.run(None, {"x": x, "c": np.array(False)})[0], [-1.0, 2.0])


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 250])
def test_deeper_nesting_is_a_typed_limit_error(depth):
    with pytest.raises(ds.NestingLimitError) as info:
        ds.InferenceSession(_nested_if(depth))
    assert f"nested {MAX_NESTING + 1} levels" in str(info.value) and f"at most {MAX_NESTING}" in str(info.value)


def test_nesting_past_protobufs_parser_is_a_typed_error():
    with pytest.raises(ds.NestingLimitError, match="protobuf"):
        ds.InferenceSession(_nested_if(40).SerializeToString())


def test_deep_loop_nesting_is_a_typed_limit_error():
    body = helper.make_graph([helper.make_node("Identity", ["v"], ["v_out"])], "inner",
                             [_vi("i", [], TensorProto.INT64), _vi("cond", [], TensorProto.BOOL), _vi("v")],
                             [_vi("cond_out", [], TensorProto.BOOL), _vi("v_out")])
    body.node.extend([helper.make_node("Identity", ["cond"], ["cond_out"])])
    m = onnx.ModelProto()
    m.ir_version = 9
    m.opset_import.add().version = 18
    g = m.graph
    g.name = "main"
    g.input.extend([_vi("v", ["n"]), _vi("trip", [], TensorProto.INT64), _vi("cond", [], TensorProto.BOOL)])
    g.output.extend([_vi("out")])
    for d in range(200):
        n = g.node.add()
        n.op_type, n.name = "Loop", f"loop{d}"
        n.input.extend(["trip", "cond", "v"])
        n.output.append("out" if d == 0 else "v_out")
        a = n.attribute.add()
        a.name, a.type = "body", AttributeProto.GRAPH
        if d == 199:
            a.g.CopyFrom(body)
        else:
            a.g.name = f"body{d}"
            a.g.input.extend([_vi("i", [], TensorProto.INT64), _vi("cond", [], TensorProto.BOOL), _vi("v")])
            a.g.output.extend([_vi("cond_out", [], TensorProto.BOOL), _vi("v_out")])
            a.g.node.extend([helper.make_node("Identity", ["cond"], ["cond_out"])])
            g = a.g
    with pytest.raises(ds.NestingLimitError):
        ds.InferenceSession(m)
