"""Third-party plugins through the pluggy hooks: a new op, a kernel override by priority,
conflicts named by plugin, broken entry points skipped."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import dynashape
from dynashape import hookimpl
from dynashape.records import NodeSubgraph, OpLibrary, same_dtype
from dynashape.registry import get_registry


@pytest.fixture
def registered():
    names = []

    def register(lib: OpLibrary, name: str):
        names.append(dynashape.register_plugin(lib.plugin(), name=name))

    yield register
    for n in names:
        dynashape.unregister_plugin(n)


def _one_node_model(op_type, domain="", opset=1):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    g = helper.make_graph([helper.make_node(op_type, ["x"], ["y"], domain=domain)], "g", [x], [y])
    imports = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, opset)] if domain else [])
    return helper.make_model(g, opset_imports=imports)


def test_plugin_adds_a_new_op_in_its_own_domain(registered):
    lib = OpLibrary()

    @lib.op("Square", since_version=1, domain="com.example", infer_dtype=same_dtype(0))
    def _shape(ctx):
        return [ctx.shape(0)]

    @lib.kernel("Square", domain="com.example")
    def _square(inputs, outputs, ctx):
        np.multiply(inputs[0], inputs[0], out=outputs[0])

    registered(lib, "square-plugin")
    sess = dynashape.InferenceSession(_one_node_model("Square", "com.example"))
    (y,) = sess.run(None, {"x": np.array([1, -2, 3], np.float32)})
    np.testing.assert_array_equal(y, [1, 4, 9])
    assert get_registry().resolve_op("com.example", "Square", 1).plugin == "square-plugin"


def test_plugin_kernel_with_higher_priority_overrides_the_builtin(registered):
    lib = OpLibrary()

    @lib.kernel("Relu", priority=10)
    def _leaky(inputs, outputs, ctx):
        np.copyto(outputs[0], np.where(inputs[0] > 0, inputs[0], 0.5 * inputs[0]))

    registered(lib, "relu-override")
    kernel = get_registry().resolve_kernel("", "Relu", 17, np.dtype(np.float32))
    assert kernel.plugin == "relu-override"
    (y,) = dynashape.InferenceSession(_one_node_model("Relu")).run(None, {"x": np.array([-2, 3], np.float32)})
    np.testing.assert_array_equal(y, [-1, 3])


def test_a_kernel_reads_the_runs_intra_op_threads(registered):
    """dynashape.threads.intra_op_threads(): the session's intra_op_num_threads during its
    runs, default_threads() (every core, or OMP_NUM_THREADS) without one and outside a run
    (the compiled kernels split work by it)."""
    from dynashape.threads import default_threads, intra_op_threads
    seen = []
    lib = OpLibrary()

    @lib.kernel("Relu", priority=20)
    def _relu(inputs, outputs, ctx):
        seen.append(intra_op_threads())
        np.maximum(inputs[0], 0, out=outputs[0])

    registered(lib, "threads-probe")
    x = {"x": np.array([-2, 3], np.float32)}
    so = dynashape.SessionOptions()
    so.intra_op_num_threads = 3
    (y,) = dynashape.InferenceSession(_one_node_model("Relu"), so).run(None, x)
    dynashape.InferenceSession(_one_node_model("Relu")).run(None, x)
    np.testing.assert_array_equal(y, [0, 3])
    assert seen == [3, default_threads()] and intra_op_threads() == default_threads()


def test_builtin_kernel_is_back_after_unregistering_the_override():
    (y,) = dynashape.InferenceSession(_one_node_model("Relu")).run(None, {"x": np.array([-2, 3], np.float32)})
    np.testing.assert_array_equal(y, [0, 3])
    assert get_registry().resolve_kernel("", "Relu", 17, np.dtype(np.float32)).plugin == "dynashape.ops_builtin"


def test_equal_priority_overlapping_kernels_name_both_plugins(registered):
    for name in ("first-plugin", "second-plugin"):
        lib = OpLibrary()

        @lib.kernel("Cube", domain="com.example", since_version=1, end_version=5)
        def _cube(inputs, outputs, ctx):
            np.power(inputs[0], 3, out=outputs[0])

        registered(lib, name)
    with pytest.raises(dynashape.KernelConflictError, match="first-plugin.*second-plugin|second-plugin.*first-plugin"):
        get_registry()


def test_non_overlapping_ranges_do_not_conflict(registered):
    for name, (lo, hi) in (("old-plugin", (1, 5)), ("new-plugin", (6, None))):
        lib = OpLibrary()

        @lib.kernel("Cube", domain="com.example", since_version=lo, end_version=hi)
        def _cube(inputs, outputs, ctx):
            np.power(inputs[0], 3, out=outputs[0])

        registered(lib, name)
    reg = get_registry()
    assert reg.resolve_kernel("com.example", "Cube", 3, None).plugin == "old-plugin"
    assert reg.resolve_kernel("com.example", "Cube", 9, None).plugin == "new-plugin"


def test_misspelled_hook_is_rejected_with_the_plugin_name():
    bad = types.SimpleNamespace()

    @hookimpl
    def dynashape_register_opz():
        return []

    bad.dynashape_register_opz = dynashape_register_opz
    with pytest.raises(dynashape.PluginError, match="typo-plugin"):
        dynashape.register_plugin(bad, name="typo-plugin")


def test_broken_entry_point_is_reported_and_skipped(monkeypatch):
    from dynashape import registry

    class BrokenEP:
        name = "broken"
        value = "nowhere.module:plugin"

        def load(self):
            raise ImportError("No module named 'nowhere'")

    monkeypatch.setattr(registry, "_load_errors", {})   # (restored after: the next tests see none)
    monkeypatch.setenv("DYNASHAPE_CACHE_DIR", "off")   # (the entry points from the fake, not the cache)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [BrokenEP()])
    with pytest.warns(RuntimeWarning, match="plugin 'broken'.*skipped"):
        errors = registry.load_entry_points()
    assert "No module named 'nowhere'" in errors["broken"]
    assert get_registry().resolve_op("", "Relu", 17).plugin == "dynashape.ops_builtin"


def test_builtin_ops_come_through_the_same_hooks():
    pm = dynashape.registry.plugin_manager()
    assert pm.has_plugin("dynashape.ops_builtin")
    names = {impl.plugin_name for impl in pm.hook.dynashape_register_libraries.get_hookimpls()}
    assert "dynashape.ops_builtin" in names


def test_an_object_without_hooks_is_not_registered_silently():
    with pytest.raises(dynashape.PluginError, match="'no-hooks' implements no dynashape hook"):
        dynashape.register_plugin(types.SimpleNamespace(kernels=[]), name="no-hooks")
    assert not dynashape.registry.plugin_manager().has_plugin("no-hooks")


def _entry_point(name: str, plugin=None, error: Exception | None = None):
    class EP:
        value = f"{name}_module:plugin"
        dist = None

        def load(self):
            if error is not None:
                raise error
            return plugin
    ep = EP()
    ep.name = name
    return ep


def test_entry_points_with_a_typo_or_no_hooks_are_reported_by_name_and_the_good_one_loads(monkeypatch):
    from dynashape import registry
    typo = types.SimpleNamespace()

    @hookimpl
    def dynashape_register_kernelz():
        return []
    typo.dynashape_register_kernelz = dynashape_register_kernelz
    good = OpLibrary()

    @good.op("Twice", since_version=1, domain="com.example.ep", infer_dtype=same_dtype(0))
    def _shape(ctx):
        return [ctx.shape(0)]

    @good.kernel("Twice", domain="com.example.ep")
    def _twice(inputs, outputs, ctx):
        np.add(inputs[0], inputs[0], out=outputs[0])

    eps = [_entry_point("ep-typo", typo), _entry_point("ep-empty", types.SimpleNamespace()),
           _entry_point("ep-good", good.plugin())]
    monkeypatch.setenv("DYNASHAPE_CACHE_DIR", "off")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: eps)
    monkeypatch.setattr(registry, "_load_errors", {})
    try:
        with pytest.warns(RuntimeWarning):
            errors = registry.load_entry_points()
        assert "dynashape_register_kernelz" in errors["ep-typo"]
        assert "implements no dynashape hook" in errors["ep-empty"]
        (y,) = dynashape.InferenceSession(_one_node_model("Twice", "com.example.ep")).run(
            None, {"x": np.array([1, 2], np.float32)})
        np.testing.assert_array_equal(y, [2, 4])
    finally:
        dynashape.unregister_plugin("ep-good")


def test_dynashape_plugins_lists_each_plugin_and_which_kernel_wins(registered, monkeypatch):
    import json

    from click.testing import CliRunner

    from dynashape import registry
    from dynashape.cli import main
    lib = OpLibrary()

    @lib.kernel("Relu", priority=10, dtypes=[np.float32])
    def _relu(inputs, outputs, ctx):
        np.maximum(inputs[0], 0, out=outputs[0])

    registered(lib, "relu-f32")
    monkeypatch.setattr(registry, "_load_errors", {"ep-broken": "ImportError: No module named 'nowhere'"})
    out = CliRunner().invoke(main, ["plugins", "--format", "json"], catch_exceptions=False).output
    data = json.loads(out)
    by_name = {p["name"]: p for p in data["plugins"]}
    assert by_name["relu-f32"]["source"] == "registered at run time"
    (mine,) = by_name["relu-f32"]["kernels"]
    assert (mine["op"], mine["dtypes"], mine["wins"]) == ("ai.onnx::Relu", ["float32"], "yes")
    (any_dtype,) = [k for k in by_name["dynashape.ops_builtin"]["kernels"]
                    if k["op"] == "ai.onnx::Relu" and k["dtypes"] is None]
    assert any_dtype["wins"] == "partly"
    assert {"plugin": "relu-f32", "dtypes": ["float32"]} in any_dtype["ahead"]
    assert by_name["dynashape.ops_builtin"]["distribution"] == "dynashape"
    assert "attention_0" in by_name["dynashape.ops_builtin"]["rewrites"]
    assert data["failed"] == [{"name": "ep-broken", "value": None, "distribution": None, "version": None,
                               "error": "ImportError: No module named 'nowhere'"}]
    table = CliRunner().invoke(main, ["plugins"], catch_exceptions=False).output
    assert "relu-f32  (registered at run time: no distribution)" in table
    assert "ai.onnx::Relu (opsets 1+; float32; priority 10) wins" in table
    assert "ai.onnx::Relu (opsets 1+; any dtype; priority 0) wins, except where relu-f32 (float32)" in table
    assert "ep-broken (None): ImportError: No module named 'nowhere'" in table


def _bad_kernel_lib(kernel, shape_rule=None) -> OpLibrary:
    lib = OpLibrary()

    @lib.op("Bad", since_version=1, domain="com.example.bad", infer_dtype=same_dtype(0))
    def _shape(ctx):
        return shape_rule(ctx) if shape_rule else [ctx.shape(0)]

    lib.kernel("Bad", domain="com.example.bad")(kernel)
    return lib


@pytest.mark.parametrize("kernel,message", [
    (lambda ins, outs, p: [ins[0].astype(np.float64)],
     "returned dtype float64 where its dtype inference declared float32"),
    (lambda ins, outs, p: [np.zeros(5, np.float32)],
     "returned shape \\[5\\] where its shape inference declared \\[3\\]"),
    (lambda ins, outs, p: None, "left its planned output buffer unwritten"),
    (lambda ins, outs, p: [7], "returned int, not an array"),
])
def test_a_kernel_breaking_its_contract_is_named_and_the_session_stays_usable(registered, kernel, message):
    registered(_bad_kernel_lib(kernel), "bad-kernel")
    sess = dynashape.InferenceSession(_one_node_model("Bad", "com.example.bad"))
    x = {"x": np.array([1, -2, 3], np.float32)}
    pattern = f"plugin 'bad-kernel' for com.example.bad::Bad \\(node 'Bad_0'\\) {message}.*output 0 'y'"
    for _ in range(2):   # (still checked on the next run: nothing half-done is kept)
        with pytest.raises(dynashape.PluginContractError, match=pattern):
            sess.run(None, x)


def test_a_kernel_whose_output_really_is_all_ones_bits_is_accepted(registered):
    registered(_bad_kernel_lib(lambda ins, outs, p: outs[0].fill(-1)), "minus-one")
    m = _one_node_model("Bad", "com.example.bad")
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.INT32
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT32
    (y,) = dynashape.InferenceSession(m).run(None, {"x": np.array([1, 2], np.int32)})
    np.testing.assert_array_equal(y, [-1, -1])


def test_infer_shape_returning_a_bare_shape_is_named(registered):
    registered(_bad_kernel_lib(lambda ins, outs, p: np.copyto(outs[0], ins[0]), lambda ctx: ctx.shape(0)), "bare")
    with pytest.raises(dynashape.PluginContractError, match="infer_shape of com.example.bad::Bad \\(plugin 'bare'\\)"
                                                            ".*returned .*: it must return a list with one shape"):
        dynashape.InferenceSession(_one_node_model("Bad", "com.example.bad")).run(None, {"x": np.ones(3, np.float32)})


def test_dynashapes_own_kernels_skip_the_first_run_check():
    from dynashape.executor import contract_steps
    sess = dynashape.InferenceSession(_one_node_model("Relu"))
    plan = sess.plan({"x": np.ones(3, np.float32)})
    assert contract_steps(plan, validate=False) == frozenset()
    assert contract_steps(plan, validate=True) == frozenset({0})


def test_a_zero_dim_output_is_checked_too(registered):
    def _sum(ins, outs, p):
        outs[0][...] = ins[0].sum()
    registered(_bad_kernel_lib(_sum, lambda ctx: [()]), "scalar-sum")
    (y,) = dynashape.InferenceSession(_one_node_model("Bad", "com.example.bad")).run(
        None, {"x": np.array([1, 2, 4], np.float32)})
    assert y.shape == () and y == 7


def test_check_op_passes_builtin_ops_and_compares_propagate_value():
    from dynashape.testing import check_op
    report = check_op("Concat", lambda rng, n, m: [rng.standard_normal((n, 3)).astype(np.float32),
                                                   rng.standard_normal((m, 3)).astype(np.float32)],
                      {"n": (0, 5), "m": (1, 4)}, {"axis": 0}, opset=13, trials=6,
                      symbolic_shapes=[("n", 3), ("m", 3)])
    assert len(report.draws) == 6 and report.symbolic_checked == 6
    shape_ops = check_op("Shape", lambda rng, n: [np.zeros((n, 2), np.float32)], {"n": (1, 9)}, opset=15, trials=3)
    assert shape_ops.propagate_checked == 3   # Shape's propagate_value gives the dims


def test_check_op_names_the_draw_where_a_plugin_shape_rule_is_wrong(registered):
    from dynashape.testing import check_op
    lib = OpLibrary()

    @lib.op("PadOne", since_version=1, domain="com.example.chk", infer_dtype=same_dtype(0))
    def _shape(ctx):
        return [ctx.shape(0)]           # wrong: the kernel appends one element

    @lib.kernel("PadOne", domain="com.example.chk")
    def _pad(inputs, outputs, ctx):
        return [np.concatenate([inputs[0], inputs[0][:1]])]

    registered(lib, "pad-one")
    with pytest.raises(AssertionError, match=r"com.example.chk::PadOne trial 0 at \{'n': \d+\}: output 0: "
                                             r"infer_shape declared \(\d+,\), the kernel returned \(\d+,\)"):
        check_op("PadOne", lambda rng, n: [np.ones(n, np.float32)], {"n": (1, 5)}, domain="com.example.chk",
                 opset=1)


def test_check_op_with_a_reference_compares_a_session_and_onnxruntime(registered):
    """check_op(reference=...) runs each draw through dynashape.differential.compare_op (a
    session over symbolic dims, the per-node run, the reference): a reference that computes
    otherwise is reported with the engines' outcomes."""
    from dynashape.differential import Outcome
    from dynashape.testing import check_op
    report = check_op("Concat", lambda rng, n, m: [rng.standard_normal((n, 3)).astype(np.float32),
                                                   rng.standard_normal((m, 3)).astype(np.float32)],
                      {"n": (0, 5), "m": (1, 4)}, {"axis": 0}, opset=13, trials=3, reference="onnxruntime")
    assert report.compared == 3
    lib = OpLibrary()

    @lib.op("Twice", since_version=1, domain="com.example.twice", infer_dtype=same_dtype(0))
    def _shape(ctx):
        return [ctx.shape(0)]

    @lib.kernel("Twice", domain="com.example.twice")
    def _twice(inputs, outputs, ctx):
        np.multiply(inputs[0], 2, out=outputs[0])

    registered(lib, "twice")

    def halves(model, feeds):
        return Outcome("a reference that halves", [feeds["in0"] / 2])
    with pytest.raises(AssertionError, match=r"(?s)the engines disagree.*output 0: values differ between dynashape "
                                             r"session \(symbolic dims\) and a reference that halves"):
        check_op("Twice", lambda rng, n: [np.ones(n, np.float32)], {"n": (1, 4)}, domain="com.example.twice",
                 opset=1, trials=1, reference=halves)


