"""2-D convolution in the channels-last layout (NHWC), the layout oneDNN's direct kernels read.

``dynashape::NhwcConv(X, W, B?, Z?)`` is Conv-11 on a channels-last X ``(N, H, W, C)`` with
the output channels-last too ``(N, OH, OW, M)``; W stays in ONNX's ``(M, C/group, KH, KW)``.
Optional ``Z`` (the output's shape) is added before the activation (a residual branch), and
``activation`` / ``activation_params`` name the epilogue as in FusedConv. The layout pass
(:mod:`.layout`) makes these nodes from Conv / FusedConv; no model contains them.

Kernels:

* oneDNN (priority 20): the weights reordered once into the blocked layout the primitive
  chooses (``prepack``), then per input shape one primitive (brgconv, brdgmm depthwise, the
  1x1 kernels; made on first use and kept with the weights) with bias, residual (a binary
  add) and activation as post-ops: one pass over the output. Measured against onnxruntime's
  NCHWc kernels in ``benchmarks/kernels.py``.
* numpy (priority 0, the reference and fallback): transposes around the builtin Conv kernel.

Source: ONNX Conv-11; oneDNN's convolution primitive
(https://oneapi-src.github.io/oneDNN/dev_guide_convolution.html).
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np
from dynashape.ops_builtin import fusions, nn
from dynashape.records import InferContext, OpLibrary, same_dtype
from dynashape.threads import intra_op_threads

from . import api, tiered
from .gemm import ACTIVATIONS, PRIORITY, eltwise_post_ops, weight_memory

lib = OpLibrary()

DOMAIN = fusions.DOMAIN
F32 = np.dtype(np.float32)
#: NHWC axis of each NCHW axis, and back
TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
#: input shapes kept per packed weight (each a primitive)
MAX_PRIMITIVES = 32
#: a new input shape of a convolution of at most this many multiply-adds runs the numpy
#: convolution (on the weights copied back out of oneDNN's layout) while its primitive is made
#: in the background (:mod:`.tiered`); a larger one makes its primitive on the run path. Below
#: it numpy costs no more than making the primitive and running it (one thread, AVX2 EPYC:
#: 3x3 convs of 0.6 / 2.4 / 9.4 M multiply-adds 0.3 / 0.4 / 0.9-1.5 ms in numpy against
#: 0.9 / 1.5 / 1.2-3.3 ms; 512 channels on a 2 x 2 image, whose weights want a layout of
#: their own, 3.8 against 16 ms)
NUMPY_FIRST_MACS = 1 << 23
#: a weight of at most this many bytes is kept as given until its first primitive run (a larger
#: one is released at the session's start: its convolutions rarely take the numpy path, whose
#: multiply-adds are at most NUMPY_FIRST_MACS)
KEEP_GIVEN_WEIGHTS_BYTES = 1 << 20


def nchw(shape):
    """The NCHW order of an NHWC shape (None stays None)."""
    return None if shape is None else (shape[0], shape[3], shape[1], shape[2])


def nhwc(shape):
    """The NHWC order of an NCHW shape."""
    return None if shape is None else (shape[0], shape[2], shape[3], shape[1])


def conv_context(ctx) -> InferContext:
    """The NCHW Conv context of an NhwcConv node (its X and Z read as NCHW); inference run
    on it states its guards on ``ctx`` too."""
    shapes = [nchw(ctx.shape(0))] + [ctx.shape(i) for i in (1, 2)]
    inner = InferContext(ctx.node, 11, shapes, [ctx.dtype(i) for i in range(3)],
                         [ctx.value(i) for i in range(3)], symbolic=ctx.symbolic, fresh=ctx.fresh,
                         services=ctx.services)
    inner.guards = ctx.guards
    return inner


@lib.op("NhwcConv", 1, domain=DOMAIN, infer_dtype=same_dtype(0))
def _nhwc_conv_shape(ctx):
    """NhwcConv: Y (N, OH, OW, M) from X (N, H, W, C), W (M, C/group, KH, KW), B (M,), Z of
    Y's shape; attributes and errors as Conv-11 (2-D only) plus FusedConv's activation.
    Source: ONNX Conv-11."""
    x = ctx.shape(0)
    if x is not None and len(x) != 4:
        ctx.fail(f"X must be 4-D (N, H, W, C), got rank {len(x)}", kind="InvalidRank")
    fusions.epilogue(ctx)
    y = nn._conv_shape(conv_context(ctx))[0]
    y = nhwc(y)
    if ctx.has_input(3) and y is not None and ctx.shape(3) is not None:
        z = ctx.shape(3)
        if len(z) != 4 or not all(ctx.assume(a, "==", b) for a, b in zip(z, y)):
            ctx.fail(f"Z must have the output's shape {tuple(y)}, got {tuple(z)}", kind="ShapeMismatch")
    return [y]


# the numpy reference -----------------------------------------------------------------

class _Reference(NamedTuple):
    conv: object
    epilogue: Optional[fusions.Epilogue]


def _reference_prepare(ctx) -> _Reference:
    return _Reference(nn._conv_prepare(conv_context(ctx)), fusions.epilogue(ctx))


@lib.kernel("NhwcConv", domain=DOMAIN, dtypes=[np.float32, np.float64], prepare=_reference_prepare)
def _nhwc_conv_reference(inputs, outputs, p: _Reference):
    x = np.ascontiguousarray(inputs[0].transpose(TO_NCHW))
    y = np.empty(p.conv.out_shape, x.dtype)
    nn._conv([x, inputs[1], inputs[2] if len(inputs) > 2 else None], [y], p.conv)
    if len(inputs) > 3 and inputs[3] is not None:
        y += inputs[3].transpose(TO_NCHW)
    if p.epilogue is not None:
        p.epilogue(y)
    outputs[0][...] = y.transpose(TO_NHWC)


# oneDNN ------------------------------------------------------------------------------

def _nhwc_md(dims_nchw) -> api.MemoryDesc:
    """A descriptor with NCHW dims over channels-last (contiguous NHWC) memory."""
    n, c, h, w = (int(d) for d in dims_nchw)
    return api.MemoryDesc((n, c, h, w), strides=(h * w * c, 1, w * c, c))


class PackedConv:
    """A constant 2-D Conv weight in oneDNN's layout, its bias and epilogue, and the
    primitives made for it per (input shape, threads)."""

    opaque_to_tracing = True
    __slots__ = ("attrs", "group", "m", "c", "kernel", "bias", "post_ops", "epilogue", "residual", "weights",
                 "_primitives", "_numpy_path", "_given", "__weakref__")

    def __init__(self, ctx):
        w = ctx.value(1)
        self.attrs = dict(ctx.node.attrs)
        self.group = int(ctx.attr("group", 1))
        self.m, cg, kh, kw = (int(d) for d in w.shape)
        self.c = cg * self.group
        self.kernel = (kh, kw)
        b = ctx.value(2) if ctx.has_input(2) else None
        self.bias = None if b is None else np.ascontiguousarray(b, dtype=F32).reshape(self.m)
        self.residual = ctx.has_input(3)
        self.post_ops = eltwise_post_ops(ctx.attr("activation", ""), ctx.attr("activation_params", []))
        self.epilogue = fusions.epilogue(ctx)
        self._primitives = api.PrimitiveCache(MAX_PRIMITIVES)
        #: (plain weights, {input shape: numpy conv plan}) while runs take the numpy path
        #: (new shapes whose primitives are being made): dropped at the next primitive run
        self._numpy_path: Optional[tuple] = None
        #: the weights as the graph gave them, while small, for the numpy path of the first runs
        #: (copying them back out of oneDNN's layout costs a ResNet's first run ~2-4 ms):
        #: dropped at the first primitive run
        self._given: Optional[np.ndarray] = w if w.dtype == F32 and w.nbytes <= KEEP_GIVEN_WEIGHTS_BYTES else None
        dims = self._weight_dims()
        # (a ResNet's blocks of one shape share one probe)
        probe_shape = self._probe_shape(ctx.shape(0))
        probe = api.shared(("conv-probe",) + self._key(probe_shape), self._probe, probe_shape)
        strides = [int(np.prod(dims[i + 1:])) for i in range(len(dims))]
        self.weights = api.PackedWeights(api.MemoryDesc(dims, strides=strides), np.ascontiguousarray(w, dtype=F32),
                                         probe.mds[1], weight_memory(ctx))

    def _weight_dims(self) -> tuple:
        kh, kw = self.kernel
        if self.group == 1:
            return (self.m, self.c, kh, kw)
        return (self.group, self.m // self.group, self.c // self.group, kh, kw)

    def _probe(self, x_nchw: tuple) -> api.Primitive:
        """A conv over ``x_nchw`` with the weight's layout left to oneDNN (never executed:
        only the layout it chose is read)."""
        return self._make(x_nchw, api.MemoryDesc(self._weight_dims(), tag=api.ANY))

    def _probe_shape(self, x_nhwc) -> tuple:
        """An NCHW input shape for choosing the weights' layout: X's dims where they are
        ints (an SE block's 1 x 1), else a size that fits the kernel."""
        strides = self.attrs.get("strides", [1, 1])
        dil = self.attrs.get("dilations", [1, 1])
        side = max(16, *((k - 1) * d + 1 + 2 * s for k, d, s in zip(self.kernel, dil, strides)))
        h, w = (x_nhwc[1], x_nhwc[2]) if x_nhwc is not None else (None, None)
        return (1, self.c, h if isinstance(h, int) and h > 0 else side, w if isinstance(w, int) and w > 0 else side)

    def _geometry(self, x_nchw: tuple) -> tuple:
        """(strides, dilations as oneDNN counts them, pads begin, pads end, output NCHW dims)."""
        ctx = InferContext(_Node(self.attrs), 11, [x_nchw, (self.m, self.c // self.group) + self.kernel, None],
                           [F32] * 3, [None] * 3)
        geom = nn._window_geometry(ctx, x_nchw[2:], self.kernel)
        return (tuple(geom.strides), tuple(d - 1 for d in geom.dilations), geom.pads_begin, geom.pads_end,
                (x_nchw[0], self.m) + tuple(geom.out))

    def _make(self, x_nchw: tuple, weights: api.MemoryDesc) -> api.Primitive:
        strides, dilates, pad_l, pad_r, y_nchw = self._geometry(x_nchw)
        src, dst = _nhwc_md(x_nchw), _nhwc_md(y_nchw)
        post_ops = ((("binary", "add", dst),) if self.residual else ()) + self.post_ops
        attr = api.post_ops_attr(post_ops)
        bias = None if self.bias is None else api.MemoryDesc((self.m,), strides=(1,))
        args = [api.ARG_SRC, api.ARG_WEIGHTS, api.ARG_DST] + ([api.ARG_BIAS] if bias is not None else [])
        mds = [src, weights, dst] + ([bias] if bias is not None else [])
        args += [arg for arg, _ in attr.binary_mds]
        mds += [md for _, md in attr.binary_mds]
        prim = api.make_primitive("dnnl_convolution_forward_primitive_desc_create", args, mds,
                                  api.FORWARD_INFERENCE, api.CONVOLUTION_DIRECT, src.handle, weights.handle,
                                  None if bias is None else bias.handle, dst.handle, api.dims_of(strides),
                                  api.dims_of(dilates), api.dims_of(pad_l), api.dims_of(pad_r), attr.handle)
        prim.mds = (src, prim.queried(api.QUERY_WEIGHTS, self._weight_dims())) + prim.mds[2:]
        return prim

    def primitive(self, x_nchw: tuple, threads: int) -> tuple:
        """(primitive, pointer of the weights in the layout it reads) for an input shape."""
        return self._primitives.get((x_nchw, threads), self._packed_primitive, x_nchw, threads)

    def _key(self, x_nchw: tuple) -> tuple:
        """What a primitive for this input shape depends on, but the weights' layout and the threads."""
        strides, dilates, pad_l, pad_r, _ = self._geometry(x_nchw)
        return (x_nchw, self.m, self.c, self.group, self.kernel, strides, dilates, tuple(pad_l), tuple(pad_r),
                self.post_ops, self.residual, self.bias is not None)

    def _packed_primitive(self, x_nchw: tuple, threads: int) -> tuple:
        conv = self._key(x_nchw)

        def make(md: api.MemoryDesc) -> api.Primitive:
            return api.shared(("conv", conv, md, threads), self._make, x_nchw, md)
        return self.weights.primitive(make)

    def run(self, x: np.ndarray, y: np.ndarray, z: Optional[np.ndarray]) -> None:
        """y (N, OH, OW, M) = epilogue(conv(x (N, H, W, C)) + bias [+ z]); x, y, z contiguous."""
        if x.size == 0 or y.size == 0:
            if y.size:
                y[...] = 0   # no input pixels: the bias and epilogue of 0 (kept simple: as numpy)
            return
        threads = intra_op_threads()
        x_nchw = nchw(x.shape)
        made = self._primitives.peek((x_nchw, threads))
        if made is None:
            small = y.size * (self.c // self.group) * math.prod(self.kernel) <= NUMPY_FIRST_MACS
            made = (tiered.primitive((x_nchw, threads), self._packed_primitive, x_nchw, threads, threads=threads,
                                     cache=self._primitives) if small else self.primitive(x_nchw, threads))
        if made is None or made is tiered.UNAVAILABLE:
            self._run_numpy(x, y, z, x_nchw)
            return
        self._numpy_path = self._given = None
        api.set_threads(threads)
        prim, weights = made
        values = [x, weights, y]
        if self.bias is not None:
            values.append(self.bias)
        if self.residual:
            values.append(z)
        prim.execute(values, self)

    def _plain_weights(self) -> np.ndarray:
        """A copy of the weights in their plain layout (:meth:`_weight_dims`)."""
        dims = self._weight_dims()
        md, buf, pointer = self.weights.layouts[0]
        blocking = md.blocking()
        if blocking is not None:
            return blocking.plain_copy(buf.view(F32), dims)
        plain = np.empty(dims, F32)
        api.reorder(md, api.MemoryDesc(dims, strides=[s // F32.itemsize for s in plain.strides]), pointer,
                    plain.ctypes.data)
        return plain

    def _run_numpy(self, x: np.ndarray, y: np.ndarray, z: Optional[np.ndarray], x_nchw: tuple) -> None:
        """The numpy convolution on the weights copied back into their plain layout."""
        if self._numpy_path is None:
            given = self._given
            plain = given if given is not None else self._plain_weights()
            self._numpy_path = (plain.reshape((self.m, self.c // self.group) + self.kernel), {})
        w, plans = self._numpy_path
        plan = plans.get(x_nchw)
        if plan is None:
            ctx = InferContext(_Node(self.attrs), 11, [x_nchw, w.shape, None if self.bias is None else self.bias.shape],
                               [F32] * 3, [None] * 3)
            plan = plans[x_nchw] = nn._conv_prepare(ctx)
        out = np.empty(plan.out_shape, F32)
        nn._conv([np.ascontiguousarray(x.transpose(TO_NCHW)), w, self.bias], [out], plan)
        if z is not None:
            out += z.transpose(TO_NCHW)
        if self.epilogue is not None:
            self.epilogue(out)
        y[...] = out.transpose(TO_NHWC)


class _Node:
    """The attributes of a node, as an InferContext reads them (geometry of a new shape)."""

    __slots__ = ("attrs", "name", "op_type", "outputs")

    def __init__(self, attrs: dict):
        self.attrs, self.name, self.op_type, self.outputs = attrs, "", "Conv", ("Y",)


def _accepts(ctx) -> bool:
    w, x = ctx.value(1), ctx.shape(0)
    if w is None or w.dtype != F32 or w.ndim != 4 or ctx.dtype(0) != F32 or x is None or len(x) != 4:
        return False
    if ctx.has_input(2):
        b = ctx.value(2)
        if b is None or b.dtype != F32:
            return False
    if ctx.attr("activation", "") not in ("",) + tuple(ACTIVATIONS):
        return False
    return api.library() is not None


def _prepack(ctx) -> Optional[PackedConv]:
    try:
        return PackedConv(ctx)
    except api.OneDNNError:
        return None   # no oneDNN implementation: the weights stay, prepare makes the reference plan


class _Plan(NamedTuple):
    packed: Optional[PackedConv]
    reference: Optional[_Reference]


def _prepare(ctx) -> _Plan:
    packed = ctx.prepacked
    if packed is None and ctx.value(1) is not None:
        packed = _prepack(ctx)
    return _Plan(packed, None if packed is not None else _reference_prepare(ctx))


@lib.kernel("NhwcConv", domain=DOMAIN, dtypes=[np.float32], priority=PRIORITY, accepts=_accepts,
            prepack=_prepack, prepack_inputs=(1, 2), prepare=_prepare)
def _nhwc_conv(inputs, outputs, p: _Plan):
    if p.packed is None:
        _nhwc_conv_reference(inputs, outputs, p.reference)
        return
    z = inputs[3] if len(inputs) > 3 else None
    x = inputs[0] if inputs[0].flags.c_contiguous else np.ascontiguousarray(inputs[0])
    p.packed.run(x, outputs[0], None if z is None else np.ascontiguousarray(z))
