"""What the differential test draws for each op: a recipe per (domain, op_type).

A recipe's ``draw(d, opset)`` returns an :class:`~draw.Example` for the op at that opset
(attributes and inputs as that version of the spec has them), mostly valid inputs and now and
then an invalid one (a size that does not divide, an axis out of range, shapes that do not
broadcast): an input one engine refuses, every engine must refuse. ``min_opset``: the oldest
version the recipe draws for (older versions of the op are not drawn); ``values=False``: only
shapes and dtypes are compared (random ops).

:data:`NOT_DRAWN` names every registered op without a recipe and why.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from hypothesis import strategies as st

from tests.ops.differential.draw import (
    FLOAT,
    Example,
    axes,
    axis,
    bools,
    broadcastable,
    dim,
    floats,
    int64,
    ints,
    maybe,
    one_of,
    permutation,
    positive,
    rng,
    scalar,
    shape,
    tensor,
)


@dataclass(frozen=True)
class Recipe:
    draw: Callable
    min_opset: int = 7
    values: bool = True
    rtol: float = 1e-4
    atol: float = 1e-5


RECIPES: dict = {}


def recipe(*ops, domain: str = "", **options):
    def register(fn):
        for op in ops:
            RECIPES[(domain, op)] = Recipe(fn, **options)
        return fn
    return register


def _fed_or_constant(d, *positions) -> tuple:
    """The positions (of shape-like inputs) given as initializers: sometimes each."""
    return tuple(p for p in positions if d.draw(st.booleans()))


# -- elementwise ------------------------------------------------------------------------------

UNARY_FLOAT = ("Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Erf", "Exp", "Floor",
               "Log", "Neg", "Reciprocal", "Relu", "Round", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign",
               "Sqrt", "Tan", "Tanh", "IsNaN", "Identity", "Mish", "HardSwish")


@recipe(*UNARY_FLOAT)
def _unary(d, opset):
    return Example([floats(d, shape(d, 0, 4), scale=2.0)])


@recipe("Det")
def _det(d, opset):
    n = dim(d, 0, 4)
    s = shape(d, 0, 2) + (n, n if maybe(d, 8) else n + 1)
    return Example([floats(d, s)])


@recipe("IsInf", min_opset=10)
def _isinf(d, opset):
    x = floats(d, shape(d, 0, 3), scale=2.0)
    x.flat[::3] = np.inf
    return Example([x], {"detect_negative": one_of(d, [0, 1]), "detect_positive": one_of(d, [0, 1])})


@recipe("Not")
def _not(d, opset):
    return Example([bools(d, shape(d, 0, 4))])


@recipe("BitwiseNot", min_opset=18)
def _bitwise_not(d, opset):
    return Example([ints(d, shape(d, 0, 3), -50, 50, one_of(d, [np.int32, np.int64, np.uint8]))])


def _activation(attrs_of):
    def draw(d, opset):
        return Example([floats(d, shape(d, 0, 4), scale=2.0)], attrs_of(d))
    return draw


recipe("Elu", "Celu", "ThresholdedRelu")(_activation(lambda d: {"alpha": one_of(d, [0.5, 1.0, 2.0])}))
recipe("LeakyRelu")(_activation(lambda d: {"alpha": one_of(d, [0.01, 0.2])}))
recipe("Selu")(_activation(lambda d: {"alpha": 1.5, "gamma": one_of(d, [1.0, 1.1])}))
recipe("HardSigmoid")(_activation(lambda d: {"alpha": one_of(d, [0.2, 0.5]), "beta": one_of(d, [0.5, 0.1])}))
recipe("Shrink", min_opset=9)(_activation(lambda d: {"lambd": one_of(d, [0.5, 1.0]), "bias": one_of(d, [0.0, 0.3])}))
recipe("Gelu", min_opset=20)(_activation(lambda d: {"approximate": one_of(d, ["none", "tanh"])}))
recipe("Swish", min_opset=24)(_activation(lambda d: {"alpha": one_of(d, [1.0, 1.5])}))


BINARY_FLOAT = ("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual")


@recipe(*BINARY_FLOAT)
def _binary(d, opset):
    a = shape(d, 0, 4)
    b = broadcastable(d, a)
    if d.draw(st.booleans()):
        a, b = b, a
    if d.draw(st.integers(0, 4)) == 0 and opset >= 14:
        return Example([ints(d, a, -5, 5), ints(d, b, 1, 5)])
    return Example([floats(d, a), positive(d, b) if d.draw(st.booleans()) else floats(d, b)])


@recipe("And", "Or", "Xor")
def _logical(d, opset):
    a = shape(d, 0, 4)
    return Example([bools(d, a), bools(d, broadcastable(d, a))])


@recipe("BitwiseAnd", "BitwiseOr", "BitwiseXor", min_opset=18)
def _bitwise(d, opset):
    a = shape(d, 0, 3)
    dt = one_of(d, [np.int32, np.int64, np.uint8])
    return Example([ints(d, a, 0, 100, dt), ints(d, broadcastable(d, a), 0, 100, dt)])


@recipe("BitShift", min_opset=11)
def _bitshift(d, opset):
    a = shape(d, 0, 3)
    dt = one_of(d, [np.uint8, np.uint32, np.uint64])
    return Example([ints(d, a, 0, 100, dt), ints(d, broadcastable(d, a), 0, 7, dt)],
                   {"direction": one_of(d, ["LEFT", "RIGHT"])})


@recipe("Mod", min_opset=10)
def _mod(d, opset):
    a = shape(d, 0, 3)
    b = broadcastable(d, a)
    if d.draw(st.booleans()):
        return Example([ints(d, a, -20, 20), ints(d, b, 1, 7) * one_of(d, [1, -1])], {"fmod": one_of(d, [0, 1])})
    return Example([floats(d, a, scale=5.0), positive(d, b)], {"fmod": 1})


@recipe("PRelu")
def _prelu(d, opset):
    x = shape(d, 1, 4)
    slope = broadcastable(d, x) if opset >= 7 else x
    return Example([floats(d, x), floats(d, slope)])


@recipe("Max", "Min", "Sum", "Mean", min_opset=8)
def _variadic(d, opset):
    base = shape(d, 0, 3)
    n = d.draw(st.integers(1, 3))
    return Example([floats(d, base if i == 0 else broadcastable(d, base)) for i in range(n)])


@recipe("Where", min_opset=9)
def _where(d, opset):
    base = shape(d, 0, 3)
    return Example([bools(d, broadcastable(d, base)), floats(d, base), floats(d, broadcastable(d, base))])


@recipe("Clip")
def _clip(d, opset):
    x = floats(d, shape(d, 0, 4), scale=2.0)
    lo, hi = one_of(d, [-1.0, -0.5]), one_of(d, [0.5, 1.0])
    if opset < 11:
        return Example([x], {"min": lo, "max": hi})
    bounds = [scalar(lo, FLOAT) if maybe(d) else None, scalar(hi, FLOAT) if maybe(d) else None]
    if d.draw(st.integers(0, 9)) == 0:
        bounds[0] = np.asarray([lo, lo], FLOAT)         # not a scalar: refused
    return Example([x] + bounds, constant=_fed_or_constant(d, 1, 2))


@recipe("Cast", min_opset=6)
def _cast(d, opset):
    src = one_of(d, [np.float32, np.float64, np.int64, np.int32, np.bool_, np.uint8])
    to = one_of(d, [1, 11, 7, 6, 9, 2, 10])     # float, double, int64, int32, bool, uint8, float16
    return Example([tensor(d, shape(d, 0, 3), src)], {"to": to})


@recipe("CastLike", min_opset=15)
def _castlike(d, opset):
    src = one_of(d, [np.float32, np.int64, np.int32, np.bool_])
    target = one_of(d, [np.float32, np.float64, np.int64, np.int32])
    return Example([tensor(d, shape(d, 0, 3), src), tensor(d, shape(d, 0, 1), target)])


# -- reductions -------------------------------------------------------------------------------

REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
          "ReduceLogSumExp", "ReduceSumSquare")
#: the version from which each reduction takes its axes as an input
AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce(op):
    def draw(d, opset):
        s = shape(d, 0, 4)
        x = positive(d, s) if op in ("ReduceLogSum",) else floats(d, s)
        attrs = {"keepdims": one_of(d, [0, 1])}
        chosen = axes(d, len(s)) if maybe(d) else None
        if opset >= AXES_INPUT_SINCE.get(op, 18):
            if d.draw(st.booleans()):
                attrs["noop_with_empty_axes"] = one_of(d, [0, 1])
            ax = None if chosen is None else int64(chosen)
            return Example([x, ax], attrs, constant=_fed_or_constant(d, 1))
        if chosen:
            attrs["axes"] = chosen
        return Example([x], attrs)
    return draw


for _op in REDUCE:
    recipe(_op, min_opset=11)(_reduce(_op))


@recipe("ArgMax", "ArgMin", min_opset=11)
def _arg(d, opset):
    s = shape(d, 0, 4)
    attrs = {"axis": axis(d, len(s)), "keepdims": one_of(d, [0, 1])}
    if opset >= 12:
        attrs["select_last_index"] = one_of(d, [0, 1])
    return Example([ints(d, s, 0, 3).astype(FLOAT)], attrs)


# -- shape ops ----------------------------------------------------------------------------------

def _reshape_target(d, s: tuple) -> list:
    """A shape with the same element count as ``s`` (merged or split dims, a -1 or a 0 now
    and then), or now and then one that does not fit."""
    count = int(np.prod(s)) if s else 1
    pick = d.draw(st.integers(0, 5))
    if pick == 0:
        return [count]
    if pick == 1 and s:
        target = list(s)
        target[d.draw(st.integers(0, len(s) - 1))] = -1
        return target
    if pick == 2 and s:
        target = list(s)
        target[d.draw(st.integers(0, len(s) - 1))] = 0
        return target
    if pick == 3:
        return [one_of(d, [1, 2, 3, 5]), -1]
    if pick == 4 and len(s) >= 2:
        return [s[0] * s[1]] + list(s[2:])
    return list(shape(d, 0, 3))


@recipe("Reshape", min_opset=5)
def _reshape(d, opset):
    s = shape(d, 0, 4)
    attrs = {"allowzero": one_of(d, [0, 1])} if opset >= 14 and d.draw(st.booleans()) else {}
    return Example([floats(d, s), int64(_reshape_target(d, s))], attrs, constant=_fed_or_constant(d, 1))


@recipe("Flatten", min_opset=9)
def _flatten(d, opset):
    s = shape(d, 0, 4)
    return Example([floats(d, s)], {"axis": axis(d, len(s) + 1)} if maybe(d) else {})


def _axes_form(d, opset, since, x, chosen, extra_attrs=None) -> Example:
    """``x`` and ``chosen`` axes as an attribute (before ``since``) or an input (None: absent)."""
    attrs = dict(extra_attrs or {})
    if opset >= since:
        return Example([x, None if chosen is None else int64(chosen)], attrs, constant=_fed_or_constant(d, 1))
    if chosen:
        attrs["axes"] = chosen
    return Example([x], attrs)


@recipe("Squeeze", min_opset=11)
def _squeeze(d, opset):
    s = shape(d, 0, 4, 0, 3)
    ones = [i for i, v in enumerate(s) if v == 1]
    chosen = None if not maybe(d) else (ones if maybe(d, 4) else axes(d, len(s), min_size=1))
    return _axes_form(d, opset, 13, floats(d, s), chosen)


@recipe("Unsqueeze", min_opset=11)
def _unsqueeze(d, opset):
    s = shape(d, 0, 3)
    chosen = axes(d, len(s) + d.draw(st.integers(1, 2)), min_size=1)
    return _axes_form(d, opset, 13, floats(d, s), chosen)


@recipe("Transpose")
def _transpose(d, opset):
    s = shape(d, 0, 4)
    attrs = {}
    if s and maybe(d):
        perm = permutation(d, len(s))
        if len(perm) > 1 and d.draw(st.integers(0, 9)) == 0:
            perm = perm[:-1]                 # too short: refused
        attrs["perm"] = perm
    return Example([floats(d, s)], attrs)


@recipe("Concat", min_opset=11)
def _concat(d, opset):
    s = shape(d, 1, 4)
    ax = axis(d, len(s))
    parts = []
    for _ in range(d.draw(st.integers(1, 3))):
        p = list(s)
        if -len(s) <= ax < len(s):
            p[ax] = dim(d)
        if d.draw(st.integers(0, 14)) == 0:
            p[0] += 1                        # another dim differs: refused (unless it is the axis)
        parts.append(floats(d, p))
    return Example(parts, {"axis": ax})


@recipe("Split", min_opset=11)
def _split(d, opset):
    s = shape(d, 1, 3)
    ax = axis(d, len(s))
    size = s[ax] if -len(s) <= ax < len(s) else 3
    x = floats(d, s)
    n = d.draw(st.integers(1, 3))
    pick = d.draw(st.integers(0, 2))
    if pick == 0 and opset >= 18:
        return Example([x], {"axis": ax, "num_outputs": n}, n_outputs=n)
    if pick == 1:
        parts = [int(v) for v in rng(d).multinomial(size, [1 / n] * n)] if size else [0] * n
        if d.draw(st.integers(0, 5)) == 0:
            parts[-1] += one_of(d, [1, -1])   # does not sum to the axis
        if opset >= 13:
            return Example([x, int64(parts)], {"axis": ax}, constant=_fed_or_constant(d, 1), n_outputs=n)
        return Example([x], {"axis": ax, "split": parts}, n_outputs=n)
    if opset >= 18:
        return Example([x], {"axis": ax, "num_outputs": n}, n_outputs=n)
    return Example([x], {"axis": ax}, n_outputs=n)


@recipe("Slice", min_opset=10)
def _slice(d, opset):
    s = shape(d, 1, 4)
    picked = axes(d, len(s), min_size=1)
    big = int(np.iinfo(np.int64).max)
    starts = [one_of(d, [0, 1, -1, 2, -3, -big, 5]) for _ in picked]
    ends = [one_of(d, [1, 2, -1, big, -big, 4, 0]) for _ in picked]
    steps = [one_of(d, [1, 1, 2, -1, -2, 3]) for _ in picked]
    inputs = [floats(d, s), int64(starts), int64(ends)]
    if maybe(d, 4):
        inputs.append(int64(picked))
        if maybe(d, 4):
            inputs.append(int64(steps))
    return Example(inputs, constant=_fed_or_constant(d, *range(1, len(inputs))))


@recipe("Gather")
def _gather(d, opset):
    s = shape(d, 1, 3)
    ax = axis(d, len(s))
    size = s[ax] if -len(s) <= ax < len(s) else 1
    idx = ints(d, shape(d, 0, 2), -size, size - 1 if d.draw(st.integers(0, 9)) else size)
    return Example([floats(d, s), idx], {"axis": ax}, constant=_fed_or_constant(d, 1))


@recipe("GatherElements", min_opset=11)
def _gather_elements(d, opset):
    s = shape(d, 1, 3)
    ax = axis(d, len(s))
    size = s[ax] if -len(s) <= ax < len(s) else 1
    ishape = tuple(dim(d, 0, v) if d.draw(st.booleans()) else v for v in s)
    if d.draw(st.integers(0, 9)) == 0:
        ishape = ishape[:-1]                # rank differs: refused
    return Example([floats(d, s), ints(d, ishape, -size, size - 1)], {"axis": ax})


@recipe("GatherND", min_opset=12)
def _gather_nd(d, opset):
    b = d.draw(st.integers(0, 1))
    s = shape(d, b + 1, 4)
    k = d.draw(st.integers(1, len(s) - b))
    batch = s[:b] if d.draw(st.integers(0, 9)) else tuple(v + 1 for v in s[:b])
    ishape = batch + shape(d, 0, 2) + (k,)
    hi = min(s[b:b + k]) if s[b:b + k] else 1
    return Example([floats(d, s), ints(d, ishape, -hi, hi - 1)], {"batch_dims": b})


@recipe("ScatterND", min_opset=11)
def _scatter_nd(d, opset):
    s = shape(d, 1, 3, 1)
    k = d.draw(st.integers(1, len(s)))
    lead = shape(d, 0, 1, 1, 1)       # one update per index tuple (no duplicates)
    idx = ints(d, lead + (k,), 0, min(s[:k]) - 1)
    upd = lead + s[k:] if d.draw(st.integers(0, 9)) else lead + s[k:] + (2,)
    attrs = {"reduction": one_of(d, ["none", "add", "mul"])} if opset >= 16 else {}
    return Example([floats(d, s), idx, floats(d, upd)], attrs)


@recipe("ScatterElements", min_opset=11)
def _scatter_elements(d, opset):
    s = shape(d, 1, 3, 1)
    ax = axis(d, len(s), out_of_range=False)
    ishape = tuple(1 for _ in s)
    idx = ints(d, ishape, -s[ax], s[ax] - 1)
    upd = ishape if d.draw(st.integers(0, 9)) else ishape[:-1] + (2,)
    attrs = {"axis": ax}
    if opset >= 16:
        attrs["reduction"] = one_of(d, ["none", "add", "mul"] + (["max", "min"] if opset >= 18 else []))
    return Example([floats(d, s), idx, floats(d, upd)], attrs)


@recipe("Expand", min_opset=8)
def _expand(d, opset):
    s = shape(d, 0, 3)
    target = [v if v != 1 else dim(d) for v in s]
    target = [1] * d.draw(st.integers(0, 1)) + target
    if target and d.draw(st.integers(0, 9)) == 0:
        target[-1] += 2
    return Example([floats(d, s), int64(target)], constant=_fed_or_constant(d, 1))


@recipe("Tile", min_opset=6)
def _tile(d, opset):
    s = shape(d, 1, 3)
    reps = [one_of(d, [0, 1, 2, 3]) for _ in s]
    if d.draw(st.integers(0, 9)) == 0:
        reps = reps + [2]                    # wrong length: refused
    return Example([floats(d, s), int64(reps)], constant=_fed_or_constant(d, 1))


@recipe("Pad", min_opset=11)
def _pad(d, opset):
    s = shape(d, 1, 3)
    mode = one_of(d, ["constant", "constant", "reflect", "edge"] + (["wrap"] if opset >= 19 else []))
    rank = len(s)
    picked = list(range(rank))
    if opset >= 18 and d.draw(st.booleans()):
        picked = axes(d, rank, min_size=1)
    pads = [one_of(d, [0, 0, 1, 2, -1]) for _ in range(2 * len(picked))]
    inputs = [floats(d, s), int64(pads)]
    if mode == "constant" and maybe(d):
        inputs.append(scalar(1.5, FLOAT))
    if picked != list(range(rank)):
        inputs += [None] * (3 - len(inputs)) + [int64(picked)]
    return Example(inputs, {"mode": mode}, constant=_fed_or_constant(d, *range(1, len(inputs))))


@recipe("DepthToSpace", "SpaceToDepth", min_opset=11)
def _depth_space(d, opset):
    b = one_of(d, [1, 2, 3])
    n, c, h, w = dim(d, 1, 2), dim(d, 1, 5) * one_of(d, [1, b * b, b]), dim(d, 1, 3), dim(d, 1, 3)
    return Example([floats(d, (n, c, h * one_of(d, [1, b]), w * one_of(d, [1, b])))],
                   {"blocksize": b} | ({"mode": one_of(d, ["DCR", "CRD"])} if d.draw(st.booleans()) else {}))


@recipe("Range", min_opset=11)
def _range(d, opset):
    dt = one_of(d, [np.float32, np.int64, np.int32])
    start, limit = one_of(d, [0, 1, -3, 5]), one_of(d, [0, 4, 7, -2])
    delta = one_of(d, [1, 2, -1, 3]) if dt != np.float32 else one_of(d, [0.5, 1.0, -1.5])
    return Example([scalar(start, dt), scalar(limit, dt), scalar(delta, dt)], constant=_fed_or_constant(d, 0, 1, 2))


@recipe("ConstantOfShape", min_opset=9)
def _constant_of_shape(d, opset):
    from onnx import numpy_helper
    target = list(shape(d, 0, 3))
    if target and d.draw(st.integers(0, 9)) == 0:
        target[0] = -1
    attrs = {"value": numpy_helper.from_array(np.asarray([2.5], FLOAT))} if maybe(d) else {}
    return Example([int64(target)], attrs, constant=_fed_or_constant(d, 0))


@recipe("Shape", min_opset=1)
def _shape(d, opset):
    s = shape(d, 0, 4)
    attrs = {}
    if opset >= 15 and d.draw(st.booleans()):
        attrs = {"start": one_of(d, [0, 1, -1, -5, 6])} | ({"end": one_of(d, [-1, 2, 9])} if maybe(d) else {})
    return Example([floats(d, s)], attrs)


@recipe("Size")
def _size(d, opset):
    return Example([floats(d, shape(d, 0, 4))])


@recipe("OneHot", min_opset=11)
def _one_hot(d, opset):
    depth = one_of(d, [1, 3, 5])
    idx = ints(d, shape(d, 0, 2), -depth - 1, depth)
    values = np.asarray([0.0, 2.0] if d.draw(st.integers(0, 9)) else [1.0, 2.0, 3.0], FLOAT)
    return Example([idx, scalar(depth, np.int64), values], {"axis": axis(d, idx.ndim + 1)},
                   constant=_fed_or_constant(d, 1, 2))


@recipe("TopK", min_opset=10)
def _topk(d, opset):
    s = shape(d, 1, 3)
    ax = axis(d, len(s))
    size = s[ax] if -len(s) <= ax < len(s) else 1
    k = one_of(d, [0, 1, size, size + 1]) if size else 0
    x = rng(d).permutation(max(1, int(np.prod(s)))).astype(FLOAT)[:int(np.prod(s))].reshape(s)  # no ties
    attrs = {"axis": ax}
    if opset >= 11:
        attrs |= {"largest": one_of(d, [0, 1]), "sorted": 1}
    return Example([x, int64([k])], attrs, constant=_fed_or_constant(d, 1), n_outputs=2)


@recipe("CumSum", min_opset=11)
@recipe("CumProd", min_opset=26)
def _cumulative(d, opset):
    s = shape(d, 1, 3)
    return Example([floats(d, s), scalar(axis(d, len(s)), np.int64)],
                   {"exclusive": one_of(d, [0, 1]), "reverse": one_of(d, [0, 1])}, constant=_fed_or_constant(d, 1))


@recipe("Trilu", min_opset=14)
def _trilu(d, opset):
    s = shape(d, 2, 4)
    inputs = [floats(d, s)] + ([scalar(one_of(d, [-2, -1, 0, 1, 3]), np.int64)] if maybe(d) else [])
    return Example(inputs, {"upper": one_of(d, [0, 1])}, constant=_fed_or_constant(d, 1))


@recipe("Compress", min_opset=11)
def _compress(d, opset):
    s = shape(d, 1, 3)
    attrs = {"axis": axis(d, len(s))} if maybe(d) else {}
    n = s[attrs["axis"]] if attrs and -len(s) <= attrs["axis"] < len(s) else int(np.prod(s))
    return Example([floats(d, s), bools(d, (one_of(d, [n, n, max(0, n - 1), n + 1, n + 2]),))], attrs,
                   constant=_fed_or_constant(d, 1))


@recipe("NonZero", min_opset=9)
def _nonzero(d, opset):
    return Example([ints(d, shape(d, 0, 3), 0, 1).astype(FLOAT)])


@recipe("EyeLike", min_opset=9)
def _eyelike(d, opset):
    s = (dim(d), dim(d))
    return Example([floats(d, s)], {"k": one_of(d, [0, 1, -1, 5])})


@recipe("ReverseSequence", min_opset=10)
def _reverse_sequence(d, opset):
    t, b = dim(d, 1), dim(d, 1)
    time_axis = one_of(d, [0, 1])
    s = (t, b) if time_axis == 0 else (b, t)
    lens = ints(d, (b if d.draw(st.integers(0, 9)) else b + 1,), 0, t)
    return Example([floats(d, s + shape(d, 0, 1)), lens], {"time_axis": time_axis, "batch_axis": 1 - time_axis})


@recipe("Unique", min_opset=11)
def _unique(d, opset):
    attrs = {"sorted": 1}
    if maybe(d):
        # (onnxruntime 1.32 aborts the process on Unique along a non-empty axis of a tensor with an
        # empty other axis, (2, 0) along 0: such inputs are not drawn)
        s = shape(d, 1, 3, 1)
        attrs["axis"] = axis(d, len(s))
    else:
        s = shape(d, 1, 3)
    return Example([ints(d, s, 0, 3).astype(FLOAT)], attrs, n_outputs=4)


@recipe("Einsum", min_opset=12)
def _einsum(d, opset):
    i, j, k = dim(d, 1), dim(d, 1), dim(d, 1)
    eq, shapes = one_of(d, [("ij,jk->ik", ((i, j), (j, k))), ("ij->ji", ((i, j),)), ("ij,ij->i", ((i, j), (i, j))),
                            ("bij,bjk->bik", ((2, i, j), (2, j, k))), ("ii->i", ((i, i),)), ("i,j->ij", ((i,), (j,))),
                            ("ij,jk->ik", ((i, j), (j + 1, k)))])
    return Example([floats(d, s) for s in shapes], {"equation": eq})


# -- linear algebra and neural network ops -------------------------------------------------------

@recipe("MatMul", min_opset=9)
def _matmul(d, opset):
    m, k, n = dim(d), dim(d), dim(d)
    batch = shape(d, 0, 2)
    a = batch + (m, k) if maybe(d, 5) else (k,)
    b = broadcastable(d, batch) + (k if d.draw(st.integers(0, 11)) else k + 1, n) if maybe(d, 5) else (k,)
    return Example([floats(d, a), floats(d, b)], constant=_fed_or_constant(d, 1))


@recipe("Gemm", min_opset=11)
def _gemm(d, opset):
    m, k, n = dim(d), dim(d), dim(d)
    ta, tb = one_of(d, [0, 1]), one_of(d, [0, 1])
    a = (k, m) if ta else (m, k)
    b = (n, k) if tb else (k, n)
    inputs = [floats(d, a), floats(d, b)]
    if maybe(d):
        inputs.append(floats(d, one_of(d, [(m, n), (n,), (1, n), (m, 1), (), (n + 1,)])))
    attrs = {"transA": ta, "transB": tb, "alpha": one_of(d, [1.0, 0.5]), "beta": one_of(d, [1.0, 2.0])}
    return Example(inputs, attrs, constant=_fed_or_constant(d, *range(1, len(inputs))))


def _spatial(d, rank: int, kernel: tuple, conv: bool) -> dict:
    attrs: dict = {"kernel_shape": list(kernel)} if (not conv or maybe(d)) else {}
    if d.draw(st.booleans()):
        attrs["strides"] = [one_of(d, [1, 2, 3]) for _ in range(rank)]
    if d.draw(st.booleans()) and (conv or True):
        attrs["dilations"] = [one_of(d, [1, 2]) for _ in range(rank)]
    pad_kind = d.draw(st.integers(0, 3))
    if pad_kind == 1:
        attrs["pads"] = [one_of(d, [0, 1, 2]) for _ in range(2 * rank)]
    elif pad_kind == 2:
        attrs["auto_pad"] = one_of(d, ["SAME_UPPER", "SAME_LOWER", "VALID"])
    return attrs


@recipe("Conv", min_opset=11, rtol=1e-3, atol=1e-4)
def _conv(d, opset):
    rank = one_of(d, [1, 2])
    group = one_of(d, [1, 1, 2])
    cin, cout = dim(d, 1, 4) * group, dim(d, 1, 3) * group
    if d.draw(st.integers(0, 14)) == 0:
        cin += 1                               # channels not divisible by group: refused
    kernel = tuple(dim(d, 1, 3) for _ in range(rank))
    x = (dim(d, 0, 2), cin) + tuple(dim(d, 0, 7) for _ in range(rank))
    w = (cout, cin // group) + kernel
    attrs = _spatial(d, rank, kernel, True) | {"group": group}
    inputs = [floats(d, x), floats(d, w)] + ([floats(d, (cout,))] if maybe(d) else [])
    return Example(inputs, attrs, constant=_fed_or_constant(d, *range(1, len(inputs))))


@recipe("ConvTranspose", min_opset=11)
def _conv_transpose(d, opset):
    rank = one_of(d, [1, 2])
    group = one_of(d, [1, 1, 2])
    cin, cout = dim(d, 1, 3) * group, dim(d, 1, 3)
    kernel = tuple(dim(d, 1, 3) for _ in range(rank))
    x = (dim(d, 0, 2), cin) + tuple(dim(d, 1, 5) for _ in range(rank))
    attrs = _spatial(d, rank, kernel, True) | {"group": group}
    if attrs.get("auto_pad") in ("SAME_UPPER", "SAME_LOWER") or attrs.get("auto_pad") == "VALID":
        attrs.pop("auto_pad")
    strides = attrs.get("strides", [1] * rank)
    if d.draw(st.integers(0, 3)) == 0:
        attrs["output_padding"] = [one_of(d, [0, 1]) % s for s in strides]
    inputs = [floats(d, x), floats(d, (cin, cout) + kernel)] + ([floats(d, (cout * group,))] if maybe(d) else [])
    return Example(inputs, attrs, constant=_fed_or_constant(d, *range(1, len(inputs))))


def _pool(op):
    def draw(d, opset):
        rank = one_of(d, [1, 2])
        kernel = tuple(dim(d, 1, 3) for _ in range(rank))
        x = (dim(d, 0, 2), dim(d, 1, 3)) + tuple(dim(d, 1, 7) for _ in range(rank))
        attrs = _spatial(d, rank, kernel, False)
        if op == "AveragePool" or (op == "MaxPool" and opset < 10):
            attrs.pop("dilations", None) if opset < 19 or op == "MaxPool" else None
        if op != "LpPool" and opset >= 10 and d.draw(st.booleans()):
            attrs["ceil_mode"] = 1
        if op == "AveragePool" and d.draw(st.booleans()):
            attrs["count_include_pad"] = 1
        if op == "LpPool":
            attrs["p"] = one_of(d, [1, 2])
            if opset < 18:
                attrs.pop("dilations", None)
                attrs.pop("ceil_mode", None)
        pads = attrs.get("pads")
        if pads and any(p >= k for p, k in zip(pads, kernel + kernel)) and d.draw(st.integers(0, 3)):
            attrs["pads"] = [min(p, k - 1) for p, k in zip(pads, kernel + kernel)]
        return Example([floats(d, x)], attrs, n_outputs=1)
    return draw


recipe("MaxPool", min_opset=8)(_pool("MaxPool"))
recipe("AveragePool", min_opset=7)(_pool("AveragePool"))
recipe("LpPool", min_opset=11)(_pool("LpPool"))


@recipe("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(d, opset):
    return Example([floats(d, (dim(d, 1, 2), dim(d, 1, 3)) + shape(d, 0, 2, 0))])


@recipe("BatchNormalization", min_opset=9)
def _batchnorm(d, opset):
    s = (dim(d, 0, 2), dim(d, 1, 4)) + shape(d, 0, 2)
    c = s[1] if d.draw(st.integers(0, 9)) else s[1] + 1
    return Example([floats(d, s), floats(d, (c,)), floats(d, (c,)), floats(d, (c,)), positive(d, (c,))],
                   {"epsilon": 1e-3}, constant=_fed_or_constant(d, 1, 2, 3, 4))


@recipe("InstanceNormalization", min_opset=6)
def _instancenorm(d, opset):
    s = (dim(d, 1, 2), dim(d, 1, 4)) + shape(d, 1, 2, 1)
    c = s[1] if d.draw(st.integers(0, 9)) else s[1] + 1
    return Example([floats(d, s), floats(d, (c,)), floats(d, (c,))], {"epsilon": 1e-3},
                   constant=_fed_or_constant(d, 1, 2))


@recipe("LayerNormalization", min_opset=17)
def _layernorm(d, opset):
    s = shape(d, 1, 3, 1)
    ax = axis(d, len(s))
    norm = s[ax:] if -len(s) <= ax < len(s) else (1,)
    scale = norm if d.draw(st.integers(0, 9)) else tuple(v + 1 for v in norm)
    inputs = [floats(d, s), floats(d, scale)] + ([floats(d, scale)] if maybe(d) else [])
    return Example(inputs, {"axis": ax, "epsilon": 1e-3}, constant=_fed_or_constant(d, *range(1, len(inputs))),
                   n_outputs=1)


@recipe("GroupNormalization", min_opset=21)
def _groupnorm(d, opset):
    groups = one_of(d, [1, 2, 3])
    c = groups * dim(d, 1, 3) + (0 if d.draw(st.integers(0, 9)) else 1)
    s = (dim(d, 1, 2), c) + shape(d, 1, 2, 1)
    return Example([floats(d, s), floats(d, (c,)), floats(d, (c,))], {"num_groups": groups, "epsilon": 1e-3},
                   constant=_fed_or_constant(d, 1, 2))


@recipe("RMSNormalization", min_opset=23)
def _rmsnorm(d, opset):
    s = shape(d, 1, 3, 1)
    ax = axis(d, len(s))
    norm = s[ax:] if -len(s) <= ax < len(s) else (1,)
    return Example([floats(d, s), floats(d, norm)], {"axis": ax, "epsilon": 1e-3}, constant=_fed_or_constant(d, 1))


@recipe("Softmax", "LogSoftmax", "Hardmax")
def _softmax(d, opset):
    s = shape(d, 1, 4)
    return Example([floats(d, s)], {"axis": axis(d, len(s))} if maybe(d) else {})


@recipe("LpNormalization")
def _lpnorm(d, opset):
    s = shape(d, 1, 3)
    return Example([floats(d, s)], {"axis": axis(d, len(s)), "p": one_of(d, [1, 2])})


@recipe("MeanVarianceNormalization", min_opset=9)
def _mvn(d, opset):
    s = (dim(d, 1, 2), dim(d, 1, 3)) + shape(d, 0, 2, 1)
    return Example([floats(d, s)], {"axes": sorted(set(a % len(s) for a in axes(d, len(s), 1)))} if maybe(d) else {})


@recipe("LRN")
def _lrn(d, opset):
    s = (dim(d, 1, 2), dim(d, 1, 5)) + shape(d, 0, 2, 1)
    return Example([floats(d, s)], {"size": one_of(d, [1, 3, 5]), "alpha": 1e-3, "beta": 0.75, "bias": 1.0})


@recipe("Dropout", min_opset=12)
def _dropout(d, opset):
    inputs = [floats(d, shape(d, 0, 3))]
    if maybe(d):
        inputs.append(scalar(one_of(d, [0.0, 0.5]), FLOAT))
    return Example(inputs, n_outputs=one_of(d, [1, 2]), constant=_fed_or_constant(d, *range(1, len(inputs))))


# -- quantization -------------------------------------------------------------------------------

@recipe("QuantizeLinear", min_opset=13)
def _quantize(d, opset):
    s = shape(d, 1, 3)
    per_axis = d.draw(st.booleans())
    ax = axis(d, len(s), out_of_range=False)
    n = s[ax] if d.draw(st.integers(0, 9)) else s[ax] + 1
    zp_type = one_of(d, [np.uint8, np.int8])
    return Example([floats(d, s, scale=5.0), positive(d, (n,) if per_axis else ()),
                    ints(d, (n,) if per_axis else (), 0, 10, zp_type)], {"axis": ax} if per_axis else {},
                   constant=_fed_or_constant(d, 1, 2))


@recipe("DequantizeLinear", min_opset=13)
def _dequantize(d, opset):
    s = shape(d, 1, 3)
    per_axis = d.draw(st.booleans())
    ax = axis(d, len(s), out_of_range=False)
    n = s[ax] if d.draw(st.integers(0, 9)) else s[ax] + 1
    zp_type = one_of(d, [np.uint8, np.int8])
    return Example([ints(d, s, 0, 100, zp_type), positive(d, (n,) if per_axis else ()),
                    ints(d, (n,) if per_axis else (), 0, 10, zp_type)], {"axis": ax} if per_axis else {},
                   constant=_fed_or_constant(d, 1, 2))


@recipe("DynamicQuantizeLinear", min_opset=11)
def _dynamic_quantize(d, opset):
    return Example([floats(d, shape(d, 0, 3))], n_outputs=3)


# -- random (shapes and dtypes only) -------------------------------------------------------------

@recipe("RandomNormalLike", "RandomUniformLike", values=False)
def _random_like(d, opset):
    return Example([floats(d, shape(d, 0, 3))], {"seed": 1.0})


@recipe("RandomNormal", "RandomUniform", values=False)
def _random(d, opset):
    return Example([], {"shape": list(shape(d, 1, 3)), "seed": 1.0})


@recipe("Bernoulli", min_opset=15, values=False)
def _bernoulli(d, opset):
    return Example([(rng(d).random(shape(d, 0, 3))).astype(FLOAT)], {"seed": 1.0})


# -- windows -------------------------------------------------------------------------------------

@recipe("HannWindow", "HammingWindow", "BlackmanWindow", min_opset=17)
def _window(d, opset):
    return Example([scalar(one_of(d, [0, 1, 2, 5, 8]), np.int64)], {"periodic": one_of(d, [0, 1])},
                   constant=_fed_or_constant(d, 0))


# -- more tensor ops -----------------------------------------------------------------------------

@recipe("CenterCropPad", min_opset=18)
def _center_crop_pad(d, opset):
    s = shape(d, 1, 3)
    attrs = {}
    picked = list(range(len(s)))
    if d.draw(st.booleans()):
        picked = axes(d, len(s), min_size=1)
        attrs["axes"] = picked
    target = [dim(d) for _ in picked]
    if d.draw(st.integers(0, 9)) == 0:
        target.append(2)                      # one entry too many: refused
    return Example([floats(d, s), int64(target)], attrs, constant=_fed_or_constant(d, 1))


@recipe("Scatter", min_opset=9)
def _scatter(d, opset):
    s = shape(d, 1, 3, 1)
    ax = axis(d, len(s), out_of_range=False)
    ishape = tuple(1 for _ in s)
    return Example([floats(d, s), ints(d, ishape, -s[ax], s[ax] - 1), floats(d, ishape)], {"axis": ax})


@recipe("MatMulInteger", min_opset=10)
def _matmul_integer(d, opset):
    m, k, n = dim(d), dim(d), dim(d)
    a_type, b_type = one_of(d, [np.uint8, np.int8]), one_of(d, [np.uint8, np.int8])
    inputs = [ints(d, (m, k), 0, 20, a_type), ints(d, (k if d.draw(st.integers(0, 11)) else k + 1, n), 0, 20, b_type)]
    if maybe(d):
        inputs += [ints(d, (), 0, 5, a_type), ints(d, one_of(d, [(), (n,)]), 0, 5, b_type)]
    return Example(inputs, constant=_fed_or_constant(d, 1))


@recipe("ConvInteger", min_opset=10)
def _conv_integer(d, opset):
    kernel = (dim(d, 1, 3),)
    cin, cout = dim(d, 1, 3), dim(d, 1, 3)
    inputs = [ints(d, (dim(d, 1, 2), cin, dim(d, 1, 7)), 0, 20, np.uint8),
              ints(d, (cout, cin) + kernel, 0, 20, np.uint8)]
    if maybe(d):
        inputs += [ints(d, (), 0, 5, np.uint8), ints(d, (), 0, 5, np.uint8)]
    return Example(inputs, _spatial(d, 1, kernel, True), constant=_fed_or_constant(d, 1))


@recipe("Upsample", min_opset=9)
def _upsample(d, opset):
    s = (dim(d, 1, 2), dim(d, 1, 2), dim(d, 1, 4), dim(d, 1, 4))
    scales = np.asarray([1.0, 1.0, one_of(d, [1.0, 2.0, 1.5]), one_of(d, [1.0, 2.0, 3.0])], FLOAT)
    return Example([floats(d, s), scales], {"mode": one_of(d, ["nearest", "linear"])}, constant=(1,))


@recipe("Resize", min_opset=11)
def _resize(d, opset):
    s = (dim(d, 1, 2), dim(d, 1, 2), dim(d, 1, 5), dim(d, 1, 5))
    mode = one_of(d, ["nearest", "linear", "cubic"])
    attrs = {"mode": mode, "coordinate_transformation_mode": one_of(d, ["half_pixel", "asymmetric", "align_corners",
                                                                        "pytorch_half_pixel"])}
    if mode == "nearest":
        attrs["nearest_mode"] = one_of(d, ["round_prefer_floor", "floor", "ceil"])
    roi = np.zeros((0,), FLOAT) if opset < 13 else None
    if d.draw(st.booleans()):
        scales = np.asarray([1.0, 1.0, one_of(d, [0.5, 1.0, 2.0, 1.5]), one_of(d, [1.0, 2.0, 0.6])], FLOAT)
        return Example([floats(d, s), roi, scales], attrs, constant=(1, 2) if roi is not None else (2,))
    sizes = int64([s[0], s[1], dim(d, 1, 7), dim(d, 1, 7)])
    return Example([floats(d, s), roi, np.zeros((0,), FLOAT) if opset < 13 else None, sizes], attrs,
                   constant=tuple(i for i in (1, 2, 3) if opset < 13 or i == 3))


def _rnn(op):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]

    def draw(d, opset):
        seq, batch, inp, hidden = dim(d, 1, 4), dim(d, 1, 3), dim(d, 1, 4), dim(d, 1, 3)
        direction = one_of(d, ["forward", "reverse", "bidirectional"])
        nd = 2 if direction == "bidirectional" else 1
        w = floats(d, (nd, gates * hidden, inp), scale=0.5)
        r = floats(d, (nd, gates * hidden, hidden), scale=0.5)
        inputs = [floats(d, (seq, batch, inp)), w, r]
        if maybe(d):
            inputs.append(floats(d, (nd, 2 * gates * hidden), scale=0.5))
            if maybe(d):
                inputs.append(ints(d, (batch,), 1, seq, np.int32))
        attrs = {"hidden_size": hidden if d.draw(st.integers(0, 9)) else hidden + 1, "direction": direction}
        return Example(inputs, attrs, constant=_fed_or_constant(d, 1, 2), n_outputs=3 if op == "LSTM" else 2)
    return draw


for _op in ("RNN", "GRU", "LSTM"):
    recipe(_op, min_opset=14, rtol=1e-3, atol=1e-4)(_rnn(_op))


@recipe("NonMaxSuppression", min_opset=11)
def _nms(d, opset):
    batch, classes, boxes = dim(d, 1, 2), dim(d, 1, 2), dim(d, 0, 5)
    corners = rng(d).random((batch, boxes, 2)).astype(FLOAT)
    sizes = rng(d).random((batch, boxes, 2)).astype(FLOAT) * 0.5 + 0.1
    inputs = [np.concatenate([corners, corners + sizes], axis=2), rng(d).random((batch, classes, boxes)).astype(FLOAT)]
    if maybe(d):
        inputs += [int64([one_of(d, [0, 1, 3])]), np.asarray([one_of(d, [0.3, 0.5])], FLOAT),
                   np.asarray([one_of(d, [0.0, 0.2])], FLOAT)]
    return Example(inputs, constant=_fed_or_constant(d, *range(2, len(inputs))))


@recipe("MaxUnpool", min_opset=9)
def _max_unpool(d, opset):
    k = dim(d, 1, 3)
    n, c, h = dim(d, 1, 2), dim(d, 1, 2), dim(d, 1, 3)
    idx = (np.arange(n * c * h).reshape(n, c, h) % max(1, h * k)).astype(np.int64)
    return Example([floats(d, (n, c, h)), idx], {"kernel_shape": [k], "strides": [k]})


@recipe("AffineGrid", min_opset=20)
def _affine_grid(d, opset):
    n, h, w = dim(d, 1, 2), dim(d, 1, 4), dim(d, 1, 4)
    theta = floats(d, (n if d.draw(st.integers(0, 9)) else n + 1, 2, 3))
    return Example([theta, int64([n, 1, h, w])], {"align_corners": one_of(d, [0, 1])}, constant=_fed_or_constant(d, 1))


@recipe("GridSample", min_opset=16)
def _grid_sample(d, opset):
    n, c, h, w = dim(d, 1, 2), dim(d, 1, 2), dim(d, 1, 4), dim(d, 1, 4)
    grid = (rng(d).random((n, dim(d, 1, 3), dim(d, 1, 3), 2)) * 2.2 - 1.1).astype(FLOAT)
    modes = ["bilinear", "nearest", "bicubic"] if opset < 20 else ["linear", "nearest", "cubic"]
    return Example([floats(d, (n, c, h, w)), grid],
                   {"mode": one_of(d, modes), "padding_mode": one_of(d, ["zeros", "border", "reflection"]),
                    "align_corners": one_of(d, [0, 1])})


@recipe("RoiAlign", min_opset=16)
def _roi_align(d, opset):
    n, c, h, w = dim(d, 1, 2), dim(d, 1, 2), dim(d, 2, 5), dim(d, 2, 5)
    rois = dim(d, 0, 3)
    xy = rng(d).random((rois, 2)) * 2
    boxes = np.concatenate([xy, xy + rng(d).random((rois, 2)) * 2 + 0.5], axis=1).astype(FLOAT)
    return Example([floats(d, (n, c, h, w)), boxes, ints(d, (rois,), 0, n - 1)],
                   {"output_height": dim(d, 1, 3), "output_width": dim(d, 1, 3), "sampling_ratio": one_of(d, [0, 2]),
                    "mode": one_of(d, ["avg", "max"])})


@recipe("DFT", min_opset=17, rtol=1e-3, atol=1e-4)
def _dft(d, opset):
    batch, n = dim(d, 1, 2), dim(d, 1, 7)
    x = floats(d, (batch, n, one_of(d, [1, 2])))
    attrs = {"onesided": one_of(d, [0, 1]) if x.shape[-1] == 1 else 0, "inverse": one_of(d, [0, 1])}
    if attrs["onesided"]:
        attrs["inverse"] = 0
    if opset >= 20:
        return Example([x, None, scalar(1, np.int64)], attrs, constant=(2,))
    return Example([x], attrs | {"axis": 1})


@recipe("STFT", min_opset=17, rtol=1e-3, atol=1e-4)
def _stft(d, opset):
    length = dim(d, 2, 7) + 4
    frame = one_of(d, [2, 3, 4])
    inputs = [floats(d, (1, length, 1)), scalar(one_of(d, [1, 2]), np.int64), None, scalar(frame, np.int64)]
    return Example(inputs, {"onesided": one_of(d, [0, 1])}, constant=(1, 3))


@recipe("MelWeightMatrix", min_opset=17, rtol=1e-3, atol=1e-4)
def _mel(d, opset):
    return Example([scalar(one_of(d, [1, 2, 4]), np.int64), scalar(one_of(d, [8, 16]), np.int64),
                    scalar(8000, np.int64), scalar(0.0, FLOAT), scalar(4000.0, FLOAT)], constant=(0, 1, 2, 3, 4))


def _loss(n_outputs: bool):
    def draw(d, opset):
        n, c = dim(d, 1, 3), dim(d, 1, 4)
        extra = shape(d, 0, 1, 1)
        inputs = [floats(d, (n, c) + extra), ints(d, (n,) + extra, 0, c - 1)]
        if maybe(d):
            inputs.append(positive(d, (c,)))
        attrs = {"reduction": one_of(d, ["none", "sum", "mean"])}
        if d.draw(st.booleans()):
            attrs["ignore_index"] = 0
        return Example(inputs, attrs, n_outputs=one_of(d, [1, 2]) if n_outputs else 1)
    return draw


recipe("NegativeLogLikelihoodLoss", min_opset=13)(_loss(False))
recipe("SoftmaxCrossEntropyLoss", min_opset=13)(_loss(True))   # (its log_prob output too)


@recipe("QLinearMatMul", min_opset=10)
def _qlinear_matmul(d, opset):
    m, k, n = dim(d), dim(d), dim(d)
    q = one_of(d, [np.uint8, np.int8])
    return Example([ints(d, (m, k), 0, 50, q), scalar(0.1, FLOAT), scalar(2, q), ints(d, (k, n), 0, 50, q),
                    scalar(0.05, FLOAT), scalar(1, q), scalar(0.2, FLOAT), scalar(3, q)], constant=(1, 2, 4, 5, 6, 7))


@recipe("QLinearConv", min_opset=10)
def _qlinear_conv(d, opset):
    kernel = (dim(d, 1, 3),)
    cin, cout = dim(d, 1, 3), dim(d, 1, 3)
    return Example([ints(d, (1, cin, dim(d, 1, 7)), 0, 50, np.uint8), scalar(0.1, FLOAT), scalar(2, np.uint8),
                    ints(d, (cout, cin) + kernel, 0, 50, np.uint8), scalar(0.05, FLOAT), scalar(1, np.uint8),
                    scalar(0.2, FLOAT), scalar(3, np.uint8)], _spatial(d, 1, kernel, True),
                   constant=(1, 2, 3, 4, 5, 6, 7))


@recipe("Col2Im", min_opset=18)
def _col2im(d, opset):
    block = [dim(d, 1, 2), dim(d, 1, 2)]
    image = [dim(d, 1, 4) + block[0] - 1, dim(d, 1, 4) + block[1] - 1]
    count = (image[0] - block[0] + 1) * (image[1] - block[1] + 1)
    c = dim(d, 1, 2)
    cols = count if d.draw(st.integers(0, 9)) else count + 1
    return Example([floats(d, (1, c * block[0] * block[1], cols)), int64(image), int64(block)],
                   constant=_fed_or_constant(d, 1, 2))


# -- newer ai.onnx ops -------------------------------------------------------------------------

@recipe("SwiGLU", min_opset=28)
def _swiglu(d, opset):
    s = shape(d, 1, 3)
    return Example([floats(d, s), floats(d, broadcastable(d, s))], {"alpha": one_of(d, [1.0, 1.702])})


@recipe("BitCast", min_opset=26)
def _bitcast(d, opset):
    src, to = one_of(d, [(np.float32, 6), (np.int32, 1), (np.float32, 12), (np.int64, 11), (np.uint8, 3)])
    return Example([tensor(d, shape(d, 0, 3), src)], {"to": to})


@recipe("TensorScatter", min_opset=24)
def _tensor_scatter(d, opset):
    batch, heads, cache, width = dim(d, 1, 2), dim(d, 1, 2), dim(d, 1, 7), dim(d, 1, 3)
    seq = dim(d, 0, cache)
    inputs = [floats(d, (batch, heads, cache, width)), floats(d, (batch, heads, seq, width))]
    if maybe(d):
        inputs.append(ints(d, (batch,), 0, cache - seq).astype(np.int64))
    return Example(inputs, {"axis": -2, "mode": one_of(d, ["linear", "circular"])})


# -- ai.onnx.ml ----------------------------------------------------------------------------------

@recipe("Binarizer", domain="ai.onnx.ml", min_opset=1)
def _binarizer(d, opset):
    return Example([floats(d, shape(d, 0, 3))], {"threshold": one_of(d, [0.0, 0.5])})


@recipe("ArrayFeatureExtractor", domain="ai.onnx.ml", min_opset=1)
def _array_feature_extractor(d, opset):
    s = shape(d, 1, 3, 1)
    return Example([floats(d, s), ints(d, (dim(d, 1, 3),), 0, s[-1] - 1 if d.draw(st.integers(0, 9)) else s[-1])])


def _ml_features(d) -> tuple:
    """An [N, C] (or now and then [C]) shape of the ml ops' inputs."""
    return (dim(d), dim(d, 1)) if maybe(d, 4) else (dim(d, 1),)


