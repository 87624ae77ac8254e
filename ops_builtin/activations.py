"""Activation functions: Relu, Sigmoid, HardSigmoid, HardSwish, LeakyRelu, Elu, Selu, Celu,
Softplus, Softsign, Mish, Gelu, PRelu, ThresholdedRelu, Swish, Shrink.

All are elementwise with the output shaped like X. Attributes are read in ``prepare``;
float16, bfloat16 and float8 inputs are computed in float32 (the kernels of priority 1
registered through :func:`dynashape.ops_builtin.elementwise.register_kernels`).

Source: ONNX operator spec (onnx/docs/Operators.md), e.g. Gelu-20, PRelu-16, Celu-12,
Swish-24 (x * sigmoid(alpha * x)), Shrink-9 (x + bias below -lambd, x - bias above lambd,
else 0; integer inputs are computed in float64 and truncated back, as onnxruntime does).
"""
from __future__ import annotations

import math

import numpy as np
from dynashape.records import OpLibrary, same_dtype
from dynashape.shapes import check_unidirectional

from .elementwise import _check_dtype, _check_same_dtype, erf_into, register_kernels

lib = OpLibrary()

__all__ = ["lib"]


def _same_shape(kind: str):
    def infer(ctx):
        _check_dtype(ctx, 0, kind)
        return [ctx.shape(0)]
    return infer


def _attrs(**defaults):
    """prepare(): the named float attributes (with defaults) as a tuple, in the given order."""
    def prepare(ctx):
        return tuple(float(ctx.attr(name, default)) for name, default in defaults.items())
    return prepare


def _activation(op_type: str, versions, fn, *, kind: str = "float", prepare=None) -> None:
    lib.op(op_type, versions, infer_dtype=same_dtype(0))(_same_shape(kind))
    register_kernels(lib, op_type, fn, prepare=prepare, may_inplace=((0, 0),))


# ---------------------------------------------------------------------------------
# the functions: fn(args, out, prepared); ``out`` may alias ``args[0]``
# ---------------------------------------------------------------------------------

def _relu(args, out, _):
    np.maximum(args[0], 0, out=out)


def _sigmoid(args, out, _):
    np.negative(args[0], out=out)   # exp overflow for very negative x gives the right limit 0
    np.exp(out, out=out)
    out += 1
    np.reciprocal(out, out=out)


def _hard_sigmoid_into(x, out, alpha, beta):
    np.multiply(x, alpha, out=out)
    out += beta
    np.clip(out, 0, 1, out=out)


def _hard_sigmoid(args, out, prep):
    _hard_sigmoid_into(args[0], out, *prep)


def _hard_swish(args, out, _):
    x = args[0]
    gate = np.empty_like(out)
    _hard_sigmoid_into(x, gate, 1.0 / 6.0, 0.5)
    np.multiply(x, gate, out=out)


def _slope_into(x, slope, out):
    """x where x >= 0, else slope * x: min(x, 0) * slope + max(x, 0) (NaN stays NaN)."""
    neg = np.minimum(x, 0)
    neg *= slope
    np.maximum(x, 0, out=out)
    out += neg


def _leaky_relu(args, out, prep):
    _slope_into(args[0], prep[0], out)


def _elu_into(x, out, alpha, scale_x=1.0):
    """max(x, 0) + alpha * (exp(min(x, 0) / scale_x) - 1)"""
    neg = np.minimum(x, 0, out=np.empty_like(out))   # (out=: a 0-d x would give a numpy scalar)
    if scale_x != 1.0:
        neg /= scale_x
    np.expm1(neg, out=neg)
    neg *= alpha
    np.maximum(x, 0, out=out)
    out += neg


def _elu(args, out, prep):
    _elu_into(args[0], out, prep[0])


def _selu(args, out, prep):
    alpha, gamma = prep
    _elu_into(args[0], out, alpha)
    out *= gamma


def _celu(args, out, prep):
    (alpha,) = prep
    _elu_into(args[0], out, alpha, scale_x=alpha)