def _missing_contrib_ops_model(*ops):
    """com.microsoft nodes ``ops`` (unary, float) in a chain, then a Relu."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    names = ["x"] + [f"t{k}" for k in range(len(ops))]
    nodes = [helper.make_node(op, [names[k]], [names[k + 1]], domain="com.microsoft") for k, op in enumerate(ops)]
    nodes.append(helper.make_node("Relu", [names[-1]], ["y"]))
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def test_every_missing_operator_is_named_and_a_plugin_only_where_it_may_provide_it():
    with pytest.raises(dynashape.UnsupportedOperatorError) as info:
        dynashape.InferenceSession(_missing_contrib_ops_model("NoSuchA", "NoSuchA", "NoSuchB"))
    msg = str(info.value)
    assert msg.startswith("2 operator(s) of the model have no registered definition: "
                          "com.microsoft::NoSuchA (opset 1, 2 nodes), com.microsoft::NoSuchB (opset 1, 1 node).")
    from dynashape.registry import plugin_manager
    if plugin_manager().has_plugin("example"):     # the installed contrib-ops plugin lacks them: not named
        assert "dynashape-contrib-ops" not in msg and msg.endswith("a plugin may provide them (`dynashape plugins` "
                                                                   "lists the loaded ones)")
    elif importlib.util.find_spec("dynashape_example") is None:    # not installed: it may have them
        assert "many come with the dynashape-contrib-ops plugin, which is not installed" in msg


def test_a_blocked_plugin_is_named_for_the_missing_operators_it_provides_only():
    pytest.importorskip("dynashape_example")
    code = ("import dynashape\nfrom tests.core.test_plugins import _missing_contrib_ops_model as m\n"
            "for ops in (('FastGelu', 'NoSuchA'), ('NoSuchA',)):\n"
            " try:\n  dynashape.InferenceSession(m(*ops))\n except Exception as e:\n  print(type(e).__name__, e)")
    env = dict(os.environ, DYNASHAPE_PLUGINS_BLOCK="example")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=str(Path(__file__).resolve().parents[2])).stdout.splitlines()
    assert out[0].startswith("UnsupportedOperatorError 2 operator(s) of the model have no registered definition: "
                             "com.microsoft::FastGelu (opset 1, 1 node), com.microsoft::NoSuchA (opset 1, 1 node). ")
    assert out[0].endswith("the dynashape-contrib-ops plugin (entry point 'example') provides FastGelu but is not "
                           "loaded: see DYNASHAPE_PLUGINS_BLOCK, DYNASHAPE_PLUGINS_ALLOW and DYNASHAPE_NO_ENTRY_POINTS "
                           "(`dynashape plugins` lists the loaded ones)")
    assert out[1].startswith("UnsupportedOperatorError operator NoSuchA of domain 'com.microsoft' at opset 1")
    assert "dynashape-contrib-ops" not in out[1]


def test_an_uninstalled_plugin_is_suggested_and_one_that_lacks_the_op_is_not(monkeypatch):
    from dynashape import graph
    for provides in (None, False):     # (not installed: it may have the op; installed without it)
        monkeypatch.setattr(graph, "plugin_provides", lambda name, domain, op, provides=provides: provides)
        with pytest.raises(dynashape.UnsupportedOperatorError) as info:
            dynashape.InferenceSession(_missing_contrib_ops_model("NoSuchA"))
        msg = str(info.value)
        if provides is None:
            assert msg.endswith("ONNX Runtime's contrib ops (com.microsoft): many come with the dynashape-contrib-ops "
                                "plugin, which is not installed: pip install ./plugins_example (in the dynashape "
                                "repository)")
        else:
            assert "operator NoSuchA of domain 'com.microsoft'" in msg and "dynashape-contrib-ops" not in msg


def test_one_missing_operator_of_an_unknown_domain_keeps_its_own_message():
    with pytest.raises(dynashape.UnsupportedOperatorError, match="operator Nope of domain 'com.nowhere' at opset 1 "
                                                                 "\\(node 'Nope_0'\\) has no registered definition"):
        dynashape.InferenceSession(_one_node_model("Nope", "com.nowhere"))


def test_a_kernel_leaving_its_scratch_buffer_unused_passes_the_check(registered):
    """(Only the node's outputs are poisoned and checked, not the scratch buffers after them.)"""
    lib = OpLibrary()

    @lib.op("Copy", since_version=1, domain="com.example.scratch", infer_dtype=same_dtype(0))
    def _shape(ctx):
        return [ctx.shape(0)]

    @lib.kernel("Copy", domain="com.example.scratch", scratch=lambda ctx: [((4,), np.float32)])
    def _copy(inputs, outputs, ctx):
        np.copyto(outputs[0], inputs[0])

    registered(lib, "unused-scratch")
    x = np.array([1, 2, 3], np.float32)
    for validate in (False, True):
        sess = dynashape.InferenceSession(_one_node_model("Copy", "com.example.scratch"), validate_memory=validate)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x)


