"""The pool loops over the (n, c) planes of a 2-D (N, C, H, W) input (float32 / float64,
C-contiguous), in the "taps" order: each output row takes one kernel tap at a time along
its width (independent lanes, a vectorised inner loop at strides 1 and 2); ``prange`` over
the planes (:class:`.threaded.ThreadedLoop`). The kernels, and where they hand over to the
numpy ones, are :mod:`dynashape.ops_builtin.fast.pool`.

Source: ONNX operator spec (Operators.md), MaxPool-12/22, AveragePool-19/22, LpPool-18/22,
GlobalAveragePool-22, GlobalLpPool-22.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .common import JIT, SUM_JIT, tap_span
from .threaded import threaded


# ----------------------------------------------------------------------------------------
# windowed pools
# ----------------------------------------------------------------------------------------

@njit(inline="always", **JIT)
def _spans(kw_, dw, pw, sw, w_, ow_):
    """:func:`.common.tap_span` of every kernel column ``kw`` (its first output column, the
    input column that one reads, the count): three (KW,) int64 arrays made once per call
    (tap_span's floor divisions, per tap and output row, cost more than the row's adds)."""
    d0 = np.empty(kw_, np.int64)
    s0 = np.empty(kw_, np.int64)
    cnt = np.empty(kw_, np.int64)
    for kw in range(kw_):
        d0[kw], s0[kw], cnt[kw] = tap_span(kw * dw - pw, sw, w_, ow_)
    return d0, s0, cnt


# Each tap helper (1-D rows of x's dtype) updates row[d0 + j] from src[s0 + j * sw] for
# j < cnt. The starts pass through max(..., 0) again (read back from _spans' arrays, LLVM
# no longer knows them non-negative, and numba's negative-index wraparound blocks
# vectorisation); strides 1 and 2 have loops of their own (a constant stride vectorises,
# stride 2 as interleaved loads: 3x3 stride-2 pools ran 2.5x faster than the generic loop).

@njit(inline="always", **JIT)
def _max_tap(row, src, d0, s0, cnt, sw):
    """row[d0 + j] = max(row[d0 + j], src[s0 + j * sw]) (a NaN in src skipped)."""
    d0, s0, cnt = max(d0, 0), max(s0, 0), max(cnt, 0)
    if sw == 1:
        for j in range(cnt):
            v = src[s0 + j]
            row[d0 + j] = v if v > row[d0 + j] else row[d0 + j]
    elif sw == 2:
        for j in range(cnt):
            v = src[s0 + 2 * j]
            row[d0 + j] = v if v > row[d0 + j] else row[d0 + j]
    else:
        for j in range(cnt):
            v = src[s0 + j * sw]
            row[d0 + j] = v if v > row[d0 + j] else row[d0 + j]


@njit(inline="always", **JIT)
def _add_tap(row, src, d0, s0, cnt, sw):
    """row[d0 + j] += src[s0 + j * sw]."""
    d0, s0, cnt = max(d0, 0), max(s0, 0), max(cnt, 0)
    if sw == 1:
        for j in range(cnt):
            row[d0 + j] += src[s0 + j]
    elif sw == 2:
        for j in range(cnt):
            row[d0 + j] += src[s0 + 2 * j]
    else:
        for j in range(cnt):
            row[d0 + j] += src[s0 + j * sw]


@njit(inline="always", **JIT)
def _square_tap(row, src, d0, s0, cnt, sw):
    """row[d0 + j] += src[s0 + j * sw] ** 2."""
    d0, s0, cnt = max(d0, 0), max(s0, 0), max(cnt, 0)
    if sw == 1:
        for j in range(cnt):
            v = src[s0 + j]
            row[d0 + j] += v * v
    elif sw == 2:
        for j in range(cnt):
            v = src[s0 + 2 * j]
            row[d0 + j] += v * v
    else:
        for j in range(cnt):
            v = src[s0 + j * sw]
            row[d0 + j] += v * v


@njit(inline="always", **JIT)
def _abs_tap(row, src, d0, s0, cnt, sw):
    """row[d0 + j] += |src[s0 + j * sw]|."""
    d0, s0, cnt = max(d0, 0), max(s0, 0), max(cnt, 0)
    if sw == 1:
        for j in range(cnt):
            row[d0 + j] += abs(src[s0 + j])
    elif sw == 2:
        for j in range(cnt):
            row[d0 + j] += abs(src[s0 + 2 * j])
    else:
        for j in range(cnt):
            row[d0 + j] += abs(src[s0 + j * sw])


@threaded(JIT)
def max_pool2d(x, y, kh_, kw_, sh, sw, dh, dw, ph, pw):
    """MaxPool of x (N, C, H, W) into y (N, C, OH, OW), float32 or float64 alike, kernel
    (kh_, kw_), strides (sh, sw), dilations (dh, dw), begin pads (ph, pw) (the end pads and
    ceil_mode are in y's shape), in the "taps" order: each output row takes one kernel tap
    at a time along its width (independent lanes, no chain through a running max); padding
    never wins. A NaN is skipped, as onnxruntime's pool (``if (x > y) y = x``) skips it
    (ONNX leaves NaN open); a window with no input position (all padding) gives -inf.

    Source: ONNX operator spec, MaxPool-12/22 (pads, strides, dilations, ceil_mode)."""
    n_, c_, h_, w_ = x.shape
    oh_, ow_ = y.shape[2], y.shape[3]
    d0, s0, cnt = _spans(kw_, dw, pw, sw, w_, ow_)
    ninf = -np.inf   # (never derived from y's bytes: validation mode poisons them with NaN)
    for pl in prange(n_ * c_):
        n = pl // c_
        c = pl - n * c_
        for oh in range(oh_):
            row = y[n, c, oh]
            for ow in range(ow_):
                row[ow] = ninf
            for kh in range(kh_):
                ih = oh * sh - ph + kh * dh
                if ih < 0 or ih >= h_:
                    continue
                src = x[n, c, ih]
                for kw in range(kw_):
                    _max_tap(row, src, d0[kw], s0[kw], cnt[kw], sw)


@threaded(JIT)
def avg_pool2d(x, y, div, kh_, kw_, sh, sw, dh, dw, ph, pw):
    """AveragePool of x (N, C, H, W) into y (N, C, OH, OW) (float32 or float64, summed in
    that dtype; geometry as :func:`max_pool2d`): each window's sum in the (kh, kw) order of
    its taps, as onnxruntime sums it, divided by ``div`` (OH, OW, x's dtype): the number of
    positions the window counts (pads included with count_include_pad=1; >= 1, so a window
    with no input position gives 0). NaN and inf propagate.

    Source: ONNX operator spec, AveragePool-19/22 (count_include_pad, ceil_mode, pads,
    strides, dilations)."""
    n_, c_, h_, w_ = x.shape
    oh_, ow_ = y.shape[2], y.shape[3]
    d0, s0, cnt = _spans(kw_, dw, pw, sw, w_, ow_)
    zero = x.dtype.type(0)   # (never derived from y's bytes)
    for pl in prange(n_ * c_):
        n = pl // c_
        c = pl - n * c_
        for oh in range(oh_):
            row = y[n, c, oh]
            for ow in range(ow_):
                row[ow] = zero
            for kh in range(kh_):
                ih = oh * sh - ph + kh * dh
                if ih < 0 or ih >= h_:
                    continue
                src = x[n, c, ih]
                for kw in range(kw_):
                    _add_tap(row, src, d0[kw], s0[kw], cnt[kw], sw)
            drow = div[oh]
            for ow in range(ow_):
                row[ow] = row[ow] / drow[ow]


@threaded(JIT)
def lp_pool2d(x, y, square, kh_, kw_, sh, sw, dh, dw, ph, pw):
    """LpPool's window sums of x (N, C, H, W) into y (N, C, OH, OW) (float32 or float64;
    geometry as :func:`max_pool2d`): ``square`` True: ``sqrt(sum x*x)`` (p = 2); False:
    ``sum |x|`` (p = 1, and any other p with x = |input| ** p, the root taken after). In
    the (kh, kw) order of the taps (as onnxruntime sums them), pads counting as 0; NaN
    propagates.

    Source: ONNX operator spec, LpPool-18/22 (p, pads, strides, dilations, ceil_mode)."""
    n_, c_, h_, w_ = x.shape
    oh_, ow_ = y.shape[2], y.shape[3]
    d0, s0, cnt = _spans(kw_, dw, pw, sw, w_, ow_)
    zero = x.dtype.type(0)
    for pl in prange(n_ * c_):
        n = pl // c_
        c = pl - n * c_
        for oh in range(oh_):
            row = y[n, c, oh]
            for ow in range(ow_):
                row[ow] = zero
            for kh in range(kh_):
                ih = oh * sh - ph + kh * dh
                if ih < 0 or ih >= h_:
                    continue
                src = x[n, c, ih]
                for kw in range(kw_):
                    if square:
                        _square_tap(row, src, d0[kw], s0[kw], cnt[kw], sw)
                    else:
                        _abs_tap(row, src, d0[kw], s0[kw], cnt[kw], sw)
            if square:
                for ow in range(ow_):
                    row[ow] = np.sqrt(row[ow])


# ----------------------------------------------------------------------------------------
# global pools
# ----------------------------------------------------------------------------------------

@threaded(SUM_JIT)
def global_avg_pool(x, y):
    """GlobalAveragePool of the planes x (P, S) (P = N * C, S > 0 the spatial size; float32
    or float64) into y (P,): each plane's sum in its dtype (vectorised: the lanes add in
    another order than numpy's pairwise sum, within a few ulp), divided by S. NaN and inf
    propagate.

    Source: ONNX operator spec, GlobalAveragePool-22."""
    p_, s_ = x.shape
    zero = x.dtype.type(0)
    for pl in prange(p_):
        row = x[pl]
        acc = zero
        for j in range(s_):
            acc += row[j]
        y[pl] = acc / s_


@threaded(SUM_JIT)
def global_lp_pool(x, y, square):
    """GlobalLpPool's plane sums of x (P, S) (S > 0; float32 or float64) into y (P,):
    ``square`` True: ``sqrt(sum x*x)`` (p = 2); False: ``sum |x|`` (p = 1, and any other p
    with x = |input| ** p, the root taken after); in x's dtype, vectorised. NaN propagates.

    Source: ONNX operator spec, GlobalLpPool-22."""
    p_, s_ = x.shape
    zero = x.dtype.type(0)
    for pl in prange(p_):
        row = x[pl]
        acc = zero
        if square:
            for j in range(s_):
                acc += row[j] * row[j]
            y[pl] = np.sqrt(acc)
        else:
            for j in range(s_):
                acc += abs(row[j])
            y[pl] = acc
