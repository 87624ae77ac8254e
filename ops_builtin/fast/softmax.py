"""Softmax over the last axis and FusedAttention's scores: the row max and the normalisation
compiled (:mod:`.loops.softmax`), numpy's SIMD ``exp`` between them (numba has no vectorised
exp without SVML). ReduceLogSumExp over trailing axes: each row's max, sum of exps and log in
one compiled pass (the numpy kernel makes ~9 calls: at a classifier's few classes per row
they, not the arithmetic, are the cost)."""
from __future__ import annotations

import math

import numpy as np
from dynashape.records import OpLibrary
from dynashape.ops_builtin import fusions, nn, reduction

from .common import FLOATS, PRIORITY, contiguous, lazy_import
from .tiering import compiled_ready

lib = OpLibrary()
#: rows shorter than this run one compiled call per array (max, exp and sum per row): numpy's
#: SIMD exp pays from about here (a 1 x 3 softmax: ~2 us for the three passes' calls)
SHORT_ROW = 8
#: the loops (:mod:`.loops.softmax`), imported by the first call of one
loops = lazy_import(".loops.softmax", __package__)


@lib.kernel("Softmax", dtypes=FLOATS, priority=PRIORITY, prepare=reduction._softmax_prepare,
            may_inplace=((0, 0),))
def _softmax(inputs, outputs, plan):
    """x - row max (compiled), numpy's SIMD exp in place, then sum and scale (compiled); rows
    shorter than SHORT_ROW in one compiled call."""
    x, out = inputs[0], outputs[0]
    shape = plan.shape2 or x.shape
    if (plan.work is None and x.size and plan.axis == len(shape) - 1 and x.dtype == out.dtype
            and contiguous(x, out) and compiled_ready()):
        n = shape[-1]
        rows = out.reshape(-1, n)
        if n < SHORT_ROW:
            loops.softmax_short_rows(x.reshape(-1, n), rows)
            return
        loops.sub_row_max(x.reshape(-1, n), rows)
        np.exp(rows, out=rows)
        loops.normalize_rows(rows)
        return
    reduction._run_softmax(reduction._softmax_body, inputs, outputs, plan)


@lib.kernel("FusedAttention", domain=fusions.DOMAIN, dtypes=FLOATS, priority=PRIORITY,
            prepare=fusions._fused_attention_prepare, scratch=fusions._attention_scores_scratch)
def _fused_attention(inputs, outputs, p):
    """BLAS Q @ KT, one compiled pass (scale, mask, minus the row max), numpy's exp, one
    compiled pass (normalise), BLAS @ V."""
    q, kt, v = inputs[0], fusions.attention_kt(inputs[1], p.perm_k), inputs[2]
    mask = inputs[3] if len(inputs) > 3 else None
    scores = nn._scratch(outputs, 1, math.prod(p.scores), q.dtype).reshape(p.scores)
    if not scores.size or (mask is not None and mask.dtype != q.dtype) or not compiled_ready():
        fusions._fused_attention(inputs, outputs, p)
        return
    np.matmul(q, kt, out=scores)
    n = scores.shape[-1]
    flat = scores.reshape(-1, n)
    scale = scores.dtype.type(p.scale)
    if mask is None:
        loops.scale_mask_sub_max(flat, flat, scale, p.divide, False)
    else:
        full = np.broadcast_to(mask, scores.shape)
        if full.flags.c_contiguous:
            loops.scale_mask_sub_max(flat, full.reshape(-1, n), scale, p.divide, True)
        else:   # a broadcast mask (B, 1, 1, T): each block reads its 2-D view in place
            blocks = scores.reshape((-1,) + scores.shape[-2:])
            for i, idx in enumerate(np.ndindex(*scores.shape[:-2])):
                loops.scale_mask_sub_max(blocks[i], full[idx], scale, p.divide, True)
    np.exp(flat, out=flat)
    loops.normalize_rows(flat)
    np.matmul(scores, v, out=outputs[0])


@lib.kernel("ReduceLogSumExp", dtypes=FLOATS, priority=PRIORITY,
            prepare=reduction.reduce_prepare("ReduceLogSumExp"))
def _reduce_log_sum_exp(inputs, outputs, prepared):
    """Over the trailing axes of a C-contiguous float32/float64 input known when prepared: one
    compiled pass per row (:func:`.loops.softmax.log_sum_exp_rows`); the numpy kernel otherwise."""
    x, out = inputs[0], outputs[0]
    plan = prepared["plan"]
    if (plan is not None and plan.axes and not plan.empty and plan.work is None and x.size and out is not None
            and out.dtype == x.dtype and plan.axes == tuple(range(x.ndim - len(plan.axes), x.ndim))
            and contiguous(x, out) and compiled_ready()):
        n = math.prod(x.shape[x.ndim - len(plan.axes):])
        loops.log_sum_exp_rows(x.reshape(-1, n), out.reshape(-1))
        return None
    return reduction._run_reduce(reduction._log_sum_exp, inputs, outputs, prepared)
