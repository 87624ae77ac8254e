"""Tensor data-movement operators: joining, splitting, slicing, indexing, scattering, layout.

Concat, Split, Slice, Gather, GatherElements, GatherND, ScatterElements, Scatter, ScatterND,
Transpose, Tile, Pad, DepthToSpace, SpaceToDepth, OneHot, Trilu, Where, NonZero, TopK, CumSum,
CumProd, BitCast, Unique, Compress, EyeLike, ReverseSequence.

Gather, Slice and Concat are the ops of shape arithmetic (``Shape -> Gather -> Unsqueeze ->
Concat -> Reshape``), so they propagate symbolic values (object arrays of ints and
:class:`~dynashape.symbolic.Expr`) and their shape rules work on symbolic dims.
"""
from __future__ import annotations

import math

import numpy as np
from dynashape.dtypes import is_float
from dynashape.errors import IndexOutOfRangeError, ShapeInferenceError
from dynashape.records import InferContext, OpLibrary, fixed_dtype, same_dtype
from dynashape.shapes import (broadcast_shapes, check_dims_equal, check_vector_inputs, dim_max, dim_min,
                              normalize_axes, normalize_axis, numel, require, value_list)
from dynashape.symbolic import Expr, is_nonneg

lib = OpLibrary()

# An index this large (or small) means "to the end" (INT64_MAX / INT64_MIN in exporters).
_BIG = 2 ** 62


# shared helpers -------------------------------------------------------------------------

