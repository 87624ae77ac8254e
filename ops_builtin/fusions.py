"""Fused operators the builtin rewrites make (domain ``dynashape``; no model contains them).

* ``FusedMatMul(A, B, bias?)``: ``activation(A @ B' + bias)`` with ``B' = B`` or, with
  ``transB=1``, B's last two axes swapped; numpy.matmul semantics (batch dims broadcast).
* ``FusedConv(X, W, B?)``: ``activation(Conv(X, W, B))`` with every Conv attribute.

``activation`` names the epilogue (``""`` for none) and ``activation_params`` its floats:
Relu, Sigmoid, Tanh, LeakyRelu (alpha), HardSigmoid (alpha, beta), HardSwish, Clip (min,
max), Gelu, GeluTanh (Gelu with approximate="tanh"), Swish (x * sigmoid(x)). Each is
computed in place on the output buffer, by the same function as the standalone ONNX op,
so a fused result equals the unfused one. float32 and float64 only (the rewrites check).

Source: the ONNX operator spec of MatMul-13, Conv-11 and each activation; onnxruntime's
com.microsoft FusedConv / FusedMatMul contrib ops are the model for the design.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import numpy as np
from dynashape.records import OpLibrary, same_dtype
from dynashape.shapes import check_unidirectional

from . import activations as act
from . import nn
from .linalg import _matmul_shape

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
    "Swish": (act._swish, lambda p: (1.0,)),
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
