"""Sequence and optional operators (ONNX IR.md "Types": ``seq(tensor(T))``, ``optional(T)``).

SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase, SequenceLength,
SplitToSequence, ConcatFromSequence, SequenceMap, Optional, OptionalHasElement,
OptionalGetElement.

Run-time values: a sequence is a Python list of numpy arrays (or of containers), an optional
is None (empty) or its element. Their slots have no shape (``infer_shape`` returns None for
them) and a :class:`~dynashape.dtypes.SequenceType` / :class:`~dynashape.dtypes.OptionalType`
as their dtype; the engine never plans them: the kernels make them when they run.

At import a sequence's type carries what is proven of its elements (``SequenceType.rank``,
``.dims``: the int each axis has in every element; ``.empty`` from SequenceEmpty): the ops
that make a sequence prove it, SequenceAt and ConcatFromSequence take it (a Loop carrying a
sequence: control_flow.py).

Sequences are immutable once made: a kernel that changes one returns a new list, and every
tensor put into a sequence (or an optional) is copied first, so an element is never a view
of an arena buffer that a later step or run overwrites (elements may be shared between
lists). A tensor taken out of a sequence (SequenceAt, ConcatFromSequence) is new memory.

The ops that make a container from tensors only (SequenceEmpty, SequenceConstruct,
SplitToSequence, Optional) are registered ``deterministic=False``: a container is never a
host constant, so constant folding must not run them (it would turn the list into an array).
"""
from __future__ import annotations

import numpy as np
from dynashape.dtypes import OptionalType, SequenceType, is_container, join_dims, known_dims, np_dtype, \
    value_type_string, with_element
from dynashape.model import Graph
from dynashape.ops_builtin.control_flow import _graph_attr
from dynashape.records import InferContext, OpLibrary, fixed_dtype
from dynashape.shapes import normalize_axis, require, value_list
from dynashape.symbolic import Expr

lib = OpLibrary()

SEQ_VERSIONS = (11,)
SPLIT_TO_SEQUENCE_VERSIONS = (11, 24)
SEQUENCE_MAP_VERSIONS = (17,)
OPTIONAL_VERSIONS = (15, 28)
OPTIONAL_ACCESS_VERSIONS = (15, 18, 28)


# shared helpers ---------------------------------------------------------------------------

def _seq_elem(ctx: InferContext, i: int, what: str = "input_sequence"):
    """The element type of sequence input ``i`` (None when unknown); fails for a tensor."""
    t = ctx.dtype(i)
    if isinstance(t, OptionalType):
        t = t.elem
    if t is None:
        return None
    if not isinstance(t, SequenceType):
        ctx.fail(f"{what} must be a sequence, got {_type_text(t)}", kind="TypeMismatch")
    return t.elem


def _seq_type(ctx: InferContext, i: int):
    """Sequence input ``i``'s type (an optional's element), or None when it is no sequence."""
    t = ctx.dtype(i)
    if isinstance(t, OptionalType):
        t = t.elem
    return t if isinstance(t, SequenceType) else None


def _seq_dims(ctx: InferContext, i: int):
    """The dims every element of sequence input ``i`` has (ints, None where not proven; a
    proven hint), or None when their rank is not known."""
    t = _seq_type(ctx, i)
    return None if t is None else t.dims


def _element_shape(ctx: InferContext, dims: tuple) -> tuple:
    """An element's shape at import: the hint's ints, a fresh symbol for each other dim."""
    return tuple(ctx.new_dim() if d is None else d for d in dims)


def _rank(ctx: InferContext, i: int):
    shape = ctx.shape(i)
    return None if shape is None else len(shape)


def _type_text(t) -> str:
    return value_type_string(t)


def _scalar_position(ctx: InferContext, i: int) -> None:
    """``position`` must be a scalar (one element) of int32/int64, where known."""
    shape, dtype = ctx.shape(i), ctx.dtype(i)
    if dtype is not None and (is_container(dtype) or np.dtype(dtype) not in (np.int32, np.int64)):
        ctx.fail(f"position must be an int32 or int64 tensor, got {_type_text(dtype)}", kind="TypeMismatch")
    if shape is not None and len(shape) > 1:
        ctx.fail(f"position must be a scalar, got rank {len(shape)}", kind="InvalidRank")
    if shape is not None and len(shape) == 1:
        require(ctx, shape[0], "==", 1, f"position must hold one value, got shape {tuple(shape)}", "InvalidRank")


