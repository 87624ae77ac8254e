"""What a memory plan looks like: a per-tensor report (``dynashape plan``) and its plot.

:func:`plan_report` turns a :class:`~dynashape.executor.Plan` into plain data (one entry
per arena-planned tensor: bytes, lifetime, offset, block, how it got there), and
:func:`format_table` / :func:`plot_plan` print and draw it. The plot has the execution
step on x and the arena offset (MiB) on y, one rectangle per tensor, the largest named;
views are hatched over their source's block and in-place outputs drawn in their own
colour. Its format (PNG, SVG, PDF) follows the file extension.
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from .planner import INPLACE, OWN, VIEW, align

__all__ = ["PLOT_FORMATS", "format_table", "largest_tensors", "plan_figure", "plan_report", "plot_format",
           "plot_plan", "plot_title"]


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
    last step that reads it, offset), ``unplanned`` (tensors written at run time) and
    ``unplanned_kinds`` (how many of them have a ``data-dependent`` shape (as ``inspect``
    counts them), are other graph outputs, or are ``kernel-made``: a kernel returning an
    array of its own); ``later`` (the tensors from the first data-dependent node on, whose
    plans are made when a run gets there) and ``binding_ops`` (those nodes' op types).
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
    unplanned_slots = {o for st in plan.steps for o in st.outputs if o >= 0 and o not in planned}
    unplanned = sorted(names[o] for o in unplanned_slots)
    sg = plan.program.sg
    kinds = {"data-dependent": 0, "graph output": 0, "kernel-made": 0}
    for o in unplanned_slots:
        kinds["data-dependent" if sg.is_data_dependent(o) else "graph output" if o in outputs else "kernel-made"] += 1
    return {"allocator": plan.allocator,
            "arena_bytes": int(mem.arena_bytes) if mem is not None else 0,
            "lower_bound_bytes": int(mem.lower_bound_bytes) if mem is not None else 0,
            "naive_bytes": int(mem.naive_bytes) if mem is not None else 0,
            "planning_ms": float(mem.planning_ms) if mem is not None else 0.0,
            "ratio": float(mem.ratio) if mem is not None else 1.0,
            "strategy": mem.strategy if mem is not None else "",
            "steps": n_steps, "nodes": len(session.graph.nodes),
            "blocks": blocks, "tensors": tensors, "unplanned": unplanned, "unplanned_kinds": kinds,
            **_later(plan)}


def _later(plan) -> dict:
    """The tensors a plan of the first segment leaves to the plans made at run time."""
    program, seg = plan.program, plan.segment
    pg = program.pg
    slots = [o for b in seg.binding for o in pg.nodes[b.index].outputs if o >= 0]
    for later in program.segments[seg.index + 1:]:
        slots.extend(o for st in later.steps for o in st.outputs if o >= 0)
        slots.extend(o for b in later.binding for o in pg.nodes[b.index].outputs if o >= 0)
    ops = sorted({pg.nodes[b.index].node.op_type for s_ in program.segments[seg.index:] for b in s_.binding})
    return {"later": [program.slot_names[o] for o in dict.fromkeys(slots)], "binding_ops": ops}


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


def short_name(name: str, width: int) -> str:
    """``name`` in at most ``width`` characters: a longer one keeps its end (where an exporter's
    path names the tensor: ``.../layer.3/attention/LayerNorm_output_0``) after ``...``."""
    return name if len(name) <= width else "..." + name[len(name) - width + 3:]


def format_table(report: dict, max_name: int = 96) -> str:
    """Per-tensor lines (name, kind, bytes, steps, offset, block) and the totals; a name
    longer than ``max_name`` keeps its end (:func:`short_name`)."""
    header = ("tensor", "kind", "bytes", "steps", "offset", "block")
    rows = [(short_name(t["name"], max_name), t["kind"], str(t["bytes"]), f"{t['first']}-{t['last']}",
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
                 f"{_unplanned_text(report)}" + _later_text(report))
    lines.append(f"allocator:   {report['allocator']} ({report['strategy']})")
    lines.append(f"arena:       {report['arena_bytes']} bytes ({_fmt_bytes(report['arena_bytes'])})")
    lines.append(f"lower bound: {report['lower_bound_bytes']} bytes ({_fmt_bytes(report['lower_bound_bytes'])}); "
                 f"arena / lower bound = {report['ratio']:.3f}")
    lines.append(f"naive:       {report['naive_bytes']} bytes ({_fmt_bytes(report['naive_bytes'])})")
    lines.append(f"planning:    {report['planning_ms']:.3f} ms")
    return "\n".join(lines)


def _later_text(report: dict) -> str:
    later = report.get("later") or []
    if not later:
        return ""
    return (f"; {len(later)} more from the first data-dependent node on ({', '.join(report['binding_ops'])}), "
            "planned when a run gets there")


def _unplanned_text(report: dict) -> str:
    """``4 written at run time (1 data-dependent, 2 graph outputs, 1 kernel-made)``."""
    kinds = report.get("unplanned_kinds") or {}
    parts = ", ".join(f"{n} {k}{'s' if k == 'graph output' and n != 1 else ''}" for k, n in kinds.items())
    return f"{len(report['unplanned'])} written at run time" + (f" ({parts})" if parts else "")


_COLORS = {OWN: "#4c78a8", INPLACE: "#f58518", VIEW: "#54a24b"}
_KIND_LABELS = {OWN: "tensor", INPLACE: "in place", VIEW: "view"}
MIB = float(1 << 20)
#: Plot file formats, chosen by the file extension.
PLOT_FORMATS = ("png", "svg", "pdf")


def plot_format(path: str) -> str:
    """The plot format of ``path`` from its extension (``png``, ``svg`` or ``pdf``, any case).

    Raises:
        ValueError: another or no extension (the message names the supported ones).
    """
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in PLOT_FORMATS:
        raise ValueError(f"the plot format comes from the file extension: use .png, .svg or .pdf, "
                         f"got {os.path.basename(path)!r}")
    return ext


def plot_title(report: dict, name: str = "", inputs: Optional[dict] = None) -> str:
    """Two lines: ``name: allocator plan for x[8, 16], ...`` and the arena / lower bound /
    naive totals. ``inputs`` maps input names to shapes (lists of ints)."""
    head = f"{name}: " if name else ""
    shapes = ", ".join(f"{k}[{', '.join(map(str, v))}]" for k, v in (inputs or {}).items())
    head += f"{report['allocator']} plan" + (f" for {shapes}" if shapes else "")
    return (f"{head}\narena {_fmt_bytes(report['arena_bytes'])}, lower bound "
            f"{_fmt_bytes(report['lower_bound_bytes'])}, naive {_fmt_bytes(report['naive_bytes'])}")


def _rect(t: dict) -> tuple[float, float, float, float]:
    """(x, y, width, height) of a tensor's rectangle: steps on x, MiB on y."""
    return t["first"], t["_draw_offset"] / MIB, t["last"] - t["first"] + 1, align(t["bytes"]) / MIB


