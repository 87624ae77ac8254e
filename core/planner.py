"""Memory planning: lifetimes over the execution order and arena offsets.

Three small steps, as in TFLite's ``ArenaPlanner`` / ``SimpleMemoryArena``:

1. :func:`lifetimes` -- one :class:`Block` per buffer a step writes, live from the step that
   writes it to the last step that reads it. A view output (the op declares ``aliases``)
   joins its source's block; an output computed in place (the kernel declares
   ``may_inplace``) takes over the block of an input that dies at that step.
2. :func:`order_by_size` / :func:`order_by_breadth` -- the order in which blocks are placed.
3. :func:`place` -- best-fit offsets in that order among the lifetime-overlapping blocks
   (Pisarchyk & Lee, "Efficient Memory Management for Deep Neural Net Inference", 2020).

:func:`plan_offsets` runs both orders and keeps the smaller arena (greedy by breadth is
skipped when greedy by size already reaches the lower bound). Every plan knows its lower
bound (max over steps of the bytes live at that step), the naive total (every block its
own buffer) and how long planning took.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

__all__ = [
    "ALIGNMENT",
    "INPLACE",
    "OWN",
    "VIEW",
    "Block",
    "MemoryPlan",
    "StepSpec",
    "align",
    "check_no_overlap",
    "conflicts",
    "last_uses",
    "lifetimes",
    "lower_bound",
    "naive_bytes",
    "order_by_breadth",
    "order_by_size",
    "place",
    "plan_offsets",
    "order_by_offset",
    "write_layout",
]

#: Byte alignment of every arena block.
ALIGNMENT = 64

#: How a tensor came to live in a block.
OWN, VIEW, INPLACE = "own", "view", "inplace"


def align(nbytes: int) -> int:
    return (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass(eq=False)
class Block:
    """One arena block: ``size`` bytes live from step ``first`` to step ``last`` (inclusive).

    ``slots`` are the tensors that share it: the one that made it, its views and the
    outputs computed in place over it; ``kinds[i]`` (``own``/``view``/``inplace``) and
    ``steps[i]`` say how and at which step ``slots[i]`` joined.
    """

    id: int
    size: int
    first: int
    last: int
    slots: list = field(default_factory=list)
    offset: int = -1
    kinds: list = field(default_factory=list)
    steps: list = field(default_factory=list)

    def overlaps(self, other: Block) -> bool:
        return self.first <= other.last and other.first <= self.last

    def join(self, slot: int, kind: str, step: int, last: int) -> None:
        self.slots.append(slot)
        self.kinds.append(kind)
        self.steps.append(step)
        self.last = max(self.last, last)


@dataclass(eq=False)
class MemoryPlan:
    blocks: list
    arena_bytes: int
    lower_bound_bytes: int
    naive_bytes: int
    planning_ms: float
    strategy: str

    @property
    def ratio(self) -> float:
        """arena / lower bound (1.0 for an empty plan)."""
        return self.arena_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0


@dataclass(eq=False)
class StepSpec:
    """What the planner needs to know of one step.

    ``sizes[k]``: bytes of output ``k`` when it is arena-planned, else None (a graph output,
    an unknown or empty shape). ``aliases``: ``{output: input index}`` of view outputs.
    ``inplace``: ``(output, input index)`` pairs the kernel may compute in place, already
    limited to inputs of the output's shape and dtype.
    """

    inputs: tuple
    outputs: tuple
    sizes: tuple
    aliases: dict = field(default_factory=dict)
    inplace: tuple = ()


# 1. lifetimes ------------------------------------------------------------------------

def last_uses(steps: Sequence[StepSpec], keep: Sequence[int] = ()) -> dict:
    """slot -> index of the last step that reads it; ``keep`` (graph outputs) live to the end."""
    last: dict = {}
    for t, st in enumerate(steps):
        for i in st.inputs:
            last[i] = t
    end = len(steps)
    for s in keep:
        last[s] = end
    return last


def lifetimes(steps: Sequence[StepSpec], keep: Sequence[int] = (), inplace: bool = True) -> list:
    """Blocks of the buffers the steps write, with views and in-place outputs merged.

    ``keep``: slots that must outlive the last step (graph outputs; a view of the arena
    that is a graph output keeps its block to the end, the session copies it out).
    An output takes over input ``i``'s block (in place) when the kernel allows the pair,
    the block dies at this step (no later reader of any of its tensors), the sizes are
    equal, no other output took it over at this step, and no other input of the step lies
    in the block unless the step has just two inputs (an elementwise binary op reads
    both at the same index it writes).
    """
    last = last_uses(steps, keep)
    owner: dict = {}
    blocks: list = []
    for t, st in enumerate(steps):
        taken: set = set()
        present = [i for i in st.inputs if i >= 0]
        for k, o in enumerate(st.outputs):
            if o < 0:
                continue
            if k in st.aliases:
                a = st.aliases[k]
                src = st.inputs[a] if a < len(st.inputs) else -1
                b = owner.get(src)
                if b is not None:
                    b.join(o, VIEW, t, last.get(o, t))
                    owner[o] = b
                continue
            size = st.sizes[k] if k < len(st.sizes) else None
            if size is None:
                continue
            b = _inplace_block(st, k, size, t, owner, taken, present) if inplace else None
            if b is not None:
                taken.add(b.id)
                b.join(o, INPLACE, t, last.get(o, t))
            else:
                b = Block(len(blocks), size, t, max(t, last.get(o, t)), [o], kinds=[OWN], steps=[t])
                blocks.append(b)
            owner[o] = b
    return blocks


def _inplace_block(st: StepSpec, k: int, size: int, t: int, owner: dict, taken: set,
                   present: list) -> Block | None:
    for kk, i in st.inplace:
        if kk != k or i >= len(st.inputs):
            continue
        b = owner.get(st.inputs[i])
        if b is None or b.last != t or b.size != size or b.id in taken:
            continue
        shared = sum(1 for j in present if owner.get(j) is b)
        if shared > 1 and len(present) > 2:
            continue
        return b
    return None


# 2. orders ----------------------------------------------------------------------------

def order_by_size(blocks: Sequence[Block]) -> list:
    """Largest first (ties: earliest first)."""
    return sorted(blocks, key=lambda b: (-b.size, b.first, b.id))


def order_by_breadth(blocks: Sequence[Block]) -> list:
    """Steps in decreasing order of live bytes; at each, its not yet ordered blocks, largest first."""
    if not blocks:
        return []
    first = min(b.first for b in blocks)
    n = max(b.last for b in blocks) - first + 1
    live = [0] * (n + 1)
    for b in blocks:
        live[b.first - first] += align(b.size)
        live[b.last - first + 1] -= align(b.size)
    at: list = [[] for _ in range(n)]
    for b in order_by_size(blocks):
        for t in range(b.first - first, b.last - first + 1):
            at[t].append(b)
    acc = 0
    for t in range(n):
        acc += live[t]
        live[t] = acc
    order: list = []
    seen: set = set()
    for t in sorted(range(n), key=lambda t: -live[t]):
        for b in at[t]:
            if b.id not in seen:
                seen.add(b.id)
                order.append(b)
    return order


# 3. placement -------------------------------------------------------------------------

def conflicts(blocks: Sequence[Block]) -> dict:
    """block id -> ids of the blocks whose lifetimes overlap it (a sweep over first steps)."""
    nbrs: dict = {b.id: [] for b in blocks}
    active: list = []
    for b in sorted(blocks, key=lambda b: b.first):
        active = [a for a in active if a.last >= b.first]
        ids = nbrs[b.id]
        for a in active:
            ids.append(a.id)
            nbrs[a.id].append(b.id)
        active.append(b)
    return nbrs


def place(order: Sequence[Block], nbrs: dict) -> tuple:
    """Best-fit offsets in ``order``: the smallest gap that fits among the already placed
    blocks whose lifetimes overlap, else on top of them. Returns ({id: offset}, arena bytes)."""
    offset: dict = {}
    busy_of: dict = {b.id: [] for b in order}   # id -> (offset, end) of its placed neighbours
    top = 0
    for b in order:
        size = align(b.size)
        busy = busy_of[b.id]
        busy.sort()
        best, best_gap, cursor = -1, -1, 0
        for start, stop in busy:
            gap = start - cursor
            if gap >= size and (best < 0 or gap < best_gap):
                best, best_gap = cursor, gap
                if gap == size:
                    break
            if stop > cursor:  # noqa: PLR1730 - faster than max() in this loop
                cursor = stop
        off = best if best >= 0 else cursor
        offset[b.id] = off
        span = (off, off + size)
        for n in nbrs[b.id]:
            busy_of[n].append(span)
        if off + size > top:  # noqa: PLR1730
            top = off + size
    return offset, top


def lower_bound(blocks: Sequence[Block], sizes: Optional[Sequence[int]] = None) -> int:
    """Max over steps of the aligned bytes live at that step (no arena can be smaller);
    ``sizes`` (indexed like ``blocks``) replace the blocks' own sizes when given."""
    if not blocks:
        return 0
    events: dict = {}
    for b, n in zip(blocks, sizes if sizes is not None else (b.size for b in blocks)):
        events[b.first] = events.get(b.first, 0) + align(n)
        events[b.last + 1] = events.get(b.last + 1, 0) - align(n)
    live = best = 0
    for t in sorted(events):
        live += events[t]
        best = max(best, live)
    return best


