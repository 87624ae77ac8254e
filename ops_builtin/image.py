"""Image operators: GridSample, AffineGrid, Col2Im, DeformConv, CenterCropPad, MaxUnpool and
ImageDecoder.

* GridSample (N-d) and DeformConv sample X at fractional positions. Per spatial axis the
  positions become integer taps (1 for nearest, 2 for linear, 4 for cubic) with weights
  and the padding rule applied to each tap index; the taps of all axes are combined by
  a recursion over the axes (outermost first) whose leaves are single
  ``take_along_axis`` gathers of every output position at once. The weighted sums run
  innermost axis first, in onnxruntime's order of operations.
* Col2Im is one strided slice-add per block position (taps, never pixels), as the
  ConvTranspose col2im of ``nn.py``.
* AffineGrid is one batched matmul of theta with the homogeneous base grid.
* CenterCropPad and MaxUnpool are a slice copy and a flat scatter.
* ImageDecoder decodes with Pillow, an optional dependency (``pip install 'dynashape[image]'``).

Source: ONNX operator spec (Operators.md), sections named in each docstring; onnxruntime's
CPU kernels where the spec leaves arithmetic details open.
"""
from __future__ import annotations

import io
import itertools

import numpy as np
from dynashape.errors import ShapeInferenceError
from dynashape.records import OpLibrary, fixed_dtype, same_dtype
from dynashape.shapes import check_dims_equal, normalize_axes, numel, pool_output_dim, require, value_list
from dynashape.symbolic import Expr

lib = OpLibrary()

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


# ----------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------

def _is_float(dt) -> bool:
    return dt is not None and (dt.kind == "f" or (dt.kind == "V" and "float" in dt.name))


def _check_float(ctx, i: int, what: str) -> None:
    if ctx.dtype(i) is not None and not _is_float(ctx.dtype(i)):
        ctx.fail(f"{what} has dtype {ctx.dtype(i)}, expected a floating-point tensor", kind="InvalidDtype")


def _check_int64(ctx, i: int, what: str) -> None:
    if ctx.dtype(i) is not None and ctx.dtype(i) != np.int64:
        ctx.fail(f"{what} has dtype {ctx.dtype(i)}, expected int64", kind="InvalidDtype")


def _choice(ctx, name: str, default: str, allowed) -> str:
    value = ctx.attr(name, default)
    if isinstance(value, bytes):
        value = value.decode()
    if value not in allowed:
        ctx.fail(f"attribute {name}={value!r} is not one of {', '.join(allowed)}", kind="InvalidAttribute")
    return value


def _ints_attr(ctx, name: str, n: int, default: int, minimum: int) -> list:
    value = ctx.attr(name)
    if value is None:
        return [default] * n
    value = [int(v) for v in value]
    if len(value) != n:
        ctx.fail(f"attribute '{name}' has {len(value)} values, expected {n}", kind="InvalidAttribute")
    if any(v < minimum for v in value):
        ctx.fail(f"attribute '{name}' = {value} must be >= {minimum}", kind="InvalidAttribute")
    return value


def _dims(value) -> list | None:
    """A host-known 1-D integer value as a list of dims (ints or Exprs), or None."""
    if value is None:
        return None
    return [v if isinstance(v, Expr) else int(v) for v in value_list(value)]


def _fail_run(op: str, name: str, message: str, kind: str):
    raise ShapeInferenceError(f"{op} node '{name}': {message}", node=name, op_type=op, kind=kind)


# ----------------------------------------------------------------------------------------
# GridSample
# ----------------------------------------------------------------------------------------

_GS_MODES = {16: ("bilinear", "nearest", "bicubic"), 20: ("linear", "nearest", "cubic")}
_GS_CANON = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}


def _gs_attrs(ctx):
    modes = _GS_MODES[16 if ctx.opset < 20 else 20]
    mode = _GS_CANON[_choice(ctx, "mode", modes[0], modes)]
    padding = _choice(ctx, "padding_mode", "zeros", ("zeros", "border", "reflection"))
    return mode, padding, bool(ctx.attr("align_corners", 0))