def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype arithmetic runs in: float32 for ml_dtypes floats and float16, else dtype."""
    dt = np.dtype(dtype)
    if dt.kind == "V" and is_float(dt) or dt == np.float16:
        return np.dtype(np.float32)
    return dt


def _clamp0(x):
    """max(x, 0), kept as x when x is provably non-negative."""
    return x if is_nonneg(x) else dim_max(x, 0)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _scalar_int(ctx, i: int, what: str) -> int | None:
    """The single int in host-known input ``i``, None when unknown; fails when not one value."""
    v = ctx.value(i)
    if v is None:
        return None
    vals = value_list(v)
    if len(vals) != 1:
        ctx.fail(f"{what} must hold exactly one value, got {len(vals)}", kind="InvalidScalarInput")
    x = vals[0]
    if isinstance(x, Expr):
        return None
    return int(x)


def _ints(ctx, i: int) -> list | None:
    """Host-known input ``i`` as a list of ints (or symbolic dims); None when unknown."""
    v = ctx.value(i)
    if v is None:
        return None
    return [x if isinstance(x, Expr) else int(x) for x in value_list(v)]


#: ``idx.min()`` / ``idx.max()`` without numpy's Python wrappers (~1 us a call of a run's Gathers)
_min_of, _max_of = np.minimum.reduce, np.maximum.reduce


def _check_index_range(idx: np.ndarray, size: int, node: str, op: str, kind: str, what: str) -> None:
    """Raise IndexOutOfRangeError (a ShapeInferenceError) when an index is outside
    [-size, size - 1]."""
    if idx.size == 0:
        return
    lo, hi = int(_min_of(idx, None)), int(_max_of(idx, None))
    if lo < -size or hi >= size:
        bad = lo if lo < -size else hi
        raise IndexOutOfRangeError(
            f"{op} node '{node}': {what} {bad} is out of range for a dim of size {size} "
            f"(valid: [{-size}, {size - 1}])", node=node, op_type=op, kind=kind)


def _normalized_indices(idx: np.ndarray, size) -> np.ndarray:
    """Indices with negatives mapped to ``i + size`` (size: int or broadcastable array)."""
    idx = idx.astype(np.int64, copy=False)
    return np.where(idx < 0, idx + size, idx)


# Concat ------------------------------------------------------------------------------

def _known_empty(shape) -> bool:
    return any(isinstance(d, int) and d == 0 for d in shape)


def _concat_axis(ctx, rank: int) -> int:
    axis = ctx.attr("axis")
    if axis is None:
        if ctx.opset < 4:
            axis = 1
        else:
            ctx.fail("attribute 'axis' is required", kind="MissingAttribute")
    return normalize_axis(ctx, axis, rank)


def _concat_plan(ctx, shapes):
    """(axis, indices of inputs that take part, reference shape) for Concat's inputs.

    Every input must have the rank of the others and their dims on every other axis, empty
    ones included (ONNX operator spec, Concat-13: "All input tensors must have the same
    shape, except for the dimension size of the axis to concatenate on"); onnxruntime 1.32
    skips an empty input of another shape, the spec and onnx.reference do not. A mismatch
    fails with ``ConcatShapeMismatch``.
    """
    if not shapes:
        ctx.fail("at least one input is required", kind="ConcatNoInputs")
    ref_i = next((i for i, s in enumerate(shapes) if len(s) > 0 and not _known_empty(s)), 0)
    ref = shapes[ref_i]
    if len(ref) == 0:
        ctx.fail("inputs must have rank >= 1, input 0 is a scalar", kind="ConcatScalarInput")
    axis = _concat_axis(ctx, len(ref))
    keep = []
    for i, s in enumerate(shapes):
        if len(s) != len(ref):
            ctx.fail(f"input {i} has rank {len(s)} but input {ref_i} has rank {len(ref)}; all inputs "
                     f"must have the same rank (concat axis {axis})", kind="ConcatShapeMismatch")
        for j, (a, b) in enumerate(zip(s, ref)):
            if j != axis and not ctx.assume(a, "==", b):
                ctx.fail(f"input {i} has dim {a} on axis {j} but input {ref_i} has {b}; inputs must "
                         f"be equal on every axis except the concat axis {axis}",
                         kind="ConcatShapeMismatch")
        keep.append(i)
    return axis, keep, ref


def _concat_prepare(ctx):
    axis, keep, _ = _concat_plan(ctx, ctx.input_shapes)
    return axis, keep


@lib.kernel("Concat", prepare=_concat_prepare)
def _concat(inputs, outputs, prepared):
    """Concat: join the inputs along ``axis`` into the output buffer."""
    axis, keep = prepared
    parts = [inputs[i] for i in keep]
    if outputs[0] is None:
        return [np.concatenate(parts, axis=axis)]
    np.concatenate(parts, axis=axis, out=outputs[0])
    return None


def _concat_value(ctx):
    vals = [ctx.value(i) for i in range(ctx.num_inputs)]
    if any(v is None for v in vals):
        return [None]
    axis, keep, _ = _concat_plan(ctx, [np.shape(v) for v in vals])
    parts = [np.asarray(vals[i]) for i in keep]
    if any(p.dtype == object for p in parts):
        parts = [p.astype(object) for p in parts]
    return [np.concatenate(parts, axis=axis)]


@lib.op("Concat", since_version=(1, 4, 11, 13), infer_dtype=same_dtype(0), propagate_value=_concat_value)
def _concat_shape(ctx):
    """Concat: inputs of equal rank, equal on every axis but ``axis``; the output sums that axis.

    Raises ConcatShapeMismatch naming the input index and axis. Source: ONNX operator
    spec, Concat-13 (Concat-1: ``axis`` defaults to 1).
    """
    shapes = [ctx.shape(i) for i in range(ctx.num_inputs)]
    axis, keep, ref = _concat_plan(ctx, shapes)
    out = list(ref)
    total = 0
    for i in keep:
        total = total + shapes[i][axis]
        for j, d in enumerate(shapes[i]):
            if j != axis and isinstance(d, int) and not isinstance(out[j], int):
                out[j] = d
    out[axis] = total
    return [tuple(out)]


# Split -------------------------------------------------------------------------------

def _split_sizes(ctx, dim, n: int):
    """The output lengths along the split axis (ints, or dims when ``dim`` is symbolic)."""
    split = None
    if (ctx.opset >= 13 or ctx.opset < 2) and ctx.has_input(1):
        split = _ints(ctx, 1)
        if split is None:
            return [ctx.new_dim() for _ in range(n)]
    if split is None and ctx.opset < 13:
        split = ctx.attr("split")
    num_outputs = ctx.attr("num_outputs") if ctx.opset >= 18 else None
    if split is not None:
        if num_outputs is not None:
            ctx.fail("only one of input 'split' and attribute 'num_outputs' may be given",
                     kind="SplitConflictingArgs")
        split = list(split)
        if len(split) != n:
            ctx.fail(f"'split' has {len(split)} entries but the node has {n} outputs",
                     kind="SplitCountMismatch")
        for s in split:
            require(ctx, s, ">=", 0, f"'split' {split} has a negative entry", "SplitNegative")
        if not ctx.assume(sum(split), "==", dim):   # a guard where the dim or an entry is symbolic
            ctx.fail(f"'split' {split} sums to {sum(split)} but the dim to split is {dim}",
                     kind="SplitSumMismatch")
        return split
    if num_outputs is not None:
        if num_outputs != n:
            ctx.fail(f"num_outputs is {num_outputs} but the node has {n} outputs",
                     kind="SplitCountMismatch")
        chunk = (dim + n - 1) // n
        last = dim - chunk * (n - 1)
        require(ctx, last, ">=", 0, f"a dim of {dim} cannot be split into {n} chunks of {chunk}", "SplitUneven")
        return [chunk] * (n - 1) + [last]
    if not ctx.assume(dim % n, "==", 0):   # a guard where the dim is symbolic (no smaller last part)
        ctx.fail(f"a dim of {dim} cannot be split evenly into {n} outputs", kind="SplitUneven")
    return [dim // n] * n


def _split_check(node, opset: int):
    """Split-18: exactly one of input ``split`` and attribute ``num_outputs`` (ONNX operator
    spec, Split-18; onnxruntime rejects the node otherwise)."""
    if opset < 18:
        return None
    has_split = len(node.inputs) > 1 and bool(node.inputs[1])
    has_num = "num_outputs" in node.attrs
    if has_split == has_num:
        return ("exactly one of input 'split' and attribute 'num_outputs' must be given, got "
                + ("both" if has_split else "neither"))
    return None


@lib.op("Split", since_version=(1, 2, 11, 13, 18), infer_dtype=same_dtype(0), value_inputs=(1,),
        check_node=_split_check)
def _split_shape(ctx):
    """Split: cut the input along ``axis`` into the node's outputs.

    Lengths from attribute ``split`` (<13), input ``split`` (1, >=13), ``num_outputs``
    (>=18, the last chunk smaller when uneven) or equal parts. Raises SplitSumMismatch,
    SplitUneven, SplitCountMismatch. Source: ONNX operator spec, Split-18.
    """
    shape = ctx.shape(0)
    axis = normalize_axis(ctx, ctx.attr("axis", 0), len(shape))
    sizes = _split_sizes(ctx, shape[axis], ctx.num_outputs)
    return [shape[:axis] + (s,) + shape[axis + 1:] for s in sizes]


def _split_prepare(ctx):
    shape = ctx.input_shapes[0]
    axis = normalize_axis(ctx, ctx.attr("axis", 0), len(shape))
    bounds, start = [], 0
    for s in ctx.output_shapes:
        bounds.append((slice(None),) * axis + (slice(start, start + s[axis]),))
        start += s[axis]
    return bounds


@lib.kernel("Split", prepare=_split_prepare)
def _split(inputs, outputs, bounds):
    """Split: copy each part of the input into its output."""
    x = inputs[0]
    for out, sl in zip(outputs, bounds):
        np.copyto(out, x[sl])


# Slice -------------------------------------------------------------------------------

def _slice_len(d, start, end, step):
    """Output length of ``data[start:end:step]`` along a dim of size ``d`` (ONNX clamping).

    Works when ``d`` is symbolic (min/max expressions) and when ``start``/``end`` are
    provably non-negative symbolic values; returns None when it cannot be proven.
    """
    if isinstance(d, int) and _is_int(start) and _is_int(end):
        return _slice_range(d, int(start), int(end), int(step))[2]
    for v in (start, end):
        if isinstance(v, Expr) and not is_nonneg(v):
            return None
    if step > 0:
        span = _slice_span_forward(d, start, end)
        return span if step == 1 else (span + step - 1) // step
    k = -step
    if (isinstance(start, int) and (start >= _BIG or start == -1)
            and isinstance(end, int) and end <= -_BIG):
        span = d
    else:
        s_norm = d - 1 if isinstance(start, int) and start >= _BIG else (
            d + start if isinstance(start, int) and start < 0 else start)
        e_norm = -1 if isinstance(end, int) and end <= -_BIG else (
            d + end if isinstance(end, int) and end < 0 else end)
        s_c = dim_min(dim_max(s_norm, 0), d - 1)
        e_c = dim_min(dim_max(e_norm, -1), d - 1)
        span = dim_max(s_c - e_c, 0)
    return span if k == 1 else (span + k - 1) // k


def _slice_range(d: int, start: int, end: int, step: int):
    """(start, stop, count) with the spec's clamping (onnxruntime's too): negative bounds
    add ``d``; start clamps to [0, d] ([0, d-1] for negative steps), end to [0, d] ([-1, d-1])."""
    if start < 0:
        start += d
    if end < 0:
        end += d
    if step > 0:
        start, end = min(max(start, 0), d), min(max(end, 0), d)
        count = max(0, (end - start + step - 1) // step)
    else:
        start, end = min(max(start, 0), d - 1), min(max(end, -1), d - 1)
        count = 0 if d == 0 else max(0, (start - end - step - 1) // -step)
    return start, end, count


def _fwd_pos(v, d):
    """Position of a forward-slice bound in [0, d]."""
    if isinstance(v, int):
        if v >= _BIG:
            return d
        if v <= -_BIG or v == 0:
            return 0
        return dim_min(v, d) if v > 0 else _clamp0(d + v)
    return dim_min(v, d)


def _slice_span_forward(d, s, e):
    """Elements covered by ``[s, e)`` (step 1) on a dim of size ``d``, simply written."""
    S, E = _fwd_pos(s, d), _fwd_pos(e, d)
    if isinstance(S, int) and S == 0:
        return E
    if isinstance(E, int) and E == 0:
        return 0
    if E == d:
        if isinstance(s, int) and s < 0:
            return dim_min(-s, d)
        return _clamp0(d - s)
    if isinstance(s, int) and isinstance(e, int):
        if s > 0 and e > 0:
            return 0 if e <= s else dim_min(e - s, _clamp0(d - s))
        if s < 0 and e < 0:
            return 0 if -s <= -e else dim_min(e - s, _clamp0(d + e))
        if s > 0 and e < 0:
            return _clamp0(d + e - s)
    return _clamp0(E - S)


def _slice_args(ctx):
    """(starts, ends, axes or None, steps or None) lists; any may be None when unknown."""
    if ctx.opset < 10:
        starts, ends, axes = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes")
        if starts is None or ends is None:
            ctx.fail("attributes 'starts' and 'ends' are required", kind="MissingAttribute")
        return list(starts), list(ends), None if axes is None else list(axes), None, True
    axes_known = not ctx.has_input(3) or ctx.value(3) is not None
    steps_known = not ctx.has_input(4) or ctx.value(4) is not None
    axes = _ints(ctx, 3) if ctx.has_input(3) else None
    steps = _ints(ctx, 4) if ctx.has_input(4) else None
    return _ints(ctx, 1), _ints(ctx, 2), axes, steps, axes_known and steps_known


def _slice_spec(ctx, rank):
    """Validated per-axis (axis, start, end, step) list, or None when values are unknown."""
    starts, ends, axes, steps, known = _slice_args(ctx)
    if starts is None or ends is None or not known:
        return None
    if len(starts) != len(ends):
        ctx.fail(f"starts ({len(starts)} values) and ends ({len(ends)} values) must have equal length",
                 kind="SliceLengthMismatch")
    if axes is None:
        axes = list(range(len(starts)))
    if any(isinstance(a, Expr) for a in axes) or (steps is not None and any(isinstance(s, Expr) for s in steps)):
        return None
    if len(axes) != len(starts):
        ctx.fail(f"axes ({len(axes)} values) must have as many values as starts ({len(starts)})",
                 kind="SliceLengthMismatch")
    axes = normalize_axes(ctx, axes, rank)
    if steps is None:
        steps = [1] * len(starts)
    if len(steps) != len(starts):
        ctx.fail(f"steps ({len(steps)} values) must have as many values as starts ({len(starts)})",
                 kind="SliceLengthMismatch")
    if any(s == 0 for s in steps):
        ctx.fail(f"steps {steps} must not contain 0", kind="SliceZeroStep")
    return list(zip(axes, starts, ends, steps))


def _slice_value(ctx):
    data = ctx.value(0)
    if data is None:
        return [None]
    spec = _slice_spec(ctx, np.ndim(data))
    if spec is None or any(isinstance(v, Expr) for _, s, e, _ in spec for v in (s, e)):
        return [None]
    return [np.asarray(data)[_slice_index(np.shape(data), spec)].copy()]


@lib.op("Slice", since_version=(1, 10, 11, 13), infer_dtype=same_dtype(0),
        value_inputs=(1, 2, 3, 4), propagate_value=_slice_value)
def _slice_shape(ctx):
    """Slice: ``data[starts:ends:steps]`` along ``axes``, with ONNX clamping of the bounds.

    Attributes (Slice-1) or inputs (>=10). INT64_MAX/INT64_MIN ends, negative steps.
    Symbolic dims give min/max expressions. Raises SliceZeroStep, SliceLengthMismatch,
    AxisOutOfRange, DuplicateAxes. Source: ONNX operator spec, Slice-13.
    """
    shape = ctx.shape(0)
    if ctx.opset >= 10:
        check_vector_inputs(ctx, {1: "starts", 2: "ends", 3: "axes", 4: "steps"})
    spec = _slice_spec(ctx, len(shape))
    if spec is None:
        axes = _ints(ctx, 3) if ctx.opset >= 10 and ctx.has_input(3) else None
        if axes is None or any(isinstance(a, Expr) for a in axes):
            return [tuple(ctx.new_dim() for _ in shape)]
        out = list(shape)
        for a in normalize_axes(ctx, axes, len(shape)):
            out[a] = ctx.new_dim()
        return [tuple(out)]
    out = list(shape)
    for axis, start, end, step in spec:
        n = _slice_len(shape[axis], start, end, step)
        out[axis] = ctx.new_dim() if n is None else n
    return [tuple(out)]


def _slice_index(shape, spec):
    """A tuple of Python slices for concrete ``shape`` and ``spec``."""
    index = [slice(None)] * len(shape)
    for axis, start, end, step in spec:
        step = int(step)
        if step > 0:   # the bounds clamped to [0, d]: the form the symbolic index takes too
            index[axis] = slice(_fwd_pos(int(start), shape[axis]), _fwd_pos(int(end), shape[axis]), step)
            continue
        b, _, n = _slice_range(shape[axis], int(start), int(end), step)
        stop = b + n * step
        index[axis] = slice(0, 0) if n == 0 else slice(b, None if stop < 0 else stop, step)
    return tuple(index)


def _slice_prepare(ctx):
    shape = ctx.input_shapes[0]
    spec = _slice_spec(ctx, len(shape))
    if spec is None:
        return None, ctx
    if all(isinstance(v, int) for axis, start, end, _ in spec for v in (shape[axis], start, end)):
        return _slice_index(shape, spec), None
    return _symbolic_slice_index(shape, spec), None


def _symbolic_slice_index(shape, spec):
    """The index of a forward slice with symbolic dims or bounds (``x[:, past:past+n]``):
    each bound clamped to [0, d] as ONNX does, kept as expressions. Raises TypeError for
    what needs concrete values (negative steps, bounds that may be negative)."""
    index = [slice(None)] * len(shape)
    for axis, start, end, step in spec:
        if step < 0 or any(isinstance(v, Expr) and not is_nonneg(v) for v in (start, end)):
            raise TypeError("a reverse slice or a possibly negative symbolic bound needs concrete values")
        d = shape[axis]
        index[axis] = slice(_fwd_pos(start, d), _fwd_pos(end, d), step)
    return tuple(index)


@lib.kernel("Slice", prepare=_slice_prepare)
def _slice(inputs, outputs, prepared):
    """Slice: copy the selected region into the output."""
    index, ctx = prepared
    if index is None:  # bound values only known now: a context of this run's arrays
        live = InferContext(ctx.node, ctx.opset, [None if a is None else a.shape for a in inputs],
                            [None if a is None else a.dtype for a in inputs], list(inputs), services=ctx.services)
        index = _slice_index(inputs[0].shape, _slice_spec(live, inputs[0].ndim))
    if outputs[0] is None:
        return [inputs[0][index].copy()]
    np.copyto(outputs[0], inputs[0][index])
    return None


# Gather family -------------------------------------------------------------------------

def _gather_check_known(ctx, idx_value, size, what="index"):
    if idx_value is None or not isinstance(size, int):
        return
    arr = np.asarray(idx_value)
    if arr.dtype == object or arr.size == 0:
        return
    lo, hi = int(arr.min()), int(arr.max())
    if lo < -size or hi >= size:
        ctx.fail(f"{what} {lo if lo < -size else hi} is out of range for a dim of size {size} "
                 f"(valid: [{-size}, {size - 1}])", kind="GatherIndexOutOfRange")


def _gather_value(ctx):
    data, idx = ctx.value(0), ctx.value(1)
    if data is None or idx is None:
        return [None]
    idx = np.asarray(idx)
    if idx.dtype == object:
        return [None]
    data = np.asarray(data)
    axis = normalize_axis(ctx, ctx.attr("axis", 0), data.ndim)
    _gather_check_known(ctx, idx, data.shape[axis])
    res = np.take(data, idx.astype(np.int64), axis=axis)
    if not isinstance(res, np.ndarray):  # a scalar index into a 1-D value gives the element
        res = np.array(res, dtype=object) if isinstance(res, Expr) else np.asarray(res, dtype=data.dtype)
    return [res]


@lib.op("Gather", since_version=(1, 11, 13), infer_dtype=same_dtype(0), propagate_value=_gather_value)
def _gather_shape(ctx):
    """Gather: ``take(data, indices, axis)``; the output is data[:axis] + indices + data[axis+1:].

    Indices in [-s, s-1] (s the dim); a scalar index drops the axis. Raises
    GatherIndexOutOfRange (at inference when the indices are known, else at run time).
    Source: ONNX operator spec, Gather-13.
    """
    data, idx = ctx.shape(0), ctx.shape(1)
    if len(data) == 0:
        ctx.fail("data must have rank >= 1, got a scalar", kind="InvalidRank")
    axis = normalize_axis(ctx, ctx.attr("axis", 0), len(data))
    _gather_check_known(ctx, ctx.value(1), data[axis])
    return [tuple(data[:axis]) + tuple(idx) + tuple(data[axis + 1:])]


def _gather_prepare(ctx):
    axis = normalize_axis(ctx, ctx.attr("axis", 0), len(ctx.input_shapes[0]))
    return axis, ctx.input_shapes[0][axis], ctx.node.name


#: the output elements up to which Gather takes with numpy's range check (see :func:`_gather`)
GATHER_CHECKED_TAKE = 1 << 14


@lib.kernel("Gather", prepare=_gather_prepare)
def _gather(inputs, outputs, prepared):
    """Gather: np.take into the output buffer. A small output is taken with numpy's own range
    check (``mode="raise"``: [-s, s-1], as ONNX; it buffers the output, a copy that costs less
    than the two reductions of a separate check up to :data:`GATHER_CHECKED_TAKE` elements);
    a larger one, or an empty one (numpy takes nothing and checks nothing), after
    :func:`_check_index_range`."""
    axis, size, node = prepared
    idx, out = inputs[1], outputs[0]
    if out is not None and idx.size and 0 < out.size <= GATHER_CHECKED_TAKE:
        try:
            inputs[0].take(idx, axis=axis, out=out, mode="raise")     # (the method: no np.take wrapper)
        except IndexError:
            _check_index_range(idx, size, node, "Gather", "GatherIndexOutOfRange", "index")
            raise
        return None
    _check_index_range(idx, size, node, "Gather", "GatherIndexOutOfRange", "index")
    if out is None:
        return [np.take(inputs[0], idx, axis=axis, mode="wrap")]
    if idx.size:
        np.take(inputs[0], idx, axis=axis, out=out, mode="wrap")
    return None


@lib.op("GatherElements", since_version=(11, 13), infer_dtype=same_dtype(0))
def _gather_elements_shape(ctx):
    """GatherElements: ``out[i][j] = data[index[i][j]][j]`` (axis 0); output has indices' shape.

    data and indices of equal rank >= 1. Raises InvalidRank, GatherIndexOutOfRange.
    Source: ONNX operator spec, GatherElements-13.
    """
    data, idx = ctx.shape(0), ctx.shape(1)
    if len(data) == 0 or len(idx) != len(data):
        ctx.fail(f"data and indices must have the same rank >= 1, got {len(data)} and {len(idx)}",
                 kind="InvalidRank")
    axis = normalize_axis(ctx, ctx.attr("axis", 0), len(data))
    _gather_check_known(ctx, ctx.value(1), data[axis])
    return [tuple(idx)]


def _axis_prepare(ctx):
    axis = normalize_axis(ctx, ctx.attr("axis", 0), len(ctx.input_shapes[0]))
    return axis, ctx.input_shapes[0][axis], ctx.node.name, ctx.attr("reduction", "none")


@lib.kernel("GatherElements", prepare=_axis_prepare)
def _gather_elements(inputs, outputs, prepared):
    """GatherElements: take_along_axis after a range check."""
    axis, size, node, _ = prepared
    idx = inputs[1]
    _check_index_range(idx, size, node, "GatherElements", "GatherIndexOutOfRange", "index")
    data = inputs[0][tuple(slice(None) if j == axis else slice(0, n) for j, n in enumerate(idx.shape))]
    np.copyto(outputs[0], np.take_along_axis(data, _normalized_indices(idx, size), axis=axis))


@lib.op("GatherND", since_version=(11, 12, 13), infer_dtype=same_dtype(0))
def _gather_nd_shape(ctx):
    """GatherND: gather slices of data addressed by the last axis of indices.

    Output ``indices.shape[:-1] + data.shape[batch_dims + k:]`` with k = indices.shape[-1]
    (must be known). Raises InvalidRank, GatherNDBatchMismatch. Source: ONNX operator
    spec, GatherND-13.
    """
    data, idx = ctx.shape(0), ctx.shape(1)
    b = ctx.attr("batch_dims", 0) if ctx.opset >= 12 else 0
    if len(data) < 1 or len(idx) < 1:
        ctx.fail("data and indices must have rank >= 1", kind="InvalidRank")
    if b < 0 or b >= min(len(data), len(idx)):
        ctx.fail(f"batch_dims {b} must be in [0, min(rank(data), rank(indices)) - 1]", kind="InvalidRank")
    for j in range(b):
        require(ctx, data[j], "==", idx[j], f"batch dim {j} differs: data {data[j]} vs indices {idx[j]}",
                "GatherNDBatchMismatch")
    k = idx[-1]
    if not isinstance(k, int):
        return [None]
    if k < 1 and len(data) == b or k > len(data) - b:
        ctx.fail(f"indices.shape[-1] = {k} must be <= rank(data) - batch_dims = {len(data) - b}",
                 kind="InvalidRank")
    return [tuple(idx[:-1]) + tuple(data[b + k:])]


def _nd_index(data_shape, idx, node, op, kind, b=0):
    """Normalised, range-checked index tuple (one array per indexed axis after ``b``)."""
    k = idx.shape[-1]
    dims = np.asarray(data_shape[b:b + k], dtype=np.int64)
    idx = idx.astype(np.int64, copy=False)
    bad = (idx < -dims) | (idx >= dims)
    if bad.any():
        raise ShapeInferenceError(f"{op} node '{node}': index {idx[bad].reshape(-1)[0]} is out of range "
                                  f"for data dims {list(data_shape[b:b + k])}",
                                  node=node, op_type=op, kind=kind)
    idx = np.where(idx < 0, idx + dims, idx)
    return tuple(np.moveaxis(idx, -1, 0))


def _flat_rows(data_shape, idx, b: int, node: str) -> np.ndarray:
    """GatherND's index rows ``idx`` (batch, rows, k) as rows of data viewed
    (batch * prod(indexed dims), *rest): negative indices wrapped, each range-checked
    against its own dim (GatherIndexOutOfRange), then one dot with the dims' strides. Few
    numpy calls: at the sizes of a mask lookup (16 rows) each costs more than the data."""
    dims = data_shape[b:b + idx.shape[-1]]
    given = idx
    low = idx.min(axis=(0, 1)).tolist()
    if min(low) < 0:
        idx = idx + (idx < 0) * np.asarray(dims, dtype=np.int64)
        low = idx.min(axis=(0, 1)).tolist()
    high = idx.max(axis=(0, 1)).tolist()
    if min(low) < 0 or any(h >= d for h, d in zip(high, dims)):
        # raises, naming the index as given (wrapped once more, -5 on a dim of 4 would pass)
        _nd_index(data_shape, given, node, "GatherND", "GatherIndexOutOfRange", b)
    strides = [math.prod(dims[j + 1:]) for j in range(len(dims))]
    flat = idx @ np.asarray(strides, dtype=np.int64)
    if idx.shape[0] > 1:
        flat += np.arange(idx.shape[0], dtype=np.int64)[:, None] * math.prod(dims)
    return flat.reshape(-1)


@lib.kernel("GatherND")
def _gather_nd(inputs, outputs, ctx):
    """GatherND: the index rows as rows of the flattened data (one np.take into the output),
    or advanced indexing (no index arrays, or an empty side)."""
    data, idx = inputs
    b = ctx.attr("batch_dims", 0) if ctx.opset >= 12 else 0
    batch = math.prod(data.shape[:b])
    # explicit counts, not -1: numpy cannot infer a -1 next to a 0 (an empty batch or k = 0)
    rows = math.prod(idx.shape[b:-1])
    k, out = idx.shape[-1], outputs[0]
    if k and data.size and idx.size and idx.dtype.kind in "iu" and out.flags.c_contiguous:
        flat = _flat_rows(data.shape, idx.reshape((batch, rows, k)).astype(np.int64, copy=False), b, ctx.node.name)
        rest = data.shape[b + k:]
        np.take(data.reshape((-1,) + rest), flat, axis=0, out=out.reshape((batch * rows,) + rest))
        return
    d = data.reshape((batch,) + data.shape[b:])
    i = idx.reshape((batch, rows, idx.shape[-1]))
    index = _nd_index(data.shape, i, ctx.node.name, "GatherND", "GatherIndexOutOfRange", b)
    # broadcast so that k = 0 (no index arrays: whole slices) still gives one per index row
    res = d[(np.broadcast_to(np.arange(batch)[:, None], (batch, rows)),) + index]
    np.copyto(outputs[0], res.reshape(outputs[0].shape))


# Scatter family ----------------------------------------------------------------------

_REDUCERS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(ctx, allowed) -> str:
    red = ctx.attr("reduction", "none") if ctx.opset >= 16 else "none"
    if red not in allowed:
        ctx.fail(f"reduction '{red}' is not one of {sorted(allowed)}", kind="InvalidAttribute")
    return red


def _scatter_into(out, index, updates, reduction):
    """out[index] = updates, or reduce updates into it (np.ufunc.at, repeats accumulate)."""
    if reduction == "none":
        out[index] = updates
        return
    ufunc = _REDUCERS[reduction]
    cdt = _compute_dtype(out.dtype)
    if cdt == out.dtype:
        ufunc.at(out, index, updates)
    else:
        tmp = out.astype(cdt)
        ufunc.at(tmp, index, updates.astype(cdt))
        np.copyto(out, tmp.astype(out.dtype))


def _scatter_elements_infer(ctx):
    data, idx, upd = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    if len(data) == 0 or len(idx) != len(data) or len(upd) != len(idx):
        ctx.fail(f"data, indices and updates must have the same rank >= 1, got {len(data)}, "
                 f"{len(idx)} and {len(upd)}", kind="InvalidRank")
    for j, (a, b) in enumerate(zip(idx, upd)):
        require(ctx, a, "==", b, f"indices and updates must have the same shape (axis {j}: {a} vs {b})",
                "ScatterShapeMismatch")
    normalize_axis(ctx, ctx.attr("axis", 0), len(data))
    _reduction(ctx, ("none", "add", "mul") + (("max", "min") if ctx.opset >= 18 else ()))
    return [tuple(data)]


@lib.op("ScatterElements", since_version=(11, 13, 16, 18), infer_dtype=same_dtype(0))
def _scatter_elements_shape(ctx):
    """ScatterElements: data with ``updates`` written at ``indices`` along ``axis``.

    reduction none/add/mul (16), max/min (18). Output has data's shape. Raises
    InvalidRank, ScatterShapeMismatch, ScatterIndexOutOfRange. Source: ONNX operator spec,
    ScatterElements-18.
    """
    return _scatter_elements_infer(ctx)


@lib.op("Scatter", since_version=(9, 11), infer_dtype=same_dtype(0))
def _scatter_shape(ctx):
    """Scatter (deprecated): ScatterElements without reduction. Source: ONNX spec, Scatter-11."""
    return _scatter_elements_infer(ctx)


def _scatter_elements(inputs, outputs, prepared):
    """ScatterElements: copy data, then write/reduce updates at the open-grid index."""
    axis, size, node, red = prepared
    data, idx, upd = inputs
    out = outputs[0]
    np.copyto(out, data)
    _check_index_range(idx, size, node, "ScatterElements", "ScatterIndexOutOfRange", "index")
    if idx.size == 0:
        return
    grid = list(np.ogrid[tuple(slice(0, n) for n in idx.shape)])
    grid[axis] = _normalized_indices(idx, size)
    _scatter_into(out, tuple(grid), upd, red)


lib.kernel("ScatterElements", prepare=_axis_prepare)(_scatter_elements)
lib.kernel("Scatter", prepare=_axis_prepare)(_scatter_elements)


@lib.op("ScatterND", since_version=(11, 13, 16, 18), infer_dtype=same_dtype(0))
def _scatter_nd_shape(ctx):
    """ScatterND: data with slices of ``updates`` written at the index tuples of ``indices``.

    updates shape must be ``indices.shape[:-1] + data.shape[k:]``; reduction none/add/mul
    (16), max/min (18). Raises InvalidRank, ScatterShapeMismatch. Source: ONNX operator
    spec, ScatterND-18.
    """
    data, idx, upd = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    if len(data) < 1 or len(idx) < 1:
        ctx.fail("data and indices must have rank >= 1", kind="InvalidRank")
    _reduction(ctx, ("none", "add", "mul") + (("max", "min") if ctx.opset >= 18 else ()))
    k = idx[-1]
    if not isinstance(k, int):   # (the rule's ranks depend on it: the node is inferred with real shapes)
        ctx.fail("indices.shape[-1] (the index depth) is not known", kind="UnknownIndexDepth")
    if k > len(data):
        ctx.fail(f"indices.shape[-1] = {k} exceeds rank(data) = {len(data)}", kind="InvalidRank")
    want = tuple(idx[:-1]) + tuple(data[k:])
    message = f"updates must have shape indices.shape[:-1] + data.shape[k:] = ({', '.join(map(str, want))})"
    if len(upd) != len(want):
        ctx.fail(message, kind="ScatterShapeMismatch")
    for a, b in zip(upd, want):
        require(ctx, a, "==", b, message, "ScatterShapeMismatch")
    return [tuple(data)]


@lib.kernel("ScatterND")
def _scatter_nd(inputs, outputs, ctx):
    """ScatterND: copy data, then write/reduce the update slices."""
    data, idx, upd = inputs
    out = outputs[0]
    np.copyto(out, data)
    k = idx.shape[-1]
    flat = idx.reshape(-1, k)
    if flat.shape[0] == 0:
        return
    index = _nd_index(data.shape, flat, ctx.node.name, "ScatterND", "ScatterIndexOutOfRange")
    red = ctx.attr("reduction", "none") if ctx.opset >= 16 else "none"
    _scatter_into(out, index, upd.reshape((flat.shape[0],) + data.shape[k:]), red)


# Transpose, Tile ----------------------------------------------------------------------

def _perm(ctx, rank):
    perm = ctx.attr("perm")
    if perm is None:
        return list(range(rank))[::-1]
    perm = list(perm)
    if sorted(normalize_axis(ctx, p, rank, "perm entry") for p in perm) != list(range(rank)) \
            or len(perm) != rank:
        ctx.fail(f"perm {perm} is not a permutation of 0..{rank - 1}", kind="InvalidPermutation")
    return [p % rank for p in perm]


@lib.op("Transpose", since_version=(1, 13, 21, 23, 24, 25), infer_dtype=same_dtype(0))
def _transpose_shape(ctx):
    """Transpose: permute axes by ``perm`` (default: reversed). Raises InvalidPermutation.

    Source: ONNX operator spec, Transpose-25.
    """
    shape = ctx.shape(0)
    return [tuple(shape[p] for p in _perm(ctx, len(shape)))]


@lib.kernel("Transpose", prepare=lambda ctx: _perm(ctx, len(ctx.input_shapes[0])))
def _transpose(inputs, outputs, perm):
    """Transpose: copy the permuted view into the output."""
    np.copyto(outputs[0], np.transpose(inputs[0], perm))


def _tile_repeats(ctx, rank):
    """Repeats per axis (list) or None when unknown."""
    if ctx.opset < 6:
        tiles, axis = _scalar_int(ctx, 1, "tiles"), _scalar_int(ctx, 2, "axis")
        if tiles is None or axis is None:
            return None
        reps = [1] * rank
        reps[normalize_axis(ctx, axis, rank)] = tiles
    else:
        reps = _ints(ctx, 1)
        if reps is None:
            return None
        if len(reps) != rank:
            ctx.fail(f"repeats has {len(reps)} values but the input has rank {rank}",
                     kind="TileRepeatsMismatch")
    for r in reps:
        require(ctx, r, ">=", 0, f"repeats {reps} must be >= 0", "TileNegativeRepeat")
    return reps


@lib.op("Tile", since_version=(1, 6, 13), infer_dtype=same_dtype(0), value_inputs=(1, 2))
def _tile_shape(ctx):
    """Tile: repeat the input ``repeats[i]`` times along axis i; dims multiply.

    Tile-1 takes scalar ``tiles`` and ``axis`` inputs. Raises TileRepeatsMismatch,
    TileNegativeRepeat. Source: ONNX operator spec, Tile-13.
    """
    shape = ctx.shape(0)
    if ctx.opset >= 6:
        check_vector_inputs(ctx, {1: "repeats"})
    reps = _tile_repeats(ctx, len(shape))
    if reps is None:
        return [tuple(ctx.new_dim() for _ in shape)]
    return [tuple(d * r for d, r in zip(shape, reps))]


def _tile_prepare(ctx):
    shape = ctx.input_shapes[0]
    reps = _tile_repeats(ctx, len(shape))
    if reps is None:
        reps = [o // d if d else 0 for o, d in zip(ctx.output_shapes[0], shape)]
    return ([n for d in shape for n in (1, d)], [n for r, d in zip(reps, shape) for n in (r, d)], reps)


@lib.kernel("Tile", prepare=_tile_prepare)
def _tile(inputs, outputs, prepared):
    """Tile: broadcast the input into an interleaved (repeat, dim) view of the output."""
    x_shape, big_shape, reps = prepared
    out = outputs[0]
    if out.size == 0:
        return
    if out.flags.c_contiguous:
        np.copyto(out.reshape(big_shape), np.broadcast_to(inputs[0].reshape(x_shape), big_shape))
    else:
        np.copyto(out, np.tile(inputs[0], reps))


# Pad -------------------------------------------------------------------------------

_PAD_MODES = ("constant", "reflect", "edge")


def _pad_widths(ctx, rank):
    """[(begin, end)] per axis, or None when ``pads``/``axes`` are unknown."""
    if ctx.opset < 11:
        pads = ctx.attr("paddings" if ctx.opset < 2 else "pads")
        if pads is None:
            ctx.fail("attribute 'pads' is required", kind="MissingAttribute")
        axes = None
    else:
        pads = _ints(ctx, 1)
        axes = _ints(ctx, 3) if ctx.opset >= 18 and ctx.has_input(3) else None
        if pads is None or (ctx.opset >= 18 and ctx.has_input(3) and axes is None):
            return None
    axes = list(range(rank)) if axes is None else normalize_axes(ctx, axes, rank)
    if len(pads) != 2 * len(axes):
        ctx.fail(f"pads has {len(pads)} values, expected 2 * {len(axes)} (begin and end per axis)",
                 kind="PadsLengthMismatch")
    widths = [(0, 0)] * rank
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[i + len(axes)])
    return widths


def _pad_mode(ctx) -> str:
    mode = ctx.attr("mode", "constant")
    allowed = _PAD_MODES + (("wrap",) if ctx.opset >= 19 else ())
    if mode not in allowed:
        ctx.fail(f"mode '{mode}' is not one of {list(allowed)}", kind="InvalidAttribute")
    return mode


@lib.op("Pad", since_version=(1, 2, 11, 13, 18, 19, 21, 23, 24, 25), infer_dtype=same_dtype(0),
        value_inputs=(1, 3))
def _pad_shape(ctx):
    """Pad: grow (or crop, for negative pads) each axis by its begin/end pads.

    Modes constant/reflect/edge, wrap (>=19); pads as attribute (<11) or input; input
    ``axes`` (>=18). Raises PadsLengthMismatch, PadNegativeResult, InvalidAttribute,
    PadReflectTooLarge (reflect pads must be smaller than the dim: onnx PR #7700, as
    onnxruntime and PyTorch). Source: ONNX operator spec, Pad-25.
    """
    shape = ctx.shape(0)
    mode = _pad_mode(ctx)
    widths = _pad_widths(ctx, len(shape))
    if widths is None:
        return [tuple(ctx.new_dim() for _ in shape)]
    out = []
    for a, (d, (b, e)) in enumerate(zip(shape, widths)):
        n = d + b + e
        require(ctx, n, ">=", 0, f"pads ({b}, {e}) on axis {a} leave a negative size {n}", "PadNegativeResult")
        # (what is left of the axis after negative pads crop it is what the border copies)
        inner = d + min(b, 0) + min(e, 0)
        cropped = "" if b >= 0 and e >= 0 else f" (size {d} cropped by the negative pad to {inner})"
        if mode != "constant" and (b > 0 or e > 0):
            require(ctx, inner, ">", 0, f"mode '{mode}' cannot pad the empty axis {a}{cropped}", "PadEmptyAxis")
        if mode == "reflect" and not all(ctx.assume(inner, ">", p) for p in (b, e) if p > 0):
            ctx.fail(f"mode 'reflect' needs pads smaller than the dim: pads ({b}, {e}) on axis {a} of size {d}"
                     f"{cropped}", kind="PadReflectTooLarge")
        out.append(n)
    return [tuple(out)]


def _pad_prepare(ctx):
    shape = ctx.input_shapes[0]
    widths = _pad_widths(ctx, len(shape))
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, (b, e) in zip(shape, widths))
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    dst = tuple(slice(b, b + (s.stop - s.start)) for (b, _), s in zip(grow, crop))
    value = ctx.attr("value", 0.0) if ctx.opset < 11 else None
    mode = _pad_mode(ctx)
    borders = None if mode == "constant" else _pad_border_copies(mode, grow, [s.stop - s.start for s in crop])
    return mode, crop, grow, dst, value, borders


def _pad_border_copies(mode: str, grow: list, inner: list) -> tuple | None:
    """The border fill of reflect/edge/wrap as (destination, source) index pairs into the
    output, axis by axis (a later axis copies the earlier axes' borders along with its own
    values, so corners come out as numpy.pad's); None where numpy.pad must do it (wrap pads
    longer than the axis repeat it several times; a reflection as long as an axis cropped
    short by a negative pad; an axis cropped empty)."""
    copies = []
    for a, ((b, e), n) in enumerate(zip(grow, inner)):
        if not b and not e:
            continue
        if not n or (mode == "wrap" and max(b, e) > n) or (mode == "reflect" and max(b, e) >= n):
            return None
        end = b + n
        if mode == "reflect":
            stop = end - 2 - e
            left, right = slice(2 * b, b, -1), slice(end - 2, None if stop < 0 else stop, -1)
        elif mode == "edge":
            left, right = slice(b, b + 1), slice(end - 1, end)
        else:   # wrap
            left, right = slice(n, n + b), slice(b, b + e)
        head = (slice(None),) * a
        if b:
            copies.append((head + (slice(0, b),), head + (left,)))
        if e:
            copies.append((head + (slice(end, end + e),), head + (right,)))
    return tuple(copies)


def _pad_constant(ctx_value, inputs, dtype):
    if ctx_value is not None:
        return ctx_value
    if len(inputs) > 2 and inputs[2] is not None and inputs[2].size:
        return inputs[2].reshape(-1)[0]
    return "" if dtype == object else 0


@lib.kernel("Pad", prepare=_pad_prepare)
def _pad(inputs, outputs, prepared):
    """Pad: crop negative pads, then fill (constant) or copy the borders from the output's
    interior (reflect/edge/wrap: two slice copies per padded axis)."""
    mode, crop, grow, dst, value, borders = prepared
    x, out = inputs[0][crop], outputs[0]
    if mode == "constant":
        if any(b or e for b, e in grow):
            out.fill(_pad_constant(value, inputs, out.dtype))
        out[dst] = x
        return
    if borders is None:
        np.copyto(out, np.pad(x, grow, mode=mode))
        return
    out[dst] = x
    for to, source in borders:
        out[to] = out[source]


# DepthToSpace / SpaceToDepth -------------------------------------------------------------

def _block_args(ctx):
    shape = ctx.shape(0)
    if len(shape) != 4:
        ctx.fail(f"input must have rank 4 (N, C, H, W), got rank {len(shape)}", kind="InvalidRank")
    bs = ctx.attr("blocksize")
    if bs is None or bs < 1:
        ctx.fail(f"attribute 'blocksize' must be given and >= 1, got {bs}", kind="MissingAttribute")
    mode = ctx.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        ctx.fail(f"mode '{mode}' is not 'DCR' or 'CRD'", kind="InvalidAttribute")
    return shape, bs, mode


@lib.op("DepthToSpace", since_version=(1, 11, 13, 28), infer_dtype=same_dtype(0))
def _depth_to_space_shape(ctx):
    """DepthToSpace: (N, C, H, W) -> (N, C/b^2, H*b, W*b), modes DCR / CRD (>=11).

    Raises InvalidRank, BlocksizeMismatch (C not divisible by b^2). Source: ONNX operator
    spec, DepthToSpace-13.
    """
    (n, c, h, w), bs, _ = _block_args(ctx)
    require(ctx, c % (bs * bs), "==", 0, f"channels {c} are not divisible by blocksize^2 = {bs * bs}",
            "BlocksizeMismatch")
    return [(n, c // (bs * bs), h * bs, w * bs)]


@lib.kernel("DepthToSpace")
def _depth_to_space(inputs, outputs, ctx):
    """DepthToSpace: reshape/transpose straight into a 6-D view of the output."""
    x, out = inputs[0], outputs[0]
    bs, mode = ctx.attr("blocksize"), ctx.attr("mode", "DCR")
    b, c, h, w = x.shape
    c2 = c // (bs * bs)
    if mode == "DCR":
        t = x.reshape(b, bs, bs, c2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(b, c2, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    np.copyto(out.reshape(b, c2, h, bs, w, bs), t)


@lib.op("SpaceToDepth", since_version=(1, 13, 28), infer_dtype=same_dtype(0))
def _space_to_depth_shape(ctx):
    """SpaceToDepth: (N, C, H, W) -> (N, C*b^2, H/b, W/b), modes DCR / CRD (>=28).

    Raises InvalidRank, BlocksizeMismatch (H or W not divisible by b). Source: ONNX
    operator spec, SpaceToDepth-28.
    """
    (n, c, h, w), bs, _ = _block_args(ctx)
    for name, d in (("height", h), ("width", w)):
        require(ctx, d % bs, "==", 0, f"{name} {d} is not divisible by blocksize {bs}", "BlocksizeMismatch")
    return [(n, c * bs * bs, h // bs, w // bs)]


@lib.kernel("SpaceToDepth")
def _space_to_depth(inputs, outputs, ctx):
    """SpaceToDepth: reshape/transpose into a 6-D view of the output."""
    x, out = inputs[0], outputs[0]
    bs, mode = ctx.attr("blocksize"), ctx.attr("mode", "DCR")
    b, c, h, w = x.shape
    t = x.reshape(b, c, h // bs, bs, w // bs, bs)
    if mode == "DCR":
        np.copyto(out.reshape(b, bs, bs, c, h // bs, w // bs), t.transpose(0, 3, 5, 1, 2, 4))
    else:
        np.copyto(out.reshape(b, c, bs, bs, h // bs, w // bs), t.transpose(0, 1, 3, 5, 2, 4))


# OneHot, Trilu, Where, NonZero --------------------------------------------------------

def _onehot_dtype(ctx):
    return [ctx.dtype(2)]


def _depth_value(ctx) -> int | None:
    v = ctx.value(1)
    if v is None:
        return None
    vals = value_list(v)
    if len(vals) != 1:
        ctx.fail(f"depth must hold one value, got {len(vals)}", kind="InvalidScalarInput")
    if isinstance(vals[0], Expr):
        return None
    return int(vals[0])


@lib.op("OneHot", since_version=(9, 11, 28), infer_dtype=_onehot_dtype, value_inputs=(1,))
def _onehot_shape(ctx):
    """OneHot: a new axis of size ``depth`` at ``axis``; on_value where the index hits.

    values = [off, on]; indices outside [-depth, depth-1] give all off. Output dtype is
    values'. Raises InvalidRank (0-d indices: ONNX's shape inference refuses them, as
    onnxruntime does), InvalidValues, OneHotNegativeDepth. Source: ONNX operator spec, OneHot-11.
    """
    idx, vals = ctx.shape(0), ctx.shape(2)
    if len(idx) == 0:
        ctx.fail("indices must have rank >= 1", kind="InvalidRank")
    message = "values must be a 1-D tensor [off_value, on_value] of 2 elements"
    if len(vals) != 1:
        ctx.fail(message, kind="InvalidValues")
    require(ctx, vals[0], "==", 2, message, "InvalidValues")
    axis = normalize_axis(ctx, ctx.attr("axis", -1), len(idx) + 1)
    depth = _depth_value(ctx)
    if depth is None:
        depth = ctx.new_dim()
    elif depth < 0:
        ctx.fail(f"depth {depth} must be >= 0", kind="OneHotNegativeDepth")
    return [tuple(idx[:axis]) + (depth,) + tuple(idx[axis:])]


@lib.kernel("OneHot")
def _onehot(inputs, outputs, ctx):
    """OneHot: compare the normalised indices with an arange along the new axis."""
    idx, depth, values = inputs
    axis = normalize_axis(ctx, ctx.attr("axis", -1), idx.ndim + 1)
    depth = int(np.asarray(depth).reshape(-1)[0])
    out = outputs[0]
    if out is None:
        shape = idx.shape[:axis] + (depth,) + idx.shape[axis:]
        out = np.empty(shape, dtype=values.dtype)
    i = idx.astype(np.int64) if idx.dtype.kind in "iu" else np.trunc(idx.astype(np.float64)).astype(np.int64)
    i = np.expand_dims(np.where(i < 0, i + depth, i), axis)
    positions = np.arange(depth).reshape((depth,) + (1,) * (idx.ndim - axis))
    off, on = values.reshape(-1)[0], values.reshape(-1)[1]
    out.fill(off)
    np.copyto(out, on, where=(i == positions))
    return None if outputs[0] is not None else [out]


@lib.op("Trilu", since_version=14, infer_dtype=same_dtype(0))
def _trilu_shape(ctx):
    """Trilu: keep the upper (``upper=1``) or lower triangle of the last two axes, offset k.

    Raises InvalidRank (rank < 2). Source: ONNX operator spec, Trilu-14.
    """
    shape = ctx.shape(0)
    if len(shape) < 2:
        ctx.fail(f"input must have rank >= 2, got {len(shape)}", kind="InvalidRank")
    return [tuple(shape)]


@lib.kernel("Trilu")
def _trilu(inputs, outputs, ctx):
    """Trilu: zero the other triangle through a (N, M) mask."""
    x, out = inputs[0], outputs[0]
    k = int(inputs[1].reshape(-1)[0]) if len(inputs) > 1 and inputs[1] is not None else 0
    n, m = x.shape[-2:]
    keep_lower = np.tri(n, m, k, dtype=bool)  # j - i <= k
    mask = keep_lower if ctx.attr("upper", 1) == 0 else ~np.tri(n, m, k - 1, dtype=bool)
    out.fill(0)
    np.copyto(out, x, where=mask)


def _where_value(ctx):
    cond, x, y = ctx.value(0), ctx.value(1), ctx.value(2)
    if cond is None or x is None or y is None or np.asarray(cond).dtype == object:
        return [None]
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype == object or y.dtype == object:
        x, y = x.astype(object), y.astype(object)
    return [np.where(np.asarray(cond, dtype=bool), x, y)]


@lib.op("Where", since_version=(9, 16), infer_dtype=same_dtype(1), propagate_value=_where_value)
def _where_shape(ctx):
    """Where: ``condition ? X : Y`` with three-way multidirectional broadcasting
    (onnx/docs/Broadcasting.md: 1 vs n is n, 0 vs 1 is 0).

    Raises BroadcastMismatch. Source: ONNX operator spec, Where-16.
    """
    return [broadcast_shapes(ctx, ctx.shape(0), ctx.shape(1), ctx.shape(2))]


@lib.kernel("Where", dtype_input=1)
def _where(inputs, outputs, ctx):
    """Where: copy Y, then X where the condition holds (both broadcast)."""
    cond, x, y = inputs
    np.copyto(outputs[0], y)
    np.copyto(outputs[0], x, where=cond.astype(bool, copy=False))


@lib.op("NonZero", since_version=(9, 13), infer_dtype=fixed_dtype(np.int64), data_dependent=True)
def _nonzero_shape(ctx):
    """NonZero: (rank, count) int64 indices of the non-zero elements, row-major order.

    The count depends on data. A scalar counts as rank 1 (as onnxruntime). Source: ONNX
    operator spec, NonZero-13.
    """
    return [(max(len(ctx.shape(0)), 1), ctx.new_dim())]


@lib.kernel("NonZero")
def _nonzero(inputs, outputs, ctx):
    """NonZero: np.nonzero stacked as a (rank, count) int64 array."""
    x = inputs[0]
    x = x.reshape(1) if x.ndim == 0 else x
    if x.dtype.kind == "V":
        x = x.astype(np.float32)
    return [np.asarray(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


# TopK, CumSum --------------------------------------------------------------------------

def _topk_k(ctx) -> int | None:
    if ctx.opset < 10:
        k = ctx.attr("k")
        if k is None:
            ctx.fail("attribute 'k' is required", kind="MissingAttribute")
        return k
    return _scalar_int(ctx, 1, "K")


@lib.op("TopK", since_version=(1, 10, 11, 24), infer_dtype=lambda ctx: [ctx.dtype(0), np.dtype(np.int64)],
        value_inputs=(1,))
def _topk_shape(ctx):
    """TopK: the k largest (or smallest, ``largest=0``) values along ``axis`` and their indices.

    Outputs (values, int64 indices), dim ``axis`` becomes k; ties go to the lower index.
    Raises TopKInvalidK (k < 0 or k > dim). Source: ONNX operator spec, TopK-24.
    """
    shape = ctx.shape(0)
    axis = normalize_axis(ctx, ctx.attr("axis", -1), len(shape))
    k = _topk_k(ctx)
    if k is None:
        k = ctx.new_dim()
    else:
        message = f"k = {k} must be in [0, {shape[axis]}] (the size of axis {axis})"
        require(ctx, k, ">=", 0, message, "TopKInvalidK")
        require(ctx, shape[axis], ">=", k, message, "TopKInvalidK")
    out = tuple(shape[:axis]) + (k,) + tuple(shape[axis + 1:])
    return [out, out]


def _topk_prepare(ctx):
    axis = normalize_axis(ctx, ctx.attr("axis", -1), len(ctx.input_shapes[0]))
    largest = ctx.attr("largest", 1) if ctx.opset >= 11 else 1
    k = ctx.output_shapes[0][axis] if ctx.output_shapes else None
    return axis, k if isinstance(k, int) else None, bool(largest)


def _topk_sorted(key: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """Indices of the top k along the last axis by a full stable sort (ties: lower index first)."""
    n = key.shape[-1]
    if largest:  # stable sort of the reversed row, read backwards
        order = np.argsort(key[..., ::-1], axis=-1, kind="stable")[..., ::-1]
        return (n - 1) - order[..., :k]
    return np.argsort(key, axis=-1, kind="stable")[..., :k]


def _topk_partition(key: np.ndarray, k: int, largest: bool) -> np.ndarray | None:
    """The same as :func:`_topk_sorted` for rows (2-D key) with k much smaller than n, in O(n):
    a partition finds the k-th value; among elements equal to it the lowest indices are kept.
    None when the key holds NaN (then the full sort decides: NaN sorts as the largest)."""
    if key.dtype.kind == "f" and np.isnan(key).any():
        return None
    n = key.shape[-1]
    kth = np.partition(key, n - k if largest else k - 1, axis=-1)[:, [n - k if largest else k - 1]]
    strict = key > kth if largest else key < kth
    equal = key == kth
    need = k - strict.sum(axis=-1, keepdims=True)
    chosen = strict | (equal & (np.cumsum(equal, axis=-1) <= need))
    cand = np.nonzero(chosen)[1].reshape(key.shape[0], k)  # ascending index per row
    order = _topk_sorted(np.take_along_axis(key, cand, axis=-1), k, largest)
    return np.take_along_axis(cand, order, axis=-1)


@lib.kernel("TopK", prepare=_topk_prepare)
def _topk(inputs, outputs, prepared):
    """TopK: partition + stable sort of the k candidates (ties keep the lower index first)."""
    axis, k, largest = prepared
    x = inputs[0]
    if k is None:  # K was not known when the node was planned
        k = int(np.asarray(inputs[1]).reshape(-1)[0])
    key = np.moveaxis(x.astype(_compute_dtype(x.dtype), copy=False), axis, -1)
    n = key.shape[-1]
    top = None
    if 0 < k and 4 * k < n and key.size:
        top = _topk_partition(key.reshape(-1, n), k, largest)
        if top is not None:
            top = top.reshape(key.shape[:-1] + (k,))
    if top is None:
        top = _topk_sorted(key, k, largest)
    top = np.moveaxis(top, -1, axis)
    values = np.take_along_axis(x, top, axis=axis)
    if outputs[0] is None or outputs[1] is None:
        return [values, top]
    np.copyto(outputs[1], top)
    np.copyto(outputs[0], values)
    return None


@lib.op("CumSum", since_version=(11, 14), infer_dtype=same_dtype(0))
def _cumsum_shape(ctx):
    """CumSum: cumulative sum along the ``axis`` input; ``exclusive`` and ``reverse`` attrs.

    Output has the input's shape and dtype. Raises AxisOutOfRange, InvalidScalarInput.
    Source: ONNX operator spec, CumSum-14.
    """
    shape = ctx.shape(0)
    axis = _scalar_int(ctx, 1, "axis")
    if axis is not None:
        normalize_axis(ctx, axis, len(shape))
    return [tuple(shape)]


@lib.kernel("CumSum")
def _cumsum(inputs, outputs, ctx):
    """CumSum: np.cumsum in the input dtype (float32 for 16-bit floats)."""
    x, out = inputs[0], outputs[0]
    axis = normalize_axis(ctx, int(np.asarray(inputs[1]).reshape(-1)[0]), x.ndim)
    reverse, exclusive = ctx.attr("reverse", 0), ctx.attr("exclusive", 0)
    cdt = _compute_dtype(x.dtype)
    y = x.astype(cdt, copy=False)
    if reverse:
        y = np.flip(y, axis)
    res = np.cumsum(y, axis=axis, dtype=cdt)
    if exclusive:
        shifted = np.zeros_like(res)
        lead = (slice(None),) * axis
        shifted[lead + (slice(1, None),)] = res[lead + (slice(None, -1),)]
        res = shifted
    if reverse:
        res = np.flip(res, axis)
    np.copyto(out, res, casting="unsafe")


# CumProd -------------------------------------------------------------------------------

def _cumprod_value(ctx):
    """CumProd of host-known values, symbolic dims included (a product of Shape entries)."""
    x, axis = ctx.value(0), _scalar_int(ctx, 1, "axis")
    if x is None or axis is None:
        return [None]
    x = np.asarray(x).astype(object)
    axis = normalize_axis(ctx, axis, x.ndim)
    if ctx.attr("reverse", 0):
        x = np.flip(x, axis)
    res = np.multiply.accumulate(x, axis=axis) if x.size else x.copy()
    if ctx.attr("exclusive", 0) and x.size:
        lead = (slice(None),) * axis
        res = np.concatenate([np.ones_like(res[lead + (slice(0, 1),)]), res[lead + (slice(None, -1),)]], axis=axis)
    if ctx.attr("reverse", 0):
        res = np.flip(res, axis)
    return [res]


@lib.op("CumProd", since_version=26, infer_dtype=same_dtype(0), propagate_value=_cumprod_value)
def _cumprod_shape(ctx):
    """CumProd: cumulative product along the ``axis`` input; ``exclusive`` (the j-th output is
    the product of the first j - 1 elements, 1 first) and ``reverse`` attributes.

    Output has the input's shape and dtype; symbolic values propagate. Raises
    AxisOutOfRange, InvalidScalarInput. Source: ONNX operator spec, CumProd-26.
    """
    shape = ctx.shape(0)
    axis = _scalar_int(ctx, 1, "axis")
    if axis is not None:
        normalize_axis(ctx, axis, len(shape))
    return [tuple(shape)]


def _cumprod_prepare(ctx):
    return bool(ctx.attr("reverse", 0)), bool(ctx.attr("exclusive", 0)), _compute_dtype(ctx.dtype(0)), ctx


@lib.kernel("CumProd", prepare=_cumprod_prepare)
def _cumprod(inputs, outputs, prepared):
    """CumProd: np.cumprod into (flipped views of) the output; exclusive writes 1 first and
    the products of all but the last element after it. 16-bit floats compute in float32."""
    reverse, exclusive, cdt, ctx = prepared
    x, out = inputs[0], outputs[0]
    axis = normalize_axis(ctx, int(np.asarray(inputs[1]).reshape(-1)[0]), x.ndim)
    work = out if out.dtype == cdt else np.empty(out.shape, cdt)
    src, dst = (np.flip(x, axis), np.flip(work, axis)) if reverse else (x, work)
    if exclusive:
        lead = (slice(None),) * axis
        dst[lead + (slice(0, 1),)] = 1
        np.cumprod(src[lead + (slice(None, -1),)], axis=axis, dtype=cdt, out=dst[lead + (slice(1, None),)])
    else:
        np.cumprod(src, axis=axis, dtype=cdt, out=dst)
    if work is not out:
        np.copyto(out, work, casting="unsafe")


# BitCast -------------------------------------------------------------------------------

def _bit_width(dt: np.dtype) -> int:
    """Bits per element: 4 for int4/uint4/float4 and 2 for int2/uint2 (ml_dtypes keep each
    in the low bits of a byte), else the itemsize."""
    name = np.dtype(dt).name
    if name in ("int4", "uint4") or name.startswith("float4"):
        return 4
    if name in ("int2", "uint2"):
        return 2
    return np.dtype(dt).itemsize * 8


def _bitcast_dtype(ctx) -> np.dtype:
    from dynashape.dtypes import np_dtype

    to = ctx.attr("to")
    if to is None:
        ctx.fail("attribute 'to' is required", kind="MissingAttribute")
    try:
        dt = np_dtype(int(to))
    except TypeError:
        ctx.fail(f"'to' = {to} is not an ONNX element type", kind="InvalidAttribute")
    if dt.kind in "OUS":
        ctx.fail("'to' must not be string: BitCast reinterprets fixed-width elements", kind="InvalidAttribute")
    return dt


@lib.op("BitCast", since_version=26, infer_dtype=lambda ctx: [_bitcast_dtype(ctx)], aliases=((0, 0),))
def _bitcast_shape(ctx):
    """BitCast: reinterpret the bits of each element as type ``to`` (same bit width).

    Output has the input's shape. Raises MissingAttribute, InvalidAttribute (string),
    BitWidthMismatch. Source: ONNX operator spec, BitCast-26.
    """
    to, src = _bitcast_dtype(ctx), ctx.dtype(0)
    if src is not None:
        if np.dtype(src).kind in "OUS":
            ctx.fail("the input must not be string: BitCast reinterprets fixed-width elements",
                     kind="UnsupportedDtype")
        if _bit_width(src) != _bit_width(to):
            ctx.fail(f"input type {np.dtype(src).name} has {_bit_width(src)} bits but 'to' type {to.name} has "
                     f"{_bit_width(to)}; BitCast needs equal bit widths", kind="BitWidthMismatch")
    return [tuple(ctx.shape(0))]


@lib.kernel("BitCast", prepare=_bitcast_dtype)
def _bitcast(inputs, outputs, to):
    """BitCast: a view of the input's bytes (numpy is little-endian here, as the spec asks)."""
    return [inputs[0].view(to)]


