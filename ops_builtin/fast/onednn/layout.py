"""The channels-last layout pass: regions of a CNN run in NHWC, with one conversion at each border.

oneDNN's direct convolution kernels (like onnxruntime's NCHWc ones) read and write the
channels of a pixel contiguously; run on ONNX's NCHW they fall back to im2col + GEMM and
lose half their speed, and converting around every Conv would cost two passes over each
activation. So, as onnxruntime's NCHWc transformer does, a whole region changes layout:

* every 2-D float32 Conv / FusedConv with a constant weight becomes
  :mod:`NhwcConv <.conv>` (input and output channels-last);
* ops that do not care about the layout join the region when an input comes from it:
  elementwise activations and arithmetic (a constant operand is permuted once, a scalar
  stays, an outside 4-D operand enters through a Transpose), MaxPool / AveragePool (as
  :mod:`NhwcMaxPool / NhwcAveragePool <.pool>`), GlobalAveragePool / GlobalMaxPool (a
  mean / max over axes 1, 2), Concat along the channels (axis 3), an inference
  BatchNormalization the builtin rewrites could not fold into a conv (a Mul and an Add by
  channel constants);
* a region tensor read outside the region (or returned by the graph) gets one
  ``Transpose(perm=[0, 3, 1, 2])`` under its own name, right after its producer; a region
  input made outside one ``Transpose(perm=[0, 2, 3, 1])``. Everything else keeps its names.
  Where the model permutes itself (ConvNeXt: ``Transpose(perm=[0, 2, 3, 1])`` of a conv's
  output, a channels-last MLP, ``Transpose(perm=[0, 3, 1, 2])`` back into a residual Add),
  the permutes cancel against the region's layout: the first becomes an Identity of the
  region tensor, the second's input enters the region as it is.

Then epilogues are absorbed into the NhwcConv before them, each only where the conv's
output has no other reader: an ``Add`` of a tensor of the output's shape (a residual
branch: oneDNN's binary post-op), then an activation (``Relu``, ``Clip``, ``HardSwish``,
... and ``Mul(y, Sigmoid(y))``, SiLU). The fused node takes the place of the last node it
absorbs, so every input it reads is computed before it.

Registered with the oneDNN kernels as a :class:`~dynashape.rewrite.GraphPass` of priority 5
(after the builtin fusions, which make the FusedConv it converts); it runs only when the
library loads. It is exact: every op it keeps computes the same values on permuted operands.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from dynashape.model import Node
from dynashape.records import OpLibrary
from dynashape.ops_builtin import fusions
from dynashape.rewrite import GraphPass, GraphView, Match

from . import api
from .conv import DOMAIN, TO_NCHW, TO_NHWC
from .gemm import QDQ_AFTER, QDQ_BEFORE

#: ops with one data input whose result does not depend on the layout (extra inputs scalars)
UNARY = frozenset({"Relu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Selu", "Celu",
                   "Softplus", "Softsign", "Mish", "Gelu", "Erf", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal",
                   "Floor", "Ceil", "Round", "Sign", "Identity", "Clip", "Swish"})
#: elementwise ops with broadcasting between their inputs
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu", "Sum", "Mean"})
GLOBAL_POOLS = {"GlobalAveragePool": "ReduceMean", "GlobalMaxPool": "ReduceMax"}
POOLS = {"MaxPool": "NhwcMaxPool", "AveragePool": "NhwcAveragePool"}
CONVS = (("", "Conv"), (DOMAIN, "FusedConv"))
F32 = np.dtype(np.float32)


def _rank4(view: GraphView, name: str) -> bool:
    s = view.shape(name)
    return s is not None and len(s) == 4


def _one_element(view: GraphView, name: str) -> bool:
    """A tensor of one element (of rank <= 4): it broadcasts the same in either layout."""
    s = view.shape(name)
    return s is not None and len(s) <= 4 and all(isinstance(d, int) and d == 1 for d in s)


def _beside_qdq(view: GraphView, n: Node) -> bool:
    """A float Conv of a QDQ model (see ``gemm.beside_qdq``): it keeps NCHW and the kernel
    that sums as onnxruntime's MLAS."""
    p = view.producer(n.inputs[0])
    if p is not None and p.op_type in QDQ_BEFORE:
        return True
    return any(c.op_type in QDQ_AFTER for o in n.outputs if o for c in view.consumers(o))


