"""Loops split over threads: one compiled function serves one thread and many.

A threaded loop is written with one ``for ... in prange(n):`` over independent tasks (planes,
channel blocks, directions). :func:`threaded` compiles it once, with ``nogil``, as a function
of two more arguments, ``part`` and ``parts``, that runs only the tasks
``[part * n // parts, (part + 1) * n // parts)``; the ``prange`` marks where to cut. Called
from a run that may use ``t > 1`` intra-op threads (``SessionOptions.intra_op_num_threads``,
:func:`dynashape.threads.intra_op_threads`), the calling thread runs part 0 and ``t - 1``
worker threads of this module's pool run the others, outside the GIL; otherwise the caller
runs the one part alone and no thread starts. Where the loop's source cannot be read (a frozen
application), it is compiled as written and runs whole on the calling thread.

Why not numba's ``parallel=True``: its parfors pipeline compiles a loop of this size in 8-16 s
per signature where the plain loop takes a fraction of that (measured: ``conv2d_direct``,
``conv_transpose2d_direct``, ``col2im2d``), on every install and for every new signature; and
its code is a second compilation of the loop, so one thread and two did not always round alike.
Here every thread count runs the same machine code, task by task, so results do not depend on
the number of threads.
"""
from __future__ import annotations

import ast
import inspect
import os
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from types import FunctionType

from numba import njit

from dynashape.threads import intra_op_threads

__all__ = ["ThreadedLoop", "threaded"]

_PART, _PARTS, _TASKS = "_part", "_parts", "_tasks"


class _SplitPrange(ast.NodeTransformer):
    """``for i in prange(n): ...`` -> ``_tasks = n`` then ``for i in range(part's share): ...``."""

    def __init__(self):
        self.found = 0

    def visit_For(self, node: ast.For):
        self.generic_visit(node)
        it = node.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "prange"
                and len(it.args) == 1 and not it.keywords):
            return node
        self.found += 1
        share = ast.parse(f"range({_PART} * {_TASKS} // {_PARTS}, ({_PART} + 1) * {_TASKS} // {_PARTS})",
                          mode="eval").body
        node.iter = share
        tasks = ast.Assign(targets=[ast.Name(_TASKS, ast.Store())], value=it.args[0])
        for new in (tasks, share):
            ast.copy_location(new, it)
            ast.fix_missing_locations(new)
        return [tasks, node]


def _split_function(fn: FunctionType) -> FunctionType:
    """``fn`` with its one ``prange`` loop cut into parts (two arguments appended). The code
    keeps ``fn``'s file, name and line numbers, so tracebacks and numba's on-disk cache
    (keyed by the source file and the function's qualified name) see the original."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    func = tree.body[0]
    if not isinstance(func, ast.FunctionDef):
        raise TypeError(f"threaded: {fn.__qualname__} is not a plain function")
    func.decorator_list = []
    split = _SplitPrange()
    split.visit(func)
    if split.found != 1:
        raise TypeError(f"threaded: {fn.__qualname__} needs exactly one `for ... in prange(n)` loop "
                        f"(found {split.found})")
    func.args.args += [ast.arg(_PART), ast.arg(_PARTS)]
    ast.fix_missing_locations(func)
    module = compile(tree, fn.__code__.co_filename, "exec")
    code = next(c for c in module.co_consts if getattr(c, "co_name", None) == fn.__name__)
    out = FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__qualname__, out.__doc__, out.__module__ = fn.__qualname__, fn.__doc__, fn.__module__
    return out


class _Workers:
    """The pool the parts beyond the caller's run on: grown to the most threads a run asked
    for, made again in a forked child (a fork copies the pool but not its threads)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._size, self._pid = 0, 0

    def get(self, size: int) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None or self._pid != os.getpid() or self._size < size:
                if self._pool is not None and self._pid == os.getpid():
                    self._pool.shutdown(wait=False)
                self._pool = ThreadPoolExecutor(size, thread_name_prefix="dynashape-loop")
                self._size, self._pid = size, os.getpid()
            return self._pool


_WORKERS = _Workers()


class ThreadedLoop:
    """A loop compiled once (``nogil``, see the module docstring) and run in ``parts`` parts:
    one part on the calling thread when the run allows one thread (or there is one task),
    else one part per intra-op thread. ``most_parts``: the most parts one call has run in this
    process (what tests read to see that a loop was split)."""

    def __init__(self, fn: FunctionType, flags: dict):
        try:
            split = _split_function(fn)
        except OSError:   # no source to cut (a frozen application): the whole loop on the caller
            split = None
        #: None: the loop runs whole on the calling thread, ``prange`` as ``range``
        self.compiled = njit(nogil=True, **flags)(split) if split is not None else None
        self._whole = njit(nogil=True, **flags)(fn) if split is None else None
        self.most_parts = 0
        self.__doc__ = fn.__doc__

    def run(self, tasks: int, *args):
        """Call it with ``tasks`` known to the caller: no more parts than tasks."""
        return self._parts(min(tasks, intra_op_threads()), args)

    def __call__(self, *args):
        return self._parts(intra_op_threads(), args)

    def _parts(self, parts: int, args: tuple):
        compiled = self.compiled
        if compiled is None:
            self.most_parts = max(self.most_parts, 1)
            return self._whole(*args)
        if parts > self.most_parts:
            self.most_parts = parts
        if parts <= 1:
            return compiled(*args, 0, 1)
        pool = _WORKERS.get(parts - 1)
        others = [pool.submit(compiled, *args, part, parts) for part in range(1, parts)]
        try:
            compiled(*args, 0, parts)
        finally:
            for done in others:
                done.result()   # (the loops do not raise; an error in a part is re-raised here)
        return None


def threaded(flags: dict):
    """Decorator: ``@threaded(FMA_JIT)`` makes a :class:`ThreadedLoop` of a loop function."""
    return lambda fn: ThreadedLoop(fn, flags)
