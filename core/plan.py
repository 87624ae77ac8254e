"""Plans: what one segment of a program needs for one signature.

:func:`build_plan` calls the segment's generated ``sig`` function with the symbol values
(shapes, folded values, kernel parameters, block sizes in one call), runs the plan nodes
(values computed only from shapes: position ids, causal masks), prepares the kernels whose
preparation needs concrete shapes, and lays the blocks out in the segment's arena: in a
placement order kept from an earlier signature (each block above the earlier-placed
blocks whose lifetimes overlap it), re-placed from scratch only when that exceeds
:data:`RELAYOUT_RATIO` times the lower bound.

When a guard of the symbolic rules fails or ``sig`` raises, the same numbers come from
per-node inference (:func:`numbers_by_inference`), which also reports a broken rule with
the node's name. In validation mode both are computed and must agree.
"""
from __future__ import annotations

import math
import time
from typing import Any, Optional

import numpy as np

from .codegen import CodeWriter
from .errors import DynashapeError, ExecutionError, PlanCheckError, ResourceLimitError
from .limits import INT64_MAX, allocation_error, check_tensor, format_bytes, is_resource_failure
from .node import STATIC, fold, infer, make_context
from .planner import Block, MemoryPlan, align, lower_bound, naive_bytes, order_by_offset, plan_offsets, write_layout
from .records import InferContext
from .program import Program
from .segments import FRESH, Calls, Segment
from .symbolic import evaluate
from .symbolic_inference import BINDING, FOLDED

__all__ = ["Plan", "build_plan", "numbers_by_inference", "RELAYOUT_RATIO", "MAX_LAYOUTS"]

#: A kept placement order is used while its arena is at most this many times the lower bound.
RELAYOUT_RATIO = 1.05
#: Placement orders kept per segment (most recently made first).
MAX_LAYOUTS = 4


class Plan:
    """One segment of a program at one signature (read-only once built).

    ``env`` maps every symbol known in the segment to its value. Segment 0's plan has the
    ``template`` of values every run starts from (constants, folded and plan-time
    values); a later segment's plan has ``values`` to add. ``prepared`` holds the kernels'
    prepared arguments, ``shapes`` the segment's shapes by shape id, ``offsets`` the arena
    offsets of its blocks; ``arena_bytes`` / ``lower_bound_bytes`` / ``strategy`` describe
    the layout. ``next`` holds the plans of the following segment by the values of the
    symbols the binding nodes bind.
    """

    __slots__ = ("program", "segment", "env", "template", "values", "prepared", "shapes", "sizes", "offsets",
                 "arena_bytes", "lower_bound_bytes", "strategy", "planning_ms", "symbolic", "next", "_memory",
                 "contract_checks", "__weakref__")

    def __init__(self, program: Program, segment: Segment, env: dict):
        self.program = program
        self.segment = segment
        self.env = env
        self.template: Optional[list] = None
        self.values: list = []
        self.prepared: list = []
        self.shapes: tuple = ()
        self.sizes: tuple = ()
        self.offsets: tuple = ()
        self.arena_bytes = 0
        self.lower_bound_bytes = 0
        self.strategy = ""
        self.planning_ms = 0.0
        self.symbolic = True
        self.next: dict = {}
        self._memory: Optional[MemoryPlan] = None
        #: positions of the steps whose kernel's outputs the next run checks against inference
        #: (see executor.contract_steps); None until the first run; () once checked
        self.contract_checks: Optional[frozenset] = None

    @property
    def allocator(self) -> str:
        return self.program.allocator

    @property
    def steps(self) -> list:
        return self.segment.steps

    @property
    def memory(self) -> MemoryPlan:
        """The segment's blocks with this signature's sizes and offsets (made on first use)."""
        if self._memory is None:
            self._memory = self._memory_plan()
        return self._memory

    def shape_of(self, slot: int) -> Optional[tuple]:
        """The concrete shape of any tensor of the program at this signature (None if unknown)."""
        return _evaluated(self.program.sg.shapes[slot], self.env)

    def _memory_plan(self) -> MemoryPlan:
        seg = self.segment
        blocks = []
        for k, b in enumerate(seg.blocks):
            blocks.append(Block(b.id, int(self.sizes[k]), b.first, b.last, list(b.slots),
                                int(self.offsets[k]) if self.offsets else -1, list(b.kinds), list(b.steps)))
        return MemoryPlan(blocks, self.arena_bytes, self.lower_bound_bytes, naive_bytes(blocks), self.planning_ms,
                          self.strategy)


