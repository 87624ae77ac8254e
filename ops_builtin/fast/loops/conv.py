"""The Conv loops (2-D, float32 / float64, C-contiguous); the kernels that pick them are
:mod:`dynashape.ops_builtin.fast.conv`.

* :func:`depthwise_direct`: one filter per channel; each plane padded and split into its
  column phases in a buffer of its own (:func:`_pad_plane`), three taps per pass along each
  output row.
* :func:`conv2d_direct`: four output channels per pass over their group's padded planes,
  each output element one fused multiply-add chain over its taps in (channel, kh, kw)
  order, restarted every ``block`` terms, the bias added last: the order of MLAS's im2col +
  SGEMM.
* :func:`pad_phases`, :func:`im2col_phases`, :func:`bias_relu_planes`: the per-image im2col
  path's padding, columns (contiguous runs from the phase-split planes) and epilogue around
  BLAS.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .common import FMA_JIT, JIT, tap_span
from .threaded import threaded


@njit(inline="always", **JIT)
def _pad_plane(src, dst, ph, pw, s_, wq):
    """dst (Hp, S x Wq) = the plane src (H, W) padded with zeros (ph rows on top, pw columns
    on the left, the rest at the bottom / right), each row split into its S column phases:
    ``dst[i, p * wq + j] = src[i - ph, j * S + p - pw]`` (0 outside src)."""
    h_, w_ = src.shape
    for i in range(dst.shape[0]):
        ih = i - ph
        for p in range(s_):
            row = dst[i, p * wq:(p + 1) * wq]
            # the j whose column j * S + p - pw lies in src
            j0, src0, count = tap_span(p - pw, s_, w_, wq)
            j0 = max(min(j0, wq), 0)
            if ih < 0 or ih >= h_:
                count = 0
            for j in range(j0):
                row[j] = 0.0
            if count:
                line = src[max(ih, 0)]
                if s_ == 1:
                    for j in range(count):
                        row[j0 + j] = line[src0 + j]
                else:
                    for j in range(count):
                        row[j0 + j] = line[src0 + j * s_]
            for j in range(j0 + count, wq):
                row[j] = 0.0


@threaded(JIT)
def pad_phases(x, xq, ph, pw):
    """xq (N, C, Hp, S, Wq) = x (N, C, H, W) padded and split into its S column phases (see
    ``_pad_plane``)."""
    n_, c_ = x.shape[0], x.shape[1]
    hp, s_, wq = xq.shape[2], xq.shape[3], xq.shape[4]
    rows = xq.reshape(n_, c_, hp, s_ * wq)
    for nc in prange(n_ * c_):
        n, c = nc // c_, nc % c_
        _pad_plane(x[n, c], rows[n, c], ph, pw, s_, wq)


@njit(inline="always", **FMA_JIT)
def _taps3(r0, r1, r2, r3, u, ou, ov, ot, w0, w1, w2, w3, k):
    """r_i[j] = r_i[j] + w_i[k] u[j + ou] + w_i[k + 1] u[j + ov] + w_i[k + 2] u[j + ot]: three
    taps of four output rows in one pass (one chain per element, the taps in order)."""
    a0, b0, c0 = w0[k], w0[k + 1], w0[k + 2]
    a1, b1, c1 = w1[k], w1[k + 1], w1[k + 2]
    a2, b2, c2 = w2[k], w2[k + 1], w2[k + 2]
    a3, b3, c3 = w3[k], w3[k + 1], w3[k + 2]
    ou, ov, ot = max(ou, 0), max(ov, 0), max(ot, 0)   # (lets LLVM drop negative-index wraparound)
    for j in range(r0.shape[0]):
        x0, x1, x2 = u[j + ou], u[j + ov], u[j + ot]
        r0[j] = r0[j] + a0 * x0 + b0 * x1 + c0 * x2
        r1[j] = r1[j] + a1 * x0 + b1 * x1 + c1 * x2
        r2[j] = r2[j] + a2 * x0 + b2 * x1 + c2 * x2
        r3[j] = r3[j] + a3 * x0 + b3 * x1 + c3 * x2


@njit(inline="always", **FMA_JIT)
def _tap1(r0, r1, r2, r3, u, ou, a0, a1, a2, a3):
    """r_i[j] = r_i[j] + a_i u[j + ou]: one tap of four output rows."""
    ou = max(ou, 0)
    for j in range(r0.shape[0]):
        x0 = u[j + ou]
        r0[j] = r0[j] + a0 * x0
        r1[j] = r1[j] + a1 * x0
        r2[j] = r2[j] + a2 * x0
        r3[j] = r3[j] + a3 * x0


@njit(inline="always", **FMA_JIT)
def _row_taps3(r, u, ou, ov, ot, a, b, c):
    """r[j] = r[j] + a u[j + ou] + b u[j + ov] + c u[j + ot]: three taps of one output row."""
    ou, ov, ot = max(ou, 0), max(ov, 0), max(ot, 0)
    for j in range(r.shape[0]):
        r[j] = r[j] + a * u[j + ou] + b * u[j + ov] + c * u[j + ot]


@njit(inline="always", **FMA_JIT)
def _row_tap1(r, u, ou, a):
    ou = max(ou, 0)
    for j in range(r.shape[0]):
        r[j] = r[j] + a * u[j + ou]


@threaded(FMA_JIT)
def depthwise_direct(x, w, bias, y, sh, s_, dh, dw, ph, pw, hp, wq, has_bias, relu):
    """Depthwise Conv (one filter per channel) of x (N, C, H, W) with w (C, 1, KH, KW) into
    y (N, C, OH, OW); strides (sh, s_), dilations (dh, dw), pads (ph, pw) on top / left.
    Each plane is padded and split into its column phases (``_pad_plane``: hp rows of S x
    wq, in cache), then each output row sums its taps three at a time along the row (one
    chain per element, taps in (kh, kw) order), then ``bias`` and max(., 0) (``relu``)."""
    n_, c_ = x.shape[0], x.shape[1]
    kh_, kw_ = w.shape[2], w.shape[3]
    oh_, ow_ = y.shape[2], y.shape[3]
    for nc in prange(n_ * c_):
        n, c = nc // c_, nc % c_
        plane = np.empty((hp, s_ * wq), y.dtype)
        _pad_plane(x[n, c], plane, ph, pw, s_, wq)
        b = bias[c] if has_bias else 0.0
        for oh in range(oh_):
            r = y[n, c, oh]
            for j in range(ow_):
                r[j] = 0.0
            for kh in range(kh_):
                u = plane[oh * sh + kh * dh]
                wr = w[c, 0, kh]
                kw = 0
                while kw + 3 <= kw_:
                    _row_taps3(r, u, _at(kw * dw, s_, wq), _at((kw + 1) * dw, s_, wq), _at((kw + 2) * dw, s_, wq),
                               wr[kw], wr[kw + 1], wr[kw + 2])
                    kw += 3
                while kw < kw_:
                    _row_tap1(r, u, _at(kw * dw, s_, wq), wr[kw])
                    kw += 1
            if has_bias or relu:
                for j in range(ow_):
                    v = r[j] + b
                    r[j] = (v if not v < 0 else 0.0) if relu else v


@njit(inline="always", **FMA_JIT)
def _at(col, s_, wq):
    """Where padded column ``col + j * s_`` sits in a phase-split row (S phases of wq): its
    phase's start plus ``col // s_``."""
    return (col % s_) * wq + col // s_