def _softplus_into(x, out):
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), without overflow."""
    t = np.abs(x, out=np.empty_like(out))
    np.negative(t, out=t)
    np.exp(t, out=t)
    np.log1p(t, out=t)
    np.maximum(x, 0, out=out)
    out += t


def _softplus(args, out, _):
    _softplus_into(args[0], out)


def _softsign(args, out, _):
    x = args[0]
    den = np.abs(x, out=np.empty_like(out))
    den += 1
    np.divide(x, den, out=out)


def _mish(args, out, _):
    x = args[0]
    t = np.empty_like(out)
    _softplus_into(x, t)
    np.tanh(t, out=t)
    np.multiply(x, t, out=out)


_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_prepare(ctx):
    approximate = ctx.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        ctx.fail(f"approximate is {approximate!r}, expected 'none' or 'tanh'", kind="InvalidAttribute")
    return approximate == "tanh"


def _gelu_shape(ctx):
    _gelu_prepare(ctx)
    return _same_shape("float")(ctx)


def _gelu(args, out, use_tanh):
    x = args[0]
    if use_tanh:
        t = np.multiply(x, x, out=np.empty_like(out))
        t *= 0.044715
        t += 1
        t *= x
        t *= _SQRT_2_OVER_PI
        np.tanh(t, out=t)
    else:
        t = np.multiply(x, _SQRT_HALF, out=np.empty_like(out))
        erf_into(t, t)
    t += 1
    t *= 0.5
    np.multiply(x, t, out=out)


def _swish(args, out, prep):
    """x * sigmoid(alpha * x) = x / (1 + exp(-alpha * x)); ``out`` may alias x."""
    x, (alpha,) = args[0], prep
    t = np.multiply(x, -alpha, out=np.empty_like(out))
    np.exp(t, out=t)
    t += 1
    np.divide(x, t, out=out)


def _shrink(args, out, prep):
    """x + bias where x < -lambd, x - bias where x > lambd, else 0."""
    x, (bias, lambd) = args[0], prep
    if x.dtype.kind in "iu":
        x = x.astype(np.float64)
    res = np.where(x < -lambd, x + bias, 0)
    np.copyto(res, x - bias, where=x > lambd, casting="unsafe")
    np.copyto(out, res, casting="unsafe")


def _thresholded_relu(args, out, prep):
    x, (alpha,) = args[0], prep
    np.copyto(out, np.where(x > alpha, x, 0))


# ---------------------------------------------------------------------------------
# registration
# ---------------------------------------------------------------------------------

_activation("Relu", (1, 6, 13, 14), _relu, kind="numeric")
_activation("Sigmoid", (1, 6, 13), _sigmoid)
_activation("HardSigmoid", (1, 6, 22), _hard_sigmoid, prepare=_attrs(alpha=0.2, beta=0.5))
_activation("HardSwish", (14, 22), _hard_swish)
_activation("LeakyRelu", (1, 6, 16), _leaky_relu, prepare=_attrs(alpha=0.01))
_activation("Elu", (1, 6, 22), _elu, prepare=_attrs(alpha=1.0))
_activation("Selu", (1, 6, 22), _selu,
            prepare=_attrs(alpha=1.67326319217681884765625, gamma=1.05070102214813232421875))
_activation("Celu", (12, 28), _celu, prepare=_attrs(alpha=1.0))
_activation("Softplus", (1, 22), _softplus)
_activation("Softsign", (1, 22), _softsign)
_activation("Mish", (18, 22), _mish)
_activation("ThresholdedRelu", (10, 22), _thresholded_relu, prepare=_attrs(alpha=1.0))
_activation("Swish", 24, _swish, prepare=_attrs(alpha=1.0))
_activation("Shrink", 9, _shrink, kind="numeric", prepare=_attrs(bias=0.0, lambd=0.5))

lib.op("Gelu", 20, infer_dtype=same_dtype(0))(_gelu_shape)
register_kernels(lib, "Gelu", _gelu, prepare=_gelu_prepare, may_inplace=((0, 0),))


# PRelu ---------------------------------------------------------------------------

def _prelu_shape(ctx):
    """Y has X's shape; slope must broadcast unidirectionally to X (opset >= 7)."""
    _check_dtype(ctx, 0, "numeric")
    _check_same_dtype(ctx, (0, 1))
    x, slope = ctx.shape(0), ctx.shape(1)
    if x is None or slope is None or ctx.opset < 7:
        return [x]
    check_unidirectional(ctx, slope, x, "slope")
    return [x]


def _prelu_prepare(ctx):
    """Shape to reshape slope to: before opset 7 a 1-D slope of C values is per channel."""
    x, slope = ctx.shape(0), ctx.shape(1)
    if ctx.opset < 7 and len(slope) == 1 and len(x) >= 2 and slope[0] == x[1] and slope[0] != 1:
        return (slope[0],) + (1,) * (len(x) - 2)
    return None


def _prelu(args, out, slope_shape):
    x, slope = args
    if slope_shape is not None:
        slope = slope.reshape(slope_shape)
    _slope_into(x, slope, out)


lib.op("PRelu", (1, 6, 7, 9, 16), infer_dtype=same_dtype(0))(_prelu_shape)
register_kernels(lib, "PRelu", _prelu, prepare=_prelu_prepare, may_inplace=((0, 0),))