# Unique --------------------------------------------------------------------------------

def _unique_axis(ctx, rank: int):
    axis = ctx.attr("axis")
    return None if axis is None else normalize_axis(ctx, axis, rank)


@lib.op("Unique", since_version=(11, 28), data_dependent=True,
        infer_dtype=lambda ctx: [ctx.dtype(0)] + [np.dtype(np.int64)] * 3)
def _unique_shape(ctx):
    """Unique: the unique elements (or slices along ``axis``), sorted (``sorted=1``, the
    default) or in order of first occurrence; optional outputs indices (first occurrence),
    inverse_indices and counts (int64).

    The number of unique values depends on data (a fresh dim); inverse_indices has one entry
    per element (per slice with ``axis``). Raises AxisOutOfRange, InvalidAttribute.
    Source: ONNX operator spec, Unique-11 (-28: more types).
    """
    shape = ctx.shape(0)
    if ctx.attr("sorted", 1) not in (0, 1):
        ctx.fail(f"sorted is {ctx.attr('sorted')}, expected 0 or 1", kind="InvalidAttribute")
    axis = _unique_axis(ctx, len(shape))
    u = ctx.new_dim()
    if axis is None:
        y, n = (u,), numel(shape)
    else:
        y, n = tuple(shape[:axis]) + (u,) + tuple(shape[axis + 1:]), shape[axis]
    return [y, (u,), (n,), (u,)]


