"""Loops split over threads (``dynashape.ops_builtin.fast.loops.threaded``): one compiled function cut
into parts at its ``prange``, the same results for every thread count, the parts on worker
threads only where the run allows more than one, and a fresh pool in a forked child."""
from __future__ import annotations

import os
import signal

import numpy as np
import pytest

pytest.importorskip("numba")
from numba import prange  # noqa: E402

from dynashape import threads  # noqa: E402
from dynashape.ops_builtin.fast.loops.threaded import ThreadedLoop, threaded  # noqa: E402

FLAGS = {"error_model": "numpy"}   # (no on-disk cache for a test module's loops)


@threaded(FLAGS)
def _square_plus_task(x, out):
    """out[i] = x[i] ** 2 + i for every task i; a prange nested under an if."""
    n = x.shape[0]
    if n > 0:
        for i in prange(n):
            out[i] = x[i] * x[i] + i


@pytest.fixture
def run_threads(monkeypatch):
    def set_threads(n: int) -> None:
        monkeypatch.setattr(threads._run, "threads", n, raising=False)
    return set_threads


@pytest.mark.parametrize("n_threads", [1, 2, 3, 7])
@pytest.mark.parametrize("n", [0, 1, 2, 5, 1000])
def test_every_thread_count_computes_every_task_once(run_threads, n_threads, n):
    run_threads(n_threads)
    x = np.arange(n, dtype=np.float64) - 3.5
    out = np.full(n, -1.0)
    _square_plus_task(x, out)
    np.testing.assert_array_equal(out, x * x + np.arange(n))


def _plain_square_plus_task(x, out):
    n = x.shape[0]
    for i in prange(n):
        out[i] = x[i] * x[i] + i


def test_the_parts_are_as_many_as_the_threads_but_never_more_than_the_tasks(run_threads):
    loop = ThreadedLoop(_plain_square_plus_task, FLAGS)
    x = np.ones(10)
    out = np.empty(10)
    run_threads(1)
    loop(x, out)
    assert loop.most_parts == 1
    run_threads(4)
    loop.run(3, x, out)
    assert loop.most_parts == 3
    loop(x, out)
    assert loop.most_parts == 4
    np.testing.assert_array_equal(out, 1.0 + np.arange(10))


def test_the_compiled_function_keeps_the_sources_file_name_and_lines():
    """numba's on-disk cache keys a function by its file and qualified name, and tracebacks
    point into the original source."""
    import linecache
    fn = _square_plus_task.compiled.py_func
    assert fn.__code__.co_filename == __file__
    assert fn.__qualname__ == "_square_plus_task" and fn.__module__ == __name__
    assert fn.__code__.co_varnames[:4] == ("x", "out", "_part", "_parts")
    assert linecache.getline(__file__, fn.__code__.co_firstlineno).startswith("def _square_plus_task(x, out):")


def _no_prange(x):
    for i in range(x.shape[0]):
        x[i] = 0


def _two_pranges(x):
    for i in prange(x.shape[0]):
        x[i] = 0
    for i in prange(x.shape[0]):
        x[i] = 1


@pytest.mark.parametrize("fn,found", [(_no_prange, 0), (_two_pranges, 2)])
def test_a_loop_without_exactly_one_prange_is_refused_at_decoration(fn, found):
    with pytest.raises(TypeError, match=rf"exactly one `for \.\.\. in prange\(n\)` loop \(found {found}\)"):
        ThreadedLoop(fn, FLAGS)


def test_a_one_thread_run_or_one_task_hands_nothing_to_the_worker_threads(run_threads, monkeypatch):
    """One intra-op thread, or one task, runs on the caller: the pool is never asked for
    (so a process that runs serially never starts a worker thread)."""
    from dynashape.ops_builtin.fast.loops import threaded as threaded_module

    class NoWorkers:
        def get(self, size):
            raise AssertionError(f"a serial call asked for {size} worker thread(s)")
    monkeypatch.setattr(threaded_module, "_WORKERS", NoWorkers())
    loop = ThreadedLoop(_plain_square_plus_task, FLAGS)
    x, out = np.arange(64.0), np.empty(64)
    run_threads(1)
    loop(x, out)
    run_threads(4)
    loop.run(1, x, out)
    np.testing.assert_array_equal(out, x * x + np.arange(64))
    assert loop.most_parts == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_runs_its_parts_on_a_pool_of_its_own(run_threads):
    """A fork copies the pool but not its threads: the child makes its own (the parent's
    copy would queue the parts for threads that do not exist, and wait for ever)."""
    run_threads(2)
    x = np.arange(100, dtype=np.float64)
    out = np.empty(100)
    _square_plus_task(x, out)        # the parent's pool exists
    pid = os.fork()
    if pid == 0:   # the child: give up after 30 s rather than hang the suite
        signal.alarm(30)
        try:
            child = np.empty(100)
            _square_plus_task(x, child)
            os._exit(0 if np.array_equal(child, x * x + x) else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_a_loop_without_source_runs_whole_on_the_calling_thread(run_threads):
    """Where the source cannot be read (a function made by exec, a frozen application) the
    loop cannot be cut: it runs whole, ``prange`` as ``range``, on the calling thread."""
    namespace = {"prange": prange}
    exec("def no_source(x, out):\n    for i in prange(x.shape[0]):\n        out[i] = 2 * x[i]\n", namespace)
    loop = ThreadedLoop(namespace["no_source"], FLAGS)
    assert loop.compiled is None
    run_threads(4)
    x, out = np.arange(9.0), np.empty(9)
    loop(x, out)
    np.testing.assert_array_equal(out, 2 * x)
    assert loop.most_parts == 1
