"""Helpers shared by the benchmark scripts: zoo location, feeds, sessions, timing, tables.

The process environment (single-threaded BLAS, OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE removed) is
set by ``_env``, which each script imports first; this module imports it too, before numpy.
"""
from __future__ import annotations

import _env  # first, before numpy: see _env.py

# isort: split
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
ZOO_DIR = REPO.parent / "shared" / "zoo"
ZOO2_DIR = ZOO_DIR / "zoo2"
SKIP_GROUPS = {"ort-optimized"}


# --------------------------------------------------------------------------- zoo
def require_zoo2() -> Path:
    """The zoo2 folder (../shared/zoo/zoo2); prints a message and exits 0 when it is absent."""
    if not (ZOO2_DIR / "zoo2.json").exists() or not (ZOO2_DIR / "make_inputs.py").exists():
        print(f"model zoo2 not found at {ZOO2_DIR} (needs zoo2.json and make_inputs.py): nothing to benchmark")
        sys.exit(0)
    return ZOO2_DIR


def zoo2_catalog() -> dict:
    """zoo2.json as {key: entry} (entries with a 'file')."""
    import json
    return {k: v for k, v in json.loads((ZOO2_DIR / "zoo2.json").read_text()).items() if "file" in v}


def zoo2_make_inputs():
    """zoo2's make_inputs module, loaded under its own name (the zoo's make_inputs.py has the same
    module name, and both may be needed in one process)."""
    import importlib.util
    name = "_zoo2_make_inputs"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ZOO2_DIR / "make_inputs.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[name] = mod
    return sys.modules[name]


def require_zoo() -> Path:
    """The zoo folder; prints a message and exits 0 when it is absent."""
    if not (ZOO_DIR / "zoo.json").exists() or not (ZOO_DIR / "make_inputs.py").exists():
        print(f"model zoo not found at {ZOO_DIR} (needs zoo.json and make_inputs.py): nothing to benchmark")
        sys.exit(0)
    if str(ZOO_DIR) not in sys.path:
        sys.path.insert(0, str(ZOO_DIR))
    return ZOO_DIR


def zoo_catalog() -> dict:
    """zoo.json as {key: entry}, without the skipped groups (ort-optimized)."""
    import make_inputs as mi  # from ZOO_DIR, see require_zoo
    return {k: v for k, v in mi.load_catalog().items()
            if "file" in v and v.get("group") not in SKIP_GROUPS}


def resolve_model(spec: str) -> tuple[str, Path, dict]:
    """(label, path, the catalog's small-shape dims) of a zoo key, a zoo2 key or an .onnx path
    (a path relative to ../shared/zoo is looked for there too).

    Raises:
        SystemExit: nothing of that name.
    """
    for folder, catalog_file in ((ZOO_DIR, "zoo.json"), (ZOO2_DIR, "zoo2.json")):
        catalog = folder / catalog_file
        if catalog.exists():
            entry = json.loads(catalog.read_text()).get(spec)
            if entry and "file" in entry:
                return spec, folder / entry["file"], dict(entry.get("shapes", {}).get("small", {}))
    for path in (Path(spec), ZOO_DIR / spec):
        if path.suffix == ".onnx" and path.exists():
            return path.stem, path, {}
    sys.exit(f"--models: {spec!r} is no zoo or zoo2 key and no .onnx file")


def make_feeds(model_path, shape: str | dict = "small") -> dict:
    """Deterministic feeds: a named shape of zoo.json or a dict of dims."""
    from make_inputs import make_inputs
    if isinstance(shape, dict):
        return make_inputs(model_path, shape)
    return make_inputs(model_path, shape=shape)


# --------------------------------------------------------------------------- engines
def dynashape_session(model, allocator: str = "pool", optimize: bool = True):
    """dynashape with ``--threads N`` intra-op threads (BLAS and the compiled kernels) when N > 1;
    with one, BLAS is single-threaded by _env and the session sets nothing."""
    import dynashape
    so = None
    if _env.THREADS > 1:
        so = dynashape.SessionOptions()
        so.intra_op_num_threads = _env.THREADS
    return dynashape.InferenceSession(model, so, allocator=allocator, optimize=optimize)


def ort_session(model):
    """ONNX Runtime, CPU, ``--threads N`` intra-op threads (default 1) and one inter-op thread.
    model: path or ModelProto."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = _env.THREADS
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if not isinstance(model, (str, bytes, Path)):
        model = model.SerializeToString()
    return ort.InferenceSession(str(model) if isinstance(model, Path) else model, so,
                                providers=["CPUExecutionProvider"])


# --------------------------------------------------------------------------- timing
def median_ms(fn: Callable[[], object], *, warmup: int = 1, min_runs: int = 3, max_runs: int = 50,
              target_s: float = 0.3) -> tuple[float, int]:
    """Median wall time of fn() in ms, after `warmup` untimed calls. Runs until the timed runs
    add up to target_s, at least min_runs and at most max_runs times. Returns (ms, runs)."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    total = 0.0
    while len(times) < max_runs and (len(times) < min_runs or total < target_s):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        times.append(dt)
        total += dt
    return statistics.median(times) * 1e3, len(times)


