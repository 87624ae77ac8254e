"""Models the reliability tests share."""
from __future__ import annotations

import onnx
from onnx import AttributeProto, TensorProto, helper


def _vi(name, dims=None, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def nested_if(depth: int) -> onnx.ModelProto:
    """``depth`` If nodes, each in the previous one's then_branch (built in place: copying a
    deep proto through onnx.helper trips protobuf's own nesting limit)."""
    m = onnx.ModelProto()
    m.ir_version = 9
    m.opset_import.add().version = 18
    g = m.graph
    g.name = "main"
    g.input.extend([_vi("x", ["n"]), _vi("c", [], TensorProto.BOOL)])
    g.output.extend([_vi("y0")])
    for d in range(depth):
        n = g.node.add()
        n.op_type, n.name = "If", f"if{d}"
        n.input.append("c")
        n.output.append(f"y{d}")
        e = n.attribute.add()
        e.name, e.type = "else_branch", AttributeProto.GRAPH
        e.g.name = f"else{d}"
        e.g.node.extend([helper.make_node("Neg", ["x"], [f"n{d}"])])
        e.g.output.extend([_vi(f"n{d}")])
        t = n.attribute.add()
        t.name, t.type = "then_branch", AttributeProto.GRAPH
        t.g.name = f"then{d}"
        t.g.output.extend([_vi(f"y{d + 1}")])
        g = t.g
    g.node.extend([helper.make_node("Add", ["x", "x"], [f"y{depth}"])])
    return m
