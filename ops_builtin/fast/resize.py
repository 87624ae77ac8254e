"""Resize (and Upsample) over the last two axes of a 4-D (N, C, H, W) input as compiled
loops (:mod:`.loops.resize`), one (n, c) plane at a time, split over the session's threads
(:class:`.loops.threaded.ThreadedLoop`, ``prange`` over the planes).

The numpy kernel's ``prepare`` (``ops_builtin.resize``) maps every output coordinate to its
source indices and weights, per axis, once per plan (every coordinate_transformation_mode,
nearest_mode, cubic_coeff_a, exclude_outside, antialias, keep_aspect_ratio_policy and axes);
this module turns those per-axis tables into the loops' layout and the loops apply them:

* ``loops.resize_nearest2d``: mode nearest, a gather along W per output row (a row whose
  source row is the previous one's is copied);
* ``loops.resize_interp2d``: modes linear and cubic (antialias too: it only has more taps), a
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
from dynashape.records import OpLibrary
from dynashape.ops_builtin import resize

from .common import F32, F64, FLOATS, PRIORITY, contiguous, lazy_import
from .tiering import compiled_ready

lib = OpLibrary()
#: the loops (:mod:`.loops.resize`), imported by the first call of one
loops = lazy_import(".loops.resize", __package__)


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
    if tables is None or not contiguous(x) or (not fresh and (out.dtype != x.dtype or not contiguous(out))) \
            or not compiled_ready():
        return resize._resize(inputs, outputs, plan)
    if fresh:
        out = np.empty(plan.out_shape, dtype=x.dtype)
    t = tables
    if t.nearest:
        loops.resize_nearest2d(x, out, t.hidx, t.widx, t.has_w)
    else:
        loops.resize_interp2d(x, out, t.hidx, t.hw, t.widx, t.ww, t.has_h, t.has_w)
    resize._apply_masks(out, plan)
    return [out] if fresh else None


lib.kernel("Resize", dtypes=FLOATS, priority=PRIORITY, prepare=_prepare)(_resize)
lib.kernel("Upsample", dtypes=FLOATS, priority=PRIORITY, prepare=_prepare)(_resize)
