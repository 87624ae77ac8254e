"""Resampling operators: Resize (all versions) and the deprecated Upsample.

Resize is separable: for every resized axis, ``prepare`` maps each output coordinate to a
source coordinate (``coordinate_transformation_mode``) and from there to a small set of
source indices and weights (1-D arrays, one row per output position). The kernel then
applies the axes one after the other: nearest is a single broadcast fancy index
(``np.ix_`` style), linear and cubic are ``take`` + weighted sum over the taps of one axis
at a time. Source coordinates are computed in float64 from the given (float32) scales,
as the ONNX reference implementation does; output lengths ``floor(in * scale)`` are
computed in float32 as onnxruntime and ONNX's C++ shape inference do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from dynashape.records import InferContext, OpLibrary, same_dtype
from dynashape.shapes import normalize_axes, require, value_list

lib = OpLibrary()

_COORD_MODES = {  # mode -> first Resize opset that defines it
    "half_pixel": 11, "pytorch_half_pixel": 11, "align_corners": 11, "asymmetric": 11,
    "tf_crop_and_resize": 11, "half_pixel_symmetric": 19,
}
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_POLICIES = ("stretch", "not_larger", "not_smaller")
_F32 = np.float32


# --------------------------------------------------------------------------- attributes

@dataclass(frozen=True)
class _Attrs:
    """The parsed, validated attributes of one Resize/Upsample node."""

    mode: str                   # nearest | linear | cubic
    coord: str                  # coordinate_transformation_mode
    nearest_mode: str           # one of _NEAREST_MODES, or "simple" (Resize-10 / Upsample)
    cubic_a: float
    exclude_outside: bool
    extrapolation_value: float
    antialias: bool
    axes: tuple | None       # None: all axes
    policy: str                 # keep_aspect_ratio_policy


def _choice(ctx: InferContext, name: str, default: str, allowed) -> str:
    value = ctx.attr(name, default)
    if isinstance(value, bytes):
        value = value.decode()
    if value not in allowed:
        ctx.fail(f"attribute {name}={value!r} is not supported (expected one of "
                 f"{', '.join(sorted(allowed))})", kind="InvalidAttribute")
    return value


def _is_upsample(ctx: InferContext) -> bool:
    return ctx.node.op_type == "Upsample"


def _parse_attrs(ctx: InferContext) -> _Attrs:
    """Validate the node's attributes for its op and opset and fill in the defaults."""
    legacy = _is_upsample(ctx) or ctx.opset < 11
    if legacy:
        modes = ("nearest", "linear", "bilinear") if _is_upsample(ctx) and ctx.opset < 7 \
            else ("nearest", "linear")
        mode = _choice(ctx, "mode", "nearest", modes)
        return _Attrs(mode="linear" if mode == "bilinear" else mode, coord="asymmetric",
                      nearest_mode="simple", cubic_a=-0.75, exclude_outside=False,
                      extrapolation_value=0.0, antialias=False, axes=None, policy="stretch")
    mode = _choice(ctx, "mode", "nearest", ("nearest", "linear", "cubic"))
    coord = _choice(ctx, "coordinate_transformation_mode", "half_pixel",
                    [m for m, v in _COORD_MODES.items() if v <= ctx.opset])
    nearest_mode = _choice(ctx, "nearest_mode", "round_prefer_floor", _NEAREST_MODES)
    policy, axes, antialias = "stretch", None, False
    if ctx.opset >= 18:
        policy = _choice(ctx, "keep_aspect_ratio_policy", "stretch", _POLICIES)
        axes = ctx.attr("axes")
        axes = None if axes is None else tuple(int(a) for a in axes)
        antialias = bool(ctx.attr("antialias", 0))
    return _Attrs(mode=mode, coord=coord, nearest_mode=nearest_mode,
                  cubic_a=float(ctx.attr("cubic_coeff_a", -0.75)),
                  exclude_outside=bool(ctx.attr("exclude_outside", 0)),
                  extrapolation_value=float(ctx.attr("extrapolation_value", 0.0)),
                  antialias=antialias, axes=axes, policy=policy)


# --------------------------------------------------------------------------- shape rule

