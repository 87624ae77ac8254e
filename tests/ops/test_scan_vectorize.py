"""A Scan whose iterations are independent runs its body once over every iteration
(ops_builtin/scan_vectorize.py): the same values as onnxruntime and as the per-iteration loop,
through changing shapes, input and output directions and axes, chunks of iterations, and the
bodies that must stay a loop (a changing state, an op the rules do not cover)."""
from __future__ import annotations

import dynashape
import numpy as np
import pytest
from dynashape.model import load_model
from dynashape.ops_builtin import control_flow
from dynashape.ops_builtin.scan_vectorize import vectorize_body
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from tests.conftest import ort_run

F = T.FLOAT


def _scan_model(body_nodes, body_inputs, body_outputs, n_states, inputs, outputs, opset=17, initializers=(),
                **scan_attrs):
    body = helper.make_graph(body_nodes, "body", body_inputs, body_outputs, list(initializers))
    node = helper.make_node("Scan", [i.name for i in inputs], [o.name for o in outputs], body=body,
                            num_scan_inputs=len(inputs) - n_states, **scan_attrs)
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _vi(name, dims, elem=F):
    return helper.make_tensor_value_info(name, elem, dims)


def cdist_model(opset: int = 17) -> bytes:
    """skl2onnx's squared Euclidean distances: the state is the queries [B, F], the scan
    input the reference rows [N, F]; each iteration gives the distances of every query to
    one row."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    reduce = (helper.make_node("ReduceSumSquare", ["diff", "axes"], ["d"], keepdims=0) if opset >= 18 else
              helper.make_node("ReduceSumSquare", ["diff"], ["d"], axes=[1], keepdims=0))
    nodes = [helper.make_node("Identity", ["q_in"], ["q_out"]),
             helper.make_node("Sub", ["q_in", "row"], ["diff"]), reduce,
             helper.make_node("Identity", ["d"], ["dist"])]
    return _scan_model(nodes, [_vi("q_in", [None, 3]), _vi("row", [3])], [_vi("q_out", [None, 3]), _vi("dist", [None])],
                       1, [_vi("q", ["B", 3]), _vi("rows", ["N", 3])], [_vi("q_final", ["B", 3]), _vi("D", ["N", "B"])],
                       opset=opset, initializers=[axes] if opset >= 18 else [])


def _loop_only(monkeypatch):
    """Scans run their body per iteration (the reference path)."""
    monkeypatch.setattr(control_flow, "vectorize_body", lambda *a, **k: None)


def _runs(model: bytes, feeds_list: list) -> list:
    sess = dynashape.InferenceSession(model)
    return [sess.run(None, f) for f in feeds_list]


def _assert_same(got: list, want: list, rtol: float = 1e-5) -> None:
    for g_run, w_run in zip(got, want):
        assert len(g_run) == len(w_run)
        for g, w in zip(g_run, w_run):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-6)


def _feeds(rng, shapes: dict) -> dict:
    return {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}


@pytest.mark.parametrize("opset", [11, 17, 18])
def test_pairwise_distances_equal_onnxruntime_and_the_loop(opset, monkeypatch):
    model = cdist_model(opset)
    rng = np.random.default_rng(0)
    feeds = [_feeds(rng, {"q": (b, 3), "rows": (n, 3)}) for b, n in ((1, 7), (4, 7), (4, 1), (0, 5), (2, 9))]
    want = [ort_run(model, f) for f in feeds]
    _assert_same(_runs(model, feeds), want)
    q, rows = feeds[1]["q"], feeds[1]["rows"]
    np.testing.assert_allclose(_runs(model, feeds[1:2])[0][1], ((rows[:, None, :] - q[None]) ** 2).sum(-1), rtol=1e-5)
    _loop_only(monkeypatch)
    _assert_same(_runs(model, feeds), want)


def test_the_cdist_body_is_vectorized_and_a_changing_state_is_not():
    body = load_model(cdist_model()).graph.nodes[0].attrs["body"]
    vb = vectorize_body(body, 1, [2, 1], 17)
    assert vb is not None and vb.batched == (True,)
    ops = [n.op_type for n in vb.graph.nodes]
    assert ops == ["Identity", "Unsqueeze", "Sub", "ReduceSumSquare", "Identity"]
    assert [len(vi.dims) for vi in vb.graph.inputs] == [2, 2]
    cumsum = _scan_model([helper.make_node("Add", ["s_in", "x"], ["s_out"]),
                          helper.make_node("Identity", ["s_out"], ["y"])],
                         [_vi("s_in", [2]), _vi("x", [2])], [_vi("s_out", [2]), _vi("y", [2])], 1,
                         [_vi("s", [2]), _vi("xs", ["N", 2])], [_vi("s_final", [2]), _vi("ys", ["N", 2])])
    body = load_model(cumsum).graph.nodes[0].attrs["body"]
    assert vectorize_body(body, 1, [1, 1], 17) is None


def test_a_changing_state_keeps_the_loop_and_its_values():
    model = _scan_model([helper.make_node("Add", ["s_in", "x"], ["s_out"]),
                         helper.make_node("Identity", ["s_out"], ["y"])],
                        [_vi("s_in", [2]), _vi("x", [2])], [_vi("s_out", [2]), _vi("y", [2])], 1,
                        [_vi("s", [2]), _vi("xs", ["N", 2])], [_vi("s_final", [2]), _vi("ys", ["N", 2])])
    xs = np.arange(8, dtype=np.float32).reshape(4, 2)
    s_final, ys = dynashape.InferenceSession(model).run(None, {"s": np.zeros(2, np.float32), "xs": xs})
    np.testing.assert_array_equal(ys, np.cumsum(xs, axis=0))
    np.testing.assert_array_equal(s_final, [12, 16])


def test_directions_axes_and_a_loop_invariant_output(monkeypatch):
    """Scan input read backwards along axis 1, outputs stacked on axis 1 and reversed, one
    output the same every iteration (a function of the state only), an ArgMax and a
    reduction over all axes in the body."""
    nodes = [helper.make_node("Identity", ["w_in"], ["w_out"]),
             helper.make_node("Mul", ["x", "w_in"], ["p"]),             # [2] * [3, 2] -> [3, 2]
             helper.make_node("Relu", ["p"], ["r"]),
             helper.make_node("ArgMax", ["r"], ["am"], axis=-1, keepdims=0),
             helper.make_node("ReduceMax", ["r"], ["all"], keepdims=1),
             helper.make_node("Abs", ["w_in"], ["inv"])]
    model = _scan_model(nodes, [_vi("w_in", [3, 2]), _vi("x", [2])],
                        [_vi("w_out", [3, 2]), _vi("am", [3], T.INT64), _vi("all", [1, 1]), _vi("inv", [3, 2])], 1,
                        [_vi("w", [3, 2]), _vi("xs", [2, "N"])],
                        [_vi("w_final", [3, 2]), _vi("AM", [3, "N"], T.INT64), _vi("ALL", [1, "N", 1]),
                         _vi("INV", ["N", 3, 2])],
                        scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1, 1, 0],
                        scan_output_directions=[1, 0, 0])
    body = load_model(model).graph.nodes[0].attrs["body"]
    vb = vectorize_body(body, 1, [2, 1], 17)
    assert vb is not None and vb.batched == (True, True, False)
    rng = np.random.default_rng(3)
    feeds = [_feeds(rng, {"w": (3, 2), "xs": (2, n)}) for n in (5, 1, 4)]
    want = [ort_run(model, f) for f in feeds]
    _assert_same(_runs(model, feeds), want)
    _loop_only(monkeypatch)
    _assert_same(_runs(model, feeds), want)


def test_chunks_of_iterations_give_the_same_values(monkeypatch):
    model = cdist_model()
    rng = np.random.default_rng(1)
    feeds = [_feeds(rng, {"q": (6, 3), "rows": (50, 3)})]
    want = [ort_run(model, f) for f in feeds]
    monkeypatch.setattr(control_flow, "VECTOR_BYTES", 256)   # (6 queries x 3 floats a row: 7-row chunks)
    _assert_same(_runs(model, feeds), want)


def test_an_op_the_rules_do_not_cover_keeps_the_loop():
    nodes = [helper.make_node("Identity", ["m_in"], ["m_out"]),
             helper.make_node("MatMul", ["x", "m_in"], ["y"])]
    model = _scan_model(nodes, [_vi("m_in", [2, 2]), _vi("x", [1, 2])], [_vi("m_out", [2, 2]), _vi("y", [1, 2])], 1,
                        [_vi("m", [2, 2]), _vi("xs", ["N", 1, 2])], [_vi("m_final", [2, 2]), _vi("ys", ["N", 1, 2])])
    body = load_model(model).graph.nodes[0].attrs["body"]
    assert vectorize_body(body, 1, [2, 2], 17) is None
    rng = np.random.default_rng(2)
    feeds = [_feeds(rng, {"m": (2, 2), "xs": (n, 1, 2)}) for n in (3, 1)]
    _assert_same(_runs(model, feeds), [ort_run(model, f) for f in feeds])
    # (onnxruntime fails on a scan of no iterations: the stacked output is empty)
    m_final, ys = _runs(model, [{"m": feeds[0]["m"], "xs": np.zeros((0, 1, 2), np.float32)}])[0]
    assert ys.shape == (0, 1, 2) and ys.dtype == np.float32
    np.testing.assert_array_equal(m_final, feeds[0]["m"])