@lib.op("GridSample", since_version=(16, 20, 22), infer_dtype=same_dtype(0))
def _grid_sample_shape(ctx):
    """GridSample: Y (N, C, *grid spatial) sampled from X (N, C, D1..Dr) at grid (N, D1_out..Dr_out, r).

    GridSample-16: 4-D X only, modes bilinear/nearest/bicubic. GridSample-20/22: any r >= 1,
    modes linear/nearest/cubic (N-linear / N-cubic). Padding: ``zeros`` reads 0 outside,
    ``border`` clamps each tap index (onnxruntime; the ONNX reference clamps the position
    first, which differs for cubic only), ``reflection`` reflects the position, then each tap
    index. Integer X is sampled in float64 and truncated; strings only with nearest.
    Raises InvalidRank, DimMismatch, InvalidAttribute, InvalidDtype. Source: ONNX operator
    spec, GridSample-16/20/22.
    """
    _gs_attrs(ctx)
    x, grid = ctx.shape(0), ctx.shape(1)
    _check_float(ctx, 1, "grid")
    if ctx.dtype(0) is not None and ctx.dtype(0).kind in "OSU" and ctx.attr("mode", "") not in (b"nearest", "nearest"):
        ctx.fail("X holds strings: only mode 'nearest' can sample them", kind="InvalidDtype")
    if x is not None:
        if ctx.opset < 20 and len(x) != 4:
            ctx.fail(f"X must be 4-D (N, C, H, W) in GridSample-{ctx.opset}, got rank {len(x)}", kind="InvalidRank")
        if len(x) < 3:
            ctx.fail(f"X must have rank >= 3 (N, C, spatial...), got rank {len(x)}", kind="InvalidRank")
    if x is None or grid is None:
        return [None]
    r = len(x) - 2
    if len(grid) != r + 2:
        ctx.fail(f"grid must have rank {r + 2} (N, {r} output spatial dims, {r}) for X of rank {len(x)}, got "
                 f"rank {len(grid)}", kind="InvalidRank")
    check_dims_equal(ctx, grid[-1], r, "grid.shape[-1] (the coordinates per location) and X's spatial rank")
    n = check_dims_equal(ctx, x[0], grid[0], "batch size N of X and grid")
    return [(n, x[1]) + tuple(grid[1:-1])]


def _gs_prepare(ctx):
    return _gs_attrs(ctx)