def _position(pos, n: int, high: int, what: str) -> int:
    """A run-time position in ``[-n, high]`` as an index in ``[0, n]``."""
    p = int(np.asarray(pos).reshape(-1)[0])
    if not -n <= p <= high:
        raise IndexError(f"{what} {p} is out of range [{-n}, {high}] for a sequence of {n} tensors")
    return p + n if p < 0 else p


def _owned(a):
    """A tensor to put into a container: a copy (an input may live in a planned buffer)."""
    if type(a) is list:
        return list(a)
    return None if a is None else np.array(a, copy=True)


def _compatible(a, b) -> bool:
    """Two types that can be the same: equal where both are known (None: unknown; an
    empty run-time sequence has element type None)."""
    if a is None or b is None:
        return True
    if isinstance(a, SequenceType) and isinstance(b, SequenceType) or \
            isinstance(a, OptionalType) and isinstance(b, OptionalType):
        return _compatible(a.elem, b.elem)
    return a == b


def _check_same_type(ctx: InferContext, a, b, what: str) -> None:
    if not _compatible(a, b):
        ctx.fail(f"{what}: {_type_text(a)} and {_type_text(b)} differ", kind="TypeMismatch")


# SequenceEmpty ----------------------------------------------------------------------------

def _empty_dtype(ctx: InferContext):
    return [SequenceType(np_dtype(int(ctx.attr("dtype", 1))), empty=True)]


@lib.op("SequenceEmpty", SEQ_VERSIONS, infer_dtype=_empty_dtype, deterministic=False)
def _sequence_empty_shape(ctx: InferContext):
    """An empty sequence of tensors of element type ``dtype`` (default float).

    Source: ONNX operator spec, SequenceEmpty-11.
    """
    try:
        np_dtype(int(ctx.attr("dtype", 1)))
    except TypeError:
        ctx.fail(f"dtype {ctx.attr('dtype')} is not a tensor element type", kind="InvalidAttribute")
    return [None]


@lib.kernel("SequenceEmpty")
def _sequence_empty(inputs, outputs, ctx):
    return [[]]


# SequenceConstruct ------------------------------------------------------------------------

def _construct_dtype(ctx: InferContext):
    dims = known_dims(ctx.shape(0)) if ctx.num_inputs else None
    for i in range(1, ctx.num_inputs):
        dims = join_dims(dims, ctx.shape(i))
    return [SequenceType(next((d for d in ctx.input_dtypes if d is not None), None), dims=dims)]


@lib.op("SequenceConstruct", SEQ_VERSIONS, infer_dtype=_construct_dtype, deterministic=False)
def _sequence_construct_shape(ctx: InferContext):
    """A sequence of the input tensors (one or more, all of one element type).

    Source: ONNX operator spec, SequenceConstruct-11.
    """
    if ctx.num_inputs < 1:
        ctx.fail("expects at least one input tensor", kind="InvalidInputs")
    first = None
    for i in range(ctx.num_inputs):
        d = ctx.dtype(i)
        if is_container(d):
            ctx.fail(f"input {i} must be a tensor, got {_type_text(d)}", kind="TypeMismatch")
        _check_same_type(ctx, first, d, f"input {i} has another element type than input 0")
        first = first if first is not None else d
    return [None]


@lib.kernel("SequenceConstruct")
def _sequence_construct(inputs, outputs, ctx):
    return [[np.array(a, copy=True) for a in inputs]]


# SequenceInsert ---------------------------------------------------------------------------

def _insert_dtype(ctx: InferContext):
    """The sequence's hints joined with the tensor's dims (unknown for a sequence of unknown type)."""
    elem = _seq_elem(ctx, 0)
    seq = _seq_type(ctx, 0)
    seq = SequenceType(elem if elem is not None else ctx.dtype(1)) if seq is None else \
        SequenceType(elem if elem is not None else ctx.dtype(1), dims=seq.dims, empty=seq.empty)
    return [with_element(seq, ctx.shape(1))]


