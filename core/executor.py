"""Execution contexts: everything one run mutates, taken from a small pool per session.

An :class:`ExecutionContext` owns one 64-byte aligned :class:`Arena` per program segment,
the output buffers of the plans it ran (arena views, made once per plan and context), and
its counters. Programs and plans are read-only, so runs on different contexts overlap
(numpy releases the GIL in most kernels) and never write each other's memory.

:meth:`ExecutionContext.execute` runs a plan's segments: the generated ``run`` function of
each (validation mode: an interpreter that checks every arena access), then the segment's
binding nodes (inferred and run now), whose outputs bind the symbols the next segment's
plan is looked up (or made) with.

The first run of every plan checks the kernels of plugins other than dynashape's own
(every kernel in validation mode) against what inference declared: each output's dtype
and shape, and that a planned output was written at all (its buffer is poisoned before the
kernel runs). A broken kernel raises :class:`~dynashape.errors.PluginContractError` naming
the plugin, op, node and output.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Optional, Sequence

import numpy as np

from .errors import DynashapeError, ExecutionError, MemoryPlanError, PluginContractError
from .node import run_dynamic, run_kernel
from .plan import Plan, build_plan, step_error
from .planner import check_no_overlap
from .profiling import running_node
from .program import Program
from .segments import ARENA, FBLOCK, FRESH, Segment

__all__ = ["Arena", "ExecutionContext", "RunStats", "MAX_CONTINUATIONS", "TRUSTED_PLUGINS", "contract_steps"]

#: Plans kept per binding point (the next segment, by the values of the symbols it binds).
MAX_CONTINUATIONS = 32
#: Plans an execution context keeps buffers bound for, at most (and at most the plan cache size:
#: a naive binding holds every tensor of its plan, and must not outlive the plan in the cache).
MAX_BINDINGS = 16
#: An arena that grows takes at least this many times its old capacity.
GROWTH = 1.5
#: The plugins shipped (and tested) with dynashape: the first run of a plan does not check
#: their kernels' outputs (validation mode does)
TRUSTED_PLUGINS = frozenset({"dynashape.ops_builtin", "fast", "onednn"})


def contract_steps(plan: Plan, validate: bool) -> frozenset:
    """The positions of the steps of ``plan`` whose outputs a first run checks: every step
    in validation mode, else those whose kernel comes from a plugin outside TRUSTED_PLUGINS."""
    return frozenset(pos for pos, st in enumerate(plan.segment.steps)
                     if validate or st.kernel.plugin not in TRUSTED_PLUGINS)


class Arena:
    """One 64-byte aligned byte buffer that grows when a plan needs more and is kept otherwise."""

    def __init__(self) -> None:
        self.buffer = np.empty(0, dtype=np.uint8)
        self.generation = 0
        self.grow_count = 0

    @property
    def capacity(self) -> int:
        return int(self.buffer.nbytes)

    def reserve(self, nbytes: int) -> bool:
        """Grow to at least ``nbytes``, and at least GROWTH times the old capacity (a new
        buffer: growing shapes, as in decoding, touch fresh pages rarely); True when it grew."""
        if nbytes <= self.capacity:
            return False
        nbytes = max(nbytes, int(self.capacity * GROWTH) // 64 * 64)
        raw = np.empty(nbytes + 64, dtype=np.uint8)
        shift = (-raw.ctypes.data) % 64
        self.buffer = raw[shift:shift + nbytes]
        self.generation += 1
        self.grow_count += 1
        return True

    def trim(self) -> None:
        self.buffer = np.empty(0, dtype=np.uint8)
        self.generation += 1

    def view(self, offset: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
        return np.ndarray(shape, dtype, self.buffer, offset)


@dataclass(eq=False)
class RunStats:
    """Counters of runs: plan-cache hits and misses, milliseconds planning and executing."""

    runs: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    planning_ms: float = 0.0
    execution_ms: float = 0.0
    failed_runs: int = 0
    symbolic_plans: int = 0      # plans made by the generated functions
    resolved_plans: int = 0      # plans made by per-node inference (a guard failed)
    continuation_plans: int = 0  # plans made after a binding node (data-dependent shapes)

    def add(self, other: "RunStats") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class ExecutionContext:
    """What one run at a time owns: arenas (one per segment), bound buffers, counters."""

    def __init__(self, validate: bool = False, max_bindings: int = MAX_BINDINGS):
        self.arenas: list[Arena] = []
        self.bindings: dict = {}
        #: plans whose bound buffers are kept (naive: every tensor of the plan; pool: views)
        self.max_bindings = max(1, min(MAX_BINDINGS, max_bindings))
        self.stats = RunStats()
        self.validate = validate
        self.last_values: Optional[list] = None

    def arena(self, segment: int) -> Arena:
        while len(self.arenas) <= segment:
            self.arenas.append(Arena())
        return self.arenas[segment]

    @property
    def arena_bytes(self) -> int:
        return sum(a.capacity for a in self.arenas)

    def trim(self) -> None:
        for a in self.arenas:
            a.trim()
        self.bindings.clear()

    # --- buffers ---------------------------------------------------------------------
    def buffers(self, plan: Plan) -> tuple:
        """The output buffers of ``plan``'s steps in this context (made once per plan)."""
        entry = self.bindings.get(id(plan))
        if entry is not None and (entry[1] is None or entry[1].generation == entry[2]):
            return entry[3]
        seg = plan.segment
        if plan.program.allocator == "pool":
            arena = self.arena(seg.index)
            if arena.reserve(plan.arena_bytes):
                self.bindings.clear()     # views of the old buffer: let it go
            buf, generation = arena.buffer, arena.generation
        else:
            arena, buf, generation = None, None, 0
        buffers = seg.bind(buf, plan.shapes, plan.offsets)
        if len(self.bindings) >= self.max_bindings:
            self.bindings.pop(next(iter(self.bindings)))
        self.bindings[id(plan)] = (plan, arena, generation, buffers)
        return buffers

    # --- running -----------------------------------------------------------------------
    def execute(self, plan: Plan, feeds: Sequence[np.ndarray], profiler=None) -> list:
        """Run ``plan`` (segment 0) on ``feeds`` (the program's inputs in order); returns the
        value list (slot -> array) of the run. With a :class:`~dynashape.profiling.Profiler`
        the steps run one by one and each node's time is recorded."""
        t0 = time.perf_counter()
        program = plan.program
        v = list(plan.template)
        for slot, a in zip(program.pg.input_slots, feeds):
            v[slot] = a
        while True:
            seg = plan.segment
            if seg.steps:
                buffers = self.buffers(plan)
                checks = plan.contract_checks
                if checks is None:
                    checks = plan.contract_checks = contract_steps(plan, self.validate)
                if self.validate or profiler is not None or checks:
                    _Interpreter(self, plan, buffers, profiler, checks).run(v)
                    if not self.validate:
                        plan.contract_checks = frozenset()   # checked: later runs take the generated run
                else:
                    try:
                        seg.run.fn(v, buffers, plan.prepared, plan.shapes)
                    except DynashapeError:
                        raise
                    except Exception as exc:
                        raise step_error(seg.steps, seg.run.lines, "run", exc) from exc
            if not seg.binding:
                break
            key = _run_binding_nodes(program, seg, v, profiler)
            if seg.index + 1 == len(program.segments) or program.segments[seg.index + 1].empty:
                break
            following = program.segments[seg.index + 1]
            nxt = plan.next.get(key)
            if nxt is None:
                nxt = self._continuation(plan, following, key, v)
            else:
                for slot, value in nxt.values:
                    v[slot] = value
            plan = nxt
        self.stats.execution_ms += (time.perf_counter() - t0) * 1e3
        self.last_values = v
        return v

    def _continuation(self, plan: Plan, following: Segment, key: tuple, v: list) -> Plan:
        t0 = time.perf_counter()
        env = dict(plan.env)
        env.update(zip((name for _, _, name in plan.segment.binds), key))
        nxt = build_plan(plan.program, following, env, known=v, validate=self.validate)
        if self.validate:
            check_plan_memory(nxt)
        with plan.program.cache_lock:     # plans are shared by contexts: one writer at a time
            if len(plan.next) >= MAX_CONTINUATIONS:
                plan.next.pop(next(iter(plan.next)), None)
            plan.next[key] = nxt
        self.stats.continuation_plans += 1
        self.stats.planning_ms += (time.perf_counter() - t0) * 1e3
        return nxt


