"""LayerNormalization over its trailing axes with one output, as onnxruntime computes it."""
from __future__ import annotations

import math

import numpy as np
from numba import njit
from dynashape.records import OpLibrary
from dynashape.ops_builtin import nn

from .common import EMPTY, FLOATS, JIT, PRIORITY, contiguous

lib = OpLibrary()


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


@lib.kernel("LayerNormalization", dtypes=FLOATS, priority=PRIORITY, prepare=nn._layer_norm_prepare,
            scratch=nn._layer_norm_scratch)
def _layer_norm(inputs, outputs, prepared):
    cdtype, axes, eps, n_out = prepared
    x, y = inputs[0], outputs[0]
    inner = math.prod(x.shape[axes[0]:]) if axes else 1
    scale = inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if (n_out == 1 and x.dtype == cdtype and y.dtype == cdtype and inner and contiguous(x, y)
            and scale.size == inner and scale.dtype == cdtype and (bias is None or bias.size == inner)):
        b = EMPTY[cdtype] if bias is None else np.ascontiguousarray(bias).reshape(-1)
        t = cdtype.type
        layer_norm_rows(x.reshape(-1, inner), np.ascontiguousarray(scale).reshape(-1), b,
                              y.reshape(-1, inner), t(inner), t(eps), bias is not None)
        return
    nn._layer_norm(inputs, outputs, prepared)
