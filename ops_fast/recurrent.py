"""The recurrent ops' whole time loops compiled: LSTM, GRU and RNN, one ``njit`` call per
node that runs every step of every direction, calling BLAS for the recurrent product.

Per node the kernel computes the input projection ``X @ W^T`` of all steps and directions
with one numpy matmul (into a planned scratch buffer), then calls the family's loop, which,
per direction and batch chunk (:class:`.common.ThreadedLoop`: ``prange`` over directions x
batch chunks, the parallel variant where ``SessionOptions.intra_op_num_threads`` > 1; each
task runs its own whole time loop, so the threads never wait for each other), per step:

* one BLAS product ``g = h @ R^T`` (two for GRU with ``linear_before_reset=0``: the z/r
  columns, then ``(r * h) @ Rh^T``), ``cblas_sgemm`` / ``cblas_dgemm`` called from the
  compiled code (:func:`blas_available` binds the BLAS numpy uses);
* one vectorised pass over the hidden units for the gates and the state update, writing
  ``Y`` in place (the output buffer itself when it is planned) at the step's time.

Float32 sigmoid and tanh are onnxruntime's MLAS rational approximations
(:func:`logistic`, :func:`tanh`; no transcendental call, so LLVM vectorises the pass:
~0.6 ns per element against ~12 ns for a scalar libm call); float64 keeps libm's ``exp`` /
``tanh``. GRU computes its reset gate and candidate as onnxruntime's GRU does
(:func:`gru_reset_sigmoid`, :func:`gru_tanh`). Constant W, R and B (initializers) are
transposed / summed once, at prepare.

``sequence_lens``: entry ``b`` runs its first ``len_b`` steps (a reverse direction its
times ``len_b - 1`` down to 0), its state carried past them and ``Y`` zero there, as in the
numpy kernel (``ops_builtin.rnn``). The numpy kernel runs instead (same ``prepare``) for
what the loops do not handle: ``clip``, activations other than the defaults, LSTM's
peepholes / ``input_forget``, ``layout=1``, float16 / bfloat16 (not in ``dtypes``), float64
above :data:`F64_COMPILED_MAX` cell elements per step, inputs whose shapes do not fit, and
a process where no BLAS with cblas ``?gemm`` symbols was found.

Source: ONNX operator spec, LSTM-22 / GRU-22 / RNN-22; onnxruntime's CPU kernels
(``onnxruntime/core/providers/cpu/rnn/deep_cpu_lstm.cc``, ``deep_cpu_gru.cc``, ``rnn.cc``,
``rnn_helpers.cc``) for the order of the additions and the activations.
"""
from __future__ import annotations

import ctypes
import math
import sys
from typing import NamedTuple

import llvmlite.binding as llvm
import numpy as np
from numba import njit, prange, types
from numba.extending import overload
from dynashape.records import OpLibrary
from dynashape.threads import intra_op_threads
from dynashape.ops_builtin import nn, rnn

from .common import F64, FLOATS, FMA_JIT, PRIORITY, threaded

lib = OpLibrary()
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
# numba's own np.dot needs scipy; instead the loops call cblas ?gemm of the BLAS numpy
# loaded (found through threadpoolctl, as dynashape.threads finds it to set its threads),
# declared as external symbols that LLVM resolves by name (so the loops stay in numba's
# on-disk cache; the symbols are registered before a loop is first called or loaded).
# The integer arguments are declared 64-bit: right for an ILP64 BLAS (numpy's
# scipy-openblas64), and for an LP64 one they travel in 64-bit registers / stack slots
# whose low half it reads. A tiny product through ctypes checks each candidate first.

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
#: (prefix, suffix) of the cblas symbols tried in each BLAS library, in this order
#: (``scipy_cblas_sgemm64_``: numpy's scipy-openblas64; ``cblas_sgemm64_``: an ILP64
#: OpenBLAS; ``cblas_sgemm``: an LP64 OpenBLAS / MKL)
CBLAS_NAMES = (("scipy_cblas_", "64_"), ("cblas_", "64_"), ("cblas_", ""))
_ROUTINES = ("sgemm", "dgemm", "sgemv", "dgemv")


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
_blas_found: list = []      # [bool, where] once looked up


