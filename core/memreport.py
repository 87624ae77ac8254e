"""What a memory plan looks like: a per-tensor report (``dynashape plan``) and its plot.

:func:`plan_report` turns a :class:`~dynashape.executor.Plan` into plain data (one entry
per arena-planned tensor: bytes, lifetime, offset, block, how it got there), and
:func:`format_table` / :func:`plot_plan` print and draw it. The plot has the execution
step on x and the arena offset on y, one rectangle per tensor; views are hatched over
their source's block and in-place outputs drawn in their own colour.
"""
from __future__ import annotations

import numpy as np

from .planner import INPLACE, OWN, VIEW, align

__all__ = ["format_table", "plan_report", "plot_plan"]


def _tensor_last_uses(plan) -> dict:
    """slot -> global index of the last step of the program that reads it."""
    last: dict = {}
    for step in plan.program.steps:
        for i in step.inputs:
            last[i] = step.t
    return last


def plan_report(session, plan) -> dict:
    """Plain data of ``plan`` (made by ``session``): totals, blocks and tensors.

    Keys: ``allocator``, ``arena_bytes``, ``lower_bound_bytes``, ``naive_bytes``,
    ``planning_ms`` (lifetimes and offsets), ``ratio`` (arena / lower bound), ``strategy``,
    ``steps``, ``nodes``, ``blocks`` (id, bytes, first, last, offset), ``tensors`` (name,
    dtype, shape, bytes, kind own/view/inplace, block, first = step that writes it, last =
    last step that reads it, offset), ``unplanned`` (tensors written at run time: graph
    outputs and data-dependent shapes).
    """
    mem = plan.memory
    names = plan.program.slot_names
    dtypes = plan.program.sg.dtypes
    n_steps = plan.program.n_steps
    last = _tensor_last_uses(plan)
    outputs = set(session.graph.output_slots)
    pool = plan.allocator == "pool"
    blocks, tensors = [], []
    naive_offset = 0
    planned = set()
    for b in (mem.blocks if mem is not None else []):
        offset = b.offset if pool else naive_offset
        naive_offset += align(b.size)
        blocks.append({"id": b.id, "bytes": b.size, "first": b.first, "last": b.last,
                       "offset": offset if pool else None})
        for s, kind, step in zip(b.slots, b.kinds, b.steps):
            planned.add(s)
            shape, dtype = plan.shape_of(s), dtypes[s]
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize if shape is not None and dtype is not None \
                else b.size
            end = n_steps if s in outputs else max(step, last.get(s, step))
            tensors.append({"name": names[s], "dtype": None if dtype is None else str(dtype),
                            "shape": None if shape is None else [int(d) for d in shape], "bytes": nbytes,
                            "kind": kind, "block": b.id, "first": step, "last": end,
                            "offset": offset if pool else None, "_draw_offset": offset})
    unplanned = sorted({names[o] for st in plan.steps for o in st.outputs if o >= 0 and o not in planned})
    return {"allocator": plan.allocator,
            "arena_bytes": int(mem.arena_bytes) if mem is not None else 0,
            "lower_bound_bytes": int(mem.lower_bound_bytes) if mem is not None else 0,
            "naive_bytes": int(mem.naive_bytes) if mem is not None else 0,
            "planning_ms": float(mem.planning_ms) if mem is not None else 0.0,
            "ratio": float(mem.ratio) if mem is not None else 1.0,
            "strategy": mem.strategy if mem is not None else "",
            "steps": n_steps, "nodes": len(session.graph.nodes),
            "blocks": blocks, "tensors": tensors, "unplanned": unplanned}


def public(report: dict) -> dict:
    """The report without drawing-only fields (for JSON)."""
    out = dict(report)
    out["tensors"] = [{k: v for k, v in t.items() if not k.startswith("_")} for t in report["tensors"]]
    return out


