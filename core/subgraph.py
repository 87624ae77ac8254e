"""Subgraphs (the branches of If, the bodies of Loop and Scan) as programs of their own.

A :class:`SubgraphRunner` is made once per subgraph by the enclosing program (through
``ctx.services.subgraph(graph)``, when the node's kernel is prepared), with the session's
registry. It compiles its body when the enclosing program asks (a session's program does, once
its steps are made, as onnxruntime initialises every subgraph at session creation; the body's
own bodies then compile with it), else when the body first runs (``InferenceSession(...,
lazy_subgraphs=True)``, and programs made during runs), so that an If's branch that is never
taken costs nothing. The enclosing graph's
constants become the subgraph's constants (so weights fold there too), its other outer
values become inputs with the dims they have outside. Plans are cached per signature and
runs take execution contexts from the runner's own pool, as the session's do.
"""
from __future__ import annotations

import threading
from typing import Mapping, Optional, Sequence

import numpy as np

from .dtypes import type_key
from . import gcpause
from .compilation import compile_graph
from .engine import Engine
from .model import Graph
from .registry import Registry
from .rewrite import RewriteReport

__all__ = ["SubgraphRunner"]

_MISSING = object()


class SubgraphRunner:
    """Runs one subgraph: ``run_list(formal_inputs, outer_values_by_name)`` -> its outputs,
    arrays the caller owns.

    Args:
        graph: the subgraph (a ``Graph`` attribute of an If/Loop/Scan node).
        opsets: the model's opset imports.
        registry: the session's registry.
        allocator: ``"pool"`` or ``"naive"`` (the session's).
        outer_dims / outer_dtypes: dims and dtypes of the outer values it reads.
        outer_constants: outer values that are constants of the enclosing graph.
        optimize / fold: run the registry's graph rewrites / fold constant-only nodes of the
            body (the session's settings).
        eager_bodies: the bodies inside this one compile with it (see :meth:`compile`).
    """

    opaque_to_tracing = True

    def __init__(self, graph: Graph, opsets: Mapping[str, int], registry: Registry, allocator: str = "pool",
                 outer_dims: Optional[dict] = None, outer_dtypes: Optional[dict] = None,
                 outer_constants: Optional[dict] = None, validate: bool = False, plan_cache_size: int = 16,
                 optimize: bool = False, memory_limit: Optional[int] = None, fold: bool = True,
                 eager_bodies: bool = False):
        self.graph = graph
        self.registry = registry
        self.outer = tuple(sorted(graph.outer_names()))
        self._constants = {k: v for k, v in (outer_constants or {}).items() if k in self.outer}
        self.formal_names = [vi.name for vi in graph.inputs]
        self.outer_inputs = [n for n in self.outer if n not in self._constants]
        self.input_names = self.formal_names + self.outer_inputs
        self.output_names = [v.name for v in graph.outputs]
        self._all_outputs = list(range(len(graph.outputs)))
        self._settings = (dict(opsets), allocator, outer_dims or {}, outer_dtypes or {}, validate, plan_cache_size,
                          optimize, fold, memory_limit, eager_bodies)
        self._engine: Optional[Engine] = None
        self._prepared = self._rewrites = None     # (set with the engine by _compile)
        self._lock = threading.Lock()
        #: what the op running this body derived from it, by the op's key (a Scan's
        #: vectorized body and its runner): made once per body, whichever plan asks
        self.derived: dict = {}

    # the body is compiled when the enclosing program asks or when it first runs ---------------
    @property
    def engine(self) -> Engine:
        engine = self._engine
        return engine if engine is not None else self.compile()

    @property
    def prepared(self):
        """The body's prepared graph (after the rewrites)."""
        if self._engine is None:
            self.compile()
        return self._prepared

    @property
    def rewrites(self) -> RewriteReport:
        if self._engine is None:
            self.compile()
        return self._rewrites

    @gcpause.paused     # (the body's compile, as a session's: gcpause.py)
    def compile(self) -> Engine:
        """Compile the body (once; later calls return the same engine).

        Raises:
            DynashapeError: the body cannot be compiled (an op nobody registered, ...).
        """
        with self._lock:
            if self._engine is None:
                self._engine = self._compile_engine()
            return self._engine

    def _compile_engine(self) -> Engine:
        (opsets, allocator, outer_dims, outer_dtypes, validate, plan_cache_size, optimize, fold, memory_limit,
         eager_bodies) = self._settings
        outer_types = {name: (outer_dims.get(name), outer_dtypes.get(name)) for name in self.outer_inputs}
        c = compile_graph(self.graph, self.registry, self.graph.inputs, opsets=opsets, outer=self.outer,
                          outer_constants=self._constants, outer_types=outer_types, fold=fold,
                          optimize=optimize, memory_limit=memory_limit)
        self._prepared, self._rewrites = c.graph, c.rewrites
        engine = Engine(c.graph, self.registry, c.dims, c.dtypes, self.input_names, allocator,
                        validate=validate, plan_cache_size=plan_cache_size,
                        name=f"body-{self.graph.name or 'subgraph'}", optimize=optimize, fold=fold,
                        memory_limit=memory_limit, body_runner=SubgraphRunner, eager_bodies=eager_bodies)
        # (its inputs' symbols are hints too, split quietly where one takes two values: the
        # enclosing program's symbols, which the session warns of where they are dim_params)
        engine.quiet = True
        return engine

    @property
    def program(self):
        return self.engine.program

    def _arrays(self, feeds: Mapping[str, np.ndarray]) -> tuple[list, tuple]:
        """The inputs in order and the signature key: shape and dtype of each array; a
        sequence (list), a map (dict) or an empty optional (None) keys by its type (it has no
        shape)."""
        arrays, key = [], []
        for name in self.input_names:
            a = feeds.get(name, _MISSING)
            if type(a) is not np.ndarray:
                if a is _MISSING:
                    raise KeyError(f"subgraph '{self.graph.name}' needs '{name}'")
                if a is None or type(a) is list or type(a) is dict:
                    arrays.append(a)
                    key.append(None)
                    key.append(type_key(a))
                    continue
                a = np.asarray(a)
            arrays.append(a)
            key.append(a.shape)
            key.append(a.dtype)
        return arrays, tuple(key)

    def _feeds(self, inputs: Sequence[np.ndarray], outer: Mapping[str, np.ndarray]) -> dict:
        feeds = dict(zip(self.formal_names, inputs))
        for name in self.outer_inputs:
            feeds[name] = outer[name]
        return feeds

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs of the subgraph, in its output order, as arrays the caller owns."""
        arrays, key = self._arrays(feeds)
        return self.engine.run(key, arrays, self._all_outputs)

    def run_list(self, inputs: Sequence[np.ndarray], outer: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Formal inputs positionally, outer-scope values by name."""
        return self.run(self._feeds(inputs, outer))

    def arena_bytes(self, inputs: Sequence[np.ndarray], outer: Mapping[str, np.ndarray]) -> int:
        """Bytes of the intermediate tensors a run on these inputs takes (its plan's arena;
        the plan is made now if new, and cached for the run), without allocating them."""
        arrays, key = self._arrays(self._feeds(inputs, outer))
        engine = self.engine
        plan = engine.cached_plan(key)
        if plan is None:
            ctx = engine.take_context()
            try:
                plan = engine.make_plan(key, arrays, ctx)
            finally:
                engine.give_context(ctx)
        return int(plan.arena_bytes)

    def infer_outputs(self, inputs: Sequence[np.ndarray], outer: Mapping[str, np.ndarray]) -> list:
        """(shape, dtype) of each output for these inputs without running (a shape is None
        where it depends on data), for loops that run the body zero times."""
        arrays, key = self._arrays(self._feeds(inputs, outer))
        try:
            plan = self.engine.plan(key, arrays)
        except Exception:  # noqa: BLE001 - a body that cannot be planned for these shapes
            return [(None, None)] * len(self.output_names)
        program = plan.program
        return [(plan.shape_of(s), program.sg.dtypes[s]) for s in program.pg.output_slots]