def _routines_work(fns: dict) -> bool:
    """The four routines (through ctypes) compute a 3x5 @ 5x4 product and a 5x4
    transposed matrix-vector product right, in float32 and float64."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    rng = np.random.default_rng(0)
    for prefix, dtype, ctype in (("s", np.float32, ctypes.c_float), ("d", np.float64, ctypes.c_double)):
        gemm, gemv = fns[prefix + "gemm"], fns[prefix + "gemv"]
        gemm.restype = gemv.restype = None
        gemm.argtypes = [ctypes.c_int] * 3 + [i64] * 3 + [ctype, ptr, i64, ptr, i64, ctype, ptr, i64]
        gemv.argtypes = [ctypes.c_int] * 2 + [i64] * 2 + [ctype, ptr, i64, ptr, i64, ctype, ptr, i64]
        a, b = rng.standard_normal((3, 5)).astype(dtype), rng.standard_normal((5, 4)).astype(dtype)
        c, v = np.full((3, 4), np.nan, dtype), np.full(4, np.nan, dtype)
        gemm(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, 3, 4, 5, 1.0, a.ctypes.data, 5, b.ctypes.data, 4, 0.0, c.ctypes.data, 4)
        gemv(_ROW_MAJOR, _TRANS, 5, 4, 1.0, b.ctypes.data, 4, a.ctypes.data, 1, 0.0, v.ctypes.data, 1)
        if not (np.allclose(c, a @ b, rtol=1e-4, atol=1e-5) and np.allclose(v, a[0] @ b, rtol=1e-4, atol=1e-5)):
            return False
    return True


def _bind_blas() -> tuple:
    if sys.platform == "darwin":   # (Apple's arm64 ABI packs 32-bit stack arguments)
        return False, "not on macOS"
    try:
        from threadpoolctl import threadpool_info
        libs = [i["filepath"] for i in threadpool_info() if i.get("user_api") == "blas"]
    except Exception as exc:  # noqa: BLE001 - then the numpy kernel runs
        return False, f"threadpoolctl: {exc}"
    for path in libs:
        try:
            handle = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in CBLAS_NAMES:
            fns = {r: getattr(handle, f"{prefix}{r}{suffix}", None) for r in _ROUTINES}
            if None in fns.values() or not _routines_work(fns):
                continue
            for r, fn in fns.items():
                llvm.add_symbol(_symbol(r), ctypes.cast(fn, ctypes.c_void_p).value)
            return True, f"{prefix}?gemm{suffix} / {prefix}?gemv{suffix} of {path}"
    return False, "no BLAS library with cblas ?gemm / ?gemv symbols among those loaded"


def blas_available() -> bool:
    """Whether the loops can run: cblas ``?gemm`` / ``?gemv`` found in a loaded BLAS (the
    one numpy uses) and bound for the compiled code; looked up once, at import
    (:func:`blas_source` says which). Without it the loops must not be called (their
    external symbols would not resolve) and the kernels run the numpy one."""
    if not _blas_found:
        _blas_found.extend(_bind_blas())
    return _blas_found[0]


def blas_source() -> str:
    """Which symbols of which library the loops call, or why none."""
    blas_available()
    return _blas_found[1]


blas_available()   # at import (a few ms): the loops' symbols resolve from the start


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
                _SGEMV(_ROW_MAJOR, _TRANS, k, n, _ONE, b.ctypes.data, ldb, a.ctypes.data, 1, _ZERO, c.ctypes.data, 1)
            else:
                _SGEMM(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, _ONE, a.ctypes.data, lda, b.ctypes.data, ldb,
                       _ZERO, c.ctypes.data, ldc)
        return sgemm

    def dgemm(a, b, c, m, n, k, lda, ldb, ldc):
        if m == 1:
            _DGEMV(_ROW_MAJOR, _TRANS, k, n, 1.0, b.ctypes.data, ldb, a.ctypes.data, 1, 0.0, c.ctypes.data, 1)
        else:
            _DGEMM(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, k, 1.0, a.ctypes.data, lda, b.ctypes.data, ldb,
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


# ----------------------------------------------------------------------------------------
# the kernels
# ----------------------------------------------------------------------------------------

class _Constants(NamedTuple):
    """What the loops take of the weights, made once at prepare from constant inputs
    (initializers: read-only arrays, the same objects at every run), with the arrays they
    were made from (the kernel uses them only for those very arrays)."""
    W: object            # X's weights W, or None
    wt: object           # W^T (input, dirs * G*H) C-contiguous (BLAS's NN path: 2-3x the NT
                         # one's speed for a short sequence), or None
    R: object            # R and B (None: B absent), or None when not both constant
    B: object
    weights: tuple       # _weights(R, B) or ()


class _RecurrentPlan(NamedTuple):
    numpy: object        # rnn._Plan (the numpy kernel's)
    compiled: bool       # the loop handles this node (else the numpy kernel runs)
    rev: np.ndarray      # (dirs,) bool: the direction runs backwards
    consts: _Constants


_NO_CONSTANTS = _Constants(None, None, None, None, ())


def _names(ctx) -> list:
    return [rnn._name(a).lower() for a in (ctx.attr("activations") or [])]


def _loop_handles(ctx, plan) -> bool:
    """The loops' assumptions: default activations, no clip, LSTM without peepholes or
    input_forget, layout 0, a bound BLAS."""
    fam = plan.fam
    acts = _names(ctx)
    default = not acts or acts == [a.lower() for a in fam.default_acts] * plan.num_directions
    peepholes = fam.is_lstm and ctx.num_inputs > 7 and ctx.has_input(7)
    return (default and plan.clip is None and not plan.input_forget and not peepholes and plan.layout == 0
            and plan.cdt == np.dtype(ctx.dtype(0)) and blas_available())


def _weights(R, B, plan) -> tuple:
    """What the loops take of R and B: R^T per direction (dirs, H, G*H) C-contiguous (the
    BLAS product runs NN: OpenBLAS's NT path was several times slower for 6+ rows), the
    summed biases (dirs, G*H) and Rbh (dirs, H) (zeros unless linear_before_reset)."""
    hidden, nd = plan.hidden, plan.num_directions
    gh = plan.fam.gates * hidden
    rt = np.ascontiguousarray(R.transpose(0, 2, 1))
    rbh = np.zeros((nd, hidden), plan.cdt)
    if B is None:
        return rt, np.zeros((nd, gh), plan.cdt), rbh
    bias = B[:, :gh] + B[:, gh:]
    if plan.linear_before_reset:   # Rbh goes inside r * (h Rh^T + Rbh)
        bias[:, 2 * hidden:] = B[:, 2 * hidden:gh]
        rbh[:] = B[:, gh + 2 * hidden:]
    return rt, bias, rbh


def _read_only(a) -> bool:
    return a is not None and not a.flags.writeable


def _prepare(ctx) -> _RecurrentPlan:
    """The numpy kernel's plan, whether the loop runs, and (where W, R and B are constants,
    as initializers are) W^T, R^T and the biases made once instead of per run."""
    plan = rnn._prepare(ctx)
    compiled = _loop_handles(ctx, plan)
    consts = _NO_CONSTANTS
    if compiled:
        cdt, nd, gh = plan.cdt, plan.num_directions, plan.fam.gates * plan.hidden
        W, R, B = ctx.value(1), ctx.value(2), ctx.value(3) if ctx.has_input(3) else None
        wt = None
        if _read_only(W) and W.ndim == 3 and W.shape[:2] == (nd, gh):
            wt = np.ascontiguousarray(W.astype(cdt, copy=False).reshape(nd * gh, -1).T)
        if (_read_only(R) and R.shape == (nd, gh, plan.hidden)
                and (not ctx.has_input(3) or (_read_only(B) and B.shape == (nd, 2 * gh)))):
            weights = _weights(R.astype(cdt, copy=False), None if B is None else B.astype(cdt, copy=False), plan)
            consts = _Constants(W if wt is not None else None, wt, R, B, weights)
        elif wt is not None:
            consts = _Constants(W, wt, None, None, ())
    return _RecurrentPlan(plan, compiled, np.array(plan.reverse, np.bool_), consts)


def _scratch_spec(ctx) -> list:
    """The input projection X @ W^T of every step and direction, (seq * batch * dirs * G*H,)
    in the compute dtype, where the loop runs; none otherwise."""
    plan = rnn._prepare(ctx)
    if not _loop_handles(ctx, plan):
        return []
    x = ctx.shape(0)
    return [((x[0] * x[1] * (plan.num_directions * plan.fam.gates * plan.hidden),), plan.cdt)]


#: float64 cell elements per step (directions x batch x hidden) up to which the compiled
#: loop runs: its exp / tanh are scalar libm calls (~12 ns each, 5 per LSTM cell) where
#: numpy's float64 tanh is SIMD, so past ~1000 elements the numpy loop's ~20 calls per
#: step cost less (measured, LSTM / GRU: hidden 64 x batch 1 1.8x / 2.3x faster compiled,
#: 64 x 8 x 2 directions 1.0x / 0.5x; float32 has no such limit)
F64_COMPILED_MAX = 512

_NO_LENS = np.empty(0, np.int64)
_NO_Y = {np.dtype(np.float32): np.empty((0, 0, 0, 0), np.float32), np.dtype(np.float64): np.empty((0, 0, 0, 0))}


def _buffer(outputs, k: int, shape: tuple, dtype) -> np.ndarray:
    """Planned output ``k`` where it can be written directly, else a new array."""
    out = outputs[k] if k < len(outputs) else None
    if out is not None and out.shape == shape and out.dtype == dtype and out.flags.c_contiguous:
        return out
    return np.empty(shape, dtype)


def _state(buf: np.ndarray, init) -> np.ndarray:
    if init is None:
        buf.fill(0)
    else:
        np.copyto(buf, init, casting="unsafe")
    return buf


def _shapes_fit(X, W, R, B, seq_lens, h0, c0, plan) -> bool:
    """The arrays have the shapes the loop indexes by (shape inference checks them where
    it knows the dims; the loop itself checks no bound)."""
    if X.ndim != 3:
        return False
    nd, hidden = plan.num_directions, plan.hidden
    gh, batch = plan.fam.gates * hidden, X.shape[1]
    return (W.shape == (nd, gh, X.shape[2]) and R.shape == (nd, gh, hidden)
            and (B is None or B.shape == (nd, 2 * gh)) and (seq_lens is None or seq_lens.size == batch)
            and all(s is None or s.shape == (nd, batch, hidden) for s in (h0, c0)))


def _numpy_kernel(inputs, outputs, plan):
    """The numpy kernel on the node's outputs (without this kernel's scratch buffer)."""
    return rnn._rnn_compute(inputs, outputs[:len(plan.wanted)], plan)


def _compute(inputs, outputs, p: _RecurrentPlan):
    """LSTM / GRU / RNN: the compiled time loop, or the numpy kernel (see the module
    docstring). Inputs as the op lists them, None for absent ones; fills Y, Y_h (, Y_c)."""
    plan = p.numpy
    if not p.compiled:
        return _numpy_kernel(inputs, outputs, plan)
    fam, cdt, nd, hidden = plan.fam, plan.cdt, plan.num_directions, plan.hidden
    gh = fam.gates * hidden
    n_out = len(plan.wanted)
    wanted = plan.wanted + (False,) * (fam.n_outputs - n_out)

    def opt(i):
        return inputs[i] if i < len(inputs) else None

    X, W, R, B = inputs[0], inputs[1], inputs[2], opt(3)
    if not _shapes_fit(X, W, R, B, opt(4), opt(5), opt(6) if fam.is_lstm else None, plan):
        return _numpy_kernel(inputs, outputs, plan)
    seq, batch, inp = X.shape
    if cdt == F64 and nd * batch * hidden > F64_COMPILED_MAX:
        return _numpy_kernel(inputs, outputs, plan)
    xw = nn._scratch(outputs, n_out, seq * batch * nd * gh, cdt).reshape(seq * batch, nd * gh)
    consts = p.consts
    np.matmul(X.reshape(seq * batch, inp), consts.wt if consts.W is W else W.reshape(nd * gh, inp).T, out=xw)
    xw = xw.reshape(seq, batch, nd, gh)
    rt, bias, rbh = consts.weights if consts.weights and consts.R is R and consts.B is B else _weights(R, B, plan)
    seq_lens = opt(4)
    lens = _NO_LENS if seq_lens is None else np.clip(seq_lens.reshape(-1).astype(np.int64), 0, seq)
    rev = p.rev
    threads = intra_op_threads()
    chunks = 1 if threads <= 1 else max(1, min(batch, -(-threads // nd)))

    state = (nd, batch, hidden)
    y = _buffer(outputs, 0, (seq, nd, batch, hidden), cdt) if wanted[0] else _NO_Y[cdt]
    h = _state(_buffer(outputs, 1, state, cdt) if wanted[1] else np.empty(state, cdt), opt(5))
    c = None
    if fam.is_lstm:
        c = _state(_buffer(outputs, 2, state, cdt) if wanted[2] else np.empty(state, cdt), opt(6))
        lstm_loop.run(nd * chunks, xw, rt, bias, h, c, lens, rev, y, chunks)
    elif fam.op_type == "GRU":
        gru_loop.run(nd * chunks, xw, rt, bias, rbh, h, lens, rev, y, chunks, plan.linear_before_reset, cdt.type(1))
    else:
        rnn_loop.run(nd * chunks, xw, rt, bias, h, lens, rev, y, chunks)

    results = (y, h, c)
    missing = False
    for k in range(n_out):
        out = outputs[k] if k < len(outputs) else None
        if not wanted[k]:
            continue
        if out is None:
            missing = True
        elif out is not results[k]:
            np.copyto(out, results[k], casting="unsafe")
    if not missing:
        return None
    return [(outputs[k] if outputs[k] is not None else results[k]) if wanted[k] else None for k in range(n_out)]


for _op in ("LSTM", "GRU", "RNN"):
    lib.kernel(_op, dtypes=FLOATS, priority=PRIORITY, prepare=_prepare, scratch=_scratch_spec)(_compute)
