"""Graph rewrites: a pattern of nodes replaced by fewer, bigger ones at session creation.

A :class:`RewriteDef` is a *pattern* (a tree of op types ending at one root node, with
attribute, constant and symbolic-shape predicates) and a *build* function that returns the
replacement nodes, or None to decline. Plugins register rewrites through the hook
``dynashape_register_rewrites`` (:mod:`dynashape.hookspecs`); the builtin ones live in
``dynashape.ops_builtin.rewrites``. A guide: docs/REWRITES.md.

Patterns are written with :func:`op`, :func:`value` and :func:`const`::

    x = value("x")
    gelu = op("Mul", op("Mul", x, op("Add", op("Erf", op("Div", x, const(value=SQRT2))),
                                       const(value=1.0))), const(value=0.5))

``Add``/``Mul``/``Max``/``Min``/``Sum``/``And``/``Or``/``Xor``/``Equal`` match their two
inputs in either order. A capture name used twice must bind the same tensor (values) or
node (op patterns). Every matched node but the root must have no consumer outside the
match and must not be a graph output, so removing the match changes nothing else.

When rewrites run (:func:`apply_rewrites`): after constant folding, before the symbolic
inference the program is compiled from; in order of ``priority`` (highest first), then
name; each rewrite visits the graph's nodes in order once, and every replacement is
recorded (:class:`Fired`). The replacement keeps the root's output names, so everything
downstream (and the symbolic shapes known for those names) is unchanged. Rewrites apply to
the main graph and to every If/Loop/Scan body (when the body is compiled, with the dims
its outer values have outside).
"""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np

from .model import Graph, Node
from .symbolic import Expr

__all__ = ["Pattern", "RewriteDef", "GraphPass", "GraphView", "Match", "Fired", "RewriteReport", "op", "value",
           "const", "apply_rewrites", "COMMUTATIVE"]

#: binary ops whose two inputs a pattern matches in either order
COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Sum", "And", "Or", "Xor", "Equal"})


@dataclass(frozen=True)
class Pattern:
    """One node of a pattern: an op (``op_type`` set) or a leaf (``op_type`` None).

    Attributes:
        op_type, domain: the node's op ("" is ai.onnx); None for a leaf.
        inputs: sub-patterns, one per input of the node (an absent optional input is
            matched by ``None``); the node must have exactly that many inputs unless
            ``more_inputs`` is set.
        name: capture name: ``m.node(name)`` for an op, ``m.value(name)`` for a leaf.
        attrs: attribute values the node must have (absent attributes compare as None).
        output: which output of the node the consumer reads (0 for almost every op).
        constant: a leaf that must be a constant (initializer or folded value).
        scalar: a constant leaf whose every element equals this number (relative 1e-5).
        where: ``where(m, x) -> bool`` with the partial :class:`Match` and the matched
            node (op) or tensor name (leaf): an extra condition.
    """

    op_type: Optional[str] = None
    inputs: tuple = ()
    name: str = ""
    domain: str = ""
    attrs: Mapping[str, Any] = field(default_factory=dict)
    output: int = 0
    more_inputs: bool = False
    constant: bool = False
    scalar: Optional[float] = None
    where: Optional[Callable[["Match", Any], bool]] = None


def op(op_type: str, *inputs: Optional[Pattern], name: str = "", domain: str = "",
       attrs: Optional[Mapping[str, Any]] = None, output: int = 0, more_inputs: bool = False,
       where: Optional[Callable] = None) -> Pattern:
    """A pattern node matching a node of ``op_type`` whose inputs match ``inputs``."""
    return Pattern(op_type, tuple(inputs), name, domain, dict(attrs or {}), output, more_inputs, where=where)


def value(name: str = "", where: Optional[Callable] = None) -> Pattern:
    """A leaf matching any tensor (a graph input, a constant or any node's output)."""
    return Pattern(name=name, where=where)


def const(name: str = "", scalar: Optional[float] = None, where: Optional[Callable] = None) -> Pattern:
    """A leaf matching a constant; with ``scalar``, one whose elements all equal it."""
    return Pattern(name=name, constant=True, scalar=scalar, where=where)


BuildFn = Callable[["Match"], Optional[Sequence[Node]]]