# --- building ------------------------------------------------------------------------

def build_plan(program: Program, segment: Segment, env: dict, known: Optional[list] = None,
               validate: bool = False) -> Plan:
    """The plan of ``segment`` for symbol values ``env``.

    ``known`` is the value list of the run being planned (for segments after a binding
    node: the values earlier segments made); segment 0 starts from the program's template.

    Raises:
        ShapeInferenceError: an op's rule is broken by these shapes (node named).
        ExecutionError: a plan node's kernel failed.
        PlanCheckError: validation mode, the symbolic plan disagrees with per-node inference.
    """
    t0 = time.perf_counter()
    plan = Plan(program, segment, env)
    args = [env[name] for name in segment.symbols]
    numbers = None
    try:
        numbers = segment.sig(*args)
    except (ArithmeticError, ValueError, TypeError):
        numbers = None
    if numbers is None or validate:
        reference, contexts = numbers_by_inference(program, segment, env)
        if numbers is not None:
            _cross_check(program, segment, numbers, reference)
            _check_static_prepared(segment, contexts)
        else:
            plan.symbolic = False
            numbers = reference
    shapes, values, symbolic_prepared, sizes = numbers
    plan.shapes, plan.sizes = shapes, sizes
    if segment.index == 0:
        vals = list(program.template)
        plan.template = vals
    else:
        vals = known
    for slot, value in zip(segment.value_slots, values):
        vals[slot] = value
    if segment.index > 0:
        plan.values.extend(zip(segment.value_slots, values))
    plan.prepared = _prepared(segment.run, segment.steps, symbolic_prepared, shapes, vals, program)
    check_tensor_limit(plan, segment, shapes, sizes)
    if segment.plan_nodes:
        _run_plan_nodes(plan, segment, symbolic_prepared, shapes, vals, args)
    _layout(plan, segment, sizes)
    check_arena_limit(plan)
    plan.planning_ms = (time.perf_counter() - t0) * 1e3
    return plan


def _prepared(calls: Calls, steps: list, symbolic_prepared: tuple, shapes: tuple, vals: list,
              program: Program) -> list:
    """Each step's prepared argument: static ones shared, symbolic ones from ``sig``, the
    rest from ``prepare`` with concrete shapes."""
    prepared = list(calls.static)
    for pos, qid in calls.symbolic:
        prepared[pos] = symbolic_prepared[qid]
    for pos in calls.concrete:
        st = steps[pos]
        prepared[pos] = st.prepare(_concrete_context(program, st, shapes, vals))
    return prepared


def _concrete_context(program: Program, st, shapes: tuple, vals: list):
    """The concrete InferContext of a step for kernel preparation: concrete shapes, and the
    values a signature fixes (never a run's data: the plan is shared by runs)."""
    sg = program.sg
    known = program.known_by_signature
    ctx = InferContext(st.node.node, st.node.opset,
                       [shapes[s] if s >= 0 else None for s in st.in_sids],
                       [sg.dtypes[i] if i >= 0 else None for i in st.inputs],
                       [vals[i] if i in known else None for i in st.inputs], services=program.services)
    ctx.output_shapes = [shapes[s] if s >= 0 else None for s in st.out_sids]
    ctx.output_dtypes = [sg.dtypes[o] if o >= 0 else None for o in st.outputs]
    return ctx


