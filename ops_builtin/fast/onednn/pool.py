"""2-D MaxPool and AveragePool channels-last (NHWC), for the layout pass's regions.

``dynashape::NhwcMaxPool(X) -> Y`` and ``dynashape::NhwcAveragePool(X) -> Y`` are MaxPool-12
(one output, no Indices) and AveragePool-19 on X ``(N, H, W, C)``, Y ``(N, OH, OW, C)``,
with the attributes of those ops. Kernels: oneDNN's pooling primitive (priority 20, one per
input shape, made on first use), and the numpy reference (transposes around the builtin
pool kernels). AveragePool with ``ceil_mode`` and ``count_include_pad`` together stays on the
reference (which windows count the padding there differs between implementations).
Source: ONNX MaxPool-12, AveragePool-19; oneDNN's pooling primitive.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from dynashape.ops_builtin import fusions, nn
from dynashape.records import InferContext, OpLibrary, same_dtype
from dynashape.threads import intra_op_threads

from . import api, tiered
from .conv import TO_NCHW, TO_NHWC, _nhwc_md, nchw, nhwc
from .gemm import PRIORITY

lib = OpLibrary()

DOMAIN = fusions.DOMAIN
F32 = np.dtype(np.float32)
#: NHWC op -> (the ONNX op it is, the opset whose semantics it has)
POOLS = {"NhwcMaxPool": ("MaxPool", 12), "NhwcAveragePool": ("AveragePool", 19)}


def pool_context(ctx, as_op: str) -> InferContext:
    """The NCHW context of an NHWC pool node, at the opset its semantics come from."""
    inner = InferContext(ctx.node, POOLS[as_op][1], [nchw(ctx.shape(0))], [ctx.dtype(0)], [None],
                         symbolic=ctx.symbolic, fresh=ctx.fresh, services=ctx.services)
    inner.guards = ctx.guards
    return inner


def _shape_fn(as_op: str, infer):
    def shape(ctx):
        x = ctx.shape(0)
        if x is not None and len(x) != 4:
            ctx.fail(f"X must be 4-D (N, H, W, C), got rank {len(x)}", kind="InvalidRank")
        return [nhwc(infer(pool_context(ctx, as_op))[0])]
    shape.__doc__ = (f"{as_op}: Y (N, OH, OW, C) from X (N, H, W, C), attributes and errors as "
                     f"{POOLS[as_op][0]}-{POOLS[as_op][1]}. Source: the ONNX operator spec.")
    return shape


lib.op("NhwcMaxPool", 1, domain=DOMAIN, infer_dtype=same_dtype(0))(_shape_fn("NhwcMaxPool", nn._max_pool_shape))
lib.op("NhwcAveragePool", 1, domain=DOMAIN, infer_dtype=same_dtype(0))(
    _shape_fn("NhwcAveragePool", nn._average_pool_shape))


class PoolPlan:
    """One pool node's geometry source; its primitives per input shape are the process's
    shared ones (``reference``: the numpy kernel's plan where oneDNN is not used)."""

    opaque_to_tracing = True
    __slots__ = ("op", "attrs", "algorithm", "reference", "_attributes")

    def __init__(self, op: str, attrs: dict, algorithm, reference):
        self.op, self.attrs, self.algorithm, self.reference = op, attrs, algorithm, reference
        self._attributes = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items()))

    def _make(self, x_nchw: tuple) -> api.Primitive:
        ctx = InferContext(_Node(self.attrs, POOLS[self.op][0]), POOLS[self.op][1], [x_nchw], [F32], [None])
        geom = nn._pool_geometry(ctx, x_nchw, dilations_since=10 if self.op == "NhwcMaxPool" else 19)
        y_nchw = tuple(x_nchw[:2]) + tuple(geom.out)
        pad_r = [(o - 1) * s + (k - 1) * d + 1 - i - b for o, s, k, d, i, b in
                 zip(geom.out, geom.strides, geom.kernel, geom.dilations, x_nchw[2:], geom.pads_begin)]
        src, dst = _nhwc_md(x_nchw), _nhwc_md(y_nchw)
        return api.make_primitive("dnnl_pooling_forward_primitive_desc_create", (api.ARG_SRC, api.ARG_DST),
                                  (src, dst), api.FORWARD_INFERENCE, self.algorithm, src.handle, dst.handle,
                                  api.dims_of(geom.strides), api.dims_of(geom.kernel),
                                  api.dims_of([d - 1 for d in geom.dilations]), api.dims_of(geom.pads_begin),
                                  api.dims_of(pad_r), None)

    def primitive(self, x_nchw: tuple, threads: int) -> Optional[api.Primitive]:
        """The pool for this input shape, None until it is made (:mod:`.tiered`)."""
        return tiered.primitive(("pool", self.op, self.algorithm, self._attributes, x_nchw, threads), self._make,
                                x_nchw, threads=threads)