@dataclass(frozen=True)
class RewriteDef:
    """A graph rewrite a plugin registers.

    Attributes:
        name: unique among all plugins (``"fuse_gelu_erf"``); the order key after priority.
        pattern: the :class:`Pattern` whose root is the last node replaced.
        build: ``build(m) -> list[Node] | None``: the replacement nodes (made with
            ``m.make``), producing every output of the root node that is used (or
            forwarding it to another tensor with ``m.forward``); None declines (a shape,
            dtype or attribute case the fused op does not cover).
        priority: higher runs first (a rewrite that consumes another's result runs after it).
        description: one line for ``dynashape inspect --rewrites`` and docs.
        plugin: filled in by the registry.
    """

    name: str
    pattern: Pattern
    build: BuildFn
    priority: int = 0
    description: str = ""
    plugin: str = ""


PassFn = Callable[["GraphView"], Optional[tuple]]


@dataclass(frozen=True)
class GraphPass:
    """A rewrite of the whole graph at once, for what no local pattern can say (a layout
    assigned to a region of nodes, with conversions at its borders).

    Attributes:
        name, priority, description, plugin: as :class:`RewriteDef` (one name space, one
            order: passes and pattern rewrites run by priority, then name).
        run: ``run(view) -> (nodes, new_constants) | None``: the new node list (in
            topological order; every output the old graph's outputs and unchanged nodes
            read must still be produced under its name) and the initializers it adds, or
            None to leave the graph as it is. ``view`` is a :class:`GraphView`.
        roots: ``(domain, op_type)`` pairs of which the graph must hold at least one for the
            pass to be tried (a session whose graph has none pays nothing).
    """

    name: str
    run: PassFn
    roots: tuple = ()
    priority: int = 0
    description: str = ""
    plugin: str = ""


class GraphView:
    """What a :class:`GraphPass` reads of the graph being rewritten: the nodes in order, who
    produces and reads each tensor, constants, symbolic shapes and dtypes of the graph
    before rewriting (a name an earlier rewrite made has none), the graph's inputs and
    outputs, and fresh names."""

    def __init__(self, state: "_GraphState"):
        self._state = state

    @property
    def nodes(self) -> list:
        return list(self._state.nodes)

    @property
    def outputs(self) -> set:
        """Names of the graph's outputs."""
        return set(self._state.outputs)

    def producer(self, name: str) -> Optional[Node]:
        return self._state.producer.get(name)

    def consumers(self, name: str) -> list:
        return list(self._state.consumers.get(name, ()))

    def const(self, name: str) -> Optional[np.ndarray]:
        return self._state.constants.get(name)

    def shape(self, name: str) -> Optional[tuple]:
        c = self._state.constants.get(name)
        return tuple(c.shape) if c is not None else self._state.shape(name)

    def dtype(self, name: str) -> Optional[np.dtype]:
        c = self._state.constants.get(name)
        return c.dtype if c is not None else self._state.dtype(name)

    def opset(self, node: Node) -> int:
        if node.opset is not None:
            return node.opset
        return self._state.opsets.get(node.domain, self._state.opsets.get("", 1) if not node.domain else 1)

    def fresh(self, hint: str) -> str:
        """A tensor name used nowhere in the graph."""
        return self._state.fresh(hint)


@dataclass(frozen=True)
class Fired:
    """One replacement: which rewrite, at which root node, how many nodes went and came."""

    rewrite: str
    plugin: str
    root: str
    removed: int
    added: int


@dataclass
class RewriteReport:
    """What the rewrites did to one graph."""

    nodes_before: int = 0
    nodes_after: int = 0
    fired: list = field(default_factory=list)

    @classmethod
    def unchanged(cls, nodes: int) -> "RewriteReport":
        """The report of a graph of ``nodes`` nodes that no rewrite touched."""
        return cls(nodes_before=nodes, nodes_after=nodes)

    def counts(self) -> dict:
        """rewrite name -> times it fired (in the order they first fired)."""
        return dict(Counter(f.rewrite for f in self.fired))


