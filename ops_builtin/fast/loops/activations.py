"""The loops of Erf, Gelu (erf form) and the fused ops' epilogues (bias, Relu, Gelu in one
pass over the rows after BLAS); the kernels are :mod:`dynashape.ops_builtin.fast.activations`.

Transcendental functions are not vectorised by numba without Intel's SVML; erf here is the
numpy kernel's rational approximation (Eigen / XLA), which vectorises.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .common import JIT

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
