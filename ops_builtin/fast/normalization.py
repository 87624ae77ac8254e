"""LayerNormalization (one output) and RMSNormalization over their trailing axes, as
onnxruntime computes them (the loops: :mod:`.loops.normalization`): one pass per row where
the numpy kernels make five or six numpy calls (~20 us a call sequence at a decode step's
single row, several times the arithmetic)."""
from __future__ import annotations

import math

import numpy as np
from dynashape.records import OpLibrary
from dynashape.ops_builtin import nn
from dynashape.ops_builtin import normalization as builtin_normalization

from .common import EMPTY, FLOATS, PRIORITY, contiguous, lazy_import
from .tiering import compiled_ready

lib = OpLibrary()
#: the loop (:mod:`.loops.normalization`), imported by its first call
loops = lazy_import(".loops.normalization", __package__)


@lib.kernel("LayerNormalization", dtypes=FLOATS, priority=PRIORITY, prepare=nn._layer_norm_prepare,
            scratch=nn._layer_norm_scratch)
def _layer_norm(inputs, outputs, prepared):
    cdtype, axes, eps, n_out = prepared
    x, y = inputs[0], outputs[0]
    inner = math.prod(x.shape[axes[0]:]) if axes else 1
    scale = inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if (n_out == 1 and x.dtype == cdtype and y.dtype == cdtype and inner and contiguous(x, y)
            and scale.size == inner and scale.dtype == cdtype and (bias is None or bias.size == inner)
            and compiled_ready()):
        b = EMPTY[cdtype] if bias is None else np.ascontiguousarray(bias).reshape(-1)
        t = cdtype.type
        loops.layer_norm_rows(x.reshape(-1, inner), np.ascontiguousarray(scale).reshape(-1), b,
                              y.reshape(-1, inner), t(inner), t(eps), bias is not None)
        return
    nn._layer_norm(inputs, outputs, prepared)


def _scale_is_the_row(scale: np.ndarray, tail: tuple) -> bool:
    """scale (broadcastable to X, as inference checked) holds one value per element of a row:
    no more dims than the normalized axes, and as many elements (so every dim matches)."""
    return scale.ndim <= len(tail) and scale.size == math.prod(tail)


@lib.kernel("RMSNormalization", dtypes=FLOATS, priority=PRIORITY, prepare=builtin_normalization._rms_prepare)
def _rms_norm(inputs, outputs, prepared):
    cdtype, axes, eps = prepared
    x, y, scale = inputs[0], outputs[0], inputs[1]
    tail = x.shape[axes[0]:]
    inner = math.prod(tail)
    if (x.dtype == cdtype and y.dtype == cdtype and scale.dtype == cdtype and inner and contiguous(x, y)
            and _scale_is_the_row(scale, tail) and compiled_ready()):
        t = cdtype.type
        loops.rms_norm_rows(x.reshape(-1, inner), np.ascontiguousarray(scale).reshape(-1), y.reshape(-1, inner),
                            t(inner), t(eps))
        return
    builtin_normalization._rms(inputs, outputs, prepared)