def _reflect(x, lo: float, hi: float):
    """Reflect coordinates by the borders ``lo``/``hi`` until inside (onnxruntime's GsReflect)."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    t = x.dtype.type
    below, above = x < lo, x > hi
    dx = np.where(below, t(lo) - x, x - t(hi))
    n = np.trunc(dx / t(span))
    rem = dx - n * t(span)
    even = np.fmod(n, 2) == 0
    return np.where(below, np.where(even, t(lo) + rem, t(hi) - rem),
                    np.where(above, np.where(even, t(hi) - rem, t(lo) + rem), x))


def _as_index(x) -> np.ndarray:
    """Float positions to int64 indices, truncating; NaN/inf become a far out-of-range index."""
    return np.where(np.isfinite(x), np.clip(x, -2.0 ** 62, 2.0 ** 62), -2.0 ** 62).astype(np.int64)


def _tap_index(i: np.ndarray, length: int, padding: str, lo: float, hi: float, cdt):
    """(clamped index, valid mask or None) of integer taps ``i`` along an axis of ``length``."""
    if padding == "zeros":
        return np.clip(i, 0, length - 1), (i >= 0) & (i < length)
    if padding == "reflection":
        i = _as_index(_reflect(i.astype(cdt), lo, hi))
    return np.clip(i, 0, length - 1), None


def _cubic_coeffs(t):
    """Keys cubic convolution weights (alpha -0.75) of the 4 taps for fractions ``t``."""
    a = t.dtype.type(-0.75)
    t = np.abs(t)
    one = t.dtype.type(1)
    two = t.dtype.type(2)
    return [((a * (t + one) - 5 * a) * (t + one) + 8 * a) * (t + one) - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + one,
            ((a + 2) * (one - t) - (a + 3)) * (one - t) * (one - t) + one,
            ((a * (two - t) - 5 * a) * (two - t) + 8 * a) * (two - t) - 4 * a]


def _axis_taps(x, length: int, mode: str, padding: str, align: bool, cdt):
    """Per axis: list of (index, valid mask or None, weight or None) taps of positions ``x``."""
    lo, hi = (0.0, length - 1.0) if align else (-0.5, length - 0.5)
    if mode == "nearest":
        i = _as_index(np.rint(x))
        return [_tap_index(i, length, padding, lo, hi, cdt) + (None,)]
    if padding == "reflection":   # positions outside the borders are reflected inside first
        x = _reflect(x, lo, hi)       # (border clamps each tap index only, as onnxruntime)
    f = np.floor(x)
    base = _as_index(f)
    if mode == "linear":
        weights = [(f + cdt.type(1)) - x, x - f]
        offsets = (0, 1)
    else:
        weights = _cubic_coeffs(x - f)
        offsets = (-1, 0, 1, 2)
    return [_tap_index(base + o, length, padding, lo, hi, cdt) + (w,) for o, w in zip(offsets, weights)]


def _sample(xf, taps: list, strides: list, zero):
    """Weighted sum over the taps of every axis (outermost axis first in the recursion, so the
    innermost axis is summed first). ``xf`` is X as (N, C, P); taps per axis from _axis_taps."""
    def rec(axis, flat, valid):
        if axis == len(taps):
            v = np.take_along_axis(xf, flat[:, None, :], axis=2)
            return v if valid is None else np.where(valid[:, None, :], v, zero)
        acc = None
        for idx, ok, w in taps[axis]:
            f = idx * strides[axis] if flat is None else flat + idx * strides[axis]
            ok = valid if ok is None else (ok if valid is None else valid & ok)
            v = rec(axis + 1, f, ok)
            term = v if w is None else w[:, None, :] * v
            acc = term if acc is None else acc + term
        return acc
    return rec(0, None, None)


def _grid_sample_run(x, grid, mode: str, padding: str, align: bool):
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    r = len(spatial)
    m = int(np.prod(grid.shape[1:-1], dtype=np.int64))
    cdt = _F64 if grid.dtype == _F64 or x.dtype == _F64 or x.dtype.kind in "iub" else _F32
    g = grid.reshape(n, m, r).astype(cdt, copy=False)
    taps = []
    for axis, length in enumerate(spatial):
        u = g[:, :, r - 1 - axis]           # the grid lists the innermost axis first
        if align:
            pos = (u + cdt.type(1)) / cdt.type(2) * cdt.type(length - 1)
        else:
            pos = ((u + cdt.type(1)) * cdt.type(length) - cdt.type(1)) / cdt.type(2)
        taps.append(_axis_taps(pos, length, mode, padding, align, cdt))
    strides = [int(np.prod(spatial[a + 1:], dtype=np.int64)) for a in range(r)]
    if mode == "nearest":
        xf = x.reshape(n, c, -1)
        zero = "" if x.dtype.kind in "OSU" else x.dtype.type(0)
    else:
        xdt = np.result_type(cdt, x.dtype) if x.dtype.kind == "c" else cdt
        xf = x.reshape(n, c, -1).astype(xdt, copy=False)
        zero = xdt.type(0)
    return _sample(xf, taps, strides, zero)


@lib.kernel("GridSample", prepare=_gs_prepare)
def _grid_sample(inputs, outputs, prepared):
    """GridSample: per-axis taps and weights, gathered for all output positions at once."""
    mode, padding, align = prepared
    x, grid = inputs
    out = outputs[0]
    if out.size == 0:
        return None
    if any(d == 0 for d in x.shape[2:]):   # nothing to sample: zeros padding gives 0
        out[...] = "" if out.dtype.kind in "OSU" else 0
        return None
    res = _grid_sample_run(x, grid, mode, padding, align)
    np.copyto(out.reshape(res.shape), res, casting="unsafe")
    return None


# ----------------------------------------------------------------------------------------
# AffineGrid
# ----------------------------------------------------------------------------------------

@lib.op("AffineGrid", since_version=20, infer_dtype=same_dtype(0), value_inputs=(1,))
def _affine_grid_shape(ctx):
    """AffineGrid: grid (N, H, W, 2) from theta (N, 2, 3) and size [N, C, H, W], or
    (N, D, H, W, 3) from theta (N, 3, 4) and size [N, C, D, H, W].

    Raises InvalidRank, DimMismatch (theta vs size), InvalidDtype. Source: ONNX operator
    spec, AffineGrid-20.
    """
    theta, size = ctx.shape(0), ctx.shape(1)
    _check_float(ctx, 0, "theta")
    _check_int64(ctx, 1, "size")
    if theta is not None and len(theta) != 3:
        ctx.fail(f"theta must be 3-D, (N, 2, 3) or (N, 3, 4), got rank {len(theta)}", kind="InvalidRank")
    if size is not None and len(size) != 1:
        ctx.fail(f"size must be 1-D, got rank {len(size)}", kind="InvalidRank")
    dims = _dims(ctx.value(1))
    r = None
    if dims is not None:
        if len(dims) not in (4, 5):
            ctx.fail(f"size must have 4 ([N, C, H, W]) or 5 ([N, C, D, H, W]) values, got {len(dims)}",
                     kind="InvalidShape")
        r = len(dims) - 2
    elif size is not None and isinstance(size[0], int):
        if size[0] not in (4, 5):
            ctx.fail(f"size must have 4 or 5 values, got {size[0]}", kind="InvalidShape")
        r = size[0] - 2
    elif theta is not None and isinstance(theta[1], int):
        r = theta[1]
    if theta is not None and r is not None:
        check_dims_equal(ctx, theta[1], r, f"theta.shape[1] for a {r}-D grid")
        check_dims_equal(ctx, theta[2], r + 1, f"theta.shape[2] for a {r}-D grid")
    if r is None:
        return [None]
    if dims is None:
        n = theta[0] if theta is not None else ctx.new_dim()
        return [(n,) + tuple(ctx.new_dim() for _ in range(r)) + (r,)]
    for d in dims:
        require(ctx, d, ">=", 0, f"size {dims} must not be negative", "InvalidShape")
    n = dims[0] if theta is None else check_dims_equal(ctx, dims[0], theta[0], "N of size and theta")
    return [(n,) + tuple(dims[2:]) + (r,)]


def _base_axis(length: int, align: bool) -> np.ndarray:
    """Normalised positions of ``length`` pixel centres (align_corners: the corner centres
    are -1 and 1; else the corner edges are)."""
    if align:
        if length == 1:
            return np.array([-1.0])
        return np.linspace(-1.0, 1.0, length)
    return (2.0 * np.arange(length) + 1.0) / length - 1.0


@lib.kernel("AffineGrid", prepare=lambda ctx: bool(ctx.attr("align_corners", 0)))
def _affine_grid(inputs, outputs, align):
    """AffineGrid: one batched matmul (N, P, r+1) @ theta^T over the homogeneous base grid."""
    theta, size = inputs
    out = outputs[0]
    spatial = [int(v) for v in size.reshape(-1)[2:]]
    if out.size == 0:
        return None
    cdt = _F64 if theta.dtype == _F64 else _F32
    axes = [_base_axis(d, align) for d in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")            # outermost axis first
    base = np.stack([m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size)], axis=1)
    res = np.matmul(base.astype(cdt)[None], np.swapaxes(theta.astype(cdt, copy=False), 1, 2))
    np.copyto(out.reshape(res.shape), res, casting="unsafe")
    return None


# ----------------------------------------------------------------------------------------
# Col2Im
# ----------------------------------------------------------------------------------------

def _col2im_geometry(ctx, r: int):
    dil = _ints_attr(ctx, "dilations", r, 1, 1)
    strides = _ints_attr(ctx, "strides", r, 1, 1)
    pads = _ints_attr(ctx, "pads", 2 * r, 0, 0)
    return dil, strides, pads


@lib.op("Col2Im", since_version=18, infer_dtype=same_dtype(0), value_inputs=(1, 2))
def _col2im_shape(ctx):
    """Col2Im: image (N, C, *image_shape) from column blocks (N, C * prod(block_shape), L).

    L must equal the number of sliding blocks of ``block_shape`` (dilated) over the padded
    image with ``strides``. Raises InvalidRank, InvalidShape, DimMismatch, InvalidAttribute.
    Source: ONNX operator spec, Col2Im-18.
    """
    x = ctx.shape(0)
    if ctx.dtype(0) is not None and ctx.dtype(0).kind in "OSU":
        ctx.fail("input holds strings: Col2Im sums overlapping blocks, a numeric tensor is expected",
                 kind="InvalidDtype")
    _check_int64(ctx, 1, "image_shape")
    _check_int64(ctx, 2, "block_shape")
    if x is not None and len(x) != 3:
        ctx.fail(f"input must be 3-D (N, C * prod(block_shape), L), got rank {len(x)}", kind="InvalidRank")
    img, block = _dims(ctx.value(1)), _dims(ctx.value(2))
    r = None
    for i, v, what in ((1, img, "image_shape"), (2, block, "block_shape")):
        s = ctx.shape(i)
        if s is not None and len(s) != 1:
            ctx.fail(f"{what} must be 1-D, got rank {len(s)}", kind="InvalidRank")
        n = len(v) if v is not None else (s[0] if s is not None and isinstance(s[0], int) else None)
        if n is not None:
            if r is not None and n != r:
                ctx.fail(f"image_shape and block_shape must have the same length, got {r} and {n}",
                         kind="InvalidShape")
            r = n
    if r is not None and r < 1:
        ctx.fail("image_shape and block_shape must not be empty", kind="InvalidShape")
    if r is None or x is None:
        return [None]
    dil, strides, pads = _col2im_geometry(ctx, r)
    if block is not None:
        for b in block:
            require(ctx, b, ">=", 1, f"block_shape {block} must be positive", "InvalidShape")
        k = numel(block)
        require(ctx, x[1] % k, "==", 0, f"input.shape[1] = {x[1]} must be divisible by prod(block_shape) = {k}",
                "InvalidShape")
        c = x[1] // k
    else:
        c = ctx.new_dim()
    if img is None:
        return [(x[0], c) + tuple(ctx.new_dim() for _ in range(r))]
    if block is not None:
        blocks = [pool_output_dim(d, b, s, pb, pe, dl) for d, b, s, pb, pe, dl in
                  zip(img, block, strides, pads[:r], pads[r:], dil)]
        for b in blocks:
            require(ctx, b, ">=", 1, f"image_shape {img} with pads {pads} is smaller than the dilated block {block}",
                    "InvalidShape")
        check_dims_equal(ctx, x[2], numel(blocks), f"input.shape[2] (L) and the number of blocks {blocks}")
    return [(x[0], c) + tuple(img)]


def _col2im_prepare(ctx):
    r = numel(ctx.shape(1)) if ctx.shape(1) is not None else None
    if not isinstance(r, int):
        raise TypeError("Col2Im needs the length of image_shape")
    return _col2im_geometry(ctx, r)


@lib.kernel("Col2Im", prepare=_col2im_prepare)
def _col2im(inputs, outputs, prepared):
    """Col2Im: one strided slice-add per block position into a padded image, then the crop."""
    dil, strides, pads = prepared
    x, img, block = inputs
    out = outputs[0]
    img, block = [int(v) for v in img.reshape(-1)], [int(v) for v in block.reshape(-1)]
    r = len(img)
    n, c = out.shape[:2]
    nb = [(d + pb + pe - ((b - 1) * dl + 1)) // s + 1 for d, b, s, pb, pe, dl in
          zip(img, block, strides, pads[:r], pads[r:], dil)]
    if out.size == 0:
        return None
    acc_dt = x.dtype if x.dtype.kind != "V" and x.dtype != np.float16 else _F32
    padded = np.zeros((n, c) + tuple(d + pb + pe for d, pb, pe in zip(img, pads[:r], pads[r:])), acc_dt)
    cols = x.reshape((n, c) + tuple(block) + tuple(nb))
    for tap in itertools.product(*[range(b) for b in block]):
        dst = (slice(None), slice(None)) + tuple(
            slice(t * dl, t * dl + (m - 1) * s + 1, s) for t, dl, m, s in zip(tap, dil, nb, strides))
        padded[dst] += cols[(slice(None), slice(None)) + tap]
    crop = (slice(None), slice(None)) + tuple(slice(pb, pb + d) for pb, d in zip(pads[:r], img))
    np.copyto(out, padded[crop], casting="unsafe")
    return None


# ----------------------------------------------------------------------------------------
# DeformConv
# ----------------------------------------------------------------------------------------

def _deform_geometry(ctx, x, w):
    r = len(x) - 2
    kernel = ctx.attr("kernel_shape")
    if kernel is None:
        kernel = list(w[2:])
        if not all(isinstance(k, int) for k in kernel):
            ctx.fail("kernel_shape is not given and W's spatial dims are not known", kind="UnknownKernelShape")
    else:
        kernel = [int(k) for k in kernel]
        if len(kernel) != r:
            ctx.fail(f"kernel_shape {kernel} has {len(kernel)} values, expected {r}", kind="InvalidAttribute")
    if any(k < 1 for k in kernel):
        ctx.fail(f"kernel_shape {kernel} must be positive", kind="InvalidAttribute")
    strides = _ints_attr(ctx, "strides", r, 1, 1)
    dil = _ints_attr(ctx, "dilations", r, 1, 1)
    pads = _ints_attr(ctx, "pads", 2 * r, 0, 0)
    group = int(ctx.attr("group", 1))
    og = int(ctx.attr("offset_group", 1))
    if group < 1 or og < 1:
        ctx.fail(f"group {group} and offset_group {og} must be >= 1", kind="InvalidAttribute")
    out = [pool_output_dim(d, k, s, pb, pe, dl) for d, k, s, pb, pe, dl in
           zip(x[2:], kernel, strides, pads[:r], pads[r:], dil)]
    return kernel, strides, dil, pads, group, og, out


@lib.op("DeformConv", since_version=(19, 22), infer_dtype=same_dtype(0))
def _deform_conv_shape(ctx):
    """DeformConv: Y (N, oC, *out) from X (N, C, *in), W (oC, C/group, *k), offset
    (N, offset_group * prod(k) * r, *out), optional B (oC,) and mask (N, offset_group *
    prod(k), *out).

    ``out`` follows the convolution rule of pads/strides/dilations. Raises InvalidRank,
    ChannelMismatch, DimMismatch, InvalidAttribute, InvalidDtype. Source: ONNX operator
    spec, DeformConv-19/22.
    """
    x, w, off = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    _check_float(ctx, 0, "X")
    if x is not None and len(x) < 3:
        ctx.fail(f"X must have rank >= 3 (N, C, spatial...), got rank {len(x)}", kind="InvalidRank")
    if x is None or w is None:
        return [None]
    r = len(x) - 2
    for _i, s, what in ((1, w, "W"), (2, off, "offset"), (4, ctx.shape(4) if ctx.has_input(4) else None, "mask")):
        if s is not None and len(s) != r + 2:
            ctx.fail(f"{what} must have rank {r + 2} like X, got rank {len(s)}", kind="InvalidRank")
    kernel, strides, dil, pads, group, og, out = _deform_geometry(ctx, x, w)
    c, m = x[1], w[0]
    require(ctx, c, "==", w[1] * group, f"input channels {c} must equal W.shape[1] * group = {w[1]} * {group}",
            "ChannelMismatch")
    require(ctx, m % group, "==", 0, f"output channels {m} must be divisible by group {group}", "ChannelMismatch")
    require(ctx, c % og, "==", 0, f"input channels {c} must be divisible by offset_group {og}", "ChannelMismatch")
    for kk, wk in zip(kernel, w[2:]):
        require(ctx, wk, "==", kk, f"kernel_shape {kernel} does not match W's spatial dims {list(w[2:])}",
                "KernelShapeMismatch")
    k = int(np.prod(kernel))
    for o in out:
        require(ctx, o, ">=", 1, f"the padded input {list(x[2:])} is smaller than the dilated kernel", "InvalidShape")
    n = x[0]
    if off is not None:
        n = check_dims_equal(ctx, n, off[0], "batch size of X and offset")
        check_dims_equal(ctx, off[1], og * k * r, f"offset.shape[1] (offset_group * prod(kernel) * {r})")
        for j, (o, d) in enumerate(zip(out, off[2:])):
            check_dims_equal(ctx, d, o, f"offset spatial dim {j} and the output's")
    if ctx.has_input(3) and ctx.shape(3) is not None:
        b = ctx.shape(3)
        if len(b) != 1:
            ctx.fail(f"B must be 1-D (oC,), got shape {tuple(b)}", kind="BiasShapeMismatch")
        check_dims_equal(ctx, b[0], m, "B's length and the output channels")
    if ctx.has_input(4) and ctx.shape(4) is not None:
        mk = ctx.shape(4)
        check_dims_equal(ctx, mk[0], n, "batch size of X and mask")
        check_dims_equal(ctx, mk[1], og * k, "mask.shape[1] (offset_group * prod(kernel))")
        for j, (o, d) in enumerate(zip(out, mk[2:])):
            check_dims_equal(ctx, d, o, f"mask spatial dim {j} and the output's")
    return [(n, m) + tuple(out)]


def _deform_prepare(ctx):
    kernel, strides, dil, pads, group, og, _ = _deform_geometry(ctx, ctx.shape(0), ctx.shape(1))
    return tuple(kernel), tuple(strides), tuple(dil), tuple(pads), group, og


@lib.kernel("DeformConv", prepare=_deform_prepare)
def _deform_conv(inputs, outputs, prepared):
    """DeformConv: bilinear samples of every (offset group, kernel tap, output position) in
    one gather per corner, masked, then one grouped matmul with W."""
    kernel, strides, dil, pads, group, og = prepared
    x, w, offset = inputs[0], inputs[1], inputs[2]
    bias = inputs[3] if len(inputs) > 3 else None
    mask = inputs[4] if len(inputs) > 4 else None
    out = outputs[0]
    if out.size == 0:
        return None
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    r = len(spatial)
    o_sp = out.shape[2:]
    m_out = int(np.prod(o_sp, dtype=np.int64))
    k = int(np.prod(kernel))
    oc = w.shape[0]
    cdt = _F64 if x.dtype == _F64 else _F32
    off = offset.astype(cdt, copy=False).reshape(n, og, k, r, m_out)
    # base position of every (tap, output position) along each axis: (K, M)
    grids = np.meshgrid(*[np.arange(d) for d in o_sp], indexing="ij")
    taps = np.array(list(itertools.product(*[range(kk) for kk in kernel])), dtype=np.int64).reshape(k, r)
    taps_1d = []
    for a in range(r):
        base = (grids[a].reshape(1, -1) * strides[a] - pads[a] + taps[:, a:a + 1] * dil[a]).astype(cdt)
        pos = base[None, None] + off[:, :, :, a]                          # (N, og, K, M)
        f = np.floor(pos)
        lo = _as_index(f)
        hi_w, lo_w = pos - f, (f + cdt.type(1)) - pos
        taps_1d.append([(lo, lo_w), (lo + 1, hi_w)])
    strides_flat = [int(np.prod(spatial[a + 1:], dtype=np.int64)) for a in range(r)]
    xg = x.astype(cdt, copy=False).reshape(n, og, c // og, -1)           # (N, og, Cg, P)
    cols = None
    for corner in itertools.product(*taps_1d):
        flat, valid, weight = 0, None, None
        for a, (idx, wt) in enumerate(corner):
            ok = (idx >= 0) & (idx < spatial[a])
            flat = flat + np.clip(idx, 0, spatial[a] - 1) * strides_flat[a]
            valid = ok if valid is None else valid & ok
            weight = wt if weight is None else weight * wt
        weight = np.where(valid, weight, cdt.type(0)).reshape(n, og, 1, k * m_out)
        v = np.take_along_axis(xg, flat.reshape(n, og, 1, k * m_out), axis=3)
        v = np.where(valid.reshape(n, og, 1, k * m_out), v, cdt.type(0)) * weight
        cols = v if cols is None else cols + v
    cols = cols.reshape(n, og, c // og, k, m_out)
    if mask is not None:
        cols = cols * mask.astype(cdt, copy=False).reshape(n, og, 1, k, m_out)
    cols = cols.reshape(n, group, (c // group) * k, m_out)
    wm = w.astype(cdt, copy=False).reshape(group, oc // group, (c // group) * k)
    res = np.matmul(wm[None], cols).reshape(n, oc, m_out)                 # (N, G, oC/G, M)
    if bias is not None:
        res = res + bias.astype(cdt, copy=False).reshape(1, oc, 1)
    np.copyto(out.reshape(n, oc, m_out), res, casting="unsafe")
    return None


# ----------------------------------------------------------------------------------------
# CenterCropPad
# ----------------------------------------------------------------------------------------

def _ccp_axes(ctx, rank: int) -> list:
    axes = ctx.attr("axes")
    if axes is None:
        return list(range(rank))
    return normalize_axes(ctx, [int(a) for a in axes], rank)


@lib.op("CenterCropPad", since_version=18, infer_dtype=same_dtype(0), value_inputs=(1,))
def _center_crop_pad_shape(ctx):
    """CenterCropPad: the input with each dim of ``axes`` (default all) cropped or zero-padded,
    centred, to the length ``shape`` gives.

    Raises InvalidRank, InvalidShape (shape's length differs from the axes', negative
    lengths), AxisOutOfRange, DuplicateAxes. Source: ONNX operator spec, CenterCropPad-18.
    """
    x = ctx.shape(0)
    if ctx.dtype(1) is not None and ctx.dtype(1) not in (np.int32, np.int64):
        ctx.fail(f"shape has dtype {ctx.dtype(1)}, expected int32 or int64", kind="InvalidDtype")
    s = ctx.shape(1)
    if s is not None and len(s) != 1:
        ctx.fail(f"shape must be 1-D, got rank {len(s)}", kind="InvalidRank")
    if x is None:
        return [None]
    axes = _ccp_axes(ctx, len(x))
    if s is not None and isinstance(s[0], int) and s[0] != len(axes):
        ctx.fail(f"shape has {s[0]} values but there are {len(axes)} axes {axes}", kind="InvalidShape")
    dims = _dims(ctx.value(1))
    out = list(x)
    if dims is None:
        for a in axes:
            out[a] = ctx.new_dim()
        return [tuple(out)]
    if len(dims) != len(axes):
        ctx.fail(f"shape has {len(dims)} values but there are {len(axes)} axes {axes}", kind="InvalidShape")
    for d in dims:
        require(ctx, d, ">=", 0, f"shape {dims} must not be negative", "InvalidShape")
    for a, d in zip(axes, dims):
        out[a] = d
    return [tuple(out)]


@lib.kernel("CenterCropPad", prepare=lambda ctx: tuple(_ccp_axes(ctx, len(ctx.shape(0)))))
def _center_crop_pad(inputs, outputs, axes):
    """CenterCropPad: zero the output, copy the centred overlap of input and output."""
    x = inputs[0]
    out = outputs[0]
    src = [slice(None)] * x.ndim
    dst = [slice(None)] * x.ndim
    for a in axes:
        d, t = x.shape[a], out.shape[a]
        if t < d:
            start = (d - t) // 2
            src[a] = slice(start, start + t)
        elif t > d:
            start = (t - d) // 2
            dst[a] = slice(start, start + d)
    if out.shape != x.shape:
        out[...] = "" if out.dtype.kind in "OSU" else 0
    out[tuple(dst)] = x[tuple(src)]
    return None


# ----------------------------------------------------------------------------------------
# MaxUnpool
# ----------------------------------------------------------------------------------------

def _unpool_geometry(ctx, r: int):
    kernel = ctx.attr("kernel_shape")
    if kernel is None:
        ctx.fail("attribute 'kernel_shape' is required", kind="MissingAttribute")
    kernel = [int(k) for k in kernel]
    if len(kernel) != r:
        ctx.fail(f"kernel_shape {kernel} has {len(kernel)} values, expected {r} (X of rank {r + 2})",
                 kind="InvalidAttribute")
    if any(k < 1 for k in kernel):
        ctx.fail(f"kernel_shape {kernel} must be positive", kind="InvalidAttribute")
    return kernel, _ints_attr(ctx, "strides", r, 1, 1), _ints_attr(ctx, "pads", 2 * r, 0, 0)


@lib.op("MaxUnpool", since_version=(9, 11, 22), infer_dtype=same_dtype(0), value_inputs=(2,))
def _max_unpool_shape(ctx):
    """MaxUnpool: Y (N, C, *out) with X's values scattered to the flat positions I gives.

    ``out`` is ``(in - 1) * stride - pad_begin - pad_end + kernel`` per spatial axis, or
    the optional ``output_shape`` input. I must have X's shape. Raises InvalidRank,
    DimMismatch, InvalidAttribute, MissingAttribute, InvalidShape. Source: ONNX operator
    spec, MaxUnpool-9/11/22.
    """
    x, idx = ctx.shape(0), ctx.shape(1)
    _check_float(ctx, 0, "X")
    _check_int64(ctx, 1, "I")
    if x is None:
        return [None]
    if len(x) < 3:
        ctx.fail(f"X must have rank >= 3 (N, C, spatial...), got rank {len(x)}", kind="InvalidRank")
    r = len(x) - 2
    kernel, strides, pads = _unpool_geometry(ctx, r)
    if idx is not None:
        if len(idx) != len(x):
            ctx.fail(f"I must have X's shape {tuple(x)}, got rank {len(idx)}", kind="InvalidRank")
        for j, (a, b) in enumerate(zip(x, idx)):
            check_dims_equal(ctx, a, b, f"dim {j} of X and I")
    if ctx.has_input(2):
        s = ctx.shape(2)
        if s is not None and (len(s) != 1 or (isinstance(s[0], int) and s[0] != len(x))):
            ctx.fail(f"output_shape must be 1-D with {len(x)} values, got shape {tuple(s)}", kind="InvalidShape")
        dims = _dims(ctx.value(2))
        if dims is None:
            return [tuple(ctx.new_dim() for _ in x)]
        if len(dims) != len(x):
            ctx.fail(f"output_shape {dims} must have {len(x)} values", kind="InvalidShape")
        for d in dims:
            require(ctx, d, ">=", 0, f"output_shape {dims} must not be negative", "InvalidShape")
        return [tuple(dims)]
    out = [(d - 1) * s - (pb + pe) + k for d, k, s, pb, pe in zip(x[2:], kernel, strides, pads[:r], pads[r:])]
    return [(x[0], x[1]) + tuple(out)]


@lib.kernel("MaxUnpool", prepare=lambda ctx: ctx.node.name)
def _max_unpool(inputs, outputs, name):
    """MaxUnpool: zero the output, scatter X to the flat indices of I (as onnxruntime: with
    ``output_shape``, I indexes the tensor of that shape, the MaxPool input)."""
    x, idx = inputs[0], inputs[1]
    out = outputs[0]
    flat = out.reshape(-1)
    flat[...] = 0
    i = idx.reshape(-1)
    if i.size and (i.min() < 0 or i.max() >= flat.size):
        bad = i[(i < 0) | (i >= flat.size)][0]
        _fail_run("MaxUnpool", name, f"index {bad} in I is out of range for the output of {flat.size} "
                  f"elements {tuple(out.shape)}", "IndexOutOfRange")
    flat[i] = x.reshape(-1)
    return None


# ----------------------------------------------------------------------------------------
# ImageDecoder
# ----------------------------------------------------------------------------------------

_PIXEL_FORMATS = ("RGB", "BGR", "Grayscale")


@lib.op("ImageDecoder", since_version=20, infer_dtype=fixed_dtype(np.uint8), data_dependent=True)
def _image_decoder_shape(ctx):
    """ImageDecoder: (H, W, 3) uint8 for pixel_format RGB/BGR, (H, W, 1) for Grayscale, from an
    encoded image (1-D uint8: BMP, JPEG, JPEG 2000, TIFF, PNG, WebP, PNM).

    H and W depend on data. A stream that cannot be decoded gives an empty (0, 0, channels)
    image. Decoding needs Pillow (``pip install 'dynashape[image]'``). Raises InvalidRank,
    InvalidDtype, InvalidAttribute. Source: ONNX operator spec, ImageDecoder-20.
    """
    fmt = _choice(ctx, "pixel_format", "RGB", _PIXEL_FORMATS)
    s = ctx.shape(0)
    if s is not None and len(s) != 1:
        ctx.fail(f"encoded_stream must be 1-D, got rank {len(s)}", kind="InvalidRank")
    if ctx.dtype(0) is not None and ctx.dtype(0) != np.uint8:
        ctx.fail(f"encoded_stream has dtype {ctx.dtype(0)}, expected uint8", kind="InvalidDtype")
    return [(ctx.new_dim(), ctx.new_dim(), 1 if fmt == "Grayscale" else 3)]


def _pillow():
    try:
        import PIL.Image
    except ImportError as exc:
        raise ImportError("ImageDecoder needs Pillow, an optional dependency of dynashape: "
                          "pip install 'dynashape[image]'") from exc
    return PIL.Image


@lib.kernel("ImageDecoder", prepare=lambda ctx: _choice(ctx, "pixel_format", "RGB", _PIXEL_FORMATS))
def _image_decoder(inputs, outputs, fmt):
    """ImageDecoder: Pillow decodes; RGB/BGR through an RGB conversion, Grayscale through "L"."""
    image = _pillow()
    channels = 1 if fmt == "Grayscale" else 3
    try:
        img = image.open(io.BytesIO(np.ascontiguousarray(inputs[0]).tobytes()))
        img.load()
        arr = np.asarray(img.convert("L" if fmt == "Grayscale" else "RGB"), dtype=np.uint8)
    except Exception:  # noqa: BLE001 - the spec: an undecodable stream gives an empty image
        return [np.zeros((0, 0, channels), np.uint8)]
    arr = arr.reshape(arr.shape[0], arr.shape[1], channels)
    if fmt == "BGR":
        arr = arr[:, :, ::-1]
    return [np.ascontiguousarray(arr)]
