"""The column-panel GEMM as native code: ``c (M, N) = a (M, K) @ W`` for W packed as
``panels (NP, K, 16)`` (:func:`dynashape.ops_builtin.fast.onednn.gemm.PackedGemm` packs it where
oneDNN keeps a weight row-major: AVX2-only CPUs, whose float32 matmul in oneDNN is a jit
SGEMM that packs B again on every call, as a plain BLAS does).

The loops are LLVM IR (:mod:`.panels_ir`, register tiles of up to 6 x 16), compiled once
per machine and mapped into the process without LLVM (:mod:`.machine_code`): no numba, no
llvmlite loaded, ~85 MB less resident than the same loop through numba, and ~1 ms to load
from the cache instead of numba's ~0.85 s start. The first call of :func:`ready` loads (or
builds, ~2 s, in a child process) in a background thread, as :mod:`..tiering` starts numba;
until then the caller runs numpy over the panels. Threads (``intra_op_threads``): the row
groups and panels split over a team of the OpenMP runtime oneDNN runs on.
"""
from __future__ import annotations


import numpy as np

from dynashape.threads import intra_op_threads

from ..common import address as data_address
from .loader import NativeCode, supported

__all__ = ["WIDTH", "MAX_ROWS", "K_BLOCK", "M_BLOCK", "ROW_PANELS", "supported", "ready", "wait_until_ready",
           "panel_gemm"]

#: columns of a panel (two AVX vectors of float32)
WIDTH = 16
#: rows of the largest tile (2 x 6 accumulators, 2 panel vectors and a broadcast: 15 registers)
MAX_ROWS = 6
#: rows of a panel one pass over a block's row tiles reads (32 KiB, an L1's size; measured 0.93-1.0 of the
#: time with 256 rows, fewer stores of partial sums)
K_BLOCK = 512
#: rows of A in a block that every panel reads before the next block starts: A is read from
#: memory once per block, not once per panel (one thread on a Zen 3, 1024-1500 rows: 0.82-0.96
#: of the time of one block of all rows; 128 rows and fewer are one block, as before)
M_BLOCK = 192
#: panels one row (a decode step) reads at once: as many weight streams (bound by memory)
ROW_PANELS = 6
#: the native functions and their argument counts (every argument an int64)
FUNCTIONS = {"dyn_panels": 9, "dyn_row_panels": 6, "dyn_parallel": 1}
#: the i64 values ``dyn_parallel``'s argument points at
PARALLEL_ARGS = 12

_CODE = NativeCode("the native panel GEMM", f"{__package__}.panels_ir", FUNCTIONS, PARALLEL_ARGS, depends=(__file__,))
_LOADING = _CODE.loading


def ready() -> bool:
    """Whether :func:`panel_gemm` may be called now (the first call starts loading it)."""
    return _CODE.ready()


def wait_until_ready(timeout: float | None = None) -> bool:
    """Load the native code now if nothing has, and wait until it is; True when it is."""
    return _CODE.wait(timeout)


def panel_gemm(a: np.ndarray, panels: np.ndarray, c: np.ndarray, address: int = 0) -> None:
    """``c (M, N) = a (M, K) @ W`` (float32) for W packed as ``panels (NP, K, 16)`` (NP * 16 >=
    N, C-contiguous; ``address``: ``panels.ctypes.data`` where the caller keeps it); ``a``'s
    rows may be strided (its columns contiguous), ``c`` is C-contiguous. One row reads
    ROW_PANELS panels at a time; the last panel, where N is not a multiple of 16, goes
    through a scratch (M, 16) tile. Requires :func:`ready`."""
    m, k = a.shape
    n = c.shape[1]
    if k == 0 or m == 0:
        c[...] = 0.0
        return
    full = n // WIDTH
    lda, ldc = a.strides[0] // 4, c.strides[0] // 4
    pa, pp, pc = data_address(a), address or panels.ctypes.data, data_address(c)
    groups = (full // ROW_PANELS) if m == 1 else 0
    first = groups * ROW_PANELS
    threads = min(intra_op_threads(), full - first + groups)
    rows, tiles, team = _CODE.call["dyn_row_panels"], _CODE.call["dyn_panels"], _CODE.team
    if threads > 1 and team is not None:
        team([pa, lda, pp, k, pc, ldc, m, groups, first, full], threads)
    else:
        if groups:
            rows(pa, pp, k, pc, 0, groups)
        if full > first:
            tiles(pa, lda, pp, k, pc + first * WIDTH * 4, ldc, m, first, full)
    if full * WIDTH < n:             # the last, partial panel, through a scratch tile
        scratch = np.empty((m, WIDTH), np.float32)
        tiles(pa, lda, pp, k, scratch.ctypes.data, WIDTH, m, full, full + 1)
        c[:, full * WIDTH:] = scratch[:, :n - full * WIDTH]
