"""Erf, Gelu (erf form) and the epilogues of the fused ops (bias, Relu, Gelu in one pass),
and FusedMatMul: BLAS, then its bias and activation in one compiled pass.

Transcendental functions are not vectorised by numba without Intel's SVML; erf here is the
numpy kernel's rational approximation (Eigen / XLA), which vectorises.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit
from dynashape.records import OpLibrary
from dynashape.ops_builtin import activations, elementwise, fusions

from .common import EMPTY, F32, FLOATS, JIT, PRIORITY, contiguous

lib = OpLibrary()

# float32 erf: the rational approximation of the numpy kernel (Eigen / XLA, clamped to [-4, 4])
A0, A1, A2, A3, A4, A5, A6 = (np.float32(c) for c in (
    -2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
    -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02))


B0, B1, B2, B3, B4 = (np.float32(c) for c in (
    -1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
    -1.42647390514189e-02))


SQRT_HALF32 = np.float32(math.sqrt(0.5))


ONE32, HALF32, FOUR32 = np.float32(1.0), np.float32(0.5), np.float32(4.0)


@njit(inline="always", **JIT)
def erf32(x):
    """The numpy kernel's float32 erf, step for step (elementwise._erf32)."""
    v = FOUR32 if x > FOUR32 else x
    v = -FOUR32 if v < -FOUR32 else v
    x2 = v * v
    p = A0 * x2 + A1
    p = p * x2 + A2
    p = p * x2 + A3
    p = p * x2 + A4
    p = p * x2 + A5
    p = p * x2 + A6
    q = B0 * x2 + B1
    q = q * x2 + B2
    q = q * x2 + B3
    q = q * x2 + B4
    return v * p / q


@njit(inline="always", **JIT)
def gelu32(v):
    """Gelu-20 (erf) in float32 as the numpy kernel computes it: x * ((erf(x / sqrt 2) + 1) * 0.5)."""
    return v * ((erf32(v * SQRT_HALF32) + ONE32) * HALF32)


@njit(**JIT)
def erf_f32(x, out):
    xf, of = x.reshape(-1), out.reshape(-1)
    for i in range(xf.size):
        of[i] = erf32(xf[i])


@njit(**JIT)
def gelu_f32(x, out):
    xf, of = x.reshape(-1), out.reshape(-1)
    for i in range(xf.size):
        of[i] = gelu32(xf[i])


@njit(**JIT)
def add_rows(y, bias):
    """y += bias over the rows of y (rows, n)."""
    rows, n = y.shape
    for r in range(rows):
        for j in range(n):
            y[r, j] += bias[j]


@njit(**JIT)
def add_gelu_rows(y, bias, has_bias):
    """y = Gelu(y + bias) over the rows of float32 y (rows, n)."""
    rows, n = y.shape
    for r in range(rows):
        for j in range(n):
            v = y[r, j] + bias[j] if has_bias else y[r, j]
            y[r, j] = gelu32(v)


@njit(**JIT)
def add_relu_rows(y, bias, has_bias):
    """y = max(y + bias, 0) over the rows of y (rows, n)."""
    rows, n = y.shape
    for r in range(rows):
        for j in range(n):
            v = y[r, j] + bias[j] if has_bias else y[r, j]
            y[r, j] = v if not v < 0 else 0.0


def epilogue_code(ctx) -> str:
    """Which compiled epilogue a fused node's activation has: "relu", "gelu" (erf form), ""
    (none) or "numpy" (the numpy epilogue runs after the compiled bias add)."""
    name = ctx.attr("activation", "")
    return {"": "", "Relu": "relu", "Gelu": "gelu"}.get(name, "numpy")


@lib.kernel("Erf", dtypes=[np.float32], priority=PRIORITY, may_inplace=((0, 0),))
def _erf(inputs, outputs, prepared):
    x, out = inputs[0], outputs[0]
    if contiguous(x, out):
        erf_f32(x, out)
    else:
        elementwise.erf_into(x, out)


@lib.kernel("Gelu", dtypes=[np.float32], priority=PRIORITY, prepare=activations._gelu_prepare,
            may_inplace=((0, 0),))
def _gelu(inputs, outputs, use_tanh):
    x, out = inputs[0], outputs[0]
    if not use_tanh and contiguous(x, out):
        gelu_f32(x, out)
    else:
        activations._gelu(inputs, out, use_tanh)


class _MatMulPlan(NamedTuple):
    numpy: object          # fusions._MatMulPlan (trans_b, the numpy epilogue)
    epilogue: str          # see _epilogue_code


def _fused_matmul_prepare(ctx) -> _MatMulPlan:
    return _MatMulPlan(fusions._fused_matmul_prepare(ctx), epilogue_code(ctx))


def bias_and_activation(y: np.ndarray, bias, code: str, numpy_epilogue) -> None:
    """y (C-contiguous) = activation(y + bias) with one compiled pass where one exists."""
    rows = y.reshape(-1, y.shape[-1])
    b = EMPTY[y.dtype] if bias is None else np.ascontiguousarray(bias)
    if code == "gelu" and y.dtype == F32:
        add_gelu_rows(rows, b, bias is not None)
    elif code == "relu":
        add_relu_rows(rows, b, bias is not None)
    else:
        if bias is not None:
            add_rows(rows, b)
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
