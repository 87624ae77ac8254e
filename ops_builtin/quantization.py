"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, ConvInteger, QLinearConv.

(MatMulInteger and QLinearMatMul live in :mod:`linalg`, next to MatMul.)

* QuantizeLinear ``y = saturate(round(x / y_scale) + y_zero_point)``: from opset 23 the
  division runs in the ``precision`` attribute's type, else the scale's (float16/bfloat16
  divide in their own type, as the spec says and onnxruntime does; before 23, where the spec
  names no precision, half types divide in float32 as onnxruntime; an int32 scale divides
  in float64), rounding is half to even (``np.rint``), the zero point is
  added and the result clipped in float32 (float64 after a float64 division), exactly for
  every integer target up to 16 bits; then it is cast into the output. Float targets
  (float8, float4, float6) are cast by ml_dtypes (round to nearest even); ``saturate``
  clips to the type's finite range first (float4/float6 always saturate).
* DequantizeLinear ``y = (x - x_zero_point) * x_scale`` in float32 (exact for every
  quantized type but int32 beyond 2**24, as in ONNX Runtime), cast to the output type.
* Granularity (both): a scalar (or one-element) scale is per tensor, a 1-D scale per
  ``axis``, a scale of the input's rank with ``block_size`` > 0 blocked along ``axis``.
* DynamicQuantizeLinear: uint8 with a per-run scale and zero point, float32 arithmetic as
  ONNX Runtime (an all-zero or empty input gets scale 1, zero point 0).
* ConvInteger / QLinearConv: the float Conv of :mod:`nn` (its geometry, im2col and
  depthwise paths) on the zero-point-centred operands in float64, whose sums of integer
  products are exact (the int32 accumulator of the spec); QLinearConv adds the int32 bias
  and requantizes in float32 as ``rint(acc * (x_scale * w_scale / y_scale)) + y_zero_point``.

