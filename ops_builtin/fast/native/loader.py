"""The exported functions of one native IR module, loaded once per process in a background
thread (:class:`..tiering.BackgroundStart`): from the machine-code cache, else built by a
child process (:func:`.machine_code.built_functions`). Each driver (:mod:`.panels`,
:mod:`.gemv`) holds one :class:`NativeCode`."""
from __future__ import annotations

import ctypes
from typing import Callable, Optional

from ..tiering import BackgroundStart
from . import openmp

__all__ = ["NativeCode", "PARALLEL", "supported"]

#: the exported function every module has: its loop split over an OpenMP team (:mod:`.openmp`)
PARALLEL = "dyn_parallel"


def supported() -> bool:
    """Whether native code can run here (:func:`.machine_code.supported`)."""
    from . import machine_code     # (its imports only where native code is asked for)
    return machine_code.supported()


class NativeCode:
    """``functions`` ({exported name: i64 argument count}) of the IR module ``ir_module``,
    :data:`PARALLEL` among them (reading ``parallel_args`` i64 values, the runtime's two
    queries first); ``depends``: the files its IR reads constants from (the cache key).
    After :meth:`ready`: ``call[name]`` for each other function (ctypes, the GIL released) and
    ``team`` (``run(values, threads)``, or None without libgomp)."""

    def __init__(self, what: str, ir_module: str, functions: dict, parallel_args: int, depends=()):
        self._module, self._functions, self._depends = ir_module, dict(functions), tuple(depends)
        self._parallel_args = parallel_args
        self.call: dict[str, Callable] = {}
        self.team: Optional[Callable[[list, int], None]] = None
        self.loading = BackgroundStart(what, self._load)

    def _load(self) -> None:
        from . import machine_code
        addresses = machine_code.built_functions(self._module, self._functions, depends=self._depends)
        for name, count in self._functions.items():
            if name != PARALLEL:
                self.call[name] = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * count))(addresses[name])
        self.team = openmp.team(addresses[PARALLEL], self._parallel_args - 2)

    def ready(self) -> bool:
        """Whether the functions may be called now (the first call starts loading them)."""
        return self.loading.is_ready or self.loading.ready()

    def wait(self, timeout: float | None = None) -> bool:
        """Load the code now if nothing has, and wait until it is; True when it is."""
        return self.loading.wait(timeout)