# accepts, prepack, whole-graph passes -------------------------------------------------

def _weighted_model(w: np.ndarray, extra_reader: bool = False):
    """y = x @ w (and, with ``extra_reader``, s = w + x2: a second node reading the weight)."""
    from onnx import numpy_helper
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", w.shape[0]])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:
        nodes.append(helper.make_node("Add", ["w", "x2"], ["s"]))
        inputs.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, list(w.shape)))
        outputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_kernel_that_declines_a_node_passes_it_to_the_next_by_priority(registered):
    lib = OpLibrary()
    seen = []

    def accepts(ctx):
        seen.append(ctx.shape(0))
        return ctx.value(1) is not None and ctx.value(1).shape[1] == 3   # only a 3-column constant weight

    @lib.kernel("MatMul", priority=99, accepts=accepts)
    def _doubled(inputs, outputs, ctx):
        np.multiply(inputs[0] @ inputs[1], 2, out=outputs[0])

    registered(lib, "picky")
    x = np.ones((2, 4), np.float32)
    three = dynashape.InferenceSession(_weighted_model(np.ones((4, 3), np.float32)))
    five = dynashape.InferenceSession(_weighted_model(np.ones((4, 5), np.float32)))
    assert three.program.steps[0].kernel.plugin == "picky" and five.program.steps[0].kernel.plugin != "picky"
    np.testing.assert_array_equal(three.run(None, {"x": x})[0], np.full((2, 3), 8.0))
    np.testing.assert_array_equal(five.run(None, {"x": x})[0], np.full((2, 5), 4.0))
    assert seen and len(seen[0]) == 2