def _convertible_conv(view: GraphView, n: Node) -> bool:
    if (n.domain, n.op_type) not in CONVS or not n.inputs or not _rank4(view, n.inputs[0]) or _beside_qdq(view, n):
        return False
    w = view.const(n.inputs[1]) if len(n.inputs) > 1 else None
    if w is None or w.ndim != 4 or w.dtype != F32 or view.dtype(n.inputs[0]) != F32:
        return False
    if len(n.inputs) > 2 and n.inputs[2]:
        b = view.const(n.inputs[2])
        if b is None or b.dtype != F32:
            return False
    return n.attrs.get("activation", "") in ("",) + tuple(fusions.EPILOGUES)


class _Region:
    """The pass's bookkeeping: NHWC names of region tensors, entries, new constants, nodes."""

    def __init__(self, view: GraphView):
        self.view = view
        self.nhwc: dict[str, str] = {}        # NCHW name of a region tensor -> its NHWC name
        self.original: dict[str, str] = {}    # NHWC name -> the NCHW name (shape, exit)
        self.entered: dict[str, str] = {}     # outside tensor -> NHWC name of its entry Transpose
        self.constants: dict[str, np.ndarray] = {}
        self.out: list[Node] = []

    def operand(self, name: str) -> Optional[str]:
        """The NHWC name of an operand: a region tensor's, a constant permuted once, a
        one-element tensor as it is, an outside 4-D tensor through an entry Transpose."""
        view = self.view
        if not name or name in self.nhwc:
            return self.nhwc.get(name, name)
        c = view.const(name)
        if c is not None and c.ndim <= 4 and c.size != 1:
            permuted = np.ascontiguousarray(c.reshape((1,) * (4 - c.ndim) + c.shape).transpose(TO_NHWC))
            fresh = view.fresh(f"{name}__nhwc")
            self.constants[fresh] = permuted
            return fresh
        if c is not None or _one_element(view, name):
            return name
        if not _rank4(view, name):
            return None
        if self.channels_last(name):
            return self.view.producer(name).inputs[0]   # Transpose(u, [0, 3, 1, 2]) channels-last is u
        if name not in self.entered:
            fresh = self.entered[name] = view.fresh(f"{name}__nhwc")
            self.original[fresh] = name
            self.out.append(Node(f"{name}/to_nhwc", "Transpose", "", (name,), (fresh,), {"perm": list(TO_NHWC)}))
        return self.entered[name]

    def channels_last(self, name: str) -> bool:
        """The tensor is at hand channels-last without a copy: a region tensor, or a
        ``Transpose(u, [0, 3, 1, 2])`` (u is its channels-last form)."""
        if name in self.nhwc:
            return True
        p = self.view.producer(name)
        return p is not None and _is_transpose(p, TO_NCHW) and _rank4(self.view, name)

    def outputs_of(self, n: Node) -> tuple:
        names = []
        for o in n.outputs:
            if o:
                fresh = self.nhwc[o] = self.view.fresh(f"{o}__nhwc")
                self.original[fresh] = o
                o = fresh
            names.append(o)
        return tuple(names)

    def shape(self, nhwc_name: str) -> Optional[tuple]:
        """The NCHW shape of a region tensor (as the graph before the pass knows it)."""
        original = self.original.get(nhwc_name)
        return None if original is None else self.view.shape(original)


