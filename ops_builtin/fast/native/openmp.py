"""Run a native function on a team of the OpenMP runtime oneDNN runs on (libgomp's
``GOMP_parallel``): the same worker threads as oneDNN's primitives, so the two never compete
for the cores while one pool spins. The function is one that :func:`.ir_util.team_function`
built; it reads its arguments from an array of i64 whose first two are the addresses of
``omp_get_thread_num`` and ``omp_get_num_threads``."""
from __future__ import annotations

import ctypes
from typing import Callable, Optional

__all__ = ["team"]


def team(function: int, count: int) -> Optional[Callable[[list, int], None]]:
    """``run(values, threads)``: the native function at address ``function`` on ``threads``
    threads, each reading the runtime's two queries then the ``count`` values; None without
    libgomp (the caller then runs its loop on the calling thread)."""
    try:
        gomp = ctypes.CDLL("libgomp.so.1")
        start, thread_num, num_threads = gomp.GOMP_parallel, gomp.omp_get_thread_num, gomp.omp_get_num_threads
    except (OSError, AttributeError):
        return None
    start.argtypes, start.restype = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint), None
    queries = [ctypes.cast(f, ctypes.c_void_p).value for f in (thread_num, num_threads)]
    array = ctypes.c_int64 * (2 + count)

    def run(values: list, threads: int) -> None:
        args = array(*queries, *values)
        start(function, ctypes.addressof(args), threads, 0)
    return run
