"""The session's graph optimisation pass: the registered rewrites over a prepared graph.

Runs after constant folding and before the program is compiled: the graph's symbolic
shapes and dtypes are inferred once (for the rewrites' predicates), every rewrite of the
registry runs in its order (:func:`dynashape.rewrite.apply_rewrites`), and when any fired
the graph is prepared again (slots, schemas, order) and folded again (a rewrite may leave
constant-only nodes, such as a Conv whose folded BatchNormalization made new weights).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from .graph import PreparedGraph, prepare_graph
from .inference import fold_constants
from .model import Graph
from .registry import Registry
from .rewrite import GraphPass, RewriteReport, apply_rewrites
from .symbolic_inference import PriorInference, infer_symbolic

__all__ = ["optimize_graph"]


def optimize_graph(pg: PreparedGraph, registry: Registry, dims: Mapping[int, Any], dtypes: Mapping[int, Any],
                   reprepare: Optional[Callable[[Graph], PreparedGraph]] = None, fold: bool = True,
                   memory_limit: Optional[int] = None) -> tuple[PreparedGraph, RewriteReport]:
    """``pg`` with the registry's rewrites applied (``pg`` itself when none fired).

    Args:
        dims, dtypes: symbolic dims (None: rank unknown) and dtypes of ``pg``'s input slots.
        reprepare: how the rewritten :class:`Graph` becomes a prepared graph again (a
            subgraph passes its outer names); default ``prepare_graph(graph, registry, opsets)``.
        fold, memory_limit: fold the constant-only nodes the rewrites leave, none whose output
            is over ``memory_limit`` bytes (the session's: as the fold before the rewrites).

    Raises:
        ValueError: a rewrite built a replacement that does not produce its root's outputs.
        UnsupportedOperatorError: a replacement uses an op nobody registered.
    """
    rewrites = registry.rewrites()
    report = RewriteReport.unchanged(len(pg.nodes))
    roots = {root for rw in rewrites for root in _roots(rw)}
    if not rewrites or not any((pn.node.domain, pn.node.op_type) in roots for pn in pg.nodes):
        return pg, report
    sg: Optional[Any] = None

    def shape_info(name: str) -> tuple:
        nonlocal sg
        slot = pg.slot.get(name)
        if slot is None:
            return None, None
        if sg is None:
            sg = infer_symbolic(pg, registry, dict(dims), dict(dtypes))
        shape = None if sg.is_data_dependent(slot) else sg.shapes[slot]
        return shape, sg.dtypes[slot]

    constants = {pg.names[s]: v for s, v in pg.constants.items()}
    nodes, constants, report = apply_rewrites(pg.graph, [pn.node for pn in pg.nodes], constants, rewrites,
                                              shape_info, pg.opsets)
    prior = None if sg is None else PriorInference(pg, sg, registry, dict(dims), dict(dtypes))
    sg = None
    if not report.fired:
        pg.prior = prior
        return pg, report
    g = pg.graph
    rewritten = Graph(g.name, nodes, g.inputs, g.outputs, constants, g.value_info, g.overridable, origin=g)
    new_pg = reprepare(rewritten) if reprepare is not None else prepare_graph(rewritten, registry, pg.opsets)
    if fold:
        fold_constants(new_pg, registry, memory_limit=memory_limit)
    new_pg.prior = prior
    report.nodes_after = len(new_pg.nodes)
    return new_pg, report


def _roots(rw: Any) -> tuple:
    """(domain, op_type) of the nodes a rewrite starts from (a graph pass's ``roots``)."""
    if isinstance(rw, GraphPass):
        return rw.roots
    return ((rw.pattern.domain, rw.pattern.op_type),)
