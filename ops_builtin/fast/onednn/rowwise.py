"""Row-wise and elementwise ops of transformers as oneDNN primitives: LayerNormalization,
RMSNormalization, Softmax, the attention core (FusedAttention) and a standalone Gelu.

Without them a transformer's only compiled kernels besides its GEMMs would be numba loops,
and loading numba (llvmlite) costs ~100 MB of resident memory, more than the weights of a
small encoder. Each kernel takes float32 nodes of the layout it covers (``accepts``); a new
input shape runs the numpy kernel while its primitives are made in the background
(:mod:`.tiered`), and the runs after take them:

* **LayerNormalization** over the trailing axes, one output (Mean / InvStdDev asked for
  go to the next kernel): oneDNN's layer normalization with scale and shift (statistics in
  float32 over each row: the mean first, then the centred variance);
* **RMSNormalization** over the trailing axes (a Llama's norms; opset 23, or the builtin
  rewrite of the decomposed form): the same primitive with global statistics, a mean of 0
  and a variance of ``mean(x ** 2)`` per row (one numpy ``einsum`` pass), and scale only
  (``x / sqrt(mean(x ** 2) + epsilon) * scale``); oneDNN 3.2 has no RMS flag of its own;
* **Softmax** over the last axis (opset 13+), or over the flattened trailing axes before
  opset 13: oneDNN's accurate softmax (max subtracted), in place where the output is the
  input's buffer;
* **FusedAttention** (``Softmax(Q @ KT * scale + mask) @ V``, the builtin rewrites): a matmul
  with the scale (an eltwise linear post-op) and the mask (a binary add post-op, broadcast
  as it broadcasts) into the scores, the softmax in place, a matmul with V; batch dims of
  Q, KT and V in any strides; a single query row over few keys (a decode step:
  :data:`SINGLE_QUERY_NUMPY_SCORES`) runs the numpy kernel, no primitive per past length;
* **Gelu** (erf and tanh forms, opset 20): one eltwise pass.

A node beside QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear keeps the kernels it
had (their rounding is the one onnxruntime's kernels have). Source: ONNX LayerNormalization-17,
RMSNormalization-23, Softmax-13, Gelu-20; oneDNN's layer normalization, softmax, matmul and eltwise primitives.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional
import numpy as np
from dynashape.ops_builtin import fusions, nn, reduction
from dynashape.ops_builtin import normalization as builtin_normalization
from dynashape.records import OpLibrary
from dynashape.threads import intra_op_threads

from .. import softmax as fast_softmax
from ..tiering import NUMBA
from . import api, tiered
from .gemm import PRIORITY, beside_qdq

lib = OpLibrary()

F32 = np.dtype(np.float32)
#: the fewest elements the Softmax / Gelu primitives take (below, numpy's few passes cost less than
#: a primitive's dispatch, and a Softmax takes numba's loops where numba is already up in the
#: process, without starting it; LayerNormalization and attention, several numpy passes each,
#: always run oneDNN)
MIN_ELEMENTS = 1024
#: the shortest rows the Softmax primitive takes: its cost per row makes short rows slow (1000
#: rows of 3: oneDNN 38 us, numpy's five passes 25, numba's three 16; of 8: 32, 58, 31; of 16:
#: 65, 81, 40; of 32: 82, 142, 126). Shorter rows take numba's loops where numba is up, else
#: numpy's; longer ones the primitive, or numpy's passes while it is made or below MIN_ELEMENTS,
#: though numba's loops are faster up to ~24 values: their float64 sums round differently from
#: onnxruntime's, and a dynamically quantized BERT's attention then puts a few values into other
#: buckets (zoo2 bert_tiny_dynamic off by 3e-4 in three outputs)
SOFTMAX_MIN_ROW = 8
ARG_MEAN, ARG_VARIANCE, ARG_SCALE, ARG_SHIFT = 49, 50, 51, 52
SOFTMAX_ACCURATE = 196608
#: a single query row (a decode step) with fewer scores than this runs the numpy kernel: a
#: decoder's every step is a new past length, for which oneDNN would make three primitives
#: (~0.5 ms), while numpy costs ~12 us more a call (gpt2's 12 x 65 scores after a cache sweep:
#: 71 against 59 us); zoo2's KV decoders: 0.45-0.54 ms a step in a cold decoding pass, 1.5-2.4
#: ms with the primitives
SINGLE_QUERY_NUMPY_SCORES = 16384
NORMALIZATION_GLOBAL_STATS, NORMALIZATION_SCALE, NORMALIZATION_SHIFT = 1, 2, 4
#: RMSNormalization of fewer elements runs the numpy kernel: the statistics pass and the
#: primitive's dispatch cost more than numpy's four passes there (a one-node model's run on an
#: AVX-512 Zen 4, one thread: 1 x 64 17.1 against 12.5 us, 16 x 128 15.1 against 13.1, 64 x 384
#: 20.9 against 27.4, 128 x 768 51.1 against 80.0; a Llama decode step has five of the first)
RMS_MIN_ELEMENTS = 8192


def _md(shape, strides) -> api.MemoryDesc:
    return api.MemoryDesc.of_array(shape, strides)


def _f32_and_ready(ctx, i: int = 0) -> bool:
    return ctx.dtype(i) == F32 and ctx.shape(i) is not None and not beside_qdq(ctx) and api.library() is not None


# LayerNormalization -------------------------------------------------------------------

class _NormPlan(NamedTuple):
    axis: int
    eps: float
    fallback: object
    scale: Optional[np.ndarray]   # the constant scale and shift as the primitive reads them (None: per call;
    shift: Optional[np.ndarray]   # RMSNormalization has no shift)


def _layer_norm_accepts(ctx) -> bool:
    outputs = [o for o in ctx.node.outputs[1:] if o]
    return not outputs and _f32_and_ready(ctx) and ctx.dtype(1) == F32


def _layer_norm_prepare(ctx) -> _NormPlan:
    prepared = nn._layer_norm_prepare(ctx)
    _, axes, eps, _ = prepared
    scale, shift = ctx.value(1), (ctx.value(2) if ctx.has_input(2) else None)
    if scale is not None and (shift is not None or not ctx.has_input(2)):
        scale = np.ascontiguousarray(scale, F32).reshape(-1)
        shift = np.zeros_like(scale) if shift is None else np.ascontiguousarray(shift, F32).reshape(-1)
    else:
        scale = shift = None
    return _NormPlan(axes[0] if axes else len(ctx.shape(0)), eps, prepared, scale, shift)


@lib.kernel("LayerNormalization", since_version=17, dtypes=[np.float32], priority=PRIORITY,
            accepts=_layer_norm_accepts, prepare=_layer_norm_prepare)
def _layer_norm(inputs, outputs, p: _NormPlan):
    x, y = inputs[0], outputs[0]
    inner = math.prod(x.shape[p.axis:])
    scale = inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if (not x.size or not inner or not x.flags.c_contiguous or not y.flags.c_contiguous
            or scale.size != inner or (bias is not None and bias.size != inner)):
        nn._layer_norm(inputs, outputs, p.fallback)
        return
    rows = x.size // inner
    threads = intra_op_threads()
    prim = tiered.primitive(("layer_norm", rows, inner, p.eps, threads), _layer_norm_primitive, rows, inner, p.eps,
                            threads=threads)
    if prim is None:
        nn._layer_norm(inputs, outputs, p.fallback)
        return
    if p.scale is not None:
        scale, shift = p.scale, p.shift
    else:
        scale = np.ascontiguousarray(scale, F32).reshape(inner)
        shift = np.zeros(inner, F32) if bias is None else np.ascontiguousarray(bias, F32).reshape(inner)
    api.set_threads(threads)
    prim.execute((x, y, scale, shift), p)


def _layer_norm_primitive(rows: int, inner: int, eps: float) -> api.Primitive:
    data = api.MemoryDesc((rows, inner), strides=(inner, 1))
    vector = api.MemoryDesc((inner,), strides=(1,))
    return api.make_primitive("dnnl_layer_normalization_forward_primitive_desc_create",
                              (api.ARG_SRC, api.ARG_DST, ARG_SCALE, ARG_SHIFT), (data, data, vector, vector),
                              api.FORWARD_INFERENCE, data.handle, data.handle, None, eps,
                              NORMALIZATION_SCALE | NORMALIZATION_SHIFT, None)


# RMSNormalization --------------------------------------------------------------------

def _rms_accepts(ctx) -> bool:
    return _f32_and_ready(ctx) and ctx.dtype(1) == F32 and builtin_normalization._rms_cdtype(ctx) == F32


def _rms_prepare(ctx) -> _NormPlan:
    prepared = builtin_normalization._rms_prepare(ctx)
    _, axes, eps = prepared
    scale = ctx.value(1)
    scale = None if scale is None else np.ascontiguousarray(scale, F32).reshape(-1)
    return _NormPlan(axes[0] if axes else len(ctx.shape(0)), eps, prepared, scale, None)


@lib.kernel("RMSNormalization", dtypes=[np.float32], priority=PRIORITY, accepts=_rms_accepts, prepare=_rms_prepare)
def _rms_norm(inputs, outputs, p: _NormPlan):
    x, y, scale = inputs[0], outputs[0], inputs[1]
    tail = x.shape[p.axis:]
    inner = math.prod(tail)
    if (not x.size or x.size < RMS_MIN_ELEMENTS or not inner or not x.flags.c_contiguous or not y.flags.c_contiguous
            or scale.size != inner or scale.ndim > len(tail)):
        builtin_normalization._rms(inputs, outputs, p.fallback)
        return
    rows = x.size // inner
    threads = intra_op_threads()
    prim = tiered.primitive(("rms_norm", rows, inner, p.eps, threads), _rms_primitive, rows, inner, p.eps,
                            threads=threads)
    if prim is None:
        builtin_normalization._rms(inputs, outputs, p.fallback)
        return
    x2 = x.reshape(rows, inner)
    stats = np.zeros((2, rows), F32)          # the mean (0) and the variance: mean(x ** 2)
    np.einsum("ij,ij->i", x2, x2, out=stats[1])
    stats[1] *= F32.type(1.0 / inner)
    api.set_threads(threads)
    scale = p.scale if p.scale is not None else np.ascontiguousarray(scale, F32).reshape(inner)
    prim.execute((x, y, stats[0], stats[1], scale), p)


def _rms_primitive(rows: int, inner: int, eps: float) -> api.Primitive:
    data = api.MemoryDesc((rows, inner), strides=(inner, 1))
    stat = api.MemoryDesc((rows,), strides=(1,))
    vector = api.MemoryDesc((inner,), strides=(1,))
    return api.make_primitive("dnnl_layer_normalization_forward_primitive_desc_create",
                              (api.ARG_SRC, api.ARG_DST, ARG_MEAN, ARG_VARIANCE, ARG_SCALE),
                              (data, data, stat, stat, vector), api.FORWARD_INFERENCE, data.handle, data.handle,
                              stat.handle, eps, NORMALIZATION_GLOBAL_STATS | NORMALIZATION_SCALE, None)


# Softmax -----------------------------------------------------------------------------

def _softmax_accepts(ctx) -> bool:
    return _f32_and_ready(ctx)


def _softmax_primitive_for(rows: int, n: int, threads: int) -> Optional[api.Primitive]:
    return tiered.primitive(("softmax", rows, n, threads), _softmax_primitive, rows, n, threads=threads)


def _softmax_primitive(rows: int, n: int) -> api.Primitive:
    data = api.MemoryDesc((rows, n), strides=(n, 1))
    return api.make_primitive("dnnl_softmax_forward_primitive_desc_create", (api.ARG_SRC, api.ARG_DST),
                              (data, data), api.FORWARD_INFERENCE, SOFTMAX_ACCURATE, data.handle, data.handle,
                              1, None)


@lib.kernel("Softmax", dtypes=[np.float32], priority=PRIORITY, accepts=_softmax_accepts, may_inplace=((0, 0),),
            prepare=reduction._softmax_prepare)
def _softmax(inputs, outputs, plan):
    """``plan``: the numpy kernel's (rebuilt per signature where it holds symbolic dims)."""
    x, y = inputs[0], outputs[0]
    if plan.shape2 is not None:   # before opset 13: over the flattened trailing axes
        rows, n = plan.shape2
    elif plan.axis == x.ndim - 1 and x.ndim:
        n = x.shape[-1]
        rows = x.size // n if n else 0
    else:
        rows = n = 0
    threads = intra_op_threads()
    prim = None
    if (plan.work is None and x.size >= MIN_ELEMENTS and n >= SOFTMAX_MIN_ROW and x.flags.c_contiguous
            and y.flags.c_contiguous):
        prim = _softmax_primitive_for(rows, n, threads)
    if prim is None:
        if n < SOFTMAX_MIN_ROW and NUMBA.is_ready:      # (numba already up in this process: its three passes)
            fast_softmax._softmax(inputs, outputs, plan)
        else:
            reduction._run_softmax(reduction._softmax_body, inputs, outputs, plan)
        return
    api.set_threads(threads)
    prim.execute((x, y))
    _spread_nan_rows(y.reshape(rows, n))