@lib.op("SequenceInsert", SEQ_VERSIONS, infer_dtype=_insert_dtype)
def _sequence_insert_shape(ctx: InferContext):
    """``input_sequence`` with ``tensor`` inserted at ``position`` (in ``[-n, n]``, default:
    at the back); the tensor's element type must be the sequence's.

    Source: ONNX operator spec, SequenceInsert-11.
    """
    _check_same_type(ctx, _seq_elem(ctx, 0), ctx.dtype(1), "tensor and input_sequence element types")
    if is_container(ctx.dtype(1)):
        ctx.fail(f"tensor must be a tensor, got {_type_text(ctx.dtype(1))}", kind="TypeMismatch")
    if ctx.has_input(2):
        _scalar_position(ctx, 2)
    return [None]


@lib.kernel("SequenceInsert")
def _sequence_insert(inputs, outputs, ctx):
    seq, t = inputs[0], inputs[1]
    pos = inputs[2] if len(inputs) > 2 else None
    if seq and seq[0].dtype != t.dtype:
        raise TypeError(f"tensor of {t.dtype} cannot be inserted into a sequence of {seq[0].dtype}")
    n = len(seq)
    k = n if pos is None else _position(pos, n, n, "position")
    return [seq[:k] + [np.array(t, copy=True)] + seq[k:]]


# SequenceAt -------------------------------------------------------------------------------

def _at_dtype(ctx: InferContext):
    return [_seq_elem(ctx, 0)]


@lib.op("SequenceAt", SEQ_VERSIONS, infer_dtype=_at_dtype)
def _sequence_at_shape(ctx: InferContext):
    """A copy of the tensor at ``position`` (in ``[-n, n-1]``) of ``input_sequence``; its
    shape is known only when the sequence is (a data-dependent output).

    Source: ONNX operator spec, SequenceAt-11.
    """
    _seq_elem(ctx, 0)
    _scalar_position(ctx, 1)
    seq, pos = ctx.value(0), ctx.value(1)
    if type(seq) is list and pos is not None:   # at run time: report a bad position as the node's
        p = int(np.asarray(pos).reshape(-1)[0])
        if not -len(seq) <= p < len(seq):
            ctx.fail(f"position {p} is out of range [{-len(seq)}, {len(seq) - 1}] for a sequence of "
                     f"{len(seq)} tensors", kind="IndexOutOfRange")
        return [None]
    dims = _seq_dims(ctx, 0)
    return [None if dims is None else _element_shape(ctx, dims)]


@lib.kernel("SequenceAt")
def _sequence_at(inputs, outputs, ctx):
    seq = inputs[0]
    k = _position(inputs[1], len(seq), len(seq) - 1, "position")
    return [np.array(seq[k], copy=True)]


# SequenceErase ----------------------------------------------------------------------------

def _erase_dtype(ctx: InferContext):
    return [SequenceType(_seq_elem(ctx, 0), dims=_seq_dims(ctx, 0))]


@lib.op("SequenceErase", SEQ_VERSIONS, infer_dtype=_erase_dtype)
def _sequence_erase_shape(ctx: InferContext):
    """``input_sequence`` without the tensor at ``position`` (in ``[-n, n-1]``, default: the
    last one).

    Source: ONNX operator spec, SequenceErase-11.
    """
    _seq_elem(ctx, 0)
    if ctx.has_input(1):
        _scalar_position(ctx, 1)
    return [None]


@lib.kernel("SequenceErase")
def _sequence_erase(inputs, outputs, ctx):
    seq = inputs[0]
    pos = inputs[1] if len(inputs) > 1 else None
    n = len(seq)
    if n == 0:
        raise IndexError("cannot erase from an empty sequence")
    k = n - 1 if pos is None else _position(pos, n, n - 1, "position")
    return [seq[:k] + seq[k + 1:]]


# SequenceLength ---------------------------------------------------------------------------

@lib.op("SequenceLength", SEQ_VERSIONS, infer_dtype=fixed_dtype(np.int64))
def _sequence_length_shape(ctx: InferContext):
    """The number of tensors in ``input_sequence``, an int64 scalar.

    Source: ONNX operator spec, SequenceLength-11.
    """
    _seq_elem(ctx, 0)
    return [()]


@lib.kernel("SequenceLength")
def _sequence_length(inputs, outputs, ctx):
    out = outputs[0]
    if out is None:
        return [np.array(len(inputs[0]), dtype=np.int64)]
    out[...] = len(inputs[0])
    return None


# SplitToSequence --------------------------------------------------------------------------

