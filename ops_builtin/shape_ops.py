"""Shape and layout operators: Shape, Size, Reshape, Squeeze, Unsqueeze, Flatten, Identity,
Constant, ConstantOfShape, Range, Expand, Dropout, Cast, CastLike.

The view ops (Reshape, Squeeze, Unsqueeze, Flatten, Identity) declare ``aliases=((0, 0),)``
and return ``inputs[0].reshape(shape)``. The ops that carry shapes around in models
(Shape, Size, Reshape, Squeeze, Unsqueeze, Cast, Expand, Range, ...) have a
``propagate_value`` that works on object arrays of symbolic dims.
"""
from __future__ import annotations

import math

import numpy as np
from dynashape.dtypes import is_float, is_integer, np_dtype
from dynashape.onnx_proto import TensorProto
from dynashape.records import OpLibrary, fixed_dtype, same_dtype
from dynashape.shapes import broadcast_shapes, check_vector_inputs, dim_max, numel, require
from dynashape.symbolic import Expr, is_nonneg

lib = OpLibrary()


# shared helpers -------------------------------------------------------------------

def _as_dim(v):
    """A value-list entry as a dim: numpy ints become Python ints, Exprs stay."""
    if isinstance(v, Expr):
        return v
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    raise TypeError(f"expected an integer dim, got {v!r}")


def _dims_of(value) -> list | None:
    """A host-known 1-D (or scalar) integer value as a list of dims, or None."""
    if value is None:
        return None
    return [_as_dim(v) for v in np.asarray(value).reshape(-1).tolist()]


def _dims_array(dims) -> np.ndarray:
    """Dims as an int64 array when all are known, else an object array (ints and Exprs)."""
    dims = list(dims)
    if all(isinstance(d, int) for d in dims):
        return np.array(dims, dtype=np.int64)
    out = np.empty(len(dims), dtype=object)
    out[:] = dims
    return out


def _scalar_array(d) -> np.ndarray:
    if isinstance(d, int):
        return np.array(d, dtype=np.int64)
    out = np.empty((), dtype=object)
    out[()] = d
    return out


def _all_known(shape) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def _vector_length(ctx, i: int):
    """The element count of (1-D) input ``i`` (an int or Expr), or None when its rank is unknown."""
    s = ctx.shape(i)
    return None if s is None else numel(s)


def _unknown_vector_dims(ctx, i: int):
    """Fresh dims for an output whose rank equals the (static) length of 1-D input ``i``."""
    n = _vector_length(ctx, i)
    if not isinstance(n, int):
        return None
    return tuple(ctx.new_dim() for _ in range(n))


def _view_prepare(ctx):
    return tuple(ctx.output_shapes[0])


def _view_kernel(inputs, outputs, shape):
    """Kernel of the view ops: the input reshaped to the planned output shape."""
    return [inputs[0].reshape(shape)]


def _propagate_view(infer):
    """propagate_value of a view op: the known input value reshaped to the inferred shape."""
    def propagate(ctx):
        value = ctx.value(0)
        if value is None:
            return [None]
        shape = infer(ctx)[0]
        if not _all_known(shape):
            return [None]
        return [np.asarray(value).reshape(shape)]
    return propagate


def _axes_from(ctx, input_index: int = 1, attr: str = "axes", from_input_since: int = 13):
    """(given, axes) for ops taking ``axes`` as an attribute before opset 13 and as an input
    from 13: ``given`` is False when no axes were given; ``axes`` is None when the input is
    given but its value is not host-known."""
    if ctx.opset < from_input_since:
        axes = ctx.attr(attr)
        return (axes is not None), (None if axes is None else [int(a) for a in axes])
    if not ctx.has_input(input_index):
        return False, None
    value = ctx.value(input_index)
    if value is None:
        return True, None
    return True, [int(a) for a in np.asarray(value).reshape(-1).tolist()]


# Shape, Size --------------------------------------------------------------------------

def _shape_slice(ctx):
    shape = ctx.shape(0)
    if shape is None:
        return None
    rank = len(shape)
    start, end = 0, rank
    if ctx.opset >= 15:
        start = int(ctx.attr("start", 0))
        end = int(ctx.attr("end", rank))
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
    return tuple(shape[start:end]) if end > start else ()


@lib.op("Shape", since_version=(1, 13, 15, 19, 21, 23, 24, 25), infer_dtype=fixed_dtype(np.int64),
        shape_only_inputs=(0,), propagate_value=lambda ctx: [_shape_value(ctx)])
