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
"""
from __future__ import annotations

import os
import threading
import warnings

from dynashape.threads import compiled_kernels_wait

__all__ = ["compiled_ready", "wait_until_ready"]

_ready = False          # numba is up: the loops may be called
_failed = ""            # why numba could not start (the numpy paths serve)
_started = False
_done = threading.Event()
_lock = threading.Lock()
#: every session waits for numba (the first run's loops are compiled ones)
WAIT_ALWAYS = os.environ.get("DYNASHAPE_COMPILED_WAIT", "") in ("1", "true", "on")


def compiled_ready() -> bool:
    """Whether a compiled kernel may call its loop now. The first call starts numba in a
    background thread and returns False (the kernel takes its numpy path), unless the run
    waits for the compiled kernels (then it starts numba here, or waits for the thread)."""
    if _ready:
        return True
    if WAIT_ALWAYS or compiled_kernels_wait():
        wait_until_ready()
        return _ready
    _start()
    return False


def wait_until_ready(timeout: float | None = None) -> bool:
    """Start numba now if nothing has, and wait until it is up; True when it is."""
    if _start(in_background=False):
        return _ready
    _done.wait(timeout)
    return _ready


def _start(in_background: bool = True) -> bool:
    """Start numba once (in a daemon thread, or here); True when this call did it here."""
    global _started
    with _lock:
        if _started:
            return False
        _started = True
    if in_background:
        threading.Thread(target=_start_numba, name="dynashape-numba", daemon=True).start()
        return False
    _start_numba()
    return True


def _start_numba() -> None:
    global _ready, _failed
    try:
        from .loops import common
        common.warm_up(1)     # LLVM's JIT and numba's cache machinery, on a function of its own
        _ready = True
    except Exception as exc:  # noqa: BLE001 - numba cannot start: the numpy kernels serve
        _failed = f"{type(exc).__name__}: {exc}"
        warnings.warn(f"dynashape: numba could not start ({_failed}); the compiled kernels run their numpy path",
                      RuntimeWarning, stacklevel=2)
    finally:
        _done.set()