def _unique_prepare(ctx):
    return _unique_axis(ctx, len(ctx.shape(0))), bool(ctx.attr("sorted", 1))


@lib.kernel("Unique", prepare=_unique_prepare)
def _unique(inputs, outputs, prepared):
    """Unique: np.unique (sorted); unsorted reorders by first occurrence. With ``axis`` on
    object or ml_dtypes types, the slices are compared through the integer codes of their
    elements (codes keep the order, so the result is the same)."""
    axis, is_sorted = prepared
    x = inputs[0]
    if axis is None:
        y, first, inverse, counts = np.unique(x.reshape(-1), return_index=True, return_inverse=True,
                                              return_counts=True)
    else:
        key = x
        if x.dtype.kind in "OV":
            key = np.unique(x.reshape(-1), return_inverse=True)[1].reshape(x.shape)
        _, first, inverse, counts = np.unique(key, return_index=True, return_inverse=True,
                                              return_counts=True, axis=axis)
        y = np.take(x, first, axis=axis)
    inverse = inverse.reshape(-1)
    if not is_sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
        y = np.take(x.reshape(-1), first) if axis is None else np.take(x, first, axis=axis)
    res = [y, first.astype(np.int64, copy=False), inverse.astype(np.int64, copy=False),
           counts.astype(np.int64, copy=False)]
    return res[:len(outputs)]


