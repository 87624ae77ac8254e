"""Resource limits (dynashape.limits): huge tensors raise ResourceLimitError naming the node and
the size before anything is allocated; no raw MemoryError / numpy ValueError reaches the user;
the session keeps working after."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape as ds
from dynashape.records import OpLibrary, same_dtype
from dynashape.limits import default_memory_limit, parse_bytes, resolve_memory_limit

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _vi(name, dims=None, elem=F):
    return helper.make_tensor_value_info(name, elem, dims)


def _constant_of_shape_from_feed():
    return _model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")], [_vi("s", [None], I64)],
                  [_vi("y")])


@pytest.mark.parametrize("allocator", ["pool", "naive"])
def test_huge_constant_of_shape_from_a_feed(allocator):
    s = ds.InferenceSession(_constant_of_shape_from_feed(), allocator=allocator)
    with pytest.raises(ds.ResourceLimitError) as info:
        s.run(None, {"s": np.array([10**12])})
    err = info.value
    assert isinstance(err, MemoryError)          # ``except MemoryError`` keeps working
    assert err.node == "cos" and err.nbytes == 4 * 10**12 and err.limit == s.memory_limit
    assert "ConstantOfShape node 'cos'" in str(err) and "(1000000000000,)" in str(err)
    np.testing.assert_array_equal(s.run(None, {"s": np.array([2, 3])})[0], np.zeros((2, 3), np.float32))


def test_element_count_overflowing_int64():
    s = ds.InferenceSession(_constant_of_shape_from_feed())
    with pytest.raises(ds.ResourceLimitError, match="overflows int64") as info:
        s.run(None, {"s": np.array([2**32, 2**32])})
    assert info.value.node == "cos" and "(4294967296, 4294967296)" in str(info.value)
    np.testing.assert_array_equal(s.run(None, {"s": np.array([1])})[0], [0.0])


def test_huge_constant_at_load_is_not_folded_and_fails_when_planned():
    model = _model([helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([10**12]))),
                    helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")], [], [_vi("y")])
    s = ds.InferenceSession(model)      # folding skipped the 4 TB constant: no MemoryError at load
    with pytest.raises(ds.ResourceLimitError, match="ConstantOfShape node 'cos'"):
        s.run(None, {})


@pytest.mark.parametrize("allocator", ["pool", "naive"])
def test_session_memory_limit_bounds_one_tensor(allocator):
    model = _model([helper.make_node("Expand", ["x", "s"], ["y"], name="ex")],
                   [_vi("x", ["n"]), _vi("s", [2], I64)], [_vi("y")])
    s = ds.InferenceSession(model, allocator=allocator, memory_limit="1MiB")
    assert s.memory_limit == 2**20
    x = np.ones(4, np.float32)
    y = s.run(None, {"x": x, "s": np.array([256, 4])})[0]        # 4 KiB
    np.testing.assert_array_equal(y, np.ones((256, 4), np.float32))
    with pytest.raises(ds.ResourceLimitError, match="Expand node 'ex'") as info:
        s.run(None, {"x": x, "s": np.array([65536 + 1, 4])})      # 1 MiB + 16 B
    assert info.value.nbytes == (65536 + 1) * 16 and info.value.limit == 2**20
    np.testing.assert_array_equal(s.run(None, {"x": x, "s": np.array([2, 4])})[0], np.ones((2, 4), np.float32))


@pytest.mark.parametrize("allocator", ["pool", "naive"])
def test_session_memory_limit_bounds_a_plan_of_intermediates(allocator):
    """Intermediates of 600 KiB each stay under a 1 MiB limit one by one, not together."""
    model = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
                    helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("ReduceSum", ["c"], ["y"])],
                   [_vi("x", ["n"])], [_vi("y")])
    s = ds.InferenceSession(model, allocator=allocator, memory_limit=2**20)
    small = np.arange(1000, dtype=np.float32)
    np.testing.assert_allclose(s.run(None, {"x": small})[0], [0.0])
    with pytest.raises(ds.ResourceLimitError, match="over the session's memory_limit"):
        s.run(None, {"x": np.ones(150_000, np.float32)})
    np.testing.assert_allclose(s.run(None, {"x": -small})[0], [499500.0])   # Relu(-x) = 0, Neg(-x) = x


def test_memory_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv("DYNASHAPE_MEMORY_LIMIT", "3GiB")
    assert resolve_memory_limit(None) == 3 * 2**30
    monkeypatch.delenv("DYNASHAPE_MEMORY_LIMIT")
    assert resolve_memory_limit(None) == default_memory_limit() > 2**20


@pytest.mark.parametrize("text,expected", [("512", 512), ("2KiB", 2048), ("1.5GB", 1_500_000_000), (" 8 MiB ", 2**23)])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", [0, -5, "lots", "5 parsecs", True, 2.5])
def test_bad_memory_limit_is_an_argument_error(bad):
    with pytest.raises(ds.InvalidArgumentError, match="memory_limit|byte count"):
        ds.InferenceSession(_constant_of_shape_from_feed(), memory_limit=bad)


@pytest.mark.parametrize("failure", [MemoryError("refused"),
                                     ValueError("array is too big; `arr.size * arr.dtype.itemsize` is larger")])
def test_allocation_failure_inside_a_kernel_is_typed(failure):
    """A MemoryError the system raises inside a kernel (or numpy's "array is too big") becomes
    ResourceLimitError naming the node; the session keeps working."""
    lib = OpLibrary()
    state = {"fail": False}

    @lib.op("Grow", since_version=1, domain="com.example.limits", infer_dtype=same_dtype(0))
    def _shape(ctx):
        return [ctx.shape(0)]

    @lib.kernel("Grow", domain="com.example.limits")
    def _grow(inputs, outputs, prepared):
        if state["fail"]:
            raise failure
        np.multiply(inputs[0], 2, out=outputs[0])

    name = ds.register_plugin(lib.plugin(), name="limits-test")
    try:
        g = helper.make_graph([helper.make_node("Grow", ["x"], ["y"], name="grow", domain="com.example.limits")],
                              "g", [_vi("x", ["n"])], [_vi("y")])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("com.example.limits", 1)])
        s = ds.InferenceSession(model)
        x = np.array([1.0, 2.0], np.float32)
        np.testing.assert_array_equal(s.run(None, {"x": x})[0], [2.0, 4.0])
        state["fail"] = True
        with pytest.raises(ds.ResourceLimitError, match="Grow node 'grow'") as info:
            s.run(None, {"x": x})
        assert info.value.node == "grow"
        state["fail"] = False
        np.testing.assert_array_equal(s.run(None, {"x": x})[0], [2.0, 4.0])
    finally:
        ds.unregister_plugin(name)


@pytest.mark.parametrize("allocator", ["pool", "naive"])
def test_an_intermediate_over_the_limit_is_named_from_the_symbolic_plan(allocator):
    """Tile(x[n], [1000]) -> Relu -> ReduceSum: the intermediate of 1000 n floats is planned from
    the symbolic program (an arena block, or a naive buffer) and checked before allocating."""
    model = _model([helper.make_node("Tile", ["x", "rep"], ["t"], name="tile"), helper.make_node("Relu", ["t"], ["r"]),
                    helper.make_node("ReduceSum", ["r"], ["y"])], [_vi("x", ["n"])], [_vi("y")],
                   [numpy_helper.from_array(np.array([1000]), "rep")])
    s = ds.InferenceSession(model, allocator=allocator, memory_limit="1MiB")
    np.testing.assert_array_equal(s.run(None, {"x": np.ones(4, np.float32)})[0], [4000.0])
    with pytest.raises(ds.ResourceLimitError, match=r"output 't' of Tile node 'tile' has shape \(300000,\)") as info:
        s.run(None, {"x": np.ones(300, np.float32)})
    assert info.value.nbytes == 1_200_000 and info.value.node == "tile"
    np.testing.assert_array_equal(s.run(None, {"x": np.ones(5, np.float32)})[0], [5000.0])


@pytest.mark.parametrize("in_a_branch", [False, True])
def test_the_fold_after_the_rewrites_keeps_the_sessions_memory_limit(in_a_branch):
    """A constant-only Expand over the session's memory_limit is not folded at load, neither
    before the rewrites nor after them (a no-op Cast the rewrites remove makes them fire),
    in the main graph as in an If branch: its plan raises ResourceLimitError, as it would
    without the rewrites."""
    big = [helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.ones(1, np.float32))),
           helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([512, 1024]))),
           helper.make_node("Expand", ["one", "s"], ["big"], name="ex"),         # 2 MiB, all constant
           helper.make_node("Cast", ["x"], ["xc"], to=F),                       # float -> float: removed
           helper.make_node("Add", ["big", "xc"], ["y"], name="add")]
    if in_a_branch:
        branch = helper.make_graph(big, "then", [], [_vi("y")])
        other = helper.make_graph([helper.make_node("Identity", ["x"], ["y2"])], "else", [], [_vi("y2")])
        nodes = [helper.make_node("If", ["c"], ["out"], then_branch=branch, else_branch=other)]
        model = _model(nodes, [_vi("c", [], TensorProto.BOOL), _vi("x", [1])], [_vi("out")])
        feeds = {"c": np.array(True), "x": np.ones(1, np.float32)}
    else:
        model = _model(big, [_vi("x", [1])], [_vi("y")])
        feeds = {"x": np.ones(1, np.float32)}
    s = ds.InferenceSession(model, memory_limit="1MiB", optimize=True)
    with pytest.raises(ds.ResourceLimitError, match="node 'ex'"):
        s.run(None, feeds)
    relaxed = ds.InferenceSession(model, memory_limit="16MiB", optimize=True)
    np.testing.assert_array_equal(relaxed.run(None, feeds)[0], np.full((512, 1024), 2.0, np.float32))
