"""Conv and FusedConv (2-D) as compiled loops (:mod:`.loops.conv`) where they beat the numpy
kernel's im2col + BLAS.

* **Depthwise** (one filter per channel): ``loops.depthwise_direct``: each plane padded and
  split into its column phases in cache, three taps per pass along each output row.
* **Direct** (any group, a short reduction: C/group x KH x KW <= ``DIRECT_MAX_DEPTH``, the
  first layers of image models, where im2col + BLAS spends its time copying a 27-deep
  column matrix): ``loops.conv2d_direct``: each output row of four output channels sums its
  taps along the row, three taps per pass, from its group's planes padded and split into
  their stride phases in cache. Each output element is one fused multiply-add chain over
  its taps in (channel, kh, kw) order, restarted every ``block`` terms and the bias added
  last: the order of onnxruntime's MLAS im2col + SGEMM (``nn._reduction_block``), so
  float32 results are bit-identical with it where the CPU has FMA.
* **Columns** (a longer reduction, at least ``COLUMNS_MIN_PIXELS`` output pixels per
  image): per image, ``loops.pad_phases`` and ``loops.im2col_phases`` (contiguous runs),
  BLAS in MLAS's blocks straight into the image's output, ``loops.bias_relu_planes``.
* Everything else: the numpy kernel (im2col + BLAS in MLAS's blocks).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from dynashape.records import OpLibrary
from dynashape.ops_builtin import fusions, nn

from .activations import bias_and_activation, epilogue_code
from .common import EMPTY, FLOATS, PRIORITY, contiguous, lazy_import
from .tiering import compiled_ready

lib = OpLibrary()
#: the loops (:mod:`.loops.conv`), imported by the first call of one
loops = lazy_import(".loops.conv", __package__)

#: the longest reduction (C/group x KH x KW) the direct loop takes; longer ones run im2col
#: + BLAS, which wins there (docs/KERNELS.md)
DIRECT_MAX_DEPTH = 32
#: the direct loop also needs a kernel of at least this many taps and output rows at least
#: this wide: its cost is per tap and output row (a strided 1x1 Conv over 16-wide rows ran
#: 5.5 ms against the numpy kernel's 0.3)
DIRECT_MIN_TAPS, DIRECT_MIN_WIDTH = 4, 16
#: output channels one pass of the direct loop computes (they share each input load)
_M_BLOCK = 4
#: output pixels per image from which a longer reduction runs im2col image by image (the
#: columns of one image stay in cache, BLAS writes the image's output in place); below,
#: the numpy kernel's one matmul over the whole batch (resnet_tiny at batch 8: 32x32 outputs
#: 1.48 -> 1.31 ms per image-by-image Conv, 16x16 ones 0.87 -> 1.06 ms, so not there)
COLUMNS_MIN_PIXELS = 1024


class _LoopPlan(NamedTuple):
    """What the depthwise, direct and per-image im2col paths need."""
    mode: str                # "depthwise", "direct" or "columns" (per-image im2col + BLAS)
    strides: tuple           # (sh, sw)
    dilations: tuple         # (dh, dw)
    pads: tuple              # (ph, pw): top and left
    kernel: tuple            # (kh, kw)
    block: int               # the chain length of the reduction (nn._reduction_block)
    padded: tuple            # the padded, phase-split input (images, C, Hp, S, Wq): one image for columns
    depth: int               # C/group x KH x KW


class _ConvPlan(NamedTuple):
    numpy: object            # the numpy kernel's plan (nn._ConvPlan; its temporaries are not
                             # planned with the direct loop's: np.empty if it ever runs)
    loop: _LoopPlan | None   # when the depthwise, direct or per-image im2col path applies
    epilogue: str            # see epilogue_code ("" for a plain Conv)
    numpy_epilogue: object   # the numpy epilogue (fusions.Epilogue) of a FusedConv, or None


def _loop_plan(ctx) -> _LoopPlan | None:
    """For a 2-D Conv with explicit pads that is not pointwise: the depthwise loop's plan
    (one filter per channel), the direct loop's (a reduction of at most DIRECT_MAX_DEPTH
    terms, M/group a multiple of 4, at least DIRECT_MIN_TAPS taps and DIRECT_MIN_WIDTH
    output columns) or the per-image im2col's (at least COLUMNS_MIN_PIXELS output pixels
    per image)."""
    group, geom, out, (n, c, m, k), cdtype, mode = nn._conv_setup(ctx)
    if mode not in ("im2col", "depthwise") or len(out) != 2 or geom.pads_begin is None or not all(out):
        return None
    depth = (c // group) * k
    if mode == "depthwise":
        kind = "depthwise"
    elif (depth <= DIRECT_MAX_DEPTH and (m // group) % _M_BLOCK == 0 and k >= DIRECT_MIN_TAPS
          and out[1] >= DIRECT_MIN_WIDTH):
        kind = "direct"
    elif out[0] * out[1] >= COLUMNS_MIN_PIXELS:
        kind = "columns"
    else:
        return None
    (sh, sw), (dh, dw) = (tuple(int(v) for v in geom.strides), tuple(int(v) for v in geom.dilations))
    kh, kw = (int(v) for v in geom.kernel)
    images = 1 if kind == "columns" else n
    padded = (images, c, (out[0] - 1) * sh + (kh - 1) * dh + 1, sw, out[1] + ((kw - 1) * dw) // sw)
    return _LoopPlan(kind, (sh, sw), (dh, dw), tuple(int(v) for v in geom.pads_begin), (kh, kw),
                     nn._reduction_block(math.prod(out), depth), padded, depth)


def _conv_scratch(ctx) -> list:
    """The per-image im2col's padded image, columns and (for a reduction longer than one
    block) partial products; none for the depthwise and direct loops (each pads its planes
    in a buffer of its own); else the numpy kernel's."""
    loop = _loop_plan(ctx)
    if loop is None:
        return nn._conv_scratch(ctx)
    if loop.mode != "columns":
        return []
    _, _, out, (_, c, m, k), cdtype, _ = nn._conv_setup(ctx)
    pixels = math.prod(out)
    buffers = [((math.prod(loop.padded),), cdtype), ((c * k * pixels,), cdtype)]
    if loop.depth > loop.block:
        buffers.append(((m * pixels,), cdtype))
    return buffers