# Compress ------------------------------------------------------------------------------

def _compress_axis(ctx, rank: int):
    axis = ctx.attr("axis")
    return None if axis is None else normalize_axis(ctx, axis, rank)


def _compress_count(ctx, dim):
    """Number of true entries of a host-known condition (None: unknown). Entries past
    ``dim`` must be false: a true one selects a slice that does not exist (ConditionTooLong).
    A symbolic ``dim`` is assumed to cover the condition (a guard every signature checks;
    one that breaks it is judged here with ints)."""
    value = ctx.value(1)
    if value is None or np.asarray(value).dtype == object:
        return None
    cond = np.asarray(value).reshape(-1)
    if ctx.assume(dim, ">=", cond.size):
        return int(np.count_nonzero(cond))
    beyond = np.flatnonzero(cond[dim:])
    if beyond.size:
        ctx.fail(f"condition entry {dim + int(beyond[0])} is true but the axis has only {dim} slices (entries past "
                 "the axis may only be false)", kind="ConditionTooLong")
    return int(np.count_nonzero(cond[:dim]))


def _compress_value(ctx):
    data, cond = ctx.value(0), ctx.value(1)
    if data is None or cond is None or np.asarray(cond).dtype == object:
        return [None]
    data = np.asarray(data)
    axis = _compress_axis(ctx, data.ndim)
    flat = data.reshape(-1) if axis is None else data
    ax = 0 if axis is None else axis
    idx = np.flatnonzero(np.asarray(cond, dtype=bool).reshape(-1)[:flat.shape[ax]])
    return [np.take(flat, idx, axis=ax)]


