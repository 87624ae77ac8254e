"""What the compiled loops share: numba's compile flags, a window tap's span, and
:class:`ThreadedLoop` (a loop compiled serially and with ``parallel=True``).

Every loop is ``njit`` with numba's on-disk cache; numba specialises it on dtype, rank and
layout, never on sizes, so a process compiles each signature once and the on-disk cache
(``cache=True``) keeps it for the next process. ``error_model="numpy"`` gives IEEE division
(inf / nan, no ZeroDivisionError check), which is what lets LLVM vectorise a loop with a
division. No loop raises: the kernels check what the loops assume (contiguity, dtypes, the
axis) and call the numpy kernel otherwise.
"""
from __future__ import annotations

import threading
from types import FunctionType

import numba
from numba import njit
from dynashape.threads import intra_op_threads

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


_PARALLEL_LAUNCH = threading.Lock()


class ThreadedLoop:
    """A loop compiled twice: serially, and with ``parallel=True`` (its ``prange`` loops split
    over numba's threads, compiled on first use). Calling it runs the parallel one where the
    run lets kernels use more than one thread (``SessionOptions.intra_op_num_threads``,
    :func:`dynashape.threads.intra_op_threads`; capped at numba's thread pool), the serial
    one otherwise. ``prange`` in the serial one is a plain ``range``.

    Parallel calls from several Python threads (sessions run from threads) go one at a time:
    numba's ``workqueue`` threading layer (its fallback where neither OpenMP nor TBB loads)
    aborts the process on concurrent launches, and each call uses all the threads it asked
    for anyway."""

    def __init__(self, fn, flags: dict):
        self.serial = njit(**flags)(fn)
        self._fn, self._flags, self._parallel = fn, flags, None
        self.__doc__ = fn.__doc__

    @property
    def parallel(self):
        """The ``parallel=True`` variant, compiled from a renamed copy of the function: numba's
        on-disk cache files compiled versions under the function's qualified name and
        signature, not its ``parallel`` flag, so the two variants of one function would
        overwrite each other's entry and a later process's serial call load the parallel code
        (its OpenMP threads then spin beside the caller)."""
        if self._parallel is None:
            fn = self._fn
            twin = FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_parallel", fn.__defaults__,
                                fn.__closure__)
            twin.__qualname__, twin.__doc__ = fn.__qualname__ + "_parallel", fn.__doc__
            self._parallel = njit(parallel=True, **self._flags)(twin)
        return self._parallel

    def run(self, tasks: int, *args):
        """Call it, serially where its ``prange`` has a single task (a parallel launch would
        only cost the thread pool's wake-up)."""
        return self.serial(*args) if tasks <= 1 else self(*args)

    def __call__(self, *args):
        n = intra_op_threads()
        if n > 1:
            with _PARALLEL_LAUNCH:
                numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
                return self.parallel(*args)
        return self.serial(*args)


def threaded(flags: dict = JIT):
    """Decorator: ``@threaded(FMA_JIT)`` makes a :class:`ThreadedLoop` of a loop function."""
    return lambda fn: ThreadedLoop(fn, flags)