def _split_dtype(ctx: InferContext):
    """seq(input's type); the parts' rank: the input's, one less where the axis is dropped
    (unknown when that depends on a ``split`` value not known here); their dims: the
    input's, the axis' the length every part has (:func:`_part_length`)."""
    rank = _rank(ctx, 0)
    if rank is not None and not int(ctx.attr("keepdims", 1)):
        if not ctx.has_input(1):
            rank -= 1
        elif ctx.shape(1) is not None and len(ctx.shape(1)) == 0:   # a scalar split (onnxruntime's rule)
            vals = value_list(ctx.value(1))
            shape = ctx.shape(0)
            axis = int(ctx.attr("axis", 0)) % rank if rank else 0
            if vals is None or isinstance(vals[0], Expr):
                rank = None
            elif int(vals[0]) == 1 or (rank and shape[axis] == 1):
                rank -= 1
            elif rank and not isinstance(shape[axis], int):
                rank = None     # a part of length 1 only when the axis is 1: not known here
    return [SequenceType(ctx.dtype(0), dims=_part_dims(ctx, rank))]


def _part_dims(ctx: InferContext, rank):
    """The dims of every part (ints, None where not proven), for parts of rank ``rank``
    (None: unknown): the input's but along the axis, dropped when the parts have one axis
    less."""
    shape = ctx.shape(0)
    if rank is None or shape is None or not shape:
        return None if rank is None else (None,) * rank
    axis = int(ctx.attr("axis", 0)) % len(shape)
    dims = list(known_dims(shape))
    if rank < len(shape):
        del dims[axis]
    else:
        dims[axis] = _part_length(ctx, dims[axis])
    return tuple(dims)


def _part_length(ctx: InferContext, total):
    """The length every part has along the axis (``total``: the axis' int length or None):
    1 without ``split``; a scalar ``split`` ``v``: 1 where ``v`` or ``total`` is 1, ``v``
    where it divides ``total``; a 1-D ``split``: its one value where all are alike; else None."""
    if not ctx.has_input(1):
        return 1
    vals = value_list(ctx.value(1))
    if not vals or any(isinstance(v, Expr) for v in vals) or len({int(v) for v in vals}) != 1:
        return None
    v = int(vals[0])
    if ctx.shape(1) is None or len(ctx.shape(1)) != 0:
        return v
    if v == 1 or total == 1:
        return 1
    return v if total is not None and v > 0 and total % v == 0 else None


@lib.op("SplitToSequence", SPLIT_TO_SEQUENCE_VERSIONS, infer_dtype=_split_dtype, deterministic=False)
def _split_to_sequence_shape(ctx: InferContext):
    """``input`` split along ``axis`` (in ``[-rank, rank-1]``) into a sequence: without
    ``split``, parts of length 1 (``keepdims=0`` drops the axis); a scalar ``split``, parts of
    that length (the last may be shorter); a 1-D ``split``, parts of those lengths (their sum
    must be the axis' length). The spec asks for positive lengths; as onnxruntime (and the
    ONNX backend test ``test_sequence_model8``), a 1-D ``split`` may hold zeros (empty
    parts), a scalar one must be positive.

    ``keepdims=0`` with a scalar ``split``: the spec ignores keepdims whenever ``split`` is
    given, onnxruntime applies it to a scalar ``split`` (torch.unbind exports as
    ``split=1, keepdims=0`` and relies on it). Where onnxruntime's result is defined (every
    part of length 1) the axis is dropped as it does; with longer parts (onnxruntime fails)
    the spec's parts are kept.

    Source: ONNX operator spec, SplitToSequence-11/24 (24 adds element types).
    """
    shape = ctx.shape(0)
    if is_container(ctx.dtype(0)):
        ctx.fail(f"input must be a tensor, got {_type_text(ctx.dtype(0))}", kind="TypeMismatch")
    axis = int(ctx.attr("axis", 0))
    if shape is not None:
        axis = normalize_axis(ctx, axis, len(shape))
    if not ctx.has_input(1):
        return [None]
    sshape, sdtype = ctx.shape(1), ctx.dtype(1)
    if sdtype is not None and not is_container(sdtype) and np.dtype(sdtype) not in (np.int32, np.int64):
        ctx.fail(f"split must be int32 or int64, got {sdtype}", kind="TypeMismatch")
    if sshape is not None and len(sshape) > 1:
        ctx.fail(f"split must be a scalar or 1-D, got rank {len(sshape)}", kind="InvalidRank")
    vals = value_list(ctx.value(1))
    if vals is None or any(isinstance(v, Expr) for v in vals):
        return [None]
    scalar = sshape is not None and len(sshape) == 0
    if any(int(v) < 0 for v in vals) or scalar and int(vals[0]) == 0:
        ctx.fail(f"split must hold {'a positive length' if scalar else 'lengths >= 0'}, got "
                 f"{[int(v) for v in vals]}", kind="InvalidSplit")
    if sshape is not None and len(sshape) == 1 and shape is not None:
        total = sum(int(v) for v in vals)
        if not ctx.assume(shape[axis], "==", total):
            ctx.fail(f"split lengths {[int(v) for v in vals]} sum to {total}, the input has {shape[axis]} "
                     f"along axis {axis}", kind="InvalidSplit")
    return [None]


