"""The pooling ops as direct compiled loops (:mod:`.loops.pool`) over the (n, c) planes of
a 2-D (N, C, H, W) input, in the "taps" order (each output row takes one kernel tap at a
time along its width: independent lanes, a vectorised inner loop at strides 1 and 2),
split over the session's threads (:class:`.loops.threaded.ThreadedLoop`: ``prange`` over the
planes, cut into parts where ``SessionOptions.intra_op_num_threads`` > 1).

* ``loops.max_pool2d``: MaxPool without Indices, NaN skipped as onnxruntime skips it;
* ``loops.avg_pool2d``: AveragePool (count_include_pad 0/1, ceil_mode, pads, auto_pad,
  strides and, from opset 19, dilations): each window summed in the kernel's (kh, kw)
  order, as onnxruntime sums it, divided by the numpy kernel's per-position divisor;
* ``loops.lp_pool2d``: LpPool (p = 2 and p = 1 in the loop; any other p sums numpy's
  ``|x| ** p`` and takes numpy's root; dilations and ceil_mode from opset 18);
* ``loops.global_avg_pool``, ``loops.global_lp_pool``: GlobalAveragePool / GlobalLpPool (any
  rank >= 3), one vectorised pass per (n, c) plane. GlobalMaxPool stays on numpy: its
  SIMD ``max`` reduction was as fast or faster than every compiled variant measured
  (a NaN-propagating running max does not vectorise in numba).

Each KernelDef prepares the numpy kernel's plan (``ops_builtin.nn``: the same ``prepare``;
those kernels plan no scratch, nor do these) plus the loop's geometry, and runs the numpy
kernel where the loop does not apply: 1-D / 3-D pools, MaxPool's Indices, mixed dtypes, a
non-contiguous input or output, an empty output.

Source: ONNX operator spec (Operators.md), MaxPool-12/22, AveragePool-19/22, LpPool-18/22,
GlobalAveragePool-22, GlobalLpPool-22.
"""
from __future__ import annotations

from typing import NamedTuple

from dynashape.records import OpLibrary
from dynashape.ops_builtin import nn

from .common import FLOATS, PRIORITY, contiguous, lazy_import
from .tiering import compiled_ready

lib = OpLibrary()
#: the loops (:mod:`.loops.pool`), imported by the first call of one
loops = lazy_import(".loops.pool", __package__)


# ----------------------------------------------------------------------------------------
# windowed pools
# ----------------------------------------------------------------------------------------

class _PoolPlan(NamedTuple):
    numpy: object            # the numpy kernel's plan (nn._PoolPlan)
    direct: tuple | None     # (kh, kw, sh, sw, dh, dw, ph, pw) when the 2-D loop applies


def _pool_prepare(numpy_prepare, dilations_since: int):
    """A prepare: the numpy kernel's plan, and the 2-D loop's geometry where it applies."""
    def prepare(ctx) -> _PoolPlan:
        numpy_plan = numpy_prepare(ctx)
        x = ctx.shape(0)
        geom = nn._pool_geometry(ctx, x, dilations_since=dilations_since)
        direct = None
        if len(x) == 4 and numpy_plan.index is None and geom.pads_begin is not None:
            direct = tuple(int(v) for v in (*geom.kernel, *geom.strides, *geom.dilations, *geom.pads_begin))
        return _PoolPlan(numpy_plan, direct)
    return prepare


def _direct(p: _PoolPlan, x, y) -> bool:
    """The 2-D loop applies: its geometry, one float dtype, contiguous arrays, some output."""
    return p.direct is not None and x.dtype == y.dtype and contiguous(x, y) and y.size > 0 and compiled_ready()


def _lp_sums(x, y, p: float, loop) -> None:
    """LpPool / GlobalLpPool through ``loop(base, square)``: p = 2 and p = 1 in the loop;
    any other p sums numpy's SIMD ``|x| ** p`` (the numpy kernel's) and takes numpy's root
    (a scalar pow per tap in the loop measured ~10x slower than the numpy kernel)."""
    if p in (1.0, 2.0):
        loop(x, p == 2.0)
        return
    loop(nn._abs_pow(x, p), False)
    nn._root(y, p)


@lib.kernel("MaxPool", dtypes=FLOATS, priority=PRIORITY, prepare=_pool_prepare(nn._max_pool_prepare, 10))
def _max_pool(inputs, outputs, p: _PoolPlan):
    """MaxPool, 2-D without Indices: ``loops.max_pool2d``; else the numpy kernel."""
    x, y = inputs[0], outputs[0]
    if _direct(p, x, y):
        loops.max_pool2d(x, y, *p.direct)
        return
    nn._max_pool(inputs, outputs, p.numpy)


@lib.kernel("AveragePool", dtypes=FLOATS, priority=PRIORITY,
            prepare=_pool_prepare(nn._average_pool_prepare, 19))
def _average_pool(inputs, outputs, p: _PoolPlan):
    """AveragePool, 2-D: ``loops.avg_pool2d`` with the numpy plan's divisor; else the numpy kernel."""
    x, y = inputs[0], outputs[0]
    div = p.numpy.divisor
    if _direct(p, x, y) and div.dtype == y.dtype and div.flags.c_contiguous:
        loops.avg_pool2d(x, y, div, *p.direct)
        return
    nn._average_pool(inputs, outputs, p.numpy)


@lib.kernel("LpPool", dtypes=FLOATS, priority=PRIORITY, prepare=_pool_prepare(nn._lp_pool_prepare, 18))
def _lp_pool(inputs, outputs, p: _PoolPlan):
    """LpPool, 2-D: ``loops.lp_pool2d`` (see :func:`_lp_sums`); else the numpy kernel."""
    x, y = inputs[0], outputs[0]
    if _direct(p, x, y):
        _lp_sums(x, y, p.numpy.p, lambda base, square: loops.lp_pool2d(base, y, square, *p.direct))
        return
    nn._lp_pool(inputs, outputs, p.numpy)


# ----------------------------------------------------------------------------------------
# global pools
# ----------------------------------------------------------------------------------------

def _planes(x, y):
    """x (N, C, ...) and y (N, C, 1, ...) as (N * C, S) and (N * C,), or None where the
    loops do not apply (mixed dtypes, non-contiguous, empty)."""
    if x.ndim < 3 or x.dtype != y.dtype or not contiguous(x, y) or not x.size or not compiled_ready():
        return None
    return x.reshape(x.shape[0] * x.shape[1], -1), y.reshape(-1)


@lib.kernel("GlobalAveragePool", dtypes=FLOATS, priority=PRIORITY, prepare=nn._global_prepare)
def _global_average_pool(inputs, outputs, prepared):
    """GlobalAveragePool: ``loops.global_avg_pool`` over the (n, c) planes; else the numpy kernel."""
    planes = _planes(inputs[0], outputs[0])
    if planes is None:
        nn._global_average_pool(inputs, outputs, prepared)
        return
    loops.global_avg_pool(*planes)


@lib.kernel("GlobalLpPool", dtypes=FLOATS, priority=PRIORITY, prepare=nn._global_prepare)
def _global_lp_pool(inputs, outputs, prepared):
    """GlobalLpPool: ``loops.global_lp_pool`` over the (n, c) planes (see :func:`_lp_sums`);
    else the numpy kernel."""
    planes = _planes(inputs[0], outputs[0])
    if planes is None:
        nn._global_lp_pool(inputs, outputs, prepared)
        return
    x2, y2 = planes
    n = x2.shape[0]
    _lp_sums(x2, y2, prepared[2], lambda base, square: loops.global_lp_pool(base.reshape(n, -1), y2, square))
