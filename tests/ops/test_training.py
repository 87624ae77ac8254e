"""Tests of the ai.onnx.preview.training family (ops_builtin/training.py): Adagrad, Momentum, Adam.

onnxruntime's CPU build has none of these ops: values are compared with onnx.reference
(ReferenceEvaluator) on one session through changing symbolic shapes, both allocators.
"""
from __future__ import annotations

import dynashape
import numpy as np
import pytest
from dynashape.registry import get_registry
from dynashape.testing import run_node
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from tests.conftest import spec_versions

DOMAIN = "ai.onnx.preview.training"
F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE
rng = np.random.default_rng(0)

#: op -> (state tensor names, attributes)
OPS = {
    "Adagrad": (["H"], {"norm_coefficient": 0.01, "decay_factor": 0.1, "epsilon": 1e-5}),
    "Momentum": (["V"], {"norm_coefficient": 0.001, "alpha": 0.9, "beta": 0.1, "mode": "standard"}),
    "Nesterov": (["V"], {"norm_coefficient": 0.01, "alpha": 0.95, "beta": 0.5, "mode": "nesterov"}),
    "Adam": (["V", "H"], {"norm_coefficient": 0.001, "norm_coefficient_post": 0.01, "alpha": 0.9, "beta": 0.99,
                          "epsilon": 1e-3}),
}


def optimizer_model(name, dims_list, elem=F32):
    """An optimizer node over tensors of the given dims (one entry per optimised tensor)."""
    op = "Momentum" if name == "Nesterov" else name
    states, attrs = OPS[name]
    n = len(dims_list)
    groups = ["X", "G"] + states
    ins = [helper.make_tensor_value_info("R", elem, []), helper.make_tensor_value_info("T", TensorProto.INT64, [])]
    for g in groups:
        ins += [helper.make_tensor_value_info(f"{g}{i}", elem, dims) for i, dims in enumerate(dims_list)]
    outs = [f"{g}{i}_new" for g in ["X"] + states for i in range(n)]
    node = helper.make_node(op, [v.name for v in ins], outs, domain=DOMAIN, **attrs)
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(o, elem, None) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])


def feeds_for(name, shapes, t, dtype=np.float32):
    states = OPS[name][0]
    feeds = {"R": np.array(0.1, dtype), "T": np.array(t, np.int64)}
    for g in ["X", "G"] + states:
        for i, shape in enumerate(shapes):
            v = rng.standard_normal(shape).astype(dtype)
            feeds[f"{g}{i}"] = np.abs(v) if g == "H" else v
    return feeds


def test_every_spec_version_registered():
    for op in ("Adagrad", "Momentum", "Adam"):
        assert sorted(o.since_version for o in get_registry().schemas(DOMAIN, op)) == spec_versions(op, DOMAIN)


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("allocator", ["pool", "naive"])
def test_optimizers_symbolic_shapes_match_reference(name, allocator):
    m = optimizer_model(name, [["A", "B"], ["C"]])
    ref = ReferenceEvaluator(m)
    sess = dynashape.InferenceSession(m, allocator=allocator)
    for t, shapes in ((0, [(2, 3), (4,)]), (3, [(1, 5), (2,)]), (1, [(3, 3), (7,)])):
        feeds = feeds_for(name, shapes, t)
        got, want = sess.run(None, feeds), ref.run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == np.float32 and g.shape == np.shape(w)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["Adagrad", "Adam", "Nesterov"])
def test_optimizers_double(name):
    m = optimizer_model(name, [["N"]], elem=F64)
    feeds = feeds_for(name, [(5,)], 2, np.float64)
    got = dynashape.InferenceSession(m).run(None, feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    for g, w in zip(got, want):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=1e-7)     # the reference keeps float32 attributes


def test_optimizer_errors():
    x = np.ones(3, np.float32)
    r, t = np.float32(0.1), np.int64(1)
    with pytest.raises(dynashape.ShapeInferenceError, match="3 \\* n tensors \\(X, G, H") as e:
        run_node("Adagrad", [r, t, x, x], {}, opset=1, domain=DOMAIN, n_outputs=2)
    assert e.value.kind == "OptimizerInputCount"
    with pytest.raises(dynashape.ShapeInferenceError, match="2 optimised tensors need 4 outputs, got 2") as e:
        run_node("Momentum", [r, t, x, x, x, x, x, x], {"norm_coefficient": 0.0, "alpha": 0.9, "beta": 1.0,
                                                         "mode": "standard"}, opset=1, domain=DOMAIN, n_outputs=2)
    assert e.value.kind == "OptimizerOutputCount"
    with pytest.raises(dynashape.ShapeInferenceError, match="G_1 and X_1 must have the same shape") as e:
        run_node("Adam", [r, t, x, np.ones(4, np.float32), x, x], {}, opset=1, domain=DOMAIN, n_outputs=3)
    assert e.value.kind == "DimMismatch"
    with pytest.raises(dynashape.ShapeInferenceError, match="mode is 'fast'") as e:
        run_node("Momentum", [r, t, x, x, x], {"norm_coefficient": 0.0, "alpha": 0.9, "beta": 1.0, "mode": "fast"},
                 opset=1, domain=DOMAIN, n_outputs=2)
    assert e.value.kind == "InvalidAttribute"
    with pytest.raises(dynashape.ShapeInferenceError, match="attribute 'alpha' is required") as e:
        run_node("Momentum", [r, t, x, x, x], {"norm_coefficient": 0.0, "beta": 1.0, "mode": "standard"},
                 opset=1, domain=DOMAIN, n_outputs=2)
    assert e.value.kind == "MissingAttribute"
    with pytest.raises(dynashape.ShapeInferenceError, match="R must be a scalar, got shape \\(2,\\)"):
        run_node("Adagrad", [np.ones(2, np.float32), t, x, x, x], {}, opset=1, domain=DOMAIN, n_outputs=2)
    with pytest.raises(dynashape.ShapeInferenceError, match="T has dtype int32, expected int64"):
        run_node("Adagrad", [r, np.int32(1), x, x, x], {}, opset=1, domain=DOMAIN, n_outputs=2)
    with pytest.raises(dynashape.ShapeInferenceError, match="H_1 has dtype float64, X_1 has float32"):
        run_node("Adagrad", [r, t, x, x, x.astype(np.float64)], {}, opset=1, domain=DOMAIN, n_outputs=2)


def test_symbolic_shape_mismatch_reported_on_run():
    states, attrs = OPS["Adagrad"]
    ins = [helper.make_tensor_value_info("R", F32, []), helper.make_tensor_value_info("T", TensorProto.INT64, []),
           helper.make_tensor_value_info("X", F32, ["N"]), helper.make_tensor_value_info("G", F32, ["M"]),
           helper.make_tensor_value_info("H", F32, ["N"])]
    node = helper.make_node("Adagrad", ["R", "T", "X", "G", "H"], ["X2", "H2"], domain=DOMAIN, **attrs)
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(o, F32, None) for o in ("X2", "H2")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])
    sess = dynashape.InferenceSession(m)
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(0, np.int64), "X": np.ones(3, np.float32),
             "G": np.ones(3, np.float32), "H": np.ones(3, np.float32)}
    assert sess.run(None, feeds)[0].shape == (3,)
    with pytest.raises(dynashape.ShapeInferenceError, match="G_1 and X_1 must have the same shape"):
        sess.run(None, dict(feeds, G=np.ones(4, np.float32)))
