"""A Plan (everything that depends only on the input signature) and its execution.

Planning: lifetimes of the tensors the steps produce, aliases (views share their
source's block), offsets in one arena (``pool``) or one buffer per tensor (``naive``),
and each step's kernel with its prepared arguments. Execution: kernels write into the
planned buffers; graph outputs are fresh arrays of each run (never arena views).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from .errors import DynashapeError, ExecutionError, MemoryPlanError
from .graph import PreparedGraph
from .inference import DYNAMIC, FOLDED, STEP, Resolution, kernel_for, make_context, run_node_now, _infer
from .planner import Block, MemoryPlan, check_no_overlap, plan_offsets
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

    def bind(self, arena: Arena) -> None:
        """(Re)make the arena views of every planned buffer after the arena changed."""
        if self.allocator != "pool" or self.bound_generation == arena.generation:
            return
        for step in self.steps:
            for k, o in enumerate(step.outputs):
                if o in self.arena_slots:
                    off, shape, dtype = self.arena_slots[o]
                    step.buffers[k] = arena.view(off, shape, dtype)
        self.bound_generation = arena.generation


def _plannable(shape, dtype) -> bool:
    return shape is not None and dtype is not None and dtype != object and int(np.prod(shape)) > 0


def build_plan(pg: PreparedGraph, res: Resolution, allocator: str, validate: bool = False) -> Plan:
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
    blocks = _lifetimes(pg, res, steps, outputs)
    memory = None
    arena_slots: dict = {}
    naive: dict = {}
    if allocator == "pool":
        memory = plan_offsets(blocks)
        if validate:
            bad = check_no_overlap(blocks)
            if bad:
                a, b = bad[0]
                raise MemoryPlanError(f"memory plan overlaps: {pg.names[a.slots[0]]} and {pg.names[b.slots[0]]}")
        for b in blocks:
            for s in b.slots:
                if s == b.slots[0]:
                    arena_slots[s] = (b.offset, res.shapes[s], res.dtypes[s])
    else:
        for b in blocks:
            s = b.slots[0]
            naive[s] = np.empty(res.shapes[s], dtype=res.dtypes[s])
        memory = MemoryPlan(blocks, sum(b.size for b in blocks), 0, sum(b.size for b in blocks), 0.0, "naive")
    for step in steps:
        if step.kind != STEP:
            continue
        fresh = []
        for k, o in enumerate(step.outputs):
            if o < 0:
                continue
            shape, dtype = res.shapes[o], res.dtypes[o]
            if o in naive:
                step.buffers[k] = naive[o]
            elif o not in arena_slots:
                fresh.append((k, shape, dtype))
        step.fresh = tuple(fresh)
    dd = [s for s, shape in enumerate(res.shapes) if shape is None and s < len(pg.names)]
    return Plan(allocator, res, template, steps, memory, arena_slots, naive,
                planning_ms=(time.perf_counter() - t0) * 1e3, data_dependent=dd)


def _lifetimes(pg: PreparedGraph, res: Resolution, steps: list, outputs: set) -> list:
    """Blocks for the tensors steps produce with known shapes (graph outputs excluded).

    A view output (the op declares ``aliases``) joins its source's block, so the block
    lives until the last use of any tensor in it.
    """
    owner: dict[int, Block] = {}
    blocks: list = []
    for t, step in enumerate(steps):
        for i in step.inputs:
            if i in owner:
                owner[i].last = max(owner[i].last, t)
        if step.kind != STEP:
            continue
        pn = pg.nodes[step.index]
        aliases = dict(pn.opdef.aliases)
        for k, o in enumerate(step.outputs):
            if o < 0:
                continue
            src = pn.all_inputs[aliases[k]] if k in aliases and aliases[k] < len(pn.all_inputs) else -1
            if o in outputs:
                if src in owner:  # a graph output viewing the arena is copied out after the last step
                    owner[src].last = len(steps)
                continue
            if src in owner:
                owner[o] = owner[src]
                owner[o].slots.append(o)
                owner[o].last = max(owner[o].last, t)
                continue
            if k in aliases:
                continue  # a view of an input/constant: no buffer of its own
            shape, dtype = res.shapes[o], res.dtypes[o]
            if not _plannable(shape, dtype):
                continue
            b = Block(len(blocks), int(np.prod(shape)) * dtype.itemsize, t, t, [o])
            blocks.append(b)
            owner[o] = b
    return blocks


def execute(pg: PreparedGraph, plan: Plan, registry: Registry, feeds: dict, runtime=None) -> list:
    """Run every step of the plan; returns the value list (slot -> array) and fresh ids."""
    vals = list(plan.template)
    for s, arr in feeds.items():
        vals[s] = arr
    fresh_ids: dict = {}  # id -> array: holding the array keeps its id from being reused
    step = None
    try:
        for step in plan.steps:
            if step.kind == DYNAMIC:
                _run_dynamic(pg, step, registry, vals, fresh_ids, runtime)
                continue
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
    except DynashapeError:
        raise
    except Exception as exc:
        node = pg.nodes[step.index].node if step is not None else None
        where = f"{node.op_type} node '{node.name}'" if node else "execution"
        raise ExecutionError(f"{where} failed: {type(exc).__name__}: {exc}") from exc
    vals[-1] = None
    return vals, fresh_ids


def _run_dynamic(pg: PreparedGraph, step: Step, registry: Registry, vals: list, fresh_ids: set, runtime) -> None:
    """Infer, allocate and run a node whose shapes are only known now."""
    pn = pg.nodes[step.index]
    arrays = [vals[i] if i >= 0 else None for i in pn.all_inputs]
    shapes = {i: tuple(np.shape(a)) for i, a in zip(pn.all_inputs, arrays) if a is not None}
    dtypes = {i: np.asarray(a).dtype for i, a in zip(pn.all_inputs, arrays) if a is not None}
    lookup_s = _Lookup(shapes)
    lookup_d = _Lookup(dtypes)
    lookup_v = _Lookup({i: a for i, a in zip(pn.all_inputs, arrays) if a is not None})
    ctx = make_context(pn, lookup_s, lookup_d, lookup_v, runtime)
    _infer(pn, ctx)
    kernel = kernel_for(registry, pn, ctx)
    for o, a in zip(pn.outputs, run_node_now(pn, kernel, ctx, arrays)):
        if o >= 0:
            vals[o] = a


class _Lookup(dict):
    def __getitem__(self, key):
        return self.get(key)


_ = (STEP, FOLDED)
