"""The compiled kernels: KernelDefs of priority 10 over the builtin numpy ones.

Each kernel prepares what its numpy kernel prepares (the same ``prepare`` and ``scratch``,
so the planned buffers are the same) plus what its loop needs, runs the compiled loop
(:mod:`dynashape.ops_fast.loops`) where the loop's assumptions hold (float32/float64,
contiguous arrays, the axis or layout it handles) and the numpy kernel otherwise, so a
node never fails here that would run there.

Covered: Erf and Gelu's erf form (float32: the numpy kernel's rational erf, vectorised),
LayerNormalization (trailing axes, one output: onnxruntime's formulation), Softmax (last
axis: max and sum compiled, numpy's SIMD exp), the fused ops of the builtin rewrites
(FusedMatMul's bias and Relu/Gelu in one pass after BLAS, FusedAttention's scale / mask /
max and normalisation between its two BLAS products, FusedConv's activation), depthwise
Conv / FusedConv (2-D, one filter per channel) and MaxPool (2-D, without Indices) as
direct loops, and LSTM's time loop (default activations, no clip or peepholes: one BLAS
product and one compiled pass per step). A regular Conv stays im2col + BLAS (the numpy kernel: its MLAS-ordered sums
keep QDQ models exact).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from dynashape.records import OpLibrary
from dynashape.ops_builtin import activations, elementwise, fusions, nn, reduction, rnn

from . import loops

lib = OpLibrary()

PRIORITY = 10
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_FLOATS = (np.float32, np.float64)
_EMPTY = {_F32: np.empty(0, _F32), _F64: np.empty(0, _F64)}


def _contiguous(*arrays) -> bool:
    return all(a is None or a.flags.c_contiguous for a in arrays)


def _epilogue_code(ctx) -> str:
    """Which compiled epilogue a fused node's activation has: "relu", "gelu" (erf form), ""
    (none) or "numpy" (the numpy epilogue runs after the compiled bias add)."""
    name = ctx.attr("activation", "")
    return {"": "", "Relu": "relu", "Gelu": "gelu"}.get(name, "numpy")


# Erf, Gelu -----------------------------------------------------------------------------

@lib.kernel("Erf", dtypes=[np.float32], priority=PRIORITY, may_inplace=((0, 0),))
def _erf(inputs, outputs, prepared):
    x, out = inputs[0], outputs[0]
    if _contiguous(x, out):
        loops.erf_f32(x, out)
    else:
        elementwise.erf_into(x, out)


@lib.kernel("Gelu", dtypes=[np.float32], priority=PRIORITY, prepare=activations._gelu_prepare,
            may_inplace=((0, 0),))
def _gelu(inputs, outputs, use_tanh):
    x, out = inputs[0], outputs[0]
    if not use_tanh and _contiguous(x, out):
        loops.gelu_f32(x, out)
    else:
        activations._gelu(inputs, out, use_tanh)


# LayerNormalization, Softmax -----------------------------------------------------------

@lib.kernel("LayerNormalization", dtypes=_FLOATS, priority=PRIORITY, prepare=nn._layer_norm_prepare,
            scratch=nn._layer_norm_scratch)
def _layer_norm(inputs, outputs, prepared):
    cdtype, axes, eps, n_out = prepared
    x, y = inputs[0], outputs[0]
    inner = math.prod(x.shape[axes[0]:]) if axes else 1
    scale = inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if (n_out == 1 and x.dtype == cdtype and y.dtype == cdtype and inner and _contiguous(x, y)
            and scale.size == inner and scale.dtype == cdtype and (bias is None or bias.size == inner)):
        b = _EMPTY[cdtype] if bias is None else np.ascontiguousarray(bias).reshape(-1)
        t = cdtype.type
        loops.layer_norm_rows(x.reshape(-1, inner), np.ascontiguousarray(scale).reshape(-1), b,
                              y.reshape(-1, inner), t(inner), t(eps), bias is not None)
        return
    nn._layer_norm(inputs, outputs, prepared)


@lib.kernel("Softmax", dtypes=_FLOATS, priority=PRIORITY, prepare=reduction._softmax_prepare,
            may_inplace=((0, 0),))
def _softmax(inputs, outputs, plan):
    """x - row max (compiled), numpy's SIMD exp in place, then sum and scale (compiled)."""
    x, out = inputs[0], outputs[0]
    shape = plan.shape2 or x.shape
    if (plan.work is None and x.size and plan.axis == len(shape) - 1 and x.dtype == out.dtype
            and _contiguous(x, out)):
        n = shape[-1]
        rows = out.reshape(-1, n)
        loops.sub_row_max(x.reshape(-1, n), rows)
        np.exp(rows, out=rows)
        loops.normalize_rows(rows)
        return
    reduction._run_softmax(reduction._softmax_body, inputs, outputs, plan)


