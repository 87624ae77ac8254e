"""The one-row product of a decode step as native code: ``y (N,) = x (K,) @ W (+ bias)`` for
a weight oneDNN packed in a blocked layout, read as ``slabs (NB, Kp, 64)``
(:class:`dynashape.ops_builtin.fast.onednn.gemm.PackedGemm`'s single row).

A one-row product reads the whole weight once and does one multiply-add per element it
reads: it runs as fast as the weight streams in. The loop (:mod:`.gemv_ir`: eight register
accumulators per 64-column slab, one sequential read) measured on a Zen 4 (one thread,
``benchmarks/kernels.py``'s one-row classes): a SmolLM's 576 x 49152 LM head, out of the
caches, 32 GB/s against 16 for onnxruntime's MLAS and 13 for oneDNN's M = 1 brgemm on the
same packed copy (numba's eight-stream loop over the slabs: 19); gpt2's 768 x 3072 in the
caches 82 against 70 for oneDNN. Compiled once per machine and mapped without LLVM
(:mod:`.machine_code`): no numba in the process for it. The first call of :func:`ready`
(the GEMM kernel's prepack of a weight the loop can read) loads it (or builds it, ~2 s, in a
child process) in a background thread; until then the caller runs oneDNN's primitive.
Threads (``intra_op_threads``): the slabs split over a team of the OpenMP runtime oneDNN runs on.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from dynashape.threads import intra_op_threads

from ..common import address as data_address
from .loader import NativeCode, supported

__all__ = ["WIDTH", "supported", "ready", "wait_until_ready", "slab_gemv"]

#: columns of a slab (oneDNN's 64-column blocks)
WIDTH = 64
#: the native functions and their argument counts (every argument an int64)
FUNCTIONS = {"dyn_slab_gemv": 8, "dyn_parallel": 1}
#: the i64 values ``dyn_parallel``'s argument points at
PARALLEL_ARGS = 9

_CODE = NativeCode("the native one-row GEMM", f"{__package__}.gemv_ir", FUNCTIONS, PARALLEL_ARGS,
                   depends=(__file__,))
_LOADING = _CODE.loading


def ready() -> bool:
    """Whether :func:`slab_gemv` may be called now (the first call starts loading it)."""
    return _CODE.ready()


def wait_until_ready(timeout: float | None = None) -> bool:
    """Load the native code now if nothing has, and wait until it is; True when it is."""
    return _CODE.wait(timeout)


def slab_gemv(x: np.ndarray, slabs: np.ndarray, y: np.ndarray, bias: Optional[np.ndarray] = None,
              address: int = 0) -> None:
    """``y (N,) = x (K,) @ W + bias`` (float32; ``bias`` (N,) or None) for W packed as
    ``slabs (NB, Kp, 64)`` (Kp >= K, NB * 64 >= N, C-contiguous; ``address``:
    ``slabs.ctypes.data`` where the caller keeps it); ``x`` and ``y`` contiguous. A last,
    partial slab (N not a multiple of 64) goes through a scratch row. Requires :func:`ready`."""
    k, n = x.shape[0], y.shape[0]
    if k == 0:
        y[...] = 0.0 if bias is None else bias
        return
    kp = slabs.shape[1]
    full = n // WIDTH
    px, ps, py = data_address(x), address or slabs.ctypes.data, data_address(y)
    pb = 0 if bias is None else data_address(bias)
    gemv, team = _CODE.call["dyn_slab_gemv"], _CODE.team
    threads = min(intra_op_threads(), full)
    if threads > 1 and team is not None:
        team([px, ps, k, kp, py, pb, full], threads)
    elif full:
        gemv(px, ps, k, kp, py, pb, 0, full)
    if full * WIDTH < n:
        scratch = np.empty(WIDTH, np.float32)
        gemv(px, ps, k, kp, scratch.ctypes.data, 0, full, full + 1)
        tail = scratch[:n - full * WIDTH]
        y[full * WIDTH:] = tail if bias is None else tail + bias[full * WIDTH:]