def _is_transpose(n: Node, perm: tuple) -> bool:
    return n.op_type == "Transpose" and not n.domain and tuple(n.attrs.get("perm", ())) == perm


def _joins(region: _Region, n: Node):
    """The NHWC version of ``n`` (a node, or the nodes it becomes) if it joins the region,
    else None."""
    view = region.view
    if _is_transpose(n, TO_NHWC) and n.inputs[0] in region.nhwc:
        # the model's own NCHW -> NHWC permute of a region tensor (ConvNeXt's blocks): that is
        # the region's data already (an Identity returns it without a copy)
        return Node(n.name, "Identity", "", (region.nhwc[n.inputs[0]],), n.outputs, {})
    if _convertible_conv(view, n):
        x = region.operand(n.inputs[0])
        return Node(n.name, "NhwcConv", DOMAIN, (x,) + tuple(n.inputs[1:3]), region.outputs_of(n), dict(n.attrs))
    if not any(region.channels_last(i) for i in n.inputs if i) or n.domain not in ("", "ai.onnx") \
            or n.opset is not None:
        return None
    if n.op_type in UNARY:
        x, extra = n.inputs[0], n.inputs[1:]
        if not region.channels_last(x) or any(e and not _one_element(view, e) for e in extra):
            return None
        return Node(n.name, n.op_type, n.domain, (region.operand(x),) + tuple(extra), region.outputs_of(n),
                    dict(n.attrs))
    if n.op_type in BINARY:
        if not _rank4(view, n.outputs[0]) or any(i and (view.shape(i) is None or len(view.shape(i)) > 4)
                                                 for i in n.inputs):
            return None
        mapped = tuple(region.operand(i) for i in n.inputs)
        if any(m is None for m in mapped):
            return None
        return Node(n.name, n.op_type, n.domain, mapped, region.outputs_of(n), dict(n.attrs))
    if n.op_type in POOLS and n.inputs[0] in region.nhwc and _rank4(view, n.inputs[0]) \
            and (len(n.outputs) == 1 or not any(n.outputs[1:])) and view.dtype(n.inputs[0]) == F32:
        attrs = {k: v for k, v in n.attrs.items() if k != "storage_order"}
        return Node(n.name, POOLS[n.op_type], DOMAIN, (region.nhwc[n.inputs[0]],), region.outputs_of(n)[:1], attrs)
    if n.op_type == "BatchNormalization" and n.inputs[0] in region.nhwc:
        return _batch_norm(region, n)
    if n.op_type in GLOBAL_POOLS and n.inputs[0] in region.nhwc:
        return Node(n.name, GLOBAL_POOLS[n.op_type], "", (region.nhwc[n.inputs[0]],), region.outputs_of(n),
                    {"axes": [1, 2], "keepdims": 1}, opset=13)
    if n.op_type == "Concat" and _rank4(view, n.outputs[0]) and int(n.attrs.get("axis", 0)) in (1, -3) \
            and all(i in region.nhwc for i in n.inputs if i):
        return Node(n.name, "Concat", "", tuple(region.nhwc[i] for i in n.inputs), region.outputs_of(n),
                    {"axis": 3})
    return None


