"""The weight arena (``dynashape.weight_arena``): 64-byte aligned buffers carved in order out
of 2 MiB-aligned chunks, a chunk of its own for a large request, nothing resident until
written, thread safety; and ``ctx.services.weight_buffer`` outside a compiled program."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from dynashape.node import NodeServices
from dynashape.registry import get_registry
from dynashape.weight_arena import ALIGN, HUGE_PAGE, WeightArena, aligned_empty


def test_buffers_follow_each_other_in_the_chunk_each_aligned_to_a_cache_line():
    arena = WeightArena(chunk_bytes=1 << 20)
    sizes = [100, 64, 1, 4096, 130]
    bufs = [arena.allocate(n) for n in sizes]
    assert [b.nbytes for b in bufs] == sizes and all(b.dtype == np.uint8 for b in bufs)
    addresses = [b.ctypes.data for b in bufs]
    assert all(a % ALIGN == 0 for a in addresses)
    # each starts where the previous one ends, rounded up to 64 bytes: 100 -> 128, 1 -> 64
    assert np.diff(addresses).tolist() == [128, 64, 64, 4096]
    assert addresses[0] % HUGE_PAGE == 0         # the chunk's usable part starts on a huge page
    assert arena.handed_out == sum(sizes)


def test_a_request_that_does_not_fit_opens_a_new_chunk_and_a_large_one_gets_its_own():
    arena = WeightArena(chunk_bytes=2 * HUGE_PAGE)   # 4 MiB chunks
    a = arena.allocate(900 << 10)
    b = arena.allocate(900 << 10)
    own = arena.allocate(1500 << 10)             # a quarter chunk or more: a chunk of its own
    c = arena.allocate(900 << 10)                # ... and the current chunk goes on being filled
    d = arena.allocate(900 << 10)                # 3600 KiB of 4096: still fits
    assert [x.ctypes.data - a.ctypes.data for x in (b, c, d)] == [900 << 10, 1800 << 10, 2700 << 10]
    assert own.ctypes.data % HUGE_PAGE == 0 and not np.shares_memory(own, np.asarray(a.base))
    e = arena.allocate(900 << 10)                # does not fit: a new chunk
    assert e.ctypes.data % HUGE_PAGE == 0 and not np.shares_memory(e, np.asarray(a.base))
    assert arena.handed_out == 5 * (900 << 10) + (1500 << 10)


def test_the_buffers_are_writable_and_independent():
    arena = WeightArena(chunk_bytes=1 << 16)
    bufs = [arena.allocate(n) for n in (10, 70, 3000)]
    for i, b in enumerate(bufs):
        b[:] = i + 1
    assert [int(b.min()) for b in bufs] == [1, 2, 3] and [int(b.max()) for b in bufs] == [1, 2, 3]
    f = bufs[2][:2048].view(np.float32)          # 64-byte aligned: views as any dtype
    f[:] = 1.5
    assert f.sum() == 1.5 * 512


def test_a_negative_size_is_refused_and_zero_bytes_is_an_empty_buffer():
    arena = WeightArena()
    with pytest.raises(ValueError, match="negative size"):
        arena.allocate(-1)
    assert arena.allocate(0).nbytes == 0


def test_concurrent_allocations_never_overlap():
    arena = WeightArena(chunk_bytes=1 << 18)
    got: list = []

    def grab():
        got.extend(arena.allocate(1000 + 64 * (i % 7)) for i in range(200))   # (kept alive)

    threads = [threading.Thread(target=grab) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = sorted((b.ctypes.data, b.ctypes.data + b.nbytes) for b in got)
    assert len(spans) == 800
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))


def test_aligned_empty_and_the_services_outside_a_program_give_buffers_of_their_own():
    a = aligned_empty(100)
    assert a.nbytes == 100 and a.ctypes.data % ALIGN == 0
    services = NodeServices({"": 17}, get_registry())
    b, c = services.weight_buffer(300), services.weight_buffer(300)
    assert b.nbytes == c.nbytes == 300 and b.ctypes.data % ALIGN == 0
    assert not np.shares_memory(b, c)
