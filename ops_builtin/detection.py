"""Object-detection operators: NonMaxSuppression and RoiAlign.

* NonMaxSuppression: every (batch, class) pair is a group. Candidates are sorted once per
  group (stable, score descending: equal scores keep the lower box index first) and taken
  in rank order, a block of ranks of every group at a time: the block is first checked
  against the boxes its group kept before (one vectorised IoU array), then greedy rounds
  inside the block keep the best live candidate of every group and suppress, with one
  vectorised IoU row per group, what it overlaps. The loop runs once per kept box (never
  over box pairs). IoU is computed in float32 with onnxruntime's formula and guards
  (``SuppressByIOU``), so borderline IoUs fall on the same side.
* RoiAlign: the bilinear samples of all RoIs are laid out flat (RoI, bin, sample) with
  ``np.repeat`` (the adaptive sampling grid differs per RoI), their four corners gathered
  as channel rows of an (N*H*W, C) view of X, weighted, and reduced per bin with
  ``np.add.reduceat`` / ``np.maximum.reduceat``. RoIs are processed in chunks that keep
  the gathered rows a few MiB.

Source: ONNX operator spec (Operators.md), sections named in each docstring; the CPU
behaviour of onnxruntime where the spec leaves details open (tie order, IoU arithmetic,
RoiAlign's ``max`` mode taking the max of the weighted corners).
"""
from __future__ import annotations

import numpy as np
from dynashape.errors import ShapeInferenceError
from dynashape.records import OpLibrary, fixed_dtype, same_dtype
from dynashape.shapes import check_dims_equal, require

lib = OpLibrary()

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _is_float(dt) -> bool:
    return dt is not None and (dt.kind == "f" or (dt.kind == "V" and "float" in dt.name))


def _check_rank(ctx, i: int, rank: int, what: str):
    shape = ctx.shape(i)
    if shape is not None and len(shape) != rank:
        ctx.fail(f"{what} must have rank {rank}, got rank {len(shape)} {tuple(shape)}", kind="InvalidRank")
    return shape


def _check_scalar_input(ctx, i: int, what: str, dtype) -> None:
    """Optional input ``i``: a scalar or a 1-element 1-D tensor of ``dtype``."""
    if not ctx.has_input(i):
        return
    shape, dt = ctx.shape(i), ctx.dtype(i)
    message = f"{what} must be a scalar (or a 1-element tensor), got shape {tuple(shape or ())}"
    if shape is not None and len(shape) > 1:
        ctx.fail(message, kind="InvalidScalarInput")
    if shape is not None and len(shape) == 1:
        require(ctx, 1, ">=", shape[0], message, "InvalidScalarInput")
    if dt is not None and dt != dtype:
        ctx.fail(f"{what} has dtype {dt}, expected {np.dtype(dtype)}", kind="InvalidDtype")


def _scalar(x, default):
    if x is None or x.size == 0:
        return default
    return x.reshape(-1)[0]


# ----------------------------------------------------------------------------------------
# NonMaxSuppression
# ----------------------------------------------------------------------------------------

@lib.op("NonMaxSuppression", since_version=(10, 11), infer_dtype=fixed_dtype(np.int64), data_dependent=True)
def _nms_shape(ctx):
    """NonMaxSuppression: selected_indices (num_selected, 3) int64 rows [batch, class, box].

    boxes (num_batches, spatial_dimension, 4), scores (num_batches, num_classes,
    spatial_dimension); optional scalars max_output_boxes_per_class (int64, default 0: no
    output), iou_threshold and score_threshold (float). The count depends on data (a fresh
    dim). Raises InvalidRank, DimMismatch, InvalidAttribute (center_point_box not 0/1),
    InvalidScalarInput, InvalidDtype. Source: ONNX operator spec, NonMaxSuppression-10/11.
    """
    boxes = _check_rank(ctx, 0, 3, "boxes")
    scores = _check_rank(ctx, 1, 3, "scores")
    for i, what in ((0, "boxes"), (1, "scores")):
        if ctx.dtype(i) is not None and ctx.dtype(i) != _F32:
            ctx.fail(f"{what} has dtype {ctx.dtype(i)}, expected float32", kind="InvalidDtype")
    center = ctx.attr("center_point_box", 0)
    if center not in (0, 1):
        ctx.fail(f"center_point_box {center} must be 0 ([y1, x1, y2, x2]) or 1 ([x_center, y_center, "
                 "width, height])", kind="InvalidAttribute")
    if boxes is not None:
        check_dims_equal(ctx, boxes[2], 4, "boxes.shape[2] (the 4 box coordinates)")
    if boxes is not None and scores is not None:
        check_dims_equal(ctx, boxes[0], scores[0], "num_batches of boxes (dim 0) and scores (dim 0)")
        check_dims_equal(ctx, boxes[1], scores[2], "spatial_dimension of boxes (dim 1) and scores (dim 2)")
    _check_scalar_input(ctx, 2, "max_output_boxes_per_class", np.int64)
    _check_scalar_input(ctx, 3, "iou_threshold", np.float32)
    _check_scalar_input(ctx, 4, "score_threshold", np.float32)
    return [(ctx.new_dim(), 3)]


