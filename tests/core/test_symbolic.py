"""Symbolic dims: the expression type, import-time inference on real models, and the plan cache."""
from __future__ import annotations


import numpy as np
import pytest
from onnx import TensorProto, helper

import dynashape
from dynashape.demo import build_demo_model, demo_input
from dynashape.inspect import inspect_session
from dynashape.symbolic import (CODE_NAMESPACE, BroadcastError, dim_broadcast, dim_max, dim_min, evaluate,
                                free_symbols, is_nonneg, provably_unequal, sym, to_code)
from tests.models.test_zoo import zoo_entry, zoo_feeds

b, s, h = sym("batch"), sym("seq"), sym("h")


def test_expressions_have_one_canonical_form():
    assert b * 6 // 6 == b
    assert (b * s * 2) // s == b * 2
    assert str(s * 2) == "seq*2"
    assert hash(b + 1) == hash(1 + b)
    assert (b + s) - s == b
    assert (h - 1) // 2 // 2 + 1 == (h - 1) // 4 + 1


def test_products_by_ints_and_sums_with_zero_keep_the_canonical_form():
    """The int fast paths of ``*`` and ``+`` give the polynomial the general path gives: equal,
    with one hash, and one entry in a dict or a set."""
    e = (b + s) * 2
    assert e * 1 is e and e + 0 is e and 0 + e is e and e * 0 == 0
    assert e == b * 2 + s * 2 == 2 * b + 2 * s and hash(e) == hash(s * 2 + b * 2)
    assert (e * 3) * -1 == -(b * 6) - s * 6 and evaluate(e * 3, {"batch": 2, "seq": 5}) == 42
    assert len({e, b * 2 + s * 2, dim_max(b, s) * 2, 2 * dim_max(s, b)}) == 2
    assert dim_max(e, 1) == dim_max(2 * s + 2 * b, 1) and dim_max(e, 1) != dim_max(e, 2)


def test_max_min_fold_and_absorb():
    assert dim_max(s, dim_min(s, 512)) == s
    assert dim_max(b, b + 1) == b + 1
    assert dim_max(3, 5) == 5 and dim_min(b, b) == b
    assert str(dim_max(b, s)) == "max(batch, seq)"