def _batch_norm(region: _Region, n: Node) -> Optional[list]:
    """An inference BatchNormalization of a region tensor as its affine map along the
    channels: ``Mul(x, scale / sqrt(var + eps))`` then ``Add(., bias - mean * that)``, both
    constants channels-last (computed in float64). None where it is not one (training mode,
    its statistics outputs read, parameters that are not constant vectors of C)."""
    view = region.view
    if n.attrs.get("training_mode", 0) or any(o for o in n.outputs[1:]) or len(n.inputs) != 5:
        return None
    params = [view.const(i) for i in n.inputs[1:]]
    shape = view.shape(n.inputs[0])
    c = shape[1] if shape is not None and len(shape) == 4 else None
    if not isinstance(c, int) or any(p is None or p.shape != (c,) for p in params) or view.dtype(n.inputs[0]) != F32:
        return None
    scale, bias, mean, var = (p.astype(np.float64) for p in params)
    a = scale / np.sqrt(var + float(n.attrs.get("epsilon", 1e-5)))
    b = bias - mean * a
    a_name, b_name = view.fresh(f"{n.name}_scale__nhwc"), view.fresh(f"{n.name}_shift__nhwc")
    region.constants[a_name] = a.astype(np.float32).reshape(1, 1, 1, c)
    region.constants[b_name] = b.astype(np.float32).reshape(1, 1, 1, c)
    scaled = view.fresh(f"{n.outputs[0]}_scaled__nhwc")
    x = region.nhwc[n.inputs[0]]
    return [Node(f"{n.name}/scale", "Mul", "", (x, a_name), (scaled,)),
            Node(n.name, "Add", "", (scaled, b_name), region.outputs_of(n)[:1])]


def _with_exits(region: _Region, nodes: list, converted: set) -> list:
    """``region.out`` with a Transpose back to NCHW, under the original name, after the
    producer of each region tensor read outside the region or returned by the graph."""
    view = region.view
    needed = set(o for o in view.outputs if o in region.nhwc)
    for n in nodes:
        if id(n) in converted:
            continue
        needed.update(i for i in n.inputs if i in region.nhwc)
        for a in n.attrs.values():   # the outer-scope reads of a subgraph
            for g in a if isinstance(a, list) else [a]:
                if hasattr(g, "outer_names"):
                    needed.update(x for x in g.outer_names() if x in region.nhwc)
    out = []
    for n in region.out:
        out.append(n)
        for o in n.outputs:
            original = region.original.get(o)
            if original in needed and region.nhwc.get(original) == o:
                out.append(Node(f"{original}/to_nchw", "Transpose", "", (o,), (original,), {"perm": list(TO_NCHW)}))
    return out


# epilogues absorbed into NhwcConv ------------------------------------------------------

