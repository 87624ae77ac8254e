"""Constant folding at session creation.

Every deterministic node whose inputs are all constants (Constant nodes, weight
transposes, shape arithmetic on initializers) runs once through the node contract
(:mod:`dynashape.node`); its outputs become constants and the node leaves the graph.
Per-signature shape resolution is the compiled program's (:mod:`dynashape.program`,
:mod:`dynashape.plan`).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .errors import DynashapeError
from .graph import PreparedGraph
from .node import NodeServices, choose_kernel, has_subgraph, infer, make_context, run_once
from .registry import Registry

__all__ = ["fold_constants"]


def fold_constants(pg: PreparedGraph, registry: Registry, services: Optional[NodeServices] = None) -> int:
    """Fold every deterministic node whose inputs are all constants; returns how many.

    A node that fails here is kept: the error then surfaces, with its node, when it runs.
    """
    n = len(pg.names)
    shapes: list = [None] * n
    dtypes: list = [None] * n
    values: list = [None] * n
    for s, arr in pg.constants.items():
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
            kernel = choose_kernel(registry, pn, ctx)
            outs = [np.asarray(o) for o in run_once(pn, kernel, ctx, [values[i] if i >= 0 else None for i in ins])]
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