def test_an_accepts_that_raises_names_the_plugin(registered):
    lib = OpLibrary()

    @lib.kernel("MatMul", priority=99, accepts=lambda ctx: 1 / 0)
    def _never(inputs, outputs, ctx):
        raise AssertionError("not chosen")

    registered(lib, "broken-accepts")
    with pytest.raises(dynashape.PluginContractError, match="broken-accepts"):
        dynashape.get_registry().resolve_kernel("", "MatMul", 17, np.dtype(np.float32), ctx=object())


def _packing_plugin(calls: list) -> OpLibrary:
    """MatMul whose weight is prepacked as its transpose (a stand-in for a blocked layout)."""
    lib = OpLibrary()

    def prepack(ctx):
        calls.append("prepack")
        return np.ascontiguousarray(ctx.value(1).T)

    def prepare(ctx):
        return ctx.prepacked

    @lib.kernel("MatMul", priority=99, prepack=prepack, prepack_inputs=(1,), prepare=prepare,
                accepts=lambda ctx: ctx.value(1) is not None)
    def _packed_matmul(inputs, outputs, packed):
        w = inputs[1].T if packed is None else packed   # outside a program: the plain weight
        assert (packed is None) == (inputs[1] is not None)
        np.matmul(inputs[0], w.T, out=outputs[0])

    return lib


