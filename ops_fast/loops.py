"""The compiled loops (numba ``njit``, on-disk cache): one pass where numpy needs several.

Each function takes contiguous arrays and writes into ``out``; numba specialises it on
dtype, rank and layout, never on sizes, so a process compiles each signature once and the
on-disk cache (``cache=True``) keeps it for the next process. ``error_model="numpy"``
gives IEEE division (inf / nan, no ZeroDivisionError check), which is what lets LLVM
vectorise a loop with a division. No function raises: the kernels in
``dynashape.ops_fast.kernels`` check what the loops assume (contiguity, dtypes, the axis)
and call the numpy kernel otherwise.

Transcendental functions (exp, tanh) are not vectorised by numba without Intel's SVML,
so where a kernel needs them it calls numpy's SIMD ``exp`` / ``tanh`` between two compiled
passes instead (Softmax, the attention scores).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

_JIT = {"cache": True, "error_model": "numpy"}
#: a max reduction vectorises only without NaN / signed-zero semantics (max is associative,
#: so the result is the same; a NaN in a row still makes the row NaN through its sum)
_MAX_JIT = dict(_JIT, fastmath={"nnan", "nsz"})
#: a sum reduction vectorises only when it may be reassociated: lanes add in another order,
#: within a few ulp (numpy's pairwise sum is yet another order)
_SUM_JIT = dict(_JIT, fastmath={"reassoc"})

# float32 erf: the rational approximation of the numpy kernel (Eigen / XLA, clamped to [-4, 4])
A0, A1, A2, A3, A4, A5, A6 = (np.float32(c) for c in (
    -2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
    -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02))
B0, B1, B2, B3, B4 = (np.float32(c) for c in (
    -1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
    -1.42647390514189e-02))
SQRT_HALF32 = np.float32(math.sqrt(0.5))
ONE32, HALF32, FOUR32 = np.float32(1.0), np.float32(0.5), np.float32(4.0)


@njit(inline="always", **_JIT)
def erf32(x):
    """The numpy kernel's float32 erf, step for step (elementwise._erf32)."""
    v = FOUR32 if x > FOUR32 else x
    v = -FOUR32 if v < -FOUR32 else v
    x2 = v * v
    p = A0 * x2 + A1
    p = p * x2 + A2
    p = p * x2 + A3
    p = p * x2 + A4
    p = p * x2 + A5
    p = p * x2 + A6
    q = B0 * x2 + B1
    q = q * x2 + B2
    q = q * x2 + B3
    q = q * x2 + B4
    return v * p / q


@njit(inline="always", **_JIT)
def gelu32(v):
    """Gelu-20 (erf) in float32 as the numpy kernel computes it: x * ((erf(x / sqrt 2) + 1) * 0.5)."""
    return v * ((erf32(v * SQRT_HALF32) + ONE32) * HALF32)


@njit(**_JIT)
def erf_f32(x, out):
    xf, of = x.reshape(-1), out.reshape(-1)
    for i in range(xf.size):
        of[i] = erf32(xf[i])


@njit(**_JIT)
def gelu_f32(x, out):
    xf, of = x.reshape(-1), out.reshape(-1)
    for i in range(xf.size):
        of[i] = gelu32(xf[i])


@njit(**_JIT)
def add_rows(y, bias):
    """y += bias over the rows of y (rows, n)."""
    rows, n = y.shape
    for r in range(rows):
        for j in range(n):
            y[r, j] += bias[j]


@njit(**_JIT)
def add_gelu_rows(y, bias, has_bias):
    """y = Gelu(y + bias) over the rows of float32 y (rows, n)."""
    rows, n = y.shape
    for r in range(rows):
        for j in range(n):
            v = y[r, j] + bias[j] if has_bias else y[r, j]
            y[r, j] = gelu32(v)


@njit(**_JIT)
def add_relu_rows(y, bias, has_bias):
    """y = max(y + bias, 0) over the rows of y (rows, n)."""
    rows, n = y.shape
    for r in range(rows):
        for j in range(n):
            v = y[r, j] + bias[j] if has_bias else y[r, j]
            y[r, j] = v if not v < 0 else 0.0


