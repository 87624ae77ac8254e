"""The Resize loops over the last two axes of a 4-D (N, C, H, W) input (float32 / float64),
one (n, c) plane at a time, ``prange`` over the planes (:class:`.threaded.ThreadedLoop`), from
the per-axis index / weight tables :mod:`dynashape.ops_builtin.fast.resize` makes of the numpy
kernel's plan.

Source: ONNX operator spec (Operators.md), Resize-10/11/13/18/19 and Upsample-7/9.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from .common import JIT
from .threaded import threaded


@threaded(JIT)
def resize_nearest2d(x, y, ih, iw, has_w):
    """Nearest Resize of x (N, C, H, W) into y (N, C, OH, OW), float32 or float64: output
    row ``oh`` of a plane is input row ``ih[oh]`` (ih: (OH,) int64 in [0, H)) gathered at the
    columns ``iw`` ((OW,) uint32 in [0, W); unsigned: no negative-index wraparound in the
    gather) or, where W is not resized (``has_w`` False, OW == W), copied. A row with the
    previous row's source is a copy of that output row.

    Source: ONNX operator spec, Resize-19 (mode nearest, nearest_mode), the indices as the
    numpy kernel computes them."""
    n_, c_ = x.shape[0], x.shape[1]
    oh_, ow_ = y.shape[2], y.shape[3]
    for pl in prange(n_ * c_):
        n = pl // c_
        c = pl - n * c_
        for oh in range(oh_):
            row = y[n, c, oh]
            if oh > 0 and ih[oh] == ih[oh - 1]:
                prev = y[n, c, oh - 1]
                for j in range(ow_):
                    row[j] = prev[j]
                continue
            src = x[n, c, ih[oh]]
            if has_w:
                for j in range(ow_):
                    row[j] = src[iw[j]]
            else:
                for j in range(ow_):
                    row[j] = src[j]


@threaded(JIT)
def resize_interp2d(x, y, hidx, hw, widx, ww, has_h, has_w):
    """Linear / cubic Resize of x (N, C, H, W) into y (N, C, OH, OW), float32 or float64
    (weights in x's dtype), separable, per output row ``oh`` of a plane:

    * H taps (``has_h``): ``line = sum_k x[hidx[oh, k], :] * hw[oh, k]`` (hidx, hw: (OH, TH),
      indices in [0, H)); without H resized (OH == H) the line is input row oh;
    * W taps (``has_w``): ``y[oh, j] = sum_k line[widx[k, j]] * ww[k, j]`` (widx, ww: (TW, OW),
      taps-major so the gather over j vectorises; uint32 indices in [0, W)); without W
      resized (OW == W) the row is the line.

    Each sum starts from its first tap's product and adds the others' products in tap
    order (no fused multiply-add): the numpy kernel's arithmetic, step for step. NaN / inf
    propagate through every tap that reads them (a zero weight included: 0 * inf is NaN,
    as in the numpy kernel).

    Source: ONNX operator spec, Resize-19 (modes linear / cubic, cubic_coeff_a,
    exclude_outside, antialias), the tables as the numpy kernel computes them."""
    n_, c_, w_ = x.shape[0], x.shape[1], x.shape[3]
    oh_, ow_ = y.shape[2], y.shape[3]
    th, tw = hidx.shape[1], widx.shape[0]
    for pl in prange(n_ * c_):
        n = pl // c_
        c = pl - n * c_
        tmp = np.empty(w_, y.dtype)
        for oh in range(oh_):
            row = y[n, c, oh]
            if has_h:
                src = x[n, c, hidx[oh, 0]]
                wv = hw[oh, 0]
                for j in range(w_):
                    tmp[j] = src[j] * wv
                for k in range(1, th):
                    src = x[n, c, hidx[oh, k]]
                    wv = hw[oh, k]
                    for j in range(w_):
                        tmp[j] += src[j] * wv
                line = tmp
            else:
                line = x[n, c, oh]
            if has_w:
                i0, w0 = widx[0], ww[0]
                for j in range(ow_):
                    row[j] = line[i0[j]] * w0[j]
                for k in range(1, tw):
                    ik, wk = widx[k], ww[k]
                    for j in range(ow_):
                        row[j] += line[ik[j]] * wk[j]
            else:
                for j in range(ow_):
                    row[j] = line[j]
