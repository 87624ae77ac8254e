"""Symbolic shape inference at session creation: one walk over the graph with symbolic
input dims.

Every tensor gets a dtype and a shape whose dims are ints or expressions over the symbols
(``batch``, ``sequence*2``, ``(h - 1)//2 + 1``); shape tensors get symbolic *values*
(ONNX's partial data propagation, through each OpDef's ``propagate_value``). Each node
gets a status:

* ``FOLDED``: its output values are known from the symbols alone (shape arithmetic); they
  are computed by the program's generated code, the node never runs;
* ``PLAN``: its outputs depend only on shapes and constants (position ids, causal masks):
  it runs once per signature, when the plan is made;
* ``STEP``: its outputs depend on feed data and its shapes are symbolic: it runs every run
  into planned buffers;
* ``BINDING``: its output shapes depend on data (NonZero, If, TopK with a data k, a node
  whose inference failed): it is inferred and run when reached, then the fresh symbols of
  its outputs are bound from what it produced and the rest of the program continues with
  its symbolic plan.

Sequences and optionals (ONNX IR.md "Types") have no shape: their dtype is a
:class:`~dynashape.dtypes.SequenceType` / :class:`~dynashape.dtypes.OptionalType` and their
shape None, which (unlike a tensor of unknown rank) makes no node a binding point; the
kernels make them at run time and they are never planned. A sequence type carries what is
proven of its elements (rank, int dims) for SequenceAt and ConcatFromSequence.

A node with subgraphs (If, Loop) is inferred with an :class:`OuterScope`, through which its
rule may walk a subgraph symbolically (the subgraph is compiled only when it first runs):
a Loop finds the element dims of the sequences it carries that way.

Source: docs/SEEDS.md §6 (ONNX symbolic shape inference proposal), which this extends
with symbolic expressions and binding points.
"""
from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .dtypes import ValueType, known_dims
from .errors import DynashapeError, ShapeInferenceError
from .graph import PreparedGraph, prepare_graph
from .node import NodeServices, choose_kernel, fold, has_subgraph, infer, make_context
from .registry import Registry
from .symbolic import Expr, dim_str, free_symbols, sym

__all__ = ["FOLDED", "PLAN", "STEP", "BINDING", "SymbolicGraph", "PriorInference", "OuterScope", "infer_symbolic"]

FOLDED, PLAN, STEP, BINDING = "folded", "plan", "step", "binding"


@dataclass
class SymbolicGraph:
    """The import-time view of every tensor and node.

    ``shapes[slot]`` is a tuple of dims or None (rank unknown); ``values[slot]`` a host
    value (int array, or object array of dims) or None. Per node: ``status``, ``kernels``,
    ``contexts`` (the symbolic InferContext with its outputs), ``guards`` (conditions its
    symbolic rule relies on, from ``ctx.assume``). ``input_symbols`` maps each input symbol
    to the first ``(input slot, axis)`` that binds it; ``binds[node]`` lists the
    ``(output slot, axis, symbol)`` a BINDING node's run binds.
    """

    shapes: list
    dtypes: list
    values: list
    status: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    contexts: list = field(default_factory=list)
    guards: dict = field(default_factory=dict)
    input_symbols: dict = field(default_factory=dict)
    fresh_symbols: set = field(default_factory=set)
    bound_symbols: set = field(default_factory=set)   # fresh symbols a BINDING node's run binds
    binds: dict = field(default_factory=dict)
    known_by_signature: set = field(default_factory=set)  # slots a signature fixes: constants, FOLDED/PLAN outputs
    failures: dict = field(default_factory=dict)   # node index -> why inference gave up

    def is_data_dependent(self, slot: int) -> bool:
        s = self.shapes[slot]
        return s is None or any(free_symbols(d) & self.fresh_symbols for d in s)

    @property
    def fully_resolved(self) -> bool:
        """True when no node is a binding point: one plan covers the whole graph."""
        return BINDING not in self.status

    def display_shape(self, slot: int):
        s = self.shapes[slot]
        return None if s is None else [d if isinstance(d, int) else dim_str(d) for d in s]


