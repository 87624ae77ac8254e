"""Resize (and Upsample) over the last two axes of a 4-D (N, C, H, W) input as compiled
loops, one (n, c) plane at a time, split over the session's threads (:func:`.common.threaded`,
``prange`` over the planes).

The numpy kernel's ``prepare`` (``ops_builtin.resize``) maps every output coordinate to its
source indices and weights, per axis, once per plan (every coordinate_transformation_mode,
nearest_mode, cubic_coeff_a, exclude_outside, antialias, keep_aspect_ratio_policy and axes);
this module turns those per-axis tables into the loops' layout and the loops apply them:

* :func:`resize_nearest2d`: mode nearest, a gather along W per output row (a row whose
  source row is the previous one's is copied);
* :func:`resize_interp2d`: modes linear and cubic (antialias too: it only has more taps), a
  separable pass per output row: the H taps combine whole input rows, then the W taps
  gather from that row, in the numpy kernel's order (H, then W; tap by tap, a product
  rounded then added), so the results are the numpy kernel's bit for bit.

tf_crop_and_resize's extrapolation_value is written afterwards by the numpy kernel's mask
step. Anything else runs the numpy kernel: another rank, a resized N or C axis, the
identity ("copy"), an empty output, other dtypes (the KernelDefs take float32 / float64),
a non-contiguous input or output. Scales / sizes / roi known only at run time are planned
(numpy plan and tables) per call.

Source: ONNX operator spec (Operators.md), Resize-10/11/13/18/19 and Upsample-7/9.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import prange
from dynashape.records import OpLibrary
from dynashape.ops_builtin import resize

from .common import F32, F64, FLOATS, JIT, PRIORITY, contiguous, threaded

lib = OpLibrary()


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


class _Tables(NamedTuple):
    """What a compiled loop gets besides x and y (see the loops)."""

    nearest: bool
    hidx: np.ndarray   # nearest: ih (OH,); interp: (OH, TH) int64
    hw: np.ndarray     # interp: (OH, TH) weights (nearest: unused, empty)
    widx: np.ndarray   # nearest: iw (OW,) uint32; interp: (TW, OW) uint32
    ww: np.ndarray     # interp: (TW, OW) weights (nearest: unused, empty)
    has_h: bool
    has_w: bool


def _tables(plan, shape, dtype) -> _Tables | None:
    """The loops' tables from the numpy plan (``resize._Plan``) of an input of ``shape`` and
    ``dtype``, or None where the loops do not apply."""
    if not isinstance(plan, resize._Plan) or len(shape) != 4 or plan.mode not in ("nearest", "interp"):
        return None
    dtype = np.dtype(dtype)
    if dtype not in (F32, F64) or not set(plan.axes) <= {2, 3} or 0 in plan.out_shape or 0 in shape:
        return None
    if max(shape[2:]) >= 2 ** 31:
        return None
    has_h, has_w = 2 in plan.axes, 3 in plan.axes
    oh, ow = plan.out_shape[2], plan.out_shape[3]
    none = np.empty(0, dtype)
    if plan.mode == "nearest":
        ih = plan.index[2].reshape(-1).astype(np.int64) if has_h else np.arange(oh, dtype=np.int64)
        iw = plan.index[3].reshape(-1).astype(np.uint32) if has_w else np.arange(ow, dtype=np.uint32)
        return _Tables(True, ih, none, iw, none, has_h, has_w)
    if plan.cdtype != dtype:
        return None
    by_axis = dict(zip(plan.axes, plan.index))
    if has_h:
        hidx = np.ascontiguousarray(by_axis[2][0], dtype=np.int64)
        hw = np.ascontiguousarray(by_axis[2][1], dtype=dtype)
    else:
        hidx, hw = np.zeros((oh, 1), np.int64), np.ones((oh, 1), dtype)
    if has_w:
        widx = np.ascontiguousarray(by_axis[3][0].T, dtype=np.uint32)
        ww = np.ascontiguousarray(by_axis[3][1].T, dtype=dtype)
    else:
        widx, ww = np.zeros((1, ow), np.uint32), np.ones((1, ow), dtype)
    return _Tables(False, hidx, hw, widx, ww, has_h, has_w)


class _ResizePlan(NamedTuple):
    numpy: object                # resize._prepare's result: a resize._Plan, or (ctx, needed)
    tables: _Tables | None       # the loops' tables (None: the numpy kernel, or plan per call)


def _prepare(ctx) -> _ResizePlan:
    """The numpy kernel's prepare (the same plan, no scratch) and the loops' tables from it."""
    numpy_plan = resize._prepare(ctx)
    tables = None
    if isinstance(numpy_plan, resize._Plan):
        tables = _tables(numpy_plan, ctx.shape(0), ctx.dtype(0))
    return _ResizePlan(numpy_plan, tables)


def _resize(inputs, outputs, p: _ResizePlan):
    """Resize / Upsample: the compiled loops where their tables exist (see the module),
    the numpy kernel otherwise; a plan over run-time scales / sizes / roi is made here."""
    x, out = inputs[0], outputs[0]
    plan, tables = p.numpy, p.tables
    if isinstance(plan, tuple):                   # value inputs known only now: plan per call
        ctx, needed = plan
        runtime = {i: inputs[i] for i in needed if i < len(inputs)}
        plan = resize._plan(ctx, x.shape, x.dtype, lambda i: runtime.get(i))
        tables = _tables(plan, x.shape, x.dtype)
    fresh = out is None
    if tables is None or not contiguous(x) or (not fresh and (out.dtype != x.dtype or not contiguous(out))):
        return resize._resize(inputs, outputs, plan)
    if fresh:
        out = np.empty(plan.out_shape, dtype=x.dtype)
    t = tables
    if t.nearest:
        resize_nearest2d(x, out, t.hidx, t.widx, t.has_w)
    else:
        resize_interp2d(x, out, t.hidx, t.hw, t.widx, t.ww, t.has_h, t.has_w)
    resize._apply_masks(out, plan)
    return [out] if fresh else None


lib.kernel("Resize", dtypes=FLOATS, priority=PRIORITY, prepare=_prepare)(_resize)
lib.kernel("Upsample", dtypes=FLOATS, priority=PRIORITY, prepare=_prepare)(_resize)