class _GraphState:
    """The node list being rewritten, with producer/consumer maps and shape knowledge."""

    def __init__(self, graph: Graph, nodes: list, constants: dict, shape_info: Callable, opsets: Mapping):
        self.graph = graph
        self.opsets = dict(opsets)
        self.nodes: list[Node] = list(nodes)
        self.constants: dict[str, np.ndarray] = dict(constants)
        self.outputs = {v.name for v in graph.outputs}
        self._shape_info = shape_info
        self._names = itertools.count()
        self.taken = {t for n in nodes for t in n.inputs + n.outputs} | set(constants) | \
            {v.name for v in graph.inputs} | self.outputs
        self.reindex()

    def nodes_of(self, domain: str, op_type: str) -> list:
        """The nodes of one op in list order (an index kept until the node list changes: a
        few hundred rewrites each look for their root op in a graph of thousands of nodes)."""
        if self._by_op is None:
            self._by_op = {}
            for n in self.nodes:
                self._by_op.setdefault((n.domain, n.op_type), []).append(n)
        return self._by_op.get((domain, op_type), [])

    def reindex(self) -> None:
        self._by_op: Optional[dict] = None
        self.alive: set[int] = set()
        self.producer: dict[str, Node] = {}
        self.consumers: dict[str, list[Node]] = {}
        for n in self.nodes:
            self._index(n)

    def replace(self, m: "Match", built: list) -> dict:
        """The matched nodes out, ``built`` in at the root's place, forwards applied; returns
        {id of a node a forward rewrote: its new node}. The index is updated for the nodes
        that changed only (a pass over a large graph fires hundreds of times)."""
        gone = {id(n) for n in m.matched}
        at = next(i for i, n in enumerate(self.nodes) if n is m.root)
        nodes = [n for n in self.nodes[:at] if id(n) not in gone] + built + \
            [n for n in self.nodes[at + 1:] if id(n) not in gone]
        for n in m.matched:
            self._unindex(n)
        for n in built:
            self._index(n)
        renamed = {}
        if m.forwards:
            readers = {id(c): c for name in m.forwards for c in self.consumers.get(name, ()) if id(c) in self.alive}
            for old in readers.values():
                new_node = _forwarded(old, m.forwards)
                self._unindex(old)
                self._index(new_node)
                renamed[id(old)] = new_node
            nodes = [renamed.get(id(n), n) for n in nodes]
        self.nodes = nodes
        self._by_op = None
        self.constants.update(m.new_constants)
        return renamed

    def _index(self, n: Node) -> None:
        self.alive.add(id(n))
        for o in n.outputs:
            if o:
                self.producer[o] = n
        for i in n.inputs:
            if i:
                self.consumers.setdefault(i, []).append(n)

    def _unindex(self, n: Node) -> None:
        self.alive.discard(id(n))
        for o in n.outputs:
            if o and self.producer.get(o) is n:
                del self.producer[o]
        for i in n.inputs:
            readers = self.consumers.get(i)
            if readers:
                readers[:] = [c for c in readers if c is not n]

    def fresh(self, hint: str) -> str:
        while True:
            name = f"{hint}__rw{next(self._names)}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def shape(self, name: str):
        return self._shape_info(name)[0]

    def dtype(self, name: str):
        return self._shape_info(name)[1]


