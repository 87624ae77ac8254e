"""The engine of one (sub)graph: its compiled programs, the plan cache and the execution
contexts. :class:`~dynashape.session.InferenceSession` and the subgraph runners of
If/Loop/Scan both run through it.

Declared dim_params are hints, as in ONNX Runtime: when a signature binds one symbol to
different values on different axes (optimum declares a decoder's ``attention_mask`` as
``[batch_size, sequence_length]`` although it is past+new long), the conflicting axes get
symbols of their own and a program is compiled for that pattern (once; warned once per
symbol). ``strict_dim_params=True`` makes it a :class:`~dynashape.errors.DimParamMismatch`.
"""
from __future__ import annotations

import threading
import time
import warnings
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import numpy as np

from .dtypes import ValueType, merge_types, type_known, value_type_of
from .errors import DimParamMismatch
from .limits import allocation_error, is_resource_failure
from .executor import ExecutionContext, RunStats, check_plan_memory
from .fpstate import quiet_floating_point, quiet_off, quiet_on
from .graph import PreparedGraph
from .plan import Plan, build_plan
from .profiling import ACTIVE
from .program import Program, copy_value
from .registry import Registry
from .symbolic import free_symbols, sym

if TYPE_CHECKING:
    from .profiling import Profiler

__all__ = ["Engine", "LiveStats"]


class LiveStats:
    """The counters of an engine, summed over its execution contexts each time one is read
    (``runs``, ``cache_hits``, ``cache_misses``, ``planning_ms``, ``execution_ms``,
    ``failed_runs``, ``symbolic_plans``, ``resolved_plans``, ``continuation_plans``)."""

    __slots__ = ("_engine",)

    def __init__(self, engine: "Engine"):
        self._engine = engine

    def snapshot(self) -> RunStats:
        total = RunStats()
        for stats in list(self._engine._all_stats):
            total.add(stats)
        return total

    def __getattr__(self, name: str):
        return getattr(self.snapshot(), name)

    def __repr__(self) -> str:
        return repr(self.snapshot()).replace("RunStats", "SessionStats", 1)