def _shape_shape(ctx):
    """Shape of the input as a 1-D int64 tensor (sliced by ``start``/``end`` from opset 15).

    Output: (len(selected dims),) int64. ``start``/``end`` are clamped to [0, rank] after
    adding rank to negative values; an empty slice gives an empty tensor.
    Source: ONNX operator spec, Shape-1/13/15/19/21/23/24/25.
    """
    dims = _shape_slice(ctx)
    if dims is None:
        return [(ctx.new_dim(),)]
    return [(len(dims),)]


def _shape_value(ctx):
    dims = _shape_slice(ctx)
    return None if dims is None else _dims_array(dims)


@lib.kernel("Shape", prepare=lambda ctx: np.array(_shape_slice(ctx), dtype=np.int64))
def _shape(inputs, outputs, dims):
    outputs[0][...] = dims


@lib.op("Size", since_version=(1, 13, 19, 21, 23, 24, 25), infer_dtype=fixed_dtype(np.int64),
        shape_only_inputs=(0,),
        propagate_value=lambda ctx: [None if ctx.shape(0) is None else _scalar_array(numel(ctx.shape(0)))])
def _size_shape(ctx):
    """Number of elements of the input as an int64 scalar.

    Output: () int64. Source: ONNX operator spec, Size-1/13/19/21/23/24/25.
    """
    return [()]


@lib.kernel("Size", prepare=lambda ctx: int(numel(ctx.shape(0))))
def _size(inputs, outputs, n):
    outputs[0][...] = n


# Reshape -----------------------------------------------------------------------------

def _reshape_target(ctx, in_shape, requested: list, allowzero: bool):
    """The output shape of Reshape for a host-known ``requested`` shape (ints / Exprs)."""
    rank = None if in_shape is None else len(in_shape)
    out: list = []
    minus_one = []
    has_zero = False
    for i, v in enumerate(requested):
        if isinstance(v, Expr):
            # a symbolic entry is taken literally: it must not be -1 (infer) or, without
            # allowzero, 0 (copy the input dim)
            ctx.assume(v, ">=" if allowzero else ">", 0)
            out.append(v)
        elif v == -1:
            minus_one.append(i)
            out.append(None)
        elif v < -1:
            ctx.fail(f"shape {requested} has invalid value {v} at index {i}; expected a dim >= 0 "
                     "or -1 (inferred)", kind="ReshapeInvalidValue")
        elif v == 0 and not allowzero:
            has_zero = True
            if rank is not None and i >= rank:
                ctx.fail(f"shape {requested} has 0 at index {i}, which copies the input dimension at "
                         f"the same index, but the input has rank {rank}", kind="ReshapeZeroIndexOutOfRange")
            out.append(None if rank is None else in_shape[i])
        else:
            has_zero = has_zero or v == 0
            out.append(v)
    if len(minus_one) > 1:
        ctx.fail(f"shape {requested} has more than one -1 (at indices {minus_one}); "
                 "at most one dim can be inferred", kind="ReshapeMultipleMinusOne")
    if allowzero and minus_one and has_zero:
        ctx.fail(f"shape {requested} contains both 0 and -1 with allowzero=1; the -1 dim "
                 "cannot be inferred", kind="ReshapeAllowZeroWithMinusOne")
    if in_shape is None:
        return tuple(ctx.new_dim() if d is None else d for d in out)
    total = numel(in_shape)
    if minus_one:
        known = numel(d for d in out if d is not None)
        if not ctx.assume(known, "!=", 0):
            ctx.fail(f"cannot infer the -1 dim of shape {requested}: the other dims have 0 elements "
                     f"and the input has {total}", kind="ReshapeCannotInferMinusOne")
        if not ctx.assume(total % known, "==", 0):
            ctx.fail(f"cannot infer the -1 dim of shape {requested}: input element count {total} is not "
                     f"a multiple of {known}", kind="ReshapeElementCountMismatch")
        out[minus_one[0]] = total // known
    elif not ctx.assume(numel(out), "==", total):
        ctx.fail(f"element count mismatch: input has {total} elements, shape {requested} "
                 f"(resolved {tuple(out)}) has {numel(out)}; the size must be equal",
                 kind="ReshapeElementCountMismatch")
    return tuple(out)


def _reshape_infer(ctx):
    in_shape = ctx.shape(0)
    if ctx.opset < 5:
        requested = [int(v) for v in ctx.attr("shape", [])]
    else:
        check_vector_inputs(ctx, {1: "shape"})
        requested = _dims_of(ctx.value(1))
        if requested is None:
            return [_unknown_vector_dims(ctx, 1)]
    allowzero = ctx.opset >= 14 and bool(ctx.attr("allowzero", 0))
    return [_reshape_target(ctx, in_shape, requested, allowzero)]


