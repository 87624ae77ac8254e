"""The process environment of every benchmark, set before numpy is imported.

Each script imports this module first (``import _env`` before ``import _common``, which
imports numpy; ``_common`` imports it too). It
  * removes OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE from os.environ: this machine may set them
    for old OpenBLAS builds, and with them numpy's MatMul runs ~1.5x slower;
  * sets OPENBLAS_NUM_THREADS and OMP_NUM_THREADS to the script's ``--threads N`` (read off
    sys.argv here, since OpenBLAS sizes its pool when numpy loads; default 1: single-threaded
    BLAS, like ONNX Runtime with one intra-op thread); ``--threads 0`` removes them instead:
    the engines' default thread counts (BLAS one thread per core, onnxruntime's default pool).
  * sets DYNASHAPE_COMPILED_WAIT=1 (unless the environment sets it): sessions wait for the
    compiled kernels while numba starts (``dynashape.ops_builtin.fast.tiering``), so a benchmark of
    the steady state times them and not their numpy path; ``coldstart.py`` and the cold pass
    of ``decode.py``, which measure what a default session meets, take it out again
    (``COLD_START``).
OpenBLAS reads these when it is loaded, so importing this after numpy is too late: TOO_LATE
says so and the header prints it. Subprocesses inherit the cleaned environment.
"""
from __future__ import annotations

import os
import sys

DROPPED_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def _threads_argument(argv: list) -> int:
    """The value of ``--threads N`` / ``--threads=N`` in argv (N >= 0), else 1."""
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--threads=") else \
            argv[i + 1] if arg == "--threads" and i + 1 < len(argv) else None
        if value is not None and value.isdigit():
            return int(value)
    return 1


#: intra-op threads of both engines in this benchmark process (``--threads N``; 0: their defaults)
THREADS = _threads_argument(sys.argv)
THREAD_VARS = {"OPENBLAS_NUM_THREADS": str(THREADS), "OMP_NUM_THREADS": str(THREADS)}

#: set by this module (the steady-state benchmarks); a cold-start measurement removes it
COLD_START = "DYNASHAPE_COMPILED_WAIT" not in os.environ
os.environ.setdefault("DYNASHAPE_COMPILED_WAIT", "1")

#: the variables removed from this process's environment, with the values they had
REMOVED = {k: os.environ.pop(k) for k in DROPPED_VARS if k in os.environ}
if THREADS:
    os.environ.update(THREAD_VARS)
else:
    for _name in THREAD_VARS:
        os.environ.pop(_name, None)
#: True when numpy was imported before this module (the settings may not have applied)
TOO_LATE = "numpy" in sys.modules


def summary() -> str:
    """One line for the header: what was set and removed."""
    removed = ", ".join(f"{k}={v}" for k, v in REMOVED.items()) or "none set"
    text = (" ".join(f"{k}={os.environ.get(k, 'unset')}" for k in THREAD_VARS)
            + f"  removed {'/'.join(DROPPED_VARS)}: {removed}")
    if TOO_LATE:
        text += "  (WARNING: numpy was imported before benchmarks/_env.py: these may not apply)"
    return text