@dataclass(frozen=True)
class _Request:
    """What the node asks for: resized axes and either scales or sizes (values may be None)."""

    axes: tuple                 # normalised axes the scales/sizes/roi refer to
    scales: list | None      # per entry of axes, or None
    sizes: list | None       # per entry of axes, or None
    use_sizes: bool
    known: bool                 # the needed value (scales or sizes) is host-known


def _is_empty(ctx: InferContext, i: int) -> bool:
    shape = ctx.shape(i)
    return shape is not None and len(shape) == 1 and shape[0] == 0


def _given(ctx: InferContext, i: int) -> bool:
    return ctx.has_input(i) and not _is_empty(ctx, i)


def _request(ctx: InferContext, attrs: _Attrs, rank: int, value=None) -> _Request:
    """Which axes are resized and by what (validated); ``value(i)`` reads value inputs."""
    value = ctx.value if value is None else value
    axes = tuple(range(rank)) if attrs.axes is None else \
        tuple(normalize_axes(ctx, attrs.axes, rank, "axes"))
    if _is_upsample(ctx) and ctx.opset < 9:
        if ctx.opset < 7:
            if rank != 4:
                ctx.fail(f"Upsample-1 expects a 4-D NCHW input, got rank {rank}", kind="InvalidRank")
            scales = [1.0, 1.0, float(ctx.attr("height_scale", 1.0)), float(ctx.attr("width_scale", 1.0))]
        else:
            scales = ctx.attr("scales")
            if scales is None:
                ctx.fail("attribute 'scales' is required", kind="MissingAttribute")
            scales = [float(s) for s in scales]
        return _check_scales(ctx, _Request(axes, scales, None, False, True))
    scales_i, sizes_i = (1, None) if ctx.opset < 11 or _is_upsample(ctx) else (2, 3)
    use_sizes = sizes_i is not None and _given(ctx, sizes_i)
    if use_sizes and _given(ctx, scales_i):
        ctx.fail("only one of 'scales' and 'sizes' may be given (the other must be absent or empty)",
                 kind="InvalidInputs")
    if not use_sizes and not _given(ctx, scales_i):
        ctx.fail("one of 'scales' and 'sizes' must be given (non-empty)", kind="InvalidInputs")
    index = sizes_i if use_sizes else scales_i
    shape = ctx.shape(index)
    if shape is not None and len(shape) != 1:
        ctx.fail(f"'{'sizes' if use_sizes else 'scales'}' must be 1-D, got rank {len(shape)}",
                 kind="InvalidRank")
    values = value_list(value(index))
    if values is None:
        return _Request(axes, None, None, use_sizes, False)
    if len(values) != len(axes):
        ctx.fail(f"'{'sizes' if use_sizes else 'scales'}' has {len(values)} elements, expected "
                 f"{len(axes)} (the {'length of axes' if attrs.axes is not None else 'input rank'})",
                 kind="InvalidInputs")
    if use_sizes:
        for s in values:
            require(ctx, s, ">=", 0, f"'sizes' must be non-negative, got {values}", "InvalidInputs")
        return _Request(axes, None, values, True, True)
    return _check_scales(ctx, _Request(axes, [float(s) for s in values], None, False, True))


def _check_scales(ctx: InferContext, req: _Request) -> _Request:
    """Scales must match the resized axes, be > 0 (Resize) or >= 1 (Upsample)."""
    if len(req.scales) != len(req.axes):
        ctx.fail(f"'scales' has {len(req.scales)} elements, expected {len(req.axes)}", kind="InvalidInputs")
    upsample = _is_upsample(ctx)
    if not all((s >= 1.0) if upsample else (s > 0.0) for s in req.scales):
        ctx.fail(f"'scales' must be {'>= 1' if upsample else '> 0'}, got {req.scales}", kind="InvalidInputs")
    return req


def _scaled_dim(ctx: InferContext, dim, scale: float):
    """floor(dim * scale) in float32 (as onnxruntime); symbolic only for integral scales."""
    if isinstance(dim, int):
        return int(np.floor(_F32(dim) * _F32(scale)))
    if float(scale).is_integer():
        return dim * int(scale)
    return ctx.new_dim()