def test_a_prepacked_weight_replaces_the_initializer(registered):
    calls = []
    registered(_packing_plugin(calls), "packer")
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    sess = dynashape.InferenceSession(_weighted_model(w))
    (step,) = sess.program.steps
    assert calls == ["prepack"] and step.inputs[1] == -1
    np.testing.assert_array_equal(step.prepacked, w.T)
    slot = sess.graph.slot["w"]
    assert slot in sess.graph.packed_away and sess.program.template[slot] is None
    assert sess.graph.constants[slot].strides == (0, 0)   # a stand-in: the shape, no data
    for n in (2, 5, 0, 2):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ w, rtol=1e-6)
    assert calls == ["prepack"], "made once per node, whatever the signatures"


def test_a_weight_another_node_reads_stays(registered):
    registered(_packing_plugin([]), "packer")
    w = np.ones((4, 3), np.float32)
    sess = dynashape.InferenceSession(_weighted_model(w, extra_reader=True))
    assert sess.graph.packed_away == set()
    x, x2 = np.ones((2, 4), np.float32), np.full((4, 3), 2.0, np.float32)
    y, s = sess.run(None, {"x": x, "x2": x2})
    np.testing.assert_array_equal(y, np.full((2, 3), 4.0))
    np.testing.assert_array_equal(s, np.full((4, 3), 3.0))