def naive_bytes(blocks: Sequence[Block]) -> int:
    """Bytes of one buffer per tensor (views excluded: they never copy)."""
    return sum(align(b.size) * sum(1 for k in b.kinds if k != VIEW) for b in blocks)


def improve(order: list, offsets: dict, total: int, bound: int, nbrs: dict, max_passes: int) -> tuple:
    """Local search on a greedy order: a block that reaches the top of the arena is moved to
    the front of the order (placed first, it takes the lowest free offset and the others fit
    around it) while that lowers the top. Returns (offsets, arena bytes, blocks moved)."""
    moved = 0
    passes = 0
    while total > bound and passes < max_passes:
        top = [b for b in order if offsets[b.id] + align(b.size) == total]
        better = False
        for b in top:
            if passes >= max_passes:
                break
            passes += 1
            trial = [b] + [x for x in order if x is not b]
            offs, t = place(trial, nbrs)
            if t < total:
                order, offsets, total, better = trial, offs, t, True
                moved += 1
                break
        if not better:
            break
    return offsets, total, moved


def plan_offsets(blocks: list, max_passes: int = 0) -> MemoryPlan:
    """Assign ``offset`` to every block; the smaller of greedy by size and greedy by breadth wins,
    then (when above the lower bound) up to ``max_passes`` placements of :func:`improve`
    (0: as many as keep planning cheap, about 4000 block placements)."""
    if max_passes <= 0:
        max_passes = max(2, min(16, 4000 // (len(blocks) + 1)))
    t0 = time.perf_counter()
    bound = lower_bound(blocks)
    nbrs = conflicts(blocks)
    offsets, total = place(order_by_size(blocks), nbrs)
    order, name = None, "greedy_by_size"
    if total > bound:
        order = order_by_size(blocks)
        breadth = order_by_breadth(blocks)
        offsets2, total2 = place(breadth, nbrs)
        if total2 < total:
            offsets, total, name, order = offsets2, total2, "greedy_by_breadth", breadth
    if total > bound:
        offsets, total, moved = improve(order, offsets, total, bound, nbrs, max_passes)
        if moved:
            name += f"+{moved}"
    for b in blocks:
        b.offset = offsets[b.id]
    return MemoryPlan(blocks=blocks, arena_bytes=total, lower_bound_bytes=bound,
                      naive_bytes=naive_bytes(blocks),
                      planning_ms=(time.perf_counter() - t0) * 1e3, strategy=name)


def check_no_overlap(blocks: Sequence[Block]) -> list:
    """Pairs of blocks live at the same time whose byte ranges overlap (empty when valid)."""
    bad = []
    ordered = sorted((b for b in blocks if b.size), key=lambda b: b.offset)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if b.offset >= a.offset + align(a.size):
                break
            if a.overlaps(b):
                bad.append((a, b))
    return bad


# 4. a placement order kept across signatures ---------------------------------------------

def order_by_offset(blocks: Sequence[Block]) -> list:
    """The blocks sorted by offset: placed in this order, each on top of the earlier blocks
    whose lifetimes overlap it, they land at or below the offsets they have now."""
    return sorted(blocks, key=lambda b: (b.offset, b.id))


def write_layout(writer, blocks: Sequence[Block], order: Sequence[int]) -> None:
    """Emit ``def layout(N)``: for the byte sizes ``N`` (indexed like ``blocks``) of one
    signature, the offsets of ``blocks`` placed in ``order`` (indices into ``blocks``), each
    block above the earlier-placed blocks whose lifetimes overlap it, with the arena size and
    the lower bound (max over steps of aligned live bytes).

    Always valid whatever the sizes; the caller re-places from scratch when the arena
    exceeds the lower bound by too much. Returns ``(offsets, arena bytes, lower bound)``.
    """
    index = {b.id: k for k, b in enumerate(blocks)}
    writer.emit("def layout(N):", 0)
    for k in range(len(blocks)):
        writer.emit(f"a{k} = (N[{k}] + {ALIGNMENT - 1}) & {-ALIGNMENT}")
    placed: list = []
    for k in order:
        b = blocks[k]
        below = [f"t{index[p.id]}" for p in _highest([p for p in placed if p.overlaps(b)])]
        writer.emit(f"o{k} = " + ("0" if not below else below[0] if len(below) == 1 else f"max({', '.join(below)})"))
        writer.emit(f"t{k} = o{k} + a{k}")
        placed.append(b)
    ends = [f"t{index[p.id]}" for p in _highest(placed)]
    writer.emit("top = " + ("0" if not ends else ends[0] if len(ends) == 1 else f"max({', '.join(ends)})"))
    starts: dict = {}
    stops: dict = {}
    for k, b in enumerate(blocks):
        starts.setdefault(b.first, []).append(f"a{k}")
        stops.setdefault(b.last + 1, []).append(f"a{k}")
    writer.emit("live = bound = 0")
    for t in sorted(set(starts) | set(stops)):
        gone = stops.get(t, [])
        new = starts.get(t, [])
        if gone:
            writer.emit(f"live -= {' + '.join(gone)}")
        if new:
            writer.emit(f"live += {' + '.join(new)}")
            writer.emit("if live > bound: bound = live")
    offsets = "".join(f"o{k}, " for k in range(len(blocks)))
    writer.emit(f"return ({offsets}), top, bound")


def _highest(placed: Sequence[Block]) -> list:
    """The blocks of ``placed`` (in placement order) whose end can be the highest: a block
    placed later that overlaps an earlier one sits above it, so it ends higher whatever
    the sizes, and the earlier one drops out of any max over both."""
    return [p for j, p in enumerate(placed) if not any(q.overlaps(p) for q in placed[j + 1:])]