def _reshape_shape(ctx):
    """Reshape the input to the requested shape (a view).

    Inputs: data (any type), shape (int64 1-D; the ``shape`` attribute before opset 5).
    A 0 copies the input dim at the same index (unless ``allowzero=1``, opset 14+); one -1
    is inferred from the element count.
    Raises: ShapeInferenceError kinds ReshapeElementCountMismatch, ReshapeMultipleMinusOne,
    ReshapeZeroIndexOutOfRange, ReshapeCannotInferMinusOne, ReshapeInvalidValue,
    ReshapeAllowZeroWithMinusOne.
    Source: ONNX operator spec, Reshape-1/5/13/14/19/21/23/24/25.
    """
    return _reshape_infer(ctx)


lib.op("Reshape", since_version=1, infer_dtype=same_dtype(0), aliases=((0, 0),),
       propagate_value=_propagate_view(_reshape_infer))(_reshape_shape)
lib.op("Reshape", since_version=(5, 13, 14, 19, 21, 23, 24, 25), infer_dtype=same_dtype(0),
       aliases=((0, 0),), value_inputs=(1,), propagate_value=_propagate_view(_reshape_infer))(_reshape_shape)
lib.kernel("Reshape", prepare=_view_prepare, reads=(0,))(_view_kernel)


# Squeeze, Unsqueeze --------------------------------------------------------------------

def _squeeze_infer(ctx):
    shape = ctx.shape(0)
    given, axes = _axes_from(ctx)
    if shape is None:
        return [None]
    rank = len(shape)
    if not given:
        if not _all_known(shape):
            return [None]
        return [tuple(d for d in shape if d != 1)]
    if axes is None:
        n = _vector_length(ctx, 1)
        return [tuple(ctx.new_dim() for _ in range(rank - n)) if isinstance(n, int) else None]
    norm = []
    for a in axes:
        if not -rank <= a < rank:
            ctx.fail(f"axis {a} is out of range for rank {rank} (valid: [{-rank}, {rank - 1}])",
                     kind="SqueezeAxisOutOfRange")
        norm.append(a + rank if a < 0 else a)
    if len(set(norm)) != len(norm):
        ctx.fail(f"axes {axes} contain duplicates", kind="DuplicateAxes")
    for a in norm:
        d = shape[a]
        # a symbolic dim is squeezed where it is 1 only: a guard, so a signature binding it
        # to another value is planned by per-node inference, which raises
        if not ctx.assume(d, "==", 1):
            ctx.fail(f"cannot squeeze axis {a}: its dim is {d}, expected 1", kind="SqueezeNonUnitDim")
    return [tuple(d for i, d in enumerate(shape) if i not in norm)]


def _squeeze_shape(ctx):
    """Remove size-1 dims (those in ``axes``, or all when no axes are given); a view.

    ``axes`` is an attribute before opset 13 and an optional int64 input from 13; negative
    axes count from the back. Without axes and with symbolic dims the output rank is unknown.
    Raises: ShapeInferenceError kinds SqueezeNonUnitDim, SqueezeAxisOutOfRange, DuplicateAxes.
    Source: ONNX operator spec, Squeeze-1/11/13/21/23/24/25.
    """
    return _squeeze_infer(ctx)


lib.op("Squeeze", since_version=(1, 11), infer_dtype=same_dtype(0), aliases=((0, 0),),
       propagate_value=_propagate_view(_squeeze_infer))(_squeeze_shape)
lib.op("Squeeze", since_version=(13, 21, 23, 24, 25), infer_dtype=same_dtype(0), aliases=((0, 0),),
       value_inputs=(1,), propagate_value=_propagate_view(_squeeze_infer))(_squeeze_shape)
lib.kernel("Squeeze", prepare=_view_prepare, reads=(0,))(_view_kernel)


def _unsqueeze_infer(ctx):
    shape = ctx.shape(0)
    given, axes = _axes_from(ctx)
    if not given:
        ctx.fail("axes are required", kind="UnsqueezeMissingAxes")
    if shape is None:
        return [None]
    if axes is None:
        n = _vector_length(ctx, 1)
        return [tuple(ctx.new_dim() for _ in range(len(shape) + n)) if isinstance(n, int) else None]
    out_rank = len(shape) + len(axes)
    norm = []
    for a in axes:
        if not -out_rank <= a < out_rank:
            ctx.fail(f"axis {a} is out of range for the output rank {out_rank} "
                     f"(valid: [{-out_rank}, {out_rank - 1}])", kind="UnsqueezeAxisOutOfRange")
        norm.append(a + out_rank if a < 0 else a)
    if len(set(norm)) != len(norm):
        ctx.fail(f"axes {axes} contain duplicates (normalised: {norm})", kind="DuplicateAxes")
    rest = iter(shape)
    return [tuple(1 if i in norm else next(rest) for i in range(out_rank))]