def test_a_graph_pass_rewrites_the_whole_graph_and_is_reported(registered):
    from dynashape.model import Node
    from dynashape.rewrite import GraphPass

    def negate_relus(view):
        nodes = []
        for n in view.nodes:
            if n.op_type == "Relu":
                mid = view.fresh("neg")
                nodes += [Node(n.name + "/neg", "Neg", "", n.inputs, (mid,)),
                          Node(n.name, "Relu", "", (mid,), n.outputs)]
            else:
                nodes.append(n)
        return nodes, {}

    plugin = types.SimpleNamespace(dynashape_register_rewrites=hookimpl(
        lambda: [GraphPass("negate_relus", negate_relus, roots=(("", "Relu"),), priority=1)]))
    name = dynashape.register_plugin(plugin, name="graph-pass")
    try:
        sess = dynashape.InferenceSession(_one_node_model("Relu"), optimize=True)
        assert sess.rewrites.counts() == {"negate_relus": 1}
        assert sess.rewrites.fired[0].plugin == "graph-pass" and sess.rewrites.fired[0].added == 2
        np.testing.assert_array_equal(sess.run(None, {"x": np.array([1, -2], np.float32)})[0], [0, 2])
        untouched = dynashape.InferenceSession(_one_node_model("Neg"), optimize=True)
        assert untouched.rewrites.counts() == {}
    finally:
        dynashape.unregister_plugin(name)


