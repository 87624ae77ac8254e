"""A Scan body whose iterations are independent, rewritten to run every iteration at once.

A Scan whose states pass through the body unchanged (each state output is its state input,
through Identity nodes at most) is a map over the scan axis: iteration ``t`` reads the states
and slice ``t`` of each scan input, and writes slice ``t`` of each scan output.
scikit-learn's pairwise distances (skl2onnx's ``cdist``: k-nearest neighbours, Gaussian
processes) are such Scans, with one body run per training row. :func:`vectorize_body` gives
the body with a leading iteration axis on every value that depends on the scan inputs (the
"batched" values), so that one run over ``(length, ...)`` scan inputs computes every
iteration's outputs, stacked on axis 0, as the Scan would (the transformation ``jax.vmap``
makes, for the ops below):

* elementwise ops (unary; binary, ``Where`` and variadic with broadcasting): a batched input
  whose rank is below the node's broadcast rank gets its iteration axis kept first with an
  ``Unsqueeze`` after it; the others broadcast as before (right-aligned);
* reductions (``Reduce*``, ``ArgMax``/``ArgMin``): their axes move one place right (a
  reduction over every axis names them all, so that the iteration axis stays);
* ``Identity``, ``Cast``, ``CastLike``: as they are.

Nodes that read no batched value stay as they are (loop-invariant). Any other op reading a
batched value, a subgraph attribute, a rank that is not known, or a state that changes makes
:func:`vectorize_body` return None: the Scan then runs its body once per iteration.

Source: ONNX operator spec, Scan-9..25 (the body's semantics), Broadcasting.md.
"""
from __future__ import annotations

import itertools
from typing import NamedTuple, Optional, Sequence

import numpy as np
from dynashape.model import SYMBOLIC, DimSpec, Graph, Node, ValueInfo

UNARY = frozenset({
    "Abs", "Neg", "Sqrt", "Exp", "Log", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Relu", "Sigmoid", "Tanh",
    "Erf", "Not", "IsNaN", "IsInf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
    "Atanh", "Softplus", "Softsign", "Elu", "Selu", "LeakyRelu", "ThresholdedRelu", "HardSigmoid", "HardSwish",
    "Celu", "Mish", "Gelu", "BitwiseNot", "Clip",
})
#: elementwise ops whose inputs broadcast together (Clip's min / max are scalars: any rank works)
BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where", "BitShift", "BitwiseAnd", "BitwiseOr",
    "BitwiseXor",
})
PASSING = frozenset({"Identity", "Cast", "CastLike"})
REDUCTIONS = frozenset({
    "ReduceSum", "ReduceSumSquare", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp",
})
ARG_REDUCTIONS = frozenset({"ArgMax", "ArgMin"})
#: the opset from which each reduction takes its axes as an input (before: the attribute)
AXES_INPUT_SINCE = {"ReduceSum": 13}
AXES_INPUT_SINCE_OTHERS = 18


class VectorBody(NamedTuple):
    """The body run over every iteration at once: ``graph``'s inputs are the states and then
    the whole scan inputs (iteration axis first); its outputs are the scan outputs, stacked
    on axis 0 where ``batched[j]``, else the one value every iteration gives."""

    graph: Graph
    batched: tuple


class _Unsupported(Exception):
    """The body cannot be vectorized (the Scan runs it per iteration)."""


def vectorize_body(body: Graph, n_states: int, ranks: Sequence[Optional[int]], opset: int,
                   outer_ranks: Optional[dict] = None) -> Optional[VectorBody]:
    """The body over all iterations at once, or None where it cannot be (module docstring).

    Args:
        body: the Scan's body (``n_states`` states, then the scan inputs' slices).
        ranks: the rank of each body input (a state's, or a scan input's slice's; None: unknown).
        opset: the default domain's opset of the model (the form of Unsqueeze and the axes).
        outer_ranks: ranks of the outer-scope values the body reads, where known.
    """
    try:
        return _Vectorizer(body, n_states, ranks, opset, outer_ranks or {}).run()
    except _Unsupported:
        return None