def _fresh_names(taken: set[str]):
    for i in itertools.count():
        name = f"unk__{i}"
        if name not in taken:
            yield name


@dataclass
class PriorInference:
    """A walk of an earlier form of a graph (before the rewrites), whose results the walk of
    the rewritten graph reuses for every node that is the same node with equal inputs."""

    pg: PreparedGraph
    sg: SymbolicGraph
    registry: Registry
    input_dims: dict     # by input slot of ``pg``
    input_dtypes: dict
    #: the walk of another program of the same graph (its inputs' dims may differ: a program
    #: split where a dim_param took two values): each node is compared by its own inputs
    any_inputs: bool = False

    def matches(self, pg: PreparedGraph, registry: Registry, input_dims: dict, input_dtypes: dict) -> bool:
        """The walk had this registry and the same dims and dtypes per input name (or, for
        ``any_inputs``, was of this graph)."""
        if registry is not self.registry:
            return False
        if self.any_inputs:
            return pg is self.pg

        def by_name(names: list, per_slot: dict) -> dict:
            return {names[s]: v for s, v in per_slot.items()}
        return (by_name(pg.names, input_dims) == by_name(self.pg.names, self.input_dims)
                and by_name(pg.names, input_dtypes) == by_name(self.pg.names, self.input_dtypes))


@dataclass
class OuterScope:
    """What the subgraphs of one node see of the graph around it at import: that graph's
    opsets and registry, and each value the node's subgraphs read from it, by name, as
    ``(shape, dtype, host value or None)``."""

    opsets: dict
    registry: Registry
    values: dict

    def infer(self, graph, formal: list) -> Optional[list]:
        """``(dims, dtype)`` of each output of the subgraph ``graph`` from a symbolic walk of
        it in this scope (the walk compiles nothing; the subgraph's own compile, when it
        first runs, reports what is wrong with it).

        Args:
            graph: a subgraph of the node (a ``Graph`` attribute).
            formal: ``(dims, dtype)`` of each of its formal inputs: dims ints, or None for a
                dim not known (a symbol of its own in the walk); None for an unknown rank.

        Returns:
            Per output, its dims (ints, None where the walk does not prove an int; None for
            an unknown rank) and its dtype (a sequence's with the hints the walk proves);
            None when the walk cannot be made (an op the registry lacks, a rule that fails
            on the subgraph's attributes).
        """
        outer = tuple(sorted(graph.outer_names()))
        constants = {n: self.values[n][2] for n in outer if _host_constant(self.values.get(n))}
        try:
            pg = prepare_graph(graph, self.registry, self.opsets, outer=outer, outer_constants=constants)
            dims, dtypes, values = self._outer_inputs(pg, outer, constants)
            taken = {name for d in dims.values() for x in d or () for name in free_symbols(x)}
            for vi, (shape, dtype) in zip(graph.inputs, formal):
                slot = pg.slot[vi.name]
                dims[slot], dtypes[slot] = _local_dims(vi.name, shape, taken), dtype
            sg = infer_symbolic(pg, self.registry, dims, dtypes, NodeServices(self.opsets, self.registry), values)
        except DynashapeError:
            return None
        return [(known_dims(sg.shapes[s]), sg.dtypes[s]) for s in pg.output_slots]

    def _outer_inputs(self, pg: PreparedGraph, outer: tuple, constants: dict) -> tuple:
        """Dims, dtypes and symbolic values of the outer values the walk takes as inputs."""
        dims, dtypes, values = {}, {}, {}
        for name in outer:
            if name in constants:
                continue
            shape, dtype, value = self.values.get(name, (None, None, None))
            slot = pg.slot[name]
            dims[slot], dtypes[slot] = shape, dtype
            if value is not None:
                values[slot] = value
        return dims, dtypes, values


def _host_constant(entry) -> bool:
    """An outer value known on the host (not symbolic): a constant of the walked subgraph."""
    return entry is not None and isinstance(entry[2], np.ndarray) and entry[2].dtype != object


