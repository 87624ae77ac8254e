"""``InferenceSession``: import once, run again and again with changing shapes.

Each run binds the feeds' shapes (validated against the declared dims), looks the input
signature up in the plan cache, and on a miss resolves every shape (running the shape
subgraph on the host), plans memory and prepares every kernel. Then the kernels run
into the planned buffers. A run that raises leaves the session as it was.
"""
from __future__ import annotations

import os
import threading
import warnings
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from .errors import (DimParamMismatch, InputDtypeMismatch, InputFixedDimMismatch, InputNameError,
                     InputRankMismatch, InvalidFeedError)
from .executor import Arena, Plan, build_plan, execute
from .graph import PreparedGraph, prepare_graph
from .inference import fold_constants, resolve
from .model import FIXED, SYMBOLIC, Model, ValueInfo, load_model
from .registry import get_registry
from .symbolic_inference import SymbolicGraph, infer_symbolic

__all__ = ["InferenceSession", "NodeArg", "SessionStats"]

ALLOCATORS = ("pool", "naive")


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as ORT describes it: ``name``, ``shape`` (int / str / None per
    dim; None for the whole shape when the rank is unknown) and ``type`` (``"tensor(float)"``)."""

    name: str
    shape: Optional[list]
    type: str


@dataclass
class SessionStats:
    """Counters of one session: plan-cache hits and misses, milliseconds planning and executing."""

    runs: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    planning_ms: float = 0.0
    execution_ms: float = 0.0
    failed_runs: int = 0
    symbolic_plans: int = 0      # misses planned by evaluating the symbolic shapes
    resolved_plans: int = 0      # misses planned by per-node inference (data-dependent graphs)


def _node_arg(vi: ValueInfo) -> NodeArg:
    shape = None if vi.dims is None else [d.display for d in vi.dims]
    return NodeArg(vi.name, shape, vi.type)


class InferenceSession:
    """Run an ONNX model with changing input shapes (the ``onnxruntime.InferenceSession`` call shape).

    Args:
        model: a path, serialized bytes or an ``onnx.ModelProto``.
        allocator: ``"pool"`` (one arena, offsets planned per input signature, reused when
            the new shapes fit and grown when they don't) or ``"naive"`` (one buffer per tensor).
        plan_cache_size: how many input signatures keep their plan (LRU).
        validate_memory: check every pool plan for overlapping live tensors, and during
            runs poison freed arena blocks and check that every arena array a step reads
            or writes lies in its own live block (also ``DYNASHAPE_VALIDATE_MEMORY=1``;
            see docs/MEMORY.md). Raises ``MemoryPlanError``.

    Raises:
        ModelLoadError: the model cannot be read.
        UnsupportedOperatorError: an operator has no definition for the model's opset.
        ValueError: an unknown allocator.
    """

    def __init__(self, model: Any, *, allocator: str = "pool", plan_cache_size: int = 8,
                 validate_memory: Optional[bool] = None):
        if allocator not in ALLOCATORS:
            raise ValueError(f"allocator must be one of {ALLOCATORS}, got {allocator!r}")
        self.allocator = allocator
        self.use_symbolic_plans = True
        self.validate_memory = (os.environ.get("DYNASHAPE_VALIDATE_MEMORY", "") in ("1", "true")
                                if validate_memory is None else bool(validate_memory))
        self.model: Model = load_model(model)
        self.registry = get_registry()
        self.graph: PreparedGraph = prepare_graph(self.model, self.registry)
        self.folded_nodes = fold_constants(self.graph, self.registry)
        t0 = time.perf_counter()
        self.symbolic: SymbolicGraph = infer_symbolic(self.graph, self.registry)
        self.symbolic_inference_ms = (time.perf_counter() - t0) * 1e3
        self._inputs = self.model.graph.inputs
        self._outputs = self.model.graph.outputs
        self._plans: "OrderedDict[tuple, Plan]" = OrderedDict()
        self.plan_cache_size = max(1, int(plan_cache_size))
        self.arena = Arena()
        self.stats = SessionStats()
        self._lock = threading.Lock()
        self._input_index = {vi.name: i for i, vi in enumerate(self._inputs)}
        self._output_slot = {vi.name: self.graph.slot[vi.name] for vi in self._outputs}
        self._output_names = [vi.name for vi in self._outputs]
        self._input_slots = [(vi.name, self.graph.slot[vi.name]) for vi in self._inputs]
        self.shape_conflicts = self._declared_vs_inferred()

    # description ------------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return [_node_arg(v) for v in self._inputs]

    def get_outputs(self) -> list[NodeArg]:
        """Outputs with their inferred symbolic shapes (``["batch", "sequence*2"]``); the
        declared shape where inference found the output data-dependent."""
        out = []
        for v in self._outputs:
            slot = self.graph.slot[v.name]
            if self.symbolic.shapes[slot] is not None and not self.symbolic.is_data_dependent(slot):
                out.append(NodeArg(v.name, self.symbolic.display_shape(slot), v.type))
            else:
                out.append(_node_arg(v))
        return out

    def _declared_vs_inferred(self) -> list[str]:
        """Graph outputs whose declared fixed dims contradict inference (reported, not trusted)."""
        conflicts = []
        for v in self._outputs:
            inferred = self.symbolic.shapes[self.graph.slot[v.name]]
            if v.dims is None or inferred is None:
                continue
            if len(v.dims) != len(inferred):
                conflicts.append(f"output '{v.name}': declared rank {len(v.dims)}, inferred {len(inferred)}")
                continue
            for axis, (d, i) in enumerate(zip(v.dims, inferred)):
                if d.kind == FIXED and isinstance(i, int) and d.value != i:
                    conflicts.append(f"output '{v.name}', axis {axis}: declared {d.value}, inferred {i}")
        for c in conflicts:
            warnings.warn(f"dynashape: {c}; the inferred shape is used", RuntimeWarning, stacklevel=3)
        return conflicts

    @property
    def last_plan(self) -> Optional[Plan]:
        return next(reversed(self._plans.values()), None) if self._plans else None

    # running -----------------------------------------------------------------
    def run(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[np.ndarray]:
        """Run the model on ``input_feed`` and return the requested outputs (all when None).

        Raises:
            InputNameError: a required input is missing, or an unknown input/output name.
            InputDtypeMismatch / InputRankMismatch / InputFixedDimMismatch / DimParamMismatch:
                a feed does not fit the declared input.
            ShapeInferenceError: an operator's shape rule is broken for these shapes.
            ExecutionError: a kernel failed.
        """
        if output_names:
            names = list(output_names)
            for n in names:
                if n not in self._output_slot:
                    raise InputNameError(f"unknown output name '{n}'; the model's outputs are "
                                         f"{[o.name for o in self._outputs]}")
        else:
            names = self._output_names
        with self._lock:
            try:
                feeds, key = self._bind(input_feed)
                plan = self._plan(key, feeds)
                t0 = time.perf_counter()
                vals, fresh = execute(self.graph, plan, self.registry, feeds, runtime=self)
                self.stats.execution_ms += (time.perf_counter() - t0) * 1e3
                self.stats.runs += 1
            except Exception:
                self.stats.failed_runs += 1
                raise
        slots = self._output_slot
        return [v if id(v) in fresh else np.array(v, copy=True) for v in (vals[slots[n]] for n in names)]

    def _bind(self, input_feed: Mapping[str, Any]) -> tuple[dict, tuple]:
        """{slot: array} and the plan-cache key. Feeds are validated unless their signature
        (the key) already has a plan, which it only got after passing validation."""
        feeds: dict = {}
        key: list = []
        value_inputs = self.graph.value_inputs
        try:
            for name, slot in self._input_slots:
                arr = input_feed[name]
                if type(arr) is not np.ndarray:
                    arr = np.asarray(arr)
                feeds[slot] = arr
                key.append(arr.shape)
                key.append(arr.dtype)
                if slot in value_inputs:
                    key.append(arr.tobytes())
        except (KeyError, TypeError):
            self._validate(input_feed)
            raise
        key_t = tuple(key)
        if key_t not in self._plans or len(input_feed) != len(self._input_slots):
            self._validate(input_feed)
        return feeds, key_t

    def _validate(self, input_feed: Mapping[str, Any]) -> None:
        """Raise the first problem of the feeds: type, names, then each input's dtype and dims."""
        if not isinstance(input_feed, Mapping):
            raise InvalidFeedError(f"input_feed must be a dict of name -> array, got {type(input_feed).__name__}")
        unknown = [k for k in input_feed if k not in self._input_index]
        if unknown:
            raise InputNameError(f"unknown input name(s) {unknown}; the model's inputs are "
                                 f"{[v.name for v in self._inputs]}")
        bound: dict[str, tuple[int, str, int]] = {}
        for vi in self._inputs:
            if vi.name not in input_feed:
                raise InputNameError(f"missing input '{vi.name}' (expected {vi.type} with shape "
                                     f"{_node_arg(vi).shape})")
            arr = input_feed[vi.name]
            self._check_feed(vi, arr if isinstance(arr, np.ndarray) else np.asarray(arr), bound)

    @staticmethod
    def _check_feed(vi: ValueInfo, arr: np.ndarray, bound: dict) -> None:
        want = vi.dtype
        if want is not None and arr.dtype != want and not (want == object and arr.dtype.kind in "OUS"):
            raise InputDtypeMismatch(f"input '{vi.name}': expected {vi.type} (numpy {want}), got numpy {arr.dtype}")
        if vi.dims is None:
            return
        if arr.ndim != len(vi.dims):
            raise InputRankMismatch(f"input '{vi.name}': expected rank {len(vi.dims)} (shape "
                                    f"{_node_arg(vi).shape}), got rank {arr.ndim} with shape {list(arr.shape)}")
        for axis, (d, got) in enumerate(zip(vi.dims, arr.shape)):
            if d.kind == FIXED and got != d.value:
                raise InputFixedDimMismatch(f"input '{vi.name}', axis {axis}: expected {d.value} (fixed dim), "
                                            f"got {got} (shape {list(arr.shape)})")
            if d.kind == SYMBOLIC:
                prev = bound.get(d.value)
                if prev is not None and prev[0] != got:
                    raise DimParamMismatch(
                        f"dim_param '{d.value}' is bound to {prev[0]} by input '{prev[1]}' axis {prev[2]} "
                        f"and to {got} by input '{vi.name}' axis {axis}")
                bound[d.value] = (got, vi.name, axis)

    def _plan(self, key: tuple, feeds: dict) -> Plan:
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            self.stats.cache_hits += 1
        else:
            t0 = time.perf_counter()
            shapes = {s: tuple(a.shape) for s, a in feeds.items()}
            dtypes = {s: a.dtype for s, a in feeds.items()}
            values = {s: feeds[s] for s in self.graph.value_inputs if s in feeds}
            res = self.symbolic.instantiate(self.graph, shapes) if self.use_symbolic_plans else None
            if res is None:
                res = resolve(self.graph, self.registry, shapes, dtypes, values, runtime=self)
                self.stats.resolved_plans += 1
            else:
                self.stats.symbolic_plans += 1
            plan = build_plan(self.graph, res, self.allocator, validate=self.validate_memory)
            self.stats.planning_ms += (time.perf_counter() - t0) * 1e3
            self.stats.cache_misses += 1
            self._plans[key] = plan
            if len(self._plans) > self.plan_cache_size:
                self._plans.popitem(last=False)
        if self.allocator == "pool" and plan.memory is not None:
            self.arena.reserve(plan.memory.arena_bytes)
            plan.bind(self.arena)
        return plan

    def plan(self, input_feed: Mapping[str, Any]) -> Plan:
        """The plan of these feeds' signature (shapes, steps, memory), from the cache or made now,
        without running; the arena is reserved for it as a run would. ``plan(...).memory`` has
        ``arena_bytes``, ``lower_bound_bytes``, ``naive_bytes``, ``planning_ms`` and the blocks."""
        with self._lock:
            feeds, key = self._bind(input_feed)
            return self._plan(key, feeds)

    def trim(self) -> None:
        """Release the arena and every cached plan (memory comes back on the next run)."""
        with self._lock:
            self._plans.clear()
            self.arena.trim()

    @property
    def arena_bytes(self) -> int:
        """Current arena capacity in bytes (0 for the naive allocator)."""
        return self.arena.capacity


