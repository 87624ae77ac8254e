"""Elementwise math, comparison, logical and bitwise operators.

Unary: Abs, Neg, Sign, Ceil, Floor, Round, Reciprocal, Sqrt, Exp, Log, Erf, Tanh, Cos, Sin,
Tan, Acos, Asin, Atan, Cosh, Sinh, Asinh, Acosh, Atanh, IsNaN, IsInf, Not, BitwiseNot.
Binary (multidirectional broadcasting; before opset 7 the legacy ``broadcast``/``axis``
form): Add, Sub, Mul, Div, Pow, Mod, Equal, Greater, GreaterOrEqual, Less, LessOrEqual,
And, Or, Xor, BitShift, BitwiseAnd, BitwiseOr, BitwiseXor.
Variadic: Max, Min, Sum, Mean. And Clip.

Source: ONNX operator spec (onnx/docs/Operators.md) for each op and version, and
onnx/docs/Broadcasting.md.

Every op has two kernels: a plain numpy one, and one of priority 1 for float16, bfloat16
and the float8 types that computes in float32 and casts into the output. Add, Sub, Mul,
Div, Neg, Max, Min and Equal propagate symbolic values (object arrays of dims).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from dynashape.dtypes import is_float, is_integer
from dynashape.records import OpLibrary, fixed_dtype, same_dtype
from dynashape.shapes import broadcast_shapes, check_dims_equal, dim_max, dim_min, require
from dynashape.symbolic import Expr, is_nonneg, provably_unequal

lib = OpLibrary()

__all__ = ["LOWP_DTYPES", "apply_lowp", "erf", "erf_into", "lib", "register_kernels"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_BOOL = np.dtype(np.bool_)

#: dtypes computed in float32 and cast back into the output, by name (the ml_dtypes types:
#: an array of one exists only once ml_dtypes is imported, so the tests import nothing)
LOWP_DTYPES = ("float16", "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
_LOWP = frozenset(LOWP_DTYPES)

MathFn = Callable[[list, np.ndarray, object], None]
"""``fn(args, out, prepared)``: the math of an op, writing into ``out``."""


# ---------------------------------------------------------------------------------
# kernels: plain + low-precision (float32) variants
# ---------------------------------------------------------------------------------

def _to32(a):
    return a.astype(_F32) if a is not None and a.dtype.name in _LOWP else a


def apply_lowp(fn: MathFn, args: list, out: np.ndarray, prep) -> None:
    """Run ``fn`` with float16/bfloat16/float8 arguments widened to float32; cast into ``out``."""
    args = [_to32(a) for a in args]
    if out.dtype.name in _LOWP:
        tmp = np.empty(out.shape, _F32)
        fn(args, tmp, prep)
        np.copyto(out, tmp, casting="unsafe")
    else:
        fn(args, out, prep)


def register_kernels(library: OpLibrary, op_type: str, fn: MathFn, *, since_version: int = 1,
                     end_version: int | None = None, prepare=None, may_inplace: tuple = (),
                     lowp: bool = True) -> None:
    """Register ``fn`` as the kernel of ``op_type`` plus (``lowp``: an op that takes floats) a
    float32-computing one for low precisions. A ``fn.kernel`` (the same computation with the
    kernel signature) is registered as it is, saving a call per step on the hot path."""
    def compute(inputs, outputs, prep):
        fn(inputs, outputs[0], prep)

    def compute_lowp(inputs, outputs, prep):
        apply_lowp(fn, inputs, outputs[0], prep)

    common = {"since_version": since_version, "end_version": end_version, "prepare": prepare,
              "may_inplace": may_inplace}
    library.kernel(op_type, **common)(getattr(fn, "kernel", compute))
    if lowp:
        library.kernel(op_type, dtypes=LOWP_DTYPES, priority=1, **common)(compute_lowp)


def _quiet():
    return np.errstate(all="ignore")


# ---------------------------------------------------------------------------------
# inference helpers
# ---------------------------------------------------------------------------------

_KIND_TEST = {
    "float": (is_float, "a floating-point type"),
    "int": (is_integer, "an integer type"),
    "bool": (lambda d: d == _BOOL, "bool"),
    "numeric": (lambda d: is_float(d) or is_integer(d), "a numeric type"),
}


def _check_dtype(ctx, i: int, kind: str | None) -> None:
    dt = ctx.dtype(i)
    if kind is None or dt is None:
        return
    test, what = _KIND_TEST[kind]
    if not test(dt):
        ctx.fail(f"input {i} has element type {dt}, expected {what}", kind="UnsupportedDtype")


def _check_same_dtype(ctx, indices) -> None:
    dts = [ctx.dtype(i) for i in indices if ctx.has_input(i) and ctx.dtype(i) is not None]
    keys = ["string" if d.kind in "OUS" else d for d in dts]
    if any(k != keys[0] for k in keys[1:]):
        ctx.fail(f"inputs must share one element type, got {', '.join(map(str, dts))}",
                 kind="DtypeMismatch")


def _legacy_broadcast_shape(ctx, a, b):
    """Opset < 7 binary shape rule: ``broadcast``/``axis`` attributes, B unidirectional to A."""
    if not ctx.attr("broadcast", 0):
        if len(a) != len(b):
            ctx.fail(f"A has rank {len(a)} and B rank {len(b)}; without broadcast=1 the shapes "
                     "must be equal", kind="BroadcastMismatch")
        return tuple(check_dims_equal(ctx, x, y, f"dim {i} of A and B (broadcast=0)")
                     for i, (x, y) in enumerate(zip(a, b)))
    start = _legacy_axis(ctx, a, b)
    for j, d in enumerate(b):
        t = a[start + j]
        # 1 or A's dim: the product of the differences is 0 (exact for symbolic dims too)
        require(ctx, (d - 1) * (d - t), "==", 0, f"B dim {j} is {d}, expected 1 or A's dim {start + j} ({t}) "
                "for legacy broadcasting", "BroadcastMismatch")
    return tuple(a)


def _legacy_axis(ctx, a, b) -> int:
    if len(b) > len(a):
        ctx.fail(f"B has rank {len(b)} > rank {len(a)} of A; legacy broadcasting needs "
                 "rank(B) <= rank(A)", kind="BroadcastMismatch")
    axis = ctx.attr("axis")
    if axis is None:
        return len(a) - len(b)
    axis = int(axis) + len(a) if int(axis) < 0 else int(axis)
    if not 0 <= axis <= len(a) - len(b):
        ctx.fail(f"axis {ctx.attr('axis')} does not fit B of rank {len(b)} into A of rank "
                 f"{len(a)}", kind="AxisOutOfRange")
    return axis


def _legacy_prepare(ctx):
    """Shape to reshape B to (rank of A, B's dims at ``axis``), or None for numpy rules."""
    a, b = ctx.shape(0), ctx.shape(1)
    if not ctx.attr("broadcast", 0) or len(a) == len(b):
        return None
    start = _legacy_axis(ctx, a, b)
    return (1,) * start + tuple(b) + (1,) * (len(a) - start - len(b))


def _binary_shape_fn(kind: str | None, same_type: bool = True):
    """infer_shape of a binary op: numpy broadcasting (opset >= 7) or the legacy form.
    Source: ONNX Broadcasting.md; ONNX operator spec, Add-6 (legacy) and Add-14"""
    def infer(ctx):
        _check_dtype(ctx, 0, kind)
        if same_type:
            _check_same_dtype(ctx, (0, 1))
        a, b = ctx.shape(0), ctx.shape(1)
        if a is None or b is None:
            return [None]
        if ctx.opset < 7:
            return [_legacy_broadcast_shape(ctx, a, b)]
        return [broadcast_shapes(ctx, a, b)]
    return infer


def _unary_shape_fn(kind: str | None):
    def infer(ctx):
        _check_dtype(ctx, 0, kind)
        return [ctx.shape(0)]
    return infer


# ---------------------------------------------------------------------------------
# registration helpers
# ---------------------------------------------------------------------------------

def _uf1(ufunc) -> MathFn:
    def fn(args, out, _):
        ufunc(args[0], out=out)

    def kernel(inputs, outputs, _):
        ufunc(inputs[0], out=outputs[0])
    fn.kernel = kernel
    return fn


def _uf2(ufunc) -> MathFn:
    def fn(args, out, _):
        ufunc(args[0], args[1], out=out)

    def kernel(inputs, outputs, _):
        ufunc(inputs[0], inputs[1], out=outputs[0])
    fn.kernel = kernel
    return fn


def _unary(op_type: str, versions, fn: MathFn, *, kind: str | None = "float",
           out_dtype=None, propagate=None, prepare=None) -> None:
    infer_dtype = same_dtype(0) if out_dtype is None else fixed_dtype(out_dtype)
    lib.op(op_type, versions, infer_dtype=infer_dtype, propagate_value=propagate)(_unary_shape_fn(kind))
    register_kernels(lib, op_type, fn, prepare=prepare,
                     may_inplace=((0, 0),) if out_dtype is None else (), lowp=_takes_floats(kind))


def _binary(op_type: str, versions, fn: MathFn, *, kind: str | None = "numeric", out_dtype=None,
            propagate=None, prepare=None, same_type: bool = True, inplace: tuple | None = None) -> None:
    """Register a broadcasting binary op; adds the legacy (opset < 7) kernel when needed."""
    infer_dtype = same_dtype(0) if out_dtype is None else fixed_dtype(out_dtype)
    versions = (versions,) if isinstance(versions, int) else tuple(versions)
    lib.op(op_type, versions, infer_dtype=infer_dtype,
           propagate_value=propagate)(_binary_shape_fn(kind, same_type))
    if inplace is None:
        inplace = ((0, 0), (0, 1)) if out_dtype is None and same_type else ()
    if prepare is not None and min(versions) < 7:
        raise AssertionError("legacy broadcasting with a custom prepare is not supported")
    if min(versions) < 7:
        def legacy(args, out, shape):
            if shape is not None:
                args = [args[0], args[1].reshape(shape)]
            fn(args, out, None)
        register_kernels(lib, op_type, legacy, end_version=6, prepare=_legacy_prepare,
                         may_inplace=((0, 0),) if inplace else (), lowp=_takes_floats(kind))
    register_kernels(lib, op_type, fn, since_version=max(7, min(versions)) if min(versions) < 7
                     else min(versions), prepare=prepare, may_inplace=inplace, lowp=_takes_floats(kind))


def _takes_floats(kind: str | None) -> bool:
    """Whether an op of this input kind takes floating-point inputs (a low-precision kernel)."""
    return kind not in ("bool", "int")


# ---------------------------------------------------------------------------------
# symbolic value propagation (object arrays of ints and Exprs)
# ---------------------------------------------------------------------------------

def _py(v):
    """An element of a value array as a Python int or Expr; None for anything else."""
    if isinstance(v, Expr):
        return v
    if isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)
    return None