@pytest.mark.parametrize("expr,env,value", [
    ((h - 1) // 2 + 1, {"h": 7}, 4),
    (dim_max(b, s) * 2, {"batch": 1, "seq": 5}, 10),
    (b * s % 4, {"batch": 3, "seq": 3}, 1),
])
def test_evaluate(expr, env, value):
    assert evaluate(expr, env) == value


def test_provably_unequal_uses_dims_being_non_negative():
    assert provably_unequal(b, -1) and provably_unequal(b + 1, b)
    assert not provably_unequal(b, s) and not provably_unequal(b, 1)


# broadcast(a, b): ONNX multidirectional broadcasting (onnx/docs/Broadcasting.md) -----------

P, Q, R = sym("P"), sym("Q"), sym("R")


def test_broadcast_simplifies_what_is_provable():
    assert dim_broadcast(P, P) == P and dim_broadcast(P + 1, 1 + P) == P + 1
    assert dim_broadcast(P, 1) == P and dim_broadcast(1, P * 2) == P * 2
    assert dim_broadcast(1, 5) == 5 and dim_broadcast(5, 1) == 5 and dim_broadcast(4, 4) == 4
    assert dim_broadcast(0, 1) == 0 and dim_broadcast(1, 0) == 0 and dim_broadcast(0, 0) == 0
    assert dim_broadcast(1, 1) == 1 and dim_broadcast() == 1
    assert dim_broadcast(P, 5, 1, 5) == dim_broadcast(P, 5)


def test_two_ints_that_cannot_broadcast_raise_with_both_values():
    for a, b in ((2, 3), (0, 2), (3, 0)):
        with pytest.raises(BroadcastError) as info:
            dim_broadcast(a, b)
        assert (info.value.a, info.value.b) == (a, b) and isinstance(info.value, ValueError)
        assert "cannot be broadcast" in str(info.value)
    with pytest.raises(BroadcastError):
        dim_broadcast(P, 2, 3)  # the constants alone already clash


def test_broadcast_atom_is_canonical():
    assert dim_broadcast(P, Q) == dim_broadcast(Q, P)
    assert hash(dim_broadcast(P, Q)) == hash(dim_broadcast(Q, P))
    assert str(dim_broadcast(Q, P)) == "broadcast(P, Q)"
    assert str(dim_broadcast(5, P)) == "broadcast(P, 5)" and str(dim_broadcast(P, 0)) == "broadcast(P, 0)"
    nested = dim_broadcast(dim_broadcast(R, P), dim_broadcast(Q, P))
    assert nested == dim_broadcast(P, Q, R) and str(nested) == "broadcast(P, Q, R)"
    assert dim_broadcast(dim_broadcast(P, Q), Q, 1) == dim_broadcast(P, Q)
    # a symbol against a constant is not the constant: it is 5 only when P is 1 or 5
    assert dim_broadcast(P, 5) != 5 and dim_broadcast(P, 0) != 0
    # a broadcast is not a max, and a power of one is not flattened into another
    assert dim_broadcast(P, Q) != dim_max(P, Q)
    assert dim_broadcast(dim_broadcast(P, Q) * dim_broadcast(P, Q), R) != dim_broadcast(P, Q, R)
    assert dim_max(dim_max(P, Q) * dim_max(P, Q), R) != dim_max(P, Q, R)


@pytest.mark.parametrize("p,q,want", [
    (1, 7, 7), (7, 1, 7), (7, 7, 7), (0, 1, 0), (1, 0, 0), (0, 0, 0), (1, 1, 1),
    (2, 3, None), (0, 3, None), (3, 0, None),
])
def test_broadcast_evaluates_with_the_onnx_rule(p, q, want):
    env = {"P": p, "Q": q}
    expr = dim_broadcast(P, Q) * 2 + 1
    code = to_code(expr, lambda name: f"env[{name!r}]")
    def compiled():
        return eval(code, dict(CODE_NAMESPACE), {"env": env})
    if want is None:
        with pytest.raises(BroadcastError) as info:
            evaluate(expr, env)
        assert {info.value.a, info.value.b} == {p, q}
        with pytest.raises(BroadcastError):
            compiled()
    else:
        assert evaluate(expr, env) == want * 2 + 1
        assert compiled() == want * 2 + 1


def test_to_code_only_calls_the_functions_of_code_namespace():
    expr = dim_broadcast(P, dim_max(Q, 1), dim_min(R, 2)) * 10 + P // 2
    code = to_code(expr, lambda name: name)
    assert "_broadcast(" in code
    assert set(compile(code, "<test>", "eval").co_names) <= {"P", "Q", "R"} | set(CODE_NAMESPACE)
    for env, want in (({"P": 0, "Q": 1, "R": 1}, 0), ({"P": 1, "Q": 0, "R": 1}, 10),
                      ({"P": 2, "Q": 2, "R": 5}, 21), ({"P": 1, "Q": 4, "R": 1}, 40)):
        assert eval(code, dict(CODE_NAMESPACE), dict(env)) == evaluate(expr, env) == want


def test_broadcast_with_a_constant_is_checked_at_evaluation():
    d = dim_broadcast(P, 5)
    assert evaluate(d, {"P": 1}) == 5 and evaluate(d, {"P": 5}) == 5
    with pytest.raises(BroadcastError):
        evaluate(d, {"P": 0})
    zero = dim_broadcast(P, 0)
    assert evaluate(zero, {"P": 1}) == 0 and evaluate(zero, {"P": 0}) == 0
    with pytest.raises(BroadcastError):
        evaluate(zero, {"P": 4})


def test_broadcast_atom_symbols_sign_and_relations():
    d = dim_broadcast(P, Q + 1)
    assert free_symbols(d) == {"P", "Q"} and free_symbols(d * R) == {"P", "Q", "R"}
    assert is_nonneg(d) and not is_nonneg(dim_broadcast(P, Q - 1))
    assert provably_unequal(d + 1, d) and provably_unequal(d, -1) and not provably_unequal(d, P)
    assert dim_max(d, 0) == d and dim_max(d, d + 1) == d + 1 and dim_min(d, d) == d


def test_seed_demo_output_is_batch_by_6_before_any_run():
    sess = dynashape.InferenceSession(build_demo_model())
    assert sess.get_inferred_outputs()[0].shape == ["batch", 6]
    assert sess.stats.runs == 0


def test_output_shape_is_inferred_when_the_model_declares_none():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "t"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["y"], axis=1)], "g", [x], [y])
    sess = dynashape.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert sess.get_inferred_outputs()[0].shape == ["n", "t*2"]