def _draw_tensors(ax, tensors: list) -> float:
    """One rectangle per tensor (views hatched, in-place outputs orange); returns the top in MiB."""
    from matplotlib.patches import Rectangle

    top = 0.0
    for t in tensors:
        x, y, w, h = _rect(t)
        top = max(top, y + h)
        kind = t["kind"]
        ax.add_patch(Rectangle((x, y), w, h, facecolor=_COLORS[kind], edgecolor="black", linewidth=0.3,
                               alpha=0.35 if kind == VIEW else 0.8, hatch="//" if kind == VIEW else None))
    return top


def largest_tensors(report: dict, n: int = 8) -> list[dict]:
    """The ``n`` non-view tensors with the largest rectangles (bytes x steps), largest first."""
    own = [t for t in report["tensors"] if t["kind"] != VIEW]
    return sorted(own, key=lambda t: -(align(t["bytes"]) * (t["last"] - t["first"] + 1)))[:n]


def _label_largest(ax, report: dict, n: int, max_name: int = 28) -> None:
    """Each of the largest rectangles gets its tensor name, centred (clipped to the axes)."""
    for t in largest_tensors(report, n):
        x, y, w, h = _rect(t)
        name = short_name(t["name"], max_name)
        ax.text(x + w / 2, y + h / 2, name, ha="center", va="center", fontsize=7, clip_on=True)


def _legend(ax, report: dict) -> None:
    """Legend entries for the tensor kinds drawn and, for a pool plan, the two total lines."""
    from matplotlib.patches import Patch

    kinds = {t["kind"] for t in report["tensors"]}
    handles = [Patch(facecolor=_COLORS[k], hatch="//" if k == VIEW else None, alpha=0.35 if k == VIEW else 0.8,
                     label=_KIND_LABELS[k]) for k in (OWN, INPLACE, VIEW) if k in kinds]
    line_handles, _ = ax.get_legend_handles_labels()
    if handles or line_handles:
        ax.legend(handles=handles + line_handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)


def plan_figure(report: dict, title: Optional[str] = None, n_labels: int = 8):
    """The plan as a matplotlib Figure: x = execution step, y = arena offset in MiB (plain
    ticks, no offset multiplier), one rectangle per tensor, the ``n_labels`` largest named,
    lines at the arena size and lower bound (pool), legend for the kinds present.

    Raises:
        ImportError: matplotlib is not installed (``pip install dynashape[plot]``).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    fig, ax = plt.subplots(figsize=(12, 6), dpi=100)
    top = _draw_tensors(ax, report["tensors"])
    if report["allocator"] == "pool":
        ax.axhline(report["arena_bytes"] / MIB, color="red", linewidth=1,
                   label=f"arena {_fmt_bytes(report['arena_bytes'])}")
        ax.axhline(report["lower_bound_bytes"] / MIB, color="black", linestyle="--", linewidth=1,
                   label=f"lower bound {_fmt_bytes(report['lower_bound_bytes'])}")
        top = max(top, report["arena_bytes"] / MIB)
    _label_largest(ax, report, n_labels)
    ax.set_xlim(0, max(1, report["steps"]) + 1)
    ax.set_ylim(0, (top or 1.0 / MIB) * 1.05)
    formatter = ScalarFormatter(useOffset=False)
    formatter.set_scientific(False)
    ax.yaxis.set_major_formatter(formatter)
    ax.set_xlabel("execution step")
    ax.set_ylabel("arena offset (MiB)" if report["allocator"] == "pool" else "MiB (one buffer per tensor)")
    ax.set_title(title or plot_title(report), fontsize=10)
    _legend(ax, report)
    fig.tight_layout()
    return fig


def plot_plan(report: dict, path: str, title: Optional[str] = None, n_labels: int = 8):
    """Draw the plan (:func:`plan_figure`) to ``path``, in the format of its extension
    (:data:`PLOT_FORMATS`); returns the (closed) Figure.

    Raises:
        ValueError: the extension is not png, svg or pdf.
        OSError: ``path`` cannot be written.
        ImportError: matplotlib is not installed (``pip install dynashape[plot]``).
    """
    fmt = plot_format(path)
    fig = plan_figure(report, title, n_labels)
    import matplotlib.pyplot as plt

    try:
        fig.savefig(path, format=fmt)
    finally:
        plt.close(fig)
    return fig