def _symbolic_values(ctx, indices):
    """The input values as object arrays of dims when at least one is symbolic, else None.

    Only integer tensors carry symbolic values through arithmetic (a dim cast to float
    keeps its value, but float division is not floor division)."""
    if ctx.opset < 7 and len(indices) == 2 and ctx.attr("broadcast", 0):
        return None
    if any(d is not None and np.dtype(d).kind not in "iu" for d in (ctx.dtype(i) for i in indices)):
        return None
    vals = [ctx.value(i) for i in indices]
    if any(v is None for v in vals) or not any(np.asarray(v).dtype == object for v in vals):
        return None
    out = []
    for v in vals:
        arr = np.asarray(v)
        conv = np.empty(arr.shape, dtype=object)
        flat = [_py(x) for x in arr.reshape(-1).tolist()]
        if any(x is None for x in flat):
            return None
        conv.reshape(-1)[:] = flat if flat else []
        out.append(conv)
    return out


def _pack(ctx, res: np.ndarray):
    """Object result as the output dtype when every element is known, else an object array."""
    flat = res.reshape(-1).tolist()
    if all(isinstance(x, int) for x in flat):
        dt = ctx.dtype(0)
        dt = dt if dt is not None and dt.kind in "iu" else np.dtype(np.int64)
        return np.array(flat, dtype=dt).reshape(res.shape)
    return res


