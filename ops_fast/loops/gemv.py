"""The loop of a one-row product against a weight in oneDNN's blocked layout (the kernel is
:class:`dynashape.ops_fast.onednn.gemm.PackedGemm`, for a decode step's M = 1).

The packed weight is read as ``slabs (NB, Kp, bn)``: column block ``nb`` holds columns
``nb * bn .. nb * bn + bn - 1`` of every row k at ``slabs[nb, k, :]`` (oneDNN's ``BA16a64b``
and the like, rows and columns zero-padded to Kp and NB * bn). A one-row product reads the
whole weight once and does one multiply-add per element it reads: it runs at the speed
memory streams it in. One sequential read of a block leaves the machine's memory
parallelism unused (oneDNN's brgemm at M = 1 and a one-stream loop both reach ~10 GB/s
here); reading :data:`STREAMS` parts of each block at once, each into its own accumulator
row, matches a plain-layout BLAS GEMV (~13 GB/s).
"""
from __future__ import annotations

import numpy as np
from numba import prange

from .common import FMA_JIT, threaded

#: parts of a block's rows read at once (each a sequential stream)
STREAMS = 8
#: fastmath "contract" and "reassoc": the column loop vectorises across the accumulators
GEMV_JIT = dict(FMA_JIT, fastmath={"contract", "reassoc"})


@threaded(GEMV_JIT)
def gemv_slabs(x, slabs, y):
    """``y (N,) = x (K,) @ W`` for W (K, N) packed as ``slabs (NB, Kp, bn)`` (Kp >= K,
    NB * bn >= N); the rows are summed in STREAMS interleaved parts, each in order, then the
    parts in order. Column blocks split over the threads."""
    nblocks, _, bn = slabs.shape
    k, n = x.shape[0], y.shape[0]
    part = (k + STREAMS - 1) // STREAMS
    for nb in prange(nblocks):
        acc = np.zeros((STREAMS, bn), np.float32)
        for r in range(part):
            for s in range(STREAMS):
                row = s * part + r
                if row < k:
                    xk = x[row]
                    for j in range(bn):
                        acc[s, j] += xk * slabs[nb, row, j]
        base = nb * bn
        for j in range(min(bn, n - base)):
            total = acc[0, j]
            for s in range(1, STREAMS):
                total += acc[s, j]
            y[base + j] = total