class _Vectorizer:
    def __init__(self, body: Graph, n_states: int, ranks, opset: int, outer_ranks: dict):
        self.body, self.n, self.opset = body, n_states, opset
        self.rank: dict = dict(outer_ranks)
        self.rank.update({name: np.ndim(a) for name, a in body.initializers.items()})
        self.batched: set = set()
        for k, (vi, r) in enumerate(zip(body.inputs, ranks)):
            self.rank[vi.name] = r if r is not None else vi.rank
            if k >= n_states:
                self.batched.add(vi.name)
        self.nodes: list = []
        self.constants: dict = {}
        self._names = itertools.count()
        self._taken = {v.name for v in body.inputs} | set(body.initializers) | \
            {o for nd in body.nodes for o in nd.outputs}

    def run(self) -> VectorBody:
        body, n = self.body, self.n
        source = {o: nd.inputs[0] for nd in body.nodes if nd.op_type == "Identity" and nd.inputs for o in nd.outputs}
        for j in range(n):
            name = body.outputs[j].name
            while name in source:
                name = source[name]
            if name != body.inputs[j].name:
                raise _Unsupported(f"state {j} changes")
        for nd in body.nodes:
            self._node(nd)
        scan_outputs = body.outputs[n:]
        inputs = list(body.inputs[:n]) + [_with_iteration_axis(vi) for vi in body.inputs[n:]]
        outputs = [ValueInfo(vi.name, vi.elem_type, None) for vi in scan_outputs]
        graph = Graph(f"{body.name or 'body'}_vectorized", self.nodes, inputs, outputs,
                      {**body.initializers, **self.constants}, {}, origin=None)
        return VectorBody(graph, tuple(vi.name in self.batched for vi in scan_outputs))

    # --- nodes -----------------------------------------------------------------------
    def _node(self, nd: Node) -> None:
        if any(isinstance(a, Graph) or (isinstance(a, list) and a and isinstance(a[0], Graph))
               for a in nd.attrs.values()):
            raise _Unsupported("a subgraph attribute")
        reads = [i for i in nd.inputs if i and i in self.batched]
        if not reads:
            self.nodes.append(nd)
            self._set(nd.outputs, self._plain_rank(nd), batched=False)
            return
        if nd.domain not in ("", "ai.onnx"):
            raise _Unsupported(nd.op_type)
        op = nd.op_type
        if op in UNARY or op in PASSING:
            if reads != [nd.inputs[0]]:   # (a batched Clip bound or CastLike target: not elementwise on X)
                raise _Unsupported(f"{op} with a batched input other than its first")
            self._ranks_known([nd.inputs[0]])
            self.nodes.append(nd)
            self._set(nd.outputs[:1], self.rank[nd.inputs[0]], batched=True)
        elif op in BROADCASTING:
            self._broadcasting(nd)
        elif op in REDUCTIONS:
            self._reduction(nd)
        elif op in ARG_REDUCTIONS:
            self._arg_reduction(nd)
        else:
            raise _Unsupported(op)

    def _plain_rank(self, nd: Node) -> Optional[int]:
        """A loop-invariant node's output rank, where the rules below know it (else None)."""
        op = nd.op_type
        if op in UNARY or op in PASSING:
            return self.rank.get(nd.inputs[0])
        if op in BROADCASTING:
            ranks = [self.rank.get(i) for i in nd.inputs if i]
            return None if None in ranks else max(ranks)
        return None

    def _set(self, names, rank: Optional[int], batched: bool) -> None:
        for o in names:
            if o:
                self.rank[o] = rank
                if batched:
                    self.batched.add(o)

    def _ranks_known(self, names) -> list:
        ranks = [self.rank.get(i) for i in names]
        if None in ranks:
            raise _Unsupported("a rank that is not known")
        return ranks

    def _broadcasting(self, nd: Node) -> None:
        names = [i for i in nd.inputs]
        ranks = self._ranks_known([i for i in names if i])
        top = max(ranks)
        new_inputs = []
        for name in names:
            if name and name in self.batched and self.rank[name] < top:
                name = self._unsqueezed(name, top - self.rank[name])
            new_inputs.append(name)
        self.nodes.append(Node(nd.name, nd.op_type, nd.domain, tuple(new_inputs), nd.outputs, dict(nd.attrs),
                               nd.opset))
        self._set(nd.outputs[:1], top, batched=True)

    def _unsqueezed(self, name: str, count: int) -> str:
        """``name`` (batched) with ``count`` axes of 1 after its iteration axis."""
        out = self._fresh(f"{name}_aligned")
        axes = list(range(1, count + 1))
        if self.opset >= 13:
            const = self._constant(np.asarray(axes, np.int64), f"{name}_axes")
            self.nodes.append(Node(f"{out}_node", "Unsqueeze", "", (name, const), (out,), {}))
        else:
            self.nodes.append(Node(f"{out}_node", "Unsqueeze", "", (name,), (out,), {"axes": axes}))
        self.batched.add(out)
        self.rank[out] = self.rank[name] + count
        return out

    def _reduction(self, nd: Node) -> None:
        (r,) = self._ranks_known([nd.inputs[0]])
        from_input = len(nd.inputs) > 1 and bool(nd.inputs[1])
        if from_input:
            if nd.inputs[1] in self.batched or nd.inputs[1] not in self.body.initializers:
                raise _Unsupported("axes that are not a constant")
            axes = [int(a) for a in np.asarray(self.body.initializers[nd.inputs[1]]).reshape(-1)]
        else:
            axes = list(nd.attrs.get("axes") or [])
        if not axes and int(nd.attrs.get("noop_with_empty_axes", 0)):
            self.nodes.append(nd)     # (no axes: the input as it is, batched or not)
            self._set(nd.outputs[:1], r, batched=True)
            return
        axes = list(range(r)) if not axes else axes
        if any(not -r <= a < r for a in axes):
            raise _Unsupported("an axis out of range")
        shifted = sorted({a % r + 1 for a in axes})
        keep = int(nd.attrs.get("keepdims", 1))
        attrs = dict(nd.attrs)
        inputs = list(nd.inputs)
        since = AXES_INPUT_SINCE.get(nd.op_type, AXES_INPUT_SINCE_OTHERS)
        if self.opset >= since:
            attrs.pop("axes", None)
            inputs = [inputs[0], self._constant(np.asarray(shifted, np.int64), f"{nd.name}_axes")]
        else:
            attrs["axes"] = shifted
            inputs = inputs[:1]
        self.nodes.append(Node(nd.name, nd.op_type, nd.domain, tuple(inputs), nd.outputs, attrs, nd.opset))
        self._set(nd.outputs[:1], r if keep else r - len(shifted), batched=True)

    def _arg_reduction(self, nd: Node) -> None:
        (r,) = self._ranks_known([nd.inputs[0]])
        axis = int(nd.attrs.get("axis", 0))
        if not -r <= axis < r:
            raise _Unsupported("an axis out of range")
        attrs = dict(nd.attrs, axis=axis % r + 1)
        self.nodes.append(Node(nd.name, nd.op_type, nd.domain, nd.inputs, nd.outputs, attrs, nd.opset))
        self._set(nd.outputs[:1], r if int(nd.attrs.get("keepdims", 1)) else r - 1, batched=True)

    # --- names -----------------------------------------------------------------------
    def _fresh(self, hint: str) -> str:
        while True:
            name = f"{hint}__vec{next(self._names)}"
            if name not in self._taken:
                self._taken.add(name)
                return name

    def _constant(self, value: np.ndarray, hint: str) -> str:
        name = self._fresh(hint)
        self.constants[name] = value
        self.rank[name] = value.ndim
        return name


def _with_iteration_axis(vi: ValueInfo) -> ValueInfo:
    """A scan input's declared slice with the iteration axis (a dim of its own) in front."""
    dims = None if vi.dims is None else (DimSpec(SYMBOLIC, f"{vi.name}__iterations"),) + tuple(vi.dims)
    return ValueInfo(vi.name, vi.elem_type, dims, vi.value_type, vi.elem_dims)