@lib.op("Compress", since_version=(9, 11, 28), infer_dtype=same_dtype(0), value_inputs=(1,),
        propagate_value=_compress_value)
def _compress_shape(ctx):
    """Compress: the slices along ``axis`` (elements of the flattened input when no axis)
    whose ``condition`` entry is true. A condition shorter than the axis drops the rest (the
    spec); entries past the axis may only be false (they select nothing), a true one is
    ConditionTooLong: the spec lets the condition be shorter only, onnx.reference (numpy's
    compress) refuses a true entry there, onnxruntime ignores every entry past the axis.

    The output length is the number of true entries: known when the condition is (on a
    symbolic axis, assuming the axis is at least as long as the condition), else a fresh
    dim (data-dependent). Propagates symbolic values (a compressed Shape). Raises
    InvalidRank (condition not 1-D), AxisOutOfRange, UnsupportedDtype, ConditionTooLong.
    Source: ONNX operator spec, Compress-11 (-9: the same, negative axis unspecified; -28:
    more types).
    """
    shape, cond = ctx.shape(0), ctx.shape(1)
    if cond is not None and len(cond) != 1:
        ctx.fail(f"condition must be 1-D, got rank {len(cond)}", kind="InvalidRank")
    if ctx.dtype(1) is not None and ctx.dtype(1) != np.bool_:
        ctx.fail(f"condition has element type {ctx.dtype(1)}, expected bool", kind="UnsupportedDtype")
    axis = _compress_axis(ctx, len(shape))
    count = _compress_count(ctx, numel(shape) if axis is None else shape[axis])
    if count is None:
        count = ctx.new_dim()
    if axis is None:
        return [(count,)]
    return [tuple(shape[:axis]) + (count,) + tuple(shape[axis + 1:])]


