"""ConvTranspose (2-D) as compiled loops: BLAS then a compiled col2im, or a direct loop
where the matrix product is too thin for BLAS; the numpy kernel for the rest.

ConvTranspose scatters each input pixel, times each kernel tap, into the output:
``Y[n, g*M/G + m, ih*sh + kh*dh - ph, iw*sw + kw*dw - pw] += X[n, g*C/G + c, ih, iw] *
W[g*C/G + c, m, kh, kw]``, then adds ``B`` (X (N, C, H, W), W (C, M/G, KH, KW), B (M,),
Y (N, M, OH, OW); ``ph``/``pw`` the begin pads, from ``pads``, ``auto_pad`` or
``output_shape`` as the numpy kernel resolves them, negative where ``output_shape`` asks
for more than the full output). The loops (:mod:`.loops.conv_transpose`) gather instead,
one output row at a time, from the kernel rows of its phase, each kernel column's taps
summed in a phase-split row, then interleaved into Y with the bias; every element of Y is
written (validation mode poisons it).

Three loops, picked in ``prepare`` by :func:`_mode` (thresholds measured, below):

* **gemm** (``loops.col2im2d``): ``cols = W^T @ X`` by BLAS, exactly as the numpy kernel
  (np.matmul ``(G, M/G*K, C/G) @ (N, G, C/G, H*W)`` -> (N, M, KH, KW, H, W)), then col2im
  in one compiled pass (each output row once: its taps summed, the bias added) instead of
  the numpy kernel's strided slice-add per tap, zero fill and bias pass.
* **tiled** (``loops.col2im2d_tiled``): the gemm path where each output element takes
  exactly one tap (kernel == stride along W with one kernel column per phase, and one
  kernel row per output row: the 2x2 stride 2 of ppocrv4_det's DB head and of U-Net
  decoders): each output row is its phase rows of the columns interleaved, no sum.
* **direct** (``loops.conv_transpose2d_direct``): no columns; per output row of a block of
  four output channels, four input channels per pass (16 multiply-adds per 4 loads). It
  runs at ~20-40 GFLOP/s where BLAS runs at ~100, so only where BLAS has little to do:
  C/G <= 2 (depthwise and grouped ones: G tiny GEMMs), C/G <= 8 with M/G >= 4, and a thin
  GEMM (M/G*KH*KW <= 4 rows, C/G <= 32: ppocrv4_det's last 24 -> 1 2x2 stride 2) once X
  is over 2 MiB (BLAS streams it slower than the direct loop; in the caches BLAS wins).
* The numpy kernel (``ops_builtin.nn._conv_transpose``) for the rest: 1-D / 3-D, float16
  and the other dtypes (the KernelDef takes float32/float64 only), mixed dtypes, a
  non-contiguous X or W, an empty X, symbolic SAME pads (never at run time).

Measured (2-core Xeon, one thread, median CPU time of 7 interleaved rounds, the machine
shared and noisy: +-20%; ``ms numpy / compiled / onnxruntime``): ppocrv4_det's
(1,24,80,80)x(24,24,2,2) s2 2.66 / 0.88 / 0.84 (tiled), (1,24,160,160)x(24,1,2,2)
0.45 / 0.42 / 0.31 (direct), (2,24,320,320)x(24,1,2,2) 4.8 / 3.5 / 3.0; decoder
(1,64,64,64)x(64,32,4,4) s2 p1 8.9 / 5.0 / 4.7 (gemm); depthwise (1,32,64,64)x(32,1,4,4)
s2 p1 11.2 / 1.4 / 2.2 (direct). The compiled kernel is never slower than the numpy one
at these shapes (the gemm path does the numpy kernel's matmul and less after it; the
direct loop runs only where it measured faster than the gemm path), within ~1.05-1.5x of
onnxruntime's (2x on tiny ones, where a run's fixed cost dominates), faster on depthwise.
Benchmarks on this machine are noisy (it is shared): repeat them.

Summation order: the direct loop sums each output element's terms kernel row by kernel
row, channels in order, in fused multiply-adds; the gemm paths as BLAS sums them. Both
differ from the numpy kernel and onnxruntime in the last bits only.

Threads: each loop is a :class:`.loops.threaded.ThreadedLoop`: ``prange`` over (n, output
channel or block of 4, band of output rows) jobs, the bands only as short as it takes to
give each thread a few jobs (:func:`_rows_per_job`), so each output element is summed by
one job in the serial order: the results do not depend on the thread count (BLAS, given
the session's threads too, may differ in the last bits). The planned buffers are the
numpy kernel's (its ``prepare``; no scratch there or here); the gemm paths' columns come
from np.matmul, as there.

Source: ONNX operator spec (Operators.md), ConvTranspose-1/11/22 (strides, dilations,
pads, output_padding, output_shape, auto_pad, group, B).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from dynashape.records import OpLibrary
from dynashape.ops_builtin import nn
from dynashape.threads import intra_op_threads

from .common import EMPTY, FLOATS, PRIORITY, contiguous, lazy_import
from .tiering import compiled_ready

lib = OpLibrary()
#: the loops (:mod:`.loops.conv_transpose`), imported by the first call of one
loops = lazy_import(".loops.conv_transpose", __package__)

#: the direct loop for up to this many input channels per group (the GEMM's depth) ...
DIRECT_MAX_CG = 8
#: ... with at least this many output channels per group (a full block of the loop), or
#: any number of them with up to DIRECT_ANY_MAX_CG input channels (depthwise and the like)
DIRECT_MIN_MG = 4
DIRECT_ANY_MAX_CG = 2
#: and for a thin GEMM (M/G * KH * KW <= THIN_ROWS: e.g. a 1-channel 2x2 output) of up to
#: THIN_MAX_CG input channels once X (all of it, bytes) outgrows the caches: BLAS then
#: streams it slower than the direct loop
THIN_ROWS = 4
THIN_MAX_CG = 32
THIN_MIN_X_BYTES = 2 << 20
#: jobs per thread in a parallel run (bands of output rows share the threads' load)
_JOBS_PER_THREAD = 4


class _ConvTPlan(NamedTuple):
    numpy: object            # the numpy kernel's plan (nn._ConvTPlan)
    mode: str                # "direct", "gemm", "tiled" (gemm, one tap per output), "" (numpy)
    geom: tuple              # (sh, sw, dh, dw, ph, pw)
    group: int
    cols_shape: tuple        # the gemm path's columns (N, M, KH, KW, H, W)
    phases: object = None    # "tiled": int64 (sw, 2), see col2im2d_tiled


def _mode(cg: int, mg: int, k: int, x_bytes: int) -> str:
    """Which loop a 2-D ConvTranspose with groups of ``cg`` input and ``mg`` output
    channels, ``k`` kernel taps and an X of ``x_bytes`` runs: "direct" or "gemm" (measured
    on float32 and float64, benchmarks in the module docstring)."""
    if cg <= DIRECT_ANY_MAX_CG or (cg <= DIRECT_MAX_CG and mg >= DIRECT_MIN_MG):
        return "direct"
    if mg * k <= THIN_ROWS and cg <= THIN_MAX_CG and x_bytes >= THIN_MIN_X_BYTES:
        return "direct"
    return "gemm"


def _conv_transpose_prepare(ctx) -> _ConvTPlan:
    numpy_plan = nn._conv_transpose_prepare(ctx)
    x, w = ctx.shape(0), ctx.shape(1)
    group = int(ctx.attr("group", 1))
    if len(x) != 4:
        return _ConvTPlan(numpy_plan, "", (), group, ())
    kernel, strides, dilations, begin, out = nn._conv_transpose_geometry(ctx, x, w)
    if begin is None:
        return _ConvTPlan(numpy_plan, "", (), group, ())
    geom = tuple(int(v) for v in (*strides, *dilations, *begin))
    x_bytes = int(np.prod(x)) * np.dtype(ctx.dtype(0)).itemsize
    mode = _mode(int(x[1]) // group, int(w[1]), int(kernel[0]) * int(kernel[1]), x_bytes)
    cols_shape = (int(x[0]), int(w[1]) * group) + tuple(int(k) for k in kernel) + tuple(int(d) for d in x[2:])
    phases = None
    sw, dw, pw = geom[1], geom[3], geom[5]
    if mode == "gemm" and numpy_plan.tiling and int(kernel[1]) == sw \
            and len({(kw * dw - pw) % sw for kw in range(sw)}) == sw:   # (one kernel column per phase)
        mode, phases = "tiled", _phases(sw, sw, dw, pw)
    return _ConvTPlan(numpy_plan, mode, geom, group, cols_shape, phases)


def _phases(kw_: int, sw: int, dw: int, pw: int) -> np.ndarray:
    """Of a tiling ConvTranspose (each output column takes one kernel column tap): per
    output column phase ``p < sw`` the kernel column ``kw`` landing there and the shift
    ``d``: output column ``p + q*sw`` reads input column ``q + d``."""
    phases = np.zeros((sw, 2), np.int64)
    for kw in range(kw_):
        off = kw * dw - pw
        phases[off % sw] = (kw, -(off // sw))
    return phases


def _rows_per_job(planes: int, rows: int) -> int:
    """Output rows per job: all of a plane's serially; in a parallel run, bands small enough
    for ``_JOBS_PER_THREAD`` jobs per thread over ``planes`` (n, channel block) planes."""
    threads = intra_op_threads()
    if threads <= 1 or planes >= _JOBS_PER_THREAD * threads:
        return max(rows, 1)
    bands = -(-_JOBS_PER_THREAD * threads // max(planes, 1))
    return max(1, -(-rows // bands))


@lib.kernel("ConvTranspose", dtypes=FLOATS, priority=PRIORITY, prepare=_conv_transpose_prepare)
def _conv_transpose(inputs, outputs, p: _ConvTPlan):
    """ConvTranspose: the direct loop or BLAS + col2im (see the module docstring); the numpy
    kernel where neither applies."""
    x, w, y = inputs[0], inputs[1], outputs[0]
    bias = inputs[2] if len(inputs) > 2 else None
    if not (p.mode and x.dtype == w.dtype == y.dtype and (bias is None or bias.dtype == y.dtype)
            and contiguous(x, w, y) and x.size and compiled_ready()):
        nn._conv_transpose(inputs, outputs, p.numpy)
        return
    if not y.size:
        return
    b = EMPTY[y.dtype] if bias is None else np.ascontiguousarray(bias)
    if p.mode == "direct":
        planes = y.shape[0] * p.group * -(-w.shape[1] // 4)
        rows = _rows_per_job(planes, y.shape[2])
        loops.conv_transpose2d_direct(x, w, b, y, p.group, *p.geom, bias is not None, rows)
        return
    q = p.numpy
    cols = np.matmul(w.reshape(q.w_shape).transpose(0, 2, 1), x.reshape(q.x_shape)).reshape(p.cols_shape)
    rows = _rows_per_job(y.shape[0] * y.shape[1], y.shape[2])
    if p.mode == "tiled":
        sh, _, dh, _, ph, _ = p.geom
        loops.col2im2d_tiled(cols, b, y, sh, dh, ph, p.phases, bias is not None, rows)
    else:
        loops.col2im2d(cols, b, y, *p.geom, bias is not None, rows)
