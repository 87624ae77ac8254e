"""The recurrent ops' compiled time loops: LSTM, GRU and RNN, one call per node running
every step of every direction (:func:`lstm_loop`, :func:`gru_loop`, :func:`rnn_loop`,
``prange`` over directions x batch chunks, :class:`.threaded.ThreadedLoop`), the recurrent
product per step through cblas (:func:`_gemm`), the gates in one vectorised pass with
MLAS's float32 sigmoid / tanh (:func:`logistic`, :func:`tanh`, :func:`gru_reset_sigmoid`,
:func:`gru_tanh`). The kernels, and what they hand over to the numpy one, are
:mod:`dynashape.ops_builtin.fast.recurrent`.

The cblas routines (:mod:`dynashape.ops_builtin.fast.blas`) are bound to the symbols the loops call
at this module's import, before any loop is compiled or loaded from numba's cache. Where no
BLAS has them, nothing is bound and the loops must not be called (the kernels check
``recurrent.blas_available()``).

Source: onnxruntime's CPU kernels (``onnxruntime/core/providers/cpu/rnn/deep_cpu_lstm.cc``,
``deep_cpu_gru.cc``, ``rnn.cc``, ``rnn_helpers.cc``) for the order of the additions and the
activations; ``onnxruntime/core/mlas/lib/logistic.cpp`` and ``tanh.cpp`` for the
approximations.
"""
from __future__ import annotations

import math

import llvmlite.binding as llvm
import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from .. import blas
from ..blas import NO_TRANS, ROW_MAJOR, TRANS
from .common import FMA_JIT
from .threaded import threaded

#: the overloads' compile options: no on-disk cache of their own (the loops that call them are cached)
_OVERLOAD_JIT = {k: v for k, v in FMA_JIT.items() if k != "cache"}


# ----------------------------------------------------------------------------------------
# sigmoid and tanh without transcendental calls
# ----------------------------------------------------------------------------------------
# onnxruntime's MLAS (onnxruntime/core/mlas/lib/logistic.cpp, MlasLogisticKernel, and
# tanh.cpp, MlasTanhKernel; the coefficients are Eigen's): clamp the input, then a ratio of
# an odd and an even polynomial in x^2, Horner's scheme (a fused multiply-add per term on
# FMA hardware, as here with FMA_JIT). Measured over a dense grid of float32 inputs in
# [-30, 30] (tests/plugins/test_fast_recurrent.py), max |error| vs the exact functions:
# logistic 1.7e-7, tanh 3.2e-7, GRU's reset sigmoid 3.0e-7 and candidate tanh 6.0e-7 (3.2e-7
# within [-9, 9]; past 9 onnxruntime's GRU evaluates the ratio beyond MLAS's bound). tanh is
# bit-identical to onnxruntime's Tanh op, logistic within one float32 ulp of its Sigmoid op.

_F = np.float32
_ZERO, _HALF, _ONE = _F(0.0), _F(0.5), _F(1.0)

# MlasLogisticConstants: LowerRange / UpperRange, alpha_9 .. alpha_1, beta_10 .. beta_0
_LOGISTIC_BOUND = _F(18.0)
_LA9, _LA7, _LA5, _LA3, _LA1 = (_F(4.37031012579801e-11), _F(1.15627324459942e-07), _F(6.08574864600143e-05),
                                _F(8.51377133304701e-03), _F(2.48287947061529e-01))
_LB10, _LB8, _LB6, _LB4, _LB2, _LB0 = (_F(6.10247389755681e-13), _F(5.76102136993427e-09),
                                       _F(6.29106785017040e-06), _F(1.70198817374094e-03),
                                       _F(1.16817656904453e-01), _F(9.93151921023180e-01))
# MlasTanhConstants: alpha_13 .. alpha_1, beta_6 .. beta_0 (the same in rnn_helpers.cc's
# deepcpu namespace, which bounds at 10 where MLAS bounds at 9)
_TANH_BOUND, _GRU_TANH_BOUND, _GRU_SIGMOID_BOUND = _F(9.0), _F(10.0), _F(20.0)
_TA13, _TA11, _TA9, _TA7 = (_F(-2.76076847742355e-16), _F(2.00018790482477e-13), _F(-8.60467152213735e-11),
                            _F(5.12229709037114e-08))
