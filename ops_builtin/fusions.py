"""Fused operators the builtin rewrites make (domain ``dynashape``; no model contains them).

* ``FusedMatMul(A, B, bias?)``: ``activation(A @ B' + bias)`` with ``B' = B`` or, with
  ``transB=1``, B's last two axes swapped; numpy.matmul semantics (batch dims broadcast).
* ``FusedConv(X, W, B?)``: ``activation(Conv(X, W, B))`` with every Conv attribute.
* ``FusedAttention(Q, KT, V, mask?)``: ``Softmax(Q @ KT * scale + mask) @ V`` (the scores
  in a scratch buffer), the attention core of exported transformers.

``activation`` names the epilogue (``""`` for none) and ``activation_params`` its floats:
Relu, Sigmoid, Tanh, LeakyRelu (alpha), HardSigmoid (alpha, beta), HardSwish, Clip (min,
max), Gelu, GeluTanh (Gelu with approximate="tanh"), Swish (alpha; ``x * Sigmoid(alpha * x)``,
SiLU at 1): the activations the rewrites absorb. Each is
computed in place on the output buffer, by the same function as the standalone ONNX op,
so a fused result equals the unfused one. float32 and float64 only (the rewrites check).

Source: the ONNX operator spec of MatMul-13, Conv-11 and each activation; onnxruntime's
com.microsoft FusedConv / FusedMatMul contrib ops are the model for the design.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import numpy as np
from dynashape.records import OpLibrary, same_dtype
from dynashape.shapes import check_unidirectional

from . import activations as act
from . import nn
from .linalg import _matmul_shape
from .reduction import _softmax_body

lib = OpLibrary()

DOMAIN = "dynashape"
_FLOATS = (np.float32, np.float64)


def _clip(args, out, prep):
    np.clip(args[0], prep[0], prep[1], out=out)


def _tanh(args, out, _):
    np.tanh(args[0], out=out)


#: activation name -> (fn(args, out, prepared) that may work in place, prepared from params)
EPILOGUES: dict[str, tuple[Callable, Callable]] = {
    "Relu": (act._relu, lambda p: None),
    "Sigmoid": (act._sigmoid, lambda p: None),
    "Tanh": (_tanh, lambda p: None),
    "LeakyRelu": (act._leaky_relu, lambda p: (p[0],)),
    "HardSigmoid": (act._hard_sigmoid, lambda p: (p[0], p[1])),
    "HardSwish": (act._hard_swish, lambda p: None),
    "Clip": (_clip, lambda p: (p[0], p[1])),
    "Gelu": (act._gelu, lambda p: False),
    "GeluTanh": (act._gelu, lambda p: True),
    "Swish": (act._swish, lambda p: (p[0] if p else 1.0,)),
}


class Epilogue(NamedTuple):
    fn: Callable
    prepared: object

    def __call__(self, y: np.ndarray) -> None:
        self.fn((y,), y, self.prepared)


def epilogue(ctx) -> Optional[Epilogue]:
    """The node's activation as a callable on the output buffer (None: no activation)."""
    name = ctx.attr("activation", "")
    if not name:
        return None
    if name not in EPILOGUES:
        ctx.fail(f"activation {name!r} is not one of {sorted(EPILOGUES)}", kind="InvalidAttribute")
    fn, prep = EPILOGUES[name]
    return Epilogue(fn, prep([float(v) for v in ctx.attr("activation_params", [])]))


# FusedMatMul -------------------------------------------------------------------------

def _b_shape(ctx):
    b = ctx.shape(1)
    if b is not None and ctx.attr("transB", 0):
        if len(b) < 2:
            ctx.fail("transB needs B of rank >= 2", kind="InvalidRank")
        b = tuple(b[:-2]) + (b[-1], b[-2])
    return b


