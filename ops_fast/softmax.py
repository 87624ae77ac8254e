"""Softmax over the last axis and FusedAttention's scores: the row max and the normalisation
compiled, numpy's SIMD ``exp`` between them (numba has no vectorised exp without SVML)."""
from __future__ import annotations

import math

import numpy as np
from numba import njit
from dynashape.records import OpLibrary
from dynashape.ops_builtin import fusions, nn, reduction

from .common import FLOATS, MAX_JIT, PRIORITY, SUM_JIT, contiguous

lib = OpLibrary()


@njit(inline="always", **MAX_JIT)
def row_max(row, lanes):
    """The max of a 1-D row, 16 lanes at a time (``lanes``: a scratch array of 16): a plain
    running max is one long dependency chain that LLVM does not vectorise."""
    n = row.shape[0]
    if n < 16:
        m = row[0]
        for j in range(1, n):
            m = row[j] if row[j] > m else m
        return m
    for k in range(16):
        lanes[k] = row[k]
    n16 = (n // 16) * 16
    for j in range(16, n16, 16):
        for k in range(16):
            v = row[j + k]
            lanes[k] = v if v > lanes[k] else lanes[k]
    m = lanes[0]
    for k in range(1, 16):
        m = lanes[k] if lanes[k] > m else m
    for j in range(n16, n):
        m = row[j] if row[j] > m else m
    return m


@njit(**MAX_JIT)
def sub_row_max(x, out):
    """out = x - max of its row, over the rows of x (rows, n) (out may alias x)."""
    rows, n = x.shape
    lanes = np.empty(16, x.dtype)
    for r in range(rows):
        m = row_max(x[r], lanes)
        for j in range(n):
            out[r, j] = x[r, j] - m


@njit(**MAX_JIT)
def scale_mask_sub_max(scores, mask, scale, divide, has_mask):
    """The attention scores (rows, n) in place: * or / scale, + mask (rows, n, any strides),
    minus the row's max."""
    rows, n = scores.shape
    lanes = np.empty(16, scores.dtype)
    for r in range(rows):
        for j in range(n):
            v = scores[r, j] / scale if divide else scores[r, j] * scale
            scores[r, j] = v + mask[r, j] if has_mask else v
        m = row_max(scores[r], lanes)
        for j in range(n):
            scores[r, j] = scores[r, j] - m


@njit(**SUM_JIT)
def normalize_rows(e):
    """e /= the sum of its row (as a multiply by the reciprocal, as onnxruntime), over (rows, n)."""
    rows, n = e.shape
    for r in range(rows):
        s = 0.0
        for j in range(n):
            s += e[r, j]
        inv = 1 / s
        for j in range(n):
            e[r, j] = e[r, j] * inv


@lib.kernel("Softmax", dtypes=FLOATS, priority=PRIORITY, prepare=reduction._softmax_prepare,
            may_inplace=((0, 0),))
def _softmax(inputs, outputs, plan):
    """x - row max (compiled), numpy's SIMD exp in place, then sum and scale (compiled)."""
    x, out = inputs[0], outputs[0]
    shape = plan.shape2 or x.shape
    if (plan.work is None and x.size and plan.axis == len(shape) - 1 and x.dtype == out.dtype
            and contiguous(x, out)):
        n = shape[-1]
        rows = out.reshape(-1, n)
        sub_row_max(x.reshape(-1, n), rows)
        np.exp(rows, out=rows)
        normalize_rows(rows)
        return
    reduction._run_softmax(reduction._softmax_body, inputs, outputs, plan)


@lib.kernel("FusedAttention", domain=fusions.DOMAIN, dtypes=FLOATS, priority=PRIORITY,
            prepare=fusions._fused_attention_prepare, scratch=fusions._attention_scores_scratch)
def _fused_attention(inputs, outputs, p):
    """BLAS Q @ KT, one compiled pass (scale, mask, minus the row max), numpy's exp, one
    compiled pass (normalise), BLAS @ V."""
    q, kt, v = inputs[0], inputs[1], inputs[2]
    mask = inputs[3] if len(inputs) > 3 else None
    scores = nn._scratch(outputs, 1, math.prod(p.scores), q.dtype).reshape(p.scores)
    if not scores.size or (mask is not None and mask.dtype != q.dtype):
        fusions._fused_attention(inputs, outputs, p)
        return
    np.matmul(q, kt, out=scores)
    n = scores.shape[-1]
    flat = scores.reshape(-1, n)
    scale = scores.dtype.type(p.scale)
    if mask is None:
        scale_mask_sub_max(flat, flat, scale, p.divide, False)
    else:
        full = np.broadcast_to(mask, scores.shape)
        if full.flags.c_contiguous:
            scale_mask_sub_max(flat, full.reshape(-1, n), scale, p.divide, True)
        else:   # a broadcast mask (B, 1, 1, T): each block reads its 2-D view in place
            blocks = scores.reshape((-1,) + scores.shape[-2:])
            for i, idx in enumerate(np.ndindex(*scores.shape[:-2])):
                scale_mask_sub_max(blocks[i], full[idx], scale, p.divide, True)
    np.exp(flat, out=flat)
    normalize_rows(flat)
    np.matmul(scores, v, out=outputs[0])