def _run_plan_nodes(plan: Plan, segment: Segment, symbolic_prepared: tuple, shapes: tuple, vals: list,
                    args: list) -> None:
    """Run the nodes whose outputs depend only on shapes, once for this signature."""
    prepared = _prepared(segment.run_plan, segment.plan_nodes, symbolic_prepared, shapes, vals, plan.program)
    try:
        segment.run_plan.fn(vals, None, prepared, shapes, args)
    except DynashapeError:
        raise
    except Exception as exc:
        raise step_error(segment.plan_nodes, segment.run_plan.lines, "run_plan", exc) from exc
    if segment.index > 0:
        plan.values.extend((o, vals[o]) for o in segment.plan_outputs)


def step_error(steps: list, lines: dict, name: str, exc: Exception) -> DynashapeError:
    """An ExecutionError naming the node whose kernel raised inside generated code ``name``."""
    tb = exc.__traceback__
    pos = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == name and code.co_filename.startswith("<dynashape-"):
            pos = lines.get(tb.tb_lineno)
        tb = tb.tb_next
    if pos is None:
        if is_resource_failure(exc):
            return allocation_error(exc, "a run")
        return ExecutionError(f"execution failed: {type(exc).__name__}: {exc}")
    node = steps[pos].node.node
    if is_resource_failure(exc):
        return allocation_error(exc, f"{node.op_type} node '{node.name}'", node.name)
    return ExecutionError(f"{node.op_type} node '{node.name}' failed: {type(exc).__name__}: {exc}")


def _layout(plan: Plan, segment: Segment, sizes: tuple) -> None:
    """Arena offsets for this signature: a kept placement order when it stays within
    RELAYOUT_RATIO of the lower bound, else a new greedy placement (kept for later)."""
    if not segment.blocks:
        plan.strategy = "empty"
        return
    if plan.program.allocator != "pool":   # a buffer per block: "arena" is their total
        plan.offsets = (0,) * len(segment.blocks)
        plan.arena_bytes = sum(align(n) for n in sizes)
        plan.lower_bound_bytes = lower_bound(segment.blocks, sizes)
        plan.strategy = "naive"
        return
    for _order, layout in list(segment.layouts):
        offsets, top, bound = layout(sizes)
        if top <= RELAYOUT_RATIO * bound:
            plan.offsets, plan.arena_bytes, plan.lower_bound_bytes = offsets, top, bound
            plan.strategy = "kept order"
            return
    blocks = [Block(k, int(n), b.first, b.last) for k, (b, n) in enumerate(zip(segment.blocks, sizes))]
    memory = plan_offsets(blocks)
    plan.offsets = tuple(b.offset for b in blocks)
    plan.arena_bytes, plan.lower_bound_bytes = memory.arena_bytes, memory.lower_bound_bytes
    plan.strategy = memory.strategy
    order = tuple(b.id for b in order_by_offset(blocks))
    layout = _KeptLayout(segment.blocks, order, f"{plan.program.name}-layout{segment.index}")
    with plan.program.cache_lock:
        segment.layouts = [(order, layout)] + [x for x in segment.layouts if x[0] != order][:MAX_LAYOUTS - 1]


class _KeptLayout:
    """The layout function (``planner.write_layout``) of a kept placement order, generated
    and compiled when a later signature first asks for it: the plan that made the order
    placed its blocks itself, and a model run at one shape never needs it."""

    __slots__ = ("blocks", "order", "name", "_fn")

    def __init__(self, blocks, order: tuple, name: str):
        self.blocks, self.order, self.name, self._fn = blocks, order, name, None

    def __call__(self, sizes: tuple) -> tuple:
        fn = self._fn
        if fn is None:
            w = CodeWriter(self.name)
            write_layout(w, self.blocks, self.order)
            fn = self._fn = w.compile()["layout"]
        return fn(sizes)