def _aspect_scale(attrs: _Attrs, in_dims, sizes) -> float:
    ratios = [s / d for s, d in zip(sizes, in_dims)]
    return min(ratios) if attrs.policy == "not_larger" else max(ratios)


def _output_dims(ctx: InferContext, attrs: _Attrs, req: _Request, in_shape) -> list:
    """Output dims of the resized axes (ints, Exprs, or fresh symbols when unknown)."""
    in_dims = [in_shape[a] for a in req.axes]
    if not req.known:
        return [ctx.new_dim() for _ in req.axes]
    if not req.use_sizes:
        return [_scaled_dim(ctx, d, s) for d, s in zip(in_dims, req.scales)]
    if attrs.policy == "stretch":
        return list(req.sizes)
    if not all(isinstance(v, int) for v in in_dims + req.sizes):
        return [ctx.new_dim() for _ in req.axes]
    if 0 in in_dims:
        ctx.fail("keep_aspect_ratio_policy needs non-empty resized axes", kind="InvalidInputs")
    scale = _aspect_scale(attrs, in_dims, req.sizes)
    return [int(scale * d + 0.5) for d in in_dims]


def _check_dtypes(ctx: InferContext, attrs: _Attrs) -> None:
    dt = ctx.dtype(0)
    if dt is not None and attrs.mode != "nearest" and dt.kind in "OUS":
        ctx.fail(f"mode '{attrs.mode}' needs a numeric input, got {dt}", kind="UnsupportedType")
    if ctx.opset >= 11 and not _is_upsample(ctx) and ctx.has_input(3) and ctx.dtype(3) is not None \
            and ctx.dtype(3) != np.int64:
        ctx.fail(f"'sizes' must be int64, got {ctx.dtype(3)}", kind="InvalidInputs")


def _resize_shape(ctx: InferContext):
    """Output shape of Resize/Upsample: the input dims with the resized axes replaced.

    Shapes: X any rank; scales (float) / sizes (int64) 1-D with one entry per resized axis
    (all axes, or ``axes`` from opset 18); roi 1-D ``[starts..., ends...]``. A resized dim
    is ``sizes[i]`` (adjusted by ``keep_aspect_ratio_policy``) or ``floor(dim * scale)``;
    a symbolic dim times a non-integral scale, or an unknown scales/sizes value, gives a
    fresh symbol. Output dtype = X's.

    Raises:
        ShapeInferenceError: both or neither of scales/sizes, wrong lengths, scales <= 0
            (Upsample: < 1), negative sizes, bad attribute values, tf_crop_and_resize without
            a full roi, linear/cubic on strings, non-empty output from an empty axis.

    Source: ONNX operator spec, Resize-10/11/13/18/19 and Upsample-1/7/9/10.
    """
    attrs = _parse_attrs(ctx)
    _check_dtypes(ctx, attrs)
    in_shape = ctx.shape(0)
    if in_shape is None:
        return [None]
    req = _request(ctx, attrs, len(in_shape))
    out = list(in_shape)
    for a, d in zip(req.axes, _output_dims(ctx, attrs, req, in_shape)):
        if not (isinstance(d, int) and d == 0):   # (an empty axis may only stay empty: a guard stricter
            require(ctx, in_shape[a], ">", 0,    # than that where d is symbolic, judged per node otherwise)
                    f"cannot resize the empty axis {a} to length {d}", "InvalidInputs")
        out[a] = d
    return [tuple(out)]


# --------------------------------------------------------------------------- per-axis plan

