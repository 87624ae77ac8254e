"""Compiled loops swapped in off the run path: until numba is up in this process, the
compiled kernels run their numpy path, and numba starts in a background thread.

numba costs a process ~0.3-0.4 s to import and ~0.4-0.7 s more before it runs its first
compiled function (LLVM's JIT and its cache machinery start up), whatever the function: a
first run that called a loop paid about a second (a 2-layer decoder's first step: 767 ms,
against 2.6 ms with the numpy kernels). So the first call of any compiled kernel starts
that work in a daemon thread and takes the kernel's numpy path (the builtin numpy kernel,
which each compiled kernel already falls back to where its loop's assumptions fail); every
call after the thread is done takes the loop. A loop's own first call still loads it from
numba's cache (a few ms), or compiles it when the cache is empty.

The two paths agree within the tolerance the compiled kernels are tested to (their tests
compare each loop with the numpy kernel), not bit for bit; a session created with
``wait_for_compiled_kernels=True``, or ``DYNASHAPE_COMPILED_WAIT=1`` for every session,
waits for numba instead (its runs take the loop from the first), for users who need
bit-identical results from run to run.

:class:`BackgroundStart` is that once-per-process background start, shared by numba's
(:data:`NUMBA`) and the native panel GEMM's loading (:mod:`.native.panels`).
"""
from __future__ import annotations

import os
import threading
import warnings

from dynashape.threads import compiled_kernels_wait

__all__ = ["BackgroundStart", "compiled_ready", "wait_until_ready", "waits", "NUMBA"]

#: every session waits for numba (the first run's loops are compiled ones)
WAIT_ALWAYS = os.environ.get("DYNASHAPE_COMPILED_WAIT", "") in ("1", "true", "on")


class BackgroundStart:
    """Work done once per process in a daemon thread, started by the first kernel that asks
    whether it is done (:meth:`ready`): numba's start (:data:`NUMBA`), or loading the native
    machine code (:mod:`.native.panels`). ``start`` raises where the work cannot be done;
    the warning names ``what``, and the kernels keep their numpy path."""

    def __init__(self, what: str, start):
        self.what, self._work = what, start
        self.is_ready = False
        self.failed = ""        # why it could not be done
        self._started = False
        self._done = threading.Event()
        self._lock = threading.Lock()

    def ready(self) -> bool:
        """Whether the work is done. The first call starts it in a background thread and
        returns False, unless the run waits for the compiled kernels (then it does the work
        here, or waits for the thread)."""
        if self.is_ready:
            return True
        if waits():
            return self.wait()
        self._start()
        return False

    def wait(self, timeout: float | None = None) -> bool:
        """Start the work now if nothing has, and wait until it is done; True when it is."""
        if not self._start(in_background=False):
            self._done.wait(timeout)
        return self.is_ready

    def _start(self, in_background: bool = True) -> bool:
        """Start once (in a daemon thread, or here); True when this call did it here."""
        with self._lock:
            if self._started:
                return False
            self._started = True
        if in_background:
            threading.Thread(target=self._run, name=f"dynashape-{self.what.split()[0]}", daemon=True).start()
            return False
        self._run()
        return True

    def _run(self) -> None:
        try:
            self._work()
            self.is_ready = True
        except Exception as exc:  # noqa: BLE001 - cannot be done: the numpy kernels serve
            self.failed = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"dynashape: {self.what} could not start ({self.failed}); the compiled kernels run "
                          "their numpy path", RuntimeWarning, stacklevel=2)
        finally:
            self._done.set()


def _start_numba() -> None:
    from .loops import common
    common.warm_up(1)     # LLVM's JIT and numba's cache machinery, on a function of its own


#: numba's start in this process
NUMBA = BackgroundStart("numba", _start_numba)


def waits() -> bool:
    """Whether the run in progress waits for compiled kernels (``wait_for_compiled_kernels``,
    ``DYNASHAPE_COMPILED_WAIT``) instead of taking their numpy path until they are ready."""
    return WAIT_ALWAYS or compiled_kernels_wait()


def compiled_ready() -> bool:
    """Whether a compiled kernel may call its numba loop now (:meth:`BackgroundStart.ready`)."""
    return NUMBA.is_ready or NUMBA.ready()


def wait_until_ready(timeout: float | None = None) -> bool:
    """Start numba now if nothing has, and wait until it is up; True when it is."""
    return NUMBA.wait(timeout)