def _unsqueeze_shape(ctx):
    """Insert size-1 dims at ``axes`` (counted on the output rank); a view.

    ``axes`` is an attribute before opset 13 and an int64 input from 13.
    Raises: ShapeInferenceError kinds UnsqueezeAxisOutOfRange, DuplicateAxes, UnsqueezeMissingAxes.
    Source: ONNX operator spec, Unsqueeze-1/11/13/21/23/24/25.
    """
    return _unsqueeze_infer(ctx)


lib.op("Unsqueeze", since_version=(1, 11), infer_dtype=same_dtype(0), aliases=((0, 0),),
       propagate_value=_propagate_view(_unsqueeze_infer))(_unsqueeze_shape)
lib.op("Unsqueeze", since_version=(13, 21, 23, 24, 25), infer_dtype=same_dtype(0), aliases=((0, 0),),
       value_inputs=(1,), propagate_value=_propagate_view(_unsqueeze_infer))(_unsqueeze_shape)
lib.kernel("Unsqueeze", prepare=_view_prepare, reads=(0,))(_view_kernel)


# Flatten, Identity ---------------------------------------------------------------------

def _flatten_infer(ctx):
    shape = ctx.shape(0)
    axis = int(ctx.attr("axis", 1))
    if shape is None:
        return [(ctx.new_dim(), ctx.new_dim())]
    rank = len(shape)
    low = 0 if ctx.opset < 11 else -rank
    if not low <= axis <= rank:
        ctx.fail(f"axis {axis} is out of range for rank {rank} (valid: [{low}, {rank}])",
                 kind="FlattenAxisOutOfRange")
    if axis < 0:
        axis += rank
    return [(numel(shape[:axis]), numel(shape[axis:]))]


@lib.op("Flatten", since_version=(1, 9, 11, 13, 21, 23, 24, 25), infer_dtype=same_dtype(0),
        aliases=((0, 0),), propagate_value=_propagate_view(_flatten_infer))
def _flatten_shape(ctx):
    """Flatten to 2-D: (prod(dims[:axis]), prod(dims[axis:])); a view.

    ``axis`` in [-rank, rank] (opset 11+; [0, rank] before), default 1.
    Raises: ShapeInferenceError kind FlattenAxisOutOfRange.
    Source: ONNX operator spec, Flatten-1/9/11/13/21/23/24/25.
    """
    return _flatten_infer(ctx)


lib.kernel("Flatten", prepare=_view_prepare, reads=(0,))(_view_kernel)


@lib.op("Identity", since_version=(1, 13, 14, 16, 19, 21, 23, 24, 25), infer_dtype=same_dtype(0),
        aliases=((0, 0),), propagate_value=lambda ctx: [ctx.value(0)])
def _identity_shape(ctx):
    """The input unchanged (a view for tensors; sequences and optionals pass through).

    Source: ONNX operator spec, Identity-1/13/14/16/19/21/23/24/25.
    """
    return [ctx.shape(0)]


@lib.kernel("Identity")
def _identity(inputs, outputs, ctx):
    x = inputs[0]
    return [x.view() if isinstance(x, np.ndarray) else x]


# Constant, ConstantOfShape ----------------------------------------------------------------

_CONSTANT_ATTRS = ("value", "sparse_value", "value_float", "value_floats", "value_int",
                   "value_ints", "value_string", "value_strings")


def _string_array(values, shape=None) -> np.ndarray:
    out = np.empty(len(values) if shape is None else shape, dtype=object)
    out.reshape(-1)[:] = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]
    return out


def _constant_value(ctx) -> np.ndarray:
    given = [name for name in _CONSTANT_ATTRS if ctx.attr(name) is not None]
    if len(given) != 1:
        ctx.fail(f"exactly one of the attributes {list(_CONSTANT_ATTRS)} must be given, got {given}",
                 kind="ConstantAttribute")
    name = given[0]
    v = ctx.attr(name)
    if name in ("value", "sparse_value"):
        arr = np.asarray(v)
        if arr.dtype.kind in "USO":
            return _string_array(arr.reshape(-1).tolist(), arr.shape)
        return arr
    if name == "value_float":
        return np.array(v, dtype=np.float32)
    if name == "value_floats":
        return np.array(v, dtype=np.float32).reshape(-1)
    if name == "value_int":
        return np.array(v, dtype=np.int64)
    if name == "value_ints":
        return np.array(v, dtype=np.int64).reshape(-1)
    if name == "value_string":
        return _string_array([v], ())
    return _string_array(list(v))


@lib.op("Constant", since_version=(1, 9, 11, 12, 13, 19, 21, 23, 24, 25),
        infer_dtype=lambda ctx: [_constant_value(ctx).dtype],
        propagate_value=lambda ctx: [_constant_value(ctx)])
