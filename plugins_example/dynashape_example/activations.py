"""com.microsoft activations and fused element-wise ops: ``QuickGelu``, ``BiasAdd``,
``BiasSplitGelu``, ``FusedMatMul``, ``SparseToDenseMatMul``; and one kernel for the builtin
``ai.onnx`` ``Softmax`` that shows how kernel priority works.

Source: ONNX Runtime contrib op docs (docs/ContribOperators.md in microsoft/onnxruntime),
sections ``com.microsoft.QuickGelu``, ``com.microsoft.BiasAdd``, ``com.microsoft.BiasSplitGelu``
and ``com.microsoft.FusedMatMul``; what the docs leave open follows ONNX Runtime's kernels
and was checked against onnxruntime 1.32: the CPU kernels of QuickGelu
(onnxruntime/contrib_ops/cpu/activations.cc) and FusedMatMul
(onnxruntime/core/providers/cpu/math/matmul.cc, matmul_helper.h); BiasAdd and BiasSplitGelu
have CUDA kernels only (onnxruntime/contrib_ops/cuda/diffusion/bias_add.cc,
bias_split_gelu.cc), whose arithmetic these CPU kernels reproduce.

The transcendental functions are accurate to float32 rounding: QuickGelu's logistic is
``1 / (1 + exp(-alpha x))`` (onnxruntime's MLAS approximation is off by up to ~2e-5
relative), BiasSplitGelu's ``1 + erf`` an erfc approximation with a relative error below
1.2e-7 (no loss in the Gelu's negative tail).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from dynashape.records import OpLibrary, same_dtype
from dynashape.shapes import broadcast_shapes, check_dims_equal, normalize_axis

DOMAIN = "com.microsoft"
#: QuickGelu's default alpha (the contrib schema's)
DEFAULT_QUICK_GELU_ALPHA = 1.702
_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
_SQRT_HALF = 0.7071067811865476

lib = OpLibrary()


#: Chebyshev coefficients of erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), z >= 0: fractional
#: error below 1.2e-7 everywhere (Press et al., Numerical Recipes, 2nd ed., section 6.2)
_ERFC_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
                1.48851587, -0.82215223, 0.17087277)


def _one_plus_erf(z: np.ndarray) -> np.ndarray:
    """1 + erf(z) in float64, with a relative error below 1.2e-7 also where it is tiny (z very
    negative: erfc(-z)), so Gelu(r) = 0.5 r (1 + erf(r / sqrt 2)) keeps its digits in the tail."""
    z = np.asarray(z, dtype=_F64)
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.5 * a)
    poly = np.full_like(t, _ERFC_COEFFS[-1])
    for c in _ERFC_COEFFS[-2::-1]:       # Horner over the 10 coefficients (not over elements)
        poly *= t
        poly += c
    erfc = t * np.exp(poly - a * a)
    return np.where(z < 0, erfc, 2.0 - erfc)


def _compute_dtype(dt: np.dtype) -> np.dtype:
    """float64 computes in float64; float32 and float16 in float32 (float16 rounds once at the end)."""
    return _F64 if np.dtype(dt) == _F64 else _F32


def _check_dtype(ctx, i: int, allowed: tuple, what: str) -> None:
    dt = ctx.dtype(i)
    if dt is not None and np.dtype(dt) not in allowed:
        want = ", ".join(np.dtype(a).name for a in allowed)
        ctx.fail(f"{what} has dtype {dt}, expected one of {want}", kind="InvalidDtype")


def _check_rank(ctx, i: int, rank: int, what: str):
    s = ctx.shape(i)
    if s is not None and len(s) != rank:
        ctx.fail(f"{what} must have rank {rank}, got rank {len(s)}", kind="InvalidRank")
    return s


def _require(ctx, n: int, names: str) -> None:
    for i, name in enumerate(names.split()[:n]):
        if not ctx.has_input(i):
            ctx.fail(f"input {i} ({name}) is required", kind="MissingInput")


# QuickGelu -------------------------------------------------------------------------------

@lib.op("QuickGelu", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _quick_gelu_shape(ctx):
    """QuickGelu: ``Y = X * Sigmoid(alpha * X)`` element-wise; Y has X's shape and dtype.

    X: float32, float16 or float64 (float16 computes in float32, rounded once). Attribute
    alpha (float, default 1.702). Raises ShapeInferenceError for another dtype.
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.QuickGelu (the
    default alpha is the contrib schema's, onnxruntime/core/graph/contrib_ops/bert_defs.cc).
    """
    _require(ctx, 1, "X")
    _check_dtype(ctx, 0, (_F32, _F16, _F64), "X")
    return [ctx.shape(0)]


def _quick_gelu_prepare(ctx) -> float:
    return float(ctx.attr("alpha", DEFAULT_QUICK_GELU_ALPHA))


@lib.kernel("QuickGelu", domain=DOMAIN, dtypes=[np.float32, np.float16, np.float64], prepare=_quick_gelu_prepare)
def _quick_gelu(inputs, outputs, alpha):
    """x / (1 + exp(-alpha x)): exp overflowing to inf for very negative alpha x gives the
    limit (a signed zero), as the logistic of ONNX Runtime's kernel does."""
    x, y = inputs[0], outputs[0]
    cdt = _compute_dtype(x.dtype)
    xc = x if x.dtype == cdt else x.astype(cdt)
    z = np.multiply(xc, cdt.type(-alpha), out=np.empty(xc.shape, cdt))   # (out=: a 0-d X gives an array too)
    np.exp(z, out=z)
    z += cdt.type(1)
    if y.dtype == cdt:
        np.divide(xc, z, out=y)
    else:
        np.divide(xc, z, out=z)
        np.copyto(y, z, casting="unsafe")


# BiasAdd ---------------------------------------------------------------------------------

@lib.op("BiasAdd", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _bias_add_shape(ctx):
    """BiasAdd: ``Y = (X + bias) + skip``, the bias and residual add of diffusion models' UNet.

    Inputs: X (N, S, C), bias (C), skip (N, S, C), all float32 or all float16 (each add
    rounded in the dtype, as ONNX Runtime's CUDA kernel, the only one it has). Output Y
    (N, S, C), X's dtype. Raises ShapeInferenceError for other ranks or dtypes, a bias of
    another length than C or a skip of another shape than X.
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.BiasAdd; the shape
    rules are those of contrib_ops/cuda/diffusion/bias_add.cc (which also limits C to 320,
    640 and 1280 for its fast path only: any C is accepted here).
    """
    _require(ctx, 3, "X bias skip")
    for i, what in ((0, "X"), (1, "bias"), (2, "skip")):
        _check_dtype(ctx, i, (_F32, _F16), what)
    if ctx.dtype(0) is not None:
        for i, what in ((1, "bias"), (2, "skip")):
            if ctx.dtype(i) is not None and np.dtype(ctx.dtype(i)) != np.dtype(ctx.dtype(0)):
                ctx.fail(f"{what} has dtype {ctx.dtype(i)}, X has {ctx.dtype(0)}: they must be equal",
                         kind="InvalidDtype")
    x = _check_rank(ctx, 0, 3, "X")
    bias = _check_rank(ctx, 1, 1, "bias")
    skip = _check_rank(ctx, 2, 3, "skip")
    if x is None:
        return [None]
    if bias is not None:
        check_dims_equal(ctx, bias[0], x[2], "bias length vs the channels of X (dim 2)")
    if skip is not None:
        for k in range(3):
            check_dims_equal(ctx, skip[k], x[k], f"skip dim {k} vs X dim {k} (skip must have X's shape)")
    return [tuple(x)]


@lib.kernel("BiasAdd", domain=DOMAIN, dtypes=[np.float32, np.float16])
def _bias_add(inputs, outputs, ctx):
    y = outputs[0]
    np.add(inputs[0], inputs[1], out=y)
    np.add(y, inputs[2], out=y)


# BiasSplitGelu ---------------------------------------------------------------------------

@lib.op("BiasSplitGelu", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _bias_split_gelu_shape(ctx):
    """BiasSplitGelu: ``h = X + bias`` split in halves along the last axis,
    ``Y = h[..., :D/2] * Gelu(h[..., D/2:])`` with the exact (erf) Gelu.

    Inputs: X (N, S, D), bias (D), float32 or float16, D even. Output Y (N, S, D/2), X's
    dtype. Arithmetic as ONNX Runtime's CUDA kernel (the only one it has): X + bias in the
    dtype, the Gelu and the product in float32, rounded once. Raises ShapeInferenceError for
    other ranks or dtypes, a bias of another length than D, or an odd D (symbolic D: checked
    for each new shape).
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.BiasSplitGelu; the
    shape rules are those of contrib_ops/cuda/diffusion/bias_split_gelu.cc and the contrib
    schema (onnxruntime/core/graph/contrib_ops/diffusion_defs.cc); the CUDA kernel limits D to
    2560, 5120 and 10240, any even D is accepted here.
    """
    _require(ctx, 2, "X bias")
    for i, what in ((0, "X"), (1, "bias")):
        _check_dtype(ctx, i, (_F32, _F16), what)
    if ctx.dtype(0) is not None and ctx.dtype(1) is not None and np.dtype(ctx.dtype(0)) != np.dtype(ctx.dtype(1)):
        ctx.fail(f"bias has dtype {ctx.dtype(1)}, X has {ctx.dtype(0)}: they must be equal", kind="InvalidDtype")
    x = _check_rank(ctx, 0, 3, "X")
    bias = _check_rank(ctx, 1, 1, "bias")
    if x is None:
        return [None]
    hidden = x[2]
    if bias is not None:
        check_dims_equal(ctx, bias[0], hidden, "bias length vs the hidden size of X (dim 2)")
    if not ctx.assume(hidden % 2, "==", 0):
        ctx.fail(f"the hidden size {hidden} (dim 2 of X) must be even to split it in halves", kind="OddHiddenSize")
    return [(x[0], x[1], hidden // 2)]


@lib.kernel("BiasSplitGelu", domain=DOMAIN, dtypes=[np.float32, np.float16])
def _bias_split_gelu(inputs, outputs, ctx):
    x, bias = inputs[0], inputs[1]
    y = outputs[0]
    half = x.shape[-1] // 2
    h = np.add(x, bias)                          # in the input dtype, as the CUDA kernel
    if h.dtype != _F32:
        h = h.astype(_F32)
    left, right = h[..., :half], h[..., half:]
    gelu = np.multiply(right, np.float32(0.5))
    gelu *= _one_plus_erf(right * np.float32(_SQRT_HALF)).astype(_F32)
    if y.dtype == _F32:
        np.multiply(left, gelu, out=y)
    else:
        np.multiply(left, gelu, out=gelu)
        np.copyto(y, gelu, casting="unsafe")


# FusedMatMul -----------------------------------------------------------------------------

class _FusedMatMulPlan(NamedTuple):
    alpha: float
    trans_a: bool
    trans_b: bool
    trans_batch_a: bool
    trans_batch_b: bool


def _fused_matmul_attrs(ctx) -> _FusedMatMulPlan:
    return _FusedMatMulPlan(float(ctx.attr("alpha", 1.0)), bool(int(ctx.attr("transA", 0))),
                            bool(int(ctx.attr("transB", 0))), bool(int(ctx.attr("transBatchA", 0))),
                            bool(int(ctx.attr("transBatchB", 0))))


def _effective(shape: tuple, trans: bool, trans_batch: bool) -> tuple:
    """The operand's shape as multiplied: a vector as is (transposes do nothing to it); with
    transBatch, dim 0 moved to the matrix rows ([b1, ..., bn, d0, dlast]); with trans, the
    last two dims swapped."""
    if len(shape) < 2:
        return tuple(shape)
    if trans_batch:
        shape = tuple(shape[1:-1]) + (shape[0], shape[-1])
    if trans:
        shape = tuple(shape[:-2]) + (shape[-1], shape[-2])
    return tuple(shape)


@lib.op("FusedMatMul", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _fused_matmul_shape(ctx):
    """FusedMatMul: ``Y = alpha * A' @ B'`` (numpy.matmul rules: 1-D operands promoted, batch
    dims broadcast), where ``A'`` is A with, for ``transBatchA``, dim 0 moved behind the batch
    dims (A of shape [M, b1, ..., bn, K] multiplied as [b1, ..., bn, M, K]) and then, for
    ``transA``, its last two dims swapped; likewise B'.

    Inputs: A, B of the same dtype (float32, float16 or float64; float16 multiplies in
    float32, alpha applied in float32, rounded once: what onnxruntime 1.32 returns).
    Attributes: alpha (float, default 1), transA, transB, transBatchA, transBatchB (ints,
    default 0). transA / transB do nothing to a 1-D operand. transBatchA or transBatchB needs
    A and B of the same rank >= 3, as ONNX Runtime's CPU kernel (matmul_helper.h) enforces.
    Raises ShapeInferenceError for a scalar operand, that transBatch rank rule, mismatched
    inner dims (DimMismatch), batch dims that do not broadcast (BroadcastMismatch), or
    dtypes other than those.
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.FusedMatMul; its
    shape inference (FusedMatMulShapeInference, onnxruntime/core/graph/contrib_ops/
    contrib_defs.cc) and CPU kernel (onnxruntime/core/providers/cpu/math/matmul.cc).
    """
    _require(ctx, 2, "A B")
    for i, what in ((0, "A"), (1, "B")):
        _check_dtype(ctx, i, (_F32, _F16, _F64), what)
    if ctx.dtype(0) is not None and ctx.dtype(1) is not None and np.dtype(ctx.dtype(0)) != np.dtype(ctx.dtype(1)):
        ctx.fail(f"B has dtype {ctx.dtype(1)}, A has {ctx.dtype(0)}: they must be equal", kind="InvalidDtype")
    p = _fused_matmul_attrs(ctx)
    a, b = ctx.shape(0), ctx.shape(1)
    for s, what in ((a, "A"), (b, "B")):
        if s is not None and len(s) == 0:
            ctx.fail(f"{what} is a scalar: FusedMatMul needs operands of rank >= 1", kind="InvalidRank")
    if (p.trans_batch_a or p.trans_batch_b) and a is not None and b is not None and not (
            len(a) == len(b) and len(a) >= 3):
        ctx.fail(f"transBatchA / transBatchB need A and B of the same rank >= 3, got ranks {len(a)} and "
                 f"{len(b)}", kind="InvalidRank")
    if a is None or b is None:
        return [None]
    a2 = _effective(a, p.trans_a, p.trans_batch_a)
    b2 = _effective(b, p.trans_b, p.trans_batch_b)
    left = (1,) + a2 if len(a2) == 1 else a2
    right = b2 + (1,) if len(b2) == 1 else b2
    check_dims_equal(ctx, left[-1], right[-2], "inner dims of the product (K of A' vs K of B')")
    batch = broadcast_shapes(ctx, left[:-2], right[:-2])
    rows = (left[-2],) if len(a2) > 1 else ()
    cols = (right[-1],) if len(b2) > 1 else ()
    return [tuple(batch) + rows + cols]


def _operand(x: np.ndarray, trans: bool, trans_batch: bool) -> np.ndarray:
    """The view of an operand that np.matmul multiplies (see _effective)."""
    if x.ndim < 2:
        return x
    if trans_batch:
        x = np.moveaxis(x, 0, -2)
    if trans:
        x = np.swapaxes(x, -1, -2)
    return x


@lib.kernel("FusedMatMul", domain=DOMAIN, dtypes=[np.float32, np.float16, np.float64], prepare=_fused_matmul_attrs)
def _fused_matmul(inputs, outputs, p: _FusedMatMulPlan):
    a = _operand(inputs[0], p.trans_a, p.trans_batch_a)
    b = _operand(inputs[1], p.trans_b, p.trans_batch_b)
    y = outputs[0]
    cdt = _compute_dtype(a.dtype)
    if a.dtype == cdt and y.dtype == cdt and y.ndim:
        np.matmul(a, b, out=y)
        if p.alpha != 1.0:
            np.multiply(y, cdt.type(p.alpha), out=y)
        return
    r = np.matmul(a.astype(cdt), b.astype(cdt))
    if p.alpha != 1.0:
        r = np.multiply(r, cdt.type(p.alpha))
    np.copyto(y, r, casting="unsafe")


# SparseToDenseMatMul ------------------------------------------------------------------------

_SPARSE_MATMUL_DTYPES = (np.float32, np.float64, np.int32, np.int64, np.uint32, np.uint64)


@lib.op("SparseToDenseMatMul", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(1))
def _sparse_to_dense_matmul_shape(ctx):
    """SparseToDenseMatMul: ``Y = alpha * A' @ B'`` of a 2-D sparse A (COO or CSR) and a 2-D
    dense B, ``A'`` / ``B'`` transposed where ``transA`` / ``transB`` (ints, default 0) say;
    ``alpha`` (float, default 1) scales a float32 or float64 product (onnxruntime's kernel
    applies it to float32 only: key sparse-matmul-alpha in docs/CONFORMANCE.md); an integer
    product takes alpha 1. A sparse A arrives densified (a ``SparseTensor`` fed to a run, or a
    sparse initializer, is a dense array by the time a kernel reads it). Dtypes: float32,
    float64, int32, int64, uint32, uint64, A's and B's equal. Raises InvalidRank for operands
    not 2-D, DimMismatch for inner dims that differ, InvalidDtype, InvalidAttribute for an
    integer product with alpha other than 1.
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.SparseToDenseMatMul;
    its CPU kernel (onnxruntime/contrib_ops/cpu/math/sparse_dense_matmul.cc)."""
    _require(ctx, 2, "A B")
    for i, what in ((0, "A"), (1, "B")):
        _check_dtype(ctx, i, tuple(np.dtype(d) for d in _SPARSE_MATMUL_DTYPES), what)
        _check_rank(ctx, i, 2, what)
    if ctx.dtype(0) is not None and ctx.dtype(1) is not None and np.dtype(ctx.dtype(0)) != np.dtype(ctx.dtype(1)):
        ctx.fail(f"B has dtype {ctx.dtype(1)}, A has {ctx.dtype(0)}: they must be equal", kind="InvalidDtype")
    if ctx.dtype(0) is not None and np.dtype(ctx.dtype(0)).kind in "iu" and float(ctx.attr("alpha", 1.0)) != 1.0:
        ctx.fail(f"alpha {ctx.attr('alpha')} scales a float product only: an integer product "
                 f"({np.dtype(ctx.dtype(0))}) takes alpha 1", kind="InvalidAttribute")
    a, b = ctx.shape(0), ctx.shape(1)
    if a is None or b is None:
        return [None]
    a = a[::-1] if ctx.attr("transA", 0) else a
    b = b[::-1] if ctx.attr("transB", 0) else b
    check_dims_equal(ctx, a[1], b[0], "inner dims of the product (K of A' vs K of B')")
    return [(a[0], b[1])]


def _sparse_matmul_prepare(ctx) -> tuple:
    return float(ctx.attr("alpha", 1.0)), bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0))


@lib.kernel("SparseToDenseMatMul", domain=DOMAIN, dtypes=list(_SPARSE_MATMUL_DTYPES), prepare=_sparse_matmul_prepare)
def _sparse_to_dense_matmul(inputs, outputs, prepared):
    alpha, trans_a, trans_b = prepared
    a = inputs[0].T if trans_a else inputs[0]
    b = inputs[1].T if trans_b else inputs[1]
    y = outputs[0]
    if alpha != 1.0:         # (float32: onnxruntime's order, A's value times alpha, then B's)
        a = np.multiply(a, a.dtype.type(alpha))
    np.matmul(a, b, out=y)


# Softmax (ai.onnx) at priority 5: an example of kernel priority ---------------------------

#: between dynashape's compiled kernels (ops_builtin.fast, 10) and its builtin numpy kernels (0)
SOFTMAX_PRIORITY = 5
#: rows from which the builtin kernel sums the last axis with BLAS (``ops_builtin.reduction``);
#: an override that gives the builtin's bits must switch where it does
BLAS_SUM_ROWS = 32


@functools.lru_cache(maxsize=64)
def _ones(n: int) -> np.ndarray:
    ones = np.ones(n, _F32)
    ones.flags.writeable = False
    return ones


def _softmax_prepare(ctx) -> tuple:
    rank = len(ctx.shape(0))
    axis = normalize_axis(ctx, ctx.attr("axis", -1), rank)
    return axis, axis == rank - 1


@lib.kernel("Softmax", since_version=13, dtypes=[np.float32], priority=SOFTMAX_PRIORITY, prepare=_softmax_prepare,
            may_inplace=((0, 0),))
def _softmax(inputs, outputs, prepared):
    """A float32 kernel for the ONNX ``Softmax`` (opset 13 and later) of the default domain.

    Why it exists: to show how a plugin overrides a builtin op's kernel and how ``priority``
    picks one. The registry resolves a node's kernel to the highest-priority KernelDef whose
    opset range and ``dtypes`` accept it (equal priorities that overlap are an error). For
    ``Softmax`` at opset >= 13 in float32 there are three: dynashape's compiled kernel
    (plugin ``fast``, priority 10) when numba is there and ``DYNASHAPE_FAST`` is not 0, this
    one (priority 5), and dynashape's builtin numpy kernel (priority 0). So this one runs only
    with the compiled kernels off (``DYNASHAPE_FAST=0``, or ``InferenceSession(...,
    compiled_kernels=False)``); opsets < 13 (the 2-D coercion) and other dtypes keep the
    builtin kernel, and the OpDef (shape inference, the axis check) stays the builtin one::

        dynashape.get_registry().resolve_kernel("", "Softmax", 13, np.dtype("float32")).plugin
        # 'fast' with the compiled kernels, 'example' with DYNASHAPE_FAST=0

    An override must be exactly as correct as what it replaces: this is the builtin's math,
    ``exp(x - max) * (1 / sum)`` along ``axis`` (the division as a multiply by the
    reciprocal of each sum, as onnxruntime's MLAS), with the last axis's sums as one BLAS
    matrix-vector product from ``BLAS_SUM_ROWS`` rows (the builtin's crossover), and numpy's
    reduction below that and along any other axis.
    Source: ONNX operator spec, Softmax-13.
    """
    axis, last = prepared
    x, y = inputs[0], outputs[0]
    if x.size == 0:
        return
    np.subtract(x, np.max(x, axis=axis, keepdims=True), out=y)
    np.exp(y, out=y)
    n = y.shape[-1]
    if last and y.flags.c_contiguous and y.size // n >= BLAS_SUM_ROWS:
        sums = (y.reshape(-1, n) @ _ones(n)).reshape(y.shape[:-1] + (1,))
    else:
        sums = np.add.reduce(y, axis=axis, keepdims=True)
    np.multiply(y, np.reciprocal(sums, out=sums), out=y)