def _split_prepare(ctx: InferContext):
    shape = ctx.shape(0)
    axis = int(ctx.attr("axis", 0))
    if shape is not None:
        axis = normalize_axis(ctx, axis, len(shape))
    return axis, bool(int(ctx.attr("keepdims", 1)))


@lib.kernel("SplitToSequence", prepare=_split_prepare)
def _split_to_sequence(inputs, outputs, prepared):
    axis, keepdims = prepared
    x = inputs[0]
    if axis < 0:
        axis += x.ndim
    split = inputs[1] if len(inputs) > 1 else None
    dim = x.shape[axis]
    if split is not None:
        lengths = np.asarray(split).reshape(-1).astype(np.int64)
        if np.any(lengths < 0) or np.ndim(split) == 0 and lengths.size and lengths[0] == 0:
            raise ValueError(f"split must hold {'a positive length' if np.ndim(split) == 0 else 'lengths >= 0'}, "
                             f"got {lengths.tolist()}")
        unit = np.ndim(split) == 0 and (int(lengths[0]) == 1 or dim == 1)
    if split is None or unit:   # parts of length 1: one copy with the axis first, its rows the parts
        moved = np.array(np.moveaxis(x, axis, 0), copy=True)
        return [list(np.expand_dims(moved, axis + 1)) if keepdims else list(moved)]
    if np.ndim(split) == 0:
        step = int(lengths[0])
        bounds = np.arange(step, dim, step)
    else:
        if int(lengths.sum()) != dim:
            raise ValueError(f"split lengths {lengths.tolist()} sum to {int(lengths.sum())}, the input has "
                             f"{dim} along axis {axis}")
        if lengths.size == 0:
            return [[]]
        return [[part.copy() for part in np.split(x, np.cumsum(lengths)[:-1], axis=axis)]]
    if dim == 0:
        return [[]]
    return [[part.copy() for part in np.split(x, bounds, axis=axis)]]


# ConcatFromSequence -----------------------------------------------------------------------

def _concat_dtype(ctx: InferContext):
    return [_seq_elem(ctx, 0)]


def _concat_axis(ctx: InferContext, rank: int) -> int:
    """``axis`` in ``[-r, r-1]``, or ``[-r-1, r]`` with ``new_axis=1``, normalised."""
    axis = ctx.attr("axis")
    if axis is None:
        ctx.fail("attribute 'axis' is required", kind="MissingAttribute")
    new_axis = int(ctx.attr("new_axis", 0))
    if new_axis not in (0, 1):
        ctx.fail(f"new_axis must be 0 or 1, got {new_axis}", kind="InvalidAttribute")
    return normalize_axis(ctx, int(axis), rank + new_axis)


