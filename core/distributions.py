"""Installed distributions read straight from their ``.dist-info`` folders.

``importlib.metadata`` finds a distribution by scanning every ``sys.path`` entry and building
a path object per name it sees, then parses METADATA as an e-mail message: ~10-15 ms for the
first lookup of a process, each time a process starts. A session needs three answers
(onnx's version, numba's version and numpy bound, where the oneDNN wheel put its library),
so they are read here from the folder itself: the first ``sys.path`` directory that holds
one ``<name>-<version>.dist-info`` folder (the name normalised as wheels write it; the
listing of each directory read once per process). Where that finds nothing, or two folders
in one directory (a damaged install), callers fall back to ``importlib.metadata``.

Source: the wheel format (PEP 427: the ``.dist-info`` folder, RECORD) and core metadata
(``Requires-Dist``), https://packaging.python.org/en/latest/specifications/.
"""
from __future__ import annotations

import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Optional

__all__ = ["dist_info", "version", "requires", "files"]


def _normalized(name: str) -> str:
    """The distribution name as a wheel's folder spells it (``onednn-cpu-gomp`` -> ``onednn_cpu_gomp``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


@lru_cache(maxsize=None)
def _folders(directory: str) -> dict:
    """{normalised distribution name: [its .dist-info folder names]} of one directory."""
    found: dict = {}
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return found
    for n in names:
        if n.endswith(".dist-info") and "-" in n:
            found.setdefault(_normalized(n.split("-", 1)[0]), []).append(n)
    return found


def dist_info(name: str) -> Optional[Path]:
    """The ``.dist-info`` folder of the distribution ``name`` in the first ``sys.path``
    directory that has one; None when none has, or that directory has two."""
    key = _normalized(name)
    for entry in sys.path:
        found = _folders(entry).get(key)
        if found:
            return Path(entry or ".") / found[0] if len(found) == 1 else None
    return None


def version(name: str) -> Optional[str]:
    """The installed version (from the folder's name), or None (not found here)."""
    folder = dist_info(name)
    return None if folder is None else folder.name[:-len(".dist-info")].split("-", 1)[1]


def requires(name: str) -> Optional[list]:
    """The ``Requires-Dist`` requirements of METADATA (``["numpy<2.6,>=1.22", ...]``), or None."""
    folder = dist_info(name)
    if folder is None:
        return None
    try:
        text = (folder / "METADATA").read_text(encoding="utf-8")
    except OSError:
        return None
    head = text.split("\n\n", 1)[0]       # (the headers end at the first blank line)
    return [line.split(":", 1)[1].strip() for line in head.splitlines() if line.startswith("Requires-Dist:")]


def files(name: str) -> Optional[list]:
    """The files RECORD lists (str paths, joined to the folder's directory and normalised),
    or None."""
    folder = dist_info(name)
    if folder is None:
        return None
    import csv
    try:
        with open(folder / "RECORD", encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, csv.Error):
        return None
    base = str(folder.parent)
    return [os.path.normpath(os.path.join(base, row[0])) for row in rows if row]