def test_default_threads_follow_omp_num_threads_else_the_cpus(monkeypatch):
    import os

    from dynashape import threads
    threads.default_threads.cache_clear()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert threads.default_threads() == 3
        threads.default_threads.cache_clear()
        monkeypatch.delenv("OMP_NUM_THREADS")
        assert threads.default_threads() == len(os.sched_getaffinity(0))
    finally:
        threads.default_threads.cache_clear()


def test_registering_the_same_plugin_twice_is_quiet_and_a_taken_name_is_one_short_error():
    """A notebook cell that registers its plugin runs twice: the second time does nothing;
    another plugin under a taken name is refused in one line naming the way out."""
    from dynashape.records import OpLibrary
    plugin = OpLibrary().plugin()
    name = dynashape.register_plugin(plugin, name="twice-plugin")
    try:
        assert dynashape.register_plugin(plugin, name="twice-plugin") == name == "twice-plugin"
        with pytest.raises(dynashape.PluginError) as info:
            dynashape.register_plugin(OpLibrary().plugin(), name="twice-plugin")
        text = str(info.value)
        assert text == ("plugin 'twice-plugin' could not be registered: another plugin has that name; "
                        "unregister_plugin('twice-plugin') first, or register this one under another name")
        assert "namespace(" not in text and "<function" not in text
    finally:
        dynashape.unregister_plugin("twice-plugin")


