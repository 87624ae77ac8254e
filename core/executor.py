"""A Plan (everything that depends only on the input signature) and its execution.

Planning: lifetimes of the tensors the steps produce, aliases (views share their
source's block), offsets in one arena (``pool``) or one buffer per tensor (``naive``),
and each step's kernel with its prepared arguments. Execution: kernels write into the
planned buffers; graph outputs are fresh arrays of each run (never arena views).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from .errors import DynashapeError, ExecutionError, MemoryPlanError
from .graph import PreparedGraph
from .inference import DYNAMIC, FOLDED, STEP, Resolution, kernel_for, run_node_now, _infer
from .planner import (VIEW, MemoryPlan, StepSpec, check_no_overlap, lifetimes, lower_bound, naive_bytes,
                      plan_offsets)
from .records import InferContext
from .registry import Registry

__all__ = ["Plan", "Arena", "build_plan", "execute"]


class Arena:
    """One 64-byte aligned byte buffer that grows when a plan needs more and is kept otherwise."""

    def __init__(self) -> None:
        self.buffer = np.empty(0, dtype=np.uint8)
        self.generation = 0
        self.grow_count = 0

    @property
    def capacity(self) -> int:
        return int(self.buffer.nbytes)

    def reserve(self, nbytes: int) -> None:
        if nbytes > self.capacity:
            raw = np.empty(nbytes + 64, dtype=np.uint8)
            shift = (-raw.ctypes.data) % 64
            self.buffer = raw[shift:shift + nbytes]
            self.generation += 1
            self.grow_count += 1

    def trim(self) -> None:
        self.buffer = np.empty(0, dtype=np.uint8)
        self.generation += 1

    def view(self, offset: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return self.buffer[offset:offset + nbytes].view(dtype).reshape(shape)


@dataclass
class Step:
    index: int                 # node index in the prepared graph
    kind: str                  # STEP or DYNAMIC
    compute: Any
    prepared: Any
    inputs: tuple
    outputs: tuple
    buffers: list              # planned output arrays (None: fresh per run or unknown)
    fresh: tuple               # (k, shape, dtype) of outputs allocated per run


@dataclass
class Plan:
    """Everything one input signature needs: shapes, host values, steps and memory."""

    allocator: str
    resolution: Resolution
    template: list                  # slot -> constant / folded value (None otherwise), plus a trailing None
    steps: list
    memory: Optional[MemoryPlan]
    arena_slots: dict               # slot -> (offset, shape, dtype)
    naive_buffers: dict = field(default_factory=dict)
    bound_generation: int = -1
    planning_ms: float = 0.0
    data_dependent: list = field(default_factory=list)   # slots whose shape is only known at run time
    validation: Any = None          # _Validation in validation mode (pool only)
    arena: Optional[Arena] = None   # the arena the buffers are bound to

    def bind(self, arena: Arena) -> None:
        """(Re)make the arena views of every planned buffer after the arena changed."""
        if self.allocator != "pool" or (self.bound_generation == arena.generation and self.arena is arena):
            return
        self.arena = arena
        for step in self.steps:
            for k, o in enumerate(step.outputs):
                if o in self.arena_slots:
                    off, shape, dtype = self.arena_slots[o]
                    step.buffers[k] = arena.view(off, shape, dtype)
        self.bound_generation = arena.generation


def _planned_nbytes(shape, dtype) -> Optional[int]:
    """Bytes of an arena-planned tensor; None when it cannot live in the arena."""
    if shape is None or dtype is None or dtype.kind == "O":
        return None
    n = math.prod(shape) * dtype.itemsize
    return n if n > 0 else None


def build_plan(pg: PreparedGraph, res: Resolution, allocator: str, validate: bool = False) -> Plan:
    """Steps, lifetimes and buffers for one input signature.

    Raises:
        MemoryPlanError: ``validate`` and two simultaneously live blocks overlap.
    """
    t0 = time.perf_counter()
    outputs = set(pg.output_slots)
    template: list = [None] * (len(pg.names) + 1)
    for s, v in enumerate(res.values):
        if v is not None:
            template[s] = v
    steps: list = []
    for idx, (pn, status) in enumerate(zip(pg.nodes, res.status)):
        if status == FOLDED:
            continue
        kernel = res.kernels[idx]
        ctx = res.contexts[idx]
        prepared = None
        if status == STEP:
            prepared = kernel.prepare(ctx) if kernel.prepare is not None else ctx
        steps.append(Step(idx, status, kernel.compute if kernel is not None else None, prepared,
                          tuple(pn.all_inputs), tuple(pn.outputs), [None] * len(pn.outputs), ()))
    pool = allocator == "pool"
    t_mem = time.perf_counter()
    specs = [_step_spec(pg, res, step, outputs, pool) for step in steps]
    blocks = lifetimes(specs, keep=pg.output_slots, inplace=pool)
    arena_slots: dict = {}
    naive: dict = {}
    if pool:
        memory = plan_offsets(blocks)
        if validate:
            bad = check_no_overlap(blocks)
            if bad:
                a, b = bad[0]
                raise MemoryPlanError(
                    f"memory plan overlaps: '{pg.names[a.slots[0]]}' (steps {a.first}-{a.last}, bytes "
                    f"{a.offset}-{a.offset + a.size}) and '{pg.names[b.slots[0]]}' (steps {b.first}-{b.last}, "
                    f"bytes {b.offset}-{b.offset + b.size})")
        for b in blocks:
            for s, kind in zip(b.slots, b.kinds):
                if kind != VIEW:
                    arena_slots[s] = (b.offset, res.shapes[s], res.dtypes[s])
    else:
        for b in blocks:
            s = b.slots[0]
            naive[s] = np.empty(res.shapes[s], dtype=res.dtypes[s])
        total = naive_bytes(blocks)
        memory = MemoryPlan(blocks, total, lower_bound(blocks), total, 0.0, "naive")
    memory.planning_ms = (time.perf_counter() - t_mem) * 1e3  # lifetimes and offsets
    for step, spec in zip(steps, specs):
        if step.kind != STEP:
            continue
        fresh = []
        for k, o in enumerate(step.outputs):
            if o < 0 or k in spec.aliases:
                continue  # a view: the kernel returns it
            if o in naive:
                step.buffers[k] = naive[o]
            elif o not in arena_slots:
                fresh.append((k, res.shapes[o], res.dtypes[o]))
        step.fresh = tuple(fresh)
    dd = [s for s, shape in enumerate(res.shapes) if shape is None and s < len(pg.names)]
    check = _Validation(blocks, len(steps)) if validate and pool else None
    return Plan(allocator, res, template, steps, memory, arena_slots, naive,
                planning_ms=(time.perf_counter() - t0) * 1e3, data_dependent=dd, validation=check)


def _step_spec(pg: PreparedGraph, res: Resolution, step: Step, outputs: set, pool: bool) -> StepSpec:
    """What the planner needs of a step: output sizes, view outputs and in-place candidates."""
    pn = pg.nodes[step.index]
    n_in = len(step.inputs)
    aliases = {k: i for k, i in pn.opdef.aliases if k < len(step.outputs) and i < n_in}
    if step.kind != STEP:
        return StepSpec(step.inputs, step.outputs, (None,) * len(step.outputs), aliases)
    shapes, dtypes = res.shapes, res.dtypes
    sizes = [_planned_nbytes(shapes[o], dtypes[o]) if o >= 0 and o not in outputs else None
             for o in step.outputs]
    inplace = ()
    kernel = res.kernels[step.index]
    if pool and kernel is not None and kernel.may_inplace:
        inplace = tuple((k, i) for k, i in kernel.may_inplace
                        if k < len(step.outputs) and i < len(pn.inputs) and step.outputs[k] >= 0
                        and sizes[k] is not None and step.inputs[i] >= 0
                        and res.shapes[step.inputs[i]] == res.shapes[step.outputs[k]]
                        and res.dtypes[step.inputs[i]] == res.dtypes[step.outputs[k]])
    return StepSpec(step.inputs, step.outputs, tuple(sizes), aliases, inplace)


class _Validation:
    """Validation mode: which block each slot lives in and which blocks die after each step."""

    def __init__(self, blocks: list, n_steps: int) -> None:
        self.block_of = {s: b for b in blocks for s in b.slots}
        self.dying: list = [[] for _ in range(n_steps + 1)]
        for b in blocks:
            self.dying[min(b.last, n_steps)].append(b)


def execute(pg: PreparedGraph, plan: Plan, registry: Registry, feeds: dict, runtime=None) -> list:
    """Run every step of the plan; returns the value list (slot -> array) and fresh ids."""
    vals = list(plan.template)
    for s, arr in feeds.items():
        vals[s] = arr
    fresh_ids: dict = {}  # id -> array: holding the array keeps its id from being reused
    check = plan.validation if plan.arena is not None else None
    if check is not None:
        plan.arena.buffer.fill(0xFF)  # nothing in the arena may be read before it is written
    step = None
    try:
        for t, step in enumerate(plan.steps):
            if check is not None:
                _check_arrays(pg, plan, step, t, step.inputs, vals, "reads")
            if step.kind == DYNAMIC:
                _run_dynamic(pg, step, registry, vals, fresh_ids, runtime)
            else:
                bufs = step.buffers
                if step.fresh:
                    bufs = list(bufs)
                    for k, shape, dtype in step.fresh:
                        a = np.empty(shape, dtype=dtype)
                        fresh_ids[id(a)] = a
                        bufs[k] = a
                res = step.compute([vals[i] for i in step.inputs], bufs, step.prepared)
                if res is None:
                    for o, b in zip(step.outputs, bufs):
                        vals[o] = b
                else:
                    for o, r in zip(step.outputs, res):
                        vals[o] = r
            if check is not None:
                _check_arrays(pg, plan, step, t, step.outputs, vals, "writes")
                buf = plan.arena.buffer
                for b in check.dying[t]:
                    buf[b.offset:b.offset + b.size] = 0xFF  # poison: a stale read shows as NaN / -1
    except DynashapeError:
        raise
    except Exception as exc:
        node = pg.nodes[step.index].node if step is not None else None
        where = f"{node.op_type} node '{node.name}'" if node else "execution"
        raise ExecutionError(f"{where} failed: {type(exc).__name__}: {exc}") from exc
    vals[-1] = None
    return vals, fresh_ids


def _byte_bounds(a: np.ndarray) -> tuple:
    try:
        from numpy.lib.array_utils import byte_bounds
    except ImportError:  # numpy < 2
        byte_bounds = np.byte_bounds
    return byte_bounds(a)


def _check_arrays(pg: PreparedGraph, plan: Plan, step: Step, t: int, slots: tuple, vals: list, verb: str) -> None:
    """Validation mode: every array of ``slots`` that lies in the arena lies in its own block,
    and that block is live at step ``t`` (not freed, so not poisoned)."""
    buf = plan.arena.buffer
    if not buf.nbytes:
        return
    base = buf.ctypes.data
    top = base + buf.nbytes
    check = plan.validation
    for s in slots:
        a = vals[s] if s >= 0 else None
        if not isinstance(a, np.ndarray) or a.size == 0:
            continue
        lo, hi = _byte_bounds(a)
        if hi <= base or lo >= top:
            continue
        node = pg.nodes[step.index].node
        where = f"step {t} ({node.op_type} node '{node.name}') {verb} '{pg.names[s]}'"
        b = check.block_of.get(s)
        if b is None:
            raise MemoryPlanError(f"{where}, which lies in arena bytes [{lo - base}, {hi - base}) that no block "
                                  "of it owns (a kernel returned a view of the arena without declaring aliases?)")
        if not b.first <= t <= b.last:
            raise MemoryPlanError(f"{where} outside the lifetime of its block (steps {b.first}-{b.last}): "
                                  "the block was freed and poisoned")
        if lo < base + b.offset or hi > base + b.offset + b.size:
            raise MemoryPlanError(f"{where} at arena bytes [{lo - base}, {hi - base}), outside its block "
                                  f"[{b.offset}, {b.offset + b.size})")


def _run_dynamic(pg: PreparedGraph, step: Step, registry: Registry, vals: list, fresh_ids: set, runtime) -> None:
    """Infer, allocate and run a node whose shapes are only known now."""
    pn = pg.nodes[step.index]
    arrays = [vals[i] if i >= 0 else None for i in pn.all_inputs]
    present = [a is not None for a in arrays]
    ctx = InferContext(pn.node, pn.opset,
                       [tuple(np.shape(a)) if p else None for a, p in zip(arrays, present)],
                       [np.asarray(a).dtype if p else None for a, p in zip(arrays, present)],
                       arrays, runtime=runtime)
    _infer(pn, ctx)
    kernel = kernel_for(registry, pn, ctx)
    for o, a in zip(pn.outputs, run_node_now(pn, kernel, ctx, arrays)):
        if o >= 0:
            vals[o] = a


