"""Intra-op threads during a run (``SessionOptions.intra_op_num_threads``): BLAS's, through
threadpoolctl, and the count kernels read with :func:`intra_op_threads`.

The BLAS thread count is process-wide: the first run that enters sets it, the last run
that leaves restores it, so overlapping runs of one session keep the limit throughout.
The kernels' count is per calling thread (a run holds it from ``enter`` to ``leave``):
a plugin's kernel that can split its work (the numba loops' ``prange``, oneDNN's OpenMP
threads) uses that many threads. Where the session sets no count (``intra_op_num_threads``
0, the default) it is :func:`default_threads`: every core, as onnxruntime uses by default,
unless ``OMP_NUM_THREADS`` says otherwise.
"""
from __future__ import annotations

import os
import threading
from functools import lru_cache

__all__ = ["BlasThreads", "intra_op_threads", "default_threads", "compiled_kernels_wait",
           "waiting_for_compiled_kernels"]

_run = threading.local()


@lru_cache(maxsize=None)
def default_threads() -> int:
    """The intra-op threads of a run whose session sets none: ``OMP_NUM_THREADS`` when it
    is a positive int (read once, as OpenMP runtimes read it), else the number of CPUs this
    process may run on (its affinity mask)."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) >= 1:
        return int(value)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):   # not Linux
        return max(1, os.cpu_count() or 1)


def intra_op_threads() -> int:
    """The threads a kernel may use in the run in progress on this thread: the session's
    ``intra_op_num_threads`` when it set one (>= 1), else :func:`default_threads`."""
    return _run.__dict__.get("threads") or _DEFAULT[0] or _DEFAULT.__setitem__(0, default_threads()) or _DEFAULT[0]


_DEFAULT = [0]   # default_threads(), once known (intra_op_threads runs in every compiled kernel call)


def compiled_kernels_wait() -> bool:
    """Whether the run in progress on this thread waits for compiled kernels that are not
    ready yet instead of taking their numpy path meanwhile (a session created with
    ``wait_for_compiled_kernels=True``; ``dynashape.ops_builtin.fast.tiering``)."""
    return _run.__dict__.get("wait", False)


class waiting_for_compiled_kernels:
    """Within the block, runs on this thread wait for the compiled kernels (re-entrant)."""

    __slots__ = ("_before",)

    def __enter__(self):
        self._before = _run.__dict__.get("wait", False)
        _run.wait = True
        return self

    def __exit__(self, *exc):
        _run.wait = self._before


_controllers: list = [-1, []]   # (len(sys.modules) when scanned, the BLAS controllers then)


def _blas_controllers() -> list:
    """threadpoolctl's controllers of the loaded BLAS libraries. Finding them walks every
    loaded shared library (~5-10 ms), so the list is kept until a module is imported (how a
    new BLAS, scipy's or torch's, arrives)."""
    import sys
    with _controllers_lock:
        if _controllers[0] != len(sys.modules):
            from threadpoolctl import ThreadpoolController
            libs = [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]
            _controllers[:] = [len(sys.modules), libs]
        return _controllers[1]


_controllers_lock = threading.Lock()


class BlasThreads:
    """``enter()`` / ``leave()`` around a run limit every loaded BLAS library to ``n`` threads.

    Args:
        n: threads per BLAS call (>= 1).
    """

    def __init__(self, n: int):
        self.n = n
        self._libs = _blas_controllers()
        self._lock = threading.Lock()
        self._inside = 0
        self._saved: list = []

    def enter(self) -> None:
        _run.threads = self.n
        with self._lock:
            if self._inside == 0:
                self._saved = [lib.get_num_threads() for lib in self._libs]
                for lib, prev in zip(self._libs, self._saved):
                    if prev != self.n:
                        lib.set_num_threads(self.n)
            self._inside += 1

    def leave(self) -> None:
        _run.threads = None
        with self._lock:
            self._inside -= 1
            if self._inside == 0:
                for lib, prev in zip(self._libs, self._saved):
                    if prev != self.n:
                        lib.set_num_threads(prev)
