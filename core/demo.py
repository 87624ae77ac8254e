"""The seed's ``runtime_shape_demo`` model (docs/SEEDS.md §5), built in memory.

``x: float[batch,2,3]`` → Shape → Gather(0) → Unsqueeze ; Cast([6]) → Concat →
Reshape(x, target) → Add(bias) → ``y: float[batch,6]`` (opset 18, ir_version 8).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["build_demo_model", "DEMO_BATCHES", "demo_input"]

DEMO_BATCHES = (1, 2, 8, 3, 1)
BIAS = np.array([0.25, -1.0, 2.0, 0.5, -0.5, 3.0], dtype=np.float32)


def build_demo_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Shape", ["x"], ["x_shape"], name="shape"),
        helper.make_node("Gather", ["x_shape", "index"], ["batch_dim"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["batch_dim", "axes"], ["batch_1d"], name="unsqueeze"),
        helper.make_node("Cast", ["six_i32"], ["six"], name="cast", to=TensorProto.INT64),
        helper.make_node("Concat", ["batch_1d", "six"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["reshaped"], name="reshape"),
        helper.make_node("Add", ["reshaped", "bias"], ["y"], name="add"),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "index"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axes"),
        numpy_helper.from_array(np.array([6], dtype=np.int32), "six_i32"),
        numpy_helper.from_array(BIAS, "bias"),
    ]
    graph = helper.make_graph(
        nodes, "runtime_shape_demo",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="dynashape")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def demo_input(batch: int, seed: int = 0) -> np.ndarray:
    """Deterministic ``float32[batch, 2, 3]`` input."""
    return np.random.default_rng(seed + batch).standard_normal((batch, 2, 3)).astype(np.float32)