def _nms_prepare(ctx):
    return ctx.node.name, int(ctx.attr("center_point_box", 0))


def _box_extents(b: np.ndarray, center: int):
    """(x_min, x_max, y_min, y_max, area) in float32, as onnxruntime's SuppressByIOU forms them."""
    if center == 0:  # [y1, x1, y2, x2], corners in any order
        x_min, x_max = np.minimum(b[..., 1], b[..., 3]), np.maximum(b[..., 1], b[..., 3])
        y_min, y_max = np.minimum(b[..., 0], b[..., 2]), np.maximum(b[..., 0], b[..., 2])
    else:  # [x_center, y_center, width, height]
        half_w, half_h = b[..., 2] / np.float32(2), b[..., 3] / np.float32(2)
        x_min, x_max = b[..., 0] - half_w, b[..., 0] + half_w
        y_min, y_max = b[..., 1] - half_h, b[..., 1] + half_h
    return x_min, x_max, y_min, y_max, (x_max - x_min) * (y_max - y_min)


def _suppressed(k, c, thr: np.float32) -> np.ndarray:
    """Candidates ``c`` suppressed by kept boxes ``k`` (stacked (x_min, x_max, y_min, y_max,
    area) arrays that broadcast): IoU strictly above ``thr``, with onnxruntime's guards on
    empty intersections and areas."""
    ix_min, ix_max = np.maximum(k[0], c[0]), np.minimum(k[1], c[1])
    iy_min, iy_max = np.maximum(k[2], c[2]), np.minimum(k[3], c[3])
    inter = (ix_max - ix_min) * (iy_max - iy_min)
    union = c[4] + k[4] - inter
    sup = (ix_max > ix_min) & (iy_max > iy_min) & (inter > 0) & (k[4] > 0) & (c[4] > 0) & (union > 0)
    return sup & (inter / union > thr)


#: candidates per group examined per block, and the most (group, candidate, kept box) IoUs
#: computed at once when a block is checked against the boxes kept before it
_NMS_BLOCK = 128
_NMS_PAIRS = 1 << 20


