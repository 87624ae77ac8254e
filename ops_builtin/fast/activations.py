"""Erf, Gelu (erf form) and the epilogues of the fused ops (bias, Relu, Gelu in one pass),
and FusedMatMul: BLAS, then its bias and activation in one compiled pass. The loops are
:mod:`.loops.activations` (erf as the numpy kernel's rational approximation).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from dynashape.records import OpLibrary
from dynashape.ops_builtin import activations, elementwise, fusions

from .common import EMPTY, F32, FLOATS, PRIORITY, contiguous, lazy_import
from .tiering import compiled_ready

lib = OpLibrary()
#: the loops (:mod:`.loops.activations`), imported by the first call of one
loops = lazy_import(".loops.activations", __package__)


def epilogue_code(ctx) -> str:
    """Which compiled epilogue a fused node's activation has: "relu", "gelu" (erf form), ""
    (none) or "numpy" (the numpy epilogue runs after the compiled bias add)."""
    name = ctx.attr("activation", "")
    return {"": "", "Relu": "relu", "Gelu": "gelu"}.get(name, "numpy")


@lib.kernel("Erf", dtypes=[np.float32], priority=PRIORITY, may_inplace=((0, 0),))
def _erf(inputs, outputs, prepared):
    x, out = inputs[0], outputs[0]
    if contiguous(x, out) and compiled_ready():
        loops.erf_f32(x, out)
    else:
        elementwise.erf_into(x, out)


@lib.kernel("Gelu", dtypes=[np.float32], priority=PRIORITY, prepare=activations._gelu_prepare,
            may_inplace=((0, 0),))
def _gelu(inputs, outputs, use_tanh):
    x, out = inputs[0], outputs[0]
    if not use_tanh and contiguous(x, out) and compiled_ready():
        loops.gelu_f32(x, out)
    else:
        activations._gelu(inputs, out, use_tanh)


class _MatMulPlan(NamedTuple):
    numpy: object          # fusions._MatMulPlan (trans_b, the numpy epilogue)
    epilogue: str          # see epilogue_code


def _fused_matmul_prepare(ctx) -> _MatMulPlan:
    return _MatMulPlan(fusions._fused_matmul_prepare(ctx), epilogue_code(ctx))


def bias_and_activation(y: np.ndarray, bias, code: str, numpy_epilogue) -> None:
    """y (C-contiguous) = activation(y + bias) with one compiled pass where one exists."""
    if not compiled_ready():
        if bias is not None:
            y += bias
        if numpy_epilogue is not None:
            numpy_epilogue(y)
        return
    rows = y.reshape(-1, y.shape[-1])
    b = EMPTY[y.dtype] if bias is None else np.ascontiguousarray(bias)
    if code == "gelu" and y.dtype == F32:
        loops.add_gelu_rows(rows, b, bias is not None)
    elif code == "relu":
        loops.add_relu_rows(rows, b, bias is not None)
    else:
        if bias is not None:
            loops.add_rows(rows, b)
        if numpy_epilogue is not None:
            numpy_epilogue(y)


@lib.kernel("FusedMatMul", domain=fusions.DOMAIN, dtypes=FLOATS, priority=PRIORITY, prepare=_fused_matmul_prepare)
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
        bias_and_activation(y, bias, p.epilogue, p.numpy.epilogue)
