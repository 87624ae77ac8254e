"""Hypothesis strategies for the differential fuzz tests: random small ONNX graphs over
symbolic input dims, each with a sequence of feeds that changes the bound dims.

A drawn :class:`Case` is a ``ModelProto`` (opset 18, float32 inputs declared with
``dim_param`` symbols ``a``, ``b``, ``c``, optionally an int64 scalar input ``k``) and 4-6
feed dicts. The feeds bind the symbols to 0..5: every sequence has a zero-size dim and a
repeated feed. Each leaf value of the graph is a graph output, so no node is dead code.

The builder tracks each value's shape as *dim tokens*: an ``int``, a symbol name, or a
fresh name (``"?3"``) for a dim derived at run time, each with an interval of the values it
can take. Tokens let the builder pick operands that fit (equal non-axis dims for Concat,
broadcastable shapes, element-count-preserving Reshape targets) most of the time, and keep
every tensor small; a graph that does not fit some feed is still a good case: dynashape must
then raise as onnxruntime and the spec do.

Families (``FAMILIES``): ``shape`` (Shape, Size, Gather, Unsqueeze, Squeeze, Concat,
Reshape, Flatten, Transpose, Identity, NonZero and int64 arithmetic on shape values, also
through Cast/Floor/Ceil), ``slice`` (Slice, Expand, Tile, Range, ConstantOfShape, Split,
Gather), ``elementwise`` (broadcasting binary and unary chains in float32 and int64, Where,
reductions with ``axes`` as an input, constant or computed) and ``mixed`` (all of them).
The input ``k`` feeds run-time values into Gather indices, Unsqueeze/Reduce axes, Tile
repeats, Reshape/ConstantOfShape shapes, Slice bounds and Range limits, in range or not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

__all__ = ["Case", "FAMILIES", "cases", "spec_slice_range", "INT64_MAX", "INT64_MIN", "OPSET", "IR_VERSION"]

INT64_MAX = int(np.iinfo(np.int64).max)
INT64_MIN = int(np.iinfo(np.int64).min)
OPSET = 18
#: the IR version of the models (onnxruntime 1.17 loads up to 9; opset 18 needs 8)
IR_VERSION = 8

SYMS = ("a", "b", "c")
#: the values a symbol takes in a feed: small, 0 and 1 often
SYM_VALUES = (0, 1, 1, 2, 2, 3, 4, 5)
SYM_MAX = max(SYM_VALUES)
#: the int64 scalar input ``k`` (a run-time value that is no dim)
K_VALUES = (-2, -1, 0, 1, 2, 3, 6)
#: no tensor of a case has more elements than this (ConstantOfShape, Tile, Expand stay small)
MAX_ELEMS = 2048

Dim = Union[int, str]


@dataclass
class Val:
    """A value of the graph under construction: ``shape`` in dim tokens (None: rank not
    known to the builder); ``elems`` the element values as dim tokens for an int64 tensor
    of rank <= 1 that holds dims or numbers the builder follows (None otherwise)."""

    name: str
    dtype: int
    shape: Optional[tuple]
    elems: Optional[tuple] = None


@dataclass
class Case:
    """A model and the feeds run, in order, on one session."""

    model: onnx.ModelProto
    feeds: list
    family: str
    ops: tuple = ()

    def text(self) -> str:
        import onnx.printer

        return onnx.printer.to_text(self.model)

    def feeds_text(self) -> str:
        rows = []
        for k, feeds in enumerate(self.feeds):
            rows.append(f"  feed {k}: " + ", ".join(
                f"{n}={v.tolist() if v.ndim == 0 else v.shape}" for n, v in feeds.items()))
        return "\n".join(rows)

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        return f"Case({self.family}, ops={list(self.ops)})\n{self.text()}\n{self.feeds_text()}"


def spec_slice_range(d: int, start: int, end: int, step: int) -> range:
    """The indices Slice-13 takes along an axis of length ``d`` (ONNX Operators.md, Slice:
    negative starts/ends add ``d``; then clamp into [0, d] for step > 0, [0, d-1] and
    [-1, d-1] for step < 0)."""
    start = start + d if start < 0 else start
    end = end + d if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), d), min(max(end, 0), d)
    else:
        start, end = min(max(start, 0), d - 1), min(max(end, -1), d - 1)
    return range(start, end, step)


class Builder:
    """Builds one graph node by node from hypothesis draws."""

    def __init__(self, draw, use_k: bool):
        self.draw = draw
        self.nodes: list = []
        self.inits: list = []
        self.inputs: list = []
        self.vals: list[Val] = []
        self.iv: dict[str, tuple[int, int]] = {s: (0, SYM_MAX) for s in SYMS}
        self.consumed: set[str] = set()
        self.n_names = 0
        self.n_fresh = 0
        self.shape_of: dict[str, Val] = {}
        self.ops: list[str] = []
        if use_k:
            self.iv["k"] = (min(K_VALUES), max(K_VALUES))

    # -- draws ----------------------------------------------------------------------------
    def pick(self, seq):
        return self.draw(st.sampled_from(list(seq)))

    def coin(self, p_true: int = 1, of: int = 2) -> bool:
        """True with probability p_true/of (shrinks towards False)."""
        return self.draw(st.integers(0, of - 1)) >= of - p_true

    def int_(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    # -- tokens ---------------------------------------------------------------------------
    def lohi(self, d: Dim) -> tuple[int, int]:
        return (d, d) if isinstance(d, int) else self.iv[d]

    def fresh(self, lo: int, hi: int) -> Dim:
        if lo == hi:
            return lo
        self.n_fresh += 1
        name = f"?{self.n_fresh}"
        self.iv[name] = (lo, hi)
        return name

    def nonneg(self, d: Dim) -> bool:
        return self.lohi(d)[0] >= 0

    def numel_hi(self, shape) -> int:
        n = 1
        for d in shape:
            n *= max(self.lohi(d)[1], 0)
        return n

    def small(self, shape) -> bool:
        return shape is not None and all(self.nonneg(d) for d in shape) and self.numel_hi(shape) <= MAX_ELEMS

    def mul_dim(self, p: Dim, q: Dim) -> Dim:
        if isinstance(p, int) and isinstance(q, int):
            return p * q
        if p == 1:
            return q
        if q == 1:
            return p
        if p == 0 or q == 0:
            return 0
        (a, b), (c, d) = self.lohi(p), self.lohi(q)
        corners = (a * c, a * d, b * c, b * d)
        return self.fresh(min(corners), max(corners))

    def arith_dim(self, op: str, p: Dim, q: Dim) -> Dim:
        """The token of ``p op q`` for int64 Add/Sub/Mul/Div (by a positive int)/Max/Min."""
        if isinstance(p, int) and isinstance(q, int):
            if op == "Div":
                return int(np.trunc(p / q)) if q else 0
            return {"Add": p + q, "Sub": p - q, "Mul": p * q, "Max": max(p, q), "Min": min(p, q)}[op]
        if op == "Mul":
            return self.mul_dim(p, q)
        if (op in ("Add", "Sub") and q == 0) or (op == "Div" and q == 1) or (op in ("Max", "Min") and p == q):
            return p
        if op == "Add" and p == 0:
            return q
        (a, b), (c, d) = self.lohi(p), self.lohi(q)
        if op == "Add":
            return self.fresh(a + c, b + d)
        if op == "Sub":
            return self.fresh(a - d, b - c)
        if op == "Max":
            return self.fresh(max(a, c), max(b, d))
        if op == "Min":
            return self.fresh(min(a, c), min(b, d))
        # Div by a positive constant q (truncation towards zero, as ORT for integers)
        return self.fresh(min(int(np.trunc(a / q)), 0), max(int(np.trunc(b / q)), 0))

    def bcast_dim(self, p: Dim, q: Dim) -> Optional[Dim]:
        """The broadcast of two dims, None where they surely do not broadcast."""
        if p == q or q == 1:
            return p
        if p == 1:
            return q
        if isinstance(p, int) and isinstance(q, int):
            return None
        (a, b), (c, d) = self.lohi(p), self.lohi(q)
        return self.fresh(min(a, c), max(b, d))

    def bcast_shape(self, shapes) -> Optional[tuple]:
        rank = max(len(s) for s in shapes)
        out = []
        for i in range(rank):
            d: Dim = 1
            for s in shapes:
                j = i - (rank - len(s))
                if j >= 0:
                    d2 = self.bcast_dim(d, s[j])
                    if d2 is None:
                        return None
                    d = d2
            out.append(d)
        return tuple(out)

    def surely_bcast(self, p: tuple, q: tuple) -> bool:
        return all(a == b or a == 1 or b == 1 for a, b in zip(reversed(p), reversed(q)))

    # -- graph pieces ---------------------------------------------------------------------
    def name(self) -> str:
        self.n_names += 1
        return f"v{self.n_names}"

    def node(self, op: str, inputs: list, n_out: int = 1, **attrs) -> list[str]:
        outs = [self.name() for _ in range(n_out)]
        self.consumed.update(i for i in inputs if i)
        self.nodes.append(helper.make_node(op, inputs, outs, name=f"n{len(self.nodes)}_{op}", **attrs))
        return outs

    def add(self, name: str, dtype: int, shape, elems=None) -> Val:
        v = Val(name, dtype, None if shape is None else tuple(shape), None if elems is None else tuple(elems))
        self.vals.append(v)
        return v

    def const(self, values, dtype=np.int64, scalar: bool = False) -> str:
        """An int64 (or float32) constant: an initializer, or now and then a Constant node."""
        arr = np.asarray(values, dtype=dtype)
        if not scalar:
            arr = arr.reshape(-1) if arr.ndim == 0 else arr
        if self.coin(1, 4):
            (out,) = self.node("Constant", [], value=numpy_helper.from_array(arr))
            self.consumed.add(out)
            return out
        name = self.name()
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def use(self, v: Val) -> str:
        self.consumed.add(v.name)
        return v.name

    # -- value pools ----------------------------------------------------------------------
    def data(self, min_rank: int = 0, max_rank: int = 4, dtype: Optional[int] = TensorProto.FLOAT) -> list[Val]:
        """Tensors of known rank in [min_rank, max_rank] (of ``dtype``; None: float32 or int64)."""
        return [v for v in self.vals if (dtype is None or v.dtype == dtype) and v.shape is not None
                and min_rank <= len(v.shape) <= max_rank]

    def vectors(self, nonneg: bool = False, length: Optional[int] = None) -> list[Val]:
        """int64 1-D values whose elements the builder follows (shapes and shape arithmetic)."""
        return [v for v in self.vals if v.elems is not None and v.shape is not None and len(v.shape) == 1
                and (length is None or len(v.elems) == length)
                and (not nonneg or all(self.nonneg(e) for e in v.elems))]

    def scalars(self) -> list[Val]:
        return [v for v in self.vals if v.elems is not None and v.shape == ()]

    def pick_data(self, min_rank: int = 0, max_rank: int = 4, any_dtype: bool = False) -> Optional[Val]:
        """A float32 tensor (or, for the shape ops, ``any_dtype``: an int64 one too)."""
        pool = self.data(min_rank, max_rank, None if any_dtype else TensorProto.FLOAT)
        return self.pick(pool) if pool else None

    def shape_vec(self, x: Val) -> Val:
        """``Shape(x)``, one node per value."""
        if x.name not in self.shape_of:
            (out,) = self.node("Shape", [self.use(x)])
            self.shape_of[x.name] = self.add(out, TensorProto.INT64, (len(x.shape),), x.shape)
        v = self.shape_of[x.name]
        self.consumed.add(v.name)
        return v

    def dim_scalar(self, x: Val, axis: int) -> Val:
        """``Gather(Shape(x), axis)``: a scalar dim of x."""
        s = self.shape_vec(x)
        idx = axis - len(x.shape) if self.coin(1, 3) else axis
        (out,) = self.node("Gather", [s.name, self.const(idx, scalar=True)], axis=0)
        return self.add(out, TensorProto.INT64, (), (x.shape[axis],))

    def dim_vec1(self, x: Val, axis: int) -> Val:
        """A 1-element int64 vector holding dim ``axis`` of x (Gather with a 1-D index,
        Slice of the shape, or Unsqueeze of the scalar)."""
        how = self.int_(0, 2)
        if how == 0:
            s = self.shape_vec(x)
            (out,) = self.node("Gather", [s.name, self.const([axis])], axis=0)
        elif how == 1:
            s = self.shape_vec(x)
            (out,) = self.node("Slice", [s.name, self.const([axis]), self.const([axis + 1])])
        else:
            sc = self.dim_scalar(x, axis)
            (out,) = self.node("Unsqueeze", [self.use(sc), self.const([0])])
        return self.add(out, TensorProto.INT64, (1,), (x.shape[axis],))

    def use_k(self) -> bool:
        """Now and then (when the model has the int64 input k) a value from k instead."""
        return "k" in self.iv and self.coin(1, 5)

    def k_vector(self, length: int, fill: int = 1) -> tuple[str, int]:
        """A 1-D int64 vector of ``length`` entries ``fill`` with the run-time input k at one
        position (Concat of constants and Unsqueeze(k)); returns (name, position)."""
        pos = self.int_(0, length - 1)
        (u,) = self.node("Unsqueeze", ["in_k", self.const([0])])
        parts = ([self.const([fill] * pos)] if pos else []) + [u] + \
            ([self.const([fill] * (length - pos - 1))] if length - pos - 1 else [])
        if len(parts) == 1:
            return parts[0], pos
        (out,) = self.node("Concat", parts, axis=0)
        return out, pos

    def axes_const(self, axes) -> str:
        return self.const(list(axes))

    # -- finishing ------------------------------------------------------------------------
    def model(self) -> onnx.ModelProto:
        outputs = [v for v in self.vals if v.name not in self.consumed and not v.name.startswith("in_")]
        if not outputs:       # nothing built: pass the first input through
            x = self.vals[0]
            (out,) = self.node("Identity", [x.name])
            outputs = [self.add(out, x.dtype, x.shape)]
        graph = helper.make_graph(
            self.nodes, "fuzz", self.inputs,
            [helper.make_tensor_value_info(v.name, v.dtype, None) for v in outputs], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        return model


# -- ops ------------------------------------------------------------------------------------
# Each takes the builder, adds nodes and values, and returns False when the pool has no
# operand that fits (the caller then draws another op).

def op_shape(b: Builder) -> bool:
    x = b.pick_data(any_dtype=True)
    if x is None:
        return False
    r = len(x.shape)
    if b.coin(1, 3):    # Shape-15 start/end, clamped into [0, rank]
        start, end = b.int_(-r - 1, r + 1), b.int_(-r - 1, r + 1)
        elems = x.shape[start:end]     # Python's clamping is Shape-15's
        (out,) = b.node("Shape", [b.use(x)], start=start, end=end)
        b.add(out, TensorProto.INT64, (len(elems),), elems)
    else:
        b.shape_vec(x)
    return True


def op_size(b: Builder) -> bool:
    x = b.pick_data(any_dtype=True)
    if x is None:
        return False
    n: Dim = 1
    for d in x.shape:
        n = b.mul_dim(n, d)
    (out,) = b.node("Size", [b.use(x)])
    b.add(out, TensorProto.INT64, (), (n,))
    return True


def op_gather_shape(b: Builder) -> bool:
    pool = [v for v in b.vectors() if v.elems]
    if not pool:
        return False
    s = b.pick(pool)
    n = len(s.elems)
    if b.use_k():     # a run-time index, in range or not
        (out,) = b.node("Gather", [b.use(s), "in_k"], axis=0)
        los, his = zip(*(b.lohi(e) for e in s.elems))
        b.add(out, TensorProto.INT64, (), (b.fresh(min(los), max(his)),))
    elif b.coin():
        i = b.int_(-n, n - 1)
        (out,) = b.node("Gather", [b.use(s), b.const(i, scalar=True)], axis=0)
        b.add(out, TensorProto.INT64, (), (s.elems[i],))
    else:
        idx = [b.int_(-n, n - 1) for _ in range(b.int_(0, 3))]
        (out,) = b.node("Gather", [b.use(s), b.const(idx)], axis=0)
        b.add(out, TensorProto.INT64, (len(idx),), [s.elems[i] for i in idx])
    return True


def op_unsqueeze_scalar(b: Builder) -> bool:
    pool = b.scalars()
    if not pool:
        return False
    s = b.pick(pool)
    (out,) = b.node("Unsqueeze", [b.use(s), b.const([b.pick([0, -1])])])
    b.add(out, TensorProto.INT64, (1,), s.elems)
    return True


def op_concat_shape(b: Builder) -> bool:
    pool = b.vectors()
    if not pool:
        return False
    parts, elems = [], []
    for _ in range(b.int_(2, 3)):
        if b.coin(2, 3):
            v = b.pick(pool)
            parts.append(b.use(v))
            elems.extend(v.elems)
        else:
            c = [b.pick([-1, 0, 1, 2, 3]) for _ in range(b.int_(0, 2))]
            parts.append(b.const(c))
            elems.extend(c)
    (out,) = b.node("Concat", parts, axis=b.pick([0, -1]))
    b.add(out, TensorProto.INT64, (len(elems),), elems)
    return True


def op_shape_arith(b: Builder) -> bool:
    pool = b.vectors() + b.scalars()
    if not pool:
        return False
    p = b.pick(pool)
    op = b.pick(["Add", "Sub", "Mul", "Max", "Min", "Div"])
    if op == "Div":   # integer division only by positive constants (ORT's is C++ truncation; no zero)
        q = b.int_(1, 3)
        rhs, q_elems, q_shape = b.const(q, scalar=True), (q,), ()
    else:
        same = [v for v in pool if v.shape == p.shape or v.shape in ((), (1,))]
        if same and b.coin():
            qv = b.pick(same)
            rhs, q_elems, q_shape = b.use(qv), qv.elems, qv.shape
        else:
            q = b.pick([0, 1, 1, 2, -1])
            rhs, q_elems, q_shape = b.const(q, scalar=True), (q,), ()
    n = max(len(p.elems), len(q_elems)) if p.shape != () or q_shape != () else 1
    if len(p.elems) not in (1, n) or len(q_elems) not in (1, n):
        return False
    pe = p.elems * n if len(p.elems) == 1 else p.elems
    qe = q_elems * n if len(q_elems) == 1 else q_elems
    elems = [b.arith_dim(op, x, y) for x, y in zip(pe, qe)]
    shape = () if p.shape == () and q_shape == () else (n,)
    (out,) = b.node(op, [b.use(p), rhs])
    b.add(out, TensorProto.INT64, shape, elems)
    return True


def op_reduce_shape(b: Builder) -> bool:
    pool = b.vectors()
    if not pool:
        return False
    s = b.pick(pool)
    op = b.pick(["ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin"])
    if not s.elems and op in ("ReduceMax", "ReduceMin"):
        op = "ReduceProd"
    keep = b.pick([0, 1])
    acc: Dim = 1 if op == "ReduceProd" else 0
    for i, e in enumerate(s.elems):
        if op == "ReduceProd":
            acc = b.mul_dim(acc, e)
        elif op == "ReduceSum":
            acc = b.arith_dim("Add", acc, e)
        else:
            acc = e if i == 0 else b.arith_dim(op[6:], acc, e)
    (out,) = b.node(op, [b.use(s)], keepdims=keep)
    b.add(out, TensorProto.INT64, (1,) if keep else (), (acc,))
    return True


def op_where_shape(b: Builder) -> bool:
    pool = b.vectors()
    if not pool:
        return False
    s = b.pick(pool)
    others = [v for v in pool if len(v.elems) == len(s.elems)]
    t = b.pick(others)
    (eq,) = b.node("Equal", [b.use(s), b.const(b.pick([1, 0]), scalar=True)])
    (out,) = b.node("Where", [eq, b.use(t), s.name])
    elems = [b.fresh(min(b.lohi(x)[0], b.lohi(y)[0]), max(b.lohi(x)[1], b.lohi(y)[1])) if x != y else x
             for x, y in zip(s.elems, t.elems)]
    b.add(out, TensorProto.INT64, s.shape, elems)
    return True


def op_cast_shape(b: Builder) -> bool:
    """Shape arithmetic in float, as exporters write it: Cast to float, scale, Floor/Ceil,
    Cast back to int64."""
    pool = b.vectors(nonneg=True) + [v for v in b.scalars() if b.nonneg(v.elems[0])]
    if not pool:
        return False
    s = b.pick(pool)
    (f,) = b.node("Cast", [b.use(s)], to=TensorProto.FLOAT)
    scale = b.pick([1.0, 0.5, 2.0, 1.5])
    if scale != 1.0:
        (f,) = b.node("Mul", [f, b.const(scale, np.float32, scalar=True)])
    rnd = b.pick(["Floor", "Ceil", ""])
    if rnd:
        (f,) = b.node(rnd, [f])
    (out,) = b.node("Cast", [f], to=TensorProto.INT64)
    elems = [e if scale == 1.0 else b.fresh(0, int(np.ceil(scale * b.lohi(e)[1]))) for e in s.elems]
    b.add(out, TensorProto.INT64, s.shape, elems)
    return True


def op_squeeze_vec(b: Builder) -> bool:
    """Squeeze of a 1-element shape vector into a scalar (axes given or not)."""
    pool = b.vectors(length=1)
    if not pool:
        return False
    s = b.pick(pool)
    inputs = [b.use(s)] + ([b.const([b.pick([0, -1])])] if b.coin() else [])
    (out,) = b.node("Squeeze", inputs)
    b.add(out, TensorProto.INT64, (), s.elems)
    return True


def op_unsqueeze(b: Builder) -> bool:
    x = b.pick_data(any_dtype=True, max_rank=3)
    if x is None:
        return False
    if b.use_k():     # axes from the run-time input: the position of the new 1 is data
        (ax,) = b.node("Unsqueeze", ["in_k", b.const([0])])
        (out,) = b.node("Unsqueeze", [b.use(x), ax])
        hi = max([1] + [b.lohi(d)[1] for d in x.shape])
        b.add(out, x.dtype, [b.fresh(0, hi) for _ in range(len(x.shape) + 1)])
        return True
    k = b.int_(1, 2)
    r = len(x.shape) + k
    axes = b.draw(st.lists(st.integers(0, r - 1), min_size=k, max_size=k, unique=True))
    signed = [a - r if b.coin(1, 3) else a for a in axes]
    shape = list(x.shape)
    for a in sorted(axes):
        shape.insert(a, 1)
    (out,) = b.node("Unsqueeze", [b.use(x), b.axes_const(signed)])
    b.add(out, x.dtype, shape)
    return True


def op_squeeze(b: Builder) -> bool:
    x = b.pick_data(any_dtype=True, min_rank=1)
    if x is None:
        return False
    r = len(x.shape)
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    if ones and b.coin(3, 4):
        axes = b.draw(st.lists(st.sampled_from(ones), min_size=1, max_size=len(ones), unique=True))
    elif b.coin():
        axes = [b.int_(0, r - 1)]     # a dim that is 1 only in some feeds: the others must raise
    else:
        axes = None
    if axes is None:
        shape = tuple(d for d in x.shape if d != 1) if all(isinstance(d, int) for d in x.shape) else None
        (out,) = b.node("Squeeze", [b.use(x)])
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        signed = [a - r if b.coin(1, 3) else a for a in axes]
        (out,) = b.node("Squeeze", [b.use(x), b.axes_const(signed)])
    b.add(out, x.dtype, shape)
    return True


def _groups(b: Builder, r: int) -> list[list[int]]:
    """Consecutive groups of the axes 0..r-1 (a Reshape target that keeps the element count)."""
    groups: list[list[int]] = []
    for i in range(r):
        if groups and b.coin(1, 3):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def op_reshape(b: Builder) -> bool:
    x = b.pick_data(any_dtype=True)
    if x is None:
        return False
    r = len(x.shape)
    if b.use_k():     # [k, -1] or [-1, k]: fits only where k divides the element count
        name, pos = b.k_vector(2, -1)
        (out,) = b.node("Reshape", [b.use(x), name])
        hi = b.numel_hi(x.shape)
        b.add(out, x.dtype, [b.fresh(0, hi), b.fresh(0, hi)])
        return True
    groups = _groups(b, r)
    if b.coin(1, 4):      # a permutation of the groups: same element count, other order
        groups = list(b.draw(st.permutations(groups)))
    n_extra = b.int_(0, 1)     # a leading 1
    minus_one = b.int_(-1, len(groups) - 1)
    shape: list = [1] * n_extra
    for g in groups:
        d: Dim = 1
        for a in g:
            d = b.mul_dim(d, x.shape[a])
        shape.append(d)
    if b.coin(1, 3):      # a constant target: ints, one -1, and 0 (copy the input dim) where it fits
        target = [1] * n_extra
        for gi in range(len(groups)):
            p, d = n_extra + gi, shape[n_extra + gi]
            if gi == minus_one:
                target.append(-1)
            elif p < r and x.shape[p] == d and (not isinstance(d, int) or b.coin()):
                target.append(0)
            elif isinstance(d, int):
                target.append(d)
            else:
                return False
        if 0 in target or not b.coin(1, 4):
            (out,) = b.node("Reshape", [b.use(x), b.const(target)])
        else:       # no 0 in the target: allowzero changes nothing
            (out,) = b.node("Reshape", [b.use(x), b.const(target)], allowzero=1)
    else:                 # computed from Shape(x): Gather/Slice/Unsqueeze, ReduceProd, Concat
        pieces = [b.const([1] * n_extra)] if n_extra else []
        for gi, g in enumerate(groups):
            if gi == minus_one:
                pieces.append(b.const([-1]))
            elif len(g) == 1:
                pieces.append(b.use(b.dim_vec1(x, g[0])))
            else:
                s = b.shape_vec(x)
                (sl,) = b.node("Slice", [s.name, b.const([g[0]]), b.const([g[-1] + 1])])
                (pr,) = b.node("ReduceProd", [sl], keepdims=1)
                pieces.append(pr)
        if not pieces:
            target = b.const(np.zeros((0,), np.int64))
        elif len(pieces) == 1:
            target = pieces[0]
        else:
            (target,) = b.node("Concat", pieces, axis=0)
        (out,) = b.node("Reshape", [b.use(x), target])
    b.add(out, x.dtype, shape)
    return True


def op_flatten(b: Builder) -> bool:
    x = b.pick_data(any_dtype=True)
    if x is None:
        return False
    r = len(x.shape)
    axis = b.int_(-r, r)
    a = axis + r if axis < 0 else axis
    left: Dim = 1
    right: Dim = 1
    for d in x.shape[:a]:
        left = b.mul_dim(left, d)
    for d in x.shape[a:]:
        right = b.mul_dim(right, d)
    (out,) = b.node("Flatten", [b.use(x)], axis=axis)
    b.add(out, x.dtype, (left, right))
    return True


def op_transpose(b: Builder) -> bool:
    x = b.pick_data(any_dtype=True, min_rank=1)
    if x is None:
        return False
    r = len(x.shape)
    if b.coin(1, 4):
        perm = list(range(r))[::-1]
        (out,) = b.node("Transpose", [b.use(x)])
    else:
        perm = b.draw(st.permutations(range(r)))
        (out,) = b.node("Transpose", [b.use(x)], perm=list(perm))
    b.add(out, x.dtype, [x.shape[p] for p in perm])
    return True


def op_identity(b: Builder) -> bool:
    x = b.pick_data(any_dtype=True)
    if x is None:
        return False
    (out,) = b.node("Identity", [b.use(x)])
    b.add(out, x.dtype, x.shape)
    return True


def op_concat_data(b: Builder) -> bool:
    x = b.pick_data(any_dtype=True, min_rank=1)
    if x is None:
        return False
    r = len(x.shape)
    axis = b.int_(0, r - 1)

    def fits(v: Val) -> bool:
        return len(v.shape) == r and all(v.shape[i] == x.shape[i] for i in range(r) if i != axis)
    pool = [v for v in b.data(r, r, x.dtype) if fits(v)]
    if b.coin(1, 8):     # now and then one that fits only where the dims happen to be equal
        pool = b.data(r, r, x.dtype)
    parts = [x] + [b.pick(pool) for _ in range(b.int_(1, 2))]
    if b.coin(1, 16):    # and one of another rank: always an error, empty or not
        other = b.data(max(r - 1, 0), r + 1, x.dtype)
        wrong = [v for v in other if len(v.shape) != r]
        if not wrong:
            return False
        parts.insert(b.int_(0, len(parts)), b.pick(wrong))
        shape = [b.fresh(0, SYM_MAX) for _ in range(r)]
        (out,) = b.node("Concat", [b.use(p) for p in parts], axis=axis)
        b.add(out, x.dtype, shape)
        return True
    shapes = [p.shape for p in parts]
    total: Dim = 0
    for p in parts:
        total = b.arith_dim("Add", total, p.shape[axis])
    shape = list(x.shape)
    shape[axis] = total
    for i in range(r):
        if i != axis and len({s[i] for s in shapes}) > 1:
            shape[i] = b.fresh(0, SYM_MAX)
    if not b.small(shape):
        return False
    (out,) = b.node("Concat", [b.use(p) for p in parts], axis=axis - r if b.coin(1, 3) else axis)
    b.add(out, x.dtype, shape)
    return True


def op_gather_data(b: Builder) -> bool:
    x = b.pick_data(any_dtype=True, min_rank=1)
    if x is None:
        return False
    r = len(x.shape)
    axis = b.int_(0, r - 1)
    d = x.shape[axis]
    ranges = [v for v in b.data(1, 1, TensorProto.INT64)]
    if b.use_k():
        idx, idx_shape = "in_k", ()
    elif ranges and b.coin(1, 3):
        idx_v = b.pick(ranges)
        idx, idx_shape = b.use(idx_v), idx_v.shape
    else:
        n = max(b.lohi(d)[1], 1)
        idx_shape = b.pick([(), (1,), (2,), (2, 1), (0,)])
        vals = [b.int_(-n, n - 1) if b.coin(3, 4) else b.pick([0, -1]) for _ in range(int(np.prod(idx_shape)))]
        idx = b.const(np.array(vals, np.int64).reshape(idx_shape), scalar=True)
    shape = x.shape[:axis] + tuple(idx_shape) + x.shape[axis + 1:]
    if not b.small(shape):
        return False
    (out,) = b.node("Gather", [b.use(x), idx], axis=axis - r if b.coin(1, 3) else axis)
    b.add(out, x.dtype, shape)
    return True


SLICE_STARTS = (0, 0, 1, 2, -1, -2, -100, 100, INT64_MIN, INT64_MAX)
SLICE_ENDS = (INT64_MAX, INT64_MAX, INT64_MIN, -1, 0, 1, 2, 3, -100, 100, -2)
SLICE_STEPS = (1, 1, 1, 2, -1, -1, -2, 3)


def _index_vec(b: Builder, value_pool: list[Val]) -> tuple[str, Optional[Dim]]:
    """A 1-element int64 vector for a computed start or end: a dim (maybe minus one) or ``k``."""
    v = b.pick(value_pool)
    name, tok = b.use(v), v.elems[0]
    if v.shape == ():
        (name,) = b.node("Unsqueeze", [name, b.const([0])])
    if b.coin(1, 3):
        c = b.pick([-1, 1, -2])
        (name,) = b.node("Add", [name, b.const([c])])
        tok = b.arith_dim("Add", tok, c)
    return name, tok


def op_slice(b: Builder) -> bool:
    vecs = [v for v in b.vectors() if v.elems]
    x = b.pick_data(any_dtype=True, min_rank=1)
    on_vec = vecs and (x is None or b.coin(1, 3))
    if on_vec:
        x = b.pick(vecs)
    if x is None:
        return False
    r = len(x.shape)
    k = b.int_(1, r)
    axes = b.draw(st.lists(st.integers(0, r - 1), min_size=k, max_size=k, unique=True))
    starts = [b.pick(SLICE_STARTS) for _ in axes]
    ends = [b.pick(SLICE_ENDS) for _ in axes]
    steps = [b.pick(SLICE_STEPS) for _ in axes]
    computed: dict[int, tuple[str, str]] = {}
    dyn = [v for v in b.vectors() + b.scalars() if len(v.elems) == 1]
    if k == 1 and dyn and b.coin(1, 3):
        which = b.pick(["start", "end"])
        name, _ = _index_vec(b, dyn)
        computed[0] = (which, name)
    shape = list(x.shape)
    elems = None
    for i, a in enumerate(axes):
        d = x.shape[a]
        if isinstance(d, int) and 0 not in computed:
            shape[a] = len(spec_slice_range(d, starts[i], ends[i], steps[i]))
        elif 0 not in computed and (starts[i], ends[i], steps[i]) in ((0, INT64_MAX, 1), (INT64_MIN, INT64_MAX, 1)):
            shape[a] = d
        else:
            shape[a] = b.fresh(0, b.lohi(d)[1])
    if on_vec and 0 not in computed:
        elems = [x.elems[j] for j in spec_slice_range(len(x.elems), starts[0], ends[0], steps[0])]
    inputs = [b.use(x)]
    st_name = computed[0][1] if computed.get(0, ("",))[0] == "start" else b.const(starts)
    en_name = computed[0][1] if computed.get(0, ("",))[0] == "end" else b.const(ends)
    inputs += [st_name, en_name]
    signed_axes = [a - r if b.coin(1, 3) else a for a in axes]
    if axes != list(range(k)) or steps != [1] * k or b.coin():
        inputs.append(b.axes_const(signed_axes))
        if steps != [1] * k or b.coin():
            inputs.append(b.const(steps))
    (out,) = b.node("Slice", inputs)
    b.add(out, x.dtype, shape, elems)
    return True


def _target_vec(b: Builder, x: Val, extra_rank: int) -> tuple[str, tuple]:
    """An Expand target for x: per dim of x a 1, the dim itself (read from the shape) or a
    small constant where x has 1; ``extra_rank`` leading dims."""
    pieces, elems = [], []
    for _ in range(extra_rank):
        c = b.pick([1, 2, 3])
        pieces.append(b.const([c]))
        elems.append(c)
    for axis, d in enumerate(x.shape):
        choice = b.int_(0, 2)
        if choice == 1:
            pieces.append(b.use(b.dim_vec1(x, axis)))
            elems.append(d)
            continue
        c = b.pick([1, 2, 3]) if d == 1 and choice == 2 else d if isinstance(d, int) and choice == 2 else 1
        pieces.append(b.const([c]))
        elems.append(c)
    if not pieces:
        return b.const(np.zeros((0,), np.int64)), ()
    if len(pieces) == 1:
        return pieces[0], tuple(elems)
    (out,) = b.node("Concat", pieces, axis=0)
    return out, tuple(elems)


def op_expand(b: Builder) -> bool:
    x = b.pick_data(any_dtype=True, max_rank=3)
    if x is None:
        return False
    others = [v for v in b.data(0, 4, None) if b.surely_bcast(v.shape, x.shape) and b.small(v.shape)]
    vecs = [v for v in b.vectors(nonneg=True) if b.surely_bcast(v.elems, x.shape)]
    how = b.int_(0, 2)
    if how == 0 and others:
        y = b.pick(others)
        target, elems = b.shape_vec(y).name, y.shape
    elif how == 1 and vecs:
        v = b.pick(vecs)
        target, elems = b.use(v), v.elems
    else:
        target, elems = _target_vec(b, x, b.int_(0, 1))
    shape = b.bcast_shape([x.shape, elems])
    if shape is None or not b.small(shape):
        return False
    (out,) = b.node("Expand", [b.use(x), target])
    b.add(out, x.dtype, shape)
    return True


def op_tile(b: Builder) -> bool:
    x = b.pick_data(any_dtype=True, min_rank=1, max_rank=3)
    if x is None:
        return False
    r = len(x.shape)
    same_rank = [v for v in b.vectors(nonneg=True, length=r)]
    if b.use_k():     # a run-time repeat count (negative ones must raise)
        reps, pos = b.k_vector(r)
        shape = list(x.shape)
        shape[pos] = b.fresh(0, b.lohi(x.shape[pos])[1] * max(K_VALUES))
        (out,) = b.node("Tile", [b.use(x), reps])
        b.add(out, x.dtype, shape)
        return True
    if same_rank and b.coin(1, 3):
        v = b.pick(same_rank)
        reps, rep_elems = b.use(v), v.elems
    else:
        rep_elems = tuple(b.pick([1, 1, 2, 3, 0]) for _ in range(r))
        reps = b.const(list(rep_elems))
    shape = [b.mul_dim(d, e) for d, e in zip(x.shape, rep_elems)]
    if not b.small(shape):
        return False
    (out,) = b.node("Tile", [b.use(x), reps])
    b.add(out, x.dtype, shape)
    return True


def op_range(b: Builder) -> bool:
    if b.coin(1, 4):   # float32
        start, limit = b.pick([0.0, 0.5, -1.0, 2.0]), b.pick([3.0, 0.0, -2.5, 4.5])
        delta = b.pick([1.0, 0.5, -1.0, -0.75])
        n = max(int(np.ceil((limit - start) / delta)), 0)
        (out,) = b.node("Range", [b.const(start, np.float32, scalar=True), b.const(limit, np.float32, scalar=True),
                                  b.const(delta, np.float32, scalar=True)])
        b.add(out, TensorProto.FLOAT, (n,))
        return True
    pool = b.scalars()
    if not pool:
        return False
    lim = b.pick(pool)
    start_dyn = b.coin(1, 3)
    st_v = b.pick(pool) if start_dyn else None
    start = st_v.name if st_v is not None else b.const(b.pick([0, 0, 1, -1, 2]), scalar=True)
    delta_c = b.pick([1, 1, 2, -1, 3])
    if max(abs(x) for x in b.lohi(lim.elems[0])) > 40 or \
            (st_v is not None and max(abs(x) for x in b.lohi(st_v.elems[0])) > 40):
        return False
    if st_v is not None:
        b.use(st_v)
    (out,) = b.node("Range", [start, b.use(lim), b.const(delta_c, scalar=True)])
    b.add(out, TensorProto.INT64, (b.fresh(0, 81),))
    return True


def op_constant_of_shape(b: Builder) -> bool:
    pool = [v for v in b.vectors(nonneg=True) if b.small(v.elems)]
    if b.use_k():     # a run-time dim (negative ones must raise)
        n, fill = b.int_(1, 2), b.pick([1, 2])
        name, pos = b.k_vector(n, fill)
        s = b.add(name, TensorProto.INT64, (n,), [b.fresh(0, max(K_VALUES)) if i == pos else fill
                                                   for i in range(n)])
    elif not pool:
        return False
    else:
        s = b.pick(pool)
    kind = b.int_(0, 2)
    if kind == 0:
        (out,) = b.node("ConstantOfShape", [b.use(s)])
        dt = TensorProto.FLOAT
    else:
        dt = TensorProto.FLOAT if kind == 1 else TensorProto.INT64
        fill = np.array([b.pick([1.5, -2.0, 0.0])], np.float32) if dt == TensorProto.FLOAT \
            else np.array([b.pick([7, -1])], np.int64)
        (out,) = b.node("ConstantOfShape", [b.use(s)], value=numpy_helper.from_array(fill))
    b.add(out, dt, s.elems)
    return True


def op_split(b: Builder) -> bool:
    x = b.pick_data(any_dtype=True, min_rank=1)
    if x is None:
        return False
    r = len(x.shape)
    axis = b.int_(0, r - 1)
    d = x.shape[axis]
    how = b.int_(0, 2)
    if how == 0 or (how == 1 and not isinstance(d, int)):
        n = b.int_(1, 3)
        if isinstance(d, int) and -(-d // n) * (n - 1) > d:
            # onnxruntime's load-time shape inference makes the last chunk's dim negative
            # and then aborts the process in a consumer's std::clamp (a run-time dim is fine)
            return False
        outs = b.node("Split", [b.use(x)], n_out=n, axis=axis, num_outputs=n)
        sizes = [b.fresh(0, b.lohi(d)[1]) for _ in range(n)]
    elif how == 1:
        cuts = sorted(b.int_(0, d) for _ in range(b.int_(0, 2)))
        sizes = [q - p for p, q in zip([0] + cuts, cuts + [d])]
        outs = b.node("Split", [b.use(x), b.const(sizes)], n_out=len(sizes), axis=axis)
    else:   # split = [d - c, c] computed from the shape (raises where d < c)
        c = b.pick([0, 1, 2])
        dv = b.dim_vec1(x, axis)
        (head,) = b.node("Sub", [b.use(dv), b.const([c])])
        (split,) = b.node("Concat", [head, b.const([c])], axis=0)
        outs = b.node("Split", [b.use(x), split], n_out=2, axis=axis)
        sizes = [b.fresh(0, b.lohi(d)[1]), c]
    for o, size in zip(outs, sizes):
        shape = list(x.shape)
        shape[axis] = size
        b.add(o, x.dtype, shape)
    return True


def op_nonzero(b: Builder) -> bool:
    """NonZero of a comparison: an int64 [rank, n] tensor whose n is known only at run time
    (a node that binds a fresh symbol: what follows is planned in a later segment)."""
    x = b.pick_data(min_rank=1)
    if x is None:
        return False
    (cond,) = b.node(b.pick(["Greater", "Less"]), [b.use(x), b.const(0.0, np.float32, scalar=True)])
    (out,) = b.node("NonZero", [cond])
    b.add(out, TensorProto.INT64, (len(x.shape), b.fresh(0, b.numel_hi(x.shape))))
    return True


def op_opaque(b: Builder) -> bool:
    """A use of a value whose rank the builder does not know (Squeeze without axes, a
    reduction over run-time axes): elementwise, a full reduction to a scalar, its element
    count or its rank."""
    pool = [v for v in b.vals if v.shape is None and v.dtype == TensorProto.FLOAT]
    if not pool:
        return False
    x = b.pick(pool)
    how = b.int_(0, 3)
    if how == 0:
        (out,) = b.node(b.pick(["Neg", "Relu"]), [b.use(x)])
        b.add(out, x.dtype, None)
    elif how == 1:
        (out,) = b.node(b.pick(["ReduceSum", "ReduceMax", "ReduceL1"]), [b.use(x)], keepdims=0)
        b.add(out, x.dtype, ())
    elif how == 2:
        (out,) = b.node("Size", [b.use(x)])
        b.add(out, TensorProto.INT64, (), (b.fresh(0, MAX_ELEMS),))
    else:
        (sh,) = b.node("Shape", [b.use(x)])
        (out,) = b.node("Size", [sh])
        b.add(out, TensorProto.INT64, (), (b.fresh(0, 4),))
    return True


BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow")
UNARY = ("Neg", "Abs", "Relu", "Floor", "Sigmoid", "Sqrt", "Exp")


def _operand_like(b: Builder, x: Val) -> tuple[str, tuple]:
    """A second operand for an elementwise op with x (of x's dtype): x itself, another value
    that surely broadcasts with it (now and then one that may not), or a constant that
    broadcasts."""
    pool = b.data(0, 4, x.dtype)
    others = [v for v in pool if b.surely_bcast(v.shape, x.shape)]
    how = b.int_(0, 3)
    if how == 0:
        return b.use(x), x.shape
    if how == 1 and others:
        v = b.pick(others)
        return b.use(v), v.shape
    if how == 2 and b.coin(1, 3):
        v = b.pick(pool)
        return b.use(v), v.shape
    k = b.int_(0, len(x.shape))
    shape = tuple(d if isinstance(d, int) and b.coin() else 1 for d in x.shape[len(x.shape) - k:])
    rng = np.random.default_rng(b.int_(0, 2**16))
    if x.dtype == TensorProto.INT64:
        return b.const(rng.integers(-3, 4, size=shape), np.int64, scalar=True), shape
    vals = (rng.integers(-4, 5, size=shape) / 2).astype(np.float32)
    return b.const(vals, np.float32, scalar=True), shape


#: elementwise ops on int64 tensors (indices, shapes): no Div (a zero divisor kills
#: onnxruntime's process), no Pow
INT_BINARY = ("Add", "Sub", "Mul", "Max", "Min")


def op_binary(b: Builder) -> bool:
    x = b.pick_data(any_dtype=b.coin(1, 4))
    if x is None:
        return False
    op = b.pick(BINARY if x.dtype == TensorProto.FLOAT else INT_BINARY)
    name, shape = _operand_like(b, x)
    operands, shapes = [b.use(x), name], [x.shape, shape]
    if op in ("Max", "Min") and b.coin(1, 3):
        name3, shape3 = _operand_like(b, x)
        operands.append(name3)
        shapes.append(shape3)
    if b.coin():
        operands[0], operands[1], shapes[0], shapes[1] = operands[1], operands[0], shapes[1], shapes[0]
    out_shape = b.bcast_shape(shapes)
    if out_shape is None or not b.small(out_shape):
        return False
    (out,) = b.node(op, operands)
    b.add(out, x.dtype, out_shape)
    return True


def op_unary(b: Builder) -> bool:
    x = b.pick_data(any_dtype=b.coin(1, 4))
    if x is None:
        return False
    op = b.pick(UNARY if x.dtype == TensorProto.FLOAT else ("Neg", "Abs", "Relu"))
    (out,) = b.node(op, [b.use(x)])
    b.add(out, x.dtype, x.shape)
    return True


def op_where(b: Builder) -> bool:
    x = b.pick_data(any_dtype=b.coin(1, 4))
    if x is None:
        return False
    zero = b.const(0.0, np.float32, scalar=True) if x.dtype == TensorProto.FLOAT else b.const(0, scalar=True)
    (cond,) = b.node(b.pick(["Greater", "Less", "Equal"]), [b.use(x), zero])
    name, shape = _operand_like(b, x)
    ins, shapes = [cond, b.use(x), name], [x.shape, x.shape, shape]
    if b.coin():
        ins[1], ins[2] = ins[2], ins[1]
    out_shape = b.bcast_shape(shapes)
    if out_shape is None or not b.small(out_shape):
        return False
    (out,) = b.node("Where", ins)
    b.add(out, x.dtype, out_shape)
    return True


REDUCE = ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum")


def op_reduce(b: Builder) -> bool:
    x = b.pick_data(any_dtype=b.coin(1, 4))
    if x is None:
        return False
    r = len(x.shape)
    op = b.pick(REDUCE if x.dtype == TensorProto.FLOAT else ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"))
    keep = b.pick([0, 1])
    noop = b.coin(1, 4)
    attrs = {"keepdims": keep}
    if noop:
        attrs["noop_with_empty_axes"] = 1
    inputs = [b.use(x)]
    axes: Optional[list] = []       # [] (or no axes input): all axes, or none with noop
    how = b.int_(0, 4)
    if how in (1, 2) and r:         # constant axes, negative now and then
        axes = b.draw(st.lists(st.integers(0, r - 1), min_size=1, max_size=r, unique=True))
        inputs.append(b.axes_const([a - r if b.coin(1, 3) else a for a in axes]))
    elif how == 3:
        inputs.append(b.const(np.zeros((0,), np.int64)))
    elif how == 4 and b.coin():     # computed: Range(0, rank)
        (n,) = b.node("Size", [b.shape_vec(x).name])
        (ax,) = b.node("Range", [b.const(0, scalar=True), n, b.const(1, scalar=True)])
        inputs.append(ax)
        axes = list(range(r))
    elif how == 4 and "k" in b.iv and b.coin():   # the run-time input k: in range or not
        (ax,) = b.node("Unsqueeze", [b.use(next(v for v in b.vals if v.name == "in_k")), b.const([0])])
        inputs.append(ax)
        axes = None
    elif how == 4:                  # computed: zeros, axis 0 r times (duplicates from rank 2 on)
        (ax,) = b.node("Sub", [b.shape_vec(x).name, b.shape_vec(x).name])
        inputs.append(ax)
        axes = [0] * r if r < 2 else None
    if axes is None:
        shape = tuple(b.fresh(0, SYM_MAX) for _ in x.shape) if keep else None
    elif not axes:
        shape = x.shape if noop else (1,) * r if keep else ()
    else:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    (out,) = b.node(op, inputs, **attrs)
    b.add(out, x.dtype, shape)
    return True


OP_TABLE: dict[str, Callable[[Builder], bool]] = {
    "shape": op_shape, "size": op_size, "gather_shape": op_gather_shape, "unsqueeze_scalar": op_unsqueeze_scalar,
    "concat_shape": op_concat_shape, "shape_arith": op_shape_arith, "reduce_shape": op_reduce_shape,
    "where_shape": op_where_shape, "cast_shape": op_cast_shape, "squeeze_vec": op_squeeze_vec,
    "unsqueeze": op_unsqueeze, "squeeze": op_squeeze, "reshape": op_reshape,
    "flatten": op_flatten, "transpose": op_transpose, "identity": op_identity, "concat": op_concat_data,
    "gather": op_gather_data, "slice": op_slice, "expand": op_expand, "tile": op_tile, "range": op_range,
    "constant_of_shape": op_constant_of_shape, "split": op_split, "binary": op_binary, "unary": op_unary,
    "where": op_where, "reduce": op_reduce, "nonzero": op_nonzero, "opaque": op_opaque,
}

FAMILIES: dict[str, tuple[str, ...]] = {
    "shape": ("shape", "shape", "size", "gather_shape", "unsqueeze_scalar", "concat_shape", "shape_arith",
              "reduce_shape", "where_shape", "cast_shape", "squeeze_vec", "unsqueeze", "squeeze", "reshape",
              "reshape", "flatten", "transpose", "identity", "concat", "concat", "gather", "nonzero", "opaque"),
    "slice": ("shape", "gather_shape", "shape_arith", "cast_shape", "slice", "slice", "slice", "expand", "expand",
              "tile", "tile", "range", "range", "constant_of_shape", "constant_of_shape", "split", "split", "gather",
              "nonzero"),
    "elementwise": ("binary", "binary", "binary", "unary", "where", "reduce", "reduce", "reduce", "opaque",
                    "unsqueeze", "transpose", "expand"),
    "mixed": tuple(OP_TABLE),
}


@dataclass
class _InputSpec:
    name: str
    dims: tuple
    dtype: int = TensorProto.FLOAT


def _input_dims(draw, first: Optional[tuple]) -> tuple:
    """Declared dims of an input: symbols mostly, now and then 1 or a fixed size; a second
    input mostly broadcasts against the first (a suffix of it with ones)."""
    if first is not None and draw(st.integers(0, 3)):
        k = draw(st.integers(0, len(first)))
        suffix = first[len(first) - k:]
        return tuple(d if draw(st.integers(0, 2)) else 1 for d in suffix)
    rank = draw(st.sampled_from([1, 2, 2, 3, 3, 0]))
    return tuple(draw(st.sampled_from(SYMS + SYMS + (1, 2, 3))) for _ in range(rank))


@st.composite
def cases(draw, family: str = "mixed", min_ops: int = 1, max_ops: int = 7) -> Case:
    """A :class:`Case` of the given family (a key of ``FAMILIES``)."""
    use_k = draw(st.integers(0, 2)) == 0
    b = Builder(draw, use_k)
    first = _input_dims(draw, None)
    specs = [_InputSpec("in_x", first)]
    if draw(st.integers(0, 2)):
        specs.append(_InputSpec("in_y", _input_dims(draw, first)))
    for s in specs:
        b.inputs.append(helper.make_tensor_value_info(s.name, s.dtype, list(s.dims)))
        b.add(s.name, s.dtype, s.dims)
    if use_k:
        b.inputs.append(helper.make_tensor_value_info("in_k", TensorProto.INT64, []))
        b.add("in_k", TensorProto.INT64, (), ("k",))
    n_ops = draw(st.integers(min_ops, max_ops))
    ops = FAMILIES[family]
    tries = 0
    while len(b.ops) < n_ops and tries < 4 * n_ops:
        tries += 1
        op = draw(st.sampled_from(ops))
        mark = (len(b.nodes), len(b.inits), len(b.vals), set(b.consumed), dict(b.shape_of))
        if OP_TABLE[op](b):
            b.ops.append(op)
        else:   # roll back what a refused op added
            b.nodes, b.inits, b.vals = b.nodes[:mark[0]], b.inits[:mark[1]], b.vals[:mark[2]]
            b.consumed, b.shape_of = mark[3], mark[4]
    model = b.model()
    feeds = draw(_feed_sequence(specs, use_k))
    return Case(model, feeds, family, tuple(b.ops))


def _symbols_of(specs) -> list[str]:
    return sorted({d for s in specs for d in s.dims if isinstance(d, str)})


@st.composite
def _feed_sequence(draw, specs, use_k: bool) -> list:
    """4-6 feed dicts: the symbols bound to 0..5, one feed with a zero dim (where an input
    has a symbol), one feed repeated (a cached signature run again)."""
    syms = _symbols_of(specs)
    n = draw(st.integers(4, 6))
    bindings: list[dict] = []
    for i in range(n):
        again = draw(st.integers(-1, i - 1)) if i else -1
        if again >= 0 and draw(st.booleans()):
            bindings.append(dict(bindings[again]))
            continue
        bind = {s: draw(st.sampled_from(SYM_VALUES)) for s in syms}
        if use_k:
            bind["k"] = draw(st.sampled_from(K_VALUES))
        bindings.append(bind)
    if syms and not any(0 in [bd[s] for s in syms] for bd in bindings):
        i = draw(st.integers(0, n - 2))
        bindings[i] = {**bindings[i], draw(st.sampled_from(syms)): 0}
    if len({tuple(sorted(bd.items())) for bd in bindings}) == n:
        bindings[-1] = dict(bindings[draw(st.integers(0, n - 2))])
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    feeds = []
    for bind in bindings:
        f = {}
        for s in specs:
            shape = tuple(bind[d] if isinstance(d, str) else d for d in s.dims)
            f[s.name] = np.asarray(rng.integers(-6, 7, size=shape) / 2, dtype=np.float32)
        if use_k:
            f["in_k"] = np.array(bind["k"], np.int64)
        feeds.append(f)
    return feeds

