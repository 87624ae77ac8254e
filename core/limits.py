"""Resource limits: the bytes one plan or one tensor of a session may take.

A session's ``memory_limit`` (bytes) bounds every tensor a plan holds and the plan's whole
arena (or, with the naive allocator, the sum of its buffers). It is checked when a plan is
made for new shapes, before anything is allocated, and when constants are folded at load;
an allocation the operating system refuses anyway (``MemoryError``) or one numpy cannot
express (``ValueError: array is too big``) becomes the same :class:`ResourceLimitError`.

The default is the machine's memory: the physical RAM, or the cgroup limit of the container
when that is lower (cgroup v2 ``memory.max``, v1 ``memory.limit_in_bytes``). The environment
variable ``DYNASHAPE_MEMORY_LIMIT`` overrides it (bytes, or a number with ``KiB``/``MiB``/
``GiB``/``TiB``, ``KB``/``MB``/``GB``/``TB``).
"""
from __future__ import annotations

import os
import re
from typing import Optional, Sequence, Union

from .errors import InvalidArgumentError, ResourceLimitError

__all__ = ["default_memory_limit", "resolve_memory_limit", "parse_bytes", "check_tensor", "format_bytes",
           "is_resource_failure", "allocation_error", "INT64_MAX"]

INT64_MAX = 2**63 - 1
_CGROUP_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
#: numpy's messages for a size it cannot represent (numpy/_core/src/multiarray/ctors.c)
_TOO_BIG = ("array is too big", "maximum supported dimension", "Maximum allowed size exceeded")


def _physical_memory() -> Optional[int]:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_memory() -> Optional[int]:
    for path in _CGROUP_FILES:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:   # "max" or v1's "no limit" (~2^63)
            return int(text)
    return None


def default_memory_limit() -> int:
    """The machine's memory in bytes: physical RAM, or the container's cgroup limit if lower
    (16 GiB when neither can be read)."""
    sizes = [n for n in (_physical_memory(), _cgroup_memory()) if n]
    return min(sizes) if sizes else 16 * 2**30


def parse_bytes(text: str) -> int:
    """``"512MiB"`` -> 536870912. Raises InvalidArgumentError for anything else."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if m is None or m.group(2).lower() not in _UNITS:
        raise InvalidArgumentError(f"memory limit {text!r} is not a byte count "
                                   "(an integer, or a number with KiB, MiB, GiB, TiB, KB, MB, GB or TB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def resolve_memory_limit(value: Union[int, str, None]) -> int:
    """The session's limit: ``value`` (bytes or a string as :func:`parse_bytes` reads), else
    ``DYNASHAPE_MEMORY_LIMIT``, else :func:`default_memory_limit`.

    Raises:
        InvalidArgumentError: not a positive byte count.
    """
    if value is None:
        env = os.environ.get("DYNASHAPE_MEMORY_LIMIT", "").strip()
        return parse_bytes(env) if env else default_memory_limit()
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidArgumentError(f"memory_limit must be a byte count (int or '8GiB'), got {value!r}")
    limit = parse_bytes(value) if isinstance(value, str) else int(value)
    if limit <= 0:
        raise InvalidArgumentError(f"memory_limit must be positive, got {value!r}")
    return limit


def format_bytes(n: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def check_tensor(shape: Sequence[int], itemsize: int, limit: int, what: str, node: str = "") -> None:
    """Raise ResourceLimitError when a tensor of ``shape`` (ints) and ``itemsize`` bytes per
    element has more than int64 elements or more bytes than ``limit``. ``what`` names it in
    the message ("output 'y' of Expand node 'e'")."""
    count = 1
    for d in shape:
        count *= int(d)
    if count > INT64_MAX:
        raise ResourceLimitError(f"{what} has shape {tuple(shape)}: its element count {count} overflows int64",
                                 node=node, nbytes=None, limit=limit)
    nbytes = count * max(1, int(itemsize))
    if nbytes > limit:
        raise ResourceLimitError(f"{what} has shape {tuple(shape)}: {format_bytes(nbytes)} ({nbytes} bytes), "
                                 f"over the session's memory_limit of {format_bytes(limit)} ({limit} bytes)",
                                 node=node, nbytes=nbytes, limit=limit)


def is_resource_failure(exc: BaseException) -> bool:
    """True for a MemoryError, numpy's ValueError for a size it cannot represent, or
    Python's RecursionError (subgraphs nested too deep): what :func:`allocation_error`
    turns into a ResourceLimitError."""
    if isinstance(exc, ResourceLimitError):
        return False
    if isinstance(exc, (MemoryError, RecursionError)):
        return True
    return isinstance(exc, ValueError) and any(s in str(exc) for s in _TOO_BIG)


def allocation_error(exc: BaseException, what: str, node: str = "", limit: Optional[int] = None) -> ResourceLimitError:
    """The ResourceLimitError for an allocation the system or numpy refused while ``what``
    (or for Python's recursion limit, reached by subgraphs nested too deep)."""
    if isinstance(exc, RecursionError):
        return ResourceLimitError(f"{what}: Python's recursion limit was reached (subgraphs nested too deep): {exc}",
                                  node=node, nbytes=None, limit=limit)
    return ResourceLimitError(f"{what}: the allocation failed ({type(exc).__name__}: {exc})",
                              node=node, nbytes=None, limit=limit)
