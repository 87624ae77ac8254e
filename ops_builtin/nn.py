"""Neural-network operators: convolutions, pooling and normalisations.

Convolutions and pools share one geometry: for each spatial axis the kernel, stride,
dilation and the (begin, end) padding resolved from ``pads`` / ``auto_pad``, and for each
kernel *tap* (one position inside the window) the pair of slices that relates output
positions to the input positions that tap reads (``in = out * stride + tap * dilation -
pad_begin``). Kernels loop over taps (a few dozen at most), never over pixels:

* Conv: im2col (one strided copy per tap) into ``(N, C, K, *out)``, then one batched
  matmul ``(G, M/G, C/G*K) @ (N, G, C/G*K, OUT)`` writing the output directly. The
  reduction over ``C/G*K`` is blocked as onnxruntime's MLAS blocks it (see
  ``_reduction_block``), so float32 results are bit-identical with onnxruntime's on x86.
* ConvTranspose: one matmul to ``(N, M, K, *in)`` columns, then col2im as one strided
  slice-add per tap.
* Max/Average/Lp pools: one strided ``maximum``/``add`` per tap; average divides by a
  per-position count precomputed in ``prepare``.

float16/bfloat16 are computed in float32 and cast back; float64 stays float64.
Source: ONNX operator spec (Operators.md), sections named in each docstring.
"""
from __future__ import annotations

import functools
import itertools
import math
from typing import NamedTuple

import numpy as np
from dynashape.dtypes import as_dtype, compute_dtype, np_dtype
from dynashape.records import OpLibrary, same_dtype
from dynashape.shapes import dim_max, dim_min, is_known, normalize_axis, numel, pool_output_dim, require

from .reduction import trailing_sums

lib = OpLibrary()

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


# ----------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------


def _store(out: np.ndarray, value: np.ndarray) -> None:
    """Copy ``value`` into the output buffer (casting float32 results back to half types)."""
    if value is not out:
        np.copyto(out, value, casting="unsafe")


def _check_float(ctx, i: int = 0) -> None:
    dt = ctx.dtype(i)
    if dt is not None and not (dt.kind == "f" or (dt.kind == "V" and "float" in dt.name)):
        ctx.fail(f"input {i} has dtype {dt}, expected a floating-point tensor", kind="InvalidDtype")


def _check_rank_at_least(ctx, i: int, rank: int, what: str):
    shape = ctx.shape(i)
    if shape is None:
        return None
    if len(shape) < rank:
        ctx.fail(f"{what} must have rank >= {rank} (N, C, spatial...), got rank {len(shape)}",
                 kind="InvalidRank")
    return shape


def _int_list(ctx, name: str, n: int, default: int, minimum: int | None) -> list:
    """A per-spatial-axis int attribute (strides, dilations...) of length ``n``."""
    value = ctx.attr(name)
    if value is None:
        return [default] * n
    value = [int(v) for v in value]
    if len(value) != n:
        ctx.fail(f"attribute '{name}' has {len(value)} values, expected {n} (one per spatial axis)",
                 kind="InvalidAttribute")
    if minimum is not None and any(v < minimum for v in value):
        ctx.fail(f"attribute '{name}' = {value} must be >= {minimum}", kind="InvalidAttribute")
    return value


def _auto_pad(ctx) -> str:
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad not in _AUTO_PADS:
        ctx.fail(f"auto_pad '{auto_pad}' is not one of {', '.join(_AUTO_PADS)}", kind="InvalidAttribute")
    return auto_pad


class _Geometry(NamedTuple):
    """Window geometry along the spatial axes; ``pads_begin`` is None while unknown (symbolic SAME)."""

    kernel: tuple
    strides: tuple
    dilations: tuple
    pads_begin: tuple | None
    pads_end: tuple | None
    out: tuple