@njit(inline="always", **FMA_JIT)
def _end_chain(y0, y1, y2, y3, r0, r1, r2, r3, first):
    """A chain of the reduction is summed: y_i = r_i (the first) or y_i += r_i; r_i = 0."""
    for j in range(y0.shape[0]):
        if first:
            y0[j], y1[j], y2[j], y3[j] = r0[j], r1[j], r2[j], r3[j]
        else:
            y0[j] += r0[j]
            y1[j] += r1[j]
            y2[j] += r2[j]
            y3[j] += r3[j]
        r0[j] = r1[j] = r2[j] = r3[j] = 0.0


@threaded(FMA_JIT)
def conv2d_direct(x, w, bias, y, group, sh, s_, dh, dw, ph, pw, hp, wq, block, has_bias, relu):
    """Conv of x (N, C, H, W) with w (M, C/group, KH, KW; M/group a multiple of 4) into y
    (N, M, OH, OW); strides (sh, s_), dilations (dh, dw), pads (ph, pw) on top / left. Four
    output channels at a time: their group's input planes are padded and split into their
    column phases (``_pad_plane``: hp rows of S x wq, in cache), then one output row at a
    time each output element sums its taps in (c, kh, kw) order, one fused multiply-add
    chain per ``block`` taps, the chains added in order, then ``bias`` (when ``has_bias``)
    and max(., 0) (when ``relu``)."""
    n_ = x.shape[0]
    m_, cg, kh_, kw_ = w.shape
    oh_, ow_ = y.shape[2], y.shape[3]
    mg = m_ // group
    blocks = mg // 4
    for job in prange(n_ * group * blocks):
        n, rest = job // (group * blocks), job % (group * blocks)
        g = rest // blocks
        m = g * mg + (rest % blocks) * 4
        c0 = g * cg
        planes = np.empty((cg, hp, s_ * wq), y.dtype)
        for ci in range(cg):
            _pad_plane(x[n, c0 + ci], planes[ci], ph, pw, s_, wq)
        acc = np.zeros((4, ow_), y.dtype)   # the chain being summed (kept zero between chains)
        r0, r1, r2, r3 = acc[0], acc[1], acc[2], acc[3]
        for oh in range(oh_):
            y0, y1, y2, y3 = y[n, m, oh], y[n, m + 1, oh], y[n, m + 2, oh], y[n, m + 3, oh]
            t = 0          # taps in the current chain
            first = True
            for ci in range(cg):
                for kh in range(kh_):
                    xrow = planes[ci, oh * sh + kh * dh]
                    w0, w1, w2, w3 = w[m, ci, kh], w[m + 1, ci, kh], w[m + 2, ci, kh], w[m + 3, ci, kh]
                    kw = 0
                    while kw < kw_:
                        if t == block:
                            _end_chain(y0, y1, y2, y3, r0, r1, r2, r3, first)
                            first = False
                            t = 0
                        end = kw + min(kw_ - kw, block - t)
                        t += end - kw
                        while kw + 3 <= end:
                            _taps3(r0, r1, r2, r3, xrow, _at(kw * dw, s_, wq), _at((kw + 1) * dw, s_, wq),
                                   _at((kw + 2) * dw, s_, wq), w0, w1, w2, w3, kw)
                            kw += 3
                        while kw < end:
                            _tap1(r0, r1, r2, r3, xrow, _at(kw * dw, s_, wq), w0[kw], w1[kw], w2[kw], w3[kw])
                            kw += 1
            _end_chain(y0, y1, y2, y3, r0, r1, r2, r3, first)
            if has_bias or relu:
                for i in range(4):
                    row = y[n, m + i, oh]
                    b = bias[m + i] if has_bias else 0.0
                    for j in range(ow_):
                        v = row[j] + b
                        row[j] = (v if not v < 0 else 0.0) if relu else v


