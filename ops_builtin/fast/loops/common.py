"""What the compiled loops share: numba's compile flags and a window tap's span (the loops
split over threads are in :mod:`.threaded`).

Every loop is ``njit`` with numba's on-disk cache; numba specialises it on dtype, rank and
layout, never on sizes, so a process compiles each signature once and the on-disk cache
(``cache=True``) keeps it for the next process. ``error_model="numpy"`` gives IEEE division
(inf / nan, no ZeroDivisionError check), which is what lets LLVM vectorise a loop with a
division. No loop raises: the kernels check what the loops assume (contiguity, dtypes, the
axis) and call the numpy kernel otherwise.
"""
from __future__ import annotations

from numba import njit

JIT = {"cache": True, "error_model": "numpy"}


@njit(cache=True)
def warm_up(x):
    """A function of its own whose first call starts LLVM's JIT and numba's cache machinery
    (:mod:`..tiering` calls it in a background thread)."""
    return x + 1
#: a max reduction vectorises only without NaN / signed-zero semantics (max is associative,
#: so the result is the same; a NaN in a row still makes the row NaN through its sum)
MAX_JIT = dict(JIT, fastmath={"nnan", "nsz"})
#: a sum reduction vectorises only when it may be reassociated: lanes add in another order,
#: within a few ulp (numpy's pairwise sum is yet another order)
SUM_JIT = dict(JIT, fastmath={"reassoc"})
#: ``a + b * c`` as one fused multiply-add (as onnxruntime's MLAS kernels compute it), the
#: order of the terms kept
FMA_JIT = dict(JIT, fastmath={"contract"})


@njit(inline="always", **JIT)
def tap_span(off, sw, w_, ow_):
    """For a kernel tap reading input column ``ow * sw + off``: the first output column it
    reaches, the input column that one reads, and how many columns (0 when none). Both
    starts come out of ``max(..., 0)``, which lets LLVM prove the indices non-negative and
    drop numba's negative-index wraparound from the loop (it blocks vectorisation)."""
    lo = 0 if off >= 0 else (-off + sw - 1) // sw
    hi = (w_ - 1 - off) // sw + 1 if w_ - 1 - off >= 0 else 0
    hi = min(hi, ow_)
    return max(lo, 0), max(lo * sw + off, 0), max(hi - lo, 0)
