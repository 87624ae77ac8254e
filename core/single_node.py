"""One operator in isolation, outside any model: what :mod:`dynashape.testing` and
:mod:`dynashape.differential` run (and what op tests call, through ``dynashape.testing``).

    (y,) = run_node("Add", [a, b], opset=14)
    shapes, dtypes = infer_node("Add", [a, b], opset=14)
    shapes, ctx = infer_symbolic("Add", [(sym("n"), 3), (3,)], [np.float32] * 2, opset=14)

They go through the engine's own node contract (:mod:`dynashape.node`): the schema
resolved like a model's node, the context built, inferred and run as a data-dependent
step of a session is; a node with subgraphs (If, Loop, Scan) compiles them as a session's
program does (:class:`dynashape.subgraph.SubgraphRunner`).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .graph import PreparedNode
from .model import Node
from .node import NodeServices, context_of_arrays, infer, run_dynamic
from .registry import Registry, get_registry
from .subgraph import SubgraphRunner

__all__ = ["run_node", "infer_node", "infer_symbolic", "services"]


def services(opsets: dict, registry: Registry) -> NodeServices:
    """The node services of a node run alone: its opsets, the registry, and subgraphs
    compiled as bodies of their own (no enclosing scope)."""
    return NodeServices(opsets, registry, lambda graph: SubgraphRunner(graph, opsets, registry))


def _node_attrs(attrs: Optional[dict]) -> dict:
    """The attributes as a model's node holds them: a TensorProto value (ConstantOfShape's
    ``value``, a Constant's) becomes its numpy array, as when a model is read."""
    from .onnx_proto import TensorProto, to_array

    return {k: to_array(v) if isinstance(v, TensorProto) else v for k, v in (attrs or {}).items()}


def _prepared_node(op_type, inputs, attrs, opset, domain, n_outputs) -> PreparedNode:
    names = tuple("" if x is None else f"in{i}" for i, x in enumerate(inputs))
    node = Node(f"{op_type}_test", op_type, domain, names, tuple(f"out{i}" for i in range(n_outputs)),
                _node_attrs(attrs))
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
    ctx = context_of_arrays(pn, _arrays(inputs), services({domain: opset}, registry))
    infer(pn, ctx)
    return list(ctx.output_shapes), list(ctx.output_dtypes)


def run_node(op_type: str, inputs: Sequence[Optional[np.ndarray]], attrs: Optional[dict] = None, *,
             opset: int = 21, domain: str = "", n_outputs: int = 1) -> list[Any]:
    """Infer, allocate and run one node through the registry; returns its outputs
    (floating-point errors quiet, as in a session's run). ``n_outputs``: how many outputs the
    node has (an op with several, such as TopK's values and indices, needs them all).

    Raises:
        ShapeInferenceError: the op's rule rejects the inputs.
        ExecutionError: the kernel failed (one that reads an output the node lacks says to
            pass ``n_outputs``).
    """
    from .errors import ExecutionError

    pn = _prepared_node(op_type, inputs, attrs, opset, domain, n_outputs)
    registry = get_registry()
    try:
        return run_dynamic(pn, registry, _arrays(inputs), services({domain: opset}, registry))
    except ExecutionError as exc:
        if isinstance(exc.__cause__, IndexError) or "IndexError" in str(exc):
            raise ExecutionError(f"{exc} (the node has {n_outputs} output(s): an op with more needs "
                                 f"n_outputs=, e.g. run_node({op_type!r}, ..., n_outputs=2))") from exc
        raise


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
                _node_attrs(attrs))
    ctx = InferContext(node, opset, list(shapes), [None if d is None else np.dtype(d) for d in dtypes],
                       list(values) if values is not None else [None] * len(shapes), symbolic=True)
    return get_registry().resolve_op(domain, op_type, opset, node.name).infer_shape(ctx), ctx