def test_a_plugin_op_runs_its_subgraphs_with_their_outer_scope_values_by_name(registered):
    """ctx.subgraph(attribute) binds a body to the node's kernel inputs: the outer-scope values
    both bodies read come appended after the node's own inputs, sorted by name, and
    ``run``/``outer_values`` take them by name; an outer value that is an initializer is
    compiled into the body and not appended."""
    lib = OpLibrary()

    @lib.op("TwoBodies", since_version=1, domain="com.example", infer_dtype=same_dtype(0))
    def _shape(ctx):
        return [ctx.shape(0)]

    def _prepare(ctx):
        return ctx.subgraph("first"), ctx.subgraph("second")

    @lib.kernel("TwoBodies", domain="com.example", prepare=_prepare)
    def _two_bodies(inputs, outputs, prepared):
        first, second = prepared
        assert first.names == second.names == ("s", "t")
        assert sorted(first.outer_values(inputs)) == ["s", "t"]
        np.add(first.run([inputs[0]], inputs)[0], second.run([inputs[0]], inputs)[0], out=outputs[0])

    f = TensorProto.FLOAT
    first = helper.make_graph([helper.make_node("Mul", ["a", "s"], ["as"]),
                               helper.make_node("Add", ["as", "w"], ["r"])], "first",
                              [helper.make_tensor_value_info("a", f, ["n"])],
                              [helper.make_tensor_value_info("r", f, ["n"])])
    second = helper.make_graph([helper.make_node("Sub", ["b", "t"], ["q"])], "second",
                               [helper.make_tensor_value_info("b", f, ["n"])],
                               [helper.make_tensor_value_info("q", f, ["n"])])
    node = helper.make_node("TwoBodies", ["x"], ["y"], domain="com.example", first=first, second=second)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, f, shape) for n, shape in
                                        [("x", ["n"]), ("s", [1]), ("t", [1])]],
                          [helper.make_tensor_value_info("y", f, ["n"])],
                          [helper.make_tensor("w", f, [1], [0.5])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    registered(lib, "two-bodies-plugin")
    sess = dynashape.InferenceSession(model.SerializeToString())
    x = np.array([1.0, 2.0, -3.0], np.float32)
    (y,) = sess.run(None, {"x": x, "s": np.array([2.0], np.float32), "t": np.array([10.0], np.float32)})
    np.testing.assert_array_equal(y, (x * 2 + 0.5) + (x - 10))        # [-6.5, -3.5, -18.5]
    bound = NodeSubgraph(None, types.SimpleNamespace(op_type="TwoBodies", name="tb", inputs=("x",)), ("s", "t"))
    with pytest.raises(dynashape.errors.ExecutionError, match="TwoBodies node 'tb': 2 outer-scope values expected "
                                                              "after its inputs, got 1 values"):
        bound.outer_values([x, x])
