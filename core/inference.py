"""Constant folding at session creation.

Every deterministic node whose inputs are all constants (Constant nodes, weight
transposes, shape arithmetic on initializers) runs once through the node contract
(:mod:`dynashape.node`); its outputs become constants and the node leaves the graph.
Per-signature shape resolution is the compiled program's (:mod:`dynashape.program`,
:mod:`dynashape.plan`).
"""
from __future__ import annotations

from typing import Collection, Optional

import numpy as np

from .errors import DynashapeError, ResourceLimitError
from .limits import check_tensor, is_resource_failure, resolve_memory_limit
from .graph import PreparedGraph
from .node import NodeServices, choose_kernel, has_subgraph, infer, make_context, run_once
from .registry import Registry

__all__ = ["fold_constants"]


def fold_constants(pg: PreparedGraph, registry: Registry, services: Optional[NodeServices] = None,
                   memory_limit: Optional[int] = None, exclude: Collection[int] = ()) -> int:
    """Fold every deterministic node whose inputs are all constants; returns how many.

    Constants whose slots are in ``exclude`` count as unknown here (overridable initializers:
    the nodes they reach stay). A node that fails here is kept: the error then surfaces, with
    its node, when it runs. So is one whose output would be over ``memory_limit`` bytes
    (default: the machine's memory, :mod:`dynashape.limits`): its plan then raises
    ResourceLimitError.
    """
    limit = memory_limit if memory_limit is not None else resolve_memory_limit(None)
    n = len(pg.names)
    shapes: list = [None] * n
    dtypes: list = [None] * n
    values: list = [None] * n
    for s, arr in pg.constants.items():
        if s not in exclude:
            shapes[s], dtypes[s], values[s] = tuple(arr.shape), arr.dtype, arr
    kept = []
    for pn in pg.nodes:
        ins = pn.all_inputs
        if not pn.opdef.deterministic or has_subgraph(pn) or any(i >= 0 and values[i] is None for i in ins):
            kept.append(pn)
            continue
        try:
            ctx = make_context(pn, shapes, dtypes, values, services)
            infer(pn, ctx)
            if not _fits(ctx, limit):
                kept.append(pn)
                continue
            kernel = choose_kernel(registry, pn, ctx)
            outs = [np.asarray(o) for o in run_once(pn, kernel, ctx, [values[i] if i >= 0 else None for i in ins])]
        except (DynashapeError, MemoryError):
            kept.append(pn)
            continue
        except ValueError as exc:   # numpy's "array is too big"
            if not is_resource_failure(exc):
                raise
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


def _fits(ctx, limit: int) -> bool:
    """Every inferred output shape is known to fit in ``limit`` bytes (unknown: assumed to)."""
    for shape, dtype in zip(ctx.output_shapes or (), ctx.output_dtypes or ()):
        if shape is None or not all(isinstance(d, (int, np.integer)) for d in shape):
            continue
        try:
            check_tensor(shape, np.dtype(dtype).itemsize if isinstance(dtype, np.dtype) else 1, limit, "output")
        except ResourceLimitError:
            return False
    return True