def check_tensor_limit(plan: Plan, segment: Segment, shapes: tuple, sizes: tuple) -> None:
    """Raise ResourceLimitError, before anything is allocated (and before the plan nodes
    run), when one tensor of the plan is over the program's memory_limit or its element
    count overflows int64. Arena blocks are checked by their sizes, the other outputs one
    by one (plan nodes' outputs, graph outputs: few)."""
    limit = plan.program.memory_limit
    if segment.fresh_specs is None:
        segment.fresh_specs = _sized_specs([(st, k) for st in segment.plan_nodes for k in range(len(st.outs))]
                                           + [(st, k) for st in segment.steps for k, spec in enumerate(st.outs)
                                              if spec.kind == FRESH])   # FBLOCK (naive) blocks are in ``sizes``
    big = bool(sizes) and max(sizes) > limit
    near = min(limit, INT64_MAX)    # (over it: too many bytes, or too many elements for int64)
    for st, k, sid, itemsize in (_sized_specs(_all_specs(segment)) if big else segment.fresh_specs):
        shape = shapes[sid]
        if shape is not None and (big or math.prod(shape) * itemsize > near):
            node = st.node.node     # (the message is made only for a tensor near or over the limit)
            name = plan.program.slot_names[(st.outputs + st.scratch)[k]]
            check_tensor(shape, itemsize, limit, f"output '{name}' of {node.op_type} node '{node.name}'", node.name)


def _sized_specs(specs: list) -> list:
    """(step, output index, shape id, bytes per element) of the outputs with a shape id."""
    return [(st, k, st.outs[k].sid, max(1, np.dtype(st.outs[k].dtype).itemsize) if st.outs[k].dtype is not None
             else 1) for st, k in specs if st.outs[k].sid >= 0]


def check_arena_limit(plan: Plan) -> None:
    """Raise ResourceLimitError when the plan's arena (naive: the sum of its buffers) is over
    the program's memory_limit."""
    limit = plan.program.memory_limit
    if plan.arena_bytes > limit:
        raise ResourceLimitError(f"the plan for these input shapes needs {format_bytes(plan.arena_bytes)} "
                                 f"({plan.arena_bytes} bytes) of intermediate tensors, over the session's "
                                 f"memory_limit of {format_bytes(limit)} ({limit} bytes)",
                                 nbytes=plan.arena_bytes, limit=limit)


def _all_specs(segment: Segment) -> list:
    return [(st, k) for st in segment.plan_nodes + segment.steps for k in range(len(st.outs))]


# --- the same numbers by per-node inference ---------------------------------------------

def numbers_by_inference(program: Program, segment: Segment, env: dict) -> tuple:
    """``((shapes, values, symbolic prepared, sizes), contexts)`` of ``segment`` by concrete
    per-node inference of every node up to its end: the reference for the generated ``sig``,
    used when a guard fails, to report a broken rule, and to check plans in validation
    mode; ``contexts`` are the nodes' concrete contexts by node index.

    Raises:
        ShapeInferenceError: a node's rule is broken (named).
    """
    shapes_by_slot, values_by_slot, contexts = _infer_concretely(program, segment, env)
    shapes = tuple(shapes_by_slot[slots[0]] for slots in segment.shape_slots)
    values = tuple(values_by_slot[s] for s in segment.value_slots)
    prepared = tuple(st.prepare(contexts[st.index]) for st in segment.symbolic_steps)
    sizes = tuple(math.prod(shapes_by_slot[b.slots[0]]) * program.sg.dtypes[b.slots[0]].itemsize
                  for b in segment.blocks)
    return (shapes, values, prepared, sizes), contexts


