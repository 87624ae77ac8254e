"""BLAS threads during a run (``SessionOptions.intra_op_num_threads``), through threadpoolctl.

The BLAS thread count is process-wide: the first run that enters sets it, the last run
that leaves restores it, so overlapping runs of one session keep the limit throughout.
"""
from __future__ import annotations

import threading

__all__ = ["BlasThreads"]


class BlasThreads:
    """``enter()`` / ``leave()`` around a run limit every loaded BLAS library to ``n`` threads.

    Args:
        n: threads per BLAS call (>= 1).
    """

    def __init__(self, n: int):
        from threadpoolctl import ThreadpoolController

        self.n = n
        self._libs = [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]
        self._lock = threading.Lock()
        self._inside = 0
        self._saved: list = []

    def enter(self) -> None:
        with self._lock:
            if self._inside == 0:
                self._saved = [lib.get_num_threads() for lib in self._libs]
                for lib, prev in zip(self._libs, self._saved):
                    if prev != self.n:
                        lib.set_num_threads(self.n)
            self._inside += 1

    def leave(self) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0:
                for lib, prev in zip(self._libs, self._saved):
                    if prev != self.n:
                        lib.set_num_threads(prev)
