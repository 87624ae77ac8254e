"""A third-party plugin registers a rewrite through ``dynashape_register_rewrites``: a fused
op of its own (``test.rewrites::MulAdd``) replacing ``Add(Mul(x, a), b)`` where the shapes
allow it; where a broadcast would change the result's shape the rewrite declines.
Registry rules: order by priority then name, a name defined twice is an error, a
replacement that does not produce its root's outputs is an error naming the rewrite.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import dynashape
from dynashape import OpLibrary, same_dtype
from dynashape.errors import PluginError
from dynashape.rewrite import op, value

ort = pytest.importorskip("onnxruntime")

DOMAIN = "test.rewrites"
F = TensorProto.FLOAT


def _muladd_library(build_outputs: bool = True, name: str = "muladd") -> OpLibrary:
    lib = OpLibrary()

    @lib.op("MulAdd", 1, domain=DOMAIN, infer_dtype=same_dtype(0))
    def _shape(ctx):
        """MulAdd: x * a + b with a and b of x's shape."""
        return [ctx.shape(0)]

    @lib.kernel("MulAdd", domain=DOMAIN)
    def _kernel(inputs, outputs, ctx):
        x, a, b = inputs
        np.multiply(x, a, out=outputs[0])
        np.add(outputs[0], b, out=outputs[0])

    @lib.rewrite(name, op("Add", op("Mul", value("x"), value("a")), value("b")), priority=5)
    def _build(m):
        """Add(Mul(x, a), b) -> MulAdd when a and b have x's shape (no broadcast)."""
        x = m.shape("x")
        if x is None or m.dtype("x") != np.float32:
            return None
        for other in ("a", "b"):
            s = m.shape(other)
            if s is None or len(s) != len(x) or not all(m.same_dim(p, q) for p, q in zip(s, x)):
                return None
        outputs = None if build_outputs else [m.fresh("wrong")]
        return [m.make("MulAdd", [m.value("x"), m.value("a"), m.value("b")], outputs=outputs, domain=DOMAIN)]

    return lib


@pytest.fixture
def plugin():
    name = dynashape.register_plugin(_muladd_library().plugin(), name="test-rewrites")
    yield name
    dynashape.unregister_plugin(name)


def _model(b_dims) -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["x", "a"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", F, ["n", "m"]), helper.make_tensor_value_info("a", F, ["n", "m"]),
              helper.make_tensor_value_info("b", F, b_dims)]
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])


def _run_against_ort(model, shapes):
    sess = dynashape.InferenceSession(model.SerializeToString(), optimize=True)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for xs, bs in shapes:
        feeds = {"x": rng.standard_normal(xs).astype(np.float32), "a": rng.standard_normal(xs).astype(np.float32),
                 "b": rng.standard_normal(bs).astype(np.float32)}
        (got,), (want,) = sess.run(None, feeds), ref.run(None, feeds)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    return sess


def test_a_plugin_rewrite_fuses_with_its_own_op(plugin):
    sess = _run_against_ort(_model(["n", "m"]), [((2, 3), (2, 3)), ((5, 1), (5, 1)), ((2, 3), (2, 3))])
    assert sess.rewrites.counts() == {"muladd": 1}
    assert [f.plugin for f in sess.rewrites.fired] == [plugin]
    assert [pn.node.op_type for pn in sess.graph.nodes] == ["MulAdd"]


def test_a_rewrite_that_would_change_the_shape_does_not_fire(plugin):
    # b of rank 3 broadcasts the result to (k, n, m): MulAdd would give (n, m), so it declines
    sess = _run_against_ort(_model(["k", "n", "m"]), [((2, 3), (4, 2, 3)), ((1, 1), (2, 1, 1))])
    assert sess.rewrites.counts() == {}
    assert [pn.node.op_type for pn in sess.graph.nodes] == ["Mul", "Add"]


def test_optimize_false_and_ort_disable_all_run_no_rewrite(plugin):
    model = _model(["n", "m"]).SerializeToString()
    assert dynashape.InferenceSession(model, optimize=False).rewrites.fired == []
    so = dynashape.SessionOptions()
    so.graph_optimization_level = dynashape.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert dynashape.InferenceSession(model, so).rewrites.fired == []


def test_rewrites_run_by_priority_then_name(plugin):
    order = [(rw.priority, rw.name) for rw in dynashape.get_registry().rewrites()]
    assert order == sorted(order, key=lambda t: (-t[0], t[1]))
    assert ("muladd" in {n for _, n in order})


def test_a_rewrite_name_defined_twice_names_both_plugins(plugin):
    only_rewrite = OpLibrary(rewrites=list(_muladd_library().rewrites))
    second = dynashape.register_plugin(only_rewrite.plugin(), name="test-rewrites-2")
    try:
        with pytest.raises(PluginError, match="rewrite 'muladd' is defined twice.*test-rewrites.*test-rewrites-2"):
            dynashape.get_registry()
    finally:
        dynashape.unregister_plugin(second)


def test_a_replacement_without_the_roots_outputs_is_an_error_naming_the_rewrite():
    name = dynashape.register_plugin(_muladd_library(build_outputs=False, name="broken_muladd").plugin(),
                                     name="test-rewrites-broken")
    try:
        with pytest.raises(ValueError, match="rewrite 'broken_muladd' .*test-rewrites-broken.* does not produce"):
            dynashape.InferenceSession(_model(["n", "m"]).SerializeToString(), optimize=True)
    finally:
        dynashape.unregister_plugin(name)
