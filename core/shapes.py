"""Helpers for writing ``infer_shape`` functions that work on int and symbolic dims.

Every helper takes the :class:`~dynashape.records.InferContext` first so that a broken
rule is reported through ``ctx.fail`` with the node's name and input shapes.
"""
from __future__ import annotations

from typing import Iterable, Optional

import numpy as np

from .records import InferContext, Shape
from .symbolic import Dim, dim_max, dim_min

__all__ = [
    "broadcast_shapes",
    "broadcast_dim",
    "normalize_axis",
    "normalize_axes",
    "numel",
    "value_list",
    "check_dims_equal",
    "dim_max",
    "dim_min",
    "is_known",
    "pool_output_dim",
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
    """Multidirectional broadcast of two dims (ONNX Broadcasting.md).

    Two different symbols give ``max(a, b)``: it evaluates to the right value whenever
    the broadcast is valid (one is 1 or they are equal).
    """
    if a == b:
        return a
    if isinstance(a, int) and isinstance(b, int):
        if a == 1:
            return b
        if b == 1:
            return a
        ctx.fail(f"dims {a} and {b} cannot be broadcast", kind="BroadcastMismatch")
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return dim_max(a, b)


def broadcast_shapes(ctx: InferContext, *shapes: Shape) -> Shape:
    """Numpy-style multidirectional broadcast of the given shapes."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        d: Dim = 1
        for s in shapes:
            j = i - (rank - len(s))
            if j >= 0:
                d = broadcast_dim(ctx, d, s[j])
        out.append(d)
    return tuple(out)


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


def check_dims_equal(ctx: InferContext, a: Dim, b: Dim, what: str) -> Dim:
    """Fail when two known dims differ; returns the more concrete one."""
    if isinstance(a, int) and isinstance(b, int):
        if a != b:
            ctx.fail(f"{what}: {a} != {b}", kind="DimMismatch")
        return a
    return a if isinstance(a, int) else b


def pool_output_dim(size: Dim, kernel: int, stride: int, pad_begin: int, pad_end: int,
                    dilation: int = 1, ceil_mode: bool = False) -> Dim:
    """Output length of a convolution/pooling window along one axis (ONNX Conv/MaxPool)."""
    effective = (kernel - 1) * dilation + 1
    span = size + pad_begin + pad_end - effective
    if ceil_mode:
        out = (span + stride - 1) // stride + 1
        # the last window must start inside the input or the left padding (ONNX/PyTorch rule)
        if isinstance(out, int) and isinstance(size, int) and (out - 1) * stride >= size + pad_begin:
            out -= 1
        return out
    return span // stride + 1