def _conv_prepare(ctx) -> _ConvPlan:
    return _ConvPlan(nn._conv_prepare(ctx), _loop_plan(ctx), epilogue_code(ctx), fusions.epilogue(ctx))


def _run_direct(x, w, bias, y, p: _ConvPlan) -> None:
    """The depthwise or the direct loop (each pads its input planes itself)."""
    d = p.loop
    b = EMPTY[y.dtype] if bias is None else np.ascontiguousarray(bias)
    geometry = (*d.strides, *d.dilations, *d.pads, d.padded[2], d.padded[4])
    if d.mode == "depthwise":
        loops.depthwise_direct(x, w, b, y, *geometry, bias is not None, p.epilogue == "relu")
    else:
        loops.conv2d_direct(x, w, b, y, x.shape[1] // w.shape[1], *geometry, d.block, bias is not None,
                      p.epilogue == "relu")


def _run_columns(x, w, bias, y, p: _ConvPlan, outputs) -> None:
    """Per image: pad, im2col (compiled, contiguous runs), one blocked matmul per group into
    the image's own output (M, OH x OW: no transposing copy), bias and Relu in one pass."""
    d = p.loop
    n, c, m = x.shape[0], x.shape[1], w.shape[0]
    group = c // w.shape[1]
    oh, ow = y.shape[2], y.shape[3]
    pixels = oh * ow
    xq = nn._scratch(outputs, 1, math.prod(d.padded), y.dtype).reshape(d.padded[1:])
    cols = nn._scratch(outputs, 2, c * d.kernel[0] * d.kernel[1] * pixels, y.dtype).reshape(group, d.depth, pixels)
    part = None
    if d.depth > d.block:
        part = nn._scratch(outputs, 3, m * pixels, y.dtype).reshape(group, m // group, pixels)
    wm = w.reshape(group, m // group, d.depth)
    b = EMPTY[y.dtype] if bias is None else np.ascontiguousarray(bias)
    relu = p.epilogue == "relu"
    for i in range(n):
        loops.pad_phases(x[i:i + 1], xq[None], *d.pads)
        loops.im2col_phases(xq, cols.reshape(group * d.depth, pixels), *d.kernel, d.strides[0], *d.dilations, oh, ow)
        yi = y[i].reshape(group, m // group, pixels)
        nn._blocked_matmul(wm, cols, yi, d.block, part)
        if bias is not None or relu:
            loops.bias_relu_planes(y[i].reshape(m, pixels), b, bias is not None, relu)


def _conv(inputs, outputs, p: _ConvPlan) -> None:
    """A compiled path where one applies (bias and Relu in it), else the numpy kernel
    (im2col + BLAS in MLAS's blocks); then a FusedConv's other activations."""
    x, w, y = inputs[0], inputs[1], outputs[0]
    bias = inputs[2] if len(inputs) > 2 else None
    if (p.loop is not None and x.dtype == y.dtype == w.dtype and (bias is None or bias.dtype == y.dtype)
            and contiguous(x, w, y) and compiled_ready()):
        if p.loop.mode == "columns":
            _run_columns(x, w, bias, y, p, outputs)
        else:
            _run_direct(x, w, bias, y, p)
        if p.epilogue not in ("", "relu"):
            bias_and_activation(y, None, p.epilogue, p.numpy_epilogue)
        return
    nn._conv(inputs, outputs, p.numpy)
    if p.epilogue and y.size:
        if y.flags.c_contiguous:
            bias_and_activation(y, None, p.epilogue, p.numpy_epilogue)
        else:
            p.numpy_epilogue(y)


@lib.kernel("Conv", dtypes=FLOATS, priority=PRIORITY, prepare=_conv_prepare, scratch=_conv_scratch)
def _conv_kernel(inputs, outputs, p: _ConvPlan):
    _conv(inputs, outputs, p)


@lib.kernel("FusedConv", domain=fusions.DOMAIN, dtypes=FLOATS, priority=PRIORITY, prepare=_conv_prepare,
            scratch=_conv_scratch)
def _fused_conv_kernel(inputs, outputs, p: _ConvPlan):
    _conv(inputs, outputs, p)