def _window_geometry(ctx, in_spatial, kernel, *, ceil_mode: bool = False,
                     dilations_allowed: bool = True) -> _Geometry:
    """Resolve strides/dilations/pads/auto_pad of a Conv or pool into output spatial dims.

    SAME_UPPER/SAME_LOWER give ``ceil(in / stride)`` (pads need concrete input dims); VALID
    uses no padding; NOTSET reads ``pads`` ([x1_begin, x2_begin, ..., x1_end, x2_end, ...]).
    """
    n = len(in_spatial)
    kernel = [int(k) for k in kernel]
    if any(k < 1 for k in kernel):
        ctx.fail(f"kernel_shape {kernel} must be positive", kind="InvalidAttribute")
    strides = _int_list(ctx, "strides", n, 1, 1)
    dilations = _int_list(ctx, "dilations", n, 1, 1) if dilations_allowed else [1] * n
    auto_pad = _auto_pad(ctx)
    effective = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [(d + s - 1) // s for d, s in zip(in_spatial, strides)]
        begin = end = None
        if all(is_known(d) for d in in_spatial):
            begin, end = [], []
            for d, s, o, e in zip(in_spatial, strides, out, effective):
                total = max(0, (o - 1) * s + e - d)
                small = total // 2
                begin.append(small if auto_pad == "SAME_UPPER" else total - small)
                end.append(total - begin[-1])
            begin, end = tuple(begin), tuple(end)
        return _Geometry(tuple(kernel), tuple(strides), tuple(dilations), begin, end, tuple(out))
    if auto_pad == "VALID":
        pads = [0] * (2 * n)
    else:
        pads = _int_list(ctx, "pads", 2 * n, 0, 0)
    begin, end = tuple(pads[:n]), tuple(pads[n:])
    out = [_window_count(ctx, i, d, k, s, b, e, dil, ceil_mode)
           for i, (d, k, s, b, e, dil) in enumerate(zip(in_spatial, kernel, strides, begin, end, dilations))]
    return _Geometry(tuple(kernel), tuple(strides), tuple(dilations), begin, end, tuple(out))


def _window_count(ctx, axis: int, size, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int,
                  ceil_mode: bool):
    """Output length along one spatial axis: the spec's formula (:func:`pool_output_dim`),
    which is 0 (an empty output) where the padded input falls short of the kernel's extent by
    less than a stride, and negative, refused, further off. A symbolic length is guarded to be
    >= 0 (a binding that breaks it is judged per node, where it fails here)."""
    count = pool_output_dim(size, kernel, stride, pad_begin, pad_end, dilation, ceil_mode)
    require(ctx, count, ">=", 0,
            f"spatial axis {axis} of size {size} with pads ({pad_begin}, {pad_end}) is shorter than the kernel extent "
            f"{(kernel - 1) * dilation + 1}: {count} windows at stride {stride}", "InvalidShape")
    return count


def _axis_taps(a_size: int, b_size: int, k: int, s: int, d: int, pad: int) -> list:
    """Per tap ``t < k``: (a_slice, b_slice) with ``b = a*s + t*d - pad`` in range, or None."""
    taps = []
    for t in range(k):
        off = t * d - pad
        lo = max(0, -(off // s))
        hi = min(a_size, (b_size - 1 - off) // s + 1)
        if hi <= lo:
            taps.append(None)
            continue
        start = lo * s + off
        full = lo == 0 and hi == a_size
        taps.append((slice(lo, hi), slice(start, start + (hi - lo - 1) * s + 1, s), full))
    return taps


def _taps(a_shape, b_shape, geom: _Geometry) -> tuple[list, bool]:
    """All non-empty N-D taps as (flat tap index, a index tuple, b index tuple); and whether
    every tap covers all of ``a`` (no padding region anywhere).

    Index tuples start with two full slices for the (N, C) axes. Memoised by geometry (a
    new batch size, the usual new signature, reuses the taps of the last one).
    """
    taps, all_full = _taps_of(tuple(a_shape), tuple(b_shape), tuple(geom.kernel), tuple(geom.strides),
                              tuple(geom.dilations), tuple(geom.pads_begin))
    return list(taps), all_full


@functools.lru_cache(maxsize=1024)
def _taps_of(a_shape: tuple, b_shape: tuple, kernel: tuple, strides: tuple, dilations: tuple,
             pads_begin: tuple) -> tuple[tuple, bool]:
    per_axis = [_axis_taps(a, b, k, s, d, p) for a, b, k, s, d, p in
                zip(a_shape, b_shape, kernel, strides, dilations, pads_begin)]
    out, all_full = [], True
    lead = (slice(None), slice(None))
    for flat, combo in enumerate(itertools.product(*per_axis)):
        if any(c is None for c in combo):
            all_full = False
            continue
        all_full = all_full and all(c[2] for c in combo)
        out.append((flat, lead + tuple(c[0] for c in combo), lead + tuple(c[1] for c in combo)))
    return tuple(out), all_full


def _spatial_kernel(ctx, x_shape, w_shape=None, *, required: bool) -> list:
    """kernel_shape attribute (checked against the weight's spatial dims) or the weight's dims."""
    n = len(x_shape) - 2
    kernel = ctx.attr("kernel_shape")
    if kernel is None:
        if required or w_shape is None:
            ctx.fail("attribute 'kernel_shape' is required", kind="MissingAttribute")
        if not all(is_known(k) for k in w_shape[2:]):
            ctx.fail("kernel_shape is not given and the weight's spatial dims are not known",
                     kind="UnknownKernelShape")
        return list(w_shape[2:])
    kernel = [int(k) for k in kernel]
    if len(kernel) != n:
        ctx.fail(f"kernel_shape {kernel} has {len(kernel)} values, expected {n} (input rank {n + 2})",
                 kind="InvalidAttribute")
    if w_shape is not None:
        for k, wk in zip(kernel, w_shape[2:]):
            require(ctx, wk, "==", k, f"kernel_shape {kernel} does not match the weight's spatial dims "
                    f"{list(w_shape[2:])}", "KernelShapeMismatch")
    return kernel


# ----------------------------------------------------------------------------------------
# Conv
# ----------------------------------------------------------------------------------------

def _conv_check(ctx):
    x = _check_rank_at_least(ctx, 0, 3, "input X")
    w = ctx.shape(1)
    _check_float(ctx, 0)
    if x is None or w is None:
        return None
    if len(w) != len(x):
        ctx.fail(f"weight W must have the rank of X ({len(x)}), got rank {len(w)}", kind="InvalidRank")
    group = int(ctx.attr("group", 1))
    if group < 1:
        ctx.fail(f"group {group} must be >= 1", kind="InvalidAttribute")
    return x, w, group


@lib.op("Conv", since_version=(1, 11, 22), infer_dtype=same_dtype(0))
def _conv_shape(ctx):
    """Conv: Y (N, M, *out) from X (N, C, *in), W (M, C/group, *k), optional B (M,).

    Raises ShapeInferenceError for mismatched ranks/channels/bias, bad attributes.
    Source: ONNX operator spec, Conv-1/11/22.
    """
    checked = _conv_check(ctx)
    if checked is None:
        return [None]
    x, w, group = checked
    c, m = x[1], w[0]
    if not ctx.assume(c, "==", w[1] * group):   # a guard where C is symbolic (a feed's channels)
        ctx.fail(f"input channels {c} must equal W.shape[1] * group = {w[1]} * {group}",
                 kind="ChannelMismatch")
    require(ctx, m % group, "==", 0, f"output channels {m} must be divisible by group {group}", "ChannelMismatch")
    if ctx.has_input(2):
        b = ctx.shape(2)
        if b is not None:
            message = f"bias B must have shape ({m},), got {tuple(b)}"
            if len(b) != 1:
                ctx.fail(message, kind="BiasShapeMismatch")
            require(ctx, b[0], "==", m, message, "BiasShapeMismatch")
    kernel = _spatial_kernel(ctx, x, w, required=False)
    geom = _window_geometry(ctx, x[2:], kernel)
    return [(x[0], m) + geom.out]


#: im2col buffers above this many bytes are built a band of output rows at a time, so they
#: stay cache-sized and are recycled by the allocator instead of page-faulted in every call.
_COLS_BYTES = 16 << 20


class _ConvBand(NamedTuple):
    """im2col work for output rows ``rows`` (None: all rows) along the first spatial axis.

    The columns are laid out (C, K, N, rows, *out[1:]) so that one matmul per group covers
    the whole batch: (G, M/G, C/G*K) @ (G, C/G*K, N*band) -> (G, M/G, N, band).
    """

    rows: slice | None
    taps: tuple          # (cols index, index into X viewed as (C, N, *in)) per tap
    cols_shape: tuple    # (C, K, N, rows, *out[1:])
    zero_fill: bool      # some tap misses part of the band (padding): cols start zeroed
    mat_shape: tuple     # (G, C/G*K, N*band size)
    res_shape: tuple     # (G, M/G, N*band size)
    window: tuple | None = None   # (start, kernel, strides, dilations) per spatial axis: the columns
                                  # are one strided view of X (see _window_columns); None: per tap


class _ConvPlan(NamedTuple):
    mode: str            # "pointwise" (X is its own im2col), "depthwise" or "im2col"
    cdtype: np.dtype
    w_shape: tuple       # (G, M/G, C/G*K); for depthwise (K, 1, C, 1...)
    bands: tuple         # _ConvBand per band; for pointwise/depthwise one band
    bias_shape: tuple
    out_shape: tuple
    block: int = 1 << 62     # terms per matmul of the reduction (see _reduction_block)


def _conv_bands(x, out, geom: _Geometry, group: int, m: int, k: int, itemsize: int) -> tuple:
    n, c = x[0], x[1]
    rest = int(np.prod(out[1:]))
    rows_per_band = _conv_rows_per_band(n, c, k, out, itemsize)
    bands = []
    for r0 in range(0, max(out[0], 1), rows_per_band):
        r1 = min(out[0], r0 + rows_per_band)
        sub = _Geometry(geom.kernel, geom.strides, geom.dilations,
                        (geom.pads_begin[0] - r0 * geom.strides[0],) + geom.pads_begin[1:], None,
                        (r1 - r0,) + tuple(out[1:]))
        taps, all_full = _im2col_taps(sub, tuple(x[2:]))
        size = (r1 - r0) * rest
        start = tuple(-int(p) for p in sub.pads_begin)
        window = None
        if all_full and k >= _WINDOW_MIN_TAPS and min(start) >= 0:
            window = (start, tuple(geom.kernel), tuple(geom.strides), tuple(geom.dilations))
        bands.append(_ConvBand(
            rows=None if rows_per_band >= out[0] else slice(r0, r1),
            taps=() if window else taps,
            cols_shape=(c, k, n) + sub.out, zero_fill=not all_full,
            mat_shape=(group, (c // group) * k, n * size), res_shape=(group, m // group, n * size),
            window=window))
    return tuple(bands)


#: a kernel of at least this many taps and no padding in the band builds its columns in one
#: strided copy: one slice assignment per tap costs ~1 us of Python each (a 1-D STFT-as-Conv
#: of 256 taps: 240 us per call, ~20 us in one copy); fewer taps copy long contiguous runs each
_WINDOW_MIN_TAPS = 16


def _window_columns(xt: np.ndarray, cols: np.ndarray, window: tuple) -> None:
    """cols (C, K, N, *out) = the sliding windows of X (viewed (C, N, *in)) in one copy: a view of
    shape (C, *kernel, N, *out) over X's own bytes, each kernel axis stepping by its dilation
    and each output axis by its stride."""
    start, kernel, strides, dilations = window
    base = xt[(slice(None), slice(None)) + tuple(slice(b, None) for b in start)]
    spatial = base.strides[2:]
    view = np.lib.stride_tricks.as_strided(
        base, shape=(xt.shape[0],) + kernel + (xt.shape[1],) + cols.shape[3:],
        strides=(base.strides[0],) + tuple(d * s for d, s in zip(dilations, spatial)) + (base.strides[1],)
        + tuple(t * s for t, s in zip(strides, spatial)), writeable=False)
    np.copyto(cols.reshape(view.shape), view)


def _im2col_taps(sub: _Geometry, in_spatial: tuple) -> tuple[tuple, bool]:
    """The taps of one band as (cols index, X index) pairs (memoised by geometry)."""
    return _im2col_taps_of(tuple(sub.out), in_spatial, tuple(sub.kernel), tuple(sub.strides),
                           tuple(sub.dilations), tuple(sub.pads_begin))


@functools.lru_cache(maxsize=1024)
def _im2col_taps_of(out: tuple, in_spatial: tuple, kernel: tuple, strides: tuple, dilations: tuple,
                    pads_begin: tuple) -> tuple[tuple, bool]:
    taps, all_full = _taps_of(out, in_spatial, kernel, strides, dilations, pads_begin)
    return tuple(((slice(None), t, slice(None)) + a[2:], b) for t, a, b in taps), all_full


#: MLAS_SGEMM_STRIDEN / MLAS_SGEMM_STRIDEK of onnxruntime's MLAS (onnxruntime/core/mlas/lib/mlasi.h)
_MLAS_STRIDE_N = 128
_MLAS_STRIDE_K = 128


def _reduction_block(pixels: int, depth: int) -> int:
    """How many terms of a Conv's reduction (``depth`` = C/G * kernel taps) one matmul sums
    before the partial result is added to the output, for ``pixels`` output positions per
    image: MLAS's K stride (MlasConvOperation in onnxruntime/core/mlas/lib/convolve.cpp,
    MlasSgemmOperation in sgemm.cpp): 128, doubled while the N stride can halve (N > 16,
    N/2 >= pixels).

    Each block is one fused multiply-add chain per output element, and blocks are added in
    order; summing the same terms in one chain differs from onnxruntime by an ulp now and
    then. That is harmless in a float model but not in a QDQ model, where a Conv output that
    lands an ulp off an exact rounding tie of the next QuantizeLinear becomes a whole
    quantization step, which every later layer carries.
    """
    stride_n, stride_k = _MLAS_STRIDE_N, _MLAS_STRIDE_K
    if pixels < depth:
        while stride_n > 16 and stride_n // 2 >= pixels:
            stride_n //= 2
            stride_k *= 2
    return stride_k


def _blocked_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, block: int,
                    part: np.ndarray | None) -> None:
    """``out = a @ b`` with the reduction axis summed ``block`` terms per matmul, the partial
    products (in ``part``, of ``out``'s shape) added into ``out`` in order."""
    depth = a.shape[-1]
    if depth <= block:
        np.matmul(a, b, out=out)
        return
    np.matmul(a[..., :block], b[..., :block, :], out=out)
    for k0 in range(block, depth, block):
        np.matmul(a[..., k0:k0 + block], b[..., k0:k0 + block, :], out=part)
        np.add(out, part, out=out)


def _conv_mode(x, w, group: int, k: int, geom: _Geometry) -> str:
    """How a Conv runs: "pointwise" (1x1, stride 1, no padding: X is its own im2col),
    "depthwise" (one channel per group) or "im2col"."""
    c, m = x[1], w[0]
    if k == 1 and all(s == 1 for s in geom.strides) and not any(geom.pads_begin) and not any(geom.pads_end) \
            and tuple(geom.out) == tuple(x[2:]):
        return "pointwise"
    if group == c and m == c and c > 1:
        return "depthwise"
    return "im2col"


def _conv_rows_per_band(n, c, k: int, out: tuple, itemsize: int):
    """Output rows per im2col band: all of them while the columns stay under _COLS_BYTES."""
    row_bytes = n * c * k * numel(out[1:]) * itemsize
    return dim_max(1, dim_min(out[0], _COLS_BYTES // dim_max(row_bytes, 1)))


def _conv_setup(ctx) -> tuple:
    """What Conv's preparation and scratch both start from: ``(group, geometry, output
    spatial dims, (N, C, M, taps), compute dtype, mode)``."""
    x, w = ctx.shape(0), ctx.shape(1)
    group = int(ctx.attr("group", 1))
    kernel = _spatial_kernel(ctx, x, w, required=False)
    geom = _window_geometry(ctx, x[2:], kernel)
    k = int(np.prod(kernel))
    return (group, geom, tuple(geom.out), (x[0], x[1], w[0], k), compute_dtype(ctx.dtype(0)),
            _conv_mode(x, w, group, k, geom))


def _conv_scratch(ctx) -> list:
    """Conv's temporaries, planned in the arena: the columns and products of one im2col band,
    or the per-tap products of a depthwise Conv; the result in the compute dtype when Y
    is a half type; last, the partial products of a reduction longer than one block."""
    group, _, out, (n, c, m, k), cdtype, mode = _conv_setup(ctx)
    full = n * m * numel(out)
    part = []
    if mode == "im2col":
        rows = _conv_rows_per_band(n, c, k, out, cdtype.itemsize)
        band = n * rows * numel(out[1:])
        buffers = [((c * k * band,), cdtype), ((m * band,), cdtype)]
        if (c // group) * k > _MLAS_STRIDE_K:
            part = [((m * band,), cdtype)]
    elif mode == "depthwise":
        buffers = [((full,), cdtype)]
    else:
        buffers = []
        if c // group > _MLAS_STRIDE_K:
            part = [((full,), cdtype)]
    if np.dtype(ctx.dtype(0)) != cdtype:
        buffers.append(((full,), cdtype))
    return buffers + part


def _scratch(outputs: list, k: int, size: int, dtype: np.dtype) -> np.ndarray:
    """The first ``size`` elements of scratch buffer ``k`` (after the outputs), or a new array
    when the engine planned none."""
    buf = outputs[k] if k < len(outputs) else None
    if buf is None or buf.size < size:
        return np.empty(size, dtype)
    return buf[:size]


def _conv_prepare(ctx) -> _ConvPlan:
    x = ctx.shape(0)
    group, geom, out, (n, c, m, k), cdtype, mode = _conv_setup(ctx)
    bias_shape = (m,) + (1,) * len(out)
    out_shape = (n, m) + out
    block = _reduction_block(int(np.prod(out)), (c // group) * k)
    if mode == "pointwise":
        size = int(np.prod(out))
        band = _ConvBand(None, (), (), False, (n, group, c // group, size), (n, group, m // group, size))
        return _ConvPlan("pointwise", cdtype, (group, m // group, c // group), (band,), bias_shape, out_shape,
                         block)
    if mode == "depthwise":
        taps, _ = _taps(out, x[2:], geom)
        # the tap that covers the whole output (the centre one, usually) goes first: it initialises
        taps.sort(key=lambda tap: not all(s.start == 0 and s.stop == o for s, o in zip(tap[1][2:], out)))
        band = _ConvBand(None, tuple(((t,) + a, b) for t, a, b in taps), (), True, (), ())
        return _ConvPlan("depthwise", cdtype, (k, 1, c) + (1,) * len(out), (band,), bias_shape, out_shape)
    bands = _conv_bands(x, out, geom, group, m, k, cdtype.itemsize)
    return _ConvPlan("im2col", cdtype, (group, m // group, (c // group) * k), bands, bias_shape, out_shape,
                     block)


#: output bytes one pass of the numpy depthwise Conv covers: a block of channels of one image,
#: so its output and per-tap products stay in the L2 cache from one tap to the next
_DEPTHWISE_BLOCK_BYTES = 256 << 10


def _conv_depthwise(x, w, res, p: _ConvPlan, tmp: np.ndarray):
    """Depthwise conv as one multiply-add per kernel tap (``tmp``: a scratch buffer of the
    output's shape), over blocks of channels of one image at a time when the output is
    larger than _DEPTHWISE_BLOCK_BYTES (each tap pass then stays in cache)."""
    wt = np.ascontiguousarray(w.reshape(p.w_shape[2], p.w_shape[0]).T).reshape(p.w_shape)
    taps = p.bands[0].taps
    if not taps:
        res.fill(0)
        return
    n, c = res.shape[:2]
    plane = math.prod(res.shape[2:]) * res.itemsize
    if n * c * plane <= _DEPTHWISE_BLOCK_BYTES:
        _depthwise_taps(x, wt, res, tmp, taps)
        return
    per = max(1, _DEPTHWISE_BLOCK_BYTES // max(plane, 1))
    for i in range(n):
        for c0 in range(0, c, per):
            block = (slice(i, i + 1), slice(c0, c0 + per))
            _depthwise_taps(x[block], wt[:, :, c0:c0 + per], res[block], tmp[block], taps)


def _depthwise_taps(x, wt, res, tmp, taps) -> None:
    """res = sum over taps of x[src] * wt[t] into res[dst] (x, res, tmp: (N, C, ...) views of
    the same channels; wt: (K, 1, C, 1...))."""
    (t0, *dst0), src0 = taps[0]
    dst0 = tuple(dst0)
    if all(s.start == 0 and s.stop == o for s, o in zip(dst0[2:], res.shape[2:])):
        np.multiply(x[src0], wt[t0], out=res)
        rest = taps[1:]
    else:
        res.fill(0)
        rest = taps
    for (t, *dst), src in rest:
        dst = tuple(dst)
        part = tmp[dst]
        np.multiply(x[src], wt[t], out=part)
        view = res[dst]
        np.add(view, part, out=view)


def _conv_band(xt, wm, band: _ConvBand, cols: np.ndarray, res: np.ndarray, block: int,
               part_buf: np.ndarray | None) -> None:
    """Fill the band's columns from X (viewed (C, N, *in)) and multiply into ``res``
    (``part_buf``: flat scratch for the partial products of a blocked reduction)."""
    if band.window is not None:
        _window_columns(xt, cols, band.window)
    else:
        if band.zero_fill:
            cols.fill(0)
        for dst, src in band.taps:
            cols[dst] = xt[src]
    part = None if part_buf is None else part_buf[:res.size].reshape(res.shape)
    _blocked_matmul(wm, cols.reshape(band.mat_shape), res, block, part)


def _conv_im2col(x, w, y, p: _ConvPlan, cols_buf: np.ndarray, res_buf: np.ndarray,
                 part_buf: np.ndarray | None):
    """im2col + one (blocked) matmul per band; ``cols_buf`` / ``res_buf`` / ``part_buf``: flat
    scratch buffers of at least the first band's columns and products."""
    wm = w.reshape(p.w_shape)
    xt = x.swapaxes(0, 1)
    n, m = y.shape[0], y.shape[1]
    first = p.bands[0]
    cols = cols_buf[:math.prod(first.cols_shape)].reshape(first.cols_shape)
    if len(p.bands) == 1:
        if n == 1:   # (G, M/G, 1, OUT) is the output's own layout
            _conv_band(xt, wm, first, cols, y.reshape(first.res_shape), p.block, part_buf)
        else:
            res = res_buf[:math.prod(first.res_shape)].reshape(first.res_shape)
            _conv_band(xt, wm, first, cols, res, p.block, part_buf)
            y[...] = res.reshape((m, n) + y.shape[2:]).swapaxes(0, 1)
        return
    for band in p.bands:
        res = res_buf[:math.prod(band.res_shape)].reshape(band.res_shape)
        _conv_band(xt, wm, band, cols_buf[:math.prod(band.cols_shape)].reshape(band.cols_shape), res,
                   p.block, part_buf)
        y[:, :, band.rows] = res.reshape((m, n) + band.cols_shape[3:]).swapaxes(0, 1)


@lib.kernel("Conv", prepare=_conv_prepare, scratch=_conv_scratch)
def _conv(inputs, outputs, p: _ConvPlan):
    """Conv into Y; temporaries come from the scratch buffers after Y (see _conv_scratch)."""
    x = as_dtype(inputs[0], p.cdtype)
    w = as_dtype(inputs[1], p.cdtype)
    y = outputs[0]
    size = math.prod(p.out_shape)
    n_tmp = 2 if p.mode == "im2col" else 1 if p.mode == "depthwise" else 0
    half = y.dtype != p.cdtype
    res = _scratch(outputs, 1 + n_tmp, size, p.cdtype).reshape(p.out_shape) if half else y
    if p.mode == "pointwise":
        band = p.bands[0]
        out = res.reshape(band.res_shape)
        part = _scratch(outputs, 1 + half, size, p.cdtype).reshape(out.shape) if band.mat_shape[2] > p.block else None
        _blocked_matmul(w.reshape(p.w_shape), x.reshape(band.mat_shape), out, p.block, part)
    elif p.mode == "depthwise":
        _conv_depthwise(x, w, res, p, _scratch(outputs, 1, size, p.cdtype).reshape(p.out_shape))
    else:
        first = p.bands[0]
        part = None
        if first.mat_shape[1] > p.block:
            part = _scratch(outputs, 3 + half, math.prod(first.res_shape), p.cdtype)
        _conv_im2col(x, w, res, p, _scratch(outputs, 1, math.prod(first.cols_shape), p.cdtype),
                     _scratch(outputs, 2, math.prod(first.res_shape), p.cdtype), part)
    if len(inputs) > 2 and inputs[2] is not None:
        np.add(res, as_dtype(inputs[2], p.cdtype).reshape(p.bias_shape), out=res)
    _store(y, res)


# ----------------------------------------------------------------------------------------
# ConvTranspose
# ----------------------------------------------------------------------------------------

def _conv_transpose_geometry(ctx, x, w):
    """(kernel, strides, dilations, pads_begin or None, out dims) of ConvTranspose."""
    n = len(x) - 2
    kernel = _spatial_kernel(ctx, x, w, required=False)
    strides = _int_list(ctx, "strides", n, 1, 1)
    dilations = _int_list(ctx, "dilations", n, 1, 1)
    out_pad = _int_list(ctx, "output_padding", n, 0, 0)
    for op, s, d in zip(out_pad, strides, dilations):
        if op >= s and op >= d:
            ctx.fail(f"output_padding {out_pad} must be smaller than strides {strides} or dilations "
                     f"{dilations}", kind="InvalidAttribute")
    auto_pad = _auto_pad(ctx)
    effective = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    full = [s * (i - 1) + op + e for i, s, op, e in zip(x[2:], strides, out_pad, effective)]
    output_shape = ctx.attr("output_shape")
    if output_shape is not None:
        output_shape = [int(v) for v in output_shape]
        if len(output_shape) == n + 2:
            output_shape = output_shape[2:]
        if len(output_shape) != n:
            ctx.fail(f"output_shape {output_shape} must have {n} values (one per spatial axis)",
                     kind="InvalidAttribute")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = output_shape if output_shape is not None else [i * s for i, s in zip(x[2:], strides)]
        begin = None
        if all(is_known(f) for f in full):
            # spec: total_padding = full - out; SAME_UPPER puts the odd pixel at the end
            totals = [f - o for f, o in zip(full, out)]
            upper = auto_pad == "SAME_UPPER"
            begin = tuple(t // 2 if upper else t - t // 2 for t in totals)
        return kernel, strides, dilations, begin, tuple(out)
    pads = [0] * (2 * n) if auto_pad == "VALID" else _int_list(ctx, "pads", 2 * n, 0, 0)
    out = tuple(f - b - e for f, b, e in zip(full, pads[:n], pads[n:]))
    return kernel, strides, dilations, tuple(pads[:n]), out


@lib.op("ConvTranspose", since_version=(1, 11, 22), infer_dtype=same_dtype(0))
def _conv_transpose_shape(ctx):
    """ConvTranspose: Y (N, W.shape[1]*group, *out) from X (N, C, *in), W (C, M/group, *k), B (M,).

    out = stride*(in-1) + output_padding + (k-1)*dilation + 1 - pads, or ``output_shape``, or
    in*stride for SAME auto_pad. Raises ShapeInferenceError for mismatched ranks/channels.
    Source: ONNX operator spec, ConvTranspose-1/11/22.
    """
    checked = _conv_check(ctx)
    if checked is None:
        return [None]
    x, w, group = checked
    require(ctx, x[1], "==", w[0], f"input channels {x[1]} must equal W.shape[0] = {w[0]}", "ChannelMismatch")
    require(ctx, x[1] % group, "==", 0, f"input channels {x[1]} must be divisible by group {group}",
            "ChannelMismatch")
    m = w[1] * group
    if ctx.has_input(2):
        b = ctx.shape(2)
        if b is not None and len(b) != 1:
            ctx.fail(f"bias B must have shape ({m},), got {tuple(b)}", kind="BiasShapeMismatch")
        if b is not None:
            require(ctx, b[0], "==", m, f"bias B must have shape ({m},), got {tuple(b)}", "BiasShapeMismatch")
    out = _conv_transpose_geometry(ctx, x, w)[4]
    for o in out:
        require(ctx, o, ">=", 0, f"output spatial shape {list(out)} is negative", "InvalidShape")
    return [(x[0], m) + tuple(out)]


class _ConvTPlan(NamedTuple):
    cdtype: np.dtype
    w_shape: tuple       # (G, C/G, M/G*K)
    x_shape: tuple       # (N, G, C/G, IN)
    cols_shape: tuple    # (N, M, K, *in)
    taps: tuple          # (output index, cols index)
    bias_shape: tuple
    tiling: bool         # every output element gets exactly one tap: assign, no zero fill


def _conv_transpose_prepare(ctx) -> _ConvTPlan:
    x, w = ctx.shape(0), ctx.shape(1)
    group = int(ctx.attr("group", 1))
    kernel, strides, dilations, begin, out = _conv_transpose_geometry(ctx, x, w)
    geom = _Geometry(tuple(kernel), tuple(strides), tuple(dilations), begin, None, tuple(out))
    taps, _ = _taps(x[2:], out, geom)
    k = int(np.prod(kernel))
    tiling = True
    for size_in, size_out, kk, s, d, pb in zip(x[2:], out, kernel, strides, dilations, begin):
        hits = np.zeros(size_out, np.int64)
        for tap in _axis_taps(size_in, size_out, kk, s, d, pb):
            if tap is not None:
                hits[tap[1]] += 1
        tiling = tiling and bool((hits == 1).all())
    n, c = x[0], x[1]
    mg = w[1]
    return _ConvTPlan(
        cdtype=compute_dtype(ctx.dtype(0)), w_shape=(group, c // group, mg * k),
        x_shape=(n, group, c // group, int(np.prod(x[2:]))), cols_shape=(n, mg * group, k) + tuple(x[2:]),
        taps=tuple((b, (slice(None), slice(None), t) + a[2:]) for t, a, b in taps),
        bias_shape=(mg * group,) + (1,) * len(out), tiling=tiling)


@lib.kernel("ConvTranspose", prepare=_conv_transpose_prepare)
def _conv_transpose(inputs, outputs, p: _ConvTPlan):
    x = as_dtype(inputs[0], p.cdtype)
    w = as_dtype(inputs[1], p.cdtype)
    cols = np.matmul(w.reshape(p.w_shape).transpose(0, 2, 1), x.reshape(p.x_shape))
    cols = cols.reshape(p.cols_shape)
    y = outputs[0]
    res = y if y.dtype == p.cdtype else np.empty(y.shape, p.cdtype)
    if p.tiling:
        for dst, src in p.taps:
            res[dst] = cols[src]
    else:
        res.fill(0)
        for dst, src in p.taps:
            view = res[dst]
            np.add(view, cols[src], out=view)
    if len(inputs) > 2 and inputs[2] is not None:
        np.add(res, as_dtype(inputs[2], p.cdtype).reshape(p.bias_shape), out=res)
    _store(y, res)


# ----------------------------------------------------------------------------------------
# pools
# ----------------------------------------------------------------------------------------

def _pool_geometry(ctx, x, *, dilations_since: int | None) -> _Geometry:
    kernel = _spatial_kernel(ctx, x, required=True)
    ceil_mode = bool(ctx.attr("ceil_mode", 0)) if ctx.opset >= 10 else False
    dil_ok = dilations_since is not None and ctx.opset >= dilations_since
    if not dil_ok and ctx.attr("dilations") is not None and any(d != 1 for d in ctx.attr("dilations")):
        ctx.fail(f"attribute 'dilations' is not defined for {ctx.node.op_type}-{ctx.opset}",
                 kind="InvalidAttribute")
    return _window_geometry(ctx, x[2:], kernel, ceil_mode=ceil_mode, dilations_allowed=dil_ok)


def _pool_shape_fn(dilations_since: int | None, float_only: bool = True):
    def infer(ctx):
        x = _check_rank_at_least(ctx, 0, 3, "input X")
        if float_only:
            _check_float(ctx, 0)
        if x is None:
            return [None] * max(1, ctx.num_outputs)
        geom = _pool_geometry(ctx, x, dilations_since=dilations_since)
        return [tuple(x[:2]) + geom.out] * max(1, ctx.num_outputs)
    return infer


def _max_pool_dtype(ctx):
    return [ctx.dtype(0), np.dtype(np.int64)][:max(1, ctx.num_outputs)]


def _max_pool_shape(ctx):
    """MaxPool: Y (N, C, *out) and optional Indices (int64, flat index into X).

    Raises ShapeInferenceError for a missing kernel_shape, bad pads/strides/dilations,
    Indices or storage_order before opset 8, non float/int8/uint8 input.
    Source: ONNX operator spec, MaxPool-1/8/10/11/12/22.
    """
    dt = ctx.dtype(0)
    if dt is not None and np.dtype(dt).kind in "iu" and ctx.opset >= 12:
        if np.dtype(dt).itemsize != 1:
            ctx.fail(f"integer input dtype {dt} is not allowed (expected int8/uint8/float)", kind="InvalidDtype")
        shapes = _pool_shape_fn(10, float_only=False)(ctx)
    else:
        shapes = _pool_shape_fn(10)(ctx)
    if ctx.num_outputs > 1 and ctx.opset < 8:
        ctx.fail("output Indices is only defined from MaxPool-8", kind="InvalidOutputs")
    return shapes


lib.op("MaxPool", since_version=(1, 8, 10, 11, 12, 22), infer_dtype=_max_pool_dtype)(_max_pool_shape)


class _PoolPlan(NamedTuple):
    cdtype: np.dtype
    first: tuple | None   # a tap covering the whole output: copied instead of reduced
    taps: tuple              # (output index, input index)
    divisor: np.ndarray | None
    p: float
    index: tuple | None   # MaxPool Indices: (N*C offsets, per-tap spatial flat indices)


def _pool_plan(ctx, *, dilations_since: int | None, cdtype, divisor=False, with_index=False,
               p: float = 1.0) -> _PoolPlan:
    x = ctx.shape(0)
    geom = _pool_geometry(ctx, x, dilations_since=dilations_since)
    taps, _ = _taps(geom.out, x[2:], geom)
    first = None
    for i, (_, a, b) in enumerate(taps):
        if all(s == slice(None) or (s.start == 0 and s.stop == o) for s, o in zip(a[2:], geom.out)):
            first = (a, b)
            taps = taps[:i] + taps[i + 1:]
            break
    div = _avg_divisor(ctx, x[2:], geom) if divisor else None
    index = None
    if with_index:
        first = None
        taps = [(0, a, b) for _, a, b in _taps(geom.out, x[2:], geom)[0]]
        index = _max_index_plan(ctx, x, taps)
    return _PoolPlan(cdtype=cdtype, first=first, taps=tuple((a, b) for _, a, b in taps),
                     divisor=div, p=p, index=index)


def _avg_divisor(ctx, in_spatial, geom: _Geometry) -> np.ndarray:
    """Number of summed elements per output position (pads counted with count_include_pad)."""
    include_pad = bool(ctx.attr("count_include_pad", 0))
    counts = []
    for d, o, k, s, dil, pb, pe in zip(in_spatial, geom.out, geom.kernel, geom.strides, geom.dilations,
                                       geom.pads_begin, geom.pads_end):
        pos = np.arange(o)[:, None] * s - pb + np.arange(k)[None, :] * dil
        lo, hi = (-pb, d + pe) if include_pad else (0, d)
        counts.append(((pos >= lo) & (pos < hi)).sum(axis=1))
    div = counts[0].astype(np.float64)
    for cnt in counts[1:]:
        div = np.multiply.outer(div, cnt)
    return np.maximum(div, 1).astype(compute_dtype(ctx.dtype(0)))


def _max_index_plan(ctx, x, taps):
    """Flat-index pieces for MaxPool's Indices: (N*C offset column, spatial index per tap)."""
    spatial = x[2:]
    if int(ctx.attr("storage_order", 0)) == 1:   # column-major over the spatial axes
        strides = np.cumprod((1,) + tuple(spatial[:-1]))
    else:
        strides = np.cumprod((1,) + tuple(spatial[::-1][:-1]))[::-1]
    plane = int(np.prod(spatial))
    offsets = (np.arange(x[0] * x[1], dtype=np.int64) * plane).reshape((x[0], x[1]) + (1,) * len(spatial))
    per_tap = []
    for _, _, b in taps:
        idx = np.zeros((1, 1) + (1,) * len(spatial), np.int64)
        for axis, (sl, st) in enumerate(zip(b[2:], strides)):
            shape = [1] * (2 + len(spatial))
            shape[2 + axis] = -1
            idx = idx + (np.arange(sl.start, sl.stop, sl.step, dtype=np.int64) * st).reshape(shape)
        per_tap.append(idx)
    return offsets, tuple(per_tap)


def _max_pool_prepare(ctx) -> _PoolPlan:
    dt = np.dtype(ctx.dtype(0))
    cdtype = dt if dt.kind in "iu" or dt in (_F32, _F64) else _F32
    return _pool_plan(ctx, dilations_since=10, cdtype=cdtype, with_index=ctx.num_outputs > 1
                      and bool(ctx.node.outputs[1]))


def _lowest(dtype: np.dtype):
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


@lib.kernel("MaxPool", prepare=_max_pool_prepare)
def _max_pool(inputs, outputs, p: _PoolPlan):
    x = as_dtype(inputs[0], p.cdtype)
    y = outputs[0]
    res = y if y.dtype == p.cdtype else np.empty(y.shape, p.cdtype)
    if p.index is not None:
        _max_pool_with_index(x, res, outputs[1], p)
    else:
        if p.first is not None:
            np.copyto(res, x[p.first[1]])
        else:
            res.fill(_lowest(p.cdtype))
        for dst, src in p.taps:
            view = res[dst]
            np.maximum(view, x[src], out=view)
    _store(y, res)


def _max_pool_with_index(x, res, indices, p: _PoolPlan):
    offsets, per_tap = p.index
    res.fill(_lowest(p.cdtype))
    indices.fill(-1)
    for (dst, src), sp in zip(p.taps, per_tap):
        view, cand = res[dst], x[src]
        better = cand > view
        np.copyto(view, cand, where=better)
        np.copyto(indices[dst], offsets + sp, where=better)


def _sum_pool(x, res, p: _PoolPlan):
    if p.first is not None:
        np.copyto(res, x[p.first[1]])
    else:
        res.fill(0)
    for dst, src in p.taps:
        view = res[dst]
        np.add(view, x[src], out=view)


@lib.op("AveragePool", since_version=(1, 7, 10, 11, 19, 22), infer_dtype=same_dtype(0))
def _average_pool_shape(ctx):
    """AveragePool: Y (N, C, *out), the mean over each window (count_include_pad, ceil_mode,
    dilations from 19). Raises ShapeInferenceError for a missing kernel_shape or bad attributes.
    Source: ONNX operator spec, AveragePool-1/7/10/11/19/22.
    """
    return _pool_shape_fn(19)(ctx)


def _average_pool_prepare(ctx) -> _PoolPlan:
    return _pool_plan(ctx, dilations_since=19, cdtype=compute_dtype(ctx.dtype(0)), divisor=True)


@lib.kernel("AveragePool", prepare=_average_pool_prepare)
def _average_pool(inputs, outputs, p: _PoolPlan):
    x = as_dtype(inputs[0], p.cdtype)
    y = outputs[0]
    res = y if y.dtype == p.cdtype else np.empty(y.shape, p.cdtype)
    _sum_pool(x, res, p)
    np.divide(res, p.divisor, out=res)
    _store(y, res)


@lib.op("LpPool", since_version=(1, 2, 11, 18, 22), infer_dtype=same_dtype(0))
def _lp_pool_shape(ctx):
    """LpPool: Y (N, C, *out) = (sum over each window of |x|^p)^(1/p), pads counting as 0.

    Raises ShapeInferenceError for a missing kernel_shape or bad attributes.
    Source: ONNX operator spec, LpPool-1/2/11/18/22.
    """
    return _pool_shape_fn(18)(ctx)


def _lp_pool_prepare(ctx) -> _PoolPlan:
    return _pool_plan(ctx, dilations_since=18, cdtype=compute_dtype(ctx.dtype(0)),
                      p=float(ctx.attr("p", 2)))


def _abs_pow(x, p: float):
    return np.square(x) if p == 2.0 else np.abs(x) ** p


def _root(res, p: float):
    if p == 2.0:
        np.sqrt(res, out=res)
    elif p != 1.0:
        np.power(res, 1.0 / p, out=res)


@lib.kernel("LpPool", prepare=_lp_pool_prepare)
def _lp_pool(inputs, outputs, p: _PoolPlan):
    x = _abs_pow(as_dtype(inputs[0], p.cdtype), p.p)
    y = outputs[0]
    res = y if y.dtype == p.cdtype else np.empty(y.shape, p.cdtype)
    _sum_pool(x, res, p)
    _root(res, p.p)
    _store(y, res)


# ----------------------------------------------------------------------------------------
# global pools
# ----------------------------------------------------------------------------------------

def _global_pool_shape(ctx):
    """Y (N, C, 1, ...) of X (N, C, D1, ...). Raises EmptyReduction for an empty spatial
    extent under a non-empty (N, C): no mean, max or norm of nothing (onnxruntime refuses it too)."""
    x = _check_rank_at_least(ctx, 0, 3, "input X")
    _check_float(ctx, 0)
    if x is None:
        return [None]
    if not any(isinstance(d, int) and d == 0 for d in x[:2]):
        require(ctx, numel(x[2:]), ">", 0, f"cannot pool over the empty spatial extent {tuple(x[2:])}",
                "EmptyReduction")
    return [tuple(x[:2]) + (1,) * (len(x) - 2)]


def _global_prepare(ctx):
    rank = len(ctx.shape(0))
    return compute_dtype(ctx.dtype(0)), tuple(range(2, rank)), float(ctx.attr("p", 2))


def _global_reduce(inputs, outputs, prepared, reduce):
    cdtype, axes, _ = prepared
    y = outputs[0]
    if y.size == 0:
        return
    x = as_dtype(inputs[0], cdtype)
    if y.dtype == cdtype:
        reduce(x, axis=axes, keepdims=True, out=y)
    else:
        _store(y, reduce(x, axis=axes, keepdims=True))


@lib.op("GlobalAveragePool", since_version=(1, 22), infer_dtype=same_dtype(0))
def _global_average_pool_shape(ctx):
    """GlobalAveragePool: Y (N, C, 1, ...) = mean over all spatial axes of X (N, C, ...).

    Source: ONNX operator spec, GlobalAveragePool-1/22.
    """
    return _global_pool_shape(ctx)


@lib.kernel("GlobalAveragePool", prepare=_global_prepare)
def _global_average_pool(inputs, outputs, prepared):
    _global_reduce(inputs, outputs, prepared, np.mean)


@lib.op("GlobalMaxPool", since_version=(1, 22), infer_dtype=same_dtype(0))
def _global_max_pool_shape(ctx):
    """GlobalMaxPool: Y (N, C, 1, ...) = max over all spatial axes of X (N, C, ...).

    Source: ONNX operator spec, GlobalMaxPool-1/22.
    """
    return _global_pool_shape(ctx)


@lib.kernel("GlobalMaxPool", prepare=_global_prepare)
def _global_max_pool(inputs, outputs, prepared):
    _global_reduce(inputs, outputs, prepared, np.max)


@lib.op("GlobalLpPool", since_version=(1, 2, 22), infer_dtype=same_dtype(0))
def _global_lp_pool_shape(ctx):
    """GlobalLpPool: Y (N, C, 1, ...) = (sum over spatial axes of |x|^p)^(1/p).

    Source: ONNX operator spec, GlobalLpPool-1/2/22.
    """
    return _global_pool_shape(ctx)


@lib.kernel("GlobalLpPool", prepare=_global_prepare)
def _global_lp_pool(inputs, outputs, prepared):
    cdtype, axes, p = prepared
    res = _abs_pow(as_dtype(inputs[0], cdtype), p).sum(axis=axes, keepdims=True)
    _root(res, p)
    _store(outputs[0], res)


# ----------------------------------------------------------------------------------------
# normalisations
# ----------------------------------------------------------------------------------------

def _param_shape_check(ctx, i: int, expected, what: str) -> None:
    shape = ctx.shape(i)
    if shape is None or expected is None:
        return
    message = f"{what} must have shape {tuple(expected)}, got {tuple(shape)}"
    if len(shape) != len(expected):
        ctx.fail(message, kind="ParamShapeMismatch")
    for a, b in zip(shape, expected):
        require(ctx, a, "==", b, message, "ParamShapeMismatch")


def _bn_training(ctx) -> bool:
    if ctx.opset >= 14:
        return bool(ctx.attr("training_mode", 0))
    return ctx.num_outputs > 1 and any(ctx.node.outputs[1:])


def _bn_dtypes(ctx):
    stats = ctx.dtype(3) if ctx.dtype(3) is not None else ctx.dtype(0)
    return [ctx.dtype(0)] + [stats] * (ctx.num_outputs - 1)


@lib.op("BatchNormalization", since_version=(1, 6, 7, 9, 14, 15), infer_dtype=_bn_dtypes)
def _batch_norm_shape(ctx):
    """BatchNormalization: Y = (X - mean) / sqrt(var + epsilon) * scale + B per channel (axis 1).

    X (N, C, ...); scale, B, mean, var (C,) (or X.shape[1:] with spatial=0 before opset 9).
    Training mode (training_mode=1, or extra outputs before opset 14) normalises with the
    batch statistics and returns updated running mean/var (C,).
    Raises ShapeInferenceError for parameter shape mismatches or outputs the mode forbids.
    Source: ONNX operator spec, BatchNormalization-1/6/7/9/14/15.
    """
    x = _check_rank_at_least(ctx, 0, 2, "input X")
    _check_float(ctx, 0)
    if x is None:
        return [None] * ctx.num_outputs
    spatial = ctx.opset < 9 and not int(ctx.attr("spatial", 1))
    expected = tuple(x[1:]) if spatial else (x[1],)
    for i, name in enumerate(("scale", "B", "mean", "var"), start=1):
        if ctx.shape(i) is not None and not (spatial and len(ctx.shape(i)) == 1):
            _param_shape_check(ctx, i, expected, name)
    if ctx.opset >= 14 and ctx.num_outputs > 1 and any(ctx.node.outputs[1:]) and not _bn_training(ctx):
        ctx.fail("outputs running_mean/running_var are only allowed with training_mode=1",
                 kind="InvalidOutputs")
    return [tuple(x)] + [expected] * (ctx.num_outputs - 1)


def _bn_prepare(ctx):
    x = ctx.shape(0)
    cdtype = compute_dtype(ctx.dtype(0))
    param = ((x[1],) + (1,) * (len(x) - 2)) if len(x) > 2 else (x[1],)
    if ctx.opset < 9 and not int(ctx.attr("spatial", 1)) and ctx.shape(1) is not None \
            and numel(ctx.shape(1)) == numel(x[1:]):
        param = tuple(x[1:])
    axes = (0,) + tuple(range(2, len(x)))
    return (cdtype, param, float(ctx.attr("epsilon", 1e-5)), float(ctx.attr("momentum", 0.9)),
            _bn_training(ctx), axes)


@lib.kernel("BatchNormalization", prepare=_bn_prepare)
def _batch_norm(inputs, outputs, prepared):
    cdtype, param, eps, momentum, training, axes = prepared
    x = as_dtype(inputs[0], cdtype)
    scale, bias, mean, var = (as_dtype(a, cdtype).reshape(param) for a in inputs[1:5])
    if training:
        batch_mean = x.mean(axis=axes)
        batch_var = x.var(axis=axes)
        a = scale / np.sqrt(batch_var.reshape(param) + eps)
        b = bias - batch_mean.reshape(param) * a
        stats = (mean.reshape(-1) * momentum + batch_mean * (1 - momentum),
                 var.reshape(-1) * momentum + batch_var * (1 - momentum), batch_mean, batch_var)
        for out, value in zip(outputs[1:], stats):
            if out is not None:
                _store(out, value.reshape(out.shape))
    else:
        a = scale / np.sqrt(var + eps)
        b = bias - mean * a
    y = outputs[0]
    res = y if y.dtype == cdtype else np.empty(y.shape, cdtype)
    np.multiply(x, a, out=res)
    np.add(res, b, out=res)
    _store(y, res)


@lib.op("InstanceNormalization", since_version=(1, 6, 22), infer_dtype=same_dtype(0))
def _instance_norm_shape(ctx):
    """InstanceNormalization: y = scale * (x - mean) / sqrt(var + epsilon) + B, statistics per
    (n, c) over the spatial axes. X (N, C, ...); scale, B (C,). Output shape = X's.
    Source: ONNX operator spec, InstanceNormalization-1/6/22.
    """
    x = _check_rank_at_least(ctx, 0, 3, "input X")
    _check_float(ctx, 0)
    if x is None:
        return [None]
    _param_shape_check(ctx, 1, (x[1],), "scale")
    _param_shape_check(ctx, 2, (x[1],), "B")
    return [tuple(x)]


def _normalize(x, axes, eps, cdtype):
    """(x - mean) * inv_std over ``axes`` (keepdims), with mean and inv_std."""
    mean = x.mean(axis=axes, keepdims=True, dtype=cdtype)
    centered = x - mean
    var = np.mean(np.square(centered), axis=axes, keepdims=True)
    inv_std = 1.0 / np.sqrt(var + eps)
    centered *= inv_std
    return centered, mean, inv_std


def _instance_prepare(ctx):
    rank = len(ctx.shape(0))
    return (compute_dtype(ctx.dtype(0)), tuple(range(2, rank)), (-1,) + (1,) * (rank - 2),
            float(ctx.attr("epsilon", 1e-5)))


@lib.kernel("InstanceNormalization", prepare=_instance_prepare)
def _instance_norm(inputs, outputs, prepared):
    cdtype, axes, param, eps = prepared
    y, _, _ = _normalize(as_dtype(inputs[0], cdtype), axes, eps, cdtype)
    y *= as_dtype(inputs[1], cdtype).reshape(param)
    y += as_dtype(inputs[2], cdtype).reshape(param)
    _store(outputs[0], y)


def _layer_norm_dtypes(ctx):
    stash = np_dtype(int(ctx.attr("stash_type", 1)))
    return [ctx.dtype(0)] + [stash] * (ctx.num_outputs - 1)


@lib.op("LayerNormalization", since_version=17, infer_dtype=_layer_norm_dtypes)
def _layer_norm_shape(ctx):
    """LayerNormalization: normalise X over axes [axis, rank), then * Scale + B (broadcast).

    Outputs Y (X's shape), optional Mean and InvStdDev (X.shape[:axis] + [1]*(rank-axis),
    dtype of stash_type). Raises ShapeInferenceError for an axis out of range or a Scale/B
    not broadcastable to the normalised shape.
    Source: ONNX operator spec, LayerNormalization-17.
    """
    x = ctx.shape(0)
    _check_float(ctx, 0)
    if x is None:
        return [None] * ctx.num_outputs
    if len(x) == 0:
        ctx.fail("input X must have rank >= 1", kind="InvalidRank")
    axis = normalize_axis(ctx, ctx.attr("axis", -1), len(x))
    normalized = tuple(x[axis:])
    for i, name in ((1, "Scale"), (2, "B")):
        s = ctx.shape(i)
        if s is None:
            continue
        message = f"{name} shape {tuple(s)} is not broadcastable to the normalised shape {normalized}"
        if len(s) > len(normalized):
            ctx.fail(message, kind="ParamShapeMismatch")
        for a, b in zip(s[::-1], normalized[::-1]):
            if a != 1:   # (a symbolic a bound to 1 breaks the guard: inferred per node, where 1 broadcasts)
                require(ctx, a, "==", b, message, "ParamShapeMismatch")
    stats = tuple(x[:axis]) + (1,) * len(normalized)
    return [tuple(x)] + [stats] * (ctx.num_outputs - 1)


def _layer_norm_cdtype(ctx) -> np.dtype:
    stash = np_dtype(int(ctx.attr("stash_type", 1)))
    return _F64 if _F64 in (np.dtype(ctx.dtype(0)), stash) else _F32


def _layer_norm_prepare(ctx):
    rank = len(ctx.shape(0))
    axis = normalize_axis(ctx, ctx.attr("axis", -1), rank)
    return _layer_norm_cdtype(ctx), tuple(range(axis, rank)), float(ctx.attr("epsilon", 1e-5)), ctx.num_outputs


def _layer_norm_scratch(ctx) -> list:
    """The centred input and its squares, in the compute dtype."""
    shape = tuple(ctx.shape(0))
    return [(shape, _layer_norm_cdtype(ctx))] * 2


def _mean_over(x: np.ndarray, axes: tuple) -> np.ndarray:
    """The mean over the trailing ``axes`` (keepdims): BLAS row sums where they apply
    (``reduction.trailing_sums``), else numpy's mean."""
    sums = trailing_sums(x, len(axes))
    if sums is None:
        return x.mean(axis=axes, keepdims=True, dtype=x.dtype)
    sums *= x.dtype.type(1.0 / math.prod(x.shape[axes[0]:]))
    return sums


@lib.kernel("LayerNormalization", prepare=_layer_norm_prepare, scratch=_layer_norm_scratch)
def _layer_norm(inputs, outputs, prepared):
    """(X - mean) / sqrt(var + epsilon) * Scale + B over the normalised axes, into Y; the
    centred input and its squares live in scratch buffers."""
    cdtype, axes, eps, n = prepared
    x = as_dtype(inputs[0], cdtype)
    y = outputs[0]
    size = x.size
    centered = _scratch(outputs, n, size, cdtype).reshape(x.shape)
    squares = _scratch(outputs, n + 1, size, cdtype).reshape(x.shape)
    mean = _mean_over(x, axes)
    np.subtract(x, mean, out=centered)
    np.square(centered, out=squares)
    inv_std = _mean_over(squares, axes)
    inv_std += eps
    np.sqrt(inv_std, out=inv_std)
    np.reciprocal(inv_std, out=inv_std)
    result = y if y.dtype == cdtype else squares
    np.multiply(centered, inv_std, out=result)
    np.multiply(result, as_dtype(inputs[1], cdtype), out=result)
    if len(inputs) > 2 and inputs[2] is not None:
        np.add(result, as_dtype(inputs[2], cdtype), out=result)
    _store(y, result)
    for out, value in zip(outputs[1:n], (mean, inv_std)):
        if out is not None:
            _store(out, value)


@lib.op("GroupNormalization", since_version=(18, 21), infer_dtype=same_dtype(0))
def _group_norm_shape(ctx):
    """GroupNormalization: normalise X (N, C, ...) over each of num_groups channel groups and
    the spatial axes, then * scale + bias (per group in opset 18: shape (G,); per channel from
    opset 21: shape (C,)). Raises ShapeInferenceError when C is not divisible by num_groups.
    Source: ONNX operator spec, GroupNormalization-18/21.
    """
    x = _check_rank_at_least(ctx, 0, 2, "input X")
    _check_float(ctx, 0)
    groups = ctx.attr("num_groups")
    if groups is None:
        ctx.fail("attribute 'num_groups' is required", kind="MissingAttribute")
    if int(groups) < 1:
        ctx.fail(f"num_groups {groups} must be >= 1", kind="InvalidAttribute")
    if x is None:
        return [None]
    require(ctx, x[1] % int(groups), "==", 0, f"channels {x[1]} must be divisible by num_groups {groups}",
            "ChannelMismatch")
    expected = (x[1],) if ctx.opset >= 21 else (int(groups),)
    _param_shape_check(ctx, 1, expected, "scale")
    _param_shape_check(ctx, 2, expected, "bias")
    return [tuple(x)]


def _group_norm_prepare(ctx):
    x = ctx.shape(0)
    groups = int(ctx.attr("num_groups"))
    cdtype = compute_dtype(ctx.dtype(0))
    if ctx.opset >= 21 and int(ctx.attr("stash_type", 1)) == 11:
        cdtype = _F64
    param = (x[1],) + (1,) * (len(x) - 2)
    return (cdtype, (x[0], groups, -1), float(ctx.attr("epsilon", 1e-5)), param,
            x[1] // groups if ctx.opset < 21 else 1)


@lib.kernel("GroupNormalization", prepare=_group_norm_prepare)
def _group_norm(inputs, outputs, prepared):
    cdtype, grouped, eps, param, repeat = prepared
    x = as_dtype(inputs[0], cdtype)
    y, _, _ = _normalize(x.reshape(grouped), (2,), eps, cdtype)
    y = y.reshape(x.shape)
    scale, bias = (as_dtype(a, cdtype) for a in inputs[1:3])
    if repeat > 1:
        scale, bias = np.repeat(scale, repeat), np.repeat(bias, repeat)
    y *= scale.reshape(param)
    y += bias.reshape(param)
    _store(outputs[0], y)