@lib.op("ConcatFromSequence", SEQ_VERSIONS, infer_dtype=_concat_dtype)
def _concat_from_sequence_shape(ctx: InferContext):
    """The tensors of ``input_sequence`` concatenated along ``axis`` (``new_axis=1``: stacked
    on a new axis ``axis``); all of one shape but along ``axis``. The sequence must not be
    empty. The shape is data-dependent (known when the sequence is).

    Source: ONNX operator spec, ConcatFromSequence-11.
    """
    _seq_elem(ctx, 0)
    if ctx.attr("axis") is None:
        ctx.fail("attribute 'axis' is required", kind="MissingAttribute")
    seq = ctx.value(0)
    if type(seq) is not list:       # import time: the elements are not known, maybe their dims
        dims = _seq_dims(ctx, 0)
        return [None if dims is None else _concat_shape(ctx, dims)]
    if not seq:
        ctx.fail("input_sequence is empty: there is nothing to concatenate", kind="EmptySequence")
    first = seq[0].shape
    rank = len(first)
    axis = _concat_axis(ctx, rank)
    new_axis = int(ctx.attr("new_axis", 0))
    for k, a in enumerate(seq):
        if a.dtype != seq[0].dtype:
            ctx.fail(f"element {k} is {a.dtype}, element 0 {seq[0].dtype}", kind="TypeMismatch")
        same = a.shape == first if new_axis else (a.ndim == rank and all(
            d == e for j, (d, e) in enumerate(zip(a.shape, first)) if j != axis))
        if not same:
            ctx.fail(f"element {k} has shape {list(a.shape)}, element 0 {list(first)}: they must agree "
                     f"{'on every axis' if new_axis else f'except on axis {axis}'}", kind="ShapeMismatch")
    if new_axis:
        return [first[:axis] + (len(seq),) + first[axis:]]
    return [first[:axis] + (sum(a.shape[axis] for a in seq),) + first[axis + 1:]]


def _concat_shape(ctx: InferContext, dims: tuple) -> tuple:
    """ConcatFromSequence's shape at import from the dims every element has (ints, None where
    not proven): those ints, a fresh symbol for each other dim and for the concatenated (or
    new) axis, whose length depends on how many elements there are.

    Raises:
        ShapeInferenceError(AxisOutOfRange): ``axis`` is out of range for the elements' rank.
    """
    axis = _concat_axis(ctx, len(dims))
    shape = list(_element_shape(ctx, dims))
    if int(ctx.attr("new_axis", 0)):
        shape.insert(axis, ctx.new_dim())
    else:
        shape[axis] = ctx.new_dim()
    return tuple(shape)


def _concat_prepare(ctx: InferContext):
    return int(ctx.attr("axis", 0)), int(ctx.attr("new_axis", 0))


@lib.kernel("ConcatFromSequence", prepare=_concat_prepare)
def _concat_from_sequence(inputs, outputs, prepared):
    axis, new_axis = prepared
    seq = inputs[0]
    if not seq:
        raise ValueError("input_sequence is empty: there is nothing to concatenate")
    rank = seq[0].ndim + new_axis
    if axis < 0:
        axis += rank
    out = outputs[0]
    if new_axis:
        res = np.stack(seq, axis=axis, out=out)
    else:
        res = np.concatenate(seq, axis=axis, out=out)
    return None if out is not None else [res]


# SequenceMap ------------------------------------------------------------------------------

def _map_body(ctx: InferContext) -> Graph:
    body = _graph_attr(ctx, "body")
    if len(body.inputs) != ctx.num_inputs:
        ctx.fail(f"body has {len(body.inputs)} inputs, expected {ctx.num_inputs} (one per node input)",
                 kind="BodyInputCount")
    if len(body.outputs) != ctx.num_outputs:
        ctx.fail(f"body has {len(body.outputs)} outputs, expected {ctx.num_outputs} (one per node output)",
                 kind="BodyOutputCount")
    return body


def _map_dtype(ctx: InferContext):
    body = _map_body(ctx)
    return [SequenceType(vi.dtype) for vi in body.outputs]


@lib.op("SequenceMap", SEQUENCE_MAP_VERSIONS, infer_dtype=_map_dtype)
def _sequence_map_shape(ctx: InferContext):
    """``body`` applied to each sample: its i-th run takes the i-th element of every sequence
    input and every tensor input as it is; output k is the sequence of the runs' output k.
    The first input must be a sequence; every sequence input has its length.

    Source: ONNX operator spec, SequenceMap-17.
    """
    _map_body(ctx)
    if ctx.dtype(0) is not None and not isinstance(ctx.dtype(0), SequenceType):
        ctx.fail(f"input_sequence must be a sequence, got {_type_text(ctx.dtype(0))}", kind="TypeMismatch")
    return [None] * ctx.num_outputs


def _map_prepare(ctx: InferContext):
    _map_body(ctx)
    return ctx.node, ctx.subgraph("body")


