"""Symbolic shape inference at session creation, and plans instantiated from it.

Every tensor gets a dtype and a shape whose dims are ints or expressions over the input
symbols (``batch``, ``sequence*2``, ``(h - 1)//2 + 1``); shape tensors get symbolic
*values* (ONNX's partial data propagation, through each OpDef's ``propagate_value``).
A dim that truly depends on data gets a fresh ``unk__N`` symbol and its tensor is marked
data-dependent. Source: docs/SEEDS.md §6 (ONNX symbolic shape inference proposal), which
this extends with symbolic expressions.

When every node is resolved this way, a new input signature is planned by evaluating one
generated function of the symbol values instead of re-running each op's inference.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .graph import PreparedGraph
from .inference import (
    DYNAMIC,
    FOLD_LIMIT,
    FOLDED,
    STEP,
    Resolution,
    _has_subgraph,
    _infer,
    constant_state,
    kernel_for,
    run_node_now,
)
from .model import input_dim_exprs
from .records import InferContext
from .registry import Registry
from .symbolic import CODE_NAMESPACE, Expr, dim_str, free_symbols, sym, to_code

__all__ = ["SymbolicGraph", "infer_symbolic"]


@dataclass
class SymbolicGraph:
    """The import-time view of every tensor: symbolic shape, dtype, symbolic value."""

    shapes: list                       # slot -> tuple of dims, or None (rank unknown)
    dtypes: list                       # slot -> np.dtype or None
    values: list                       # slot -> ndarray (int or object of dims) or None
    status: list                       # node index -> FOLDED / STEP / DYNAMIC
    kernels: list                      # node index -> KernelDef or None
    input_symbols: dict                # symbol -> (input slot, axis) where it is first bound
    fresh_symbols: set = field(default_factory=set)
    failures: dict = field(default_factory=dict)   # node index -> why inference gave up
    _compiled: Optional[object] = None

    def is_data_dependent(self, slot: int) -> bool:
        s = self.shapes[slot]
        return s is None or any(free_symbols(d) & self.fresh_symbols for d in s)

    @property
    def fully_resolved(self) -> bool:
        """True when no node is data-dependent: plans can be instantiated symbolically."""
        return DYNAMIC not in self.status

    def display_shape(self, slot: int):
        s = self.shapes[slot]
        return None if s is None else [d if isinstance(d, int) else dim_str(d) for d in s]

    # plan instantiation -----------------------------------------------------------
    def instantiate(self, pg: PreparedGraph, input_shapes: dict) -> Optional[Resolution]:
        """A Resolution for concrete input shapes by evaluating the symbolic shapes, or None
        when that is not possible (data-dependent graph, a dim that would be negative)."""
        if not self.fully_resolved:
            return None
        if self._compiled is None:
            self._compiled = _compile(self, pg)
        binder, shape_fn, value_fn = self._compiled  # type: ignore[misc]
        env = binder(input_shapes)
        try:
            shapes = shape_fn(*env)
            folded = value_fn(*env)
        except (ZeroDivisionError, ValueError, TypeError):
            return None
        for s in shapes:
            if s is not None and any(d < 0 for d in s):
                return None
        values = list(self.values)
        for slot, v in folded:
            values[slot] = v
            shapes[slot] = v.shape
        for slot, s in input_shapes.items():
            shapes[slot] = s
        for slot, arr in pg.constants.items():
            shapes[slot] = arr.shape
        contexts: list = []
        for idx, pn in enumerate(pg.nodes):
            if self.status[idx] != STEP and not pn.opdef.value_inputs:
                contexts.append(None)
                continue
            ins = pn.all_inputs
            ctx = InferContext(pn.node, pn.opset, [shapes[i] if i >= 0 else None for i in ins],
                               [self.dtypes[i] if i >= 0 else None for i in ins],
                               [values[i] if i >= 0 else None for i in ins])
            planned = [shapes[o] if o >= 0 else None for o in pn.outputs]
            if pn.opdef.value_inputs:
                # the symbolic shape assumed things of the values it read (a Reshape target
                # entry is not 0, ...): check them with the real values; raises on a broken rule
                _infer(pn, ctx)
                if [tuple(x) if x is not None else None for x in ctx.output_shapes] != \
                        [tuple(x) if x is not None else None for x in planned]:
                    return None
            ctx.output_shapes = planned
            ctx.output_dtypes = [self.dtypes[o] if o >= 0 else None for o in pn.outputs]
            contexts.append(ctx if self.status[idx] == STEP else None)
        return Resolution(shapes, list(self.dtypes), values, list(self.status), contexts, list(self.kernels))


def _compile(sg: SymbolicGraph, pg: PreparedGraph):
    """Generate (binder, shapes function, folded-values function) for this graph."""
    names = sorted(sg.input_symbols)
    var = {n: f"s{i}" for i, n in enumerate(names)}

    def binder(input_shapes: dict) -> list:
        return [input_shapes[sg.input_symbols[n][0]][sg.input_symbols[n][1]] for n in names]

    args = ", ".join(var[n] for n in names)
    lines = [f"def shapes({args}):", "    return ["]
    for slot, shape in enumerate(sg.shapes):
        if shape is None or slot in pg.constants:
            lines.append("        None,")
        else:
            lines.append("        (" + "".join(to_code(d, var.__getitem__) + ", " for d in shape) + "),")
    lines.append("    ]")
    lines.append(f"def values({args}):")
    lines.append("    return [")
    for idx, pn in enumerate(pg.nodes):
        if sg.status[idx] != FOLDED:
            continue
        for o in pn.outputs:
            v = sg.values[o] if o >= 0 else None
            if v is None or v.dtype != object:
                continue
            items = ", ".join(to_code(x, var.__getitem__) for x in v.reshape(-1).tolist())
            lines.append(f"        ({o}, _np.array([{items}], dtype=_dt[{o}]).reshape({tuple(v.shape)!r})),")
    lines.append("    ]")
    namespace: dict = {"_np": np, "_dt": {i: d for i, d in enumerate(sg.dtypes)}, **CODE_NAMESPACE}
    exec(compile("\n".join(lines), "<dynashape-symbolic-plan>", "exec"), namespace)  # noqa: S102
    return binder, namespace["shapes"], namespace["values"]


def _fresh_names(taken: set[str]):
    for i in itertools.count():
        name = f"unk__{i}"
        if name not in taken:
            yield name


def infer_symbolic(pg: PreparedGraph, registry: Registry) -> SymbolicGraph:
    """Walk the graph once with symbolic input dims (never raises: a node whose inference
    fails symbolically is marked DYNAMIC and resolved with concrete shapes at run time)."""
    shapes, dtypes, values = constant_state(pg)
    taken = {d.value for vi in pg.graph.inputs if vi.dims for d in vi.dims if isinstance(d.value, str)}
    taken |= set(pg.names)
    input_symbols: dict = {}
    for vi in pg.graph.inputs:
        s = pg.slot[vi.name]
        dims = input_dim_exprs(vi, taken)
        shapes[s] = dims
        dtypes[s] = vi.dtype
        for axis, d in enumerate(dims or ()):
            if isinstance(d, Expr):
                for name in free_symbols(d):
                    input_symbols.setdefault(name, (s, axis))
    names = _fresh_names(taken)
    fresh: set = set()

    def new_dim() -> Expr:
        name = next(names)
        fresh.add(name)
        return sym(name)

    sg = SymbolicGraph(shapes, dtypes, values, [], [], input_symbols, fresh)
    for idx, pn in enumerate(pg.nodes):
        sg.status.append(_infer_node(sg, idx, pn, registry, new_dim))
    return sg


def _infer_node(sg: SymbolicGraph, idx: int, pn, registry: Registry, new_dim) -> str:
    shapes, dtypes, values = sg.shapes, sg.dtypes, sg.values
    ins = pn.all_inputs
    ctx = InferContext(pn.node, pn.opset, [shapes[i] if i >= 0 else None for i in ins],
                       [dtypes[i] if i >= 0 else None for i in ins],
                       [values[i] if i >= 0 else None for i in ins], symbolic=True, fresh=new_dim)
    try:
        out_dtypes = list(pn.opdef.infer_dtype(ctx))
    except Exception as exc:  # noqa: BLE001 - recorded, resolved at run time
        out_dtypes = [None] * len(pn.outputs)
        sg.failures[idx] = f"dtype: {type(exc).__name__}: {exc}"
    for o, d in zip(pn.outputs, out_dtypes):
        if o >= 0 and d is not None:
            dtypes[o] = np.dtype(d)
    kernel = None
    try:
        kernel = kernel_for(registry, pn, ctx)
    except Exception as exc:  # noqa: BLE001
        sg.failures.setdefault(idx, f"kernel: {exc}")
    sg.kernels.append(kernel)
    if any(i >= 0 and shapes[i] is None for i in ins) or idx in sg.failures:
        for o in pn.outputs:
            if o >= 0:
                shapes[o] = None
        return DYNAMIC
    try:
        out_shapes = list(pn.opdef.infer_shape(ctx))
    except Exception as exc:  # noqa: BLE001 - e.g. a rule that only concrete dims can decide
        sg.failures[idx] = f"{type(exc).__name__}: {exc}"
        out_shapes = [None] * len(pn.outputs)
    ctx.output_shapes = [tuple(s) if s is not None else None for s in out_shapes] + [None] * len(pn.outputs)
    ctx.output_dtypes = [dtypes[o] if o >= 0 else None for o in pn.outputs]
    for o, s in zip(pn.outputs, ctx.output_shapes):
        if o >= 0:
            shapes[o] = s
    outs = [o for o in pn.outputs if o >= 0]
    if any(shapes[o] is None or sg.is_data_dependent(o) for o in outs) or pn.opdef.data_dependent:
        return DYNAMIC
    folded = _symbolic_values(pn, ctx, values, kernel)
    if folded is not None:
        for o, v in zip(pn.outputs, folded):
            if o >= 0:
                values[o] = v
        return FOLDED
    return STEP


def _symbolic_values(pn, ctx: InferContext, values, kernel) -> Optional[list]:
    if not pn.opdef.deterministic or _has_subgraph(pn):
        return None
    known = all(i < 0 or values[i] is not None for i in pn.all_inputs)
    concrete = known and all(i < 0 or values[i].dtype != object for i in pn.all_inputs)
    shapes_int = all(s is not None and all(isinstance(d, int) for d in s) for s in ctx.output_shapes[:len(pn.outputs)])
    if concrete and shapes_int and kernel is not None:
        if sum(int(np.prod(s)) for s in ctx.output_shapes[:len(pn.outputs)]) > FOLD_LIMIT:
            return None
        try:
            return [np.asarray(v) for v in run_node_now(pn, kernel, ctx, [values[i] if i >= 0 else None
                                                                         for i in pn.all_inputs])]
        except Exception:  # noqa: BLE001
            return None
    if pn.opdef.propagate_value is None:
        return None
    try:
        vals = pn.opdef.propagate_value(ctx)
    except Exception:  # noqa: BLE001
        return None
    if vals is None or any(v is None for v in vals):
        return None
    out = []
    for v in vals:
        v = np.asarray(v)
        if v.dtype == object and all(isinstance(x, int) for x in v.reshape(-1).tolist()):
            v = v.astype(np.int64)
        out.append(v)
    return out