_TA5, _TA3, _TA1 = _F(1.48572235717979e-05), _F(6.37261928875436e-04), _F(4.89352455891786e-03)
_TB6, _TB4, _TB2, _TB0 = (_F(1.19825839466702e-06), _F(1.18534705686654e-04), _F(2.26843463243900e-03),
                          _F(4.89352518554385e-03))


@njit(inline="always", **FMA_JIT)
def _clamp32(x, bound):
    """x in [-bound, bound]; NaN passes (both comparisons false), as in MLAS's scalar tail."""
    v = -bound if x < -bound else x
    return bound if v > bound else v


@njit(inline="always", **FMA_JIT)
def _logistic32(x):
    """MLAS's logistic of a float32: clamp to +-18, ``p(x) / q(x) + 0.5`` (p odd of degree 9,
    q even of degree 10), clamped to [0, 1]."""
    v = _clamp32(x, _LOGISTIC_BOUND)
    v2 = v * v
    p = ((((_LA9 * v2 + _LA7) * v2 + _LA5) * v2 + _LA3) * v2 + _LA1) * v
    q = ((((_LB10 * v2 + _LB8) * v2 + _LB6) * v2 + _LB4) * v2 + _LB2) * v2 + _LB0
    r = p / q + _HALF
    r = _ZERO if r < _ZERO else r
    return _ONE if r > _ONE else r


@njit(inline="always", **FMA_JIT)
def _tanh_ratio32(v):
    """The tanh ratio ``p(v) / q(v)`` (p odd of degree 13, q even of degree 6) of a clamped
    float32."""
    v2 = v * v
    p = ((((((_TA13 * v2 + _TA11) * v2 + _TA9) * v2 + _TA7) * v2 + _TA5) * v2 + _TA3) * v2 + _TA1) * v
    q = ((_TB6 * v2 + _TB4) * v2 + _TB2) * v2 + _TB0
    return p / q


def _is_f32(x) -> bool:
    return isinstance(x, types.Float) and x.bitwidth == 32


def logistic(x):
    """Sigmoid ``1 / (1 + exp(-x))`` of a scalar; in compiled code (the overload below) a
    float32 gets MLAS's approximation (:func:`_logistic32`), a float64 libm's exp."""
    return 1.0 / (1.0 + math.exp(-x))


def tanh(x):
    """tanh of a scalar; in compiled code a float32 gets MLAS's approximation (clamp to
    +-9, :func:`_tanh_ratio32`), a float64 libm's tanh."""
    return math.tanh(x)


def gru_reset_sigmoid(x):
    """The sigmoid of onnxruntime's GRU reset gate (``gru_reset_gate_sigmoid``,
    rnn_helpers.cc): a float32 is clamped to +-20, then ``0.5 * (1 + tanh_ratio(x / 2))``;
    a float64 is :func:`logistic`."""
    return logistic(x)


def gru_tanh(x):
    """The tanh of onnxruntime's GRU candidate state (``gru_output_gate_tanh``): the MLAS
    ratio of a float32 clamped to +-10; a float64 libm's tanh."""
    return math.tanh(x)


@overload(logistic, jit_options=_OVERLOAD_JIT)
def _logistic_overload(x):
    if _is_f32(x):
        return lambda x: _logistic32(x)
    return lambda x: 1.0 / (1.0 + math.exp(-x))


@overload(tanh, jit_options=_OVERLOAD_JIT)
def _tanh_overload(x):
    if _is_f32(x):
        return lambda x: _tanh_ratio32(_clamp32(x, _TANH_BOUND))
    return lambda x: math.tanh(x)


@overload(gru_reset_sigmoid, jit_options=_OVERLOAD_JIT)
def _gru_reset_sigmoid_overload(x):
    if _is_f32(x):
        return lambda x: _HALF * (_ONE + _tanh_ratio32(_HALF * _clamp32(x, _GRU_SIGMOID_BOUND)))
    return lambda x: 1.0 / (1.0 + math.exp(-x))


@overload(gru_tanh, jit_options=_OVERLOAD_JIT)
def _gru_tanh_overload(x):
    if _is_f32(x):
        return lambda x: _tanh_ratio32(_clamp32(x, _GRU_TANH_BOUND))
    return lambda x: math.tanh(x)


