"""Compiling a graph for its engine: the one path from a model's main graph, or from the body
of an If, Loop or Scan, to the prepared graph an :class:`~dynashape.engine.Engine` runs.

:func:`compile_graph` prepares the graph (schemas, slots, order), folds its constant-only
nodes, runs the registry's rewrites (which infer the graph's symbolic shapes once, kept for
the first program) and gives every input its symbolic dims by the final slots. A session
and a subgraph runner call it with their own inputs and the same limits; each then makes
its Engine, which compiles the program per dim pattern.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Mapping, Optional, Sequence

import numpy as np

from .graph import PreparedGraph, as_graph, input_dims, prepare_graph, release_unread_constants
from .inference import fold_constants
from .model import Graph, ValueInfo
from .optimize import optimize_graph
from .registry import Registry
from .rewrite import RewriteReport

__all__ = ["CompiledGraph", "compile_graph"]


@dataclass(eq=False)
class CompiledGraph:
    """A graph ready for its engine.

    ``dims`` / ``dtypes``: the symbolic dims (None: rank unknown) and dtypes of its input
    slots, the declared inputs and the outer-scope values it reads. ``override_base``: the
    graph as it was before anything an overridable initializer reaches was folded (None when
    no initializer is overridable)."""

    graph: PreparedGraph
    rewrites: RewriteReport
    folded_nodes: int
    override_base: Optional[Graph]
    dims: dict
    dtypes: dict


def compile_graph(source: Any, registry: Registry, inputs: Sequence[ValueInfo], *,
                  opsets: Optional[Mapping[str, int]] = None, outer: Sequence[str] = (),
                  outer_constants: Optional[Mapping[str, np.ndarray]] = None,
                  outer_types: Optional[Mapping[str, tuple]] = None, fold: bool = True, optimize: bool = True,
                  memory_limit: Optional[int] = None, overridable: Collection[str] = (),
                  release_unread: bool = False) -> CompiledGraph:
    """Prepare, fold and rewrite ``source`` (a :class:`Model`, or a body's :class:`Graph` with
    the model's ``opsets``).

    Args:
        inputs: the graph's declared inputs (their dims give the inputs' symbolic dims).
        outer / outer_constants / outer_types: a body's outer-scope names, those that are
            constants of the enclosing graph (folded here as the body's own), and
            ``{name: (dims, dtype)}`` of the others (inputs of the body).
        fold: fold constant-only nodes (off at ``ORT_DISABLE_ALL``); ``optimize``: run the
            registry's rewrites; both with ``memory_limit`` (no folded output over it).
        overridable: initializers a feed may override: the nodes they reach are folded only
            after ``override_base`` is taken, and their values are kept.
        release_unread: drop the constants no node reads any more (a main graph: the body of a
            subgraph shares its outer constants with the enclosing graph).

    Raises:
        UnsupportedOperatorError, InvalidAttributeError, UndefinedValueError: from preparing.
        ValueError: a rewrite built a replacement that does not produce its root's outputs.
    """
    constants = None if outer_constants is None else dict(outer_constants)
    pg = prepare_graph(source, registry, None if opsets is None else dict(opsets), outer=tuple(outer),
                       outer_constants=constants)

    found_opsets = dict(pg.opsets)

    def reprepare(graph: Graph) -> PreparedGraph:     # (the rewritten graph, at the opsets found above)
        return prepare_graph(graph, registry, dict(found_opsets), outer=tuple(outer), outer_constants=constants)

    folded = 0
    override_base: Optional[Graph] = None
    if overridable:
        if fold:
            folded = fold_constants(pg, registry, memory_limit=memory_limit,
                                    exclude={pg.slot[n] for n in overridable if n in pg.slot})
        override_base = as_graph(pg, keep=overridable)
    if fold:
        folded += fold_constants(pg, registry, memory_limit=memory_limit)
    dims, dtypes = _input_types(pg, inputs, outer_types or {})
    rewrites = RewriteReport.unchanged(len(pg.nodes))
    if optimize:
        before = pg
        pg, rewrites = optimize_graph(before, registry, dims, dtypes, reprepare=reprepare, fold=fold,
                                      memory_limit=memory_limit)
        if pg is not before:
            by_name = {before.names[s]: s for s in dims}
            dims = {pg.slot[n]: dims[s] for n, s in by_name.items()}
            dtypes = {pg.slot[n]: dtypes[by_name[n]] for n in by_name}
    if release_unread:
        release_unread_constants(pg, keep=overridable)
    return CompiledGraph(pg, rewrites, folded, override_base, dims, dtypes)


def _input_types(pg: PreparedGraph, inputs: Sequence[ValueInfo], outer_types: Mapping[str, tuple]) -> tuple:
    dims, dtypes = input_dims(pg, inputs)
    for name, (d, dtype) in outer_types.items():
        slot = pg.slot.get(name)
        if slot is not None:
            dims[slot], dtypes[slot] = d, dtype
    return dims, dtypes
