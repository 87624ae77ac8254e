"""The loops of Softmax (last axis) and FusedAttention's scores: the row max (16 lanes), the
attention scores' scale / mask / max pass, the normalisation, and short rows' softmax in one
call; ReduceLogSumExp's rows in one pass; the kernels are :mod:`dynashape.ops_builtin.fast.softmax`."""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import JIT, MAX_JIT, SUM_JIT


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


@njit(**JIT)
def softmax_short_rows(x, out):
    """out = softmax of each row of x (rows, n), out may alias x: the max, exp and sum of a row
    in one call (a classifier's few classes, where three passes and numpy's exp cost more in
    calls than in arithmetic); a row holding a NaN or +inf is NaN, as in the passes."""
    rows, n = x.shape
    for r in range(rows):
        m = x[r, 0]
        for j in range(1, n):
            m = x[r, j] if x[r, j] > m else m
        s = 0.0
        for j in range(n):
            e = np.exp(x[r, j] - m)
            out[r, j] = e
            s += e
        inv = 1 / s
        for j in range(n):
            out[r, j] = out[r, j] * inv


@njit(**JIT)
def log_sum_exp_rows(x, out):
    """out[r] = log(sum(exp(x[r] - m))) + m over the rows of x (rows, n), m the row's max (0
    where it is +-inf: an all -inf row gives -inf, a row holding +inf gives +inf), summed in
    the input's dtype in order (as onnxruntime, and numpy over rows of fewer than 8); a row
    holding a NaN gives NaN."""
    rows, n = x.shape
    zero = np.zeros(1, x.dtype)[0]
    for r in range(rows):
        m = x[r, 0]
        for j in range(1, n):
            v = x[r, j]
            if v > m or v != v:
                m = v
        if m != m:
            out[r] = m
            continue
        shift = m if np.isfinite(m) else zero
        s = zero
        for j in range(n):
            s += np.exp(x[r, j] - shift)
        out[r] = np.log(s) + shift