def max_abs_diff(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    """Largest |a - b| over all outputs (inf on a shape mismatch, nan if either has NaN)."""
    worst = 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            return float("inf")
        if x.size == 0:
            continue
        if x.dtype.kind in "fc" or y.dtype.kind in "fc":
            d = float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64))))
        elif x.dtype.kind == "b":
            d = float(np.count_nonzero(x != y))
        else:
            d = float(np.max(np.abs(x.astype(np.int64) - y.astype(np.int64))))
        worst = d if np.isnan(d) else max(worst, d)
        if np.isnan(worst):
            return worst
    return worst


# --------------------------------------------------------------------------- output
def header(title: str) -> None:
    """Title, machine and package versions, and the load average (the machine is shared)."""
    import dynashape
    import onnx
    import onnxruntime
    try:
        load = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        load = ["?"]
    print(f"== {title}")
    print(f"   {time.strftime('%Y-%m-%d %H:%M:%S')}  python {platform.python_version()}  numpy {np.__version__}  "
          f"onnx {onnx.__version__}  onnxruntime {onnxruntime.__version__}  dynashape {dynashape.__version__}")
    print(f"   cpus {os.cpu_count()}  loadavg {' '.join(load)}  "
          f"threads: intra-op {_env.THREADS} (both engines), inter-op 1")
    print(f"   env: {_env.summary()}")
    print(f"   BLAS: {blas_info()}")
    print()


def blas_info() -> str:
    """The BLAS libraries loaded in this process (threadpoolctl): internal_api, version,
    architecture (OpenBLAS corename) and threads, e.g. 'openblas 0.3.27 SkylakeX threads=1'."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed: pip install threadpoolctl)"
    libs = [i for i in threadpool_info() if i.get("user_api") == "blas"] or threadpool_info()
    if not libs:
        return "none loaded"
    return "; ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture') or i.get('corename') or '?'} "
                     f"threads={i.get('num_threads')}" for i in libs)


def print_stats(label: str, stats) -> None:
    """One line of a dynashape session's SessionStats."""
    per_miss = stats.planning_ms / stats.cache_misses if stats.cache_misses else 0.0
    print(f"session.stats [{label}]: runs={stats.runs} hits={stats.cache_hits} misses={stats.cache_misses} "
          f"planning_ms={stats.planning_ms:.2f} ({per_miss:.3f} ms/miss) execution_ms={stats.execution_ms:.1f} "
          f"symbolic_plans={stats.symbolic_plans} resolved_plans={stats.resolved_plans} "
          f"failed_runs={stats.failed_runs}")


def verdict(ok: bool | None) -> str:
    """'met' / 'NOT met' against a target ('-' when not measured)."""
    return "-" if ok is None else ("met" if ok else "NOT met")


def fmt(x, digits: int = 3) -> str:
    """Numbers for tables: fixed width-friendly, '-' for None."""
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "nan"
    if x == float("inf"):
        return "inf"
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:.0f}"
    if ax >= 100:
        return f"{x:.1f}"
    if ax >= 1e-2:
        return f"{x:.{digits}g}" if ax < 10 else f"{x:.2f}"
    return f"{x:.1e}"


def print_table(headers: Sequence[str], rows: Iterable[Sequence], align: str | None = None) -> None:
    """Aligned text table. align: one char per column, 'l' or 'r' (default: first column l)."""
    rows = [[fmt(c) for c in r] for r in rows]
    align = align or ("l" + "r" * (len(headers) - 1))
    widths = [max([len(h)] + [len(r[i]) for r in rows if i < len(r)]) for i, h in enumerate(headers)]

    def line(cells):
        out = []
        for i, c in enumerate(cells):
            out.append(c.ljust(widths[i]) if align[i] == "l" else c.rjust(widths[i]))
        return "  ".join(out).rstrip()

    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))
    print()


def short_error(exc: BaseException, width: int = 90) -> str:
    return short_error_text(f"{type(exc).__name__}: {exc}".replace("\n", " "), width)


def short_error_text(text: str, width: int = 90) -> str:
    """A message cut to width characters ('...' at the end when cut)."""
    return text if len(text) <= width else text[: width - 3] + "..."


def fmt_ms(ms) -> str:
    """Milliseconds with enough decimals for µs-scale runs: 578.3, 17.91, 0.385, 0.0082."""
    if ms is None:
        return "-"
    if ms >= 100:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    if ms >= 0.1:
        return f"{ms:.3f}"
    return f"{ms:.4f}"
