"""The cyclic garbage collector held off while a model or a subgraph body compiles.

A compile allocates tens of thousands of container objects (nodes, contexts, symbolic
expressions, steps, generated code) that nearly all live on in the program, and makes next
to no reference cycles. With the collector running, every 700 net allocations start a young
collection, every tenth of those a middle one, and when enough objects have survived a full
collection walks every object of the process: work that frees nothing here. Measured with
``gc.callbacks`` on this project's 2-vCPU machine (time inside collections, medians of 5-6
fresh processes alternating paused and not): optimum's merged GPT-2 decoder, session plus its
64-step cold decoding pass (two branch-body compiles), 35 ms in collections against 18 ms
paused (one full collection alone ~18-22 ms); bert_tiny's session 9.4 ms against 7.6 ms.

:func:`paused` disables the collector for the duration of the call when it is enabled, and
enables it again afterwards; nested and concurrent compiles keep it off until the last one
ends. A collector that the application itself disabled stays disabled. Before enabling it,
the pause moves every tracked object into the oldest generation (``gc.freeze()`` then
``gc.unfreeze()``): otherwise what the compile allocated is one young generation of tens of
thousands of objects, walked by the collection the very next allocation starts (~8 ms after
a process's first session, whose objects include the op families it imported).
"""
from __future__ import annotations

import functools
import gc
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

__all__ = ["paused", "pausing"]

F = TypeVar("F", bound=Callable)

_lock = threading.Lock()
_depth = 0
_resume = False     # whether the outermost pause found the collector enabled


@contextmanager
def pausing() -> Iterator[None]:
    """Within the block the cyclic collector does not run (see the module docstring)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                _promote_young()
                gc.enable()


def _promote_young() -> None:
    """Move every object the collector tracks into its oldest generation without a
    collection (``gc.freeze()`` then ``gc.unfreeze()``): the compile's objects, which live on,
    are then not walked by the young collection their number would start as soon as the
    collector is back on (~8 ms after a process's first session), only by the full ones the
    process makes anyway. Not done where the application froze objects itself (a server
    before it forks): unfreezing would undo that."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def paused(fn: F) -> F:
    """``fn`` run under :func:`pausing` (a decorator)."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        with pausing():
            return fn(*args, **kwargs)
    return call  # type: ignore[return-value]
