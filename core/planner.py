"""Memory planning: lifetimes over the execution order and arena offsets.

The offset assignment follows TFLite's ``SimpleMemoryArena`` / ``ArenaPlanner`` and
Pisarchyk & Lee, "Efficient Memory Management for Deep Neural Net Inference" (2020):
greedy by size with best fit among lifetime-overlapping blocks, and greedy by breadth;
the smaller arena wins. Every plan knows its lower bound (max over steps of the bytes
live at that step), so ``arena_bytes / lower_bound_bytes`` says how close it is.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["ALIGNMENT", "Block", "MemoryPlan", "align", "plan_offsets", "lower_bound", "check_no_overlap"]

#: Byte alignment of every arena block.
ALIGNMENT = 64


def align(nbytes: int) -> int:
    return (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass
class Block:
    """One arena block: ``size`` bytes live from step ``first`` to step ``last`` (inclusive).

    ``slots`` are the tensors that share it (a tensor and its views / in-place results).
    """

    id: int
    size: int
    first: int
    last: int
    slots: list = field(default_factory=list)
    offset: int = -1

    def overlaps(self, other: "Block") -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass
class MemoryPlan:
    blocks: list
    arena_bytes: int
    lower_bound_bytes: int
    naive_bytes: int
    planning_ms: float
    strategy: str


def lower_bound(blocks: list) -> int:
    """Max over steps of the aligned bytes live at that step."""
    if not blocks:
        return 0
    events: dict[int, int] = {}
    for b in blocks:
        events[b.first] = events.get(b.first, 0) + align(b.size)
        events[b.last + 1] = events.get(b.last + 1, 0) - align(b.size)
    live = best = 0
    for t in sorted(events):
        live += events[t]
        best = max(best, live)
    return best


def _place(block: Block, placed: list) -> int:
    """Best-fit offset for ``block`` among the placed blocks whose lifetimes overlap it."""
    size = align(block.size)
    busy = sorted((b.offset, b.offset + align(b.size)) for b in placed if b.overlaps(block))
    best_offset, best_gap = None, None
    cursor = 0
    for start, end in busy:
        gap = start - cursor
        if gap >= size and (best_gap is None or gap < best_gap):
            best_offset, best_gap = cursor, gap
        cursor = max(cursor, end)
    return best_offset if best_offset is not None else cursor


def _greedy(blocks: list, order: list) -> int:
    placed: list = []
    top = 0
    for b in order:
        b.offset = _place(b, placed)
        placed.append(b)
        top = max(top, b.offset + align(b.size))
    return top


def _greedy_by_size(blocks: list) -> dict:
    _greedy(blocks, sorted(blocks, key=lambda b: (-b.size, b.first)))
    return {b.id: b.offset for b in blocks}


def _greedy_by_breadth(blocks: list) -> dict:
    """Steps in decreasing order of live bytes; place that step's blocks, largest first."""
    steps: dict[int, list] = {}
    for b in blocks:
        for t in range(b.first, b.last + 1):
            steps.setdefault(t, []).append(b)
    order: list = []
    seen: set = set()
    for t in sorted(steps, key=lambda t: -sum(align(b.size) for b in steps[t])):
        for b in sorted(steps[t], key=lambda b: -b.size):
            if b.id not in seen:
                seen.add(b.id)
                order.append(b)
    _greedy(blocks, order)
    return {b.id: b.offset for b in blocks}


def plan_offsets(blocks: list) -> MemoryPlan:
    """Assign ``offset`` to every block; the smaller of the two greedy strategies wins."""
    t0 = time.perf_counter()
    best = None
    for name, strategy in (("greedy_by_size", _greedy_by_size), ("greedy_by_breadth", _greedy_by_breadth)):
        offsets = strategy(blocks)
        total = max((offsets[b.id] + align(b.size) for b in blocks), default=0)
        if best is None or total < best[0]:
            best = (total, name, offsets)
    total, name, offsets = best  # type: ignore[misc]
    for b in blocks:
        b.offset = offsets[b.id]
    return MemoryPlan(blocks=blocks, arena_bytes=total, lower_bound_bytes=lower_bound(blocks),
                      naive_bytes=sum(align(b.size) for b in blocks),
                      planning_ms=(time.perf_counter() - t0) * 1e3, strategy=name)


def check_no_overlap(blocks: list) -> list:
    """Pairs of blocks live at the same time whose byte ranges overlap (empty when valid)."""
    bad = []
    ordered = sorted(blocks, key=lambda b: b.offset)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if b.offset >= a.offset + align(a.size):
                break
            if a.overlaps(b) and a.size and b.size:
                bad.append((a, b))
    return bad
