"""Conv and FusedConv: direct compiled loops where they beat im2col + BLAS."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from dynashape.records import OpLibrary
from dynashape.ops_builtin import fusions, nn

from .activations import bias_and_activation, epilogue_code
from .common import EMPTY, FLOATS, JIT, PRIORITY, contiguous, tap_span

lib = OpLibrary()


@njit(**JIT)
def depthwise_conv2d(x, w, bias, y, sh, sw, dh, dw, ph, pw, has_bias, relu):
    """Depthwise Conv (one filter per channel) of x (N, C, H, W) into y (N, C, OH, OW), the
    "taps" loop order: each output row accumulates one kernel tap at a time along its width
    (a vectorised inner loop when the stride is 1); ``relu`` applies max(y, 0) after."""
    n_, c_, h_, w_ = x.shape
    kh_, kw_ = w.shape[2], w.shape[3]
    oh_, ow_ = y.shape[2], y.shape[3]
    for n in range(n_):
        for c in range(c_):
            b = bias[c] if has_bias else 0.0   # (never derived from y: its bytes are garbage)
            for oh in range(oh_):
                row = y[n, c, oh]
                for ow in range(ow_):
                    row[ow] = b
                for kh in range(kh_):
                    ih = oh * sh - ph + kh * dh
                    if ih < 0 or ih >= h_:
                        continue
                    src = x[n, c, ih]
                    for kw in range(kw_):
                        off = kw * dw - pw
                        d0, s0, cnt = tap_span(off, sw, w_, ow_)
                        wv = w[c, 0, kh, kw]
                        if sw == 1:   # unit stride: the loop LLVM vectorises
                            for j in range(cnt):
                                row[d0 + j] += wv * src[s0 + j]
                        else:
                            for j in range(cnt):
                                row[d0 + j] += wv * src[s0 + j * sw]
                if relu:
                    for ow in range(ow_):
                        v = row[ow]
                        row[ow] = v if not v < 0 else 0.0


class _ConvPlan(NamedTuple):
    numpy: object            # the numpy kernel's plan (nn._ConvPlan)
    direct: tuple | None     # (sh, sw, dh, dw, ph, pw) when the depthwise loop applies
    epilogue: str            # see _epilogue_code ("" for a plain Conv)
    numpy_epilogue: object   # the numpy epilogue (fusions.Epilogue) of a FusedConv, or None


def _conv_prepare(ctx) -> _ConvPlan:
    numpy_plan = nn._conv_prepare(ctx)
    group, geom, out, (n, c, m, k), cdtype, mode = nn._conv_setup(ctx)
    direct = None
    if mode == "depthwise" and len(out) == 2 and geom.pads_begin is not None:
        direct = tuple(int(v) for v in (*geom.strides, *geom.dilations, *geom.pads_begin))
    return _ConvPlan(numpy_plan, direct, epilogue_code(ctx), fusions.epilogue(ctx))


def _conv(inputs, outputs, p: _ConvPlan) -> None:
    """Depthwise: the compiled direct loop (Relu in it); else the numpy kernel (im2col + BLAS
    in MLAS's blocks: a compiled im2col measured no faster than its strided copies). Then a
    FusedConv's activation, compiled where one exists."""
    x, w, y = inputs[0], inputs[1], outputs[0]
    bias = inputs[2] if len(inputs) > 2 else None
    if (p.direct is not None and x.dtype == y.dtype == w.dtype and (bias is None or bias.dtype == y.dtype)
            and contiguous(x, w, y)):
        b = EMPTY[y.dtype] if bias is None else np.ascontiguousarray(bias)
        depthwise_conv2d(x, w, b, y, *p.direct, bias is not None, p.epilogue == "relu")
        if p.epilogue not in ("", "relu"):
            bias_and_activation(y, None, p.epilogue, p.numpy_epilogue)
        return
    nn._conv(inputs, outputs, p.numpy)
    if p.epilogue and y.size:
        if y.flags.c_contiguous:
            bias_and_activation(y, None, p.epilogue, p.numpy_epilogue)
        else:
            p.numpy_epilogue(y)


@lib.kernel("Conv", dtypes=FLOATS, priority=PRIORITY, prepare=_conv_prepare, scratch=nn._conv_scratch)
def _conv_kernel(inputs, outputs, p: _ConvPlan):
    _conv(inputs, outputs, p)


@lib.kernel("FusedConv", domain=fusions.DOMAIN, dtypes=FLOATS, priority=PRIORITY, prepare=_conv_prepare,
            scratch=nn._conv_scratch)
def _fused_conv_kernel(inputs, outputs, p: _ConvPlan):
    _conv(inputs, outputs, p)
