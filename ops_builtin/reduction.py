"""Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin,
Softmax, LogSoftmax and Hardmax.

Every ONNX version of each op is registered. The ``Reduce*`` ops take ``axes`` as an
attribute before opset 13 (ReduceSum) or 18 (the others) and as an optional input after;
``noop_with_empty_axes`` selects between "reduce everything" and "reduce nothing" for empty
axes (composite ops still apply their element-wise step, e.g. ReduceSumSquare squares).
Reducing over an empty set gives the op's identity: 0 for sums, 1 for products, -inf/+inf
(or the dtype's min/max) for max/min and -inf for the log reductions.

float16/bfloat16/float8 inputs are computed in float32 and cast back; float32 stays float32
(numpy's pairwise float32 summation, like ONNX Runtime), never float64.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from dynashape.errors import ShapeInferenceError
from dynashape.records import OpLibrary, fixed_dtype, same_dtype
from dynashape.shapes import dim_max, dim_min, normalize_axes, normalize_axis, numel, value_list

lib = OpLibrary()

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


# dtype helpers ------------------------------------------------------------------

def _is_low_float(dt: np.dtype) -> bool:
    """float16, bfloat16 and the float8 types (ml_dtypes): computed in float32."""
    return dt == np.float16 or (dt.kind == "V" and "float" in dt.name)


def _compute_dtype(dt: np.dtype, float_math: bool) -> np.dtype | None:
    """The dtype to compute in when it differs from ``dt`` (None: compute natively).

    ``float_math``: the op needs real arithmetic (mean, sqrt, log), so integer inputs are
    computed in float64 and truncated back like the ONNX reference implementation.
    """
    if _is_low_float(dt):
        return _F32
    if float_math and dt.kind in "iub":
        return np.dtype(np.float64)
    return None


# Reduce* --------------------------------------------------------------------------

def _axes_request(ctx, input_form: bool):
    """The axes as the node gives them: a list of ints (maybe empty), or None if unknown."""
    if not input_form:
        axes = ctx.attr("axes")
        return [] if axes is None else [int(a) for a in axes]
    if not ctx.has_input(1):
        return []
    if ctx.dtype(1) is not None and ctx.dtype(1) != np.int64:
        ctx.fail(f"axes must be int64, got {ctx.dtype(1)}", kind="InvalidAxesType")
    shape = ctx.shape(1)
    if shape is not None and len(shape) > 1:
        ctx.fail(f"axes must be a 1-D tensor, got rank {len(shape)}", kind="InvalidAxesRank")
    axes = value_list(ctx.value(1))
    if axes is None:
        return None
    if not all(isinstance(a, (int, np.integer)) for a in axes):
        return None
    return [int(a) for a in axes]


def _resolve_axes(ctx, input_form: bool) -> tuple | None:
    """Normalised axes to reduce (``()`` for a no-op), or None when the axes input is unknown."""
    rank = len(ctx.shape(0))
    axes = _axes_request(ctx, input_form)
    if axes is None:
        return None
    if not axes:
        return () if ctx.attr("noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted(normalize_axes(ctx, axes, rank)))


def _reduced_shape(shape, axes, keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _make_reduce_infer(input_from: int):
    def infer(ctx):
        shape = ctx.shape(0)
        if shape is None:
            return [None]
        input_form = ctx.opset >= input_from
        keepdims = bool(ctx.attr("keepdims", 1))
        axes = _resolve_axes(ctx, input_form)
        if axes is not None:
            return [_reduced_shape(shape, axes, keepdims)]
        # axes input not known on the host: the rank may still be known
        n = ctx.shape(1)[0] if ctx.shape(1) else None
        if isinstance(n, int) and n > len(shape):
            # more axes than dims: one is out of range or repeated, whatever their values
            ctx.fail(f"{n} axes for an input of rank {len(shape)}", kind="AxisOutOfRange")
        if keepdims:
            return [tuple(ctx.new_dim() for _ in shape)]
        if isinstance(n, int) and n > 0:
            return [tuple(ctx.new_dim() for _ in range(len(shape) - n))]
        return [None]
    return infer


class _ReducePlan(NamedTuple):
    axes: tuple           # normalised axes to reduce
    keep_shape: tuple     # the output shape with reduced dims kept as 1
    work: np.dtype | None  # dtype to compute in (None: the input's)
    empty: bool           # the reduction runs over zero elements per output


def _plan(shape, dtype, axes, float_math: bool) -> _ReducePlan:
    keep = tuple(1 if i in axes else d for i, d in enumerate(shape))
    empty = any(shape[a] == 0 for a in axes)
    return _ReducePlan(axes, keep, _compute_dtype(np.dtype(dtype), float_math), empty)


def _runtime_axes(x: np.ndarray, axes_in, prepared) -> tuple:
    """Axes from the run-time value of the axes input (when prepare could not see it),
    checked as inference checks known axes (``normalize_axes``).

    Raises: ShapeInferenceError kinds AxisOutOfRange, DuplicateAxes.
    """
    axes = [] if axes_in is None else [int(a) for a in np.asarray(axes_in).reshape(-1)]
    if not axes:
        return () if prepared["noop"] else tuple(range(x.ndim))
    rank, node, op = x.ndim, prepared["node"], prepared["op"]
    where = f"{op} node '{node}': axes {axes}"
    if not all(-rank <= a < rank for a in axes):
        raise ShapeInferenceError(f"{where} are out of range for rank {rank} (valid: [{-rank}, {rank - 1}])",
                                  node=node, op_type=op, kind="AxisOutOfRange")
    norm = sorted(a + rank if a < 0 else a for a in axes)
    if len(set(norm)) != len(norm):
        raise ShapeInferenceError(f"{where} contain duplicates", node=node, op_type=op, kind="DuplicateAxes")
    return tuple(norm)


def _run_reduce(fn: Callable, inputs, outputs, prepared):
    """Run ``fn(x, plan, out)``: ``out`` has the keep-dims shape and the work dtype."""
    x = inputs[0]
    plan = prepared["plan"]
    if plan is None:
        axes = _runtime_axes(x, inputs[1] if len(inputs) > 1 else None, prepared)
        plan = _plan(x.shape, x.dtype, axes, prepared["float_math"])
    out = outputs[0]
    fresh = out is None
    if fresh:
        shape = plan.keep_shape if prepared["keepdims"] else _reduced_shape(x.shape, plan.axes, False)
        out = np.empty(shape, dtype=x.dtype)
    target = out.reshape(plan.keep_shape)
    if plan.work is None:
        fn(x, plan, target)
    else:
        tmp = np.empty(plan.keep_shape, dtype=plan.work)
        fn(x.astype(plan.work), plan, tmp)
        np.copyto(target, tmp, casting="unsafe")
    return [out] if fresh else None


def _sum(x, plan, out):
    sums = trailing_sums(x, len(plan.axes)) if _many_trailing_rows(x, plan.axes) else None
    if sums is None:
        np.add.reduce(x, axis=plan.axes, keepdims=True, out=out)
    else:
        np.copyto(out, sums)


def _many_trailing_rows(x: np.ndarray, axes: tuple) -> bool:
    """The axes are the last len(axes) ones and they make at least BLAS_SUM_ROWS rows: a
    float sum over them is one BLAS product (:func:`trailing_sums`); fewer rows reduce
    straight into the output (at a GaussianNB's batch 1, 1 us against 2.8)."""
    n = len(axes)
    if not n or tuple(axes) != tuple(range(x.ndim - n, x.ndim)):
        return False
    inner = math.prod(x.shape[x.ndim - n:])
    return inner > 0 and x.size >= BLAS_SUM_ROWS * inner


def _mean(x, plan, out):
    _sum(x, plan, out)
    count = 1
    for a in plan.axes:
        count *= x.shape[a]
    np.divide(out, count, out=out)     # an empty reduction: 0/0 = nan, quietly (fpstate)


def _extreme_initial(dt: np.dtype, largest: bool):
    """The identity of max (``largest``) / min over an empty set for dtype ``dt``."""
    if dt == np.bool_:
        return not largest
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return info.min if largest else info.max
    return -np.inf if largest else np.inf


def _extreme(ufunc: np.ufunc, largest: bool):
    """ReduceMax / ReduceMin body: an empty set reduces to the dtype's identity."""
    def reduce(x, plan, out):
        if plan.empty:
            ufunc.reduce(x, axis=plan.axes, keepdims=True, out=out, initial=_extreme_initial(x.dtype, largest))
        else:
            extreme_keepdims(ufunc, x, plan.axes, out)
    return reduce


#: the longest last axis :func:`extreme_keepdims` folds column by column, and the fewest rows
#: it does so for: numpy's reduce over a short contiguous axis takes a slow path per row
#: ((1000, 3) max: ~50 us against ~7 us for two np.maximum over columns; (1000, 16) ~60
#: against ~25); from 32 columns its own loop wins
SHORT_ROW_COLUMNS, SHORT_ROW_MIN_ROWS = 16, 32


def extreme_keepdims(ufunc: np.ufunc, x: np.ndarray, axes, out: np.ndarray | None = None) -> np.ndarray:
    """``ufunc.reduce(x, axis=axes, keepdims=True, out=out)`` for np.maximum / np.minimum over
    non-empty axes (an array, also for a 0-d ``x``), the same values (NaN propagates as in the
    reduction): over the last axis alone, many short rows are folded one column at a time (a
    loop over at most SHORT_ROW_COLUMNS columns, each step one vectorised ufunc call over all
    the rows)."""
    n = x.shape[-1] if x.ndim else 0
    if tuple(axes) != (x.ndim - 1,) or not (2 <= n <= SHORT_ROW_COLUMNS and x.size >= SHORT_ROW_MIN_ROWS * n):
        return np.asarray(ufunc.reduce(x, axis=tuple(axes), keepdims=True, out=out))
    if out is None:
        out = np.empty(x.shape[:-1] + (1,), x.dtype)
    acc = out[..., 0]
    ufunc(x[..., 0], x[..., 1], out=acc)
    for j in range(2, n):
        ufunc(acc, x[..., j], out=acc)
    return out


_max = _extreme(np.maximum, True)
_min = _extreme(np.minimum, False)


def _prod(x, plan, out):
    np.multiply.reduce(x, axis=plan.axes, keepdims=True, out=out)


def _l1(x, plan, out):
    np.add.reduce(np.abs(x), axis=plan.axes, keepdims=True, out=out)


def _sum_square(x, plan, out):
    np.add.reduce(np.square(x), axis=plan.axes, keepdims=True, out=out)


def _l2(x, plan, out):
    _sum_square(x, plan, out)
    np.sqrt(out, out=out)


def _log_sum(x, plan, out):
    np.add.reduce(x, axis=plan.axes, keepdims=True, out=out)
    np.log(out, out=out)


def _log_sum_exp(x, plan, out):
    if plan.empty or x.size == 0:
        out.fill(-np.inf)
        return
    shift = extreme_keepdims(np.maximum, x, plan.axes)
    np.copyto(shift, 0, where=np.isinf(shift))        # +-inf rows: no shift (a NaN row stays NaN)
    e = np.subtract(x, shift, out=np.empty(x.shape, x.dtype))
    np.exp(e, out=e)
    sums = trailing_sums(e) if plan.axes == (x.ndim - 1,) else None
    if sums is None:
        np.add.reduce(e, axis=plan.axes, keepdims=True, out=out)
        np.log(out, out=out)
    else:
        np.log(sums, out=out)
    np.add(out, shift, out=out)


# op -> (since_versions, first version taking axes as an input)
_REDUCE_VERSIONS = {
    "ReduceSum": ((1, 11, 13), 13),
    "ReduceMean": ((1, 11, 13, 18), 18),
    "ReduceMax": ((1, 11, 12, 13, 18, 20), 18),
    "ReduceMin": ((1, 11, 12, 13, 18, 20), 18),
    "ReduceProd": ((1, 11, 13, 18), 18),
    "ReduceL1": ((1, 11, 13, 18), 18),
    "ReduceL2": ((1, 11, 13, 18), 18),
    "ReduceLogSum": ((1, 11, 13, 18, 28), 18),
    "ReduceLogSumExp": ((1, 11, 13, 18, 28), 18),
    "ReduceSumSquare": ((1, 11, 13, 18), 18),
}
# op -> (compute, needs real arithmetic for integer inputs)
_REDUCE_FUNCS = {
    "ReduceSum": (_sum, False), "ReduceMean": (_mean, True), "ReduceMax": (_max, False),
    "ReduceMin": (_min, False), "ReduceProd": (_prod, False), "ReduceL1": (_l1, False),
    "ReduceL2": (_l2, True), "ReduceLogSum": (_log_sum, True),
    "ReduceLogSumExp": (_log_sum_exp, True), "ReduceSumSquare": (_sum_square, False),
}


def _make_reduce_prepare(input_from: int, float_math: bool):
    def prepare(ctx):
        input_form = ctx.opset >= input_from
        axes = _resolve_axes(ctx, input_form)
        plan = None if axes is None else _plan(ctx.shape(0), ctx.dtype(0), axes, float_math)
        return {"plan": plan, "keepdims": bool(ctx.attr("keepdims", 1)),
                "noop": bool(ctx.attr("noop_with_empty_axes", 0)), "float_math": float_math,
                "node": ctx.node.name, "op": ctx.node.op_type}
    return prepare


def reduce_prepare(op: str):
    """The ``prepare`` of the Reduce* kernel ``op`` (its axes, keepdims and work dtype): for a
    kernel of another plugin that builds on this one's."""
    return _make_reduce_prepare(_REDUCE_VERSIONS[op][1], _REDUCE_FUNCS[op][1])


def _propagate_axes(ctx, value: np.ndarray, input_from: int) -> tuple | None:
    axes = _axes_request(ctx, ctx.opset >= input_from)
    if axes is None:
        return None
    if not axes:
        return () if ctx.attr("noop_with_empty_axes", 0) else tuple(range(value.ndim))
    return tuple(sorted(normalize_axes(ctx, axes, value.ndim)))


def _as_values(arr: np.ndarray) -> np.ndarray:
    """An object array of dims as int64 when every entry is a plain int."""
    arr = np.asarray(arr)
    if arr.dtype == object and all(isinstance(v, (int, np.integer)) for v in arr.reshape(-1)):
        return arr.astype(np.int64)
    return arr


def _propagate_symbolic(op: str, value: np.ndarray, axes: tuple, keepdims: bool):
    """Sum/Prod of any rank, Max/Min of a 1-D vector of (possibly symbolic) dims; else None."""
    if op in ("ReduceSum", "ReduceProd"):
        ufunc = np.add if op == "ReduceSum" else np.multiply
        out = ufunc.reduce(value, axis=axes, keepdims=keepdims) if axes else value.copy()
        return _as_values(np.asarray(out, dtype=object))
    if op not in ("ReduceMax", "ReduceMin") or value.ndim > 1:
        return None
    if not axes:
        return _as_values(value)
    if value.size == 0:
        return None
    pick = dim_max if op == "ReduceMax" else dim_min
    out = np.empty((1,) if keepdims else (), dtype=object)
    out[...] = pick(*value.tolist())
    return _as_values(out)


def _make_reduce_propagate(op: str, input_from: int, fn: Callable, float_math: bool):
    """ONNX partial data propagation: concrete values are reduced by the kernel function,
    symbolic dim values (object arrays) by :func:`_propagate_symbolic`."""
    def propagate(ctx):
        value = ctx.value(0)
        if value is None:
            return [None]
        value = np.asarray(value)
        axes = _propagate_axes(ctx, value, input_from)
        if axes is None:
            return [None]
        keepdims = bool(ctx.attr("keepdims", 1))
        if value.dtype == object:
            return [_propagate_symbolic(op, value, axes, keepdims)]
        out = np.empty(_reduced_shape(value.shape, axes, keepdims), dtype=value.dtype)
        _run_reduce(fn, [value], [out], {"plan": _plan(value.shape, value.dtype, axes, float_math)})
        return [out]
    return propagate


_REDUCE_DOC = """{op}: reduce ``data`` over ``axes`` (attribute before opset {n}, input from {n}).

Shapes/dtypes: data (d0..dr-1) of the spec's types; the output has the same dtype, with the
reduced dims kept as 1 (``keepdims=1``) or removed. Empty axes reduce all dims unless
``noop_with_empty_axes=1``.
Raises: ShapeInferenceError (AxisOutOfRange, DuplicateAxes, InvalidAxesType, InvalidAxesRank).
Source: ONNX operator spec, {op}-{versions}.
"""


def _register_reductions():
    for op, (versions, input_from) in _REDUCE_VERSIONS.items():
        fn, float_math = _REDUCE_FUNCS[op]
        propagate = _make_reduce_propagate(op, input_from, fn, float_math)
        infer = _make_reduce_infer(input_from)
        infer.__doc__ = _REDUCE_DOC.format(op=op, n=input_from, versions="/".join(map(str, versions)))
        attr_form = tuple(v for v in versions if v < input_from)
        input_form = tuple(v for v in versions if v >= input_from)
        lib.op(op, since_version=attr_form, infer_dtype=same_dtype(0),
               propagate_value=propagate)(infer)
        lib.op(op, since_version=input_form, infer_dtype=same_dtype(0), value_inputs=(1,),
               propagate_value=propagate)(infer)
        lib.kernel(op, prepare=reduce_prepare(op))(
            functools.partial(_run_reduce, fn))


_register_reductions()

# ArgMax / ArgMin --------------------------------------------------------------------

def _arg_infer(ctx):
    """ArgMax/ArgMin: int64 indices of the extreme along ``axis``.

    Shapes: data (d0..dr-1), r >= 1 -> d with d[axis] = 1 (keepdims=1) or removed.
    Raises: AxisOutOfRange; EmptyReduction when d[axis] is 0 and the output has elements
    (an empty output needs no extreme: onnxruntime returns it).
    Source: ONNX operator spec, ArgMax-13 / ArgMin-13 (and 1, 11, 12).
    """
    shape = ctx.shape(0)
    if shape is None:
        return [None]
    if len(shape) == 0:
        ctx.fail("data must have rank >= 1", kind="InvalidRank")
    axis = normalize_axis(ctx, ctx.attr("axis", 0), len(shape))
    empty_output = any(isinstance(d, int) and d == 0 for i, d in enumerate(shape) if i != axis)
    if not empty_output and not ctx.assume(shape[axis], ">", 0):   # a guard where the dim is symbolic
        ctx.fail(f"cannot take the arg-extreme over axis {axis} of size 0", kind="EmptyReduction")
    return [_reduced_shape(shape, (axis,), bool(ctx.attr("keepdims", 1)))]


class _ArgPlan(NamedTuple):
    axis: int
    keep_shape: tuple
    last: bool
    work: np.dtype | None


def _arg_prepare(ctx):
    shape = ctx.shape(0)
    axis = normalize_axis(ctx, ctx.attr("axis", 0), len(shape))
    keep = tuple(1 if i == axis else d for i, d in enumerate(shape))
    dt = np.dtype(ctx.dtype(0))
    # float16 runs natively (numpy has float16 ufuncs), rounding like the ONNX reference;
    # bfloat16/float8 have no exp of their own and go through float32
    work = _F32 if _is_low_float(dt) and dt != np.float16 else None
    return _ArgPlan(axis, keep, bool(ctx.attr("select_last_index", 0)), work)


def _run_arg(find: Callable, inputs, outputs, plan: _ArgPlan):
    if outputs[0].size == 0:
        return
    x = inputs[0] if plan.work is None else inputs[0].astype(plan.work)
    target = outputs[0].reshape(plan.keep_shape)
    if plan.last:
        flipped = np.flip(x, axis=plan.axis)
        find(flipped, axis=plan.axis, keepdims=True, out=target)
        np.subtract(x.shape[plan.axis] - 1, target, out=target)
    else:
        find(x, axis=plan.axis, keepdims=True, out=target)


# (the ndarray methods: np.argmax's dispatch wrapper costs ~1 us a call, the method ~0.3 us)
for _op, _find in (("ArgMax", np.ndarray.argmax), ("ArgMin", np.ndarray.argmin)):
    lib.op(_op, since_version=(1, 11, 12, 13), infer_dtype=fixed_dtype(np.int64))(_arg_infer)
    lib.kernel(_op, prepare=_arg_prepare)(functools.partial(_run_arg, _find))


# Softmax / LogSoftmax / Hardmax -------------------------------------------------------

def _softmax_axis(ctx, rank: int) -> int:
    default = 1 if ctx.opset < 13 else -1
    return normalize_axis(ctx, ctx.attr("axis", default), rank)


def _softmax_infer(ctx):
    """Softmax/LogSoftmax/Hardmax: output has the input's shape and dtype.

    Before opset 13 the input is coerced to 2-D (prod(d[:axis]), prod(d[axis:])) and
    normalised along the second dim; from 13 along the single ``axis``.
    Raises: AxisOutOfRange (axis outside [-r, r-1]).
    Source: ONNX operator spec, Softmax/LogSoftmax/Hardmax-1, -11, -13.
    """
    shape = ctx.shape(0)
    if shape is None:
        return [None]
    if len(shape) == 0 and ctx.opset >= 13:
        ctx.fail("input must have rank >= 1", kind="InvalidRank")
    if len(shape):
        _softmax_axis(ctx, len(shape))
    return [shape]


class _SoftmaxPlan(NamedTuple):
    shape2: tuple | None   # the 2-D coercion (opset < 13) or None
    axis: int                 # axis of the (possibly coerced) array
    work: np.dtype | None


def _softmax_prepare(ctx):
    shape = tuple(ctx.shape(0))
    dt = np.dtype(ctx.dtype(0))
    # float16 runs natively (numpy has float16 ufuncs), rounding like the ONNX reference;
    # bfloat16/float8 have no exp of their own and go through float32
    work = _F32 if _is_low_float(dt) and dt != np.float16 else None
    if len(shape) == 0:
        return _SoftmaxPlan((1, 1), 1, work)
    axis = _softmax_axis(ctx, len(shape))
    if ctx.opset < 13:
        return _SoftmaxPlan((numel(shape[:axis]), numel(shape[axis:])), 1, work)
    return _SoftmaxPlan(None, axis, work)


@functools.lru_cache(maxsize=256)
def _ones(n: int, dtype: np.dtype) -> np.ndarray:
    ones = np.ones(n, dtype)
    ones.flags.writeable = False
    return ones


#: rows from which :func:`trailing_sums` is one BLAS product (below, numpy's add.reduce costs
#: less: (1, 3) 1.7 against 3.8 us, (8, 3) 1.8 against 3.7, (64, 10) 5.0 against 6.2; from 64
#: rows BLAS wins: (1000, 3) 4.1 against 22.5 us, (64, 128) 3.6 against 4.7)
BLAS_SUM_ROWS = 32


def trailing_sums(x: np.ndarray, n_axes: int = 1) -> np.ndarray | None:
    """Sums over the last ``n_axes`` axes of a C-contiguous float32/float64 array (keepdims
    shape) as one BLAS matrix-vector product (numpy's ``add.reduce`` over fewer than
    :data:`BLAS_SUM_ROWS` rows), None where that does not apply. numpy's own reduction over
    short trailing axes of many rows costs a slow pass and several Python-level steps
    (``mean``), which dominate at small shapes; BLAS adds in another order, within a few ulp
    of it."""
    if x.dtype not in (_F32, _F64) or not x.flags.c_contiguous or not 0 < n_axes <= x.ndim:
        return None
    inner = math.prod(x.shape[x.ndim - n_axes:])
    if inner == 0:
        return None
    shape = x.shape[:x.ndim - n_axes] + (1,) * n_axes
    rows = x.reshape(-1, inner)
    if rows.shape[0] < BLAS_SUM_ROWS:
        return np.add.reduce(rows, axis=1).reshape(shape)
    return (rows @ _ones(inner, x.dtype)).reshape(shape)


def _softmax_body(x, out, axis):
    """exp(x - max) / sum, the division as a multiply by the reciprocal of each sum (as
    onnxruntime's MLAS does)."""
    np.subtract(x, extreme_keepdims(np.maximum, x, (axis,)), out=out)   # (np.max: ~4 us more a call than the reduce)
    np.exp(out, out=out)
    sums = trailing_sums(out) if axis == out.ndim - 1 else None
    if sums is None:
        sums = np.add.reduce(out, axis=axis, keepdims=True)
    np.multiply(out, np.reciprocal(sums, out=sums), out=out)


def _log_softmax_body(x, out, axis):
    np.subtract(x, np.max(x, axis=axis, keepdims=True), out=out)
    lse = np.log(np.add.reduce(np.exp(out), axis=axis, keepdims=True))
    np.subtract(out, lse, out=out)


def _hardmax_body(x, out, axis):
    out.fill(0)
    index = np.argmax(x, axis=axis, keepdims=True)
    np.put_along_axis(out, index, 1, axis=axis)


def _run_softmax(body: Callable, inputs, outputs, plan: _SoftmaxPlan):
    x, out = inputs[0], outputs[0]
    if x.size == 0:
        return
    if plan.shape2 is not None:
        x, out = x.reshape(plan.shape2), out.reshape(plan.shape2)
    if plan.work is None:
        body(x, out, plan.axis)
    else:
        tmp = np.empty(out.shape, dtype=plan.work)
        body(x.astype(plan.work), tmp, plan.axis)
        np.copyto(out, tmp, casting="unsafe")
    return


for _op, _body in (("Softmax", _softmax_body), ("LogSoftmax", _log_softmax_body),
                   ("Hardmax", _hardmax_body)):
    lib.op(_op, since_version=(1, 11, 13), infer_dtype=same_dtype(0))(_softmax_infer)
    lib.kernel(_op, prepare=_softmax_prepare)(functools.partial(_run_softmax, _body))