def _source_coords(attrs: _Attrs, n_in: int, n_out: int, scale: float, width: float, roi) -> tuple:
    """(x_original float64 array of length n_out, extrapolation mask or None) for one axis.

    ``width`` is the target length before flooring (``scale * n_in`` when scales are
    given, the size otherwise): align_corners, pytorch_half_pixel, tf_crop_and_resize and
    half_pixel_symmetric use it as ``length_resized``, as the ONNX reference does.
    """
    y = np.arange(n_out, dtype=np.float64)
    coord = attrs.coord
    if coord == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if coord == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return offset + (y + 0.5) / scale - 0.5, None
    if coord == "pytorch_half_pixel":
        return ((y + 0.5) / scale - 0.5 if width != 1 else np.zeros(n_out)), None
    if coord == "align_corners":
        return (y * (n_in - 1) / (width - 1) if width != 1 else np.zeros(n_out)), None
    if coord == "asymmetric":
        return y / scale, None
    start, end = roi  # tf_crop_and_resize; roi scalars keep their dtype, as in the reference
    if width != 1:
        x = y * (end - start) * (n_in - 1) / (width - 1) + start * (n_in - 1)
    else:
        x = np.full(n_out, (end - start) * (n_in - 1) / 2 + start * (n_in - 1), dtype=np.float64)
    return x, (x < 0) | (x > n_in - 1)


def _snap(x: np.ndarray) -> np.ndarray:
    """Remove float64 rounding noise around integers and half-integers.

    The formulas often land exactly on a pixel or a rounding tie in exact arithmetic
    (e.g. half_pixel_symmetric), and ``3.0000000000000004`` must not round up to 4. The
    tolerance (1e-10 relative) is far below the effect of float32-rounded scales.
    """
    twice = x * 2
    near = np.rint(twice)
    return np.where(np.abs(twice - near) <= 1e-10 * np.maximum(1.0, np.abs(twice)), near / 2, x)


def _nearest_index(attrs: _Attrs, x: np.ndarray, scale: float, n_in: int) -> np.ndarray:
    mode = attrs.nearest_mode
    if mode == "simple":
        mode = "ceil" if scale < 1 else "floor"
    if mode == "round_prefer_floor":
        idx = np.ceil(x - 0.5)
    elif mode == "round_prefer_ceil":
        idx = np.floor(x + 0.5)
    elif mode == "floor":
        idx = np.floor(x)
    else:
        idx = np.ceil(x)
    return np.clip(idx, 0, n_in - 1).astype(np.intp)


def _cubic_kernel(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel W(d) with coefficient a (0 for |d| >= 2)."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _taps(attrs: _Attrs, x: np.ndarray, scale: float, n_in: int, wdtype) -> tuple:
    """(indices (n_out, taps), weights (n_out, taps)) of linear/cubic interpolation on one axis.

    The taps are the integer offsets around floor(x) whose kernel value can be non-zero;
    antialiasing stretches the kernel by 1/scale when downscaling (support radius
    ``1/s`` for linear, ``2/s`` for cubic). With ``exclude_outside`` the weights of
    positions outside the input are dropped and the rest renormalised; otherwise
    out-of-range positions repeat the edge (indices clamped).
    """
    stretch = min(scale, 1.0) if attrs.antialias else 1.0
    radius = 1.0 if attrs.mode == "linear" else 2.0
    first = math.floor(-radius / stretch) + 1            # offsets first .. 1 - first
    offsets = np.arange(first, 2 - first, dtype=np.float64)
    base = np.floor(x)
    ratio = x - base
    on_grid = ratio == 0                                       # prefer the left pixel on ties
    base = np.where(on_grid, base - 1, base)
    ratio = np.where(on_grid, 1.0, ratio)
    dist = (offsets[None, :] - ratio[:, None]) * stretch
    if attrs.mode == "linear":
        w = np.clip(1 - np.abs(dist), 0, 1)
    else:
        w = _cubic_kernel(dist, attrs.cubic_a)
    if attrs.antialias:
        w = w / w.sum(axis=1, keepdims=True)
    idx = base[:, None].astype(np.int64) + offsets.astype(np.int64)[None, :]
    if attrs.exclude_outside:
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, n_in - 1).astype(np.intp), w.astype(wdtype)


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    if dtype.kind == "c":
        return np.dtype(np.complex128)
    if dtype == np.float64 or dtype.kind in "iub":
        return np.dtype(np.float64)
    return np.dtype(np.float32)


@dataclass(frozen=True)
class _Plan:
    """Per-node precomputation: what compute does for these shapes."""

    mode: str                   # "copy" | "nearest" | "interp"
    out_shape: tuple
    axes: tuple                 # resized axes (identity axes dropped), ascending
    index: tuple = ()           # nearest: fancy-index tuple; interp: (idx, w) per axis
    masks: tuple = ()           # (axis, bool mask) for tf_crop_and_resize extrapolation
    fill: float = 0.0
    cdtype: np.dtype | None = None
    out_dtype: np.dtype | None = None


