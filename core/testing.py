"""Run one operator in isolation: for op tests and plugin authors (no session needed).

    from dynashape.testing import run_node
    (y,) = run_node("Add", [a, b], opset=14)
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .model import Node
from .records import InferContext
from .registry import get_registry

__all__ = ["run_node", "infer_node"]


def _context(op_type, inputs, attrs, opset, domain, n_outputs, values_known=True) -> InferContext:
    names = tuple("" if x is None else f"in{i}" for i, x in enumerate(inputs))
    node = Node(f"{op_type}_test", op_type, domain, names, tuple(f"out{i}" for i in range(n_outputs)),
                dict(attrs or {}))
    arrays = [None if x is None else np.asarray(x) for x in inputs]
    return InferContext(node, opset,
                        [None if a is None else tuple(a.shape) for a in arrays],
                        [None if a is None else a.dtype for a in arrays],
                        arrays if values_known else [None] * len(arrays))


def infer_node(op_type: str, inputs: Sequence[Optional[np.ndarray]], attrs: Optional[dict] = None, *,
               opset: int = 21, domain: str = "", n_outputs: int = 1):
    """(output shapes, output dtypes) the registered OpDef infers for concrete inputs."""
    ctx = _context(op_type, inputs, attrs, opset, domain, n_outputs)
    op = get_registry().resolve_op(domain, op_type, opset)
    return list(op.infer_shape(ctx)), list(op.infer_dtype(ctx))


def run_node(op_type: str, inputs: Sequence[Optional[np.ndarray]], attrs: Optional[dict] = None, *,
             opset: int = 21, domain: str = "", n_outputs: int = 1) -> list[Any]:
    """Infer, allocate and run one node through the registry; returns its outputs."""
    reg = get_registry()
    ctx = _context(op_type, inputs, attrs, opset, domain, n_outputs)
    op = reg.resolve_op(domain, op_type, opset)
    ctx.output_shapes = list(op.infer_shape(ctx))
    ctx.output_dtypes = list(op.infer_dtype(ctx))
    first = next((x for x in ctx.input_dtypes if x is not None), None)
    kernel = reg.resolve_kernel(domain, op_type, opset, ctx.dtype(0) or first)
    outs = [np.empty(s, dtype=d) if s is not None and all(isinstance(v, int) for v in s) else None
            for s, d in zip(ctx.output_shapes, ctx.output_dtypes)]
    prepared = kernel.prepare(ctx) if kernel.prepare else ctx
    res = kernel.compute([None if x is None else np.asarray(x) for x in inputs], outs, prepared)
    return list(res) if res is not None else outs
