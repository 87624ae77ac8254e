"""Helpers for writing ``infer_shape`` functions that work on int and symbolic dims.

Every helper takes the :class:`~dynashape.records.InferContext` first so that a broken
rule is reported through ``ctx.fail`` with the node's name and input shapes.
"""
from __future__ import annotations

from typing import Iterable, Optional

import numpy as np

from .records import InferContext, Shape
from .symbolic import BroadcastError, Dim, dim_broadcast, dim_max, dim_min

__all__ = [
    "broadcast_shapes",
    "broadcast_dim",
    "dim_broadcast",
    "check_unidirectional",
    "normalize_axis",
    "normalize_axes",
    "numel",
    "value_list",
    "check_dims_equal",
    "dim_max",
    "dim_min",
    "is_known",
    "pool_output_dim",
    "check_vector_inputs",
    "require",
]


def is_known(d) -> bool:
    """True for a concrete int dim."""
    return isinstance(d, int)


def numel(shape: Iterable[Dim]) -> Dim:
    """Product of the dims (1 for a scalar shape)."""
    out: Dim = 1
    for d in shape:
        out = out * d
    return out


def broadcast_dim(ctx: InferContext, a: Dim, b: Dim) -> Dim:
    """Multidirectional broadcast of two dims, ONNX's rule (onnx/docs/Broadcasting.md):
    1 vs n is n, n vs 1 is n, equal dims are kept (0 vs 1 is 0), anything else fails with
    BroadcastMismatch.

    Dims that cannot be decided now (a symbol against anything but 1 or itself) give the
    expression ``broadcast(a, b)`` (:func:`dynashape.symbolic.dim_broadcast`); a plan
    evaluates it with the same rule, and a mismatch found then is reported by the node's
    concrete inference.
    """
    return _broadcast_or_fail(ctx, (a, b), "")


def broadcast_shapes(ctx: InferContext, *shapes: Shape) -> Shape:
    """Multidirectional broadcast of the given shapes (onnx/docs/Broadcasting.md): shapes
    are right-aligned, missing leading dims count as 1, each output dim is the broadcast
    of its column (:func:`broadcast_dim`)."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        column = [s[i - (rank - len(s))] for s in shapes if i >= rank - len(s)]
        out.append(_broadcast_or_fail(ctx, column, f" at output axis {i}"))
    return tuple(out)


def _broadcast_or_fail(ctx: InferContext, dims, where: str) -> Dim:
    try:
        return dim_broadcast(*dims)
    except BroadcastError as exc:
        ctx.fail(f"dims {exc.a} and {exc.b}{where} cannot be broadcast: they must be equal or "
                 "one of them 1", kind="BroadcastMismatch")


def check_unidirectional(ctx: InferContext, source: Shape, target: Shape, what: str) -> None:
    """Fail unless ``source`` broadcasts unidirectionally to ``target`` (ONNX
    Broadcasting.md: right-aligned, rank <= target's, each dim 1 or equal to the target's).

    A symbolic dim that cannot be judged now is assumed to broadcast (``ctx.assume``):
    every new signature checks it, and one that breaks it fails here with concrete dims.
    """
    if len(source) > len(target):
        ctx.fail(f"{what} has rank {len(source)} > rank {len(target)} of {tuple(target)}; {what} must "
                 "be unidirectionally broadcastable to it", kind="BroadcastMismatch")
    for j, (d, t) in enumerate(zip(reversed(source), reversed(target))):
        if not (isinstance(d, int) and isinstance(t, int)):
            if not (d == 1 or _same_dim(d, t)):
                ctx.assume(_broadcast_or_fail(ctx, (d, t), ""), "==", t)
            continue
        if d != 1 and d != t:
            want = "1" if t == 1 else f"1 or {t}"
            ctx.fail(f"{what} of shape {tuple(source)} cannot be broadcast to {tuple(target)}: its dim "
                     f"{len(source) - 1 - j} is {d}, expected {want} ({what} must be "
                     "unidirectionally broadcastable)", kind="BroadcastMismatch")


def normalize_axis(ctx: InferContext, axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[-rank, rank)`` mapped to ``[0, rank)``; fails otherwise."""
    axis = int(axis)
    if not -rank <= axis < rank:
        ctx.fail(f"{what} {axis} is out of range for rank {rank} (valid: [{-rank}, {rank - 1}])",
                 kind="AxisOutOfRange")
    return axis + rank if axis < 0 else axis


