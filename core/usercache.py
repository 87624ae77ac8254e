"""The per-user disk cache: small files that spare a new process work an earlier one did
(onnx's operator schemas, the plugins' entry points as JSON; the bytecode of the programs'
generated Python, :mod:`dynashape.codegen`, as Python keeps a module's in ``__pycache__``; the
compiled kernels' machine code in ``native/``, written and checked by
``dynashape.ops_builtin.fast.native.machine_code``). Written atomically (a reader sees the old file or
the new one); a file that cannot be read or written is ignored, and the work is done again.

Directory: ``DYNASHAPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/dynashape``, else
``~/.cache/dynashape``; ``DYNASHAPE_CACHE_DIR=off`` (or ``0``, ``none``, ``false``, empty)
turns the cache off.
"""
from __future__ import annotations

import json
import os
import tempfile
import zlib
from pathlib import Path
from typing import Any, Optional

__all__ = ["cache_dir", "checksum", "prune_oldest", "read_bytes", "read_json", "write_bytes", "write_json"]


def cache_dir() -> Optional[Path]:
    """The cache directory (None: the cache is off)."""
    configured = os.environ.get("DYNASHAPE_CACHE_DIR")
    if configured is not None:
        return None if configured.strip().lower() in ("", "0", "off", "none", "false") else Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dynashape"


def checksum(data: bytes) -> str:
    """A cache entry's name for ``data``: 16 hex digits, CRC-32 then Adler-32 (no hashlib,
    whose OpenSSL start costs a process ~5 ms; an entry holds what it was made from, or a key
    of our own sources' versions, so a collision is never taken for a hit)."""
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"


def read_json(path: Optional[Path]) -> Any:
    """The file's data, or None when the cache is off, the file absent or damaged."""
    if path is None:
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path: Optional[Path], data: Any) -> None:
    """Write ``data`` to ``path`` atomically (nothing when the cache is off or unwritable)."""
    write_bytes(path, json.dumps(data, separators=(",", ":")).encode())


def read_bytes(path: Optional[Path]) -> Optional[bytes]:
    """The file's bytes, or None when the cache is off or the file absent or unreadable."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def write_bytes(path: Optional[Path], data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically; False when the cache is off or unwritable."""
    if path is None:
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return False
    return True


def prune_oldest(folder: Path, most: int) -> None:
    """Keep ``folder`` under ``most`` files: past it, the oldest quarter (by modification
    time) is removed. Errors (a file another process removed first) are ignored."""
    try:
        entries = list(os.scandir(folder))
        if len(entries) <= most:
            return
        entries.sort(key=lambda e: e.stat().st_mtime)
        for entry in entries[:len(entries) // 4]:
            os.unlink(entry.path)
    except OSError:
        pass