def _fmt_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def format_table(report: dict, max_name: int = 48) -> str:
    """Per-tensor lines (name, kind, bytes, steps, offset, block) and the totals."""
    header = ("tensor", "kind", "bytes", "steps", "offset", "block")
    rows = [(t["name"][:max_name], t["kind"], str(t["bytes"]), f"{t['first']}-{t['last']}",
             "-" if t["offset"] is None else str(t["offset"]), str(t["block"])) for t in report["tensors"]]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    lines = []
    for r in [header] + rows:
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    n_views = sum(t["kind"] == VIEW for t in report["tensors"])
    n_inplace = sum(t["kind"] == INPLACE for t in report["tensors"])
    lines.append("")
    lines.append(f"{len(report['tensors'])} planned tensors in {len(report['blocks'])} blocks "
                 f"({n_views} views, {n_inplace} in place) over {report['steps']} steps; "
                 f"{len(report['unplanned'])} written at run time (graph outputs, data-dependent)")
    lines.append(f"allocator:   {report['allocator']} ({report['strategy']})")
    lines.append(f"arena:       {report['arena_bytes']} bytes ({_fmt_bytes(report['arena_bytes'])})")
    lines.append(f"lower bound: {report['lower_bound_bytes']} bytes ({_fmt_bytes(report['lower_bound_bytes'])}); "
                 f"arena / lower bound = {report['ratio']:.3f}")
    lines.append(f"naive:       {report['naive_bytes']} bytes ({_fmt_bytes(report['naive_bytes'])})")
    lines.append(f"planning:    {report['planning_ms']:.3f} ms")
    return "\n".join(lines)


_COLORS = {OWN: "#4c78a8", INPLACE: "#f58518", VIEW: "#54a24b"}


def plot_plan(report: dict, path: str, title: str | None = None) -> None:
    """Draw the plan to ``path`` (PNG): x = execution step, y = offset, one rectangle per
    tensor (views hatched, in-place outputs orange), lines at the arena size and lower bound.

    Raises:
        ImportError: matplotlib is not installed (``pip install dynashape[plot]``).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    fig, ax = plt.subplots(figsize=(12, 6), dpi=100)
    top = 1
    for b in report["blocks"]:
        off = b["offset"] if b["offset"] is not None else 0
        top = max(top, off + align(b["bytes"]))
    for t in report["tensors"]:
        off = t["_draw_offset"]
        top = max(top, off + align(t["bytes"]))
        kind = t["kind"]
        ax.add_patch(Rectangle((t["first"], off), t["last"] - t["first"] + 1, align(t["bytes"]),
                               facecolor=_COLORS[kind], edgecolor="black", linewidth=0.3,
                               alpha=0.35 if kind == VIEW else 0.8, hatch="//" if kind == VIEW else None))
    if report["allocator"] == "pool":
        ax.axhline(report["arena_bytes"], color="red", linewidth=1, label=f"arena {report['arena_bytes']} B")
        ax.axhline(report["lower_bound_bytes"], color="black", linestyle="--", linewidth=1,
                   label=f"lower bound {report['lower_bound_bytes']} B")
    ax.set_xlim(0, max(1, report["steps"]) + 1)
    ax.set_ylim(0, top * 1.05)
    ax.set_xlabel("execution step")
    ax.set_ylabel("arena offset (bytes)" if report["allocator"] == "pool" else "bytes (one buffer per tensor)")
    ax.set_title(title or f"{report['allocator']} plan: arena {_fmt_bytes(report['arena_bytes'])}, lower bound "
                 f"{_fmt_bytes(report['lower_bound_bytes'])}, naive {_fmt_bytes(report['naive_bytes'])}")
    handles = [Patch(facecolor=_COLORS[OWN], label="tensor"), Patch(facecolor=_COLORS[INPLACE], label="in place"),
               Patch(facecolor=_COLORS[VIEW], hatch="//", alpha=0.35, label="view")]
    line_handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + line_handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
