"""Compiled models kept for the next session of the same model in this process.

A session's work before its first run (preparing, folding, rewriting and compiling the
graph, prepacking weights) depends only on the model and on the options that change what
is compiled. A second :class:`~dynashape.session.InferenceSession` of the same model with
the same such options takes what the first one compiled: the prepared graph (its constants
and prepacked weights: held once, not twice), the compiled programs and the plans made so
far (a signature either session planned is a cached plan for both), and the execution
contexts (arenas and buffers bound to those plans: a new session's first run at a planned
shape is a warm run, and the sessions hold one arena between them, not one each). Each
session keeps its own engine (statistics, profiler, warnings).

The same model means: the same file (real path, size, modification time and inode) for a
path, the same bytes (a BLAKE2 digest) for bytes up to :data:`MAX_HASHED_BYTES`; a
``ModelProto`` (mutable), larger bytes and models with external data (files that may change
on their own) are never shared. An entry lives as long as a session holding it
(a weak reference): no model stays in memory after its last session. :func:`clear` makes
the next sessions compile anew (after changing process state a compilation depends on and
the key cannot see, such as a module setting of a kernel plugin).
"""
from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["CompiledModel", "model_key", "lookup", "store", "clear", "MAX_HASHED_BYTES"]

#: the largest serialized model given as bytes whose digest is computed to share its compilation
MAX_HASHED_BYTES = 256 << 20


@dataclass(eq=False)
class CompiledModel:
    """What sessions of one model with one set of compile options share."""

    graph: Any                  # the PreparedGraph, folded, rewritten, constants released
    rewrites: Any               # the RewriteReport
    folded_nodes: int
    override_base: Any          # the graph overridable initializers compile from (or None)
    #: the engine's programs per dim-pattern, and its plans per signature (engine.py)
    programs: dict = field(default_factory=dict)
    #: the runners of the subgraphs its programs share (Program._compile_body)
    bodies: dict = field(default_factory=dict)
    plans: OrderedDict = field(default_factory=OrderedDict)
    lock: Any = field(default_factory=threading.Lock)
    #: the execution contexts (arenas and bound buffers), all and those not running now
    contexts: list = field(default_factory=list)
    idle_contexts: list = field(default_factory=list)


_cache: "weakref.WeakValueDictionary[tuple, CompiledModel]" = weakref.WeakValueDictionary()
_lock = threading.Lock()


def model_key(source: Any) -> Optional[tuple]:
    """What identifies the model ``source`` names (None: it is never shared)."""
    if isinstance(source, (str, os.PathLike)):
        try:
            path = os.path.realpath(os.fspath(source))
            st = os.stat(path)
        except (OSError, TypeError, ValueError):
            return None
        return ("path", path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = memoryview(source)
        if data.nbytes > MAX_HASHED_BYTES:
            return None
        import hashlib   # (here: a model read from a path never needs it, and it costs ~2 ms to import)
        return ("bytes", data.nbytes, hashlib.blake2b(data, digest_size=20).digest())
    return None


def lookup(key: tuple) -> Optional[CompiledModel]:
    with _lock:
        return _cache.get(key)


def store(key: tuple, compiled: CompiledModel) -> CompiledModel:
    """Keep ``compiled`` under ``key`` unless another session stored one first (returned then)."""
    with _lock:
        found = _cache.get(key)
        if found is None:
            _cache[key] = found = compiled
        return found


def clear() -> None:
    """Forget every kept compilation: the next session of any model compiles its own (the
    sessions alive keep theirs)."""
    with _lock:
        _cache.clear()