@njit(**FMA_JIT)
def apply_activation(x, out, which):
    """``out[i] = f(x[i])`` over 1-D arrays, f the compiled activation ``which`` (0
    logistic, 1 tanh, 2 gru_reset_sigmoid, 3 gru_tanh): what the tests measure the
    approximations with."""
    for i in range(x.shape[0]):
        v = x[i]
        if which == 0:
            out[i] = logistic(v)
        elif which == 1:
            out[i] = tanh(v)
        elif which == 2:
            out[i] = gru_reset_sigmoid(v)
        else:
            out[i] = gru_tanh(v)


# ----------------------------------------------------------------------------------------
# BLAS from compiled code
# ----------------------------------------------------------------------------------------
# cblas ?gemm / ?gemv of the BLAS numpy loaded (dynashape.ops_builtin.fast.blas finds and checks
# them), declared as external symbols that LLVM resolves by name, so the loops stay
# in numba's on-disk cache; the integer arguments 64-bit (see there).

def _gemm_type(f):
    i32, i64, ptr = types.int32, types.int64, types.intp
    return types.void(i32, i32, i32, i64, i64, i64, f, ptr, i64, ptr, i64, f, ptr, i64)


def _gemv_type(f):
    i32, i64, ptr = types.int32, types.int64, types.intp
    return types.void(i32, i32, i64, i64, f, ptr, i64, ptr, i64, f, ptr, i64)


def _symbol(routine: str) -> str:
    return f"dynashape_rnn_cblas_{routine}"


_SGEMM = types.ExternalFunction(_symbol("sgemm"), _gemm_type(types.float32))
_DGEMM = types.ExternalFunction(_symbol("dgemm"), _gemm_type(types.float64))
_SGEMV = types.ExternalFunction(_symbol("sgemv"), _gemv_type(types.float32))
_DGEMV = types.ExternalFunction(_symbol("dgemv"), _gemv_type(types.float64))


def _bind() -> None:
    """The routines' addresses under the symbols the loops call (none where no BLAS has
    them): at import, so before any loop is compiled or loaded from the cache."""
    for routine, address in (blas.routines() or {}).items():
        llvm.add_symbol(_symbol(routine), address)


_bind()


def _gemm(a, b, c, m, n, k, lda, ldb, ldc):
    """``C = A @ B`` (row-major; A m x k with row stride ``lda``, B k x n with ``ldb``, C
    m x n with ``ldc``, each given as the array view that starts at its first element,
    float32 or float64), in compiled code only (the overload below): cblas ?gemm, or ?gemv
    for one row (``C = B^T a``: less call overhead, e.g. 0.8 against 1.2 us for 64 x 256)."""
    raise NotImplementedError("compiled code only")


@overload(_gemm, inline="always", jit_options=_OVERLOAD_JIT)
def _gemm_overload(a, b, c, m, n, k, lda, ldb, ldc):
    if a.dtype == types.float32:
        def sgemm(a, b, c, m, n, k, lda, ldb, ldc):
            if m == 1:
                _SGEMV(ROW_MAJOR, TRANS, k, n, _ONE, b.ctypes.data, ldb, a.ctypes.data, 1, _ZERO, c.ctypes.data, 1)
            else:
                _SGEMM(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, _ONE, a.ctypes.data, lda, b.ctypes.data, ldb,
                       _ZERO, c.ctypes.data, ldc)
        return sgemm

    def dgemm(a, b, c, m, n, k, lda, ldb, ldc):
        if m == 1:
            _DGEMV(ROW_MAJOR, TRANS, k, n, 1.0, b.ctypes.data, ldb, a.ctypes.data, 1, 0.0, c.ctypes.data, 1)
        else:
            _DGEMM(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, 1.0, a.ctypes.data, lda, b.ctypes.data, ldb,
                   0.0, c.ctypes.data, ldc)
    return dgemm


# ----------------------------------------------------------------------------------------
# the time loops
# ----------------------------------------------------------------------------------------
# Shared arguments (C-contiguous, all of the compute dtype unless said):
#   xw    (seq, batch, dirs, G*H)  X @ W^T of every time and direction (no bias)
#   rt    (dirs, H, G*H)           R^T per direction
#   bias  (dirs, G*H)              Wb + Rb (GRU linear_before_reset: Wb alone for h)
#   h     (dirs, batch, H)         initial hidden state in, final one out (c likewise)
#   lens  (batch,) int64           steps of each batch entry, in [0, seq]; or empty: all seq
#   rev   (dirs,) bool             the direction runs backwards in time
#   y     (seq, dirs, batch, H)    Y, written at each step's time (zero past lens); or an
#                                  empty (0, 0, 0, 0) array when the node has no Y
#   chunks                         batch chunks per direction: the prange tasks are
#                                  directions x chunks, each a whole time loop

