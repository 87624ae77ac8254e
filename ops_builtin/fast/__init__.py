"""dynashape's accelerated-kernel plugin: compiled (numba) kernels of priority 10 over the
builtin numpy ones, registered through the public hooks exactly like a third-party plugin
(entry point ``fast`` of the group ``dynashape``). It lives inside ``ops_builtin`` because
its kernels build on the numpy kernels' preparation and scratch (their private helpers,
``nn._conv_setup``, ``resize._plan``, ...): one package owns both; a third-party plugin
reaches only the public records and hooks.

* Needs numba: ``pip install "dynashape[fast]"``. Without it the plugin registers nothing
  and the numpy kernels run (``AVAILABLE`` / ``REASON`` say why).
* Off: ``DYNASHAPE_FAST=0`` (read when the registry is built) or
  ``InferenceSession(..., compiled_kernels=False)`` for one session.
* numba is imported when a compiled loop is first called, not before: registering the
  plugin, building the registry, choosing kernels and preparing nodes import none of it
  (the kernels reach their loops through :func:`.common.lazy_import`), so a process whose
  models run no compiled loop never loads numba and llvmlite (~120 MB, ~0.2-0.4 s).
  Whether numba is there is found without importing it (its spec and installed versions).
* Loops compile on first use per dtype and rank, into numba's on-disk cache, so the next
  process loads them (``benchmarks/compile_cost.py`` measures both).

What is covered, and when a kernel hands over to the numpy one: :mod:`.kernels`.
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys

import numpy as np

from dynashape import distributions
from dynashape.hookspecs import hookimpl

__all__ = ["AVAILABLE", "REASON", "PLUGIN_NAME", "enabled"]

#: the entry-point name the registry knows this plugin by
PLUGIN_NAME = "fast"
#: the oldest numba the loops are tested with (the ``fast`` extra's bound, pyproject.toml)
NUMBA_MIN = (0, 60)
_INSTALL = "pip install 'dynashape[fast]'"


def _release(version: str) -> tuple:
    """The leading release numbers of a version ("2.4.6" -> (2, 4, 6), "0.50.0dev0" -> (0, 50, 0))."""
    numbers = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(v) for v in numbers.group(0).split(".")) if numbers else ()


def _bound_broken(requirement: str, version: tuple) -> str:
    """The first bound of a requirement such as ``numpy<2.6,>=1.22`` (numba's on numpy: what
    its import checks) that ``version`` breaks, or "" (bounds written otherwise are not read)."""
    holds = {"<": tuple.__lt__, "<=": tuple.__le__, ">": tuple.__gt__, ">=": tuple.__ge__}
    for bound in re.sub(r"^[A-Za-z0-9_.-]+\s*|;.*$", "", requirement).split(","):
        found = re.fullmatch(r"\s*(<=|>=|<|>)\s*([\d.]+)\s*", bound)
        if found:
            op, limit = found.group(1), _release(found.group(2))
            if not holds[op](version[:len(limit)], limit):
                return f"{op}{found.group(2)}"
    return ""


def _availability() -> tuple:
    """(AVAILABLE, REASON), found without importing numba: numba and llvmlite are installed,
    numba is at least NUMBA_MIN and accepts the numpy imported (numba's import refuses a
    numpy outside the range it declares). A numba that would fail to import all the same
    raises its ImportError at the first compiled call."""
    for name in ("numba", "llvmlite"):
        if importlib.util.find_spec(name) is None:
            return False, f"{name} is not installed: {_INSTALL}"
    if "numba" in sys.modules:   # (imported already)
        return True, ""
    version, requires = distributions.version("numba"), distributions.requires("numba")
    if version is None or requires is None:     # (not a plain wheel install: its metadata)
        from importlib import metadata
        try:
            numba_dist = metadata.distribution("numba")
        except metadata.PackageNotFoundError:   # (importable, but no distribution metadata to check)
            return True, ""
        version, requires = numba_dist.version, numba_dist.requires or []
    if _release(version) < NUMBA_MIN:
        return False, f"numba {version} is older than {'.'.join(map(str, NUMBA_MIN))}: {_INSTALL}"
    for req in requires:
        broken = _bound_broken(req, _release(np.__version__)) if re.match(r"numpy\b", req) else ""
        if broken:
            return False, f"numba {version} does not support numpy {np.__version__} (it needs numpy{broken})"
    return True, ""


AVAILABLE, REASON = _availability()


def enabled() -> bool:
    """numba is there and ``DYNASHAPE_FAST`` does not switch the plugin off."""
    return AVAILABLE and os.environ.get("DYNASHAPE_FAST", "1") not in ("0", "false", "off")


@hookimpl
def dynashape_register_libraries():
    """The compiled kernels' families (:mod:`.kernels`), each imported when a model first has
    one of its ops."""
    if not enabled():
        return []
    from dynashape.libindex import libraries

    from .index import INDEX
    return libraries(INDEX)
