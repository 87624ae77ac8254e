"""Symbolic dims: the expression type, import-time inference on real models, and the plan cache."""
from __future__ import annotations


import numpy as np
import pytest
from onnx import TensorProto, helper

import dynashape
from dynashape.demo import build_demo_model, demo_input
from dynashape.executor import execute
from dynashape.inspect import inspect_session
from dynashape.symbolic import dim_max, dim_min, evaluate, provably_unequal, sym
from tests.models.test_zoo import zoo_entry, zoo_feeds

b, s, h = sym("batch"), sym("seq"), sym("h")


def test_expressions_have_one_canonical_form():
    assert b * 6 // 6 == b
    assert (b * s * 2) // s == b * 2
    assert str(s * 2) == "seq*2"
    assert hash(b + 1) == hash(1 + b)
    assert (b + s) - s == b
    assert (h - 1) // 2 // 2 + 1 == (h - 1) // 4 + 1


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


def test_seed_demo_output_is_batch_by_6_before_any_run():
    sess = dynashape.InferenceSession(build_demo_model())
    assert sess.get_outputs()[0].shape == ["batch", 6]
    assert sess.stats.runs == 0


def test_output_shape_is_inferred_when_the_model_declares_none():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "t"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["y"], axis=1)], "g", [x], [y])
    sess = dynashape.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert sess.get_outputs()[0].shape == ["n", "t*2"]


def test_declared_output_shape_contradicting_inference_is_reported():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    with pytest.warns(RuntimeWarning, match=r"output 'y', axis 1: declared 4, inferred 3"):
        sess = dynashape.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert sess.get_outputs()[0].shape == [2, 3]


#: tensors per zoo model (graph inputs + node outputs) and how many are data-dependent
ZOO_COUNTS = {
    "bert_tiny": (259, 0), "cnn_small": (36, 0), "distilbert_tiny": (251, 0), "dynamo/bert_tiny": (107, 0),
    "dynamo/gpt2_tiny": (119, 0), "gpt2_tiny": (500, 0), "lstm_small": (43, 0), "mlp_dynamic": (18, 0),
    "ppocrv4_det": (673, 0), "resnet_tiny": (36, 0), "seed_demo": (8, 0), "silero_vad_16k_sequence": (68, 0),
    "vit_tiny": (200, 0), "whisper_encoder_tiny": (179, 0),
}


def _zoo_session(key):
    from tests.conftest import shared_path
    return dynashape.InferenceSession(str(shared_path("zoo", zoo_entry(key)["file"])), allocator="naive")


@pytest.mark.parametrize("key", sorted(ZOO_COUNTS))
def test_every_zoo_tensor_is_fully_symbolic(key):
    summary = inspect_session(_zoo_session(key))["summary"]
    tensors, data_dependent = ZOO_COUNTS[key]
    assert summary == {"tensors": tensors, "fully_symbolic": tensors - data_dependent,
                       "data_dependent": data_dependent}


@pytest.mark.parametrize("key", sorted(ZOO_COUNTS))
def test_symbolic_shapes_evaluate_to_the_shapes_seen_at_run_time(key):
    sess = _zoo_session(key)
    sg, pg = sess.symbolic, sess.graph
    for shape_name in ("small", "odd"):
        if shape_name not in zoo_entry(key)["shapes"]:
            continue
        feeds = {pg.slot[k]: v for k, v in zoo_feeds(key, shape_name).items()}
        env = {name: feeds[slot].shape[axis] for name, (slot, axis) in sg.input_symbols.items()}
        sess.use_symbolic_plans = False  # plan by per-node inference, then execute for real
        plan = sess._plan(("check", shape_name), feeds)
        vals, _ = execute(pg, plan, sess.registry, feeds)
        checked = 0
        for slot, shape in enumerate(sg.shapes):
            if vals[slot] is None or slot in pg.constants:
                continue
            assert tuple(evaluate(d, env) for d in shape) == np.shape(vals[slot]), pg.names[slot]
            checked += 1
        assert checked >= len(plan.steps) > 0


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


def test_shape_tensor_graph_input_makes_the_plan_value_dependent():
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
    assert (sess.stats.cache_misses, sess.stats.cache_hits) == (3, 1)
    assert sess.stats.resolved_plans == 3  # data-dependent: planned by per-node inference
