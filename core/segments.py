"""The records of a compiled program: a step (one node that runs, its kernel and where its
outputs live), the segment (steps up to a run of data-dependent nodes, and what planning
them needs), and the output placements (:data:`NONE`, :data:`ARENA`, :data:`FRESH`,
:data:`FBLOCK`). :mod:`dynashape.program` fills them; :mod:`dynashape.emit` writes their
generated functions; :mod:`dynashape.plan` and :mod:`dynashape.executor` read them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional

import numpy as np

from .graph import PreparedNode
from .node import PrepareTrace

__all__ = ["Step", "Segment", "Calls", "BindingNode", "OutSpec", "NONE", "ARENA", "FRESH", "FBLOCK"]

#: Where a step's output lives: not written / a view the kernel returns (``NONE``), a block of
#: the segment's arena (``ARENA``), a fresh array of each run (``FRESH``: graph outputs, object
#: dtypes), a per-run block shared by in-place outputs and views that reach a graph output
#: (``FBLOCK``).
NONE, ARENA, FRESH, FBLOCK = "none", "arena", "fresh", "fblock"


class OutSpec(NamedTuple):
    kind: str = NONE
    sid: int = -1              # shape id in the segment's S
    dtype: Optional[np.dtype] = None
    ref: int = -1              # ARENA: array index of the bind function; FBLOCK: block id
    owner: bool = False        # FBLOCK: this output allocates the block
    reshape: bool = False      # FBLOCK: a member whose shape differs from the owner's (in place over a view)


@dataclass(eq=False)
class Step:
    """One node that runs: at every run (a step) or once per signature (a plan node)."""

    index: int                 # node index in the prepared graph
    node: PreparedNode
    kernel: Any
    inputs: tuple
    outputs: tuple
    trace: PrepareTrace
    outs: tuple = ()           # OutSpec per output
    qid: int = -1              # index of its symbolic prepared argument in sig's Q
    in_sids: tuple = ()        # shape ids of inputs/outputs (concrete preparation, validation)
    out_sids: tuple = ()
    t: int = -1                # global step index (lifetimes), -1 for plan nodes
    scratch: tuple = ()        # slots of the kernel's scratch buffers (after the graph's own slots)
    prepacked: Any = None      # what the kernel's prepack made of its constant inputs (None: nothing)

    def prepare(self, ctx):
        """The kernel's prepared argument for ``ctx`` (``ctx.prepacked`` set to this step's)."""
        ctx.prepacked = self.prepacked
        return self.kernel.prepare(ctx) if self.kernel.prepare is not None else ctx


@dataclass(eq=False)
class Calls:
    """A generated function calling steps' kernels in order (a segment's ``run`` over its
    steps, its ``run_plan`` over its plan nodes), and how each step's prepared argument is made
    for a signature: shared where its preparation traced shape-independent, taken from
    ``sig`` where it traced symbolic, from ``prepare`` with concrete shapes otherwise."""

    fn: Optional[Callable] = None
    lines: dict = field(default_factory=dict)      # line of the generated source -> step position
    static: list = field(default_factory=list)     # step position -> shape-independent argument, else None
    symbolic: list = field(default_factory=list)   # (step position, index in sig's prepared arguments)
    concrete: list = field(default_factory=list)   # step positions prepared per signature


@dataclass(eq=False)
class BindingNode:
    """A node whose output shapes depend on data: inferred and run when the run reaches it."""

    index: int                 # node index in the prepared graph
    inputs: tuple = ()         # slots its kernel receives: its inputs, then its subgraphs' outer values
    kernel: Any = None         # the kernel chosen when compiling (None: chosen at each run)
    prepared: Any = None       # its shape-independent prepared argument (None: made at each run)


@dataclass(eq=False)
class Segment:
    """Steps up to and including a run of BINDING nodes, and what planning them needs."""

    index: int
    symbols: tuple = ()                # names of the symbols known here, in argument order
    nodes: list = field(default_factory=list)       # node indices positioned here
    steps: list = field(default_factory=list)       # Steps run each run
    plan_nodes: list = field(default_factory=list)  # Steps run once per signature
    binding: list = field(default_factory=list)     # BindingNodes, run at the end
    binds: list = field(default_factory=list)       # (slot, axis, symbol) bound by them
    checks: list = field(default_factory=list)      # (slot, rank, ((axis, int dim), ...)) to verify
    shapes: list = field(default_factory=list)      # sid -> symbolic shape
    shape_slots: list = field(default_factory=list) # sid -> slots with that shape
    shaped: set = field(default_factory=set)        # slots already in shape_slots
    shape_ids: dict = field(default_factory=dict)   # symbolic shape -> sid
    arena_arrays: list = field(default_factory=list)  # (sid, dtype, block index) per array bind makes
    value_slots: list = field(default_factory=list) # vid -> slot of a folded value made per signature
    symbolic_steps: list = field(default_factory=list)  # qid -> Step
    blocks: list = field(default_factory=list)      # arena blocks (symbolic sizes)
    sig: Optional[Callable] = None
    run: Calls = field(default_factory=Calls)       # over steps
    run_plan: Calls = field(default_factory=Calls)  # over plan_nodes
    bind: Optional[Callable] = None
    plan_outputs: list = field(default_factory=list)          # slots the plan nodes write
    layouts: list = field(default_factory=list)     # [(order, layout fn)], most recent first
    source: dict = field(default_factory=dict)
    fresh_specs: Optional[list] = None  # (step, OutSpec) of the outputs allocated outside the arena

    @property
    def empty(self) -> bool:
        return not (self.steps or self.plan_nodes or self.value_slots or self.binding)
