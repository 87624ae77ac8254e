"""oneDNN primitives made off the run path, for the kernels that have a numpy path.

A oneDNN primitive is compiled code: making one for a new shape is a descriptor search and
JIT code generation (~0.1-0.5 ms each), and some implementations generate the rest of
their code at their first execution: the ``gemm:jit`` matmul a CPU without AVX-512 gets for
an attention core builds its whole set of sgemm kernels then (~28 ms, once per process, on
an AVX2 EPYC). Made on the run path, that is the cost of every first run and of every new
shape (a LayerNormalization, a Softmax and an attention core per new sequence length).

So a kernel that has a numpy path asks :func:`primitive` for the one its shape needs. When
the process has it, it is returned; otherwise a background thread (one per process) makes
it, executes it once on scratch memory (at most :data:`WARM_BYTES`), and keeps it in the
process's shared cache (``api.SHARED``), while this call gets None and runs the numpy path.
The thread spends its time in oneDNN's C code, which runs without the GIL.

The numpy path and the primitive agree within the tolerance the oneDNN kernels are tested
to (their tests compare the two), not bit for bit. A run that waits for compiled kernels (a
session created with ``wait_for_compiled_kernels=True``, or ``DYNASHAPE_COMPILED_WAIT=1``
for every session: :mod:`dynashape.ops_builtin.fast.tiering`) makes the primitive on the run path
instead, so its results are the primitive's from the first run.

A convolution reads its weights only in oneDNN's packed layout: its numpy path copies them
out (by numpy, :meth:`api.Blocking.plain_copy`), which pays below ``conv.NUMPY_FIRST_MACS``
only; a larger one, and a GEMM against packed weights, make their primitives on the run path.
"""
from __future__ import annotations

import atexit
import os
import queue
import threading
from typing import Optional

import numpy as np

from .. import tiering
from . import api

__all__ = ["primitive", "BACKGROUND", "UNAVAILABLE", "WARM_BYTES"]

#: what the cache holds for a key oneDNN has no implementation for (the numpy path serves)
UNAVAILABLE = "unavailable"
#: the most scratch memory a primitive's first execution in the background may take (a larger
#: one makes the rest of its code, if any, at its first real execution, where it is a small
#: part of the work)
WARM_BYTES = 16 << 20


def primitive(key: tuple, make, *args, threads: int, cache: Optional[api.PrimitiveCache] = None):
    """The primitive made for ``key`` (``make(*args)``: a :class:`api.Primitive`, a tuple
    holding one, or an object whose ``primitives`` are) in ``cache`` (default: the process's
    shared one, ``api.SHARED``), or None: not made yet (the background thread is asked to) or
    no oneDNN implementation for it; the caller then runs its numpy path. ``threads``: the
    intra-op thread count the primitive is made for (part of ``key``)."""
    cache = api.SHARED if cache is None else cache
    found = cache.peek(key)
    if found is not None:
        return None if found is UNAVAILABLE else found
    if tiering.waits():
        return _make_here(cache, key, make, args)
    BACKGROUND.request(cache, key, make, args, threads)
    return None


def _make_here(cache: api.PrimitiveCache, key: tuple, make, args):
    try:
        return cache.get(key, make, *args)
    except api.OneDNNError:
        cache.put(key, UNAVAILABLE)
        return None


def _primitives_of(made) -> tuple:
    if isinstance(made, api.Primitive):
        return (made,)
    if isinstance(made, tuple):
        return tuple(p for p in made if isinstance(p, api.Primitive))
    return tuple(made.primitives)


def _warm(made, threads: int) -> None:
    """Make each primitive's kernel, and execute it once on zeroed scratch memory (its code
    complete after this) where that takes at most WARM_BYTES."""
    prims = _primitives_of(made)
    for p in prims:
        p.make()
    if sum(md.nbytes for p in prims for md in p.mds) > WARM_BYTES:
        return
    api.set_threads(threads)
    try:
        for p in prims:
            scratch = [np.zeros(max(md.nbytes, 1), np.uint8) for md in p.mds]
            p.execute([int(s.ctypes.data) for s in scratch], _WARM_SITE)
    finally:
        api.release_scratchpad()       # (this thread's: runs happen on others)


_WARM_SITE = object()


class BackgroundMaker:
    """One daemon thread making the primitives asked for, each key once, in the order asked."""

    def __init__(self):
        self._queue: "queue.SimpleQueue" = queue.SimpleQueue()
        self._pending: set = set()
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: Optional[threading.Thread] = None
        self._stopped = False

    def request(self, cache: api.PrimitiveCache, key: tuple, make, args: tuple, threads: int) -> None:
        """Make ``make(*args)`` into ``cache`` under ``key`` (once, however often asked)."""
        with self._lock:
            if self._stopped or (id(cache), key) in self._pending:
                return
            self._pending.add((id(cache), key))
            self._idle.clear()
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="dynashape-onednn", daemon=True)
                self._thread.start()
                atexit.register(self.stop)
        self._queue.put((cache, key, make, args, threads))

    def forget_thread(self) -> None:
        """In a child process made by fork: the parent's thread is not there; nothing is pending
        and the next request starts a thread of this process."""
        self._lock = threading.Lock()
        self._queue = queue.SimpleQueue()
        self._pending = set()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = None

    def wait_idle(self, timeout: Optional[float] = None) -> bool:
        """Wait until every primitive asked for is made; True when none is pending."""
        return self._idle.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Make nothing more, and wait for the primitive in the making (at the interpreter's
        exit: a daemon thread stopped inside oneDNN's code as the process tears down crashes it)."""
        with self._lock:
            self._stopped = True
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None or self._stopped:
                return
            cache, key, make, args, threads = item
            try:
                made = make(*args)
                _warm(made, threads)
            except Exception:  # noqa: BLE001 - no implementation, or out of memory: numpy serves
                made = UNAVAILABLE
            cache.put(key, made)
            with self._lock:
                self._pending.discard((id(cache), key))
                if not self._pending:
                    self._idle.set()


#: the process's background maker
BACKGROUND = BackgroundMaker()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=BACKGROUND.forget_thread)