def _compress_prepare(ctx):
    return _compress_axis(ctx, len(ctx.shape(0)))


@lib.kernel("Compress", prepare=_compress_prepare)
def _compress(inputs, outputs, axis):
    """Compress: np.take of the true positions (into the output when it is planned)."""
    x, cond = inputs
    data = x.reshape(-1) if axis is None else x
    dim = data.shape[0 if axis is None else axis]
    idx = np.flatnonzero(cond.reshape(-1)[:dim])
    ax = 0 if axis is None else axis
    out = outputs[0]
    if out is None or out.shape[ax] != idx.size:
        return [np.take(data, idx, axis=ax)]
    if out.size:
        np.take(data, idx, axis=ax, out=out)
    return None


# EyeLike -------------------------------------------------------------------------------

def _eyelike_dtype(ctx):
    dt = ctx.attr("dtype")
    if dt is None or int(dt) == 0:
        return [ctx.dtype(0) if ctx.dtype(0) is not None else np.dtype(np.float32)]
    from dynashape.dtypes import np_dtype
    try:
        out = np_dtype(int(dt))
    except TypeError:
        ctx.fail(f"dtype {dt} is not an ONNX element type", kind="InvalidAttribute")
    return [out]


@lib.op("EyeLike", since_version=(9, 22), infer_dtype=_eyelike_dtype, shape_only_inputs=(0,))
def _eyelike_shape(ctx):
    """EyeLike: a 2-D tensor shaped like the input with ones on diagonal ``k`` (T2[i, i+k]),
    zeros elsewhere; type attribute ``dtype`` or the input's.

    Raises InvalidRank (input not 2-D), InvalidAttribute (string output).
    Source: ONNX operator spec, EyeLike-22 (-9: the same without bfloat16).
    """
    shape = ctx.shape(0)
    if len(shape) != 2:
        ctx.fail(f"input must be 2-D, got rank {len(shape)}", kind="InvalidRank")
    if _eyelike_dtype(ctx)[0].kind in "OUS":
        ctx.fail("the output type must be numeric or bool, not string", kind="InvalidAttribute")
    return [tuple(shape)]