@lib.op("FusedMatMul", 1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _fused_matmul_shape(ctx):
    """FusedMatMul: activation(A @ B' + bias); shapes as MatMul's, bias broadcasts to Y
    unidirectionally. Dtypes: float32/float64. Raises as MatMul, BroadcastMismatch for bias.
    Source: ONNX MatMul-13 plus the activation's own section."""
    y = _matmul_shape(ctx, ctx.shape(0), _b_shape(ctx))
    epilogue(ctx)
    if ctx.has_input(2) and y is not None and ctx.shape(2) is not None:
        check_unidirectional(ctx, ctx.shape(2), y, "bias")
    return [y]


class _MatMulPlan(NamedTuple):
    trans_b: bool
    epilogue: Optional[Epilogue]


def _fused_matmul_prepare(ctx) -> _MatMulPlan:
    return _MatMulPlan(bool(ctx.attr("transB", 0)), epilogue(ctx))


@lib.kernel("FusedMatMul", domain=DOMAIN, dtypes=_FLOATS, prepare=_fused_matmul_prepare)
def _fused_matmul(inputs, outputs, p: _MatMulPlan):
    a, b = inputs[0], inputs[1]
    y = outputs[0]
    np.matmul(a, b.swapaxes(-1, -2) if p.trans_b else b, out=y)
    if len(inputs) > 2 and inputs[2] is not None:
        np.add(y, inputs[2], out=y)
    if p.epilogue is not None:
        p.epilogue(y)


# FusedConv ---------------------------------------------------------------------------

@lib.op("FusedConv", 1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _fused_conv_shape(ctx):
    """FusedConv: activation(Conv(X, W, B)); shapes, attributes and errors as Conv-11.
    Source: ONNX Conv-11 plus the activation's own section."""
    epilogue(ctx)
    return nn._conv_shape(ctx)


class _ConvPlan(NamedTuple):
    conv: object
    epilogue: Optional[Epilogue]


def _fused_conv_prepare(ctx) -> _ConvPlan:
    return _ConvPlan(nn._conv_prepare(ctx), epilogue(ctx))


@lib.kernel("FusedConv", domain=DOMAIN, dtypes=_FLOATS, prepare=_fused_conv_prepare, scratch=nn._conv_scratch)
def _fused_conv(inputs, outputs, p: _ConvPlan):
    nn._conv(inputs, outputs, p.conv)
    if p.epilogue is not None:
        p.epilogue(outputs[0])


# FusedAttention ----------------------------------------------------------------------

@lib.op("FusedAttention", 1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _fused_attention_shape(ctx):
    """FusedAttention(Q, KT, V, mask?): Softmax(scale(Q @ KT) + mask, last axis) @ V, the
    attention core exporters write as MatMul -> Mul/Div -> Add -> Softmax -> MatMul.

    ``scale`` multiplies the scores (``divide=1``: divides them by it), as the matched Mul
    or Div did. ``perm_k`` (optional): input 1 is read through ``Transpose(perm=perm_k)``,
    a view: the Transpose that made KT from K (``[0, 1, 3, 2]`` of a (B, H, T, D) cache,
    ``[0, 2, 3, 1]`` of a (B, T, H, D) projection) is absorbed, never copied. Shapes: Q
    (..., S, D), KT (..., D, T), V (..., T, Dv) -> (..., S, Dv); the mask broadcasts to the
    scores (..., S, T) unidirectionally. Dtypes: float32/float64. Source: ONNX MatMul-13,
    Softmax-13, Transpose-13 (Attention-23 is the same computation with K not transposed
    and its own mask forms)."""
    scores = _matmul_shape(ctx, ctx.shape(0), _kt_shape(ctx))
    if ctx.has_input(3) and scores is not None and ctx.shape(3) is not None:
        check_unidirectional(ctx, ctx.shape(3), scores, "mask")
    return [_matmul_shape(ctx, scores, ctx.shape(2))]


def _kt_shape(ctx) -> Optional[tuple]:
    """KT's shape: input 1's, permuted by ``perm_k`` when there is one."""
    k, perm = ctx.shape(1), ctx.attr("perm_k", None)
    if k is None or perm is None:
        return k
    if sorted(perm) != list(range(len(k))):
        ctx.fail(f"perm_k {list(perm)} is not a permutation of the {len(k)} axes of input 1 {tuple(k)}",
                 kind="InvalidAttribute")
    return tuple(k[i] for i in perm)


def attention_kt(k: np.ndarray, perm_k: Optional[tuple]) -> np.ndarray:
    """KT from FusedAttention's input 1: a transposed view of it under ``perm_k``."""
    return k if perm_k is None else k.transpose(perm_k)


def _scores_shape(ctx) -> tuple:
    from dynashape.shapes import broadcast_shapes

    q, kt = ctx.shape(0), _kt_shape(ctx)
    return broadcast_shapes(ctx, tuple(q[:-2]), tuple(kt[:-2])) + (q[-2], kt[-1])


def _attention_scores_scratch(ctx) -> list:
    """The scores (..., S, T) in the input dtype: planned in the arena for the step."""
    return [(_scores_shape(ctx), ctx.dtype(0))]


class _AttentionPlan(NamedTuple):
    scale: float
    divide: bool
    scores: tuple   # the scores' shape
    perm_k: Optional[tuple]   # input 1 read through this transpose (None: it is KT)


def _fused_attention_prepare(ctx) -> _AttentionPlan:
    perm = ctx.attr("perm_k", None)
    return _AttentionPlan(float(ctx.attr("scale", 1.0)), bool(ctx.attr("divide", 0)), _scores_shape(ctx),
                          None if perm is None else tuple(int(a) for a in perm))


@lib.kernel("FusedAttention", domain=DOMAIN, dtypes=_FLOATS, prepare=_fused_attention_prepare,
            scratch=_attention_scores_scratch)
def _fused_attention(inputs, outputs, p: _AttentionPlan):
    """The same operations as the unfused nodes, in their order, on one scores buffer."""
    q, kt, v = inputs[0], attention_kt(inputs[1], p.perm_k), inputs[2]
    mask = inputs[3] if len(inputs) > 3 else None
    scores = nn._scratch(outputs, 1, math.prod(p.scores), q.dtype).reshape(p.scores)
    np.matmul(q, kt, out=scores)
    if p.divide:
        np.divide(scores, scores.dtype.type(p.scale), out=scores)
    elif p.scale != 1.0:
        np.multiply(scores, scores.dtype.type(p.scale), out=scores)
    if mask is not None:
        np.add(scores, mask, out=scores)
    if scores.size:
        _softmax_body(scores, scores, scores.ndim - 1)
    np.matmul(scores, v, out=outputs[0])
