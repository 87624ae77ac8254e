"""The LayerNormalization and RMSNormalization loops (rows of the trailing axes,
onnxruntime's formulations); the kernels are :mod:`dynashape.ops_builtin.fast.normalization`."""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import JIT, SUM_JIT


@njit(**JIT)
def layer_norm_rows(x, scale, bias, out, n_f, eps, has_bias):
    """LayerNormalization over rows of x (rows, n) as onnxruntime's CPU kernel computes it
    (layer_norm_impl.cc): in x's dtype, sum and sum of squares accumulated in order,
    std = sqrt(E[x^2] - mean^2 + eps), y = (x - mean) / std * scale + bias. ``n_f`` and
    ``eps`` come in x's dtype."""
    rows, n = x.shape
    zero = n_f - n_f
    for r in range(rows):
        s = zero
        ss = zero
        for j in range(n):
            v = x[r, j]
            s += v
            ss += v * v
        mean = s / n_f
        std = np.sqrt(ss / n_f - mean * mean + eps)
        for j in range(n):
            v = (x[r, j] - mean) / std * scale[j]
            if has_bias:
                v += bias[j]
            out[r, j] = v


@njit(**SUM_JIT)
def rms_norm_rows(x, scale, out, n_f, eps):
    """RMSNormalization over rows of x (rows, n): y = x / sqrt(E[x^2] + eps) * scale, the
    mean of squares accumulated in x's dtype (reassociated into vector lanes, as
    onnxruntime's SIMD sum), ``n_f`` and ``eps`` in x's dtype."""
    rows, n = x.shape
    zero, one = n_f - n_f, n_f / n_f   # (in x's dtype: a literal 1 would make the row's scale float64)
    for r in range(rows):
        ss = zero
        for j in range(n):
            v = x[r, j]
            ss += v * v
        inv = one / np.sqrt(ss / n_f + eps)
        for j in range(n):
            out[r, j] = x[r, j] * inv * scale[j]
