"""Tests of ops_builtin/random.py: RandomNormal, RandomUniform, RandomNormalLike,
RandomUniformLike, Bernoulli and Multinomial.

The values of a random op cannot be compared with onnxruntime's or the reference
implementation's (different generators; the spec calls them non-deterministic even with a
seed), so these tests check shapes and dtypes, the distribution (moments of large samples,
bounds, probabilities 0 and 1), reproducibility with a seed and fresh draws without one,
symbolic shapes through one session, and the errors.
"""
from __future__ import annotations

import dynashape
import ml_dtypes
import numpy as np
import onnx
import pytest
from dynashape.registry import get_registry
from dynashape.symbolic import sym
from dynashape.testing import infer_node, run_node
from onnx import TensorProto, helper

from tests.conftest import spec_versions, symbolic_context

RNG = np.random.default_rng(11)
OPS = ["RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"]


def model_of(op, attrs, opset, inputs=(), dims=None, n_nodes=1):
    """One-node (or several identical nodes) model; inputs declared with ``dims``."""
    names = [f"in{i}" for i in range(len(inputs))]
    nodes = [helper.make_node(op, names, [f"out{k}"], name=f"n{k}", **attrs) for k in range(n_nodes)]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype),
                                       x.shape if dims is None else dims[i])
         for i, (n, x) in enumerate(zip(names, inputs))],
        [onnx.ValueInfoProto(name=f"out{k}") for k in range(n_nodes)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("op", OPS)
def test_every_spec_version_registered_and_never_folded(op):
    schemas = get_registry().schemas("", op)
    assert sorted(o.since_version for o in schemas) == spec_versions(op)
    assert not any(o.deterministic for o in schemas)


# shapes and dtypes -------------------------------------------------------------------------

@pytest.mark.parametrize("opset", [1, 22])
@pytest.mark.parametrize("op", ["RandomNormal", "RandomUniform"])
def test_fixed_shape_and_dtype(op, opset):
    (y,) = run_node(op, [], {"shape": [3, 0, 2]}, opset=opset)
    assert y.shape == (3, 0, 2) and y.dtype == np.float32
    for elem, dt in ((TensorProto.DOUBLE, np.float64), (TensorProto.FLOAT16, np.float16),
                     (TensorProto.BFLOAT16, ml_dtypes.bfloat16)):
        (y,) = run_node(op, [], {"shape": [4, 5], "dtype": elem}, opset=opset)
        assert y.shape == (4, 5) and y.dtype == np.dtype(dt)


@pytest.mark.parametrize("op", ["RandomNormalLike", "RandomUniformLike"])
def test_like_shape_and_dtype(op):
    x = np.zeros((2, 3), np.float64)
    (y,) = run_node(op, [x], {}, opset=22)
    assert y.shape == (2, 3) and y.dtype == np.float64
    (y,) = run_node(op, [np.zeros((4,), np.int32)], {"dtype": TensorProto.FLOAT16}, opset=1)
    assert y.shape == (4,) and y.dtype == np.float16
    (y,) = run_node(op, [np.array(["a", "b"], dtype=object)], {"dtype": TensorProto.FLOAT}, opset=22)
    assert y.shape == (2,) and y.dtype == np.float32


def test_symbolic_inference():
    n, s = sym("N"), sym("S")
    ctx, op = symbolic_context("RandomUniformLike", [(n, s, 4)], [np.float16], opset=22)
    assert op.infer_shape(ctx) == [(n, s, 4)] and op.infer_dtype(ctx) == [np.dtype(np.float16)]
    ctx, op = symbolic_context("Multinomial", [(n, 10)], attrs={"sample_size": 7, "dtype": TensorProto.INT64},
                               opset=7)
    assert op.infer_shape(ctx) == [(n, 7)] and op.infer_dtype(ctx) == [np.dtype(np.int64)]
    shapes, dtypes = infer_node("Bernoulli", [np.zeros((2, 3), np.float32)], {"dtype": TensorProto.BOOL}, opset=15)
    assert shapes == [(2, 3)] and dtypes == [np.dtype(bool)]


# distributions ------------------------------------------------------------------------------

def test_normal_moments():
    (y,) = run_node("RandomNormal", [], {"shape": [200, 500], "mean": 3.0, "scale": 2.0, "seed": 1.0}, opset=22)
    assert abs(y.mean() - 3.0) < 0.05 and abs(y.std() - 2.0) < 0.05
    (z,) = run_node("RandomNormalLike", [np.zeros((100000,), np.float16)], {"mean": -1.0, "scale": 0.5}, opset=22)
    assert z.dtype == np.float16
    z = z.astype(np.float32)
    assert abs(z.mean() + 1.0) < 0.02 and abs(z.std() - 0.5) < 0.02


def test_uniform_bounds_and_moments():
    (y,) = run_node("RandomUniform", [], {"shape": [100000], "low": -2.0, "high": 6.0, "dtype": TensorProto.DOUBLE},
                    opset=1)
    assert y.min() >= -2.0 and y.max() < 6.0 and abs(y.mean() - 2.0) < 0.05
    assert abs(y.std() - 8 / np.sqrt(12)) < 0.05
    (z,) = run_node("RandomUniformLike", [np.zeros((50000,), np.float32)], {}, opset=22)
    assert z.min() >= 0.0 and z.max() < 1.0 and abs(z.mean() - 0.5) < 0.01


def test_bernoulli_probabilities_and_dtypes():
    p = np.array([0.0, 1.0, 0.0, 1.0], np.float32)
    for elem, dt in ((None, np.float32), (TensorProto.INT32, np.int32), (TensorProto.BOOL, np.bool_),
                     (TensorProto.DOUBLE, np.float64)):
        attrs = {} if elem is None else {"dtype": elem}
        (y,) = run_node("Bernoulli", [p], attrs, opset=22)
        assert y.dtype == np.dtype(dt) and y.astype(np.float32).tolist() == [0.0, 1.0, 0.0, 1.0]
    (y,) = run_node("Bernoulli", [np.full((400, 250), 0.3)], {}, opset=15)
    assert y.dtype == np.float64 and set(np.unique(y)) <= {0.0, 1.0} and abs(y.mean() - 0.3) < 0.01


def test_multinomial_follows_softmax():
    ninf = -np.inf
    logits = np.float32([np.log([0.1, 0.6, 0.3]), [0.0, ninf, ninf], [ninf, ninf, 0.0]])
    (y,) = run_node("Multinomial", [logits], {"sample_size": 20000, "seed": 5.0}, opset=7)
    assert y.dtype == np.int32 and y.shape == (3, 20000)
    freq = np.stack([(y[0] == k).mean() for k in range(3)])
    np.testing.assert_allclose(freq, [0.1, 0.6, 0.3], atol=0.015)
    assert (y[1] == 0).all() and (y[2] == 2).all()     # -inf logits are never drawn
    (z,) = run_node("Multinomial", [np.float64([[0.0, 50.0, 0.0]] * 4)], {"dtype": TensorProto.INT64}, opset=22)
    assert z.dtype == np.int64 and z.shape == (4, 1) and (z == 1).all()
    (e,) = run_node("Multinomial", [np.zeros((0, 5), np.float32)], {"sample_size": 3}, opset=22)
    assert e.shape == (0, 3)


# seeds: reproducible runs; without a seed: fresh draws, never folded ------------------------------

@pytest.mark.parametrize("op,attrs,inputs", [
    ("RandomNormal", {"shape": [3, 4]}, []), ("RandomUniform", {"shape": [5]}, []),
    ("RandomNormalLike", {}, [np.zeros((2, 3), np.float32)]),
    ("RandomUniformLike", {}, [np.zeros((2, 3), np.float32)]),
    ("Bernoulli", {}, [np.full((64,), 0.5, np.float32)]),
    ("Multinomial", {"sample_size": 16}, [np.zeros((4, 6), np.float32)]),
])
def test_seed_reproducible_and_unseeded_fresh(op, attrs, inputs):
    seeded = model_of(op, {**attrs, "seed": 3.0}, 22, inputs)
    feeds = {f"in{i}": x for i, x in enumerate(inputs)}
    first = dynashape.InferenceSession(seeded).run(None, feeds)[0]
    sess = dynashape.InferenceSession(seeded, allocator="naive")
    for _ in range(3):
        np.testing.assert_array_equal(sess.run(None, feeds)[0], first)
    other = model_of(op, {**attrs, "seed": 4.5}, 22, inputs)
    assert not np.array_equal(dynashape.InferenceSession(other).run(None, feeds)[0], first)
    sess = dynashape.InferenceSession(model_of(op, attrs, 22, inputs))
    draws = [sess.run(None, feeds)[0] for _ in range(3)]
    assert not (np.array_equal(draws[0], draws[1]) and np.array_equal(draws[1], draws[2]))


def test_unseeded_nodes_of_one_model_differ():
    """Two identical unseeded nodes (no inputs: constant-looking) are neither folded nor shared."""
    sess = dynashape.InferenceSession(model_of("RandomUniform", {"shape": [8]}, 22, n_nodes=2))
    a, b = sess.run(None, {})
    assert a.shape == b.shape == (8,) and not np.array_equal(a, b)


@pytest.mark.parametrize("allocator", ["pool", "naive"])
def test_like_through_symbolic_shapes_on_one_session(allocator):
    x = np.zeros((2, 3), np.float32)
    model = model_of("RandomUniformLike", {"low": 1.0, "high": 2.0, "dtype": TensorProto.DOUBLE}, 22, [x],
                     dims=[["N", "M"]])
    sess = dynashape.InferenceSession(model, allocator=allocator)
    assert sess.get_inferred_outputs()[0].shape == ["N", "M"]
    for shape in [(2, 3), (5, 1), (0, 4), (7, 7), (2, 3)]:
        (y,) = sess.run(None, {"in0": np.zeros(shape, np.float32)})
        assert y.shape == shape and y.dtype == np.float64
        assert y.size == 0 or (y.min() >= 1.0 and y.max() < 2.0)
    model = model_of("Multinomial", {"sample_size": 3, "seed": 0.0}, 22, [x], dims=[["B", "C"]])
    sess = dynashape.InferenceSession(model, allocator=allocator)
    for b, c in [(2, 3), (4, 9), (1, 1)]:
        (y,) = sess.run(None, {"in0": RNG.standard_normal((b, c)).astype(np.float32)})
        assert y.shape == (b, 3) and y.dtype == np.int32 and y.min() >= 0 and y.max() < c


# errors --------------------------------------------------------------------------------------

@pytest.mark.parametrize("op,inputs,attrs,kind,match", [
    ("RandomNormal", [], {}, "MissingAttribute", "'shape' is required"),
    ("RandomUniform", [], {"shape": [2, -1]}, "InvalidAttribute", "negative"),
    ("RandomUniform", [], {"shape": [2], "dtype": TensorProto.INT32}, "InvalidAttribute", "floating-point"),
    ("RandomNormalLike", [np.zeros(3, np.int64)], {}, "InvalidAttribute", "floating-point"),
    ("Bernoulli", [np.zeros(3, np.int32)], {}, "UnsupportedDtype", "probabilities"),
    ("Bernoulli", [np.zeros(3, np.float32)], {"dtype": TensorProto.STRING}, "InvalidAttribute", "numeric or bool"),
    ("Multinomial", [np.zeros(3, np.float32)], {}, "InvalidRank", "2-D"),
    ("Multinomial", [np.zeros((2, 3), np.float32)], {"sample_size": 0}, "InvalidAttribute", "sample_size 0"),
    ("Multinomial", [np.zeros((2, 3), np.float32)], {"dtype": TensorProto.FLOAT}, "InvalidAttribute",
     "int32 or int64"),
])
def test_errors(op, inputs, attrs, kind, match):
    with pytest.raises(dynashape.ShapeInferenceError, match=match) as info:
        run_node(op, inputs, attrs, opset=22)
    assert info.value.kind == kind