def _axis_scales(attrs: _Attrs, req: _Request, in_shape, out_dims) -> list:
    if not req.use_sizes:
        return list(req.scales)
    if attrs.policy != "stretch":
        return [_aspect_scale(attrs, [in_shape[a] for a in req.axes], req.sizes)] * len(req.axes)
    return [o / in_shape[a] if in_shape[a] else 1.0 for a, o in zip(req.axes, out_dims)]


def _roi_pairs(ctx: InferContext, attrs: _Attrs, req: _Request, roi_value) -> list:
    n = len(req.axes)
    if attrs.coord != "tf_crop_and_resize":
        return [None] * n
    roi = None if roi_value is None else np.asarray(roi_value).reshape(-1)
    if roi is None or roi.size != 2 * n:
        ctx.fail(f"tf_crop_and_resize needs 'roi' with {2 * n} elements [starts..., ends...], got "
                 f"{'none' if roi is None else roi.size}", kind="InvalidInputs")
    return [(roi[i], roi[n + i]) for i in range(n)]


def _plan(ctx: InferContext, x_shape, x_dtype, value) -> _Plan:
    """Build the per-axis index/weight arrays for concrete shapes and input values."""
    attrs = _parse_attrs(ctx)
    req = _request(ctx, attrs, len(x_shape), value)
    out_dims = _output_dims(ctx, attrs, req, x_shape)
    out_shape = list(x_shape)
    for a, d in zip(req.axes, out_dims):
        out_shape[a] = d
    scales = _axis_scales(attrs, req, x_shape, out_dims)
    rois = _roi_pairs(ctx, attrs, req, value(1) if ctx.opset >= 11 and not _is_upsample(ctx) else None)
    axes, index, masks = [], [], []
    wdtype = _compute_dtype(np.dtype(x_dtype))
    for a, n_out, s, roi in sorted(zip(req.axes, out_dims, scales, rois), key=lambda t: t[0]):
        n_in = x_shape[a]
        if n_out == n_in and s == 1.0 and (roi is None or (roi[0] == 0 and roi[1] == 1)):
            continue                                        # identity along this axis
        axes.append(a)
        if n_out == 0 or n_in == 0:
            index.append(np.zeros((n_out,) if attrs.mode == "nearest" else (n_out, 1), np.intp))
            if attrs.mode != "nearest":
                index[-1] = (index[-1], np.zeros((n_out, 1), wdtype))
            continue
        width = float(n_out) if req.use_sizes and attrs.policy == "stretch" else s * n_in
        xs, mask = _source_coords(attrs, n_in, n_out, s, width, roi)
        xs = _snap(xs)
        if mask is not None and mask.any():
            masks.append((a, mask))
        if attrs.mode == "nearest":
            index.append(_nearest_index(attrs, xs, s, n_in))
        else:
            index.append(_taps(attrs, xs, s, n_in, wdtype))
    if not axes:
        return _Plan("copy", tuple(out_shape), ())
    if attrs.mode == "nearest":
        return _Plan("nearest", tuple(out_shape), tuple(axes), _fancy_index(axes, index, x_shape), tuple(masks),
                     attrs.extrapolation_value)
    return _Plan("interp", tuple(out_shape), tuple(axes), tuple(index), tuple(masks), attrs.extrapolation_value,
                 wdtype, np.dtype(x_dtype))


def _fancy_index(axes: list, index: list, x_shape) -> tuple:
    """One advanced-index tuple (np.ix_ style) gathering all nearest axes at once.

    Axes between the first and last resized axis that are not resized get an ``arange``
    so that the advanced indices are contiguous and numpy keeps the axis order.
    """
    lo, hi = axes[0], axes[-1]
    by_axis = dict(zip(axes, index))
    span = [by_axis.get(a, np.arange(x_shape[a], dtype=np.intp)) for a in range(lo, hi + 1)]
    grids = np.ix_(*span) if len(span) > 1 else tuple(span)
    return (slice(None),) * lo + tuple(grids)


