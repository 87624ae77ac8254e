"""``Gelu``, ``FastGelu`` (tanh approximation, optional bias) and ``BiasGelu`` (``Gelu(A + B)``),
com.microsoft contrib ops. Source: ONNX Runtime contrib op docs (docs/ContribOperators.md).
"""
from __future__ import annotations

import numpy as np

from dynashape.records import OpLibrary, same_dtype
from dynashape.shapes import require

DOMAIN = "com.microsoft"
lib = OpLibrary()
_SQRT_2_OVER_PI = np.float32(0.7978845608028654)


def _erf(x: np.ndarray) -> np.ndarray:
    """Vectorised erf, Abramowitz & Stegun 7.1.26 (max abs error 1.5e-7), in float64."""
    x = x.astype(np.float64)
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


@lib.op("Gelu", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
@lib.op("FastGelu", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
@lib.op("BiasGelu", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _gelu_shape(ctx):
    """Output shape: input A's. A [..., N]; B [N], a bias added before the Gelu: required by
    BiasGelu, optional for FastGelu, absent for Gelu. Raises MissingInput, UnexpectedInput, and
    BiasShapeMismatch for a bias that is not 1-D of A's last dim (onnxruntime's contrib schemas
    and CPU kernels, bert_defs.cc / bias_gelu.cc / fast_gelu.cc)."""
    op = ctx.node.op_type
    if op == "BiasGelu" and not ctx.has_input(1):
        ctx.fail("input 1 (B, the bias) is required", kind="MissingInput")
    if op == "Gelu" and ctx.has_input(1):
        ctx.fail("Gelu takes one input (X); FastGelu or BiasGelu add a bias", kind="UnexpectedInput")
    a = ctx.shape(0)
    if ctx.has_input(1) and a is not None:
        b = ctx.shape(1)
        if b is not None and (len(a) == 0 or len(b) != 1):
            ctx.fail(f"the bias must be 1-D of A's last dim, got shape {tuple(b)} for A {tuple(a)}",
                     kind="BiasShapeMismatch")
        if b is not None:
            require(ctx, b[0], "==", a[-1], f"the bias has {b[0]} elements, A's last dim is {a[-1]}",
                    "BiasShapeMismatch")
    return [a]


def _with_bias(inputs):
    x = inputs[0]
    return x + inputs[1] if len(inputs) > 1 and inputs[1] is not None else x


@lib.kernel("Gelu", domain=DOMAIN, dtypes=[np.float32, np.float16])
@lib.kernel("BiasGelu", domain=DOMAIN, dtypes=[np.float32, np.float16])
def _gelu(inputs, outputs, ctx):
    x = _with_bias(inputs)
    np.copyto(outputs[0], 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0))), casting="unsafe")


@lib.kernel("FastGelu", domain=DOMAIN, dtypes=[np.float32, np.float16])
def _fast_gelu(inputs, outputs, ctx):
    x = _with_bias(inputs).astype(np.float32)
    inner = _SQRT_2_OVER_PI * (x + np.float32(0.044715) * x * x * x)
    np.copyto(outputs[0], 0.5 * x * (1.0 + np.tanh(inner)), casting="unsafe")