@njit(**_JIT)
def layer_norm_rows(x, scale, bias, out, n_f, eps, has_bias):
    """LayerNormalization over rows of x (rows, n) as onnxruntime's CPU kernel computes it
    (layer_norm_impl.cc): in x's dtype, sum and sum of squares accumulated in order,
    std = sqrt(E[x^2] - mean^2 + eps), y = (x - mean) / std * scale + bias. ``n_f`` and
    ``eps`` come in x's dtype."""
    rows, n = x.shape
    zero = n_f - n_f
    for r in range(rows):
        s = zero
        ss = zero
        for j in range(n):
            v = x[r, j]
            s += v
            ss += v * v
        mean = s / n_f
        std = np.sqrt(ss / n_f - mean * mean + eps)
        for j in range(n):
            v = (x[r, j] - mean) / std * scale[j]
            if has_bias:
                v += bias[j]
            out[r, j] = v


@njit(inline="always", **_MAX_JIT)
def row_max(row, lanes):
    """The max of a 1-D row, 16 lanes at a time (``lanes``: a scratch array of 16): a plain
    running max is one long dependency chain that LLVM does not vectorise."""
    n = row.shape[0]
    if n < 16:
        m = row[0]
        for j in range(1, n):
            m = row[j] if row[j] > m else m
        return m
    for k in range(16):
        lanes[k] = row[k]
    n16 = (n // 16) * 16
    for j in range(16, n16, 16):
        for k in range(16):
            v = row[j + k]
            lanes[k] = v if v > lanes[k] else lanes[k]
    m = lanes[0]
    for k in range(1, 16):
        m = lanes[k] if lanes[k] > m else m
    for j in range(n16, n):
        m = row[j] if row[j] > m else m
    return m


@njit(**_MAX_JIT)
def sub_row_max(x, out):
    """out = x - max of its row, over the rows of x (rows, n) (out may alias x)."""
    rows, n = x.shape
    lanes = np.empty(16, x.dtype)
    for r in range(rows):
        m = row_max(x[r], lanes)
        for j in range(n):
            out[r, j] = x[r, j] - m


@njit(**_MAX_JIT)
def scale_mask_sub_max(scores, mask, scale, divide, has_mask):
    """The attention scores (rows, n) in place: * or / scale, + mask (rows, n, any strides),
    minus the row's max."""
    rows, n = scores.shape
    lanes = np.empty(16, scores.dtype)
    for r in range(rows):
        for j in range(n):
            v = scores[r, j] / scale if divide else scores[r, j] * scale
            scores[r, j] = v + mask[r, j] if has_mask else v
        m = row_max(scores[r], lanes)
        for j in range(n):
            scores[r, j] = scores[r, j] - m


@njit(**_SUM_JIT)
def normalize_rows(e):
    """e /= the sum of its row (as a multiply by the reciprocal, as onnxruntime), over (rows, n)."""
    rows, n = e.shape
    for r in range(rows):
        s = 0.0
        for j in range(n):
            s += e[r, j]
        inv = 1 / s
        for j in range(n):
            e[r, j] = e[r, j] * inv


@njit(inline="always", **_JIT)
def _tap_span(off, sw, w_, ow_):
    """For a kernel tap reading input column ``ow * sw + off``: the first output column it
    reaches, the input column that one reads, and how many columns (0 when none). Both
    starts come out of ``max(..., 0)``, which lets LLVM prove the indices non-negative and
    drop numba's negative-index wraparound from the loop (it blocks vectorisation)."""
    lo = 0 if off >= 0 else (-off + sw - 1) // sw
    hi = (w_ - 1 - off) // sw + 1 if w_ - 1 - off >= 0 else 0
    hi = min(hi, ow_)
    return max(lo, 0), max(lo * sw + off, 0), max(hi - lo, 0)


@njit(**_JIT)
def depthwise_conv2d(x, w, bias, y, sh, sw, dh, dw, ph, pw, has_bias, relu):
    """Depthwise Conv (one filter per channel) of x (N, C, H, W) into y (N, C, OH, OW), the
    "taps" loop order: each output row accumulates one kernel tap at a time along its width
    (a vectorised inner loop when the stride is 1); ``relu`` applies max(y, 0) after."""
    n_, c_, h_, w_ = x.shape
    kh_, kw_ = w.shape[2], w.shape[3]
    oh_, ow_ = y.shape[2], y.shape[3]
    for n in range(n_):
        for c in range(c_):
            b = bias[c] if has_bias else 0.0   # (never derived from y: its bytes are garbage)
            for oh in range(oh_):
                row = y[n, c, oh]
                for ow in range(ow_):
                    row[ow] = b
                for kh in range(kh_):
                    ih = oh * sh - ph + kh * dh
                    if ih < 0 or ih >= h_:
                        continue
                    src = x[n, c, ih]
                    for kw in range(kw_):
                        off = kw * dw - pw
                        d0, s0, cnt = _tap_span(off, sw, w_, ow_)
                        wv = w[c, 0, kh, kw]
                        if sw == 1:   # unit stride: the loop LLVM vectorises
                            for j in range(cnt):
                                row[d0 + j] += wv * src[s0 + j]
                        else:
                            for j in range(cnt):
                                row[d0 + j] += wv * src[s0 + j * sw]
                if relu:
                    for ow in range(ow_):
                        v = row[ow]
                        row[ow] = v if not v < 0 else 0.0


@njit(**_JIT)
def max_pool2d(x, y, kh_, kw_, sh, sw, dh, dw, ph, pw):
    """MaxPool of x (N, C, H, W) into y (N, C, OH, OW) in the "taps" order (each output row
    takes one kernel tap at a time along its width: independent lanes, no chain through a
    running max); padding never wins. A NaN is skipped, as onnxruntime's pool (``if (x > y)
    y = x``) skips it (ONNX leaves NaN open)."""
    n_, c_, h_, w_ = x.shape
    oh_, ow_ = y.shape[2], y.shape[3]
    ninf = -np.inf   # (never derived from y's bytes: validation mode poisons them with NaN)
    for n in range(n_):
        for c in range(c_):
            for oh in range(oh_):
                row = y[n, c, oh]
                for ow in range(ow_):
                    row[ow] = ninf
                for kh in range(kh_):
                    ih = oh * sh - ph + kh * dh
                    if ih < 0 or ih >= h_:
                        continue
                    src = x[n, c, ih]
                    for kw in range(kw_):
                        d0, s0, cnt = _tap_span(kw * dw - pw, sw, w_, ow_)
                        if sw == 1:
                            for j in range(cnt):
                                v = src[s0 + j]
                                row[d0 + j] = v if v > row[d0 + j] else row[d0 + j]
                        else:
                            for j in range(cnt):
                                v = src[s0 + j * sw]
                                row[d0 + j] = v if v > row[d0 + j] else row[d0 + j]


@njit(inline="always", **_JIT)
def _sigmoid(v):
    return 1 / (1 + math.exp(-v))


@njit(**_JIT)
def lstm_cell(g, xw, c, h, y, mask, has_mask):
    """One LSTM step of every direction and batch entry after ``g = h @ R^T`` (dirs, batch,
    4H; gates i, o, f, c): adds ``xw`` (the input projection and biases of this step),
    applies sigmoid / tanh / tanh (LSTM's defaults), updates ``c`` and ``h`` (dirs, batch, H)
    in place and writes ``y`` (this step of Y, or an empty array). Where ``mask`` (dirs,
    batch) is False the state is kept and y stays 0 (past the sequence's end)."""
    dirs, batch, gh = g.shape
    hidden = gh // 4
    write_y = y.size > 0
    for d in range(dirs):
        for b in range(batch):
            if has_mask and not mask[d, b]:
                continue
            for k in range(hidden):
                i = _sigmoid(g[d, b, k] + xw[d, b, k])
                o = _sigmoid(g[d, b, hidden + k] + xw[d, b, hidden + k])
                f = _sigmoid(g[d, b, 2 * hidden + k] + xw[d, b, 2 * hidden + k])
                cc = math.tanh(g[d, b, 3 * hidden + k] + xw[d, b, 3 * hidden + k])
                c_new = f * c[d, b, k] + i * cc
                h_new = o * math.tanh(c_new)
                c[d, b, k] = c_new
                h[d, b, k] = h_new
                if write_y:
                    y[d, b, k] = h_new