# the fused ops of the builtin rewrites ----------------------------------------------------

class _MatMulPlan(NamedTuple):
    numpy: object          # fusions._MatMulPlan (trans_b, the numpy epilogue)
    epilogue: str          # see _epilogue_code


def _fused_matmul_prepare(ctx) -> _MatMulPlan:
    return _MatMulPlan(fusions._fused_matmul_prepare(ctx), _epilogue_code(ctx))


def _bias_and_activation(y: np.ndarray, bias, code: str, numpy_epilogue) -> None:
    """y (C-contiguous) = activation(y + bias) with one compiled pass where one exists."""
    rows = y.reshape(-1, y.shape[-1])
    b = _EMPTY[y.dtype] if bias is None else np.ascontiguousarray(bias)
    if code == "gelu" and y.dtype == _F32:
        loops.add_gelu_rows(rows, b, bias is not None)
    elif code == "relu":
        loops.add_relu_rows(rows, b, bias is not None)
    else:
        if bias is not None:
            loops.add_rows(rows, b)
        if numpy_epilogue is not None:
            numpy_epilogue(y)


@lib.kernel("FusedMatMul", domain=fusions.DOMAIN, dtypes=_FLOATS, priority=PRIORITY, prepare=_fused_matmul_prepare)
def _fused_matmul(inputs, outputs, p: _MatMulPlan):
    a, b, y = inputs[0], inputs[1], outputs[0]
    bias = inputs[2] if len(inputs) > 2 else None
    n = y.shape[-1] if y.ndim else 0
    if not (n and y.flags.c_contiguous and (bias is None or (bias.ndim == 1 and bias.shape[0] == n
                                                               and bias.dtype == y.dtype))):
        fusions._fused_matmul(inputs, outputs, p.numpy)
        return
    np.matmul(a, b.swapaxes(-1, -2) if p.numpy.trans_b else b, out=y)
    if bias is not None or p.epilogue:
        _bias_and_activation(y, bias, p.epilogue, p.numpy.epilogue)