def _elementwise_prop(op, n_inputs: int = 2):
    fobj = np.frompyfunc(op, n_inputs, 1)

    def prop(ctx):
        indices = tuple(range(ctx.num_inputs)) if n_inputs < 0 else tuple(range(n_inputs))
        vals = _symbolic_values(ctx, indices)
        if vals is None:
            return [None]
        f = fobj if n_inputs >= 0 else np.frompyfunc(op, len(vals), 1)
        try:
            res = np.asarray(f(*vals), dtype=object)
        except (TypeError, ZeroDivisionError):
            return [None]
        return [_pack(ctx, res)]
    return prop


def _sym_div(a, b):
    """Integer Div of shape values, rounded toward zero as the kernel divides: ints exactly;
    a symbolic quotient only where floor division gives the same for every binding (a >= 0
    over an int divisor). Otherwise no value (TypeError, ZeroDivisionError: the value is
    computed at run time)."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    if isinstance(b, int) and b != 0 and is_nonneg(a):
        return a // b if b > 0 else -(a // -b)
    raise TypeError(f"{a} // {b} may round otherwise than Div for some binding")


def _prop_equal(ctx):
    vals = _symbolic_values(ctx, (0, 1))
    if vals is None:
        return [None]
    a, b = np.broadcast_arrays(*vals)
    out = np.empty(a.shape, dtype=_BOOL)
    fa, fb, fo = a.reshape(-1), b.reshape(-1), out.reshape(-1)
    for i in range(fa.size):  # small shape vectors only
        x, y = fa[i], fb[i]
        if isinstance(x, int) and isinstance(y, int):
            fo[i] = x == y
        elif x == y:
            fo[i] = True
        elif provably_unequal(x, y):
            fo[i] = False
        else:
            return [None]
    return [out]


# ---------------------------------------------------------------------------------
# Erf (W. J. Cody's rational approximations, double precision)
# ---------------------------------------------------------------------------------

_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
          3.20937758913846947e03, 1.85777706184603153e-1)
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
          2.84423683343917062e03)
_ERF_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
          2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
          2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_ERF_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
          1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
          3.43936767414372164e03, 1.23033935480374942e03)
_ERF_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
          1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_ERF_Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1,
          6.05183413124413191e-2, 2.33520497626869185e-3)
_RSQRTPI = 0.5641895835477562869480794515607725858440


def _exp_neg_sq(y):
    """exp(-y*y) without the cancellation of forming y*y directly (Cody's split)."""
    ysq = np.trunc(y * 16.0) / 16.0
    delta = (y - ysq) * (y + ysq)
    return np.exp(-ysq * ysq) * np.exp(-delta)


def _erfc_mid(y):
    """erfc(y) for 0.46875 < y <= 4."""
    num = _ERF_C[8] * y
    den = y.copy()
    for i in range(7):
        num = (num + _ERF_C[i]) * y
        den = (den + _ERF_D[i]) * y
    return _exp_neg_sq(y) * ((num + _ERF_C[7]) / (den + _ERF_D[7]))


def _erfc_tail(y):
    """erfc(y) for y > 4 (and inf / nan)."""
    with _quiet():
        z = 1.0 / (y * y)
        num = _ERF_P[5] * z
        den = z.copy()
        for i in range(4):
            num = (num + _ERF_P[i]) * z
            den = (den + _ERF_Q[i]) * z
        r = (_RSQRTPI - z * (num + _ERF_P[4]) / (den + _ERF_Q[4])) / y
        far = np.where(np.isnan(y), np.nan, 0.0)
        return np.where(y < 26.7, _exp_neg_sq(np.minimum(y, 26.7)) * r, far)


def erf(x: np.ndarray) -> np.ndarray:
    """erf of a float array, computed in float64 to about 1e-16 relative error (W. J. Cody)."""
    x = np.asarray(x, dtype=_F64)
    ax = np.abs(x)
    res = np.empty_like(x)
    small = ax <= 0.46875
    if small.all():
        sel = x
    else:
        sel = x[small]
    z = sel * sel
    num = _ERF_A[4] * z
    den = z.copy()
    for i in range(3):
        num = (num + _ERF_A[i]) * z
        den = (den + _ERF_B[i]) * z
    if sel is x:
        np.divide(x * (num + _ERF_A[3]), den + _ERF_B[3], out=res)
        return res
    res[small] = sel * (num + _ERF_A[3]) / (den + _ERF_B[3])
    mid = ~small & (ax <= 4.0)
    if mid.any():
        res[mid] = np.copysign(1.0 - _erfc_mid(ax[mid]), x[mid])
    tail = ~(small | mid)
    if tail.any():
        res[tail] = np.copysign(1.0 - _erfc_tail(ax[tail]), x[tail])
    return res


# float32: the rational approximation of Eigen / XLA (clamped to [-4, 4]), within 8 ulp
_ERF32_ALPHA = tuple(np.float32(c) for c in (
    -2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
    -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02))
_ERF32_BETA = tuple(np.float32(c) for c in (
    -1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
    -1.42647390514189e-02))


def _erf32(x: np.ndarray, out: np.ndarray) -> None:
    """erf of a float32 array into float32 ``out`` (may alias ``x``)."""
    v = np.clip(x, np.float32(-4.0), np.float32(4.0))
    x2 = v * v
    p = np.full_like(x2, _ERF32_ALPHA[0])
    for c in _ERF32_ALPHA[1:]:
        p *= x2
        p += c
    q = np.full_like(x2, _ERF32_BETA[0])
    for c in _ERF32_BETA[1:]:
        q *= x2
        q += c
    np.multiply(v, p, out=p)
    np.divide(p, q, out=out)


def erf_into(x: np.ndarray, out: np.ndarray) -> None:
    """erf of float32/float64 ``x`` into ``out``: float32 by a rational approximation (8 ulp),
    float64 by :func:`erf` (Cody)."""
    if x.dtype == _F32 and out.dtype == _F32:
        _erf32(x, out)
    else:
        np.copyto(out, erf(x), casting="unsafe")


def _erf_fn(args, out, _):
    erf_into(args[0], out)


# ---------------------------------------------------------------------------------
# unary ops
# ---------------------------------------------------------------------------------

def _neg_prop(ctx):
    vals = _symbolic_values(ctx, (0,))
    if vals is None:
        return [None]
    return [_pack(ctx, np.asarray(np.frompyfunc(lambda v: -v, 1, 1)(vals[0]), dtype=object))]


_unary("Abs", (1, 6, 13), _uf1(np.absolute), kind="numeric")
_unary("Neg", (1, 6, 13), _uf1(np.negative), kind="numeric", propagate=_neg_prop)
_unary("Sign", (9, 13), _uf1(np.sign), kind="numeric")
_unary("Ceil", (1, 6, 13), _uf1(np.ceil))
_unary("Floor", (1, 6, 13), _uf1(np.floor))
_unary("Round", (11, 22), _uf1(np.rint))
_unary("Sqrt", (1, 6, 13), _uf1(np.sqrt))
_unary("Exp", (1, 6, 13), _uf1(np.exp))
_unary("Log", (1, 6, 13), _uf1(np.log))
_unary("Tanh", (1, 6, 13), _uf1(np.tanh))
_unary("Erf", (9, 13), _erf_fn)
for _name, _uf in (("Cos", np.cos), ("Sin", np.sin), ("Tan", np.tan), ("Acos", np.arccos),
                   ("Asin", np.arcsin), ("Atan", np.arctan)):
    _unary(_name, (7, 22), _uf1(_uf))
for _name, _uf in (("Cosh", np.cosh), ("Sinh", np.sinh), ("Asinh", np.arcsinh),
                   ("Acosh", np.arccosh), ("Atanh", np.arctanh)):
    _unary(_name, (9, 22), _uf1(_uf))


def _reciprocal(args, out, _):
    np.reciprocal(args[0], out=out)


_unary("Reciprocal", (1, 6, 13), _reciprocal)
_unary("Not", 1, _uf1(np.logical_not), kind="bool")
_unary("BitwiseNot", 18, _uf1(np.invert), kind="int")
_unary("IsNaN", (9, 13, 20), _uf1(np.isnan), out_dtype=np.bool_)


def _isinf_prepare(ctx):
    """(detect_positive, detect_negative). Source: ONNX operator spec, IsInf-20"""
    return bool(ctx.attr("detect_positive", 1)), bool(ctx.attr("detect_negative", 1))


def _isinf(args, out, prep):
    pos, neg = prep
    x = args[0]
    if pos and neg:
        np.isinf(x, out=out)
    elif pos:
        np.equal(x, np.inf, out=out)
    elif neg:
        np.equal(x, -np.inf, out=out)
    else:
        out.fill(False)


_unary("IsInf", (10, 20), _isinf, out_dtype=np.bool_, prepare=_isinf_prepare)


# ---------------------------------------------------------------------------------
# binary arithmetic
# ---------------------------------------------------------------------------------

def _div(args, out, _):
    """A / B; integers truncate toward zero (ONNX reference, ORT). Source: ONNX operator spec, Div-14"""
    x, y = args
    if x.dtype.kind == "i":
        # C-style truncation toward zero (ONNX reference, ORT); division by zero gives 0
        adjust = (np.remainder(x, y) != 0) & ((x < 0) ^ (y < 0))
        np.floor_divide(x, y, out=out)
        np.add(out, adjust, out=out, casting="unsafe")
        return
    if x.dtype.kind == "u":
        np.floor_divide(x, y, out=out)
    else:
        np.divide(x, y, out=out)


_ARITH_VERSIONS = (1, 6, 7, 13, 14)
_binary("Add", _ARITH_VERSIONS, _uf2(np.add), propagate=_elementwise_prop(lambda a, b: a + b))
_binary("Sub", _ARITH_VERSIONS, _uf2(np.subtract), propagate=_elementwise_prop(lambda a, b: a - b))
_binary("Mul", _ARITH_VERSIONS, _uf2(np.multiply), propagate=_elementwise_prop(lambda a, b: a * b))
_binary("Div", _ARITH_VERSIONS, _div, propagate=_elementwise_prop(_sym_div))


def _pow_scalar(x, e: float, out) -> bool:
    """x ** e for the common exponents without np.power (slow); False when not handled."""
    if e == 2.0:
        np.multiply(x, x, out=out)
    elif e == 3.0:
        sq = x * x
        np.multiply(sq, x, out=out)
    elif e == 1.0:
        np.copyto(out, x)
    elif e == 0.5:
        np.sqrt(x, out=out)
    elif e == -1.0:
        np.reciprocal(x, out=out)
    else:
        return False
    return True


def _pow(args, out, _):
    """X ** Y with the output in X's dtype (Y may be another type). Source: ONNX operator spec, Pow-15"""
    x, y = args
    if x.dtype.kind == "f":
        if y.dtype != x.dtype:
            y = y.astype(x.dtype)
        if y.size == 1 and y.ndim <= x.ndim and _pow_scalar(x, float(y.reshape(-1)[0]), out):
            return
        np.power(x, y, out=out)
        return
    # integer base: exact integer power for non-negative integer exponents, else via float64
    if y.dtype.kind in "iu" and not (y.dtype.kind == "i" and (y < 0).any()):
        np.power(x, y.astype(x.dtype, copy=False), out=out, casting="unsafe")
        return
    np.copyto(out, np.power(x.astype(_F64), y.astype(_F64)), casting="unsafe")


_binary("Pow", (1, 7, 12, 13, 15), _pow, same_type=False, inplace=((0, 0),))


def _mod_shape(ctx):
    """Broadcast shape of A and B. Raises ShapeInferenceError for float inputs with fmod=0 before
    opset 28. Source: ONNX operator spec, Mod-13 and Mod-28"""
    shapes = _binary_shape_fn("numeric")(ctx)
    dt = ctx.dtype(0)
    if dt is not None and is_float(dt) and not ctx.attr("fmod", 0) and ctx.opset < 28:
        ctx.fail("fmod=0 is not defined for floating-point inputs before opset 28; "
                 "expected fmod=1", kind="ModFloatRequiresFmod")
    return shapes


def _mod_prepare(ctx):
    return np.fmod if ctx.attr("fmod", 0) else np.mod


def _mod(args, out, ufunc):
    ufunc(args[0], args[1], out=out)


lib.op("Mod", (10, 13, 28), infer_dtype=same_dtype(0))(_mod_shape)
register_kernels(lib, "Mod", _mod, prepare=_mod_prepare, may_inplace=((0, 0), (0, 1)))


def _bitshift_prepare(ctx):
    direction = ctx.attr("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        ctx.fail(f"direction is {direction!r}, expected 'LEFT' or 'RIGHT'", kind="InvalidAttribute")
    return np.left_shift if direction == "LEFT" else np.right_shift


def _bitshift_shape(ctx):
    """Broadcast shape; ``direction`` must be LEFT or RIGHT. Source: ONNX operator spec, BitShift-28"""
    _bitshift_prepare(ctx)
    return _binary_shape_fn("int")(ctx)


def _bitshift(args, out, ufunc):
    ufunc(args[0], args[1], out=out)


lib.op("BitShift", (11, 28), infer_dtype=same_dtype(0))(_bitshift_shape)
register_kernels(lib, "BitShift", _bitshift, prepare=_bitshift_prepare, may_inplace=((0, 0), (0, 1)), lowp=False)

for _name, _uf in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or),
                   ("BitwiseXor", np.bitwise_xor)):
    _binary(_name, 18, _uf2(_uf), kind="int")