def _per_feature_values(d, c: int, values) -> list:
    n = one_of(d, [1, c, c, c + 1]) if c else 1
    return [one_of(d, values) for _ in range(n)]


@recipe("Scaler", domain="ai.onnx.ml", min_opset=1)
def _scaler(d, opset):
    s = _ml_features(d)
    x = floats(d, s) if maybe(d, 4) else ints(d, s, -5, 5)
    return Example([x], {"offset": _per_feature_values(d, s[-1], [0.0, 1.5, -2.0]),
                         "scale": _per_feature_values(d, s[-1], [1.0, 0.5, 3.0])})


@recipe("Normalizer", domain="ai.onnx.ml", min_opset=1)
def _normalizer(d, opset):
    s = _ml_features(d)
    x = floats(d, s) if maybe(d, 4) else ints(d, s, -3, 3)
    return Example([x], {"norm": one_of(d, ["MAX", "L1", "L2"])})


@recipe("LinearRegressor", domain="ai.onnx.ml", min_opset=1)
def _linear_regressor(d, opset):
    s = _ml_features(d)
    targets = one_of(d, [1, 2, 3])
    n = s[-1] * targets if d.draw(st.integers(0, 9)) else s[-1] * targets + 1
    coef = rng(d).standard_normal(n).round(3).tolist()
    attrs = {"coefficients": coef, "intercepts": rng(d).standard_normal(targets).round(3).tolist(),
             "targets": targets}
    if d.draw(st.booleans()):
        attrs["post_transform"] = one_of(d, ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
    return Example([floats(d, s)], attrs)


@recipe("Imputer", domain="ai.onnx.ml", min_opset=1)
def _imputer(d, opset):
    s = _ml_features(d)
    if d.draw(st.booleans()):
        x = ints(d, s, -1, 3)
        return Example([x], {"imputed_value_int64s": [int(v) for v in _per_feature_values(d, s[-1], [7, 8, 9])],
                             "replaced_value_int64": -1})
    x = floats(d, s)
    x[rng(d).random(s) < 0.3] = np.nan
    replaced = one_of(d, [float("nan"), 0.0])
    return Example([x], {"imputed_value_floats": _per_feature_values(d, s[-1], [7.0, 8.5, -1.0]),
                         "replaced_value_float": replaced})


def _class_labels(d, count: int) -> dict:
    if d.draw(st.booleans()):
        return {"classlabels_ints": [int(v) for v in rng(d).choice(50, count, replace=False)]}
    return {"classlabels_strings": [f"c{i}" for i in range(count)]}


def _ml_numeric(d, s) -> np.ndarray:
    """X of an ml op: float32 mostly, now and then double or integers."""
    kind = d.draw(st.integers(0, 5))
    if kind >= 3:
        return floats(d, s)
    return floats(d, s, np.float64) if kind == 2 else ints(d, s, -3, 3, (np.int64, np.int32)[kind])


@recipe("LinearClassifier", domain="ai.onnx.ml", min_opset=1)
def _linear_classifier(d, opset):
    s = _ml_features(d)
    targets = one_of(d, [1, 2, 3, 4])
    attrs = _class_labels(d, 2 if targets == 1 else targets)
    if maybe(d, 8):
        attrs["intercepts"] = rng(d).standard_normal(targets).round(3).tolist()
    else:                                  # (absent: a row per label)
        targets = 2 if targets == 1 else targets
    n = s[-1] * targets if d.draw(st.integers(0, 9)) else s[-1] * targets + targets * one_of(d, [-1, 1])
    attrs["coefficients"] = rng(d).standard_normal(max(n, 1)).round(3).tolist()
    if maybe(d, 4):
        attrs["post_transform"] = one_of(d, ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
    return Example([_ml_numeric(d, s)], attrs, n_outputs=2)


def _svm_kernel(d, attrs: dict) -> None:
    attrs["kernel_type"] = one_of(d, ["LINEAR", "POLY", "RBF", "SIGMOID"])
    if attrs["kernel_type"] != "LINEAR" or maybe(d, 4):
        attrs["kernel_params"] = [one_of(d, [0.1, 0.3, 0.5]), one_of(d, [0.0, 0.5, -1.0]), one_of(d, [1.0, 2.0, 3.0])]


@recipe("SVMClassifier", domain="ai.onnx.ml", min_opset=1)
def _svm_classifier(d, opset):
    # (no feature count that differs from the support vectors': onnxruntime reads past X then)
    s = _ml_features(d)
    k = one_of(d, [2, 2, 3, 4])
    g = rng(d)
    attrs = _class_labels(d, k)
    pairs = k * (k - 1) // 2
    if maybe(d, 5):
        per_class = [int(v) for v in g.integers(1, 4, k)]
        vectors = sum(per_class)
        attrs.update(vectors_per_class=per_class, support_vectors=g.standard_normal(vectors * s[-1]).round(3).tolist(),
                     coefficients=g.standard_normal((k - 1) * vectors).round(3).tolist(),
                     rho=g.standard_normal(pairs).round(3).tolist())
        _svm_kernel(d, attrs)
        if d.draw(st.booleans()):
            attrs.update(prob_a=(-g.uniform(0.5, 3, pairs)).round(3).tolist(),
                         prob_b=g.standard_normal(pairs).round(3).tolist())
    else:                                  # (liblinear: a coefficient row per class)
        coef = g.standard_normal(k * s[-1]).round(3)
        attrs.update(coefficients=(np.abs(coef) if maybe(d) else coef).tolist(), rho=[round(float(g.normal()), 3)],
                     kernel_params=[0.0, 0.0, 0.0])
    if maybe(d, 3):
        attrs["post_transform"] = one_of(d, ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"] + ["PROBIT"] * (k == 2))
    return Example([_ml_numeric(d, s)], attrs, n_outputs=2)


@recipe("SVMRegressor", domain="ai.onnx.ml", min_opset=1)
def _svm_regressor(d, opset):
    s = _ml_features(d)
    g = rng(d)
    vectors = one_of(d, [0, 1, 3, 5])
    c = s[-1] if d.draw(st.integers(0, 9)) else s[-1] + 1
    attrs = {"n_supports": vectors, "rho": [round(float(g.normal()), 3)], "one_class": int(not maybe(d, 4)),
             "coefficients": g.standard_normal(vectors or c).round(3).tolist()}
    if vectors:
        attrs["support_vectors"] = g.standard_normal(vectors * c).round(3).tolist()
    _svm_kernel(d, attrs)
    attrs.setdefault("kernel_params", [0.0, 0.0, 0.0])
    if not maybe(d, 5):
        attrs["post_transform"] = one_of(d, ["SOFTMAX", "LOGISTIC"])
    return Example([floats(d, s)], attrs)    # (onnxruntime's SVMRegressor takes float only)


# -- ai.onnx.ml encoders (ops_builtin/ml_encode.py) -------------------------------------------

_WORDS = ("a", "bb", "", "é", "a b")


def _words(d, s) -> np.ndarray:
    out = np.empty(s, dtype=object)
    out[...] = np.array(_WORDS, dtype=object)[ints(d, s, 0, len(_WORDS) - 1)]
    return out


@recipe("OneHotEncoder", domain="ai.onnx.ml", min_opset=1)
def _one_hot_encoder(d, opset):
    s = shape(d, 0, 3)
    k = dim(d, 1, 5)
    kind = d.draw(st.integers(0, 4))
    if kind == 0:
        x, attrs = _words(d, s), {"cats_strings": [one_of(d, _WORDS) for _ in range(k)]}
    else:                                   # (floats are truncated toward zero)
        if kind < 3:
            x = ints(d, s, -2, 3, (np.int64, np.int32)[kind - 1])
        else:
            x = floats(d, s, (FLOAT, np.float64)[kind - 3], scale=2.0)
        attrs = {"cats_int64s": [int(v) for v in ints(d, (k,), -2, 3)]}
    if not d.draw(st.integers(0, 9)):       # both lists: refused
        attrs.update(cats_strings=["a"], cats_int64s=[1])
    attrs["zeros"] = one_of(d, [1, 1, 0])
    return Example([x], attrs)


@recipe("CategoryMapper", domain="ai.onnx.ml", min_opset=1)
def _category_mapper(d, opset):
    s = shape(d, 0, 3)
    k = dim(d, 1, 5)
    attrs = {"cats_strings": [one_of(d, _WORDS) for _ in range(k)],
             "cats_int64s": [int(v) for v in ints(d, (k if d.draw(st.integers(0, 9)) else k + 1,), -1, 4)]}
    if maybe(d):
        attrs["default_int64"] = one_of(d, [7, -3])
    if maybe(d):
        attrs["default_string"] = one_of(d, ["?", ""])
    return Example([_words(d, s) if d.draw(st.booleans()) else ints(d, s, -1, 5)], attrs)


@recipe("FeatureVectorizer", domain="ai.onnx.ml", min_opset=1)
def _feature_vectorizer(d, opset):
    # (no empty batch: onnxruntime 1.32 aborts the process on one with several inputs)
    n = dim(d, 1)
    dtype = one_of(d, [FLOAT, np.float64, np.int64, np.int32])
    inputs, dims = [], []
    for i in range(d.draw(st.integers(1, 3))):
        rank = one_of(d, [2, 2, 2, 3] + ([1] if n == 1 or i else []))
        s = (dim(d, 0, 4),) if rank == 1 else (n,) + tuple(dim(d, 0, 3) for _ in range(rank - 1))
        inputs.append(tensor(d, s, dtype) if d.draw(st.integers(0, 9)) else tensor(d, s, np.float64))
        width = int(np.prod(s[1:])) if rank > 1 else s[0]
        dims.append(max(0, width + one_of(d, [0, 0, 0, -1, 1, 2])))
    if not d.draw(st.integers(0, 9)):       # a size too many or too few
        dims = dims[:-1] if len(dims) > 1 else dims + [2]
    return Example(inputs, {"inputdimensions": dims})


# -- com.microsoft (the example plugin) -----------------------------------------------------------

MS = "com.microsoft"


def _hidden_shape(d) -> tuple:
    return (dim(d, 1, 2), dim(d, 1, 3), dim(d, 1, 5))


@recipe("QuickGelu", domain=MS, min_opset=1)
def _quick_gelu(d, opset):
    return Example([floats(d, shape(d, 0, 3))], {"alpha": one_of(d, [1.702, 1.0])})


@recipe("Gelu", domain=MS, min_opset=1)
def _ms_gelu(d, opset):
    return Example([floats(d, shape(d, 0, 3))])


@recipe("FastGelu", "BiasGelu", domain=MS, min_opset=1)
def _bias_gelu(d, opset):
    s = shape(d, 1, 3)
    n = s[-1] if d.draw(st.integers(0, 9)) else s[-1] + 1
    return Example([floats(d, s)] + ([floats(d, (n,))] if maybe(d, 4) else []))


@recipe("BiasAdd", domain=MS, min_opset=1)
def _bias_add(d, opset):
    s = _hidden_shape(d)
    return Example([floats(d, s), floats(d, (s[2] if d.draw(st.integers(0, 9)) else s[2] + 1,)), floats(d, s)])


@recipe("BiasSplitGelu", domain=MS, min_opset=1)
def _bias_split_gelu(d, opset):
    s = _hidden_shape(d)
    return Example([floats(d, s), floats(d, (s[2],))])


@recipe("FusedMatMul", domain=MS, min_opset=1)
def _ms_fused_matmul(d, opset):
    m, k, n = dim(d), dim(d), dim(d)
    ta, tb = one_of(d, [0, 1]), one_of(d, [0, 1])
    batch = shape(d, 0, 1)
    a = batch + ((k, m) if ta else (m, k))
    b = batch + ((n, k) if tb else (k, n))
    return Example([floats(d, a), floats(d, b)], {"alpha": one_of(d, [1.0, 0.5]), "transA": ta, "transB": tb})


@recipe("SimplifiedLayerNormalization", min_opset=1)     # (onnxruntime's, in the ONNX domain)
@recipe("LayerNormalization", "SimplifiedLayerNormalization", domain=MS, min_opset=1)
def _ms_layernorm(d, opset):
    s = shape(d, 1, 3, 1)
    ax = axis(d, len(s), out_of_range=False)
    return Example([floats(d, s), floats(d, s[ax:])], {"axis": ax, "epsilon": 1e-3})


@recipe("SkipLayerNormalization", "SkipSimplifiedLayerNormalization", domain=MS, min_opset=1)
def _skip_layernorm(d, opset):
    s = _hidden_shape(d)
    c = s[2] if d.draw(st.integers(0, 9)) else s[2] + 1
    return Example([floats(d, s), floats(d, s), floats(d, (c,))], {"epsilon": 1e-3})


def _q(d, shape_, dtype=np.uint8):
    return ints(d, shape_, 0, 200, dtype)


@recipe("QLinearSigmoid", domain=MS, min_opset=1)
def _qlinear_sigmoid(d, opset):
    return Example([_q(d, shape(d, 0, 3)), scalar(0.05, FLOAT), scalar(100, np.uint8), scalar(0.004, FLOAT),
                    scalar(0, np.uint8)], constant=(1, 2, 3, 4))


@recipe("QLinearAdd", "QLinearMul", domain=MS, min_opset=1)
def _qlinear_binary(d, opset):
    a = shape(d, 0, 3)
    return Example([_q(d, a), scalar(0.05, FLOAT), scalar(100, np.uint8), _q(d, broadcastable(d, a)),
                    scalar(0.02, FLOAT), scalar(30, np.uint8), scalar(0.1, FLOAT), scalar(10, np.uint8)],
                   constant=(1, 2, 4, 5, 6, 7))


@recipe("QLinearGlobalAveragePool", domain=MS, min_opset=1)
def _qlinear_gap(d, opset):
    s = (dim(d, 1, 2), dim(d, 1, 3), dim(d, 1, 4), dim(d, 1, 4))
    return Example([_q(d, s), scalar(0.05, FLOAT), scalar(100, np.uint8), scalar(0.05, FLOAT), scalar(90, np.uint8)],
                   {"channels_last": 0}, constant=(1, 2, 3, 4))


# -- ops without a recipe ------------------------------------------------------------------------

NOT_DRAWN = {
    "": {
        **{op: "control flow: its body graphs are not drawn (tests/ops/test_control_flow.py)"
           for op in ("If", "Loop", "Scan")},
        **{op: "sequences and optionals: no tensor inputs to draw (tests/ops/test_sequence.py)"
           for op in ("ConcatFromSequence", "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
                      "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence", "Optional",
                      "OptionalGetElement", "OptionalHasElement")},
        **{op: "strings (tests/ops/test_text.py)"
           for op in ("RegexFullMatch", "StringConcat", "StringNormalizer", "StringSplit", "TfIdfVectorizer")},
        "Constant": "no inputs; its value is an attribute (tests/ops/test_tensor_ops.py)",
        **{op: "no recipe yet: attention and recurrent-state ops (several coupled shapes and caches) are "
               "compared with onnxruntime in tests/ops/test_attention.py and tests/ops/test_rnn.py"
           for op in ("Attention", "RotaryEmbedding", "LinearAttention", "CausalConvWithState")},
        "DeformConv": "no recipe yet: offsets and masks per kernel tap (tests/ops/test_nn.py)",
        "ImageDecoder": "encoded image bytes (tests/ops/test_image.py)",
        "Multinomial": "random draws of data-dependent classes (tests/ops/test_random.py)",
    },
    "ai.onnx.ml": {
        "LabelEncoder": "no recipe yet: keys and values as typed attribute lists (tests/ops/test_ml.py)",
        "TreeEnsemble": "no recipe yet: a tree's nodes as attribute lists (tests/ops/test_ml.py)",
        **{op: "no recipe yet: trees as (treeid, nodeid) attribute lists (tests/ops/test_ml_trees.py, "
               "tests/ml/test_trees.py)" for op in ("TreeEnsembleClassifier", "TreeEnsembleRegressor")},
        **{op: "maps (dicts) in or out, which the drawn tensor inputs cannot be (tests/ops/test_ml_maps.py)"
           for op in ("ZipMap", "DictVectorizer", "CastMap")},
    },
    "ai.onnx.preview": {"FlexAttention": "no recipe yet: a score-modifying subgraph (tests/ops/test_attention.py)"},
    "ai.onnx.preview.training": {
        op: "training updates (tests/ops/test_training.py); onnxruntime's inference build has no kernel"
        for op in ("Adagrad", "Adam", "Momentum")},
    "com.microsoft": {
        **{op: "no recipe yet: attention ops with packed or cached layouts (plugins_example/tests/test_mha.py)"
           for op in ("Attention", "MultiHeadAttention", "GroupQueryAttention", "RotaryEmbedding")},
        "EmbedLayerNormalization": "no recipe yet: embeddings, segment ids and a mask together "
                                   "(plugins_example/tests/test_norms_activations.py)",
        "MatMulNBits": "no recipe yet: block-quantized weights with their attributes "
                       "(plugins_example/tests/test_quantization.py)",
        "Tokenizer": "strings, with a data-dependent token axis (plugins_example/tests/test_tokenizer.py; "
                     "onnxruntime drops the axis of an empty input)",
        "SparseToDenseMatMul": "a sparse tensor input, which the drawn nodes' feeds cannot be "
                               "(tests/plugins/test_contrib_ops.py feeds COO and CSR OrtValues)",
        "RelativePositionBias": "onnxruntime has a CUDA kernel only; compared with the ONNX-op computation it "
                                "fuses, run by onnxruntime (plugins_example/tests/test_relative_position_bias.py)",
    },
    "dynashape": {
        op: "dynashape's own rewrite product, never in a model given to a session; every suite runs with the "
            "rewrites on and off (.ci/run) and tests/rewrites compares the two"
        for op in ("FusedAttention", "FusedConv", "FusedMatMul", "NhwcAveragePool", "NhwcConv", "NhwcMaxPool")},
}


def not_drawn_reason(domain: str, op: str) -> str:
    return NOT_DRAWN.get(domain, {}).get(op, "")
