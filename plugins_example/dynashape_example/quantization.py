"""com.microsoft quantized ops: ``MatMulNBits`` (weight-only N-bit LLM quantization) and the
8-bit QLinear element-wise ops ``QLinearAdd``, ``QLinearMul``, ``QLinearGlobalAveragePool``
and ``QLinearSigmoid``.

Source: ONNX Runtime contrib op docs (docs/ContribOperators.md in microsoft/onnxruntime),
sections ``com.microsoft.MatMulNBits``, ``com.microsoft.QLinearAdd``, ``com.microsoft.QLinearMul``,
``com.microsoft.QLinearGlobalAveragePool`` and ``com.microsoft.QLinearSigmoid``; the arithmetic
follows ONNX Runtime's CPU kernels (onnxruntime/contrib_ops/cpu/quantization/matmul_nbits.cc,
matmul_nbits_helper.h, qlinear_binary_op.cc, qlinear_global_average_pool.cc,
qlinear_activations.cc, qlinear_lookup_table.cc) and the MLAS routines they call (qladd.cpp /
qladd_avx2.cpp, qlmul.cpp, qlgavgpool.cpp, logistic.cpp, quantize.cpp, the SQNBit GEMM
kernels), and was checked against onnxruntime 1.32 on x86-64:

* Requantization rounds half to even and saturates, as dynashape's builtin QuantizeLinear
  (``np.rint`` then a clip to the type's range), after the float32 arithmetic of the MLAS
  routine reproduced step by step. Where MLAS fuses a multiply and an add (FMA) the product
  and sum are formed in float64 and rounded to float32 once, which is that FMA except where
  the exact value lies within 2**-29 of a float32 rounding midpoint (double rounding; never
  seen in testing). The results are bit-identical with onnxruntime's.
* QLinearAdd (MLAS AVX2 kernel): ``ratio_a = a_scale / c_scale``, ``ratio_b = b_scale /
  c_scale``, ``F = c_zp - fma(ratio_a, a_zp, ratio_b * b_zp)``, then ``c = rint(fma(a,
  ratio_a, fma(b, ratio_b, F)))`` on the stored values. Operand "a" there is input A except
  where onnxruntime's broadcaster treats A as a scalar per span (A is 1 along the innermost
  axis that is not 1 in both, or A is a scalar): then the roles of A and B swap, which
  changes the rounding. Both role tables are kept.
* QLinearMul (MLAS SSE2): ``ratio = (a_scale * b_scale) / c_scale``, ``c = rint(float((a -
  a_zp) * (b - b_zp)) * ratio + c_zp)`` (separately rounded multiply and add).
* Both binary ops run as a 256 x 256 table lookup on the pair of 8-bit codes when the scales
  and zero points are constants (built once per plan), else (graph inputs) on the values.
* QLinearGlobalAveragePool: ``scale = x_scale / (y_scale * float(image_size))``, ``y =
  rint(float(sum(x) - x_zp * image_size) * scale) + y_zp`` (exact int sums).
* QLinearSigmoid: a 256-entry lookup table, as onnxruntime builds it: ``x_scale * (code -
  x_zp)`` in float32, MLAS's logistic (Eigen's rational approximation with FMAs, inputs
  clamped to [-18, 18]), then QuantizeLinear (a float32 division by y_scale).
* MatMulNBits dequantizes B (``(q - zp) * scale`` per block of ``block_size`` along K;
  ``q * scale - scale * zp`` for float zero points, as onnxruntime) once per plan when B,
  scales, zero_points and g_idx are constant initializers, then multiplies with one BLAS
  matmul in float32; its results agree with onnxruntime's to float32 rounding of the sums
  (relative 1e-6 of the output's magnitude). ``accuracy_level`` 4 (int8 activations):
  where onnxruntime 1.32's x86-64 MLAS has an int8 kernel (see ``_int8_available``) and
  takes it (B, scales and uint8 or absent zero points constant, no g_idx), A is quantized
  the same way, symmetrically to int8 per block of ``min(block_size, 256)`` along K
  (``scale = max|a| / 127``, ``q = rint(a * (127 / max|a|))``), and its dequantized values
  ``q * scale`` are multiplied as above: results agree with onnxruntime's to about 1e-6 of
  the output's magnitude (without this they would differ by the quantization of A, ~1e-2
  relative). Everywhere else level 4 computes in float32, as onnxruntime does for fed B,
  float zero points and g_idx (for fed scales or zero points onnxruntime 1.32's int8 path
  returns wrong values; float32 is the op's value). Levels 1-3 are float32 (as onnxruntime
  on x86).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from dynashape import UnsupportedOperatorError
from dynashape.records import OpLibrary, same_dtype
from dynashape.shapes import broadcast_shapes, check_dims_equal

DOMAIN = "com.microsoft"
_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
_U8, _I8, _I32 = np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.int32)
_Q8 = (_U8, _I8)
#: below this many output elements a QLinearAdd / QLinearMul whose scales are graph inputs
#: computes on the values; from it on it builds the 65536-entry table first
_TABLE_MIN = 1 << 14

lib = OpLibrary()


# ----------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------

def _name(ctx) -> str:
    return ctx.node.name or "<unnamed>"


def _require(ctx, indices: tuple, names: str) -> None:
    for i, name in zip(indices, names.split()):
        if not ctx.has_input(i):
            ctx.fail(f"input {i} ({name}) is required", kind="MissingInput")


def _dtype(ctx, i: int) -> Optional[np.dtype]:
    dt = ctx.dtype(i) if ctx.has_input(i) else None
    return None if dt is None else np.dtype(dt)


def _check_dtype(ctx, i: int, allowed: tuple, what: str) -> None:
    dt = _dtype(ctx, i)
    if dt is not None and dt not in allowed:
        want = ", ".join(np.dtype(a).name for a in allowed)
        ctx.fail(f"{what} has dtype {dt}, expected {want}", kind="InvalidDtype")


def _check_same_dtype(ctx, i: int, ref: int, what: str, ref_what: str) -> None:
    dt, want = _dtype(ctx, i), _dtype(ctx, ref)
    if dt is not None and want is not None and dt != want:
        ctx.fail(f"{what} has dtype {dt}, {ref_what} has {want}: they must be equal", kind="InvalidDtype")


def _check_scalar(ctx, i: int, what: str) -> None:
    """A per-tensor quantization parameter: a scalar or a 1-D tensor of one element (ONNX
    Runtime's IsScalarOr1ElementVector)."""
    s = ctx.shape(i) if ctx.has_input(i) else None
    if s is None:
        return
    if len(s) > 1:
        ctx.fail(f"{what} must be a scalar or a 1-D tensor of size 1, got rank {len(s)}", kind="InvalidQuantParam")
    if len(s) == 1:
        check_dims_equal(ctx, s[0], 1, f"{what} must be a scalar or a 1-D tensor of size 1: its size")


def _const(ctx, i: int) -> Optional[np.ndarray]:
    """The constant value of input ``i`` (an initializer or a folded value), or None."""
    if not ctx.has_input(i):
        return None
    v = ctx.value(i)
    if v is None or not isinstance(v, np.ndarray) or v.dtype == object:
        return None
    return v


def _opt(inputs: list, i: int):
    return inputs[i] if i < len(inputs) else None


def _first(x, dtype, default=0):
    """The one element of a per-tensor scale / zero point (``default`` when absent)."""
    if x is None:
        return dtype.type(default)
    return np.asarray(x).reshape(-1)[0].astype(dtype)


def _fma32(x, y, z) -> np.ndarray:
    """float32 ``x * y + z`` rounded once (a fused multiply-add): formed in float64, where
    the product of a float32 and an integer of up to 16 bits is exact."""
    return np.add(np.multiply(x, y, dtype=_F64), z, dtype=_F64).astype(_F32)


def _saturate(r: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``r`` (float32) rounded half to even and saturated to ``dtype`` as MLAS packs it:
    ``cvtps_epi32`` (NaN and values beyond int32 become INT32_MIN) then saturating packs."""
    q = np.rint(r).astype(_F64)
    info = np.iinfo(dtype)
    bad = ~(np.abs(q) < 2.0 ** 31)
    if bad.any():
        q[bad] = -2.0 ** 31
    return np.clip(q, info.min, info.max).astype(dtype)


def _codes(dtype: np.dtype) -> np.ndarray:
    """The 256 values of an 8-bit type in the order of their uint8 bit patterns."""
    return np.arange(256, dtype=np.uint8).view(dtype)


# ----------------------------------------------------------------------------------------
# QLinearAdd / QLinearMul
# ----------------------------------------------------------------------------------------

_BINARY_INPUTS = "A A_scale A_zero_point B B_scale B_zero_point C_scale C_zero_point"


@lib.op("QLinearAdd", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
@lib.op("QLinearMul", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _qlinear_binary_shape(ctx):
    """QLinearAdd / QLinearMul: ``C = quantize(dequantize(A) op dequantize(B))`` element-wise
    with multidirectional (numpy) broadcasting, where ``dequantize(X) = (X - X_zero_point) *
    X_scale`` and ``quantize(v) = saturate(round_half_even(v / C_scale) + C_zero_point)``.

    Inputs: A, A_scale, A_zero_point (optional), B, B_scale, B_zero_point (optional),
    C_scale, C_zero_point (optional). A, B, the zero points and C: uint8 or int8, all the
    same; scales float32; every scale and zero point a scalar or a 1-element 1-D tensor
    (absent zero points are 0). Output C: the broadcast shape of A and B, A's dtype. The
    arithmetic is onnxruntime's MLAS (module docstring): bit-identical results.
    Raises ShapeInferenceError for other dtypes (InvalidDtype), scales / zero points that are
    not per-tensor (InvalidQuantParam, DimMismatch), shapes that do not broadcast
    (BroadcastMismatch) or a missing required input (MissingInput).
    Source: ONNX Runtime docs/ContribOperators.md, sections com.microsoft.QLinearAdd and
    com.microsoft.QLinearMul.
    """
    _require(ctx, (0, 1, 3, 4, 6), "A A_scale B B_scale C_scale")
    _check_dtype(ctx, 0, _Q8, "A")
    names = _BINARY_INPUTS.split()
    for i in (2, 3, 5, 7):
        _check_same_dtype(ctx, i, 0, names[i], "A")
    for i in (1, 4, 6):
        _check_dtype(ctx, i, (_F32,), names[i])
    for i in (1, 2, 4, 5, 6, 7):
        _check_scalar(ctx, i, names[i])
    a, b = ctx.shape(0), ctx.shape(3)
    if a is None or b is None:
        return [None]
    return [broadcast_shapes(ctx, a, b)]


class _BinaryParams(NamedTuple):
    """The float32 constants of one QLinearAdd / QLinearMul, from its scales and zero points."""
    dtype: np.dtype
    a_scale: np.float32
    a_zp: np.float32       # zero points as the float32 of their integer value
    b_scale: np.float32
    b_zp: np.float32
    c_scale: np.float32
    c_zp: np.float32


def _binary_params(dtype, a_scale, a_zp, b_scale, b_zp, c_scale, c_zp) -> _BinaryParams:
    zp = [_first(z, np.dtype(dtype)).astype(_F32) for z in (a_zp, b_zp, c_zp)]
    sc = [_first(s, _F32) for s in (a_scale, b_scale, c_scale)]
    return _BinaryParams(np.dtype(dtype), sc[0], zp[0], sc[1], zp[1], sc[2], zp[2])


def _add_values(v0, v1, p: _BinaryParams, swapped: bool) -> np.ndarray:
    """QLinearAdd of the stored values ``v0`` (of A) and ``v1`` (of B), broadcast: MLAS's
    AVX2 kernel with operand "a" = A, or = B when ``swapped`` (A a scalar per span). A zero
    or infinite scale gives IEEE values, saturated as MLAS does (NaN to the type's minimum)."""
    r0, r1 = p.a_scale / p.c_scale, p.b_scale / p.c_scale
    if swapped:
        va, ra, za, vb, rb, zb = v1, r1, p.b_zp, v0, r0, p.a_zp
    else:
        va, ra, za, vb, rb, zb = v0, r0, p.a_zp, v1, r1, p.b_zp
    fixed = p.c_zp - _fma32(ra, za, rb * zb)
    return _saturate(_fma32(va, ra, _fma32(vb, rb, fixed)), p.dtype)


def _mul_values(v0, v1, p: _BinaryParams) -> np.ndarray:
    """QLinearMul of the stored values (MLAS SSE2): the exact integer product of the
    centred values, times ``(a_scale * b_scale) / c_scale``, plus the zero point, each step
    rounded to float32."""
    ratio = (p.a_scale * p.b_scale) / p.c_scale
    prod = np.multiply(np.subtract(v0, p.a_zp, dtype=_F32), np.subtract(v1, p.b_zp, dtype=_F32))  # exact ints
    r = np.multiply(prod, ratio, dtype=_F32)
    r += p.c_zp
    return _saturate(r, p.dtype)


def _binary_table(kind: str, p: _BinaryParams, swapped: bool) -> np.ndarray:
    """``table[(code(A) << 8) | code(B)]``: the op on every pair of 8-bit codes."""
    vals = _codes(p.dtype).astype(_F32)
    v0, v1 = vals[:, None], vals[None, :]
    out = _add_values(v0, v1, p, swapped) if kind == "add" else _mul_values(v0, v1, p)
    out = np.ascontiguousarray(out.reshape(-1))
    out.flags.writeable = False
    return out


def _input0_span_scalar(s0: tuple, s1: tuple) -> bool:
    """Whether onnxruntime's InputBroadcaster takes input 0 as a scalar per span (its first
    iterator delta is 0): input 0 is a scalar, or is 1 along the innermost axis whose
    broadcast size is not 1 (the innermost common axis when all of them are 1)."""
    if len(s0) == 0:
        return True
    if len(s1) == 0:
        return s0[-1] <= 1
    n = min(len(s0), len(s1))
    for i in range(1, n + 1):
        a0, a1 = s0[-i], s1[-i]
        dim = min(a0, a1) if min(a0, a1) == 0 else max(a0, a1)
        if dim <= 1 and i < n:
            continue
        return a0 <= 1
    return False    # not reached


class _BinaryPlan(NamedTuple):
    kind: str                      # "add" or "mul"
    tables: Optional[tuple]        # (normal roles, swapped roles) when the parameters are constants


def _binary_prepare(kind: str):
    def prepare(ctx) -> _BinaryPlan:
        params = [_const(ctx, i) for i in (1, 2, 4, 5, 6, 7)]
        const = all(v is not None or not ctx.has_input(i) for v, i in zip(params, (1, 2, 4, 5, 6, 7)))
        dt = _dtype(ctx, 0)
        if not const or dt not in _Q8:
            return _BinaryPlan(kind, None)
        p = _binary_params(dt, *params)
        with np.errstate(all="ignore"):             # prepare may run outside a quiet run
            if kind == "mul":
                table = _binary_table(kind, p, False)
                return _BinaryPlan(kind, (table, table))
            return _BinaryPlan(kind, (_binary_table(kind, p, False), _binary_table(kind, p, True)))
    return prepare


def _qlinear_binary(inputs, outputs, plan: _BinaryPlan):
    a, b = inputs[0], inputs[3]
    y = outputs[0]
    if y.size == 0:
        return
    swapped = plan.kind == "add" and _input0_span_scalar(a.shape, b.shape)
    table = plan.tables[swapped] if plan.tables is not None else None
    if table is None:
        p = _binary_params(a.dtype, inputs[1], _opt(inputs, 2), inputs[4], _opt(inputs, 5), inputs[6],
                           _opt(inputs, 7))
        if y.size < _TABLE_MIN:
            v0, v1 = a.astype(_F32), b.astype(_F32)
            value = _add_values(v0, v1, p, swapped) if plan.kind == "add" else _mul_values(v0, v1, p)
            np.copyto(y, value)
            return
        table = _binary_table(plan.kind, p, swapped)
    index = np.left_shift(a.view(np.uint8), 8, dtype=np.uint16)
    index = np.bitwise_or(index, b.view(np.uint8), dtype=np.uint16)     # broadcast to C's shape
    np.take(table, index, out=y, mode="clip")       # every index is in range: no bounds check


lib.kernel("QLinearAdd", domain=DOMAIN, dtypes=[np.uint8, np.int8], prepare=_binary_prepare("add"))(_qlinear_binary)
lib.kernel("QLinearMul", domain=DOMAIN, dtypes=[np.uint8, np.int8], prepare=_binary_prepare("mul"))(_qlinear_binary)


# ----------------------------------------------------------------------------------------
# QLinearGlobalAveragePool
# ----------------------------------------------------------------------------------------

def _channels_last(ctx) -> bool:
    v = int(ctx.attr("channels_last", 0))
    if v not in (0, 1):
        ctx.fail(f"channels_last must be 0 or 1, got {v}", kind="InvalidAttribute")
    return bool(v)


@lib.op("QLinearGlobalAveragePool", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _qlinear_gap_shape(ctx):
    """QLinearGlobalAveragePool: the average over all spatial positions of each (image,
    channel), on quantized data: ``Y = quantize(mean(dequantize(X)))``.

    Inputs: X (N, C, D1, ..., Dn) or, with channels_last=1, (N, D1, ..., Dn, C), rank >= 3,
    uint8 or int8; x_scale (float32), x_zero_point (X's dtype), y_scale (float32),
    y_zero_point (X's dtype), all required, each a scalar or a 1-element 1-D tensor.
    Attribute channels_last (0 or 1, default 0). Output Y: X's shape with every spatial dim
    1, X's dtype. Arithmetic as MLAS (module docstring): exact integer sums,
    ``rint((sum - x_zp * image_size) * (x_scale / (y_scale * image_size))) + y_zp``,
    saturated; bit-identical with onnxruntime. (onnxruntime also refuses image sizes of
    2**24 or more and a combined scale outside [2**-32, 256); these are computed here.)
    Raises ShapeInferenceError for a rank below 3 (InvalidRank), other dtypes, parameters
    that are not per-tensor, a missing input (MissingInput) or an invalid channels_last.
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.QLinearGlobalAveragePool.
    """
    _require(ctx, (0, 1, 2, 3, 4), "X x_scale x_zero_point y_scale y_zero_point")
    last = _channels_last(ctx)
    _check_dtype(ctx, 0, _Q8, "X")
    for i, what in ((2, "x_zero_point"), (4, "y_zero_point")):
        _check_same_dtype(ctx, i, 0, what, "X")
    for i, what in ((1, "x_scale"), (3, "y_scale")):
        _check_dtype(ctx, i, (_F32,), what)
    for i, what in ((1, "x_scale"), (2, "x_zero_point"), (3, "y_scale"), (4, "y_zero_point")):
        _check_scalar(ctx, i, what)
    x = ctx.shape(0)
    if x is None:
        return [None]
    if len(x) < 3:
        ctx.fail(f"X must have rank >= 3 (N, C and spatial dims), got rank {len(x)}", kind="InvalidRank")
    spatial = (1,) * (len(x) - 2)
    return [(x[0],) + spatial + (x[-1],) if last else (x[0], x[1]) + spatial]


def _gap_prepare(ctx):
    return _name(ctx), _channels_last(ctx)


@lib.kernel("QLinearGlobalAveragePool", domain=DOMAIN, dtypes=[np.uint8, np.int8], prepare=_gap_prepare)
def _qlinear_gap(inputs, outputs, prepared):
    name, last = prepared
    x, y = inputs[0], outputs[0]
    axes = tuple(range(1, x.ndim - 1)) if last else tuple(range(2, x.ndim))
    image = 1
    for ax in axes:
        image *= x.shape[ax]
    if y.size == 0:
        return
    if image == 0:
        raise ValueError(f"QLinearGlobalAveragePool node '{name}': the spatial dims of X {x.shape} are empty")
    x_zp = int(_first(_opt(inputs, 2), x.dtype))
    y_zp = int(_first(_opt(inputs, 4), x.dtype))
    scale = _first(inputs[1], _F32) / (_first(inputs[3], _F32) * _F32.type(image))
    acc = np.sum(x, axis=axes, dtype=np.int64, keepdims=True)
    acc -= x_zp * image
    r = np.rint(np.multiply(acc.astype(_F32), scale, dtype=_F32)).astype(_F64)
    r += y_zp                                          # added after the rounding, as MLAS
    np.copyto(y, _saturate(r, x.dtype))


# ----------------------------------------------------------------------------------------
# QLinearSigmoid
# ----------------------------------------------------------------------------------------

#: MLAS's logistic (MlasLogisticConstants, Eigen's coefficients): clamp range, the odd
#: numerator's alpha_9 .. alpha_1 and the even denominator's beta_10 .. beta_0
_LOGISTIC_RANGE = (np.float32(-18.0), np.float32(18.0))
_LOGISTIC_ALPHA = tuple(np.float32(c) for c in (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05,
                                                8.51377133304701e-03, 2.48287947061529e-01))
_LOGISTIC_BETA = tuple(np.float32(c) for c in (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06,
                                               1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01))


def _mlas_logistic(x: np.ndarray) -> np.ndarray:
    """MLAS's float32 logistic (the FMA3 kernel): ``p(x) / q(x) + 0.5`` clamped to [0, 1],
    p and q evaluated by Horner's rule with fused multiply-adds."""
    x = np.clip(x.astype(_F32), *_LOGISTIC_RANGE)
    x2 = x * x
    p = _fma32(x2, _LOGISTIC_ALPHA[0], _LOGISTIC_ALPHA[1])
    for c in _LOGISTIC_ALPHA[2:]:
        p = _fma32(p, x2, c)
    p = p * x
    q = _fma32(x2, _LOGISTIC_BETA[0], _LOGISTIC_BETA[1])
    for c in _LOGISTIC_BETA[2:]:
        q = _fma32(q, x2, c)
    return np.clip(p / q + np.float32(0.5), np.float32(0), np.float32(1))


def _sigmoid_table(dtype: np.dtype, x_scale, x_zp, y_scale, y_zp) -> np.ndarray:
    """``table[code]`` for the 256 codes of X, as onnxruntime's QlinearBuildLookupTable:
    dequantize in float32, MLAS's logistic, then MLAS's QuantizeLinear (divide by y_scale,
    clamp to the range shifted by the zero point (NaN to its low end), round half to even,
    add the zero point)."""
    xs, ys = _first(x_scale, _F32), _first(y_scale, _F32)
    xz, yz = int(_first(x_zp, dtype)), int(_first(y_zp, dtype))
    info = np.iinfo(dtype)
    deq = xs * (_codes(dtype).astype(np.int32) - xz).astype(_F32)
    v = _mlas_logistic(deq) / ys
    lo, hi = np.float32(info.min - yz), np.float32(info.max - yz)
    v = np.where(np.isnan(v), lo, np.clip(v, lo, hi))
    table = (np.rint(v).astype(np.int32) + yz).astype(dtype)
    table.flags.writeable = False
    return table


@lib.op("QLinearSigmoid", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _qlinear_sigmoid_shape(ctx):
    """QLinearSigmoid: ``Y = quantize(sigmoid(dequantize(X)))`` element-wise.

    Inputs: X (uint8 or int8), X_scale (float32), X_zero_point (X's dtype, optional: 0),
    Y_scale (float32), Y_zero_point (X's dtype, optional: 0), each parameter a scalar or a
    1-element 1-D tensor. Output Y: X's shape and dtype. Computed, as onnxruntime does, by a
    256-entry lookup table (built once per plan when the parameters are constants) with
    MLAS's logistic: bit-identical results.
    Raises ShapeInferenceError for other dtypes, parameters that are not per-tensor or a
    missing required input.
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.QLinearSigmoid.
    """
    _require(ctx, (0, 1, 3), "X X_scale Y_scale")
    _check_dtype(ctx, 0, _Q8, "X")
    for i, what in ((2, "X_zero_point"), (4, "Y_zero_point")):
        _check_same_dtype(ctx, i, 0, what, "X")
    for i, what in ((1, "X_scale"), (3, "Y_scale")):
        _check_dtype(ctx, i, (_F32,), what)
    for i, what in ((1, "X_scale"), (2, "X_zero_point"), (3, "Y_scale"), (4, "Y_zero_point")):
        _check_scalar(ctx, i, what)
    return [ctx.shape(0)]


def _sigmoid_prepare(ctx):
    params = [_const(ctx, i) for i in (1, 2, 3, 4)]
    dt = _dtype(ctx, 0)
    if dt not in _Q8 or any(v is None and ctx.has_input(i) for v, i in zip(params, (1, 2, 3, 4))):
        return None
    with np.errstate(all="ignore"):                 # prepare may run outside a quiet run
        return _sigmoid_table(dt, *params)


@lib.kernel("QLinearSigmoid", domain=DOMAIN, dtypes=[np.uint8, np.int8], prepare=_sigmoid_prepare)
def _qlinear_sigmoid(inputs, outputs, table):
    x, y = inputs[0], outputs[0]
    if table is None:
        table = _sigmoid_table(x.dtype, inputs[1], _opt(inputs, 2), inputs[3], _opt(inputs, 4))
    np.take(table, x.view(np.uint8), out=y, mode="clip")


# ----------------------------------------------------------------------------------------
# MatMulNBits
# ----------------------------------------------------------------------------------------

#: the largest block of A that onnxruntime 1.32's int8 (accuracy_level 4) kernels quantize
#: with one scale: B blocks longer than this get several A blocks
_INT8_A_BLOCK_MAX = 256


def _int8_available(bits: int, block_size: int) -> bool:
    """Whether onnxruntime 1.32's x86-64 MLAS has a ``SQNBIT_CompInt8`` kernel (accuracy_level
    4 quantizes A to int8) for these weights: 4- and 8-bit weights of every block size,
    2-bit weights of blocks of 32, 64 and 128 (others fall back to float32 compute), as
    measured (MlasIsQNBitGemmAvailable)."""
    return bits in (4, 8) or (bits == 2 and block_size in (32, 64, 128))


class _NBitsAttrs(NamedTuple):
    K: int
    N: int
    bits: int
    block_size: int
    accuracy_level: int
    k_blocks: int
    blob_size: int


def _nbits_attrs(ctx) -> _NBitsAttrs:
    name = _name(ctx)
    values = {}
    for attr in ("K", "N", "block_size"):
        v = ctx.attr(attr)
        if v is None:
            ctx.fail(f"attribute '{attr}' is required", kind="MissingAttribute")
        values[attr] = int(v)
    k, n, bs = values["K"], values["N"], values["block_size"]
    bits = int(ctx.attr("bits", 4))
    if k < 1 or n < 1:
        ctx.fail(f"K ({k}) and N ({n}) must be >= 1", kind="InvalidAttribute")
    if bs < 16 or bs & (bs - 1):
        ctx.fail(f"block_size must be a power of 2 and >= 16, got {bs}", kind="InvalidAttribute")
    if bits in (3, 5, 6, 7):
        raise UnsupportedOperatorError(f"MatMulNBits node '{name}': bits={bits} is not supported by "
                                       "dynashape_example (2, 4 and 8 are, as onnxruntime's CPU kernel)")
    if bits not in (2, 4, 8):
        ctx.fail(f"bits must be 2, 4 or 8, got {bits}", kind="InvalidAttribute")
    if int(ctx.attr("weight_prepacked", 0)):
        raise UnsupportedOperatorError(f"MatMulNBits node '{name}': weight_prepacked (an EP-specific "
                                       "layout of B) is not supported by dynashape_example")
    level = int(ctx.attr("accuracy_level", 0))
    if level not in (0, 1, 2, 3, 4):
        ctx.fail(f"accuracy_level must be 0, 1, 2, 3 or 4, got {level}", kind="InvalidAttribute")
    k_blocks = (k + bs - 1) // bs
    return _NBitsAttrs(k, n, bits, bs, level, k_blocks, bs * bits // 8)


def _check_shape(ctx, i: int, shapes: tuple, what: str) -> None:
    """Input ``i`` has one of ``shapes`` (tuples of ints): the first of its rank is checked."""
    s = ctx.shape(i) if ctx.has_input(i) else None
    if s is None:
        return
    for want in shapes:
        if len(want) == len(s):
            for k, (d, w) in enumerate(zip(s, want)):
                check_dims_equal(ctx, d, w, f"{what} dim {k} (expected shape {' or '.join(map(str, shapes))})")
            return
    ctx.fail(f"{what} must have shape {' or '.join(map(str, shapes))}, got rank {len(s)}", kind="InvalidRank")


@lib.op("MatMulNBits", since_version=1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _matmul_nbits_shape(ctx):
    """MatMulNBits: ``Y = A @ dequantize(B)^T (+ bias)``, B an (N, K) weight matrix quantized
    block-wise along K to ``bits`` bits: ``W[n, k] = (q[n, k] - zero_point[n, k // block_size])
    * scale[n, k // block_size]``.

    Inputs: A (..., K) float32 or float16; B uint8 (N, k_blocks, blob_size), k_blocks =
    ceil(K / block_size), blob_size = block_size * bits / 8, the codes packed along K from the
    low bits of each byte (4 bits: element 2j in the low nibble of byte j); scales (N,
    k_blocks) or (N * k_blocks), A's dtype; zero_points (optional): uint8 packed the same way
    along the blocks, (N, ceil(k_blocks * bits / 8)) or flat, or unpacked of A's dtype (N,
    k_blocks) or flat (``q * scale - scale * zero_point``), absent: 2**(bits - 1); g_idx
    (optional, int32, (K) or (k_blocks * block_size)): the block of each k (GPTQ act-order;
    onnxruntime 1.32 then ignores uint8 zero points and uses 2**(bits - 1), which is not
    followed here); bias (optional, (N), A's dtype). Output Y (..., N), A's dtype.
    Attributes: K, N, block_size (required; a power of 2, >= 16), bits (2, 4 or 8; default 4),
    accuracy_level (0-4, default 0; 4 quantizes A to int8 as onnxruntime 1.32 does on x86-64
    where it has an int8 kernel and B, scales and uint8 zero points are constants, see the
    module docstring; 1-3 compute in float32).
    Raises ShapeInferenceError for A's last dim != K, B / scales / zero_points / g_idx / bias
    of the wrong shape or dtype, or invalid attributes; UnsupportedOperatorError for bits 3,
    5, 6, 7 and weight_prepacked != 0.
    Source: ONNX Runtime docs/ContribOperators.md, section com.microsoft.MatMulNBits; input
    checks as onnxruntime's matmul_nbits_helper.h.
    """
    at = _nbits_attrs(ctx)
    _require(ctx, (0, 1, 2), "A B scales")
    _check_dtype(ctx, 0, (_F32, _F16), "A")
    _check_dtype(ctx, 1, (_U8,), "B")
    _check_same_dtype(ctx, 2, 0, "scales", "A")
    _check_shape(ctx, 1, ((at.N, at.k_blocks, at.blob_size),), "B")
    _check_shape(ctx, 2, ((at.N, at.k_blocks), (at.N * at.k_blocks,)), "scales")
    zdt = _dtype(ctx, 3)
    if zdt is not None:
        if zdt == _U8:
            zb = (at.k_blocks * at.bits + 7) // 8
            _check_shape(ctx, 3, ((at.N, zb), (at.N * zb,)), "zero_points (packed uint8)")
        else:
            _check_same_dtype(ctx, 3, 2, "zero_points", "scales")
            _check_shape(ctx, 3, ((at.N, at.k_blocks), (at.N * at.k_blocks,)), "zero_points")
    if ctx.has_input(4):
        _check_dtype(ctx, 4, (_I32,), "g_idx")
        s = ctx.shape(4)
        if s is not None:
            if len(s) != 1:
                ctx.fail(f"g_idx must be 1-D, got rank {len(s)}", kind="InvalidRank")
            if not (s[0] == at.K or s[0] == at.k_blocks * at.block_size):
                check_dims_equal(ctx, s[0], at.K, f"g_idx length (K or k_blocks * block_size = "
                                                  f"{at.k_blocks * at.block_size})")
    if ctx.has_input(5):
        _check_same_dtype(ctx, 5, 0, "bias", "A")
        _check_shape(ctx, 5, ((at.N,),), "bias")
    a = ctx.shape(0)
    if a is None:
        return [None]
    if len(a) == 0:
        ctx.fail("A must have rank >= 1", kind="InvalidRank")
    check_dims_equal(ctx, a[-1], at.K, "A's last dim vs attribute K")
    return [tuple(a[:-1]) + (at.N,)]


def _unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """(..., n) bytes -> (..., n * 8 / bits) codes, element j of each byte from bit j * bits."""
    per = 8 // bits
    shifts = (np.arange(per, dtype=np.uint8) * bits).astype(np.uint8)
    codes = np.right_shift(packed[..., None], shifts) & np.uint8((1 << bits) - 1)
    return codes.reshape(packed.shape[:-1] + (packed.shape[-1] * per,))


class _Weights:
    """The dequantized weights (N, K) float32, read-only; compared by value (validation mode)."""

    opaque_to_tracing = True
    __slots__ = ("wt",)

    def __init__(self, wt: np.ndarray):
        wt.flags.writeable = False
        self.wt = wt

    def __eq__(self, other):
        return isinstance(other, _Weights) and self.wt.shape == other.wt.shape and np.array_equal(self.wt, other.wt)

    __hash__ = None

    def __repr__(self):
        return f"_Weights(shape={self.wt.shape})"


def _dequantize(at: _NBitsAttrs, name: str, b, scales, zero_points, g_idx) -> np.ndarray:
    """The (N, K) float32 weights of B (see the OpDef's docstring)."""
    n, nb, bs, k = at.N, at.k_blocks, at.block_size, at.K
    q = _unpack(np.asarray(b, np.uint8).reshape(n, nb, at.blob_size), at.bits).astype(_F32)   # (N, nb, bs)
    s = np.asarray(scales).reshape(n, nb).astype(_F32)
    float_zp = zero_points is not None and np.asarray(zero_points).dtype != _U8
    if zero_points is None:
        z = np.full((n, nb), 1 << (at.bits - 1), _F32)
    elif float_zp:
        z = np.asarray(zero_points).reshape(n, nb).astype(_F32)
    else:
        z = _unpack(np.asarray(zero_points, np.uint8).reshape(n, -1), at.bits)[:, :nb].astype(_F32)
    if g_idx is not None:
        group = np.asarray(g_idx).reshape(-1)[:k].astype(np.intp)
        if group.size and (group.min() < 0 or group.max() >= nb):
            bad = group[(group < 0) | (group >= nb)][0]
            raise ValueError(f"MatMulNBits node '{name}': g_idx value {int(bad)} is out of range [0, {nb})")
        q, s, z = q.reshape(n, nb * bs)[:, :k], s[:, group], z[:, group]   # (N, K): each column's block
    else:
        s, z = s[..., None], z[..., None]
    if float_zp:                                     # onnxruntime: q * scale + (-scale * zp)
        w = q * s
        w += -s * z
    else:
        w = (q - z) * s
    w = w.reshape(n, -1)[:, :k]
    return np.ascontiguousarray(w, _F32)


def _quantize_a_int8(a: np.ndarray, block: int) -> np.ndarray:
    """A (float32, (..., K)) as MLAS's int8 kernels see it: per block of ``block`` along K,
    ``scale = max|a| / 127`` and ``q = rint(a * (127 / max|a|))`` (0 for an all-zero block),
    returned dequantized (``q * scale``, float32)."""
    k = a.shape[-1]
    nbk = (k + block - 1) // block
    if nbk * block != k:
        padded = np.zeros(a.shape[:-1] + (nbk * block,), _F32)
        padded[..., :k] = a
    else:
        padded = a
    blocks = padded.reshape(a.shape[:-1] + (nbk, block))
    amax = np.max(np.abs(blocks), axis=-1, keepdims=True)
    scale = amax / np.float32(127)
    inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(_F32)   # 127 / 0 is discarded
    q = np.rint(blocks * inv)
    q *= scale
    return q.reshape(padded.shape)[..., :k]


class _NBitsPlan(NamedTuple):
    name: str
    attrs: _NBitsAttrs
    weights: Optional[_Weights]     # dequantized once when B, scales, zero_points, g_idx are constants
    int8_a: int                     # 0, or the block length A is quantized to int8 with (accuracy_level 4)


def _nbits_prepare(ctx) -> _NBitsPlan:
    at = _nbits_attrs(ctx)
    name = _name(ctx)
    consts = {i: _const(ctx, i) for i in (1, 2, 3, 4)}
    constant = all(consts[i] is not None or not ctx.has_input(i) for i in consts)
    weights = None
    if constant:
        with np.errstate(all="ignore"):             # prepare may run outside a quiet run
            weights = _Weights(_dequantize(at, name, consts[1], consts[2], consts[3], consts[4]))
    zdt = _dtype(ctx, 3)
    int8 = (at.accuracy_level == 4 and constant and not ctx.has_input(4) and (zdt is None or zdt == _U8)
            and _int8_available(at.bits, at.block_size))
    return _NBitsPlan(name, at, weights, min(at.block_size, _INT8_A_BLOCK_MAX) if int8 else 0)


@lib.kernel("MatMulNBits", domain=DOMAIN, dtypes=[np.float32, np.float16], prepare=_nbits_prepare)
def _matmul_nbits(inputs, outputs, plan: _NBitsPlan):
    a, y = inputs[0], outputs[0]
    bias = _opt(inputs, 5)
    if plan.weights is not None:
        wt = plan.weights.wt
    else:
        wt = _dequantize(plan.attrs, plan.name, inputs[1], inputs[2], _opt(inputs, 3), _opt(inputs, 4))
    if y.size == 0:
        return
    a32 = a if a.dtype == _F32 else a.astype(_F32)
    if plan.int8_a:
        a32 = _quantize_a_int8(a32, plan.int8_a)
    if y.dtype == _F32:
        np.matmul(a32, wt.T, out=y)
        if bias is not None:
            np.add(y, bias, out=y)
        return
    r = np.matmul(a32, wt.T)                        # float16: computed in float32, rounded once
    if bias is not None:
        r += bias.astype(_F32)
    np.copyto(y, r, casting="unsafe")