class Match:
    """A pattern matched at a root node: what ``where`` predicates and ``build`` see."""

    def __init__(self, state: _GraphState, rewrite: str):
        self._state = state
        self._rewrite = rewrite
        self.root: Optional[Node] = None
        self.nodes: dict[str, Node] = {}
        self.values: dict[str, str] = {}
        self.matched: list[Node] = []
        self.new_constants: dict[str, np.ndarray] = {}
        self.forwards: dict[str, str] = {}

    def _copy(self) -> "Match":
        m = Match(self._state, self._rewrite)
        m.root, m.nodes, m.values, m.matched = self.root, dict(self.nodes), dict(self.values), list(self.matched)
        return m

    # what a rewrite reads ----------------------------------------------------------
    def value(self, name: str) -> str:
        """The tensor name a leaf capture bound."""
        return self.values[name]

    def node(self, name: str) -> Node:
        """The node an op capture bound."""
        return self.nodes[name]

    def _tensor(self, name_or_capture: str) -> str:
        return self.values.get(name_or_capture, name_or_capture)

    def const(self, name: str) -> Optional[np.ndarray]:
        """The constant value of a capture (or tensor name), None when not a constant."""
        return self._state.constants.get(self._tensor(name))

    def shape(self, name: str) -> Optional[tuple]:
        """Symbolic shape of a capture or tensor (ints and :class:`Expr`), None when unknown."""
        t = self._tensor(name)
        c = self._state.constants.get(t)
        return tuple(c.shape) if c is not None else self._state.shape(t)

    def dtype(self, name: str) -> Optional[np.dtype]:
        t = self._tensor(name)
        c = self._state.constants.get(t)
        return c.dtype if c is not None else self._state.dtype(t)

    def rank(self, name: str) -> Optional[int]:
        s = self.shape(name)
        return None if s is None else len(s)

    def attr(self, node: str, attr: str, default: Any = None) -> Any:
        return self.nodes[node].attrs.get(attr, default)

    def opset(self, node: str) -> int:
        """The opset version a captured node runs at (its own pin, else the model's)."""
        n = self.nodes[node]
        if n.opset is not None:
            return n.opset
        return self._state.opsets.get(n.domain, self._state.opsets.get("", 1) if not n.domain else 1)

    @staticmethod
    def same_dim(a, b) -> bool:
        """True when two dims are provably equal for every value of the symbols."""
        if a is None or b is None:
            return False
        diff = a - b   # canonical polynomials: provably equal dims differ by the int 0
        return not isinstance(diff, Expr) and int(diff) == 0

    # what a rewrite writes ---------------------------------------------------------
    def fresh(self, hint: str = "t") -> str:
        """A new tensor name for an intermediate value of the replacement."""
        return self._state.fresh(hint)

    def constant(self, array: np.ndarray, hint: str = "c") -> str:
        """A new initializer holding ``array``; returns its name."""
        name = self.fresh(hint)
        self.new_constants[name] = np.asarray(array)
        return name

    def forward(self, output: str, to: str) -> None:
        """Let every consumer of ``output`` (a root output) read tensor ``to`` instead, so the
        replacement need not produce it (an Identity or a no-op Cast removed outright). A
        graph output cannot be forwarded: the rewrite then does not fire."""
        self.forwards[output] = to

    def make(self, op_type: str, inputs: Sequence[str], outputs: Optional[Sequence[str]] = None,
             domain: str = "", opset: Optional[int] = None, name: str = "", **attrs: Any) -> Node:
        """A replacement node; ``outputs`` default to the root's; ``opset`` pins the version of
        its domain for this node (an ONNX op newer than the model's opset)."""
        root = self.root
        return Node(name or f"{root.name}/{self._rewrite}", op_type, domain, tuple(inputs),
                    tuple(outputs if outputs is not None else root.outputs), dict(attrs), opset=opset)


def _scalar_equals(arr: np.ndarray, want: float) -> bool:
    if arr.size == 0 or arr.dtype.kind not in "fiu":
        return False
    a = arr.astype(np.float64).reshape(-1)
    return bool(np.all(np.abs(a - want) <= 1e-5 * max(abs(want), 1e-30)))


def _match(p: Optional[Pattern], tensor: str, m: Match) -> Iterator[Match]:
    """Every way ``p`` matches ``tensor`` given the bindings in ``m`` (a fresh Match each)."""
    state = m._state
    if p is None:
        if not tensor:
            yield m
        return
    if not tensor:
        return
    if p.op_type is None:
        if p.name:
            bound = m.values.get(p.name)
            if bound is not None and bound != tensor:
                return
        if p.constant:
            c = state.constants.get(tensor)
            if c is None or (p.scalar is not None and not _scalar_equals(c, p.scalar)):
                return
        out = m._copy()
        if p.name:
            out.values[p.name] = tensor
        if p.where is not None and not p.where(out, tensor):
            return
        yield out
        return
    node = state.producer.get(tensor)
    if node is None or node.op_type != p.op_type or node.domain != p.domain:
        return
    if p.output >= len(node.outputs) or node.outputs[p.output] != tensor:
        return
    if p.name:
        bound = m.nodes.get(p.name)
        if bound is not None and bound is not node:
            return
    if any(node.attrs.get(k) != v for k, v in p.attrs.items()):
        return
    ins = list(node.inputs)
    while ins and not ins[-1]:
        ins.pop()
    if len(ins) < len(p.inputs) or (len(ins) > len(p.inputs) and not p.more_inputs):
        return
    orders = [p.inputs]
    if p.op_type in COMMUTATIVE and len(p.inputs) == 2 and not p.domain:
        orders.append((p.inputs[1], p.inputs[0]))
    for order in orders:
        start = m._copy()
        if p.name:
            start.nodes[p.name] = node
        if not any(n is node for n in start.matched):
            start.matched.append(node)
        for done in _match_all(order, ins, start):
            if p.where is None or p.where(done, node):
                yield done