def _spread_nan_rows(rows: np.ndarray) -> None:
    """Make NaN every row of a softmax that holds a NaN. oneDNN's primitive leaves the rest of
    a row finite (0) where the input row has a NaN or a +inf; onnxruntime and the spec's
    formula give the whole row NaN. One SIMD max over the output tells whether any row has one
    (np.maximum propagates NaN: ~16 us over 12 x 128 x 128 scores, a tenth of the softmax)."""
    if np.isnan(np.maximum.reduce(rows, axis=None)):
        rows[np.isnan(rows).any(axis=1)] = np.nan


# FusedAttention ----------------------------------------------------------------------

class _AttentionPrims:
    """The three primitives of one attention shape: scores, softmax, output. Made from the
    (shape, strides in bytes) of Q, KT, V, the mask (or None), the scores and the output: no
    array is held (they are made in the background, :mod:`.tiered`)."""

    __slots__ = ("scores", "softmax", "output", "scores_shape")

    @property
    def primitives(self) -> tuple:
        return self.scores, self.softmax, self.output

    def __init__(self, q_shape, q_strides, kt_shape, kt_strides, v_shape, v_strides, mask, scores_shape,
                 scores_strides, out_shape, out_strides, scale: float):
        self.scores_shape = scores_shape
        smd = _md(scores_shape, scores_strides)
        posts = [("eltwise", "linear", scale, 0.0)] if scale != 1.0 else []
        if mask is not None:
            posts.append(("binary", "add", _md(*mask)))
        attr = api.post_ops_attr(posts)
        args = [api.ARG_SRC, api.ARG_WEIGHTS, api.ARG_DST] + [a for a, _ in attr.binary_mds]
        mds = [_md(q_shape, q_strides), _md(kt_shape, kt_strides), smd] + [m for _, m in attr.binary_mds]
        self.scores = api.make_primitive("dnnl_matmul_primitive_desc_create", args, mds, mds[0].handle,
                                         mds[1].handle, None, smd.handle, attr.handle)
        n = scores_shape[-1]
        rows = math.prod(scores_shape) // n
        flat = api.MemoryDesc((rows, n), strides=(n, 1))
        self.softmax = api.make_primitive("dnnl_softmax_forward_primitive_desc_create", (api.ARG_SRC, api.ARG_DST),
                                          (flat, flat), api.FORWARD_INFERENCE, SOFTMAX_ACCURATE, flat.handle,
                                          flat.handle, 1, None)
        omd, vmd = _md(out_shape, out_strides), _md(v_shape, v_strides)
        self.output = api.make_primitive("dnnl_matmul_primitive_desc_create", (api.ARG_SRC, api.ARG_WEIGHTS,
                                         api.ARG_DST), (smd, vmd, omd), smd.handle, vmd.handle, None, omd.handle,
                                         None)