def _local_dims(name: str, dims, taken: set) -> Optional[tuple]:
    """A formal input's dims for a walk: each None a symbol of its own (``unk__<input>_<axis>``,
    unique among ``taken``)."""
    if dims is None:
        return None
    out = []
    for axis, d in enumerate(dims):
        if d is None:
            local = f"unk__{name}_{axis}"
            while local in taken:
                local += "_"
            taken.add(local)
            d = sym(local)
        out.append(d)
    return tuple(out)


def _scope(pg: PreparedGraph, sg: "SymbolicGraph", pn, registry: Registry) -> OuterScope:
    return OuterScope(pg.opsets, registry, {pg.names[s]: (sg.shapes[s], sg.dtypes[s], sg.values[s])
                                            for s in pn.implicit})


def infer_symbolic(pg: PreparedGraph, registry: Registry, input_dims: dict, input_dtypes: dict,
                   services: Optional[NodeServices] = None, input_values: Optional[dict] = None,
                   prior: Optional[PriorInference] = None) -> SymbolicGraph:
    """Walk the graph once with symbolic inputs (never raises: a node whose inference fails
    symbolically becomes a BINDING node, inferred with real values at run time).

    Args:
        input_dims: input slot -> tuple of dims (ints and symbols) or None (rank unknown).
        input_dtypes: input slot -> numpy dtype or None.
        input_values: input slot -> host value known at compile time (subgraph scopes).
        prior: an earlier walk (of the graph before its rewrites, same inputs): a node of
            both graphs whose inputs are equal there takes its results from it instead of
            being inferred, folded and given a kernel again.
    """
    shapes: list = [None] * len(pg.names)
    dtypes: list = [None] * len(pg.names)
    values: list = [None] * len(pg.names)
    for s, arr in pg.constants.items():
        shapes[s], dtypes[s], values[s] = tuple(arr.shape), arr.dtype, arr
    taken = set(pg.names)
    sg = SymbolicGraph(shapes, dtypes, values)
    for s in pg.input_slots:
        dims = input_dims.get(s)
        shapes[s] = None if dims is None else tuple(dims)
        dtypes[s] = input_dtypes.get(s)
        if input_values and s in input_values:
            values[s] = input_values[s]
        for axis, d in enumerate(shapes[s] or ()):
            for name in sorted(free_symbols(d)):
                taken.add(name)
                sg.input_symbols.setdefault(name, (s, axis))
    names = _fresh_names(taken)
    fresh = sg.fresh_symbols   # (not sg: the contexts keep new_dim, and sg keeps the contexts)

    def new_dim() -> Expr:
        name = next(names)
        fresh.add(name)
        return sym(name)

    known = sg.known_by_signature
    known.update(pg.constants)
    reuse = _Reuse(prior, registry, services, new_dim) if prior is not None and not input_values and \
        prior.matches(pg, registry, input_dims, input_dtypes) else None
    for idx, pn in enumerate(pg.nodes):
        status = reuse.node(sg, pn) if reuse is not None else None
        if status is None:
            scope = _scope(pg, sg, pn, registry) if has_subgraph(pn) else None
            status = _infer_node(sg, idx, pn, registry, services, new_dim, scope)
        if status == STEP and _only_signature_inputs(pn, known):
            status = PLAN
        if status in (FOLDED, PLAN):
            known.update(o for o in pn.outputs if o >= 0)
        if status == BINDING:
            _fresh_binding_outputs(sg, idx, pn, new_dim)
        sg.status.append(status)
    return sg


