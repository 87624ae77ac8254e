"""Shape resolution for one input signature: walk the nodes in order, infer every
tensor's concrete shape and dtype, and evaluate the shape subgraph on the host as it is
reached (the values Reshape/Expand/Range/Slice/... read).

A node is
* FOLDED when every output value is known on the host (constants, shape tensors): it
  never runs at execution time, its outputs are part of the plan;
* STEP when its output shapes are known: it runs with planned output buffers;
* DYNAMIC when an output shape depends on data (NonZero, If, a Reshape whose target is
  computed from data, or anything downstream of such a node): it is inferred, allocated
  and run when reached at execution time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .errors import DynashapeError, ExecutionError
from .graph import PreparedGraph, PreparedNode
from .records import InferContext, KernelDef
from .registry import Registry

__all__ = ["FOLDED", "STEP", "DYNAMIC", "Resolution", "resolve", "make_context", "run_node_now",
           "FOLD_LIMIT"]

FOLDED, STEP, DYNAMIC = "folded", "step", "dynamic"
#: Largest number of elements a node's outputs may have to be folded into a plan.
FOLD_LIMIT = 1 << 16


@dataclass
class Resolution:
    shapes: list            # slot -> tuple of ints, or None (dynamic)
    dtypes: list            # slot -> np.dtype or None
    values: list            # slot -> host-known ndarray or None
    status: list            # node index -> FOLDED / STEP / DYNAMIC
    contexts: list          # node index -> InferContext (with output shapes) or None
    kernels: list           # node index -> KernelDef or None


def make_context(pn: PreparedNode, shapes, dtypes, values, runtime=None) -> InferContext:
    ins = pn.all_inputs
    return InferContext(pn.node, pn.opset,
                        [shapes[i] if i >= 0 else None for i in ins],
                        [dtypes[i] if i >= 0 else None for i in ins],
                        [values[i] if i >= 0 else None for i in ins],
                        runtime=runtime)


def _all_ints(shape) -> bool:
    return shape is not None and all(type(d) is int for d in shape)


def _infer(pn: PreparedNode, ctx: InferContext) -> None:
    op = pn.opdef
    n_out = len(pn.outputs)
    try:
        shapes = list(op.infer_shape(ctx))
        dtypes = list(op.infer_dtype(ctx))
    except DynashapeError:
        raise
    except Exception as exc:  # a bug or an unguarded rule in an op's inference
        ctx.fail(f"shape inference failed: {type(exc).__name__}: {exc}", kind="InferenceFailed")
    ctx.output_shapes = [tuple(s) if s is not None else None for s in shapes[:n_out]] + [None] * (n_out - len(shapes))
    ctx.output_dtypes = [np.dtype(d) if d is not None else None for d in dtypes[:n_out]] + [None] * (n_out - len(dtypes))


def kernel_for(registry: Registry, pn: PreparedNode, ctx: InferContext) -> KernelDef:
    dtype = next((d for d in ctx.input_dtypes if d is not None), None)
    first = ctx.input_dtypes[0] if ctx.input_dtypes else None
    return registry.resolve_kernel(pn.node.domain, pn.node.op_type, pn.opset,
                                   first if first is not None else dtype, pn.node.name)


def run_node_now(pn: PreparedNode, kernel: KernelDef, ctx: InferContext, arrays: Sequence) -> list:
    """Allocate outputs as inferred and run the kernel once (folding and dynamic steps)."""
    outs = [np.empty(s, dtype=d) if _all_ints(s) and d is not None else None
            for s, d in zip(ctx.output_shapes, ctx.output_dtypes)]
    prepared = kernel.prepare(ctx) if kernel.prepare is not None else ctx
    try:
        res = kernel.compute(list(arrays), outs, prepared)
    except DynashapeError:
        raise
    except Exception as exc:
        raise ExecutionError(f"{pn.node.op_type} node '{pn.node.name}' failed: {type(exc).__name__}: {exc}") from exc
    return list(res) if res is not None else outs


def _values_from_propagation(pn: PreparedNode, ctx: InferContext) -> Optional[list]:
    prop = pn.opdef.propagate_value
    if prop is None:
        return None
    vals = prop(ctx)
    if vals is None:
        return None
    out = []
    for v, d in zip(vals, ctx.output_dtypes):
        if v is None:
            return None
        v = np.asarray(v)
        if v.dtype == object:
            if not all(type(x) is int for x in v.reshape(-1).tolist()):
                return None
            v = v.astype(d if d is not None else np.int64)
        out.append(v)
    return out


def constant_state(pg: PreparedGraph) -> tuple[list, list, list]:
    """Per-slot shapes, dtypes and values with only the constants filled in."""
    n = len(pg.names)
    shapes: list = [None] * n
    dtypes: list = [None] * n
    values: list = [None] * n
    for s, arr in pg.constants.items():
        shapes[s], dtypes[s], values[s] = tuple(arr.shape), arr.dtype, arr
    return shapes, dtypes, values


def resolve(pg: PreparedGraph, registry: Registry, input_shapes: dict, input_dtypes: dict,
            input_values: dict, runtime=None) -> Resolution:
    """Concrete shapes, dtypes, host values and node statuses for one input signature.

    Raises:
        ShapeInferenceError: an op's rule is broken by these shapes (node named).
        UnsupportedOperatorError: no kernel fits a node's dtypes.
    """
    shapes, dtypes, values = constant_state(pg)
    for s in pg.input_slots:
        shapes[s] = input_shapes[s]
        dtypes[s] = input_dtypes[s]
        values[s] = input_values.get(s)
    status: list = []
    contexts: list = []
    kernels: list = []
    for pn in pg.nodes:
        ins = pn.all_inputs
        if any(i >= 0 and shapes[i] is None for i in ins):
            status.append(DYNAMIC)
            contexts.append(None)
            kernels.append(None)
            continue
        ctx = make_context(pn, shapes, dtypes, values, runtime)
        _infer(pn, ctx)
        kernel = kernel_for(registry, pn, ctx)
        planned = all(_all_ints(s) for s in ctx.output_shapes if s is not None) and not pn.opdef.data_dependent \
            and all(s is not None for o, s in zip(pn.outputs, ctx.output_shapes) if o >= 0)
        folded = _fold(pn, kernel, ctx, values, planned)
        if folded is None and not planned:
            status.append(DYNAMIC)
            contexts.append(None)
            kernels.append(kernel)
            continue
        for o, s, d in zip(pn.outputs, ctx.output_shapes, ctx.output_dtypes):
            if o >= 0:
                shapes[o], dtypes[o] = s, d
        if folded is not None:
            for o, v in zip(pn.outputs, folded):
                if o >= 0:
                    values[o] = v
                    shapes[o] = tuple(v.shape)
            status.append(FOLDED)
        else:
            status.append(STEP)
        contexts.append(ctx)
        kernels.append(kernel)
    return Resolution(shapes, dtypes, values, status, contexts, kernels)


def _known_values(pn: PreparedNode, values) -> bool:
    return all(i < 0 or values[i] is not None for i in pn.all_inputs)


def _fold(pn: PreparedNode, kernel: KernelDef, ctx: InferContext, values, planned: bool) -> Optional[list]:
    """Output values if they can be known on the host now, else None."""
    op = pn.opdef
    if not op.deterministic or _has_subgraph(pn):
        return None
    if planned and sum(int(np.prod(s)) for s in ctx.output_shapes if s is not None) > FOLD_LIMIT:
        return None
    if _known_values(pn, values):
        arrays = [values[i] if i >= 0 else None for i in pn.all_inputs]
        outs = run_node_now(pn, kernel, ctx, arrays)
        return [np.asarray(o) for o in outs]
    return _values_from_propagation(pn, ctx) if planned else None


def _has_subgraph(pn: PreparedNode) -> bool:
    return bool(pn.implicit) or any(hasattr(a, "nodes") for a in pn.node.attrs.values())




def fold_constants(pg: PreparedGraph, registry: Registry) -> int:
    """Evaluate, once, every deterministic node whose inputs are all constants (Constant
    nodes, weight transposes, shape arithmetic on initializers); their outputs become
    constants and the nodes leave the graph. Returns how many nodes were folded.

    A node that fails here is kept: the error then surfaces, with its node, at run time.
    """
    shapes, dtypes, values = constant_state(pg)
    kept = []
    for pn in pg.nodes:
        ins = pn.all_inputs
        if not pn.opdef.deterministic or _has_subgraph(pn) or any(i >= 0 and values[i] is None for i in ins):
            kept.append(pn)
            continue
        try:
            ctx = make_context(pn, shapes, dtypes, values)
            _infer(pn, ctx)
            kernel = kernel_for(registry, pn, ctx)
            outs = [np.asarray(o) for o in run_node_now(pn, kernel, ctx, [values[i] if i >= 0 else None for i in ins])]
        except DynashapeError:
            kept.append(pn)
            continue
        for o, v in zip(pn.outputs, outs):
            if o >= 0:
                values[o], shapes[o], dtypes[o] = v, tuple(v.shape), v.dtype
                pg.constants[o] = v
    folded = len(pg.nodes) - len(kept)
    pg.nodes = kept
    pg.producer = {o: i for i, pn in enumerate(kept) for o in pn.outputs if o >= 0}
    return folded
