"""Load-time model validation: the rules of ONNX that onnxruntime enforces when it loads a
model, checked on the ``ModelProto`` before it is imported, each failure a typed
:class:`~dynashape.errors.ModelLoadError` naming the graph, the node and what is wrong.

Rules (sources: ONNX IR.md "Graphs" and "Names Within a Graph"; the operator schemas of
``onnx.defs``):

- every value name is defined once (SSA): no graph input listed twice, no initializer
  defined twice, no two nodes (or one node twice) writing one name, no node writing a graph
  input or an initializer (:class:`DuplicateNameError`);
- every graph output is defined: by a node, a graph input, an initializer or, in a
  subgraph, the enclosing scopes (:class:`UndefinedValueError`; undefined node inputs and
  cycles are found when the nodes are ordered, :mod:`dynashape.graph`);
- each attribute of a node whose operator has a schema in ``onnx.defs`` (for the model's
  opset of its domain) is known to the schema and has its type; required ones are present
  (:class:`InvalidAttributeError`);
- subgraphs nest at most :data:`MAX_NESTING` deep (:class:`NestingLimitError`): the checks
  here are iterative, but importing, compiling and running a subgraph recurse.

Operator rules that need more than the schema (Split-18's ``split`` or ``num_outputs``) are
the ``check_node`` of the op's :class:`~dynashape.records.OpDef`, run when the graph is
prepared (:mod:`dynashape.graph`).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Optional

import onnx
from onnx import AttributeProto, defs

from .errors import DuplicateNameError, InvalidAttributeError, NestingLimitError, UndefinedValueError

__all__ = ["validate_model", "MAX_NESTING"]

#: the deepest nesting of subgraphs (If/Loop/Scan bodies inside each other) accepted; each
#: level costs a bounded number of Python frames when compiled and run
MAX_NESTING = 48

_TYPE_NAMES = {int(v): k for k, v in AttributeProto.AttributeType.items()}


def validate_model(model: onnx.ModelProto, opsets: dict[str, int]) -> None:
    """Check ``model`` against the rules above.

    Raises:
        DuplicateNameError, UndefinedValueError, InvalidAttributeError, NestingLimitError.
    """
    pending: list[tuple[onnx.GraphProto, tuple, int, str]] = [(model.graph, (), 0, model.graph.name or "main")]
    while pending:
        graph, outer, depth, path = pending.pop()
        if depth > MAX_NESTING:
            steps = path.split("/")
            shown = path if len(steps) <= 6 else "/".join(steps[:3] + ["..."] + steps[-2:])
            raise NestingLimitError(f"subgraph '{shown}' is nested {depth} levels deep; dynashape supports at most "
                                    f"{MAX_NESTING} (If/Loop/Scan bodies inside each other)")
        defined = _check_graph(graph, outer, opsets, path)
        scope = outer + (defined,)
        for k, node in enumerate(graph.node):
            for a in node.attribute:
                subgraphs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
                for g in subgraphs:
                    pending.append((g, scope, depth + 1, f"{path}/{_node_name(node, k)}.{a.name}"))


def _node_name(node: onnx.NodeProto, index: int) -> str:
    """The node's name as dynashape reports it (``<op_type>_<index>`` for an unnamed one)."""
    return node.name or f"{node.op_type}_{index}"


def _check_graph(graph: onnx.GraphProto, outer: tuple, opsets: dict, path: str) -> set:
    """The names ``graph`` defines, after checking its own rules."""
    where = f"graph '{path}'"
    inputs: set[str] = set()
    for vi in graph.input:
        if vi.name in inputs:
            raise DuplicateNameError(f"{where} lists input '{vi.name}' twice", graph=path)
        inputs.add(vi.name)
    initializers: set[str] = set()
    for name in [t.name for t in graph.initializer] + [sp.values.name for sp in graph.sparse_initializer]:
        if name in initializers:
            raise DuplicateNameError(f"{where} defines initializer '{name}' twice", graph=path)
        initializers.add(name)
    producers: dict[str, tuple] = {}
    for k, node in enumerate(graph.node):
        name = _node_name(node, k)
        for out in node.output:
            if not out:
                continue
            if out in producers:
                first, first_name = producers[out]
                raise DuplicateNameError(
                    f"{where}: value '{out}' is written by node '{first_name}' ({first.op_type}) and "
                    f"by node '{name}' ({node.op_type}); a name may be defined only once",
                    node=name, op_type=node.op_type, graph=path)
            if out in inputs or out in initializers:
                kind = "graph input" if out in inputs else "initializer"
                raise DuplicateNameError(f"{where}: node '{name}' ({node.op_type}) writes '{out}', which "
                                         f"is a {kind} of the graph; a name may be defined only once",
                                         node=name, op_type=node.op_type, graph=path)
            producers[out] = (node, name)
        _check_attributes(node, name, opsets, where, path)
    defined = inputs | initializers | set(producers)
    for vi in graph.output:
        if vi.name not in defined and not any(vi.name in scope for scope in outer):
            raise UndefinedValueError(f"{where}: output '{vi.name}' is not produced by any node and is not a graph "
                                      "input or initializer" + (" or an outer-scope value" if outer else ""),
                                      graph=path)
    return defined


@lru_cache(maxsize=None)
def _schema(op_type: str, opset: int, domain: str) -> Optional[Any]:
    try:
        return defs.get_schema(op_type, opset, domain)
    except Exception:  # noqa: BLE001 - onnx's SchemaError: no schema (custom domains, newer opsets)
        return None


def _check_attributes(node: onnx.NodeProto, name: str, opsets: dict, where: str, path: str) -> None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    opset = opsets.get(domain)
    if opset is None:
        return
    schema = _schema(node.op_type, opset, domain)
    if schema is None:
        return
    at = f"{where}: {node.op_type} node '{name}' (opset {opset})"
    given = set()
    for a in node.attribute:
        given.add(a.name)
        if a.ref_attr_name:          # a function's attribute reference: typed by the caller
            continue
        spec = schema.attributes.get(a.name)
        if spec is None:
            known = ", ".join(sorted(schema.attributes)) or "none"
            raise InvalidAttributeError(f"{at} has attribute '{a.name}', which {node.op_type}-{schema.since_version} "
                                        f"does not define (its attributes: {known})",
                                        node=name, op_type=node.op_type, graph=path)
        if a.type and a.type != int(spec.type):
            raise InvalidAttributeError(f"{at}: attribute '{a.name}' must be {spec.type.name}, got "
                                        f"{_TYPE_NAMES.get(a.type, a.type)}",
                                        node=name, op_type=node.op_type, graph=path)
    for name, spec in schema.attributes.items():
        if spec.required and name not in given:
            raise InvalidAttributeError(f"{at} lacks its required attribute '{name}' ({spec.type.name})",
                                        node=name, op_type=node.op_type, graph=path)