@lib.kernel("FusedAttention", domain=fusions.DOMAIN, dtypes=_FLOATS, priority=PRIORITY,
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


# Conv (depthwise), FusedConv, MaxPool ---------------------------------------------------

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
    return _ConvPlan(numpy_plan, direct, _epilogue_code(ctx), fusions.epilogue(ctx))


def _conv(inputs, outputs, p: _ConvPlan) -> None:
    """Depthwise: the compiled direct loop (Relu in it); else the numpy kernel (im2col + BLAS
    in MLAS's blocks: a compiled im2col measured no faster than its strided copies). Then a
    FusedConv's activation, compiled where one exists."""
    x, w, y = inputs[0], inputs[1], outputs[0]
    bias = inputs[2] if len(inputs) > 2 else None
    if (p.direct is not None and x.dtype == y.dtype == w.dtype and (bias is None or bias.dtype == y.dtype)
            and _contiguous(x, w, y)):
        b = _EMPTY[y.dtype] if bias is None else np.ascontiguousarray(bias)
        loops.depthwise_conv2d(x, w, b, y, *p.direct, bias is not None, p.epilogue == "relu")
        if p.epilogue not in ("", "relu"):
            _bias_and_activation(y, None, p.epilogue, p.numpy_epilogue)
        return
    nn._conv(inputs, outputs, p.numpy)
    if p.epilogue and y.size:
        if y.flags.c_contiguous:
            _bias_and_activation(y, None, p.epilogue, p.numpy_epilogue)
        else:
            p.numpy_epilogue(y)


@lib.kernel("Conv", dtypes=_FLOATS, priority=PRIORITY, prepare=_conv_prepare, scratch=nn._conv_scratch)
def _conv_kernel(inputs, outputs, p: _ConvPlan):
    _conv(inputs, outputs, p)


@lib.kernel("FusedConv", domain=fusions.DOMAIN, dtypes=_FLOATS, priority=PRIORITY, prepare=_conv_prepare,
            scratch=nn._conv_scratch)
def _fused_conv_kernel(inputs, outputs, p: _ConvPlan):
    _conv(inputs, outputs, p)


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


@lib.kernel("MaxPool", dtypes=_FLOATS, priority=PRIORITY, prepare=_max_pool_prepare)
def _max_pool(inputs, outputs, p: _PoolPlan):
    x, y = inputs[0], outputs[0]
    if p.direct is not None and x.dtype == y.dtype and _contiguous(x, y) and y.size:
        loops.max_pool2d(x, y, *p.direct)
        return
    nn._max_pool(inputs, outputs, p.numpy)


# LSTM ----------------------------------------------------------------------------------

class _LSTMPlan(NamedTuple):
    numpy: object        # rnn._Plan
    compiled: bool       # LSTM's default activations, no clip, peepholes or input_forget


def _lstm_prepare(ctx) -> _LSTMPlan:
    plan = rnn._prepare(ctx)
    acts = ctx.attr("activations")
    default = not acts or [a.decode() if isinstance(a, bytes) else a for a in acts] == \
        ["Sigmoid", "Tanh", "Tanh"] * plan.num_directions
    peepholes = ctx.num_inputs > 7 and ctx.has_input(7)
    return _LSTMPlan(plan, default and plan.clip is None and not plan.input_forget and not peepholes)


#: cell elements per step (directions x batch x hidden) up to which the compiled time loop
#: wins: it saves ~20 numpy calls per step (~50 us) but computes sigmoid and tanh with
#: scalar libm calls (~100 ns per element for its 5 of them) where numpy's are SIMD
#: (benchmarks: lstm_small at batch 1 (128 elements) 1.27 -> 0.82 ms, at batch 8 (1024)
#: 19 -> 26 ms)
LSTM_COMPILED_MAX = 512


def _lstm_run(xw, step, h, c, mask, Y, plan):
    """The time loop: per step one BLAS ``h @ R^T`` and one compiled pass for the gates,
    the state update and this step of Y (the numpy loop makes ~20 calls per step); the
    numpy loop above LSTM_COMPILED_MAX cell elements per step."""
    if h.shape[0] * h.shape[1] * h.shape[2] > LSTM_COMPILED_MAX:
        return rnn._run(xw, step, h, c, mask, Y, plan)
    h = np.ascontiguousarray(h, dtype=plan.cdt).copy()
    c = np.ascontiguousarray(c, dtype=plan.cdt).copy()
    g = np.empty(h.shape[:2] + (step.Rt.shape[-1],), plan.cdt)
    no_y = np.empty((0, 0, 0), plan.cdt)
    no_mask = np.empty((0, 0), np.bool_)
    for t in range(xw.shape[0]):
        np.matmul(h, step.Rt, out=g)
        m = no_mask if mask is None else np.ascontiguousarray(mask[t][..., 0])
        loops.lstm_cell(g, np.ascontiguousarray(xw[t]), c, h, no_y if Y is None else Y[t], m, mask is not None)
    return h, c


@lib.kernel("LSTM", dtypes=_FLOATS, priority=PRIORITY, prepare=_lstm_prepare)
def _lstm(inputs, outputs, p: _LSTMPlan):
    return rnn._rnn_compute(inputs, outputs, p.numpy, run=_lstm_run if p.compiled else None)
