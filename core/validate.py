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
- the model has a graph, an ``ir_version`` and ``ai.onnx`` opset this onnx knows, and
  names its operator sets (``opset_import``, IR.md "Models");
- each node whose operator has a schema in ``onnx.defs`` (for the model's opset of its
  domain) has as many inputs and outputs as the schema allows and no required input left
  empty (:class:`InvalidModelError`); each attribute is known to the schema and has its
  type, required ones are present, and attributes naming an element type (``to``,
  ``dtype``) name one that exists (:class:`InvalidAttributeError`);
- inputs whose element type is declared (graph inputs, initializers) meet the schema's
  type constraints, one type per constraint (:class:`TypeConstraintError`);
- subgraphs nest at most :data:`MAX_NESTING` deep (:class:`NestingLimitError`): the checks
  here are iterative, but importing, compiling and running a subgraph recurse.

Operator rules that need more than the schema (Split-18's ``split`` or ``num_outputs``) are
the ``check_node`` of the op's :class:`~dynashape.records.OpDef`, run when the graph is
prepared (:mod:`dynashape.graph`).
"""
from __future__ import annotations

from typing import Optional

from . import onnx_proto, onnx_schemas
from .onnx_proto import AttributeProto, TensorProto
from .errors import (DuplicateNameError, InvalidAttributeError, InvalidModelError, ModelLoadError, ModelParseError,
                     NestingLimitError, TypeConstraintError, UndefinedValueError)
from .onnx_schemas import Schema

__all__ = ["validate_model", "MAX_NESTING"]

#: the deepest nesting of subgraphs (If/Loop/Scan bodies inside each other) accepted; each
#: level costs a bounded number of Python frames when compiled and run
MAX_NESTING = 48

_TYPE_NAMES = {int(v): k for k, v in AttributeProto.AttributeType.items()}
#: INT attributes that hold an element type (TensorProto.DataType)
_DTYPE_ATTRIBUTES = ("to", "dtype", "output_dtype")
_ELEM_TYPES = {int(v) for k, v in TensorProto.DataType.items() if k != "UNDEFINED"}


def validate_model(model: onnx_proto.ModelProto, opsets: dict[str, int]) -> None:
    """Check ``model`` against the rules above.

    Raises:
        ModelLoadError (no graph, an unknown IR version), InvalidModelError (no or an unknown
        opset, arity), DuplicateNameError, UndefinedValueError, InvalidAttributeError,
        TypeConstraintError, NestingLimitError.
    """
    try:
        _check_model(model, opsets)
    finally:
        onnx_schemas.save()   # the schemas looked up, valid model or not


def _check_model(model: onnx_proto.ModelProto, opsets: dict[str, int]) -> None:
    _check_header(model, opsets)
    pending: list[tuple[onnx_proto.GraphProto, tuple, int, str]] = [(model.graph, (), 0, model.graph.name or "main")]
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


def _check_header(model: onnx_proto.ModelProto, opsets: dict) -> None:
    if not model.HasField("graph"):
        raise ModelParseError("the model has no graph (ModelProto.graph is required; empty or non-ONNX bytes?)")
    if model.ir_version > onnx_proto.IR_VERSION:
        raise ModelLoadError(f"the model's IR version {model.ir_version} is newer than this onnx "
                             f"({onnx_proto.onnx_version()}) supports ({onnx_proto.IR_VERSION})")
    if not model.opset_import and model.ir_version >= 3:
        raise InvalidModelError("the model imports no operator set (opset_import is empty; IR.md: a model must "
                                "name the opsets it uses)")
    newest = onnx_schemas.newest_opset()
    if opsets.get("", 0) > newest:
        raise InvalidModelError(f"the model imports ai.onnx opset {opsets['']}, newer than the newest this onnx "
                                f"({onnx_proto.onnx_version()}) defines ({newest})")


def _node_name(node: onnx_proto.NodeProto, index: int) -> str:
    """The node's name as dynashape reports it (``<op_type>_<index>`` for an unnamed one)."""
    return node.name or f"{node.op_type}_{index}"


def _check_graph(graph: onnx_proto.GraphProto, outer: tuple, opsets: dict, path: str) -> set:
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
    declared = _declared_types(graph)
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
        schema = _node_schema(node, opsets)
        if schema is not None:
            at = f"{where}: {node.op_type} node '{name}' (opset {schema.since_version})"
            _check_arity(node, schema, at, name, path)
            _check_attributes(node, schema, at, name, path)
            _check_types(node, schema, declared, at, name, path)
    defined = inputs | initializers | set(producers)
    for vi in graph.output:
        if vi.name not in defined and not any(vi.name in scope for scope in outer):
            raise UndefinedValueError(f"{where}: output '{vi.name}' is not produced by any node and is not a graph "
                                      "input or initializer" + (" or an outer-scope value" if outer else ""),
                                      graph=path)
    return defined


def _node_schema(node: onnx_proto.NodeProto, opsets: dict) -> Optional[Schema]:
    domain = "" if node.domain == "ai.onnx" else node.domain
    opset = opsets.get(domain)
    return None if opset is None else onnx_schemas.get_schema(node.op_type, opset, domain)


def _check_arity(node: onnx_proto.NodeProto, schema: Schema, at: str, name: str, path: str) -> None:
    for what, given, low, high in (("inputs", len(node.input), schema.min_input, schema.max_input),
                                   ("outputs", len(node.output), schema.min_output, schema.max_output)):
        if not low <= given <= high:
            allowed = f"{low}" if low == high else f"{low} to {high}" if high < 2**31 - 1 else f"at least {low}"
            raise InvalidModelError(f"{at} has {given} {what}; {node.op_type}-{schema.since_version} takes {allowed}",
                                    node=name, op_type=node.op_type, graph=path)
    for k, value in enumerate(node.input):
        formal = schema.inputs[min(k, len(schema.inputs) - 1)] if schema.inputs else None
        if not value and formal is not None and not formal.optional:
            raise InvalidModelError(f"{at} leaves its required input {k} ('{formal.name}') empty",
                                    node=name, op_type=node.op_type, graph=path)


def _declared_types(graph: onnx_proto.GraphProto) -> dict[str, str]:
    """``name -> "tensor(float)"`` for the graph's inputs and initializers whose element type is set."""
    types = {}
    for vi in graph.input:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = _tensor_type(vi.type.tensor_type.elem_type)
    for t in graph.initializer:
        types[t.name] = _tensor_type(t.data_type)
    return types


def _tensor_type(elem_type: int) -> str:
    return f"tensor({TensorProto.DataType.Name(elem_type).lower()})"


def _check_types(node: onnx_proto.NodeProto, schema: Schema, declared: dict, at: str, name: str, path: str) -> None:
    """Declared input types against the schema's constraints, each constraint bound once."""
    constraints = schema.type_constraints
    bound: dict[str, tuple] = {}
    for k, value in enumerate(node.input):
        if value not in declared or not schema.inputs:
            continue
        formal = schema.inputs[min(k, len(schema.inputs) - 1)]
        got = declared[value]
        allowed = constraints.get(formal.type_str, {formal.type_str})
        if got not in allowed:
            raise TypeConstraintError(f"{at}: input {k} '{value}' ({formal.name}) is {got}; {node.op_type} takes "
                                      f"{', '.join(sorted(allowed))}", node=name, op_type=node.op_type, graph=path)
        if formal.type_str in constraints and (not formal.variadic or formal.is_homogeneous):
            first = bound.setdefault(formal.type_str, (k, value, got))
            if first[2] != got:
                raise TypeConstraintError(f"{at}: input {k} '{value}' is {got} but input {first[0]} '{first[1]}' is "
                                          f"{first[2]}; both are {formal.type_str}, one type",
                                          node=name, op_type=node.op_type, graph=path)


def _check_attributes(node: onnx_proto.NodeProto, schema: Schema, at: str, name: str, path: str) -> None:
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
        if a.type and a.type != spec.type and not (node.op_type == "Constant" and a.name == "value"
                                                   and a.type == AttributeProto.SPARSE_TENSOR):
            # (a sparse tensor as Constant's ``value``: onnxruntime loads it as ``sparse_value``;
            # the import densifies it either way)
            raise InvalidAttributeError(f"{at}: attribute '{a.name}' must be {spec.type_name}, got "
                                        f"{_TYPE_NAMES.get(a.type, a.type)}",
                                        node=name, op_type=node.op_type, graph=path)
        if a.name in _DTYPE_ATTRIBUTES and a.type == AttributeProto.INT and a.i not in _ELEM_TYPES:
            raise InvalidAttributeError(f"{at}: attribute '{a.name}' is {a.i}, which is no ONNX element type "
                                        "(TensorProto.DataType)", node=name, op_type=node.op_type, graph=path)
    for name, spec in schema.attributes.items():
        if spec.required and name not in given:
            raise InvalidAttributeError(f"{at} lacks its required attribute '{name}' ({spec.type_name})",
                                        node=name, op_type=node.op_type, graph=path)
