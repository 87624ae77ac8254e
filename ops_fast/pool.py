"""The pooling ops as direct compiled loops in the "taps" order."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from dynashape.records import OpLibrary
from dynashape.ops_builtin import nn

from .common import FLOATS, JIT, PRIORITY, contiguous, tap_span

lib = OpLibrary()


@njit(**JIT)
def max_pool2d(x, y, kh_, kw_, sh, sw, dh, dw, ph, pw):
    """MaxPool of x (N, C, H, W) into y (N, C, OH, OW) in the "taps" order (each output row
    takes one kernel tap at a time along its width: independent lanes, no chain through a
    running max); padding never wins. A NaN is skipped, as onnxruntime's pool (``if (x > y)
    y = x``) skips it (ONNX leaves NaN open)."""
    n_, c_, h_, w_ = x.shape
    oh_, ow_ = y.shape[2], y.shape[3]
    ninf = -np.inf   # (never derived from y's bytes: validation mode poisons them with NaN)
    for n in range(n_):
        for c in range(c_):
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
                        d0, s0, cnt = tap_span(kw * dw - pw, sw, w_, ow_)
                        if sw == 1:
                            for j in range(cnt):
                                v = src[s0 + j]
                                row[d0 + j] = v if v > row[d0 + j] else row[d0 + j]
                        else:
                            for j in range(cnt):
                                v = src[s0 + j * sw]
                                row[d0 + j] = v if v > row[d0 + j] else row[d0 + j]


class _PoolPlan(NamedTuple):
    numpy: object
    direct: tuple | None     # (kh, kw, sh, sw, dh, dw, ph, pw) when the loop applies


def _max_pool_prepare(ctx) -> _PoolPlan:
    numpy_plan = nn._max_pool_prepare(ctx)
    x = ctx.shape(0)
    geom = nn._pool_geometry(ctx, x, dilations_since=10)
    direct = None
    if len(x) == 4 and numpy_plan.index is None and geom.pads_begin is not None:
        direct = tuple(int(v) for v in (*geom.kernel, *geom.strides, *geom.dilations, *geom.pads_begin))
    return _PoolPlan(numpy_plan, direct)


@lib.kernel("MaxPool", dtypes=FLOATS, priority=PRIORITY, prepare=_max_pool_prepare)
def _max_pool(inputs, outputs, p: _PoolPlan):
    x, y = inputs[0], outputs[0]
    if p.direct is not None and x.dtype == y.dtype and contiguous(x, y) and y.size:
        max_pool2d(x, y, *p.direct)
        return
    nn._max_pool(inputs, outputs, p.numpy)