class _AttentionPlan(NamedTuple):
    """The numpy kernel's plan (its scores shape symbolic: rebuilt per signature) and the
    scale the scores are multiplied by."""

    plan: object
    scale: float


def _attention_prepare(ctx) -> _AttentionPlan:
    plan = fusions._fused_attention_prepare(ctx)
    return _AttentionPlan(plan, 1.0 / plan.scale if plan.divide else plan.scale)


def _attention_accepts(ctx) -> bool:
    shapes = [ctx.shape(i) for i in range(min(ctx.num_inputs, 4)) if ctx.has_input(i)]
    return (all(s is not None and 2 <= len(s) <= 6 for s in shapes) and len({len(s) for s in shapes}) == 1
            and all(ctx.dtype(i) == F32 for i in range(len(shapes))) and _f32_and_ready(ctx))


@lib.kernel("FusedAttention", domain=fusions.DOMAIN, dtypes=[np.float32], priority=PRIORITY,
            accepts=_attention_accepts, prepare=_attention_prepare,
            scratch=fusions._attention_scores_scratch)
def _fused_attention(inputs, outputs, p: _AttentionPlan):
    q, kt, v = inputs[0], fusions.attention_kt(inputs[1], p.plan.perm_k), inputs[2]
    mask = inputs[3] if len(inputs) > 3 else None
    out = outputs[0]
    size = math.prod(p.plan.scores)
    single_query = q.ndim >= 2 and q.shape[-2] == 1 and size < SINGLE_QUERY_NUMPY_SCORES
    if size == 0 or single_query or out.size == 0 or not out.flags.c_contiguous or any(
            a.ndim != out.ndim for a in (q, kt, v) + (() if mask is None else (mask,))):
        fusions._fused_attention(inputs, [out] + list(outputs[1:]), p.plan)
        return
    scores = nn._scratch(outputs, 1, size, F32).reshape(p.plan.scores)
    threads = intra_op_threads()
    key = (q.shape, q.strides, kt.shape, kt.strides, v.shape, v.strides, None if mask is None else
           (mask.shape, mask.strides), threads)
    # None also where oneDNN's matmul does not broadcast these shapes: the numpy kernel
    prims = tiered.primitive(("attention", p.scale) + key, _AttentionPrims, q.shape, q.strides, kt.shape, kt.strides,
                             v.shape, v.strides, None if mask is None else (mask.shape, mask.strides),
                             scores.shape, scores.strides, out.shape, out.strides, p.scale, threads=threads)
    if prims is None:
        fusions._fused_attention(inputs, [out] + list(outputs[1:]), p.plan)
        return
    api.set_threads(threads)
    # the arrays whose data the views start at, the same objects run after run (a new view
    # costs Primitive.execute ~1 us more to look up): KT's is K's, the scores' the planned scratch
    k = inputs[1]
    if len(outputs) > 1 and outputs[1] is not None and outputs[1].size >= size:
        scores = outputs[1]
    prims.scores.execute((q, k, scores) if mask is None else (q, k, scores, mask), p)
    prims.softmax.execute((scores, scores), p)
    prims.output.execute((scores, v, out), p)


# Gelu --------------------------------------------------------------------------------

@lib.kernel("Gelu", since_version=20, dtypes=[np.float32], priority=PRIORITY, accepts=_softmax_accepts,
            may_inplace=((0, 0),), prepare=lambda ctx: "gelu_tanh" if ctx.attr("approximate", "none") == "tanh"
            else "gelu_erf")
def _gelu(inputs, outputs, algorithm: str):
    x, y = inputs[0], outputs[0]
    threads = intra_op_threads()
    prim = None
    if x.size >= MIN_ELEMENTS and x.flags.c_contiguous and y.flags.c_contiguous:
        prim = tiered.primitive(("gelu", x.size, algorithm, threads), api.make_eltwise, x.size,
                                algorithm, threads=threads)
    if prim is None:
        fusions.EPILOGUES["GeluTanh" if algorithm == "gelu_tanh" else "Gelu"][0]([x], y, algorithm == "gelu_tanh")
        return
    api.set_threads(threads)
    prim.execute((x, y))