def test_declared_output_shape_contradicting_inference_is_reported():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    with pytest.warns(RuntimeWarning, match=r"output 'y', axis 1: declared 4, inferred 3"):
        sess = dynashape.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert sess.get_inferred_outputs()[0].shape == [2, 3]


#: tensors per zoo model (graph inputs + node outputs) and how many are data-dependent
ZOO_COUNTS = {
    "bert_tiny": (259, 0), "cnn_small": (36, 0), "distilbert_tiny": (251, 0), "dynamo/bert_tiny": (107, 0),
    "dynamo/gpt2_tiny": (119, 0), "gpt2_tiny": (500, 0), "lstm_small": (43, 0), "mlp_dynamic": (18, 0),
    "ppocrv4_det": (673, 0), "resnet_tiny": (36, 0), "seed_demo": (8, 0), "silero_vad_16k_sequence": (68, 0),
    "vit_tiny": (200, 0), "whisper_encoder_tiny": (179, 0),
}


def _zoo_session(key, optimize=True):
    from tests.conftest import shared_path
    return dynashape.InferenceSession(str(shared_path("zoo", zoo_entry(key)["file"])), allocator="naive",
                                      optimize=optimize)


@pytest.mark.parametrize("key", sorted(ZOO_COUNTS))
def test_every_zoo_tensor_is_fully_symbolic(key):
    summary = inspect_session(_zoo_session(key, optimize=False))["summary"]
    tensors, data_dependent = ZOO_COUNTS[key]
    assert summary == {"tensors": tensors, "fully_symbolic": tensors - data_dependent,
                       "data_dependent": data_dependent}
    rewritten = inspect_session(_zoo_session(key))["summary"]   # fused graphs stay fully symbolic
    assert rewritten["data_dependent"] == data_dependent and rewritten["tensors"] <= tensors


@pytest.mark.parametrize("key", sorted(ZOO_COUNTS))
def test_symbolic_shapes_evaluate_to_the_shapes_seen_at_run_time(key):
    sess = _zoo_session(key)
    sg, pg = sess.symbolic, sess.graph
    for shape_name in ("small", "odd"):
        if shape_name not in zoo_entry(key)["shapes"]:
            continue
        feeds = zoo_feeds(key, shape_name)
        env = {name: feeds[pg.names[slot]].shape[axis] for name, (slot, axis) in sg.input_symbols.items()}
        sess.run(None, feeds)
        vals = sess.engine.last_context.last_values
        checked = 0
        for slot, shape in enumerate(sg.shapes[:len(pg.names)]):   # (kernels' scratch buffers follow)
            if vals[slot] is None or slot in pg.constants:
                continue
            assert tuple(evaluate(d, env) for d in shape) == np.shape(vals[slot]), pg.names[slot]
            checked += 1
        assert checked >= len(sess.program.steps) > 0


def test_plan_cache_hits_and_misses():
    sess = dynashape.InferenceSession(build_demo_model())
    for batch in (1, 2, 8, 3, 1, 2, 8):
        sess.run(None, {"x": demo_input(batch)})
    assert (sess.stats.cache_misses, sess.stats.cache_hits) == (4, 3)
    assert sess.stats.symbolic_plans == 4 and sess.stats.resolved_plans == 0


def test_plan_cache_is_lru_bounded():
    sess = dynashape.InferenceSession(build_demo_model(), plan_cache_size=2)
    for batch in (1, 2, 3, 1):
        sess.run(None, {"x": demo_input(batch)})
    assert (sess.stats.cache_misses, sess.stats.cache_hits) == (4, 0)


def test_shape_tensor_graph_input_makes_its_reader_a_binding_point():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    t = helper.make_tensor_value_info("target", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Reshape", ["x", "target"], ["y"])], "g", [x, t], [y])
    sess = dynashape.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    x6 = np.arange(6, dtype=np.float32)
    shapes = []
    for target in ([2, 3], [3, 2], [2, 3], [6, 1]):
        (out,) = sess.run(None, {"x": x6, "target": np.array(target, np.int64)})
        shapes.append(out.shape)
    assert shapes == [(2, 3), (3, 2), (2, 3), (6, 1)]
    # one signature (x [6], target [2]); the Reshape binds its output dims when it runs
    assert (sess.stats.cache_misses, sess.stats.cache_hits) == (1, 3)
    assert sess.symbolic.status == ["binding"] and sess.stats.resolved_plans == 0
