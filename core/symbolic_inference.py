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
kernels make them at run time and they are never planned.

Source: docs/SEEDS.md §6 (ONNX symbolic shape inference proposal), which this extends
with symbolic expressions and binding points.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .dtypes import ValueType
from .graph import PreparedGraph
from .node import NodeServices, choose_kernel, fold, infer, make_context
from .registry import Registry
from .symbolic import Expr, dim_str, free_symbols, sym

__all__ = ["FOLDED", "PLAN", "STEP", "BINDING", "SymbolicGraph", "infer_symbolic"]

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


def infer_symbolic(pg: PreparedGraph, registry: Registry, input_dims: dict, input_dtypes: dict,
                   services: Optional[NodeServices] = None, input_values: Optional[dict] = None) -> SymbolicGraph:
    """Walk the graph once with symbolic inputs (never raises: a node whose inference fails
    symbolically becomes a BINDING node, inferred with real values at run time).

    Args:
        input_dims: input slot -> tuple of dims (ints and symbols) or None (rank unknown).
        input_dtypes: input slot -> numpy dtype or None.
        input_values: input slot -> host value known at compile time (subgraph scopes).
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
    for idx, pn in enumerate(pg.nodes):
        status = _infer_node(sg, idx, pn, registry, services, new_dim)
        if status == STEP and _only_signature_inputs(pn, known):
            status = PLAN
        if status in (FOLDED, PLAN):
            known.update(o for o in pn.outputs if o >= 0)
        if status == BINDING:
            _fresh_binding_outputs(sg, idx, pn, new_dim)
        sg.status.append(status)
    return sg


def _only_signature_inputs(pn, known: set) -> bool:
    """Every input read for its data is a constant, a folded or a plan-time value."""
    if not pn.opdef.deterministic or pn.implicit:
        return False
    skip = pn.opdef.shape_only_inputs
    return all(i < 0 or i in known for j, i in enumerate(pn.inputs) if j not in skip)


def _infer_node(sg: SymbolicGraph, idx: int, pn, registry: Registry, services, new_dim) -> str:
    shapes, dtypes, values = sg.shapes, sg.dtypes, sg.values
    ctx = make_context(pn, shapes, dtypes, values, services, symbolic=True, fresh=new_dim)
    sg.contexts.append(ctx)
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