def _infer_concretely(program: Program, segment: Segment, env: dict) -> tuple:
    pg, sg = program.pg, program.sg
    n = len(sg.shapes)       # the graph's slots and the kernels' scratch buffers
    shapes: list = [None] * n
    dtypes: list = list(sg.dtypes)
    values: list = [None] * n
    scratch = {st.index: st for seg in program.segments for st in seg.steps + seg.plan_nodes if st.scratch}
    for s, arr in pg.constants.items():
        shapes[s], values[s] = tuple(arr.shape), arr
    for s in pg.input_slots:
        shapes[s] = _evaluated(sg.shapes[s], env)
    contexts: dict = {}
    last = segment.nodes[-1] if segment.nodes else -1
    for idx, pn in enumerate(pg.nodes[:last + 1]):
        status = sg.status[idx]
        if status == BINDING:
            for o in pn.outputs:
                if o >= 0:
                    shapes[o] = _evaluated(sg.shapes[o], env)
            continue
        ctx = make_context(pn, shapes, dtypes, values, program.services)
        infer(pn, ctx)
        contexts[idx] = ctx
        for o, shape in zip(pn.outputs, ctx.output_shapes):
            if o >= 0:
                shapes[o] = shape
        if idx in scratch:
            st = scratch[idx]
            for slot, (shape, _) in zip(st.scratch, st.kernel.scratch(ctx)):
                shapes[slot] = tuple(shape)
        if status == FOLDED:
            folded = fold(pn, sg.kernels[idx], ctx, values, limit=1 << 62)
            if folded is None:
                raise PlanCheckError(f"{pn.node.op_type} node '{pn.node.name}': its value was folded "
                                     "symbolically but cannot be computed for these shapes")
            for o, v in zip(pn.outputs, folded):
                if o >= 0:
                    values[o] = v
    return shapes, values, contexts


def _evaluated(shape, env: dict) -> Optional[tuple]:
    if shape is None:
        return None
    try:
        return tuple(evaluate(d, env) for d in shape)
    except KeyError:
        return None


# --- validation mode ------------------------------------------------------------------

def _cross_check(program: Program, segment: Segment, numbers: tuple, reference: tuple) -> None:
    """Validation mode: the generated numbers must equal per-node inference's."""
    shapes, values, prepared, sizes = numbers
    ref_shapes, ref_values, ref_prepared, ref_sizes = reference
    names = program.slot_names
    for sid, (got, want) in enumerate(zip(shapes, ref_shapes)):
        if tuple(got) != tuple(want):
            raise PlanCheckError(f"symbolic shape of '{names[segment.shape_slots[sid][0]]}' is {tuple(got)}, "
                                 f"per-node inference gives {tuple(want)}")
    for slot, got, want in zip(segment.value_slots, values, ref_values):
        if got.shape != want.shape or not np.array_equal(got, want):
            raise PlanCheckError(f"symbolic value of '{names[slot]}' is {got.tolist()}, per-node inference "
                                 f"gives {np.asarray(want).tolist()}")
    for st, got, want in zip(segment.symbolic_steps, prepared, ref_prepared):
        if not _same(got, want):
            raise PlanCheckError(f"{st.node.node.op_type} node '{st.node.node.name}': kernel parameters traced "
                                 f"symbolically are {got!r}, its prepare gives {want!r}")
    if tuple(sizes) != tuple(ref_sizes):
        raise PlanCheckError(f"block sizes {tuple(sizes)} differ from per-node inference {tuple(ref_sizes)}")


def _check_static_prepared(segment: Segment, contexts: dict) -> None:
    """Validation mode: kernel parameters traced as shape-independent equal what ``prepare``
    gives with this signature's concrete shapes."""
    for st in segment.steps + segment.plan_nodes:
        if st.trace.kind != STATIC or st.kernel.prepare is None:
            continue
        want = st.prepare(contexts[st.index])
        if not _same(st.trace.value, want):
            raise PlanCheckError(f"{st.node.node.op_type} node '{st.node.node.name}': kernel parameters traced as "
                                 f"shape-independent are {st.trace.value!r}, its prepare gives {want!r} here")


def _same(a: Any, b: Any) -> bool:
    """Deep equality of prepared arguments (arrays by value and dtype)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and (a.dtype == b.dtype or object in (a.dtype, b.dtype)) and \
            bool(np.array_equal(a.astype(object), b.astype(object)))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, slice) and isinstance(b, slice):
        return _same((a.start, a.stop, a.step), (b.start, b.stop, b.step))
    if type(a).__eq__ is object.__eq__:
        return True  # identity-compared objects (compiled runners, contexts): not checked
    try:
        eq = a == b
    except Exception:  # noqa: BLE001 - objects that cannot compare: not checked
        return True
    return eq if isinstance(eq, (bool, np.bool_)) else True