def _match_all(patterns: Sequence, tensors: Sequence[str], m: Match) -> Iterator[Match]:
    if not patterns:
        yield m
        return
    for first in _match(patterns[0], tensors[0], m):
        yield from _match_all(patterns[1:], tensors[1:], first)


def _removable(m: Match) -> bool:
    """Every matched node but the root is read only inside the match and is no graph output."""
    state = m._state
    inside = {id(n) for n in m.matched}
    for n in m.matched:
        if n is m.root:
            continue
        for o in n.outputs:
            if not o:
                continue
            if o in state.outputs or any(id(c) not in inside for c in state.consumers.get(o, ())):
                return False
    return True


def _try(rw: RewriteDef, state: _GraphState, root: Node) -> Optional[tuple]:
    seed = Match(state, rw.name)
    seed.root = root
    tensor = root.outputs[rw.pattern.output] if rw.pattern.output < len(root.outputs) else ""
    for m in _match(rw.pattern, tensor, seed):
        if not _removable(m):
            continue
        built = rw.build(m)
        if built is None or any(o in state.outputs for o in m.forwards):
            continue
        produced = {o for n in built for o in n.outputs if o} | set(m.forwards)
        used = [o for o in root.outputs if o and (o in state.outputs or state.consumers.get(o))]
        if not set(used) <= produced:
            raise ValueError(f"rewrite '{rw.name}' (plugin '{rw.plugin}') at node '{root.name}' does not produce "
                             f"the root's used outputs {sorted(set(used) - produced)}")
        return m, list(built)
    return None


def _run_pass(gp: GraphPass, state: _GraphState, report: RewriteReport) -> None:
    """Run a whole-graph pass; its replacement becomes the state's node list."""
    if gp.roots and not any((n.domain, n.op_type) in gp.roots for n in state.nodes):
        return
    result = gp.run(GraphView(state))
    if result is None:
        return
    nodes, new_constants = result
    before = {id(n) for n in state.nodes}
    after = {id(n) for n in nodes}
    removed, added = len(before - after), len(after - before)
    if not removed and not added:
        return
    state.nodes = list(nodes)
    state.constants.update(new_constants)
    state.taken.update(new_constants)
    state.reindex()
    report.fired.append(Fired(gp.name, gp.plugin, "(graph)", removed, added))


def _forwarded(node: Node, forwards: Mapping[str, str]) -> Node:
    if not any(i in forwards for i in node.inputs):
        return node
    return Node(node.name, node.op_type, node.domain, tuple(forwards.get(i, i) for i in node.inputs),
                node.outputs, node.attrs, node.opset)


def apply_rewrites(graph: Graph, nodes: Sequence[Node], constants: Mapping[str, np.ndarray],
                   rewrites: Sequence[RewriteDef], shape_info: Callable[[str], tuple],
                   opsets: Optional[Mapping[str, int]] = None) -> tuple[list[Node], dict, RewriteReport]:
    """Run ``rewrites`` (already in order) over ``nodes`` (topologically ordered).

    Args:
        graph: the graph the nodes belong to (its inputs and outputs).
        constants: tensor name -> value of every constant (initializers and folded values).
        shape_info: tensor name -> ``(symbolic shape or None, dtype or None)`` of the graph
            before rewriting (names a rewrite makes are unknown).
        opsets: the model's opset per domain ("" for ai.onnx).

    Returns:
        the new node list (topologically ordered), the constants (new ones added) and the
        report.

    Raises:
        ValueError: a rewrite's replacement does not produce the root's used outputs.
    """
    state = _GraphState(graph, list(nodes), dict(constants), shape_info, opsets or {})
    report = RewriteReport(nodes_before=len(state.nodes))
    for rw in rewrites:
        if isinstance(rw, GraphPass):
            _run_pass(rw, state, report)
            continue
        roots = state.nodes_of(rw.pattern.domain, rw.pattern.op_type)
        renamed: dict[int, Node] = {}   # a root whose inputs a forward rewrote -> its new node
        for root in roots:
            while id(root) in renamed:
                root = renamed[id(root)]
            if id(root) not in state.alive:
                continue   # consumed by an earlier match of this rewrite
            found = _try(rw, state, root)
            if found is None:
                continue
            m, built = found
            renamed.update(state.replace(m, built))
            report.fired.append(Fired(rw.name, rw.plugin, root.name, len(m.matched), len(built)))
    report.nodes_after = len(state.nodes)
    return state.nodes, state.constants, report