@njit(inline="always", **FMA_JIT)
def _task_rows(task, chunks, batch):
    """Direction and batch rows [b0, b1) of prange task ``task``."""
    d = task // chunks
    per = (batch + chunks - 1) // chunks
    b0 = min((task % chunks) * per, batch)
    return d, b0, min(b0 + per, batch)


@njit(inline="always", **FMA_JIT)
def _steps(lens, b, seq):
    """The steps of batch entry ``b``: ``lens[b]``, or ``seq`` when ``lens`` is empty."""
    return lens[b] if lens.shape[0] > 0 else seq


@njit(inline="always", **FMA_JIT)
def _zero_past_lens(y, d, b0, b1, lens):
    """Y is zero at the times past each entry's sequence (the buffer may hold anything)."""
    if y.shape[0] > 0 and lens.shape[0] > 0:
        for b in range(b0, b1):
            for t in range(lens[b], y.shape[0]):
                y[t, d, b, :] = 0


@njit(**FMA_JIT)
def _lstm_rows(xw, rt, bias, h, c, lens, rev, y, d, b0, b1):
    """One direction ``d``'s time loop for batch rows [b0, b1): ``rt`` (H, 4H), ``bias``
    (4H,), ``h`` / ``c`` (batch, H) are that direction's. Gates i, o, f, c as ONNX orders
    them; ``c' = f * c + i * tanh(.)``, ``h' = o * tanh(c')`` with sigmoid / tanh / tanh."""
    seq = xw.shape[0]
    hidden, gh = rt.shape
    rows = b1 - b0
    g = np.empty((rows, gh), xw.dtype)
    hs = h[b0:b1]
    for s in range(seq):
        _gemm(hs, rt, g, rows, gh, hidden, hidden, gh, gh)
        for r in range(rows):
            b = b0 + r
            n = _steps(lens, b, seq)
            if s < n:
                t = n - 1 - s if rev else s
                gr, x, cb, hb = g[r], xw[t, b, d], c[b], h[b]
                for k in range(hidden):   # (g + x) + bias: onnxruntime's order of the additions
                    ig = logistic(gr[k] + x[k] + bias[k])
                    og = logistic(gr[hidden + k] + x[hidden + k] + bias[hidden + k])
                    fg = logistic(gr[2 * hidden + k] + x[2 * hidden + k] + bias[2 * hidden + k])
                    cg = tanh(gr[3 * hidden + k] + x[3 * hidden + k] + bias[3 * hidden + k])
                    cn = cb[k] * fg + ig * cg
                    cb[k] = cn
                    hb[k] = og * tanh(cn)
                if y.shape[0] > 0:
                    y[t, d, b, :] = hb
    _zero_past_lens(y, d, b0, b1, lens)


@threaded(FMA_JIT)
def lstm_loop(xw, rt, bias, h, c, lens, rev, y, chunks):
    """LSTM's time loop over every direction and batch entry (arguments: the comment above
    :func:`_task_rows`; ``c`` as ``h``); default activations, no clip or peepholes."""
    dirs, batch = h.shape[0], h.shape[1]
    for task in prange(dirs * chunks):
        d, b0, b1 = _task_rows(task, chunks, batch)
        if b0 < b1:
            _lstm_rows(xw, rt[d], bias[d], h[d], c[d], lens, rev[d], y, d, b0, b1)


