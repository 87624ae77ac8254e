"""What the batch tests share: token rows of random lengths, the single-session reference (each
row run alone, batch 1, no padding) and small models whose output shapes pin one rule each."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import dynashape

RTOL, ATOL = 1e-4, 1e-5


def token_rows(n: int, longest: int, vocab: int, seed: int = 0, shortest: int = 1) -> list[np.ndarray]:
    """``n`` int64 token rows with lengths uniform in [shortest, longest] and ids in [0, vocab)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, int(k), dtype=np.int64) for k in rng.integers(shortest, longest + 1, n)]


def single_row_outputs(model, rows: list[np.ndarray], with_types: bool = True) -> list[list[np.ndarray]]:
    """Every row run alone on one session (batch 1, its own length, mask of ones, token types 0),
    the batch axis dropped: ``[row][output]``."""
    sess = dynashape.InferenceSession(model)
    names = {i.name for i in sess.get_inputs()}
    out = []
    for ids in rows:
        feeds = {"input_ids": ids[None], "attention_mask": np.ones((1, len(ids)), np.int64)}
        if with_types and "token_type_ids" in names:
            feeds["token_type_ids"] = np.zeros((1, len(ids)), np.int64)
        out.append([o[0] for o in sess.run(None, {k: v for k, v in feeds.items() if k in names})])
    return out


def assert_rows_match(outputs: dict, names: list[str], reference: list[list[np.ndarray]], what: str = "") -> None:
    """Each output's row ``i`` has the reference's shape and dtype and equals it (RTOL, ATOL)."""
    for k, name in enumerate(names):
        got = outputs[name]
        assert len(got) == len(reference), (what, name, len(got), len(reference))
        for i, (g, ref) in enumerate(zip(got, (r[k] for r in reference))):
            assert g.shape == ref.shape and g.dtype == ref.dtype, (what, name, i, g.shape, ref.shape, g.dtype)
            np.testing.assert_allclose(g, ref, rtol=RTOL, atol=ATOL, err_msg=f"{what} {name} row {i}")


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def doubled_length_model() -> onnx.ModelProto:
    """x float [batch, sequence] -> y = Concat(x, x, axis 1): [batch, 2*sequence] (varies with the length)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return _model([helper.make_node("Concat", ["x", "x"], ["y"], axis=1)], [x], [y])


def fixed_batch_model() -> onnx.ModelProto:
    """x float [1, sequence] -> Identity: a batch dim fixed to 1."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "sequence"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return _model([helper.make_node("Identity", ["x"], ["y"])], [x], [y])


def batch_sum_model() -> onnx.ModelProto:
    """x float [batch, sequence] -> y = x + 1 [batch, sequence] and total = ReduceSum over the
    batch axis [sequence] (no batch axis: its rows cannot be told apart)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence"])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "total")]
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    return _model([helper.make_node("Add", ["x", "one"], ["y"]),
                   helper.make_node("ReduceSum", ["x", "axes"], ["total"], keepdims=0)], [x], outs, [one, axes])


def scaled_model() -> onnx.ModelProto:
    """x float [batch, sequence, 3] -> y = x * 2, position-wise, without a mask input."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    return _model([helper.make_node("Mul", ["x", "two"], ["y"])], [x], [y], [two])


def row_sum_model() -> onnx.ModelProto:
    """x float [batch, sequence] -> s = ReduceSum over the sequence [batch]: sees every padded position."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence"])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, None)
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    return _model([helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=0)], [x], [s], [axes])