@lib.kernel("EyeLike", prepare=lambda ctx: int(ctx.attr("k", 0)), reads=())
def _eyelike(inputs, outputs, k):
    """EyeLike: zeros, then one fancy-indexed write of the diagonal."""
    out = outputs[0]
    out.fill(0)
    n, m = out.shape
    i = np.arange(max(0, -k), max(min(n, m - k), 0))
    out[i, i + k] = 1


# ReverseSequence -----------------------------------------------------------------------

def _reverse_axes(ctx):
    b, t = int(ctx.attr("batch_axis", 1)), int(ctx.attr("time_axis", 0))
    if b not in (0, 1) or t not in (0, 1) or b == t:
        ctx.fail(f"batch_axis {b} and time_axis {t} must be 0 and 1 in some order", kind="InvalidAttribute")
    return b, t


@lib.op("ReverseSequence", since_version=(10, 28), infer_dtype=same_dtype(0))
def _reverse_sequence_shape(ctx):
    """ReverseSequence: for each batch entry i reverse the first sequence_lens[i] steps along
    the time axis; later steps are copied.

    input rank >= 2, batch_axis/time_axis 0 and 1 in some order, sequence_lens (batch,)
    int64. Raises InvalidRank, InvalidAttribute, DimMismatch; at run time
    InvalidSequenceLength (outside [0, time dim]). Source: ONNX operator spec,
    ReverseSequence-10 (-28: more types).
    """
    shape, lens = ctx.shape(0), ctx.shape(1)
    if len(shape) < 2:
        ctx.fail(f"input must have rank >= 2, got rank {len(shape)}", kind="InvalidRank")
    batch_axis, _ = _reverse_axes(ctx)
    if len(lens) != 1:
        ctx.fail(f"sequence_lens must be 1-D, got rank {len(lens)}", kind="InvalidRank")
    if ctx.dtype(1) is not None and ctx.dtype(1).kind not in "iu":
        ctx.fail(f"sequence_lens has element type {ctx.dtype(1)}, expected int64", kind="UnsupportedDtype")
    check_dims_equal(ctx, lens[0], shape[batch_axis], f"sequence_lens length and the batch dim (axis {batch_axis})")
    return [tuple(shape)]


def _reverse_sequence_prepare(ctx):
    b, t = _reverse_axes(ctx)
    return t, ctx.node.name


@lib.kernel("ReverseSequence", prepare=_reverse_sequence_prepare)
def _reverse_sequence(inputs, outputs, prepared):
    """ReverseSequence: one (B, T) source-index table, gathered with take_along_axis."""
    time_axis, node = prepared
    x, lens = inputs[0], inputs[1].astype(np.int64, copy=False).reshape(-1)
    steps = x.shape[time_axis]
    bad = (lens < 0) | (lens > steps)
    if bad.any():
        raise ShapeInferenceError(
            f"ReverseSequence node '{node}': sequence length {int(lens[bad][0])} is out of range (valid: "
            f"[0, {steps}], the time dim)", node=node, op_type="ReverseSequence", kind="InvalidSequenceLength")
    t = np.arange(steps, dtype=np.int64)[None, :]
    src = np.where(t < lens[:, None], lens[:, None] - 1 - t, t)          # (B, T)
    if time_axis == 0:
        src = src.T
    src = src.reshape(src.shape + (1,) * (x.ndim - 2))
    np.copyto(outputs[0], np.take_along_axis(x, src, axis=time_axis))