def normalize_axes(ctx: InferContext, axes: Iterable[int], rank: int, what: str = "axes") -> list[int]:
    """Each axis normalised; duplicates are an error."""
    out = [normalize_axis(ctx, a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        ctx.fail(f"{what} {list(axes)} contain duplicates", kind="DuplicateAxes")
    return out


def value_list(value: Optional[np.ndarray]) -> Optional[list]:
    """A host-known value as a flat Python list (ints/floats, or symbolic dims)."""
    if value is None:
        return None
    return np.asarray(value).reshape(-1).tolist()


def check_vector_inputs(ctx: InferContext, names: dict) -> None:
    """Fail (``InvalidRank``) when one of the given inputs (index -> its spec name) is
    present with a rank other than 1: shape tensors such as Reshape's ``shape``, Slice's
    ``starts``, Tile's ``repeats`` are 1-D in the spec (onnxruntime refuses others)."""
    for i, name in names.items():
        shape = ctx.shape(i) if ctx.has_input(i) else None
        if shape is not None and len(shape) != 1:
            ctx.fail(f"input {i} '{name}' must be a 1-D tensor, got shape ({', '.join(map(str, shape))})",
                     kind="InvalidRank")


def require(ctx: InferContext, a: Dim, relation: str, b: Dim, message: str, kind: str) -> None:
    """A rule's condition on dims that holds for every binding: with ints it is decided here
    and a false one fails (``ctx.fail(message, kind=kind)``); with a symbolic side it is
    recorded as a guard (``ctx.assume``) that every new signature evaluates, and a signature
    that breaks it is inferred per node, where the ints make this call fail with the same
    error. ``relation``: ``==``, ``!=``, ``>=`` or ``>``.

    Write ``require(ctx, c % 4, "==", 0, ...)`` rather than ``if isinstance(c, int) and c % 4:
    ctx.fail(...)``, which checks nothing once ``c`` is symbolic (a wrong shape, then garbage,
    for an input that should have been refused).
    """
    if not ctx.assume(a, relation, b):
        ctx.fail(message, kind=kind)


def check_dims_equal(ctx: InferContext, a: Dim, b: Dim, what: str) -> Dim:
    """Fail when two dims differ (DimMismatch); returns the more concrete one.

    Symbolic dims that are not provably equal are assumed equal (``ctx.assume``): every
    new signature checks it, and one that breaks it fails here with concrete dims.
    """
    if isinstance(a, int) and isinstance(b, int):
        if a != b:
            ctx.fail(f"{what}: {a} != {b}", kind="DimMismatch")
        return a
    if not _same_dim(a, b):
        ctx.assume(a, "==", b)
    return a if isinstance(a, int) else b


def _same_dim(a: Dim, b: Dim) -> bool:
    return type(a) is type(b) and a == b


def pool_output_dim(size: Dim, kernel: int, stride: int, pad_begin: int, pad_end: int,
                    dilation: int = 1, ceil_mode: bool = False) -> Dim:
    """Output length of a convolution/pooling window along one axis (ONNX Conv/MaxPool).

    floor((size + pads - effective) / stride) + 1, or with ``ceil_mode`` ceil(...) + 1 less
    one when that last window would start in the right padding: it must start inside the
    input or the left padding (ONNX operator spec, MaxPool/AveragePool "ceil_mode"; onnx PR
    #5741, onnxruntime and PyTorch compute the same). Exact for symbolic ``size`` too.
    """
    effective = (kernel - 1) * dilation + 1
    span = size + pad_begin + pad_end - effective
    if ceil_mode:
        last = (span + stride - 1) // stride   # the last ceil-mode window starts at last * stride
        # last + 1 windows, or last when last * stride >= size + pad_begin: min/max instead of
        # a branch, so that a symbolic size gets the correction in its expression
        return dim_min(last + 1, dim_max((size + pad_begin - 1) // stride + 1, last))
    return span // stride + 1