def _constant_shape(ctx):
    """A constant tensor from exactly one of ``value``, ``sparse_value`` (opset 11+),
    ``value_float(s)``, ``value_int(s)``, ``value_string(s)`` (opset 12+).

    Output: float32 for value_float(s), int64 for value_int(s), string (object) for
    value_string(s), the tensor's type otherwise. Raises: ShapeInferenceError kind
    ConstantAttribute when not exactly one is given.
    Source: ONNX operator spec, Constant-1/9/11/12/13/19/21/23/24/25.
    """
    return [tuple(int(d) for d in _constant_value(ctx).shape)]


@lib.kernel("Constant", prepare=_constant_value)
def _constant(inputs, outputs, value):
    outputs[0][...] = value


def _constant_of_shape_fill(ctx) -> np.ndarray:
    v = ctx.attr("value")
    if v is None:
        return np.zeros((), dtype=np.float32)
    v = np.asarray(v)
    if v.size != 1:
        ctx.fail(f"attribute value must hold exactly one element, got shape {v.shape}",
                 kind="ConstantOfShapeValue")
    return v.reshape(())


def _constant_of_shape_infer(ctx):
    dims = _dims_of(ctx.value(0))
    if dims is None:
        return [_unknown_vector_dims(ctx, 0)]
    for d in dims:
        require(ctx, d, ">=", 0, f"shape {dims} has a negative dim; expected dims >= 0", "ConstantOfShapeNegativeDim")
    return [tuple(dims)]


def _constant_of_shape_propagate(ctx):
    shape = _constant_of_shape_infer(ctx)[0]
    if not _all_known(shape):
        return [None]
    return [np.full(shape, _constant_of_shape_fill(ctx))]


@lib.op("ConstantOfShape", since_version=(9, 20, 21, 23, 24, 25),
        infer_dtype=lambda ctx: [_constant_of_shape_fill(ctx).dtype], value_inputs=(0,),
        propagate_value=_constant_of_shape_propagate)
def _constant_of_shape_shape(ctx):
    """A tensor of the shape given by input 0 (int64 1-D), filled with the one-element
    ``value`` attribute (default float32 0).

    Raises: ShapeInferenceError kinds ConstantOfShapeNegativeDim, ConstantOfShapeValue.
    Source: ONNX operator spec, ConstantOfShape-9/20/21/23/24/25.
    """
    return _constant_of_shape_infer(ctx)


@lib.kernel("ConstantOfShape", prepare=_constant_of_shape_fill)
def _constant_of_shape(inputs, outputs, fill):
    outputs[0][...] = fill


# Range ---------------------------------------------------------------------------------

def _range_scalars(ctx):
    vals = [ctx.value(i) for i in range(3)]
    if any(v is None for v in vals):
        return None
    out = []
    for v in vals:
        v = np.asarray(v)
        if v.size != 1:
            ctx.fail(f"start, limit and delta must be scalars, got shape {v.shape}", kind="RangeNonScalar")
        x = v.reshape(-1)[0]
        out.append(x if isinstance(x, Expr) else (int(x) if is_integer(v.dtype) or v.dtype == object else float(x)))
    return out