# ---------------------------------------------------------------------------------
# comparison and logical
# ---------------------------------------------------------------------------------

_binary("Equal", (1, 7, 11, 13, 19), _uf2(np.equal), kind=None, out_dtype=np.bool_,
        propagate=_prop_equal)
_binary("Greater", (1, 7, 9, 13), _uf2(np.greater), out_dtype=np.bool_)
_binary("Less", (1, 7, 9, 13), _uf2(np.less), out_dtype=np.bool_)
_binary("GreaterOrEqual", (12, 16), _uf2(np.greater_equal), out_dtype=np.bool_)
_binary("LessOrEqual", (12, 16), _uf2(np.less_equal), out_dtype=np.bool_)
_binary("And", (1, 7), _uf2(np.logical_and), kind="bool")
_binary("Or", (1, 7), _uf2(np.logical_or), kind="bool")
_binary("Xor", (1, 7), _uf2(np.logical_xor), kind="bool")


# ---------------------------------------------------------------------------------
# variadic: Max, Min, Sum, Mean
# ---------------------------------------------------------------------------------

def _variadic_shape_fn(kind: str):
    """Max/Min/Sum/Mean shape: all equal before opset 8, then multidirectional broadcasting.
    Source: ONNX operator spec, Max-6 / Max-13"""
    def infer(ctx):
        if ctx.num_inputs < 1:
            ctx.fail("expected at least one input", kind="MissingInput")
        for i in range(ctx.num_inputs):
            _check_dtype(ctx, i, kind)
        _check_same_dtype(ctx, range(ctx.num_inputs))
        shapes = [ctx.shape(i) for i in range(ctx.num_inputs)]
        if any(s is None for s in shapes):
            return [None]
        if ctx.opset < 8:
            first = shapes[0]
            for j, s in enumerate(shapes[1:], 1):
                if len(s) != len(first):
                    ctx.fail(f"input {j} has rank {len(s)}, expected rank {len(first)}: before "
                             "opset 8 all inputs must have the same shape", kind="ShapeMismatch")
                first = tuple(check_dims_equal(ctx, x, y, f"dim {k} of input {j} and input 0")
                              for k, (x, y) in enumerate(zip(first, s)))
            return [first]
        return [broadcast_shapes(ctx, *shapes)]
    return infer


