"""The cblas ``?gemm`` / ``?gemv`` of the BLAS numpy loaded, for compiled code to call (the
recurrent loops' per-step products, :mod:`.loops.recurrent`); found without numba.

numba's own np.dot needs scipy; instead the loops call these routines as external symbols
that LLVM resolves by name (so the loops stay in numba's on-disk cache). Here they are
found: the BLAS libraries loaded (through threadpoolctl, as :mod:`dynashape.threads` finds
them to set their threads), in each the symbol names of :data:`CBLAS_NAMES`, each candidate
checked on a tiny product through ctypes. The integer arguments are passed 64-bit: right
for an ILP64 BLAS (numpy's scipy-openblas64), and for an LP64 one they travel in 64-bit
registers / stack slots whose low half it reads.
"""
from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np

__all__ = ["CBLAS_NAMES", "ROUTINES", "ROW_MAJOR", "NO_TRANS", "TRANS", "routines", "source"]

#: cblas's enum values for row-major storage, no transpose, transpose
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
#: (prefix, suffix) of the cblas symbols tried in each BLAS library, in this order
#: (``scipy_cblas_sgemm64_``: numpy's scipy-openblas64; ``cblas_sgemm64_``: an ILP64
#: OpenBLAS; ``cblas_sgemm``: an LP64 OpenBLAS / MKL)
CBLAS_NAMES = (("scipy_cblas_", "64_"), ("cblas_", "64_"), ("cblas_", ""))
ROUTINES = ("sgemm", "dgemm", "sgemv", "dgemv")

_found: tuple = ()          # (addresses or None, source) once looked up
_lookup = threading.Lock()


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
        gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, 3, 4, 5, 1.0, a.ctypes.data, 5, b.ctypes.data, 4, 0.0, c.ctypes.data, 4)
        gemv(ROW_MAJOR, TRANS, 5, 4, 1.0, b.ctypes.data, 4, a.ctypes.data, 1, 0.0, v.ctypes.data, 1)
        if not (np.allclose(c, a @ b, rtol=1e-4, atol=1e-5) and np.allclose(v, a[0] @ b, rtol=1e-4, atol=1e-5)):
            return False
    return True


def _find() -> tuple:
    """(the routines' addresses by name, where they come from), or (None, why none)."""
    if sys.platform == "darwin":   # (Apple's arm64 ABI packs 32-bit stack arguments)
        return None, "not on macOS"
    try:
        from threadpoolctl import threadpool_info
        libs = [i["filepath"] for i in threadpool_info() if i.get("user_api") == "blas"]
    except Exception as exc:  # noqa: BLE001 - then the numpy kernel runs
        return None, f"threadpoolctl: {exc}"
    for path in libs:
        try:
            handle = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in CBLAS_NAMES:
            fns = {r: getattr(handle, f"{prefix}{r}{suffix}", None) for r in ROUTINES}
            if None in fns.values() or not _routines_work(fns):
                continue
            addresses = {r: ctypes.cast(fn, ctypes.c_void_p).value for r, fn in fns.items()}
            return addresses, f"{prefix}?gemm{suffix} / {prefix}?gemv{suffix} of {path}"
    return None, "no BLAS library with cblas ?gemm / ?gemv symbols among those loaded"


def routines() -> dict | None:
    """The address of each routine of :data:`ROUTINES` (``{"sgemm": int, ...}``), or None
    where no loaded BLAS has them all working; looked up once per process (a few ms), at
    the first call."""
    global _found
    if not _found:
        with _lookup:
            if not _found:
                _found = _find()
    return _found[0]


def source() -> str:
    """Which symbols of which library :func:`routines` are, or why there are none."""
    routines()
    return _found[1]