Source: ONNX operator spec (Operators.md / Changelog.md), sections named in each docstring.
"""
from __future__ import annotations

from typing import NamedTuple

import ml_dtypes
import numpy as np

from dynashape.dtypes import np_dtype
from dynashape.onnx_proto import TensorProto
from dynashape.records import OpLibrary
from dynashape.shapes import check_dims_equal, normalize_axis, numel, require

from .nn import (_check_rank_at_least, _conv, _conv_prepare, _conv_rows_per_band, _conv_setup, _scratch,
                 _spatial_kernel, _window_geometry)

lib = OpLibrary()

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_F16 = np.dtype(np.float16)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_I32 = np.dtype(np.int32)
_I8, _U8 = np.dtype(np.int8), np.dtype(np.uint8)
_I16, _U16 = np.dtype(np.int16), np.dtype(np.uint16)


def _dt(name: str):
    """The numpy dtype of ONNX elem type ``name`` (None when this onnx does not know it)."""
    code = getattr(TensorProto, name, None)
    if code is None:
        return None
    try:
        return np_dtype(code)
    except TypeError:
        return None


def _dts(*names: str) -> frozenset:
    return frozenset(d for d in map(_dt, names) if d is not None)


_FLOAT8 = _dts("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")
_INT4 = _dts("INT4", "UINT4")
_INT2 = _dts("INT2", "UINT2")
_FLOAT4 = _dts("FLOAT4E2M1")
_FLOAT6 = _dts("FLOAT6E2M3", "FLOAT6E3M2")
_E8M0 = _dts("FLOAT8E8M0")
_HIGH = frozenset({_F32, _F16, _BF16})

#: QuantizeLinear: version -> (x types, scale types (None: x's type), output / zero-point types)
_Q_TYPES: dict = {}
#: DequantizeLinear: version -> (x / zero-point types, scale types)
_DQ_TYPES: dict = {}


def _build_type_tables() -> None:
    q_out = frozenset({_I8, _U8})
    dq_x = frozenset({_I8, _U8, _I32})
    adds = {19: _FLOAT8, 21: frozenset({_I16, _U16}) | _INT4, 23: _FLOAT4, 25: _INT2, 28: _FLOAT6}
    for v in (10, 13, 19, 21, 23, 24, 25, 28):
        q_out = q_out | adds.get(v, frozenset())
        dq_x = dq_x | adds.get(v, frozenset())
        if v < 19:
            _Q_TYPES[v] = (frozenset({_F32, _I32}), frozenset({_F32}), q_out)
            _DQ_TYPES[v] = (dq_x, frozenset({_F32}))
            continue
        x_types = _HIGH | {_I32}
        scales = None if v < 23 else x_types | (_E8M0 if v >= 24 else frozenset())
        _Q_TYPES[v] = (x_types, scales, q_out)
        _DQ_TYPES[v] = (dq_x, _HIGH | (_E8M0 if v >= 24 else frozenset()))


_build_type_tables()
_Q_VERSIONS = tuple(sorted(_Q_TYPES))


def _spec_version(ctx, versions) -> int:
    """The since_version of the schema a node at ``ctx.opset`` resolves to."""
    return max((v for v in versions if v <= ctx.opset), default=versions[0])


def _names(types) -> str:
    return ", ".join(sorted(np.dtype(t).name for t in types))


def _check_dtype(ctx, i: int, what: str, allowed) -> None:
    dt = ctx.dtype(i)
    if ctx.has_input(i) and dt is not None and np.dtype(dt) not in allowed:
        ctx.fail(f"{what} has dtype {np.dtype(dt).name}, expected one of: {_names(allowed)}",
                 kind="InvalidDtype")


def _int_range(dtype: np.dtype):
    info = ml_dtypes.iinfo(dtype)
    return float(info.min), float(info.max)


def _is_int_type(dtype: np.dtype) -> bool:
    dt = np.dtype(dtype)
    return dt.kind in "iu" or dt in _INT4 or dt in _INT2


# ----------------------------------------------------------------------------------------
# granularity of a scale / zero point (shared by QuantizeLinear and DequantizeLinear)
# ----------------------------------------------------------------------------------------

_PER_TENSOR, _PER_AXIS, _BLOCKED = 0, 1, 2


def _granularity(ctx, version: int, x_shape, s_shape, what: str, check: bool = True) -> tuple[int, int, int]:
    """(kind, axis, block_size) of a Q/DQ node from the input and scale shapes; with
    ``check``, validates the scale's and zero point's shapes against the version's rules
    (spec: QuantizeLinear "three supported quantization granularities"). Without it (a
    kernel's preparation, traced with symbolic dims) nothing compares dims."""
    block = int(ctx.attr("block_size", 0)) if version >= 21 else 0
    if not check:
        if s_shape is None or x_shape is None or len(s_shape) == 0 or _is_one(s_shape):
            return _PER_TENSOR, 0, block
        if len(s_shape) == 1 and not isinstance(s_shape[0], int):
            # a scale of symbolic length: per tensor where it is 1, per axis otherwise, so the
            # kind is decided per signature (the comparison raises while tracing)
            bool(s_shape[0] == 1)
        rank = len(x_shape)
        if version < 13 or rank == 0:
            return _PER_TENSOR, 0, 0
        axis = normalize_axis(ctx, int(ctx.attr("axis", 1)), rank)
        return (_PER_AXIS, axis, 0) if block == 0 else (_BLOCKED, axis, block)
    if block < 0:
        ctx.fail(f"block_size {block} must be >= 0 (a positive block size means blocked quantization)",
                 kind="InvalidAttribute")
    zp = ctx.shape(2) if ctx.has_input(2) else None
    if zp is not None and s_shape is not None:
        if len(zp) != len(s_shape) and not (_one_element(ctx, zp) and _one_element(ctx, s_shape)):
            ctx.fail(f"{what}_zero_point of shape {tuple(zp)} must have the shape of {what}_scale "
                     f"{tuple(s_shape)}", kind="QuantParamShapeMismatch")
        for a, b in zip(zp, s_shape) if len(zp) == len(s_shape) else ():
            check_dims_equal(ctx, a, b, f"{what}_zero_point and {what}_scale dims")
    if s_shape is None or x_shape is None:
        return _PER_TENSOR, 0, block
    rank = len(x_shape)
    if len(s_shape) == 0 or _is_one(s_shape):    # one element: per tensor, whatever the axis
        return _PER_TENSOR, 0, block
    axis = int(ctx.attr("axis", 1))
    if version < 13 or rank == 0:
        # opset 10 (and a scalar input): scale and zero point are scalars (one element)
        if len(s_shape) != 1 or not ctx.assume(s_shape[0], "==", 1):
            ctx.fail(f"{what}_scale of shape {tuple(s_shape)} must be a scalar"
                     + (" (opset 10 has per-tensor quantization only)" if version < 13 else
                        " for a scalar input"), kind="InvalidQuantParam")
        return _PER_TENSOR, 0, 0
    if block == 0:
        if len(s_shape) != 1:
            ctx.fail(f"{what}_scale of shape {tuple(s_shape)} must be a scalar or 1-D (per axis)"
                     + (" unless block_size > 0 (blocked quantization)" if version >= 21 else ""),
                     kind="InvalidQuantParam")
        axis = normalize_axis(ctx, axis, rank)
        s0 = s_shape[0]
        if not (isinstance(s0, int) and s0 == 1):
            check_dims_equal(ctx, s0, x_shape[axis],
                             f"per-axis {what}_scale length and input dim {axis} (axis)")
        return _PER_AXIS, axis, 0
    if len(s_shape) != rank:
        ctx.fail(f"blocked quantization (block_size {block}) needs a {what}_scale of the input's rank "
                 f"{rank}, got shape {tuple(s_shape)}", kind="InvalidQuantParam")
    axis = normalize_axis(ctx, axis, rank)
    for j, (d, s) in enumerate(zip(x_shape, s_shape)):
        want = (d + block - 1) // block if j == axis else d
        check_dims_equal(ctx, s, want, f"blocked {what}_scale dim {j} (input dim {d}, block_size {block}, "
                                       f"axis {axis}): expected ceil(dim / block_size) on the axis")
    return _BLOCKED, axis, block


def _is_one(shape) -> bool:
    """A 1-D shape of one element, structurally (``(1,)``)."""
    return len(shape) == 1 and isinstance(shape[0], int) and shape[0] == 1


def _one_element(ctx, shape) -> bool:
    """A scalar or a 1-D tensor of one element (a per-tensor parameter in every version)."""
    return len(shape) == 0 or (len(shape) == 1 and ctx.assume(shape[0], "==", 1))


def _expand(p: np.ndarray, x_shape: tuple, kind: int, axis: int, block: int) -> np.ndarray:
    """A scale / zero point (float32 or float64) broadcastable against the input."""
    if p.size == 1:
        return p.reshape(())
    if kind == _PER_TENSOR:
        return p
    if kind == _PER_AXIS:
        shape = [1] * len(x_shape)
        if shape:
            shape[axis] = -1
        return p.reshape(shape)
    p = np.repeat(p, block, axis=axis)
    if p.shape[axis] != x_shape[axis]:   # the last block is partial
        p = p[(slice(None),) * axis + (slice(0, x_shape[axis]),)]
    return p


# ----------------------------------------------------------------------------------------
# QuantizeLinear
# ----------------------------------------------------------------------------------------

def _q_out_dtype(ctx) -> np.dtype:
    version = _spec_version(ctx, _Q_VERSIONS)
    code = int(ctx.attr("output_dtype", 0)) if version >= 21 else 0
    zp = ctx.dtype(2) if ctx.has_input(2) else None
    if code:
        try:
            out = np_dtype(code)
        except TypeError:
            ctx.fail(f"output_dtype {code} is not an ONNX element type", kind="InvalidAttribute")
        if zp is not None and np.dtype(zp) != out:
            ctx.fail(f"output_dtype {out.name} must equal y_zero_point's dtype {np.dtype(zp).name}",
                     kind="DtypeMismatch")
        return out
    return np.dtype(zp) if zp is not None else _U8


def _q_dtype(ctx):
    return [_q_out_dtype(ctx)]


@lib.op("QuantizeLinear", since_version=_Q_VERSIONS, infer_dtype=_q_dtype)
def _quantize_linear_infer(ctx):
    """QuantizeLinear: y = saturate(round_half_even(x / y_scale) + y_zero_point), y of x's shape.

    Versions: 10 (per tensor; x float/int32, uint8/int8), 13 (+ per-axis ``axis``), 19
    (+ float16/bfloat16 x and scale, float8 outputs, ``saturate``), 21 (+ blocked
    ``block_size``, ``output_dtype``, int16/uint16/int4/uint4), 23 (+ float4e2m1, scale type
    independent of x, ``precision``), 24 (+ float8e8m0 scale), 25 (+ int2/uint2), 28
    (+ float6e2m3/float6e3m2).
    Shapes: y_scale scalar / 1-D of length x.shape[axis] / x's shape with ceil(D/block_size)
    on the axis; y_zero_point the scale's shape. Output dtype: output_dtype, else
    y_zero_point's, else uint8.
    Raises: InvalidDtype, DtypeMismatch, InvalidQuantParam, QuantParamShapeMismatch,
    DimMismatch, AxisOutOfRange, InvalidAttribute.
    Source: ONNX operator spec, QuantizeLinear-10/13/19/21/23/24/25/28.
    """
    version = _spec_version(ctx, _Q_VERSIONS)
    x_types, s_types, out_types = _Q_TYPES[version]
    _check_dtype(ctx, 0, "x", x_types)
    if s_types is None:
        if ctx.dtype(1) is not None and ctx.dtype(0) is not None and ctx.dtype(1) != ctx.dtype(0):
            ctx.fail(f"y_scale must have x's dtype {np.dtype(ctx.dtype(0)).name} at opset {ctx.opset}, "
                     f"got {np.dtype(ctx.dtype(1)).name}", kind="DtypeMismatch")
    else:
        _check_dtype(ctx, 1, "y_scale", s_types)
    out = _q_out_dtype(ctx)
    if out not in out_types:
        ctx.fail(f"the output (y_zero_point / output_dtype) has dtype {out.name}, expected one of: "
                 f"{_names(out_types)}", kind="InvalidDtype")
    precision = int(ctx.attr("precision", 0)) if version >= 23 else 0
    if precision and _dt_or_none(precision) not in _HIGH | {_I32}:
        ctx.fail(f"precision {precision} must be float, float16, bfloat16 or int32", kind="InvalidAttribute")
    _granularity(ctx, version, ctx.shape(0), ctx.shape(1), "y")
    return [ctx.shape(0)]


def _dt_or_none(code: int):
    try:
        return np_dtype(code)
    except TypeError:
        return None


class _QPlan(NamedTuple):
    kind: int
    axis: int
    block: int
    div: np.dtype        # dtype of the division x / y_scale
    work: np.dtype       # dtype of rounding's result + zero point, clipped (float32/float64)
    lo: float | None     # clip range (None: no clipping, float8 with saturate=0)
    hi: float | None
    is_int: bool         # integer target (rint) or float target (ml_dtypes cast)


def _q_prepare(ctx) -> _QPlan:
    version = _spec_version(ctx, _Q_VERSIONS)
    kind, axis, block = _granularity(ctx, version, ctx.shape(0), ctx.shape(1), "y", check=False)
    out = _q_out_dtype(ctx)
    precision = int(ctx.attr("precision", 0)) if version >= 23 else 0
    scale = np.dtype(ctx.dtype(1))
    if precision:
        div = np_dtype(precision)
    elif scale in _HIGH or scale == _F64:
        div = scale
    elif scale == _I32:
        div = _F64
    else:                                   # float8e8m0 scale
        div = _F32
    if div == _I32:
        div = _F64
    if version < 23 and div in (_F16, _BF16):
        # before opset 23 the spec names no precision: the quotient of the half values is
        # taken in float32 (nearly exact, as onnxruntime); from 23 on y_scale's type decides
        div = _F32
    work = _F64 if div == _F64 else _F32
    if _is_int_type(out):
        lo, hi = _int_range(out)
        return _QPlan(kind, axis, block, div, work, lo, hi, True)
    saturate = bool(ctx.attr("saturate", 1)) or out not in _FLOAT8
    mx = float(ml_dtypes.finfo(out).max)
    return _QPlan(kind, axis, block, div, work, -mx if saturate else None, mx if saturate else None, False)


def _q_scratch(ctx):
    plan = _q_prepare(ctx)
    return [((numel(ctx.shape(0)),), plan.work)]


@lib.kernel("QuantizeLinear", prepare=_q_prepare, scratch=_q_scratch)
def _quantize_linear(inputs, outputs, p: _QPlan):
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    y = outputs[0]
    if x.size == 0:
        return
    s = _expand(scale.astype(p.div, copy=False), x.shape, p.kind, p.axis, p.block)
    buf = _scratch(outputs, 1, x.size, p.work).reshape(x.shape)
    if p.div == p.work:
        np.divide(x if x.dtype == p.div else x.astype(p.div), s, out=buf)
        if p.is_int:
            np.rint(buf, out=buf)
    else:                                   # float16 / bfloat16 precision
        q = np.divide(x.astype(p.div, copy=False), s)
        if p.is_int:
            q = np.rint(q)
        np.copyto(buf, q, casting="unsafe")
    if zp is not None:
        np.add(buf, _expand(zp.astype(p.work), x.shape, p.kind, p.axis, p.block), out=buf)
    if p.lo is not None:
        np.clip(buf, p.lo, p.hi, out=buf)
    np.copyto(y, buf, casting="unsafe")


# ----------------------------------------------------------------------------------------
# DequantizeLinear
# ----------------------------------------------------------------------------------------

def _dq_out_dtype(ctx) -> np.dtype:
    version = _spec_version(ctx, _Q_VERSIONS)
    if version < 19:
        return _F32
    code = int(ctx.attr("output_dtype", 0)) if version >= 23 else 0
    if code:
        out = _dt_or_none(code)
        if out not in _HIGH:
            ctx.fail(f"output_dtype {code} must be float, float16 or bfloat16", kind="InvalidAttribute")
        return out
    scale = ctx.dtype(1)
    if scale is not None and np.dtype(scale) not in _HIGH:
        ctx.fail(f"x_scale of dtype {np.dtype(scale).name} needs the output_dtype attribute "
                 "(the output is float, float16 or bfloat16)", kind="MissingAttribute")
    return None if scale is None else np.dtype(scale)


def _dq_dtype(ctx):
    return [_dq_out_dtype(ctx)]


@lib.op("DequantizeLinear", since_version=_Q_VERSIONS, infer_dtype=_dq_dtype)
def _dequantize_linear_infer(ctx):
    """DequantizeLinear: y = (x - x_zero_point) * x_scale, y of x's shape.

    Versions: 10 (per tensor; int8/uint8/int32 -> float), 13 (+ per-axis ``axis``), 19
    (+ float8 x, float16/bfloat16 scale = output type), 21 (+ blocked ``block_size``,
    int16/uint16/int4/uint4), 23 (+ float4e2m1, ``output_dtype``), 24 (+ float8e8m0 scale),
    25 (+ int2/uint2), 28 (+ float6e2m3/float6e3m2).
    Shapes: as QuantizeLinear. x_zero_point has x's dtype. Output dtype: float (10, 13),
    x_scale's (19, 21), output_dtype else x_scale's (23+).
    Raises: InvalidDtype, DtypeMismatch, InvalidQuantParam, QuantParamShapeMismatch,
    DimMismatch, AxisOutOfRange, InvalidAttribute, MissingAttribute.
    Source: ONNX operator spec, DequantizeLinear-10/13/19/21/23/24/25/28.
    """
    version = _spec_version(ctx, _Q_VERSIONS)
    x_types, s_types = _DQ_TYPES[version]
    _check_dtype(ctx, 0, "x", x_types)
    _check_dtype(ctx, 1, "x_scale", s_types)
    if ctx.has_input(2) and ctx.dtype(2) is not None and ctx.dtype(0) is not None \
            and np.dtype(ctx.dtype(2)) != np.dtype(ctx.dtype(0)):
        ctx.fail(f"x_zero_point has dtype {np.dtype(ctx.dtype(2)).name}, expected x's dtype "
                 f"{np.dtype(ctx.dtype(0)).name}", kind="DtypeMismatch")
    _dq_out_dtype(ctx)
    _granularity(ctx, version, ctx.shape(0), ctx.shape(1), "x")
    return [ctx.shape(0)]


class _DQPlan(NamedTuple):
    kind: int
    axis: int
    block: int


def _dq_prepare(ctx) -> _DQPlan:
    return _DQPlan(*_granularity(ctx, _spec_version(ctx, _Q_VERSIONS), ctx.shape(0), ctx.shape(1), "x",
                                 check=False))


def _dq_scratch(ctx):
    out = _dq_out_dtype(ctx)
    return [] if out == _F32 else [((numel(ctx.shape(0)),), _F32)]


@lib.kernel("DequantizeLinear", prepare=_dq_prepare, scratch=_dq_scratch)
def _dequantize_linear(inputs, outputs, p: _DQPlan):
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    y = outputs[0]
    if x.size == 0:
        return
    buf = y if y.dtype == _F32 else _scratch(outputs, 1, x.size, _F32).reshape(x.shape)
    np.copyto(buf, x, casting="unsafe")
    if zp is not None:
        np.subtract(buf, _expand(zp.astype(_F32), x.shape, p.kind, p.axis, p.block), out=buf)
    np.multiply(buf, _expand(scale.astype(_F32, copy=False), x.shape, p.kind, p.axis, p.block), out=buf)
    if buf is not y:
        np.copyto(y, buf, casting="unsafe")


# ----------------------------------------------------------------------------------------
# DynamicQuantizeLinear
# ----------------------------------------------------------------------------------------

def _dql_dtype(ctx):
    return [_U8, _F32, _U8]


@lib.op("DynamicQuantizeLinear", since_version=11, infer_dtype=_dql_dtype)
def _dynamic_quantize_linear_infer(ctx):
    """DynamicQuantizeLinear: (y, y_scale, y_zero_point) = uint8 quantization of x with
    y_scale = (max(0, max x) - min(0, min x)) / 255 and
    y_zero_point = round_half_even(clip(0 - min(0, min x) / y_scale, 0, 255)).

    Shapes: y of x's shape, y_scale and y_zero_point scalars. Dtypes: x float -> uint8,
    float, uint8. An all-zero or empty x gets y_scale 1 (onnxruntime's rule where the spec
    would divide by zero).
    Raises: InvalidDtype.
    Source: ONNX operator spec, DynamicQuantizeLinear-11.
    """
    _check_dtype(ctx, 0, "x", frozenset({_F32}))
    return [ctx.shape(0), (), ()]


def _dql_scratch(ctx):
    return [((numel(ctx.shape(0)),), _F32)]


@lib.kernel("DynamicQuantizeLinear", scratch=_dql_scratch)
def _dynamic_quantize_linear(inputs, outputs, ctx):
    x = inputs[0]
    y, y_scale, y_zp = outputs[0], outputs[1], outputs[2]
    if x.size == 0:
        y_scale[...] = 1.0
        y_zp[...] = 0
        return
    hi = max(np.float32(0), np.float32(x.max()))
    lo = min(np.float32(0), np.float32(x.min()))
    scale = np.float32(1) if hi == lo else np.float32(hi - lo) / np.float32(255)
    zp = np.rint(np.clip(np.float32(0) - lo / scale, np.float32(0), np.float32(255)))
    buf = _scratch(outputs, 3, x.size, _F32).reshape(x.shape)
    np.divide(x, scale, out=buf)
    np.rint(buf, out=buf)
    np.add(buf, zp, out=buf)
    np.clip(buf, 0, 255, out=buf)
    np.copyto(y, buf, casting="unsafe")
    y_scale[...] = scale
    y_zp[...] = zp


# ----------------------------------------------------------------------------------------
# ConvInteger / QLinearConv: the float Conv of nn.py on centred operands, in float64
# ----------------------------------------------------------------------------------------

class _ConvInputs:
    """A node's context seen with Conv's input layout (X, W, B), for nn's Conv helpers."""

    def __init__(self, ctx, w: int, b: int | None):
        self._ctx = ctx
        self._map = (0, w, b)

    def _index(self, i: int):
        return self._map[i] if i < 3 else None

    def shape(self, i: int):
        j = self._index(i)
        return None if j is None else self._ctx.shape(j)

    def dtype(self, i: int):
        j = self._index(i)
        return None if j is None else self._ctx.dtype(j)

    def has_input(self, i: int) -> bool:
        j = self._index(i)
        return j is not None and self._ctx.has_input(j)

    def __getattr__(self, name):
        return getattr(self._ctx, name)


def _int_conv_shape(ctx, w_index: int, b_index: int | None):
    """Conv's shape rule (ranks, channels, group, kernel, pads/strides/dilations/auto_pad)."""
    view = _ConvInputs(ctx, w_index, b_index)
    x = _check_rank_at_least(ctx, 0, 3, "input x")
    w = view.shape(1)
    if x is None or w is None:
        return None
    if len(w) != len(x):
        ctx.fail(f"weight w must have the rank of x ({len(x)}), got rank {len(w)}", kind="InvalidRank")
    group = int(ctx.attr("group", 1))
    if group < 1:
        ctx.fail(f"group {group} must be >= 1", kind="InvalidAttribute")
    c, m = x[1], w[0]
    if not ctx.assume(c, "==", w[1] * group):   # a guard where C is symbolic
        ctx.fail(f"input channels {c} must equal w.shape[1] * group = {w[1]} * {group}", kind="ChannelMismatch")
    require(ctx, m % group, "==", 0, f"output channels {m} must be divisible by group {group}", "ChannelMismatch")
    if b_index is not None and ctx.has_input(b_index):
        b = ctx.shape(b_index)
        if b is not None and len(b) != 1:
            ctx.fail(f"bias B must have shape ({m},), got {tuple(b)}", kind="BiasShapeMismatch")
        if b is not None:
            require(ctx, b[0], "==", m, f"bias B must have shape ({m},), got {tuple(b)}", "BiasShapeMismatch")
    kernel = _spatial_kernel(view, x, w, required=False)
    geom = _window_geometry(view, x[2:], kernel)
    return (x[0], m) + geom.out


_INT8S = frozenset({_I8, _U8})


def _check_same(ctx, i: int, j: int, what: str) -> None:
    a, b = ctx.dtype(i), ctx.dtype(j)
    if ctx.has_input(i) and ctx.has_input(j) and a is not None and b is not None and a != b:
        ctx.fail(f"{what} must have the same dtype, got {np.dtype(a).name} and {np.dtype(b).name}",
                 kind="DtypeMismatch")


def _check_scalar(ctx, i: int, what: str) -> None:
    s = ctx.shape(i)
    if not ctx.has_input(i) or s is None:
        return
    if len(s) > 1 or (len(s) == 1 and not ctx.assume(s[0], "==", 1)):
        ctx.fail(f"{what} must be a scalar (per tensor), got shape {tuple(s)}", kind="InvalidQuantParam")


def _check_per_channel(ctx, i: int, what: str, m) -> None:
    """A scalar, or 1-D of the output channels ``m`` (per output channel)."""
    s = ctx.shape(i)
    if not ctx.has_input(i) or s is None:
        return
    if len(s) > 1:
        ctx.fail(f"{what} must be a scalar or 1-D of the output channels ({m}), got shape {tuple(s)}",
                 kind="InvalidQuantParam")
    if len(s) == 1 and not (isinstance(s[0], int) and s[0] == 1) and m is not None:
        check_dims_equal(ctx, s[0], m, f"{what} length and the output channels")


@lib.op("ConvInteger", since_version=10, infer_dtype=lambda ctx: [_I32])
def _conv_integer_infer(ctx):
    """ConvInteger: y = Conv(x - x_zero_point, w - w_zero_point) accumulated in int32.

    Shapes: as Conv (x (N, C, *in), w (M, C/group, *k) -> (N, M, *out)); x_zero_point a
    scalar, w_zero_point a scalar or (M,). Dtypes: x, w int8/uint8 (zero points of the same
    dtype) -> int32. Padding pads the centred input with 0 (i.e. with x_zero_point).
    Raises: InvalidDtype, DtypeMismatch, InvalidQuantParam, and Conv's shape errors.
    Source: ONNX operator spec, ConvInteger-10.
    """
    _check_dtype(ctx, 0, "x", _INT8S)
    _check_dtype(ctx, 1, "w", _INT8S)
    _check_same(ctx, 2, 0, "x_zero_point and x")
    _check_same(ctx, 3, 1, "w_zero_point and w")
    out = _int_conv_shape(ctx, 1, None)
    _check_scalar(ctx, 2, "x_zero_point")
    _check_per_channel(ctx, 3, "w_zero_point", None if ctx.shape(1) is None else ctx.shape(1)[0])
    return [out]


@lib.op("QLinearConv", since_version=10, infer_dtype=lambda ctx: [ctx.dtype(7)])
def _qlinear_conv_infer(ctx):
    """QLinearConv: y = saturate(round_half_even((Conv(x - x_zp, w - w_zp) + B)
    * x_scale * w_scale / y_scale) + y_zp), the convolution accumulated in int32.

    Shapes: as Conv (x input 0, w input 3, B input 8 of shape (M,)); x_scale, x_zero_point,
    y_scale, y_zero_point scalars; w_scale, w_zero_point scalars or (M,) (per output
    channel). Dtypes: x, w, y int8/uint8 (each zero point of its tensor's dtype), scales
    float, B int32. Output dtype: y_zero_point's.
    Raises: InvalidDtype, DtypeMismatch, InvalidQuantParam, and Conv's shape errors.
    Source: ONNX operator spec, QLinearConv-10.
    """
    _check_dtype(ctx, 0, "x", _INT8S)
    _check_dtype(ctx, 3, "w", _INT8S)
    _check_dtype(ctx, 7, "y_zero_point", _INT8S)
    for i, name in ((1, "x_scale"), (4, "w_scale"), (6, "y_scale")):
        _check_dtype(ctx, i, name, frozenset({_F32}))
    _check_dtype(ctx, 8, "B", frozenset({_I32}))
    _check_same(ctx, 2, 0, "x_zero_point and x")
    _check_same(ctx, 5, 3, "w_zero_point and w")
    out = _int_conv_shape(ctx, 3, 8)
    m = None if ctx.shape(3) is None else ctx.shape(3)[0]
    for i, name in ((1, "x_scale"), (2, "x_zero_point"), (6, "y_scale"), (7, "y_zero_point")):
        _check_scalar(ctx, i, name)
    _check_per_channel(ctx, 4, "w_scale", m)
    _check_per_channel(ctx, 5, "w_zero_point", m)
    return [out]


class _IntConvPlan(NamedTuple):
    conv: object          # nn's _ConvPlan, computing in float64
    x_zp: int             # inputs' indices: x zero point, w, w zero point, bias (-1: none)
    w: int
    w_zp: int
    bias: int
    channel_shape: tuple  # (1, M, 1...) : per-output-channel broadcast of Y
    first_tmp: int        # index in outputs of Conv's own temporaries
    lo: float             # QLinearConv's output range
    hi: float


def _int_conv_prepare_for(ctx, w: int, x_zp: int, w_zp: int, bias: int, quantized: bool) -> _IntConvPlan:
    view = _ConvInputs(ctx, w, bias if bias >= 0 else None)
    plan = _conv_prepare(view)._replace(cdtype=_F64)
    rank = len(ctx.shape(0))
    lo, hi = _int_range(ctx.dtype(7)) if quantized else (0.0, 0.0)
    return _IntConvPlan(plan, x_zp, w, w_zp, bias, (1, -1) + (1,) * (rank - 2),
                        4 if quantized else 3, lo, hi)


def _int_conv_scratch_for(ctx, w: int, quantized: bool) -> list:
    """The float64 accumulator, the centred x, (QLinearConv: the float32 requantized Y),
    then the temporaries of nn's Conv in float64 (sized as nn's _conv_scratch)."""
    view = _ConvInputs(ctx, w, None)
    _, _, out, (n, c, m, k), cdtype, mode = _conv_setup(view)
    full = n * m * numel(out)
    buffers = [((full,), _F64), ((numel(ctx.shape(0)),), _F64)]
    if quantized:
        buffers.append(((full,), _F32))
    if mode == "im2col":
        rows = _conv_rows_per_band(n, c, k, out, cdtype.itemsize)
        band = n * rows * numel(out[1:])
        buffers += [((c * k * band,), _F64), ((m * band,), _F64)]
    elif mode == "depthwise":
        buffers.append(((full,), _F64))
    return buffers


def _int_conv_accumulate(inputs, outputs, p: _IntConvPlan, y_shape) -> np.ndarray:
    """The exact int32 accumulator of Conv(x - x_zp, w - w_zp) as float64 (shape of Y)."""
    x = inputs[0]
    xc = _scratch(outputs, 2, x.size, _F64).reshape(x.shape)
    np.copyto(xc, x, casting="unsafe")
    x_zp = inputs[p.x_zp] if p.x_zp < len(inputs) else None
    if x_zp is not None:
        np.subtract(xc, np.float64(x_zp.reshape(-1)[0]), out=xc)
    w = inputs[p.w].astype(_F64)
    w_zp = inputs[p.w_zp] if p.w_zp < len(inputs) else None
    if w_zp is not None:
        wz = w_zp.astype(_F64)
        np.subtract(w, wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.ndim == 1 else wz, out=w)
    size = int(np.prod(y_shape))
    acc = _scratch(outputs, 1, size, _F64).reshape(y_shape)
    if size:
        _conv([xc, w, None], [acc] + outputs[p.first_tmp:], p.conv)
    return acc


def _conv_integer_prepare(ctx) -> _IntConvPlan:
    return _int_conv_prepare_for(ctx, 1, 2, 3, -1, False)


@lib.kernel("ConvInteger", prepare=_conv_integer_prepare,
            scratch=lambda ctx: _int_conv_scratch_for(ctx, 1, False))
def _conv_integer(inputs, outputs, p: _IntConvPlan):
    y = outputs[0]
    acc = _int_conv_accumulate(inputs, outputs, p, y.shape)
    np.copyto(y, acc, casting="unsafe")


def _qlinear_conv_prepare(ctx) -> _IntConvPlan:
    return _int_conv_prepare_for(ctx, 3, 2, 5, 8, True)


@lib.kernel("QLinearConv", prepare=_qlinear_conv_prepare,
            scratch=lambda ctx: _int_conv_scratch_for(ctx, 3, True))
def _qlinear_conv(inputs, outputs, p: _IntConvPlan):
    y = outputs[0]
    acc = _int_conv_accumulate(inputs, outputs, p, y.shape)
    bias = inputs[p.bias] if p.bias < len(inputs) else None
    if bias is not None:
        np.add(acc, bias.astype(_F64).reshape(p.channel_shape), out=acc)
    x_scale, w_scale, y_scale = inputs[1], inputs[4], inputs[6]
    # the multiplier in float32, in the spec's order (onnxruntime's too): x_scale * w_scale / y_scale
    scale = (np.float32(x_scale.reshape(-1)[0]) * w_scale.astype(_F32)) / np.float32(y_scale.reshape(-1)[0])
    if scale.ndim == 1 and scale.size > 1:
        scale = scale.reshape(p.channel_shape)
    res = _scratch(outputs, 3, acc.size, _F32).reshape(y.shape)
    np.copyto(res, acc, casting="unsafe")      # int32 accumulator -> float32
    np.multiply(res, scale, out=res)
    np.rint(res, out=res)
    np.add(res, np.float32(inputs[7].reshape(-1)[0]), out=res)
    np.clip(res, p.lo, p.hi, out=res)
    np.copyto(y, res, casting="unsafe")