@lib.kernel("SequenceMap", prepare=_map_prepare)
def _sequence_map(inputs, outputs, prepared):
    node, body = prepared
    n_in = len(node.inputs)
    runner, outer = body.runner, body.outer_values(inputs)
    args = list(inputs[:n_in])
    seqs = [j for j, a in enumerate(args) if type(a) is list]
    n = len(args[0])
    lengths = {len(args[j]) for j in seqs}
    if lengths != {n}:
        raise ValueError(f"sequence inputs have different lengths {sorted(len(args[j]) for j in seqs)}")
    results: list = [[] for _ in range(len(node.outputs))]
    for i in range(n):
        sample = [args[j][i] if type(args[j]) is list else args[j] for j in range(n_in)]
        for k, r in enumerate(runner.run_list(sample, outer)):
            results[k].append(r)
    return results


# Optional ---------------------------------------------------------------------------------

def _optional_dtype(ctx: InferContext):
    declared = ctx.attr("type")
    if ctx.has_input(0) and ctx.dtype(0) is not None:
        return [OptionalType(ctx.dtype(0))]
    return [OptionalType(declared)]


@lib.op("Optional", OPTIONAL_VERSIONS, infer_dtype=_optional_dtype, deterministic=False)
def _optional_shape(ctx: InferContext):
    """An optional holding ``input`` (a tensor or a sequence), or, without an input, an
    empty optional of the element type in attribute ``type``; one of the two is required
    and, when both are given, they must agree.

    Source: ONNX operator spec, Optional-15/28 (28 adds element types).
    """
    declared = ctx.attr("type")
    if not ctx.has_input(0):
        if declared is None and "type" not in ctx.attrs:
            ctx.fail("without an input, attribute 'type' (the element type) is required", kind="MissingAttribute")
        return [None]
    _check_same_type(ctx, declared, ctx.dtype(0), "attribute 'type' and the input's type")
    return [None]


@lib.kernel("Optional")
def _optional(inputs, outputs, ctx):
    return [_owned(inputs[0]) if inputs else None]


# OptionalHasElement -----------------------------------------------------------------------

@lib.op("OptionalHasElement", OPTIONAL_ACCESS_VERSIONS, infer_dtype=fixed_dtype(np.bool_))
def _optional_has_element_shape(ctx: InferContext):
    """True when the input is a non-empty optional (opset 18+: or a tensor or a sequence);
    False for an empty optional (and, opset 18+, an absent input). A bool scalar.

    Source: ONNX operator spec, OptionalHasElement-15/18/28.
    """
    if ctx.opset < 18:
        if not ctx.has_input(0):
            ctx.fail("input is required (opset < 18)", kind="InvalidInputs")
        if ctx.dtype(0) is not None and not isinstance(ctx.dtype(0), OptionalType) and ctx.symbolic:
            ctx.fail(f"input must be an optional, got {_type_text(ctx.dtype(0))} (opset < 18)", kind="TypeMismatch")
    return [()]


@lib.kernel("OptionalHasElement")
def _optional_has_element(inputs, outputs, ctx):
    has = bool(inputs) and inputs[0] is not None
    out = outputs[0]
    if out is None:
        return [np.array(has)]
    out[...] = has
    return None


# OptionalGetElement -----------------------------------------------------------------------

def _get_dtype(ctx: InferContext):
    t = ctx.dtype(0)
    return [t.elem if isinstance(t, OptionalType) else t]


@lib.op("OptionalGetElement", OPTIONAL_ACCESS_VERSIONS, infer_dtype=_get_dtype, aliases=((0, 0),))
def _optional_get_element_shape(ctx: InferContext):
    """The element of a non-empty optional (opset 18+: a tensor or a sequence is returned as
    it is); an empty optional is an error. The element is the input's (a view).

    Source: ONNX operator spec, OptionalGetElement-15/18/28.
    """
    t = ctx.dtype(0)
    if ctx.opset < 18 and t is not None and not isinstance(t, OptionalType) and ctx.symbolic:
        ctx.fail(f"input must be an optional, got {_type_text(t)} (opset < 18)", kind="TypeMismatch")
    if isinstance(t, OptionalType) or is_container(t):
        return [None]
    return [ctx.shape(0)]


@lib.kernel("OptionalGetElement")
def _optional_get_element(inputs, outputs, ctx):
    x = inputs[0]
    if x is None:
        raise ValueError("the optional input is empty: it has no element to get")
    return [x.view() if isinstance(x, np.ndarray) else x]