class _Node:
    """The attributes of a pool node, as an InferContext reads them (a new shape's geometry)."""

    __slots__ = ("attrs", "name", "op_type", "outputs")

    def __init__(self, attrs: dict, op_type: str):
        self.attrs, self.name, self.op_type, self.outputs = attrs, "", op_type, ("Y",)


def _reference(as_op: str):
    prepare, kernel = {"NhwcMaxPool": (nn._max_pool_prepare, nn._max_pool),
                       "NhwcAveragePool": (nn._average_pool_prepare, nn._average_pool)}[as_op]

    def reference_prepare(ctx):
        return prepare(pool_context(ctx, as_op))

    def reference(inputs, outputs, plan):
        x = np.ascontiguousarray(inputs[0].transpose(TO_NCHW))
        y = np.empty(nchw(outputs[0].shape), outputs[0].dtype)
        kernel([x], [y], plan)
        outputs[0][...] = y.transpose(TO_NHWC)
    return reference_prepare, reference


def _algorithm(ctx, as_op: str):
    """oneDNN's pooling algorithm for the node, None where the reference must run."""
    if as_op == "NhwcMaxPool":
        return api.POOLING["max"]
    if ctx.attr("count_include_pad", 0):
        return None if ctx.attr("ceil_mode", 0) else api.POOLING["avg_include_padding"]
    return api.POOLING["avg_exclude_padding"]


def _register(as_op: str) -> None:
    reference_prepare, reference = _reference(as_op)
    lib.kernel(as_op, domain=DOMAIN, dtypes=[np.float32, np.float64], prepare=reference_prepare)(reference)

    def accepts(ctx) -> bool:
        return ctx.dtype(0) == F32 and api.library() is not None

    def prepare(ctx) -> PoolPlan:
        algorithm = _algorithm(ctx, as_op)
        return PoolPlan(as_op, dict(ctx.node.attrs), algorithm,
                        reference_prepare(ctx) if algorithm is None else None)

    def compute(inputs, outputs, plan: PoolPlan):
        x, y = inputs[0], outputs[0]
        if plan.reference is not None or x.size == 0 or y.size == 0 or not x.flags.c_contiguous:
            reference(inputs, outputs, plan.reference if plan.reference is not None
                      else reference_prepare(_concrete(x, plan)))
            return
        threads = intra_op_threads()
        prim = plan.primitive(nchw(x.shape), threads)
        if prim is None:
            reference(inputs, outputs, reference_prepare(_concrete(x, plan)))
            return
        api.set_threads(threads)
        prim.execute((x, y), plan)

    lib.kernel(as_op, domain=DOMAIN, dtypes=[np.float32], priority=PRIORITY, accepts=accepts,
               prepare=prepare)(compute)


def _concrete(x: np.ndarray, plan: PoolPlan) -> InferContext:
    """A context for the reference kernel's plan of this input (the rare shapes oneDNN's
    path does not take: empty or non-contiguous inputs)."""
    return InferContext(_Node(plan.attrs, plan.op), 1, [x.shape], [x.dtype], [None])


for _op in POOLS:
    _register(_op)