class Engine:
    """Runs one prepared graph for any signature.

    Args:
        pg: the prepared graph, constants folded.
        registry: the session's registry.
        input_dims: input slot -> declared dims (ints and plain symbols) or None.
        input_dtypes: input slot -> numpy dtype or None.
        input_names: the inputs' names, for messages.
        allocator: ``"pool"`` or ``"naive"``.
        validate: validation mode (plans checked against per-node inference, memory checks).
        strict_dim_params: a symbol bound to two values is an error instead of a hint.
        optimize / fold: the subgraphs' bodies run the graph rewrites / fold their constants
            (:func:`dynashape.compilation.compile_graph`), as the session's graph does.
        plan_cache_size: signatures whose plans are kept (LRU).
        body_runner: makes the runner of a subgraph (an If/Loop/Scan body) with the program's
            settings: :class:`dynashape.subgraph.SubgraphRunner` (given by the session, the
            layer above, so that the engine imports nothing of it).
        eager_bodies: the bodies of the program made now, for the declared inputs, compile
            with it (the session's default); programs made later, during runs (an input's
            filled rank, split dim_params), run the runners made before where their outer
            values are alike (:meth:`Program._compile_body`), else compile a body when it
            first runs.
    """

    def __init__(self, pg: PreparedGraph, registry: Registry, input_dims: dict, input_dtypes: dict,
                 input_names: Sequence[str], allocator: str = "pool", *, validate: bool = False,
                 strict_dim_params: bool = False, plan_cache_size: int = 8, name: str = "model",
                 input_values: Optional[dict] = None, optimize: bool = False, fold: bool = True,
                 memory_limit: Optional[int] = None, shared: Optional[Any] = None,
                 body_runner: Optional[Callable] = None, eager_bodies: bool = False):
        self.pg = pg
        self.body_runner = body_runner
        self.memory_limit = memory_limit
        self.optimize = optimize   # subgraphs (If/Loop/Scan bodies) run the graph rewrites too
        self.fold = fold           # and fold their constants as the session's graph does
        self.registry = registry
        self.input_dims = input_dims
        self.input_dtypes = input_dtypes
        self.input_names = list(input_names)
        self.allocator = allocator
        self.validate = validate
        self.strict_dim_params = strict_dim_params
        self.plan_cache_size = max(1, int(plan_cache_size))
        self.name = name
        self.input_values = input_values
        #: a :class:`~dynashape.profiling.Profiler` while the session profiles
        self.profiler: Optional[Profiler] = None
        #: no dim_param warnings (``log_severity_level`` >= 3)
        self.quiet = False
        self._lock = threading.Lock() if shared is None else shared.lock
        self._plans: OrderedDict = OrderedDict() if shared is None else shared.plans
        self._recent_key = None
        # execution contexts (arenas, bound buffers) are shared with the sessions of the same
        # compiled model; the counters are this engine's own, one set per run in flight
        self._idle: list[ExecutionContext] = [] if shared is None else shared.idle_contexts
        self._contexts: list[ExecutionContext] = [] if shared is None else shared.contexts
        self._idle_stats: list[RunStats] = []
        self._all_stats: list[RunStats] = []
        self._warned: set = set()
        self._recent_splits: list = []
        self._open = [pos for pos, slot in enumerate(pg.input_slots) if _open_input(input_dims.get(slot),
                                                                                    input_dtypes.get(slot))]
        self.programs: dict = {} if shared is None else shared.programs
        #: the subgraph runners its programs share (a split program runs the bodies the
        #: session compiled: Program._compile_body)
        self.bodies: dict = {} if shared is None else shared.bodies
        self.program = self._base_program((), eager_bodies)

    def _base_program(self, fill: tuple, eager_bodies: bool = False) -> Program:
        """The program for the declared inputs. Inputs declared without a shape or an element
        type get the rank (one symbol per axis) and dtype they have: ``fill`` holds them,
        (rank or None, dtype or None) per such input; a program per pattern. A sequence or
        optional input has no rank; its unknown element types come from its value."""
        program = self.programs.get(("fill", fill))
        if program is None:
            dims, dtypes = dict(self.input_dims), dict(self.input_dtypes)
            for pos, (rank, dtype) in zip(self._open, fill):
                slot = self.pg.input_slots[pos]
                if rank is not None:
                    dims[slot] = tuple(sym(f"unk__{self.input_names[pos]}_{axis}") for axis in range(rank))
                if dtype is not None:
                    dtypes[slot] = dtype
            program = self._compile(dims, dtypes, eager_bodies)
            with self._lock:
                program = self.programs.setdefault(("fill", fill), program)
        return program

    # --- contexts --------------------------------------------------------------------
    def take_context(self) -> ExecutionContext:
        """An idle execution context (or a new one), counting into this engine's stats while
        the caller holds it; :meth:`give_context` hands both back."""
        try:
            ctx = self._idle.pop()
        except IndexError:
            ctx = ExecutionContext(self.validate, max_bindings=self.plan_cache_size)
            with self._lock:
                self._contexts.append(ctx)
        try:
            ctx.stats = self._idle_stats.pop()
        except IndexError:
            ctx.stats = RunStats()
            with self._lock:
                self._all_stats.append(ctx.stats)
        return ctx

    def give_context(self, ctx: ExecutionContext) -> None:
        self._idle_stats.append(ctx.stats)
        self._idle.append(ctx)

    @property
    def stats(self) -> "LiveStats":
        return LiveStats(self)

    @property
    def last_context(self) -> Optional[ExecutionContext]:
        return self._idle[-1] if self._idle else (self._contexts[-1] if self._contexts else None)

    # --- plans -------------------------------------------------------------------------
    def cached_plan(self, key) -> Optional[Plan]:
        plan = self._plans.get(key)
        if plan is not None and key != self._recent_key:
            try:     # one C call, atomic under the GIL; the key may have been evicted since
                self._plans.move_to_end(key)   # least recently used goes first
            except KeyError:
                pass
            self._recent_key = key
        return plan

    def make_plan(self, key, feeds: Sequence, ctx: ExecutionContext) -> Plan:
        """Plan a signature (of the feeds, in input order) and cache it under ``key``."""
        t0 = time.perf_counter()
        plan = self._build_plan(feeds, self.validate)
        if self.validate:
            check_plan_memory(plan)
        with self._lock:
            self._plans[key] = plan
            while len(self._plans) > self.plan_cache_size:
                self._plans.popitem(last=False)
        st = ctx.stats
        st.cache_misses += 1
        t1 = time.perf_counter()
        st.planning_ms += (t1 - t0) * 1e3
        if self.profiler is not None:
            self.profiler.session_event("plan", t0, t1, symbolic=plan.symbolic)
        if plan.symbolic:
            st.symbolic_plans += 1
        else:
            st.resolved_plans += 1
        return plan

    def run(self, key, feeds: Sequence, wanted: Sequence[int], plan: Optional[Plan] = None) -> list:
        """Execute on ``feeds`` (arrays in input order) and return the graph outputs at
        positions ``wanted``, detached: arrays this run made are handed out, anything else
        (feeds, constants, plan values, a second reference to one array) is copied.
        ``plan`` is the cached plan of ``key`` when the caller looked it up already."""
        ctx = self.take_context()
        stats = ctx.stats
        token = quiet_on()
        try:
            if plan is None:
                plan = self.cached_plan(key)
            if plan is None:
                plan = self.make_plan(key, feeds, ctx)
            else:
                stats.cache_hits += 1
            profiler = self.profiler if self.profiler is not None else ACTIVE.get()
            if profiler is None:
                values = ctx.execute(plan, feeds)
            else:      # (the nodes of subgraphs this run runs record into the same profiler)
                active = ACTIVE.set(profiler)
                try:
                    values = ctx.execute(plan, feeds, profiler)
                finally:
                    ACTIVE.reset(active)
            program = plan.program
            slots = program.pg.output_slots
            if program.copies_outputs:
                copy = program.output_copy
                out = [values[slots[i]] if not copy[i] or values[slots[i]] is None
                       else np.array(values[slots[i]], copy=True) if copy[i] is True
                       else copy_value(values[slots[i]]) for i in wanted]
            else:
                out = [values[slots[i]] for i in wanted]
            stats.runs += 1
            return out
        except Exception as exc:
            stats.failed_runs += 1
            if is_resource_failure(exc):
                raise allocation_error(exc, f"running graph '{self.name}'", limit=self.memory_limit) from exc
            raise
        finally:
            quiet_off(token)
            self.give_context(ctx)

    def plan(self, key, feeds: Sequence) -> Plan:
        """The plan of a signature (cached or made now), its buffers bound in a context as a
        run would, without running."""
        ctx = self.take_context()
        try:
            with quiet_floating_point():
                plan = self.cached_plan(key) or self.make_plan(key, feeds, ctx)
            if plan.segment.steps:
                ctx.buffers(plan)
            return plan
        finally:
            self.give_context(ctx)

    def check_plan(self, feeds: Sequence) -> None:
        """Plan the signature of ``feeds`` as a run would, to see that it fits (every tensor and
        the arena against ``memory_limit``), without caching or counting the plan or binding
        its buffers: the next run plans it as a first run does.

        Raises:
            ResourceLimitError: a tensor or the arena is over the limit (named).
            ShapeInferenceError: an op's rule is broken by these shapes.
        """
        with quiet_floating_point():
            self._build_plan(feeds)

    def _build_plan(self, feeds: Sequence, validate: bool = False) -> Plan:
        program, env = self._bind(feeds)
        return build_plan(program, program.segments[0], dict(zip(program.segments[0].symbols, env)),
                          validate=validate)

    def stats_failed(self) -> None:
        """Count a run that failed before it reached a context (invalid feeds)."""
        ctx = self.take_context()
        ctx.stats.failed_runs += 1
        self.give_context(ctx)

    def clear(self) -> None:
        """Drop every cached plan and the contexts' arenas (memory comes back on the next run)."""
        with self._lock:
            self._plans.clear()
            for ctx in self._contexts:
                ctx.trim()

    @property
    def last_plan(self) -> Optional[Plan]:
        with self._lock:
            return next(reversed(self._plans.values()), None) if self._plans else None

    def _compile(self, input_dims: dict, input_dtypes: Optional[dict] = None, eager_bodies: bool = False,
                 like: Optional[Program] = None) -> Program:
        """A program for these input dims; ``like``: a program of other dims whose nodes with the
        same inputs are not inferred again (:meth:`Program.prior_walk`)."""
        return Program(self.pg, self.registry, input_dims, input_dtypes or self.input_dtypes, self.allocator,
                       self.input_values, self.name, validate=self.validate, optimize=self.optimize,
                       fold=self.fold, memory_limit=self.memory_limit, body_runner=self.body_runner,
                       eager_bodies=eager_bodies, bodies=self.bodies,
                       prior=None if like is None else like.prior_walk())

    # --- dim_params as hints -------------------------------------------------------------
    def _bind(self, feeds: Sequence) -> tuple[Program, tuple]:
        shapes = [a.shape if type(a) is np.ndarray else np.shape(a) if a is not None and type(a) is not list
                  else None for a in feeds]
        fill = tuple(self._fill(pos, feeds[pos], shapes[pos]) for pos in self._open)
        base = self._base_program(fill) if fill else self.program
        env = base.binder(shapes)
        if env is not None:
            return base, env
        for filled, program in self._recent_splits:  # a split program fits any signature its binder takes
            if filled == fill:
                env = program.binder(shapes)
                if env is not None:
                    return program, env
        groups = self._conflicts(base, shapes)
        if self.strict_dim_params:
            raise self._mismatch(base, shapes, next(iter(groups)))
        key = ("split", fill, tuple(sorted(groups.items())))
        program = self.programs.get(key)
        if program is None:
            for name in groups:
                if name not in self._warned and not self.quiet:
                    self._warned.add(name)
                    warnings.warn(f"dynashape: {self._mismatch(base, shapes, name)}; declared dim_params are hints, so "
                                  "these axes get symbols of their own (strict_dim_params=True makes this an error)",
                                  RuntimeWarning, stacklevel=5)
            program = self._compile(self._split_dims(base, groups), base.input_dtypes, like=base)
            with self._lock:
                program = self.programs.setdefault(key, program)
        with self._lock:
            self._recent_splits = [(fill, program)] + [x for x in self._recent_splits if x[1] is not program][:3]
        return program, program.binder(shapes)

    def _fill(self, pos: int, value, shape) -> tuple:
        """(rank or None, type or None) an open input takes from its value."""
        slot = self.pg.input_slots[pos]
        declared = self.input_dtypes.get(slot)
        if isinstance(declared, ValueType) or type(value) in (list, dict) or (value is None and shape is None):
            return None, merge_types(declared, value_type_of(value))
        rank = len(shape) if self.input_dims.get(slot) is None and shape is not None else None
        return rank, (value_type_of(value) if declared is None else None)

    def _occurrences(self, program: Program) -> dict:
        out: dict = {}
        for pos, slot in enumerate(self.pg.input_slots):
            for axis, d in enumerate(program.input_dims.get(slot) or ()):
                if not isinstance(d, int):
                    out.setdefault(next(iter(free_symbols(d))), []).append((pos, axis))
        return out

    def _conflicts(self, program: Program, shapes: Sequence[tuple]) -> dict:
        """symbol -> group label per occurrence (labels by first appearance of each value)."""
        groups = {}
        for name, places in self._occurrences(program).items():
            values = [shapes[pos][axis] for pos, axis in places]
            if len(set(values)) > 1:
                first: dict = {}
                groups[name] = tuple(first.setdefault(v, len(first)) for v in values)
        return groups

    def _split_dims(self, program: Program, groups: dict) -> dict:
        dims = {slot: (list(d) if d is not None else None) for slot, d in program.input_dims.items()}
        occurrences = self._occurrences(program)
        for name, labels in groups.items():
            for (pos, axis), label in zip(occurrences[name], labels):
                if label:
                    dims[self.pg.input_slots[pos]][axis] = sym(f"{name}~{label}")
        return {slot: (tuple(d) if d is not None else None) for slot, d in dims.items()}

    def _mismatch(self, program: Program, shapes: Sequence[tuple], name: str) -> DimParamMismatch:
        places = self._occurrences(program)[name]
        (p0, a0) = places[0]
        for pos, axis in places[1:]:
            if shapes[pos][axis] != shapes[p0][a0]:
                return DimParamMismatch(
                    f"dim_param '{name}' is bound to {shapes[p0][a0]} by input '{self.input_names[p0]}' axis {a0} "
                    f"and to {shapes[pos][axis]} by input '{self.input_names[pos]}' axis {axis}")
        return DimParamMismatch(f"dim_param '{name}' is bound to two values")


def _open_input(dims, dtype) -> bool:
    """An input whose rank or element type comes from the value it is given: a tensor
    declared without a shape or an element type, a container whose element type is not
    known all the way down."""
    if isinstance(dtype, ValueType):
        return not type_known(dtype)
    return dims is None or dtype is None
