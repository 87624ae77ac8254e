"""The ConvTranspose loops (2-D, float32 / float64, C-contiguous); which one runs, and why,
is :mod:`dynashape.ops_builtin.fast.conv_transpose`.

Each loop gathers, one output row at a time: row ``oh`` takes the kernel rows ``kh`` with
``(oh + ph - kh*dh) % sh == 0`` (:func:`_row_taps`), and along the row each kernel column
``kw`` reaches every ``sw``-th output column, all in one phase, from a contiguous input
row, so a row is summed in a phase-split buffer ``acc[sw, ~OW/sw]`` (:func:`_spans`), then
interleaved into Y with the bias (:func:`_interleave`); every element of Y is written.

* :func:`col2im2d`: the columns ``W^T @ X`` (from BLAS) summed into Y;
* :func:`col2im2d_tiled`: the columns where each output element takes exactly one tap
  (kernel == stride): each output row its phase rows interleaved, no sum;
* :func:`conv_transpose2d_direct`: no columns; four output channels, four input channels
  per pass (fused multiply-adds, kernel row by kernel row, channels in order).

Jobs: ``prange`` over (n, output channel or block of 4, band of output rows), each output
element summed by one job in the serial order (:class:`.threaded.ThreadedLoop`).

Source: ONNX operator spec, ConvTranspose-22 (output position ``i*stride + k*dilation -
pad_begin``).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .common import FMA_JIT, JIT, tap_span
from .threaded import threaded


#: a phase-split row may run this many columns (and a quarter of its width) past the output
#: row, so that every kernel column tap takes a whole input row (no clipped loop remainders)
_SPILL = 8


@njit(**JIT)
def _spans(kw_, dw, pw, sw, ow_, w_):
    """Where each kernel column tap ``kw`` of a row lands (output column ``iw*sw + kw*dw -
    pw``) in a phase-split row of ``sw`` phases: int64 (KW, 4) of (first input column, its
    output column's phase, the place in the phase row, count), and the phase rows' width
    and the place of output column 0's phase column there (``lo``).

    Where the phase rows may spill past the output row by a few columns (``_SPILL``), each
    tap takes its whole input row (count W, a vectorised loop without a remainder where W
    is a multiple of the vector: tap_span would clip a padded border tap to W - 1) and the
    spill is never written out; else each tap is clipped to the output row."""
    jw = (ow_ + sw - 1) // sw
    first, last = 0, jw
    for kw in range(kw_):
        q = (kw * dw - pw) // sw
        first, last = min(first, q), max(last, q + w_)
    sp = np.empty((kw_, 4), np.int64)
    if last - first - jw <= max(_SPILL, jw // 4):
        for kw in range(kw_):
            off = kw * dw - pw
            sp[kw, 0], sp[kw, 1], sp[kw, 2], sp[kw, 3] = 0, off % sw, off // sw - first, w_
        return sp, last - first, -first
    for kw in range(kw_):
        i0, o0, cnt = tap_span(kw * dw - pw, sw, ow_, w_)
        sp[kw, 0], sp[kw, 1], sp[kw, 2], sp[kw, 3] = i0, o0 % sw, o0 // sw, cnt
    return sp, jw, 0


@njit(inline="always", **JIT)
def _interleave(acc, k, lo, y, n, mo, oh, bias, has_bias):
    """y[n, mo, oh, p + q*sw] = acc[k, p, lo + q] (+ bias[mo]): the phase-split row
    ``acc[k]`` (sw, width: output column 0 of each phase at ``lo``) into its output row,
    every column written."""
    sw, ow_ = acc.shape[1], y.shape[3]
    b = bias[mo] if has_bias else y.dtype.type(0)   # (never derived from y: its bytes are garbage)
    if sw == 1:
        for q in range(ow_):
            v = acc[k, 0, lo + q]
            y[n, mo, oh, q] = v + b if has_bias else v
    elif sw == 2:   # (two interleaved streams: LLVM vectorises this one)
        half = ow_ // 2
        for q in range(half):
            v0, v1 = acc[k, 0, lo + q], acc[k, 1, lo + q]
            y[n, mo, oh, 2 * q] = v0 + b if has_bias else v0
            y[n, mo, oh, 2 * q + 1] = v1 + b if has_bias else v1
        if ow_ % 2:
            v = acc[k, 0, lo + half]
            y[n, mo, oh, ow_ - 1] = v + b if has_bias else v
    else:
        for p in range(sw):
            for q in range((ow_ - p + sw - 1) // sw):
                v = acc[k, p, lo + q]
                y[n, mo, oh, p + q * sw] = v + b if has_bias else v


@njit(inline="always", **JIT)
def _row_taps(oh, ph, kh_, dh, sh, h_, rows):
    """The kernel rows that reach output row ``oh`` and the input row each reads, into
    ``rows`` (KH, 2); returns how many."""
    nt = 0
    for kh in range(kh_):
        t = oh + ph - kh * dh
        if t >= 0 and t % sh == 0 and t // sh < h_:
            rows[nt, 0], rows[nt, 1] = kh, t // sh
            nt += 1
    return nt


@threaded(JIT)
def col2im2d(cols, bias, y, sh, sw, dh, dw, ph, pw, has_bias, rows_per_job):
    """col2im of ConvTranspose: the columns ``cols`` (N, M, KH, KW, H, W) = W^T @ X summed
    into y (N, M, OH, OW) (float32 or float64, all C-contiguous), plus ``bias`` (M,) when
    ``has_bias``. Each output row once: the taps of its phase added into a phase-split row,
    interleaved into y with the bias. Strides (sh, sw), dilations (dh, dw), pads_begin (ph,
    pw; negative where ``output_shape`` asks for more than the full output). Jobs: (n, m,
    band of ``rows_per_job`` output rows), split over threads where the run has several.

    Source: ONNX operator spec, ConvTranspose-22 (output position ``i*stride + k*dilation
    - pad_begin``)."""
    n_, m_, kh_, kw_, h_, w_ = cols.shape
    oh_, ow_ = y.shape[2], y.shape[3]
    per_plane = (oh_ + rows_per_job - 1) // rows_per_job
    sp, width, lo = _spans(kw_, dw, pw, sw, ow_, w_)
    for job in prange(n_ * m_ * per_plane):
        plane, r = job // per_plane, job % per_plane
        n, m = plane // m_, plane % m_
        acc = np.empty((1, sw, width), y.dtype)
        rows = np.empty((kh_, 2), np.int64)
        for oh in range(r * rows_per_job, min(oh_, (r + 1) * rows_per_job)):
            acc[:] = 0.0
            for t in range(_row_taps(oh, ph, kh_, dh, sh, h_, rows)):
                kh, ih = max(rows[t, 0], 0), max(rows[t, 1], 0)
                for kw in range(kw_):
                    i0, p, q0, cnt = max(sp[kw, 0], 0), max(sp[kw, 1], 0), max(sp[kw, 2], 0), sp[kw, 3]
                    for j in range(cnt):
                        acc[0, p, q0 + j] += cols[n, m, kh, kw, ih, i0 + j]
            _interleave(acc, 0, lo, y, n, m, oh, bias, has_bias)


@threaded(JIT)
def col2im2d_tiled(cols, bias, y, sh, dh, ph, phases, has_bias, rows_per_job):
    """col2im where every output element takes exactly one tap (a "tiling" ConvTranspose:
    kernel == stride, the 2x2 stride 2 of U-Net decoders and ppocrv4_det): each output row
    is its one kernel row's ``sw`` phase rows interleaved, straight from the columns (no
    sum), plus ``bias`` (M,) when ``has_bias``. cols (N, M, KH, KW, H, W), y (N, M, OH, OW)
    (float32 or float64, C-contiguous); ``phases`` int64 (sw, 2): per output column phase
    ``p`` the kernel column whose taps land there and ``d >= 0``: output column ``p + q*sw``
    reads input column ``q + d``. Jobs as in :func:`col2im2d`.

    Source: ONNX operator spec, ConvTranspose-22."""
    n_, m_, kh_, kw_, h_, w_ = cols.shape
    oh_, ow_ = y.shape[2], y.shape[3]
    sw = phases.shape[0]
    per_plane = (oh_ + rows_per_job - 1) // rows_per_job
    for job in prange(n_ * m_ * per_plane):
        plane, r = job // per_plane, job % per_plane
        n, m = plane // m_, plane % m_
        b = bias[m] if has_bias else y.dtype.type(0)
        rows = np.empty((kh_, 2), np.int64)
        for oh in range(r * rows_per_job, min(oh_, (r + 1) * rows_per_job)):
            _row_taps(oh, ph, kh_, dh, sh, h_, rows)   # (exactly one)
            kh, ih = max(rows[0, 0], 0), max(rows[0, 1], 0)
            if sw == 2:   # (two interleaved streams: LLVM vectorises this one)
                k0, d0, k1, d1 = phases[0, 0], max(phases[0, 1], 0), phases[1, 0], max(phases[1, 1], 0)
                half = ow_ // 2
                for q in range(half):
                    v0, v1 = cols[n, m, kh, k0, ih, q + d0], cols[n, m, kh, k1, ih, q + d1]
                    y[n, m, oh, 2 * q] = v0 + b if has_bias else v0
                    y[n, m, oh, 2 * q + 1] = v1 + b if has_bias else v1
                if ow_ % 2:
                    v = cols[n, m, kh, k0, ih, half + d0]
                    y[n, m, oh, ow_ - 1] = v + b if has_bias else v
            else:
                for p in range(sw):
                    kw, d = phases[p, 0], max(phases[p, 1], 0)
                    for q in range((ow_ - p + sw - 1) // sw):
                        v = cols[n, m, kh, kw, ih, q + d]
                        y[n, m, oh, p + q * sw] = v + b if has_bias else v


@njit(inline="always", **FMA_JIT)
def _fma4x4(acc, p, q0, x, n, c, ih, i0, cnt, w, m, kh, kw):
    """acc[k, p, q0 + j] += sum_i w[c + i, m + k, kh, kw] * x[n, c + i, ih, i0 + j] for
    j < cnt; k, i < 4 (four output channels' phase rows from four input rows)."""
    w00, w01, w02, w03 = w[c, m, kh, kw], w[c + 1, m, kh, kw], w[c + 2, m, kh, kw], w[c + 3, m, kh, kw]
    w10, w11, w12, w13 = w[c, m + 1, kh, kw], w[c + 1, m + 1, kh, kw], w[c + 2, m + 1, kh, kw], w[c + 3, m + 1, kh, kw]
    w20, w21, w22, w23 = w[c, m + 2, kh, kw], w[c + 1, m + 2, kh, kw], w[c + 2, m + 2, kh, kw], w[c + 3, m + 2, kh, kw]
    w30, w31, w32, w33 = w[c, m + 3, kh, kw], w[c + 1, m + 3, kh, kw], w[c + 2, m + 3, kh, kw], w[c + 3, m + 3, kh, kw]
    for j in range(cnt):
        a0, a1, a2, a3 = x[n, c, ih, i0 + j], x[n, c + 1, ih, i0 + j], x[n, c + 2, ih, i0 + j], x[n, c + 3, ih, i0 + j]
        acc[0, p, q0 + j] = acc[0, p, q0 + j] + w00 * a0 + w01 * a1 + w02 * a2 + w03 * a3
        acc[1, p, q0 + j] = acc[1, p, q0 + j] + w10 * a0 + w11 * a1 + w12 * a2 + w13 * a3
        acc[2, p, q0 + j] = acc[2, p, q0 + j] + w20 * a0 + w21 * a1 + w22 * a2 + w23 * a3
        acc[3, p, q0 + j] = acc[3, p, q0 + j] + w30 * a0 + w31 * a1 + w32 * a2 + w33 * a3


@njit(inline="always", **FMA_JIT)
def _fma4x1(acc, p, q0, x, n, c, ih, i0, cnt, w, m, kh, kw):
    """acc[k, p, q0 + j] += w[c, m + k, kh, kw] * x[n, c, ih, i0 + j] for j < cnt, k < 4."""
    w0, w1, w2, w3 = w[c, m, kh, kw], w[c, m + 1, kh, kw], w[c, m + 2, kh, kw], w[c, m + 3, kh, kw]
    for j in range(cnt):
        a0 = x[n, c, ih, i0 + j]
        acc[0, p, q0 + j] = acc[0, p, q0 + j] + w0 * a0
        acc[1, p, q0 + j] = acc[1, p, q0 + j] + w1 * a0
        acc[2, p, q0 + j] = acc[2, p, q0 + j] + w2 * a0
        acc[3, p, q0 + j] = acc[3, p, q0 + j] + w3 * a0


@njit(inline="always", **FMA_JIT)
def _fma1x4(acc, k, p, q0, x, n, c, ih, i0, cnt, w, m, kh, kw):
    """acc[k, p, q0 + j] += sum_i w[c + i, m, kh, kw] * x[n, c + i, ih, i0 + j] for j < cnt, i < 4."""
    w0, w1, w2, w3 = w[c, m, kh, kw], w[c + 1, m, kh, kw], w[c + 2, m, kh, kw], w[c + 3, m, kh, kw]
    for j in range(cnt):
        acc[k, p, q0 + j] = (acc[k, p, q0 + j] + w0 * x[n, c, ih, i0 + j] + w1 * x[n, c + 1, ih, i0 + j]
                             + w2 * x[n, c + 2, ih, i0 + j] + w3 * x[n, c + 3, ih, i0 + j])


@njit(inline="always", **FMA_JIT)
def _fma1x1(acc, k, p, q0, x, n, c, ih, i0, cnt, w, m, kh, kw):
    """acc[k, p, q0 + j] += w[c, m, kh, kw] * x[n, c, ih, i0 + j] for j < cnt."""
    w0 = w[c, m, kh, kw]
    for j in range(cnt):
        acc[k, p, q0 + j] = acc[k, p, q0 + j] + w0 * x[n, c, ih, i0 + j]


@threaded(FMA_JIT)
def conv_transpose2d_direct(x, w, bias, y, group, sh, sw, dh, dw, ph, pw, has_bias, rows_per_job):
    """ConvTranspose of x (N, C, H, W) with w (C, M/group, KH, KW) into y (N, M, OH, OW),
    plus ``bias`` (M,) when ``has_bias`` (float32 or float64, all C-contiguous), without
    columns. Strides (sh, sw), dilations (dh, dw), pads_begin (ph, pw; negative where
    ``output_shape`` asks for more than the full output).

    Jobs: (n, group, block of 4 output channels, band of ``rows_per_job`` output rows). Per
    output row, the kernel rows of its phase; per kernel row, four input channels at a time
    (then one), each kernel column's multiply-adds into the four channels' phase-split rows
    (``acc``), which are then interleaved into y with the bias. (Arrays are indexed whole,
    never sliced into views in the loops: a view costs a reference count each time.)

    Source: ONNX operator spec, ConvTranspose-22 (output position ``i*stride + k*dilation
    - pad_begin``, channels ``g*C/group .. (g+1)*C/group`` feed outputs ``g*M/group ..``)."""
    n_, c_, h_, w_ = x.shape
    mg, kh_, kw_ = w.shape[1], w.shape[2], w.shape[3]
    oh_, ow_ = y.shape[2], y.shape[3]
    cg = c_ // group
    blocks = (mg + 3) // 4              # blocks of 4 output channels per group (the last may be short)
    per_plane = (oh_ + rows_per_job - 1) // rows_per_job
    sp, width, lo = _spans(kw_, dw, pw, sw, ow_, w_)
    for job in prange(n_ * group * blocks * per_plane):
        plane, r = job // per_plane, job % per_plane
        n, gb = plane // (group * blocks), plane % (group * blocks)
        g, m0 = gb // blocks, (gb % blocks) * 4
        mb = min(4, mg - m0)
        acc = np.empty((4, sw, width), y.dtype)
        rows = np.empty((kh_, 2), np.int64)
        for oh in range(r * rows_per_job, min(oh_, (r + 1) * rows_per_job)):
            acc[:] = 0.0
            for t in range(_row_taps(oh, ph, kh_, dh, sh, h_, rows)):
                kh, ih = max(rows[t, 0], 0), max(rows[t, 1], 0)
                c = g * cg
                c_end = c + cg
                while c + 4 <= c_end:
                    for kw in range(kw_):
                        i0, p, q0, cnt = max(sp[kw, 0], 0), max(sp[kw, 1], 0), max(sp[kw, 2], 0), sp[kw, 3]
                        if mb == 4:
                            _fma4x4(acc, p, q0, x, n, c, ih, i0, cnt, w, m0, kh, kw)
                        else:
                            for k in range(mb):
                                _fma1x4(acc, k, p, q0, x, n, c, ih, i0, cnt, w, m0 + k, kh, kw)
                    c += 4
                while c < c_end:
                    for kw in range(kw_):
                        i0, p, q0, cnt = max(sp[kw, 0], 0), max(sp[kw, 1], 0), max(sp[kw, 2], 0), sp[kw, 3]
                        if mb == 4:
                            _fma4x1(acc, p, q0, x, n, c, ih, i0, cnt, w, m0, kh, kw)
                        else:
                            for k in range(mb):
                                _fma1x1(acc, k, p, q0, x, n, c, ih, i0, cnt, w, m0 + k, kh, kw)
                    c += 1
            for k in range(mb):
                _interleave(acc, k, lo, y, n, g * mg + m0 + k, oh, bias, has_bias)