def _nms_select(boxes, scores, max_out: int, iou_thr, score_thr, center: int) -> np.ndarray:
    """Greedy NMS of every (batch, class) group at once.

    Candidates are taken in rank order, a block of ``_NMS_BLOCK`` ranks per group at a time:
    first the block is checked against every box its group kept before (one vectorised IoU
    array), then rounds inside the block keep the best live candidate of each group and
    suppress what it overlaps (one IoU row per group). This is onnxruntime's order of
    decisions (a candidate survives iff no kept box of its group overlaps it above the
    threshold), with numpy over groups and candidates instead of loops over box pairs.
    """
    n_batch, n_box = boxes.shape[0], boxes.shape[1]
    n_class = scores.shape[1]
    groups = n_batch * n_class
    s = scores.reshape(groups, n_box)
    order = np.argsort(-s, axis=1, kind="stable")      # score descending, ties: lower index first
    if score_thr is None:
        cnt = np.full(groups, n_box, np.int64)
    else:  # candidates above the threshold are a prefix of each sorted row (NaN sorts last)
        cnt = (np.take_along_axis(s, order, axis=1) > score_thr).sum(axis=1)
    k = int(cnt.max(initial=0))
    if k == 0:
        return np.empty((0, 3), np.int64)
    order = order[:, :k]
    batch_of = np.repeat(np.arange(n_batch), n_class)
    ext = np.stack(_box_extents(boxes[batch_of[:, None], order], center))  # (5, G, K)
    cap = min(max_out, k)
    kept_ext = np.zeros((5, groups, cap), _F32)  # unused slots have area 0: they suppress nothing
    count = np.zeros(groups, np.int64)
    kept_g, kept_rank = [], []
    active = cnt > 0
    start = 0
    while start < k and active.any():
        stop = min(k, start + _NMS_BLOCK)
        ga = np.nonzero(active)[0]
        c = ext[:, ga, start:stop]                                   # (5, Ga, W)
        live = np.arange(start, stop) < cnt[ga, None]
        m = int(count[ga].max())
        step = max(1, _NMS_PAIRS // (len(ga) * (stop - start)))
        for j in range(0, m, step):                                  # against boxes kept before
            kb = kept_ext[:, ga, None, j:j + step]                   # (5, Ga, 1, step)
            live &= ~_suppressed(kb, c[:, :, :, None], iou_thr).any(axis=2)
        live &= (count[ga] < max_out)[:, None]
        while True:                                                  # greedy inside the block
            gi = np.nonzero(live.any(axis=1))[0]
            if gi.size == 0:
                break
            first = live[gi].argmax(axis=1)
            g = ga[gi]
            kept_g.append(g)
            kept_rank.append(start + first)
            kept_ext[:, g, count[g]] = c[:, gi, first]
            count[g] += 1
            live[gi, first] = False
            live[gi] &= ~_suppressed(c[:, gi, first][:, :, None], c[:, gi], iou_thr)
            live[gi[count[g] >= max_out]] = False
        start = stop
        active &= (count < max_out) & (cnt > start)
    if not kept_g:
        return np.empty((0, 3), np.int64)
    g = np.concatenate(kept_g)
    rank = np.concatenate(kept_rank)
    sort = np.lexsort((rank, g))          # by batch and class, then selection (= rank) order
    g, rank = g[sort], rank[sort]
    return np.stack([g // n_class, g % n_class, order[g, rank]], axis=1).astype(np.int64, copy=False)


@lib.kernel("NonMaxSuppression", prepare=_nms_prepare)
def _nms(inputs, outputs, prepared):
    """NonMaxSuppression: per-group sort, then greedy rounds with vectorised IoU rows."""
    name, center = prepared
    boxes, scores = inputs[0], inputs[1]

    def get(i):
        return inputs[i] if len(inputs) > i else None

    max_out = max(int(_scalar(get(2), 0)), 0)
    iou = np.float32(_scalar(get(3), 0.0))
    thr = get(4)
    thr = None if thr is None or thr.size == 0 else np.float32(thr.reshape(-1)[0])
    if not 0.0 <= iou <= 1.0:
        raise ShapeInferenceError(f"NonMaxSuppression node '{name}': iou_threshold {iou} must be in "
                                  "[0, 1]", node=name, op_type="NonMaxSuppression", kind="InvalidThreshold")
    if max_out == 0 or boxes.shape[1] == 0 or scores.shape[1] == 0 or boxes.shape[0] == 0:
        return [np.empty((0, 3), np.int64)]
    boxes = boxes.astype(_F32, copy=False)
    scores = scores.astype(_F32, copy=False)
    return [_nms_select(boxes, scores, max_out, iou, thr, center)]


# ----------------------------------------------------------------------------------------
# RoiAlign
# ----------------------------------------------------------------------------------------

def _roi_attrs(ctx):
    mode = ctx.attr("mode", "avg")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("avg", "max"):
        ctx.fail(f"mode '{mode}' is not one of avg, max", kind="InvalidAttribute")
    if ctx.opset >= 16:
        ctm = ctx.attr("coordinate_transformation_mode", "half_pixel")
        ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
        if ctm not in ("half_pixel", "output_half_pixel"):
            ctx.fail(f"coordinate_transformation_mode '{ctm}' is not one of half_pixel, output_half_pixel",
                     kind="InvalidAttribute")
    else:  # RoiAlign-10 has no attribute: its behaviour is output_half_pixel
        ctm = "output_half_pixel"
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    if oh < 1 or ow < 1:
        ctx.fail(f"output_height {oh} and output_width {ow} must be >= 1", kind="InvalidAttribute")
    ratio = int(ctx.attr("sampling_ratio", 0))
    if ratio < 0:
        ctx.fail(f"sampling_ratio {ratio} must be >= 0", kind="InvalidAttribute")
    return mode, ctm == "half_pixel", oh, ow, ratio, float(ctx.attr("spatial_scale", 1.0))


@lib.op("RoiAlign", since_version=(10, 16, 22), infer_dtype=same_dtype(0))
def _roi_align_shape(ctx):
    """RoiAlign: Y (num_rois, C, output_height, output_width) from X (N, C, H, W), rois
    (num_rois, 4) as [x1, y1, x2, y2] and batch_indices (num_rois,) int64.

    Raises InvalidRank, DimMismatch (rois not (R, 4), R differs from batch_indices),
    InvalidDtype, InvalidAttribute. Source: ONNX operator spec, RoiAlign-10/16/22 (16 adds
    coordinate_transformation_mode, default half_pixel; 10 behaves as output_half_pixel).
    """
    _, _, oh, ow, _, _ = _roi_attrs(ctx)
    x = _check_rank(ctx, 0, 4, "X")
    rois = _check_rank(ctx, 1, 2, "rois")
    idx = _check_rank(ctx, 2, 1, "batch_indices")
    if not _is_float(ctx.dtype(0)):
        ctx.fail(f"X has dtype {ctx.dtype(0)}, expected a floating-point tensor", kind="InvalidDtype")
    if ctx.dtype(1) is not None and ctx.dtype(1) != ctx.dtype(0):
        ctx.fail(f"rois has dtype {ctx.dtype(1)}, expected X's dtype {ctx.dtype(0)}", kind="InvalidDtype")
    if ctx.dtype(2) is not None and ctx.dtype(2) != np.int64:
        ctx.fail(f"batch_indices has dtype {ctx.dtype(2)}, expected int64", kind="InvalidDtype")
    r = None
    if rois is not None:
        check_dims_equal(ctx, rois[1], 4, "rois.shape[1] (the 4 coordinates x1, y1, x2, y2)")
        r = rois[0]
    if idx is not None:
        r = idx[0] if r is None else check_dims_equal(ctx, r, idx[0], "num_rois of rois and batch_indices")
    if x is None:
        return [None]
    return [(ctx.new_dim() if r is None else r, x[1], oh, ow)]


def _roi_prepare(ctx):
    return (ctx.node.name,) + _roi_attrs(ctx)


#: elements of gathered (sample, channel) rows per chunk of RoIs
_ROI_CHUNK = 1 << 21


def _roi_samples(rois, cdt, half_pixel: bool, oh: int, ow: int, ratio: int, scale: float):
    """Per RoI: start (y, x), bin size (y, x), sampling grid (gy, gx) and the divisor count,
    in the compute dtype with onnxruntime's order of operations."""
    offset = cdt.type(0.5 if half_pixel else 0.0)
    s = cdt.type(scale)
    x1, y1 = rois[:, 0] * s - offset, rois[:, 1] * s - offset
    x2, y2 = rois[:, 2] * s - offset, rois[:, 3] * s - offset
    rw, rh = x2 - x1, y2 - y1
    if not half_pixel:  # malformed RoIs are forced to 1x1
        rw, rh = np.maximum(rw, cdt.type(1)), np.maximum(rh, cdt.type(1))
    bin_h, bin_w = rh / cdt.type(oh), rw / cdt.type(ow)
    if ratio > 0:
        gy = np.full(len(rois), ratio, np.int64)
        gx = gy
    else:
        gy = np.ceil(rh / cdt.type(oh)).astype(np.int64)
        gx = np.ceil(rw / cdt.type(ow)).astype(np.int64)
    count = np.maximum(gy * gx, 1).astype(cdt)
    return y1, x1, bin_h, bin_w, np.maximum(gy, 0), np.maximum(gx, 0), count


def _roi_chunk(xt, h: int, w: int, batch, y1, x1, bin_h, bin_w, gy, gx, count, oh, ow, mode, cdt):
    """RoiAlign of a few RoIs: (R, oh*ow, C) from the samples of their bins."""
    n_roi, c = len(batch), xt.shape[1]
    bins = oh * ow
    per_bin = gy * gx                                         # samples per bin of each RoI
    out = np.zeros((n_roi * bins, c), cdt)
    total = int(per_bin.sum()) * bins
    if total == 0:
        return out.reshape(n_roi, bins, c)
    seg_len = np.repeat(per_bin, bins)                        # per (RoI, bin)
    seg = np.repeat(np.arange(n_roi * bins), seg_len)         # per sample: its (RoI, bin)
    starts = np.cumsum(seg_len) - seg_len
    local = np.arange(total) - starts[seg]
    roi = seg // bins
    ph, pw = (seg % bins) // ow, seg % ow
    sgx = gx[roi]
    iy, ix = local // sgx, local % sgx
    bh, bw = bin_h[roi], bin_w[roi]
    y = y1[roi] + ph.astype(cdt) * bh + (iy.astype(cdt) + cdt.type(0.5)) * bh / gy[roi].astype(cdt)
    x = x1[roi] + pw.astype(cdt) * bw + (ix.astype(cdt) + cdt.type(0.5)) * bw / sgx.astype(cdt)
    outside = (y < -1.0) | (y > h) | (x < -1.0) | (x > w)
    y, x = np.maximum(y, cdt.type(0)), np.maximum(x, cdt.type(0))
    y_low, x_low = y.astype(np.int64), x.astype(np.int64)
    top, right = y_low >= h - 1, x_low >= w - 1
    y_low = np.where(top, h - 1, y_low)
    x_low = np.where(right, w - 1, x_low)
    y = np.where(top, y_low.astype(cdt), y)
    x = np.where(right, x_low.astype(cdt), x)
    y_high = np.where(top, y_low, y_low + 1)
    x_high = np.where(right, x_low, x_low + 1)
    ly, lx = y - y_low.astype(cdt), x - x_low.astype(cdt)
    hy, hx = cdt.type(1) - ly, cdt.type(1) - lx
    keep = ~outside
    weights = [np.where(keep, hy * hx, 0)[:, None], np.where(keep, hy * lx, 0)[:, None],
               np.where(keep, ly * hx, 0)[:, None], np.where(keep, ly * lx, 0)[:, None]]
    base = batch[roi] * (h * w)
    pos = [np.where(keep, base + yy * w + xx, 0) for yy, xx in
           ((y_low, x_low), (y_low, x_high), (y_high, x_low), (y_high, x_high))]
    terms = [wt * xt[p] for wt, p in zip(weights, pos)]
    nonempty = np.nonzero(seg_len)[0]
    if mode == "avg":
        val = terms[0] + terms[1] + terms[2] + terms[3]
        out[nonempty] = np.add.reduceat(val, starts[nonempty], axis=0)
        out /= np.repeat(count, bins)[:, None]
    else:
        val = np.maximum(np.maximum(np.maximum(terms[0], terms[1]), terms[2]), terms[3])
        out[nonempty] = np.maximum.reduceat(val, starts[nonempty], axis=0)
    return out.reshape(n_roi, bins, c)


@lib.kernel("RoiAlign", prepare=_roi_prepare)
def _roi_align(inputs, outputs, prepared):
    """RoiAlign: flat bilinear samples of every RoI bin, reduced per bin (see module doc)."""
    name, mode, half_pixel, oh, ow, ratio, scale = prepared
    x, rois, batch = inputs
    n, c, h, w = x.shape
    cdt = _F64 if x.dtype == _F64 else _F32
    out = outputs[0]
    if out.size == 0:
        return None
    batch = batch.astype(np.int64, copy=False)
    if batch.size and (batch.min() < 0 or batch.max() >= n):
        bad = batch[(batch < 0) | (batch >= n)][0]
        raise ShapeInferenceError(f"RoiAlign node '{name}': batch index {bad} is out of range for X's batch "
                                  f"size {n}", node=name, op_type="RoiAlign", kind="RoiBatchIndexOutOfRange")
    xt = np.ascontiguousarray(np.moveaxis(x.astype(cdt, copy=False), 1, -1)).reshape(n * h * w, c)
    y1, x1, bin_h, bin_w, gy, gx, count = _roi_samples(rois.astype(cdt, copy=False), cdt, half_pixel,
                                                       oh, ow, ratio, scale)
    per_roi = (gy * gx * oh * ow + 1) * max(c, 1)
    ends = np.cumsum(per_roi)
    lo = 0
    while lo < len(batch):
        hi = max(lo + 1, int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + _ROI_CHUNK, side="right")))
        part = slice(lo, hi)
        res = _roi_chunk(xt, h, w, batch[part], y1[part], x1[part], bin_h[part], bin_w[part], gy[part],
                         gx[part], count[part], oh, ow, mode, cdt)
        np.copyto(out[part], np.moveaxis(res, 2, 1).reshape(hi - lo, c, oh, ow), casting="unsafe")
        lo = hi
    return None
