"""A model prepared for execution: nodes in topological order with resolved schemas,
slots (integer ids) for every tensor name, constants folded once at session creation,
and which graph inputs feed a shape computation by value.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Collection, Optional, Sequence

import numpy as np

from .errors import InvalidAttributeError, UndefinedValueError, UnsupportedOperatorError
from .model import Graph, Model, Node, ValueInfo, input_dim_exprs
from .records import OpDef
from .registry import Registry, plugin_provides
from .weight_arena import WeightArena
from .weights import release_view

__all__ = ["PreparedNode", "PreparedGraph", "prepare_graph", "input_dims", "release_unread_constants", "as_graph"]


@dataclass(eq=False)
class PreparedNode:
    """A node with its schema, the opset of its domain and its slot ids.

    ``inputs`` holds -1 for an absent optional input; ``implicit`` are the outer-scope
    values its subgraphs read (If/Loop), appended to its inputs when it runs.
    """

    node: Node
    opdef: OpDef
    opset: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    implicit: tuple[int, ...] = ()

    @property
    def all_inputs(self) -> tuple[int, ...]:
        return self.inputs + self.implicit


@dataclass(eq=False)
class PreparedGraph:
    graph: Graph
    opsets: dict[str, int]
    names: list[str]                      # slot -> tensor name
    slot: dict[str, int]                  # tensor name -> slot
    nodes: list[PreparedNode]
    input_slots: list[int]
    output_slots: list[int]
    constants: dict[int, np.ndarray]      # initializers (and folded constants)
    value_inputs: set[int] = field(default_factory=set)  # graph-input slots read by value for shapes
    producer: dict[int, int] = field(default_factory=dict)  # slot -> index in nodes
    #: constants dropped because nothing reads them any more: slot -> (shape, dtype)
    released: dict[int, tuple[tuple[int, ...], np.dtype]] = field(default_factory=dict)
    #: node index -> (kernel, what its ``prepack`` made): shared by every program of the graph
    prepacked: dict[int, tuple] = field(default_factory=dict)
    #: constant slots whose data a prepacked form replaced: their ``constants`` entry is a
    #: stand-in of the same shape and dtype holding no data (``np.broadcast_to`` of one zero),
    #: for per-node inference of the nodes that read them
    packed_away: set[int] = field(default_factory=set)
    #: the memory the prepacked forms are packed into, in the order they are made (weight_arena.py)
    weight_arena: WeightArena = field(default_factory=WeightArena)
    #: the symbolic walk the rewrite pass made of the graph before its rewrites
    #: (``symbolic_inference.PriorInference``): the first program compiled takes it, and
    #: reuses it for the nodes the rewrites left as they were
    prior: Any = None

    def constant_type(self, slot: int) -> tuple[Optional[tuple[int, ...]], Optional[np.dtype]]:
        """Shape and dtype of a constant, released or not; (None, None) for other slots."""
        arr = self.constants.get(slot)
        if arr is not None:
            return tuple(arr.shape), arr.dtype
        return self.released.get(slot, (None, None))

    def read_slots(self) -> set[int]:
        """Slots some node reads (its inputs and its subgraphs' outer values) or the graph outputs."""
        read = {s for pn in self.nodes for s in pn.all_inputs if s >= 0}
        read.update(s for s in self.output_slots if s >= 0)
        return read


def _toposort(graph: Graph, known: set[str]) -> list[Node]:
    """Nodes in an order where each node's inputs are produced before it: Kahn's algorithm,
    always taking the ready node listed first (a graph already in order keeps its order),
    O(n log n) in the number of nodes for any order they are listed in.

    Raises:
        UndefinedValueError: a node reads a name nothing defines, or the nodes form a cycle.
    """
    nodes = graph.nodes
    producer = {o: k for k, n in enumerate(nodes) for o in n.outputs if o}
    waiting = [0] * len(nodes)                  # inputs not yet produced, per node
    consumers: dict[int, list[int]] = {}
    for k, n in enumerate(nodes):
        for name in {i for i in n.inputs if i} | _implicit_names(n):
            if name in known:
                continue
            p = producer.get(name)
            if p is None:
                raise UndefinedValueError(f"graph '{graph.name}': node '{n.name}' ({n.op_type}) reads '{name}', "
                                          "which no node produces and is not a graph input or initializer",
                                          node=n.name, op_type=n.op_type, graph=graph.name)
            waiting[k] += 1
            consumers.setdefault(p, []).append(k)
    ready = [k for k, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    ordered: list[Node] = []
    while ready:
        k = heapq.heappop(ready)
        ordered.append(nodes[k])
        for c in consumers.get(k, ()):
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, c)
    if len(ordered) < len(nodes):
        stuck = [n for k, n in enumerate(nodes) if waiting[k] > 0]
        names = ", ".join(f"'{n.name}'" for n in stuck[:5])
        raise UndefinedValueError(f"graph '{graph.name}' has a cycle through nodes {names}"
                                  f"{' and more' if len(stuck) > 5 else ''}", node=stuck[0].name,
                                  op_type=stuck[0].op_type, graph=graph.name)
    return ordered


def _implicit_names(node: Node) -> set[str]:
    names: set[str] = set()
    for a in node.attrs.values():
        if isinstance(a, Graph):
            names |= a.outer_names()
        elif isinstance(a, list) and a and isinstance(a[0], Graph):
            for g in a:
                names |= g.outer_names()
    return names


def prepare_graph(model_or_graph, registry: Registry, opsets: Optional[dict[str, int]] = None,
                  outer: tuple[str, ...] = (), outer_constants: Optional[dict[str, np.ndarray]] = None
                  ) -> PreparedGraph:
    """Resolve schemas, order nodes and give every tensor a slot.

    ``outer`` are names defined outside a subgraph; they become extra graph inputs, except
    those in ``outer_constants`` (the enclosing graph's initializers and folded constants),
    which become constants of the subgraph.

    Raises:
        UnsupportedOperatorError: an op has no definition for the model's opset.
        UndefinedValueError: the graph is not a DAG or reads undefined names.
        InvalidAttributeError: a node breaks its op's ``check_node`` rule.
    """
    if isinstance(model_or_graph, Model):
        graph, opsets = model_or_graph.graph, model_or_graph.opsets
    else:
        graph = model_or_graph
    assert opsets is not None
    names: list[str] = []
    slot: dict[str, int] = {}

    def slot_of(name: str) -> int:
        if not name:
            return -1
        if name not in slot:
            slot[name] = len(names)
            names.append(name)
        return slot[name]

    outer_constants = outer_constants or {}
    input_slots = [slot_of(v.name) for v in graph.inputs] + [slot_of(n) for n in outer if n not in outer_constants]
    constants = {slot_of(k): v for k, v in outer_constants.items()}
    constants.update({slot_of(k): v for k, v in graph.initializers.items()})
    known = {v.name for v in graph.inputs} | set(graph.initializers) | set(outer)
    nodes = []
    producer = {}
    missing: dict = {}   # (domain, op_type, opset) -> [the error, nodes]
    for n in _toposort(graph, known):
        domain_opset = n.opset if n.opset is not None else opsets.get(n.domain)
        if domain_opset is None:
            domain_opset = opsets.get("", 1) if n.domain in ("", "ai.onnx") else 1
        try:
            opdef = registry.resolve_op(n.domain, n.op_type, domain_opset, n.name)
        except UnsupportedOperatorError as exc:
            missing.setdefault((n.domain, n.op_type, domain_opset), [exc, 0])[1] += 1
            continue
        if opdef.check_node is not None:
            _check_node(opdef, n, domain_opset, graph.name)
        implicit = tuple(slot_of(x) for x in sorted(_implicit_names(n)))
        pn = PreparedNode(n, opdef, domain_opset, tuple(slot_of(i) for i in n.inputs),
                          tuple(slot_of(o) for o in n.outputs), implicit)
        for o in pn.outputs:
            if o >= 0:
                producer[o] = len(nodes)
        nodes.append(pn)
    if missing:
        raise _missing_operators(missing)
    output_slots = [slot_of(v.name) for v in graph.outputs]
    pg = PreparedGraph(graph, dict(opsets), names, slot, nodes, input_slots, output_slots,
                       constants, producer=producer)
    pg.value_inputs = _value_needed_inputs(pg)
    return pg


def release_unread_constants(pg: PreparedGraph, keep: Collection[str] = ()) -> set[str]:
    """Drop every constant of ``pg`` that no node reads and that is no graph output (a weight
    only a folded Transpose read, the inputs of a fused pattern), except those named in
    ``keep``: from ``pg.constants`` (shape and dtype move to ``pg.released``) and from
    ``pg.graph``'s initializers. Returns the names dropped."""
    read = pg.read_slots() | {pg.slot[n] for n in keep if n in pg.slot}
    dropped = [s for s in pg.constants if s not in read]
    for s in dropped:
        arr = pg.constants.pop(s)
        pg.released[s] = (tuple(arr.shape), arr.dtype)
        release_view(arr)
    names = {pg.names[s] for s in dropped}
    pg.graph.release(names)
    return names


def as_graph(pg: PreparedGraph, keep: Collection[str] = ()) -> Graph:
    """``pg`` (a main graph) as a :class:`Graph` again: its nodes in their order and, as
    initializers, the constants they read, the graph outputs and those named in ``keep``."""
    read = pg.read_slots() | {pg.slot[n] for n in keep if n in pg.slot}
    g = pg.graph
    return Graph(g.name, [pn.node for pn in pg.nodes], list(g.inputs), list(g.outputs),
                 {pg.names[s]: v for s, v in pg.constants.items() if s in read}, g.value_info, list(g.overridable))


def _check_node(opdef: OpDef, node: Node, opset: int, graph: str) -> None:
    problem = opdef.check_node(node, opset)
    if problem:
        raise InvalidAttributeError(f"graph '{graph}': {node.op_type} node '{node.name}' (opset {opset}): {problem}",
                                    node=node.name, op_type=node.op_type, graph=graph)


#: domains some of whose operators a known plugin provides: (what they are, the plugin's
#: entry-point name, its distribution, how to install it)
_PLUGIN_HINTS = {
    "com.microsoft": ("ONNX Runtime's contrib ops (com.microsoft)", "example", "dynashape-contrib-ops",
                      "pip install ./plugins_example (in the dynashape repository)"),
}


def _plugin_hint(domain: str, op_types: Sequence[str]) -> str:
    """The hint naming the known plugin of ``domain`` for its missing ``op_types``: where it
    is installed but not loaded and provides some of them, those; where it is not installed
    (which of its ops it has cannot be known), how to install it; "" where it is loaded (it
    lacks them all), fails to load, or is installed without any of them."""
    if domain not in _PLUGIN_HINTS:
        return ""
    what, name, dist, install = _PLUGIN_HINTS[domain]
    provides = {op: plugin_provides(name, domain, op) for op in op_types}
    if all(p is None for p in provides.values()):
        return f"{what}: many come with the {dist} plugin, which is not installed: {install}"
    ours = [op for op, p in provides.items() if p]
    if not ours:
        return ""
    return (f"the {dist} plugin (entry point '{name}') provides {', '.join(ours)} but is not loaded: see "
            "DYNASHAPE_PLUGINS_BLOCK, DYNASHAPE_PLUGINS_ALLOW and DYNASHAPE_NO_ENTRY_POINTS (`dynashape plugins` "
            "lists the loaded ones)")


def _missing_operators(missing: dict) -> UnsupportedOperatorError:
    """One error naming every operator of the graph no plugin defines (with its node count),
    and the known plugin that provides them where there is one."""
    by_domain: dict = {}
    for domain, op_type, _ in sorted(missing):
        by_domain.setdefault(domain, []).append(op_type)
    hints = [h for h in (_plugin_hint(d, list(dict.fromkeys(ops))) for d, ops in by_domain.items()) if h]
    if len(missing) == 1:
        ((exc, count),) = missing.values()
        if count == 1 and not hints:
            return exc
    parts = [f"{domain or 'ai.onnx'}::{op_type} (opset {opset}, {count} node{'s' if count > 1 else ''})"
             for (domain, op_type, opset), (_, count) in sorted(missing.items())]
    hint = "; ".join(hints) if hints else "a plugin may provide them (`dynashape plugins` lists the loaded ones)"
    return UnsupportedOperatorError(f"{len(missing)} operator(s) of the model have no registered definition: "
                                    f"{', '.join(parts)}. {hint}")


def _value_needed_inputs(pg: PreparedGraph) -> set[int]:
    """Graph-input slots whose values (not only shapes) reach some op's ``value_inputs``."""
    needed: set[int] = set()
    stack = []
    for pn in pg.nodes:
        for i in pn.opdef.value_inputs:
            if i < len(pn.inputs) and pn.inputs[i] >= 0:
                stack.append(pn.inputs[i])
    seen: set[int] = set()
    inputs = set(pg.input_slots)
    while stack:
        s = stack.pop()
        if s in seen:
            continue
        seen.add(s)
        if s in inputs:
            needed.add(s)
            continue
        p = pg.producer.get(s)
        if p is None:
            continue
        pn = pg.nodes[p]
        for j, src in enumerate(pn.all_inputs):
            if src >= 0 and j not in pn.opdef.shape_only_inputs:
                stack.append(src)
    return needed


def input_dims(pg: PreparedGraph, inputs: Sequence[ValueInfo]) -> tuple[dict, dict]:
    """Symbolic dims and dtypes of a graph's declared inputs, by slot: ints, the dim_param
    symbols, and a fresh symbol per unknown dim that collides with no dim_param or tensor name."""
    taken = {d.value for vi in inputs if vi.dims for d in vi.dims if isinstance(d.value, str)}
    taken |= set(pg.names)
    dims = {pg.slot[vi.name]: input_dim_exprs(vi, taken) for vi in inputs}
    dtypes = {pg.slot[vi.name]: vi.dtype for vi in inputs}
    return dims, dtypes