def _run_binding_nodes(program: Program, seg: Segment, v: list, profiler=None) -> tuple:
    """Infer and run the segment's binding nodes; the values of the symbols they bind."""
    pg = program.pg
    for node in seg.binding:
        idx, kernel, prepared = node.index, node.kernel, node.prepared
        pn = pg.nodes[idx]
        ins = [v[i] if i >= 0 else None for i in node.inputs]
        t0 = time.perf_counter()
        if profiler is not None:
            with running_node(pn.node):
                outs = run_dynamic(pn, program.registry, ins, program.services, kernel, prepared,
                                   program.memory_limit)
            profiler.node_event(pn.node, idx, t0, time.perf_counter(), ins, outs)
        else:
            outs = run_dynamic(pn, program.registry, ins, program.services, kernel, prepared, program.memory_limit)
        for o, a in zip(pn.outputs, outs):
            if o >= 0:
                v[o] = a
    for slot, rank, ints in seg.checks:
        a = v[slot]
        if a is None:
            continue
        shape = np.shape(a)
        if len(shape) != rank or any(shape[axis] != d for axis, d in ints):
            node = pg.nodes[pg.producer[slot]].node
            want = ["?"] * rank
            for axis, d in ints:
                want[axis] = d
            raise ExecutionError(f"{node.op_type} node '{node.name}' produced '{pg.names[slot]}' with shape "
                                 f"{list(shape)}, its inference said {want}")
    return tuple(np.shape(v[slot])[axis] for slot, axis, _ in seg.binds)