class _Reuse:
    """Takes a node's results from a prior walk when that walk saw the same node (the same
    Node object, schema and opset) with equal input shapes, dtypes and values, and its
    results name no symbol the walk made up (fresh symbols are numbered per walk)."""

    def __init__(self, prior: PriorInference, registry: Registry, services, new_dim):
        self.prior = prior
        self.registry = registry
        self.services = services
        self.new_dim = new_dim
        self.index = {id(pn.node): k for k, pn in enumerate(prior.pg.nodes)}

    def node(self, sg: SymbolicGraph, pn) -> Optional[str]:
        k = self.index.get(id(pn.node))
        old, psg = (self.prior.pg.nodes[k], self.prior.sg) if k is not None else (None, None)
        if old is None or old.opdef is not pn.opdef or old.opset != pn.opset or pn.implicit or old.implicit \
                or psg.status[k] == BINDING or k in psg.failures or len(old.inputs) != len(pn.inputs):
            return None
        if not all(_same_input(sg, i, psg, j) for i, j in zip(pn.inputs, old.inputs)):
            return None
        outs = [(o, p) for o, p in zip(pn.outputs, old.outputs) if o >= 0]
        if any(p < 0 or _mentions(psg.shapes[p], psg.fresh_symbols) or _symbolic_value_mentions(
                psg.values[p], psg.fresh_symbols) for _, p in outs):
            return None
        ctx = psg.contexts[k]
        if self.prior.any_inputs:      # (another program's context: that program keeps its own)
            ctx = copy.copy(ctx)
            ctx.guards, ctx.output_shapes, ctx.output_dtypes = (list(ctx.guards), list(ctx.output_shapes),
                                                                 list(ctx.output_dtypes))
        ctx.services, ctx.fresh, ctx.prepacked = self.services, self.new_dim, None
        try:   # (chosen again: a kernel's accepts may ask the engine's services, the prior walk had none)
            kernel = choose_kernel(self.registry, pn, ctx)
        except Exception:  # noqa: BLE001 - inferred in full, which records why
            return None
        for o, p in outs:
            sg.shapes[o], sg.dtypes[o], sg.values[o] = psg.shapes[p], psg.dtypes[p], psg.values[p]
        sg.contexts.append(ctx)
        sg.kernels.append(kernel)
        if k in psg.guards:
            sg.guards[len(sg.status)] = list(psg.guards[k])
        return FOLDED if psg.status[k] == FOLDED else STEP


def _same_input(sg: SymbolicGraph, slot: int, psg: SymbolicGraph, old_slot: int) -> bool:
    if slot < 0 or old_slot < 0:
        return slot < 0 and old_slot < 0
    if sg.shapes[slot] != psg.shapes[old_slot] or sg.dtypes[slot] != psg.dtypes[old_slot]:
        return False
    a, b = sg.values[slot], psg.values[old_slot]
    if a is None or b is None or a is b:
        return a is b
    if a.dtype != b.dtype or a.shape != b.shape or a.size > _COMPARED_VALUES:
        return False
    return a.reshape(-1).tolist() == b.reshape(-1).tolist() if a.dtype == object else bool(np.array_equal(a, b))


#: the largest host value compared element by element (a shape vector, a small constant);
#: a larger one is equal only as the same array
_COMPARED_VALUES = 4096


def _symbolic_value_mentions(value, symbols: set) -> bool:
    return value is not None and value.dtype == object and _mentions(value.reshape(-1).tolist(), symbols)


def _only_signature_inputs(pn, known: set) -> bool:
    """Every input read for its data is a constant, a folded or a plan-time value."""
    if not pn.opdef.deterministic or pn.implicit:
        return False
    skip = pn.opdef.shape_only_inputs
    return all(i < 0 or i in known for j, i in enumerate(pn.inputs) if j not in skip)


#: the kinds of a rule's failure no input dim or value can change (its attributes are wrong,
#: or an axis or a rank is, and the ranks are known here: an input of unknown rank never gets
#: this far): raised when the model is compiled, not left to the first run
LOAD_TIME_KINDS = frozenset({"InvalidAttribute", "MissingAttribute", "AxisOutOfRange", "InvalidRank"})


def _infer_node(sg: SymbolicGraph, idx: int, pn, registry: Registry, services, new_dim,
                scope: Optional[OuterScope] = None) -> str:
    ctx = make_context(pn, sg.shapes, sg.dtypes, sg.values, services, symbolic=True, fresh=new_dim)
    sg.contexts.append(ctx)
    ctx.scope = scope
    try:
        return _infer_in_context(sg, idx, pn, registry, ctx)
    finally:
        ctx.scope = None    # (it holds the outer values, weights too: the contexts are kept)


