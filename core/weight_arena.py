"""The weight arena: the memory a session's kernels pack constant weights into, laid out
in the order the program makes them, in large chunks backed by transparent huge pages.

Why: a GEMM of few rows (a decode step, a batch of one short sequence) streams every weight
of the model once per run, from the last-level cache or from memory. With each packed weight
in an allocation of its own, mapped in 4 KiB pages, the core takes a TLB miss and a page walk
every 4 KiB of the stream; on MiniLM-L6 at batch 1, 16 tokens that cost ~10% of the run
(``benchmarks/realsize.py``). Weights carved one after the other out of 2 MiB-aligned chunks
advised ``MADV_HUGEPAGE`` take one TLB entry per 2 MiB, and the next node's weight follows
the previous one in memory.

Memory: a chunk is reserved, not touched; only the bytes handed out become resident (at
most the rest of the huge page the last of them ends in, per shared chunk: a buffer with a
chunk of its own has its tail on small pages). The chunks live as long as the
weights carved from them (each handed-out array is a view that keeps its chunk alive), so an
arena owned by a prepared graph goes with its session.
"""
from __future__ import annotations

import ctypes
import functools
import sys
import threading
from typing import Optional

import numpy as np

__all__ = ["WeightArena", "aligned_empty", "CHUNK_BYTES", "HUGE_PAGE", "ALIGN"]

#: the size of a chunk (address space reserved; resident only where handed out)
CHUNK_BYTES = 64 << 20
#: the transparent huge page size on x86-64 and most aarch64 kernels
HUGE_PAGE = 2 << 20
#: the alignment of every handed-out buffer (a cache line; what oneDNN's kernels want)
ALIGN = 64
#: madvise(2) advice asking for transparent huge pages (Linux)
MADV_HUGEPAGE = 14


def _madvise_hugepage(address: int, length: int) -> None:
    """Ask the kernel to back ``[address, address + length)`` with huge pages (Linux; a
    kernel without transparent huge pages, or with them set to ``never``, ignores it)."""
    libc = _libc()
    if libc is not None and length > 0:
        libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(length), ctypes.c_int(MADV_HUGEPAGE))


@functools.lru_cache(maxsize=None)
def _libc() -> Optional[ctypes.CDLL]:
    """The C library of this process (Linux), None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def aligned_empty(nbytes: int) -> np.ndarray:
    """An uninitialised ``uint8`` buffer of ``nbytes`` of its own, its address a multiple of 64."""
    raw = np.empty(int(nbytes) + ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + int(nbytes)]


class WeightArena:
    """A bump allocator of uninitialised, 64-byte aligned ``uint8`` buffers.

    ``allocate(nbytes)`` returns a buffer of exactly ``nbytes`` carved from the current chunk,
    or from a new one where it does not fit; a request of a quarter chunk or more gets a chunk
    of its own (aligned the same way), so the chunk being filled is not abandoned for it.
    Thread-safe. Raises ``ValueError`` for a negative size and ``MemoryError`` where numpy
    cannot reserve the chunk.
    """

    __slots__ = ("chunk_bytes", "_chunk", "_used", "_lock", "handed_out")

    def __init__(self, chunk_bytes: int = CHUNK_BYTES):
        self.chunk_bytes = int(chunk_bytes)
        self._chunk: Optional[np.ndarray] = None     # the 2 MiB-aligned usable part of the current chunk
        self._used = 0
        self._lock = threading.Lock()
        self.handed_out = 0         # bytes handed out, total

    def allocate(self, nbytes: int) -> np.ndarray:
        """An uninitialised ``uint8`` buffer of ``nbytes``, its address a multiple of 64."""
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"WeightArena.allocate: a negative size ({nbytes} bytes)")
        padded = nbytes + (-nbytes) % ALIGN
        with self._lock:
            self.handed_out += nbytes
            if padded >= self.chunk_bytes // 4:
                return self._new_chunk(padded)[:nbytes]
            if self._chunk is None or self._used + padded > self._chunk.nbytes:
                self._chunk, self._used = self._new_chunk(self.chunk_bytes), 0
            start = self._used
            self._used += padded
            return self._chunk[start:start + nbytes]

    def _new_chunk(self, nbytes: int) -> np.ndarray:
        # huge pages only where they are whole: the tail of a chunk of its own stays on small
        # pages, or the huge page it ends in would make up to 2 MiB past the weight resident
        raw = np.empty(nbytes + HUGE_PAGE, np.uint8)
        start = (-raw.ctypes.data) % HUGE_PAGE
        chunk = raw[start:start + nbytes]
        _madvise_hugepage(chunk.ctypes.data, nbytes - nbytes % HUGE_PAGE)
        return chunk