def check_plan_memory(plan: Plan) -> None:
    """Validation mode: no two blocks live at the same step share bytes."""
    if plan.program.allocator != "pool":
        return
    bad = check_no_overlap(plan.memory.blocks)
    if bad:
        a, b = bad[0]
        names = plan.program.slot_names
        raise MemoryPlanError(
            f"memory plan overlaps: '{names[a.slots[0]]}' (steps {a.first}-{a.last}, bytes "
            f"{a.offset}-{a.offset + a.size}) and '{names[b.slots[0]]}' (steps {b.first}-{b.last}, "
            f"bytes {b.offset}-{b.offset + b.size})")


# --- validation mode ------------------------------------------------------------------------

def _poisonable(a) -> bool:
    return isinstance(a, np.ndarray) and a.size > 0 and a.dtype.kind in "biufcmM" and a.flags.c_contiguous


def _poison_outputs(outs: list, ins: list) -> list:
    """Fill each output buffer (the node's outputs, not its scratch buffers: those may stay
    unused) that shares no memory with an input with 0xFF bytes; the indices of those filled."""
    poisoned = []
    for k, out in enumerate(outs):
        if _poisonable(out) and not any(isinstance(a, np.ndarray) and np.may_share_memory(out, a) for a in ins):
            out.reshape(-1).view(np.uint8).fill(0xFF)
            poisoned.append(k)
    return poisoned


def _all_bytes(a: np.ndarray, byte: int) -> bool:
    return bool(np.all(a.reshape(-1).view(np.uint8) == byte))


def _contract_error(st, k: int, plan: Plan, what: str) -> PluginContractError:
    node, kernel = st.node.node, st.kernel
    name = plan.program.slot_names[st.outputs[k]] if st.outputs[k] >= 0 else f"#{k}"
    return PluginContractError(
        f"the kernel of plugin '{kernel.plugin}' for {node.domain or 'ai.onnx'}::{node.op_type} (node "
        f"'{node.name}') {what} (output {k} '{name}')")


def _check_contract(st, plan: Plan, pos: int, ins: list, outs: list, res: list, poisoned: list) -> list:
    """The kernel's outputs ``res`` against inference (dtype, shape) and, for outputs it got
    a poisoned buffer for, that it wrote them: a buffer still all 0xFF bytes is poisoned
    again with 0x00 and the kernel run once more. All 0x00 then: it was never written; all
    0xFF: the output really is those bytes; anything else: the result depends on the
    buffer's old bytes (the kernel read its output before writing it). Returns the outputs
    (of the second run when there was one)."""
    for k, spec in enumerate(st.outs):
        if spec.kind not in (ARENA, FRESH, FBLOCK) or spec.dtype is None or k >= len(res):
            continue
        a = res[k]
        want = tuple(plan.shapes[spec.sid])
        if not isinstance(a, np.ndarray):
            raise _contract_error(st, k, plan, f"returned {type(a).__name__}, not an array of {want} {spec.dtype}")
        if a.dtype != spec.dtype:
            raise _contract_error(st, k, plan, f"returned dtype {a.dtype} where its dtype inference declared "
                                               f"{spec.dtype}")
        if a.shape != want:
            raise _contract_error(st, k, plan, f"returned shape {list(a.shape)} where its shape inference declared "
                                               f"{list(want)}")
    for k in poisoned:
        if k < len(res) and res[k] is outs[k] and _all_bytes(outs[k], 0xFF):
            outs[k].reshape(-1).view(np.uint8).fill(0)
            res = run_kernel(st.node, st.kernel.compute, plan.prepared[pos], ins, outs)
            if res[k] is not outs[k] or _all_bytes(outs[k], 0xFF):
                continue
            if _all_bytes(outs[k], 0):
                raise _contract_error(st, k, plan, f"left its planned output buffer unwritten: write the result "
                                                   f"into outputs[{k}] (np.copyto / out=) or return it")
            raise _contract_error(st, k, plan, f"gave another result when its output buffer held other bytes: it "
                                               f"reads outputs[{k}] before writing it (a buffer's old bytes are "
                                               f"garbage)")
    return res