def _infer_in_context(sg: SymbolicGraph, idx: int, pn, registry: Registry, ctx) -> str:
    shapes, dtypes, values = sg.shapes, sg.dtypes, sg.values
    kernel = None
    try:
        kernel = choose_kernel(registry, pn, ctx)
    except Exception as exc:  # noqa: BLE001 - e.g. a dtype no kernel takes: reported when run
        sg.failures[idx] = f"kernel: {exc}"
    sg.kernels.append(kernel)
    if any(i >= 0 and shapes[i] is None and not isinstance(dtypes[i], ValueType) for i in pn.all_inputs) \
            or idx in sg.failures:
        _set_outputs(sg, pn, [None] * len(pn.outputs), _dtypes_or_none(pn, ctx, sg, idx))
        return BINDING
    try:
        infer(pn, ctx)
    except ShapeInferenceError as exc:
        if exc.kind in LOAD_TIME_KINDS:
            raise
        sg.failures[idx] = f"{type(exc).__name__}: {exc}"
        _set_outputs(sg, pn, [None] * len(pn.outputs), _dtypes_or_none(pn, ctx, sg, idx))
        return BINDING
    except Exception as exc:  # noqa: BLE001 - a rule only concrete dims can decide
        sg.failures[idx] = f"{type(exc).__name__}: {exc}"
        _set_outputs(sg, pn, [None] * len(pn.outputs), _dtypes_or_none(pn, ctx, sg, idx))
        return BINDING
    _set_outputs(sg, pn, ctx.output_shapes, ctx.output_dtypes)
    outs = [o for o in pn.outputs if o >= 0]
    unbound = sg.fresh_symbols - sg.bound_symbols
    if pn.opdef.data_dependent or any(_unknown(shapes[o], dtypes[o]) or _mentions(shapes[o], unbound) for o in outs):
        return BINDING
    try:
        folded = fold(pn, kernel, ctx, values)
    except Exception:  # noqa: BLE001 - the kernel fails on these values: it does so when run
        folded = None
    if ctx.guards:
        sg.guards[idx] = list(ctx.guards)
    if folded is None or any(v.dtype == object and _mentions(v.reshape(-1).tolist(), unbound) for v in folded):
        return STEP
    for o, v in zip(pn.outputs, folded):
        if o >= 0:
            values[o] = v
    return FOLDED


def _unknown(shape, dtype) -> bool:
    """A tensor whose rank is unknown. Sequences and optionals (container dtypes) have no
    shape: their values are made by the kernels at run time, never planned."""
    return shape is None and not isinstance(dtype, ValueType)


def _mentions(dims, symbols: set) -> bool:
    return bool(symbols) and dims is not None and any(free_symbols(d) & symbols for d in dims)


def _dtypes_or_none(pn, ctx, sg: SymbolicGraph, idx: int) -> list:
    try:
        return [d if d is None or isinstance(d, ValueType) else np.dtype(d) for d in pn.opdef.infer_dtype(ctx)]
    except Exception as exc:  # noqa: BLE001
        sg.failures.setdefault(idx, f"dtype: {type(exc).__name__}: {exc}")
        return [None] * len(pn.outputs)


def _set_outputs(sg: SymbolicGraph, pn, shapes: list, dtypes: list) -> None:
    for k, o in enumerate(pn.outputs):
        if o < 0:
            continue
        sg.shapes[o] = shapes[k] if k < len(shapes) else None
        sg.dtypes[o] = dtypes[k] if k < len(dtypes) else None


def _fresh_binding_outputs(sg: SymbolicGraph, idx: int, pn, new_dim) -> None:
    """Give every non-int dim of a binding node's outputs a fresh symbol of its own, bound
    from the arrays the node produces (int dims stay: the run checks them)."""
    binds = []
    for o in pn.outputs:
        if o < 0 or sg.shapes[o] is None:
            continue
        dims = []
        for axis, d in enumerate(sg.shapes[o]):
            if not isinstance(d, int):
                d = new_dim()
                name = next(iter(d.symbols()))
                sg.bound_symbols.add(name)
                binds.append((o, axis, name))
            dims.append(d)
        sg.shapes[o] = tuple(dims)
        sg.values[o] = None
    sg.binds[idx] = binds