# --------------------------------------------------------------------------- kernel

def _needed_values(ctx: InferContext) -> tuple:
    """The value inputs the plan reads (roi only for tf_crop_and_resize)."""
    if _is_upsample(ctx):
        return (1,) if ctx.opset >= 9 else ()
    if ctx.opset < 11:
        return (1,)
    crop = ctx.attr("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize"
    return (1, 2, 3) if crop else (2, 3)


def _prepare(ctx: InferContext):
    """Precompute the plan when every value input is host-known; else plan per call."""
    needed = _needed_values(ctx)
    if any(ctx.has_input(i) and ctx.value(i) is None for i in needed):
        return (ctx, needed)
    return _plan(ctx, ctx.shape(0), ctx.dtype(0), ctx.value)


def _apply_nearest(x: np.ndarray, out: np.ndarray, plan: _Plan) -> None:
    if len(plan.axes) == 1:
        np.take(x, plan.index[-1], axis=plan.axes[0], out=out)
    else:
        np.copyto(out, x[plan.index])


def _apply_interp(x: np.ndarray, out: np.ndarray, plan: _Plan) -> None:
    cur = x.astype(plan.cdtype, copy=False)
    for a, (idx, w) in zip(plan.axes, plan.index):
        wshape = (-1,) + (1,) * (cur.ndim - a - 1)
        acc = np.take(cur, idx[:, 0], axis=a)
        acc *= w[:, 0].reshape(wshape)
        for k in range(1, idx.shape[1]):
            acc += np.take(cur, idx[:, k], axis=a) * w[:, k].reshape(wshape)
        cur = acc
    dt = plan.out_dtype
    if dt.kind == "b":
        np.not_equal(np.round(cur), 0, out=out)
        return
    if dt.kind in "iu":
        info = np.iinfo(dt)
        cur = np.clip(np.round(cur), info.min, info.max)
    np.copyto(out, cur, casting="unsafe")


def _apply_masks(out: np.ndarray, plan: _Plan) -> None:
    for a, mask in plan.masks:
        out[(slice(None),) * a + (mask,)] = plan.fill


def _resize(inputs, outputs, prepared):
    """Resize/Upsample kernel: one broadcast fancy index (nearest) or separable taps.

    Shapes/dtypes: as inferred by ``_resize_shape``; linear/cubic compute in float32
    (float16/bfloat16/float32), float64 (float64, integers, bool: rounded and clipped back)
    or complex128, then cast into the output. tf_crop_and_resize positions outside the
    input get ``extrapolation_value``.

    Source: ONNX operator spec, Resize-19 (coordinate transformations, nearest modes,
    cubic_coeff_a, exclude_outside, antialias) and Upsample-10.
    """
    if isinstance(prepared, tuple):                         # value inputs known only now
        ctx, needed = prepared
        runtime = {i: inputs[i] for i in needed if i < len(inputs)}
        plan = _plan(ctx, inputs[0].shape, inputs[0].dtype, lambda i: runtime.get(i))
    else:
        plan = prepared
    x, out = inputs[0], outputs[0]
    fresh = out is None
    if fresh:
        out = np.empty(plan.out_shape, dtype=x.dtype)
    if plan.mode == "copy":
        np.copyto(out, x)
    elif plan.mode == "nearest":
        _apply_nearest(x, out, plan)
    else:
        _apply_interp(x, out, plan)
    _apply_masks(out, plan)
    return [out] if fresh else None


# --------------------------------------------------------------------------- registration

lib.op("Resize", since_version=10, infer_dtype=same_dtype(0), value_inputs=(1,))(_resize_shape)
lib.op("Resize", since_version=(11, 13, 18, 19), infer_dtype=same_dtype(0),
       value_inputs=(1, 2, 3))(_resize_shape)
lib.op("Upsample", since_version=(1, 7), infer_dtype=same_dtype(0))(_resize_shape)
lib.op("Upsample", since_version=(9, 10), infer_dtype=same_dtype(0), value_inputs=(1,))(_resize_shape)
lib.kernel("Resize", prepare=_prepare)(_resize)
lib.kernel("Upsample", prepare=_prepare)(_resize)