@threaded(JIT)
def im2col_phases(xq, cols, kh_, kw_, sh, dh, dw, oh_, ow_):
    """cols (C x KH x KW, OH x OW) of one image from xq (C, Hp, S, Wq: padded, split into its
    S column phases, see ``pad_phases``): row (c, kh, kw), column (oh, ow) holds the padded
    input at (oh * sh + kh * dh, ow * S + kw * dw); every read is a contiguous run."""
    c_, s_, wq = xq.shape[0], xq.shape[2], xq.shape[3]
    rows = xq.reshape(c_, xq.shape[1], s_ * wq)
    for r in prange(c_ * kh_ * kw_):
        c, kh, kw = r // (kh_ * kw_), (r // kw_) % kh_, r % kw_
        dst = cols[r]
        off = _at(kw * dw, s_, wq)
        for oh in range(oh_):
            src = rows[c, oh * sh + kh * dh]
            base = oh * ow_
            for j in range(ow_):
                dst[base + j] = src[off + j]


@threaded(JIT)
def bias_relu_planes(y, bias, has_bias, relu):
    """y (M, P) = y + bias[m] per row m (when ``has_bias``), then max(., 0) (when ``relu``)."""
    m_, p_ = y.shape
    for m in prange(m_):
        b = bias[m] if has_bias else 0.0
        row = y[m]
        for j in range(p_):
            v = row[j] + b
            row[j] = (v if not v < 0 else 0.0) if relu else v