def _range_count(ctx, start, limit, delta):
    """max(ceil((limit - start) / delta), 0), symbolic when start/limit are dims; None if unknown."""
    if isinstance(delta, Expr):
        return None
    if delta == 0:
        ctx.fail("delta must not be 0", kind="RangeZeroDelta")
    if isinstance(start, Expr) or isinstance(limit, Expr):
        # symbolic bounds are whole numbers (dims, also when cast to float): an integral
        # float delta counts like an int one
        if isinstance(delta, float) and delta.is_integer():
            delta = int(delta)
        start, limit = (int(v) if isinstance(v, float) and v.is_integer() else v for v in (start, limit))
        if not isinstance(delta, int) or isinstance(start, float) or isinstance(limit, float):
            return None
        n = -((start - limit) // delta)
        return n if is_nonneg(n) else dim_max(n, 0)
    return max(math.ceil((limit - start) / delta), 0)


@lib.op("Range", since_version=(11, 27), infer_dtype=same_dtype(0), value_inputs=(0, 1, 2),
        propagate_value=lambda ctx: [_range_propagate(ctx)])
def _range_shape(ctx):
    """1-D tensor start, start+delta, ... up to limit (exclusive): max(ceil((limit-start)/delta), 0)
    elements of the inputs' type.

    Inputs: scalar start, limit, delta (float, double, int16/32/64; float16/bfloat16 from
    opset 27, computed in float64 and rounded once unless ``stash_type`` names the input type).
    Raises: ShapeInferenceError kinds RangeZeroDelta, RangeNonScalar.
    Source: ONNX operator spec, Range-11/27.
    """
    vals = _range_scalars(ctx)
    n = None if vals is None else _range_count(ctx, *vals)
    return [(ctx.new_dim() if n is None else n,)]


def _range_propagate(ctx):
    vals = _range_scalars(ctx)
    if vals is None or not all(isinstance(v, int) for v in vals) or not is_integer(ctx.dtype(0)):
        return None
    start, limit, delta = vals
    if delta == 0:
        ctx.fail("delta must not be 0", kind="RangeZeroDelta")
    return np.arange(start, limit, delta, dtype=ctx.dtype(0))


def _range_prepare(ctx):
    dt = ctx.output_dtypes[0]
    stash = int(ctx.attr("stash_type", 1))
    if is_integer(dt):
        return dt, np.dtype(np.int64)
    if dt.name in ("float16", "bfloat16") and stash != 1:
        return dt, dt
    return dt, np.dtype(np.float64)


@lib.kernel("Range", prepare=_range_prepare)
def _range(inputs, outputs, prepared):
    dt, work = prepared
    out = outputs[0]
    if out is not None and dt.kind in "iu":    # exact in integers: straight into the output
        start, delta = int(inputs[0]), int(inputs[2])
        out[...] = np.arange(start, start + out.shape[0] * delta, delta, dtype=dt)
        return None
    start, limit, delta = (np.asarray(x).reshape(()).astype(work) for x in inputs[:3])
    if outputs[0] is not None:
        n = outputs[0].shape[0]
    else:
        n = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    values = np.arange(n, dtype=work) * delta + start
    if outputs[0] is None:
        return [values.astype(dt)]
    np.copyto(outputs[0], values, casting="unsafe")
    return None


# Expand ---------------------------------------------------------------------------------

def _expand_infer(ctx):
    shape = ctx.shape(0)
    dims = _dims_of(ctx.value(1))
    if dims is None:
        n = _vector_length(ctx, 1)
        if shape is None or not isinstance(n, int):
            return [None]
        return [tuple(ctx.new_dim() for _ in range(max(len(shape), n)))]
    for d in dims:
        require(ctx, d, ">=", 0, f"shape {dims} has a negative dim; expected dims >= 0", "ExpandNegativeDim")
    if shape is None:
        return [None]
    return [broadcast_shapes(ctx, tuple(shape), tuple(dims))]


def _expand_propagate(ctx):
    value = ctx.value(0)
    if value is None:
        return [None]
    shape = _expand_infer(ctx)[0]
    if not _all_known(shape):
        return [None]
    return [np.broadcast_to(np.asarray(value), shape).copy()]


@lib.op("Expand", since_version=(8, 13), infer_dtype=same_dtype(0), value_inputs=(1,),
        propagate_value=_expand_propagate)
def _expand_shape(ctx):
    """Broadcast the input to the shape given by input 1 (bidirectional: dims of 1 in either
    side take the other's dim, so the shape may be smaller than the input's dims; 0 against
    1 is 0 either way, as in onnx/docs/Broadcasting.md and ONNX Runtime).

    Raises: ShapeInferenceError kinds BroadcastMismatch, ExpandNegativeDim.
    Source: ONNX operator spec, Expand-8/13.
    """
    return _expand_infer(ctx)


@lib.kernel("Expand")
def _expand(inputs, outputs, ctx):
    np.copyto(outputs[0], inputs[0])


# Dropout -------------------------------------------------------------------------------

def _dropout_dtypes(ctx):
    out = [ctx.dtype(0)]
    if ctx.num_outputs > 1:
        out.append(np.dtype(np.bool_) if ctx.opset >= 10 else ctx.dtype(0))
    return out


@lib.op("Dropout", since_version=(1, 6, 7, 10, 12, 13, 22), infer_dtype=_dropout_dtypes)
def _dropout_shape(ctx):
    """Dropout; in inference mode (the default) output = input and mask = all True.

    Inputs: data, optional ratio (scalar, opset 12+) and training_mode (bool scalar, opset
    12+). With training_mode true and ratio > 0 the output is mask * x / (1 - ratio), the mask
    drawn from ``uniform(0, 1) >= ratio`` (numpy RandomState(seed) when ``seed`` is given).
    Outputs: output (data's type), optional mask (bool; data's type before opset 10).
    Source: ONNX operator spec, Dropout-1/6/7/10/12/13/22.
    """
    shape = ctx.shape(0)
    return [shape] * max(ctx.num_outputs, 1)


def _dropout_prepare(ctx):
    seed = ctx.attr("seed")
    ratio_attr = float(ctx.attr("ratio", 0.5))
    return ctx.opset >= 12, ratio_attr, seed


@lib.kernel("Dropout", prepare=_dropout_prepare)
def _dropout(inputs, outputs, prepared):
    inputs_form, ratio_attr, seed = prepared
    x = inputs[0]
    training = (inputs_form and len(inputs) > 2 and inputs[2] is not None
                and bool(np.asarray(inputs[2]).reshape(-1)[0]))
    ratio = ratio_attr
    if inputs_form:
        ratio = 0.5 if len(inputs) < 2 or inputs[1] is None else float(np.asarray(inputs[1]).reshape(-1)[0])
    mask_out = outputs[1] if len(outputs) > 1 else None
    if not training or ratio == 0:
        np.copyto(outputs[0], x)
        if mask_out is not None:
            mask_out[...] = 1
        return
    rng = np.random.RandomState(seed) if seed is not None else np.random.RandomState()
    mask = rng.uniform(0, 1.0, x.shape) >= ratio
    scale = 1.0 / (1.0 - ratio) if ratio < 1 else 0.0
    np.copyto(outputs[0], mask * x.astype(np.float32) * np.float32(scale), casting="unsafe")
    if mask_out is not None:
        np.copyto(mask_out, mask, casting="unsafe")
    return


# Cast, CastLike ---------------------------------------------------------------------------

#: by name: an array of an ml_dtypes type exists only once ml_dtypes is imported, so these
#: tests import nothing
_FLOAT8_SATURATING = frozenset(("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"))
_E8M0 = "float8_e8m0fnu"
_STRING = np.dtype(object)


def _is_string(dt) -> bool:
    return np.dtype(dt).kind in "OUS"


def _parse_strings(x: np.ndarray, to: np.dtype) -> np.ndarray:
    """Numbers from a string tensor ("3.14", "1e-5", "INF", "-INF", "NaN" case-insensitive)."""
    flat = [s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in x.reshape(-1).tolist()]
    text = np.array(flat, dtype=str).reshape(x.shape)
    if to == np.bool_:
        low = np.char.lower(np.char.strip(text))
        out = np.zeros(x.shape, dtype=bool)
        named = (low == "true") | (low == "false")
        out[low == "true"] = True
        rest = ~named
        if rest.any():
            out[rest] = text[rest].astype(np.float64) != 0
        return out
    if is_integer(to):
        try:
            return text.astype(np.int64)
        except ValueError:
            return np.trunc(text.astype(np.float64))
    return text.astype(np.float64)


def _to_strings(x: np.ndarray) -> np.ndarray:
    """Numbers as text the way ONNX Runtime writes them: shortest round-trip form without a
    trailing ".0", "INF"/"-INF"/"NaN", bools as "1"/"0"."""
    if x.dtype == np.bool_:
        text = np.where(x, "1", "0")
    elif is_float(x.dtype):
        if x.dtype.kind == "V":  # ml_dtypes types have no cast to str
            x = x.astype(np.float32)
        text = x.astype(str)
        text = np.where(np.char.endswith(text, ".0"), np.char.rstrip(text, "0"), text)
        text = np.char.rstrip(text, ".") if text.size else text
        text = np.where(np.isnan(x), "NaN", np.where(np.isinf(x), np.where(x > 0, "INF", "-INF"), text))
    else:
        text = x.astype(np.int64 if x.dtype.kind == "V" else x.dtype).astype(str)
    out = np.empty(x.shape, dtype=object)
    out[...] = text
    return out


def _direct_cast_works(src: np.dtype, dst: np.dtype) -> bool:
    try:
        np.copyto(np.empty(1, dst), np.zeros(1, src), casting="unsafe")
        return True
    except (TypeError, ValueError):
        return False


def _cast_plan(ctx, src: np.dtype, dst: np.dtype):
    """(mode, dst, saturate, round_mode) for casting ``src`` to ``dst``."""
    saturate = bool(ctx.attr("saturate", 1)) if ctx.opset >= 19 else True
    round_mode = ctx.attr("round_mode", "up")
    if _is_string(dst):
        return ("to_string", dst, saturate, round_mode)
    if _is_string(src):
        return ("from_string", dst, saturate, round_mode)
    if dst.name == _E8M0:
        return ("e8m0", dst, saturate, round_mode)
    if dst.name in _FLOAT8_SATURATING and saturate:
        return ("saturate", dst, saturate, round_mode)
    if _direct_cast_works(src, dst):
        return ("direct", dst, saturate, round_mode)
    return ("via_float32", dst, saturate, round_mode)


def _saturate(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    import ml_dtypes
    info = ml_dtypes.finfo(dst)
    if not is_float(x.dtype) or x.dtype.kind == "V":
        x = x.astype(np.float32 if x.dtype.kind == "V" or x.dtype.itemsize < 4 else np.float64)
    return np.clip(x, x.dtype.type(float(info.min)), x.dtype.type(float(info.max)))


def cast_array(x: np.ndarray, plan, out: np.ndarray | None = None) -> np.ndarray:
    """``x`` converted as planned by :func:`_cast_plan`, written into ``out`` when given."""
    mode, dst, saturate, round_mode = plan
    if mode == "to_string":
        res = _string_array(x.reshape(-1).tolist(), x.shape) if _is_string(x.dtype) else _to_strings(x)
    elif mode == "from_string":
        res = _parse_strings(x, dst)
        if dst.name in _FLOAT8_SATURATING and saturate:
            res = _saturate(res, dst)
    elif mode == "e8m0":
        from onnx.numpy_helper import to_float8e8m0
        res = to_float8e8m0(x.astype(np.float32) if x.dtype.kind == "V" else x, saturate, round_mode)
    elif mode == "saturate":
        res = _saturate(x, dst)
    elif mode == "via_float32":
        res = x.astype(np.float32)
    else:
        res = x
    if out is None:
        out = np.empty(x.shape, dtype=dst)
    if out.dtype == _STRING:
        out[...] = res
        return out
    res = np.asarray(res)
    if mode != "direct" and res.dtype != out.dtype and not _direct_cast_works(res.dtype, out.dtype):
        res = res.astype(np.float32)
    np.copyto(out, res, casting="unsafe")   # out-of-range float->int is undefined (quiet: fpstate)
    return out


def _cast_propagate(ctx, dst: np.dtype):
    value = ctx.value(0)
    if value is None:
        return None
    value = np.asarray(value)
    if value.dtype == object:
        items = value.reshape(-1).tolist()
        if not all(isinstance(v, (int, Expr, np.integer)) for v in items):
            return None
        if all(isinstance(v, (int, np.integer)) for v in items):
            return value.astype(np.int64).astype(dst)
        if is_integer(dst):
            return value  # symbolic dims stay symbolic across int -> int casts
        if dst in (np.dtype(np.float32), np.dtype(np.float64)):
            # a dim cast to float keeps its value while it is exactly representable
            exact = 1 << (24 if dst == np.float32 else 53)
            for v in items:
                if isinstance(v, Expr):
                    ctx.assume(exact, ">", v)
            return value
        return None
    if is_integer(value.dtype) and is_integer(dst) and value.dtype.kind in "iu" and dst.kind in "iu":
        return value.astype(dst)
    return None


def _cast_dtype(ctx) -> np.dtype:
    to = ctx.attr("to")
    if to is None:
        ctx.fail("attribute 'to' is required", kind="CastMissingTo")
    if isinstance(to, str):  # Cast-1 used a string type name
        to = getattr(TensorProto, to.upper())
    try:
        return np_dtype(int(to))
    except TypeError:
        ctx.fail(f"attribute 'to' = {to} is not a supported ONNX element type", kind="CastUnsupportedType")


@lib.op("Cast", since_version=(1, 6, 9, 13, 19, 21, 23, 24, 25, 28),
        infer_dtype=lambda ctx: [_cast_dtype(ctx)],
        propagate_value=lambda ctx: [_cast_propagate(ctx, _cast_dtype(ctx))])
def _cast_shape(ctx):
    """Convert the elements to the type in ``to`` (any ONNX numeric type, bool or string).

    Float8 targets saturate to +-FLT_MAX unless ``saturate=0`` (opset 19+); float8e8m0 follows
    ``round_mode``; strings parse numbers and INF/-INF/NaN; ints wrap on overflow.
    Raises: ShapeInferenceError kinds CastMissingTo, CastUnsupportedType.
    Source: ONNX operator spec, Cast-1/6/9/13/19/21/23/24/25/28.
    """
    return [ctx.shape(0)]


@lib.kernel("Cast", prepare=lambda ctx: _cast_plan(ctx, ctx.dtype(0), ctx.output_dtypes[0]))
def _cast(inputs, outputs, plan):
    cast_array(inputs[0], plan, outputs[0])


@lib.op("CastLike", since_version=(15, 19, 21, 23, 24, 25), infer_dtype=lambda ctx: [ctx.dtype(1)],
        propagate_value=lambda ctx: [_cast_propagate(ctx, ctx.dtype(1))])
def _cast_like_shape(ctx):
    """Cast input 0 to the element type of input 1 (same rules as Cast).

    Source: ONNX operator spec, CastLike-15/19/21/23/24/25.
    """
    return [ctx.shape(0)]


@lib.kernel("CastLike", prepare=lambda ctx: _cast_plan(ctx, ctx.dtype(0), ctx.dtype(1)))
def _cast_like(inputs, outputs, plan):
    cast_array(inputs[0], plan, outputs[0])