def _activation(n: Node, view: GraphView) -> Optional[tuple]:
    """(epilogue name, params) of a standalone activation node, None if not one."""
    t = n.op_type
    if n.domain or t not in ("Relu", "Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "HardSigmoid", "Clip", "Gelu"):
        return None
    if t == "LeakyRelu":
        return t, [float(n.attrs.get("alpha", 0.01))]
    if t == "HardSigmoid":
        return t, [float(n.attrs.get("alpha", 0.2)), float(n.attrs.get("beta", 0.5))]
    if t == "Gelu":
        return ("GeluTanh" if n.attrs.get("approximate", "none") == "tanh" else "Gelu"), []
    if t == "Clip":
        bounds = [float(n.attrs.get("min", -np.inf)), float(n.attrs.get("max", np.inf))]
        for k, name in enumerate(n.inputs[1:3]):
            if name:
                c = view.const(name)
                if c is None or c.size != 1:
                    return None
                bounds[k] = float(c.reshape(-1)[0])
        return t, bounds
    return t, []


class _Fuser:
    """Absorbs an Add of a same-shaped tensor, then activations, into each NhwcConv."""

    def __init__(self, region: _Region, nodes: list):
        self.region = region
        self.nodes = nodes
        self.keep = set(region.view.outputs)
        self._index()

    def _index(self) -> None:
        self.consumers: dict[str, list] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    self.consumers.setdefault(i, []).append(n)

    def _only_reader(self, name: str) -> Optional[list]:
        readers = self.consumers.get(name, [])
        return None if name in self.keep or not readers else readers

    def _replace(self, gone: list, fused: Node, at: Node) -> None:
        ids = {id(n) for n in gone}
        self.nodes = [fused if n is at else n for n in self.nodes if id(n) not in ids or n is at]
        self._index()

    def run(self) -> list:
        for conv in [n for n in self.nodes if n.op_type == "NhwcConv" and n.domain == DOMAIN]:
            conv = self._residual(conv)
            self._activation(conv)
        return self.nodes

    def _same_shape(self, a: str, b: str) -> bool:
        """Both region tensors have shapes provably equal for every value of the symbols."""
        sa, sb = self.region.shape(a), self.region.shape(b)
        return sa is not None and sb is not None and len(sa) == len(sb) and all(
            Match.same_dim(x, y) for x, y in zip(sa, sb))

    def _residual(self, conv: Node) -> Node:
        y = conv.outputs[0]
        readers = self._only_reader(y)
        if readers is None or len(readers) != 1 or conv.attrs.get("activation") or len(conv.inputs) > 3:
            return conv
        add = readers[0]
        if add.op_type != "Add" or add.domain or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
            return conv
        z = add.inputs[1] if add.inputs[0] == y else add.inputs[0]
        if z not in self.region.original or not self._same_shape(z, y) or not self._same_shape(add.outputs[0], y):
            return conv
        ins = tuple(conv.inputs) + ("",) * (3 - len(conv.inputs)) + (z,)
        fused = Node(conv.name, conv.op_type, conv.domain, ins, add.outputs, dict(conv.attrs))
        self._replace([conv, add], fused, add)
        return fused

    def _activation(self, conv: Node) -> None:
        y = conv.outputs[0]
        readers = self._only_reader(y)
        if readers is None or conv.attrs.get("activation"):
            return
        if len(readers) == 1:
            act = _activation(readers[0], self.region.view)
            if act is None:
                return
            gone, last = readers, readers[0]
        elif len(readers) == 2:   # y * Sigmoid(y): SiLU
            sig = next((n for n in readers if n.op_type == "Sigmoid" and not n.domain), None)
            mul = next((n for n in readers if n.op_type == "Mul" and not n.domain), None)
            if sig is None or mul is None or set(mul.inputs) != {y, sig.outputs[0]}:
                return
            if self._only_reader(sig.outputs[0]) != [mul]:
                return
            act, gone, last = ("Swish", [1.0]), [sig, mul], mul
        else:
            return
        attrs = dict(conv.attrs, activation=act[0], activation_params=act[1])
        fused = Node(conv.name, conv.op_type, conv.domain, conv.inputs, last.outputs, attrs)
        self._replace([conv] + gone, fused, last)


def to_channels_last(view: GraphView) -> Optional[tuple]:
    """The layout pass (see the module docstring): the new node list and constants, or None
    when the graph has no convolution to convert or oneDNN is not there."""
    nodes = view.nodes
    if not any(_convertible_conv(view, n) for n in nodes) or api.library() is None:
        return None
    region = _Region(view)
    converted = set()
    for n in nodes:
        new = _joins(region, n)
        if new is not None:
            converted.add(id(n))
        if isinstance(new, list):
            region.out.extend(new)
        else:
            region.out.append(n if new is None else new)
    out = _with_exits(region, nodes, converted)
    return _without_dead_transposes(_Fuser(region, out).run(), view.outputs), region.constants


def _without_dead_transposes(nodes: list, outputs: set) -> list:
    """``nodes`` less the Transposes and Identities nothing reads any more (a model's
    NHWC -> NCHW permute whose readers now take its input)."""
    while True:
        read = set(outputs) | {i for n in nodes for i in n.inputs}
        kept = [n for n in nodes if n.op_type not in ("Transpose", "Identity") or n.domain
                or any(o in read for o in n.outputs)]
        if len(kept) == len(nodes):
            return kept
        nodes = kept


CHANNELS_LAST = GraphPass("channels_last", to_channels_last, roots=CONVS, priority=5,
                          description="2-D Conv regions in NHWC for oneDNN: Transposes at the borders, residual "
                                      "Add and activations absorbed into NhwcConv")

#: the pass as a library (imported when the rewrites first run)
lib = OpLibrary(rewrites=[CHANNELS_LAST])
