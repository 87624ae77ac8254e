"""onnx's backend node cases, generated once per onnx/numpy version instead of once per process.

onnx ships its node tests as generators: ``load_model_tests(kind="node")`` imports every module of
``onnx.backend.test.case.node``, whose classes run their ``export*`` methods (the reference
implementation computing each expected output) when they are created. That is ~15 s per process,
paid by every pytest-xdist worker of every suite run, while reading the same cases back from a
file takes ~0.1 s. The cases are kept in the temporary directory, under a name made of everything
that could change them; a file that cannot be read is generated again. Inputs that onnx draws
unseeded are the same draw in every process that reads the file, and equally random.
"""
from __future__ import annotations

import os
import pickle
import platform
import sys
import tempfile

import ml_dtypes
import numpy as np
import onnx
import onnx.backend.test.loader as loader

CACHE_DIR = os.path.join(tempfile.gettempdir(), "dynashape-tests")


def cache_path() -> str:
    """The file of the node cases for this Python, onnx, numpy and ml_dtypes."""
    key = "-".join((platform.python_implementation(), "%d.%d" % sys.version_info[:2],
                    "onnx" + onnx.__version__, "numpy" + np.__version__,
                    "ml_dtypes" + ml_dtypes.__version__, "ml" if onnx.ONNX_ML else "noml"))
    return os.path.join(CACHE_DIR, f"onnx-node-cases-{key}.pickle")


def _read(path: str) -> list | None:
    try:
        with open(path, "rb") as f:
            cases = pickle.load(f)  # noqa: S301 - written by _write below, in this user's temp dir
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError, ValueError):
        return None
    return cases if isinstance(cases, list) else None


def _write(path: str, cases: list) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.{os.getpid()}.partial"
    try:
        with open(partial, "wb") as f:
            pickle.dump(cases, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, path)  # two processes writing at once: the last whole file stays
    except OSError:
        if os.path.exists(partial):
            os.remove(partial)


def install() -> None:
    """Make ``load_model_tests(kind="node")`` (and so ``BackendTest``) read the cached cases,
    generating and storing them on the first call of a new version."""
    generate = getattr(loader, "load_node_model_tests", None)
    if generate is None or getattr(generate, "reads_the_cache", False):
        return  # an onnx whose node cases are files on disk, or installed already

    cases: list | None = None

    def load_node_model_tests() -> list:
        nonlocal cases
        if cases is None:
            path = cache_path()
            cases = _read(path)
            if cases is None:
                cases = list(generate())
                _write(path, cases)
        return cases

    load_node_model_tests.reads_the_cache = True  # type: ignore[attr-defined]
    loader.load_node_model_tests = load_node_model_tests