def _byte_bounds(a: np.ndarray) -> tuple:
    try:
        from numpy.lib.array_utils import byte_bounds
    except ImportError:  # numpy < 2
        byte_bounds = np.byte_bounds
    return byte_bounds(a)


class _Interpreter:
    """The generated ``run`` as a loop. In validation mode it checks every arena array a
    step reads or writes lies in its own block and that the block is live, and poisons
    (0xFF) the arena at the start and every block after its last reader (a stale float
    read shows as NaN); with a profiler it records each step's time."""

    def __init__(self, ctx: ExecutionContext, plan: Plan, buffers: tuple, profiler=None,
                 checks: frozenset = frozenset()):
        self.plan = plan
        self.buffers = buffers
        self.profiler = profiler
        self.checks = checks
        self.check_arena = plan.program.allocator == "pool" and ctx.validate
        self.arena = ctx.arena(plan.segment.index) if self.check_arena else None
        blocks = plan.memory.blocks if self.check_arena else []
        self.block_of = {s: b for b in blocks for s in b.slots}
        self.dying: dict = {}
        for b in blocks:
            self.dying.setdefault(b.last, []).append(b)

    def run(self, v: list) -> None:
        seg, plan = self.plan.segment, self.plan
        buf = self.arena.buffer if self.check_arena else None
        if buf is not None:
            buf.fill(0xFF)  # nothing in the arena may be read before it is written
        blocks: dict = {}
        for pos, st in enumerate(seg.steps):
            self._check(st, st.inputs, v, "reads")
            outs = []
            for k, spec in enumerate(st.outs):
                if spec.kind == FRESH:
                    outs.append(np.empty(plan.shapes[spec.sid], spec.dtype))
                elif spec.kind == FBLOCK:
                    if spec.owner:
                        blocks[spec.ref] = np.empty(plan.shapes[spec.sid], spec.dtype)
                    a = blocks[spec.ref]
                    outs.append(a.reshape(plan.shapes[spec.sid]) if spec.reshape else a)
                elif spec.kind == ARENA:
                    outs.append(self.buffers[pos][k])
                else:
                    outs.append(None)
            ins = [v[i] if i >= 0 else None for i in st.inputs]
            checked = pos in self.checks
            if checked:
                poisoned = _poison_outputs(outs[:len(st.outputs)], ins)   # (not the scratch buffers after them)
            t0 = time.perf_counter()
            if self.profiler is not None:
                with running_node(st.node.node):
                    res = run_kernel(st.node, st.kernel.compute, plan.prepared[pos], ins, outs)
                self.profiler.node_event(st.node.node, st.t, t0, time.perf_counter(), ins, res)
            else:
                res = run_kernel(st.node, st.kernel.compute, plan.prepared[pos], ins, outs)
            if checked:
                res = _check_contract(st, plan, pos, ins, outs, res, poisoned)
            for o, a in zip(st.outputs, res):
                if o >= 0:
                    v[o] = a
            self._check(st, st.outputs, v, "writes")
            if buf is not None:
                for b in self.dying.get(st.t, ()):
                    buf[b.offset:b.offset + b.size] = 0xFF

    def _check(self, st, slots: tuple, v: list, verb: str) -> None:
        if not self.check_arena or not self.arena.buffer.nbytes:
            return
        buf = self.arena.buffer
        base = buf.ctypes.data
        top = base + buf.nbytes
        names = self.plan.program.slot_names
        t = st.t
        for s in slots:
            a = v[s] if s >= 0 else None
            if not isinstance(a, np.ndarray) or a.size == 0:
                continue
            lo, hi = _byte_bounds(a)
            if hi <= base or lo >= top:
                continue
            node = st.node.node
            where = f"step {t} ({node.op_type} node '{node.name}') {verb} '{names[s]}'"
            b = self.block_of.get(s)
            if b is None:
                raise MemoryPlanError(f"{where}, which lies in arena bytes [{lo - base}, {hi - base}) that no block "
                                      "of it owns (a kernel returned a view of the arena without declaring aliases?)")
            if not b.first <= t <= b.last:
                raise MemoryPlanError(f"{where} outside the lifetime of its block (steps {b.first}-{b.last}): "
                                      "the block was freed and poisoned")
            if lo < base + b.offset or hi > base + b.offset + b.size:
                raise MemoryPlanError(f"{where} at arena bytes [{lo - base}, {hi - base}), outside its block "
                                      f"[{b.offset}, {b.offset + b.size})")