def _fold(ufunc):
    def fn(args, out, _):
        if len(args) == 1:
            np.copyto(out, args[0])
            return
        ufunc(args[0], args[1], out=out)
        for a in args[2:]:
            ufunc(out, a, out=out)
    return fn


def _mean(args, out, _):
    _fold(np.add)(args, out, None)
    np.divide(out, len(args), out=out)


def _variadic(op_type: str, versions, fn: MathFn, kind: str, propagate=None) -> None:
    lib.op(op_type, versions, infer_dtype=same_dtype(0), propagate_value=propagate)(_variadic_shape_fn(kind))
    register_kernels(lib, op_type, fn, may_inplace=((0, 0), (0, 1)))


_variadic("Max", (1, 6, 8, 12, 13), _fold(np.maximum), "numeric", _elementwise_prop(dim_max, -1))
_variadic("Min", (1, 6, 8, 12, 13), _fold(np.minimum), "numeric", _elementwise_prop(dim_min, -1))
_variadic("Sum", (1, 6, 8, 13), _fold(np.add), "float")
_variadic("Mean", (1, 6, 8, 13), _mean, "float")


# ---------------------------------------------------------------------------------
# Clip
# ---------------------------------------------------------------------------------

def _clip_shape(ctx):
    """Y has the input's shape; min and max (inputs from opset 11) must be scalars of its type.
    Source: ONNX operator spec, Clip-6 (attributes) and Clip-13 (inputs)"""
    _check_dtype(ctx, 0, "numeric" if ctx.opset >= 12 else "float")
    if ctx.opset >= 11:
        _check_same_dtype(ctx, (0, 1, 2))
        for i, name in ((1, "min"), (2, "max")):
            s = ctx.shape(i) if ctx.has_input(i) else None
            for d in s or ():
                require(ctx, d, "==", 1, f"{name} has shape ({', '.join(map(str, s))}), expected a scalar",
                        "ClipBoundNotScalar")
    return [ctx.shape(0)]


def _clip_prepare(ctx):
    if ctx.opset >= 11:
        return None
    return float(ctx.attr("min", -math.inf)), float(ctx.attr("max", math.inf))


def _bound(args, i):
    b = args[i] if len(args) > i else None
    return None if b is None else b.reshape(())


def _clip(args, out, prep):
    x = args[0]
    lo, hi = prep if prep is not None else (_bound(args, 1), _bound(args, 2))
    if lo is None and hi is None:
        np.copyto(out, x)
    elif hi is None:
        np.maximum(x, lo, out=out)
    elif lo is None:
        np.minimum(x, hi, out=out)
    else:
        np.maximum(x, lo, out=out)
        np.minimum(out, hi, out=out)


# the +-FLT_MAX default bounds of Clip-6 overflow float16: quiet, as every kernel runs (fpstate)
lib.op("Clip", (1, 6, 11, 12, 13), infer_dtype=same_dtype(0))(_clip_shape)
register_kernels(lib, "Clip", _clip, prepare=_clip_prepare, may_inplace=((0, 0),))

