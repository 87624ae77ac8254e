"""dynashape's accelerated-kernel plugin: compiled (numba) kernels of priority 10 over the
builtin numpy ones, registered through the public hooks exactly like a third-party plugin
(entry point ``fast`` of the group ``dynashape``).

* Needs numba: ``pip install "dynashape[fast]"``. Without it the plugin registers nothing
  and the numpy kernels run (``AVAILABLE`` / ``REASON`` say why).
* Off: ``DYNASHAPE_FAST=0`` (read when the registry is built) or
  ``InferenceSession(..., compiled_kernels=False)`` for one session.
* Loops compile on first use per dtype and rank, into numba's on-disk cache, so the next
  process loads them (``benchmarks/compile_cost.py`` measures both).

What is covered, and when a kernel hands over to the numpy one: :mod:`.kernels`.
"""
from __future__ import annotations

import os

from dynashape.hookspecs import hookimpl

__all__ = ["AVAILABLE", "REASON", "PLUGIN_NAME", "enabled"]

#: the entry-point name the registry knows this plugin by
PLUGIN_NAME = "fast"

try:
    import numba  # noqa: F401
    AVAILABLE, REASON = True, ""
except ImportError as exc:   # the extra is not installed
    AVAILABLE, REASON = False, f"numba is not installed ({exc}): pip install 'dynashape[fast]'"


def enabled() -> bool:
    """numba is there and ``DYNASHAPE_FAST`` does not switch the plugin off."""
    return AVAILABLE and os.environ.get("DYNASHAPE_FAST", "1") not in ("0", "false", "off")


@hookimpl
def dynashape_register_ops():
    return []


@hookimpl
def dynashape_register_kernels():
    if not enabled():
        return []
    from .kernels import all_kernels
    return all_kernels()