@njit(**FMA_JIT)
def _gru_rows(xw, rt, bias, rbh, h, lens, rev, y, d, b0, b1, lbr, one):
    """One direction's GRU time loop for rows [b0, b1) (gates z, r, h; ``rt`` (H, 3H),
    ``bias`` (3H,), ``rbh`` (H,): Rbh when ``lbr``). ``linear_before_reset`` 0: per step
    ``h @ Rzr^T``, then ``(r * h) @ Rh^T``; 1: one ``h @ R^T`` and ``r * (h Rh^T + Rbh)``.
    ``h' = (1 - z) * h~ + z * h`` (``one``: 1 in the compute dtype)."""
    seq = xw.shape[0]
    hidden, gh = rt.shape
    rows = b1 - b0
    g = np.empty((rows, gh), xw.dtype)
    rh = np.empty((rows, hidden), xw.dtype)
    hs = h[b0:b1]
    for s in range(seq):
        if lbr:
            _gemm(hs, rt, g, rows, gh, hidden, hidden, gh, gh)
        else:
            _gemm(hs, rt, g, rows, 2 * hidden, hidden, hidden, gh, gh)
            for r in range(rows):   # every row (a finished one's product is ignored)
                b = b0 + r
                n = _steps(lens, b, seq)
                t = (n - 1 - s if rev else s) if s < n else 0
                gr, x, hb, rr = g[r], xw[t, b, d], h[b], rh[r]
                for k in range(hidden):
                    rr[k] = gru_reset_sigmoid(gr[hidden + k] + x[hidden + k] + bias[hidden + k]) * hb[k]
            _gemm(rh, rt[0, 2 * hidden:], g[0, 2 * hidden:], rows, hidden, hidden, hidden, gh, gh)
        for r in range(rows):
            b = b0 + r
            n = _steps(lens, b, seq)
            if s < n:
                t = n - 1 - s if rev else s
                gr, x, hb = g[r], xw[t, b, d], h[b]
                for k in range(hidden):
                    z = logistic(gr[k] + x[k] + bias[k])
                    if lbr:
                        rg = gru_reset_sigmoid(gr[hidden + k] + x[hidden + k] + bias[hidden + k])
                        hh = gru_tanh(x[2 * hidden + k] + rg * (gr[2 * hidden + k] + rbh[k]) + bias[2 * hidden + k])
                    else:
                        hh = gru_tanh(gr[2 * hidden + k] + x[2 * hidden + k] + bias[2 * hidden + k])
                    hb[k] = (one - z) * hh + z * hb[k]
                if y.shape[0] > 0:
                    y[t, d, b, :] = hb
    _zero_past_lens(y, d, b0, b1, lens)


@threaded(FMA_JIT)
def gru_loop(xw, rt, bias, rbh, h, lens, rev, y, chunks, lbr, one):
    """GRU's time loop over every direction and batch entry (``rbh`` (dirs, H); ``lbr``:
    linear_before_reset; ``one``: 1 in the compute dtype); default activations, no clip."""
    dirs, batch = h.shape[0], h.shape[1]
    for task in prange(dirs * chunks):
        d, b0, b1 = _task_rows(task, chunks, batch)
        if b0 < b1:
            _gru_rows(xw, rt[d], bias[d], rbh[d], h[d], lens, rev[d], y, d, b0, b1, lbr, one)


@njit(**FMA_JIT)
def _rnn_rows(xw, rt, bias, h, lens, rev, y, d, b0, b1):
    """One direction's RNN time loop for rows [b0, b1): ``h' = tanh(h R^T + x W^T + b)``."""
    seq = xw.shape[0]
    hidden = rt.shape[0]
    rows = b1 - b0
    g = np.empty((rows, hidden), xw.dtype)
    hs = h[b0:b1]
    for s in range(seq):
        _gemm(hs, rt, g, rows, hidden, hidden, hidden, hidden, hidden)
        for r in range(rows):
            b = b0 + r
            n = _steps(lens, b, seq)
            if s < n:
                t = n - 1 - s if rev else s
                gr, x, hb = g[r], xw[t, b, d], h[b]
                for k in range(hidden):
                    hb[k] = tanh(gr[k] + x[k] + bias[k])
                if y.shape[0] > 0:
                    y[t, d, b, :] = hb
    _zero_past_lens(y, d, b0, b1, lens)


@threaded(FMA_JIT)
def rnn_loop(xw, rt, bias, h, lens, rev, y, chunks):
    """RNN's time loop over every direction and batch entry; Tanh, no clip."""
    dirs, batch = h.shape[0], h.shape[1]
    for task in prange(dirs * chunks):
        d, b0, b1 = _task_rows(task, chunks, batch)
        if b0 < b1:
            _rnn_rows(xw, rt[d], bias[d], h[d], lens, rev[d], y, d, b0, b1)
