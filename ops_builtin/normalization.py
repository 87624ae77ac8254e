"""Normalisations that are not batch/layer/instance/group ones (those live in ``nn``):
RMSNormalization, LpNormalization, MeanVarianceNormalization and LRN.

Every output has its input's shape; the statistics are taken with keepdims reductions and
broadcast back. float16/bfloat16 are computed in float32 and cast back, float64 stays
float64 (RMSNormalization: the ``stash_type`` precision, float64 when it or X is double).

Source: ONNX operator spec (onnx/docs/Operators.md), RMSNormalization-23,
LpNormalization-1/22, MeanVarianceNormalization-9/13, LRN-1/13.
"""
from __future__ import annotations

import math

import numpy as np
from dynashape.dtypes import as_dtype, compute_dtype, is_float, np_dtype
from dynashape.records import OpLibrary, same_dtype
from dynashape.shapes import check_unidirectional, normalize_axes, normalize_axis

lib = OpLibrary()

__all__ = ["lib"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _check_float(ctx, i: int, what: str) -> None:
    dt = ctx.dtype(i)
    if dt is not None and not is_float(dt):
        ctx.fail(f"{what} has element type {dt}, expected a floating-point type", kind="UnsupportedDtype")


def _rank_at_least(ctx, i: int, rank: int, what: str):
    shape = ctx.shape(i)
    if shape is not None and len(shape) < rank:
        ctx.fail(f"{what} must have rank >= {rank}, got rank {len(shape)}", kind="InvalidRank")
    return shape


# RMSNormalization ----------------------------------------------------------------------

def _rms_cdtype(ctx) -> np.dtype:
    stash = int(ctx.attr("stash_type", 1))
    try:
        sdt = np_dtype(stash)
    except TypeError:
        sdt = None
    if sdt is None or not is_float(sdt):
        ctx.fail(f"stash_type {stash} is not a floating-point element type (1 = float, 11 = double)",
                 kind="InvalidAttribute")
    return _F64 if _F64 in (np.dtype(ctx.dtype(0)), sdt) else _F32


@lib.op("RMSNormalization", since_version=23, infer_dtype=same_dtype(1))
def _rms_shape(ctx):
    """RMSNormalization: Y = X / sqrt(mean(X^2 over axes [axis, rank)) + epsilon) * scale.

    X (T) and scale (V, unidirectionally broadcastable to X) are floats; Y has X's shape
    and scale's type. Raises InvalidRank (scalar X), AxisOutOfRange, BroadcastMismatch,
    InvalidAttribute (stash_type), UnsupportedDtype. Source: ONNX operator spec,
    RMSNormalization-23.
    """
    _check_float(ctx, 0, "X")
    _check_float(ctx, 1, "scale")
    _rms_cdtype(ctx)
    x = _rank_at_least(ctx, 0, 1, "X")
    if x is None:
        return [None]
    normalize_axis(ctx, ctx.attr("axis", -1), len(x))
    if ctx.shape(1) is not None:
        check_unidirectional(ctx, ctx.shape(1), x, "scale")
    return [tuple(x)]


def _rms_prepare(ctx):
    rank = len(ctx.shape(0))
    axis = normalize_axis(ctx, ctx.attr("axis", -1), rank)
    return _rms_cdtype(ctx), tuple(range(axis, rank)), float(ctx.attr("epsilon", 1e-5))


@lib.kernel("RMSNormalization", prepare=_rms_prepare)
def _rms(inputs, outputs, prepared):
    """mean of squares (in the output buffer when it has the compute dtype), then x * rsqrt * scale."""
    cdtype, axes, eps = prepared
    x, y = as_dtype(inputs[0], cdtype), outputs[0]
    work = y if y.dtype == cdtype else np.empty(y.shape, cdtype)
    np.square(x, out=work)
    ms = work.mean(axis=axes, keepdims=True, dtype=cdtype)
    ms += eps
    np.sqrt(ms, out=ms)
    np.divide(x, ms, out=work)
    np.multiply(work, as_dtype(inputs[1], cdtype), out=work)
    if work is not y:
        np.copyto(y, work, casting="unsafe")


# LpNormalization -----------------------------------------------------------------------

def _lp_p(ctx) -> int:
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        ctx.fail(f"p is {p}, expected 1 or 2", kind="InvalidAttribute")
    return p


@lib.op("LpNormalization", since_version=(1, 22), infer_dtype=same_dtype(0))
def _lp_shape(ctx):
    """LpNormalization: output = input / ||input||_p along ``axis`` (0 where the norm is 0).

    p is 1 or 2 (default 2), axis defaults to -1. Raises InvalidAttribute, AxisOutOfRange,
    InvalidRank (scalar input), UnsupportedDtype. Source: ONNX operator spec,
    LpNormalization-22 (-1: the same without bfloat16).
    """
    _check_float(ctx, 0, "input")
    _lp_p(ctx)
    x = _rank_at_least(ctx, 0, 1, "input")
    if x is None:
        return [None]
    normalize_axis(ctx, ctx.attr("axis", -1), len(x))
    return [tuple(x)]


def _lp_prepare(ctx):
    return (compute_dtype(ctx.dtype(0)), normalize_axis(ctx, ctx.attr("axis", -1), len(ctx.shape(0))), _lp_p(ctx))


@lib.kernel("LpNormalization", prepare=_lp_prepare)
def _lp(inputs, outputs, prepared):
    """The norm by a keepdims sum of |x| or x^2, then one divide; zero norms give 0."""
    cdtype, axis, p = prepared
    x, y = as_dtype(inputs[0], cdtype), outputs[0]
    if p == 1:
        norm = np.abs(x).sum(axis=axis, keepdims=True, dtype=cdtype)
    else:
        norm = np.square(x).sum(axis=axis, keepdims=True, dtype=cdtype)
        np.sqrt(norm, out=norm)
    zero = norm == 0
    norm[zero] = 1
    if y.dtype == cdtype:
        np.divide(x, norm, out=y)
    else:
        np.copyto(y, x / norm, casting="unsafe")
    if zero.any():
        np.copyto(y, 0, where=zero)


# MeanVarianceNormalization --------------------------------------------------------------

_MVN_EPSILON = 1e-9   # the function body's Epsilon, added to the standard deviation


def _mvn_axes(ctx, rank: int) -> list:
    axes = ctx.attr("axes")
    return normalize_axes(ctx, [0, 2, 3] if axes is None else list(axes), rank)


@lib.op("MeanVarianceNormalization", since_version=(9, 13), infer_dtype=same_dtype(0))
def _mvn_shape(ctx):
    """MeanVarianceNormalization: (X - E[X]) / (sqrt(E[(X - E[X])^2]) + 1e-9) over ``axes``.

    axes default [0, 2, 3] (per channel of an NCHW tensor). Raises AxisOutOfRange,
    DuplicateAxes, UnsupportedDtype. Source: ONNX operator spec, MeanVarianceNormalization-13
    (its function body: ReduceMean, Sub, Sqrt, Add Epsilon = 1e-9, Div).
    """
    _check_float(ctx, 0, "X")
    x = ctx.shape(0)
    if x is None:
        return [None]
    _mvn_axes(ctx, len(x))
    return [tuple(x)]


def _mvn_prepare(ctx):
    return compute_dtype(ctx.dtype(0)), tuple(_mvn_axes(ctx, len(ctx.shape(0))))


@lib.kernel("MeanVarianceNormalization", prepare=_mvn_prepare)
def _mvn(inputs, outputs, prepared):
    """Centre (into the output when it has the compute dtype), then divide by std + 1e-9."""
    cdtype, axes = prepared
    x, y = as_dtype(inputs[0], cdtype), outputs[0]
    if x.size == 0:
        return
    work = y if y.dtype == cdtype else np.empty(y.shape, cdtype)
    np.subtract(x, x.mean(axis=axes, keepdims=True, dtype=cdtype), out=work)
    std = np.square(work).mean(axis=axes, keepdims=True, dtype=cdtype)
    np.sqrt(std, out=std)
    std += _MVN_EPSILON
    work /= std
    if work is not y:
        np.copyto(y, work, casting="unsafe")


# LRN ----------------------------------------------------------------------------------

def _lrn_size(ctx) -> int:
    size = ctx.attr("size")
    if size is None:
        ctx.fail("attribute 'size' is required", kind="MissingAttribute")
    if int(size) < 1:
        ctx.fail(f"size {size} must be >= 1", kind="InvalidAttribute")
    return int(size)


@lib.op("LRN", since_version=(1, 13), infer_dtype=same_dtype(0))
def _lrn_shape(ctx):
    """LRN: Y = X / (bias + alpha / size * square_sum)^beta, square_sum over the channels
    [c - floor((size-1)/2), c + ceil((size-1)/2)] clipped to [0, C).

    X is (N, C, d1, ..., dk); ``size`` is required. Raises MissingAttribute,
    InvalidAttribute, InvalidRank, UnsupportedDtype. Source: ONNX operator spec, LRN-13.
    """
    _check_float(ctx, 0, "X")
    _lrn_size(ctx)
    x = _rank_at_least(ctx, 0, 2, "X (N, C, d1, ..., dk)")
    return [None if x is None else tuple(x)]


def _lrn_prepare(ctx):
    size = _lrn_size(ctx)
    alpha, beta, bias = (float(ctx.attr(n, d)) for n, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    below, above = math.floor((size - 1) / 2), math.ceil((size - 1) / 2)
    return compute_dtype(ctx.dtype(0)), below, above, alpha / size, beta, bias


@lib.kernel("LRN", prepare=_lrn_prepare)
def _lrn(inputs, outputs, prepared):
    """The window sum of squares as one shifted add per channel offset (``size`` of them)."""
    cdtype, below, above, scale, beta, bias = prepared
    x, y = as_dtype(inputs[0], cdtype), outputs[0]
    c = x.shape[1]
    sq = np.square(x)
    acc = sq.copy()
    for off in range(1, max(below, above) + 1):
        if off <= above and off < c:   # channel c + off contributes to c
            acc[:, :c - off] += sq[:, off:]
        if off <= below and off < c:   # channel c - off contributes to c
            acc[:, off:] += sq[:, :c - off]
    acc *= scale
    acc += bias
    np.power(acc, beta, out=acc)
    if y.dtype == cdtype:
        np.divide(x, acc, out=y)
    else:
        np.copyto(y, x / acc, casting="unsafe")
