"""Run one operator in isolation: for op tests and plugin authors (no session needed).

    from dynashape.testing import run_node, infer_symbolic
    (y,) = run_node("Add", [a, b], opset=14)
    shapes, ctx = infer_symbolic("Add", [(sym("n"), 3), (3,)], [np.float32] * 2, opset=14)

Both functions go through the engine's own node contract (:mod:`dynashape.node`): the
schema resolved like a model's node, the context built, inferred and run as a
data-dependent step of a session is.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .graph import PreparedNode
from .model import Node
from .node import NodeServices, context_of_arrays, infer, run_dynamic
from .registry import get_registry

__all__ = ["run_node", "infer_node", "infer_symbolic"]


def _prepared_node(op_type, inputs, attrs, opset, domain, n_outputs) -> PreparedNode:
    names = tuple("" if x is None else f"in{i}" for i, x in enumerate(inputs))
    node = Node(f"{op_type}_test", op_type, domain, names, tuple(f"out{i}" for i in range(n_outputs)),
                dict(attrs or {}))
    opdef = get_registry().resolve_op(domain, op_type, opset, node.name)
    return PreparedNode(node, opdef, opset, tuple(i if x is not None else -1 for i, x in enumerate(inputs)),
                        tuple(range(len(inputs), len(inputs) + n_outputs)))


def _arrays(inputs) -> list:
    return [None if x is None else np.asarray(x) for x in inputs]


def infer_node(op_type: str, inputs: Sequence[Optional[np.ndarray]], attrs: Optional[dict] = None, *,
               opset: int = 21, domain: str = "", n_outputs: int = 1):
    """(output shapes, output dtypes) the registered OpDef infers for concrete inputs."""
    pn = _prepared_node(op_type, inputs, attrs, opset, domain, n_outputs)
    registry = get_registry()
    ctx = context_of_arrays(pn, _arrays(inputs), NodeServices({domain: opset}, registry))
    infer(pn, ctx)
    return list(ctx.output_shapes), list(ctx.output_dtypes)


def run_node(op_type: str, inputs: Sequence[Optional[np.ndarray]], attrs: Optional[dict] = None, *,
             opset: int = 21, domain: str = "", n_outputs: int = 1) -> list[Any]:
    """Infer, allocate and run one node through the registry; returns its outputs
    (floating-point errors quiet, as in a session's run)."""
    pn = _prepared_node(op_type, inputs, attrs, opset, domain, n_outputs)
    registry = get_registry()
    return run_dynamic(pn, registry, _arrays(inputs), NodeServices({domain: opset}, registry))


def infer_symbolic(op_type: str, shapes: Sequence, dtypes: Sequence, attrs: Optional[dict] = None,
                   opset: int = 21, values: Optional[Sequence] = None, *, domain: str = "", n_outputs: int = 1):
    """``(output shapes, context)`` of the registered ``infer_shape`` at import time: input
    ``shapes`` may hold symbolic dims (``dynashape.symbolic.sym("batch")``), a None shape is an
    absent optional input, ``values`` the host-known input values (None where unknown). The
    context keeps what the rule recorded (``ctx.assume`` guards, fresh dims).

    Raises:
        ShapeInferenceError: the rule rejects the inputs.
        UnsupportedOperatorError: no definition of the op at ``opset``.
    """
    from .records import InferContext

    names = tuple(f"in{i}" if s is not None else "" for i, s in enumerate(shapes))
    node = Node(f"{op_type}_test", op_type, domain, names, tuple(f"out{i}" for i in range(n_outputs)),
                dict(attrs or {}))
    ctx = InferContext(node, opset, list(shapes), [None if d is None else np.dtype(d) for d in dtypes],
                       list(values) if values is not None else [None] * len(shapes), symbolic=True)
    return get_registry().resolve_op(domain, op_type, opset, node.name).infer_shape(ctx), ctx
